//! Failures on real servers: a killed holder process, ensemble members killed under churn, a
//! source that is down, and odd or hostile trees (ACLs, odd names, binary data, 10k children).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use lockscope::config::{section, Config};
use lockscope_model::session_hex;
use lockscope_model::wire::ReleaseCause;
use lockscope_tests::churn::{churn_progress, zk_churn};
use lockscope_tests::harness::{eventually_every, metric_value, zk_source, Lockscope};
use lockscope_tests::recipes::{SeedClient, SeedRecipe};
use lockscope_tests::support::curator::{CuratorClient, CuratorRecipe};
use lockscope_tests::support::zk::{fresh_locks, shown_locks, ZkEnsemble};
use lockscope_tests::unique_root;
use zookeeper_client as zkc;

const WAIT: Duration = Duration::from_secs(20);

/// Sends lockscope's reasoning on release causes (debug) to the test's captured output, which
/// is shown when the test fails; `RUST_LOG` overrides it.
fn trace() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("lockscope::aggregate=debug"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_test_writer()
        .try_init();
}

/// A session with the longest timeout the test ensembles allow (20 ticks of 500 ms): it expires
/// at least 2/3 of it after its last ping, which leaves lockscope's polls seconds to see it
/// gone from every member first — the fact the `session_expired` verdict rests on.
const DYING_SESSION_MS: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_expires_and_next_waiter_holds() -> Result<()> {
    trace();
    let zk = ZkEnsemble::start(3).await?;
    let root = unique_root("kill");
    let ls = Lockscope::watching("zk", &zk.connect_string(), &[&root]).await?;
    let path = format!("{root}/job");
    let id = lockscope_model::id::lock_id("zk", &path);
    let mut holder = CuratorClient::spawn(
        &zk.connect_string(),
        DYING_SESSION_MS,
        CuratorRecipe::Mutex,
        &path,
    )
    .await?;
    holder.start_acquire().await?;
    holder.wait_acquired(WAIT).await?;
    let mut waiter =
        CuratorClient::spawn(&zk.connect_string(), 4000, CuratorRecipe::Mutex, &path).await?;
    waiter.start_acquire().await?;
    ls.wait_lock("zk", &path, WAIT, "waiter queued", |l| l.waiters.len() == 1)
        .await?;
    let dead = session_hex(holder.session_id());
    let next = session_hex(waiter.session_id());
    ls.wait_sessions(WAIT, "an ensemble round saw both sessions connected", |s| {
        [&dead, &next]
            .iter()
            .all(|id| s.iter().any(|v| &&v.session == id && v.connected))
    })
    .await?;

    holder.kill();
    // Until the session expires the dead holder still holds; lockscope shows it gone from every
    // member, with its deadline, while it still holds.
    ls.wait_sessions(WAIT, "dead holder shown disconnected", |s| {
        s.iter()
            .any(|v| v.session == dead && !v.connected && v.expires_at_ms.is_some())
    })
    .await
    .and_then(|sessions| {
        let shown = sessions.iter().find(|v| v.session == dead);
        match shown {
            Some(v) if v.holds.contains(&id) => Ok(()),
            _ => Err(anyhow::anyhow!(
                "lockscope saw the holder disconnected only after its node went: {shown:?}"
            )),
        }
    })?;
    waiter.wait_acquired(WAIT).await?;
    let lock = ls
        .wait_lock("zk", &path, WAIT, "waiter holds after expiry", |l| {
            l.holders.first().map(|h| &h.session) == Some(&next)
        })
        .await?;
    assert!(lock.waiters.is_empty());
    let detail = ls
        .wait_detail("zk", &path, WAIT, "the release has its cause", |d| {
            d.events.iter().any(|e| e.kind == "released")
        })
        .await?;
    let released: Vec<_> = detail
        .events
        .iter()
        .filter(|e| e.kind == "released")
        .collect();
    assert_eq!(released.len(), 1, "{:?}", detail.events);
    assert_eq!(
        released[0].cause,
        Some(ReleaseCause::SessionExpired),
        "{:?}",
        detail.events
    );
    assert_eq!(released[0].session, dead);
    let text = ls.metrics().await?;
    assert_eq!(
        metric_value(&text, &format!("lockscope_lock_releases_total{{source=\"zk\",lock=\"{path}\",cause=\"session_expired\"}}")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric_value(&text, "lockscope_session_expirations_total{source=\"zk\"}"),
        Some(1.0)
    );
    waiter.quit().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_kills_under_churn_leave_the_model_equal_to_a_fresh_read() -> Result<()> {
    let mut zk = ZkEnsemble::start(3).await?;
    let root = unique_root("churn");
    let ls = Lockscope::watching("zk", &zk.connect_string(), &[&root]).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let done = Arc::new(AtomicU64::new(0));
    let workers = zk_churn(
        zk.connect_string(),
        root.clone(),
        6,
        3,
        done.clone(),
        stop_rx,
    );
    // Some long-held locks and queues that must survive the faults intact.
    let steady = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let _held = lockscope_tests::recipes::lock(&steady, &format!("{root}/steady"), &recipe).await?;
    let queued = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let _queued_ticket = queued.enqueue(&format!("{root}/steady"), &recipe).await?;

    // Each fault strikes while the churn runs, and the churn goes on through each one: every
    // phase waits for churn done in it, not for a time.
    ls.wait_lock(
        "zk",
        &format!("{root}/steady"),
        WAIT,
        "steady queue shown",
        |l| l.holders.len() == 1 && l.waiters.len() == 1,
    )
    .await?;
    let churned = churn_progress(&done, 0, 20, WAIT, "churn before the faults").await?;
    let leader = zk.leader().await?;
    let follower = (0..zk.members())
        .find(|i| *i != leader)
        .expect("a follower");
    zk.kill(follower);
    let churned = churn_progress(&done, churned, 20, WAIT, "churn with a follower down").await?;
    zk.restart(follower).await?;
    let churned =
        churn_progress(&done, churned, 20, WAIT, "churn after the follower is back").await?;
    let leader = zk.leader().await?;
    zk.kill(leader);
    // The two left elect a new leader (`leader` asks running members only).
    zk.leader().await?;
    let churned = churn_progress(&done, churned, 20, WAIT, "churn under the new leader").await?;
    zk.restart(leader).await?;
    churn_progress(
        &done,
        churned,
        20,
        WAIT,
        "churn after the old leader is back",
    )
    .await?;
    stop_tx.send_replace(true);
    for worker in workers {
        worker.await?;
    }
    let total = done.load(Ordering::Relaxed);
    assert!(
        total > 20,
        "the churn made too few changes ({total}) to mean anything"
    );

    // Once quiet, lockscope must equal a fresh read of the tree.
    let mut last = String::new();
    let want = eventually_every(
        Duration::from_secs(30),
        Duration::from_millis(250),
        "the model equals a fresh read",
        async || {
            let want = fresh_locks(&zk.connect_string(), &root).await?;
            let got = shown_locks(&ls).await?;
            if want == got {
                return Ok(Some(want));
            }
            last = format!("shown {got:?}\n fresh {want:?}");
            Ok(None)
        },
    )
    .await
    .map_err(|e| anyhow!("{e}; model differs from a fresh read:\n {last}"))?;
    assert!(want.contains_key(&format!("{root}/steady")), "{want:?}");
    let sources = ls.sources().await?;
    assert!(sources[0].up, "{sources:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_down_at_start_and_mid_run_recover_while_others_serve() -> Result<()> {
    let mut zk = ZkEnsemble::start(3).await?;
    let root_a = unique_root("multi-a");
    let root_b = unique_root("multi-b");
    // A port nothing listens on: down from the start.
    let dead_port = lockscope_tests::support::ports::free_port();
    let config = Config {
        sources: section(
            "zookeeper",
            vec![
                zk_source("a", &zk.connect_string(), &[&root_a]),
                zk_source("b", &zk.connect_string(), &[&root_b]),
                zk_source("dead", &format!("127.0.0.1:{dead_port}"), &["/locks"]),
            ],
        ),
        ..Config::default()
    };
    let ls = Lockscope::start(config).await?;
    let client = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let _a = lockscope_tests::recipes::lock(&client, &format!("{root_a}/x"), &recipe).await?;
    let _b = lockscope_tests::recipes::lock(&client, &format!("{root_b}/y"), &recipe).await?;
    ls.wait_lock("a", &format!("{root_a}/x"), WAIT, "source a serves", |l| {
        l.holders.len() == 1
    })
    .await?;
    ls.wait_lock("b", &format!("{root_b}/y"), WAIT, "source b serves", |l| {
        l.holders.len() == 1
    })
    .await?;
    let text = ls.metrics().await?;
    assert_eq!(
        metric_value(&text, "lockscope_source_up{source=\"a\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric_value(&text, "lockscope_source_up{source=\"dead\"}"),
        Some(0.0)
    );
    let sources = ls.sources().await?;
    let dead = sources
        .iter()
        .find(|s| s.name == "dead")
        .expect("dead listed");
    assert!(!dead.up && dead.error.is_some(), "{dead:?}");
    // Not ready while a source never synced.
    let (status, _) = ls.get_json("/readyz").await?;
    assert_eq!(status, 503);
    drop(client);

    // The whole ensemble goes down mid-run: a and b show down, then recover by themselves.
    for i in 0..zk.members() {
        zk.kill(i);
    }
    let up = |text: &str, source: &str| {
        metric_value(text, &format!("lockscope_source_up{{source=\"{source}\"}}"))
    };
    let mut last = String::new();
    eventually_every(
        WAIT,
        Duration::from_millis(200),
        "source a shown down",
        async || {
            last = ls.metrics().await?;
            Ok((up(&last, "a") == Some(0.0)).then_some(()))
        },
    )
    .await
    .map_err(|e| anyhow!("{e}; last /metrics:\n{last}"))?;
    zk.restart_all().await?;
    eventually_every(
        Duration::from_secs(40),
        Duration::from_millis(200),
        "sources a and b shown up again",
        async || {
            last = ls.metrics().await?;
            Ok((up(&last, "a") == Some(1.0) && up(&last, "b") == Some(1.0)).then_some(()))
        },
    )
    .await
    .map_err(|e| anyhow!("{e}; sources did not recover:\n{last}"))?;
    // The old client's session is gone with the restart or closed: the locks drain.
    ls.wait_lock(
        "a",
        &format!("{root_a}/x"),
        Duration::from_secs(30),
        "lock a released after the outage",
        |l| l.holders.is_empty(),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_odd_names_binary_data_and_a_10k_child_parent() -> Result<()> {
    trace();
    let zk = ZkEnsemble::start(3).await?;
    let root = unique_root("odd");
    let admin = zkc::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_auth("digest", b"admin:secret")
        .connect(&zk.connect_string())
        .await?;
    let persistent = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    let ephemeral = zkc::CreateMode::Ephemeral.with_acls(zkc::Acls::anyone_all());
    let sequential = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    admin.create(&root, b"", &persistent).await?;
    // ACL: only the creator may read this lock's children.
    let secret = format!("{root}/secret");
    admin
        .create(
            &secret,
            b"",
            &zkc::CreateMode::Persistent.with_acls(zkc::Acls::creator_all()),
        )
        .await?;
    admin
        .create(
            &format!("{secret}/lock-"),
            b"",
            &zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::creator_all()),
        )
        .await?;
    // Odd names and binary data.
    let odd = format!("{root}/odd");
    admin.create(&odd, b"", &persistent).await?;
    admin
        .create(
            &format!("{odd}/lock-notanumber"),
            &[0xff, 0x00, 0xfe],
            &ephemeral,
        )
        .await?;
    admin
        .create(
            &format!("{odd}/lock-"),
            &[0x80, 0x81, 0x00, 0xc3],
            &sequential,
        )
        .await?;
    admin
        .create(&format!("{odd}/ü nicode ~!"), b"\x00\x01", &ephemeral)
        .await?;
    // A 10k-child queue.
    let big = format!("{root}/big");
    admin.create(&big, b"", &persistent).await?;
    let prefix = format!("{big}/lock-");
    for _ in 0..20 {
        let creates = (0..500).map(|_| admin.create(&prefix, b"", &sequential));
        for result in futures::future::join_all(creates).await {
            result?;
        }
    }

    let ls = Lockscope::watching("zk", &zk.connect_string(), &[&root]).await?;
    let lock = ls
        .wait_lock("zk", &big, WAIT, "10k queue", |l| l.waiters.len() == 9_999)
        .await?;
    assert_eq!(lock.holders.len(), 1);
    assert!(
        lock.holders[0].node.ends_with("lock-0000000000"),
        "{}",
        lock.holders[0].node
    );
    assert_eq!(lock.waiters[9_998].position, 9_999);
    let lock = ls
        .wait_lock("zk", &odd, WAIT, "odd queue", |l| l.holders.len() == 1)
        .await?;
    assert!(
        lock.waiters.is_empty(),
        "a non-numeric suffix is not a queue member: {lock:?}"
    );
    let weird = format!("{odd}/ü nicode ~!");
    let lock = ls
        .wait_lock("zk", &weird, WAIT, "odd-named exclusive lock", |l| {
            l.holders.len() == 1
        })
        .await?;
    assert_eq!(lock.recipe, "exclusive");
    assert!(
        lock.id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!".contains(&b)),
        "{}",
        lock.id
    );
    let sources = ls.sources().await?;
    let error = sources[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("not readable") && error.contains(&secret),
        "{sources:?}"
    );
    assert!(sources[0].up);
    // With the digest credentials the protected lock is visible.
    let mut authed = zk_source("zk", &zk.connect_string(), &[&root]);
    authed.digest = Some("admin:secret".into());
    let with_auth = Lockscope::start(Config {
        sources: section("zookeeper", vec![authed]),
        ..Config::default()
    })
    .await?;
    with_auth.wait_ready(WAIT).await?;
    let lock = with_auth
        .wait_lock(
            "zk",
            &secret,
            WAIT,
            "protected lock seen with digest auth",
            |l| l.holders.len() == 1,
        )
        .await?;
    let admin_session = admin.session_id().0;
    assert_eq!(lock.holders[0].session, session_hex(admin_session));
    assert_eq!(with_auth.sources().await?[0].error, None);
    drop(with_auth);
    // The 10k queue drains live.
    drop(admin);
    ls.wait_lock(
        "zk",
        &big,
        Duration::from_secs(30),
        "10k queue drained after the session closed",
        |l| l.holders.is_empty() && l.waiters.is_empty(),
    )
    .await?;
    // Every holder lockscope saw go (the first, then one per acquisition while the queue
    // drained) gets its cause once the ensemble has settled; all are the one clean close.
    let detail = ls
        .wait_detail(
            "zk",
            &big,
            Duration::from_secs(30),
            "every release of the 10k queue has its cause",
            |d| d.lock.releases == d.lock.acquisitions + 1,
        )
        .await?;
    let closes = detail.lock.releases as f64;
    let text = ls.metrics().await?;
    let series = |cause: &str| {
        format!("lockscope_lock_releases_total{{source=\"zk\",lock=\"{big}\",cause=\"{cause}\"}}")
    };
    assert_eq!(
        metric_value(&text, &series("session_closed")),
        Some(closes),
        "{text}"
    );
    for cause in ["released", "session_expired", "forced"] {
        assert_eq!(metric_value(&text, &series(cause)), None, "{cause}: {text}");
    }
    let admin_session = session_hex(admin_session);
    assert!(
        detail
            .events
            .iter()
            .filter(|e| e.kind == "released")
            .all(|e| e.cause == Some(ReleaseCause::SessionClosed) && e.session == admin_session),
        "{:?}",
        detail.events
    );
    Ok(())
}

/// A full read spread over helper sessions, with siblings unlike the one read first: every
/// node is read once with the metadata a plain read gives, short data kept and long data
/// dropped, children of a persistent node among ephemeral siblings found, and a helper whose
/// member is killed before the read leaves its share to the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_read_over_helpers_reads_unlike_siblings_and_outlives_a_killed_member() -> Result<()>
{
    use lockscope::backends::zookeeper::collect::{read_tree, read_tree_in_parts};
    trace();
    let mut zk = ZkEnsemble::start(3).await?;
    let root = unique_root("helpers");
    let connect_to = |addr: String| async move {
        zkc::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&addr)
            .await
    };
    let member = |i: usize| zk.client_addr(i).to_string();
    let setup = connect_to(zk.connect_string()).await?;
    let persistent = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    let sequential = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    setup.create(&root, b"", &persistent).await?;
    let long = vec![b'x'; 2_000];
    let mut expected = std::collections::BTreeMap::new();
    // An ephemeral sequential node under `parent` holding `data`, and the data a read keeps.
    let sequential_under = async |parent: &str, data: &[u8]| {
        let (_, seq) = setup
            .create(&format!("{parent}/lock-"), data, &sequential)
            .await?;
        let kept = (data.len() <= 512).then(|| data.to_vec());
        anyhow::Ok((format!("{parent}/lock-{seq}"), kept))
    };
    expected.insert(root.clone(), None);
    // Mostly ephemeral queues (their first child read is most likely ephemeral), each with a
    // persistent node that has children, one with long data and one persistent leaf.
    for q in 0..20 {
        let queue = format!("{root}/q{q}");
        setup.create(&queue, b"10.0.0.1", &persistent).await?;
        expected.insert(queue.clone(), Some(b"10.0.0.1".to_vec()));
        for _ in 0..30 {
            let (path, kept) = sequential_under(&queue, b"10.1.2.3").await?;
            expected.insert(path, kept);
        }
        let (path, kept) = sequential_under(&queue, &long).await?;
        expected.insert(path, kept);
        let nested = format!("{queue}/nested");
        setup.create(&nested, b"n", &persistent).await?;
        expected.insert(nested.clone(), Some(b"n".to_vec()));
        for _ in 0..3 {
            let (path, kept) = sequential_under(&nested, b"kid").await?;
            expected.insert(path, kept);
        }
        let leaf = format!("{queue}/leaf");
        setup.create(&leaf, b"", &persistent).await?;
        expected.insert(leaf, None);
    }

    let roots = [root.clone()];
    let plain = connect_to(member(0)).await?;
    let (reference, unreadable) = read_tree(&plain, &roots).await?;
    assert!(unreadable.is_empty());
    let read_paths: std::collections::BTreeSet<&String> =
        reference.iter().map(|(p, _)| p).collect();
    assert_eq!(read_paths.len(), reference.len(), "a node read twice");
    assert_eq!(
        read_paths,
        expected.keys().collect(),
        "the plain read found other nodes"
    );
    for (path, meta) in &reference {
        assert_eq!(
            meta.data.as_deref().map(<[u8]>::to_vec),
            expected[path],
            "{path}: {meta:?}"
        );
        if meta.data.is_none() && expected[path].is_none() && path.contains("lock-") {
            assert_eq!(meta.data_len, 2_000, "{path}: long data counted, not kept");
        }
    }

    // The primary on a follower, helpers on the leader and the other follower, which is killed
    // before the read (a follower's loss leaves the quorum and the other sessions be), so every
    // request sent to its helper fails and goes to the others.
    let leader = zk.leader().await?;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let primary = connect_to(member(followers[0])).await?;
    let mut helpers = Vec::new();
    for i in [leader, followers[1]] {
        let helper = connect_to(member(i)).await?;
        helper.sync(&root).await?;
        helpers.push(helper);
    }
    zk.kill(followers[1]);
    let mut spread = Vec::new();
    let unreadable = read_tree_in_parts(
        &primary,
        futures::stream::iter(helpers),
        8,
        &roots,
        64,
        |part| {
            spread.extend(part);
            std::future::ready(true)
        },
    )
    .await?;
    assert_eq!(unreadable, Some(Vec::new()));
    let by_path = |nodes: Vec<(String, lockscope_model::zk::NodeMeta)>| {
        nodes
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert_eq!(spread.len(), reference.len(), "a node read twice or missed");
    assert_eq!(by_path(spread), by_path(reference));
    Ok(())
}
