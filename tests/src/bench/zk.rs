//! ZooKeeper sections: freshness against a bare persistent-watch client, requests per change
//! against a tree poller, scale (10,000 locks, 100,000 queued nodes, 50 stream clients), and the
//! cost of the four-letter words lockscope polls at 100,000 watches.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures::StreamExt;
use lockscope_model::wire::StreamEvent;
use serde_json::{json, Value};
use zookeeper_client as zkc;

use super::{p50_p99, percentile, row, rss_kib, sorted, start_lockscope, timed_get, Row};
use crate::harness::EventReader;
use crate::support::zk::{four_letter, ZkEnsemble};

pub(super) async fn client(connect: &str) -> Result<zkc::Client> {
    Ok(zkc::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await?)
}

pub(super) fn open() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all())
}

pub(super) fn ephemeral_seq() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all())
}

/// A steady churn rate, changes per second, for per-change costs of time-driven work.
pub const STEADY: f64 = 20.0;

/// lockscope's configuration for one ZooKeeper source `zk` watching `root` (label cap 500).
pub(super) fn config(connect: &str, root: &str) -> String {
    format!(
        "[metrics]\nmax_lock_labels = 500\n[[zookeeper]]\nname = \"zk\"\nconnect = \"{connect}\"\nroots = [\"{root}\"]\n"
    )
}

/// `sid → recved` over every member's `cons`.
async fn recved_by_session(zk: &ZkEnsemble) -> Result<HashMap<i64, u64>> {
    let mut out = HashMap::new();
    for i in 0..zk.members() {
        let text = four_letter(zk.client_addr(i), "cons").await?;
        for line in text.lines() {
            let field = |name: &str| {
                line.split([',', '(', ')'])
                    .find_map(|f| f.trim().strip_prefix(name))
                    .map(str::to_string)
            };
            if let (Some(sid), Some(recved)) = (field("sid=0x"), field("recved=")) {
                if let (Ok(sid), Ok(recved)) =
                    (u64::from_str_radix(&sid, 16), recved.parse::<u64>())
                {
                    *out.entry(sid as i64).or_default() += recved;
                }
            }
        }
    }
    Ok(out)
}

