//! lockscope against the real client libraries a registry ships (kazoo, redis-py,
//! python-redis-lock and pottery from PyPI, in the virtual environment test support builds from
//! `tests/py/requirements.txt`): what each library leaves on a real server is what lockscope
//! shows, and a force release wakes the library's own waiters. Facts are awaited with bounds.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig, RedlockConfig};
use lockscope_model::id::lock_id;
use lockscope_model::session_hex;
use lockscope_model::wire::{LockMode, ReleaseCause};
use lockscope_tests::harness::{eventually_every, Lockscope};
use lockscope_tests::support::python::{python_and_script, Outcome, PyClient};
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "oncall-token-0123456789abcdef";

/// Builds the Python environment (once per test binary) off the async workers.
async fn prepare_python() -> Result<()> {
    tokio::task::spawn_blocking(python_and_script).await??;
    Ok(())
}

fn sid(client: &PyClient) -> Result<String> {
    Ok(session_hex(client.session_id().context("no session id")?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_lock_read_write_lock_and_semaphore() -> Result<()> {
    let (python, zk) = tokio::join!(prepare_python(), ZkEnsemble::start(3));
    python?;
    let zk = zk?;
    let hosts = zk.connect_string();
    let root = unique_root("kazoo");
    let ls = Lockscope::watching("zk", &hosts, &[&root]).await?;

    // Lock: a mutex. Its holder has no read/write mode; waiters in queue order.
    let path = format!("{root}/mutex");
    let mut a = PyClient::kazoo_lock(&hosts, &path, "alice").await?;
    a.acquire().await?;
    let mut b = PyClient::kazoo_lock(&hosts, &path, "bob").await?;
    b.start_acquire().await?;
    let mut c = PyClient::kazoo_lock(&hosts, &path, "carol").await?;
    c.start_acquire().await?;
    let lock = ls
        .wait_lock("zk", &path, WAIT, "kazoo mutex with 2 waiters", |l| {
            l.waiters.len() == 2
        })
        .await?;
    assert_eq!(lock.recipe, "kazoo_lock");
    assert_eq!(lock.holders.len(), 1);
    assert_eq!(lock.holders[0].mode, None, "a kazoo Lock is a mutex");
    assert_eq!(lock.holders[0].session, sid(&a)?);
    assert_eq!(
        lock.waiters
            .iter()
            .map(|w| w.session.clone())
            .collect::<Vec<_>>(),
        vec![sid(&b)?, sid(&c)?]
    );
    // Who they are in kazoo's own words: the identifier each wrote as its node's data (what
    // kazoo's `contenders()` lists).
    assert_eq!(lock.holders[0].identity.as_deref(), Some("alice"));
    assert_eq!(
        lock.waiters
            .iter()
            .map(|w| w.identity.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["bob", "carol"]
    );
    // kazoo waiters watch their predecessor only: no herd.
    let lock = ls
        .wait_lock("zk", &path, WAIT, "predecessor watches", |l| {
            l.waiters.iter().all(|w| w.watches.is_some())
        })
        .await?;
    assert!(!lock.herd, "{lock:?}");
    a.release().await?;
    b.wait_acquired(WAIT).await?;
    let lock = ls
        .wait_lock("zk", &path, WAIT, "bob holds", |l| {
            l.holders.first().map(|h| h.session.clone()) == sid(&b).ok()
        })
        .await?;
    assert_eq!(lock.waiters.len(), 1);

    // ReadLock / WriteLock: two readers hold together, a writer waits with mode write.
    let rw = format!("{root}/rw");
    let mut r1 = PyClient::kazoo_read_lock(&hosts, &rw, "r1").await?;
    r1.acquire().await?;
    let mut r2 = PyClient::kazoo_read_lock(&hosts, &rw, "r2").await?;
    r2.acquire().await?;
    let mut w = PyClient::kazoo_write_lock(&hosts, &rw, "w").await?;
    w.start_acquire().await?;
    let lock = ls
        .wait_lock("zk", &rw, WAIT, "two readers and a writer", |l| {
            l.holders.len() == 2 && l.waiters.len() == 1
        })
        .await?;
    assert_eq!(lock.recipe, "kazoo_lock");
    assert!(lock.holders.iter().all(|h| h.mode == Some(LockMode::Read)));
    assert_eq!(lock.waiters[0].mode, Some(LockMode::Write));
    assert_eq!(lock.waiters[0].session, sid(&w)?);

    // Semaphore(max_leases=2): leases are children of the path, contenders queue on the sibling
    // `<path>-__lock__`; one lock, not three.
    let pool = format!("{root}/pool");
    let mut s1 = PyClient::kazoo_semaphore(&hosts, &pool, "s1", 2).await?;
    s1.acquire().await?;
    let mut s2 = PyClient::kazoo_semaphore(&hosts, &pool, "s2", 2).await?;
    s2.acquire().await?;
    let mut s3 = PyClient::kazoo_semaphore(&hosts, &pool, "s3", 2).await?;
    s3.start_acquire().await?;
    let lock = ls
        .wait_lock("zk", &pool, WAIT, "semaphore: 2 leases, 1 waiting", |l| {
            l.holders.len() == 2 && l.waiters.len() == 1
        })
        .await?;
    assert_eq!(lock.recipe, "kazoo_semaphore");
    assert_eq!(lock.max_leases, Some(2), "kazoo writes max_leases as data");
    let mut holders: Vec<String> = lock.holders.iter().map(|h| h.session.clone()).collect();
    holders.sort();
    let mut want = vec![sid(&s1)?, sid(&s2)?];
    want.sort();
    assert_eq!(holders, want);
    assert_eq!(lock.waiters[0].session, sid(&s3)?);
    let locks = ls.locks().await?;
    let under_pool: Vec<&str> = locks
        .iter()
        .filter(|l| l.path.starts_with(&pool))
        .map(|l| l.path.as_str())
        .collect();
    assert_eq!(
        under_pool,
        vec![pool.as_str()],
        "leases and the contender lock are parts of the semaphore"
    );
    // A crashed lease holder's session expires; the waiter takes its lease.
    let gone = sid(&s1)?;
    s1.crash();
    s3.wait_acquired(WAIT).await?;
    ls.wait_lock("zk", &pool, WAIT, "s3 holds a lease", |l| {
        l.waiters.is_empty() && l.holders.iter().all(|h| h.session != gone)
    })
    .await?;
    // The cause is booked once the ensemble has told whether the session expired.
    let mut last = None;
    let cause = eventually_every(
        WAIT,
        Duration::from_millis(50),
        &format!("a release booked for {gone} with its cause"),
        async || {
            let detail = ls.detail("zk", &pool).await?;
            let cause = detail
                .events
                .iter()
                .rev()
                .find(|e| e.kind == "released" && e.session == gone)
                .and_then(|e| e.cause);
            last = Some(detail);
            Ok(cause)
        },
    )
    .await
    .with_context(|| format!("last detail: {last:?}"))?;
    assert_eq!(cause, ReleaseCause::SessionExpired);
    // s3 queued on the contender lock and holds a lease node: its wait is one wait.
    let detail = ls.detail("zk", &pool).await?;
    let s3_session = sid(&s3)?;
    let waited = detail
        .events
        .iter()
        .find(|e| e.kind == "acquired" && e.session == s3_session)
        .and_then(|e| e.duration_ms);
    assert!(waited.is_some_and(|w| w > 0), "{:?}", detail.events);
    assert!(
        !detail
            .events
            .iter()
            .any(|e| e.kind == "left_queue" && e.session == s3_session),
        "a waiter that got its lease did not leave the queue: {:?}",
        detail.events
    );
    for client in [b, c, r1, r2, w, s2, s3] {
        client.exit().await?;
    }
    Ok(())
}

/// kazoo's `NonBlockingLease` and `MultiNonBlockingLease` (kazoo 2.11 from PyPI): a lease held
/// by time in a persistent `lease_holder` node, shown with its holder's identifier and its end;
/// a competitor is refused while it runs; a guarded force release ends it (its record rewritten
/// with an end in the past) and the competitor takes it over; a lease that runs out is flagged
/// `deadline_passed`; the multi-lease's slots are locks of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_leases_held_by_time_ended_by_force_and_by_their_end() -> Result<()> {
    let (python, zk) = tokio::join!(prepare_python(), ZkEnsemble::start(1));
    python?;
    let zk = zk?;
    let hosts = zk.connect_string();
    let root = unique_root("lease");
    let admin = tempfile::tempdir()?;
    let config = Config {
        sources: section(
            "zookeeper",
            vec![lockscope_tests::harness::zk_source("zk", &hosts, &[&root])],
        ),
        ..Config::default()
    };
    let ls = Lockscope::start(with_admin(config, admin.path())).await?;
    ls.wait_ready(WAIT).await?;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    };

    let path = format!("{root}/nightly");
    let mut a = PyClient::kazoo_lease(&hosts, &path, "worker-a", Duration::from_secs(600)).await?;
    let got = a.acquire().await?;
    let node = got.node.context("the lease's node")?;
    ensure!(node == format!("{path}/lease_holder"), "{node}");
    let lock = ls
        .wait_lock("zk", &path, WAIT, "the lease held by worker-a", |l| {
            // Not kazoo's short internal lock around the take: the lease record itself.
            l.recipe == "kazoo_lease" && l.holders.len() == 1
        })
        .await?;
    ensure!(lock.recipe == "kazoo_lease", "{lock:?}");
    ensure!(
        lock.holders[0].identity.as_deref() == Some("worker-a"),
        "{lock:?}"
    );
    let end = lock.deadline_ms.context("the lease's end")?;
    ensure!(
        end > now() + 500_000 && end <= now() + 601_000,
        "the end is ten minutes away: {end}"
    );
    ensure!(
        lock.stale.is_empty(),
        "a running lease is not stale: {lock:?}"
    );
    // A lease is a persistent node held by time: no session owns it, so no "session 0x0" is
    // listed as holding it (the lock shows who holds it, in its own words).
    let sessions = ls.sessions().await?;
    ensure!(
        sessions
            .iter()
            .all(|s| s.session != "0x0" && !s.holds.contains(&lock.id)),
        "{sessions:#?}"
    );

    // Another holder is refused while the lease runs (kazoo answers at once: nothing waits).
    let mut b = PyClient::kazoo_lease(&hosts, &path, "worker-b", Duration::from_secs(600)).await?;
    ensure!(
        b.try_acquire().await?.is_none(),
        "worker-b got a running lease"
    );

    // A stale compare is refused and changes nothing.
    let id = lock_id("zk", &path);
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": node, "session": "0x0", "version": "1", "reason": "test"}),
        )
        .await?;
    ensure!(status == 409, "a wrong czxid: {status} {body}");
    // The guarded release ends the lease; worker-b takes it over.
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": node, "session": "0x0",
                    "version": lock.holders[0].version, "reason": "nightly job hung"}),
        )
        .await?;
    ensure!(status == 200, "release answered {status}: {body}");
    ensure!(
        body["released"]["lease_holder"] == "worker-a",
        "the lease record named its holder: {body}"
    );
    ls.wait_lock("zk", &path, WAIT, "the ended lease is flagged", |l| {
        l.deadline_ms.is_some_and(|d| d < now())
            && l.stale.iter().any(|s| s.rule == "deadline_passed")
    })
    .await?;
    ensure!(
        b.try_acquire().await?.is_some(),
        "worker-b takes over an ended lease"
    );
    ls.wait_lock("zk", &path, WAIT, "worker-b holds the lease", |l| {
        l.recipe == "kazoo_lease"
            && l.holders.first().and_then(|h| h.identity.as_deref()) == Some("worker-b")
            && l.stale.is_empty()
    })
    .await?;

    // A lease that runs out by itself.
    let short = format!("{root}/short");
    let mut c = PyClient::kazoo_lease(&hosts, &short, "worker-c", Duration::from_secs(2)).await?;
    c.acquire().await?;
    ls.wait_lock("zk", &short, WAIT, "the short lease runs out", |l| {
        l.recipe == "kazoo_lease"
            && l.holders.len() == 1
            && l.stale.iter().any(|s| s.rule == "deadline_passed")
    })
    .await?;

    // MultiNonBlockingLease(2): two slots, each a lease of its own; a third holder is refused.
    let pool = format!("{root}/pool");
    let mut m1 =
        PyClient::kazoo_multi_lease(&hosts, &pool, "m1", Duration::from_secs(600), 2).await?;
    m1.acquire().await?;
    let mut m2 =
        PyClient::kazoo_multi_lease(&hosts, &pool, "m2", Duration::from_secs(600), 2).await?;
    m2.acquire().await?;
    let mut m3 =
        PyClient::kazoo_multi_lease(&hosts, &pool, "m3", Duration::from_secs(600), 2).await?;
    ensure!(
        m3.try_acquire().await?.is_none(),
        "a third holder of two slots"
    );
    for (slot, who) in [("0", "m1"), ("1", "m2")] {
        let lock = ls
            .wait_lock(
                "zk",
                &format!("{pool}/{slot}"),
                WAIT,
                "a slot's holder",
                |l| l.recipe == "kazoo_lease" && l.holders.len() == 1,
            )
            .await?;
        ensure!(
            lock.recipe == "kazoo_lease" && lock.holders[0].identity.as_deref() == Some(who),
            "{lock:?}"
        );
    }
    for client in [a, b, c, m1, m2, m3] {
        client.exit().await?;
    }
    Ok(())
}

