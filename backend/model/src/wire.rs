//! Wire types of the HTTP API (`/api/v1/…`) and the event stream (`/api/v1/events`).
//!
//! One definition serves the server (which serialises) and the web UI (which deserialises).
//! Times are epoch milliseconds (`*_ms` instants) or millisecond durations (`held_ms`,
//! `waited_ms`); durations are computed from the instants at the moment a response is written,
//! see [`LockView::tick`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Which kind of coordination service a lock lives in (ordered as sources are listed).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Zookeeper,
    Redis,
    Etcd,
    /// MariaDB or MySQL.
    Mysql,
    Postgres,
}

impl Backend {
    pub const ALL: [Backend; 5] = [
        Backend::Zookeeper,
        Backend::Redis,
        Backend::Etcd,
        Backend::Mysql,
        Backend::Postgres,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Zookeeper => "zookeeper",
            Backend::Redis => "redis",
            Backend::Etcd => "etcd",
            Backend::Mysql => "mysql",
            Backend::Postgres => "postgres",
        }
    }

    /// The product's name, for people.
    pub fn display_name(self) -> &'static str {
        match self {
            Backend::Zookeeper => "ZooKeeper",
            Backend::Redis => "Redis",
            Backend::Etcd => "etcd",
            Backend::Mysql => "MariaDB/MySQL",
            Backend::Postgres => "PostgreSQL",
        }
    }

    /// The backend named `name` ([`Backend::as_str`]).
    pub fn parse(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.as_str() == name)
    }

    /// A database (its locks are polled; its participants are connections).
    pub fn is_database(self) -> bool {
        matches!(self, Backend::Mysql | Backend::Postgres)
    }

    /// What a participant's session is called in this backend, for labels.
    pub fn session_noun(self) -> &'static str {
        match self {
            Backend::Zookeeper => "session",
            Backend::Redis => "client",
            Backend::Etcd => "lease",
            Backend::Mysql | Backend::Postgres => "connection",
        }
    }
}

/// Why a holder stopped holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReleaseCause {
    /// The holder deleted its node while its session stayed alive.
    Released,
    /// The holder's session was closed by its client.
    SessionClosed,
    /// The holder's session expired (the client vanished or stalled past its timeout).
    SessionExpired,
    /// A TTL ran out (Redis).
    TtlExpired,
    /// The lease the key was bound to expired (etcd: the holder stopped keeping it alive).
    LeaseExpired,
    /// An operator forced the release.
    Forced,
    /// The holder's database connection ended (its transaction rolled back, its locks went).
    ConnectionClosed,
    /// The holder's database connection was killed (`KILL`), as the database showed.
    Killed,
    /// The database's own timeout ended it (a lock wait timeout, for a waiter).
    Timeout,
}

impl ReleaseCause {
    pub const ALL: [ReleaseCause; 9] = [
        ReleaseCause::Released,
        ReleaseCause::SessionClosed,
        ReleaseCause::SessionExpired,
        ReleaseCause::TtlExpired,
        ReleaseCause::LeaseExpired,
        ReleaseCause::Forced,
        ReleaseCause::ConnectionClosed,
        ReleaseCause::Killed,
        ReleaseCause::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseCause::Released => "released",
            ReleaseCause::SessionClosed => "session_closed",
            ReleaseCause::SessionExpired => "session_expired",
            ReleaseCause::TtlExpired => "ttl_expired",
            ReleaseCause::LeaseExpired => "lease_expired",
            ReleaseCause::Forced => "forced",
            ReleaseCause::ConnectionClosed => "connection_closed",
            ReleaseCause::Killed => "killed",
            ReleaseCause::Timeout => "timeout",
        }
    }
}

/// Read or write side of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    Read,
    Write,
}

/// A participant that holds the lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HolderView {
    /// The node (full path) that holds.
    pub node: String,
    /// Owning session, `0x…`.
    pub session: String,
    /// When it started holding (epoch ms).
    pub since_ms: i64,
    /// How long it has held, as of the response.
    pub held_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
    /// Sessions watching this holder node (data/exists watches, merged over the ensemble).
    #[serde(default)]
    pub watchers: u32,
    /// Redis: re-entry count (Redisson hash value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reentrancy: Option<u64>,
    /// The lease the holder's key is bound to (etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Box<LeaseView>>,
    /// What a force release compares besides the holder, opaque to clients: send it back as
    /// [`ReleaseRequest::version`] (etcd: `<create_revision>/<mod_revision>`; ZooKeeper: the
    /// node's `czxid`, decimal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Who holds, in the lock's own words, where the lock records it: a ZooKeeper lock node's
    /// data (kazoo's identifier, Curator's client address), a kazoo lease's holder, an etcd
    /// key's value (its owner). At most [`IDENTITY_MAX`] bytes, what is not UTF-8 as `\xNN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// A database participant's statement: what it runs (or ran last), and its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<Box<StatementView>>,
}

