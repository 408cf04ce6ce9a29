//! Real PostgreSQL 15 servers (Debian's `postgresql`) on free loopback ports, and the
//! PostgreSQL-only lock client: advisory locks ([`Advisory`]). The lock table, ShedLock and
//! `SELECT … FOR UPDATE` clients, shared with MariaDB, are in [`super::dblocks`].
//!
//! This module owns:
//!
//! * the server processes: a [`Postgres`] is one postmaster (and the backends it forks) with
//!   its own data directory (`data/`, owned by `postgres`, mode 0700), its Unix socket (`-k`)
//!   in its own temporary directory (owned by `postgres`; `/tmp` is traversable), and its log
//!   (`postgres.log`, stdout and stderr) there, listening on `127.0.0.1:<free port>` with
//!   `fsync=off` (tests need no durability across a host crash) and the caller's `-c`
//!   settings after it (e.g. `deadlock_timeout=60s`, `max_locks_per_transaction=256`). The
//!   server refuses to run as root: the postmaster is spawned directly with the `postgres`
//!   user's uid and gid (not through `runuser`, which would stay in between as the process we
//!   know the PID of) and in a process group of its own (its children each call `setsid()`,
//!   so they are found by parent PID, [`Postgres::processes`]). Authentication is `trust`, so
//!   passwords are not checked, but privileges are real: a user made by
//!   [`Postgres::create_user`] sees what its roles let it see. Debian's system cluster is never
//!   touched.
//! * stopping: [`Postgres::kill`] and drop send SIGQUIT to the postmaster's PID — PostgreSQL's
//!   immediate shutdown: every backend is killed at once, with no checkpoint, so the next start
//!   runs crash recovery, as after a crash — then reap it (bounded; if it has not exited after
//!   10 s, SIGKILL to its children and to it, by PID). Not SIGKILL first: PID 1 on these machines reaps no
//!   orphans, so backends of a SIGKILLed postmaster stay as zombies for good (seen), while on
//!   SIGQUIT the postmaster reaps its children itself before it exits. Clients see their
//!   connections end (backends send `FATAL: terminating connection due to immediate shutdown
//!   command` first). After drop no process of ours is left ([`Postgres::processes`] lists them
//!   while it runs).
//! * the data directory template: `initdb` takes about 1.8 s here and copying its result 0.3
//!   s, so initdb runs once per machine (`runuser -u postgres -- initdb -A trust -U postgres`)
//!   into `/tmp/lockscope-db-templates/postgres-<binary size>-<mtime>-<recipe>/` (built in a
//!   scratch directory and renamed into place) and every server starts from a `cp -a` copy,
//!   which keeps the owner and mode. With the template a server answers in about 0.1–0.2 s.
//!
//! Every connection made here sets `application_name` (see [`connect`]), which
//! `pg_stat_activity.application_name` shows. The workspace's sqlx has no date-time types, so
//! `timestamptz` columns (`waitstart`, `xact_start`, …) are read as text or epoch numbers.
//!
//! Seen on 15.18 with sqlx 0.8.6 (asserted or printed by `tests/tests/db_support_smoke.rs`):
//!
//! * `pg_locks` types as sqlx reports them: `locktype`/`mode`/`virtualxid`/`virtualtransaction`
//!   `TEXT`, `database`/`relation`/`classid`/`objid` `OID` (decode
//!   `sqlx::postgres::types::Oid`, a `u32`), `page` `INT4`, `tuple`/`objsubid` `INT2`,
//!   `transactionid` `xid` (no sqlx type: `transactionid::text::bigint`), `pid` `INT4`,
//!   `granted`/`fastpath` `BOOL`, `waitstart` `TIMESTAMPTZ` (`waitstart::text` looks like
//!   `2026-11-23 22:29:22.504771+00`; NULL for granted rows, set for every waiter).
//! * Advisory keys: bigint k → `classid` = high 32 bits, `objid` = low 32 bits as unsigned
//!   (`-5` → 4294967295 / 4294967291; `2^32 + 7` → 1 / 7), `objsubid` 1; `(int, int)` → `classid`
//!   k1, `objid` k2 as unsigned (`(3, -4)` → 3 / 4294967292), `objsubid` 2. Mode `ExclusiveLock`,
//!   shared `ShareLock`. Session and transaction level look the same in `pg_locks`.
//! * A `FOR UPDATE` queue of holder + three waiters: the first waiter waits ungranted on
//!   `transactionid` (the holder's xid, mode `ShareLock`), the later ones on `tuple`
//!   (`AccessExclusiveLock`). `pg_blocking_pids`: first waiter → [holder], second → [first
//!   waiter], third → [first waiter, second waiter] (never the holder, for the later ones):
//!   follow the chain, and order by `waitstart`. After the holder commits, only the first waiter
//!   gets the row.
//! * `pg_stat_activity.query` of another user's backend is `<insufficient privilege>` without
//!   `pg_read_all_stats`; `pg_locks` is readable by everybody. The query text of a bound call is
//!   the prepared text: `SELECT pg_advisory_lock($1)` (the key is only in `pg_locks`).
//! * Deadlock: SQLSTATE `40P01` (`deadlock detected`) after `deadlock_timeout`; lock timeout
//!   (`lock_timeout`): `55P03`.
//! * 10 000 advisory locks on one connection in one statement: about 10–15 ms with
//!   `max_locks_per_transaction=256`; reading them back from `pg_locks` about 15 ms.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

