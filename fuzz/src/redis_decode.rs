//! `redis_decode`: a key of any bytes, read as every Redis type with any PTTL, with any companions
//! (fair queue and timeouts, fencing counter, permit timeouts, python-redis-lock signal list),
//! under every configuration hint and any clock, through `redis::decode` and the key-name helpers.
//!
//! Checks, besides "no panic":
//! * `hash_slot` < 16384 for the key and each companion; every companion of a key names the key
//!   back (`locks_of_companion(c)` contains it for each `c` in `companion_keys`);
//! * a Redisson-internal key never decodes; decoding twice gives the same lock;
//! * the lock's path (`display_bytes(key)`) and every holder and waiter id read back to the raw
//!   bytes they came from through `parse_display_bytes` (the admin router releases by them);
//! * waiters are exactly the fair queue (or, without a queue, the timeout set) in order, minus
//!   entries whose deadline is at or before now, each with its deadline;
//! * holders are the value's, the hash's fields or the live permits, by recipe; TTL, flags,
//!   permits and guesses agree with the read and the hint;
//! * a sorted set under `semaphore:` (redis-semaphore) is a lock only with epoch-ms scores, and
//!   then every member is one holder's (a MultiSemaphore's `<id>_<i>` grouped into `<id>`, its
//!   permits counted), each holder's id reads back to its member or group, stale entries are
//!   flagged and never counted against a configured limit;
//! * with the Spring `RedisLockRegistry` keys of the input configured, the key takes the hint
//!   the collector gives it (`spring_registry`: the longest configured registry key followed by
//!   `:` that starts it; every registry `spring_registries_of` names fits, and none fits when
//!   none is named), and the unlock channels are `<registry>-channel:<key>` and
//!   `<registry>-channel`; a string holding `UUID.toString()` under a configured registry is
//!   `spring_redis_lock` held by that value and flagged `waiters_not_visible`, and no key is
//!   one without the configuration.

use arbitrary::Arbitrary;
use lockscope_model::redis::{
    companion_keys, companions_share_slot, decode, display_bytes, hash_slot, is_java_uuid,
    is_node_semaphore_key, is_redisson_internal, locks_of_companion, parse_display_bytes,
    signal_list_key, spring_registries_of, spring_registry, spring_unlock_channels,
    waiter_channels, Companions, KeyHint, KeyRead, RedisFlag, RedisLock, RedisRecipe, RedisValue,
    PTTL_MAX_MS, ZSET_READ_MAX,
};

use crate::{pick, Blob, Text};

/// Epoch ms the realistic clocks count from (2026-11-18).
pub const NOW_BASE: i64 = 1_795_000_000_000;

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Input {
    pub key: Name,
    pub read: Read,
    pub fair_queue: Option<Read>,
    pub fair_timeouts: Option<Read>,
    pub fencing_counter: Option<Read>,
    pub permit_timeouts: Option<Read>,
    pub signal_list: Option<Read>,
    pub hint: Hint,
    /// The source's `spring_lock_registries`.
    pub spring_registries: Vec<Registry>,
    pub now: Clock,
}

/// A configured Spring `RedisLockRegistry` key: one of [`REGISTRIES`] or any bytes.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Registry {
    Known(u8),
    Raw(Blob),
}

/// Registry keys, overlapping ones (`a` and `a:b`) and prefixes of [`KEYS`] among them.
pub const REGISTRIES: &[&[u8]] = &[
    b"orders",
    b"a",
    b"a:b",
    b"lock",
    b"job-lock:prod",
    b"semaphore",
    b"",
];

impl Registry {
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Registry::Known(i) => pick(REGISTRIES, *i).to_vec(),
            Registry::Raw(Blob(b)) => b.clone(),
        }
    }
}

impl Input {
    /// The registry keys configured.
    pub fn registries(&self) -> Vec<Vec<u8>> {
        self.spring_registries.iter().map(Registry::bytes).collect()
    }

    /// The hint the collector gives the key (`RedisSpec::hint`): semaphores, latches and
    /// python-redis-lock patterns first, then a Spring registry the key is under.
    pub fn key_hint(&self) -> KeyHint {
        match self.hint {
            Hint::None if spring_registry(&self.key.bytes(), &self.registries()).is_some() => {
                KeyHint::SpringLockRegistry
            }
            hint => hint.hint(),
        }
    }
}