/// What a database connection runs, as a lock's participant shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatementView {
    /// `ddl` (ALTER, CREATE, DROP, TRUNCATE, LOCK, …), `dml` (INSERT, UPDATE, DELETE, …),
    /// `read` (SELECT), `other`; `idle` for a connection idle in its transaction (the text is
    /// then its last statement).
    pub kind: String,
    /// The statement, at most [`STATEMENT_MAX`] bytes (cut ones end in `…`).
    pub text: String,
}

/// The most bytes of a participant's [`StatementView::text`] kept.
pub const STATEMENT_MAX: usize = 200;

/// The most bytes of a participant's [`HolderView::identity`] kept (longer ones are cut and end
/// in `…`).
pub const IDENTITY_MAX: usize = 128;

/// A lease a participant's key is bound to (etcd).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseView {
    /// The lease id in hex, as etcdctl prints it.
    pub id: String,
    /// The TTL it was granted, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_s: Option<i64>,
    /// When it runs out unless kept alive (epoch ms), as of the last look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// A participant queued behind the holders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaiterView {
    pub node: String,
    pub session: String,
    /// When it started waiting (the node's creation time, epoch ms).
    pub since_ms: i64,
    pub waited_ms: i64,
    /// 1-based place in the queue.
    pub position: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
    /// The node this waiter's session watches, when the ensemble reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watches: Option<String>,
    /// Redis fair lock: when this waiter gives up (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// The lease the waiter's key is bound to (etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Box<LeaseView>>,
    /// Who waits, in the lock's own words ([`HolderView::identity`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// A database waiter's statement ([`HolderView::statement`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<Box<StatementView>>,
}

/// One master's view of a Redlock key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RedlockMasterView {
    pub master: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    pub up: bool,
}

/// A Redlock key across its masters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RedlockView {
    pub masters: Vec<RedlockMasterView>,
    /// Holder with the key on a majority (N/2+1) of masters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub majority_holder: Option<String>,
    /// More than one holder across masters.
    pub split: bool,
    /// Holders present on some masters without a majority.
    pub minority_holders: Vec<String>,
}

/// One lock as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockView {
    pub id: String,
    pub source: String,
    pub backend: Backend,
    pub path: String,
    pub recipe: String,
    pub holders: Vec<HolderView>,
    pub waiters: Vec<WaiterView>,
    /// Sessions watching the holder node(s), merged over every ensemble member.
    pub watchers: u32,
    /// Waiters that watch the lock's parent with a child watch (attributed from unnamed counts).
    #[serde(default)]
    pub child_watchers: u32,
    /// More than one session wakes when the holder goes: the herd effect.
    pub herd: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_leases: Option<u32>,
    /// Longest current wait, ms (0 without waiters).
    #[serde(default)]
    pub oldest_wait_ms: i64,
    #[serde(default)]
    pub acquisitions: u64,
    #[serde(default)]
    pub releases: u64,
    /// Last time the holders or waiters changed (epoch ms).
    pub changed_ms: i64,
    /// Redis: when the lock key's TTL runs out (epoch ms); `ttl_ms` is what is left of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// Conditions worth attention (`no_expiry`, `deadline_past`, `leftover_queue`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits_available: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits_total: Option<u32>,
    /// Redisson FencedLock: the current holder's fencing token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<i64>,
    /// Legacy SETNX locks: the deadline written in the value (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redlock: Option<Box<RedlockView>>,
    /// Median of recent hold times (with five or more completed holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usual_hold_ms: Option<i64>,
    /// Redis: the longest TTL seen since the current holder took the lock (its lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<i64>,
    /// Stale-lock rules this lock breaks as of the response (judged by `rules.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<StaleView>,
    /// Its worst wait or hold past the configured limits as of the response (`stuck.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<Box<StuckView>>,
    /// Why the recipe is a guess from the value's shape (no companion key or configuration
    /// named the library), when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe_guess: Option<String>,
    /// Waiters the server shows but cannot attribute to this lock: for python-redis-lock, the
    /// clients blocked in `BLPOP` on the key's server (`CLIENT LIST` names the command, not the
    /// key), so they may be waiting on another lock of that server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unattributed_waiters: Option<u32>,
    /// Set while the lock's source is not up (silent past its `silence_limit`, disconnected,
    /// refusing): the lock is shown as lockscope last saw it, at this instant (epoch ms), and
    /// may have changed since. Filled when the view is served, never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_last_seen_ms: Option<i64>,
}

