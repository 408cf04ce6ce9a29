//! Prometheus exposition (`GET /metrics`): lock gauges from the aggregator's state, lock counters
//! and histograms, with the `lock` label bounded.
//!
//! The aggregator owns a [`LockCounters`] per source (its label table, counters, histograms) and
//! hands a copy plus the current lock views to [`render`] on each scrape. The first
//! `max_lock_labels` lock paths a source shows get their own `lock` label for the life of the
//! process (counters must not jump); later ones fold into `lock="__other__"`, and
//! `lockscope_lock_labels_folded{source}` says how many did. The folded paths themselves are not
//! kept beyond a bounded window of recent ones ([`FoldedPaths`]): a source that churns ever-new
//! lock names must not grow lockscope. No global registry exists.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use lockscope_model::wire::{LockView, ReleaseCause};

pub const OTHER: &str = "__other__";

/// Bucket bounds, seconds, of the wait and hold histograms.
pub const BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    1800.0, 3600.0,
];

#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }
}

#[derive(Debug, Clone, Default)]
pub struct PerLock {
    pub acquisitions: u64,
    pub releases: BTreeMap<ReleaseCause, u64>,
    pub wait: Histogram,
    pub hold: Histogram,
}

/// Lock paths folded into `__other__`: a count, and the most recently folded paths (at most
/// [`FoldedPaths::REMEMBERED`]) so that a path is counted once however often it is seen. The
/// memory is bounded whatever the number of distinct names: a path seen again only after
/// `REMEMBERED / 2` other paths folded since its last sighting is counted again.
#[derive(Debug, Clone, Default)]
pub struct FoldedPaths {
    count: u64,
    /// Two generations: `recent` fills up to half the bound, then becomes `older` (the previous
    /// `older` is forgotten). A path found in `older` moves back to `recent`.
    recent: HashSet<String>,
    older: HashSet<String>,
}

impl FoldedPaths {
    /// Folded paths remembered at most.
    pub const REMEMBERED: usize = 8192;

    /// Notes that `path` folded; counts it unless it is remembered.
    pub fn note(&mut self, path: &str) {
        if self.recent.contains(path) {
            return;
        }
        if !self.older.remove(path) {
            self.count += 1;
        }
        self.recent.insert(path.to_string());
        if self.recent.len() >= Self::REMEMBERED / 2 {
            self.older = std::mem::take(&mut self.recent);
        }
    }

    /// Paths folded so far (see the type's note on paths forgotten and seen again).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Paths remembered now (at most [`Self::REMEMBERED`]).
    pub fn remembered(&self) -> usize {
        self.recent.len() + self.older.len()
    }
}

/// Per-source label table, counters and histograms.
#[derive(Debug, Clone)]
pub struct LockCounters {
    max_labels: usize,
    labels: HashMap<String, Arc<str>>,
    folded: FoldedPaths,
    other: Arc<str>,
    per_lock: BTreeMap<Arc<str>, PerLock>,
    session_expirations: u64,
}

impl LockCounters {
    pub fn new(max_labels: usize) -> Self {
        Self {
            max_labels,
            labels: HashMap::new(),
            folded: FoldedPaths::default(),
            other: Arc::from(OTHER),
            per_lock: BTreeMap::new(),
            session_expirations: 0,
        }
    }

    /// The `lock` label for `path`, assigning one (or folding) on first sight.
    pub fn label_for(&mut self, path: &str) -> Arc<str> {
        if let Some(label) = self.labels.get(path) {
            return label.clone();
        }
        if self.labels.len() < self.max_labels {
            let label: Arc<str> = Arc::from(path);
            self.labels.insert(path.to_string(), label.clone());
            label
        } else {
            self.folded.note(path);
            self.other.clone()
        }
    }

    /// The label already given to `path` (`__other__` when folded or unknown).
    pub fn existing_label(&self, path: &str) -> Arc<str> {
        self.labels
            .get(path)
            .cloned()
            .unwrap_or_else(|| self.other.clone())
    }

