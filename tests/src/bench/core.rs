//! Core at size (`--only core`, issue 19): what lockscope's core costs and how well it counts at
//! the sizes of a big platform, each figure beside its goal, on real servers on loopback with
//! the release `lockscope` as its own process (a new one per measurement):
//!
//! * **memory per tracked lock** — `VmRSS` loaded minus `VmRSS` idle (the same binary watching
//!   an empty source), divided by the locks (Redis) or the mirrored nodes (ZooKeeper): Redis at
//!   100k locks among 1M keys and at 1M locks among 10M keys (token locks as redis-py leaves
//!   them, loaded as the Redis section loads them; noise keys with TTLs of an hour or two, so
//!   none expires during the run), ZooKeeper at 1M nodes on a 3-member ensemble (lock
//!   containers with 10 queued ephemeral sequential nodes each, as the scale section has them);
//!   goal ≤ 512 B;
//! * **bootstrap** — process start to `/readyz`: ZooKeeper 110k nodes, Redis 1M keys holding
//!   100k locks (goal < 3 s each), Redis 10M keys holding 1M locks (goal < 30 s);
//! * **`GET /metrics`** — at 10k ZooKeeper locks and 200k Redis locks, the median of a few
//!   scrapes (goal < 50 ms);
//! * **counts** — acquisitions and releases lockscope booked ÷ those real clients made, at each
//!   backend's sustained rate: ZooKeeper, Redis and etcd from the rate section
//!   ([`super::rate::run`]), PostgreSQL advisory locks here, once with every hold lasting until
//!   lockscope shows it (a database is polled: only what a poll sees can be counted) and once
//!   back to back, which shows that limit (goal ≥ 99 %);
//! * **freshness** — change → `/api/v1/events` p99 ÷ the bare notification's p99: Redis
//!   measured here at 100k locks among 1M keys ([`super::redis::freshness`]), ZooKeeper and
//!   etcd by their sections ([`super::zk::freshness_and_cost`], [`super::etcd::run`]) (goal ≤
//!   1.5×).
//!
//! Every step is bounded by a timeout, servers and lockscope processes are stopped when their
//! part ends (dropped), and a part that fails is a row saying so, so the other parts still run.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use super::rate::RateArgs;
use super::{cpu_s, percentile, row, settled_rss, sorted, start_lockscope, timed_get, Row};
use crate::harness::{eventually, source_sum, EventReader};
use crate::support::postgres::{self, Advisory, AdvisoryKey, Level, Postgres};
use crate::support::redis::{load_noise_range, RedisServer};

const SECTION: &str = "core";

/// Sizes of the core run; the defaults are issue 19's.
#[derive(Debug, Clone)]
pub struct CoreArgs {
    /// Redis, first size: keys in all and lock keys among them (memory, bootstrap, freshness).
    pub redis_keys: usize,
    pub redis_locks: usize,
    /// Redis lock keys for the `/metrics` figure.
    pub redis_metrics_locks: usize,
    /// Redis, second size: keys in all and lock keys among them (memory, bootstrap).
    pub redis_big_keys: usize,
    pub redis_big_locks: usize,
    /// ZooKeeper: lock containers and queued nodes per container for the bootstrap and
    /// `/metrics` figures (10,000 × (1 + 10) = 110,000 nodes).
    pub zk_locks: usize,
    pub zk_queued_per_lock: usize,
    /// ZooKeeper nodes for the memory figure (containers added until there are this many).
    pub zk_nodes: usize,
    /// The ZooKeeper members' JVM heap (`-Xmx`).
    pub zk_heap: String,
    /// `GET /metrics` scrapes per figure.
    pub scrapes: usize,
    /// Freshness: acquire+release cycles per backend.
    pub cycles: usize,
    /// The sustained rate (ZooKeeper, Redis, etcd: the rate section's own sizes).
    pub rate: RateArgs,
    /// PostgreSQL: sessions churning advisory locks, and lockscope's poll interval.
    pub db_clients: usize,
    pub db_poll: Duration,
}

/// `fut`, failing when it takes longer than `limit`.
async fn bounded<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .with_context(|| format!("{what}: not done within {limit:?}"))?
        .with_context(|| what.to_string())
}

/// A timeout for loading `n` keys or nodes: a minute plus one per `per_minute`.
fn for_items(n: usize, per_minute: usize) -> Duration {
    Duration::from_secs(60 + 60 * (n / per_minute.max(1)) as u64)
}

