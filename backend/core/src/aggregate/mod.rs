//! The lock table: the neutral core of lockscope and the one task that owns lock state.
//!
//! It knows no backend. Each configured source is a [`Source`]: its backend's typed
//! [`Model`] joined to the queue its collector's outbox fills (`collect::connect`), built by
//! the backend's descriptor (`backend.rs`) and held behind the neutral [`SourceModel`] methods.
//! A collector's send rings the table ([`SourceUpdate`]: its source's index) and the table has
//! that source apply the oldest update in its queue, typed end to end. A
//! model books what it observes through the backend-neutral [`ledger`] (holders and waiters by
//! id → events, counters, hold/wait times, history) into [`LedgerContext::lock_ops`]; the table
//! publishes:
//! * a [`Snapshot`] through a `watch` channel (read by the HTTP list endpoints), and
//! * a [`Delta`] per changed or removed lock through a `broadcast` channel (the SSE stream).
//!
//! Requests that need more than the snapshot (a lock's events, sessions, metrics) are
//! [`Command`]s with a `oneshot` reply. Nothing else holds or mutates lock state, and no lock is
//! held across an `.await`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::wire::{
    Backend, LockDetail, LockEvent, LockView, ReleaseCause, SessionView, SourceView,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::now_ms;
use lockscope_model::rules::Judge;

pub mod counters;
pub mod gauges;
pub mod ledger;
pub mod stored;
pub mod summary;
pub mod unrecognised;

pub use imbl::ordmap::DiffItem;
pub use stored::StoredLock;
pub use summary::{Entry, Names, Summary, Timeline};

use counters::{CoreMetrics, LockCounters, MetricsInput};
use gauges::{GaugeCollector, GaugeState};

