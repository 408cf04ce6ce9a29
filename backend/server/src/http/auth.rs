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
//! * `/metrics`, `/healthz`, `/readyz` — open, or `metrics_auth`'s credentials.
//!
//! A missing or wrong credential is a 401 with a JSON body (`WWW-Authenticate: Basic` when basic
//! users may answer, so browsers prompt); a known token where it is not taken is a 403. Wrong
//! credentials use up the client address's failed-authentication budget
//! (`admin.max_failed_auth_per_minute`, shared with force releases); past it the client's
//! requests are a 429 before their credentials are looked at. Successful verifications are
//! cached ([`crate::credentials`]), so bcrypt is paid once per credential.

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
use crate::credentials::CredentialSet;
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
    /// `/metrics` and the probes; empty: open.
    probes: CredentialSet,
    admin_state: Arc<crate::admin::Admin>,
}

impl Access {
    pub fn new(config: &crate::Config, admin: Arc<crate::admin::Admin>) -> Access {
        let read_auth = config
            .http
            .read_auth
            .as_ref()
            .map(|a| a.credentials())
            .unwrap_or_default();
        let old_read = tokens(&config.admin.read_tokens);
        let admin_tokens = tokens(&config.admin.tokens);
        let url_read = CredentialSet::default()
            .and(&read_auth.bearer_only())
            .and(&old_read);
        let read = if read_auth.is_empty() && old_read.is_empty() {
            CredentialSet::default()
        } else {
            CredentialSet::default()
                .and(&read_auth)
                .and(&old_read)
                .and(&admin_tokens)
        };
        Access {
            read,
            url_read,
            admin: admin_tokens,
            probes: config
                .http
                .metrics_auth
                .as_ref()
                .map(|a| a.credentials())
                .unwrap_or_default(),
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
        return if access.probes.is_empty() {
            Needs::Nothing
        } else {
            Needs::Probes(&access.probes)
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
    let admin = &access.admin_state;
    if let Gate::Closed { .. } = admin.client_gate(client).await {
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed authentications from this address; wait a minute \
             (admin.max_failed_auth_per_minute)",
            set,
        );
    }
    let url_token = is_read
        .then(|| {
            request.uri().query().and_then(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "access_token")
                    .map(|(_, v)| v.into_owned())
            })
        })
        .flatten();
    let allowed = match (presented(request.headers()), url_token) {
        (Presented::Bearer(token), _) => set.check_bearer(&token).await.is_some(),
        (Presented::Basic(user, password), _) => set.check_basic(&user, &password).await.is_some(),
        (Presented::None, Some(token)) => {
            if access.url_read.check_bearer(&token).await.is_some() {
                true
            } else if access.admin.check_bearer(&token).await.is_some() {
                return refusal(
                    StatusCode::FORBIDDEN,
                    "that token may not read (in a URL only read tokens are taken; send an \
                     admin token in the Authorization header)",
                    set,
                );
            } else {
                false
            }
        }
        (Presented::None, None) => {
            return refusal(StatusCode::UNAUTHORIZED, "credentials are required", set)
        }
        (Presented::Bad, _) => false,
    };
    if allowed {
        return next.run(request).await;
    }
    admin.client_failed(client).await;
    tracing::warn!(%client, path = %request.uri().path(), "refused: wrong credentials");
    refusal(
        StatusCode::UNAUTHORIZED,
        "these credentials are not valid here",
        set,
    )
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
