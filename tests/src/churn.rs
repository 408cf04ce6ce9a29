//! Lock churn for fault tests: seed clients taking and releasing ZooKeeper locks until told to
//! stop ([`zk_churn`]), and the wait for a churn's progress ([`churn_progress`]). Shared by
//! `zk_faults.rs` and `source_faults.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};

use crate::harness::eventually;
use crate::recipes::{SeedClient, SeedRecipe};

/// Runs `clients` seed clients taking and releasing locks over `locks` paths under `root` until
/// `stop`; `done` counts the completed acquire/release pairs. Clients survive member kills and
/// partitions by reconnecting; a failed round only starts the next.
pub fn zk_churn(
    connect: String,
    root: String,
    clients: usize,
    locks: usize,
    done: Arc<AtomicU64>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|i| {
            let (connect, root, done, stop) =
                (connect.clone(), root.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                let recipe = SeedRecipe::QueuePredecessor {
                    prefix: "lock-".into(),
                };
                let mut round = 0usize;
                while !*stop.borrow() {
                    let Ok(client) = SeedClient::connect(&connect, Duration::from_secs(6)).await
                    else {
                        // A pause before the next try to connect (the workload's backoff).
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    };
                    while !*stop.borrow() {
                        round += 1;
                        let path = format!("{root}/l{}", (i + round) % locks);
                        let attempt = async {
                            let ticket = crate::recipes::lock(&client, &path, &recipe).await?;
                            // The workload holds each lock a little while before releasing it.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            ticket.release(&client).await
                        };
                        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
                            Ok(Ok(())) => {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => break,
                        }
                    }
                }
            })
        })
        .collect()
}

/// Waits (at most `within`) until a churn counting into `done` has completed `more` pairs after
/// `from`; the count then.
pub async fn churn_progress(
    done: &AtomicU64,
    from: u64,
    more: u64,
    within: Duration,
    what: &str,
) -> Result<u64> {
    let mut last = from;
    eventually(within, what, async || {
        last = done.load(Ordering::Relaxed);
        Ok((last >= from + more).then_some(last))
    })
    .await
    .map_err(|e| {
        anyhow!(
            "{e}; {} pairs done, {more} wanted",
            last.saturating_sub(from)
        )
    })
}
