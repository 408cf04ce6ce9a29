//! MariaDB/MySQL: the connection lockscope observes through and the queries of one round.
//!
//! Set-up (once per connection): `SET SESSION TRANSACTION READ ONLY`, `max_statement_time`
//! (MariaDB; MySQL's `max_execution_time` when that is unknown), `lock_wait_timeout = 1` and
//! `innodb_lock_wait_timeout = 1` (lockscope never waits on anybody's lock). A round runs, at
//! most (5 + lock tables) plain `SELECT`s over the text protocol:
//!
//! 1. the server's clock and `innodb_lock_wait_timeout` (waiters' deadlines);
//! 2. `information_schema.PROCESSLIST` (connections; `GET_LOCK` waiters are in state
//!    `User lock`, their statement names the lock);
//! 3. `INNODB_TRX` (open transactions: their start, the lock each waits for) — needs `PROCESS`;
//! 4. `INNODB_LOCKS` (only when some transaction waits: it lists conflicting locks only);
//! 5. `METADATA_LOCK_INFO` (plugin `metadata_lock_info`: `GET_LOCK` holders, and, only while
//!    some connection is "Waiting for table metadata lock", the tables' metadata locks: the
//!    queue behind an `ALTER TABLE`, [`metadata_locks`]);
//! 6. `performance_schema.session_connect_attrs` (`program_name`: the process a connection
//!    belongs to) of the connections that hold or wait, while `performance_schema` is readable
//!    (once refused, not asked again);
//! 7. each configured lock table.
//!
//! Every value is read as text (bytes) and parsed here, so unusual column types, binary keys
//! and NULLs cannot fail a round.

use std::collections::HashMap;
use std::str::FromStr;

use lockscope_model::database::{
    carry_row_locks, get_lock_locks, innodb_row_locks, metadata_locks, DbLock, InnoLock, InnoTrx,
    MetadataLockHeld, MetadataLockWait, UserLockHeld, UserLockWait,
};
use lockscope_model::wire::ConnectionView;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlSslMode};
use sqlx::{ConnectOptions, Executor};

use lockscope_model::clip::SHOWN_BYTES;

use super::collect::{
    finish, read_lock_tables, rows, shorten, steady_offset, Poller, TextRow, Watched,
};
use super::config::{DbSourceConfig, Flavor, LockTableConfig, TableLayout, TlsMode};
use super::error::DbError;
use super::expiry::{ExpiryKind, ExpirySql};
use super::{DbConnection, DbRound};

/// What MariaDB cannot show, listed on the source.
pub const LIMITS: &[&str] = &[
    "Row locks are listed only while someone waits for them (INNODB_LOCKS shows conflicting locks only): an uncontended SELECT … FOR UPDATE holder is invisible, and a row lock nobody waits on any more is kept as 'holder unconfirmed' while its holder's transaction is open.",
    "MariaDB does not tell when a connection started; which program opened it only with performance_schema on (its program_name connection attribute).",
    "A table's metadata-lock queue is listed only while someone waits; MariaDB's process list does not name the table a waiter wants, so it is read from the waiter's statement (a statement naming several locked tables goes to /table_locks/?).",
];

/// The process-list state of a connection queued for a table's metadata lock.
const MDL_WAIT: &str = "Waiting for table metadata lock";

const NO_MDL_PLUGIN: &str = "GET_LOCK holders are not visible: the metadata_lock_info plugin is not loaded (INSTALL SONAME 'metadata_lock_info'); waiters still are.";

pub struct MysqlPoller {
    conn: Watched<MySqlConnection>,
    /// The server clock's offset applied ([`steady_offset`]).
    offset: Option<i64>,
    /// `performance_schema.session_connect_attrs` answered (or was not tried yet).
    attrs: bool,
}

