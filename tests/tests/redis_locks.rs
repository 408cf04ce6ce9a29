//! Redis locks on real servers: every layout driven by its real client protocol (python-redis-lock
//! by the real library from PyPI), TTL countdown and expiry (also with 1M unrelated TTL keys),
//! Redlock majority and split, a 3-master Cluster, restarts and a killed pub/sub connection, odd
//! keys.

use std::time::Duration;

use anyhow::{Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig, RedlockConfig};
use lockscope_model::wire::{LockMode, LockView, ReleaseCause};
use lockscope_tests::harness::{eventually, eventually_every, metric_value, Lockscope};
use lockscope_tests::redis_recipes as rr;
use lockscope_tests::support::python::{python_and_script, PyClient};
use lockscope_tests::support::redis::{load_noise, RedisCluster, RedisServer};

const WAIT: Duration = Duration::from_secs(15);

fn source(name: &str, url: &str) -> RedisSourceConfig {
    let mut s = RedisSourceConfig::new(name, url, &["lock:*", "job-lock:*", "rl:*", "legacy:*"]);
    s.watch.reconcile_interval = Duration::from_secs(2);
    s.watch.semaphores.insert("rl:pool".into(), 3);
    s
}

async fn start(config: Config) -> Result<Lockscope> {
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

fn redis_config(sources: Vec<RedisSourceConfig>) -> Config {
    Config {
        sources: section("redis", sources),
        ..Config::default()
    }
}

/// Redis lock paths are the keys; ids are built like any other.
async fn wait_key(
    ls: &Lockscope,
    source: &str,
    key: &str,
    what: &str,
    check: impl Fn(&LockView) -> bool,
) -> Result<LockView> {
    ls.wait_lock(source, &format!("/{key}"), WAIT, what, check)
        .await
}

async fn wait_gone(ls: &Lockscope, source: &str, key: &str) -> Result<()> {
    let mut last = None;
    eventually_every(
        WAIT,
        Duration::from_millis(20),
        &format!("{key} gone"),
        async || {
            last = ls.lock(source, &format!("/{key}")).await?;
            Ok(last.is_none().then_some(()))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last state: {last:?}"))
}

/// Builds the Python environment of the real lock clients (once per test binary) off the async
/// workers.
async fn prepare_python() -> Result<()> {
    tokio::task::spawn_blocking(python_and_script).await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_layout_on_a_standalone_server() -> Result<()> {
    let (python, server) = tokio::join!(prepare_python(), RedisServer::start());
    python?;
    let server = server?;
    let ls = start(redis_config(vec![source("cache", &server.url())])).await?;
    let mut conn = server.connection().await?;
    // A watched source's last event: none after its first read of an empty server.
    assert_eq!(ls.sources().await?[0].last_change_ms, None);
    let before_ms = rr::now_ms();

    // SET NX PX token lock + Lua compare-and-delete.
    assert!(rr::token_lock_acquire(&mut conn, "lock:orders", "tok-1", 20_000).await?);
    let lock = wait_key(&ls, "cache", "lock:orders", "token lock", |l| {
        l.holders.len() == 1
    })
    .await?;
    // The lock's arrival is the source's last event, published with the lock.
    let seen = ls.sources().await?[0].last_change_ms;
    assert!(
        seen.is_some_and(|at| at >= before_ms),
        "{seen:?} vs {before_ms}"
    );
    assert_eq!(lock.recipe, "token_lock");
    assert_eq!(lock.backend, lockscope_model::wire::Backend::Redis);
    assert_eq!(lock.holders[0].node, "tok-1");
    let first_ttl = lock.ttl_ms.expect("ttl");
    assert!(first_ttl <= 20_000 && first_ttl > 15_000, "{first_ttl}");
    wait_key(&ls, "cache", "lock:orders", "TTL counts down", |l| {
        l.ttl_ms.is_some_and(|t| t <= first_ttl - 250)
    })
    .await?;
    assert!(!rr::token_lock_release(&mut conn, "lock:orders", "wrong").await?);
    assert!(rr::token_lock_release(&mut conn, "lock:orders", "tok-1").await?);
    wait_gone(&ls, "cache", "lock:orders").await?;
    let detail = ls.detail("cache", "/lock:orders").await?;
    assert!(detail.gone, "a released token lock is gone");
    assert!(detail.lock.holders.is_empty());
    assert_eq!(
        detail.events.last().and_then(|e| e.cause),
        Some(ReleaseCause::Released),
        "{:?}",
        detail.events
    );

    // Legacy patterns.
    assert!(rr::setnx_no_ttl(&mut conn, "legacy:forever", "worker-7").await?);
    let lock = wait_key(&ls, "cache", "legacy:forever", "setnx", |l| {
        !l.holders.is_empty()
    })
    .await?;
    assert_eq!(lock.recipe, "setnx_no_ttl");
    assert!(lock.flags.contains(&"no_expiry".to_string()));
    let past = lockscope::now_ms() - 60_000;
    assert!(rr::setnx_deadline(&mut conn, "legacy:deadline", past).await?);
    let lock = wait_key(&ls, "cache", "legacy:deadline", "deadline", |_| true).await?;
    assert_eq!(lock.recipe, "setnx_deadline");
    assert!(
        lock.flags.contains(&"deadline_past".to_string()),
        "{lock:?}"
    );
    assert_eq!(lock.deadline_ms, Some(past));

    // Redisson RLock: re-entry, watchdog TTL, unlock-channel subscribers as watchers.
    let client = rr::RedissonClient::new();
    assert_eq!(
        client
            .rlock_try_lock(&mut conn, "lock:rl", 52, 30_000)
            .await?,
        None
    );
    assert_eq!(
        client
            .rlock_try_lock(&mut conn, "lock:rl", 52, 30_000)
            .await?,
        None
    );
    let other = rr::RedissonClient::new();
    assert!(other
        .rlock_try_lock(&mut conn, "lock:rl", 7, 30_000)
        .await?
        .is_some());
    let _w1 =
        rr::subscribe_unlock_channel(&server.url(), "redisson_lock__channel:{lock:rl}").await?;
    let _w2 =
        rr::subscribe_unlock_channel(&server.url(), "redisson_lock__channel:{lock:rl}").await?;
    // Subscriptions are not keyspace events: the next reconcile or change shows them.
    client.rlock_renew(&mut conn, "lock:rl", 52, 30_000).await?;
    let lock = wait_key(
        &ls,
        "cache",
        "lock:rl",
        "rlock with 2 waiters subscribed",
        |l| l.watchers == 2,
    )
    .await?;
    assert_eq!(lock.recipe, "redisson_lock");
    assert_eq!(lock.holders[0].reentrancy, Some(2));
    assert!(lock.holders[0].node.ends_with(":52"));
    assert!(lock.herd, "two connections wake on unlock");
    assert_eq!(
        client
            .rlock_unlock(&mut conn, "lock:rl", 52, 30_000)
            .await?,
        Some(false)
    );
    let lock = wait_key(&ls, "cache", "lock:rl", "re-entry down to 1", |l| {
        l.holders.first().and_then(|h| h.reentrancy) == Some(1)
    })
    .await?;
    assert_eq!(lock.holders.len(), 1);
    assert_eq!(
        client
            .rlock_unlock(&mut conn, "lock:rl", 52, 30_000)
            .await?,
        Some(true)
    );
    wait_gone(&ls, "cache", "lock:rl").await?;

    // FairLock: an ordered waiter queue with deadlines.
    let (a, b, c) = (
        rr::RedissonClient::new(),
        rr::RedissonClient::new(),
        rr::RedissonClient::new(),
    );
    let now = lockscope::now_ms();
    assert_eq!(
        a.fair_try_lock(&mut conn, "lock:fair", 1, 30_000, 60_000, now)
            .await?,
        None
    );
    assert!(b
        .fair_try_lock(&mut conn, "lock:fair", 2, 30_000, 60_000, now)
        .await?
        .is_some());
    assert!(c
        .fair_try_lock(&mut conn, "lock:fair", 3, 30_000, 60_000, now + 1)
        .await?
        .is_some());
    let lock = wait_key(&ls, "cache", "lock:fair", "fair queue of 2", |l| {
        l.waiters.len() == 2
    })
    .await?;
    assert_eq!(lock.recipe, "redisson_fair_lock");
    assert_eq!(lock.waiters[0].node, format!("{}:2", b.uuid));
    assert_eq!(lock.waiters[1].node, format!("{}:3", c.uuid));
    assert!(lock.waiters.iter().all(|w| w.deadline_ms.is_some()));

    // ReadWriteLock.
    assert!(a
        .rw_read_lock(&mut conn, "lock:doc", 1, 30_000)
        .await?
        .is_none());
    assert!(b
        .rw_read_lock(&mut conn, "lock:doc", 2, 30_000)
        .await?
        .is_none());
    let lock = wait_key(&ls, "cache", "lock:doc", "two readers", |l| {
        l.holders.len() == 2
    })
    .await?;
    assert_eq!(lock.recipe, "redisson_rw_lock");
    assert!(lock.holders.iter().all(|h| h.mode == Some(LockMode::Read)));

    // Semaphore (3 permits configured) and FencedLock.
    a.semaphore_set_permits(&mut conn, "rl:pool", 3).await?;
    assert!(a.semaphore_try_acquire(&mut conn, "rl:pool", 2).await?);
    let lock = wait_key(&ls, "cache", "rl:pool", "semaphore", |l| {
        l.permits_available == Some(1)
    })
    .await?;
    assert_eq!(lock.recipe, "redisson_semaphore");
    assert_eq!(lock.permits_total, Some(3));
    let rr::FencedAttempt::Acquired(token) =
        a.fenced_try_lock(&mut conn, "lock:pay", 1, 30_000).await?
    else {
        panic!("fenced lock not acquired");
    };
    let lock = wait_key(&ls, "cache", "lock:pay", "fenced", |l| {
        l.fencing_token.is_some()
    })
    .await?;
    assert_eq!(lock.recipe, "redisson_fenced_lock");
    assert_eq!(lock.fencing_token, Some(token));

    // python-redis-lock, the real library (4.0.1 defaults: `lock:<name>` = a 24-character base64
    // id, no TTL). This source configures no `python_redis_locks`, so the recipe is a guess from
    // the id's shape, and the lock says so.
    let mut py = PyClient::python_redis_lock(&server.url(), "report", None).await?;
    let got = py.acquire().await?;
    assert_eq!(got.key.as_deref(), Some("lock:report"));
    let py_id = got.token.context("python-redis-lock reported no id")?;
    assert_eq!(py_id.len(), 24, "{py_id}");
    let lock = wait_key(&ls, "cache", "lock:report", "python-redis-lock", |l| {
        !l.holders.is_empty()
    })
    .await?;
    assert_eq!(lock.recipe, "python_redis_lock");
    assert_eq!(lock.holders[0].node, py_id);
    assert!(
        lock.recipe_guess
            .as_deref()
            .is_some_and(|g| g.contains("python-redis-lock")),
        "without configuration the recipe is a guess that says why: {lock:?}"
    );
    assert_eq!(lock.ttl_ms, None, "expire=None: no TTL");
    assert!(lock.flags.contains(&"no_expiry".to_string()), "{lock:?}");

    // ShedLock (6.7.0+): the holder is the whole value `ADDED:<iso>@<host>:<uuid>`, not the host.
    assert!(rr::shedlock_lock(&mut conn, "job-lock:prod:nightly", "batch-host-3", 60_000).await?);
    let value: String = redis::cmd("GET")
        .arg("job-lock:prod:nightly")
        .query_async(&mut conn)
        .await?;
    let lock = wait_key(&ls, "cache", "job-lock:prod:nightly", "shedlock", |l| {
        !l.holders.is_empty()
    })
    .await?;
    assert_eq!(lock.recipe, "shedlock");
    assert_eq!(lock.recipe_guess, None, "{lock:?}");
    let node = &lock.holders[0].node;
    assert!(
        node.starts_with("ADDED:") && node.contains("@batch-host-3"),
        "{node}"
    );
    assert_eq!(node, &value, "the holder is the whole value");
    assert_eq!(
        lock.holders[0].identity.as_deref(),
        Some("batch-host-3"),
        "who holds: the host in the value"
    );

    let text = ls.metrics().await?;
    assert!(
        metric_value(
            &text,
            "lockscope_lock_ttl_seconds{source=\"cache\",lock=\"lock:pay\"}"
        )
        .is_some_and(|v| v > 20.0),
        "{text}"
    );
    assert!(metric_value(&text, "lockscope_lock_releases_total{source=\"cache\",lock=\"lock:orders\",cause=\"released\"}") == Some(1.0), "{text}");
    assert_eq!(
        metric_value(
            &text,
            "lockscope_locks{source=\"cache\",recipe=\"shedlock\"}"
        ),
        Some(1.0)
    );
    py.release().await?;
    wait_gone(&ls, "cache", "lock:report").await?;
    py.exit().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_expiry_is_seen_within_a_second_among_1m_ttl_keys() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    load_noise(&mut conn, 1_000_000).await?;
    // The default reconcile interval: expiries must be found by deadline reads, not scans.
    let mut s = source("cache", &server.url());
    s.watch.reconcile_interval = Duration::from_secs(60);
    let ls = Lockscope::start(redis_config(vec![s])).await?;
    ls.wait_ready(Duration::from_secs(60)).await?;
    let mut deadlines = Vec::new();
    for i in 0..20 {
        let key = format!("lock:exp{i}");
        assert!(rr::token_lock_acquire(&mut conn, &key, "t", 1_500 + i * 50).await?);
        deadlines.push((key, lockscope::now_ms() + 1_500 + i as i64 * 50));
    }
    for (key, _) in &deadlines {
        wait_key(&ls, "cache", key, "expiring lock seen", |l| {
            l.holders.len() == 1
        })
        .await?;
    }
    let mut worst = 0;
    for (key, deadline) in &deadlines {
        wait_gone(&ls, "cache", key).await?;
        let seen = lockscope::now_ms();
        worst = worst.max(seen - deadline);
    }
    assert!(
        worst < 1_000,
        "an expiry took {worst} ms past its deadline to show"
    );
    let text = ls.metrics().await?;
    assert_eq!(
        metric_value(&text, "lockscope_lock_releases_total{source=\"cache\",lock=\"lock:exp0\",cause=\"ttl_expired\"}"),
        Some(1.0),
        "{text}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_majority_split_and_minority() -> Result<()> {
    let masters = [
        RedisServer::start().await?,
        RedisServer::start().await?,
        RedisServer::start().await?,
    ];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let config = Config {
        sources: section(
            "redlock",
            vec![RedlockConfig::new("orders-redlock", &urls, &["rl:*"])],
        ),
        ..Config::default()
    };
    let ls = start(config).await?;
    let redlock = rr::Redlock::connect(&urls).await?;
    assert!(redlock.lock("rl:order-1", "t1", 30_000).await?);
    let lock = wait_key(
        &ls,
        "orders-redlock",
        "rl:order-1",
        "majority holder",
        |l| l.holders.len() == 1,
    )
    .await?;
    assert_eq!(lock.recipe, "redlock");
    let view = lock.redlock.clone().expect("redlock view");
    assert_eq!(view.majority_holder.as_deref(), Some("t1"));
    assert!(!view.split);
    assert_eq!(view.masters.len(), 3);
    assert!(lock.ttl_ms.is_some());

    // A split: two holders, no majority.
    redlock.lock_on(&[0], "rl:split", "a", 30_000).await?;
    redlock.lock_on(&[1], "rl:split", "b", 30_000).await?;
    let lock = wait_key(&ls, "orders-redlock", "rl:split", "split", |l| {
        l.redlock.as_ref().is_some_and(|r| r.split)
    })
    .await?;
    assert!(lock.holders.is_empty());
    assert!(lock.flags.contains(&"no_majority".to_string()));
    // A stale minority holder beside a majority.
    redlock
        .lock_on(&[0, 1], "rl:minority", "new", 30_000)
        .await?;
    redlock.lock_on(&[2], "rl:minority", "old", 30_000).await?;
    let lock = wait_key(&ls, "orders-redlock", "rl:minority", "minority", |l| {
        l.flags.contains(&"minority_holder".to_string())
    })
    .await?;
    assert_eq!(lock.holders[0].node, "new");
    assert_eq!(
        lock.redlock.expect("view").minority_holders,
        vec!["old".to_string()]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_keys_on_every_master() -> Result<()> {
    let cluster = RedisCluster::start(3).await?;
    let mut s = source("cl", &cluster.urls()[0]);
    s.cluster = true;
    let ls = start(redis_config(vec![s])).await?;
    let mut on_node = [0usize; 3];
    let mut keys = Vec::new();
    for i in 0..30 {
        let key = format!("lock:c{i}");
        let node = cluster.node_for(key.as_bytes()).await?;
        on_node[node] += 1;
        let mut conn = cluster.connection_for(key.as_bytes()).await?;
        assert!(rr::token_lock_acquire(&mut conn, &key, &format!("t{i}"), 60_000).await?);
        keys.push(key);
    }
    assert!(
        on_node.iter().all(|n| *n > 0),
        "keys spread over every master: {on_node:?}"
    );
    for key in &keys {
        wait_key(&ls, "cl", key, "cluster key", |l| l.holders.len() == 1).await?;
    }
    let sources = ls.sources().await?;
    assert!(sources[0].up && sources[0].synced, "{sources:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_killed_pubsub_and_odd_keys() -> Result<()> {
    let mut server = RedisServer::start().await?;
    let ls = start(redis_config(vec![source("cache", &server.url())])).await?;
    let mut conn = server.connection().await?;
    assert!(rr::token_lock_acquire(&mut conn, "lock:a", "t-a", 60_000).await?);
    wait_key(&ls, "cache", "lock:a", "lock a", |l| l.holders.len() == 1).await?;

    // Kill lockscope's pub/sub connection; a change made meanwhile must still show.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await?;
    assert!(rr::token_lock_acquire(&mut conn, "lock:b", "t-b", 60_000).await?);
    wait_key(
        &ls,
        "cache",
        "lock:b",
        "change during the pub/sub gap",
        |l| l.holders.len() == 1,
    )
    .await?;

    // Odd keys and values: binary, a huge hash, a key that changes type.
    let odd: &[u8] = b"lock:\xff\x00bin";
    let _: () = redis::cmd("SET")
        .arg(odd)
        .arg(&b"\x80\x81tok"[..])
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await?;
    let mut pipe = redis::pipe();
    for i in 0..100_000 {
        pipe.cmd("HSET")
            .arg("lock:huge")
            .arg(format!("f{i}"))
            .arg(1)
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn).await?;
    let _: () = redis::cmd("SET")
        .arg("lock:shape")
        .arg("tok")
        .query_async(&mut conn)
        .await?;
    let _: () = redis::cmd("DEL")
        .arg("lock:shape")
        .query_async(&mut conn)
        .await?;
    let _: () = redis::cmd("RPUSH")
        .arg("lock:shape")
        .arg("x")
        .query_async(&mut conn)
        .await?;
    let lock = wait_key(&ls, "cache", "lock:huge", "huge hash", |l| {
        !l.holders.is_empty()
    })
    .await?;
    // HSCAN's COUNT is a hint: about 1000 fields, never the 100k.
    assert!(
        lock.holders.len() <= 2000,
        "bounded read: {}",
        lock.holders.len()
    );
    let locks = ls.locks().await?;
    assert!(
        locks.iter().any(|l| l.path == "lock:\\xff\u{0}bin"),
        "{:?}",
        locks.iter().map(|l| &l.path).collect::<Vec<_>>()
    );
    assert!(
        !locks.iter().any(|l| l.path == "lock:shape"),
        "a list is not a lock"
    );

    // The server restarts (empty: no persistence): down, then up and equal to a fresh scan.
    server.kill();
    let mut last = String::new();
    eventually(WAIT, "the source shown down", async || {
        last = ls.metrics().await?;
        let up = metric_value(&last, "lockscope_source_up{source=\"cache\"}");
        Ok((up == Some(0.0)).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last /metrics:\n{last}"))?;
    server.restart().await?;
    let mut conn = server.connection().await?;
    assert!(rr::token_lock_acquire(&mut conn, "lock:after", "t-after", 60_000).await?);
    wait_key(&ls, "cache", "lock:after", "lock after restart", |l| {
        l.holders.len() == 1
    })
    .await?;
    wait_gone(&ls, "cache", "lock:a").await?;
    let detail = ls.detail("cache", "/lock:after").await?;
    assert_eq!(detail.lock.holders[0].node, "t-after");
    let gone = ls.lock("cache", "/lock:b").await?;
    assert!(gone.is_none());
    // Equal to a fresh scan: a new lockscope reading the same server shows the same locks.
    let fresh = start(redis_config(vec![source("cache", &server.url())])).await?;
    let picture = |locks: Vec<LockView>| -> Vec<(String, Vec<String>)> {
        let mut v: Vec<_> = locks
            .into_iter()
            .map(|l| (l.path, l.holders.into_iter().map(|h| h.node).collect()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(picture(ls.locks().await?), picture(fresh.locks().await?));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_and_password_from_the_url() -> Result<()> {
    let server = RedisServer::start().await?;
    {
        // Lock the server down at runtime (the fixture's readiness check pings unauthenticated).
        let mut admin = server.connection().await?;
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "watcher", "on", ">watchpw", "~*", "&*", "+@all"])
            .query_async(&mut admin)
            .await?;
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "requirepass", "adminpw"])
            .query_async(&mut admin)
            .await?;
    }
    let ls = start(redis_config(vec![source(
        "acl",
        &format!("redis://watcher:watchpw@127.0.0.1:{}", server.port()),
    )]))
    .await?;
    let mut conn = lockscope_tests::support::redis::connect(&format!(
        "redis://:adminpw@127.0.0.1:{}",
        server.port()
    ))
    .await?;
    assert!(rr::token_lock_acquire(&mut conn, "lock:acl", "t", 60_000).await?);
    wait_key(&ls, "acl", "lock:acl", "lock behind ACL", |l| {
        l.holders.len() == 1
    })
    .await?;
    // Wrong credentials: the source is down with a clear error that does not show the password.
    let bad = Lockscope::start(redis_config(vec![source(
        "bad",
        &format!("redis://watcher:nope@127.0.0.1:{}", server.port()),
    )]))
    .await?;
    let mut last = Vec::new();
    let error = eventually(WAIT, "bad credentials reported", async || {
        last = bad.sources().await?;
        Ok(last[0]
            .error
            .clone()
            .filter(|e| !last[0].up && e != "connecting"))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last sources: {last:?}"))?;
    assert!(!error.contains("nope"), "{error}");
    let _ = ReleaseCause::Released;
    Ok(())
}

/// A CA and a server certificate for 127.0.0.1, made with `openssl` in `dir`.
fn make_certs(dir: &std::path::Path) -> Result<()> {
    let run = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=lockscope-test-ca",
    ])?;
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=127.0.0.1",
    ])?;
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )?;
    run(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.crt",
        "-days",
        "1",
        "-extfile",
        "ext",
    ])?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_configured_ca() -> Result<()> {
    let certs = tempfile::tempdir()?;
    make_certs(certs.path())?;
    let tls_port = lockscope_tests::support::ports::free_port().to_string();
    let file = |name: &str| certs.path().join(name).display().to_string();
    let (cert, key, ca) = (file("srv.crt"), file("srv.key"), file("ca.crt"));
    // The plain port stays for the fixture's readiness check; lockscope uses the TLS port only.
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ])
    .await?;
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let mut s = source("tls", &url);
    s.watch.tls_ca_file = Some(certs.path().join("ca.crt"));
    let ls = start(redis_config(vec![s])).await?;
    let mut conn = server.connection().await?;
    assert!(rr::token_lock_acquire(&mut conn, "lock:tls", "t-tls", 60_000).await?);
    wait_key(&ls, "tls", "lock:tls", "lock seen over TLS", |l| {
        l.holders.len() == 1
    })
    .await?;

    // Without the CA the server's certificate is not trusted: down, with the reason.
    let untrusted = Lockscope::start(redis_config(vec![source("untrusted", &url)])).await?;
    let mut last = Vec::new();
    eventually(WAIT, "untrusted TLS reported", async || {
        last = untrusted.sources().await?;
        let reported = !last[0].up && last[0].error.as_deref().is_some_and(|e| e != "connecting");
        Ok(reported.then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last sources: {last:?}"))?;
    Ok(())
}
