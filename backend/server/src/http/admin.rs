//! The admin router: `POST /api/v1/locks/{id}/release` (force release) and `GET /api/v1/audit`.
//!
//! Every release attempt — allowed or refused, at whatever step — produces one audit record
//! (store), a log line (target `lockscope::audit`, every field escaped) and one count in
//! `lockscope_force_releases_total{outcome}`. The order is what makes the audit trustworthy:
//!
//! 1. **Before authentication** nothing from the request is kept but bounded fields (the lock id
//!    cut to [`UNAUTHENTICATED_FIELD_CHARS`], the client's address): the body is not even read.
//!    A client address that failed authentication `admin.max_failed_auth_per_minute` times in a
//!    minute is refused before its credentials are looked at; of those refusals one per client
//!    and minute is stored, the rest are counted and logged.
//! 2. **After authentication** the body is read up to [`MAX_BODY_BYTES`] and checked
//!    ([`lockscope_model::release::parse_request`]); refusals are stored with the fields given.
//! 3. **Before anything is changed** the attempt is written to the store as `pending`; if that
//!    write fails, nothing is changed (503).
//! 4. **The release runs in a task of its own**: a client that goes away cannot cancel it. The
//!    task asks the backend's compare-and-delete (each connection it opens has a timeout, the
//!    whole at most [`RELEASE_DEADLINE`]) and completes the record with the outcome, then logs
//!    and counts it, whether or not anyone still waits for the answer.
//!
//! Answers: 200 released, 409 holder changed (with the current holder), 404 unknown lock, 401/403
//! auth, 413 body too large, 422 bad body or unsupported layout, 429 rate limited, 502 the server
//! answered an error, 503 no server could be asked or the audit store cannot be written.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, RawQuery, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockscope_model::id::parse_lock_id;
use lockscope_model::release::{
    bounded, parse_request, MAX_BODY_BYTES, UNAUTHENTICATED_FIELD_CHARS,
};
use lockscope_model::wire::{AuditRecord, LockView, ReleaseRequest};
use serde_json::{json, Value};

use crate::admin::{Denied, Gate, Outcome};
use crate::aggregate::{Command, FORCED_MARK_TTL};
use crate::http::AppState;
use crate::now_ms;

/// A release task gives up after this long; its record then says what is known.
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(60);
/// `GET /api/v1/audit` answers at most this many records a page.
pub const MAX_AUDIT_PAGE: u32 = 1000;

