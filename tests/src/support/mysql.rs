//! Real MariaDB 10.11 servers (Debian's `mariadb-server`) on free loopback ports, and the
//! MariaDB-only lock client `GET_LOCK` ([`GetLock`]). The lock table, ShedLock and `SELECT …
//! FOR UPDATE` clients, shared with PostgreSQL, are in [`super::dblocks`].
//!
//! This module owns:
//!
//! * the server processes: a [`MariaDb`] is one `mariadbd --no-defaults` with its own data
//!   directory (`data/`), socket and error log (`mariadbd.log`) in its own temporary
//!   directory, listening on `127.0.0.1:<free port>`, with the `metadata_lock_info` plugin
//!   loaded and `innodb_lock_wait_timeout` = [`LOCK_WAIT_TIMEOUT_SECS`] (callers' extra
//!   arguments come later and win, e.g. `--innodb-lock-wait-timeout=2` or
//!   `--innodb-deadlock-detect=OFF`). Grants are real (no `--skip-grant-tables`): root has no
//!   password over TCP, and [`MariaDb::create_user`] makes the users a test needs. The database
//!   `app` exists (the lock tables live there; [`MariaDb::app_url`]). The server is SIGKILLed
//!   by PID and reaped on [`MariaDb::kill`] and on drop (mariadbd is a single process); the
//!   directory goes with the handle. A start that fails (a port taken between picking and
//!   binding) is retried on fresh ports with the log tail in the error; [`MariaDb::start_on`]
//!   starts on exactly one port (for "down at start, comes up later": pick the port with
//!   [`free_port`], point the collector at it, start the server later). Debian's system
//!   MariaDB service is never touched.
//! * the data directory template: `mariadb-install-db` takes 1.3–2.4 s here while copying its
//!   result takes 0.1 s, so it runs once per machine into
//!   `/tmp/lockscope-db-templates/mariadb-<binary size>-<mtime>-<recipe>/` (built in a
//!   scratch directory and renamed into place, so concurrent test processes never see half a
//!   template) and every server starts from a copy. With the template a server is ready in
//!   about 0.3 s.
//!
//! Connections: sqlx 0.8 sends no connection attributes, so MariaDB cannot show a program name
//! for a client (`PROCESSLIST` has none anyway): an observer tells clients apart by connection
//! id, user and host:port, so every client here exposes its `CONNECTION_ID()`. sqlx sets
//! `time_zone = '+00:00'` and `sql_mode` on every connection it opens.
//!
//! Seen on 10.11.19 with sqlx 0.8.6 (asserted or printed by `tests/tests/db_support_smoke.rs`;
//! what a collector decodes):
//!
//! * Types as sqlx reports them: `PROCESSLIST`: `ID` `BIGINT` (signed: decode `i64`), `TIME`
//!   `INT` (whole seconds), `TIME_MS` `DECIMAL` (e.g. `305.996`; the workspace's sqlx has no
//!   decimal type: `CAST(TIME_MS AS CHAR)` or `AS DOUBLE`), `STATE` `VARCHAR`, `INFO` `TEXT`.
//!   `CONNECTION_ID()`, `INNODB_TRX.trx_mysql_thread_id` and `METADATA_LOCK_INFO.THREAD_ID` are
//!   `BIGINT UNSIGNED` (decode `u64`; sqlx refuses `i64` for unsigned and `u64` for signed).
//!   `trx_id`, `lock_trx_id`, `requesting_trx_id`, `blocking_trx_id` are `BIGINT UNSIGNED`
//!   numbers (not strings); `requested_lock_id`/`blocking_lock_id`/`lock_id` are `VARCHAR`
//!   `"<trx_id>:<space>:<page>:<heap no>"` (e.g. `26:5:3:2`); `lock_mode`/`lock_type` are
//!   `ENUM` (decode as `String`), `lock_space`/`lock_page`/`lock_rec` `INT UNSIGNED`;
//!   `trx_started`/`trx_wait_started` `DATETIME` with whole seconds (read with `CAST(… AS
//!   CHAR)` or `UNIX_TIMESTAMP(…)`: no date-time types in the workspace's sqlx).
//! * `SELECT … FOR UPDATE` wait: `INNODB_LOCK_WAITS` has one row per blocked pair;
//!   `INNODB_LOCKS` lists both the holder's and the waiter's lock (mode `X`, type `RECORD`,
//!   `lock_table` `` `app`.`locks` `` with backquotes, `lock_index` `PRIMARY`, `lock_data`
//!   `'orders'` with the single quotes); `INNODB_TRX.trx_state` `LOCK WAIT` for the waiter.
//!   The waiter's `PROCESSLIST.STATE` is `Statistics` (not a lock-wait state), and its
//!   `INFO`/`trx_query` show the prepared text with `?` (`SELECT name FROM locks WHERE name = ?
//!   FOR UPDATE`): a bound value is not visible, only `lock_data` names the row.
//! * Without `PROCESS`, `PROCESSLIST` silently lists only one's own connections, and
//!   `INNODB_TRX`/`INNODB_LOCKS`/`INNODB_LOCK_WAITS` fail with 1227 (SQLSTATE 42000).
//! * `GET_LOCK`: the holder is in `METADATA_LOCK_INFO` (`THREAD_ID` = its connection id,
//!   `LOCK_MODE` `MDL_SHARED_NO_WRITE`, `LOCK_DURATION` NULL, `LOCK_TYPE` `User lock`,
//!   `TABLE_SCHEMA` = the lock name, `TABLE_NAME` empty string, `LOCK_TIME_MS` `BIGINT
//!   UNSIGNED`); waiters are not there, only in `PROCESSLIST` with `STATE` `User lock`. Their
//!   `INFO` is the statement text: `SELECT GET_LOCK(?, ?)` with bound parameters (what sqlx and
//!   most drivers send: the name is not visible), `SELECT GET_LOCK('job-7', 60)` with literals.
//!   With two waiters, a release wakes exactly one. A timed-out `GET_LOCK` returns 0.
//! * Lock wait timeout: error 1205, SQLSTATE `HY000`, after `innodb_lock_wait_timeout` (the
//!   statement is rolled back, the transaction stays open); deadlock: 1213, SQLSTATE `40001`,
//!   detected at once (the victim's whole transaction is rolled back).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection};

