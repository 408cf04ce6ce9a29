//! The ZooKeeper backend, all of it: its config section ([`config`]), its collector
//! ([`collect`]: one persistent recursive watch per root, a full read at bootstrap and after
//! every reconnect, the four-letter-word poller in [`fourlw`]), its state in the aggregator
//! ([`state`]: the node mirror, decoding into locks, sessions and release causes from ensemble
//! rounds) and its force release ([`release`]: a versioned delete of the holder's node).
//!
//! Layouts (`shared/LOCK_LAYOUTS.md`): Curator and kazoo recipes keep ephemeral sequential
//! nodes under a lock node; the lowest sequence holds (or the lowest `max_leases` for
//! semaphores), the rest wait in order, each watching the node before its own.

use std::collections::{BTreeMap, BTreeSet};

use lockscope_model::zk::NodeMeta;

pub mod collect;
pub mod config;
pub mod error;
pub mod fourlw;
pub mod release;
pub mod state;
pub mod tls;

pub use config::ZkSourceConfig;
pub use error::ZkError;

/// What a ZooKeeper collector reports.
#[derive(Debug)]
pub enum ZkUpdate {
    /// Connection state changed; `up == false` carries the reason and, for a session that
    /// ends, when the source was last seen (epoch ms; `None`: now).
    Status {
        up: bool,
        error: Option<String>,
        last_seen_ms: Option<i64>,
    },
    /// A full read of every watched root, replacing the mirror (bootstrap and every reconnect):
    /// the nodes of every [`ZkUpdate::ResyncPart`] since the `first` one, and these.
    Resync {
        nodes: Vec<(String, NodeMeta)>,
        /// Nodes whose children could not be read (ACLs).
        unreadable: Vec<String>,
    },
    /// Part of a full read in progress (parents before their children); `first` starts a new
    /// one, dropping what an unfinished one had read. Nothing is decoded until the
    /// [`ZkUpdate::Resync`] that ends it.
    ResyncPart {
        nodes: Vec<(String, NodeMeta)>,
        first: bool,
    },
    /// A node was created or changed.
    Upsert { path: String, meta: NodeMeta },
    /// A node was deleted; `at_ms` is when the collector heard of it, which a backlog in the
    /// aggregator must not move (release causes compare it with ensemble polls).
    Removed { path: String, at_ms: i64 },
    /// One batch of watch events, applied whole: nothing is published between its changes, so
    /// a node created and deleted within it ([`NodeChange::Gone`]) is booked but never shown.
    Changes(Vec<NodeChange>),
    /// Watches and sessions as every ensemble member reports them.
    Ensemble(EnsembleReport),
}

/// One node change a watch event reported, in the order the events came.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeChange {
    /// A node was created or changed; `meta` as read after the event.
    Upsert { path: String, meta: NodeMeta },
    /// A node was created but had been deleted again before the collector could read it (a
    /// hold too brief to read). Its owner, creation time and zxid are unknown; `at_ms` is when
    /// the collector heard of it. Its [`NodeChange::Removed`] follows in the same batch.
    Gone { path: String, at_ms: i64 },
    /// A node was deleted; `at_ms` as in [`ZkUpdate::Removed`].
    Removed { path: String, at_ms: i64 },
}

/// What the leader's `dump` would tell the next ensemble round (the state says, the poller
/// reads it; see [`state::ZkSourceState::dump_wanted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpWanted {
    /// A session that owns nodes or waits for a release's cause is connected to no member
    /// (or a member did not answer): only the leader says whether it lives and when it
    /// expires.
    Needed,
    /// Releases wait for their cause: the leader's word settles one in a round, where
    /// without it a still-connected session needs two.
    Useful,
    /// Every session that owns nodes is connected: `cons` says all the round needs.
    No,
}

/// One round of four-letter words over the ensemble.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnsembleReport {
    /// When the round started (epoch ms): no answer predates it.
    pub started_ms: i64,
    /// When the round finished (epoch ms): every answer predates it.
    pub at_ms: i64,
    /// lockscope's own session (excluded from watcher counts).
    pub own_session: Option<i64>,
    pub members: usize,
    pub members_answering: usize,
    pub errors: Vec<String>,
    /// Sessions with a data/exists watch, by path, merged over members.
    pub data_watchers: BTreeMap<String, BTreeSet<i64>>,
    /// Connected sessions: session → (member index, timeout ms).
    pub connections: BTreeMap<i64, (usize, Option<u64>)>,
    /// Connected sessions' client addresses (`host:port`, as `cons` lists them): who holds, when
    /// a lock node says nothing about its client.
    pub clients: BTreeMap<i64, String>,
    /// Child watches each member holds that `wchp` cannot name (`zk_watch_count` − `wchs` total).
    pub unnamed_child_watches: Vec<u64>,
    /// Sessions the leader's `dump` lists (every live session) with their expiry deadline
    /// (epoch ms), when the leader answered.
    pub live_sessions: Option<BTreeMap<i64, Option<i64>>>,
}

