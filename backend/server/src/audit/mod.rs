//! The embedded store (SQLite): the audit log of force releases and the history of lock events.
//!
//! One thread owns the database connection; nothing else in lockscope touches the file. The audit
//! table is never pruned by lockscope and its rows are never deleted: a force release is written
//! as `pending` before anything is changed and completed once with its outcome
//! ([`Store::audit_finish`]), every other attempt is written whole. Lock history is pruned by age
//! and count (`[store]`). Every queue into the thread is bounded:
//!
//! * **Requests with a reply** (an audit write, audit reads, a lock's events) go over a bounded
//!   tokio channel ([`JOB_QUEUE`]) that the thread reads with `blocking_recv`. A caller waits for
//!   room by awaiting, which parks its task, not a tokio worker, and costs no blocking-pool thread
//!   (as a `sync_channel` sent from `spawn_blocking` would). Nothing with a reply is ever dropped.
//!   An audit record is first offered without waiting; only when the queue is full does a task of
//!   its own wait for room, so the record is queued even if its caller (an HTTP request whose
//!   client went away) is dropped meanwhile: a force release is never left unaudited because the
//!   store was busy.
//! * **Lock events** ([`Store::record`]) must never slow the aggregator, so they do not wait for
//!   anything: they go into a pending buffer the store owns, at most [`PENDING_EVENTS`] events.
//!   When it is full the oldest events are dropped, counted ([`Store::events_dropped`],
//!   `lockscope_store_events_dropped_total`) and reported by a warning at most every
//!   [`WARN_EVERY`]. The thread is woken by one `Flush` job at a time, however many events
//!   arrive before it looks; it writes the buffer a chunk ([`WRITE_CHUNK`]) per transaction, so a
//!   burst of `record` calls costs a few transactions, and answers requests between chunks.
//!
//! A read of a lock's events first writes the events pending when it was asked, so it sees what
//! was recorded before it. When the last [`Store`] handle drops, the thread writes what is
//! pending and ends.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lockscope_model::wire::{AuditRecord, EventKind, LockEvent, ReleaseCause};
use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::{mpsc, oneshot};

/// The embedded store (SQLite): the audit log and lock history.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The database file; without one, history stays in memory and the admin API cannot run.
    #[serde(default)]
    pub path: Option<std::path::PathBuf>,
    /// Lock events older than this are deleted.
    #[serde(default = "default_history_max_age", with = "humantime_serde")]
    pub history_max_age: std::time::Duration,
    /// At most this many lock events are kept (the oldest go first).
    #[serde(default = "default_history_max_events")]
    pub history_max_events: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            path: None,
            history_max_age: default_history_max_age(),
            history_max_events: default_history_max_events(),
        }
    }
}

fn default_history_max_age() -> std::time::Duration {
    std::time::Duration::from_secs(7 * 24 * 3600)
}

fn default_history_max_events() -> u64 {
    1_000_000
}

/// Requests (and `Flush` wake-ups) queued for the store thread at most.
pub const JOB_QUEUE: usize = 256;
/// Lock events waiting to be written at most; past it the oldest are dropped.
pub const PENDING_EVENTS: usize = 100_000;
/// Lock events written per transaction at most; requests are answered between chunks.
pub const WRITE_CHUNK: usize = 4096;
/// The warning about dropped lock events is logged at most this often.
pub const WARN_EVERY: Duration = Duration::from_secs(30);
/// Lock history is pruned at most this often.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("cannot start the store thread: {0}")]
    Thread(std::io::Error),
    #[error("store query failed: {0}")]
    Query(#[from] rusqlite::Error),
    #[error("the store is closed")]
    Closed,
}