/// How far past its limit a wait or a hold is (judged in `stuck.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum StuckLevel {
    Warning,
    Critical,
}

impl StuckLevel {
    pub const ALL: [StuckLevel; 2] = [StuckLevel::Warning, StuckLevel::Critical];

    pub fn as_str(self) -> &'static str {
        match self {
            StuckLevel::Warning => "warning",
            StuckLevel::Critical => "critical",
        }
    }
}

/// Whether a wait or a hold is past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum StuckKind {
    Wait,
    Hold,
}

impl StuckKind {
    pub const ALL: [StuckKind; 2] = [StuckKind::Wait, StuckKind::Hold];

    pub fn as_str(self) -> &'static str {
        match self {
            StuckKind::Wait => "wait",
            StuckKind::Hold => "hold",
        }
    }
}

/// A lock's worst wait or hold past its configured limit, as of the response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StuckView {
    pub level: StuckLevel,
    pub kind: StuckKind,
    /// The holder's or waiter's node (as in `holders`/`waiters`).
    pub node: String,
    /// When that hold or wait began (epoch ms).
    pub since_ms: i64,
    /// How long it has lasted, ms.
    pub for_ms: i64,
    /// The limit it passed, ms.
    pub limit_ms: i64,
}

/// The two limits of one kind, ms: past `warning` a wait or hold is marked, past `critical`
/// more loudly. `None`: inherit (or, at the global level, not judged). See `stuck.rs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StuckLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_ms: Option<i64>,
}

/// The wait and hold limits at one level of configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StuckRules {
    #[serde(default)]
    pub wait: StuckLimits,
    #[serde(default)]
    pub hold: StuckLimits,
}

/// Every configured stuck limit: global, per source name, per recipe name (the most specific
/// set limit applies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StuckThresholds {
    #[serde(default)]
    pub global: StuckRules,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, StuckRules>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recipes: BTreeMap<String, StuckRules>,
}

/// One stale-lock finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StaleView {
    pub rule: String,
    pub explanation: String,
}

impl LockView {
    /// Recomputes the durations as of `now_ms`.
    pub fn tick(&mut self, now_ms: i64) {
        // Saturating: a deadline may be as far as Redis allows (`PEXPIREAT i64::MAX`).
        for holder in &mut self.holders {
            holder.held_ms = now_ms.saturating_sub(holder.since_ms).max(0);
        }
        for waiter in &mut self.waiters {
            waiter.waited_ms = now_ms.saturating_sub(waiter.since_ms).max(0);
        }
        self.oldest_wait_ms = self.waiters.iter().map(|w| w.waited_ms).max().unwrap_or(0);
        self.ttl_ms = self
            .expires_at_ms
            .map(|at| at.saturating_sub(now_ms).max(0));
    }

    /// The lock as it is once gone (at `gone_ms`): nobody holds, waits or watches, nothing
    /// ticks; what it was stays in its identity, recipe, counts and history.
    pub fn gone(mut self, gone_ms: i64) -> LockView {
        self.holders.clear();
        self.waiters.clear();
        self.watchers = 0;
        self.child_watchers = 0;
        self.herd = false;
        self.oldest_wait_ms = 0;
        self.expires_at_ms = None;
        self.ttl_ms = None;
        self.deadline_ms = None;
        self.permits_available = None;
        self.redlock = None;
        self.stale.clear();
        self.changed_ms = gone_ms;
        self
    }
}

/// What happened to a participant of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Joined the queue.
    Queued,
    /// Became a holder.
    Acquired,
    /// Stopped holding (with a [`ReleaseCause`]).
    Released,
    /// Left the queue without holding.
    LeftQueue,
}

impl EventKind {
    pub const ALL: [EventKind; 4] = [
        EventKind::Queued,
        EventKind::Acquired,
        EventKind::Released,
        EventKind::LeftQueue,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Queued => "queued",
            EventKind::Acquired => "acquired",
            EventKind::Released => "released",
            EventKind::LeftQueue => "left_queue",
        }
    }

    /// The kind named `name` ([`EventKind::as_str`]).
    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for EventKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// What happened to a lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockEvent {
    pub at_ms: i64,
    pub kind: EventKind,
    pub node: String,
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<ReleaseCause>,
    /// Wait before an acquisition, or hold before a release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
}

