//! Force release against real servers: each recipe's next waiter wakes (python-redis-lock's by the
//! real library from PyPI), a stale observed holder is refused and nothing changes, auth / body /
//! rate refusals, every attempt audited (and the audit surviving a restart), 1,000 releases racing
//! holder changes, and the CLI.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig, RedlockConfig};
use lockscope_model::id::lock_id;
use lockscope_model::session_hex;
use lockscope_model::wire::ReleaseCause;
use lockscope_tests::harness::{
    eventually, eventually_every, redis_admin, with_admin_limit, zk_source, Lockscope,
};
use lockscope_tests::recipes::{self, SeedClient, SeedRecipe};
use lockscope_tests::redis_recipes::{
    random_token, rlock_channel, shedlock_lock, shedlock_unlock, subscribe_unlock_channel,
    token_lock_acquire, RedissonClient, SubscriberHandle,
};
use lockscope_tests::support::curator::{CuratorClient, CuratorRecipe};
use lockscope_tests::support::python::{python_and_script, PyClient};
use lockscope_tests::support::redis::{RedisCluster, RedisServer};
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::{json, Value};

const TOKEN: &str = "oncall-token-0123456789abcdef";

async fn release(
    ls: &Lockscope,
    id: &str,
    body: Value,
    token: Option<&str>,
) -> Result<(u16, Value)> {
    ls.release(id, token, &body).await
}

/// A release with the admin token that must succeed: the answer's body.
async fn release_ok(ls: &Lockscope, id: &str, body: Value) -> Result<Value> {
    let (status, answer) = release(ls, id, body, Some(TOKEN)).await?;
    ensure!(status == 200, "{id}: {status} {answer}");
    Ok(answer)
}

/// Redisson's unlock message (`0`) reaches a waiter's subscription within 5 s.
async fn expect_unlock(unlock: &mut SubscriberHandle, who: &str) -> Result<()> {
    let message = unlock
        .next_message(Duration::from_secs(5))
        .await
        .with_context(|| format!("no unlock message for {who}"))?;
    ensure!(message == b"0", "{who}: {message:?}");
    Ok(())
}

/// Builds the Python environment of the real lock clients (once per test binary) off the async
/// workers.
async fn prepare_python() -> Result<()> {
    tokio::task::spawn_blocking(python_and_script).await??;
    Ok(())
}

