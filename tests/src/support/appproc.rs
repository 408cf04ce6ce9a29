//! An application process that locks through several backends at once — a kazoo client, a
//! psycopg connection and a PyMySQL connection in one Python process (`tests/py/process.py`,
//! whose docstring is the protocol), each named after the process the way its library allows
//! (kazoo's lock identifier, `application_name`, the `program_name` connection attribute) — so
//! tests can build waits that cross backends, as services do.
//!
//! It runs in the environment [`super::python`] builds; its script is written next to a
//! temporary file of its own. The process is SIGKILLed on drop (`kill_on_drop`), so a test that
//! leaves it deadlocked leaves nothing behind.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const SCRIPT: &str = include_str!("../../py/process.py");

/// How to reach MariaDB (PyMySQL).
#[derive(Debug, Clone)]
pub struct MysqlAccess {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
}

/// What the process connects to.
#[derive(Debug, Clone, Default)]
pub struct AppSpec {
    pub name: String,
    pub zk_hosts: Option<String>,
    pub pg_url: Option<String>,
    pub mysql: Option<MysqlAccess>,
}

/// A running process; [`AppProcess::ready`] says what it connected as.
pub struct AppProcess {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    _script: tempfile::NamedTempFile,
    pub name: String,
    /// `READY`'s detail: `zk_session` (`0x…`), `pg_pid`, `mysql_id`.
    pub ready: Value,
}

impl AppProcess {
    /// Starts the process and waits until every connection is up.
    pub async fn spawn(spec: AppSpec) -> Result<AppProcess> {
        let (python, _) = tokio::task::spawn_blocking(super::python::python_and_script).await??;
        let mut script = tempfile::Builder::new()
            .prefix("lockscope-process-")
            .suffix(".py")
            .tempfile()?;
        script.write_all(SCRIPT.as_bytes())?;
        let config = json!({
            "name": spec.name,
            "zk_hosts": spec.zk_hosts,
            "pg_url": spec.pg_url,
            "mysql": spec.mysql.as_ref().map(|m| json!({
                "host": m.host, "port": m.port, "user": m.user, "password": m.password,
            })),
        });
        let mut child = Command::new(python)
            .args(["-I", "-u"])
            .arg(script.path())
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start process {}", spec.name))?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut process = AppProcess {
            _child: child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            _script: script,
            name: spec.name.clone(),
            ready: Value::Null,
        };
        let ready = process.expect("READY", Duration::from_secs(60)).await?;
        process.ready = serde_json::from_str(&ready).unwrap_or(Value::Null);
        Ok(process)
    }

    /// The next line starting with `word`, its rest; any other line (an `ERROR`) fails.
    async fn expect(&mut self, word: &str, timeout: Duration) -> Result<String> {
        let line = tokio::time::timeout(timeout, self.lines.next_line())
            .await
            .map_err(|_| anyhow!("{}: no {word} within {timeout:?}", self.name))??
            .ok_or_else(|| anyhow!("{} exited before {word}", self.name))?;
        match line.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_string()),
            None => bail!("{}: expected {word}, got {line:?}", self.name),
        }
    }

    /// Starts `command` (`zk <path>`, `pg <key>`, `mysql <name>`) on a thread of its own.
    pub async fn start(&mut self, command: &str) -> Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        self.expect("STARTED", Duration::from_secs(30)).await?;
        Ok(())
    }

    /// Takes a lock that is free: starts it and waits for `ACQUIRED`.
    pub async fn take(&mut self, command: &str) -> Result<()> {
        self.start(command).await?;
        self.expect("ACQUIRED", Duration::from_secs(30)).await?;
        Ok(())
    }

    /// The ZooKeeper session id as lockscope writes it (`0x…`).
    pub fn zk_session(&self) -> Option<String> {
        self.ready["zk_session"].as_str().map(str::to_string)
    }

    pub fn pg_pid(&self) -> Option<i64> {
        self.ready["pg_pid"].as_i64()
    }

    pub fn mysql_id(&self) -> Option<i64> {
        self.ready["mysql_id"].as_i64()
    }
}

/// Two processes deadlocked across their backends: `a` takes `a_lock` and `b` takes `b_lock`
/// (commands as [`AppProcess::start`] takes them), then each starts waiting on the other's.
pub async fn deadlock(
    a: AppSpec,
    b: AppSpec,
    a_lock: &str,
    b_lock: &str,
) -> Result<(AppProcess, AppProcess)> {
    let (a, b) = tokio::join!(AppProcess::spawn(a), AppProcess::spawn(b));
    let (mut a, mut b) = (a?, b?);
    a.take(a_lock).await?;
    b.take(b_lock).await?;
    a.start(b_lock).await?;
    b.start(a_lock).await?;
    Ok((a, b))
}
