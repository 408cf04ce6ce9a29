//! Metrics state: what the lock table counts per source — the `lock` label table with its
//! bound ([`LockCounters`]: the first `max_lock_labels` paths get their own label for the life
//! of the process, later ones fold into `__other__`, remembered in a bounded window
//! ([`FoldedPaths`])), acquisition and release counters, wait and hold histograms — and the
//! plain data a scrape is rendered from ([`MetricsInput`]). Fed by the ledger and the backends'
//! states as changes are booked; rendered by `metrics/`. Imports nothing of the crate.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use lockscope_model::wire::ReleaseCause;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub const OTHER: &str = "__other__";

/// Bucket bounds, seconds, of the wait and hold histograms.
pub const BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    1800.0, 3600.0,
];

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

/// A label value as it goes on the wire: `\`, `"` and newlines escaped (`prometheus-client`
/// 0.24 writes label values verbatim, and lock paths are whatever clients named them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Text(pub Arc<str>);

impl Text {
    pub fn new(text: &str) -> Self {
        Text(Arc::from(text))
    }
}

impl std::borrow::Borrow<str> for Text {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl EncodeLabelValue for Text {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        use std::fmt::Write as _;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// `{source, lock}`, in that order on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct LockLabels {
    pub source: Text,
    pub lock: Text,
}

/// `{source, lock, cause}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CauseLabels {
    pub source: Text,
    pub lock: Text,
    pub cause: &'static str,
}

/// `{source}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: Text,
}

fn histogram() -> Histogram {
    Histogram::new(BUCKETS.iter().copied())
}

type HistogramFamily = Family<LockLabels, Histogram, fn() -> Histogram>;

/// The lock table's counters and histograms, one family each for every source (no global
/// registry: each lock table has its own, registered into its own [`Registry`]). Cloning shares
/// the families.
#[derive(Debug, Clone)]
pub struct CoreMetrics {
    acquisitions: Family<LockLabels, Counter>,
    releases: Family<CauseLabels, Counter>,
    wait: HistogramFamily,
    hold: HistogramFamily,
    session_expirations: Family<SourceLabels, Counter>,
}

impl Default for CoreMetrics {
    fn default() -> Self {
        CoreMetrics {
            acquisitions: Family::default(),
            releases: Family::default(),
            wait: Family::new_with_constructor(histogram),
            hold: Family::new_with_constructor(histogram),
            session_expirations: Family::default(),
        }
    }
}

impl CoreMetrics {
    /// Registers the families (sharing them) into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "lockscope_lock_acquisitions",
            "Times a participant started holding the lock, booked from every change the source reports (Redis: the lock key's own keyspace notifications, holds too brief to read included; changes while a member's notifications were lost are missed and the full scan that follows books the net difference. Databases: only holds that lasted across a poll; a lock taken and let go between two polls is not seen).",
            self.acquisitions.clone(),
        );
        registry.register(
            "lockscope_lock_releases",
            "Times a holder stopped holding, by cause, booked from every change the source reports (databases: only holds that lasted across a poll; a lock taken and let go between two polls is not seen).",
            self.releases.clone(),
        );
        registry.register(
            "lockscope_lock_wait_duration_seconds",
            "Time from queueing to holding, per acquisition (databases: as the polls saw it, to within one poll_interval).",
            self.wait.clone(),
        );
        registry.register(
            "lockscope_lock_hold_duration_seconds",
            "Time from acquiring to releasing, per release (databases: as the polls saw it, to within one poll_interval).",
            self.hold.clone(),
        );
        registry.register(
            "lockscope_session_expirations",
            "Sessions seen expiring while they held or waited on a lock.",
            self.session_expirations.clone(),
        );
    }
}

/// A source's `lock` label table: the first `max_labels` paths get their own label for the
/// life of the process (counters must not jump), later ones fold into `__other__`.
#[derive(Debug)]
pub struct LabelTable {
    max_labels: usize,
    labels: HashMap<Box<str>, Text>,
    folded: FoldedPaths,
    other: Text,
}

