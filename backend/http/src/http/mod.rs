//! The HTTP server: read API, event stream, metrics and probes.
//!
//! Endpoints:
//! * `GET /api/v1/locks` — one page `{"locks":[…],"total":…,"facets":{…},"next":…}` of the locks
//!   matching filters, state, sort and order, by `limit` and `cursor`, or every one as NDJSON
//!   (see [`query`]); a bad parameter is a 400 `{"error":…,"parameter":…}`;
//! * `GET /api/v1/locks/{id}` — the lock and its recent events; 404 `{"error":…}` when unknown;
//! * `GET /api/v1/sessions` — one page `{"sessions":[…],"total":…,"next":…,"facets":{…}}` of the
//!   sessions matching `source`, `kind`, `q`, `state`, by `sort`, `order`, `limit` and `cursor`
//!   (see [`sessions`](mod@sessions)); a bad parameter is the same 400;
//! * `GET /api/v1/waitfor` — one page of the wait-for graph's edges, longest wait first, with the
//!   sessions they name and the first cycles, by `source`, `limit` and `cursor` (see
//!   [`waitfor`](mod@waitfor)); a bad parameter is the same 400;
//! * `GET /api/v1/deadlocks` — `{"cycles":[…]}`, every cycle of the wait-for graph;
//! * `GET /api/v1/sources` — `{"sources":[…]}`;
//! * `GET /api/v1/events` — Server-Sent Events: `snapshot` first, then `lock` / `removed` /
//!   `source` per change; a client that falls behind gets a fresh `snapshot`. With a lock query
//!   (`GET /api/v1/locks`' parameters, or `lock=ID`), that page live instead ([`view`]);
//! * `GET /metrics` — Prometheus text format;
//! * `GET /healthz` (process up), `GET /readyz` (200 once every source finished its first sync);
//! * `GET /api/v1/info` — version, whether force release is on, the stale-hold limit;
//! * `GET /api/v1/openapi.json` — this API as an OpenAPI 3.1 document, `GET /api-docs` the
//!   document as a page ([`openapi`]);
//! * `GET /`, `/locks/{id}`, `/sessions` — the web UI's page (one `index.html`, routed in the
//!   browser) and `GET /assets/…` its files, see [`ui`].
//!
//! Handlers read the aggregator's snapshot or ask it with a command; they never change state.
//! Errors are JSON `{"error": "…"}` with internals logged, not returned.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use lockscope_model::rules::Judge;
use lockscope_model::wire::{InfoView, LockView, StreamEvent};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use lockscope_core::aggregate::{Change, Command, Handle, Snapshot};
use lockscope_core::now_ms;

pub mod admin;
pub mod auth;
pub mod bodies;
pub mod headers;
pub mod history;
pub mod index;
pub mod listen;
pub mod openapi;
pub mod paging;
pub mod proxy;
pub mod query;
pub mod sessions;
pub mod ui;
pub mod view;
pub mod waitfor;

/// What the HTTP layer needs beyond the aggregator handle.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A directory to serve the web UI from instead of the copy built into the binary.
    pub ui_dir: Option<std::path::PathBuf>,
    /// The stale-hold and stuck limits every served lock is judged by.
    pub judge: Arc<Judge>,
    /// Turns `true` when lockscope stops: open event streams end then, so browsers notice.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    pub admin: Arc<crate::admin::Admin>,
    /// Audit log and lock history, when `[store]` names one.
    pub store: Option<lockscope_store::Store>,
    /// The `snapshot` stream event, shared by clients that connect at once.
    pub snapshot_cache: Arc<SnapshotCache>,
    /// The latest page of each live view, shared by the clients watching it.
    pub view_cache: Arc<view::ViewCache>,
    /// Open event streams per client.
    pub stream_slots: Arc<StreamSlots>,
    /// The stale-lock and deadlock judgement `/metrics` shares between scrapes.
    pub detection: crate::metrics::Detection,
    /// The server's own request and event-stream metrics.
    pub http_metrics: crate::metrics::own::HttpMetrics,
    /// The base path and trusted proxies ([`proxy`]).
    pub edge: proxy::Edge,
    /// Who may read, and scrape ([`auth`]).
    pub access: Arc<auth::Access>,
    /// The `[[identity]]` rules that name sessions' processes ([`waitfor::IdentityRules`]).
    pub identity: Arc<waitfor::IdentityRules>,
}