/// Freshness (create and release, lockscope vs a bare watcher) and requests per change (lockscope
/// vs a poller re-reading the tree often enough to be as fresh).
pub async fn freshness_and_cost(
    bin: &Path,
    dir: &Path,
    cycles: usize,
) -> Result<(Vec<Row>, Value)> {
    let zk = ZkEnsemble::start(3).await?;
    let connect = zk.connect_string();
    let root = "/bench-fresh";
    let containers = 50;
    let setup = client(&connect).await?;
    setup.create(root, b"", &open()).await?;
    for i in 0..containers {
        setup
            .create(&format!("{root}/lock{i}"), b"", &open())
            .await?;
    }
    let (lockscope, base, _) =
        start_lockscope(bin, dir, "zk-fresh", &config(&connect, root)).await?;
    let floor = client(&connect).await?;
    let mut floor_watch = floor
        .watch(root, zkc::AddWatchMode::PersistentRecursive)
        .await?;
    let churn = client(&connect).await?;
    let mut events = EventReader::connect(&base).await?;
    let (name, _) = events.next(Duration::from_secs(60)).await?;
    anyhow::ensure!(name == "snapshot");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let own: HashSet<i64> = [
        floor.session_id().0,
        churn.session_id().0,
        setup.session_id().0,
    ]
    .into();
    let before = recved_by_session(&zk).await?;
    let started = Instant::now();
    let (mut ls_lat, mut floor_lat) = (Vec::new(), Vec::new());
    for i in 0..cycles {
        let container = format!("{root}/lock{}", i % containers);
        let id = lockscope_model::id::lock_id("zk", &container);
        // Acquire: an ephemeral sequential node appears.
        let t0 = Instant::now();
        let (_, seq) = churn
            .create(&format!("{container}/lock-"), b"", &ephemeral_seq())
            .await?;
        let node = format!("{container}/lock-{:010}", seq.into_i64());
        let (f, l) = tokio::join!(
            async {
                loop {
                    let e = floor_watch.changed().await;
                    if e.path == node && e.event_type == zkc::EventType::NodeCreated {
                        return t0.elapsed();
                    }
                }
            },
            wait_lock(
                &mut events,
                &id,
                |l| l.holders.iter().any(|h| h.node == node),
                t0
            )
        );
        floor_lat.push(f.as_secs_f64() * 1000.0);
        ls_lat.push(l?.as_secs_f64() * 1000.0);
        // Release: the node goes.
        let t0 = Instant::now();
        churn.delete(&node, None).await?;
        let (f, l) = tokio::join!(
            async {
                loop {
                    let e = floor_watch.changed().await;
                    if e.path == node && e.event_type == zkc::EventType::NodeDeleted {
                        return t0.elapsed();
                    }
                }
            },
            wait_gone(&mut events, &id, &node, t0)
        );
        floor_lat.push(f.as_secs_f64() * 1000.0);
        ls_lat.push(l?.as_secs_f64() * 1000.0);
    }
    let window = started.elapsed();
    let after = recved_by_session(&zk).await?;
    let changes = (cycles * 2) as f64;
    let lockscope_requests: u64 = after
        .iter()
        .filter(|(sid, _)| !own.contains(sid))
        .map(|(sid, n)| n.saturating_sub(before.get(sid).copied().unwrap_or(0)))
        .sum();
    // The ensemble poll: mntr, cons, wchs, wchp on each of 3 members, dump on the leader, every
    // poll_interval (2 s): plain TCP requests, not session packets.
    let fourlw = window.as_secs_f64() / 2.0 * 13.0;
    let ls_lat = sorted(ls_lat);
    let floor_lat = sorted(floor_lat);

    // The poller: every `interval` re-read every lock container and each child's data, which is
    // what it takes to see the same changes as fresh as lockscope's p99.
    let interval = Duration::from_secs_f64((percentile(&ls_lat, 0.99) / 1000.0).max(0.005));
    for i in 0..containers {
        churn
            .create(&format!("{root}/lock{i}/lock-"), b"", &ephemeral_seq())
            .await?;
    }
    let poller = client(&connect).await?;
    let poll_window = Duration::from_secs(5);
    let poll_start = Instant::now();
    let (mut requests, mut passes, mut pass_time) = (0u64, 0u64, Duration::ZERO);
    while poll_start.elapsed() < poll_window {
        let pass = Instant::now();
        for i in 0..containers {
            let path = format!("{root}/lock{i}");
            let children = poller.list_children(&path).await?;
            requests += 1;
            for child in children {
                let _ = poller.get_data(&format!("{path}/{child}")).await;
                requests += 1;
            }
        }
        passes += 1;
        pass_time += pass.elapsed();
        let spent = pass.elapsed();
        if spent < interval {
            tokio::time::sleep(interval - spent).await;
        }
    }
    let poll_rate = requests as f64 / poll_start.elapsed().as_secs_f64();
    let change_rate = changes / window.as_secs_f64();
    let poller_per_change = poll_rate / change_rate;
    let ls_per_change = lockscope_requests as f64 / changes;
    let ls_total_per_change = (lockscope_requests as f64 + fourlw) / changes;
    let mean_pass_ms = pass_time.as_secs_f64() * 1000.0 / passes.max(1) as f64;
    let steady_ls = ls_per_change + 6.5 / STEADY;
    let steady_poller = poll_rate / STEADY;
    drop(lockscope);

    let p99_ratio = percentile(&ls_lat, 0.99) / percentile(&floor_lat, 0.99);
    let rows = vec![
        row(
            "1 freshness",
            "ZooKeeper change → /api/v1/events p50 / p99",
            p50_p99(&ls_lat),
            &format!("{} changes (create + delete)", cycles * 2),
        ),
        row(
            "1 freshness",
            "ZooKeeper floor: bare persistent watch p50 / p99",
            p50_p99(&floor_lat),
            "same changes, same instant",
        ),
        row(
            "1 freshness",
            "ZooKeeper p99 ÷ floor p99",
            format!("{p99_ratio:.2}×"),
            "goal ≤ 2× and ≤ 25 ms",
        ),
        row(
            "2 cost",
            "ZooKeeper requests per change (session packets, server-side `cons`)",
            format!("{ls_per_change:.2}"),
            &format!("{lockscope_requests} packets for {changes:.0} changes; pings included"),
        ),
        row(
            "2 cost",
            "ZooKeeper requests per change incl. the 4lw ensemble poll",
            format!("{ls_total_per_change:.2}"),
            &format!(
                "{fourlw:.0} 4lw requests in {:.1} s (13 per 2 s)",
                window.as_secs_f64()
            ),
        ),
        row(
            "2 cost",
            "tree poller as fresh (every {interval:?}) requests per change",
            format!("{poller_per_change:.1}"),
            &format!(
                "{poll_rate:.0} req/s, mean pass {mean_pass_ms:.1} ms over {containers} locks"
            ),
        ),
        row(
            "2 cost",
            "ZooKeeper poller ÷ lockscope (incl. 4lw) at this churn",
            format!("{:.0}×", poller_per_change / ls_total_per_change),
            &format!("goal ≥ 20×; churn ran at {change_rate:.0} changes/s"),
        ),
        row(
            "2 cost",
            &format!("… at a steady {STEADY} changes/s: lockscope / poller per change"),
            format!(
                "{:.2} / {:.0} ({:.0}×)",
                steady_ls,
                steady_poller,
                steady_poller / steady_ls
            ),
            "from the measured rates: lockscope's cost follows changes, a poller's follows time",
        ),
    ];
    let figures = json!({
        "changes": changes,
        "latency_ms": {"p50": percentile(&ls_lat, 0.5), "p99": percentile(&ls_lat, 0.99)},
        "floor_ms": {"p50": percentile(&floor_lat, 0.5), "p99": percentile(&floor_lat, 0.99)},
        "requests_per_change": ls_per_change,
        "requests_per_change_with_4lw": ls_total_per_change,
        "poller_interval_ms": interval.as_secs_f64() * 1000.0,
        "poller_requests_per_change": poller_per_change,
        "poller_mean_pass_ms": mean_pass_ms,
    });
    Ok((fix_interval(rows, interval), figures))
}

