//! Viewers at size (issue 20): a real Redis holding N token locks (100,000 and 1,000,000 by
//! default) watched by the release `lockscope`, then
//! * one page of `GET /api/v1/locks` (the default query: 100 locks by path) plain, gzip and zstd:
//!   bytes on the wire and time (median of 5), and a page sorted by hold time;
//! * C live views (`/api/v1/events?limit=100`, 50 and 200 by default) opened at once: time to
//!   each one's first event (p50 / max) and lockscope's peak RSS while they open;
//! * one change reaching all C open views: a lock on the page gets a new holder, timed from the
//!   `SET` until each view's `lock` event (p99 over views and changes);
//! * the same C views read slowly (a chunk every 200 ms) while every lock on the page changes
//!   for 10 s: lockscope's peak RSS and how many were resynced;
//! * the dashboard in headless Chromium (`tests/browser/bench-first-rows.mjs`, lockscope serving
//!   the built UI): navigation → first rows, cold (a fresh browser context) and warm (navigating
//!   again), p50 / max, and the JS heap and wasm memory the page holds once its rows show.
//!   Without the built UI (`scripts/build-ui`) this figure is skipped, saying so.
//!
//! Figures only; nothing is asserted.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};

use super::{percentile, row, rss_kib, sorted, Row};
use crate::harness::EventReader;
use crate::support::redis::RedisServer;

/// Sizes of the viewers section.
#[derive(Debug, Clone)]
pub struct ViewersArgs {
    pub locks: Vec<usize>,
    pub clients: Vec<usize>,
    /// Changes timed per client count.
    pub changes: usize,
    /// Dashboard loads in Chromium per lock count (0: none).
    pub browser_runs: usize,
}

