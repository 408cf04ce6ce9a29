//! Smoke test of the real-Redis test support: standalone servers (started in parallel, killed and
//! restarted), a 3-master Redis Cluster, 3 independent masters for Redlock, and every lock client
//! in `lockscope_tests::redis_recipes`, checking that the keys each leaves (types, values, fields,
//! TTLs, channels) match `shared/LOCK_LAYOUTS.md`. Run with `--nocapture` to see timings.
//! python-redis-lock is not among them: `python_clients_smoke.rs` checks the real library's
//! layout (and its `BLPOP` waiters in `CLIENT LIST`).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use lockscope_tests::harness::eventually_every;
use lockscope_tests::redis_recipes::{
    self as rr, fair_queue_key, fair_timeout_key, fenced_token_key, rlock_channel,
    semaphore_channel, FencedAttempt, RedissonClient, Redlock,
};
use lockscope_tests::support::redis::{load_noise, RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;

const LEASE: u64 = 30_000;

async fn q<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, args: &[&str]) -> Result<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(conn).await.with_context(|| args.join(" "))
}

async fn key_type(conn: &mut MultiplexedConnection, key: &str) -> Result<String> {
    q(conn, &["TYPE", key]).await
}

async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> Result<i64> {
    q(conn, &["PTTL", key]).await
}

async fn numsub(conn: &mut MultiplexedConnection, channel: &str) -> Result<i64> {
    let (_, n): (String, i64) = q(conn, &["PUBSUB", "NUMSUB", channel]).await?;
    Ok(n)
}

