//! Redisson: its naming rules, RLock, FairLock, ReadWriteLock, semaphores, CountDownLatch,
//! FencedLock and the deprecated RedissonRedLock, as the library's scripts do them. (See the parent module for what these clients follow.)

use super::*;

//
// Sources read (facts only; every script below is written here, not copied):
// redisson/redisson tag `redisson-4.7.0` (commit 0c286e86eb813a26222b3dc281f0ca368dd46561; the
// lock, semaphore and latch classes are unchanged at master 66863978b4a9, 2026-08-21) and, for
// the older behaviours, the tags named at each item. Paths are below
// `redisson/src/main/java/org/redisson/`.

/// Redisson's `prefixName(prefix, name)` (`RedissonObject.java`, 4.7.0): `prefix:{name}`, or
/// `prefix:name` when `name` already contains a `{`.
pub fn redisson_prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName(name, suffix)` (`RedissonObject.java`, 4.7.0): `{name}:suffix`, or
/// `name:suffix` when `name` already contains a `{`.
pub fn redisson_suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// `redisson_lock__channel:{name}`: the unlock channel of RLock and FencedLock, and the prefix of
/// the FairLock per-waiter channels (`RedissonLock.getChannelName`, 4.7.0).
pub fn rlock_channel(name: &str) -> String {
    redisson_prefix_name("redisson_lock__channel", name)
}

/// `redisson_lock_queue:{name}`: the FairLock waiter list (`RedissonFairLock`, 4.7.0).
pub fn fair_queue_key(name: &str) -> String {
    redisson_prefix_name("redisson_lock_queue", name)
}

/// `redisson_lock_timeout:{name}`: the FairLock waiter deadlines, a zset scored in epoch ms
/// (`RedissonFairLock`, 4.7.0).
pub fn fair_timeout_key(name: &str) -> String {
    redisson_prefix_name("redisson_lock_timeout", name)
}

/// `redisson_lock_token:{name}`: the FencedLock token counter (`RedissonFencedLock`, 4.7.0).
pub fn fenced_token_key(name: &str) -> String {
    redisson_prefix_name("redisson_lock_token", name)
}

/// `redisson_rwlock:{name}`: the channel both halves of a ReadWriteLock publish on
/// (`RedissonReadLock`/`RedissonWriteLock.getChannelName`, 4.7.0).
pub fn rw_channel(name: &str) -> String {
    redisson_prefix_name("redisson_rwlock", name)
}

/// `redisson_sc:{name}`: the channel of Semaphore and PermitExpirableSemaphore
/// (`RedissonSemaphore.getChannelName`, `RedissonPermitExpirableSemaphore`, 4.7.0).
pub fn semaphore_channel(name: &str) -> String {
    redisson_prefix_name("redisson_sc", name)
}

/// `{name}:timeout`: the PermitExpirableSemaphore's permit zset
/// (`suffixName(name, "timeout")`, `RedissonPermitExpirableSemaphore`, 4.7.0).
pub fn permit_timeout_key(name: &str) -> String {
    redisson_suffix_name(name, "timeout")
}

/// `redisson_countdownlatch__channel__{name}`: the CountDownLatch channel
/// (`RedissonCountDownLatch.getChannelName`, 4.7.0 and every 3.x). The braces are **always**
/// added, also around a name that has braces of its own (this is not `prefixName`):
/// `latch:{x}` gives `redisson_countdownlatch__channel__{latch:{x}}`, whose hash tag is
/// `latch:{x`, so channel and key then hash to different Cluster slots.
pub fn countdown_latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// `redisson_unlock_latch:{name}:<requestId>`: the transient string one unlock call writes
/// (Redisson ≥ 3.24.0, `RedissonBaseLock.getUnlockLatchName`, 4.7.0): `prefixName` of the lock
/// name, then `:` and the request id (32 hex characters). For a ReadWriteLock the name is the
/// ReadWriteLock's.
pub fn unlock_latch_key(name: &str, request_id: &str) -> String {
    format!(
        "{}:{request_id}",
        redisson_prefix_name("redisson_unlock_latch", name)
    )
}

/// `LockPubSub.UNLOCK_MESSAGE` (4.7.0): published by RLock, FairLock, FencedLock and read
/// unlocks; wakes one waiting thread.
pub const UNLOCK_MESSAGE: i64 = 0;
/// `LockPubSub.READ_UNLOCK_MESSAGE` (4.7.0): published by write unlocks and the write lock's
/// `forceUnlock`; wakes every waiting thread of the subscribing client.
pub const READ_UNLOCK_MESSAGE: i64 = 1;
/// `CountDownLatchPubSub.ZERO_COUNT_MESSAGE` (4.7.0): the count reached 0.
pub const LATCH_ZERO_COUNT_MESSAGE: i64 = 0;
/// `CountDownLatchPubSub.NEW_COUNT_MESSAGE` (4.7.0): a count was set, or the latch deleted.
pub const LATCH_NEW_COUNT_MESSAGE: i64 = 1;
/// The score PermitExpirableSemaphore gives a permit acquired without a lease
/// (`nonExpirableTimeout`, 4.7.0).
pub const PERMIT_NO_LEASE_SCORE: i64 = 922_337_203_685_477;
/// Redisson's default lock lease (`Config.lockWatchdogTimeout`, 4.7.0); the watchdog renews
/// every third of it.
pub const WATCHDOG_LEASE_MS: u64 = 30_000;

/// The command Redisson's scripts publish with: they receive it as an argument and run
/// `redis.call(ARGV[n], channel, message)` (`PublishSubscribeService.getPublishCommand`, since
/// 3.22.0; before that the scripts said `'publish'`, with the same effect as [`Self::Publish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishCommand {
    /// `PUBLISH`: standalone, Sentinel, and Cluster when sharding is off or unsupported.
    Publish,
    /// `SPUBLISH`: Redis Cluster 7+ with sharded pub/sub (3.22.0–3.28.x: always when the
    /// cluster supports it; 3.29.0+: `ClusterServersConfig.shardedSubscriptionMode`, default
    /// `AUTO`, on when `PUBSUB SHARDNUMSUB` succeeds). Waiters then `SSUBSCRIBE`.
    SPublish,
}

impl PublishCommand {
    /// `PUBLISH` / `SPUBLISH`, as Redisson passes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PublishCommand::Publish => "PUBLISH",
            PublishCommand::SPublish => "SPUBLISH",
        }
    }

    /// How a waiter of a client publishing this way subscribes.
    pub fn waiter_kind(self) -> PubSubKind {
        match self {
            PublishCommand::Publish => PubSubKind::Plain,
            PublishCommand::SPublish => PubSubKind::Sharded,
        }
    }
}

/// Which FairLock scripts a client runs. Both variants start every script (tryLock, unlock,
/// forceUnlock) with the same stale-waiter cleanup: while the queue's head has a deadline
/// (`redisson_lock_timeout` score) `<=` the caller's `System.currentTimeMillis()`, remove it
/// from the zset and pop it from the list (this has been so in every 3.x FairLock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairLockScripts {
    /// 3.45.0 … 4.7.0: a head without a score stops the cleanup; a thread already queued is
    /// told `max(0, PTTL of the lock)`; a new waiter's deadline builds on the last waiter's only
    /// when that one has a score.
    Current,
    /// 3.11.1 … 3.31.x: the cleanup reads `tonumber(ZSCORE)` unguarded, so a head without a
    /// score makes the script fail ("attempt to compare nil with number", fixed in 3.32.0,
    /// commit 703f6f5); a thread already queued is told `deadline - wait - now`.
    Before3_32,
}

/// The Redisson behaviour a [`RedissonClient`] reproduces where Redisson changed across
/// versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedissonProfile {
    /// Unlocks write `redisson_unlock_latch:{name}:<requestId>` (3.24.0+, commit 2669597).
    pub unlock_latch: bool,
    /// `PUBLISH` or `SPUBLISH` in every script that notifies waiters.
    pub publish: PublishCommand,
    /// FairLock script generation.
    pub fair: FairLockScripts,
}

