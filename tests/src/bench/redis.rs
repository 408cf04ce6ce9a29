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
use crate::support::redis::{burst, load_noise, server_locks, BurstEnd, BurstName, RedisServer};

/// Sizes of the Redis run.
#[derive(Debug, Clone)]
pub struct RedisArgs {
    pub keys: usize,
    pub locks: usize,
    pub churn: usize,
    pub expiring: usize,
    pub poll_secs: u64,
}

/// A lockscope process watching `lock:*` on the Redis at `url` as source `name` (label cap 500,
/// no reconcile scan within a run): the process, its base URL and its time to ready.
pub(super) async fn start_redis_lockscope(
    bin: &Path,
    dir: &Path,
    url: &str,
    name: &str,
) -> Result<(Process, String, Duration)> {
    start_redis_lockscope_with(bin, dir, url, name, "").await
}

/// [`start_redis_lockscope`] with `extra` (more config sections) appended to its config.
pub(super) async fn start_redis_lockscope_with(
    bin: &Path,
    dir: &Path,
    url: &str,
    name: &str,
    extra: &str,
) -> Result<(Process, String, Duration)> {
    start_lockscope(
        bin,
        dir,
        name,
        &format!("[metrics]\nmax_lock_labels = 500\n[[redis]]\nname = \"{name}\"\nurl = \"{url}\"\npatterns = [\"lock:*\"]\n# Steady state: no reconcile scan inside the measured windows.\nreconcile_interval = \"1h\"\n{extra}"),
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
    load_locks(&mut conn, 0..args.locks).await?;
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
    let (list, _) = super::all_locks(&http, &base, "").await?;
    let list_ms = t.elapsed().as_secs_f64() * 1000.0;
    let listed = list.len();
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
    let (latencies, floor_latencies, churn_window) =
        freshness(&server, &mut conn, &mut events, "bench", args.churn).await?;
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

/// Lock keys `lock:b<i>` for `i` in `range`, each a token lock as redis-py's `Lock` leaves it
/// (a random UUID token, `PX` one hour), in pipelines of 10,000 `SET`s.
pub(super) async fn load_locks(
    conn: &mut redis::aio::MultiplexedConnection,
    range: std::ops::Range<usize>,
) -> Result<()> {
    for chunk in range.collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("SET")
                .arg(format!("lock:b{i}"))
                .arg(rr::random_uuid())
                .arg("PX")
                .arg(3_600_000)
                .ignore();
        }
        let _: () = pipe.query_async(conn).await?;
    }
    Ok(())
}

/// Freshness: `churn` single changes (a token lock taken, then released) over 100 keys
/// `lock:c<n>`, one at a time, each timed until lockscope's event stream (`events`, of a
/// lockscope watching `server` as source `source`) shows it and until a bare client subscribed
/// to the same keys' keyspace notifications (the floor) sees it. Returns lockscope's and the
/// floor's latencies (ms, unsorted) and how long the churn took.
pub(super) async fn freshness(
    server: &RedisServer,
    conn: &mut redis::aio::MultiplexedConnection,
    events: &mut EventReader,
    source: &str,
    churn: usize,
) -> Result<(Vec<f64>, Vec<f64>, Duration)> {
    // The floor: a bare client subscribed to the same keys' keyspace notifications.
    let floor_client = redis::Client::open(server.url())?;
    let mut floor_pubsub = floor_client.get_async_pubsub().await?;
    floor_pubsub.psubscribe("__keyspace@0__:lock:c*").await?;
    let mut floor = floor_pubsub.into_on_message();
    let mut floor_latencies = Vec::new();
    let mut latencies = Vec::new();
    let churn_keys = 100;
    let churn_started = Instant::now();
    for i in 0..churn {
        let key = format!("lock:c{}", i % churn_keys);
        let token = rr::random_uuid();
        let id = id_of(source, &key);
        let channel = format!("__keyspace@0__:{key}");
        let t = Instant::now();
        anyhow::ensure!(
            rr::token_lock_acquire(conn, &key, &token, 60_000).await?,
            "acquire {key}"
        );
        let (f, l) = both_see(t, &mut floor, &channel, "set", events, |event| {
            matches!(event, StreamEvent::Lock { lock }
                if lock.id == id && lock.holders.first().is_some_and(|h| h.node == token))
        })
        .await;
        floor_latencies.push(f);
        latencies.push(l?);
        let t = Instant::now();
        anyhow::ensure!(
            rr::token_lock_release(conn, &key, &token).await?,
            "release {key}"
        );
        let (f, l) = both_see(
            t,
            &mut floor,
            &channel,
            "del",
            events,
            |event| matches!(event, StreamEvent::Removed { id: gone } if *gone == id),
        )
        .await;
        floor_latencies.push(f);
        latencies.push(l?);
    }
    let churn_window = churn_started.elapsed();
    drop(floor);
    Ok((latencies, floor_latencies, churn_window))
}

