//! `lockscope-bench-redis`: what lockscope costs and how fresh it is on a real Redis with 1M keys.
//!
//! Starts a Redis on loopback, loads `--keys` keys of which `--locks` are token locks, runs the
//! release `lockscope` binary against it as a separate process, and measures, in one run:
//! bootstrap time, resident memory per tracked lock (against an idle lockscope), `/metrics` and
//! `/api/v1/locks` time and size, commands lockscope sends to Redis per lock change under churn
//! (server-side `INFO commandstats`), change-to-event latency (a lock change until its
//! `/api/v1/events` message), and TTL-expiry detection against Redis's own `expired`
//! notifications. Prints a markdown table; writes the figures as JSON. No assertion: figures.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use futures::StreamExt;
use lockscope_model::wire::StreamEvent;
use lockscope_tests::harness::EventReader;
use lockscope_tests::redis_recipes as rr;
use lockscope_tests::support::redis::{load_noise, RedisServer};
use serde_json::json;

#[derive(Debug, Parser)]
#[command(about = "Benchmark lockscope's Redis collector on a real Redis")]
struct Args {
    /// The lockscope binary (build with `cargo build --release`).
    #[arg(long, default_value = "target/release/lockscope")]
    lockscope: PathBuf,
    /// Keys in Redis in all, locks included.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Token locks among them.
    #[arg(long, default_value_t = 100_000)]
    locks: usize,
    /// Acquire+release cycles for the churn and latency figures (2 changes each).
    #[arg(long, default_value_t = 1_000)]
    churn: usize,
    /// TTL locks left to expire.
    #[arg(long, default_value_t = 100)]
    expiring: usize,
    /// Where to write the JSON figures.
    #[arg(long, default_value = "target/bench-redis.json")]
    out: PathBuf,
}

struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

fn free_port() -> u16 {
    lockscope_tests::support::ports::free_port()
}

