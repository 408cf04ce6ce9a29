//! The store: the audit log of force releases, the lock history (every lock event and every
//! lock's last state), kept in an embedded SQLite file (the default) or in a PostgreSQL database
//! that several lockscope replicas share.
//!
//! Core module: it owns the store's schema (`backend/store/migrations/`, applied by sqlx's
//! migrator at start; a store whose schema is newer than this binary is refused), the handle
//! the rest of lockscope uses ([`Store`]) and the task that connects and writes
//! ([`writer`]). It knows no backend; the aggregator hands it lock events and lock states, and
//! reaches back only through [`LiveLocks`], which the aggregator's handle implements.
//!
//! * **Audit records** are written by the replica that runs the force release, straight into
//!   the store through its pool (a record is written `pending` before anything changes and
//!   finished once with its outcome; nothing else ever deletes or changes one). A write runs
//!   in a task of its own, so a caller that goes away (an HTTP client that hung up) does not
//!   cancel it. Without a reachable store the write fails and the release is refused.
//! * **Lock events** ([`Store::record`]) never wait: they go into a buffer of at most
//!   `[store] buffer_events`; past it the oldest are dropped and counted
//!   (`lockscope_store_events_dropped_total`, a warning at most every [`WARN_EVERY`]).
//! * **Exactly one replica writes the history** at a time: the one holding the writer's lease
//!   in the store (`[store] lease`, judged by the store's clock), and every history write
//!   proves in its own transaction that the lease's fencing token is still its own, so a
//!   writer that was paused and lost the role cannot write another row ([`writer`]). (With
//!   SQLite the one process writes.) Replicas that do not write keep what they observe for a
//!   while, so the one that takes over fills the gap its predecessor left ([`matching`]).
//! * **Times compared across replicas are the store's**: each replica measures its offset to
//!   the store's clock on every beat ([`clock`]); lock events are stored in the store's time.
//! * **Reads** (a lock's events, its last state, the audit log) go through a small pool from
//!   the asking task; they answer "store unavailable" at once while the store is down, and
//!   within [`STATEMENT_WAIT`] while it is silent (callers that must answer sooner bound them
//!   further).
//! * **No audit record is left `pending`**: a completion the store did not take is kept and
//!   retried until it does; records a replica left `pending` and will not finish (it stopped
//!   beating, or restarted) are closed as `unknown` by the writer.

mod clock;
mod db;
pub mod matching;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use lockscope_model::wire::{
    AuditRecord, EventPage, LockEvent, LockView, StoreStatus, StoredEvent, WriterView,
};
use tokio::sync::{watch, Notify};

use lockscope_base::tls_files::TlsMode;

pub use db::Location;
pub use writer::{REPLICA_DEAD_MS, STATEMENT_WAIT};

/// `[store]`: where the audit log and the lock history are kept, and for how long.
#[derive(Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://PATH` or `postgres://user@host:port/db`.
    #[serde(default)]
    pub url: Option<String>,
    /// The SQLite file (the key before `url`; `url = "sqlite://PATH"` says the same).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The PostgreSQL password from this environment variable (never in the URL or a log).
    #[serde(default)]
    pub password_env: Option<String>,
    /// TLS to a PostgreSQL store, as for a `[[postgres]]` source.
    #[serde(default)]
    pub tls_mode: Option<TlsMode>,
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// This replica's name in the store (the history writer, audit records); default: the
    /// host name.
    #[serde(default)]
    pub replica: Option<String>,
    /// Lock events (and gone locks' last states) older than this are pruned.
    #[serde(
        default = "default_keep",
        with = "humantime_serde",
        alias = "history_max_age"
    )]
    pub keep: Duration,
    /// At most this many lock events are kept (the oldest go first).
    #[serde(default = "default_max_events", alias = "history_max_events")]
    pub max_events: u64,
    /// Lock events kept in memory at most while they wait to be written (or, on a replica
    /// that does not write, to fill a failover's gap); past it the oldest are dropped.
    #[serde(default = "default_buffer_events")]
    pub buffer_events: usize,
    /// How long the history writer's role lasts without a renewal (by the store's clock): a
    /// writer that stops renewing (paused, cut off) is replaced about this long after.
    #[serde(default = "default_lease", with = "humantime_serde")]
    pub lease: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: None,
            path: None,
            password_env: None,
            tls_mode: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            replica: None,
            keep: default_keep(),
            max_events: default_max_events(),
            buffer_events: default_buffer_events(),
            lease: default_lease(),
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field(
                "url",
                &self.url.as_deref().map(lockscope_base::redact::redact_url),
            )
            .field("path", &self.path)
            .field("password_env", &self.password_env)
            .field("tls_mode", &self.tls_mode)
            .field("replica", &self.replica)
            .field("keep", &self.keep)
            .field("max_events", &self.max_events)
            .field("buffer_events", &self.buffer_events)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

