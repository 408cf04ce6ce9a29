//! Viewers at size (issue 20): a real Redis holding N token locks (100,000 and 1,000,000 by
//! default), and a real 3-member ZooKeeper ensemble holding 1,000,000 nodes in the core
//! section's layout (lock containers with 10 queued ephemeral sequential nodes each, from 10
//! sessions), each watched by the release `lockscope`, then
//! * for Redis, the bootstrap (start → `/readyz`) and the RSS once ready, per lock;
//! * `GET /metrics`: the first scrape and the median of five more;
//! * one page of `GET /api/v1/locks` (the default query: 100 locks by path) plain, gzip and zstd:
//!   bytes on the wire and time (median of 5), and a page sorted by hold time;
//! * C live views (`/api/v1/events?limit=100`, 50 and 200 by default) opened at once: time to
//!   each one's first event (p50 / max) and lockscope's peak RSS while they open;
//! * one change reaching all C open views: the first lock by path (on the views' page) changes
//!   (Redis: a new holder; ZooKeeper: an ephemeral sequential node created in, or deleted from,
//!   its container), timed from the change until each view's `lock` event shows it (p99 over
//!   views and changes);
//! * the same C views read slowly (a chunk every 200 ms) while locks on the page keep changing
//!   for 10 s: lockscope's peak RSS and how many were resynced;
//! * the dashboard in headless Chromium (`tests/browser/bench-first-rows.mjs`, lockscope serving
//!   the built UI): navigation → first rows, cold (a fresh browser context) and warm (navigating
//!   again), p50 / max, and the JS heap and wasm memory the page holds once its rows show.
//!   Without the built UI (`scripts/build-ui`) this figure is skipped, saying so.
//!
//! The measurements ([`measure`]) know nothing of the source: they are handed a lockscope and
//! the source's [`Changes`]. Figures only; nothing is asserted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use serde_json::{json, Map, Value};
use zookeeper_client as zkc;

use super::{percentile, row, rss_kib, sorted, start_lockscope, Row};
use crate::harness::EventReader;
use crate::support::redis::RedisServer;

/// Sizes of the viewers section.
#[derive(Debug, Clone)]
pub struct ViewersArgs {
    /// Redis lock counts (0: none).
    pub locks: Vec<usize>,
    /// ZooKeeper nodes in all (0: none), as lock containers with `zk_queued_per_lock` queued
    /// nodes each, and the members' JVM heap.
    pub zk_nodes: usize,
    pub zk_queued_per_lock: usize,
    pub zk_heap: String,
    pub clients: Vec<usize>,
    /// Changes timed per client count.
    pub changes: usize,
    /// Dashboard loads in Chromium per lock count (0: none).
    pub browser_runs: usize,
    /// Whether the 100 views with different filters are measured at each Redis lock count
    /// (opening them takes ~40 s at 1M locks).
    pub distinct: bool,
}

