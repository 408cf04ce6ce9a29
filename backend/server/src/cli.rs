//! The command-line clients of a running lockscope: `lockscope locks` and `lockscope release`
//! (and the HTTP client of `lockscope top`, whose screens are the `lockscope-tui` crate's).
//!
//! They speak only the HTTP API (the same one the web UI uses), so scripts need no access to
//! the watched systems and every release goes through the guarded, audited admin router.

use std::time::Duration;

use lockscope_model::wire::{LockView, ReleaseRequest};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot reach lockscope at {url}: {source}")]
    Unreachable { url: String, source: reqwest::Error },
    #[error("lockscope answered {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("unexpected answer from lockscope: {0}")]
    Decode(String),
}

/// Where the CA certificates an `https://` lockscope is checked against come from:
/// `LOCKSCOPE_CA_FILE` (a private CA), else the system's bundle.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn client() -> reqwest::Client {
    builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// The client of a live view (`lockscope top`): the same roots, a bound on connecting, none on
/// the stream, which lasts as long as it is watched.
pub fn stream_client() -> reqwest::Client {
    builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// A client builder trusting `LOCKSCOPE_CA_FILE`, else the system's bundle.
fn builder() -> reqwest::ClientBuilder {
    let mut builder = reqwest::Client::builder();
    let ca_file = std::env::var_os("LOCKSCOPE_CA_FILE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| SYSTEM_CA_BUNDLE.into());
    match std::fs::read(&ca_file).map(|pem| reqwest::Certificate::from_pem_bundle(&pem)) {
        Ok(Ok(roots)) => {
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        Ok(Err(e)) => eprintln!(
            "lockscope: {} holds no usable certificate: {e}",
            ca_file.display()
        ),
        // No bundle: plain HTTP still works, HTTPS will say it cannot verify.
        Err(_) => {}
    }
    builder
}

/// Filters for `lockscope locks`, passed to `GET /api/v1/locks`.
#[derive(Debug, Default, Clone)]
pub struct LockQuery {
    pub source: Option<String>,
    pub backend: Option<String>,
    pub recipe: Option<String>,
    pub q: Option<String>,
}

/// How `lockscope locks` proves it may read: nothing, a bearer token (`[http] read_auth`
/// `bearer_tokens`, `[admin] read_tokens`), or a basic-auth user of `[http] read_auth`.
#[derive(Debug, Clone, Copy, Default)]
pub enum ReadAuth<'a> {
    #[default]
    None,
    Bearer(&'a str),
    Basic {
        user: &'a str,
        password: &'a str,
    },
}

pub async fn list_locks(
    base: &str,
    query: &LockQuery,
    auth: ReadAuth<'_>,
) -> Result<Vec<LockView>, CliError> {
    let url = format!("{}/api/v1/locks", base.trim_end_matches('/'));
    let mut params = Vec::new();
    for (k, v) in [
        ("source", &query.source),
        ("backend", &query.backend),
        ("recipe", &query.recipe),
        ("q", &query.q),
    ] {
        if let Some(v) = v {
            params.push((k, v.as_str()));
        }
    }
    // Every page, each asked from where the one before ended.
    params.push(("limit", "1000"));
    let mut locks = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut page_params = params.clone();
        if let Some(cursor) = &cursor {
            page_params.push(("cursor", cursor.as_str()));
        }
        let request = client().get(&url).query(&page_params);
        let request = match auth {
            ReadAuth::None => request,
            ReadAuth::Bearer(token) => request.bearer_auth(token),
            ReadAuth::Basic { user, password } => request.basic_auth(user, Some(password)),
        };
        let (status, body) = send(&url, request).await?;
        if status != 200 {
            return Err(CliError::Refused {
                status,
                message: body["error"].as_str().unwrap_or("").to_string(),
            });
        }
        let page: Vec<LockView> = serde_json::from_value(body["locks"].clone())
            .map_err(|e| CliError::Decode(e.to_string()))?;
        locks.extend(page);
        match body["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(locks),
        }
    }
}

/// A fixed-width table: the locks that need a look first (longest wait or hold).
pub fn table(mut locks: Vec<LockView>) -> String {
    let oldest = |l: &LockView| {
        l.holders
            .iter()
            .map(|h| h.since_ms)
            .chain(l.waiters.iter().map(|w| w.since_ms))
            .min()
            .unwrap_or(i64::MAX)
    };
    locks.sort_by(|a, b| oldest(a).cmp(&oldest(b)).then(a.id.cmp(&b.id)));
    let mut out = format!(
        "{:<40} {:<12} {:<20} {:<40} {:>10} {:>7}\n",
        "ID", "SOURCE", "RECIPE", "HOLDER", "HELD", "WAITERS"
    );
    for l in &locks {
        let holder = l.holders.first();
        out.push_str(&format!(
            "{:<40} {:<12} {:<20} {:<40} {:>10} {:>7}\n",
            l.id,
            l.source,
            l.recipe,
            holder.map(|h| h.node.as_str()).unwrap_or("-"),
            holder
                .map(|h| format!("{:.1}s", h.held_ms as f64 / 1000.0))
                .unwrap_or_else(|| "-".into()),
            l.waiters.len()
        ));
    }
    out
}

/// `POST /api/v1/locks/{id}/release`; the status and the JSON answer.
pub async fn release(
    base: &str,
    id: &str,
    request: &ReleaseRequest,
    token: &str,
) -> Result<(u16, Value), CliError> {
    let url = format!("{}/api/v1/locks/{id}/release", base.trim_end_matches('/'));
    send(&url, client().post(&url).bearer_auth(token).json(request)).await
}

/// Sends a request; the status and the JSON answer.
async fn send(url: &str, request: reqwest::RequestBuilder) -> Result<(u16, Value), CliError> {
    let resp = request
        .send()
        .await
        .map_err(|source| CliError::Unreachable {
            url: url.to_string(),
            source,
        })?;
    let status = resp.status().as_u16();
    let body: Value = resp
        .json()
        .await
        .map_err(|e| CliError::Decode(e.to_string()))?;
    Ok((status, body))
}