/// `GET /api/v1/locks/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockDetail {
    #[serde(flatten)]
    pub lock: LockView,
    pub events: Vec<LockEvent>,
    /// The lock is no longer there (nothing holds, waits or keeps its node/key): `lock` is its
    /// last known state, `events` what led there.
    #[serde(default)]
    pub gone: bool,
    /// When the lock was found gone, epoch ms (with `gone`; `None`: not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone_ms: Option<i64>,
    /// The lock went while no lockscope watched it: found missing when its source was read
    /// again (`gone_ms` is then when it was found missing, `lock` as last seen).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone_unseen: bool,
    /// Why the history store's part of this answer is missing (it did not answer in time, or
    /// is down): `events` are then only what this lockscope keeps in memory, and `lock` is its
    /// live view (a lock it does not hold in memory cannot be answered). Absent when the store
    /// answered, or none is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_unavailable: Option<String>,
}

/// A lock event as the store keeps it: with the id that orders it and pages through it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoredEvent {
    pub id: i64,
    #[serde(flatten)]
    pub event: LockEvent,
}

/// `GET /api/v1/locks/{id}/events`: one page of a lock's stored history, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventPage {
    pub events: Vec<StoredEvent>,
    /// The `before` of the next (older) page; `None` at the oldest event.
    pub next_before: Option<i64>,
}

/// The replica writing the history into a shared store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WriterView {
    pub replica: String,
    /// Since when it writes, epoch ms.
    pub since_ms: i64,
    /// Everything it observed up to this instant is stored, epoch ms.
    pub through_ms: i64,
}

/// `GET /api/v1/store`: the history store as this replica sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoreStatus {
    /// `sqlite` or `postgres`; `none` without a store.
    pub backend: String,
    /// This replica's name.
    pub replica: String,
    /// The store answers (connected and its schema applied).
    pub connected: bool,
    /// Why the store is not usable, or the last write failed (`None`: fine).
    pub error: Option<String>,
    /// This replica writes the history now.
    pub writing: bool,
    /// The replica writing the history, as the store last said.
    pub writer: Option<WriterView>,
    /// The schema version applied.
    pub schema_version: Option<i64>,
    /// Lock events observed and not yet written (or, on a replica not writing, kept to fill a
    /// failover's gap).
    pub queue_depth: u64,
    /// Lock events written by this replica since it started.
    pub events_written: u64,
    /// Lock events dropped because the buffer was full, since this replica started.
    pub events_dropped: u64,
}

/// What ties a participant's claims together and ends them all at once, per backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// A ZooKeeper session: its ephemeral nodes go when it closes or expires.
    #[default]
    ZookeeperSession,
    /// An etcd lease: the keys bound to it go when it is revoked or runs out.
    EtcdLease,
    /// A database connection: its locks go when it closes (a transaction's at its end).
    DatabaseConnection,
}

impl SessionKind {
    pub const ALL: [SessionKind; 3] = [
        SessionKind::ZookeeperSession,
        SessionKind::EtcdLease,
        SessionKind::DatabaseConnection,
    ];

    /// Its name in JSON (`kind`, and the `kind=` filter of `GET /api/v1/sessions`).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::ZookeeperSession => "zookeeper_session",
            SessionKind::EtcdLease => "etcd_lease",
            SessionKind::DatabaseConnection => "database_connection",
        }
    }

    /// How the UI names it.
    pub fn display_name(self) -> &'static str {
        match self {
            SessionKind::ZookeeperSession => "session",
            SessionKind::EtcdLease => "lease",
            SessionKind::DatabaseConnection => "connection",
        }
    }
}

/// A session (a ZooKeeper session, an etcd lease) as the API shows it: what it holds and waits
/// for, and when it ends if nothing renews it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionView {
    pub source: String,
    pub session: String,
    #[serde(default)]
    pub kind: SessionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Connected to some ensemble member at the last poll (a lease: alive at the last look).
    pub connected: bool,
    /// Ensemble member it is connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// When it will expire if it does not come back (disconnected sessions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// Ids of locks it holds.
    pub holds: Vec<String>,
    /// Ids of locks it waits on.
    pub waits: Vec<String>,
    /// A database connection's details (`None` for other kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<ConnectionView>,
    /// The process it belongs to, where its source tells (sessions of one process in
    /// different sources are one participant of the wait-for graph).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessView>,
}