fn fix_interval(rows: Vec<Row>, interval: Duration) -> Vec<Row> {
    rows.into_iter()
        .map(|mut r| {
            r.figure = r.figure.replace(
                "{interval:?}",
                &format!("{:.1} ms", interval.as_secs_f64() * 1000.0),
            );
            r
        })
        .collect()
}

async fn wait_lock(
    events: &mut EventReader,
    id: &str,
    test: impl Fn(&lockscope_model::wire::LockView) -> bool,
    t0: Instant,
) -> Result<Duration> {
    loop {
        if let (_, StreamEvent::Lock { lock }) = events.next(Duration::from_secs(10)).await? {
            if lock.id == id && test(&lock) {
                return Ok(t0.elapsed());
            }
        }
    }
}

async fn wait_gone(
    events: &mut EventReader,
    id: &str,
    node: &str,
    t0: Instant,
) -> Result<Duration> {
    loop {
        match events.next(Duration::from_secs(10)).await? {
            (_, StreamEvent::Removed { id: gone }) if gone == id => return Ok(t0.elapsed()),
            (_, StreamEvent::Lock { lock })
                if lock.id == id
                    && !lock.holders.iter().any(|h| h.node == node)
                    && !lock.waiters.iter().any(|w| w.node == node) =>
            {
                return Ok(t0.elapsed())
            }
            _ => {}
        }
    }
}

/// Creates every path in `paths` (persistent, empty), `in_flight` requests at a time.
async fn create_all(setup: &zkc::Client, paths: &[String], in_flight: usize) -> Result<()> {
    futures::stream::iter(paths)
        .map(|c| {
            let setup = setup.clone();
            async move { setup.create(c, b"", &open()).await }
        })
        .buffer_unordered(in_flight)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    Ok(())
}

/// Creates the lock containers `containers` (persistent, from `setup`) and then `per_lock`
/// queued ephemeral sequential nodes `lock-<seq>` in each, from the `owners` sessions in turn
/// (ephemeral, as real waiters are), with up to 512 requests in flight; returns the queued
/// nodes' paths.
pub(super) async fn populate(
    setup: &zkc::Client,
    owners: &[zkc::Client],
    containers: &[String],
    per_lock: usize,
) -> Result<Vec<String>> {
    create_all(setup, containers, 256).await?;
    let jobs: Vec<(usize, usize)> = (0..containers.len())
        .flat_map(|l| (0..per_lock).map(move |n| (l, n)))
        .collect();
    let nodes: Vec<String> = futures::stream::iter(jobs)
        .map(|(l, n)| {
            let owner = owners[(l + n) % owners.len()].clone();
            let base = format!("{}/lock-", containers[l]);
            async move {
                let (_, seq) = owner.create(&base, b"", &ephemeral_seq()).await?;
                anyhow::Ok(format!("{base}{:010}", seq.into_i64()))
            }
        })
        .buffer_unordered(512)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    Ok(nodes)
}

