//! Collectors: the tasks that talk to coordination servers and report what they hold.
//!
//! A collector owns its connections and nothing else: it sends its backend's updates through
//! an [`Outbox`] to the lock table (`aggregate/`), which owns all lock state. The outbox puts
//! each update in its source's own queue, typed, and rings the table over one bounded channel
//! shared by every source (the ring is the source's index); the table then has that source's
//! model apply the oldest update of its queue. [`connect`] joins a model to its outbox.
//! Collectors never read the model. This module is what every collector shares and knows no
//! backend.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::aggregate::counters::{LockCounters, MetricsInput};
use crate::aggregate::{History, LedgerContext, Model, Source, SourceModel, StoredLock};
pub use crate::aggregate::{SentCounter, SourceStats, SourceUpdate};
use lockscope_model::wire::{SessionView, SourceView};

/// A source's updates between its outbox and its model in the table, oldest first.
pub type Queue<U> = Arc<Mutex<VecDeque<U>>>;

/// What a source's collector and model are joined by: its place among the sources, the
/// table's ring, the shared count of sends, its counters and the stop signal.
#[derive(Clone)]
pub struct Wiring {
    /// The source's index among all configured sources (the order the table lists them).
    pub index: usize,
    pub tx: tokio::sync::mpsc::Sender<SourceUpdate>,
    pub sent: SentCounter,
    pub stats: Arc<SourceStats>,
    /// Turns `true` when lockscope shuts down.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// Joins `model` to the table: the outbox its collector sends through, and the [`Source`] the
/// table holds (the model with its queue).
pub fn connect<M: Model>(model: M, wiring: Wiring) -> (Outbox<M::Update>, Box<dyn Source>) {
    let queue: Queue<M::Update> = Arc::default();
    let outbox = Outbox {
        source: wiring.index,
        stop: wiring.stop,
        tx: wiring.tx,
        sent: wiring.sent,
        stats: wiring.stats,
        queue: queue.clone(),
    };
    (outbox, Box::new(Slot { model, queue }))
}

/// A source's model and its queue of updates.
struct Slot<M: Model> {
    model: M,
    queue: Queue<M::Update>,
}

impl<M: Model> Source for Slot<M> {
    fn apply_queued(&mut self, cx: &mut LedgerContext<'_>) {
        let update = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front();
        match update {
            // A first read of a million locks is seconds of work: this worker's other tasks
            // (heartbeats, connections' drivers, HTTP) move to another meanwhile.
            Some(update) if M::weight(&update) >= BIG_WORK => {
                off_the_worker(|| self.model.apply(update, cx))
            }
            Some(update) => self.model.apply(update, cx),
            // The outbox pushes before it rings; a ring without an update is a bug.
            None => tracing::error!("a source was rung with nothing in its queue"),
        }
    }
}

impl<M: Model> SourceModel for Slot<M> {
    fn view(&mut self) -> SourceView {
        self.model.view()
    }
    fn history_of(&self, id: &str) -> Option<&History> {
        self.model.history_of(id)
    }
    fn sessions(&self) -> Vec<SessionView> {
        self.model.sessions()
    }
    fn metrics(&self, input: &mut MetricsInput) {
        self.model.metrics(input)
    }
    fn counters(&mut self) -> &mut LockCounters {
        self.model.counters()
    }
    fn known_recipes(&self) -> Vec<&'static str> {
        self.model.known_recipes()
    }
    fn recipe_labels(&self) -> &'static [&'static str] {
        self.model.recipe_labels()
    }
    fn members(&self) -> Option<Vec<String>> {
        self.model.members()
    }
    fn end_of_burst(&mut self, cx: &mut LedgerContext<'_>) {
        self.model.end_of_burst(cx)
    }
    fn housekeeping(&mut self, cx: &mut LedgerContext<'_>) {
        self.model.housekeeping(cx)
    }
    fn has_dirty_locks(&self) -> bool {
        self.model.has_dirty_locks()
    }
    fn flush(&mut self, published: &dyn Fn(&str) -> bool) -> Vec<(Arc<str>, StoredLock)> {
        self.model.flush(published)
    }
}

/// A lock table over one source whose updates the caller sends by hand through `outbox`
/// (tests, examples, benchmarks): run `aggregator.run(updates, commands)` and read `handle`.
pub struct HandFed<U: Send + 'static> {
    pub aggregator: crate::aggregate::Aggregator,
    pub handle: crate::aggregate::Handle,
    pub commands: tokio::sync::mpsc::Receiver<crate::aggregate::Command>,
    pub updates: tokio::sync::mpsc::Receiver<SourceUpdate>,
    pub outbox: Outbox<U>,
    /// Keeps the outbox's stop signal open (`false`) while held.
    pub stop: tokio::sync::watch::Sender<bool>,
}