/// What the lock table asks of one configured source, whatever its backend: its view, its
/// locks' history, its sessions, its figures and the work it leaves to the end of a burst or to
/// the periodic tick. Object safe: the table holds every source behind it ([`Source`]).
pub trait SourceModel: Send + 'static {
    /// The source's view (name, backend, up, synced, counts, errors).
    fn view(&mut self) -> SourceView;
    /// The history of lock `id`, current or gone, if this source keeps it.
    fn history_of(&self, id: &str) -> Option<&History>;
    /// The sessions (connections, leases, clients) that hold, wait or are connected.
    fn sessions(&self) -> Vec<SessionView>;
    /// Adds this source's own figures to a scrape's input (its lock gauges and counters are
    /// kept current by the table).
    fn metrics(&self, input: &mut MetricsInput);
    /// The counters the source books acquisitions and releases in (the table attaches them to
    /// its registry).
    fn counters(&mut self) -> &mut LockCounters;
    /// Recipes shown in `lockscope_locks` at 0 while the source has none of them.
    fn known_recipes(&self) -> Vec<&'static str> {
        Vec::new()
    }
    /// Every recipe label this source's locks can carry (`recipe` on the lock gauges); a
    /// recipe outside it is labelled `other`, so the label's cardinality is bounded.
    fn recipe_labels(&self) -> &'static [&'static str];
    /// The servers a force release of this source must be able to ask, as the source has
    /// discovered them (`Releaser::release`'s `members`); `None` where a release needs none.
    fn members(&self) -> Option<Vec<String>> {
        None
    }
    /// Work a source leaves to the end of a burst of updates.
    fn end_of_burst(&mut self, _cx: &mut LedgerContext<'_>) {}
    /// Periodic work (every 500 ms), such as booking what waited too long for a verdict.
    fn housekeeping(&mut self, _cx: &mut LedgerContext<'_>) {}
    /// Whether [`SourceModel::flush`] has lock views to publish.
    fn has_dirty_locks(&self) -> bool {
        false
    }
    /// Lock records (by id) a source builds at publish time rather than into `lock_ops`,
    /// after every `lock_ops` entry of the burst; `published` says whether a lock id is in the
    /// snapshot.
    fn flush(&mut self, _published: &dyn Fn(&str) -> bool) -> Vec<(Arc<str>, StoredLock)> {
        Vec::new()
    }
}

/// A backend's model of one source: the neutral [`SourceModel`] plus how it applies the
/// updates of its own type that its collector sends.
pub trait Model: SourceModel {
    /// What this backend's collector sends.
    type Update: Send + 'static;
    /// Applies one update, booking changes through `cx`; sets `cx.source_changed` when the
    /// source's own view changed.
    fn apply(&mut self, update: Self::Update, cx: &mut LedgerContext<'_>);
    /// How much work applying `update` is, in locks or keys: from
    /// [`crate::collect::BIG_WORK`] on (a first read's), it is applied off the runtime's
    /// worker.
    fn weight(_update: &Self::Update) -> usize {
        1
    }
}

/// One configured source as the table holds it: a [`Model`] and the queue its collector
/// fills, behind the neutral methods (built by `collect::connect`, which owns the queue).
pub trait Source: SourceModel {
    /// Applies the oldest update in the queue (one was pushed for each [`SourceUpdate`]).
    fn apply_queued(&mut self, cx: &mut LedgerContext<'_>);
}

/// A collector's ring: the index of its source among all configured sources (the order the
/// registry built them in), sent once its update is in that source's queue. Collectors send
/// through an `Outbox` (`collect/`), the only place one is built.
#[derive(Debug, Clone, Copy)]
pub struct SourceUpdate {
    pub source: usize,
}

/// Counts updates sent by every collector, so a reader can wait until the table has applied
/// everything sent so far ([`Handle::settled`]).
pub type SentCounter = std::sync::Arc<std::sync::atomic::AtomicU64>;

/// A collector's own counters, exported as `lockscope_collector_*`.
#[derive(Debug)]
pub struct SourceStats {
    pub source: String,
    pub backend: Backend,
    /// Updates sent to the lock table.
    pub events: std::sync::atomic::AtomicU64,
    /// Connections lost and retried.
    pub reconnects: std::sync::atomic::AtomicU64,
    /// Backlogs of changes dropped for a full re-read (changes came faster than they were read).
    pub overflows: std::sync::atomic::AtomicU64,
    /// The source's first full read so far: keys (or nodes) listed, and lock keys read.
    pub bootstrap_scanned: std::sync::atomic::AtomicU64,
    pub bootstrap_read: std::sync::atomic::AtomicU64,
    /// The source's first full read lists keys and counts them (`bootstrap_scanned`/`_read`,
    /// exported as `lockscope_source_bootstrap_keys_*`).
    pub scans_keys: bool,
    /// Its holders and waiters belong to sessions a wait-for graph can join (deadlock cycles
    /// are counted for it).
    pub sessions: bool,
}

impl SourceStats {
    pub fn new(source: &str, backend: Backend) -> Self {
        SourceStats {
            source: source.to_string(),
            backend,
            scans_keys: false,
            sessions: true,
            events: Default::default(),
            reconnects: Default::default(),
            overflows: Default::default(),
            bootstrap_scanned: Default::default(),
            bootstrap_read: Default::default(),
        }
    }
}

/// Updates queued from the collectors to the aggregator at most; a collector waits when it is
/// full (and a Redis or etcd server then waits for it).
pub const UPDATE_QUEUE: usize = 8192;

/// Events kept per lock for `/api/v1/locks/{id}`.
const EVENTS_PER_LOCK: usize = 100;
/// Histories of vanished locks kept so a lock that comes back keeps its timeline.
pub const HISTORY_LIMIT: usize = 10_000;
/// What the read endpoints serve without asking the aggregator.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub version: u64,
    pub sources: Vec<SourceView>,
    /// Each lock's record by its id, rendered into a view when read ([`Snapshot::lock`],
    /// [`Snapshot::views`]). A persistent map: publishing a change copies a path, not 100k
    /// entries; the records are shared with the ledgers, not copied. Each record has its
    /// [`Summary`] beside it: the summary index queries walk instead of rendering every lock.
    pub locks: imbl::OrdMap<Arc<str>, Entry>,
    /// When each lock's stale or stuck state turns as time passes ([`summary::turning`]).
    pub timeline: Timeline,
    /// The source and recipe names summaries number.
    pub names: Arc<Names>,
}

impl Snapshot {
    /// Every configured source finished its first sync.
    pub fn ready(&self) -> bool {
        self.sources.iter().all(|s| s.synced)
    }

    /// The view of lock `id`, when it is current (marked last seen while its source is not
    /// up).
    pub fn lock(&self, id: &str) -> Option<LockView> {
        let marks = self.marks();
        self.locks
            .get(id)
            .map(|entry| marked(&marks, entry.stored.render(id)))
    }

    /// Every current lock's view, in id order, each rendered as the iterator reaches it (and
    /// marked last seen while its source is not up).
    pub fn views(&self) -> impl Iterator<Item = LockView> + '_ {
        let marks = self.marks();
        self.locks
            .iter()
            .map(move |(id, entry)| marked(&marks, entry.stored.render(id)))
    }

    /// `stored`'s view (lock `id`, from a delta), marked last seen while its source is not up
    /// in this snapshot.
    pub fn render_marked(&self, id: &str, stored: &StoredLock) -> LockView {
        marked(&self.marks(), stored.render(id))
    }

    /// The sources not up that were, each with when it was last seen: their locks are shown
    /// as they were then. Usually none.
    fn marks(&self) -> Vec<(&str, i64)> {
        self.sources
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.lock_mark()?)))
            .collect()
    }
}

