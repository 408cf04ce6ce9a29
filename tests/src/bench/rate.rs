//! Sustained rate (`--only rate`): for one source of each backend in turn — a ZooKeeper
//! ensemble of 3 members, one Redis server, one etcd member — a few clients acquire and release
//! locks as fast as they can for a fixed window, each waiting for every answer before its next
//! request, over a bounded set of lock names in the layout the other sections use (ZooKeeper
//! ephemeral-sequential queue nodes, Redis `SET NX PX` + compare-and-delete, etcd Go-mutex keys
//! `<name>/<lease hex>` put with a lease). Figures per source: lock changes the server accepted
//! per second, updates lockscope received from the source and applied, whether lockscope kept
//! up (its aggregator queue sampled during the window, `lockscope_source_lagging`, and the time
//! from the end of the burst until its model equals a fresh read of the server), how many of
//! the acquisitions and releases the clients made lockscope booked in its counters, and the RSS
//! and CPU of the lockscope process next to the CPU of the servers, the clients and everything
//! else on the machine, which is what tells which of them limits the rate.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use etcd_client::{Client as EtcdClient, GetOptions, PutOptions};
use lockscope_model::wire::{Backend, LockView};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::zk::{client as zk_client, ephemeral_seq, open};
use super::{cpu_s, row, rss_kib, start_lockscope, Row, TICKS_PER_S};
use crate::harness::{eventually, eventually_every, metric_value, source_sum};
use crate::redis_recipes as rr;
use crate::support::etcd::{lease_hex, EtcdServer};
use crate::support::redis::{server_locks, RedisServer};
use crate::support::zk::{four_letter, fresh_locks, LockNodes, ZkEnsemble};

/// Sizes of the rate run.
#[derive(Debug, Clone)]
pub struct RateArgs {
    /// Concurrent clients per backend, one connection (session) each.
    pub clients: usize,
    /// Lock names the clients pick from.
    pub names: usize,
    /// How long each backend's burst lasts.
    pub secs: u64,
    /// How long to wait, after a burst, for lockscope's model to equal the server.
    pub settle_secs: u64,
}

const SECTION: &str = "8 rate";

/// How long after the burst's end a client may take to finish its last request.
const CLIENT_GRACE: Duration = Duration::from_secs(30);

/// How often lockscope's queue depth, lagging flag and RSS are sampled during a burst.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What one client did: acquisitions and releases the server accepted.
#[derive(Debug, Default, Clone, Copy)]
struct ClientCount {
    acquired: u64,
    released: u64,
}

/// The `n`th lock name (of `names`) client `c` of `clients` picks: scattered over the client's
/// own share of the names (those `≡ c mod clients`), so that every acquire is an acquisition
/// and lockscope's count of them can be checked exactly.
fn pick(c: usize, clients: usize, n: u64, names: usize) -> usize {
    let share = (names / clients) as u64;
    let x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    c + clients * (x % share) as usize
}

/// The machine's CPU time so far: (busy, all), seconds summed over every core.
fn machine_cpu_s() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    let all: f64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some(((all - idle) / TICKS_PER_S, all / TICKS_PER_S))
}

/// CPU counters of every process that takes part, read at one instant.
#[derive(Debug, Clone)]
struct CpuSnapshot {
    lockscope: f64,
    servers: f64,
    bench: f64,
    machine_busy: f64,
    machine_all: f64,
}

fn cpu_snapshot(lockscope: u32, servers: &[u32]) -> Result<CpuSnapshot> {
    let (machine_busy, machine_all) = machine_cpu_s().context("read /proc/stat")?;
    Ok(CpuSnapshot {
        lockscope: cpu_s(lockscope).context("lockscope's /proc/<pid>/stat")?,
        servers: servers.iter().filter_map(|&p| cpu_s(p)).sum(),
        bench: cpu_s(std::process::id()).context("/proc/self/stat")?,
        machine_busy,
        machine_all,
    })
}

/// lockscope's own counters for `source`, from one `/metrics` scrape.
#[derive(Debug, Clone, Copy)]
struct SelfMetrics {
    events: f64,
    applied: f64,
    queue_depth: f64,
    lagging: f64,
    /// Acquisitions and releases lockscope booked for the source's locks, summed over its
    /// per-lock counters (every cause of release).
    acquisitions: f64,
    releases: f64,
}

