//! Real Redis lock clients, each doing what its library sends (the same commands, Lua with the
//! same effects, the same key and channel names), so tests see the layouts of
//! `shared/LOCK_LAYOUTS.md` as the libraries leave them. The Redisson and ShedLock clients
//! follow those libraries' current sources (each item names the file and version it follows;
//! the scripts are written here from what the sources do, not copied), and reproduce older
//! behaviour where it changed:
//!
//! * plain token locks ([`token_lock_acquire`], [`token_lock_release`]) and the legacy SETNX
//!   patterns ([`setnx_no_ttl`], [`setnx_deadline`]);
//! * Redisson ([`RedissonClient`], 4.7.0 by default, [`RedissonProfile`] for the unlock latch
//!   of 3.24+, `SPUBLISH` on Cluster 7 and the pre-3.32 FairLock scripts): RLock, FairLock,
//!   ReadWriteLock, Semaphore, PermitExpirableSemaphore, CountDownLatch, FencedLock, and the
//!   deprecated [`RedissonRedLock`];
//! * (python-redis-lock, redis-py, pottery and kazoo are on PyPI: tests drive the real ones,
//!   [`crate::support::python::PyClient`]);
//! * ShedLock's Redis providers ([`shedlock_acquire`], [`ShedLockHandle`], before and since
//!   6.7.0; [`shedlock_lock`], [`shedlock_unlock`]);
//! * Spring Integration's `RedisLockRegistry` ([`SpringLockRegistry`], 7.2.0-SNAPSHOT at
//!   f369e899, on servers without Redis 8.4's CAS/CAD as on those with it): obtain, renew,
//!   SPIN_LOCK and PUB_SUB_LOCK unlock and waits, and the registry's pattern-subscribed unlock
//!   listener ([`SpringUnlockListener`]);
//! * Redlock over independent masters with `SET NX` tokens ([`Redlock`]);
//! * waiters subscribed with `SUBSCRIBE` or `SSUBSCRIBE` ([`subscribe_waiter`],
//!   [`subscribe_unlock_channel`]) so `PUBSUB NUMSUB` / `SHARDNUMSUB` count them.
//!
//! Nothing here waits or retries the way the libraries do in their blocking calls: each function
//! is one attempt, and tests drive timing themselves. The exception is Spring's `tryLock`
//! ([`SpringLockRegistry::try_lock_pub_sub`], [`SpringLockRegistry::try_lock_spin`]): how its
//! waiters wake (an unlock message, a poll, or their own timeout) is what its tests are about.
//! Every function needs a connection to the node that owns the keys it touches (in a cluster,
//! [`crate::support::redis::RedisCluster::connection_for`]). All keys and channels of one
//! Redisson object hash to the slot of its name (`name` and `{name}` share a slot; a name with
//! braces keeps its own tag), with one exception: the CountDownLatch channel of a name that has
//! braces (see [`countdown_latch_channel`]).

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
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

mod pubsub;
mod redisson;
mod redlock;
mod shedlock;
mod spring;
mod token;

pub use pubsub::*;
pub use redisson::*;
pub use redlock::*;
pub use shedlock::*;
pub use spring::*;
pub use token::*;