/// The process a session belongs to, as its source names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProcessView {
    pub name: String,
    /// Where the name comes from: `application` (PostgreSQL's `application_name`, MariaDB/MySQL's
    /// `program_name` connection attribute), `identifier` (a lock node's data, an etcd owner value),
    /// `client_host` (only the address it connects from), and `rule` after an `[[identity]]`
    /// rule rewrote it.
    pub from: String,
    /// The name identifies a process; `false`: a guess (only a host, which many processes may
    /// share). Joins through a guess are drawn as such and their cycles are not counted.
    pub exact: bool,
}

/// What a database tells of a connection (`/api/v1/sessions`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConnectionView {
    pub user: String,
    /// `host:port` it connected from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// PostgreSQL `application_name`; MariaDB/MySQL: the `program_name` connection attribute
    /// (with `performance_schema` on; without it the server does not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected_since_ms: Option<i64>,
    /// `active`, `idle in transaction`, `Query`/`User lock`, …
    pub state: String,
    /// Its current statement (shortened), when the observer may read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_since_ms: Option<i64>,
}

/// One page of `GET /api/v1/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionPage {
    pub sessions: Vec<SessionView>,
    /// Sessions matching the query.
    pub total: u64,
    /// The cursor of the next page; none on the last.
    #[serde(default)]
    pub next: Option<String>,
    #[serde(default)]
    pub facets: SessionFacets,
}

/// Sessions per value of `source` and `kind`, each counted under every filter but its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionFacets {
    pub source: BTreeMap<String, u64>,
    pub kind: BTreeMap<String, u64>,
}

/// One page of `GET /api/v1/waitfor`: edges of the sessions' wait-for graph, longest wait
/// first, the sessions they name, and the graph's cycles.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitForPage {
    pub edges: Vec<WaitEdgeView>,
    /// Every session an edge of this page names, by source and session.
    pub sessions: Vec<SessionView>,
    /// Edges in the graph.
    pub total: u64,
    /// The cursor of the next page; none on the last.
    #[serde(default)]
    pub next: Option<String>,
    /// The first cycles (possible deadlocks), by source and sessions.
    pub cycles: Vec<CycleView>,
    pub cycles_total: u64,
    /// Sessions of different sources joined as one process, among the sessions of this page.
    #[serde(default)]
    pub joins: Vec<JoinView>,
}

/// `waiter` waits on `lock`, which `holder` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitEdgeView {
    pub source: String,
    pub waiter: String,
    pub holder: String,
    /// The lock's id.
    pub lock: String,
    /// When the waiter began waiting on the lock (epoch ms), when its lock view tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since_ms: Option<i64>,
    /// Waiter and holder are in the same cycle.
    pub in_cycle: bool,
}

/// Sessions of different sources that belong to one process: one participant of the
/// wait-for graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinView {
    pub process: String,
    /// Every name is exact and each source has one session of that name; `false`: a guess.
    pub exact: bool,
    pub sessions: Vec<SessionRef>,
}

/// A session by source and id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionRef {
    pub source: String,
    pub session: String,
}

/// A cycle of the wait-for graph: sessions that wait on each other's locks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CycleView {
    /// Its (first) source.
    pub source: String,
    /// Its sessions, in order of their ids.
    pub sessions: Vec<String>,
    /// The waits among them.
    pub waits: Vec<CycleWaitView>,
    /// Every source it spans (more than one: a cycle joined by process across backends).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Its sessions with their sources and processes.
    #[serde(default)]
    pub members: Vec<CycleMemberView>,
    /// Counted in `lockscope_deadlock_cycles` / `lockscope_cross_source_deadlock_cycles`:
    /// `false` when a join it needs is a guess (a shared host, a pooled name).
    #[serde(default = "yes")]
    pub counted: bool,
}

fn yes() -> bool {
    true
}

/// A session in a cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CycleMemberView {
    pub source: String,
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessView>,
}

/// One wait inside a cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CycleWaitView {
    pub waiter: String,
    pub lock: String,
    pub holder: String,
    /// The source of this hop's lock, waiter and holder.
    #[serde(default)]
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiter_process: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_process: Option<String>,
}

/// A participant that holds locks others wait on and waits on none itself: the root of a
/// pile-up (`GET /api/v1/blockers`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RootBlockerView {
    /// Its sessions (one per source when joined by process).
    pub sessions: Vec<SessionRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessView>,
    /// Participants waiting on a lock it holds.
    pub direct: u64,
    /// Participants held up through any number of hops.
    pub total: u64,
    /// Their waits summed (ms), each participant's longest.
    pub waited_ms: i64,
    /// The locks it holds that others wait on (at most 20 ids).
    pub locks: Vec<String>,
    /// A database connection's details (its state says whether it is idle in transaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<ConnectionView>,
}