async fn self_metrics(
    http: &reqwest::Client,
    base: &str,
    source: &str,
    backend: Backend,
) -> Result<SelfMetrics> {
    let text = super::metrics_text(http, base).await?;
    let get = |series: &str| {
        metric_value(&text, series).with_context(|| format!("no {series} in /metrics"))
    };
    Ok(SelfMetrics {
        events: get(&format!(
            "lockscope_collector_events_total{{source=\"{source}\",backend=\"{}\"}}",
            backend.as_str()
        ))?,
        applied: get("lockscope_aggregator_applied_total")?,
        queue_depth: get("lockscope_aggregator_queue_depth")?,
        lagging: get(&format!("lockscope_source_lagging{{source=\"{source}\"}}"))?,
        acquisitions: source_sum(&text, "lockscope_lock_acquisitions_total", source),
        releases: source_sum(&text, "lockscope_lock_releases_total", source),
    })
}

/// `lockscope_lock_releases_total` of `source` summed by cause.
async fn release_causes(
    http: &reqwest::Client,
    base: &str,
    source: &str,
) -> Result<BTreeMap<String, f64>> {
    let text = super::metrics_text(http, base).await?;
    let prefix = format!("lockscope_lock_releases_total{{source=\"{source}\",");
    let mut causes = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with(&prefix)) {
        let cause = line
            .split("cause=\"")
            .nth(1)
            .and_then(|c| c.split('"').next());
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(cause), Some(value)) = (cause, value) {
            *causes.entry(cause.to_string()).or_default() += value;
        }
    }
    Ok(causes)
}

/// The locks lockscope shows for `source` with somebody holding or waiting (lock path → holder
/// nodes, waiter nodes), and whether it says the source is lagging.
async fn shown(http: &reqwest::Client, base: &str, source: &str) -> Result<(LockNodes, bool)> {
    let (all, _) = super::all_locks(http, base, &format!("source={source}")).await?;
    let locks: Vec<LockView> = serde_json::from_value(Value::Array(all))?;
    let nodes = locks
        .into_iter()
        .filter(|l| !l.holders.is_empty() || !l.waiters.is_empty())
        .map(|l| {
            (
                l.path,
                (
                    l.holders.into_iter().map(|h| h.node).collect(),
                    l.waiters.into_iter().map(|w| w.node).collect(),
                ),
            )
        })
        .collect();
    let lagging = super::source_lagging(http, base, source).await?;
    Ok((nodes, lagging))
}

/// One source under test: the lockscope process watching it and the servers' processes.
struct Target<'a> {
    backend: Backend,
    source: &'a str,
    lockscope_pid: u32,
    base: &'a str,
    server_pids: Vec<u32>,
}

/// What one burst measured.
#[derive(Debug)]
struct Measured {
    window_s: f64,
    made: ClientCount,
    before: SelfMetrics,
    after: SelfMetrics,
    /// Samples during the window: (queue depth, lagging, RSS KiB).
    samples: Vec<(f64, f64, u64)>,
    rss_start_kib: u64,
    rss_end_kib: u64,
    cpu: CpuSnapshot,
    /// Burst end → model equal to a fresh read, and the comparisons it took.
    converged: Option<(Duration, u32)>,
    locks_at_end: usize,
    /// Burst end → every acquisition lockscope booked also booked as released or still held
    /// (ZooKeeper books a release once ensemble rounds tell its cause).
    booked_by: Option<Duration>,
    /// lockscope's counters once it converged and booked (or as last seen).
    settled: SelfMetrics,
    /// Releases booked by cause, since lockscope started.
    release_causes: BTreeMap<String, f64>,
}

