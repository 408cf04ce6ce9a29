//! One force-release attempt, from its first byte to its answer, as one typed operation: every
//! way an attempt can end is one [`Ended`] value, and the one function that reports an ending
//! ([`Attempt::report`]) writes its count (`lockscope_force_releases_total{outcome}`), its log
//! line (target `lockscope::audit`, every field a client chose escaped) and its audit record
//! together, so none of the three can be forgotten (vector's internal events). `http/admin.rs`
//! only takes the request apart and answers with what this returns.
//!
//! The order is what makes the audit trustworthy:
//!
//! 1. **Before authentication** nothing from the request is kept but bounded fields (the lock id
//!    cut to [`UNAUTHENTICATED_FIELD_CHARS`], the client's address): the body is not even read.
//!    A token not seen to pass before takes one of the client's tries first (given back if it
//!    passes); a client without one is refused before its credentials are looked at, and of
//!    those refusals one per client and minute is stored, the rest counted and logged.
//! 2. **After authentication** the body is read up to [`MAX_BODY_BYTES`] and checked
//!    ([`lockscope_model::release::parse_request`]); refusals are stored with the fields given.
//! 3. **Before anything is changed** the attempt is written to the store as `pending`; if that
//!    write fails, nothing is changed.
//! 4. **The release runs in a task of its own**: a client that goes away cannot cancel it. It
//!    marks the holder `forced` in the aggregator, asks the backend's compare-and-delete (each
//!    connection under its timeouts, the whole at most [`RELEASE_DEADLINE`]) and completes the
//!    record with the outcome, whether or not anyone still waits for the answer.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::id::parse_lock_id;
use lockscope_model::release::{bounded, parse_request, UNAUTHENTICATED_FIELD_CHARS};
use lockscope_model::wire::{AuditRecord, LockView, ReleaseRequest};
use serde_json::{json, Value};

pub use lockscope_model::release::MAX_BODY_BYTES;

use super::{Admin, Denied, Gate, Outcome};
use lockscope_core::aggregate::{Command, Handle, FORCED_MARK_TTL};
use lockscope_core::now_ms;

/// Every outcome an attempt is counted under (`lockscope_force_releases_total{outcome}`), each
/// listed from the start.
pub const OUTCOMES: [&str; 13] = [
    "released",
    "holder_changed",
    "not_found",
    "unauthorized",
    "forbidden",
    "invalid",
    "rate_limited",
    "too_large",
    "unsupported",
    "failed",
    "unavailable",
    "store_unavailable",
    "disabled",
];

/// A release task gives up after this long; its record then says what is known.
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(60);

/// How an attempt ended: refused at one of its steps, or run to an [`Outcome`].
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// The client has no authentication tries left (`admin.max_failed_auth_per_minute`).
    AuthRateLimited,
    /// Force release is off.
    Disabled,
    /// No admin bearer token.
    Unauthorized,
    /// A token that may not release.
    Forbidden,
    /// Too many credentials wait to be verified; nothing was looked at.
    Busy,
    /// The body is larger than [`MAX_BODY_BYTES`], or could not be read.
    TooLarge,
    /// More releases than `admin.max_releases_per_minute`.
    ReleasesRateLimited,
    /// A bad body: the field at fault and what is wrong.
    Invalid {
        field: &'static str,
        message: String,
    },
    /// No lock with that id.
    NotFound,
    /// The attempt cannot be put on record: nothing was changed.
    StoreUnavailable(&'static str),
    /// The release ran and came to this.
    Ran(Outcome),
}