fn default_keep() -> Duration {
    Duration::from_secs(30 * 24 * 3600)
}

fn default_max_events() -> u64 {
    10_000_000
}

fn default_buffer_events() -> usize {
    PENDING_EVENTS
}

fn default_lease() -> Duration {
    DEFAULT_LEASE
}

/// The writer's lease by default: renewed every 500 ms, so a writer must miss six renewals in
/// a row to lose it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3);

impl StoreConfig {
    pub const KEYS: &'static [&'static str] = &[
        "url",
        "path",
        "password_env",
        "tls_mode",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "replica",
        "keep",
        "history_max_age",
        "max_events",
        "history_max_events",
        "buffer_events",
        "lease",
    ];

    /// Whether a store is configured.
    pub fn configured(&self) -> bool {
        self.url.is_some() || self.path.is_some()
    }

    /// Where the store is (`None`: none configured, or the URL is not one; see
    /// [`StoreConfig::validate`]).
    pub fn location(&self) -> Option<Location> {
        match (&self.url, &self.path) {
            (Some(url), _) => Location::parse(url).ok(),
            (None, Some(path)) => Some(Location::Sqlite(path.clone())),
            (None, None) => None,
        }
    }

    /// This replica's name: `replica`, else the host name.
    pub fn replica_name(&self) -> String {
        self.replica.clone().unwrap_or_else(host_name)
    }

    /// Every problem with `[store]`.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.url.is_some() && self.path.is_some() {
            problems.push("store: both url and path are set; keep url".into());
        }
        let location = match &self.url {
            Some(url) => match Location::parse(url) {
                Ok(location) => Some(location),
                Err(e) => {
                    problems.push(format!("store.url: {e}"));
                    None
                }
            },
            None => self.path.clone().map(Location::Sqlite),
        };
        let postgres = matches!(location, Some(Location::Postgres(_)));
        if !postgres {
            for (key, set) in [
                ("password_env", self.password_env.is_some()),
                ("tls_mode", self.tls_mode.is_some()),
                ("tls_ca_file", self.tls_ca_file.is_some()),
                ("tls_cert_file", self.tls_cert_file.is_some()),
                ("tls_key_file", self.tls_key_file.is_some()),
            ] {
                if set {
                    problems.push(format!(
                        "store.{key} is for a PostgreSQL store (url = \"postgres://…\")"
                    ));
                }
            }
        }
        if let Some(Location::Postgres(url)) = &location {
            problems.extend(lockscope_base::redact::password_problems(
                "store",
                url,
                self.password_env.as_deref(),
            ));
        }
        problems.extend(lockscope_base::tls_files::check(
            "store",
            self.tls_ca_file.as_deref(),
            self.tls_cert_file.as_deref(),
            self.tls_key_file.as_deref(),
        ));
        if let Some(replica) = &self.replica {
            if replica.trim().is_empty() || replica.len() > 128 {
                problems.push("store.replica must be 1 to 128 characters".into());
            }
        }
        if self.keep < Duration::from_secs(60) {
            problems.push("store.keep must be at least 1m".into());
        }
        if self.max_events == 0 {
            problems.push("store.max_events must be at least 1".into());
        }
        if !(1_000..=10_000_000).contains(&self.buffer_events) {
            problems.push("store.buffer_events must be between 1000 and 10000000".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.lease) {
            problems.push("store.lease must be between 1s and 60s".into());
        }
        problems
    }
}

