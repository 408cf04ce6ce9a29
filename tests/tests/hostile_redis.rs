//! Hostile input on the Redis force-release path and in the Redis collector (issue 18), on real
//! servers with real clients:
//!
//! * a Redisson RedLock holder is named by its thread (`*:<tid>`), which other JVMs share: a
//!   release is pinned to the per-master fields the operator saw (the holder's `version`), and
//!   each master's own field is compared again in the script;
//! * a release that reaches no server answers 503, and a slow Redlock master neither holds up
//!   the others nor the answer (each member's script runs at once, under a timeout);
//! * 20 MB values (and a 2 MB key name) under a watched pattern are read bounded: lockscope's
//!   memory and answers stay small, and a truncated holder is released by its digest;
//! * a key that expires in the year 292 billion (`PEXPIREAT i64::MAX`) among 100k TTL keys does
//!   not stop lockscope from seeing short locks expire on time.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig, RedisWatchConfig, RedlockConfig};
use lockscope_model::id::lock_id;
use lockscope_model::wire::LockView;
use lockscope_tests::harness::{eventually, eventually_every, Lockscope};
use lockscope_tests::redis_recipes::{self as rr, RedissonRedLock, Redlock};
use lockscope_tests::support::redis::{load_noise, RedisServer};
use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

const TOKEN: &str = "oncall-token-hostile-0123456789";
const WAIT: Duration = Duration::from_secs(15);
/// Lease of the RedLocks taken here: longer than any test, so none expires in one.
const LEASE_MS: u64 = 120_000;

fn admin(config: Config, dir: &Path) -> Config {
    let mut config = lockscope_tests::harness::with_admin(config, dir, TOKEN);
    config.admin.max_releases_per_minute = 1000;
    config
}

/// Reconcile scans far apart: what lockscope shows comes from notifications and deadline reads
/// only, so a test that turns notifications off keeps lockscope's view as it was.
fn quiet_watch() -> RedisWatchConfig {
    RedisWatchConfig {
        reconcile_interval: Duration::from_secs(3600),
        ..RedisWatchConfig::default()
    }
}

fn redlock_config(name: &str, urls: &[String], pattern: &str) -> Config {
    Config {
        sources: section(
            "redlock",
            vec![RedlockConfig {
                watch: quiet_watch(),
                ..RedlockConfig::new(name, urls, &[pattern])
            }],
        ),
        ..Config::default()
    }
}

async fn start(config: Config) -> Result<Lockscope> {
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(60)).await?;
    Ok(ls)
}

async fn three_masters() -> Result<[RedisServer; 3]> {
    let (a, b, c) = tokio::join!(
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start()
    );
    Ok([a?, b?, c?])
}

async fn release(ls: &Lockscope, source: &str, key: &str, body: Value) -> Result<(u16, Value)> {
    ls.release(&lock_id(source, &format!("/{key}")), Some(TOKEN), &body)
        .await
}

/// Turns keyspace notifications off: lockscope hears of no change from now on (until a
/// reconcile scan, an hour away here).
async fn notifications_off(conn: &mut MultiplexedConnection) -> Result<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("")
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

async fn hash_fields(conn: &mut MultiplexedConnection, key: &str) -> Result<Vec<String>> {
    let mut fields: Vec<String> = redis::cmd("HKEYS").arg(key).query_async(conn).await?;
    fields.sort();
    Ok(fields)
}

/// The per-master fields lockscope shows for a Redlock key, in master order.
fn shown_fields(lock: &LockView) -> Vec<Option<String>> {
    lock.redlock
        .as_ref()
        .map(|r| r.masters.iter().map(|m| m.holder.clone()).collect())
        .unwrap_or_default()
}