use super::certs::CertFiles;
use super::dblocks::on_a_free_port;
use super::dblocks::{bounded, DbConn, DbFailure, Pending, Session};
use crate::harness::{eventually_blocking, eventually_every};

/// `innodb_lock_wait_timeout` of servers started here unless the caller passes another: long
/// enough that a blocked `FOR UPDATE` stays for as long as a test looks at it.
pub const LOCK_WAIT_TIMEOUT_SECS: u64 = 600;
/// How long a server may take to answer after it is spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of one readiness probe (connect and one query).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest pause between two readiness probes.
const PROBE_PAUSE: Duration = Duration::from_millis(50);
/// How long `mariadb-install-db` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Bumped when the template recipe changes, so old templates are not reused.
const TEMPLATE_RECIPE: &str = "r1";
/// The database the lock tables live in.
pub const APP_DB: &str = "app";

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Opens one connection to `url` (bounded).
pub async fn connect(url: &str) -> Result<MySqlConnection> {
    let options: MySqlConnectOptions = url.parse().with_context(|| format!("parse {url}"))?;
    bounded(async { Ok(options.connect().await?) })
        .await
        .with_context(|| format!("connect to {url}"))
}

/// Opens one connection to `url` as a [`DbConn`].
pub async fn connect_db(url: &str) -> Result<DbConn> {
    Ok(DbConn::MySql(connect(url).await?))
}

// ---------------------------------------------------------------------------------------------
// The data directory template

/// Path of this machine's template for the installed mariadbd, building it if missing.
async fn template() -> Result<PathBuf> {
    static TEMPLATE: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(build_template)
                .await
                .context("template builder")?
        })
        .await
        .cloned()
}

fn binary_stamp(path: &str) -> Result<String> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("{path}: is the mariadb-server package installed?"))?;
    let mtime = meta
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    Ok(format!("{}-{mtime}", meta.len()))
}

fn build_template() -> Result<PathBuf> {
    let root = Path::new("/tmp/lockscope-db-templates");
    let stamp = binary_stamp("/usr/sbin/mariadbd")?;
    let target = root.join(format!("mariadb-{stamp}-{TEMPLATE_RECIPE}"));
    if target.join("mysql").is_dir() {
        return Ok(target);
    }
    std::fs::create_dir_all(root)?;
    let scratch = tempfile::Builder::new()
        .prefix("mariadb-building-")
        .tempdir_in(root)?;
    let data = scratch.path().join("data");
    let log = scratch.path().join("install.log");
    let out = std::fs::File::create(&log)?;
    let mut child = Command::new("mariadb-install-db")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
            // A small redo log: every server copies the template.
            "--innodb-log-file-size=8M",
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("start mariadb-install-db: is the mariadb-server package installed?")?;
    let finished = eventually_blocking(INSTALL_TIMEOUT, "mariadb-install-db finished", || {
        Ok(child.try_wait()?)
    });
    let status = finished.inspect_err(|_| {
        let _ = child.kill();
        let _ = child.wait();
    })?;
    if !status.success() {
        bail!("mariadb-install-db failed ({status}):\n{}", tail(&log, 30));
    }
    // Another process may have finished first: then its template is as good as ours.
    if std::fs::rename(&data, &target).is_err() && !target.join("mysql").is_dir() {
        bail!("could not move the template to {}", target.display());
    }
    Ok(target)
}