/// The host's name (Linux), for a replica that names none.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "lockscope".into())
}

/// Lock events kept waiting at most by default.
pub const PENDING_EVENTS: usize = 100_000;
/// A read or an audit write waits this long for the store to be connected (at start, before
/// any failure is known) before it answers "unavailable".
pub const CONNECT_WAIT: Duration = Duration::from_secs(3);
/// Lock events written per transaction at most.
pub const WRITE_CHUNK: usize = 1000;
/// The warning about dropped lock events is logged at most this often.
pub const WARN_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    #[error("store query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("{0}")]
    Schema(String),
    #[error("the store is closed")]
    Closed,
    /// The writer's lease is no longer this replica's (its token is not current, or it ran
    /// out): nothing was written.
    #[error("the history writer's lease is held by another replica now")]
    Fenced,
}

/// A lock's record as the aggregator keeps it, rendered into a view only when the store
/// writes it.
pub trait LockRecord: Send + Sync {
    fn view(&self, id: &str) -> LockView;
}

/// What happened to a lock's state.
#[derive(Clone)]
pub enum StateChange {
    /// The lock is there, as `record` says.
    Live(Arc<dyn LockRecord>),
    /// The lock went at `at_ms`; `last` is how it was just before.
    Gone {
        last: Arc<dyn LockRecord>,
        at_ms: i64,
    },
}

/// The live lock table, as the store reads it when it starts writing (to bring every lock's
/// last state up to date and find the locks that went while nobody watched).
pub trait LiveLocks: Send + Sync {
    /// At most `n` locks whose ids start with `prefix`, after `after`, in id order.
    fn page(
        &self,
        prefix: &str,
        after: Option<&str>,
        n: usize,
    ) -> Vec<(Arc<str>, Arc<dyn LockRecord>)>;
    /// Every source's name and whether its first full read is done.
    fn sources(&self) -> Vec<(String, bool)>;
}

/// A lock's last state as stored.
#[derive(Debug, Clone)]
pub struct StoredState {
    pub view: LockView,
    pub seen_ms: i64,
    pub gone_ms: Option<i64>,
    pub gone_unseen: bool,
}

/// What the handles and the task share.
struct Shared {
    pending: Mutex<Pending>,
    /// Lock states changed since the writer last wrote them (only while this replica writes).
    states: Mutex<HashMap<Arc<str>, StateChange>>,
    dropped: AtomicU64,
    written: AtomicU64,
    writing: AtomicBool,
    cap: usize,
    wake: Notify,
    /// Store time − this replica's time, ms (0 until measured, and with SQLite).
    offset_ms: AtomicI64,
    offset_known: AtomicBool,
    /// Audit completions the store did not take yet, retried until it does.
    completions: Mutex<Vec<Completion>>,
    completions_wake: Notify,
    /// `pending` audit records this process wrote and will complete (or keeps the completion
    /// of): any other `pending` record of this replica written since it started is one whose
    /// write it gave up waiting for.
    open_audits: Mutex<std::collections::HashSet<i64>>,
    /// When this process started, in the store's time (0 until the first beat).
    started_store_ms: AtomicI64,
}

/// An audit record's completion waiting for the store.
#[derive(Debug, Clone)]
struct Completion {
    id: i64,
    outcome: String,
    detail: String,
    finished_ms: i64,
}

