//! Smoke test of the real-database test support (`lockscope_tests::support::{mysql, postgres,
//! dblocks}`): MariaDB 10.11 and PostgreSQL 15 servers start on free ports, answer, enforce
//! privileges, survive kill + restart on the same port and leave nothing running; every lock
//! client (lock table, ShedLock, `FOR UPDATE`, `GET_LOCK`, advisory locks) shows on the server
//! the way `shared/LOCK_LAYOUTS.md` ("Databases") says an observer sees it. The column types
//! asserted here are the ones sqlx 0.8 reports (what a collector decodes). Every test has its
//! own servers, so they run in parallel. Run with `--nocapture` to see timings and the column
//! types.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use lockscope_tests::harness::eventually;
use lockscope_tests::support::dblocks::{create_lock_rows, DbConn, LockTable, RowLocker, ShedLock};
use lockscope_tests::support::mysql::{self, GetLock, GetLockOutcome, MariaDb, Params};
use lockscope_tests::support::postgres::{self, Advisory, AdvisoryKey, Level, Postgres};
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Column, Row, TypeInfo};

const WAIT: Duration = Duration::from_secs(20);
/// How long a statement that must stay blocked is given to (wrongly) finish.
const STILL_BLOCKED: Duration = Duration::from_millis(300);

fn types_of_mysql(row: &MySqlRow) -> Vec<String> {
    row.columns()
        .iter()
        .map(|c| format!("{}:{}", c.name(), c.type_info().name()))
        .collect()
}

fn types_of_pg(row: &PgRow) -> Vec<String> {
    row.columns()
        .iter()
        .map(|c| format!("{}:{}", c.name(), c.type_info().name()))
        .collect()
}

async fn my(url: &str) -> Result<MySqlConnection> {
    mysql::connect(url).await
}

async fn pg(url: &str, name: &str) -> Result<PgConnection> {
    postgres::connect(url, name).await
}