impl Settings {
    /// Settings from the sections the HTTP layer reads, with each source's force release.
    pub fn from_config(
        config: crate::config::Sections<'_>,
        releasers: lockscope_core::release::Releasers,
    ) -> Self {
        let admin = Arc::new(crate::admin::Admin::new(config.admin, releasers));
        Settings {
            ui_dir: config.ui.assets_dir.clone(),
            judge: Arc::new(Judge {
                stale_hold_ms: config.ui.stale_hold.as_millis() as i64,
                stuck: config.stuck.thresholds(),
            }),
            stopping: tokio::sync::watch::channel(false).1,
            access: Arc::new(auth::Access::new(config.http, config.admin, admin.clone())),
            edge: proxy::Edge {
                base_path: config.http.base().into(),
                trusted: Arc::new(config.http.trusted()),
            },
            admin,
            store: None,
            snapshot_cache: Arc::default(),
            view_cache: Arc::new(view::ViewCache::with_max_live(config.http.max_live_views)),
            stream_slots: Arc::new(StreamSlots::new(config.http.max_streams_per_client)),
            detection: crate::metrics::Detection::default(),
            http_metrics: crate::metrics::own::HttpMetrics::default(),
            identity: Arc::new(waitfor::IdentityRules::compile(config.identity)),
        }
    }
}

/// Resolves once `stopping` turns `true`; never, if its sender is gone without that.
pub async fn stopped(mut stopping: tokio::sync::watch::Receiver<bool>) {
    loop {
        if *stopping.borrow_and_update() {
            return;
        }
        if stopping.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        let (http, admin) = (Default::default(), Default::default());
        let (ui, stuck) = (Default::default(), Default::default());
        let sections = crate::config::Sections {
            http: &http,
            admin: &admin,
            ui: &ui,
            stuck: &stuck,
            identity: &[],
        };
        Settings::from_config(sections, Default::default())
    }
}

/// An error answer: status plus a message that is safe to show a client.
#[derive(Debug)]
pub struct AppError(StatusCode, String);

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

fn unavailable() -> AppError {
    tracing::error!("aggregator did not answer");
    AppError(
        StatusCode::SERVICE_UNAVAILABLE,
        "lockscope is shutting down".into(),
    )
}

/// Builds the router over an aggregator handle.
/// The router's state: the aggregator handle and the settings (handlers that need only the
/// handle take `State<Handle>`).
#[derive(Clone)]
pub struct AppState {
    pub handle: Handle,
    pub settings: Arc<Settings>,
    /// lockscope's own families ([`crate::metrics::own`]), scraped after the lock table's.
    pub own_metrics: Arc<prometheus_client::registry::Registry>,
}

impl axum::extract::FromRef<AppState> for Handle {
    fn from_ref(state: &AppState) -> Handle {
        state.handle.clone()
    }
}