enum Job {
    Audit(AuditRecord, oneshot::Sender<Result<i64, StoreError>>),
    /// Completes a `pending` record with its outcome.
    AuditFinish {
        id: i64,
        outcome: String,
        detail: String,
        finished_ms: i64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    Audits {
        limit: u32,
        before: Option<i64>,
        reply: oneshot::Sender<Result<Vec<AuditRecord>, StoreError>>,
    },
    /// Lock events are pending; at most one of these is queued at a time.
    Flush,
    LockEvents {
        lock: String,
        limit: u32,
        reply: oneshot::Sender<Result<Vec<LockEvent>, StoreError>>,
    },
    /// Tests: the thread waits until the sender is dropped, so they can fill the queues at will.
    #[cfg(test)]
    Hold(std::sync::mpsc::Receiver<()>),
}

/// What the handles and the thread share: the pending lock events and what was dropped.
struct Shared {
    pending: Mutex<Pending>,
    /// Lock events dropped because the pending buffer was full, since the store opened.
    dropped: AtomicU64,
    /// Lock events pending at most ([`PENDING_EVENTS`] but in tests).
    cap: usize,
}

#[derive(Default)]
struct Pending {
    events: VecDeque<(String, LockEvent)>,
    /// A `Flush` job is queued or the thread has not yet found the buffer empty: `record` need
    /// not wake it.
    wake_queued: bool,
    last_warning: Option<Instant>,
    dropped_since_warning: u64,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        // The lock is held only for plain pushes and pops, which leave the buffer whole even if
        // a holder panicked.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the oldest pending events, at most [`WRITE_CHUNK`]; empty when none are pending,
    /// and then the next `record` wakes the thread again.
    fn take_chunk(&self) -> Vec<(String, LockEvent)> {
        let mut pending = self.pending();
        let n = pending.events.len().min(WRITE_CHUNK);
        if n == 0 {
            pending.wake_queued = false;
        }
        pending.events.drain(..n).collect()
    }
}

/// A handle on the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
    shared: Arc<Shared>,
    /// The store thread, taken by [`Store::close`].
    thread: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("queue_depth", &self.queue_depth())
            .field("events_dropped", &self.events_dropped())
            .finish_non_exhaustive()
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    token_name TEXT NOT NULL,
    source TEXT NOT NULL,
    lock_id TEXT NOT NULL,
    observed_holder TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    client TEXT NOT NULL DEFAULT '',
    finished_ms INTEGER
);
CREATE TABLE IF NOT EXISTS lock_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    lock_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    node TEXT NOT NULL,
    session TEXT NOT NULL,
    cause TEXT,
    duration_ms INTEGER
);
CREATE INDEX IF NOT EXISTS lock_events_by_lock ON lock_events (lock_id, at_ms);
CREATE INDEX IF NOT EXISTS lock_events_by_time ON lock_events (at_ms);
";

impl Store {
    /// Opens (creating if needed) the database at `config.path` and starts its thread.
    pub fn open(path: &Path, config: &StoreConfig) -> Result<Store, StoreError> {
        Store::open_with_cap(path, config, PENDING_EVENTS)
    }

    fn open_with_cap(path: &Path, config: &StoreConfig, cap: usize) -> Result<Store, StoreError> {
        let open_error = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(path).map_err(open_error)?;
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .map_err(open_error)?;
        conn.execute_batch(SCHEMA).map_err(open_error)?;
        migrate(&conn).map_err(open_error)?;
        let (jobs, rx) = mpsc::channel(JOB_QUEUE);
        let shared = Arc::new(Shared {
            pending: Mutex::default(),
            dropped: AtomicU64::new(0),
            cap,
        });
        let thread_shared = Arc::clone(&shared);
        let max_age = config.history_max_age;
        let max_events = config.history_max_events;
        let thread = std::thread::Builder::new()
            .name("lockscope-store".into())
            .spawn(move || run(conn, rx, &thread_shared, max_age, max_events))
            .map_err(StoreError::Thread)?;
        Ok(Store {
            jobs,
            shared,
            thread: Arc::new(std::sync::Mutex::new(Some(thread))),
        })
    }

    /// Drops this handle and waits up to `limit` for the store thread to write what is pending
    /// and end, which it does once every other handle is gone too. Answers whether it ended.
    pub async fn close(self, limit: Duration) -> bool {
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        drop(self);
        let Some(thread) = thread else {
            return true;
        };
        matches!(
            tokio::time::timeout(limit, tokio::task::spawn_blocking(move || thread.join())).await,
            Ok(Ok(Ok(())))
        )
    }

