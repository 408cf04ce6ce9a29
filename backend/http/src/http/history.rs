//! A lock's history over HTTP: `GET /api/v1/locks/{id}` (the lock as the running lockscope
//! knows it, or as the store last kept it, with its events from memory and the store),
//! `GET /api/v1/locks/{id}/events` (its whole stored history, a page at a time) and
//! `GET /api/v1/store` (the store and the replica writing the history).
//!
//! A lock's page never waits long for the store: its store part is bounded by
//! [`STORE_PART_WAIT`], after which the page is answered from memory with
//! `history_unavailable` saying why (a store that is down, or silent behind a dead network
//! path, would otherwise hold every page open).

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockscope_model::wire::{LockDetail, StoreStatus};

use super::{bad_path, bodies, unavailable, AppError, AppState};
use lockscope_core::aggregate::Command;
use lockscope_core::now_ms;

/// Events of a lock's page read from the store.
const DETAIL_EVENTS: u32 = 200;
/// The largest page of `/api/v1/locks/{id}/events`.
pub const MAX_EVENT_PAGE: u32 = 1000;
/// How long a lock's page waits for the store at most (both reads together).
pub const STORE_PART_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

#[utoipa::path(
    get,
    path = "/api/v1/locks/{id}",
    tag = "locks",
    params(("id" = String, Path, description = "The lock's id (`id` of a `LockView`)")),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "The lock and its recent events, from memory and the store; a lock the store keeps that went (before a restart, or while no lockscope watched) has `gone`; when the store does not answer within 500 ms the lock comes from memory alone, with `history_unavailable` saying why", body = LockDetail),
        (status = 400, description = "The id is not valid percent-encoded UTF-8", body = bodies::ErrorBody),
        (status = 404, description = "Neither this lockscope nor the store knows the lock (or the lock is not in memory and the store cannot be read now: the error says so)", body = bodies::ErrorBody),
        bodies::ReadRefusals,
        bodies::Stopping,
    )
)]
pub async fn lock_detail(
    State(state): State<AppState>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, AppError> {
    let Path(id) = id.map_err(bad_path)?;
    let (store, judge) = (&state.settings.store, state.settings.judge.clone());
    let detail = state
        .handle
        .ask(|reply| Command::LockDetail {
            id: id.clone(),
            reply,
        })
        .await
        .ok_or_else(unavailable)?;
    let Some(store) = store else {
        return match detail {
            Some(mut detail) => {
                if !detail.gone {
                    lockscope_model::rules::tick_and_judge(&mut detail.lock, now_ms(), &judge);
                }
                Ok(Json(detail).into_response())
            }
            None => Err(not_found(&id)),
        };
    };
    let deadline = tokio::time::Instant::now() + STORE_PART_WAIT;
    let late = || format!("the history store did not answer within {STORE_PART_WAIT:?}");
    let mut unavailable_why: Option<String> = None;
    let stored_events = match tokio::time::timeout_at(
        deadline,
        store.lock_events(&id, DETAIL_EVENTS, None),
    )
    .await
    {
        Ok(Ok(page)) => Some(page.events.into_iter().rev().map(|e| e.event).collect()),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read lock history");
            unavailable_why = Some(e.to_string());
            None
        }
        Err(_) => {
            tracing::warn!(lock = %id, "the history store is slow: a lock's page answered from memory");
            unavailable_why = Some(late());
            None
        }
    };
    let mut detail = match detail {
        Some(detail) => detail,
        None => {
            let read = tokio::time::timeout_at(deadline, store.lock_state(&id)).await;
            // Not in memory, and the store cannot say: as far as anyone can tell now there is
            // no such lock (a 404, as before the store is read), and the answer says why.
            let state = match read {
                Err(_) => {
                    return Err(AppError(
                        StatusCode::NOT_FOUND,
                        format!(
                            "no lock with id {id:?} in memory, and {}: its history cannot be looked up now",
                            late()
                        ),
                    ))
                }
                Ok(Err(e @ lockscope_store::StoreError::Unavailable(_))) => {
                    return Err(AppError(
                        StatusCode::NOT_FOUND,
                        format!(
                            "no lock with id {id:?} in memory, and {e}: its history cannot be looked up now"
                        ),
                    ))
                }
                Ok(read) => read,
            };
            let state = match state {
                Ok(Some(state)) => state,
                Ok(None) => match stored_events.as_ref().and_then(|e: &Vec<_>| e.last()) {
                    // Events but no state (it went before its state was written): the lock
                    // as its id and history tell it.
                    Some(last) => {
                        let (source, path) =
                            lockscope_model::id::parse_lock_id(&id).unwrap_or_default();
                        lockscope_store::StoredState {
                            view: lockscope_model::wire::LockView {
                                id: id.clone(),
                                source,
                                path,
                                changed_ms: last.at_ms,
                                ..Default::default()
                            },
                            seen_ms: last.at_ms,
                            gone_ms: Some(last.at_ms),
                            gone_unseen: false,
                        }
                    }
                    None => return Err(not_found(&id)),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read a lock's last state");
                    return Err(not_found(&id));
                }
            };
            let gone_ms = state.gone_ms;
            // Seen going: shown as a gone lock is (nothing holds or waits); gone unseen: as
            // last seen, since nobody saw its holders go.
            let lock = match (state.gone_unseen, gone_ms) {
                (false, Some(at)) => state.view.gone(at),
                _ => state.view,
            };
            // Not gone by the store's word (this replica has not read its source yet, or
            // does not watch it): the lock as the history writer last stored it.
            LockDetail {
                lock,
                events: Vec::new(),
                gone: gone_ms.is_some(),
                gone_ms,
                gone_unseen: state.gone_unseen,
                history_unavailable: None,
            }
        }
    };
    if !detail.gone {
        lockscope_model::rules::tick_and_judge(&mut detail.lock, now_ms(), &judge);
    }
    if let Some(stored) = stored_events {
        let remembered = std::mem::take(&mut detail.events);
        detail.events = lockscope_store::matching::join(stored, remembered);
    }
    detail.history_unavailable = unavailable_why;
    Ok(Json(detail).into_response())
}