impl RedissonProfile {
    /// Redisson 4.7.0 on a standalone server (or a Cluster without sharded pub/sub).
    pub const V4_7: RedissonProfile = RedissonProfile {
        unlock_latch: true,
        publish: PublishCommand::Publish,
        fair: FairLockScripts::Current,
    };
    /// Redisson 4.7.0 on Redis Cluster 7+ with `shardedSubscriptionMode` AUTO (the default).
    pub const V4_7_SHARDED: RedissonProfile = RedissonProfile {
        publish: PublishCommand::SPublish,
        ..RedissonProfile::V4_7
    };
    /// Redisson 3.22.0–3.23.x without sharding (and, by effect, 3.11.1–3.21.x): no unlock
    /// latch, `PUBLISH`, the pre-3.32 FairLock scripts.
    pub const V3_23: RedissonProfile = RedissonProfile {
        unlock_latch: false,
        publish: PublishCommand::Publish,
        fair: FairLockScripts::Before3_32,
    };
}

impl Default for RedissonProfile {
    fn default() -> Self {
        RedissonProfile::V4_7
    }
}

/// The latch PX Redisson 4.7.0 (since 3.50.0) computes with default settings in
/// `RedissonBaseLock.unlockInnerAsync`: `(timeout + retryDelay.calcDelay(retryAttempts)) ×
/// retryAttempts` = `(3000 + 1000..=2000) × 4`, so 16 000..=20 000 ms (`EqualJitterDelay(1 s,
/// 2 s)` adds a random 0..=1000 ms to half of 2 s). 3.24.0–3.4x: `(3000 + 1500) × 3` =
/// 13 500 ms.
pub fn default_latch_px_ms() -> u64 {
    let r = random_bytes(2);
    let jitter = u64::from(u16::from_le_bytes([r[0], r[1]]) % 1001);
    (3000 + 1000 + jitter) * 4
}

/// One unlock call's identity (Redisson ≥ 3.24.0): the request id is
/// `ServiceManager.generateId()`, 16 random bytes as 32 hex characters, fresh per `unlock()`
/// call and reused by its retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnlockRequest {
    /// 32 hex characters.
    pub id: String,
    /// PX of the latch string.
    pub latch_px_ms: u64,
    /// Redisson DELs the latch as soon as the script answered (`RedissonBaseLock`
    /// `unlockInnerAsync`, a separate `DEL` after the reply). `false` leaves it to expire, as
    /// when the client dies between the two.
    pub delete_latch: bool,
}

impl Default for UnlockRequest {
    fn default() -> Self {
        Self::new()
    }
}

impl UnlockRequest {
    /// A fresh request id, the 4.7.0 default latch PX, latch deleted after the reply.
    pub fn new() -> UnlockRequest {
        UnlockRequest {
            id: random_token(),
            latch_px_ms: default_latch_px_ms(),
            delete_latch: true,
        }
    }

    /// The same request whose latch is left in place (until its PX).
    pub fn keeping_latch(mut self) -> UnlockRequest {
        self.delete_latch = false;
        self
    }
}

/// Fills a script template's unlock-latch placeholders: `@CHECK@` (a repeated request returns
/// the result its latch remembers), `@SET0@` / `@SET1@` (remember 0 = one re-entry released,
/// 1 = released). `slots = Some((k, a))` puts the latch in `KEYS[k]` and its PX in `ARGV[a]`;
/// `None` gives the pre-3.24 script.
fn fill_latch(template: &str, slots: Option<(usize, usize)>) -> String {
    let (check, set0, set1) = match slots {
        Some((k, a)) => (
            format!("local remembered = redis.call('get', KEYS[{k}])\nif remembered then return tonumber(remembered) end"),
            format!("redis.call('set', KEYS[{k}], 0, 'px', ARGV[{a}])"),
            format!("redis.call('set', KEYS[{k}], 1, 'px', ARGV[{a}])"),
        ),
        None => (String::new(), String::new(), String::new()),
    };
    template
        .replace("@CHECK@", &check)
        .replace("@SET0@", &set0)
        .replace("@SET1@", &set1)
}

/// The FairLock stale-waiter cleanup, comparing deadlines with `ARGV[now]` (epoch ms).
fn fair_cleanup(variant: FairLockScripts, now: usize) -> String {
    let read_deadline = match variant {
        // A head without a score ends the cleanup.
        FairLockScripts::Current => format!(
            "local deadline = redis.call('zscore', KEYS[3], head)\n\
             if deadline == false or tonumber(deadline) > tonumber(ARGV[{now}]) then break end"
        ),
        // A head without a score makes the comparison fail.
        FairLockScripts::Before3_32 => format!(
            "local deadline = tonumber(redis.call('zscore', KEYS[3], head))\n\
             if deadline > tonumber(ARGV[{now}]) then break end"
        ),
    };
    format!(
        "while true do\n\
         local head = redis.call('lindex', KEYS[2], 0)\n\
         if head == false then break end\n\
         {read_deadline}\n\
         redis.call('zrem', KEYS[3], head)\n\
         redis.call('lpop', KEYS[2])\n\
         end\n"
    )
}

/// All variants of one script, indexed by a small number (latch off/on, FairLock generation).
struct Variants(Vec<Script>);

impl Variants {
    fn get(&self, i: usize) -> &Script {
        &self.0[i]
    }
}

fn fair_index(profile: RedissonProfile) -> usize {
    match profile.fair {
        FairLockScripts::Current => 0,
        FairLockScripts::Before3_32 => 1,
    }
}

/// RLock acquire and re-entry (`RedissonLock.tryLockInnerAsync`, 4.7.0; unchanged through
/// 3.x). KEYS = [name]; ARGV = [leaseMs, `<uuid>:<threadId>`]. nil = acquired (the field counts
/// entries, PEXPIRE lease), else the holder's PTTL.
static RLOCK_TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return redis.call('pttl', KEYS[1])
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return nil",
    )
});

/// RLock unlock (`RedissonLock.unlockInnerAsync`, 4.7.0; without the latch as in 3.22.0–3.23.x,
/// tag redisson-3.23.5). KEYS = [name, channel, latch]; ARGV = [UNLOCK_MESSAGE, leaseMs, field,
/// publish command, latch PX]. nil = not held by field, 0 = one re-entry released (PEXPIRE
/// lease), 1 = released (DEL, publish `0`). Index 0: no latch, 1: latch.
static RLOCK_UNLOCK: LazyLock<Variants> = LazyLock::new(|| {
    let template = "@CHECK@
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    @SET0@
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
@SET1@
return 1";
    Variants(vec![
        Script::new(&fill_latch(template, None)),
        Script::new(&fill_latch(template, Some((3, 5)))),
    ])
});

/// RLock `forceUnlock` (`RedissonLock.forceUnlockAsync`, 4.7.0): unconditional DEL, and when a
/// hash was deleted, `0` on the channel. KEYS = [name, channel]; ARGV = [UNLOCK_MESSAGE,
/// publish command].
static RLOCK_FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('del', KEYS[1]) == 0 then return 0 end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1",
    )
});

/// The watchdog's renewal of one lock (`renewal/LockTask.java`, 4.7.0, which batches many
/// locks into one script; every `lease / 3`). KEYS = [name]; ARGV = [leaseMs, field].
static RLOCK_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return 0 end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1",
    )
});

