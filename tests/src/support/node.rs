//! Real redis-semaphore (npm 5.8.0, through ioredis; both pinned in `tests/browser/package.json`
//! and installed by its `npm ci`) lock clients, one per Node process, driven over stdin/stdout
//! by `tests/browser/semaphore-client.mjs` (its header is the protocol), and the demo's
//! redis-semaphore workload ([`semaphore_workload`]).
//!
//! Client processes are SIGKILLed by PID on [`NodeSemaphore::crash`] and on drop;
//! [`NodeSemaphore::exit`] closes the client cleanly. The library's `onLockLost` is recorded
//! (the driver prints an event line), never thrown: its default would kill Node.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long a reply that needs only a round trip or two may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`NodeSemaphore::acquire`] waits (the driver's own acquireTimeout is 60 s).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(60);

/// The folder holding the driver and its `node_modules`.
pub fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// The driver script, after checking `npm ci` ran.
fn script() -> Result<PathBuf> {
    let dir = node_dir();
    if !dir.join("node_modules/redis-semaphore").exists() {
        bail!(
            "redis-semaphore is not installed: run `npm ci` in {} (scripts/test does)",
            dir.display()
        );
    }
    Ok(dir.join("semaphore-client.mjs"))
}

/// Which redis-semaphore class a client uses.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// `Mutex(client, key)`: `mutex:<key>`.
    Mutex,
    /// `Semaphore(client, key, limit)`: `semaphore:<key>`.
    Semaphore { limit: u32 },
    /// `MultiSemaphore(client, key, limit, permits)`: `semaphore:<key>`.
    Multi { limit: u32, permits: u32 },
}

/// One redis-semaphore lock in its own Node process.
pub struct NodeSemaphore {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// The library's holder id (`lock.identifier`: a v4 UUID by default).
    pub identifier: String,
    /// `onLockLost` calls seen so far.
    lost: u32,
}

impl NodeSemaphore {
    /// A client of `kind` on `key` (without the library's prefix), `lock_timeout` its
    /// lockTimeout; returns once connected.
    pub async fn start(
        url: &str,
        kind: Kind,
        key: &str,
        lock_timeout: Duration,
    ) -> Result<NodeSemaphore> {
        let (name, limit, permits) = match kind {
            Kind::Mutex => ("mutex", 0, 0),
            Kind::Semaphore { limit } => ("semaphore", limit, 0),
            Kind::Multi { limit, permits } => ("multi", limit, permits),
        };
        let mut child = Command::new("node")
            .arg(script()?)
            .args([url, name, key])
            .arg(limit.to_string())
            .arg(permits.to_string())
            .arg(lock_timeout.as_millis().to_string())
            .current_dir(node_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawn node (Debian's nodejs)")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut client = NodeSemaphore {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            identifier: String::new(),
            lost: 0,
        };
        let ready = client.line(REPLY_TIMEOUT).await?;
        if ready["ready"] != true {
            bail!("redis-semaphore client did not start: {ready}");
        }
        client.identifier = ready["identifier"]
            .as_str()
            .context("no identifier")?
            .to_string();
        Ok(client)
    }

    /// The next line that is not an event (events are counted).
    async fn line(&mut self, timeout: Duration) -> Result<Value> {
        loop {
            let line = tokio::time::timeout(timeout, self.lines.next_line())
                .await
                .map_err(|_| anyhow!("no answer from the redis-semaphore client in {timeout:?}"))??
                .context("the redis-semaphore client exited")?;
            let value: Value =
                serde_json::from_str(&line).with_context(|| format!("bad line {line:?}"))?;
            if value["event"] == "lost" {
                self.lost += 1;
                continue;
            }
            return Ok(value);
        }
    }

    async fn send(&mut self, op: &str) -> Result<()> {
        self.stdin.write_all(format!("{op}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// The answer to `op`, sent earlier.
    async fn answer(&mut self, op: &str, timeout: Duration) -> Result<Value> {
        let value = self.line(timeout).await?;
        if value["op"] != op {
            bail!("expected the answer to {op}, got {value}");
        }
        if value["ok"] != true {
            bail!("{op} failed: {value}");
        }
        Ok(value)
    }

    /// Acquires (the library polls until it can).
    pub async fn acquire(&mut self) -> Result<()> {
        self.send("acquire").await?;
        self.answer("acquire", ACQUIRE_TIMEOUT).await.map(drop)
    }

    /// Starts acquiring; [`NodeSemaphore::wait_acquired`] waits for it.
    pub async fn start_acquire(&mut self) -> Result<()> {
        self.send("acquire").await
    }

    pub async fn wait_acquired(&mut self, timeout: Duration) -> Result<()> {
        self.answer("acquire", timeout).await.map(drop)
    }

    pub async fn release(&mut self) -> Result<()> {
        self.send("release").await?;
        self.answer("release", REPLY_TIMEOUT).await.map(drop)
    }

    /// Whether the library thinks it holds, and how often it reported the lock lost.
    pub async fn state(&mut self) -> Result<(bool, u32)> {
        self.send("state").await?;
        let value = self.answer("state", REPLY_TIMEOUT).await?;
        Ok((value["acquired"] == true, self.lost))
    }

    /// SIGKILL, by PID: no release, no more refreshes.
    pub fn crash(&mut self) {
        let _ = self.child.start_kill();
    }

    /// Closes the client cleanly.
    pub async fn exit(mut self) -> Result<()> {
        self.send("exit").await?;
        self.answer("exit", REPLY_TIMEOUT).await?;
        let _ = tokio::time::timeout(REPLY_TIMEOUT, self.child.wait()).await;
        Ok(())
    }
}

impl Drop for NodeSemaphore {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The demo's redis-semaphore workload: one Node process whose `clients` Semaphore clients
/// (limit 2) share `semaphore:<key>`, each taking and giving back the permit `rounds` times. It
/// stops by itself, or when its stdin closes (the returned child is SIGKILLed on drop too).
pub fn semaphore_workload(url: &str, key: &str, clients: u32, rounds: u32) -> Result<Child> {
    Command::new("node")
        .arg(script()?)
        .args(["demo", url, key])
        .arg(clients.to_string())
        .arg(rounds.to_string())
        .current_dir(node_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("spawn node (Debian's nodejs) for the redis-semaphore workload")
}
