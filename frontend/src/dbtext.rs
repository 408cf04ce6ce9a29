//! Plain words for database locks (MariaDB/MySQL, PostgreSQL): what their flags mean, what a
//! force release of each kind does, and when the UI must not offer one.
//!
//! The server decides what a release does (`backend/database/src/release.rs`);
//! this module only says it, so the confirmation names the real effect before anyone confirms.
//! Pure, so it is unit-tested on the host.

use lockscope_model::wire::{Backend, HolderView, LockView};

/// The lock path of `GET_LOCK` waiters whose statement does not name the lock.
pub const UNKNOWN_GET_LOCK: &str = "/get_lock/?";

/// The backend is a database (its participants are connections, not sessions).
pub fn is_database(backend: Backend) -> bool {
    matches!(backend, Backend::Mysql | Backend::Postgres)
}

/// A lock kept as a row of a table (a lock table, ShedLock's, Spring's): its holder is whoever
/// the row names, and callers that want it retry by themselves, so no waiter is ever listed.
pub fn is_table_row(recipe: &str) -> bool {
    matches!(
        recipe,
        "lock_table" | "lock_table_until" | "spring_jdbc_lock"
    )
}

/// A lock-table row with an expiry column (ShedLock's `lock_until`, Spring's `EXPIRED_AFTER`):
/// its holder's version is the expiry as stored.
pub fn has_expiry_column(recipe: &str) -> bool {
    matches!(recipe, "lock_table_until" | "spring_jdbc_lock")
}

/// A database lock flag as a short badge label.
pub fn flag_label(flag: &str) -> String {
    match flag {
        "holder_visible_only_while_contended" => "holder shown only while contended".into(),
        "listed_only_while_queued" => "listed only while queued".into(),
        "holder_unconfirmed" => "holder unconfirmed".into(),
        "expired" => "expired: free".into(),
        "session_level" => "session level".into(),
        "transaction_level" => "transaction level".into(),
        "level_unknown" => "level unknown".into(),
        "lock_name_not_in_statement" => "lock name unknown".into(),
        "lock_name_hashed" => "name not configured: its UUID".into(),
        "waiters_not_visible" => "waiters not visible".into(),
        "holder_idle_in_transaction" => "holder idle in transaction".into(),
        other => other.replace('_', " "),
    }
}

/// What a database lock flag means, in a sentence an on-call engineer can act on.
pub fn flag_explanation(backend: Backend, flag: &str) -> Option<String> {
    let db = match backend {
        Backend::Postgres => "PostgreSQL",
        _ => "MariaDB/MySQL",
    };
    Some(match flag {
        "holder_visible_only_while_contended" => format!(
            "{db} shows a row lock's holder only while someone waits for it: an uncontended \
             SELECT … FOR UPDATE is invisible, and the holder drops out of view when nobody waits any more."
        ),
        "listed_only_while_queued" => format!(
            "{db} takes a table lock for every query: lockscope lists a table only while someone \
             waits to lock it (an ALTER TABLE behind an open transaction, the queries behind the ALTER), \
             and it goes from the list when the queue drains."
        ),
        "holder_unconfirmed" => "Nobody waits any more: the holder's transaction is still open, \
             whether it still holds the row cannot be seen."
            .into(),
        "expired" => "Expired: the row's expiry has passed, the lock is free (the row stays until \
             the next caller takes it)."
            .into(),
        "session_level" => "Session level: taken outside a transaction, it is held until its \
             connection unlocks it (pg_advisory_unlock) or closes; committing does not release it."
            .into(),
        "transaction_level" => "Transaction level (pg_advisory_xact_lock): it goes when the \
             holder's transaction commits or rolls back."
            .into(),
        "level_unknown" => "Level unknown: the holder is inside a transaction and took the lock in \
             an earlier statement; PostgreSQL does not say whether it ends with the transaction or \
             lasts until the connection unlocks it or closes."
            .into(),
        "lock_name_not_in_statement" => "A connection waits in GET_LOCK, but its statement does \
             not name the lock (a variable or an expression): which lock it waits for cannot be \
             told, so it is listed here under /get_lock/?."
            .into(),
        "lock_name_hashed" => "Spring's JdbcLockRegistry stores a lock under the MD5 name-based \
             UUID of its name (UUID.nameUUIDFromBytes), not the name, and the name cannot be \
             recovered from it: this is the LOCK_KEY as stored. List the lock's name under this \
             table's names in lockscope's configuration to see the lock by name."
            .into(),
        "waiters_not_visible" => "Waiters are not visible: callers that want this lock retry \
             by themselves (Spring's JdbcLockRegistry every 100 ms by default) and leave nothing \
             in the database, so nobody can be shown waiting, however many do."
            .into(),
        "holder_idle_in_transaction" => "A holder is idle in its transaction: it ran its last \
             statement and neither committed nor rolled back, so it holds the table until its \
             program ends the transaction or its connection closes. Everything queued here waits \
             for that, and nothing the holder runs will end it."
            .into(),
        _ => return None,
    })
}

