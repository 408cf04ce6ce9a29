//! The aggregator: the one task that owns lock state.
//!
//! Collectors send [`SourceUpdate`]s; the aggregator keeps each source's tree mirror, re-decodes
//! only the containers a change touches, tracks hold/wait times, acquisitions and releases (with
//! their cause), and publishes:
//! * a [`Snapshot`] through a `watch` channel (read by the HTTP list endpoints), and
//! * a [`Delta`] per changed or removed lock through a `broadcast` channel (the SSE stream).
//!
//! Requests that need more than the snapshot (a lock's events, sessions, metrics) are
//! [`Command`]s with a `oneshot` reply. Nothing else holds or mutates lock state, and no lock is
//! held across an `.await`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::wire::{
    Backend, LockDetail, LockEvent, LockView, ReleaseCause, SessionView, SourceView,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::backends::database::state::DbSourceState;
use crate::backends::etcd::state::EtcdSourceState;
use crate::backends::redis::state::RedisSourceState;
use crate::backends::zookeeper::state::ZkSourceState;
use crate::collect::{SentCounter, SourceStats, SourceUpdate};
use crate::config::Config;
use crate::metrics::MetricsInput;
use crate::now_ms;

pub mod ledger;

/// Updates queued from the collectors to the aggregator at most; a collector waits when it is
/// full (and a Redis or etcd server then waits for it).
pub const UPDATE_QUEUE: usize = 8192;

/// Events kept per lock for `/api/v1/locks/{id}`.
const EVENTS_PER_LOCK: usize = 100;
/// Histories of vanished locks kept so a lock that comes back keeps its timeline.
pub(crate) const HISTORY_LIMIT: usize = 10_000;
/// What the read endpoints serve without asking the aggregator.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub version: u64,
    pub sources: Vec<SourceView>,
    /// By lock id. A persistent map: publishing a change copies a path, not 100k entries.
    pub locks: imbl::OrdMap<String, Arc<LockView>>,
}

impl Snapshot {
    /// Every configured source finished its first sync.
    pub fn ready(&self) -> bool {
        self.sources.iter().all(|s| s.synced)
    }
}

/// One change, stamped with the snapshot version that contains it.
#[derive(Debug, Clone)]
pub struct Delta {
    pub version: u64,
    pub change: Change,
}

#[derive(Debug, Clone)]
pub enum Change {
    Lock(Arc<LockView>),
    Removed(String),
    Source(SourceView),
}

pub enum Command {
    LockDetail {
        id: String,
        reply: oneshot::Sender<Option<LockDetail>>,
    },
    Sessions {
        reply: oneshot::Sender<Vec<SessionView>>,
    },
    Metrics {
        reply: oneshot::Sender<MetricsInput>,
    },
    /// A force release of `holder` (node, token or field) of lock `id` is about to run: when
    /// that holder goes before `until_ms`, its cause is `forced`. Answered once recorded.
    MarkForced {
        id: String,
        holder: String,
        until_ms: i64,
        reply: oneshot::Sender<()>,
    },
    /// That force release ended. Released: the mark stays [`FORCED_MARK_TTL`] from now (some
    /// sources see the removal only later). Anything else changed nothing: the attempt's part of
    /// the mark goes, so the holder's own later release is booked with its real cause — unless
    /// another attempt on the same holder released it or is still running.
    SettleForced {
        id: String,
        holder: String,
        released: bool,
        reply: oneshot::Sender<()>,
    },
    /// The member URLs of a Redis source (its server, Cluster masters or Redlock masters).
    RedisMembers {
        source: String,
        reply: oneshot::Sender<Option<Vec<String>>>,
    },
}

/// The handles HTTP and tests use to read the aggregator.
#[derive(Clone)]
pub struct Handle {
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    pub deltas: broadcast::Sender<Arc<Delta>>,
    pub commands: mpsc::Sender<Command>,
    /// Updates the collectors have sent (see [`Handle::settled`]).
    pub sent: SentCounter,
    /// Updates the aggregator has applied and published.
    pub applied: watch::Receiver<u64>,
    /// Every source's collector counters, in snapshot order.
    pub collector_stats: Vec<Arc<SourceStats>>,
}