impl Ended {
    /// The outcome's name: the audit record's `outcome` and the metric's label.
    pub fn name(&self) -> &'static str {
        match self {
            Ended::AuthRateLimited | Ended::ReleasesRateLimited => "rate_limited",
            Ended::Disabled => "disabled",
            Ended::Unauthorized => "unauthorized",
            Ended::Forbidden => "forbidden",
            Ended::Busy => "unavailable",
            Ended::TooLarge => "too_large",
            Ended::Invalid { .. } => "invalid",
            Ended::NotFound => "not_found",
            Ended::StoreUnavailable(_) => "store_unavailable",
            Ended::Ran(outcome) => outcome.name(),
        }
    }

    /// The HTTP status the API answers it with.
    pub fn status(&self) -> u16 {
        match self {
            Ended::AuthRateLimited | Ended::ReleasesRateLimited => 429,
            Ended::Disabled | Ended::Forbidden => 403,
            Ended::Unauthorized => 401,
            Ended::Busy | Ended::StoreUnavailable(_) => 503,
            Ended::TooLarge => 413,
            Ended::Invalid { .. } => 422,
            Ended::NotFound => 404,
            Ended::Ran(Outcome::Released(_)) => 200,
            Ended::Ran(Outcome::HolderChanged(_)) => 409,
            Ended::Ran(Outcome::Unsupported(_)) => 422,
            Ended::Ran(Outcome::Failed(_)) => 502,
            Ended::Ran(Outcome::Unavailable(_)) => 503,
        }
    }

    /// The answer's body (also the audit record's `detail`).
    pub fn body(&self, id: &str) -> Value {
        let error = |message: String| json!({ "error": message });
        match self {
            Ended::AuthRateLimited => error(
                "too many failed authentications from this address; wait a minute \
                 (admin.max_failed_auth_per_minute)"
                    .into(),
            ),
            Ended::Disabled => {
                error("force release is off: set [admin] enabled = true with tokens".into())
            }
            Ended::Unauthorized => error("an admin bearer token is required".into()),
            Ended::Forbidden => error("that token may not release locks".into()),
            Ended::Busy => error(
                "too many credentials are being verified at once; retry in a second: nothing \
                 was changed"
                    .into(),
            ),
            Ended::TooLarge => error(format!(
                "body: larger than {MAX_BODY_BYTES} bytes (or not readable)"
            )),
            Ended::ReleasesRateLimited => error(
                "too many force releases; wait a little (admin.max_releases_per_minute)".into(),
            ),
            Ended::Invalid { field, message } => {
                json!({ "error": format!("{field}: {message}"), "field": field })
            }
            Ended::NotFound => error(format!("no lock with id {id:?}")),
            Ended::StoreUnavailable(why) => error((*why).into()),
            Ended::Ran(Outcome::Released(detail)) => json!({ "released": detail }),
            Ended::Ran(Outcome::HolderChanged(detail)) => json!({
                "error": "the holder you named does not hold the lock now; nothing was changed",
                "detail": detail,
            }),
            Ended::Ran(Outcome::Unsupported(message)) => error(message.clone()),
            Ended::Ran(Outcome::Unavailable(message)) => error(format!(
                "no server holding the lock could be asked; nothing was changed: {message}"
            )),
            Ended::Ran(Outcome::Failed(message)) => error(format!(
                "the coordination server answered an error: {message}"
            )),
        }
    }
}

/// What the client is answered: a status and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

/// Where an attempt's record goes when it is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// Inserted whole (a refusal).
    Insert,
    /// Not stored: only counted and logged (a refusal past the client's minute, or one the store
    /// cannot take).
    Skip,
    /// Completes the `pending` record written before the release ran.
    Complete,
}

/// One attempt: what is known of it so far.
pub struct Attempt {
    admin: Arc<Admin>,
    store: Option<lockscope_store::Store>,
    record: AuditRecord,
}

/// What a force release needs besides the request: the admin state, the aggregator and the store.
#[derive(Clone)]
pub struct Context {
    pub admin: Arc<Admin>,
    pub handle: Handle,
    pub store: Option<lockscope_store::Store>,
}