use lockscope_model::wire::{SessionView, SourceView};

use lockscope_core::aggregate::counters::{LockCounters, MetricsInput};
use std::sync::Arc;

use lockscope_core::aggregate::{History, LedgerContext, Model, SourceModel};
use lockscope_core::backend::{
    BackendDescriptor, BuiltSource, Section, SourceConfig, SourceContext,
};

impl Model for state::ZkSourceState {
    type Update = ZkUpdate;
    fn apply(&mut self, update: ZkUpdate, cx: &mut LedgerContext<'_>) {
        state::ZkSourceState::apply(self, update, cx);
    }
    fn weight(update: &ZkUpdate) -> usize {
        match update {
            ZkUpdate::Resync { nodes, .. } | ZkUpdate::ResyncPart { nodes, .. } => nodes.len(),
            ZkUpdate::Changes(changes) => changes.len(),
            _ => 1,
        }
    }
}

impl SourceModel for state::ZkSourceState {
    fn recipe_labels(&self) -> &'static [&'static str] {
        recipe_labels()
    }
    fn view(&mut self) -> SourceView {
        state::ZkSourceState::view(self)
    }
    fn history_of(&self, id: &str) -> Option<&History> {
        state::ZkSourceState::history_of(self, id)
    }
    fn sessions(&self) -> Vec<SessionView> {
        state::ZkSourceState::sessions(self)
    }
    fn metrics(&self, input: &mut MetricsInput) {
        input.sources.push(state::ZkSourceState::metrics(self));
    }
    fn end_of_burst(&mut self, cx: &mut LedgerContext<'_>) {
        self.recompute_deferred(cx);
        self.publish_dump_wanted();
    }
    fn housekeeping(&mut self, cx: &mut LedgerContext<'_>) {
        self.expire_pending(cx);
    }
    fn has_dirty_locks(&self) -> bool {
        state::ZkSourceState::has_dirty_locks(self)
    }
    fn flush(
        &mut self,
        published: &dyn Fn(&str) -> bool,
    ) -> Vec<(std::sync::Arc<str>, lockscope_core::aggregate::StoredLock)> {
        state::ZkSourceState::flush(self, published)
    }
    fn counters(&mut self) -> &mut LockCounters {
        &mut self.counters
    }
    fn known_recipes(&self) -> Vec<&'static str> {
        lockscope_model::zk::Recipe::ALL
            .iter()
            .map(|r| r.as_str())
            .collect()
    }
}

/// The ZooKeeper backend's descriptor: `[[zookeeper]]` sources (the registry's line).
pub static BACKEND: ZooKeeper = ZooKeeper;

/// See [`BACKEND`].
#[derive(Debug)]
pub struct ZooKeeper;

impl BackendDescriptor for ZooKeeper {
    fn recipes(&self) -> &'static [&'static str] {
        recipe_labels()
    }

    fn sections(&self) -> &'static [Section] {
        &[Section {
            name: "zookeeper",
            keys: &[ZkSourceConfig::KEYS],
            nested: &[],
        }]
    }

    fn source(&self, _section: &str, table: toml::Value) -> Result<Arc<dyn SourceConfig>, String> {
        let config: ZkSourceConfig = table.try_into().map_err(|e| de_message(&e))?;
        Ok(Arc::new(config))
    }
}

impl SourceConfig for ZkSourceConfig {
    fn name(&self) -> &str {
        &self.name
    }
    fn backend(&self) -> lockscope_model::wire::Backend {
        lockscope_model::wire::Backend::Zookeeper
    }
    fn validate(&self, at: &str) -> Vec<String> {
        ZkSourceConfig::validate(self, at)
    }
    fn build(&self, ctx: SourceContext) -> BuiltSource {
        let state = state::ZkSourceState::new(self, ctx.max_lock_labels);
        let dump_wanted = state.dump_wanted();
        let (out, model) = ctx.connect(state);
        BuiltSource {
            model,
            // Not cut short at stop: the collector closes its session first, so its watches
            // and ephemeral state go at once rather than at expiry.
            collector: Box::pin(collect::run(Arc::new(self.clone()), out, dump_wanted)),
            releaser: Arc::new(release::ZkReleaser::new(std::slice::from_ref(self))),
        }
    }
}

/// serde's message for a table that does not read as a source.
fn de_message(e: &toml::de::Error) -> String {
    e.message().to_string()
}

/// Every recipe label this backend's locks can carry (its closed set; anything else is
/// `other`).
pub fn recipe_labels() -> &'static [&'static str] {
    static LABELS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        lockscope_model::zk::Recipe::ALL
            .iter()
            .map(|r| r.as_str())
            .collect()
    });
    &LABELS
}
