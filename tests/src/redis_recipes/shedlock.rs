//! ShedLock's Redis providers, before and since 6.7.0. (See the parent module for what these clients follow.)

use super::*;

//
// Source read: lukas-krecan/ShedLock, `providers/redis/shedlock-support-redis/…/
// InternalRedisLockProvider.java` at tag shedlock-parent-7.9.0 (commit dbb0ee9; unchanged at
// master 2495b14, 2026-08-21), shared by the Spring, Jedis and Lettuce providers since 6.7.0;
// before that `RedisLockProvider.java` at shedlock-parent-6.6.1 (commit a587be3).

/// `1970-01-01T00:00:00.000Z`-style UTC time of `ms` since the epoch.
pub fn iso8601_utc(ms: i64) -> String {
    format!(
        "{}.{:03}Z",
        lockscope_model::zk::format_naive_utc(ms),
        ms.rem_euclid(1000)
    )
}

/// ShedLock's default key prefix (`InternalRedisLockProvider.DEFAULT_KEY_PREFIX`).
pub const SHEDLOCK_KEY_PREFIX: &str = "job-lock";
/// ShedLock's default environment (`ENV_DEFAULT`).
pub const SHEDLOCK_DEFAULT_ENV: &str = "default";

/// Which ShedLock Redis provider generation to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedLockVersion {
    /// Up to 6.6.x: value `ADDED:<iso>@<host>`; unlock/extend rewrite the value with the
    /// current time (`SET … XX PX`); unlock after lockAtLeastFor is a plain `DEL`.
    Before6_7,
    /// 6.7.0 and later: value `ADDED:<iso>@<host>:<uuid>`, kept for the lock's life.
    /// `safe_update` (builder option, default `false`): unlock/extend only when the key still
    /// holds this lock's value (compare-and-delete / compare-and-PEXPIRE Lua); otherwise
    /// `DEL` / `SET key value XX PX`.
    Since6_7 { safe_update: bool },
}

/// `<prefix>:<env>:<name>` (`buildKey`), with the default prefix `job-lock`.
pub fn shedlock_key(env: &str, name: &str) -> String {
    format!("{SHEDLOCK_KEY_PREFIX}:{env}:{name}")
}

/// The value ShedLock writes at `at_ms` (`buildValue`): `ADDED:<iso-8601 UTC, exactly 3
/// fractional digits>@<hostname>`, plus `:<random UUID>` since 6.7.0.
pub fn shedlock_value(version: ShedLockVersion, at_ms: i64, host: &str) -> String {
    match version {
        ShedLockVersion::Before6_7 => format!("ADDED:{}@{host}", iso8601_utc(at_ms)),
        ShedLockVersion::Since6_7 { .. } => {
            format!("ADDED:{}@{host}:{}", iso8601_utc(at_ms), random_uuid())
        }
    }
}

/// ShedLock 6.7.0+ `updLuaScript` semantics: PEXPIRE only while the key holds this lock's
/// value. KEYS = [key]; ARGV = [value, ms].
static SHEDLOCK_SAFE_PEXPIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('pexpire', KEYS[1], ARGV[2])",
    )
});

/// A ShedLock lock this process took (`RedisLock` in the provider).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShedLockHandle {
    pub version: ShedLockVersion,
    pub key: String,
    /// The value written at acquisition.
    pub value: String,
    pub host: String,
}

/// `SET key value XX PX ms` (ShedLock's `setIfPresent`); `true` when set.
async fn set_if_present(
    conn: &mut MultiplexedConnection,
    key: &str,
    value: &str,
    ms: u64,
) -> Result<bool> {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("XX")
        .arg("PX")
        .arg(ms)
        .query_async(conn)
        .await
        .with_context(|| format!("ShedLock SET {key} XX PX"))?;
    Ok(set.is_some())
}

/// `LockProvider.lock` (follows `InternalRedisLockProvider.lock` at ShedLock 7.9.0, commit
/// dbb0ee9, or `RedisLockProvider.lock` at 6.6.1, commit a587be3): `SET key value NX PX
/// lock_at_most_for_ms`; the handle when acquired.
pub async fn shedlock_acquire(
    conn: &mut MultiplexedConnection,
    version: ShedLockVersion,
    key: &str,
    host: &str,
    lock_at_most_for_ms: u64,
) -> Result<Option<ShedLockHandle>> {
    let value = shedlock_value(version, now_ms(), host);
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&value)
        .arg("NX")
        .arg("PX")
        .arg(lock_at_most_for_ms)
        .query_async(conn)
        .await
        .with_context(|| format!("ShedLock lock {key}"))?;
    Ok(set.map(|_| ShedLockHandle {
        version,
        key: key.to_string(),
        value,
        host: host.to_string(),
    }))
}