impl Handle {
    /// Waits until the aggregator has applied and published every update sent before the
    /// call; `false` after `limit`.
    pub async fn settled(&self, limit: Duration) -> bool {
        let target = self.sent.load(std::sync::atomic::Ordering::SeqCst);
        let mut applied = self.applied.clone();
        tokio::time::timeout(limit, applied.wait_for(|n| *n >= target))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Updates sent and not yet applied.
    pub fn lag(&self) -> u64 {
        self.sent
            .load(std::sync::atomic::Ordering::SeqCst)
            .saturating_sub(*self.applied.borrow())
    }

    pub async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).await.ok()?;
        rx.await.ok()
    }
}

#[derive(Debug, Default)]
pub struct History {
    pub(crate) events: VecDeque<LockEvent>,
    pub(crate) acquisitions: u64,
    pub(crate) releases: u64,
    /// The lock's last view, kept while it is in a graveyard (gone from the snapshot).
    pub(crate) last: Option<Arc<LockView>>,
}

impl History {
    /// Events in time order (release causes resolve after the fact).
    pub(crate) fn sorted_events(&self) -> Vec<LockEvent> {
        let mut events: Vec<LockEvent> = self.events.iter().cloned().collect();
        events.sort_by_key(|e| e.at_ms);
        events
    }

    /// Books one release of `node` (of `session`) at `at_ms` after holding `held_ms`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn released(
        &mut self,
        store: &Option<crate::audit::Store>,
        id: &str,
        node: &str,
        session: String,
        at_ms: i64,
        held_ms: i64,
        cause: ReleaseCause,
    ) {
        self.releases += 1;
        push_event(
            store,
            id,
            &mut self.events,
            LockEvent {
                at_ms,
                kind: lockscope_model::wire::EventKind::Released,
                node: node.to_string(),
                session,
                cause: Some(cause),
                duration_ms: Some(held_ms),
            },
        );
    }

    /// Moves into a graveyard: remembers the lock as it is once gone.
    pub(crate) fn buried(mut self, view: &LockView, now: i64) -> History {
        let mut last = view.clone().gone(now);
        last.acquisitions = self.acquisitions;
        last.releases = self.releases;
        self.last = Some(Arc::new(last));
        self
    }
}

pub struct Aggregator {
    /// ZooKeeper sources (`backends/zookeeper/state.rs`).
    sources: Vec<ZkSourceState>,
    /// Redis sources.
    redis: Vec<RedisSourceState>,
    /// etcd sources (`backends/etcd/state.rs`).
    etcd: Vec<EtcdSourceState>,
    /// Database sources, `[[mysql]]` then `[[postgres]]` (`backends/database/state.rs`).
    databases: Vec<DbSourceState>,
    /// Updates applied and published so far (read by [`Handle::settled`]).
    applied: u64,
    applied_tx: watch::Sender<u64>,
    /// Sources whose own view changed since the last publish.
    dirty_sources: BTreeSet<(Backend, usize)>,
    max_labels: usize,
    version: u64,
    snapshot: Arc<Snapshot>,
    snapshot_tx: watch::Sender<Arc<Snapshot>>,
    delta_tx: broadcast::Sender<Arc<Delta>>,
    /// Lock views replaced and locks removed since the last publish, in the order they
    /// happened: a lock removed and back in one burst (a key deleted and set again) must end
    /// up present, one changed and then removed must end up gone.
    lock_ops: Vec<Change>,
    /// Where lock events are also written (the lock history), when a store is configured.
    store: Option<crate::audit::Store>,
    /// Holders being force-released: (lock id, holder) → when marked.
    forced: ForcedMarks,
}

