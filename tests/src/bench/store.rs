//! Store section (`--only store`, issue 22): what keeping the lock history costs, on an
//! embedded SQLite file and on a real PostgreSQL 15 (started here with `fsync=on`, as a store
//! runs), each driven through lockscope's own [`Store`] in this process:
//!
//! * **write rate** — lock events in the aggregator's shape (acquired/released pairs over
//!   `--store-locks` lock ids, ZooKeeper-like node and session strings), recorded in batches of
//!   1,000 as fast as the store takes them (the producer only waits while the default buffer is
//!   full, so nothing is dropped): events written per second from the first record until
//!   `events_written` has them all; then a burst of twice the default buffer recorded at once,
//!   which shows what the buffer absorbs and what it drops;
//! * **bytes per event and per lock state** — SQLite: the file (and its WAL, after a
//!   `wal_checkpoint(TRUNCATE)`) grown by the events ÷ the events, and by the states ÷ the
//!   states; PostgreSQL: `pg_total_relation_size` of `lock_events` and `lock_state` ÷ their
//!   rows. The states are written by the store's writer itself from a [`LiveLocks`] table of
//!   one ZooKeeper-like view per lock;
//! * **opening a lock with 100,000 events** — the release `lockscope` as its own process with
//!   `[store]` on the filled store (and one idle PostgreSQL source, as a config needs one):
//!   `GET /api/v1/locks/{id}` of a lock it never saw (its last state and newest 200 events from
//!   the store), the first page of `/events`, a page near the oldest event, and every page;
//! * **pruning** — the store reopened with `max_events` set so that `--store-prune` events must
//!   go, while new events arrive at `--store-paced-rate`: how long pruning takes (it starts one
//!   `PRUNE_EVERY`, 60 s, after the writer starts: the benchmark waits for it) and each batch's
//!   record → written latency before, during and after it.
//!
//! Every step is bounded; a backend whose run fails is a row saying so.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use lockscope::store::{LiveLocks, LockRecord, Store, StoreConfig};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{
    Backend, EventKind, HolderView, LockEvent, LockView, ReleaseCause, WaiterView,
};
use serde_json::{json, Value};
use sqlx::{Connection, Row as _};

use super::{cpu_s, percentile, row, sorted, start_lockscope, Row};
use crate::harness::eventually;
use crate::support::postgres::{self, Postgres};

const SECTION: &str = "10 store";
/// Events per `record` call: what one aggregator round hands the store at a busy moment.
const BATCH: usize = 1_000;
/// The source the benchmark's locks belong to.
const SOURCE: &str = "bench";
/// The store's prune interval (`PRUNE_EVERY` in the server's `store/writer.rs`).
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// How long pruning may take before it is reported as far as it got.
const PRUNE_LIMIT: Duration = Duration::from_secs(240);
/// How long writes are timed after pruning caught up.
const AFTER: Duration = Duration::from_secs(10);

/// What the store section runs.
#[derive(Debug, Clone)]
pub struct StoreArgs {
    /// Events recorded for the write rate, and the lock ids they fall on.
    pub events: usize,
    pub locks: usize,
    /// Of those, the events of the one lock opened over HTTP (the burst that follows adds its
    /// share: a fifth of 200,000 at the defaults).
    pub hot_events: usize,
    /// Events pruning must delete.
    pub prune: usize,
    /// Events per second recorded while pruning runs.
    pub paced_rate: usize,
    /// Requests per HTTP figure.
    pub requests: usize,
}

// ---------------------------------------------------------------------------------------------
// The workload

/// SplitMix64: reproducible noise for node names and durations.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Lock events as the aggregator books them: an acquisition (with its wait) and its release
/// (with its hold), by Curator-style protected nodes (`_c_<uuid>-lock-<seq>`, ~75 characters)
/// of 64-bit ZooKeeper sessions. Every `hot_every`-th pair is on the hot lock.
struct Workload {
    paths: Vec<String>,
    ids: Vec<String>,
    hot_path: String,
    hot: String,
    hot_every: usize,
    pair: usize,
    noise: Noise,
}

impl Workload {
    fn new(locks: usize, hot_every: usize) -> Workload {
        let paths: Vec<String> = (0..locks).map(|j| format!("/locks/orders/{j}")).collect();
        let hot_path = "/locks/hot".to_string();
        Workload {
            ids: paths.iter().map(|p| lock_id(SOURCE, p)).collect(),
            paths,
            hot: lock_id(SOURCE, &hot_path),
            hot_path,
            hot_every,
            pair: 0,
            noise: Noise(22),
        }
    }

