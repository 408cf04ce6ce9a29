//! Force release of a database lock, guarded like every other: nothing changes unless the
//! holder is still exactly what the operator saw.
//!
//! * A lock-table row is deleted only if it still names the same key and owner; a row with an
//!   expiry column gets its expiry set to now instead (as ShedLock's maintainers recommend:
//!   deleting breaks its insert cache), only if the expiry is still the one seen and has not
//!   passed. A key or owner lockscope showed cut (longer than a few kB, see
//!   `lockscope_model::clip`) is compared by its byte length and SHA-256, computed by the
//!   database in the same statement.
//! * A Spring Integration lock row (`layout = "spring_integration"`) is deleted — what its
//!   holder's unlock does — only if region, lock key, `CLIENT_ID` and `EXPIRED_AFTER` are still
//!   the ones seen and the expiry has not passed ([`spring_row`]).
//! * A row lock, `GET_LOCK` lock or advisory lock is held by a connection: the connection is
//!   terminated (`KILL CONNECTION` / `pg_terminate_backend`) only if it is still the same one
//!   and still holds the lock. PostgreSQL checks in the one statement that terminates: an
//!   advisory lock by the same `backend_start` and a granted `pg_locks` row of that key; a row
//!   lock by the same `xact_start` and a granted `transactionid` lock of the holder on the
//!   transaction id that locks the row now (the row's `xmax`, or the transaction id waited on),
//!   so a holder that rolled back to a savepoint (and lost the row) is not killed. MariaDB
//!   checks `IS_USED_LOCK` / `INNODB_TRX` and then kills in a second statement (it has no
//!   conditional kill): the window between them is one round trip.
//!   Killing a connection rolls back its open transaction and releases every lock it holds;
//!   the database then wakes the waiters itself.
//! * Every connection a release opens gives up after [`RELEASE_CONNECT_TIMEOUT`], every
//!   statement after [`RELEASE_COMMAND_TIMEOUT`] (then the release fails, saying whether
//!   anything may have changed).

use lockscope_model::clip::parse_cut;
use lockscope_model::database::{spring_lock_parts, AdvisoryKey, DbRecipe, GET_LOCK_UNKNOWN};
use lockscope_model::redis::parse_display_bytes;
use lockscope_model::wire::{HolderView, LockView};
use serde_json::{json, Value};
use sqlx::{Executor, Row};

use super::config::{DbSourceConfig, Flavor, TableLayout};
use super::expiry::{ExpiryKind, ExpirySql};
use super::state::DbSourceState;
use lockscope_core::release::{Outcome, RELEASE_COMMAND_TIMEOUT, RELEASE_CONNECT_TIMEOUT};

/// What killing a connection does, said with every such release.
pub const KILL_EFFECT: &str = "terminating the connection rolls back its open transaction (uncommitted work is lost) and releases every lock it holds, not only this one";

/// Releases `holder` of `lock` in the database of `config`.
pub async fn release(
    config: &DbSourceConfig,
    flavor: Flavor,
    lock: &LockView,
    holder: &HolderView,
    version: Option<&str>,
) -> Outcome {
    let Some(recipe) = DbRecipe::parse(&lock.recipe) else {
        return Outcome::Unsupported(format!("a {} lock cannot be force-released", lock.recipe));
    };
    let result = if !recipe.held_by_connection() {
        match DbSourceState::table_of(config, &lock.path) {
            Some((table, rest)) if table.layout() == Some(TableLayout::SpringIntegration) => {
                spring_row(config, flavor, table, &rest, holder, version).await
            }
            Some((table, key)) => table_row(config, flavor, table, &key, holder, version).await,
            None => {
                return Outcome::Unsupported(format!(
                    "{} is not in a configured lock table",
                    lock.path
                ))
            }
        }
    } else {
        let Some(connection) = holder.session.parse::<i64>().ok() else {
            return Outcome::Unsupported(format!(
                "{} names no connection to terminate",
                holder.node
            ));
        };
        kill(config, flavor, lock, recipe, holder, connection, version).await
    };
    result.unwrap_or_else(Outcome::Failed)
}