/// Runs one burst: `start(until)` spawns the clients, which stop at `until`, each still holding
/// the last lock it took; then waits, at most `settle_secs`, for lockscope's model to equal
/// `truth()`, a fresh read of the server.
async fn measure(
    t: &Target<'_>,
    args: &RateArgs,
    start: impl FnOnce(Instant) -> Vec<JoinHandle<Result<ClientCount>>>,
    mut truth: impl AsyncFnMut() -> Result<LockNodes>,
) -> Result<Measured> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let before = self_metrics(&http, t.base, t.source, t.backend).await?;
    let rss_start_kib = rss_kib(t.lockscope_pid)?;

    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (sampling, http) = (sampling.clone(), http.clone());
        let (base, source, backend, pid) = (
            t.base.to_string(),
            t.source.to_string(),
            t.backend,
            t.lockscope_pid,
        );
        async move {
            let mut samples = Vec::new();
            while sampling.load(Ordering::Relaxed) {
                let next = Instant::now() + SAMPLE_EVERY;
                if let (Ok(m), Ok(kib)) = (
                    self_metrics(&http, &base, &source, backend).await,
                    rss_kib(pid),
                ) {
                    samples.push((m.queue_depth, m.lagging, kib));
                }
                tokio::time::sleep_until(next.into()).await;
            }
            samples
        }
    });

    let cpu_before = cpu_snapshot(t.lockscope_pid, &t.server_pids)?;
    let started = Instant::now();
    let until = started + Duration::from_secs(args.secs);
    let clients = start(until);
    // A client stops at its first cycle after `until`; one whose server stops answering must not
    // hold the benchmark forever.
    let stopped_by = until + CLIENT_GRACE;
    let mut made = ClientCount::default();
    for client in clients {
        let count = tokio::time::timeout_at(stopped_by.into(), client)
            .await
            .with_context(|| {
                format!(
                    "a {} client still running {CLIENT_GRACE:?} after the burst",
                    t.source
                )
            })???;
        made.acquired += count.acquired;
        made.released += count.released;
    }
    let window = started.elapsed();
    let ended = Instant::now();
    let cpu_after = cpu_snapshot(t.lockscope_pid, &t.server_pids)?;
    sampling.store(false, Ordering::Relaxed);
    let after = self_metrics(&http, t.base, t.source, t.backend).await?;
    let rss_end_kib = rss_kib(t.lockscope_pid)?;
    let samples = sampler.await?;

    // Caught up: lockscope shows exactly what a fresh read of the server finds and does not say
    // it is lagging. The burst is over, so the server no longer changes under the comparison.
    let mut checks = 0u32;
    let mut last = (0, String::new());
    let converged = eventually_every(
        Duration::from_secs(args.settle_secs),
        Duration::from_millis(20),
        "lockscope's model equal to a fresh read",
        async || {
            checks += 1;
            let want = truth().await?;
            let (got, lagging) = shown(&http, t.base, t.source).await?;
            if got == want && !lagging {
                return Ok(Some((ended.elapsed(), checks, want)));
            }
            last = (
                want.len(),
                format!(
                    "lagging {lagging}; lockscope {} locks, server {}",
                    got.len(),
                    want.len()
                ),
            );
            Ok(None)
        },
    )
    .await;
    let (converged, locks_at_end, held_at_end) = match converged {
        Ok((d, n, want)) => (
            Some((d, n)),
            want.len(),
            want.values()
                .map(|(holders, _)| holders.len())
                .sum::<usize>(),
        ),
        Err(e) => {
            eprintln!("rate {}: {e:#}; {}", t.source, last.1);
            (None, last.0, 0)
        }
    };

    // Booked: every acquisition lockscope counted during the burst is counted as released too,
    // or is one of the holds left at the end.
    let mut settled = after;
    let booked_by = if converged.is_some() {
        eventually(
            Duration::from_secs(args.settle_secs),
            "every acquisition booked released or held",
            async || {
                settled = self_metrics(&http, t.base, t.source, t.backend).await?;
                let acquired = settled.acquisitions - before.acquisitions;
                let released = settled.releases - before.releases;
                Ok((acquired == released + held_at_end as f64).then(|| ended.elapsed()))
            },
        )
        .await
        .map_err(|e| eprintln!("rate {}: {e:#}", t.source))
        .ok()
    } else {
        None
    };
    let release_causes = release_causes(&http, t.base, t.source).await?;
    let elapsed = |a: f64, b: f64| b - a;
    Ok(Measured {
        window_s: window.as_secs_f64(),
        made,
        before,
        after,
        samples,
        rss_start_kib,
        rss_end_kib,
        cpu: CpuSnapshot {
            lockscope: elapsed(cpu_before.lockscope, cpu_after.lockscope),
            servers: elapsed(cpu_before.servers, cpu_after.servers),
            bench: elapsed(cpu_before.bench, cpu_after.bench),
            machine_busy: elapsed(cpu_before.machine_busy, cpu_after.machine_busy),
            machine_all: elapsed(cpu_before.machine_all, cpu_after.machine_all),
        },
        converged,
        locks_at_end,
        booked_by,
        settled,
        release_causes,
    })
}

