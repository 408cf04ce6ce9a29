//! lockscope's history store on a real PostgreSQL ([`super::postgres::Postgres`]), set up as an
//! operator would with least privilege, and the faults a store has in production: down, read
//! only, full.
//!
//! This module owns, on its own server:
//!
//! * the database `lockscope`, which only [`STORE_USER`] (and the superuser) may connect to;
//!   in it the schema `lockscope`, owned by [`STORE_USER`], and that role's `search_path` set
//!   to it. The role is no superuser and holds nothing else: no `CREATEDB`, no `CREATEROLE`, no
//!   `CREATE` on `public` (PostgreSQL 15 takes it from `PUBLIC`, and it is revoked here again
//!   so the fixture says so). lockscope's migrations create their tables in that schema.
//! * faults, set and cleared by the superuser: [`PgStore::set_read_only`] (the role's
//!   `default_transaction_read_only`, its sessions ended so the next ones pick it up) and
//!   [`PgStore::set_full`] (see there: a trigger raising SQLSTATE 53100 `disk_full`, standing in
//!   for a full disk), [`PgStore::set_audit_completions_failing`] (the same error on updates
//!   of audit records only: a release's record is written `pending`, its completion fails),
//!   [`PgStore::set_audit_inserts_slow`] (a record takes seconds to write, and lands);
//!   stopping and starting the server is [`PgStore::kill`] and [`PgStore::restart`]. A store
//!   that goes silent is the store reached through a [`super::proxy::TcpProxy`]
//!   ([`PgStore::store_toml_at`]).
//!
//! The server runs with `trust` authentication (see the postgres module), so the password
//! handed to lockscope through `password_env` is sent but not checked.

use anyhow::{Context, Result};
use sqlx::Row;

use super::postgres::{connect, Postgres};

/// The role lockscope connects as.
pub const STORE_USER: &str = "lockscope_store";
/// Its password (not checked: `trust`).
pub const STORE_PASSWORD: &str = "store-secret-0123";
/// The environment variable lockscope reads the password from (`[store] password_env`).
pub const PASSWORD_ENV: &str = "LOCKSCOPE_STORE_PASSWORD";
/// The database and the schema lockscope's tables live in.
pub const DATABASE: &str = "lockscope";

/// A PostgreSQL server holding lockscope's store.
pub struct PgStore {
    pub pg: Postgres,
}

impl PgStore {
    /// Starts a server and creates the database, role and schema (see the module doc).
    pub async fn start() -> Result<PgStore> {
        let pg = Postgres::start().await?;
        // CREATE DATABASE cannot run in the implicit transaction of a multi-statement query.
        pg.exec(&format!("CREATE DATABASE {DATABASE}"))
            .await
            .context("create the store database")?;
        pg.exec(&format!(
            "CREATE ROLE {STORE_USER} LOGIN PASSWORD '{STORE_PASSWORD}' \
                 NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION; \
             REVOKE ALL ON DATABASE {DATABASE} FROM PUBLIC; \
             GRANT CONNECT ON DATABASE {DATABASE} TO {STORE_USER}; \
             ALTER ROLE {STORE_USER} SET search_path = {DATABASE};"
        ))
        .await
        .context("create the store role")?;
        let store = PgStore { pg };
        store
            .exec(&format!(
                "REVOKE ALL ON SCHEMA public FROM PUBLIC; \
                 CREATE SCHEMA {DATABASE} AUTHORIZATION {STORE_USER};"
            ))
            .await
            .context("create the store schema")?;
        Ok(store)
    }

    /// `postgres://lockscope_store@127.0.0.1:<port>/lockscope`: `[store] url` (the password
    /// comes from [`PASSWORD_ENV`]).
    pub fn url(&self) -> String {
        format!(
            "postgres://{STORE_USER}@127.0.0.1:{}/{DATABASE}",
            self.pg.port()
        )
    }