/// How a release matches a lock-table value it saw: whole, or — when lockscope showed it cut
/// ([`lockscope_model::clip`]) — by its length and SHA-256, which the collector read with it.
enum Match {
    Whole(Vec<u8>),
    Cut { len: i64, sha256: String },
}

impl Match {
    fn of(shown: &str) -> Result<Match, Outcome> {
        let Some(cut) = parse_cut(shown) else {
            return Ok(Match::Whole(parse_display_bytes(shown)));
        };
        match (i64::try_from(cut.len), cut.sha256) {
            (Ok(len), Some(sha256)) => Ok(Match::Cut { len, sha256 }),
            _ => Err(Outcome::Unsupported(
                "a value shown cut without its digest cannot be compared".into(),
            )),
        }
    }

    fn is_cut(&self) -> bool {
        matches!(self, Match::Cut { .. })
    }
}

/// A statement's conditions and their values, in order, for either dialect.
struct Conditions {
    flavor: Flavor,
    sql: Vec<String>,
    binds: Vec<Bind>,
}

enum Bind {
    Bytes(Vec<u8>),
    Text(String),
    Int(i64),
}

impl Conditions {
    fn new(flavor: Flavor) -> Self {
        Conditions {
            flavor,
            sql: Vec::new(),
            binds: Vec::new(),
        }
    }

    /// The next placeholder.
    fn arg(&mut self, bind: Bind) -> String {
        self.binds.push(bind);
        match self.flavor {
            Flavor::Mysql => "?".into(),
            Flavor::Postgres => format!("${}", self.binds.len()),
        }
    }

    /// `column` matches `seen`; `nullable`: a NULL owner matches an empty one as the collector
    /// showed it (MariaDB `<=>`, PostgreSQL `IS NOT DISTINCT FROM`).
    fn value(&mut self, column: &str, seen: &Match, nullable: bool) {
        let (value, length, digest) = match self.flavor {
            Flavor::Mysql => {
                let v = format!("CAST(`{column}` AS BINARY)");
                (
                    v.clone(),
                    super::mysql::length(&v),
                    super::mysql::digest(&v),
                )
            }
            Flavor::Postgres => {
                let v = format!("\"{column}\"::text");
                (
                    v.clone(),
                    super::postgres::length(&v),
                    super::postgres::digest(&v),
                )
            }
        };
        let condition = match seen {
            Match::Whole(bytes) => {
                let bind = match self.flavor {
                    Flavor::Mysql => Bind::Bytes(bytes.clone()),
                    Flavor::Postgres => Bind::Text(String::from_utf8_lossy(bytes).into_owned()),
                };
                let arg = self.arg(bind);
                match (self.flavor, nullable) {
                    (_, false) => format!("{value} = {arg}"),
                    (Flavor::Mysql, true) => format!("{value} <=> {arg}"),
                    (Flavor::Postgres, true) => format!("{value} IS NOT DISTINCT FROM {arg}"),
                }
            }
            Match::Cut { len, sha256 } => {
                let (len, sha256) = (
                    self.arg(Bind::Int(*len)),
                    self.arg(Bind::Text(sha256.clone())),
                );
                format!("{length} = {len} AND {digest} = {sha256}")
            }
        };
        self.sql.push(condition);
    }

    fn push(&mut self, condition: String) {
        self.sql.push(condition);
    }

    fn joined(&self) -> String {
        self.sql.join(" AND ")
    }
}

