//! Database section: databases cannot be watched, so lockscope polls them. Measured per database
//! (a real MariaDB and PostgreSQL on loopback, the release `lockscope` as its own process):
//!
//! * **change → event**: a named lock taken (`GET_LOCK` / `pg_advisory_lock`) or let go, until
//!   lockscope's event stream says so — bounded by the poll interval plus one round;
//! * **queries per second** lockscope runs against the source, from its own
//!   `lockscope_db_queries_total`, and the **server CPU** they cost: the database processes'
//!   CPU time while lockscope polls an idle server, minus the same window without lockscope;
//! * **10,000 held advisory locks** (PostgreSQL): time until all are shown, then the same
//!   figures with them held (each round reads and decodes every row of `pg_locks`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lockscope_model::id::lock_id;
use lockscope_model::wire::StreamEvent;
use serde_json::{json, Value};

use super::{cpu_s, p50_p99, percentile, row, rss_kib, sorted, start_lockscope, Row};
use crate::harness::{eventually, EventReader};
use crate::support::mysql::{self, GetLock, MariaDb, Params};
use crate::support::postgres::{self, Advisory, AdvisoryKey, Level, Postgres};

const SECTION: &str = "9 databases";

/// What the database section runs.
#[derive(Debug, Clone)]
pub struct DbArgs {
    /// Take/let go cycles for the latency figure (two changes each).
    pub cycles: usize,
    /// lockscope's poll interval.
    pub poll: Duration,
    /// How long each CPU window lasts.
    pub window: Duration,
    /// Advisory locks held at once for the scale figure.
    pub advisory_locks: i64,
}

/// CPU seconds used so far by `pids` (a process that has gone counts 0).
fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu_s(*p)).sum()
}

/// Queries lockscope has run against `source`, from its metrics.
async fn queries(http: &reqwest::Client, base: &str, source: &str) -> Result<f64> {
    let text = super::metrics_text(http, base).await?;
    let prefix = format!("lockscope_db_queries_total{{source=\"{source}\",");
    Ok(text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0))
}

/// One CPU window: the database's CPU seconds per second over `window`, with the process list
/// read again at the end (PostgreSQL starts a process per connection).
async fn server_cpu_rate(pids: impl Fn() -> Vec<u32>, window: Duration) -> f64 {
    let before_pids = pids();
    let before = cpu_of(&before_pids);
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let mut all = before_pids;
    for p in pids() {
        if !all.contains(&p) {
            all.push(p);
        }
    }
    (cpu_of(&all) - before) / t.elapsed().as_secs_f64()
}

