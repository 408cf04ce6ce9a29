//! etcd through the backend boundary, against real etcd 3.4 and the Go client's own recipes run
//! by `etcdctl`: mutex holders and ordered waiters with their leases, release causes
//! (`released` when a key goes under a live lease, `lease_expired` when a killed holder's lease
//! runs out), elections, single-key lease locks with binary owners, leases as sessions, the
//! guarded force release (a txn on `create_revision`/`mod_revision`; a stale version is
//! refused and changes nothing), a member killed under churn, and a watch revision compacted
//! while lockscope was cut off (a full read again, issue 12).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::etcd::EtcdSourceConfig;
use lockscope::config::{section, Config};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{LockView, ReleaseCause};
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::support::etcd::{
    compact, keys, lease_hex, lease_key_lock, put, EtcdCluster, EtcdServer, EtcdctlElect,
    EtcdctlLock,
};
use lockscope_tests::support::proxy::TcpProxy;
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
        sources: section("etcd", vec![source(endpoints)]),
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
    ls.release(id, Some(TOKEN), &body).await
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
    // Who is who: each key's value, the proposal `etcdctl elect` put there.
    ensure!(
        election.holders[0].identity.as_deref() == Some("node-a")
            && election.waiters[0].identity.as_deref() == Some("node-b"),
        "{election:?}"
    );

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
    // The owner, in the key's value: binary bytes as `\xNN`.
    ensure!(
        lock.holders[0].identity.as_deref() == Some("\0\\x9fok\\xff"),
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
    let want = vec![
        ("/locks/stay-a".to_string(), vec![key_a.clone()]),
        ("/locks/stay-b".to_string(), vec![key_b.clone()]),
    ];
    let mut shown: Vec<(String, Vec<String>)> = Vec::new();
    eventually(WAIT, "the model equals etcd", async || {
        shown = ls
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
        Ok((shown == want).then_some(()))
    })
    .await
    .with_context(|| format!("model {shown:?} != etcd {want:?}"))?;
    let sources = ls.sources().await?;
    ensure!(sources.iter().all(|s| s.up && s.synced), "{sources:?}");
    a.release().await?;
    b.release().await?;
    Ok(())
}

/// Every lock under `/locks` as etcd has it now, read fresh: lock path → (holder keys, waiter
/// keys in order). Only the Go recipes' `<name>/<lease hex>` keys are used here, so the lowest
/// `create_revision` under a name holds and the rest wait in `create_revision` order.
async fn etcd_truth(endpoints: &[String]) -> Result<BTreeMap<String, (Vec<String>, Vec<String>)>> {
    let mut by_lock: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for kv in keys(endpoints, "/locks/").await? {
        let key = kv.key_str();
        let (lock, _) = key
            .rsplit_once('/')
            .with_context(|| format!("{key} is not <name>/<lease>"))?;
        by_lock
            .entry(lock.to_string())
            .or_default()
            .push((kv.create_revision, key.clone()));
    }
    Ok(by_lock
        .into_iter()
        .map(|(lock, mut queue)| {
            queue.sort();
            let mut keys = queue.into_iter().map(|(_, key)| key);
            let holders = keys.next().into_iter().collect();
            (lock, (holders, keys.collect()))
        })
        .collect())
}

/// What lockscope shows of source `e`, in the shape of [`etcd_truth`].
async fn shown(ls: &Lockscope) -> Result<BTreeMap<String, (Vec<String>, Vec<String>)>> {
    Ok(ls
        .locks()
        .await?
        .into_iter()
        .filter(|l| l.source == "e")
        .map(|l| (l.path.clone(), nodes(&l)))
        .collect())
}

/// Waits until lockscope's model equals a fresh read of etcd; answers the truth, or fails with
/// both sides as last seen.
async fn model_equals_etcd(
    ls: &Lockscope,
    endpoints: &[String],
    what: &str,
) -> Result<BTreeMap<String, (Vec<String>, Vec<String>)>> {
    let mut last = String::new();
    eventually(WAIT, what, async || {
        let want = etcd_truth(endpoints).await?;
        let got = shown(ls).await?;
        if got == want {
            return Ok(Some(want));
        }
        last = format!("lockscope {got:#?}\n etcd {want:#?}");
        Ok(None)
    })
    .await
    .with_context(|| last.clone())
}