async fn table_row(
    config: &DbSourceConfig,
    flavor: Flavor,
    table: &super::LockTableConfig,
    key: &str,
    holder: &HolderView,
    version: Option<&str>,
) -> Result<Outcome, String> {
    if table.columns(flavor).until.is_some() && version.is_none() {
        return Ok(Outcome::Unsupported(
            "releasing a row with an expiry needs the expiry you saw (the holder's version)".into(),
        ));
    }
    let (key_seen, owner_seen) = match (Match::of(key), Match::of(&holder.node)) {
        (Ok(k), Ok(o)) => (k, o),
        (Err(refused), _) | (_, Err(refused)) => return Ok(refused),
    };
    let cut = key_seen.is_cut() || owner_seen.is_cut();
    let columns = table.columns(flavor);
    let (k, o) = (columns.key, columns.owner);
    let mut when = Conditions::new(flavor);
    when.value(k, &key_seen, false);
    when.value(o, &owner_seen, true);
    let quote = match flavor {
        Flavor::Mysql => '`',
        Flavor::Postgres => '"',
    };
    let name = quoted(&table.parts(), quote);
    let sql = match columns.until {
        Some(u) => {
            // The column is read as the collector read it: as its type says.
            let type_name = catalog_type(
                config,
                flavor,
                &crate::expiry::catalog_query(flavor, table, u),
            )
            .await?;
            let kind = match type_name {
                None => ExpiryKind::Instant,
                Some(t) => match ExpiryKind::of_type(&t, table.unit(), &table.table, u) {
                    Ok(kind) => kind,
                    Err(problem) => return Ok(Outcome::Unsupported(problem)),
                },
            };
            let column = format!("{quote}{u}{quote}");
            let expiry = ExpirySql::new(flavor, kind, &column);
            let seen = when.arg(Bind::Text(version.unwrap_or_default().to_string()));
            when.push(format!(
                "{} = {seen} AND {} > {}",
                expiry.text, expiry.ms, expiry.now_ms
            ));
            format!(
                "UPDATE {name} SET {column} = {} WHERE {}",
                expiry.set_now,
                when.joined()
            )
        }
        None => format!("DELETE FROM {name} WHERE {}", when.joined()),
    };
    let statement = match columns.until {
        Some(_) => format!("UPDATE {name}"),
        None => format!("DELETE FROM {name}"),
    };
    let affected = execute(config, flavor, &statement, &sql, when.binds).await?;
    let action = if columns.until.is_some() {
        "expiry set to now"
    } else {
        "row deleted"
    };
    let mut detail = json!({
        "table": table.table,
        "key": key,
        "owner": holder.node,
        "seen_until": version,
    });
    if cut {
        detail = with(
            detail,
            "compared",
            "a value shown cut was compared by its length and SHA-256".into(),
        );
    }
    Ok(if affected == 1 {
        Outcome::Released(with(detail, "action", action.into()))
    } else {
        Outcome::HolderChanged(with(
            detail,
            "message",
            "the row no longer holds what you saw (another owner, another expiry, expired or gone)"
                .into(),
        ))
    })
}

/// What a forced release of a Spring lock does to its holder, said with every such release.
pub const SPRING_EFFECT: &str = "the row is deleted: a polling JdbcLockRegistry takes the lock within its idle time (100 ms by default); the evicted holder is not told, its next renew fails and its unlock throws ConcurrentModificationException";

