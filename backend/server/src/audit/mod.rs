//! The embedded store (SQLite): the audit log of force releases and the history of lock events.
//!
//! One thread owns the database connection; callers send it jobs over a channel (writes of lock
//! events are batched into one transaction per burst) and async callers await a reply. The audit
//! table is append-only and never pruned by lockscope; lock history is pruned by age and count
//! (`[store]`). Nothing else in lockscope touches the file.

use std::path::Path;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use lockscope_model::wire::{AuditRecord, EventKind, LockEvent, ReleaseCause};
use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use crate::config::StoreConfig;

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
    Audits {
        limit: u32,
        reply: oneshot::Sender<Result<Vec<AuditRecord>, StoreError>>,
    },
    Events(Vec<(String, LockEvent)>),
    LockEvents {
        lock: String,
        limit: u32,
        reply: oneshot::Sender<Result<Vec<LockEvent>, StoreError>>,
    },
}

/// A handle on the store; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    jobs: std_mpsc::Sender<Job>,
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
    detail TEXT NOT NULL
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
        let open_error = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(path).map_err(open_error)?;
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .map_err(open_error)?;
        conn.execute_batch(SCHEMA).map_err(open_error)?;
        let (jobs, rx) = std_mpsc::channel();
        let max_age = config.history_max_age;
        let max_events = config.history_max_events;
        std::thread::Builder::new()
            .name("lockscope-store".into())
            .spawn(move || run(conn, rx, max_age, max_events))
            .map_err(StoreError::Thread)?;
        Ok(Store { jobs })
    }

    /// Appends an audit record; returns its id.
    pub async fn audit(&self, record: AuditRecord) -> Result<i64, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Audit(record, tx))
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// The newest `limit` audit records, newest first.
    pub async fn audits(&self, limit: u32) -> Result<Vec<AuditRecord>, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job::Audits { limit, reply })
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Records lock events (fire and forget: history must never slow the aggregator).
    pub fn record(&self, events: Vec<(String, LockEvent)>) {
        if !events.is_empty() {
            let _ = self.jobs.send(Job::Events(events));
        }
    }

    /// The newest `limit` events of a lock, oldest first.
    pub async fn lock_events(&self, lock: &str, limit: u32) -> Result<Vec<LockEvent>, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job::LockEvents {
                lock: lock.to_string(),
                limit,
                reply,
            })
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

fn run(mut conn: Connection, jobs: std_mpsc::Receiver<Job>, max_age: Duration, max_events: u64) {
    let mut last_prune = Instant::now();
    while let Ok(job) = jobs.recv() {
        // Drain what is already queued so a burst of events is one transaction.
        let mut batch = vec![job];
        while let Ok(more) = jobs.try_recv() {
            batch.push(more);
            if batch.len() >= 512 {
                break;
            }
        }
        let mut events = Vec::new();
        for job in batch {
            match job {
                Job::Events(mut e) => events.append(&mut e),
                Job::Audit(record, reply) => {
                    let _ = reply.send(insert_audit(&conn, &record));
                }
                Job::Audits { limit, reply } => {
                    let _ = reply.send(read_audits(&conn, limit));
                }
                Job::LockEvents { lock, limit, reply } => {
                    // Pending writes first, so a reader sees what was recorded before it asked.
                    if let Err(e) = insert_events(&mut conn, std::mem::take(&mut events)) {
                        tracing::error!(error = %e, "cannot record lock history");
                    }
                    let _ = reply.send(read_lock_events(&conn, &lock, limit));
                }
            }
        }
        if let Err(e) = insert_events(&mut conn, events) {
            tracing::error!(error = %e, "cannot record lock history");
        }
        if last_prune.elapsed() > Duration::from_secs(60) {
            last_prune = Instant::now();
            if let Err(e) = prune(&conn, max_age, max_events) {
                tracing::error!(error = %e, "cannot prune lock history");
            }
        }
    }
}

fn insert_audit(conn: &Connection, r: &AuditRecord) -> Result<i64, StoreError> {
    conn.execute(
        "INSERT INTO audit (at_ms, token_name, source, lock_id, observed_holder, outcome, reason, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![r.at_ms, r.token_name, r.source, r.lock_id, r.observed_holder, r.outcome, r.reason, r.detail],
    )?;
    Ok(conn.last_insert_rowid())
}

fn read_audits(conn: &Connection, limit: u32) -> Result<Vec<AuditRecord>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, at_ms, token_name, source, lock_id, observed_holder, outcome, reason, detail
         FROM audit ORDER BY id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit], |row| {
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
        let audits = store.audits(10).await.expect("audits");
        assert_eq!(audits.len(), 1);
        assert_eq!(audits[0].token_name, "alice");
        assert_eq!(
            store.lock_events("zk~l", 1).await.expect("events")[0].at_ms,
            20
        );
    }
}
