//! Redis lock layouts: what a key (plus its companion keys) means as a lock.
//!
//! The collector reads a key's type, value and PTTL (and the companions [`companion_keys`] names)
//! and hands them to [`decode`]; [`combine_redlock`] merges the same key read from the N
//! independent masters of a Redlock set. Every layout in `shared/LOCK_LAYOUTS.md` is recognised:
//!
//! * `SET key token NX PX` token locks (holder = token, TTL);
//! * legacy `SETNX` without TTL (`no_expiry`: it can never free itself) and `SETNX` whose value is
//!   an epoch-ms deadline (`deadline_past` once it is over);
//! * Redisson RLock hashes (`<uuid>:<threadId>` → re-entry count, watchdog TTL), FairLock (queue
//!   list + timeout zset, `leftover_queue` when they outlive the lock), FencedLock (token counter),
//!   ReadWriteLock (`mode`, readers, `…:write` writer), Semaphore and PermitExpirableSemaphore
//!   (permits available / held), CountDownLatch (when configured as one);
//! * python-redis-lock (`lock:<n>`: recognised by configuration or its `lock-signal:<n>`
//!   companion; guessed, with the reason shown, from a 24-character base64 id) and ShedLock
//!   (`ADDED:<time>@<host>[:<uuid>]`; the whole value is the holder, so a release compares it all);
//! * redis-semaphore (npm): `mutex:<n>` strings are token locks (the value, a UUID, is the
//!   holder); `semaphore:<n>` sorted sets of holder ids scored by epoch ms are its `Semaphore`
//!   and `MultiSemaphore` (`<id>_0…<id>_<p-1>`: one holder of p permits), see
//!   [`decode_node_semaphore`] for what is estimated and what cannot be known;
//! * Spring Integration's `RedisLockRegistry`: a string `<registryKey>:<lockKey>` holding the
//!   registry instance's client id (a UUID) with a PX TTL. It looks like any token lock and
//!   either part may contain `:`, so it is told only by configuration: the registry keys
//!   ([`spring_registry`], [`KeyHint::SpringLockRegistry`]).
//!
//! Library is told by structure first (companion keys, configuration, the key's type), by a
//! value's shape only as a last resort, and then [`RedisLock::guess`] says why. Redisson's
//! companion names follow its `prefixName`/`suffixName`: braces are added around the lock name
//! only when the name has none (`lock:{order}` → `redisson_lock_queue:lock:{order}`). Redisson's
//! transient helper strings (`redisson_unlock_latch:…`, `…:rwlock_timeout:<n>`) are never locks
//! of their own.
//!
//! Keys and values may be any bytes: non-UTF-8 is shown escaped, never rejected.

use crate::wire::LockMode;

/// A key's value as read from Redis.
#[derive(Debug, Clone, PartialEq)]
pub enum RedisValue {
    /// The key does not exist (any more).
    Missing,
    String(Vec<u8>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    List(Vec<Vec<u8>>),
    /// Members with scores, in score order.
    ZSet(Vec<(Vec<u8>, f64)>),
    /// A type lockscope does not read as a lock (set, stream, …).
    Other(String),
}

/// One key as read: value and PTTL (ms; -1 = no expiry, -2 = missing).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRead {
    pub value: RedisValue,
    pub pttl_ms: i64,
}

impl KeyRead {
    pub fn missing() -> Self {
        KeyRead {
            value: RedisValue::Missing,
            pttl_ms: -2,
        }
    }
}

/// The companion keys of one lock, read alongside it (missing ones as [`KeyRead::missing`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Companions {
    /// Redisson FairLock queue `redisson_lock_queue:{name}`.
    pub fair_queue: Option<KeyRead>,
    /// Redisson FairLock timeouts `redisson_lock_timeout:{name}`.
    pub fair_timeouts: Option<KeyRead>,
    /// Redisson FencedLock counter `redisson_lock_token:{name}`.
    pub fencing_counter: Option<KeyRead>,
    /// Redisson PermitExpirableSemaphore timeouts `{name}:timeout`.
    pub permit_timeouts: Option<KeyRead>,
    /// python-redis-lock's `lock-signal:<name>` list (only for `lock:<name>` keys, and only where
    /// it shares the key's server: never on a Cluster). It exists for a moment after an unlock.
    pub signal_list: Option<KeyRead>,
}

/// What the operator configured about a key, where the server cannot tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyHint {
    #[default]
    None,
    /// A Redisson Semaphore with this many permits in total.
    Semaphore { permits: u32 },
    /// A Redisson CountDownLatch.
    Latch,
    /// A python-redis-lock lock (`lock:<name>`, waiters blocked on `lock-signal:<name>`).
    PythonRedisLock,
    /// Under a configured Spring Integration `RedisLockRegistry` key (`<registryKey>:…`, see
    /// [`spring_registry`]).
    SpringLockRegistry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedisRecipe {
    TokenLock,
    SetnxNoTtl,
    SetnxDeadline,
    RedissonLock,
    RedissonFairLock,
    RedissonFencedLock,
    RedissonReadWriteLock,
    RedissonSemaphore,
    RedissonPermitExpirableSemaphore,
    RedissonCountDownLatch,
    PythonRedisLock,
    ShedLock,
    /// redis-semaphore's `Semaphore` (and `RedlockSemaphore`, one master at a time).
    NodeSemaphore,
    /// redis-semaphore's `MultiSemaphore` (and `RedlockMultiSemaphore`).
    NodeMultiSemaphore,
    /// Spring Integration's `RedisLockRegistry` (both its SPIN_LOCK and PUB_SUB_LOCK types:
    /// they leave the same key).
    SpringRedisLock,
    /// A sorted set of holder tokens scored by their expiry (epoch ms), members past it ignored
    /// as the library's scripts drop them; a [`WRITE_MARKER`] member while a writer holds,
    /// several tokens while readers share it (Symfony Lock's `RedisStore`; see
    /// [`decode_token_zset`]).
    TokenZset,
}

impl RedisRecipe {
    pub fn as_str(self) -> &'static str {
        match self {
            RedisRecipe::TokenLock => "token_lock",
            RedisRecipe::SetnxNoTtl => "setnx_no_ttl",
            RedisRecipe::SetnxDeadline => "setnx_deadline",
            RedisRecipe::RedissonLock => "redisson_lock",
            RedisRecipe::RedissonFairLock => "redisson_fair_lock",
            RedisRecipe::RedissonFencedLock => "redisson_fenced_lock",
            RedisRecipe::RedissonReadWriteLock => "redisson_rw_lock",
            RedisRecipe::RedissonSemaphore => "redisson_semaphore",
            RedisRecipe::RedissonPermitExpirableSemaphore => "redisson_permit_semaphore",
            RedisRecipe::RedissonCountDownLatch => "redisson_latch",
            RedisRecipe::PythonRedisLock => "python_redis_lock",
            RedisRecipe::ShedLock => "shedlock",
            RedisRecipe::NodeSemaphore => "redis_semaphore",
            RedisRecipe::NodeMultiSemaphore => "redis_multi_semaphore",
            RedisRecipe::SpringRedisLock => "spring_redis_lock",
            RedisRecipe::TokenZset => "token_zset",
        }
    }

    /// Every recipe, in declaration order (what [`RedisRecipe::as_str`] can answer).
    pub const ALL: [RedisRecipe; 16] = [
        RedisRecipe::TokenLock,
        RedisRecipe::SetnxNoTtl,
        RedisRecipe::SetnxDeadline,
        RedisRecipe::RedissonLock,
        RedisRecipe::RedissonFairLock,
        RedisRecipe::RedissonFencedLock,
        RedisRecipe::RedissonReadWriteLock,
        RedisRecipe::RedissonSemaphore,
        RedisRecipe::RedissonPermitExpirableSemaphore,
        RedisRecipe::RedissonCountDownLatch,
        RedisRecipe::PythonRedisLock,
        RedisRecipe::ShedLock,
        RedisRecipe::NodeSemaphore,
        RedisRecipe::NodeMultiSemaphore,
        RedisRecipe::SpringRedisLock,
        RedisRecipe::TokenZset,
    ];
}

/// Something an on-call engineer should know about a lock at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedisFlag {
    /// No TTL: if the holder died, nothing will ever free it.
    NoExpiry,
    /// The deadline written in the value has passed (legacy SETNX locks).
    DeadlinePast,
    /// A FairLock queue or timeout set left behind without the lock.
    LeftoverQueue,
    /// Waiters poll from the client (redis-semaphore, Spring's SPIN_LOCK) or wait on a pub/sub
    /// pattern shared by every key (Spring's PUB_SUB_LOCK): nothing on the server names them.
    WaitersNotVisible,
    /// redis-semaphore: an entry past score + lockTimeout is still in the set (its holder
    /// stopped refreshing; the next acquire purges it).
    StaleMember,
    /// The set has more members than lockscope reads ([`ZSET_READ_MAX`]): the rest are not shown.
    MembersCut,
}

impl RedisFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            RedisFlag::NoExpiry => "no_expiry",
            RedisFlag::DeadlinePast => "deadline_past",
            RedisFlag::LeftoverQueue => "leftover_queue",
            RedisFlag::WaitersNotVisible => "waiters_not_visible",
            RedisFlag::StaleMember => "stale_member",
            RedisFlag::MembersCut => "members_cut",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisHolder {
    /// Token, hash field, permit id or host name, escaped for display.
    pub id: String,
    pub reentrancy: Option<u64>,
    pub mode: Option<LockMode>,
    /// redis-semaphore: the holder's entry in the sorted set.
    pub entry: Option<SemaphoreEntry>,
}