fn with_admin(config: Config, dir: &Path) -> Config {
    lockscope_tests::harness::with_admin(config, dir, TOKEN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_lock_with_blocked_waiters_and_a_force_release() -> Result<()> {
    let (python, server) = tokio::join!(prepare_python(), RedisServer::start());
    python?;
    let server = server?;
    let dir = tempfile::tempdir()?;
    let mut guessed = RedisSourceConfig::new("r", &server.url(), &["lock:*"]);
    guessed.watch.reconcile_interval = Duration::from_secs(2);
    let mut configured = RedisSourceConfig::new("conf", &server.url(), &["lock:conf-*"]);
    configured.watch.python_redis_locks = vec!["lock:conf-*".into()];
    let config = with_admin(
        Config {
            sources: section("redis", vec![guessed, configured]),
            ..Config::default()
        },
        dir.path(),
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;

    // python-redis-lock 4.0.1 defaults: a 24-character base64 id, no TTL, waiters in BLPOP.
    let mut holder = PyClient::python_redis_lock(&server.url(), "report", None).await?;
    let got = holder.acquire().await?;
    let id = got.token.clone().context("no id")?;
    assert_eq!(id.len(), 24, "{id}");
    let lock = ls
        .wait_lock("r", "/lock:report", WAIT, "python-redis-lock held", |l| {
            !l.holders.is_empty()
        })
        .await?;
    assert_eq!(lock.recipe, "python_redis_lock");
    assert_eq!(lock.holders[0].node, id);
    assert!(
        lock.recipe_guess
            .as_deref()
            .is_some_and(|g| g.contains("python-redis-lock")),
        "without configuration the recipe is a guess that says why: {lock:?}"
    );
    assert_eq!(lock.ttl_ms, None, "expire=None: no TTL");
    assert!(lock.flags.contains(&"no_expiry".to_string()));

    // Two waiters block in BLPOP: Redis cannot say on which key, lockscope says so.
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let mut w = PyClient::python_redis_lock(&server.url(), "report", None).await?;
        w.start_acquire().await?;
        waiters.push(w);
    }
    let lock = ls
        .wait_lock("r", "/lock:report", WAIT, "2 blocked clients", |l| {
            l.unattributed_waiters == Some(2)
        })
        .await?;
    assert!(lock.waiters.is_empty(), "no waiter can be named: {lock:?}");
    let text = ls.metrics().await?;
    assert_eq!(
        lockscope_tests::harness::metric_value(
            &text,
            "lockscope_lock_unattributed_waiters{source=\"r\",lock=\"lock:report\"}"
        ),
        Some(2.0),
        "{text}"
    );

    // Configured patterns need no guess.
    let mut conf = PyClient::python_redis_lock(&server.url(), "conf-a", Some(60)).await?;
    conf.acquire().await?;
    let lock = ls
        .wait_lock("conf", "/lock:conf-a", WAIT, "configured", |l| {
            !l.holders.is_empty()
        })
        .await?;
    assert_eq!(
        (lock.recipe.as_str(), lock.recipe_guess.as_deref()),
        ("python_redis_lock", None)
    );
    assert!(lock.ttl_ms.is_some_and(|t| t <= 60_000));
    conf.release().await?;

    // Force release: compare-and-delete, then the library's own wake-up (LPUSH to the signal
    // list): one waiter, blocked forever (BLPOP timeout 0), takes the lock.
    let lock_url = lock_id("r", "/lock:report");
    let answer = ls
        .http
        .post(format!("{}/api/v1/locks/{lock_url}/release", ls.base))
        .bearer_auth(TOKEN)
        .json(&json!({"holder": id, "reason": "stuck report job"}))
        .send()
        .await?;
    let status = answer.status().as_u16();
    let body: serde_json::Value = answer.json().await?;
    ensure!(status == 200, "release answered {status}: {body}");
    // Which of the two woke is up to Redis: ask each in turn, briefly, until one says.
    let deadline = tokio::time::Instant::now() + WAIT;
    let (i, next) = 'woke: loop {
        for (i, w) in waiters.iter_mut().enumerate() {
            if let Ok(Outcome::Acquired(a)) = w.wait_outcome(Duration::from_millis(100)).await {
                break 'woke (i, a);
            }
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no waiter woke after the force release"
        );
    };
    let next_id = next.token.context("no id")?;
    ls.wait_lock(
        "r",
        "/lock:report",
        WAIT,
        "the woken waiter holds, one client still blocked",
        |l| {
            l.holders.first().map(|h| h.node.as_str()) == Some(next_id.as_str())
                && l.unattributed_waiters == Some(1)
        },
    )
    .await?;
    let detail = ls.detail("r", "/lock:report").await?;
    assert!(
        detail
            .events
            .iter()
            .any(|e| e.kind == "released" && e.node == id && e.cause == Some(ReleaseCause::Forced)),
        "{:?}",
        detail.events
    );
    // The old holder is not told; its own release finds another id and deletes nothing.
    let _ = holder.release().await;
    let lock = ls.lock("r", "/lock:report").await?.context("lock")?;
    assert_eq!(lock.holders[0].node, next_id);
    waiters[i].release().await?;
    let other = 1 - i;
    waiters[other].wait_acquired(WAIT).await?;
    waiters[other].release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_lock_and_pottery_redlock() -> Result<()> {
    let (python, a, b, c) = tokio::join!(
        prepare_python(),
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start()
    );
    python?;
    let masters = [a?, b?, c?];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let mut single = RedisSourceConfig::new("r", &urls[0], &["lock:*", "py:*"]);
    single.watch.reconcile_interval = Duration::from_secs(2);
    let config = Config {
        sources: [
            section("redis", vec![single]),
            section(
                "redlock",
                vec![RedlockConfig::new("rl", &urls, &["redlock:*"])],
            ),
        ]
        .concat(),
        ..Config::default()
    };
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;

    // redis-py's Lock: `SET name <token> NX PX`, a token lock; its waiters poll (not in Redis).
    let mut holder = PyClient::redis_py_lock(&urls[0], "py:orders", Some(20_000)).await?;
    let token = holder.acquire().await?.token.context("token")?;
    let lock = ls
        .wait_lock("r", "/py:orders", WAIT, "redis-py lock", |l| {
            !l.holders.is_empty()
        })
        .await?;
    assert_eq!(lock.recipe, "token_lock");
    assert_eq!(lock.holders[0].node, token);
    assert!(lock.ttl_ms.is_some_and(|t| t <= 20_000));
    assert_eq!(lock.recipe_guess, None);
    holder.release().await?;
    let mut last = None;
    let detail = eventually_every(
        WAIT,
        Duration::from_millis(50),
        "the redis-py lock released",
        async || {
            let detail = ls.detail("r", "/py:orders").await?;
            let gone = detail.gone.then(|| detail.clone());
            last = Some(detail);
            Ok(gone)
        },
    )
    .await
    .with_context(|| format!("last detail: {last:?}"))?;
    assert_eq!(
        detail.events.last().and_then(|e| e.cause),
        Some(ReleaseCause::Released)
    );

    // pottery's Redlock: `redlock:<key>` holding a UUID on a majority of masters.
    let name = unique_root("pottery").trim_start_matches('/').to_string();
    let key = format!("/redlock:{name}");
    let mut r1 = PyClient::pottery_redlock(&urls, &name, 20_000).await?;
    let t1 = r1.acquire().await?.token.context("token")?;
    let lock = ls
        .wait_lock("rl", &key, WAIT, "pottery redlock on all 3 masters", |l| {
            l.holders.len() == 1
                && l.redlock
                    .as_ref()
                    .is_some_and(|r| r.masters.iter().all(|m| m.holder.is_some()))
        })
        .await?;
    assert_eq!(lock.recipe, "redlock");
    assert_eq!(lock.holders[0].node, t1);
    let view = lock.redlock.clone().context("redlock view")?;
    assert_eq!(view.majority_holder.as_deref(), Some(t1.as_str()));
    assert!(!view.split);
    let mut r2 = PyClient::pottery_redlock(&urls, &name, 20_000).await?;
    r2.start_acquire().await?;
    r1.release().await?;
    let t2 = r2.wait_acquired(WAIT).await?.token.context("token")?;
    ls.wait_lock("rl", &key, WAIT, "second redlock holder", |l| {
        l.holders.first().map(|h| h.node.as_str()) == Some(t2.as_str())
    })
    .await?;
    // A crashed holder's keys stay until their TTL: still held, on every master.
    r2.crash();
    let lock = ls.lock("rl", &key).await?.context("still held")?;
    assert_eq!(lock.holders[0].node, t2);
    Ok(())
}
