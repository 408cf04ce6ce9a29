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
}

use std::any::Any;

use lockscope_model::wire::{SessionView, SourceView};

use lockscope_core::aggregate::counters::{LockCounters, MetricsInput};
use lockscope_core::aggregate::{ledger_metrics, open_update, History, LedgerContext, SourceModel};

impl SourceModel for state::RedisSourceState {
    fn apply(&mut self, update: Box<dyn Any + Send>, cx: &mut LedgerContext<'_>) {
        if let Some(update) = open_update::<RedisUpdate>(update, &self.view.name) {
            state::RedisSourceState::apply(self, update, cx);
        }
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