/// A key name: one of [`KEYS`] or any bytes.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Name {
    Known(u8),
    Raw(Blob),
}

/// Real key names from `shared/LOCK_LAYOUTS.md`, and a few odd ones.
pub const KEYS: &[&[u8]] = &[
    b"orders",
    b"lock:orders",
    b"lock:{order}",
    b"lock:report",
    b"job-lock:prod:nightly",
    b"fair",
    b"doc",
    b"pool",
    b"latch",
    b"permits",
    b"a{b",
    b"a{b}c",
    b"{x}",
    b"redisson_unlock_latch:{orders}:8f2a1c",
    b"{doc}:6c1e-uuid:52:rwlock_timeout:1",
    b"redisson_lock_queue:{x}",
    b"lock:{doc}:timeout",
    b"bin\xff\x00",
    b"semaphore:pool",
    b"app:semaphore:jobs",
    b"orders:job-7",
    b"a:b:c",
    b"orders:",
];

impl Name {
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Name::Known(i) => pick(KEYS, *i).to_vec(),
            Name::Raw(Blob(b)) => b.clone(),
        }
    }
}

/// One key as read: its value and PTTL.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Read {
    pub value: Value,
    pub pttl: Pttl,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Value {
    Missing,
    String(Item),
    Hash(Vec<(Item, Item)>),
    List(Vec<Item>),
    ZSet(Vec<(Item, Score)>),
    Other(Text),
}

/// A value, hash field, list entry or zset member: one of [`ITEMS`] (so fields, queue entries
/// and timeout members meet) or any bytes.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Item {
    Known(u8),
    Raw(Blob),
}

/// Holder ids, values and counts real clients write, and a few odd ones.
pub const ITEMS: &[&[u8]] = &[
    b"8a1f3c2e-5b7d-4e6f-9a0b-1c2d3e4f5a6b:52",
    b"u2:7",
    b"u3:9",
    b"u1:10",
    b"u1:10:write",
    b"mode",
    b"read",
    b"write",
    b"1",
    b"3",
    b"17",
    b"0",
    b"-1",
    b"q1Jw0N3bO4m7kz+Z/fQ2aXc9",
    b"ADDED:2026-11-22T12:00:00.000Z@batch-host-3:6f1d",
    b"1795000005000",
    b"\xa5\x80\xcf\x1e\x6d\xbc\x2b\x4a\x99\xf8\x37\xd6\x65\x04\x93\x72",
    b"\\x41",
    b"",
    b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11",
    b"4f1e_0",
    b"4f1e_1",
    b"4f1e_2",
    b"worker_7",
];

impl Item {
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Item::Known(i) => pick(ITEMS, *i).to_vec(),
            Item::Raw(Blob(b)) => b.clone(),
        }
    }
}

/// A zset score: near now (deadlines), or any `f64` (NaN and infinities included).
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Score {
    FromNow(i32),
    Raw(f64),
}

