//! The admin router: `POST /api/v1/locks/{id}/release` (force release) and `GET /api/v1/audit`.
//!
//! Every release attempt — allowed or refused, at whatever step — produces one audit record
//! (store), one log line (target `lockscope::audit`) and one count in
//! `lockscope_force_releases_total{outcome}`, written together in [`finish`]. Answers: 200
//! released, 409 holder changed (with the current holder), 404 unknown lock, 401/403 auth,
//! 422 bad body or unsupported layout, 429 rate limited, 502 the server could not be reached.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockscope_model::id::parse_lock_id;
use lockscope_model::wire::{AuditRecord, ReleaseRequest};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::admin::{Denied, Outcome};
use crate::aggregate::Command;
use crate::http::AppState;
use crate::now_ms;

fn refusal(
    status: StatusCode,
    outcome: &'static str,
    message: String,
) -> (StatusCode, &'static str, Value) {
    (status, outcome, json!({ "error": message }))
}

pub async fn release(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = serde_json::from_slice::<ReleaseRequest>(&body);
    let mut record = AuditRecord {
        id: 0,
        at_ms: now_ms(),
        token_name: "-".into(),
        source: parse_lock_id(&id).map(|(s, _)| s).unwrap_or_default(),
        lock_id: id.clone(),
        observed_holder: parsed
            .as_ref()
            .map(|r| r.holder.clone())
            .unwrap_or_default(),
        outcome: String::new(),
        reason: parsed
            .as_ref()
            .map(|r| r.reason.clone())
            .unwrap_or_default(),
        detail: String::new(),
    };
    let (status, outcome, answer) =
        decide(&state, &id, &headers, parsed, &mut record.token_name).await;
    finish(&state, record, status, outcome, answer).await
}

async fn decide(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    parsed: Result<ReleaseRequest, serde_json::Error>,
    token_name: &mut String,
) -> (StatusCode, &'static str, Value) {
    let admin = &state.settings.admin;
    if !admin.enabled {
        return refusal(
            StatusCode::FORBIDDEN,
            "disabled",
            "force release is off: set [admin] enabled = true with tokens".into(),
        );
    }
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match admin.authorize(auth) {
        Ok(name) => *token_name = name,
        Err(Denied::Unauthorized) => {
            return refusal(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "an admin bearer token is required".into(),
            )
        }
        Err(Denied::Forbidden) => {
            *token_name = "(unknown token)".into();
            return refusal(
                StatusCode::FORBIDDEN,
                "forbidden",
                "that token may not release locks".into(),
            );
        }
    }
    if !admin.allow_rate().await {
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many force releases; wait a little (admin.max_releases_per_minute)".into(),
        );
    }
    let request = match parsed {
        Ok(r) => r,
        Err(e) => {
            return refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid",
                format!("body must be JSON {{\"holder\": …, \"reason\": …}}: {e}"),
            )
        }
    };
    if request.reason.trim().is_empty() {
        return refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            "a reason is required".into(),
        );
    }
    if request.holder.is_empty() {
        return refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            "holder must name the holder you saw".into(),
        );
    }
    let lock = state.handle.snapshot.borrow().locks.get(id).cloned();
    let Some(lock) = lock else {
        return refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no lock with id {id:?}"),
        );
    };
    let members = match lock.backend {
        lockscope_model::wire::Backend::Redis => state
            .handle
            .ask(|reply| Command::RedisMembers {
                source: lock.source.clone(),
                reply,
            })
            .await
            .flatten()
            .unwrap_or_default(),
        lockscope_model::wire::Backend::Zookeeper
        | lockscope_model::wire::Backend::Etcd
        | lockscope_model::wire::Backend::Mysql
        | lockscope_model::wire::Backend::Postgres => Vec::new(),
    };
    // The aggregator learns first, so it books the coming removal as `forced`.
    state
        .handle
        .ask(|reply| Command::MarkForced {
            id: id.to_string(),
            holder: request.holder.clone(),
            reply,
        })
        .await;
    let outcome = admin.release(&lock, &request, &members).await;
    match outcome {
        Outcome::Released(detail) => (StatusCode::OK, "released", json!({ "released": detail })),
        Outcome::HolderChanged(detail) => (
            StatusCode::CONFLICT,
            "holder_changed",
            json!({ "error": "the holder you named does not hold the lock now; nothing was changed", "detail": detail }),
        ),
        Outcome::Unsupported(message) => {
            refusal(StatusCode::UNPROCESSABLE_ENTITY, "unsupported", message)
        }
        Outcome::Unavailable(message) => {
            tracing::error!(lock = %id, error = %message, "force release reached no server");
            refusal(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
        }
        Outcome::Failed(message) => {
            tracing::error!(lock = %id, error = %message, "force release failed");
            refusal(
                StatusCode::BAD_GATEWAY,
                "failed",
                "the coordination server could not be asked; nothing is known to have changed"
                    .into(),
            )
        }
    }
}

/// Writes the audit record, the log line and the metric for one attempt, then answers.
async fn finish(
    state: &AppState,
    mut record: AuditRecord,
    status: StatusCode,
    outcome: &'static str,
    answer: Value,
) -> Response {
    record.outcome = outcome.to_string();
    record.detail = answer.to_string();
    state.settings.admin.count(outcome).await;
    tracing::warn!(
        target: "lockscope::audit",
        token = %record.token_name,
        lock = %record.lock_id,
        holder = %record.observed_holder,
        outcome,
        reason = %record.reason,
        "force release attempt"
    );
    let mut answer = answer;
    match &state.settings.store {
        Some(store) => match store.audit(record).await {
            Ok(id) => answer["audit_id"] = json!(id),
            Err(e) => tracing::error!(error = %e, "cannot write the audit record"),
        },
        None => tracing::warn!("no store configured: this attempt is only in the log"),
    }
    (status, Json(answer)).into_response()
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    limit: Option<u32>,
}

pub async fn audit(State(state): State<AppState>, Query(q): Query<AuditQuery>) -> Response {
    let Some(store) = &state.settings.store else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": "no store is configured ([store] path)" })),
        )
            .into_response();
    };
    match store.audits(q.limit.unwrap_or(100).min(10_000)).await {
        Ok(records) => Json(json!({ "audit": records })).into_response(),
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