/// A refusal: status, outcome name, answer body.
struct Refusal(StatusCode, &'static str, Value);

fn refusal(status: StatusCode, outcome: &'static str, message: impl Into<String>) -> Refusal {
    Refusal(status, outcome, json!({ "error": message.into() }))
}

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
        (status = 200, description = "Released: the holder's claim was deleted", body = super::openapi::ReleasedBody),
        (status = 400, description = "The id is not valid percent-encoded UTF-8", body = super::openapi::ErrorBody),
        (status = 401, description = "No admin token", body = super::openapi::ReleaseErrorBody),
        (status = 403, description = "Force release is off, or the token may not release", body = super::openapi::ReleaseErrorBody),
        (status = 404, description = "No lock with that id", body = super::openapi::ReleaseErrorBody),
        (status = 409, description = "The holder named does not hold the lock now: nothing was changed", body = super::openapi::ReleaseErrorBody),
        (status = 413, description = "The body is too large", body = super::openapi::ReleaseErrorBody),
        (status = 422, description = "A bad body (`field` names what is wrong), or a layout that cannot be released", body = super::openapi::ReleaseErrorBody),
        (status = 429, description = "Too many failed authentications from this address, or too many releases", body = super::openapi::ReleaseErrorBody),
        (status = 500, description = "The release task ended without an answer (see the audit log)", body = super::openapi::ReleaseErrorBody),
        (status = 502, description = "The coordination server answered an error", body = super::openapi::ReleaseErrorBody),
        (status = 503, description = "No server could be asked, or the audit store cannot be written: nothing was changed", body = super::openapi::ReleaseErrorBody),
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
    // Only bounded fields until the caller is authenticated.
    let mut record = AuditRecord {
        id: 0,
        at_ms: now_ms(),
        token_name: "-".into(),
        source: bounded(
            &parse_lock_id(&id).map(|(s, _)| s).unwrap_or_default(),
            UNAUTHENTICATED_FIELD_CHARS,
        ),
        lock_id: bounded(&id, UNAUTHENTICATED_FIELD_CHARS),
        observed_holder: String::new(),
        outcome: String::new(),
        reason: String::new(),
        detail: String::new(),
        client: client.to_string(),
        finished_ms: None,
    };
    let admin = state.settings.admin.clone();
    let auth = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // A token that passed before takes no try; anything else takes one of the client's tries
    // before it is looked at (given back if it passes), so a burst of any concurrency from one
    // client is at most its budget of verifications and audit records, then one a minute.
    let known = admin
        .enabled
        .then(|| admin.authorized_before(auth))
        .flatten();
    if let Some(name) = known {
        record.token_name = name;
    } else {
        if let Gate::Closed { record: store } = admin.begin_attempt(client).await {
            let r = refusal(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many failed authentications from this address; wait a minute \
                 (admin.max_failed_auth_per_minute)",
            );
            return refuse(&state, record, r, store).await;
        }
        if !admin.enabled {
            // Refused as a failed authentication is (its try kept): nobody may fill the store
            // through it.
            let r = refusal(
                StatusCode::FORBIDDEN,
                "disabled",
                "force release is off: set [admin] enabled = true with tokens",
            );
            return refuse(&state, record, r, true).await;
        }
        match authenticate(&state, auth).await {
            Ok(name) => {
                admin.attempt_passed(client).await;
                record.token_name = name;
            }
            Err(r) => {
                if r.1 == "forbidden" {
                    record.token_name = "(unknown token)".into();
                }
                return refuse(&state, record, r, true).await;
            }
        }
    }
    // Authenticated: the id is kept whole from here on.
    record.lock_id = id.clone();
    record.source = parse_lock_id(&id).map(|(s, _)| s).unwrap_or_default();
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(_) => {
            let r = refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("body: larger than {MAX_BODY_BYTES} bytes (or not readable)"),
            );
            return refuse(&state, record, r, true).await;
        }
    };
    if !admin.allow_rate().await {
        let r = refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many force releases; wait a little (admin.max_releases_per_minute)",
        );
        return refuse(&state, record, r, true).await;
    }
    let request = match parse_request(&body) {
        Ok(request) => request,
        Err(e) => {
            let r = Refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid",
                json!({ "error": e.to_string(), "field": e.field }),
            );
            return refuse(&state, record, r, true).await;
        }
    };
    record.observed_holder = request.holder.clone();
    record.reason = request.reason.clone();
    let lock = state.handle.snapshot.borrow().lock(&id).map(Arc::new);
    let Some(lock) = lock else {
        let r = refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no lock with id {id:?}"),
        );
        return refuse(&state, record, r, true).await;
    };
    // The attempt is on record before anything is changed.
    let Some(store) = state.settings.store.clone() else {
        let r = refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "no audit store is configured ([store] url): nothing was changed",
        );
        return refuse(&state, record, r, false).await;
    };
    record.outcome = "pending".into();
    let audit_id = match store.audit(record.clone()).await {
        Ok(audit_id) => audit_id,
        Err(e) => {
            tracing::error!(error = %e, "cannot write the audit record; the release is not run");
            let r = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the audit record cannot be written: nothing was changed",
            );
            return refuse(&state, record, r, false).await;
        }
    };
    record.id = audit_id;
    log_attempt(&record, "force release started");
    // A task of its own: the client going away drops this handler, not the release.
    let task = tokio::spawn(run_release(state.clone(), store, lock, request, record));
    match task.await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, audit_id, "the release task ended without an answer");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({
                    "error": "the release task ended without an answer; see the audit log",
                    "audit_id": audit_id,
                })),
            )
                .into_response()
        }
    }
}

/// The admin token's name, or the refusal.
async fn authenticate(state: &AppState, auth: Option<&str>) -> Result<String, Refusal> {
    state
        .settings
        .admin
        .authorize(auth)
        .await
        .map_err(|denied| match denied {
            Some(Denied::Unauthorized) => refusal(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "an admin bearer token is required",
            ),
            Some(Denied::Forbidden) => refusal(
                StatusCode::FORBIDDEN,
                "forbidden",
                "that token may not release locks",
            ),
            None => refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "too many credentials are being verified at once; retry in a second: \
                 nothing was changed",
            ),
        })
}

/// Runs the release and completes its `pending` record; the answer for the client, if it still
/// waits.
async fn run_release(
    state: AppState,
    store: crate::store::Store,
    lock: Arc<LockView>,
    request: ReleaseRequest,
    mut record: AuditRecord,
) -> Response {
    let handle = &state.handle;
    let (id, holder) = (lock.id.clone(), request.holder.clone());
    // The aggregator learns first, so it books the coming removal as `forced`.
    let deadline_ms = (RELEASE_DEADLINE + FORCED_MARK_TTL).as_millis() as i64;
    handle
        .ask(|reply| Command::MarkForced {
            id: id.clone(),
            holder: holder.clone(),
            until_ms: now_ms() + deadline_ms,
            reply,
        })
        .await;
    let members = match lock.backend {
        lockscope_model::wire::Backend::Redis => handle
            .ask(|reply| Command::Members {
                source: lock.source.clone(),
                reply,
            })
            .await
            .flatten()
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let admin = state.settings.admin.clone();
    // The backend's compare-and-delete in a task of its own too, so that even a panic in it
    // completes the record (as `failed`), and one past the deadline is stopped, not left to
    // change something after the record says what is known.
    let mut releasing = tokio::spawn({
        let (admin, lock, request) = (admin.clone(), lock.clone(), request.clone());
        async move { admin.release(&lock, &request, &members).await }
    });
    let outcome = match tokio::time::timeout(RELEASE_DEADLINE, &mut releasing).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => Outcome::Failed(format!(
            "the release stopped unexpectedly ({e}); what it changed is unknown: look at the lock"
        )),
        Err(_) => {
            releasing.abort();
            Outcome::Failed(format!(
                "the release did not finish within {RELEASE_DEADLINE:?} and was stopped; what it \
                 changed is unknown: look at the lock"
            ))
        }
    };
    handle
        .ask(|reply| Command::SettleForced {
            id: id.clone(),
            holder: holder.clone(),
            released: matches!(outcome, Outcome::Released(_)),
            reply,
        })
        .await;
    let Refusal(status, name, mut answer) = answer_for(outcome, &id);
    record.outcome = name.to_string();
    record.detail = answer.to_string();
    let finished = now_ms();
    record.finished_ms = Some(finished);
    admin.count(name).await;
    log_attempt(&record, "force release attempt");
    answer["audit_id"] = json!(record.id);
    if let Err(e) = store
        .audit_finish(record.id, name, record.detail.clone(), finished)
        .await
    {
        tracing::error!(error = %e, audit_id = record.id, outcome = name,
            "cannot complete the audit record; it stays `pending` in the store");
        answer["audit_error"] =
            json!("the outcome could not be written to the audit store; it is in lockscope's log");
    }
    (status, Json(answer)).into_response()
}

