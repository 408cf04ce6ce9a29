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
//! * python-redis-lock (`lock:<n>` holding a 32-hex token) and ShedLock
//!   (`ADDED:<time>@<host>:<uuid>`, holder = host).
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
        }
    }
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
}

impl RedisFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            RedisFlag::NoExpiry => "no_expiry",
            RedisFlag::DeadlinePast => "deadline_past",
            RedisFlag::LeftoverQueue => "leftover_queue",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisHolder {
    /// Token, hash field, permit id or host name, escaped for display.
    pub id: String,
    pub reentrancy: Option<u64>,
    pub mode: Option<LockMode>,
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
}

impl RedisLock {
    fn new(recipe: RedisRecipe, ttl_ms: Option<i64>) -> Self {
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
        }
    }
}

/// Bytes as text: UTF-8 as is, anything else with `\xNN` escapes.
pub fn display_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
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

/// Redisson wraps a lock's name in braces inside companion key names.
fn braced(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 2);
    out.push(b'{');
    out.extend_from_slice(key);
    out.push(b'}');
    out
}

fn prefixed(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut out = prefix.to_vec();
    out.extend_from_slice(rest);
    out
}

/// The companion keys to read with `key`: fair queue, fair timeouts, fencing counter, permit
/// timeouts (in [`Companions`] order).
pub fn companion_keys(key: &[u8]) -> [Vec<u8>; 4] {
    let name = braced(key);
    [
        prefixed(b"redisson_lock_queue:", &name),
        prefixed(b"redisson_lock_timeout:", &name),
        prefixed(b"redisson_lock_token:", &name),
        {
            let mut k = name.clone();
            k.extend_from_slice(b":timeout");
            k
        },
    ]
}

/// `redisson_lock__channel:{key}`: where Redisson lock, fair lock and fenced lock clients wait
/// for an unlock (a fair lock's waiters each on `<channel>:<uuid>:<threadId>`).
pub fn unlock_channel(key: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_lock__channel:", &braced(key))
}

/// If `key` is a companion of another key, that key (a change to a companion re-reads its lock).
pub fn lock_of_companion(key: &[u8]) -> Option<Vec<u8>> {
    for prefix in [
        &b"redisson_lock_queue:"[..],
        b"redisson_lock_timeout:",
        b"redisson_lock_token:",
    ] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return unbrace(rest).map(<[u8]>::to_vec);
        }
    }
    if let Some(rest) = key.strip_suffix(b":timeout") {
        return unbrace(rest).map(<[u8]>::to_vec);
    }
    None
}

fn unbrace(text: &[u8]) -> Option<&[u8]> {
    text.strip_prefix(b"{")?.strip_suffix(b"}")
}

fn parse_i64(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// An integer that reads as an epoch-ms instant within ±20 years of `now_ms`.
fn as_epoch_ms(value: i64, now_ms: i64) -> Option<i64> {
    const TWENTY_YEARS_MS: i64 = 20 * 365 * 24 * 3600 * 1000;
    ((value - now_ms).abs() < TWENTY_YEARS_MS).then_some(value)
}

fn is_hex32(bytes: &[u8]) -> bool {
    bytes.len() == 32 && bytes.iter().all(|b| b.is_ascii_hexdigit())
}

/// `ADDED:<iso-time>@<hostname>:<uuid>` → hostname.
fn shedlock_host(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    let rest = text.strip_prefix("ADDED:")?;
    let (_, after) = rest.split_once('@')?;
    let host = after.rsplit_once(':').map_or(after, |(h, _)| h);
    Some(host.to_string())
}

fn ttl(pttl_ms: i64) -> Option<i64> {
    (pttl_ms >= 0).then_some(pttl_ms)
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
    let key_ttl = ttl(read.pttl_ms);
    let queue = list_of(&companions.fair_queue);
    let timeouts = zset_of(&companions.fair_timeouts);
    let fair = queue.is_some_and(|q| !q.is_empty()) || timeouts.is_some_and(|t| !t.is_empty());
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
        RedisValue::Hash(fields) => decode_hash(fields, key_ttl, companions, fair),
        RedisValue::List(_) | RedisValue::ZSet(_) => return None,
    };
    if fair {
        let deadlines: std::collections::HashMap<&[u8], f64> = timeouts
            .map(|t| t.iter().map(|(m, s)| (m.as_slice(), *s)).collect())
            .unwrap_or_default();
        let order: Vec<&Vec<u8>> = match queue {
            Some(q) if !q.is_empty() => q.iter().collect(),
            _ => timeouts
                .map(|t| t.iter().map(|(m, _)| m).collect())
                .unwrap_or_default(),
        };
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
                id: display_bytes(id),
                reentrancy: None,
                mode: None,
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
        KeyHint::None => {}
    }
    if let Some(host) = shedlock_host(value) {
        let mut lock = RedisLock::new(RedisRecipe::ShedLock, key_ttl);
        lock.holders.push(RedisHolder {
            id: host,
            reentrancy: None,
            mode: None,
        });
        return lock;
    }
    if let Some(deadline) = parse_i64(value).and_then(|v| as_epoch_ms(v, now_ms)) {
        // `SETNX` with the expiry written in the value: nobody is named as holder.
        let mut lock = RedisLock::new(RedisRecipe::SetnxDeadline, key_ttl);
        lock.deadline_ms = Some(deadline);
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
        return lock;
    }
    let recipe = if key.starts_with(b"lock:") && is_hex32(value) {
        RedisRecipe::PythonRedisLock
    } else if key_ttl.is_none() {
        RedisRecipe::SetnxNoTtl
    } else {
        RedisRecipe::TokenLock
    };
    let mut lock = RedisLock::new(recipe, key_ttl);
    if key_ttl.is_none() {
        lock.flags.push(RedisFlag::NoExpiry);
    }
    lock.holders.push(RedisHolder {
        id: display_bytes(value),
        reentrancy: None,
        mode: None,
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
        })
        .collect();
    if key_ttl.is_none() {
        lock.flags.push(RedisFlag::NoExpiry);
    }
    lock
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
    fn display_bytes_round_trip() {
        for raw in [
            &b"lock:plain"[..],
            b"lock:\xff\x00bin",
            "lock:\u{e9}t\u{e9}".as_bytes(),
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
                "lock:report",
                string(b"0123456789abcdef0123456789abcdef", 60_000),
                KeyHint::None,
                RedisRecipe::PythonRedisLock,
                vec!["0123456789abcdef0123456789abcdef"],
                vec![],
            ),
            (
                "job-lock:prod:nightly",
                string(b"ADDED:2026-11-22T12:00:00.000Z@batch-host-3:6f1d", 600_000),
                KeyHint::None,
                RedisRecipe::ShedLock,
                vec!["batch-host-3"],
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
        let [queue, timeout, token, permits] = companion_keys(b"orders");
        assert_eq!(queue, b"redisson_lock_queue:{orders}");
        assert_eq!(
            unlock_channel(b"orders"),
            b"redisson_lock__channel:{orders}"
        );
        assert_eq!(lock_of_companion(&queue).as_deref(), Some(&b"orders"[..]));
        assert_eq!(lock_of_companion(&timeout).as_deref(), Some(&b"orders"[..]));
        assert_eq!(lock_of_companion(&token).as_deref(), Some(&b"orders"[..]));
        assert_eq!(lock_of_companion(&permits).as_deref(), Some(&b"orders"[..]));
        assert_eq!(lock_of_companion(b"lock:plain"), None);
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
