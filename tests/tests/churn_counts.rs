//! Counts under churn (issue 19): lockscope's acquisition and release counters
//! (`lockscope_lock_acquisitions_total`, `lockscope_lock_releases_total`, every lock and cause
//! of the source summed) equal what a churn of real clients made, each client counting its own:
//!
//! * etcd: `etcdctl lock` (the Go client's `concurrency.Mutex`) processes contending for a few
//!   names — while lockscope watches, and while lockscope is cut off from etcd, so that it
//!   catches up from its last revision with many revisions in one watch answer;
//! * MariaDB `GET_LOCK` / `RELEASE_LOCK` and PostgreSQL advisory locks on real sessions
//!   contending for a few names. A database is polled, so only a change that a poll sees can be
//!   counted: every client holds its lock until lockscope shows it holding, which is a fact
//!   from a poll, and only then lets go.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::database::DbSourceConfig;
use lockscope::backends::etcd::EtcdSourceConfig;
use lockscope::config::{section, Config, DbSource};
use lockscope_model::database::conn_id;
use lockscope_tests::harness::{eventually, source_sum, Lockscope};
use lockscope_tests::support::etcd::{EtcdServer, EtcdctlLock};
use lockscope_tests::support::mysql::{self, GetLock, MariaDb, Params};
use lockscope_tests::support::postgres::{self, Advisory, AdvisoryKey, Level, Postgres};
use lockscope_tests::support::proxy::TcpProxy;

const WAIT: Duration = Duration::from_secs(60);

/// Acquisitions and releases the clients made, as they counted them.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Made {
    acquired: u64,
    released: u64,
}

impl std::ops::Add for Made {
    type Output = Made;
    fn add(self, other: Made) -> Made {
        Made {
            acquired: self.acquired + other.acquired,
            released: self.released + other.released,
        }
    }
}

/// Sums what every client made.
fn total(made: impl IntoIterator<Item = Made>) -> Made {
    made.into_iter().fold(Made::default(), |a, b| a + b)
}

/// The lock name client `c` takes in its `n`th cycle, of `names`: client by client a different
/// one each cycle, so clients contend, and a client never takes again the name it just let go.
fn name_of(c: usize, n: usize, names: usize) -> usize {
    (c + n) % names
}

/// Waits until lockscope has booked, for `source`, exactly the acquisitions and releases `made`.
async fn counters_equal(ls: &Lockscope, source: &str, made: Made) -> Result<()> {
    let mut last = (f64::NAN, f64::NAN);
    let want = (made.acquired as f64, made.released as f64);
    eventually(
        WAIT,
        &format!("lockscope's counters of {source} equal the churn's"),
        async || {
            let text = ls.metrics().await?;
            last = (
                source_sum(&text, "lockscope_lock_acquisitions_total", source),
                source_sum(&text, "lockscope_lock_releases_total", source),
            );
            Ok((last == want).then_some(()))
        },
    )
    .await
    .with_context(|| {
        format!("lockscope booked (acquisitions, releases) {last:?}; the clients made {want:?}")
    })
}

/// Waits until lockscope shows `source` with nobody holding or waiting anywhere.
async fn all_let_go(ls: &Lockscope, source: &str) -> Result<()> {
    eventually(
        WAIT,
        &format!("every lock of {source} let go"),
        async || {
            Ok(ls
                .locks()
                .await?
                .iter()
                .filter(|l| l.source == source)
                .all(|l| l.holders.is_empty() && l.waiters.is_empty())
                .then_some(()))
        },
    )
    .await
}

/// Waits until lockscope shows `node` holding the lock at `path` of `source`: a poll saw it.
async fn shown_holding(ls: &Lockscope, source: &str, path: &str, node: &str) -> Result<()> {
    ls.wait_lock(
        source,
        path,
        WAIT,
        &format!("{node} shown holding {path}"),
        |l| l.holders.iter().any(|h| h.node == node),
    )
    .await
    .map(drop)
}

// ---------------------------------------------------------------------------------------------
// etcd

fn etcd_source(endpoints: &[String]) -> EtcdSourceConfig {
    let mut config = EtcdSourceConfig::new("e", endpoints, &["/locks"]);
    config.lease_poll_interval = Duration::from_millis(200);
    config
}

