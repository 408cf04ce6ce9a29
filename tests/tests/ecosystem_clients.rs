//! Ruby, Go and .NET lock libraries (issue 38), whose registries (rubygems, the Go module
//! proxy, NuGet) are out of reach and which Debian does not ship: source-faithful clients
//! that send what each library sends, read from its source —
//!
//! * redlock-rb 2.0.6 (`lib/redlock/scripts.rb`, commit f176e57): the LOCK script, value a
//!   `SecureRandom.uuid`, no key prefix;
//! * go-redsync/redsync v4.17.0 (79f6ba2): `SET name <base64 of 16 bytes> NX PX 8000`;
//! * bsm/redislock v0.10.0 (a5b7483): `obtain.lua` (MSETNX, then PEXPIRE), the value its
//!   22-character RawURL token followed by the caller's metadata;
//! * RedLock.net 2.3.2 (dcfe373): `SET redlock:<resource> <Guid> EX 30 NX`;
//! * madelson/DistributedLock 2.8.1 (3da3eaf): Redis mutex `SET <key> <machine>_<pid>_<32 hex>
//!   EX 30 NX`, the semaphore's acquire script (a sorted set of ids scored by their expiry,
//!   with the server's microseconds), the reader-writer lock's `<key>.readers` set; the
//!   PostgreSQL provider's two-int4 key of a short ASCII name; the MySQL provider's
//!   `GET_LOCK` statement;
//! * with_advisory_lock 5.3.0 (7348a98): `pg_try_advisory_lock(crc32(name) & 0x7fffffff, 0)`
//!   with the name in a comment, polled; MySQL `GET_LOCK(name, 0)`.
//!
//! What lockscope shows is checked against what the servers hold. Facts are awaited with bounds.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::database::DbSourceConfig;
use lockscope::config::{section, Config, DbSource, RedisSourceConfig};
use lockscope_model::wire::LockView;
use lockscope_tests::harness::{eventually, Lockscope};
use lockscope_tests::support::dblocks::Session;
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::{mysql::MariaDb, postgres::Postgres};

const WAIT: Duration = Duration::from_secs(30);

/// redlock-rb 2.0.6 `Redlock::Scripts::LOCK_SCRIPT` (the heredoc's text, without its
/// indentation), ARGV = [value, ttl_ms, "yes"].
const REDLOCK_RB_LOCK: &str = r#"if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
end"#;

/// bsm/redislock v0.10.0 `obtain.lua`: ARGV = [value, token length, ttl_ms].
const REDISLOCK_OBTAIN: &str = r#"local value = ARGV[1]
local tokenLen = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local args = {}
for _, key in ipairs(KEYS) do
  table.insert(args, key)
  table.insert(args, value)
end
if redis.call("msetnx", unpack(args)) ~= 1 then
  for _, key in ipairs(KEYS) do
    if redis.call("getrange", key, 0, tokenLen - 1) ~= string.sub(value, 1, tokenLen) then
      return false
    end
  end
  redis.call("mset", unpack(args))
end
for _, key in ipairs(KEYS) do
  redis.call("pexpire", key, ttl)
end
return redis.status_reply("OK")"#;

/// DistributedLock.Redis 1.1.1 `RedisSemaphorePrimitive` acquire script (whitespace collapsed
/// as the library sends it): KEYS = [key], ARGV = [maxCount, expiryMs, id, setExpiryMs].
const DISTRIBUTED_LOCK_SEMAPHORE_ACQUIRE: &str = "redis.replicate_commands() local nowResult = redis.call('time') local nowMillis = (tonumber(nowResult[1]) * 1000.0) + (tonumber(nowResult[2]) / 1000.0) redis.call('zremrangebyscore', KEYS[1], '-inf', nowMillis) if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then redis.call('zadd', KEYS[1], nowMillis + tonumber(ARGV[2]), ARGV[3]) local keyTtl = redis.call('pttl', KEYS[1]) if keyTtl < tonumber(ARGV[4]) then redis.call('pexpire', KEYS[1], ARGV[4]) end return 1 end return 0";