/// FairLock `tryAcquire` with a wait (`RedissonFairLock.tryLockInnerAsync`, EVAL_LONG branch;
/// used by `lock()` and `tryLock(wait, …)`). KEYS = [name, queue, timeout zset]; ARGV =
/// [leaseMs, field, waitMs, nowMs]. Index by [`fair_index`].
static FAIR_TRY_LOCK: LazyLock<Variants> = LazyLock::new(|| {
    let build = |variant: FairLockScripts| {
        let queued_answer = match variant {
            FairLockScripts::Current => "return math.max(0, redis.call('pttl', KEYS[1]))",
            FairLockScripts::Before3_32 => "return mine - tonumber(ARGV[3]) - tonumber(ARGV[4])",
        };
        let last_deadline = match variant {
            FairLockScripts::Current => {
                "local lastDeadline = false
if last ~= false and last ~= ARGV[2] then lastDeadline = redis.call('zscore', KEYS[3], last) end"
            }
            FairLockScripts::Before3_32 => {
                "local lastDeadline = false
if last ~= false and last ~= ARGV[2] then lastDeadline = tonumber(redis.call('zscore', KEYS[3], last)) end"
            }
        };
        Script::new(&format!(
            "{cleanup}
local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (head == false or head == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), waiter)
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
local mine = redis.call('zscore', KEYS[3], ARGV[2])
if mine ~= false then
    {queued_answer}
end
local last = redis.call('lindex', KEYS[2], -1)
{last_deadline}
local wait
if lastDeadline ~= false then
    wait = tonumber(lastDeadline) - tonumber(ARGV[4])
else
    wait = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], wait + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return wait",
            cleanup = fair_cleanup(variant, 4)
        ))
    };
    Variants(vec![
        build(FairLockScripts::Current),
        build(FairLockScripts::Before3_32),
    ])
});

/// FairLock `tryLock()` without a wait (`RedissonFairLock.tryLockInnerAsync`,
/// EVAL_NULL_BOOLEAN branch): never queues. KEYS = [name, queue, timeout zset]; ARGV =
/// [leaseMs, field, nowMs, waitMs]. nil = acquired, 1 = not.
static FAIR_TRY_LOCK_ONCE: LazyLock<Variants> = LazyLock::new(|| {
    let build = |variant: FairLockScripts| {
        Script::new(&format!(
            "{cleanup}
local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (head == false or head == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[4]), waiter)
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return 1",
            cleanup = fair_cleanup(variant, 3)
        ))
    };
    Variants(vec![
        build(FairLockScripts::Current),
        build(FairLockScripts::Before3_32),
    ])
});

/// FairLock unlock (`RedissonFairLock.unlockInnerAsync`). KEYS = [name, queue, timeout zset,
/// channel, latch]; ARGV = [UNLOCK_MESSAGE, leaseMs, field, nowMs, publish command, latch PX].
/// Signals only the head waiter, on `<channel>:<head field>`. Index: `2 * fair_index + latch`.
static FAIR_UNLOCK: LazyLock<Variants> = LazyLock::new(|| {
    let template = |variant: FairLockScripts| {
        format!(
            "@CHECK@
{cleanup}
if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1]) end
    @SET1@
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    @SET0@
    return 0
end
redis.call('del', KEYS[1])
@SET1@
local head = redis.call('lindex', KEYS[2], 0)
if head ~= false then redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1]) end
return 1",
            cleanup = fair_cleanup(variant, 4)
        )
    };
    let mut scripts = Vec::new();
    for variant in [FairLockScripts::Current, FairLockScripts::Before3_32] {
        scripts.push(Script::new(&fill_latch(&template(variant), None)));
        scripts.push(Script::new(&fill_latch(&template(variant), Some((5, 6)))));
    }
    Variants(scripts)
});

/// FairLock `forceUnlock` (`RedissonFairLock.forceUnlockAsync`). KEYS = [name, queue, timeout
/// zset, channel]; ARGV = [UNLOCK_MESSAGE, nowMs, publish command]. Index by [`fair_index`].
static FAIR_FORCE_UNLOCK: LazyLock<Variants> = LazyLock::new(|| {
    let build = |variant: FairLockScripts| {
        Script::new(&format!(
            "{cleanup}
if redis.call('del', KEYS[1]) == 0 then return 0 end
local head = redis.call('lindex', KEYS[2], 0)
if head ~= false then redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1]) end
return 1",
            cleanup = fair_cleanup(variant, 2)
        ))
    };
    Variants(vec![
        build(FairLockScripts::Current),
        build(FairLockScripts::Before3_32),
    ])
});

/// A FairLock waiter giving up (`RedissonFairLock.acquireFailedAsync`, 4.7.0): everyone queued
/// behind it gets `wait` ms taken off their deadline, then it leaves the zset and the list.
/// KEYS = [queue, timeout zset]; ARGV = [field, waitMs].
static FAIR_ACQUIRE_FAILED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local queue = redis.call('lrange', KEYS[1], 0, -1)
local behind = false
for _, waiter in ipairs(queue) do
    if behind then
        redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), waiter)
    elseif waiter == ARGV[1] then
        behind = true
    end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])",
    )
});

/// Read lock acquire (`RedissonReadLock.tryLockInnerAsync`, 4.7.0). KEYS = [name,
/// `{name}:<uuid>:<tid>:rwlock_timeout`]; ARGV = [leaseMs, `<uuid>:<tid>`,
/// `<uuid>:<tid>:write`]. One `…:rwlock_timeout:<n>` string (value 1, PX lease) per entry.
static RW_READ_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
local mayRead = mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1)
if not mayRead then return redis.call('pttl', KEYS[1]) end
local entry = redis.call('hincrby', KEYS[1], ARGV[2], 1)
local timeoutKey = KEYS[2] .. ':' .. entry
redis.call('set', timeoutKey, 1)
redis.call('pexpire', timeoutKey, ARGV[1])
local left = redis.call('pttl', KEYS[1])
redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
return nil",
    )
});

/// Read unlock (`RedissonReadLock.unlockInnerAsync`, 4.7.0). KEYS = [name, channel,
/// timeoutPrefix, keyPrefix, latch]; ARGV = [UNLOCK_MESSAGE, field, publish command, latch PX].
/// Publishes `0` when the hash is deleted (and, as in Redisson, also when the hash was already
/// gone). Index 0: no latch, 1: latch.
static RW_READ_UNLOCK: LazyLock<Variants> = LazyLock::new(|| {
    let template = "@CHECK@
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    @SET1@
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if left == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (left + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local entries = tonumber(redis.call('hget', KEYS[1], field))
        if type(entries) == 'number' then
            for i = entries, 1, -1 do
                longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i))
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        @SET0@
        return 0
    end
    if mode == 'write' then
        @SET0@
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
@SET1@
return 1";
    Variants(vec![
        Script::new(&fill_latch(template, None)),
        Script::new(&fill_latch(template, Some((5, 4)))),
    ])
});

/// The read lock's watchdog for one thread (`renewal/ReadLockTask.java`, 4.7.0): the hash and
/// each of the thread's `…:rwlock_timeout:<n>` strings get PEXPIRE lease. KEYS = [name,
/// keyPrefix]; ARGV = [leaseMs, field].
static RW_READ_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local entries = redis.call('hget', KEYS[1], ARGV[2])
if entries == false then return 0 end
for i = tonumber(entries), 1, -1 do
    redis.call('pexpire', KEYS[2] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. i, ARGV[1])
end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1",
    )
});

/// Write lock acquire (`RedissonWriteLock.tryLockInnerAsync`, 4.7.0). KEYS = [name]; ARGV =
/// [leaseMs, `<uuid>:<tid>:write`]. Re-entry adds the lease to the remaining PTTL.
static RW_WRITE_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local left = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], left + tonumber(ARGV[1]))
    return nil
end
return redis.call('pttl', KEYS[1])",
    )
});

/// Write unlock (`RedissonWriteLock.unlockInnerAsync`, 4.7.0). KEYS = [name, channel, latch];
/// ARGV = [READ_UNLOCK_MESSAGE, leaseMs, field, publish command, latch PX]. Publishes `1` when
/// the hash is deleted; when the writer still holds read entries the hash stays with `mode`
/// back to `read` and nothing is published. Index 0: no latch, 1: latch.
static RW_WRITE_UNLOCK: LazyLock<Variants> = LazyLock::new(|| {
    let template = "@CHECK@
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
    @SET1@
    return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    @SET0@
    return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], ARGV[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
@SET1@
return 1";
    Variants(vec![
        Script::new(&fill_latch(template, None)),
        Script::new(&fill_latch(template, Some((3, 5)))),
    ])
});

