//! Stale-lock rules and deadlock detection against real servers: each rule shows up in the API
//! (with its explanation) and in `lockscope_stale_locks`, and two clients waiting on each other's
//! ZooKeeper locks are reported as a cycle by `/api/v1/deadlocks` and `lockscope_deadlock_cycles`.

use std::time::Duration;

use anyhow::{ensure, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_model::session_hex;
use lockscope_tests::harness::{eventually, zk_source, Lockscope};
use lockscope_tests::recipes::{self, SeedClient, SeedRecipe};
use lockscope_tests::redis_recipes::{setnx_deadline, setnx_no_ttl, RedissonClient};
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::Value;
use zookeeper_client as zkc;

/// Waits until the lock at `path` reports stale rule `rule`; returns its explanation.
async fn wait_rule(ls: &Lockscope, source: &str, path: &str, rule: &str) -> Result<String> {
    let id = lockscope_model::id::lock_id(source, path);
    let mut last = Value::Null;
    eventually(
        Duration::from_secs(30),
        &format!("{path}: rule {rule} reported"),
        async || {
            let (status, body) = ls.get_json(&format!("/api/v1/locks/{id}")).await?;
            let found = (status == 200)
                .then(|| {
                    body["stale"]
                        .as_array()
                        .and_then(|a| a.iter().find(|s| s["rule"] == rule))
                        .map(|found| {
                            found["explanation"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string()
                        })
                })
                .flatten();
            last = body;
            Ok(found)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last: {last}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_rules_on_redis_and_zookeeper_locks() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let connect = zk.connect_string();
    let root = unique_root("stale");
    let redis = RedisServer::start().await?;
    let mut config = Config {
        sources: [
            section("zookeeper", vec![zk_source("zk", &connect, &[&root])]),
            section(
                "redis",
                vec![RedisSourceConfig::new(
                    "r",
                    &redis.url(),
                    &["lock:*", "app:*"],
                )],
            ),
        ]
        .concat(),
        ..Config::default()
    };
    config.ui.stale_hold = Duration::from_secs(3);
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let mut conn = redis.connection().await?;

    // Redis: SETNX without EXPIRE (an immortal lock), a legacy deadline already past, and a
    // Redisson lock whose lease is cut short the way a dead watchdog leaves it.
    ensure!(setnx_no_ttl(&mut conn, "lock:immortal", "host-a").await?);
    ensure!(
        setnx_deadline(
            &mut conn,
            "lock:legacy",
            lockscope_tests::redis_recipes::now_ms() - 60_000
        )
        .await?
    );
    let redisson = RedissonClient::new();
    redisson
        .rlock_try_lock(&mut conn, "app:job", 1, 30_000)
        .await?;
    ls.wait_lock(
        "r",
        "/app:job",
        Duration::from_secs(10),
        "redisson held",
        |l| l.holders.len() == 1,
    )
    .await?;
    let () = redis::cmd("PEXPIRE")
        .arg("app:job")
        .arg(6_000)
        .query_async(&mut conn)
        .await?;

    // ZooKeeper: a queue whose head is a persistent node.
    let observer = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let pq = format!("{root}/persistent");
    for parent in [root.as_str(), pq.as_str()] {
        observer
            .client()
            .create(
                parent,
                b"",
                &zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all()),
            )
            .await?;
    }
    observer
        .client()
        .create(
            &format!("{pq}/lock-"),
            b"",
            &zkc::CreateMode::PersistentSequential.with_acls(zkc::Acls::anyone_all()),
        )
        .await?;

    let explanation = wait_rule(&ls, "r", "/lock:legacy", "deadline_passed").await?;
    ensure!(explanation.contains("deadline"), "{explanation}");
    wait_rule(&ls, "r", "/app:job", "watchdog_stalled").await?;
    wait_rule(&ls, "zk", &pq, "persistent_node").await?;
    // Held past the 3 s limit, then past the no-TTL grace (10 s).
    wait_rule(&ls, "zk", &pq, "held_too_long").await?;
    wait_rule(&ls, "r", "/lock:immortal", "no_ttl").await?;

    let (_, stale) = ls.get_json("/api/v1/locks?stale=true").await?;
    let paths: Vec<&str> = stale["locks"]
        .as_array()
        .map(|a| a.iter().filter_map(|l| l["path"].as_str()).collect())
        .unwrap_or_default();
    // (app:job has expired by now: its cut-short lease was the point.)
    for want in ["lock:immortal", "lock:legacy", pq.as_str()] {
        ensure!(
            paths.contains(&want),
            "{want} missing from ?stale=true: {paths:?}"
        );
    }
    for (series, at_least) in [
        ("lockscope_stale_locks{source=\"r\",rule=\"no_ttl\"}", 1.0),
        (
            "lockscope_stale_locks{source=\"r\",rule=\"deadline_passed\"}",
            1.0,
        ),
        (
            "lockscope_stale_locks{source=\"zk\",rule=\"persistent_node\"}",
            1.0,
        ),
    ] {
        ls.wait_metric(series, |value| value >= at_least).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_lock_deadlock_is_reported_as_a_cycle() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let connect = zk.connect_string();
    let root = unique_root("deadlock");
    let ls = Lockscope::watching("zk", &connect, &[&root]).await?;
    let fair = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let (l1, l2) = (format!("{root}/accounts"), format!("{root}/ledger"));
    let a = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let b = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let _a_holds = recipes::lock(&a, &l1, &fair).await?;
    let _b_holds = recipes::lock(&b, &l2, &fair).await?;
    // Each now waits for the other's lock, and neither will ever give its own up.
    let mut a_waits = a.enqueue(&l2, &fair).await?;
    let mut b_waits = b.enqueue(&l1, &fair).await?;
    let (a2, b2) = (a.clone(), b.clone());
    let stuck_a = tokio::spawn(async move { a_waits.acquired(&a2).await });
    let stuck_b = tokio::spawn(async move { b_waits.acquired(&b2).await });

    let mut last = Value::Null;
    let cycles = eventually(Duration::from_secs(10), "one deadlock cycle", async || {
        let (_, body) = ls.get_json("/api/v1/deadlocks").await?;
        let found = body["cycles"].as_array().is_some_and(|c| c.len() == 1);
        last = body;
        Ok(found.then(|| last.clone()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last: {last}"))?;
    let cycle = &cycles["cycles"][0];
    ensure!(cycle["source"] == "zk", "{cycles}");
    let sessions: Vec<&str> = cycle["sessions"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let (sa, sb) = (session_hex(a.session_id()), session_hex(b.session_id()));
    ensure!(
        sessions.len() == 2 && sessions.contains(&sa.as_str()) && sessions.contains(&sb.as_str()),
        "{cycles}"
    );
    ensure!(
        cycle["waits"].as_array().map(Vec::len) == Some(2),
        "{cycles}"
    );
    ls.wait_metric("lockscope_deadlock_cycles{source=\"zk\"}", |v| v == 1.0)
        .await?;
    ensure!(
        !stuck_a.is_finished() && !stuck_b.is_finished(),
        "a deadlocked client got its lock"
    );
    stuck_a.abort();
    stuck_b.abort();
    Ok(())
}
