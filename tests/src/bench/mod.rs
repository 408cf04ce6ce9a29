//! The benchmark behind `lockscope-bench` (`scripts/bench`): freshness against the floor, cost
//! to the cluster against a poller, scale, expiry detection, four-letter-word cost, the
//! sustained rate per source, the core at size (`core.rs`: memory per lock, bootstrap,
//! `/metrics` and counts at a platform's sizes, each beside its goal) and the history store's
//! cost (`store.rs`: write rate, bytes per event, opening a long history, pruning), measured
//! on real servers on loopback with the release `lockscope` binary as a separate process.
//! Everything here produces figures; nothing asserts a speed.

pub mod browser;
pub mod core;
pub mod db;
pub mod etcd;
pub mod rate;
pub mod redis;
pub mod store;
pub mod viewers;
pub mod zk;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use crate::harness::eventually_every;

/// One table row: section, figure, value, goal/comparison.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub section: String,
    pub figure: String,
    pub value: String,
    pub note: String,
}

pub fn row(section: &str, figure: &str, value: String, note: &str) -> Row {
    Row {
        section: section.into(),
        figure: figure.into(),
        value,
        note: note.into(),
    }
}

/// A child process killed (and reaped) on drop.
pub struct Process(pub std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// Starts `lockscope serve` with `config_body` (a `listen` line is added) and waits for /readyz;
/// returns the process, its base URL and the time from start to ready.
pub async fn start_lockscope(
    bin: &Path,
    dir: &Path,
    name: &str,
    config_body: &str,
) -> Result<(Process, String, Duration)> {
    let port = crate::support::ports::free_port();
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!("listen = \"127.0.0.1:{port}\"\n{config_body}"),
    )?;
    let started = Instant::now();
    // lockscope logs to stdout; panics go to stderr.
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = std::process::Command::new(bin)
        .args(["serve", "--config"])
        .arg(&config)
        // LOCKSCOPE_BENCH_LOG (e.g. `warn,lockscope_zookeeper=debug`) for a diagnosis.
        .env(
            "RUST_LOG",
            std::env::var("LOCKSCOPE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("start {}", bin.display()))?;
    let process = Process(child);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let ready = format!("{base}/readyz");
    // Pauses of at most 10 ms: the time to ready is a figure of the report.
    eventually_every(
        Duration::from_secs(600),
        Duration::from_millis(10),
        "lockscope ready",
        async || {
            let resp = http.get(&ready).send().await;
            Ok(resp.is_ok_and(|r| r.status().is_success()).then_some(()))
        },
    )
    .await
    .map_err(|e| anyhow!("{e}; see {}", dir.join(format!("{name}.log")).display()))?;
    Ok((process, base, started.elapsed()))
}

/// `VmRSS` of `pid` once it has stopped moving: sampled every 500 ms until two samples in a row
/// are within 1 % of each other (at most 30 s; the last sample then). The interval paces the
/// samples of a measurement; it synchronises nothing.
pub async fn settled_rss(pid: u32) -> Result<u64> {
    let mut samples = tokio::time::interval(Duration::from_millis(500));
    samples.tick().await;
    let mut last = rss_kib(pid)?;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        samples.tick().await;
        let now = rss_kib(pid)?;
        if now.abs_diff(last) * 100 <= last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// Every lock `GET /api/v1/locks?{query}` matches, asked as NDJSON (a page is 100 at most), as
/// JSON values; and the bytes it took.
pub async fn all_locks(
    http: &reqwest::Client,
    base: &str,
    query: &str,
) -> Result<(Vec<serde_json::Value>, usize)> {
    let sep = if query.is_empty() { "" } else { "&" };
    let body = http
        .get(format!("{base}/api/v1/locks?format=ndjson{sep}{query}"))
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let locks = body
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(serde_json::from_slice)
        .collect::<Result<Vec<serde_json::Value>, _>>()?;
    Ok((locks, body.len()))
}

/// One scrape of lockscope's `/metrics`, as text.
pub async fn metrics_text(http: &reqwest::Client, base: &str) -> Result<String> {
    Ok(http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?)
}

/// Whether lockscope shows `source` as lagging (`/api/v1/sources`).
pub async fn source_lagging(http: &reqwest::Client, base: &str, source: &str) -> Result<bool> {
    let sources: serde_json::Value = http
        .get(format!("{base}/api/v1/sources"))
        .send()
        .await?
        .json()
        .await?;
    Ok(sources["sources"].as_array().is_some_and(|all| {
        all.iter()
            .any(|s| s["name"] == source && s["lagging"].as_bool() == Some(true))
    }))
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// `p50 / p99` of a sorted sample, ms.
pub fn p50_p99(sorted: &[f64]) -> String {
    format!(
        "{:.2} / {:.2} ms",
        percentile(sorted, 0.5),
        percentile(sorted, 0.99)
    )
}

/// Timed GET of `url`: (bytes, ms).
pub async fn timed_get(http: &reqwest::Client, url: &str) -> Result<(usize, f64)> {
    let t = Instant::now();
    let body = http.get(url).send().await?.bytes().await?;
    Ok((body.len(), t.elapsed().as_secs_f64() * 1000.0))
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub const TICKS_PER_S: f64 = 100.0;

/// CPU time (user + system) a process has used, seconds; `None` once it is gone.
pub fn cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields are counted after the last `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_S)
}

/// Where the release binaries are.
pub fn release_bin(name: &str) -> PathBuf {
    PathBuf::from("target/release").join(name)
}
