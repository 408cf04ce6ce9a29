//! Sources whose network path goes silent — no FIN, no RST, every byte held — on real servers,
//! each reached by lockscope only through a relay that can stall (`support/proxy.rs`): Redis
//! (the command and the notification connection), etcd, a ZooKeeper member, PostgreSQL and
//! MariaDB. For each: the source goes not up within its `silence_limit` (the figure is printed
//! for README's reliability table), its locks stay listed and are marked "last seen" in
//! `/api/v1/locks` and the lock's detail, `/metrics` says `lockscope_source_up … 0`; after the
//! heal the source is up again and a lock taken during the silence is shown (nothing lost).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{
    section, Config, DbSource, DbSourceConfig, EtcdSourceConfig, RedisSourceConfig,
};
use lockscope_model::wire::{LockView, SourceView};
use lockscope_tests::harness::{eventually, metric_value, zk_source, Lockscope};
use lockscope_tests::recipes::{SeedClient, SeedRecipe};
use lockscope_tests::support::proxy::TcpProxy;
use lockscope_tests::unique_root;
use tokio::time::Instant;

/// How long a test waits for a fact at most: generous, the figures are printed.
const WAIT: Duration = Duration::from_secs(30);
/// The silence limit of the sources other than Redis (Redis runs with the default): short, so
/// each test stays short.
const LIMIT: Duration = Duration::from_secs(5);