    /// Appends an audit record (complete, or `pending` to be finished by
    /// [`Store::audit_finish`]); returns its id.
    pub async fn audit(&self, record: AuditRecord) -> Result<i64, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send_audit(Job::Audit(record, reply))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Completes the `pending` audit record `id` with the attempt's outcome.
    pub async fn audit_finish(
        &self,
        id: i64,
        outcome: &str,
        detail: String,
        finished_ms: i64,
    ) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send_audit(Job::AuditFinish {
            id,
            outcome: outcome.to_string(),
            detail,
            finished_ms,
            reply,
        })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues an audit write: at once when there is room, else from a task of its own, so the
    /// write is queued even if its caller is dropped while it waits.
    fn send_audit(&self, job: Job) -> Result<(), StoreError> {
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(StoreError::Closed),
            Err(mpsc::error::TrySendError::Full(job)) => {
                let jobs = self.jobs.clone();
                tokio::spawn(async move {
                    let _ = jobs.send(job).await;
                });
                Ok(())
            }
        }
    }

    /// The newest `limit` audit records older than id `before` (all, without it), newest first.
    pub async fn audits(
        &self,
        limit: u32,
        before: Option<i64>,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Job::Audits {
            limit,
            before,
            reply,
        })
        .await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Records lock events. Never waits: history must never slow the aggregator, so when the
    /// pending buffer is full the oldest pending events are dropped (and counted) instead.
    pub fn record(&self, events: Vec<(String, LockEvent)>) {
        if events.is_empty() {
            return;
        }
        let (wake, warning) = {
            let mut pending = self.shared.pending();
            pending.events.extend(events);
            let over = pending.events.len().saturating_sub(self.shared.cap);
            let mut warning = None;
            if over > 0 {
                pending.events.drain(..over);
                self.shared
                    .dropped
                    .fetch_add(over as u64, Ordering::Relaxed);
                pending.dropped_since_warning += over as u64;
                if pending
                    .last_warning
                    .is_none_or(|at| at.elapsed() >= WARN_EVERY)
                {
                    pending.last_warning = Some(Instant::now());
                    warning = Some(std::mem::take(&mut pending.dropped_since_warning));
                }
            }
            (!std::mem::replace(&mut pending.wake_queued, true), warning)
        };
        if let Some(dropped) = warning {
            tracing::warn!(
                dropped,
                total = self.events_dropped(),
                cap = self.shared.cap,
                "lock events come faster than the store writes them; the oldest pending ones were dropped from the history"
            );
        }
        if wake {
            // A full queue needs no wake-up: the thread writes pending events after every job.
            let _ = self.jobs.try_send(Job::Flush);
        }
    }

    /// The newest `limit` events of a lock, oldest first.
    pub async fn lock_events(&self, lock: &str, limit: u32) -> Result<Vec<LockEvent>, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Job::LockEvents {
            lock: lock.to_string(),
            limit,
            reply,
        })
        .await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Lock events dropped because they came faster than the store wrote them.
    pub fn events_dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Lock events recorded and not yet taken for writing.
    pub fn queue_depth(&self) -> usize {
        self.shared.pending().events.len()
    }

    /// Queues a request, waiting (without blocking the worker) for room.
    async fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs.send(job).await.map_err(|_| StoreError::Closed)
    }
}

/// The store thread: answers jobs and writes pending lock events until every handle is gone,
/// then writes what is still pending.
fn run(
    mut conn: Connection,
    mut jobs: mpsc::Receiver<Job>,
    shared: &Shared,
    max_age: Duration,
    max_events: u64,
) {
    let mut last_prune = Instant::now();
    while let Some(job) = jobs.blocking_recv() {
        handle(&mut conn, shared, job);
        // Requests already queued are answered between chunks, so an audit record does not
        // wait for a backlog of history to be written.
        loop {
            while let Ok(job) = jobs.try_recv() {
                handle(&mut conn, shared, job);
            }
            let wrote = write_chunk(&mut conn, shared) > 0;
            if last_prune.elapsed() > PRUNE_EVERY {
                last_prune = Instant::now();
                if let Err(e) = prune(&conn, max_age, max_events) {
                    tracing::error!(error = %e, "cannot prune lock history");
                }
            }
            if !wrote {
                break;
            }
        }
    }
    while write_chunk(&mut conn, shared) > 0 {}
}