use super::certs::CertFiles;
use super::dblocks::on_a_free_port;
use super::dblocks::{bounded, DbConn, DbFailure, Pending, Session};
use super::mysql::copy_tree;
use crate::harness::{eventually_blocking, eventually_every};

const BIN: &str = "/usr/lib/postgresql/15/bin";
/// How long a server may take to answer after it is spawned (crash recovery included).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest pause between two readiness probes.
const PROBE_PAUSE: Duration = Duration::from_millis(50);
/// How long initdb may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
/// How long an immediate shutdown may take before the process group is SIGKILLed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bumped when the template recipe changes.
const TEMPLATE_RECIPE: &str = "r1";

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Opens one connection to `url` with `application_name` set (bounded).
pub async fn connect(url: &str, application_name: &str) -> Result<PgConnection> {
    let options: PgConnectOptions = url.parse().with_context(|| format!("parse {url}"))?;
    let options = options.application_name(application_name);
    bounded(async { Ok(options.connect().await?) })
        .await
        .with_context(|| format!("connect to {url}"))
}

/// Opens one connection to `url` as a [`DbConn`].
pub async fn connect_db(url: &str, application_name: &str) -> Result<DbConn> {
    Ok(DbConn::Postgres(connect(url, application_name).await?))
}

/// The `postgres` user's uid and gid, from `/etc/passwd`.
fn postgres_ids() -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .ok_or_else(|| anyhow!("no postgres user: is the postgresql package installed?"))
}

