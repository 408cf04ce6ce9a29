//! The etcd backend, all of it: its config section ([`config`]), its collector ([`collect`]:
//! range + watch from a revision, lease TTLs), its decoding into the neutral ledger and its
//! views ([`state`], over `lockscope_model::etcd`), its sessions (leases) and its force release
//! ([`release`]: a txn comparing `create_revision` and `mod_revision`, then a delete).
//!
//! Layouts (`shared/LOCK_LAYOUTS.md`): the Go client's `concurrency.Mutex`, `etcdctl lock` and
//! `etcdctl elect` keep `<name>/<lease id in hex>` keys bound to the session's lease; the lowest
//! `create_revision` holds (or leads), the rest wait in order, each watching the key before its
//! own. Other clients keep one key with a lease per lock (contenders are not stored).

pub mod collect;
pub mod config;
pub mod error;
pub mod release;
pub mod state;

pub use config::EtcdSourceConfig;
pub use error::EtcdError;
use lockscope_model::etcd::EtcdKv;

/// A lease's TTL as etcd answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTtl {
    /// The TTL it was granted, seconds.
    pub granted_s: i64,
    /// What is left of it, seconds.
    pub left_s: i64,
}

/// One change heard on a watch.
#[derive(Debug, Clone)]
pub enum EtcdEvent {
    Put(EtcdKv),
    Delete {
        key: Vec<u8>,
        /// The key as it was (the watch asks for previous values).
        prev: Option<EtcdKv>,
        /// The lease it was bound to (0: none).
        lease: i64,
        /// The revision that deleted it.
        revision: i64,
    },
}

impl EtcdEvent {
    /// The revision the change belongs to: one transaction's changes share it, and a watch
    /// answer that catches up carries many.
    pub fn revision(&self) -> i64 {
        match self {
            EtcdEvent::Put(kv) => kv.mod_revision,
            EtcdEvent::Delete { revision, .. } => *revision,
        }
    }
}

/// What an etcd collector reports.
#[derive(Debug)]
pub enum EtcdUpdate {
    /// Connection state changed; `up == false` carries the reason and, for a session that
    /// ends, when the source was last seen (epoch ms; `None`: now).
    Status {
        up: bool,
        error: Option<String>,
        last_seen_ms: Option<i64>,
    },
    /// Every key under the prefixes at `revision` (bootstrap, and after a compaction), with the
    /// TTLs of their leases read at `at_ms`.
    Snapshot {
        revision: i64,
        kvs: Vec<EtcdKv>,
        leases: Vec<(i64, Option<LeaseTtl>)>,
        at_ms: i64,
    },
    /// Changes up to `revision`, in order, with the TTLs (read at `at_ms`) of the leases of the
    /// keys they deleted (`None`: the lease is gone).
    Events {
        revision: i64,
        events: Vec<EtcdEvent>,
        leases: Vec<(i64, Option<LeaseTtl>)>,
        at_ms: i64,
    },
    /// TTLs of the leases keys are bound to, read at `at_ms`.
    Leases {
        at_ms: i64,
        leases: Vec<(i64, Option<LeaseTtl>)>,
    },
}

use lockscope_model::wire::{SessionView, SourceView};

use lockscope_core::aggregate::counters::{LockCounters, MetricsInput};
use std::sync::Arc;

use lockscope_core::aggregate::{ledger_metrics, History, LedgerContext, Model, SourceModel};
use lockscope_core::backend::{
    BackendDescriptor, BuiltSource, Section, SourceConfig, SourceContext,
};

impl Model for state::EtcdSourceState {
    type Update = EtcdUpdate;
    fn apply(&mut self, update: EtcdUpdate, cx: &mut LedgerContext<'_>) {
        state::EtcdSourceState::apply(self, update, cx);
    }
    fn weight(update: &EtcdUpdate) -> usize {
        match update {
            EtcdUpdate::Snapshot { kvs, .. } => kvs.len(),
            EtcdUpdate::Events { events, .. } => events.len(),
            _ => 1,
        }
    }
}

impl SourceModel for state::EtcdSourceState {
    fn recipe_labels(&self) -> &'static [&'static str] {
        recipe_labels()
    }
    fn view(&mut self) -> SourceView {
        self.view.clone()
    }
    fn history_of(&self, id: &str) -> Option<&History> {
        self.ledger.history_of(id)
    }
    fn sessions(&self) -> Vec<SessionView> {
        state::EtcdSourceState::sessions(self)
    }
    fn metrics(&self, input: &mut MetricsInput) {
        input
            .sources
            .push(ledger_metrics(&self.view, &self.ledger, self.resyncs()));
    }
    fn counters(&mut self) -> &mut LockCounters {
        &mut self.ledger.counters
    }
}

/// The etcd backend's descriptor: `[[etcd]]` sources (the registry's line).
pub static BACKEND: Etcd = Etcd;

/// See [`BACKEND`].
#[derive(Debug)]
pub struct Etcd;

impl BackendDescriptor for Etcd {
    fn recipes(&self) -> &'static [&'static str] {
        recipe_labels()
    }

    fn sections(&self) -> &'static [Section] {
        &[Section {
            name: "etcd",
            keys: &[EtcdSourceConfig::KEYS],
            nested: &[],
        }]
    }

    fn source(&self, _section: &str, table: toml::Value) -> Result<Arc<dyn SourceConfig>, String> {
        let config: EtcdSourceConfig = table.try_into().map_err(|e| e.message().to_string())?;
        Ok(Arc::new(config))
    }
}

impl SourceConfig for EtcdSourceConfig {
    fn name(&self) -> &str {
        &self.name
    }
    fn backend(&self) -> lockscope_model::wire::Backend {
        lockscope_model::wire::Backend::Etcd
    }
    fn validate(&self, at: &str) -> Vec<String> {
        EtcdSourceConfig::validate(self, at)
    }
    fn build(&self, ctx: SourceContext) -> BuiltSource {
        let model = state::EtcdSourceState::new(self.clone(), ctx.max_lock_labels);
        let (out, model) = ctx.connect(model);
        let config = Arc::new(self.clone());
        BuiltSource {
            model,
            collector: Box::pin(async move {
                out.until_stopped(collect::run(config, out.clone())).await
            }),
            releaser: Arc::new(release::EtcdReleaser(self.clone())),
        }
    }
}

/// Every recipe label this backend's locks can carry (its closed set; anything else is
/// `other`).
pub fn recipe_labels() -> &'static [&'static str] {
    static LABELS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        lockscope_model::etcd::EtcdRecipe::ALL
            .iter()
            .map(|r| r.as_str())
            .collect()
    });
    &LABELS
}