/// A 3-member ensemble for a million nodes: each member's JVM heap `heap` (`-Xmx`, e.g. `2g`),
/// and a packet limit raised because the root of [`grow`]'s layout lists every container (at 1M
/// nodes, ~91k names, ~1.2 MB, in one answer).
pub(super) async fn big_ensemble(heap: &str) -> Result<ZkEnsemble> {
    let heap = format!("-Xmx{heap}");
    ZkEnsemble::start_with_jvm_args(3, &[&heap, "-Djute.maxbuffer=67108864"]).await
}

/// The lock container `i` under `root` in [`grow`]'s layout (numbered with five digits, so the
/// first containers by number are the first by path).
pub(super) fn container(root: &str, i: usize) -> String {
    format!("{root}/lock{i:05}")
}

/// Grows the layout the core section measures at a million nodes: lock containers
/// [`container`]`(root, i)` for `i` in `from..to`, each with `per_lock` queued ephemeral
/// sequential nodes from the `owners` sessions ([`populate`]), 10,000 containers at a time so
/// that the paths in flight stay bounded.
pub(super) async fn grow(
    setup: &zkc::Client,
    owners: &[zkc::Client],
    root: &str,
    (from, to): (usize, usize),
    per_lock: usize,
) -> Result<()> {
    let mut at = from;
    while at < to {
        let end = (at + 10_000).min(to);
        let containers: Vec<String> = (at..end).map(|i| container(root, i)).collect();
        populate(setup, owners, &containers, per_lock).await?;
        at = end;
    }
    Ok(())
}