/// One holder of a redis-semaphore `Semaphore` / `MultiSemaphore`, as its sorted set shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SemaphoreEntry {
    /// The member's score: the holder's clock (epoch ms) at its last acquire or refresh. A
    /// force release compares it (a refresh since changes it).
    pub score_ms: i64,
    /// MultiSemaphore: the permits it holds (members `<id>_0` … `<id>_<p-1>`); `None` for a
    /// Semaphore's single member `<id>`.
    pub permits: Option<u32>,
    /// When the entry lapses unless refreshed: score + the estimated lockTimeout (epoch ms);
    /// `None` when the lockTimeout cannot be estimated (no TTL on the key).
    pub expires_ms: Option<i64>,
    /// Past `expires_ms` but still in the set: the holder stopped refreshing (crashed, or lost
    /// the lock) and the next acquire purges it. It holds nothing any more.
    pub stale: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisWaiter {
    pub id: String,
    /// When the waiter gives up (FairLock timeout zset), epoch ms.
    pub deadline_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisLock {
    pub recipe: RedisRecipe,
    pub holders: Vec<RedisHolder>,
    /// In queue order.
    pub waiters: Vec<RedisWaiter>,
    /// Remaining TTL of the lock key, ms; `None` when it has none.
    pub ttl_ms: Option<i64>,
    /// Semaphores: permits still available (`None` when unknown).
    pub permits_available: Option<i64>,
    pub permits_total: Option<u32>,
    /// FencedLock: the token the current holder got.
    pub fencing_token: Option<i64>,
    /// Legacy deadline in the value, epoch ms.
    pub deadline_ms: Option<i64>,
    pub flags: Vec<RedisFlag>,
    /// Why the recipe is a guess (from the value's shape alone), when it is one.
    pub guess: Option<&'static str>,
}

impl RedisLock {
    /// A lock of `recipe` with nothing decoded yet (no holders, waiters or flags).
    pub fn new(recipe: RedisRecipe, ttl_ms: Option<i64>) -> Self {
        RedisLock {
            recipe,
            holders: Vec::new(),
            waiters: Vec::new(),
            ttl_ms,
            permits_available: None,
            permits_total: None,
            fencing_token: None,
            deadline_ms: None,
            flags: Vec::new(),
            guess: None,
        }
    }
}

/// Bytes as text: UTF-8 as is, anything else with `\xNN` escapes. A backslash that the text
/// itself follows with `x` is escaped too (`\x5c`), so [`parse_display_bytes`] always gives the
/// bytes back (a key `lock:\x41` is not the key `lock:A`; found by fuzzing).
pub fn display_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        let mut rest = valid;
        while let Some(at) = rest.find("\\x") {
            out.push_str(&rest[..at]);
            out.push_str("\\x5c");
            rest = &rest[at + 1..];
        }
        out.push_str(rest);
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The inverse of [`display_bytes`]: `\xNN` escapes back to bytes, everything else as UTF-8.
pub fn parse_display_bytes(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'x') {
            if let Some(b) = text
                .get(i + 2..i + 4)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Redisson's `prefixName(prefix, name)`: `prefix:{name}`, or `prefix:name` when the name already
/// has a brace (then its own hash tag, if any, keeps the companion in the lock's slot).
pub fn redisson_prefix_name(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 3);
    out.extend_from_slice(prefix);
    out.push(b':');
    if name.contains(&b'{') {
        out.extend_from_slice(name);
    } else {
        out.push(b'{');
        out.extend_from_slice(name);
        out.push(b'}');
    }
    out
}

/// Redisson's `suffixName(name, suffix)`: `{name}:suffix`, or `name:suffix` when the name already
/// has a brace.
pub fn redisson_suffix_name(name: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + suffix.len() + 3);
    if name.contains(&b'{') {
        out.extend_from_slice(name);
    } else {
        out.push(b'{');
        out.extend_from_slice(name);
        out.push(b'}');
    }
    out.push(b':');
    out.extend_from_slice(suffix);
    out
}

/// The names a Redisson companion's `rest` (what follows its prefix, or precedes its suffix)
/// can come from: `{a}` is the companion of `a` and of `{a}`; `x{y}` only of `x{y}`.
fn redisson_names_of(rest: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(inner) = rest.strip_prefix(b"{").and_then(|r| r.strip_suffix(b"}")) {
        if !inner.contains(&b'{') {
            out.push(inner.to_vec());
        }
    }
    if rest.contains(&b'{') {
        out.push(rest.to_vec());
    }
    out
}

/// The companion keys to read with `key`: fair queue, fair timeouts, fencing counter, permit
/// timeouts (in [`Companions`] order). They share `key`'s hash slot whenever `key`'s own braces
/// (if any) form a hash tag; see [`companions_share_slot`].
pub fn companion_keys(key: &[u8]) -> [Vec<u8>; 4] {
    [
        redisson_prefix_name(b"redisson_lock_queue", key),
        redisson_prefix_name(b"redisson_lock_timeout", key),
        redisson_prefix_name(b"redisson_lock_token", key),
        redisson_suffix_name(key, b"timeout"),
    ]
}

/// Whether every Redisson companion of `key` lives in `key`'s Cluster slot (not so for a name like
/// `a{b`, whose brace is not a hash tag: Redisson leaves it unbraced, so its companions hash as
/// whole strings).
pub fn companions_share_slot(key: &[u8]) -> bool {
    let slot = hash_slot(key);
    companion_keys(key).iter().all(|c| hash_slot(c) == slot)
}

/// python-redis-lock's signal list for a `lock:<name>` key: `lock-signal:<name>`.
pub fn signal_list_key(key: &[u8]) -> Option<Vec<u8>> {
    let name = key.strip_prefix(b"lock:")?;
    let mut out = b"lock-signal:".to_vec();
    out.extend_from_slice(name);
    Some(out)
}

/// The Spring Integration `RedisLockRegistry` key among `registries` that `key` lives under:
/// the registry builds its keys as `registryKey + ':' + lockKey` (`constructLockKey`, spring
/// -integration 7.2.0-SNAPSHOT @ f369e899, `RedisLockRegistry.java` L477), with no escaping, so
/// a key is under a registry when it starts with the registry key and a `:`. Either part may
/// itself contain `:`: when several configured registries fit (`a` and `a:b` for `a:b:c`), the
/// longest is taken (ties: the first). `None` when none fits.
pub fn spring_registry<'a, R: AsRef<[u8]>>(key: &[u8], registries: &'a [R]) -> Option<&'a [u8]> {
    let mut best: Option<&[u8]> = None;
    for registry in spring_registries_of(key, registries) {
        if best.is_none_or(|b| registry.len() > b.len()) {
            best = Some(registry);
        }
    }
    best
}

/// Every registry key among `registries` that `key` lives under (see [`spring_registry`]), in
/// their order: with overlapping registry keys, each of those registries may have a lock of
/// that name (`a`'s `b:c` and `a:b`'s `c` are one Redis key), and waiters of each.
pub fn spring_registries_of<'a, 'k, R: AsRef<[u8]>>(
    key: &'k [u8],
    registries: &'a [R],
) -> impl Iterator<Item = &'a [u8]> + 'k
where
    'a: 'k,
{
    registries
        .iter()
        .map(AsRef::as_ref)
        .filter(move |registry| {
            key.len() > registry.len() && key.starts_with(registry) && key[registry.len()] == b':'
        })
}

/// The channels a Spring `RedisLockRegistry` PUB_SUB_LOCK unlock of `key` (under `registry`)
/// publishes on, the message being `key` itself: `<registryKey>-channel:<key>` since 7.0.0,
/// 6.5.3 and 6.4.8 (GH-10471; its waiters `PSUBSCRIBE <registryKey>-channel:*` and take the
/// message as the key whose waiters to wake), and `<registryKey>-channel` before (waiters
/// `SUBSCRIBE` it).
pub fn spring_unlock_channels(registry: &[u8], key: &[u8]) -> [Vec<u8>; 2] {
    let mut old = registry.to_vec();
    old.extend_from_slice(b"-channel");
    let mut per_key = old.clone();
    per_key.push(b':');
    per_key.extend_from_slice(key);
    [per_key, old]
}

/// The text `java.util.UUID.toString()` prints: `8-4-4-4-12` lowercase hex digits (Spring's
/// `RedisLockRegistry` client id is `UUID.randomUUID().toString()`, L150).
pub fn is_java_uuid(value: &[u8]) -> bool {
    value.len() == 36
        && value.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
        })
}

/// `redisson_lock__channel:{key}`: where Redisson lock, fair lock and fenced lock clients wait
/// for an unlock (a fair lock's waiters each on `<channel>:<uuid>:<threadId>`).
pub fn unlock_channel(key: &[u8]) -> Vec<u8> {
    redisson_prefix_name(b"redisson_lock__channel", key)
}

/// `redisson_rwlock:{key}`: the ReadWriteLock's unlock channel.
pub fn rwlock_channel(key: &[u8]) -> Vec<u8> {
    redisson_prefix_name(b"redisson_rwlock", key)
}

/// `redisson_sc:{key}`: Semaphore and PermitExpirableSemaphore release channel.
pub fn semaphore_channel(key: &[u8]) -> Vec<u8> {
    redisson_prefix_name(b"redisson_sc", key)
}

/// `redisson_countdownlatch__channel__{key}`: always braced (`RedissonCountDownLatch`).
pub fn latch_channel(key: &[u8]) -> Vec<u8> {
    let mut out = b"redisson_countdownlatch__channel__{".to_vec();
    out.extend_from_slice(key);
    out.push(b'}');
    out
}

/// The pub/sub channels a recipe's waiters subscribe to (counted with `PUBSUB NUMSUB`, or
/// `SHARDNUMSUB` on a Cluster where Redisson ≥ 3.22 subscribes sharded); empty when its waiters
/// are not subscribers.
pub fn waiter_channels(key: &[u8], recipe: RedisRecipe) -> Vec<Vec<u8>> {
    match recipe {
        RedisRecipe::RedissonLock
        | RedisRecipe::RedissonFairLock
        | RedisRecipe::RedissonFencedLock => vec![unlock_channel(key)],
        RedisRecipe::RedissonReadWriteLock => vec![rwlock_channel(key)],
        RedisRecipe::RedissonSemaphore | RedisRecipe::RedissonPermitExpirableSemaphore => {
            vec![semaphore_channel(key)]
        }
        RedisRecipe::RedissonCountDownLatch => vec![latch_channel(key)],
        _ => Vec::new(),
    }
}