/// Waits until `CLIENT LIST` on the server behind `conn` shows `n` clients blocked in `BLPOP`
/// (`cmd=blpop`, flag `b`).
async fn wait_blpop_clients(
    conn: &mut redis::aio::MultiplexedConnection,
    n: usize,
    timeout: Duration,
) -> Result<()> {
    let (mut blocked, mut list) = (0, String::new());
    eventually_every(
        timeout,
        Duration::from_millis(20),
        &format!("{n} clients blocked in BLPOP"),
        async || {
            list = redis::cmd("CLIENT").arg("LIST").query_async(conn).await?;
            blocked = list
                .lines()
                .filter(|l| {
                    l.split(' ').any(|f| f == "cmd=blpop")
                        && l.split(' ')
                            .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('b')))
                })
                .count();
            Ok((blocked == n).then_some(()))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last seen {blocked} blocked:\n{list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_release_wakes_the_next_waiter_and_refuses_stale_holders() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let connect = zk.connect_string();
    let root = unique_root("release");
    let dir = tempfile::tempdir()?;
    let config = with_admin_limit(
        Config {
            sources: section("zookeeper", vec![zk_source("zk", &connect, &[&root])]),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
        1000,
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;

    // Seed recipe: each waiter watches its predecessor.
    let path = format!("{root}/jobs");
    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let holder = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let held = recipes::lock(&holder, &path, &recipe).await?;
    let waiter = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let mut ticket = waiter.enqueue(&path, &recipe).await?;
    let waiting = waiter.clone();
    let woke = tokio::spawn(async move { ticket.acquired(&waiting).await.map(|_| ticket) });
    let lock = ls
        .wait_lock(
            "zk",
            &path,
            Duration::from_secs(10),
            "holder and waiter",
            |l| l.holders.len() == 1 && l.waiters.len() == 1,
        )
        .await?;
    let id = lock_id("zk", &path);
    let holder_node = lock.holders[0].node.clone();
    let waiter_node = lock.waiters[0].node.clone();

    // Naming the waiter (not a holder) is refused and changes nothing.
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": waiter_node, "reason": "test"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    // So is the right node with a session that does not own it.
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": holder_node, "session": session_hex(waiter.session_id()), "reason": "test"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    ensure!(
        holder.client().check_stat(&holder_node).await?.is_some(),
        "the holder node was touched"
    );

    let session = session_hex(holder.session_id());
    let request = json!({"holder": holder_node, "session": session,
                         "version": lock.holders[0].version, "reason": "stuck since deploy"});
    let body = release_ok(&ls, &id, request).await?;
    ensure!(body["released"]["node"] == holder_node.as_str(), "{body}");
    tokio::time::timeout(Duration::from_secs(10), woke)
        .await
        .context("the next waiter did not wake after the release")???;
    // The same holder again, once lockscope has seen it go (until then a request without its
    // session is refused as incomplete, 422): gone, refused.
    ls.wait_lock(
        "zk",
        &path,
        Duration::from_secs(10),
        "the released holder gone",
        |l| l.holders.iter().all(|h| h.node != holder_node),
    )
    .await?;
    let (status, _) = release(
        &ls,
        &id,
        json!({"holder": holder_node, "reason": "again"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(status == 409);
    drop(held);

    // Curator InterProcessMutex: the blocked Java client acquires once its predecessor goes.
    let cpath = format!("{root}/curator");
    let mut first = CuratorClient::spawn(&connect, 10_000, CuratorRecipe::Mutex, &cpath).await?;
    first.start_acquire().await?;
    first.wait_acquired(Duration::from_secs(15)).await?;
    let mut second = CuratorClient::spawn(&connect, 10_000, CuratorRecipe::Mutex, &cpath).await?;
    second.start_acquire().await?;
    let lock = ls
        .wait_lock(
            "zk",
            &cpath,
            Duration::from_secs(10),
            "curator queue",
            |l| l.holders.len() == 1 && l.waiters.len() == 1,
        )
        .await?;
    let (node, session) = (&lock.holders[0].node, &lock.holders[0].session);
    let body = json!({"holder": node, "session": session,
                      "version": lock.holders[0].version, "reason": "curator test"});
    release_ok(&ls, &lock_id("zk", &cpath), body).await?;
    second.wait_acquired(Duration::from_secs(15)).await?;
    ls.wait_lock("zk", &cpath, Duration::from_secs(10), "second holds", |l| {
        l.holders.len() == 1 && l.holders[0].session == session_hex(second.session_id())
    })
    .await?;

    let records = ls.audit_log().await?;
    let outcomes: Vec<&str> = records.iter().rev().map(|r| r.outcome.as_str()).collect();
    ensure!(
        outcomes
            == [
                "holder_changed",
                "holder_changed",
                "released",
                "holder_changed",
                "released"
            ],
        "{outcomes:?}"
    );
    ensure!(records.iter().all(|r| r.token_name == "oncall"));
    ensure!(
        records[2].reason == "stuck since deploy"
            || records.iter().any(|r| r.reason == "stuck since deploy")
    );
    // The timeline books the release as forced, and shows the waiter acquiring.
    ls.wait_detail(
        "zk",
        &path,
        Duration::from_secs(10),
        "the timeline books the forced release and the waiter acquiring",
        |d| {
            d.events.iter().any(|e| {
                e.kind == "released"
                    && e.node == holder_node
                    && e.cause == Some(ReleaseCause::Forced)
            }) && d
                .events
                .iter()
                .any(|e| e.kind == "acquired" && e.node == waiter_node)
        },
    )
    .await?;
    let metrics = ls.metrics().await?;
    ensure!(
        metrics.contains("lockscope_force_releases_total{outcome=\"released\"} 2"),
        "{metrics}"
    );
    first.kill();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_release_wakes_each_librarys_waiters_and_refuses_stale_holders() -> Result<()> {
    let (python, redis) = tokio::join!(prepare_python(), RedisServer::start());
    python?;
    let redis = redis?;
    let dir = tempfile::tempdir()?;
    let config = with_admin_limit(
        Config {
            sources: section(
                "redis",
                vec![RedisSourceConfig::new(
                    "r",
                    &redis.url(),
                    &["lock:*", "app:*", "job-lock:*"],
                )],
            ),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
        1000,
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let mut conn = redis.connection().await?;

    // Redisson RLock held twice by one thread; a waiter is subscribed to the unlock channel.
    let redisson = RedissonClient::new();
    for _ in 0..2 {
        redisson
            .rlock_try_lock(&mut conn, "app:orders", 7, 60_000)
            .await?;
    }
    let mut unlock = subscribe_unlock_channel(&redis.url(), &rlock_channel("app:orders")).await?;
    let field = redisson.lock_name(7);
    ls.wait_lock(
        "r",
        "/app:orders",
        Duration::from_secs(10),
        "redisson held",
        |l| l.holders.len() == 1,
    )
    .await?;
    let id = lock_id("r", "/app:orders");
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": field, "reentrancy": 1, "reason": "t"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(
        status == 409,
        "a wrong re-entry count must be refused: {status} {body}"
    );
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": "someone-else:1", "reason": "t"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    let exists: bool = redis::cmd("EXISTS")
        .arg("app:orders")
        .query_async(&mut conn)
        .await?;
    ensure!(exists, "a refused release deleted the key");
    release_ok(
        &ls,
        &id,
        json!({"holder": field, "reentrancy": 2, "reason": "watchdog stuck"}),
    )
    .await?;
    expect_unlock(&mut unlock, "the Redisson waiter").await?;
    let series = "lockscope_lock_releases_total{source=\"r\",lock=\"app:orders\",cause=\"forced\"}";
    let mut forced = None;
    // On timeout the check below fails with every release series.
    let _ = eventually(
        Duration::from_secs(5),
        "the release booked as forced",
        async || {
            forced = ls.metric(series).await?;
            Ok((forced == Some(1.0)).then_some(()))
        },
    )
    .await;
    let releases: Vec<String> = ls
        .metrics()
        .await?
        .lines()
        .filter(|l| l.starts_with("lockscope_lock_releases_total"))
        .map(str::to_string)
        .collect();
    ensure!(
        forced == Some(1.0),
        "the Redisson release is not booked as forced: {releases:?}"
    );

    // Redisson FairLock: the head waiter's own channel gets the wake-up.
    let fair = "app:fair";
    let now = lockscope_tests::redis_recipes::now_ms();
    ensure!(redisson
        .fair_try_lock(&mut conn, fair, 1, 60_000, 30_000, now)
        .await?
        .is_none());
    let other = RedissonClient::new();
    ensure!(other
        .fair_try_lock(&mut conn, fair, 2, 60_000, 30_000, now)
        .await?
        .is_some());
    let mut head =
        subscribe_unlock_channel(&redis.url(), &other.fair_waiter_channel(fair, 2)).await?;
    ls.wait_lock(
        "r",
        &format!("/{fair}"),
        Duration::from_secs(10),
        "fair queue",
        |l| l.holders.len() == 1 && l.waiters.len() == 1,
    )
    .await?;
    release_ok(
        &ls,
        &lock_id("r", &format!("/{fair}")),
        json!({"holder": redisson.lock_name(1), "reason": "t"}),
    )
    .await?;
    ensure!(
        head.next_message(Duration::from_secs(5)).await.is_some(),
        "the head waiter was not woken"
    );
    ensure!(
        other
            .fair_try_lock(
                &mut conn,
                fair,
                2,
                60_000,
                30_000,
                lockscope_tests::redis_recipes::now_ms()
            )
            .await?
            .is_none(),
        "the head waiter could not take the lock after the release"
    );

    // python-redis-lock, the real library (4.0.1 defaults: a 24-character base64 id, no TTL):
    // a second client blocks in BLPOP on `lock-signal:payments` (forever: timeout 0). Once
    // lockscope counts it, the release pushes the signal list as the library's unlock does, and
    // that client takes the lock.
    let mut pyrl_holder = PyClient::python_redis_lock(&redis.url(), "payments", None).await?;
    let held = pyrl_holder.acquire().await?;
    let token = held.token.context("python-redis-lock reported no id")?;
    let mut pyrl_waiter = PyClient::python_redis_lock(&redis.url(), "payments", None).await?;
    pyrl_waiter.start_acquire().await?;
    let pyrl = lock_id("r", "/lock:payments");
    let lock = ls
        .wait_lock(
            "r",
            "/lock:payments",
            Duration::from_secs(10),
            "pyrl held, one client blocked in BLPOP",
            |l| {
                l.holders.first().is_some_and(|h| h.node == token)
                    && l.unattributed_waiters == Some(1)
            },
        )
        .await?;
    ensure!(lock.recipe == "python_redis_lock", "{lock:?}");
    // The waiter's own id is not the holder: refused, and the key keeps the holder's id.
    let waiter_id = pyrl_waiter.info().await?["token"]
        .as_str()
        .context("the waiter's id")?
        .to_string();
    let (status, body) = release(
        &ls,
        &pyrl,
        json!({"holder": waiter_id, "reason": "t"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    let value: String = redis::cmd("GET")
        .arg("lock:payments")
        .query_async(&mut conn)
        .await?;
    ensure!(value == token, "a refused release changed the key: {value}");
    release_ok(&ls, &pyrl, json!({"holder": token, "reason": "t"})).await?;
    let next = pyrl_waiter
        .wait_acquired(Duration::from_secs(10))
        .await
        .context("the BLPOP waiter was not signalled")?;
    ensure!(
        next.token.as_deref() == Some(waiter_id.as_str()),
        "{next:?}"
    );
    ls.wait_lock(
        "r",
        "/lock:payments",
        Duration::from_secs(10),
        "the woken client holds, nobody blocked",
        |l| {
            l.holders.first().is_some_and(|h| h.node == waiter_id)
                && l.unattributed_waiters == Some(0)
        },
    )
    .await?;
    pyrl_waiter.release().await?;
    // The old holder is not told (it still believes it holds): close it without a release.
    pyrl_holder.exit().await?;

    // ShedLock (6.7.0+ values): the holder is the whole value. An operator who saw one run of
    // the nightly job asks to release it after that run ended and the next run of the same job
    // took the lock on the same host: refused (409), the key untouched. The value seen now
    // releases it.
    let job = "job-lock:default:nightly-report";
    let job_path = format!("/{job}");
    let job_id = lock_id("r", &job_path);
    ensure!(shedlock_lock(&mut conn, job, "batch-host-3", 60_000).await?);
    let first_run = ls
        .wait_lock(
            "r",
            &job_path,
            Duration::from_secs(10),
            "shedlock held",
            |l| l.holders.len() == 1,
        )
        .await?;
    ensure!(first_run.recipe == "shedlock", "{first_run:?}");
    let seen = first_run.holders[0].node.clone();
    ensure!(
        seen.starts_with("ADDED:") && seen.contains("@batch-host-3:"),
        "{seen}"
    );
    shedlock_unlock(&mut conn, job, 0).await?;
    ensure!(shedlock_lock(&mut conn, job, "batch-host-3", 60_000).await?);
    let current: String = redis::cmd("GET").arg(job).query_async(&mut conn).await?;
    ensure!(current != seen, "two runs wrote the same value {current}");
    ls.wait_lock(
        "r",
        &job_path,
        Duration::from_secs(10),
        "the next run holds",
        |l| l.holders.first().is_some_and(|h| h.node == current),
    )
    .await?;
    let (status, body) = release(
        &ls,
        &job_id,
        json!({"holder": seen, "reason": "stale snapshot"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(
        status == 409,
        "a value from another run must be refused: {status} {body}"
    );
    let value: String = redis::cmd("GET").arg(job).query_async(&mut conn).await?;
    ensure!(
        value == current,
        "a refused release changed the key: {value}"
    );
    let body = release_ok(
        &ls,
        &job_id,
        json!({"holder": current, "reason": "job host is dead"}),
    )
    .await?;
    ensure!(
        body["released"]["members"][0]["deleted"] == current.as_str(),
        "{body}"
    );
    let exists: bool = redis::cmd("EXISTS").arg(job).query_async(&mut conn).await?;
    ensure!(!exists, "the ShedLock key is still there");

    // A plain token lock with a stale token: refused, unchanged.
    let t1 = random_token();
    let () = redis::cmd("SET")
        .arg("lock:plain")
        .arg(&t1)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await?;
    ls.wait_lock(
        "r",
        "/lock:plain",
        Duration::from_secs(10),
        "token held",
        |l| l.holders.len() == 1,
    )
    .await?;
    let (status, _) = release(
        &ls,
        &lock_id("r", "/lock:plain"),
        json!({"holder": random_token(), "reason": "t"}),
        Some(TOKEN),
    )
    .await?;
    ensure!(status == 409);
    let value: String = redis::cmd("GET")
        .arg("lock:plain")
        .query_async(&mut conn)
        .await?;
    ensure!(value == t1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_audited_and_the_audit_survives_a_restart() -> Result<()> {
    let redis = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let config = redis_admin(&redis.url(), dir.path(), TOKEN, 8);
    let mut conn = redis.connection().await?;
    let token = random_token();
    let () = redis::cmd("SET")
        .arg("lock:a")
        .arg(&token)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await?;
    let mut ls = Lockscope::start(config.clone()).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let id = lock_id("r", "/lock:a");
    let body = json!({"holder": token, "reason": "audit test"});
    let cases: Vec<(Value, Option<&str>, u16)> = vec![
        (body.clone(), None, 401),
        (body.clone(), Some("not-the-token-0123456789"), 403),
        (json!({"holder": token}), Some(TOKEN), 422),
        (json!({"holder": token, "reason": "  "}), Some(TOKEN), 422),
        (json!({"holder": "x", "reason": "r"}), Some(TOKEN), 409),
    ];
    for (body, auth, want) in &cases {
        let (status, answer) = release(&ls, &id, body.clone(), *auth).await?;
        ensure!(status == *want, "{body} → {status} {answer}");
    }
    let (status, _) = release(&ls, &lock_id("r", "/lock:none"), body.clone(), Some(TOKEN)).await?;
    ensure!(status == 404);
    let (status, answer) = release(&ls, &id, body.clone(), Some(TOKEN)).await?;
    ensure!(status == 200, "{answer}");
    let mut last = None;
    eventually_every(
        Duration::from_secs(5),
        Duration::from_millis(50),
        "the released lock gone",
        async || {
            last = ls.lock("r", "/lock:a").await?;
            Ok(last.is_none().then_some(()))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last state: {last:?}"))?;
    // Six attempts passed authentication (401/403 come first and cost nothing); 8 per minute
    // are allowed, so two more are answered (the lock is gone now) and the next is limited.
    // (The bucket refills at 8 per minute, so a slow machine may get one or two more.)
    let mut extra = 0;
    loop {
        let (status, _) = release(&ls, &id, body.clone(), Some(TOKEN)).await?;
        if status == 429 {
            break;
        }
        ensure!(status == 404, "wanted 404 until rate limited, got {status}");
        extra += 1;
        ensure!(extra <= 5, "never rate limited");
    }
    let before = ls.audit_log().await?;
    ensure!(before.len() == 8 + extra, "{}", before.len());

    ls.stop();
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let after = ls.audit_log().await?;
    ensure!(after == before, "the audit log changed across a restart");
    let outcomes: Vec<&str> = after.iter().rev().map(|r| r.outcome.as_str()).collect();
    ensure!(
        outcomes
            == [
                "unauthorized",
                "forbidden",
                "invalid",
                "invalid",
                "holder_changed",
                "not_found",
                "released",
            ]
            .into_iter()
            .chain(std::iter::repeat_n("not_found", extra))
            .chain(["rate_limited"])
            .collect::<Vec<_>>(),
        "{outcomes:?}"
    );
    ensure!(after.iter().any(|r| r.outcome == "released"
        && r.observed_holder == token
        && r.reason == "audit test"));
    ensure!(after
        .iter()
        .any(|r| r.outcome == "forbidden" && r.token_name == "(unknown token)"));
    Ok(())
}

/// 1,000 force releases fired at a lock whose holder keeps changing: every release names a
/// holder the caller saw; each one that succeeds must have deleted exactly that holder, and
/// exactly the holders that were force-released find their own release refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_releases_racing_holder_changes_free_only_named_holders() -> Result<()> {
    let redis = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let config = redis_admin(&redis.url(), dir.path(), TOKEN, 1_000_000);
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let id = lock_id("r", "/lock:race");

    // The owner: take the lock with a fresh token, hold briefly, release with compare-and-delete;
    // record which of its releases found the token gone.
    let url = redis.url();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let owner_stop = stop.clone();
    let owner = tokio::spawn(async move {
        let mut conn = lockscope_tests::support::redis::connect(&url).await?;
        let mut lost = HashSet::new();
        let mut taken = 0u32;
        while !owner_stop.load(std::sync::atomic::Ordering::Relaxed) && taken < 100_000 {
            let token = random_token();
            let set: Option<String> = redis::cmd("SET")
                .arg("lock:race")
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(60_000)
                .query_async(&mut conn)
                .await?;
            if set.is_none() {
                // Still held by a previous token? Only this client takes it, so no: retry.
                tokio::task::yield_now().await;
                continue;
            }
            taken += 1;
            // Holds of 1–15 ms: some releases win the race, most lose it (the workload's hold,
            // not a wait for anything).
            tokio::time::sleep(Duration::from_millis(1 + u64::from(taken % 15))).await;
            let released =
                lockscope_tests::redis_recipes::token_lock_release(&mut conn, "lock:race", &token)
                    .await?;
            if !released {
                lost.insert(token);
            }
        }
        anyhow::Ok((lost, taken))
    });

    let mut named_and_released = HashSet::new();
    let mut refused = 0u32;
    for _ in 0..1_000 {
        let current = ls.lock("r", "/lock:race").await?;
        let Some(holder) = current.and_then(|l| l.holders.first().map(|h| h.node.clone())) else {
            // Pacing of the racing releases while nobody is shown holding, not a wait.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let (status, _) = release(
                &ls,
                &id,
                json!({"holder": random_token(), "reason": "race"}),
                Some(TOKEN),
            )
            .await?;
            ensure!(
                status == 409 || status == 404,
                "releasing a made-up holder answered {status}"
            );
            refused += 1;
            continue;
        };
        let (status, body) = release(
            &ls,
            &id,
            json!({"holder": holder, "reason": "race"}),
            Some(TOKEN),
        )
        .await?;
        match status {
            200 => {
                let deleted = body["released"]["members"][0]["deleted"]
                    .as_str()
                    .unwrap_or_default();
                ensure!(deleted == holder, "named {holder} but deleted {deleted}");
                named_and_released.insert(holder);
            }
            409 | 404 => refused += 1,
            other => anyhow::bail!("unexpected {other}: {body}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (lost, taken) = owner.await??;
    println!(
        "race: owner took the lock {taken} times; 1000 releases: {} released, {refused} refused",
        named_and_released.len()
    );
    ensure!(
        !named_and_released.is_empty(),
        "no release ever won the race; the test proves nothing"
    );
    ensure!(
        refused > 0,
        "no release ever lost the race; the test proves nothing"
    );
    ensure!(
        lost == named_and_released,
        "holders that lost the lock ({}) differ from those named and released ({})",
        lost.len(),
        named_and_released.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_locks_and_releases_through_the_api() -> Result<()> {
    let redis = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let config = redis_admin(&redis.url(), dir.path(), TOKEN, 100);
    let mut conn = redis.connection().await?;
    let token = random_token();
    let () = redis::cmd("SET")
        .arg("lock:cli")
        .arg(&token)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await?;
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let bin = std::env::current_exe()?
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("lockscope"))
        .context("target dir")?;
    ensure!(bin.exists(), "{} not built", bin.display());
    let out = tokio::process::Command::new(&bin)
        .args(["locks", "--json", "--url", &ls.base, "--q", "cli"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        listed["locks"][0]["holders"][0]["node"] == token.as_str(),
        "{listed}"
    );
    let out = tokio::process::Command::new(&bin)
        .args(["locks", "--url", &ls.base])
        .output()
        .await?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains("r~lock!3Acli"));
    let release = |holder: String| {
        let bin = bin.clone();
        let base = ls.base.clone();
        async move {
            tokio::process::Command::new(&bin)
                .args([
                    "release",
                    &lock_id("r", "/lock:cli"),
                    "--holder",
                    &holder,
                    "--reason",
                    "cli test",
                    "--url",
                    &base,
                ])
                .env("LOCKSCOPE_TOKEN", TOKEN)
                .output()
                .await
        }
    };
    let stale = release(random_token()).await?;
    ensure!(
        stale.status.code() == Some(1),
        "a stale holder must fail: {:?}",
        stale.status
    );
    let ok = release(token.clone()).await?;
    ensure!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let exists: bool = redis::cmd("EXISTS")
        .arg("lock:cli")
        .query_async(&mut conn)
        .await?;
    ensure!(!exists);
    Ok(())
}

/// Redlock: the release runs on every master where the named holder holds the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_release_frees_the_key_on_every_master() -> Result<()> {
    let mut masters = Vec::new();
    for _ in 0..3 {
        masters.push(RedisServer::start().await?);
    }
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let dir = tempfile::tempdir()?;
    let config = with_admin_limit(
        Config {
            sources: section("redlock", vec![RedlockConfig::new("rl", &urls, &["rl:*"])]),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
        100,
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let redlock = lockscope_tests::redis_recipes::Redlock::connect(&urls).await?;
    let token = random_token();
    ensure!(redlock.lock("rl:order-7", &token, 60_000).await?);
    ls.wait_lock(
        "rl",
        "/rl:order-7",
        Duration::from_secs(10),
        "held on all",
        |l| {
            l.holders.len() == 1
                && l.redlock
                    .as_ref()
                    .is_some_and(|r| r.masters.iter().all(|m| m.holder.is_some()))
        },
    )
    .await?;
    let body = release_ok(
        &ls,
        &lock_id("rl", "/rl:order-7"),
        json!({"holder": token, "reason": "redlock test"}),
    )
    .await?;
    ensure!(
        body["released"]["members"].as_array().map(Vec::len) == Some(3),
        "{body}"
    );
    for master in &masters {
        let mut conn = master.connection().await?;
        let exists: bool = redis::cmd("EXISTS")
            .arg("rl:order-7")
            .query_async(&mut conn)
            .await?;
        ensure!(!exists, "still on {}", master.url());
    }
    Ok(())
}

/// Redis Cluster: the release runs on the master that owns the key's slot (the others answer
/// MOVED and are skipped), for a token lock on every master, a Redisson lock whose waiter,
/// subscribed through another master, still hears the unlock, and a python-redis-lock (held by
/// the real library, recognised by its id's shape) whose signal list lives in another slot than
/// its key (a client blocked in BLPOP on the list's master still wakes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_release_runs_on_the_keys_master() -> Result<()> {
    let (python, cluster) = tokio::join!(prepare_python(), RedisCluster::start(3));
    python?;
    let cluster = cluster?;
    let dir = tempfile::tempdir()?;
    let mut source = RedisSourceConfig::new("cl", &cluster.urls()[0], &["lock:*", "app:*"]);
    source.cluster = true;
    let config = with_admin_limit(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
        1000,
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;

    // One token lock per master (UUID tokens, as many clients write them).
    let mut per_master: Vec<Option<(String, String)>> = vec![None; 3];
    for i in 0..100 {
        let key = format!("lock:c{i}");
        let node = cluster.node_for(key.as_bytes()).await?;
        if per_master[node].is_none() {
            let t = random_token();
            let token = format!(
                "{}-{}-{}-{}-{}",
                &t[..8],
                &t[8..12],
                &t[12..16],
                &t[16..20],
                &t[20..]
            );
            let mut conn = cluster.connection_for(key.as_bytes()).await?;
            ensure!(token_lock_acquire(&mut conn, &key, &token, 60_000).await?);
            per_master[node] = Some((key, token));
        }
        if per_master.iter().all(Option::is_some) {
            break;
        }
    }
    let locks: Vec<(String, String)> = per_master.into_iter().flatten().collect();
    ensure!(locks.len() == 3, "no key found for some master");
    for (key, token) in &locks {
        let path = format!("/{key}");
        ls.wait_lock("cl", &path, Duration::from_secs(10), "token lock", |l| {
            l.holders.first().is_some_and(|h| &h.node == token)
        })
        .await?;
        let id = lock_id("cl", &path);
        let (status, body) = release(
            &ls,
            &id,
            json!({"holder": "not-the-holder", "reason": "cluster stale"}),
            Some(TOKEN),
        )
        .await?;
        ensure!(status == 409, "{key}: {status} {body}");
        let body = release_ok(&ls, &id, json!({"holder": token, "reason": "cluster test"})).await?;
        ensure!(
            body["released"]["members"].as_array().map(Vec::len) == Some(1),
            "released on exactly the key's master: {body}"
        );
        ensure!(
            body["released"]["failed_on"] == json!([]),
            "the other masters' MOVED is not a failure: {body}"
        );
        let mut conn = cluster.connection_for(key.as_bytes()).await?;
        let exists: bool = redis::cmd("EXISTS").arg(key).query_async(&mut conn).await?;
        ensure!(!exists, "{key} still there");
    }

    // A Redisson lock; its waiter listens on a master that does not own the key.
    let name = "app:cluster-orders";
    let owner = cluster.node_for(name.as_bytes()).await?;
    let redisson = RedissonClient::new();
    let mut conn = cluster.connection_for(name.as_bytes()).await?;
    redisson.rlock_try_lock(&mut conn, name, 3, 60_000).await?;
    let elsewhere = cluster.urls()[(owner + 1) % 3].clone();
    let mut unlock = subscribe_unlock_channel(&elsewhere, &rlock_channel(name)).await?;
    let path = format!("/{name}");
    ls.wait_lock("cl", &path, Duration::from_secs(10), "redisson held", |l| {
        l.holders.len() == 1
    })
    .await?;
    release_ok(
        &ls,
        &lock_id("cl", &path),
        json!({"holder": redisson.lock_name(3), "reentrancy": 1, "reason": "cluster redisson"}),
    )
    .await?;
    expect_unlock(&mut unlock, "a waiter subscribed through another master").await?;

    // python-redis-lock: `lock:<name>` and `lock-signal:<name>` hash to different slots. The
    // real library holds the lock through a plain connection to the key's master. Its own
    // waiter cannot run on a Cluster (the acquire's SET and BLPOP go to one server, and its
    // release script names both keys: CROSSSLOT), so a raw `BLPOP lock-signal:<name>` on the
    // signal list's master stands in for it.
    let py = "cluster-report";
    let (key, signal) = (format!("lock:{py}"), format!("lock-signal:{py}"));
    let (key_node, signal_node) = (
        cluster.node_for(key.as_bytes()).await?,
        cluster.node_for(signal.as_bytes()).await?,
    );
    ensure!(
        key_node != signal_node,
        "this test needs the key and its signal list on different masters"
    );
    let mut pyrl = PyClient::python_redis_lock(&cluster.urls()[key_node], py, None).await?;
    let held = pyrl.acquire().await?;
    ensure!(held.key.as_deref() == Some(key.as_str()), "{held:?}");
    let token = held.token.context("python-redis-lock reported no id")?;
    let mut signal_master = cluster.connection_for(signal.as_bytes()).await?;
    let mut waiter = cluster.connection_for(signal.as_bytes()).await?;
    let blocked = tokio::spawn(async move {
        redis::cmd("BLPOP")
            .arg(&signal)
            .arg(20)
            .query_async::<Option<(String, String)>>(&mut waiter)
            .await
    });
    wait_blpop_clients(&mut signal_master, 1, Duration::from_secs(10)).await?;
    let path = format!("/{key}");
    let lock = ls
        .wait_lock(
            "cl",
            &path,
            Duration::from_secs(10),
            "pyrl held, its waiter on the signal's master counted",
            |l| {
                l.recipe == "python_redis_lock"
                    && l.holders.first().is_some_and(|h| h.node == token)
                    && l.unattributed_waiters == Some(1)
            },
        )
        .await?;
    ensure!(
        lock.recipe_guess
            .as_deref()
            .is_some_and(|g| g.contains("python-redis-lock")),
        "no configuration and no signal list on the key's master: a guess that says why: {lock:?}"
    );
    let body = release_ok(
        &ls,
        &lock_id("cl", &path),
        json!({"holder": token, "reason": "cluster pyrl"}),
    )
    .await?;
    ensure!(
        body["released"]["signal"]
            .as_str()
            .is_some_and(|s| s.contains("pushed")),
        "{body}"
    );
    let woke = tokio::time::timeout(Duration::from_secs(5), blocked).await???;
    ensure!(woke.is_some(), "the BLPOP waiter did not wake");
    let exists: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut cluster.connection_for(key.as_bytes()).await?)
        .await?;
    ensure!(!exists, "{key} still there");
    // The old holder is not told; close it without a release (its release script would be
    // refused with CROSSSLOT on a Cluster anyway).
    pyrl.exit().await?;

    let outcomes: Vec<String> = ls
        .audit_log()
        .await?
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    ensure!(
        outcomes.iter().filter(|o| o.as_str() == "released").count() == 5
            && outcomes
                .iter()
                .filter(|o| o.as_str() == "holder_changed")
                .count()
                == 3,
        "{outcomes:?}"
    );
    Ok(())
}
