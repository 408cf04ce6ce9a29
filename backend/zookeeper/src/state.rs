//! A ZooKeeper source's state in the aggregator: the mirror of the watched trees, locks decoded
//! from the containers a change touches, hold/wait times, acquisitions and releases, and the
//! causes of releases, which resolve after the fact from ensemble rounds (the release-cause
//! invariant in ARCHITECTURE.md): a removed holder waits in `pending` until a round says
//! whether its session lived on (`released`), closed or expired. That deferred booking is why
//! ZooKeeper keeps its own diff beside the neutral ledger; it shares the ledger's [`Graveyard`],
//! events and counters.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use lockscope_model::id::lock_id;
use lockscope_model::session_hex;
use lockscope_model::wire::{
    Backend, HolderView, LockEvent, LockView, ReleaseCause, SessionView, SourceView, WaiterView,
};
use lockscope_model::zk::{
    containers_for_change_in, decode_container, join, DecodedLock, NodeMeta, Participant, Recipe,
    ZkTree,
};

use super::{DumpWanted, EnsembleReport, NodeChange, ZkSourceConfig, ZkUpdate};
use lockscope_core::aggregate::counters::{BootstrapProgress, LockCounters};
use lockscope_core::aggregate::ledger::Graveyard;
use lockscope_core::aggregate::{
    forced_or, push_event, usual_hold_of, History, LedgerContext, LockOp, StoredLock, HISTORY_LIMIT,
};
use ZkUpdate as Update;

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

/// Containers with more children than this are re-decoded once per burst of updates.
const DEFER_CHILDREN: usize = 256;

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

#[derive(Debug)]
struct LockState {
    id: String,
    container: String,
    recipe: Recipe,
    max_leases: Option<u32>,
    holders: Vec<Member>,
    waiters: Vec<Member>,
    changed_ms: i64,
    history: History,
    /// The record last published (shared with the snapshot, which stores the same one).
    stored: Option<StoredLock>,
}

/// Where a participant's node is, seen from its lock's container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The container itself (an exclusive lock).
    Itself,
    /// A child of the container (queues, kazoo semaphore leases).
    Child,
    /// A child of the container's `leases` (Curator semaphores).
    Lease,
    /// A child of the container's sibling `<container>-__lock__` (kazoo semaphore contenders).
    KazooQueue,
    /// Anywhere else: `name` is the whole path.
    Path,
}

/// A participant as a lock keeps it between changes: its node's own name, not its path, which
/// [`Member::path`] rebuilds from the lock's container (56 bytes and the name's bytes, where a
/// decoded [`Participant`] holds the full path and its sequence).
#[derive(Debug, Clone, PartialEq)]
struct Member {
    name: Box<str>,
    session: i64,
    ctime_ms: i64,
    czxid: i64,
    /// When a holder started holding (a waiter: 0).
    since_ms: i64,
    place: Place,
    mode: Option<lockscope_model::wire::LockMode>,
}

impl Member {
    fn new(p: &Participant, container: &str, since_ms: i64) -> Member {
        let (place, name) = if p.node == container {
            (Place::Itself, "")
        } else {
            match lockscope_model::zk::split_parent(&p.node) {
                Some((parent, name)) if parent == container => (Place::Child, name),
                Some((parent, name)) if split_parent_is(parent, container, "leases") => {
                    (Place::Lease, name)
                }
                Some((parent, name)) if parent.strip_suffix(KAZOO_QUEUE) == Some(container) => {
                    (Place::KazooQueue, name)
                }
                _ => (Place::Path, p.node.as_str()),
            }
        };
        Member {
            name: name.into(),
            session: p.session,
            ctime_ms: p.ctime_ms,
            czxid: p.czxid,
            since_ms,
            place,
            mode: p.mode,
        }
    }

    /// The node's full path, for a lock in `container`.
    fn path(&self, container: &str) -> String {
        match self.place {
            Place::Itself => container.to_string(),
            Place::Child => join(container, &self.name),
            Place::Lease => join(&join(container, "leases"), &self.name),
            Place::KazooQueue => join(&format!("{container}{KAZOO_QUEUE}"), &self.name),
            Place::Path => self.name.to_string(),
        }
    }

    /// As decoded (without its sequence, which no caller here reads).
    fn participant(&self, container: &str) -> Participant {
        Participant {
            node: self.path(container),
            session: self.session,
            ctime_ms: self.ctime_ms,
            czxid: self.czxid,
            seq: None,
            mode: self.mode,
        }
    }
}

/// The suffix of a kazoo semaphore's contender queue, a sibling of the semaphore.
const KAZOO_QUEUE: &str = "-__lock__";

/// `parent` is `container/<child>`.
fn split_parent_is(parent: &str, container: &str, child: &str) -> bool {
    lockscope_model::zk::split_parent(parent) == Some((container, child))
}

/// Counts `lock`'s holders and waiters into (or, `add` false, out of) the sessions' counts.
fn count_participants(counts: &mut HashMap<i64, u32>, lock: &LockState, add: bool) {
    for member in lock.holders.iter().chain(&lock.waiters) {
        if add {
            *counts.entry(member.session).or_default() += 1;
        } else if let std::collections::hash_map::Entry::Occupied(mut n) =
            counts.entry(member.session)
        {
            *n.get_mut() -= 1;
            if *n.get() == 0 {
                n.remove();
            }
        }
    }
}

/// The keys whose values differ between `a` and `b`, or that only one of them has.
fn changed_keys<'a, K: Ord, V: PartialEq>(
    a: &'a BTreeMap<K, V>,
    b: &'a BTreeMap<K, V>,
) -> impl Iterator<Item = &'a K> {
    let changed = b
        .iter()
        .filter(|(k, v)| a.get(*k) != Some(*v))
        .map(|(k, _)| k);
    changed.chain(a.keys().filter(|k| !b.contains_key(*k)))
}

/// The same participants in the same order, whatever their sequence fields say.
fn same_participants(a: &[Participant], b: &[Participant]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.node == b.node
                && a.session == b.session
                && a.ctime_ms == b.ctime_ms
                && a.czxid == b.czxid
                && a.mode == b.mode
        })
}

pub struct ZkSourceState {
    config: Arc<ZkSourceConfig>,
    pub view: SourceView,
    tree: ZkTree,
    locks: BTreeMap<String, LockState>,
    /// Container → the paths of its locks (a boxed slice: most containers have one lock, and a
    /// one-element B-tree set would cost a 280-byte node).
    by_container: HashMap<Box<str>, Box<[Box<str>]>>,
    graveyard: Graveyard<String>,
    ensemble: Option<EnsembleReport>,
    /// Sessions a member watches the parent of with a child watch (attributed, see below).
    child_watching: HashSet<i64>,
    /// Session → how many holders and waiters of all locks it owns: the sessions an ensemble
    /// round asks about, kept as participants come and go instead of gathered from every lock
    /// each round.
    participants: HashMap<i64, u32>,
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
    pub(crate) counters: LockCounters,
    resyncs: u64,
    /// What the last full read could not read (ACLs), shown with any connection error.
    unreadable: Option<String>,
    /// Locks whose view is to be rebuilt at the next publish.
    dirty_locks: BTreeSet<String>,
    /// A full read under way: the mirror it builds and when it began.
    reading: Option<(ZkTree, i64)>,
    /// The running or last full read, for `lockscope_source_bootstrap_*`.
    bootstrap: BootstrapProgress,
    /// Containers with many children, re-decoded once per burst instead of once per change.
    deferred: BTreeSet<String>,
    /// ShedLock nodes shown as held → their lock-until instant: held by time, not by a
    /// session, so housekeeping re-decodes each once its instant passes (no event says so).
    held_until: HashMap<String, i64>,
    /// Nodes under the roots that no recipe reads ([`ZkSourceState::note_unrecognised`]).
    unrecognised: lockscope_core::aggregate::unrecognised::UnrecognisedKeys,
    /// The last full round listed every session that owns nodes or waits for a cause.
    all_owners_connected: bool,
    /// What the next ensemble round's leader `dump` would tell (see
    /// [`ZkSourceState::dump_wanted`]); the poller reads it.
    dump_wanted: tokio::sync::watch::Sender<DumpWanted>,
}