/// A Spring Integration lock (`DefaultLockRepository`'s row): compare-and-delete exactly the row
/// seen — `DELETE FROM <t> WHERE REGION = ? AND LOCK_KEY = ? AND CLIENT_ID = ? AND
/// EXPIRED_AFTER = <seen>` — and only while it has not expired (`EXPIRED_AFTER` at or after the
/// database's UTC now, as Spring's own takeover counts it); one row deleted or the holder
/// changed. Deleting is what the holder's own unlock does, so the library's invariants hold:
/// nothing is written that a registry would read as its own, and there is nobody to wake
/// (waiters poll). `rest` is the lock's path after `/tables/<table>/`.
///
/// On MariaDB, `REGION` and `LOCK_KEY` are also compared as the columns are (the primary key,
/// so the delete locks that one row, not every row it would scan under REPEATABLE READ), besides
/// byte for byte (the columns' collation may ignore case).
async fn spring_row(
    config: &DbSourceConfig,
    flavor: Flavor,
    table: &super::LockTableConfig,
    rest: &str,
    holder: &HolderView,
    version: Option<&str>,
) -> Result<Outcome, String> {
    let Some(version) = version else {
        return Ok(Outcome::Unsupported(
            "releasing a Spring lock needs the EXPIRED_AFTER you saw (the holder's version)".into(),
        ));
    };
    let (region, key) = match spring_lock_parts(rest, table.spring_names()) {
        Ok(parts) => parts,
        Err(why) => return Ok(Outcome::Unsupported(why)),
    };
    let seen = match (Match::of(&region), Match::of(&key), Match::of(&holder.node)) {
        (Ok(r), Ok(k), Ok(c)) => [r, k, c],
        (Err(refused), _, _) | (_, Err(refused), _) | (_, _, Err(refused)) => return Ok(refused),
    };
    let columns = table.columns(flavor);
    let (Some(until), Some(region_column)) = (columns.until, columns.region) else {
        return Ok(Outcome::Unsupported(
            "this table names no expiry or region column".into(),
        ));
    };
    let mut when = Conditions::new(flavor);
    if flavor == Flavor::Mysql {
        for (column, value) in [(region_column, &seen[0]), (columns.key, &seen[1])] {
            if let Match::Whole(bytes) = value {
                if let Ok(text) = std::str::from_utf8(bytes) {
                    let arg = when.arg(Bind::Text(text.to_string()));
                    when.push(format!("`{column}` = {arg}"));
                }
            }
        }
    }
    when.value(region_column, &seen[0], false);
    when.value(columns.key, &seen[1], false);
    when.value(columns.owner, &seen[2], true);
    let expiry = when.arg(Bind::Text(version.to_string()));
    let (name, sql) = match flavor {
        Flavor::Mysql => {
            when.push(format!(
                "CAST(`{until}` AS CHAR) = {expiry} AND `{until}` >= UTC_TIMESTAMP(6)"
            ));
            let name = quoted(&table.parts(), '`');
            let sql = format!("DELETE FROM {name} WHERE {}", when.joined());
            (name, sql)
        }
        Flavor::Postgres => {
            when.push(format!(
                "\"{until}\"::text = {expiry} AND \"{until}\" >= (now() AT TIME ZONE 'UTC')"
            ));
            let name = quoted(&table.parts(), '"');
            let sql = format!("DELETE FROM {name} WHERE {}", when.joined());
            (name, sql)
        }
    };
    let affected = execute(
        config,
        flavor,
        &format!("DELETE FROM {name}"),
        &sql,
        when.binds,
    )
    .await?;
    let detail = json!({
        "table": table.table,
        "region": region,
        "lock_key": key,
        "owner": holder.node,
        "seen_until": version,
        "effect": SPRING_EFFECT,
    });
    Ok(if affected == 1 {
        Outcome::Released(with(detail, "action", "row deleted".into()))
    } else {
        Outcome::HolderChanged(with(
            detail,
            "message",
            "the row no longer holds what you saw (another client, a renewed or passed expiry, or gone)".into(),
        ))
    })
}

/// Runs one changing statement with `binds` on a release connection: the rows it affected.
async fn execute(
    config: &DbSourceConfig,
    flavor: Flavor,
    statement: &str,
    sql: &str,
    binds: Vec<Bind>,
) -> Result<u64, String> {
    Ok(match flavor {
        Flavor::Mysql => {
            let mut conn = connect_bounded(super::mysql::connect(config, false)).await?;
            let mut q = sqlx::query(sql);
            for bind in binds {
                q = match bind {
                    Bind::Bytes(b) => q.bind(b),
                    Bind::Text(t) => q.bind(t),
                    Bind::Int(i) => q.bind(i),
                };
            }
            bounded_change(statement, conn.execute(q))
                .await?
                .rows_affected()
        }
        Flavor::Postgres => {
            let mut conn = connect_bounded(super::postgres::connect(config, false)).await?;
            let mut q = sqlx::query(sql);
            for bind in binds {
                q = match bind {
                    Bind::Bytes(b) => q.bind(String::from_utf8_lossy(&b).into_owned()),
                    Bind::Text(t) => q.bind(t),
                    Bind::Int(i) => q.bind(i),
                };
            }
            bounded_change(statement, conn.execute(q))
                .await?
                .rows_affected()
        }
    })
}