/// The table over `model` alone ([`HandFed`]), `max_labels` lock labels per source.
pub fn hand_fed<M: Model>(mut model: M, max_labels: usize) -> HandFed<M::Update> {
    let view = model.view();
    let (tx, updates) = tokio::sync::mpsc::channel(crate::aggregate::UPDATE_QUEUE);
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let sent = SentCounter::default();
    let stats = Arc::new(SourceStats::new(&view.name, view.backend));
    let wiring = Wiring {
        index: 0,
        tx,
        sent: sent.clone(),
        stats: stats.clone(),
        stop: stop_rx,
    };
    let (outbox, source) = connect(model, wiring);
    let (aggregator, handle, commands) =
        crate::aggregate::Aggregator::new(vec![source], max_labels, vec![stats], sent);
    HandFed {
        aggregator,
        handle,
        commands,
        updates,
        outbox,
        stop,
    }
}

/// One source's way to the aggregator: queues its updates, rings the table, counts what it
/// sends, and answers `false` once the aggregator is gone (the collector then ends).
pub struct Outbox<U: Send + 'static> {
    source: usize,
    /// Turns `true` when lockscope shuts down.
    stop: tokio::sync::watch::Receiver<bool>,
    tx: tokio::sync::mpsc::Sender<SourceUpdate>,
    sent: SentCounter,
    stats: Arc<SourceStats>,
    queue: Queue<U>,
}

impl<U: Send + 'static> Clone for Outbox<U> {
    fn clone(&self) -> Self {
        Outbox {
            source: self.source,
            stop: self.stop.clone(),
            tx: self.tx.clone(),
            sent: self.sent.clone(),
            stats: self.stats.clone(),
            queue: self.queue.clone(),
        }
    }
}

impl<U: Send + 'static> Outbox<U> {
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
        // Room first, so the queue holds no more than the rings that will come for it; then
        // the update and its ring with no await between (a send dropped while it waits leaves
        // nothing behind).
        let Ok(permit) = self.tx.reserve().await else {
            return false;
        };
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(update);
        permit.send(SourceUpdate {
            source: self.source,
        });
        std::mem::forget(unsent);
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Runs `collector` until lockscope stops (dropping it closes its connections).
    pub async fn until_stopped(&self, collector: impl std::future::Future<Output = ()>) {
        tokio::select! {
            () = collector => {}
            () = self.stopping() => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn silence_limits_are_said_in_seconds_and_checked() {
        assert_eq!(seconds(Duration::from_secs(10)), "10 s");
        assert_eq!(seconds(Duration::from_millis(2500)), "2.5 s");
        assert!(silence_problems("redis[0]", DEFAULT_SILENCE_LIMIT).is_empty());
        assert!(DEFAULT_SILENCE_LIMIT <= Duration::from_secs(15));
        assert_eq!(
            silence_problems("etcd[1]", Duration::from_millis(200)),
            vec!["etcd[1].silence_limit must be at least 1 s"]
        );
        let (time, interval) = keepalive_times(Duration::from_secs(9));
        assert_eq!(
            (time, interval),
            (Duration::from_secs(3), Duration::from_secs(1))
        );
        // The kernel refuses 0 s: a short limit still probes every second.
        let (time, interval) = keepalive_times(Duration::from_secs(2));
        assert_eq!(
            (time, interval),
            (Duration::from_secs(1), Duration::from_secs(1))
        );
    }

    /// A request is given up once nothing was heard for the limit; an answer heard on the
    /// connection meanwhile (another request's) moves the deadline.
    #[tokio::test]
    async fn a_request_waits_until_the_connection_has_been_silent_for_the_limit() {
        let limit = Duration::from_millis(300);
        let heard = Heard::new();
        let answered = within_silence(&heard, limit, async { 7 }).await;
        assert_eq!(answered, Some(7));
        // Another answer on the connection half-way moves the deadline: the request is given
        // up a limit after that one, not after its own start.
        let start = std::time::Instant::now();
        let other = heard.clone();
        let moved = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            other.now();
        });
        let silent = within_silence(&heard, limit, std::future::pending::<()>()).await;
        assert_eq!(silent, None);
        assert!(
            start.elapsed() >= Duration::from_millis(450),
            "{:?}",
            start.elapsed()
        );
        moved.await.expect("the other answer");
    }
}

/// How long a source may stay silent — no answer, no frame, no keepalive acknowledgement on a
/// connection lockscope needs — before it is shown not up (`silence_limit` in every source's
/// section): a path that drops packets without a reset is otherwise noticed only when the
/// kernel gives up (minutes), and the source's locks would be shown as live meanwhile.
pub const DEFAULT_SILENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// serde's default for every section's `silence_limit`.
pub fn default_silence_limit() -> std::time::Duration {
    DEFAULT_SILENCE_LIMIT
}