impl ZkSourceState {
    pub fn new(config: &ZkSourceConfig, max_labels: usize) -> Self {
        ZkSourceState {
            config: Arc::new(config.clone()),
            view: SourceView::connecting(&config.name, Backend::Zookeeper),
            tree: ZkTree::new(),
            locks: BTreeMap::new(),
            by_container: HashMap::new(),
            graveyard: Graveyard::default(),
            ensemble: None,
            child_watching: HashSet::new(),
            participants: HashMap::new(),
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
            counters: LockCounters::new(max_labels),
            resyncs: 0,
            unreadable: None,
            dirty_locks: BTreeSet::new(),
            deferred: BTreeSet::new(),
            held_until: HashMap::new(),
            unrecognised: Default::default(),
            reading: None,
            bootstrap: BootstrapProgress::default(),
            all_owners_connected: false,
            dump_wanted: tokio::sync::watch::Sender::new(DumpWanted::Needed),
        }
    }

    /// What the leader's `dump` would tell the poller's next round, kept current as rounds
    /// and bursts are applied. The `dump` lists every ephemeral node after the sessions
    /// (32.7 MB at 1M nodes: the leader took ~1 s to write it, and a change made right after
    /// one reached the views ~140 ms late), so the poller reads it when [`DumpWanted::Needed`]
    /// and, while the last one it read was small, when [`DumpWanted::Useful`].
    pub fn dump_wanted(&self) -> tokio::sync::watch::Receiver<DumpWanted> {
        self.dump_wanted.subscribe()
    }

    /// Sets [`ZkSourceState::dump_wanted`] from the last round and the releases waiting for
    /// their cause.
    pub(crate) fn publish_dump_wanted(&self) {
        let wanted = if !self.all_owners_connected {
            DumpWanted::Needed
        } else if !self.pending.is_empty() {
            DumpWanted::Useful
        } else {
            DumpWanted::No
        };
        self.dump_wanted.send_if_modified(|was| {
            let changed = *was != wanted;
            *was = wanted;
            changed
        });
    }

    /// Whether [`ZkSourceState::flush`] has lock views to rebuild.
    pub fn has_dirty_locks(&self) -> bool {
        !self.dirty_locks.is_empty()
    }

    /// The source's view with its current counts.
    pub fn view(&mut self) -> SourceView {
        self.view.locks = self.locks.len();
        self.view.nodes = self.tree.len();
        self.view.unrecognised = self.unrecognised.count(false);
        self.view.unrecognised_sample = self.unrecognised.sample();
        self.view.clone()
    }

    /// What the node at `path` is if no recipe reads it: a persistent node without children
    /// that carries data (the mirror keeps data up to `DATA_MAX` bytes; a node with more is
    /// not judged), is no sequence node of a queue, and is neither a lock nor the
    /// container of one (kazoo semaphores and leases, ShedLock nodes are). Empty persistent
    /// nodes are the directories locks live in (Curator and kazoo leave them behind) and count
    /// as nothing; ephemeral ones are exclusive locks.
    fn unrecognised_node(&self, path: &str) -> Option<lockscope_model::wire::UnrecognisedKey> {
        let meta = self.tree.get(path)?;
        let name = path.rsplit('/').next().unwrap_or_default();
        let plain = meta.ephemeral_owner == 0
            && meta.data.is_some()
            && self.tree.child_count(path) == 0
            && lockscope_model::zk::parse_sequence(name).is_none()
            && !self.locks.contains_key(path)
            && !self.by_container.contains_key(path)
            && !lockscope_model::zk::is_kazoo_semaphore(&self.tree, path);
        if !plain {
            return None;
        }
        let head = meta
            .data
            .as_deref()
            .map(|d| lockscope_model::redis::display_bytes(&d[..d.len().min(64)]))
            .unwrap_or_default();
        Some(lockscope_model::wire::UnrecognisedKey {
            key: path.chars().take(256).collect(),
            kind: "znode".into(),
            size: meta.data.as_ref().map(|d| d.len() as u64),
            ttl_ms: None,
            head,
            why: "a persistent node with data, no children and no sequence number that no \
                  recipe reads as a lock or a lock's container"
                .into(),
        })
    }

