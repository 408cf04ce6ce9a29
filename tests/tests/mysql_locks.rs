//! MariaDB through the database backend (issue 13), against a real MariaDB 10.11 and clients
//! that run the seeds' three MySQL recipes (a lock table with a unique resource, `SELECT … FOR
//! UPDATE` in a transaction, `GET_LOCK`) plus ShedLock's JDBC table: holders and ordered
//! waiters with their connections, release causes, connections as sessions, a deadlock between
//! two connections shown as a cycle while it lasts, the guarded force release of each kind (a
//! stale observation refused and nothing changed), a database down at start and mid-run, and a
//! user without `PROCESS` (a clear error).

use std::time::Duration;

use anyhow::{ensure, Result};
use lockscope::backends::database::{DbSourceConfig, LockTableConfig};
use lockscope::config::{section, Config, DbSource};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{LockView, ReleaseCause};
use lockscope_tests::db_scenarios;
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::support::dblocks::{
    create_lock_rows, DbConn, LockTable, RowLocker, ShedLock, SpringJdbcLock,
};
use lockscope_tests::support::mysql::{self, GetLock, GetLockOutcome, MariaDb, Params};
use lockscope_tests::support::ports::free_port;
use lockscope_tests::support::python::PyClient;
use serde_json::{json, Value};

const TOKEN: &str = "mysql-admin-token";
const WAIT: Duration = Duration::from_secs(30);
const ROW: &str = "/rows/app.locks/PRIMARY/'orders'";

fn source(url: &str) -> DbSourceConfig {
    let mut config = DbSourceConfig::new("m", url);
    config.poll_interval = Duration::from_millis(200);
    config.lock_tables = vec![
        LockTableConfig::new("app.database_lock", "resource", "description", None),
        LockTableConfig::new("app.shedlock", "name", "locked_by", Some("lock_until")),
    ];
    config
}

