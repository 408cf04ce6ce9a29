//! The store's task: connects (retrying while the store is down), applies the migrations, and
//! takes part in the election of the replica that writes the history; while this replica
//! writes, it writes lock events, lock states, prunes and closes abandoned audit records, a
//! small batch at a time.
//!
//! The writer's role is a **lease with a fencing token**, kept in the store's `store_writer`
//! row and judged by the store's clock only: the writer renews it (every [`renew_every`] of a
//! `[store] lease`), and every history write begins, in its own transaction, by renewing it
//! on the condition that its token is still current and the lease has not run out — so a
//! writer that was paused (SIGSTOP, a suspended VM) and wakes after losing the role writes
//! nothing and stands by again ([`StoreError::Fenced`]). A replica that does not write beats
//! every [`STANDBY_TICK`] in `replica_beats`, reads the lease, and keeps what it observes
//! from the writer's `through_ms − MARGIN_MS` on. The replica that has run longest (of the
//! live ones other than the lease holder) takes over when the lease has run out, or at once
//! when the holder's session is gone (a writer killed): it ends the stale writer's session
//! (`pg_terminate_backend`, with whatever transaction and row lock it held), takes the lease
//! with the next token, writes what it kept that the store does not hold ([`matching`]), then
//! brings every live lock's state up to date, one source at a time as each has been read, and
//! marks the locks the store had as live that are no longer there as gone while unwatched.
//!
//! Every instant compared across replicas is in the store's time: this replica's offset to the
//! store's clock is measured on each beat ([`super::clock`]) and, with PostgreSQL, set as what
//! [`lockscope_base::clock::now_ms`] adds to this host's clock, so the instants this replica books (lock
//! events, `through_ms`, lock states, cursors) are the store's time. (Lock events carry the
//! source's own instants too — a ZooKeeper node's ctime — which a skewed replica's own clock
//! could not be compared with.) Beats, the lease and the election are judged by the store's
//! clock in SQL. A replica whose clock is off by minutes changes nothing of the election, the
//! takeover's gap or the matching window.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockscope_model::wire::{EventKind, LockEvent, ReleaseCause, WriterView};
use tokio::sync::watch;

use super::clock::Clock;
use super::db::{Db, Fence, Lease, WriterConn};
use super::matching::{self, MARGIN_MS, WINDOW_MS};
use super::{Inner, StateChange, StoreError, WRITE_CHUNK};
use lockscope_base::clock::{host_now_ms, now_ms};

/// How often a replica that does not write beats, measures its clock against the store's and
/// reads the lease: how soon after the lease runs out it takes over.
pub const STANDBY_TICK: Duration = Duration::from_millis(250);
/// Changed lock states are written at most this often (coalesced per lock meanwhile).
const STATES_EVERY: Duration = Duration::from_millis(250);
/// History is pruned this often (then a batch at a time until done).
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// The writer looks for audit records abandoned by a replica this often.
const ABANDONED_EVERY: Duration = Duration::from_secs(2);
/// A replica with no beat for this long (store time) will not finish its `pending` audit
/// records: they are closed as `unknown`.
pub const REPLICA_DEAD_MS: i64 = 10_000;
/// Rows per prune statement, per lock-state upsert, per page of live locks.
const BATCH: usize = 500;
/// Events booked by the aggregator carry an instant a little before they are recorded.
const SLACK_MS: i64 = 1_000;
/// Chunks of events written per round before the writer looks at its other work.
const CHUNKS_PER_ROUND: usize = 8;
/// A replica whose beat is older than this (store time) is not counted as alive in the
/// election.
const ALIVE_MS: i64 = 1_500;
/// A lease out this long is taken by whoever sees it (a fallback: the eldest replica normally
/// takes over within a [`STANDBY_TICK`] of the lease running out).
const WRITER_SILENT_MS: i64 = 5_000;
/// The longest wait between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest the store may take to answer one statement of the writer's or the standby's
/// before it counts as unreachable (a silent network path answers nothing, ever).
pub const STATEMENT_WAIT: Duration = Duration::from_secs(5);
/// The longest the takeover's read of what the store holds since its predecessor's
/// `through_ms` may take.
const GAP_WAIT: Duration = Duration::from_secs(60);

/// How often the writer renews a lease of `lease`: six times per lease, at most every 500 ms.
pub fn renew_every(lease: Duration) -> Duration {
    (lease / 6).clamp(Duration::from_millis(50), Duration::from_millis(500))
}

/// `fut`, or [`StoreError::Unavailable`] once it has taken `limit`.
pub(super) async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Unavailable(format!(
            "the store did not answer within {limit:?}"
        ))),
    }
}

