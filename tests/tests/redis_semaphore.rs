//! lockscope against the real redis-semaphore (npm 5.8.0, through ioredis 5.11.1; driven from
//! Node by `tests/browser/semaphore-client.mjs`): its `Semaphore` and `MultiSemaphore` sorted
//! sets and its `Mutex` token, as a real Redis holds them, a holder that crashed going stale and
//! then gone, and a guarded force release the library notices (`onLockLost`). Facts are awaited
//! with bounds.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_model::id::lock_id;
use lockscope_model::wire::LockView;
use lockscope_tests::harness::{eventually, Lockscope};
use lockscope_tests::support::node::{Kind, NodeSemaphore};
use lockscope_tests::support::redis::RedisServer;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "oncall-token-0123456789abcdef";

/// lockscope watching `semaphore:*` and `mutex:*` on `server`, `semaphore:pool` configured
/// with its limit of 2, force release on.
async fn lockscope(server: &RedisServer, dir: &Path) -> Result<Lockscope> {
    let mut source = RedisSourceConfig::new("r", &server.url(), &["semaphore:*", "mutex:*"]);
    source.watch.semaphores.insert("semaphore:pool".into(), 2);
    source.watch.reconcile_interval = Duration::from_secs(2);
    let config = lockscope_tests::harness::with_admin(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir,
        TOKEN,
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

fn nodes(lock: &LockView) -> Vec<String> {
    let mut ids: Vec<String> = lock.holders.iter().map(|h| h.node.clone()).collect();
    ids.sort();
    ids
}

fn sorted(ids: &[&str]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_multi_semaphore_and_mutex_as_the_server_holds_them() -> Result<()> {
    let server = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let ls = lockscope(&server, dir.path()).await?;
    let url = server.url();
    let ten = Duration::from_secs(10);

    // Semaphore(limit 2), three clients: two hold, the third polls (every 20 ms here).
    let mut a = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", ten).await?;
    let mut b = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", ten).await?;
    let mut c = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", ten).await?;
    a.acquire().await?;
    b.acquire().await?;
    c.start_acquire().await?;
    let lock = ls
        .wait_lock("r", "/semaphore:pool", WAIT, "two holders", |l| {
            l.holders.len() == 2
        })
        .await?;
    assert_eq!(lock.recipe, "redis_semaphore");
    assert_eq!(
        nodes(&lock),
        sorted(&[&a.identifier, &b.identifier]),
        "{lock:?}"
    );
    assert!(lock.waiters.is_empty(), "nothing shows a polling waiter");
    assert!(lock.flags.contains(&"waiters_not_visible".to_string()));
    assert_eq!(
        (lock.permits_total, lock.permits_available),
        (Some(2), Some(0))
    );
    assert_eq!(lock.recipe_guess, None, "configured: no guess");
    // What the server holds: the members are the identifiers, scored by epoch ms; the whole
    // set expires lockTimeout after the latest write.
    let mut conn = server.connection().await?;
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("semaphore:pool")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await?;
    let pttl: i64 = redis::cmd("PTTL")
        .arg("semaphore:pool")
        .query_async(&mut conn)
        .await?;
    let kind: String = redis::cmd("TYPE")
        .arg("semaphore:pool")
        .query_async(&mut conn)
        .await?;
    eprintln!("measured: semaphore:pool TYPE {kind}, members {members:?}, PTTL {pttl}");
    assert_eq!(kind, "zset");
    assert!((0..=10_000).contains(&pttl), "{pttl}");
    for holder in &lock.holders {
        let score = members
            .iter()
            .find(|(m, _)| *m == holder.node)
            .map(|(_, s)| *s as i64)
            .context("holder not in the set")?;
        // The version is the score a release compares (it may have been refreshed since).
        let shown: i64 = holder.version.as_deref().context("no version")?.parse()?;
        assert!(shown <= score, "{shown} vs {score}");
        let lease = holder.lease.as_ref().context("no entry lapse")?;
        assert!(lease.expires_at_ms.is_some_and(|e| e > shown), "{lease:?}");
    }
    let (acquired, _) = c.state().await?;
    assert!(!acquired, "the third client still polls");
    // The poller gets the permit a release frees.
    a.release().await?;
    c.wait_acquired(WAIT).await?;
    ls.wait_lock("r", "/semaphore:pool", WAIT, "b and c hold", |l| {
        nodes(l) == sorted(&[&b.identifier, &c.identifier])
    })
    .await?;

    // MultiSemaphore(limit 3, permits 2): one holder of two permits (`<id>_0`, `<id>_1`).
    let mut m = NodeSemaphore::start(
        &url,
        Kind::Multi {
            limit: 3,
            permits: 2,
        },
        "big",
        ten,
    )
    .await?;
    m.acquire().await?;
    let lock = ls
        .wait_lock("r", "/semaphore:big", WAIT, "a multi holder", |l| {
            !l.holders.is_empty()
        })
        .await?;
    assert_eq!(lock.recipe, "redis_multi_semaphore");
    assert_eq!(nodes(&lock), vec![m.identifier.clone()]);
    assert!(
        lock.holders[0]
            .version
            .as_deref()
            .is_some_and(|v| v.ends_with("x2")),
        "{lock:?}"
    );
    assert!(
        lock.recipe_guess.is_some(),
        "not configured: the limit is unknown and the recipe a guess"
    );
    assert_eq!(lock.permits_total, None);

    // Prometheus: one lock of each recipe, labelled by it.
    ls.wait_metric(
        "lockscope_locks{source=\"r\",recipe=\"redis_semaphore\"}",
        |v| v == 1.0,
    )
    .await?;
    ls.wait_metric(
        "lockscope_locks{source=\"r\",recipe=\"redis_multi_semaphore\"}",
        |v| v == 1.0,
    )
    .await?;

    // Mutex: a token lock whose value, the identifier (a UUID), is the holder.
    let mut x = NodeSemaphore::start(&url, Kind::Mutex, "report", ten).await?;
    x.acquire().await?;
    let lock = ls
        .wait_lock("r", "/mutex:report", WAIT, "mutex held", |l| {
            !l.holders.is_empty()
        })
        .await?;
    assert_eq!(lock.recipe, "token_lock");
    assert_eq!(lock.holders[0].node, x.identifier);
    assert_eq!(x.identifier.len(), 36, "a v4 UUID: {}", x.identifier);
    assert!(lock.ttl_ms.is_some_and(|t| t <= 10_000));
    x.release().await?;
    eventually(WAIT, "mutex gone from lockscope", async || {
        Ok(ls.lock("r", "/mutex:report").await?.is_none().then_some(()))
    })
    .await?;
    for client in [b, c, m, x] {
        client.exit().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_semaphore_holder_goes_stale_then_gone() -> Result<()> {
    let server = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let ls = lockscope(&server, dir.path()).await?;
    let url = server.url();
    // lockTimeout 3 s: the library refreshes every 2.4 s.
    let three = Duration::from_secs(3);
    let mut a = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", three).await?;
    let mut b = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", three).await?;
    a.acquire().await?;
    b.acquire().await?;
    ls.wait_lock("r", "/semaphore:pool", WAIT, "two holders", |l| {
        l.holders.len() == 2
    })
    .await?;
    // SIGKILL: its entry stays until score + lockTimeout, then is stale until the next acquire
    // or refresh purges it (b's refreshes keep the set alive). lockscope reads the set again
    // when the entry lapses: no notification says so.
    a.crash();
    let dead = a.identifier.clone();
    let lock = ls
        .wait_lock(
            "r",
            "/semaphore:pool",
            WAIT,
            "the crashed entry stale",
            |l| l.flags.contains(&"stale_member".to_string()),
        )
        .await?;
    let stale = lock
        .holders
        .iter()
        .find(|h| h.node == dead)
        .context("the stale entry is shown")?;
    assert!(
        stale
            .lease
            .as_ref()
            .is_some_and(|l| l.id.starts_with("stale")),
        "{lock:?}"
    );
    assert_eq!(
        lock.permits_available,
        Some(1),
        "a stale entry holds nothing"
    );
    // The next write of the library purges it: b's refresh runs the same ZREMRANGEBYSCORE as
    // an acquire.
    let lock = ls
        .wait_lock("r", "/semaphore:pool", WAIT, "purged: b alone", |l| {
            nodes(l) == vec![b.identifier.clone()]
        })
        .await?;
    assert!(
        !lock.flags.contains(&"stale_member".to_string()),
        "{lock:?}"
    );
    // …and a newcomer gets the permit it held.
    let mut c = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", three).await?;
    c.acquire().await?;
    b.exit().await?;
    c.exit().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_force_release_removes_exactly_what_was_seen() -> Result<()> {
    let server = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let ls = lockscope(&server, dir.path()).await?;
    let url = server.url();
    let four = Duration::from_secs(4);
    let mut a = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", four).await?;
    let mut b = NodeSemaphore::start(&url, Kind::Semaphore { limit: 2 }, "pool", four).await?;
    a.acquire().await?;
    b.acquire().await?;
    ls.wait_lock("r", "/semaphore:pool", WAIT, "two holders", |l| {
        l.holders.len() == 2
    })
    .await?;
    let id = lock_id("r", "/semaphore:pool");
    let mut conn = server.connection().await?;
    let zscore = async |conn: &mut redis::aio::MultiplexedConnection, member: &str| {
        redis::cmd("ZSCORE")
            .arg("semaphore:pool")
            .arg(member)
            .query_async::<Option<f64>>(conn)
            .await
    };

    // A stale compare (a score that is not the one shown) is refused and changes nothing.
    let before = zscore(&mut conn, &a.identifier).await?;
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": a.identifier, "version": "1000", "reason": "stale compare"}),
        )
        .await?;
    ensure!(status == 409, "a stale compare answered {status}: {body}");
    assert!(zscore(&mut conn, &a.identifier).await?.is_some());
    assert!(before.is_some());
    // Without the version: refused, saying what to send.
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": a.identifier, "reason": "no version"}),
        )
        .await?;
    ensure!(status >= 400, "no version answered {status}: {body}");

    // With the score shown: a refresh may re-score it between the look and the release, which
    // is then refused; look again, as an operator would.
    let body = eventually(WAIT, "a release with the score shown", async || {
        let lock = ls.lock("r", "/semaphore:pool").await?.context("no lock")?;
        let holder = lock
            .holders
            .iter()
            .find(|h| h.node == a.identifier)
            .context("a not shown")?;
        let (status, body) = ls
            .release(
                &id,
                Some(TOKEN),
                &json!({"holder": holder.node, "version": holder.version, "reason": "stuck worker"}),
            )
            .await?;
        Ok((status == 200).then_some(body))
    })
    .await?;
    eprintln!("released: {body}");
    assert!(zscore(&mut conn, &a.identifier).await?.is_none());
    assert!(
        zscore(&mut conn, &b.identifier).await?.is_some(),
        "b untouched"
    );
    // The library notices at its next refresh: onLockLost, and it holds no more.
    eventually(WAIT, "a's onLockLost", async || {
        let (acquired, lost) = a.state().await?;
        Ok((lost >= 1 && !acquired).then_some(()))
    })
    .await?;
    let (acquired, lost) = b.state().await?;
    assert!(acquired && lost == 0, "b still holds");
    ls.wait_lock("r", "/semaphore:pool", WAIT, "b alone", |l| {
        nodes(l) == vec![b.identifier.clone()]
    })
    .await?;
    let audit = ls.audit_log().await?;
    assert!(!audit.is_empty(), "the release is audited");

    // MultiSemaphore: every permit of the holder goes.
    let mut m = NodeSemaphore::start(
        &url,
        Kind::Multi {
            limit: 4,
            permits: 3,
        },
        "big",
        four,
    )
    .await?;
    m.acquire().await?;
    let big = lock_id("r", "/semaphore:big");
    eventually(WAIT, "the multi holder released", async || {
        let Some(lock) = ls.lock("r", "/semaphore:big").await? else {
            return Ok(None);
        };
        let Some(holder) = lock.holders.first() else {
            return Ok(None);
        };
        let (status, _) = ls
            .release(
                &big,
                Some(TOKEN),
                &json!({"holder": holder.node, "version": holder.version, "reason": "stuck"}),
            )
            .await?;
        Ok((status == 200).then_some(()))
    })
    .await?;
    let left: i64 = redis::cmd("ZCARD")
        .arg("semaphore:big")
        .query_async(&mut conn)
        .await?;
    assert_eq!(left, 0, "all three permits removed");
    eventually(WAIT, "m's onLockLost", async || {
        let (acquired, lost) = m.state().await?;
        Ok((lost >= 1 && !acquired).then_some(()))
    })
    .await?;
    b.exit().await?;
    Ok(())
}
