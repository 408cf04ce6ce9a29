//! The contract a backend fulfils, as one typed descriptor per backend crate (like vector's
//! `SourceConfig::build(SourceContext)`): the binary's registry lists each backend's
//! [`Backend`] once, and everything else follows from it.
//!
//! * [`BackendDescriptor::sections`] names the config tables it reads (`[[zookeeper]]`) and the keys each
//!   accepts; [`BackendDescriptor::source`] reads one table into a [`SourceConfig`];
//! * [`SourceConfig::validate`] lists every problem with it (config errors, exit 2);
//! * [`SourceConfig::build`] returns its [`BuiltSource`]: the typed model the lock table holds
//!   (joined to its collector's outbox by [`SourceContext::connect`]), the collector, and its
//!   force release ([`Releaser`]).
//!
//! A model declares the recipe labels its locks can carry (`SourceModel::recipe_labels`) and
//! the metric families it adds (`counters::BackendFamily`); the core, the metrics and HTTP never
//! name a backend.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::aggregate::counters::BackendFamily;
use crate::aggregate::{Model, Source};
use crate::collect::{connect, Outbox, Wiring};
use crate::release::Releaser;

/// A config table a backend reads: `[[name]]`, with the keys its tables accept (unknown keys
/// are listed as problems) and, for keys holding arrays of tables, theirs.
#[derive(Debug)]
pub struct Section {
    pub name: &'static str,
    pub keys: &'static [&'static [&'static str]],
    pub nested: &'static [(&'static str, &'static [&'static str])],
}

/// One kind of lock system: the descriptor a backend crate exports and the registry lists.
pub trait BackendDescriptor: Sync {
    /// The config tables this backend reads, in the order their sources are listed.
    fn sections(&self) -> &'static [Section];
    /// Reads one table of `section` (one of [`BackendDescriptor::sections`]; its unknown keys already
    /// listed and removed) as a source; the error is what is wrong with it.
    fn source(&self, section: &str, table: toml::Value) -> Result<Arc<dyn SourceConfig>, String>;
    /// Every recipe label its locks can carry (`[stuck.recipes.*]` may name these).
    fn recipes(&self) -> &'static [&'static str];
    /// The metric families this backend adds for its sources (their samples come from its
    /// models' `metrics`); exported whether or not a source of it is configured.
    fn families(&self) -> &'static [&'static BackendFamily] {
        &[]
    }
}

/// One configured source of a backend.
pub trait SourceConfig: Send + Sync + std::fmt::Debug {
    /// Its name (unique among all sources; checked by the registry).
    fn name(&self) -> &str;
    /// Its backend as the wire names it.
    fn backend(&self) -> lockscope_model::wire::Backend;
    /// Every problem with its settings; `at` names its table (`zookeeper[1]`).
    fn validate(&self, at: &str) -> Vec<String>;
    /// Whether its first full read lists keys and counts them (`Outbox::bootstrap_scanned`).
    fn scans_keys(&self) -> bool {
        false
    }
    /// Whether its holders and waiters belong to sessions a wait-for graph can join.
    fn sessions(&self) -> bool {
        true
    }
    /// Its model, collector and force release.
    fn build(&self, ctx: SourceContext) -> BuiltSource;
}

/// What a source is built with.
pub struct SourceContext {
    /// Its way to the lock table.
    pub wiring: Wiring,
    /// Distinct `lock` label values before the rest fold into `__other__` (`[metrics]`).
    pub max_lock_labels: usize,
}

impl SourceContext {
    /// Joins `model` to the table: the outbox its collector sends through, and the source the
    /// table holds.
    pub fn connect<M: Model>(&self, model: M) -> (Outbox<M::Update>, Box<dyn Source>) {
        connect(model, self.wiring.clone())
    }
}

/// A source as built: its model for the lock table, its collector (runs until lockscope stops;
/// dropping it closes its connections) and its force release.
pub struct BuiltSource {
    pub model: Box<dyn Source>,
    pub collector: BoxFuture<'static, ()>,
    pub releaser: Arc<dyn Releaser>,
}