/// `lockscope_lock_releases_total` of source `e`'s lock `lock`, every cause summed.
fn releases_counted(metrics: &str, lock: &str) -> f64 {
    let series = format!("lockscope_lock_releases_total{{source=\"e\",lock=\"{lock}\",");
    metrics
        .lines()
        .filter(|line| line.starts_with(&series))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn resyncs(ls: &Lockscope) -> Result<f64> {
    ls.metric("lockscope_source_resyncs_total{source=\"e\"}")
        .await?
        .context("no resync count for source e")
}

/// Waits until lockscope shows source `e` down (`false`) or up and synced (`true`).
async fn source_up(ls: &Lockscope, up: bool, what: &str) -> Result<()> {
    let mut last = Vec::new();
    eventually(WAIT, what, async || {
        let sources = ls.sources().await?;
        let seen = sources.iter().find(|s| s.name == "e").is_some_and(|s| {
            if up {
                s.up && s.synced
            } else {
                !s.up
            }
        });
        last = sources;
        Ok(seen.then_some(()))
    })
    .await
    .with_context(|| format!("last sources: {last:?}"))
}

/// Starts an `etcdctl lock` on `name` and waits until its key is queued behind `ahead` others.
async fn queue_behind(
    endpoints: &[String],
    name: &str,
    ahead: usize,
) -> Result<(EtcdctlLock, String)> {
    let client = EtcdctlLock::start(endpoints, name, 30).await?;
    let queued = eventually(WAIT, &format!("a key queued on {name}"), async || {
        let order = queue(endpoints, name).await?;
        Ok((order.len() == ahead + 1).then(|| order[ahead].clone()))
    })
    .await?;
    Ok((client, queued))
}

/// The collector's compaction path (issue 12), forced for real: lockscope watches etcd through a
/// proxy that cuts it off; while it is cut off, holders change, waiters leave and join, locks go
/// and new ones come; then etcd compacts its history past all of that, so the watch cannot
/// resume from lockscope's last revision and the collector must read everything again. A cut
/// without a compaction first shows that a reconnect alone resumes without a full read, so the
/// full read after the compaction is the compaction's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_compacted_while_cut_off_is_resynced_by_a_full_read() -> Result<()> {
    let etcd = EtcdServer::start().await?;
    // Lock clients talk to etcd directly; only lockscope goes through the proxy.
    let endpoints = etcd.endpoints();
    let proxy = TcpProxy::start(etcd.endpoint().parse()?).await?;
    let ls = start(&[proxy.addr().to_string()], None).await?;

    // Before the cut: a holder with two waiters that stays held, a holder with a waiter that
    // hands over, a holder that lets go, and an election leader that stays.
    let mut steady = EtcdctlLock::start(&endpoints, "/locks/steady", 30).await?;
    let steady_key = steady.wait_acquired(WAIT).await?;
    let (mut leaves, leaves_key) = queue_behind(&endpoints, "/locks/steady", 1).await?;
    let (mut stays, stays_key) = queue_behind(&endpoints, "/locks/steady", 2).await?;
    let mut handing = EtcdctlLock::start(&endpoints, "/locks/handover", 30).await?;
    let handing_key = handing.wait_acquired(WAIT).await?;
    let (mut taking, taking_key) = queue_behind(&endpoints, "/locks/handover", 1).await?;
    let mut doomed = EtcdctlLock::start(&endpoints, "/locks/doomed", 30).await?;
    let doomed_key = doomed.wait_acquired(WAIT).await?;
    let mut leader = EtcdctlElect::start(&endpoints, "/locks/leader", "node-a").await?;
    let leader_key = leader.wait_acquired(WAIT).await?;
    // A holder on a 2 s lease that will be killed while lockscope is cut off.
    let mut crashed = EtcdctlLock::start(&endpoints, "/locks/crashed", 2).await?;
    let crashed_key = crashed.wait_acquired(WAIT).await?;
    let before = model_equals_etcd(&ls, &endpoints, "the model before the cut").await?;
    ensure!(before.len() == 5, "{before:#?}");
    let steady_since = ls
        .lock("e", "/locks/steady")
        .await?
        .context("steady lock")?
        .holders[0]
        .since_ms;
    let bootstrap = resyncs(&ls).await?;
    ensure!(bootstrap == 1.0, "{bootstrap} resyncs after the bootstrap");

    // A cut with no compaction: the watch resumes after the last revision seen, no full read.
    proxy.blackhole();
    source_up(&ls, false, "lockscope shows the source down (first cut)").await?;
    let mut early = EtcdctlLock::start(&endpoints, "/locks/early", 30).await?;
    early.wait_acquired(WAIT).await?;
    proxy.pass();
    source_up(&ls, true, "lockscope up again (first cut)").await?;
    model_equals_etcd(&ls, &endpoints, "the model after a reconnect").await?;
    let resumed = resyncs(&ls).await?;
    ensure!(
        resumed == bootstrap,
        "a reconnect without a compaction read everything again ({resumed} resyncs)"
    );

    // The cut that matters. Once lockscope has lost its connection, nothing it has not seen
    // reaches it until the proxy passes again.
    proxy.blackhole();
    source_up(&ls, false, "lockscope shows the source down").await?;
    handing.release().await?;
    ensure!(taking.wait_acquired(WAIT).await? == taking_key);
    doomed.release().await?;
    early.release().await?;
    leaves.release().await?;
    let (mut joins, joins_key) = queue_behind(&endpoints, "/locks/steady", 2).await?;
    let mut born = EtcdctlLock::start(&endpoints, "/locks/born", 30).await?;
    let born_key = born.wait_acquired(WAIT).await?;
    let (mut born_waiter, born_waiter_key) = queue_behind(&endpoints, "/locks/born", 1).await?;
    let mut follower = EtcdctlElect::start(&endpoints, "/locks/leader", "node-b").await?;
    let follower_key = eventually(WAIT, "the follower queued", async || {
        let order = queue(&endpoints, "/locks/leader").await?;
        Ok((order.len() == 2).then(|| order[1].clone()))
    })
    .await?;
    // The killed holder's key goes when its lease runs out, unseen by lockscope.
    crashed.crash().await?;
    eventually(WAIT, "the killed holder's lease ran out", async || {
        Ok(queue(&endpoints, "/locks/crashed")
            .await?
            .is_empty()
            .then_some(()))
    })
    .await?;
    // Compact past every change above (the marker is outside the watched prefix).
    let revision = put(&endpoints, "/compaction-marker", b"x").await?;
    compact(&endpoints, revision).await?;

    proxy.pass();
    let after = model_equals_etcd(
        &ls,
        &endpoints,
        "the model equals etcd after the compaction",
    )
    .await?;
    // The truth is what the clients did while lockscope was cut off.
    let expected: BTreeMap<String, (Vec<String>, Vec<String>)> = [
        (
            "/locks/steady",
            (vec![steady_key], vec![stays_key, joins_key]),
        ),
        ("/locks/handover", (vec![taking_key.clone()], vec![])),
        ("/locks/leader", (vec![leader_key], vec![follower_key])),
        ("/locks/born", (vec![born_key], vec![born_waiter_key])),
    ]
    .into_iter()
    .map(|(path, queue)| (path.to_string(), queue))
    .collect();
    ensure!(
        after == expected,
        "etcd {after:#?}\n expected {expected:#?}"
    );
    source_up(&ls, true, "lockscope up and synced after the compaction").await?;
    // The full read was the compaction's: the reconnect without one did not read everything.
    let compacted = resyncs(&ls).await?;
    ensure!(
        compacted > resumed,
        "no full read after the compaction ({compacted} resyncs, {resumed} before)"
    );

    // The holders that held across the gap were never released.
    let detail = ls.detail("e", "/locks/steady").await?;
    ensure!(
        !detail.events.iter().any(|e| e.kind == "released"),
        "a release booked for a holder that held across the gap: {:#?}",
        detail.events
    );
    ensure!(
        detail.lock.holders[0].since_ms == steady_since && detail.lock.acquisitions == 1,
        "{:#?}",
        detail.lock
    );
    ensure!(
        detail
            .events
            .iter()
            .any(|e| e.kind == "left_queue" && e.node == leaves_key),
        "the waiter that left is not shown leaving: {:#?}",
        detail.events
    );
    let detail = ls.detail("e", "/locks/leader").await?;
    ensure!(
        !detail.events.iter().any(|e| e.kind == "released"),
        "a release booked for the leader that led across the gap: {:#?}",
        detail.events
    );
    // The holder that changed: its release, then the waiter's acquisition.
    let detail = ls.detail("e", "/locks/handover").await?;
    let released: Vec<(&str, Option<ReleaseCause>)> = detail
        .events
        .iter()
        .filter(|e| e.kind == "released")
        .map(|e| (e.node.as_str(), e.cause))
        .collect();
    ensure!(
        released == vec![(handing_key.as_str(), Some(ReleaseCause::Released))],
        "{:#?}",
        detail.events
    );
    ensure!(
        detail
            .events
            .iter()
            .any(|e| e.kind == "acquired" && e.node == taking_key),
        "{:#?}",
        detail.events
    );
    // The lock that went while lockscope was cut off is gone, with its holder's release.
    let detail = ls.detail("e", "/locks/doomed").await?;
    ensure!(
        detail.gone
            && detail
                .events
                .iter()
                .any(|e| e.kind == "released" && e.node == doomed_key),
        "{detail:#?}"
    );
    // Its events were compacted away, yet the full read tells why it went: its lease is gone.
    let detail = ls.detail("e", "/locks/crashed").await?;
    let released: Vec<_> = detail
        .events
        .iter()
        .filter(|e| e.kind == "released")
        .map(|e| (e.node.as_str(), e.cause))
        .collect();
    ensure!(
        detail.gone && released == vec![(crashed_key.as_str(), Some(ReleaseCause::LeaseExpired))],
        "{detail:#?}"
    );
    let metrics = ls.metrics().await?;
    for lock in ["/locks/steady", "/locks/leader"] {
        ensure!(
            releases_counted(&metrics, lock) == 0.0,
            "{lock}: a release counted\n{metrics}"
        );
    }
    ensure!(
        metrics.contains(
            "lockscope_lock_releases_total{source=\"e\",lock=\"/locks/handover\",cause=\"released\"} 1"
        ),
        "{metrics}"
    );

    for client in [
        &mut steady,
        &mut stays,
        &mut joins,
        &mut taking,
        &mut born,
        &mut born_waiter,
    ] {
        client.release().await?;
    }
    follower.release().await?;
    leader.release().await?;
    Ok(())
}