/// Sends lockscope's collector log to the test's captured output, shown when a test fails.
fn trace() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("lockscope=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_test_writer()
        .try_init();
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A URL with the server's `127.0.0.1:<port>` replaced by the relay's address.
fn through(url: &str, port: u16, proxy: &TcpProxy) -> String {
    url.replace(&format!("127.0.0.1:{port}"), &proxy.addr().to_string())
}

async fn source(ls: &Lockscope, name: &str) -> Result<SourceView> {
    ls.sources()
        .await?
        .into_iter()
        .find(|s| s.name == name)
        .with_context(|| format!("no source {name}"))
}

/// What one silence cost: seconds until lockscope said the source was not up, and seconds
/// from the heal until it showed the truth again (the lock taken meanwhile, unmarked).
struct Figures {
    detected: f64,
    healed: f64,
}

/// The common course: `held` is shown live; the relay goes silent; the source is not up
/// (its error says why), `held` is still listed and marked last seen in the list and in its
/// detail, and the metrics say so; `during` takes a lock behind lockscope's back; the relay
/// heals; the source is up, `held` unmarked, and the lock `during` took is shown. Prints and
/// returns the figures.
async fn silence_and_heal(
    ls: &Lockscope,
    name: &str,
    proxy: &TcpProxy,
    held: &str,
    during: impl AsyncFnOnce() -> Result<String>,
) -> Result<Figures> {
    ls.wait_lock(name, held, WAIT, "the held lock, live", |l| {
        !l.holders.is_empty() && l.source_last_seen_ms.is_none()
    })
    .await?;
    ensure!(
        source(ls, name).await?.up,
        "the source is up before the cut"
    );

    proxy.blackhole();
    let cut = Instant::now();
    let down = ls
        .source_where(WAIT, name, "the source not up", |s| !s.up)
        .await?;
    let detected = cut.elapsed().as_secs_f64();
    println!("{name}: not up {detected:.1} s after the path went silent: {down:?}");
    let error = down.error.clone().unwrap_or_default();
    ensure!(!error.is_empty(), "a source not up says why: {down:?}");
    let last_seen = down
        .last_seen_ms
        .with_context(|| format!("a source that was up says when it was last seen: {down:?}"))?;

    // Its locks are still listed, each marked with that instant, in the list and the detail.
    let listed: Vec<LockView> = ls.locks().await?;
    let id = lockscope_model::id::lock_id(name, held);
    let shown = listed
        .iter()
        .find(|l| l.id == id)
        .with_context(|| format!("{held} still listed while the source is silent"))?;
    ensure!(
        shown.source_last_seen_ms == Some(last_seen),
        "listed as last seen at {last_seen}: {shown:?}"
    );
    ensure!(!shown.holders.is_empty(), "shown as last seen: {shown:?}");
    let detail = ls.detail(name, held).await?;
    ensure!(
        !detail.gone && detail.lock.source_last_seen_ms == Some(last_seen),
        "the detail is marked last seen at {last_seen}: {detail:?}"
    );
    // And the metrics say it is not up, and since when it is as shown.
    let metrics = ls.metrics().await?;
    let up = format!("lockscope_source_up{{source=\"{name}\"}}");
    ensure!(
        metric_value(&metrics, &up) == Some(0.0),
        "{up} is 0:\n{metrics}"
    );
    let seen = format!("lockscope_source_last_seen_timestamp_seconds{{source=\"{name}\"}}");
    ensure!(
        metric_value(&metrics, &seen).is_some_and(|s| (s * 1000.0 - last_seen as f64).abs() < 1.0),
        "{seen} is {last_seen} ms:\n{metrics}"
    );

    // A lock taken while lockscope cannot hear: shown after the heal.
    let taken = during().await?;

    proxy.pass();
    let heal = Instant::now();
    ls.wait_lock(
        name,
        &taken,
        WAIT,
        "the lock taken during the silence",
        |l| !l.holders.is_empty() && l.source_last_seen_ms.is_none(),
    )
    .await?;
    let back = ls
        .source_where(WAIT, name, "the source up again", |s| {
            s.up && s.last_seen_ms.is_none()
        })
        .await?;
    ls.wait_lock(name, held, WAIT, "the held lock, live again", |l| {
        !l.holders.is_empty() && l.source_last_seen_ms.is_none()
    })
    .await?;
    let healed = heal.elapsed().as_secs_f64();
    println!("{name}: the truth shown again {healed:.1} s after the heal: {back:?}");
    eventually(WAIT, "lockscope_source_up 1 again", async || {
        Ok((ls.metric(&up).await? == Some(1.0)).then_some(()))
    })
    .await?;
    Ok(Figures { detected, healed })
}

async fn start(config: Config) -> Result<Lockscope> {
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

/// The fault of issue 35: a Redis source reached through a path that goes silent stayed up
/// for more than 45 s with its locks shown as live. With the default `silence_limit` (10 s)
/// both of the member's connections are pinged; the member goes down with the reason, its
/// locks marked, and after the heal its first scan shows what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_source_behind_a_silent_path_is_not_up_within_its_limit_and_heals() -> Result<()> {
    use lockscope_tests::support::redis::RedisServer;
    trace();
    let server = RedisServer::start().await?;
    let proxy = TcpProxy::start(loopback(server.port())).await?;
    let url = through(&server.url(), server.port(), &proxy);
    // The default limit: what an operator gets without configuring anything.
    let config = RedisSourceConfig::new("silent-redis", &url, &["lock:*"]);
    ensure!(config.watch.silence_limit <= Duration::from_secs(15));
    let ls = start(Config {
        sources: section("redis", vec![config]),
        ..Config::default()
    })
    .await?;
    let mut direct = server.connection().await?;
    redis::cmd("SET")
        .arg("lock:held")
        .arg("token-1")
        .arg("PX")
        .arg(120_000)
        .query_async::<()>(&mut direct)
        .await?;
    let figures = silence_and_heal(&ls, "silent-redis", &proxy, "/lock:held", async || {
        redis::cmd("SET")
            .arg("lock:during")
            .arg("token-2")
            .arg("PX")
            .arg(120_000)
            .query_async::<()>(&mut direct)
            .await?;
        Ok("/lock:during".to_string())
    })
    .await?;
    println!(
        "README: Redis, silent path: not up after {:.1} s (limit 10 s), truth again {:.1} s after the heal, nothing lost",
        figures.detected, figures.healed
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_source_behind_a_silent_path_is_not_up_within_its_limit_and_heals() -> Result<()> {
    use lockscope_tests::support::etcd::{lease_key_lock, EtcdServer};
    trace();
    let server = EtcdServer::start().await?;
    let proxy = TcpProxy::start(loopback(server.port())).await?;
    let mut config = EtcdSourceConfig::new("silent-etcd", &[proxy.addr().to_string()], &["/locks"]);
    config.silence_limit = LIMIT;
    let ls = start(Config {
        sources: section("etcd", vec![config]),
        ..Config::default()
    })
    .await?;
    let endpoints = server.endpoints();
    let root = format!("/locks{}", unique_root("silent"));
    let held = format!("{root}/held");
    let _held = lease_key_lock(&endpoints, &held, b"owner-1", 60)
        .await?
        .context("the key was free")?;
    let during_key = format!("{root}/during");
    let mut taken = None;
    let figures = silence_and_heal(&ls, "silent-etcd", &proxy, &held, async || {
        taken = Some(
            lease_key_lock(&endpoints, &during_key, b"owner-2", 60)
                .await?
                .context("the key was free")?,
        );
        Ok(during_key.clone())
    })
    .await?;
    println!(
        "README: etcd, silent path: not up after {:.1} s (limit {} s), truth again {:.1} s after the heal, nothing lost",
        figures.detected,
        LIMIT.as_secs(),
        figures.healed
    );
    Ok(())
}

/// A ZooKeeper member reached only through a silent relay: the client hears nothing for its
/// connection timeout (2 s, within the limit) and disconnects; the source is not up until it
/// is back and has read the tree again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_member_behind_a_silent_path_is_not_up_within_its_limit_and_heals() -> Result<()>
{
    use lockscope_tests::support::zk::ZkEnsemble;
    trace();
    let zk = ZkEnsemble::start(1).await?;
    let proxy = TcpProxy::start(zk.client_addr(0)).await?;
    let root = unique_root("silent");
    let mut config = zk_source("silent-zk", &proxy.addr().to_string(), &[root.as_str()]);
    config.silence_limit = LIMIT;
    let ls = start(Config {
        sources: section("zookeeper", vec![config]),
        ..Config::default()
    })
    .await?;
    // The lock clients talk to the member directly: only lockscope's path goes silent.
    let client = SeedClient::connect(&zk.connect_string(), Duration::from_secs(30)).await?;
    let held = format!("{root}/held");
    let _held = lockscope_tests::recipes::lock(&client, &held, &SeedRecipe::PlainEphemeral).await?;
    let during_path = format!("{root}/during");
    let mut taken = None;
    let figures = silence_and_heal(&ls, "silent-zk", &proxy, &held, async || {
        taken = Some(
            lockscope_tests::recipes::lock(&client, &during_path, &SeedRecipe::PlainEphemeral)
                .await?,
        );
        Ok(during_path.clone())
    })
    .await?;
    println!(
        "README: ZooKeeper, silent path to the member: not up after {:.1} s (client connection timeout 2 s, limit {} s), truth again {:.1} s after the heal, nothing lost",
        figures.detected,
        LIMIT.as_secs(),
        figures.healed
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_source_behind_a_silent_path_is_not_up_within_its_limit_and_heals() -> Result<()>
{
    use lockscope_tests::support::postgres::{self, Advisory, AdvisoryKey, Level, Postgres};
    trace();
    let server = Postgres::start().await?;
    let proxy = TcpProxy::start(loopback(server.port())).await?;
    let mut config =
        DbSourceConfig::new("silent-pg", &through(&server.url(), server.port(), &proxy));
    config.poll_interval = Duration::from_millis(200);
    config.silence_limit = LIMIT;
    let ls = start(Config {
        sources: section("postgres", vec![config].into_iter().map(DbSource::postgres)),
        ..Config::default()
    })
    .await?;
    let mut held = Advisory::open(postgres::connect(&server.url(), "held").await?).await?;
    held.lock(AdvisoryKey::Big(4101), Level::Session, false);
    held.wait_acquired(WAIT).await?;
    let mut taken = None;
    let figures = silence_and_heal(
        &ls,
        "silent-pg",
        &proxy,
        "/advisory/postgres/4101",
        async || {
            let mut during =
                Advisory::open(postgres::connect(&server.url(), "during").await?).await?;
            during.lock(AdvisoryKey::Big(4102), Level::Session, false);
            during.wait_acquired(WAIT).await?;
            taken = Some(during);
            Ok("/advisory/postgres/4102".to_string())
        },
    )
    .await?;
    println!(
        "README: PostgreSQL, silent path: not up after {:.1} s (limit {} s), truth again {:.1} s after the heal, nothing lost",
        figures.detected,
        LIMIT.as_secs(),
        figures.healed
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_source_behind_a_silent_path_is_not_up_within_its_limit_and_heals() -> Result<()>
{
    use lockscope_tests::support::mysql::{self, GetLock, MariaDb, Params};
    trace();
    let server = MariaDb::start().await?;
    let proxy = TcpProxy::start(loopback(server.port())).await?;
    let mut config = DbSourceConfig::new(
        "silent-maria",
        &through(&server.url(), server.port(), &proxy),
    );
    config.poll_interval = Duration::from_millis(200);
    config.silence_limit = LIMIT;
    let ls = start(Config {
        sources: section("mysql", vec![config].into_iter().map(DbSource::mysql)),
        ..Config::default()
    })
    .await?;
    let mut held = GetLock::start(
        mysql::connect(&server.app_url()).await?,
        "held",
        10,
        Params::Literal,
    )
    .await?;
    held.wait_acquired(WAIT).await?;
    let mut taken = None;
    let figures = silence_and_heal(&ls, "silent-maria", &proxy, "/get_lock/held", async || {
        let mut during = GetLock::start(
            mysql::connect(&server.app_url()).await?,
            "during",
            10,
            Params::Literal,
        )
        .await?;
        during.wait_acquired(WAIT).await?;
        taken = Some(during);
        Ok("/get_lock/during".to_string())
    })
    .await?;
    println!(
        "README: MariaDB, silent path: not up after {:.1} s (limit {} s), truth again {:.1} s after the heal, nothing lost",
        figures.detected,
        LIMIT.as_secs(),
        figures.healed
    );
    Ok(())
}
