//! Smoke test of the real-etcd test support (`lockscope_tests::support::etcd`): a single member
//! with `etcdctl lock` holders and waiters (released, interrupted and crashed), an `etcdctl
//! elect` election, single-key lease locks with binary owners, the one-shot helpers, and a
//! 3-member cluster that loses and regains a member. Checks the key layouts of
//! `shared/LOCK_LAYOUTS.md` (etcd section). Every test has its own servers, so they run in
//! parallel. Run with `--nocapture` to see timings.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use lockscope_tests::harness::eventually_every;
use lockscope_tests::support::etcd::{
    self, compact, del, keys, lease_hex, lease_key_lock, lease_of_key, lease_ttl, put,
    revoke_lease, EtcdCluster, EtcdKey, EtcdServer, EtcdctlElect, EtcdctlLock,
};

const WAIT: Duration = Duration::from_secs(20);

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

/// Keys under `prefix` in `create_revision` order.
async fn queue(endpoints: &[String], prefix: &str) -> Result<Vec<EtcdKey>> {
    let mut ks = keys(endpoints, prefix).await?;
    ks.sort_by_key(|k| k.create_revision);
    Ok(ks)
}

async fn wait_count(endpoints: &[String], prefix: &str, n: usize) -> Result<()> {
    eventually(&format!("{n} keys under {prefix}"), WAIT, || async {
        Ok(keys(endpoints, prefix).await?.len() == n)
    })
    .await
}