/// Takes and lets go of a named lock `cycles` times, timing each change to its stream event.
/// Each change waits a different share of `poll` first (a low-discrepancy sequence), so changes
/// fall all over the poll cycle instead of right after the round that reported the last one.
async fn latencies(
    events: &mut EventReader,
    cycles: usize,
    poll: Duration,
    mut change: impl AsyncFnMut(usize, bool) -> Result<String>,
) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(cycles * 2);
    let mut phase = 0.0_f64;
    for i in 0..cycles {
        for take in [true, false] {
            phase = (phase + 0.618_033_988_75) % 1.0;
            // Decorrelates the change from the poll rounds; not a synchronisation.
            tokio::time::sleep(poll.mul_f64(phase)).await;
            let t = Instant::now();
            let id = change(i, take).await?;
            loop {
                match events.next(Duration::from_secs(30)).await? {
                    (_, StreamEvent::Lock { lock })
                        if take && lock.id == id && !lock.holders.is_empty() =>
                    {
                        break
                    }
                    (_, StreamEvent::Removed { id: gone }) if !take && gone == id => break,
                    _ => {}
                }
            }
            out.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(out)
}

struct Figures {
    latency: Vec<f64>,
    queries_per_s: f64,
    server_cpu_idle: f64,
    server_cpu_polled: f64,
    lockscope_cpu: f64,
}

impl Figures {
    fn rows(&self, name: &str, poll: Duration) -> (Vec<Row>, Value) {
        let latency = sorted(self.latency.clone());
        let cost = (self.server_cpu_polled - self.server_cpu_idle).max(0.0);
        (
            vec![
                row(
                    SECTION,
                    &format!("{name}: change → event (p50 / p99)"),
                    p50_p99(&latency),
                    &format!(
                        "max {:.0} ms; changes spread over the poll cycle; bounded by the poll interval ({} ms) plus one round",
                        percentile(&latency, 1.0),
                        poll.as_millis()
                    ),
                ),
                row(
                    SECTION,
                    &format!("{name}: queries lockscope runs"),
                    format!("{:.1}/s", self.queries_per_s),
                    "read-only SELECTs, a fixed set per round",
                ),
                row(
                    SECTION,
                    &format!("{name}: server CPU they cost"),
                    format!("{:.2} % of a core", cost * 100.0),
                    &format!(
                        "server {:.2} % polled vs {:.2} % idle; lockscope {:.2} %",
                        self.server_cpu_polled * 100.0,
                        self.server_cpu_idle * 100.0,
                        self.lockscope_cpu * 100.0
                    ),
                ),
            ],
            json!({
                "latency_ms": {"p50": percentile(&latency, 0.5), "p99": percentile(&latency, 0.99), "max": percentile(&latency, 1.0), "n": latency.len()},
                "queries_per_s": self.queries_per_s,
                "server_cpu_cores": {"polled": self.server_cpu_polled, "idle": self.server_cpu_idle, "cost": cost},
                "lockscope_cpu_cores": self.lockscope_cpu,
            }),
        )
    }
}

/// The idle windows (without, then with lockscope) and the lockscope process's CPU.
async fn cost_windows(
    pids: impl Fn() -> Vec<u32> + Copy,
    lockscope_pid: u32,
    http: &reqwest::Client,
    base: &str,
    source: &str,
    window: Duration,
) -> Result<(f64, f64, f64)> {
    let q0 = queries(http, base, source).await?;
    let l0 = cpu_s(lockscope_pid).context("lockscope's CPU")?;
    let t = Instant::now();
    let polled = server_cpu_rate(pids, window).await;
    let secs = t.elapsed().as_secs_f64();
    let q1 = queries(http, base, source).await?;
    let l1 = cpu_s(lockscope_pid).context("lockscope's CPU")?;
    Ok(((q1 - q0) / secs, polled, (l1 - l0) / secs))
}

/// Takes (or lets go of) advisory lock `i` at session level: the id of the lock it changes.
async fn advisory_change(session: &mut Advisory, i: usize, take: bool) -> Result<String> {
    let key = AdvisoryKey::Big(i as i64);
    if take {
        session.lock(key, Level::Session, false);
        session.wait_acquired(Duration::from_secs(10)).await?;
    } else {
        session.unlock(key, false).await?;
    }
    Ok(lock_id("bench-p", &format!("/advisory/postgres/{i}")))
}

pub async fn run(bin: &Path, dir: &Path, args: &DbArgs) -> Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    let poll = format!("{}ms", args.poll.as_millis());

    // MariaDB: GET_LOCK.
    let maria = MariaDb::start().await?;
    let maria_pid = maria.pid().context("mariadbd's pid")?;
    let maria_pids = move || vec![maria_pid];
    let idle = server_cpu_rate(maria_pids, args.window).await;
    let (lockscope, base, _) = start_lockscope(
        bin,
        dir,
        "mysql",
        &format!(
            "[[mysql]]\nname = \"bench-m\"\nurl = \"{}\"\npoll_interval = \"{poll}\"\n",
            maria.url()
        ),
    )
    .await?;
    let http = reqwest::Client::new();
    let (queries_per_s, polled, lockscope_cpu) = cost_windows(
        maria_pids,
        lockscope.0.id(),
        &http,
        &base,
        "bench-m",
        args.window,
    )
    .await?;
    let mut events = EventReader::connect(&base).await?;
    let mut holder: Option<GetLock> = None;
    let url = maria.app_url();
    let latency = latencies(&mut events, args.cycles, args.poll, async |i, take| {
        let name = format!("bench-{i}");
        if take {
            let mut g =
                GetLock::start(mysql::connect(&url).await?, &name, 10, Params::Literal).await?;
            g.wait_acquired(Duration::from_secs(10)).await?;
            holder = Some(g);
        } else if let Some(g) = holder.take() {
            g.release().await?;
        }
        Ok(lock_id("bench-m", &format!("/get_lock/{name}")))
    })
    .await?;
    let (r, maria_json) = Figures {
        latency,
        queries_per_s,
        server_cpu_idle: idle,
        server_cpu_polled: polled,
        lockscope_cpu,
    }
    .rows("MariaDB", args.poll);
    rows.extend(r);
    drop(lockscope);
    drop(maria);

    // PostgreSQL: advisory locks, then 10,000 of them held.
    let pg = Postgres::start_with(&["max_locks_per_transaction=256"]).await?;
    let pg_pid = pg.pid().context("postgres's pid")?;
    let pg_children = move || {
        let mut all = vec![pg_pid];
        all.extend(crate::support::postgres::children(pg_pid));
        all
    };
    let idle = server_cpu_rate(pg_children, args.window).await;
    let (lockscope, base, _) = start_lockscope(
        bin,
        dir,
        "postgres",
        &format!(
            "[[postgres]]\nname = \"bench-p\"\nurl = \"{}\"\npoll_interval = \"{poll}\"\n",
            pg.url()
        ),
    )
    .await?;
    let lockscope_pid = lockscope.0.id();
    let (queries_per_s, polled, lockscope_cpu) = cost_windows(
        pg_children,
        lockscope_pid,
        &http,
        &base,
        "bench-p",
        args.window,
    )
    .await?;
    let mut events = EventReader::connect(&base).await?;
    let url = pg.url();
    let mut session = Advisory::open(postgres::connect(&url, "bench").await?).await?;
    let latency = latencies(&mut events, args.cycles, args.poll, async |i, take| {
        advisory_change(&mut session, i, take).await
    })
    .await?;
    let (r, pg_json) = Figures {
        latency,
        queries_per_s,
        server_cpu_idle: idle,
        server_cpu_polled: polled,
        lockscope_cpu,
    }
    .rows("PostgreSQL", args.poll);
    rows.extend(r);

    // 10,000 advisory locks held by one connection.
    let n = args.advisory_locks;
    let many = Advisory::open(postgres::connect(&url, "bench-many").await?).await?;
    let t = Instant::now();
    many.hold_many(1_000_000, n, Duration::from_secs(60))
        .await?;
    let taken_ms = t.elapsed().as_secs_f64() * 1000.0;
    let shown = eventually(
        Duration::from_secs(120),
        "every advisory lock shown",
        async || {
            let sources: Value = http
                .get(format!("{base}/api/v1/sources"))
                .send()
                .await?
                .json()
                .await?;
            let locks = sources["sources"][0]["locks"].as_i64().unwrap_or(0);
            Ok((locks >= n).then(|| t.elapsed()))
        },
    )
    .await?;
    let (queries_held, polled_held, lockscope_held) = cost_windows(
        pg_children,
        lockscope_pid,
        &http,
        &base,
        "bench-p",
        args.window,
    )
    .await?;
    let rss = rss_kib(lockscope_pid)? as f64 / 1024.0;
    let cycles = (args.cycles / 5).max(5);
    let held_latency = sorted(
        latencies(&mut events, cycles, args.poll, async |i, take| {
            advisory_change(&mut session, i, take).await
        })
        .await?,
    );
    if held_latency.is_empty() {
        bail!("no latency measured with {n} locks held");
    }
    rows.push(row(
        SECTION,
        &format!("PostgreSQL, {n} advisory locks held: all shown after"),
        format!("{:.0} ms", shown.as_secs_f64() * 1000.0),
        &format!("taking them took {taken_ms:.0} ms (one statement)"),
    ));
    rows.push(row(
        SECTION,
        &format!("PostgreSQL, {n} held: change → event (p50 / p99)"),
        p50_p99(&held_latency),
        &format!("{} changes", held_latency.len()),
    ));
    rows.push(row(
        SECTION,
        &format!("PostgreSQL, {n} held: cost per second"),
        format!(
            "server {:.1} %, lockscope {:.1} % of a core",
            (polled_held - idle).max(0.0) * 100.0,
            lockscope_held * 100.0
        ),
        &format!("{queries_held:.1} queries/s; lockscope RSS {rss:.1} MiB"),
    ));
    drop(many);
    drop(lockscope);
    Ok((
        rows,
        json!({
            "poll_interval_ms": args.poll.as_millis() as u64,
            "mariadb": maria_json,
            "postgres": pg_json,
            "postgres_advisory_held": {
                "locks": n,
                "take_ms": taken_ms,
                "all_shown_ms": shown.as_secs_f64() * 1000.0,
                "latency_ms": {"p50": percentile(&held_latency, 0.5), "p99": percentile(&held_latency, 0.99)},
                "server_cpu_cost_cores": (polled_held - idle).max(0.0),
                "lockscope_cpu_cores": lockscope_held,
                "queries_per_s": queries_held,
                "lockscope_rss_mib": rss,
            },
        }),
    ))
}

