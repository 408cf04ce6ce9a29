//! The root of a pile-up in one look (issue 37), against real servers and real clients:
//!
//! * a deadlock across two backends — two Python processes, each with a kazoo client and a
//!   psycopg connection named after the process (kazoo's identifier, `application_name`), each
//!   holding one lock and waiting on the other's — is one cycle of `/api/v1/deadlocks` naming
//!   both processes, each hop with its source and lock, counted by
//!   `lockscope_cross_source_deadlock_cycles` (and not by the per-source
//!   `lockscope_deadlock_cycles`); the same with MariaDB `GET_LOCK` and the `program_name`
//!   connection attribute;
//! * the queue behind a migration — a transaction left idle holding a table, an `ALTER TABLE`
//!   waiting for it, a `SELECT` behind the `ALTER` — is one lock per database (PostgreSQL's
//!   relation locks, MariaDB's metadata locks): the idle holder, then the `ALTER`, then the
//!   `SELECT`, with their statements' kinds; the idle transaction is the root blocker, holding
//!   up as many as the server's own view says (`pg_blocking_pids`, the process list), and a
//!   guarded force release of it lets the queue through.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::database::DbSourceConfig;
use lockscope::config::{section, Config, DbSource};
use lockscope_model::wire::{BlockersPage, CycleView, LockView};
use lockscope_tests::harness::{eventually, with_admin, zk_source, Lockscope};
use lockscope_tests::support::appproc::{deadlock, AppSpec, MysqlAccess};
use lockscope_tests::support::dblocks::Session;
use lockscope_tests::support::mysql::{self, MariaDb};
use lockscope_tests::support::postgres::{self, Postgres};
use lockscope_tests::support::python::python_and_script;
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "pileup-admin-token";

async fn prepare_python() -> Result<()> {
    tokio::task::spawn_blocking(python_and_script).await??;
    Ok(())
}

fn db_source(name: &str, url: &str) -> DbSourceConfig {
    let mut config = DbSourceConfig::new(name, url);
    config.poll_interval = Duration::from_millis(200);
    config
}

/// The cycles of `/api/v1/deadlocks` once one spans more than one source.
async fn wait_cross_cycle(ls: &Lockscope) -> Result<CycleView> {
    eventually(WAIT, "a cycle across sources", async || {
        let (status, body) = ls.get_json("/api/v1/deadlocks").await?;
        ensure!(status == 200, "{status} {body}");
        let cycles: Vec<CycleView> = serde_json::from_value(body["cycles"].clone())?;
        Ok(cycles.into_iter().find(|c| c.sources.len() > 1))
    })
    .await
}