/// Memory per item: (loaded − idle) KiB × 1024 ÷ items.
fn per_item(loaded_kib: u64, idle_kib: u64, items: usize) -> f64 {
    loaded_kib.saturating_sub(idle_kib) as f64 * 1024.0 / items.max(1) as f64
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The machine's 1-minute load average now (the machine is shared: wall times follow it).
fn load_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// How a lockscope process came up: start to `/readyz`, the CPU time it had used by then (its
/// own work, whatever else runs on the machine), and the load average at that moment.
#[derive(Debug, Clone, Copy)]
struct Boot {
    wall: Duration,
    cpu_s: f64,
    load: f64,
}

impl Boot {
    fn of(pid: u32, wall: Duration) -> Boot {
        Boot {
            wall,
            cpu_s: cpu_s(pid).unwrap_or(f64::NAN),
            load: load_1m(),
        }
    }

    fn value(&self) -> String {
        format!("{:.2} s", self.wall.as_secs_f64())
    }

    fn note(&self) -> String {
        format!(
            "start → /readyz; lockscope CPU {:.2} s by then; load {:.1}",
            self.cpu_s, self.load
        )
    }

    fn json(&self) -> Value {
        json!({"s": self.wall.as_secs_f64(), "cpu_s": self.cpu_s, "load_1m": self.load})
    }
}

/// `GET /metrics` timed, one scrape after another.
#[derive(Debug, Clone)]
struct Scrapes {
    /// ms, in the order made.
    ms: Vec<f64>,
    bytes: usize,
    /// lockscope's CPU time per scrape, ms.
    cpu_ms: f64,
    load: f64,
}

impl Scrapes {
    async fn take(base: &str, pid: u32, n: usize) -> Result<Scrapes> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()?;
        let n = n.max(1);
        let mut ms = Vec::with_capacity(n);
        let mut bytes = 0;
        let cpu_before = cpu_s(pid).unwrap_or(f64::NAN);
        for _ in 0..n {
            let (b, t) = timed_get(&http, &format!("{base}/metrics")).await?;
            ms.push(t);
            bytes = b;
        }
        let cpu = cpu_s(pid).unwrap_or(f64::NAN) - cpu_before;
        Ok(Scrapes {
            ms,
            bytes,
            cpu_ms: cpu * 1000.0 / n as f64,
            load: load_1m(),
        })
    }

    fn median(&self) -> f64 {
        percentile(&sorted(self.ms.clone()), 0.5)
    }

    fn value(&self) -> String {
        format!("{:.0} ms", self.median())
    }

    fn note(&self) -> String {
        format!(
            "median of {} scrapes one after another (in order: {} ms); lockscope CPU {:.0} ms per scrape; {:.0} KB, label cap 500; load {:.1}; goal < 50 ms",
            self.ms.len(),
            self.ms
                .iter()
                .map(|ms| format!("{ms:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.cpu_ms,
            self.bytes as f64 / 1e3,
            self.load
        )
    }

    fn json(&self) -> Value {
        json!({"ms_in_order": self.ms, "ms_median": self.median(), "bytes": self.bytes, "cpu_ms_per_scrape": self.cpu_ms, "load_1m": self.load})
    }
}

/// A row that says a part failed, and why.
fn failed(what: &str, e: &anyhow::Error) -> Row {
    row(SECTION, what, "failed".into(), &format!("{e:#}"))
}

/// Redis at its three sizes on one server, grown step by step.
async fn redis_at_size(bin: &Path, dir: &Path, args: &CoreArgs) -> Result<(Vec<Row>, Value)> {
    ensure!(
        args.redis_locks <= args.redis_metrics_locks
            && args.redis_metrics_locks <= args.redis_big_locks,
        "--core-redis-locks ≤ --core-redis-metrics-locks ≤ --core-redis-big-locks"
    );
    ensure!(
        args.redis_locks <= args.redis_keys && args.redis_big_locks <= args.redis_big_keys,
        "lock keys are among the keys: --core-redis-locks ≤ --core-redis-keys, --core-redis-big-locks ≤ --core-redis-big-keys"
    );
    let start = |name: &'static str, url: String| async move {
        bounded(
            &format!("lockscope {name} ready"),
            Duration::from_secs(600),
            super::redis::start_redis_lockscope(bin, dir, &url, name),
        )
        .await
    };
    // Noise keys: TTLs of one to two hours, so that none expires during the run.
    let noise_ttl = 3_600_000..7_200_000;
    let mut rows = Vec::new();

    let empty = RedisServer::start().await?;
    let (idle, _, _) = start("core-redis-idle", empty.url()).await?;
    let idle_rss = settled_rss(idle.0.id()).await?;
    drop(idle);
    drop(empty);

    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;

    // 1M keys holding 100k locks: bootstrap, memory, freshness.
    let t = Instant::now();
    bounded(
        "load the first size",
        for_items(args.redis_keys, 1_000_000),
        async {
            load_noise_range(
                &mut conn,
                0..args.redis_keys - args.redis_locks,
                noise_ttl.clone(),
            )
            .await?;
            super::redis::load_locks(&mut conn, 0..args.redis_locks).await
        },
    )
    .await?;
    let keys_1 = redis::cmd("DBSIZE").query_async::<u64>(&mut conn).await?;
    eprintln!("core: Redis {keys_1} keys loaded in {:?}", t.elapsed());
    reset_stats(&mut conn).await?;
    let (lockscope, base, wall) = start("core-redis-1", server.url()).await?;
    let bootstrap_1 = Boot::of(lockscope.0.id(), wall);
    let busy_1 = redis_busy_s(&mut conn).await?;
    let rss_1 = settled_rss(lockscope.0.id()).await?;
    let per_lock_1 = per_item(rss_1, idle_rss, args.redis_locks);
    let (latencies, floor, _) = bounded(
        "Redis freshness",
        Duration::from_secs(60 + args.cycles as u64),
        async {
            let mut events = EventReader::connect(&base).await?;
            let (name, _) = events.next(Duration::from_secs(120)).await?;
            ensure!(name == "snapshot", "first event {name}");
            super::redis::freshness(&server, &mut conn, &mut events, "core-redis-1", args.cycles)
                .await
        },
    )
    .await?;
    drop(lockscope);
    let (latencies, floor) = (sorted(latencies), sorted(floor));
    let ratio = percentile(&latencies, 0.99) / percentile(&floor, 0.99);

    // 200k locks: `/metrics`.
    bounded(
        "load the /metrics size",
        for_items(args.redis_metrics_locks, 1_000_000),
        super::redis::load_locks(&mut conn, args.redis_locks..args.redis_metrics_locks),
    )
    .await?;
    let (lockscope, base, _) = start("core-redis-metrics", server.url()).await?;
    let scraped = bounded(
        "Redis /metrics scrapes",
        Duration::from_secs(60 * args.scrapes.max(1) as u64),
        Scrapes::take(&base, lockscope.0.id(), args.scrapes),
    )
    .await?;
    drop(lockscope);

    // 10M keys holding 1M locks: bootstrap, memory.
    let t = Instant::now();
    bounded(
        "load the second size",
        for_items(args.redis_big_keys, 1_000_000),
        async {
            load_noise_range(
                &mut conn,
                args.redis_keys - args.redis_locks..args.redis_big_keys - args.redis_big_locks,
                noise_ttl.clone(),
            )
            .await?;
            super::redis::load_locks(&mut conn, args.redis_metrics_locks..args.redis_big_locks)
                .await
        },
    )
    .await?;
    let keys_2 = redis::cmd("DBSIZE").query_async::<u64>(&mut conn).await?;
    let redis_memory = redis_used_memory(&mut conn).await.unwrap_or(0);
    eprintln!(
        "core: Redis {keys_2} keys loaded in {:?} ({:.0} MiB)",
        t.elapsed(),
        redis_memory as f64 / (1 << 20) as f64
    );
    reset_stats(&mut conn).await?;
    let (lockscope, _, wall) = start("core-redis-2", server.url()).await?;
    let bootstrap_2 = Boot::of(lockscope.0.id(), wall);
    let busy_2 = redis_busy_s(&mut conn).await?;
    let rss_2 = settled_rss(lockscope.0.id()).await?;
    let per_lock_2 = per_item(rss_2, idle_rss, args.redis_big_locks);
    drop(lockscope);
    drop(server);

    let rss_text = |loaded: u64, per: f64| {
        (
            format!("{per:.0} B"),
            format!(
                "RSS idle {:.1} MiB, loaded {:.1} MiB; goal ≤ 512 B",
                mib(idle_rss),
                mib(loaded)
            ),
        )
    };
    let (v, n) = rss_text(rss_1, per_lock_1);
    rows.push(row(
        SECTION,
        &format!(
            "Redis: memory per tracked lock at {} locks ({keys_1} keys)",
            args.redis_locks
        ),
        v,
        &n,
    ));
    let (v, n) = rss_text(rss_2, per_lock_2);
    rows.push(row(
        SECTION,
        &format!(
            "Redis: memory per tracked lock at {} locks ({keys_2} keys)",
            args.redis_big_locks
        ),
        v,
        &n,
    ));
    rows.push(row(
        SECTION,
        &format!(
            "Redis bootstrap: {keys_1} keys holding {} locks",
            args.redis_locks
        ),
        bootstrap_1.value(),
        &format!(
            "{}; Redis's own time {busy_1:.2} s (`INFO commandstats`), the bootstrap {:.2}× it; goal ≤ 1.2×",
            bootstrap_1.note(),
            bootstrap_1.wall.as_secs_f64() / busy_1
        ),
    ));
    rows.push(row(
        SECTION,
        &format!(
            "Redis bootstrap: {keys_2} keys holding {} locks",
            args.redis_big_locks
        ),
        bootstrap_2.value(),
        &format!(
            "{}; Redis used {:.0} MiB; Redis's own time {busy_2:.2} s (`INFO commandstats`), the bootstrap {:.2}× it; goal < 30 s and ≤ 1.2×",
            bootstrap_2.note(),
            redis_memory as f64 / (1 << 20) as f64,
            bootstrap_2.wall.as_secs_f64() / busy_2
        ),
    ));
    rows.push(row(
        SECTION,
        &format!("GET /metrics at {} Redis locks", args.redis_metrics_locks),
        scraped.value(),
        &scraped.note(),
    ));
    rows.push(row(
        SECTION,
        "Redis: change → event p99 ÷ bare notification p99",
        format!("{ratio:.2}×"),
        &format!(
            "{:.2} / {:.2} ms p99 (p50 {:.2} / {:.2}); {} changes, {} locks among {keys_1} keys; goal ≤ 1.5×",
            percentile(&latencies, 0.99),
            percentile(&floor, 0.99),
            percentile(&latencies, 0.5),
            percentile(&floor, 0.5),
            latencies.len(),
            args.redis_locks
        ),
    ));
    let figures = json!({
        "rss_idle_kib": idle_rss,
        "first": {"keys": keys_1, "locks": args.redis_locks, "bootstrap": bootstrap_1.json(), "redis_busy_s": busy_1, "rss_kib": rss_1, "bytes_per_lock": per_lock_1},
        "second": {"keys": keys_2, "locks": args.redis_big_locks, "bootstrap": bootstrap_2.json(), "redis_busy_s": busy_2, "rss_kib": rss_2, "bytes_per_lock": per_lock_2, "redis_used_memory": redis_memory},
        "metrics": {"locks": args.redis_metrics_locks, "scrapes": scraped.json()},
        "freshness": {"changes": latencies.len(), "p50_ms": percentile(&latencies, 0.5), "p99_ms": percentile(&latencies, 0.99), "floor_p50_ms": percentile(&floor, 0.5), "floor_p99_ms": percentile(&floor, 0.99), "p99_ratio": ratio},
    });
    Ok((rows, figures))
}

/// Zeroes Redis's command statistics (`CONFIG RESETSTAT`).
async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) -> Result<()> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await
        .context("CONFIG RESETSTAT")
}