/// `view` with its source's last sight, when its source is among `marks` (not up).
fn marked(marks: &[(&str, i64)], mut view: LockView) -> LockView {
    if !marks.is_empty() {
        view.source_last_seen_ms = marks
            .iter()
            .find(|(source, _)| *source == view.source)
            .map(|(_, at)| *at);
    }
    view
}

/// The order to apply a burst's lock changes in. A burst of new locks in id order (a first
/// read: Redis sorts its scan) would leave every node of the snapshot's B-trees half full (a
/// node splits in the middle, and nothing lands in the left half again), and the index and
/// the timeline are 40 % of a lock's memory. Applied as every other lock, then the rest, the
/// first pass leaves half-full nodes and the second fills them: full nodes. Only a burst of
/// puts in strictly increasing id order is reordered (every id once, so no change to one lock
/// passes another); any other burst is applied as it happened.
fn fill_order(ops: Vec<LockOp>) -> Vec<LockOp> {
    if ops.len() < 64 {
        return ops;
    }
    let sorted = ops.windows(2).all(|pair| match pair {
        [LockOp::Put(a, _), LockOp::Put(b, _)] => a < b,
        _ => false,
    });
    if !sorted {
        return ops;
    }
    let (mut first, mut second) = (Vec::with_capacity(ops.len()), Vec::new());
    second.reserve(ops.len() / 2);
    for (i, op) in ops.into_iter().enumerate() {
        if i % 2 == 0 {
            first.push(op)
        } else {
            second.push(op)
        }
    }
    first.append(&mut second);
    first
}

/// A lock change a source booked, to publish at the end of the burst. A change carries the
/// lock's record, not its view: a burst of a million changes (a first read) holds a million
/// records until it is published, not a million views.
#[derive(Debug, Clone)]
pub enum LockOp {
    /// The lock's new record, under its id.
    Put(Arc<str>, StoredLock),
    Removed(String),
}

/// One change, stamped with the snapshot version that contains it.
#[derive(Debug, Clone)]
pub struct Delta {
    pub version: u64,
    pub change: Change,
}

