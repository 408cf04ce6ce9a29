//! The documentation-only types of the OpenAPI document: the small JSON envelopes the handlers
//! build with `json!` (errors, `{"sources": …}`), the event stream's data, the query
//! parameters and the refusals several endpoints share. The handlers name them in their
//! `#[utoipa::path]` attributes and [`super::openapi`] derives the document from both; nothing
//! here changes what a handler answers.

use lockscope_model::wire::{
    AuditRecord, CycleView, SourceView, StreamEvent, ViewLock, ViewRemoved, ViewSnapshot,
    ViewSource, ViewTotals,
};
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, IntoResponses, ToSchema};

use super::paging::Order;
use super::query::{Format, LockState, Sort};

/// Every JSON error answer: a message safe to show a client.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// A 400 for a query parameter: the message and the parameter it is about.
#[derive(Debug, Serialize, ToSchema)]
pub struct BadParameterBody {
    pub error: String,
    /// The parameter that is wrong (given twice, unknown, too long or out of range).
    pub parameter: String,
}

/// `GET /readyz` before every source finished its first sync.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotReadyBody {
    pub error: String,
    /// The sources still syncing.
    pub sources: Vec<String>,
}

/// `GET /api/v1/sources`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourcesBody {
    pub sources: Vec<SourceView>,
}

/// `GET /api/v1/deadlocks`: every cycle of the wait-for graph.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadlocksBody {
    pub cycles: Vec<CycleView>,
}

/// `GET /api/v1/audit`: one page of the audit log, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub audit: Vec<AuditRecord>,
    /// The `before` of the next page; none on the last.
    pub next: Option<String>,
}

/// A force release that ran: what was deleted.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReleasedBody {
    /// What the backend deleted (its own shape per backend).
    pub released: Value,
    /// The audit record of this attempt.
    pub audit_id: i64,
    /// Set when the outcome could not be written to the audit store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
}

/// A refused or failed force release.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReleaseErrorBody {
    pub error: String,
    /// The audit record of this attempt (absent when none could be written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_id: Option<i64>,
    /// A bad body: the field that is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// 409: the holder that holds the lock now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
}

/// The data of any event of `GET /api/v1/events` (which event name carries which schema is in
/// the operation's `x-sse-events`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code, clippy::large_enum_variant)]
pub enum AnyEventData {
    All(StreamEvent),
    ViewSnapshot(ViewSnapshot),
    ViewTotals(ViewTotals),
    ViewLock(ViewLock),
    ViewRemoved(ViewRemoved),
    ViewSource(ViewSource),
}

/// The parameters of a lock query (`GET /api/v1/locks`, and `GET /api/v1/events` for a live
/// view). Text parameters take at most 1,024 bytes; an empty one is none. Each parameter at
/// most once; an unknown one is a 400 naming it.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct LockParams {
    /// Only locks of this source (its configured name).
    #[param(max_length = 1024)]
    pub source: Option<String>,
    /// Only locks of this backend.
    #[param(inline)]
    pub backend: Option<lockscope_model::wire::Backend>,
    /// Only locks of this recipe (as `recipe` shows it).
    #[param(max_length = 1024)]
    pub recipe: Option<String>,
    /// In the path or a holder's or waiter's session, ignoring ASCII case.
    #[param(max_length = 1024)]
    pub q: Option<String>,
    /// One lock by its id (the lock page's live view).
    #[param(max_length = 1024)]
    pub lock: Option<String>,
    /// Only locks a stale rule fires for (`true`) or none does (`false`).
    pub stale: Option<bool>,
    #[param(inline)]
    pub state: Option<LockState>,
    /// Default `path`.
    #[param(inline)]
    pub sort: Option<Sort>,
    /// Default: ascending for `path`, `source`, `recipe`; descending (most first) otherwise.
    #[param(inline)]
    pub order: Option<Order>,
    /// Locks per page.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<u32>,
    /// The `next` of the page before; bound to its query, lives 15 minutes.
    #[param(max_length = 1024)]
    pub cursor: Option<String>,
    /// `ndjson`: every matching lock, one JSON object per line (not for the event stream).
    #[param(inline)]
    pub format: Option<Format>,
}

/// The parameters of `GET /api/v1/sessions`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SessionParams {
    #[param(max_length = 1024)]
    pub source: Option<String>,
    #[param(inline)]
    pub kind: Option<lockscope_model::wire::SessionKind>,
    /// In the session's id or a connection's user, application or client, ignoring ASCII case.
    #[param(max_length = 1024)]
    pub q: Option<String>,
    #[param(inline)]
    pub state: Option<super::sessions::SessionState>,
    /// Default `session`.
    #[param(inline)]
    pub sort: Option<super::sessions::Sort>,
    /// Default: descending for `holds` and `waits`, ascending otherwise.
    #[param(inline)]
    pub order: Option<Order>,
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<u32>,
    #[param(max_length = 1024)]
    pub cursor: Option<String>,
}

/// The parameters of `GET /api/v1/waitfor`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct WaitForParams {
    #[param(max_length = 1024)]
    pub source: Option<String>,
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<u32>,
    #[param(max_length = 1024)]
    pub cursor: Option<String>,
}

/// The parameters of `GET /api/v1/blockers`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct BlockersParams {
    /// Only root blockers with a session in this source.
    #[param(max_length = 1024)]
    pub source: Option<String>,
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<u32>,
}

/// The parameters of `GET /api/v1/audit`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct AuditParams {
    /// Records per page.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<u32>,
    /// Only records older than this audit id (the `next` of the page before).
    #[param(minimum = 1)]
    pub before: Option<i64>,
}

/// The answers a read may get besides its own when read tokens are configured.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum ReadRefusals {
    /// No read token was given (the answer carries `WWW-Authenticate: Bearer`).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token given may not read (an admin token in a URL, or an unknown token).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Too many failed authentications from this address lately
    /// (`admin.max_failed_auth_per_minute`), or, for an event stream, too many open streams
    /// from it (`http.max_streams_per_client`).
    #[response(status = 429)]
    TooMany(ErrorBody),
}

/// The answer of a handler that asks the aggregator, when it does not answer (stopping).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum Stopping {
    /// lockscope is shutting down.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// A bad query parameter.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum BadQuery {
    /// A parameter is given twice, unknown, too long, out of range or not one of its values;
    /// `parameter` names it.
    #[response(status = 400)]
    BadParameter(BadParameterBody),
}
