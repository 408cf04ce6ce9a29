//! Real Redis lock clients, each doing exactly what its library sends (the same commands, the
//! same Lua, the same key and channel names), so tests see the layouts of
//! `shared/LOCK_LAYOUTS.md` as the libraries leave them:
//!
//! * plain token locks ([`token_lock_acquire`], [`token_lock_release`]) and the legacy SETNX
//!   patterns ([`setnx_no_ttl`], [`setnx_deadline`]);
//! * Redisson 3.x ([`RedissonClient`]): RLock, FairLock, ReadWriteLock, Semaphore, FencedLock;
//! * python-redis-lock ([`PyRedisLock`], [`py_lock_wait`]);
//! * ShedLock's `RedisLockProvider` ([`shedlock_lock`], [`shedlock_unlock`]);
//! * Redlock over independent masters ([`Redlock`]);
//! * an unlock-channel subscriber ([`subscribe_unlock_channel`]) so `PUBSUB NUMSUB` counts a
//!   waiter.
//!
//! Nothing here waits or retries the way the libraries do in their blocking calls: each function
//! is one attempt, and tests drive timing themselves. Every function needs a connection to the
//! node that owns the keys it touches (in a cluster, [`crate::support::redis::RedisCluster::connection_for`];
//! Redisson's keys of one lock share the `{name}` hash tag, except the bare lock hash itself when
//! `name` has no braces).

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::Script;