/// The time Redis spent on a first read since the last [`reset_stats`] (`INFO commandstats`),
/// seconds: its `SCAN`s and read scripts (a script's time holds the commands it ran, which
/// commandstats lists again on their own, so only the scripts are summed).
async fn redis_busy_s(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let usec: u64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(name, _)| {
            matches!(
                *name,
                "scan" | "evalsha" | "evalsha_ro" | "eval" | "eval_ro" | "fcall" | "fcall_ro"
            )
        })
        .filter_map(|(_, rest)| {
            rest.split(',')
                .find_map(|f| f.strip_prefix("usec="))?
                .parse::<u64>()
                .ok()
        })
        .sum();
    Ok(usec as f64 / 1e6)
}

/// Redis's `used_memory` (`INFO memory`), bytes.
async fn redis_used_memory(conn: &mut redis::aio::MultiplexedConnection) -> Result<u64> {
    let text: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    text.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory")
}

/// ZooKeeper at its two sizes on one 3-member ensemble, grown step by step.
async fn zk_at_size(bin: &Path, dir: &Path, args: &CoreArgs) -> Result<(Vec<Row>, Value)> {
    let per_node = 1 + args.zk_queued_per_lock;
    ensure!(
        args.zk_locks > 0 && args.zk_locks * per_node <= args.zk_nodes,
        "--core-zk-locks × (1 + --core-zk-queued-per-lock) ≤ --core-zk-nodes"
    );
    let zk = super::zk::big_ensemble(&args.zk_heap).await?;
    let connect = zk.connect_string();
    let root = "/core";
    let config = super::zk::config(&connect, root);
    let setup = super::zk::client(&connect).await?;
    setup.create(root, b"", &super::zk::open()).await?;
    let start = |name: &'static str| {
        let config = config.clone();
        async move {
            bounded(
                &format!("lockscope {name} ready"),
                Duration::from_secs(600),
                start_lockscope(bin, dir, name, &config),
            )
            .await
        }
    };

    let (idle, _, _) = start("core-zk-idle").await?;
    let idle_rss = settled_rss(idle.0.id()).await?;
    drop(idle);

    let mut owners = Vec::new();
    for _ in 0..10 {
        owners.push(super::zk::client(&connect).await?);
    }
    let grow = async |from: usize, to: usize| {
        super::zk::grow(&setup, &owners, root, (from, to), args.zk_queued_per_lock).await
    };

    // 10k locks, 110k nodes: bootstrap, `/metrics`, memory.
    let t = Instant::now();
    let small_nodes = args.zk_locks * per_node;
    bounded(
        "create the first size",
        for_items(small_nodes, 60_000),
        grow(0, args.zk_locks),
    )
    .await?;
    eprintln!("core: ZooKeeper {small_nodes} nodes in {:?}", t.elapsed());
    let (lockscope, base, wall) = start("core-zk-1").await?;
    let bootstrap_1 = Boot::of(lockscope.0.id(), wall);
    let rss_1 = settled_rss(lockscope.0.id()).await?;
    let scraped = bounded(
        "ZooKeeper /metrics scrapes",
        Duration::from_secs(60 * args.scrapes.max(1) as u64),
        Scrapes::take(&base, lockscope.0.id(), args.scrapes),
    )
    .await?;
    drop(lockscope);

    // 1M nodes: memory (and bootstrap, not a goal).
    let big_locks = args.zk_nodes.div_ceil(per_node);
    let big_nodes = big_locks * per_node;
    let t = Instant::now();
    bounded(
        "create the second size",
        for_items(big_nodes, 60_000),
        grow(args.zk_locks, big_locks),
    )
    .await?;
    eprintln!("core: ZooKeeper {big_nodes} nodes in {:?}", t.elapsed());
    let (lockscope, _, wall) = start("core-zk-2").await?;
    let bootstrap_2 = Boot::of(lockscope.0.id(), wall);
    let rss_2 = settled_rss(lockscope.0.id()).await?;
    drop(lockscope);
    drop(owners);
    drop(zk);

    let per_node_1 = per_item(rss_1, idle_rss, small_nodes);
    let per_node_2 = per_item(rss_2, idle_rss, big_nodes);
    let shape = format!(
        "{} queued ephemeral sequential nodes per lock container, 10 owner sessions, 3-member ensemble",
        args.zk_queued_per_lock
    );
    let rows = vec![
        row(
            SECTION,
            &format!(
                "ZooKeeper: memory per mirrored node at {big_nodes} nodes ({big_locks} locks)"
            ),
            format!("{per_node_2:.0} B"),
            &format!(
                "RSS idle {:.1} MiB, loaded {:.1} MiB; {shape}; goal ≤ 512 B",
                mib(idle_rss),
                mib(rss_2)
            ),
        ),
        row(
            SECTION,
            &format!("ZooKeeper: memory per mirrored node at {small_nodes} nodes (not a goal)"),
            format!("{per_node_1:.0} B"),
            &format!("RSS loaded {:.1} MiB", mib(rss_1)),
        ),
        row(
            SECTION,
            &format!(
                "ZooKeeper bootstrap: {small_nodes} nodes ({} locks)",
                args.zk_locks
            ),
            bootstrap_1.value(),
            &format!("{}; goal < 3 s", bootstrap_1.note()),
        ),
        row(
            SECTION,
            &format!("ZooKeeper bootstrap: {big_nodes} nodes (not a goal)"),
            bootstrap_2.value(),
            &bootstrap_2.note(),
        ),
        row(
            SECTION,
            &format!(
                "GET /metrics at {} ZooKeeper locks ({small_nodes} nodes)",
                args.zk_locks
            ),
            scraped.value(),
            &scraped.note(),
        ),
    ];
    let figures = json!({
        "rss_idle_kib": idle_rss,
        "first": {"locks": args.zk_locks, "nodes": small_nodes, "bootstrap": bootstrap_1.json(), "rss_kib": rss_1, "bytes_per_node": per_node_1},
        "second": {"locks": big_locks, "nodes": big_nodes, "bootstrap": bootstrap_2.json(), "rss_kib": rss_2, "bytes_per_node": per_node_2},
        "metrics": {"locks": args.zk_locks, "scrapes": scraped.json()},
        "heap": args.zk_heap,
    });
    Ok((rows, figures))
}

