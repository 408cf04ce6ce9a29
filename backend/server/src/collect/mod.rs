//! Collectors: the tasks that talk to coordination servers and report what they hold.
//!
//! A collector owns its connections and nothing else: it sends its backend's updates through
//! an [`Outbox`] over one bounded channel to the aggregator, which owns all lock state.
//! Collectors never read the model.

use std::collections::{BTreeMap, BTreeSet};

use lockscope_model::zk::NodeMeta;

pub mod redis;
pub mod zk;

/// A message from a collector, addressed to its source. The variant names the backend and
/// carries that backend's own update type, and `source` indexes that backend's sources only:
/// an update cannot reach a source of another backend. Collectors send through an [`Outbox`],
/// the only place one is built.
#[derive(Debug)]
pub enum SourceUpdate {
    Zookeeper { source: usize, update: ZkUpdate },
    Redis { source: usize, update: RedisUpdate },
    Etcd { source: usize, update: EtcdUpdate },
}

/// A backend's update type: addressed to one of that backend's sources.
pub trait BackendUpdate: Send + Sized + 'static {
    fn addressed(self, source: usize) -> SourceUpdate;
}

impl BackendUpdate for ZkUpdate {
    fn addressed(self, source: usize) -> SourceUpdate {
        SourceUpdate::Zookeeper {
            source,
            update: self,
        }
    }
}

impl BackendUpdate for RedisUpdate {
    fn addressed(self, source: usize) -> SourceUpdate {
        SourceUpdate::Redis {
            source,
            update: self,
        }
    }
}

impl BackendUpdate for EtcdUpdate {
    fn addressed(self, source: usize) -> SourceUpdate {
        SourceUpdate::Etcd {
            source,
            update: self,
        }
    }
}

/// Counts updates sent by every collector, so a reader can wait until the aggregator has
/// applied everything sent so far ([`crate::aggregate::Handle::settled`]).
pub type SentCounter = std::sync::Arc<std::sync::atomic::AtomicU64>;

/// A collector's own counters, exported as `lockscope_collector_*` (see [`crate::metrics`]).
#[derive(Debug)]
pub struct SourceStats {
    pub source: String,
    pub backend: lockscope_model::wire::Backend,
    /// Updates sent to the aggregator.
    pub events: std::sync::atomic::AtomicU64,
    /// Connections lost and retried.
    pub reconnects: std::sync::atomic::AtomicU64,
    /// Backlogs of changes dropped for a full re-read (changes came faster than they were read).
    pub overflows: std::sync::atomic::AtomicU64,
}

impl SourceStats {
    pub fn new(source: &str, backend: lockscope_model::wire::Backend) -> Self {
        SourceStats {
            source: source.to_string(),
            backend,
            events: Default::default(),
            reconnects: Default::default(),
            overflows: Default::default(),
        }
    }
}

/// One source's way to the aggregator: stamps the source, counts what it sends, and answers
/// `false` once the aggregator is gone (the collector then ends).
pub struct Outbox<U: BackendUpdate> {
    source: usize,
    tx: tokio::sync::mpsc::Sender<SourceUpdate>,
    sent: SentCounter,
    stats: std::sync::Arc<SourceStats>,
    _update: std::marker::PhantomData<fn(U)>,
}

impl<U: BackendUpdate> Clone for Outbox<U> {
    fn clone(&self) -> Self {
        Outbox {
            source: self.source,
            tx: self.tx.clone(),
            sent: self.sent.clone(),
            stats: self.stats.clone(),
            _update: std::marker::PhantomData,
        }
    }
}

impl<U: BackendUpdate> Outbox<U> {
    /// The outbox of `source` (an index among its backend's sources).
    pub fn new(
        source: usize,
        tx: tokio::sync::mpsc::Sender<SourceUpdate>,
        sent: SentCounter,
        stats: std::sync::Arc<SourceStats>,
    ) -> Self {
        Outbox {
            source,
            tx,
            sent,
            stats,
            _update: std::marker::PhantomData,
        }
    }

    /// Sends (waiting while the aggregator's queue is full); `false` when it has stopped.
    pub async fn send(&self, update: U) -> bool {
        use std::sync::atomic::Ordering;
        self.sent.fetch_add(1, Ordering::SeqCst);
        if self.tx.send(update.addressed(self.source)).await.is_ok() {
            self.stats.events.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            self.sent.fetch_sub(1, Ordering::SeqCst);
            false
        }
    }

