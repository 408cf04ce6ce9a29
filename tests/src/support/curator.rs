//! Real Apache Curator lock clients (Debian's `libcurator-recipes-java`), one JVM and one
//! ZooKeeper session each, driven over stdin/stdout by `tests/support/java/CuratorLockClient.java`.
//!
//! The Java source is compiled once with `javac` into a cache directory keyed by its hash; the
//! compile goes to a private directory that is renamed into place, so parallel test processes
//! never see a half-written class. Processes are killed by PID on drop.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::harness::eventually_blocking;

const JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
];

const SOURCE: &str = include_str!("../../support/java/CuratorLockClient.java");

/// Which Curator recipe a client drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CuratorRecipe {
    Mutex,
    SemaphoreMutex,
    Semaphore {
        max_leases: u32,
    },
    Read,
    Write,
    /// `path` is a comma-separated list of mutex paths.
    Multi,
}

impl CuratorRecipe {
    fn args(&self) -> Vec<String> {
        match self {
            CuratorRecipe::Mutex => vec!["mutex".into()],
            CuratorRecipe::SemaphoreMutex => vec!["semaphore-mutex".into()],
            CuratorRecipe::Semaphore { max_leases } => {
                vec!["semaphore".into(), max_leases.to_string()]
            }
            CuratorRecipe::Read => vec!["read".into()],
            CuratorRecipe::Write => vec!["write".into()],
            CuratorRecipe::Multi => vec!["multi".into()],
        }
    }
}

fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Compiles the client once per source version and returns the directory holding its class.
pub fn compiled_classes_dir() -> Result<PathBuf> {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("lockscope-curator-{:016x}", fnv1a(SOURCE)));
    if dir.join("CuratorLockClient.class").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&base)?;
    let scratch = tempfile::Builder::new()
        .prefix("lockscope-javac-")
        .tempdir_in(&base)?;
    let source = scratch.path().join("CuratorLockClient.java");
    std::fs::write(&source, SOURCE)?;
    let out = std::process::Command::new("javac")
        .arg("-d")
        .arg(scratch.path())
        .arg("-cp")
        .arg(JARS.join(":"))
        .arg(&source)
        .output()
        .context("run javac: is a JDK installed? run scripts/install-deps")?;
    if !out.status.success() {
        bail!("javac failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let built = scratch.keep();
    // Another process may have won the race; either copy is the same.
    if std::fs::rename(&built, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&built);
    }
    if !dir.join("CuratorLockClient.class").exists() {
        bail!("compiled Curator client missing in {}", dir.display());
    }
    Ok(dir)
}

/// One Curator client process.
pub struct CuratorClient {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pid: u32,
    session: i64,
    stderr: tempfile::NamedTempFile,
}

impl CuratorClient {
    /// Starts a client and waits until its session is established.
    pub async fn spawn(
        connect: &str,
        session_timeout_ms: u64,
        recipe: CuratorRecipe,
        path: &str,
    ) -> Result<CuratorClient> {
        let classes = tokio::task::spawn_blocking(compiled_classes_dir).await??;
        let stderr = tempfile::NamedTempFile::new()?;
        let mut classpath = vec![classes.display().to_string()];
        classpath.extend(JARS.iter().map(|j| j.to_string()));
        let mut args = recipe.args();
        let extra = args.split_off(1);
        let mut child = Command::new("java")
            .args([
                "-Xmx64m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Xss512k",
            ])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-cp")
            .arg(classpath.join(":"))
            .arg("CuratorLockClient")
            .arg(connect)
            .arg(session_timeout_ms.to_string())
            .arg(&args[0])
            .arg(path)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr.reopen()?))
            .kill_on_drop(true)
            .spawn()
            .context("start java (Curator client)")?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("Curator client exited at once"))?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut client = CuratorClient {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            pid,
            session: 0,
            stderr,
        };
        let line = client.expect("session ", Duration::from_secs(60)).await?;
        client.session = lockscope_model::parse_session_hex(line.trim_start_matches("session "))
            .ok_or_else(|| anyhow!("bad session line {line:?}"))?;
        Ok(client)
    }

    /// The client's ZooKeeper session id, as it printed it.
    pub fn session_id(&self) -> i64 {
        self.session
    }

    /// The JVM's process id (kept after the process is gone).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    async fn expect(&mut self, prefix: &str, timeout: Duration) -> Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .map_err(|_| {
                    anyhow!(
                        "Curator client: no {prefix:?} within {timeout:?}; stderr:\n{}",
                        self.stderr_text()
                    )
                })??;
            let Some(line) = line else {
                bail!(
                    "Curator client exited before {prefix:?}; stderr:\n{}",
                    self.stderr_text()
                );
            };
            if line.starts_with(prefix) {
                return Ok(line);
            }
            if line.starts_with("error") {
                bail!("Curator client: {line}");
            }
        }
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    async fn command(&mut self, command: &str) -> Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Asks for the lock and returns once the client is trying (its node is being created).
    pub async fn start_acquire(&mut self) -> Result<()> {
        self.command("acquire").await?;
        self.expect("acquiring", Duration::from_secs(10))
            .await
            .map(|_| ())
    }

    /// Waits for `acquired` (after [`Self::start_acquire`]); an `error` line or exit fails.
    pub async fn wait_acquired(&mut self, timeout: Duration) -> Result<()> {
        self.expect("acquired", timeout).await.map(|_| ())
    }

    /// Releases the lock (or returns the lease) and waits for `released`.
    pub async fn release(&mut self) -> Result<()> {
        self.command("release").await?;
        self.expect("released", Duration::from_secs(10))
            .await
            .map(|_| ())
    }

    /// SIGKILL: no clean close, so the session must expire on the server.
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
        // Reap without blocking the runtime for long: the process dies at once on SIGKILL (the
        // wait gives up after a second, as it always did).
        let _ = eventually_blocking(Duration::from_secs(1), "Curator client reaped", || {
            Ok(self.child.try_wait()?.map(|_| ()))
        });
    }

    /// Closes the client cleanly (its session closes) and waits for the process.
    pub async fn quit(mut self) -> Result<()> {
        let _ = self.command("quit").await;
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => bail!(
                "Curator client exited with {status} on quit; stderr:\n{}",
                self.stderr_text()
            ),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => {
                self.kill();
                bail!("Curator client did not exit within 10 s of quit: killed it")
            }
        }
    }
}

impl Drop for CuratorClient {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}
