//! Every ZooKeeper recipe, driven by real clients (Apache Curator in Java, the hand-written seed
//! recipes in Rust) against a real 3-node ensemble, asserted through lockscope's API and metrics.

use std::time::Duration;

use anyhow::Result;
use lockscope::config::{section, Config};
use lockscope_model::session_hex;
use lockscope_model::wire::{LockMode, LockView};
use lockscope_tests::harness::{eventually_every, zk_source, Lockscope};
use lockscope_tests::recipes::{SeedClient, SeedRecipe};
use lockscope_tests::support::curator::{CuratorClient, CuratorRecipe};
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;

const WAIT: Duration = Duration::from_secs(15);
const SESSION_MS: u64 = 4000;

fn nodes_sessions(lock: &LockView) -> (Vec<String>, Vec<String>) {
    (
        lock.holders.iter().map(|h| h.session.clone()).collect(),
        lock.waiters.iter().map(|w| w.session.clone()).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_queue_order_wait_times_release_and_metrics() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let root = unique_root("mutex");
    let ls = Lockscope::watching("zk", &zk.connect_string(), &[&root]).await?;
    let path = format!("{root}/orders");

    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut c = CuratorClient::spawn(
            &zk.connect_string(),
            SESSION_MS,
            CuratorRecipe::Mutex,
            &path,
        )
        .await?;
        c.start_acquire().await?;
        if clients.is_empty() {
            c.wait_acquired(WAIT).await?;
        }
        // Queue them in a known order.
        let want = clients.len() + 1;
        ls.wait_lock("zk", &path, WAIT, "participant queued", |l| {
            l.holders.len() + l.waiters.len() == want
        })
        .await?;
        clients.push(c);
    }
    let sessions: Vec<String> = clients
        .iter()
        .map(|c| session_hex(c.session_id()))
        .collect();
    let lock = ls
        .wait_lock("zk", &path, WAIT, "predecessor watches reported", |l| {
            l.waiters.iter().all(|w| w.watches.is_some())
        })
        .await?;
    assert_eq!(lock.recipe, "curator_mutex");
    assert_eq!(lock.backend, lockscope_model::wire::Backend::Zookeeper);
    assert_eq!(
        nodes_sessions(&lock),
        (
            vec![sessions[0].clone()],
            vec![sessions[1].clone(), sessions[2].clone()]
        )
    );
    assert_eq!(
        lock.waiters.iter().map(|w| w.position).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(lock.holders[0].node.contains("-lock-"));
    // Each Curator waiter watches its predecessor only: one watcher on the holder, no herd.
    assert_eq!(lock.watchers, 1, "{lock:?}");
    assert!(!lock.herd);
    assert_eq!(
        lock.waiters[0].watches.as_deref(),
        Some(lock.holders[0].node.as_str())
    );
    assert_eq!(
        lock.waiters[1].watches.as_deref(),
        Some(lock.waiters[0].node.as_str())
    );

    // Wait times grow.
    let first = lock.waiters[0].waited_ms;
    let first_waiter = lock.waiters[0].node.clone();
    ls.wait_lock(
        "zk",
        &path,
        WAIT,
        &format!("the first waiter's wait grown by 300 ms from {first} ms, the hold 300 ms"),
        |l| {
            l.waiters
                .first()
                .is_some_and(|w| w.node == first_waiter && w.waited_ms >= first + 300)
                && l.holders.first().is_some_and(|h| h.held_ms >= 300)
        },
    )
    .await?;

    // Release: the next waiter holds, the release is `released`, hold time starts at the release.
    clients[0].release().await?;
    clients[1].wait_acquired(WAIT).await?;
    let lock = ls
        .wait_lock("zk", &path, WAIT, "second client holds", |l| {
            l.holders.first().map(|h| &h.session) == Some(&sessions[1])
        })
        .await?;
    assert_eq!(lock.waiters.len(), 1);
    assert!(
        lock.holders[0].held_ms < 5_000,
        "hold time must start at the handover: {lock:?}"
    );
    let detail = ls.detail("zk", &path).await?;
    let booked = ls
        .wait_detail("zk", &path, WAIT, "the release booked", |d| {
            d.events.iter().any(|e| e.kind == "released")
        })
        .await?;
    let released: Vec<_> = booked
        .events
        .iter()
        .filter(|e| e.kind == "released")
        .collect();
    assert_eq!(released.len(), 1, "{:?}", booked.events);
    assert_eq!(
        released[0].cause,
        Some(lockscope_model::wire::ReleaseCause::Released)
    );
    assert_eq!(released[0].session, sessions[0]);
    assert!(detail
        .events
        .iter()
        .any(|e| e.kind == "acquired" && e.session == sessions[1]));

    let text = ls.metrics().await?;
    let series = |name: &str| format!("{name}{{source=\"zk\",lock=\"{path}\"}}");
    assert_eq!(
        lockscope_tests::harness::metric_value(&text, &series("lockscope_lock_holders")),
        Some(1.0)
    );
    assert_eq!(
        lockscope_tests::harness::metric_value(&text, &series("lockscope_lock_waiters")),
        Some(1.0)
    );
    assert!(
        lockscope_tests::harness::metric_value(&text, &series("lockscope_lock_acquisitions_total"))
            .unwrap_or(0.0)
            >= 1.0
    );
    assert_eq!(
        lockscope_tests::harness::metric_value(
            &text,
            &format!(
                "lockscope_lock_releases_total{{source=\"zk\",lock=\"{path}\",cause=\"released\"}}"
            )
        ),
        Some(1.0)
    );
    assert!(
        lockscope_tests::harness::metric_value(
            &text,
            &series("lockscope_lock_oldest_wait_seconds")
        )
        .unwrap_or(0.0)
            > 0.0
    );
    assert!(text.contains(&format!(
        "lockscope_lock_wait_duration_seconds_count{{source=\"zk\",lock=\"{path}\"}}"
    )));
    assert_eq!(
        lockscope_tests::harness::metric_value(
            &text,
            "lockscope_locks{source=\"zk\",recipe=\"curator_mutex\"}"
        ),
        Some(1.0)
    );

    for c in clients {
        c.quit().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_semaphore_read_write_and_multi_lock() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let root = unique_root("sem");
    let sem = format!("{root}/pool");
    let mut source = zk_source("zk", &zk.connect_string(), &[&root]);
    source.max_leases.insert(sem.clone(), 2);
    let ls = Lockscope::start(Config {
        sources: section("zookeeper", vec![source]),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(WAIT).await?;
    let connect = zk.connect_string();

    // Semaphore V2 with two leases: two hold, the third waits.
    let mut sem_clients = Vec::new();
    for i in 0..3 {
        let mut c = CuratorClient::spawn(
            &connect,
            SESSION_MS,
            CuratorRecipe::Semaphore { max_leases: 2 },
            &sem,
        )
        .await?;
        c.start_acquire().await?;
        if i < 2 {
            c.wait_acquired(WAIT).await?;
        }
        sem_clients.push(c);
    }
    let lock = ls
        .wait_lock("zk", &sem, WAIT, "semaphore 2 held + 1 waiting", |l| {
            l.holders.len() == 2 && l.waiters.len() == 1
        })
        .await?;
    assert_eq!(lock.recipe, "curator_semaphore");
    assert_eq!(lock.max_leases, Some(2));
    assert_eq!(
        lock.waiters[0].session,
        session_hex(sem_clients[2].session_id())
    );
    // The internal `locks/` mutex is not a lock of its own.
    assert!(ls.lock("zk", &format!("{sem}/locks")).await?.is_none());
    sem_clients[0].release().await?;
    sem_clients[2].wait_acquired(WAIT).await?;
    ls.wait_lock("zk", &sem, WAIT, "third client got a lease", |l| {
        l.waiters.is_empty()
            && l.holders
                .iter()
                .any(|h| h.session == session_hex(sem_clients[2].session_id()))
    })
    .await?;

    // Read-write: two readers hold together, the writer waits, a later reader waits behind it.
    let rw = format!("{root}/rw");
    let mut r1 = CuratorClient::spawn(&connect, SESSION_MS, CuratorRecipe::Read, &rw).await?;
    r1.start_acquire().await?;
    r1.wait_acquired(WAIT).await?;
    let mut r2 = CuratorClient::spawn(&connect, SESSION_MS, CuratorRecipe::Read, &rw).await?;
    r2.start_acquire().await?;
    r2.wait_acquired(WAIT).await?;
    let mut w = CuratorClient::spawn(&connect, SESSION_MS, CuratorRecipe::Write, &rw).await?;
    w.start_acquire().await?;
    ls.wait_lock("zk", &rw, WAIT, "writer queued", |l| l.waiters.len() == 1)
        .await?;
    let mut r3 = CuratorClient::spawn(&connect, SESSION_MS, CuratorRecipe::Read, &rw).await?;
    r3.start_acquire().await?;
    let lock = ls
        .wait_lock(
            "zk",
            &rw,
            WAIT,
            "2 readers hold, writer + reader wait",
            |l| l.holders.len() == 2 && l.waiters.len() == 2,
        )
        .await?;
    assert_eq!(lock.recipe, "curator_rw");
    assert!(lock.holders.iter().all(|h| h.mode == Some(LockMode::Read)));
    assert_eq!(lock.waiters[0].mode, Some(LockMode::Write));
    assert_eq!(lock.waiters[0].session, session_hex(w.session_id()));
    assert_eq!(lock.waiters[1].mode, Some(LockMode::Read));
    r1.release().await?;
    r2.release().await?;
    w.wait_acquired(WAIT).await?;
    let lock = ls
        .wait_lock("zk", &rw, WAIT, "writer holds alone", |l| {
            l.holders.len() == 1 && l.holders[0].mode == Some(LockMode::Write)
        })
        .await?;
    assert_eq!(lock.waiters.len(), 1);

    // Multi-lock: one session holds both paths; the sessions API groups them.
    let a = format!("{root}/multi-a");
    let b = format!("{root}/multi-b");
    let mut m = CuratorClient::spawn(
        &connect,
        SESSION_MS,
        CuratorRecipe::Multi,
        &format!("{a},{b}"),
    )
    .await?;
    m.start_acquire().await?;
    m.wait_acquired(WAIT).await?;
    let la = ls
        .wait_lock("zk", &a, WAIT, "multi a held", |l| l.holders.len() == 1)
        .await?;
    let lb = ls
        .wait_lock("zk", &b, WAIT, "multi b held", |l| l.holders.len() == 1)
        .await?;
    let session = session_hex(m.session_id());
    assert_eq!(la.holders[0].session, session);
    assert_eq!(lb.holders[0].session, session);
    // Timeouts come from the next ensemble poll.
    let mine = ls
        .wait_sessions(
            WAIT,
            "the multi-lock session listed with its timeout",
            |s| {
                s.iter()
                    .any(|s| s.session == session && s.timeout_ms.is_some())
            },
        )
        .await?
        .into_iter()
        .find(|s| s.session == session)
        .expect("listed");
    assert!(
        mine.holds.contains(&la.id) && mine.holds.contains(&lb.id),
        "{mine:?}"
    );
    assert_eq!(mine.timeout_ms, Some(SESSION_MS));
    assert!(mine.connected);

    for c in sem_clients.into_iter().chain([r1, r2, r3, w, m]) {
        c.quit().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_recipes_and_the_herd_effect() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let root = unique_root("seed");
    let ls = Lockscope::watching("zk", &zk.connect_string(), &[&root]).await?;
    let connect = zk.connect_string();
    let timeout = Duration::from_millis(SESSION_MS);

    let cases: Vec<(&str, SeedRecipe, &str, bool)> = vec![
        (
            "good",
            SeedRecipe::QueuePredecessor {
                prefix: "lock-".into(),
            },
            "queue",
            false,
        ),
        (
            "children",
            SeedRecipe::QueueChildrenWatch {
                prefix: "temp".into(),
            },
            "queue",
            true,
        ),
        (
            "polling",
            SeedRecipe::QueuePolling {
                prefix: "lock-".into(),
                interval: Duration::from_millis(200),
            },
            "queue",
            false,
        ),
        ("plain", SeedRecipe::PlainEphemeral, "exclusive", true),
    ];
    for (name, recipe, recipe_name, herd) in cases {
        let path = format!("{root}/{name}");
        let mut clients = Vec::new();
        let mut tickets = Vec::new();
        for i in 0..3 {
            let client = SeedClient::connect(&connect, timeout).await?;
            let mut ticket = client.enqueue(&path, &recipe).await?;
            if i == 0 {
                ticket.acquired(&client).await?;
            }
            // The contenders wait in the background, each in its recipe's style.
            clients.push(client);
            tickets.push(ticket);
        }
        let holder = session_hex(clients[0].session_id());
        let mut waiting = Vec::new();
        for (client, mut ticket) in clients.drain(1..).zip(tickets.drain(1..)) {
            waiting.push(tokio::spawn(async move {
                ticket.acquired(&client).await.map(|_| (client, ticket))
            }));
        }
        // Watch fan-out comes from the next ensemble poll: wait for the recipe's picture.
        let settled = |l: &LockView| -> bool {
            let base = l.holders.first().map(|h| &h.session) == Some(&holder) && l.herd == herd;
            base && match name {
                "good" => {
                    l.watchers == 1
                        && l.waiters.len() == 2
                        && l.waiters.iter().all(|w| w.watches.is_some())
                }
                "children" => l.child_watchers == 2 && l.waiters.len() == 2,
                "polling" => l.waiters.len() == 2,
                _ => l.watchers == 2,
            }
        };
        let lock = ls
            .wait_lock(
                "zk",
                &path,
                WAIT,
                &format!("{name}: herd={herd} settled"),
                settled,
            )
            .await?;
        // Stays that way over further polls: a deliberate window of two poll intervals (300 ms)
        // in which nothing may change, not a wait for something to happen.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let lock2 = ls.lock("zk", &path).await?.expect("lock");
        assert!(settled(&lock2), "{name}: changed to {lock2:?}");
        assert_eq!(lock.recipe, recipe_name, "{name}");
        match name {
            "good" => {
                assert_eq!(
                    lock.waiters[0].watches.as_deref(),
                    Some(lock.holders[0].node.as_str())
                );
                assert_eq!(
                    lock.waiters[1].watches.as_deref(),
                    Some(lock.waiters[0].node.as_str())
                );
            }
            "polling" => {
                assert_eq!(lock.watchers, 0, "{name}: {lock:?}");
                assert_eq!(lock.child_watchers, 0, "{name}: {lock:?}");
            }
            "plain" => assert!(
                lock.waiters.is_empty(),
                "contenders of a plain lock have no nodes"
            ),
            _ => {}
        }
        // Release and let every contender take its turn.
        let first = tickets.pop().expect("holder ticket");
        first.release(&clients[0]).await?;
        // Release whoever acquires next: a plain lock's contenders race, so the order is open.
        let mut waiting = waiting;
        while !waiting.is_empty() {
            let (done, _, rest) =
                tokio::time::timeout(WAIT, futures::future::select_all(waiting)).await?;
            let (client, ticket) = done??;
            ticket.release(&client).await?;
            waiting = rest;
        }
        if recipe_name == "exclusive" {
            // An exclusive lock disappears with its node.
            let mut last = None;
            eventually_every(
                WAIT,
                Duration::from_millis(50),
                &format!("{name}: the lock gone"),
                async || {
                    last = ls.lock("zk", &path).await?;
                    Ok(last.is_none().then_some(()))
                },
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}; last state: {last:?}"))?;
        } else {
            let lock = ls
                .wait_lock("zk", &path, WAIT, &format!("{name}: all released"), |l| {
                    l.holders.is_empty() && l.waiters.is_empty()
                })
                .await?;
            assert_eq!(lock.acquisitions, 3, "{name}: {lock:?}");
        }
    }
    Ok(())
}

/// Three lockscope replicas watching one ensemble member: each one's persistent recursive watch
/// on the root counts once more in the member's watch count, as lockscope's own does. They are
/// observers, not waiters watching the lock's children: a queue whose waiters each watch their
/// predecessor shows no herd and no child watchers on any replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_watching_the_same_roots_are_not_taken_for_child_watchers() -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let root = unique_root("replicas");
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Lockscope::watching("zk", &zk.connect_string(), &[&root]).await?);
    }
    let path = format!("{root}/queue");
    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let timeout = Duration::from_millis(SESSION_MS);
    let mut waiting = Vec::new();
    let holder = SeedClient::connect(&zk.connect_string(), timeout).await?;
    let mut ticket = holder.enqueue(&path, &recipe).await?;
    ticket.acquired(&holder).await?;
    for _ in 0..2 {
        let client = SeedClient::connect(&zk.connect_string(), timeout).await?;
        let mut ticket = client.enqueue(&path, &recipe).await?;
        waiting.push(tokio::spawn(async move {
            ticket.acquired(&client).await.map(|_| (client, ticket))
        }));
    }
    for replica in &replicas {
        replica
            .wait_lock(
                "zk",
                &path,
                WAIT,
                "two waiters, each watching its predecessor, no herd",
                |l| {
                    l.waiters.len() == 2
                        && l.waiters.iter().all(|w| w.watches.is_some())
                        && l.child_watchers == 0
                        && !l.herd
                },
            )
            .await?;
    }
    for task in waiting {
        task.abort();
    }
    Ok(())
}