/// The one text value `sql` answers (a catalog read), `None` without a row.
async fn catalog_type(
    config: &DbSourceConfig,
    flavor: Flavor,
    sql: &str,
) -> Result<Option<String>, String> {
    let what = "the expiry column's type";
    let row = match flavor {
        Flavor::Mysql => {
            let mut conn = connect_bounded(super::mysql::connect(config, false)).await?;
            bounded_read(what, conn.fetch_optional(sqlx::query(sql)))
                .await?
                .map(|r| {
                    r.try_get::<Vec<u8>, _>(0)
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                        .or_else(|_| r.try_get::<String, _>(0))
                        .unwrap_or_default()
                })
        }
        Flavor::Postgres => {
            let mut conn = connect_bounded(super::postgres::connect(config, false)).await?;
            bounded_read(what, conn.fetch_optional(sqlx::query(sql)))
                .await?
                .map(|r| r.try_get::<String, _>(0).unwrap_or_default())
        }
    };
    Ok(row)
}

/// Connects for a release within [`RELEASE_CONNECT_TIMEOUT`].
async fn connect_bounded<C>(
    connecting: impl std::future::Future<Output = Result<C, super::DbError>>,
) -> Result<C, String> {
    match tokio::time::timeout(RELEASE_CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(format!("{e}; nothing was changed")),
        Err(_) => Err(format!(
            "connect: no answer within {RELEASE_CONNECT_TIMEOUT:?}; nothing was changed"
        )),
    }
}

/// The grant a refused release statement needs, when the server refused it for want of one
/// (the statement then changed nothing).
fn privilege_hint(error: &sqlx::Error) -> &'static str {
    let sqlx::Error::Database(db) = error else {
        return "";
    };
    let message = db.message();
    if message.contains("not owner of thread") {
        // MariaDB ER_KILL_DENIED_ERROR.
        " (killing another user's connection needs CONNECTION ADMIN, or SUPER before MariaDB 10.5: GRANT CONNECTION ADMIN ON *.* TO …; nothing was changed)"
    } else if message.contains("permission denied to terminate process")
        || message.contains("member of pg_signal_backend")
    {
        // PostgreSQL 16+ / 15, for another role's backend.
        " (terminating another role's backend needs pg_signal_backend: GRANT pg_signal_backend TO …; nothing was changed)"
    } else if message.contains("command denied") || message.contains("permission denied for table")
    {
        // MariaDB ER_TABLEACCESS_DENIED_ERROR, PostgreSQL insufficient_privilege.
        " (a lock-table release needs DELETE on the table, and UPDATE when it has an expiry column: GRANT SELECT, DELETE, UPDATE ON <table> TO …; nothing was changed)"
    } else {
        ""
    }
}

/// A statement that only reads, within [`RELEASE_COMMAND_TIMEOUT`]: nothing changed if it fails.
async fn bounded_read<T>(
    what: &str,
    statement: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, String> {
    bounded(
        what,
        statement,
        "; nothing was changed",
        "nothing was changed",
    )
    .await
}

/// A statement that may change something, within [`RELEASE_COMMAND_TIMEOUT`]; a timeout says
/// the change is unknown (the server may still run it).
async fn bounded_change<T>(
    what: &str,
    statement: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, String> {
    bounded(what, statement, "", "it may or may not have taken effect").await
}

/// `statement` within [`RELEASE_COMMAND_TIMEOUT`]; an error is followed by `after_error`, a
/// timeout says `after_timeout`.
async fn bounded<T>(
    what: &str,
    statement: impl std::future::Future<Output = Result<T, sqlx::Error>>,
    after_error: &str,
    after_timeout: &str,
) -> Result<T, String> {
    match tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, statement).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what}: {e}{}{after_error}", privilege_hint(&e))),
        Err(_) => Err(format!(
            "{what}: no answer within {RELEASE_COMMAND_TIMEOUT:?}; {after_timeout}"
        )),
    }
}