    pub fn acquired(&mut self, path: &str, waited_ms: i64) {
        let label = self.label_for(path);
        let entry = self.per_lock.entry(label).or_default();
        entry.acquisitions += 1;
        entry.wait.observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// A wait that ended in an acquisition counted elsewhere (Redis counts acquisitions from
    /// notifications, and learns a fair-lock waiter's wait from reads).
    pub fn waited(&mut self, path: &str, waited_ms: i64) {
        let label = self.label_for(path);
        let entry = self.per_lock.entry(label).or_default();
        entry.wait.observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// An acquisition whose wait is known only sometimes (Redis: fair-lock waiters).
    pub fn acquired_maybe_waited(&mut self, path: &str, waited_ms: Option<i64>) {
        match waited_ms {
            Some(waited) => self.acquired(path, waited),
            None => {
                let label = self.label_for(path);
                self.per_lock.entry(label).or_default().acquisitions += 1;
            }
        }
    }

    pub fn released(&mut self, path: &str, cause: ReleaseCause, held_ms: i64) {
        let label = self.label_for(path);
        let entry = self.per_lock.entry(label).or_default();
        *entry.releases.entry(cause).or_default() += 1;
        entry.hold.observe(held_ms.max(0) as f64 / 1000.0);
    }

    pub fn session_expired(&mut self) {
        self.session_expirations += 1;
    }

    /// Lock paths folded into `__other__` (see [`FoldedPaths`]).
    pub fn folded(&self) -> u64 {
        self.folded.count()
    }
}

/// Everything one scrape needs, copied out of the aggregator.
#[derive(Debug, Default)]
pub struct MetricsInput {
    pub sources: Vec<SourceMetrics>,
    pub max_labels: usize,
    /// Redis sources: corrections their reconcile scans made.
    pub corrections: Vec<(String, u64)>,
    /// Sources whose collector fell behind their change rate and is catching up (a Redis
    /// member that dropped its backlog and rescans), by name (`SourceView::lagging`).
    pub lagging: Vec<String>,
    /// Database sources' polling.
    pub databases: Vec<DatabaseMetrics>,
}

/// A database source's polling, for `lockscope_db_*`.
#[derive(Debug, Clone)]
pub struct DatabaseMetrics {
    pub name: String,
    pub backend: lockscope_model::wire::Backend,
    pub rounds: u64,
    pub queries: u64,
    pub failed_rounds: u64,
}

/// Recipe names as static label values (the set is closed; anything else is `other`).
pub fn recipe_label(recipe: &str) -> &'static str {
    const KNOWN: [&str; 21] = [
        "token_lock",
        "setnx_no_ttl",
        "setnx_deadline",
        "redisson_lock",
        "redisson_fair_lock",
        "redisson_fenced_lock",
        "redisson_rw_lock",
        "redisson_semaphore",
        "redisson_permit_semaphore",
        "redisson_latch",
        "python_redis_lock",
        "shedlock",
        "redlock",
        "etcd_mutex",
        "etcd_election",
        "etcd_lease_key",
        "lock_table",
        "lock_table_until",
        "row_lock",
        "get_lock",
        "advisory",
    ];
    KNOWN
        .iter()
        .find(|k| **k == recipe)
        .copied()
        .unwrap_or("other")
}

#[derive(Debug)]
pub struct SourceMetrics {
    pub name: String,
    pub up: bool,
    pub synced: bool,
    pub nodes: u64,
    pub resyncs: u64,
    pub recipes: BTreeMap<&'static str, u64>,
    /// Current locks grouped by their `lock` label.
    pub locks: BTreeMap<Arc<str>, Vec<Arc<LockView>>>,
    pub counters: LockCounters,
}

/// `lockscope_stale_locks{source,rule}` and `lockscope_deadlock_cycles{source}`, judged at scrape
/// time with the same rules the API and the UI use.
pub fn detection(
    snapshot: &crate::aggregate::Snapshot,
    sessions: &[lockscope_model::wire::SessionView],
    now: i64,
    stale_hold_ms: i64,
) -> String {
    use lockscope_model::rules::{stale_findings, wait_for_graph, BUILTIN};
    use std::collections::BTreeMap;
    let mut stale: BTreeMap<(&str, &'static str), u64> = BTreeMap::new();
    for source in &snapshot.sources {
        for rule in BUILTIN {
            stale.insert((source.name.as_str(), rule.name()), 0);
        }
    }
    for lock in snapshot.locks.values() {
        for rule in stale_findings(lock, now, stale_hold_ms) {
            *stale
                .entry((lock.source.as_str(), rule.name()))
                .or_default() += 1;
        }
    }
    let mut out = String::from(
        "# HELP lockscope_stale_locks Locks breaking a stale-lock rule (see /api/v1/locks?stale=true).\n\
         # TYPE lockscope_stale_locks gauge\n",
    );
    for ((source, rule), n) in &stale {
        out.push_str(&format!(
            "lockscope_stale_locks{{source=\"{}\",rule=\"{rule}\"}} {n}\n",
            escape(source)
        ));
    }
    let graph = wait_for_graph(sessions);
    let mut cycles: BTreeMap<&str, u64> = snapshot
        .sources
        .iter()
        // Sources whose participants have sessions (ZooKeeper sessions, etcd leases).
        .filter(|s| s.backend != lockscope_model::wire::Backend::Redis)
        .map(|s| (s.name.as_str(), 0))
        .collect();
    for cycle in &graph.cycles {
        if let Some(&first) = cycle.first() {
            *cycles
                .entry(graph.nodes[first].source.as_str())
                .or_default() += 1;
        }
    }
    out.push_str(
        "# HELP lockscope_deadlock_cycles Cycles in the sessions' wait-for graph (possible deadlocks, see /api/v1/deadlocks).\n\
         # TYPE lockscope_deadlock_cycles gauge\n",
    );
    for (source, n) in cycles {
        out.push_str(&format!(
            "lockscope_deadlock_cycles{{source=\"{}\"}} {n}\n",
            escape(source)
        ));
    }
    out
}

fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn fmt_f64(value: f64) -> String {
    if value.is_finite() {
        format!("{value}")
    } else if value.is_nan() {
        "NaN".into()
    } else if value > 0.0 {
        "+Inf".into()
    } else {
        "-Inf".into()
    }
}

/// One family with one sample per source: `name{source="…"} value`.
fn per_source<'a>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    values: impl Iterator<Item = (&'a str, u64)>,
) {
    family(out, name, kind, help);
    for (source, value) in values {
        let _ = writeln!(out, "{name}{{source=\"{}\"}} {value}", escape(source));
    }
}