/// Runs one force-release attempt on lock `id` for `client`, with the `Authorization` header's
/// value `authorization`; `body` reads the request body (at most [`MAX_BODY_BYTES`]; `None` when
/// it is larger or unreadable) and is only awaited once the caller is authenticated.
pub async fn force_release(
    cx: &Context,
    client: IpAddr,
    id: String,
    authorization: Option<&str>,
    body: impl Future<Output = Option<Vec<u8>>>,
) -> Answer {
    let admin = cx.admin.clone();
    // Only bounded fields until the caller is authenticated.
    let mut attempt = Attempt {
        admin: admin.clone(),
        store: cx.store.clone(),
        record: AuditRecord {
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
        },
    };
    // A token that passed before takes no try; anything else takes one of the client's tries
    // before it is looked at (given back if it passes), so a burst of any concurrency from one
    // client is at most its budget of verifications and audit records, then one a minute.
    let known = admin
        .enabled
        .then(|| admin.authorized_before(authorization))
        .flatten();
    if let Some(name) = known {
        attempt.record.token_name = name;
    } else {
        if let Gate::Closed { record } = admin.begin_attempt(client).await {
            let store = if record { Record::Insert } else { Record::Skip };
            return attempt.report(Ended::AuthRateLimited, store, &id).await;
        }
        if !admin.enabled {
            // Refused as a failed authentication is (its try kept): nobody may fill the store
            // through it.
            return attempt.report(Ended::Disabled, Record::Insert, &id).await;
        }
        match admin.authorize(authorization).await {
            Ok(name) => {
                admin.attempt_passed(client).await;
                attempt.record.token_name = name;
            }
            Err(denied) => {
                let ended = match denied {
                    Some(Denied::Unauthorized) => Ended::Unauthorized,
                    Some(Denied::Forbidden) => {
                        attempt.record.token_name = "(unknown token)".into();
                        Ended::Forbidden
                    }
                    None => Ended::Busy,
                };
                return attempt.report(ended, Record::Insert, &id).await;
            }
        }
    }
    // Authenticated: the id is kept whole from here on.
    attempt.record.lock_id = id.clone();
    attempt.record.source = parse_lock_id(&id).map(|(s, _)| s).unwrap_or_default();
    let Some(body) = body.await else {
        return attempt.report(Ended::TooLarge, Record::Insert, &id).await;
    };
    if !admin.allow_rate().await {
        return attempt
            .report(Ended::ReleasesRateLimited, Record::Insert, &id)
            .await;
    }
    let request = match parse_request(&body) {
        Ok(request) => request,
        Err(e) => {
            let ended = Ended::Invalid {
                field: e.field,
                message: e.message,
            };
            return attempt.report(ended, Record::Insert, &id).await;
        }
    };
    attempt.record.observed_holder = request.holder.clone();
    attempt.record.reason = request.reason.clone();
    let lock = cx.handle.snapshot.borrow().lock(&id).map(Arc::new);
    let Some(lock) = lock else {
        return attempt.report(Ended::NotFound, Record::Insert, &id).await;
    };
    // The attempt is on record before anything is changed.
    let Some(store) = cx.store.clone() else {
        let why = "no audit store is configured ([store] url): nothing was changed";
        return attempt
            .report(Ended::StoreUnavailable(why), Record::Skip, &id)
            .await;
    };
    attempt.record.outcome = "pending".into();
    match store.audit(attempt.record.clone()).await {
        Ok(audit_id) => attempt.record.id = audit_id,
        Err(e) => {
            tracing::error!(error = %e, "cannot write the audit record; the release is not run");
            let why = "the audit record cannot be written: nothing was changed";
            return attempt
                .report(Ended::StoreUnavailable(why), Record::Skip, &id)
                .await;
        }
    }
    log_line(&attempt.record, "force release started");
    // A task of its own: the client going away drops the caller, not the release.
    let audit_id = attempt.record.id;
    let task = tokio::spawn(run(cx.handle.clone(), attempt, lock, request));
    match task.await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::error!(error = %e, audit_id, "the release task ended without an answer");
            Answer {
                status: 500,
                body: json!({
                    "error": "the release task ended without an answer; see the audit log",
                    "audit_id": audit_id,
                }),
            }
        }
    }
}

/// Runs the release and completes its `pending` record; the answer for the client, if it still
/// waits.
async fn run(
    handle: Handle,
    attempt: Attempt,
    lock: Arc<LockView>,
    request: ReleaseRequest,
) -> Answer {
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
    // The servers the source's model has discovered (empty where its release needs none).
    let members = handle
        .ask(|reply| Command::Members {
            source: lock.source.clone(),
            reply,
        })
        .await
        .flatten()
        .unwrap_or_default();
    // The backend's compare-and-delete in a task of its own too, so that even a panic in it
    // completes the record (as `failed`), and one past the deadline is stopped, not left to
    // change something after the record says what is known.
    let mut releasing = tokio::spawn({
        let (admin, lock, request) = (attempt.admin.clone(), lock.clone(), request.clone());
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
            holder,
            released: matches!(outcome, Outcome::Released(_)),
            reply,
        })
        .await;
    attempt
        .report(Ended::Ran(outcome), Record::Complete, &id)
        .await
}

