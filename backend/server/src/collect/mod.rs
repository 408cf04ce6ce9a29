//! Collectors: the tasks that talk to coordination servers and report what they hold.
//!
//! A collector owns its connections and nothing else: it sends [`Update`]s over a bounded
//! channel to the aggregator, which owns all lock state. Collectors never read the model.

use std::collections::{BTreeMap, BTreeSet};

use lockscope_model::zk::NodeMeta;

pub mod redis;
pub mod zk;

/// A message from a collector: which source (index into the configured sources) and what.
#[derive(Debug)]
pub struct SourceUpdate {
    pub source: usize,
    pub update: Update,
}

#[derive(Debug)]
pub enum Update {
    /// Connection state changed. `up == false` carries the reason.
    Status { up: bool, error: Option<String> },
    /// A full read of every watched root, replacing the mirror (bootstrap and every reconnect).
    Resync {
        nodes: Vec<(String, NodeMeta)>,
        /// Nodes whose children could not be read (ACLs).
        unreadable: Vec<String>,
    },
    /// A node was created or changed.
    Upsert { path: String, meta: NodeMeta },
    /// A node was deleted; `at_ms` is when the collector heard of it, which a backlog in the
    /// aggregator must not move (release causes compare it with ensemble polls).
    Removed { path: String, at_ms: i64 },
    /// Watches and sessions as every ensemble member reports them.
    Ensemble(EnsembleReport),
    /// Redis: the members (masters) of the source, in index order; resets per-member state.
    RedisMembers { members: Vec<String> },
    /// Redis: a member's (or, with `None`, the whole source's) connection state.
    RedisStatus {
        member: Option<usize>,
        up: bool,
        error: Option<String>,
    },
    /// Redis: fresh reads of lock keys on one member. With `full`, these are all the member's
    /// lock keys (a scan): any other key lockscope knows there is gone.
    RedisKeys {
        member: usize,
        full: bool,
        reports: Vec<KeyReport>,
    },
    /// Redis: clients blocked in `BLPOP` on one member (python-redis-lock's waiters, which the
    /// server does not attribute to a key); sent when it changes while such locks exist there.
    RedisBlocked { member: usize, clients: u32 },
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
    /// Child watches each member holds that `wchp` cannot name (`zk_watch_count` − `wchs` total).
    pub unnamed_child_watches: Vec<u64>,
    /// Sessions the leader's `dump` lists (every live session) with their expiry deadline
    /// (epoch ms), when the leader answered.
    pub live_sessions: Option<BTreeMap<i64, Option<i64>>>,
}