/// Builds the router over an aggregator handle.
pub fn app(handle: Handle, settings: Settings) -> Router {
    let ui = ui::routes(settings.ui_dir.as_deref());
    let http_metrics = settings.http_metrics.clone();
    let mut own_metrics = prometheus_client::registry::Registry::default();
    crate::metrics::own::register(&mut own_metrics, &http_metrics);
    let (access, edge) = (settings.access.clone(), settings.edge.clone());
    let state = AppState {
        handle,
        settings: Arc::new(settings),
        own_metrics: Arc::new(own_metrics),
    };
    let api = Router::new()
        .route("/api/v1/info", get(info))
        .route("/api/v1/locks", get(list_locks))
        .route("/api/v1/locks/{id}", get(history::lock_detail))
        .route("/api/v1/locks/{id}/events", get(history::lock_events))
        .route("/api/v1/store", get(history::store_status))
        .route("/api/v1/locks/{id}/release", post(admin::release))
        .route("/api/v1/audit", get(admin::audit))
        .route("/api/v1/sessions", get(sessions))
        .route("/api/v1/waitfor", get(waitfor))
        .route("/api/v1/deadlocks", get(deadlocks))
        .route("/api/v1/blockers", get(blockers))
        .route("/api/v1/sources", get(sources))
        .route("/api/v1/events", get(events))
        .route(openapi::DOCUMENT_PATH, get(openapi::document))
        .route("/api-docs", get(openapi::page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
        .fallback(|| async { AppError(StatusCode::NOT_FOUND, "no such endpoint".into()) })
        // Answers compressed when the client asks (gzip or zstd), event streams included: the
        // encoder flushes whenever the stream has nothing more ready, so each push (a batch of
        // events) arrives whole and at once. Small answers are left as they are.
        .layer(tower_http::compression::CompressionLayer::new().compress_when(compressed()));
    let app = ui
        .merge(api)
        .layer(axum::middleware::from_fn_with_state(
            access,
            auth::require_access,
        ))
        .layer(axum::middleware::from_fn_with_state(http_metrics, track));
    // Base path and client address before routing: the outer router only forwards. Security
    // headers go on every answer, refusals and 404s included.
    let app = headers::layer(app);
    Router::new()
        .fallback_service(app)
        .layer(axum::middleware::from_fn_with_state(edge, proxy::edge))
}

/// Counts each request by its route pattern and status (`lockscope_http_requests_total`,
/// `lockscope_http_request_duration_seconds`). Runs inside the router, after routing, so the
/// matched route is known; a request no route matched counts as `unmatched`.
async fn track(
    State(metrics): State<crate::metrics::own::HttpMetrics>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| route_label(p.as_str()));
    let start = std::time::Instant::now();
    let response = next.run(request).await;
    metrics.observe(
        route.as_deref(),
        response.status().as_u16(),
        start.elapsed(),
    );
    response
}

/// A route pattern as a label: a nested service's private tail parameter reads `{*path}`.
fn route_label(pattern: &str) -> String {
    match pattern.find("{*__private__") {
        Some(at) => format!("{}{{*path}}", &pattern[..at]),
        None => pattern.to_string(),
    }
}

/// Which answers are compressed: tower-http's default (over 32 bytes, not gRPC, not images)
/// without its exclusion of event streams, which only holds for encoders that wait for a full
/// buffer; async-compression's flushes when the body has nothing more ready.
fn compressed() -> impl tower_http::compression::Predicate {
    use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
    SizeAbove::new(32)
        .and(NotForContentType::GRPC)
        .and(NotForContentType::IMAGES)
}

#[utoipa::path(
    get,
    path = "/api/v1/info",
    tag = "operations",
    security((), ("read_token" = []), ("access_token" = [])),
    responses((status = 200, description = "What this lockscope is", body = InfoView), bodies::ReadRefusals)
)]
async fn info(State(state): State<AppState>) -> Json<InfoView> {
    let admin = state.settings.admin.enabled;
    Json(InfoView {
        version: env!("CARGO_PKG_VERSION").to_string(),
        admin_enabled: admin,
        admin_disabled_reason: (!admin).then(|| {
            "force release is off: this lockscope runs without [admin] enabled".to_string()
        }),
        stale_hold_ms: state.settings.judge.stale_hold_ms,
        stuck: state.settings.judge.stuck.clone(),
    })
}

/// The lock with its durations, stale findings and stuck mark as of `now`.
fn ticked(mut lock: LockView, now: i64, judge: &Judge) -> LockView {
    lockscope_model::rules::tick_and_judge(&mut lock, now, judge);
    lock
}

/// A query string's pairs ([`paging::pairs`]; none without a query string).
fn query_pairs(raw: Option<String>) -> Vec<(String, String)> {
    paging::pairs(raw.as_deref().unwrap_or_default())
}

/// A path segment that is not percent-encoded UTF-8: the API's JSON 400, not axum's text.
fn bad_path(e: axum::extract::rejection::PathRejection) -> AppError {
    AppError(
        StatusCode::BAD_REQUEST,
        format!("bad path: {}", e.body_text()),
    )
}

/// A bad query parameter: a 400 with the API's error body, naming the parameter.
fn bad_parameter(e: paging::BadParameter) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": e.message, "parameter": e.parameter })),
    )
        .into_response()
}

