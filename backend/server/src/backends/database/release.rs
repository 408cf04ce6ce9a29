//! Force release of a database lock, guarded like every other: nothing changes unless the
//! holder is still exactly what the operator saw.
//!
//! * A lock-table row is deleted only if it still names the same owner; a row with an expiry
//!   column gets its expiry set to now instead (as ShedLock's maintainers recommend: deleting
//!   breaks its insert cache), only if the expiry is still the one seen and has not passed.
//! * A row lock, `GET_LOCK` lock or advisory lock is held by a connection: the connection is
//!   terminated (`KILL CONNECTION` / `pg_terminate_backend`) only if it is still the same one
//!   (PostgreSQL: the same `backend_start`, in one statement with the check that it still holds
//!   that advisory lock; a row lock: the same transaction start) and still holds the lock.
//!   Killing a connection rolls back its open transaction and releases every lock it holds;
//!   the database then wakes the waiters itself. On MariaDB the check and the `KILL` are two
//!   statements (MariaDB has no conditional kill): the window between them is one round trip.

use lockscope_model::database::{AdvisoryKey, DbRecipe, GET_LOCK_UNKNOWN};
use lockscope_model::redis::parse_display_bytes;
use lockscope_model::wire::{HolderView, LockView};
use serde_json::{json, Value};
use sqlx::{Executor, Row};

use super::config::{DbSourceConfig, Flavor};
use super::state::DbSourceState;
use crate::admin::Outcome;

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

async fn table_row(
    config: &DbSourceConfig,
    flavor: Flavor,
    table: &super::LockTableConfig,
    key: &str,
    holder: &HolderView,
    version: Option<&str>,
) -> Result<Outcome, String> {
    if table.until.is_some() && version.is_none() {
        return Ok(Outcome::Unsupported(
            "releasing a row with an expiry needs the expiry you saw (the holder's version)".into(),
        ));
    }
    let key_bytes = parse_display_bytes(key);
    let owner_bytes = parse_display_bytes(&holder.node);
    let (k, o) = (&table.key, &table.owner);
    let affected = match flavor {
        Flavor::Mysql => {
            let name = quoted(&table.parts(), '`');
            let sql = match &table.until {
                Some(u) => format!(
                    "UPDATE {name} SET `{u}` = NOW(3) WHERE CAST(`{k}` AS BINARY) = ? \
                     AND CAST(`{o}` AS BINARY) <=> ? AND CAST(`{u}` AS CHAR) = ? AND `{u}` > NOW(3)"
                ),
                None => format!(
                    "DELETE FROM {name} WHERE CAST(`{k}` AS BINARY) = ? AND CAST(`{o}` AS BINARY) <=> ?"
                ),
            };
            let mut conn = super::mysql::connect(config, false)
                .await
                .map_err(|e| e.to_string())?;
            let mut q = sqlx::query(&sql).bind(key_bytes).bind(owner_bytes);
            if let Some(v) = version.filter(|_| table.until.is_some()) {
                q = q.bind(v.to_string());
            }
            conn.execute(q)
                .await
                .map_err(|e| e.to_string())?
                .rows_affected()
        }
        Flavor::Postgres => {
            let name = quoted(&table.parts(), '"');
            let sql = match &table.until {
                Some(u) => format!(
                    "UPDATE {name} SET \"{u}\" = now() WHERE \"{k}\"::text = $1 \
                     AND \"{o}\"::text IS NOT DISTINCT FROM $2 AND \"{u}\"::text = $3 AND \"{u}\" > now()"
                ),
                None => format!(
                    "DELETE FROM {name} WHERE \"{k}\"::text = $1 AND \"{o}\"::text IS NOT DISTINCT FROM $2"
                ),
            };
            let mut conn = super::postgres::connect(config, false)
                .await
                .map_err(|e| e.to_string())?;
            let mut q = sqlx::query(&sql)
                .bind(String::from_utf8_lossy(&key_bytes).into_owned())
                .bind(String::from_utf8_lossy(&owner_bytes).into_owned());
            if let Some(v) = version.filter(|_| table.until.is_some()) {
                q = q.bind(v.to_string());
            }
            conn.execute(q)
                .await
                .map_err(|e| e.to_string())?
                .rows_affected()
        }
    };
    let action = if table.until.is_some() {
        "expiry set to now"
    } else {
        "row deleted"
    };
    let detail = json!({
        "table": table.table,
        "key": key,
        "owner": holder.node,
        "seen_until": version,
    });
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
            let mut conn = super::mysql::connect(config, false)
                .await
                .map_err(|e| e.to_string())?;
            let still = if recipe == DbRecipe::GetLock {
                let name = lock.path.strip_prefix("/get_lock/");
                let Some(name) = name.filter(|_| lock.path != GET_LOCK_UNKNOWN) else {
                    return Ok(Outcome::Unsupported("the lock's name is not known".into()));
                };
                let row = conn
                    .fetch_one(
                        sqlx::query("SELECT IS_USED_LOCK(?)").bind(parse_display_bytes(name)),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                row.try_get::<Option<i64>, _>(0).ok().flatten().or_else(|| {
                    row.try_get::<Option<u64>, _>(0)
                        .ok()
                        .flatten()
                        .map(|v| v as i64)
                }) == Some(connection)
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
                let row = conn
                    .fetch_one(
                        sqlx::query(
                            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_id = ? \
                             AND trx_mysql_thread_id = ? AND CAST(trx_started AS CHAR) = ?",
                        )
                        .bind(trx)
                        .bind(connection)
                        .bind(version.to_string()),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                row.try_get::<i64, _>(0).unwrap_or(0) == 1
            };
            if !still {
                return Ok(changed(
                    "that connection no longer holds this lock (or its transaction is another one)",
                ));
            }
            match conn
                .execute(format!("KILL CONNECTION {connection}").as_str())
                .await
            {
                Ok(_) => Ok(Outcome::Released(with(
                    detail,
                    "action",
                    "connection killed".into(),
                ))),
                // ER_NO_SUCH_THREAD: it went between the check and the kill.
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some("HY000")
                        && e.message().contains("Unknown thread") =>
                {
                    Ok(changed("the connection ended before it could be killed"))
                }
                Err(e) => Err(format!("KILL CONNECTION {connection}: {e}")),
            }
        }
        Flavor::Postgres => {
            let Some(version) = version else {
                return Ok(Outcome::Unsupported(
                    "releasing a PostgreSQL lock needs the holder's version (connection or transaction start) as you saw it".into(),
                ));
            };
            let mut conn = super::postgres::connect(config, false)
                .await
                .map_err(|e| e.to_string())?;
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
            } else {
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE pid = $1 AND xact_start::text = $2",
                )
                .bind(connection as i32)
                .bind(version.to_string())
            };
            let rows = conn.fetch_all(query).await.map_err(|e| e.to_string())?;
            match rows.first().and_then(|r| r.try_get::<bool, _>(0).ok()) {
                Some(true) => Ok(Outcome::Released(with(
                    detail,
                    "action",
                    "pg_terminate_backend".into(),
                ))),
                Some(false) => Err(format!("pg_terminate_backend({connection}) answered false")),
                None => Ok(changed(
                    "that connection no longer holds this lock (another connection or transaction now)",
                )),
            }
        }
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
