//! Collectors: the tasks that talk to coordination servers and report what they hold.
//!
//! A collector owns its connections and nothing else: it sends its backend's updates through
//! an [`Outbox`] over one bounded channel to the lock table (`aggregate/`), which owns all lock
//! state and hands each update to its source's model. Collectors never read the model. This
//! module is what every collector shares and knows no backend.

pub use crate::aggregate::{SentCounter, SourceStats, SourceUpdate};

/// One source's way to the aggregator: stamps the source, counts what it sends, and answers
/// `false` once the aggregator is gone (the collector then ends).
pub struct Outbox<U: Send + 'static> {
    source: usize,
    /// Turns `true` when lockscope shuts down.
    stop: tokio::sync::watch::Receiver<bool>,
    tx: tokio::sync::mpsc::Sender<SourceUpdate>,
    sent: SentCounter,
    stats: std::sync::Arc<SourceStats>,
    _update: std::marker::PhantomData<fn(U)>,
}

impl<U: Send + 'static> Clone for Outbox<U> {
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

impl<U: Send + 'static> Outbox<U> {
    /// The outbox of `source` (its index among all configured sources, as the registry built
    /// their models).
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
        let update = SourceUpdate {
            source: self.source,
            update: Box::new(update),
        };
        if self.tx.send(update).await.is_ok() {
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

/// The problems of a source's user and password keys (`{prefix}user`, `{prefix}password`,
/// `{prefix}password_env`): a user needs a password and a password a user, and a named
/// environment variable must be set.
pub fn credential_problems(
    at: &str,
    prefix: &str,
    user: bool,
    password: bool,
    password_env: Option<&str>,
) -> Vec<String> {
    let mut problems = Vec::new();
    match (user, password || password_env.is_some()) {
        (true, false) => problems.push(format!(
            "{at}.{prefix}user is set without {prefix}password or {prefix}password_env"
        )),
        (false, true) => problems.push(format!("{at}: a {prefix}password needs a {prefix}user")),
        _ => {}
    }
    if let Some(var) = password_env {
        if !password && std::env::var(var).is_err() {
            problems.push(format!(
                "{at}.{prefix}password_env: environment variable {var} is not set"
            ));
        }
    }
    problems
}

pub use crate::redact::redact_url;
