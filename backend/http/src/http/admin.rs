//! The admin router: `POST /api/v1/locks/{id}/release` (force release) and `GET /api/v1/audit`.
//!
//! A release is taken apart here (the lock id, the client's address, the `Authorization` header,
//! and the body — read only once [`crate::admin::attempt`] has authenticated the caller, up to
//! [`MAX_BODY_BYTES`]) and answered with what the attempt came to; the attempt itself, its audit
//! record, log line and count are `admin::attempt`'s.
//!
//! Answers: 200 released, 409 holder changed (with the current holder), 404 unknown lock, 401/403
//! auth, 413 body too large, 422 bad body or unsupported layout, 429 rate limited, 502 the server
//! answered an error, 503 no server could be asked or the audit store cannot be written.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Path, RawQuery, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockscope_model::release::MAX_BODY_BYTES;
use lockscope_model::wire::ReleaseRequest;
use serde_json::json;

use crate::http::AppState;

pub use crate::admin::attempt::RELEASE_DEADLINE;
/// `GET /api/v1/audit` answers at most this many records a page.
pub const MAX_AUDIT_PAGE: u32 = 1000;

/// The client's address: what a trusted proxy forwards, or the TCP peer
/// ([`crate::http::proxy`]); unspecified when the router runs without one (tests that drive it
/// with `oneshot`).
fn client_of(request: &Request) -> IpAddr {
    if let Some(client) = request.extensions().get::<crate::http::proxy::ClientAddr>() {
        return client.0;
    }
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::from([0u8; 16]))
}

#[utoipa::path(
    post,
    path = "/api/v1/locks/{id}/release",
    tag = "admin",
    params(("id" = String, Path, description = "The lock's id")),
    request_body(content = ReleaseRequest, description = "The holder as the operator saw it, and why"),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Released: the holder's claim was deleted", body = super::bodies::ReleasedBody),
        (status = 400, description = "The id is not valid percent-encoded UTF-8", body = super::bodies::ErrorBody),
        (status = 401, description = "No admin token", body = super::bodies::ReleaseErrorBody),
        (status = 403, description = "Force release is off, or the token may not release", body = super::bodies::ReleaseErrorBody),
        (status = 404, description = "No lock with that id", body = super::bodies::ReleaseErrorBody),
        (status = 409, description = "The holder named does not hold the lock now: nothing was changed", body = super::bodies::ReleaseErrorBody),
        (status = 413, description = "The body is too large", body = super::bodies::ReleaseErrorBody),
        (status = 422, description = "A bad body (`field` names what is wrong), or a layout that cannot be released", body = super::bodies::ReleaseErrorBody),
        (status = 429, description = "Too many failed authentications from this address, or too many releases", body = super::bodies::ReleaseErrorBody),
        (status = 500, description = "The release task ended without an answer (see the audit log)", body = super::bodies::ReleaseErrorBody),
        (status = 502, description = "The coordination server answered an error", body = super::bodies::ReleaseErrorBody),
        (status = 503, description = "No server could be asked, or the audit store cannot be written: nothing was changed", body = super::bodies::ReleaseErrorBody),
    )
)]
pub async fn release(
    State(state): State<AppState>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    request: Request,
) -> Response {
    // Not an attempt on any lock: answered before anything is recorded.
    let Path(id) = match id {
        Ok(id) => id,
        Err(e) => return super::bad_path(e).into_response(),
    };
    let client = client_of(&request);
    let (parts, body) = request.into_parts();
    let authorization = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // Read only when awaited: after authentication.
    let body = async move {
        axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .ok()
            .map(|b| b.to_vec())
    };
    let cx = crate::admin::attempt::Context {
        admin: state.settings.admin.clone(),
        handle: state.handle.clone(),
        store: state.settings.store.clone(),
    };
    let answer = crate::admin::attempt::force_release(&cx, client, id, authorization, body).await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(answer.body)).into_response()
}

/// A 400 naming the query parameter at fault.
fn bad_parameter(name: &str, message: String) -> Response {
    super::bad_parameter(super::paging::bad(name, format!("{name}: {message}")))
}

/// `GET /api/v1/audit?limit=&before=`: the newest records (older than audit id `before`),
/// newest first, at most [`MAX_AUDIT_PAGE`]; `next` is the `before` of the following page.
#[utoipa::path(
    get,
    path = "/api/v1/audit",
    tag = "admin",
    params(super::bodies::AuditParams),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "One page of the audit log, newest first", body = super::bodies::AuditPage),
        (status = 400, description = "A bad `limit` or `before`", body = super::bodies::BadParameterBody),
        (status = 404, description = "No store is configured", body = super::bodies::ErrorBody),
        super::bodies::ReadRefusals,
        (status = 503, description = "The audit log cannot be read now", body = super::bodies::ErrorBody),
    )
)]
pub async fn audit(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    // Read as every query of the API is: each parameter at most once, none unknown.
    let pairs = super::query_pairs(raw);
    let params = match super::paging::Params::new(&pairs, &["limit", "before"]) {
        Ok(params) => params,
        Err(e) => return super::bad_parameter(e),
    };
    let (limit, before) = (params.raw("limit"), params.raw("before"));
    let limit = match limit.map(str::parse::<u32>) {
        None => 100,
        Some(Ok(n)) if (1..=MAX_AUDIT_PAGE).contains(&n) => n,
        Some(_) => {
            return bad_parameter(
                "limit",
                format!("must be a whole number from 1 to {MAX_AUDIT_PAGE}"),
            )
        }
    };
    let before = match before.map(str::parse::<i64>) {
        None => None,
        Some(Ok(n)) if n > 0 => Some(n),
        Some(_) => {
            return bad_parameter(
                "before",
                "must be an audit id (a positive whole number)".into(),
            )
        }
    };
    let Some(store) = &state.settings.store else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": "no store is configured ([store] url)" })),
        )
            .into_response();
    };
    match store.audits(limit, before).await {
        Ok(records) => {
            let next = (records.len() == limit as usize)
                .then(|| records.last().map(|r| r.id.to_string()))
                .flatten();
            Json(json!({ "audit": records, "next": next })).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot read the audit log");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "error": "the audit log cannot be read now" })),
            )
                .into_response()
        }
    }
}