// ---------------------------------------------------------------------------------------------
// MariaDB

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_privileges_kill_and_restart() -> Result<()> {
    let t = Instant::now();
    let mut server = MariaDb::start().await?;
    println!("mariadb ready in {:?} on {}", t.elapsed(), server.port());
    server
        .create_user("watcher", "w-pass", &["PROCESS ON *.*"])
        .await?;
    server.create_user("plain", "p-pass", &[]).await?;

    let mut setup = server.connect().await?;
    create_lock_rows(&mut setup, "locks", &["orders"]).await?;
    let mut holder = RowLocker::start(server.connect().await?, "locks", "orders").await?;
    holder.wait_acquired(WAIT).await?;

    // PROCESS shows every connection and the InnoDB tables; without it, only one's own.
    let mut watcher = my(&server.url_for("watcher", "w-pass")).await?;
    // PROCESSLIST.ID is a signed BIGINT, unlike the BIGINT UNSIGNED thread ids elsewhere.
    let ids: Vec<i64> = sqlx::query_scalar("SELECT ID FROM information_schema.PROCESSLIST")
        .fetch_all(&mut watcher)
        .await?;
    ensure!(
        ids.contains(&holder.connection_id()),
        "watcher sees {ids:?}"
    );
    let trx: Vec<u64> =
        sqlx::query_scalar("SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX")
            .fetch_all(&mut watcher)
            .await?;
    ensure!(
        trx.contains(&(holder.connection_id() as u64)),
        "INNODB_TRX {trx:?}"
    );

    let mut plain = my(&server.url_for("plain", "p-pass")).await?;
    let own: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut plain)
        .await?;
    let ids: Vec<i64> = sqlx::query_scalar("SELECT ID FROM information_schema.PROCESSLIST")
        .fetch_all(&mut plain)
        .await?;
    ensure!(
        ids == vec![own as i64],
        "plain sees {ids:?}, not only itself ({own})"
    );
    let denied = sqlx::query("SELECT * FROM information_schema.INNODB_TRX")
        .fetch_all(&mut plain)
        .await
        .expect_err("INNODB_TRX without PROCESS");
    let failure = lockscope_tests::support::dblocks::DbFailure::from_sqlx(&denied);
    println!("INNODB_TRX without PROCESS: {failure}");
    ensure!(failure.number == Some(1227), "{failure}");
    holder.commit().await?;

    // Down mid-run, then back on the same port with the same data.
    let port = server.port();
    server.kill();
    ensure!(server.pid().is_none());
    ensure!(
        sqlx::query("SELECT 1").execute(&mut watcher).await.is_err(),
        "a connection survived the kill"
    );
    let t = Instant::now();
    server.restart().await?;
    println!("mariadb restarted in {:?}", t.elapsed());
    ensure!(server.port() == port);
    let mut again = server.connect().await?;
    again
        .exec("SELECT name FROM locks WHERE name = 'orders'")
        .await?;

    // Down at start: a port nothing listens on, a server there later.
    let later = lockscope_tests::support::ports::free_port();
    ensure!(mysql::connect(&format!("mysql://root@127.0.0.1:{later}/"))
        .await
        .is_err());
    let t = Instant::now();
    let late = MariaDb::start_on(later, &[]).await?;
    println!("mariadb on a chosen port in {:?}", t.elapsed());
    my(&late.url()).await?;
    let pid = late.pid().context("late server pid")?;
    drop(late);
    ensure!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "mariadbd {pid} still there after drop"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_for_update_waits_timeouts_and_deadlocks() -> Result<()> {
    let server = MariaDb::start().await?;
    let mut setup = server.connect().await?;
    create_lock_rows(&mut setup, "locks", &["orders", "invoices"]).await?;

    let mut holder = RowLocker::start(server.connect().await?, "locks", "orders").await?;
    holder.wait_acquired(WAIT).await?;
    let mut waiter = RowLocker::start(server.connect().await?, "locks", "orders").await?;
    ensure!(waiter.wait_acquired(STILL_BLOCKED).await.is_err());
    ensure!(!waiter.is_acquired());

    let mut observer = my(&server.url()).await?;
    let waiter_id = waiter.connection_id() as u64;
    let holder_id = holder.connection_id() as u64;
    let row = eventually(
        WAIT,
        "the FOR UPDATE wait in INNODB_LOCK_WAITS",
        async || {
            Ok(sqlx::query(
                "SELECT w.*, r.trx_mysql_thread_id AS waiter, b.trx_mysql_thread_id AS blocker \
             FROM information_schema.INNODB_LOCK_WAITS w \
             JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
             JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id",
            )
            .fetch_optional(&mut observer)
            .await?)
        },
    )
    .await?;
    println!("INNODB_LOCK_WAITS (+ joins): {:?}", types_of_mysql(&row));
    ensure!(row.try_get::<u64, _>("waiter")? == waiter_id);
    ensure!(row.try_get::<u64, _>("blocker")? == holder_id);
    let requesting: u64 = row.try_get("requesting_trx_id")?;
    let lock_id: String = row.try_get("requested_lock_id")?;
    println!("requesting_trx_id {requesting}, requested_lock_id {lock_id:?}");

    let locks = sqlx::query("SELECT * FROM information_schema.INNODB_LOCKS ORDER BY lock_trx_id")
        .fetch_all(&mut observer)
        .await?;
    ensure!(locks.len() == 2, "INNODB_LOCKS has {} rows", locks.len());
    println!("INNODB_LOCKS: {:?}", types_of_mysql(&locks[0]));
    for l in &locks {
        let data: String = l.try_get("lock_data")?;
        let table: String = l.try_get("lock_table")?;
        let mode: String = l.try_get("lock_mode")?;
        let index: String = l.try_get("lock_index")?;
        let id: String = l.try_get("lock_id")?;
        println!("lock {id} {mode} {table} {index} {data}");
        ensure!(data == "'orders'", "lock_data {data:?}");
        ensure!(table == "`app`.`locks`", "lock_table {table:?}");
    }
    let trx = sqlx::query(
        "SELECT trx_id, trx_state, CAST(trx_started AS CHAR) AS started, \
         CAST(trx_wait_started AS CHAR) AS wait_started, trx_mysql_thread_id, trx_query \
         FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?",
    )
    .bind(waiter_id)
    .fetch_one(&mut observer)
    .await?;
    let raw_trx = sqlx::query("SELECT * FROM information_schema.INNODB_TRX LIMIT 1")
        .fetch_one(&mut observer)
        .await?;
    println!("INNODB_TRX: {:?}", types_of_mysql(&raw_trx));
    let state: String = trx.try_get("trx_state")?;
    let query: Option<String> = trx.try_get("trx_query")?;
    let wait_started: Option<String> = trx.try_get("wait_started")?;
    println!("waiter trx: state {state}, wait_started {wait_started:?}, query {query:?}");
    ensure!(state == "LOCK WAIT");
    ensure!(trx.try_get::<u64, _>("trx_id")? == requesting);

    let pl = sqlx::query(
        "SELECT ID, USER, HOST, DB, COMMAND, TIME, TIME_MS, CAST(TIME_MS AS CHAR) AS time_ms_text, \
         STATE, INFO FROM information_schema.PROCESSLIST WHERE ID = ?",
    )
    .bind(waiter_id)
    .fetch_one(&mut observer)
    .await?;
    println!("PROCESSLIST: {:?}", types_of_mysql(&pl));
    println!(
        "waiter in PROCESSLIST: state {:?}, info {:?}, time {:?}, time_ms {:?}",
        pl.try_get::<Option<String>, _>("STATE")?,
        pl.try_get::<Option<String>, _>("INFO")?,
        pl.try_get::<i32, _>("TIME")?,
        pl.try_get::<String, _>("time_ms_text")?,
    );

    // Commit hands the row over.
    holder.commit().await?;
    waiter.wait_acquired(WAIT).await?;

    // innodb_lock_wait_timeout (per session here): error 1205, the transaction stays open.
    let mut impatient = RowLocker::begin(server.connect().await?, "locks", Some(1)).await?;
    impatient.lock("orders");
    let t = Instant::now();
    ensure!(impatient.wait_acquired(WAIT).await.is_err());
    let e = impatient.error().context("an error")?;
    println!("lock wait timeout after {:?}: {e}", t.elapsed());
    ensure!(e.is_lock_wait_timeout() && e.number == Some(1205), "{e}");
    waiter.commit().await?;
    impatient.rollback().await?;

    // Deadlock: a holds orders, b holds invoices, each asks for the other's row.
    let mut a = RowLocker::start(server.connect().await?, "locks", "orders").await?;
    a.wait_acquired(WAIT).await?;
    let mut b = RowLocker::start(server.connect().await?, "locks", "invoices").await?;
    b.wait_acquired(WAIT).await?;
    a.lock("invoices");
    ensure!(a.wait_acquired(STILL_BLOCKED).await.is_err());
    b.lock("orders");
    eventually(WAIT, "one deadlock victim", async || {
        let (ea, eb) = (a.error(), b.error());
        Ok((ea.is_some() || eb.is_some()).then_some(()))
    })
    .await?;
    let victim = a.error().or(b.error()).context("victim")?;
    println!("deadlock: {victim}");
    ensure!(
        victim.is_deadlock() && victim.number == Some(1213),
        "{victim}"
    );
    let survivor = if a.error().is_some() { &mut b } else { &mut a };
    survivor.wait_acquired(WAIT).await?;
    a.rollback().await?;
    b.rollback().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_get_lock_holders_and_waiters() -> Result<()> {
    let server = MariaDb::start().await?;
    let mut holder = GetLock::start(my(&server.url()).await?, "job-7", 60, Params::Bound).await?;
    ensure!(holder.wait_outcome(WAIT).await? == GetLockOutcome::Acquired);
    let mut bound = GetLock::start(my(&server.url()).await?, "job-7", 60, Params::Bound).await?;
    let mut literal =
        GetLock::start(my(&server.url()).await?, "job-7", 60, Params::Literal).await?;

    let mut observer = my(&server.url()).await?;
    let rows = sqlx::query("SELECT * FROM information_schema.METADATA_LOCK_INFO")
        .fetch_all(&mut observer)
        .await?;
    ensure!(!rows.is_empty(), "no METADATA_LOCK_INFO rows");
    println!("METADATA_LOCK_INFO: {:?}", types_of_mysql(&rows[0]));
    let user: Vec<_> = rows
        .iter()
        .filter(|r| r.try_get::<String, _>("LOCK_TYPE").ok().as_deref() == Some("User lock"))
        .collect();
    ensure!(
        user.len() == 1,
        "{} user locks (only holders are listed)",
        user.len()
    );
    let u = user[0];
    println!(
        "holder: thread {:?} mode {:?} duration {:?} schema {:?} table {:?}",
        u.try_get::<u64, _>("THREAD_ID").ok(),
        u.try_get::<String, _>("LOCK_MODE").ok(),
        u.try_get::<Option<String>, _>("LOCK_DURATION").ok(),
        u.try_get::<String, _>("TABLE_SCHEMA").ok(),
        u.try_get::<Option<String>, _>("TABLE_NAME").ok(),
    );
    ensure!(u.try_get::<u64, _>("THREAD_ID")? == holder.connection_id() as u64);
    ensure!(u.try_get::<String, _>("TABLE_SCHEMA")? == "job-7");

    let waiters = eventually(WAIT, "both GET_LOCK waiters in PROCESSLIST", async || {
        let rows = sqlx::query(
            "SELECT ID, STATE, INFO FROM information_schema.PROCESSLIST \
             WHERE STATE = 'User lock' ORDER BY ID",
        )
        .fetch_all(&mut observer)
        .await?;
        Ok((rows.len() == 2).then_some(rows))
    })
    .await?;
    for w in &waiters {
        let id: i64 = w.try_get("ID")?;
        let info: Option<String> = w.try_get("INFO")?;
        let kind = if id == bound.connection_id() {
            "bound"
        } else {
            "literal"
        };
        println!("{kind} waiter {id}: INFO {info:?}");
        if kind == "literal" {
            ensure!(
                info.as_deref() == Some("SELECT GET_LOCK('job-7', 60)"),
                "{info:?}"
            );
        }
    }

    // A waiter whose timeout passes gets 0.
    let mut brief = GetLock::start(my(&server.url()).await?, "job-7", 1, Params::Bound).await?;
    ensure!(brief.wait_outcome(WAIT).await? == GetLockOutcome::TimedOut);

    ensure!(holder.release().await? == Some(1));
    // One of the two waiters gets it; the other keeps waiting.
    eventually(WAIT, "a waiter acquired", async || {
        Ok((bound.is_acquired() || literal.is_acquired()).then_some(()))
    })
    .await?;
    ensure!(!(bound.is_acquired() && literal.is_acquired()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_lock_table_and_shedlock() -> Result<()> {
    let server = MariaDb::start().await?;
    let mut setup = server.connect().await?;
    LockTable::create(&mut setup).await?;
    ShedLock::create(&mut setup).await?;
    lock_table_and_shedlock(server.connect().await?, server.connect().await?, &mut setup).await
}

/// The seed lock table and ShedLock, the same on both servers.
async fn lock_table_and_shedlock(a: DbConn, b: DbConn, observer: &mut DbConn) -> Result<()> {
    let mut t = LockTable::new(a).await?;
    ensure!(t.try_lock("report", "host-a").await?);
    ensure!(!t.try_lock("report", "host-b").await?);
    ensure!(!t.unlock("report", "host-b").await?);
    ensure!(t.unlock("report", "host-a").await?);
    ensure!(t.try_lock("report", "host-b").await?);
    observer
        .exec("SELECT resource, description FROM database_lock")
        .await?;

    let mut s1 = ShedLock::new(b, "host-a");
    ensure!(s1.lock("nightly", Duration::from_secs(60)).await?);
    let (until, at, by) = s1.row("nightly").await?.context("shedlock row")?;
    println!("shedlock row: lock_until {until}, locked_at {at}, locked_by {by}");
    ensure!(by == "host-a");
    // Held: a second lock attempt (the update path, the row being known) fails.
    ensure!(!s1.lock("nightly", Duration::from_secs(60)).await?);
    // Released without lockAtLeastFor: the row stays, with lock_until = now.
    ensure!(s1.unlock("nightly", Duration::ZERO).await?);
    let (until2, _, by2) = s1.row("nightly").await?.context("row after unlock")?;
    println!("after unlock: lock_until {until2}, locked_by {by2}");
    ensure!(by2 == "host-a" && until2 < until);
    ensure!(s1.lock("nightly", Duration::from_secs(60)).await?);
    // lockAtLeastFor keeps it held after unlock.
    ensure!(s1.unlock("nightly", Duration::from_secs(30)).await?);
    ensure!(!s1.lock("nightly", Duration::from_secs(60)).await?);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_privileges_kill_restart_and_cleanup() -> Result<()> {
    let t = Instant::now();
    let mut server = Postgres::start().await?;
    println!("postgres ready in {:?} on {}", t.elapsed(), server.port());
    let postmaster = server.pid().context("pid")?;
    server
        .create_user("watcher", "w", &["pg_read_all_stats", "pg_signal_backend"])
        .await?;
    server.create_user("plain", "p", &[]).await?;

    let mut busy = Advisory::open(pg(&server.url(), "lockscope-busy").await?).await?;
    busy.lock(AdvisoryKey::Big(1), Level::Session, false);
    busy.wait_acquired(WAIT).await?;
    let busy_pid = busy.pid() as i32;

    let q = "SELECT application_name, query, state FROM pg_stat_activity WHERE pid = $1";
    let mut watcher = pg(&server.url_for("watcher", "w"), "lockscope-watcher").await?;
    let row = sqlx::query(q)
        .bind(busy_pid)
        .fetch_one(&mut watcher)
        .await?;
    let seen: Option<String> = row.try_get("query")?;
    println!("watcher sees: {seen:?}");
    ensure!(row.try_get::<String, _>("application_name")? == "lockscope-busy");
    ensure!(seen
        .as_deref()
        .is_some_and(|s| s.contains("pg_advisory_lock")));
    let mut plain = pg(&server.url_for("plain", "p"), "lockscope-plain").await?;
    let row = sqlx::query(q).bind(busy_pid).fetch_one(&mut plain).await?;
    let seen: Option<String> = row.try_get("query")?;
    println!("plain sees: {seen:?}");
    ensure!(seen.as_deref() == Some("<insufficient privilege>"));
    // pg_locks is readable by everybody.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        .fetch_one(&mut plain)
        .await?;
    ensure!(n == 1, "plain sees {n} advisory locks");
    drop(busy);

    let port = server.port();
    let group = server.processes();
    println!("postgres processes before kill: {group:?}");
    ensure!(group.len() >= 5, "{group:?}");
    server.kill();
    ensure!(
        sqlx::query("SELECT 1").execute(&mut watcher).await.is_err(),
        "a connection survived the kill"
    );
    for pid in &group {
        ensure!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} of the killed server is still there"
        );
    }
    let t = Instant::now();
    server.restart().await?;
    println!("postgres restarted (crash recovery) in {:?}", t.elapsed());
    ensure!(server.port() == port && server.pid() != Some(postmaster));
    pg(&server.url(), "lockscope-again").await?;

    let later = lockscope_tests::support::ports::free_port();
    ensure!(pg(
        &format!("postgres://postgres@127.0.0.1:{later}/postgres"),
        "x"
    )
    .await
    .is_err());
    let late = Postgres::start_on(later, &[]).await?;
    pg(&late.url(), "lockscope-late").await?;
    let group: Vec<u32> = server
        .processes()
        .into_iter()
        .chain(late.processes())
        .collect();
    drop(server);
    drop(late);
    for pid in &group {
        ensure!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} still there after drop"
        );
    }
    Ok(())
}

/// `(classid, objid, objsubid, granted, pid)` of advisory rows, read with their native types.
async fn advisory_rows(conn: &mut PgConnection) -> Result<Vec<(u32, u32, i16, bool, i32)>> {
    let rows = sqlx::query(
        "SELECT classid, objid, objsubid, granted, pid, mode, waitstart::text AS waitstart \
         FROM pg_locks WHERE locktype = 'advisory' ORDER BY classid, objid, objsubid, granted DESC",
    )
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get::<sqlx::postgres::types::Oid, _>("classid")?.0,
                r.try_get::<sqlx::postgres::types::Oid, _>("objid")?.0,
                r.try_get::<i16, _>("objsubid")?,
                r.try_get::<bool, _>("granted")?,
                r.try_get::<i32, _>("pid")?,
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_advisory_locks_in_pg_locks() -> Result<()> {
    let server = Postgres::start().await?;
    let mut observer = pg(&server.url(), "lockscope-observer").await?;
    let raw = sqlx::query("SELECT * FROM pg_locks LIMIT 1")
        .fetch_one(&mut observer)
        .await?;
    println!("pg_locks: {:?}", types_of_pg(&raw));

    let keys = [
        AdvisoryKey::Big(42),
        AdvisoryKey::Big(-5),
        AdvisoryKey::Big((1 << 32) + 7),
        AdvisoryKey::Pair(3, -4),
    ];
    let mut holders = Vec::new();
    let mut waiters = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let mut h = Advisory::open(pg(&server.url(), &format!("holder-{i}")).await?).await?;
        h.lock(*key, Level::Session, false);
        h.wait_acquired(WAIT).await?;
        let mut w = Advisory::open(pg(&server.url(), &format!("waiter-{i}")).await?).await?;
        w.lock(*key, Level::Session, false);
        holders.push(h);
        waiters.push(w);
    }
    let rows = eventually(WAIT, "a holder and a waiter per key", async || {
        let rows = advisory_rows(&mut observer).await?;
        Ok((rows.len() == 2 * keys.len()).then_some(rows))
    })
    .await?;
    for (i, key) in keys.iter().enumerate() {
        let (classid, objid, objsubid) = key.pg_locks_ids();
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| (r.0, r.1, r.2) == (classid, objid, objsubid))
            .collect();
        println!("{key:?}: {mine:?}");
        ensure!(mine.len() == 2, "{key:?}: {mine:?}");
        ensure!(mine[0].3 && mine[0].4 == holders[i].pid() as i32);
        ensure!(!mine[1].3 && mine[1].4 == waiters[i].pid() as i32);
    }
    let waitstart: Vec<(Option<String>, bool, String)> = sqlx::query_as(
        "SELECT waitstart::text, granted, mode FROM pg_locks WHERE locktype = 'advisory' \
         ORDER BY granted",
    )
    .fetch_all(&mut observer)
    .await?;
    println!("waitstart/granted/mode: {waitstart:?}");
    ensure!(waitstart.iter().all(|(w, g, _)| w.is_some() != *g));
    let blocking: Vec<i32> = sqlx::query_scalar("SELECT unnest(pg_blocking_pids($1))")
        .bind(waiters[0].pid() as i32)
        .fetch_all(&mut observer)
        .await?;
    ensure!(blocking == vec![holders[0].pid() as i32], "{blocking:?}");

    // Unlock hands over; try_lock never waits; shared locks share.
    ensure!(holders[0].unlock(keys[0], false).await?);
    waiters[0].wait_acquired(WAIT).await?;
    ensure!(!holders[0].try_lock(keys[0], Level::Session, false).await?);
    let shared = Advisory::open(pg(&server.url(), "shared-1").await?).await?;
    let shared2 = Advisory::open(pg(&server.url(), "shared-2").await?).await?;
    ensure!(
        shared
            .try_lock(AdvisoryKey::Big(9), Level::Session, true)
            .await?
    );
    ensure!(
        shared2
            .try_lock(AdvisoryKey::Big(9), Level::Session, true)
            .await?
    );
    ensure!(
        !holders[0]
            .try_lock(AdvisoryKey::Big(9), Level::Session, false)
            .await?
    );
    let modes: Vec<String> = sqlx::query_scalar(
        "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND objid = 9 AND classid = 0",
    )
    .fetch_all(&mut observer)
    .await?;
    ensure!(modes == ["ShareLock", "ShareLock"], "{modes:?}");

    // Transaction-level: released at COMMIT, with a waiter handed the lock.
    let mut x = Advisory::open(pg(&server.url(), "xact").await?).await?;
    x.begin().await?;
    x.lock(AdvisoryKey::Big(77), Level::Xact, false);
    x.wait_acquired(WAIT).await?;
    let mut xw = Advisory::open(pg(&server.url(), "xact-waiter").await?).await?;
    xw.lock(AdvisoryKey::Big(77), Level::Session, false);
    ensure!(xw.wait_acquired(STILL_BLOCKED).await.is_err());
    x.commit().await?;
    xw.wait_acquired(WAIT).await?;
    ensure!(xw.unlock(AdvisoryKey::Big(77), false).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_for_update_queue_and_deadlock() -> Result<()> {
    let server = Postgres::start_with(&["deadlock_timeout=200ms"]).await?;
    let mut setup = server.connect("setup").await?;
    create_lock_rows(&mut setup, "locks", &["orders", "invoices"]).await?;

    let mut holder = RowLocker::start(server.connect("holder").await?, "locks", "orders").await?;
    holder.wait_acquired(WAIT).await?;
    let mut queue = Vec::new();
    for i in 0..3 {
        let mut w = RowLocker::start(
            server.connect(&format!("waiter-{i}")).await?,
            "locks",
            "orders",
        )
        .await?;
        // Each waiter is in the lock queue before the next one starts.
        let pid = w.connection_id() as i32;
        let mut observer = pg(&server.url(), "observer").await?;
        eventually(WAIT, "the waiter waiting on a lock", async || {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted")
                    .bind(pid)
                    .fetch_one(&mut observer)
                    .await?;
            Ok((n > 0).then_some(()))
        })
        .await?;
        ensure!(!w.is_acquired());
        queue.push(w);
    }
    let mut observer = pg(&server.url(), "observer").await?;
    let waits: Vec<(i32, String, String, Option<String>)> = sqlx::query_as(
        "SELECT pid, locktype, mode, waitstart::text FROM pg_locks WHERE NOT granted \
         ORDER BY waitstart",
    )
    .fetch_all(&mut observer)
    .await?;
    println!("ungranted: {waits:?}");
    let pids: Vec<i32> = queue.iter().map(|w| w.connection_id() as i32).collect();
    ensure!(waits.len() == 3, "{waits:?}");
    ensure!(waits[0].0 == pids[0] && waits[0].1 == "transactionid" && waits[0].2 == "ShareLock");
    ensure!(waits[1].0 == pids[1] && waits[1].1 == "tuple" && waits[1].2 == "AccessExclusiveLock");
    ensure!(waits[2].0 == pids[2] && waits[2].1 == "tuple");
    for (i, pid) in pids.iter().enumerate() {
        let blockers: Vec<i32> = sqlx::query_scalar("SELECT unnest(pg_blocking_pids($1))")
            .bind(pid)
            .fetch_all(&mut observer)
            .await?;
        println!(
            "pg_blocking_pids(waiter {i}) = {blockers:?} (holder {}, waiters {pids:?})",
            holder.connection_id()
        );
    }
    let tuple = sqlx::query("SELECT * FROM pg_locks WHERE locktype = 'tuple' LIMIT 1")
        .fetch_one(&mut observer)
        .await?;
    println!("a tuple lock row: {:?}", types_of_pg(&tuple));

    holder.commit().await?;
    queue[0].wait_acquired(WAIT).await?;
    ensure!(!queue[1].is_acquired() && !queue[2].is_acquired());
    for w in queue {
        w.rollback().await?;
    }

    // Deadlock: PostgreSQL breaks it after deadlock_timeout with 40P01 for one side.
    let mut a = RowLocker::start(server.connect("dl-a").await?, "locks", "orders").await?;
    a.wait_acquired(WAIT).await?;
    let mut b = RowLocker::start(server.connect("dl-b").await?, "locks", "invoices").await?;
    b.wait_acquired(WAIT).await?;
    a.lock("invoices");
    ensure!(a.wait_acquired(STILL_BLOCKED).await.is_err());
    b.lock("orders");
    eventually(WAIT, "one deadlock victim", async || {
        Ok((a.error().is_some() || b.error().is_some()).then_some(()))
    })
    .await?;
    let victim = a.error().or(b.error()).context("victim")?;
    println!("deadlock: {victim}");
    ensure!(victim.is_deadlock() && victim.sqlstate.as_deref() == Some("40P01"));
    let survivor = if a.error().is_some() { &mut b } else { &mut a };
    survivor.wait_acquired(WAIT).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lock_table_shedlock_and_many_advisory_locks() -> Result<()> {
    let server = Postgres::start_with(&["max_locks_per_transaction=256"]).await?;
    let mut setup = server.connect("setup").await?;
    LockTable::create(&mut setup).await?;
    ShedLock::create(&mut setup).await?;
    lock_table_and_shedlock(
        server.connect("table").await?,
        server.connect("shedlock").await?,
        &mut setup,
    )
    .await?;

    let many = Advisory::open(pg(&server.url(), "many").await?).await?;
    let t = Instant::now();
    many.hold_many(1_000_000, 10_000, Duration::from_secs(60))
        .await?;
    println!("10 000 advisory locks held in {:?}", t.elapsed());
    let mut observer = pg(&server.url(), "observer").await?;
    let t = Instant::now();
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1",
    )
    .bind(many.pid() as i32)
    .fetch_one(&mut observer)
    .await?;
    println!("pg_locks read ({n} advisory rows) in {:?}", t.elapsed());
    ensure!(n == 10_000);
    many.unlock_all().await?;
    Ok(())
}