/// `GET /api/v1/blockers`: root blockers, biggest impact first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlockersPage {
    pub blockers: Vec<RootBlockerView>,
    /// Root blockers in all.
    pub total: u64,
}

/// A configured source and its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SourceView {
    pub name: String,
    pub backend: Backend,
    pub up: bool,
    /// Finished its first full sync.
    pub synced: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_ms: Option<i64>,
    /// When a lock of this source last changed after its first sync, to the second (its last
    /// event: a watched source is live, so this says how long it has been quiet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// While the source is not up after it was: when lockscope last knew it to be as shown
    /// (epoch ms; its last answer, or the last moment a heartbeat had checked it). Its locks
    /// are still listed, each marked with this instant (`LockView::source_last_seen_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_ms: Option<i64>,
    pub locks: usize,
    /// Nodes in the mirrored subtrees.
    #[serde(default)]
    pub nodes: usize,
    /// The source changes faster than lockscope reads it: its collector dropped the backlog of
    /// changes and is catching up with a full re-read (Redis), so locks may be behind the server
    /// until this clears.
    #[serde(default)]
    pub lagging: bool,
    /// What this source cannot show (e.g. MariaDB lists row locks only while they conflict).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<String>,
    /// Keys under a watched pattern (nodes under a watched root) that no recipe reads as a
    /// lock: not locks, but not hidden either (`lockscope_unrecognised_keys{source}`).
    #[serde(default)]
    pub unrecognised: u64,
    /// Some of them (at most [`UNRECOGNISED_SAMPLE`]), to show what is there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecognised_sample: Vec<UnrecognisedKey>,
}

/// Unrecognised keys a source keeps a sample of at most.
pub const UNRECOGNISED_SAMPLE: usize = 20;

/// A key (node) under a watched pattern (root) that no recipe reads as a lock, as a sample
/// shows it: enough for an operator to see what is there and that lockscope does not
/// understand it yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UnrecognisedKey {
    /// The key or node path (non-UTF-8 bytes escaped; at most 256 bytes shown).
    pub key: String,
    /// Its type as the server names it (`set`, `stream`, `zset`, `list`, `znode` …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Members, items, fields or bytes, where lockscope read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Its TTL left when read, ms (`None`: none, or not applicable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// The start of its content, escaped (at most 64 bytes of it; empty when not read).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub head: String,
    /// Why no recipe took it.
    pub why: String,
}

impl SourceView {
    /// Sets whether the source is up. Going from up to not up, the source was last seen at
    /// `last_seen_ms` (kept through further failures until it is up again); up clears it.
    pub fn set_up(&mut self, up: bool, last_seen_ms: i64) {
        if up {
            self.last_seen_ms = None;
        } else if self.up {
            self.last_seen_ms = Some(last_seen_ms);
        }
        self.up = up;
    }

    /// The instant a lock of this source is marked with: its last sight while it is not up.
    pub fn lock_mark(&self) -> Option<i64> {
        if self.up {
            None
        } else {
            self.last_seen_ms
        }
    }

    /// A configured source before its first connection.
    pub fn connecting(name: &str, backend: Backend) -> Self {
        SourceView {
            name: name.to_string(),
            backend,
            up: false,
            synced: false,
            last_sync_ms: None,
            last_change_ms: None,
            error: Some("connecting".into()),
            last_seen_ms: None,
            locks: 0,
            nodes: 0,
            lagging: false,
            limits: Vec::new(),
            unrecognised: 0,
            unrecognised_sample: Vec::new(),
        }
    }
}

/// One force-release attempt, allowed or refused (`GET /api/v1/audit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRecord {
    pub id: i64,
    pub at_ms: i64,
    /// The admin token's configured name (`-` when none or an unknown one was given).
    pub token_name: String,
    pub source: String,
    pub lock_id: String,
    /// The holder the operator named.
    pub observed_holder: String,
    /// `pending` (written before anything is changed; a record left `pending` means lockscope
    /// stopped while the release ran), then `released`, `holder_changed`, `unsupported`,
    /// `failed`, `unavailable`; refusals: `not_found`, `unauthorized`, `forbidden`, `invalid`,
    /// `too_large`, `rate_limited`, `disabled`, `store_unavailable`.
    pub outcome: String,
    pub reason: String,
    /// What was deleted, or why not (JSON text).
    pub detail: String,
    /// The client's address as lockscope saw it (empty in records written before it was kept).
    #[serde(default)]
    pub client: String,
    /// When the outcome was known, epoch ms (`None` while `pending`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<i64>,
}