async fn start(config: DbSourceConfig, admin: Option<&std::path::Path>) -> Result<Lockscope> {
    let mut config = Config {
        sources: section("mysql", vec![config].into_iter().map(DbSource::mysql)),
        ..Config::default()
    };
    if let Some(dir) = admin {
        config = with_admin(config, dir, TOKEN);
    }
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

/// The app schema every test uses: the seed's lock table, ShedLock's, and lock rows.
async fn schema(server: &MariaDb) -> Result<()> {
    let mut conn = mysql::connect_db(&server.app_url()).await?;
    LockTable::create(&mut conn).await?;
    ShedLock::create(&mut conn).await?;
    create_lock_rows(&mut conn, "locks", &["orders", "billing"]).await?;
    Ok(())
}

async fn conn(server: &MariaDb) -> Result<DbConn> {
    mysql::connect_db(&server.app_url()).await
}

fn nodes(lock: &LockView) -> (Vec<String>, Vec<String>) {
    (
        lock.holders.iter().map(|h| h.node.clone()).collect(),
        lock.waiters.iter().map(|w| w.node.clone()).collect(),
    )
}

fn sessions_of(lock: &LockView) -> (Vec<String>, Vec<String>) {
    (
        lock.holders.iter().map(|h| h.session.clone()).collect(),
        lock.waiters.iter().map(|w| w.session.clone()).collect(),
    )
}

async fn release(ls: &Lockscope, id: &str, body: Value) -> Result<(u16, Value)> {
    ls.release(id, Some(TOKEN), &body).await
}

fn released_by(detail: &lockscope_model::wire::LockDetail, node: &str) -> Option<ReleaseCause> {
    detail
        .events
        .iter()
        .rev()
        .find(|e| e.kind == "released" && e.node == node)
        .and_then(|e| e.cause)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_recipes_queues_sessions_and_release_causes() -> Result<()> {
    let server = MariaDb::start().await?;
    schema(&server).await?;
    let ls = start(source(&server.url()), None).await?;

    // The seed's lock table: insert = lock, delete = unlock.
    let mut table = LockTable::new(conn(&server).await?).await?;
    ensure!(table.try_lock("invoice-42", "worker-7").await?);
    ensure!(
        !LockTable::new(conn(&server).await?)
            .await?
            .try_lock("invoice-42", "worker-8")
            .await?
    );
    let path = "/tables/app.database_lock/invoice-42";
    let lock = ls
        .wait_lock("m", path, WAIT, "lock-table row", |l| {
            nodes(l).0 == ["worker-7"]
        })
        .await?;
    ensure!(lock.recipe == "lock_table" && lock.waiters.is_empty());

    // ShedLock: a row per name; unlock moves lock_until, the row stays and is free.
    let mut shed = ShedLock::new(conn(&server).await?, "host-a");
    ensure!(shed.lock("nightly", Duration::from_secs(60)).await?);
    let shed_path = "/tables/app.shedlock/nightly";
    let held = ls
        .wait_lock("m", shed_path, WAIT, "ShedLock holder", |l| {
            nodes(l).0 == ["host-a"] && l.expires_at_ms.is_some()
        })
        .await?;
    ensure!(held.recipe == "lock_table_until", "{held:?}");

    // FOR UPDATE: a holder and a queue of two, in order, with their connections.
    let mut holder = RowLocker::start(conn(&server).await?, "locks", "orders").await?;
    holder.wait_acquired(WAIT).await?;
    let mut second = RowLocker::start(conn(&server).await?, "locks", "orders").await?;
    let first_waiter_seen = ls
        .wait_lock("m", ROW, WAIT, "first FOR UPDATE waiter", |l| {
            l.waiters.len() == 1
        })
        .await?;
    ensure!(first_waiter_seen.holders.len() == 1);
    let third = RowLocker::start(conn(&server).await?, "locks", "orders").await?;
    let queue = ls
        .wait_lock("m", ROW, WAIT, "holder and two waiters", |l| {
            l.waiters.len() == 2
        })
        .await?;
    let ids = |c: &RowLocker| c.connection_id().to_string();
    ensure!(
        sessions_of(&queue) == (vec![ids(&holder)], vec![ids(&second), ids(&third)]),
        "queue {:?} vs connections {} {} {}",
        sessions_of(&queue),
        ids(&holder),
        ids(&second),
        ids(&third)
    );
    ensure!(queue.recipe == "row_lock");
    ensure!(queue
        .flags
        .contains(&"holder_visible_only_while_contended".to_string()));
    ensure!(queue.waiters.iter().all(|w| w.deadline_ms.is_some()));
    ensure!(queue.holders[0].node.starts_with("trx "));
    let first_holder = queue.holders[0].node.clone();

    // GET_LOCK: a holder and a waiter whose statement names the lock, with its deadline.
    let mut gl_holder = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "jobs",
        10,
        Params::Literal,
    )
    .await?;
    gl_holder.wait_acquired(WAIT).await?;
    let mut gl_waiter = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "jobs",
        120,
        Params::Literal,
    )
    .await?;
    let named = ls
        .wait_lock(
            "m",
            "/get_lock/jobs",
            WAIT,
            "GET_LOCK holder and waiter",
            |l| l.holders.len() == 1 && l.waiters.len() == 1,
        )
        .await?;
    ensure!(
        sessions_of(&named)
            == (
                vec![gl_holder.connection_id().to_string()],
                vec![gl_waiter.connection_id().to_string()]
            ),
        "{named:?}"
    );
    let deadline = named.waiters[0].deadline_ms.unwrap_or_default();
    let since = named.waiters[0].since_ms;
    ensure!(
        (deadline - since - 120_000).abs() < 2_000,
        "GET_LOCK deadline {deadline} vs wait since {since}"
    );

    // Connections are sessions: what each holds and waits on, with what MariaDB tells.
    let row_id = lock_id("m", ROW);
    let holder_conn = ids(&holder);
    let sessions = ls
        .wait_sessions(WAIT, "connections as sessions", |s| {
            s.iter()
                .any(|s| s.session == holder_conn && s.holds.contains(&row_id))
        })
        .await?;
    let waiting = sessions
        .iter()
        .find(|s| s.session == ids(&second))
        .expect("the first waiter's connection");
    ensure!(waiting.waits == [row_id.clone()], "{waiting:?}");
    let details = waiting.connection.as_ref().expect("connection details");
    ensure!(details.user == "root" && details.transaction_since_ms.is_some());
    ensure!(details
        .statement
        .as_deref()
        .is_some_and(|s| s.contains("FOR UPDATE")));

    // Releases: commit hands the row on in order; RELEASE_LOCK wakes the GET_LOCK waiter;
    // deleting the row and ShedLock's unlock release with cause `released`.
    holder.commit().await?;
    second.wait_acquired(WAIT).await?;
    ls.wait_lock("m", ROW, WAIT, "the second transaction holds", |l| {
        sessions_of(l) == (vec![ids(&second)], vec![ids(&third)])
    })
    .await?;
    // The client closes its connection right after COMMIT: within one poll both are gone, so
    // either cause is what an observer saw.
    let detail = ls.detail("m", ROW).await?;
    ensure!(matches!(
        released_by(&detail, &first_holder),
        Some(ReleaseCause::Released | ReleaseCause::ConnectionClosed)
    ));
    gl_holder.release().await?;
    let holder_node = format!("conn {}", gl_holder.connection_id());
    ensure!(gl_waiter.wait_outcome(WAIT).await? == GetLockOutcome::Acquired);
    let waiter_conn = gl_waiter.connection_id().to_string();
    let handed = ls
        .wait_detail("m", "/get_lock/jobs", WAIT, "GET_LOCK handed on", |d| {
            d.events
                .iter()
                .any(|e| e.kind == "acquired" && e.session == waiter_conn)
        })
        .await?;
    // RELEASE_LOCK on a connection that stays open.
    ensure!(released_by(&handed, &holder_node) == Some(ReleaseCause::Released));
    ensure!(table.unlock("invoice-42", "worker-7").await?);
    let gone = ls
        .wait_detail("m", path, WAIT, "lock-table row deleted", |d| d.gone)
        .await?;
    ensure!(released_by(&gone, "worker-7") == Some(ReleaseCause::Released));
    ensure!(shed.unlock("nightly", Duration::ZERO).await?);
    let free = ls
        .wait_lock("m", shed_path, WAIT, "ShedLock row free", |l| {
            l.holders.is_empty() && l.flags.contains(&"expired".to_string())
        })
        .await?;
    ensure!(free.releases == 1);
    let detail = ls.detail("m", shed_path).await?;
    ensure!(released_by(&detail, "host-a") == Some(ReleaseCause::Released));

    // A closed connection releases its GET_LOCK: cause connection_closed.
    drop(gl_waiter);
    let detail = ls
        .wait_detail("m", "/get_lock/jobs", WAIT, "closed connection", |d| d.gone)
        .await?;
    ensure!(
        released_by(&detail, &format!("conn {waiter_conn}"))
            == Some(ReleaseCause::ConnectionClosed),
        "{:?}",
        detail.events
    );

    // A GET_LOCK waiter whose timeout passes leaves by `timeout`.
    let mut blocker = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "short",
        10,
        Params::Literal,
    )
    .await?;
    blocker.wait_acquired(WAIT).await?;
    let mut impatient = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "short",
        2,
        Params::Literal,
    )
    .await?;
    ls.wait_lock("m", "/get_lock/short", WAIT, "impatient waiter", |l| {
        l.waiters.len() == 1
    })
    .await?;
    ensure!(impatient.wait_outcome(WAIT).await? == GetLockOutcome::TimedOut);
    let impatient_node = format!("conn {}", impatient.connection_id());
    ls.wait_detail("m", "/get_lock/short", WAIT, "left by timeout", |d| {
        d.events.iter().any(|e| {
            e.kind == "left_queue"
                && e.node == impatient_node
                && e.cause == Some(ReleaseCause::Timeout)
        })
    })
    .await?;
    drop((third, second, blocker));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_of_each_kind_refuses_stale_observations() -> Result<()> {
    let server = MariaDb::start().await?;
    schema(&server).await?;
    let dir = tempfile::tempdir()?;
    let ls = start(source(&server.url()), Some(dir.path())).await?;

    // A lock-table row: a stale owner is refused, the seen one is deleted.
    let mut table = LockTable::new(conn(&server).await?).await?;
    ensure!(table.try_lock("invoice-9", "worker-1").await?);
    let path = "/tables/app.database_lock/invoice-9";
    ls.wait_lock("m", path, WAIT, "row", |l| !l.holders.is_empty())
        .await?;
    let id = lock_id("m", path);
    let (status, _) = release(&ls, &id, json!({"holder": "worker-2", "reason": "stale"})).await?;
    ensure!(status == 409, "a stale owner is refused: {status}");
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": "worker-1", "reason": "dead worker"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(body["released"]["action"] == "row deleted", "{body}");
    ensure!(
        !table.unlock("invoice-9", "worker-1").await?,
        "the row is gone"
    );
    let detail = ls
        .wait_detail("m", path, WAIT, "forced", |d| d.gone)
        .await?;
    ensure!(released_by(&detail, "worker-1") == Some(ReleaseCause::Forced));

    // A ShedLock row: the expiry seen must match; then it is set to now (the row stays).
    let mut shed = ShedLock::new(conn(&server).await?, "host-b");
    ensure!(shed.lock("report", Duration::from_secs(300)).await?);
    let shed_path = "/tables/app.shedlock/report";
    let lock = ls
        .wait_lock("m", shed_path, WAIT, "ShedLock row", |l| {
            !l.holders.is_empty()
        })
        .await?;
    let version = lock.holders[0].version.clone().expect("expiry as version");
    let id = lock_id("m", shed_path);
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": "host-b", "version": "2000-01-01 00:00:00.000", "reason": "stale"}),
    )
    .await?;
    ensure!(status == 409, "a stale expiry is refused: {status} {body}");
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": "host-b", "version": version, "reason": "stuck job"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(body["released"]["action"] == "expiry set to now", "{body}");
    let (until, _, by) = shed.row("report").await?.expect("the row stays");
    ensure!(by == "host-b" && until != version, "{until} {by}");
    ls.wait_lock("m", shed_path, WAIT, "ShedLock row free", |l| {
        l.holders.is_empty()
    })
    .await?;
    let mut other = ShedLock::new(conn(&server).await?, "host-c");
    ensure!(
        other.lock("report", Duration::from_secs(60)).await?,
        "free to take"
    );

    // A row lock: the transaction start seen must match; then its connection is killed and
    // the waiter gets the row.
    let mut holder = RowLocker::start(conn(&server).await?, "locks", "orders").await?;
    holder.wait_acquired(WAIT).await?;
    let mut waiter = RowLocker::start(conn(&server).await?, "locks", "orders").await?;
    let lock = ls
        .wait_lock("m", ROW, WAIT, "row lock with a waiter", |l| {
            l.waiters.len() == 1 && !l.holders.is_empty()
        })
        .await?;
    let h = lock.holders[0].clone();
    let id = lock_id("m", ROW);
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": h.node, "version": "1999-01-01 00:00:00", "reason": "stale"}),
    )
    .await?;
    ensure!(
        status == 409,
        "a stale transaction start is refused: {status} {body}"
    );
    ensure!(!waiter.is_acquired(), "nothing changed");
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": h.node, "version": h.version, "reason": "hung batch"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(body["released"]["action"] == "connection killed", "{body}");
    ensure!(body["released"]["effect"]
        .as_str()
        .is_some_and(|e| e.contains("rolls back")));
    waiter.wait_acquired(WAIT).await?;
    drop(holder);

    // GET_LOCK: the holder's connection is killed only while it holds that name.
    let mut gl = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "deploy",
        10,
        Params::Bound,
    )
    .await?;
    gl.wait_acquired(WAIT).await?;
    let lock = ls
        .wait_lock("m", "/get_lock/deploy", WAIT, "GET_LOCK holder", |l| {
            l.holders.len() == 1
        })
        .await?;
    let h = lock.holders[0].clone();
    // Who holds: the connection's user and client address, as the process list tells them.
    let who = h.identity.clone().unwrap_or_default();
    ensure!(
        who.starts_with("root@")
            && who
                .rsplit_once(':')
                .is_some_and(|(_, port)| port.parse::<u16>().is_ok()),
        "a GET_LOCK holder is named by its user and client: {who:?}"
    );
    let id = lock_id("m", "/get_lock/deploy");
    let (status, _) = release(
        &ls,
        &id,
        json!({"holder": "conn 999999", "reason": "stale"}),
    )
    .await?;
    ensure!(status == 409);
    let (status, body) = release(
        &ls,
        &id,
        json!({"holder": h.node, "reason": "stuck deploy"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    let detail = ls
        .wait_detail("m", "/get_lock/deploy", WAIT, "forced", |d| d.gone)
        .await?;
    ensure!(released_by(&detail, &h.node) == Some(ReleaseCause::Forced));

    // Every attempt is audited.
    let (_, audit) = ls.get_json("/api/v1/audit").await?;
    let outcomes: Vec<&str> = audit["audit"]
        .as_array()
        .map(|r| r.iter().filter_map(|r| r["outcome"].as_str()).collect())
        .unwrap_or_default();
    ensure!(
        outcomes.iter().filter(|o| **o == "released").count() == 4
            && outcomes.iter().filter(|o| **o == "holder_changed").count() == 4,
        "{audit}"
    );
    drop(waiter);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_between_two_connections_is_a_cycle_while_it_lasts() -> Result<()> {
    // InnoDB breaks deadlocks at once unless detection is off; then they last until the lock
    // wait timeout.
    let server = MariaDb::start_with(&["--innodb-deadlock-detect=OFF"]).await?;
    schema(&server).await?;
    let ls = start(source(&server.url()), None).await?;
    let mut a = RowLocker::start(conn(&server).await?, "locks", "orders").await?;
    a.wait_acquired(WAIT).await?;
    let mut b = RowLocker::start(conn(&server).await?, "locks", "billing").await?;
    b.wait_acquired(WAIT).await?;
    a.lock("billing");
    b.lock("orders");
    let cycle = eventually(WAIT, "a deadlock cycle", async || {
        let (_, body) = ls.get_json("/api/v1/deadlocks").await?;
        let cycles = body["cycles"].as_array().cloned().unwrap_or_default();
        Ok((!cycles.is_empty()).then_some(body))
    })
    .await?;
    let text = cycle.to_string();
    ensure!(
        text.contains(&format!("\"{}\"", a.connection_id()))
            && text.contains(&format!("\"{}\"", b.connection_id())),
        "{text}"
    );
    ls.wait_metric("lockscope_deadlock_cycles{source=\"m\"}", |v| v == 1.0)
        .await?;
    drop(b);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_at_start_and_mid_run_and_a_user_without_process() -> Result<()> {
    let port = free_port();
    let url = format!("mysql://root@127.0.0.1:{port}/");
    let ls = Lockscope::start(Config {
        sources: section("mysql", vec![source(&url)].into_iter().map(DbSource::mysql)),
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
    let mut server = MariaDb::start_on(port, &[]).await?;
    schema(&server).await?;
    let mut gl = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "x",
        10,
        Params::Literal,
    )
    .await?;
    gl.wait_acquired(WAIT).await?;
    ls.wait_lock("m", "/get_lock/x", WAIT, "recovered by itself", |l| {
        l.holders.len() == 1
    })
    .await?;
    server.kill();
    eventually(WAIT, "down mid-run", async || {
        Ok(ls.sources().await?.into_iter().find(|s| !s.up))
    })
    .await?;
    server.restart().await?;
    let mut gl = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "y",
        10,
        Params::Literal,
    )
    .await?;
    gl.wait_acquired(WAIT).await?;
    ls.wait_lock("m", "/get_lock/y", WAIT, "back after a restart", |l| {
        l.holders.len() == 1
    })
    .await?;
    ensure!(
        ls.lock("m", "/get_lock/x").await?.is_none(),
        "the old server's lock went"
    );

    // A user without PROCESS: a clear error, the rest still works.
    server
        .create_user("plain", "p-pass", &["SELECT ON app.*"])
        .await?;
    server
        .create_user("watcher", "w-pass", &["PROCESS ON *.*", "SELECT ON app.*"])
        .await?;
    let mut plain = source(&server.url_for("plain", "p-pass"));
    plain.name = "plain".into();
    let mut watcher = source(&server.url_for("watcher", "w-pass"));
    watcher.name = "watcher".into();
    let ls2 = Lockscope::start(Config {
        sources: section(
            "mysql",
            vec![plain, watcher].into_iter().map(DbSource::mysql),
        ),
        ..Config::default()
    })
    .await?;
    ls2.wait_ready(WAIT).await?;
    let sources = eventually(WAIT, "both sources synced", async || {
        let s = ls2.sources().await?;
        Ok(s.iter().all(|s| s.synced).then_some(s))
    })
    .await?;
    let plain = sources.iter().find(|s| s.name == "plain").expect("plain");
    ensure!(
        plain
            .error
            .as_deref()
            .is_some_and(|e| e.contains("PROCESS")),
        "{plain:?}"
    );
    let watcher = sources
        .iter()
        .find(|s| s.name == "watcher")
        .expect("watcher");
    ensure!(watcher.error.is_none(), "{watcher:?}");
    ls2.wait_lock("watcher", "/get_lock/y", WAIT, "seen with PROCESS", |l| {
        l.holders.len() == 1
    })
    .await?;
    drop(gl);
    Ok(())
}

/// PyMySQL 1.2 (the real client, from PyPI) sends a `bytes` lock name as a `_binary` literal:
/// its waiter lands under the same lock as the holder (the name `METADATA_LOCK_INFO` shows), not
/// under `/get_lock/?`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_lock_names_sent_as_bytes_land_under_their_lock() -> Result<()> {
    let server = MariaDb::start().await?;
    let ls = start(source(&server.app_url()), None).await?;
    // "vöte" as bytes (UTF-8: METADATA_LOCK_INFO shows names as text).
    let name = "vöte".as_bytes();
    let mut holder = PyClient::pymysql_get_lock(server.port(), "root", "", name).await?;
    holder.acquire().await?;
    let mut waiter = PyClient::pymysql_get_lock(server.port(), "root", "", name).await?;
    waiter.start_acquire().await?;
    let path = "/get_lock/vöte";
    let lock = ls
        .wait_lock(
            "m",
            path,
            WAIT,
            "the bytes-named holder and its waiter",
            |l| l.holders.len() == 1 && l.waiters.len() == 1,
        )
        .await?;
    ensure!(
        sessions_of(&lock)
            == (
                vec![holder.client_ids()[0].to_string()],
                vec![waiter.client_ids()[0].to_string()]
            ),
        "{lock:?}"
    );
    ensure!(
        ls.lock("m", "/get_lock/?").await?.is_none(),
        "a waiter fell under /get_lock/?"
    );
    holder.release().await?;
    waiter.wait_acquired(WAIT).await?;
    ls.wait_lock("m", path, WAIT, "handed to the waiter", |l| {
        l.waiters.is_empty()
            && l.holders
                .iter()
                .any(|h| h.session == waiter.client_ids()[0].to_string())
    })
    .await?;
    Ok(())
}

/// Spring Integration's `JdbcLockRegistry` (7.x) on MariaDB: Spring's DDL (`INT_LOCK` with
/// `DATETIME(6)` columns, names kept in upper case), the server's default time zone far from
/// UTC (lockscope compares `EXPIRED_AFTER` with `UTC_TIMESTAMP(6)`); see
/// [`db_scenarios::spring_jdbc_lock_registry`] for what is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_jdbc_lock_registry_names_expiry_and_guarded_release() -> Result<()> {
    let server = MariaDb::start_with(&["--default-time-zone=+05:45"]).await?;
    let mut c = conn(&server).await?;
    SpringJdbcLock::create(&mut c, "INT_").await?;
    let dir = tempfile::tempdir()?;
    let mut config = DbSourceConfig::new("m", &server.url());
    config.poll_interval = Duration::from_millis(200);
    config.lock_tables = vec![LockTableConfig::spring(
        "app.INT_LOCK",
        &["orders", "invoice/42"],
    )];
    let ls = start(config, Some(dir.path())).await?;
    db_scenarios::spring_jdbc_lock_registry(&ls, "m", "app.INT_LOCK", TOKEN, async || {
        conn(&server).await
    })
    .await
}