fn handle(conn: &mut Connection, shared: &Shared, job: Job) {
    match job {
        Job::Audit(record, reply) => {
            let _ = reply.send(insert_audit(conn, &record));
        }
        Job::AuditFinish {
            id,
            outcome,
            detail,
            finished_ms,
            reply,
        } => {
            let _ = reply.send(finish_audit(conn, id, &outcome, &detail, finished_ms));
        }
        Job::Audits {
            limit,
            before,
            reply,
        } => {
            let _ = reply.send(read_audits(conn, limit, before));
        }
        // The caller writes pending events after every job.
        Job::Flush => {}
        Job::LockEvents { lock, limit, reply } => {
            // What was pending when the reader asked is written first, so it sees what was
            // recorded before it asked; events recorded meanwhile need not hold it up.
            let mut due = shared.pending().events.len();
            while due > 0 {
                match write_chunk(conn, shared) {
                    0 => break,
                    n => due = due.saturating_sub(n),
                }
            }
            let _ = reply.send(read_lock_events(conn, &lock, limit));
        }
        #[cfg(test)]
        Job::Hold(until) => {
            let _ = until.recv();
        }
    }
}

/// Writes the oldest pending lock events in one transaction; returns how many it took.
fn write_chunk(conn: &mut Connection, shared: &Shared) -> usize {
    let chunk = shared.take_chunk();
    let n = chunk.len();
    if let Err(e) = insert_events(conn, chunk) {
        tracing::error!(error = %e, events = n, "cannot record lock history");
    }
    n
}

/// Brings a store written by an earlier lockscope up to this one's schema: the audit log
/// gained the client's address and the time its outcome was known (`PRAGMA user_version` 1).
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version < 1 {
        let mut columns = Vec::new();
        {
            let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('audit')")?;
            let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
            for name in names {
                columns.push(name?);
            }
        }
        if !columns.iter().any(|c| c == "client") {
            conn.execute_batch("ALTER TABLE audit ADD COLUMN client TEXT NOT NULL DEFAULT ''")?;
        }
        if !columns.iter().any(|c| c == "finished_ms") {
            conn.execute_batch("ALTER TABLE audit ADD COLUMN finished_ms INTEGER")?;
        }
        conn.execute_batch("PRAGMA user_version = 1")?;
    }
    Ok(())
}

fn insert_audit(conn: &Connection, r: &AuditRecord) -> Result<i64, StoreError> {
    conn.execute(
        "INSERT INTO audit (at_ms, token_name, source, lock_id, observed_holder, outcome, reason, detail, client, finished_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![r.at_ms, r.token_name, r.source, r.lock_id, r.observed_holder, r.outcome, r.reason, r.detail, r.client, r.finished_ms],
    )?;
    Ok(conn.last_insert_rowid())
}

fn finish_audit(
    conn: &Connection,
    id: i64,
    outcome: &str,
    detail: &str,
    finished_ms: i64,
) -> Result<(), StoreError> {
    let changed = conn.execute(
        "UPDATE audit SET outcome = ?2, detail = ?3, finished_ms = ?4 WHERE id = ?1",
        params![id, outcome, detail, finished_ms],
    )?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Query(rusqlite::Error::QueryReturnedNoRows))
    }
}