/// Opens a connection (not a pool) under the statement timeout; `observe`: set up for
/// observing only (read-only, never waiting on a lock), else for a force release.
pub async fn connect(config: &DbSourceConfig, observe: bool) -> Result<MySqlConnection, DbError> {
    let url = config.connect_url();
    let connect_error = |source| super::error::connect_error(config, source);
    let mut options = MySqlConnectOptions::from_str(&url)
        .map_err(connect_error)?
        .statement_cache_capacity(16);
    if let Some(mode) = config.effective_tls_mode() {
        options = options.ssl_mode(match mode {
            TlsMode::Disable => MySqlSslMode::Disabled,
            TlsMode::Prefer => MySqlSslMode::Preferred,
            TlsMode::Require => MySqlSslMode::Required,
            TlsMode::VerifyCa => MySqlSslMode::VerifyCa,
            TlsMode::VerifyFull => MySqlSslMode::VerifyIdentity,
        });
    }
    if let Some(ca) = &config.tls_ca_file {
        options = options.ssl_ca(ca);
    }
    if let (Some(cert), Some(key)) = (&config.tls_cert_file, &config.tls_key_file) {
        options = options.ssl_client_cert(cert).ssl_client_key(key);
    }
    let mut conn = options.connect().await.map_err(connect_error)?;
    let timeout = config.statement_timeout;
    // MariaDB counts max_statement_time in seconds (fractions allowed), MySQL its
    // max_execution_time in ms; one of them exists.
    let mariadb = format!(
        "SET SESSION max_statement_time = {:.3}",
        timeout.as_secs_f64()
    );
    if conn.execute(mariadb.as_str()).await.is_err() {
        let mysql = format!("SET SESSION max_execution_time = {}", timeout.as_millis());
        let _ = conn.execute(mysql.as_str()).await;
    }
    let setups: &[&str] = if observe {
        &[
            "SET SESSION TRANSACTION READ ONLY",
            "SET SESSION lock_wait_timeout = 1",
            "SET SESSION innodb_lock_wait_timeout = 1",
        ]
    } else {
        &[
            "SET SESSION lock_wait_timeout = 2",
            "SET SESSION innodb_lock_wait_timeout = 2",
        ]
    };
    for setup in setups {
        conn.execute(*setup)
            .await
            .map_err(|source| DbError::Connection {
                what: "session set-up",
                source,
            })?;
    }
    Ok(conn)
}

