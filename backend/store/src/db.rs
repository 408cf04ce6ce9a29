//! The store's SQL, for SQLite and PostgreSQL alike: connecting, the migrations, and every
//! query. Both databases take the same statements (`$N` parameters, `RETURNING`,
//! `ON CONFLICT`); [`on_db!`] runs one on whichever pool or connection there is.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use lockscope_model::wire::{AuditRecord, EventKind, LockEvent, ReleaseCause, StoredEvent};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Connection, QueryBuilder, Row};

use super::{StoreConfig, StoreError, StoredState, WriterView};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");

/// Where the store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    /// The URL as configured (the password may come from `password_env`).
    Postgres(String),
}

impl Location {
    /// `sqlite://PATH` or `postgres://…` / `postgresql://…`.
    pub fn parse(url: &str) -> Result<Location, String> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() {
                return Err(
                    "sqlite:// names no file (sqlite:///var/lib/lockscope/store.db)".into(),
                );
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            PgConnectOptions::from_str(url).map_err(|e| {
                format!(
                    "{} is not a PostgreSQL URL: {e}",
                    lockscope_base::redact::redact_url(url)
                )
            })?;
            return Ok(Location::Postgres(url.to_string()));
        }
        Err(format!(
            "{} is neither sqlite://PATH nor postgres://user@host:port/db",
            lockscope_base::redact::redact_url(url)
        ))
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Location::Sqlite(_) => "sqlite",
            Location::Postgres(_) => "postgres",
        }
    }
}

/// The pool reads and audit writes go through.
#[derive(Clone, Debug)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The dedicated connection the history is written on, and the election run on (with
/// PostgreSQL, its session's pid is the lease's `backend_pid` while this replica writes).
pub enum WriterConn {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

/// Runs `$body` with `$x` bound to the SQLite or the PostgreSQL pool/connection.
macro_rules! on_db {
    ($db:expr, $x:ident => $body:expr) => {
        match $db {
            Db::Sqlite($x) => $body,
            Db::Postgres($x) => $body,
        }
    };
}

macro_rules! on_conn {
    ($conn:expr, $x:ident => $body:expr) => {
        match $conn {
            WriterConn::Sqlite($x) => $body,
            WriterConn::Postgres($x) => $body,
        }
    };
}

fn sqlite_options(path: &std::path::Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
}

fn pg_options(url: &str, config: &StoreConfig) -> Result<PgConnectOptions, StoreError> {
    let mut options = PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::Unavailable(e.to_string()))?
        .application_name("lockscope-store")
        .options([("statement_timeout", "30000")]);
    if let Some(password) = config
        .password_env
        .as_ref()
        .and_then(|var| std::env::var(var).ok())
    {
        options = options.password(&password);
    }
    Ok(lockscope_base::tls_files::pg_tls(
        options,
        config.tls_mode,
        config.tls_ca_file.as_deref(),
        config.tls_cert_file.as_deref(),
        config.tls_key_file.as_deref(),
    ))
}

/// A connection error in words an operator acts on (the URL's password never appears).
fn unreachable(location: &Location, e: sqlx::Error) -> StoreError {
    let at = match location {
        Location::Sqlite(path) => path.display().to_string(),
        Location::Postgres(url) => lockscope_base::redact::redact_url(url),
    };
    StoreError::Unavailable(format!("cannot connect to {at}: {e}"))
}

impl Db {
    /// A pool on the store (not yet migrated).
    pub async fn connect(location: &Location, config: &StoreConfig) -> Result<Db, StoreError> {
        match location {
            Location::Sqlite(path) => SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(sqlite_options(path))
                .await
                .map(Db::Sqlite)
                .map_err(|e| unreachable(location, e)),
            Location::Postgres(url) => {
                let options = pg_options(url, config)?;
                // One connection first: its error says why (refused, authentication, TLS);
                // the pool's would only say that it timed out.
                PgConnection::connect_with(&options)
                    .await
                    .map_err(|e| unreachable(location, e))?
                    .close()
                    .await
                    .ok();
                PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(options)
                    .await
                    .map(Db::Postgres)
                    .map_err(|e| unreachable(location, e))
            }
        }
    }

