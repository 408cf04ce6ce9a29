//! A real Prometheus (Debian's `prometheus` package) on a free loopback port, scraping given
//! targets every second with given rule files loaded; stopped by its PID on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::ports::free_port;
use crate::harness::eventually;

pub const BINARY: &str = "/usr/bin/prometheus";

pub struct Prometheus {
    pub port: u16,
    process: Option<Child>,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (`host:port`, path `/metrics`) every second and
    /// evaluating `rule_files` every second; waits until it is ready.
    pub async fn start(targets: &[String], rule_files: &[PathBuf]) -> Result<Prometheus> {
        Self::start_with(targets, rule_files, Duration::from_secs(1)).await
    }

    pub async fn start_with(
        targets: &[String],
        rule_files: &[PathBuf],
        interval: Duration,
    ) -> Result<Prometheus> {
        let dir = tempfile::Builder::new()
            .prefix("lockscope-prometheus-")
            .tempdir()?;
        let secs = interval.as_secs().max(1);
        let rules: Vec<String> = rule_files
            .iter()
            .map(|r| format!("  - {:?}\n", r.display().to_string()))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: {secs}s\n  evaluation_interval: {secs}s\nrule_files:\n{}scrape_configs:\n  - job_name: lockscope\n    static_configs:\n      - targets: {:?}\n",
            if rules.is_empty() { "  []\n".to_string() } else { rules.concat() },
            targets
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let process = Command::new(BINARY)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-lifecycle")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("cannot start {BINARY} (scripts/install-deps installs it)"))?;
        let prometheus = Prometheus {
            port,
            process: Some(process),
            dir,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
        };
        prometheus.wait_ready(Duration::from_secs(30)).await?;
        Ok(prometheus)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("prometheus.log")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let ready = format!("{}/-/ready", self.url());
        eventually(timeout, "prometheus ready", async || {
            let resp = self.http.get(&ready).send().await;
            Ok(resp.is_ok_and(|r| r.status().is_success()).then_some(()))
        })
        .await
        .map_err(|e| {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            anyhow!("{e}; log tail:\n{}", tail(&log, 20))
        })
    }

    /// An instant query; the whole `/api/v1/query` answer (`status`, `data` or `error`).
    pub async fn query(&self, expr: &str) -> Result<Value> {
        let resp = self
            .http
            .get(format!("{}/api/v1/query", self.url()))
            .query(&[("query", expr)])
            .send()
            .await
            .with_context(|| format!("query {expr}"))?;
        Ok(resp.json().await?)
    }

    /// An instant query evaluated at `at` (seconds since the epoch), so that two servers can be
    /// asked about the same moment.
    pub async fn query_at(&self, expr: &str, at: f64) -> Result<Value> {
        let resp = self
            .http
            .get(format!("{}/api/v1/query", self.url()))
            .query(&[("query", expr), ("time", &format!("{at:.3}"))])
            .send()
            .await
            .with_context(|| format!("query {expr} at {at}"))?;
        Ok(resp.json().await?)
    }

    /// `/api/v1/rules` (alerting rules with their state and health).
    pub async fn rules(&self) -> Result<Value> {
        let resp = self
            .http
            .get(format!("{}/api/v1/rules", self.url()))
            .send()
            .await?;
        Ok(resp.json().await?)
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