fn not_found(id: &str) -> AppError {
    AppError(StatusCode::NOT_FOUND, format!("no lock with id {id:?}"))
}

#[utoipa::path(
    get,
    path = "/api/v1/locks/{id}/events",
    tag = "locks",
    params(
        ("id" = String, Path, description = "The lock's id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Events per page (default 100)"),
        ("before" = Option<i64>, Query, minimum = 1, description = "Only events with ids below this: the `next_before` of the previous page"),
    ),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "One page of the lock's stored events, newest first", body = lockscope_model::wire::EventPage),
        (status = 400, description = "A bad `limit` or `before`, or an id that is not UTF-8", body = bodies::BadParameterBody),
        (status = 404, description = "No store is configured", body = bodies::ErrorBody),
        bodies::ReadRefusals,
        (status = 503, description = "The store cannot be read now", body = bodies::ErrorBody),
    )
)]
pub async fn lock_events(
    State(state): State<AppState>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    RawQuery(raw): RawQuery,
) -> Response {
    let id = match id {
        Ok(Path(id)) => id,
        Err(e) => return bad_path(e).into_response(),
    };
    let pairs = super::query_pairs(raw);
    let params = match super::paging::Params::new(&pairs, &["limit", "before"]) {
        Ok(params) => params,
        Err(e) => return super::bad_parameter(e),
    };
    let limit = match params.raw("limit").map(str::parse::<u32>) {
        None => 100,
        Some(Ok(n)) if (1..=MAX_EVENT_PAGE).contains(&n) => n,
        Some(_) => {
            return bad(
                "limit",
                format!("must be a whole number from 1 to {MAX_EVENT_PAGE}"),
            )
        }
    };
    let before =
        match params.raw("before").map(str::parse::<i64>) {
            None => None,
            Some(Ok(n)) if n > 0 => Some(n),
            Some(_) => return bad(
                "before",
                "must be an event id (a positive whole number: the previous page's next_before)"
                    .into(),
            ),
        };
    let Some(store) = &state.settings.store else {
        return AppError(
            StatusCode::NOT_FOUND,
            "no store is configured ([store] url): lockscope keeps only recent events in memory"
                .into(),
        )
        .into_response();
    };
    match store.lock_events(&id, limit, before).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read lock history");
            AppError(StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response()
        }
    }
}

fn bad(name: &str, message: String) -> Response {
    super::bad_parameter(super::paging::bad(name, format!("{name}: {message}")))
}

#[utoipa::path(
    get,
    path = "/api/v1/store",
    tag = "operations",
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "The store, and which replica writes the history", body = StoreStatus),
        bodies::ReadRefusals,
    )
)]
pub async fn store_status(State(state): State<AppState>) -> Json<StoreStatus> {
    Json(match &state.settings.store {
        Some(store) => store.status(),
        None => StoreStatus {
            backend: "none".into(),
            ..StoreStatus::default()
        },
    })
}