    /// Counts a lost connection that the collector retries.
    pub fn reconnected(&self) {
        self.stats
            .reconnects
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts a backlog of changes dropped for a full re-read.
    pub fn overflowed(&self) {
        self.stats
            .overflows
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Updates queued for the aggregator now (all sources).
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

/// What a ZooKeeper collector reports.
#[derive(Debug)]
pub enum ZkUpdate {
    /// Connection state changed. `up == false` carries the reason.
    Status { up: bool, error: Option<String> },
    /// A full read of every watched root, replacing the mirror (bootstrap and every reconnect).
    Resync {
        nodes: Vec<(String, NodeMeta)>,
        /// Nodes whose children could not be read (ACLs).
        unreadable: Vec<String>,
    },
    /// A node was created or changed.
    Upsert { path: String, meta: NodeMeta },
    /// A node was deleted; `at_ms` is when the collector heard of it, which a backlog in the
    /// aggregator must not move (release causes compare it with ensemble polls).
    Removed { path: String, at_ms: i64 },
    /// Watches and sessions as every ensemble member reports them.
    Ensemble(EnsembleReport),
}

/// What a Redis collector reports.
#[derive(Debug)]
pub enum RedisUpdate {
    /// The members (masters) of the source, in index order; resets per-member state.
    Members { members: Vec<String> },
    /// A member's (or, with `None`, the whole source's) connection state.
    Status {
        member: Option<usize>,
        up: bool,
        error: Option<String>,
    },
    /// Fresh reads of lock keys on one member. With `full`, these are all the member's lock
    /// keys (a scan): any other key lockscope knows there is gone.
    Keys {
        member: usize,
        full: bool,
        reports: Vec<KeyReport>,
    },
    /// Clients blocked in `BLPOP` on one member (python-redis-lock's waiters, which the
    /// server does not attribute to a key); sent when it changes while such locks exist there.
    Blocked { member: usize, clients: u32 },
    /// A member's changes came faster than it could read them: it dropped its backlog and
    /// catches up with a full scan (`true`), or that scan is in (`false`). A member's session
    /// starts and ends not lagging.
    Lagging { member: usize, lagging: bool },
}

pub use crate::backends::etcd::EtcdUpdate;

/// The one reconnect backoff every collector uses: 200 ms doubling to 5 s, back to 200 ms
/// after a connection that lasted 10 s.
#[derive(Debug)]
pub struct Backoff {
    next: std::time::Duration,
    started: tokio::time::Instant,
}

impl Backoff {
    pub const FIRST: std::time::Duration = std::time::Duration::from_millis(200);
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(5);
    /// A connection that lasted this long resets the backoff.
    pub const HEALTHY: std::time::Duration = std::time::Duration::from_secs(10);
    /// How long one connection attempt (or one request on it) may take.
    pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

    pub fn new() -> Self {
        Backoff {
            next: Self::FIRST,
            started: tokio::time::Instant::now(),
        }
    }

    /// A connection attempt starts now.
    pub fn attempt(&mut self) {
        self.started = tokio::time::Instant::now();
    }

    /// Waits before the next attempt: longer after each short-lived one.
    pub async fn wait(&mut self) {
        if self.started.elapsed() > Self::HEALTHY {
            self.next = Self::FIRST;
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Self::MAX);
    }
}

/// Tasks a collector spawned, aborted when it is dropped: a collector's sub-tasks end with
/// it, also when lockscope stops it by aborting.
#[derive(Debug, Default)]
pub struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl From<Vec<tokio::task::JoinHandle<()>>> for Tasks {
    fn from(tasks: Vec<tokio::task::JoinHandle<()>>) -> Self {
        Tasks(tasks)
    }
}

impl Tasks {
    /// Waits for every task to end.
    pub async fn join(mut self) {
        for task in std::mem::take(&mut self.0) {
            let _ = task.await;
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

/// One lock key as read on one member.
#[derive(Debug, Clone)]
pub struct KeyReport {
    pub key: Vec<u8>,
    /// `None` when the key is gone or holds nothing lock-like.
    pub lock: Option<lockscope_model::redis::RedisLock>,
    /// Connections subscribed to the lock's unlock channels (waiters that are not in Redis).
    pub watchers: u32,
    /// When it was read (epoch ms) and the PTTL it had then.
    pub at_ms: i64,
    pub pttl_ms: i64,
    /// Order in which the member's collector issued the read (a bigger one was sent later, on
    /// the same connection, so it saw the same or a later state). Wall-clock `at_ms` cannot
    /// order two reads made by different tasks: it is taken after the answer arrives.
    pub read_seq: u64,
}

/// One round of four-letter words over the ensemble.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnsembleReport {
    /// When the round started (epoch ms): no answer predates it.
    pub started_ms: i64,
    /// When the round finished (epoch ms): every answer predates it.
    pub at_ms: i64,
    /// lockscope's own session (excluded from watcher counts).
    pub own_session: Option<i64>,
    pub members: usize,
    pub members_answering: usize,
    pub errors: Vec<String>,
    /// Sessions with a data/exists watch, by path, merged over members.
    pub data_watchers: BTreeMap<String, BTreeSet<i64>>,
    /// Connected sessions: session → (member index, timeout ms).
    pub connections: BTreeMap<i64, (usize, Option<u64>)>,
    /// Child watches each member holds that `wchp` cannot name (`zk_watch_count` − `wchs` total).
    pub unnamed_child_watches: Vec<u64>,
    /// Sessions the leader's `dump` lists (every live session) with their expiry deadline
    /// (epoch ms), when the leader answered.
    pub live_sessions: Option<BTreeMap<i64, Option<i64>>>,
}