#[derive(Default)]
struct Pending {
    events: VecDeque<(String, LockEvent)>,
    last_warning: Option<Instant>,
    dropped_since_warning: u64,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        // Held only for pushes and pops, which leave the buffer whole even if a holder panicked.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn states(&self) -> MutexGuard<'_, HashMap<Arc<str>, StateChange>> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn completions(&self) -> MutexGuard<'_, Vec<Completion>> {
        self.completions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn open_audits(&self) -> MutexGuard<'_, std::collections::HashSet<i64>> {
        self.open_audits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the oldest pending events, at most `n`.
    fn take(&self, n: usize) -> Vec<(String, LockEvent)> {
        let mut pending = self.pending();
        let n = pending.events.len().min(n);
        pending.events.drain(..n).collect()
    }

    /// Puts events back in front (a write that failed), keeping the cap.
    fn put_back(&self, events: Vec<(String, LockEvent)>) {
        let mut pending = self.pending();
        for event in events.into_iter().rev() {
            pending.events.push_front(event);
        }
        let over = pending.events.len().saturating_sub(self.cap);
        if over > 0 {
            pending.events.drain(..over);
            self.dropped.fetch_add(over as u64, Ordering::Relaxed);
        }
    }
}

/// The store's state as the task last saw it.
#[derive(Default)]
struct Status {
    connected: bool,
    error: Option<String>,
    writer: Option<WriterView>,
    schema_version: Option<i64>,
}