/// lockscope's own work: per collector the updates it sent and the connections it lost, and
/// the aggregator's queue (updates sent and not yet applied) and throughput.
pub fn render_self(handle: &crate::aggregate::Handle) -> String {
    use std::sync::atomic::Ordering;
    let mut out = String::with_capacity(1024);
    for (name, help, read) in [
        (
            "lockscope_collector_events_total",
            "Updates a source's collector sent to the aggregator.",
            (|s: &crate::collect::SourceStats| s.events.load(Ordering::Relaxed))
                as fn(&crate::collect::SourceStats) -> u64,
        ),
        (
            "lockscope_collector_reconnects_total",
            "Connections to a source lost (or refused) and retried.",
            |s: &crate::collect::SourceStats| s.reconnects.load(Ordering::Relaxed),
        ),
        (
            "lockscope_collector_overflows_total",
            "Backlogs of changes a collector dropped because changes came faster than it read them; each is followed by a full re-read (Redis).",
            |s: &crate::collect::SourceStats| s.overflows.load(Ordering::Relaxed),
        ),
    ] {
        family(&mut out, name, "counter", help);
        for stats in &handle.collector_stats {
            let _ = writeln!(
                out,
                "{name}{{source=\"{}\",backend=\"{}\"}} {}",
                escape(&stats.source),
                stats.backend.as_str(),
                read(stats)
            );
        }
    }
    for (name, help, read) in [
        (
            "lockscope_source_bootstrap_keys_scanned",
            "Keys the source's first full read has listed so far, summed over its members (Redis: every key SCAN returned, lock or not).",
            (|s: &crate::collect::SourceStats| s.bootstrap_scanned.load(Ordering::Relaxed))
                as fn(&crate::collect::SourceStats) -> u64,
        ),
        (
            "lockscope_source_bootstrap_keys_read",
            "Lock keys the source's first full read has read so far, summed over its members (reads overlap the listing).",
            |s: &crate::collect::SourceStats| s.bootstrap_read.load(Ordering::Relaxed),
        ),
    ] {
        family(&mut out, name, "gauge", help);
        for stats in &handle.collector_stats {
            let _ = writeln!(
                out,
                "{name}{{source=\"{}\",backend=\"{}\"}} {}",
                escape(&stats.source),
                stats.backend.as_str(),
                read(stats)
            );
        }
    }
    family(
        &mut out,
        "lockscope_source_info",
        "gauge",
        "One per configured source, naming its backend (join on source to label other families by backend).",
    );
    for stats in &handle.collector_stats {
        let _ = writeln!(
            out,
            "lockscope_source_info{{source=\"{}\",backend=\"{}\"}} 1",
            escape(&stats.source),
            stats.backend.as_str()
        );
    }
    let applied = *handle.applied.borrow();
    family(
        &mut out,
        "lockscope_aggregator_queue_depth",
        "gauge",
        "Updates the collectors sent that the aggregator has not applied yet.",
    );
    let _ = writeln!(out, "lockscope_aggregator_queue_depth {}", handle.lag());
    family(
        &mut out,
        "lockscope_aggregator_applied_total",
        "counter",
        "Updates the aggregator applied and published.",
    );
    let _ = writeln!(out, "lockscope_aggregator_applied_total {applied}");
    out
}

