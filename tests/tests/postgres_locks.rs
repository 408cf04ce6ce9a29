//! PostgreSQL through the database backend (issue 13), against a real PostgreSQL 15: advisory
//! locks at session and transaction level with both key forms (one bigint, two ints) and shared
//! holders, a `FOR UPDATE` queue of three behind one holder, lock tables (the seed's and
//! ShedLock's), connections as sessions with what `pg_stat_activity` tells, a deadlock between
//! two connections shown as a cycle while it lasts, the guarded force release
//! (`pg_terminate_backend` only of the same connection still holding; a lock-table row only as
//! seen) with stale observations refused, a database down at start and mid-run, a role
//! without `pg_read_all_stats` (a clear error), and Spring Integration's `JdbcLockRegistry`
//! (issue 23) on its own `INT_LOCK` table.

use std::time::Duration;

use anyhow::{ensure, Result};
use lockscope::backends::database::{DbSourceConfig, LockTableConfig};
use lockscope::config::{section, Config, DbSource};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{LockDetail, LockMode, LockView, ReleaseCause};
use lockscope_tests::db_scenarios;
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::support::dblocks::{
    create_lock_rows, DbConn, LockTable, RowLocker, ShedLock, SpringJdbcLock,
};
use lockscope_tests::support::ports::free_port;
use lockscope_tests::support::postgres::{self, Advisory, AdvisoryKey, Level, Postgres};
use serde_json::{json, Value};

const TOKEN: &str = "pg-admin-token";
const WAIT: Duration = Duration::from_secs(30);

fn source(url: &str) -> DbSourceConfig {
    let mut config = DbSourceConfig::new("p", url);
    config.poll_interval = Duration::from_millis(200);
    config.lock_tables = vec![
        LockTableConfig::new("public.database_lock", "resource", "description", None),
        LockTableConfig::new("public.shedlock", "name", "locked_by", Some("lock_until")),
    ];
    config
}

