//! ShedLock's ZooKeeper and etcd providers against real ZooKeeper 3.8 and etcd, driven by the
//! source-faithful clients of `lockscope_tests::shedlock` (ShedLock 7.9.0, commit 2495b14):
//! a run holds (its lock-until instant or lease shown, the host as identity on etcd), a second
//! run is refused and nothing waits, an unlock frees it, a lock whose lockAtMostFor runs out
//! shows free by itself, and the guarded force release (ZooKeeper: the instant set to now by a
//! `setData` conditional on the version seen; etcd: a txn on the revisions seen) refuses a stale
//! view and frees the lock for the next run. ShedLock's Redis provider is tested in
//! `redis_locks.rs`.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::etcd::EtcdSourceConfig;
use lockscope::config::{section, Config};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{EventKind, ReleaseCause};
use lockscope_tests::harness::{eventually, with_admin, zk_source, Lockscope};
use lockscope_tests::shedlock::{now_ms, EtcdShedLock, LockConfig, ZkShedLock};
use lockscope_tests::support::etcd::{keys, EtcdServer};
use lockscope_tests::support::zk::ZkEnsemble;
use serde_json::json;

const TOKEN: &str = "shedlock-admin-token";
const WAIT: Duration = Duration::from_secs(30);

fn unique_root(tag: &str) -> String {
    format!("/shedlock-{tag}-{}-{}", std::process::id(), now_ms())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_provider_held_by_its_instant_refused_unlocked_run_out_and_force_released(
) -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let hosts = zk.connect_string();
    let root = unique_root("zk");
    let admin = tempfile::tempdir()?;
    let config = Config {
        sources: section("zookeeper", vec![zk_source("zk", &hosts, &[&root])]),
        ..Config::default()
    };
    let ls = Lockscope::start(with_admin(config, admin.path(), TOKEN)).await?;
    ls.wait_ready(WAIT).await?;

    let a = ZkShedLock::connect(&hosts, &root).await?;
    let b = ZkShedLock::connect(&hosts, &root).await?;
    let node = a.node_path("nightly-report");

    // A run holds for lockAtMostFor (ten minutes) and shows it as the lock's expiry.
    let run = a
        .lock(
            "nightly-report",
            LockConfig::at_most(Duration::from_secs(600)),
        )
        .await?
        .context("the first run gets the lock")?;
    let lock = ls
        .wait_lock("zk", &node, WAIT, "the run holds", |l| {
            l.recipe == "shedlock" && l.holders.len() == 1
        })
        .await?;
    let until = lock.expires_at_ms.context("the lock-until instant")?;
    ensure!(
        until > now_ms() + 500_000 && until <= now_ms() + 601_000,
        "held for ten minutes: {lock:?}"
    );
    ensure!(lock.holders[0].session == "0x0", "{lock:?}");
    ensure!(lock.waiters.is_empty(), "{lock:?}");
    ensure!(
        lock.flags.iter().any(|f| f == "waiters_not_visible"),
        "the page says nothing waits: {lock:?}"
    );
    ensure!(
        lock.stale.is_empty(),
        "a persistent node holding by time is not stale: {lock:?}"
    );

    // Another run is refused at once: nothing waits.
    ensure!(
        b.lock(
            "nightly-report",
            LockConfig::at_most(Duration::from_secs(600))
        )
        .await?
        .is_none(),
        "a second run got a held lock"
    );

    // ShedLock's unlock writes now into the node: free, the node kept.
    a.unlock("nightly-report", &run).await?;
    let free = ls
        .wait_lock("zk", &node, WAIT, "the unlocked lock is free", |l| {
            l.recipe == "shedlock" && l.holders.is_empty()
        })
        .await?;
    ensure!(
        free.stale.is_empty() && free.expires_at_ms.is_none(),
        "{free:?}"
    );
    let detail = ls.detail("zk", &node).await?;
    ensure!(
        detail
            .events
            .iter()
            .any(|e| e.kind == EventKind::Released && e.cause == Some(ReleaseCause::Released)),
        "the unlock is booked released: {:?}",
        detail.events
    );

    // A run whose lockAtMostFor runs out is free by itself, booked as run out.
    let _short = b
        .lock(
            "nightly-report",
            LockConfig::at_most(Duration::from_secs(2)),
        )
        .await?
        .context("the next run gets the freed lock")?;
    ls.wait_lock("zk", &node, WAIT, "the short run holds", |l| {
        l.holders.len() == 1
    })
    .await?;
    ls.wait_detail("zk", &node, WAIT, "the short run runs out", |d| {
        d.lock.holders.is_empty()
            && d.events
                .iter()
                .any(|e| e.kind == EventKind::Released && e.cause == Some(ReleaseCause::TtlExpired))
    })
    .await?;

    // Force release: a stale view (an older data version) is refused; the one seen frees it.
    a.lock(
        "nightly-report",
        LockConfig::at_most(Duration::from_secs(600)),
    )
    .await?
    .context("a long run")?;
    let held = ls
        .wait_lock("zk", &node, WAIT, "the long run holds", |l| {
            l.holders.len() == 1 && l.expires_at_ms.is_some_and(|u| u > now_ms() + 500_000)
        })
        .await?;
    let version = held.holders[0].version.clone().context("a version")?;
    let (czxid, until) = version.split_once('@').context("czxid@instant")?;
    ensure!(
        lockscope_model::shedlock::parse_instant(until) == held.expires_at_ms,
        "the version names the instant seen: {held:?}"
    );
    let id = lock_id("zk", &node);
    // The previous run's instant: a view from before this run.
    let stale_version = format!("{czxid}@2020-01-01T00:00:00.000Z");
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": node, "session": "0x0", "version": stale_version, "reason": "test"}),
        )
        .await?;
    ensure!(status == 409, "a stale version: {status} {body}");
    ensure!(
        b.lock(
            "nightly-report",
            LockConfig::at_most(Duration::from_secs(600))
        )
        .await?
        .is_none(),
        "a refused release changed nothing"
    );
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": node, "session": "0x0", "version": version, "reason": "job hung"}),
        )
        .await?;
    ensure!(status == 200, "release answered {status}: {body}");
    ensure!(body["released"]["until_now"].is_string(), "{body}");
    ls.wait_detail("zk", &node, WAIT, "booked forced, free", |d| {
        d.lock.holders.is_empty()
            && d.events
                .iter()
                .any(|e| e.cause == Some(ReleaseCause::Forced))
    })
    .await?;
    ensure!(
        b.lock(
            "nightly-report",
            LockConfig::at_most(Duration::from_secs(600))
        )
        .await?
        .is_some(),
        "the next run takes the force-released lock"
    );
    ls.wait_lock("zk", &node, WAIT, "the next run holds", |l| {
        l.holders.len() == 1
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_provider_held_on_a_lease_named_by_host_cooled_down_and_force_released() -> Result<()>
{
    let etcd = EtcdServer::start().await?;
    let endpoints = etcd.endpoints();
    let mut source = EtcdSourceConfig::new("e", &endpoints, &["shedlock:"]);
    source.lease_poll_interval = Duration::from_millis(200);
    let admin = tempfile::tempdir()?;
    let config = Config {
        sources: section("etcd", vec![source]),
        ..Config::default()
    };
    let ls = Lockscope::start(with_admin(config, admin.path(), TOKEN)).await?;
    ls.wait_ready(WAIT).await?;

    let mut a = EtcdShedLock::connect(&endpoints, "default", "app-node-1").await?;
    let mut b = EtcdShedLock::connect(&endpoints, "default", "app-node-2").await?;
    let key = a.key("invoice-sweep");
    ensure!(key == "shedlock:default:invoice-sweep", "{key}");
    // A key without a leading `/` is found as `/<key>` (ids spell paths from `/`).
    let at = format!("/{key}");

    let run = a
        .lock(
            "invoice-sweep",
            LockConfig::at_most(Duration::from_secs(300)),
        )
        .await?
        .context("the first run gets the lock")?;
    let lock = ls
        .wait_lock("e", &at, WAIT, "the run holds", |l| {
            l.recipe == "shedlock" && l.holders.len() == 1
        })
        .await?;
    let holder = &lock.holders[0];
    ensure!(
        holder.identity.as_deref() == Some("app-node-1"),
        "the host is who holds: {lock:?}"
    );
    ensure!(
        holder.lease.as_ref().map(|l| l.id.clone()) == Some(format!("{:x}", run.lease)),
        "{lock:?}"
    );
    ensure!(
        lock.lease_ms == Some(300_000),
        "ceil(lockAtMostFor) seconds: {lock:?}"
    );
    ensure!(
        lock.flags.iter().any(|f| f == "waiters_not_visible"),
        "{lock:?}"
    );
    ensure!(
        b.lock(
            "invoice-sweep",
            LockConfig::at_most(Duration::from_secs(300))
        )
        .await?
        .is_none(),
        "a second run got a held lock"
    );

    // Unlock with lockAtLeastFor left: the key stays on a new short lease (the cool-down).
    let cooled = LockConfig {
        at_most: Duration::from_secs(300),
        at_least: Duration::from_secs(120),
    };
    a.unlock("invoice-sweep", &run).await?;
    eventually(WAIT, "the key gone with its revoked lease", async || {
        Ok(ls.lock("e", &at).await?.is_none().then_some(()))
    })
    .await?;
    let run = a
        .lock("invoice-sweep", cooled)
        .await?
        .context("the lock is free after the unlock")?;
    a.unlock("invoice-sweep", &run).await?;
    let kept = keys(&endpoints, &key).await?;
    ensure!(kept.len() == 1, "the cool-down keeps the key: {kept:?}");
    let cooling = ls
        .wait_lock("e", &at, WAIT, "the cool-down key on its new lease", |l| {
            l.holders
                .first()
                .and_then(|h| h.lease.as_ref())
                .is_some_and(|lease| lease.id != format!("{:x}", run.lease))
        })
        .await?;
    ensure!(
        cooling.lease_ms.is_some_and(|ms| ms <= 120_000),
        "{cooling:?}"
    );

    // Force release: a stale mod_revision is refused; the revisions seen delete the key.
    let version = cooling.holders[0].version.clone().context("a version")?;
    let (create, modified) = version.split_once('/').context("create/mod")?;
    let id = lock_id("e", &at);
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": key, "version": format!("{create}/{}", modified.parse::<i64>()? - 1), "reason": "test"}),
        )
        .await?;
    ensure!(status == 409, "a stale version: {status} {body}");
    let (status, body) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": key, "version": version, "reason": "cool-down blocks a rerun"}),
        )
        .await?;
    ensure!(status == 200, "release answered {status}: {body}");
    ensure!(
        b.lock(
            "invoice-sweep",
            LockConfig::at_most(Duration::from_secs(300))
        )
        .await?
        .is_some(),
        "the next run takes the released lock"
    );
    ls.wait_lock("e", &at, WAIT, "app-node-2 holds", |l| {
        l.holders.first().and_then(|h| h.identity.as_deref()) == Some("app-node-2")
    })
    .await?;
    Ok(())
}