/// Milliseconds from `t` until the bare subscriber `floor` gets `payload` on `channel`, and until
/// lockscope's stream `events` sends an event that `wanted` accepts (both waited for at once).
async fn both_see(
    t: Instant,
    floor: &mut (impl futures::Stream<Item = redis::Msg> + Unpin),
    channel: &str,
    payload: &str,
    events: &mut EventReader,
    wanted: impl Fn(&StreamEvent) -> bool,
) -> (f64, Result<f64>) {
    let (f, l) = tokio::join!(
        async {
            while let Some(m) = floor.next().await {
                let got: String = m.get_payload().unwrap_or_default();
                if m.get_channel_name() == channel && got == payload {
                    break;
                }
            }
            t.elapsed()
        },
        async {
            loop {
                let (_, event) = events.next(Duration::from_secs(10)).await?;
                if wanted(&event) {
                    break;
                }
            }
            anyhow::Ok(t.elapsed())
        }
    );
    (
        f.as_secs_f64() * 1000.0,
        l.map(|l| l.as_secs_f64() * 1000.0),
    )
}

/// Sizes of the overload run.
#[derive(Debug, Clone)]
pub struct OverloadArgs {
    /// Client tasks churning names, one connection each.
    pub clients: usize,
    /// Names each client sets (and mostly deletes) per round trip.
    pub depth: usize,
    /// How long the burst lasts.
    pub secs: u64,
    /// How long to wait, after the burst, for lockscope to equal the server.
    pub settle_secs: u64,
}

/// Every `KEEP_EVERY`th name the overload sets is not one of the ever-new names but one of
/// `KEPT` held names per client, set to a new token (10 min TTL): the state to converge to is
/// not empty, and its size does not grow with the burst's length.
const KEEP_EVERY: u64 = 100;
const KEPT: u64 = 500;

/// One client of the overload: ever-new names `lock:o<client>:<n>`, `SET … PX` then `DEL`, and
/// every `KEEP_EVERY`th a held name `lock:o<client>:keep<j>` set anew, `depth` names per
/// pipelined round trip, until `until`. Returns the names set and those deleted.
async fn churn_names(
    url: String,
    client: usize,
    depth: usize,
    until: Instant,
) -> Result<(u64, u64)> {
    let count = burst(&url, depth, BurstEnd::At(until), |n| {
        let token = format!("t{client}-{n}");
        if n % KEEP_EVERY == 0 {
            BurstName::Kept {
                key: format!("lock:o{client}:keep{}", (n / KEEP_EVERY) % KEPT),
                tokens: vec![token],
            }
        } else {
            BurstName::Churned {
                key: format!("lock:o{client}:{n}"),
                token,
            }
        }
    })
    .await?;
    Ok((count.names, count.deleted))
}