/// Starts lockscope on `redis_url`, waits for /readyz; returns the process, base URL and the time
/// it took to be ready.
async fn start_lockscope(
    bin: &PathBuf,
    dir: &std::path::Path,
    redis_url: &str,
    name: &str,
) -> Result<(Process, String, Duration)> {
    let port = free_port();
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\n[metrics]\nmax_lock_labels = 500\n[[redis]]\nname = \"{name}\"\nurl = \"{redis_url}\"\npatterns = [\"lock:*\"]\n# Steady state: no reconcile scan inside the measured windows.\nreconcile_interval = \"1h\"\n"
        ),
    )?;
    let started = Instant::now();
    let child = std::process::Command::new(bin)
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            dir.join(format!("{name}.log")),
        )?))
        .spawn()
        .with_context(|| format!("start {}", bin.display()))?;
    let process = Process(child);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    loop {
        if let Ok(resp) = http.get(format!("{base}/readyz")).send().await {
            if resp.status().is_success() {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("lockscope not ready after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((process, base, started.elapsed()))
}

async fn commandstats(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<BTreeMap<String, u64>> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

fn id_of(source: &str, key: &str) -> String {
    lockscope_model::id::lock_id(source, &format!("/{key}"))
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
    let dir = tempfile::tempdir()?;
    let mut figures = serde_json::Map::new();

    // Idle baseline: lockscope watching an empty Redis.
    let empty = RedisServer::start().await?;
    let (idle, _, _) = start_lockscope(&args.lockscope, dir.path(), &empty.url(), "idle").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = rss_kib(idle.0.id())?;
    drop(idle);
    drop(empty);

    // Load.
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    let load_started = Instant::now();
    load_noise(&mut conn, args.keys - args.locks).await?;
    for chunk in (0..args.locks).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("SET")
                .arg(format!("lock:b{i}"))
                .arg(rr::random_uuid())
                .arg("PX")
                .arg(3_600_000)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await?;
    }
    let dbsize: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    eprintln!("loaded {dbsize} keys in {:?}", load_started.elapsed());

    // Bootstrap.
    let (lockscope, base, bootstrap) =
        start_lockscope(&args.lockscope, dir.path(), &server.url(), "bench").await?;
    let pid = lockscope.0.id();
    let rss = rss_kib(pid)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let t = Instant::now();
    let list = http
        .get(format!("{base}/api/v1/locks"))
        .send()
        .await?
        .bytes()
        .await?;
    let list_ms = t.elapsed().as_secs_f64() * 1000.0;
    let listed = serde_json::from_slice::<serde_json::Value>(&list)?["locks"]
        .as_array()
        .map_or(0, Vec::len);
    let t = Instant::now();
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .bytes()
        .await?;
    let scrape_ms = t.elapsed().as_secs_f64() * 1000.0;
    let per_lock = (rss.saturating_sub(idle_rss)) as f64 * 1024.0 / args.locks as f64;
    eprintln!("bootstrap {bootstrap:?}, listed {listed}, rss {rss} KiB");

    // Churn: one change at a time, so each change's latency is its own.
    let mut events = EventReader::connect(&base).await?;
    let (name, _) = events.next(Duration::from_secs(120)).await?;
    anyhow::ensure!(name == "snapshot", "first event {name}");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await?;
    let mut latencies = Vec::new();
    let churn_keys = 100;
    for i in 0..args.churn {
        let key = format!("lock:c{}", i % churn_keys);
        let token = rr::random_uuid();
        let id = id_of("bench", &key);
        let t = Instant::now();
        anyhow::ensure!(
            rr::token_lock_acquire(&mut conn, &key, &token, 60_000).await?,
            "acquire {key}"
        );
        loop {
            if let (_, StreamEvent::Lock { lock }) = events.next(Duration::from_secs(10)).await? {
                if lock.id == id && lock.holders.first().is_some_and(|h| h.node == token) {
                    break;
                }
            }
        }
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        anyhow::ensure!(
            rr::token_lock_release(&mut conn, &key, &token).await?,
            "release {key}"
        );
        loop {
            if let (_, StreamEvent::Removed { id: gone }) =
                events.next(Duration::from_secs(10)).await?
            {
                if gone == id {
                    break;
                }
            }
        }
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let stats = commandstats(&mut conn).await?;
    let calls = |name: &str| stats.get(name).copied().unwrap_or(0);
    // Commands lockscope only runs inside its read script, counted by Redis like any other.
    let in_script: u64 = ["type", "pttl", "hgetall", "hlen", "hscan", "lrange", "zrange"]
        .iter()
        .map(|c| calls(c))
        .sum::<u64>()
        // GET also runs in the benchmark's own release script, once per release.
        + calls("get").saturating_sub(args.churn as u64);
    // What the benchmark itself sent: SET, the release script (EVALSHA; SCRIPT LOAD once;
    // GET and DEL inside it), CONFIG RESETSTAT and this INFO.
    let bench_sent = args.churn as u64 * 2 + 1 + 1 + 1;
    let total: u64 = stats.values().sum();
    let bench_in_script = args.churn as u64 * 2;
    let lockscope_cmds = total
        .saturating_sub(in_script)
        .saturating_sub(bench_sent)
        .saturating_sub(bench_in_script);
    let changes = args.churn as f64 * 2.0;
    let latencies = sorted(latencies);

    // Expiry among the loaded TTL keys: lockscope versus Redis's own `expired` events.
    let current: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(&mut conn)
        .await?;
    let flags = format!("{}Ex", current.get(1).cloned().unwrap_or_default());
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(&flags)
        .query_async(&mut conn)
        .await?;
    let client = redis::Client::open(server.url())?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe("__keyevent@0__:expired").await?;
    let mut expired_stream = pubsub.into_on_message();
    // Lock keys lockscope watches, and twins it does not read: lockscope's deadline reads make
    // Redis expire the keys it watches at once, so Redis's own notification delay is measured on
    // the twins, in the same window among the same 1M TTL keys.
    let mut deadlines: HashMap<String, i64> = HashMap::new();
    for i in 0..args.expiring {
        let ttl = 2_000 + (i as u64 * 20);
        let at = lockscope::now_ms() + ttl as i64;
        for key in [format!("lock:e{i}"), format!("unwatched:e{i}")] {
            anyhow::ensure!(
                rr::token_lock_acquire(&mut conn, &key, &rr::random_uuid(), ttl).await?
            );
            deadlines.insert(key, at);
        }
    }
    let ids: HashMap<String, String> = deadlines
        .keys()
        .map(|k| (id_of("bench", k), k.clone()))
        .collect();
    let mut seen_lockscope: HashMap<String, i64> = HashMap::new();
    let mut seen_redis: HashMap<String, i64> = HashMap::new();
    let window = Instant::now() + Duration::from_secs(40);
    while Instant::now() < window
        && (seen_lockscope.len() < args.expiring || seen_redis.len() < args.expiring)
    {
        tokio::select! {
            event = events.next(Duration::from_secs(1)) => {
                if let Ok((_, StreamEvent::Removed { id })) = event {
                    if let Some(key) = ids.get(&id) {
                        seen_lockscope.entry(key.clone()).or_insert_with(lockscope::now_ms);
                    }
                }
            }
            message = expired_stream.next() => {
                if let Some(message) = message {
                    let key: String = message.get_payload().unwrap_or_default();
                    if key.starts_with("unwatched:") && deadlines.contains_key(&key) {
                        seen_redis.entry(key).or_insert_with(lockscope::now_ms);
                    }
                }
            }
        }
    }
    let delays = |seen: &HashMap<String, i64>| {
        sorted(
            seen.iter()
                .map(|(k, at)| (at - deadlines[k]) as f64)
                .collect(),
        )
    };
    let ls_delays = delays(&seen_lockscope);
    let redis_delays = delays(&seen_redis);

    let rows: Vec<(&str, String)> = vec![
        (
            "keys in Redis / lock keys",
            format!("{dbsize} / {}", args.locks),
        ),
        (
            "bootstrap (start → /readyz)",
            format!("{:.2} s", bootstrap.as_secs_f64()),
        ),
        (
            "RSS idle / with locks",
            format!(
                "{:.1} MiB / {:.1} MiB",
                idle_rss as f64 / 1024.0,
                rss as f64 / 1024.0
            ),
        ),
        ("RSS per tracked lock", format!("{per_lock:.0} B")),
        (
            "GET /api/v1/locks",
            format!(
                "{listed} locks, {:.1} MB, {list_ms:.0} ms",
                list.len() as f64 / 1e6
            ),
        ),
        (
            "GET /metrics (label cap 500)",
            format!("{:.0} KB, {scrape_ms:.0} ms", metrics.len() as f64 / 1e3),
        ),
        (
            "requests lockscope sends to Redis per lock change (churn)",
            format!(
                "{:.2} ({lockscope_cmds} for {changes:.0} changes)",
                lockscope_cmds as f64 / changes
            ),
        ),
        (
            "commands run inside lockscope's read script per change",
            format!("{:.2}", in_script as f64 / changes),
        ),
        (
            "change → /api/v1/events p50 / p99",
            format!(
                "{:.2} ms / {:.2} ms",
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.99)
            ),
        ),
        (
            "TTL expiry seen by lockscope p50 / p99 / max after deadline",
            format!(
                "{:.0} / {:.0} / {:.0} ms ({} of {})",
                percentile(&ls_delays, 0.5),
                percentile(&ls_delays, 0.99),
                ls_delays.last().copied().unwrap_or(f64::NAN),
                ls_delays.len(),
                args.expiring
            ),
        ),
        (
            "Redis's own `expired` event (unwatched twin keys) p50 / p99 after deadline",
            format!(
                "{:.0} / {:.0} ms ({} of {} within 40 s)",
                percentile(&redis_delays, 0.5),
                percentile(&redis_delays, 0.99),
                redis_delays.len(),
                args.expiring
            ),
        ),
    ];
    println!("| figure | value |\n|---|---|");
    for (name, value) in &rows {
        println!("| {name} | {value} |");
    }
    let command_breakdown: BTreeMap<&String, &u64> = stats.iter().collect();
    figures.insert("keys".into(), json!(dbsize));
    figures.insert("locks".into(), json!(args.locks));
    figures.insert("bootstrap_s".into(), json!(bootstrap.as_secs_f64()));
    figures.insert("rss_idle_kib".into(), json!(idle_rss));
    figures.insert("rss_kib".into(), json!(rss));
    figures.insert("rss_per_lock_bytes".into(), json!(per_lock));
    figures.insert("api_list_ms".into(), json!(list_ms));
    figures.insert("api_list_bytes".into(), json!(list.len()));
    figures.insert("metrics_ms".into(), json!(scrape_ms));
    figures.insert("metrics_bytes".into(), json!(metrics.len()));
    figures.insert(
        "script_commands_per_change".into(),
        json!(in_script as f64 / changes),
    );
    figures.insert(
        "requests_per_change".into(),
        json!(lockscope_cmds as f64 / changes),
    );
    figures.insert("commandstats_during_churn".into(), json!(command_breakdown));
    figures.insert(
        "change_latency_ms".into(),
        json!({"p50": percentile(&latencies, 0.5), "p99": percentile(&latencies, 0.99)}),
    );
    figures.insert("expiry_delay_ms_lockscope".into(), json!({"p50": percentile(&ls_delays, 0.5), "p99": percentile(&ls_delays, 0.99), "seen": ls_delays.len()}));
    figures.insert("expiry_delay_ms_redis_event".into(), json!({"p50": percentile(&redis_delays, 0.5), "p99": percentile(&redis_delays, 0.99), "seen": redis_delays.len()}));
    figures.insert("expiring".into(), json!(args.expiring));
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&figures)?)?;
    eprintln!("figures written to {}", args.out.display());
    drop(lockscope);
    Ok(())
}