struct Inner {
    config: StoreConfig,
    location: Location,
    replica: String,
    shared: Shared,
    status: Mutex<Status>,
    /// The pool reads and audit writes use; `None` while the store is unreachable.
    db: watch::Sender<Option<db::Db>>,
    closing: watch::Sender<bool>,
    live: OnceLock<Arc<dyn LiveLocks>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    completer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Inner {
    fn status(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle on the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("replica", &self.inner.replica)
            .field("queue_depth", &self.queue_depth())
            .field("events_dropped", &self.events_dropped())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Starts the store's task, which connects (retrying while the store is down), applies
    /// the migrations and writes. Needs a tokio runtime; fails only when `[store]` names no
    /// store or a bad one (see [`StoreConfig::validate`]).
    pub fn open(config: &StoreConfig) -> Result<Store, StoreError> {
        let location = match (&config.url, &config.path) {
            (Some(url), _) => Location::parse(url).map_err(StoreError::Unavailable)?,
            (None, Some(path)) => Location::Sqlite(path.clone()),
            (None, None) => return Err(StoreError::Unavailable("no store configured".into())),
        };
        let inner = Arc::new(Inner {
            replica: config.replica_name(),
            config: config.clone(),
            location,
            shared: Shared {
                pending: Mutex::default(),
                states: Mutex::default(),
                dropped: AtomicU64::new(0),
                written: AtomicU64::new(0),
                writing: AtomicBool::new(false),
                cap: config.buffer_events.max(1),
                wake: Notify::new(),
                offset_ms: AtomicI64::new(0),
                offset_known: AtomicBool::new(false),
                completions: Mutex::default(),
                completions_wake: Notify::new(),
                open_audits: Mutex::default(),
                started_store_ms: AtomicI64::new(0),
            },
            status: Mutex::default(),
            db: watch::channel(None).0,
            closing: watch::channel(false).0,
            live: OnceLock::new(),
            task: Mutex::new(None),
            completer: Mutex::new(None),
        });
        let task = tokio::spawn(writer::run(Arc::clone(&inner)));
        *inner.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        let completer = tokio::spawn(complete_audits(Arc::clone(&inner)));
        *inner
            .completer
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(completer);
        Ok(Store { inner })
    }

    /// Connects once (bounded by `limit`) and checks the schema: a store whose schema is newer
    /// than this lockscope is an error (lockscope refuses to start); a store that cannot be
    /// reached is not (lockscope starts and keeps trying).
    pub async fn preflight(config: &StoreConfig, limit: Duration) -> Result<(), StoreError> {
        let Some(location) = config.location() else {
            return Ok(());
        };
        match tokio::time::timeout(limit, db::Db::connect(&location, config)).await {
            Ok(Ok(db)) => {
                // Instants this replica books are the shared store's time from the start
                // (the store's task refines the offset on every beat).
                if matches!(location, Location::Postgres(_)) {
                    let sent = lockscope_base::clock::host_now_ms();
                    if let Ok(Ok(store_now)) = tokio::time::timeout(limit, db.store_now()).await {
                        let received = lockscope_base::clock::host_now_ms();
                        let offset = clock::Clock::default().sample(sent, store_now, received);
                        lockscope_base::clock::set_clock_offset_ms(offset);
                        tracing::info!(
                            offset_ms = offset,
                            "this replica's clock against the store's"
                        );
                    }
                }
                let checked = db.check_schema().await;
                db.close().await;
                match checked {
                    Err(e @ StoreError::Schema(_)) => Err(e),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Lets the store read the live lock table (see [`LiveLocks`]); once.
    pub fn attach(&self, live: Arc<dyn LiveLocks>) {
        let _ = self.inner.live.set(live);
    }

    /// Writes what is pending (when this replica writes the history) and stops, waiting up to
    /// `limit`. Answers whether it ended in time.
    pub async fn close(self, limit: Duration) -> bool {
        let _ = self.inner.closing.send(true);
        self.inner.shared.wake.notify_one();
        if let Some(completer) = self
            .inner
            .completer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            completer.abort();
        }
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut task) = task else {
            return true;
        };
        match tokio::time::timeout(limit, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                task.abort();
                false
            }
        }
    }

    /// Stops at once: nothing pending is written (a crash, as far as the store can tell).
    pub fn abort(&self) {
        if let Some(completer) = self
            .inner
            .completer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            completer.abort();
        }
        if let Some(task) = self
            .inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }

    /// The pool, or why there is none: waits up to [`CONNECT_WAIT`] for one while the store
    /// is being connected (at start, or reconnected after a failure).
    async fn db(&self) -> Result<db::Db, StoreError> {
        let mut connected = self.inner.db.subscribe();
        // Known to be down: at once (a lock's page must not wait on every open).
        let wait = if self.inner.status().error.is_some() {
            Duration::ZERO
        } else {
            CONNECT_WAIT
        };
        let waited = tokio::time::timeout(wait, connected.wait_for(Option::is_some)).await;
        if let Ok(Ok(db)) = waited {
            if let Some(db) = db.clone() {
                return Ok(db);
            }
        }
        let why = self
            .inner
            .status()
            .error
            .clone()
            .unwrap_or_else(|| "not connected yet".into());
        Err(StoreError::Unavailable(why))
    }

    /// Appends an audit record (complete, or `pending` to be finished by
    /// [`Store::audit_finish`]); returns its id. The write runs to its end even if the caller
    /// goes away.
    ///
    /// A write the store does not confirm within [`STATEMENT_WAIT`] is an error (the caller
    /// changes nothing); if it lands later all the same, this replica closes that `pending`
    /// record as `store_unavailable` ([`UNCONFIRMED_AFTER`]).
    pub async fn audit(&self, record: AuditRecord) -> Result<i64, StoreError> {
        let db = self.db().await?;
        let replica = self.inner.replica.clone();
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            let pending = record.outcome == "pending";
            let id = writer::bounded(STATEMENT_WAIT, db.insert_audit(&record, &replica)).await?;
            if pending {
                inner.shared.open_audits().insert(id);
            }
            Ok(id)
        })
        .await
        .map_err(|_| StoreError::Closed)?
    }