impl ShedLockHandle {
    /// `SimpleLock.unlock` (follows `InternalRedisLockProvider.RedisLock.doUnlock` at ShedLock
    /// 7.9.0, commit dbb0ee9, or `RedisLockProvider.RedisLock.doUnlock` at 6.6.1, commit
    /// a587be3). `keep_ms` = ms left until lockAtLeastUntil. `keep_ms <= 0`: delete (6.7.0+
    /// safe: only if the value is still ours). Otherwise the key stays for `keep_ms`: 6.7.0+
    /// safe: PEXPIRE if still ours; 6.7.0+ default: `SET key <our value> XX PX keep_ms`;
    /// before 6.7.0: `SET key "ADDED:<now>@<host>" XX PX keep_ms` (a fresh timestamp).
    pub async fn unlock(&self, conn: &mut MultiplexedConnection, keep_ms: i64) -> Result<()> {
        if keep_ms <= 0 {
            match self.version {
                ShedLockVersion::Since6_7 { safe_update: true } => {
                    token_lock_release(conn, &self.key, &self.value).await?;
                }
                _ => {
                    redis::cmd("DEL")
                        .arg(&self.key)
                        .query_async::<()>(conn)
                        .await
                        .with_context(|| format!("ShedLock unlock {}", self.key))?;
                }
            }
            return Ok(());
        }
        self.set_expiration(conn, keep_ms as u64).await?;
        Ok(())
    }

    /// `SimpleLock.extend` (same sources): the key's expiry becomes `lock_at_most_for_ms`
    /// (6.7.0+ safe: only if still ours; before 6.7.0 with a fresh value). `true` when
    /// extended.
    pub async fn extend(
        &self,
        conn: &mut MultiplexedConnection,
        lock_at_most_for_ms: u64,
    ) -> Result<bool> {
        self.set_expiration(conn, lock_at_most_for_ms).await
    }

    async fn set_expiration(&self, conn: &mut MultiplexedConnection, ms: u64) -> Result<bool> {
        match self.version {
            ShedLockVersion::Before6_7 => {
                let fresh = shedlock_value(self.version, now_ms(), &self.host);
                set_if_present(conn, &self.key, &fresh, ms).await
            }
            ShedLockVersion::Since6_7 { safe_update: false } => {
                set_if_present(conn, &self.key, &self.value, ms).await
            }
            ShedLockVersion::Since6_7 { safe_update: true } => {
                let r: i64 = SHEDLOCK_SAFE_PEXPIRE
                    .key(&self.key)
                    .arg(&self.value)
                    .arg(ms)
                    .invoke_async(conn)
                    .await
                    .with_context(|| format!("ShedLock safe update {}", self.key))?;
                Ok(r == 1)
            }
        }
    }
}

/// ShedLock 6.7.0+ `RedisLockProvider.lock` with the default `safeUpdate = false` (see
/// [`shedlock_acquire`]): `SET key "ADDED:<iso-8601 now>@<host>:<uuid>" NX PX
/// lock_at_most_for_ms` (ShedLock's key is `job-lock:<env>:<name>`; pass it whole). `true` when
/// acquired.
pub async fn shedlock_lock(
    conn: &mut MultiplexedConnection,
    key: &str,
    host: &str,
    lock_at_most_for_ms: u64,
) -> Result<bool> {
    let held = shedlock_acquire(
        conn,
        ShedLockVersion::Since6_7 { safe_update: false },
        key,
        host,
        lock_at_most_for_ms,
    )
    .await?;
    Ok(held.is_some())
}

/// ShedLock 6.7.0+ unlock with the default `safeUpdate = false` for a caller that did not keep
/// the handle: `DEL key` when `lock_at_least_for` has passed (`keep_ms == 0`), otherwise `SET
/// key <the value it holds> XX PX keep_ms` (ShedLock sets the value it wrote, which is the same
/// while the lock is still its own). See [`ShedLockHandle::unlock`].
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
        set_if_present(conn, key, &value, keep_ms).await?;
    }
    Ok(())
}