/// `GET url` with `Accept-Encoding: encoding`: bytes on the wire and ms.
async fn get_encoded(http: &reqwest::Client, url: &str, encoding: &str) -> Result<(usize, f64)> {
    let t = Instant::now();
    let mut request = http.get(url);
    if !encoding.is_empty() {
        request = request.header("accept-encoding", encoding);
    }
    let answer = request.send().await?.error_for_status()?;
    let body = answer.bytes().await?;
    Ok((body.len(), t.elapsed().as_secs_f64() * 1000.0))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Peak RSS of `pid` (KiB) sampled every 50 ms until `done` resolves.
async fn peak_rss_while<T>(pid: u32, done: impl std::future::Future<Output = T>) -> (T, u64) {
    let mut peak = rss_kib(pid).unwrap_or(0);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tokio::pin!(done);
    loop {
        tokio::select! {
            out = &mut done => return (out, peak.max(rss_kib(pid).unwrap_or(0))),
            _ = tick.tick() => peak = peak.max(rss_kib(pid).unwrap_or(0)),
        }
    }
}

/// What a view shows once a change has reached it, tested on its copy of the changed lock.
#[derive(Debug, Clone)]
enum Shows {
    /// The lock's first holder is this node (a Redis token).
    Holder(String),
    /// This node is among the lock's holders and waiters (`true`), or is not (`false`).
    Node(String, bool),
}

impl Shows {
    fn in_lock(&self, lock: &Value) -> bool {
        match self {
            Shows::Holder(node) => lock["holders"][0]["node"] == node.as_str(),
            Shows::Node(node, present) => {
                let has = |list: &str| {
                    lock[list]
                        .as_array()
                        .is_some_and(|l| l.iter().any(|e| e["node"] == node.as_str()))
                };
                (has("holders") || has("waiters")) == *present
            }
        }
    }
}

/// The source a measured lockscope watches, as the measurements change it. Every change is to
/// a lock on the views' page (the first 100 by path), so that every view pushes it.
trait Changes {
    /// What one change is, and what one round of [`Changes::round`] is, for the rows' notes.
    const ONE: &'static str;
    const ROUND: &'static str;
    /// The path of the lock [`Changes::one`] changes: the first by path.
    fn target(&self) -> &str;
    /// Changes the target lock once (`n` counts the changes); returns what a view shows once
    /// the change has reached it.
    async fn one(&mut self, n: usize) -> Result<Shows>;
    /// One round of the slow readers' churn (`round` counts from 1): locks on the page change;
    /// returns how many changes it made.
    async fn round(&mut self, round: u64) -> Result<usize>;
}

/// Redis token locks `lock:b<i>` ([`super::redis::load_locks`]).
struct RedisChanges {
    conn: redis::aio::MultiplexedConnection,
}

impl Changes for RedisChanges {
    const ONE: &'static str = "a SET giving the lock a new token";
    const ROUND: &'static str = "a pipeline of 100 SETs (lock:b0 … lock:b99, 200-byte tokens)";

    fn target(&self) -> &str {
        "lock:b0"
    }

    async fn one(&mut self, n: usize) -> Result<Shows> {
        let token = format!("bench-{n}");
        redis::cmd("SET")
            .arg(self.target())
            .arg(&token)
            .arg("PX")
            .arg(3_600_000)
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(Shows::Holder(token))
    }

    async fn round(&mut self, round: u64) -> Result<usize> {
        let mut pipe = redis::pipe();
        for i in 0..100 {
            pipe.cmd("SET")
                .arg(format!("lock:b{i}"))
                .arg(format!("slow-{round}-{}", "x".repeat(200)))
                .arg("PX")
                .arg(3_600_000)
                .ignore();
        }
        pipe.query_async::<()>(&mut self.conn).await?;
        Ok(100)
    }
}

/// ZooKeeper lock containers in [`super::zk::grow`]'s layout, changed from a session of their
/// own: an ephemeral sequential node created in a container (a new waiter), and deleted again by
/// the next change, so the layout stays as loaded.
struct ZkChanges {
    client: zkc::Client,
    /// The containers on the views' page (the first 100 by path); the first is the target.
    page: Vec<String>,
    /// The node the last [`Changes::one`] created, which the next deletes.
    created: Option<String>,
    /// The nodes the last round created, one per container of the page, which the next deletes.
    round_nodes: Vec<String>,
}

impl ZkChanges {
    async fn create_in(client: &zkc::Client, container: &str) -> Result<String> {
        let base = format!("{container}/lock-");
        let (_, seq) = client
            .create(&base, b"", &super::zk::ephemeral_seq())
            .await?;
        Ok(format!("{base}{:010}", seq.into_i64()))
    }
}

impl Changes for ZkChanges {
    const ONE: &'static str =
        "an ephemeral sequential node created in the lock's container, or deleted again";
    const ROUND: &'static str =
        "one ephemeral sequential node created in each of the page's 100 containers, or deleted again, 100 requests in flight";

    fn target(&self) -> &str {
        &self.page[0]
    }

    async fn one(&mut self, _n: usize) -> Result<Shows> {
        Ok(match self.created.take() {
            Some(node) => {
                self.client.delete(&node, None).await?;
                Shows::Node(node, false)
            }
            None => {
                let node = Self::create_in(&self.client, &self.page[0]).await?;
                self.created = Some(node.clone());
                Shows::Node(node, true)
            }
        })
    }

    async fn round(&mut self, _round: u64) -> Result<usize> {
        let client = &self.client;
        if self.round_nodes.is_empty() {
            self.round_nodes =
                futures::future::try_join_all(self.page.iter().map(|c| Self::create_in(client, c)))
                    .await?;
            Ok(self.round_nodes.len())
        } else {
            let nodes = std::mem::take(&mut self.round_nodes);
            futures::future::try_join_all(nodes.iter().map(|n| client.delete(n, None))).await?;
            Ok(nodes.len())
        }
    }
}

/// The built UI for the dashboard's figure, or why it is skipped; and the config section that
/// makes lockscope serve it.
fn ui_for(args: &ViewersArgs) -> Result<(Result<PathBuf, String>, String)> {
    let ui = if args.browser_runs == 0 {
        Err("not asked for (--viewers-browser-runs 0)".to_string())
    } else {
        super::browser::ui_dir()
    };
    // Every viewer connects from 127.0.0.1: the per-client stream limit and the live-view
    // limit (issue 35) are raised past the most clients the section opens at once.
    let most = args
        .clients
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(DISTINCT_VIEWS)
        + 16;
    let mut config = format!("[http]\nmax_streams_per_client = {most}\nmax_live_views = {most}\n");
    if let Ok(dist) = &ui {
        config.push_str(&format!(
            "[ui]\nassets_dir = {}\n",
            serde_json::to_string(&dist.display().to_string())?
        ));
    }
    Ok((ui, config))
}

/// Redis holding `locks` token locks.
async fn redis_size(
    bin: &Path,
    dir: &Path,
    locks: usize,
    args: &ViewersArgs,
) -> Result<(Vec<Row>, Value)> {
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    super::redis::load_locks(&mut conn, 0..locks).await?;
    let name = format!("viewers-{locks}");
    let (ui, ui_config) = ui_for(args)?;
    let (lockscope, base, ready) =
        super::redis::start_redis_lockscope_with(bin, dir, &server.url(), &name, &ui_config)
            .await?;
    // RSS ÷ locks with the idle RSS (~16 MiB) included: the core section subtracts it.
    let rss_ready = super::rss_kib(lockscope.0.id())?;
    let mut changes = RedisChanges { conn };
    let label = format!("{locks} locks");
    let mut rows = vec![row(
        "viewers",
        &format!("{label}: bootstrap (start → /readyz); RSS once ready"),
        format!(
            "{:.1} s; {:.2} GiB, {:.0} B a lock",
            ready.as_secs_f64(),
            rss_ready as f64 / 1024.0 / 1024.0,
            rss_ready as f64 * 1024.0 / locks as f64
        ),
        "RSS ÷ locks, idle RSS included; goal at 10M locks: RSS < 6 GiB",
    )];
    let (measured_rows, mut figures) =
        measure(&label, &base, lockscope.0.id(), &mut changes, ui, args).await?;
    rows.extend(measured_rows);
    figures.insert("ready_s".into(), json!(ready.as_secs_f64()));
    figures.insert("rss_ready_kib".into(), json!(rss_ready));
    if args.distinct {
        let (distinct_rows, distinct) = distinct_views(
            &label,
            &base,
            lockscope.0.id(),
            &mut changes.conn,
            locks,
            args.changes,
        )
        .await?;
        rows.extend(distinct_rows);
        figures.insert("distinct_views".into(), distinct);
    }
    drop(lockscope);
    figures.insert("backend".into(), json!("redis"));
    figures.insert("locks".into(), json!(locks));
    Ok((rows, Value::Object(figures)))
}

/// Distinct live views opened beside a plain one by [`distinct_views`].
const DISTINCT_VIEWS: usize = 100;

/// [`DISTINCT_VIEWS`] live views, each with a filter of its own (a different `q`, sorts in
/// turn, some with a state), open beside one plain view while locks all over the table change
/// (`lock:b<random>` set anew, ~500 a second): lockscope's CPU over 10 s, and one change to the
/// plain view's first lock reaching it (`changes` times).
async fn distinct_views(
    label: &str,
    base: &str,
    pid: u32,
    conn: &mut redis::aio::MultiplexedConnection,
    locks: usize,
    changes: usize,
) -> Result<(Vec<Row>, Value)> {
    const SORTS: [&str; 8] = [
        "path",
        "held_for",
        "longest_wait",
        "waiters",
        "source",
        "attention",
        "recipe",
        "fan_out",
    ];
    let section = "viewers";
    let opened_at = Instant::now();
    let views = futures::future::join_all((0..DISTINCT_VIEWS).map(|i| {
        let base = base.to_string();
        async move {
            let state = if i % 3 == 0 { "&state=held" } else { "" };
            let path = format!(
                "/api/v1/events?limit=50&q=b{i}&sort={}{state}",
                SORTS[i % SORTS.len()]
            );
            let mut reader = EventReader::connect_to(&base, &path).await?;
            let (name, _) = reader.next_json(Duration::from_secs(300)).await?;
            ensure!(name == "snapshot", "first event {name}");
            anyhow::Ok(reader)
        }
    }))
    .await;
    let mut readers = Vec::new();
    for reader in views {
        readers.push(reader?);
    }
    let open_s = opened_at.elapsed().as_secs_f64();
    let mut plain = EventReader::connect_to(base, "/api/v1/events?limit=100").await?;
    plain.next_json(Duration::from_secs(120)).await?;
    // The distinct views are read in the background, as browsers would.
    let drains: Vec<_> = readers
        .into_iter()
        .map(|mut reader| {
            tokio::spawn(
                async move { while reader.next_json(Duration::from_secs(30)).await.is_ok() {} },
            )
        })
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let mut conn = conn.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut made = 0usize;
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut pipe = redis::pipe();
                for _ in 0..50 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    pipe.cmd("SET")
                        .arg(format!(
                            "lock:b{}",
                            100 + x as usize % locks.saturating_sub(100).max(1)
                        ))
                        .arg(format!("spread-{made}"))
                        .arg("PX")
                        .arg(3_600_000)
                        .ignore();
                    made += 1;
                }
                if pipe.query_async::<()>(&mut conn).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            made
        })
    };
    let cpu_before = super::cpu_s(pid).unwrap_or(0.0);
    let window = Instant::now();
    let mut reach = Vec::new();
    for n in 0..changes.max(1) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let token = format!("distinct-{n}");
        let t = Instant::now();
        redis::cmd("SET")
            .arg("lock:b0")
            .arg(&token)
            .arg("PX")
            .arg(3_600_000)
            .query_async::<()>(conn)
            .await?;
        loop {
            let (name, data) = plain.next_json(Duration::from_secs(30)).await?;
            let lock = match name.as_str() {
                "snapshot" => data["locks"]
                    .as_array()
                    .and_then(|l| l.iter().find(|l| l["path"] == "lock:b0"))
                    .cloned(),
                "lock" if data["lock"]["path"] == "lock:b0" => Some(data["lock"].clone()),
                _ => None,
            };
            if lock.is_some_and(|l| l["holders"][0]["node"] == token.as_str()) {
                reach.push(t.elapsed().as_secs_f64() * 1000.0);
                break;
            }
        }
    }
    let cpu_s = super::cpu_s(pid).unwrap_or(0.0) - cpu_before;
    let wall_s = window.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let made = churn.await.unwrap_or(0);
    for drain in drains {
        drain.abort();
    }
    let reach = sorted(reach);
    let cores = cpu_s / wall_s;
    let rows = vec![
        row(
            section,
            &format!("{label}: {DISTINCT_VIEWS} views with different filters open while locks change: lockscope CPU"),
            format!("{cores:.2} cores"),
            &format!(
                "{made} SETs to random locks in {wall_s:.1} s ({:.0}/s) while the views and one plain view were open; the views opened in {open_s:.1} s; goal ≤ 1 core",
                made as f64 / wall_s
            ),
        ),
        row(
            section,
            &format!("{label}: … a change reaching the plain view, p50 / p99"),
            format!("{:.0} / {:.0} ms", percentile(&reach, 0.5), percentile(&reach, 0.99)),
            &format!("{} changes of lock:b0, each on a view quiet for 300 ms; goal p99 < 250 ms", reach.len()),
        ),
    ];
    Ok((
        rows,
        json!({
            "views": DISTINCT_VIEWS,
            "open_s": open_s,
            "cores": cores,
            "changes_per_s": made as f64 / wall_s,
            "reach_ms": {"p50": percentile(&reach, 0.5), "p99": percentile(&reach, 0.99)},
        }),
    ))
}

