//! The Redis backend, all of it: its config sections ([`config`]: `[[redis]]` and
//! `[[redlock]]`), its collector ([`collect`]: SCAN, keyspace notifications, reads at TTL
//! deadlines, reconcile; [`glob`] matches patterns), its state in the aggregator ([`state`]:
//! per-member reads merged into locks, Redlock quorums, causes) and its force release
//! ([`release`]: a compare-and-delete script that wakes waiters the library's own way).
//!
//! Layouts (`shared/LOCK_LAYOUTS.md`): `SET NX PX` tokens, Redisson hashes with their
//! companion keys, fair-lock queues, python-redis-lock, Redlock over several masters; decoded
//! by structure in `lockscope_model::redis`.
//!
//! Two paths, each the only one for what it does: reads of lock keys decide the holders and
//! waiters shown ([`KeyReport`]); the lock keys' own keyspace notifications decide the
//! acquisitions and releases counted ([`lives`], [`KeyChange`]), so a hold too brief for any
//! read is counted all the same and nothing is counted twice.

pub mod bounded;
pub mod collect;
pub mod config;
pub mod error;
pub mod glob;
pub mod lives;
pub mod release;
pub mod state;

pub use config::{RedisSourceConfig, RedisWatchConfig, RedlockConfig};
pub use error::RedisError;

/// What a Redis collector reports.
#[derive(Debug)]
pub enum RedisUpdate {
    /// The members (masters) of the source, in index order; resets per-member state.
    Members { members: Vec<String> },
    /// A member's (or, with `None`, the whole source's) connection state; a member that goes
    /// down says when it was last heard (epoch ms; `None`: now).
    Status {
        member: Option<usize>,
        up: bool,
        error: Option<String>,
        last_seen_ms: Option<i64>,
    },
    /// Fresh reads of lock keys on one member. With `full`, these are all the member's lock
    /// keys (a scan): any other key lockscope knows there is gone.
    Keys {
        member: usize,
        full: bool,
        reports: Vec<KeyReport>,
    },
    /// Lock keys that came to exist or went on one member, in the order its notifications
    /// told (see [`lives`]): what the source counts as acquisitions and releases.
    Changes {
        member: usize,
        changes: Vec<KeyChange>,
    },
    /// Clients blocked in `BLPOP` on one member (python-redis-lock's waiters, which the
    /// server does not attribute to a key); sent when it changes while such locks exist there.
    Blocked { member: usize, clients: u32 },
    /// A member's changes came faster than it could read them: it dropped its backlog and
    /// catches up with a full scan (`true`), or that scan is in (`false`). A member's session
    /// starts and ends not lagging.
    Lagging { member: usize, lagging: bool },
    /// Watched keys on one member whose names are too long to read as locks
    /// (`bounded::KEY_NAME_MAX`): how many were skipped, and the start of one. Sent when the
    /// count changes.
    LongKeys {
        member: usize,
        skipped: u64,
        example: Option<String>,
    },
}

/// One lock key as read on one member.
#[derive(Debug, Clone)]
pub struct KeyReport {
    pub key: Vec<u8>,
    /// `None` when the key is gone or holds nothing lock-like.
    pub lock: Option<lockscope_model::redis::RedisLock>,
    /// Connections subscribed to the lock's unlock channels (waiters that are not in Redis).
    pub watchers: u32,
    /// When it was read (epoch ms) and the PTTL it had then.
    pub at_ms: i64,
    pub pttl_ms: i64,
    /// Order in which the member's collector issued the read (a bigger one was sent later, on
    /// the same connection, so it saw the same or a later state). Wall-clock `at_ms` cannot
    /// order two reads made by different tasks: it is taken after the answer arrives.
    pub read_seq: u64,
    /// Values, fields and members of this read too long to copy, by their id as shown (head,
    /// length and digest) with the version a release must send back (`<length>:<digest>`).
    pub truncated: Vec<(String, String)>,
    /// A key under a watched pattern that holds something no recipe reads as a lock.
    pub unrecognised: Option<Box<lockscope_model::wire::UnrecognisedKey>>,
}

use lockscope_model::wire::{SessionView, SourceView};

use lockscope_core::aggregate::counters::{LockCounters, MetricsInput};
use std::sync::Arc;

use lockscope_core::aggregate::{ledger_metrics, History, LedgerContext, Model, SourceModel};
use lockscope_core::backend::{
    BackendDescriptor, BuiltSource, Section, SourceConfig, SourceContext,
};

impl Model for state::RedisSourceState {
    type Update = RedisUpdate;
    fn apply(&mut self, update: RedisUpdate, cx: &mut LedgerContext<'_>) {
        state::RedisSourceState::apply(self, update, cx);
    }
    fn weight(update: &RedisUpdate) -> usize {
        match update {
            RedisUpdate::Keys { reports, .. } => reports.len(),
            RedisUpdate::Changes { changes, .. } => changes.len(),
            _ => 1,
        }
    }
}