impl Aggregator {
    /// Builds the aggregator for `config` and the handle to read it.
    pub fn new(config: &Config) -> (Aggregator, Handle, mpsc::Receiver<Command>) {
        let sources: Vec<ZkSourceState> = config
            .zookeeper
            .iter()
            .map(|zk| ZkSourceState::new(zk, config.metrics.max_lock_labels))
            .collect();
        let redis: Vec<RedisSourceState> = crate::backends::redis::collect::specs(config)
            .into_iter()
            .map(|spec| RedisSourceState::new(spec, config.metrics.max_lock_labels))
            .collect();
        let etcd: Vec<EtcdSourceState> = config
            .etcd
            .iter()
            .map(|e| EtcdSourceState::new(e.clone(), config.metrics.max_lock_labels))
            .collect();
        let databases: Vec<DbSourceState> = crate::backends::database_sources(config)
            .map(|(_, c, flavor)| {
                DbSourceState::new(c.clone(), flavor, config.metrics.max_lock_labels)
            })
            .collect();
        let snapshot = Arc::new(Snapshot {
            version: 0,
            sources: sources
                .iter()
                .map(|s| s.view.clone())
                .chain(redis.iter().map(|s| s.view.clone()))
                .chain(etcd.iter().map(|s| s.view.clone()))
                .chain(databases.iter().map(|s| s.view.clone()))
                .collect(),
            locks: imbl::OrdMap::new(),
        });
        let (snapshot_tx, snapshot_rx) = watch::channel(snapshot.clone());
        let (delta_tx, _) = broadcast::channel(4096);
        let (cmd_tx, cmd_rx) = mpsc::channel(256);
        let (applied_tx, applied_rx) = watch::channel(0);
        let handle = Handle {
            snapshot: snapshot_rx,
            deltas: delta_tx.clone(),
            commands: cmd_tx,
            sent: SentCounter::default(),
            applied: applied_rx,
            collector_stats: crate::backends::source_stats(config),
        };
        let agg = Aggregator {
            sources,
            redis,
            etcd,
            databases,
            applied: 0,
            applied_tx,
            dirty_sources: BTreeSet::new(),
            max_labels: config.metrics.max_lock_labels,
            version: 0,
            snapshot,
            snapshot_tx,
            delta_tx,
            lock_ops: Vec::new(),
            store: None,
            forced: HashMap::new(),
        };
        (agg, handle, cmd_rx)
    }

    /// Writes lock events to `store` as well (the persistent lock history).
    pub fn with_store(mut self, store: Option<crate::audit::Store>) -> Self {
        self.store = store;
        self
    }

    /// Runs until every update sender and command sender is dropped.
    pub async fn run(
        mut self,
        mut updates: mpsc::Receiver<SourceUpdate>,
        mut commands: mpsc::Receiver<Command>,
    ) {
        let mut housekeeping = tokio::time::interval(Duration::from_millis(500));
        let mut updates_open = true;
        let mut commands_open = true;
        while updates_open || commands_open {
            tokio::select! {
                update = updates.recv(), if updates_open => match update {
                    Some(update) => {
                        self.apply(update);
                        let mut applied = 1;
                        // Drain what is already queued so one publish covers a burst.
                        for _ in 0..4096 {
                            match updates.try_recv() {
                                Ok(update) => {
                                    self.apply(update);
                                    applied += 1;
                                }
                                Err(_) => break,
                            }
                        }
                        self.end_of_burst();
                        self.publish();
                        self.applied += applied;
                        self.applied_tx.send_replace(self.applied);
                    }
                    None => updates_open = false,
                },
                command = commands.recv(), if commands_open => match command {
                    Some(command) => self.answer(command),
                    None => commands_open = false,
                },
                _ = housekeeping.tick() => {
                    self.expire_pending();
                    self.publish();
                }
            }
        }
    }

    /// Hands an update to its source's state; a source not configured is logged (the
    /// registry builds outboxes only for configured sources, so this is a bug if it happens).
    fn apply(&mut self, update: SourceUpdate) {
        let mut cx = LedgerContext::new(&mut self.forced, &self.store, &mut self.lock_ops);
        let (backend, source, applied) = match update {
            SourceUpdate::Zookeeper { source, update } => (
                Backend::Zookeeper,
                source,
                apply_to(
                    &mut self.sources,
                    source,
                    update,
                    &mut cx,
                    ZkSourceState::apply,
                ),
            ),
            SourceUpdate::Redis { source, update } => (
                Backend::Redis,
                source,
                apply_to(
                    &mut self.redis,
                    source,
                    update,
                    &mut cx,
                    RedisSourceState::apply,
                ),
            ),
            SourceUpdate::Etcd { source, update } => (
                Backend::Etcd,
                source,
                apply_to(
                    &mut self.etcd,
                    source,
                    update,
                    &mut cx,
                    EtcdSourceState::apply,
                ),
            ),
            SourceUpdate::Database { source, update } => (
                self.databases
                    .get(source)
                    .map_or(Backend::Mysql, |s| s.flavor.backend()),
                source,
                apply_to(
                    &mut self.databases,
                    source,
                    update,
                    &mut cx,
                    DbSourceState::apply,
                ),
            ),
        };
        match applied {
            None => {
                tracing::error!(
                    ?backend,
                    source,
                    "update for a source that is not configured"
                )
            }
            Some(true) => {
                self.dirty_sources.insert((backend, source));
            }
            Some(false) => {}
        }
    }