/// `forceUnlock` of either half of a ReadWriteLock (`RedissonReadLock` /
/// `RedissonWriteLock.forceUnlockAsync`, 4.7.0): DEL only when `mode` is `ARGV[3]`, then the
/// message (read: `0`, write: `1`). KEYS = [name, channel]; ARGV = [message, publish command,
/// mode].
static RW_FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('hget', KEYS[1], 'mode') ~= ARGV[3] then return 0 end
redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1",
    )
});

/// `RedissonSemaphore.tryAcquireAsync0` (4.7.0). KEYS = [name]; ARGV = [permits]. No publish.
static SEMAPHORE_TRY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local available = redis.call('get', KEYS[1])
if available == false or tonumber(available) < tonumber(ARGV[1]) then return 0 end
redis.call('decrby', KEYS[1], ARGV[1])
return 1",
    )
});

/// `RedissonSemaphore.releaseAsync` (4.7.0). KEYS = [name, channel]; ARGV = [permits, publish
/// command]. Publishes the new number of available permits.
static SEMAPHORE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local available = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], available)",
    )
});

/// `trySetPermitsAsync` of RedissonSemaphore and RedissonPermitExpirableSemaphore (4.7.0).
/// KEYS = [name, channel]; ARGV = [permits, publish command]. Publishes the permits.
static SEMAPHORE_TRY_SET_PERMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1",
    )
});

/// `RedissonPermitExpirableSemaphore.tryAcquireAsync(ids, timeoutDate)` (4.7.0). KEYS = [name,
/// `{name}:timeout`, channel]; ARGV = [permits, deadline ms, now ms, no-lease score, publish
/// command, raw id…]. First gives back up to `permits` expired permits (score ≤ now; publishes
/// the new count when > 0), then takes the permits: one zset member per id (16 raw bytes),
/// score = deadline. Answers `OK`, `:<nearest deadline>` or nil.
static PERMIT_TRY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local freed = redis.call('incrby', KEYS[1], #expired)
    if tonumber(freed) > 0 then redis.call(ARGV[5], KEYS[3], freed) end
end
local available = redis.call('get', KEYS[1])
if available ~= false and tonumber(available) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    for i = 6, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
    return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] ~= nil and first[2] ~= ARGV[4] then return ':' .. tostring(first[2]) end
return nil",
    )
});

/// `RedissonPermitExpirableSemaphore.tryReleaseAsync(permitId)` (4.7.0). KEYS = [name, channel,
/// `{name}:timeout`]; ARGV = [raw id, 1, now ms, publish command]. Publishes the new count;
/// answers 0 when the id was not there or had already expired.
static PERMIT_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local deadline = redis.call('zscore', KEYS[3], ARGV[1])
if redis.call('zrem', KEYS[3], ARGV[1]) ~= 1 then return 0 end
local available = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], available)
if tonumber(deadline) <= tonumber(ARGV[3]) then return 0 end
return 1",
    )
});

/// `RedissonCountDownLatch.trySetCountAsync` (4.7.0). KEYS = [name, channel]; ARGV =
/// [NEW_COUNT_MESSAGE, count, publish command].
static LATCH_TRY_SET_COUNT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('set', KEYS[1], ARGV[2])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1",
    )
});

/// `RedissonCountDownLatch.countDownAsync` (4.7.0). KEYS = [name, channel]; ARGV =
/// [ZERO_COUNT_MESSAGE, publish command]. DEL at ≤ 0, publish only at exactly 0.
static LATCH_COUNT_DOWN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local count = redis.call('decr', KEYS[1])
if count <= 0 then redis.call('del', KEYS[1]) end
if count == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end",
    )
});

/// `RedissonCountDownLatch.deleteAsync` (4.7.0). KEYS = [name, channel]; ARGV =
/// [NEW_COUNT_MESSAGE, publish command].
static LATCH_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('del', KEYS[1]) == 0 then return 0 end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1",
    )
});

/// `RedissonFencedLock.tryLockInnerAsync(leaseTime, unit, threadId)` (4.7.0; the
/// `…AndGetToken` calls). KEYS = [name, `redisson_lock_token:{name}`]; ARGV = [leaseMs, field].
/// `{-1, token}` when acquired (re-entry too: every acquisition INCRs the counter), `{pttl, -1}`
/// when held by another.
static FENCED_TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return {redis.call('pttl', KEYS[1]), -1}
end
local token = redis.call('incr', KEYS[2])
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return {-1, token}",
    )
});

/// One attempt at a Redisson FencedLock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedAttempt {
    /// Acquired (or re-entered) with this fencing token.
    Acquired(i64),
    /// Held by another thread; the lock's PTTL.
    Held(i64),
}

/// One attempt at a PermitExpirableSemaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermitAttempt {
    /// Acquired: the permit ids as the Java API shows them (32 hex characters each; Redis holds
    /// the 16 raw bytes).
    Acquired(Vec<String>),
    /// Not enough permits; the earliest lease deadline (epoch ms) among the taken permits, if
    /// any of them has a lease.
    Unavailable(Option<i64>),
}

/// Runs `script` with `keys` and `args` (all sent as bulk strings, as Redisson's LongCodec
/// does).
pub(super) async fn eval<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut invocation = script.prepare_invoke();
    for k in keys {
        invocation.key(*k);
    }
    for a in args {
        invocation.arg(*a);
    }
    invocation.invoke_async(conn).await
}

/// One Redisson client instance (`Redisson.create()`): a random UUID shared by all its threads
/// (`ServiceManager.id`), and the version behaviour it reproduces. Thread ids are the caller's
/// (Redisson uses the JVM thread id). Lock names are used as given (the RLock hash is the bare
/// `name`; the other keys follow [`redisson_prefix_name`] / [`redisson_suffix_name`]).
#[derive(Debug, Clone)]
pub struct RedissonClient {
    pub uuid: String,
    pub profile: RedissonProfile,
}

impl Default for RedissonClient {
    fn default() -> Self {
        Self::new()
    }
}

impl RedissonClient {
    /// A client with a random UUID behaving as Redisson 4.7.0 on a standalone server
    /// ([`RedissonProfile::V4_7`]: unlock latch on, `PUBLISH`).
    pub fn new() -> RedissonClient {
        Self::with_profile(RedissonProfile::V4_7)
    }

    /// A client with a random UUID and the given version behaviour.
    pub fn with_profile(profile: RedissonProfile) -> RedissonClient {
        RedissonClient {
            uuid: random_uuid(),
            profile,
        }
    }

