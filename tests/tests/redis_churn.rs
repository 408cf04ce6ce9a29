//! Redis counts under churn: real clients acquire and release as fast as they can, each counting
//! what the server granted, and lockscope's acquisition and release counters (and its hold
//! histogram) end up equal to those counts exactly — holds too brief for any read included,
//! Redisson re-entries and watchdog renewals not counted as acquisitions, a Redlock counted
//! once over its majority of masters.
//!
//! The clients: redis-py's `redis.lock.Lock` and python-redis-lock (the real libraries from
//! PyPI, several processes), the project's Redisson client (`lockscope_tests::redis_recipes`,
//! RLock with re-entry and renewals, FairLock), and the `SET NX` Redlock over three masters.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig, RedlockConfig};
use lockscope_tests::harness::{eventually, Lockscope};
use lockscope_tests::redis_recipes as rr;
use lockscope_tests::support::python::python_and_script;
use lockscope_tests::support::redis::RedisServer;

/// How long lockscope may take, after the clients finished, to book what they did.
const SETTLE: Duration = Duration::from_secs(30);

/// One churning Python client: `argv` = url, kind, names (comma-separated), iterations, seed.
/// Each iteration picks a name, tries once to take its lock without blocking and, when it got
/// it, releases it at once. Prints the acquisitions and releases the server granted.
const PY_CHURN: &str = r#"
import json, random, sys
import redis
url, kind, names, iterations, seed = sys.argv[1:6]
names = names.split(",")
rng = random.Random(int(seed))
conn = redis.Redis.from_url(url)
if kind == "redis-py":
    locks = {n: conn.lock(n, timeout=30) for n in names}
else:
    import redis_lock
    locks = {n: redis_lock.Lock(conn, n, expire=30) for n in names}
acquired = released = 0
for _ in range(int(iterations)):
    lock = locks[rng.choice(names)]
    if lock.acquire(blocking=False):
        acquired += 1
        lock.release()
        released += 1
print(json.dumps({"acquired": acquired, "released": released}))
"#;

/// The sum of every sample of `family` for `source` (every lock, every label after them).
fn source_sum(text: &str, family: &str, source: &str) -> f64 {
    let prefix = format!("{family}{{source=\"{source}\",");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| rest.rsplit_once(' '))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum()
}

/// What lockscope booked for `source`: acquisitions, releases (every cause), holds observed.
async fn booked(ls: &Lockscope, source: &str) -> Result<(u64, u64, u64)> {
    let text = ls.metrics().await?;
    let n = |family| source_sum(&text, family, source) as u64;
    Ok((
        n("lockscope_lock_acquisitions_total"),
        n("lockscope_lock_releases_total"),
        n("lockscope_lock_hold_duration_seconds_count"),
    ))
}

/// Waits until lockscope booked exactly `made` acquisitions and releases for `source`, each
/// release with its hold time.
async fn expect_booked(ls: &Lockscope, source: &str, made: (u64, u64)) -> Result<()> {
    let mut last = (0, 0, 0);
    let settled = eventually(SETTLE, "lockscope booked every change", async || {
        last = booked(ls, source).await?;
        Ok((last == (made.0, made.1, made.1)).then_some(()))
    })
    .await;
    ensure!(
        settled.is_ok(),
        "clients made {} acquisitions and {} releases; lockscope booked {} acquisitions, {} \
         releases, {} holds",
        made.0,
        made.1,
        last.0,
        last.1,
        last.2
    );
    Ok(())
}

async fn start(config: Config) -> Result<Lockscope> {
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    Ok(ls)
}

fn source(name: &str, url: &str, patterns: &[&str]) -> RedisSourceConfig {
    let mut s = RedisSourceConfig::new(name, url, patterns);
    // The counts must come from notifications, not from a reconcile scan.
    s.watch.reconcile_interval = Duration::from_secs(3600);
    s
}

