//! `lockscope-bench` (`scripts/bench`): freshness, cost to the cluster, scale, expiry detection,
//! four-letter-word cost, a Redis overload, the sustained event rate per source, the
//! databases' polling cost and the core at size (memory per lock, bootstrap, `/metrics`, counts
//! and freshness against issue 19's goals) and the history store's cost (SQLite and
//! PostgreSQL: events/s, bytes per event, opening a lock with 100k events, pruning), on real ZooKeeper, Redis, etcd, MariaDB and
//! PostgreSQL servers on loopback, against the release `lockscope` binary
//! (`--only overload` runs one section). Prints a markdown table; writes the same figures as JSON.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Parser;
use lockscope_tests::bench::{
    self,
    core::CoreArgs,
    rate::RateArgs,
    redis::{OverloadArgs, RedisArgs},
    Row,
};
use serde_json::json;

#[derive(Debug, Parser)]
#[command(about = "Benchmark lockscope against real ZooKeeper, Redis and etcd servers")]
struct Args {
    /// The lockscope binary (scripts/bench builds it with --release).
    #[arg(long, default_value = "target/release/lockscope")]
    lockscope: PathBuf,
    /// Where to write the JSON figures.
    #[arg(long, default_value = "target/bench.json")]
    out: PathBuf,
    /// Acquire+release cycles for freshness and cost (two changes each), per backend.
    #[arg(long, default_value_t = 500)]
    cycles: usize,
    /// ZooKeeper scale: locks, and queued nodes per lock.
    #[arg(long, default_value_t = 10_000)]
    zk_locks: usize,
    #[arg(long, default_value_t = 10)]
    zk_queued_per_lock: usize,
    /// ZooKeeper bootstrap and memory (`zk-memory`): lock containers (each with
    /// `--zk-queued-per-lock` nodes) and ensemble members; a million nodes needs a larger
    /// ZooKeeper heap (`LOCKSCOPE_ZK_HEAP=2g`).
    #[arg(long, default_value_t = 10_000)]
    zk_memory_locks: usize,
    #[arg(long, default_value_t = 3)]
    zk_memory_members: usize,
    /// The data each queued node of `zk-memory` holds (empty: none). Curator writes the
    /// client's address (`10.1.2.3`), kazoo its identifier: lockscope reads data of 1–512
    /// bytes with one `getData` per node, which this measures against empty nodes.
    #[arg(long, default_value = "")]
    zk_node_data: String,
    /// Stream clients for the fan-out figure.
    #[arg(long, default_value_t = 50)]
    stream_clients: usize,
    /// Redis scale: keys in all, and lock keys among them.
    #[arg(long, default_value_t = 1_000_000)]
    redis_keys: usize,
    #[arg(long, default_value_t = 100_000)]
    redis_locks: usize,
    /// TTL locks left to expire.
    #[arg(long, default_value_t = 100)]
    expiring: usize,
    /// How long each poller runs.
    #[arg(long, default_value_t = 5)]
    poll_secs: u64,
    /// Redis overload: clients setting and deleting ever-new names as fast as they can, names
    /// per round trip, how long, and how long to wait for lockscope to catch up afterwards.
    #[arg(long, default_value_t = 2)]
    overload_clients: usize,
    #[arg(long, default_value_t = 16)]
    overload_depth: usize,
    #[arg(long, default_value_t = 30)]
    overload_secs: u64,
    #[arg(long, default_value_t = 180)]
    overload_settle_secs: u64,
    /// Sustained rate: clients per backend acquiring and releasing as fast as they can, lock
    /// names they pick from, how long each backend's burst lasts, and how long to wait
    /// afterwards for lockscope to equal the server.
    #[arg(long, default_value_t = 4)]
    rate_clients: usize,
    #[arg(long, default_value_t = 64)]
    rate_names: usize,
    #[arg(long, default_value_t = 20)]
    rate_secs: u64,
    #[arg(long, default_value_t = 60)]
    rate_settle_secs: u64,
    /// Databases: lockscope's poll interval, the CPU window, and advisory locks held at once.
    #[arg(long, default_value = "1s", value_parser = humantime_parse)]
    db_poll: std::time::Duration,
    #[arg(long, default_value_t = 10)]
    db_window_secs: u64,
    #[arg(long, default_value_t = 10_000)]
    db_advisory_locks: i64,
    /// Core at size: Redis keys and lock keys at the first size (memory, bootstrap, freshness),
    /// lock keys for the `/metrics` figure, keys and lock keys at the second size.
    #[arg(long, default_value_t = 1_000_000)]
    core_redis_keys: usize,
    #[arg(long, default_value_t = 100_000)]
    core_redis_locks: usize,
    #[arg(long, default_value_t = 200_000)]
    core_redis_metrics_locks: usize,
    #[arg(long, default_value_t = 10_000_000)]
    core_redis_big_keys: usize,
    #[arg(long, default_value_t = 1_000_000)]
    core_redis_big_locks: usize,
    /// Core at size: ZooKeeper lock containers and queued nodes per container (bootstrap,
    /// `/metrics`), nodes in all for the memory figure, and the members' JVM heap (the queued
    /// nodes and the heap also serve the viewers' ZooKeeper figures).
    #[arg(long, default_value_t = 10_000)]
    core_zk_locks: usize,
    #[arg(long, default_value_t = 10)]
    core_zk_queued_per_lock: usize,
    #[arg(long, default_value_t = 1_000_000)]
    core_zk_nodes: usize,
    #[arg(long, default_value = "2g")]
    core_zk_heap: String,
    /// Core at size: `GET /metrics` scrapes per figure (the median is reported).
    #[arg(long, default_value_t = 5)]
    core_scrapes: usize,
    /// Core at size: PostgreSQL sessions churning advisory locks (for --rate-secs, polled every
    /// --db-poll).
    #[arg(long, default_value_t = 16)]
    core_db_clients: usize,
    /// Viewers (issue 20): Redis lock counts (0 skips one), live views opened at once, and
    /// changes timed per view count.
    #[arg(long, value_delimiter = ',', default_values_t = [100_000, 1_000_000])]
    viewers_locks: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_values_t = [50, 200])]
    viewers_clients: Vec<usize>,
    #[arg(long, default_value_t = 20)]
    viewers_changes: usize,
    /// Viewers: dashboard loads in Chromium per lock count (each cold, then warm); 0 skips them.
    #[arg(long, default_value_t = 5)]
    viewers_browser_runs: usize,
    /// Viewers: measure the 100 views with different filters at each Redis lock count.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    viewers_distinct: bool,
    /// Viewers: ZooKeeper nodes on a 3-member ensemble, in the core section's layout (lock
    /// containers with --core-zk-queued-per-lock queued ephemeral sequential nodes each; the
    /// members' heap is --core-zk-heap); 0 skips them.
    #[arg(long, default_value_t = 1_000_000)]
    viewers_zk_nodes: usize,
    /// Store (issue 22), on SQLite and PostgreSQL: lock events recorded for the write rate and
    /// the lock ids they fall on, the events of the one lock opened over HTTP among them,
    /// events pruning must delete, events per second recorded meanwhile, and requests per
    /// HTTP figure.
    #[arg(long, default_value_t = 500_000)]
    store_events: usize,
    #[arg(long, default_value_t = 10_000)]
    store_locks: usize,
    #[arg(long, default_value_t = 100_000)]
    store_hot_events: usize,
    #[arg(long, default_value_t = 500_000)]
    store_prune: usize,
    #[arg(long, default_value_t = 2_000)]
    store_paced_rate: usize,
    #[arg(long, default_value_t = 40)]
    store_requests: usize,
    /// Idle client connections per database in the `db-connections` section.
    #[arg(long, default_value_t = 1_000)]
    db_connections: usize,
    /// Sections to run (zk, redis, zk-scale, zk-memory, overload, etcd, rate, db, core,
    /// viewers, store; `db-connections` only when named); all but that when not given.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

