//! PostgreSQL: the connection lockscope observes through and the queries of one round.
//!
//! The connection starts with `application_name = lockscope`, `statement_timeout`,
//! `lock_timeout = 200ms` (a catalog read never queues behind somebody's DDL for long) and
//! `default_transaction_read_only = on`. At connect lockscope asks whether its role may see
//! other users' statements (superuser or `pg_read_all_stats`). A round runs (3 + lock tables)
//! plain `SELECT`s over the simple-query protocol:
//!
//! 1. the server's clock;
//! 2. `pg_stat_activity` (client backends: user, client, application, start, transaction start,
//!    state, statement; without `pg_read_all_stats` other users' rows keep only pid, user and
//!    application, their `backend_type` is NULL too);
//! 3. `pg_locks`: advisory locks, `tuple` locks, `transactionid` locks that are waited on
//!    with their granted owner (row-lock waits), and `relation` locks of relations someone
//!    waits to lock (a table's queue behind an `ALTER TABLE`, [`pg_relation_locks`]);
//! 4. each configured lock table.

use std::collections::HashMap;
use std::str::FromStr;

use lockscope_model::clip::SHOWN_BYTES;
use lockscope_model::database::{
    advisory_locks, carry_row_locks, pg_relation_locks, pg_row_locks, ConnFacts, DbLock, PgLockRow,
};
use lockscope_model::wire::ConnectionView;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Executor};

use super::collect::{
    finish, read_lock_tables, rows, shorten, steady_offset, Poller, TextRow, Watched,
};
use super::config::{DbSourceConfig, Flavor, LockTableConfig, TableLayout};
use super::error::DbError;
use super::expiry::{ExpiryKind, ExpirySql};
use super::{DbConnection, DbRound};

/// What PostgreSQL cannot show, listed on the source.
pub const LIMITS: &[&str] = &[
    "Row locks are listed only while someone waits for them (PostgreSQL keeps a row lock in the row itself, pg_locks shows only the waits): an uncontended SELECT … FOR UPDATE holder is invisible.",
    "pg_locks does not tell whether an advisory lock was taken at session or transaction level: a holder outside a transaction is session level; otherwise the level is read from its statement when that shows it.",
    "A table's lock queue (relation locks) is listed only while someone waits to lock it; every query takes relation locks, so uncontended ones are not shown.",
];

pub struct PgPoller {
    conn: Watched<PgConnection>,
    /// Why other users' statements are hidden, when they are.
    hidden: Option<String>,
    /// The server clock's offset applied ([`steady_offset`]).
    offset: Option<i64>,
}

/// Opens a connection (not a pool) under the statement timeout; `observe`: set up for
/// observing only (read-only), else for a force release.
pub async fn connect(config: &DbSourceConfig, observe: bool) -> Result<PgConnection, DbError> {
    let connect_error = |source| super::error::connect_error(config, source);
    let timeout_ms = config.statement_timeout.as_millis().to_string();
    let options = PgConnectOptions::from_str(&config.connect_url())
        .map_err(connect_error)?
        .application_name("lockscope")
        .options([
            ("statement_timeout", timeout_ms.as_str()),
            ("lock_timeout", if observe { "200" } else { "2000" }),
            (
                "default_transaction_read_only",
                if observe { "on" } else { "off" },
            ),
        ]);
    let options = lockscope_core::tls_files::pg_tls(
        options,
        config.tls_mode,
        config.tls_ca_file.as_deref(),
        config.tls_cert_file.as_deref(),
        config.tls_key_file.as_deref(),
    );
    options.connect().await.map_err(connect_error)
}

impl Poller for PgPoller {
    async fn connect(
        config: &DbSourceConfig,
        heard: lockscope_core::collect::Heard,
    ) -> Result<Self, DbError> {
        let mut conn = connect(config, true).await?;
        let sees = conn
            .fetch_all(
                "SELECT current_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) \
                 OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')",
            )
            .await
            .map_err(|source| DbError::Connection {
                what: "privilege check",
                source,
            })?;
        let user = sees.first().and_then(|r| r.text(0)).unwrap_or_default();
        let all = sees
            .first()
            .and_then(|r| r.text(1))
            .is_some_and(|t| t == "t");
        Ok(PgPoller {
            conn: Watched::new(conn, config, heard),
            offset: None,
            hidden: (!all).then(|| {
                format!(
                    "role {user} is neither a superuser nor a member of pg_read_all_stats: other users' statements, clients and start times are hidden (GRANT pg_read_all_stats TO {user})"
                )
            }),
        })
    }