/// If `key` is a companion of other keys, those keys (a change to a companion re-reads its lock).
/// A brace-wrapped companion names two candidates (`{a}` comes from `a`, or from `{a}` itself);
/// the caller keeps the ones its patterns watch.
pub fn locks_of_companion(key: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for prefix in [
        &b"redisson_lock_queue:"[..],
        b"redisson_lock_timeout:",
        b"redisson_lock_token:",
    ] {
        if let Some(rest) = key.strip_prefix(prefix) {
            out.extend(redisson_names_of(rest));
        }
    }
    // Both readings may hold: `redisson_lock_queue:a{b}:timeout` is also the permit timeouts of
    // a key named `redisson_lock_queue:a{b}` (found by fuzzing).
    if let Some(rest) = key.strip_suffix(b":timeout") {
        for name in redisson_names_of(rest) {
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// What a key under a watched pattern that [`decode`] did not read as a lock is, for its
/// source's count and sample (`lockscope_unrecognised_keys`); `None` when the key is gone or
/// is part of a lock (Redisson's helpers and companions, python-redis-lock's signal list).
pub fn unrecognised(key: &[u8], read: &KeyRead) -> Option<crate::wire::UnrecognisedKey> {
    if is_redisson_internal(key) || key.starts_with(b"lock-signal:") {
        return None;
    }
    const HEAD: usize = 64;
    let clip = |bytes: &[u8]| display_bytes(&bytes[..bytes.len().min(HEAD)]);
    let (kind, size, head, why) = match &read.value {
        RedisValue::Missing => return None,
        RedisValue::List(items) => (
            "list",
            Some(items.len() as u64),
            items.first().map(|i| clip(i)).unwrap_or_default(),
            "no recipe keeps a lock as a list of its own (Redisson's queues and \
             python-redis-lock's signal lists are read with their locks)",
        ),
        RedisValue::ZSet(members) => (
            "zset",
            Some(members.len() as u64),
            members
                .first()
                .map(|(m, score)| format!("{} = {score:?}", clip(m)))
                .unwrap_or_default(),
            "a sorted set whose scores are not all epoch-ms instants (expiries or acquire \
             times), or an empty one",
        ),
        RedisValue::String(value) => (
            "string",
            Some(value.len() as u64),
            clip(value),
            "a string no recipe reads",
        ),
        RedisValue::Hash(fields) => (
            "hash",
            Some(fields.len() as u64),
            fields.first().map(|(f, _)| clip(f)).unwrap_or_default(),
            "a hash no recipe reads",
        ),
        RedisValue::Other(kind) => (
            kind.as_str(),
            None,
            String::new(),
            "no recipe keeps a lock in this type",
        ),
    };
    let key_shown = &key[..key.len().min(256)];
    Some(crate::wire::UnrecognisedKey {
        key: display_bytes(key_shown),
        kind: kind.to_string(),
        size,
        ttl_ms: ttl(read.pttl_ms),
        head,
        why: why.to_string(),
    })
}

/// Redisson's transient helper strings, never locks of their own: the unlock latch
/// (`redisson_unlock_latch:{name}:<requestId>`, 3.24+) and a read lock's lease timeouts
/// (`{name}:<uuid>:<threadId>:rwlock_timeout:<n>`).
pub fn is_redisson_internal(key: &[u8]) -> bool {
    key.starts_with(b"redisson_unlock_latch:")
        || key
            .windows(b":rwlock_timeout:".len())
            .any(|w| w == b":rwlock_timeout:")
}

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key).
pub fn hash_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let close = key[open + 1..].iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &key[open + 1..open + 1 + close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in tagged {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

fn parse_i64(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// An integer that reads as an epoch-ms instant within ±20 years of `now_ms` (no overflow for
/// any value: found by fuzzing).
fn as_epoch_ms(value: i64, now_ms: i64) -> Option<i64> {
    const TWENTY_YEARS_MS: i64 = 20 * 365 * 24 * 3600 * 1000;
    (value.checked_sub(now_ms)?.checked_abs()? < TWENTY_YEARS_MS).then_some(value)
}

/// python-redis-lock's default id: `b64encode(urandom(18))`, 24 base64 characters.
fn is_pyrl_id(bytes: &[u8]) -> bool {
    bytes.len() == 24
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
}

/// `ADDED:<iso-time>@<hostname>` (ShedLock before 6.7.0) or `…@<hostname>:<uuid>` (since).
fn is_shedlock_value(value: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(value) else {
        return false;
    };
    text.strip_prefix("ADDED:")
        .and_then(|rest| rest.split_once('@'))
        .is_some_and(|(at, host)| !at.is_empty() && !host.is_empty())
}

/// A permit id of a PermitExpirableSemaphore: Redisson (3.17+) stores 16 raw bytes, which its
/// API and logs show as 32 hex characters; anything else is shown as it is.
fn permit_id(bytes: &[u8]) -> String {
    if bytes.len() == 16 {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    } else {
        display_bytes(bytes)
    }
}

/// The longest TTL lockscope takes from `PTTL`: a century. Redis accepts any expiry up to
/// `PEXPIREAT 9223372036854775807` (its PTTL is then about 9.2e18 ms), which would overflow any
/// deadline computed from it (`read_at + pttl`); a century is "never" for a lock.
pub const PTTL_MAX_MS: i64 = 100 * 365 * 24 * 3600 * 1000;

/// A `PTTL` answer as lockscope uses it: -2 (missing) and -1 (no expiry) as they are, a TTL
/// clamped to [`PTTL_MAX_MS`] (and anything below -2, which Redis never answers, as missing).
pub fn clamp_pttl(pttl_ms: i64) -> i64 {
    pttl_ms.clamp(-2, PTTL_MAX_MS)
}

fn ttl(pttl_ms: i64) -> Option<i64> {
    (pttl_ms >= 0).then(|| pttl_ms.min(PTTL_MAX_MS))
}

fn zset_of(read: &Option<KeyRead>) -> Option<&Vec<(Vec<u8>, f64)>> {
    match read.as_ref().map(|r| &r.value) {
        Some(RedisValue::ZSet(members)) => Some(members),
        _ => None,
    }
}

fn list_of(read: &Option<KeyRead>) -> Option<&Vec<Vec<u8>>> {
    match read.as_ref().map(|r| &r.value) {
        Some(RedisValue::List(items)) => Some(items),
        _ => None,
    }
}

/// Reads `key` (with its companions) as a lock; `None` when nothing lock-like is there.
pub fn decode(
    key: &[u8],
    read: &KeyRead,
    companions: &Companions,
    hint: KeyHint,
    now_ms: i64,
) -> Option<RedisLock> {
    if is_redisson_internal(key) {
        return None;
    }
    let key_ttl = ttl(read.pttl_ms);
    let queue = list_of(&companions.fair_queue);
    let timeouts = zset_of(&companions.fair_timeouts);
    // Every FairLock script first drops head entries whose timeout has passed, so those are
    // not waiters any more, only left to be cleaned by the next call.
    let deadlines: std::collections::HashMap<&[u8], f64> = timeouts
        .map(|t| t.iter().map(|(m, s)| (m.as_slice(), *s)).collect())
        .unwrap_or_default();
    let live = |id: &[u8]| deadlines.get(id).is_none_or(|s| *s as i64 > now_ms);
    let order: Vec<&Vec<u8>> = match queue {
        Some(q) if !q.is_empty() => q.iter().filter(|id| live(id)).collect(),
        _ => timeouts
            .map(|t| t.iter().map(|(m, _)| m).filter(|m| live(m)).collect())
            .unwrap_or_default(),
    };
    let fair = !order.is_empty();
    // A queue (even of expired entries only) makes a Redisson lock hash a fair lock.
    let queued = queue.is_some_and(|q| !q.is_empty()) || timeouts.is_some_and(|t| !t.is_empty());
    let mut lock = match &read.value {
        RedisValue::Missing | RedisValue::Other(_) => {
            if !fair {
                return None;
            }
            // The lock is gone but its queue stayed (seen: they have no TTL).
            let mut lock = RedisLock::new(RedisRecipe::RedissonFairLock, None);
            lock.flags.push(RedisFlag::LeftoverQueue);
            lock
        }
        RedisValue::String(value) => decode_string(key, value, key_ttl, companions, hint, now_ms),
        RedisValue::Hash(fields) => decode_hash(fields, key_ttl, companions, queued),
        RedisValue::ZSet(members) if !fair => {
            if is_node_semaphore_key(key) {
                return decode_node_semaphore(key, members, read.pttl_ms, hint, now_ms);
            }
            return decode_token_zset(members, read.pttl_ms, hint, now_ms);
        }
        RedisValue::List(_) | RedisValue::ZSet(_) => return None,
    };
    if fair {
        lock.waiters = order
            .into_iter()
            .map(|id| RedisWaiter {
                id: display_bytes(id),
                deadline_ms: deadlines.get(id.as_slice()).map(|s| *s as i64),
            })
            .collect();
    }
    Some(lock)
}

fn decode_string(
    key: &[u8],
    value: &[u8],
    key_ttl: Option<i64>,
    companions: &Companions,
    hint: KeyHint,
    now_ms: i64,
) -> RedisLock {
    if let Some(permit_timeouts) = zset_of(&companions.permit_timeouts) {
        let mut lock = RedisLock::new(RedisRecipe::RedissonPermitExpirableSemaphore, key_ttl);
        lock.permits_available = parse_i64(value);
        lock.holders = permit_timeouts
            .iter()
            .filter(|(_, expiry)| *expiry as i64 > now_ms)
            .map(|(id, _)| RedisHolder {
                id: permit_id(id),
                reentrancy: None,
                mode: None,
                entry: None,
            })
            .collect();
        if let KeyHint::Semaphore { permits } = hint {
            lock.permits_total = Some(permits);
        }
        return lock;
    }
    match hint {
        KeyHint::Semaphore { permits } => {
            let mut lock = RedisLock::new(RedisRecipe::RedissonSemaphore, key_ttl);
            lock.permits_available = parse_i64(value);
            lock.permits_total = Some(permits);
            return lock;
        }
        KeyHint::Latch => {
            let mut lock = RedisLock::new(RedisRecipe::RedissonCountDownLatch, key_ttl);
            lock.permits_available = parse_i64(value);
            return lock;
        }
        KeyHint::PythonRedisLock => {
            return held_string(RedisRecipe::PythonRedisLock, value, key_ttl);
        }
        // A registry's client id, UUID.randomUUID(): the holder. Its waiters either poll
        // (SPIN_LOCK, every 100 ms by default) or wait on a pattern subscription shared by
        // every key of the registry (PUB_SUB_LOCK): nothing on the server names them, and the
        // two types leave the same key. Anything else under the prefix is read as usual.
        KeyHint::SpringLockRegistry if is_java_uuid(value) => {
            let mut lock = held_string(RedisRecipe::SpringRedisLock, value, key_ttl);
            lock.flags.push(RedisFlag::WaitersNotVisible);
            return lock;
        }
        KeyHint::SpringLockRegistry | KeyHint::None => {}
    }
    if list_of(&companions.signal_list).is_some() && key.starts_with(b"lock:") {
        // python-redis-lock's unlock pushes `lock-signal:<name>`: whoever holds `lock:<name>`
        // now took it from a python-redis-lock holder.
        return held_string(RedisRecipe::PythonRedisLock, value, key_ttl);
    }
    if let Some(id) = value
        .strip_suffix(WRITER_WAITING)
        .filter(|id| key.ends_with(b".writer") && !id.is_empty())
    {
        // DistributedLock.Redis's reader-writer lock (2.8.1, `RedisDistributedReaderWriterLock`):
        // a writer that found readers holding `SET <name>.writer <id>_WRITERWAITING` and waits
        // for `<name>.readers` to empty. Nobody holds this key: its writer waits.
        let mut lock = RedisLock::new(RedisRecipe::TokenLock, key_ttl);
        lock.waiters.push(RedisWaiter {
            id: display_bytes(id),
            deadline_ms: None,
        });
        if key_ttl.is_none() {
            lock.flags.push(RedisFlag::NoExpiry);
        }
        return lock;
    }
    if is_shedlock_value(value) {
        // The whole value is the holder: a release must compare all of it (a later run on the
        // same host writes another value).
        return held_string(RedisRecipe::ShedLock, value, key_ttl);
    }
    if let Some(deadline) = parse_i64(value).and_then(|v| as_epoch_ms(v, now_ms)) {
        // `SETNX` with the expiry written in the value: nobody is named as holder.
        let mut lock = RedisLock::new(RedisRecipe::SetnxDeadline, key_ttl);
        lock.deadline_ms = Some(deadline);
        lock.guess = Some(
            "the value reads as an epoch-ms instant: a SETNX lock with its deadline in the value",
        );
        if deadline < now_ms {
            lock.flags.push(RedisFlag::DeadlinePast);
        }
        if key_ttl.is_none() {
            lock.flags.push(RedisFlag::NoExpiry);
        }
        return lock;
    }
    if let Some(permits) = parse_i64(value).filter(|v| (0..1_000_000_000).contains(v)) {
        // A small counter under a lock pattern: a Redisson Semaphore (permits available) whose
        // total only its clients know; configure it (or a latch) to say more.
        let mut lock = RedisLock::new(RedisRecipe::RedissonSemaphore, key_ttl);
        lock.permits_available = Some(permits);
        lock.guess = Some("a small number under a lock pattern: read as a Redisson Semaphore's available permits; configure `semaphores` or `latches` to be sure");
        return lock;
    }
    if key.starts_with(b"lock:") && is_pyrl_id(value) {
        let mut lock = held_string(RedisRecipe::PythonRedisLock, value, key_ttl);
        lock.guess = Some("key lock:<name> holding a 24-character base64 id, python-redis-lock's default; configure `python_redis_locks` to be sure");
        return lock;
    }
    let recipe = if key_ttl.is_none() {
        RedisRecipe::SetnxNoTtl
    } else {
        RedisRecipe::TokenLock
    };
    held_string(recipe, value, key_ttl)
}

/// A string lock whose value names its holder.
fn held_string(recipe: RedisRecipe, value: &[u8], key_ttl: Option<i64>) -> RedisLock {
    let mut lock = RedisLock::new(recipe, key_ttl);
    if key_ttl.is_none() {
        lock.flags.push(RedisFlag::NoExpiry);
    }
    lock.holders.push(RedisHolder {
        id: display_bytes(value),
        reentrancy: None,
        mode: None,
        entry: None,
    });
    lock
}

fn decode_hash(
    fields: &[(Vec<u8>, Vec<u8>)],
    key_ttl: Option<i64>,
    companions: &Companions,
    fair: bool,
) -> RedisLock {
    let mode = fields
        .iter()
        .find(|(f, _)| f == b"mode")
        .map(|(_, v)| v.as_slice());
    if let Some(mode) = mode {
        let mut lock = RedisLock::new(RedisRecipe::RedissonReadWriteLock, key_ttl);
        let writing = mode == b"write";
        for (field, value) in fields {
            if field == b"mode" {
                continue;
            }
            let is_writer = field.ends_with(b":write");
            // In write mode the writer holds (its read re-entries are its own); in read mode
            // every reader field holds.
            if writing != is_writer {
                continue;
            }
            lock.holders.push(RedisHolder {
                id: display_bytes(field),
                reentrancy: parse_i64(value).map(|v| v.max(0) as u64),
                mode: Some(if is_writer {
                    LockMode::Write
                } else {
                    LockMode::Read
                }),
                entry: None,
            });
        }
        if lock.holders.is_empty() {
            lock.flags.push(RedisFlag::LeftoverQueue);
        }
        return lock;
    }
    let fencing = match companions.fencing_counter.as_ref().map(|r| &r.value) {
        Some(RedisValue::String(v)) => parse_i64(v),
        _ => None,
    };
    let recipe = if fencing.is_some() {
        RedisRecipe::RedissonFencedLock
    } else if fair {
        RedisRecipe::RedissonFairLock
    } else {
        RedisRecipe::RedissonLock
    };
    let mut lock = RedisLock::new(recipe, key_ttl);
    lock.fencing_token = fencing;
    lock.holders = fields
        .iter()
        .map(|(field, value)| RedisHolder {
            id: display_bytes(field),
            reentrancy: parse_i64(value).map(|v| v.max(0) as u64),
            mode: None,
            entry: None,
        })
        .collect();
    if key_ttl.is_none() {
        lock.flags.push(RedisFlag::NoExpiry);
    }
    lock
}

/// Sorted-set members lockscope reads of one key at most (the collector asks for one more, so
/// a set cut short says so: [`RedisFlag::MembersCut`]).
pub const ZSET_READ_MAX: usize = 1000;

/// Whether `key` names a redis-semaphore semaphore: `semaphore:<name>`, also behind an ioredis
/// `keyPrefix` (`app:semaphore:<name>`).
pub fn is_node_semaphore_key(key: &[u8]) -> bool {
    key.starts_with(b"semaphore:") || key.windows(11).any(|w| w == b":semaphore:")
}

/// A MultiSemaphore member `<id>_<i>`: the id and `i`, split on the last `_` when what follows
/// is decimal digits (without a leading zero unless it is `0`).
fn split_permit(member: &[u8]) -> Option<(&[u8], u32)> {
    let at = member.iter().rposition(|b| *b == b'_')?;
    let (id, tail) = (&member[..at], &member[at + 1..]);
    if id.is_empty() || tail.is_empty() || !tail.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if tail.len() > 1 && tail[0] == b'0' {
        return None;
    }
    std::str::from_utf8(tail)
        .ok()?
        .parse()
        .ok()
        .map(|i| (id, i))
}

/// redis-semaphore (npm, 5.x) `Semaphore`/`MultiSemaphore`: a sorted set `semaphore:<name>`
/// whose members are holder ids (a MultiSemaphore's `<id>_0` … `<id>_<p-1>`, one per permit)
/// scored by the holder's clock (epoch ms) at its last acquire or refresh, the whole key
/// PEXPIREd to lockTimeout on every write. Neither the limit nor lockTimeout is stored: the
/// limit comes from configuration (`semaphores`), lockTimeout is estimated as
/// `now + PTTL - max(score)` (the latest write set both). Entries past score + lockTimeout are
/// "stale": the library no longer counts them and its next acquire purges them; they are kept
/// as holders flagged `stale` (the on-call engineer sees which holder stopped refreshing), but
/// not counted against the limit. Waiters poll from the client: nothing shows them.
fn decode_node_semaphore(
    key: &[u8],
    members: &[(Vec<u8>, f64)],
    pttl_ms: i64,
    hint: KeyHint,
    now_ms: i64,
) -> Option<RedisLock> {
    if !is_node_semaphore_key(key) || members.is_empty() {
        return None;
    }
    let cut = members.len() > ZSET_READ_MAX;
    let members = &members[..members.len().min(ZSET_READ_MAX)];
    // Every score an epoch-ms instant (a finite, whole number near now).
    let scores: Option<Vec<i64>> = members
        .iter()
        .map(|(_, s)| {
            (s.is_finite() && s.fract() == 0.0 && s.abs() < 9.0e15)
                .then_some(*s as i64)
                .and_then(|v| as_epoch_ms(v, now_ms))
        })
        .collect();
    let scores = scores?;
    let key_ttl = ttl(pttl_ms);
    let newest = scores.iter().copied().max()?;
    // lockTimeout as the latest write left it; nonsense (clock skew) is "unknown".
    let lock_timeout = key_ttl
        .and_then(|t| now_ms.checked_add(t)?.checked_sub(newest))
        .filter(|l| *l > 0);
    // MultiSemaphore groups: an id whose suffixes are exactly 0..p-1.
    let mut groups: std::collections::BTreeMap<&[u8], Vec<(u32, i64)>> = Default::default();
    for ((member, _), score) in members.iter().zip(&scores) {
        if let Some((id, i)) = split_permit(member) {
            groups.entry(id).or_default().push((i, *score));
        }
    }
    groups.retain(|_, permits| {
        let mut seen: Vec<u32> = permits.iter().map(|(i, _)| *i).collect();
        seen.sort_unstable();
        seen.iter().enumerate().all(|(n, i)| *i as usize == n)
    });
    let mut lock = RedisLock::new(RedisRecipe::NodeSemaphore, key_ttl);
    let entry = |score: i64, permits: Option<u32>| {
        let expires_ms = lock_timeout.and_then(|l| score.checked_add(l));
        SemaphoreEntry {
            score_ms: score,
            permits,
            expires_ms,
            stale: expires_ms.is_some_and(|e| e <= now_ms),
        }
    };
    let mut holders = Vec::new();
    let mut grouped_done: std::collections::BTreeSet<&[u8]> = Default::default();
    for ((member, _), score) in members.iter().zip(&scores) {
        let group = split_permit(member).and_then(|(id, _)| groups.get_key_value(id));
        match group {
            Some((id, permits)) => {
                if !grouped_done.insert(*id) {
                    continue;
                }
                // The oldest score of its permits (they are written together).
                let score = permits.iter().map(|(_, s)| *s).min().unwrap_or(*score);
                holders.push(RedisHolder {
                    id: display_bytes(id),
                    reentrancy: None,
                    mode: None,
                    entry: Some(entry(score, Some(permits.len() as u32))),
                });
            }
            None => holders.push(RedisHolder {
                id: display_bytes(member),
                reentrancy: None,
                mode: None,
                entry: Some(entry(*score, None)),
            }),
        }
    }
    if !groups.is_empty() {
        lock.recipe = RedisRecipe::NodeMultiSemaphore;
    }
    let live: i64 = holders
        .iter()
        .filter_map(|h| h.entry)
        .filter(|e| !e.stale)
        .map(|e| i64::from(e.permits.unwrap_or(1)))
        .sum();
    if let KeyHint::Semaphore { permits } = hint {
        lock.permits_total = Some(permits);
        lock.permits_available = Some(i64::from(permits) - live);
    } else if matches!(hint, KeyHint::None | KeyHint::SpringLockRegistry) {
        // A Spring registry names only the client-id strings under it.
        lock.guess = Some(
            "a sorted set under `semaphore:` scored by epoch-ms instants: redis-semaphore's \
             Semaphore (members are holder ids, scores their last acquire or refresh); its limit \
             is not stored: configure `semaphores` to show it",
        );
    }
    if holders.iter().any(|h| h.entry.is_some_and(|e| e.stale)) {
        lock.flags.push(RedisFlag::StaleMember);
    }
    if key_ttl.is_none() {
        lock.flags.push(RedisFlag::NoExpiry);
    }
    if cut {
        lock.flags.push(RedisFlag::MembersCut);
    }
    lock.flags.push(RedisFlag::WaitersNotVisible);
    lock.holders = holders;
    Some(lock)
}

/// What DistributedLock.Redis's waiting writer appends to its id in `<name>.writer`.
pub const WRITER_WAITING: &[u8] = b"_WRITERWAITING";

/// DistributedLock.Redis's lock id (`RedLockHelper`): `<MachineName>_<ProcessId>_` then a GUID
/// as 32 lower-case hex digits.
pub fn is_distributed_lock_id(id: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(id) else {
        return false;
    };
    let Some((rest, guid)) = text.rsplit_once('_') else {
        return false;
    };
    let Some((machine, pid)) = rest.rsplit_once('_') else {
        return false;
    };
    !machine.is_empty()
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && guid.len() == 32
        && guid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The member a writer adds beside its token in a [`RedisRecipe::TokenZset`] (Symfony Lock's
/// `RedisStore`, 5.2+: `ZADD key <expiry> __write__`).
pub const WRITE_MARKER: &[u8] = b"__write__";

/// A sorted set of holder tokens scored by their expiry in epoch ms (Symfony Lock 5.4's
/// `RedisStore`, read from `Store/RedisStore.php`: every script first runs `ZREMRANGEBYSCORE
/// key -inf now`, a write lock is its token plus [`WRITE_MARKER`], a read lock one token per
/// reader, the key `PEXPIREAT` its largest score). Told by structure: every score an epoch-ms
/// instant. Members scored now or earlier are expired: the library's next call drops them, so
/// they hold nothing and are not shown. Each holder's lease is its own score; the key's TTL is
/// the latest. Waiters poll from the client (100 ms in Symfony): nothing shows them.
fn decode_token_zset(
    members: &[(Vec<u8>, f64)],
    pttl_ms: i64,
    hint: KeyHint,
    now_ms: i64,
) -> Option<RedisLock> {
    if members.is_empty() {
        return None;
    }
    let cut = members.len() > ZSET_READ_MAX;
    let members = &members[..members.len().min(ZSET_READ_MAX)];
    // DistributedLock's semaphore scores with the server's microseconds (`now * 1000.0 +
    // µs / 1000.0`): a fraction of a millisecond is dropped (a release compares the whole ms).
    let scores: Option<Vec<i64>> = members
        .iter()
        .map(|(_, s)| {
            (s.is_finite() && s.abs() < 9.0e15)
                .then_some(s.floor() as i64)
                .and_then(|v| as_epoch_ms(v, now_ms))
        })
        .collect();
    let scores = scores?;
    let live = |score: i64| score > now_ms;
    let writing = members
        .iter()
        .zip(&scores)
        .any(|((m, _), s)| m == WRITE_MARKER && live(*s));
    let mut lock = RedisLock::new(RedisRecipe::TokenZset, ttl(pttl_ms));
    // DistributedLock.Redis's semaphore (`<machine>_<pid>_<32 hex>` ids, no marker) holds
    // permits, not reads: shown without a mode, and said to be a guess from the ids' shape.
    let semaphore = !writing
        && members
            .iter()
            .filter(|(m, _)| m != WRITE_MARKER)
            .all(|(m, _)| is_distributed_lock_id(m));
    if semaphore {
        lock.guess = Some(
            "members named <machine>_<pid>_<32 hex>, DistributedLock.Redis's lock ids: read as \
             its RedisDistributedSemaphore (each member one holder until its score); its \
             maxCount is not stored: configure `semaphores` to show it",
        );
    }
    lock.holders = members
        .iter()
        .zip(&scores)
        .filter(|((m, _), s)| m != WRITE_MARKER && live(**s))
        .map(|((m, _), s)| RedisHolder {
            id: display_bytes(m),
            reentrancy: None,
            mode: if semaphore {
                None
            } else if writing {
                Some(LockMode::Write)
            } else {
                Some(LockMode::Read)
            },
            entry: Some(SemaphoreEntry {
                score_ms: *s,
                permits: None,
                expires_ms: Some(*s),
                stale: false,
            }),
        })
        .collect();
    if let KeyHint::Semaphore { permits } = hint {
        lock.permits_total = Some(permits);
        lock.permits_available = Some(i64::from(permits) - lock.holders.len() as i64);
        lock.guess = None;
    }
    if ttl(pttl_ms).is_none() {
        lock.flags.push(RedisFlag::NoExpiry);
    }
    if cut {
        lock.flags.push(RedisFlag::MembersCut);
    }
    lock.flags.push(RedisFlag::WaitersNotVisible);
    Some(lock)
}

/// One master's view of a Redlock key.
#[derive(Debug, Clone, PartialEq)]
pub struct RedlockMaster {
    pub master: String,
    /// Holder token there, and its TTL; `None` when the key is absent or the master is down.
    pub holder: Option<(String, Option<i64>)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Redlock {
    pub masters: Vec<RedlockMaster>,
    /// The holder that has the key on a majority (N/2+1) of masters.
    pub majority_holder: Option<String>,
    /// More than one holder present across masters.
    pub split: bool,
    /// Holders present on some masters but without a majority.
    pub minority_holders: Vec<String>,
}

/// The holder a Redisson RedLock's masters agree on: Redisson's `RedissonRedLock` locks an RLock
/// on each master, usually through one Redisson instance (one uuid) per master, from one
/// thread. So the masters' fields `<uuid>:<threadId>` differ and only the thread id is shared:
/// `*:<threadId>` stands for that holder. A field without a thread id is its own holder.
pub fn redisson_redlock_holder(field: &str) -> String {
    match field.rsplit_once(':') {
        Some((_, thread)) if !thread.is_empty() && thread.bytes().all(|b| b.is_ascii_digit()) => {
            format!("*:{thread}")
        }
        _ => field.to_string(),
    }
}

/// Merges the same key read on every master of a Redlock set.
pub fn combine_redlock(masters: Vec<RedlockMaster>) -> Redlock {
    let quorum = masters.len() / 2 + 1;
    let mut counts: Vec<(String, usize)> = Vec::new();
    for m in &masters {
        if let Some((holder, _)) = &m.holder {
            match counts.iter_mut().find(|(h, _)| h == holder) {
                Some((_, n)) => *n += 1,
                None => counts.push((holder.clone(), 1)),
            }
        }
    }
    let majority_holder = counts
        .iter()
        .find(|(_, n)| *n >= quorum)
        .map(|(h, _)| h.clone());
    let minority_holders = counts
        .iter()
        .filter(|(h, _)| Some(h) != majority_holder.as_ref())
        .map(|(h, _)| h.clone())
        .collect();
    Redlock {
        split: counts.len() > 1,
        masters,
        majority_holder,
        minority_holders,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_future_ttls_are_clamped() {
        assert_eq!(clamp_pttl(i64::MAX), PTTL_MAX_MS);
        assert_eq!(clamp_pttl(-1), -1);
        assert_eq!(clamp_pttl(-2), -2);
        assert_eq!(clamp_pttl(i64::MIN), -2);
        assert_eq!(clamp_pttl(1_500), 1_500);
        let lock = decode(
            b"lock:forever",
            &string(b"tok", 9_223_370_241_267_597_462),
            &Companions::default(),
            KeyHint::None,
            NOW,
        )
        .expect("a token lock");
        assert_eq!(lock.ttl_ms, Some(PTTL_MAX_MS));
        // A deadline from it (read time + TTL) stays far below i64::MAX.
        assert!(NOW.checked_add(PTTL_MAX_MS).is_some());
    }

    #[test]
    fn display_bytes_round_trip() {
        for raw in [
            &b"lock:plain"[..],
            b"lock:\xff\x00bin",
            "lock:\u{e9}t\u{e9}".as_bytes(),
            br"lock:\x41",
            br"a\\x+f\x",
            br"trailing\",
        ] {
            assert_eq!(parse_display_bytes(&display_bytes(raw)), raw);
        }
    }

    const NOW: i64 = 1_795_000_000_000;

    fn string(v: &[u8], pttl: i64) -> KeyRead {
        KeyRead {
            value: RedisValue::String(v.to_vec()),
            pttl_ms: pttl,
        }
    }

    fn hash(fields: &[(&str, &str)], pttl: i64) -> KeyRead {
        KeyRead {
            value: RedisValue::Hash(
                fields
                    .iter()
                    .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
                    .collect(),
            ),
            pttl_ms: pttl,
        }
    }

    /// key, read, hint, recipe, holders, flags
    type StringCase = (
        &'static str,
        KeyRead,
        KeyHint,
        RedisRecipe,
        Vec<&'static str>,
        Vec<RedisFlag>,
    );

    fn ids(lock: &RedisLock) -> Vec<&str> {
        lock.holders.iter().map(|h| h.id.as_str()).collect()
    }

    #[test]
    fn string_layouts() {
        let none = Companions::default();
        let cases: Vec<StringCase> = vec![
            (
                "lock:orders",
                string(b"4f1c-token", 29_000),
                KeyHint::None,
                RedisRecipe::TokenLock,
                vec!["4f1c-token"],
                vec![],
            ),
            (
                "legacy",
                string(b"worker-7", -1),
                KeyHint::None,
                RedisRecipe::SetnxNoTtl,
                vec!["worker-7"],
                vec![RedisFlag::NoExpiry],
            ),
            (
                "deadline",
                string((NOW - 5_000).to_string().as_bytes(), -1),
                KeyHint::None,
                RedisRecipe::SetnxDeadline,
                vec![],
                vec![RedisFlag::DeadlinePast, RedisFlag::NoExpiry],
            ),
            (
                "deadline2",
                string((NOW + 5_000).to_string().as_bytes(), -1),
                KeyHint::None,
                RedisRecipe::SetnxDeadline,
                vec![],
                vec![RedisFlag::NoExpiry],
            ),
            (
                // node-redlock's 32-hex token is not python-redis-lock's.
                "lock:report",
                string(b"0123456789abcdef0123456789abcdef", 60_000),
                KeyHint::None,
                RedisRecipe::TokenLock,
                vec!["0123456789abcdef0123456789abcdef"],
                vec![],
            ),
            (
                // python-redis-lock 4.0.1 defaults: b64encode(urandom(18)), no TTL.
                "lock:report",
                string(b"q1Jw0N3bO4m7kz+Z/fQ2aXc9", -1),
                KeyHint::None,
                RedisRecipe::PythonRedisLock,
                vec!["q1Jw0N3bO4m7kz+Z/fQ2aXc9"],
                vec![RedisFlag::NoExpiry],
            ),
            (
                // Configured: any id, here one the caller chose.
                "lock:report",
                string(b"my-worker", 5_000),
                KeyHint::PythonRedisLock,
                RedisRecipe::PythonRedisLock,
                vec!["my-worker"],
                vec![],
            ),
            (
                "job-lock:prod:nightly",
                string(b"ADDED:2026-11-22T12:00:00.000Z@batch-host-3:6f1d", 600_000),
                KeyHint::None,
                RedisRecipe::ShedLock,
                vec!["ADDED:2026-11-22T12:00:00.000Z@batch-host-3:6f1d"],
                vec![],
            ),
            (
                // ShedLock before 6.7.0: no uuid.
                "job-lock:prod:old",
                string(b"ADDED:2026-11-22T12:00:00.000Z@batch-host-3", 600_000),
                KeyHint::None,
                RedisRecipe::ShedLock,
                vec!["ADDED:2026-11-22T12:00:00.000Z@batch-host-3"],
                vec![],
            ),
            (
                "pool",
                string(b"2", -1),
                KeyHint::Semaphore { permits: 5 },
                RedisRecipe::RedissonSemaphore,
                vec![],
                vec![],
            ),
            (
                "latch",
                string(b"3", -1),
                KeyHint::Latch,
                RedisRecipe::RedissonCountDownLatch,
                vec![],
                vec![],
            ),
            (
                "bin",
                string(&[0xff, b'a', 0x00], 1000),
                KeyHint::None,
                RedisRecipe::TokenLock,
                vec!["\\xffa\u{0}"],
                vec![],
            ),
            (
                // Spring RedisLockRegistry, configured: the client id holds, PX 60 s by default.
                "orders:job-7",
                string(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11", 59_000),
                KeyHint::SpringLockRegistry,
                RedisRecipe::SpringRedisLock,
                vec!["0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"],
                vec![RedisFlag::WaitersNotVisible],
            ),
            (
                // Someone PERSISTed it: it can never free itself, and says so.
                "orders:job-8",
                string(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11", -1),
                KeyHint::SpringLockRegistry,
                RedisRecipe::SpringRedisLock,
                vec!["0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"],
                vec![RedisFlag::NoExpiry, RedisFlag::WaitersNotVisible],
            ),
            (
                // Under a configured registry but no client id: read as any other key.
                "orders:job-9",
                string(b"4f1c-token", 9_000),
                KeyHint::SpringLockRegistry,
                RedisRecipe::TokenLock,
                vec!["4f1c-token"],
                vec![],
            ),
            (
                // The same layout under a registry nobody configured: a token lock.
                "billing:job-7",
                string(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11", 59_000),
                KeyHint::None,
                RedisRecipe::TokenLock,
                vec!["0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"],
                vec![],
            ),
        ];
        for (key, read, hint, recipe, holders, flags) in cases {
            let lock = decode(key.as_bytes(), &read, &none, hint, NOW)
                .unwrap_or_else(|| panic!("{key}: no lock"));
            assert_eq!(lock.recipe, recipe, "{key}");
            assert_eq!(ids(&lock), holders, "{key}");
            assert_eq!(lock.flags, flags, "{key}");
        }
        let sem = decode(
            b"pool",
            &string(b"2", -1),
            &none,
            KeyHint::Semaphore { permits: 5 },
            NOW,
        )
        .expect("sem");
        assert_eq!(
            (sem.permits_available, sem.permits_total),
            (Some(2), Some(5))
        );
        assert_eq!(
            decode(b"gone", &KeyRead::missing(), &none, KeyHint::None, NOW),
            None
        );
    }

    #[test]
    fn redisson_hashes() {
        let none = Companions::default();
        let lock = decode(
            b"orders",
            &hash(&[("8a1f…-uuid:52", "3")], 28_500),
            &none,
            KeyHint::None,
            NOW,
        )
        .expect("rlock");
        assert_eq!(lock.recipe, RedisRecipe::RedissonLock);
        assert_eq!(lock.holders[0].reentrancy, Some(3));
        assert_eq!(lock.ttl_ms, Some(28_500));

        let rw_read = hash(&[("mode", "read"), ("u1:10", "1"), ("u2:11", "2")], 30_000);
        let lock = decode(b"doc", &rw_read, &none, KeyHint::None, NOW).expect("rw");
        assert_eq!(lock.recipe, RedisRecipe::RedissonReadWriteLock);
        assert_eq!(ids(&lock), vec!["u1:10", "u2:11"]);
        assert!(lock.holders.iter().all(|h| h.mode == Some(LockMode::Read)));
        let rw_write = hash(
            &[("mode", "write"), ("u1:10:write", "1"), ("u1:10", "1")],
            30_000,
        );
        let lock = decode(b"doc", &rw_write, &none, KeyHint::None, NOW).expect("rw");
        assert_eq!(ids(&lock), vec!["u1:10:write"]);
        assert_eq!(lock.holders[0].mode, Some(LockMode::Write));

        let fenced = Companions {
            fencing_counter: Some(string(b"17", -1)),
            ..Companions::default()
        };
        let lock = decode(
            b"pay",
            &hash(&[("u:1", "1")], 30_000),
            &fenced,
            KeyHint::None,
            NOW,
        )
        .expect("fenced");
        assert_eq!(lock.recipe, RedisRecipe::RedissonFencedLock);
        assert_eq!(lock.fencing_token, Some(17));
    }

    #[test]
    fn fair_lock_queue_and_leftovers() {
        let fair = Companions {
            fair_queue: Some(KeyRead {
                value: RedisValue::List(vec![b"u2:7".to_vec(), b"u3:9".to_vec()]),
                pttl_ms: -1,
            }),
            fair_timeouts: Some(KeyRead {
                value: RedisValue::ZSet(vec![
                    (b"u2:7".to_vec(), (NOW + 5_000) as f64),
                    (b"u3:9".to_vec(), (NOW + 10_000) as f64),
                ]),
                pttl_ms: -1,
            }),
            ..Companions::default()
        };
        let lock = decode(
            b"fair",
            &hash(&[("u1:5", "1")], 30_000),
            &fair,
            KeyHint::None,
            NOW,
        )
        .expect("fair");
        assert_eq!(lock.recipe, RedisRecipe::RedissonFairLock);
        assert_eq!(
            lock.waiters
                .iter()
                .map(|w| w.id.as_str())
                .collect::<Vec<_>>(),
            vec!["u2:7", "u3:9"]
        );
        assert_eq!(lock.waiters[0].deadline_ms, Some(NOW + 5_000));
        // The lock expired; the queue stayed.
        let lock =
            decode(b"fair", &KeyRead::missing(), &fair, KeyHint::None, NOW).expect("leftover");
        assert!(lock.holders.is_empty());
        assert_eq!(lock.flags, vec![RedisFlag::LeftoverQueue]);
        assert_eq!(lock.waiters.len(), 2);
    }

    #[test]
    fn permit_expirable_semaphore_counts_live_permits() {
        let c = Companions {
            permit_timeouts: Some(KeyRead {
                value: RedisValue::ZSet(vec![
                    (b"p-old".to_vec(), (NOW - 1) as f64),
                    (b"p-live".to_vec(), (NOW + 9_000) as f64),
                ]),
                pttl_ms: -1,
            }),
            ..Companions::default()
        };
        let lock = decode(b"permits", &string(b"1", -1), &c, KeyHint::None, NOW).expect("sem");
        assert_eq!(lock.recipe, RedisRecipe::RedissonPermitExpirableSemaphore);
        assert_eq!(ids(&lock), vec!["p-live"]);
        assert_eq!(lock.permits_available, Some(1));
    }

    #[test]
    fn companions_round_trip() {
        for name in [&b"orders"[..], b"lock:{order}", b"a{b}c"] {
            let [queue, timeout, token, permits] = companion_keys(name);
            for companion in [queue, timeout, token, permits] {
                assert!(
                    locks_of_companion(&companion).contains(&name.to_vec()),
                    "{}",
                    display_bytes(&companion)
                );
            }
        }
        assert_eq!(
            unlock_channel(b"orders"),
            b"redisson_lock__channel:{orders}"
        );
        assert!(locks_of_companion(b"lock:plain").is_empty());
    }

    #[test]
    fn redlock_majority_split_and_minority() {
        let m = |name: &str, holder: Option<&str>| RedlockMaster {
            master: name.into(),
            holder: holder.map(|h| (h.to_string(), Some(1000))),
        };
        let ok = combine_redlock(vec![m("a", Some("t1")), m("b", Some("t1")), m("c", None)]);
        assert_eq!(ok.majority_holder.as_deref(), Some("t1"));
        assert!(!ok.split && ok.minority_holders.is_empty());
        let split = combine_redlock(vec![m("a", Some("t1")), m("b", Some("t2")), m("c", None)]);
        assert_eq!(split.majority_holder, None);
        assert!(split.split);
        assert_eq!(split.minority_holders, vec!["t1", "t2"]);
        let stale = combine_redlock(vec![
            m("a", Some("t1")),
            m("b", Some("t1")),
            m("c", Some("t0")),
        ]);
        assert_eq!(stale.majority_holder.as_deref(), Some("t1"));
        assert_eq!(stale.minority_holders, vec!["t0"]);
    }

    #[test]
    fn guesses_say_why_and_structure_needs_no_guess() {
        let none = Companions::default();
        let guessed = decode(
            b"lock:r",
            &string(b"q1Jw0N3bO4m7kz+Z/fQ2aXc9", -1),
            &none,
            KeyHint::None,
            NOW,
        )
        .expect("lock");
        assert!(guessed.guess.is_some_and(|g| g.contains("base64")));
        // The signal list left by an unlock names the library without a guess, whatever the id.
        let signalled = Companions {
            signal_list: Some(KeyRead {
                value: RedisValue::List(vec![b"1".to_vec()]),
                pttl_ms: 900,
            }),
            ..Companions::default()
        };
        let lock = decode(
            b"lock:r",
            &string(b"custom", -1),
            &signalled,
            KeyHint::None,
            NOW,
        )
        .expect("lock");
        assert_eq!(
            (lock.recipe, lock.guess),
            (RedisRecipe::PythonRedisLock, None)
        );
        let sem = decode(b"pool", &string(b"3", -1), &none, KeyHint::None, NOW).expect("sem");
        assert!(sem.guess.is_some());
        let token =
            decode(b"lock:t", &string(b"abc", 1000), &none, KeyHint::None, NOW).expect("token");
        assert_eq!((token.recipe, token.guess), (RedisRecipe::TokenLock, None));
    }

    #[test]
    fn redisson_internal_strings_are_not_locks() {
        let none = Companions::default();
        for key in [
            &b"redisson_unlock_latch:{orders}:8f2a1c"[..],
            b"{doc}:6c1e-uuid:52:rwlock_timeout:1",
            b"lock:{doc}:6c1e-uuid:52:rwlock_timeout:2",
        ] {
            assert_eq!(
                decode(key, &string(b"1", 30_000), &none, KeyHint::None, NOW),
                None
            );
        }
    }

    #[test]
    fn fair_queue_entries_past_their_timeout_are_not_waiters() {
        let fair = Companions {
            fair_queue: Some(KeyRead {
                value: RedisValue::List(vec![b"gone:1".to_vec(), b"live:2".to_vec()]),
                pttl_ms: -1,
            }),
            fair_timeouts: Some(KeyRead {
                value: RedisValue::ZSet(vec![
                    (b"gone:1".to_vec(), (NOW - 1) as f64),
                    (b"live:2".to_vec(), (NOW + 9_000) as f64),
                ]),
                pttl_ms: -1,
            }),
            ..Companions::default()
        };
        let lock = decode(
            b"f",
            &hash(&[("h:1", "1")], 30_000),
            &fair,
            KeyHint::None,
            NOW,
        )
        .expect("fair");
        assert_eq!(
            lock.waiters
                .iter()
                .map(|w| w.id.as_str())
                .collect::<Vec<_>>(),
            vec!["live:2"]
        );
        // Only expired entries left, and no lock: nothing is waiting, nothing is held.
        let stale = Companions {
            fair_queue: Some(KeyRead {
                value: RedisValue::List(vec![b"gone:1".to_vec()]),
                pttl_ms: -1,
            }),
            fair_timeouts: Some(KeyRead {
                value: RedisValue::ZSet(vec![(b"gone:1".to_vec(), (NOW - 1) as f64)]),
                pttl_ms: -1,
            }),
            ..Companions::default()
        };
        assert_eq!(
            decode(b"f", &KeyRead::missing(), &stale, KeyHint::None, NOW),
            None
        );
        let plain = decode(
            b"f",
            &hash(&[("h:1", "1")], 30_000),
            &stale,
            KeyHint::None,
            NOW,
        )
        .expect("lock");
        assert_eq!(plain.recipe, RedisRecipe::RedissonFairLock);
        assert!(plain.waiters.is_empty());
    }

    #[test]
    fn redisson_names_add_braces_only_when_the_name_has_none() {
        assert_eq!(
            companion_keys(b"lock:{order}"),
            [
                b"redisson_lock_queue:lock:{order}".to_vec(),
                b"redisson_lock_timeout:lock:{order}".to_vec(),
                b"redisson_lock_token:lock:{order}".to_vec(),
                b"lock:{order}:timeout".to_vec(),
            ]
        );
        assert_eq!(
            unlock_channel(b"lock:{order}"),
            b"redisson_lock__channel:lock:{order}"
        );
        assert_eq!(rwlock_channel(b"doc"), b"redisson_rwlock:{doc}");
        assert_eq!(semaphore_channel(b"a{b}"), b"redisson_sc:a{b}");
        assert_eq!(
            latch_channel(b"l"),
            b"redisson_countdownlatch__channel__{l}"
        );
        assert_eq!(
            locks_of_companion(b"redisson_lock_queue:lock:{order}"),
            vec![b"lock:{order}".to_vec()]
        );
        assert_eq!(
            locks_of_companion(b"redisson_lock_queue:{x}"),
            vec![b"x".to_vec(), b"{x}".to_vec()]
        );
        assert_eq!(
            locks_of_companion(b"lock:{order}:timeout"),
            vec![b"lock:{order}".to_vec()]
        );
        assert!(locks_of_companion(b"plain:timeout").is_empty());
        // Slots: braced names keep their companions in their slot; a stray brace does not.
        assert!(companions_share_slot(b"orders"));
        assert!(companions_share_slot(b"lock:{order}"));
        assert!(!companions_share_slot(b"a{b"));
        assert_eq!(hash_slot(b"123456789"), 12739);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"foo{}{bar}"), hash_slot(b"foo{}{bar}"));
    }

    #[test]
    fn permit_ids_of_sixteen_raw_bytes_show_as_hex() {
        let raw: Vec<u8> = (0u8..16).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        let c = Companions {
            permit_timeouts: Some(KeyRead {
                value: RedisValue::ZSet(vec![(raw.clone(), (NOW + 9_000) as f64)]),
                pttl_ms: -1,
            }),
            ..Companions::default()
        };
        let lock = decode(b"permits", &string(b"1", -1), &c, KeyHint::None, NOW).expect("sem");
        let shown: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(ids(&lock), vec![shown.as_str()]);
    }

    #[test]
    fn redisson_redlock_masters_agree_on_the_thread() {
        assert_eq!(
            redisson_redlock_holder("1b4e28ba-2fa1-11d2-883f-0016d3cca427:52"),
            "*:52"
        );
        assert_eq!(redisson_redlock_holder("token"), "token");
        assert_eq!(redisson_redlock_holder("a:b"), "a:b");
    }

    fn zset(members: &[(&str, i64)], pttl: i64) -> KeyRead {
        KeyRead {
            value: RedisValue::ZSet(
                members
                    .iter()
                    .map(|(m, s)| (m.as_bytes().to_vec(), *s as f64))
                    .collect(),
            ),
            pttl_ms: pttl,
        }
    }

    #[test]
    fn redis_semaphore_members_are_holders_with_their_scores() {
        let none = Companions::default();
        // Two holders, the newest written 2 s ago, the key PEXPIREd to 10 s then: lockTimeout
        // is 10 s, so the older entry (12 s ago) is stale.
        let read = zset(
            &[
                ("0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11", NOW - 12_000),
                ("5e1c2f0a-1b2c-4d3e-8f4a-5b6c7d8e9f00", NOW - 2_000),
            ],
            8_000,
        );
        let lock = decode(b"semaphore:pool", &read, &none, KeyHint::None, NOW).expect("sem");
        assert_eq!(lock.recipe, RedisRecipe::NodeSemaphore);
        assert_eq!(lock.recipe.as_str(), "redis_semaphore");
        assert_eq!(lock.holders.len(), 2);
        let first = lock.holders[0].entry.expect("entry");
        assert_eq!(lock.holders[0].id, "0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11");
        assert_eq!(first.score_ms, NOW - 12_000);
        assert_eq!(first.expires_ms, Some(NOW - 2_000));
        assert!(first.stale);
        let second = lock.holders[1].entry.expect("entry");
        assert_eq!(second.expires_ms, Some(NOW + 8_000));
        assert!(!second.stale);
        assert_eq!(second.permits, None);
        assert_eq!(
            lock.flags,
            vec![RedisFlag::StaleMember, RedisFlag::WaitersNotVisible]
        );
        assert!(lock.guess.is_some());
        assert_eq!(lock.permits_total, None);
        // Configured with its limit: permits available count the live entries only.
        let lock = decode(
            b"semaphore:pool",
            &read,
            &none,
            KeyHint::Semaphore { permits: 2 },
            NOW,
        )
        .expect("sem");
        assert_eq!(lock.permits_total, Some(2));
        assert_eq!(lock.permits_available, Some(1));
        assert_eq!(lock.guess, None);
        // Behind an ioredis keyPrefix too; not elsewhere, nor with scores that are no instants.
        assert!(decode(b"app:semaphore:pool", &read, &none, KeyHint::None, NOW).is_some());
        // Elsewhere, past instants read as a token set's expired members: no holder.
        let elsewhere = decode(b"pool", &read, &none, KeyHint::None, NOW).expect("token set");
        assert_eq!(elsewhere.recipe, RedisRecipe::TokenZset);
        assert!(elsewhere.holders.is_empty());
        let counts = zset(&[("a", 1), ("b", 2)], -1);
        assert!(decode(b"semaphore:pool", &counts, &none, KeyHint::None, NOW).is_none());
        assert!(decode(b"pool", &counts, &none, KeyHint::None, NOW).is_none());
    }

    #[test]
    fn token_zsets_show_a_writer_or_readers_with_their_expiries() {
        let none = Companions::default();
        // Symfony Lock's write lock: its token and the marker, scored alike.
        let exp = NOW + 30_000;
        let write = zset(&[("Jw2g6LI9", exp), ("__write__", exp)], 30_000);
        let lock = decode(b"report:daily", &write, &none, KeyHint::None, NOW).expect("write");
        assert_eq!(lock.recipe, RedisRecipe::TokenZset);
        assert_eq!(lock.holders.len(), 1);
        assert_eq!(lock.holders[0].id, "Jw2g6LI9");
        assert_eq!(lock.holders[0].mode, Some(LockMode::Write));
        assert_eq!(lock.holders[0].entry.and_then(|e| e.expires_ms), Some(exp));
        assert_eq!(lock.ttl_ms, Some(30_000));
        assert_eq!(lock.flags, vec![RedisFlag::WaitersNotVisible]);
        // Two readers with their own expiries, and one whose expiry passed (the library's next
        // call drops it): two holders, both readers.
        let read = zset(
            &[
                ("old", NOW - 5),
                ("UTyB5Nx", NOW + 30_000),
                ("II9af5Y", NOW + 60_000),
            ],
            60_000,
        );
        let lock = decode(b"report:daily", &read, &none, KeyHint::None, NOW).expect("read");
        let ids: Vec<&str> = lock.holders.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["UTyB5Nx", "II9af5Y"]);
        assert!(lock.holders.iter().all(|h| h.mode == Some(LockMode::Read)));
        // A marker whose expiry passed marks nobody a writer.
        let lapsed = zset(&[("__write__", NOW - 1), ("r", NOW + 5_000)], 5_000);
        let lock = decode(b"k", &lapsed, &none, KeyHint::None, NOW).expect("lapsed");
        assert_eq!(lock.holders[0].mode, Some(LockMode::Read));
        // DistributedLock.Redis's semaphore: ids <machine>_<pid>_<hex>, scores with a
        // fraction of a ms; holders without a mode, a guess until configured.
        let sem = KeyRead {
            value: RedisValue::ZSet(vec![
                (
                    b"WEB01_4242_0f8fad5bd9cb469fa16570867728950e".to_vec(),
                    (NOW + 30_000) as f64 + 0.375,
                ),
                (
                    b"WEB02_77_1f8fad5bd9cb469fa16570867728950e".to_vec(),
                    (NOW + 20_000) as f64 + 0.5,
                ),
            ]),
            pttl_ms: 90_000,
        };
        let lock = decode(b"pool", &sem, &none, KeyHint::None, NOW).expect("semaphore");
        assert_eq!(lock.holders.len(), 2);
        assert!(lock.holders.iter().all(|h| h.mode.is_none()));
        assert_eq!(
            lock.holders[0].entry.map(|e| e.score_ms),
            Some(NOW + 30_000)
        );
        assert!(lock.guess.is_some());
        let lock = decode(b"pool", &sem, &none, KeyHint::Semaphore { permits: 3 }, NOW)
            .expect("configured");
        assert_eq!(
            (lock.permits_total, lock.permits_available),
            (Some(3), Some(1))
        );
        assert!(lock.guess.is_none());
        // DistributedLock's waiting writer: no holder, one waiter.
        let waiting = KeyRead {
            value: RedisValue::String(
                b"WEB01_4242_0f8fad5bd9cb469fa16570867728950e_WRITERWAITING".to_vec(),
            ),
            pttl_ms: 30_000,
        };
        let lock = decode(b"orders.writer", &waiting, &none, KeyHint::None, NOW).expect("writer");
        assert!(lock.holders.is_empty());
        assert_eq!(lock.waiters.len(), 1);
        assert_eq!(
            lock.waiters[0].id,
            "WEB01_4242_0f8fad5bd9cb469fa16570867728950e"
        );
        // No TTL on the key: said so.
        let forever = zset(&[("t", NOW + 5_000)], -1);
        let lock = decode(b"k", &forever, &none, KeyHint::None, NOW).expect("forever");
        assert!(lock.flags.contains(&RedisFlag::NoExpiry));
    }

    #[test]
    fn redis_multi_semaphore_permits_group_into_one_holder() {
        let none = Companions::default();
        let t = NOW - 1_000;
        let read = zset(
            &[
                ("4f1e_0", t),
                ("4f1e_1", t),
                ("4f1e_2", t),
                ("worker_7", t),
                ("solo", t),
                ("half_0", t),
                ("half_2", t),
            ],
            9_000,
        );
        let lock = decode(b"semaphore:big", &read, &none, KeyHint::None, NOW).expect("sem");
        assert_eq!(lock.recipe, RedisRecipe::NodeMultiSemaphore);
        let shown: Vec<(&str, Option<u32>)> = lock
            .holders
            .iter()
            .map(|h| (h.id.as_str(), h.entry.and_then(|e| e.permits)))
            .collect();
        // `worker_7` and `half_*` are no 0..p-1 run: each member is its own holder.
        assert_eq!(
            shown,
            vec![
                ("4f1e", Some(3)),
                ("worker_7", None),
                ("solo", None),
                ("half_0", None),
                ("half_2", None)
            ]
        );
        let lock = decode(
            b"semaphore:big",
            &read,
            &none,
            KeyHint::Semaphore { permits: 8 },
            NOW,
        )
        .expect("sem");
        assert_eq!(lock.permits_available, Some(1));
        // An id with underscores keeps them: split on the last one only.
        let read = zset(&[("a_b_0", t), ("a_b_1", t)], 9_000);
        let lock = decode(b"semaphore:u", &read, &none, KeyHint::None, NOW).expect("sem");
        assert_eq!(ids(&lock), vec!["a_b"]);
    }

    #[test]
    fn redis_semaphore_sets_cut_short_say_so() {
        let members: Vec<(String, i64)> = (0..=ZSET_READ_MAX)
            .map(|i| (format!("m{i}"), NOW - 100))
            .collect();
        let refs: Vec<(&str, i64)> = members.iter().map(|(m, s)| (m.as_str(), *s)).collect();
        let lock = decode(
            b"semaphore:huge",
            &zset(&refs, 9_000),
            &Companions::default(),
            KeyHint::None,
            NOW,
        )
        .expect("sem");
        assert_eq!(lock.holders.len(), ZSET_READ_MAX);
        assert!(lock.flags.contains(&RedisFlag::MembersCut));
    }

    #[test]
    fn redis_semaphore_mutexes_are_token_locks() {
        let lock = decode(
            b"mutex:report",
            &string(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11", 9_500),
            &Companions::default(),
            KeyHint::None,
            NOW,
        )
        .expect("mutex");
        assert_eq!(lock.recipe, RedisRecipe::TokenLock);
        assert_eq!(ids(&lock), vec!["0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"]);
        assert_eq!(lock.ttl_ms, Some(9_500));
    }

    #[test]
    fn spring_registries_are_told_by_their_configured_prefix() {
        let registries = ["orders", "a", "a:b", "lock"];
        assert_eq!(
            spring_registry(b"orders:job-7", &registries),
            Some(&b"orders"[..])
        );
        // The longest configured registry that fits: `a:b`'s lock `c`, not `a`'s `b:c`.
        assert_eq!(spring_registry(b"a:b:c", &registries), Some(&b"a:b"[..]));
        assert_eq!(spring_registry(b"a:bc", &registries), Some(&b"a"[..]));
        // A registry's key is followed by its `:`; an empty lock key is the library's too.
        assert_eq!(spring_registry(b"ordersx:1", &registries), None);
        assert_eq!(spring_registry(b"orders", &registries), None);
        assert_eq!(
            spring_registry(b"orders:", &registries),
            Some(&b"orders"[..])
        );
        assert_eq!(spring_registry::<&str>(b"orders:1", &[]), None);
        assert_eq!(
            spring_unlock_channels(b"orders", b"orders:job-7"),
            [
                b"orders-channel:orders:job-7".to_vec(),
                b"orders-channel".to_vec()
            ]
        );
        assert!(is_java_uuid(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"));
        // UUID.toString() is lowercase and dashed exactly so.
        assert!(!is_java_uuid(b"0B6F6D1E-9C1A-4D8E-A7A5-3F1F5E0D2C11"));
        assert!(!is_java_uuid(b"0b6f6d1e9c1a4d8ea7a53f1f5e0d2c11"));
        assert!(!is_java_uuid(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c1g"));
        // Spring's key under `lock` with a python-redis-lock signal list beside it: the
        // configuration wins.
        let signalled = Companions {
            signal_list: Some(KeyRead {
                value: RedisValue::List(vec![b"1".to_vec()]),
                pttl_ms: 900,
            }),
            ..Companions::default()
        };
        let lock = decode(
            b"lock:r",
            &string(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11", 60_000),
            &signalled,
            KeyHint::SpringLockRegistry,
            NOW,
        )
        .expect("lock");
        assert_eq!(lock.recipe, RedisRecipe::SpringRedisLock);
        assert_eq!(lock.recipe.as_str(), "spring_redis_lock");
        assert_eq!(lock.guess, None);
        assert!(lock.waiters.is_empty());
        assert!(waiter_channels(b"lock:r", lock.recipe).is_empty());
    }

    #[test]
    fn every_recipe_is_listed_once() {
        let names: std::collections::BTreeSet<&str> =
            RedisRecipe::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), RedisRecipe::ALL.len());
    }

    #[test]
    fn odd_bytes_never_panic() {
        let none = Companions::default();
        for value in [
            &b""[..],
            b"\xff\xfe",
            b"ADDED:",
            b"ADDED:@",
            b"99999999999999999999999",
            b"-1",
        ] {
            let _ = decode(b"\xff", &string(value, -1), &none, KeyHint::None, NOW);
            let _ = decode(value, &hash(&[("mode", "")], -1), &none, KeyHint::None, NOW);
        }
        assert_eq!(display_bytes(b"a\xffb"), "a\\xffb");
    }
}