/// `POST /api/v1/locks/{id}/release` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseRequest {
    /// The holder as the operator saw it: a ZooKeeper node path, a Redis token, hash field or host.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 16384))]
    pub holder: String,
    /// ZooKeeper: the session the operator saw owning it (checked against `ephemeralOwner`;
    /// required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub session: Option<String>,
    /// Redisson: the re-entry count the operator saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reentrancy: Option<u64>,
    /// The holder's [`HolderView::version`] as the operator saw it (etcd and ZooKeeper:
    /// required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub version: Option<String>,
    /// Why, for the audit log: not blank.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 1000, pattern = r"\S")
    )]
    pub reason: String,
}

/// `GET /api/v1/info`: what this lockscope is and which of its optional parts are on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InfoView {
    pub version: String,
    /// Force release is possible (an admin token is configured).
    pub admin_enabled: bool,
    /// Why force release is off, for the UI to explain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_disabled_reason: Option<String>,
    /// Holds longer than this are stale (`rules::staleness`).
    pub stale_hold_ms: i64,
    /// The limits past which a wait or hold is marked stuck (`stuck.rs`).
    #[serde(default)]
    pub stuck: StuckThresholds,
}

/// One message of `/api/v1/events` (the SSE `event:` name is [`StreamEvent::name`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Everything, sent first and after the client fell behind.
    Snapshot {
        sources: Vec<SourceView>,
        locks: Vec<LockView>,
    },
    /// A lock appeared or changed.
    Lock { lock: Box<LockView> },
    /// A lock is gone.
    Removed { id: String },
    /// A source changed state.
    Source { source: SourceView },
}

impl StreamEvent {
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Snapshot { .. } => "snapshot",
            StreamEvent::Lock { .. } => "lock",
            StreamEvent::Removed { .. } => "removed",
            StreamEvent::Source { .. } => "source",
        }
    }
}

/// Counts per value of each facet of a lock query, each under every filter but its own (a
/// page of `GET /api/v1/locks` and a live view's counts).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Facets))]
pub struct LockFacets {
    #[serde(default)]
    pub source: BTreeMap<String, u64>,
    #[serde(default)]
    pub backend: BTreeMap<String, u64>,
    #[serde(default)]
    pub recipe: BTreeMap<String, u64>,
    #[serde(default)]
    pub state: BTreeMap<String, u64>,
}

impl LockFacets {
    /// The count of locks in state `name` (0 when none).
    pub fn state(&self, name: &str) -> u64 {
        self.state.get(name).copied().unwrap_or(0)
    }
}

/// A live view's `snapshot` event: the page, its counts and the sources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ViewSnapshotData))]
pub struct ViewSnapshot {
    #[serde(default)]
    pub sources: Vec<SourceView>,
    pub locks: Vec<LockView>,
    pub total: u64,
    #[serde(default)]
    pub facets: LockFacets,
    pub next: Option<String>,
}

/// A live view's `view` event: the page's counts and cursor changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ViewTotalsData))]
pub struct ViewTotals {
    pub total: u64,
    #[serde(default)]
    pub facets: LockFacets,
    pub next: Option<String>,
}

/// A live view's `lock` event: a lock entered the page or changed in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ViewLockData))]
pub struct ViewLock {
    pub lock: Box<LockView>,
}

/// A live view's `removed` event: a lock left the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ViewRemovedData))]
pub struct ViewRemoved {
    pub id: String,
}

/// A live view's `source` event: a source changed state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ViewSourceData))]
pub struct ViewSource {
    pub source: SourceView,
}

/// One event of a live view's stream (`GET /api/v1/events` with a lock query): its SSE
/// `event:` name is [`ViewEvent::name`], its data the variant's JSON. The one definition the
/// server writes, the API's description derives and the UI reads.
#[derive(Debug, Clone, PartialEq)]
pub enum ViewEvent {
    Snapshot(ViewSnapshot),
    /// The page's counts and cursor (`view`).
    Totals(ViewTotals),
    Lock(ViewLock),
    Removed(ViewRemoved),
    Source(ViewSource),
}

impl ViewEvent {
    /// Every event name a view's stream sends.
    pub const NAMES: [&'static str; 5] = ["snapshot", "lock", "removed", "view", "source"];

    pub fn name(&self) -> &'static str {
        match self {
            ViewEvent::Snapshot(_) => "snapshot",
            ViewEvent::Totals(_) => "view",
            ViewEvent::Lock(_) => "lock",
            ViewEvent::Removed(_) => "removed",
            ViewEvent::Source(_) => "source",
        }
    }