/// What the connections section runs (`--only db-connections`, issue 37).
#[derive(Debug, Clone)]
pub struct ConnectionsArgs {
    /// Idle client connections open while lockscope polls.
    pub connections: usize,
    pub poll: Duration,
    pub window: Duration,
}

const CONNECTIONS_SECTION: &str = "9b database connections (issue 37)";

/// The database's processes, read again at each window's end.
type Pids = Box<dyn Fn() -> Vec<u32> + Send>;

/// An idle transaction holding `bench_queue`, an `ALTER TABLE` waiting for it and a `SELECT`
/// behind the `ALTER`: the queue lockscope's table-lock queries read while someone waits.
async fn queue(
    conns: [crate::support::dblocks::DbConn; 3],
    url: &str,
) -> Result<Vec<crate::support::dblocks::Session>> {
    use crate::support::dblocks::Session;
    let [a, b, c] = conns;
    let (idle, alter, read) = (
        Session::new(a).await?,
        Session::new(b).await?,
        Session::new(c).await?,
    );
    idle.exec("BEGIN").await?;
    idle.exec("SELECT * FROM bench_queue").await?;
    for (session, sql) in [
        (&alter, "ALTER TABLE bench_queue ADD COLUMN w int"),
        (&read, "SELECT * FROM bench_queue"),
    ] {
        // Blocks in the server until the idle transaction ends (when the sessions drop).
        drop(session.start(sql));
        // The SELECT queues behind the ALTER only once the ALTER waits (asked of the server:
        // the baseline binary shows no queue).
        if std::ptr::eq(session, &alter) {
            waiting_in_server(url).await?;
        }
    }
    Ok(vec![idle, alter, read])
}