fn humantime_parse(text: &str) -> Result<std::time::Duration, String> {
    let ms = text
        .strip_suffix("ms")
        .map(|v| v.parse::<u64>().map_err(|e| e.to_string()))
        .or_else(|| {
            text.strip_suffix('s').map(|v| {
                v.parse::<u64>()
                    .map(|s| s * 1000)
                    .map_err(|e| e.to_string())
            })
        })
        .unwrap_or_else(|| Err(format!("{text:?}: use e.g. 1s or 200ms")))?;
    Ok(std::time::Duration::from_millis(ms))
}

impl Args {
    fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if !args.lockscope.exists() {
        bail!(
            "{} not found: cargo build --release -p lockscope",
            args.lockscope.display()
        );
    }
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let mut rows: Vec<Row> = Vec::new();
    let mut zk_fresh = serde_json::Value::Null;
    if args.runs("zk") {
        eprintln!("ZooKeeper freshness and cost …");
        let r;
        (r, zk_fresh) =
            bench::zk::freshness_and_cost(&args.lockscope, dir.path(), args.cycles).await?;
        rows.extend(r);
    }
    let mut redis = serde_json::Value::Null;
    if args.runs("redis") {
        eprintln!("Redis: load, scale, freshness, cost, expiry …");
        let redis_args = RedisArgs {
            keys: args.redis_keys,
            locks: args.redis_locks,
            churn: args.cycles,
            expiring: args.expiring,
            poll_secs: args.poll_secs,
        };
        let r;
        (r, redis) = bench::redis::run(&args.lockscope, dir.path(), &redis_args).await?;
        rows.extend(r);
    }
    let mut overload = serde_json::Value::Null;
    if args.runs("overload") {
        eprintln!("Redis overload: ever-new names as fast as Redis takes them …");
        let overload_args = OverloadArgs {
            clients: args.overload_clients,
            depth: args.overload_depth,
            secs: args.overload_secs,
            settle_secs: args.overload_settle_secs,
        };
        let r;
        (r, overload) = bench::redis::overload(&args.lockscope, dir.path(), &overload_args).await?;
        rows.extend(r);
    }
    let mut etcd = serde_json::Value::Null;
    if args.runs("etcd") {
        eprintln!("etcd freshness and requests per change …");
        let r;
        (r, etcd) = bench::etcd::run(&args.lockscope, dir.path(), args.cycles).await?;
        rows.extend(r);
    }
    let mut rate = serde_json::Value::Null;
    if args.runs("rate") {
        eprintln!("Sustained rate per source: ZooKeeper, Redis, etcd …");
        let rate_args = RateArgs {
            clients: args.rate_clients,
            names: args.rate_names,
            secs: args.rate_secs,
            settle_secs: args.rate_settle_secs,
        };
        let r;
        (r, rate) = bench::rate::run(&args.lockscope, dir.path(), &rate_args).await?;
        rows.extend(r);
    }
    let mut db = serde_json::Value::Null;
    if args.runs("db") {
        eprintln!("Databases: change → event, queries and server CPU, 10,000 advisory locks …");
        let db_args = bench::db::DbArgs {
            cycles: (args.cycles / 10).max(10),
            poll: args.db_poll,
            window: std::time::Duration::from_secs(args.db_window_secs),
            advisory_locks: args.db_advisory_locks,
        };
        let r;
        (r, db) = bench::db::run(&args.lockscope, dir.path(), &db_args).await?;
        rows.extend(r);
    }
    let mut db_connections = serde_json::Value::Null;
    // Not part of a run of every section: it opens a thousand connections per database.
    if args.only.iter().any(|s| s == "db-connections") {
        eprintln!(
            "Databases: the cost of the polls at {} connections …",
            args.db_connections
        );
        let r;
        (r, db_connections) = bench::db::run_connections(
            &args.lockscope,
            dir.path(),
            &bench::db::ConnectionsArgs {
                connections: args.db_connections,
                poll: args.db_poll,
                window: std::time::Duration::from_secs(args.db_window_secs),
            },
        )
        .await?;
        rows.extend(r);
    }
    let mut core = serde_json::Value::Null;
    if args.runs("core") {
        eprintln!("Core at size: memory per lock, bootstrap, /metrics, counts, freshness …");
        let core_args = CoreArgs {
            redis_keys: args.core_redis_keys,
            redis_locks: args.core_redis_locks,
            redis_metrics_locks: args.core_redis_metrics_locks,
            redis_big_keys: args.core_redis_big_keys,
            redis_big_locks: args.core_redis_big_locks,
            zk_locks: args.core_zk_locks,
            zk_queued_per_lock: args.core_zk_queued_per_lock,
            zk_nodes: args.core_zk_nodes,
            zk_heap: args.core_zk_heap.clone(),
            scrapes: args.core_scrapes,
            cycles: args.cycles,
            rate: RateArgs {
                clients: args.rate_clients,
                names: args.rate_names,
                secs: args.rate_secs,
                settle_secs: args.rate_settle_secs,
            },
            db_clients: args.core_db_clients,
            db_poll: args.db_poll,
        };
        let r;
        (r, core) = bench::core::run(&args.lockscope, dir.path(), &core_args).await?;
        rows.extend(r);
    }
    let mut viewers = serde_json::Value::Null;
    if args.runs("viewers") {
        eprintln!(
            "Viewers: pages, live views opening at once, changes reaching them, slow readers …"
        );
        let viewers_args = bench::viewers::ViewersArgs {
            locks: args.viewers_locks.clone(),
            zk_nodes: args.viewers_zk_nodes,
            zk_queued_per_lock: args.core_zk_queued_per_lock,
            zk_heap: args.core_zk_heap.clone(),
            clients: args.viewers_clients.clone(),
            changes: args.viewers_changes,
            browser_runs: args.viewers_browser_runs,
            distinct: args.viewers_distinct,
        };
        let r;
        (r, viewers) = bench::viewers::run(&args.lockscope, dir.path(), &viewers_args).await?;
        rows.extend(r);
    }
    let mut store = serde_json::Value::Null;
    if args.runs("store") {
        eprintln!("Store: write rate, bytes per event, a lock with 100k events, pruning …");
        let store_args = bench::store::StoreArgs {
            events: args.store_events,
            locks: args.store_locks,
            hot_events: args.store_hot_events,
            prune: args.store_prune,
            paced_rate: args.store_paced_rate,
            requests: args.store_requests,
        };
        let r;
        (r, store) = bench::store::run(&args.lockscope, dir.path(), &store_args).await?;
        rows.extend(r);
    }
    let mut zk_scale = serde_json::Value::Null;
    if args.runs("zk-scale") {
        eprintln!("ZooKeeper scale and four-letter-word cost …");
        let r;
        (r, zk_scale) = bench::zk::scale_and_fourlw(
            &args.lockscope,
            dir.path(),
            args.zk_locks,
            args.zk_queued_per_lock,
            args.stream_clients,
        )
        .await?;
        rows.extend(r);
    }
    let mut zk_memory = serde_json::Value::Null;
    if args.runs("zk-memory") {
        eprintln!("ZooKeeper bootstrap and memory per node …");
        let r;
        (r, zk_memory) = bench::zk::bootstrap_and_memory(
            &args.lockscope,
            dir.path(),
            args.zk_memory_locks,
            args.zk_queued_per_lock,
            args.zk_memory_members,
            args.zk_node_data.as_bytes(),
        )
        .await?;
        rows.extend(r);
    }
    rows.sort_by(|a, b| a.section.cmp(&b.section));

    println!("| section | figure | value | notes |\n|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} |",
            r.section, r.figure, r.value, r.note
        );
    }
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| t.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name\t: ").map(str::to_string))
        })
        .unwrap_or_default();
    let figures = json!({
        "machine": {"cpus": cpus, "model": model},
        "elapsed_s": started.elapsed().as_secs_f64(),
        "rows": rows,
        "zookeeper_freshness_cost": zk_fresh,
        "zookeeper_scale": zk_scale,
        "zookeeper_memory": zk_memory,
        "redis": redis,
        "redis_overload": overload,
        "etcd": etcd,
        "rate": rate,
        "databases": db,
        "core": core,
        "db_connections": db_connections,
        "viewers": viewers,
        "store": store,
    });
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&figures)?)?;
    eprintln!(
        "{} CPUs ({model}); done in {:.0} s; figures in {}",
        cpus,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}