#[derive(Debug, Clone)]
pub enum Change {
    /// The lock's new record, under its id (a subscriber renders the view it sends).
    Lock(Arc<str>, StoredLock),
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
    /// The member URLs of a source ([`SourceModel::members`]).
    Members {
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
    /// The table's lock counters, histograms and gauges, kept current as locks change (this
    /// table's own registry; there is no global one).
    pub registry: Arc<prometheus_client::registry::Registry>,
}

/// The store reads the live table through this when it starts writing the history.
impl lockscope_store::LiveLocks for Handle {
    fn page(
        &self,
        prefix: &str,
        after: Option<&str>,
        n: usize,
    ) -> Vec<(Arc<str>, Arc<dyn lockscope_store::LockRecord>)> {
        use std::ops::Bound;
        let snapshot = self.snapshot.borrow().clone();
        let from = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(prefix),
        };
        snapshot
            .locks
            .range::<_, str>((from, Bound::Unbounded))
            .take_while(|(id, _)| id.starts_with(prefix))
            .take(n)
            .map(|(id, entry)| {
                (
                    id.clone(),
                    Arc::new(entry.stored.clone()) as Arc<dyn lockscope_store::LockRecord>,
                )
            })
            .collect()
    }

    fn sources(&self) -> Vec<(String, bool)> {
        self.snapshot
            .borrow()
            .sources
            .iter()
            .map(|s| (s.name.clone(), s.synced))
            .collect()
    }
}

impl lockscope_store::LockRecord for StoredLock {
    fn view(&self, id: &str) -> LockView {
        self.render(id)
    }
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
    pub events: VecDeque<LockEvent>,
    pub acquisitions: u64,
    pub releases: u64,
    /// The lock's last view, kept while it is in a graveyard (gone from the snapshot).
    pub last: Option<Arc<LockView>>,
}

impl History {
    /// Events in time order (release causes resolve after the fact).
    pub fn sorted_events(&self) -> Vec<LockEvent> {
        let mut events: Vec<LockEvent> = self.events.iter().cloned().collect();
        events.sort_by_key(|e| e.at_ms);
        events
    }

    /// Books one release of `node` (of `session`) at `at_ms` after holding `held_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn released(
        &mut self,
        store: &Option<lockscope_store::Store>,
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
    pub fn buried(mut self, view: &LockView, now: i64) -> History {
        let mut last = view.clone().gone(now);
        last.acquisitions = self.acquisitions;
        last.releases = self.releases;
        self.last = Some(Arc::new(last));
        self
    }
}

pub struct Aggregator {
    /// Every configured source's model, in snapshot order (an update's `source` indexes it).
    sources: Vec<Box<dyn Source>>,
    /// Updates applied and published so far (read by [`Handle::settled`]).
    applied: u64,
    applied_tx: watch::Sender<u64>,
    /// Sources whose own view changed since the last publish.
    dirty_sources: BTreeSet<usize>,
    max_labels: usize,
    /// The metric families the backends register ([`Aggregator::with_families`]).
    families: Vec<&'static counters::BackendFamily>,
    version: u64,
    snapshot: Arc<Snapshot>,
    snapshot_tx: watch::Sender<Arc<Snapshot>>,
    delta_tx: broadcast::Sender<Arc<Delta>>,
    /// Lock views replaced and locks removed since the last publish, in the order they
    /// happened: a lock removed and back in one burst (a key deleted and set again) must end
    /// up present, one changed and then removed must end up gone.
    lock_ops: Vec<LockOp>,
    /// Where lock events are also written (the lock history), when a store is configured.
    store: Option<lockscope_store::Store>,
    /// Holders being force-released: (lock id, holder) → when marked.
    forced: ForcedMarks,
    /// Lock gauges, changed with every lock published (read by scrapes through the registry).
    gauges: Arc<std::sync::Mutex<GaugeState>>,
    /// Each source's last lock change after its first sync, as published in its view (to the
    /// second: a source that changes all the time republishes its view once a second, not
    /// with every burst).
    last_change_ms: Vec<Option<i64>>,
    /// Numbers of the source and recipe names in summaries.
    interner: summary::Interner,
    /// What summaries are judged by ([`Aggregator::with_judge`]).
    judge: Judge,
}

/// Lock changes from which a publish runs off the runtime's worker ([`off_the_worker`]).
const BIG_BURST: usize = crate::collect::BIG_WORK;

use crate::collect::off_the_worker;

/// The source name of a published lock change (an id is its source's name, then `~`).
fn changed_source(change: &Change) -> Option<&str> {
    let id = match change {
        Change::Lock(id, _) => &**id,
        Change::Removed(id) => id.as_str(),
        Change::Source(_) => return None,
    };
    id.split_once('~').map(|(source, _)| source)
}