    /// The dedicated connection history is written on.
    pub async fn writer_conn(
        location: &Location,
        config: &StoreConfig,
    ) -> Result<WriterConn, StoreError> {
        match location {
            Location::Sqlite(path) => SqliteConnection::connect_with(&sqlite_options(path))
                .await
                .map(WriterConn::Sqlite)
                .map_err(|e| unreachable(location, e)),
            // Named so a replica taking over can tell a writer's session; a lock it waits for is
            // given up after 2 s (the next round tries again), and a transaction left open by
            // a writer that stopped mid-way (SIGSTOP) is ended by the server after 10 s even if
            // no replica ends it first.
            Location::Postgres(url) => PgConnection::connect_with(
                &pg_options(url, config)?
                    .application_name(WRITER_APPLICATION)
                    .options([
                        ("lock_timeout", "2000"),
                        ("idle_in_transaction_session_timeout", "10000"),
                    ]),
            )
            .await
            .map(WriterConn::Postgres)
            .map_err(|e| unreachable(location, e)),
        }
    }

    /// The store's clock in epoch ms, as SQL.
    fn now_sql(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => SQLITE_NOW,
            Db::Postgres(_) => PG_NOW,
        }
    }

    /// The store's clock, epoch ms.
    pub async fn store_now(&self) -> Result<i64, StoreError> {
        let sql = format!("SELECT {}", self.now_sql());
        Ok(on_db!(self, pool => sqlx::query(&sql).fetch_one(pool).await?.get::<i64, _>(0)))
    }

    pub async fn close(&self) {
        on_db!(self, pool => pool.close().await)
    }

    fn migrator(&self) -> &'static Migrator {
        match self {
            Db::Sqlite(_) => &SQLITE_MIGRATIONS,
            Db::Postgres(_) => &POSTGRES_MIGRATIONS,
        }
    }

    /// The newest migration this binary knows.
    pub fn known_version(&self) -> i64 {
        self.migrator()
            .iter()
            .map(|m| m.version)
            .max()
            .unwrap_or_default()
    }

    /// The versions applied to the store (none before the first migration).
    async fn applied(&self) -> Result<Vec<i64>, StoreError> {
        let table = on_db!(self, pool => sqlx::query(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version"
        ).fetch_all(pool).await.map(|rows| rows.iter().map(|r| r.get::<i64, _>(0)).collect::<Vec<_>>()));
        match table {
            Ok(versions) => Ok(versions),
            // No migrations table yet.
            Err(sqlx::Error::Database(e))
                if e.message().contains("no such table")
                    || e.code().as_deref() == Some("42P01") =>
            {
                Ok(Vec::new())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A schema newer than this binary: a [`StoreError::Schema`].
    pub async fn check_schema(&self) -> Result<i64, StoreError> {
        let applied = self.applied().await?;
        let known = self.known_version();
        if let Some(newer) = applied.iter().find(|v| **v > known) {
            return Err(StoreError::Schema(format!(
                "the store's schema is at version {newer}, newer than this lockscope knows (up to {known}): \
                 run a lockscope at least as new as the one that migrated it, or point [store] url at another store"
            )));
        }
        Ok(applied.last().copied().unwrap_or_default())
    }

    /// Brings the schema up to this binary's (two replicas may race: sqlx's migrator locks).
    /// A store that cannot be migrated but already has this schema (a read-only store) is
    /// usable for reading: the error comes back with the version.
    pub async fn migrate(&self) -> Result<i64, (Option<i64>, StoreError)> {
        let current = self.check_schema().await.map_err(|e| (None, e))?;
        if let Db::Sqlite(pool) = self {
            adopt_legacy_sqlite(pool).await.map_err(|e| (None, e))?;
        }
        let run = on_db!(self, pool => self.migrator().run(pool).await);
        match run {
            Ok(()) => Ok(self.known_version()),
            Err(MigrateError::VersionMissing(v)) => Err((
                None,
                StoreError::Schema(format!(
                    "the store's schema has migration {v}, which this lockscope does not know: \
                     run a lockscope at least as new as the one that migrated it"
                )),
            )),
            Err(e) => {
                let usable = (current == self.known_version()).then_some(current);
                Err((
                    usable,
                    StoreError::Unavailable(format!("cannot migrate the store: {e}")),
                ))
            }
        }
    }

    pub async fn insert_audit(&self, r: &AuditRecord, replica: &str) -> Result<i64, StoreError> {
        const SQL: &str =
            "INSERT INTO audit (at_ms, token_name, source, lock_id, observed_holder, \
             outcome, reason, detail, client, finished_ms, replica, store_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {now}) RETURNING id";
        let sql = SQL.replace("{now}", self.now_sql());
        let row = on_db!(self, pool => sqlx::query(&sql)
            .bind(r.at_ms)
            .bind(&r.token_name)
            .bind(&r.source)
            .bind(&r.lock_id)
            .bind(&r.observed_holder)
            .bind(&r.outcome)
            .bind(&r.reason)
            .bind(&r.detail)
            .bind(&r.client)
            .bind(r.finished_ms)
            .bind(replica)
            .fetch_one(pool)
            .await?
            .get::<i64, _>(0));
        Ok(row)
    }

    /// This replica's `pending` audit records received by the store (its clock) at or after
    /// `since_ms` and more than `older_ms` ago.
    pub async fn own_pending_audits(
        &self,
        replica: &str,
        since_ms: i64,
        older_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let sql = format!(
            "SELECT id FROM audit WHERE outcome = 'pending' AND replica = $1 \
             AND store_at_ms >= $2 AND store_at_ms < {} - $3 ORDER BY id LIMIT 100",
            self.now_sql()
        );
        let ids = on_db!(self, pool => sqlx::query(&sql)
            .bind(replica)
            .bind(since_ms)
            .bind(older_ms)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| row.get::<i64, _>(0))
            .collect());
        Ok(ids)
    }

    /// Closes the `pending` record `id` whose write this replica gave up waiting for: the
    /// release was refused then, and nothing was changed.
    pub async fn close_unconfirmed_audit(&self, id: i64) -> Result<bool, StoreError> {
        const DETAIL: &str = "{\"error\":\"the audit record's write was not confirmed in time \
             (the store was slow or unreachable): the release was refused and nothing was changed\"}";
        let sql = format!(
            "UPDATE audit SET outcome = 'store_unavailable', detail = $2, finished_ms = {} \
             WHERE id = $1 AND outcome = 'pending'",
            self.now_sql()
        );
        let changed = on_db!(self, pool => sqlx::query(&sql)
            .bind(id)
            .bind(DETAIL)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(changed == 1)
    }

    /// Completes the `pending` audit record `id` (or one closed as `unknown` meanwhile because
    /// this replica seemed gone: the outcome is known after all). Answers whether it changed
    /// it (not when it was completed already, by an earlier try whose answer was lost).
    pub async fn finish_audit(
        &self,
        id: i64,
        outcome: &str,
        detail: &str,
        finished_ms: i64,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE audit SET outcome = $2, detail = $3, finished_ms = $4 \
             WHERE id = $1 AND outcome IN ('pending', 'unknown')";
        let changed = on_db!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(outcome)
            .bind(detail)
            .bind(finished_ms)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(changed == 1)
    }

    pub async fn read_audits(
        &self,
        limit: u32,
        before: Option<i64>,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        const SQL: &str = "SELECT id, at_ms, token_name, source, lock_id, observed_holder, \
             outcome, reason, detail, client, finished_ms \
             FROM audit WHERE id < $2 ORDER BY id DESC LIMIT $1";
        let rows = on_db!(self, pool => sqlx::query(SQL)
            .bind(i64::from(limit))
            .bind(before.unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| AuditRecord {
                id: row.get(0),
                at_ms: row.get(1),
                token_name: row.get(2),
                source: row.get(3),
                lock_id: row.get(4),
                observed_holder: row.get(5),
                outcome: row.get(6),
                reason: row.get(7),
                detail: row.get(8),
                client: row.get(9),
                finished_ms: row.get(10),
            })
            .collect());
        Ok(rows)
    }

    /// A lock's stored events with ids below `before`, newest first, at most `limit`.
    pub async fn read_lock_events(
        &self,
        lock: &str,
        limit: u32,
        before: Option<i64>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        const SQL: &str = "SELECT id, at_ms, kind, node, session, cause, duration_ms \
             FROM lock_events WHERE lock_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3";
        let rows = on_db!(self, pool => sqlx::query(SQL)
            .bind(lock)
            .bind(before.unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
            .iter()
            .filter_map(|row| {
                let kind: String = row.get(2);
                let cause: Option<String> = row.get(5);
                // A kind this version does not know (written by a newer one) is skipped.
                Some(StoredEvent {
                    id: row.get(0),
                    event: LockEvent {
                        at_ms: row.get(1),
                        kind: EventKind::parse(&kind)?,
                        node: row.get(3),
                        session: row.get(4),
                        cause: cause.and_then(|c| {
                            ReleaseCause::ALL.into_iter().find(|k| k.as_str() == c)
                        }),
                        duration_ms: row.get(6),
                    },
                })
            })
            .collect());
        Ok(rows)
    }

    pub async fn read_lock_state(&self, lock: &str) -> Result<Option<StoredState>, StoreError> {
        const SQL: &str =
            "SELECT view, seen_ms, gone_ms, gone_unseen FROM lock_state WHERE lock_id = $1";
        let state = on_db!(self, pool => sqlx::query(SQL)
        .bind(lock)
        .fetch_optional(pool)
        .await?
        .and_then(|row| {
            let view: String = row.get(0);
            Some(StoredState {
                view: serde_json::from_str(&view).ok()?,
                seen_ms: row.get(1),
                gone_ms: row.get(2),
                gone_unseen: row.get(3),
            })
        }));
        Ok(state)
    }

    /// The replica writing the history, as the store says.
    pub async fn read_writer(&self) -> Result<Option<(WriterView, i64)>, StoreError> {
        const SQL: &str =
            "SELECT replica, since_ms, through_ms, beat_ms FROM store_writer WHERE id = 1";
        let row = on_db!(self, pool => sqlx::query(SQL).fetch_optional(pool).await?
            .map(|row| (WriterView {
                replica: row.get(0),
                since_ms: row.get(1),
                through_ms: row.get(2),
            }, row.get::<i64, _>(3))));
        Ok(row)
    }
}

/// A store written by lockscope before migrations: its audit table may lack the two columns
/// added then (the first migration creates tables only where there are none).
async fn adopt_legacy_sqlite(pool: &SqlitePool) -> Result<(), StoreError> {
    let columns: Vec<String> = sqlx::query("SELECT name FROM pragma_table_info('audit')")
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if columns.is_empty() {
        return Ok(());
    }
    if !columns.iter().any(|c| c == "client") {
        sqlx::query("ALTER TABLE audit ADD COLUMN client TEXT NOT NULL DEFAULT ''")
            .execute(pool)
            .await?;
    }
    if !columns.iter().any(|c| c == "finished_ms") {
        sqlx::query("ALTER TABLE audit ADD COLUMN finished_ms INTEGER")
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// A lock event's identity across replicas (who observed it and when aside).
pub type EventKey = (String, EventKind, String, String);

/// The store's clock in epoch ms, as SQL: PostgreSQL's own (`clock_timestamp()`, not the
/// transaction's start); SQLite's is this host's, read by SQLite.
const PG_NOW: &str = "(CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT))";
const SQLITE_NOW: &str = "(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))";

/// The writer's connection names itself so in `pg_stat_activity`: a replica taking over ends
/// only a session that is a writer's.
pub const WRITER_APPLICATION: &str = "lockscope-writer";

/// The writer's lease as the store holds it (`store_writer`), with the store's time of the read.
#[derive(Debug, Clone)]
pub struct Lease {
    pub replica: String,
    pub token: i64,
    pub backend_pid: i64,
    pub expires_ms: i64,
    pub since_ms: i64,
    pub through_ms: i64,
    /// The store's time when it answered.
    pub now_ms: i64,
}

impl Lease {
    pub fn view(&self) -> WriterView {
        WriterView {
            replica: self.replica.clone(),
            since_ms: self.since_ms,
            through_ms: self.through_ms,
        }
    }
}

/// What a history write proves in its own transaction before it writes: the lease `token` is
/// still current and unexpired; the write extends the lease by `lease_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Fence {
    pub token: i64,
    pub lease_ms: i64,
}

/// Runs `$body` in a transaction on `$conn` that first renews the lease of `$fence` (and fails
/// with [`StoreError::Fenced`], writing nothing, when it is no longer this writer's), moving
/// `through_ms` up to `$through` when that is `Some`; `$tx` is the transaction, `$now` the
/// store's clock as SQL, `$db` the database type. The statement's text is the same every time
/// (a prepared statement per connection).
macro_rules! fenced {
    ($conn:expr, $fence:expr, $through:expr, ($tx:ident, $now:ident, $db:ident) => $body:expr) => {{
        macro_rules! go {
            ($c:expr, $nowsql:expr, $dbty:ty) => {{
                #[allow(dead_code)]
                type $db = $dbty;
                let $now: &str = $nowsql;
                let mut $tx = $c.begin().await?;
                let renew = format!(
                    "UPDATE store_writer SET beat_ms = {n}, expires_ms = {n} + $2, \
                     through_ms = CASE WHEN through_ms >= COALESCE($3, through_ms) \
                     THEN through_ms ELSE $3 END \
                     WHERE id = 1 AND token = $1 AND expires_ms > {n} RETURNING token",
                    n = $now,
                );
                let through: Option<i64> = $through;
                let held = sqlx::query(&renew)
                    .bind($fence.token)
                    .bind($fence.lease_ms)
                    .bind(through)
                    .fetch_optional(&mut *$tx)
                    .await?;
                if held.is_none() {
                    let _ = $tx.rollback().await;
                    return Err(StoreError::Fenced);
                }
                let out = $body;
                $tx.commit().await?;
                out
            }};
        }
        match $conn {
            WriterConn::Sqlite(c) => go!(c, SQLITE_NOW, sqlx::Sqlite),
            WriterConn::Postgres(c) => go!(c, PG_NOW, sqlx::Postgres),
        }
    }};
}

impl WriterConn {
    fn now_sql(&self) -> &'static str {
        match self {
            WriterConn::Sqlite(_) => SQLITE_NOW,
            WriterConn::Postgres(_) => PG_NOW,
        }
    }

    /// This connection's server process (PostgreSQL; 0 with SQLite).
    pub async fn backend_pid(&mut self) -> Result<i64, StoreError> {
        match self {
            WriterConn::Sqlite(_) => Ok(0),
            WriterConn::Postgres(c) => Ok(i64::from(
                sqlx::query("SELECT pg_backend_pid()")
                    .fetch_one(&mut *c)
                    .await?
                    .get::<i32, _>(0),
            )),
        }
    }

    /// The writer's lease, if any replica ever wrote.
    pub async fn lease(&mut self) -> Result<Option<Lease>, StoreError> {
        let sql = format!(
            "SELECT replica, token, backend_pid, expires_ms, since_ms, through_ms, {} \
             FROM store_writer WHERE id = 1",
            self.now_sql()
        );
        let row = on_conn!(self, c => sqlx::query(&sql).fetch_optional(&mut *c).await?
        .map(|row| Lease {
            replica: row.get(0),
            token: row.get(1),
            backend_pid: row.get(2),
            expires_ms: row.get(3),
            since_ms: row.get(4),
            through_ms: row.get(5),
            now_ms: row.get(6),
        }));
        Ok(row)
    }

    /// Whether the writer's session `pid` is still open (PostgreSQL; with SQLite there is one
    /// process, and no session to look at: `true`).
    pub async fn writer_session_open(&mut self, pid: i64) -> Result<bool, StoreError> {
        match self {
            WriterConn::Sqlite(_) => Ok(true),
            WriterConn::Postgres(c) => Ok(sqlx::query(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2",
            )
            .bind(pid as i32)
            .bind(WRITER_APPLICATION)
            .fetch_one(&mut *c)
            .await?
            .get::<i64, _>(0)
                > 0),
        }
    }

    /// Ends the writer's session `pid` (PostgreSQL: `pg_terminate_backend`, allowed on a
    /// session of the same role), so whatever it holds (an open transaction, a row lock) goes
    /// with it. Answers whether a session was ended.
    pub async fn end_writer_session(&mut self, pid: i64) -> Result<bool, StoreError> {
        match self {
            WriterConn::Sqlite(_) => Ok(false),
            WriterConn::Postgres(c) => Ok(sqlx::query(
                "SELECT COALESCE(bool_or(pg_terminate_backend(pid)), FALSE) FROM pg_stat_activity \
                 WHERE pid = $1 AND application_name = $2",
            )
            .bind(pid as i32)
            .bind(WRITER_APPLICATION)
            .fetch_one(&mut *c)
            .await?
            .get::<bool, _>(0)),
        }
    }

    /// Takes the lease from `seen` (the token read when it was found run out, or its session
    /// gone), for `lease_ms` of the store's time: a new token, this connection's pid. `gone`:
    /// the holder's session is closed (it cannot write again, whatever its expiry says).
    /// Answers the new token, or `None` when someone else moved the lease meanwhile (the holder
    /// renewed it, or another replica took it). `seen` is `None` on a store never written.
    pub async fn take_lease(
        &mut self,
        replica: &str,
        pid: i64,
        lease_ms: i64,
        seen: Option<i64>,
        gone: bool,
    ) -> Result<Option<i64>, StoreError> {
        let now = self.now_sql();
        let create = format!(
            "INSERT INTO store_writer (id, replica, since_ms, through_ms, beat_ms, token, \
             backend_pid, expires_ms) VALUES (1, $1, {now}, {now}, {now}, 0, 0, 0) \
             ON CONFLICT (id) DO NOTHING"
        );
        let take = format!(
            "UPDATE store_writer SET replica = $1, token = token + 1, backend_pid = $2, \
             since_ms = {now}, beat_ms = {now}, expires_ms = {now} + $3 \
             WHERE id = 1 AND token = $4 AND (expires_ms <= {now} OR $5) RETURNING token"
        );
        let token = on_conn!(self, c => {
            let mut tx = c.begin().await?;
            sqlx::query(&create).bind(replica).execute(&mut *tx).await?;
            let token: Option<i64> = sqlx::query(&take)
                .bind(replica)
                .bind(pid)
                .bind(lease_ms)
                .bind(seen.unwrap_or(0))
                .bind(gone)
                .fetch_optional(&mut *tx)
                .await?
                .map(|row| row.get(0));
            tx.commit().await?;
            token
        });
        Ok(token)
    }

    /// Renews the lease (and moves `through_ms` up to `through_ms`, when given) in a
    /// transaction of its own; [`StoreError::Fenced`] when it is no longer this writer's.
    pub async fn renew(&mut self, fence: Fence, through_ms: Option<i64>) -> Result<(), StoreError> {
        fenced!(self, fence, through_ms, (_tx, _now, _Db) => ());
        Ok(())
    }

    /// Ends this writer's lease now (a clean stop: another replica takes over at once).
    pub async fn resign(&mut self, token: i64) {
        let sql = format!(
            "UPDATE store_writer SET expires_ms = {} WHERE id = 1 AND token = $1",
            self.now_sql()
        );
        on_conn!(self, c => {
            let _ = sqlx::query(&sql).bind(token).execute(&mut *c).await;
        });
    }

    /// Says this replica (running since `started_ms`, store time) is alive; answers the
    /// store's time.
    pub async fn beat(&mut self, replica: &str, started_ms: i64) -> Result<i64, StoreError> {
        let now = self.now_sql();
        let sql = format!(
            "INSERT INTO replica_beats (replica, started_ms, beat_ms) VALUES ($1, $2, {now}) \
             ON CONFLICT (replica) DO UPDATE SET started_ms = $2, beat_ms = {now} RETURNING beat_ms"
        );
        let at = on_conn!(self, c => sqlx::query(&sql)
            .bind(replica)
            .bind(started_ms)
            .fetch_one(&mut *c)
            .await?
            .get::<i64, _>(0));
        Ok(at)
    }

    /// Whether this replica should try for the lease now: no other live replica (beat within
    /// `alive_ms` of the store's time) that does not hold the lease has run longer, or the
    /// lease has been out for `writer_dead_ms` (nobody writes: anyone may). All in the
    /// store's time.
    pub async fn eldest(
        &mut self,
        replica: &str,
        started_ms: i64,
        alive_ms: i64,
        writer_dead_ms: i64,
    ) -> Result<bool, StoreError> {
        let now = self.now_sql();
        let sql = format!(
            "SELECT \
             (SELECT COUNT(*) FROM replica_beats WHERE replica <> $1 AND beat_ms >= {now} - $3 \
                AND replica <> COALESCE((SELECT replica FROM store_writer WHERE id = 1), '') \
                AND (started_ms < $2 OR (started_ms = $2 AND replica < $1))), \
             (SELECT COUNT(*) FROM store_writer WHERE expires_ms >= {now} - $4)"
        );
        let (elders, writer_alive): (i64, i64) = on_conn!(self, c => sqlx::query_as(&sql)
            .bind(replica)
            .bind(started_ms)
            .bind(alive_ms)
            .bind(writer_dead_ms)
            .fetch_one(&mut *c)
            .await?);
        Ok(elders == 0 || writer_alive == 0)
    }

    /// Closes as `unknown` the audit records left `pending` by a replica that will not finish
    /// them: no beat within `dead_ms` of the store's time since (stopped, hung, gone), or
    /// restarted after the record was written (a new process knows nothing of it). A record
    /// younger than `dead_ms` is left alone. Answers how many were closed.
    pub async fn close_abandoned_audits(
        &mut self,
        fence: Fence,
        dead_ms: i64,
    ) -> Result<u64, StoreError> {
        const DETAIL: &str = "{\"error\":\"the replica that ran this release stopped (no \
             heartbeat in the store, or restarted) before it wrote the outcome: whether the lock \
             was released is unknown; look at the lock\"}";
        let closed = fenced!(self, fence, None, (tx, now, _Db) => {
            let sql = format!(
                "UPDATE audit SET outcome = 'unknown', detail = $2, finished_ms = {now} \
                 WHERE outcome = 'pending' AND COALESCE(store_at_ms, at_ms) < {now} - $1 \
                 AND NOT EXISTS (SELECT 1 FROM replica_beats b WHERE b.replica = audit.replica \
                   AND b.beat_ms >= {now} - $1 AND b.started_ms <= COALESCE(audit.store_at_ms, audit.at_ms))"
            );
            sqlx::query(&sql)
                .bind(dead_ms)
                .bind(DETAIL)
                .execute(&mut *tx)
                .await?
                .rows_affected()
        });
        Ok(closed)
    }

    /// The holders force-released (or being released) since `since_ms` (store time), by any
    /// replica: (lock id, holder) → when the store received the request (store time).
    pub async fn forced_since(
        &mut self,
        since_ms: i64,
    ) -> Result<std::collections::HashMap<(String, String), i64>, StoreError> {
        const SQL: &str =
            "SELECT lock_id, observed_holder, COALESCE(store_at_ms, at_ms) FROM audit \
             WHERE COALESCE(store_at_ms, at_ms) >= $1 AND outcome IN ('pending', 'released')";
        let rows = on_conn!(self, c => sqlx::query(SQL)
            .bind(since_ms)
            .fetch_all(&mut *c)
            .await?
            .iter()
            .map(|row| ((row.get(0), row.get(1)), row.get::<i64, _>(2)))
            .collect());
        Ok(rows)
    }

    /// Every event stored at or after `from_ms` (at most `limit`), by key, for filling a gap.
    pub async fn stored_since(
        &mut self,
        from_ms: i64,
        limit: i64,
    ) -> Result<Vec<(EventKey, i64)>, StoreError> {
        const SQL: &str = "SELECT lock_id, kind, node, session, at_ms FROM lock_events \
             WHERE at_ms >= $1 ORDER BY id LIMIT $2";
        let rows = on_conn!(self, c => sqlx::query(SQL)
            .bind(from_ms)
            .bind(limit)
            .fetch_all(&mut *c)
            .await?
            .iter()
            .filter_map(|row| {
                let kind: String = row.get(1);
                Some(((row.get(0), EventKind::parse(&kind)?, row.get(2), row.get(3)), row.get(4)))
            })
            .collect());
        Ok(rows)
    }

    /// Writes `events` (their `at_ms` in the store's time) and moves the writer's `through_ms`
    /// up to `through_ms`, in one transaction that first proves the lease is still `fence`'s.
    pub async fn write_events(
        &mut self,
        fence: Fence,
        events: &[(String, LockEvent)],
        replica: &str,
        through_ms: i64,
    ) -> Result<(), StoreError> {
        fenced!(self, fence, Some(through_ms), (tx, _now, DbKind) => {
            if !events.is_empty() {
                let mut insert = QueryBuilder::<DbKind>::new(
                    "INSERT INTO lock_events (lock_id, at_ms, kind, node, session, cause, duration_ms, replica) ",
                );
                insert.push_values(events, |mut row, (lock, e)| {
                    row.push_bind(lock.as_str())
                        .push_bind(e.at_ms)
                        .push_bind(e.kind.as_str())
                        .push_bind(e.node.as_str())
                        .push_bind(e.session.as_str())
                        .push_bind(e.cause.map(ReleaseCause::as_str))
                        .push_bind(e.duration_ms)
                        .push_bind(replica);
                });
                insert.build().execute(&mut *tx).await?;
            }
        });
        Ok(())
    }

    /// Upserts lock states: (id, source, view JSON, seen_ms, gone_ms, gone_unseen).
    pub async fn write_states(
        &mut self,
        fence: Fence,
        states: &[(String, String, String, i64, Option<i64>)],
    ) -> Result<(), StoreError> {
        if states.is_empty() {
            return Ok(());
        }
        fenced!(self, fence, None, (tx, _now, DbKind) => {
                let mut upsert = QueryBuilder::<DbKind>::new(
                    "INSERT INTO lock_state (lock_id, source, view, seen_ms, gone_ms, gone_unseen) ",
                );
                upsert.push_values(states, |mut row, (id, source, view, seen, gone)| {
                    row.push_bind(id.as_str())
                        .push_bind(source.as_str())
                        .push_bind(view.as_str())
                        .push_bind(*seen)
                        .push_bind(*gone)
                        .push_bind(false);
                });
                upsert.push(
                    " ON CONFLICT (lock_id) DO UPDATE SET source = excluded.source, view = excluded.view, \
                     seen_ms = excluded.seen_ms, gone_ms = excluded.gone_ms, gone_unseen = excluded.gone_unseen",
                );
                upsert.build().execute(&mut *tx).await?;
        });
        Ok(())
    }

    /// Marks at most `batch` locks of `source` not seen since `seen_before` as gone unseen (they
    /// went while no lockscope watched); answers how many.
    pub async fn mark_unseen_gone(
        &mut self,
        fence: Fence,
        source: &str,
        seen_before: i64,
        now: i64,
        batch: i64,
    ) -> Result<u64, StoreError> {
        const SQL: &str = "UPDATE lock_state SET gone_ms = $3, gone_unseen = TRUE WHERE lock_id IN \
             (SELECT lock_id FROM lock_state WHERE source = $1 AND gone_ms IS NULL AND seen_ms < $2 LIMIT $4)";
        let n = fenced!(self, fence, None, (tx, _now, _Db) => sqlx::query(SQL)
            .bind(source)
            .bind(seen_before)
            .bind(now)
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected());
        Ok(n)
    }

    /// Deletes at most `batch` lock events older than `cutoff_ms` or beyond the newest
    /// `max_events`, and gone locks' states older than `cutoff_ms`; answers how many rows went.
    pub async fn prune(
        &mut self,
        fence: Fence,
        cutoff_ms: i64,
        max_events: u64,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let deleted = fenced!(self, fence, None, (tx, _now, _Db) => {
            let mut deleted = 0;
            let by_age = (sqlx::query(
                "DELETE FROM lock_events WHERE id IN \
                 (SELECT id FROM lock_events WHERE at_ms < $1 ORDER BY at_ms LIMIT $2)",
            )
            .bind(cutoff_ms)
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected());
            deleted += by_age;
            // Ids are handed out in order, so the newest `max_events` are those above the newest
            // id less `max_events` (one index probe, not a walk over `max_events` entries; gaps
            // left by rolled-back writes only keep a few less).
            let newest: Option<i64> = (sqlx::query("SELECT MAX(id) FROM lock_events")
                .fetch_one(&mut *tx)
                .await?
                .get::<Option<i64>, _>(0));
            let oldest_kept = newest
                .map(|newest| newest.saturating_sub(i64::try_from(max_events).unwrap_or(i64::MAX)) + 1)
                .filter(|oldest| *oldest > 1);
            if let Some(oldest_kept) = oldest_kept {
                deleted += (sqlx::query(
                    "DELETE FROM lock_events WHERE id IN \
                     (SELECT id FROM lock_events WHERE id < $1 ORDER BY id LIMIT $2)",
                )
                .bind(oldest_kept)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected());
            }
            deleted += (sqlx::query(
                "DELETE FROM lock_state WHERE lock_id IN \
                 (SELECT lock_id FROM lock_state WHERE gone_ms < $1 LIMIT $2)",
            )
            .bind(cutoff_ms)
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected());
            deleted
        });
        Ok(deleted)
    }
}