impl LabelTable {
    pub fn new(max_labels: usize) -> Self {
        LabelTable {
            max_labels,
            labels: HashMap::new(),
            folded: FoldedPaths::default(),
            other: Text::new(OTHER),
        }
    }

    /// The `lock` label for `path`, assigning one (or folding) on first sight.
    pub fn label_for(&mut self, path: &str) -> Text {
        if let Some(label) = self.labels.get(path) {
            return label.clone();
        }
        if self.labels.len() < self.max_labels {
            let label = Text::new(path);
            self.labels.insert(Box::from(path), label.clone());
            label
        } else {
            self.folded.note(path);
            self.other.clone()
        }
    }

    /// The label already given to `path` (`__other__` when folded or unknown).
    pub fn existing_label(&self, path: &str) -> Text {
        self.labels
            .get(path)
            .cloned()
            .unwrap_or_else(|| self.other.clone())
    }

    /// Lock paths folded into `__other__` (see [`FoldedPaths`]).
    pub fn folded(&self) -> u64 {
        self.folded.count()
    }

    /// Paths with a label of their own.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Folded paths remembered now.
    pub fn remembered(&self) -> usize {
        self.folded.remembered()
    }
}

/// One source's view of the lock table's counters: its label table (shared with the table's
/// lock gauges) and its series in the [`CoreMetrics`] families. Built detached (its own
/// families) and [`LockCounters::attach`]ed by the lock table to the shared ones.
#[derive(Debug, Clone)]
pub struct LockCounters {
    source: Text,
    labels: Arc<Mutex<LabelTable>>,
    metrics: CoreMetrics,
}

impl LockCounters {
    pub fn new(max_labels: usize) -> Self {
        Self {
            source: Text::new(""),
            labels: Arc::new(Mutex::new(LabelTable::new(max_labels))),
            metrics: CoreMetrics::default(),
        }
    }

    /// Books into `metrics` from now on, as source `source`.
    pub fn attach(&mut self, source: &str, metrics: &CoreMetrics) {
        self.source = Text::new(source);
        self.metrics = metrics.clone();
        // Every source has the series, at 0 until a session expires.
        let _created = self
            .metrics
            .session_expirations
            .get_or_create(&SourceLabels {
                source: self.source.clone(),
            });
    }