    /// The next `n` events (rounded up to pairs).
    fn batch(&mut self, n: usize) -> Vec<(String, LockEvent)> {
        let mut out = Vec::with_capacity(n + 1);
        let now = lockscope::now_ms();
        while out.len() < n {
            let k = self.pair;
            self.pair += 1;
            let (id, path) = if self.hot_every > 0 && k.is_multiple_of(self.hot_every) {
                (&self.hot, &self.hot_path)
            } else {
                // Spread over the locks in an order that is not their id order.
                let j = k.wrapping_mul(7919) % self.ids.len();
                (&self.ids[j], &self.paths[j])
            };
            let a = self.noise.next();
            let b = self.noise.next();
            let node = format!(
                "{path}/_c_{:08x}-{:04x}-{:04x}-{:04x}-{:012x}-lock-{:010}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xffff,
                b >> 48,
                b & 0xffff_ffff_ffff,
                k
            );
            let session = format!("0x{:016x}", 0x1000_0000_0000_0000 | (b >> 8));
            let wait = (a % 50) as i64;
            let hold = 1 + (b % 5_000) as i64;
            let cause = if b.is_multiple_of(50) {
                ReleaseCause::SessionExpired
            } else {
                ReleaseCause::Released
            };
            out.push((
                id.clone(),
                LockEvent {
                    at_ms: now,
                    kind: EventKind::Acquired,
                    node: node.clone(),
                    session: session.clone(),
                    cause: None,
                    duration_ms: Some(wait),
                },
            ));
            out.push((
                id.clone(),
                LockEvent {
                    at_ms: now,
                    kind: EventKind::Released,
                    node,
                    session,
                    cause: Some(cause),
                    duration_ms: Some(hold),
                },
            ));
        }
        out
    }

    /// One view per lock as the aggregator renders it: a holder and two queued waiters.
    fn views(&mut self) -> BTreeMap<Arc<str>, Arc<dyn LockRecord>> {
        let now = lockscope::now_ms();
        let mut all = BTreeMap::new();
        let locks: Vec<(String, String)> = self
            .ids
            .iter()
            .cloned()
            .zip(self.paths.iter().cloned())
            .chain([(self.hot.clone(), self.hot_path.clone())])
            .collect();
        for (id, path) in locks {
            let node = |n: &mut Noise, seq: u64| {
                let a = n.next();
                format!(
                    "{path}/_c_{:08x}-{:04x}-{:04x}-{:04x}-{:012x}-lock-{seq:010}",
                    a >> 32,
                    (a >> 16) & 0xffff,
                    a & 0xffff,
                    a >> 48,
                    a & 0xffff_ffff_ffff
                )
            };
            let session = |n: &mut Noise| format!("0x{:016x}", n.next() >> 1);
            let holder = HolderView {
                node: node(&mut self.noise, 40),
                session: session(&mut self.noise),
                since_ms: now - 1_500,
                held_ms: 1_500,
                mode: None,
                watchers: 1,
                reentrancy: None,
                lease: None,
                identity: None,
                version: Some("4294967342".into()),
                statement: None,
            };
            let waiters = (1..=2)
                .map(|position| WaiterView {
                    node: node(&mut self.noise, 40 + u64::from(position)),
                    session: session(&mut self.noise),
                    since_ms: now - 900,
                    waited_ms: 900,
                    position,
                    mode: None,
                    watches: Some(holder.node.clone()),
                    deadline_ms: None,
                    lease: None,
                    identity: None,
                    statement: None,
                })
                .collect();
            let view = LockView {
                id: id.clone(),
                source: SOURCE.into(),
                backend: Backend::Zookeeper,
                path: path.clone(),
                recipe: "curator-mutex".into(),
                holders: vec![holder],
                waiters,
                watchers: 1,
                oldest_wait_ms: 900,
                acquisitions: 25,
                releases: 24,
                changed_ms: now - 900,
                ..LockView::default()
            };
            all.insert(Arc::from(id.as_str()), Arc::new(View(view)) as _);
        }
        all
    }
}

struct View(LockView);

impl LockRecord for View {
    fn view(&self, _: &str) -> LockView {
        self.0.clone()
    }
}

/// A live lock table of fixed views, read once through by the store's writer.
struct Table(BTreeMap<Arc<str>, Arc<dyn LockRecord>>);

impl LiveLocks for Table {
    fn page(
        &self,
        prefix: &str,
        after: Option<&str>,
        n: usize,
    ) -> Vec<(Arc<str>, Arc<dyn LockRecord>)> {
        let from = match after {
            Some(after) => std::ops::Bound::Excluded(Arc::from(after)),
            None => std::ops::Bound::Included(Arc::from(prefix)),
        };
        self.0
            .range((from, std::ops::Bound::Unbounded))
            .take_while(|(id, _)| id.starts_with(prefix))
            .take(n)
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect()
    }

    fn sources(&self) -> Vec<(String, bool)> {
        vec![(SOURCE.into(), true)]
    }
}

// ---------------------------------------------------------------------------------------------
// Looking at the store from the side

/// A connection of the benchmark's own to the store, for sizes and counts.
enum Probe {
    Sqlite {
        conn: sqlx::SqliteConnection,
        path: PathBuf,
    },
    Postgres(sqlx::PgConnection),
}

/// Bytes a table takes, and its rows.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    bytes: i64,
    rows: i64,
}