impl Poller for MysqlPoller {
    async fn connect(
        config: &DbSourceConfig,
        heard: lockscope_core::collect::Heard,
    ) -> Result<Self, DbError> {
        Ok(MysqlPoller {
            conn: Watched::new(connect(config, true).await?, config, heard),
            offset: None,
            attrs: true,
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
            ..DbRound::default()
        };
        let n = config.max_rows;
        let conn = &mut self.conn;
        // 1. The server's clock (its times are shifted onto lockscope's) and the lock wait
        // timeout waiters get.
        let clock = rows::<sqlx::MySql>(
            conn,
            &mut round,
            "clock",
            "SELECT ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000), @@GLOBAL.innodb_lock_wait_timeout".into(),
        )
        .await?
        .unwrap_or_default();
        let server_ms = clock.first().and_then(|r| r.int(0));
        let offset = steady_offset(&mut self.offset, server_ms.map(|s| round.at_ms - s));
        let lock_wait_timeout_ms = clock.first().and_then(|r| r.int(1)).map(|s| s * 1000);
        let shift = |ms: Option<i64>| ms.map(|ms| ms + offset);

        // 2. Connections.
        let processes = rows::<sqlx::MySql>(
            conn,
            &mut round,
            "information_schema.PROCESSLIST",
            format!(
                "SELECT ID, USER, HOST, DB, COMMAND, TIME_MS, STATE, LEFT(INFO, 2048) \
                 FROM information_schema.PROCESSLIST \
                 WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Daemon' LIMIT {n}"
            ),
        )
        .await?
        .unwrap_or_default();

        // 3. Open transactions.
        let trx_rows = rows::<sqlx::MySql>(
            conn,
            &mut round,
            "information_schema.INNODB_TRX",
            format!(
                "SELECT trx_id, trx_mysql_thread_id, CAST(trx_started AS CHAR), \
                 ROUND(UNIX_TIMESTAMP(trx_started) * 1000), \
                 ROUND(UNIX_TIMESTAMP(trx_wait_started) * 1000), trx_requested_lock_id \
                 FROM information_schema.INNODB_TRX LIMIT {n}"
            ),
        )
        .await?;
        let trx_visible = trx_rows.is_some();
        let trxs: Vec<InnoTrx> = trx_rows
            .unwrap_or_default()
            .iter()
            .filter_map(|r| {
                Some(InnoTrx {
                    trx_id: r.text(0)?,
                    thread: r.int(1)?,
                    started: r.text(2),
                    started_ms: shift(r.int(3)),
                    wait_started_ms: shift(r.int(4)),
                    requested_lock: r.text(5),
                })
            })
            .collect();

        // 4. Conflicting locks, when anybody waits.
        let mut locks: Vec<DbLock> = Vec::new();
        if trxs.iter().any(|t| t.requested_lock.is_some()) {
            let inno = rows::<sqlx::MySql>(
                conn,
                &mut round,
                "information_schema.INNODB_LOCKS",
                format!(
                    "SELECT lock_id, lock_trx_id, lock_mode, lock_type, lock_table, lock_index, \
                     lock_data FROM information_schema.INNODB_LOCKS LIMIT {n}"
                ),
            )
            .await?
            .unwrap_or_default();
            let inno: Vec<InnoLock> = inno
                .iter()
                .filter_map(|r| {
                    Some(InnoLock {
                        lock_id: r.text(0)?,
                        trx_id: r.text(1)?,
                        mode: r.text(2).unwrap_or_default(),
                        lock_type: r.text(3).unwrap_or_default(),
                        table: r.text(4).unwrap_or_default(),
                        index: r.text(5),
                        data: r.cell(6),
                    })
                })
                .collect();
            locks.extend(innodb_row_locks(&inno, &trxs, lock_wait_timeout_ms));
        }
        if trx_visible {
            let open: HashMap<String, Option<String>> = trxs
                .iter()
                .map(|t| (format!("trx {}", t.trx_id), t.started.clone()))
                .collect();
            carry_row_locks(previous, &mut locks, |h| {
                open.get(&h.id).is_some_and(|started| *started == h.version)
            });
        }

        // 5. GET_LOCK holders (plugin), waiters (process list); tables' metadata locks while
        // somebody queues for one.
        let mdl_queued = processes
            .iter()
            .any(|r| r.text(6).is_some_and(|s| s == MDL_WAIT));
        let types = if mdl_queued {
            "LOCK_TYPE IN ('User lock', 'Table metadata lock')"
        } else {
            "LOCK_TYPE = 'User lock'"
        };
        let held = rows::<sqlx::MySql>(
            conn,
            &mut round,
            "information_schema.METADATA_LOCK_INFO",
            format!(
                "SELECT THREAD_ID, TABLE_SCHEMA, LOCK_TYPE, LOCK_MODE, TABLE_NAME \
                 FROM information_schema.METADATA_LOCK_INFO WHERE {types} LIMIT {n}"
            ),
        )
        .await?;
        if held.is_none()
            && round
                .problems
                .last()
                .is_some_and(|p| p.contains("Unknown table"))
        {
            // Not a failure: the plugin is simply not there.
            round.problems.pop();
            round.limits.push(NO_MDL_PLUGIN.to_string());
        }
        let held = held.unwrap_or_default();
        let table_held: Vec<MetadataLockHeld> = held
            .iter()
            .filter(|r| r.text(2).is_some_and(|t| t == "Table metadata lock"))
            .filter_map(|r| {
                Some(MetadataLockHeld {
                    connection: r.int(0)?,
                    mode: r.text(3).unwrap_or_default(),
                    schema: r.text(1)?,
                    table: r.text(4)?,
                })
            })
            .collect();
        let held: Vec<UserLockHeld> = held
            .iter()
            .filter(|r| r.text(2).is_none_or(|t| t == "User lock"))
            .filter_map(|r| {
                Some(UserLockHeld {
                    thread: r.int(0)?,
                    name: r.cell(1)?,
                })
            })
            .collect();

        let trx_of: HashMap<i64, &InnoTrx> = trxs.iter().map(|t| (t.thread, t)).collect();
        let mut waits = Vec::new();
        let mut mdl_waits = Vec::new();
        let mut idle = std::collections::BTreeSet::new();
        for r in &processes {
            let Some(id) = r.int(0) else { continue };
            let command = r.text(4).unwrap_or_default();
            let state = r.text(6).unwrap_or_default();
            let statement = r.text(7);
            let waited_ms = r.int(5);
            if state == "User lock" {
                waits.push(UserLockWait {
                    thread: id,
                    statement: statement.clone().unwrap_or_default(),
                    since_ms: waited_ms.map(|w| round.at_ms - w),
                });
            }
            if state == MDL_WAIT {
                mdl_waits.push(MetadataLockWait {
                    connection: id,
                    table: None,
                    schema: r.text(3),
                    statement: statement.clone().unwrap_or_default(),
                    since_ms: waited_ms.map(|w| round.at_ms - w),
                    mode: None,
                });
            }
            if command == "Sleep" && trx_of.contains_key(&id) {
                idle.insert(id);
            }
            let state_text = if state.is_empty() {
                command.clone()
            } else {
                format!("{command}: {state}")
            };
            round.connections.push(DbConnection {
                id,
                killed: command == "Killed",
                view: ConnectionView {
                    user: r.text(1).unwrap_or_default(),
                    client: r.text(2).filter(|h| !h.is_empty()),
                    application: None,
                    database: r.text(3),
                    connected_since_ms: None,
                    state: state_text,
                    statement: statement.map(|s| shorten(s, 1024)),
                    transaction_since_ms: trx_of.get(&id).and_then(|t| t.started_ms),
                },
            });
        }
        locks.extend(get_lock_locks(&held, &waits));
        if !mdl_waits.is_empty() {
            locks.extend(metadata_locks(&table_held, &mdl_waits, &idle));
        }

        // 6. Which program each connection holding or waiting is (performance_schema, when
        // on): only those, so a thousand idle connections cost nothing here.
        let participants: std::collections::BTreeSet<i64> = locks
            .iter()
            .flat_map(|l| l.holders.iter().chain(&l.waiters))
            .filter_map(|p| p.connection)
            .collect();
        if self.attrs && !participants.is_empty() {
            let ids: Vec<String> = participants.iter().map(i64::to_string).collect();
            let attrs = rows::<sqlx::MySql>(
                conn,
                &mut round,
                "performance_schema.session_connect_attrs",
                format!(
                    "SELECT PROCESSLIST_ID, ATTR_VALUE FROM performance_schema.session_connect_attrs \
                     WHERE ATTR_NAME = 'program_name' AND PROCESSLIST_ID IN ({}) LIMIT {n}",
                    ids.join(",")
                ),
            )
            .await?;
            match attrs {
                Some(attrs) => {
                    let programs: HashMap<i64, String> = attrs
                        .iter()
                        .filter_map(|r| Some((r.int(0)?, r.text(1)?)))
                        .filter(|(_, p)| !p.is_empty())
                        .collect();
                    for c in &mut round.connections {
                        if let Some(program) = programs.get(&c.id) {
                            c.view.application = Some(program.clone());
                        }
                    }
                }
                None => {
                    // performance_schema off or not readable: a limit, not a failure.
                    round.problems.pop();
                    self.attrs = false;
                }
            }
        }
        if !self.attrs {
            round.limits.push(
                "Which program opened a connection is not shown: performance_schema.session_connect_attrs cannot be read (start the server with performance_schema=ON and GRANT SELECT ON performance_schema.* to the observer).".into(),
            );
        }

        // 7. Lock tables.
        read_lock_tables::<sqlx::MySql>(
            conn,
            &mut round,
            config,
            Flavor::Mysql,
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
/// `DATETIME(6)`, which MariaDB never converts): its epoch is computed without the session's
/// `time_zone` (`TIMESTAMPDIFF` from the epoch, not `UNIX_TIMESTAMP`, which reads a `DATETIME`
/// in the session's zone), and it is compared with `UTC_TIMESTAMP(6)`, not `NOW()`; as Spring's
/// takeover does (`EXPIRED_AFTER < now`), a row whose expiry is now still holds.
fn table_query(table: &LockTableConfig, kind: ExpiryKind, limit: u32) -> String {
    let name = table
        .parts()
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(".");
    let columns = table.columns(Flavor::Mysql);
    let key = bounded_columns(&format!("CAST(`{}` AS BINARY)", columns.key));
    let owner = bounded_columns(&format!("CAST(`{}` AS BINARY)", columns.owner));
    match (table.layout(), columns.until) {
        (Some(TableLayout::SpringIntegration), Some(until)) => {
            let region = bounded_columns(&format!(
                "CAST(`{}` AS BINARY)",
                columns.region.unwrap_or_default()
            ));
            format!(
                "SELECT {key}, {owner}, CAST(`{until}` AS CHAR), \
                 ROUND(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', `{until}`) / 1000), \
                 `{until}` < UTC_TIMESTAMP(6), {region} FROM {name} LIMIT {limit}"
            )
        }
        (_, Some(until)) => {
            let expiry = ExpirySql::new(Flavor::Mysql, kind, &format!("`{until}`"));
            let (text, ms, now_ms) = (expiry.text, expiry.ms, expiry.now_ms);
            format!(
                "SELECT {key}, {owner}, {text}, {ms}, {ms} <= {now_ms} FROM {name} LIMIT {limit}"
            )
        }
        (_, None) => format!("SELECT {key}, {owner} FROM {name} LIMIT {limit}"),
    }
}

/// A value's length in bytes, as the release compares it too.
pub fn length(value: &str) -> String {
    format!("LENGTH({value})")
}

/// SHA-256 of a value, lower-case hex, as the release compares it too.
pub fn digest(value: &str) -> String {
    format!("SHA2({value}, 256)")
}

/// The four columns a bounded value is read as ([`super::collect::clipped`]): the value when it
/// is at most [`SHOWN_BYTES`] long, else its first bytes in hex, its length, and its digest
/// when cut. A megabyte owner costs the server one digest and lockscope a few kB.
fn bounded_columns(value: &str) -> String {
    let (len, n) = (length(value), SHOWN_BYTES);
    format!(
        "IF({len} <= {n}, {value}, NULL), IF({len} > {n}, HEX(SUBSTRING({value}, 1, {n})), NULL), \
         {len}, IF({len} > {n}, {}, NULL)",
        digest(value)
    )
}