fn read_audits(
    conn: &Connection,
    limit: u32,
    before: Option<i64>,
) -> Result<Vec<AuditRecord>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, at_ms, token_name, source, lock_id, observed_holder, outcome, reason, detail,
                client, finished_ms
         FROM audit WHERE id < ?2 ORDER BY id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit, before.unwrap_or(i64::MAX)], |row| {
        Ok(AuditRecord {
            id: row.get(0)?,
            at_ms: row.get(1)?,
            token_name: row.get(2)?,
            source: row.get(3)?,
            lock_id: row.get(4)?,
            observed_holder: row.get(5)?,
            outcome: row.get(6)?,
            reason: row.get(7)?,
            detail: row.get(8)?,
            client: row.get(9)?,
            finished_ms: row.get(10)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn insert_events(
    conn: &mut Connection,
    events: Vec<(String, LockEvent)>,
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO lock_events (lock_id, at_ms, kind, node, session, cause, duration_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        for (lock, e) in &events {
            stmt.execute(params![
                lock,
                e.at_ms,
                e.kind.as_str(),
                e.node,
                e.session,
                e.cause.map(ReleaseCause::as_str),
                e.duration_ms
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn read_lock_events(
    conn: &Connection,
    lock: &str,
    limit: u32,
) -> Result<Vec<LockEvent>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT at_ms, kind, node, session, cause, duration_ms FROM lock_events
         WHERE lock_id = ?1 ORDER BY at_ms DESC, id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![lock, limit], |row| {
        let cause: Option<String> = row.get(4)?;
        let kind: String = row.get(1)?;
        let event = LockEvent {
            at_ms: row.get(0)?,
            kind: EventKind::Released,
            node: row.get(2)?,
            session: row.get(3)?,
            cause: cause.and_then(|c| ReleaseCause::ALL.into_iter().find(|k| k.as_str() == c)),
            duration_ms: row.get(5)?,
        };
        // A kind this version does not know (written by a newer one) is skipped.
        Ok(EventKind::parse(&kind).map(|kind| LockEvent { kind, ..event }))
    })?;
    let mut events: Vec<LockEvent> = rows
        .collect::<Result<Vec<Option<LockEvent>>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    events.reverse();
    Ok(events)
}

fn prune(conn: &Connection, max_age: Duration, max_events: u64) -> Result<(), StoreError> {
    let cutoff = crate::now_ms() - max_age.as_millis() as i64;
    conn.execute("DELETE FROM lock_events WHERE at_ms < ?1", [cutoff])?;
    let newest: Option<i64> = conn
        .query_row("SELECT MAX(id) FROM lock_events", [], |r| r.get(0))
        .optional()?
        .flatten();
    if let Some(newest) = newest {
        conn.execute(
            "DELETE FROM lock_events WHERE id <= ?1",
            [newest - max_events as i64],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long a test waits for a fact before it fails.
    const PATIENCE: Duration = Duration::from_secs(120);

    fn audit_record(name: &str) -> AuditRecord {
        AuditRecord {
            id: 0,
            at_ms: 1,
            token_name: name.into(),
            source: "zk".into(),
            lock_id: "zk~l".into(),
            observed_holder: "/l/n".into(),
            outcome: "released".into(),
            reason: "stuck".into(),
            detail: "{}".into(),
            client: "127.0.0.1".into(),
            finished_ms: Some(2),
        }
    }

    /// Keeps the store thread from doing anything until the returned sender is dropped. It is
    /// the first job queued, so nothing recorded after it is written before that.
    async fn hold(store: &Store) -> std::sync::mpsc::Sender<()> {
        let (release, until) = std::sync::mpsc::channel();
        store.send(Job::Hold(until)).await.expect("store open");
        release
    }

    /// Polls `fact` until it holds; fails after [`PATIENCE`].
    async fn wait_until<F: std::future::Future<Output = bool>>(
        what: &str,
        mut fact: impl FnMut() -> F,
    ) {
        let deadline = Instant::now() + PATIENCE;
        while !fact().await {
            assert!(Instant::now() < deadline, "still not so: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A lock's events as stored (at most a million).
    async fn stored(store: &Store, lock: &str) -> Vec<LockEvent> {
        store.lock_events(lock, 1_000_000).await.expect("events")
    }

    fn event(at: i64, kind: &str) -> LockEvent {
        LockEvent {
            at_ms: at,
            kind: EventKind::parse(kind).expect("a kind"),
            node: "/l/n".into(),
            session: "0x1".into(),
            cause: (kind == "released").then_some(ReleaseCause::Forced),
            duration_ms: Some(5),
        }
    }

    #[tokio::test]
    async fn audit_and_history_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.db");
        let config = StoreConfig::default();
        {
            let store = Store::open(&path, &config).expect("open");
            let id = store
                .audit(AuditRecord {
                    id: 0,
                    at_ms: 1,
                    token_name: "alice".into(),
                    source: "zk".into(),
                    lock_id: "zk~l".into(),
                    observed_holder: "/l/n".into(),
                    outcome: "released".into(),
                    reason: "stuck".into(),
                    detail: "{}".into(),
                    client: String::new(),
                    finished_ms: None,
                })
                .await
                .expect("audit");
            assert!(id > 0);
            store.record(vec![
                ("zk~l".into(), event(10, "acquired")),
                ("zk~l".into(), event(20, "released")),
                ("zk~other".into(), event(15, "acquired")),
            ]);
            let events = store.lock_events("zk~l", 10).await.expect("events");
            assert_eq!(events.len(), 2);
            assert_eq!(events[1].cause, Some(ReleaseCause::Forced));
        }
        let store = Store::open(&path, &config).expect("reopen");
        let audits = store.audits(10, None).await.expect("audits");
        assert_eq!(audits.len(), 1);
        assert_eq!(audits[0].token_name, "alice");
        assert_eq!(
            store.lock_events("zk~l", 1).await.expect("events")[0].at_ms,
            20
        );
    }

    #[tokio::test]
    async fn pending_records_are_finished_and_the_log_pages_backwards() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            Store::open(&dir.path().join("store.db"), &StoreConfig::default()).expect("open");
        let mut ids = Vec::new();
        for i in 0..5 {
            let mut record = audit_record(&format!("t{i}"));
            record.outcome = "pending".into();
            record.finished_ms = None;
            ids.push(store.audit(record).await.expect("audit"));
        }
        store
            .audit_finish(ids[2], "released", "{\"ok\":1}".into(), 42)
            .await
            .expect("finish");
        assert!(store
            .audit_finish(9_999, "released", "{}".into(), 1)
            .await
            .is_err());
        let first = store.audits(2, None).await.expect("page 1");
        assert_eq!(
            first.iter().map(|a| a.id).collect::<Vec<_>>(),
            vec![ids[4], ids[3]]
        );
        let second = store.audits(2, Some(ids[3])).await.expect("page 2");
        assert_eq!(
            second.iter().map(|a| a.id).collect::<Vec<_>>(),
            vec![ids[2], ids[1]]
        );
        assert_eq!(
            (second[0].outcome.as_str(), second[0].finished_ms),
            ("released", Some(42))
        );
        assert_eq!(
            (second[1].outcome.as_str(), second[1].finished_ms),
            ("pending", None)
        );
        assert_eq!(store.audits(2, Some(ids[0])).await.expect("end").len(), 0);
    }

    #[tokio::test]
    async fn a_store_written_before_the_client_column_is_migrated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("old.db");
        {
            let conn = Connection::open(&path).expect("open");
            conn.execute_batch(
                "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL,
                 token_name TEXT NOT NULL, source TEXT NOT NULL, lock_id TEXT NOT NULL,
                 observed_holder TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL,
                 detail TEXT NOT NULL);
                 INSERT INTO audit (at_ms, token_name, source, lock_id, observed_holder, outcome,
                 reason, detail) VALUES (1, 'old', 'zk', 'zk~l', '/l/n', 'released', 'r', '{}');",
            )
            .expect("old schema");
        }
        let store = Store::open(&path, &StoreConfig::default()).expect("open old");
        store.audit(audit_record("new")).await.expect("audit");
        let audits = store.audits(10, None).await.expect("audits");
        assert_eq!(audits.len(), 2);
        assert_eq!(
            (audits[1].token_name.as_str(), audits[1].client.as_str()),
            ("old", "")
        );
        assert_eq!(audits[0].client, "127.0.0.1");
        drop(store);
        // Opening again finds the schema current and changes nothing.
        let store = Store::open(&path, &StoreConfig::default()).expect("reopen");
        assert_eq!(store.audits(10, None).await.expect("audits").len(), 2);
    }

    #[tokio::test]
    async fn a_burst_of_events_under_the_cap_all_lands() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            Store::open(&dir.path().join("store.db"), &StoreConfig::default()).expect("open");
        let n = 50_000;
        for i in 0..n {
            store.record(vec![("zk~burst".into(), event(i, "acquired"))]);
        }
        wait_until("every event of the burst is stored", || async {
            stored(&store, "zk~burst").await.len() == n as usize
        })
        .await;
        let events = stored(&store, "zk~burst").await;
        assert_eq!((events[0].at_ms, events[n as usize - 1].at_ms), (0, n - 1));
        assert_eq!((store.events_dropped(), store.queue_depth()), (0, 0));
    }

    #[tokio::test]
    async fn past_the_cap_the_oldest_events_are_dropped_and_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = 1_000;
        let path = dir.path().join("store.db");
        let store = Store::open_with_cap(&path, &StoreConfig::default(), cap).expect("open");
        let release = hold(&store).await;
        let over = 2_500;
        for i in 0..(cap + over) as i64 {
            store.record(vec![("zk~storm".into(), event(i, "acquired"))]);
        }
        assert_eq!(store.events_dropped(), over as u64);
        assert_eq!(store.queue_depth(), cap);
        // However many events came, the thread was woken once (the hold itself may still be
        // queued too).
        assert!(JOB_QUEUE - store.jobs.capacity() <= 2);
        let mut samples = crate::metrics::Samples::default();
        crate::metrics::render_store(store.queue_depth(), store.events_dropped(), &mut samples);
        let text = crate::metrics::exposition(&Default::default(), samples);
        assert!(text.contains("# TYPE lockscope_store_events_dropped counter\n"));
        assert!(text.contains("lockscope_store_events_dropped_total 2500\n"));
        assert!(text.contains("lockscope_store_queue_depth 1000\n"));
        drop(release);
        wait_until("the newest events are stored", || async {
            stored(&store, "zk~storm").await.len() == cap
        })
        .await;
        let events = stored(&store, "zk~storm").await;
        let newest = (cap + over) as i64;
        assert_eq!(
            (events[0].at_ms, events[cap - 1].at_ms),
            (over as i64, newest - 1)
        );
        assert_eq!(
            (store.events_dropped(), store.queue_depth()),
            (over as u64, 0)
        );
    }

    #[tokio::test]
    async fn audit_records_land_while_every_queue_is_full() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.db");
        let store = Store::open_with_cap(&path, &StoreConfig::default(), 100).expect("open");
        let release = hold(&store).await;
        for i in 0..1_000 {
            store.record(vec![("zk~storm".into(), event(i, "acquired"))]);
        }
        assert_eq!(store.events_dropped(), 900);
        // More audit writes than the job queue holds.
        let writers: Vec<_> = (0..JOB_QUEUE + 20)
            .map(|i| {
                tokio::spawn({
                    let store = store.clone();
                    async move { store.audit(audit_record(&format!("writer-{i}"))).await }
                })
            })
            .collect();
        wait_until("the job queue is full", || async {
            store.jobs.capacity() == 0
        })
        .await;
        // One more whose caller gives up while it waits for room.
        let mut abandoned = Box::pin(store.audit(audit_record("abandoned")));
        assert!(futures::poll!(&mut abandoned).is_pending());
        drop(abandoned);
        drop(release);
        for writer in writers {
            assert!(writer.await.expect("writer").expect("audit") > 0);
        }
        wait_until("every audit record is stored", || async {
            store.audits(10_000, None).await.expect("audits").len() == JOB_QUEUE + 21
        })
        .await;
        let audits = store.audits(10_000, None).await.expect("audits");
        assert!(audits.iter().any(|a| a.token_name == "abandoned"));
        assert_eq!(stored(&store, "zk~storm").await.len(), 100);
    }

    #[tokio::test]
    async fn the_last_handle_dropping_writes_what_is_pending() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.db");
        let store = Store::open(&path, &StoreConfig::default()).expect("open");
        let release = hold(&store).await;
        for i in 0..10_000 {
            store.record(vec![("zk~last".into(), event(i, "acquired"))]);
        }
        drop(store);
        drop(release);
        let conn = Connection::open(&path).expect("open");
        wait_until("the pending events are stored", || async {
            let count: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM lock_events WHERE lock_id = 'zk~last'",
                    [],
                    |r| r.get(0),
                )
                .expect("count");
            count == 10_000
        })
        .await;
    }
}