impl Probe {
    async fn open(url: &str) -> Result<Probe> {
        match url.strip_prefix("sqlite://") {
            Some(path) => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .busy_timeout(Duration::from_secs(10));
                Ok(Probe::Sqlite {
                    conn: sqlx::SqliteConnection::connect_with(&options).await?,
                    path: PathBuf::from(path),
                })
            }
            None => Ok(Probe::Postgres(
                postgres::connect(url, "lockscope-bench").await?,
            )),
        }
    }

    async fn scalar(&mut self, sql: &str) -> Result<Option<i64>> {
        Ok(match self {
            Probe::Sqlite { conn, .. } => sqlx::query_scalar(sql).fetch_one(conn).await?,
            Probe::Postgres(conn) => sqlx::query_scalar(sql).fetch_one(conn).await?,
        })
    }

    async fn rows(&mut self, table: &str) -> Result<i64> {
        Ok(self
            .scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .await?
            .unwrap_or(0))
    }

    /// The lowest and highest lock event id (each O(log n)); `(0, 0)` when there are none.
    async fn id_span(&mut self) -> Result<(i64, i64)> {
        let min = self.scalar("SELECT MIN(id) FROM lock_events").await?;
        let max = self.scalar("SELECT MAX(id) FROM lock_events").await?;
        Ok((min.unwrap_or(0), max.unwrap_or(0)))
    }

    /// The id of `lock`'s event `n` places after its oldest.
    async fn nth_oldest(&mut self, lock: &str, n: i64) -> Result<i64> {
        const SQL: &str =
            "SELECT id FROM lock_events WHERE lock_id = $1 ORDER BY id LIMIT 1 OFFSET $2";
        Ok(match self {
            Probe::Sqlite { conn, .. } => {
                sqlx::query_scalar(SQL)
                    .bind(lock)
                    .bind(n)
                    .fetch_one(conn)
                    .await?
            }
            Probe::Postgres(conn) => {
                sqlx::query_scalar(SQL)
                    .bind(lock)
                    .bind(n)
                    .fetch_one(conn)
                    .await?
            }
        })
    }

    /// The store's whole size (SQLite: file + WAL after a truncating checkpoint), and
    /// PostgreSQL's own figure per table.
    async fn bytes(&mut self) -> Result<(i64, Option<Size>, Option<Size>)> {
        match self {
            Probe::Sqlite { conn, path } => {
                // Busy while the writer writes: tried again (bounded).
                eventually(Duration::from_secs(30), "a full checkpoint", async || {
                    let busy: i64 = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                        .fetch_one(&mut *conn)
                        .await?
                        .get(0);
                    Ok((busy == 0).then_some(()))
                })
                .await?;
                let mut total = 0;
                for suffix in ["", "-wal", "-shm"] {
                    let mut name = path.clone().into_os_string();
                    name.push(suffix);
                    total += std::fs::metadata(&name).map(|m| m.len()).unwrap_or(0) as i64;
                }
                Ok((total, None, None))
            }
            Probe::Postgres(conn) => {
                let db: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
                    .fetch_one(&mut *conn)
                    .await?;
                let mut sizes = Vec::new();
                for table in ["lock_events", "lock_state"] {
                    let row = sqlx::query(&format!(
                        "SELECT pg_total_relation_size('{table}'), COUNT(*) FROM {table}"
                    ))
                    .fetch_one(&mut *conn)
                    .await?;
                    sizes.push(Size {
                        bytes: row.get(0),
                        rows: row.get(1),
                    });
                }
                Ok((db, Some(sizes[0]), Some(sizes[1])))
            }
        }
    }

    /// How long the prune's "which id is the oldest kept" query takes with `max_events`, ms
    /// (it runs once per batch of 500).
    async fn oldest_kept_ms(&mut self, max_events: i64) -> Result<f64> {
        const SQL: &str = "SELECT id FROM lock_events ORDER BY id DESC LIMIT 1 OFFSET $1";
        let t = Instant::now();
        match self {
            Probe::Sqlite { conn, .. } => {
                sqlx::query(SQL)
                    .bind(max_events - 1)
                    .fetch_optional(conn)
                    .await?;
            }
            Probe::Postgres(conn) => {
                sqlx::query(SQL)
                    .bind(max_events - 1)
                    .fetch_optional(conn)
                    .await?;
            }
        }
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    }

    async fn close(self) {
        let _ = match self {
            Probe::Sqlite { conn, .. } => conn.close().await,
            Probe::Postgres(conn) => conn.close().await,
        };
    }
}

// ---------------------------------------------------------------------------------------------
// The figures

fn load_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn store_config(url: &str, max_events: Option<u64>) -> StoreConfig {
    let mut config = StoreConfig {
        url: Some(url.to_string()),
        replica: Some("bench".into()),
        ..StoreConfig::default()
    };
    if let Some(max) = max_events {
        config.max_events = max;
    }
    config
}

async fn opened(url: &str, max_events: Option<u64>) -> Result<Store> {
    let store = Store::open(&store_config(url, max_events))?;
    eventually(Duration::from_secs(120), "the store writes", async || {
        if let Some(e) = store.status().error {
            if !store.status().connected {
                bail!("the store: {e}");
            }
        }
        Ok(store.writing().then_some(()))
    })
    .await?;
    Ok(store)
}