/// `GET /api/v1/locks`: one page of the locks matching the query ([`query`]), or with
/// `format=ndjson` every one of them, streamed a chunk at a time.
#[utoipa::path(
    get,
    path = "/api/v1/locks",
    tag = "locks",
    params(bodies::LockParams),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "One page of the matching locks; with `format=ndjson` every \
            matching lock, one `LockView` per line", content(
            (query::Page = "application/json"),
            (LockView = "application/x-ndjson"),
        )),
        bodies::BadQuery,
        bodies::ReadRefusals,
        bodies::Stopping,
    )
)]
async fn list_locks(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let now = now_ms();
    let query = match query::LockQuery::parse(&query_pairs(raw), now) {
        Ok(query) => query,
        Err(e) => return bad_parameter(e),
    };
    let judge = state.settings.judge.clone();
    let snapshot = state.handle.snapshot.borrow().clone();
    // A pass over the index (over every lock for NDJSON): off the runtime's threads.
    let answer = tokio::task::spawn_blocking(move || match query.format {
        query::Format::Json if query.id.is_none() => {
            Ok(index::ViewState::compute(&query, snapshot, now).page(&judge))
        }
        query::Format::Json => Ok(query::page(
            &query,
            query.candidates(&snapshot, now, &judge),
            now,
        )),
        query::Format::Ndjson => {
            let views = query.candidates(&snapshot, now, &judge);
            Err((query::matching_ids(&query, views), snapshot.clone()))
        }
    })
    .await;
    match answer {
        Ok(Ok(page)) => Json(page).into_response(),
        Ok(Err((ids, snapshot))) => ndjson(ids, snapshot, now, state.settings.judge.clone()),
        Err(_) => unavailable().into_response(),
    }
}

/// Locks written per chunk of an NDJSON answer.
const NDJSON_CHUNK: usize = 500;

/// `ids`' views from `snapshot`, one JSON object per line, rendered and sent a chunk at a time
/// (the answer is never one string in memory). A lock gone since the ids were taken is still
/// in this snapshot, which the stream holds.
fn ndjson(ids: Vec<String>, snapshot: Arc<Snapshot>, now: i64, judge: Arc<Judge>) -> Response {
    let chunks = futures::stream::iter(ids)
        .chunks(NDJSON_CHUNK)
        .map(move |chunk| {
            let mut out = Vec::with_capacity(chunk.len() * 512);
            for id in chunk {
                if let Some(view) = snapshot.lock(&id) {
                    if serde_json::to_writer(&mut out, &ticked(view, now, &judge)).is_ok() {
                        out.push(b'\n');
                    }
                }
            }
            Ok::<_, Infallible>(axum::body::Bytes::from(out))
        });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(chunks),
    )
        .into_response()
}

/// `GET /api/v1/deadlocks`: every cycle of sessions that wait on each other's locks.
#[utoipa::path(
    get,
    path = "/api/v1/deadlocks",
    tag = "sessions",
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "Every cycle of the wait-for graph", body = bodies::DeadlocksBody),
        bodies::ReadRefusals,
        bodies::Stopping,
    )
)]
async fn deadlocks(State(state): State<AppState>) -> Response {
    over_sessions(&state, |sessions, lock, rules| {
        let graph = waitfor::joined_graph(&sessions, &lock, rules);
        json!({ "cycles": waitfor::cycles(&graph, usize::MAX).0 })
    })
    .await
}

/// Answers with `answer` over every session, the published locks by id (when each wait began,
/// what a session's participants say of themselves) and the `[[identity]]` rules, run off the
/// runtime's threads (it passes over every session); 503 when the aggregator does not answer.
async fn over_sessions<T: serde::Serialize + Send + 'static>(
    state: &AppState,
    answer: impl FnOnce(
            Vec<lockscope_model::wire::SessionView>,
            &dyn Fn(&str) -> Option<LockView>,
            &waitfor::IdentityRules,
        ) -> T
        + Send
        + 'static,
) -> Response {
    let Some(sessions) = state.handle.ask(|reply| Command::Sessions { reply }).await else {
        return unavailable().into_response();
    };
    let snapshot = state.handle.snapshot.borrow().clone();
    let rules = state.settings.identity.clone();
    let answered =
        tokio::task::spawn_blocking(move || answer(sessions, &|id| snapshot.lock(id), &rules));
    match answered.await {
        Ok(body) => Json(body).into_response(),
        Err(_) => unavailable().into_response(),
    }
}

