//! Database lock clients shared by MariaDB ([`super::mysql`]) and PostgreSQL
//! ([`super::postgres`]): the seed lock table, ShedLock's JDBC table, Spring Integration's
//! `JdbcLockRegistry` ([`SpringJdbcLock`]), and `SELECT … FOR UPDATE` on a lock row
//! ([`RowLocker`]), plus the machinery the blocking clients of both modules use
//! ([`Session`], [`Pending`]).
//!
//! This module owns client connections only, never servers. Every client holds its own sqlx
//! connection (not a pool), so each is one server-side session an observer can tell apart by
//! its connection id (`CONNECTION_ID()` / `pg_backend_pid()`). A client whose statement can
//! block (a row lock, `GET_LOCK`, an advisory lock) runs its statements in a task of its own
//! ([`Session`]): the test starts the statement, then waits for its outcome with a bound
//! ([`Pending::wait`]) while the statement is still blocked in the server. Nothing here waits
//! without a bound. Dropping a client aborts its task and closes its connection; a statement
//! still blocked in the server is only noticed as gone when the server next writes to the
//! socket (MariaDB: when the lock wait ends; PostgreSQL: likewise, unless
//! `client_connection_check_interval` is set), so tests that need a waiter gone at once end
//! its wait first (commit the holder, or kill the connection from the server).

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, ensure, Context, Result};
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Bound of one statement that is not expected to block (DDL, inserts, commits).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);

/// A future borrowed from a connection, as the jobs of a [`Session`] return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which server a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    MySql,
    Postgres,
}

/// One client connection to either server.
pub enum DbConn {
    MySql(MySqlConnection),
    Postgres(PgConnection),
}

