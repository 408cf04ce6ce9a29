//! Hostile input on the force-release path and in the collectors (issue 18), against real
//! servers: a ZooKeeper lock node deleted and created again under its fixed name between what
//! the operator saw and the release (refused by its czxid; a release without the session
//! refused), a PostgreSQL row-lock holder that rolled back to a savepoint (not killed), lock-table
//! owners of 5 MB on MariaDB and PostgreSQL (shown cut, released only by their digest), a
//! release against a database that accepts connections and never answers (a 502 within the
//! bound, nothing changed), and more than 4 MiB of etcd values under a watched prefix, at
//! bootstrap and in one watch response.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use lockscope::backends::database::{DbSourceConfig, LockTableConfig};
use lockscope::backends::etcd::EtcdSourceConfig;
use lockscope::config::{section, Config, DbSource};
use lockscope_model::id::lock_id;
use lockscope_model::session_hex;
use lockscope_model::wire::{HolderView, LockView};
use lockscope_tests::harness::{eventually, with_admin, zk_source, Lockscope};
use lockscope_tests::recipes::SeedClient;
use lockscope_tests::support::dblocks::{create_lock_rows, DbConn, RowLocker, Session};
use lockscope_tests::support::etcd::{EtcdServer, EtcdctlLock};
use lockscope_tests::support::mysql::{self, MariaDb};
use lockscope_tests::support::postgres::{self, Postgres};
use lockscope_tests::support::proxy::TcpProxy;
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::{json, Value};
use zookeeper_client as zkc;

const TOKEN: &str = "hostile-admin-token-0123456789";
const WAIT: Duration = Duration::from_secs(30);