    /// Work left to the end of a burst (ZooKeeper's large containers).
    fn end_of_burst(&mut self) {
        let mut cx = LedgerContext::new(&mut self.forced, &self.store, &mut self.lock_ops);
        for (index, source) in self.sources.iter_mut().enumerate() {
            cx.source_changed = false;
            source.recompute_deferred(&mut cx);
            if cx.source_changed {
                self.dirty_sources.insert((Backend::Zookeeper, index));
            }
        }
    }

    /// Releases whose cause no ensemble round judged in time are booked as plain releases.
    fn expire_pending(&mut self) {
        let mut cx = LedgerContext::new(&mut self.forced, &self.store, &mut self.lock_ops);
        for source in &mut self.sources {
            source.expire_pending(&mut cx);
        }
    }

    /// Publishes changed locks and sources as one new snapshot version plus deltas.
    fn publish(&mut self) {
        if self.lock_ops.is_empty()
            && !self.sources.iter().any(ZkSourceState::has_dirty_locks)
            && self.dirty_sources.is_empty()
        {
            return;
        }
        let mut changes = Vec::new();
        let mut locks = self.snapshot.locks.clone();
        // In order of occurrence first; then the ZooKeeper views built now from current state
        // (a ZooKeeper lock removed drops out of its dirty set, one back re-enters it).
        for op in std::mem::take(&mut self.lock_ops) {
            match op {
                Change::Lock(view) => {
                    locks.insert(view.id.clone(), view.clone());
                    changes.push(Change::Lock(view));
                }
                Change::Removed(id) => {
                    if locks.remove(&id).is_some() {
                        changes.push(Change::Removed(id));
                    }
                }
                Change::Source(_) => {}
            }
        }
        for source in &mut self.sources {
            for view in source.flush(&|id| locks.contains_key(id)) {
                locks.insert(view.id.clone(), view.clone());
                changes.push(Change::Lock(view));
            }
        }
        for (backend, index) in std::mem::take(&mut self.dirty_sources) {
            let view = match backend {
                Backend::Zookeeper => self.sources[index].view(),
                Backend::Redis => self.redis[index].view.clone(),
                Backend::Etcd => self.etcd[index].view.clone(),
                Backend::Mysql | Backend::Postgres => self.databases[index].view.clone(),
            };
            changes.push(Change::Source(view));
        }
        if changes.is_empty() {
            return;
        }
        self.version += 1;
        let snapshot = Arc::new(Snapshot {
            version: self.version,
            sources: self
                .sources
                .iter()
                .map(|s| s.view.clone())
                .chain(self.redis.iter().map(|s| s.view.clone()))
                .chain(self.etcd.iter().map(|s| s.view.clone()))
                .chain(self.databases.iter().map(|s| s.view.clone()))
                .collect(),
            locks,
        });
        self.snapshot = snapshot.clone();
        self.snapshot_tx.send_replace(snapshot);
        for change in changes {
            // No subscribers is fine: the snapshot carries the state.
            let _ = self.delta_tx.send(Arc::new(Delta {
                version: self.version,
                change,
            }));
        }
    }

    /// The history of lock `id` in whichever source keeps it, current or gone.
    fn history_of(&self, id: &str) -> Option<&History> {
        let zk = self.sources.iter().find_map(|s| s.history_of(id));
        zk.or_else(|| self.redis.iter().find_map(|s| s.history_of(id)))
            .or_else(|| self.etcd.iter().find_map(|s| s.ledger.history_of(id)))
            .or_else(|| self.databases.iter().find_map(|s| s.ledger.history_of(id)))
    }

    /// A lock no longer in the snapshot: its last view and events, from the graveyard.
    fn gone_detail(&self, id: &str) -> Option<LockDetail> {
        let history = self.history_of(id)?;
        let last = history.last.as_ref()?;
        Some(LockDetail {
            lock: (**last).clone(),
            events: history.sorted_events(),
            gone: true,
        })
    }