/// `cp -a from to` (keeps modes and owners).
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .context("run cp")?;
    if !out.status.success() {
        bail!(
            "cp -a {} {}: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The server

/// One mariadbd on `127.0.0.1:<port>` with its own data directory.
pub struct MariaDb {
    port: u16,
    data: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    extra_args: Vec<String>,
    /// TCP clients must use TLS (`require_secure_transport`); the helpers here then connect
    /// with `ssl-mode=REQUIRED` (encrypted, the certificate not checked: they administer,
    /// lockscope is the one whose verification is tested).
    tls: bool,
    process: Option<Child>,
    // Dropped after `Drop::drop` killed the server.
    dir: tempfile::TempDir,
}

impl MariaDb {
    /// A server that takes TCP connections over TLS only (`--require-secure-transport=ON`),
    /// with `server`'s certificate and key and `ca` as the CA it trusts for client
    /// certificates; `extra_args` as in [`Self::start_with`].
    pub async fn start_tls(ca: &Path, server: &CertFiles, extra_args: &[&str]) -> Result<MariaDb> {
        let mut args = vec![
            format!("--ssl-ca={}", ca.display()),
            format!("--ssl-cert={}", server.cert.display()),
            format!("--ssl-key={}", server.key.display()),
            "--require-secure-transport=ON".to_string(),
        ];
        args.extend(extra_args.iter().map(|s| s.to_string()));
        on_a_free_port("mariadbd", async |port| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Self::try_start_full(port, &args, true).await
        })
        .await
    }

    /// Starts a server on a free port and returns once root can query it (the error carries
    /// the log tail).
    pub async fn start() -> Result<MariaDb> {
        Self::start_with(&[]).await
    }

    /// Like [`Self::start`] with `extra_args` after the defaults on mariadbd's command line
    /// (later options win), e.g. `["--innodb-deadlock-detect=OFF"]`.
    pub async fn start_with(extra_args: &[&str]) -> Result<MariaDb> {
        on_a_free_port("mariadbd", async |port| {
            Self::try_start(port, extra_args).await
        })
        .await
    }

    /// Starts a server on exactly `port` (no retry elsewhere), e.g. one a collector has been
    /// pointed at while nothing listened there.
    pub async fn start_on(port: u16, extra_args: &[&str]) -> Result<MariaDb> {
        Self::try_start(port, extra_args).await
    }

    async fn try_start(port: u16, extra_args: &[&str]) -> Result<MariaDb> {
        Self::try_start_full(port, extra_args, false).await
    }

    async fn try_start_full(port: u16, extra_args: &[&str], tls: bool) -> Result<MariaDb> {
        let template = template().await?;
        let dir = tempfile::Builder::new()
            .prefix("lockscope-mariadb-")
            .tempdir()?;
        let data = dir.path().join("data");
        copy_tree(&template, &data)?;
        let mut server = MariaDb {
            port,
            socket: dir.path().join("mariadbd.sock"),
            log: dir.path().join("mariadbd.log"),
            data,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            tls,
            process: None,
            dir,
        };
        server.spawn()?;
        server.wait_ready().await?;
        server
            .exec(&format!("CREATE DATABASE IF NOT EXISTS {APP_DB}"))
            .await?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new("/usr/sbin/mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data.display()))
            .arg(format!("--socket={}", self.socket.display()))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("mariadbd.pid").display()
            ))
            .args(["--bind-address=127.0.0.1", "--user=root"])
            .arg("--plugin-load-add=metadata_lock_info")
            .arg(format!(
                "--innodb-lock-wait-timeout={LOCK_WAIT_TIMEOUT_SECS}"
            ))
            // Small, so that tests running many servers at once fit in memory.
            .args(["--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M"])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("start mariadbd: is the mariadb-server package installed?")?;
        self.process = Some(child);
        Ok(())
    }

    /// `Some(status)` once the process has exited (it is reaped then).
    fn exited(&mut self) -> Option<String> {
        let child = self.process.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.process = None;
                Some(status.to_string())
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// `Ok(())` when root can query the server on our port and it is ours (its `@@datadir`).
    async fn probe(&self) -> Result<()> {
        let mut conn = connect(&self.url()).await?;
        let datadir: String = sqlx::query_scalar("SELECT @@datadir")
            .fetch_one(&mut conn)
            .await?;
        let _ = conn.close().await;
        let ours = format!("{}/", self.data.display());
        if datadir != ours {
            bail!("port {} is answered by a server on {datadir}", self.port);
        }
        Ok(())
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let mut last = String::new();
        let waited = eventually_every(READY_TIMEOUT, PROBE_PAUSE, "mariadbd ready", async || {
            match tokio::time::timeout(PROBE_TIMEOUT, self.probe()).await {
                Ok(Ok(())) => return Ok(Some(())),
                Ok(Err(e)) => last = format!("{e:#}"),
                Err(_) => last = format!("no answer within {PROBE_TIMEOUT:?}"),
            }
            if self.process.is_none() {
                bail!("not running");
            }
            if let Some(status) = self.exited() {
                bail!("exited ({status})");
            }
            Ok(None)
        })
        .await;
        waited.map_err(|e| {
            anyhow!(
                "mariadbd on port {}: {e:#}; last probe: {last}; log tail:\n{}",
                self.port,
                tail(&self.log, 30)
            )
        })
    }

    /// `?ssl-mode=REQUIRED` on a TLS-only server, else nothing.
    fn tls_query(&self) -> &'static str {
        if self.tls {
            "?ssl-mode=REQUIRED"
        } else {
            ""
        }
    }

    /// `mysql://root@127.0.0.1:<port>/` (with `?ssl-mode=REQUIRED` on a TLS-only server)
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/{}", self.port, self.tls_query())
    }

    /// `mysql://root@127.0.0.1:<port>/app`, where the lock tables live.
    pub fn app_url(&self) -> String {
        format!(
            "mysql://root@127.0.0.1:{}/{APP_DB}{}",
            self.port,
            self.tls_query()
        )
    }

    /// `mysql://<user>:<password>@127.0.0.1:<port>/` (no escaping: keep names plain; with
    /// `?ssl-mode=REQUIRED` on a TLS-only server).
    pub fn url_for(&self, user: &str, password: &str) -> String {
        format!(
            "mysql://{user}:{password}@127.0.0.1:{}/{}",
            self.port,
            self.tls_query()
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// PID of mariadbd, `None` when it is not running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    /// The temporary directory (data directory, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's error log.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// One new root connection to the `app` database.
    pub async fn connect(&self) -> Result<DbConn> {
        connect_db(&self.app_url()).await
    }

    /// Runs `sql` (one or more statements, text protocol) as root on a connection of its own.
    pub async fn exec(&self, sql: &str) -> Result<()> {
        let mut conn = connect_db(&self.url()).await?;
        let result = conn.exec(sql).await;
        let _ = conn.close().await;
        result
    }

    /// `CREATE USER '<name>'@'%' IDENTIFIED BY '<password>'` and `GRANT <g> TO` it for each of
    /// `grants` (e.g. `"PROCESS ON *.*"`, `"SELECT ON app.*"`); no grants = `USAGE` only.
    pub async fn create_user(&self, name: &str, password: &str, grants: &[&str]) -> Result<()> {
        let mut sql = format!("CREATE USER '{name}'@'%' IDENTIFIED BY '{password}';");
        for g in grants {
            sql.push_str(&format!("GRANT {g} TO '{name}'@'%';"));
        }
        self.exec(&sql).await
    }

    /// SIGKILLs mariadbd by its PID and reaps it (no-op if it is not running): clients see
    /// their connections break, as when the database host dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data directory (a running one is killed
    /// first; InnoDB recovers) and waits until it answers. Fails, with the log tail, if the
    /// port was taken meanwhile.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()?;
        self.wait_ready().await
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// GET_LOCK

/// What `GET_LOCK(name, timeout)` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetLockOutcome {
    /// 1: acquired.
    Acquired,
    /// 0: the timeout passed.
    TimedOut,
    /// NULL: an error (e.g. the waiting connection was killed).
    Null,
}

/// How the lock name and timeout reach the server: as bound parameters of a prepared
/// statement (`SELECT GET_LOCK(?, ?)`; what most drivers do) or as literals in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Params {
    Bound,
    Literal,
}