/// ZooKeeper: each client, on its own session, creates an ephemeral sequential node under one of
/// `names` lock containers and deletes it again.
async fn zookeeper(bin: &Path, dir: &Path, args: &RateArgs) -> Result<(Measured, String)> {
    let zk = ZkEnsemble::start(3).await?;
    let connect = zk.connect_string();
    let root = "/bench-rate";
    let setup = zk_client(&connect).await?;
    setup.create(root, b"", &open()).await?;
    for i in 0..args.names {
        setup
            .create(&format!("{root}/lock{i}"), b"", &open())
            .await?;
    }
    let source = "zk";
    let (lockscope, base, _) = start_lockscope(
        bin,
        dir,
        "rate-zk",
        &format!("[metrics]\nmax_lock_labels = 500\n[[zookeeper]]\nname = \"{source}\"\nconnect = \"{connect}\"\nroots = [\"{root}\"]\n"),
    )
    .await?;
    let mut sessions = Vec::new();
    for _ in 0..args.clients {
        sessions.push(zk_client(&connect).await?);
    }
    let leader = zk.leader().await?;
    let zxid_before = zxid(&zk, leader).await?;
    let target = Target {
        backend: Backend::Zookeeper,
        source,
        lockscope_pid: lockscope.0.id(),
        base: &base,
        server_pids: (0..zk.members()).filter_map(|i| zk.pid(i)).collect(),
    };
    let (names, clients) = (args.names, args.clients);
    let measured = measure(
        &target,
        args,
        |until| {
            sessions
                .iter()
                .enumerate()
                .map(|(c, session)| {
                    // A clone shares the session: the node last created stays while `sessions`
                    // lives, through the comparison after the burst.
                    let session = session.clone();
                    tokio::spawn(async move {
                        let mut count = ClientCount::default();
                        for n in 0.. {
                            let container = format!("{root}/lock{}", pick(c, clients, n, names));
                            let (_, seq) = session
                                .create(&format!("{container}/lock-"), b"", &ephemeral_seq())
                                .await?;
                            count.acquired += 1;
                            if Instant::now() >= until {
                                break;
                            }
                            let node = format!("{container}/lock-{:010}", seq.into_i64());
                            session.delete(&node, None).await?;
                            count.released += 1;
                        }
                        anyhow::Ok(count)
                    })
                })
                .collect()
        },
        async || fresh_locks(&connect, root).await,
    )
    .await?;
    // The ensemble's own count: transactions the leader committed (every create and delete,
    // plus the sessions the fresh reads opened and closed).
    let zxid_after = zxid(&zk, leader).await?;
    drop(sessions);
    drop(lockscope);
    let note = format!(
        "3-member ensemble; zxid +{} on the leader",
        zxid_after.saturating_sub(zxid_before)
    );
    Ok((measured, note))
}

/// The last committed zxid a member reports (`srvr`).
async fn zxid(zk: &ZkEnsemble, member: usize) -> Result<u64> {
    let text = four_letter(zk.client_addr(member), "srvr").await?;
    let hex = text
        .lines()
        .find_map(|l| l.strip_prefix("Zxid: 0x"))
        .context("no Zxid in srvr")?;
    Ok(u64::from_str_radix(hex.trim(), 16)?)
}

