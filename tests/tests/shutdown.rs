//! Shutdown on real servers: lockscope watching a ZooKeeper ensemble, a Redis server and an
//! etcd member stops in order, as on SIGTERM. Its ZooKeeper session is closed (gone from the
//! leader's session tracker as soon as shutdown returns, long before it could have expired),
//! every collector ended by itself, the HTTP port is closed, and lock events recorded before
//! the stop are in the store.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::zookeeper::fourlw;
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_tests::harness::{eventually, zk_source, Lockscope};
use lockscope_tests::recipes::{SeedClient, SeedRecipe};
use lockscope_tests::support::etcd::{lease_key_lock, EtcdServer};
use lockscope_tests::support::proxy::TcpProxy;
use lockscope_tests::support::redis::{connect, RedisServer};
use lockscope_tests::support::zk::{four_letter, sessions_via, ZkEnsemble};
use lockscope_tests::unique_root;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_sessions_ends_every_task_and_keeps_recorded_events() -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let redis = RedisServer::start().await?;
    let etcd = EtcdServer::start().await?;
    let dir = tempfile::tempdir()?;
    // lockscope reaches ZooKeeper through a proxy, so the members name its session by port.
    let proxy = TcpProxy::start(zk.client_addr(0)).await?;
    let root = unique_root("shutdown");
    let mut zk_config = zk_source("zk", &proxy.addr().to_string(), &[&root]);
    // Far longer than the whole test: a session gone at once was closed, not expired.
    zk_config.session_timeout = Duration::from_secs(10);
    let mut config = Config {
        sources: [
            section("zookeeper", vec![zk_config]),
            section(
                "redis",
                vec![RedisSourceConfig::new("redis", &redis.url(), &["lock:*"])],
            ),
            section(
                "etcd",
                vec![lockscope::config::EtcdSourceConfig::new(
                    "etcd",
                    &[etcd.endpoint()],
                    &["/locks"],
                )],
            ),
        ]
        .concat(),
        ..Config::default()
    };
    config.store.path = Some(dir.path().join("lockscope.db"));
    let mut ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;

    // One lock held in each source, seen by lockscope.
    let seed = SeedClient::connect(&zk.connect_string(), Duration::from_secs(6)).await?;
    let zk_lock = format!("{root}/job");
    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let _ticket = lockscope_tests::recipes::lock(&seed, &zk_lock, &recipe).await?;
    let mut conn = connect(&redis.url()).await?;
    let _: () = redis::cmd("SET")
        .arg("lock:report")
        .arg("token-1")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await?;
    let _etcd_lock = lease_key_lock(&[etcd.endpoint()], "/locks/batch", b"worker-1", 60)
        .await?
        .context("the etcd key was free")?;
    let zk_view = ls
        .wait_lock("zk", &zk_lock, WAIT, "the ZooKeeper lock held", |l| {
            l.holders.len() == 1
        })
        .await?;
    ls.wait_lock("redis", "/lock:report", WAIT, "the Redis lock held", |l| {
        l.holders.len() == 1
    })
    .await?;
    ls.wait_lock("etcd", "/locks/batch", WAIT, "the etcd lock held", |l| {
        l.holders.len() == 1
    })
    .await?;
    let own = eventually(WAIT, "lockscope's ZooKeeper session listed", async || {
        let sessions = sessions_via(&zk, std::slice::from_ref(&proxy)).await?;
        Ok((sessions.len() == 1)
            .then(|| sessions.into_iter().next())
            .flatten())
    })
    .await?;
    let addr = ls.base.trim_start_matches("http://").to_string();

    ensure!(
        ls.shutdown().await?,
        "every step of the shutdown finished by itself"
    );

    // Closed, not left to expire: the leader no longer tracks it the moment shutdown returned.
    let leader = zk.leader().await?;
    let dump = four_letter(zk.client_addr(leader), "dump").await?;
    ensure!(
        !fourlw::parse_dump_sessions(&dump).contains_key(&own),
        "lockscope's session {own:#x} is still live after shutdown: {dump}"
    );
    ensure!(
        tokio::net::TcpStream::connect(&addr).await.is_err(),
        "the HTTP port {addr} still accepts connections"
    );
    // What the aggregator booked before the stop was written by the store on its way out.
    let store = lockscope::store::Store::open(&lockscope::store::StoreConfig {
        path: Some(dir.path().join("lockscope.db")),
        ..Default::default()
    })
    .context("reopen the store")?;
    let events = eventually(Duration::from_secs(30), "the store answers", || async {
        Ok(store.lock_events(&zk_view.id, 100, None).await.ok())
    })
    .await?
    .events;
    ensure!(
        events.iter().any(|e| e.event.kind == "acquired"),
        "the ZooKeeper lock's acquisition is in the store: {events:?}"
    );
    Ok(())
}