/// This replica's start and clock, as the store sees them.
struct Me {
    /// When this process started, its own time.
    started_local_ms: i64,
    /// The same instant in the store's time (from the first offset measured).
    started_ms: Option<i64>,
    clock: Clock,
}

pub(super) async fn run(inner: Arc<Inner>) {
    let mut me = Me {
        started_local_ms: host_now_ms(),
        started_ms: None,
        clock: Clock::default(),
    };
    let mut closing = inner.closing.subscribe();
    let mut backoff = Duration::from_millis(200);
    let mut db: Option<Db> = None;
    loop {
        if *closing.borrow() {
            break;
        }
        if db.is_none() {
            match bounded(STATEMENT_WAIT * 2, connect(&inner)).await {
                Ok(connected) => db = Some(connected),
                Err(e) => failed(&inner, &e, true),
            }
        }
        if let Some(pool) = &db {
            match serve(&inner, &mut closing, &mut me).await {
                Ok(()) => break,
                Err(StoreError::Fenced) => {
                    // Not the store's fault: another replica took the role while this one
                    // was not renewing it (paused, or too slow). Stand by again at once.
                    inner.shared.writing.store(false, Ordering::Relaxed);
                    tracing::warn!(replica = %inner.replica,
                        "this replica lost the history writer's lease and wrote nothing after; standing by");
                    backoff = Duration::from_millis(100);
                }
                Err(e) => {
                    inner.shared.writing.store(false, Ordering::Relaxed);
                    // Said at once; then: is it the store or only the writer's connection?
                    failed(&inner, &e, false);
                    let down = pool_down(pool).await;
                    if down {
                        failed(&inner, &e, true);
                    }
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
                        // The writer's session was ended (another replica took over) or
                        // failed alone: stand by again soon, the pool still works.
                        backoff = Duration::from_millis(500);
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
    bounded(POOL_CHECK_WAIT, db.read_writer()).await.is_err()
}

/// How long the pool may take to answer whether the store is there, after the writer's
/// connection failed.
const POOL_CHECK_WAIT: Duration = Duration::from_secs(2);

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

/// Beats in `replica_beats` (its start in the store's time) and measures this replica's clock
/// against the store's on the way (SQLite: the store's clock is this host's, offset 0).
async fn beat(inner: &Inner, conn: &mut WriterConn, me: &mut Me) -> Result<(), StoreError> {
    let sqlite = matches!(conn, WriterConn::Sqlite(_));
    let started = me.started_ms.unwrap_or(me.started_local_ms);
    let sent = host_now_ms();
    let store_now = bounded(STATEMENT_WAIT, conn.beat(&inner.replica, started)).await?;
    let received = host_now_ms();
    if sqlite {
        me.started_ms = Some(me.started_local_ms);
        inner
            .shared
            .started_store_ms
            .store(me.started_local_ms, Ordering::Relaxed);
        return Ok(());
    }
    let offset = me.clock.sample(sent, store_now, received);
    let shared = &inner.shared;
    let before = shared.offset_ms.swap(offset, Ordering::Relaxed);
    lockscope_base::clock::set_clock_offset_ms(offset);
    if !shared.offset_known.swap(true, Ordering::Relaxed) || before != offset {
        tracing::info!(replica = %inner.replica, offset_ms = offset,
            round_trip_ms = received - sent, "this replica's clock against the store's");
    }
    if me.started_ms.is_none() {
        me.started_ms = Some(me.started_local_ms + offset);
        inner
            .shared
            .started_store_ms
            .store(me.started_local_ms + offset, Ordering::Relaxed);
        // The first beat carried this replica's own clock: say it again in the store's.
        bounded(
            STATEMENT_WAIT,
            conn.beat(&inner.replica, me.started_ms.unwrap_or(started)),
        )
        .await?;
    }
    Ok(())
}

/// Waits to write, then writes, until closing (`Ok`) or the writer's connection fails or its
/// lease is lost.
async fn serve(
    inner: &Inner,
    closing: &mut watch::Receiver<bool>,
    me: &mut Me,
) -> Result<(), StoreError> {
    let mut conn = bounded(
        STATEMENT_WAIT,
        Db::writer_conn(&inner.location, &inner.config),
    )
    .await?;
    let pid = bounded(STATEMENT_WAIT, conn.backend_pid()).await?;
    let sqlite = matches!(inner.location, super::Location::Sqlite(_));
    let lease_ms = inner.config.lease.as_millis() as i64;
    let mut was_candidate = false;
    let (token, previous) = loop {
        if *closing.borrow() {
            return Ok(());
        }
        beat(inner, &mut conn, me).await?;
        let started = me.started_ms.unwrap_or(me.started_local_ms);
        // The replica that has run longest takes over: it saw most of what a writer that died
        // may not have written (one restarted at once saw nothing of it).
        let candidate = sqlite
            || bounded(
                STATEMENT_WAIT,
                conn.eldest(&inner.replica, started, ALIVE_MS, WRITER_SILENT_MS),
            )
            .await?;
        let lease = bounded(STATEMENT_WAIT, conn.lease()).await?;
        if candidate != was_candidate {
            tracing::debug!(replica = %inner.replica, candidate, "history writer election");
            was_candidate = candidate;
        }
        if candidate {
            if let Some(token) = try_take(inner, &mut conn, pid, lease_ms, lease.as_ref()).await? {
                break (token, lease);
            }
        }
        if let Some(lease) = &lease {
            keep_from(inner, lease.through_ms - MARGIN_MS);
        }
        {
            let mut status = inner.status();
            status.writer = lease.as_ref().map(Lease::view);
            // A round that answered: whatever failed before is over.
            status.error = None;
            status.connected = true;
        }
        inner.shared.states().clear();
        tokio::select! {
            _ = tokio::time::sleep(STANDBY_TICK) => {}
            _ = closing.changed() => {}
        }
    };
    lead(inner, &mut conn, closing, me, token, previous).await
}

/// Takes the lease if it is free: run out (its holder's session is ended first, so nothing it
/// still holds can block or write), its holder's session gone, or none yet. Answers the new
/// token, or `None` while a live writer holds it (or another replica was quicker).
async fn try_take(
    inner: &Inner,
    conn: &mut WriterConn,
    pid: i64,
    lease_ms: i64,
    lease: Option<&Lease>,
) -> Result<Option<i64>, StoreError> {
    let sqlite = matches!(conn, WriterConn::Sqlite(_));
    let (seen, gone) = match lease {
        None => (None, false),
        // One process writes an SQLite store: a lease left by an earlier run of it is over.
        Some(lease) if sqlite => (Some(lease.token), true),
        Some(lease) => {
            let expired = lease.expires_ms <= lease.now_ms;
            let open = bounded(STATEMENT_WAIT, conn.writer_session_open(lease.backend_pid)).await?;
            if !expired && open {
                return Ok(None);
            }
            let mut gone = !open;
            if open {
                // The lease ran out with its writer's session open: a writer paused, or cut
                // off. End its session, so that a transaction it left open (and the lock on
                // the lease row it may hold) goes, and nothing it sends later is taken.
                match bounded(STATEMENT_WAIT, conn.end_writer_session(lease.backend_pid)).await {
                    Ok(ended) => {
                        gone = ended;
                        tracing::warn!(replica = %inner.replica, stale = %lease.replica,
                            pid = lease.backend_pid, ended,
                            overdue_ms = lease.now_ms - lease.expires_ms,
                            "the history writer's lease ran out; ending its session and taking over");
                    }
                    // Refused (another role, a managed service): the token alone fences it;
                    // a transaction it left open ends by the server's idle timeout.
                    Err(e) => tracing::warn!(replica = %inner.replica, stale = %lease.replica,
                        error = %e, "cannot end the stale history writer's session; taking over by the token"),
                }
            }
            (Some(lease.token), gone)
        }
    };
    match bounded(
        STATEMENT_WAIT,
        conn.take_lease(&inner.replica, pid, lease_ms, seen, gone),
    )
    .await
    {
        Ok(token) => Ok(token),
        // The lease row is locked by a writer mid-transaction (its session not ended yet):
        // the next round tries again.
        Err(StoreError::Query(sqlx::Error::Database(e)))
            if e.code().as_deref() == Some("55P03") =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
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

/// Writes the history until closing or a failure (the lease lost among them).
async fn lead(
    inner: &Inner,
    conn: &mut WriterConn,
    closing: &mut watch::Receiver<bool>,
    me: &mut Me,
    token: i64,
    previous: Option<Lease>,
) -> Result<(), StoreError> {
    let shared = &inner.shared;
    let fence = Fence {
        token,
        lease_ms: inner.config.lease.as_millis() as i64,
    };
    let renew = renew_every(inner.config.lease);
    let store_now = now_ms;
    bounded(GAP_WAIT, fill_gap(inner, conn, previous.as_ref())).await?;
    bounded(STATEMENT_WAIT, conn.renew(fence, None)).await?;
    shared.states().clear();
    shared.writing.store(true, Ordering::Relaxed);
    let now = store_now();
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
        token,
        previous = previous.as_ref().map(|p| p.replica.as_str()),
        "this replica writes the history now"
    );
    let mut done_sources: Vec<String> = Vec::new();
    let mut push: Option<Push> = None;
    let mut last_renew = Instant::now();
    let mut last_states = Instant::now();
    let mut last_prune = Instant::now();
    let mut last_abandoned = Instant::now() - ABANDONED_EVERY;
    let mut pruning = false;
    loop {
        let stopping = *closing.borrow();
        // Lock events, a few chunks a round (all of them when stopping).
        let mut rounds = 0;
        loop {
            let mut chunk = shared.take(WRITE_CHUNK);
            if chunk.is_empty() {
                break;
            }
            let written = async {
                force_causes(conn, &mut chunk).await?;
                let newest = chunk.iter().map(|(_, e)| e.at_ms).max().unwrap_or(0);
                let through = if shared.pending().events.is_empty() {
                    newest.max(store_now() - SLACK_MS)
                } else {
                    newest
                };
                conn.write_events(fence, &chunk, &inner.replica, through)
                    .await?;
                Ok(through)
            };
            match bounded(STATEMENT_WAIT, written).await {
                Ok(through) => through_ms = through_ms.max(through),
                Err(e) => {
                    shared.put_back(chunk);
                    return Err(e);
                }
            }
            shared
                .written
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            last_renew = Instant::now();
            rounds += 1;
            if rounds >= CHUNKS_PER_ROUND && !stopping {
                break;
            }
        }
        if last_renew.elapsed() >= renew {
            beat(inner, conn, me).await?;
            let through = shared
                .pending()
                .events
                .is_empty()
                .then(|| store_now() - SLACK_MS);
            bounded(STATEMENT_WAIT, conn.renew(fence, through)).await?;
            through_ms = through_ms.max(through.unwrap_or(0));
            last_renew = Instant::now();
        }
        if let Some(writer) = inner.status().writer.as_mut() {
            writer.through_ms = through_ms;
        }
        if last_states.elapsed() >= STATES_EVERY || stopping {
            bounded(STATEMENT_WAIT * 2, write_states(inner, conn, fence)).await?;
            last_states = Instant::now();
        }
        if stopping {
            conn.resign(token).await;
            return Ok(());
        }
        if last_abandoned.elapsed() >= ABANDONED_EVERY {
            let closed = bounded(
                STATEMENT_WAIT,
                conn.close_abandoned_audits(fence, REPLICA_DEAD_MS),
            )
            .await?;
            if closed > 0 {
                tracing::warn!(closed, replica = %inner.replica,
                    "closed audit records left pending by a replica that stopped, as `unknown`");
            }
            last_abandoned = Instant::now();
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
                        started_ms: store_now(),
                        after: None,
                        marking: false,
                    });
            }
        }
        if let Some(p) = push.as_mut() {
            if bounded(STATEMENT_WAIT * 2, push_page(inner, conn, fence, p)).await? {
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
            let cutoff = store_now() - inner.config.keep.as_millis() as i64;
            let deleted = bounded(
                STATEMENT_WAIT * 2,
                conn.prune(fence, cutoff, inner.config.max_events, BATCH as i64),
            )
            .await?;
            pruning = deleted > 0;
        }
        let busy = push.is_some() || pruning || !shared.pending().events.is_empty();
        if busy {
            tokio::task::yield_now().await;
        } else {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(renew.min(Duration::from_millis(200))) => {}
                _ = closing.changed() => {}
            }
        }
    }
}

/// How long before a release an operator's force release of that holder is looked for.
const FORCED_WITHIN_MS: i64 = 120_000;

/// Releases of holders an operator force-released are `forced`, whichever replica ran the
/// release: this one books its own (the aggregator's forced marks); another replica's are
/// in the shared audit log, written before anything changed (by the store's clock,
/// `store_at_ms`).
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
    previous: Option<&Lease>,
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
async fn write_states(
    inner: &Inner,
    conn: &mut WriterConn,
    fence: Fence,
) -> Result<(), StoreError> {
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
        conn.write_states(fence, &rows).await?;
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
async fn push_page(
    inner: &Inner,
    conn: &mut WriterConn,
    fence: Fence,
    p: &mut Push,
) -> Result<bool, StoreError> {
    let now = now_ms();
    if p.marking {
        let marked = conn
            .mark_unseen_gone(fence, &p.source, p.started_ms, now, BATCH as i64)
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
    conn.write_states(fence, &rows).await?;
    p.after = page.last().map(|(id, _)| id.clone());
    if page.len() < BATCH {
        p.marking = true;
    }
    Ok(false)
}