/// Acquisitions and releases one PostgreSQL client made.
#[derive(Debug, Default, Clone, Copy)]
struct Made {
    acquired: u64,
    released: u64,
}

/// Advisory keys each PostgreSQL client takes in turn.
const KEYS_EACH: usize = 4;

/// How each PostgreSQL client holds a lock.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hold {
    /// Until lockscope shows this session holding it: a poll saw the hold.
    UntilShown,
    /// Not at all: unlocked right after locking (one round trip).
    BackToBack,
}

/// Whether lockscope (at `base`) shows the advisory lock `key` of source `source` held by the
/// PostgreSQL backend `pid`.
async fn shown_holding(
    http: &reqwest::Client,
    base: &str,
    source: &str,
    key: i64,
    pid: i64,
) -> Result<bool> {
    let id = lockscope_model::id::lock_id(source, &format!("/advisory/postgres/{key}"));
    let resp = http.get(format!("{base}/api/v1/locks/{id}")).send().await?;
    if !resp.status().is_success() {
        return Ok(false);
    }
    let detail: Value = resp.json().await?;
    let node = lockscope_model::database::conn_id(pid);
    Ok(detail["gone"] != true
        && detail["holders"]
            .as_array()
            .is_some_and(|h| h.iter().any(|h| h["node"] == node.as_str())))
}