/// A 3-member ZooKeeper ensemble holding `nodes` nodes (rounded up to whole lock containers)
/// in the core section's layout at a million nodes.
async fn zk_size(
    bin: &Path,
    dir: &Path,
    nodes: usize,
    args: &ViewersArgs,
) -> Result<(Vec<Row>, Value)> {
    let per_lock = 1 + args.zk_queued_per_lock;
    let locks = nodes.div_ceil(per_lock);
    let nodes = locks * per_lock;
    let zk = super::zk::big_ensemble(&args.zk_heap).await?;
    let connect = zk.connect_string();
    let root = "/viewers";
    let setup = super::zk::client(&connect).await?;
    setup.create(root, b"", &super::zk::open()).await?;
    let mut owners = Vec::new();
    for _ in 0..10 {
        owners.push(super::zk::client(&connect).await?);
    }
    let t = Instant::now();
    super::zk::grow(&setup, &owners, root, (0, locks), args.zk_queued_per_lock).await?;
    let loaded = t.elapsed();
    eprintln!("viewers: ZooKeeper {nodes} nodes ({locks} locks) created in {loaded:?}");
    let (ui, ui_config) = ui_for(args)?;
    let config = format!("{}{ui_config}", super::zk::config(&connect, root));
    let (lockscope, base, ready) =
        start_lockscope(bin, dir, &format!("viewers-zk-{nodes}"), &config).await?;
    eprintln!("viewers: lockscope ready in {ready:?}");
    let mut changes = ZkChanges {
        client: super::zk::client(&connect).await?,
        page: (0..locks.min(100))
            .map(|i| super::zk::container(root, i))
            .collect(),
        created: None,
        round_nodes: Vec::new(),
    };
    let label = format!("{nodes} ZooKeeper nodes ({locks} locks)");
    let (rows, mut figures) =
        measure(&label, &base, lockscope.0.id(), &mut changes, ui, args).await?;
    drop(lockscope);
    drop(changes);
    drop(owners);
    drop(zk);
    figures.insert("backend".into(), json!("zookeeper"));
    figures.insert("nodes".into(), json!(nodes));
    figures.insert("locks".into(), json!(locks));
    figures.insert("queued_per_lock".into(), json!(args.zk_queued_per_lock));
    figures.insert("load_s".into(), json!(loaded.as_secs_f64()));
    figures.insert("ready_s".into(), json!(ready.as_secs_f64()));
    Ok((rows, Value::Object(figures)))
}