/// The lock path of a table lock queue whose table is not known (a MariaDB waiter's statement
/// names several locked tables).
pub const UNKNOWN_TABLE_LOCK: &str = "/table_locks/?";

/// The SQL that terminates a connection on this database.
fn kill_statement(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "pg_terminate_backend",
        _ => "KILL CONNECTION",
    }
}

/// What a force release of `holder` of the database lock `lock` does, one consequence per
/// item; `Err` says why the UI does not offer one.
pub fn release_effects(lock: &LockView, holder: &HolderView) -> Result<Vec<String>, String> {
    match lock.recipe.as_str() {
        "lock_table" => Ok(vec![
            format!(
                "lockscope deletes the row only if it still names {}; if another owner took it \
                 since you looked, nothing happens.",
                holder.node
            ),
            "Nothing else changes: the next caller that tries to insert the row takes the lock.".into(),
        ]),
        "lock_table_until" => match &holder.version {
            Some(version) => Ok(vec![
                format!(
                    "lockscope sets the row's expiry to now only if it is still {version} (and has \
                     not passed) and the row still names {}; otherwise nothing happens.",
                    holder.node
                ),
                "The row stays (deleting it would break ShedLock's cache of existing rows): the \
                 next caller whose expiry check passes takes the lock."
                    .into(),
            ]),
            None => Err("The row's expiry was not seen, so a release could not check that the row is unchanged.".into()),
        },
        "spring_jdbc_lock" => match &holder.version {
            Some(version) => Ok(vec![
                format!(
                    "lockscope deletes the row only if it still names client {} with expiry \
                     {version} and that expiry has not passed; otherwise nothing happens.",
                    holder.node
                ),
                "Deleting is what the holder's own unlock does: no other row changes, and there \
                 is nobody to wake. A JdbcLockRegistry polling for this lock takes it within its \
                 idle time between tries (100 ms by default)."
                    .into(),
                "The evicted holder is not told: it goes on as if it held the lock. Its next \
                 renew fails, and its unlock throws ConcurrentModificationException (\"Lock was \
                 released in the store due to expiration\")."
                    .into(),
            ]),
            None => Err("The row's EXPIRED_AFTER was not seen, so a release could not check that the row is unchanged.".into()),
        },
        "row_lock" | "get_lock" | "advisory" | "table_lock" => {
            if lock.path == UNKNOWN_GET_LOCK {
                return Err("The lock's name is not known (the waiter's statement does not name it): lockscope cannot check who holds it.".into());
            }
            if lock.path == UNKNOWN_TABLE_LOCK {
                return Err("The table is not known (the waiter's statement names several locked tables): lockscope cannot check who holds it.".into());
            }
            let Ok(connection) = holder.session.parse::<i64>() else {
                return Err(format!("{} names no connection to terminate.", holder.node));
            };
            // PostgreSQL compares a table lock's holder by its transaction's start too.
            let by_transaction = lock.recipe == "row_lock"
                || (lock.recipe == "table_lock" && lock.backend == Backend::Postgres);
            if by_transaction && holder.version.is_none() {
                return Err("The holder's transaction start was not seen, so a release could not check that it is still the same transaction.".into());
            }
            let mut effects = vec![
                format!(
                    "lockscope terminates connection {connection} ({}) only if it is still the same \
                     connection and still holds this lock; otherwise nothing happens.",
                    kill_statement(lock.backend)
                ),
                "This rolls back its open transaction (uncommitted work is lost) and releases every \
                 lock it holds, not only this one."
                    .into(),
                "The database then wakes the waiters itself; the next one gets the lock.".into(),
                "The program using that connection gets an error on its next statement.".into(),
            ];
            if lock.backend == Backend::Mysql {
                effects.push(
                    "MariaDB has no conditional KILL: the check and the KILL are two statements, \
                     one round trip apart."
                        .into(),
                );
            }
            Ok(effects)
        }
        other => Err(format!("A {other} lock cannot be force-released.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(backend: Backend, recipe: &str, path: &str) -> LockView {
        LockView {
            backend,
            recipe: recipe.into(),
            path: path.into(),
            ..LockView::default()
        }
    }

    fn holder(node: &str, session: &str, version: Option<&str>) -> HolderView {
        HolderView {
            node: node.into(),
            session: session.into(),
            since_ms: 0,
            held_ms: 0,
            mode: None,
            watchers: 0,
            reentrancy: None,
            lease: None,
            identity: None,
            version: version.map(str::to_string),
            statement: None,
        }
    }

    fn effects(l: &LockView, h: &HolderView) -> Vec<String> {
        release_effects(l, h).unwrap_or_else(|e| panic!("not offered: {e}"))
    }

    #[test]
    fn lock_table_rows_name_their_owner_or_expiry() {
        let l = lock(
            Backend::Mysql,
            "lock_table",
            "/tables/app.database_lock/job",
        );
        let e = effects(&l, &holder("worker-1", "", None));
        assert!(e[0].contains("deletes the row only if it still names worker-1"));
        let l = lock(
            Backend::Mysql,
            "lock_table_until",
            "/tables/app.shedlock/job",
        );
        let h = holder("host-a", "", Some("2026-11-23 22:50:00.000"));
        let e = effects(&l, &h);
        assert!(e[0]
            .contains("sets the row's expiry to now only if it is still 2026-11-23 22:50:00.000"));
        assert!(release_effects(&l, &holder("host-a", "", None)).is_err());
    }

    #[test]
    fn spring_rows_say_the_delete_the_pollers_and_the_evicted_holder() {
        let l = lock(
            Backend::Postgres,
            "spring_jdbc_lock",
            "/tables/public.int_lock/DEFAULT/orders",
        );
        let h = holder("node-a", "", Some("2026-08-21 10:00:05.123456"));
        let e = effects(&l, &h);
        assert!(e[0].contains(
            "deletes the row only if it still names client node-a with expiry 2026-08-21 10:00:05.123456"
        ));
        assert!(e[1].contains("100 ms"));
        assert!(e[2].contains("not told") && e[2].contains("ConcurrentModificationException"));
        assert!(release_effects(&l, &holder("node-a", "", None)).is_err());
        assert!(is_table_row("spring_jdbc_lock") && has_expiry_column("spring_jdbc_lock"));
        assert!(is_table_row("lock_table") && !has_expiry_column("lock_table"));
        assert!(!is_table_row("advisory"));
    }

    #[test]
    fn connection_held_locks_say_the_kill() {
        let l = lock(Backend::Postgres, "advisory", "/advisory/postgres/42");
        let e = effects(&l, &holder("conn 4711", "4711", Some("t0")));
        assert!(e[0].contains("terminates connection 4711 (pg_terminate_backend) only if it is still the same connection"));
        assert!(e[1].contains("uncommitted work is lost"));
        assert!(e[1].contains("not only this one"));
        let l = lock(Backend::Mysql, "row_lock", "/rows/app.jobs/PRIMARY/1");
        let e = effects(&l, &holder("trx 99", "12", Some("t1")));
        assert!(e[0].contains("KILL CONNECTION"));
        assert!(release_effects(&l, &holder("trx 99", "12", None)).is_err());
        assert!(release_effects(&l, &holder("trx 99", "", Some("t1"))).is_err());
    }

    #[test]
    fn a_table_lock_holder_is_released_by_ending_its_connection() {
        let l = lock(Backend::Postgres, "table_lock", "/table_locks/app/orders");
        let e = effects(&l, &holder("conn 77", "77", Some("2026-11-28 09:00:00+00")));
        assert!(e[0].contains("terminates connection 77 (pg_terminate_backend)"));
        assert!(
            release_effects(&l, &holder("conn 77", "77", None)).is_err(),
            "PostgreSQL compares the transaction's start"
        );
        let l = lock(Backend::Mysql, "table_lock", "/table_locks/app/orders");
        assert!(effects(&l, &holder("conn 8", "8", None))[0].contains("KILL CONNECTION"));
        let l = lock(Backend::Mysql, "table_lock", UNKNOWN_TABLE_LOCK);
        assert!(release_effects(&l, &holder("conn 8", "8", None)).is_err());
    }

    #[test]
    fn an_unnamed_get_lock_is_not_offered() {
        let l = lock(Backend::Mysql, "get_lock", UNKNOWN_GET_LOCK);
        assert!(release_effects(&l, &holder("conn 5", "5", None)).is_err());
        let l = lock(Backend::Mysql, "get_lock", "/get_lock/job");
        assert!(release_effects(&l, &holder("conn 5", "5", None)).is_ok());
    }

    #[test]
    fn flags_are_explained() {
        for flag in [
            "holder_visible_only_while_contended",
            "listed_only_while_queued",
            "holder_unconfirmed",
            "expired",
            "session_level",
            "transaction_level",
            "level_unknown",
            "lock_name_not_in_statement",
            "lock_name_hashed",
            "waiters_not_visible",
            "holder_idle_in_transaction",
        ] {
            assert!(
                flag_explanation(Backend::Postgres, flag).is_some(),
                "{flag}"
            );
            assert!(!flag_label(flag).contains('_'), "{flag}");
        }
        assert!(
            flag_explanation(Backend::Mysql, "holder_visible_only_while_contended")
                .is_some_and(|t| t.starts_with("MariaDB/MySQL shows"))
        );
        assert_eq!(flag_explanation(Backend::Mysql, "no_expiry"), None);
    }
}