/// PIDs whose parent is `pid` (`pgrep -P`).
pub fn children(pid: u32) -> Vec<u32> {
    Command::new("pgrep")
        .arg("-P")
        .arg(pid.to_string())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn chown_postgres(path: &Path) -> Result<()> {
    let (uid, gid) = postgres_ids()?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .with_context(|| format!("chown postgres {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// The data directory template

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

fn build_template() -> Result<PathBuf> {
    let root = Path::new("/tmp/lockscope-db-templates");
    let binary = format!("{BIN}/postgres");
    let meta = std::fs::metadata(&binary)
        .with_context(|| format!("{binary}: is the postgresql package installed?"))?;
    let mtime = meta
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let target = root.join(format!("postgres-{}-{mtime}-{TEMPLATE_RECIPE}", meta.len()));
    if target.join("PG_VERSION").is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(root)?;
    let scratch = tempfile::Builder::new()
        .prefix("postgres-building-")
        .tempdir_in(root)?;
    chown_postgres(scratch.path())?;
    let data = scratch.path().join("data");
    let log = scratch.path().join("initdb.log");
    let out = std::fs::File::create(&log)?;
    let mut child = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(format!("{BIN}/initdb"))
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "--no-sync"])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("start initdb")?;
    let finished = eventually_blocking(INITDB_TIMEOUT, "initdb finished", || Ok(child.try_wait()?));
    let status = finished.inspect_err(|_| {
        let _ = child.kill();
        let _ = child.wait();
    })?;
    if !status.success() {
        bail!("initdb failed ({status}):\n{}", tail(&log, 30));
    }
    if std::fs::rename(&data, &target).is_err() && !target.join("PG_VERSION").is_file() {
        bail!("could not move the template to {}", target.display());
    }
    Ok(target)
}

// ---------------------------------------------------------------------------------------------
// The server

/// One PostgreSQL 15 postmaster on `127.0.0.1:<port>` with its own data directory.
pub struct Postgres {
    port: u16,
    data: PathBuf,
    log: PathBuf,
    settings: Vec<String>,
    /// TCP clients must use TLS (`ssl = on`, `pg_hba.conf` with `hostssl` lines only); the
    /// helpers here then connect with `sslmode=require` (encrypted, not verified: they
    /// administer, lockscope is the one whose verification is tested).
    tls: bool,
    process: Option<Child>,
    // Dropped after `Drop::drop` stopped the server.
    dir: tempfile::TempDir,
}

impl Postgres {
    /// A server that takes TCP connections over TLS only: `ssl = on` with `server`'s
    /// certificate and key (copied beside the data directory, owned by `postgres`: the server
    /// refuses a key others can read), `ca` as `ssl_ca_file`, and a `pg_hba.conf` of its own
    /// with `local` and `hostssl` lines only (`trust`), so a plain-text TCP connection finds no
    /// entry. `settings` as in [`Self::start_with`].
    pub async fn start_tls(ca: &Path, server: &CertFiles, settings: &[&str]) -> Result<Postgres> {
        on_a_free_port("postgres", async |port| {
            Self::try_start_full(port, settings, Some((ca, server))).await
        })
        .await
    }

    /// Starts a server on a free port and returns once `postgres` can query it (the error
    /// carries the log tail).
    pub async fn start() -> Result<Postgres> {
        Self::start_with(&[]).await
    }

    /// Like [`Self::start`] with `settings` (`name=value`, each passed as `-c name=value` after
    /// the defaults), e.g. `["deadlock_timeout=60s"]`.
    pub async fn start_with(settings: &[&str]) -> Result<Postgres> {
        on_a_free_port("postgres", async |port| {
            Self::try_start(port, settings).await
        })
        .await
    }

    /// Starts a server on exactly `port` (no retry elsewhere).
    pub async fn start_on(port: u16, settings: &[&str]) -> Result<Postgres> {
        Self::try_start(port, settings).await
    }

    async fn try_start(port: u16, settings: &[&str]) -> Result<Postgres> {
        Self::try_start_full(port, settings, None).await
    }

    async fn try_start_full(
        port: u16,
        settings: &[&str],
        tls: Option<(&Path, &CertFiles)>,
    ) -> Result<Postgres> {
        let template = template().await?;
        let dir = tempfile::Builder::new()
            .prefix("lockscope-postgres-")
            .tempdir()?;
        chown_postgres(dir.path())?;
        let data = dir.path().join("data");
        copy_tree(&template, &data)?;
        let mut settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
        if let Some((ca, server)) = tls {
            let tls_dir = dir.path().join("tls");
            std::fs::create_dir(&tls_dir)?;
            chown_postgres(&tls_dir)?;
            for (from, name) in [
                (ca, "ca.crt"),
                (&server.cert, "server.crt"),
                (&server.key, "server.key"),
            ] {
                let to = tls_dir.join(name);
                std::fs::copy(from, &to).with_context(|| format!("copy {}", from.display()))?;
                chown_postgres(&to)?;
            }
            let hba = dir.path().join("pg_hba.conf");
            std::fs::write(
                &hba,
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )?;
            chown_postgres(&hba)?;
            // Before the caller's settings, which come later and win.
            let mut first = vec![
                "ssl=on".to_string(),
                format!("ssl_cert_file={}", tls_dir.join("server.crt").display()),
                format!("ssl_key_file={}", tls_dir.join("server.key").display()),
                format!("ssl_ca_file={}", tls_dir.join("ca.crt").display()),
                format!("hba_file={}", hba.display()),
            ];
            first.append(&mut settings);
            settings = first;
        }
        let mut server = Postgres {
            port,
            log: dir.path().join("postgres.log"),
            data,
            settings,
            tls: tls.is_some(),
            process: None,
            dir,
        };
        server.spawn()?;
        server.wait_ready().await?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<()> {
        let (uid, gid) = postgres_ids()?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = Command::new(format!("{BIN}/postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]);
        for s in &self.settings {
            cmd.arg("-c").arg(s);
        }
        let child = cmd
            .uid(uid)
            .gid(gid)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("start postgres")?;
        self.process = Some(child);
        Ok(())
    }

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

    /// `Ok(())` when the server on our port answers and is ours (its `data_directory`).
    async fn probe(&self) -> Result<()> {
        let mut conn = connect(&self.url(), "lockscope-probe").await?;
        let dir: String = sqlx::query_scalar("SHOW data_directory")
            .fetch_one(&mut conn)
            .await?;
        let _ = conn.close().await;
        if Path::new(&dir) != self.data {
            bail!("port {} is answered by a server on {dir}", self.port);
        }
        Ok(())
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let mut last = String::new();
        let waited = eventually_every(READY_TIMEOUT, PROBE_PAUSE, "postgres ready", async || {
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
                "postgres on port {}: {e:#}; last probe: {last}; log tail:\n{}",
                self.port,
                tail(&self.log, 30)
            )
        })
    }

    /// `?sslmode=require` on a TLS-only server, else nothing.
    fn tls_query(&self) -> &'static str {
        if self.tls {
            "?sslmode=require"
        } else {
            ""
        }
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres` (the superuser; with
    /// `?sslmode=require` on a TLS-only server).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres{}",
            self.port,
            self.tls_query()
        )
    }

    /// `postgres://<user>:<password>@127.0.0.1:<port>/postgres` (with `?sslmode=require` on
    /// a TLS-only server)
    pub fn url_for(&self, user: &str, password: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/postgres{}",
            self.port,
            self.tls_query()
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// PID of the postmaster (also its process group), `None` when it is not running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    /// PIDs of the postmaster and its children (backends, background workers), empty when
    /// stopped. (Each child calls `setsid()`, so they are not in the postmaster's process
    /// group: find them by parent.)
    pub fn processes(&self) -> Vec<u32> {
        let Some(pid) = self.pid() else {
            return Vec::new();
        };
        let mut all = vec![pid];
        all.extend(children(pid));
        all
    }

    /// The temporary directory (data directory, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// One new superuser connection named `application_name`.
    pub async fn connect(&self, application_name: &str) -> Result<DbConn> {
        connect_db(&self.url(), application_name).await
    }

    /// Runs `sql` (one or more statements, simple protocol) as `postgres` on a connection of
    /// its own.
    pub async fn exec(&self, sql: &str) -> Result<()> {
        let mut conn = self.connect("lockscope-admin").await?;
        let result = conn.exec(sql).await;
        let _ = conn.close().await;
        result
    }

    /// `CREATE ROLE <name> LOGIN PASSWORD '<password>'` and `GRANT <role> TO <name>` for each
    /// of `roles` (e.g. `pg_read_all_stats`, `pg_signal_backend`).
    pub async fn create_user(&self, name: &str, password: &str, roles: &[&str]) -> Result<()> {
        let mut sql = format!("CREATE ROLE {name} LOGIN PASSWORD '{password}';");
        for r in roles {
            sql.push_str(&format!("GRANT {r} TO {name};"));
        }
        self.exec(&sql).await
    }

    /// Immediate shutdown (SIGQUIT to the postmaster's PID; see the module doc), reaped, bounded
    /// (then SIGKILL to the process group). No-op if it is not running.
    pub fn kill(&mut self) {
        let Some(mut child) = self.process.take() else {
            return;
        };
        let pid = child.id().to_string();
        let _ = Command::new("kill")
            .args(["-QUIT", &pid])
            .stderr(Stdio::null())
            .status();
        // Gone (or no longer ours to wait for) within the bound, or else killed.
        let stopped = eventually_blocking(STOP_TIMEOUT, "postgres stopped on SIGQUIT", || {
            Ok(match child.try_wait() {
                Ok(Some(_)) | Err(_) => Some(()),
                Ok(None) => None,
            })
        });
        if stopped.is_err() {
            // Children first, by PID, while the postmaster is still their parent.
            for c in children(child.id()) {
                let _ = Command::new("kill")
                    .args(["-KILL", &c.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data directory (a running one is stopped
    /// first; the start runs crash recovery) and waits until it answers. Fails, with the log
    /// tail, if the port was taken meanwhile.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()?;
        self.wait_ready().await
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// Advisory locks

/// An advisory lock key: one `bigint`, or a pair of `int`s (a different key space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvisoryKey {
    Big(i64),
    Pair(i32, i32),
}

impl AdvisoryKey {
    /// `(classid, objid, objsubid)` as `pg_locks` shows this key: a bigint is split into its
    /// high and low 32 bits (as unsigned `oid`s) with `objsubid` 1; a pair is `(k1, k2, 2)`
    /// with the ints' bits read as unsigned.
    pub fn pg_locks_ids(self) -> (u32, u32, i16) {
        match self {
            AdvisoryKey::Big(k) => ((k as u64 >> 32) as u32, k as u64 as u32, 1),
            AdvisoryKey::Pair(a, b) => (a as u32, b as u32, 2),
        }
    }
}

/// Which advisory lock function a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `pg_advisory_lock`: held until unlocked or the session ends.
    Session,
    /// `pg_advisory_xact_lock`: held until the transaction ends (call [`Advisory::begin`]).
    Xact,
}

fn function(level: Level, shared: bool, try_: bool) -> String {
    let mut f = String::from("pg_");
    if try_ {
        f.push_str("try_");
    }
    f.push_str("advisory_");
    if level == Level::Xact {
        f.push_str("xact_");
    }
    f.push_str("lock");
    if shared {
        f.push_str("_shared");
    }
    f
}

fn key_sql(function: &str, key: AdvisoryKey) -> String {
    match key {
        AdvisoryKey::Big(_) => format!("SELECT {function}($1)"),
        AdvisoryKey::Pair(..) => format!("SELECT {function}($1, $2)"),
    }
}

fn not_postgres() -> DbFailure {
    DbFailure {
        sqlstate: None,
        number: None,
        message: "not a PostgreSQL connection".into(),
    }
}

/// A value an advisory lock function returns: `void` (the waiting forms) or `boolean`.
trait KeyCallResult: Sized + Send + 'static {
    async fn call(
        c: &mut PgConnection,
        q: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Self, sqlx::Error>;
}

/// Runs `sql` (`SELECT f($1)` or `SELECT f($1, $2)`) with `key` bound.
async fn key_call<T: KeyCallResult>(
    conn: &mut DbConn,
    sql: &str,
    key: AdvisoryKey,
) -> Result<T, DbFailure> {
    let DbConn::Postgres(c) = conn else {
        return Err(not_postgres());
    };
    let q = sqlx::query(sql);
    let q = match key {
        AdvisoryKey::Big(k) => q.bind(k),
        AdvisoryKey::Pair(a, b) => q.bind(a).bind(b),
    };
    T::call(c, q).await.map_err(|e| DbFailure::from_sqlx(&e))
}

impl KeyCallResult for () {
    async fn call(
        c: &mut PgConnection,
        q: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<(), sqlx::Error> {
        q.execute(c).await.map(drop)
    }
}

impl KeyCallResult for bool {
    async fn call(
        c: &mut PgConnection,
        q: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<bool, sqlx::Error> {
        let row = q.fetch_one(c).await?;
        sqlx::Row::try_get(&row, 0)
    }
}

async fn lock_series(conn: &mut DbConn, first: i64, count: i64) -> Result<i64, DbFailure> {
    let DbConn::Postgres(c) = conn else {
        return Err(not_postgres());
    };
    sqlx::query_scalar::<_, i64>(
        "SELECT count(pg_advisory_lock(k)) FROM generate_series($1::bigint, $2::bigint) k",
    )
    .bind(first)
    .bind(first + count - 1)
    .fetch_one(c)
    .await
    .map_err(|e| DbFailure::from_sqlx(&e))
}

/// One PostgreSQL session taking advisory locks. A blocking request ([`Self::lock`]) runs in the
/// session's task; wait for it with [`Self::wait_acquired`].
pub struct Advisory {
    session: Session,
    current: Option<(AdvisoryKey, Pending<()>)>,
}

impl Advisory {
    pub async fn open(conn: PgConnection) -> Result<Advisory> {
        Ok(Advisory {
            session: Session::new(DbConn::Postgres(conn)).await?,
            current: None,
        })
    }

    /// Sends `SELECT pg_advisory[_xact]_lock[_shared](key)` and returns at once (it may wait
    /// behind another session).
    pub fn lock(&mut self, key: AdvisoryKey, level: Level, shared: bool) {
        let sql = key_sql(&function(level, shared, false), key);
        let pending = self.session.submit(move |mut conn| {
            Box::pin(async move {
                let outcome = key_call::<()>(&mut conn, &sql, key).await;
                (conn, outcome)
            })
        });
        self.current = Some((key, pending));
    }

    /// `SELECT pg_try_advisory[_xact]_lock[_shared](key)`: `true` when acquired (never waits).
    pub async fn try_lock(&self, key: AdvisoryKey, level: Level, shared: bool) -> Result<bool> {
        let sql = key_sql(&function(level, shared, true), key);
        self.session
            .run(move |mut conn| {
                Box::pin(async move {
                    let outcome = key_call::<bool>(&mut conn, &sql, key).await;
                    (conn, outcome)
                })
            })
            .await
    }

    /// `SELECT pg_advisory_unlock[_shared](key)`: `true` when this session held it.
    pub async fn unlock(&self, key: AdvisoryKey, shared: bool) -> Result<bool> {
        let f = if shared {
            "pg_advisory_unlock_shared"
        } else {
            "pg_advisory_unlock"
        };
        let sql = key_sql(f, key);
        self.session
            .run(move |mut conn| {
                Box::pin(async move {
                    let outcome = key_call::<bool>(&mut conn, &sql, key).await;
                    (conn, outcome)
                })
            })
            .await
    }

    /// `SELECT pg_advisory_unlock_all()` (session-level locks only).
    pub async fn unlock_all(&self) -> Result<()> {
        self.session.exec("SELECT pg_advisory_unlock_all()").await
    }

    /// Waits at most `timeout` until the last [`Self::lock`] holds its key.
    pub async fn wait_acquired(&mut self, timeout: Duration) -> Result<()> {
        let (key, pending) = self
            .current
            .as_mut()
            .ok_or_else(|| anyhow!("no lock asked for"))?;
        match pending
            .wait(timeout)
            .await
            .with_context(|| format!("advisory lock {key:?}"))?
        {
            Ok(()) => Ok(()),
            Err(e) => bail!("advisory lock {key:?} failed: {e}"),
        }
    }

    /// Whether the last [`Self::lock`] holds its key now.
    pub fn is_acquired(&mut self) -> bool {
        self.current
            .as_mut()
            .is_some_and(|(_, p)| matches!(p.outcome(), Some(Ok(()))))
    }

    /// The error the last [`Self::lock`] ended with (e.g. 40P01 deadlock), if it did.
    pub fn error(&mut self) -> Option<DbFailure> {
        self.current
            .as_mut()
            .and_then(|(_, p)| p.outcome().and_then(|o| o.as_ref().err().cloned()))
    }

    /// `BEGIN` (for transaction-level locks).
    pub async fn begin(&self) -> Result<()> {
        self.session.exec("BEGIN").await
    }

    /// `COMMIT`: releases the transaction-level locks (after the statements sent before end).
    pub async fn commit(&self) -> Result<()> {
        self.session.exec("COMMIT").await
    }

    /// `ROLLBACK`.
    pub async fn rollback(&self) -> Result<()> {
        self.session.exec("ROLLBACK").await
    }

    /// Takes `count` session-level exclusive locks on the bigint keys `first..first+count` in
    /// one statement (`SELECT count(pg_advisory_lock(k)) FROM generate_series(…) k`), waiting
    /// at most `timeout`. The shared lock table holds about `max_locks_per_transaction ×
    /// max_connections` locks (6 400 by default); past it the server answers "out of shared
    /// memory", so start it with a larger `max_locks_per_transaction` for big counts.
    pub async fn hold_many(&self, first: i64, count: i64, timeout: Duration) -> Result<()> {
        let mut pending = self.session.submit(move |mut conn| {
            Box::pin(async move {
                let outcome = lock_series(&mut conn, first, count).await;
                (conn, outcome)
            })
        });
        pending.wait(timeout).await?;
        let got = pending.take()?;
        if got != count {
            bail!("locked {got} of {count} keys");
        }
        Ok(())
    }

    /// Runs `sql` as this session's next statement.
    pub async fn exec(&self, sql: &str) -> Result<()> {
        self.session.exec(sql).await
    }

    /// `pg_backend_pid()` of this session (`pg_locks.pid`).
    pub fn pid(&self) -> i64 {
        self.session.connection_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_locks_ids_of_keys() {
        assert_eq!(AdvisoryKey::Big(42).pg_locks_ids(), (0, 42, 1));
        assert_eq!(AdvisoryKey::Big(-1).pg_locks_ids(), (u32::MAX, u32::MAX, 1));
        assert_eq!(AdvisoryKey::Big(1 << 32 | 5).pg_locks_ids(), (1, 5, 1));
        assert_eq!(
            AdvisoryKey::Pair(-2, 7).pg_locks_ids(),
            (u32::MAX - 1, 7, 2)
        );
        assert_eq!(
            function(Level::Xact, true, true),
            "pg_try_advisory_xact_lock_shared"
        );
    }
}