/// `GET /api/v1/blockers`: the participants at the roots of the wait-for graph, biggest
/// impact first ([`waitfor::blockers`]).
#[utoipa::path(
    get,
    path = "/api/v1/blockers",
    tag = "sessions",
    params(bodies::BlockersParams),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "Root blockers, the most held up first", body = lockscope_model::wire::BlockersPage),
        bodies::BadQuery,
        bodies::ReadRefusals,
        bodies::Stopping,
    )
)]
async fn blockers(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let now = now_ms();
    let query = match waitfor::BlockersQuery::parse(&query_pairs(raw)) {
        Ok(query) => query,
        Err(e) => return bad_parameter(e),
    };
    over_sessions(&state, move |all, lock, rules| {
        waitfor::blockers(&query, all, lock, rules, now)
    })
    .await
}

/// `GET /api/v1/sessions`: one page of the sessions matching the query
/// ([`sessions`](mod@sessions)).
#[utoipa::path(
    get,
    path = "/api/v1/sessions",
    tag = "sessions",
    params(bodies::SessionParams),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "One page of the matching sessions", body = lockscope_model::wire::SessionPage),
        bodies::BadQuery,
        bodies::ReadRefusals,
        bodies::Stopping,
    )
)]
async fn sessions(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let now = now_ms();
    let query = match sessions::SessionQuery::parse(&query_pairs(raw), now) {
        Ok(query) => query,
        Err(e) => return bad_parameter(e),
    };
    // Only the page's sessions are named by process.
    over_sessions(&state, move |all, lock, rules| {
        let mut page = sessions::page(&query, all, now);
        for s in &mut page.sessions {
            s.process = waitfor::process_for(s, &lock, rules);
        }
        page
    })
    .await
}

/// `GET /api/v1/waitfor`: one page of the wait-for graph's edges, longest wait first, with the
/// sessions they name and the cycles ([`waitfor`](mod@waitfor)).
#[utoipa::path(
    get,
    path = "/api/v1/waitfor",
    tag = "sessions",
    params(bodies::WaitForParams),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "One page of the wait-for graph's edges, longest wait first", body = lockscope_model::wire::WaitForPage),
        bodies::BadQuery,
        bodies::ReadRefusals,
        bodies::Stopping,
    )
)]
async fn waitfor(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let now = now_ms();
    let query = match waitfor::WaitForQuery::parse(&query_pairs(raw), now) {
        Ok(query) => query,
        Err(e) => return bad_parameter(e),
    };
    // When each wait began comes from the published locks: a wait they do not show (not yet,
    // or no more) has no start and sorts last.
    over_sessions(&state, move |all, lock, rules| {
        waitfor::page(&query, all, lock, rules, now)
    })
    .await
}