    /// Re-judges the nodes a change at `path` may have changed: itself and its parent. Answers
    /// whether what the source shows of them changed.
    fn note_unrecognised(&mut self, path: &str) -> bool {
        let parent = lockscope_model::zk::split_parent(path).map(|(p, _)| p.to_string());
        let mut changed = false;
        for node in std::iter::once(path.to_string()).chain(parent) {
            let what = self.unrecognised_node(&node);
            changed |= self.unrecognised.note(0, node.as_bytes(), what.as_ref());
        }
        changed
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Views of the locks changed since the last call, rebuilt now from current state, in the
    /// order they come after every `lock_ops` entry of the burst. `published` says whether a
    /// lock id is in the snapshot.
    pub fn flush(&mut self, published: &dyn Fn(&str) -> bool) -> Vec<(Arc<str>, StoredLock)> {
        let mut records = Vec::new();
        for path in std::mem::take(&mut self.dirty_locks) {
            let Some(state) = self.locks.get(&path) else {
                continue;
            };
            let stored = StoredLock::encode(&self.build_view(&path, state));
            if state.stored.as_ref() == Some(&stored) && published(&state.id) {
                continue;
            }
            let id = Arc::from(state.id.as_str());
            if let Some(state) = self.locks.get_mut(&path) {
                state.stored = Some(stored.clone());
            }
            records.push((id, stored));
        }
        records
    }

    /// ZooKeeper sessions that hold or wait, or are connected: their timeouts, members and
    /// expiry deadlines.
    pub fn sessions(&self) -> Vec<SessionView> {
        let mut out = Vec::new();
        let mut by_session: BTreeMap<i64, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for state in self.locks.values() {
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
        let own = self.ensemble.as_ref().and_then(|r| r.own_session);
        if let Some(report) = &self.ensemble {
            for session in report.connections.keys() {
                if Some(*session) != own {
                    by_session.entry(*session).or_default();
                }
            }
        }
        let members = self.config.members();
        // Session 0 owns no ephemeral node: its "holders" are persistent nodes held by time
        // (a kazoo lease), which no session ties together or ends.
        by_session.remove(&0);
        for (session, (mut holds, mut waits)) in by_session {
            holds.dedup();
            waits.dedup();
            let connection = self
                .ensemble
                .as_ref()
                .and_then(|r| r.connections.get(&session));
            let timeout_ms = connection
                .and_then(|(_, t)| *t)
                .or_else(|| self.timeouts.get(&session).copied());
            // The leader's deadline when it reports one, else first-seen-absent + timeout.
            let reported = self
                .ensemble
                .as_ref()
                .and_then(|r| r.live_sessions.as_ref())
                .and_then(|live| live.get(&session).copied().flatten());
            let expires_at_ms = match (connection, self.absent_since.get(&session), timeout_ms) {
                (Some(_), _, _) => None,
                (None, _, _) if reported.is_some() => reported,
                (None, Some(since), Some(timeout)) => Some(since + timeout as i64),
                _ => None,
            };
            out.push(SessionView {
                source: self.config.name.clone(),
                kind: lockscope_model::wire::SessionKind::ZookeeperSession,
                session: session_hex(session),
                timeout_ms,
                connected: connection.is_some(),
                server: connection.and_then(|(m, _)| members.get(*m).cloned()),
                expires_at_ms,
                holds,
                waits,
                connection: None,
                process: None,
            });
        }
        out
    }

    /// This source's own figures for `/metrics` (its lock gauges and counters are kept by
    /// the lock table).
    pub fn metrics(&self) -> lockscope_core::aggregate::counters::SourceMetrics {
        lockscope_core::aggregate::counters::SourceMetrics {
            name: self.config.name.clone(),
            up: self.view.up,
            synced: self.view.synced,
            last_seen_ms: self.view.lock_mark(),
            nodes: self.tree.len() as u64,
            resyncs: self.resyncs,
            folded: self.counters.folded(),
            unrecognised: self.unrecognised.count(false),
            bootstrap: Some(self.bootstrap),
        }
    }

    /// The history of lock `id`, current or gone.
    pub fn history_of(&self, id: &str) -> Option<&History> {
        // The id spells the lock's path: looked up, not searched for among every lock.
        let (source, path) = lockscope_model::id::parse_lock_id(id)?;
        if source != self.config.name {
            return None;
        }
        match self.locks.get(&path) {
            Some(lock) => Some(&lock.history),
            None => self.graveyard.get(&path),
        }
    }

    /// Applies one update of this self.
    pub fn apply(&mut self, update: ZkUpdate, cx: &mut LedgerContext<'_>) {
        let now = cx.now;
        match update {
            Update::Status {
                up,
                error,
                last_seen_ms,
            } => {
                let error = match (error, &self.unreadable) {
                    (Some(e), Some(u)) => Some(format!("{e}; {u}")),
                    (e, u) => e.or_else(|| u.clone()),
                };
                let view = &mut self.view;
                if view.up != up || view.error != error {
                    view.set_up(up, last_seen_ms.unwrap_or(now));
                    view.error = error;
                    cx.source_changed = true;
                }
            }
            Update::ResyncPart { nodes, first } => {
                let reading = match self.reading.take() {
                    Some(reading) if !first => reading,
                    _ => (ZkTree::new(), now),
                };
                let (fresh, _) = self.reading.insert(reading);
                for (path, meta) in nodes {
                    fresh.upsert(&path, meta);
                }
                self.bootstrap.running = true;
                self.bootstrap.nodes = fresh.len() as u64;
            }
            Update::Resync { nodes, unreadable } => {
                let (mut fresh, started) = self.reading.take().unwrap_or((ZkTree::new(), now));
                for (path, meta) in nodes {
                    fresh.upsert(&path, meta);
                }
                self.bootstrap = BootstrapProgress {
                    running: false,
                    nodes: fresh.len() as u64,
                    last_seconds: Some((now - started).max(0) as f64 / 1000.0),
                };
                self.resync(fresh, now, cx);
                self.resyncs += 1;
                self.view.synced = true;
                self.view.last_sync_ms = Some(now);
                self.unreadable = (!unreadable.is_empty()).then(|| {
                    format!(
                        "{} node(s) not readable (ACL), e.g. {}",
                        unreadable.len(),
                        unreadable[0]
                    )
                });
                self.view.error = self.unreadable.clone();
                cx.source_changed = true;
            }
            Update::Upsert { path, meta } => self.change(NodeChange::Upsert { path, meta }, cx),
            Update::Removed { path, at_ms } => self.change(NodeChange::Removed { path, at_ms }, cx),
            Update::Changes(changes) => {
                for change in changes {
                    self.change(change, cx);
                }
            }
            Update::Ensemble(report) => {
                let (started, dirty_before) = (std::time::Instant::now(), self.dirty_locks.len());
                self.ensemble(report, now, cx);
                tracing::debug!(
                    source = %self.config.name,
                    took_us = started.elapsed().as_micros() as u64,
                    dirty = self.dirty_locks.len().saturating_sub(dirty_before),
                    child_watching = self.child_watching.len(),
                    "ensemble round applied"
                );
            }
        }
    }

    /// Applies one node change: the mirror first, then the containers it may affect.
    fn change(&mut self, change: NodeChange, cx: &mut LedgerContext<'_>) {
        let now = cx.now;
        match change {
            NodeChange::Upsert { path, meta } => {
                let owner = meta.ephemeral_owner;
                let data_changed = self.tree.data(&path) != meta.data.as_deref();
                let created = self.tree.upsert(&path, meta);
                if created {
                    if known_session(owner) {
                        // Proof the session was alive after every removal heard before this.
                        self.seq += 1;
                        self.created_seq.insert(owner, self.seq);
                    }
                    self.touch(&path, now, cx);
                } else if data_changed {
                    if self.held_until.contains_key(&path)
                        || self
                            .tree
                            .data(&path)
                            .is_some_and(|d| lockscope_model::shedlock::parse_until(d).is_some())
                    {
                        // A ShedLock node holds by its instant: a new one takes or frees it.
                        self.touch(&path, now, cx);
                    } else {
                        // The participants are the same; what the views show of them
                        // (identities, a lease's holder and end) is not.
                        self.redraw_around(&path);
                    }
                }
                if self.note_unrecognised(&path) {
                    cx.source_changed = true;
                }
            }
            // Booked like any creation (an acquisition if it held), and never shown: its
            // removal follows in the same batch.
            NodeChange::Gone { path, at_ms } => {
                if self.tree.upsert(&path, NodeMeta::unread(at_ms.min(now))) {
                    self.touch(&path, now, cx);
                }
            }
            NodeChange::Removed { path, at_ms } => {
                if let Some(meta) = self.tree.remove(&path) {
                    let at_ms = at_ms.min(now);
                    self.seq += 1;
                    self.removed_at.insert(path.clone(), (at_ms, self.seq));
                    let owner = meta.ephemeral_owner;
                    if known_session(owner) {
                        let gap = expiry_margin(self.timeouts.get(&owner));
                        let run = self.removal_runs.entry(owner).or_insert(RemovalRun {
                            first_ms: at_ms,
                            last_ms: at_ms,
                        });
                        if at_ms - run.last_ms > gap {
                            run.first_ms = at_ms;
                        }
                        run.last_ms = run.last_ms.max(at_ms);
                    }
                    if !self.touch(&path, now, cx) {
                        self.removed_at.remove(&path);
                    }
                }
                if self.note_unrecognised(&path) {
                    cx.source_changed = true;
                }
            }
        }
    }

    /// Marks for a new view every lock whose container a change at `path` may affect.
    fn redraw_around(&mut self, path: &str) {
        for container in containers_for_change_in(&self.tree, path) {
            if let Some(paths) = self.by_container.get(container.as_str()) {
                for lock in paths.iter() {
                    self.dirty_locks.insert(lock.to_string());
                }
            }
        }
    }

    /// Re-decodes what a change at `path` may affect: now, or at the end of the burst for
    /// containers so large that decoding them per change would cost O(children²) in a burst.
    /// Answers whether any of it was deferred.
    fn touch(&mut self, path: &str, now: i64, cx: &mut LedgerContext<'_>) -> bool {
        let mut immediate = Vec::new();
        let mut deferred = false;
        for container in containers_for_change_in(&self.tree, path) {
            if self.tree.child_count(&container) > DEFER_CHILDREN {
                self.deferred.insert(container);
                deferred = true;
            } else {
                immediate.push(container);
            }
        }
        self.recompute(&immediate, false, now, cx);
        deferred
    }

    /// Re-decodes the containers deferred during a burst (called once per burst).
    pub fn recompute_deferred(&mut self, cx: &mut LedgerContext<'_>) {
        let now = cx.now;
        for container in std::mem::take(&mut self.deferred) {
            self.recompute(&[container], false, now, cx);
        }
        self.removed_at.clear();
    }

    /// Replaces the mirror with a full read and re-decodes every container whose nodes differ
    /// (at the first read: every node a lock may be found in).
    fn resync(&mut self, fresh: ZkTree, now: i64, cx: &mut LedgerContext<'_>) {
        let first = !self.view.synced;
        let mut touched: BTreeSet<String> = BTreeSet::new();
        if self.tree.is_empty() {
            touched.extend(lockscope_model::zk::lock_candidates(&fresh));
        } else {
            for (path, meta) in fresh.iter() {
                if self.tree.get(&path).as_ref() != Some(&meta) {
                    touched.extend(containers_for_change_in(&fresh, &path));
                }
            }
            for (path, _) in self.tree.iter() {
                if !fresh.contains(&path) {
                    touched.extend(containers_for_change_in(&fresh, &path));
                }
            }
        }
        // Known locks are re-checked too: a container that vanished must drop its locks.
        touched.extend(self.by_container.keys().map(|c| c.to_string()));
        self.tree = fresh;
        self.view.nodes = self.tree.len();
        let touched: Vec<String> = touched.into_iter().collect();
        self.recompute(&touched, first, now, cx);
        // Judged anew over the whole mirror, which a full read replaced.
        self.unrecognised.reset(1);
        let paths: Vec<String> = self
            .tree
            .iter()
            .filter(|(_, m)| m.ephemeral_owner == 0 && m.data.is_some())
            .map(|(p, _)| p)
            .collect();
        for path in paths {
            let what = self.unrecognised_node(&path);
            self.unrecognised.note(0, path.as_bytes(), what.as_ref());
        }
        cx.source_changed = true;
    }

    /// Re-decodes `containers` and records what changed.
    fn recompute(
        &mut self,
        containers: &[String],
        bootstrap: bool,
        now: i64,
        cx: &mut LedgerContext<'_>,
    ) {
        for container in containers {
            let limits = |path: &str| self.config.max_leases.get(path).copied();
            let decoded = decode_container(&self.tree, container, &limits);
            let previous: BTreeSet<String> = self
                .by_container
                .remove(container.as_str())
                .map(|paths| paths.iter().map(|p| p.to_string()).collect())
                .unwrap_or_default();
            let mut current = BTreeSet::new();
            for lock in decoded {
                current.insert(lock.path.clone());
                self.update_lock(lock, bootstrap, now, cx);
            }
            // A lock with no participants stays listed (free) while its container exists.
            let container_exists = self.tree.contains(container)
                && !lockscope_model::zk::is_internal(&self.tree, container);
            let gone: Vec<(String, Recipe, Option<u32>)> = previous
                .difference(&current)
                .filter_map(|path| {
                    let state = self.locks.get(path)?;
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
                self.update_lock(empty, false, now, cx);
                if container_exists && recipe != Recipe::Exclusive {
                    current.insert(path);
                } else {
                    self.remove_lock(&path, cx);
                }
            }
            if !current.is_empty() {
                self.by_container.insert(
                    container.as_str().into(),
                    current.into_iter().map(String::into_boxed_str).collect(),
                );
            }
        }
    }

    fn remove_lock(&mut self, path: &str, cx: &mut LedgerContext<'_>) {
        if let Some(state) = self.locks.remove(path) {
            count_participants(&mut self.participants, &state, false);
            let last = match &state.stored {
                Some(stored) => stored.render(&state.id),
                None => bare_view(
                    &state.id,
                    &self.config.name,
                    path,
                    state.recipe,
                    state.max_leases,
                ),
            };
            self.graveyard
                .bury(path.to_string(), state.history.buried(&last, cx.now));
            self.dirty_locks.remove(path);
            cx.lock_ops.push(LockOp::Removed(state.id));
            cx.source_changed = true;
        }
    }

    fn update_lock(
        &mut self,
        mut decoded: DecodedLock,
        bootstrap: bool,
        now: i64,
        cx: &mut LedgerContext<'_>,
    ) {
        // ShedLock holds while its node's instant is in the future; a holder that goes with
        // the instant unchanged ran out, one that goes with a new instant was unlocked.
        let timed_cause = (decoded.recipe == Recipe::ShedLock).then(|| {
            let until = self
                .tree
                .data(&decoded.container)
                .and_then(lockscope_model::shedlock::parse_until);
            let was = self.held_until.remove(&decoded.container);
            match until {
                Some(until) if until > now => {
                    self.held_until.insert(decoded.container.clone(), until);
                }
                _ => decoded.holders.clear(),
            }
            if was.is_some() && was == until {
                ReleaseCause::TtlExpired
            } else {
                ReleaseCause::Released
            }
        });
        let connected: HashSet<i64> = self
            .ensemble
            .as_ref()
            .map(|r| r.connections.keys().copied().collect())
            .unwrap_or_default();
        let is_new = !self.locks.contains_key(&decoded.path);
        if is_new {
            self.counters.label_for(&decoded.path);
            let mut history = self.graveyard.exhume(&decoded.path).unwrap_or_default();
            history.last = None;
            let id = lock_id(&self.config.name, &decoded.path);
            self.locks.insert(
                decoded.path.clone(),
                LockState {
                    stored: None,
                    id,
                    container: decoded.container.clone(),
                    recipe: decoded.recipe,
                    max_leases: decoded.max_leases,
                    holders: Vec::new(),
                    waiters: Vec::new(),
                    changed_ms: now,
                    history,
                },
            );
            cx.source_changed = true;
        }
        let quiet = is_new && bootstrap;
        let tree = &self.tree;
        let Some(state) = self.locks.get_mut(&decoded.path) else {
            return;
        };
        // The previous participants with their paths (the lock keeps names only).
        let old: Vec<Participant> = state
            .holders
            .iter()
            .map(|m| m.participant(&state.container))
            .collect();
        let holder_since: HashMap<String, i64> = old
            .iter()
            .zip(&state.holders)
            .map(|(p, m)| (p.node.clone(), m.since_ms))
            .collect();
        let old_w: Vec<Participant> = state
            .waiters
            .iter()
            .map(|m| m.participant(&state.container))
            .collect();
        let old_holders: HashSet<&str> = old.iter().map(|p| p.node.as_str()).collect();
        let old_waiters: HashSet<&str> = old_w.iter().map(|p| p.node.as_str()).collect();
        let new_holders: HashSet<&str> = decoded.holders.iter().map(|p| p.node.as_str()).collect();
        let new_waiters: HashSet<&str> = decoded.waiters.iter().map(|p| p.node.as_str()).collect();
        let mut events = Vec::new();
        let mut acquired = Vec::new();
        let mut since = HashMap::new();
        for holder in &decoded.holders {
            let start = match holder_since.get(&holder.node) {
                Some(start) => *start,
                None if old_waiters.contains(holder.node.as_str()) => now,
                // A ShedLock node was created at its first run, not at this one.
                None if timed_cause.is_some() => now,
                None => holder.ctime_ms.min(now),
            };
            since.insert(holder.node.clone(), start);
            if !old_holders.contains(holder.node.as_str()) && !quiet {
                // A kazoo Semaphore queues one node and holds another: the wait began when the
                // same session's queue node was created.
                let queued_at = old_w
                    .iter()
                    .find(|w| w.session == holder.session && known_session(w.session))
                    .map_or(holder.ctime_ms, |w| w.ctime_ms.min(holder.ctime_ms));
                // Nothing waits for a ShedLock (a job finding it taken skips its run).
                let waited = if timed_cause.is_some() {
                    0
                } else {
                    (start - queued_at).max(0)
                };
                acquired.push(waited);
                events.push(LockEvent {
                    at_ms: start,
                    kind: lockscope_model::wire::EventKind::Acquired,
                    node: holder.node.clone(),
                    session: session_label(holder.session),
                    cause: None,
                    duration_ms: Some(waited),
                });
            }
        }
        let mut released = Vec::new();
        let mut unread_released = Vec::new();
        let mut timed_released = Vec::new();
        for holder in &old {
            if new_holders.contains(holder.node.as_str()) {
                continue;
            }
            if let Some(cause) = timed_cause {
                // Its node stays (ShedLock never deletes it): released by its instant, booked
                // at once; no ensemble round has anything to say about it.
                let start = holder_since.get(&holder.node).copied().unwrap_or(now);
                timed_released.push((
                    PendingRelease {
                        lock_path: decoded.path.clone(),
                        node: holder.node.clone(),
                        session: holder.session,
                        at_ms: now,
                        seq: self.seq,
                        nodes_from_ms: now,
                        held_ms: (now - start).max(0),
                        was_connected: false,
                        polls: 0,
                        connected_rounds: 0,
                    },
                    cause,
                ));
                continue;
            }
            if tree.contains(&holder.node) {
                continue;
            }
            // Gone in a resync: heard now, after every change so far.
            let (gone, seq) = self
                .removed_at
                .get(&holder.node)
                .copied()
                .unwrap_or((now, self.seq));
            let start = holder_since.get(&holder.node).copied().unwrap_or(gone);
            let nodes_from_ms = self
                .removal_runs
                .get(&holder.session)
                .filter(|run| run.last_ms >= gone)
                .map_or(gone, |run| run.first_ms.min(gone));
            let release = PendingRelease {
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
            };
            // No round can tell what became of a session nobody knows: a hold too brief to
            // read is booked at once, as its client's own release.
            if holder.session == NodeMeta::UNREAD_OWNER {
                unread_released.push(release);
            } else {
                released.push(release);
            }
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
                        session: session_label(waiter.session),
                        cause: None,
                        duration_ms: None,
                    });
                }
            }
            for waiter in &old_w {
                let now_holds = decoded
                    .holders
                    .iter()
                    .any(|h| h.session == waiter.session && known_session(waiter.session));
                if !new_waiters.contains(waiter.node.as_str())
                    && !new_holders.contains(waiter.node.as_str())
                    && !tree.contains(&waiter.node)
                    && !now_holds
                {
                    events.push(LockEvent {
                        at_ms: now,
                        kind: lockscope_model::wire::EventKind::LeftQueue,
                        node: waiter.node.clone(),
                        session: session_label(waiter.session),
                        cause: None,
                        duration_ms: Some((now - waiter.ctime_ms).max(0)),
                    });
                }
            }
        }
        let changed = !same_participants(&old, &decoded.holders)
            || !same_participants(&old_w, &decoded.waiters)
            || state.recipe != decoded.recipe
            || state.max_leases != decoded.max_leases;
        let container = decoded.container.as_str();
        count_participants(&mut self.participants, state, false);
        state.holders = decoded
            .holders
            .iter()
            .map(|p| Member::new(p, container, since.get(&p.node).copied().unwrap_or(now)))
            .collect();
        state.waiters = decoded
            .waiters
            .iter()
            .map(|p| Member::new(p, container, 0))
            .collect();
        count_participants(&mut self.participants, state, true);
        state.recipe = decoded.recipe;
        state.max_leases = decoded.max_leases;
        if state.container != decoded.container {
            state.container = decoded.container;
        }
        if changed {
            state.changed_ms = now;
        }
        state.history.acquisitions += acquired.len() as u64;
        for event in events {
            push_event(cx.store, &state.id, &mut state.history.events, event);
        }
        let label_path = decoded.path.clone();
        for waited in acquired {
            self.counters.acquired(&label_path, waited);
        }
        self.pending.extend(released);
        if changed || is_new {
            self.dirty_locks.insert(label_path);
        }
        for release in unread_released {
            self.record_release(&release, ReleaseCause::Released, cx);
        }
        for (release, cause) in timed_released {
            self.record_release(&release, cause, cx);
        }
    }

    fn ensemble(&mut self, report: EnsembleReport, now: i64, cx: &mut LedgerContext<'_>) {
        if let Some(last) = self.last_round_ms {
            self.round_gap_ms = (now - last).max(0);
        }
        self.last_round_ms = Some(now);
        if report.members_answering == 0 {
            // Nothing known about sessions this round; keep the previous picture. The round
            // still counts towards how long a release waits for its cause: with no word at
            // all, it is a plain `released`.
            let mut silent = Vec::new();
            for mut p in std::mem::take(&mut self.pending) {
                if report.started_ms >= p.at_ms + REPLICATION_MARGIN_MS {
                    p.polls += 1;
                }
                if p.polls >= CAUSE_POLLS || self.created_after(&p) {
                    silent.push(p);
                } else {
                    self.pending.push(p);
                }
            }
            for release in silent {
                self.record_release(&release, ReleaseCause::Released, cx);
            }
            return;
        }
        for (session, (_, timeout)) in &report.connections {
            if let Some(timeout) = timeout {
                self.timeouts.insert(*session, *timeout);
            }
            self.absent_since.remove(session);
        }
        // Sessions that own nodes (or just lost them) but are connected nowhere are on their
        // way to expiry, or already gone.
        let mut owners: BTreeSet<i64> = self.participants.keys().copied().collect();
        owners.extend(self.pending.iter().map(|p| p.session));
        let full_round = report.members_answering == report.members;
        if full_round {
            // The end of the round: every member had answered by then.
            let seen_absent = report.at_ms.min(now);
            for owner in &owners {
                if !report.connections.contains_key(owner) {
                    self.absent_since.entry(*owner).or_insert(seen_absent);
                }
            }
        }
        if let Some(live) = &report.live_sessions {
            // The start of the round: the leader's answer came after it.
            let seen_left = report.started_ms.min(now);
            for owner in &owners {
                if live.contains_key(owner) {
                    self.left_leader.remove(owner);
                } else {
                    self.left_leader.entry(*owner).or_insert(seen_left);
                }
            }
        }

        // Resolve release causes (the release-cause invariant in ARCHITECTURE.md): alive after
        // the removal → released; otherwise the session ended, and `expired` tells how.
        let mut resolved = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            if self.created_after(&p) {
                resolved.push((p, ReleaseCause::Released));
                continue;
            }
            // Only a round asked after the removal reached every member says anything about
            // the session after it.
            if report.started_ms < p.at_ms + REPLICATION_MARGIN_MS {
                self.pending.push(p);
                continue;
            }
            p.polls += 1;
            // A close removes all the session's nodes in one transaction, which lockscope's
            // member may still be applying well after this node went (seen: 10,000 removals
            // over half a second): only a round asked once their removals stopped arriving
            // comes after that member, and so (by the round's `srvr` cut) the leader, applied
            // the whole close.
            let last_removal = self
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
                    self.pending.push(p);
                    continue;
                }
                Some(true) => ReleaseCause::Released,
                Some(false) if expired(&p, self) => ReleaseCause::SessionExpired,
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
                absent_before_nodes_ms = ?self.absent_since.get(&p.session).map(|s| p.nodes_from_ms - s),
                absent_before_leader_ms = ?self.absent_since.get(&p.session).zip(self.left_leader.get(&p.session)).map(|(s, l)| l - s),
                "release cause"
            );
            resolved.push((p, cause));
        }
        // Forget sessions that neither own nodes nor wait for a cause any more.
        let owners: BTreeSet<i64> = self
            .participants
            .keys()
            .copied()
            .chain(self.pending.iter().map(|p| p.session))
            .collect();
        self.absent_since.retain(|s, _| owners.contains(s));
        self.left_leader.retain(|s, _| owners.contains(s));
        self.removal_runs.retain(|s, _| owners.contains(s));
        self.created_seq.retain(|s, _| owners.contains(s));
        self.timeouts
            .retain(|s, _| owners.contains(s) || report.connections.contains_key(s));
        // Whether the next round needs the leader's word on some session (see
        // `dump_wanted`).
        self.all_owners_connected =
            full_round && owners.iter().all(|s| report.connections.contains_key(s));
        let previous = self.ensemble.replace(report);
        for (release, cause) in resolved {
            self.record_release(&release, cause, cx);
        }
        let was_child_watching = self.attribute_child_watches();
        self.redraw_for_round(previous.as_ref(), &was_child_watching);
        self.publish_dump_wanted();
    }

    /// Marks for a new view the locks whose view the round changed: those with a participant
    /// node whose watchers changed, and those with a participant of a session whose client
    /// address or attributed child watch changed (every lock on the first round, or when
    /// lockscope's own session changed). A round that changed nothing a view shows costs no
    /// view; rebuilding every lock's view on every round (every 2 s) once held a change back
    /// by ~0.8 s at 1M nodes.
    fn redraw_for_round(&mut self, previous: Option<&EnsembleReport>, was: &HashSet<i64>) {
        let Some(report) = &self.ensemble else {
            return;
        };
        let Some(previous) = previous.filter(|p| p.own_session == report.own_session) else {
            self.dirty_locks.extend(self.locks.keys().cloned());
            return;
        };
        let mut dirty: Vec<String> = Vec::new();
        // Nodes whose watchers changed (added, removed or different).
        for node in changed_keys(&previous.data_watchers, &report.data_watchers) {
            let node = node.as_str();
            // A participant is its lock's container, a child of it, or a child of its
            // `leases`, `locks` or `-__lock__` sibling.
            let parent = lockscope_model::zk::split_parent(node).map(|(p, _)| p);
            let candidates = [
                Some(node),
                parent,
                parent
                    .and_then(lockscope_model::zk::split_parent)
                    .map(|(g, _)| g),
                parent.and_then(lockscope_model::zk::kazoo_semaphore_of),
            ];
            for container in candidates.into_iter().flatten() {
                if let Some(paths) = self.by_container.get(container) {
                    dirty.extend(paths.iter().map(|p| p.to_string()));
                }
            }
        }
        // Sessions whose client address or attributed child watch changed.
        let mut sessions: HashSet<i64> = was
            .symmetric_difference(&self.child_watching)
            .chain(changed_keys(&previous.clients, &report.clients))
            .copied()
            .collect();
        sessions.retain(|s| self.participants.contains_key(s));
        if !sessions.is_empty() {
            for (path, state) in &self.locks {
                if state
                    .holders
                    .iter()
                    .chain(&state.waiters)
                    .any(|m| sessions.contains(&m.session))
                {
                    dirty.push(path.clone());
                }
            }
        }
        self.dirty_locks.extend(dirty);
    }

    fn record_release(
        &mut self,
        release: &PendingRelease,
        cause: ReleaseCause,
        cx: &mut LedgerContext<'_>,
    ) {
        let path = release.lock_path.as_str();
        let (session, held) = (release.session, release.held_ms);
        let id = lockscope_model::id::lock_id(&self.view.name, path);
        let cause = forced_or(cx.forced, &id, &release.node, cause);
        self.counters.released(path, cause, held);
        if cause == ReleaseCause::SessionExpired && self.expired_counted.insert(session) {
            self.counters.session_expired();
            if self.expired_counted.len() > HISTORY_LIMIT {
                self.expired_counted.clear();
            }
        }
        let history = match self.locks.get_mut(path) {
            Some(state) => {
                self.dirty_locks.insert(path.to_string());
                &mut state.history
            }
            None => self.graveyard.entry(path.to_string()),
        };
        history.released(
            cx.store,
            &id,
            &release.node,
            session_label(session),
            release.at_ms,
            held,
            cause,
        );
    }

    /// Gives the child watches members hold (unnamed by `wchp`) to the waiters that watch
    /// nothing by name: on each member, up to its count of them, in queue order.
    /// Answers the sessions attributed before. Walks the waiters only while some member
    /// holds child watches left to give.
    fn attribute_child_watches(&mut self) -> HashSet<i64> {
        let was = std::mem::take(&mut self.child_watching);
        let Some(report) = &self.ensemble else {
            return was;
        };
        if report.unnamed_child_watches.iter().all(|n| *n == 0) {
            return was;
        }
        // Only watches inside the watched roots name what a waiter waits on: every Curator
        // client also watches `/zookeeper/config`, which says nothing about its locks.
        let roots = &self.config.roots;
        let named: HashSet<i64> = report
            .data_watchers
            .iter()
            .filter(|(path, _)| roots.iter().any(|r| is_under(path, r)))
            .flat_map(|(_, s)| s.iter().copied())
            .collect();
        let mut budget = report.unnamed_child_watches.clone();
        let mut left_in_all: u64 = budget.iter().sum();
        'locks: for state in self.locks.values() {
            for waiter in &state.waiters {
                if named.contains(&waiter.session) || self.child_watching.contains(&waiter.session)
                {
                    continue;
                }
                if let Some((member, _)) = report.connections.get(&waiter.session) {
                    if let Some(left) = budget.get_mut(*member) {
                        if *left > 0 {
                            *left -= 1;
                            left_in_all -= 1;
                            self.child_watching.insert(waiter.session);
                            if left_in_all == 0 {
                                break 'locks;
                            }
                        }
                    }
                }
            }
        }
        was
    }

    /// Releases no round judged (the poller stalled) are recorded as plain releases after
    /// [`CAUSE_WAIT_MS`], or after `CAUSE_POLLS + 2` of the current gaps between rounds when
    /// rounds are that slow (polls stretch when members answer slowly): rounds, not the clock,
    /// bound the wait while they arrive.
    pub fn expire_pending(&mut self, cx: &mut LedgerContext<'_>) {
        let now = cx.now;
        // ShedLock nodes whose instant passed since they were decoded.
        let ran_out: Vec<String> = self
            .held_until
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(container, _)| container.clone())
            .collect();
        if !ran_out.is_empty() {
            self.recompute(&ran_out, false, now, cx);
        }
        let gap = self
            .round_gap_ms
            .max(self.config.poll_interval.as_millis() as i64);
        let limit = CAUSE_WAIT_MS.max(gap * (CAUSE_POLLS as i64 + 2));
        let (stale, fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| now - p.at_ms > limit);
        self.pending = fresh;
        for release in stale {
            self.record_release(&release, ReleaseCause::Released, cx);
        }
    }

    fn build_view(&self, path: &str, state: &LockState) -> LockView {
        let own = self.ensemble.as_ref().and_then(|r| r.own_session);
        let watchers_of = |node: &str| -> BTreeSet<i64> {
            self.ensemble
                .as_ref()
                .and_then(|r| r.data_watchers.get(node))
                .map(|s| s.iter().copied().filter(|s| Some(*s) != own).collect())
                .unwrap_or_default()
        };
        let mut all_watchers = BTreeSet::new();
        // Paths are rebuilt here, for the view only.
        let holder_paths: Vec<String> = state
            .holders
            .iter()
            .map(|m| m.path(&state.container))
            .collect();
        let waiter_paths: Vec<String> = state
            .waiters
            .iter()
            .map(|m| m.path(&state.container))
            .collect();
        // Who each participant is, in its node's data (kazoo's identifier, Curator's client
        // address); a kazoo lease names its holder and end in its record instead.
        let identity_of = |node: &str, session: i64| {
            self.tree
                .data(node)
                .and_then(lockscope_model::clip::identity)
                // Else the client address its session connects from (`cons`).
                .or_else(|| {
                    self.ensemble
                        .as_ref()
                        .and_then(|r| r.clients.get(&session))
                        .and_then(|client| lockscope_model::clip::identity_text(client))
                })
        };
        let lease = (state.recipe == Recipe::KazooLease)
            .then(|| holder_paths.first())
            .flatten()
            .and_then(|node| self.tree.data(node))
            .and_then(lockscope_model::zk::parse_kazoo_lease);
        let holders: Vec<HolderView> = state
            .holders
            .iter()
            .zip(&holder_paths)
            .map(|(h, node)| {
                let watchers = watchers_of(node);
                all_watchers.extend(watchers.iter().copied());
                let identity = match &lease {
                    Some(lease) => lockscope_model::clip::identity(lease.holder.as_bytes()),
                    None => identity_of(node, h.session),
                };
                HolderView {
                    node: node.clone(),
                    session: session_hex(h.session),
                    since_ms: h.since_ms,
                    held_ms: 0,
                    mode: h.mode,
                    watchers: watchers.len() as u32,
                    reentrancy: None,
                    lease: None,
                    identity,
                    // The node's czxid: a release compares it, so a node deleted and created
                    // again under this name since the operator looked is not deleted. A
                    // ShedLock node is rewritten at every lock with a new instant: the
                    // instant tells the runs apart (`<czxid>@<instant>`).
                    version: Some(match self.held_until.get(&state.container) {
                        Some(until) if state.recipe == Recipe::ShedLock => format!(
                            "{}@{}",
                            h.czxid,
                            lockscope_model::shedlock::format_instant(*until)
                        ),
                        _ => h.czxid.to_string(),
                    }),
                    statement: None,
                }
            })
            .collect();
        // Which participant node each session watches, from one pass over the participants.
        let mut watched_by: HashMap<i64, &str> = HashMap::new();
        if let Some(report) = &self.ensemble {
            for node in holder_paths.iter().chain(&waiter_paths) {
                if let Some(sessions) = report.data_watchers.get(node) {
                    for session in sessions {
                        watched_by.entry(*session).or_insert(node.as_str());
                    }
                }
            }
        }
        let mut child_watchers = 0u32;
        let waiters: Vec<WaiterView> = state
            .waiters
            .iter()
            .zip(&waiter_paths)
            .enumerate()
            .map(|(i, (w, node))| {
                let mut watches = watched_by.get(&w.session).map(|node| node.to_string());
                if watches.is_none() && self.child_watching.contains(&w.session) {
                    child_watchers += 1;
                    watches = Some(
                        lockscope_model::zk::split_parent(node)
                            .map(|(parent, _)| parent.to_string())
                            .unwrap_or_else(|| state.container.clone()),
                    );
                }
                WaiterView {
                    node: node.clone(),
                    session: session_hex(w.session),
                    since_ms: w.ctime_ms,
                    waited_ms: 0,
                    position: i as u32 + 1,
                    mode: w.mode,
                    watches,
                    deadline_ms: None,
                    lease: None,
                    identity: identity_of(node, w.session),
                    statement: None,
                }
            })
            .collect();
        let watchers = all_watchers.len() as u32;
        LockView {
            id: state.id.clone(),
            source: self.config.name.clone(),
            backend: Backend::Zookeeper,
            path: path.to_string(),
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
            // A lease ends by time: once past, any client may take it over.
            deadline_ms: lease.as_ref().map(|l| l.end_ms),
            // A ShedLock node is held until its instant (shown only while it holds: once the
            // instant passes it is free, the normal state of a job between runs).
            expires_at_ms: lease
                .as_ref()
                .map(|l| l.end_ms)
                .or_else(|| self.held_until.get(&state.container).copied()),
            flags: if state.recipe == Recipe::ShedLock {
                // A job that finds it taken skips its run: nothing ever waits.
                vec!["waiters_not_visible".to_string()]
            } else {
                Vec::new()
            },
            ..LockView::default()
        }
    }
}