    fn publish(&self) -> &'static str {
        self.profile.publish.as_str()
    }

    /// `getLockName(threadId)`: `<uuid>:<threadId>`, the RLock/FairLock/FencedLock hash field
    /// and the read lock's field (`RedissonBaseLock`, 4.7.0).
    pub fn lock_name(&self, thread_id: u64) -> String {
        format!("{}:{thread_id}", self.uuid)
    }

    /// The write lock's hash field: `<uuid>:<threadId>:write` (`RedissonWriteLock`, 4.7.0).
    pub fn write_lock_name(&self, thread_id: u64) -> String {
        format!("{}:{thread_id}:write", self.uuid)
    }

    /// The read lock's per-entry timeout strings' prefix
    /// (`RedissonReadLock.getReadWriteTimeoutNamePrefix`, 4.7.0):
    /// `suffixName(name, "<uuid>:<tid>") + ":rwlock_timeout"`, i.e.
    /// `{name}:<uuid>:<tid>:rwlock_timeout` (then `:<n>`), or `name:<uuid>:<tid>:rwlock_timeout`
    /// when `name` has braces.
    pub fn rw_timeout_prefix(&self, name: &str, thread_id: u64) -> String {
        format!(
            "{}:rwlock_timeout",
            redisson_suffix_name(name, &self.lock_name(thread_id))
        )
    }

    /// `RedissonReadLock.getKeyPrefix`: the timeout prefix cut before `:<uuid>:<tid>`, i.e.
    /// `{name}` (or `name` when it has braces).
    fn rw_key_prefix(&self, name: &str, thread_id: u64) -> String {
        let prefix = self.rw_timeout_prefix(name, thread_id);
        let cut = format!(":{}", self.lock_name(thread_id));
        prefix
            .split(cut.as_str())
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// The FairLock per-waiter channel: `redisson_lock__channel:{name}:<uuid>:<threadId>`
    /// (`RedissonFairLock.subscribe`, 4.7.0).
    pub fn fair_waiter_channel(&self, name: &str, thread_id: u64) -> String {
        format!("{}:{}", rlock_channel(name), self.lock_name(thread_id))
    }

    /// Runs an unlock script in its latch or pre-3.24 variant; `latch` = the lock name the
    /// latch is named after and the request. Deletes the latch afterwards when the request says
    /// so (Redisson's separate `DEL` after a successful reply, whatever it was).
    async fn run_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        scripts: (&Script, &Script),
        keys: &[&str],
        args: &[&str],
        latch: Option<(&str, &UnlockRequest)>,
        what: &str,
    ) -> Result<Option<bool>> {
        let r: Option<i64> = match latch {
            None => eval(conn, scripts.0, keys, args).await,
            Some((name, request)) => {
                let latch_key = unlock_latch_key(name, &request.id);
                let px = request.latch_px_ms.to_string();
                let mut keys = keys.to_vec();
                keys.push(&latch_key);
                let mut args = args.to_vec();
                args.push(&px);
                let r = eval(conn, scripts.1, &keys, &args).await;
                if r.is_ok() && request.delete_latch {
                    redis::cmd("DEL")
                        .arg(&latch_key)
                        .query_async::<()>(conn)
                        .await
                        .with_context(|| format!("{what}: DEL {latch_key}"))?;
                }
                r
            }
        }
        .with_context(|| what.to_string())?;
        Ok(r.map(|v| v == 1))
    }

    // --- RLock -----------------------------------------------------------------------------

    /// `RLock.tryLock` (one attempt; follows `RedissonLock.tryLockInnerAsync` at redisson 4.7.0,
    /// commit 0c286e8): `None` = acquired or re-entered (HINCRBY of the field, PEXPIRE
    /// `lease_ms`), `Some(pttl)` = held by another thread.
    pub async fn rlock_try_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<i64>> {
        eval(
            conn,
            &RLOCK_TRY_LOCK,
            &[name],
            &[&lease_ms.to_string(), &self.lock_name(thread_id)],
        )
        .await
        .with_context(|| format!("Redisson tryLock {name}"))
    }

    /// `RLock.unlock` with this client's profile (follows `RedissonLock.unlockInnerAsync` at
    /// redisson 4.7.0, commit 0c286e8, with a fresh [`UnlockRequest`] whose latch is deleted
    /// after the reply; without the latch for a pre-3.24 profile, as at redisson-3.23.5,
    /// commit 78b5027): `None` = not held by this thread, `Some(false)` = one re-entry released
    /// (PEXPIRE `lease_ms`), `Some(true)` = released (DEL, `0` published on
    /// `redisson_lock__channel:{name}` with the profile's publish command).
    pub async fn rlock_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<bool>> {
        let request = self.profile.unlock_latch.then(UnlockRequest::new);
        self.rlock_unlock_inner(conn, name, thread_id, lease_ms, request.as_ref())
            .await
    }

    /// `RLock.unlock` as Redisson ≥ 3.24.0 sends it, with an explicit request (follows
    /// `RedissonLock.unlockInnerAsync` and `RedissonBaseLock.unlockInnerAsync` at redisson
    /// 4.7.0, commit 0c286e8). The script first reads `redisson_unlock_latch:{name}:<id>`: when
    /// it exists (a retry of the same request) its value is the answer and nothing changes.
    /// Otherwise it unlocks as [`Self::rlock_unlock`] and SETs the latch to `0` (re-entry
    /// released) or `1` (released) with PX `latch_px_ms`; nothing when not held.
    pub async fn rlock_unlock_request(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        request: &UnlockRequest,
    ) -> Result<Option<bool>> {
        self.rlock_unlock_inner(conn, name, thread_id, lease_ms, Some(request))
            .await
    }

    async fn rlock_unlock_inner(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        request: Option<&UnlockRequest>,
    ) -> Result<Option<bool>> {
        let channel = rlock_channel(name);
        let field = self.lock_name(thread_id);
        let lease = lease_ms.to_string();
        let message = UNLOCK_MESSAGE.to_string();
        self.run_unlock(
            conn,
            (RLOCK_UNLOCK.get(0), RLOCK_UNLOCK.get(1)),
            &[name, &channel],
            &[&message, &lease, &field, self.publish()],
            request.map(|r| (name, r)),
            &format!("Redisson unlock {name}"),
        )
        .await
    }

    /// `RLock.forceUnlock` (follows `RedissonLock.forceUnlockAsync` at redisson 4.7.0, commit
    /// 0c286e8): DEL whatever holds it; when a hash was deleted, `0` on
    /// `redisson_lock__channel:{name}`. `true` when deleted. No latch.
    pub async fn rlock_force_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &RLOCK_FORCE_UNLOCK,
            &[name, &rlock_channel(name)],
            &[&UNLOCK_MESSAGE.to_string(), self.publish()],
        )
        .await
        .with_context(|| format!("Redisson forceUnlock {name}"))?;
        Ok(r == 1)
    }

    /// The watchdog's renewal (follows `renewal/LockTask.java` at redisson 4.7.0, commit
    /// 0c286e8; every `lease / 3`, default 10 s of 30 s): `true` if this thread still holds the
    /// lock and its PTTL was reset to `lease_ms`.
    pub async fn rlock_renew(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &RLOCK_RENEW,
            &[name],
            &[&lease_ms.to_string(), &self.lock_name(thread_id)],
        )
        .await
        .with_context(|| format!("Redisson renew {name}"))?;
        Ok(r == 1)
    }

    // --- FairLock --------------------------------------------------------------------------

    /// `RFairLock.tryLock(wait, …)` / `lock()` (one attempt; follows
    /// `RedissonFairLock.tryLockInnerAsync`, EVAL_LONG branch, at redisson 4.7.0, commit
    /// 0c286e8, or before 3.32.0 as at redisson-3.30.0 for [`FairLockScripts::Before3_32`]).
    /// `wait_ms` is Redisson's `fairLockWaitTimeout` (default 300 000 ms since 3.46.0, 5 000 ms
    /// hard-coded before) or the caller's wait time; `now_ms` its `System.currentTimeMillis()`.
    /// First drops queue heads whose deadline ≤ `now_ms`. `None` = acquired (the queue head or
    /// an empty queue; the remaining waiters' deadlines are lowered by `wait_ms`) or re-entered;
    /// `Some(ttl)` = queued (RPUSH onto `redisson_lock_queue:{name}`, deadline `ttl + wait_ms +
    /// now_ms` in `redisson_lock_timeout:{name}`, where `ttl` is the last waiter's deadline −
    /// now, or the lock's PTTL), or already queued.
    pub async fn fair_try_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        wait_ms: u64,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        eval(
            conn,
            FAIR_TRY_LOCK.get(fair_index(self.profile)),
            &[name, &fair_queue_key(name), &fair_timeout_key(name)],
            &[
                &lease_ms.to_string(),
                &self.lock_name(thread_id),
                &wait_ms.to_string(),
                &now_ms.to_string(),
            ],
        )
        .await
        .with_context(|| format!("Redisson fair tryLock {name}"))
    }

    /// `RFairLock.tryLock()` without a wait (follows `RedissonFairLock.tryLockInnerAsync`,
    /// EVAL_NULL_BOOLEAN branch, at redisson 4.7.0, commit 0c286e8): the same cleanup and
    /// acquire, but a thread that cannot acquire is **not** queued. `true` when acquired or
    /// re-entered.
    pub async fn fair_try_lock_once(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        wait_ms: u64,
        now_ms: i64,
    ) -> Result<bool> {
        let r: Option<i64> = eval(
            conn,
            FAIR_TRY_LOCK_ONCE.get(fair_index(self.profile)),
            &[name, &fair_queue_key(name), &fair_timeout_key(name)],
            &[
                &lease_ms.to_string(),
                &self.lock_name(thread_id),
                &now_ms.to_string(),
                &wait_ms.to_string(),
            ],
        )
        .await
        .with_context(|| format!("Redisson fair tryLock() {name}"))?;
        Ok(r.is_none())
    }

    /// A FairLock waiter that gives up (follows `RedissonFairLock.acquireFailedAsync` at
    /// redisson 4.7.0, commit 0c286e8): the waiters behind it get `wait_ms` off their
    /// deadlines, then it leaves the zset and the queue. No publish.
    pub async fn fair_acquire_failed(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        wait_ms: u64,
    ) -> Result<()> {
        eval::<()>(
            conn,
            &FAIR_ACQUIRE_FAILED,
            &[&fair_queue_key(name), &fair_timeout_key(name)],
            &[&self.lock_name(thread_id), &wait_ms.to_string()],
        )
        .await
        .with_context(|| format!("Redisson fair acquireFailed {name}"))
    }

    /// `RFairLock.unlock` with this client's profile (follows `RedissonFairLock.unlockInnerAsync`
    /// at redisson 4.7.0, commit 0c286e8; pre-3.24 profiles without the latch). First drops
    /// queue heads whose deadline ≤ `now_ms`, then as [`Self::rlock_unlock`], but the `0` is
    /// published only to the (new) head waiter's channel `redisson_lock__channel:{name}:<head
    /// field>`. When the lock is already gone it still signals the head and answers
    /// `Some(true)`.
    pub async fn fair_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        now_ms: i64,
    ) -> Result<Option<bool>> {
        let request = self.profile.unlock_latch.then(UnlockRequest::new);
        self.fair_unlock_inner(conn, name, thread_id, lease_ms, now_ms, request.as_ref())
            .await
    }

    /// [`Self::fair_unlock`] with an explicit latch request (Redisson ≥ 3.24.0; follows
    /// `RedissonFairLock.unlockInnerAsync` at redisson 4.7.0, commit 0c286e8). The latch is
    /// checked before the cleanup.
    pub async fn fair_unlock_request(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        now_ms: i64,
        request: &UnlockRequest,
    ) -> Result<Option<bool>> {
        self.fair_unlock_inner(conn, name, thread_id, lease_ms, now_ms, Some(request))
            .await
    }

    async fn fair_unlock_inner(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        now_ms: i64,
        request: Option<&UnlockRequest>,
    ) -> Result<Option<bool>> {
        let base = 2 * fair_index(self.profile);
        let (queue, timeout, channel) = (
            fair_queue_key(name),
            fair_timeout_key(name),
            rlock_channel(name),
        );
        self.run_unlock(
            conn,
            (FAIR_UNLOCK.get(base), FAIR_UNLOCK.get(base + 1)),
            &[name, &queue, &timeout, &channel],
            &[
                &UNLOCK_MESSAGE.to_string(),
                &lease_ms.to_string(),
                &self.lock_name(thread_id),
                &now_ms.to_string(),
                self.publish(),
            ],
            request.map(|r| (name, r)),
            &format!("Redisson fair unlock {name}"),
        )
        .await
    }

    /// `RFairLock.forceUnlock` (follows `RedissonFairLock.forceUnlockAsync` at redisson 4.7.0,
    /// commit 0c286e8): drops queue heads whose deadline ≤ `now_ms`, DELs the hash and, if one
    /// was deleted, publishes `0` to the head waiter's channel. `true` when deleted.
    pub async fn fair_force_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        now_ms: i64,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            FAIR_FORCE_UNLOCK.get(fair_index(self.profile)),
            &[
                name,
                &fair_queue_key(name),
                &fair_timeout_key(name),
                &rlock_channel(name),
            ],
            &[
                &UNLOCK_MESSAGE.to_string(),
                &now_ms.to_string(),
                self.publish(),
            ],
        )
        .await
        .with_context(|| format!("Redisson fair forceUnlock {name}"))?;
        Ok(r == 1)
    }

    // --- ReadWriteLock ---------------------------------------------------------------------

    /// `RReadWriteLock.readLock().tryLock` (follows `RedissonReadLock.tryLockInnerAsync` at
    /// redisson 4.7.0, commit 0c286e8): `None` = acquired (hash `mode` = `read`, field
    /// `<uuid>:<tid>` counts entries, one `…:rwlock_timeout:<n>` string = `1` with PX lease per
    /// entry; also when this thread holds the write lock), `Some(pttl)` = write-locked by
    /// another.
    pub async fn rw_read_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<i64>> {
        eval(
            conn,
            &RW_READ_LOCK,
            &[name, &self.rw_timeout_prefix(name, thread_id)],
            &[
                &lease_ms.to_string(),
                &self.lock_name(thread_id),
                &self.write_lock_name(thread_id),
            ],
        )
        .await
        .with_context(|| format!("Redisson read lock {name}"))
    }

    /// `RReadWriteLock.writeLock().tryLock` (follows `RedissonWriteLock.tryLockInnerAsync` at
    /// redisson 4.7.0, commit 0c286e8): `None` = acquired (`mode` = `write`, field
    /// `<uuid>:<tid>:write`; re-entry adds `lease_ms` to the PTTL), `Some(pttl)` = held by
    /// readers or another writer.
    pub async fn rw_write_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<i64>> {
        eval(
            conn,
            &RW_WRITE_LOCK,
            &[name],
            &[&lease_ms.to_string(), &self.write_lock_name(thread_id)],
        )
        .await
        .with_context(|| format!("Redisson write lock {name}"))
    }

    /// Read unlock with this client's profile (follows `RedissonReadLock.unlockInnerAsync` at
    /// redisson 4.7.0, commit 0c286e8): `None` = not held (also when the hash is gone: then
    /// `0` is published anyway), `Some(false)` = other entries remain (the entry's
    /// `rwlock_timeout` string is deleted; the hash's PTTL becomes the longest remaining entry
    /// timeout), `Some(true)` = the hash was deleted and `0` (UNLOCK_MESSAGE) published on
    /// `redisson_rwlock:{name}`.
    pub async fn rw_read_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
    ) -> Result<Option<bool>> {
        let request = self.profile.unlock_latch.then(UnlockRequest::new);
        self.rw_read_unlock_inner(conn, name, thread_id, request.as_ref())
            .await
    }

    /// [`Self::rw_read_unlock`] with an explicit latch request (latch
    /// `redisson_unlock_latch:{name}:<id>`, named after the ReadWriteLock; follows
    /// `RedissonReadLock.unlockInnerAsync` at redisson 4.7.0, commit 0c286e8).
    pub async fn rw_read_unlock_request(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        request: &UnlockRequest,
    ) -> Result<Option<bool>> {
        self.rw_read_unlock_inner(conn, name, thread_id, Some(request))
            .await
    }

    async fn rw_read_unlock_inner(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        request: Option<&UnlockRequest>,
    ) -> Result<Option<bool>> {
        let channel = rw_channel(name);
        let prefix = self.rw_timeout_prefix(name, thread_id);
        let key_prefix = self.rw_key_prefix(name, thread_id);
        self.run_unlock(
            conn,
            (RW_READ_UNLOCK.get(0), RW_READ_UNLOCK.get(1)),
            &[name, &channel, &prefix, &key_prefix],
            &[
                &UNLOCK_MESSAGE.to_string(),
                &self.lock_name(thread_id),
                self.publish(),
            ],
            request.map(|r| (name, r)),
            &format!("Redisson read unlock {name}"),
        )
        .await
    }

    /// The read lock's watchdog for this thread (follows `renewal/ReadLockTask.java` at
    /// redisson 4.7.0, commit 0c286e8): PEXPIRE `lease_ms` on each of the thread's
    /// `rwlock_timeout` strings and on the hash; `false` when the thread holds no read entry.
    pub async fn rw_read_renew(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &RW_READ_RENEW,
            &[name, &self.rw_key_prefix(name, thread_id)],
            &[&lease_ms.to_string(), &self.lock_name(thread_id)],
        )
        .await
        .with_context(|| format!("Redisson read renew {name}"))?;
        Ok(r == 1)
    }

    /// Write unlock with this client's profile (follows `RedissonWriteLock.unlockInnerAsync` at
    /// redisson 4.7.0, commit 0c286e8): `None` = not held by this writer, `Some(false)` = one
    /// re-entry released, `Some(true)` = released: the hash deleted and `1`
    /// (READ_UNLOCK_MESSAGE) published on `redisson_rwlock:{name}`, or, when this thread also
    /// holds read entries, `mode` set back to `read` with nothing published.
    pub async fn rw_write_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<bool>> {
        let request = self.profile.unlock_latch.then(UnlockRequest::new);
        self.rw_write_unlock_inner(conn, name, thread_id, lease_ms, request.as_ref())
            .await
    }

    /// [`Self::rw_write_unlock`] with an explicit latch request (follows
    /// `RedissonWriteLock.unlockInnerAsync` at redisson 4.7.0, commit 0c286e8).
    pub async fn rw_write_unlock_request(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        request: &UnlockRequest,
    ) -> Result<Option<bool>> {
        self.rw_write_unlock_inner(conn, name, thread_id, lease_ms, Some(request))
            .await
    }

    async fn rw_write_unlock_inner(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        request: Option<&UnlockRequest>,
    ) -> Result<Option<bool>> {
        let channel = rw_channel(name);
        self.run_unlock(
            conn,
            (RW_WRITE_UNLOCK.get(0), RW_WRITE_UNLOCK.get(1)),
            &[name, &channel],
            &[
                &READ_UNLOCK_MESSAGE.to_string(),
                &lease_ms.to_string(),
                &self.write_lock_name(thread_id),
                self.publish(),
            ],
            request.map(|r| (name, r)),
            &format!("Redisson write unlock {name}"),
        )
        .await
    }

    /// `readLock().forceUnlock()` (follows `RedissonReadLock.forceUnlockAsync` at redisson
    /// 4.7.0, commit 0c286e8): only when `mode` is `read`: DEL and `0` on
    /// `redisson_rwlock:{name}`. `true` when deleted.
    pub async fn rw_read_force_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
    ) -> Result<bool> {
        self.rw_force_unlock(conn, name, "read", UNLOCK_MESSAGE)
            .await
    }

    /// `writeLock().forceUnlock()` (follows `RedissonWriteLock.forceUnlockAsync` at redisson
    /// 4.7.0, commit 0c286e8): only when `mode` is `write`: DEL and `1` on
    /// `redisson_rwlock:{name}`. `true` when deleted.
    pub async fn rw_write_force_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
    ) -> Result<bool> {
        self.rw_force_unlock(conn, name, "write", READ_UNLOCK_MESSAGE)
            .await
    }

    async fn rw_force_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        mode: &str,
        message: i64,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &RW_FORCE_UNLOCK,
            &[name, &rw_channel(name)],
            &[&message.to_string(), self.publish(), mode],
        )
        .await
        .with_context(|| format!("Redisson {mode} forceUnlock {name}"))?;
        Ok(r == 1)
    }

    // --- Semaphore -------------------------------------------------------------------------

    /// `RSemaphore.tryAcquire(permits)` (follows `RedissonSemaphore.tryAcquireAsync0` at
    /// redisson 4.7.0, commit 0c286e8): `true` when the string held at least `permits` and was
    /// decremented.
    pub async fn semaphore_try_acquire(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: u64,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &SEMAPHORE_TRY_ACQUIRE,
            &[name],
            &[&permits.to_string()],
        )
        .await
        .with_context(|| format!("Redisson semaphore tryAcquire {name}"))?;
        Ok(r == 1)
    }

    /// `RSemaphore.release(permits)` (follows `RedissonSemaphore.releaseAsync` at redisson
    /// 4.7.0, commit 0c286e8): INCRBY, then the new value published on `redisson_sc:{name}`.
    pub async fn semaphore_release(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: u64,
    ) -> Result<()> {
        eval::<()>(
            conn,
            &SEMAPHORE_RELEASE,
            &[name, &semaphore_channel(name)],
            &[&permits.to_string(), self.publish()],
        )
        .await
        .with_context(|| format!("Redisson semaphore release {name}"))
    }

    /// `RSemaphore.trySetPermits(permits)` (follows `RedissonSemaphore.trySetPermitsAsync` at
    /// redisson 4.7.0, commit 0c286e8): `true` if the semaphore did not exist and now has
    /// `permits` (published on `redisson_sc:{name}`).
    pub async fn semaphore_set_permits(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: u64,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &SEMAPHORE_TRY_SET_PERMITS,
            &[name, &semaphore_channel(name)],
            &[&permits.to_string(), self.publish()],
        )
        .await
        .with_context(|| format!("Redisson semaphore trySetPermits {name}"))?;
        Ok(r == 1)
    }

    // --- PermitExpirableSemaphore ----------------------------------------------------------

    /// `RPermitExpirableSemaphore.trySetPermits(permits)` (follows
    /// `RedissonPermitExpirableSemaphore.trySetPermitsAsync` at redisson 4.7.0, commit
    /// 0c286e8): as [`Self::semaphore_set_permits`].
    pub async fn permit_set_permits(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: u64,
    ) -> Result<bool> {
        self.semaphore_set_permits(conn, name, permits).await
    }

    /// `RPermitExpirableSemaphore.tryAcquire(permits, lease)` (one attempt; follows
    /// `RedissonPermitExpirableSemaphore.tryAcquireAsync(ids, timeoutDate)` at redisson 4.7.0,
    /// commit 0c286e8). Each permit id is `generateId()`: 16 random bytes, stored in
    /// `{name}:timeout` as the raw bytes (`decodeHexDump`, since 3.17.0) with score `now_ms +
    /// lease` (or [`PERMIT_NO_LEASE_SCORE`] without a lease). Expired permits (score ≤ `now_ms`)
    /// are given back first, and their new count published on `redisson_sc:{name}`.
    pub async fn permit_try_acquire(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: usize,
        lease_ms: Option<u64>,
        now_ms: i64,
    ) -> Result<PermitAttempt> {
        let ids: Vec<Vec<u8>> = (0..permits).map(|_| random_bytes(16)).collect();
        let deadline = lease_ms.map_or(PERMIT_NO_LEASE_SCORE, |l| now_ms + l as i64);
        let mut invocation = PERMIT_TRY_ACQUIRE.prepare_invoke();
        invocation
            .key(name)
            .key(permit_timeout_key(name))
            .key(semaphore_channel(name))
            .arg(permits)
            .arg(deadline)
            .arg(now_ms)
            .arg(PERMIT_NO_LEASE_SCORE)
            .arg(self.publish());
        for id in &ids {
            invocation.arg(id.as_slice());
        }
        let r: Option<String> = invocation
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson permit tryAcquire {name}"))?;
        Ok(match r.as_deref() {
            Some("OK") => PermitAttempt::Acquired(ids.iter().map(|id| hex(id)).collect()),
            Some(s) => {
                let score = s.strip_prefix(':').unwrap_or(s);
                PermitAttempt::Unavailable(score.parse::<f64>().ok().map(|f| f as i64))
            }
            None => PermitAttempt::Unavailable(None),
        })
    }

    /// `RPermitExpirableSemaphore.tryRelease(permitId)` (follows
    /// `RedissonPermitExpirableSemaphore.tryReleaseAsync(String)` at redisson 4.7.0, commit
    /// 0c286e8): ZREM of the raw id; when it was there, INCRBY 1 and the new count published.
    /// `true` when released before its lease ran out.
    pub async fn permit_release(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permit_id: &str,
        now_ms: i64,
    ) -> Result<bool> {
        let raw = unhex(permit_id).with_context(|| format!("permit id {permit_id:?}"))?;
        let r: i64 = PERMIT_RELEASE
            .key(name)
            .key(semaphore_channel(name))
            .key(permit_timeout_key(name))
            .arg(raw)
            .arg(1)
            .arg(now_ms)
            .arg(self.publish())
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson permit release {name}"))?;
        Ok(r == 1)
    }

    // --- CountDownLatch --------------------------------------------------------------------

    /// `RCountDownLatch.trySetCount(count)` (follows `RedissonCountDownLatch.trySetCountAsync` at
    /// redisson 4.7.0, commit 0c286e8): a string `name` = count, `1` (NEW_COUNT_MESSAGE)
    /// published on `redisson_countdownlatch__channel__{name}`. `true` when set.
    pub async fn latch_try_set_count(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        count: u64,
    ) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &LATCH_TRY_SET_COUNT,
            &[name, &countdown_latch_channel(name)],
            &[
                &LATCH_NEW_COUNT_MESSAGE.to_string(),
                &count.to_string(),
                self.publish(),
            ],
        )
        .await
        .with_context(|| format!("Redisson latch trySetCount {name}"))?;
        Ok(r == 1)
    }

    /// `RCountDownLatch.countDown()` (follows `RedissonCountDownLatch.countDownAsync` at
    /// redisson 4.7.0, commit 0c286e8): DECR; at ≤ 0 the key is deleted; at exactly 0 `0`
    /// (ZERO_COUNT_MESSAGE) is published.
    pub async fn latch_count_down(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
    ) -> Result<()> {
        eval::<()>(
            conn,
            &LATCH_COUNT_DOWN,
            &[name, &countdown_latch_channel(name)],
            &[&LATCH_ZERO_COUNT_MESSAGE.to_string(), self.publish()],
        )
        .await
        .with_context(|| format!("Redisson latch countDown {name}"))
    }

    /// `RCountDownLatch.delete()` (follows `RedissonCountDownLatch.deleteAsync` at redisson
    /// 4.7.0, commit 0c286e8): DEL, and `1` published when a key was deleted.
    pub async fn latch_delete(&self, conn: &mut MultiplexedConnection, name: &str) -> Result<bool> {
        let r: i64 = eval(
            conn,
            &LATCH_DELETE,
            &[name, &countdown_latch_channel(name)],
            &[&LATCH_NEW_COUNT_MESSAGE.to_string(), self.publish()],
        )
        .await
        .with_context(|| format!("Redisson latch delete {name}"))?;
        Ok(r == 1)
    }

    // --- FencedLock ------------------------------------------------------------------------

    /// `RFencedLock.tryLockAndGetToken` (one attempt; follows
    /// `RedissonFencedLock.tryLockInnerAsync` at redisson 4.7.0, commit 0c286e8): the RLock
    /// hash plus `INCR redisson_lock_token:{name}` on every acquisition (re-entry included).
    pub async fn fenced_try_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<FencedAttempt> {
        let (pttl, token): (i64, i64) = eval(
            conn,
            &FENCED_TRY_LOCK,
            &[name, &fenced_token_key(name)],
            &[&lease_ms.to_string(), &self.lock_name(thread_id)],
        )
        .await
        .with_context(|| format!("Redisson fenced tryLock {name}"))?;
        Ok(if pttl == -1 {
            FencedAttempt::Acquired(token)
        } else {
            FencedAttempt::Held(pttl)
        })
    }

    /// `RFencedLock.unlock` is RLock's unlock (`RedissonFencedLock` extends `RedissonLock`,
    /// 4.7.0): same hash, same channel, same latch; the token counter stays.
    pub async fn fenced_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<bool>> {
        self.rlock_unlock(conn, name, thread_id, lease_ms).await
    }
}