fn holders(lock: &LockView) -> Vec<String> {
    let mut ids: Vec<String> = lock.holders.iter().map(|h| h.node.clone()).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ruby_go_and_dotnet_redis_clients_as_their_sources_write() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut source = RedisSourceConfig::new("r", &server.url(), &["*"]);
    // DistributedLock's semaphore does not store its maxCount: configured, as any semaphore.
    source.watch.semaphores.insert("dl:pool".into(), 2);
    // A set's changes send no notification lockscope subscribes to (`Kg$lhzxe`): the
    // reconcile scan finds it.
    source.watch.reconcile_interval = Duration::from_secs(2);
    let ls = Lockscope::start(Config {
        sources: section("redis", vec![source]),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    let mut conn = server.connection().await?;

    // redlock-rb: its LOCK script, a UUID, 10 s.
    let uuid = "02a608eb-69fb-4120-b100-56d583454d12";
    let set: Option<String> = redis::Script::new(REDLOCK_RB_LOCK)
        .key("report")
        .arg(uuid)
        .arg(10_000)
        .arg("yes")
        .invoke_async(&mut conn)
        .await?;
    ensure!(set.as_deref() == Some("OK"), "redlock-rb lock: {set:?}");
    // redsync: a plain SET NX PX, the default 8 s expiry.
    let redsync = "2B1lcaNvJUwEMTushJNPJQ==";
    let _: () = redis::cmd("SET")
        .arg("orders-mutex")
        .arg(redsync)
        .arg("NX")
        .arg("PX")
        .arg(8_000)
        .query_async(&mut conn)
        .await?;
    // bsm/redislock: obtain.lua with metadata after the token.
    let token = "Zop0VFNPoOzjTE_ehklNIA";
    let value = format!("{token}worker-7");
    let ok: String = redis::Script::new(REDISLOCK_OBTAIN)
        .key("invoice-lock")
        .arg(&value)
        .arg(token.len())
        .arg(15_000)
        .invoke_async(&mut conn)
        .await?;
    ensure!(ok == "OK");
    // RedLock.net: its key format and a Guid, EX for a whole number of seconds.
    let guid = "3f2504e0-4f89-41d3-9a0c-0305e82c3301";
    let _: () = redis::cmd("SET")
        .arg("redlock:orders")
        .arg(guid)
        .arg("EX")
        .arg(30)
        .arg("NX")
        .query_async(&mut conn)
        .await?;
    // DistributedLock.Redis: a mutex, a semaphore of 2 with three contenders, a reader-writer
    // lock's readers set.
    let dl = "WEB01_4242_0f8fad5bd9cb469fa16570867728950e";
    let _: () = redis::cmd("SET")
        .arg("dl:mutex")
        .arg(dl)
        .arg("EX")
        .arg(30)
        .arg("NX")
        .query_async(&mut conn)
        .await?;
    let mut admitted = Vec::new();
    for id in [
        "WEB01_4242_1f8fad5bd9cb469fa16570867728950e",
        "WEB02_77_2f8fad5bd9cb469fa16570867728950e",
        "WEB03_9_3f8fad5bd9cb469fa16570867728950e",
    ] {
        let got: i64 = redis::Script::new(DISTRIBUTED_LOCK_SEMAPHORE_ACQUIRE)
            .key("dl:pool")
            .arg(2)
            .arg(30_000)
            .arg(id)
            .arg(90_000)
            .invoke_async(&mut conn)
            .await?;
        if got == 1 {
            admitted.push(id.to_string());
        }
    }
    ensure!(admitted.len() == 2, "{admitted:?}");
    let _: () = redis::cmd("SADD")
        .arg("dl:rw.readers")
        .arg(dl)
        .query_async(&mut conn)
        .await?;
    // A writer that found the reader: `SET <name>.writer <id>_WRITERWAITING EX 30 NX`.
    let writer = "WEB02_77_4f8fad5bd9cb469fa16570867728950e";
    let _: () = redis::cmd("SET")
        .arg("dl:rw.writer")
        .arg(format!("{writer}_WRITERWAITING"))
        .arg("EX")
        .arg(30)
        .arg("NX")
        .query_async(&mut conn)
        .await?;

    let token_lock = async |path: &str, holder: &str, ttl_max: i64| -> Result<()> {
        let lock = ls
            .wait_lock("r", path, WAIT, "held", |l| l.holders.len() == 1)
            .await?;
        eprintln!(
            "measured: {path}: {} holder {:?} ttl {:?}",
            lock.recipe, lock.holders[0].node, lock.ttl_ms
        );
        ensure!(lock.recipe == "token_lock", "{path}: {lock:?}");
        ensure!(lock.holders[0].node == holder, "{path}: {lock:?}");
        let ttl = lock.ttl_ms.context("no TTL")?;
        ensure!(ttl > 0 && ttl <= ttl_max, "{path}: TTL {ttl}");
        ensure!(
            lock.waiters.is_empty(),
            "these clients' waiters poll: none shown"
        );
        Ok(())
    };
    token_lock("/report", uuid, 10_000).await?;
    token_lock("/orders-mutex", redsync, 8_000).await?;
    token_lock("/invoice-lock", &value, 15_000).await?;
    token_lock("/redlock:orders", guid, 30_000).await?;
    token_lock("/dl:mutex", dl, 30_000).await?;
    let pool = ls
        .wait_lock("r", "/dl:pool", WAIT, "two semaphore holders", |l| {
            l.holders.len() == 2
        })
        .await?;
    admitted.sort();
    ensure!(holders(&pool) == admitted, "{pool:?}");
    ensure!(pool.recipe == "token_zset");
    ensure!(
        (pool.permits_total, pool.permits_available) == (Some(2), Some(0)),
        "{pool:?}"
    );
    ensure!(
        pool.holders.iter().all(|h| h.mode.is_none()),
        "permits, not reads"
    );
    // The waiting writer waits; nobody holds `<name>.writer` meanwhile.
    let waiting = ls
        .wait_lock("r", "/dl:rw.writer", WAIT, "the waiting writer", |l| {
            l.waiters.len() == 1
        })
        .await?;
    ensure!(
        waiting.holders.is_empty() && waiting.waiters[0].session == writer,
        "{waiting:?}"
    );
    // The readers set is no lock lockscope reads: counted and shown, not hidden.
    let source = ls
        .source_where(WAIT, "r", "the readers set counted", |s| {
            s.unrecognised_sample
                .iter()
                .any(|k| k.key == "dl:rw.readers")
        })
        .await?;
    ensure!(source.unrecognised == 1, "{:?}", source.unrecognised_sample);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotnet_and_ruby_database_clients_as_their_sources_write() -> Result<()> {
    let (pg, my) = tokio::try_join!(Postgres::start(), MariaDb::start())?;
    let source = |url: &str| {
        let mut config = DbSourceConfig::new(if url.starts_with("mysql") { "m" } else { "p" }, url);
        config.poll_interval = Duration::from_millis(200);
        config
    };
    let ls = Lockscope::start(Config {
        sources: [
            section("postgres", vec![DbSource::postgres(source(&pg.url()))]),
            section("mysql", vec![DbSource::mysql(source(&my.url()))]),
        ]
        .concat(),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;

    // with_advisory_lock 5.3 on PostgreSQL: the two-int form, crc32("import-job") & 0x7fffffff
    // = 780347503 and 0, polled with pg_try_; the name rides in the statement's comment.
    let ruby = Session::new(pg.connect("rails-worker").await?).await?;
    ruby.exec("SELECT pg_try_advisory_lock(780347503,0) AS t0f8fad5bd9cb469fa16570867728950e /* import-job */")
        .await?;
    let lock = ls
        .wait_lock(
            "p",
            "/advisory/postgres/(780347503,0)",
            WAIT,
            "with_advisory_lock held",
            |l| l.holders.len() == 1,
        )
        .await?;
    let statement = lock.holders[0].statement.as_ref().context("no statement")?;
    eprintln!(
        "measured: with_advisory_lock holder statement {:?}",
        statement.text
    );
    ensure!(statement.text.contains("/* import-job */"), "{statement:?}");

    // DistributedLock.Postgres: "mylock" packs into the int4 pair (-605591812, 2061500415); a
    // second connection blocks in pg_advisory_lock and is shown waiting.
    let holder = Session::new(pg.connect("dotnet-a").await?).await?;
    holder
        .exec("SELECT pg_catalog.pg_advisory_lock(-605591812, 2061500415) AS result")
        .await?;
    let waiter = Session::new(pg.connect("dotnet-b").await?).await?;
    let mut blocked =
        waiter.start("SELECT pg_catalog.pg_advisory_lock(-605591812, 2061500415) AS result");
    let path = "/advisory/postgres/(-605591812,2061500415)";
    let lock = ls
        .wait_lock("p", path, WAIT, "DistributedLock held and awaited", |l| {
            l.holders.len() == 1 && l.waiters.len() == 1
        })
        .await?;
    eprintln!(
        "measured: DistributedLock.Postgres {path}: holder {:?} waiter {:?}",
        lock.holders[0].session, lock.waiters[0].session
    );
    holder
        .exec("SELECT pg_catalog.pg_advisory_unlock(-605591812, 2061500415)")
        .await?;
    blocked.wait(WAIT).await?;

    // DistributedLock.MySql: its GET_LOCK statement (a lower-case name of at most 64 characters
    // is used as it is); with_advisory_lock 5.3 polls GET_LOCK(name, 0).
    let dotnet = Session::new(my.connect().await?).await?;
    dotnet
        .exec("SELECT CASE WHEN IS_USED_LOCK('orders') = CONNECTION_ID() THEN 103 ELSE IFNULL(GET_LOCK('orders', 4294967295), 104) END")
        .await?;
    let rails = Session::new(my.connect().await?).await?;
    rails.exec("SELECT GET_LOCK('import-job', 0)").await?;
    let other = Session::new(my.connect().await?).await?;
    let mut waiting = other.start("SELECT CASE WHEN IS_USED_LOCK('orders') = CONNECTION_ID() THEN 103 ELSE IFNULL(GET_LOCK('orders', 30), 104) END");
    ls.wait_lock(
        "m",
        "/get_lock/orders",
        WAIT,
        "DistributedLock.MySql held and awaited",
        |l| l.holders.len() == 1 && l.waiters.len() == 1,
    )
    .await?;
    ls.wait_lock(
        "m",
        "/get_lock/import-job",
        WAIT,
        "with_advisory_lock held",
        |l| l.holders.len() == 1,
    )
    .await?;
    dotnet.exec("DO RELEASE_LOCK('orders')").await?;
    waiting.wait(WAIT).await?;
    eventually(WAIT, "the waiter holds", async || {
        let lock = ls.lock("m", "/get_lock/orders").await?;
        Ok(lock.filter(|l| l.holders.len() == 1 && l.waiters.is_empty()))
    })
    .await?;
    Ok(())
}

/// DistributedLock.ZooKeeper 1.0.0 (`ZooKeeperDistributedLock`): a persistent lock node with
/// empty data, open to all, and EPHEMERAL_SEQUENTIAL children `lock-<seq>` with empty data;
/// the first holds, each later one watches its predecessor. Beside it under the watched root, a
/// persistent node with data that is no lock: counted and sampled, not hidden; an empty
/// directory is no such thing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotnet_zookeeper_lock_and_a_node_no_recipe_reads() -> Result<()> {
    use lockscope_tests::harness::zk_source;
    use lockscope_tests::recipes::{ensure_path, SeedClient};
    use lockscope_tests::support::zk::ZkEnsemble;
    use zookeeper_client as zkc;

    let zk = ZkEnsemble::start(1).await?;
    let root = lockscope_tests::unique_root("dotnet");
    let ls = Lockscope::start(Config {
        sources: section(
            "zookeeper",
            vec![zk_source("z", &zk.connect_string(), &[&root])],
        ),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    let a = SeedClient::connect(&zk.connect_string(), Duration::from_secs(20)).await?;
    let b = SeedClient::connect(&zk.connect_string(), Duration::from_secs(20)).await?;
    let lock = format!("{root}/orders");
    ensure_path(a.client(), &lock).await?;
    let sequential = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let (_, first) = a
        .client()
        .create(&format!("{lock}/lock-"), b"", &sequential)
        .await?;
    let (_, second) = b
        .client()
        .create(&format!("{lock}/lock-"), b"", &sequential)
        .await?;
    let view = ls
        .wait_lock("z", &lock, WAIT, "a holder and a waiter", |l| {
            l.holders.len() == 1 && l.waiters.len() == 1
        })
        .await?;
    eprintln!(
        "measured: DistributedLock.ZooKeeper {lock}: {} holder {} waiter {}",
        view.recipe, view.holders[0].node, view.waiters[0].node
    );
    ensure!(view.holders[0]
        .node
        .ends_with(&format!("lock-{:010}", first.into_i64())));
    ensure!(view.waiters[0]
        .node
        .ends_with(&format!("lock-{:010}", second.into_i64())));

    // Its reader-writer lock: `read-` and `write-` children of one node share one sequence;
    // readers ahead of the writer hold together, the writer waits.
    let rw = format!("{root}/report");
    ensure_path(a.client(), &rw).await?;
    for (client, prefix) in [(&a, "read-"), (&b, "read-"), (&a, "write-")] {
        client
            .client()
            .create(&format!("{rw}/{prefix}"), b"", &sequential)
            .await?;
    }
    let view = ls
        .wait_lock("z", &rw, WAIT, "two readers and a waiting writer", |l| {
            l.holders.len() == 2 && l.waiters.len() == 1
        })
        .await?;
    ensure!(
        view.holders
            .iter()
            .all(|h| h.mode == Some(lockscope_model::wire::LockMode::Read)),
        "{view:?}"
    );
    ensure!(
        view.waiters[0].mode == Some(lockscope_model::wire::LockMode::Write),
        "{view:?}"
    );

    let persistent = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    a.client()
        .create(&format!("{root}/settings"), b"max_workers=4", &persistent)
        .await?;
    ensure_path(a.client(), &format!("{root}/empty-dir")).await?;
    let source = ls
        .source_where(WAIT, "z", "the settings node counted", |s| {
            s.unrecognised == 1
        })
        .await?;
    let sample = &source.unrecognised_sample[0];
    eprintln!("measured: source z shows {sample:?}");
    ensure!(sample.key == format!("{root}/settings") && sample.kind == "znode");
    ensure!(sample.head == "max_workers=4" && sample.size == Some(13));
    a.client().delete(&format!("{root}/settings"), None).await?;
    ls.source_where(WAIT, "z", "the settings node gone", |s| s.unrecognised == 0)
        .await?;
    Ok(())
}