    /// Completes the `pending` audit record `id` with the attempt's outcome. When the store
    /// does not take it (down, silent), the completion is kept and retried until it does (an
    /// error still says it is not stored yet).
    pub async fn audit_finish(
        &self,
        id: i64,
        outcome: &str,
        detail: String,
        finished_ms: i64,
    ) -> Result<(), StoreError> {
        let completion = Completion {
            id,
            outcome: outcome.to_string(),
            detail,
            finished_ms,
        };
        let attempt = {
            let (store, completion) = (self.clone(), completion.clone());
            tokio::spawn(async move {
                let db = store.db().await?;
                writer::bounded(
                    STATEMENT_WAIT,
                    db.finish_audit(
                        completion.id,
                        &completion.outcome,
                        &completion.detail,
                        completion.finished_ms,
                    ),
                )
                .await
            })
        };
        let result = attempt.await.map_err(|_| StoreError::Closed).flatten();
        // The store answered that no pending record has this id: nothing to keep.
        if let Ok(false) = result {
            self.inner.shared.open_audits().remove(&id);
            return Err(StoreError::Query(sqlx::Error::RowNotFound));
        }
        if result.is_ok() {
            self.inner.shared.open_audits().remove(&id);
        }
        if let Err(e) = &result {
            tracing::warn!(audit_id = id, error = %e,
                "the audit record's outcome is kept and written when the store answers again");
            let shared = &self.inner.shared;
            shared.completions().push(completion);
            shared.completions_wake.notify_one();
        }
        result.map(drop)
    }

    /// Audit completions waiting for the store.
    pub fn audits_waiting(&self) -> usize {
        self.inner.shared.completions().len()
    }

    /// The newest `limit` audit records older than id `before` (all, without it), newest first.
    pub async fn audits(
        &self,
        limit: u32,
        before: Option<i64>,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let db = self.db().await?;
        writer::bounded(STATEMENT_WAIT, db.read_audits(limit, before)).await
    }

    /// Records lock events. Never waits: when the buffer is full the oldest are dropped (and
    /// counted) instead.
    pub fn record(&self, events: Vec<(String, LockEvent)>) {
        if events.is_empty() {
            return;
        }
        let shared = &self.inner.shared;
        let warning = {
            let mut pending = shared.pending();
            pending.events.extend(events);
            let over = pending.events.len().saturating_sub(shared.cap);
            let mut warning = None;
            if over > 0 {
                pending.events.drain(..over);
                shared.dropped.fetch_add(over as u64, Ordering::Relaxed);
                pending.dropped_since_warning += over as u64;
                if pending
                    .last_warning
                    .is_none_or(|at| at.elapsed() >= WARN_EVERY)
                {
                    pending.last_warning = Some(Instant::now());
                    warning = Some(std::mem::take(&mut pending.dropped_since_warning));
                }
            }
            warning
        };
        if let Some(dropped) = warning {
            tracing::warn!(
                dropped,
                total = self.events_dropped(),
                cap = shared.cap,
                "lock events come faster than the store takes them; the oldest waiting ones were dropped from the history"
            );
        }
        if shared.writing.load(Ordering::Relaxed) {
            shared.wake.notify_one();
        }
    }

    /// Books changed lock states (kept only while this replica writes the history: the one
    /// that starts writing reads every live lock first).
    pub fn lock_states(&self, changes: impl IntoIterator<Item = (Arc<str>, StateChange)>) {
        let shared = &self.inner.shared;
        if !shared.writing.load(Ordering::Relaxed) {
            return;
        }
        shared.states().extend(changes);
    }

    /// One page of a lock's stored events, newest first: at most `limit` with ids below
    /// `before`.
    pub async fn lock_events(
        &self,
        lock: &str,
        limit: u32,
        before: Option<i64>,
    ) -> Result<EventPage, StoreError> {
        let db = self.db().await?;
        let mut events: Vec<StoredEvent> =
            writer::bounded(STATEMENT_WAIT, db.read_lock_events(lock, limit + 1, before)).await?;
        let more = events.len() > limit as usize;
        events.truncate(limit as usize);
        let next_before = more.then(|| events.last().map(|e| e.id)).flatten();
        Ok(EventPage {
            events,
            next_before,
        })
    }

