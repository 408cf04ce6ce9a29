//! etcd through the backend boundary, against real etcd 3.4 and the Go client's own recipes run
//! by `etcdctl`: mutex holders and ordered waiters with their leases, release causes
//! (`released` when a key goes under a live lease, `lease_expired` when a killed holder's lease
//! runs out), elections, single-key lease locks with binary owners, leases as sessions, the
//! guarded force release (a txn on `create_revision`/`mod_revision`; a stale version is
//! refused and changes nothing), and a member killed under churn.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::etcd::EtcdSourceConfig;
use lockscope::config::Config;
use lockscope_model::id::lock_id;
use lockscope_model::wire::{LockView, ReleaseCause};
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::support::etcd::{
    keys, lease_hex, lease_key_lock, EtcdCluster, EtcdServer, EtcdctlElect, EtcdctlLock,
};
use serde_json::{json, Value};

const TOKEN: &str = "etcd-admin-token";
const WAIT: Duration = Duration::from_secs(30);

fn source(endpoints: &[String]) -> EtcdSourceConfig {
    let mut config = EtcdSourceConfig::new("e", endpoints, &["/locks"]);
    config.lease_poll_interval = Duration::from_millis(200);
    config
}

async fn start(endpoints: &[String], admin: Option<&std::path::Path>) -> Result<Lockscope> {
    let mut config = Config {
        etcd: vec![source(endpoints)],
        ..Config::default()
    };
    if let Some(dir) = admin {
        config = with_admin(config, dir, TOKEN);
    }
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

fn nodes(lock: &LockView) -> (Vec<String>, Vec<String>) {
    (
        lock.holders.iter().map(|h| h.node.clone()).collect(),
        lock.waiters.iter().map(|w| w.node.clone()).collect(),
    )
}

/// The keys under `name/` in `create_revision` order.
async fn queue(endpoints: &[String], name: &str) -> Result<Vec<String>> {
    let mut kvs = keys(endpoints, &format!("{name}/")).await?;
    kvs.sort_by_key(|k| k.create_revision);
    Ok(kvs.iter().map(|k| k.key_str()).collect())
}

async fn release(ls: &Lockscope, id: &str, body: Value) -> Result<(u16, Value)> {
    let response = ls
        .http
        .post(format!("{}/api/v1/locks/{id}/release", ls.base))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_queue_leases_and_release_causes() -> Result<()> {
    let etcd = EtcdServer::start().await?;
    let endpoints = etcd.endpoints();
    let ls = start(&endpoints, None).await?;

    let mut holder = EtcdctlLock::start(&endpoints, "/locks/job", 5).await?;
    let first = holder.wait_acquired(WAIT).await?;
    // The waiters queue one after the other (two etcdctl processes started together may
    // queue in either order).
    let mut second = EtcdctlLock::start(&endpoints, "/locks/job", 2).await?;
    eventually(WAIT, "the second key queued", async || {
        Ok((queue(&endpoints, "/locks/job").await?.len() == 2).then_some(()))
    })
    .await?;
    let mut third = EtcdctlLock::start(&endpoints, "/locks/job", 5).await?;
    let order = eventually(WAIT, "three keys queued", async || {
        let order = queue(&endpoints, "/locks/job").await?;
        Ok((order.len() == 3).then_some(order))
    })
    .await?;
    ensure!(order[0] == first, "{order:?}");
    let lock = ls
        .wait_lock(
            "e",
            "/locks/job",
            WAIT,
            "holder and two waiters in order",
            |l| nodes(l) == (vec![first.clone()], order[1..].to_vec()),
        )
        .await?;
    ensure!(lock.recipe == "etcd_mutex", "{lock:?}");
    ensure!(lock.backend == lockscope_model::wire::Backend::Etcd);
    // Each waiter watches the key just before it: no herd.
    ensure!(lock.waiters[0].watches.as_deref() == Some(first.as_str()));
    ensure!(lock.waiters[1].watches.as_deref() == Some(order[1].as_str()));
    ensure!(!lock.herd && lock.watchers == 1, "{lock:?}");
    // The holder's session is its lease, in hex, as etcdctl names the key.
    let lease = first.rsplit('/').next().context("lease part")?.to_string();
    ensure!(lock.holders[0].session == lease, "{lock:?}");
    let holder_lease = lock.holders[0].lease.clone().context("holder lease")?;
    ensure!(
        holder_lease.id == lease && holder_lease.granted_s == Some(5),
        "{lease} {lock:?}"
    );
    ensure!(lock.waiters[0].lease.as_ref().and_then(|l| l.granted_s) == Some(2));
    ensure!(lock.ttl_ms.is_some_and(|t| t <= 5_000), "{lock:?}");
    ensure!(
        lock.holders[0]
            .version
            .as_deref()
            .is_some_and(|v| v.contains('/')),
        "{lock:?}"
    );
    ls.wait_sessions(WAIT, "leases as sessions", |sessions| {
        sessions.iter().any(|s| {
            s.source == "e"
                && s.session == lease
                && s.holds.len() == 1
                && s.timeout_ms == Some(5_000)
        }) && sessions.iter().filter(|s| s.source == "e").count() == 3
    })
    .await?;

    // The holder unlocks (SIGTERM: etcdctl deletes its key; its lease lives on): released.
    holder.release().await?;
    let next = second.wait_acquired(WAIT).await?;
    ensure!(next == order[1], "{next} {order:?}");
    ls.wait_lock("e", "/locks/job", WAIT, "the second holds", |l| {
        nodes(l) == (vec![order[1].clone()], vec![order[2].clone()])
    })
    .await?;

    // The second is killed: its key stays until its 2 s lease runs out; then the third holds.
    second.crash().await?;
    third.wait_acquired(WAIT).await?;
    let detail = ls
        .wait_detail("e", "/locks/job", WAIT, "two releases with causes", |d| {
            d.lock.holders.first().map(|h| h.node.as_str()) == Some(order[2].as_str())
                && d.events.iter().filter(|e| e.kind == "released").count() == 2
        })
        .await?;
    let causes: Vec<(String, Option<ReleaseCause>)> = detail
        .events
        .iter()
        .filter(|e| e.kind == "released")
        .map(|e| (e.node.clone(), e.cause))
        .collect();
    ensure!(
        causes
            == vec![
                (first.clone(), Some(ReleaseCause::Released)),
                (order[1].clone(), Some(ReleaseCause::LeaseExpired)),
            ],
        "{causes:?}"
    );
    ensure!(detail.lock.acquisitions == 3, "{:?}", detail.lock);
    let metrics = ls.metrics().await?;
    for series in [
        "lockscope_lock_releases_total{source=\"e\",lock=\"/locks/job\",cause=\"released\"} 1",
        "lockscope_lock_releases_total{source=\"e\",lock=\"/locks/job\",cause=\"lease_expired\"} 1",
        "lockscope_locks{source=\"e\",recipe=\"etcd_mutex\"} 1",
    ] {
        ensure!(metrics.contains(series), "{series} not in\n{metrics}");
    }
    ensure!(
        metrics.contains("lockscope_collector_events_total{source=\"e\",backend=\"etcd\"}"),
        "{metrics}"
    );
    third.release().await?;
    // A mutex with no keys left is gone; its page stays.
    ls.wait_detail("e", "/locks/job", WAIT, "gone once free", |d| d.gone)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_lease_keys_and_guarded_force_release() -> Result<()> {
    let etcd = EtcdServer::start().await?;
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir()?;
    let ls = start(&endpoints, Some(dir.path())).await?;

    // An election: the leader's key holds its proposal.
    let mut leader = EtcdctlElect::start(&endpoints, "/locks/leader", "node-a").await?;
    leader.wait_acquired(WAIT).await?;
    let mut follower = EtcdctlElect::start(&endpoints, "/locks/leader", "node-b").await?;
    let election = ls
        .wait_lock("e", "/locks/leader", WAIT, "leader and a follower", |l| {
            l.holders.len() == 1 && l.waiters.len() == 1
        })
        .await?;
    ensure!(election.recipe == "etcd_election", "{election:?}");

    // A single-key lease lock with a binary owner.
    let owner = [0x00, 0x9f, b'o', b'k', 0xff];
    let single = lease_key_lock(&endpoints, "/locks/single", &owner, 30)
        .await?
        .context("the key was free")?;
    ensure!(
        lease_key_lock(&endpoints, "/locks/single", b"other", 30)
            .await?
            .is_none(),
        "a second owner must not get the key"
    );
    let lock = ls
        .wait_lock("e", "/locks/single", WAIT, "the lease key", |l| {
            l.holders.len() == 1
        })
        .await?;
    ensure!(lock.recipe == "etcd_lease_key", "{lock:?}");
    ensure!(
        lock.holders[0].session == lease_hex(single.lease()),
        "{lock:?}"
    );
    ensure!(
        lock.flags.iter().any(|f| f == "waiters_not_stored"),
        "{lock:?}"
    );
    let seen = lock.holders[0].version.clone().context("version")?;

    // The owner lets go and takes the key again (a new create_revision): the operator's view
    // is stale → 409, and nothing changes.
    let id = lock_id("e", "/locks/single");
    ensure!(single.release().await?, "the owner's release");
    let again = lease_key_lock(&endpoints, "/locks/single", &owner, 30)
        .await?
        .context("retake")?;
    let current = ls
        .wait_lock("e", "/locks/single", WAIT, "the retaken key", |l| {
            l.holders
                .first()
                .and_then(|h| h.version.as_deref())
                .is_some_and(|v| v != seen)
        })
        .await?;
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": lock.holders[0].node, "version": seen, "reason": "stale view"}),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    ensure!(
        keys(&endpoints, "/locks/single").await?.len() == 1,
        "a refused release deleted the key"
    );
    // Without a version: refused too (etcd needs one).
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": lock.holders[0].node, "reason": "no version"}),
    )
    .await?;
    ensure!(status != 200, "{status} {body}");
    let version = current.holders[0].version.clone().context("version")?;
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": current.holders[0].node, "version": version, "reason": "stuck"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(keys(&endpoints, "/locks/single").await?.is_empty());
    let detail = ls
        .wait_detail("e", "/locks/single", WAIT, "a forced release", |d| {
            d.events
                .iter()
                .any(|e| e.cause == Some(ReleaseCause::Forced))
        })
        .await?;
    ensure!(detail.gone, "{detail:?}");
    drop(again);

    // Force release of the election leader: the follower's own watch wakes it.
    let leader_now = ls
        .wait_lock("e", "/locks/leader", WAIT, "leader", |l| {
            l.holders.len() == 1
        })
        .await?;
    let (status, body) = release(
        &ls,
        &lock_id("e", "/locks/leader"),
        json!({
            "holder": leader_now.holders[0].node,
            "version": leader_now.holders[0].version,
            "reason": "hung leader",
        }),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    follower.wait_acquired(WAIT).await?;
    // Every attempt is audited.
    let (_, audit) = ls.get_json("/api/v1/audit?limit=100").await?;
    let outcomes: Vec<&str> = audit["audit"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["outcome"].as_str()).collect())
        .unwrap_or_default();
    ensure!(
        outcomes.iter().filter(|o| **o == "released").count() == 2
            && outcomes.iter().filter(|o| **o == "holder_changed").count() == 1
            && outcomes.len() == 4,
        "{audit}"
    );
    drop(leader);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_under_churn_leaves_the_model_equal_to_etcd() -> Result<()> {
    let mut cluster = EtcdCluster::start(3).await?;
    let endpoints = cluster.endpoints();
    let ls = start(&endpoints, None).await?;
    // Churn: clients take and give back a few locks while a member dies and comes back.
    let mut rounds = 0;
    let mut killed = false;
    for round in 0..6 {
        let mut clients = Vec::new();
        for i in 0..3 {
            clients.push(EtcdctlLock::start(&endpoints, &format!("/locks/churn-{i}"), 5).await?);
        }
        for client in &mut clients {
            client.wait_acquired(WAIT).await?;
        }
        if round == 2 {
            cluster.kill(0);
            killed = true;
        }
        if round == 4 {
            cluster.restart(0).await?;
        }
        for mut client in clients {
            client.release().await?;
        }
        rounds += 1;
    }
    ensure!(killed && rounds == 6);
    // Two holders stay.
    let mut a = EtcdctlLock::start(&endpoints, "/locks/stay-a", 10).await?;
    let mut b = EtcdctlLock::start(&endpoints, "/locks/stay-b", 10).await?;
    let key_a = a.wait_acquired(WAIT).await?;
    let key_b = b.wait_acquired(WAIT).await?;
    // The model equals a fresh read: exactly these two locks, held by these keys.
    let fresh = keys(&endpoints, "/locks").await?;
    ensure!(
        fresh.len() == 2,
        "{:?}",
        fresh.iter().map(|k| k.key_str()).collect::<Vec<_>>()
    );
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let shown: Vec<(String, Vec<String>)> = ls
            .locks()
            .await?
            .into_iter()
            .filter(|l| l.source == "e")
            .map(|l| {
                (
                    l.path.clone(),
                    l.holders.iter().map(|h| h.node.clone()).collect(),
                )
            })
            .collect();
        let want = vec![
            ("/locks/stay-a".to_string(), vec![key_a.clone()]),
            ("/locks/stay-b".to_string(), vec![key_b.clone()]),
        ];
        if shown == want {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "model {shown:?} != etcd {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sources = ls.sources().await?;
    ensure!(sources.iter().all(|s| s.up && s.synced), "{sources:?}");
    a.release().await?;
    b.release().await?;
    Ok(())
}
