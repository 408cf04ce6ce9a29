//! Smoke test of the Redisson and ShedLock clients in `lockscope_tests::redis_recipes` against
//! real `redis-server`s: the layout each leaves (key types, names with and without braces, the
//! unlock latch, the FairLock stale-waiter cleanup, the ReadWriteLock messages, permit ids as 16
//! raw bytes, the CountDownLatch channel, RedLock hashes on independent masters, ShedLock values
//! before and since 6.7.0) and where notifications go (`SPUBLISH` reaching an `SSUBSCRIBE` waiter
//! on a 3-master Cluster, `PUBLISH` not reaching it).
//!
//! "Nothing arrived" is checked without sleeping: the test publishes a marker after the action
//! and expects the marker to be the next message (pub/sub keeps order per connection).

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use lockscope_tests::harness::eventually_every;
use lockscope_tests::redis_recipes::{
    self as rr, countdown_latch_channel, fair_queue_key, fair_timeout_key, fenced_token_key,
    permit_timeout_key, rlock_channel, rw_channel, semaphore_channel, shedlock_key,
    subscribe_unlock_channel, subscribe_waiter, unlock_latch_key, FairLockScripts, FencedAttempt,
    PermitAttempt, PubSubKind, PublishCommand, RedissonClient, RedissonProfile, RedissonRedLock,
    ShedLockVersion, SubscriberHandle, UnlockRequest,
};
use lockscope_tests::support::redis::{RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;

const LEASE: u64 = 30_000;
/// How long a message that should arrive may take.
const DELIVERY: Duration = Duration::from_secs(5);

async fn q<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, args: &[&str]) -> Result<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(conn).await.with_context(|| args.join(" "))
}

async fn key_type(conn: &mut MultiplexedConnection, key: &str) -> Result<String> {
    q(conn, &["TYPE", key]).await
}

async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> Result<i64> {
    q(conn, &["PTTL", key]).await
}

async fn exists(conn: &mut MultiplexedConnection, key: &str) -> Result<bool> {
    Ok(q::<i64>(conn, &["EXISTS", key]).await? == 1)
}

/// Every key matching `pattern` (SCAN, never KEYS).
async fn scan(conn: &mut MultiplexedConnection, pattern: &str) -> Result<Vec<String>> {
    let mut cursor = "0".to_string();
    let mut out = Vec::new();
    loop {
        let (next, keys): (String, Vec<String>) =
            q(conn, &["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"]).await?;
        out.extend(keys);
        if next == "0" {
            out.sort();
            return Ok(out);
        }
        cursor = next;
    }
}

async fn next_is(sub: &mut SubscriberHandle, want: &str) -> Result<()> {
    let got = sub.next_message(DELIVERY).await;
    ensure!(
        got.as_deref() == Some(want.as_bytes()),
        "{}: expected {want:?}, got {:?}",
        sub.channel(),
        got.map(|g| String::from_utf8_lossy(&g).into_owned())
    );
    Ok(())
}

/// Checks that `sub` got nothing so far: publishes a marker on its channel with the publish
/// command of its kind, through `conn`, and expects the marker as the next message.
async fn nothing_before_marker(
    conn: &mut MultiplexedConnection,
    sub: &mut SubscriberHandle,
) -> Result<()> {
    let marker = format!("marker-{}", rr::random_token());
    let _: i64 = q(
        conn,
        &[
            sub.kind().publish_command().as_str(),
            sub.channel(),
            &marker,
        ],
    )
    .await?;
    next_is(sub, &marker).await
}

/// Waits until `check` answers true: the harness's [`eventually_every`], trying at least every
/// 20 ms.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    eventually_every(timeout, Duration::from_millis(20), what, async || {
        Ok(check().await?.then_some(()))
    })
    .await
}

