//! etcd section: freshness of lockscope's event stream against a bare watch on the same prefix
//! (the floor), and what lockscope asks etcd per change, counted by etcd itself
//! (`grpc_server_started_total` of unary calls on its `/metrics`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use etcd_client::{Client, EventType, PutOptions, WatchOptions};
use lockscope_model::id::lock_id;
use lockscope_model::wire::StreamEvent;
use serde_json::{json, Value};

use super::{p50_p99, percentile, row, sorted, start_lockscope, Row};
use crate::harness::EventReader;
use crate::support::etcd::EtcdServer;

/// Unary gRPC calls etcd has started, by method, from its `/metrics`.
async fn unary_calls(http: &reqwest::Client, endpoint: &str) -> Result<Vec<(String, u64)>> {
    let text = http
        .get(format!("http://{endpoint}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("grpc_server_started_total{") && l.contains("grpc_type=\"unary\"")
        })
        .filter_map(|l| {
            let method = l.split("grpc_method=\"").nth(1)?.split('"').next()?;
            let n: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((method.to_string(), n as u64))
        })
        .collect())
}

fn total(calls: &[(String, u64)]) -> u64 {
    calls.iter().map(|(_, n)| n).sum()
}

/// `cycles` acquire/release pairs of a mutex key (`<name>/<lease hex>`, as the Go client
/// writes it) over 20 lock names.
pub async fn run(bin: &Path, dir: &Path, cycles: usize) -> Result<(Vec<Row>, Value)> {
    let etcd = EtcdServer::start().await?;
    let endpoint = etcd.endpoint();
    let (_lockscope, base, _) = start_lockscope(
        bin,
        dir,
        "etcd",
        &format!(
            "[[etcd]]\nname = \"bench\"\nendpoints = [\"{endpoint}\"]\nprefixes = [\"/locks\"]\n"
        ),
    )
    .await?;
    let mut client = Client::connect([endpoint.as_str()], None)
        .await
        .context("connect to etcd")?;
    let lease = client.lease_grant(3600, None).await?.id();
    let hex = format!("{lease:x}");
    let mut floor = client
        .watch("/locks/", Some(WatchOptions::new().with_prefix()))
        .await?;
    // The first answer confirms the watch exists.
    floor.message().await?;
    let mut events = EventReader::connect(&base).await?;
    let http = reqwest::Client::new();
    let before = unary_calls(&http, &endpoint).await?;
    let started = Instant::now();
    let (mut latencies, mut floor_latencies) = (Vec::new(), Vec::new());
    for i in 0..cycles {
        let name = format!("/locks/bench/c{}", i % 20);
        let key = format!("{name}/{hex}");
        let id = lock_id("bench", &name);
        for put in [true, false] {
            let t = Instant::now();
            if put {
                client
                    .put(key.as_str(), "", Some(PutOptions::new().with_lease(lease)))
                    .await?;
            } else {
                client.delete(key.as_str(), None).await?;
            }
            let want = if put {
                EventType::Put
            } else {
                EventType::Delete
            };
            let (f, l) = tokio::join!(
                async {
                    loop {
                        let Some(response) = floor.message().await? else {
                            anyhow::bail!("the bare watch ended");
                        };
                        if response.events().iter().any(|e| {
                            e.event_type() == want
                                && e.kv().is_some_and(|kv| kv.key() == key.as_bytes())
                        }) {
                            return anyhow::Ok(t.elapsed());
                        }
                    }
                },
                async {
                    loop {
                        match events.next(Duration::from_secs(10)).await? {
                            (_, StreamEvent::Lock { lock })
                                if put
                                    && lock.id == id
                                    && lock.holders.first().is_some_and(|h| h.node == key) =>
                            {
                                break
                            }
                            (_, StreamEvent::Removed { id: gone }) if !put && gone == id => break,
                            _ => {}
                        }
                    }
                    anyhow::Ok(t.elapsed())
                }
            );
            floor_latencies.push(f?.as_secs_f64() * 1000.0);
            latencies.push(l?.as_secs_f64() * 1000.0);
        }
    }
    let window = started.elapsed().as_secs_f64();
    let after = unary_calls(&http, &endpoint).await?;
    let changes = cycles as f64 * 2.0;
    // The benchmark's own unary calls: one put or delete per change, this scrape's none.
    let lockscope_calls = (total(&after) - total(&before)) as f64 - changes;
    let by_method: Vec<(String, u64)> = after
        .iter()
        .map(|(m, n)| {
            let was = before.iter().find(|(b, _)| b == m).map_or(0, |(_, n)| *n);
            (m.clone(), n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let latencies = sorted(latencies);
    let floor_latencies = sorted(floor_latencies);
    let rows = vec![
        row(
            "7 etcd",
            "etcd change → /api/v1/events p50 / p99",
            p50_p99(&latencies),
            &format!("{changes:.0} changes (mutex key put with a lease, then delete) in {window:.1} s"),
        ),
        row(
            "7 etcd",
            "etcd floor: bare watch on the prefix p50 / p99",
            p50_p99(&floor_latencies),
            "same changes, same instant",
        ),
        row(
            "7 etcd",
            "etcd p99 ÷ floor p99",
            format!(
                "{:.2}×",
                percentile(&latencies, 0.99) / percentile(&floor_latencies, 0.99)
            ),
            "",
        ),
        row(
            "7 etcd",
            "lockscope requests to etcd per change",
            format!("{:.2}", lockscope_calls / changes),
            &format!("unary calls counted by etcd, by method: {by_method:?} (the bench's own puts/deletes subtracted); keys are never polled"),
        ),
    ];
    let figures = json!({
        "changes": changes,
        "p50_ms": percentile(&latencies, 0.5),
        "p99_ms": percentile(&latencies, 0.99),
        "floor_p50_ms": percentile(&floor_latencies, 0.5),
        "floor_p99_ms": percentile(&floor_latencies, 0.99),
        "requests_per_change": lockscope_calls / changes,
    });
    Ok((rows, figures))
}