/// The shortest `silence_limit` a section may ask for: below it, a busy server or a garbage
/// collection pause on the client would be taken for a partition.
pub const MIN_SILENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The problems of a section's `silence_limit` (`at` names the section).
pub fn silence_problems(at: &str, limit: std::time::Duration) -> Vec<String> {
    if limit < MIN_SILENCE_LIMIT {
        vec![format!(
            "{at}.silence_limit must be at least {}",
            seconds(MIN_SILENCE_LIMIT)
        )]
    } else {
        Vec::new()
    }
}

/// The silence limit as the source's error says it ("10 s", "2.5 s").
pub fn seconds(limit: std::time::Duration) -> String {
    let s = limit.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// TCP keepalive for a source's sockets, where the client lets lockscope set it: the first
/// probe after a third of the limit idle, then one every sixth, so the kernel notices a dead
/// peer about when the application's own heartbeat does (behind a relay that acknowledges
/// for the peer only the heartbeat can tell). Whole seconds, at least one: the kernel takes
/// seconds and refuses 0 (a socket option of 0 fails the connection with `EINVAL`).
pub fn keepalive_times(limit: std::time::Duration) -> (std::time::Duration, std::time::Duration) {
    let whole = |d: std::time::Duration| std::time::Duration::from_secs(d.as_secs().max(1));
    (whole(limit / 3), whole(limit / 6))
}

/// When a collector last heard from its server: an answer, a message, a heartbeat's reply
/// (epoch ms). Shared by the tasks of one connection, so the source's "last seen" is the last
/// thing any of them heard.
#[derive(Debug, Clone)]
pub struct Heard(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl Heard {
    /// Heard now.
    pub fn new() -> Self {
        Heard(std::sync::Arc::new(std::sync::atomic::AtomicI64::new(
            crate::now_ms(),
        )))
    }

    /// Something came from the server now.
    pub fn now(&self) {
        self.0
            .fetch_max(crate::now_ms(), std::sync::atomic::Ordering::Relaxed);
    }

    /// When the server was last heard (epoch ms).
    pub fn at_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// When the source was last known to be as shown, for a session that just ended: the last
    /// thing heard, and no earlier than `limit` ago where a heartbeat or keepalive checks the
    /// connection at least that often without lockscope seeing its answers (gRPC pings,
    /// ZooKeeper's own pings).
    pub fn last_seen_ms(&self, checked_within: Option<std::time::Duration>) -> i64 {
        let heard = self.at_ms();
        match checked_within {
            Some(limit) => heard.max(crate::now_ms() - limit.as_millis() as i64),
            None => heard,
        }
    }
}

impl Default for Heard {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `answer` (one request on a connection) until the server has been silent for `limit`
/// since it was last heard: `None` when it has, and the request's output, the server heard,
/// otherwise. A request that takes long while other answers come in on the same connection
/// is not silence; `heard` is moved by every answer.
///
/// Silence is the server's, not lockscope's own: time this task was due but not run (its
/// timer fired more than [`STALL_MS`] late: every worker busy, as when a first read of a
/// million locks is applied) is not counted, since an answer that arrived then is still
/// unread in the socket.
pub async fn within_silence<F: std::future::Future>(
    heard: &Heard,
    limit: std::time::Duration,
    answer: F,
) -> Option<F::Output> {
    tokio::pin!(answer);
    let mut stalled_ms: i64 = 0;
    loop {
        let since = crate::now_ms() - heard.at_ms() - stalled_ms;
        let left = limit.saturating_sub(std::time::Duration::from_millis(since.max(0) as u64));
        if left.is_zero() {
            return None;
        }
        let due = tokio::time::Instant::now() + left;
        match tokio::time::timeout(left, &mut answer).await {
            Ok(output) => {
                heard.now();
                return Some(output);
            }
            // Something else may have been heard meanwhile: look again.
            Err(_) => {
                let late = tokio::time::Instant::now().saturating_duration_since(due);
                let late_ms = i64::try_from(late.as_millis()).unwrap_or(i64::MAX);
                if late_ms > STALL_MS {
                    stalled_ms = stalled_ms.saturating_add(late_ms);
                }
            }
        }
    }
}

/// A timer firing this much later than due means the task was not run (ms): see
/// [`within_silence`].
pub const STALL_MS: i64 = 250;

/// Work items (locks, keys) from which a step runs off the runtime's worker
/// ([`off_the_worker`]).
pub const BIG_WORK: usize = 10_000;

/// Runs `work` (seconds of CPU: a first read of a million locks) so that the tasks queued on
/// this runtime worker move to another meanwhile (`block_in_place`), rather than wait for it:
/// a heartbeat's answer waiting behind it would read as a silent server.
pub fn off_the_worker<R>(work: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