/// Two JVMs (each a `RedissonRedLock` over its own Redisson instance per master, so different
/// uuids) use the same thread id 52 — thread ids repeat across JVMs, so both are `*:52`. A
/// release names the holder and the version the operator saw: a version of the first JVM's
/// fields must not delete the second JVM's, a missing version is refused, and the seen version
/// releases exactly the fields it stands for. When lockscope's view is behind the servers (no
/// notifications), each master's script still compares its own field and refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_redlock_release_is_pinned_to_the_fields_seen() -> Result<()> {
    let masters = three_masters().await?;
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let dir = tempfile::tempdir()?;
    let ls = start(admin(redlock_config("rl", &urls, "lock:*"), dir.path())).await?;
    let mut conns = Vec::new();
    for m in &masters {
        conns.push(m.connection().await?);
    }
    let fields_of = |jvm: &RedissonRedLock| -> Vec<Option<String>> {
        jvm.masters
            .iter()
            .map(|(_, client)| Some(client.lock_name(52)))
            .collect()
    };
    let wait_fields = async |want: Vec<Option<String>>, what: &str| {
        ls.wait_lock("rl", "/lock:pay", WAIT, what, |l| {
            l.recipe == "redisson_redlock" && shown_fields(l) == want
        })
        .await
    };

    // JVM A holds; the operator looks at it.
    let jvm_a = RedissonRedLock::connect(&urls).await?;
    ensure!(jvm_a.try_lock("lock:pay", 52, LEASE_MS).await?);
    let seen_a = wait_fields(fields_of(&jvm_a), "JVM A's fields").await?;
    ensure!(seen_a.holders.len() == 1 && seen_a.holders[0].node == "*:52");
    let version_a = seen_a.holders[0].version.clone();

    // A lets go and JVM B, same thread id, takes the lock: still `*:52`.
    ensure!(jvm_a.unlock("lock:pay", 52).await? == 3);
    let jvm_b = RedissonRedLock::connect(&urls).await?;
    ensure!(jvm_b.try_lock("lock:pay", 52, LEASE_MS).await?);
    let seen_b = wait_fields(fields_of(&jvm_b), "JVM B's fields").await?;
    ensure!(seen_b.holders.len() == 1 && seen_b.holders[0].node == "*:52");

    // The operator's release of what they saw of A must not touch B's fields.
    let (status, body) = release(
        &ls,
        "rl",
        "lock:pay",
        json!({"holder": "*:52", "version": version_a, "reason": "stuck A"}),
    )
    .await?;
    for (conn, (_, client)) in conns.iter_mut().zip(&jvm_b.masters) {
        ensure!(
            hash_fields(conn, "lock:pay").await? == vec![client.lock_name(52)],
            "JVM B's field was touched by a release of JVM A's ({status} {body})"
        );
    }
    ensure!(
        status == 409,
        "a stale version must be refused: {status} {body}"
    );
    let version_b = seen_b.holders[0]
        .version
        .clone()
        .context("a Redisson RedLock holder shows its version")?;
    ensure!(
        Some(&version_b) != version_a.as_ref(),
        "{version_b} for both"
    );

    // No version: refused, nothing changes.
    let (status, body) = release(
        &ls,
        "rl",
        "lock:pay",
        json!({"holder": "*:52", "reason": "no version"}),
    )
    .await?;
    ensure!(
        status == 422,
        "a missing version is refused: {status} {body}"
    );
    for (conn, (_, client)) in conns.iter_mut().zip(&jvm_b.masters) {
        ensure!(hash_fields(conn, "lock:pay").await? == vec![client.lock_name(52)]);
    }

    // B's version releases B's fields on every master.
    let (status, body) = release(
        &ls,
        "rl",
        "lock:pay",
        json!({"holder": "*:52", "version": version_b, "reason": "stuck B"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(
        body["released"]["members"].as_array().map(Vec::len) == Some(3),
        "{body}"
    );
    for conn in &mut conns {
        ensure!(hash_fields(conn, "lock:pay").await?.is_empty());
    }

    // lockscope's view falls behind (notifications off): JVM C held, then JVM D took over
    // without lockscope hearing of it. A release of C as seen reaches every master with C's
    // fields, which each master's script compares: refused, D untouched.
    let jvm_c = RedissonRedLock::connect(&urls).await?;
    ensure!(jvm_c.try_lock("lock:pay", 52, LEASE_MS).await?);
    let seen_c = wait_fields(fields_of(&jvm_c), "JVM C's fields").await?;
    for conn in &mut conns {
        notifications_off(conn).await?;
    }
    ensure!(jvm_c.unlock("lock:pay", 52).await? == 3);
    let jvm_d = RedissonRedLock::connect(&urls).await?;
    ensure!(jvm_d.try_lock("lock:pay", 52, LEASE_MS).await?);
    let (status, body) = release(
        &ls,
        "rl",
        "lock:pay",
        json!({"holder": "*:52", "version": seen_c.holders[0].version, "reason": "stale view"}),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    for (conn, (_, client)) in conns.iter_mut().zip(&jvm_d.masters) {
        ensure!(hash_fields(conn, "lock:pay").await? == vec![client.lock_name(52)]);
    }
    Ok(())
}

/// A release that can reach no server answers 503 (unavailable), not 409 (the holder did not
/// change: nobody could be asked) nor 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_reaches_no_server_is_unavailable() -> Result<()> {
    let mut server = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let mut source = RedisSourceConfig::new("down", &server.url(), &["lock:*"]);
    source.watch = quiet_watch();
    let ls = start(admin(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir.path(),
    ))
    .await?;
    let mut conn = server.connection().await?;
    ensure!(rr::token_lock_acquire(&mut conn, "lock:gone", "tok-gone", 600_000).await?);
    ls.wait_lock("down", "/lock:gone", WAIT, "held", |l| l.holders.len() == 1)
        .await?;
    server.kill();
    let started = Instant::now();
    let (status, body) = release(
        &ls,
        "down",
        "lock:gone",
        json!({"holder": "tok-gone", "reason": "server gone"}),
    )
    .await?;
    ensure!(status == 503, "{status} {body}");
    ensure!(
        started.elapsed() < lockscope::admin::RELEASE_CONNECT_TIMEOUT + Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    Ok(())
}

/// One Redlock master paused for writes (`CLIENT PAUSE 15000 WRITE`, longer than a release's
/// command timeout): the other masters' scripts run at once (the key is gone there while the
/// release still waits), the answer comes after the command timeout, not the pause, and says
/// where it timed out; a majority deleted is `released`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redlock_master_holds_up_neither_the_others_nor_the_answer() -> Result<()> {
    let masters = three_masters().await?;
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let dir = tempfile::tempdir()?;
    let ls = start(admin(redlock_config("slow", &urls, "rl:*"), dir.path())).await?;
    let redlock = Redlock::connect(&urls).await?;
    let token = rr::random_token();
    ensure!(redlock.lock("rl:pay", &token, 600_000).await?);
    ls.wait_lock("slow", "/rl:pay", WAIT, "held on every master", |l| {
        l.holders.len() == 1 && shown_fields(l).iter().all(Option::is_some)
    })
    .await?;
    let mut conns = Vec::new();
    for m in &masters {
        conns.push(m.connection().await?);
    }
    // The first master (the one a one-after-another release asks first) stops taking writes.
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(15_000)
        .arg("WRITE")
        .query_async::<()>(&mut conns[0])
        .await?;
    let http = ls.http.clone();
    let url = format!(
        "{}/api/v1/locks/{}/release",
        ls.base,
        lock_id("slow", "/rl:pay")
    );
    let started = Instant::now();
    let pending = tokio::spawn(async move {
        let answer = http
            .post(url)
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(30))
            .json(&json!({"holder": token, "reason": "one master paused"}))
            .send()
            .await?;
        let status = answer.status().as_u16();
        anyhow::Ok((status, answer.json::<Value>().await?, started.elapsed()))
    });
    let unpaused: Vec<MultiplexedConnection> = conns[1..].to_vec();
    let gone_on_the_others = eventually(
        Duration::from_secs(3),
        "the key gone on the masters that are not paused",
        async || {
            for conn in &unpaused {
                let exists: bool = redis::cmd("EXISTS")
                    .arg("rl:pay")
                    .query_async(&mut conn.clone())
                    .await?;
                if exists {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await;
    let still_waiting = !pending.is_finished();
    let answered = pending.await?;
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async::<()>(&mut conns[0])
        .await?;
    let (status, body, took) = answered?;
    gone_on_the_others?;
    ensure!(
        still_waiting,
        "the release answered before the paused master could"
    );
    ensure!(status == 200, "{status} {body}");
    ensure!(
        took < lockscope::admin::RELEASE_COMMAND_TIMEOUT + Duration::from_secs(3),
        "the answer took {took:?}"
    );
    ensure!(
        body["released"]["members"].as_array().map(Vec::len) == Some(2),
        "{body}"
    );
    let failed = body["released"]["failed_on"].to_string();
    ensure!(failed.contains("timed out"), "{body}");
    Ok(())
}

/// VmRSS of this process (lockscope runs in it), bytes.
fn rss_bytes() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmRSS")?;
    Ok(kb * 1024)
}

const HUGE: usize = 20 * 1024 * 1024;

/// Ten 20 MB values and a 2 MB key name under a watched pattern: lockscope reads a bounded
/// part of each, so its memory and its answers stay small; the truncated holders are named by
/// a digest, by which one is released; a value changed behind lockscope's back (notifications
/// off) is refused by the script's own digest compare, and a refusal never carries the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_values_are_read_bounded_and_released_by_digest() -> Result<()> {
    let server = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let mut source = RedisSourceConfig::new("big", &server.url(), &["lock:*"]);
    source.watch = quiet_watch();
    let ls = start(admin(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir.path(),
    ))
    .await?;
    let mut conn = server.connection().await?;
    ensure!(rr::token_lock_acquire(&mut conn, "lock:swap", "tok-swap", 600_000).await?);
    ls.wait_lock("big", "/lock:swap", WAIT, "token lock", |l| {
        l.holders.len() == 1
    })
    .await?;
    let rss_before = rss_bytes()?;
    // Built on the server (SETRANGE pads with zero bytes): the test holds no 20 MB buffer.
    for i in 0..10 {
        let key = format!("lock:huge-{i}");
        let head = format!("holder-{i}-{}", "h".repeat(300));
        redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg(&head)
            .arg("PX")
            .arg(600_000)
            .ignore()
            .cmd("SETRANGE")
            .arg(&key)
            .arg(HUGE - 5)
            .arg("-tail")
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
    }
    let long_key = format!("lock:hugekey-{}", "k".repeat(2 * 1024 * 1024));
    redis::cmd("SET")
        .arg(&long_key)
        .arg("tok-long")
        .arg("PX")
        .arg(600_000)
        .query_async::<()>(&mut conn)
        .await?;
    drop(long_key);

    let mut answer_len = 0;
    let locks: Vec<LockView> = eventually(WAIT, "ten huge locks listed", async || {
        let text = ls
            .http
            .get(format!("{}/api/v1/locks?q=huge", ls.base))
            .send()
            .await?
            .text()
            .await?;
        answer_len = text.len();
        let body: Value = serde_json::from_str(&text)?;
        let locks: Vec<LockView> = serde_json::from_value(body["locks"].clone())?;
        let huge = locks
            .iter()
            .filter(|l| l.path.starts_with("lock:huge-") && l.holders.len() == 1)
            .count();
        Ok((huge == 10).then_some(locks))
    })
    .await?;
    ls.settled(WAIT).await?;
    let rss_after = rss_bytes()?;
    let grew = rss_after.saturating_sub(rss_before);
    println!(
        "RSS before {} MiB, after {} MiB (+{} MiB); /api/v1/locks?q=huge answered {answer_len} bytes",
        rss_before >> 20,
        rss_after >> 20,
        grew >> 20
    );
    ensure!(
        answer_len < 64 * 1024,
        "/api/v1/locks?q=huge answered {answer_len} bytes"
    );
    ensure!(grew < 150 << 20, "RSS grew by {} MiB", grew >> 20);
    ensure!(
        locks.iter().all(|l| l.path.len() < 4096),
        "a 2 MB key name is listed"
    );
    // The long key is not silently dropped: the source says it skipped it.
    let mut limits = Vec::new();
    let skipped_at = Instant::now();
    eventually(
        WAIT,
        "the long key name counted on the source",
        async || {
            let sources = ls.sources().await?;
            let big = sources
                .iter()
                .find(|s| s.name == "big")
                .context("source big")?;
            limits = big.limits.clone();
            Ok(limits.iter().any(|l| l.contains("key name")).then_some(()))
        },
    )
    .await
    .with_context(|| format!("{limits:?}"))?;
    println!(
        "long key name counted {:?} after the ten huge locks were listed: {limits:?}",
        skipped_at.elapsed()
    );
    let holder_of = |key: &str| -> Result<(String, Option<String>)> {
        let lock = locks
            .iter()
            .find(|l| l.path == key)
            .with_context(|| format!("{key} listed"))?;
        let h = &lock.holders[0];
        ensure!(h.node.len() < 1024, "holder id of {} bytes", h.node.len());
        ensure!(h.node.starts_with("holder-"), "{}", h.node);
        Ok((h.node.clone(), h.version.clone()))
    };

    // Released by its digest.
    let (holder, version) = holder_of("lock:huge-3")?;
    ensure!(version.is_some(), "a truncated holder shows its digest");
    let (status, body) = release(
        &ls,
        "big",
        "lock:huge-3",
        json!({"holder": holder, "version": version, "reason": "huge"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    let exists: bool = redis::cmd("EXISTS")
        .arg("lock:huge-3")
        .query_async(&mut conn)
        .await?;
    ensure!(!exists, "lock:huge-3 still there");

    // Changed behind lockscope's back: the same length, another head. The script's digest
    // differs and it refuses; its answer is small.
    notifications_off(&mut conn).await?;
    let (holder, version) = holder_of("lock:huge-4")?;
    redis::cmd("SETRANGE")
        .arg("lock:huge-4")
        .arg(0)
        .arg("HOLDER")
        .query_async::<()>(&mut conn)
        .await?;
    let (status, body) = release(
        &ls,
        "big",
        "lock:huge-4",
        json!({"holder": holder, "version": version, "reason": "changed"}),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    ensure!(
        body.to_string().len() < 8192,
        "{} bytes",
        body.to_string().len()
    );
    let len: usize = redis::cmd("STRLEN")
        .arg("lock:huge-4")
        .query_async(&mut conn)
        .await?;
    ensure!(len == HUGE, "lock:huge-4 is {len} bytes");

    // A token lock whose value became 20 MB: refused, and the refusal does not carry the value.
    redis::cmd("SETRANGE")
        .arg("lock:swap")
        .arg(HUGE - 1)
        .arg("!")
        .query_async::<()>(&mut conn)
        .await?;
    let (status, body) = release(
        &ls,
        "big",
        "lock:swap",
        json!({"holder": "tok-swap", "reason": "swapped"}),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    ensure!(
        body.to_string().len() < 8192,
        "{} bytes",
        body.to_string().len()
    );
    Ok(())
}

/// 100k unrelated TTL keys (Redis notifies their expiries late), one lock key that expires at
/// `PEXPIREAT 9223372036854775807`, and short token locks: lockscope shows the far one without
/// overflowing its deadline arithmetic and still sees each short lock go at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_future_pexpireat_does_not_stop_expiries() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    load_noise(&mut conn, 100_000).await?;
    let mut source = RedisSourceConfig::new("far", &server.url(), &["lock:*"]);
    source.watch = quiet_watch();
    let ls = start(Config {
        sources: section("redis", vec![source]),
        ..Config::default()
    })
    .await?;
    // Read at bootstrap by a later lockscope and by notification here: both paths.
    for key in ["lock:forever", "lock:forever-2"] {
        redis::pipe()
            .cmd("SET")
            .arg(key)
            .arg("tok-forever")
            .ignore()
            .cmd("PEXPIREAT")
            .arg(key)
            .arg(i64::MAX)
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
    }
    let forever = ls
        .wait_lock("far", "/lock:forever", WAIT, "far-future lock", |l| {
            l.holders.len() == 1
        })
        .await?;
    let now = lockscope::now_ms();
    let at = forever.expires_at_ms.context("a deadline")?;
    ensure!(at > now + 50 * 365 * 86_400_000, "deadline {at}");
    let mut deadlines = Vec::new();
    for i in 0..10u64 {
        let key = format!("lock:short{i}");
        let ttl = 1_500 + i * 100;
        ensure!(rr::token_lock_acquire(&mut conn, &key, "t", ttl).await?);
        deadlines.push((key, lockscope::now_ms() + ttl as i64));
    }
    for (key, _) in &deadlines {
        ls.wait_lock("far", &format!("/{key}"), WAIT, "short lock seen", |l| {
            l.holders.len() == 1
        })
        .await?;
    }
    let mut worst = 0;
    for (key, deadline) in &deadlines {
        eventually_every(
            WAIT,
            Duration::from_millis(20),
            &format!("{key} gone"),
            async || {
                Ok(ls
                    .lock("far", &format!("/{key}"))
                    .await?
                    .is_none()
                    .then_some(()))
            },
        )
        .await?;
        worst = worst.max(lockscope::now_ms() - deadline);
    }
    ensure!(
        worst < 1_500,
        "an expiry showed {worst} ms after its deadline"
    );
    // A second lockscope reads the far keys at bootstrap.
    let mut source = RedisSourceConfig::new("far2", &server.url(), &["lock:forever*"]);
    source.watch = quiet_watch();
    let second = start(Config {
        sources: section("redis", vec![source]),
        ..Config::default()
    })
    .await?;
    second
        .wait_lock("far2", "/lock:forever-2", WAIT, "read at bootstrap", |l| {
            l.holders.len() == 1 && l.expires_at_ms.is_some()
        })
        .await?;
    ensure!(ls.lock("far", "/lock:forever").await?.is_some());
    Ok(())
}