    fn answer(&mut self, command: Command) {
        match command {
            Command::LockDetail { id, reply } => {
                let detail = self.snapshot.locks.get(&id).map(|lock| LockDetail {
                    lock: (**lock).clone(),
                    events: self
                        .history_of(&lock.id)
                        .map(History::sorted_events)
                        .unwrap_or_default(),
                    gone: false,
                });
                let _ = reply.send(detail.or_else(|| self.gone_detail(&id)));
            }
            Command::Sessions { reply } => {
                let _ = reply.send(self.sessions());
            }
            Command::Metrics { reply } => {
                let _ = reply.send(self.metrics_input());
            }
            Command::MarkForced {
                id,
                holder,
                until_ms,
                reply,
            } => {
                let now = crate::now_ms();
                // Marks whose holder was never seen going (the removal was missed) expire.
                self.forced.retain(|_, mark| mark.until_ms >= now);
                let mark = self.forced.entry((id, holder)).or_default();
                mark.pending += 1;
                mark.until_ms = mark.until_ms.max(until_ms);
                let _ = reply.send(());
            }
            Command::SettleForced {
                id,
                holder,
                released,
                reply,
            } => {
                let key = (id, holder);
                // No mark: the holder's going was booked `forced` already.
                if let Some(mark) = self.forced.get_mut(&key) {
                    mark.pending = mark.pending.saturating_sub(1);
                    if released {
                        mark.released = true;
                        mark.until_ms = crate::now_ms() + FORCED_MARK_TTL.as_millis() as i64;
                    }
                    if !mark.released && mark.pending == 0 {
                        self.forced.remove(&key);
                    }
                }
                let _ = reply.send(());
            }
            Command::RedisMembers { source, reply } => {
                let members = self
                    .redis
                    .iter()
                    .find(|r| r.view.name == source)
                    .map(|r| r.members.clone());
                let _ = reply.send(members);
            }
        }
    }

    fn sessions(&self) -> Vec<SessionView> {
        let mut out = Vec::new();
        for source in &self.sources {
            out.extend(source.sessions());
        }
        for source in &self.redis {
            out.extend(source.sessions());
        }
        for source in &self.etcd {
            out.extend(source.sessions());
        }
        for source in &self.databases {
            out.extend(source.sessions());
        }
        out
    }

    fn metrics_input(&self) -> MetricsInput {
        let mut input = MetricsInput::default();
        for source in &self.sources {
            input.sources.push(source.metrics());
        }
        for source in &self.redis {
            input.sources.push(ledger_metrics(
                &source.view,
                &source.ledger,
                0,
                source.recipes(),
            ));
            input
                .corrections
                .push((source.spec.name.clone(), source.corrections));
        }
        for source in &self.etcd {
            input.sources.push(ledger_metrics(
                &source.view,
                &source.ledger,
                source.resyncs(),
                source.recipes(),
            ));
        }
        for source in &self.databases {
            input.sources.push(ledger_metrics(
                &source.view,
                &source.ledger,
                0,
                source.recipes(),
            ));
            input.databases.push(crate::metrics::DatabaseMetrics {
                name: source.name().to_string(),
                backend: source.flavor.backend(),
                rounds: source.rounds(),
                queries: source.queries,
                failed_rounds: source.failed_rounds,
            });
        }
        input.max_labels = self.max_labels;
        input
    }
}

/// The metrics of a source whose locks are in a [`ledger::Ledger`].
fn ledger_metrics(
    view: &SourceView,
    ledger: &ledger::Ledger,
    resyncs: u64,
    recipes: BTreeMap<&'static str, u64>,
) -> crate::metrics::SourceMetrics {
    let mut gauges: BTreeMap<Arc<str>, Vec<Arc<LockView>>> = BTreeMap::new();
    for lock in ledger.locks.values() {
        gauges
            .entry(ledger.counters.existing_label(&lock.path))
            .or_default()
            .push(lock.view.clone());
    }
    crate::metrics::SourceMetrics {
        name: view.name.clone(),
        up: view.up,
        synced: view.synced,
        nodes: view.nodes as u64,
        resyncs,
        recipes,
        locks: gauges,
        counters: ledger.counters.clone(),
        bootstrap: None,
    }
}