/// Every measurement against the lockscope at `base` (process `pid`) whose source `changes`
/// changes; the rows' figures begin with `label` (e.g. "100000 locks"). Returns the rows and the
/// figures (pages, streams, browser).
async fn measure<C: Changes>(
    label: &str,
    base: &str,
    pid: u32,
    changes: &mut C,
    ui: Result<PathBuf, String>,
    args: &ViewersArgs,
) -> Result<(Vec<Row>, Map<String, Value>)> {
    let section = "viewers";
    let mut rows = Vec::new();
    let base = base.to_string();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()?;
    let rss_ready = rss_kib(pid)?;

    // One page, plain and compressed.
    let mut pages = Map::new();
    for (query_label, query) in [("by path", ""), ("by hold time", "sort=held_for")] {
        let url = format!("{base}/api/v1/locks?{query}");
        for encoding in ["", "gzip", "zstd"] {
            let mut sizes = Vec::new();
            let mut times = Vec::new();
            for _ in 0..5 {
                let (bytes, ms) = get_encoded(&http, &url, encoding).await?;
                sizes.push(bytes as f64);
                times.push(ms);
            }
            let (bytes, ms) = (median(sizes), median(times));
            let shown = if encoding.is_empty() {
                "plain"
            } else {
                encoding
            };
            rows.push(row(
                section,
                &format!("{label}: a page of 100 {query_label}, {shown}"),
                format!("{:.1} kB, {ms:.0} ms", bytes / 1000.0),
                "median of 5; goal < 100 kB on the wire",
            ));
            pages.insert(
                format!("{query_label} {shown}"),
                json!({"bytes": bytes, "ms": ms}),
            );
        }
    }
    // `/metrics`: the first scrape, then the median of 5 more.
    let mut scrapes = Vec::new();
    for _ in 0..6 {
        scrapes.push(get_encoded(&http, &format!("{base}/metrics"), "").await?);
    }
    let (metrics_bytes, metrics_first) = scrapes[0];
    let metrics_median = median(scrapes[1..].iter().map(|(_, ms)| *ms).collect());
    rows.push(row(
        section,
        &format!("{label}: GET /metrics, first / median of 5 more"),
        format!("{metrics_first:.0} / {metrics_median:.0} ms"),
        &format!(
            "{:.0} kB (label cap 500); goal < 50 ms",
            metrics_bytes as f64 / 1000.0
        ),
    ));
    pages.insert(
        "metrics".into(),
        json!({"first_ms": metrics_first, "median_ms": metrics_median, "bytes": metrics_bytes}),
    );
    // The changed lock must be one the views show, or no view would push it.
    let page: Value = http
        .get(format!("{base}/api/v1/locks"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let target = changes.target().to_string();
    ensure!(
        page["locks"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["path"] == target.as_str())),
        "{target} is not on the first page by path"
    );

    let mut streams = Map::new();
    let mut n = 0;
    for &clients in &args.clients {
        // Opened at once: time to each first event.
        let started = Instant::now();
        let opened = futures::future::join_all((0..clients).map(|_| {
            let base = base.clone();
            async move {
                let t = Instant::now();
                let mut reader = EventReader::connect_to(&base, "/api/v1/events?limit=100").await?;
                let (name, _) = reader.next_json(Duration::from_secs(120)).await?;
                ensure!(name == "snapshot", "first event {name}");
                anyhow::Ok((reader, t.elapsed().as_secs_f64() * 1000.0))
            }
        }));
        let (opened, peak_open) = peak_rss_while(pid, opened).await;
        let mut readers = Vec::new();
        let mut firsts = Vec::new();
        for r in opened {
            let (reader, ms) = r?;
            readers.push(reader);
            firsts.push(ms);
        }
        let open_wall = started.elapsed().as_secs_f64() * 1000.0;
        let firsts = sorted(firsts);
        rows.push(row(
            section,
            &format!("{label}: {clients} live views opening at once, first event p50 / max"),
            format!("{:.0} / {:.0} ms", percentile(&firsts, 0.5), firsts[firsts.len() - 1]),
            &format!(
                "all open in {open_wall:.0} ms; lockscope RSS {:.0} → peak {:.0} MiB; goal each < 1 s",
                rss_ready as f64 / 1024.0,
                peak_open as f64 / 1024.0
            ),
        ));

        // One change reaching every view: the target is on the first page by path.
        let mut reach = Vec::new();
        // The source's own answer to each change (the create, delete or SET acknowledged), so
        // a slow change says whether the server or lockscope was slow.
        let mut acked = Vec::new();
        // When each change was made (ms since the epoch), to line it up with lockscope's log.
        let mut made_at = Vec::new();
        for _ in 0..args.changes {
            // A change on quiet views: the one before was pushed more than a push interval ago
            // (views push at most 5 times a second, the latest state winning).
            tokio::time::sleep(Duration::from_millis(300)).await;
            let t = Instant::now();
            made_at.push(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            );
            let shows = changes.one(n).await?;
            acked.push(t.elapsed().as_secs_f64() * 1000.0);
            n += 1;
            let seen = futures::future::join_all(readers.iter_mut().map(|reader| {
                let (shows, target) = (&shows, target.as_str());
                async move {
                    loop {
                        let (name, data) = reader.next_json(Duration::from_secs(60)).await?;
                        let lock = if name == "snapshot" {
                            data["locks"]
                                .as_array()
                                .and_then(|l| l.iter().find(|l| l["path"] == target))
                        } else if name == "lock" && data["lock"]["path"] == target {
                            Some(&data["lock"])
                        } else {
                            None
                        };
                        if lock.is_some_and(|l| shows.in_lock(l)) {
                            return anyhow::Ok(t.elapsed().as_secs_f64() * 1000.0);
                        }
                    }
                }
            }))
            .await;
            for ms in seen {
                reach.push(ms?);
            }
        }
        let reach_in_order = reach.clone();
        // Per change, the slowest view and the source's acknowledgement.
        let slowest: Vec<f64> = reach_in_order
            .chunks(clients)
            .map(|c| c.iter().copied().fold(0.0, f64::max))
            .collect();
        let acked_in_order = acked.clone();
        let acked = sorted(acked);
        let worst = slowest
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, ms)| (i, *ms, acked_in_order[i]))
            .unwrap_or_default();
        let reach = sorted(reach);
        rows.push(row(
            section,
            &format!("{label}: one change reaching all {clients} views, p50 / p99"),
            format!("{:.0} / {:.0} ms", percentile(&reach, 0.5), percentile(&reach, 0.99)),
            &format!(
                "{} changes ({}), each timed from the change to every view's event; on views that pushed nothing for 300 ms (at most 5 pushes a second each); the source acknowledged the changes in p50 / max {:.0} / {:.0} ms; slowest change #{}: {:.0} ms, acknowledged after {:.0} ms; goal p99 < 100 ms",
                args.changes,
                C::ONE,
                percentile(&acked, 0.5),
                acked.last().copied().unwrap_or_default(),
                worst.0,
                worst.1,
                worst.2,
            ),
        ));
        drop(readers);

        // Slow readers: a chunk every 200 ms while the page keeps changing.
        let resyncs_before = resyncs(&http, &base).await?;
        let slow: Vec<_> = (0..clients)
            .map(|_| {
                let base = base.clone();
                tokio::spawn(async move {
                    let answer = reqwest::Client::new()
                        .get(format!("{base}/api/v1/events?limit=100"))
                        .send()
                        .await?;
                    let mut chunks = answer.bytes_stream();
                    let until = Instant::now() + Duration::from_secs(12);
                    let mut read = 0usize;
                    while Instant::now() < until {
                        match tokio::time::timeout(Duration::from_secs(1), chunks.next()).await {
                            Ok(Some(chunk)) => read += chunk?.len(),
                            Ok(None) => break,
                            Err(_) => {}
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    anyhow::Ok(read)
                })
            })
            .collect();
        let churn = async {
            let until = Instant::now() + Duration::from_secs(10);
            let (mut rounds, mut made) = (0u64, 0usize);
            while Instant::now() < until {
                rounds += 1;
                made += changes.round(rounds).await?;
                // A steady load of ~40 rounds a second rather than a flood: the readers,
                // lockscope and the source share two cores.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok((rounds, made))
        };
        let (churned, peak_slow) = peak_rss_while(pid, churn).await;
        let (rounds, made) = churned?;
        let mut read = 0usize;
        for s in slow {
            read += s.await.context("slow reader")??;
        }
        let resynced = resyncs(&http, &base).await? - resyncs_before;
        rows.push(row(
            section,
            &format!("{label}: {clients} slowly read views while the page changes, lockscope peak RSS"),
            format!("{:.0} MiB", peak_slow as f64 / 1024.0),
            &format!(
                "{rounds} rounds ({made} changes) in 10 s, each {}; readers took a chunk every 200 ms ({:.1} MB in all); {resynced} resyncs; goal bounded by a page per client",
                C::ROUND,
                read as f64 / 1e6
            ),
        ));
        streams.insert(
            clients.to_string(),
            json!({
                "first_event_ms": {"p50": percentile(&firsts, 0.5), "max": firsts[firsts.len() - 1]},
                "open_wall_ms": open_wall,
                "rss_ready_kib": rss_ready,
                "rss_peak_open_kib": peak_open,
                "reach_ms": {"p50": percentile(&reach, 0.5), "p99": percentile(&reach, 0.99), "each": reach_in_order},
                "acked_ms": {"p50": percentile(&acked, 0.5), "each": acked_in_order},
                "slowest_view_per_change_ms": slowest,
                "made_at_epoch_ms": made_at,
                "slow": {"rss_peak_kib": peak_slow, "rounds": rounds, "changes": made, "resyncs": resynced, "bytes_read": read},
            }),
        );
    }
    let browser = dashboard_rows(&mut rows, label, &base, ui, args.browser_runs).await;
    let mut figures = Map::new();
    figures.insert("pages".into(), Value::Object(pages));
    figures.insert("streams".into(), Value::Object(streams));
    figures.insert("browser".into(), browser);
    Ok((rows, figures))
}

/// The dashboard in Chromium against the lockscope at `base`: its rows, and its JSON figures.
/// A skipped or failed measurement is a row saying why, not an error of the section.
async fn dashboard_rows(
    rows: &mut Vec<Row>,
    label: &str,
    base: &str,
    ui: Result<std::path::PathBuf, String>,
    runs: usize,
) -> Value {
    let section = "viewers";
    let figure = format!("{label}: dashboard in Chromium, navigation → first rows");
    if let Err(why) = ui {
        eprintln!("viewers: dashboard in Chromium skipped: {why}");
        rows.push(row(section, &figure, "skipped".into(), &why));
        return json!({"skipped": why});
    }
    let measured = match super::browser::first_rows(base, runs, None).await {
        Ok(measured) => measured,
        Err(e) => {
            let why = format!("{e:#}");
            eprintln!("viewers: dashboard in Chromium failed: {why}");
            rows.push(row(section, &figure, "failed".into(), &why));
            return json!({"failed": why});
        }
    };
    let p50_max = |v: &[f64]| (percentile(v, 0.5), v[v.len() - 1]);
    let (cold, cold_max) = p50_max(&measured.cold_ms);
    let (warm, warm_max) = p50_max(&measured.warm_ms);
    let (js, js_max) = p50_max(&measured.js_heap_bytes);
    let (wasm, wasm_max) = p50_max(&measured.wasm_bytes);
    let shown = measured.cold_ms.len();
    let failed = if measured.failed.is_empty() {
        String::new()
    } else {
        format!(
            "; {} runs failed: {}",
            measured.failed.len(),
            measured.failed.join("; ")
        )
    };
    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    rows.push(row(
        section,
        &format!("{figure}, cold p50 / max"),
        format!("{cold:.0} / {cold_max:.0} ms"),
        &format!(
            "{shown} runs, each a fresh browser context (no cache); warm (same context, navigating again) {warm:.0} / {warm_max:.0} ms; timed to the first frame showing a row and the pager (\"{}\"); goal < 1 s{failed}",
            measured.range
        ),
    ));
    rows.push(row(
        section,
        &format!("{label}: dashboard in Chromium once its rows show, JS heap used / wasm memory, p50 / max"),
        format!(
            "{:.1} / {:.1} MiB; {:.1} / {:.1} MiB",
            mib(js),
            mib(js_max),
            mib(wasm),
            mib(wasm_max)
        ),
        "after a GC (CDP Performance.getMetrics JSHeapUsedSize); the wasm memory (where the UI's store lives) never shrinks: the most the page held; goal: only what it shows",
    ));
    json!({
        "runs": shown,
        "cold_ms": {"p50": cold, "max": cold_max},
        "warm_ms": {"p50": warm, "max": warm_max},
        "js_heap_used_bytes": {"p50": js, "max": js_max},
        "wasm_memory_bytes": {"p50": wasm, "max": wasm_max},
        "range": measured.range,
        "failed": measured.failed,
    })
}

/// `lockscope_view_resyncs_total` now.
async fn resyncs(http: &reqwest::Client, base: &str) -> Result<f64> {
    let text = super::metrics_text(http, base).await?;
    Ok(crate::harness::metric_value(&text, "lockscope_view_resyncs_total").unwrap_or(0.0))
}

pub async fn run(bin: &Path, dir: &Path, args: &ViewersArgs) -> Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    for &locks in args.locks.iter().filter(|&&locks| locks > 0) {
        eprintln!("viewers: {locks} Redis locks …");
        let (r, v) = redis_size(bin, dir, locks, args).await?;
        rows.extend(r);
        sizes.push(v);
    }
    if args.zk_nodes > 0 {
        eprintln!("viewers: {} ZooKeeper nodes …", args.zk_nodes);
        let (r, v) = zk_size(bin, dir, args.zk_nodes, args).await?;
        rows.extend(r);
        sizes.push(v);
    }
    Ok((rows, Value::Array(sizes)))
}