impl DbConn {
    pub fn dialect(&self) -> Dialect {
        match self {
            DbConn::MySql(_) => Dialect::MySql,
            DbConn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The server's id of this session: `CONNECTION_ID()` (MariaDB; `PROCESSLIST.ID`,
    /// `INNODB_TRX.trx_mysql_thread_id`, `METADATA_LOCK_INFO.THREAD_ID`) or `pg_backend_pid()`
    /// (PostgreSQL; `pg_locks.pid`, `pg_stat_activity.pid`).
    pub async fn connection_id(&mut self) -> Result<i64> {
        bounded(async {
            Ok(match self {
                DbConn::MySql(c) => {
                    // CONNECTION_ID() is BIGINT UNSIGNED.
                    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
                        .fetch_one(c)
                        .await?;
                    i64::try_from(id)?
                }
                DbConn::Postgres(c) => {
                    let id: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                        .fetch_one(c)
                        .await?;
                    i64::from(id)
                }
            })
        })
        .await
        .context("read the connection id")
    }

    /// Runs `sql` (one or more statements, no parameters, text protocol), bounded by
    /// [`STATEMENT_TIMEOUT`].
    pub async fn exec(&mut self, sql: &str) -> Result<()> {
        bounded(async {
            match self {
                DbConn::MySql(c) => sqlx::raw_sql(sql).execute(c).await.map(drop)?,
                DbConn::Postgres(c) => sqlx::raw_sql(sql).execute(c).await.map(drop)?,
            }
            Ok(())
        })
        .await
        .with_context(|| format!("run {sql:?}"))
    }

    /// Whether `sql` with the one text parameter `arg` returns a row (no bound).
    pub async fn fetch_exists(&mut self, sql: &str, arg: &str) -> Result<bool, DbFailure> {
        match self {
            DbConn::MySql(c) => sqlx::query(sql)
                .bind(arg)
                .fetch_optional(c)
                .await
                .map(|r| r.is_some()),
            DbConn::Postgres(c) => sqlx::query(sql)
                .bind(arg)
                .fetch_optional(c)
                .await
                .map(|r| r.is_some()),
        }
        .map_err(|e| DbFailure::from_sqlx(&e))
    }

    /// Runs `sql` (text protocol, no parameters, no bound), keeping the server's error.
    pub async fn exec_raw(&mut self, sql: &str) -> Result<(), DbFailure> {
        // A `&str` without arguments goes over the text (MariaDB) / simple query (PostgreSQL)
        // protocol, as `raw_sql` would; `raw_sql`'s future is not `Send` enough for a session.
        match self {
            DbConn::MySql(c) => sqlx::Executor::execute(&mut *c, sql).await.map(drop),
            DbConn::Postgres(c) => sqlx::Executor::execute(&mut *c, sql).await.map(drop),
        }
        .map_err(|e| DbFailure::from_sqlx(&e))
    }

    /// Closes the connection politely (bounded).
    pub async fn close(self) -> Result<()> {
        bounded(async {
            match self {
                DbConn::MySql(c) => c.close().await?,
                DbConn::Postgres(c) => c.close().await?,
            }
            Ok(())
        })
        .await
    }
}

/// `work`, failing after [`STATEMENT_TIMEOUT`].
pub async fn bounded<T>(work: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(STATEMENT_TIMEOUT, work)
        .await
        .map_err(|_| anyhow!("no answer within {STATEMENT_TIMEOUT:?}"))?
}

/// `sql` written with `?` placeholders, as `dialect` wants them (`$1`, `$2`, … for PostgreSQL).
/// The statements here have no `?` inside string literals.
pub fn placeholders(dialect: Dialect, sql: &str) -> String {
    match dialect {
        Dialect::MySql => sql.to_string(),
        Dialect::Postgres => {
            let mut out = String::with_capacity(sql.len() + 8);
            let mut n = 0;
            for c in sql.chars() {
                if c == '?' {
                    n += 1;
                    out.push('$');
                    out.push_str(&n.to_string());
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors the server returned

/// An error a statement ended with, kept so a test can assert what the server said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbFailure {
    /// The SQLSTATE (`HY000` for MariaDB's 1205 and 1213 is `40001`; PostgreSQL's deadlock is
    /// `40P01`), `None` for errors that are not the server's (I/O, protocol).
    pub sqlstate: Option<String>,
    /// MariaDB's error number (1205 lock wait timeout, 1213 deadlock, 1062 duplicate key).
    pub number: Option<u16>,
    pub message: String,
}

impl DbFailure {
    pub fn from_sqlx(e: &sqlx::Error) -> DbFailure {
        match e {
            sqlx::Error::Database(db) => DbFailure {
                sqlstate: db.code().map(|c| c.into_owned()),
                number: db
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .map(|m| m.number()),
                message: db.message().to_string(),
            },
            other => DbFailure {
                sqlstate: None,
                number: None,
                message: other.to_string(),
            },
        }
    }

    /// MariaDB 1205 (`innodb_lock_wait_timeout` passed) or PostgreSQL 55P03 (`lock_timeout`).
    pub fn is_lock_wait_timeout(&self) -> bool {
        self.number == Some(1205) || self.sqlstate.as_deref() == Some("55P03")
    }

    /// MariaDB 1213 or PostgreSQL 40P01: the server chose this transaction as a deadlock victim.
    pub fn is_deadlock(&self) -> bool {
        self.number == Some(1213) || self.sqlstate.as_deref() == Some("40P01")
    }

    /// MariaDB 1062 or PostgreSQL 23505.
    pub fn is_duplicate_key(&self) -> bool {
        self.number == Some(1062) || self.sqlstate.as_deref() == Some("23505")
    }
}

impl fmt::Display for DbFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = self.number {
            write!(f, "({n}) ")?;
        }
        if let Some(s) = &self.sqlstate {
            write!(f, "[{s}] ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for DbFailure {}

// ---------------------------------------------------------------------------------------------
// A connection run by its own task

type Job = Box<dyn FnOnce(DbConn) -> BoxFuture<'static, DbConn> + Send>;

/// A statement a [`Session`] runs: it gets the connection and hands it back with its outcome.
pub type Step<T> = BoxFuture<'static, (DbConn, Result<T, DbFailure>)>;

/// One connection owned by a task that runs the jobs it is sent, one at a time, in order. A
/// job that blocks in the server (a lock wait) holds up the jobs sent after it, exactly as
/// the statements of one real session would queue.
pub struct Session {
    id: i64,
    dialect: Dialect,
    jobs: mpsc::UnboundedSender<Job>,
    task: JoinHandle<()>,
}

impl Session {
    /// Takes over `conn` (reading its connection id first).
    pub async fn new(mut conn: DbConn) -> Result<Session> {
        let id = conn.connection_id().await?;
        let dialect = conn.dialect();
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        let task = tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                conn = job(conn).await;
            }
            let _ = conn.close().await;
        });
        Ok(Session {
            id,
            dialect,
            jobs,
            task,
        })
    }

    /// The server's id of this session (see [`DbConn::connection_id`]).
    pub fn connection_id(&self) -> i64 {
        self.id
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Queues `job` behind the jobs sent before; its outcome arrives in the returned
    /// [`Pending`].
    pub fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce(DbConn) -> Step<T> + Send + 'static,
    ) -> Pending<T> {
        let (tx, rx) = oneshot::channel();
        let boxed: Job = Box::new(move |conn| {
            Box::pin(async move {
                let (conn, outcome) = job(conn).await;
                let _ = tx.send(outcome);
                conn
            })
        });
        let rx = if self.jobs.send(boxed).is_ok() {
            Some(rx)
        } else {
            None
        };
        Pending {
            rx,
            outcome: None,
            what: "session",
        }
    }

    /// Runs `job` after the jobs sent before and waits for it (bounded by
    /// [`STATEMENT_TIMEOUT`]); a server error is returned as the error.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce(DbConn) -> Step<T> + Send + 'static,
    ) -> Result<T> {
        let mut pending = self.submit(job);
        pending.wait(STATEMENT_TIMEOUT).await?;
        pending.take()
    }

    /// Runs `sql` (no parameters) as the session's next statement.
    pub async fn exec(&self, sql: &str) -> Result<()> {
        let mut pending = self.start(sql);
        pending.wait(STATEMENT_TIMEOUT).await?;
        pending.take().with_context(|| format!("run {sql:?}"))
    }

    /// Queues `sql` (no parameters) as the session's next statement without waiting for it
    /// (it may block on a lock in the server): its outcome arrives in the returned [`Pending`].
    pub fn start(&self, sql: &str) -> Pending<()> {
        let sql = sql.to_string();
        self.submit(move |mut c| {
            Box::pin(async move {
                let r = c.exec_raw(&sql).await;
                (c, r)
            })
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Aborting drops the connection: the server rolls back what the session left open.
        self.task.abort();
    }
}

/// The outcome of a statement a [`Session`] runs, once it has one.
pub struct Pending<T> {
    rx: Option<oneshot::Receiver<Result<T, DbFailure>>>,
    outcome: Option<Result<T, DbFailure>>,
    what: &'static str,
}

impl<T> Pending<T> {
    /// A `Pending` that already has its outcome.
    pub fn ready(outcome: Result<T, DbFailure>) -> Pending<T> {
        Pending {
            rx: None,
            outcome: Some(outcome),
            what: "statement",
        }
    }

    fn poll_now(&mut self) {
        if self.outcome.is_some() {
            return;
        }
        if let Some(rx) = self.rx.as_mut() {
            match rx.try_recv() {
                Ok(outcome) => {
                    self.outcome = Some(outcome);
                    self.rx = None;
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
                Err(oneshot::error::TryRecvError::Closed) => self.rx = None,
            }
        }
    }

    /// Whether the statement has ended (with a result or an error).
    pub fn is_done(&mut self) -> bool {
        self.poll_now();
        self.outcome.is_some()
    }

    /// The outcome, if the statement has ended.
    pub fn outcome(&mut self) -> Option<&Result<T, DbFailure>> {
        self.poll_now();
        self.outcome.as_ref()
    }

    /// Waits at most `timeout` for the statement to end; `Err` when it has not (it is still
    /// blocked, or its session is gone). The outcome itself may be a [`DbFailure`].
    pub async fn wait(&mut self, timeout: Duration) -> Result<&Result<T, DbFailure>> {
        if self.outcome.is_none() {
            let rx = self
                .rx
                .as_mut()
                .ok_or_else(|| anyhow!("the {} ended without an answer", self.what))?;
            match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(outcome)) => {
                    self.outcome = Some(outcome);
                    self.rx = None;
                }
                Ok(Err(_)) => {
                    self.rx = None;
                    bail!("the {} ended without an answer", self.what)
                }
                Err(_) => bail!("the statement is still running after {timeout:?}"),
            }
        }
        self.outcome.as_ref().ok_or_else(|| anyhow!("no outcome"))
    }

    /// Takes the outcome of a statement that has ended, a server error as the error.
    pub fn take(&mut self) -> Result<T> {
        self.poll_now();
        match self.outcome.take() {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(e.into()),
            None => bail!("the statement has not ended"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lock rows (Quartz QRTZ_LOCKS style)

/// `CREATE TABLE <table>(name VARCHAR(64) PRIMARY KEY)` (InnoDB on MariaDB) and one row per
/// name, the rows `SELECT … FOR UPDATE` locks. Idempotent.
pub async fn create_lock_rows(conn: &mut DbConn, table: &str, names: &[&str]) -> Result<()> {
    let engine = match conn.dialect() {
        Dialect::MySql => " ENGINE=InnoDB",
        Dialect::Postgres => "",
    };
    conn.exec(&format!(
        "CREATE TABLE IF NOT EXISTS {table}(name VARCHAR(64) PRIMARY KEY){engine}"
    ))
    .await?;
    for name in names {
        let sql = match conn.dialect() {
            Dialect::MySql => format!("INSERT IGNORE INTO {table}(name) VALUES ('{name}')"),
            Dialect::Postgres => {
                format!("INSERT INTO {table}(name) VALUES ('{name}') ON CONFLICT DO NOTHING")
            }
        };
        conn.exec(&sql).await?;
    }
    Ok(())
}

/// One transaction that locks rows of a lock table with `SELECT name FROM <table> WHERE
/// name = ? FOR UPDATE`, the way Quartz's `StdRowLockSemaphore` and hand-written job locks do.
/// The transaction stays open (holding every row it locked) until [`Self::commit`] or
/// [`Self::rollback`]; dropping the locker closes its connection, which rolls it back.
pub struct RowLocker {
    session: Session,
    table: String,
    /// The row asked for last and the outcome of its `FOR UPDATE`.
    current: Option<(String, Pending<()>)>,
    held: Vec<String>,
}

impl RowLocker {
    /// Opens a transaction on `conn` (`BEGIN`). With `lock_wait_timeout_secs`, a blocked `FOR
    /// UPDATE` gives up after that long (MariaDB `SET SESSION innodb_lock_wait_timeout`,
    /// error 1205; PostgreSQL `SET lock_timeout`, SQLSTATE 55P03); otherwise the server's
    /// setting applies.
    pub async fn begin(
        conn: DbConn,
        table: &str,
        lock_wait_timeout_secs: Option<u64>,
    ) -> Result<RowLocker> {
        let session = Session::new(conn).await?;
        if let Some(secs) = lock_wait_timeout_secs {
            session
                .exec(&match session.dialect() {
                    Dialect::MySql => format!("SET SESSION innodb_lock_wait_timeout = {secs}"),
                    Dialect::Postgres => format!("SET lock_timeout = '{secs}s'"),
                })
                .await?;
        }
        session.exec("BEGIN").await?;
        Ok(RowLocker {
            session,
            table: table.to_string(),
            current: None,
            held: Vec::new(),
        })
    }

    /// [`Self::begin`], then [`Self::lock`] of `name`.
    pub async fn start(conn: DbConn, table: &str, name: &str) -> Result<RowLocker> {
        let mut locker = Self::begin(conn, table, None).await?;
        locker.lock(name);
        Ok(locker)
    }

    /// Sends `SELECT name FROM <table> WHERE name = ? FOR UPDATE` for `name` and returns at
    /// once: the statement may be blocked behind another transaction; see
    /// [`Self::wait_acquired`].
    pub fn lock(&mut self, name: &str) {
        self.settle();
        let sql = placeholders(
            self.session.dialect(),
            &format!("SELECT name FROM {} WHERE name = ? FOR UPDATE", self.table),
        );
        let key = name.to_string();
        let pending = self.session.submit(move |mut c| {
            Box::pin(async move {
                let found = c.fetch_exists(&sql, &key).await;
                let outcome = match found {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(DbFailure {
                        sqlstate: None,
                        number: None,
                        message: format!("no lock row {key:?}"),
                    }),
                    Err(e) => Err(e),
                };
                (c, outcome)
            })
        });
        self.current = Some((name.to_string(), pending));
    }

    /// Moves a finished, successful `FOR UPDATE` into `held`.
    fn settle(&mut self) {
        if let Some((name, pending)) = self.current.as_mut() {
            if matches!(pending.outcome(), Some(Ok(()))) && !self.held.contains(name) {
                self.held.push(name.clone());
            }
        }
    }

    /// Waits at most `timeout` until the last [`Self::lock`] holds its row. Fails if it is
    /// still blocked then, or if the server ended it with an error (see [`Self::error`]).
    pub async fn wait_acquired(&mut self, timeout: Duration) -> Result<()> {
        let (name, pending) = self
            .current
            .as_mut()
            .ok_or_else(|| anyhow!("no row asked for"))?;
        let outcome = pending
            .wait(timeout)
            .await
            .with_context(|| format!("FOR UPDATE of {name:?}"))?;
        if let Err(e) = outcome {
            bail!("FOR UPDATE of {name:?} failed: {e}");
        }
        self.settle();
        Ok(())
    }

    /// Whether the last [`Self::lock`] holds its row now.
    pub fn is_acquired(&mut self) -> bool {
        self.settle();
        self.current
            .as_mut()
            .is_some_and(|(_, p)| matches!(p.outcome(), Some(Ok(()))))
    }

    /// The error the last `FOR UPDATE` ended with (lock wait timeout, deadlock), if it did.
    pub fn error(&mut self) -> Option<DbFailure> {
        self.current
            .as_mut()
            .and_then(|(_, p)| p.outcome().and_then(|o| o.as_ref().err().cloned()))
    }

    /// Rows this transaction holds (as far as it knows: after a deadlock MariaDB has rolled the
    /// whole transaction back, PostgreSQL keeps the transaction aborted until it ends).
    pub fn held(&mut self) -> Vec<String> {
        self.settle();
        self.held.clone()
    }

    /// The server's id of this client's session.
    pub fn connection_id(&self) -> i64 {
        self.session.connection_id()
    }

    /// `COMMIT` (after the statements sent before it end; bounded).
    pub async fn commit(self) -> Result<()> {
        self.session.exec("COMMIT").await
    }

    /// `ROLLBACK` (after the statements sent before it end; bounded).
    pub async fn rollback(self) -> Result<()> {
        self.session.exec("ROLLBACK").await
    }
}

// ---------------------------------------------------------------------------------------------
// The seed lock table

/// The seed's lock table `database_lock(id, resource UNIQUE, description)`: inserting a row
/// takes the lock (a duplicate key means somebody else holds it), deleting it releases it.
/// Nothing blocks, so there are no waiters to see on the server: contenders retry the insert.
pub struct LockTable {
    conn: DbConn,
    id: i64,
}

impl LockTable {
    /// `CREATE TABLE IF NOT EXISTS database_lock(...)` on `conn`.
    pub async fn create(conn: &mut DbConn) -> Result<()> {
        conn.exec(match conn.dialect() {
            Dialect::MySql => {
                "CREATE TABLE IF NOT EXISTS database_lock(id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 resource VARCHAR(255) UNIQUE, description VARCHAR(255)) ENGINE=InnoDB"
            }
            Dialect::Postgres => {
                "CREATE TABLE IF NOT EXISTS database_lock(id BIGSERIAL PRIMARY KEY, \
                 resource VARCHAR(255) UNIQUE, description VARCHAR(255))"
            }
        })
        .await
    }

    pub async fn new(mut conn: DbConn) -> Result<LockTable> {
        let id = conn.connection_id().await?;
        Ok(LockTable { conn, id })
    }

    pub fn connection_id(&self) -> i64 {
        self.id
    }

    /// `INSERT INTO database_lock(resource, description) VALUES (?, ?)` (autocommit): `true` when
    /// inserted, `false` on a duplicate key.
    pub async fn try_lock(&mut self, resource: &str, owner: &str) -> Result<bool> {
        let sql = placeholders(
            self.conn.dialect(),
            "INSERT INTO database_lock(resource, description) VALUES (?, ?)",
        );
        let result = bounded(async {
            Ok(match &mut self.conn {
                DbConn::MySql(c) => sqlx::query(&sql)
                    .bind(resource)
                    .bind(owner)
                    .execute(c)
                    .await
                    .map(drop),
                DbConn::Postgres(c) => sqlx::query(&sql)
                    .bind(resource)
                    .bind(owner)
                    .execute(c)
                    .await
                    .map(drop),
            })
        })
        .await?;
        match result {
            Ok(()) => Ok(true),
            Err(e) if DbFailure::from_sqlx(&e).is_duplicate_key() => Ok(false),
            Err(e) => Err(e).context("insert into database_lock"),
        }
    }

    /// `DELETE FROM database_lock WHERE resource = ? AND description = ?`: `true` when a row
    /// was deleted (the owner held it).
    pub async fn unlock(&mut self, resource: &str, owner: &str) -> Result<bool> {
        let sql = placeholders(
            self.conn.dialect(),
            "DELETE FROM database_lock WHERE resource = ? AND description = ?",
        );
        let affected = bounded(async {
            Ok(match &mut self.conn {
                DbConn::MySql(c) => sqlx::query(&sql)
                    .bind(resource)
                    .bind(owner)
                    .execute(c)
                    .await?
                    .rows_affected(),
                DbConn::Postgres(c) => sqlx::query(&sql)
                    .bind(resource)
                    .bind(owner)
                    .execute(c)
                    .await?
                    .rows_affected(),
            })
        })
        .await?;
        Ok(affected > 0)
    }
}

// ---------------------------------------------------------------------------------------------
// ShedLock's JDBC table

/// ShedLock's `JdbcTemplateLockProvider` (default, client-time mode) on its table
/// `shedlock(name, lock_until, locked_at, locked_by)`.
///
/// Followed: ShedLock master at commit 2495b1406d85323b8deadbe75d7a5dd3e8b8e844 (7.9.0 + 14,
/// August 2026): `providers/sql/shedlock-sql-support/.../SqlStatementsSource.java` (statements
/// and parameters), `PostgresSqlStatementsSource.java` (insert = upsert guarded on
/// `lock_until <= :now`), `providers/jdbc/shedlock-provider-jdbc-template/.../
/// JdbcTemplateStorageAccessor.java` (a duplicate key on insert = not locked) and
/// `shedlock-core/.../StorageBasedLockProvider.java` (insert only while the name is not known
/// to exist, then the guarded update) and `LockConfiguration.getUnlockTime()` (max(now,
/// createdAt + lockAtLeastFor)). Since 7.x the unlock statement also checks `locked_by`.
///
/// Times are the client's clock in UTC, bound as text `YYYY-MM-DD HH:MM:SS.mmm` (the
/// workspace's sqlx has no date-time types; sqlx sets MariaDB sessions to `time_zone =
/// '+00:00'`): MariaDB converts the text itself, PostgreSQL gets `CAST(? AS TIMESTAMP)` — the
/// only change to ShedLock's SQL, which JDBC binds as `Timestamp`.
pub struct ShedLock {
    conn: DbConn,
    locked_by: String,
    /// Names this client knows have a row (ShedLock's `LockRecordRegistry`).
    known: HashSet<String>,
    /// `createdAt` of the lock each name is held under (for `lockAtLeastFor`).
    created: std::collections::HashMap<String, SystemTime>,
}

impl ShedLock {
    /// `CREATE TABLE IF NOT EXISTS shedlock(...)` as ShedLock's README gives it.
    pub async fn create(conn: &mut DbConn) -> Result<()> {
        conn.exec(match conn.dialect() {
            Dialect::MySql => {
                "CREATE TABLE IF NOT EXISTS shedlock(name VARCHAR(64) PRIMARY KEY, \
                 lock_until TIMESTAMP(3) NULL, locked_at TIMESTAMP(3) NULL, \
                 locked_by VARCHAR(255)) ENGINE=InnoDB"
            }
            Dialect::Postgres => {
                "CREATE TABLE IF NOT EXISTS shedlock(name VARCHAR(64) PRIMARY KEY, \
                 lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), locked_by VARCHAR(255))"
            }
        })
        .await
    }

    /// A client writing `locked_by` (ShedLock's default is the host name).
    pub fn new(conn: DbConn, locked_by: &str) -> ShedLock {
        ShedLock {
            conn,
            locked_by: locked_by.to_string(),
            known: HashSet::new(),
            created: Default::default(),
        }
    }

    /// `StorageBasedLockProvider.doLock`: insert the row unless it is known to exist, else
    /// update it where `lock_until <= now`. `true` when this client now holds `name` until now
    /// + `lock_at_most_for`.
    pub async fn lock(&mut self, name: &str, lock_at_most_for: Duration) -> Result<bool> {
        let created = SystemTime::now();
        let now = sql_time(created);
        let until = sql_time(created + lock_at_most_for);
        let dialect = self.conn.dialect();
        let ts = |p: &str| match dialect {
            Dialect::MySql => p.to_string(),
            Dialect::Postgres => format!("CAST({p} AS TIMESTAMP)"),
        };
        if !self.known.contains(name) {
            let mut insert = format!(
                "INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES(?, {}, {}, ?)",
                ts("?"),
                ts("?")
            );
            let mut binds = vec![
                name.to_string(),
                until.clone(),
                now.clone(),
                self.locked_by.clone(),
            ];
            if dialect == Dialect::Postgres {
                insert.push_str(&format!(
                    " ON CONFLICT (name) DO UPDATE SET lock_until = {}, locked_at = {}, \
                     locked_by = ? WHERE shedlock.lock_until <= {}",
                    ts("?"),
                    ts("?"),
                    ts("?")
                ));
                binds.extend([
                    until.clone(),
                    now.clone(),
                    self.locked_by.clone(),
                    now.clone(),
                ]);
            }
            let inserted = match self.execute(&insert, &binds).await? {
                Ok(n) => n > 0,
                Err(e) if e.is_duplicate_key() => false,
                Err(e) => bail!("shedlock insert: {e}"),
            };
            self.known.insert(name.to_string());
            if inserted {
                self.created.insert(name.to_string(), created);
                return Ok(true);
            }
        }
        let update = format!(
            "UPDATE shedlock SET lock_until = {}, locked_at = {}, locked_by = ? \
             WHERE name = ? AND lock_until <= {}",
            ts("?"),
            ts("?"),
            ts("?")
        );
        let binds = [
            until,
            now.clone(),
            self.locked_by.clone(),
            name.to_string(),
            now,
        ];
        let updated = self
            .execute(&update, &binds)
            .await?
            .map_err(|e| anyhow!("shedlock update: {e}"))?
            > 0;
        if updated {
            self.created.insert(name.to_string(), created);
        }
        Ok(updated)
    }

    /// `UPDATE shedlock SET lock_until = ? WHERE name = ? AND locked_by = ?` with max(now,
    /// createdAt + `lock_at_least_for`): the row stays, and nobody can take `name` before that
    /// time. `true` when a row was updated.
    pub async fn unlock(&mut self, name: &str, lock_at_least_for: Duration) -> Result<bool> {
        let now = SystemTime::now();
        let created = self.created.remove(name).unwrap_or(now);
        let unlock_time = (created + lock_at_least_for).max(now);
        let ts = match self.conn.dialect() {
            Dialect::MySql => "?",
            Dialect::Postgres => "CAST(? AS TIMESTAMP)",
        };
        let sql = format!("UPDATE shedlock SET lock_until = {ts} WHERE name = ? AND locked_by = ?");
        let binds = [
            sql_time(unlock_time),
            name.to_string(),
            self.locked_by.clone(),
        ];
        Ok(self
            .execute(&sql, &binds)
            .await?
            .map_err(|e| anyhow!("shedlock unlock: {e}"))?
            > 0)
    }

    /// Runs `sql` (with `?` placeholders) with text `binds`; rows affected, or the server's
    /// error.
    async fn execute(&mut self, sql: &str, binds: &[String]) -> Result<Result<u64, DbFailure>> {
        let sql = placeholders(self.conn.dialect(), sql);
        bounded(async {
            Ok(match &mut self.conn {
                DbConn::MySql(c) => {
                    let mut q = sqlx::query(&sql);
                    for b in binds {
                        q = q.bind(b);
                    }
                    q.execute(c).await.map(|r| r.rows_affected())
                }
                DbConn::Postgres(c) => {
                    let mut q = sqlx::query(&sql);
                    for b in binds {
                        q = q.bind(b);
                    }
                    q.execute(c).await.map(|r| r.rows_affected())
                }
            }
            .map_err(|e| DbFailure::from_sqlx(&e)))
        })
        .await
    }

    /// `(lock_until, locked_at, locked_by)` of `name` as text (`YYYY-MM-DD HH:MM:SS.mmm`), as an
    /// observer reads it.
    pub async fn row(&mut self, name: &str) -> Result<Option<(String, String, String)>> {
        let sql = match self.conn.dialect() {
            Dialect::MySql => {
                "SELECT CAST(lock_until AS CHAR), CAST(locked_at AS CHAR), locked_by \
                 FROM shedlock WHERE name = ?"
            }
            Dialect::Postgres => {
                "SELECT lock_until::text, locked_at::text, locked_by FROM shedlock WHERE name = $1"
            }
        };
        bounded(async {
            let row = match &mut self.conn {
                DbConn::MySql(c) => sqlx::query(sql)
                    .bind(name)
                    .fetch_optional(c)
                    .await?
                    .map(|r| (r.get(0), r.get(1), r.get(2))),
                DbConn::Postgres(c) => sqlx::query(sql)
                    .bind(name)
                    .fetch_optional(c)
                    .await?
                    .map(|r| (r.get(0), r.get(1), r.get(2))),
            };
            Ok(row)
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// Spring Integration's JdbcLockRegistry

/// Spring Integration's `JdbcLockRegistry` over a `DefaultLockRepository` (7.x), one registry
/// = one repository = one `CLIENT_ID`, on its table `<prefix>LOCK`.
///
/// Followed: spring-integration main at commit f369e899dd3007756e4da49273e201b85afa5cc7
/// (7.2.0-SNAPSHOT, August 2026): `spring-integration-jdbc/src/main/resources/org/
/// springframework/integration/jdbc/schema-{postgresql,mysql}.sql` (the DDL),
/// `…/jdbc/lock/DefaultLockRepository.java` (every statement and its arguments: `acquire` =
/// the UPDATE, then the INSERT if it changed nothing, in one `REQUIRES_NEW` transaction at
/// `READ_COMMITTED`, a `DataIntegrityViolationException` on the INSERT meaning "not acquired";
/// `renew`, `delete` and `close` each in a `REQUIRES_NEW` transaction of their own; times
/// `LocalDateTime.now(ZoneOffset.UTC)`), `…/jdbc/lock/JdbcLockRegistry.java` (`pathFor` =
/// `UUIDConverter.getUUID(name).toString()`; `tryLock(wait, ttl)` tries, then sleeps
/// `idleBetweenTries` (100 ms) until the wait is over; `unlock` throws
/// `ConcurrentModificationException` unless its DELETE removed exactly one row) and
/// `spring-integration-core/…/util/UUIDConverter.java`.
///
/// Times are the client's clock in UTC, bound as text `YYYY-MM-DD HH:MM:SS.ffffff` (the
/// workspace's sqlx has no date-time types): MariaDB converts the text itself, PostgreSQL gets
/// `CAST(? AS TIMESTAMP)` — the only change to Spring's SQL, which JDBC binds as
/// `LocalDateTime`. The JVM's clock has microseconds, so do these times.
pub struct SpringJdbcLock {
    conn: DbConn,
    prefix: String,
    region: String,
    client_id: String,
}

/// `ConcurrentModificationException`'s message in `JdbcLockRegistry.JdbcLock.unlock`.
pub const SPRING_UNLOCK_LOST: &str = "Lock was released in the store due to expiration. The integrity of data protected by this lock may have been compromised.";

/// Spring's idle time between two tries of a waiting `tryLock` (`DEFAULT_IDLE`).
pub const SPRING_IDLE: Duration = Duration::from_millis(100);

impl SpringJdbcLock {
    /// `CREATE TABLE <prefix>LOCK (...)` exactly as Spring's schema scripts give it (unquoted
    /// upper-case names: PostgreSQL folds them to lower case, MariaDB keeps them).
    pub async fn create(conn: &mut DbConn, prefix: &str) -> Result<()> {
        let (stamp, engine) = match conn.dialect() {
            Dialect::MySql => ("DATETIME(6)", " ENGINE=InnoDB"),
            Dialect::Postgres => ("TIMESTAMP", ""),
        };
        conn.exec(&format!(
            "CREATE TABLE {prefix}LOCK  (\n\
             \tLOCK_KEY CHAR(36) NOT NULL,\n\
             \tREGION VARCHAR(100) NOT NULL,\n\
             \tCLIENT_ID CHAR(36),\n\
             \tCREATED_DATE {stamp} NOT NULL,\n\
             \tEXPIRED_AFTER {stamp} NOT NULL,\n\
             \tconstraint {prefix}LOCK_PK primary key (LOCK_KEY, REGION)\n\
             ){engine}"
        ))
        .await
    }

    /// A registry with table prefix `INT_`, region `DEFAULT` and a random `CLIENT_ID`
    /// (`new DefaultLockRepository(dataSource)`).
    pub fn new(conn: DbConn) -> SpringJdbcLock {
        Self::with_id(conn, &uuid::Uuid::new_v4().to_string())
    }

    /// A registry whose repository was given `client_id` (`new DefaultLockRepository(ds, id)`).
    pub fn with_id(conn: DbConn, client_id: &str) -> SpringJdbcLock {
        SpringJdbcLock {
            conn,
            prefix: "INT_".into(),
            region: "DEFAULT".into(),
            client_id: client_id.to_string(),
        }
    }

    /// `setRegion(region)`.
    pub fn region(mut self, region: &str) -> SpringJdbcLock {
        self.region = region.to_string();
        self
    }

    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// `JdbcLockRegistry.pathFor(name)`: the `LOCK_KEY` of lock `name`.
    pub fn path_for(name: &str) -> String {
        spring_uuid(name)
    }

    /// `DefaultLockRepository.acquire(pathFor(name), ttl)` (one `doLock`): `true` when this
    /// registry holds `name` until now + `ttl`.
    pub async fn acquire(&mut self, name: &str, ttl: Duration) -> Result<bool> {
        let lock = Self::path_for(name);
        let begin = match self.conn.dialect() {
            Dialect::MySql => {
                // What Connector/J does for a transaction at READ_COMMITTED: the level for the
                // next transaction, then autocommit off.
                self.conn
                    .exec("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
                "START TRANSACTION"
            }
            Dialect::Postgres => "BEGIN ISOLATION LEVEL READ COMMITTED",
        };
        self.conn.exec(begin).await?;
        let now = SystemTime::now();
        let update = format!(
            "UPDATE {}LOCK\nSET CLIENT_ID=?, EXPIRED_AFTER={}\nWHERE REGION=? AND LOCK_KEY=? AND (CLIENT_ID=? OR EXPIRED_AFTER<{})\n",
            self.prefix,
            self.ts(),
            self.ts()
        );
        let binds = [
            self.client_id.clone(),
            sql_time_us(now + ttl),
            self.region.clone(),
            lock.clone(),
            self.client_id.clone(),
            sql_time_us(now),
        ];
        match execute_text(&mut self.conn, &update, &binds).await? {
            Ok(n) if n > 0 => {
                self.conn.exec("COMMIT").await?;
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) => {
                self.conn.exec("ROLLBACK").await?;
                bail!("spring acquire update: {e}");
            }
        }
        let now = SystemTime::now();
        let insert = format!(
            "INSERT INTO {}LOCK (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER)\nVALUES (?, ?, ?, {}, {})\n",
            self.prefix,
            self.ts(),
            self.ts()
        );
        let binds = [
            self.region.clone(),
            lock,
            self.client_id.clone(),
            sql_time_us(now),
            sql_time_us(now + ttl),
        ];
        match execute_text(&mut self.conn, &insert, &binds).await? {
            Ok(n) => {
                self.conn.exec("COMMIT").await?;
                Ok(n > 0)
            }
            // DataIntegrityViolationException: somebody else's row. On PostgreSQL the
            // transaction is aborted; its commit rolls back.
            Err(e) if e.is_duplicate_key() => {
                self.conn.exec("ROLLBACK").await?;
                Ok(false)
            }
            Err(e) => {
                self.conn.exec("ROLLBACK").await?;
                bail!("spring acquire insert: {e}")
            }
        }
    }

    /// `JdbcLock.tryLock(wait, ttl)`: [`Self::acquire`] until it succeeds or `wait` has passed,
    /// sleeping [`SPRING_IDLE`] between tries (the library's polling; nothing of it is left in
    /// the database).
    pub async fn try_lock(&mut self, name: &str, wait: Duration, ttl: Duration) -> Result<bool> {
        let expire = std::time::Instant::now() + wait;
        loop {
            if self.acquire(name, ttl).await? {
                return Ok(true);
            }
            if std::time::Instant::now() >= expire {
                return Ok(false);
            }
            tokio::time::sleep(SPRING_IDLE).await;
        }
    }

    /// `DefaultLockRepository.renew`: `true` when the row is still this registry's (expired
    /// or not: the statement does not look at the expiry).
    pub async fn renew(&mut self, name: &str, ttl: Duration) -> Result<bool> {
        let sql = format!(
            "UPDATE {}LOCK\nSET EXPIRED_AFTER={}\nWHERE REGION=? AND LOCK_KEY=? AND CLIENT_ID=?\n",
            self.prefix,
            self.ts()
        );
        let binds = [
            sql_time_us(SystemTime::now() + ttl),
            self.region.clone(),
            Self::path_for(name),
            self.client_id.clone(),
        ];
        let n = execute_text(&mut self.conn, &sql, &binds)
            .await?
            .map_err(|e| anyhow!("spring renew: {e}"))?;
        Ok(n == 1)
    }

    /// `JdbcLock.unlock`: the DELETE must remove exactly one row, else Spring throws
    /// `ConcurrentModificationException` ([`SPRING_UNLOCK_LOST`]), returned here as the error.
    pub async fn unlock(&mut self, name: &str) -> Result<()> {
        let sql = format!(
            "DELETE FROM {}LOCK\nWHERE REGION=? AND LOCK_KEY=? AND CLIENT_ID=?\n",
            self.prefix
        );
        let binds = [
            self.region.clone(),
            Self::path_for(name),
            self.client_id.clone(),
        ];
        let n = execute_text(&mut self.conn, &sql, &binds)
            .await?
            .map_err(|e| anyhow!("spring unlock: {e}"))?;
        ensure!(
            n == 1,
            "ConcurrentModificationException: {SPRING_UNLOCK_LOST}"
        );
        Ok(())
    }

    /// `DefaultLockRepository.close()` (the bean's destruction): every row of this client in
    /// its region goes; the rows it deleted.
    pub async fn close(mut self) -> Result<u64> {
        let sql = format!(
            "DELETE FROM {}LOCK\nWHERE REGION=? AND CLIENT_ID=?\n",
            self.prefix
        );
        let binds = [self.region.clone(), self.client_id.clone()];
        let n = execute_text(&mut self.conn, &sql, &binds)
            .await?
            .map_err(|e| anyhow!("spring close: {e}"))?;
        self.conn.close().await?;
        Ok(n)
    }

    /// `(CLIENT_ID, EXPIRED_AFTER)` of `name`'s row as text, as an observer reads it.
    pub async fn row(&mut self, name: &str) -> Result<Option<(String, String)>> {
        let sql = match self.conn.dialect() {
            Dialect::MySql => format!(
                "SELECT CAST(CLIENT_ID AS CHAR), CAST(EXPIRED_AFTER AS CHAR) FROM {}LOCK \
                 WHERE REGION = ? AND LOCK_KEY = ?",
                self.prefix
            ),
            Dialect::Postgres => format!(
                "SELECT client_id::text, expired_after::text FROM {}LOCK \
                 WHERE region = $1 AND lock_key = $2",
                self.prefix
            ),
        };
        let (region, key) = (self.region.clone(), Self::path_for(name));
        bounded(async {
            Ok(match &mut self.conn {
                DbConn::MySql(c) => sqlx::query(&sql)
                    .bind(region)
                    .bind(key)
                    .fetch_optional(c)
                    .await?
                    .map(|r| (r.get(0), r.get(1))),
                DbConn::Postgres(c) => sqlx::query(&sql)
                    .bind(region)
                    .bind(key)
                    .fetch_optional(c)
                    .await?
                    .map(|r| (r.get(0), r.get(1))),
            })
        })
        .await
    }

    /// A timestamp parameter in this dialect.
    fn ts(&self) -> &'static str {
        match self.conn.dialect() {
            Dialect::MySql => "?",
            Dialect::Postgres => "CAST(? AS TIMESTAMP)",
        }
    }
}

/// `UUIDConverter.getUUID(name).toString()`: a name that matches Java's
/// `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$` (whole) is
/// `UUID.fromString(name)`, printed in lower case; any other is
/// `UUID.nameUUIDFromBytes(name.getBytes(UTF_8))`: the MD5 of the bytes as a version-3 UUID
/// (the uuid crate's `from_md5_bytes` sets the same version and variant bits).
pub fn spring_uuid(name: &str) -> String {
    use md5::{Digest, Md5};
    let groups: Vec<&str> = name.split('-').collect();
    let java_uuid = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    if java_uuid {
        return name.to_ascii_lowercase();
    }
    let digest: [u8; 16] = Md5::digest(name.as_bytes()).into();
    uuid::Builder::from_md5_bytes(digest)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// Runs `sql` (with `?` placeholders) with text `binds` on `conn`: rows affected, or the
/// server's error.
async fn execute_text(
    conn: &mut DbConn,
    sql: &str,
    binds: &[String],
) -> Result<Result<u64, DbFailure>> {
    let sql = placeholders(conn.dialect(), sql);
    bounded(async {
        Ok(match conn {
            DbConn::MySql(c) => {
                let mut q = sqlx::query(&sql);
                for b in binds {
                    q = q.bind(b);
                }
                q.execute(c).await.map(|r| r.rows_affected())
            }
            DbConn::Postgres(c) => {
                let mut q = sqlx::query(&sql);
                for b in binds {
                    q = q.bind(b);
                }
                q.execute(c).await.map(|r| r.rows_affected())
            }
        }
        .map_err(|e| DbFailure::from_sqlx(&e)))
    })
    .await
}

/// Starts a server with `start` on a fresh free port, up to three times (a port taken between
/// picking and binding is the usual failure); the last error names `what`.
pub async fn on_a_free_port<T>(
    what: &str,
    mut start: impl AsyncFnMut(u16) -> Result<T>,
) -> Result<T> {
    let mut last_error = None;
    for _ in 0..3 {
        match start(crate::support::ports::free_port()).await {
            Ok(server) => return Ok(server),
            Err(e) => {
                tracing::warn!("{what} did not start, retrying on a new port: {e:#}");
                last_error = Some(e);
            }
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow!("{what} did not start")))
}

/// `t` in UTC as `YYYY-MM-DD HH:MM:SS.mmm`.
pub fn sql_time(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// `t` in UTC as `YYYY-MM-DD HH:MM:SS.ffffff` (what a JVM's `LocalDateTime.now(UTC)` holds).
pub fn sql_time_us(t: SystemTime) -> String {
    let micros = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_micros();
    let whole = sql_time(t);
    format!("{}{micros:06}", &whole[..whole.len() - 3])
}

/// Howard Hinnant's days-to-civil conversion (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_time_formats_utc() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(sql_time(t), "2023-11-14 22:13:20.123");
        assert_eq!(sql_time(UNIX_EPOCH), "1970-01-01 00:00:00.000");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(sql_time(leap), "2000-02-29 00:00:00.000");
    }

    /// What OpenJDK 17's `UUID.nameUUIDFromBytes(name.getBytes(UTF_8))` /
    /// `UUID.fromString(name)` print.
    #[test]
    fn spring_lock_keys_as_java_makes_them() {
        assert_eq!(
            spring_uuid("orders"),
            "12c500ed-0b78-3910-9fb4-6af0f246be87"
        );
        assert_eq!(
            spring_uuid("invoice/42"),
            "0a5b82ef-bd6b-3111-a2ec-8bb5196516fa"
        );
        assert_eq!(spring_uuid(""), "d41d8cd9-8f00-3204-a980-0998ecf8427e");
        assert_eq!(
            spring_uuid("ünïcode 🔒"),
            "0b4b72ae-9823-3b34-85ee-cd1c14b7332c"
        );
        assert_eq!(
            spring_uuid("2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D"),
            "2f1e0b7c-1d2e-4a5b-9c8d-0e1f2a3b4c5d"
        );
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(sql_time_us(t), "2023-11-14 22:13:20.123456");
    }

    #[test]
    fn placeholders_for_postgres() {
        assert_eq!(
            placeholders(Dialect::Postgres, "a = ? AND b = ?"),
            "a = $1 AND b = $2"
        );
        assert_eq!(placeholders(Dialect::MySql, "a = ?"), "a = ?");
    }
}