/// Bytes of a hex string (`ByteBufUtil.decodeHexDump`).
fn unhex(s: &str) -> Result<Vec<u8>> {
    anyhow::ensure!(s.len().is_multiple_of(2), "odd length");
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(s.get(i..i + 2).unwrap_or("x"), 16)
                .map_err(|e| anyhow::anyhow!("not hex: {e}"))
        })
        .collect()
}

/// Redisson's deprecated `RedissonRedLock` (follows `RedissonRedLock.java` and
/// `RedissonMultiLock.java` at redisson 4.7.0, commit 0c286e8): a MultiLock over one RLock per
/// independent master, each normally from its own Redisson instance (so its own UUID). Each
/// master gets an RLock hash `name` with field `<uuid of that master's client>:<threadId>`;
/// there are no `SET NX` tokens.
pub struct RedissonRedLock {
    /// One connection and one Redisson client per master.
    pub masters: Vec<(MultiplexedConnection, RedissonClient)>,
}

impl RedissonRedLock {
    /// One connection and one Redisson 4.7.0 client per master URL.
    pub async fn connect(urls: &[String]) -> Result<RedissonRedLock> {
        let mut masters = Vec::with_capacity(urls.len());
        for url in urls {
            masters.push((
                crate::support::redis::connect(url).await?,
                RedissonClient::new(),
            ));
        }
        Ok(RedissonRedLock { masters })
    }