/// Stores the record `stored` of lock `id` and books the change in the gauges and the
/// deltas, unless the record is the one stored already (a source that rebuilt an unchanged
/// view).
fn put(index: &mut Indexing<'_>, changes: &mut Vec<Change>, id: Arc<str>, stored: StoredLock) {
    let (id, old) = match index.locks.get_key_value(&*id) {
        Some((_, old)) if old.stored == stored => return,
        // The key already stored is kept (the snapshots that share it keep one copy).
        Some((key, old)) => (key.clone(), Some((old.stored.render(key), old.summary))),
        None => (id, None),
    };
    let view = stored.render(&id);
    let summary = Summary::of(
        &view,
        index.interner.source(&view.source),
        index.interner.recipe(&view.recipe),
        index.judge,
    );
    summary::retime(
        index.timeline,
        &id,
        old.as_ref().map(|(_, s)| s),
        Some(&summary),
        index.now,
    );
    index.locks.insert(
        id.clone(),
        Entry {
            stored: stored.clone(),
            summary,
        },
    );
    index
        .gauges
        .change(old.as_ref().map(|(view, _)| view), Some(&view));
    changes.push(Change::Lock(id, stored));
}

/// What storing a record changes besides the deltas: the table with its summaries, the
/// timeline and the gauges.
struct Indexing<'a> {
    locks: &'a mut imbl::OrdMap<Arc<str>, Entry>,
    timeline: &'a mut Timeline,
    interner: &'a mut summary::Interner,
    judge: &'a Judge,
    gauges: &'a mut GaugeState,
    now: i64,
}

/// Every source's view, in snapshot order, with its last change as the aggregator saw it.
fn source_views(
    sources: &mut [Box<dyn Source>],
    last_change_ms: &[Option<i64>],
) -> Vec<SourceView> {
    sources
        .iter_mut()
        .zip(last_change_ms)
        .map(|(s, &last_change_ms)| SourceView {
            last_change_ms,
            ..s.view()
        })
        .collect()
}

impl Aggregator {
    /// Builds the table over `sources` (the registry builds them from the config, in snapshot
    /// order, with `collector_stats` in the same order) and the handle to read it.
    pub fn new(
        mut sources: Vec<Box<dyn Source>>,
        max_labels: usize,
        collector_stats: Vec<Arc<SourceStats>>,
        sent: SentCounter,
    ) -> (Aggregator, Handle, mpsc::Receiver<Command>) {
        let metrics = CoreMetrics::default();
        let mut gauges = GaugeState::default();
        for source in &mut sources {
            let view = source.view();
            let recipes = source.known_recipes();
            let counters = source.counters();
            counters.attach(&view.name, &metrics);
            let labels = counters.label_table();
            gauges.add_source(&view.name, labels, source.recipe_labels(), &recipes);
        }
        let gauges = Arc::new(std::sync::Mutex::new(gauges));
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        registry.register_collector(Box::new(GaugeCollector {
            state: gauges.clone(),
        }));
        let last_change_ms = vec![None; sources.len()];
        let views = source_views(&mut sources, &last_change_ms);
        let names: Vec<String> = views.iter().map(|v| v.name.clone()).collect();
        let interner = summary::Interner::new(&names);
        let snapshot = Arc::new(Snapshot {
            version: 0,
            sources: views,
            locks: imbl::OrdMap::new(),
            timeline: Timeline::new(),
            names: interner.names(),
        });
        let (snapshot_tx, snapshot_rx) = watch::channel(snapshot.clone());
        let (delta_tx, _) = broadcast::channel(4096);
        let (cmd_tx, cmd_rx) = mpsc::channel(256);
        let (applied_tx, applied_rx) = watch::channel(0);
        let handle = Handle {
            snapshot: snapshot_rx,
            deltas: delta_tx.clone(),
            commands: cmd_tx,
            sent,
            applied: applied_rx,
            collector_stats,
            registry: Arc::new(registry),
        };
        let agg = Aggregator {
            sources,
            applied: 0,
            applied_tx,
            dirty_sources: BTreeSet::new(),
            max_labels,
            version: 0,
            snapshot,
            snapshot_tx,
            delta_tx,
            lock_ops: Vec::new(),
            store: None,
            families: Vec::new(),
            forced: HashMap::new(),
            last_change_ms,
            gauges,
            interner,
            judge: Judge::default(),
        };
        (agg, handle, cmd_rx)
    }