/// One connection that calls `GET_LOCK(name, timeout)` and later `RELEASE_LOCK(name)`.
pub struct GetLock {
    session: Session,
    name: String,
    params: Params,
    acquire: Pending<GetLockOutcome>,
}

/// `'text'` as a MariaDB string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

async fn get_lock(
    conn: &mut DbConn,
    key: &str,
    timeout_secs: u64,
    params: Params,
) -> Result<GetLockOutcome, DbFailure> {
    let DbConn::MySql(c) = conn else {
        return Err(not_mysql());
    };
    let value: Option<i64> = match params {
        Params::Bound => {
            sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
                .bind(key)
                .bind(timeout_secs as i64)
                .fetch_one(c)
                .await
        }
        Params::Literal => {
            let sql = format!("SELECT GET_LOCK({}, {timeout_secs})", literal(key));
            sqlx::query_scalar(&sql).fetch_one(c).await
        }
    }
    .map_err(|e| DbFailure::from_sqlx(&e))?;
    Ok(match value {
        Some(1) => GetLockOutcome::Acquired,
        Some(_) => GetLockOutcome::TimedOut,
        None => GetLockOutcome::Null,
    })
}

async fn release_lock(
    conn: &mut DbConn,
    key: &str,
    params: Params,
) -> Result<Option<i64>, DbFailure> {
    let DbConn::MySql(c) = conn else {
        return Err(not_mysql());
    };
    match params {
        Params::Bound => {
            sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
                .bind(key)
                .fetch_one(c)
                .await
        }
        Params::Literal => {
            let sql = format!("SELECT RELEASE_LOCK({})", literal(key));
            sqlx::query_scalar(&sql).fetch_one(c).await
        }
    }
    .map_err(|e| DbFailure::from_sqlx(&e))
}

