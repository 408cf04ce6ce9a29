//! Prometheus exposition (`GET /metrics`), OpenMetrics text through `prometheus-client`.
//!
//! Two registries make one scrape. The lock table's own ([`lockscope_core::aggregate::Handle::registry`])
//! holds the lock counters, histograms and gauges, kept current as locks change: a scrape reads
//! them and never walks the locks. The second is built per scrape from a few figures per source
//! (up, lagging, nodes, resyncs, folded labels, corrections, database polling), lockscope's own
//! work (collectors, the table's queue, the store, force releases) and the stale-lock and
//! deadlock gauges, which [`Detection`] judges from a snapshot at most once per
//! [`DETECTION_EVERY`] off the async workers and off the scrape's path (a scrape shows the last
//! finished judgement and starts the next). The `lock` label is bounded per source
//! (`aggregate/counters.rs`). A third registry, built with the HTTP server, holds lockscope's
//! own families ([`own`]: build info, `process_*`, HTTP requests, event stream clients). No
//! global registry exists.

use std::sync::{Arc, Mutex};

pub mod own;

use lockscope_model::wire::{StuckKind, StuckLevel};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub use lockscope_core::aggregate::counters::{
    BootstrapProgress, FoldedPaths, LockCounters, MetricsInput, SourceMetrics, Text, BUCKETS, OTHER,
};