    /// Exports `families` (the backends' own, `lockscope_db_rounds` …) in every scrape, with
    /// the samples their sources give or none.
    pub fn with_families(mut self, families: Vec<&'static counters::BackendFamily>) -> Self {
        self.families = families;
        self
    }

    /// Judges summaries by `judge` (the one the API judges lock views by: `[stuck]` and the
    /// stale-hold limit), so the index agrees with the views it stands for.
    pub fn with_judge(mut self, judge: Judge) -> Self {
        self.judge = judge;
        self
    }

    /// Writes lock events to `store` as well (the persistent lock history).
    pub fn with_store(mut self, store: Option<lockscope_store::Store>) -> Self {
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
                        if self.lock_ops.len() >= BIG_BURST {
                            // Seconds of work at a first read of a million locks: this
                            // worker's other tasks (heartbeats, HTTP) move to another.
                            off_the_worker(|| self.publish());
                        } else {
                            self.publish();
                        }
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

    /// Hands an update to its source's model; a source not configured is logged (the
    /// registry builds outboxes only for configured sources, so this is a bug if it happens).
    fn apply(&mut self, update: SourceUpdate) {
        let mut cx = LedgerContext::new(&mut self.forced, &self.store, &mut self.lock_ops);
        let Some(source) = self.sources.get_mut(update.source) else {
            tracing::error!(
                source = update.source,
                "update for a source that is not configured"
            );
            return;
        };
        source.apply_queued(&mut cx);
        if cx.source_changed {
            self.dirty_sources.insert(update.source);
        }
    }

    /// Work left to the end of a burst (ZooKeeper's large containers).
    fn end_of_burst(&mut self) {
        let mut cx = LedgerContext::new(&mut self.forced, &self.store, &mut self.lock_ops);
        for (index, source) in self.sources.iter_mut().enumerate() {
            cx.source_changed = false;
            source.end_of_burst(&mut cx);
            if cx.source_changed {
                self.dirty_sources.insert(index);
            }
        }
    }

    /// Each source's periodic housekeeping (ZooKeeper: releases whose cause no ensemble round
    /// judged in time are booked as plain releases).
    fn expire_pending(&mut self) {
        let mut cx = LedgerContext::new(&mut self.forced, &self.store, &mut self.lock_ops);
        for source in &mut self.sources {
            source.housekeeping(&mut cx);
        }
    }

    /// Publishes changed locks and sources as one new snapshot version plus deltas.
    fn publish(&mut self) {
        if self.lock_ops.is_empty()
            && !self.sources.iter().any(|s| s.has_dirty_locks())
            && self.dirty_sources.is_empty()
        {
            return;
        }
        let mut changes = Vec::new();
        let mut gone: Vec<(Arc<str>, StoredLock)> = Vec::new();
        let mut locks = self.snapshot.locks.clone();
        let mut timeline = self.snapshot.timeline.clone();
        let mut gauges = self
            .gauges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = now_ms();
        let mut index = Indexing {
            locks: &mut locks,
            timeline: &mut timeline,
            interner: &mut self.interner,
            judge: &self.judge,
            gauges: &mut gauges,
            now,
        };
        // In order of occurrence first; then the ZooKeeper views built now from current state
        // (a ZooKeeper lock removed drops out of its dirty set, one back re-enters it).
        for op in fill_order(std::mem::take(&mut self.lock_ops)) {
            match op {
                LockOp::Put(id, stored) => put(&mut index, &mut changes, id, stored),
                LockOp::Removed(id) => {
                    if let Some((key, old)) = index.locks.remove_with_key(id.as_str()) {
                        index.gauges.change(Some(&old.stored.render(&id)), None);
                        summary::retime(index.timeline, &key, Some(&old.summary), None, now);
                        if self.store.is_some() {
                            gone.push((key, old.stored));
                        }
                        changes.push(Change::Removed(id));
                    }
                }
            }
        }
        for source in &mut self.sources {
            let flushed = source.flush(&|id| index.locks.contains_key(id));
            for (id, stored) in flushed {
                put(&mut index, &mut changes, id, stored);
            }
        }
        drop(gauges);
        // A lock change after a source's first sync is its last event (the first full read is
        // not one); published to the second.
        let mut due: HashMap<&str, usize> = self
            .snapshot
            .sources
            .iter()
            .enumerate()
            .filter(|&(i, was)| {
                was.synced && self.last_change_ms[i].is_none_or(|at| now - at >= 1000)
            })
            .map(|(i, was)| (was.name.as_str(), i))
            .collect();
        // One pass over the changes, ending once every due source is found.
        for change in &changes {
            if due.is_empty() {
                break;
            }
            if let Some(index) = changed_source(change).and_then(|name| due.remove(name)) {
                self.last_change_ms[index] = Some(now);
                self.dirty_sources.insert(index);
            }
        }
        let views = source_views(&mut self.sources, &self.last_change_ms);
        for index in std::mem::take(&mut self.dirty_sources) {
            changes.push(Change::Source(views[index].clone()));
        }
        if changes.is_empty() {
            return;
        }
        if let Some(store) = &self.store {
            store.lock_states(
                changes
                    .iter()
                    .filter_map(|change| match change {
                        Change::Lock(id, stored) => Some((
                            id.clone(),
                            lockscope_store::StateChange::Live(Arc::new(stored.clone())),
                        )),
                        _ => None,
                    })
                    .chain(gone.into_iter().map(|(id, last)| {
                        (
                            id,
                            lockscope_store::StateChange::Gone {
                                last: Arc::new(last),
                                at_ms: now,
                            },
                        )
                    })),
            );
        }
        self.version += 1;
        let snapshot = Arc::new(Snapshot {
            version: self.version,
            sources: views,
            locks,
            timeline,
            names: self.interner.names(),
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
        self.sources.iter().find_map(|s| s.history_of(id))
    }

    /// A lock no longer in the snapshot: its last view and events, from the graveyard.
    fn gone_detail(&self, id: &str) -> Option<LockDetail> {
        let history = self.history_of(id)?;
        let last = history.last.as_ref()?;
        Some(LockDetail {
            lock: (**last).clone(),
            events: history.sorted_events(),
            gone: true,
            gone_ms: Some(last.changed_ms),
            gone_unseen: false,
            history_unavailable: None,
        })
    }

    fn answer(&mut self, command: Command) {
        match command {
            Command::LockDetail { id, reply } => {
                let detail = self.snapshot.lock(&id).map(|lock| LockDetail {
                    events: self
                        .history_of(&lock.id)
                        .map(History::sorted_events)
                        .unwrap_or_default(),
                    lock,
                    gone: false,
                    gone_ms: None,
                    gone_unseen: false,
                    history_unavailable: None,
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
            Command::Members { source, reply } => {
                // The snapshot lists sources in the same order as `self.sources`.
                let members = self
                    .snapshot
                    .sources
                    .iter()
                    .position(|s| s.name == source)
                    .and_then(|i| self.sources[i].members());
                let _ = reply.send(members);
            }
        }
    }

    fn sessions(&self) -> Vec<SessionView> {
        self.sources.iter().flat_map(|s| s.sessions()).collect()
    }

    fn metrics_input(&self) -> MetricsInput {
        let mut input = MetricsInput::default();
        for source in &self.sources {
            source.metrics(&mut input);
        }
        input.max_labels = self.max_labels;
        input.families = self.families.clone();
        input
    }
}

/// The own figures of a source whose locks are in a [`ledger::Ledger`].
pub fn ledger_metrics<D>(
    view: &SourceView,
    ledger: &ledger::Ledger<D>,
    resyncs: u64,
) -> counters::SourceMetrics {
    counters::SourceMetrics {
        name: view.name.clone(),
        up: view.up,
        synced: view.synced,
        last_seen_ms: view.lock_mark(),
        nodes: view.nodes as u64,
        resyncs,
        folded: ledger.counters.folded(),
        unrecognised: view.unrecognised,
        bootstrap: None,
    }
}

/// What a backend's state needs from the aggregator to book changes in the ledger.
pub struct LedgerContext<'a> {
    pub now: i64,
    /// Holders being force-released (their release is `forced`), each with the epoch ms its
    /// mark expires at.
    pub forced: &'a mut ForcedMarks,
    pub store: &'a Option<lockscope_store::Store>,
    /// Lock views and removals to publish, in order.
    pub lock_ops: &'a mut Vec<LockOp>,
    /// The source's own view changed.
    pub source_changed: bool,
}

impl<'a> LedgerContext<'a> {
    /// A context for changes made now.
    pub fn new(
        forced: &'a mut ForcedMarks,
        store: &'a Option<lockscope_store::Store>,
        lock_ops: &'a mut Vec<LockOp>,
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
pub fn forced_or(
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
pub fn usual_hold_of(history: &History) -> Option<i64> {
    let holds: Vec<i64> = history
        .events
        .iter()
        .filter(|e| e.kind == "released")
        .filter_map(|e| e.duration_ms)
        .collect();
    lockscope_model::rules::usual_hold(&holds)
}

/// Keeps `event` in the lock's in-memory history and, with a store, in the persistent one.
pub fn push_event(
    store: &Option<lockscope_store::Store>,
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
    if events.capacity() == 0 {
        // Most locks have a few events: room for one (80 B), not the default growth's four.
        events.reserve_exact(1);
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

    #[test]
    fn only_a_burst_of_new_locks_in_id_order_is_reordered_and_none_is_lost() {
        let stored = StoredLock::encode(&lockscope_model::wire::LockView::default());
        let put = |i: usize| LockOp::Put(Arc::from(format!("r~/k{i:04}").as_str()), stored.clone());
        let ids = |ops: &[LockOp]| -> Vec<String> {
            ops.iter()
                .map(|op| match op {
                    LockOp::Put(id, _) => id.to_string(),
                    LockOp::Removed(id) => format!("-{id}"),
                })
                .collect()
        };
        let sorted: Vec<LockOp> = (0..1000).map(put).collect();
        let reordered = ids(&fill_order(sorted.clone()));
        let mut expected: Vec<String> = ids(&sorted).into_iter().step_by(2).collect();
        expected.extend(ids(&sorted).into_iter().skip(1).step_by(2));
        assert_eq!(reordered, expected);
        // A repeated id, a removal, or an order that is not increasing: as it happened.
        for ops in [
            (0..1000).map(|i| put(i.min(998))).collect::<Vec<_>>(),
            (0..1000)
                .map(|i| {
                    if i == 500 {
                        LockOp::Removed("r~/k0500".into())
                    } else {
                        put(i)
                    }
                })
                .collect(),
            (0..1000).rev().map(put).collect(),
        ] {
            assert_eq!(ids(&fill_order(ops.clone())), ids(&ops));
        }
    }

    /// The per-lock records' sizes, as ARCHITECTURE.md's "What a lock costs" counts them: a
    /// change here changes every lock's cost, so it is a decision, not an accident.
    #[test]
    fn per_lock_records_keep_their_size() {
        use lockscope_model::wire::{HolderView, LockEvent, LockView};
        use std::mem::size_of;
        assert_eq!(size_of::<LockView>(), 432);
        assert_eq!(size_of::<HolderView>(), 152);
        assert_eq!(size_of::<lockscope_model::wire::WaiterView>(), 152);
        assert_eq!(size_of::<LockEvent>(), 80);
        assert_eq!(size_of::<History>(), 56);
        assert_eq!(size_of::<ledger::LedgerLock>(), 40);
        assert_eq!(size_of::<StoredLock>(), 8);
    }
}