fn answer_for(outcome: Outcome, id: &str) -> Refusal {
    match outcome {
        Outcome::Released(detail) => {
            Refusal(StatusCode::OK, "released", json!({ "released": detail }))
        }
        Outcome::HolderChanged(detail) => Refusal(
            StatusCode::CONFLICT,
            "holder_changed",
            json!({ "error": "the holder you named does not hold the lock now; nothing was changed", "detail": detail }),
        ),
        Outcome::Unsupported(message) => {
            refusal(StatusCode::UNPROCESSABLE_ENTITY, "unsupported", message)
        }
        Outcome::Unavailable(message) => {
            tracing::error!(lock = ?id, error = %message, "force release reached no server");
            refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!(
                    "no server holding the lock could be asked; nothing was changed: {message}"
                ),
            )
        }
        Outcome::Failed(message) => {
            tracing::error!(lock = ?id, error = %message, "force release failed");
            refusal(
                StatusCode::BAD_GATEWAY,
                "failed",
                format!("the coordination server answered an error: {message}"),
            )
        }
    }
}

/// One `lockscope::audit` log line. Every field a client could choose is written escaped
/// (`Debug`), so a newline in a reason cannot start a line of its own.
fn log_attempt(record: &AuditRecord, message: &'static str) {
    tracing::warn!(
        target: "lockscope::audit",
        audit_id = record.id,
        token = ?record.token_name,
        client = %record.client,
        lock = ?record.lock_id,
        holder = ?record.observed_holder,
        outcome = %record.outcome,
        reason = ?record.reason,
        "{message}"
    );
}

/// Writes a refusal's record (when `store`), log line and count, then answers.
async fn refuse(
    state: &AppState,
    mut record: AuditRecord,
    Refusal(status, outcome, mut answer): Refusal,
    store: bool,
) -> Response {
    record.outcome = outcome.to_string();
    record.detail = answer.to_string();
    record.finished_ms = Some(record.at_ms);
    state.settings.admin.count(outcome).await;
    log_attempt(&record, "force release refused");
    match (&state.settings.store, store) {
        (Some(s), true) => match s.audit(record).await {
            Ok(id) => answer["audit_id"] = json!(id),
            Err(e) => tracing::error!(error = %e, "cannot write the audit record of a refusal"),
        },
        (_, false) => {}
        (None, true) => tracing::warn!("no store configured: this refusal is only in the log"),
    }
    (status, Json(answer)).into_response()
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
    params(super::openapi::AuditParams),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "One page of the audit log, newest first", body = super::openapi::AuditPage),
        (status = 400, description = "A bad `limit` or `before`", body = super::openapi::BadParameterBody),
        (status = 404, description = "No store is configured", body = super::openapi::ErrorBody),
        super::openapi::ReadRefusals,
        (status = 503, description = "The audit log cannot be read now", body = super::openapi::ErrorBody),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `MakeWriter` into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_newline_in_any_field_cannot_start_a_log_line_of_its_own() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let captured = captured.clone();
                move || captured.clone()
            })
            .with_ansi(false)
            .finish();
        let forged = "x\n2026-11-25T03:00:00Z WARN lockscope::audit: force release attempt \
                      token=\"oncall\" outcome=released\r\u{1b}[2J";
        let record = AuditRecord {
            id: 7,
            at_ms: 1,
            token_name: forged.into(),
            source: "r".into(),
            lock_id: forged.into(),
            observed_holder: forged.into(),
            outcome: "invalid".into(),
            reason: forged.into(),
            detail: String::new(),
            client: "127.0.0.1".into(),
            finished_ms: None,
        };
        tracing::subscriber::with_default(subscriber, || {
            log_attempt(&record, "force release refused")
        });
        let bytes = captured.0.lock().expect("buffer").clone();
        let text = String::from_utf8(bytes).expect("utf-8");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text}");
        assert!(
            text.contains(r#"reason="x\n2026-11-25T03:00:00Z"#),
            "{text}"
        );
    }
}