/// What every PostgreSQL client of one burst shares.
#[derive(Debug, Clone)]
struct PgChurn {
    url: String,
    /// lockscope's base URL and the source's name in it.
    base: String,
    source: &'static str,
    clients: usize,
    /// The first advisory key of the burst.
    first: i64,
    poll: Duration,
    hold: Hold,
    until: Instant,
}

/// Client `c` of `churn`: its own session, session-level advisory locks on its own keys
/// (`first + c + clients × n`, in turn, so the next lock is never the one just let go), locked,
/// held as `hold` says, unlocked, until `until`.
async fn pg_client(churn: PgChurn, c: usize) -> Result<Made> {
    let PgChurn {
        url,
        base,
        source,
        clients,
        first,
        poll,
        hold,
        until,
    } = churn;
    let mut session = Advisory::open(postgres::connect(&url, &format!("core-{c}")).await?).await?;
    let pid = session.pid();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut made = Made::default();
    for n in 0.. {
        let key = first + (c + clients * (n % KEYS_EACH)) as i64;
        session.lock(AdvisoryKey::Big(key), Level::Session, false);
        session.wait_acquired(Duration::from_secs(10)).await?;
        made.acquired += 1;
        if hold == Hold::UntilShown {
            eventually(
                poll * 10 + Duration::from_secs(10),
                &format!("lockscope shows conn {pid} holding advisory {key}"),
                async || {
                    Ok(shown_holding(&http, &base, source, key, pid)
                        .await?
                        .then_some(()))
                },
            )
            .await?;
        }
        ensure!(
            session.unlock(AdvisoryKey::Big(key), false).await?,
            "unlock {key}: not held"
        );
        made.released += 1;
        if Instant::now() >= until {
            break;
        }
    }
    Ok(made)
}

