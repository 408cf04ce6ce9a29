//! Metrics state: what the lock table counts per source — the `lock` label table with its
//! bound ([`LockCounters`]: the first `max_lock_labels` paths get their own label for the life
//! of the process, later ones fold into `__other__`, remembered in a bounded window
//! ([`FoldedPaths`])), acquisition and release counters, wait and hold histograms — and the
//! plain data a scrape is rendered from ([`MetricsInput`]). Fed by the ledger and the backends'
//! states as changes are booked; rendered by `metrics/`. Imports nothing of the crate.

use std::collections::{BTreeMap, HashMap, HashSet};
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
    pub counts: [u64; BUCKETS.len()],
    pub count: u64,
    pub sum: f64,
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
    pub labels: HashMap<String, Arc<str>>,
    pub folded: FoldedPaths,
    other: Arc<str>,
    pub per_lock: BTreeMap<Arc<str>, PerLock>,
    pub session_expirations: u64,
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