impl Score {
    pub fn value(&self, now: i64) -> f64 {
        match self {
            Score::FromNow(d) => now.saturating_add(i64::from(*d)) as f64,
            Score::Raw(v) => *v,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Pttl {
    /// -1: no expiry.
    Persistent,
    /// -2: the key is gone.
    Gone,
    Ms(u32),
    Raw(i64),
}

impl Pttl {
    pub fn ms(&self) -> i64 {
        match self {
            Pttl::Persistent => -1,
            Pttl::Gone => -2,
            Pttl::Ms(v) => i64::from(*v),
            Pttl::Raw(v) => *v,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Arbitrary)]
pub enum Hint {
    None,
    Semaphore(u32),
    Latch,
    PythonRedisLock,
}

impl Hint {
    pub fn hint(self) -> KeyHint {
        match self {
            Hint::None => KeyHint::None,
            Hint::Semaphore(permits) => KeyHint::Semaphore { permits },
            Hint::Latch => KeyHint::Latch,
            Hint::PythonRedisLock => KeyHint::PythonRedisLock,
        }
    }
}

/// The aggregator's clock: a realistic instant, or any `i64`.
#[derive(Debug, Clone, Copy, PartialEq, Arbitrary)]
pub enum Clock {
    /// [`NOW_BASE`] plus this many ms.
    Around(u32),
    Raw(i64),
}

impl Clock {
    pub fn ms(self) -> i64 {
        match self {
            Clock::Around(d) => NOW_BASE + i64::from(d),
            Clock::Raw(v) => v,
        }
    }
}

impl Read {
    pub fn key_read(&self, now: i64) -> KeyRead {
        let value = match &self.value {
            Value::Missing => RedisValue::Missing,
            Value::String(v) => RedisValue::String(v.bytes()),
            Value::Hash(fields) => {
                RedisValue::Hash(fields.iter().map(|(f, v)| (f.bytes(), v.bytes())).collect())
            }
            Value::List(items) => RedisValue::List(items.iter().map(Item::bytes).collect()),
            Value::ZSet(members) => RedisValue::ZSet(
                members
                    .iter()
                    .map(|(m, s)| (m.bytes(), s.value(now)))
                    .collect(),
            ),
            Value::Other(Text(t)) => RedisValue::Other(t.clone()),
        };
        KeyRead {
            value,
            pttl_ms: self.pttl.ms(),
        }
    }
}

pub fn run(data: &[u8]) {
    if let Some(input) = crate::input::<Input>(data) {
        crate::show(&input);
        check(&input);
    }
}

/// Asserts that `shown` is `raw` displayed, and reads back to it.
fn assert_round_trip(what: &str, raw: &[u8], shown: &str) {
    assert_eq!(
        shown,
        display_bytes(raw),
        "{what}: not display_bytes of its raw bytes"
    );
    assert_eq!(
        parse_display_bytes(shown),
        raw,
        "{what} {shown:?} does not read back to its raw bytes"
    );
}

pub fn check(input: &Input) {
    let key = input.key.bytes();
    let now = input.now.ms();
    let read = input.read.key_read(now);
    let companion = |r: &Option<Read>| r.as_ref().map(|r| r.key_read(now));
    let companions = Companions {
        fair_queue: companion(&input.fair_queue),
        fair_timeouts: companion(&input.fair_timeouts),
        fencing_counter: companion(&input.fencing_counter),
        permit_timeouts: companion(&input.permit_timeouts),
        signal_list: companion(&input.signal_list),
    };
    let hint = input.key_hint();

    check_names(&key);
    check_spring_names(&key, &input.registries());

    let lock = decode(&key, &read, &companions, hint, now);
    assert_eq!(
        lock,
        decode(&key, &read, &companions, hint, now),
        "decode is not deterministic"
    );
    if is_redisson_internal(&key) {
        assert_eq!(lock, None, "a Redisson-internal key decoded as a lock");
        return;
    }
    let Some(lock) = lock else {
        check_no_lock(&key, &read, &companions, now);
        // What is not a lock is counted, unless gone or part of a lock (never a string or
        // hash: those always decode).
        let what = lockscope_model::redis::unrecognised(&key, &read);
        if matches!(read.value, RedisValue::Missing) {
            assert!(what.is_none(), "a missing key counted as unrecognised");
        }
        if let Some(what) = what {
            assert!(what.key.len() <= 256 * 4 + 3, "an unbounded key in the sample");
            assert!(what.head.len() <= 64 * 4 + 40, "an unbounded head in the sample");
        }
        return;
    };
    let _ = waiter_channels(&key, lock.recipe);
    // DistributedLock's waiting writer: the id before the marker waits, nobody holds.
    let writer_waiting = match &read.value {
        RedisValue::String(v) if lock.recipe == RedisRecipe::TokenLock && lock.holders.is_empty() => {
            let id = v
                .strip_suffix(lockscope_model::redis::WRITER_WAITING)
                .expect("a token lock without a holder is a waiting writer");
            assert!(key.ends_with(b".writer"), "a waiting writer off a .writer key");
            Some(id.to_vec())
        }
        _ => None,
    };
    match writer_waiting {
        Some(id) if expected_waiters(&companions, now).is_empty() => {
            assert_eq!(lock.waiters.len(), 1, "the waiting writer");
            assert_round_trip("waiting writer", &id, &lock.waiters[0].id);
        }
        _ => check_waiters(&lock, &companions, now),
    }
    check_holders(&lock, &read, &companions, hint, now);
}

/// The registry a key is under is the longest configured one it starts with, followed by `:`;
/// its unlock channels name it and the key.
fn check_spring_names(key: &[u8], registries: &[Vec<u8>]) {
    let fits = |r: &[u8]| key.len() > r.len() && key.starts_with(r) && key[r.len()] == b':';
    let all: Vec<&[u8]> = spring_registries_of(key, registries).collect();
    let want: Vec<&[u8]> = registries
        .iter()
        .map(Vec::as_slice)
        .filter(|r| fits(r))
        .collect();
    assert_eq!(
        all, want,
        "spring_registries_of is not the registries that fit"
    );
    match spring_registry(key, registries) {
        None => assert!(all.is_empty(), "a registry fits, none was named"),
        Some(registry) => {
            assert!(
                fits(registry),
                "{:?} does not start the key",
                display_bytes(registry)
            );
            assert!(
                all.iter().all(|r| r.len() <= registry.len()),
                "a longer registry fits"
            );
            let [per_key, old] = spring_unlock_channels(registry, key);
            let mut want_old = registry.to_vec();
            want_old.extend_from_slice(b"-channel");
            assert_eq!(old, want_old);
            let mut want_per_key = want_old;
            want_per_key.push(b':');
            want_per_key.extend_from_slice(key);
            assert_eq!(per_key, want_per_key);
        }
    }
}

fn check_names(key: &[u8]) {
    assert!(hash_slot(key) < 16384);
    for c in companion_keys(key) {
        assert!(hash_slot(&c) < 16384);
        assert!(
            locks_of_companion(&c).iter().any(|k| k == key),
            "companion {:?} of {:?} does not name it back (names {:?})",
            display_bytes(&c),
            display_bytes(key),
            locks_of_companion(&c)
                .iter()
                .map(|k| display_bytes(k))
                .collect::<Vec<_>>()
        );
    }
    let _ = companions_share_slot(key);
    if let Some(signal) = signal_list_key(key) {
        assert!(signal.starts_with(b"lock-signal:"));
    }
    assert_round_trip("lock path", key, &display_bytes(key));
}

/// The fair-lock entries that are live waiters: the queue (or, when it is empty or absent, the
/// timeout set's members) in order, without those whose deadline is at or before now; each with
/// its deadline (the last score of that member, as the zset holds one per member).
fn expected_waiters(companions: &Companions, now: i64) -> Vec<(Vec<u8>, Option<i64>)> {
    let timeouts: &[(Vec<u8>, f64)] = match companions.fair_timeouts.as_ref().map(|r| &r.value) {
        Some(RedisValue::ZSet(members)) => members,
        _ => &[],
    };
    let deadline = |id: &[u8]| {
        timeouts
            .iter()
            .rev()
            .find(|(m, _)| m == id)
            .map(|(_, s)| *s as i64)
    };
    let queue: &[Vec<u8>] = match companions.fair_queue.as_ref().map(|r| &r.value) {
        Some(RedisValue::List(items)) => items,
        _ => &[],
    };
    let order: Vec<&Vec<u8>> = if queue.is_empty() {
        timeouts.iter().map(|(m, _)| m).collect()
    } else {
        queue.iter().collect()
    };
    order
        .into_iter()
        .map(|id| (id.clone(), deadline(id)))
        .filter(|(_, d)| d.is_none_or(|d| d > now))
        .collect()
}

fn check_no_lock(key: &[u8], read: &KeyRead, companions: &Companions, now: i64) {
    match &read.value {
        RedisValue::Missing | RedisValue::Other(_) => assert!(
            expected_waiters(companions, now).is_empty(),
            "live fair-queue entries without the lock: expected a leftover queue"
        ),
        RedisValue::List(_) => {}
        RedisValue::ZSet(members) => {
            // Not a redis-semaphore set: elsewhere, empty, beside a fair queue, or a score
            // that is no epoch-ms instant (within 20 years of now).
            const TWENTY_YEARS_MS: i64 = 20 * 365 * 24 * 3600 * 1000;
            let instants = members.iter().all(|(_, s)| {
                s.is_finite()
                    && s.fract() == 0.0
                    && s.abs() < 9.0e15
                    && (*s as i64)
                        .checked_sub(now)
                        .and_then(i64::checked_abs)
                        .is_some_and(|d| d < TWENTY_YEARS_MS)
            });
            let fair = companions.fair_queue.is_some() || companions.fair_timeouts.is_some();
            assert!(
                !is_node_semaphore_key(key) || members.is_empty() || !instants || fair,
                "a redis-semaphore set of instants decoded as nothing"
            );
        }
        RedisValue::String(_) | RedisValue::Hash(_) => {
            panic!("a string or hash under a lock key decoded as nothing")
        }
    }
}

fn check_waiters(lock: &RedisLock, companions: &Companions, now: i64) {
    for w in &lock.waiters {
        if let Some(d) = w.deadline_ms {
            assert!(
                d > now,
                "waiter {:?} past its deadline {d} ≤ now {now}",
                w.id
            );
        }
    }
    let expected = expected_waiters(companions, now);
    let got: Vec<(&str, Option<i64>)> = lock
        .waiters
        .iter()
        .map(|w| (w.id.as_str(), w.deadline_ms))
        .collect();
    let want: Vec<(String, Option<i64>)> = expected
        .iter()
        .map(|(id, d)| (display_bytes(id), *d))
        .collect();
    let want: Vec<(&str, Option<i64>)> = want.iter().map(|(id, d)| (id.as_str(), *d)).collect();
    assert_eq!(
        got, want,
        "waiters are not the live fair-queue entries in order"
    );
    for ((raw, _), w) in expected.iter().zip(&lock.waiters) {
        assert_round_trip("waiter id", raw, &w.id);
    }
}

fn check_holders(
    lock: &RedisLock,
    read: &KeyRead,
    companions: &Companions,
    hint: KeyHint,
    now: i64,
) {
    // A TTL counts for at most a century (`PEXPIREAT 9223372036854775807` is valid Redis).
    let ttl = (read.pttl_ms >= 0).then(|| read.pttl_ms.min(PTTL_MAX_MS));
    if lock.flags.contains(&RedisFlag::NoExpiry) {
        assert_eq!(lock.ttl_ms, None, "no_expiry with a TTL");
    }
    if lock.guess.is_some() {
        // A Spring registry names only the client-id strings under it: anything else there is
        // read (and guessed at) as without it.
        assert!(
            matches!(hint, KeyHint::None | KeyHint::SpringLockRegistry),
            "a guess although configuration named the lock"
        );
    }
    if lock.recipe == RedisRecipe::SpringRedisLock {
        assert_eq!(
            hint,
            KeyHint::SpringLockRegistry,
            "Spring's without its registry"
        );
    }
    match lock.permits_total {
        Some(total) => assert_eq!(hint, KeyHint::Semaphore { permits: total }),
        None => assert!(
            !matches!(hint, KeyHint::Semaphore { .. })
                || lock.recipe != RedisRecipe::RedissonSemaphore
        ),
    }
    match &read.value {
        RedisValue::Missing | RedisValue::Other(_) => {
            assert_eq!(lock.recipe, RedisRecipe::RedissonFairLock);
            assert_eq!(lock.flags, vec![RedisFlag::LeftoverQueue]);
            assert!(lock.holders.is_empty() && !lock.waiters.is_empty());
        }
        RedisValue::String(value) => {
            assert_eq!(lock.ttl_ms, ttl, "string lock TTL is not its PTTL");
            let permits = matches!(
                companions.permit_timeouts.as_ref().map(|r| &r.value),
                Some(RedisValue::ZSet(_))
            );
            if hint == KeyHint::SpringLockRegistry && is_java_uuid(value) && !permits {
                assert_eq!(
                    lock.recipe,
                    RedisRecipe::SpringRedisLock,
                    "a client id under a configured registry"
                );
            }
            check_string_holders(lock, value, companions, now);
        }
        RedisValue::Hash(fields) => {
            assert_eq!(lock.ttl_ms, ttl, "hash lock TTL is not its PTTL");
            for h in &lock.holders {
                let raw = fields
                    .iter()
                    .map(|(f, _)| f)
                    .find(|f| display_bytes(f) == h.id)
                    .unwrap_or_else(|| panic!("holder {:?} is no field of the hash", h.id));
                assert_round_trip("hash holder", raw, &h.id);
            }
            if lock.recipe == RedisRecipe::RedissonReadWriteLock {
                assert!(fields.iter().any(|(f, _)| f == b"mode"));
                assert!(lock
                    .holders
                    .iter()
                    .all(|h| h.mode.is_some() && h.id != "mode"));
            } else {
                assert_eq!(
                    lock.holders.len(),
                    fields.len(),
                    "a hash field is not a holder"
                );
            }
        }
        RedisValue::ZSet(members) if lock.recipe == RedisRecipe::TokenZset => {
            check_token_zset(lock, members, read, now)
        }
        RedisValue::ZSet(members) => check_node_semaphore(lock, members, read, hint, now),
        RedisValue::List(_) => panic!("a list decoded as a lock"),
    }
}

/// A token set: every holder a member (never the write marker) whose score, floored, is its
/// expiry and after now; a writer only while the marker is live, and then alone.
fn check_token_zset(lock: &RedisLock, members: &[(Vec<u8>, f64)], read: &KeyRead, now: i64) {
    let ttl = (read.pttl_ms >= 0).then(|| read.pttl_ms.min(PTTL_MAX_MS));
    assert_eq!(lock.ttl_ms, ttl, "a token set's TTL is not its PTTL");
    let members = &members[..members.len().min(ZSET_READ_MAX)];
    let writers = lock
        .holders
        .iter()
        .filter(|h| h.mode == Some(lockscope_model::wire::LockMode::Write))
        .count();
    for h in &lock.holders {
        let raw = parse_display_bytes(&h.id);
        assert_round_trip("token set holder", &raw, &h.id);
        assert_ne!(raw, lockscope_model::redis::WRITE_MARKER, "the marker shown as a holder");
        let entry = h.entry.expect("a token set holder without its score");
        assert!(entry.score_ms > now, "an expired token {:?} shown", h.id);
        assert_eq!(entry.expires_ms, Some(entry.score_ms));
        assert!(
            members
                .iter()
                .any(|(m, s)| *m == raw && s.floor() as i64 == entry.score_ms),
            "holder {:?} is no member scored so",
            h.id
        );
    }
    assert!(writers == 0 || writers == lock.holders.len(), "writers beside readers");
}

fn check_node_semaphore(
    lock: &RedisLock,
    members: &[(Vec<u8>, f64)],
    read: &KeyRead,
    hint: KeyHint,
    now: i64,
) {
    assert!(
        matches!(
            lock.recipe,
            RedisRecipe::NodeSemaphore | RedisRecipe::NodeMultiSemaphore
        ),
        "a zset decoded as {:?}",
        lock.recipe
    );
    let ttl = (read.pttl_ms >= 0).then(|| read.pttl_ms.min(PTTL_MAX_MS));
    assert_eq!(lock.ttl_ms, ttl, "semaphore TTL is not its PTTL");
    let members = &members[..members.len().min(ZSET_READ_MAX)];
    let mut permits = 0usize;
    for h in &lock.holders {
        let entry = h.entry.expect("a redis-semaphore holder without its entry");
        match entry.permits {
            None => {
                let raw = parse_display_bytes(&h.id);
                assert!(
                    members.iter().any(|(m, _)| *m == raw),
                    "holder {:?} is no member",
                    h.id
                );
                assert_round_trip("semaphore holder", &raw, &h.id);
                permits += 1;
            }
            Some(p) => {
                let raw = parse_display_bytes(&h.id);
                assert_round_trip("multi-semaphore holder", &raw, &h.id);
                for i in 0..p {
                    let mut m = raw.clone();
                    m.extend_from_slice(format!("_{i}").as_bytes());
                    assert!(
                        members.iter().any(|(x, _)| *x == m),
                        "permit {i} of {:?} missing",
                        h.id
                    );
                }
                permits += p as usize;
            }
        }
        assert_eq!(entry.stale, entry.expires_ms.is_some_and(|e| e <= now));
    }
    // Duplicate members cannot come from Redis, but the fuzzer makes them: each holder stands
    // for at least one member, and no member is left out.
    let mut distinct: Vec<&Vec<u8>> = members.iter().map(|(m, _)| m).collect();
    distinct.sort();
    distinct.dedup();
    assert!(permits >= distinct.len().min(1));
    assert!(
        permits <= members.len(),
        "{permits} permits from {} members",
        members.len()
    );
    let stale = lock
        .holders
        .iter()
        .any(|h| h.entry.is_some_and(|e| e.stale));
    assert_eq!(lock.flags.contains(&RedisFlag::StaleMember), stale);
    assert!(lock.flags.contains(&RedisFlag::WaitersNotVisible));
    assert!(
        lock.waiters.is_empty(),
        "nothing shows a redis-semaphore waiter"
    );
    if let KeyHint::Semaphore { permits: total } = hint {
        let live: i64 = lock
            .holders
            .iter()
            .filter_map(|h| h.entry)
            .filter(|e| !e.stale)
            .map(|e| i64::from(e.permits.unwrap_or(1)))
            .sum();
        assert_eq!(lock.permits_available, Some(i64::from(total) - live));
    } else if matches!(hint, KeyHint::None | KeyHint::SpringLockRegistry) {
        assert!(
            lock.guess.is_some(),
            "an unconfigured redis-semaphore is a guess"
        );
    }
}

fn check_string_holders(lock: &RedisLock, value: &[u8], companions: &Companions, now: i64) {
    match lock.recipe {
        RedisRecipe::TokenLock
        | RedisRecipe::SetnxNoTtl
        | RedisRecipe::PythonRedisLock
        | RedisRecipe::ShedLock => {
            if lock.recipe == RedisRecipe::TokenLock && lock.holders.is_empty() {
                // A waiting writer (checked with the waiters).
                return;
            }
            assert_eq!(lock.holders.len(), 1);
            assert_round_trip("string holder", value, &lock.holders[0].id);
        }
        RedisRecipe::SpringRedisLock => {
            assert!(is_java_uuid(value), "Spring's lock holds no client id");
            assert_eq!(lock.holders.len(), 1);
            assert_round_trip("client id", value, &lock.holders[0].id);
            assert!(lock.flags.contains(&RedisFlag::WaitersNotVisible));
            assert_eq!(
                lock.flags.contains(&RedisFlag::NoExpiry),
                lock.ttl_ms.is_none()
            );
            assert!(
                lock.guess.is_none(),
                "a configured registry's lock is no guess"
            );
        }
        RedisRecipe::RedissonPermitExpirableSemaphore => {
            let Some(RedisValue::ZSet(permits)) =
                companions.permit_timeouts.as_ref().map(|r| &r.value)
            else {
                panic!("a permit semaphore without its timeout zset");
            };
            let live: Vec<&Vec<u8>> = permits
                .iter()
                .filter(|(_, s)| *s as i64 > now)
                .map(|(id, _)| id)
                .collect();
            assert_eq!(
                lock.holders.len(),
                live.len(),
                "holders are not the live permits"
            );
            for (raw, h) in live.into_iter().zip(&lock.holders) {
                if raw.len() == 16 {
                    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                    assert_eq!(h.id, hex, "a 16-byte permit id is not shown as hex");
                } else {
                    assert_round_trip("permit id", raw, &h.id);
                }
            }
        }
        RedisRecipe::SetnxDeadline => {
            let d = lock
                .deadline_ms
                .expect("a SETNX deadline lock without its deadline");
            assert_eq!(
                lock.flags.contains(&RedisFlag::DeadlinePast),
                d < now,
                "deadline_past disagrees with the deadline"
            );
            assert!(lock.holders.is_empty());
        }
        RedisRecipe::RedissonSemaphore | RedisRecipe::RedissonCountDownLatch => {
            assert!(lock.holders.is_empty());
        }
        other => panic!("a string decoded as {other:?}"),
    }
}