/// Checks a cycle between processes `a` and `b` over sources `sources`: both named, every hop
/// with its source, the two waits crossing.
fn check_cycle(cycle: &CycleView, sources: &[&str], a: &str, b: &str) -> Result<()> {
    ensure!(cycle.sources == sources, "{cycle:#?}");
    ensure!(cycle.counted, "joined by exact names: counted; {cycle:#?}");
    let processes: BTreeSet<&str> = cycle
        .members
        .iter()
        .filter_map(|m| m.process.as_ref().map(|p| p.name.as_str()))
        .collect();
    ensure!(processes == BTreeSet::from([a, b]), "{cycle:#?}");
    ensure!(
        cycle.members.len() == 4,
        "two sessions per process: {cycle:#?}"
    );
    ensure!(cycle.waits.len() == 2, "{cycle:#?}");
    let hops: BTreeSet<(&str, Option<&str>, Option<&str>)> = cycle
        .waits
        .iter()
        .map(|w| {
            (
                w.source.as_str(),
                w.waiter_process.as_deref(),
                w.holder_process.as_deref(),
            )
        })
        .collect();
    ensure!(
        hops == BTreeSet::from([
            (sources[0], Some(a), Some(b)),
            (sources[1], Some(b), Some(a))
        ]) || hops
            == BTreeSet::from([
                (sources[0], Some(b), Some(a)),
                (sources[1], Some(a), Some(b))
            ]),
        "each hop names its source and both processes: {cycle:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_across_zookeeper_and_postgres_is_one_cycle_naming_both_processes() -> Result<()>
{
    let (python, zk, pg) = tokio::join!(prepare_python(), ZkEnsemble::start(1), Postgres::start());
    python?;
    let (zk, pg) = (zk?, pg?);
    let hosts = zk.connect_string();
    let root = unique_root("pileup");
    let mut config = Config {
        sources: section(
            "postgres",
            vec![db_source("pg", &pg.url())]
                .into_iter()
                .map(DbSource::postgres),
        ),
        ..Config::default()
    };
    config.sources.extend(section(
        "zookeeper",
        vec![zk_source("zk", &hosts, &[&root])],
    ));
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;

    let spec = |name: &str| AppSpec {
        name: name.into(),
        zk_hosts: Some(hosts.clone()),
        pg_url: Some(pg.url()),
        mysql: None,
    };
    let zk_lock = format!("zk {root}/orders");
    let (a, b) = deadlock(spec("svc-a"), spec("svc-b"), &zk_lock, "pg 4242").await?;

    let cycle = wait_cross_cycle(&ls).await?;
    check_cycle(&cycle, &["pg", "zk"], "svc-a", "svc-b")?;
    let zk_sessions: BTreeSet<String> = cycle
        .members
        .iter()
        .filter(|m| m.source == "zk")
        .map(|m| m.session.clone())
        .collect();
    ensure!(
        zk_sessions == BTreeSet::from([a.zk_session().context("a")?, b.zk_session().context("b")?]),
        "{cycle:#?}"
    );
    let pg_sessions: BTreeSet<String> = cycle
        .members
        .iter()
        .filter(|m| m.source == "pg")
        .map(|m| m.session.clone())
        .collect();
    ensure!(
        pg_sessions
            == BTreeSet::from([
                a.pg_pid().context("a")?.to_string(),
                b.pg_pid().context("b")?.to_string()
            ]),
        "{cycle:#?}"
    );
    // Counted once, across sources; neither source alone has a cycle.
    ls.wait_metric("lockscope_cross_source_deadlock_cycles", |v| v == 1.0)
        .await?;
    let metrics = ls.metrics().await?;
    for source in ["zk", "pg"] {
        let series = format!("lockscope_deadlock_cycles{{source=\"{source}\"}}");
        ensure!(
            lockscope_tests::harness::metric_value(&metrics, &series) == Some(0.0),
            "{series}: {metrics}"
        );
    }
    // The wait-for graph's page joins each process's two sessions, exactly.
    let (status, page) = ls.get_json("/api/v1/waitfor").await?;
    ensure!(status == 200, "{status} {page}");
    let joins: BTreeSet<(String, bool, usize)> = page["joins"]
        .as_array()
        .context("joins")?
        .iter()
        .map(|j| {
            (
                j["process"].as_str().unwrap_or_default().to_string(),
                j["exact"] == true,
                j["sessions"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    ensure!(
        joins == BTreeSet::from([("svc-a".into(), true, 2), ("svc-b".into(), true, 2)]),
        "{page}"
    );
    // Nobody is a root blocker: everyone in a deadlock waits.
    let (_, blockers) = ls.get_json("/api/v1/blockers").await?;
    let blockers: BlockersPage = serde_json::from_value(blockers)?;
    ensure!(blockers.total == 0, "{blockers:#?}");

    // svc-b ends: its ZooKeeper session and its connection go, the cycle with them.
    drop(b);
    ls.wait_metric("lockscope_cross_source_deadlock_cycles", |v| v == 0.0)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_across_zookeeper_and_mariadb_is_joined_by_program_name() -> Result<()> {
    let (python, zk, db) = tokio::join!(
        prepare_python(),
        ZkEnsemble::start(1),
        MariaDb::start_with(&["--performance-schema=ON"])
    );
    python?;
    let (zk, db) = (zk?, db?);
    let hosts = zk.connect_string();
    let root = unique_root("pileup-my");
    let mut config = Config {
        sources: section(
            "mysql",
            vec![db_source("my", &db.url())]
                .into_iter()
                .map(DbSource::mysql),
        ),
        ..Config::default()
    };
    config.sources.extend(section(
        "zookeeper",
        vec![zk_source("zk", &hosts, &[&root])],
    ));
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    let spec = |name: &str| AppSpec {
        name: name.into(),
        zk_hosts: Some(hosts.clone()),
        pg_url: None,
        mysql: Some(MysqlAccess {
            host: "127.0.0.1".into(),
            port: db.port(),
            user: "root".into(),
            password: String::new(),
        }),
    };
    let zk_lock = format!("zk {root}/ledger");
    let (c, d) = deadlock(spec("svc-c"), spec("svc-d"), &zk_lock, "mysql ledger-sync").await?;
    let cycle = wait_cross_cycle(&ls).await?;
    check_cycle(&cycle, &["my", "zk"], "svc-c", "svc-d")?;
    let my: BTreeSet<String> = cycle
        .members
        .iter()
        .filter(|m| m.source == "my")
        .map(|m| m.session.clone())
        .collect();
    ensure!(
        my == BTreeSet::from([
            c.mysql_id().context("c")?.to_string(),
            d.mysql_id().context("d")?.to_string()
        ]),
        "{cycle:#?}"
    );
    for m in cycle.members.iter().filter(|m| m.source == "my") {
        let p = m.process.as_ref().context("process")?;
        ensure!(p.from == "application" && p.exact, "{m:?}");
    }
    ls.wait_metric("lockscope_cross_source_deadlock_cycles", |v| v == 1.0)
        .await?;
    Ok(())
}

/// The table-lock queue once it has `waiters` waiters.
async fn wait_queue(ls: &Lockscope, source: &str, waiters: usize) -> Result<LockView> {
    let mut last = None;
    eventually(WAIT, "a table lock queue", async || {
        let locks = ls.locks().await?;
        let queue = locks
            .into_iter()
            .find(|l| l.source == source && l.recipe == "table_lock");
        let done = queue.clone().filter(|l| l.waiters.len() == waiters);
        last = queue;
        Ok(done)
    })
    .await
    .with_context(|| format!("last: {last:#?}"))
}

/// Checks a queue: the idle holder first, then the ALTER, then the SELECT, with their kinds.
fn check_queue(lock: &LockView, idle: i64, alter: i64, select: i64) -> Result<()> {
    let holders: Vec<&str> = lock.holders.iter().map(|h| h.session.as_str()).collect();
    ensure!(holders == [idle.to_string()], "{lock:#?}");
    let waiters: Vec<&str> = lock.waiters.iter().map(|w| w.session.as_str()).collect();
    ensure!(
        waiters == [alter.to_string(), select.to_string()],
        "{lock:#?}"
    );
    let kind = |s: &Option<Box<lockscope_model::wire::StatementView>>| {
        s.as_ref().map(|s| s.kind.clone()).unwrap_or_default()
    };
    ensure!(kind(&lock.holders[0].statement) == "idle", "{lock:#?}");
    ensure!(kind(&lock.waiters[0].statement) == "ddl", "{lock:#?}");
    ensure!(kind(&lock.waiters[1].statement) == "read", "{lock:#?}");
    ensure!(
        lock.flags.iter().any(|f| f == "holder_idle_in_transaction"),
        "{lock:#?}"
    );
    Ok(())
}

/// The first root blocker once it holds up `total`.
async fn wait_root(ls: &Lockscope, total: u64) -> Result<BlockersPage> {
    eventually(WAIT, "a root blocker", async || {
        let (status, body) = ls.get_json("/api/v1/blockers").await?;
        ensure!(status == 200, "{status} {body}");
        let page: BlockersPage = serde_json::from_value(body)?;
        Ok(page
            .blockers
            .first()
            .is_some_and(|b| b.total == total)
            .then_some(page))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_queue_behind_alter_table_is_one_lock_rooted_in_the_idle_transaction(
) -> Result<()> {
    let server = Postgres::start().await?;
    server
        .exec("CREATE TABLE queue_t (id int PRIMARY KEY, v int); INSERT INTO queue_t VALUES (1, 1)")
        .await?;
    let dir = tempfile::tempdir()?;
    let config = Config {
        sources: section(
            "postgres",
            vec![db_source("pg", &server.url())]
                .into_iter()
                .map(DbSource::postgres),
        ),
        ..Config::default()
    };
    let ls = Lockscope::start(with_admin(config, dir.path(), TOKEN)).await?;
    ls.wait_ready(WAIT).await?;

    let idle = Session::new(postgres::connect_db(&server.url(), "report-job").await?).await?;
    idle.exec("BEGIN").await?;
    idle.exec("SELECT * FROM queue_t").await?;
    let alter = Session::new(postgres::connect_db(&server.url(), "migration").await?).await?;
    let mut altered = alter.start("ALTER TABLE queue_t ADD COLUMN w int");
    let reads = Session::new(postgres::connect_db(&server.url(), "web").await?).await?;
    let lock = {
        // The SELECT queues only after the ALTER does.
        let _ = wait_queue(&ls, "pg", 1).await?;
        let mut read = reads.start("SELECT * FROM queue_t");
        let lock = wait_queue(&ls, "pg", 2).await?;
        check_queue(
            &lock,
            idle.connection_id(),
            alter.connection_id(),
            reads.connection_id(),
        )?;
        ensure!(
            lock.path == "/table_locks/postgres/queue_t",
            "{}",
            lock.path
        );

        // The root blocker holds up as many as PostgreSQL says, through the ALTER.
        let mut conn = postgres::connect(&server.url(), "check").await?;
        let rows: Vec<(i32, Vec<i32>)> = sqlx::query_as(
            "SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
        )
        .fetch_all(&mut conn)
        .await?;
        let held_up = held_up_by(idle.connection_id(), &rows);
        ensure!(held_up == 2, "pg_blocking_pids: {rows:?}");
        let page = wait_root(&ls, held_up).await?;
        let root = &page.blockers[0];
        ensure!(
            root.sessions[0].session == idle.connection_id().to_string(),
            "{page:#?}"
        );
        ensure!(
            root.process.as_ref().map(|p| p.name.as_str()) == Some("report-job"),
            "{page:#?}"
        );
        ensure!(root.locks == [lock.id.clone()], "{page:#?}");
        ls.wait_metric("lockscope_root_blocker_held_up_max{source=\"pg\"}", |v| {
            v == 2.0
        })
        .await?;

        // A guarded force release of the root: the queue goes through.
        let holder = &lock.holders[0];
        let (status, body) = ls
            .release(
                &lock.id,
                Some(TOKEN),
                &json!({"holder": holder.node, "version": holder.version, "reason": "idle transaction blocks a migration"}),
            )
            .await?;
        ensure!(status == 200, "{status} {body}");
        ensure!(
            body["released"]["action"] == "pg_terminate_backend",
            "{body}"
        );
        altered.wait(WAIT).await?;
        read.wait(WAIT).await?;
        lock
    };
    eventually(WAIT, "the queue gone", async || {
        Ok(ls.lock("pg", &lock.path).await?.is_none().then_some(()))
    })
    .await?;
    let audit = ls.audit_log().await?;
    ensure!(
        audit.iter().any(|r| r.lock_id == lock.id),
        "audited: {audit:#?}"
    );
    Ok(())
}

/// How many of `rows` (pid, the pids blocking it) `root` holds up, directly or through others.
fn held_up_by(root: i64, rows: &[(i32, Vec<i32>)]) -> u64 {
    let mut held: BTreeSet<i64> = BTreeSet::from([root]);
    loop {
        let before = held.len();
        for (pid, blockers) in rows {
            if blockers.iter().any(|b| held.contains(&i64::from(*b))) {
                held.insert(i64::from(*pid));
            }
        }
        if held.len() == before {
            return (held.len() - 1) as u64;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mariadb_queue_behind_alter_table_is_one_lock_rooted_in_the_idle_transaction(
) -> Result<()> {
    let server = MariaDb::start().await?;
    server
        .exec("CREATE TABLE app.queue_t (id int PRIMARY KEY, v int) ENGINE=InnoDB; INSERT INTO app.queue_t VALUES (1, 1)")
        .await?;
    let dir = tempfile::tempdir()?;
    let config = Config {
        sources: section(
            "mysql",
            vec![db_source("my", &server.url())]
                .into_iter()
                .map(DbSource::mysql),
        ),
        ..Config::default()
    };
    let ls = Lockscope::start(with_admin(config, dir.path(), TOKEN)).await?;
    ls.wait_ready(WAIT).await?;

    let idle = Session::new(mysql::connect_db(&server.app_url()).await?).await?;
    idle.exec("BEGIN").await?;
    idle.exec("SELECT * FROM queue_t").await?;
    let alter = Session::new(mysql::connect_db(&server.app_url()).await?).await?;
    let mut altered = alter.start("ALTER TABLE queue_t ADD COLUMN w int");
    let reads = Session::new(mysql::connect_db(&server.app_url()).await?).await?;
    let _ = wait_queue(&ls, "my", 1).await?;
    let mut read = reads.start("SELECT * FROM queue_t");
    let lock = wait_queue(&ls, "my", 2).await?;
    check_queue(
        &lock,
        idle.connection_id(),
        alter.connection_id(),
        reads.connection_id(),
    )?;
    ensure!(lock.path == "/table_locks/app/queue_t", "{}", lock.path);

    // MariaDB's own view: the connections waiting for the table's metadata lock.
    let mut conn = mysql::connect(&server.url()).await?;
    let waiting: Vec<(i64,)> = sqlx::query_as(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata lock'",
    )
    .fetch_all(&mut conn)
    .await?;
    ensure!(waiting.len() == 2, "{waiting:?}");
    let page = wait_root(&ls, waiting.len() as u64).await?;
    ensure!(
        page.blockers[0].sessions[0].session == idle.connection_id().to_string(),
        "{page:#?}"
    );

    let holder = &lock.holders[0];
    let (status, body) = ls
        .release(
            &lock.id,
            Some(TOKEN),
            &json!({"holder": holder.node, "version": holder.version, "reason": "idle transaction blocks a migration"}),
        )
        .await?;
    ensure!(status == 200, "{status} {body}");
    altered.wait(WAIT).await?;
    read.wait(WAIT).await?;
    eventually(WAIT, "the queue gone", async || {
        Ok(ls.lock("my", &lock.path).await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}