#[utoipa::path(
    get,
    path = "/api/v1/sources",
    tag = "operations",
    security((), ("read_token" = []), ("access_token" = [])),
    responses((status = 200, description = "Every configured source and its state", body = bodies::SourcesBody), bodies::ReadRefusals)
)]
async fn sources(State(handle): State<Handle>) -> Json<serde_json::Value> {
    let snapshot = handle.snapshot.borrow().clone();
    Json(json!({ "sources": snapshot.sources }))
}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Every source finished its first sync", content_type = "text/plain", body = String, example = "ready\n"),
        (status = 503, description = "Sources still syncing", body = bodies::NotReadyBody),
    )
)]
async fn readyz(State(handle): State<Handle>) -> Response {
    let snapshot = handle.snapshot.borrow().clone();
    let waiting: Vec<&str> = snapshot
        .sources
        .iter()
        .filter(|s| !s.synced)
        .map(|s| s.name.as_str())
        .collect();
    if waiting.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": "sources not synced yet", "sources": waiting })),
        )
            .into_response()
    }
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    description = "Open, or behind `[http] metrics_auth`'s credentials; when reads need \
        credentials and `metrics_auth` is not set, a read credential (unless \
        `[http] metrics_open = true`): its `lock` labels name lock paths.",
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "Prometheus text format (version 0.0.4), or OpenMetrics 1.0 when the `Accept` header asks for it", content(
            (String = "text/plain"),
            (String = "application/openmetrics-text"),
        )),
        bodies::ReadRefusals,
        bodies::Stopping,
    )
)]
async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Response, AppError> {
    let openmetrics = crate::metrics::wants_openmetrics(
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
    );
    let (handle, judge) = (&state.handle, state.settings.judge.clone());
    let mut input = handle
        .ask(|reply| Command::Metrics { reply })
        .await
        .ok_or_else(unavailable)?;
    input.lagging = handle
        .snapshot
        .borrow()
        .sources
        .iter()
        .filter(|s| s.lagging)
        .map(|s| s.name.clone())
        .collect();
    let mut samples = crate::metrics::Samples::default();
    crate::metrics::render(&input, &mut samples);
    crate::metrics::render_self(handle, &mut samples);
    if let Some(store) = &state.settings.store {
        crate::metrics::render_store(store, &mut samples);
    }
    crate::metrics::render_releases(&state.settings.admin.outcome_counts().await, &mut samples);
    let (open, resyncs) = state.settings.view_cache.counts();
    crate::metrics::render_views(open, resyncs, &mut samples);
    let judged = state
        .settings
        .detection
        .judged(handle, judge, state.settings.identity.clone())
        .await;
    crate::metrics::render_detection(&judged, &mut samples);
    let (registry, own) = (handle.registry.clone(), state.own_metrics.clone());
    let body = tokio::task::spawn_blocking(move || {
        let text = crate::metrics::exposition_of(&[&registry, &own], samples);
        if openmetrics {
            text
        } else {
            crate::metrics::classic_text(&text)
        }
    })
    .await
    .map_err(|_| unavailable())?;
    Ok((
        [(
            header::CONTENT_TYPE,
            if openmetrics {
                crate::metrics::OPENMETRICS
            } else {
                crate::metrics::TEXT
            },
        )],
        body,
    )
        .into_response())
}

fn snapshot_event(snapshot: &Snapshot, judge: &Judge) -> StreamEvent {
    let now = now_ms();
    StreamEvent::Snapshot {
        sources: snapshot.sources.clone(),
        locks: snapshot.views().map(|l| ticked(l, now, judge)).collect(),
    }
}

/// Serialises the `snapshot` stream event once for every client that subscribed before the
/// snapshot was read: when 50 dashboards open at once (or fall behind at once) that is one or
/// two serialisations of every lock instead of 50. Tickets order subscriptions and reads: a
/// serialisation may go to a client only if its snapshot was read after the client
/// subscribed to deltas, so no delta falls between the two.
#[derive(Default)]
pub struct SnapshotCache {
    tickets: std::sync::atomic::AtomicU64,
    last: tokio::sync::Mutex<Option<SerialisedSnapshot>>,
}

impl std::fmt::Debug for SnapshotCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotCache").finish_non_exhaustive()
    }
}

struct SerialisedSnapshot {
    /// The ticket taken just before the snapshot was read.
    read_ticket: u64,
    version: u64,
    /// The whole `snapshot` event as it goes on the wire; every client's stream holds the same
    /// bytes (reference-counted), however slowly it reads them.
    frame: axum::body::Bytes,
}

impl SnapshotCache {
    /// Called right after subscribing to deltas.
    fn ticket(&self) -> u64 {
        self.tickets
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    /// A snapshot read after `ticket` was taken, serialised: (version, JSON). `None` only if
    /// serialising failed (logged); the stream then ends and the browser reconnects.
    async fn get(
        &self,
        ticket: u64,
        snapshot: &tokio::sync::watch::Receiver<Arc<Snapshot>>,
        judge: Arc<Judge>,
    ) -> Option<(u64, axum::body::Bytes)> {
        let mut last = self.last.lock().await;
        if let Some(s) = last.as_ref().filter(|s| s.read_ticket > ticket) {
            return Some((s.version, s.frame.clone()));
        }
        let read_ticket = self.ticket();
        let snapshot: Arc<Snapshot> = snapshot.borrow().clone();
        let version = snapshot.version;
        // Every lock, ticked and serialised: seconds at 100k locks; off the async workers.
        let json =
            tokio::task::spawn_blocking(move || sse_frame(&snapshot_event(&snapshot, &judge)))
                .await;
        let frame = match json {
            Ok(Ok(frame)) => frame,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot serialise the snapshot");
                return None;
            }
            Err(e) => {
                tracing::error!(error = %e, "snapshot serialisation panicked");
                return None;
            }
        };
        *last = Some(SerialisedSnapshot {
            read_ticket,
            version,
            frame: frame.clone(),
        });
        Some((version, frame))
    }
}