/// `n` random bytes from `/dev/urandom` (falls back to std's random hasher keys).
fn random_bytes(n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        use std::hash::{BuildHasher, Hasher};
        for chunk in buf.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(now_nanos());
            let bytes = h.finish().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
    buf
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch (the clock Redisson's FairLock passes as `currentTime`).
pub fn now_ms() -> i64 {
    (now_nanos() / 1_000_000) as i64
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random version-4 UUID, `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx` (what `UUID.randomUUID()`
/// prints).
pub fn random_uuid() -> String {
    let mut b = random_bytes(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A random token for token locks: 32 hex characters.
pub fn random_token() -> String {
    hex(&random_bytes(16))
}

// ---------------------------------------------------------------------------------------------
// Token lock and legacy SETNX
// ---------------------------------------------------------------------------------------------

/// The standard compare-and-delete release (redis.io's "distributed locks" page).
static COMPARE_AND_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end"#,
    )
});

/// `SET key token NX PX ttl_ms`; `true` when acquired.
pub async fn token_lock_acquire(
    conn: &mut MultiplexedConnection,
    key: &str,
    token: &str,
    ttl_ms: u64,
) -> Result<bool> {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(conn)
        .await
        .with_context(|| format!("SET {key} NX PX"))?;
    Ok(set.is_some())
}

/// The compare-and-delete Lua: deletes `key` only if it still holds `token`; `true` if deleted.
pub async fn token_lock_release(
    conn: &mut MultiplexedConnection,
    key: &str,
    token: &str,
) -> Result<bool> {
    let n: i64 = COMPARE_AND_DELETE
        .key(key)
        .arg(token)
        .invoke_async(conn)
        .await
        .with_context(|| format!("release {key}"))?;
    Ok(n == 1)
}

/// `SETNX key value` and nothing else: the client "died" before its `EXPIRE`, so the lock is
/// immortal. `true` when set.
pub async fn setnx_no_ttl(
    conn: &mut MultiplexedConnection,
    key: &str,
    value: &str,
) -> Result<bool> {
    let n: i64 = redis::cmd("SETNX")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .with_context(|| format!("SETNX {key}"))?;
    Ok(n == 1)
}

/// The old redis.io `SETNX` recipe: the value is the epoch-ms deadline (the takeover by `GETSET`
/// after it passed is the caller's business). No TTL. `true` when set.
pub async fn setnx_deadline(
    conn: &mut MultiplexedConnection,
    key: &str,
    deadline_ms: i64,
) -> Result<bool> {
    let n: i64 = redis::cmd("SETNX")
        .arg(key)
        .arg(deadline_ms)
        .query_async(conn)
        .await
        .with_context(|| format!("SETNX {key}"))?;
    Ok(n == 1)
}

// ---------------------------------------------------------------------------------------------
// Redisson
// ---------------------------------------------------------------------------------------------

/// Redisson's `prefixName(prefix, name)`: `prefix:{name}`, or `prefix:name` when `name` already
/// has braces.
pub fn redisson_prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName(name, suffix)`: `{name}:suffix`, or `name:suffix` when `name` already
/// has braces.
pub fn redisson_suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// `redisson_lock__channel:{name}`: RLock, FairLock (plus `:<uuid>:<tid>` per waiter) and
/// FencedLock unlock channel.
pub fn rlock_channel(name: &str) -> String {
    redisson_prefix_name("redisson_lock__channel", name)
}

/// `redisson_lock_queue:{name}`: the FairLock waiter list.
pub fn fair_queue_key(name: &str) -> String {
    redisson_prefix_name("redisson_lock_queue", name)
}

/// `redisson_lock_timeout:{name}`: the FairLock waiter deadlines (zset, epoch ms).
pub fn fair_timeout_key(name: &str) -> String {
    redisson_prefix_name("redisson_lock_timeout", name)
}

/// `redisson_lock_token:{name}`: the FencedLock token counter.
pub fn fenced_token_key(name: &str) -> String {
    redisson_prefix_name("redisson_lock_token", name)
}

/// `redisson_rwlock:{name}`: the ReadWriteLock unlock channel.
pub fn rw_channel(name: &str) -> String {
    redisson_prefix_name("redisson_rwlock", name)
}

/// `redisson_sc:{name}`: the Semaphore channel.
pub fn semaphore_channel(name: &str) -> String {
    redisson_prefix_name("redisson_sc", name)
}

/// `LockPubSub.UNLOCK_MESSAGE` (and `READ_UNLOCK_MESSAGE`): both are `0`.
const UNLOCK_MESSAGE: i64 = 0;

/// `RedissonLock.tryLockInnerAsync` (EVAL_LONG). KEYS = [name]; ARGV = [leaseMs, lockName].
static RLOCK_TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
            redis.call('hincrby', KEYS[1], ARGV[2], 1); \
            redis.call('pexpire', KEYS[1], ARGV[1]); \
            return nil; \
        end; \
        return redis.call('pttl', KEYS[1]);",
    )
});

/// `RedissonLock.unlockInnerAsync` (3.x before the 3.19 unlock latch). KEYS = [name, channel];
/// ARGV = [UNLOCK_MESSAGE, leaseMs, lockName].
static RLOCK_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
            return nil; \
        end; \
        local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
        if (counter > 0) then \
            redis.call('pexpire', KEYS[1], ARGV[2]); \
            return 0; \
        else \
            redis.call('del', KEYS[1]); \
            redis.call('publish', KEYS[2], ARGV[1]); \
            return 1; \
        end; \
        return nil;",
    )
});

/// `RedissonBaseLock.renewExpirationAsync` (the watchdog). KEYS = [name]; ARGV = [leaseMs,
/// lockName].
static RLOCK_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
            redis.call('pexpire', KEYS[1], ARGV[1]); \
            return 1; \
        end; \
        return 0;",
    )
});

/// The stale-waiter cleanup loop both FairLock scripts start with; `ARGV[$now]` is the
/// current time in epoch ms.
macro_rules! fair_cleanup {
    ($now:literal) => {
        concat!(
            "while true do \
                local firstThreadId2 = redis.call('lindex', KEYS[2], 0); \
                if firstThreadId2 == false then \
                    break; \
                end; \
                local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2)); \
                if timeout <= tonumber(ARGV[",
            $now,
            "]) then \
                    redis.call('zrem', KEYS[3], firstThreadId2); \
                    redis.call('lpop', KEYS[2]); \
                else \
                    break; \
                end; \
            end; "
        )
    };
}

/// `RedissonFairLock.tryLockInnerAsync` (EVAL_LONG). KEYS = [name, queue, timeout zset];
/// ARGV = [leaseMs, lockName, waitMs, currentTimeMs].
static FAIR_TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        fair_cleanup!("4"),
        "if (redis.call('exists', KEYS[1]) == 0) \
            and ((redis.call('exists', KEYS[2]) == 0) \
                or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then \
            redis.call('lpop', KEYS[2]); \
            redis.call('zrem', KEYS[3], ARGV[2]); \
            local keys = redis.call('zrange', KEYS[3], 0, -1); \
            for i = 1, #keys, 1 do \
                redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]); \
            end; \
            redis.call('hset', KEYS[1], ARGV[2], 1); \
            redis.call('pexpire', KEYS[1], ARGV[1]); \
            return nil; \
        end; \
        if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
            redis.call('hincrby', KEYS[1], ARGV[2],1); \
            redis.call('pexpire', KEYS[1], ARGV[1]); \
            return nil; \
        end; \
        local timeout = redis.call('zscore', KEYS[3], ARGV[2]); \
        if timeout ~= false then \
            return timeout - tonumber(ARGV[3]) - tonumber(ARGV[4]); \
        end; \
        local lastThreadId = redis.call('lindex', KEYS[2], -1); \
        local ttl; \
        if lastThreadId ~= false and lastThreadId ~= ARGV[2] then \
            ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]); \
        else \
            ttl = redis.call('pttl', KEYS[1]); \
        end; \
        local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]); \
        if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then \
            redis.call('rpush', KEYS[2], ARGV[2]); \
        end; \
        return ttl;"
    ))
});

/// `RedissonFairLock.unlockInnerAsync`. KEYS = [name, queue, timeout zset, channel];
/// ARGV = [UNLOCK_MESSAGE, leaseMs, lockName, currentTimeMs]. Publishes to
/// `<channel>:<next waiter>` only.
static FAIR_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        fair_cleanup!("4"),
        "if (redis.call('exists', KEYS[1]) == 0) then \
            local nextThreadId = redis.call('lindex', KEYS[2], 0); \
            if nextThreadId ~= false then \
                redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); \
            end; \
            return 1; \
        end; \
        if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
            return nil; \
        end; \
        local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
        if (counter > 0) then \
            redis.call('pexpire', KEYS[1], ARGV[2]); \
            return 0; \
        end; \
        redis.call('del', KEYS[1]); \
        local nextThreadId = redis.call('lindex', KEYS[2], 0); \
        if nextThreadId ~= false then \
            redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); \
        end; \
        return 1;"
    ))
});

/// `RedissonReadLock.tryLockInnerAsync`. KEYS = [name, `{name}:<uuid>:<tid>:rwlock_timeout`];
/// ARGV = [leaseMs, readLockName, writeLockName].
static RW_READ_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode'); \
        if (mode == false) then \
            redis.call('hset', KEYS[1], 'mode', 'read'); \
            redis.call('hset', KEYS[1], ARGV[2], 1); \
            redis.call('set', KEYS[2] .. ':1', 1); \
            redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); \
            redis.call('pexpire', KEYS[1], ARGV[1]); \
            return nil; \
        end; \
        if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then \
            local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); \
            local key = KEYS[2] .. ':' .. ind; \
            redis.call('set', key, 1); \
            redis.call('pexpire', key, ARGV[1]); \
            local remainTime = redis.call('pttl', KEYS[1]); \
            redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); \
            return nil; \
        end; \
        return redis.call('pttl', KEYS[1]);",
    )
});

/// `RedissonReadLock.unlockInnerAsync`. KEYS = [name, channel, timeoutPrefix, keyPrefix];
/// ARGV = [UNLOCK_MESSAGE, readLockName].
static RW_READ_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode'); \
        if (mode == false) then \
            redis.call('publish', KEYS[2], ARGV[1]); \
            return 1; \
        end; \
        local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); \
        if (lockExists == 0) then \
            return nil; \
        end; \
        local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
        if (counter == 0) then \
            redis.call('hdel', KEYS[1], ARGV[2]); \
        end; \
        redis.call('del', KEYS[3] .. ':' .. (counter+1)); \
        if (redis.call('hlen', KEYS[1]) > 1) then \
            local maxRemainTime = -3; \
            local keys = redis.call('hkeys', KEYS[1]); \
            for n, key in ipairs(keys) do \
                counter = tonumber(redis.call('hget', KEYS[1], key)); \
                if type(counter) == 'number' then \
                    for i=counter, 1, -1 do \
                        local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); \
                        maxRemainTime = math.max(remainTime, maxRemainTime); \
                    end; \
                end; \
            end; \
            if maxRemainTime > 0 then \
                redis.call('pexpire', KEYS[1], maxRemainTime); \
                return 0; \
            end; \
            if mode == 'write' then \
                return 0; \
            end; \
        end; \
        redis.call('del', KEYS[1]); \
        redis.call('publish', KEYS[2], ARGV[1]); \
        return 1;",
    )
});

/// `RedissonWriteLock.tryLockInnerAsync`. KEYS = [name]; ARGV = [leaseMs, writeLockName].
static RW_WRITE_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode'); \
        if (mode == false) then \
            redis.call('hset', KEYS[1], 'mode', 'write'); \
            redis.call('hset', KEYS[1], ARGV[2], 1); \
            redis.call('pexpire', KEYS[1], ARGV[1]); \
            return nil; \
        end; \
        if (mode == 'write') then \
            if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
                redis.call('hincrby', KEYS[1], ARGV[2], 1); \
                local currentExpire = redis.call('pttl', KEYS[1]); \
                redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); \
                return nil; \
            end; \
        end; \
        return redis.call('pttl', KEYS[1]);",
    )
});

/// `RedissonWriteLock.unlockInnerAsync`. KEYS = [name, channel]; ARGV = [READ_UNLOCK_MESSAGE,
/// leaseMs, writeLockName].
static RW_WRITE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode'); \
        if (mode == false) then \
            redis.call('publish', KEYS[2], ARGV[1]); \
            return 1; \
        end; \
        if (mode == 'write') then \
            local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); \
            if (lockExists == 0) then \
                return nil; \
            else \
                local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
                if (counter > 0) then \
                    redis.call('pexpire', KEYS[1], ARGV[2]); \
                    return 0; \
                else \
                    redis.call('hdel', KEYS[1], ARGV[3]); \
                    if (redis.call('hlen', KEYS[1]) == 1) then \
                        redis.call('del', KEYS[1]); \
                        redis.call('publish', KEYS[2], ARGV[1]); \
                    else \
                        redis.call('hset', KEYS[1], 'mode', 'read'); \
                    end; \
                    return 1; \
                end; \
            end; \
        end; \
        return nil;",
    )
});

/// `RedissonSemaphore.tryAcquireAsync(permits)`. KEYS = [name]; ARGV = [permits].
static SEMAPHORE_TRY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local value = redis.call('get', KEYS[1]); \
        if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then \
            local val = redis.call('decrby', KEYS[1], ARGV[1]); \
            return 1; \
        end; \
        return 0;",
    )
});

/// `RedissonSemaphore.releaseAsync(permits)`. KEYS = [name, channel]; ARGV = [permits].
static SEMAPHORE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local value = redis.call('incrby', KEYS[1], ARGV[1]); \
        redis.call('publish', KEYS[2], value);",
    )
});

/// `RedissonSemaphore.trySetPermitsAsync(permits)`. KEYS = [name, channel]; ARGV = [permits].
static SEMAPHORE_TRY_SET_PERMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local value = redis.call('get', KEYS[1]); \
        if (value == false) then \
            redis.call('set', KEYS[1], ARGV[1]); \
            redis.call('publish', KEYS[2], ARGV[1]); \
            return 1; \
        end; \
        return 0;",
    )
});

/// `RedissonFencedLock.tryLockInnerAsync`. KEYS = [name, `redisson_lock_token:{name}`];
/// ARGV = [leaseMs, lockName]. Returns `{-1, token}` when acquired (re-entry too: every
/// acquisition takes a new token), `{pttl, -1}` when held by another.
static FENCED_TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
            redis.call('incr', KEYS[2]); \
            redis.call('hincrby', KEYS[1], ARGV[2], 1); \
            redis.call('pexpire', KEYS[1], ARGV[1]); \
            return {-1, redis.call('get', KEYS[2])}; \
        end; \
        return {redis.call('pttl', KEYS[1]), -1};",
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

/// One Redisson client instance (`Redisson.create()`): a random UUID shared by all its threads.
/// Thread ids are the caller's (Redisson uses the JVM thread id). Lock names are used as given
/// (the RLock hash is the bare `name`).
#[derive(Debug, Clone)]
pub struct RedissonClient {
    pub uuid: String,
}

impl Default for RedissonClient {
    fn default() -> Self {
        Self::new()
    }
}

impl RedissonClient {
    /// A client with a random UUID.
    pub fn new() -> RedissonClient {
        RedissonClient {
            uuid: random_uuid(),
        }
    }

    /// `getLockName(threadId)`: `<uuid>:<threadId>`, the RLock/FairLock/FencedLock hash field
    /// and the read lock's field.
    pub fn lock_name(&self, thread_id: u64) -> String {
        format!("{}:{thread_id}", self.uuid)
    }

    /// The write lock's hash field: `<uuid>:<threadId>:write`.
    pub fn write_lock_name(&self, thread_id: u64) -> String {
        format!("{}:{thread_id}:write", self.uuid)
    }

    /// The read lock's per-acquisition timeout keys' prefix:
    /// `{name}:<uuid>:<threadId>:rwlock_timeout` (then `:<n>`).
    pub fn rw_timeout_prefix(&self, name: &str, thread_id: u64) -> String {
        redisson_suffix_name(
            name,
            &format!("{}:rwlock_timeout", self.lock_name(thread_id)),
        )
    }

    /// The FairLock per-waiter channel: `redisson_lock__channel:{name}:<uuid>:<threadId>`.
    pub fn fair_waiter_channel(&self, name: &str, thread_id: u64) -> String {
        format!("{}:{}", rlock_channel(name), self.lock_name(thread_id))
    }

    /// `RLock.tryLock` (one attempt): `None` = acquired or re-entered (the field counts
    /// entries), `Some(pttl)` = held by another thread.
    pub async fn rlock_try_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<i64>> {
        RLOCK_TRY_LOCK
            .key(name)
            .arg(lease_ms)
            .arg(self.lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson tryLock {name}"))
    }

    /// `RLock.unlock`: `None` = not held by this thread, `Some(false)` = one re-entry released
    /// (lease reset to `lease_ms`), `Some(true)` = fully released (hash deleted, `0` published on
    /// `redisson_lock__channel:{name}`).
    pub async fn rlock_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<bool>> {
        let r: Option<i64> = RLOCK_UNLOCK
            .key(name)
            .key(rlock_channel(name))
            .arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
            .arg(self.lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson unlock {name}"))?;
        Ok(r.map(|v| v == 1))
    }

    /// The watchdog's renewal (every `lease / 3`, default 10 s of 30 s): `true` if this thread
    /// still holds the lock and its PTTL was reset to `lease_ms`.
    pub async fn rlock_renew(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<bool> {
        let r: i64 = RLOCK_RENEW
            .key(name)
            .arg(lease_ms)
            .arg(self.lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson renew {name}"))?;
        Ok(r == 1)
    }

    /// `RFairLock.tryLock` (one attempt, `wait_ms` = Redisson's `threadWaitTime`, default 5 s,
    /// or the caller's wait time): `None` = acquired or re-entered; `Some(ttl)` = queued (or
    /// already queued) with roughly this long to wait. A queued thread is pushed onto
    /// `redisson_lock_queue:{name}` with deadline `previous deadline (or lock PTTL) + wait_ms +
    /// now_ms` in `redisson_lock_timeout:{name}`; waiters whose deadline is `<= now_ms` are
    /// dropped from the head first.
    pub async fn fair_try_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        wait_ms: u64,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        FAIR_TRY_LOCK
            .key(name)
            .key(fair_queue_key(name))
            .key(fair_timeout_key(name))
            .arg(lease_ms)
            .arg(self.lock_name(thread_id))
            .arg(wait_ms)
            .arg(now_ms)
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson fair tryLock {name}"))
    }

    /// `RFairLock.unlock`: like [`Self::rlock_unlock`], but the release is published only to the
    /// head waiter's channel `redisson_lock__channel:{name}:<uuid>:<tid>`. Also `Some(true)` when
    /// the lock was already gone.
    pub async fn fair_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
        now_ms: i64,
    ) -> Result<Option<bool>> {
        let r: Option<i64> = FAIR_UNLOCK
            .key(name)
            .key(fair_queue_key(name))
            .key(fair_timeout_key(name))
            .key(rlock_channel(name))
            .arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
            .arg(self.lock_name(thread_id))
            .arg(now_ms)
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson fair unlock {name}"))?;
        Ok(r.map(|v| v == 1))
    }

    /// `RReadWriteLock.readLock().tryLock`: `None` = acquired (field `<uuid>:<tid>` counts
    /// entries, one `{name}:<uuid>:<tid>:rwlock_timeout:<n>` string with PX per entry),
    /// `Some(pttl)` = write-locked by another.
    pub async fn rw_read_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<i64>> {
        RW_READ_LOCK
            .key(name)
            .key(self.rw_timeout_prefix(name, thread_id))
            .arg(lease_ms)
            .arg(self.lock_name(thread_id))
            .arg(self.write_lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson read lock {name}"))
    }

    /// `RReadWriteLock.writeLock().tryLock`: `None` = acquired (field `<uuid>:<tid>:write`),
    /// `Some(pttl)` = held by readers or another writer.
    pub async fn rw_write_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<i64>> {
        RW_WRITE_LOCK
            .key(name)
            .arg(lease_ms)
            .arg(self.write_lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson write lock {name}"))
    }

    /// Read unlock: `None` = not held, `Some(false)` = other holders remain, `Some(true)` = the
    /// hash was deleted and `0` published on `redisson_rwlock:{name}`.
    pub async fn rw_read_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
    ) -> Result<Option<bool>> {
        let prefix = self.rw_timeout_prefix(name, thread_id);
        // `getKeyPrefix`: the timeout prefix up to ":<uuid>:<tid>" (that is, `{name}`).
        let key_prefix = prefix
            .split(&format!(":{}", self.lock_name(thread_id)))
            .next()
            .unwrap_or_default()
            .to_string();
        let r: Option<i64> = RW_READ_UNLOCK
            .key(name)
            .key(rw_channel(name))
            .key(&prefix)
            .key(key_prefix)
            .arg(UNLOCK_MESSAGE)
            .arg(self.lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson read unlock {name}"))?;
        Ok(r.map(|v| v == 1))
    }

    /// Write unlock: `None` = not held by this writer, `Some(false)` = one re-entry released,
    /// `Some(true)` = released (hash deleted and published, or `mode` set back to `read` when
    /// this thread also holds read entries).
    pub async fn rw_write_unlock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<Option<bool>> {
        let r: Option<i64> = RW_WRITE_UNLOCK
            .key(name)
            .key(rw_channel(name))
            .arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
            .arg(self.write_lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson write unlock {name}"))?;
        Ok(r.map(|v| v == 1))
    }

    /// `RSemaphore.tryAcquire(permits)`: `true` when the string's value was at least `permits`
    /// and was decremented.
    pub async fn semaphore_try_acquire(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: u64,
    ) -> Result<bool> {
        let r: i64 = SEMAPHORE_TRY_ACQUIRE
            .key(name)
            .arg(permits)
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson semaphore tryAcquire {name}"))?;
        Ok(r == 1)
    }

    /// `RSemaphore.release(permits)`: INCRBY and publish the new value on `redisson_sc:{name}`.
    pub async fn semaphore_release(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: u64,
    ) -> Result<()> {
        SEMAPHORE_RELEASE
            .key(name)
            .key(semaphore_channel(name))
            .arg(permits)
            .invoke_async::<()>(conn)
            .await
            .with_context(|| format!("Redisson semaphore release {name}"))
    }

    /// `RSemaphore.trySetPermits(permits)`: `true` if the semaphore did not exist and now has
    /// `permits` (published on `redisson_sc:{name}`).
    pub async fn semaphore_set_permits(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        permits: u64,
    ) -> Result<bool> {
        let r: i64 = SEMAPHORE_TRY_SET_PERMITS
            .key(name)
            .key(semaphore_channel(name))
            .arg(permits)
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson semaphore trySetPermits {name}"))?;
        Ok(r == 1)
    }

    /// `RFencedLock.tryLockAndGetToken` (one attempt): the RLock hash plus `INCR
    /// redisson_lock_token:{name}` on every acquisition (re-entry included).
    pub async fn fenced_try_lock(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        thread_id: u64,
        lease_ms: u64,
    ) -> Result<FencedAttempt> {
        let (pttl, token): (i64, i64) = FENCED_TRY_LOCK
            .key(name)
            .key(fenced_token_key(name))
            .arg(lease_ms)
            .arg(self.lock_name(thread_id))
            .invoke_async(conn)
            .await
            .with_context(|| format!("Redisson fenced tryLock {name}"))?;
        Ok(if pttl == -1 {
            FencedAttempt::Acquired(token)
        } else {
            FencedAttempt::Held(pttl)
        })
    }

    /// `RFencedLock.unlock` is RLock's unlock (same hash, same channel); the token counter stays.
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

// ---------------------------------------------------------------------------------------------
// python-redis-lock
// ---------------------------------------------------------------------------------------------

/// python-redis-lock 4.x `Lock.UNLOCK_SCRIPT`. KEYS = [lock:<name>, lock-signal:<name>];
/// ARGV = [token, signal_expire ms].
static PY_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 1
else
    redis.call("del", KEYS[2])
    redis.call("lpush", KEYS[2], 1)
    redis.call("pexpire", KEYS[2], ARGV[2])
    redis.call("del", KEYS[1])
    return 0
end"#,
    )
});

/// python-redis-lock 4.x `Lock.EXTEND_SCRIPT` (used by `extend()` and the auto-renewal thread).
/// KEYS = [lock:<name>]; ARGV = [token, expire s].
static PY_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 1
elseif redis.call("ttl", KEYS[1]) < 0 then
    return 2
else
    redis.call("expire", KEYS[1], ARGV[2])
    return 0
end"#,
    )
});