/// Waits until the store has written `target` events (bounded).
async fn written(store: &Store, target: u64, limit: Duration) -> Result<()> {
    eventually(limit, &format!("{target} events written"), async || {
        Ok((store.events_written() >= target).then_some(()))
    })
    .await
}

/// CPU seconds of this process and of the PostgreSQL server (0 without one).
fn cpu_now(pg: Option<&Postgres>) -> (f64, f64) {
    let own = cpu_s(std::process::id()).unwrap_or(f64::NAN);
    let server = pg.map_or(0.0, |pg| {
        pg.processes().iter().filter_map(|p| cpu_s(*p)).sum()
    });
    (own, server)
}

struct WriteRate {
    events: usize,
    secs: f64,
    dropped: u64,
    /// CPU, cores: this process (store writer + producer), the PostgreSQL server.
    cpu_bench: f64,
    cpu_server: f64,
    load: f64,
}

/// Records `events` as fast as the store takes them without dropping any.
async fn write_rate(
    store: &Store,
    workload: &mut Workload,
    events: usize,
    pg: Option<&Postgres>,
) -> Result<WriteRate> {
    let cap = StoreConfig::default().buffer_events;
    let start_written = store.events_written();
    let start_dropped = store.events_dropped();
    let (own0, server0) = cpu_now(pg);
    let t = Instant::now();
    let mut sent = 0;
    while sent < events {
        let batch = workload.batch(BATCH.min(events - sent));
        // Flow control of the producer: a full buffer would drop the oldest.
        while store.queue_depth() + batch.len() > cap {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        sent += batch.len();
        store.record(batch);
    }
    let limit = Duration::from_secs(60 + (events / 2_000) as u64);
    written(store, start_written + sent as u64, limit).await?;
    let secs = t.elapsed().as_secs_f64();
    let (own1, server1) = cpu_now(pg);
    Ok(WriteRate {
        events: sent,
        secs,
        dropped: store.events_dropped() - start_dropped,
        cpu_bench: (own1 - own0) / secs,
        cpu_server: (server1 - server0) / secs,
        load: load_1m(),
    })
}

struct Burst {
    events: usize,
    record_ms: f64,
    dropped: u64,
    drained_s: f64,
}

/// Records twice the default buffer at once (batches back to back, never waiting).
async fn burst(store: &Store, workload: &mut Workload) -> Result<Burst> {
    let events = 2 * StoreConfig::default().buffer_events;
    let batches: Vec<_> = (0..events / BATCH).map(|_| workload.batch(BATCH)).collect();
    let sent: usize = batches.iter().map(Vec::len).sum();
    let start_written = store.events_written();
    let start_dropped = store.events_dropped();
    let t = Instant::now();
    for batch in batches {
        store.record(batch);
    }
    let record_ms = t.elapsed().as_secs_f64() * 1000.0;
    let dropped = store.events_dropped() - start_dropped;
    written(
        store,
        start_written + sent as u64 - dropped,
        Duration::from_secs(300),
    )
    .await?;
    Ok(Burst {
        events: sent,
        record_ms,
        dropped,
        drained_s: t.elapsed().as_secs_f64(),
    })
}

struct Sizes {
    events: i64,
    bytes_per_event: f64,
    states: i64,
    bytes_per_state: f64,
    states_s: f64,
    /// PostgreSQL's own per-table figures.
    pg_events: Option<Size>,
    pg_states: Option<Size>,
}

/// Bytes per event (the store as filled), then the lock states written and bytes per state.
async fn sizes(
    store: &Store,
    probe: &mut Probe,
    empty_bytes: i64,
    workload: &mut Workload,
) -> Result<Sizes> {
    let events = probe.rows("lock_events").await?;
    let (with_events, pg_events, _) = probe.bytes().await?;
    let views = workload.views();
    let states = views.len() as i64;
    let t = Instant::now();
    store.attach(Arc::new(Table(views)));
    eventually(
        Duration::from_secs(120),
        "every lock state written",
        async || Ok((probe.rows("lock_state").await? >= states).then_some(())),
    )
    .await?;
    let states_s = t.elapsed().as_secs_f64();
    let (with_states, _, pg_states) = probe.bytes().await?;
    let (bytes_per_event, bytes_per_state) = match (pg_events, pg_states) {
        (Some(e), Some(s)) => (
            e.bytes as f64 / e.rows.max(1) as f64,
            s.bytes as f64 / s.rows.max(1) as f64,
        ),
        _ => (
            (with_events - empty_bytes) as f64 / events.max(1) as f64,
            (with_states - with_events) as f64 / states.max(1) as f64,
        ),
    };
    Ok(Sizes {
        events,
        bytes_per_event,
        states,
        bytes_per_state,
        states_s,
        pg_events,
        pg_states,
    })
}

/// Timed GETs of one URL: (ms each, the last body).
async fn timed(http: &reqwest::Client, url: &str, n: usize) -> Result<(Vec<f64>, Value)> {
    let mut ms = Vec::with_capacity(n);
    let mut body = Value::Null;
    for _ in 0..n {
        let t = Instant::now();
        let resp = http.get(url).send().await?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        ensure!(
            status.is_success(),
            "GET {url}: {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        body = serde_json::from_slice(&bytes)?;
    }
    Ok((ms, body))
}

/// First try, then p50 / p99 of the others.
fn first_p50_p99(ms: &[f64]) -> (f64, f64, f64) {
    let rest = sorted(ms[1..].to_vec());
    (ms[0], percentile(&rest, 0.5), percentile(&rest, 0.99))
}

struct Opening {
    detail: (f64, f64, f64),
    detail_events: usize,
    first_page: (f64, f64, f64),
    deep_page: (f64, f64, f64),
    deep_events: usize,
    all_pages_ms: f64,
    all_events: usize,
    pages: usize,
    ready_s: f64,
}

/// The release lockscope on the filled store: a lock it never saw, opened with its history.
#[allow(clippy::too_many_arguments)]
async fn open_lock(
    bin: &Path,
    dir: &Path,
    name: &str,
    store_url: &str,
    source_url: &str,
    hot: &str,
    deep_before: i64,
    requests: usize,
) -> Result<Opening> {
    let config = format!(
        "[[postgres]]\nname = \"bench-src\"\nurl = \"{source_url}\"\n\n[store]\nurl = \"{store_url}\"\nreplica = \"bench-http\"\n"
    );
    let (lockscope, base, _) = start_lockscope(bin, dir, name, &config).await?;
    let http = reqwest::Client::new();
    let t = Instant::now();
    // The new writer first reads what its predecessor wrote lately (to fill a gap): wait until
    // it writes and has nothing pending, so the reads are timed alone.
    eventually(
        Duration::from_secs(180),
        "lockscope writes the history",
        async || {
            let status: Value = http
                .get(format!("{base}/api/v1/store"))
                .send()
                .await?
                .json()
                .await?;
            Ok((status["writing"] == true && status["queue_depth"] == 0).then_some(()))
        },
    )
    .await?;
    let ready_s = t.elapsed().as_secs_f64();
    let (detail, body) = timed(&http, &format!("{base}/api/v1/locks/{hot}"), requests).await?;
    ensure!(body["gone"] == true, "{hot} is not shown as gone: {body}");
    let detail_events = body["events"].as_array().map_or(0, Vec::len);
    let (first_page, _) = timed(
        &http,
        &format!("{base}/api/v1/locks/{hot}/events?limit=100"),
        requests,
    )
    .await?;
    let (deep_page, body) = timed(
        &http,
        &format!("{base}/api/v1/locks/{hot}/events?limit=100&before={deep_before}"),
        requests,
    )
    .await?;
    let deep_events = body["events"].as_array().map_or(0, Vec::len);
    // Every page, 1,000 at a time, newest to oldest.
    let t = Instant::now();
    let (mut all_events, mut pages, mut before) = (0, 0, None::<i64>);
    loop {
        let url = match before {
            Some(b) => format!("{base}/api/v1/locks/{hot}/events?limit=1000&before={b}"),
            None => format!("{base}/api/v1/locks/{hot}/events?limit=1000"),
        };
        let page: Value = http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        all_events += page["events"].as_array().map_or(0, Vec::len);
        pages += 1;
        match page["next_before"].as_i64() {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    let all_pages_ms = t.elapsed().as_secs_f64() * 1000.0;
    drop(lockscope);
    Ok(Opening {
        detail: first_p50_p99(&detail),
        detail_events,
        first_page: first_p50_p99(&first_page),
        deep_page: first_p50_p99(&deep_page),
        deep_events,
        all_pages_ms,
        all_events,
        pages,
        ready_s,
    })
}

struct Pruning {
    finished: bool,
    backlog: i64,
    final_rows: i64,
    final_span: i64,
    rows: i64,
    max_events: u64,
    deleted: i64,
    waited_s: f64,
    secs: f64,
    offered_per_s: f64,
    written_per_s: f64,
    before: Vec<f64>,
    during: Vec<f64>,
    after: Vec<f64>,
    max_queue: usize,
    dropped: u64,
    lookup_ms: f64,
    lookup_full_ms: f64,
}

/// The store reopened with `max_events` leaving `prune` events to delete, events arriving at
/// `rate` per second meanwhile, each batch timed from `record` until written.
async fn pruning(url: &str, probe: &mut Probe, prune: usize, rate: usize) -> Result<Pruning> {
    let rows = probe.rows("lock_events").await?;
    // Events keep arriving while the writer waits for its first prune round: `prune` over
    // max_events by then.
    let arriving = (rate as u64 * PRUNE_EVERY.as_secs()) as i64;
    let max_events = (rows + arriving - prune as i64).max(1_000) as u64;
    let lookup_ms = probe.oldest_kept_ms(max_events as i64).await?;
    let lookup_full_ms = probe.oldest_kept_ms(rows).await?;
    let store = opened(url, Some(max_events)).await?;
    let led = Instant::now();
    let (min0, _) = probe.id_span().await?;
    let mut workload = Workload::new(1_000, 0);
    let tick = Duration::from_millis(100);
    let per_tick = (rate / 10).max(2);
    let mut next_batch = Instant::now();
    let mut next_probe = Instant::now();
    let mut target = store.events_written();
    let dropped0 = store.events_dropped();
    // Batches in flight: (written count that completes it, recorded at).
    let mut flight: VecDeque<(u64, Instant)> = VecDeque::new();
    let mut done: Vec<(Instant, f64)> = Vec::new();
    let (mut started, mut ended): (Option<Instant>, Option<Instant>) = (None, None);
    let (mut last_min, mut last_change) = (min0, Instant::now());
    let mut max_queue = 0;
    let mut offered = 0;
    // events_written at each look at the table, for the rate while pruning.
    let mut samples: Vec<(Instant, u64)> = Vec::new();
    // Events over max_events that still count as caught up: a few batches' arrivals.
    let slack = (4 * per_tick).max(2_000) as u64;
    let mut caught_up_min = 0;
    let mut backlog = 0;
    let limit = PRUNE_EVERY + PRUNE_LIMIT;
    loop {
        let now = Instant::now();
        if now >= next_batch {
            let batch = workload.batch(per_tick);
            target += batch.len() as u64;
            offered += batch.len();
            store.record(batch);
            flight.push_back((target, Instant::now()));
            next_batch += tick;
        }
        let written = store.events_written();
        while flight.front().is_some_and(|(t, _)| *t <= written) {
            let (_, at) = flight.pop_front().expect("a batch");
            done.push((at, at.elapsed().as_secs_f64() * 1000.0));
        }
        max_queue = max_queue.max(store.queue_depth());
        if now >= next_probe {
            next_probe = now + Duration::from_millis(250);
            let (min, max) = probe.id_span().await?;
            samples.push((now, store.events_written()));
            if min != last_min {
                if started.is_none() {
                    started = Some(now);
                    // What was over max_events when it started (the first batch aside).
                    backlog = (max - min + 1) + (min - last_min) - max_events as i64;
                }
                last_min = min;
                last_change = now;
            }
            // Caught up: what is left over max_events is what arrived since the last batch.
            // Pruning goes on after that, trimming what arrives.
            if started.is_some() && ended.is_none() && (max - min + 1) as u64 <= max_events + slack
            {
                ended = Some(now);
                caught_up_min = min;
            }
        }
        if let Some(end) = ended {
            if now.duration_since(end) > AFTER && flight.is_empty() {
                break;
            }
        }
        if led.elapsed() > limit {
            // Reported as far as it got.
            ensure!(started.is_some(), "pruning did not start within {limit:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let dropped = store.events_dropped() - dropped0;
    let _ = store.close(Duration::from_secs(60)).await;
    // A check on the figures: ids have no gaps (deleted = the oldest id's move), and the store
    // ends at about max_events.
    let final_rows = probe.rows("lock_events").await?;
    let (min, max) = probe.id_span().await?;
    let final_span = max - min + 1;
    let finished = ended.is_some();
    let (start, end) = (started.expect("started"), ended.unwrap_or(last_change));
    let secs = end.duration_since(start).as_secs_f64();
    let in_window = |from: Instant, to: Instant| -> Vec<f64> {
        sorted(
            done.iter()
                .filter(|(at, _)| *at >= from && *at < to)
                .map(|(_, ms)| *ms)
                .collect(),
        )
    };
    let at = |when: Instant| {
        samples
            .iter()
            .find(|(t, _)| *t >= when)
            .copied()
            .unwrap_or((when, 0))
    };
    let ((t0, w0), (t1, w1)) = (at(start), at(end));
    let written_per_s =
        w1.saturating_sub(w0) as f64 / t1.duration_since(t0).as_secs_f64().max(0.001);
    Ok(Pruning {
        finished,
        backlog,
        rows,
        max_events,
        deleted: if finished { caught_up_min } else { last_min } - min0,
        final_rows,
        final_span,
        waited_s: start.duration_since(led).as_secs_f64(),
        secs,
        offered_per_s: offered as f64 / led.elapsed().as_secs_f64(),
        written_per_s,
        before: in_window(led + Duration::from_secs(2), start),
        during: in_window(start, end),
        after: in_window(end, end + AFTER),
        max_queue,
        dropped,
        lookup_ms,
        lookup_full_ms,
    })
}

fn lat(v: &[f64]) -> String {
    format!(
        "{:.1} / {:.1} / {:.1} ms",
        percentile(v, 0.5),
        percentile(v, 0.99),
        percentile(v, 1.0)
    )
}

fn lat_json(v: &[f64]) -> Value {
    json!({"p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "max": percentile(v, 1.0), "n": v.len()})
}

fn fmt3(t: (f64, f64, f64)) -> String {
    format!("{:.1} / {:.1} ms (first {:.1} ms)", t.1, t.2, t.0)
}

/// One backend, every figure.
async fn one(
    bin: &Path,
    dir: &Path,
    backend: &str,
    url: &str,
    source_url: &str,
    pg: Option<&Postgres>,
    args: &StoreArgs,
) -> Result<(Vec<Row>, Value)> {
    let name = match backend {
        "sqlite" => "SQLite",
        _ => "PostgreSQL",
    };
    let mut rows = Vec::new();
    // The store makes the SQLite file and the schema; the probe opens it after.
    let store = opened(url, None).await?;
    let mut probe = Probe::open(url).await?;
    let (empty_bytes, _, _) = probe.bytes().await?;
    let pairs = args.events / 2;
    let hot_every = (pairs / (args.hot_events / 2).max(1)).max(1);
    let mut workload = Workload::new(args.locks, hot_every);

    eprintln!("  {name}: write rate …");
    let rate = write_rate(&store, &mut workload, args.events, pg).await?;
    let per_s = rate.events as f64 / rate.secs;
    rows.push(row(
        SECTION,
        &format!("{name}: lock events written"),
        format!("{per_s:.0}/s"),
        &format!(
            "{} events over {} locks in {:.1} s, batches of {BATCH} as fast as the store takes them; dropped {}; CPU: bench process (writer + producer) {:.0} %{}; load {:.1}",
            rate.events,
            args.locks + 1,
            rate.secs,
            rate.dropped,
            rate.cpu_bench * 100.0,
            pg.map_or(String::new(), |_| format!(", PostgreSQL {:.0} %", rate.cpu_server * 100.0)),
            rate.load
        ),
    ));

    eprintln!("  {name}: burst …");
    let b = burst(&store, &mut workload).await?;
    rows.push(row(
        SECTION,
        &format!("{name}: burst of {} events at once", b.events),
        format!("{} dropped", b.dropped),
        &format!(
            "recorded in {:.0} ms, default buffer {}; the rest written {:.1} s after the first",
            b.record_ms,
            StoreConfig::default().buffer_events,
            b.drained_s
        ),
    ));

    eprintln!("  {name}: sizes …");
    let s = sizes(&store, &mut probe, empty_bytes, &mut workload).await?;
    let (size_note, state_note) = match (s.pg_events, s.pg_states) {
        (Some(e), Some(st)) => (
            format!(
                "pg_total_relation_size('lock_events') {:.1} MiB ÷ {} rows (table + 3 indexes)",
                e.bytes as f64 / 1048576.0,
                e.rows
            ),
            format!(
                "pg_total_relation_size('lock_state') {:.1} MiB ÷ {} rows; written in {:.1} s",
                st.bytes as f64 / 1048576.0,
                st.rows,
                s.states_s
            ),
        ),
        _ => (
            format!(
                "file + WAL after a truncating checkpoint, grown by {} events (table + 3 indexes)",
                s.events
            ),
            format!(
                "file grown by {} states (JSON views: a holder, 2 waiters); written in {:.1} s",
                s.states, s.states_s
            ),
        ),
    };
    rows.push(row(
        SECTION,
        &format!("{name}: bytes per lock event"),
        format!("{:.0} B", s.bytes_per_event),
        &size_note,
    ));
    rows.push(row(
        SECTION,
        &format!("{name}: bytes per lock state"),
        format!("{:.0} B", s.bytes_per_state),
        &state_note,
    ));
    assert_closed(store.close(Duration::from_secs(60)).await)?;

    eprintln!("  {name}: opening a lock with {} events …", args.hot_events);
    let hot = workload.hot.clone();
    let hot_rows = match &mut probe {
        Probe::Sqlite { conn, .. } => {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM lock_events WHERE lock_id = $1")
                .bind(&hot)
                .fetch_one(conn)
                .await?
        }
        Probe::Postgres(conn) => {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM lock_events WHERE lock_id = $1")
                .bind(&hot)
                .fetch_one(conn)
                .await?
        }
    };
    let deep_before = probe.nth_oldest(&hot, 150).await?;
    let o = open_lock(
        bin,
        dir,
        &format!("store-{backend}"),
        url,
        source_url,
        &hot,
        deep_before,
        args.requests,
    )
    .await?;
    ensure!(
        o.all_events as i64 == hot_rows,
        "paging through {hot} gave {} events, the store holds {hot_rows}",
        o.all_events
    );
    rows.push(row(
        SECTION,
        &format!("{name}: GET /api/v1/locks/{{id}}, {hot_rows} events (p50 / p99)"),
        fmt3(o.detail),
        &format!(
            "a lock the running lockscope never saw: last state + newest {} events from the store; {} requests",
            o.detail_events, args.requests
        ),
    ));
    rows.push(row(
        SECTION,
        &format!("{name}: …/events?limit=100, first page (p50 / p99)"),
        fmt3(o.first_page),
        "",
    ));
    rows.push(row(
        SECTION,
        &format!("{name}: …/events?limit=100&before=…, near the oldest (p50 / p99)"),
        fmt3(o.deep_page),
        &format!("{} events, below the 150th oldest", o.deep_events),
    ));
    rows.push(row(
        SECTION,
        &format!("{name}: every page of 1,000, newest to oldest"),
        format!("{:.0} ms", o.all_pages_ms),
        &format!(
            "{} pages, {} events; lockscope writing after {:.1} s (its takeover reads what its predecessor wrote lately)",
            o.pages, o.all_events, o.ready_s
        ),
    ));

    eprintln!(
        "  {name}: pruning {} events (starts {} s after the writer) …",
        args.prune,
        PRUNE_EVERY.as_secs()
    );
    let p = pruning(url, &mut probe, args.prune, args.paced_rate).await?;
    rows.push(row(
        SECTION,
        &format!(
            "{name}: pruning {} events over max_events = {} (till caught up)",
            p.backlog, p.max_events
        ),
        if p.finished {
            format!("{:.1} s", p.secs)
        } else {
            format!("not caught up after {:.0} s", p.secs)
        },
        &format!(
            "{} deleted meanwhile ({:.0} rows/s, batches of 500), new events arriving; started {:.0} s after the writer; the `OFFSET max_events` lookup each batch makes takes {:.1} ms (at OFFSET {}: {:.1} ms); at the end {} rows, ids {}",
            p.deleted,
            p.deleted as f64 / p.secs.max(0.001),
            p.waited_s,
            p.lookup_ms,
            p.rows,
            p.lookup_full_ms,
            p.final_rows,
            if p.final_rows == p.final_span { "without gaps" } else { "WITH GAPS (deleted is off)" },
        ),
    ));
    rows.push(row(
        SECTION,
        &format!("{name}: a batch recorded → written, before / during / after pruning (p50 / p99 / max)"),
        format!("{} · {} · {}", lat(&p.before), lat(&p.during), lat(&p.after)),
        &format!(
            "{:.0} events/s offered in batches every 100 ms, {:.0}/s written while pruning; queue max {}; dropped {}",
            p.offered_per_s, p.written_per_s, p.max_queue, p.dropped
        ),
    ));
    probe.close().await;

    let json = json!({
        "write": {"events": rate.events, "locks": args.locks + 1, "secs": rate.secs, "per_s": per_s,
                  "dropped": rate.dropped, "cpu_bench_cores": rate.cpu_bench,
                  "cpu_server_cores": rate.cpu_server, "load_1m": rate.load},
        "burst": {"events": b.events, "record_ms": b.record_ms, "dropped": b.dropped, "drained_s": b.drained_s},
        "sizes": {"events": s.events, "bytes_per_event": s.bytes_per_event, "states": s.states,
                  "bytes_per_state": s.bytes_per_state, "states_s": s.states_s,
                  "pg_lock_events": s.pg_events.map(|x| json!({"bytes": x.bytes, "rows": x.rows})),
                  "pg_lock_state": s.pg_states.map(|x| json!({"bytes": x.bytes, "rows": x.rows}))},
        "open": {"events": hot_rows, "requests": args.requests,
                 "detail_ms": {"first": o.detail.0, "p50": o.detail.1, "p99": o.detail.2},
                 "first_page_ms": {"first": o.first_page.0, "p50": o.first_page.1, "p99": o.first_page.2},
                 "deep_page_ms": {"first": o.deep_page.0, "p50": o.deep_page.1, "p99": o.deep_page.2},
                 "all_pages_ms": o.all_pages_ms, "pages": o.pages, "writing_after_s": o.ready_s},
        "prune": {"finished": p.finished, "backlog": p.backlog, "final_rows": p.final_rows, "final_id_span": p.final_span, "max_events": p.max_events, "deleted": p.deleted, "secs": p.secs, "waited_s": p.waited_s,
                  "offered_per_s": p.offered_per_s, "written_per_s_during": p.written_per_s,
                  "latency_ms": {"before": lat_json(&p.before), "during": lat_json(&p.during), "after": lat_json(&p.after)},
                  "max_queue": p.max_queue, "dropped": p.dropped,
                  "oldest_kept_lookup_ms": p.lookup_ms, "oldest_kept_lookup_full_ms": p.lookup_full_ms},
    });
    Ok((rows, json))
}

fn assert_closed(in_time: bool) -> Result<()> {
    ensure!(in_time, "the store did not close within 60 s");
    Ok(())
}

pub async fn run(bin: &Path, dir: &Path, args: &StoreArgs) -> Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    // The PostgreSQL store, run as a store runs: every commit flushed.
    let pg = Postgres::start_with(&["fsync=on"]).await?;
    let sqlite_url = format!("sqlite://{}", dir.join("store-bench.db").display());
    let mut out = serde_json::Map::new();
    for (backend, url, server) in [
        ("sqlite", sqlite_url.clone(), None),
        ("postgres", pg.url(), Some(&pg)),
    ] {
        match one(bin, dir, backend, &url, &pg.url(), server, args).await {
            Ok((r, v)) => {
                rows.extend(r);
                out.insert(backend.into(), v);
            }
            Err(e) => {
                eprintln!("  {backend}: failed: {e:#}");
                rows.push(row(
                    SECTION,
                    &format!("{backend}: failed"),
                    format!("{e:#}"),
                    "",
                ));
                out.insert(backend.into(), json!({"error": format!("{e:#}")}));
            }
        }
    }
    drop(pg);
    Ok((rows, Value::Object(out)))
}