/// Open event streams per client address (IPv6: per /64, [`crate::admin::client_key`]), at
/// most `per_client` (`[http] max_streams_per_client`).
pub struct StreamSlots {
    pub per_client: usize,
    open: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

impl std::fmt::Debug for StreamSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSlots")
            .field("per_client", &self.per_client)
            .finish_non_exhaustive()
    }
}

/// One open stream's slot, given back when dropped.
pub struct StreamSlot {
    slots: Arc<StreamSlots>,
    client: std::net::IpAddr,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}

impl StreamSlots {
    pub fn new(per_client: usize) -> Self {
        StreamSlots {
            per_client: per_client.max(1),
            open: Default::default(),
        }
    }

    /// A slot for one more stream of `client`, if it has one left.
    pub fn take(self: &Arc<Self>, client: std::net::IpAddr) -> Option<StreamSlot> {
        let client = crate::admin::client_key(client);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(client).or_default();
        if *n >= self.per_client {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            slots: self.clone(),
            client,
        })
    }
}

/// `event` as one Server-Sent Event on the wire: its name, and its JSON on one `data:` line
/// (compact JSON has no line breaks).
fn sse_frame(event: &StreamEvent) -> serde_json::Result<axum::body::Bytes> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.name().as_bytes());
    out.extend_from_slice(b"\ndata: ");
    serde_json::to_writer(&mut out, event)?;
    out.extend_from_slice(b"\n\n");
    Ok(out.into())
}

/// The comment an idle event stream sends every [`KEEP_ALIVE`] so proxies keep it open.
const KEEP_ALIVE_FRAME: &[u8] = b":\n\n";
/// How often an idle event stream sends a comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /api/v1/events`: with a lock query, that view live ([`view`]); without one, every lock
/// and every change. `X-Accel-Buffering: no` tells nginx (and proxies that read it) to pass
/// each event on at once rather than buffer the stream.
#[utoipa::path(
    get,
    path = "/api/v1/events",
    tag = "stream",
    description = "Server-Sent Events (`text/event-stream`), never ending; a comment line every 15 s \
        keeps idle connections open. Without a lock query: `snapshot` (every source and lock) \
        first, then `lock`, `removed` or `source` per change, each event's data a `StreamEvent` \
        whose `type` is the event's name; a client that falls behind gets a fresh `snapshot`. \
        With a lock query (any of `GET /api/v1/locks`' parameters but `format`, or `lock=ID`), \
        that page live: `snapshot` (the page, its counts and the sources), then at most five \
        pushes a second of `lock`, `removed`, `source` and `view` (the page's counts and cursor). \
        The extension `x-sse-events` maps each stream's event names to their data's schema.",
    params(bodies::LockParams),
    security((), ("read_token" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "The event stream; each event's data is one of these (see `x-sse-events` for which name carries which)", content_type = "text/event-stream", body = bodies::AnyEventData),
        bodies::BadQuery,
        bodies::ReadRefusals,
    )
)]
async fn events(
    state: State<AppState>,
    client: Option<axum::Extension<proxy::ClientAddr>>,
    raw: RawQuery,
) -> Response {
    let client = client.map_or(std::net::IpAddr::from([0u8; 16]), |c| c.0 .0);
    let Some(slot) = state.settings.stream_slots.take(client) else {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            Json(json!({
                "error": format!(
                    "too many open event streams from this address (at most {}: \
                     http.max_streams_per_client)",
                    state.settings.stream_slots.per_client
                ),
            })),
        )
            .into_response();
    };
    let response = event_stream(state, raw).await;
    // The slot is the body's: held while the stream is open.
    let mut response = response.map(|body| {
        axum::body::Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _slot = &slot;
            chunk
        }))
    });
    if response.status().is_success() {
        response.headers_mut().insert(
            header::HeaderName::from_static("x-accel-buffering"),
            header::HeaderValue::from_static("no"),
        );
    }
    response
}