async fn start(config: DbSourceConfig, admin: Option<&std::path::Path>) -> Result<Lockscope> {
    let mut config = Config {
        sources: section("postgres", vec![config].into_iter().map(DbSource::postgres)),
        ..Config::default()
    };
    if let Some(dir) = admin {
        config = with_admin(config, dir, TOKEN);
    }
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

async fn schema(server: &Postgres) -> Result<()> {
    let mut conn = postgres::connect_db(&server.url(), "schema").await?;
    LockTable::create(&mut conn).await?;
    ShedLock::create(&mut conn).await?;
    create_lock_rows(&mut conn, "locks", &["orders", "billing"]).await?;
    Ok(())
}

async fn conn(server: &Postgres, app: &str) -> Result<DbConn> {
    postgres::connect_db(&server.url(), app).await
}

async fn advisory(server: &Postgres, app: &str) -> Result<Advisory> {
    Advisory::open(postgres::connect(&server.url(), app).await?).await
}

fn sessions_of(lock: &LockView) -> (Vec<String>, Vec<String>) {
    (
        lock.holders.iter().map(|h| h.session.clone()).collect(),
        lock.waiters.iter().map(|w| w.session.clone()).collect(),
    )
}

fn released_by(detail: &LockDetail, node: &str) -> Option<ReleaseCause> {
    detail
        .events
        .iter()
        .rev()
        .find(|e| e.kind == "released" && e.node == node)
        .and_then(|e| e.cause)
}

async fn release(ls: &Lockscope, id: &str, body: Value) -> Result<(u16, Value)> {
    ls.release(id, Some(TOKEN), &body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_locks_levels_key_forms_and_a_for_update_queue_of_three() -> Result<()> {
    let server = Postgres::start().await?;
    schema(&server).await?;
    let ls = start(source(&server.url()), None).await?;

    // Session level, one bigint key: a holder and a waiter.
    let mut a = advisory(&server, "holder-a").await?;
    a.lock(AdvisoryKey::Big(42), Level::Session, false);
    a.wait_acquired(WAIT).await?;
    let mut b = advisory(&server, "waiter-b").await?;
    b.lock(AdvisoryKey::Big(42), Level::Session, false);
    let path = "/advisory/postgres/42";
    let lock = ls
        .wait_lock("p", path, WAIT, "advisory holder and waiter", |l| {
            l.holders.len() == 1 && l.waiters.len() == 1
        })
        .await?;
    ensure!(
        sessions_of(&lock) == (vec![a.pid().to_string()], vec![b.pid().to_string()]),
        "{lock:?}"
    );
    ensure!(
        lock.recipe == "advisory" && lock.flags == ["session_level"],
        "{lock:?}"
    );
    ensure!(
        lock.holders[0].version.is_some(),
        "backend_start as the version"
    );

    // Two ints, shared by two sessions; a negative and a > 2^32 bigint at transaction level.
    let mut s1 = advisory(&server, "reader-1").await?;
    s1.lock(AdvisoryKey::Pair(1, -2), Level::Session, true);
    s1.wait_acquired(WAIT).await?;
    let mut s2 = advisory(&server, "reader-2").await?;
    s2.lock(AdvisoryKey::Pair(1, -2), Level::Session, true);
    s2.wait_acquired(WAIT).await?;
    let pair = ls
        .wait_lock("p", "/advisory/postgres/(1,-2)", WAIT, "shared pair", |l| {
            l.holders.len() == 2
        })
        .await?;
    ensure!(pair.holders.iter().all(|h| h.mode == Some(LockMode::Read)));
    let mut x = advisory(&server, "xact").await?;
    x.begin().await?;
    x.lock(AdvisoryKey::Big((1 << 33) + 5), Level::Xact, false);
    x.wait_acquired(WAIT).await?;
    let mut neg = advisory(&server, "negative").await?;
    neg.lock(AdvisoryKey::Big(-5), Level::Session, false);
    neg.wait_acquired(WAIT).await?;
    let xact_path = format!("/advisory/postgres/{}", (1_i64 << 33) + 5);
    let xact = ls
        .wait_lock("p", &xact_path, WAIT, "transaction-level lock", |l| {
            l.holders.len() == 1
        })
        .await?;
    ensure!(xact.flags == ["transaction_level"], "{xact:?}");
    ls.wait_lock("p", "/advisory/postgres/-5", WAIT, "negative key", |l| {
        l.holders.len() == 1
    })
    .await?;

    // FOR UPDATE: one holder, three waiters in order (the first on the holder's
    // transaction, the others on the tuple).
    let mut holder =
        RowLocker::start(conn(&server, "row-holder").await?, "locks", "orders").await?;
    holder.wait_acquired(WAIT).await?;
    let mut waiters = Vec::new();
    for i in 0..3 {
        let w = RowLocker::start(
            conn(&server, &format!("row-waiter-{i}")).await?,
            "locks",
            "orders",
        )
        .await?;
        let expected = i + 1;
        eventually(WAIT, "the next waiter queued", async || {
            let locks = ls.locks().await?;
            Ok(locks
                .into_iter()
                .find(|l| l.recipe == "row_lock" && l.waiters.len() == expected))
        })
        .await?;
        waiters.push(w);
    }
    let row = ls
        .locks()
        .await?
        .into_iter()
        .find(|l| l.recipe == "row_lock")
        .expect("the row lock");
    ensure!(
        row.path.starts_with("/rows/postgres/locks/("),
        "{}",
        row.path
    );
    ensure!(
        sessions_of(&row)
            == (
                vec![holder.connection_id().to_string()],
                waiters
                    .iter()
                    .map(|w| w.connection_id().to_string())
                    .collect::<Vec<_>>()
            ),
        "{row:?}"
    );

    // Connections: application name, start, statement, what each holds and waits on.
    let b_pid = b.pid().to_string();
    let sessions = ls
        .wait_sessions(WAIT, "connections", |s| {
            s.iter().any(|s| s.session == b_pid)
        })
        .await?;
    let waiting = sessions.iter().find(|s| s.session == b_pid).expect("b");
    let c = waiting.connection.as_ref().expect("details");
    ensure!(c.application.as_deref() == Some("waiter-b"), "{c:?}");
    ensure!(c.connected_since_ms.is_some() && c.user == "postgres");
    ensure!(c
        .statement
        .as_deref()
        .is_some_and(|s| s.contains("pg_advisory_lock")));
    ensure!(waiting.waits == [lock_id("p", path)]);

    // Releases: unlock hands 42 to the waiter (cause released); commit ends the
    // transaction-level lock; the row goes to the first waiter on commit.
    ensure!(a.unlock(AdvisoryKey::Big(42), false).await?);
    b.wait_acquired(WAIT).await?;
    let detail = ls
        .wait_detail("p", path, WAIT, "handed to the waiter", |d| {
            d.lock.holders.iter().any(|h| h.session == b_pid)
        })
        .await?;
    ensure!(released_by(&detail, &format!("conn {}", a.pid())) == Some(ReleaseCause::Released));
    x.commit().await?;
    let gone = ls
        .wait_detail(
            "p",
            &xact_path,
            WAIT,
            "transaction-level lock released",
            |d| d.gone,
        )
        .await?;
    ensure!(released_by(&gone, &format!("conn {}", x.pid())) == Some(ReleaseCause::Released));
    let first = waiters[0].connection_id().to_string();
    holder.commit().await?;
    waiters[0].wait_acquired(WAIT).await?;
    eventually(WAIT, "the first waiter holds the row", async || {
        let locks = ls.locks().await?;
        Ok(locks
            .into_iter()
            .find(|l| l.recipe == "row_lock" && l.holders.iter().any(|h| h.session == first)))
    })
    .await?;
    drop((s1, s2, neg, waiters));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_cycle_guarded_force_release_and_lock_tables() -> Result<()> {
    // PostgreSQL breaks a deadlock after deadlock_timeout: long enough to see it.
    let server = Postgres::start_with(&["deadlock_timeout=60s"]).await?;
    schema(&server).await?;
    let dir = tempfile::tempdir()?;
    let ls = start(source(&server.url()), Some(dir.path())).await?;

    let mut a = advisory(&server, "a").await?;
    a.lock(AdvisoryKey::Big(1), Level::Session, false);
    a.wait_acquired(WAIT).await?;
    let mut b = advisory(&server, "b").await?;
    b.lock(AdvisoryKey::Big(2), Level::Session, false);
    b.wait_acquired(WAIT).await?;
    a.lock(AdvisoryKey::Big(2), Level::Session, false);
    b.lock(AdvisoryKey::Big(1), Level::Session, false);
    let cycle = eventually(WAIT, "a deadlock cycle", async || {
        let (_, body) = ls.get_json("/api/v1/deadlocks").await?;
        let cycles = body["cycles"].as_array().cloned().unwrap_or_default();
        Ok((!cycles.is_empty()).then_some(body))
    })
    .await?;
    let text = cycle.to_string();
    ensure!(
        text.contains(&format!("\"{}\"", a.pid())) && text.contains(&format!("\"{}\"", b.pid())),
        "{text}"
    );
    ls.wait_metric("lockscope_deadlock_cycles{source=\"p\"}", |v| v == 1.0)
        .await?;

    // Break it by force: a stale connection start is refused, the seen one terminates `a`.
    let one = "/advisory/postgres/1";
    let lock = ls
        .wait_lock("p", one, WAIT, "lock 1 with a waiter", |l| {
            l.waiters.len() == 1
        })
        .await?;
    let h = lock.holders[0].clone();
    let id = lock_id("p", one);
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": h.node, "version": "2000-01-01 00:00:00+00", "reason": "stale"}),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    ensure!(!b.is_acquired(), "nothing changed");
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": h.node, "version": h.version, "reason": "break the deadlock"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(
        body["released"]["action"] == "pg_terminate_backend",
        "{body}"
    );
    b.wait_acquired(WAIT).await?;
    let detail = ls
        .wait_detail("p", one, WAIT, "b holds 1", |d| {
            d.lock
                .holders
                .iter()
                .any(|h| h.session == b.pid().to_string())
        })
        .await?;
    ensure!(released_by(&detail, &h.node) == Some(ReleaseCause::Forced));
    eventually(WAIT, "the cycle is gone", async || {
        let (_, body) = ls.get_json("/api/v1/deadlocks").await?;
        Ok(body["cycles"]
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(()))
    })
    .await?;

    // Lock tables: the seed's row is deleted as seen; ShedLock's gets its expiry set to now.
    let mut table = LockTable::new(conn(&server, "table").await?).await?;
    ensure!(table.try_lock("invoice-1", "worker-1").await?);
    let path = "/tables/public.database_lock/invoice-1";
    ls.wait_lock("p", path, WAIT, "row", |l| !l.holders.is_empty())
        .await?;
    let (status, _) = release(
        &ls,
        &lock_id("p", path),
        json!({"holder": "worker-9", "reason": "stale"}),
    )
    .await?;
    ensure!(status == 409);
    let (status, body) = release(
        &ls,
        &lock_id("p", path),
        json!({"holder": "worker-1", "reason": "dead"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ls.wait_detail("p", path, WAIT, "deleted", |d| d.gone)
        .await?;
    let mut shed = ShedLock::new(conn(&server, "shed").await?, "host-a");
    ensure!(shed.lock("nightly", Duration::from_secs(300)).await?);
    let shed_path = "/tables/public.shedlock/nightly";
    let lock = ls
        .wait_lock("p", shed_path, WAIT, "ShedLock holder", |l| {
            !l.holders.is_empty()
        })
        .await?;
    ensure!(lock.recipe == "lock_table_until" && lock.expires_at_ms.is_some());
    let version = lock.holders[0].version.clone();
    let (status, _) = release(
        &ls,
        &lock_id("p", shed_path),
        json!({"holder": "host-a", "version": "2001-01-01 00:00:00", "reason": "stale"}),
    )
    .await?;
    ensure!(status == 409);
    let (status, body) = release(
        &ls,
        &lock_id("p", shed_path),
        json!({"holder": "host-a", "version": version, "reason": "stuck"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ls.wait_lock("p", shed_path, WAIT, "free", |l| {
        l.holders.is_empty() && l.flags.contains(&"expired".to_string())
    })
    .await?;
    let mut other = ShedLock::new(conn(&server, "shed-2").await?, "host-b");
    ensure!(
        other.lock("nightly", Duration::from_secs(60)).await?,
        "free to take"
    );
    drop(b);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_at_start_and_mid_run_and_a_role_without_pg_read_all_stats() -> Result<()> {
    let port = free_port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let ls = Lockscope::start(Config {
        sources: section(
            "postgres",
            vec![source(&url)].into_iter().map(DbSource::postgres),
        ),
        ..Config::default()
    })
    .await?;
    let down = eventually(WAIT, "source down with an error", async || {
        let sources = ls.sources().await?;
        Ok(sources
            .into_iter()
            .find(|s| !s.up && s.error.as_deref().is_some_and(|e| e != "connecting")))
    })
    .await?;
    ensure!(down.error.unwrap_or_default().contains("connect"));
    let mut server = Postgres::start_on(port, &[]).await?;
    schema(&server).await?;
    let mut a = advisory(&server, "a").await?;
    a.lock(AdvisoryKey::Big(7), Level::Session, false);
    a.wait_acquired(WAIT).await?;
    ls.wait_lock(
        "p",
        "/advisory/postgres/7",
        WAIT,
        "recovered by itself",
        |l| l.holders.len() == 1,
    )
    .await?;
    server.kill();
    eventually(WAIT, "down mid-run", async || {
        Ok(ls.sources().await?.into_iter().find(|s| !s.up))
    })
    .await?;
    server.restart().await?;
    let mut a = advisory(&server, "a2").await?;
    a.lock(AdvisoryKey::Big(8), Level::Session, false);
    a.wait_acquired(WAIT).await?;
    ls.wait_lock(
        "p",
        "/advisory/postgres/8",
        WAIT,
        "back after a restart",
        |l| l.holders.len() == 1,
    )
    .await?;
    ensure!(ls.lock("p", "/advisory/postgres/7").await?.is_none());

    // A role without pg_read_all_stats: a clear error; with it: none.
    server.create_user("plain", "p-pass", &[]).await?;
    server
        .create_user("watcher", "w-pass", &["pg_read_all_stats"])
        .await?;
    for user in ["plain", "watcher"] {
        server
            .exec(&format!(
                "GRANT SELECT ON database_lock, shedlock TO {user}"
            ))
            .await?;
    }
    let mut plain = source(&server.url_for("plain", "p-pass"));
    plain.name = "plain".into();
    let mut watcher = source(&server.url_for("watcher", "w-pass"));
    watcher.name = "watcher".into();
    let ls2 = Lockscope::start(Config {
        sources: section(
            "postgres",
            vec![plain, watcher].into_iter().map(DbSource::postgres),
        ),
        ..Config::default()
    })
    .await?;
    ls2.wait_ready(WAIT).await?;
    let sources = eventually(WAIT, "both synced", async || {
        let s = ls2.sources().await?;
        Ok(s.iter().all(|s| s.synced).then_some(s))
    })
    .await?;
    let plain = sources.iter().find(|s| s.name == "plain").expect("plain");
    ensure!(
        plain
            .error
            .as_deref()
            .is_some_and(|e| e.contains("pg_read_all_stats")),
        "{plain:?}"
    );
    let watcher = sources
        .iter()
        .find(|s| s.name == "watcher")
        .expect("watcher");
    ensure!(watcher.error.is_none(), "{watcher:?}");
    let a_pid = a.pid().to_string();
    let sessions = ls2
        .wait_sessions(WAIT, "both sources see the holder's connection", |s| {
            ["watcher", "plain"]
                .iter()
                .all(|source| s.iter().any(|s| s.source == *source && s.session == a_pid))
        })
        .await?;
    let seen = sessions
        .iter()
        .find(|s| s.source == "watcher" && s.session == a_pid)
        .and_then(|s| s.connection.clone())
        .expect("details");
    ensure!(seen.statement.is_some_and(|s| s.contains("advisory")));
    let hidden = sessions
        .iter()
        .find(|s| s.source == "plain" && s.session == a_pid)
        .and_then(|s| s.connection.clone())
        .expect("the lock is visible to all");
    ensure!(
        !hidden.statement.unwrap_or_default().contains("advisory"),
        "other users' statements are hidden without pg_read_all_stats"
    );
    Ok(())
}

/// Spring Integration's `JdbcLockRegistry` (7.x) on PostgreSQL: Spring's DDL (`INT_LOCK`,
/// folded to `int_lock` with lower-case columns), the server's own time zone far from UTC
/// (lockscope reads `EXPIRED_AFTER` as the naive UTC it is); see
/// [`db_scenarios::spring_jdbc_lock_registry`] for what is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_jdbc_lock_registry_names_expiry_and_guarded_release() -> Result<()> {
    let server = Postgres::start_with(&["timezone=Asia/Kathmandu"]).await?;
    let mut c = conn(&server, "schema").await?;
    SpringJdbcLock::create(&mut c, "INT_").await?;
    let dir = tempfile::tempdir()?;
    let mut config = DbSourceConfig::new("p", &server.url());
    config.poll_interval = Duration::from_millis(200);
    config.lock_tables = vec![LockTableConfig::spring(
        "public.int_lock",
        &["orders", "invoice/42"],
    )];
    let ls = start(config, Some(dir.path())).await?;
    db_scenarios::spring_jdbc_lock_registry(&ls, "p", "public.int_lock", TOKEN, async || {
        conn(&server, "spring").await
    })
    .await
}