fn not_mysql() -> DbFailure {
    DbFailure {
        sqlstate: None,
        number: None,
        message: "not a MariaDB connection".into(),
    }
}

impl GetLock {
    /// Sends `SELECT GET_LOCK(name, timeout_secs)` on `conn` and returns at once; see
    /// [`Self::wait_acquired`] / [`Self::wait_outcome`].
    pub async fn start(
        conn: MySqlConnection,
        name: &str,
        timeout_secs: u64,
        params: Params,
    ) -> Result<GetLock> {
        let session = Session::new(DbConn::MySql(conn)).await?;
        let key = name.to_string();
        let acquire = session.submit(move |mut conn| {
            Box::pin(async move {
                let outcome = get_lock(&mut conn, &key, timeout_secs, params).await;
                (conn, outcome)
            })
        });
        Ok(GetLock {
            session,
            name: name.to_string(),
            params,
            acquire,
        })
    }

    /// Waits at most `timeout` for `GET_LOCK` to return; its value.
    pub async fn wait_outcome(&mut self, timeout: Duration) -> Result<GetLockOutcome> {
        match self.acquire.wait(timeout).await? {
            Ok(o) => Ok(*o),
            Err(e) => bail!("GET_LOCK({:?}) failed: {e}", self.name),
        }
    }

    /// Waits at most `timeout` until the lock is held; fails if `GET_LOCK` is still waiting or
    /// returned 0 or NULL.
    pub async fn wait_acquired(&mut self, timeout: Duration) -> Result<()> {
        match self.wait_outcome(timeout).await? {
            GetLockOutcome::Acquired => Ok(()),
            other => bail!("GET_LOCK({:?}) returned {other:?}", self.name),
        }
    }

    /// Whether `GET_LOCK` has returned 1.
    pub fn is_acquired(&mut self) -> bool {
        matches!(self.acquire.outcome(), Some(Ok(GetLockOutcome::Acquired)))
    }

    /// `SELECT RELEASE_LOCK(name)` (after `GET_LOCK` returned; bounded): `Some(1)` released,
    /// `Some(0)` held by another connection, `None` no such lock.
    pub async fn release(&self) -> Result<Option<i64>> {
        let key = self.name.clone();
        let params = self.params;
        self.session
            .run(move |mut conn| {
                Box::pin(async move {
                    let outcome = release_lock(&mut conn, &key, params).await;
                    (conn, outcome)
                })
            })
            .await
    }

    /// The server's id of this client's session (`PROCESSLIST.ID`, `METADATA_LOCK_INFO.THREAD_ID`).
    pub fn connection_id(&self) -> i64 {
        self.session.connection_id()
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}