async fn kill(
    config: &DbSourceConfig,
    flavor: Flavor,
    lock: &LockView,
    recipe: DbRecipe,
    holder: &HolderView,
    connection: i64,
    version: Option<&str>,
) -> Result<Outcome, String> {
    let detail = json!({
        "connection": connection,
        "holder": holder.node,
        "seen": version,
        "effect": KILL_EFFECT,
    });
    let changed =
        |message: &str| Outcome::HolderChanged(with(detail.clone(), "message", message.into()));
    match flavor {
        Flavor::Mysql => {
            let mut conn = connect_bounded(super::mysql::connect(config, false)).await?;
            let still = if recipe == DbRecipe::GetLock {
                let name = lock.path.strip_prefix("/get_lock/");
                let Some(name) = name.filter(|_| lock.path != GET_LOCK_UNKNOWN) else {
                    return Ok(Outcome::Unsupported("the lock's name is not known".into()));
                };
                let row = bounded_read(
                    "IS_USED_LOCK",
                    conn.fetch_one(
                        sqlx::query("SELECT IS_USED_LOCK(?)").bind(parse_display_bytes(name)),
                    ),
                )
                .await?;
                row.try_get::<Option<i64>, _>(0).ok().flatten().or_else(|| {
                    row.try_get::<Option<u64>, _>(0)
                        .ok()
                        .flatten()
                        .map(|v| v as i64)
                }) == Some(connection)
            } else if recipe == DbRecipe::TableLock {
                // A table's metadata lock: the same connection still holds one on that table.
                let rest = lock.path.strip_prefix("/table_locks/").unwrap_or_default();
                let Some((schema, table)) = rest.split_once('/') else {
                    return Ok(Outcome::Unsupported(format!(
                        "{} names no table",
                        lock.path
                    )));
                };
                let row = bounded_read(
                    "METADATA_LOCK_INFO",
                    conn.fetch_one(
                        sqlx::query(
                            "SELECT COUNT(*) FROM information_schema.METADATA_LOCK_INFO \
                             WHERE THREAD_ID = ? AND LOCK_TYPE = 'Table metadata lock' \
                             AND TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                        )
                        .bind(connection)
                        .bind(schema.to_string())
                        .bind(table.to_string()),
                    ),
                )
                .await?;
                row.try_get::<i64, _>(0).unwrap_or(0) >= 1
            } else {
                let Some(version) = version else {
                    return Ok(Outcome::Unsupported(
                        "releasing a row lock needs its transaction's start as you saw it (the holder's version)".into(),
                    ));
                };
                let trx = holder
                    .node
                    .strip_prefix("trx ")
                    .unwrap_or_default()
                    .to_string();
                let row = bounded_read(
                    "INNODB_TRX",
                    conn.fetch_one(
                        sqlx::query(
                            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_id = ? \
                             AND trx_mysql_thread_id = ? AND CAST(trx_started AS CHAR) = ?",
                        )
                        .bind(trx)
                        .bind(connection)
                        .bind(version.to_string()),
                    ),
                )
                .await?;
                row.try_get::<i64, _>(0).unwrap_or(0) == 1
            };
            if !still {
                return Ok(changed(
                    "that connection no longer holds this lock (or its transaction is another one)",
                ));
            }
            let statement = format!("KILL CONNECTION {connection}");
            match tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, conn.execute(statement.as_str()))
                .await
            {
                Ok(Ok(_)) => Ok(Outcome::Released(with(
                    detail,
                    "action",
                    "connection killed".into(),
                ))),
                // ER_NO_SUCH_THREAD: it went between the check and the kill.
                Ok(Err(sqlx::Error::Database(e)))
                    if e.code().as_deref() == Some("HY000")
                        && e.message().contains("Unknown thread") =>
                {
                    Ok(changed("the connection ended before it could be killed"))
                }
                Ok(Err(e)) => Err(format!("{statement}: {e}{}", privilege_hint(&e))),
                Err(_) => Err(format!(
                    "{statement}: no answer within {RELEASE_COMMAND_TIMEOUT:?}; the connection may or may not have been killed"
                )),
            }
        }
        Flavor::Postgres => {
            let Some(version) = version else {
                return Ok(Outcome::Unsupported(
                    "releasing a PostgreSQL lock needs the holder's version (connection or transaction start) as you saw it".into(),
                ));
            };
            let mut conn = connect_bounded(super::postgres::connect(config, false)).await?;
            let row_sql;
            let query = if recipe == DbRecipe::Advisory {
                let rest = lock.path.strip_prefix("/advisory/").unwrap_or_default();
                let (database, key) = match rest.rsplit_once('/') {
                    Some((db, key)) => (Some(db.to_string()), key),
                    None => (None, rest),
                };
                let Some(key) = AdvisoryKey::parse(key) else {
                    return Ok(Outcome::Unsupported(format!(
                        "{} names no advisory key",
                        lock.path
                    )));
                };
                let (classid, objid, objsubid) = key.pg_locks_columns();
                sqlx::query(
                    "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a \
                     WHERE a.pid = $1 AND a.backend_start::text = $2 AND EXISTS ( \
                       SELECT 1 FROM pg_locks l LEFT JOIN pg_database d ON d.oid = l.database \
                       WHERE l.pid = a.pid AND l.granted AND l.locktype = 'advisory' \
                       AND l.classid::bigint = $3 AND l.objid::bigint = $4 AND l.objsubid = $5 \
                       AND ($6::text IS NULL OR d.datname = $6))",
                )
                .bind(connection as i32)
                .bind(version.to_string())
                .bind(classid)
                .bind(objid)
                .bind(objsubid as i16)
                .bind(database)
            } else if recipe == DbRecipe::TableLock {
                // The same connection, in the same transaction, still holds a lock on the
                // relation (its name as pg_locks spelled it, in the release connection's
                // database).
                let rest = lock.path.strip_prefix("/table_locks/").unwrap_or_default();
                let (database, relation) = match rest.split_once('/') {
                    Some((db, rel)) => (Some(db.to_string()), rel.to_string()),
                    None => (None, rest.to_string()),
                };
                sqlx::query(
                    "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a \
                     WHERE a.pid = $1 AND a.xact_start::text = $2 AND EXISTS ( \
                       SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
                       WHERE l.pid = a.pid AND l.granted AND l.locktype = 'relation' \
                       AND d.datname = current_database() \
                       AND ($3::text IS NULL OR d.datname = $3) \
                       AND l.relation::regclass::text = $4)",
                )
                .bind(connection as i32)
                .bind(version.to_string())
                .bind(database)
                .bind(relation)
            } else {
                match pg_row_held(&mut conn, &lock.path).await? {
                    Ok(held) => {
                        row_sql = held.sql();
                        sqlx::query(&row_sql)
                            .bind(connection as i32)
                            .bind(version.to_string())
                            .bind(held.arg().to_string())
                    }
                    Err(refused) => return Ok(refused),
                }
            };
            let statement = format!("pg_terminate_backend({connection})");
            let rows = bounded_change(&statement, conn.fetch_all(query)).await?;
            match rows.first().and_then(|r| r.try_get::<bool, _>(0).ok()) {
                Some(true) => Ok(Outcome::Released(with(
                    detail,
                    "action",
                    "pg_terminate_backend".into(),
                ))),
                Some(false) => Err(format!("pg_terminate_backend({connection}) answered false")),
                None => Ok(changed(
                    "that connection no longer holds this lock (another connection or transaction now, or the row is no longer locked by it)",
                )),
            }
        }
    }
}

