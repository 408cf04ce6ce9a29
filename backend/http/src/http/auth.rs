//! Who may look: the read credentials (`[http] read_auth`, and the older clear
//! `[admin] read_tokens`) and the probes' own (`[http] metrics_auth`), checked by one layer
//! ([`require_access`]) before any handler. Force releases check their admin token themselves
//! (`http/admin.rs`).
//!
//! What needs what:
//! * `/api/v1/…` reads — with read credentials configured: a read bearer token, an admin
//!   token (header only) or a basic-auth user; `?access_token=` (for `EventSource`, which
//!   cannot set headers) takes read tokens only: URLs end up in proxy and browser logs;
//! * the UI's pages — when `read_auth` has basic-auth users, the same, so the browser asks for
//!   them (and sends them with every request of the page after, event streams included); its
//!   assets stay open;
//! * `/metrics`, `/healthz`, `/readyz` — `metrics_auth`'s credentials when set; otherwise the
//!   probes are open, and `/metrics` (whose labels name lock paths) takes read credentials
//!   when reads need them, unless `[http] metrics_open = true`.
//!
//! A missing or wrong credential is a 401 with a JSON body (`WWW-Authenticate: Basic` when basic
//! users may answer, so browsers prompt); a known token where it is not taken is a 403. Wrong
//! credentials use up the client's failed-authentication budget (`admin.max_failed_auth_per_minute`,
//! shared with force releases; a client is its IPv4 address or its IPv6 /64): a try is taken
//! before a new credential is verified and given back when it passes, so tries in flight count
//! and a burst of any size verifies at most the budget. Past it the client's requests are a 429
//! before their credentials are looked at. Credentials that passed are cached
//! ([`crate::credentials`]) and let in without a try, so bcrypt is paid once per credential;
//! verifications take turns under the process's one bound, and a crowd past it is a 503.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde_json::json;

use crate::admin::Gate;
use crate::credentials::{CredentialSet, Verdict};
use crate::http::proxy::ClientAddr;

/// The credentials each kind of request needs.
#[derive(Debug, Clone)]
pub struct Access {
    /// Read credentials taken in the `Authorization` header: read tokens, admin tokens,
    /// basic-auth users. Empty: reads are open.
    read: CredentialSet,
    /// Read tokens taken from a URL (`?access_token=`).
    url_read: CredentialSet,
    /// Admin tokens: in a URL they are a 403, not a 401.
    admin: CredentialSet,
    /// `/metrics` and the probes; empty: open (but `/metrics` takes read credentials when
    /// reads need them, unless `metrics_open`).
    probes: CredentialSet,
    metrics_open: bool,
    admin_state: Arc<crate::admin::Admin>,
}

impl Access {
    pub fn new(
        http: &crate::config::HttpConfig,
        config: &crate::config::AdminConfig,
        admin: Arc<crate::admin::Admin>,
    ) -> Access {
        let verifier = &admin.verifier;
        let read_auth = http
            .read_auth
            .as_ref()
            .map(|a| a.credentials())
            .unwrap_or_default();
        let old_read = tokens(&config.read_tokens);
        let admin_tokens = tokens(&config.tokens).verified_by(verifier);
        let url_read = CredentialSet::default()
            .and(&read_auth.bearer_only())
            .and(&old_read)
            .verified_by(verifier);
        let read = if read_auth.is_empty() && old_read.is_empty() {
            CredentialSet::default()
        } else {
            CredentialSet::default()
                .and(&read_auth)
                .and(&old_read)
                .and(&admin_tokens)
                .verified_by(verifier)
        };
        Access {
            read,
            url_read,
            admin: admin_tokens,
            probes: http
                .metrics_auth
                .as_ref()
                .map(|a| a.credentials())
                .unwrap_or_default()
                .verified_by(verifier),
            metrics_open: http.metrics_open,
            admin_state: admin,
        }
    }

    pub fn reads_need_credentials(&self) -> bool {
        !self.read.is_empty()
    }
}

fn tokens(list: &[crate::config::TokenConfig]) -> CredentialSet {
    list.iter()
        .fold(CredentialSet::default(), |set, t| match t.stored() {
            Some(secret) => set.bearer(&t.name, secret),
            None => set,
        })
}

/// What a request presents.
enum Presented {
    None,
    Bearer(String),
    Basic(String, String),
    /// An `Authorization` header of a scheme lockscope does not take, or unreadable.
    Bad,
}

fn presented(headers: &HeaderMap) -> Presented {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Presented::None;
    };
    let Ok(value) = value.to_str() else {
        return Presented::Bad;
    };
    if let Some(token) = crate::admin::bearer(Some(value)) {
        return Presented::Bearer(token.to_string());
    }
    let Some((scheme, encoded)) = value.trim().split_once(' ') else {
        return Presented::Bad;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Presented::Bad;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    match decoded.as_deref().and_then(|d| d.split_once(':')) {
        Some((user, password)) => Presented::Basic(user.to_string(), password.to_string()),
        None => Presented::Bad,
    }
}