/// Redis: each client, on its own connection, `SET <name> <token> NX PX` then the
/// compare-and-delete script.
async fn redis(bin: &Path, dir: &Path, args: &RateArgs) -> Result<(Measured, String)> {
    let server = RedisServer::start().await?;
    let url = server.url();
    let source = "redis";
    let (lockscope, base, _) = start_lockscope(
        bin,
        dir,
        "rate-redis",
        &format!("[metrics]\nmax_lock_labels = 500\n[[redis]]\nname = \"{source}\"\nurl = \"{url}\"\npatterns = [\"lock:*\"]\n# Steady state: no reconcile scan inside the measured window.\nreconcile_interval = \"1h\"\n"),
    )
    .await?;
    let mut conns = Vec::new();
    for _ in 0..args.clients {
        conns.push(server.connection().await?);
    }
    let target = Target {
        backend: Backend::Redis,
        source,
        lockscope_pid: lockscope.0.id(),
        base: &base,
        server_pids: server.pid().into_iter().collect(),
    };
    let (names, clients) = (args.names, args.clients);
    let mut truth_conn = server.connection().await?;
    let measured = measure(
        &target,
        args,
        |until| {
            conns
                .into_iter()
                .enumerate()
                .map(|(c, mut conn)| {
                    tokio::spawn(async move {
                        let mut count = ClientCount::default();
                        for n in 0.. {
                            let key = format!("lock:rate:{}", pick(c, clients, n, names));
                            let token = rr::random_uuid();
                            ensure!(
                                rr::token_lock_acquire(&mut conn, &key, &token, 600_000).await?,
                                "acquire {key}: held by somebody else"
                            );
                            count.acquired += 1;
                            if Instant::now() >= until {
                                break;
                            }
                            ensure!(
                                rr::token_lock_release(&mut conn, &key, &token).await?,
                                "release {key}: not held by {token}"
                            );
                            count.released += 1;
                        }
                        anyhow::Ok(count)
                    })
                })
                .collect()
        },
        async || {
            Ok(server_locks(&mut truth_conn)
                .await?
                .into_iter()
                .map(|(key, token)| (key, (vec![token], Vec::new())))
                .collect())
        },
    )
    .await?;
    drop(lockscope);
    Ok((measured, "one server".to_string()))
}

/// etcd: each client, on its own connection and lease, puts `/locks/rate/c<i>/<lease hex>` with
/// the lease and deletes it again (what the Go `concurrency.Mutex` writes; the Go client's extra
/// read of the queue's first key is left out).
async fn etcd(bin: &Path, dir: &Path, args: &RateArgs) -> Result<(Measured, String)> {
    let server = EtcdServer::start().await?;
    let endpoint = server.endpoint();
    let source = "etcd";
    let (lockscope, base, _) = start_lockscope(
        bin,
        dir,
        "rate-etcd",
        &format!("[metrics]\nmax_lock_labels = 500\n[[etcd]]\nname = \"{source}\"\nendpoints = [\"{endpoint}\"]\nprefixes = [\"/locks\"]\n"),
    )
    .await?;
    let mut contenders = Vec::new();
    for _ in 0..args.clients {
        let mut client = EtcdClient::connect([endpoint.as_str()], None)
            .await
            .context("connect to etcd")?;
        let lease = client.lease_grant(600, None).await?.id();
        contenders.push((client, lease));
    }
    let mut reader = EtcdClient::connect([endpoint.as_str()], None).await?;
    let revision_before = etcd_truth(&mut reader).await?.1;
    let target = Target {
        backend: Backend::Etcd,
        source,
        lockscope_pid: lockscope.0.id(),
        base: &base,
        server_pids: server.pid().into_iter().collect(),
    };
    let (names, clients) = (args.names, args.clients);
    let measured = measure(
        &target,
        args,
        |until| {
            contenders
                .into_iter()
                .enumerate()
                .map(|(c, (mut client, lease))| {
                    tokio::spawn(async move {
                        let hex = lease_hex(lease);
                        let mut count = ClientCount::default();
                        for n in 0.. {
                            let key = format!("/locks/rate/c{}/{hex}", pick(c, clients, n, names));
                            client
                                .put(key.as_str(), "", Some(PutOptions::new().with_lease(lease)))
                                .await?;
                            count.acquired += 1;
                            if Instant::now() >= until {
                                break;
                            }
                            let deleted = client.delete(key.as_str(), None).await?.deleted();
                            ensure!(deleted == 1, "delete {key}: {deleted} deleted");
                            count.released += 1;
                        }
                        anyhow::Ok(count)
                    })
                })
                .collect()
        },
        async || Ok(etcd_truth(&mut reader).await?.0),
    )
    .await?;
    let revision_after = etcd_truth(&mut reader).await?.1;
    drop(lockscope);
    Ok((
        measured,
        format!(
            "one member; revision +{} (puts and deletes the server applied)",
            revision_after - revision_before
        ),
    ))
}