/// Waits until the server at `url` has a connection waiting for a table lock.
async fn waiting_in_server(url: &str) -> Result<()> {
    let pg = url.starts_with("postgres");
    eventually(Duration::from_secs(60), "the ALTER waiting", async || {
        let n: i64 = if pg {
            let mut c = postgres::connect(url, "bench-check").await?;
            sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE NOT granted")
                .fetch_one(&mut c)
                .await?
        } else {
            let mut c = mysql::connect(url).await?;
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata lock'",
            )
            .fetch_one(&mut c)
            .await?
        };
        Ok((n > 0).then_some(()))
    })
    .await
}

/// Waits until lockscope at `base` shows a table lock with `waiters` waiters.
async fn queue_shown(http: &reqwest::Client, base: &str, waiters: usize) -> Result<()> {
    eventually(
        Duration::from_secs(60),
        "the table lock queue shown",
        async || {
            let page: Value = http
                .get(format!("{base}/api/v1/locks?recipe=table_lock"))
                .send()
                .await?
                .json()
                .await?;
            Ok(page["locks"]
                .as_array()
                .is_some_and(|l| {
                    l.iter()
                        .any(|l| l["waiters"].as_array().is_some_and(|w| w.len() == waiters))
                })
                .then_some(()))
        },
    )
    .await
}