/// lockscope's booked acquisitions and releases of `source` (every lock and cause summed) and
/// its poll rounds, from one scrape.
async fn pg_booked(http: &reqwest::Client, base: &str, source: &str) -> Result<(f64, f64, f64)> {
    let text = super::metrics_text(http, base).await?;
    let rounds = crate::harness::metric_value(
        &text,
        &format!("lockscope_db_rounds_total{{source=\"{source}\",backend=\"postgres\"}}"),
    )
    .context("no lockscope_db_rounds_total")?;
    Ok((
        source_sum(&text, "lockscope_lock_acquisitions_total", source),
        source_sum(&text, "lockscope_lock_releases_total", source),
        rounds,
    ))
}

/// PostgreSQL advisory locks churned by `--core-db-clients` sessions for `--rate-secs`, once
/// held until shown and once back to back, against one lockscope polling every `db_poll`.
async fn pg_counts(bin: &Path, dir: &Path, args: &CoreArgs) -> Result<(Vec<Row>, Value)> {
    let source = "pg";
    let pg = Postgres::start().await?;
    let url = pg.url();
    let (lockscope, base, _) = bounded(
        "lockscope (PostgreSQL) ready",
        Duration::from_secs(120),
        start_lockscope(
            bin,
            dir,
            "core-pg",
            &format!(
                "[metrics]\nmax_lock_labels = 500\n[[postgres]]\nname = \"{source}\"\nurl = \"{url}\"\npoll_interval = \"{}ms\"\n",
                args.db_poll.as_millis()
            ),
        ),
    )
    .await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let mut rows = Vec::new();
    let mut figures = serde_json::Map::new();
    for (hold, first, name) in [
        (Hold::UntilShown, 1_000_i64, "held until shown"),
        (Hold::BackToBack, 2_000_i64, "back to back"),
    ] {
        let (acq_0, rel_0, _) = pg_booked(&http, &base, source).await?;
        let started = Instant::now();
        let until = started + Duration::from_secs(args.rate.secs);
        let churn = PgChurn {
            url: url.clone(),
            base: base.clone(),
            source,
            clients: args.db_clients,
            first,
            poll: args.db_poll,
            hold,
            until,
        };
        // The clients run concurrently in this task (their waits hold borrows a spawned task
        // could not).
        let all = futures::future::try_join_all(
            (0..args.db_clients).map(|c| pg_client(churn.clone(), c)),
        );
        let made = tokio::time::timeout_at(
            (until + args.db_poll * 10 + Duration::from_secs(30)).into(),
            all,
        )
        .await
        .context("a PostgreSQL client still running long after the burst")??
        .into_iter()
        .fold(Made::default(), |a, m| Made {
            acquired: a.acquired + m.acquired,
            released: a.released + m.released,
        });
        let window = started.elapsed().as_secs_f64();
        let ended = Instant::now();
        // Settled: every hold was let go, so once two full rounds have run after the end every
        // change a poll could see is booked. Held until shown, the booking must also equal what
        // the clients made (bounded by --rate-settle-secs).
        let (_, _, rounds_end) = pg_booked(&http, &base, source).await?;
        let mut last = (0.0, 0.0);
        let equal = eventually(
            Duration::from_secs(args.rate.settle_secs),
            "PostgreSQL counts settled",
            async || {
                let (acq, rel, rounds) = pg_booked(&http, &base, source).await?;
                last = (acq - acq_0, rel - rel_0);
                let settled = rounds >= rounds_end + 2.0;
                let exact = last.0 == made.acquired as f64 && last.1 == made.released as f64;
                Ok((settled && (exact || hold == Hold::BackToBack)).then(|| ended.elapsed()))
            },
        )
        .await;
        let (acquisitions, releases) = last;
        let settled_note = match &equal {
            Ok(d) if hold == Hold::UntilShown => {
                format!("equal {:.1} s after the burst", d.as_secs_f64())
            }
            Ok(_) => "read two poll rounds after the burst".to_string(),
            Err(_) => format!("not equal within {} s", args.rate.settle_secs),
        };
        let goal = match hold {
            Hold::UntilShown => "goal ≥ 99 %",
            Hold::BackToBack => {
                "not a goal: a hold that begins and ends between two polls is not seen, so it cannot be counted"
            }
        };
        rows.push(row(
            SECTION,
            &format!("PostgreSQL ({name}): acquisitions / releases booked ÷ made"),
            format!(
                "{:.1} / {:.1} %",
                acquisitions / made.acquired.max(1) as f64 * 100.0,
                releases / made.released.max(1) as f64 * 100.0
            ),
            &format!(
                "{acquisitions:.0} of {} acquisitions, {releases:.0} of {} releases, {:.1} changes/s by {} sessions over {} advisory locks in {window:.1} s, poll every {} ms; {settled_note}; {goal}",
                made.acquired,
                made.released,
                (made.acquired + made.released) as f64 / window,
                args.db_clients,
                args.db_clients * KEYS_EACH,
                args.db_poll.as_millis()
            ),
        ));
        figures.insert(
            name.replace(' ', "_"),
            json!({
                "acquired": made.acquired, "released": made.released,
                "acquisitions_booked": acquisitions, "releases_booked": releases,
                "window_s": window, "changes_per_s": (made.acquired + made.released) as f64 / window,
                "settled_s": equal.as_ref().ok().map(|d| d.as_secs_f64()),
            }),
        );
    }
    drop(lockscope);
    drop(pg);
    figures.insert("clients".into(), json!(args.db_clients));
    figures.insert("poll_ms".into(), json!(args.db_poll.as_millis() as u64));
    Ok((rows, Value::Object(figures)))
}