/// What a PostgreSQL row lock's release checks, in the statement that terminates the holder:
/// that the holder still holds the lock, not only that it runs the same transaction (after
/// `ROLLBACK TO SAVEPOINT` the transaction runs on without the row lock its subtransaction
/// took, and the waiter has the row).
enum PgRowHeld {
    /// `/rows/<db>/<relation>/(<page>,<tuple>)` in the release connection's database: the row
    /// at that ctid is locked (its `xmax`) by a transaction id — top-level or a
    /// subtransaction's — whose `transactionid` lock the holder still holds. A row locked by
    /// several transactions at once (a MultiXact `xmax`) does not match: refused.
    Row {
        /// The relation's name as the server quotes it (`quote_ident`).
        relation: String,
        ctid: String,
    },
    /// `/transactions/<xid>`: the holder still holds that transaction id's lock.
    Xact(String),
}

impl PgRowHeld {
    /// The terminate statement: `$1` pid, `$2` xact_start, `$3` the ctid or the xid.
    fn sql(&self) -> String {
        let held = match self {
            PgRowHeld::Row { relation, .. } => format!(
                "l.transactionid = (SELECT r.xmax FROM {relation} r WHERE r.ctid = $3::tid)"
            ),
            PgRowHeld::Xact(_) => "l.transactionid::text = $3".to_string(),
        };
        format!(
            "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a \
             WHERE a.pid = $1 AND a.xact_start::text = $2 AND EXISTS ( \
               SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.granted \
               AND l.locktype = 'transactionid' AND {held})"
        )
    }