/// Every lock under `/locks/rate/` as etcd has it now (a linearizable range read): lock path →
/// (holder key, waiter keys in `create_revision` order), and the store's revision.
async fn etcd_truth(client: &mut EtcdClient) -> Result<(LockNodes, i64)> {
    let response = client
        .get("/locks/rate/", Some(GetOptions::new().with_prefix()))
        .await?;
    let revision = response.header().map_or(0, |h| h.revision());
    let mut by_lock: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for kv in response.kvs() {
        let key = kv.key_str()?.to_string();
        let (lock, _) = key
            .rsplit_once('/')
            .with_context(|| format!("{key} is not <name>/<lease>"))?;
        by_lock
            .entry(lock.to_string())
            .or_default()
            .push((kv.create_revision(), key.clone()));
    }
    let locks = by_lock
        .into_iter()
        .map(|(lock, mut queue)| {
            queue.sort();
            let mut keys = queue.into_iter().map(|(_, key)| key);
            let holders = keys.next().into_iter().collect();
            (lock, (holders, keys.collect()))
        })
        .collect();
    Ok((locks, revision))
}

/// The rate section: ZooKeeper, Redis and etcd one after the other, each with its own servers
/// and its own lockscope process (databases are polled, so their figures are the database
/// section's: change → event latency bounded by the poll interval).
pub async fn run(bin: &Path, dir: &Path, args: &RateArgs) -> Result<(Vec<Row>, Value)> {
    ensure!(
        args.clients > 0 && args.clients <= args.names,
        "--rate-clients must be at least 1 and at most --rate-names (each client has its own names)"
    );
    let mut rows = Vec::new();
    let mut figures = serde_json::Map::new();
    for backend in [Backend::Zookeeper, Backend::Redis, Backend::Etcd] {
        eprintln!("rate: {} …", backend.display_name());
        let (m, server_note) = match backend {
            Backend::Zookeeper => zookeeper(bin, dir, args).await?,
            Backend::Redis => redis(bin, dir, args).await?,
            Backend::Etcd => etcd(bin, dir, args).await?,
            Backend::Mysql | Backend::Postgres => unreachable!("not in the rate section"),
        };
        let (r, f) = report(backend, args, &m, &server_note);
        rows.extend(r);
        figures.insert(backend.as_str().into(), f);
    }
    Ok((rows, Value::Object(figures)))
}