/// A probe during the burst: every 2 s a new holder of `lock:probe`, and how long lockscope
/// took to show it (`None`: not before the burst ended). How far behind the server it is.
async fn probe_lags(
    url: String,
    base: String,
    source: &'static str,
    until: Instant,
) -> Result<Vec<Option<f64>>> {
    let mut conn = crate::support::redis::connect(&url).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let id = id_of(source, "lock:probe");
    let mut lags = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let token = format!("probe-{n}");
        let () = redis::cmd("SET")
            .arg("lock:probe")
            .arg(&token)
            .arg("PX")
            .arg(600_000)
            .query_async(&mut conn)
            .await?;
        let set_at = Instant::now();
        let lag = loop {
            if Instant::now() >= until {
                break None;
            }
            if let Ok(resp) = http.get(format!("{base}/api/v1/locks/{id}")).send().await {
                if let Ok(detail) = resp.json::<Value>().await {
                    if detail["holders"][0]["node"] == token.as_str() {
                        break Some(set_at.elapsed().as_secs_f64());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        lags.push(lag);
        let next = set_at + Duration::from_secs(2);
        if lag.is_some() && next < until {
            tokio::time::sleep_until(next.into()).await;
        }
    }
    Ok(lags)
}

/// Lock key → holder of every lock lockscope lists for `source`, and whether the source says it
/// is lagging.
async fn lockscope_locks(
    http: &reqwest::Client,
    base: &str,
    source: &str,
) -> Result<(BTreeMap<String, String>, bool)> {
    let (all, _) = super::all_locks(http, base, &format!("source={source}")).await?;
    let locks = all
        .iter()
        .filter_map(|l| {
            // A Redis lock's path is its key.
            let key = l["path"].as_str()?.to_string();
            let holder = l["holders"][0]["node"].as_str()?.to_string();
            Some((key, holder))
        })
        .collect();
    let lagging = super::source_lagging(http, base, source).await?;
    Ok((locks, lagging))
}

/// lockscope's own counters: (collector updates sent, aggregator updates applied).
async fn self_counters(http: &reqwest::Client, base: &str, source: &str) -> Result<(f64, f64)> {
    let text = super::metrics_text(http, base).await?;
    let series =
        format!("lockscope_collector_events_total{{source=\"{source}\",backend=\"redis\"}}");
    Ok((
        crate::harness::metric_value(&text, &series).unwrap_or(f64::NAN),
        crate::harness::metric_value(&text, "lockscope_aggregator_applied_total")
            .unwrap_or(f64::NAN),
    ))
}

/// Overload: `clients` tasks set and delete ever-new lock names as fast as Redis takes them for
/// `secs`, while lockscope (a separate process) watches. Figures: keyspace events produced per
/// second, lockscope's RSS (peak, at the burst's end, after it caught up), the rates lockscope
/// read keys (EVALSHA calls) and sent/applied updates during the burst, how long a change took
/// to show during the burst (a probe key), the backlogs it dropped, and how long after the burst
/// its locks took to equal a fresh SCAN + GET of the server.
pub async fn overload(bin: &Path, dir: &Path, args: &OverloadArgs) -> Result<(Vec<Row>, Value)> {
    let source = "ov";
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    let (lockscope, base, _) = start_lockscope(
        bin,
        dir,
        source,
        &format!("[metrics]\nmax_lock_labels = 500\n[[redis]]\nname = \"{source}\"\nurl = \"{}\"\npatterns = [\"lock:*\"]\n# Catching up is the collector's own doing, not a periodic scan's.\nreconcile_interval = \"1h\"\n", server.url()),
    )
    .await?;
    let pid = lockscope.0.id();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let rss_start = rss_kib(pid)?;

    // RSS sampled every 100 ms from the burst's start until the end of the run.
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = tokio::spawn({
        let sampling = sampling.clone();
        async move {
            let mut samples: Vec<(f64, u64)> = Vec::new();
            let t = Instant::now();
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(kib) = rss_kib(pid) {
                    samples.push((t.elapsed().as_secs_f64(), kib));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            samples
        }
    });

    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await?;
    let (events_before, applied_before) = self_counters(&http, &base, source).await?;
    let started = Instant::now();
    let until = started + Duration::from_secs(args.secs);
    let clients: Vec<_> = (0..args.clients)
        .map(|c| tokio::spawn(churn_names(server.url(), c, args.depth, until)))
        .collect();
    let probe = tokio::spawn(probe_lags(server.url(), base.clone(), source, until));
    let (mut set, mut deleted) = (0u64, 0u64);
    for client in clients {
        let (s, d) = client.await??;
        set += s;
        deleted += d;
    }
    let burst = started.elapsed().as_secs_f64();
    let lags = probe.await??;
    // A last change as the burst ends: caught up means it shows too.
    let () = redis::cmd("SET")
        .arg("lock:probe")
        .arg("probe-final")
        .arg("PX")
        .arg(600_000)
        .query_async(&mut conn)
        .await?;
    let (events_after, applied_after) = self_counters(&http, &base, source).await?;
    let burst_stats = commandstats(&mut conn).await?;
    let rss_burst_end = rss_kib(pid)?;
    // Keyspace events: `set` and `expire` for each SET … PX, `del` for each DEL.
    let produced = (set * 2 + deleted) as f64;
    eprintln!(
        "overload: {set} names set, {deleted} deleted in {burst:.1} s ({:.0} keyspace events/s); RSS {rss_burst_end} KiB",
        produced / burst
    );

    // Caught up: lockscope lists exactly what a fresh SCAN + GET finds, and is not lagging.
    let ended = Instant::now();
    let settle = Duration::from_secs(args.settle_secs);
    let mut checks = 0u32;
    let mut last = (0, 0);
    let converged = crate::harness::eventually_every(
        settle,
        Duration::from_millis(200),
        "lockscope's locks equal a fresh SCAN + GET",
        // A failed read ends the wait with its error (`Some(Err)`); only the timeout is `None`.
        async || {
            let check = async {
                let truth = server_locks(&mut conn).await?;
                let (seen, lagging) = lockscope_locks(&http, &base, source).await?;
                checks += 1;
                last = (truth.len(), seen.len());
                anyhow::Ok((seen == truth && !lagging).then(|| ended.elapsed()))
            };
            Ok(check.await.transpose())
        },
    )
    .await
    .ok()
    .transpose()?;
    let rss_settled = rss_kib(pid)?;
    // Redis drops a subscriber whose output buffer passes `client-output-buffer-limit pubsub`
    // (and says so in its log).
    let dropped_by_redis = std::fs::read_to_string(server.log_path())
        .map(|log| {
            log.lines()
                .filter(|l| l.contains("output buffer limits"))
                .count()
        })
        .ok();
    let settle_stats = commandstats(&mut conn).await?;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.await?;
    let peak = samples.iter().map(|(_, kib)| *kib).max().unwrap_or(0);
    let metrics = super::metrics_text(&http, &base).await?;
    let overflows = crate::harness::metric_value(
        &metrics,
        &format!("lockscope_collector_overflows_total{{source=\"{source}\",backend=\"redis\"}}"),
    );
    let reconnects = crate::harness::metric_value(
        &metrics,
        &format!("lockscope_collector_reconnects_total{{source=\"{source}\",backend=\"redis\"}}"),
    );
    let evalsha = |stats: &BTreeMap<String, u64>| stats.get("evalsha").copied().unwrap_or(0);
    let read_rate = evalsha(&burst_stats) as f64 / burst;
    let sent_rate = (events_after - events_before) / burst;
    let applied_rate = (applied_after - applied_before) / burst;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let seen_lags = sorted(lags.iter().flatten().copied().collect());
    let unseen = lags.iter().filter(|l| l.is_none()).count();
    let lag_text = format!(
        "{:.2} / {:.2} s; {} of {} not shown before the burst ended",
        percentile(&seen_lags, 0.5),
        seen_lags.last().copied().unwrap_or(f64::NAN),
        unseen,
        lags.len()
    );
    let converged_text = match converged {
        Some(d) => format!("{:.2} s ({checks} checks)", d.as_secs_f64()),
        None => format!(
            "not within {} s (server {} locks, lockscope {})",
            args.settle_secs, last.0, last.1
        ),
    };
    let rows = vec![
        row("6 overload", "keyspace events produced", format!("{:.0} /s", produced / burst), &format!("{} clients, {} names per round trip, {burst:.0} s: {set} names SET PX, {deleted} deleted", args.clients, args.depth)),
        row("6 overload", "lockscope RSS start / peak / burst end / caught up", format!("{:.0} / {:.0} / {:.0} / {:.0} MiB", mib(rss_start), mib(peak), mib(rss_burst_end), mib(rss_settled)), "sampled every 100 ms"),
        row("6 overload", "keys read (EVALSHA) during the burst", format!("{read_rate:.0} /s"), &format!("{} more until caught up", evalsha(&settle_stats).saturating_sub(evalsha(&burst_stats)))),
        row("6 overload", "updates sent / applied during the burst", format!("{sent_rate:.0} / {applied_rate:.0} /s"), "lockscope_collector_events_total, lockscope_aggregator_applied_total"),
        row("6 overload", "a change → shown by lockscope during the burst p50 / max", lag_text, "a new holder of lock:probe every 2 s"),
        row("6 overload", "backlogs dropped for a full re-read", overflows.map_or("n/a".into(), |n| format!("{n:.0}")), "lockscope_collector_overflows_total"),
        row("6 overload", "connections lost and re-made", reconnects.map_or("n/a".into(), |n| format!("{n:.0}")), &format!("lockscope_collector_reconnects_total; Redis dropped {} clients past their output buffer limit", dropped_by_redis.map_or("n/a".into(), |n| n.to_string()))),
        row("6 overload", "burst end → locks equal a fresh SCAN + GET", converged_text, &format!("{} locks held at the end, lock:probe set anew at the burst's end among them", last.0)),
    ];
    let figures = json!({
        "clients": args.clients,
        "depth": args.depth,
        "burst_s": burst,
        "names_set": set,
        "names_deleted": deleted,
        "keyspace_events_per_s": produced / burst,
        "rss_kib": {"start": rss_start, "peak": peak, "burst_end": rss_burst_end, "caught_up": rss_settled},
        "rss_samples": samples.iter().step_by(10).map(|(t, kib)| json!([t, kib])).collect::<Vec<_>>(),
        "keys_read_per_s": read_rate,
        "updates_sent_per_s": sent_rate,
        "updates_applied_per_s": applied_rate,
        "overflows": overflows,
        "reconnects": reconnects,
        "output_buffer_disconnections": dropped_by_redis,
        "probe_lags_s": lags,
        "converged_s": converged.map(|d| d.as_secs_f64()),
        "locks_at_end": last.0,
    });
    drop(lockscope);
    Ok((rows, figures))
}
