//! Collectors: the tasks that talk to coordination servers and report what they hold.
//!
//! A collector owns its connections and nothing else: it sends its backend's updates through
//! an [`Outbox`] over one bounded channel to the aggregator, which owns all lock state.
//! Collectors never read the model.

/// A message from a collector, addressed to its source. The variant names the backend and
/// carries that backend's own update type, and `source` indexes that backend's sources only:
/// an update cannot reach a source of another backend. Collectors send through an [`Outbox`],
/// the only place one is built.
#[derive(Debug)]
pub enum SourceUpdate {
    Zookeeper {
        source: usize,
        update: ZkUpdate,
    },
    Redis {
        source: usize,
        update: RedisUpdate,
    },
    Etcd {
        source: usize,
        update: EtcdUpdate,
    },
    /// `source` indexes the database sources: `[[mysql]]` first, then `[[postgres]]`.
    Database {
        source: usize,
        update: DbUpdate,
    },
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

impl BackendUpdate for DbUpdate {
    fn addressed(self, source: usize) -> SourceUpdate {
        SourceUpdate::Database {
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
    /// The source's first full read so far: keys (or nodes) listed, and lock keys read.
    pub bootstrap_scanned: std::sync::atomic::AtomicU64,
    pub bootstrap_read: std::sync::atomic::AtomicU64,
}

impl SourceStats {
    pub fn new(source: &str, backend: lockscope_model::wire::Backend) -> Self {
        SourceStats {
            source: source.to_string(),
            backend,
            events: Default::default(),
            reconnects: Default::default(),
            overflows: Default::default(),
            bootstrap_scanned: Default::default(),
            bootstrap_read: Default::default(),
        }
    }
}

/// One source's way to the aggregator: stamps the source, counts what it sends, and answers
/// `false` once the aggregator is gone (the collector then ends).
pub struct Outbox<U: BackendUpdate> {
    source: usize,
    /// Turns `true` when lockscope shuts down.
    stop: tokio::sync::watch::Receiver<bool>,
    tx: tokio::sync::mpsc::Sender<SourceUpdate>,
    sent: SentCounter,
    stats: std::sync::Arc<SourceStats>,
    _update: std::marker::PhantomData<fn(U)>,
}

impl<U: BackendUpdate> Clone for Outbox<U> {
    fn clone(&self) -> Self {
        Outbox {
            source: self.source,
            stop: self.stop.clone(),
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
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Outbox {
            source,
            stop,
            tx,
            sent,
            stats,
            _update: std::marker::PhantomData,
        }
    }

    /// Sends (waiting while the aggregator's queue is full); `false` when it has stopped.
    pub async fn send(&self, update: U) -> bool {
        use std::sync::atomic::Ordering;
        /// Takes a send back from `sent` unless it went through: a collector dropped while it
        /// waits for room (at shutdown) must not leave the aggregator looking behind.
        struct Unsent<'a>(&'a SentCounter);
        impl Drop for Unsent<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.sent.fetch_add(1, Ordering::SeqCst);
        let unsent = Unsent(&self.sent);
        if self.tx.send(update.addressed(self.source)).await.is_ok() {
            std::mem::forget(unsent);
            self.stats.events.fetch_add(1, Ordering::Relaxed);
            true
        } else {
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

    /// Counts keys (nodes) the source's first full read listed (`lockscope_source_bootstrap_*`).
    pub fn bootstrap_scanned(&self, n: u64) {
        self.stats
            .bootstrap_scanned
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts lock keys (nodes) the source's first full read has read.
    pub fn bootstrap_read(&self, n: u64) {
        self.stats
            .bootstrap_read
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Resolves when lockscope shuts down (or whoever could tell it to is gone).
    pub async fn stopping(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|stop| *stop).await;
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Updates queued for the aggregator now (all sources).
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

pub use crate::backends::database::DbUpdate;
pub use crate::backends::etcd::EtcdUpdate;
pub use crate::backends::redis::RedisUpdate;
pub use crate::backends::zookeeper::ZkUpdate;

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
    /// Waits for every task to end. Dropped while it waits (its collector stopped), it still
    /// aborts every task: the handles stay in `self` until then.
    pub async fn join(mut self) {
        for task in &mut self.0 {
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
