//! The store's task: connects (retrying while the store is down), applies the migrations, and
//! takes part in the election of the replica that writes the history; while this replica
//! writes, it writes lock events, lock states and prunes, a small batch at a time.
//!
//! The election is a PostgreSQL advisory lock ([`super::db::WRITER_LOCK`]) taken on a dedicated
//! connection, which then carries every history write: when that connection goes, the lock
//! goes with it and this replica cannot write another row. A replica that does not write
//! tries for the lock every [`STANDBY_TICK`], reads the writer's row (`store_writer`: who,
//! since when, and `through_ms`, up to which everything it observed is stored) and keeps what
//! it observes from `through_ms - MARGIN_MS` on. When it takes over it writes what it kept that
//! the store does not hold ([`matching`]), then brings every live lock's state up to date, one
//! source at a time as each has been read, and marks the locks the store had as live that are
//! no longer there as gone while unwatched.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockscope_model::wire::{EventKind, LockEvent, ReleaseCause, WriterView};
use tokio::sync::watch;

use super::db::{Db, WriterConn};
use super::matching::{self, MARGIN_MS, WINDOW_MS};
use super::{Inner, StateChange, StoreError, WRITE_CHUNK};
use crate::now_ms;

/// How often a replica that does not write tries to, and reads who does (a cheap
/// `pg_try_advisory_lock` and a one-row read): how soon it takes over from a writer that died.
pub const STANDBY_TICK: Duration = Duration::from_millis(250);
/// The writer tells the store it is alive (and how far it has written) at least this often.
const BEAT_EVERY: Duration = Duration::from_secs(1);
/// Changed lock states are written at most this often (coalesced per lock meanwhile).
const STATES_EVERY: Duration = Duration::from_millis(250);
/// History is pruned this often (then a batch at a time until done).
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Rows per prune statement, per lock-state upsert, per page of live locks.
const BATCH: usize = 500;
/// Events booked by the aggregator carry an instant a little before they are recorded.
const SLACK_MS: i64 = 1_000;
/// Chunks of events written per round before the writer looks at its other work.
const CHUNKS_PER_ROUND: usize = 8;
/// A replica whose beat is older than this is not counted as alive in the election.
const ALIVE_MS: i64 = 1_500;
/// A writer silent this long is taken for dead whoever is eldest (a fallback: the eldest
/// replica normally takes over within a [`STANDBY_TICK`]).
const WRITER_SILENT_MS: i64 = 5_000;
/// The longest wait between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub(super) async fn run(inner: Arc<Inner>) {
    let started_ms = now_ms();
    let mut closing = inner.closing.subscribe();
    let mut backoff = Duration::from_millis(200);
    let mut db: Option<Db> = None;
    loop {
        if *closing.borrow() {
            break;
        }
        if db.is_none() {
            match connect(&inner).await {
                Ok(connected) => db = Some(connected),
                Err(e) => failed(&inner, &e, true),
            }
        }
        if let Some(pool) = &db {
            match serve(&inner, &mut closing, started_ms).await {
                Ok(()) => break,
                Err(e) => {
                    inner.shared.writing.store(false, Ordering::Relaxed);
                    // Is it the store or only the writer's connection?
                    let down = pool_down(pool).await;
                    failed(&inner, &e, down);
                    if down {
                        inner.db.send_replace(None);
                        let pool = db.take();
                        // Closing waits for connections in use; nobody waits for it.
                        tokio::spawn(async move {
                            if let Some(pool) = pool {
                                pool.close().await;
                            }
                        });
                    } else {
                        backoff = MAX_BACKOFF;
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = closing.changed() => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
        if db.is_some() && inner.status().error.is_none() {
            backoff = Duration::from_millis(200);
        }
    }
    inner.shared.writing.store(false, Ordering::Relaxed);
    if let Some(pool) = inner.db.send_replace(None) {
        pool.close().await;
    }
}

/// Notes why the store is not usable (or the last write failed).
fn failed(inner: &Inner, e: &StoreError, down: bool) {
    let text = match e {
        // A driver's word for a dropped connection ("expected to read 5 bytes, got 0") says
        // little on its own.
        StoreError::Query(sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) => {
            format!("lost the connection to the store: {e}")
        }
        _ => e.to_string(),
    };
    let mut status = inner.status();
    if down {
        // Who writes is the store's to say, and it cannot now.
        status.writer = None;
    }
    if status.error.as_deref() != Some(text.as_str()) {
        tracing::warn!(error = %text, replica = %inner.replica, "the store");
    }
    status.error = Some(text);
    if down {
        status.connected = false;
    }
}

async fn pool_down(db: &Db) -> bool {
    db.read_writer().await.is_err()
}

/// A migrated pool, published for readers.
async fn connect(inner: &Inner) -> Result<Db, StoreError> {
    let db = Db::connect(&inner.location, &inner.config).await?;
    let version = match db.migrate().await {
        Ok(version) => {
            inner.status().error = None;
            version
        }
        // Usable for reading (a read-only store with the current schema).
        Err((Some(version), e)) => {
            failed(inner, &e, false);
            version
        }
        Err((None, e)) => {
            db.close().await;
            return Err(e);
        }
    };
    {
        let mut status = inner.status();
        status.connected = true;
        status.schema_version = Some(version);
    }
    tracing::info!(backend = inner.location.backend(), replica = %inner.replica, version, "the store is connected");
    inner.db.send_replace(Some(db.clone()));
    Ok(db)
}

/// Waits to write, then writes, until closing (`Ok`) or the writer's connection fails.
async fn serve(
    inner: &Inner,
    closing: &mut watch::Receiver<bool>,
    started_ms: i64,
) -> Result<(), StoreError> {
    let mut conn = Db::writer_conn(&inner.location, &inner.config).await?;
    let sqlite = matches!(inner.location, super::Location::Sqlite(_));
    let mut was_candidate = false;
    loop {
        if *closing.borrow() {
            return Ok(());
        }
        // The replica that has run longest takes over: it saw most of what a writer that died
        // may not have written (one restarted at once saw nothing of it).
        let now = now_ms();
        let candidate = sqlite || {
            conn.beat(&inner.replica, started_ms, now).await?;
            conn.eldest(
                &inner.replica,
                started_ms,
                now - ALIVE_MS,
                now - WRITER_SILENT_MS,
            )
            .await?
        };
        let took = candidate && conn.try_lead().await?;
        if candidate != was_candidate {
            tracing::debug!(replica = %inner.replica, candidate, took, "history writer election");
            was_candidate = candidate;
        }
        if took {
            break;
        }
        let writer = conn.read_writer().await?;
        if let Some(writer) = &writer {
            keep_from(inner, writer.through_ms - MARGIN_MS);
        }
        inner.status().writer = writer;
        inner.shared.states().clear();
        tokio::select! {
            _ = tokio::time::sleep(STANDBY_TICK) => {}
            _ = closing.changed() => {}
        }
    }
    lead(inner, &mut conn, closing).await
}

/// A replica that does not write keeps only what a takeover could need.
fn keep_from(inner: &Inner, from_ms: i64) {
    let mut pending = inner.shared.pending();
    while pending
        .events
        .front()
        .is_some_and(|(_, e)| e.at_ms < from_ms)
    {
        pending.events.pop_front();
    }
}

/// Bringing one source's lock states up to date after taking over.
struct Push {
    source: String,
    started_ms: i64,
    after: Option<Arc<str>>,
    /// Every live lock is written; now the ones that went unseen are marked.
    marking: bool,
}

/// Writes the history until closing or a failure.
async fn lead(
    inner: &Inner,
    conn: &mut WriterConn,
    closing: &mut watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let shared = &inner.shared;
    let now = now_ms();
    let previous = conn.read_writer().await?;
    fill_gap(inner, conn, previous.as_ref()).await?;
    conn.claim(&inner.replica, now).await?;
    shared.states().clear();
    shared.writing.store(true, Ordering::Relaxed);
    let mut through_ms = previous.as_ref().map_or(now, |p| p.through_ms);
    {
        let mut status = inner.status();
        status.writer = Some(WriterView {
            replica: inner.replica.clone(),
            since_ms: now,
            through_ms,
        });
        status.error = None;
    }
    tracing::info!(
        replica = %inner.replica,
        previous = previous.as_ref().map(|p| p.replica.as_str()),
        "this replica writes the history now"
    );
    let mut done_sources: Vec<String> = Vec::new();
    let mut push: Option<Push> = None;
    let mut last_beat = Instant::now();
    let mut last_states = Instant::now();
    let mut last_prune = Instant::now();
    let mut pruning = false;
    loop {
        let stopping = *closing.borrow();
        // Lock events, a few chunks a round (all of them when stopping).
        let mut rounds = 0;
        loop {
            let chunk = shared.take(WRITE_CHUNK);
            if chunk.is_empty() {
                break;
            }
            let mut chunk = chunk;
            if let Err(e) = force_causes(conn, &mut chunk).await {
                shared.put_back(chunk);
                return Err(e);
            }
            let now = now_ms();
            let newest = chunk.iter().map(|(_, e)| e.at_ms).max().unwrap_or(now);
            let empty = shared.pending().events.is_empty();
            let through = if empty {
                newest.max(now - SLACK_MS)
            } else {
                newest
            };
            if let Err(e) = conn
                .write_events(&chunk, &inner.replica, through, now)
                .await
            {
                shared.put_back(chunk);
                return Err(e);
            }
            shared
                .written
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            through_ms = through_ms.max(through);
            last_beat = Instant::now();
            rounds += 1;
            if rounds >= CHUNKS_PER_ROUND && !stopping {
                break;
            }
        }
        if last_beat.elapsed() >= BEAT_EVERY {
            let now = now_ms();
            let through = if shared.pending().events.is_empty() {
                now - SLACK_MS
            } else {
                0
            };
            conn.write_events(&[], &inner.replica, through, now).await?;
            through_ms = through_ms.max(through);
            last_beat = Instant::now();
        }
        if let Some(writer) = inner.status().writer.as_mut() {
            writer.through_ms = through_ms;
        }
        if last_states.elapsed() >= STATES_EVERY || stopping {
            write_states(inner, conn).await?;
            last_states = Instant::now();
        }
        if stopping {
            conn.resign().await;
            return Ok(());
        }
        // One page of a source's live locks, once it has been read.
        if push.is_none() {
            if let Some(live) = inner.live.get() {
                push = live
                    .sources()
                    .into_iter()
                    .find(|(name, synced)| *synced && !done_sources.contains(name))
                    .map(|(source, _)| Push {
                        source,
                        started_ms: now_ms(),
                        after: None,
                        marking: false,
                    });
            }
        }
        if let Some(p) = push.as_mut() {
            if push_page(inner, conn, p).await? {
                tracing::info!(source = %p.source, replica = %inner.replica, "lock states brought up to date");
                done_sources.push(p.source.clone());
                push = None;
            }
        }
        if !pruning && last_prune.elapsed() >= PRUNE_EVERY {
            pruning = true;
            last_prune = Instant::now();
        }
        if pruning {
            let cutoff = now_ms() - inner.config.keep.as_millis() as i64;
            let deleted = conn
                .prune(cutoff, inner.config.max_events, BATCH as i64)
                .await?;
            pruning = deleted > 0;
        }
        let busy = push.is_some() || pruning || !shared.pending().events.is_empty();
        if busy {
            tokio::task::yield_now().await;
        } else {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = closing.changed() => {}
            }
        }
    }
}

/// How long before a release an operator's force release of that holder is looked for.
const FORCED_WITHIN_MS: i64 = 120_000;

/// Releases of holders an operator force-released are `forced`, whichever replica ran the
/// release: this one books its own (the aggregator's forced marks); another replica's are
/// in the shared audit log, written before anything changed.
async fn force_causes(
    conn: &mut WriterConn,
    chunk: &mut [(String, LockEvent)],
) -> Result<(), StoreError> {
    let released = |e: &LockEvent| {
        e.kind == EventKind::Released && e.cause.is_some_and(|c| c != ReleaseCause::Forced)
    };
    let Some(oldest) = chunk
        .iter()
        .filter(|(_, e)| released(e))
        .map(|(_, e)| e.at_ms)
        .min()
    else {
        return Ok(());
    };
    let mut forced = conn.forced_since(oldest - FORCED_WITHIN_MS).await?;
    if forced.is_empty() {
        return Ok(());
    }
    for (lock, e) in chunk.iter_mut() {
        if !released(e) {
            continue;
        }
        let key = (lock.clone(), e.node.clone());
        // The holder's first release after the operator asked (as the aggregator's own mark,
        // used once).
        if forced
            .get(&key)
            .is_some_and(|asked| e.at_ms >= *asked - 1_000)
        {
            forced.remove(&key);
            e.cause = Some(ReleaseCause::Forced);
        }
    }
    Ok(())
}

/// Writes what this replica kept that its predecessor did not store (nothing when there was
/// none: a new store).
async fn fill_gap(
    inner: &Inner,
    conn: &mut WriterConn,
    previous: Option<&WriterView>,
) -> Result<(), StoreError> {
    let Some(previous) = previous else {
        return Ok(());
    };
    let from = previous.through_ms - MARGIN_MS;
    let stored = conn.stored_since(from - WINDOW_MS, 2_000_000).await?;
    let shared = &inner.shared;
    let mut kept = shared.take(usize::MAX);
    let seen = kept.len();
    kept.retain(|(_, e)| e.at_ms >= from);
    let candidates = kept.len();
    let kept = matching::unmatched(
        stored.iter().map(|((lock, kind, node, session), at)| {
            ((lock.as_str(), *kind, node.as_str(), session.as_str()), *at)
        }),
        kept,
    );
    tracing::info!(
        previous = %previous.replica,
        seen,
        candidates,
        missing = kept.len(),
        "filling the gap the previous history writer left"
    );
    shared.put_back(kept);
    Ok(())
}

/// Writes the lock states changed since the last time.
async fn write_states(inner: &Inner, conn: &mut WriterConn) -> Result<(), StoreError> {
    let changed: Vec<(Arc<str>, StateChange)> = inner.shared.states().drain().collect();
    let now = now_ms();
    for chunk in changed.chunks(BATCH) {
        let rows: Vec<_> = chunk
            .iter()
            .map(|(id, change)| {
                let (record, gone) = match change {
                    StateChange::Live(record) => (record, None),
                    StateChange::Gone { last, at_ms } => (last, Some(*at_ms)),
                };
                state_row(id, &**record, now, gone)
            })
            .collect();
        // On failure, the next writer's full read writes them again.
        conn.write_states(&rows).await?;
    }
    Ok(())
}

fn state_row(
    id: &str,
    record: &dyn super::LockRecord,
    now: i64,
    gone: Option<i64>,
) -> (String, String, String, i64, Option<i64>) {
    let view = record.view(id);
    let source = id.split('~').next().unwrap_or_default().to_string();
    let json = serde_json::to_string(&view).unwrap_or_default();
    (id.to_string(), source, json, now, gone)
}

/// Writes one page of a source's live locks (or marks one batch of those gone unseen);
/// answers whether the source is done.
async fn push_page(inner: &Inner, conn: &mut WriterConn, p: &mut Push) -> Result<bool, StoreError> {
    let now = now_ms();
    if p.marking {
        let marked = conn
            .mark_unseen_gone(&p.source, p.started_ms, now, BATCH as i64)
            .await?;
        return Ok(marked < BATCH as u64);
    }
    let Some(live) = inner.live.get() else {
        return Ok(true);
    };
    let prefix = format!("{}~", p.source);
    let page = live.page(&prefix, p.after.as_deref(), BATCH);
    let rows: Vec<_> = page
        .iter()
        .map(|(id, record)| state_row(id, &**record, now, None))
        .collect();
    conn.write_states(&rows).await?;
    p.after = page.last().map(|(id, _)| id.clone());
    if page.len() < BATCH {
        p.marking = true;
    }
    Ok(false)
}