/// Booked ÷ made for ZooKeeper, Redis and etcd, from the rate section's figures.
fn rate_rows(rate: &Value, args: &RateArgs) -> Vec<Row> {
    ["zookeeper", "redis", "etcd"]
        .iter()
        .filter_map(|backend| {
            let f = &rate[*backend];
            let num = |k: &str| f[k].as_f64();
            let (acquired, released) = (num("acquired")?, num("released")?);
            let (acq, rel) = (num("acquisitions_booked")?, num("releases_booked")?);
            let name = lockscope_model::wire::Backend::ALL
                .iter()
                .find(|b| b.as_str() == *backend)
                .map_or(*backend, |b| b.display_name());
            Some(row(
                SECTION,
                &format!("{name}: acquisitions / releases booked ÷ made"),
                format!(
                    "{:.1} / {:.1} %",
                    acq / acquired.max(1.0) * 100.0,
                    rel / released.max(1.0) * 100.0
                ),
                &format!(
                    "{acq:.0} of {acquired:.0} acquisitions, {rel:.0} of {released:.0} releases at {:.0} changes/s ({} clients over {} names, {} s; the rate section's run); goal ≥ 99 %",
                    num("changes_per_s").unwrap_or(f64::NAN),
                    args.clients,
                    args.names,
                    args.secs
                ),
            ))
        })
        .collect()
}