impl Attempt {
    /// The one report of how the attempt ended: its count, its log line and its audit record
    /// (inserted, completed, or skipped as `store` says), then the answer.
    async fn report(mut self, ended: Ended, store: Record, id: &str) -> Answer {
        let name = ended.name();
        let mut body = ended.body(id);
        match &ended {
            Ended::Ran(Outcome::Unavailable(message)) => {
                tracing::error!(lock = ?id, error = %message, "force release reached no server");
            }
            Ended::Ran(Outcome::Failed(message)) => {
                tracing::error!(lock = ?id, error = %message, "force release failed");
            }
            _ => {}
        }
        let finished = now_ms();
        self.record.outcome = name.to_string();
        self.record.detail = body.to_string();
        self.record.finished_ms = Some(if store == Record::Complete {
            finished
        } else {
            self.record.at_ms
        });
        self.admin.count(name).await;
        let line = match ended {
            Ended::Ran(_) => "force release attempt",
            _ => "force release refused",
        };
        log_line(&self.record, line);
        match (store, &self.store) {
            (Record::Skip, _) => {}
            (Record::Insert, None) => {
                tracing::warn!("no store configured: this refusal is only in the log");
            }
            (Record::Insert, Some(s)) => match s.audit(self.record).await {
                Ok(audit_id) => body["audit_id"] = json!(audit_id),
                Err(e) => tracing::error!(error = %e, "cannot write the audit record of a refusal"),
            },
            (Record::Complete, None) => {}
            (Record::Complete, Some(s)) => {
                let audit_id = self.record.id;
                body["audit_id"] = json!(audit_id);
                if let Err(e) = s
                    .audit_finish(audit_id, name, self.record.detail.clone(), finished)
                    .await
                {
                    tracing::error!(error = %e, audit_id, outcome = name,
                        "cannot complete the audit record now; the store completes it when it can");
                    body["audit_error"] = json!(
                        "the outcome could not be written to the audit store yet; it is in \
                         lockscope's log"
                    );
                }
            }
        }
        Answer {
            status: ended.status(),
            body,
        }
    }
}

/// One `lockscope::audit` log line. Every field a client could choose is written escaped
/// (`Debug`), so a newline in a reason cannot start a line of its own.
fn log_line(record: &AuditRecord, message: &'static str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ending_has_one_name_status_and_body() {
        let all = [
            Ended::AuthRateLimited,
            Ended::Disabled,
            Ended::Unauthorized,
            Ended::Forbidden,
            Ended::Busy,
            Ended::TooLarge,
            Ended::ReleasesRateLimited,
            Ended::Invalid {
                field: "reason",
                message: "too long".into(),
            },
            Ended::NotFound,
            Ended::StoreUnavailable("down"),
            Ended::Ran(Outcome::Released(json!({}))),
            Ended::Ran(Outcome::HolderChanged(json!({}))),
            Ended::Ran(Outcome::Unsupported("no".into())),
            Ended::Ran(Outcome::Failed("err".into())),
            Ended::Ran(Outcome::Unavailable("down".into())),
        ];
        for ended in all {
            assert!(
                OUTCOMES.contains(&ended.name()),
                "{ended:?}: {} is not a counted outcome",
                ended.name()
            );
            assert!((200..600).contains(&ended.status()));
            let body = ended.body("r~x");
            assert!(body.is_object());
            if ended.status() >= 400 {
                assert!(body["error"].is_string(), "{ended:?}: {body}");
            }
        }
        assert_eq!(
            Ended::Invalid {
                field: "reason",
                message: "too long".into()
            }
            .body("x")["field"],
            "reason"
        );
    }

    /// A `MakeWriter` into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

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
            log_line(&record, "force release refused")
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