/// python-redis-lock (`redis_lock.Lock`): `lock:<name>` holds a 32-hex-character token (SET NX
/// EX); waiters block in `BLPOP lock-signal:<name>`; release LPUSHes `1` onto the signal list
/// and gives it `signal_expire` (default 1000 ms) PEXPIRE.
pub struct PyRedisLock;

impl PyRedisLock {
    /// Default `signal_expire` of `redis_lock.Lock`, in ms.
    pub const SIGNAL_EXPIRE_MS: u64 = 1000;

    /// `lock:<name>`
    pub fn key(name: &str) -> String {
        format!("lock:{name}")
    }

    /// `lock-signal:<name>`
    pub fn signal_key(name: &str) -> String {
        format!("lock-signal:{name}")
    }

    /// `Lock.acquire(blocking=False)`: `SET lock:<name> <token> NX EX expire_s`; `Some(token)`
    /// when acquired.
    pub async fn acquire(
        conn: &mut MultiplexedConnection,
        name: &str,
        expire_s: u64,
    ) -> Result<Option<String>> {
        let token = random_token();
        let set: Option<String> = redis::cmd("SET")
            .arg(Self::key(name))
            .arg(&token)
            .arg("NX")
            .arg("EX")
            .arg(expire_s)
            .query_async(conn)
            .await
            .with_context(|| format!("python-redis-lock acquire {name}"))?;
        Ok(set.map(|_| token))
    }

