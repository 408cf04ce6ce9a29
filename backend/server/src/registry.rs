//! The registry of backends: the one list of the kinds of source lockscope watches
//! ([`BACKENDS`], a line per backend crate), and the assembly of a configuration's sources into
//! the lock table, their collectors and their force releases. Each backend crate exports one
//! descriptor (`lockscope_core::backend::BackendDescriptor`): its config sections and
//! validation, and `build`, which returns a source's typed model, collector and releaser.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use lockscope_core::aggregate::{Aggregator, Command, Handle, SentCounter, UPDATE_QUEUE};
use lockscope_core::backend::{BackendDescriptor, SourceContext};
use lockscope_core::collect::{SourceStats, SourceUpdate, Wiring};
use lockscope_core::release::{Releaser, Releasers};

/// Every backend lockscope watches, one line each; their sources are listed (and their updates
/// indexed) in this order, each backend's sections in its own order.
pub static BACKENDS: &[&dyn BackendDescriptor] = &[
    &lockscope_zookeeper::BACKEND,
    &lockscope_redis::BACKEND,
    &lockscope_etcd::BACKEND,
    &lockscope_database::BACKEND,
];

/// Every config section a backend reads, in registry order.
pub fn sections() -> impl Iterator<Item = &'static lockscope_core::backend::Section> {
    BACKENDS.iter().flat_map(|b| b.sections().iter())
}

/// A configuration's sources, assembled: the lock table over them and the handle to read it,
/// the table's inputs, each source's collector (not yet running) and every force release.
pub struct Assembly {
    pub aggregator: Aggregator,
    pub handle: Handle,
    pub commands: mpsc::Receiver<Command>,
    /// The collectors' rings; the table runs until every collector has ended.
    pub updates: mpsc::Receiver<SourceUpdate>,
    pub collectors: Vec<BoxFuture<'static, ()>>,
    pub releasers: Releasers,
}

/// Builds every configured source (in the order given: the config's) into the lock table,
/// `max_lock_labels` lock labels per source, each with its collector wired to it. Every
/// collector ends when `stop` turns `true`.
pub fn assemble(
    sources: &[ConfiguredSource],
    max_lock_labels: usize,
    stop: &watch::Receiver<bool>,
) -> Assembly {
    let (tx, updates) = mpsc::channel(UPDATE_QUEUE);
    let sent = SentCounter::default();
    let mut models = Vec::new();
    let mut stats = Vec::new();
    let mut collectors = Vec::new();
    let mut releasers: BTreeMap<String, Arc<dyn Releaser>> = BTreeMap::new();
    for (index, source) in sources.iter().enumerate() {
        let source = &source.config;
        let mut source_stats = SourceStats::new(source.name(), source.backend());
        source_stats.scans_keys = source.scans_keys();
        source_stats.sessions = source.sessions();
        let source_stats = Arc::new(source_stats);
        let built = source.build(SourceContext {
            wiring: Wiring {
                index,
                tx: tx.clone(),
                sent: sent.clone(),
                stats: source_stats.clone(),
                stop: stop.clone(),
            },
            max_lock_labels,
        });
        models.push(built.model);
        stats.push(source_stats);
        collectors.push(built.collector);
        releasers.insert(source.name().to_string(), built.releaser);
    }
    let (aggregator, handle, commands) = Aggregator::new(models, max_lock_labels, stats, sent);
    let families = BACKENDS.iter().flat_map(|b| b.families().iter().copied());
    let aggregator = aggregator.with_families(families.collect());
    Assembly {
        aggregator,
        handle,
        commands,
        updates,
        collectors,
        releasers: Releasers::new(releasers),
    }
}

/// One configured source: its table (`zookeeper[1]`, what problems name it by) and its
/// backend's settings.
#[derive(Debug, Clone)]
pub struct ConfiguredSource {
    pub at: String,
    pub config: std::sync::Arc<dyn lockscope_core::backend::SourceConfig>,
}

/// The tables of config section `name` as sources, in the order given: what
/// `Config { sources: section("redis", [..]), .. }` takes (tests, examples). A database's
/// settings name their database: `DbSource::mysql`, `DbSource::postgres`.
pub fn section<S: lockscope_core::backend::SourceConfig + 'static>(
    name: &str,
    sources: impl IntoIterator<Item = S>,
) -> Vec<ConfiguredSource> {
    sources
        .into_iter()
        .enumerate()
        .map(|(i, source)| ConfiguredSource {
            at: format!("{name}[{i}]"),
            config: std::sync::Arc::new(source),
        })
        .collect()
}
