//! Faults of the sources themselves, on real servers: lockscope's own ZooKeeper session expiring
//! on the ensemble under churn (through a blackholing proxy), a Redis Cluster failover under
//! churn (a manual `CLUSTER FAILOVER` and a killed master), and a Cluster slot migration of a slot
//! holding lock keys. After each, lockscope's model must equal a fresh read of the servers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, ensure, Context, Result};
use lockscope::backends::zookeeper::fourlw;
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_tests::churn::{churn_progress, zk_churn};
use lockscope_tests::harness::{eventually, zk_source, Lockscope};
use lockscope_tests::recipes::{SeedClient, SeedRecipe};
use lockscope_tests::support::proxy::TcpProxy;
use lockscope_tests::support::redis::{ClusterClient, RedisCluster};
use lockscope_tests::support::zk::{
    four_letter, fresh_locks, sessions_via, shown_locks, ZkEnsemble,
};
use lockscope_tests::unique_root;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(30);

/// Sends lockscope's collector log to the test's captured output, shown when a test fails;
/// `RUST_LOG` overrides it.
fn trace() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("lockscope::collect=info,lockscope::aggregate=info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_test_writer()
        .try_init();
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper: lockscope's own session expires.
// ---------------------------------------------------------------------------------------------

/// The session timeout lockscope asks for in the expiry test: short, so the blackhole that
/// makes the ensemble expire it is short too (the test ensembles allow 1 s to 10 s).
const OWN_SESSION: Duration = Duration::from_secs(2);

/// The sessions the leader's session tracker lists (`dump`): every live session.
async fn live_sessions(zk: &ZkEnsemble) -> Result<BTreeSet<i64>> {
    let leader = zk.leader().await?;
    let text = four_letter(zk.client_addr(leader), "dump").await?;
    Ok(fourlw::parse_dump_sessions(&text).into_keys().collect())
}

async fn resyncs(ls: &Lockscope) -> Result<f64> {
    ls.metric("lockscope_source_resyncs_total{source=\"zk\"}")
        .await?
        .ok_or_else(|| anyhow!("no resync count for source zk"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_session_expiry_under_churn_rebuilds_the_client_and_resyncs() -> Result<()> {
    trace();
    let zk = ZkEnsemble::start(3).await?;
    // lockscope reaches every member only through its own proxy, so a blackhole of all three
    // cuts it off the ensemble while the lock clients go on straight to the members.
    let mut proxies = Vec::new();
    for i in 0..zk.members() {
        proxies.push(TcpProxy::start(zk.client_addr(i)).await?);
    }
    let via_proxies = proxies
        .iter()
        .map(|p| p.addr().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let root = unique_root("own-expiry");
    let mut source = zk_source("zk", &via_proxies, &[&root]);
    source.session_timeout = OWN_SESSION;
    let ls = Lockscope::start(Config {
        sources: section("zookeeper", vec![source]),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;

    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let steady = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let _steady =
        lockscope_tests::recipes::lock(&steady, &format!("{root}/steady"), &recipe).await?;
    let queued = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let _queued = queued.enqueue(&format!("{root}/steady"), &recipe).await?;
    // Released while lockscope is cut off: the model must drop it.
    let doomed_path = format!("{root}/doomed");
    let doomed = lockscope_tests::recipes::lock(&steady, &doomed_path, &recipe).await?;
    let done = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workers = zk_churn(
        zk.connect_string(),
        root.clone(),
        4,
        3,
        done.clone(),
        stop_rx,
    );
    ls.wait_lock(
        "zk",
        &doomed_path,
        WAIT,
        "lockscope sees the doomed lock",
        |l| l.holders.len() == 1,
    )
    .await?;
    ls.wait_lock("zk", &format!("{root}/steady"), WAIT, "steady queue", |l| {
        l.holders.len() == 1 && l.waiters.len() == 1
    })
    .await?;

    // lockscope's session, as the ensemble names it (exactly one session comes through the
    // proxies: lockscope's client; the four-letter-word polls have none).
    let old = eventually(
        WAIT,
        "lockscope's one session through the proxies",
        async || {
            let sessions = sessions_via(&zk, &proxies).await?;
            Ok((sessions.len() == 1)
                .then(|| sessions.into_iter().next())
                .flatten())
        },
    )
    .await?;
    let resyncs_before = resyncs(&ls).await?;
    let churned_before = done.load(Ordering::Relaxed);

    for proxy in &proxies {
        proxy.blackhole();
    }
    // lockscope notices it is cut off (its client misses the ensemble's answers) ...
    eventually(WAIT, "lockscope shows the source down", async || {
        let sources = ls.sources().await?;
        Ok(sources.first().is_some_and(|s| !s.up).then_some(()))
    })
    .await?;
    // ... and no pings reach the ensemble: the leader expires the session after its timeout.
    eventually(WAIT, "the leader drops lockscope's session", async || {
        let live = live_sessions(&zk).await?;
        Ok((!live.contains(&old)).then_some(()))
    })
    .await?;
    // Changes lockscope cannot hear about: the doomed lock goes, the churn goes on, a new lock
    // is taken.
    doomed.release(&steady).await?;
    let born_path = format!("{root}/born");
    let _born = lockscope_tests::recipes::lock(&steady, &born_path, &recipe).await?;
    churn_progress(
        &done,
        churned_before,
        10,
        WAIT,
        "the churn goes on while lockscope is cut off",
    )
    .await?;
    for proxy in &proxies {
        proxy.pass();
    }

    // lockscope notices the expiry, builds a new client (a new session), re-registers its
    // watches and re-reads the tree.
    let new = eventually(
        WAIT,
        "lockscope connected again on a new session",
        async || {
            let sessions = sessions_via(&zk, &proxies).await?;
            Ok(match sessions.into_iter().collect::<Vec<_>>()[..] {
                [one] if one != old => Some(one),
                _ => None,
            })
        },
    )
    .await?;
    ensure!(new != old);
    let mut last = String::new();
    eventually(WAIT, "the source is up and resynced", async || {
        let sources = ls.sources().await?;
        let count = resyncs(&ls).await?;
        let up = sources.first().is_some_and(|s| s.up && s.error.is_none());
        last = format!("{sources:?}, resyncs {count} (before the expiry {resyncs_before})");
        Ok((up && count > resyncs_before).then_some(()))
    })
    .await
    .with_context(|| last.clone())?;
    ls.wait_lock(
        "zk",
        &born_path,
        WAIT,
        "the lock taken while cut off",
        |l| l.holders.len() == 1,
    )
    .await?;

    // The watches are registered again: a lock taken now shows by its event, with no resync
    // in between (should a reconnect resync meanwhile, the proof is tried again, a few times).
    let mut by_event = false;
    for attempt in 0..3 {
        let before = resyncs(&ls).await?;
        let path = format!("{root}/after-{attempt}");
        let _after = lockscope_tests::recipes::lock(&steady, &path, &recipe).await?;
        ls.wait_lock("zk", &path, WAIT, "a lock taken after the recovery", |l| {
            l.holders.len() == 1
        })
        .await?;
        if resyncs(&ls).await? == before {
            by_event = true;
            break;
        }
    }
    ensure!(
        by_event,
        "every lock taken after the recovery came with a resync"
    );
    stop_tx.send_replace(true);
    for worker in workers {
        worker.await?;
    }
    let mut last = String::new();
    let want = eventually(WAIT, "the model equals a fresh read", async || {
        let want = fresh_locks(&zk.connect_string(), &root).await?;
        let got = shown_locks(&ls).await?;
        last = format!("shown {got:?}\n fresh {want:?}");
        Ok((want == got).then_some(want))
    })
    .await
    .with_context(|| last.clone())?;
    ensure!(want.contains_key(&format!("{root}/steady")), "{want:?}");
    ensure!(want.contains_key(&born_path), "{want:?}");
    ensure!(!want.contains_key(&doomed_path), "{want:?}");
    // The ensemble expired the session (not a close): its leader says so in its log.
    let wanted = format!("Expiring session 0x{old:x},");
    let logged = (0..zk.members())
        .any(|i| std::fs::read_to_string(zk.log_path(i)).is_ok_and(|log| log.contains(&wanted)));
    ensure!(logged, "no member logged {wanted:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: failovers and a slot migration.
// ---------------------------------------------------------------------------------------------

/// How often lockscope re-scans every master (and re-reads `CLUSTER NODES`) in the Cluster
/// tests: short, so the model must be right soon after the cluster settles.
const RECONCILE: Duration = Duration::from_secs(1);
/// How long the model may take to equal a fresh read once the cluster has settled and the
/// clients stopped: a few reconcile intervals (master discovery, then each new member's scan),
/// with room for a busy 2-core machine.
const CONVERGE: Duration = Duration::from_secs(15);
/// TTL of the locks the churn takes: far longer than a test, so no lock expires while the
/// model and a fresh read are compared (a client that dies mid-way leaves its lock behind,
/// and that lock is part of the truth).
const CHURN_TTL_MS: u64 = 120_000;

/// Token locks by key (without the leading `/`): key → token.
type TokenLocks = BTreeMap<String, String>;

fn cluster_source(cluster: &RedisCluster) -> RedisSourceConfig {
    let mut source = RedisSourceConfig::new("cl", &cluster.urls()[0], &["lock:*"]);
    source.cluster = true;
    source.watch.reconcile_interval = RECONCILE;
    source
}

/// What every master holds now: `SCAN … MATCH lock:*` and `GET` of each key, on every server
/// that serves slots (during a migration the slot's keys are split between source and target,
/// each key on one of them).
async fn fresh_redis_locks(cluster: &RedisCluster) -> Result<TokenLocks> {
    let mut out = BTreeMap::new();
    for master in cluster.masters().await? {
        let mut conn = master.connection().await?;
        let mut cursor: u64 = 0;
        // Bounded: a SCAN ends within a few hundred calls on these keyspaces.
        for _ in 0..10_000 {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("lock:*")
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            for key in keys {
                // `ASKING` first: a key in a slot being imported is read where it is now.
                let (token,): (Option<String>,) = redis::pipe()
                    .cmd("ASKING")
                    .ignore()
                    .cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await?;
                if let Some(token) = token {
                    ensure!(
                        out.insert(key.clone(), token).is_none(),
                        "{key} is on two masters"
                    );
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(out)
}

async fn shown_redis_locks(ls: &Lockscope) -> Result<TokenLocks> {
    Ok(ls
        .locks()
        .await?
        .into_iter()
        .filter(|l| l.source == "cl" && !l.holders.is_empty())
        .map(|l| {
            let key = l.path.trim_start_matches('/').to_string();
            let token = l
                .holders
                .first()
                .map(|h| h.node.clone())
                .unwrap_or_default();
            (key, token)
        })
        .collect())
}

/// Waits until lockscope's model equals a fresh read of every master; answers how long that
/// took. Fails after [`CONVERGE`] with both sides' differences.
async fn converges(ls: &Lockscope, cluster: &RedisCluster, what: &str) -> Result<Duration> {
    let started = Instant::now();
    let mut last = String::new();
    eventually(CONVERGE, what, async || {
        let want = fresh_redis_locks(cluster).await?;
        let got = shown_redis_locks(ls).await?;
        if want == got {
            return Ok(Some(started.elapsed()));
        }
        let missing: Vec<_> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .collect();
        let invented: Vec<_> = got
            .iter()
            .filter(|(k, v)| want.get(*k) != Some(v))
            .collect();
        last = format!(
            "the model differs from a fresh read:\n missing or different: {missing:?}\n \
             invented or stale: {invented:?}\n sources: {:?}",
            ls.sources().await?
        );
        Ok(None)
    })
    .await
    .with_context(|| last.clone())
}

/// Runs `clients` token-lock clients (`SET key token NX PX`, then the compare-and-delete
/// release) over `keys` through [`ClusterClient`]s that follow the cluster through failovers
/// and migrations, until `stop`; `done` counts completed acquire/release pairs.
fn redis_churn(
    seeds: Vec<u16>,
    keys: Vec<String>,
    clients: usize,
    done: Arc<AtomicU64>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|i| {
            let (seeds, keys, done, stop) =
                (seeds.clone(), keys.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                let mut client = ClusterClient::new(seeds);
                let mut round = 0usize;
                while !*stop.borrow() {
                    round += 1;
                    let key = &keys[(i * 7 + round) % keys.len()];
                    let token = format!("c{i}-{round}");
                    let attempt = async {
                        let mut set = redis::cmd("SET");
                        set.arg(key)
                            .arg(&token)
                            .arg("NX")
                            .arg("PX")
                            .arg(CHURN_TTL_MS);
                        let taken: Option<String> = client.query(key.as_bytes(), &set).await?;
                        if taken.is_none() {
                            return anyhow::Ok(false);
                        }
                        // The workload holds each lock a little while before releasing it.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        let mut release = redis::cmd("EVAL");
                        release.arg(COMPARE_AND_DELETE).arg(1).arg(key).arg(&token);
                        let _: i64 = client.query(key.as_bytes(), &release).await?;
                        Ok(true)
                    };
                    match tokio::time::timeout(Duration::from_secs(5), attempt).await {
                        Ok(Ok(true)) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Ok(false)) => {}
                        // A failover or a dead master: the client finds the cluster again after
                        // a pause (the workload's backoff, not a wait for anything).
                        _ => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
        })
        .collect()
}

/// The token-lock release every client library uses (compare, then delete).
const COMPARE_AND_DELETE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// Keys spread over every master's slots.
fn churn_keys() -> Vec<String> {
    (0..12).map(|n| format!("lock:f{n}")).collect()
}

/// Takes a long-held token lock on each of `keys` (token `steady-<key>`) through `client`.
async fn hold(client: &mut ClusterClient, keys: &[String]) -> Result<TokenLocks> {
    let mut held = BTreeMap::new();
    for key in keys {
        let token = format!("steady-{key}");
        let mut set = redis::cmd("SET");
        set.arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(CHURN_TTL_MS);
        let taken: Option<String> = client.query(key.as_bytes(), &set).await?;
        ensure!(taken.is_some(), "{key} was taken already");
        held.insert(key.clone(), token);
    }
    Ok(held)
}

/// Every lock of `held` is in `locks` with its token.
fn all_held(held: &TokenLocks, locks: &TokenLocks) -> bool {
    held.iter().all(|(k, v)| locks.get(k) == Some(v))
}

#[derive(Clone, Copy, Debug)]
enum Failover {
    /// `CLUSTER FAILOVER` on a replica: a coordinated handover, nothing lost.
    Manual,
    /// SIGKILL of a master; its replica is elected once the others mark it failed.
    MasterKilled,
}

async fn failover_under_churn(kind: Failover) -> Result<()> {
    trace();
    let mut cluster = RedisCluster::start_with_replicas(3, 1).await?;
    let ls = Lockscope::start(Config {
        sources: section("redis", vec![cluster_source(&cluster)]),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    // The master that fails over (not the source's seed, nodes[0]) and its replica.
    let (master, replica) = (1, 1);

    // Long-held locks on every master: they must come through the failover intact.
    let mut client = ClusterClient::new(cluster.ports());
    let steady_keys: Vec<String> = (0..9).map(|n| format!("lock:steady{n}")).collect();
    let held = hold(&mut client, &steady_keys).await?;
    let on_failing: Vec<&String> = {
        let mut keys = Vec::new();
        for key in held.keys() {
            if cluster.owner_of(key.as_bytes()).await?.port() == cluster.nodes[master].port() {
                keys.push(key);
            }
        }
        keys
    };
    ensure!(
        !on_failing.is_empty(),
        "no steady lock on the failing master"
    );
    eventually(WAIT, "lockscope shows the steady locks", async || {
        Ok(all_held(&held, &shown_redis_locks(&ls).await?).then_some(()))
    })
    .await?;
    // The replica must have them before its master dies (replication is asynchronous): read
    // them on the replica itself (`READONLY`).
    let mut on_replica = cluster.replicas[replica].connection().await?;
    redis::cmd("READONLY")
        .query_async::<()>(&mut on_replica)
        .await?;
    eventually(WAIT, "the replica has the steady locks", async || {
        for key in &on_failing {
            let token: Option<String> = redis::cmd("GET")
                .arg(*key)
                .query_async(&mut on_replica)
                .await?;
            if token.as_ref() != held.get(*key) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;

    let done = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workers = redis_churn(cluster.ports(), churn_keys(), 4, done.clone(), stop_rx);
    let before = churn_progress(&done, 0, 20, WAIT, "churn before the failover").await?;

    let promoted = cluster.replicas[replica].port();
    let failed_at = Instant::now();
    match kind {
        Failover::Manual => cluster.failover(replica).await?,
        Failover::MasterKilled => {
            cluster.nodes[master].kill();
            cluster.wait_serving(promoted, WAIT).await?;
        }
    }
    let settled_in = failed_at.elapsed();
    ensure!(
        cluster.owner_of(on_failing[0].as_bytes()).await?.port() == promoted,
        "the replica does not serve its master's slots"
    );
    churn_progress(&done, before, 20, WAIT, "churn after the failover").await?;
    stop_tx.send_replace(true);
    for worker in workers {
        worker.await?;
    }

    let took = converges(&ls, &cluster, &format!("{kind:?} failover")).await?;
    let truth = fresh_redis_locks(&cluster).await?;
    ensure!(
        all_held(&held, &truth),
        "a steady lock was lost in the failover: {truth:?}"
    );
    let sources = eventually(WAIT, "the source is up on the new masters", async || {
        let sources = ls.sources().await?;
        Ok(sources
            .first()
            .is_some_and(|s| s.up && s.synced)
            .then_some(sources))
    })
    .await?;
    println!(
        "{kind:?} failover: cluster settled in {settled_in:?}; model equal to a fresh read \
         {took:?} after the churn stopped ({} pairs); {sources:?}",
        done.load(Ordering::Relaxed)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_manual_failover_under_churn_converges() -> Result<()> {
    failover_under_churn(Failover::Manual).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_killed_under_churn_converges() -> Result<()> {
    failover_under_churn(Failover::MasterKilled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_slot_migration_with_locks_converges() -> Result<()> {
    trace();
    let cluster = RedisCluster::start(3).await?;
    let ls = Lockscope::start(Config {
        sources: section("redis", vec![cluster_source(&cluster)]),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    // Every key with the hash tag `{mig}` is in one slot: the one that moves.
    let slot = lockscope_model::redis::hash_slot(b"{mig}");
    let mut client = ClusterClient::new(cluster.ports());
    let steady_keys: Vec<String> = (0..10).map(|n| format!("lock:{{mig}}:s{n}")).collect();
    let held = hold(&mut client, &steady_keys).await?;
    eventually(WAIT, "lockscope shows the locks in the slot", async || {
        Ok(all_held(&held, &shown_redis_locks(&ls).await?).then_some(()))
    })
    .await?;
    // The churn takes locks in the moving slot too, following ASK while it moves.
    let mut keys = churn_keys();
    keys.extend((0..6).map(|n| format!("lock:{{mig}}:c{n}")));
    let done = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workers = redis_churn(cluster.ports(), keys.clone(), 4, done.clone(), stop_rx);
    let before = churn_progress(&done, 0, 20, WAIT, "churn before the migration").await?;

    let from = cluster.owner_of_slot(slot).await?.port();
    let to = cluster
        .nodes
        .iter()
        .map(|n| n.port())
        .find(|p| *p != from)
        .ok_or_else(|| anyhow!("no other master"))?;
    let migration = cluster.start_migration(slot, to).await?;
    let moved = migration.move_keys(5).await?;
    ensure!(moved > 0, "nothing to move in slot {slot}");
    let before = churn_progress(&done, before, 20, WAIT, "churn while the slot is split").await?;
    // Halfway: the slot's keys are on two masters. With the clients paused the model must
    // equal a fresh read of both.
    stop_tx.send_replace(true);
    for worker in workers {
        worker.await?;
    }
    ensure!(migration.keys_left().await? > 0, "the slot is not split");
    let halfway = converges(&ls, &cluster, "slot split between two masters").await?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workers = redis_churn(cluster.ports(), keys, 4, done.clone(), stop_rx);
    churn_progress(
        &done,
        before,
        20,
        WAIT,
        "churn again while the slot is split",
    )
    .await?;
    // The clients stop before the handover: a key written to the source after its last
    // MIGRATE would be stranded there (redis-cli's resharding has the same window).
    stop_tx.send_replace(true);
    for worker in workers {
        worker.await?;
    }
    migration.finish(&cluster).await?;
    ensure!(cluster.owner_of_slot(slot).await?.port() == to);
    let after = converges(&ls, &cluster, "slot migrated").await?;
    let truth = fresh_redis_locks(&cluster).await?;
    ensure!(
        all_held(&held, &truth),
        "a lock was lost in the migration: {truth:?}"
    );
    // A change after the migration shows by its notification on the new owner.
    let mut set = redis::cmd("SET");
    set.arg("lock:{mig}:late")
        .arg("late")
        .arg("NX")
        .arg("PX")
        .arg(CHURN_TTL_MS);
    let taken: Option<String> = client.query(b"lock:{mig}:late", &set).await?;
    ensure!(taken.is_some());
    ls.wait_lock(
        "cl",
        "/lock:{mig}:late",
        WAIT,
        "a lock taken in the moved slot",
        |l| l.holders.first().map(|h| h.node.as_str()) == Some("late"),
    )
    .await?;
    println!(
        "slot {slot} moved from port {from} to {to}: model equal to a fresh read {halfway:?} \
         after pausing halfway and {after:?} after the handover ({} pairs); {:?}",
        done.load(Ordering::Relaxed),
        ls.sources().await?
    );
    Ok(())
}
