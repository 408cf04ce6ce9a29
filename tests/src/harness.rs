//! Runs lockscope in-process on a free loopback port and reads it over real HTTP, the way a
//! browser or Prometheus would: JSON API, `/metrics` text, and the SSE stream.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use lockscope::config::{section, Config, TokenConfig, ZkSourceConfig};
use lockscope_model::wire::{
    AuditRecord, LockDetail, LockView, SessionView, SourceView, StreamEvent,
};
use serde_json::Value;

/// The longest pause between two tries of [`eventually`].
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// Polls `probe` until it answers `Some`, at most for `timeout`, with a short pause between
/// tries (a wait for a fact, not a sleep that stands in for one); fails naming `what`. A probe
/// that answers `Err` ends the wait at once with that error (e.g. the process waited on has
/// exited). The one place tests and test support wait for a condition ([`eventually_blocking`]
/// where the waiting code is synchronous).
pub async fn eventually<T>(
    timeout: Duration,
    what: &str,
    probe: impl AsyncFnMut() -> Result<Option<T>>,
) -> Result<T> {
    eventually_every(timeout, MAX_PAUSE, what, probe).await
}

/// [`eventually`] with pauses that grow from 10 ms to at most `max_pause` (instead of 100 ms):
/// for facts that are cheap to check and come soon, such as a server spawned a moment ago
/// answering, where a longer pause would only add to every start.
pub async fn eventually_every<T>(
    timeout: Duration,
    max_pause: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10).min(max_pause);
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("{what}: not seen within {timeout:?}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(max_pause);
    }
}

