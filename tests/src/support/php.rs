//! Real PHP lock clients from Debian's packages — Laravel's cache locks (`php-illuminate-cache`
//! 8.83: `PhpRedisLock`, `DatabaseLock`) and the Symfony Lock component (`php-symfony-lock`
//! 5.4: `RedisStore`, `PdoStore`) — one lock object per `php` process, driven over stdin/stdout
//! by `tests/php/lockclient.php` (its comment is the protocol). The libraries are loaded
//! through Debian's autoloaders; nothing comes from Packagist. Processes are SIGKILLed by PID
//! on drop and on [`PhpClient::crash`].

use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/php/lockclient.php");
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// One PHP process holding one lock object.
pub struct PhpClient {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    label: String,
    stderr: tempfile::NamedTempFile,
}

/// What `try` answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// Acquired; Laravel's locks name their owner token.
    Acquired(Option<String>),
    Busy,
}

/// What `refresh` or `release` answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Kept {
    Yes,
    /// The library found the lock was no longer its own, in its words.
    Lost(String),
}

impl PhpClient {
    /// Starts `php lockclient.php <config>` and waits for `READY`.
    pub async fn spawn(config: Value) -> Result<PhpClient> {
        let label = format!("php {}", config["kind"].as_str().unwrap_or("lock client"));
        let stderr = tempfile::NamedTempFile::new()?;
        let mut child = Command::new("php")
            .arg(SCRIPT)
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr.reopen()?))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {label} (php-cli from Debian)"))?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut client = PhpClient {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            label,
            stderr,
        };
        client.reply(&["READY"]).await?;
        Ok(client)
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    async fn ask(&mut self, command: &str, want: &[&str]) -> Result<(String, Value)> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .with_context(|| format!("{}: send {command:?}", self.label))?;
        self.stdin.flush().await?;
        self.reply(want).await
    }

    async fn reply(&mut self, want: &[&str]) -> Result<(String, Value)> {
        let line = tokio::time::timeout(REPLY_TIMEOUT, self.lines.next_line())
            .await
            .map_err(|_| {
                anyhow!(
                    "{}: no {want:?} in time; stderr:\n{}",
                    self.label,
                    self.stderr_text()
                )
            })??;
        let Some(line) = line else {
            bail!(
                "{} exited before {want:?}; stderr:\n{}",
                self.label,
                self.stderr_text()
            );
        };
        let (word, detail) = line.split_once(' ').unwrap_or((line.as_str(), "null"));
        if !want.contains(&word) {
            bail!(
                "{}: expected {want:?}, got {line:?}; stderr:\n{}",
                self.label,
                self.stderr_text()
            );
        }
        Ok((
            word.to_string(),
            serde_json::from_str(detail).unwrap_or(Value::Null),
        ))
    }

    /// One non-blocking attempt (the libraries' waiters poll: nothing waits on the server).
    pub async fn try_acquire(&mut self) -> Result<Attempt> {
        let (word, detail) = self.ask("try", &["ACQUIRED", "BUSY"]).await?;
        Ok(match word.as_str() {
            "ACQUIRED" => Attempt::Acquired(detail["owner"].as_str().map(str::to_string)),
            _ => Attempt::Busy,
        })
    }

    /// Acquires, failing if the lock is busy.
    pub async fn acquire(&mut self) -> Result<Option<String>> {
        match self.try_acquire().await? {
            Attempt::Acquired(owner) => Ok(owner),
            Attempt::Busy => bail!("{}: busy", self.label),
        }
    }

    /// Extends the hold (Symfony), or asks whether it is still owned (Laravel).
    pub async fn refresh(&mut self) -> Result<Kept> {
        self.kept("refresh", "REFRESHED").await
    }

    pub async fn release(&mut self) -> Result<Kept> {
        self.kept("release", "RELEASED").await
    }

    async fn kept(&mut self, command: &str, ok: &str) -> Result<Kept> {
        let (word, detail) = self.ask(command, &[ok, "LOST"]).await?;
        Ok(if word == ok {
            Kept::Yes
        } else {
            Kept::Lost(detail["message"].as_str().unwrap_or_default().to_string())
        })
    }

    /// SIGKILL: the holder dies without releasing (its key or row stays until it expires).
    pub async fn crash(&mut self) -> Result<()> {
        self.child.start_kill()?;
        tokio::time::timeout(REPLY_TIMEOUT, self.child.wait())
            .await
            .map_err(|_| anyhow!("{} not reaped after SIGKILL", self.label))??;
        Ok(())
    }
}