    async fn ping(&mut self) -> Result<(), DbError> {
        self.conn.ping().await
    }

    async fn poll(
        &mut self,
        config: &DbSourceConfig,
        previous: &[DbLock],
    ) -> Result<DbRound, DbError> {
        let mut round = DbRound {
            at_ms: lockscope_core::now_ms(),
            limits: LIMITS.iter().map(|s| s.to_string()).collect(),
            problems: self.hidden.iter().cloned().collect(),
            ..DbRound::default()
        };
        let n = config.max_rows;
        let conn = &mut self.conn;
        let clock = rows::<sqlx::Postgres>(
            conn,
            &mut round,
            "clock",
            "SELECT ROUND(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)".into(),
        )
        .await?
        .unwrap_or_default();
        let measured = clock
            .first()
            .and_then(|r| r.int(0))
            .map(|s| round.at_ms - s);
        let offset = steady_offset(&mut self.offset, measured);
        let shift = |ms: Option<i64>| ms.map(|ms| ms + offset);

        let activity = rows::<sqlx::Postgres>(
            conn,
            &mut round,
            "pg_stat_activity",
            format!(
                "SELECT pid, usename, host(client_addr) || ':' || client_port, application_name, \
                 datname, ROUND(EXTRACT(EPOCH FROM backend_start) * 1000), backend_start::text, \
                 ROUND(EXTRACT(EPOCH FROM xact_start) * 1000), xact_start::text, state, \
                 LEFT(query, 2048), wait_event_type \
                 FROM pg_stat_activity \
                 WHERE (backend_type = 'client backend' OR backend_type IS NULL) \
                 AND pid <> pg_backend_pid() LIMIT {n}"
            ),
        )
        .await?
        .unwrap_or_default();
        let mut facts: HashMap<i64, ConnFacts> = HashMap::new();
        let mut idle = std::collections::BTreeSet::new();
        for r in &activity {
            let Some(pid) = r.int(0) else { continue };
            let statement = r.text(10);
            let xact_started = r.text(8);
            if r.text(9)
                .is_some_and(|s| s.starts_with("idle in transaction"))
            {
                idle.insert(pid);
            }
            facts.insert(
                pid,
                ConnFacts {
                    in_transaction: xact_started.is_some(),
                    statement: statement.clone().unwrap_or_default(),
                    started: r.text(6),
                    xact_started,
                },
            );
            round.connections.push(DbConnection {
                id: pid,
                killed: false,
                view: ConnectionView {
                    user: r.text(1).unwrap_or_default(),
                    client: r.text(2),
                    application: r.text(3).filter(|a| !a.is_empty()),
                    database: r.text(4),
                    connected_since_ms: shift(r.int(5)),
                    state: match (r.text(9), r.text(11)) {
                        (Some(state), Some(wait)) => format!("{state} (waiting: {wait})"),
                        (Some(state), None) => state,
                        (None, _) => "hidden".into(),
                    },
                    statement: statement.map(|s| shorten(s, 1024)),
                    transaction_since_ms: shift(r.int(7)),
                },
            });
        }

        let lock_rows = rows::<sqlx::Postgres>(
            conn,
            &mut round,
            "pg_locks",
            format!(
                "SELECT l.locktype, l.pid, l.mode, l.granted, \
                 ROUND(EXTRACT(EPOCH FROM l.waitstart) * 1000), l.classid, l.objid, l.objsubid, \
                 CASE WHEN l.locktype IN ('tuple', 'relation') AND d.datname = current_database() \
                      THEN l.relation::regclass::text \
                      WHEN l.locktype IN ('tuple', 'relation') THEN l.relation::text END, \
                 l.page, l.tuple, l.transactionid::text, d.datname \
                 FROM pg_locks l LEFT JOIN pg_database d ON d.oid = l.database \
                 WHERE l.pid IS NOT NULL AND l.pid <> pg_backend_pid() AND ( \
                   l.locktype IN ('advisory', 'tuple') \
                   OR (l.locktype = 'transactionid' AND (NOT l.granted OR l.transactionid IN \
                       (SELECT w.transactionid FROM pg_locks w \
                        WHERE w.locktype = 'transactionid' AND NOT w.granted))) \
                   OR (l.locktype = 'relation' AND (l.database, l.relation) IN \
                       (SELECT w.database, w.relation FROM pg_locks w \
                        WHERE w.locktype = 'relation' AND NOT w.granted))) \
                 LIMIT {n}"
            ),
        )
        .await?
        .unwrap_or_default();
        let pg_rows: Vec<PgLockRow> = lock_rows
            .iter()
            .filter_map(|r| {
                Some(PgLockRow {
                    locktype: r.text(0)?,
                    pid: r.int(1)?,
                    mode: r.text(2).unwrap_or_default(),
                    granted: r.text(3).is_some_and(|g| g == "t"),
                    waitstart_ms: shift(r.int(4)),
                    classid: r.int(5),
                    objid: r.int(6),
                    objsubid: r.int(7),
                    relation: r.text(8),
                    page: r.int(9),
                    tuple: r.int(10),
                    transactionid: r.text(11),
                    database: r.text(12),
                })
            })
            .collect();
        let mut locks = advisory_locks(&pg_rows, &facts);
        locks.extend(pg_row_locks(&pg_rows, &facts));
        locks.extend(pg_relation_locks(&pg_rows, &facts, &idle));
        carry_row_locks(previous, &mut locks, |h| {
            h.connection
                .and_then(|pid| facts.get(&pid))
                .is_some_and(|f| f.xact_started.is_some() && f.xact_started == h.version)
        });

        read_lock_tables::<sqlx::Postgres>(
            conn,
            &mut round,
            config,
            Flavor::Postgres,
            table_query,
            shift,
            &mut locks,
        )
        .await?;
        finish(&mut round, locks);
        Ok(round)
    }
}

