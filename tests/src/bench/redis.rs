//! Redis sections: freshness against a bare keyspace-notification subscriber, requests per
//! change against a SCAN poller, scale with 1M keys (100k locks), and TTL-expiry detection
//! against Redis's own `expired` notifications.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use lockscope_model::wire::StreamEvent;
use serde_json::{json, Value};

use super::{p50_p99, percentile, row, rss_kib, sorted, start_lockscope, Process, Row};
use crate::harness::EventReader;
use crate::redis_recipes as rr;
use crate::support::redis::{load_noise, RedisServer};

/// Sizes of the Redis run.
#[derive(Debug, Clone)]
pub struct RedisArgs {
    pub keys: usize,
    pub locks: usize,
    pub churn: usize,
    pub expiring: usize,
    pub poll_secs: u64,
}

async fn start_redis_lockscope(
    bin: &Path,
    dir: &Path,
    url: &str,
    name: &str,
) -> Result<(Process, String, Duration)> {
    start_lockscope(
        bin,
        dir,
        name,
        &format!("[metrics]\nmax_lock_labels = 500\n[[redis]]\nname = \"{name}\"\nurl = \"{url}\"\npatterns = [\"lock:*\"]\n# Steady state: no reconcile scan inside the measured windows.\nreconcile_interval = \"1h\"\n"),
    )
    .await
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

fn id_of(source: &str, key: &str) -> String {
    lockscope_model::id::lock_id(source, &format!("/{key}"))
}

pub async fn run(bin: &Path, dir: &Path, args: &RedisArgs) -> Result<(Vec<Row>, Value)> {
    let mut figures = serde_json::Map::new();

    // Idle baseline: lockscope watching an empty Redis.
    let empty = RedisServer::start().await?;
    let (idle, _, _) = start_redis_lockscope(bin, dir, &empty.url(), "idle").await?;
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
        start_redis_lockscope(bin, dir, &server.url(), "bench").await?;
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
    // The floor: a bare client subscribed to the same keys' keyspace notifications.
    let floor_client = redis::Client::open(server.url())?;
    let mut floor_pubsub = floor_client.get_async_pubsub().await?;
    floor_pubsub.psubscribe("__keyspace@0__:lock:c*").await?;
    let mut floor = floor_pubsub.into_on_message();
    let mut floor_latencies = Vec::new();
    let mut latencies = Vec::new();
    let churn_keys = 100;
    let churn_started = Instant::now();
    for i in 0..args.churn {
        let key = format!("lock:c{}", i % churn_keys);
        let token = rr::random_uuid();
        let id = id_of("bench", &key);
        let t = Instant::now();
        anyhow::ensure!(
            rr::token_lock_acquire(&mut conn, &key, &token, 60_000).await?,
            "acquire {key}"
        );
        let channel = format!("__keyspace@0__:{key}");
        let (f, l) = tokio::join!(
            async {
                while let Some(m) = floor.next().await {
                    let payload: String = m.get_payload().unwrap_or_default();
                    if m.get_channel_name() == channel && payload == "set" {
                        break;
                    }
                }
                t.elapsed()
            },
            async {
                loop {
                    if let (_, StreamEvent::Lock { lock }) =
                        events.next(Duration::from_secs(10)).await?
                    {
                        if lock.id == id && lock.holders.first().is_some_and(|h| h.node == token) {
                            break;
                        }
                    }
                }
                anyhow::Ok(t.elapsed())
            }
        );
        floor_latencies.push(f.as_secs_f64() * 1000.0);
        latencies.push(l?.as_secs_f64() * 1000.0);
        let t = Instant::now();
        anyhow::ensure!(
            rr::token_lock_release(&mut conn, &key, &token).await?,
            "release {key}"
        );
        let (f, l) = tokio::join!(
            async {
                while let Some(m) = floor.next().await {
                    let payload: String = m.get_payload().unwrap_or_default();
                    if m.get_channel_name() == channel && payload == "del" {
                        break;
                    }
                }
                t.elapsed()
            },
            async {
                loop {
                    if let (_, StreamEvent::Removed { id: gone }) =
                        events.next(Duration::from_secs(10)).await?
                    {
                        if gone == id {
                            break;
                        }
                    }
                }
                anyhow::Ok(t.elapsed())
            }
        );
        floor_latencies.push(f.as_secs_f64() * 1000.0);
        latencies.push(l?.as_secs_f64() * 1000.0);
    }
    let churn_window = churn_started.elapsed();
    drop(floor);
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
    let floor_latencies = sorted(floor_latencies);

    // The poller (redis_exporter's check-keys style): SCAN MATCH lock:* over the whole keyspace,
    // then GET + PTTL of every lock key found, pass after pass; counted by Redis itself.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await?;
    let mut poll_conn = server.connection().await?;
    let poll_started = Instant::now();
    let mut passes = 0u32;
    let mut pass_times = Vec::new();
    while poll_started.elapsed() < Duration::from_secs(args.poll_secs) || passes == 0 {
        let pass = Instant::now();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("lock:*")
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut poll_conn)
                .await?;
            if !keys.is_empty() {
                let mut pipe = redis::pipe();
                for k in &keys {
                    pipe.cmd("GET").arg(k).ignore().cmd("PTTL").arg(k).ignore();
                }
                let () = pipe.query_async(&mut poll_conn).await?;
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        passes += 1;
        pass_times.push(pass.elapsed().as_secs_f64() * 1000.0);
    }
    let poll_window = poll_started.elapsed().as_secs_f64();
    let poll_stats = commandstats(&mut conn).await?;
    let poll_commands: u64 = ["scan", "get", "pttl"]
        .iter()
        .map(|c| poll_stats.get(*c).copied().unwrap_or(0))
        .sum();
    let change_rate = changes / churn_window.as_secs_f64();
    let poller_per_change = poll_commands as f64 / poll_window / change_rate;
    let pass_times = sorted(pass_times);

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

    let ls_per_change = lockscope_cmds as f64 / changes;
    let rows = vec![
        row("1 freshness", "Redis change → /api/v1/events p50 / p99", p50_p99(&latencies), &format!("{changes:.0} changes (SET NX PX + compare-and-delete) among {dbsize} keys")),
        row("1 freshness", "Redis floor: bare keyspace-notification subscriber p50 / p99", p50_p99(&floor_latencies), "same changes, same instant"),
        row("1 freshness", "Redis p99 ÷ floor p99", format!("{:.2}×", percentile(&latencies, 0.99) / percentile(&floor_latencies, 0.99)), "goal ≤ 2× and ≤ 25 ms"),
        row("2 cost", "Redis requests lockscope sends per change (server `INFO commandstats`)", format!("{ls_per_change:.2}"), &format!("{lockscope_cmds} for {changes:.0} changes; {:.2} commands run inside its read script", in_script as f64 / changes)),
        row("2 cost", "SCAN poller requests per change", format!("{poller_per_change:.0}"), &format!("{passes} passes in {poll_window:.1} s, a pass takes {:.0} ms (its freshness)", percentile(&pass_times, 0.5))),
        row("2 cost", "Redis poller ÷ lockscope at this churn", format!("{:.0}×", poller_per_change / ls_per_change), &format!("goal ≥ 20×; churn ran at {change_rate:.0} changes/s; the poller is also far less fresh")),
        row("2 cost", &format!("… at a steady {} changes/s: lockscope / poller per change", super::zk::STEADY), format!("{ls_per_change:.2} / {:.0}", poll_commands as f64 / poll_window / super::zk::STEADY), "from the measured rates"),
        row("3 scale", "Redis keys / lock keys", format!("{dbsize} / {}", args.locks), ""),
        row("3 scale", "Redis bootstrap (start → /readyz)", format!("{:.2} s", bootstrap.as_secs_f64()), ""),
        row("3 scale", "RSS idle / loaded, per tracked lock", format!("{:.1} MiB / {:.1} MiB, {per_lock:.0} B", idle_rss as f64 / 1024.0, rss as f64 / 1024.0), ""),
        row("3 scale", "GET /api/v1/locks (Redis)", format!("{listed} locks, {:.1} MB, {list_ms:.0} ms", list.len() as f64 / 1e6), ""),
        row("3 scale", "GET /metrics (label cap 500)", format!("{:.0} KB, {scrape_ms:.0} ms", metrics.len() as f64 / 1e3), ""),
        row("4 expiry", "TTL expiry seen by lockscope after the deadline p50 / p99 / max", format!("{:.0} / {:.0} / {:.0} ms ({} of {})", percentile(&ls_delays, 0.5), percentile(&ls_delays, 0.99), ls_delays.last().copied().unwrap_or(f64::NAN), ls_delays.len(), args.expiring), &format!("among {} TTL keys", dbsize)),
        row("4 expiry", "Redis's own `expired` event (unwatched twins) p50 / p99", format!("{:.0} / {:.0} ms ({} of {} within 40 s)", percentile(&redis_delays, 0.5), percentile(&redis_delays, 0.99), redis_delays.len(), args.expiring), "what a notification-only watcher would see"),
    ];
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
    figures.insert("floor_latency_ms".into(), json!({"p50": percentile(&floor_latencies, 0.5), "p99": percentile(&floor_latencies, 0.99)}));
    figures.insert("poller".into(), json!({"passes": passes, "window_s": poll_window, "commands": poll_commands, "pass_ms_p50": percentile(&pass_times, 0.5), "requests_per_change": poller_per_change}));
    drop(lockscope);
    Ok((rows, Value::Object(figures)))
}