/// The freshness ratio of a section's figures: p99 ÷ floor p99, with both.
fn freshness_row(name: &str, p99: Option<f64>, floor_p99: Option<f64>, note: &str) -> Option<Row> {
    let (p99, floor) = (p99?, floor_p99?);
    Some(row(
        SECTION,
        &format!("{name}: change → event p99 ÷ bare notification p99"),
        format!("{:.2}×", p99 / floor),
        &format!("{p99:.2} / {floor:.2} ms p99; {note}; goal ≤ 1.5×"),
    ))
}

pub async fn run(bin: &Path, dir: &Path, args: &CoreArgs) -> Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    let mut figures = serde_json::Map::new();

    eprintln!("core: Redis at size …");
    match redis_at_size(bin, dir, args).await {
        Ok((r, f)) => {
            rows.extend(r);
            figures.insert("redis".into(), f);
        }
        Err(e) => rows.push(failed("Redis at size", &e)),
    }

    eprintln!("core: ZooKeeper at size …");
    match zk_at_size(bin, dir, args).await {
        Ok((r, f)) => {
            rows.extend(r);
            figures.insert("zookeeper".into(), f);
        }
        Err(e) => rows.push(failed("ZooKeeper at size", &e)),
    }

    eprintln!("core: ZooKeeper freshness (its section) …");
    match bounded(
        "ZooKeeper freshness",
        Duration::from_secs(300 + args.cycles as u64),
        super::zk::freshness_and_cost(bin, dir, args.cycles),
    )
    .await
    {
        Ok((_, f)) => {
            rows.extend(freshness_row(
                "ZooKeeper",
                f["latency_ms"]["p99"].as_f64(),
                f["floor_ms"]["p99"].as_f64(),
                &format!(
                    "{:.0} changes on a 3-member ensemble (the ZooKeeper section's run)",
                    f["changes"].as_f64().unwrap_or(f64::NAN)
                ),
            ));
            figures.insert("zookeeper_freshness".into(), f);
        }
        Err(e) => rows.push(failed("ZooKeeper freshness", &e)),
    }

    eprintln!("core: etcd freshness (its section) …");
    match bounded(
        "etcd freshness",
        Duration::from_secs(300 + args.cycles as u64),
        super::etcd::run(bin, dir, args.cycles),
    )
    .await
    {
        Ok((_, f)) => {
            rows.extend(freshness_row(
                "etcd",
                f["p99_ms"].as_f64(),
                f["floor_p99_ms"].as_f64(),
                &format!(
                    "{:.0} changes on one member (the etcd section's run)",
                    f["changes"].as_f64().unwrap_or(f64::NAN)
                ),
            ));
            figures.insert("etcd_freshness".into(), f);
        }
        Err(e) => rows.push(failed("etcd freshness", &e)),
    }

    eprintln!("core: counts at the sustained rate (the rate section) …");
    match bounded(
        "sustained rate",
        Duration::from_secs(3 * (args.rate.secs + 2 * args.rate.settle_secs + 120)),
        super::rate::run(bin, dir, &args.rate),
    )
    .await
    {
        Ok((_, f)) => {
            rows.extend(rate_rows(&f, &args.rate));
            figures.insert("rate".into(), f);
        }
        Err(e) => rows.push(failed("sustained rate", &e)),
    }

    eprintln!("core: PostgreSQL counts …");
    match bounded(
        "PostgreSQL counts",
        Duration::from_secs(2 * (args.rate.secs + args.rate.settle_secs + 120)),
        pg_counts(bin, dir, args),
    )
    .await
    {
        Ok((r, f)) => {
            rows.extend(r);
            figures.insert("postgres".into(), f);
        }
        Err(e) => rows.push(failed("PostgreSQL counts", &e)),
    }
    Ok((rows, Value::Object(figures)))
}