/// Scale: `locks` containers with `per_lock` queued ephemeral nodes each; bootstrap, memory per
/// node, API and metrics, 50 stream clients; then `wchp`/`dump`/… cost at one exists watch per
/// node.
pub async fn scale_and_fourlw(
    bin: &Path,
    dir: &Path,
    locks: usize,
    per_lock: usize,
    stream_clients: usize,
) -> Result<(Vec<Row>, Value)> {
    let zk = ZkEnsemble::start(3).await?;
    let connect = zk.connect_string();
    let root = "/bench-scale";
    let setup = client(&connect).await?;
    setup.create(root, b"", &open()).await?;
    let (idle, _, _) = start_lockscope(bin, dir, "zk-idle", &config(&connect, root)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = rss_kib(idle.0.id())?;
    drop(idle);

    // Containers, then the queued nodes from 10 sessions (ephemeral, as real waiters are).
    let t = Instant::now();
    let containers: Vec<String> = (0..locks).map(|i| format!("{root}/lock{i:05}")).collect();
    let mut owners = Vec::new();
    for _ in 0..10 {
        owners.push(client(&connect).await?);
    }
    let mut nodes = populate(&setup, &owners, &containers, per_lock).await?;
    nodes.sort();
    let total_nodes = locks + nodes.len();
    eprintln!("zk scale: created {total_nodes} nodes in {:?}", t.elapsed());

    // Every stream client connects from 127.0.0.1: the per-client stream limit is raised past
    // them (it would refuse the rest with 429).
    let scale_config = format!(
        "[http]\nmax_streams_per_client = {}\n{}",
        stream_clients + 16,
        config(&connect, root)
    );
    let (lockscope, base, bootstrap) = start_lockscope(bin, dir, "zk-scale", &scale_config).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = rss_kib(lockscope.0.id())?;
    let per_node = rss.saturating_sub(idle_rss) as f64 * 1024.0 / total_nodes as f64;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let (list_bytes, list_ms) =
        timed_get(&http, &format!("{base}/api/v1/locks?format=ndjson")).await?;
    let (metrics_bytes, metrics_ms) = timed_get(&http, &format!("{base}/metrics")).await?;

    // 50 browser-like clients: snapshot for each, then one change reaching all of them.
    let t = Instant::now();
    let readers = futures::future::join_all((0..stream_clients).map(|_| {
        let base = base.clone();
        async move {
            let mut reader = EventReader::connect(&base).await?;
            let (name, _) = reader.next(Duration::from_secs(120)).await?;
            anyhow::ensure!(name == "snapshot");
            anyhow::Ok((reader, t.elapsed().as_secs_f64() * 1000.0))
        }
    }))
    .await;
    let mut clients = Vec::new();
    let mut snapshot_ms = Vec::new();
    for r in readers {
        let (reader, ms) = r?;
        clients.push(reader);
        snapshot_ms.push(ms);
    }
    let snapshot_ms = sorted(snapshot_ms);
    let target = &containers[0];
    let id = lockscope_model::id::lock_id("zk", target);
    let t0 = Instant::now();
    let (_, seq) = setup
        .create(&format!("{target}/lock-"), b"", &ephemeral_seq())
        .await?;
    let node = format!("{target}/lock-{:010}", seq.into_i64());
    let fan = futures::future::join_all(clients.iter_mut().map(|reader| {
        let (id, node) = (id.clone(), node.clone());
        async move {
            wait_lock(
                reader,
                &id,
                |l| l.waiters.iter().any(|w| w.node == node),
                t0,
            )
            .await
            .map(|d| d.as_secs_f64() * 1000.0)
        }
    }))
    .await;
    let fan_ms = sorted(fan.into_iter().collect::<Result<Vec<_>>>()?);
    drop(clients);

    // One exists watch per queued node (what predecessor-watch waiters hold), then the
    // four-letter words lockscope polls, each timed on every member.
    let watcher = client(&connect).await?;
    let t = Instant::now();
    let watches: Vec<_> = futures::stream::iter(nodes.iter())
        .map(|n| {
            let watcher = watcher.clone();
            async move { watcher.check_and_watch_stat(n).await }
        })
        .buffer_unordered(512)
        .collect::<Vec<_>>()
        .await;
    let watches: Vec<_> = watches.into_iter().collect::<Result<Vec<_>, _>>()?;
    eprintln!(
        "zk scale: {} watches set in {:?}",
        watches.len(),
        t.elapsed()
    );
    let leader = zk.leader().await?;
    let mut fourlw = serde_json::Map::new();
    let mut rows_4lw = Vec::new();
    let mut per_poll_ms = 0.0;
    let mut leader_ms = 0.0;
    for cmd in ["wchp", "wchs", "cons", "mntr", "dump"] {
        let members: Vec<usize> = if cmd == "dump" {
            vec![leader]
        } else {
            (0..zk.members()).collect()
        };
        let (mut worst_ms, mut worst_bytes) = (0.0f64, 0usize);
        for &m in &members {
            for _ in 0..3 {
                let t = Instant::now();
                let text = four_letter(zk.client_addr(m), cmd).await?;
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if ms > worst_ms {
                    worst_ms = ms;
                    worst_bytes = text.len();
                }
            }
        }
        per_poll_ms += worst_ms * members.len() as f64;
        leader_ms += worst_ms;
        fourlw.insert(
            cmd.into(),
            json!({"max_ms": worst_ms, "bytes": worst_bytes, "members": members.len()}),
        );
        rows_4lw.push(row(
            "5 4lw cost",
            &format!(
                "`{cmd}` at {} watches ({})",
                watches.len(),
                if cmd == "dump" {
                    "leader"
                } else {
                    "each member"
                }
            ),
            format!("{worst_ms:.1} ms, {:.1} MB", worst_bytes as f64 / 1e6),
            "slowest of 3 tries",
        ));
    }
    drop(watches);
    rows_4lw.push(row(
        "5 4lw cost",
        "one poll: busiest member (leader, with `dump`) / all members",
        format!("{leader_ms:.0} ms / {per_poll_ms:.0} ms"),
        &format!("{:.1} % of the leader's time at the 2 s minimum interval; lockscope stretches the interval to 20× a poll's duration", leader_ms / 20.0),
    ));
    drop(lockscope);

    let mut rows = vec![
        row(
            "3 scale",
            "ZooKeeper locks / nodes mirrored",
            format!("{locks} / {total_nodes}"),
            &format!("{per_lock} queued ephemeral nodes per lock, 10 owner sessions"),
        ),
        row(
            "3 scale",
            "ZooKeeper bootstrap (start → /readyz)",
            format!("{:.2} s", bootstrap.as_secs_f64()),
            "",
        ),
        row(
            "3 scale",
            "RSS idle / loaded, per mirrored node",
            format!(
                "{:.1} MiB / {:.1} MiB, {per_node:.0} B",
                idle_rss as f64 / 1024.0,
                rss as f64 / 1024.0
            ),
            "",
        ),
        row(
            "3 scale",
            "GET /api/v1/locks (ZooKeeper)",
            format!("{:.1} MB, {list_ms:.0} ms", list_bytes as f64 / 1e6),
            "",
        ),
        row(
            "3 scale",
            "GET /metrics (label cap 500)",
            format!("{:.0} KB, {metrics_ms:.0} ms", metrics_bytes as f64 / 1e3),
            "",
        ),
        row(
            "3 scale",
            &format!("{stream_clients} stream clients: snapshot received p50 / max"),
            format!(
                "{:.0} / {:.0} ms",
                percentile(&snapshot_ms, 0.5),
                snapshot_ms.last().copied().unwrap_or(f64::NAN)
            ),
            "all connecting at once",
        ),
        row(
            "3 scale",
            &format!("one change reaching all {stream_clients} clients p50 / max"),
            format!(
                "{:.1} / {:.1} ms",
                percentile(&fan_ms, 0.5),
                fan_ms.last().copied().unwrap_or(f64::NAN)
            ),
            "",
        ),
    ];
    rows.extend(rows_4lw);
    let figures = json!({
        "locks": locks, "nodes": total_nodes, "bootstrap_s": bootstrap.as_secs_f64(),
        "rss_idle_kib": idle_rss, "rss_kib": rss, "rss_per_node_bytes": per_node,
        "api_list": {"bytes": list_bytes, "ms": list_ms},
        "metrics": {"bytes": metrics_bytes, "ms": metrics_ms},
        "stream_snapshot_ms": {"p50": percentile(&snapshot_ms, 0.5), "max": snapshot_ms.last()},
        "stream_change_ms": {"p50": percentile(&fan_ms, 0.5), "max": fan_ms.last()},
        "fourlw": fourlw,
        "fourlw_per_poll_ms": per_poll_ms,
        "fourlw_leader_ms": leader_ms,
    });
    if fan_ms.len() != stream_clients {
        bail!("not every stream client saw the change");
    }
    Ok((rows, figures))
}

/// Bootstrap and memory at size (`--only zk-memory`): `locks` lock containers (in groups of
/// 1,000 under the root, so no child list nears ZooKeeper's 1 MB packet limit) with `per_lock`
/// queued ephemeral sequential nodes each from 10 sessions, on an ensemble of `members`; then
/// lockscope's start → /readyz, its RSS per mirrored node over an idle lockscope's, and its
/// bootstrap progress gauges (`lockscope_source_bootstrap_*`). The ensemble's heap follows
/// `LOCKSCOPE_ZK_HEAP` (e.g. `2g` for a million nodes).
pub async fn bootstrap_and_memory(
    bin: &Path,
    dir: &Path,
    locks: usize,
    per_lock: usize,
    members: usize,
    data: &[u8],
) -> Result<(Vec<Row>, Value)> {
    let zk = ZkEnsemble::start(members).await?;
    let connect = zk.connect_string();
    let root = "/bench-memory";
    let setup = client(&connect).await?;
    setup.create(root, b"", &open()).await?;
    let (idle, _, _) = start_lockscope(bin, dir, "zk-mem-idle", &config(&connect, root)).await?;
    let idle_rss = super::settled_rss(idle.0.id()).await?;
    drop(idle);

    let t = Instant::now();
    let groups: Vec<String> = (0..locks.div_ceil(1000))
        .map(|g| format!("{root}/g{g:04}"))
        .collect();
    for g in &groups {
        setup.create(g, b"", &open()).await?;
    }
    let containers: Vec<String> = (0..locks)
        .map(|l| format!("{}/lock{l:07}", groups[l / 1000]))
        .collect();
    create_all(&setup, &containers, 512).await?;
    let mut owners = Vec::new();
    for _ in 0..10 {
        owners.push(client(&connect).await?);
    }
    let jobs = (0..locks).flat_map(|l| (0..per_lock).map(move |n| (l, n)));
    let created = futures::stream::iter(jobs)
        .map(|(l, n)| {
            let owner = owners[(l + n) % owners.len()].clone();
            let base = format!("{}/lock-", containers[l]);
            async move {
                owner
                    .create(&base, data, &ephemeral_seq())
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(1024)
        .fold((0usize, None), |(n, error), r| async move {
            match r {
                Ok(()) => (n + 1, error),
                Err(e) => (n, error.or(Some(e))),
            }
        })
        .await;
    let created = match created {
        (n, None) => n,
        (n, Some(e)) => bail!("{n} nodes created, then: {e}"),
    };
    let total_nodes = 1 + groups.len() + locks + created;
    eprintln!(
        "zk memory: created {total_nodes} nodes in {:?}",
        t.elapsed()
    );

    // ZooKeeper's own speed for these reads: the same requests (lockscope's full read: siblings
    // of an ephemeral node in multi-reads, the rest one request per node), pipelined on one
    // session per member plus one, by a bare client that keeps nothing.
    let members_cpu = || -> f64 {
        (0..zk.members())
            .filter_map(|i| zk.pid(i))
            .filter_map(super::cpu_s)
            .sum()
    };
    let (bare, bare_cpu) = {
        let primary = client(&connect).await?;
        let mut helpers = Vec::new();
        for member in connect.split(',') {
            let helper = client(member).await?;
            helper.sync(root).await?;
            helpers.push(helper);
        }
        let cpu = members_cpu();
        let t = Instant::now();
        let mut read = 0;
        lockscope::backends::zookeeper::collect::read_tree_in_parts(
            &primary,
            futures::stream::iter(helpers),
            1024,
            &[root.to_string()],
            4096,
            |part| {
                read += part.len();
                std::future::ready(true)
            },
        )
        .await?;
        if read != total_nodes {
            bail!("the bare read found {read} nodes of {total_nodes}");
        }
        (t.elapsed(), members_cpu() - cpu)
    };
    let cpu = members_cpu();
    let (lockscope, base, bootstrap) =
        start_lockscope(bin, dir, "zk-mem", &config(&connect, root)).await?;
    let bootstrap_cpu = members_cpu() - cpu;
    // Settled: what the bootstrap left behind is freed or kept for good. Measured before any
    // request, whose own transient memory the allocator would keep.
    let rss = super::settled_rss(lockscope.0.id()).await?;
    let per_node = rss.saturating_sub(idle_rss) as f64 * 1024.0 / total_nodes as f64;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let metrics = super::metrics_text(&http, &base).await?;
    let read =
        crate::harness::metric_value(&metrics, "lockscope_source_bootstrap_nodes{source=\"zk\"}");
    let took = crate::harness::metric_value(
        &metrics,
        "lockscope_source_bootstrap_duration_seconds{source=\"zk\"}",
    );
    drop(lockscope);
    let rows = vec![
        row(
            "3 scale",
            &format!(
                "ZooKeeper bootstrap of {total_nodes} nodes{} (start → /readyz)",
                if data.is_empty() {
                    String::new()
                } else {
                    format!(", lock nodes holding {} B of data", data.len())
                }
            ),
            format!("{:.2} s", bootstrap.as_secs_f64()),
            &format!(
                "{members}-member ensemble; lockscope says {} nodes read in {} s; the members used {bootstrap_cpu:.2} CPU-s meanwhile",
                read.map_or("?".into(), |n| format!("{n:.0}")),
                took.map_or("?".into(), |s| format!("{s:.2}"))
            ),
        ),
        row(
            "3 scale",
            &format!(
                "ZooKeeper's own: the same reads of {total_nodes} nodes by a bare client"
            ),
            format!("{:.2} s", bare.as_secs_f64()),
            &format!(
                "one session per member plus one, 1024 requests in flight on each, nothing kept; the members used {bare_cpu:.2} CPU-s of {} cores; lockscope's bootstrap = {:.2}× this",
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                bootstrap.as_secs_f64() / bare.as_secs_f64()
            ),
        ),
        row(
            "3 scale",
            &format!(
                "RSS per mirrored node at {total_nodes} nodes{}",
                if data.is_empty() { "" } else { " with data" }
            ),
            format!("{per_node:.0} B"),
            &format!(
                "{:.1} MiB idle, {:.1} MiB loaded; goal ≤ 512 B",
                idle_rss as f64 / 1024.0,
                rss as f64 / 1024.0
            ),
        ),
    ];
    let figures = json!({
        "nodes": total_nodes,
        "members": members,
        "bootstrap_s": bootstrap.as_secs_f64(),
        "bootstrap_nodes_read": read,
        "bootstrap_duration_s": took,
        "bootstrap_members_cpu_s": bootstrap_cpu,
        "bare_read_s": bare.as_secs_f64(),
        "bare_read_members_cpu_s": bare_cpu,
        "rss_idle_kib": idle_rss,
        "rss_kib": rss,
        "bytes_per_node": per_node,
        "node_data_bytes": data.len(),
    });
    Ok((rows, figures))
}