    /// `minLocksAmount`: `n/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// `tryLock()` with neither wait nor lease given to the MultiLock (each RLock gets
    /// `lease_ms`, the watchdog's 30 s by default): the masters are tried in order; a master
    /// that fails (held, error, or no answer within a second) uses up one of the `n - quorum`
    /// allowed failures; once the failures left over would still allow a quorum of the
    /// acquired ones, the rest are not tried. When more fail, every acquired one is unlocked
    /// and `false` returned. Returns whether it is held.
    pub async fn try_lock(&self, name: &str, thread_id: u64, lease_ms: u64) -> Result<bool> {
        let n = self.masters.len();
        let allowed = n - self.quorum();
        let mut failures_left = allowed;
        let mut acquired = Vec::new();
        for (i, (conn, client)) in self.masters.iter().enumerate() {
            let mut c = conn.clone();
            let attempt = tokio::time::timeout(
                Duration::from_secs(1),
                client.rlock_try_lock(&mut c, name, thread_id, lease_ms),
            )
            .await;
            if let Ok(Ok(None)) = attempt {
                acquired.push(i);
                continue;
            }
            if n - acquired.len() == allowed {
                break;
            }
            if failures_left == 0 {
                self.unlock_on(&acquired, name, thread_id, lease_ms).await;
                return Ok(false);
            }
            failures_left -= 1;
        }
        Ok(true)
    }

    /// `unlock()` (`RedissonRedLock.unlock` → `unlockInner(locks)`): RLock unlock on every
    /// master, failures ignored. How many masters answered that it was held.
    pub async fn unlock(&self, name: &str, thread_id: u64) -> Result<usize> {
        let all: Vec<usize> = (0..self.masters.len()).collect();
        Ok(self
            .unlock_on(&all, name, thread_id, WATCHDOG_LEASE_MS)
            .await)
    }

    async fn unlock_on(
        &self,
        indices: &[usize],
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> usize {
        let unlocks = indices.iter().map(|&i| {
            let (conn, client) = &self.masters[i];
            let mut c = conn.clone();
            async move {
                tokio::time::timeout(
                    Duration::from_secs(1),
                    client.rlock_unlock(&mut c, name, thread_id, lease_ms),
                )
                .await
            }
        });
        futures::future::join_all(unlocks)
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(Ok(Some(_)))))
            .count()
    }
}