    /// A lock's last state as stored.
    pub async fn lock_state(&self, lock: &str) -> Result<Option<StoredState>, StoreError> {
        let db = self.db().await?;
        writer::bounded(STATEMENT_WAIT, db.read_lock_state(lock)).await
    }

    /// Lock events dropped because the buffer was full.
    pub fn events_dropped(&self) -> u64 {
        self.inner.shared.dropped.load(Ordering::Relaxed)
    }

    /// Lock events written by this replica.
    pub fn events_written(&self) -> u64 {
        self.inner.shared.written.load(Ordering::Relaxed)
    }

    /// Lock events buffered now.
    pub fn queue_depth(&self) -> usize {
        self.inner.shared.pending().events.len()
    }

    /// This replica writes the history now.
    pub fn writing(&self) -> bool {
        self.inner.shared.writing.load(Ordering::Relaxed)
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// The store as this replica sees it.
    pub fn status(&self) -> StoreStatus {
        let status = self.inner.status();
        StoreStatus {
            backend: self.inner.location.backend().into(),
            replica: self.inner.replica.clone(),
            connected: status.connected,
            error: status.error.clone(),
            writing: self.writing(),
            writer: status.writer.clone(),
            schema_version: status.schema_version,
            queue_depth: self.queue_depth() as u64,
            events_written: self.events_written(),
            events_dropped: self.events_dropped(),
        }
    }
}

/// Writes the audit completions the store did not take, once it answers again (a task of its
/// own: a release's outcome waits neither for the writer's election nor for a reader).
/// Also closes this replica's `pending` records whose write it gave up waiting for (they
/// landed later), once they are [`UNCONFIRMED_AFTER`] old.
async fn complete_audits(inner: Arc<Inner>) {
    let shared = &inner.shared;
    let mut connected = inner.db.subscribe();
    let mut last_sweep = Instant::now();
    loop {
        tokio::select! {
            _ = shared.completions_wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let since = shared.started_store_ms.load(Ordering::Relaxed);
        if last_sweep.elapsed() >= UNCONFIRMED_AFTER / 2 && since > 0 {
            last_sweep = Instant::now();
            let db = connected.borrow_and_update().clone();
            if let Some(db) = db {
                close_unconfirmed(&inner, &db, since).await;
            }
        }
        loop {
            let Some(next) = shared.completions().first().cloned() else {
                break;
            };
            let Some(db) = connected.borrow_and_update().clone() else {
                break;
            };
            let done = writer::bounded(
                STATEMENT_WAIT,
                db.finish_audit(next.id, &next.outcome, &next.detail, next.finished_ms),
            )
            .await;
            match done {
                Ok(changed) => {
                    tracing::info!(audit_id = next.id, outcome = %next.outcome, changed,
                        "the audit record's outcome is written now that the store answers");
                    shared.completions().retain(|c| c.id != next.id);
                }
                Err(e) => {
                    tracing::debug!(audit_id = next.id, error = %e, "the store does not take the audit record's outcome yet");
                    break;
                }
            }
        }
    }
}

/// A `pending` audit record of this replica that it did not confirm (its write timed out, and
/// landed later) is closed once it is this old (store time).
pub const UNCONFIRMED_AFTER: Duration = Duration::from_secs(10);

async fn close_unconfirmed(inner: &Inner, db: &db::Db, since: i64) {
    let older = UNCONFIRMED_AFTER.as_millis() as i64;
    let Ok(ids) = writer::bounded(
        STATEMENT_WAIT,
        db.own_pending_audits(&inner.replica, since, older),
    )
    .await
    else {
        return;
    };
    for id in ids {
        if inner.shared.open_audits().contains(&id) {
            continue;
        }
        if let Ok(true) = writer::bounded(STATEMENT_WAIT, db.close_unconfirmed_audit(id)).await {
            tracing::warn!(audit_id = id, replica = %inner.replica,
                "closed an audit record whose write was not confirmed in time (the release was refused) as store_unavailable");
        }
    }
}

#[cfg(test)]
mod tests;