/// [`eventually`] for synchronous code: polls `probe` on this thread until it answers `Some`,
/// at most for `timeout`, with the same pauses (10 ms growing to 100 ms) and the same failure
/// (`Err` naming `what` once the time is up; a probe's `Err` ends the wait at once with that
/// error). For waits with no runtime at hand or no `.await` allowed: a child process reaped
/// with `try_wait`, a lock file, a `Drop`. It blocks the thread, so inside a Tokio runtime it
/// suits only waits that end soon (a process reaped just after its SIGKILL).
pub fn eventually_blocking<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(value) = probe()? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("{what}: not seen within {timeout:?}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// A lockscope serving on `127.0.0.1:<free port>`; stopped on drop.
pub struct Lockscope {
    pub base: String,
    pub http: reqwest::Client,
    running: Option<lockscope::Running>,
}

impl Lockscope {
    /// Starts lockscope with `config` (its `listen` is ignored: a free port is used).
    pub async fn start(config: Config) -> Result<Lockscope> {
        Self::start_at(config, "127.0.0.1:0").await
    }

    /// Starts lockscope on `addr` (a restart on the address a stopped one used, for tests of
    /// clients that reconnect).
    pub async fn start_at(config: Config, addr: &str) -> Result<Lockscope> {
        // `RUST_LOG=lockscope=debug cargo test …` shows lockscope's own log next to a failure.
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("bind {addr}"))?;
        let running = lockscope::start(&config, listener)?;
        let base = format!("http://{}", running.addr);
        Ok(Lockscope {
            base,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
            running: Some(running),
        })
    }

    /// A client of a lockscope running elsewhere (a child process, see
    /// `support::process`) at `base`: the same readers, nothing to stop on drop.
    pub fn at(base: &str) -> Result<Lockscope> {
        Ok(Lockscope {
            base: base.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
            running: None,
        })
    }

    /// One ZooKeeper source watching `roots`, polling the ensemble every 300 ms.
    pub async fn watching(name: &str, connect: &str, roots: &[&str]) -> Result<Lockscope> {
        let config = Config {
            sources: section("zookeeper", vec![zk_source(name, connect, roots)]),
            ..Config::default()
        };
        let ls = Self::start(config).await?;
        ls.wait_ready(Duration::from_secs(30)).await?;
        Ok(ls)
    }

    /// The running lockscope (none once stopped).
    pub fn running(&self) -> Option<&lockscope::Running> {
        self.running.as_ref()
    }

    pub fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop();
        }
    }

    /// Stops as the binary does on SIGTERM ([`lockscope::Running::shutdown`]); answers whether
    /// every step finished in time.
    pub async fn shutdown(&mut self) -> Result<bool> {
        let running = self.running.take().context("lockscope is stopped")?;
        Ok(running.shutdown().await)
    }

    pub async fn get_json(&self, path: &str) -> Result<(u16, Value)> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .json::<Value>()
            .await
            .with_context(|| format!("GET {path}: body"))?;
        Ok((status, body))
    }

    /// Every lock lockscope shows, page after page.
    pub async fn locks(&self) -> Result<Vec<LockView>> {
        self.every_page("/api/v1/locks", "locks", "cursor").await
    }

    /// Every item of a paged endpoint: the `field` array of each page of 1,000, the next page
    /// asked with `cursor_param` set to the page's `next`.
    async fn every_page<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: &str,
        field: &str,
        cursor_param: &str,
    ) -> Result<Vec<T>> {
        let mut all = Vec::new();
        let mut path = format!("{endpoint}?limit=1000");
        loop {
            let (status, body) = self.get_json(&path).await?;
            if status != 200 {
                bail!("GET {path}: status {status}: {body}");
            }
            all.extend(serde_json::from_value::<Vec<T>>(body[field].clone())?);
            match body["next"].as_str() {
                Some(next) => path = format!("{endpoint}?limit=1000&{cursor_param}={next}"),
                None => return Ok(all),
            }
        }
    }

    /// The lock at `path` of `source`, if lockscope shows one.
    /// The lock as it is now; `None` when there is no such lock or it is gone.
    pub async fn lock(&self, source: &str, path: &str) -> Result<Option<LockView>> {
        let id = lockscope_model::id::lock_id(source, path);
        let (status, body) = self.get_json(&format!("/api/v1/locks/{id}")).await?;
        match status {
            200 => {
                let detail: LockDetail = serde_json::from_value(body)?;
                Ok((!detail.gone).then_some(detail.lock))
            }
            404 => Ok(None),
            other => bail!("GET lock {id}: status {other}: {body}"),
        }
    }

    pub async fn detail(&self, source: &str, path: &str) -> Result<LockDetail> {
        let id = lockscope_model::id::lock_id(source, path);
        let (status, body) = self.get_json(&format!("/api/v1/locks/{id}")).await?;
        if status != 200 {
            bail!("GET lock {id}: status {status}: {body}");
        }
        Ok(serde_json::from_value(body)?)
    }

    /// Every session lockscope shows, page after page.
    pub async fn sessions(&self) -> Result<Vec<SessionView>> {
        self.every_page("/api/v1/sessions", "sessions", "cursor")
            .await
    }

    pub async fn sources(&self) -> Result<Vec<SourceView>> {
        let (_, body) = self.get_json("/api/v1/sources").await?;
        Ok(serde_json::from_value(body["sources"].clone())?)
    }

    /// The source named `name` once `done` holds for it (waited for up to `timeout`).
    pub async fn source_where(
        &self,
        timeout: Duration,
        name: &str,
        what: &str,
        done: impl Fn(&SourceView) -> bool,
    ) -> Result<SourceView> {
        eventually(timeout, what, async || {
            let sources = self.sources().await?;
            Ok(sources.into_iter().find(|s| s.name == name && done(s)))
        })
        .await
    }

    pub async fn metrics(&self) -> Result<String> {
        Ok(self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await?
            .text()
            .await?)
    }

    /// The value of one sample of `/metrics`, by its exact series text (`name{labels}`).
    pub async fn metric(&self, series: &str) -> Result<Option<f64>> {
        let text = self.metrics().await?;
        Ok(metric_value(&text, series))
    }

    /// Waits (up to 30 s) until one sample of `/metrics` satisfies `want`, and returns the
    /// exposition it was seen in. For the stale-lock and deadlock gauges: a scrape shows the
    /// last finished judgement and starts the next one (`metrics::Detection`), so a fact the API
    /// shows now is in the gauges by the next scrape.
    pub async fn wait_metric(&self, series: &str, want: impl Fn(f64) -> bool) -> Result<String> {
        eventually(Duration::from_secs(30), series, async || {
            let text = self.metrics().await?;
            Ok(metric_value(&text, series)
                .is_some_and(&want)
                .then_some(text))
        })
        .await
    }

    /// Waits until lockscope is ready and, when it has a store, the store is connected and
    /// this lockscope writes the history (the store connects in the background: a test that
    /// measures or reads it right after the start must not race its first connection).
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let ready = format!("{}/readyz", self.base);
        let store = format!("{}/api/v1/store", self.base);
        eventually_every(
            timeout,
            Duration::from_millis(50),
            "lockscope ready, its store connected",
            async || {
                let resp = self.http.get(&ready).send().await;
                if !resp.is_ok_and(|r| r.status().is_success()) {
                    return Ok(None);
                }
                let Ok(resp) = self.http.get(&store).send().await else {
                    return Ok(None);
                };
                // Behind read credentials the store's state is not ours to see: ready is ready.
                if !resp.status().is_success() {
                    return Ok(Some(()));
                }
                let status: Value = resp.json().await?;
                Ok((status["backend"] == "none"
                    || (status["connected"] == true && status["writing"] == true))
                    .then_some(()))
            },
        )
        .await
    }

    /// Polls the lock at `path` until `check` accepts it; returns it, or the last state seen.
    pub async fn wait_lock(
        &self,
        source: &str,
        path: &str,
        timeout: Duration,
        what: &str,
        check: impl Fn(&LockView) -> bool,
    ) -> Result<LockView> {
        let mut last: Option<LockView> = None;
        let found = eventually(timeout, what, async || {
            let lock = self.lock(source, path).await?;
            let done = lock.as_ref().filter(|l| check(l)).cloned();
            if lock.is_some() {
                last = lock;
            }
            Ok(done)
        })
        .await;
        found.map_err(|e| {
            anyhow!(
                "{e}; last state of {path}: {}",
                serde_json::to_string_pretty(&last).unwrap_or_default()
            )
        })
    }

    /// Polls `/api/v1/sessions` until `check` accepts them; returns them, or fails with the last
    /// ones seen.
    pub async fn wait_sessions(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&[SessionView]) -> bool,
    ) -> Result<Vec<SessionView>> {
        let mut last = Vec::new();
        eventually(timeout, what, async || {
            let sessions = self.sessions().await?;
            let done = check(&sessions).then(|| sessions.clone());
            last = sessions;
            Ok(done)
        })
        .await
        .map_err(|e| anyhow!("{e}; last sessions: {last:#?}"))
    }

    /// Polls the detail (events included) of the lock at `path` until `check` accepts it;
    /// returns it, or fails with the last one seen. A lock lockscope does not know yet (404) is
    /// waited for like any other detail that does not pass.
    pub async fn wait_detail(
        &self,
        source: &str,
        path: &str,
        timeout: Duration,
        what: &str,
        check: impl Fn(&LockDetail) -> bool,
    ) -> Result<LockDetail> {
        let mut last = None;
        let id = lockscope_model::id::lock_id(source, path);
        eventually(timeout, what, async || {
            let (status, body) = self.get_json(&format!("/api/v1/locks/{id}")).await?;
            match status {
                404 => return Ok(None),
                200 => {}
                _ => bail!("GET lock {id}: status {status}: {body}"),
            }
            let detail: LockDetail = serde_json::from_value(body)?;
            let done = check(&detail).then(|| detail.clone());
            last = Some(detail);
            Ok(done)
        })
        .await
        .map_err(|e| {
            anyhow!(
                "{e}; last detail of {path}: {}",
                serde_json::to_string_pretty(&last).unwrap_or_default()
            )
        })
    }

    /// Waits until the aggregator has applied and published every update its collectors sent
    /// before the call (then the API shows everything they had heard).
    pub async fn settled(&self, timeout: Duration) -> Result<()> {
        let running = self.running.as_ref().context("lockscope is stopped")?;
        if running.handle.settled(timeout).await {
            Ok(())
        } else {
            bail!("the aggregator did not apply what was sent within {timeout:?}")
        }
    }

    /// `POST /api/v1/locks/{id}/release` with `body` (and `token` as the bearer, when given):
    /// the status and the answer's body.
    pub async fn release(
        &self,
        id: &str,
        token: Option<&str>,
        body: &Value,
    ) -> Result<(u16, Value)> {
        let mut request = self
            .http
            .post(format!("{}/api/v1/locks/{id}/release", self.base))
            .json(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let answer = request.send().await?;
        let status = answer.status().as_u16();
        Ok((status, answer.json().await?))
    }

    /// Every audit record (`GET /api/v1/audit`), newest first, read page by page.
    pub async fn audit_log(&self) -> Result<Vec<AuditRecord>> {
        self.every_page("/api/v1/audit", "audit", "before").await
    }

    /// Opens `/api/v1/events` and returns a reader of its events.
    pub async fn events(&self) -> Result<EventReader> {
        EventReader::connect(&self.base).await
    }
}