/// Reads `events` (a `__keyevent@0__:set` subscriber) up to and including the event of a fresh
/// marker key SET through `conn`, so the next event read is one that happens after this call.
async fn skip_past_marker(
    conn: &mut MultiplexedConnection,
    events: &mut SubscriberHandle,
) -> Result<()> {
    let marker = format!("marker-{}", rr::random_token());
    let _: () = q(conn, &["SET", &marker, "x"]).await?;
    loop {
        let event = events
            .next_message(DELIVERY)
            .await
            .context("marker's set event")?;
        if event == marker.as_bytes() {
            return Ok(());
        }
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlock_hash_unlock_latch_watchdog_and_force_unlock() -> Result<()> {
    // Key-event notifications for string commands and DEL, to see the transient latch.
    let server = RedisServer::start_with(&["--notify-keyspace-events", "E$g"]).await?;
    let url = server.url();
    let mut conn = server.connection().await?;
    let mut sets = subscribe_unlock_channel(&url, "__keyevent@0__:set").await?;
    let a = RedissonClient::new();
    ensure!(a.profile == RedissonProfile::V4_7);

    for (name, channel, latch_prefix) in [
        (
            "orders",
            "redisson_lock__channel:{orders}",
            "redisson_unlock_latch:{orders}:",
        ),
        (
            "lock:{order}",
            "redisson_lock__channel:lock:{order}",
            "redisson_unlock_latch:lock:{order}:",
        ),
    ] {
        ensure!(rlock_channel(name) == channel);
        ensure!(a.rlock_try_lock(&mut conn, name, 1, LEASE).await?.is_none());
        ensure!(a.rlock_try_lock(&mut conn, name, 1, LEASE).await?.is_none());
        ensure!(key_type(&mut conn, name).await? == "hash");
        let fields: Vec<(String, String)> = q(&mut conn, &["HGETALL", name]).await?;
        ensure!(
            fields == vec![(a.lock_name(1), "2".to_string())],
            "{fields:?}"
        );
        let ttl = pttl(&mut conn, name).await?;
        ensure!(
            (LEASE as i64 - 2_000..=LEASE as i64).contains(&ttl),
            "PTTL {ttl}"
        );
        let mut waiter = subscribe_unlock_channel(&url, channel).await?;
        ensure!(rr::pubsub_subscribers(&mut conn, PubSubKind::Plain, channel).await? == 1);

        // One re-entry released: latch "0", kept because the client "died" before its DEL.
        let first = UnlockRequest::new().keeping_latch();
        ensure!(is_hex(&first.id, 32), "{}", first.id);
        ensure!((16_000..=20_000).contains(&first.latch_px_ms));
        ensure!(
            a.rlock_unlock_request(&mut conn, name, 1, LEASE, &first)
                .await?
                == Some(false)
        );
        let latch = unlock_latch_key(name, &first.id);
        ensure!(latch == format!("{latch_prefix}{}", first.id), "{latch}");
        ensure!(key_type(&mut conn, &latch).await? == "string");
        ensure!(q::<String>(&mut conn, &["GET", &latch]).await? == "0");
        let ttl = pttl(&mut conn, &latch).await?;
        ensure!(
            ttl > 0 && ttl <= first.latch_px_ms as i64,
            "latch PTTL {ttl}"
        );
        // A retry of the same request is answered from the latch and changes nothing.
        ensure!(
            a.rlock_unlock_request(&mut conn, name, 1, LEASE, &first)
                .await?
                == Some(false)
        );
        ensure!(q::<String>(&mut conn, &["HGET", name, &a.lock_name(1)]).await? == "1");

        // Released: hash gone, "0" on the channel, latch "1".
        let second = UnlockRequest::new().keeping_latch();
        ensure!(
            a.rlock_unlock_request(&mut conn, name, 1, LEASE, &second)
                .await?
                == Some(true)
        );
        ensure!(!exists(&mut conn, name).await?);
        next_is(&mut waiter, "0").await?;
        let latch2 = unlock_latch_key(name, &second.id);
        ensure!(q::<String>(&mut conn, &["GET", &latch2]).await? == "1");
        // Not held: no latch written.
        let third = UnlockRequest::new().keeping_latch();
        ensure!(a
            .rlock_unlock_request(&mut conn, name, 1, LEASE, &third)
            .await?
            .is_none());
        ensure!(!exists(&mut conn, &unlock_latch_key(name, &third.id)).await?);

        // The default unlock writes a latch and DELs it right after the reply.
        ensure!(a.rlock_try_lock(&mut conn, name, 1, LEASE).await?.is_none());
        skip_past_marker(&mut conn, &mut sets).await?;
        ensure!(a.rlock_unlock(&mut conn, name, 1, LEASE).await? == Some(true));
        next_is(&mut waiter, "0").await?;
        let event = sets
            .next_message(DELIVERY)
            .await
            .context("no set event for the latch")?;
        let event = String::from_utf8(event)?;
        ensure!(
            event.starts_with(latch_prefix) && is_hex(&event[latch_prefix.len()..], 32),
            "{event}"
        );
        let mut latches = scan(&mut conn, &format!("{latch_prefix}*")).await?;
        latches.retain(|k| k.starts_with(latch_prefix));
        let mut kept = vec![latch.clone(), latch2.clone()];
        kept.sort();
        ensure!(latches == kept, "{latches:?}");
    }

    // Before 3.24 there is no latch at all: the unlock sets nothing.
    let old = RedissonClient::with_profile(RedissonProfile::V3_23);
    ensure!(old
        .rlock_try_lock(&mut conn, "legacy", 3, LEASE)
        .await?
        .is_none());
    let mut waiter = subscribe_unlock_channel(&url, &rlock_channel("legacy")).await?;
    skip_past_marker(&mut conn, &mut sets).await?;
    ensure!(old.rlock_unlock(&mut conn, "legacy", 3, LEASE).await? == Some(true));
    next_is(&mut waiter, "0").await?;
    let _: () = q(&mut conn, &["SET", "after-legacy", "x"]).await?;
    next_is(&mut sets, "after-legacy").await?;

    // Watchdog: only the holder renews, to the given lease.
    ensure!(a.rlock_try_lock(&mut conn, "wd", 7, 5_000).await?.is_none());
    ensure!(pttl(&mut conn, "wd").await? <= 5_000);
    ensure!(a.rlock_renew(&mut conn, "wd", 7, LEASE).await?);
    ensure!(pttl(&mut conn, "wd").await? > 5_000);
    ensure!(!a.rlock_renew(&mut conn, "wd", 8, LEASE).await?);
    ensure!(
        !RedissonClient::new()
            .rlock_renew(&mut conn, "wd", 7, LEASE)
            .await?
    );

    // forceUnlock: DEL whoever holds it and "0" on the channel; nothing when already free.
    let mut waiter = subscribe_unlock_channel(&url, &rlock_channel("wd")).await?;
    let b = RedissonClient::new();
    ensure!(matches!(b.rlock_try_lock(&mut conn, "wd", 1, LEASE).await?, Some(p) if p > 0));
    ensure!(b.rlock_force_unlock(&mut conn, "wd").await?);
    ensure!(!exists(&mut conn, "wd").await?);
    next_is(&mut waiter, "0").await?;
    ensure!(!b.rlock_force_unlock(&mut conn, "wd").await?);
    nothing_before_marker(&mut conn, &mut waiter).await?;
    drop(waiter);
    eventually("unsubscribed after drop", DELIVERY, || {
        let mut c = conn.clone();
        async move {
            Ok(
                rr::pubsub_subscribers(&mut c, PubSubKind::Plain, "redisson_lock__channel:{wd}")
                    .await?
                    == 0,
            )
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_drops_expired_waiters_and_signals_the_new_head() -> Result<()> {
    let server = RedisServer::start().await?;
    let url = server.url();
    let mut conn = server.connection().await?;
    let (a, b) = (RedissonClient::new(), RedissonClient::new());
    const WAIT: u64 = 10_000;

    let name = "lock:{fair}";
    let (queue, zset) = (fair_queue_key(name), fair_timeout_key(name));
    ensure!(queue == "redisson_lock_queue:lock:{fair}");
    ensure!(zset == "redisson_lock_timeout:lock:{fair}");
    ensure!(fair_queue_key("fair") == "redisson_lock_queue:{fair}");
    ensure!(
        b.fair_waiter_channel(name, 1)
            == format!("redisson_lock__channel:lock:{{fair}}:{}:1", b.uuid)
    );

    let now = rr::now_ms();
    ensure!(a
        .fair_try_lock(&mut conn, name, 1, LEASE, WAIT, now)
        .await?
        .is_none());
    for t in 1..=3 {
        ensure!(b
            .fair_try_lock(&mut conn, name, t, LEASE, WAIT, now)
            .await?
            .is_some());
    }
    // tryLock() without a wait never queues.
    ensure!(
        !a.fair_try_lock_once(&mut conn, name, 9, LEASE, WAIT, now)
            .await?
    );
    ensure!(key_type(&mut conn, &queue).await? == "list");
    ensure!(key_type(&mut conn, &zset).await? == "zset");
    let waiting: Vec<String> = q(&mut conn, &["LRANGE", &queue, "0", "-1"]).await?;
    ensure!(
        waiting == vec![b.lock_name(1), b.lock_name(2), b.lock_name(3)],
        "{waiting:?}"
    );
    let score_conn = conn.clone();
    let score = |member: String| {
        let mut c = score_conn.clone();
        let zset = zset.clone();
        async move { q::<Option<i64>>(&mut c, &["ZSCORE", &zset, &member]).await }
    };
    let d1 = score(b.lock_name(1)).await?.context("b:1 deadline")?;
    let d2 = score(b.lock_name(2)).await?.context("b:2 deadline")?;
    let d3 = score(b.lock_name(3)).await?.context("b:3 deadline")?;
    ensure!(
        d1 > now + WAIT as i64 && d1 <= now + (LEASE + WAIT) as i64,
        "{d1} {now}"
    );
    ensure!(
        d2 == d1 + WAIT as i64 && d3 == d2 + WAIT as i64,
        "{d1} {d2} {d3}"
    );

    let mut s1 = subscribe_unlock_channel(&url, &b.fair_waiter_channel(name, 1)).await?;
    let mut s2 = subscribe_unlock_channel(&url, &b.fair_waiter_channel(name, 2)).await?;
    let mut plain = subscribe_unlock_channel(&url, &rlock_channel(name)).await?;

    // Unlock at exactly b:1's deadline: score <= now, so b:1 is dropped and b:2 signalled.
    ensure!(a.fair_unlock(&mut conn, name, 1, LEASE, d1).await? == Some(true));
    next_is(&mut s2, "0").await?;
    nothing_before_marker(&mut conn, &mut s1).await?;
    nothing_before_marker(&mut conn, &mut plain).await?;
    let waiting: Vec<String> = q(&mut conn, &["LRANGE", &queue, "0", "-1"]).await?;
    ensure!(
        waiting == vec![b.lock_name(2), b.lock_name(3)],
        "{waiting:?}"
    );
    ensure!(score(b.lock_name(1)).await?.is_none());

    // One millisecond before b:2's deadline it stays: another thread queues behind, and b:2
    // (the head) acquires, taking WAIT off everyone behind it.
    ensure!(a
        .fair_try_lock(&mut conn, name, 5, LEASE, WAIT, d2 - 1)
        .await?
        .is_some());
    ensure!(b
        .fair_try_lock(&mut conn, name, 2, LEASE, WAIT, d2 - 1)
        .await?
        .is_none());
    let waiting: Vec<String> = q(&mut conn, &["LRANGE", &queue, "0", "-1"]).await?;
    ensure!(
        waiting == vec![b.lock_name(3), a.lock_name(5)],
        "{waiting:?}"
    );
    let d3b = score(b.lock_name(3)).await?.context("b:3 deadline")?;
    ensure!(d3b == d3 - WAIT as i64, "{d3} {d3b}");

    // forceUnlock at b:3's deadline: b:3 dropped first, the new head a:5 signalled.
    let mut s5 = subscribe_unlock_channel(&url, &a.fair_waiter_channel(name, 5)).await?;
    let mut s3 = subscribe_unlock_channel(&url, &b.fair_waiter_channel(name, 3)).await?;
    ensure!(b.fair_force_unlock(&mut conn, name, d3b).await?);
    ensure!(!exists(&mut conn, name).await?);
    next_is(&mut s5, "0").await?;
    nothing_before_marker(&mut conn, &mut s3).await?;
    let waiting: Vec<String> = q(&mut conn, &["LRANGE", &queue, "0", "-1"]).await?;
    ensure!(waiting == vec![a.lock_name(5)], "{waiting:?}");

    // A waiter that gives up leaves, and the ones behind it get WAIT back.
    ensure!(b
        .fair_try_lock(&mut conn, "gate", 1, LEASE, WAIT, now)
        .await?
        .is_none());
    for t in [2, 3] {
        ensure!(b
            .fair_try_lock(&mut conn, "gate", t, LEASE, WAIT, now)
            .await?
            .is_some());
    }
    let g3 = q::<i64>(
        &mut conn,
        &["ZSCORE", &fair_timeout_key("gate"), &b.lock_name(3)],
    )
    .await?;
    b.fair_acquire_failed(&mut conn, "gate", 2, WAIT).await?;
    let waiting: Vec<String> =
        q(&mut conn, &["LRANGE", &fair_queue_key("gate"), "0", "-1"]).await?;
    ensure!(waiting == vec![b.lock_name(3)], "{waiting:?}");
    let g3b = q::<i64>(
        &mut conn,
        &["ZSCORE", &fair_timeout_key("gate"), &b.lock_name(3)],
    )
    .await?;
    ensure!(g3b == g3 - WAIT as i64, "{g3} {g3b}");

    // Before 3.32 the same cleanup runs, but a head without a deadline breaks the script;
    // since then such a head just ends the cleanup.
    let old = RedissonClient::with_profile(RedissonProfile::V3_23);
    ensure!(old.profile.fair == FairLockScripts::Before3_32);
    ensure!(old
        .fair_try_lock(&mut conn, "oldfair", 1, LEASE, WAIT, now)
        .await?
        .is_none());
    ensure!(b
        .fair_try_lock(&mut conn, "oldfair", 1, LEASE, WAIT, now)
        .await?
        .is_some());
    ensure!(
        old.fair_unlock(&mut conn, "oldfair", 1, LEASE, now + 3_600_000)
            .await?
            == Some(true)
    );
    ensure!(q::<i64>(&mut conn, &["LLEN", &fair_queue_key("oldfair")]).await? == 0);
    let _: i64 = q(
        &mut conn,
        &["RPUSH", &fair_queue_key("ghost"), "no-deadline"],
    )
    .await?;
    let broken = old
        .fair_try_lock(&mut conn, "ghost", 1, LEASE, WAIT, now)
        .await;
    ensure!(
        broken
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains("compare")),
        "{broken:?}"
    );
    ensure!(a
        .fair_try_lock(&mut conn, "ghost", 1, LEASE, WAIT, now)
        .await?
        .is_some());
    let waiting: Vec<String> =
        q(&mut conn, &["LRANGE", &fair_queue_key("ghost"), "0", "-1"]).await?;
    ensure!(
        waiting == vec!["no-deadline".to_string(), a.lock_name(1)],
        "{waiting:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_timeouts_and_unlock_messages() -> Result<()> {
    let server = RedisServer::start().await?;
    let url = server.url();
    let mut conn = server.connection().await?;
    let (a, b, c) = (
        RedissonClient::new(),
        RedissonClient::new(),
        RedissonClient::new(),
    );

    for (name, timeout_prefix, channel) in [
        ("doc", "{doc}", "redisson_rwlock:{doc}"),
        ("lock:{doc}", "lock:{doc}", "redisson_rwlock:lock:{doc}"),
    ] {
        ensure!(rw_channel(name) == channel);
        let mut waiter = subscribe_unlock_channel(&url, channel).await?;
        ensure!(a.rw_read_lock(&mut conn, name, 1, LEASE).await?.is_none());
        ensure!(a.rw_read_lock(&mut conn, name, 1, LEASE).await?.is_none());
        ensure!(b.rw_read_lock(&mut conn, name, 3, LEASE).await?.is_none());
        ensure!(key_type(&mut conn, name).await? == "hash");
        ensure!(q::<String>(&mut conn, &["HGET", name, "mode"]).await? == "read");
        ensure!(q::<String>(&mut conn, &["HGET", name, &a.lock_name(1)]).await? == "2");
        for n in 1..=2 {
            let k = format!("{timeout_prefix}:{}:1:rwlock_timeout:{n}", a.uuid);
            ensure!(k == format!("{}:{n}", a.rw_timeout_prefix(name, 1)), "{k}");
            ensure!(key_type(&mut conn, &k).await? == "string", "{k}");
            ensure!(q::<String>(&mut conn, &["GET", &k]).await? == "1");
            ensure!(pttl(&mut conn, &k).await? <= LEASE as i64);
        }
        // The read watchdog renews the hash and the thread's timeout strings.
        ensure!(a.rw_read_renew(&mut conn, name, 1, 2 * LEASE).await?);
        let k2 = format!("{timeout_prefix}:{}:1:rwlock_timeout:2", a.uuid);
        ensure!(pttl(&mut conn, &k2).await? > LEASE as i64);
        ensure!(pttl(&mut conn, name).await? > LEASE as i64);
        ensure!(matches!(c.rw_write_lock(&mut conn, name, 4, LEASE).await?, Some(p) if p > 0));

        // Read unlocks while others hold: the entry's timeout string goes, latch "0", no message.
        let request = UnlockRequest::new().keeping_latch();
        ensure!(
            a.rw_read_unlock_request(&mut conn, name, 1, &request)
                .await?
                == Some(false)
        );
        ensure!(!exists(&mut conn, &k2).await?);
        let latch = unlock_latch_key(name, &request.id);
        ensure!(
            latch == format!("redisson_unlock_latch:{timeout_prefix}:{}", request.id),
            "{latch}"
        );
        ensure!(q::<String>(&mut conn, &["GET", &latch]).await? == "0");
        ensure!(a.rw_read_unlock(&mut conn, name, 1).await? == Some(false));
        nothing_before_marker(&mut conn, &mut waiter).await?;
        // The last reader's unlock deletes the hash and publishes UNLOCK_MESSAGE 0.
        ensure!(b.rw_read_unlock(&mut conn, name, 3).await? == Some(true));
        ensure!(!exists(&mut conn, name).await?);
        next_is(&mut waiter, "0").await?;

        // A write unlock publishes READ_UNLOCK_MESSAGE 1.
        ensure!(c.rw_write_lock(&mut conn, name, 4, LEASE).await?.is_none());
        ensure!(q::<String>(&mut conn, &["HGET", name, "mode"]).await? == "write");
        ensure!(q::<String>(&mut conn, &["HGET", name, &c.write_lock_name(4)]).await? == "1");
        ensure!(matches!(a.rw_read_lock(&mut conn, name, 1, LEASE).await?, Some(p) if p > 0));
        ensure!(c.rw_write_unlock(&mut conn, name, 4, LEASE).await? == Some(true));
        ensure!(!exists(&mut conn, name).await?);
        next_is(&mut waiter, "1").await?;

        // A writer that also reads: its write unlock sets mode back to read, publishes nothing.
        ensure!(c.rw_write_lock(&mut conn, name, 4, LEASE).await?.is_none());
        ensure!(c.rw_read_lock(&mut conn, name, 4, LEASE).await?.is_none());
        ensure!(c.rw_write_unlock(&mut conn, name, 4, LEASE).await? == Some(true));
        ensure!(q::<String>(&mut conn, &["HGET", name, "mode"]).await? == "read");
        nothing_before_marker(&mut conn, &mut waiter).await?;
        ensure!(c.rw_read_unlock(&mut conn, name, 4).await? == Some(true));
        next_is(&mut waiter, "0").await?;

        // forceUnlock: each half only deletes its own mode; write sends 1, read sends 0.
        ensure!(c.rw_write_lock(&mut conn, name, 4, LEASE).await?.is_none());
        ensure!(!c.rw_read_force_unlock(&mut conn, name).await?);
        ensure!(c.rw_write_force_unlock(&mut conn, name).await?);
        next_is(&mut waiter, "1").await?;
        ensure!(a.rw_read_lock(&mut conn, name, 1, LEASE).await?.is_none());
        ensure!(!c.rw_write_force_unlock(&mut conn, name).await?);
        ensure!(c.rw_read_force_unlock(&mut conn, name).await?);
        next_is(&mut waiter, "0").await?;
        ensure!(!exists(&mut conn, name).await?);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_count_down_latch_and_fenced_lock() -> Result<()> {
    let server = RedisServer::start().await?;
    let url = server.url();
    let mut conn = server.connection().await?;
    let a = RedissonClient::new();

    // Semaphore: a string of available permits; release publishes the new count.
    ensure!(semaphore_channel("pool") == "redisson_sc:{pool}");
    let mut sem = subscribe_unlock_channel(&url, &semaphore_channel("pool")).await?;
    ensure!(a.semaphore_set_permits(&mut conn, "pool", 3).await?);
    next_is(&mut sem, "3").await?;
    ensure!(a.semaphore_try_acquire(&mut conn, "pool", 2).await?);
    ensure!(!a.semaphore_try_acquire(&mut conn, "pool", 2).await?);
    a.semaphore_release(&mut conn, "pool", 2).await?;
    next_is(&mut sem, "3").await?;
    ensure!(q::<String>(&mut conn, &["GET", "pool"]).await? == "3");

    // PermitExpirableSemaphore: ids are 16 raw bytes in `{name}:timeout`.
    for (name, zset, channel) in [
        ("pes", "{pes}:timeout", "redisson_sc:{pes}"),
        ("lock:{pes}", "lock:{pes}:timeout", "redisson_sc:lock:{pes}"),
    ] {
        ensure!(permit_timeout_key(name) == zset && semaphore_channel(name) == channel);
        let mut waiter = subscribe_unlock_channel(&url, channel).await?;
        ensure!(a.permit_set_permits(&mut conn, name, 2).await?);
        next_is(&mut waiter, "2").await?;
        let now = rr::now_ms();
        let PermitAttempt::Acquired(leased) = a
            .permit_try_acquire(&mut conn, name, 1, Some(60_000), now)
            .await?
        else {
            bail!("no leased permit");
        };
        let PermitAttempt::Acquired(forever) =
            a.permit_try_acquire(&mut conn, name, 1, None, now).await?
        else {
            bail!("no permit without lease");
        };
        ensure!(leased.len() == 1 && forever.len() == 1);
        ensure!(is_hex(&leased[0], 32) && is_hex(&forever[0], 32));
        ensure!(key_type(&mut conn, zset).await? == "zset");
        ensure!(q::<String>(&mut conn, &["GET", name]).await? == "0");
        let members: Vec<(Vec<u8>, i64)> =
            q(&mut conn, &["ZRANGE", zset, "0", "-1", "WITHSCORES"]).await?;
        let shown: Vec<(String, usize, i64)> = members
            .iter()
            .map(|(m, s)| (m.iter().map(|b| format!("{b:02x}")).collect(), m.len(), *s))
            .collect();
        ensure!(
            shown
                == vec![
                    (leased[0].clone(), 16, now + 60_000),
                    (forever[0].clone(), 16, rr::PERMIT_NO_LEASE_SCORE),
                ],
            "{shown:?}"
        );
        ensure!(
            a.permit_try_acquire(&mut conn, name, 1, None, now).await?
                == PermitAttempt::Unavailable(Some(now + 60_000))
        );
        // After the lease ran out, the next acquire gives the permit back first (publishing
        // the freed count) and takes it.
        let later = now + 60_000;
        let PermitAttempt::Acquired(again) = a
            .permit_try_acquire(&mut conn, name, 1, None, later)
            .await?
        else {
            bail!("expired permit not reclaimed");
        };
        next_is(&mut waiter, "1").await?;
        let members: Vec<Vec<u8>> = q(&mut conn, &["ZRANGE", zset, "0", "-1"]).await?;
        ensure!(members.len() == 2 && members.iter().all(|m| m.len() == 16));
        ensure!(a.permit_release(&mut conn, name, &again[0], later).await?);
        next_is(&mut waiter, "1").await?;
        ensure!(!a.permit_release(&mut conn, name, &again[0], later).await?);
        ensure!(
            a.permit_release(&mut conn, name, &forever[0], later)
                .await?
        );
        next_is(&mut waiter, "2").await?;
        ensure!(q::<i64>(&mut conn, &["ZCARD", zset]).await? == 0);
    }

    // CountDownLatch: braces always added around the name in the channel.
    for (name, channel) in [
        ("latch", "redisson_countdownlatch__channel__{latch}"),
        ("latch:{x}", "redisson_countdownlatch__channel__{latch:{x}}"),
    ] {
        ensure!(countdown_latch_channel(name) == channel);
        let mut waiter = subscribe_unlock_channel(&url, channel).await?;
        ensure!(a.latch_try_set_count(&mut conn, name, 2).await?);
        next_is(&mut waiter, "1").await?;
        ensure!(!a.latch_try_set_count(&mut conn, name, 5).await?);
        ensure!(key_type(&mut conn, name).await? == "string");
        ensure!(q::<String>(&mut conn, &["GET", name]).await? == "2");
        a.latch_count_down(&mut conn, name).await?;
        ensure!(q::<String>(&mut conn, &["GET", name]).await? == "1");
        nothing_before_marker(&mut conn, &mut waiter).await?;
        a.latch_count_down(&mut conn, name).await?;
        ensure!(!exists(&mut conn, name).await?);
        next_is(&mut waiter, "0").await?;
        ensure!(a.latch_try_set_count(&mut conn, name, 1).await?);
        next_is(&mut waiter, "1").await?;
        ensure!(a.latch_delete(&mut conn, name).await?);
        next_is(&mut waiter, "1").await?;
        ensure!(!a.latch_delete(&mut conn, name).await?);
    }

    // FencedLock: RLock hash plus a token counter.
    for (name, token_key) in [
        ("pay", "redisson_lock_token:{pay}"),
        ("lock:{pay}", "redisson_lock_token:lock:{pay}"),
    ] {
        ensure!(fenced_token_key(name) == token_key);
        ensure!(a.fenced_try_lock(&mut conn, name, 1, LEASE).await? == FencedAttempt::Acquired(1));
        ensure!(a.fenced_try_lock(&mut conn, name, 1, LEASE).await? == FencedAttempt::Acquired(2));
        ensure!(matches!(
            RedissonClient::new().fenced_try_lock(&mut conn, name, 1, LEASE).await?,
            FencedAttempt::Held(p) if p > 0
        ));
        ensure!(key_type(&mut conn, name).await? == "hash");
        ensure!(key_type(&mut conn, token_key).await? == "string");
        ensure!(q::<String>(&mut conn, &["GET", token_key]).await? == "2");
        let mut waiter = subscribe_unlock_channel(&url, &rlock_channel(name)).await?;
        ensure!(a.fenced_unlock(&mut conn, name, 1, LEASE).await? == Some(false));
        ensure!(a.fenced_unlock(&mut conn, name, 1, LEASE).await? == Some(true));
        next_is(&mut waiter, "0").await?;
        ensure!(!exists(&mut conn, name).await? && pttl(&mut conn, token_key).await? == -1);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_redlock_is_rlock_hashes_on_independent_masters() -> Result<()> {
    let (x, y, z) = tokio::join!(
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start()
    );
    let masters = [x?, y?, z?];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let redlock = RedissonRedLock::connect(&urls).await?;
    ensure!(redlock.quorum() == 2);
    let mut conns = Vec::new();
    for m in &masters {
        conns.push(m.connection().await?);
    }

    ensure!(redlock.try_lock("res", 1, LEASE).await?);
    for (i, c) in conns.iter_mut().enumerate() {
        ensure!(key_type(c, "res").await? == "hash");
        let fields: Vec<(String, String)> = q(c, &["HGETALL", "res"]).await?;
        ensure!(
            fields == vec![(redlock.masters[i].1.lock_name(1), "1".to_string())],
            "master {i}: {fields:?}"
        );
        ensure!(pttl(c, "res").await? > 0);
    }
    ensure!(redlock.unlock("res", 1).await? == 3);
    for c in conns.iter_mut() {
        ensure!(!exists(c, "res").await?);
    }

    // Another client holds masters 0 and 1: no quorum, and what was taken is given back.
    let other = RedissonClient::new();
    for c in conns.iter_mut().take(2) {
        ensure!(other.rlock_try_lock(c, "res2", 1, LEASE).await?.is_none());
    }
    ensure!(!redlock.try_lock("res2", 1, LEASE).await?);
    ensure!(!exists(&mut conns[2], "res2").await?);
    // It holds master 0 only: the quorum of masters 1 and 2 is enough.
    ensure!(other.rlock_unlock(&mut conns[1], "res2", 1, LEASE).await? == Some(true));
    ensure!(redlock.try_lock("res2", 1, LEASE).await?);
    for (c, (_, client)) in conns.iter_mut().zip(&redlock.masters).skip(1) {
        let fields: Vec<(String, String)> = q(c, &["HGETALL", "res2"]).await?;
        ensure!(fields == vec![(client.lock_name(1), "1".to_string())]);
    }
    let fields: Vec<(String, String)> = q(&mut conns[0], &["HGETALL", "res2"]).await?;
    ensure!(fields == vec![(other.lock_name(1), "1".to_string())]);
    ensure!(redlock.unlock("res2", 1).await? == 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spublish_reaches_sharded_waiters_on_a_three_master_cluster() -> Result<()> {
    let cluster = RedisCluster::start(3).await?;
    let name = "orders";
    let channel = rlock_channel(name);
    let owner = cluster.node_for(name.as_bytes()).await?;
    ensure!(cluster.node_for(channel.as_bytes()).await? == owner);
    let other = (owner + 1) % 3;
    let mut conn = cluster.connection_for(name.as_bytes()).await?;
    let mut other_conn = cluster.nodes[other].connection().await?;

    // A sharded waiter must subscribe on the owner; elsewhere the server answers MOVED.
    let moved = subscribe_waiter(&cluster.nodes[other].url(), &channel, PubSubKind::Sharded).await;
    ensure!(
        moved
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains("MOVED")),
        "{:?}",
        moved.as_ref().map(|s| s.channel().to_string())
    );
    let mut sharded =
        subscribe_waiter(&cluster.nodes[owner].url(), &channel, PubSubKind::Sharded).await?;
    let mut plain =
        subscribe_waiter(&cluster.nodes[other].url(), &channel, PubSubKind::Plain).await?;
    ensure!(rr::pubsub_subscribers(&mut conn, PubSubKind::Sharded, &channel).await? == 1);
    ensure!(rr::pubsub_subscribers(&mut conn, PubSubKind::Plain, &channel).await? == 0);
    ensure!(rr::pubsub_subscribers(&mut other_conn, PubSubKind::Plain, &channel).await? == 1);
    ensure!(rr::pubsub_subscribers(&mut other_conn, PubSubKind::Sharded, &channel).await? == 0);

    // Redisson >= 3.22 on Cluster 7 (shardedSubscriptionMode AUTO): SPUBLISH from the script.
    let sharding = RedissonClient::with_profile(RedissonProfile::V4_7_SHARDED);
    ensure!(sharding.profile.publish == PublishCommand::SPublish);
    ensure!(sharding
        .rlock_try_lock(&mut conn, name, 1, LEASE)
        .await?
        .is_none());
    ensure!(sharding.rlock_unlock(&mut conn, name, 1, LEASE).await? == Some(true));
    next_is(&mut sharded, "0").await?;
    nothing_before_marker(&mut conn, &mut plain).await?;
    ensure!(sharding
        .rlock_try_lock(&mut conn, name, 1, LEASE)
        .await?
        .is_none());
    ensure!(sharding.rlock_force_unlock(&mut conn, name).await?);
    next_is(&mut sharded, "0").await?;

    // Sharding off (or Redisson before 3.22): PUBLISH, which only plain subscribers get, on
    // every node.
    let plain_client = RedissonClient::new();
    ensure!(plain_client.profile.publish == PublishCommand::Publish);
    ensure!(plain_client
        .rlock_try_lock(&mut conn, name, 1, LEASE)
        .await?
        .is_none());
    ensure!(plain_client.rlock_unlock(&mut conn, name, 1, LEASE).await? == Some(true));
    next_is(&mut plain, "0").await?;
    nothing_before_marker(&mut conn, &mut sharded).await?;

    // The other primitives publish through the same switch.
    let sem_channel = semaphore_channel(name);
    let mut sem_waiter = subscribe_waiter(
        &cluster.nodes[owner].url(),
        &sem_channel,
        PubSubKind::Sharded,
    )
    .await?;
    ensure!(sharding.semaphore_set_permits(&mut conn, name, 2).await?);
    next_is(&mut sem_waiter, "2").await?;
    let fair = "fairorders";
    let mut fconn = cluster.connection_for(fair.as_bytes()).await?;
    let fowner = cluster.node_for(fair.as_bytes()).await?;
    let now = rr::now_ms();
    ensure!(sharding
        .fair_try_lock(&mut fconn, fair, 1, LEASE, 10_000, now)
        .await?
        .is_none());
    ensure!(sharding
        .fair_try_lock(&mut fconn, fair, 2, LEASE, 10_000, now)
        .await?
        .is_some());
    let mut head = subscribe_waiter(
        &cluster.nodes[fowner].url(),
        &sharding.fair_waiter_channel(fair, 2),
        PubSubKind::Sharded,
    )
    .await?;
    ensure!(
        sharding
            .fair_unlock(&mut fconn, fair, 1, LEASE, now)
            .await?
            == Some(true)
    );
    next_is(&mut head, "0").await?;

    // CountDownLatch: fine for a plain name; for a name with braces the channel's hash tag
    // differs from the key's, and the Cluster refuses the script.
    let latch = "latch";
    let mut lconn = cluster.connection_for(latch.as_bytes()).await?;
    ensure!(sharding.latch_try_set_count(&mut lconn, latch, 1).await?);
    let braced = "latch:{orders}";
    let refused = sharding.latch_try_set_count(&mut conn, braced, 1).await;
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| format!("{e:#}").to_uppercase().contains("CROSSSLOT")),
        "{refused:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shedlock_values_and_unlock_before_and_since_6_7() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    let key = shedlock_key("prod", "nightly");
    ensure!(key == "job-lock:prod:nightly");
    ensure!(shedlock_key(rr::SHEDLOCK_DEFAULT_ENV, "x") == "job-lock:default:x");

    fn parts(value: &str) -> Result<(String, String, Option<String>)> {
        let rest = value.strip_prefix("ADDED:").context(value.to_string())?;
        let (time, holder) = rest.split_once('@').context(value.to_string())?;
        ensure!(
            time.len() == 24 && time.ends_with('Z') && &time[10..11] == "T" && &time[19..20] == ".",
            "{value}"
        );
        let (host, uuid) = match holder.split_once(':') {
            Some((h, u)) => (h.to_string(), Some(u.to_string())),
            None => (holder.to_string(), None),
        };
        Ok((time.to_string(), host, uuid))
    }

    // Before 6.7.0: ADDED:<iso>@<host>; keeping it until lockAtLeastFor rewrites the value.
    let old = ShedLockVersion::Before6_7;
    let held = rr::shedlock_acquire(&mut conn, old, &key, "host-a", 60_000)
        .await?
        .context("acquire")?;
    ensure!(rr::shedlock_acquire(&mut conn, old, &key, "host-b", 60_000)
        .await?
        .is_none());
    let value: String = q(&mut conn, &["GET", &key]).await?;
    ensure!(value == held.value);
    let (_, host, uuid) = parts(&value)?;
    ensure!(host == "host-a" && uuid.is_none(), "{value}");
    let ttl = pttl(&mut conn, &key).await?;
    ensure!((58_000..=60_000).contains(&ttl), "PTTL {ttl}");
    held.unlock(&mut conn, 5_000).await?;
    let kept: String = q(&mut conn, &["GET", &key]).await?;
    let (_, host, uuid) = parts(&kept)?;
    ensure!(host == "host-a" && uuid.is_none(), "{kept}");
    let ttl = pttl(&mut conn, &key).await?;
    ensure!(ttl > 0 && ttl <= 5_000, "PTTL {ttl}");
    held.unlock(&mut conn, 0).await?;
    ensure!(!exists(&mut conn, &key).await?);

    // Since 6.7.0: ADDED:<iso>@<host>:<uuid>, the same value until it goes.
    let new = ShedLockVersion::Since6_7 { safe_update: false };
    let held = rr::shedlock_acquire(&mut conn, new, &key, "host-b", 60_000)
        .await?
        .context("acquire")?;
    let (_, host, uuid) = parts(&held.value)?;
    ensure!(
        host == "host-b" && uuid.as_deref().is_some_and(|u| u.len() == 36),
        "{}",
        held.value
    );
    held.unlock(&mut conn, 5_000).await?;
    ensure!(q::<String>(&mut conn, &["GET", &key]).await? == held.value);
    let ttl = pttl(&mut conn, &key).await?;
    ensure!(ttl > 0 && ttl <= 5_000, "PTTL {ttl}");
    ensure!(held.extend(&mut conn, 60_000).await?);
    ensure!(pttl(&mut conn, &key).await? > 5_000);
    held.unlock(&mut conn, 0).await?;
    ensure!(!exists(&mut conn, &key).await?);

    // safeUpdate: a stale holder neither deletes nor shortens the new holder's lock; without
    // it, it deletes.
    let safe = ShedLockVersion::Since6_7 { safe_update: true };
    let stale = rr::shedlock_acquire(&mut conn, safe, &key, "host-c", 60_000)
        .await?
        .context("acquire")?;
    let _: i64 = q(&mut conn, &["DEL", &key]).await?;
    let current = rr::shedlock_acquire(&mut conn, safe, &key, "host-d", 60_000)
        .await?
        .context("acquire")?;
    stale.unlock(&mut conn, 0).await?;
    stale.unlock(&mut conn, 1_000).await?;
    ensure!(!stale.extend(&mut conn, 1_000).await?);
    ensure!(q::<String>(&mut conn, &["GET", &key]).await? == current.value);
    ensure!(pttl(&mut conn, &key).await? > 1_000);
    let unsafe_stale = rr::ShedLockHandle {
        version: new,
        ..stale.clone()
    };
    unsafe_stale.unlock(&mut conn, 0).await?;
    ensure!(!exists(&mut conn, &key).await?);
    Ok(())
}