/// Which credentials a request needs, by its (base-path-less) path.
enum Needs<'a> {
    Nothing,
    Read,
    Probes(&'a CredentialSet),
}

fn needs<'a>(access: &'a Access, method: &Method, path: &str) -> Needs<'a> {
    if matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return if !access.probes.is_empty() {
            Needs::Probes(&access.probes)
        } else if path == "/metrics" && access.reads_need_credentials() && !access.metrics_open {
            // Its labels name lock paths: as closed as the reads, unless opened on purpose.
            Needs::Read
        } else {
            Needs::Nothing
        };
    }
    // The API's description and its page are open: they hold nothing but the API's shape, and
    // a client needs them to learn how to authenticate.
    if !access.reads_need_credentials()
        || path == super::openapi::DOCUMENT_PATH
        || path == super::openapi::PAGE_PATH
    {
        return Needs::Nothing;
    }
    if path.starts_with("/api/") {
        // A release checks its admin token itself (and audits a refusal).
        if method == Method::POST {
            return Needs::Nothing;
        }
        return Needs::Read;
    }
    // The UI's pages, when a browser can answer for them (basic users); assets stay open.
    if access.read.has_basic() && !path.starts_with("/assets/") {
        return Needs::Read;
    }
    Needs::Nothing
}

/// The layer described in the module doc.
pub async fn require_access(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let (set, is_read) = match needs(&access, request.method(), request.uri().path()) {
        Needs::Nothing => return next.run(request).await,
        Needs::Read => (&access.read, true),
        Needs::Probes(set) => (set, false),
    };
    let client = request
        .extensions()
        .get::<ClientAddr>()
        .map(|c| c.0)
        .unwrap_or(IpAddr::from([0u8; 16]));
    let url_token = is_read
        .then(|| {
            request.uri().query().and_then(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "access_token")
                    .map(|(_, v)| v.into_owned())
            })
        })
        .flatten();
    let presented = presented(request.headers());
    // A credential that passed before is let in without a try: only new ones cost.
    let known = match (&presented, &url_token) {
        (Presented::Bearer(token), _) => set.cached_bearer(token),
        (Presented::Basic(user, password), _) => set.cached_basic(user, password),
        (Presented::None, Some(token)) => access.url_read.cached_bearer(token),
        _ => None,
    };
    if known.is_some() {
        return next.run(request).await;
    }
    if let (Presented::None, None) = (&presented, &url_token) {
        return refusal(StatusCode::UNAUTHORIZED, "credentials are required", set);
    }
    let admin = &access.admin_state;
    if let Gate::Closed { .. } = admin.begin_attempt(client).await {
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed authentications from this address; wait a minute \
             (admin.max_failed_auth_per_minute)",
            set,
        );
    }
    let verdict = match (presented, url_token) {
        (Presented::Bearer(token), _) => set.check_bearer(&token).await,
        (Presented::Basic(user, password), _) => set.check_basic(&user, &password).await,
        (Presented::None, Some(token)) => match access.url_read.check_bearer(&token).await {
            Verdict::Invalid => match access.admin.check_bearer(&token).await {
                Verdict::Valid(_) => {
                    admin.attempt_passed(client).await;
                    return refusal(
                        StatusCode::FORBIDDEN,
                        "that token may not read (in a URL only read tokens are taken; send an \
                         admin token in the Authorization header)",
                        set,
                    );
                }
                other => other,
            },
            other => other,
        },
        (Presented::None, None) | (Presented::Bad, _) => Verdict::Invalid,
    };
    match verdict {
        Verdict::Valid(_) => {
            admin.attempt_passed(client).await;
            next.run(request).await
        }
        Verdict::Busy => {
            // Not this client's doing: its try is given back.
            admin.attempt_passed(client).await;
            busy(set)
        }
        Verdict::Invalid => {
            tracing::warn!(%client, path = %request.uri().path(), "refused: wrong credentials");
            refusal(
                StatusCode::UNAUTHORIZED,
                "these credentials are not valid here",
                set,
            )
        }
    }
}

/// Too many credentials wait to be verified: a 503 to retry in a second.
fn busy(set: &CredentialSet) -> Response {
    let mut response = refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many credentials are being verified at once; retry in a second",
        set,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A refusal with the API's error body, and the schemes `set` takes (so a browser prompts for
/// basic-auth users).
fn refusal(status: StatusCode, message: &str, set: &CredentialSet) -> Response {
    let mut response = (status, Json(json!({ "error": message }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        let headers = response.headers_mut();
        if set.has_basic() {
            headers.append(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"lockscope\", charset=\"UTF-8\""),
            );
        }
        if set.has_bearer() || !set.has_basic() {
            headers.append(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
    }
    response
}