/// A session lockscope knows: an ephemeral node's owner it read (not a persistent node's 0,
/// not the unknown owner of a node gone before it was read).
fn known_session(session: i64) -> bool {
    session != 0 && session != NodeMeta::UNREAD_OWNER
}

/// How a participant's session is written in lock events: `unknown` for a node gone before
/// lockscope read it.
fn session_label(session: i64) -> String {
    if session == NodeMeta::UNREAD_OWNER {
        "unknown".to_string()
    } else {
        session_hex(session)
    }
}

/// `path` is `root` or below it.
fn is_under(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

impl ZkSourceState {
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
fn expired(release: &PendingRelease, source: &ZkSourceState) -> bool {
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

/// The view of a lock that was never published (it went within the burst it came in).
fn bare_view(
    id: &str,
    source: &str,
    path: &str,
    recipe: Recipe,
    max_leases: Option<u32>,
) -> LockView {
    LockView {
        id: id.to_string(),
        source: source.to_string(),
        backend: Backend::Zookeeper,
        path: path.to_string(),
        recipe: recipe.as_str().to_string(),
        max_leases,
        ..LockView::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_participant_costs_one_56_byte_member_and_its_name() {
        // Name (boxed, 16), session, creation time, creation zxid, holding since (4 × 8), place
        // and mode (1 each, padded to 8). ARCHITECTURE.md has the arithmetic per node.
        assert_eq!(std::mem::size_of::<Member>(), 56);
    }

    fn node(owner: i64, ctime: i64) -> NodeMeta {
        NodeMeta {
            ctime_ms: ctime,
            ephemeral_owner: owner,
            czxid: ctime,
            version: 0,
            data_len: 0,
            data: None,
        }
    }

    fn round(watchers: &[(&str, i64)], clients: &[(i64, &str)]) -> EnsembleReport {
        let mut data_watchers: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
        for (node, session) in watchers {
            data_watchers
                .entry(node.to_string())
                .or_default()
                .insert(*session);
        }
        EnsembleReport {
            started_ms: 1,
            at_ms: 2,
            own_session: Some(0x99),
            members: 1,
            members_answering: 1,
            connections: [0x11, 0x22, 0x33]
                .into_iter()
                .map(|s| (s, (0, Some(4000))))
                .collect(),
            clients: clients.iter().map(|(s, c)| (*s, c.to_string())).collect(),
            unnamed_child_watches: vec![0],
            data_watchers,
            ..EnsembleReport::default()
        }
    }

    /// The leader's `dump` is wanted at first, not while every session that owns nodes is
    /// connected, usefully while a release waits for its cause, and needed once a session
    /// that owns nodes is connected nowhere.
    #[test]
    fn the_leaders_dump_is_wanted_only_when_it_tells_something() {
        use lockscope_core::aggregate::SourceModel;
        let config = ZkSourceConfig::new("zk", "127.0.0.1:1", &["/l"]);
        let mut state = ZkSourceState::new(&config, 100);
        let wanted = state.dump_wanted();
        let (mut forced, store, mut ops) = (Default::default(), None, Vec::new());
        let mut cx = LedgerContext::new(&mut forced, &store, &mut ops);
        assert_eq!(*wanted.borrow(), DumpWanted::Needed);
        let t = 1_795_000_000_000;
        state.apply(
            ZkUpdate::Resync {
                nodes: vec![
                    ("/l".to_string(), node(0, t)),
                    ("/l/a".to_string(), node(0, t)),
                    ("/l/a/lock-0000000001".to_string(), node(0x11, t)),
                    ("/l/a/lock-0000000002".to_string(), node(0x22, t)),
                ],
                unreadable: vec![],
            },
            &mut cx,
        );
        state.apply(ZkUpdate::Ensemble(round(&[], &[])), &mut cx);
        assert_eq!(*wanted.borrow(), DumpWanted::No);
        // The holder goes: its release waits for the cause.
        state.apply(
            ZkUpdate::Removed {
                path: "/l/a/lock-0000000001".into(),
                at_ms: t + 1,
            },
            &mut cx,
        );
        state.end_of_burst(&mut cx);
        assert_eq!(*wanted.borrow(), DumpWanted::Useful);
        // 0x22 (a holder now) is connected nowhere; so is 0x11, still waiting for its cause.
        let mut gone = round(&[], &[]);
        gone.connections.retain(|s, _| *s == 0x33);
        state.apply(ZkUpdate::Ensemble(gone), &mut cx);
        assert_eq!(*wanted.borrow(), DumpWanted::Needed);
        // A round that missed a member says nothing of the sessions connected there.
        let mut partial = round(&[], &[]);
        partial.members = 2;
        state.apply(ZkUpdate::Ensemble(partial), &mut cx);
        assert_eq!(*wanted.borrow(), DumpWanted::Needed);
    }

    #[test]
    fn a_round_rebuilds_only_the_views_it_changed() {
        let config = ZkSourceConfig::new("zk", "127.0.0.1:1", &["/l"]);
        let mut state = ZkSourceState::new(&config, 100);
        let (mut forced, store, mut ops) = (Default::default(), None, Vec::new());
        let mut cx = LedgerContext::new(&mut forced, &store, &mut ops);
        let t = 1_795_000_000_000;
        let mut nodes = vec![("/l".to_string(), node(0, t))];
        for lock in ["a", "b", "c"] {
            nodes.push((format!("/l/{lock}"), node(0, t)));
            nodes.push((format!("/l/{lock}/lock-0000000001"), node(0x11, t)));
            nodes.push((format!("/l/{lock}/lock-0000000002"), node(0x22, t)));
        }
        nodes.push(("/l/c/lock-0000000003".to_string(), node(0x33, t)));
        state.apply(
            ZkUpdate::Resync {
                nodes,
                unreadable: vec![],
            },
            &mut cx,
        );
        state.flush(&|_| true);
        assert_eq!(state.participants.len(), 3);
        assert_eq!(state.participants[&0x11], 3);
        // The first round: every view.
        let clients = [
            (0x11, "10.0.0.1:1"),
            (0x22, "10.0.0.2:1"),
            (0x33, "10.0.0.3:1"),
        ];
        state.apply(ZkUpdate::Ensemble(round(&[], &clients)), &mut cx);
        assert_eq!(state.dirty_locks.len(), 3);
        state.flush(&|_| true);
        // The same round again: none.
        state.apply(ZkUpdate::Ensemble(round(&[], &clients)), &mut cx);
        assert!(state.dirty_locks.is_empty(), "{:?}", state.dirty_locks);
        // 0x22 starts watching the holder of /l/a (and lockscope's own watch is no watcher).
        let watched = [("/l/a/lock-0000000001", 0x22), ("/l/b", 0x99)];
        state.apply(ZkUpdate::Ensemble(round(&watched, &clients)), &mut cx);
        assert_eq!(
            state.dirty_locks.iter().collect::<Vec<_>>(),
            ["/l/a", "/l/b"]
        );
        let views = state.flush(&|_| true);
        assert_eq!(views.len(), 1, "/l/b's view is unchanged");
        assert_eq!(views[0].1.render(&views[0].0).watchers, 1);
        // 0x33 (a waiter of /l/c only) moves to another client address.
        let moved = [
            (0x11, "10.0.0.1:1"),
            (0x22, "10.0.0.2:1"),
            (0x33, "10.0.0.4:1"),
        ];
        state.apply(ZkUpdate::Ensemble(round(&watched, &moved)), &mut cx);
        assert_eq!(state.dirty_locks.iter().collect::<Vec<_>>(), ["/l/c"]);
        // The holder of /l/c goes: 0x11 owns two participants, 0x33 still one.
        state.apply(
            ZkUpdate::Removed {
                path: "/l/c/lock-0000000001".into(),
                at_ms: t + 1,
            },
            &mut cx,
        );
        assert_eq!(state.participants[&0x11], 2);
        assert_eq!(state.participants[&0x33], 1);
        state.apply(
            ZkUpdate::Removed {
                path: "/l/c/lock-0000000003".into(),
                at_ms: t + 2,
            },
            &mut cx,
        );
        assert!(!state.participants.contains_key(&0x33));
    }

    #[test]
    fn a_member_rebuilds_the_path_it_was_decoded_with() {
        let p = |node: &str| Participant {
            node: node.to_string(),
            session: 1,
            ctime_ms: 2,
            czxid: 3,
            seq: None,
            mode: None,
        };
        for (container, node, place) in [
            ("/l/ex", "/l/ex", Place::Itself),
            ("/l/q", "/l/q/lock-0000000001", Place::Child),
            ("/", "/lock-0000000001", Place::Child),
            ("/s", "/s/leases/_c_x-lease-0000000001", Place::Lease),
            (
                "/k/pool",
                "/k/pool-__lock__/ab__lock__0000000002",
                Place::KazooQueue,
            ),
            ("/a", "/b/c", Place::Path),
        ] {
            let member = Member::new(&p(node), container, 0);
            assert_eq!(member.place, place, "{node}");
            assert_eq!(member.path(container), node);
        }
    }
}