/// A lock table's read: key and owner bounded ([`bounded_columns`]), the expiry as text, as
/// ms and whether it has passed, and a Spring table's region bounded.
///
/// Spring writes `EXPIRED_AFTER` as a naive UTC time (`LocalDateTime.now(ZoneOffset.UTC)` into
/// `timestamp without time zone`): `EXTRACT(EPOCH FROM …)` of such a value is already its
/// nominal UTC epoch whatever the session's `TimeZone`, but comparing it with `now()` (a
/// `timestamptz`) would convert it from the session's zone, so it is compared with `now() AT
/// TIME ZONE 'UTC'`; and, as Spring's own takeover does (`EXPIRED_AFTER < now`), a row whose
/// expiry is now still holds. ShedLock's `lock_until` is compared with `now()`.
fn table_query(table: &LockTableConfig, kind: ExpiryKind, limit: u32) -> String {
    let name = table
        .parts()
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(".");
    let columns = table.columns(Flavor::Postgres);
    let key = bounded_columns(&format!("\"{}\"::text", columns.key));
    let owner = bounded_columns(&format!("\"{}\"::text", columns.owner));
    match (table.layout(), columns.until) {
        (Some(TableLayout::SpringIntegration), Some(until)) => {
            let region =
                bounded_columns(&format!("\"{}\"::text", columns.region.unwrap_or_default()));
            format!(
                "SELECT {key}, {owner}, \"{until}\"::text, \
                 ROUND(EXTRACT(EPOCH FROM \"{until}\") * 1000), \
                 \"{until}\" < (now() AT TIME ZONE 'UTC'), {region} \
                 FROM {name} LIMIT {limit}"
            )
        }
        (_, Some(until)) => {
            let expiry = ExpirySql::new(Flavor::Postgres, kind, &format!("\"{until}\""));
            let (text, ms, now_ms) = (expiry.text, expiry.ms, expiry.now_ms);
            format!(
                "SELECT {key}, {owner}, {text}, {ms}, {ms} <= {now_ms} FROM {name} LIMIT {limit}"
            )
        }
        (_, None) => format!("SELECT {key}, {owner} FROM {name} LIMIT {limit}"),
    }
}

/// A text value's length in bytes (UTF-8), as the release compares it too.
pub fn length(value: &str) -> String {
    format!("octet_length(convert_to({value}, 'UTF8'))")
}

/// SHA-256 of a text value's UTF-8 bytes, lower-case hex, as the release compares it too.
pub fn digest(value: &str) -> String {
    format!("encode(sha256(convert_to({value}, 'UTF8')), 'hex')")
}

/// The four columns a bounded value is read as ([`super::collect::clipped`]): the value when it
/// is at most [`SHOWN_BYTES`] bytes long, else its first bytes in hex (a cut may split a
/// character, so not as text), its length, and its digest when cut.
fn bounded_columns(value: &str) -> String {
    let (len, n) = (length(value), SHOWN_BYTES);
    format!(
        "CASE WHEN {len} <= {n} THEN {value} END, \
         CASE WHEN {len} > {n} THEN encode(substring(convert_to({value}, 'UTF8') from 1 for {n}), 'hex') END, \
         {len}, CASE WHEN {len} > {n} THEN {} END",
        digest(value)
    )
}
