//! Smoke test of the real Python lock clients (`lockscope_tests::support::python`): kazoo on a
//! 3-node ZooKeeper ensemble, redis-py, python-redis-lock and pottery on real Redis servers. Each
//! test reads with a plain client what the library really left (node names, data, owners,
//! watches; keys, values, TTLs, blocked connections) and checks it against
//! `shared/LOCK_LAYOUTS.md`, then crashes a holder with SIGKILL. Facts are awaited with bounded
//! polling, never with fixed sleeps. Run with `--nocapture` to see the raw layouts and timings.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use lockscope_tests::harness::eventually_every;
use lockscope_tests::support::python::{
    python_and_script, KazooRecipe, Outcome, PyClient, PyLockSpec,
};
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::zk::{four_letter, ZkEnsemble};
use lockscope_tests::unique_root;
use redis::aio::MultiplexedConnection;
use zookeeper_client as zkc;

const WAIT: Duration = Duration::from_secs(30);

/// Waits until `check` answers `Some`: the harness's [`eventually_every`], trying at least
/// every 20 ms.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    eventually_every(timeout, Duration::from_millis(20), what, async || {
        check().await
    })
    .await
}

/// Builds the Python environment once before the clock of any test starts.
async fn prepare_python() -> Result<()> {
    let started = Instant::now();
    tokio::task::spawn_blocking(python_and_script).await??;
    println!("Python environment ready in {:?}", started.elapsed());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper

fn is_hex32(text: &str) -> bool {
    text.len() == 32
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `<uuid hex><marker><10 digits>` → the sequence number.
fn kazoo_sequence(name: &str, marker: &str) -> Option<u64> {
    let (prefix, digits) = name.split_once(marker)?;
    (is_hex32(prefix) && digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

struct Observer {
    client: zkc::Client,
}

impl Observer {
    async fn connect(hosts: &str) -> Result<Observer> {
        let client = zkc::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_connection_timeout(Duration::from_secs(5))
            .connect(hosts)
            .await?;
        Ok(Observer { client })
    }

    /// Brings this observer's server up to the leader before a read: the clients write through
    /// other servers of the ensemble, and a follower may apply their writes a moment later.
    async fn sync(&self, path: &str) -> Result<()> {
        match self.client.sync(path).await {
            Ok(()) | Err(zkc::Error::NoNode) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("sync {path}")),
        }
    }

    /// Children sorted by name; empty when the node does not exist.
    async fn children(&self, path: &str) -> Result<Vec<String>> {
        self.sync(path).await?;
        match self.client.list_children(path).await {
            Ok(mut children) => {
                children.sort();
                Ok(children)
            }
            Err(zkc::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(e).with_context(|| format!("list {path}")),
        }
    }

    /// Children sorted by their 10-digit suffix.
    async fn queue(&self, path: &str) -> Result<Vec<String>> {
        let mut children = self.children(path).await?;
        children.sort_by_key(|c| c[c.len().saturating_sub(10)..].to_string());
        Ok(children)
    }

    async fn data(&self, path: &str) -> Result<(String, zkc::Stat)> {
        self.sync(path).await?;
        let (data, stat) = self
            .client
            .get_data(path)
            .await
            .with_context(|| format!("get {path}"))?;
        Ok((String::from_utf8_lossy(&data).into_owned(), stat))
    }

    async fn exists(&self, path: &str) -> Result<bool> {
        self.sync(path).await?;
        Ok(self.client.check_stat(path).await?.is_some())
    }

    async fn wait_children(&self, path: &str, count: usize) -> Result<Vec<String>> {
        eventually(&format!("{count} children of {path}"), WAIT, || async {
            let queue = self.queue(path).await?;
            Ok((queue.len() == count).then_some(queue))
        })
        .await
    }
}

/// Data/exists watches on every member (`wchp`), merged: path → sessions.
async fn watches(zk: &ZkEnsemble) -> Result<BTreeMap<String, Vec<i64>>> {
    let mut all: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for i in 0..zk.members() {
        let text = four_letter(zk.client_addr(i), "wchp").await?;
        let mut current = None;
        for line in text.lines() {
            if let Some(session) = line.strip_prefix('\t') {
                if let (Some(path), Some(id)) = (
                    current.as_ref(),
                    lockscope_model::parse_session_hex(session),
                ) {
                    all.entry(String::clone(path)).or_default().push(id);
                }
            } else if line.starts_with('/') {
                current = Some(line.trim().to_string());
            }
        }
    }
    Ok(all)
}

async fn wait_watch(zk: &ZkEnsemble, path: &str, session: i64) -> Result<()> {
    eventually(
        &format!("a data watch of 0x{session:x} on {path}"),
        WAIT,
        || async {
            let w = watches(zk).await?;
            Ok(w.get(path)
                .is_some_and(|s| s.contains(&session))
                .then_some(()))
        },
    )
    .await
}

fn sid(client: &PyClient) -> Result<i64> {
    client
        .session_id()
        .context("kazoo client without session id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_locks_semaphore_and_crash_on_a_real_ensemble() -> Result<()> {
    let (python, zk) = tokio::join!(prepare_python(), ZkEnsemble::start(3));
    python?;
    let zk = zk?;
    let hosts = zk.connect_string();
    let observer = Observer::connect(&hosts).await?;

    // --- Lock: holder and one waiter.
    let path = unique_root("kazoo-lock");
    let started = Instant::now();
    let mut a = PyClient::kazoo_lock(&hosts, &path, "alice").await?;
    println!("kazoo client connected in {:?}", started.elapsed());
    let got = a.acquire().await?;
    let nodes = observer.queue(&path).await?;
    println!("kazoo Lock, one holder: {nodes:?}; ACQUIRED {got:?}");
    ensure!(nodes.len() == 1, "{nodes:?}");
    ensure!(got.node == Some(format!("{path}/{}", nodes[0])), "{got:?}");
    ensure!(
        kazoo_sequence(&nodes[0], "__lock__") == Some(0),
        "{nodes:?}"
    );
    let (data, stat) = observer.data(&format!("{path}/{}", nodes[0])).await?;
    ensure!(data == "alice", "holder data {data:?}");
    ensure!(
        stat.ephemeral_owner == sid(&a)?,
        "owner {:x}",
        stat.ephemeral_owner
    );
    // The path itself is a plain persistent node with no data (kazoo's ensure_path).
    let (root_data, root_stat) = observer.data(&path).await?;
    ensure!(root_data.is_empty() && root_stat.ephemeral_owner == 0);

    let mut b = PyClient::kazoo_lock(&hosts, &path, "bob").await?;
    b.start_acquire().await?;
    let nodes = observer.wait_children(&path, 2).await?;
    ensure!(
        kazoo_sequence(&nodes[1], "__lock__") == Some(1),
        "{nodes:?}"
    );
    let b_node = format!("{path}/{}", nodes[1]);
    let (data, stat) = observer.data(&b_node).await?;
    ensure!(data == "bob" && stat.ephemeral_owner == sid(&b)?);
    // kazoo's Lock records its node when its `create` returns, which may be after the observer
    // has seen the node: wait for the fact, bounded.
    eventually_every(
        WAIT,
        Duration::from_millis(20),
        "bob's kazoo Lock to name its node",
        async || Ok((b.info().await?["node"] == b_node.as_str()).then_some(())),
    )
    .await?;
    // The waiter watches its predecessor with a data watch (`get`), so `wchp` names it.
    let a_node = format!("{path}/{}", nodes[0]);
    wait_watch(&zk, &a_node, sid(&b)?).await?;
    a.release().await?;
    let got = b.wait_acquired(WAIT).await?;
    ensure!(got.node.as_deref() == Some(b_node.as_str()), "{got:?}");
    // The observer may read from another server of the ensemble, which applies the deletes
    // a moment after the clients' own servers: wait for them, bounded.
    eventually("the first holder's node to go", WAIT, || async {
        Ok((!observer.exists(&a_node).await?).then_some(()))
    })
    .await?;
    b.release().await?;
    eventually("the lock's queue to empty", WAIT, || async {
        Ok(observer.queue(&path).await?.is_empty().then_some(()))
    })
    .await?;

    // --- ReadLock / WriteLock: two readers hold, a writer waits, a later reader waits behind it.
    let path = unique_root("kazoo-rw");
    let mut r1 = PyClient::kazoo_read_lock(&hosts, &path, "r1").await?;
    let mut r2 = PyClient::kazoo_read_lock(&hosts, &path, "r2").await?;
    r1.acquire().await?;
    r2.acquire().await?;
    let mut w = PyClient::kazoo_write_lock(&hosts, &path, "w").await?;
    w.start_acquire().await?;
    observer.wait_children(&path, 3).await?;
    let mut r3 = PyClient::kazoo_read_lock(&hosts, &path, "r3").await?;
    r3.start_acquire().await?;
    let nodes = observer.wait_children(&path, 4).await?;
    println!("kazoo ReadLock x2 holding, WriteLock and ReadLock waiting: {nodes:?}");
    let markers: Vec<&str> = nodes
        .iter()
        .map(|n| if n.contains("__rlock__") { "R" } else { "W" })
        .collect();
    ensure!(markers == ["R", "R", "W", "R"], "{nodes:?}");
    for (i, (n, marker)) in nodes
        .iter()
        .zip(["__rlock__", "__rlock__", "__lock__", "__rlock__"])
        .enumerate()
    {
        ensure!(kazoo_sequence(n, marker) == Some(i as u64), "{n}");
    }
    // The writer watches the last reader before it; the late reader watches the writer.
    wait_watch(&zk, &format!("{path}/{}", nodes[1]), sid(&w)?).await?;
    wait_watch(&zk, &format!("{path}/{}", nodes[2]), sid(&r3)?).await?;
    r1.release().await?;
    r2.release().await?;
    w.wait_acquired(WAIT).await?;
    w.release().await?;
    r3.wait_acquired(WAIT).await?;

    // A plain kazoo Lock only counts `__lock__` nodes as contenders: it does not wait for a
    // ReadLock holder (a WriteLock does).
    let mut l = PyClient::kazoo_lock(&hosts, &path, "plain").await?;
    let got = l.try_acquire().await?;
    println!("kazoo Lock try while a ReadLock holds: {got:?}");
    ensure!(got.is_some(), "a kazoo Lock waited for a ReadLock holder");
    let mut w2 = PyClient::kazoo_write_lock(&hosts, &path, "w2").await?;
    ensure!(
        w2.try_acquire().await?.is_none(),
        "WriteLock got past a reader"
    );
    for c in [r3, l, w2, w, r1, r2] {
        c.exit().await?;
    }

    // --- Semaphore(max_leases=2): two holders, two contenders queued on the sibling lock.
    let path = unique_root("kazoo-sem");
    let lock_path = format!("{path}-__lock__");
    let mut holders = Vec::new();
    for id in ["s1", "s2"] {
        let mut s = PyClient::kazoo_semaphore(&hosts, &path, id, 2).await?;
        let got = s.acquire().await?;
        holders.push((s, got));
    }
    let (data, stat) = observer.data(&path).await?;
    ensure!(
        data == "2" && stat.ephemeral_owner == 0,
        "semaphore data {data:?}"
    );
    let leases = observer.children(&path).await?;
    println!("kazoo Semaphore {path}: data {data:?}, lease nodes {leases:?}");
    ensure!(
        leases.len() == 2 && leases.iter().all(|l| is_hex32(l)),
        "{leases:?}"
    );
    for (s, got) in &holders {
        let node = got.node.clone().context("no lease node")?;
        ensure!(
            leases.iter().any(|l| node == format!("{path}/{l}")),
            "{node}"
        );
        let (data, stat) = observer.data(&node).await?;
        ensure!(
            stat.ephemeral_owner == sid(s)?,
            "{node} not owned by its holder"
        );
        ensure!(data == "s1" || data == "s2", "{node} data {data:?}");
    }
    // The internal lock is taken only while a contender looks for a lease: idle, it is empty.
    ensure!(observer.exists(&lock_path).await?, "{lock_path} missing");
    ensure!(observer.children(&lock_path).await?.is_empty());

    let mut s3 = PyClient::kazoo_semaphore(&hosts, &path, "s3", 2).await?;
    s3.start_acquire().await?;
    observer.wait_children(&lock_path, 1).await?;
    let mut s4 = PyClient::kazoo_semaphore(&hosts, &path, "s4", 2).await?;
    s4.start_acquire().await?;
    let queue = observer.wait_children(&lock_path, 2).await?;
    println!("kazoo Semaphore contenders in {lock_path}: {queue:?}");
    // kazoo passes the Semaphore's identifier, already encoded, to `Lock(identifier)`, which
    // runs `str()` on it: the queue nodes' data is Python's bytes repr, `b'<identifier>'`.
    for (n, (id, client)) in queue.iter().zip([("s3", &s3), ("s4", &s4)]) {
        ensure!(kazoo_sequence(n, "__lock__").is_some(), "{n}");
        let (data, stat) = observer.data(&format!("{lock_path}/{n}")).await?;
        ensure!(data == format!("b'{id}'"), "{n}: data {data:?}");
        ensure!(stat.ephemeral_owner == sid(client)?, "{n}: owner");
    }
    // s4 waits for s3's node (a data watch); s3 waits on the lease pool with a child watch,
    // which `wchp` does not list.
    wait_watch(&zk, &format!("{lock_path}/{}", queue[0]), sid(&s4)?).await?;
    ensure!(observer.children(&path).await?.len() == 2);

    let (mut s1, _) = holders.remove(0);
    s1.release().await?;
    let got = s3.wait_acquired(WAIT).await?;
    let queue = observer.wait_children(&lock_path, 1).await?;
    ensure!(queue[0].contains("__lock__") && observer.children(&path).await?.len() == 2);
    let (data, _) = observer
        .data(got.node.as_deref().context("no node")?)
        .await?;
    ensure!(data == "s3", "s3's lease data {data:?}");

    // A client with another max_leases refuses the pool.
    let mut odd = PyClient::kazoo_semaphore(&hosts, &path, "odd", 3).await?;
    let refused = odd.acquire().await;
    let refused = refused.err().map(|e| format!("{e:#}"));
    println!("kazoo Semaphore with max_leases=3 on a pool of 2: {refused:?}");
    ensure!(
        refused.is_some_and(|e| e.contains("Inconsistent max leases")),
        "a mismatched max_leases was accepted"
    );

    // A waiter's clean exit removes its queue node at once.
    s4.exit().await?;
    observer.wait_children(&lock_path, 0).await?;
    drop((s1, s3, odd, holders));

    // --- Crash: SIGKILL a holder with a 2 s session; its node stays until the session expires.
    let path = unique_root("kazoo-crash");
    let spec = |id: &str| PyLockSpec::Kazoo {
        recipe: KazooRecipe::Lock,
        hosts: hosts.clone(),
        path: path.clone(),
        identifier: id.into(),
        session_timeout: Duration::from_secs(2),
        security: Default::default(),
    };
    let mut holder = PyClient::spawn(spec("holder")).await?;
    let mut waiter = PyClient::spawn(spec("waiter")).await?;
    let held = holder.acquire().await?;
    waiter.start_acquire().await?;
    observer.wait_children(&path, 2).await?;
    let held_node = held.node.context("no node")?;
    holder.crash();
    let crashed = Instant::now();
    ensure!(!std::path::Path::new(&format!("/proc/{}", holder.pid())).exists());
    let (_, stat) = observer.data(&held_node).await?;
    ensure!(stat.ephemeral_owner == sid(&holder)?, "node changed owner");
    eventually("the crashed holder's node to go", WAIT, || async {
        Ok((!observer.exists(&held_node).await?).then_some(()))
    })
    .await?;
    let gone = crashed.elapsed();
    waiter.wait_acquired(WAIT).await?;
    println!(
        "kazoo holder SIGKILLed (2 s session): node gone after {gone:?}, waiter acquired after {:?}",
        crashed.elapsed()
    );
    ensure!(
        gone >= Duration::from_millis(1500),
        "node went after {gone:?}"
    );

    // Cancel: a blocked kazoo acquire ends with CANCELLED and its node goes.
    let mut late = PyClient::spawn(spec("late")).await?;
    late.start_acquire().await?;
    observer.wait_children(&path, 2).await?;
    late.cancel().await?;
    ensure!(late.wait_outcome(WAIT).await? == Outcome::Cancelled);
    observer.wait_children(&path, 1).await?;
    waiter.exit().await?;
    late.exit().await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Redis

async fn q<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, args: &[&str]) -> Result<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(conn).await.with_context(|| args.join(" "))
}

/// `(TYPE, value of a string or None, PTTL)`.
async fn key_state(
    conn: &mut MultiplexedConnection,
    key: &str,
) -> Result<(String, Option<String>, i64)> {
    let kind: String = q(conn, &["TYPE", key]).await?;
    let value = if kind == "string" {
        q(conn, &["GET", key]).await?
    } else {
        None
    };
    Ok((kind, value, q(conn, &["PTTL", key]).await?))
}

fn is_base64_24(text: &str) -> bool {
    text.len() == 24
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// The `CLIENT LIST` line of the connection with this id, if connected.
async fn client_line(conn: &mut MultiplexedConnection, id: i64) -> Result<Option<String>> {
    let list: String = q(conn, &["CLIENT", "LIST"]).await?;
    let prefix = format!("id={id} ");
    Ok(list
        .lines()
        .find(|l| l.starts_with(&prefix))
        .map(str::to_string))
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Waits until connection `id` is blocked in BLPOP (`cmd=blpop`, `b` in its flags).
async fn wait_blpop(conn: &MultiplexedConnection, id: i64) -> Result<String> {
    eventually(&format!("connection {id} blocked in BLPOP"), WAIT, || {
        let mut conn = conn.clone();
        async move {
            let line = client_line(&mut conn, id).await?;
            Ok(line.filter(|l| {
                field(l, "cmd") == Some("blpop")
                    && field(l, "flags").is_some_and(|f| f.contains('b'))
            }))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_lock_and_redis_py_layouts_and_crash() -> Result<()> {
    let (python, server) = tokio::join!(
        prepare_python(),
        RedisServer::start_with(&["--notify-keyspace-events", "KEA"])
    );
    python?;
    let server = server?;
    let url = server.url();
    let mut conn = server.connection().await?;

    // --- python-redis-lock, default expire=None: `lock:<name>` = 24-char base64 id, no TTL.
    let name = unique_root("prl").trim_start_matches('/').to_string();
    let (key, signal) = (format!("lock:{name}"), format!("lock-signal:{name}"));
    let mut a = PyClient::python_redis_lock(&url, &name, None).await?;
    let got = a.acquire().await?;
    let (kind, value, pttl) = key_state(&mut conn, &key).await?;
    println!("python-redis-lock {key}: {kind} {value:?} PTTL {pttl}; ACQUIRED {got:?}");
    let value = value.context("no value")?;
    ensure!(kind == "string" && pttl == -1, "{kind} {pttl}");
    ensure!(is_base64_24(&value), "id {value:?}");
    ensure!(got.key.as_deref() == Some(key.as_str()) && got.token == Some(value.clone()));

    // A waiter blocks in BLPOP lock-signal:<name> on the connection it reported.
    let mut b = PyClient::python_redis_lock(&url, &name, None).await?;
    b.start_acquire().await?;
    let b_id = *b.client_ids().first().context("no client id")?;
    let line = wait_blpop(&conn, b_id).await?;
    println!("python-redis-lock waiter in CLIENT LIST: {line}");
    ensure!(
        !line.contains(&signal),
        "the key shows in CLIENT LIST: {line}"
    );

    // Release: DEL lock:<name>, LPUSH lock-signal:<name> (the waiter's BLPOP takes it).
    let mut pubsub = redis::Client::open(url.as_str())?
        .get_async_pubsub()
        .await?;
    pubsub.psubscribe(format!("__keyspace@0__:*{name}")).await?;
    a.release().await?;
    let got_b = b.wait_acquired(WAIT).await?;
    let mut events = Vec::new();
    {
        use futures::StreamExt;
        let mut stream = pubsub.on_message();
        while !events
            .iter()
            .any(|(k, e): &(String, String)| k == &key && e == "set")
        {
            let msg = tokio::time::timeout(WAIT, stream.next())
                .await
                .context("keyspace events")?
                .context("pubsub closed")?;
            let channel: String = msg.get_channel_name().to_string();
            let event: String = msg.get_payload()?;
            events.push((
                channel.trim_start_matches("__keyspace@0__:").to_string(),
                event,
            ));
        }
    }
    println!("keyspace events from release to the waiter's acquire: {events:?}");
    for expected in [(&key, "del"), (&signal, "lpush"), (&key, "set")] {
        ensure!(
            events
                .iter()
                .any(|(k, e)| k == expected.0 && e == expected.1),
            "no {expected:?} in {events:?}"
        );
    }
    let (_, value, pttl) = key_state(&mut conn, &key).await?;
    ensure!(value == got_b.token && pttl == -1);

    // Release with nobody waiting leaves the signal list with one element for ~1 s.
    b.release().await?;
    let (kind, _, pttl) = key_state(&mut conn, &signal).await?;
    let items: Vec<String> = q(&mut conn, &["LRANGE", &signal, "0", "-1"]).await?;
    println!("{signal} after an unwaited release: {kind} {items:?} PTTL {pttl}");
    ensure!(kind == "list" && items == ["1"] && pttl > 0 && pttl <= 1000);
    ensure!(key_state(&mut conn, &key).await?.0 == "none");

    // expire=30: SET NX EX 30.
    let name30 = format!("{name}-30");
    let mut c = PyClient::python_redis_lock(&url, &name30, Some(30)).await?;
    c.acquire().await?;
    let (_, _, pttl) = key_state(&mut conn, &format!("lock:{name30}")).await?;
    ensure!(pttl > 25_000 && pttl <= 30_000, "PTTL {pttl}");
    c.exit().await?;
    // A clean exit does not release: the key stays until its TTL.
    ensure!(key_state(&mut conn, &format!("lock:{name30}")).await?.0 == "string");

    // Crash: a SIGKILLed holder with no expire leaves an immortal lock; the waiter stays
    // blocked until an operator deletes the key and LPUSHes the signal list.
    a.acquire().await?;
    b.start_acquire().await?;
    wait_blpop(&conn, b_id).await?;
    a.crash();
    let (kind, value, pttl) = key_state(&mut conn, &key).await?;
    ensure!(kind == "string" && pttl == -1 && value.is_some());
    let a_id = *a.client_ids().first().context("no client id")?;
    eventually("the crashed holder's connection to go", WAIT, || async {
        let mut conn = conn.clone();
        Ok(client_line(&mut conn, a_id).await?.is_none().then_some(()))
    })
    .await?;
    wait_blpop(&conn, b_id).await?;
    let _: i64 = q(&mut conn, &["DEL", &key]).await?;
    let _: i64 = q(&mut conn, &["LPUSH", &signal, "1"]).await?;
    b.wait_acquired(WAIT).await?;
    b.release().await?;

    // --- redis-py Lock: `<name>` (no prefix) = uuid1().hex, PX timeout; waiters poll.
    let name = unique_root("rpy").trim_start_matches('/').to_string();
    let mut r1 = PyClient::redis_py_lock(&url, &name, Some(30_000)).await?;
    let got = r1.acquire().await?;
    let (kind, value, pttl) = key_state(&mut conn, &name).await?;
    println!("redis-py Lock {name}: {kind} {value:?} PTTL {pttl}; ACQUIRED {got:?}");
    let token = value.context("no token")?;
    ensure!(
        kind == "string" && pttl > 25_000 && pttl <= 30_000,
        "{kind} {pttl}"
    );
    ensure!(
        is_hex32(&token) && &token[12..13] == "1",
        "token {token:?} is not uuid1().hex"
    );
    ensure!(got.token.as_deref() == Some(token.as_str()));
    let mut r2 = PyClient::redis_py_lock(&url, &name, Some(30_000)).await?;
    ensure!(r2.try_acquire().await?.is_none());
    r2.start_acquire_for(Duration::from_millis(300)).await?;
    ensure!(r2.wait_outcome(WAIT).await? == Outcome::TimedOut);
    r2.start_acquire().await?;
    // The main thread answers while the worker is blocked.
    r2.ping().await?;
    ensure!(r2.info().await?["key"] == name.as_str());
    let r2_id = *r2.client_ids().first().context("no client id")?;
    let line = client_line(&mut conn, r2_id)
        .await?
        .context("redis-py waiter not connected")?;
    println!("redis-py waiter in CLIENT LIST (it polls, never blocks): {line}");
    ensure!(!field(&line, "flags").unwrap_or("").contains('b'), "{line}");
    r1.hold_then_release(Duration::from_millis(200)).await?;
    r1.wait_released(WAIT).await?;
    let got = r2.wait_acquired(WAIT).await?;
    ensure!(got.token != Some(token));
    r2.release().await?;
    // timeout=None: no TTL at all.
    let mut r3 = PyClient::redis_py_lock(&url, &name, None).await?;
    r3.acquire().await?;
    ensure!(key_state(&mut conn, &name).await?.2 == -1);
    r3.crash();
    ensure!(
        key_state(&mut conn, &name).await?.2 == -1,
        "crashed redis-py lock changed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pottery_redlock_on_three_masters() -> Result<()> {
    let (python, m1, m2, m3) = tokio::join!(
        prepare_python(),
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start()
    );
    python?;
    let masters = [m1?, m2?, m3?];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let mut conns = Vec::new();
    for m in &masters {
        conns.push(m.connection().await?);
    }
    let name = unique_root("pottery").trim_start_matches('/').to_string();
    let key = format!("redlock:{name}");

    let mut a = PyClient::pottery_redlock(&urls, &name, 10_000).await?;
    ensure!(a.client_ids().len() == 3);
    let got = a.acquire().await?;
    let token = got.token.clone().context("no token")?;
    println!("pottery Redlock {name}: ACQUIRED {got:?}");
    ensure!(got.key.as_deref() == Some(key.as_str()), "{got:?}");
    // str(uuid.uuid4()): 36 characters, hyphens at 8, 13, 18, 23, version digit 4.
    let hyphens: Vec<usize> = token.match_indices('-').map(|(i, _)| i).collect();
    ensure!(token.len() == 36 && hyphens == [8, 13, 18, 23] && &token[14..15] == "4");
    // Redlock holds with a majority: pottery counts the lock acquired once 2 of 3 masters
    // took the key (on a loaded machine the third may have timed out).
    let mut holding = Vec::new();
    for (i, conn) in conns.iter_mut().enumerate() {
        let (kind, value, pttl) = key_state(conn, &key).await?;
        println!("  master {i}: {key} {kind} {value:?} PTTL {pttl}");
        if kind == "string" {
            ensure!(
                value.as_deref() == Some(token.as_str()),
                "master {i}: {value:?}"
            );
            ensure!(pttl > 8_000 && pttl <= 10_000, "PTTL {pttl}");
            holding.push(i);
        } else {
            ensure!(kind == "none", "master {i}: {kind}");
        }
        // No key under the bare name.
        ensure!(key_state(conn, &name).await?.0 == "none");
    }
    ensure!(holding.len() >= 2, "no majority: {holding:?}");

    // A second client fails and leaves the holder's keys alone.
    let mut b = PyClient::pottery_redlock(&urls, &name, 10_000).await?;
    ensure!(b.try_acquire().await?.is_none());
    for &i in &holding {
        let value = key_state(&mut conns[i], &key).await?.1;
        ensure!(
            value.as_deref() == Some(token.as_str()),
            "master {i}: {value:?}"
        );
    }
    b.start_acquire().await?;
    a.release().await?;
    let got_b = b.wait_acquired(WAIT).await?;
    ensure!(got_b.token.is_some() && got_b.token != Some(token));
    b.release().await?;
    // pottery's release answers once a majority of masters deleted the key (Redlock's promise);
    // a slow master's delete may land after it, or its copy runs out with its 10 s TTL.
    let mut gone = 0;
    for conn in conns.iter_mut() {
        gone += usize::from(key_state(conn, &key).await?.0 == "none");
    }
    ensure!(
        gone >= 2,
        "the key is left on a majority of masters after release"
    );
    eventually_every(
        Duration::from_secs(15),
        Duration::from_millis(50),
        "the key gone from every master",
        async || {
            for conn in conns.iter_mut() {
                if key_state(conn, &key).await?.0 != "none" {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;

    // Quorum: with the key taken on one master, a client still acquires on the other two.
    let _: () = q(&mut conns[0], &["SET", &key, "foreign", "PX", "10000"]).await?;
    let got = a.acquire().await?;
    let token = got.token.context("no token")?;
    let mut holding = 0;
    for conn in conns.iter_mut() {
        if key_state(conn, &key).await?.1.as_deref() == Some(token.as_str()) {
            holding += 1;
        }
    }
    ensure!(holding == 2, "token on {holding} masters");

    // Crash: the keys stay until their PX runs out.
    a.crash();
    let (_, value, pttl) = key_state(&mut conns[1], &key).await?;
    ensure!(value.as_deref() == Some(token.as_str()) && pttl > 0);
    b.exit().await?;
    Ok(())
}