async fn start_etcd(endpoints: &[String]) -> Result<Lockscope> {
    let ls = Lockscope::start(Config {
        sources: section("etcd", vec![etcd_source(endpoints)]),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

/// `clients` tasks, each `cycles` times: `etcdctl lock` on `/locks/churn<k>` (of `names`),
/// waits until it holds, lets go (SIGTERM: etcdctl deletes its key and exits 0).
async fn etcdctl_churn(
    endpoints: &[String],
    clients: usize,
    names: usize,
    cycles: usize,
) -> Result<Made> {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let endpoints = endpoints.to_vec();
            tokio::spawn(async move {
                let mut made = Made::default();
                for n in 0..cycles {
                    let name = format!("/locks/churn{}", name_of(c, n, names));
                    let mut lock = EtcdctlLock::start(&endpoints, &name, 30).await?;
                    lock.wait_acquired(WAIT).await?;
                    made.acquired += 1;
                    let status = lock.release().await?;
                    ensure!(status.success(), "etcdctl lock {name} exited {status}");
                    made.released += 1;
                }
                anyhow::Ok(made)
            })
        })
        .collect();
    let mut made = Vec::new();
    for task in tasks {
        made.push(task.await??);
    }
    Ok(total(made))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_counts_equal_an_etcdctl_lock_churn() -> Result<()> {
    let etcd = EtcdServer::start().await?;
    let endpoints = etcd.endpoints();
    let ls = start_etcd(&endpoints).await?;
    let made = etcdctl_churn(&endpoints, 4, 2, 12).await?;
    ensure!(made.acquired == 48 && made.released == 48, "{made:?}");
    all_let_go(&ls, "e").await?;
    counters_equal(&ls, "e", made).await
}

/// lockscope cut off from etcd while the clients churn: once it is back, it resumes its watch
/// after the last revision it applied, and etcd answers with every revision since in one
/// message — puts and deletes of the same key among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_counts_a_churn_made_while_lockscope_was_cut_off() -> Result<()> {
    let etcd = EtcdServer::start().await?;
    // The clients talk to etcd directly; only lockscope goes through the proxy.
    let endpoints = etcd.endpoints();
    let proxy = TcpProxy::start(etcd.endpoint().parse()?).await?;
    let ls = start_etcd(&[proxy.addr().to_string()]).await?;
    let before = etcdctl_churn(&endpoints, 2, 2, 2).await?;
    counters_equal(&ls, "e", before).await?;

    proxy.blackhole();
    let source_up = async |up: bool| {
        eventually(WAIT, &format!("source e up = {up}"), async || {
            Ok(ls
                .sources()
                .await?
                .iter()
                .any(|s| s.name == "e" && s.up == up && (!up || s.synced))
                .then_some(()))
        })
        .await
    };
    source_up(false).await?;
    let cut_off = etcdctl_churn(&endpoints, 2, 2, 4).await?;
    proxy.pass();
    source_up(true).await?;
    all_let_go(&ls, "e").await?;
    counters_equal(&ls, "e", before + cut_off).await
}

// ---------------------------------------------------------------------------------------------
// Databases

fn db_source(name: &str, url: &str) -> DbSourceConfig {
    let mut config = DbSourceConfig::new(name, url);
    config.poll_interval = Duration::from_millis(200);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_counts_equal_a_get_lock_churn_held_across_polls() -> Result<()> {
    let server = MariaDb::start().await?;
    let ls = Lockscope::start(Config {
        sources: section(
            "mysql",
            vec![db_source("m", &server.url())]
                .into_iter()
                .map(DbSource::mysql),
        ),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    let (clients, names, cycles) = (4, 3, 6);
    let url = server.app_url();
    // Each cycle on a connection of its own, as an application's pool hands them out.
    let client = async |c: usize| -> Result<Made> {
        let mut made = Made::default();
        for n in 0..cycles {
            let name = format!("churn{}", name_of(c, n, names));
            let mut lock =
                GetLock::start(mysql::connect(&url).await?, &name, 60, Params::Literal).await?;
            lock.wait_acquired(WAIT).await?;
            made.acquired += 1;
            let node = conn_id(lock.connection_id());
            shown_holding(&ls, "m", &format!("/get_lock/{name}"), &node).await?;
            ensure!(
                lock.release().await? == Some(1),
                "RELEASE_LOCK({name}) on {node}"
            );
            made.released += 1;
        }
        Ok(made)
    };
    let made = total(futures::future::try_join_all((0..clients).map(client)).await?);
    ensure!(made.acquired == (clients * cycles) as u64, "{made:?}");
    all_let_go(&ls, "m").await?;
    counters_equal(&ls, "m", made).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_counts_equal_an_advisory_lock_churn_held_across_polls() -> Result<()> {
    let server = Postgres::start().await?;
    let ls = Lockscope::start(Config {
        sources: section(
            "postgres",
            vec![db_source("p", &server.url())]
                .into_iter()
                .map(DbSource::postgres),
        ),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    let (clients, names, cycles) = (4, 3, 6);
    let url = server.url();
    // One session per client, locking and unlocking again and again.
    let client = async |c: usize| -> Result<Made> {
        let mut session =
            Advisory::open(postgres::connect(&url, &format!("churn-{c}")).await?).await?;
        let node = conn_id(session.pid());
        let mut made = Made::default();
        for n in 0..cycles {
            let k = name_of(c, n, names) as i64 + 1;
            let key = AdvisoryKey::Big(k);
            session.lock(key, Level::Session, false);
            session.wait_acquired(WAIT).await?;
            made.acquired += 1;
            shown_holding(&ls, "p", &format!("/advisory/postgres/{k}"), &node).await?;
            ensure!(
                session.unlock(key, false).await?,
                "unlock {key:?} on {node}"
            );
            made.released += 1;
        }
        Ok(made)
    };
    let made = total(futures::future::try_join_all((0..clients).map(client)).await?);
    ensure!(made.acquired == (clients * cycles) as u64, "{made:?}");
    all_let_go(&ls, "p").await?;
    counters_equal(&ls, "p", made).await
}