    /// The event's data, as JSON.
    pub fn data(&self) -> serde_json::Result<String> {
        match self {
            ViewEvent::Snapshot(e) => serde_json::to_string(e),
            ViewEvent::Totals(e) => serde_json::to_string(e),
            ViewEvent::Lock(e) => serde_json::to_string(e),
            ViewEvent::Removed(e) => serde_json::to_string(e),
            ViewEvent::Source(e) => serde_json::to_string(e),
        }
    }

    /// The event named `name` (an SSE `event:`) read from its data.
    pub fn parse(name: &str, data: &str) -> Result<ViewEvent, String> {
        let e = |e: serde_json::Error| format!("bad {name} event: {e}");
        Ok(match name {
            "snapshot" => ViewEvent::Snapshot(serde_json::from_str(data).map_err(e)?),
            "view" => ViewEvent::Totals(serde_json::from_str(data).map_err(e)?),
            "lock" => ViewEvent::Lock(serde_json::from_str(data).map_err(e)?),
            "removed" => ViewEvent::Removed(serde_json::from_str(data).map_err(e)?),
            "source" => ViewEvent::Source(serde_json::from_str(data).map_err(e)?),
            other => return Err(format!("unknown event {other:?}")),
        })
    }
}

impl ViewEvent {
    /// One event of each kind, as a live view sends them (what tests of every reader of the
    /// protocol take through it).
    pub fn examples() -> Vec<ViewEvent> {
        let lock = LockView {
            id: "s~a".into(),
            source: "s".into(),
            path: "a".into(),
            ..LockView::default()
        };
        let source = SourceView::connecting("s", Backend::Redis);
        let facets = LockFacets {
            state: [("held".to_string(), 1)].into(),
            ..LockFacets::default()
        };
        vec![
            ViewEvent::Snapshot(ViewSnapshot {
                sources: vec![source.clone()],
                locks: vec![lock.clone()],
                total: 1,
                facets: facets.clone(),
                next: Some("c".into()),
            }),
            ViewEvent::Totals(ViewTotals {
                total: 1,
                facets,
                next: None,
            }),
            ViewEvent::Lock(ViewLock {
                lock: Box::new(lock),
            }),
            ViewEvent::Removed(ViewRemoved { id: "s~a".into() }),
            ViewEvent::Source(ViewSource { source }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_computes_durations_from_instants() {
        let mut lock = LockView {
            id: "s~l".into(),
            source: "s".into(),
            backend: Backend::Zookeeper,
            path: "/l".into(),
            recipe: "queue".into(),
            holders: vec![HolderView {
                node: "/l/lock-0000000001".into(),
                session: "0x1".into(),
                since_ms: 1_000,
                held_ms: 0,
                mode: None,
                watchers: 1,
                reentrancy: None,
                lease: None,
                identity: None,
                version: None,
                statement: None,
            }],
            waiters: vec![WaiterView {
                node: "/l/lock-0000000002".into(),
                session: "0x2".into(),
                since_ms: 1_500,
                waited_ms: 0,
                position: 1,
                mode: None,
                watches: None,
                deadline_ms: None,
                lease: None,
                identity: None,
                statement: None,
            }],
            watchers: 1,
            changed_ms: 1_500,
            expires_at_ms: Some(4_000),
            ..LockView::default()
        };
        lock.tick(3_000);
        assert_eq!(lock.holders[0].held_ms, 2_000);
        assert_eq!(lock.waiters[0].waited_ms, 1_500);
        assert_eq!(lock.oldest_wait_ms, 1_500);
        assert_eq!(lock.ttl_ms, Some(1_000));
        let json = serde_json::to_value(&lock).expect("serialises");
        assert_eq!(json["backend"], "zookeeper");
        assert!(json["holders"][0].get("mode").is_none());
        let event = StreamEvent::Removed { id: "s~l".into() };
        assert_eq!(serde_json::to_value(&event).expect("ok")["type"], "removed");
        assert_eq!(ReleaseCause::SessionExpired.as_str(), "session_expired");
        for kind in SessionKind::ALL {
            assert_eq!(serde_json::to_value(kind).expect("ok"), kind.as_str());
        }
    }

    #[test]
    fn every_view_event_reads_back_as_it_was_written() {
        let events = ViewEvent::examples();
        for event in events {
            assert!(ViewEvent::NAMES.contains(&event.name()));
            let data = event.data().expect("serialised");
            assert_eq!(ViewEvent::parse(event.name(), &data), Ok(event));
        }
        assert!(ViewEvent::parse("nonsense", "{}").is_err());
    }
}