    fn arg(&self) -> &str {
        match self {
            PgRowHeld::Row { ctid, .. } => ctid,
            PgRowHeld::Xact(xid) => xid,
        }
    }
}

/// What identifies the row lock at `path`, checked against the server: the relation must be
/// one of the release connection's database (its name is quoted by the server, never spliced
/// from the path). `Ok(Err(_))`: refused, nothing changed.
async fn pg_row_held(
    conn: &mut sqlx::PgConnection,
    path: &str,
) -> Result<Result<PgRowHeld, Outcome>, String> {
    if let Some(xid) = path.strip_prefix("/transactions/") {
        return Ok(Ok(PgRowHeld::Xact(xid.to_string())));
    }
    let parsed = path.strip_prefix("/rows/").and_then(|rest| {
        let (db_relation, ctid) = rest.rsplit_once('/')?;
        let (db, relation) = db_relation.split_once('/')?;
        let ok = ctid.starts_with('(') && ctid.ends_with(')');
        ok.then(|| (db.to_string(), relation.to_string(), ctid.to_string()))
    });
    let Some((db, relation, ctid)) = parsed else {
        return Ok(Err(Outcome::Unsupported(format!(
            "{path} names no row lockscope can check"
        ))));
    };
    let found = bounded_read(
        "the row's relation",
        conn.fetch_optional(
            sqlx::query(
                "SELECT current_database()::text, (SELECT quote_ident(n.nspname) || '.' || \
                 quote_ident(c.relname) FROM pg_class c JOIN pg_namespace n \
                 ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1))",
            )
            .bind(&relation),
        ),
    )
    .await?;
    let (current, qualified) = match found {
        Some(row) => (
            row.try_get::<String, _>(0).unwrap_or_default(),
            row.try_get::<Option<String>, _>(1).ok().flatten(),
        ),
        None => (String::new(), None),
    };
    if current != db {
        return Ok(Err(Outcome::Unsupported(format!(
            "the row is in database {db}; this source connects to {current}, where its lock cannot be checked"
        ))));
    }
    match qualified {
        Some(relation) => Ok(Ok(PgRowHeld::Row { relation, ctid })),
        None => Ok(Err(Outcome::HolderChanged(json!({
            "message": "the row's table is gone",
            "relation": relation,
        })))),
    }
}

fn quoted(parts: &[&str], quote: char) -> String {
    parts
        .iter()
        .map(|p| format!("{quote}{p}{quote}"))
        .collect::<Vec<_>>()
        .join(".")
}

fn with(mut detail: Value, key: &str, value: Value) -> Value {
    if let Some(map) = detail.as_object_mut() {
        map.insert(key.to_string(), value);
    }
    detail
}

/// The force release of one database source.
pub struct DbReleaser(pub DbSourceConfig, pub Flavor);

impl lockscope_core::release::Releaser for DbReleaser {
    fn release<'a>(
        &'a self,
        lock: &'a LockView,
        holder: &'a HolderView,
        request: &'a lockscope_model::wire::ReleaseRequest,
        _members: &'a [String],
    ) -> futures::future::BoxFuture<'a, Outcome> {
        Box::pin(release(
            &self.0,
            self.1,
            lock,
            holder,
            request.version.as_deref(),
        ))
    }
}
