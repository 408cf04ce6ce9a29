//! lockscope against the source-faithful Redisson clients (`lockscope_tests::redis_recipes`,
//! following Redisson 4.7.0 and, where 3.x behaved otherwise, 3.23): braced names, fair-lock
//! queues with expired entries, the unlock latch and read-lock timeout strings, read-write lock,
//! CountDownLatch and PermitExpirableSemaphore, RedissonRedLock on independent masters, and
//! sharded pub/sub on a Redis Cluster — each read through lockscope's API and force release.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig, RedlockConfig};
use lockscope_model::id::lock_id;
use lockscope_model::wire::LockMode;
use lockscope_tests::harness::Lockscope;
use lockscope_tests::redis_recipes::{
    self as rr, countdown_latch_channel, fair_queue_key, rlock_channel, rw_channel,
    subscribe_waiter, PermitAttempt, PubSubKind, RedissonClient, RedissonProfile, RedissonRedLock,
    UnlockRequest,
};
use lockscope_tests::support::redis::{RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);
const LEASE: u64 = 60_000;
const TOKEN: &str = "oncall-token-0123456789abcdef";

fn with_admin(config: Config, dir: &Path) -> Config {
    lockscope_tests::harness::with_admin(config, dir, TOKEN)
}

async fn start(config: Config) -> Result<Lockscope> {
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

/// Force release through the API: status and body.
async fn release(ls: &Lockscope, source: &str, key: &str, body: Value) -> Result<(u16, Value)> {
    ls.release(&lock_id(source, &format!("/{key}")), Some(TOKEN), &body)
        .await
}

async fn key_type(conn: &mut MultiplexedConnection, key: &str) -> Result<String> {
    Ok(redis::cmd("TYPE").arg(key).query_async(conn).await?)
}

async fn expect_message(sub: &mut rr::SubscriberHandle, want: &str) -> Result<()> {
    let got = sub
        .next_message(WAIT)
        .await
        .with_context(|| format!("no message on {}", sub.channel()))?;
    ensure!(
        got == want.as_bytes(),
        "{}: got {:?}, want {want:?}",
        sub.channel(),
        String::from_utf8_lossy(&got)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_layouts_on_a_standalone_server() -> Result<()> {
    let server = RedisServer::start().await?;
    let url = server.url();
    let dir = tempfile::tempdir()?;
    // `*`: every key, so Redisson's helper strings are in sight and must not show as locks.
    let mut source = RedisSourceConfig::new("r", &url, &["*"]);
    source.watch.latches = vec!["lock:latch".into()];
    let ls = start(with_admin(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir.path(),
    ))
    .await?;
    let mut conn = server.connection().await?;

    // A fair lock whose name already has braces: `redisson_lock_queue:lock:{order}`. Its queue
    // holds an entry whose timeout has passed (its client is gone) and a live one.
    let name = "lock:{order}";
    let (a, b, c) = (
        RedissonClient::new(),
        RedissonClient::new(),
        RedissonClient::new(),
    );
    let now = rr::now_ms();
    ensure!(a
        .fair_try_lock(&mut conn, name, 1, LEASE, 5_000, now)
        .await?
        .is_none());
    // Clocks 10 min behind: b's deadline (lease + 1 s after its clock) is long past; c queues
    // behind it with a wait that keeps it live. Nothing runs a script with the real time after.
    let past = now - 600_000;
    ensure!(b
        .fair_try_lock(&mut conn, name, 1, LEASE, 1_000, past)
        .await?
        .is_some());
    ensure!(c
        .fair_try_lock(&mut conn, name, 1, LEASE, 1_200_000, past)
        .await?
        .is_some());
    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(fair_queue_key(name))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    ensure!(queued == vec![b.lock_name(1), c.lock_name(1)], "{queued:?}");
    let lock = ls
        .wait_lock(
            "r",
            &format!("/{name}"),
            WAIT,
            "fair lock, live waiter",
            |l| l.waiters.len() == 1,
        )
        .await?;
    assert_eq!(lock.recipe, "redisson_fair_lock");
    assert_eq!(lock.holders[0].node, a.lock_name(1));
    assert_eq!(
        lock.waiters[0].node,
        c.lock_name(1),
        "the expired entry is not a waiter"
    );
    // Force release: the script drops the expired head, as Redisson's do, and wakes c alone.
    let mut c_channel =
        subscribe_waiter(&url, &c.fair_waiter_channel(name, 1), PubSubKind::Plain).await?;
    let (status, body) = release(
        &ls,
        "r",
        name,
        json!({"holder": a.lock_name(1), "reentrancy": 1, "reason": "fair"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    assert_eq!(
        body["released"]["woke"]["channel"].as_str(),
        Some(rlock_channel(name).as_str()),
        "{body}"
    );
    expect_message(&mut c_channel, "0").await?;
    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(fair_queue_key(name))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    assert_eq!(queued, vec![c.lock_name(1)], "expired head dropped");
    // c takes the lock as its client would once woken.
    ensure!(c
        .fair_try_lock(&mut conn, name, 1, LEASE, 1_200_000, rr::now_ms())
        .await?
        .is_none());
    ls.wait_lock("r", &format!("/{name}"), WAIT, "c holds", |l| {
        l.holders.first().map(|h| h.node.clone()) == Some(c.lock_name(1)) && l.waiters.is_empty()
    })
    .await?;

    // The unlock latch (4.7.0; left behind when a client dies between its unlock and the DEL)
    // and a read lock's timeout strings are never locks; 3.23's unlock writes no latch.
    for profile in [RedissonProfile::V4_7, RedissonProfile::V3_23] {
        let client = RedissonClient::with_profile(profile);
        let key = format!("lock:latched-{}", profile.unlock_latch);
        ensure!(client
            .rlock_try_lock(&mut conn, &key, 7, LEASE)
            .await?
            .is_none());
        ensure!(client
            .rlock_try_lock(&mut conn, &key, 7, LEASE)
            .await?
            .is_none());
        let request = UnlockRequest::new().keeping_latch();
        if profile.unlock_latch {
            client
                .rlock_unlock_request(&mut conn, &key, 7, LEASE, &request)
                .await?;
        } else {
            client.rlock_unlock(&mut conn, &key, 7, LEASE).await?;
        }
        let lock = ls
            .wait_lock("r", &format!("/{key}"), WAIT, "re-entry 1", |l| {
                l.holders.first().and_then(|h| h.reentrancy) == Some(1)
            })
            .await?;
        assert_eq!(lock.recipe, "redisson_lock");
        let latches: Vec<String> = redis::cmd("KEYS")
            .arg(format!("redisson_unlock_latch:{{{key}}}:*"))
            .query_async(&mut conn)
            .await?;
        ensure!(
            latches.len() == usize::from(profile.unlock_latch),
            "{key}: {latches:?}"
        );
    }
    let doc = "lock:doc";
    ensure!(a.rw_read_lock(&mut conn, doc, 3, LEASE).await?.is_none());
    let lock = ls
        .wait_lock("r", &format!("/{doc}"), WAIT, "one reader", |l| {
            l.holders.len() == 1
        })
        .await?;
    assert_eq!(lock.holders[0].mode, Some(LockMode::Read));
    let locks = ls.locks().await?;
    let helpers: Vec<&str> = locks
        .iter()
        .map(|l| l.path.as_str())
        .filter(|p| p.starts_with("redisson_unlock_latch:") || p.contains(":rwlock_timeout:"))
        .collect();
    assert!(
        helpers.is_empty(),
        "Redisson helper strings shown as locks: {helpers:?}"
    );
    assert!(
        locks.iter().all(|l| !l.path.starts_with("redisson_lock_")),
        "companions are not locks of their own"
    );

    // Read-write lock force release: a lone reader wakes waiters with 0, a writer with 1 (as
    // Redisson's read and write unlocks do); two readers are not one holder, so refused.
    let mut rw_sub = subscribe_waiter(&url, &rw_channel(doc), PubSubKind::Plain).await?;
    ensure!(b.rw_read_lock(&mut conn, doc, 4, LEASE).await?.is_none());
    ls.wait_lock("r", &format!("/{doc}"), WAIT, "two readers", |l| {
        l.holders.len() == 2
    })
    .await?;
    let (status, body) = release(
        &ls,
        "r",
        doc,
        json!({"holder": a.lock_name(3), "reason": "rw"}),
    )
    .await?;
    ensure!(status == 409, "two readers: {status} {body}");
    b.rw_read_unlock(&mut conn, doc, 4).await?;
    ls.wait_lock("r", &format!("/{doc}"), WAIT, "one reader again", |l| {
        l.holders.len() == 1
    })
    .await?;
    let (status, body) = release(
        &ls,
        "r",
        doc,
        json!({"holder": a.lock_name(3), "reason": "rw"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    expect_message(&mut rw_sub, "0").await?;
    ensure!(a.rw_write_lock(&mut conn, doc, 5, LEASE).await?.is_none());
    let lock = ls
        .wait_lock("r", &format!("/{doc}"), WAIT, "a writer", |l| {
            l.holders.first().and_then(|h| h.mode) == Some(LockMode::Write)
        })
        .await?;
    let (status, body) = release(
        &ls,
        "r",
        doc,
        json!({"holder": lock.holders[0].node, "reason": "rw"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    expect_message(&mut rw_sub, "1").await?;

    // CountDownLatch: its waiters subscribe to `redisson_countdownlatch__channel__{name}`.
    let latch = "lock:latch";
    ensure!(a.latch_try_set_count(&mut conn, latch, 3).await?);
    let _w1 = subscribe_waiter(&url, &countdown_latch_channel(latch), PubSubKind::Plain).await?;
    let _w2 = subscribe_waiter(&url, &countdown_latch_channel(latch), PubSubKind::Plain).await?;
    a.latch_count_down(&mut conn, latch).await?;
    let lock = ls
        .wait_lock(
            "r",
            &format!("/{latch}"),
            WAIT,
            "latch with 2 waiters, counted down to 2",
            // The count-down and the waiters' subscriptions reach lockscope apart (a key read
            // and a PUBSUB NUMSUB): wait for both facts.
            |l| l.watchers == 2 && l.permits_available == Some(2),
        )
        .await?;
    assert_eq!(lock.recipe, "redisson_latch");

    // PermitExpirableSemaphore: permit ids are 16 raw bytes in Redis, shown as the API does.
    let pes = "lock:pes";
    a.permit_set_permits(&mut conn, pes, 3).await?;
    let PermitAttempt::Acquired(ids) = a
        .permit_try_acquire(&mut conn, pes, 2, Some(LEASE), rr::now_ms())
        .await?
    else {
        panic!("no permits");
    };
    let lock = ls
        .wait_lock("r", &format!("/{pes}"), WAIT, "2 permits", |l| {
            l.holders.len() == 2
        })
        .await?;
    assert_eq!(lock.recipe, "redisson_permit_semaphore");
    let mut shown: Vec<String> = lock.holders.iter().map(|h| h.node.clone()).collect();
    let mut want = ids.clone();
    shown.sort();
    want.sort();
    assert_eq!(shown, want);
    assert_eq!(lock.permits_available, Some(1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_redlock_across_three_masters() -> Result<()> {
    let (m1, m2, m3) = tokio::join!(
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start()
    );
    let masters = [m1?, m2?, m3?];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let dir = tempfile::tempdir()?;
    let ls = start(with_admin(
        Config {
            sources: section(
                "redlock",
                vec![RedlockConfig::new("rl", &urls, &["lock:*"])],
            ),
            ..Config::default()
        },
        dir.path(),
    ))
    .await?;
    // One Redisson instance per master (a uuid each), one thread: the fields differ.
    let redlock = RedissonRedLock::connect(&urls).await?;
    ensure!(redlock.try_lock("lock:pay", 52, LEASE).await?);
    let lock = ls
        .wait_lock("rl", "/lock:pay", WAIT, "RedLock on 3 masters", |l| {
            l.redlock
                .as_ref()
                .is_some_and(|r| r.masters.iter().all(|m| m.holder.is_some()))
        })
        .await?;
    assert_eq!(lock.recipe, "redisson_redlock");
    assert_eq!(lock.holders.len(), 1, "{lock:?}");
    assert_eq!(lock.holders[0].node, "*:52");
    let view = lock.redlock.clone().context("view")?;
    assert!(!view.split, "one holder, three fields: {view:?}");
    for ((_, client), m) in redlock.masters.iter().zip(&view.masters) {
        assert_eq!(m.holder.as_deref(), Some(client.lock_name(52).as_str()));
    }
    // Waiters subscribe on every master; a force release deletes each master's own field
    // (compared) and wakes them all.
    let mut subs = Vec::new();
    for url in &urls {
        subs.push(subscribe_waiter(url, &rlock_channel("lock:pay"), PubSubKind::Plain).await?);
    }
    let (status, body) = release(
        &ls,
        "rl",
        "lock:pay",
        json!({"holder": "*:99", "reason": "stale"}),
    )
    .await?;
    ensure!(status == 409, "another thread: {status} {body}");
    let (status, body) = release(
        &ls,
        "rl",
        "lock:pay",
        // `*:52` names every JVM's thread 52: the version pins the fields seen.
        json!({"holder": "*:52", "version": lock.holders[0].version, "reason": "stuck"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    for sub in &mut subs {
        expect_message(sub, "0").await?;
    }
    for m in &masters {
        let mut conn = m.connection().await?;
        ensure!(key_type(&mut conn, "lock:pay").await? == "none");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_waiters_on_a_cluster_are_counted_and_woken() -> Result<()> {
    let cluster = RedisCluster::start(3).await?;
    let dir = tempfile::tempdir()?;
    let mut source = RedisSourceConfig::new("c", &cluster.urls()[0], &["lock:*"]);
    source.cluster = true;
    source.watch.reconcile_interval = Duration::from_secs(2);
    let ls = start(with_admin(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir.path(),
    ))
    .await?;
    // Redisson ≥ 3.22 on a Cluster waits with SSUBSCRIBE on the owner; an older client (or
    // sharding off) with SUBSCRIBE anywhere. Both kinds wait on one lock here.
    let name = "lock:{order}";
    let owner = cluster.node_for(name.as_bytes()).await?;
    let mut conn = cluster.connection_for(name.as_bytes()).await?;
    let holder = RedissonClient::with_profile(RedissonProfile::V4_7_SHARDED);
    ensure!(holder
        .rlock_try_lock(&mut conn, name, 1, LEASE)
        .await?
        .is_none());
    let channel = rlock_channel(name);
    // Pub/sub counts are node-local: both waiters on the owner, where lockscope asks.
    let mut sharded =
        subscribe_waiter(&cluster.nodes[owner].url(), &channel, PubSubKind::Sharded).await?;
    let mut plain =
        subscribe_waiter(&cluster.nodes[owner].url(), &channel, PubSubKind::Plain).await?;
    // Subscriptions are not keyspace events: a watchdog renewal makes lockscope read again.
    holder.rlock_renew(&mut conn, name, 1, LEASE).await?;
    let lock = ls
        .wait_lock(
            "c",
            &format!("/{name}"),
            WAIT,
            "a sharded and a plain waiter counted",
            |l| l.watchers == 2,
        )
        .await?;
    assert_eq!(lock.recipe, "redisson_lock");
    let (status, body) = release(
        &ls,
        "c",
        name,
        json!({"holder": holder.lock_name(1), "reason": "cluster"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    assert_eq!(body["released"]["woke"]["sharded"], json!(true), "{body}");
    expect_message(&mut sharded, "0").await?;
    expect_message(&mut plain, "0").await?;

    // A braced fair lock on the Cluster: its companions share the slot, so its queue is read.
    let fair = "lock:{fair}";
    let mut fconn = cluster.connection_for(fair.as_bytes()).await?;
    let (a, b) = (RedissonClient::new(), RedissonClient::new());
    let now = rr::now_ms();
    ensure!(a
        .fair_try_lock(&mut fconn, fair, 1, LEASE, 60_000, now)
        .await?
        .is_none());
    ensure!(b
        .fair_try_lock(&mut fconn, fair, 1, LEASE, 60_000, now)
        .await?
        .is_some());
    let lock = ls
        .wait_lock(
            "c",
            &format!("/{fair}"),
            WAIT,
            "fair waiter on a Cluster",
            |l| l.waiters.len() == 1,
        )
        .await?;
    assert_eq!(lock.recipe, "redisson_fair_lock");
    assert_eq!(lock.waiters[0].node, b.lock_name(1));
    Ok(())
}