fn process_gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits until `check` answers true: the harness's [`eventually_every`], trying at least every
/// 20 ms.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    eventually_every(timeout, Duration::from_millis(20), what, async || {
        Ok(check().await?.then_some(()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_servers_start_in_parallel_and_die_with_their_handles() -> Result<()> {
    let t = Instant::now();
    let (a, b, c) = tokio::join!(
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start_with(&["--notify-keyspace-events", "KEA"])
    );
    let (mut a, b, c) = (a?, b?, c?);
    println!("3 standalone servers in {:?}", t.elapsed());
    ensure!(a.port() != b.port() && b.port() != c.port() && a.port() != c.port());
    ensure!(a.url() == format!("redis://127.0.0.1:{}", a.port()));

    let mut conn = c.connection().await?;
    let (_, events): (String, String) =
        q(&mut conn, &["CONFIG", "GET", "notify-keyspace-events"]).await?;
    ensure!(events.contains('A') && events.contains('E'), "{events}");
    let mut conn = b.connection().await?;
    let (_, events): (String, String) =
        q(&mut conn, &["CONFIG", "GET", "notify-keyspace-events"]).await?;
    ensure!(events.is_empty(), "notifications should be off: {events:?}");
    let (_, save): (String, String) = q(&mut conn, &["CONFIG", "GET", "save"]).await?;
    ensure!(save.is_empty(), "{save:?}");

    // Kill and restart on the same port: data is gone, the server answers again.
    let mut conn = a.connection().await?;
    let _: () = q(&mut conn, &["SET", "k", "v"]).await?;
    let port = a.port();
    let old = a.pid().context("pid")?;
    a.kill();
    ensure!(a.pid().is_none() && process_gone(old));
    let dead = match a.connection().await {
        Err(_) => true,
        Ok(mut c2) => q::<String>(&mut c2, &["PING"]).await.is_err(),
    };
    ensure!(dead, "killed server still answers");
    let t = Instant::now();
    a.restart().await?;
    println!("restart in {:?}", t.elapsed());
    ensure!(a.port() == port);
    let mut conn = a.connection().await?;
    let v: Option<String> = q(&mut conn, &["GET", "k"]).await?;
    ensure!(v.is_none(), "no persistence expected, got {v:?}");

    // load_noise: 10k keys, all with TTLs between 1 and 10 minutes.
    let t = Instant::now();
    load_noise(&mut conn, 10_000).await?;
    println!("load_noise(10_000) in {:?}", t.elapsed());
    let size: i64 = q(&mut conn, &["DBSIZE"]).await?;
    ensure!(size == 10_000, "DBSIZE {size}");
    for k in ["noise:0", "noise:4321", "noise:9999"] {
        let ttl = pttl(&mut conn, k).await?;
        ensure!((50_000..=600_000).contains(&ttl), "{k} PTTL {ttl}");
    }
    let info: String = q(&mut conn, &["INFO", "keyspace"]).await?;
    ensure!(info.contains("keys=10000,expires=10000"), "{info}");

    let pids: Vec<u32> = [&a, &b, &c].iter().filter_map(|s| s.pid()).collect();
    ensure!(pids.len() == 3);
    drop((a, b, c));
    for pid in pids {
        ensure!(
            process_gone(pid),
            "redis-server {pid} still running after drop"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_leaves_its_documented_layout() -> Result<()> {
    let server = RedisServer::start().await?;
    let url = server.url();
    let mut conn = server.connection().await?;

    // --- token lock ---
    let token = rr::random_token();
    ensure!(rr::token_lock_acquire(&mut conn, "tok", &token, 10_000).await?);
    ensure!(!rr::token_lock_acquire(&mut conn, "tok", "other", 10_000).await?);
    ensure!(key_type(&mut conn, "tok").await? == "string");
    ensure!(q::<String>(&mut conn, &["GET", "tok"]).await? == token);
    let ttl = pttl(&mut conn, "tok").await?;
    ensure!((9_000..=10_000).contains(&ttl), "PTTL {ttl}");
    ensure!(!rr::token_lock_release(&mut conn, "tok", "other").await?);
    ensure!(rr::token_lock_release(&mut conn, "tok", &token).await?);
    ensure!(q::<i64>(&mut conn, &["EXISTS", "tok"]).await? == 0);

    // --- legacy SETNX ---
    ensure!(rr::setnx_no_ttl(&mut conn, "immortal", "host-1").await?);
    ensure!(!rr::setnx_no_ttl(&mut conn, "immortal", "host-2").await?);
    ensure!(pttl(&mut conn, "immortal").await? == -1);
    let deadline = rr::now_ms() + 60_000;
    ensure!(rr::setnx_deadline(&mut conn, "deadline", deadline).await?);
    ensure!(q::<String>(&mut conn, &["GET", "deadline"]).await? == deadline.to_string());
    ensure!(pttl(&mut conn, "deadline").await? == -1);

    // --- Redisson RLock ---
    let a = RedissonClient::new();
    let b = RedissonClient::new();
    ensure!(a.uuid.len() == 36 && a.uuid != b.uuid, "{}", a.uuid);
    let field = format!("{}:1", a.uuid);
    ensure!(a.lock_name(1) == field);
    ensure!(a
        .rlock_try_lock(&mut conn, "res", 1, LEASE)
        .await?
        .is_none());
    ensure!(a
        .rlock_try_lock(&mut conn, "res", 1, LEASE)
        .await?
        .is_none());
    ensure!(key_type(&mut conn, "res").await? == "hash");
    let fields: Vec<(String, String)> = q(&mut conn, &["HGETALL", "res"]).await?;
    ensure!(
        fields == vec![(field.clone(), "2".to_string())],
        "{fields:?}"
    );
    let ttl = pttl(&mut conn, "res").await?;
    ensure!(
        (LEASE as i64 - 1_000..=LEASE as i64).contains(&ttl),
        "PTTL {ttl}"
    );
    let held = b.rlock_try_lock(&mut conn, "res", 7, LEASE).await?;
    ensure!(matches!(held, Some(p) if p > 0), "{held:?}");
    // Watchdog renewal: only the holder can.
    ensure!(a.rlock_renew(&mut conn, "res", 1, 60_000).await?);
    ensure!(pttl(&mut conn, "res").await? > LEASE as i64);
    ensure!(!b.rlock_renew(&mut conn, "res", 7, 60_000).await?);
    ensure!(!a.rlock_renew(&mut conn, "res", 2, 60_000).await?);
    let channel = rlock_channel("res");
    ensure!(channel == "redisson_lock__channel:{res}");
    let mut sub = rr::subscribe_unlock_channel(&url, &channel).await?;
    ensure!(numsub(&mut conn, &channel).await? == 1);
    ensure!(b.rlock_unlock(&mut conn, "res", 7, LEASE).await?.is_none());
    ensure!(a.rlock_unlock(&mut conn, "res", 1, LEASE).await? == Some(false));
    ensure!(q::<String>(&mut conn, &["HGET", "res", &field]).await? == "1");
    ensure!(a.rlock_unlock(&mut conn, "res", 1, LEASE).await? == Some(true));
    ensure!(q::<i64>(&mut conn, &["EXISTS", "res"]).await? == 0);
    let msg = sub.next_message(Duration::from_secs(5)).await;
    ensure!(msg.as_deref() == Some(b"0".as_slice()), "{msg:?}");
    drop(sub);
    eventually("unsubscribed after drop", Duration::from_secs(5), || {
        let mut c = conn.clone();
        let ch = channel.clone();
        async move { Ok(numsub(&mut c, &ch).await? == 0) }
    })
    .await?;

    // --- Redisson FairLock ---
    let fair = "fair";
    let wait = 5_000;
    ensure!(a
        .fair_try_lock(&mut conn, fair, 1, LEASE, wait, rr::now_ms())
        .await?
        .is_none());
    let t1 = b
        .fair_try_lock(&mut conn, fair, 1, LEASE, wait, rr::now_ms())
        .await?
        .context("b:1 should queue")?;
    let t2 = b
        .fair_try_lock(&mut conn, fair, 2, LEASE, wait, rr::now_ms())
        .await?
        .context("b:2 should queue")?;
    ensure!(t1 > 0 && t2 > t1, "queued ttls {t1} {t2}");
    let queue_key = fair_queue_key(fair);
    let timeout_key = fair_timeout_key(fair);
    ensure!(
        queue_key == "redisson_lock_queue:{fair}" && timeout_key == "redisson_lock_timeout:{fair}"
    );
    ensure!(key_type(&mut conn, &queue_key).await? == "list");
    ensure!(key_type(&mut conn, &timeout_key).await? == "zset");
    let queue: Vec<String> = q(&mut conn, &["LRANGE", &queue_key, "0", "-1"]).await?;
    ensure!(queue == vec![b.lock_name(1), b.lock_name(2)], "{queue:?}");
    let deadlines: Vec<(String, f64)> = q(
        &mut conn,
        &["ZRANGE", &timeout_key, "0", "-1", "WITHSCORES"],
    )
    .await?;
    let now = rr::now_ms() as f64;
    ensure!(
        deadlines.len() == 2 && deadlines[0].0 == b.lock_name(1),
        "{deadlines:?}"
    );
    let (d1, d2) = (deadlines[0].1, deadlines[1].1);
    ensure!(
        d1 > now + (LEASE + wait) as f64 - 2_000.0 && d1 <= now + (LEASE + wait) as f64,
        "b:1 deadline {d1} now {now}"
    );
    ensure!((d2 - d1 - wait as f64).abs() < 100.0, "{d1} {d2}");
    ensure!(pttl(&mut conn, &queue_key).await? == -1 && pttl(&mut conn, &timeout_key).await? == -1);
    // Asking again while queued does not queue twice.
    b.fair_try_lock(&mut conn, fair, 1, LEASE, wait, rr::now_ms())
        .await?
        .context("still queued")?;
    ensure!(q::<i64>(&mut conn, &["LLEN", &queue_key]).await? == 2);
    // Unlock wakes the head waiter only, on its own channel.
    let head_channel = b.fair_waiter_channel(fair, 1);
    ensure!(head_channel == format!("redisson_lock__channel:{{fair}}:{}:1", b.uuid));
    let mut head = rr::subscribe_unlock_channel(&url, &head_channel).await?;
    let mut second = rr::subscribe_unlock_channel(&url, &b.fair_waiter_channel(fair, 2)).await?;
    ensure!(
        a.fair_unlock(&mut conn, fair, 1, LEASE, rr::now_ms())
            .await?
            == Some(true)
    );
    ensure!(head.next_message(Duration::from_secs(5)).await.as_deref() == Some(b"0".as_slice()));
    ensure!(second
        .next_message(Duration::from_millis(300))
        .await
        .is_none());
    ensure!(b
        .fair_try_lock(&mut conn, fair, 1, LEASE, wait, rr::now_ms())
        .await?
        .is_none());
    let queue: Vec<String> = q(&mut conn, &["LRANGE", &queue_key, "0", "-1"]).await?;
    ensure!(queue == vec![b.lock_name(2)], "{queue:?}");
    let fields: Vec<(String, String)> = q(&mut conn, &["HGETALL", fair]).await?;
    ensure!(
        fields == vec![(b.lock_name(1), "1".to_string())],
        "{fields:?}"
    );
    // Stale-waiter cleanup: an attempt "an hour later" drops b:2 (deadline passed) first.
    let later = rr::now_ms() + 3_600_000;
    a.fair_try_lock(&mut conn, fair, 9, LEASE, wait, later)
        .await?
        .context("a:9 should queue")?;
    let queue: Vec<String> = q(&mut conn, &["LRANGE", &queue_key, "0", "-1"]).await?;
    ensure!(queue == vec![a.lock_name(9)], "{queue:?}");
    let members: Vec<String> = q(&mut conn, &["ZRANGE", &timeout_key, "0", "-1"]).await?;
    ensure!(members == vec![a.lock_name(9)], "{members:?}");

    // --- Redisson ReadWriteLock ---
    let rw = "rw";
    ensure!(a.rw_read_lock(&mut conn, rw, 1, LEASE).await?.is_none());
    ensure!(a.rw_read_lock(&mut conn, rw, 1, LEASE).await?.is_none());
    ensure!(b.rw_read_lock(&mut conn, rw, 3, LEASE).await?.is_none());
    ensure!(q::<String>(&mut conn, &["HGET", rw, "mode"]).await? == "read");
    ensure!(q::<String>(&mut conn, &["HGET", rw, &a.lock_name(1)]).await? == "2");
    ensure!(q::<String>(&mut conn, &["HGET", rw, &b.lock_name(3)]).await? == "1");
    for n in 1..=2 {
        let k = format!("{{rw}}:{}:1:rwlock_timeout:{n}", a.uuid);
        ensure!(k == format!("{}:{n}", a.rw_timeout_prefix(rw, 1)));
        ensure!(key_type(&mut conn, &k).await? == "string", "{k}");
        let ttl = pttl(&mut conn, &k).await?;
        ensure!(
            (LEASE as i64 - 1_000..=LEASE as i64).contains(&ttl),
            "{k} PTTL {ttl}"
        );
    }
    let blocked = b.rw_write_lock(&mut conn, rw, 4, LEASE).await?;
    ensure!(matches!(blocked, Some(p) if p > 0), "{blocked:?}");
    ensure!(a.rw_read_unlock(&mut conn, rw, 1).await? == Some(false));
    ensure!(a.rw_read_unlock(&mut conn, rw, 1).await? == Some(false));
    ensure!(
        q::<i64>(
            &mut conn,
            &["EXISTS", &format!("{{rw}}:{}:1:rwlock_timeout:1", a.uuid)]
        )
        .await?
            == 0
    );
    let rw_sub = rr::subscribe_unlock_channel(&url, &rr::rw_channel(rw)).await?;
    ensure!(rw_sub.channel() == "redisson_rwlock:{rw}");
    ensure!(b.rw_read_unlock(&mut conn, rw, 3).await? == Some(true));
    ensure!(q::<i64>(&mut conn, &["EXISTS", rw]).await? == 0);
    ensure!(b.rw_write_lock(&mut conn, rw, 4, LEASE).await?.is_none());
    ensure!(q::<String>(&mut conn, &["HGET", rw, "mode"]).await? == "write");
    ensure!(q::<String>(&mut conn, &["HGET", rw, &b.write_lock_name(4)]).await? == "1");
    ensure!(b.write_lock_name(4) == format!("{}:4:write", b.uuid));
    ensure!(a.rw_read_lock(&mut conn, rw, 1, LEASE).await?.is_some());
    ensure!(b.rw_write_unlock(&mut conn, rw, 4, LEASE).await? == Some(true));
    ensure!(q::<i64>(&mut conn, &["EXISTS", rw]).await? == 0);
    drop(rw_sub);

    // --- Redisson Semaphore ---
    let sem = "sem";
    ensure!(a.semaphore_set_permits(&mut conn, sem, 3).await?);
    ensure!(!a.semaphore_set_permits(&mut conn, sem, 5).await?);
    ensure!(key_type(&mut conn, sem).await? == "string");
    ensure!(a.semaphore_try_acquire(&mut conn, sem, 2).await?);
    ensure!(q::<String>(&mut conn, &["GET", sem]).await? == "1");
    ensure!(!b.semaphore_try_acquire(&mut conn, sem, 2).await?);
    let mut sem_sub = rr::subscribe_unlock_channel(&url, &semaphore_channel(sem)).await?;
    ensure!(sem_sub.channel() == "redisson_sc:{sem}");
    a.semaphore_release(&mut conn, sem, 2).await?;
    ensure!(q::<String>(&mut conn, &["GET", sem]).await? == "3");
    ensure!(pttl(&mut conn, sem).await? == -1);
    ensure!(
        sem_sub
            .next_message(Duration::from_secs(5))
            .await
            .as_deref()
            == Some(b"3".as_slice())
    );

    // --- Redisson FencedLock ---
    let fenced = "fenced";
    ensure!(a.fenced_try_lock(&mut conn, fenced, 1, LEASE).await? == FencedAttempt::Acquired(1));
    ensure!(a.fenced_try_lock(&mut conn, fenced, 1, LEASE).await? == FencedAttempt::Acquired(2));
    let other = b.fenced_try_lock(&mut conn, fenced, 1, LEASE).await?;
    ensure!(
        matches!(other, FencedAttempt::Held(p) if p > 0),
        "{other:?}"
    );
    let token_key = fenced_token_key(fenced);
    ensure!(token_key == "redisson_lock_token:{fenced}");
    ensure!(q::<String>(&mut conn, &["GET", &token_key]).await? == "2");
    ensure!(q::<String>(&mut conn, &["HGET", fenced, &a.lock_name(1)]).await? == "2");
    ensure!(a.fenced_unlock(&mut conn, fenced, 1, LEASE).await? == Some(false));
    ensure!(a.fenced_unlock(&mut conn, fenced, 1, LEASE).await? == Some(true));
    ensure!(b.fenced_try_lock(&mut conn, fenced, 1, LEASE).await? == FencedAttempt::Acquired(3));
    ensure!(pttl(&mut conn, &token_key).await? == -1);

    // --- ShedLock ---
    let key = "job-lock:default:report";
    ensure!(rr::shedlock_lock(&mut conn, key, "host-a", 20_000).await?);
    ensure!(!rr::shedlock_lock(&mut conn, key, "host-b", 20_000).await?);
    let value: String = q(&mut conn, &["GET", key]).await?;
    let rest = value.strip_prefix("ADDED:").context(value.clone())?;
    let (time, holder) = rest.split_once('@').context(value.clone())?;
    ensure!(
        time.len() == 24 && time.ends_with('Z') && &time[10..11] == "T",
        "{value}"
    );
    let (host, uuid) = holder.split_once(':').context(value.clone())?;
    ensure!(host == "host-a" && uuid.len() == 36, "{value}");
    let ttl = pttl(&mut conn, key).await?;
    ensure!((19_000..=20_000).contains(&ttl), "PTTL {ttl}");
    rr::shedlock_unlock(&mut conn, key, 5_000).await?;
    ensure!(q::<String>(&mut conn, &["GET", key]).await? == value);
    ensure!(pttl(&mut conn, key).await? <= 5_000);
    rr::shedlock_unlock(&mut conn, key, 0).await?;
    ensure!(q::<i64>(&mut conn, &["EXISTS", key]).await? == 0);
    println!("ShedLock value: {value}");

    Ok(())
}

#[test]
fn iso8601_formats_known_instants() {
    assert_eq!(rr::iso8601_utc(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rr::iso8601_utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
    assert_eq!(
        rr::iso8601_utc(1_709_251_199_999),
        "2024-02-29T23:59:59.999Z"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_keys_land_where_node_for_says() -> Result<()> {
    let t = Instant::now();
    let cluster = RedisCluster::start(3).await?;
    println!("3-master cluster ready in {:?}", t.elapsed());
    ensure!(cluster.nodes.len() == 3 && cluster.urls().len() == 3);
    for url in cluster.urls() {
        let mut c = lockscope_tests::support::redis::connect(&url).await?;
        let info: String = q(&mut c, &["CLUSTER", "INFO"]).await?;
        ensure!(
            info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3"),
            "{info}"
        );
    }

    let client = RedissonClient::new();
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..12 {
        let name = format!("cl-lock-{i}");
        let owner = cluster.node_for(name.as_bytes()).await?;
        owners.insert(owner);
        let mut conn = cluster.connection_for(name.as_bytes()).await?;
        ensure!(client
            .rlock_try_lock(&mut conn, &name, 1, LEASE)
            .await?
            .is_none());
        // The fair queue shares the {name} hash tag: same node, one script.
        client
            .fair_try_lock(&mut conn, &name, 1, LEASE, 5_000, rr::now_ms())
            .await?;
        let mut on_owner = cluster.nodes[owner].connection().await?;
        ensure!(key_type(&mut on_owner, &name).await? == "hash");
        for (j, node) in cluster.nodes.iter().enumerate() {
            let mut c = node.connection().await?;
            let slot: i64 = q(&mut c, &["CLUSTER", "KEYSLOT", &name]).await?;
            let n: i64 = q(&mut c, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]).await?;
            ensure!(
                (n == 1) == (j == owner),
                "{name}: node {j} has {n} keys in its slot, owner {owner}"
            );
        }
    }
    ensure!(owners.len() > 1, "12 keys all on one node: {owners:?}");

    // A key with a hash tag lands with its tag.
    let a = cluster.node_for(b"{cl-lock-0}:x").await?;
    ensure!(a == cluster.node_for(b"cl-lock-0").await?);

    let pids: Vec<u32> = cluster.nodes.iter().filter_map(RedisServer::pid).collect();
    ensure!(pids.len() == 3);
    drop(cluster);
    for pid in pids {
        ensure!(
            process_gone(pid),
            "cluster node {pid} still running after drop"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_three_independent_masters() -> Result<()> {
    let (a, b, c) = tokio::join!(
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start()
    );
    let mut masters = [a?, b?, c?];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let redlock = Redlock::connect(&urls).await?;
    ensure!(redlock.quorum() == 2);

    let holders = |key: &'static str| {
        let urls = urls.clone();
        async move {
            let mut out = Vec::new();
            for url in &urls {
                let mut c = lockscope_tests::support::redis::connect(url).await?;
                out.push(q::<Option<String>>(&mut c, &["GET", key]).await?);
            }
            anyhow::Ok(out)
        }
    };

    ensure!(redlock.lock("rl", "t1", 10_000).await?);
    ensure!(holders("rl").await? == vec![Some("t1".to_string()); 3]);
    ensure!(!redlock.lock("rl", "t2", 10_000).await?);
    ensure!(holders("rl").await? == vec![Some("t1".to_string()); 3]);
    ensure!(redlock.unlock("rl", "t1").await? == 3);
    ensure!(holders("rl").await? == vec![None; 3]);

    // Split: t1 on master 0 only, t2 on master 1 only; t3 gets master 2 only and must give up,
    // releasing what it got.
    ensure!(redlock.lock_on(&[0], "split", "t1", 10_000).await? == 1);
    ensure!(redlock.lock_on(&[1], "split", "t2", 10_000).await? == 1);
    ensure!(!redlock.lock("split", "t3", 10_000).await?);
    ensure!(holders("split").await? == vec![Some("t1".to_string()), Some("t2".to_string()), None]);
    ensure!(redlock.lock_on(&[5], "split", "t1", 10_000).await.is_err());

    // Majority with one master down.
    masters[2].kill();
    ensure!(redlock.lock("down", "t4", 10_000).await?);
    let mut c0 = masters[0].connection().await?;
    ensure!(q::<String>(&mut c0, &["GET", "down"]).await? == "t4");
    masters[1].kill();
    ensure!(!redlock.lock("down2", "t5", 10_000).await?);
    ensure!(q::<Option<String>>(&mut c0, &["GET", "down2"])
        .await?
        .is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_master_cluster_is_made_by_hand() -> Result<()> {
    let t = Instant::now();
    let cluster = RedisCluster::start(2).await?;
    println!("2-master cluster ready in {:?}", t.elapsed());
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..8 {
        let key = format!("k{i}");
        let owner = cluster.node_for(key.as_bytes()).await?;
        seen.insert(owner);
        let mut conn = cluster.connection_for(key.as_bytes()).await?;
        ensure!(rr::token_lock_acquire(&mut conn, &key, "t", 10_000).await?);
    }
    ensure!(seen.len() == 2, "{seen:?}");
    Ok(())
}