    /// The label table, shared with whoever labels this source's gauges.
    pub fn label_table(&self) -> Arc<Mutex<LabelTable>> {
        self.labels.clone()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, LabelTable> {
        self.labels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `lock` label for `path`, assigning one (or folding) on first sight.
    pub fn label_for(&mut self, path: &str) -> Arc<str> {
        self.table().label_for(path).0
    }

    /// The label already given to `path` (`__other__` when folded or unknown).
    pub fn existing_label(&self, path: &str) -> Arc<str> {
        self.table().existing_label(path).0
    }

    fn labels(&mut self, path: &str) -> LockLabels {
        LockLabels {
            source: self.source.clone(),
            lock: self.table().label_for(path),
        }
    }

    pub fn acquired(&mut self, path: &str, waited_ms: i64) {
        let labels = self.labels(path);
        self.metrics.acquisitions.get_or_create(&labels).inc();
        self.metrics
            .wait
            .get_or_create(&labels)
            .observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// A wait that ended in an acquisition counted elsewhere (Redis counts acquisitions from
    /// notifications, and learns a fair-lock waiter's wait from reads).
    pub fn waited(&mut self, path: &str, waited_ms: i64) {
        let labels = self.labels(path);
        self.metrics
            .wait
            .get_or_create(&labels)
            .observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// An acquisition whose wait is known only sometimes (Redis: fair-lock waiters).
    pub fn acquired_maybe_waited(&mut self, path: &str, waited_ms: Option<i64>) {
        match waited_ms {
            Some(waited) => self.acquired(path, waited),
            None => {
                let labels = self.labels(path);
                self.metrics.acquisitions.get_or_create(&labels).inc();
            }
        }
    }

    pub fn released(&mut self, path: &str, cause: ReleaseCause, held_ms: i64) {
        let labels = self.labels(path);
        self.metrics
            .releases
            .get_or_create(&CauseLabels {
                source: labels.source.clone(),
                lock: labels.lock.clone(),
                cause: cause.as_str(),
            })
            .inc();
        self.metrics
            .hold
            .get_or_create(&labels)
            .observe(held_ms.max(0) as f64 / 1000.0);
    }

    pub fn session_expired(&mut self) {
        self.metrics
            .session_expirations
            .get_or_create(&SourceLabels {
                source: self.source.clone(),
            })
            .inc();
    }

    /// Lock paths folded into `__other__` (see [`FoldedPaths`]).
    pub fn folded(&self) -> u64 {
        self.table().folded()
    }

    /// Acquisitions booked for `path`'s label (creates the series if it has none).
    pub fn acquisitions_of(&self, path: &str) -> u64 {
        let labels = LockLabels {
            source: self.source.clone(),
            lock: self.table().existing_label(path),
        };
        self.metrics.acquisitions.get_or_create(&labels).get()
    }

    /// Releases with `cause` booked for `path`'s label (creates the series if it has none).
    pub fn releases_of(&self, path: &str, cause: ReleaseCause) -> u64 {
        let labels = CauseLabels {
            source: self.source.clone(),
            lock: self.table().existing_label(path),
            cause: cause.as_str(),
        };
        self.metrics.releases.get_or_create(&labels).get()
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
    /// The families the backends register, exported with or without samples.
    pub families: Vec<&'static BackendFamily>,
    /// Samples of the families a backend registers for its own sources ([`BackendFamily`]).
    pub backend_samples: Vec<SourceSample>,
}

/// A metric family a backend adds for its sources (`lockscope_db_rounds` …), declared once in
/// its crate; every sample is labelled `source` and `backend`.
#[derive(Debug)]
pub struct BackendFamily {
    pub name: &'static str,
    pub kind: prometheus_client::metrics::MetricType,
    pub help: &'static str,
}

/// One source's sample of a backend's [`BackendFamily`]; the samples of one family from several
/// sources are written as one family.
#[derive(Debug, Clone)]
pub struct SourceSample {
    pub family: &'static BackendFamily,
    pub source: String,
    pub backend: lockscope_model::wire::Backend,
    pub value: f64,
}

/// The `recipe` label of `recipe`: itself when it is one of `labels` (a backend's closed set),
/// else `other`, so the label's values stay bounded.
pub fn recipe_label(labels: &'static [&'static str], recipe: &str) -> &'static str {
    labels
        .iter()
        .find(|k| **k == recipe)
        .copied()
        .unwrap_or("other")
}

/// A source's own figures for a scrape (its lock gauges and counters are kept current by the
/// lock table and are not copied here).
#[derive(Debug, Default)]
pub struct SourceMetrics {
    pub name: String,
    pub up: bool,
    pub synced: bool,
    /// While not up after it was: when the source was last seen (epoch ms).
    pub last_seen_ms: Option<i64>,
    pub nodes: u64,
    pub resyncs: u64,
    /// Lock paths folded into `__other__`.
    pub folded: u64,
    /// Keys (nodes) under the watched patterns (roots) that no recipe reads as a lock.
    pub unrecognised: u64,
    /// The source's full reads, for `lockscope_source_bootstrap_*` (ZooKeeper; `None` for
    /// sources that do not report them).
    pub bootstrap: Option<BootstrapProgress>,
}

/// How a source's full read (bootstrap, resync) is going.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BootstrapProgress {
    /// A full read is under way.
    pub running: bool,
    /// Nodes (keys) the running full read has read so far, or the last one read in all.
    pub nodes: u64,
    /// How long the last complete full read took, first request to mirror replaced.
    pub last_seconds: Option<f64>,
}