/// The server CPU lockscope's polls cost with `connections` idle connections open: quiet, and
/// with a queue behind `ALTER TABLE` (the relation-lock and metadata-lock reads of issue 37 run
/// then, and the connections' process names are read every round).
pub async fn run_connections(
    bin: &Path,
    dir: &Path,
    args: &ConnectionsArgs,
) -> Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    let mut out = serde_json::Map::new();
    let poll = format!("{}ms", args.poll.as_millis());
    let n = args.connections;
    let max = format!("{}", n + 100);
    let http = reqwest::Client::new();

    for db in ["PostgreSQL", "MariaDB"] {
        let config: String;
        let pids: Pids;
        let conns: usize;
        let queue_conns: [crate::support::dblocks::DbConn; 3];
        let queue_url: String;
        // Keeps the servers and the idle connections alive for the windows.
        let mut keep_pg = None;
        let mut keep_maria = None;
        let mut idle_pg = Vec::new();
        let mut idle_maria = Vec::new();
        if db == "PostgreSQL" {
            let pg = Postgres::start_with(&[&format!("max_connections={max}")]).await?;
            pg.exec(
                "CREATE TABLE bench_queue (id int PRIMARY KEY); INSERT INTO bench_queue VALUES (1)",
            )
            .await?;
            for i in 0..n {
                idle_pg.push(postgres::connect(&pg.url(), &format!("idle-{i}")).await?);
            }
            let pid = pg.pid().context("postgres's pid")?;
            pids = Box::new(move || {
                let mut all = vec![pid];
                all.extend(crate::support::postgres::children(pid));
                all
            });
            config = format!(
                "[[postgres]]\nname = \"conns\"\nurl = \"{}\"\npoll_interval = \"{poll}\"\n",
                pg.url()
            );
            queue_url = pg.url();
            queue_conns = [
                postgres::connect_db(&pg.url(), "report-job").await?,
                postgres::connect_db(&pg.url(), "migration").await?,
                postgres::connect_db(&pg.url(), "web").await?,
            ];
            conns = idle_pg.len();
            keep_pg = Some(pg);
        } else {
            let maria = MariaDb::start_with(&[
                &format!("--max-connections={max}"),
                "--performance-schema=ON",
            ])
            .await?;
            maria
                .exec("CREATE TABLE app.bench_queue (id int PRIMARY KEY) ENGINE=InnoDB; INSERT INTO app.bench_queue VALUES (1)")
                .await?;
            for _ in 0..n {
                idle_maria.push(mysql::connect(&maria.app_url()).await?);
            }
            let pid = maria.pid().context("mariadbd's pid")?;
            pids = Box::new(move || vec![pid]);
            config = format!(
                "[[mysql]]\nname = \"conns\"\nurl = \"{}\"\npoll_interval = \"{poll}\"\n",
                maria.url()
            );
            queue_url = maria.url();
            queue_conns = [
                mysql::connect_db(&maria.app_url()).await?,
                mysql::connect_db(&maria.app_url()).await?,
                mysql::connect_db(&maria.app_url()).await?,
            ];
            conns = idle_maria.len();
            keep_maria = Some(maria);
        }
        let pids = &pids;
        let idle = server_cpu_rate(pids, args.window).await;
        let (lockscope, base, _) = start_lockscope(
            bin,
            dir,
            if db == "MariaDB" { "mysql" } else { "postgres" },
            &config,
        )
        .await?;
        let lockscope_pid = lockscope.0.id();
        let (q_quiet, polled_quiet, ls_quiet) =
            cost_windows(pids, lockscope_pid, &http, &base, "conns", args.window).await?;
        // A binary before issue 37 shows no table queue: its queue window is measured all
        // the same (the baseline the new reads are compared with).
        let sessions = match queue(queue_conns, &queue_url).await {
            Ok(sessions) => {
                if let Err(e) = queue_shown(&http, &base, 2).await {
                    eprintln!("note: {db}: {e:#} (a binary without table queues?)");
                }
                Some(sessions)
            }
            Err(e) => {
                eprintln!("note: {db}: {e:#} (a binary without table queues?)");
                None
            }
        };
        let (q_queue, polled_queue, ls_queue) =
            cost_windows(pids, lockscope_pid, &http, &base, "conns", args.window).await?;
        drop(sessions);
        drop(lockscope);
        let (quiet, queued) = (
            (polled_quiet - idle).max(0.0),
            (polled_queue - idle).max(0.0),
        );
        rows.push(row(
            CONNECTIONS_SECTION,
            &format!("{db}, {conns} connections: server CPU of lockscope's polls (quiet / a queue behind ALTER TABLE)"),
            format!("{:.2} % / {:.2} % of a core", quiet * 100.0, queued * 100.0),
            &format!(
                "goal < 1 %; server {:.2} % / {:.2} % polled vs {:.2} % without lockscope; {q_quiet:.1} / {q_queue:.1} queries/s; lockscope {:.2} % / {:.2} %",
                polled_quiet * 100.0,
                polled_queue * 100.0,
                idle * 100.0,
                ls_quiet * 100.0,
                ls_queue * 100.0
            ),
        ));
        out.insert(
            db.to_lowercase(),
            json!({
                "connections": conns,
                "server_cpu_cores": {"idle": idle, "polled_quiet": polled_quiet, "polled_queue": polled_queue, "cost_quiet": quiet, "cost_queue": queued},
                "queries_per_s": {"quiet": q_quiet, "queue": q_queue},
                "lockscope_cpu_cores": {"quiet": ls_quiet, "queue": ls_queue},
            }),
        );
        drop(idle_pg);
        drop(idle_maria);
        drop(keep_pg);
        drop(keep_maria);
    }
    out.insert(
        "poll_interval_ms".into(),
        json!(args.poll.as_millis() as u64),
    );
    Ok((rows, Value::Object(out)))
}