impl EventReader {
    /// Opens `<base>/api/v1/events` of any running lockscope.
    pub async fn connect(base: &str) -> Result<EventReader> {
        Self::connect_to(base, "/api/v1/events").await
    }

    /// Opens `<base><path>` (an event stream, a live view's query included).
    pub async fn connect_to(base: &str, path: &str) -> Result<EventReader> {
        let resp = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .timeout(Duration::from_secs(3600))
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("events: status {}", resp.status());
        }
        Ok(EventReader {
            stream: Box::pin(resp.bytes_stream()),
            buffer: Vec::new(),
            scanned: 0,
        })
    }
}

impl Drop for Lockscope {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `config` with force release on behind one admin token named `oncall`, and its audit store in
/// `dir`.
pub fn with_admin(mut config: Config, dir: &std::path::Path, token: &str) -> Config {
    config.admin.enabled = true;
    config.admin.tokens = vec![TokenConfig {
        name: "oncall".into(),
        token: Some(token.into()),
        token_env: None,
        token_hash: None,
    }];
    config.store.url = Some(format!("sqlite://{}", dir.join("lockscope.db").display()));
    config
}

/// [`with_admin`], at most `per_minute` force releases a minute.
pub fn with_admin_limit(
    config: Config,
    dir: &std::path::Path,
    token: &str,
    per_minute: u32,
) -> Config {
    let mut config = with_admin(config, dir, token);
    config.admin.max_releases_per_minute = per_minute;
    config
}

/// Force release on ([`with_admin_limit`]), watching `lock:*` on the Redis at `url` as source
/// `r`.
pub fn redis_admin(url: &str, dir: &std::path::Path, token: &str, per_minute: u32) -> Config {
    let config = Config {
        sources: section(
            "redis",
            vec![lockscope::config::RedisSourceConfig::new(
                "r",
                url,
                &["lock:*"],
            )],
        ),
        ..Config::default()
    };
    with_admin_limit(config, dir, token, per_minute)
}

/// A ZooKeeper source with test-friendly intervals.
pub fn zk_source(name: &str, connect: &str, roots: &[&str]) -> ZkSourceConfig {
    let mut source = ZkSourceConfig::new(name, connect, roots);
    source.poll_interval = Duration::from_millis(300);
    source.session_timeout = Duration::from_secs(4);
    source
}

/// Finds `series` (e.g. `lockscope_source_up{source="a"}`) in exposition text.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        let value = rest.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// The sum of every sample of `family` whose labels start with `source="<source>"` in exposition
/// text: e.g. a source's acquisitions over all its locks (and the folded `__other__` label), or
/// its releases over every lock and cause.
pub fn source_sum(text: &str, family: &str, source: &str) -> f64 {
    let prefix = format!("{family}{{source=\"{source}\",");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Reads Server-Sent Events one at a time.
pub struct EventReader {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    /// Raw bytes: an event is decoded whole, so no character is split across chunks.
    buffer: Vec<u8>,
    /// How far `buffer` is known to hold no event end (a snapshot can be tens of MB).
    scanned: usize,
}

impl EventReader {
    /// The next event (`name`, parsed data), or an error after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Result<(String, StreamEvent)> {
        let (name, data) = self.next_raw(timeout).await?;
        let event: StreamEvent =
            serde_json::from_str(&data).with_context(|| format!("event {name}: {data}"))?;
        Ok((name, event))
    }

    /// The next event as its name and JSON data, or an error after `timeout`.
    pub async fn next_json(&mut self, timeout: Duration) -> Result<(String, Value)> {
        let (name, data) = self.next_raw(timeout).await?;
        let value = serde_json::from_str(&data).with_context(|| format!("event {name}: {data}"))?;
        Ok((name, value))
    }

    async fn next_raw(&mut self, timeout: Duration) -> Result<(String, String)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let from = self.scanned.saturating_sub(1);
            let found = self.buffer[from..]
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| i + from);
            if let Some(end) = found {
                self.scanned = 0;
                let raw: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let block = String::from_utf8_lossy(&raw);
                let mut name = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                return Ok((name, data));
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .map_err(|_| anyhow!("no event within {timeout:?}"))?
                .ok_or_else(|| anyhow!("event stream ended"))??;
            self.scanned = self.buffer.len();
            self.buffer.extend_from_slice(&chunk);
        }
    }
}
