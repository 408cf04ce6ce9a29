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

/// The advisory lock the replica writing the history holds (`lockscop` in ASCII).
pub const WRITER_LOCK: i64 = 0x6c6f_636b_7363_6f70;

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
                    crate::redact::redact_url(url)
                )
            })?;
            return Ok(Location::Postgres(url.to_string()));
        }
        Err(format!(
            "{} is neither sqlite://PATH nor postgres://user@host:port/db",
            crate::redact::redact_url(url)
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

/// The dedicated connection the history is written on (with PostgreSQL, the one holding the
/// writer's advisory lock).
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
    Ok(crate::tls_files::pg_tls(
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
        Location::Postgres(url) => crate::redact::redact_url(url),
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
            Location::Postgres(url) => PgConnection::connect_with(&pg_options(url, config)?)
                .await
                .map(WriterConn::Postgres)
                .map_err(|e| unreachable(location, e)),
        }
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
             outcome, reason, detail, client, finished_ms, replica) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id";
        let row = on_db!(self, pool => sqlx::query(SQL)
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

    pub async fn finish_audit(
        &self,
        id: i64,
        outcome: &str,
        detail: &str,
        finished_ms: i64,
    ) -> Result<(), StoreError> {
        const SQL: &str =
            "UPDATE audit SET outcome = $2, detail = $3, finished_ms = $4 WHERE id = $1";
        let changed = on_db!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(outcome)
            .bind(detail)
            .bind(finished_ms)
            .execute(pool)
            .await?
            .rows_affected());
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::Query(sqlx::Error::RowNotFound))
        }
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

impl WriterConn {
    /// Takes the writer's advisory lock if free (SQLite: this process always writes).
    pub async fn try_lead(&mut self) -> Result<bool, StoreError> {
        match self {
            WriterConn::Sqlite(_) => Ok(true),
            WriterConn::Postgres(conn) => Ok(sqlx::query("SELECT pg_try_advisory_lock($1)")
                .bind(WRITER_LOCK)
                .fetch_one(&mut *conn)
                .await?
                .get(0)),
        }
    }

    /// Gives the advisory lock back (a clean stop; a lost connection gives it back by itself).
    pub async fn resign(&mut self) {
        if let WriterConn::Postgres(conn) = self {
            let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(WRITER_LOCK)
                .execute(&mut *conn)
                .await;
        }
    }

    pub async fn read_writer(&mut self) -> Result<Option<WriterView>, StoreError> {
        const SQL: &str = "SELECT replica, since_ms, through_ms FROM store_writer WHERE id = 1";
        let row = on_conn!(self, c => sqlx::query(SQL).fetch_optional(&mut *c).await?
        .map(|row| WriterView {
            replica: row.get(0),
            since_ms: row.get(1),
            through_ms: row.get(2),
        }));
        Ok(row)
    }

    /// Says this replica (running since `started_ms`) is alive at `now`.
    pub async fn beat(
        &mut self,
        replica: &str,
        started_ms: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        const SQL: &str =
            "INSERT INTO replica_beats (replica, started_ms, beat_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (replica) DO UPDATE SET started_ms = $2, beat_ms = $3";
        on_conn!(self, c => sqlx::query(SQL)
            .bind(replica)
            .bind(started_ms)
            .bind(now)
            .execute(&mut *c)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Whether this replica should try for the writer's lock now: no other live replica that
    /// does not write (beat since `alive_since`; the writer does not beat here) has run longer,
    /// or the writer has not beaten since `writer_dead_since` (nobody writes: anyone may).
    pub async fn eldest(
        &mut self,
        replica: &str,
        started_ms: i64,
        alive_since: i64,
        writer_dead_since: i64,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "SELECT \
             (SELECT COUNT(*) FROM replica_beats WHERE replica <> $1 AND beat_ms >= $3 \
                AND (started_ms < $2 OR (started_ms = $2 AND replica < $1))), \
             (SELECT COUNT(*) FROM store_writer WHERE beat_ms >= $4)";
        let (elders, writer_alive): (i64, i64) = on_conn!(self, c => sqlx::query_as(SQL)
            .bind(replica)
            .bind(started_ms)
            .bind(alive_since)
            .bind(writer_dead_since)
            .fetch_one(&mut *c)
            .await?);
        Ok(elders == 0 || writer_alive == 0)
    }

    /// Names this replica the writer (its predecessor's `through_ms` is kept until this one
    /// writes past it).
    pub async fn claim(&mut self, replica: &str, now: i64) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO store_writer (id, replica, since_ms, through_ms, beat_ms) \
             VALUES (1, $1, $2, $2, $2) ON CONFLICT (id) DO UPDATE SET replica = $1, \
             since_ms = $2, beat_ms = $2";
        on_conn!(self, c => sqlx::query(SQL).bind(replica).bind(now).execute(&mut *c).await?.rows_affected());
        // The writer is no candidate: its beat from before would keep the others from taking
        // over when it dies.
        on_conn!(self, c => sqlx::query("DELETE FROM replica_beats WHERE replica = $1")
            .bind(replica)
            .execute(&mut *c)
            .await?
            .rows_affected());
        Ok(())
    }

    /// The holders force-released (or being released) since `since_ms`, by any replica:
    /// (lock id, holder) → when the release was asked for.
    pub async fn forced_since(
        &mut self,
        since_ms: i64,
    ) -> Result<std::collections::HashMap<(String, String), i64>, StoreError> {
        const SQL: &str = "SELECT lock_id, observed_holder, at_ms FROM audit \
             WHERE at_ms >= $1 AND outcome IN ('pending', 'released')";
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

    /// Writes `events` and moves the writer's `through_ms` up to `through_ms`, in one
    /// transaction.
    pub async fn write_events(
        &mut self,
        events: &[(String, LockEvent)],
        replica: &str,
        through_ms: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        macro_rules! write {
            ($c:expr, $db:ty) => {{
                let mut tx = $c.begin().await?;
                if !events.is_empty() {
                    let mut insert = QueryBuilder::<$db>::new(
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
                sqlx::query(
                    "UPDATE store_writer SET through_ms = CASE WHEN through_ms > $1 THEN through_ms ELSE $1 END, \
                     beat_ms = $2 WHERE id = 1",
                )
                .bind(through_ms)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }};
        }
        match self {
            WriterConn::Sqlite(c) => write!(c, sqlx::Sqlite),
            WriterConn::Postgres(c) => write!(c, sqlx::Postgres),
        }
        Ok(())
    }

    /// Upserts lock states: (id, source, view JSON, seen_ms, gone_ms, gone_unseen).
    pub async fn write_states(
        &mut self,
        states: &[(String, String, String, i64, Option<i64>)],
    ) -> Result<(), StoreError> {
        if states.is_empty() {
            return Ok(());
        }
        macro_rules! write {
            ($c:expr, $db:ty) => {{
                let mut upsert = QueryBuilder::<$db>::new(
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
                upsert.build().execute(&mut *$c).await?;
            }};
        }
        match self {
            WriterConn::Sqlite(c) => write!(c, sqlx::Sqlite),
            WriterConn::Postgres(c) => write!(c, sqlx::Postgres),
        }
        Ok(())
    }

    /// Marks at most `batch` locks of `source` not seen since `seen_before` as gone unseen (they
    /// went while no lockscope watched); answers how many.
    pub async fn mark_unseen_gone(
        &mut self,
        source: &str,
        seen_before: i64,
        now: i64,
        batch: i64,
    ) -> Result<u64, StoreError> {
        const SQL: &str = "UPDATE lock_state SET gone_ms = $3, gone_unseen = TRUE WHERE lock_id IN \
             (SELECT lock_id FROM lock_state WHERE source = $1 AND gone_ms IS NULL AND seen_ms < $2 LIMIT $4)";
        let n = on_conn!(self, c => sqlx::query(SQL)
            .bind(source)
            .bind(seen_before)
            .bind(now)
            .bind(batch)
            .execute(&mut *c)
            .await?
            .rows_affected());
        Ok(n)
    }

    /// Deletes at most `batch` lock events older than `cutoff_ms` or beyond the newest
    /// `max_events`, and gone locks' states older than `cutoff_ms`; answers how many rows went.
    pub async fn prune(
        &mut self,
        cutoff_ms: i64,
        max_events: u64,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let mut deleted = 0;
        let by_age = on_conn!(self, c => sqlx::query(
            "DELETE FROM lock_events WHERE id IN \
             (SELECT id FROM lock_events WHERE at_ms < $1 ORDER BY at_ms LIMIT $2)",
        )
        .bind(cutoff_ms)
        .bind(batch)
        .execute(&mut *c)
        .await?
        .rows_affected());
        deleted += by_age;
        // Ids are handed out in order, so the newest `max_events` are those above the newest
        // id less `max_events` (one index probe, not a walk over `max_events` entries; gaps
        // left by rolled-back writes only keep a few less).
        let newest: Option<i64> = on_conn!(self, c => sqlx::query("SELECT MAX(id) FROM lock_events")
            .fetch_one(&mut *c)
            .await?
            .get::<Option<i64>, _>(0));
        let oldest_kept = newest
            .map(|newest| newest.saturating_sub(i64::try_from(max_events).unwrap_or(i64::MAX)) + 1)
            .filter(|oldest| *oldest > 1);
        if let Some(oldest_kept) = oldest_kept {
            deleted += on_conn!(self, c => sqlx::query(
                "DELETE FROM lock_events WHERE id IN \
                 (SELECT id FROM lock_events WHERE id < $1 ORDER BY id LIMIT $2)",
            )
            .bind(oldest_kept)
            .bind(batch)
            .execute(&mut *c)
            .await?
            .rows_affected());
        }
        deleted += on_conn!(self, c => sqlx::query(
            "DELETE FROM lock_state WHERE lock_id IN \
             (SELECT lock_id FROM lock_state WHERE gone_ms < $1 LIMIT $2)",
        )
        .bind(cutoff_ms)
        .bind(batch)
        .execute(&mut *c)
        .await?
        .rows_affected());
        Ok(deleted)
    }
}