async fn start(config: Config, dir: &std::path::Path) -> Result<Lockscope> {
    let ls = Lockscope::start(with_admin(config, dir, TOKEN)).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

async fn release(ls: &Lockscope, lock: &str, source: &str, body: Value) -> Result<(u16, Value)> {
    ls.release(&lock_id(source, lock), Some(TOKEN), &body).await
}

/// The body of `GET /api/v1/locks`, as bytes on the wire.
async fn locks_body_len(ls: &Lockscope) -> Result<usize> {
    let body = ls
        .http
        .get(format!("{}/api/v1/locks", ls.base))
        .send()
        .await?
        .bytes()
        .await?;
    Ok(body.len())
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper

/// The node's czxid as ZooKeeper has it now (`None`: no node).
async fn czxid(client: &SeedClient, node: &str) -> Result<Option<i64>> {
    Ok(client.client().check_stat(node).await?.map(|s| s.czxid))
}

async fn create_ephemeral(client: &SeedClient, node: &str) -> Result<()> {
    let options = zkc::CreateMode::Ephemeral.with_acls(zkc::Acls::anyone_all());
    client.client().create(node, b"", &options).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_release_refuses_a_recreated_fixed_name_node_and_a_missing_session() -> Result<()>
{
    let zk = ZkEnsemble::start(3).await?;
    let connect = zk.connect_string();
    let root = unique_root("hostile-zk");
    let dir = tempfile::tempdir()?;
    let ls = start(
        Config {
            sources: section("zookeeper", vec![zk_source("zk", &connect, &[&root])]),
            ..Config::default()
        },
        dir.path(),
    )
    .await?;
    let a = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let b = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let options = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    a.client().create(&root, b"", &options).await?;
    // A plain exclusive lock: one EPHEMERAL node under a fixed name.
    let node = format!("{root}/job");
    create_ephemeral(&a, &node).await?;
    let first = czxid(&a, &node).await?.context("the node")?;
    let acquisitions = async |n: usize| -> Result<LockView> {
        let detail = ls
            .wait_detail("zk", &node, WAIT, &format!("{n} acquisitions"), |d| {
                d.events.iter().filter(|e| e.kind == "acquired").count() == n
                    && d.lock.holders.len() == 1
            })
            .await?;
        Ok(detail.lock)
    };
    // What the operator saw: session A, the first incarnation.
    let seen: HolderView = acquisitions(1).await?.holders[0].clone();
    ensure!(seen.session == session_hex(a.session_id()), "{seen:?}");
    ensure!(
        seen.version == Some(first.to_string()),
        "the holder's version is its czxid: {seen:?}"
    );
    let version = json!(seen.version.clone().unwrap_or_else(|| first.to_string()));

    // The same session releases and takes the lock again (a new acquisition, data version 0
    // again); lockscope shows the new one. The operator's release names what it saw: refused,
    // nothing deleted.
    a.client().delete(&node, None).await?;
    create_ephemeral(&a, &node).await?;
    let second = czxid(&a, &node).await?.context("the node again")?;
    ensure!(second != first);
    acquisitions(2).await?;
    let (status, body) = release(
        &ls,
        &node,
        "zk",
        json!({"holder": node, "session": seen.session, "version": version, "reason": "stale view"}),
    )
    .await?;
    ensure!(
        status == 409,
        "a re-created node was released: {status} {body}"
    );
    ensure!(
        czxid(&a, &node).await? == Some(second),
        "the re-created node was touched"
    );

    // Another session takes it: without a session the release is refused (before: lockscope
    // filled in the session it sees now and deleted B's node).
    a.client().delete(&node, None).await?;
    create_ephemeral(&b, &node).await?;
    let third = czxid(&b, &node).await?.context("B's node")?;
    let now = acquisitions(3).await?;
    ensure!(
        now.holders[0].session == session_hex(b.session_id()),
        "{now:?}"
    );
    let (status, body) = release(
        &ls,
        &node,
        "zk",
        json!({"holder": node, "version": version, "reason": "no session"}),
    )
    .await?;
    ensure!(
        status == 422,
        "a release without a session: {status} {body}"
    );
    ensure!(
        body.to_string().contains("session"),
        "the refusal says why: {body}"
    );
    // Without a version too.
    let (status, body) = release(
        &ls,
        &node,
        "zk",
        json!({"holder": node, "session": now.holders[0].session, "reason": "no version"}),
    )
    .await?;
    ensure!(
        status == 422,
        "a release without a version: {status} {body}"
    );
    // A's session, as the operator saw it: refused.
    let (status, body) = release(
        &ls,
        &node,
        "zk",
        json!({"holder": node, "session": seen.session, "version": version, "reason": "stale"}),
    )
    .await?;
    ensure!(status == 409, "{status} {body}");
    ensure!(
        czxid(&b, &node).await? == Some(third),
        "B's node was touched"
    );

    // What lockscope shows now is released.
    let (status, body) = release(
        &ls,
        &node,
        "zk",
        json!({"holder": node, "session": now.holders[0].session,
               "version": now.holders[0].version, "reason": "current"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(czxid(&b, &node).await?.is_none(), "not deleted");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL row lock after ROLLBACK TO SAVEPOINT

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_row_lock_release_spares_a_holder_that_rolled_back_to_a_savepoint() -> Result<()> {
    let server = Postgres::start().await?;
    let url = server.url();
    let mut setup = postgres::connect_db(&url, "setup").await?;
    create_lock_rows(&mut setup, "locks", &["orders"]).await?;
    let dir = tempfile::tempdir()?;
    let mut source = DbSourceConfig::new("p", &url);
    source.poll_interval = Duration::from_millis(200);
    let ls = start(
        Config {
            sources: section("postgres", vec![source].into_iter().map(DbSource::postgres)),
            ..Config::default()
        },
        dir.path(),
    )
    .await?;

    // The holder locks the row inside a savepoint; a waiter blocks on it.
    let holder = Session::new(postgres::connect_db(&url, "savepoint-holder").await?).await?;
    let pid = holder.connection_id().to_string();
    for sql in [
        "BEGIN",
        "SAVEPOINT s",
        "SELECT name FROM locks WHERE name = 'orders' FOR UPDATE",
    ] {
        holder.exec(sql).await?;
    }
    let mut waiter = RowLocker::start(
        postgres::connect_db(&url, "row-waiter").await?,
        "locks",
        "orders",
    )
    .await?;
    let row = eventually(
        WAIT,
        "the row lock with its holder and waiter",
        async || {
            Ok(ls.locks().await?.into_iter().find(|l| {
                l.recipe == "row_lock"
                    && l.path.starts_with("/rows/")
                    && l.holders.iter().any(|h| h.session == pid)
                    && l.waiters.len() == 1
            }))
        },
    )
    .await?;
    let seen = row.holders[0].clone();
    ensure!(seen.version.is_some(), "{seen:?}");

    // The holder rolls back to its savepoint: its transaction goes on, without the row; the
    // waiter gets it. lockscope still lists the holder (its transaction is open), unconfirmed.
    holder.exec("ROLLBACK TO SAVEPOINT s").await?;
    waiter.wait_acquired(WAIT).await?;
    ls.wait_lock("p", &row.path, WAIT, "the waiter gone from the view", |l| {
        l.waiters.is_empty() && l.holders.iter().any(|h| h.session == pid)
    })
    .await?;
    let (status, body) = release(
        &ls,
        &row.path,
        "p",
        json!({"holder": seen.node, "version": seen.version, "reason": "stale"}),
    )
    .await?;
    ensure!(
        status == 409,
        "a holder without the row was released: {status} {body}"
    );
    holder
        .exec("SELECT 1")
        .await
        .context("the holder's connection was terminated")?;

    // It takes the row again (the waiter commits first); a new waiter blocks: now the same
    // release terminates it, and the new waiter gets the row.
    waiter.commit().await?;
    holder
        .exec("SELECT name FROM locks WHERE name = 'orders' FOR UPDATE")
        .await?;
    let mut next = RowLocker::start(
        postgres::connect_db(&url, "row-waiter-2").await?,
        "locks",
        "orders",
    )
    .await?;
    let row = ls
        .wait_lock("p", &row.path, WAIT, "held again, one waiter", |l| {
            l.holders.iter().any(|h| h.session == pid) && l.waiters.len() == 1
        })
        .await?;
    let (status, body) = release(
        &ls,
        &row.path,
        "p",
        json!({"holder": row.holders[0].node, "version": row.holders[0].version, "reason": "held"}),
    )
    .await?;
    ensure!(status == 200, "{status} {body}");
    next.wait_acquired(WAIT).await?;
    ensure!(holder.exec("SELECT 1").await.is_err(), "not terminated");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lock-table owners of 5 MB

const BIG: usize = 5 * 1024 * 1024;

/// A lock table `big_lock(resource, owner)` on a source that polls once a minute (so the view
/// stays what the operator saw while the row changes under it), with one row whose owner is
/// 5 MB ending in `tail`.
async fn big_owner(
    ls: &Lockscope,
    source: &str,
    table: &str,
    set_owner: &mut impl AsyncFnMut(&str) -> Result<()>,
) -> Result<()> {
    let path = format!("/tables/{table}/job");
    let lock = ls
        .wait_lock(source, &path, WAIT, "the big-owner row", |l| {
            l.holders.len() == 1
        })
        .await?;
    let owner = &lock.holders[0].node;
    ensure!(
        owner.len() < 5_000,
        "the owner is kept whole: {} bytes",
        owner.len()
    );
    ensure!(
        owner.contains(&format!("…[{} bytes, sha256 ", BIG + 6)),
        "{}",
        &owner[owner.len().saturating_sub(100)..]
    );
    let body = locks_body_len(ls).await?;
    ensure!(body < 64 * 1024, "/api/v1/locks is {body} bytes");
    println!(
        "{source}: /api/v1/locks {body} bytes; owner shown in {} bytes",
        owner.len()
    );

    // The owner changes past what is shown (same first bytes, other tail, same length): the
    // release of what the operator saw is refused by the digest.
    set_owner("tail-2").await?;
    let seen = json!({"holder": owner, "reason": "big owner"});
    let (status, answer) = release(ls, &path, source, seen.clone()).await?;
    ensure!(status == 409, "{status} {answer}");
    // Back to the owner seen: released.
    set_owner("tail-1").await?;
    let (status, answer) = release(ls, &path, source, seen).await?;
    ensure!(status == 200, "{status} {answer}");
    ensure!(answer.to_string().contains("SHA-256"), "{answer}");
    Ok(())
}

fn table_source(name: &str, url: &str, table: &str) -> DbSourceConfig {
    let mut config = DbSourceConfig::new(name, url);
    config.poll_interval = Duration::from_secs(60);
    config.lock_tables = vec![LockTableConfig::new(table, "resource", "owner", None)];
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_lock_table_owner_of_5_mb_is_shown_cut_and_released_by_digest() -> Result<()> {
    let server = MariaDb::start().await?;
    server
        .exec(&format!(
            "CREATE TABLE app.big_lock(resource VARCHAR(64) PRIMARY KEY, owner LONGTEXT); \
             INSERT INTO app.big_lock VALUES ('job', CONCAT(REPEAT('o', {BIG}), 'tail-1'))"
        ))
        .await?;
    let dir = tempfile::tempdir()?;
    let ls = start(
        Config {
            sources: section(
                "mysql",
                vec![table_source("m", &server.url(), "app.big_lock")]
                    .into_iter()
                    .map(DbSource::mysql),
            ),
            ..Config::default()
        },
        dir.path(),
    )
    .await?;
    let mut conn = mysql::connect_db(&server.url()).await?;
    let mut set_owner = async |tail: &str| -> Result<()> {
        conn.exec(&format!(
            "UPDATE app.big_lock SET owner = CONCAT(REPEAT('o', {BIG}), '{tail}')"
        ))
        .await
    };
    big_owner(&ls, "m", "app.big_lock", &mut set_owner).await?;
    let left = server_count(&mut conn, "SELECT COUNT(*) FROM app.big_lock").await?;
    ensure!(left == 0, "{left} rows left");
    Ok(())
}

/// A count from `sql` on `conn`.
async fn server_count(conn: &mut DbConn, sql: &str) -> Result<i64> {
    use sqlx::Row;
    Ok(match conn {
        DbConn::MySql(c) => sqlx::query(sql).fetch_one(c).await?.try_get(0)?,
        DbConn::Postgres(c) => sqlx::query(sql).fetch_one(c).await?.try_get(0)?,
    })
}

/// PostgreSQL, through a proxy: the 5 MB owner as on MariaDB, and then a release while the
/// proxy holds every new connection without answering (a server that accepts and stays
/// silent): a 502 within the connect bound, and the row untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lock_table_owner_of_5_mb_and_a_silent_server() -> Result<()> {
    let server = Postgres::start().await?;
    let mut conn = postgres::connect_db(&server.url(), "setup").await?;
    conn.exec(&format!(
        "CREATE TABLE big_lock(resource text PRIMARY KEY, owner text); \
         INSERT INTO big_lock VALUES ('job', repeat('o', {BIG}) || 'tail-1'), ('small', 'host-a')"
    ))
    .await?;
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse()?).await?;
    let url = format!("postgres://postgres@{}/postgres", proxy.addr());
    let dir = tempfile::tempdir()?;
    let ls = start(
        Config {
            sources: section(
                "postgres",
                vec![table_source("p", &url, "public.big_lock")]
                    .into_iter()
                    .map(DbSource::postgres),
            ),
            ..Config::default()
        },
        dir.path(),
    )
    .await?;
    let mut set_owner = async |tail: &str| -> Result<()> {
        conn.exec(&format!(
            "UPDATE big_lock SET owner = repeat('o', {BIG}) || '{tail}' WHERE resource = 'job'"
        ))
        .await
    };
    big_owner(&ls, "p", "public.big_lock", &mut set_owner).await?;

    // The server accepts and never answers: the release gives up within its connect bound.
    let small = "/tables/public.big_lock/small";
    ls.wait_lock("p", small, WAIT, "the small row", |l| l.holders.len() == 1)
        .await?;
    proxy.blackhole();
    let started = Instant::now();
    let (status, body) = release(
        &ls,
        small,
        "p",
        json!({"holder": "host-a", "reason": "silent server"}),
    )
    .await?;
    let took = started.elapsed();
    println!("release against a silent server: {status} after {took:?}");
    ensure!(status == 502, "{status} {body}");
    ensure!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "{took:?}"
    );
    proxy.pass();
    let left = server_count(
        &mut conn,
        "SELECT COUNT(*) FROM big_lock WHERE resource = 'small'",
    )
    .await?;
    ensure!(left == 1, "the row changed");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// etcd: more than 4 MiB under a watched prefix

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_syncs_and_follows_more_than_4_mib_under_a_prefix() -> Result<()> {
    let etcd = EtcdServer::start().await?;
    let endpoints = etcd.endpoints();
    let mut client = etcd_client::Client::connect(&endpoints, None).await?;
    // 8 lease keys of 800 kB each: 6.4 MB in one range, where gRPC's default decode limit is
    // 4 MiB.
    let lease = client.lease_grant(600, None).await?.id();
    let value = vec![b'v'; 800 * 1024];
    for i in 0..8 {
        let options = etcd_client::PutOptions::new().with_lease(lease);
        client
            .put(format!("/locks/big-{i}"), value.clone(), Some(options))
            .await?;
    }
    let mut mutex = EtcdctlLock::start(&endpoints, "/locks/job", 30).await?;
    let held = mutex.wait_acquired(WAIT).await?;

    let dir = tempfile::tempdir()?;
    let mut source = EtcdSourceConfig::new("e", &endpoints, &["/locks"]);
    source.lease_poll_interval = Duration::from_millis(500);
    let started = Instant::now();
    let ls = start(
        Config {
            sources: section("etcd", vec![source]),
            ..Config::default()
        },
        dir.path(),
    )
    .await?;
    let lock = ls
        .wait_lock("e", "/locks/job", WAIT, "the mutex holder", |l| {
            l.holders.len() == 1 && l.holders[0].node == held
        })
        .await?;
    ensure!(lock.recipe == "etcd_mutex", "{lock:?}");
    for i in 0..8 {
        ls.wait_lock(
            "e",
            &format!("/locks/big-{i}"),
            WAIT,
            "a big lease key",
            |l| l.holders.len() == 1,
        )
        .await?;
    }
    let synced = started.elapsed();
    let body = locks_body_len(&ls).await?;
    println!("etcd: ready with 6.4 MB of values after {synced:?}; /api/v1/locks {body} bytes");
    ensure!(body < 256 * 1024, "/api/v1/locks is {body} bytes");

    // One revision deletes all of them: one watch response with 6.4 MB of previous values.
    let deleted = client
        .delete(
            "/locks/big-",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await?;
    ensure!(deleted.deleted() == 8);
    for i in 0..8 {
        ls.wait_detail(
            "e",
            &format!("/locks/big-{i}"),
            WAIT,
            "the big key gone",
            |d| d.gone,
        )
        .await?;
    }
    // The watch goes on: the next holder of the mutex is seen.
    mutex.release().await?;
    let mut next = EtcdctlLock::start(&endpoints, "/locks/job", 30).await?;
    let next_key = next.wait_acquired(WAIT).await?;
    ls.wait_lock("e", "/locks/job", WAIT, "the next holder", |l| {
        l.holders.len() == 1 && l.holders[0].node == next_key
    })
    .await?;
    let sources = ls.sources().await?;
    ensure!(sources.iter().any(|s| s.name == "e" && s.up), "{sources:?}");
    next.release().await?;
    Ok(())
}
