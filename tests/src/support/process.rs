//! The real `lockscope` binary as a child process, for tests that kill and restart it (replicas
//! sharing a store, history across restarts) — what [`crate::harness::Lockscope`], which runs
//! lockscope inside the test process, cannot do.
//!
//! This module owns:
//!
//! * the process: a [`LockscopeProcess`] is one `lockscope serve --config <dir>/config.toml
//!   --listen 127.0.0.1:<port>` started from the binary built next to the test executables
//!   (`target/debug/lockscope`: `cargo test --workspace` builds it; a single test file needs
//!   `cargo build -p lockscope` first), with the test's configuration text, its environment
//!   variables (e.g. a store password) and `LOCKSCOPE_LOG=info,lockscope=debug`. The port is
//!   picked once ([`free_port`]) and kept, so [`LockscopeProcess::restart`] answers on the same
//!   address; a first start whose port was taken by another process meanwhile moves to a fresh
//!   one.
//! * stopping: [`LockscopeProcess::kill`] sends SIGKILL to the process by its PID (no shutdown,
//!   as after a crash or an OOM kill) and reaps it; drop does the same.
//! * its output: stdout and stderr go to `stdout.log` and `stderr.log` in its temporary
//!   directory, appended across restarts (each start writes a `--- start N` line first), so a
//!   failure can show what every run printed ([`LockscopeProcess::log_tail`],
//!   [`LockscopeProcess::explain`]).
//!
//! It reads lockscope over HTTP through a [`Lockscope`] client ([`LockscopeProcess::api`]), so
//! tests use the same helpers (`detail`, `wait_lock`, `audit_log`, `release`, `metric`) on an
//! in-process lockscope and on a child process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::ports::free_port;
use crate::harness::{eventually_every, Lockscope};

/// How long a start may take until `/api/v1/sources` answers with every source synced.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Starts on a fresh port when the first one turned out taken.
const BIND_ATTEMPTS: usize = 3;

/// `target/debug/lockscope` (or the profile directory this test runs from): the test executable
/// is `target/<profile>/deps/<name>-<hash>`.
pub fn binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("lockscope"))
        .ok_or_else(|| anyhow!("no target directory above {}", exe.display()))?;
    if !bin.is_file() {
        bail!(
            "{} is not built: run `cargo build -p lockscope` (cargo test --workspace builds it)",
            bin.display()
        );
    }
    Ok(bin)
}

/// The last `lines` lines of a file (empty if it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One `lockscope serve` child process (running or killed) on `127.0.0.1:<port>`.
pub struct LockscopeProcess {
    name: String,
    bin: PathBuf,
    config: PathBuf,
    env: Vec<(String, String)>,
    port: u16,
    stdout: PathBuf,
    stderr: PathBuf,
    starts: u32,
    child: Option<Child>,
    api: Lockscope,
    // Dropped after `Drop::drop` killed the process.
    dir: tempfile::TempDir,
}

impl LockscopeProcess {
    /// Writes `config` (TOML text without `listen`) to a temporary directory, starts lockscope
    /// with it and `env` on a free port, and waits until it is ready ([`Self::wait_ready`]).
    /// `name` labels its output in failure messages (e.g. the replica name).
    pub async fn start(name: &str, config: &str, env: &[(&str, &str)]) -> Result<Self> {
        let mut process = Self::spawn_only(name, config, env)?;
        process.wait_ready(READY_TIMEOUT).await?;
        Ok(process)
    }