impl SourceModel for state::RedisSourceState {
    fn recipe_labels(&self) -> &'static [&'static str] {
        recipe_labels()
    }
    fn view(&mut self) -> SourceView {
        self.view.clone()
    }
    fn history_of(&self, id: &str) -> Option<&History> {
        state::RedisSourceState::history_of(self, id)
    }
    fn sessions(&self) -> Vec<SessionView> {
        state::RedisSourceState::sessions(self)
    }
    fn metrics(&self, input: &mut MetricsInput) {
        input
            .sources
            .push(ledger_metrics(&self.view, &self.ledger, 0));
        input
            .corrections
            .push((self.spec.name.clone(), self.corrections));
    }
    fn members(&self) -> Option<Vec<String>> {
        Some(self.members.clone())
    }
    fn counters(&mut self) -> &mut LockCounters {
        &mut self.ledger.counters
    }
}

/// A lock key that came to exist or went on one member (see [`lives`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyChange {
    pub key: Vec<u8>,
    /// When the notification arrived (epoch µs); for a change a scan found, when it did.
    pub at_us: i64,
    /// Whether the key's comings and goings count (not for keys of permits or counts).
    pub counted: bool,
    pub kind: ChangeKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChangeKind {
    /// The key came: an acquisition, or (`acquired: false`) a hold the first scan found.
    Came { acquired: bool },
    /// The key went after `held_ms`.
    Went {
        cause: lockscope_model::wire::ReleaseCause,
        held_ms: i64,
    },
}

/// The Redis backend's descriptor: `[[redis]]` (a server or Cluster) and `[[redlock]]`
/// (independent masters) sources (the registry's line).
pub static BACKEND: Redis = Redis;

/// See [`BACKEND`].
#[derive(Debug)]
pub struct Redis;

impl BackendDescriptor for Redis {
    fn recipes(&self) -> &'static [&'static str] {
        recipe_labels()
    }

    fn sections(&self) -> &'static [Section] {
        &[
            Section {
                name: "redis",
                keys: &[RedisSourceConfig::KEYS, config::WATCH_KEYS],
                nested: &[],
            },
            Section {
                name: "redlock",
                keys: &[RedlockConfig::KEYS, config::WATCH_KEYS],
                nested: &[],
            },
        ]
    }

    fn source(&self, section: &str, table: toml::Value) -> Result<Arc<dyn SourceConfig>, String> {
        let message = |e: toml::de::Error| e.message().to_string();
        Ok(match section {
            "redlock" => Arc::new(table.try_into::<RedlockConfig>().map_err(message)?),
            _ => Arc::new(table.try_into::<RedisSourceConfig>().map_err(message)?),
        })
    }
}

/// A Redis source's model, collector and release.
fn build(spec: collect::RedisSpec, ctx: SourceContext) -> BuiltSource {
    let releaser = Arc::new(release::RedisReleaser::new(std::slice::from_ref(&spec)));
    let (out, model) = ctx.connect(state::RedisSourceState::new(
        spec.clone(),
        ctx.max_lock_labels,
    ));
    let spec = Arc::new(spec);
    BuiltSource {
        model,
        collector: Box::pin(
            async move { out.until_stopped(collect::run(spec, out.clone())).await },
        ),
        releaser,
    }
}

impl SourceConfig for RedisSourceConfig {
    fn name(&self) -> &str {
        &self.name
    }
    fn backend(&self) -> lockscope_model::wire::Backend {
        lockscope_model::wire::Backend::Redis
    }
    fn validate(&self, at: &str) -> Vec<String> {
        RedisSourceConfig::validate(self, at)
    }
    fn scans_keys(&self) -> bool {
        true
    }
    fn sessions(&self) -> bool {
        false
    }
    fn build(&self, ctx: SourceContext) -> BuiltSource {
        build(self.into(), ctx)
    }
}

impl SourceConfig for RedlockConfig {
    fn name(&self) -> &str {
        &self.name
    }
    fn backend(&self) -> lockscope_model::wire::Backend {
        lockscope_model::wire::Backend::Redis
    }
    fn validate(&self, at: &str) -> Vec<String> {
        RedlockConfig::validate(self, at)
    }
    fn scans_keys(&self) -> bool {
        true
    }
    fn sessions(&self) -> bool {
        false
    }
    fn build(&self, ctx: SourceContext) -> BuiltSource {
        build(self.into(), ctx)
    }
}

/// Every recipe label this backend's locks can carry (its closed set; anything else is
/// `other`).
pub fn recipe_labels() -> &'static [&'static str] {
    // Every recipe the decoder names, and the two the Redlock merge names.
    static LABELS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        lockscope_model::redis::RedisRecipe::ALL
            .iter()
            .map(|r| r.as_str())
            .chain(["redlock", "redisson_redlock"])
            .collect()
    });
    &LABELS
}

#[cfg(test)]
mod tests {
    use lockscope_core::aggregate::counters::recipe_label;
    use lockscope_core::aggregate::SourceModel;

    /// Every recipe the Redis decoder names, and the two the Redlock merge names, is a label of
    /// its own (a recipe left out of the list would be counted as `other`).
    #[test]
    fn every_redis_recipe_has_its_own_label() {
        let source = super::RedisSourceConfig::new("r", "redis://127.0.0.1:1", &["lock:*"]);
        let model = super::state::RedisSourceState::new((&source).into(), 10);
        let labels = model.recipe_labels();
        let names = lockscope_model::redis::RedisRecipe::ALL
            .iter()
            .map(|r| r.as_str())
            .chain(["redlock", "redisson_redlock"]);
        for name in names {
            assert_eq!(recipe_label(labels, name), name);
        }
        assert_eq!(recipe_label(labels, "something-else"), "other");
    }
}
