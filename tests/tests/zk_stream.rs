//! The live stream against a real ensemble: a snapshot first, then an event for each change a
//! real client makes, without polling.

use std::time::Duration;

use anyhow::Result;
use lockscope_model::session_hex;
use lockscope_model::wire::StreamEvent;
use lockscope_tests::harness::Lockscope;
use lockscope_tests::recipes::{self, SeedClient, SeedRecipe};
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_snapshot_then_each_change() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let root = unique_root("stream");
    let ls = Lockscope::watching("zk", &zk.connect_string(), &[&root]).await?;
    let path = format!("{root}/jobs");
    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let holder = SeedClient::connect(&zk.connect_string(), Duration::from_secs(5)).await?;
    let held = recipes::lock(&holder, &path, &recipe).await?;
    ls.wait_lock("zk", &path, Duration::from_secs(10), "held", |l| {
        l.holders.len() == 1
    })
    .await?;

    let mut events = ls.events().await?;
    let (name, first) = events.next(Duration::from_secs(5)).await?;
    assert_eq!(name, "snapshot");
    let StreamEvent::Snapshot { locks, sources } = first else {
        panic!("not a snapshot")
    };
    assert!(locks.iter().any(|l| l.path == path && l.holders.len() == 1));
    assert!(sources.iter().any(|s| s.name == "zk" && s.up));

    // A new waiter arrives as a `lock` event.
    let waiter = SeedClient::connect(&zk.connect_string(), Duration::from_secs(5)).await?;
    let mut ticket = waiter.enqueue(&path, &recipe).await?;
    let want = session_hex(waiter.session_id());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, event) = events.next(Duration::from_secs(10)).await?;
        if let StreamEvent::Lock { lock } = event {
            if lock.path == path && lock.waiters.iter().any(|w| w.session == want) {
                assert_eq!(lock.waiters[0].position, 1);
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no event with the new waiter"
        );
    }
    // The release hands over: an event shows the waiter holding.
    held.release(&holder).await?;
    ticket.acquired(&waiter).await?;
    loop {
        let (_, event) = events.next(Duration::from_secs(10)).await?;
        if let StreamEvent::Lock { lock } = event {
            if lock.path == path && lock.holders.first().map(|h| &h.session) == Some(&want) {
                assert!(lock.waiters.is_empty());
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline + Duration::from_secs(10),
            "no handover event"
        );
    }
    ticket.release(&waiter).await?;
    Ok(())
}