    /// Like [`Self::start`] without waiting for readiness (for tests of a start that cannot
    /// get ready, or that look at it while it comes up).
    pub fn spawn_only(name: &str, config: &str, env: &[(&str, &str)]) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("lockscope-{name}-"))
            .tempdir()?;
        let path = dir.path().join("config.toml");
        std::fs::write(&path, config).with_context(|| format!("write {}", path.display()))?;
        let port = free_port();
        let mut process = LockscopeProcess {
            name: name.to_string(),
            bin: binary()?,
            config: path,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            port,
            stdout: dir.path().join("stdout.log"),
            stderr: dir.path().join("stderr.log"),
            starts: 0,
            child: None,
            api: Lockscope::at(&format!("http://127.0.0.1:{port}"))?,
            dir,
        };
        process.spawn()?;
        Ok(process)
    }

    fn spawn(&mut self) -> Result<()> {
        self.starts += 1;
        let open = |path: &Path| -> Result<std::fs::File> {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("open {}", path.display()))?;
            writeln!(file, "--- start {} on port {}", self.starts, self.port)?;
            Ok(file)
        };
        let (stdout, stderr) = (open(&self.stdout)?, open(&self.stderr)?);
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .env("LOCKSCOPE_LOG", "info,lockscope=debug")
            .env_remove("LOCKSCOPE_CONFIG")
            .env_remove("LOCKSCOPE_LISTEN")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("start {}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits (at most `timeout`) until `GET /api/v1/sources` answers and every source says
    /// `synced`. Fails at once, with its output, if the process exited; a first start whose port
    /// another process took meanwhile is moved to a fresh port.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        for _ in 0..BIND_ATTEMPTS {
            match self.wait_synced(timeout).await {
                Err(e) if self.starts == 1 && self.bind_failed() => {
                    tracing::info!("{}: port {} taken ({e:#}), moving", self.name, self.port);
                    self.kill();
                    self.port = free_port();
                    self.api = Lockscope::at(&format!("http://127.0.0.1:{}", self.port))?;
                    self.starts = 0;
                    self.spawn()?;
                }
                other => return other.map_err(|e| self.explain(e)),
            }
        }
        bail!("{}: no free port in {BIND_ATTEMPTS} attempts", self.name)
    }

    fn bind_failed(&self) -> bool {
        let err = tail(&self.stderr, 20) + &tail(&self.stdout, 20);
        err.contains("Address already in use") || err.contains("AddrInUse")
    }

    async fn wait_synced(&mut self, timeout: Duration) -> Result<()> {
        let mut last = String::from("no answer");
        let result = eventually_every(
            timeout,
            Duration::from_millis(50),
            &format!("{} ready", self.name),
            async || {
                if let Some(status) = self.exited() {
                    bail!("exited ({status})");
                }
                match self.api.get_json("/api/v1/sources").await {
                    Ok((200, body)) => {
                        let sources = body["sources"].as_array().cloned().unwrap_or_default();
                        let synced = sources.iter().all(|s| s["synced"] == true);
                        last = body.to_string();
                        Ok(synced.then_some(()))
                    }
                    Ok((status, body)) => {
                        last = format!("{status} {body}");
                        Ok(None)
                    }
                    Err(e) => {
                        last = format!("{e:#}");
                        Ok(None)
                    }
                }
            },
        )
        .await;
        result.map_err(|e| anyhow!("{e}; last answer: {last}"))
    }

    /// The exit status, if the process has exited (it is reaped then).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether a process was started and has not been killed (it may have exited by itself).
    pub fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL by PID, then reaped. No-op when it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` is SIGKILL on Unix, sent to this child's PID only.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same configuration (a running one is killed
    /// first) and waits until it is ready.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()?;
        self.wait_synced(READY_TIMEOUT)
            .await
            .map_err(|e| self.explain(e))
    }

    /// Starts it again without waiting for readiness.
    pub fn restart_only(&mut self) -> Result<()> {
        self.kill();
        self.spawn()
    }

    /// The HTTP client of this process (`base` is `http://127.0.0.1:<port>`).
    pub fn api(&self) -> &Lockscope {
        &self.api
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The temporary directory (configuration and logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of its stderr (lockscope logs there) and stdout, over every start.
    pub fn log_tail(&self, lines: usize) -> String {
        format!(
            "--- {} stderr ({}):\n{}\n--- {} stdout:\n{}",
            self.name,
            self.stderr.display(),
            tail(&self.stderr, lines),
            self.name,
            tail(&self.stdout, lines)
        )
    }

    /// `e` with this process's log tail appended.
    pub fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        anyhow!("{}: {e:#}\n{}", self.name, self.log_tail(60))
    }
}

/// `result`, or its error with the log tails of `processes` appended: tests return through this
/// so a failure shows what each lockscope said.
pub fn with_logs<T>(result: Result<T>, processes: &[&LockscopeProcess]) -> Result<T> {
    result.map_err(|e| {
        let logs: Vec<String> = processes.iter().map(|p| p.log_tail(80)).collect();
        anyhow!("{e:#}\n{}", logs.join("\n"))
    })
}

/// What is left until `deadline`: the bound of one of several waits that share it.
pub fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

impl Drop for LockscopeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