/// `GET url` with `Accept-Encoding: encoding`: bytes on the wire and ms.
async fn get_encoded(http: &reqwest::Client, url: &str, encoding: &str) -> Result<(usize, f64)> {
    let t = Instant::now();
    let mut request = http.get(url);
    if !encoding.is_empty() {
        request = request.header("accept-encoding", encoding);
    }
    let answer = request.send().await?.error_for_status()?;
    let body = answer.bytes().await?;
    Ok((body.len(), t.elapsed().as_secs_f64() * 1000.0))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Peak RSS of `pid` (KiB) sampled every 50 ms until `done` resolves.
async fn peak_rss_while<T>(pid: u32, done: impl std::future::Future<Output = T>) -> (T, u64) {
    let mut peak = rss_kib(pid).unwrap_or(0);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tokio::pin!(done);
    loop {
        tokio::select! {
            out = &mut done => return (out, peak.max(rss_kib(pid).unwrap_or(0))),
            _ = tick.tick() => peak = peak.max(rss_kib(pid).unwrap_or(0)),
        }
    }
}

async fn one_size(
    bin: &Path,
    dir: &Path,
    locks: usize,
    args: &ViewersArgs,
) -> Result<(Vec<Row>, Value)> {
    let section = "viewers";
    let mut rows = Vec::new();
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    super::redis::load_locks(&mut conn, 0..locks).await?;
    let name = format!("viewers-{locks}");
    // The dashboard's figure needs lockscope to serve the built UI.
    let ui = if args.browser_runs == 0 {
        Err("not asked for (--viewers-browser-runs 0)".to_string())
    } else {
        super::browser::ui_dir()
    };
    let ui_config = match &ui {
        Ok(dist) => format!(
            "[ui]\nassets_dir = {}\n",
            serde_json::to_string(&dist.display().to_string())?
        ),
        Err(_) => String::new(),
    };
    let (lockscope, base, _) =
        super::redis::start_redis_lockscope_with(bin, dir, &server.url(), &name, &ui_config)
            .await?;
    let pid = lockscope.0.id();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()?;
    let rss_ready = rss_kib(pid)?;

    // One page, plain and compressed.
    let mut pages = serde_json::Map::new();
    for (label, query) in [("by path", ""), ("by hold time", "sort=held_for")] {
        let url = format!("{base}/api/v1/locks?{query}");
        for encoding in ["", "gzip", "zstd"] {
            let mut sizes = Vec::new();
            let mut times = Vec::new();
            for _ in 0..5 {
                let (bytes, ms) = get_encoded(&http, &url, encoding).await?;
                sizes.push(bytes as f64);
                times.push(ms);
            }
            let (bytes, ms) = (median(sizes), median(times));
            let shown = if encoding.is_empty() {
                "plain"
            } else {
                encoding
            };
            rows.push(row(
                section,
                &format!("{locks} locks: a page of 100 {label}, {shown}"),
                format!("{:.1} kB, {ms:.0} ms", bytes / 1000.0),
                "median of 5; goal < 100 kB on the wire",
            ));
            pages.insert(
                format!("{label} {shown}"),
                json!({"bytes": bytes, "ms": ms}),
            );
        }
    }

    let mut streams = serde_json::Map::new();
    for &clients in &args.clients {
        // Opened at once: time to each first event.
        let started = Instant::now();
        let opened = futures::future::join_all((0..clients).map(|_| {
            let base = base.clone();
            async move {
                let t = Instant::now();
                let mut reader = EventReader::connect_to(&base, "/api/v1/events?limit=100").await?;
                let (name, _) = reader.next_json(Duration::from_secs(120)).await?;
                ensure!(name == "snapshot", "first event {name}");
                anyhow::Ok((reader, t.elapsed().as_secs_f64() * 1000.0))
            }
        }));
        let (opened, peak_open) = peak_rss_while(pid, opened).await;
        let mut readers = Vec::new();
        let mut firsts = Vec::new();
        for r in opened {
            let (reader, ms) = r?;
            readers.push(reader);
            firsts.push(ms);
        }
        let open_wall = started.elapsed().as_secs_f64() * 1000.0;
        let firsts = sorted(firsts);
        rows.push(row(
            section,
            &format!("{locks} locks: {clients} live views opening at once, first event p50 / max"),
            format!("{:.0} / {:.0} ms", percentile(&firsts, 0.5), firsts[firsts.len() - 1]),
            &format!(
                "all open in {open_wall:.0} ms; lockscope RSS {:.0} → peak {:.0} MiB; goal each < 1 s",
                rss_ready as f64 / 1024.0,
                peak_open as f64 / 1024.0
            ),
        ));

        // One change reaching every view: lock:b0 is on the first page by path.
        let mut reach = Vec::new();
        for change in 0..args.changes {
            // A change on quiet views: the one before was pushed more than a push interval ago
            // (views push at most 5 times a second, the latest state winning).
            tokio::time::sleep(Duration::from_millis(300)).await;
            let token = format!("bench-{clients}-{change}");
            let t = Instant::now();
            redis::cmd("SET")
                .arg("lock:b0")
                .arg(&token)
                .arg("PX")
                .arg(3_600_000)
                .query_async::<()>(&mut conn)
                .await?;
            let seen = futures::future::join_all(readers.iter_mut().map(|reader| {
                let token = token.clone();
                async move {
                    loop {
                        let (name, data) = reader.next_json(Duration::from_secs(60)).await?;
                        let holder = if name == "snapshot" {
                            data["locks"]
                                .as_array()
                                .and_then(|l| l.iter().find(|l| l["path"] == "lock:b0"))
                                .map(|l| l["holders"][0]["node"].clone())
                        } else if name == "lock" && data["lock"]["path"] == "lock:b0" {
                            Some(data["lock"]["holders"][0]["node"].clone())
                        } else {
                            None
                        };
                        if holder.is_some_and(|h| h == token.as_str()) {
                            return anyhow::Ok(t.elapsed().as_secs_f64() * 1000.0);
                        }
                    }
                }
            }))
            .await;
            for ms in seen {
                reach.push(ms?);
            }
        }
        let reach = sorted(reach);
        rows.push(row(
            section,
            &format!("{locks} locks: one change reaching all {clients} views, p50 / p99"),
            format!("{:.0} / {:.0} ms", percentile(&reach, 0.5), percentile(&reach, 0.99)),
            &format!("{} changes, each timed from the SET to every view's event; on views that pushed nothing for 300 ms (at most 5 pushes a second each); goal p99 < 250 ms", args.changes),
        ));
        drop(readers);

        // Slow readers: a chunk every 200 ms while the whole page keeps changing.
        let resyncs_before = resyncs(&http, &base).await?;
        let slow: Vec<_> = (0..clients)
            .map(|_| {
                let base = base.clone();
                tokio::spawn(async move {
                    let answer = reqwest::Client::new()
                        .get(format!("{base}/api/v1/events?limit=100"))
                        .send()
                        .await?;
                    let mut chunks = answer.bytes_stream();
                    let until = Instant::now() + Duration::from_secs(12);
                    let mut read = 0usize;
                    while Instant::now() < until {
                        match tokio::time::timeout(Duration::from_secs(1), chunks.next()).await {
                            Ok(Some(chunk)) => read += chunk?.len(),
                            Ok(None) => break,
                            Err(_) => {}
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    anyhow::Ok(read)
                })
            })
            .collect();
        let churn = async {
            let page: Vec<String> = (0..100).map(|i| format!("lock:b{i}")).collect();
            let until = Instant::now() + Duration::from_secs(10);
            let mut round = 0u64;
            while Instant::now() < until {
                round += 1;
                let mut pipe = redis::pipe();
                for key in &page {
                    pipe.cmd("SET")
                        .arg(key)
                        .arg(format!("slow-{round}-{}", "x".repeat(200)))
                        .arg("PX")
                        .arg(3_600_000)
                        .ignore();
                }
                pipe.query_async::<()>(&mut conn).await?;
                // A steady load of ~40 rounds a second rather than a flood: the readers,
                // lockscope and Redis share two cores.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok(round)
        };
        let (rounds, peak_slow) = peak_rss_while(pid, churn).await;
        let rounds = rounds?;
        let mut read = 0usize;
        for s in slow {
            read += s.await.context("slow reader")??;
        }
        let resynced = resyncs(&http, &base).await? - resyncs_before;
        rows.push(row(
            section,
            &format!("{locks} locks: {clients} slowly read views while the page changes, lockscope peak RSS"),
            format!("{:.0} MiB", peak_slow as f64 / 1024.0),
            &format!(
                "{rounds} rounds of 100 changes in 10 s; readers took a chunk every 200 ms ({:.1} MB in all); {resynced} resyncs; goal bounded by a page per client",
                read as f64 / 1e6
            ),
        ));
        streams.insert(
            clients.to_string(),
            json!({
                "first_event_ms": {"p50": percentile(&firsts, 0.5), "max": firsts[firsts.len() - 1]},
                "open_wall_ms": open_wall,
                "rss_ready_kib": rss_ready,
                "rss_peak_open_kib": peak_open,
                "reach_ms": {"p50": percentile(&reach, 0.5), "p99": percentile(&reach, 0.99)},
                "slow": {"rss_peak_kib": peak_slow, "rounds": rounds, "resyncs": resynced, "bytes_read": read},
            }),
        );
    }
    let browser = dashboard_rows(&mut rows, locks, &base, ui, args.browser_runs).await;
    drop(lockscope);
    Ok((
        rows,
        json!({"locks": locks, "pages": pages, "streams": streams, "browser": browser}),
    ))
}

/// The dashboard in Chromium against the lockscope at `base`: its rows, and its JSON figures.
/// A skipped or failed measurement is a row saying why, not an error of the section.
async fn dashboard_rows(
    rows: &mut Vec<Row>,
    locks: usize,
    base: &str,
    ui: Result<std::path::PathBuf, String>,
    runs: usize,
) -> Value {
    let section = "viewers";
    let figure = format!("{locks} locks: dashboard in Chromium, navigation → first rows");
    if let Err(why) = ui {
        eprintln!("viewers: dashboard in Chromium skipped: {why}");
        rows.push(row(section, &figure, "skipped".into(), &why));
        return json!({"skipped": why});
    }
    let measured = match super::browser::first_rows(base, runs, None).await {
        Ok(measured) => measured,
        Err(e) => {
            let why = format!("{e:#}");
            eprintln!("viewers: dashboard in Chromium failed: {why}");
            rows.push(row(section, &figure, "failed".into(), &why));
            return json!({"failed": why});
        }
    };
    let p50_max = |v: &[f64]| (percentile(v, 0.5), v[v.len() - 1]);
    let (cold, cold_max) = p50_max(&measured.cold_ms);
    let (warm, warm_max) = p50_max(&measured.warm_ms);
    let (js, js_max) = p50_max(&measured.js_heap_bytes);
    let (wasm, wasm_max) = p50_max(&measured.wasm_bytes);
    let shown = measured.cold_ms.len();
    let failed = if measured.failed.is_empty() {
        String::new()
    } else {
        format!(
            "; {} runs failed: {}",
            measured.failed.len(),
            measured.failed.join("; ")
        )
    };
    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    rows.push(row(
        section,
        &format!("{figure}, cold p50 / max"),
        format!("{cold:.0} / {cold_max:.0} ms"),
        &format!(
            "{shown} runs, each a fresh browser context (no cache); warm (same context, navigating again) {warm:.0} / {warm_max:.0} ms; timed to the first frame showing a row and the pager (\"{}\"); goal < 1 s{failed}",
            measured.range
        ),
    ));
    rows.push(row(
        section,
        &format!("{locks} locks: dashboard in Chromium once its rows show, JS heap used / wasm memory, p50 / max"),
        format!(
            "{:.1} / {:.1} MiB; {:.1} / {:.1} MiB",
            mib(js),
            mib(js_max),
            mib(wasm),
            mib(wasm_max)
        ),
        "after a GC (CDP Performance.getMetrics JSHeapUsedSize); the wasm memory (where the UI's store lives) never shrinks: the most the page held; goal: only what it shows",
    ));
    json!({
        "runs": shown,
        "cold_ms": {"p50": cold, "max": cold_max},
        "warm_ms": {"p50": warm, "max": warm_max},
        "js_heap_used_bytes": {"p50": js, "max": js_max},
        "wasm_memory_bytes": {"p50": wasm, "max": wasm_max},
        "range": measured.range,
        "failed": measured.failed,
    })
}

/// `lockscope_view_resyncs_total` now.
async fn resyncs(http: &reqwest::Client, base: &str) -> Result<f64> {
    let text = super::metrics_text(http, base).await?;
    Ok(crate::harness::metric_value(&text, "lockscope_view_resyncs_total").unwrap_or(0.0))
}

pub async fn run(bin: &Path, dir: &Path, args: &ViewersArgs) -> Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    for &locks in &args.locks {
        eprintln!("viewers: {locks} Redis locks …");
        let (r, v) = one_size(bin, dir, locks, args).await?;
        rows.extend(r);
        sizes.push(v);
    }
    Ok((rows, Value::Array(sizes)))
}
