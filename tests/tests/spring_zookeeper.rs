//! Spring Integration's `ZookeeperLockRegistry` against real ZooKeeper 3.8, with real Apache
//! Curator (Debian's) doing what the registry does.
//!
//! Followed: spring-projects/spring-integration main at f369e899dd3007756e4da49273e201b85afa5cc7
//! (7.2.0-SNAPSHOT), `spring-integration-zookeeper/src/main/java/org/springframework/
//! integration/zookeeper/lock/ZookeeperLockRegistry.java`: `DEFAULT_ROOT` is
//! `/SpringIntegration-LockRegistry`; `DefaultKeyToPathStrategy.pathFor(key)` is the root, `/`
//! and the key, unencoded (a key with `/` nests); each key is one Curator `InterProcessMutex`
//! at that path (`new InterProcessMutex(client, path)`), whose acquisition creates a protected
//! `_c_<uuid>-lock-<seq>` EPHEMERAL_SEQUENTIAL child holding Curator's default data, the
//! client's IP address. So the Curator client below at those paths leaves exactly what a
//! Spring service leaves, and lockscope shows it as a `curator_mutex`: the holder and the
//! waiters in order, each with its session and its host's address as identity. A force
//! release deletes the holder's node; the next waiter's watch fires and it holds, as after an
//! unlock (Spring never makes the mutex revocable, so the old holder is not told).

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config};
use lockscope_model::id::lock_id;
use lockscope_model::session_hex;
use lockscope_tests::harness::{with_admin, zk_source, Lockscope};
use lockscope_tests::support::curator::{CuratorClient, CuratorRecipe};
use lockscope_tests::support::zk::ZkEnsemble;
use serde_json::json;

const TOKEN: &str = "spring-admin-token";
const WAIT: Duration = Duration::from_secs(30);
/// `ZookeeperLockRegistry.DEFAULT_ROOT`.
const ROOT: &str = "/SpringIntegration-LockRegistry";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_registry_keys_are_curator_mutexes_with_queues_identities_and_a_force_release(
) -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let connect = zk.connect_string();
    let admin = tempfile::tempdir()?;
    let config = Config {
        sources: section("zookeeper", vec![zk_source("zk", &connect, &[ROOT])]),
        ..Config::default()
    };
    let ls = Lockscope::start(with_admin(config, admin.path(), TOKEN)).await?;
    ls.wait_ready(WAIT).await?;

    // `registry.obtain("orders")` and, nested, `registry.obtain("invoices/42")`.
    let orders = format!("{ROOT}/orders");
    let nested = format!("{ROOT}/invoices/42");
    let mut a = CuratorClient::spawn(&connect, 10_000, CuratorRecipe::Mutex, &orders).await?;
    a.start_acquire().await?;
    a.wait_acquired(WAIT).await?;
    let mut b = CuratorClient::spawn(&connect, 10_000, CuratorRecipe::Mutex, &orders).await?;
    b.start_acquire().await?;
    let mut c = CuratorClient::spawn(&connect, 10_000, CuratorRecipe::Mutex, &nested).await?;
    c.start_acquire().await?;
    c.wait_acquired(WAIT).await?;

    let lock = ls
        .wait_lock("zk", &orders, WAIT, "a holds, b waits", |l| {
            l.holders.len() == 1 && l.waiters.len() == 1
        })
        .await?;
    ensure!(lock.recipe == "curator_mutex", "{lock:?}");
    ensure!(
        lock.holders[0].session == session_hex(a.session_id())
            && lock.waiters[0].session == session_hex(b.session_id()),
        "{lock:?}"
    );
    for node in [&lock.holders[0].node, &lock.waiters[0].node] {
        let name = node.rsplit('/').next().unwrap_or_default();
        ensure!(
            name.starts_with("_c_") && name.contains("-lock-"),
            "a protected Curator node: {node}"
        );
    }
    // Curator's default node data: the client host's address, for the holder and the waiter.
    let identity = lock.holders[0]
        .identity
        .clone()
        .context("the holder's address")?;
    ensure!(
        identity.parse::<std::net::IpAddr>().is_ok(),
        "an IP address: {identity}"
    );
    ensure!(
        lock.waiters[0].identity.as_deref() == Some(identity.as_str()),
        "{lock:?}"
    );
    ls.wait_lock("zk", &nested, WAIT, "the nested key's mutex", |l| {
        l.recipe == "curator_mutex" && l.holders.len() == 1
    })
    .await?;

    // The guarded release of exactly a's node: b's watch fires and b holds.
    let body = json!({"holder": lock.holders[0].node, "session": lock.holders[0].session,
                      "version": lock.holders[0].version, "reason": "a hung"});
    let (status, answer) = ls
        .release(&lock_id("zk", &orders), Some(TOKEN), &body)
        .await?;
    ensure!(status == 200, "release answered {status}: {answer}");
    b.wait_acquired(WAIT).await?;
    ls.wait_lock("zk", &orders, WAIT, "b holds", |l| {
        l.holders.len() == 1
            && l.holders[0].session == session_hex(b.session_id())
            && l.waiters.is_empty()
    })
    .await?;
    // The same view again is refused: a's node is gone.
    let (status, _) = ls
        .release(&lock_id("zk", &orders), Some(TOKEN), &body)
        .await?;
    ensure!(status == 409, "a stale release: {status}");
    for client in [a, b, c] {
        client.quit().await?;
    }
    Ok(())
}