/// The embedded store's queue of lock events: pending now, and dropped because they came faster
/// than the store wrote them (see [`crate::audit`]).
pub fn render_store(queue_depth: usize, events_dropped: u64) -> String {
    let mut out = String::with_capacity(512);
    family(
        &mut out,
        "lockscope_store_queue_depth",
        "gauge",
        "Lock events waiting to be written to the store.",
    );
    let _ = writeln!(out, "lockscope_store_queue_depth {queue_depth}");
    family(
        &mut out,
        "lockscope_store_events_dropped_total",
        "counter",
        "Lock events dropped from the stored history because they came faster than the store wrote them (the oldest pending go first).",
    );
    let _ = writeln!(out, "lockscope_store_events_dropped_total {events_dropped}");
    out
}

/// Renders the text exposition format (version 0.0.4) as of `now_ms`.
pub fn render(input: &MetricsInput, now_ms: i64) -> String {
    let mut out = String::with_capacity(4096);
    let sources = &input.sources;

    per_source(
        &mut out,
        "lockscope_source_up",
        "gauge",
        "1 when lockscope is connected to the source and its mirror is live.",
        sources
            .iter()
            .map(|s| (s.name.as_str(), u64::from(s.up && s.synced))),
    );
    per_source(
        &mut out,
        "lockscope_source_lagging",
        "gauge",
        "1 while the source changes faster than lockscope reads it: it dropped its backlog and catches up by a full re-read (Redis).",
        sources
            .iter()
            .map(|s| (s.name.as_str(), u64::from(input.lagging.contains(&s.name)))),
    );
    per_source(
        &mut out,
        "lockscope_source_nodes",
        "gauge",
        "Nodes mirrored from the source's watched subtrees.",
        sources.iter().map(|s| (s.name.as_str(), s.nodes)),
    );
    per_source(
        &mut out,
        "lockscope_source_resyncs_total",
        "counter",
        "Full re-reads of the source: the first read, then ZooKeeper after every reconnect, etcd after a compaction lost events.",
        sources.iter().map(|s| (s.name.as_str(), s.resyncs)),
    );
    family(
        &mut out,
        "lockscope_locks",
        "gauge",
        "Locks currently known, by recipe.",
    );
    for s in sources {
        for (recipe, count) in &s.recipes {
            let _ = writeln!(
                out,
                "lockscope_locks{{source=\"{}\",recipe=\"{recipe}\"}} {count}",
                escape(&s.name)
            );
        }
    }
    per_source(
        &mut out,
        "lockscope_lock_labels_folded",
        "gauge",
        "Distinct lock paths folded into lock=\"__other__\" by the label cap (one seen again after at least 4096 other folded paths counts again).",
        sources
            .iter()
            .map(|s| (s.name.as_str(), s.counters.folded())),
    );
    family(
        &mut out,
        "lockscope_lock_label_limit",
        "gauge",
        "Distinct lock label values allowed per source.",
    );
    let _ = writeln!(out, "lockscope_lock_label_limit {}", input.max_labels);

    type Gauge = fn(&[Arc<LockView>], i64) -> f64;
    let gauges: [(&str, &str, Gauge); 7] = [
        (
            "lockscope_lock_holders",
            "Participants holding the lock.",
            |l, _| l.iter().map(|v| v.holders.len() as f64).sum(),
        ),
        (
            "lockscope_lock_waiters",
            "Participants queued for the lock.",
            |l, _| l.iter().map(|v| v.waiters.len() as f64).sum(),
        ),
        (
            "lockscope_lock_unattributed_waiters",
            "Clients the server shows blocked in a way that may be waiting on this lock but does not attribute to a key (python-redis-lock: BLPOP on the lock's server).",
            |l, _| {
                l.iter()
                    .filter_map(|v| v.unattributed_waiters)
                    .map(f64::from)
                    .reduce(f64::max)
                    // Only locks whose waiters cannot be attributed have the series.
                    .unwrap_or(f64::NAN)
            },
        ),
        (
            "lockscope_lock_oldest_wait_seconds",
            "Longest current wait for the lock.",
            |l, now| {
                l.iter()
                    .flat_map(|v| v.waiters.iter())
                    .map(|w| (now - w.since_ms).max(0) as f64 / 1000.0)
                    .fold(0.0, f64::max)
            },
        ),
        (
            "lockscope_lock_watchers",
            "Sessions watching the holder node(s), merged over the ensemble.",
            |l, _| l.iter().map(|v| v.watchers as f64).sum(),
        ),
        (
            "lockscope_lock_herd",
            "1 when more than one session wakes on release (herd effect).",
            |l, _| {
                if l.iter().any(|v| v.herd) {
                    1.0
                } else {
                    0.0
                }
            },
        ),
        (
            "lockscope_lock_ttl_seconds",
            "Time left before the lock's TTL runs out (TTL locks only).",
            |l, now| {
                l.iter()
                    .filter_map(|v| v.expires_at_ms)
                    .map(|at| (at - now).max(0) as f64 / 1000.0)
                    .reduce(f64::min)
                    // Not a TTL lock: no series (NaN is skipped below).
                    .unwrap_or(f64::NAN)
            },
        ),
    ];
    for (name, help, value) in gauges {
        family(&mut out, name, "gauge", help);
        for s in sources {
            for (label, views) in &s.locks {
                let value = value(views, now_ms);
                if value.is_nan() {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "{name}{{source=\"{}\",lock=\"{}\"}} {}",
                    escape(&s.name),
                    escape(label),
                    fmt_f64(value)
                );
            }
        }
    }

    family(
        &mut out,
        "lockscope_lock_acquisitions_total",
        "counter",
        "Times a participant started holding the lock. Redis: counted from the lock key's own keyspace notifications, holds too brief to read included; changes while a member's notifications were lost (a reconnect) are missed, and the full scan that follows books the net difference.",
    );
    for s in sources {
        for (label, per) in &s.counters.per_lock {
            let _ = writeln!(
                out,
                "lockscope_lock_acquisitions_total{{source=\"{}\",lock=\"{}\"}} {}",
                escape(&s.name),
                escape(label),
                per.acquisitions
            );
        }
    }
    family(
        &mut out,
        "lockscope_lock_releases_total",
        "counter",
        "Times a holder stopped holding, by cause. Redis: counted from the lock key's own keyspace notifications (del, expired, evicted as ttl_expired); see lockscope_lock_acquisitions_total for lost notifications.",
    );
    for s in sources {
        for (label, per) in &s.counters.per_lock {
            for (cause, count) in &per.releases {
                let _ = writeln!(out, "lockscope_lock_releases_total{{source=\"{}\",lock=\"{}\",cause=\"{}\"}} {count}", escape(&s.name), escape(label), cause.as_str());
            }
        }
    }
    for (name, help, pick) in [
        (
            "lockscope_lock_wait_duration_seconds",
            "Time from queueing to holding, per acquisition.",
            (|p: &PerLock| &p.wait) as fn(&PerLock) -> &Histogram,
        ),
        (
            "lockscope_lock_hold_duration_seconds",
            "Time from acquiring to releasing, per release.",
            |p: &PerLock| &p.hold,
        ),
    ] {
        family(&mut out, name, "histogram", help);
        for s in sources {
            for (label, per) in &s.counters.per_lock {
                let h = pick(per);
                let labels = format!("source=\"{}\",lock=\"{}\"", escape(&s.name), escape(label));
                for (bound, count) in BUCKETS.iter().zip(h.counts.iter()) {
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
                }
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "{name}_sum{{{labels}}} {}", fmt_f64(h.sum));
                let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
            }
        }
    }
    per_source(
        &mut out,
        "lockscope_source_corrections_total",
        "counter",
        "Lock keys a reconcile scan found different from what notifications had shown (Redis): after a lost notification stream, each also books its net acquisition or release.",
        input
            .corrections
            .iter()
            .map(|(name, count)| (name.as_str(), *count)),
    );
    per_source(
        &mut out,
        "lockscope_session_expirations_total",
        "counter",
        "Sessions seen expiring while they held or waited on a lock.",
        sources
            .iter()
            .map(|s| (s.name.as_str(), s.counters.session_expirations)),
    );
    for (name, help, read) in [
        (
            "lockscope_db_rounds_total",
            "Poll rounds a database source's collector completed (databases cannot be watched).",
            (|d: &DatabaseMetrics| d.rounds) as fn(&DatabaseMetrics) -> u64,
        ),
        (
            "lockscope_db_queries_total",
            "Read-only queries lockscope ran against a database source.",
            |d: &DatabaseMetrics| d.queries,
        ),
        (
            "lockscope_db_failed_rounds_total",
            "Poll rounds with a query the database refused or cancelled (a missing privilege, the statement timeout); the source's error says which.",
            |d: &DatabaseMetrics| d.failed_rounds,
        ),
    ] {
        family(&mut out, name, "counter", help);
        for d in &input.databases {
            let _ = writeln!(
                out,
                "{name}{{source=\"{}\",backend=\"{}\"}} {}",
                escape(&d.name),
                d.backend.as_str(),
                read(d)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_fold_past_the_cap_and_stay_stable() {
        let mut c = LockCounters::new(2);
        assert_eq!(&*c.label_for("/a"), "/a");
        assert_eq!(&*c.label_for("/b"), "/b");
        assert_eq!(&*c.label_for("/c"), OTHER);
        assert_eq!(&*c.label_for("/a"), "/a");
        assert_eq!(&*c.label_for("/c"), OTHER);
        assert_eq!(c.folded(), 1);
        c.acquired("/c", 10);
        c.acquired("/d", 10);
        assert_eq!(c.per_lock[&Arc::<str>::from(OTHER)].acquisitions, 2);
    }

    #[test]
    fn folded_paths_are_counted_in_bounded_memory() {
        let mut c = LockCounters::new(1);
        assert_eq!(&*c.label_for("/kept"), "/kept");
        // Ever-new names, each seen a few times while it lives (acquired, released).
        let n = 100_000;
        for i in 0..n {
            let path = format!("/churn/{i}");
            assert_eq!(&*c.label_for(&path), OTHER);
            c.acquired(&path, 1);
            c.released(&path, ReleaseCause::Released, 5);
            assert!(c.folded.remembered() <= FoldedPaths::REMEMBERED);
        }
        assert_eq!(c.folded(), n);
        // A recently folded path is not counted twice; the labelled one stays labelled.
        c.label_for(&format!("/churn/{}", n - 1));
        assert_eq!(c.folded(), n);
        assert_eq!(&*c.label_for("/kept"), "/kept");
        assert_eq!(c.labels.len(), 1);
        let other = &c.per_lock[&Arc::<str>::from(OTHER)];
        assert_eq!(other.acquisitions, n);
        assert_eq!(other.releases[&ReleaseCause::Released], n);
        // The exposition reports the count.
        let input = MetricsInput {
            sources: vec![SourceMetrics {
                name: "r".into(),
                up: true,
                synced: true,
                nodes: 0,
                resyncs: 0,
                recipes: BTreeMap::new(),
                locks: BTreeMap::new(),
                counters: c,
            }],
            max_labels: 1,
            ..MetricsInput::default()
        };
        assert!(render(&input, 0).contains("lockscope_lock_labels_folded{source=\"r\"} 100000\n"));
    }

    #[test]
    fn renders_families_with_escaped_labels_and_cumulative_buckets() {
        let mut counters = LockCounters::new(10);
        counters.label_for("/we\"ird\\path");
        counters.acquired("/we\"ird\\path", 30);
        counters.released("/we\"ird\\path", ReleaseCause::SessionExpired, 2_000);
        let input = MetricsInput {
            sources: vec![SourceMetrics {
                name: "zk".into(),
                up: true,
                synced: true,
                nodes: 3,
                resyncs: 1,
                recipes: BTreeMap::from([("queue", 1)]),
                locks: BTreeMap::new(),
                counters,
            }],
            max_labels: 10,
            corrections: Vec::new(),
            lagging: Vec::new(),
            databases: Vec::new(),
        };
        let text = render(&input, 0);
        assert!(text.contains("lockscope_source_up{source=\"zk\"} 1"));
        assert!(text.contains("lockscope_source_lagging{source=\"zk\"} 0"));
        assert!(text.contains("lock=\"/we\\\"ird\\\\path\""));
        assert!(text.contains("cause=\"session_expired\"} 1"));
        assert!(text.contains("lockscope_lock_wait_duration_seconds_bucket{source=\"zk\",lock=\"/we\\\"ird\\\\path\",le=\"0.05\"} 1"));
        assert!(text.contains("lockscope_lock_hold_duration_seconds_bucket{source=\"zk\",lock=\"/we\\\"ird\\\\path\",le=\"1\"} 0"));
    }
}
