//! Smoke test of the real-server test support itself: a 3-node ZooKeeper ensemble (four-letter
//! words and AdminServer on every member, a follower killed and restarted), real Curator clients
//! and every hand-written seed recipe with two contenders. Run with `--nocapture` to see real
//! samples of `cons`, `dump`, `wchp`, `wchs`, `wchc` and `mntr` while a Curator mutex has a waiter
//! and a lockscope-like persistent recursive watch is registered.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use lockscope_tests::harness::eventually_every;
use lockscope_tests::recipes::{self, SeedClient, SeedRecipe};
use lockscope_tests::support::curator::{CuratorClient, CuratorRecipe};
use lockscope_tests::support::zk::{four_letter, ZkEnsemble};

const SESSION_MS: u64 = 4000;

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("/{prefix}-{}-{nanos}", std::process::id())
}

fn watch_count(mntr: &str) -> Option<u64> {
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_watch_count"))
        .and_then(|v| v.trim().parse().ok())
}

/// `wchs` ends with "Total watches:N".
fn wchs_total(wchs: &str) -> Option<u64> {
    wchs.lines()
        .find_map(|l| l.strip_prefix("Total watches:"))
        .and_then(|v| v.trim().parse().ok())
}

async fn print_words(zk: &ZkEnsemble, title: &str, words: &[&str]) -> Result<()> {
    let leader = zk.leader().await?;
    for i in 0..zk.members() {
        let role = if i == leader { "leader" } else { "follower" };
        for word in words {
            let text = four_letter(zk.client_addr(i), word).await?;
            println!("----- {title}: `{word}` on member {i} ({role}) -----\n{text}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_servers_start_in_parallel() -> Result<()> {
    let (a, b, c) = tokio::join!(
        ZkEnsemble::start(1),
        ZkEnsemble::start(1),
        ZkEnsemble::start(1)
    );
    let all = [a?, b?, c?];
    for zk in &all {
        ensure!(zk.members() == 1 && zk.leader().await? == 0);
        let srvr = four_letter(zk.client_addr(0), "srvr").await?;
        ensure!(srvr.contains("Mode: standalone"), "{srvr}");
    }
    let pids: Vec<u32> = all.iter().filter_map(|zk| zk.pid(0)).collect();
    ensure!(pids.len() == 3);
    drop(all);
    for pid in pids {
        ensure!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "JVM {pid} survived drop"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_curator_and_seed_recipes_on_real_servers() -> Result<()> {
    let started = Instant::now();
    let mut zk = ZkEnsemble::start(3).await?;
    println!(
        "ensemble up in {:?}: {}",
        started.elapsed(),
        zk.connect_string()
    );
    ensure!(zk.members() == 3);

    // Four-letter words and the AdminServer on every member.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .no_proxy()
        .build()?;
    for i in 0..zk.members() {
        for word in [
            "srvr", "mntr", "wchp", "wchs", "wchc", "cons", "dump", "ruok",
        ] {
            let text = four_letter(zk.client_addr(i), word).await?;
            ensure!(!text.is_empty(), "{word} on member {i} answered nothing");
            ensure!(
                !text.contains("is not executed because it is not in the whitelist"),
                "{word}: {text}"
            );
        }
        ensure!(four_letter(zk.client_addr(i), "ruok").await? == "imok");
        let url = format!("http://127.0.0.1:{}/commands/monitor", zk.admin_port(i));
        let body: serde_json::Value = http
            .get(&url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        ensure!(body["error"].is_null(), "{url}: {body}");
        ensure!(body.get("watch_count").is_some(), "{url}: {body}");
        ensure!(body.get("server_state").is_some(), "{url}: {body}");
    }
    let leader = zk.leader().await?;
    println!("leader is member {leader}");

    // A lockscope-like observer: one persistent recursive watch on the lock root.
    let root = unique("smoke");
    let observer = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    observer
        .client()
        .create(
            &root,
            b"",
            &zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await?;
    // Which member the observer talks to: its session shows up in that member's `cons`.
    let sid = format!("sid=0x{:x},", observer.session_id());
    let mut home = None;
    for i in 0..zk.members() {
        if four_letter(zk.client_addr(i), "cons").await?.contains(&sid) {
            home = Some(i);
        }
    }
    let home = home.context("observer session in no member's cons")?;
    let counts = |i: usize| {
        let addr = zk.client_addr(i);
        async move {
            let mntr =
                watch_count(&four_letter(addr, "mntr").await?).context("no zk_watch_count")?;
            let wchs = wchs_total(&four_letter(addr, "wchs").await?).context("no wchs total")?;
            anyhow::Ok((mntr, wchs))
        }
    };
    let before = counts(home).await?;
    let mut persistent = observer
        .client()
        .watch(&root, zookeeper_client::AddWatchMode::PersistentRecursive)
        .await?;
    let recursive = counts(home).await?;
    let wchp = four_letter(zk.client_addr(home), "wchp").await?;
    println!(
        "PERSISTENT_RECURSIVE watch on {root} (member {home}): (zk_watch_count, wchs total) {before:?} -> {recursive:?}; in wchp: {}",
        wchp.contains(&root)
    );
    ensure!(wchp.contains(&root), "{wchp}");
    ensure!(
        recursive == (before.0 + 2, before.1 + 1),
        "{before:?} -> {recursive:?}"
    );
    // A one-shot child watch: counted by zk_watch_count only.
    let plain_node = format!("{root}-plain");
    observer
        .client()
        .create(
            &plain_node,
            b"",
            &zookeeper_client::CreateMode::Ephemeral
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await?;
    let (_, child_watch) = observer
        .client()
        .list_and_watch_children(&plain_node)
        .await?;
    let child = counts(home).await?;
    println!("one-shot child watch: {recursive:?} -> {child:?}");
    ensure!(
        child == (recursive.0 + 1, recursive.1),
        "{recursive:?} -> {child:?}"
    );
    // A PERSISTENT (non-recursive) watch on a path nobody watches yet (the same connection
    // watching the same path twice counts once).
    let flat_node = format!("{root}-flat");
    let flat = observer
        .client()
        .watch(&flat_node, zookeeper_client::AddWatchMode::Persistent)
        .await?;
    let flat_counts = counts(home).await?;
    println!("PERSISTENT watch: {child:?} -> {flat_counts:?}");
    ensure!(
        flat_counts == (child.0 + 2, child.1 + 1),
        "{child:?} -> {flat_counts:?}"
    );
    // zookeeper-client sends RemoveWatches when the last local watcher of a path is dropped.
    drop(flat);
    drop(child_watch);
    observer.client().delete(&plain_node, None).await?;
    let mut last = None;
    eventually_every(
        Duration::from_secs(5),
        Duration::from_millis(50),
        "dropped watchers no longer counted",
        async || {
            let now = counts(home).await?;
            last = Some(now);
            Ok((now == recursive).then_some(()))
        },
    )
    .await
    .with_context(|| format!("dropped watchers still counted: {last:?}"))?;

    // Curator mutex: the second client waits until the first releases.
    let path = format!("{root}/curator-mutex");
    let connect = zk.connect_string();
    let mut first = CuratorClient::spawn(&connect, SESSION_MS, CuratorRecipe::Mutex, &path).await?;
    let mut second =
        CuratorClient::spawn(&connect, SESSION_MS, CuratorRecipe::Mutex, &path).await?;
    println!(
        "curator sessions 0x{:x} (pid {}), 0x{:x} (pid {})",
        first.session_id(),
        first.pid(),
        second.session_id(),
        second.pid()
    );
    ensure!(first.session_id() != second.session_id());
    first.start_acquire().await?;
    first.wait_acquired(Duration::from_secs(15)).await?;
    second.start_acquire().await?;
    ensure!(
        second.wait_acquired(Duration::from_secs(1)).await.is_err(),
        "second Curator client acquired while the first held the mutex"
    );
    let children = observer.client().list_children(&path).await?;
    ensure!(children.len() == 2, "{children:?}");
    println!("curator mutex children: {children:?}");
    // Persistent watch events for what the Curator clients created.
    let mut events = Vec::new();
    while let Ok(event) =
        tokio::time::timeout(Duration::from_millis(300), persistent.changed()).await
    {
        events.push(format!("{:?} {}", event.event_type, event.path));
    }
    println!("persistent recursive watch saw: {events:#?}");
    ensure!(
        events
            .iter()
            .any(|e| e.contains("NodeCreated") && e.contains("-lock-")),
        "{events:?}"
    );

    print_words(
        &zk,
        "Curator mutex with one holder and one waiter, plus one persistent recursive watch",
        &["cons", "dump", "wchp", "wchs", "wchc", "mntr"],
    )
    .await?;
    for i in 0..zk.members() {
        let url = format!(
            "http://127.0.0.1:{}/commands/watches_by_path",
            zk.admin_port(i)
        );
        let body: serde_json::Value = http.get(&url).send().await?.json().await?;
        println!("----- AdminServer watches_by_path on member {i} -----\n{body}");
    }
    let url = format!("http://127.0.0.1:{}/commands/dump", zk.admin_port(leader));
    let body: serde_json::Value = http.get(&url).send().await?.json().await?;
    println!("----- AdminServer dump on the leader -----\n{body}");

    first.release().await?;
    second.wait_acquired(Duration::from_secs(10)).await?;
    // A third client queues behind the holder and is SIGKILLed: its node goes when its session
    // expires on the server.
    let mut third = CuratorClient::spawn(&connect, 2000, CuratorRecipe::Mutex, &path).await?;
    third.start_acquire().await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let wait_children = async |what: &str, check: fn(usize) -> bool| {
        let mut last = Vec::new();
        eventually_every(
            deadline.saturating_duration_since(Instant::now()),
            Duration::from_millis(20),
            what,
            async || {
                last = observer.client().list_children(&path).await?;
                Ok(check(last.len()).then_some(()))
            },
        )
        .await
        .with_context(|| format!("children of {path}: {last:?}"))
    };
    wait_children("the third client queued", |n| n >= 2).await?;
    let third_pid = third.pid();
    let killed = Instant::now();
    third.kill();
    ensure!(
        !std::path::Path::new(&format!("/proc/{third_pid}")).exists(),
        "killed Curator JVM {third_pid} still exists"
    );
    wait_children("the killed client's node gone", |n| n <= 1).await?;
    println!(
        "killed Curator client (2 s session): its node went {:?} after SIGKILL",
        killed.elapsed()
    );
    // A client blocked in acquire() still quits cleanly: its session closes and its node goes
    // at once.
    let mut fourth =
        CuratorClient::spawn(&connect, SESSION_MS, CuratorRecipe::Mutex, &path).await?;
    fourth.start_acquire().await?;
    eventually_every(
        Duration::from_secs(10),
        Duration::from_millis(20),
        "the fourth client queued",
        async || {
            let n = observer.client().list_children(&path).await?.len();
            Ok((n >= 2).then_some(()))
        },
    )
    .await?;
    let quitting = Instant::now();
    fourth.quit().await?;
    let quit_took = quitting.elapsed();
    let children = observer.client().list_children(&path).await?;
    ensure!(
        children.len() == 1,
        "waiter's node left after quit: {children:?}"
    );
    println!("Curator client blocked in acquire() quit in {quit_took:?}");
    second.release().await?;
    first.quit().await?;
    second.quit().await?;
    let left = observer.client().list_children(&path).await?;
    ensure!(
        left.is_empty(),
        "nodes left after release and quit: {left:?}"
    );

    // Kill a follower and restart it.
    let follower = (0..zk.members())
        .find(|&i| i != leader)
        .context("no follower")?;
    let pid = zk.pid(follower).context("follower not running")?;
    zk.kill(follower);
    ensure!(zk.pid(follower).is_none());
    ensure!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "killed member's JVM {pid} still exists"
    );
    ensure!(four_letter(zk.client_addr(follower), "ruok").await.is_err());
    // The other two still have a quorum.
    ensure!(zk.leader().await? == leader);
    zk.restart(follower).await?;
    let srvr = four_letter(zk.client_addr(follower), "srvr").await?;
    ensure!(srvr.contains("Mode: follower"), "{srvr}");
    println!(
        "member {follower} restarted (was pid {pid}, now {:?})",
        zk.pid(follower)
    );

    // Every seed recipe with two contenders.
    let recipes = [
        ("plain", SeedRecipe::PlainEphemeral),
        (
            "queue",
            SeedRecipe::QueuePredecessor {
                prefix: "lock-".into(),
            },
        ),
        (
            "herd",
            SeedRecipe::QueueChildrenWatch {
                prefix: "temp".into(),
            },
        ),
        (
            "polling",
            SeedRecipe::QueuePolling {
                prefix: "lock-".into(),
                interval: Duration::from_millis(100),
            },
        ),
    ];
    for (name, recipe) in recipes {
        let lock = format!("{root}/seed-{name}");
        let a = SeedClient::connect(&connect, Duration::from_secs(6)).await?;
        let b = SeedClient::connect(&connect, Duration::from_secs(6)).await?;
        let held = recipes::lock(&a, &lock, &recipe).await?;
        let mut waiting = b.enqueue(&lock, &recipe).await?;
        if matches!(recipe, SeedRecipe::PlainEphemeral) {
            ensure!(held.node == lock && waiting.node == lock);
        } else {
            ensure!(
                held.node.starts_with(&lock) && waiting.node > held.node,
                "{} {}",
                held.node,
                waiting.node
            );
        }
        let early = tokio::time::timeout(Duration::from_millis(700), waiting.acquired(&b)).await;
        if early.is_ok() {
            bail!("{name}: second contender acquired while the first held");
        }
        let released = Instant::now();
        held.release(&a).await?;
        tokio::time::timeout(Duration::from_secs(10), waiting.acquired(&b))
            .await
            .with_context(|| format!("{name}: second contender never acquired"))??;
        println!(
            "seed {name}: second contender held {:?} after release",
            released.elapsed()
        );
        let (_, stat) = b.client().get_data(&waiting.node).await?;
        ensure!(
            stat.ephemeral_owner == b.session_id(),
            "{name}: owner {:x}",
            stat.ephemeral_owner
        );
        waiting.release(&b).await?;
        drop(a);
        drop(b);
    }
    Ok(())
}