    /// The `[store]` table for a replica named `replica` of this store.
    pub fn store_toml(&self, replica: &str) -> String {
        format!(
            "[store]\nurl = \"{}\"\npassword_env = \"{PASSWORD_ENV}\"\nreplica = \"{replica}\"\n",
            self.url()
        )
    }

    /// The `[store]` table for a replica named `replica` reaching this store at `addr` (a
    /// relay in front of it), with `extra` lines (e.g. `lease = "2s"`).
    pub fn store_toml_at(&self, replica: &str, addr: std::net::SocketAddr, extra: &str) -> String {
        format!(
            "[store]\nurl = \"postgres://{STORE_USER}@{addr}/{DATABASE}\"\n\
             password_env = \"{PASSWORD_ENV}\"\nreplica = \"{replica}\"\n{extra}"
        )
    }

    /// The server's address, for a relay to forward to.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.pg.port()))
    }

    /// The first column of the first row `sql` answers, as a whole number (run as the
    /// superuser; `count(*)`, `max(id)`…; `NULL` is 0).
    pub async fn number(&self, sql: &str) -> Result<i64> {
        let text = self.column(&format!("SELECT ({sql})::text")).await?;
        let first = text.first().map(String::as_str).unwrap_or_default();
        if first.is_empty() {
            return Ok(0);
        }
        first
            .parse()
            .with_context(|| format!("{sql:?} answered {first:?}"))
    }

    /// Makes the completion of audit records fail (`on`) or not: a trigger on `audit` raising
    /// SQLSTATE 53100 `disk_full` on UPDATE, so a release's `pending` record is written and
    /// its completion is refused, as when the store goes away between the two. Needs the
    /// tables (call it after lockscope has migrated the store).
    pub async fn set_audit_completions_failing(&self, on: bool) -> Result<()> {
        let mut sql = String::from(
            "CREATE OR REPLACE FUNCTION public.lockscope_test_no_update() RETURNS trigger \
             LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'disk_full', \
             MESSAGE = 'could not extend file: No space left on device'; END $$;",
        );
        sql.push_str(&format!(
            "DROP TRIGGER IF EXISTS lockscope_test_no_update ON {DATABASE}.audit;"
        ));
        if on {
            sql.push_str(&format!(
                "CREATE TRIGGER lockscope_test_no_update BEFORE UPDATE ON {DATABASE}.audit \
                 FOR EACH ROW EXECUTE FUNCTION public.lockscope_test_no_update();"
            ));
        }
        self.exec(&sql).await
    }

    /// Makes every new audit record take `seconds` to write (`Some`), or not (`None`): a
    /// trigger on `audit` that sleeps before each insert, as a store stalled on a write; the
    /// record lands afterwards, even if the client stopped waiting for it.
    pub async fn set_audit_inserts_slow(&self, seconds: Option<u32>) -> Result<()> {
        let mut sql =
            format!("DROP TRIGGER IF EXISTS lockscope_test_slow_insert ON {DATABASE}.audit;");
        if let Some(seconds) = seconds {
            sql.push_str(&format!(
                "CREATE OR REPLACE FUNCTION public.lockscope_test_slow_insert() RETURNS trigger \
                 LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep({seconds}); RETURN NEW; END $$; \
                 CREATE TRIGGER lockscope_test_slow_insert BEFORE INSERT ON {DATABASE}.audit \
                 FOR EACH ROW EXECUTE FUNCTION public.lockscope_test_slow_insert();"
            ));
        }
        self.exec(&sql).await
    }

    /// The environment a lockscope using this store needs.
    pub fn env(&self) -> [(&'static str, &'static str); 1] {
        [(PASSWORD_ENV, STORE_PASSWORD)]
    }

    /// The superuser's URL of the store database.
    fn admin_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{DATABASE}",
            self.pg.port()
        )
    }

    /// Runs `sql` as the superuser in the store database.
    pub async fn exec(&self, sql: &str) -> Result<()> {
        let mut conn = connect(&self.admin_url(), "lockscope-test-admin").await?;
        let result = sqlx::raw_sql(sql)
            .execute(&mut conn)
            .await
            .with_context(|| format!("run {sql:?}"));
        let _ = sqlx::Connection::close(conn).await;
        result.map(drop)
    }

    /// The first column of every row `sql` answers, as text (`NULL` as an empty string), run
    /// as the superuser in the store database.
    pub async fn column(&self, sql: &str) -> Result<Vec<String>> {
        let mut conn = connect(&self.admin_url(), "lockscope-test-admin").await?;
        let rows = sqlx::query(sql)
            .fetch_all(&mut conn)
            .await
            .with_context(|| format!("run {sql:?}"));
        let _ = sqlx::Connection::close(conn).await;
        rows?
            .iter()
            .map(|r| Ok(r.try_get::<Option<String>, _>(0)?.unwrap_or_default()))
            .collect()
    }

    /// The tables lockscope's migrations made in the store schema.
    pub async fn tables(&self) -> Result<Vec<String>> {
        self.column(&format!(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = '{DATABASE}' ORDER BY 1"
        ))
        .await
    }

    /// Ends every session of [`STORE_USER`] (lockscope reconnects, and its new sessions pick
    /// up changed role settings).
    pub async fn end_sessions(&self) -> Result<()> {
        self.exec(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{STORE_USER}'"
        ))
        .await
    }

    /// Makes the store read only for lockscope (`on`), or writable again: the role's
    /// `default_transaction_read_only`, so every write answers SQLSTATE 25006 `cannot execute
    /// INSERT in a read-only transaction`, as on a standby or a database set read only by its
    /// operator. Its open sessions are ended so the next ones take the setting.
    pub async fn set_read_only(&self, on: bool) -> Result<()> {
        let value = if on { "on" } else { "off" };
        self.exec(&format!(
            "ALTER ROLE {STORE_USER} SET default_transaction_read_only = {value}"
        ))
        .await?;
        self.end_sessions().await
    }

    /// Makes the store "full" (`on`) or not: a trigger on every table of the store schema
    /// (the migrations' own bookkeeping table excepted) raises SQLSTATE 53100 `disk_full` with
    /// PostgreSQL's own message on INSERT and UPDATE. It stands in for a full disk, which
    /// cannot be made here without root (a small filesystem to mount); lockscope sees the same
    /// error class a full data directory gives. Needs the tables: call it after lockscope has
    /// migrated the store.
    pub async fn set_full(&self, on: bool) -> Result<()> {
        let tables = self.tables().await?;
        let mut sql = String::from(
            "CREATE OR REPLACE FUNCTION public.lockscope_test_disk_full() RETURNS trigger \
             LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'disk_full', \
             MESSAGE = 'could not extend file: No space left on device'; END $$;",
        );
        for table in tables.iter().filter(|t| !t.starts_with("_sqlx")) {
            sql.push_str(&format!(
                "DROP TRIGGER IF EXISTS lockscope_test_full ON {DATABASE}.\"{table}\";"
            ));
            if on {
                sql.push_str(&format!(
                    "CREATE TRIGGER lockscope_test_full BEFORE INSERT OR UPDATE ON \
                     {DATABASE}.\"{table}\" FOR EACH ROW \
                     EXECUTE FUNCTION public.lockscope_test_disk_full();"
                ));
            }
        }
        self.exec(&sql).await
    }

    /// Immediate shutdown of the server (see [`Postgres::kill`]).
    pub fn kill(&mut self) {
        self.pg.kill();
    }

    /// Starts the server again on the same port and data directory.
    pub async fn restart(&mut self) -> Result<()> {
        self.pg.restart().await
    }

    /// The server's log (its tail goes into failure messages).
    pub fn log_tail(&self, lines: usize) -> String {
        super::process::tail(self.pg.log_path(), lines)
    }
}