    /// `Lock.release()`: `true` when released (the key held `token`), `false` when it did not
    /// (python-redis-lock raises `NotAcquired` then).
    pub async fn release(
        conn: &mut MultiplexedConnection,
        name: &str,
        token: &str,
    ) -> Result<bool> {
        let r: i64 = PY_UNLOCK
            .key(Self::key(name))
            .key(Self::signal_key(name))
            .arg(token)
            .arg(Self::SIGNAL_EXPIRE_MS)
            .invoke_async(conn)
            .await
            .with_context(|| format!("python-redis-lock release {name}"))?;
        Ok(r == 0)
    }

    /// `Lock.extend(expire)`: `0` = extended, `1` = not held with `token`, `2` = no expiry set.
    pub async fn extend(
        conn: &mut MultiplexedConnection,
        name: &str,
        token: &str,
        expire_s: u64,
    ) -> Result<i64> {
        PY_EXTEND
            .key(Self::key(name))
            .arg(token)
            .arg(expire_s)
            .invoke_async(conn)
            .await
            .with_context(|| format!("python-redis-lock extend {name}"))
    }
}

/// What a blocking `Lock.acquire()` does between attempts: `BLPOP lock-signal:<name> timeout_s`
/// on a connection of its own (so `CLIENT LIST` shows it with `flags=b`, `cmd=blpop`). `true` when
/// a release signal was popped, `false` on timeout. Run it in a task and drop/abort it to stop
/// waiting (the connection closes).
pub async fn py_lock_wait(url: &str, name: &str, timeout_s: u64) -> Result<bool> {
    let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(None);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connect to {url}"))?;
    let popped: Option<(String, String)> = redis::cmd("BLPOP")
        .arg(PyRedisLock::signal_key(name))
        .arg(timeout_s)
        .query_async(&mut conn)
        .await
        .with_context(|| format!("BLPOP lock-signal:{name}"))?;
    Ok(popped.is_some())
}