async fn event_stream(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let pairs = query_pairs(raw);
    if !view::wants_view(&pairs) {
        return every_lock(state).into_response();
    }
    let query = match query::LockQuery::parse(&pairs, now_ms()) {
        Ok(query) if query.format == query::Format::Json => query,
        Ok(_) => {
            return bad_parameter(paging::BadParameter {
                parameter: "format".into(),
                message: "an event stream is not NDJSON: leave format out".into(),
            })
        }
        Err(e) => return bad_parameter(e),
    };
    let key = view::view_key(&pairs);
    let (live, evicted) = state.settings.view_cache.join(&key);
    let stream = view::ViewStream {
        evicted,
        key,
        query,
        cache: state.settings.view_cache.clone(),
        snapshots: state.handle.snapshot.clone(),
        judge: state.settings.judge.clone(),
        stopping: state.settings.stopping.clone(),
        queued: Arc::default(),
    };
    let queued = stream.queued.clone();
    let open = state.settings.http_metrics.event_stream();
    let (tx, rx) = view::channel();
    tokio::spawn(stream.run(tx));
    // Taken by the response body: written out, or about to be.
    let batches = tokio_stream::wrappers::ReceiverStream::new(rx).inspect(move |batch| {
        // The stream counts as open (and its live view as watched) while its body lives.
        let _open = (&open, &live);
        queued.took(view::batch_bytes(batch));
    });
    let events = batches
        .flat_map(|batch| futures::stream::iter(batch.into_iter().map(|e| e.sse())))
        .map(Ok::<_, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The stream of every lock: a snapshot of all, then every change. Written as the wire's bytes
/// rather than through axum's `Sse`, whose events copy their data: the snapshot (megabytes at
/// 100k locks) is one shared buffer for every client, however many read it slowly.
fn every_lock(state: AppState) -> Response {
    let (handle, judge) = (state.handle, state.settings.judge.clone());
    let stopping = state.settings.stopping.clone();
    let open = state.settings.http_metrics.event_stream();
    // Subscribe before reading the snapshot, so nothing between the two is missed; deltas
    // already contained in the snapshot are skipped by version.
    let mut rx = handle.deltas.subscribe();
    let cache = state.settings.snapshot_cache.clone();
    let ticket = cache.ticket();
    let snapshot_rx = handle.snapshot.clone();
    let (tx, frames) = tokio::sync::mpsc::channel::<axum::body::Bytes>(64);
    tokio::spawn(async move {
        let Some((mut version, frame)) = cache.get(ticket, &snapshot_rx, judge.clone()).await
        else {
            return;
        };
        if tx.send(frame).await.is_err() {
            return;
        }
        let stop = stopped(stopping);
        tokio::pin!(stop);
        let mut keep_alive =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        loop {
            let received = tokio::select! {
                received = rx.recv() => received,
                _ = keep_alive.tick() => {
                    if tx.send(axum::body::Bytes::from_static(KEEP_ALIVE_FRAME)).await.is_err() {
                        return;
                    }
                    continue;
                }
                () = &mut stop => return,
            };
            let event = match received {
                Ok(delta) => {
                    if delta.version <= version {
                        continue;
                    }
                    match &delta.change {
                        Change::Lock(id, stored) => {
                            // Marked last seen while its source is not up, as every view is.
                            let view = snapshot_rx.borrow().render_marked(id, stored);
                            StreamEvent::Lock {
                                lock: Box::new(ticked(view, now_ms(), &judge)),
                            }
                        }
                        Change::Removed(id) => StreamEvent::Removed { id: id.clone() },
                        Change::Source(source) => StreamEvent::Source {
                            source: source.clone(),
                        },
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Deltas were lost: start again from a snapshot read after now.
                    let ticket = cache.ticket();
                    let Some((at, frame)) = cache.get(ticket, &snapshot_rx, judge.clone()).await
                    else {
                        return;
                    };
                    version = at;
                    if tx.send(frame).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let frame = match sse_frame(&event) {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::error!(error = %e, "cannot serialise stream event");
                    continue;
                }
            };
            keep_alive.reset();
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    // The stream counts as open while its body lives.
    let body = tokio_stream::wrappers::ReceiverStream::new(frames).map(move |frame| {
        let _open = &open;
        Ok::<_, Infallible>(frame)
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}
