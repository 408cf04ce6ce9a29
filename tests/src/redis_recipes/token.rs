//! Plain `SET NX PX` token locks and the legacy SETNX patterns. (See the parent module for what these clients follow.)

use super::*;

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