// ---------------------------------------------------------------------------------------------
// ShedLock
// ---------------------------------------------------------------------------------------------

/// `1970-01-01T00:00:00.000Z`-style UTC time of `ms` since the epoch.
pub fn iso8601_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// ShedLock's `RedisLockProvider.lock`: `SET key "ADDED:<iso-8601 now>@<host>:<uuid>" NX PX
/// lock_at_most_for_ms` (ShedLock's key is `job-lock:<env>:<name>`; pass it whole). `true` when
/// acquired.
pub async fn shedlock_lock(
    conn: &mut MultiplexedConnection,
    key: &str,
    host: &str,
    lock_at_most_for_ms: u64,
) -> Result<bool> {
    let value = format!("ADDED:{}@{host}:{}", iso8601_utc(now_ms()), random_uuid());
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(lock_at_most_for_ms)
        .query_async(conn)
        .await
        .with_context(|| format!("ShedLock lock {key}"))?;
    Ok(set.is_some())
}

/// ShedLock's unlock: `DEL key` when `lock_at_least_for` has passed (`keep_ms == 0`), otherwise
/// the key stays until then (`SET key <value> XX PX keep_ms` with the value it had).
pub async fn shedlock_unlock(
    conn: &mut MultiplexedConnection,
    key: &str,
    keep_ms: u64,
) -> Result<()> {
    if keep_ms == 0 {
        redis::cmd("DEL")
            .arg(key)
            .query_async::<()>(conn)
            .await
            .with_context(|| format!("ShedLock unlock {key}"))?;
        return Ok(());
    }
    let value: Option<String> = redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .with_context(|| format!("ShedLock unlock {key}"))?;
    if let Some(value) = value {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("XX")
            .arg("PX")
            .arg(keep_ms)
            .query_async::<()>(conn)
            .await
            .with_context(|| format!("ShedLock unlock {key}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Redlock
// ---------------------------------------------------------------------------------------------

/// Redlock (redis.io's algorithm, as Redisson's `RedissonRedLock`/redlock-py do it) over
/// independent masters: the same `SET key token NX PX ttl` on every master, held when a majority
/// (`n/2 + 1`) got it and time is left of the validity (`ttl - elapsed - drift`, drift =
/// `ttl/100 + 2` ms).
pub struct Redlock {
    pub conns: Vec<MultiplexedConnection>,
}

impl Redlock {
    /// One connection per master URL.
    pub async fn connect(urls: &[String]) -> Result<Redlock> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            conns.push(crate::support::redis::connect(url).await?);
        }
        Ok(Redlock { conns })
    }

    /// `n/2 + 1`
    pub fn quorum(&self) -> usize {
        self.conns.len() / 2 + 1
    }

    /// One Redlock attempt: `true` when a majority was reached within the validity time;
    /// otherwise the key is released (compare-and-delete) on every master and `false` returned.
    pub async fn lock(&self, key: &str, token: &str, ttl_ms: u64) -> Result<bool> {
        let started = std::time::Instant::now();
        let all: Vec<usize> = (0..self.conns.len()).collect();
        let got = self.set_on(&all, key, token, ttl_ms).await;
        let elapsed = started.elapsed().as_millis() as u64;
        let drift = ttl_ms / 100 + 2;
        let valid = ttl_ms > elapsed + drift;
        if got >= self.quorum() && valid {
            return Ok(true);
        }
        self.unlock(key, token).await?;
        Ok(false)
    }

    /// Compare-and-delete on every master; how many deleted it.
    pub async fn unlock(&self, key: &str, token: &str) -> Result<usize> {
        let releases = self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move { token_lock_release(&mut c, key, token).await }
        });
        let results = futures::future::join_all(releases).await;
        let mut deleted = 0;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(true) => deleted += 1,
                Ok(false) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // A dead master is expected in Redlock tests; fail only when none answered.
        match first_error {
            Some(e) if deleted == 0 => Err(e),
            _ => Ok(deleted),
        }
    }

    /// `SET key token NX PX ttl_ms` on the masters in `indices` only (no majority check, no
    /// rollback): builds minority/split states for tests. Returns how many were set.
    pub async fn lock_on(
        &self,
        indices: &[usize],
        key: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<usize> {
        if let Some(bad) = indices.iter().find(|i| **i >= self.conns.len()) {
            anyhow::bail!("no master {bad} (have {})", self.conns.len());
        }
        Ok(self.set_on(indices, key, token, ttl_ms).await)
    }

    /// SET NX PX on `indices` concurrently, each with a short timeout (a dead master counts as a
    /// failure, as in Redlock); how many succeeded.
    async fn set_on(&self, indices: &[usize], key: &str, token: &str, ttl_ms: u64) -> usize {
        let per_node = Duration::from_millis((ttl_ms / 10).clamp(50, 1000));
        let sets = indices.iter().map(|&i| {
            let mut c = self.conns[i].clone();
            async move {
                tokio::time::timeout(per_node, token_lock_acquire(&mut c, key, token, ttl_ms))
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .unwrap_or(false)
            }
        });
        futures::future::join_all(sets)
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count()
    }
}

// ---------------------------------------------------------------------------------------------
// Subscribers
// ---------------------------------------------------------------------------------------------

/// A pub/sub connection subscribed to one channel (counted by `PUBSUB NUMSUB`) until dropped.
/// Messages published on it are kept and can be read with [`SubscriberHandle::next_message`].
pub struct SubscriberHandle {
    channel: String,
    messages: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    task: tokio::task::JoinHandle<()>,
}

impl SubscriberHandle {
    /// The subscribed channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The next message's payload, waiting up to `timeout`; `None` on timeout or when the
    /// connection closed.
    pub async fn next_message(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        tokio::time::timeout(timeout, self.messages.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for SubscriberHandle {
    fn drop(&mut self) {
        // Dropping the task drops the pub/sub connection: the server forgets the subscription.
        self.task.abort();
    }
}

/// Subscribes a new connection to `channel` (e.g. [`rlock_channel`]) the way a waiting
/// Redisson client does; returns once the server confirmed the subscription.
pub async fn subscribe_unlock_channel(url: &str, channel: &str) -> Result<SubscriberHandle> {
    let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
    let mut pubsub = tokio::time::timeout(Duration::from_secs(5), client.get_async_pubsub())
        .await
        .map_err(|_| anyhow::anyhow!("pub/sub connect to {url} timed out"))?
        .with_context(|| format!("pub/sub connect to {url}"))?;
    pubsub
        .subscribe(channel)
        .await
        .with_context(|| format!("SUBSCRIBE {channel}"))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = pubsub.on_message();
        while let Some(msg) = stream.next().await {
            if tx.send(msg.get_payload_bytes().to_vec()).is_err() {
                // Nobody reads the messages; stay subscribed anyway.
                continue;
            }
        }
    });
    Ok(SubscriberHandle {
        channel: channel.to_string(),
        messages: rx,
        task,
    })
}