async fn wait_gone(endpoints: &[String], prefix: &str, key: &str) -> Result<()> {
    eventually(&format!("{key} deleted"), WAIT, || async {
        Ok(!keys(endpoints, prefix)
            .await?
            .iter()
            .any(|k| k.key == key.as_bytes()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_member_locks_elections_and_lease_keys() -> Result<()> {
    let t = Instant::now();
    let server = EtcdServer::start().await?;
    println!("etcd member ready in {:?}", t.elapsed());
    let eps = server.endpoints();
    ensure!(server.endpoint() == format!("127.0.0.1:{}", server.port()));
    ensure!(eps == vec![server.endpoint()]);

    // --- etcdctl lock: one holder, two waiters queued in create_revision order.
    let t = Instant::now();
    let prefix = "/locks/job/";
    let mut holder = EtcdctlLock::start(&eps, "/locks/job", 30).await?;
    let held = holder.wait_acquired(WAIT).await?;
    println!("etcdctl lock acquired in {:?}: {held}", t.elapsed());
    let mut w1 = EtcdctlLock::start(&eps, "/locks/job", 2).await?;
    wait_count(&eps, prefix, 2).await?;
    let mut w2 = EtcdctlLock::start(&eps, "/locks/job", 30).await?;
    wait_count(&eps, prefix, 3).await?;
    ensure!(holder.is_acquired() && !w1.is_acquired() && !w2.is_acquired());

    let q = queue(&eps, prefix).await?;
    for k in &q {
        ensure!(
            k.key_str() == format!("/locks/job/{}", lease_hex(k.lease)),
            "key {} is not <name>/<lease hex> (lease {})",
            k.key_str(),
            k.lease
        );
        ensure!(
            k.value.is_empty(),
            "{} has value {:?}",
            k.key_str(),
            k.value
        );
        ensure!(k.version == 1 && k.mod_revision == k.create_revision);
        ensure!(lease_of_key(&k.key_str()) == Some(k.lease));
    }
    ensure!(
        q[0].key_str() == held,
        "holder {held} is not the lowest: {q:?}"
    );
    ensure!(q[0].create_revision < q[1].create_revision);
    ensure!(q[1].create_revision < q[2].create_revision);
    let ttls = [30, 2, 30];
    for (k, ttl) in q.iter().zip(ttls) {
        let (granted, left) = lease_ttl(&eps, k.lease)
            .await?
            .context("a queued key's lease is gone")?;
        ensure!(
            granted == ttl && left <= ttl && left >= 0,
            "{granted} {left}"
        );
    }

    // SIGTERM: the holder deletes its key, exits 0, and leaves its lease to expire.
    let t = Instant::now();
    let status = holder.release().await?;
    ensure!(status.success(), "holder exited {status}");
    let next = w1.wait_acquired(WAIT).await?;
    println!("release -> next waiter acquired in {:?}", t.elapsed());
    ensure!(
        next == q[1].key_str(),
        "{next} acquired, expected {:?}",
        q[1]
    );
    ensure!(!holder.is_acquired() && !w2.is_acquired());
    let now = queue(&eps, prefix).await?;
    ensure!(
        now.len() == 2 && now[0] == q[1] && now[1] == q[2],
        "{now:?}"
    );
    let (granted, left) = lease_ttl(&eps, q[0].lease)
        .await?
        .context("etcdctl revoked its lease on SIGTERM")?;
    ensure!(granted == 30 && left > 0);
    ensure!(revoke_lease(&eps, q[0].lease).await?);
    ensure!(lease_ttl(&eps, q[0].lease).await?.is_none());
    ensure!(!revoke_lease(&eps, q[0].lease).await?);

    // SIGKILL: the key stays until its 2 s lease expires, then the last waiter acquires.
    w1.crash().await?;
    let crashed = Instant::now();
    let right_after = keys(&eps, prefix).await?;
    if crashed.elapsed() < Duration::from_millis(1000) {
        ensure!(
            right_after.iter().any(|k| k.key_str() == next),
            "a crashed holder's key went at once"
        );
    }
    wait_gone(&eps, prefix, &next).await?;
    let expired_after = crashed.elapsed();
    let last = w2.wait_acquired(WAIT).await?;
    println!(
        "crash (ttl 2) -> key gone after {expired_after:?}, next acquired after {:?}",
        crashed.elapsed()
    );
    ensure!(
        expired_after >= Duration::from_millis(500),
        "{expired_after:?}"
    );
    ensure!(last == q[2].key_str());
    ensure!(lease_ttl(&eps, q[1].lease).await?.is_none());
    // SIGINT is etcdctl's other unlock signal.
    let status = w2.interrupt().await?;
    ensure!(status.success(), "{status}");
    wait_count(&eps, prefix, 0).await?;

    // A waiter that is signalled leaves the queue (exit 1, "context canceled").
    let mut a = EtcdctlLock::start(&eps, "/locks/other", 30).await?;
    a.wait_acquired(WAIT).await?;
    let mut b = EtcdctlLock::start(&eps, "/locks/other", 30).await?;
    wait_count(&eps, "/locks/other/", 2).await?;
    let status = b.release().await?;
    ensure!(
        !status.success() && b.stderr().contains("context canceled"),
        "{status} {}",
        b.stderr()
    );
    ensure!(keys(&eps, "/locks/other/").await?.len() == 1);
    a.release().await?;
    ensure!(keys(&eps, "/locks/other/").await?.is_empty());

    // --- etcdctl elect
    let t = Instant::now();
    let mut alice = EtcdctlElect::start(&eps, "/elect/job", "alice").await?;
    let leader = alice.wait_acquired(WAIT).await?;
    println!("etcdctl elect leader in {:?}: {leader}", t.elapsed());
    let mut bob = EtcdctlElect::start(&eps, "/elect/job", "bob").await?;
    wait_count(&eps, "/elect/job/", 2).await?;
    let q = queue(&eps, "/elect/job/").await?;
    ensure!(q[0].key_str() == leader && q[0].value == b"alice");
    ensure!(
        q[1].value == b"bob" && q[1].key_str() == format!("/elect/job/{}", lease_hex(q[1].lease))
    );
    ensure!(lease_ttl(&eps, q[0].lease).await?.map(|t| t.0) == Some(60));
    ensure!(alice.is_acquired() && !bob.is_acquired());
    ensure!(alice.release().await?.success());
    ensure!(bob.wait_acquired(WAIT).await? == q[1].key_str());
    ensure!(bob.release().await?.success());
    ensure!(keys(&eps, "/elect/job/").await?.is_empty());
    for k in &q {
        revoke_lease(&eps, k.lease).await?;
    }

    // --- single-key lease locks with a binary owner id
    let key = "/svc/locks/job";
    let owner: Vec<u8> = vec![0, 0xff, b'"', b'\\', b'\n', 0x80, b'a', b' ', 7, 0x7f];
    let t = Instant::now();
    let mut mine = lease_key_lock(&eps, key, &owner, 2)
        .await?
        .context("free key refused")?;
    println!("lease key lock taken in {:?}", t.elapsed());
    ensure!(lease_key_lock(&eps, key, b"other", 2).await?.is_none());
    let ks = keys(&eps, key).await?;
    ensure!(ks.len() == 1, "{ks:?}");
    ensure!(ks[0].value == owner, "{:?}", ks[0].value);
    ensure!(ks[0].lease == mine.lease() && ks[0].version == 1);
    ensure!(ks[0].create_revision == mine.create_revision());
    ensure!(mine.keepalive_running());
    // Kept alive past its TTL (an observation window, not a synchronisation).
    let watch_from = Instant::now();
    while watch_from.elapsed() < Duration::from_secs(3) {
        ensure!(keys(&eps, key).await?.len() == 1, "lost while kept alive");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lease = mine.lease();
    ensure!(mine.release().await?);
    ensure!(keys(&eps, key).await?.is_empty());
    ensure!(lease_ttl(&eps, lease).await?.is_none());

    // Crash: the key goes when the lease expires.
    let mut crashed = lease_key_lock(&eps, key, b"crasher", 2)
        .await?
        .context("free key refused after release")?;
    crashed.crash().await?;
    let t = Instant::now();
    wait_gone(&eps, key, key).await?;
    println!(
        "lease key lock crash (ttl 2) -> key gone after {:?}",
        t.elapsed()
    );

    // Release only deletes its own key.
    let first = lease_key_lock(&eps, key, b"first", 5)
        .await?
        .context("free key refused after expiry")?;
    ensure!(del(&eps, key).await? == 1);
    let second = lease_key_lock(&eps, key, b"second", 5)
        .await?
        .context("free key refused after del")?;
    ensure!(!first.release().await?);
    let ks = keys(&eps, key).await?;
    ensure!(ks.len() == 1 && ks[0].value == b"second");
    ensure!(second.release().await?);

    // --- put / del / compact
    let r1 = put(&eps, "/plain/a", b"one").await?;
    let r2 = put(&eps, "/plain/a", b"t\0wo").await?;
    ensure!(r2 > r1);
    let ks = keys(&eps, "/plain/").await?;
    ensure!(ks.len() == 1 && ks[0].value == b"t\0wo" && ks[0].version == 2 && ks[0].lease == 0);
    ensure!(ks[0].create_revision == r1 && ks[0].mod_revision == r2);
    compact(&eps, r2).await?;
    ensure!(compact(&eps, r2 + 1000).await.is_err());
    ensure!(del(&eps, "/plain/a").await? == 1);
    ensure!(del(&eps, "/plain/a").await? == 0);
    ensure!(
        keys(&eps, "/").await?.is_empty(),
        "{:?}",
        keys(&eps, "/").await?
    );

    // etcdctl lock against a dead server prints nothing and retries forever: the bounded wait
    // is what ends it. The server restarts on its data.
    let kept = put(&eps, "/kept", b"v").await?;
    let mut server = server;
    server.kill();
    ensure!(server.pid().is_none());
    let t = Instant::now();
    let mut orphan = EtcdctlLock::start(&eps, "/locks/job", 2).await?;
    let err = orphan
        .wait_acquired(Duration::from_secs(3))
        .await
        .err()
        .context("acquired without a server")?;
    ensure!(format!("{err:#}").contains("within 3s"), "{err:#}");
    ensure!(!orphan.is_acquired());
    orphan.crash().await?;
    println!(
        "lock on a dead server failed after {:?}: {err:#}",
        t.elapsed()
    );
    let t = Instant::now();
    server.restart().await?;
    println!("member restarted in {:?}", t.elapsed());
    let ks = keys(&eps, "/").await?;
    ensure!(ks.len() == 1 && ks[0].key == b"/kept" && ks[0].mod_revision == kept);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_member_cluster_survives_a_killed_member() -> Result<()> {
    let t = Instant::now();
    let mut cluster = EtcdCluster::start(3).await?;
    println!("3-member cluster ready in {:?}", t.elapsed());
    let eps = cluster.endpoints();
    ensure!(eps.len() == 3 && cluster.members() == 3);
    let leader = cluster.leader().await?;

    let mut lock = EtcdctlLock::start(&eps, "/locks/cluster", 5).await?;
    let key = lock.wait_acquired(WAIT).await?;
    ensure!(lock.release().await?.success());
    ensure!(
        keys(&eps, "/locks/cluster/").await?.is_empty(),
        "{key} left"
    );

    // Kill the leader: the other two elect a new one and still take locks.
    let t = Instant::now();
    cluster.kill(leader);
    ensure!(cluster.pid(leader).is_none());
    let new_leader = cluster.leader().await?;
    println!(
        "leader {leader} killed -> member {new_leader} leads after {:?}",
        t.elapsed()
    );
    ensure!(new_leader != leader);
    let alive: Vec<String> = (0..3)
        .filter(|&i| i != leader)
        .map(|i| cluster.endpoint(i))
        .collect();
    let mut lock = EtcdctlLock::start(&alive, "/locks/cluster", 5).await?;
    let key = lock.wait_acquired(WAIT).await?;
    let written = put(&alive, "/while/down", b"x").await?;

    // Restart it: it catches up (the key and the lock taken meanwhile are there).
    let t = Instant::now();
    cluster.restart(leader).await?;
    println!("member {leader} restarted in {:?}", t.elapsed());
    let only_it = vec![cluster.endpoint(leader)];
    eventually("restarted member caught up", WAIT, || async {
        let ks = keys(&only_it, "/").await?;
        Ok(ks
            .iter()
            .any(|k| k.key == b"/while/down" && k.mod_revision == written)
            && ks.iter().any(|k| k.key_str() == key))
    })
    .await?;
    ensure!(lock.release().await?.success());

    // A lock through the restarted member alone, and through all three.
    let mut a = EtcdctlLock::start(&only_it, "/locks/cluster", 5).await?;
    a.wait_acquired(WAIT).await?;
    let mut b = EtcdctlLock::start(&eps, "/locks/cluster", 5).await?;
    wait_count(&eps, "/locks/cluster/", 2).await?;
    ensure!(!b.is_acquired());
    a.release().await?;
    b.wait_acquired(WAIT).await?;
    b.release().await?;
    ensure!(etcd::keys(&eps, "/locks/").await?.is_empty());
    Ok(())
}
