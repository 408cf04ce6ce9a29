//! Redis changing faster than lockscope reads it: a burst of ever-new lock names, set and
//! deleted by pipelining clients, far over the rate lockscope reads keys at (on this machine it
//! outgrows the collector's bound on dirty keys, which then rescans). lockscope must end up with
//! exactly the locks the server holds, a fresh SCAN + GET, and not say it is lagging any more.
//! (`backend/server/tests/redis_lagging.rs` checks how lagging shows.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_tests::harness::{eventually, metric_value, Lockscope};
use lockscope_tests::support::redis::{burst, server_locks, BurstEnd, BurstName, RedisServer};

const SOURCE: &str = "burst";
/// Client connections pipelining the burst.
const CLIENTS: usize = 4;
/// Names each client sets: 100k names, about 200k commands in all.
const NAMES_PER_CLIENT: usize = 25_000;
/// Names per pipelined round trip.
const DEPTH: usize = 250;
/// Every `KEEP_EVERY`th name stays held, set twice (the second token must win); the rest are
/// deleted right after they are set.
const KEEP_EVERY: usize = 50;
/// How long lockscope may take to catch up after the burst.
const CATCH_UP: Duration = Duration::from_secs(120);

/// One client's names, `lock:burst:<client>:<i>`: returns the commands it sent.
async fn client_burst(url: String, client: usize) -> Result<usize> {
    let names = BurstEnd::Names(NAMES_PER_CLIENT as u64);
    let count = burst(&url, DEPTH, names, |i| {
        let key = format!("lock:burst:{client}:{i}");
        let first = format!("first-{client}-{i}");
        if i % KEEP_EVERY as u64 == 0 {
            BurstName::Kept {
                key,
                tokens: vec![first, format!("second-{client}-{i}")],
            }
        } else {
            BurstName::Churned { key, token: first }
        }
    })
    .await?;
    Ok(count.commands as usize)
}

/// Key → holder of every lock lockscope lists for the source.
async fn listed_locks(ls: &Lockscope) -> Result<BTreeMap<String, String>> {
    Ok(ls
        .locks()
        .await?
        .into_iter()
        .filter(|l| l.source == SOURCE)
        .filter_map(|l| {
            // A Redis lock's path is its key.
            Some((l.path, l.holders.first()?.node.clone()))
        })
        .collect())
}

async fn lagging(ls: &Lockscope) -> Result<bool> {
    Ok(ls
        .sources()
        .await?
        .iter()
        .any(|s| s.name == SOURCE && s.lagging))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_read_rate_ends_equal_to_the_server() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut source = RedisSourceConfig::new(SOURCE, &server.url(), &["lock:*"]);
    // Catching up must be the collector's own doing, not a periodic reconcile's.
    source.watch.reconcile_interval = Duration::from_secs(3600);
    let ls = Lockscope::start(Config {
        sources: section("redis", vec![source]),
        ..Config::default()
    })
    .await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let mut conn = server.connection().await?;

    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(client_burst(server.url(), c)))
        .collect();
    let mut commands = 0;
    for client in clients {
        commands += client.await??;
    }
    let burst_time = started.elapsed();
    let read_during_burst: u64 = {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
            .and_then(|rest| rest.split(',').find_map(|f| f.strip_prefix("calls=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };

    // Wait for the fact: lockscope lists exactly what the server holds, and says it caught up.
    let ended = Instant::now();
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let caught = eventually(CATCH_UP, "lockscope equal to the server", async || {
        let truth = server_locks(&mut conn).await?;
        let listed = listed_locks(&ls).await?;
        let equal = listed == truth && !lagging(&ls).await?;
        last = (truth, listed);
        Ok(equal.then_some(()))
    })
    .await;
    let (truth, listed) = last;
    if let Err(e) = caught {
        let missing = truth.keys().filter(|k| !listed.contains_key(*k)).count();
        let extra = listed.keys().filter(|k| !truth.contains_key(*k)).count();
        let wrong = truth
            .iter()
            .filter(|(k, v)| listed.get(*k).is_some_and(|l| l != *v))
            .count();
        let metrics = ls.metrics().await?;
        let own: Vec<&str> = metrics
            .lines()
            .filter(|l| {
                !l.starts_with('#')
                    && (l.starts_with("lockscope_collector")
                        || l.starts_with("lockscope_aggregator")
                        || l.starts_with("lockscope_source"))
            })
            .collect();
        anyhow::bail!(
            "{e} (not caught up after the burst): server {} locks, lockscope {} ({missing} missing, {extra} extra, {wrong} with another holder), lagging {}; {own:#?}",
            truth.len(),
            listed.len(),
            lagging(&ls).await?
        );
    }
    let caught_up = ended.elapsed();
    let kept = CLIENTS * NAMES_PER_CLIENT.div_ceil(KEEP_EVERY);
    ensure!(
        truth.len() == kept,
        "{} keys held, {kept} expected",
        truth.len()
    );
    ensure!(listed
        .iter()
        .all(|(key, holder)| holder.starts_with("second-") && key.starts_with("lock:burst:")));

    let metrics = ls.metrics().await?;
    let series = |name: &str| metric_value(&metrics, &format!("{name}{{source=\"{SOURCE}\"}}"));
    ensure!(series("lockscope_source_lagging") == Some(0.0));
    let overflows = metric_value(
        &metrics,
        &format!("lockscope_collector_overflows_total{{source=\"{SOURCE}\",backend=\"redis\"}}"),
    )
    .unwrap_or(0.0);
    eprintln!(
        "{commands} commands in {burst_time:?} ({:.0}/s); lockscope read {read_during_burst} keys meanwhile; backlog dropped {overflows} times; caught up {caught_up:?} after the burst",
        commands as f64 / burst_time.as_secs_f64()
    );
    Ok(())
}