/// Runs `clients` Python churners of `kind` over `names`, `iterations` each; the acquisitions
/// and releases they made, summed.
async fn py_churn(
    url: &str,
    kind: &str,
    names: &[String],
    clients: usize,
    iterations: u32,
) -> Result<(u64, u64)> {
    let (python, _) = tokio::task::spawn_blocking(python_and_script).await??;
    let runs = (0..clients).map(|c| {
        let mut cmd = tokio::process::Command::new(&python);
        cmd.arg("-c")
            .arg(PY_CHURN)
            .arg(url)
            .arg(kind)
            .arg(names.join(","))
            .arg(iterations.to_string())
            .arg(c.to_string())
            .kill_on_drop(true);
        async move {
            let out = cmd.output().await.context("run a churning client")?;
            ensure!(
                out.status.success(),
                "{kind} churner {c} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let counts: serde_json::Value = serde_json::from_slice(&out.stdout)
                .with_context(|| String::from_utf8_lossy(&out.stdout).into_owned())?;
            let n = |k: &str| counts[k].as_u64().unwrap_or_default();
            Ok((n("acquired"), n("released")))
        }
    });
    let mut made = (0, 0);
    for r in futures::future::join_all(runs).await {
        let (a, r) = r?;
        made.0 += a;
        made.1 += r;
    }
    Ok(made)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_and_python_redis_lock_churn_is_counted_exactly() -> Result<()> {
    let (python, server) = tokio::join!(
        tokio::task::spawn_blocking(python_and_script),
        RedisServer::start()
    );
    python??;
    let server = server?;
    let ls = start(Config {
        sources: section(
            "redis",
            vec![source("churn", &server.url(), &["churn:*", "lock*"])],
        ),
        ..Config::default()
    })
    .await?;
    // A few names, contended by every client: most holds last one round trip.
    let names: Vec<String> = (0..3).map(|i| format!("churn:{i}")).collect();
    let pyrl: Vec<String> = (0..3).map(|i| format!("p{i}")).collect();
    let url = server.url();
    let (redis_py, python_redis_lock) = tokio::join!(
        py_churn(&url, "redis-py", &names, 3, 1_500),
        py_churn(&url, "python-redis-lock", &pyrl, 2, 1_500),
    );
    let (redis_py, python_redis_lock) = (redis_py?, python_redis_lock?);
    ensure!(
        redis_py.0 > 1_000 && python_redis_lock.0 > 500,
        "the clients hardly acquired anything: {redis_py:?} {python_redis_lock:?}"
    );
    let made = (
        redis_py.0 + python_redis_lock.0,
        redis_py.1 + python_redis_lock.1,
    );
    expect_booked(&ls, "churn", made).await?;
    // Every lock is free again, and shown so.
    let held: Vec<_> = ls
        .locks()
        .await?
        .into_iter()
        .filter(|l| l.source == "churn")
        .collect();
    ensure!(held.is_empty(), "locks left: {held:?}");
    Ok(())
}

/// One task's Redisson churn: what it acquired (re-entries not counted) and released.
#[derive(Debug, Default, Clone, Copy)]
struct Made {
    acquired: u64,
    released: u64,
    reentries: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_churn_with_reentry_counts_acquisitions_not_reentries() -> Result<()> {
    let server = RedisServer::start().await?;
    let ls = start(Config {
        sources: section("redis", vec![source("rs", &server.url(), &["rs:*"])]),
        ..Config::default()
    })
    .await?;
    let tasks = (0..4u64).map(|t| {
        let url = server.url();
        tokio::spawn(async move {
            let mut conn = lockscope_tests::support::redis::connect(&url).await?;
            let client = rr::RedissonClient::new();
            let mut made = Made::default();
            for i in 0..400u64 {
                let name = format!("rs:lock{}", (i * 7 + t) % 3);
                let fair = format!("rs:fair{}", (i * 5 + t) % 2);
                let thread = 1 + t;
                // RLock: acquire, re-enter 0–2 times, renew once (the watchdog), unlock as
                // often as it was entered.
                if client
                    .rlock_try_lock(&mut conn, &name, thread, 30_000)
                    .await?
                    .is_none()
                {
                    made.acquired += 1;
                    let again = i % 3;
                    for _ in 0..again {
                        ensure!(client
                            .rlock_try_lock(&mut conn, &name, thread, 30_000)
                            .await?
                            .is_none());
                        made.reentries += 1;
                    }
                    ensure!(client.rlock_renew(&mut conn, &name, thread, 30_000).await?);
                    for _ in 0..again {
                        ensure!(
                            client
                                .rlock_unlock(&mut conn, &name, thread, 30_000)
                                .await?
                                == Some(false)
                        );
                    }
                    ensure!(
                        client
                            .rlock_unlock(&mut conn, &name, thread, 30_000)
                            .await?
                            == Some(true)
                    );
                    made.released += 1;
                }
                // FairLock, one attempt without queueing (its queue and timeout companions
                // change too): acquire, re-enter once on odd turns, unlock.
                let now = rr::now_ms();
                if client
                    .fair_try_lock_once(&mut conn, &fair, thread, 30_000, 5_000, now)
                    .await?
                {
                    made.acquired += 1;
                    let again = i % 2;
                    for _ in 0..again {
                        ensure!(
                            client
                                .fair_try_lock_once(&mut conn, &fair, thread, 30_000, 5_000, now)
                                .await?
                        );
                        made.reentries += 1;
                    }
                    for _ in 0..again {
                        ensure!(
                            client
                                .fair_unlock(&mut conn, &fair, thread, 30_000, rr::now_ms())
                                .await?
                                == Some(false)
                        );
                    }
                    ensure!(
                        client
                            .fair_unlock(&mut conn, &fair, thread, 30_000, rr::now_ms())
                            .await?
                            == Some(true)
                    );
                    made.released += 1;
                }
            }
            anyhow::Ok(made)
        })
    });
    let mut made = Made::default();
    for task in futures::future::join_all(tasks).await {
        let m = task??;
        made.acquired += m.acquired;
        made.released += m.released;
        made.reentries += m.reentries;
    }
    ensure!(
        made.acquired > 200 && made.reentries > 100,
        "too little churn to tell: {made:?}"
    );
    expect_booked(&ls, "rs", (made.acquired, made.released)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_churn_is_counted_once_per_majority() -> Result<()> {
    let masters = [
        RedisServer::start().await?,
        RedisServer::start().await?,
        RedisServer::start().await?,
    ];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let mut redlock = RedlockConfig::new("rl", &urls, &["rl:*"]);
    redlock.watch.reconcile_interval = Duration::from_secs(3600);
    let ls = start(Config {
        sources: section("redlock", vec![redlock]),
        ..Config::default()
    })
    .await?;
    // One client per name: every attempt wins its majority (there is no contender), and each
    // lock and unlock touches all three masters.
    let tasks = (0..3).map(|t| {
        let urls = urls.clone();
        tokio::spawn(async move {
            let redlock = rr::Redlock::connect(&urls).await?;
            let key = format!("rl:job{t}");
            let mut made = (0u64, 0u64);
            for _ in 0..300 {
                let token = rr::random_token();
                if redlock.lock(&key, &token, 30_000).await? {
                    made.0 += 1;
                    ensure!(redlock.unlock(&key, &token).await? == 3);
                    made.1 += 1;
                }
            }
            anyhow::Ok(made)
        })
    });
    let mut made = (0, 0);
    for task in futures::future::join_all(tasks).await {
        let (a, r) = task??;
        made.0 += a;
        made.1 += r;
    }
    ensure!(made.0 > 500, "too few acquisitions: {made:?}");
    expect_booked(&ls, "rl", made).await?;
    let per_lock: BTreeMap<String, f64> = ls
        .metrics()
        .await?
        .lines()
        .filter(|l| l.starts_with("lockscope_lock_acquisitions_total{source=\"rl\""))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, v)| (series.to_string(), v.parse().unwrap_or_default()))
        .collect();
    ensure!(per_lock.len() == 3, "{per_lock:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_notification_stream_books_the_net_difference_once() -> Result<()> {
    let server = RedisServer::start().await?;
    let ls = start(Config {
        sources: section("redis", vec![source("gap", &server.url(), &["gap:*"])]),
        ..Config::default()
    })
    .await?;
    let mut conn = server.connection().await?;
    assert!(rr::token_lock_acquire(&mut conn, "gap:a", "t-a", 60_000).await?);
    ls.wait_lock("gap", "/gap:a", SETTLE, "gap:a held", |l| {
        l.holders.len() == 1
    })
    .await?;
    // lockscope's subscription goes; a release and an acquisition follow at once, most likely
    // before it subscribes again (then the scan after the reconnect finds them), else seen.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await?;
    assert!(rr::token_lock_release(&mut conn, "gap:a", "t-a").await?);
    assert!(rr::token_lock_acquire(&mut conn, "gap:b", "t-b", 60_000).await?);
    ls.wait_lock("gap", "/gap:b", SETTLE, "gap:b held", |l| {
        l.holders.len() == 1
    })
    .await?;
    // Each change once: gap:a acquired and released, gap:b acquired.
    let series = |family: &str, lock: &str, cause: Option<&str>| match cause {
        Some(cause) => format!("{family}{{source=\"gap\",lock=\"{lock}\",cause=\"{cause}\"}}"),
        None => format!("{family}{{source=\"gap\",lock=\"{lock}\"}}"),
    };
    let want = [
        (
            series("lockscope_lock_acquisitions_total", "gap:a", None),
            1.0,
        ),
        (
            series("lockscope_lock_releases_total", "gap:a", Some("released")),
            1.0,
        ),
        (
            series("lockscope_lock_acquisitions_total", "gap:b", None),
            1.0,
        ),
    ];
    let mut text = String::new();
    let settled = eventually(SETTLE, "the gap's changes booked", async || {
        text = ls.metrics().await?;
        Ok(want
            .iter()
            .all(|(s, v)| lockscope_tests::harness::metric_value(&text, s) == Some(*v))
            .then_some(()))
    })
    .await;
    ensure!(settled.is_ok(), "{want:?} in:\n{text}");
    let (acquired, released, _) = booked(&ls, "gap").await?;
    ensure!(
        (acquired, released) == (2, 1),
        "{acquired} acquisitions, {released} releases"
    );
    Ok(())
}
