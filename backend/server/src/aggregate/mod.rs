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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::id::lock_id;
use lockscope_model::session_hex;
use lockscope_model::wire::{
    Backend, HolderView, LockDetail, LockEvent, LockView, ReleaseCause, SessionView, SourceView,
    WaiterView,
};
use lockscope_model::zk::{
    containers_for_change_in, decode_container, DecodedLock, Participant, Recipe, ZkTree,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::backends::etcd::state::EtcdSourceState;
use crate::backends::redis::state::RedisSourceState;
use crate::backends::zookeeper::EnsembleReport;
use crate::collect::{SentCounter, SourceStats, SourceUpdate, ZkUpdate as Update};
use crate::config::{Config, ZkSourceConfig};
use crate::metrics::{LockCounters, MetricsInput};
use crate::now_ms;

pub mod ledger;

/// Updates queued from the collectors to the aggregator at most; a collector waits when it is
/// full (and a Redis or etcd server then waits for it).
pub const UPDATE_QUEUE: usize = 8192;

/// Events kept per lock for `/api/v1/locks/{id}`.
const EVENTS_PER_LOCK: usize = 100;
/// Histories of vanished locks kept so a lock that comes back keeps its timeline.
pub(crate) const HISTORY_LIMIT: usize = 10_000;
/// Rounds (asked after a removal) a release's cause may wait for unambiguous evidence; at the
/// last one the round's word decides as it stands (see [`Aggregator::ensemble`]).
const CAUSE_POLLS: u32 = 4;
/// How much later than the member a client is connected to another member may apply a node's
/// removal: only rounds started this long after the removal (and after the last removal of the
/// session's nodes lockscope heard) judge its cause, and a session seen gone from every member
/// at least this long before its nodes started to go had expired rather than closed.
const REPLICATION_MARGIN_MS: i64 = 200;
/// Without any ensemble round to judge by (the poller stalled), a release is booked `released`
/// after this long, or after `CAUSE_POLLS + 2` of the current gaps between rounds if longer.
const CAUSE_WAIT_MS: i64 = 60_000;

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
    /// that holder goes, its cause is `forced`. Answered once recorded.
    MarkForced {
        id: String,
        holder: String,
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

/// A release waiting for the ensemble to say whether its session is still alive.
#[derive(Debug)]
struct PendingRelease {
    lock_path: String,
    node: String,
    session: i64,
    at_ms: i64,
    /// Where the node's removal stands among the source's node changes (see `SourceState::seq`).
    seq: u64,
    /// When the run of removals of the session's nodes that this one belongs to began (a close
    /// removes them all in one transaction, which lockscope's member may apply for a while).
    nodes_from_ms: i64,
    held_ms: i64,
    /// Connected at the last poll before the release.
    was_connected: bool,
    /// Rounds asked after the removal.
    polls: u32,
    /// Rounds without the leader's word that showed the session connected to a member.
    connected_rounds: u32,
}

/// Removals of one session's nodes lockscope heard, each less than the session's expiry margin
/// (a quarter of its timeout, at least [`REPLICATION_MARGIN_MS`]) after the one before: an
/// expiry's removals come at least a whole timeout after the session's last request, so they
/// never join a run of its own deletes.
#[derive(Debug, Clone, Copy)]
struct RemovalRun {
    first_ms: i64,
    last_ms: i64,
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
    fn sorted_events(&self) -> Vec<LockEvent> {
        let mut events: Vec<LockEvent> = self.events.iter().cloned().collect();
        events.sort_by_key(|e| e.at_ms);
        events
    }

    /// Moves into a graveyard: remembers the lock as it is once gone.
    fn buried(mut self, view: &LockView, now: i64) -> History {
        let mut last = view.clone().gone(now);
        last.acquisitions = self.acquisitions;
        last.releases = self.releases;
        self.last = Some(Arc::new(last));
        self
    }
}

#[derive(Debug)]
struct LockState {
    id: String,
    container: String,
    recipe: Recipe,
    max_leases: Option<u32>,
    holders: Vec<Participant>,
    waiters: Vec<Participant>,
    holder_since: HashMap<String, i64>,
    changed_ms: i64,
    history: History,
    view: Arc<LockView>,
}

struct SourceState {
    config: Arc<ZkSourceConfig>,
    view: SourceView,
    tree: ZkTree,
    locks: BTreeMap<String, LockState>,
    by_container: HashMap<String, BTreeSet<String>>,
    graveyard: HashMap<String, History>,
    ensemble: Option<EnsembleReport>,
    /// Sessions a member watches the parent of with a child watch (attributed, see below).
    child_watching: HashSet<i64>,
    /// Session → when it was first seen not connected to any member.
    absent_since: HashMap<i64, i64>,
    /// Session → when the leader's tracker was first seen without it (the round's start).
    left_leader: HashMap<i64, i64>,
    /// Node → when the collector heard of its removal and its `seq`, until its container is
    /// re-decoded.
    removed_at: HashMap<String, (i64, u64)>,
    /// Counts node creations and removals in the order the collector heard them.
    seq: u64,
    /// Session → the latest run of removals of its nodes.
    removal_runs: HashMap<i64, RemovalRun>,
    /// Session → `seq` of the last node it created.
    created_seq: HashMap<i64, u64>,
    /// When the last ensemble round arrived, and the gap before it.
    last_round_ms: Option<i64>,
    round_gap_ms: i64,
    timeouts: HashMap<i64, u64>,
    expired_counted: HashSet<i64>,
    pending: Vec<PendingRelease>,
    counters: LockCounters,
    resyncs: u64,
    /// What the last full read could not read (ACLs), shown with any connection error.
    unreadable: Option<String>,
}

pub struct Aggregator {
    sources: Vec<SourceState>,
    /// Redis sources.
    redis: Vec<RedisSourceState>,
    /// etcd sources (`backends/etcd/state.rs`).
    etcd: Vec<EtcdSourceState>,
    dirty_etcd_sources: BTreeSet<usize>,
    /// Updates applied and published so far (read by [`Handle::settled`]).
    applied: u64,
    applied_tx: watch::Sender<u64>,
    dirty_redis_sources: BTreeSet<usize>,
    max_labels: usize,
    version: u64,
    snapshot: Arc<Snapshot>,
    snapshot_tx: watch::Sender<Arc<Snapshot>>,
    delta_tx: broadcast::Sender<Arc<Delta>>,
    dirty_locks: BTreeSet<(usize, String)>,
    /// Lock views replaced and locks removed since the last publish, in the order they
    /// happened: a lock removed and back in one burst (a key deleted and set again) must end
    /// up present, one changed and then removed must end up gone.
    lock_ops: Vec<Change>,
    dirty_sources: BTreeSet<usize>,
    /// Containers with many children, re-decoded once per burst instead of once per change.
    deferred: BTreeSet<(usize, String)>,
    /// Where lock events are also written (the lock history), when a store is configured.
    store: Option<crate::audit::Store>,
    /// Holders being force-released: (lock id, holder) → when marked.
    forced: HashMap<(String, String), i64>,
}

/// Containers with more children than this are re-decoded once per burst of updates.
const DEFER_CHILDREN: usize = 256;

impl Aggregator {
    /// Builds the aggregator for `config` and the handle to read it.
    pub fn new(config: &Config) -> (Aggregator, Handle, mpsc::Receiver<Command>) {
        let sources: Vec<SourceState> = config
            .zookeeper
            .iter()
            .map(|zk| SourceState {
                config: Arc::new(zk.clone()),
                view: SourceView::connecting(&zk.name, Backend::Zookeeper),
                tree: ZkTree::new(),
                locks: BTreeMap::new(),
                by_container: HashMap::new(),
                graveyard: HashMap::new(),
                ensemble: None,
                child_watching: HashSet::new(),
                absent_since: HashMap::new(),
                left_leader: HashMap::new(),
                removed_at: HashMap::new(),
                seq: 0,
                removal_runs: HashMap::new(),
                created_seq: HashMap::new(),
                last_round_ms: None,
                round_gap_ms: 0,
                timeouts: HashMap::new(),
                expired_counted: HashSet::new(),
                pending: Vec::new(),
                counters: LockCounters::new(config.metrics.max_lock_labels),
                resyncs: 0,
                unreadable: None,
            })
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
        let snapshot = Arc::new(Snapshot {
            version: 0,
            sources: sources
                .iter()
                .map(|s| s.view.clone())
                .chain(redis.iter().map(|s| s.view.clone()))
                .chain(etcd.iter().map(|s| s.view.clone()))
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
            dirty_etcd_sources: BTreeSet::new(),
            applied: 0,
            applied_tx,
            dirty_redis_sources: BTreeSet::new(),
            max_labels: config.metrics.max_lock_labels,
            version: 0,
            snapshot,
            snapshot_tx,
            delta_tx,
            dirty_locks: BTreeSet::new(),
            lock_ops: Vec::new(),
            dirty_sources: BTreeSet::new(),
            deferred: BTreeSet::new(),
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
                        self.recompute_deferred();
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

    fn apply(&mut self, update: SourceUpdate) {
        match update {
            SourceUpdate::Zookeeper { source, update } => self.zk_apply(source, update),
            SourceUpdate::Redis { source, update } => {
                let Some(state) = self.redis.get_mut(source) else {
                    tracing::error!(source, "update for a Redis source that is not configured");
                    return;
                };
                let mut cx = LedgerContext {
                    now: now_ms(),
                    forced: &mut self.forced,
                    store: &self.store,
                    lock_ops: &mut self.lock_ops,
                    source_changed: false,
                };
                state.apply(update, &mut cx);
                if cx.source_changed {
                    self.dirty_redis_sources.insert(source);
                }
            }
            SourceUpdate::Etcd { source, update } => {
                let Some(state) = self.etcd.get_mut(source) else {
                    tracing::error!(source, "update for an etcd source that is not configured");
                    return;
                };
                let mut cx = LedgerContext {
                    now: now_ms(),
                    forced: &mut self.forced,
                    store: &self.store,
                    lock_ops: &mut self.lock_ops,
                    source_changed: false,
                };
                state.apply(update, &mut cx);
                if cx.source_changed {
                    self.dirty_etcd_sources.insert(source);
                }
            }
        }
    }

    fn zk_apply(&mut self, index: usize, update: Update) {
        if index >= self.sources.len() {
            tracing::error!(
                index,
                "update for a ZooKeeper source that is not configured"
            );
            return;
        }
        let now = now_ms();
        match update {
            Update::Status { up, error } => {
                let source = &mut self.sources[index];
                let error = match (error, &source.unreadable) {
                    (Some(e), Some(u)) => Some(format!("{e}; {u}")),
                    (e, u) => e.or_else(|| u.clone()),
                };
                let view = &mut source.view;
                if view.up != up || view.error != error {
                    view.up = up;
                    view.error = error;
                    self.dirty_sources.insert(index);
                }
            }
            Update::Resync { nodes, unreadable } => {
                self.resync(index, nodes, now);
                let source = &mut self.sources[index];
                source.resyncs += 1;
                source.view.synced = true;
                source.view.last_sync_ms = Some(now);
                source.unreadable = (!unreadable.is_empty()).then(|| {
                    format!(
                        "{} node(s) not readable (ACL), e.g. {}",
                        unreadable.len(),
                        unreadable[0]
                    )
                });
                source.view.error = source.unreadable.clone();
                self.dirty_sources.insert(index);
            }
            Update::Upsert { path, meta } => {
                let source = &mut self.sources[index];
                let created = source.tree.upsert(&path, meta);
                if created {
                    if meta.ephemeral_owner != 0 {
                        // Proof the session was alive after every removal heard before this.
                        source.seq += 1;
                        source.created_seq.insert(meta.ephemeral_owner, source.seq);
                    }
                    self.touch(index, &path, now);
                }
            }
            Update::Removed { path, at_ms } => {
                let source = &mut self.sources[index];
                if let Some(meta) = source.tree.remove(&path) {
                    let at_ms = at_ms.min(now);
                    source.seq += 1;
                    source.removed_at.insert(path.clone(), (at_ms, source.seq));
                    let owner = meta.ephemeral_owner;
                    if owner != 0 {
                        let gap = expiry_margin(source.timeouts.get(&owner));
                        let run = source.removal_runs.entry(owner).or_insert(RemovalRun {
                            first_ms: at_ms,
                            last_ms: at_ms,
                        });
                        if at_ms - run.last_ms > gap {
                            run.first_ms = at_ms;
                        }
                        run.last_ms = run.last_ms.max(at_ms);
                    }
                    if !self.touch(index, &path, now) {
                        self.sources[index].removed_at.remove(&path);
                    }
                }
            }
            Update::Ensemble(report) => self.ensemble(index, report, now),
        }
    }

    /// Re-decodes what a change at `path` may affect: now, or at the end of the burst for
    /// containers so large that decoding them per change would cost O(children²) in a burst.
    /// Answers whether any of it was deferred.
    fn touch(&mut self, index: usize, path: &str, now: i64) -> bool {
        let mut immediate = Vec::new();
        let mut deferred = false;
        for container in containers_for_change_in(&self.sources[index].tree, path) {
            if self.sources[index].tree.child_count(&container) > DEFER_CHILDREN {
                self.deferred.insert((index, container));
                deferred = true;
            } else {
                immediate.push(container);
            }
        }
        self.recompute(index, &immediate, false, now);
        deferred
    }

    fn recompute_deferred(&mut self) {
        let now = now_ms();
        for (index, container) in std::mem::take(&mut self.deferred) {
            self.recompute(index, &[container], false, now);
        }
        for source in &mut self.sources {
            source.removed_at.clear();
        }
    }

    /// Replaces the mirror with a full read and re-decodes every container whose nodes differ.
    fn resync(
        &mut self,
        index: usize,
        nodes: Vec<(String, lockscope_model::zk::NodeMeta)>,
        now: i64,
    ) {
        let source = &mut self.sources[index];
        let first = !source.view.synced;
        let mut fresh = ZkTree::new();
        for (path, meta) in &nodes {
            fresh.upsert(path, *meta);
        }
        let mut touched: BTreeSet<String> = BTreeSet::new();
        for (path, meta) in fresh.iter() {
            if source.tree.get(path) != Some(meta) {
                touched.extend(containers_for_change_in(&fresh, path));
            }
        }
        for (path, _) in source.tree.iter() {
            if !fresh.contains(path) {
                touched.extend(containers_for_change_in(&fresh, path));
            }
        }
        // Known locks are re-checked too: a container that vanished must drop its locks.
        touched.extend(source.by_container.keys().cloned());
        source.tree = fresh;
        source.view.nodes = source.tree.len();
        let touched: Vec<String> = touched.into_iter().collect();
        self.recompute(index, &touched, first, now);
    }

    /// Re-decodes `containers` and records what changed.
    fn recompute(&mut self, index: usize, containers: &[String], bootstrap: bool, now: i64) {
        for container in containers {
            let source = &mut self.sources[index];
            let limits = |path: &str| source.config.max_leases.get(path).copied();
            let decoded = decode_container(&source.tree, container, &limits);
            let previous = source.by_container.remove(container).unwrap_or_default();
            let mut current = BTreeSet::new();
            for lock in decoded {
                current.insert(lock.path.clone());
                self.update_lock(index, lock, bootstrap, now);
            }
            let source = &self.sources[index];
            // A lock with no participants stays listed (free) while its container exists.
            let container_exists = source.tree.contains(container)
                && !lockscope_model::zk::is_internal(&source.tree, container);
            let gone: Vec<(String, Recipe, Option<u32>)> = previous
                .difference(&current)
                .filter_map(|path| {
                    let state = source.locks.get(path)?;
                    Some((path.clone(), state.recipe, state.max_leases))
                })
                .collect();
            for (path, recipe, max_leases) in gone {
                let empty = DecodedLock {
                    path: path.clone(),
                    container: container.clone(),
                    recipe,
                    holders: Vec::new(),
                    waiters: Vec::new(),
                    max_leases,
                };
                self.update_lock(index, empty, false, now);
                if container_exists && recipe != Recipe::Exclusive {
                    current.insert(path);
                } else {
                    self.remove_lock(index, &path);
                }
            }
            if !current.is_empty() {
                self.sources[index]
                    .by_container
                    .insert(container.clone(), current);
            }
        }
    }

    fn remove_lock(&mut self, index: usize, path: &str) {
        let source = &mut self.sources[index];
        if let Some(state) = source.locks.remove(path) {
            if source.graveyard.len() >= HISTORY_LIMIT {
                source.graveyard.clear();
            }
            source.graveyard.insert(
                path.to_string(),
                state.history.buried(&state.view, now_ms()),
            );
            self.dirty_locks.remove(&(index, path.to_string()));
            self.lock_ops.push(Change::Removed(state.id));
            self.dirty_sources.insert(index);
        }
    }

    fn update_lock(&mut self, index: usize, decoded: DecodedLock, bootstrap: bool, now: i64) {
        let store = self.store.clone();
        let source = &mut self.sources[index];
        let connected: HashSet<i64> = source
            .ensemble
            .as_ref()
            .map(|r| r.connections.keys().copied().collect())
            .unwrap_or_default();
        let is_new = !source.locks.contains_key(&decoded.path);
        if is_new {
            source.counters.label_for(&decoded.path);
            let mut history = source.graveyard.remove(&decoded.path).unwrap_or_default();
            history.last = None;
            let id = lock_id(&source.config.name, &decoded.path);
            source.locks.insert(
                decoded.path.clone(),
                LockState {
                    view: Arc::new(empty_view(&id, &source.config.name, &decoded)),
                    id,
                    container: decoded.container.clone(),
                    recipe: decoded.recipe,
                    max_leases: decoded.max_leases,
                    holders: Vec::new(),
                    waiters: Vec::new(),
                    holder_since: HashMap::new(),
                    changed_ms: now,
                    history,
                },
            );
            self.dirty_sources.insert(index);
        }
        let quiet = is_new && bootstrap;
        let tree = &source.tree;
        let Some(state) = source.locks.get_mut(&decoded.path) else {
            return;
        };
        let old_holders: HashSet<&str> = state.holders.iter().map(|p| p.node.as_str()).collect();
        let old_waiters: HashSet<&str> = state.waiters.iter().map(|p| p.node.as_str()).collect();
        let new_holders: HashSet<&str> = decoded.holders.iter().map(|p| p.node.as_str()).collect();
        let new_waiters: HashSet<&str> = decoded.waiters.iter().map(|p| p.node.as_str()).collect();
        let mut events = Vec::new();
        let mut acquired = Vec::new();
        let mut since = HashMap::new();
        for holder in &decoded.holders {
            let start = match state.holder_since.get(&holder.node) {
                Some(start) => *start,
                None if old_waiters.contains(holder.node.as_str()) => now,
                None => holder.ctime_ms.min(now),
            };
            since.insert(holder.node.clone(), start);
            if !old_holders.contains(holder.node.as_str()) && !quiet {
                // A kazoo Semaphore queues one node and holds another: the wait began when the
                // same session's queue node was created.
                let queued_at = state
                    .waiters
                    .iter()
                    .find(|w| w.session == holder.session && w.session != 0)
                    .map_or(holder.ctime_ms, |w| w.ctime_ms.min(holder.ctime_ms));
                let waited = (start - queued_at).max(0);
                acquired.push(waited);
                events.push(LockEvent {
                    at_ms: start,
                    kind: lockscope_model::wire::EventKind::Acquired,
                    node: holder.node.clone(),
                    session: session_hex(holder.session),
                    cause: None,
                    duration_ms: Some(waited),
                });
            }
        }
        let mut released = Vec::new();
        for holder in &state.holders {
            if new_holders.contains(holder.node.as_str()) || tree.contains(&holder.node) {
                continue;
            }
            // Gone in a resync: heard now, after every change so far.
            let (gone, seq) = source
                .removed_at
                .get(&holder.node)
                .copied()
                .unwrap_or((now, source.seq));
            let start = state
                .holder_since
                .get(&holder.node)
                .copied()
                .unwrap_or(gone);
            let nodes_from_ms = source
                .removal_runs
                .get(&holder.session)
                .filter(|run| run.last_ms >= gone)
                .map_or(gone, |run| run.first_ms.min(gone));
            released.push(PendingRelease {
                lock_path: decoded.path.clone(),
                node: holder.node.clone(),
                session: holder.session,
                at_ms: gone,
                seq,
                nodes_from_ms,
                held_ms: (gone - start).max(0),
                was_connected: connected.contains(&holder.session),
                polls: 0,
                connected_rounds: 0,
            });
        }
        if !quiet {
            for waiter in &decoded.waiters {
                if !old_waiters.contains(waiter.node.as_str())
                    && !old_holders.contains(waiter.node.as_str())
                {
                    events.push(LockEvent {
                        at_ms: waiter.ctime_ms.min(now),
                        kind: lockscope_model::wire::EventKind::Queued,
                        node: waiter.node.clone(),
                        session: session_hex(waiter.session),
                        cause: None,
                        duration_ms: None,
                    });
                }
            }
            for waiter in &state.waiters {
                let now_holds = decoded
                    .holders
                    .iter()
                    .any(|h| h.session == waiter.session && waiter.session != 0);
                if !new_waiters.contains(waiter.node.as_str())
                    && !new_holders.contains(waiter.node.as_str())
                    && !tree.contains(&waiter.node)
                    && !now_holds
                {
                    events.push(LockEvent {
                        at_ms: now,
                        kind: lockscope_model::wire::EventKind::LeftQueue,
                        node: waiter.node.clone(),
                        session: session_hex(waiter.session),
                        cause: None,
                        duration_ms: Some((now - waiter.ctime_ms).max(0)),
                    });
                }
            }
        }
        let changed = state.holders != decoded.holders
            || state.waiters != decoded.waiters
            || state.recipe != decoded.recipe
            || state.max_leases != decoded.max_leases;
        state.holders = decoded.holders;
        state.waiters = decoded.waiters;
        state.recipe = decoded.recipe;
        state.max_leases = decoded.max_leases;
        state.container = decoded.container;
        state.holder_since = since;
        if changed {
            state.changed_ms = now;
        }
        state.history.acquisitions += acquired.len() as u64;
        for event in events {
            push_event(&store, &state.id, &mut state.history.events, event);
        }
        let label_path = decoded.path.clone();
        for waited in acquired {
            source.counters.acquired(&label_path, waited);
        }
        source.pending.extend(released);
        if changed || is_new {
            self.dirty_locks.insert((index, label_path));
        }
    }

    fn ensemble(&mut self, index: usize, report: EnsembleReport, now: i64) {
        let source = &mut self.sources[index];
        if let Some(last) = source.last_round_ms {
            source.round_gap_ms = (now - last).max(0);
        }
        source.last_round_ms = Some(now);
        if report.members_answering == 0 {
            // Nothing known about sessions this round; keep the previous picture. The round
            // still counts towards how long a release waits for its cause: with no word at
            // all, it is a plain `released`.
            let mut silent = Vec::new();
            for mut p in std::mem::take(&mut source.pending) {
                if report.started_ms >= p.at_ms + REPLICATION_MARGIN_MS {
                    p.polls += 1;
                }
                if p.polls >= CAUSE_POLLS || source.created_after(&p) {
                    silent.push(p);
                } else {
                    source.pending.push(p);
                }
            }
            for release in silent {
                self.record_release(index, &release, ReleaseCause::Released);
            }
            return;
        }
        for (session, (_, timeout)) in &report.connections {
            if let Some(timeout) = timeout {
                source.timeouts.insert(*session, *timeout);
            }
            source.absent_since.remove(session);
        }
        // Sessions that own nodes (or just lost them) but are connected nowhere are on their
        // way to expiry, or already gone.
        let mut owners: BTreeSet<i64> = source
            .locks
            .values()
            .flat_map(|l| l.holders.iter().chain(l.waiters.iter()))
            .map(|p| p.session)
            .collect();
        owners.extend(source.pending.iter().map(|p| p.session));
        let full_round = report.members_answering == report.members;
        if full_round {
            // The end of the round: every member had answered by then.
            let seen_absent = report.at_ms.min(now);
            for owner in &owners {
                if !report.connections.contains_key(owner) {
                    source.absent_since.entry(*owner).or_insert(seen_absent);
                }
            }
        }
        if let Some(live) = &report.live_sessions {
            // The start of the round: the leader's answer came after it.
            let seen_left = report.started_ms.min(now);
            for owner in &owners {
                if live.contains_key(owner) {
                    source.left_leader.remove(owner);
                } else {
                    source.left_leader.entry(*owner).or_insert(seen_left);
                }
            }
        }

        // Resolve release causes (the release-cause invariant in ARCHITECTURE.md): alive after
        // the removal → released; otherwise the session ended, and `expired` tells how.
        let mut resolved = Vec::new();
        for mut p in std::mem::take(&mut source.pending) {
            if source.created_after(&p) {
                resolved.push((p, ReleaseCause::Released));
                continue;
            }
            // Only a round asked after the removal reached every member says anything about
            // the session after it.
            if report.started_ms < p.at_ms + REPLICATION_MARGIN_MS {
                source.pending.push(p);
                continue;
            }
            p.polls += 1;
            // A close removes all the session's nodes in one transaction, which lockscope's
            // member may still be applying well after this node went (seen: 10,000 removals
            // over half a second): only a round asked once their removals stopped arriving
            // comes after that member, and so (by the round's `srvr` cut) the leader, applied
            // the whole close.
            let last_removal = source
                .removal_runs
                .get(&p.session)
                .map_or(p.at_ms, |run| run.last_ms.max(p.at_ms));
            let word = RoundWord {
                settled: report.started_ms >= last_removal + REPLICATION_MARGIN_MS,
                last_chance: p.polls >= CAUSE_POLLS,
                leader: report
                    .live_sessions
                    .as_ref()
                    .map(|live| live.contains_key(&p.session)),
                connected: report.connections.contains_key(&p.session),
                full_round,
            };
            let cause = match word.session_alive(&mut p) {
                None => {
                    source.pending.push(p);
                    continue;
                }
                Some(true) => ReleaseCause::Released,
                Some(false) if expired(&p, source) => ReleaseCause::SessionExpired,
                Some(false) => ReleaseCause::SessionClosed,
            };
            tracing::debug!(
                node = %p.node,
                session = %session_hex(p.session),
                ?cause,
                polls = p.polls,
                settled = word.settled,
                leader = ?word.leader,
                connected = word.connected,
                absent_before_nodes_ms = ?source.absent_since.get(&p.session).map(|s| p.nodes_from_ms - s),
                absent_before_leader_ms = ?source.absent_since.get(&p.session).zip(source.left_leader.get(&p.session)).map(|(s, l)| l - s),
                "release cause"
            );
            resolved.push((p, cause));
        }
        // Forget sessions that neither own nodes nor wait for a cause any more.
        let owners: BTreeSet<i64> = source
            .locks
            .values()
            .flat_map(|l| l.holders.iter().chain(l.waiters.iter()))
            .map(|p| p.session)
            .chain(source.pending.iter().map(|p| p.session))
            .collect();
        source.absent_since.retain(|s, _| owners.contains(s));
        source.left_leader.retain(|s, _| owners.contains(s));
        source.removal_runs.retain(|s, _| owners.contains(s));
        source.created_seq.retain(|s, _| owners.contains(s));
        source
            .timeouts
            .retain(|s, _| owners.contains(s) || report.connections.contains_key(s));
        source.ensemble = Some(report);
        for (release, cause) in resolved {
            self.record_release(index, &release, cause);
        }
        self.attribute_child_watches(index);
        // Watch fan-out may have changed for any lock.
        let source = &self.sources[index];
        let paths: Vec<String> = source.locks.keys().cloned().collect();
        for path in paths {
            self.dirty_locks.insert((index, path));
        }
    }

    fn record_release(&mut self, index: usize, release: &PendingRelease, cause: ReleaseCause) {
        let path = release.lock_path.as_str();
        let (session, held) = (release.session, release.held_ms);
        let store = self.store.clone();
        let source = &mut self.sources[index];
        let id = lockscope_model::id::lock_id(&source.view.name, path);
        let cause = forced_or(&mut self.forced, &id, &release.node, cause);
        source.counters.released(path, cause, held);
        if cause == ReleaseCause::SessionExpired && source.expired_counted.insert(session) {
            source.counters.session_expired();
            if source.expired_counted.len() > HISTORY_LIMIT {
                source.expired_counted.clear();
            }
        }
        let event = LockEvent {
            at_ms: release.at_ms,
            kind: lockscope_model::wire::EventKind::Released,
            node: release.node.clone(),
            session: session_hex(session),
            cause: Some(cause),
            duration_ms: Some(held),
        };
        let history = match source.locks.get_mut(path) {
            Some(state) => {
                self.dirty_locks.insert((index, path.to_string()));
                &mut state.history
            }
            None => source.graveyard.entry(path.to_string()).or_default(),
        };
        history.releases += 1;
        push_event(&store, &id, &mut history.events, event);
    }

    /// Gives the child watches members hold (unnamed by `wchp`) to the waiters that watch
    /// nothing by name: on each member, up to its count of them, in queue order.
    fn attribute_child_watches(&mut self, index: usize) {
        let source = &mut self.sources[index];
        source.child_watching.clear();
        let Some(report) = &source.ensemble else {
            return;
        };
        // Only watches inside the watched roots name what a waiter waits on: every Curator
        // client also watches `/zookeeper/config`, which says nothing about its locks.
        let roots = &source.config.roots;
        let named: HashSet<i64> = report
            .data_watchers
            .iter()
            .filter(|(path, _)| roots.iter().any(|r| is_under(path, r)))
            .flat_map(|(_, s)| s.iter().copied())
            .collect();
        let mut budget = report.unnamed_child_watches.clone();
        for state in source.locks.values() {
            for waiter in &state.waiters {
                if named.contains(&waiter.session)
                    || source.child_watching.contains(&waiter.session)
                {
                    continue;
                }
                if let Some((member, _)) = report.connections.get(&waiter.session) {
                    if let Some(left) = budget.get_mut(*member) {
                        if *left > 0 {
                            *left -= 1;
                            source.child_watching.insert(waiter.session);
                        }
                    }
                }
            }
        }
    }

    /// Releases no round judged (the poller stalled) are recorded as plain releases after
    /// [`CAUSE_WAIT_MS`], or after `CAUSE_POLLS + 2` of the current gaps between rounds when
    /// rounds are that slow (polls stretch when members answer slowly): rounds, not the clock,
    /// bound the wait while they arrive.
    fn expire_pending(&mut self) {
        let now = now_ms();
        for index in 0..self.sources.len() {
            let source = &mut self.sources[index];
            let gap = source
                .round_gap_ms
                .max(source.config.poll_interval.as_millis() as i64);
            let limit = CAUSE_WAIT_MS.max(gap * (CAUSE_POLLS as i64 + 2));
            let (stale, fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut source.pending)
                .into_iter()
                .partition(|p| now - p.at_ms > limit);
            source.pending = fresh;
            for release in stale {
                self.record_release(index, &release, ReleaseCause::Released);
            }
        }
    }

    fn build_view(&self, index: usize, state: &LockState) -> LockView {
        let source = &self.sources[index];
        let own = source.ensemble.as_ref().and_then(|r| r.own_session);
        let watchers_of = |node: &str| -> BTreeSet<i64> {
            source
                .ensemble
                .as_ref()
                .and_then(|r| r.data_watchers.get(node))
                .map(|s| s.iter().copied().filter(|s| Some(*s) != own).collect())
                .unwrap_or_default()
        };
        let mut all_watchers = BTreeSet::new();
        let holders: Vec<HolderView> = state
            .holders
            .iter()
            .map(|h| {
                let watchers = watchers_of(&h.node);
                all_watchers.extend(watchers.iter().copied());
                HolderView {
                    node: h.node.clone(),
                    session: session_hex(h.session),
                    since_ms: state
                        .holder_since
                        .get(&h.node)
                        .copied()
                        .unwrap_or(h.ctime_ms),
                    held_ms: 0,
                    mode: h.mode,
                    watchers: watchers.len() as u32,
                    reentrancy: None,
                    lease: None,
                    version: None,
                }
            })
            .collect();
        // Which participant node each session watches, from one pass over the participants.
        let mut watched_by: HashMap<i64, &str> = HashMap::new();
        if let Some(report) = &source.ensemble {
            for p in state.holders.iter().chain(state.waiters.iter()) {
                if let Some(sessions) = report.data_watchers.get(&p.node) {
                    for session in sessions {
                        watched_by.entry(*session).or_insert(p.node.as_str());
                    }
                }
            }
        }
        let mut child_watchers = 0u32;
        let waiters: Vec<WaiterView> = state
            .waiters
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let mut watches = watched_by.get(&w.session).map(|node| node.to_string());
                if watches.is_none() && source.child_watching.contains(&w.session) {
                    child_watchers += 1;
                    watches = Some(
                        lockscope_model::zk::split_parent(&w.node)
                            .map(|(parent, _)| parent.to_string())
                            .unwrap_or_else(|| state.container.clone()),
                    );
                }
                WaiterView {
                    node: w.node.clone(),
                    session: session_hex(w.session),
                    since_ms: w.ctime_ms,
                    waited_ms: 0,
                    position: i as u32 + 1,
                    mode: w.mode,
                    watches,
                    deadline_ms: None,
                    lease: None,
                }
            })
            .collect();
        let watchers = all_watchers.len() as u32;
        LockView {
            id: state.id.clone(),
            source: source.config.name.clone(),
            backend: Backend::Zookeeper,
            path: state.view.path.clone(),
            recipe: state.recipe.as_str().to_string(),
            holders,
            waiters,
            watchers,
            child_watchers,
            herd: watchers > 1 || child_watchers > 1,
            max_leases: state.max_leases,
            oldest_wait_ms: 0,
            acquisitions: state.history.acquisitions,
            releases: state.history.releases,
            changed_ms: state.changed_ms,
            usual_hold_ms: usual_hold_of(&state.history),
            ..LockView::default()
        }
    }

    /// Publishes changed locks and sources as one new snapshot version plus deltas.
    fn publish(&mut self) {
        if self.dirty_locks.is_empty()
            && self.lock_ops.is_empty()
            && self.dirty_sources.is_empty()
            && self.dirty_redis_sources.is_empty()
            && self.dirty_etcd_sources.is_empty()
        {
            return;
        }
        let mut changes = Vec::new();
        let mut locks = self.snapshot.locks.clone();
        // In order of occurrence first; then the ZooKeeper views built now from current state
        // (a ZooKeeper lock removed drops out of `dirty_locks`, one back re-enters it).
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
        let dirty = std::mem::take(&mut self.dirty_locks);
        for (index, path) in dirty {
            let Some(state) = self.sources[index].locks.get(&path) else {
                continue;
            };
            let view = self.build_view(index, state);
            if *state.view == view && locks.contains_key(&view.id) {
                continue;
            }
            let view = Arc::new(view);
            if let Some(state) = self.sources[index].locks.get_mut(&path) {
                state.view = view.clone();
            }
            locks.insert(view.id.clone(), view.clone());
            changes.push(Change::Lock(view));
        }
        for index in std::mem::take(&mut self.dirty_sources) {
            let source = &mut self.sources[index];
            source.view.locks = source.locks.len();
            source.view.nodes = source.tree.len();
            changes.push(Change::Source(source.view.clone()));
        }
        for index in std::mem::take(&mut self.dirty_redis_sources) {
            changes.push(Change::Source(self.redis[index].view.clone()));
        }
        for index in std::mem::take(&mut self.dirty_etcd_sources) {
            changes.push(Change::Source(self.etcd[index].view.clone()));
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

    /// A lock no longer in the snapshot: its last view and events, from the graveyard.
    fn gone_detail(&self, id: &str) -> Option<LockDetail> {
        let zk = self.sources.iter().flat_map(|s| s.graveyard.values());
        let redis = self.redis.iter().flat_map(|s| s.ledger.graveyard.values());
        let etcd = self.etcd.iter().flat_map(|s| s.ledger.graveyard.values());
        let history = zk
            .chain(redis)
            .chain(etcd)
            .find(|h| h.last.as_ref().is_some_and(|l| l.id == id))?;
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
                let detail = self.snapshot.locks.get(&id).map(|lock| {
                    let events = self
                        .sources
                        .iter()
                        .find(|s| s.config.name == lock.source)
                        .and_then(|s| s.locks.get(&lock.path))
                        .map(|state| &state.history)
                        .or_else(|| {
                            self.redis
                                .iter()
                                .filter(|s| s.spec.name == lock.source)
                                .find_map(|s| s.history_of(&lock.id))
                        })
                        .or_else(|| {
                            self.etcd
                                .iter()
                                .filter(|s| s.name() == lock.source)
                                .find_map(|s| s.ledger.history_of(&lock.id))
                        })
                        .map(History::sorted_events)
                        .unwrap_or_default();
                    LockDetail {
                        lock: (**lock).clone(),
                        events,
                        gone: false,
                    }
                });
                let _ = reply.send(detail.or_else(|| self.gone_detail(&id)));
            }
            Command::Sessions { reply } => {
                let _ = reply.send(self.sessions());
            }
            Command::Metrics { reply } => {
                let _ = reply.send(self.metrics_input());
            }
            Command::MarkForced { id, holder, reply } => {
                let now = crate::now_ms();
                // A mark whose release never happened (refused, failed) must not linger.
                self.forced.retain(|_, at| now - *at < 300_000);
                self.forced.insert((id, holder), now);
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
            let mut by_session: BTreeMap<i64, (Vec<String>, Vec<String>)> = BTreeMap::new();
            for state in source.locks.values() {
                for h in &state.holders {
                    by_session
                        .entry(h.session)
                        .or_default()
                        .0
                        .push(state.id.clone());
                }
                for w in &state.waiters {
                    by_session
                        .entry(w.session)
                        .or_default()
                        .1
                        .push(state.id.clone());
                }
            }
            let own = source.ensemble.as_ref().and_then(|r| r.own_session);
            if let Some(report) = &source.ensemble {
                for session in report.connections.keys() {
                    if Some(*session) != own {
                        by_session.entry(*session).or_default();
                    }
                }
            }
            let members = source.config.members();
            for (session, (mut holds, mut waits)) in by_session {
                holds.dedup();
                waits.dedup();
                let connection = source
                    .ensemble
                    .as_ref()
                    .and_then(|r| r.connections.get(&session));
                let timeout_ms = connection
                    .and_then(|(_, t)| *t)
                    .or_else(|| source.timeouts.get(&session).copied());
                // The leader's deadline when it reports one, else first-seen-absent + timeout.
                let reported = source
                    .ensemble
                    .as_ref()
                    .and_then(|r| r.live_sessions.as_ref())
                    .and_then(|live| live.get(&session).copied().flatten());
                let expires_at_ms =
                    match (connection, source.absent_since.get(&session), timeout_ms) {
                        (Some(_), _, _) => None,
                        (None, _, _) if reported.is_some() => reported,
                        (None, Some(since), Some(timeout)) => Some(since + timeout as i64),
                        _ => None,
                    };
                out.push(SessionView {
                    source: source.config.name.clone(),
                    session: session_hex(session),
                    timeout_ms,
                    connected: connection.is_some(),
                    server: connection.and_then(|(m, _)| members.get(*m).cloned()),
                    expires_at_ms,
                    holds,
                    waits,
                });
            }
        }
        for source in &self.etcd {
            out.extend(source.sessions());
        }
        out
    }

    fn metrics_input(&self) -> MetricsInput {
        let mut input = MetricsInput::default();
        for source in &self.sources {
            let mut recipes: BTreeMap<&'static str, u64> =
                Recipe::ALL.iter().map(|r| (r.as_str(), 0)).collect();
            let mut gauges = BTreeMap::new();
            for (path, state) in &source.locks {
                *recipes.entry(state.recipe.as_str()).or_default() += 1;
                let view = self
                    .snapshot
                    .locks
                    .get(&state.id)
                    .cloned()
                    .unwrap_or_else(|| state.view.clone());
                let label = source.counters.existing_label(path);
                gauges.entry(label).or_insert_with(Vec::new).push(view);
            }
            input.sources.push(crate::metrics::SourceMetrics {
                name: source.config.name.clone(),
                up: source.view.up,
                synced: source.view.synced,
                nodes: source.tree.len() as u64,
                resyncs: source.resyncs,
                recipes,
                locks: gauges,
                counters: source.counters.clone(),
            });
        }
        for source in &self.redis {
            let mut gauges: BTreeMap<Arc<str>, Vec<Arc<LockView>>> = BTreeMap::new();
            for lock in source.ledger.locks.values() {
                gauges
                    .entry(source.ledger.counters.existing_label(&lock.path))
                    .or_default()
                    .push(lock.view.clone());
            }
            input.sources.push(crate::metrics::SourceMetrics {
                name: source.spec.name.clone(),
                up: source.view.up,
                synced: source.view.synced,
                nodes: source.view.nodes as u64,
                resyncs: 0,
                recipes: source.recipes(),
                locks: gauges,
                counters: source.ledger.counters.clone(),
            });
            input
                .corrections
                .push((source.spec.name.clone(), source.corrections));
        }
        for source in &self.etcd {
            let mut gauges: BTreeMap<Arc<str>, Vec<Arc<LockView>>> = BTreeMap::new();
            for lock in source.ledger.locks.values() {
                gauges
                    .entry(source.ledger.counters.existing_label(&lock.path))
                    .or_default()
                    .push(lock.view.clone());
            }
            input.sources.push(crate::metrics::SourceMetrics {
                name: source.name().to_string(),
                up: source.view.up,
                synced: source.view.synced,
                nodes: source.view.nodes as u64,
                resyncs: source.resyncs(),
                recipes: source.recipes(),
                locks: gauges,
                counters: source.ledger.counters.clone(),
            });
        }
        input.max_labels = self.max_labels;
        input
    }
}

/// What a backend's state needs from the aggregator to book changes in the ledger.
pub struct LedgerContext<'a> {
    pub now: i64,
    /// Holders being force-released (their release is `forced`).
    pub forced: &'a mut HashMap<(String, String), i64>,
    pub store: &'a Option<crate::audit::Store>,
    /// Lock views and removals to publish, in order.
    pub lock_ops: &'a mut Vec<Change>,
    /// The source's own view changed.
    pub source_changed: bool,
}

/// `path` is `root` or below it.
fn is_under(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// `forced` when an operator's force release of `holder` of lock `id` was announced (the mark is
/// used up), else `otherwise`.
pub(crate) fn forced_or(
    forced: &mut HashMap<(String, String), i64>,
    id: &str,
    holder: &str,
    otherwise: ReleaseCause,
) -> ReleaseCause {
    match forced.remove(&(id.to_string(), holder.to_string())) {
        Some(_) => ReleaseCause::Forced,
        None => otherwise,
    }
}

impl SourceState {
    /// The session created a node after this release's node went (heard later), so it was
    /// alive then: a closing or expired session creates nothing.
    fn created_after(&self, release: &PendingRelease) -> bool {
        self.created_seq
            .get(&release.session)
            .is_some_and(|seq| *seq > release.seq)
    }
}

/// What one ensemble round says about the session of a pending release.
struct RoundWord {
    /// The round was asked at least [`REPLICATION_MARGIN_MS`] after the last removal of the
    /// session's nodes lockscope heard.
    settled: bool,
    /// The release has waited [`CAUSE_POLLS`] rounds: this one decides as it stands.
    last_chance: bool,
    /// Whether the leader's session tracker lists the session, when the leader answered (read
    /// after it caught up with every member, see `collect::zk::poll_ensemble`).
    leader: Option<bool>,
    /// Whether a member lists a connection of the session.
    connected: bool,
    full_round: bool,
}

impl RoundWord {
    /// `Some(true)`: the session lived after its node went; `Some(false)`: it had ended;
    /// `None`: not known yet.
    fn session_alive(&self, release: &mut PendingRelease) -> Option<bool> {
        if let Some(listed) = self.leader {
            // The leader drops a session from its tracker when it starts applying the close
            // (or expires it), before any of its nodes go.
            return (self.settled || self.last_chance).then_some(listed);
        }
        if self.connected {
            // A member lists a closing session's connection until it has applied the whole
            // close, and a little after (seen: tens of ms after its zxid moved): without the
            // leader, only two settled rounds make the connection a fact.
            if self.settled {
                release.connected_rounds += 1;
            }
            return (release.connected_rounds >= 2 || self.last_chance).then_some(true);
        }
        ((self.full_round && self.settled) || self.last_chance).then_some(false)
    }
}

/// Whether a session that ended with its node expired rather than closed: it was seen gone
/// from every member well before its nodes started to go, and (when the leader's word is known)
/// well before the leader dropped it. A close removes the nodes while the connection is still
/// open (the client's member drops it once it applied the whole close, and the leader drops the
/// session as it starts applying it), though a member may deliver the removals late; an expiry
/// comes at least two thirds of the timeout after the client's last ping. Never seen gone:
/// whether it was not connected at the poll before the release.
fn expired(release: &PendingRelease, source: &SourceState) -> bool {
    let Some(since) = source.absent_since.get(&release.session) else {
        return !release.was_connected;
    };
    let margin = expiry_margin(source.timeouts.get(&release.session));
    release.nodes_from_ms - since >= margin
        && source
            .left_leader
            .get(&release.session)
            .is_none_or(|left| left - since >= margin)
}

/// How long before its nodes go a session must have been gone for an expiry: a quarter of its
/// timeout is still clear of one (an expiry comes at least two thirds of it after the last
/// ping), and never less than [`REPLICATION_MARGIN_MS`].
fn expiry_margin(timeout_ms: Option<&u64>) -> i64 {
    timeout_ms
        .map_or(0, |t| *t as i64 / 4)
        .max(REPLICATION_MARGIN_MS)
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

fn empty_view(id: &str, source: &str, decoded: &DecodedLock) -> LockView {
    LockView {
        id: id.to_string(),
        source: source.to_string(),
        backend: Backend::Zookeeper,
        path: decoded.path.clone(),
        recipe: decoded.recipe.as_str().to_string(),
        holders: Vec::new(),
        waiters: Vec::new(),
        watchers: 0,
        child_watchers: 0,
        herd: false,
        max_leases: decoded.max_leases,
        ..LockView::default()
    }
}