fn report(backend: Backend, args: &RateArgs, m: &Measured, server_note: &str) -> (Vec<Row>, Value) {
    let name = backend.display_name();
    let w = m.window_s;
    let changes = m.made.acquired + m.made.released;
    let changes_rate = changes as f64 / w;
    let events = m.after.events - m.before.events;
    let applied = m.after.applied - m.before.applied;
    // Counted once lockscope caught up and booked, so changes in flight at the burst's end count.
    let acquisitions = m.settled.acquisitions - m.before.acquisitions;
    let releases = m.settled.releases - m.before.releases;
    let depth_max = m.samples.iter().map(|s| s.0).fold(0.0, f64::max);
    let lagging_max = m.samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let rss_max = m
        .samples
        .iter()
        .map(|s| s.2)
        .max()
        .unwrap_or(0)
        .max(m.rss_end_kib);
    let mib = |kib: u64| kib as f64 / 1024.0;
    // CPU as % of one core over the window.
    let pct = |s: f64| s / w * 100.0;
    let others = m.cpu.machine_busy - m.cpu.lockscope - m.cpu.servers - m.cpu.bench;
    let cores = m.cpu.machine_all / w;
    let converged = match m.converged {
        // The first comparison already matched: the figure is how long one comparison (a fresh
        // read of the server and lockscope's list) takes, an upper bound.
        Some((d, 1)) => format!(
            "≤ {:.0} ms (equal at the first check)",
            d.as_secs_f64() * 1000.0
        ),
        Some((d, checks)) => format!("{:.0} ms ({checks} checks)", d.as_secs_f64() * 1000.0),
        None => format!("not within {} s", args.settle_secs),
    };
    let fig = |what: &str| format!("{name}: {what}");
    let rows = vec![
        row(
            SECTION,
            &fig("lock changes the server accepted"),
            format!("{changes_rate:.0} /s"),
            &format!(
                "{changes} changes ({} acquires, {} releases) in {w:.1} s by {} clients over {} names, each waiting for every answer; {server_note}",
                m.made.acquired, m.made.released, args.clients, args.names
            ),
        ),
        row(
            SECTION,
            &fig("updates lockscope received / applied"),
            format!("{:.0} / {:.0} /s", events / w, applied / w),
            &format!(
                "{:.2} updates per change; lockscope_collector_events_total, lockscope_aggregator_applied_total",
                events / changes.max(1) as f64
            ),
        ),
        row(
            SECTION,
            &fig("acquisitions / releases lockscope booked ÷ made"),
            format!(
                "{:.1} / {:.1} %",
                acquisitions / m.made.acquired.max(1) as f64 * 100.0,
                releases / m.made.released.max(1) as f64 * 100.0
            ),
            &format!(
                "{acquisitions:.0} of {} acquisitions, {releases:.0} of {} releases (lockscope_lock_acquisitions_total, lockscope_lock_releases_total); {}",
                m.made.acquired,
                m.made.released,
                match m.booked_by {
                    Some(d) => format!("every booked acquisition released or held {:.1} s after the burst", d.as_secs_f64()),
                    None => format!("booked acquisitions still not all released or held {} s after the burst", args.settle_secs),
                }
            ),
        ),
        row(
            SECTION,
            &fig("aggregator queue depth max / at burst end; lagging"),
            format!(
                "{depth_max:.0} / {:.0}; lagging {}",
                m.after.queue_depth,
                if lagging_max > 0.0 { "seen" } else { "never" }
            ),
            &format!("{} samples, one per {} ms", m.samples.len(), SAMPLE_EVERY.as_millis()),
        ),
        row(
            SECTION,
            &fig("burst end → model equals a fresh read"),
            converged,
            &format!("{} locks held at the end", m.locks_at_end),
        ),
        row(
            SECTION,
            &fig("lockscope RSS start / max / end"),
            format!(
                "{:.1} / {:.1} / {:.1} MiB",
                mib(m.rss_start_kib),
                mib(rss_max),
                mib(m.rss_end_kib)
            ),
            "VmRSS, sampled with the queue depth",
        ),
        row(
            SECTION,
            &fig("CPU lockscope / servers / clients / rest of machine"),
            format!(
                "{:.0} / {:.0} / {:.0} / {:.0} %",
                pct(m.cpu.lockscope),
                pct(m.cpu.servers),
                pct(m.cpu.bench),
                pct(others)
            ),
            &format!(
                "% of one core over the window; the machine has {cores:.0} cores, {:.0} % busy in all",
                pct(m.cpu.machine_busy) / cores
            ),
        ),
    ];
    let figures = json!({
        "window_s": w,
        "clients": args.clients,
        "names": args.names,
        "acquired": m.made.acquired,
        "released": m.made.released,
        "changes_per_s": changes_rate,
        "server": server_note,
        "updates_received_per_s": events / w,
        "updates_applied_per_s": applied / w,
        "updates_per_change": events / changes.max(1) as f64,
        "acquisitions_booked": acquisitions,
        "releases_booked": releases,
        "queue_depth_max": depth_max,
        "queue_depth_at_end": m.after.queue_depth,
        "lagging_seen": lagging_max > 0.0,
        "samples": m.samples.len(),
        "converged_ms": m.converged.map(|(d, _)| d.as_secs_f64() * 1000.0),
        "converge_checks": m.converged.map(|(_, n)| n),
        "locks_at_end": m.locks_at_end,
        "updates_after_burst": m.settled.events - m.after.events,
        "booked_by_s": m.booked_by.map(|d| d.as_secs_f64()),
        "release_causes": m.release_causes,
        "rss_kib": {"start": m.rss_start_kib, "max": rss_max, "end": m.rss_end_kib},
        "rss_kib_each_second": m.samples.iter().step_by(10).map(|s| s.2).collect::<Vec<_>>(),
        "cpu_pct_of_one_core": {
            "lockscope": pct(m.cpu.lockscope),
            "servers": pct(m.cpu.servers),
            "bench_clients": pct(m.cpu.bench),
            "rest_of_machine": pct(others),
            "machine_busy": pct(m.cpu.machine_busy),
        },
        "cores": cores,
    });
    (rows, figures)
}