/// What a backend's state needs from the aggregator to book changes in the ledger.
pub struct LedgerContext<'a> {
    pub now: i64,
    /// Holders being force-released (their release is `forced`), each with the epoch ms its
    /// mark expires at.
    pub forced: &'a mut ForcedMarks,
    pub store: &'a Option<crate::audit::Store>,
    /// Lock views and removals to publish, in order.
    pub lock_ops: &'a mut Vec<Change>,
    /// The source's own view changed.
    pub source_changed: bool,
}

impl<'a> LedgerContext<'a> {
    /// A context for changes made now.
    pub fn new(
        forced: &'a mut ForcedMarks,
        store: &'a Option<crate::audit::Store>,
        lock_ops: &'a mut Vec<Change>,
    ) -> Self {
        LedgerContext {
            now: now_ms(),
            forced,
            store,
            lock_ops,
            source_changed: false,
        }
    }

    /// What the ledger needs to book a change now.
    pub fn booking(&mut self) -> ledger::Booking<'_> {
        ledger::Booking {
            now: self.now,
            forced: self.forced,
            store: self.store,
            left: None,
        }
    }
}

/// Applies `update` to `states[source]`: `None` when there is no such source, else whether
/// the source's own view changed.
fn apply_to<S, U>(
    states: &mut [S],
    source: usize,
    update: U,
    cx: &mut LedgerContext<'_>,
    apply: fn(&mut S, U, &mut LedgerContext<'_>),
) -> Option<bool> {
    let state = states.get_mut(source)?;
    cx.source_changed = false;
    apply(state, update, cx);
    Some(cx.source_changed)
}

/// How long after a force release's outcome its holder's going is still booked `forced`: the
/// slowest source sees the removal at its next poll or notification, well within this.
pub const FORCED_MARK_TTL: std::time::Duration = std::time::Duration::from_secs(120);

/// A holder being force-released: its going is booked `forced` until `until_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForcedMark {
    pub until_ms: i64,
    /// Attempts on this holder still running.
    pub pending: u32,
    /// An attempt released it (the removal may not have been seen yet).
    pub released: bool,
}

/// Force-release marks by (lock id, holder).
pub type ForcedMarks = HashMap<(String, String), ForcedMark>;

/// `forced` when an operator's force release of `holder` of lock `id` was announced and its
/// mark has not expired (the mark is used up either way), else `otherwise`.
pub(crate) fn forced_or(
    forced: &mut ForcedMarks,
    id: &str,
    holder: &str,
    otherwise: ReleaseCause,
) -> ReleaseCause {
    match forced.remove(&(id.to_string(), holder.to_string())) {
        Some(mark) if mark.until_ms >= now_ms() => ReleaseCause::Forced,
        _ => otherwise,
    }
}

/// The median of the lock's recent completed holds ([`lockscope_model::rules::usual_hold`]).
pub(crate) fn usual_hold_of(history: &History) -> Option<i64> {
    let holds: Vec<i64> = history
        .events
        .iter()
        .filter(|e| e.kind == "released")
        .filter_map(|e| e.duration_ms)
        .collect();
    lockscope_model::rules::usual_hold(&holds)
}

/// Keeps `event` in the lock's in-memory history and, with a store, in the persistent one.
pub(crate) fn push_event(
    store: &Option<crate::audit::Store>,
    id: &str,
    events: &mut VecDeque<LockEvent>,
    event: LockEvent,
) {
    if let Some(store) = store {
        store.record(vec![(id.to_string(), event.clone())]);
    }
    if events.len() >= EVENTS_PER_LOCK {
        events.pop_front();
    }
    events.push_back(event);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forced_mark_counts_until_it_expires_and_is_used_once() {
        let mut forced = ForcedMarks::new();
        let key = |h: &str| ("r~l".to_string(), h.to_string());
        let mark = |until_ms| ForcedMark {
            until_ms,
            pending: 1,
            released: false,
        };
        forced.insert(key("live"), mark(now_ms() + 60_000));
        forced.insert(key("stale"), mark(now_ms() - 1));
        let other = ReleaseCause::TtlExpired;
        assert_eq!(
            forced_or(&mut forced, "r~l", "live", other),
            ReleaseCause::Forced
        );
        // Used up: the same holder's next going is its own.
        assert_eq!(forced_or(&mut forced, "r~l", "live", other), other);
        // An expired mark (a release whose removal was never seen) books the real cause.
        assert_eq!(forced_or(&mut forced, "r~l", "stale", other), other);
        assert!(forced.is_empty());
    }
}