/// The content type of the exposition as `prometheus-client` writes it.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of the classic text format, for clients that do not accept OpenMetrics.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics (Prometheus does; curl and promtool do not).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// The classic text format (0.0.4) of an OpenMetrics exposition, for clients that did not ask
/// for OpenMetrics: a counter family's `HELP`/`TYPE` name its samples (`x_total`), and the
/// `# EOF` marker goes. Everything else is written the same in both formats.
pub fn classic_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut lines = openmetrics.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            let counter = lines
                .peek()
                .is_some_and(|next| *next == format!("# TYPE {name} counter"));
            if counter && !name.ends_with("_total") {
                out.push_str(&format!("# HELP {name}_total{}\n", &rest[name.len()..]));
                out.push_str(&format!("# TYPE {name}_total counter\n"));
                lines.next();
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Stale-lock and deadlock gauges are judged at most this often (judging walks every lock).
pub const DETECTION_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Families of samples computed for one scrape.
#[derive(Debug, Default)]
pub struct Samples(Vec<SampleFamily>);

#[derive(Debug)]
struct SampleFamily {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(Vec<(&'static str, Text)>, f64)>,
}

impl Samples {
    /// Starts a family; `name` of a counter is without `_total` (the encoder adds it).
    pub fn family(
        &mut self,
        name: &'static str,
        kind: MetricType,
        help: &'static str,
    ) -> &mut Samples {
        self.0.push(SampleFamily {
            name,
            help,
            kind,
            samples: Vec::new(),
        });
        self
    }

    /// Adds a sample to the family started last.
    pub fn sample(&mut self, labels: &[(&'static str, &str)], value: f64) -> &mut Samples {
        if let Some(family) = self.0.last_mut() {
            let labels = labels.iter().map(|(k, v)| (*k, Text::new(v))).collect();
            family.samples.push((labels, value));
        }
        self
    }

    /// One family with one sample per source: `name{source="…"} value`.
    pub fn per_source<'a>(
        &mut self,
        name: &'static str,
        kind: MetricType,
        help: &'static str,
        values: impl Iterator<Item = (&'a str, f64)>,
    ) -> &mut Samples {
        self.family(name, kind, help);
        for (source, value) in values {
            self.sample(&[("source", source)], value);
        }
        self
    }
}

fn encode_number(
    kind: MetricType,
    encoder: prometheus_client::encoding::MetricEncoder<'_>,
    value: f64,
) -> std::fmt::Result {
    let integral = value.fract() == 0.0 && value.abs() < 9.0e15;
    match (kind, integral) {
        (MetricType::Counter, true) => ConstCounter::new(value.max(0.0) as u64).encode(encoder),
        (MetricType::Counter, false) => ConstCounter::new(value).encode(encoder),
        (_, true) => ConstGauge::new(value as i64).encode(encoder),
        (_, false) => ConstGauge::new(value).encode(encoder),
    }
}

impl Collector for Samples {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for family in &self.0 {
            let mut metric =
                encoder.encode_descriptor(family.name, family.help, None, family.kind)?;
            for (labels, value) in &family.samples {
                if labels.is_empty() {
                    // A family without labels has one sample.
                    encode_number(family.kind, metric, *value)?;
                    break;
                }
                encode_number(family.kind, metric.encode_family(labels)?, *value)?;
            }
        }
        Ok(())
    }
}

/// Writes a whole scrape: the lock table's registry, then `samples`.
pub fn exposition(core: &Registry, samples: Samples) -> String {
    exposition_of(&[core], samples)
}

/// Writes a whole scrape: each registry in turn (the lock table's, lockscope's own
/// ([`own`])), then `samples`.
pub fn exposition_of(registries: &[&Registry], samples: Samples) -> String {
    let mut scrape = Registry::default();
    scrape.register_collector(Box::new(samples));
    let mut out = String::with_capacity(64 * 1024);
    let written = registries
        .iter()
        .try_for_each(|r| prometheus_client::encoding::text::encode_registry(&mut out, r))
        .and_then(|()| prometheus_client::encoding::text::encode_registry(&mut out, &scrape))
        .and_then(|()| prometheus_client::encoding::text::encode_eof(&mut out));
    if let Err(e) = written {
        tracing::error!(error = %e, "encoding the metrics failed");
    }
    out
}

/// A source's own figures: up, lagging, nodes, resyncs, folded labels, the label cap,
/// reconcile corrections, database polling.
pub fn render(input: &MetricsInput, samples: &mut Samples) {
    let sources = &input.sources;
    samples.per_source(
        "lockscope_source_up",
        MetricType::Gauge,
        "1 when lockscope is connected to the source and its mirror is live.",
        sources
            .iter()
            .map(|s| (s.name.as_str(), f64::from(u8::from(s.up && s.synced)))),
    );
    samples.per_source(
        "lockscope_source_last_seen_timestamp_seconds",
        MetricType::Gauge,
        "While the source is not up after it was (silent past its silence_limit, disconnected): when lockscope last knew it to be as shown (Unix seconds). Its locks are still shown, as of then.",
        sources
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.last_seen_ms? as f64 / 1000.0))),
    );
    samples.per_source(
        "lockscope_source_lagging",
        MetricType::Gauge,
        "1 while the source changes faster than lockscope reads it: it dropped its backlog and catches up by a full re-read (Redis).",
        sources
            .iter()
            .map(|s| (s.name.as_str(), f64::from(u8::from(input.lagging.contains(&s.name))))),
    );
    samples.per_source(
        "lockscope_source_nodes",
        MetricType::Gauge,
        "Nodes mirrored from the source's watched subtrees.",
        sources.iter().map(|s| (s.name.as_str(), s.nodes as f64)),
    );
    let bootstraps: Vec<(&str, BootstrapProgress)> = sources
        .iter()
        .filter_map(|s| Some((s.name.as_str(), s.bootstrap?)))
        .collect();
    samples.per_source(
        "lockscope_source_bootstrap_running",
        MetricType::Gauge,
        "1 while a full read of the source (its bootstrap, or a resync after a reconnect) is under way.",
        bootstraps.iter().map(|(n, b)| (*n, f64::from(u8::from(b.running)))),
    );
    samples.per_source(
        "lockscope_source_bootstrap_nodes",
        MetricType::Gauge,
        "Nodes the running full read has read so far, or the last full read read in all.",
        bootstraps.iter().map(|(n, b)| (*n, b.nodes as f64)),
    );
    samples.per_source(
        "lockscope_source_bootstrap_duration_seconds",
        MetricType::Gauge,
        "How long the last complete full read of the source took.",
        bootstraps
            .iter()
            .filter_map(|(n, b)| Some((*n, b.last_seconds?))),
    );
    samples.per_source(
        "lockscope_source_resyncs",
        MetricType::Counter,
        "Full re-reads of the source: the first read, then ZooKeeper after every reconnect, etcd after a compaction lost events.",
        sources.iter().map(|s| (s.name.as_str(), s.resyncs as f64)),
    );
    samples.per_source(
        "lockscope_lock_labels_folded",
        MetricType::Gauge,
        "Distinct lock paths folded into lock=\"__other__\" by the label cap (one seen again after at least 4096 other folded paths counts again).",
        sources.iter().map(|s| (s.name.as_str(), s.folded as f64)),
    );
    samples.per_source(
        "lockscope_unrecognised_keys",
        MetricType::Gauge,
        "Keys under the source's watched patterns (nodes under its watched roots) that no recipe reads as a lock: not shown as locks, listed with a sample on the sources page (/api/v1/sources).",
        sources.iter().map(|s| (s.name.as_str(), s.unrecognised as f64)),
    );
    samples
        .family(
            "lockscope_lock_label_limit",
            MetricType::Gauge,
            "Distinct lock label values allowed per source.",
        )
        .sample(&[], input.max_labels as f64);
    samples.per_source(
        "lockscope_source_corrections",
        MetricType::Counter,
        "Lock keys a reconcile scan found different from what notifications had shown (Redis): after a lost notification stream, each also books its net acquisition or release.",
        input
            .corrections
            .iter()
            .map(|(name, count)| (name.as_str(), *count as f64)),
    );
    // The families backends add for their own sources, each written once with the samples of
    // every source that has it, in the order first given.
    let mut families: Vec<&'static str> = input.families.iter().map(|f| f.name).collect();
    for sample in &input.backend_samples {
        if !families.contains(&sample.family.name) {
            families.push(sample.family.name);
        }
    }
    for name in families {
        let declared = input.families.iter().copied().find(|f| f.name == name);
        let mut samples_of = input
            .backend_samples
            .iter()
            .filter(|s| s.family.name == name)
            .peekable();
        let Some(family) = declared.or(samples_of.peek().map(|s| s.family)) else {
            continue;
        };
        samples.family(name, family.kind, family.help);
        for sample in samples_of {
            samples.sample(
                &[
                    ("source", &sample.source),
                    ("backend", sample.backend.as_str()),
                ],
                sample.value,
            );
        }
    }
}

/// lockscope's own work: per collector the updates it sent and the connections it lost, and
/// the lock table's queue (updates sent and not yet applied) and throughput.
pub fn render_self(handle: &lockscope_core::aggregate::Handle, samples: &mut Samples) {
    use std::sync::atomic::Ordering;
    // Per collector: counters of its work, then (sources whose first read lists keys) the
    // progress of that read.
    let scans_keys = |s: &lockscope_core::aggregate::SourceStats| s.scans_keys;
    let every = |_: &lockscope_core::aggregate::SourceStats| true;
    type Read = fn(&lockscope_core::aggregate::SourceStats) -> u64;
    type Has = dyn Fn(&lockscope_core::aggregate::SourceStats) -> bool;
    let families: [(&str, MetricType, &str, Read, &Has); 5] = [
        (
            "lockscope_collector_events",
            MetricType::Counter,
            "Updates a source's collector sent to the aggregator.",
            |s| s.events.load(Ordering::Relaxed),
            &every,
        ),
        (
            "lockscope_collector_reconnects",
            MetricType::Counter,
            "Connections to a source lost (or refused) and retried.",
            |s| s.reconnects.load(Ordering::Relaxed),
            &every,
        ),
        (
            "lockscope_collector_overflows",
            MetricType::Counter,
            "Backlogs of changes a collector dropped because changes came faster than it read them; each is followed by a full re-read (Redis).",
            |s| s.overflows.load(Ordering::Relaxed),
            &every,
        ),
        (
            "lockscope_source_bootstrap_keys_scanned",
            MetricType::Gauge,
            "Keys the source's first full read has listed so far, summed over its members (Redis: every key SCAN returned, lock or not).",
            |s| s.bootstrap_scanned.load(Ordering::Relaxed),
            &scans_keys,
        ),
        (
            "lockscope_source_bootstrap_keys_read",
            MetricType::Gauge,
            "Lock keys the source's first full read has read so far, summed over its members (reads overlap the listing).",
            |s| s.bootstrap_read.load(Ordering::Relaxed),
            &scans_keys,
        ),
    ];
    for (name, kind, help, read, has) in families {
        samples.family(name, kind, help);
        for stats in handle.collector_stats.iter().filter(|s| has(s)) {
            samples.sample(
                &[
                    ("source", &stats.source),
                    ("backend", stats.backend.as_str()),
                ],
                read(stats) as f64,
            );
        }
    }
    samples.family(
        "lockscope_source_info",
        MetricType::Gauge,
        "One per configured source, naming its backend (join on source to label other families by backend).",
    );
    for stats in &handle.collector_stats {
        samples.sample(
            &[
                ("source", &stats.source),
                ("backend", stats.backend.as_str()),
            ],
            1.0,
        );
    }
    samples
        .family(
            "lockscope_aggregator_queue_depth",
            MetricType::Gauge,
            "Updates the collectors sent that the aggregator has not applied yet.",
        )
        .sample(&[], handle.lag() as f64);
    samples
        .family(
            "lockscope_aggregator_applied",
            MetricType::Counter,
            "Updates the aggregator applied and published.",
        )
        .sample(&[], *handle.applied.borrow() as f64);
}

/// The store as this replica sees it (see [`lockscope_store`]): reachable, writing the history,
/// events waiting, written and dropped. Per replica by nature: the only store figures that
/// differ between replicas watching the same sources.
pub fn render_store(store: &lockscope_store::Store, samples: &mut Samples) {
    let status = store.status();
    samples
        .family(
            "lockscope_store_up",
            MetricType::Gauge,
            "1 when the store answers (connected, schema applied), else 0.",
        )
        .sample(&[], if status.connected { 1.0 } else { 0.0 });
    samples
        .family(
            "lockscope_store_writer",
            MetricType::Gauge,
            "1 on the replica that writes the history now, else 0 (one replica per store).",
        )
        .sample(&[], if status.writing { 1.0 } else { 0.0 });
    samples
        .family(
            "lockscope_store_queue_depth",
            MetricType::Gauge,
            "Lock events waiting to be written to the store (on a replica that does not write: kept to fill a failover's gap).",
        )
        .sample(&[], status.queue_depth as f64);
    samples
        .family(
            "lockscope_store_events_written",
            MetricType::Counter,
            "Lock events this replica wrote to the store.",
        )
        .sample(&[], status.events_written as f64);
    samples
        .family(
            "lockscope_store_events_dropped",
            MetricType::Counter,
            "Lock events dropped from the stored history because the buffer was full (the store down, slow or refusing writes; the oldest go first).",
        )
        .sample(&[], status.events_dropped as f64);
}

/// Live views (`/api/v1/events` with a query): open streams, and clients sent a fresh
/// snapshot because they could not keep up.
pub fn render_views(open: u64, resyncs: u64, samples: &mut Samples) {
    samples
        .family(
            "lockscope_view_streams",
            MetricType::Gauge,
            "Open live views (event streams of one query's page).",
        )
        .sample(&[], open as f64);
    samples
        .family(
            "lockscope_view_resyncs",
            MetricType::Counter,
            "Live-view clients that fell behind and were sent a fresh snapshot instead of a queue.",
        )
        .sample(&[], resyncs as f64);
}

/// Force-release attempts by outcome.
pub fn render_releases(counts: &[(&'static str, u64)], samples: &mut Samples) {
    samples.family(
        "lockscope_force_releases",
        MetricType::Counter,
        "Force-release attempts by outcome (every attempt is audited).",
    );
    for (outcome, n) in counts {
        samples.sample(&[("outcome", outcome)], *n as f64);
    }
}

/// The stale-lock and deadlock gauges, judged from a snapshot at most once per
/// [`DETECTION_EVERY`]: judging walks every lock and session, so many scrapes (or many
/// Prometheus servers) share one judgement, and a scrape does not wait for one. A scrape gets
/// the last finished judgement and, when that is older than [`DETECTION_EVERY`], starts the next
/// in the background (the next scrape gets it): with Prometheus scraping every 15 s the gauges
/// are as of the previous scrape. Only the first scrape, or one after [`DETECTION_SERVED_MAX`]
/// without any, waits for a judgement.
#[derive(Debug, Default, Clone)]
pub struct Detection {
    last: Arc<Mutex<Option<LastJudged>>>,
    /// Held while one judgement runs, so concurrent scrapes do not repeat it.
    running: Arc<tokio::sync::Mutex<()>>,
}

/// A judgement older than this is not served: the scrape waits for a new one.
pub const DETECTION_SERVED_MAX: std::time::Duration = std::time::Duration::from_secs(120);

/// The last judgement and when it was made.
type LastJudged = (std::time::Instant, Arc<Judged>);

/// One judgement: stale locks by (source, rule), deadlock cycles by source, cycles across
/// sources, root blockers by source.
#[derive(Debug, Default)]
pub struct Judged {
    pub(crate) stale: Vec<((String, &'static str), u64)>,
    /// Locks whose worst wait or hold is past a stuck limit, by source, level and kind.
    pub(crate) stuck: Vec<((String, StuckLevel, StuckKind), u64)>,
    cycles: Vec<(String, u64)>,
    /// Cycles across sources joined by exact process names.
    cross_cycles: u64,
    /// Per source: root blockers with a session there, and the most participants one holds up.
    roots: Vec<(String, (u64, u64))>,
}

impl Detection {
    /// The last judgement if it is younger than `age`.
    fn younger_than(&self, age: std::time::Duration) -> Option<Arc<Judged>> {
        let last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < age)
            .map(|(_, judged)| judged.clone())
    }

    /// The judgement a scrape shows: the last one (judging again in the background when it is
    /// older than [`DETECTION_EVERY`]), or, with none younger than [`DETECTION_SERVED_MAX`], a
    /// new one judged now (off the async workers).
    pub async fn judged(
        &self,
        handle: &lockscope_core::aggregate::Handle,
        rules: Arc<lockscope_model::rules::Judge>,
        identity: Arc<crate::http::waitfor::IdentityRules>,
    ) -> Arc<Judged> {
        if let Some(judged) = self.younger_than(DETECTION_EVERY) {
            return judged;
        }
        if let Some(judged) = self.younger_than(DETECTION_SERVED_MAX) {
            if let Ok(running) = self.running.clone().try_lock_owned() {
                let (this, handle) = (self.clone(), handle.clone());
                tokio::spawn(async move {
                    this.judge_now(&handle, rules, identity).await;
                    drop(running);
                });
            }
            return judged;
        }
        let _running = self.running.lock().await;
        if let Some(judged) = self.younger_than(DETECTION_EVERY) {
            return judged;
        }
        self.judge_now(handle, rules, identity).await
    }

    /// Judges the current snapshot and sessions and keeps the result.
    async fn judge_now(
        &self,
        handle: &lockscope_core::aggregate::Handle,
        rules: Arc<lockscope_model::rules::Judge>,
        identity: Arc<crate::http::waitfor::IdentityRules>,
    ) -> Arc<Judged> {
        let snapshot = handle.snapshot.borrow().clone();
        let asked = std::time::Instant::now();
        let sessions = handle
            .ask(|reply| lockscope_core::aggregate::Command::Sessions { reply })
            .await
            .unwrap_or_default();
        let sessions_took = asked.elapsed();
        let now = lockscope_core::now_ms();
        let joinable: Vec<String> = handle
            .collector_stats
            .iter()
            .filter(|s| s.sessions)
            .map(|s| s.source.clone())
            .collect();
        let judging = std::time::Instant::now();
        let judged = tokio::task::spawn_blocking(move || {
            judge(&snapshot, &sessions, &joinable, now, &rules, &identity)
        })
        .await
        .map(Arc::new)
        .unwrap_or_default();
        tracing::debug!(
            sessions_ms = sessions_took.as_millis() as u64,
            judge_ms = judging.elapsed().as_millis() as u64,
            "detection judged"
        );
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((std::time::Instant::now(), judged.clone()));
        judged
    }
}

/// Adds `lockscope_stale_locks{source,rule}`, `lockscope_lock_stuck{source,level,kind}` and
/// `lockscope_deadlock_cycles{source}`.
pub fn render_detection(judged: &Judged, samples: &mut Samples) {
    samples.family(
        "lockscope_stale_locks",
        MetricType::Gauge,
        "Locks breaking a stale-lock rule (see /api/v1/locks?stale=true).",
    );
    for ((source, rule), n) in &judged.stale {
        samples.sample(&[("source", source), ("rule", rule)], *n as f64);
    }
    samples.family(
        "lockscope_lock_stuck",
        MetricType::Gauge,
        "Locks whose worst wait or hold is past its stuck limit ([stuck] in the config; see /api/v1/locks?state=stuck), by level and by whether a wait or a hold.",
    );
    for ((source, level, kind), n) in &judged.stuck {
        samples.sample(
            &[
                ("source", source),
                ("level", level.as_str()),
                ("kind", kind.as_str()),
            ],
            *n as f64,
        );
    }
    samples.family(
        "lockscope_deadlock_cycles",
        MetricType::Gauge,
        "Cycles in the sessions' wait-for graph (possible deadlocks, see /api/v1/deadlocks).",
    );
    for (source, n) in &judged.cycles {
        samples.sample(&[("source", source)], *n as f64);
    }
    samples.family(
        "lockscope_cross_source_deadlock_cycles",
        MetricType::Gauge,
        "Cycles of the wait-for graph that span sources, joined by exact process names (see /api/v1/deadlocks; cycles through a guessed join are shown there but not counted).",
    );
    samples.sample(&[], judged.cross_cycles as f64);
    samples.family(
        "lockscope_root_blockers",
        MetricType::Gauge,
        "Participants holding locks others wait on while waiting on none themselves, by the source of their session (see /api/v1/blockers).",
    );
    for (source, (n, _)) in &judged.roots {
        samples.sample(&[("source", source)], *n as f64);
    }
    samples.family(
        "lockscope_root_blocker_held_up_max",
        MetricType::Gauge,
        "The most participants one root blocker holds up, directly and through others, by the source of its session.",
    );
    for (source, (_, max)) in &judged.roots {
        samples.sample(&[("source", source)], *max as f64);
    }
}

/// Judges every lock with the rules the API and the UI use, and the sessions' wait-for graph.
pub fn judge(
    snapshot: &lockscope_core::aggregate::Snapshot,
    sessions: &[lockscope_model::wire::SessionView],
    joinable: &[String],
    now: i64,
    rules: &lockscope_model::rules::Judge,
    identity: &crate::http::waitfor::IdentityRules,
) -> Judged {
    use lockscope_model::rules::{stale_findings, BUILTIN};
    use std::collections::BTreeMap;
    let mut stale: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    for source in &snapshot.sources {
        for rule in BUILTIN {
            stale.insert((source.name.clone(), rule.name()), 0);
        }
    }
    let mut stuck: BTreeMap<(String, StuckLevel, StuckKind), u64> = BTreeMap::new();
    if !rules.stuck.is_empty() {
        for source in &snapshot.sources {
            for level in StuckLevel::ALL {
                for kind in StuckKind::ALL {
                    stuck.insert((source.name.clone(), level, kind), 0);
                }
            }
        }
    }
    // Only the locks their summaries say are stale or stuck as of `now` are rendered (the
    // summaries were judged by the same rules, see `lockscope_core::aggregate::summary`): a
    // pass over small entries, not a render of every lock.
    let flagged = snapshot
        .locks
        .iter()
        .filter(|(_, entry)| entry.summary.stale(now) || entry.summary.stuck(now));
    for (id, entry) in flagged {
        let lock = snapshot.render_marked(id, &entry.stored);
        for rule in stale_findings(&lock, now, rules.stale_hold_ms) {
            *stale.entry((lock.source.clone(), rule.name())).or_default() += 1;
        }
        if let Some(s) = lockscope_model::stuck::judge(&lock, now, &rules.stuck) {
            *stuck
                .entry((lock.source.clone(), s.level, s.kind))
                .or_default() += 1;
        }
    }
    let graph =
        crate::http::waitfor::joined_graph(sessions, &|id: &str| snapshot.lock(id), identity);
    let mut roots: BTreeMap<String, (u64, u64)> = snapshot
        .sources
        .iter()
        .filter(|s| joinable.contains(&s.name))
        .map(|s| (s.name.clone(), (0, 0)))
        .collect();
    for root in graph.root_blockers(|_| None, now) {
        let sources: std::collections::BTreeSet<&str> = root
            .nodes
            .iter()
            .map(|&n| graph.nodes[n].source.as_str())
            .collect();
        for source in sources {
            let entry = roots.entry(source.to_string()).or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(root.total);
        }
    }
    let mut cycles: BTreeMap<String, u64> = snapshot
        .sources
        .iter()
        // Sources whose participants have sessions a wait-for graph can join.
        .filter(|s| joinable.contains(&s.name))
        .map(|s| (s.name.clone(), 0))
        .collect();
    for cycle in &graph.cycles {
        if let Some(&first) = cycle.first() {
            *cycles.entry(graph.nodes[first].source.clone()).or_default() += 1;
        }
    }
    Judged {
        stale: stale.into_iter().collect(),
        stuck: stuck.into_iter().collect(),
        cycles: cycles.into_iter().collect(),
        cross_cycles: graph.cross_cycles.iter().filter(|c| c.exact).count() as u64,
        roots: roots.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_core::aggregate::counters::CoreMetrics;
    use lockscope_model::wire::ReleaseCause;

    /// A store that cannot be reached (its directory does not exist): down, not writing, and
    /// what did not fit its buffer counted.
    #[tokio::test]
    async fn the_store_figures_are_exposed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = lockscope_store::Store::open(&lockscope_store::StoreConfig {
            url: Some(format!(
                "sqlite://{}/missing/store.db",
                dir.path().display()
            )),
            buffer_events: 1_000,
            ..Default::default()
        })
        .expect("open");
        let event = |at| lockscope_model::wire::LockEvent {
            at_ms: at,
            kind: lockscope_model::wire::EventKind::Acquired,
            node: "n".into(),
            session: "s".into(),
            cause: None,
            duration_ms: None,
        };
        store.record((0..1_500).map(|i| ("zk~l".to_string(), event(i))).collect());
        let mut samples = Samples::default();
        render_store(&store, &mut samples);
        let text = exposition(&Default::default(), samples);
        for line in [
            "# TYPE lockscope_store_events_dropped counter\n",
            "lockscope_store_events_dropped_total 500\n",
            "lockscope_store_queue_depth 1000\n",
            "lockscope_store_up 0\n",
            "lockscope_store_writer 0\n",
            "lockscope_store_events_written_total 0\n",
        ] {
            assert!(text.contains(line), "{line}{text}");
        }
        store.abort();
    }

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
        assert_eq!(c.acquisitions_of("/c"), 2);
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
            let table = c.label_table();
            let table = table.lock().expect("labels");
            assert!(table.remembered() <= FoldedPaths::REMEMBERED);
        }
        assert_eq!(c.folded(), n);
        // A recently folded path is not counted twice; the labelled one stays labelled.
        c.label_for(&format!("/churn/{}", n - 1));
        assert_eq!(c.folded(), n);
        assert_eq!(&*c.label_for("/kept"), "/kept");
        assert_eq!(c.label_table().lock().expect("labels").len(), 1);
        assert_eq!(c.acquisitions_of("/churn/0"), n);
        assert_eq!(c.releases_of("/churn/0", ReleaseCause::Released), n);
        // The exposition reports the count.
        let input = MetricsInput {
            sources: vec![SourceMetrics {
                name: "r".into(),
                up: true,
                synced: true,
                folded: c.folded(),
                ..SourceMetrics::default()
            }],
            max_labels: 1,
            ..MetricsInput::default()
        };
        let mut samples = Samples::default();
        render(&input, &mut samples);
        let text = exposition(&Registry::default(), samples);
        assert!(
            text.contains("lockscope_lock_labels_folded{source=\"r\"} 100000\n"),
            "{text}"
        );
    }

    #[test]
    fn renders_families_with_escaped_labels_and_cumulative_buckets() {
        let mut counters = LockCounters::new(10);
        let metrics = CoreMetrics::default();
        counters.attach("zk", &metrics);
        counters.label_for("/we\"ird\\path");
        counters.acquired("/we\"ird\\path", 30);
        counters.released("/we\"ird\\path", ReleaseCause::SessionExpired, 2_000);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let input = MetricsInput {
            sources: vec![
                SourceMetrics {
                    name: "zk".into(),
                    up: true,
                    synced: true,
                    last_seen_ms: None,
                    nodes: 3,
                    resyncs: 1,
                    folded: 0,
                    unrecognised: 2,
                    bootstrap: None,
                },
                SourceMetrics {
                    // Silent past its limit: not up, and when it was last seen.
                    name: "quiet".into(),
                    up: false,
                    synced: true,
                    last_seen_ms: Some(1_700_000_000_500),
                    ..SourceMetrics::default()
                },
            ],
            max_labels: 10,
            ..MetricsInput::default()
        };
        let mut samples = Samples::default();
        render(&input, &mut samples);
        let text = exposition(&registry, samples);
        assert!(
            text.contains("lockscope_source_up{source=\"zk\"} 1"),
            "{text}"
        );
        assert!(text.contains("lockscope_source_lagging{source=\"zk\"} 0"));
        assert!(text.contains("lockscope_unrecognised_keys{source=\"zk\"} 2"));
        assert!(text.contains("lockscope_unrecognised_keys{source=\"quiet\"} 0"));
        assert!(
            text.contains("lockscope_source_up{source=\"quiet\"} 0"),
            "{text}"
        );
        assert!(
            text.contains(
                "lockscope_source_last_seen_timestamp_seconds{source=\"quiet\"} 1700000000.5"
            ),
            "{text}"
        );
        assert!(!text.contains("lockscope_source_last_seen_timestamp_seconds{source=\"zk\"}"));
        assert!(text.contains("lock=\"/we\\\"ird\\\\path\""));
        assert!(text.contains("cause=\"session_expired\"} 1"));
        assert!(text.contains("lockscope_lock_wait_duration_seconds_bucket{le=\"0.05\",source=\"zk\",lock=\"/we\\\"ird\\\\path\"} 1") || text.contains("lockscope_lock_wait_duration_seconds_bucket{source=\"zk\",lock=\"/we\\\"ird\\\\path\",le=\"0.05\"} 1"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
