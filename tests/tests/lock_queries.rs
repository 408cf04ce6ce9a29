//! `GET /api/v1/locks` as server-side queries, on a real Redis whose locks are taken and released
//! by a client while the pages are read: paging by cursor never repeats a lock of an earlier page
//! and never skips one that stayed; filters, states, sorts, totals and facets; every bad
//! parameter gets the API's JSON 400 naming it; NDJSON streams every matching lock; answers are
//! compressed (gzip, zstd) when the client asks. A live view (`/api/v1/events` with a query)
//! sends its page, a lock entering and leaving it, one lock for the lock page, and a slow client
//! a fresh snapshot instead of a queue.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_tests::harness::{eventually, metric_value, EventReader, Lockscope};
use lockscope_tests::redis_recipes as rr;
use lockscope_tests::support::redis::RedisServer;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
/// Locks that stay held through the whole test.
const STAYING: usize = 300;

fn config(url: &str) -> Config {
    Config {
        sources: section("redis", vec![RedisSourceConfig::new("q", url, &["lock:*"])]),
        ..Config::default()
    }
}

/// The paths of a page and its `next`.
fn paths_and_next(body: &Value) -> Result<(Vec<String>, Option<String>)> {
    let locks = body["locks"].as_array().context("locks")?;
    let paths = locks
        .iter()
        .map(|l| l["path"].as_str().map(str::to_string).context("path"))
        .collect::<Result<Vec<_>>>()?;
    Ok((paths, body["next"].as_str().map(str::to_string)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_filters_and_bad_parameters() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    // Locks that stay, and ones that come and go while the pages are read.
    for i in 0..STAYING {
        ensure!(
            rr::token_lock_acquire(&mut conn, &format!("lock:s{i:04}"), "stay", 600_000).await?
        );
    }
    let ls = Lockscope::start(config(&server.url())).await?;
    ls.wait_ready(WAIT).await?;
    eventually(WAIT, "every staying lock shown", async || {
        let (_, body) = ls.get_json("/api/v1/locks?limit=1").await?;
        Ok((body["total"].as_u64() == Some(STAYING as u64)).then_some(()))
    })
    .await?;

    // Page through 40 at a time, sorted by path, while another client takes and releases locks
    // whose names fall before, between and after the pages.
    let mut seen: Vec<String> = Vec::new();
    let mut path = "/api/v1/locks?limit=40&sort=path".to_string();
    let mut churned = 0;
    loop {
        let (status, body) = ls.get_json(&path).await?;
        ensure!(status == 200, "{path}: {status} {body}");
        let (paths, next) = paths_and_next(&body)?;
        seen.extend(paths);
        for name in [
            format!("lock:a{churned}"),
            format!("lock:s{:04}x", churned * 37 % STAYING),
            format!("lock:z{churned}"),
        ] {
            let token = format!("t{churned}");
            ensure!(rr::token_lock_acquire(&mut conn, &name, &token, 600_000).await?);
            if churned % 2 == 1 {
                ensure!(rr::token_lock_release(&mut conn, &name, &token).await?);
            }
        }
        churned += 1;
        match next {
            Some(cursor) => path = format!("/api/v1/locks?limit=40&sort=path&cursor={cursor}"),
            None => break,
        }
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    ensure!(
        unique.len() == seen.len(),
        "a lock came twice: {} of {}",
        unique.len(),
        seen.len()
    );
    let sorted: Vec<&String> = unique.iter().copied().collect();
    ensure!(
        seen.iter().collect::<Vec<_>>() == sorted,
        "pages out of order"
    );
    for i in 0..STAYING {
        // A Redis lock's path is its key.
        let want = format!("lock:s{i:04}");
        ensure!(unique.contains(&want), "{want} stayed and was skipped");
    }

    // Filters, state, sort by waiters, totals and facets.
    let (status, body) = ls
        .get_json("/api/v1/locks?q=lock:s00&state=held&sort=held_for&limit=5")
        .await?;
    ensure!(status == 200, "{body}");
    ensure!(body["locks"].as_array().map(Vec::len) == Some(5), "{body}");
    let total = body["total"].as_u64().context("total")?;
    ensure!(
        total >= 100,
        "q=lock:s00 matches lock:s0000..s0099 and more: {total}"
    );
    ensure!(
        body["facets"]["source"]["q"].as_u64() == Some(total),
        "{}",
        body["facets"]
    );
    ensure!(
        body["facets"]["state"]["held"].as_u64() == Some(total),
        "{}",
        body["facets"]
    );
    ensure!(
        body["facets"]["backend"]["redis"].as_u64() == Some(total),
        "{}",
        body["facets"]
    );
    let (_, free) = ls.get_json("/api/v1/locks?state=free").await?;
    ensure!(
        free["total"].as_u64() == Some(0),
        "a held token lock is never free: {free}"
    );

    // NDJSON: every matching lock, one per line.
    let body = ls
        .http
        .get(format!("{}/api/v1/locks?format=ndjson&q=lock:s", ls.base))
        .send()
        .await?
        .text()
        .await?;
    let lines: Vec<Value> = body
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    ensure!(lines.len() >= STAYING, "ndjson gave {} locks", lines.len());

    // Compressed when asked: gzip and zstd, each smaller than the plain answer.
    let page = |encoding: Option<&'static str>| {
        let mut request = ls.http.get(format!("{}/api/v1/locks?limit=200", ls.base));
        if let Some(encoding) = encoding {
            request = request.header("accept-encoding", encoding);
        }
        async move {
            let answer = request.send().await?;
            let header = answer
                .headers()
                .get("content-encoding")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            anyhow::Ok((header, answer.bytes().await?))
        }
    };
    let (plain_encoding, plain) = page(None).await?;
    ensure!(plain_encoding.is_none(), "{plain_encoding:?}");
    for (encoding, magic) in [
        ("gzip", &[0x1f, 0x8b][..]),
        ("zstd", &[0x28, 0xb5, 0x2f, 0xfd][..]),
    ] {
        let (header, body) = page(Some(encoding)).await?;
        ensure!(
            header.as_deref() == Some(encoding),
            "{encoding}: {header:?}"
        );
        ensure!(body.starts_with(magic), "{encoding}: not {encoding} data");
        ensure!(
            body.len() * 3 < plain.len(),
            "{encoding}: {} bytes against {} plain",
            body.len(),
            plain.len()
        );
    }

    // Bad parameters: a 400 with the API's error body, naming the parameter.
    let (_, first) = ls.get_json("/api/v1/locks?limit=2").await?;
    let cursor = first["next"].as_str().context("next")?.to_string();
    for (query, parameter) in [
        ("sort=size".to_string(), "sort"),
        ("state=busy".to_string(), "state"),
        ("limit=0".to_string(), "limit"),
        ("limit=1001".to_string(), "limit"),
        ("order=sideways".to_string(), "order"),
        ("cursor=not-a-cursor".to_string(), "cursor"),
        (format!("sort=source&cursor={cursor}"), "cursor"),
        ("format=csv".to_string(), "format"),
        ("colour=red".to_string(), "colour"),
    ] {
        let (status, body) = ls.get_json(&format!("/api/v1/locks?{query}")).await?;
        ensure!(status == 400, "{query}: {status} {body}");
        ensure!(body["parameter"] == parameter, "{query}: {body}");
        ensure!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{query}: {body}"
        );
    }
    drop(ls);
    Ok(())
}

/// The events of a view stream until one named `want` (or any of `|`-separated names) whose
/// data `accept` takes; the others seen on the way (name, data).
async fn until(
    events: &mut EventReader,
    want: &str,
    accept: impl Fn(&Value) -> bool,
) -> Result<Vec<(String, Value)>> {
    let mut seen: Vec<(String, Value)> = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (name, data) = events.next_json(left).await.with_context(|| {
            let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
            format!("waiting for {want}; seen {names:?}")
        })?;
        if want.split('|').any(|w| w == name) && accept(&data) {
            return Ok(seen);
        }
        seen.push((name, data));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_view_sends_its_page_and_resyncs_a_slow_client() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    for i in 0..50 {
        ensure!(rr::token_lock_acquire(&mut conn, &format!("lock:other{i}"), "o", 600_000).await?);
    }
    let ls = Lockscope::start(config(&server.url())).await?;
    ls.wait_ready(WAIT).await?;
    let id = |key: &str| lockscope_model::id::lock_id("q", &format!("/{key}"));

    // A view of the locks whose path holds "view": nothing yet.
    let mut events = EventReader::connect_to(&ls.base, "/api/v1/events?q=view&limit=10").await?;
    let (name, snapshot) = events.next_json(WAIT).await?;
    ensure!(name == "snapshot", "{name}");
    ensure!(
        snapshot["total"] == 0 && snapshot["locks"] == serde_json::json!([]),
        "{snapshot}"
    );
    ensure!(
        snapshot["sources"].as_array().is_some_and(|s| s.len() == 1),
        "{snapshot}"
    );

    // A lock entering the filter is sent; other locks changing are not.
    ensure!(rr::token_lock_acquire(&mut conn, "lock:other-x", "o", 600_000).await?);
    ensure!(rr::token_lock_acquire(&mut conn, "lock:view1", "holder-1", 600_000).await?);
    let seen = until(&mut events, "lock", |d| d["lock"]["id"] == id("lock:view1")).await?;
    ensure!(
        !seen
            .iter()
            .any(|(n, d)| n == "lock" && d["lock"]["path"] != "lock:view1"),
        "a lock outside the view was sent: {seen:?}"
    );
    until(&mut events, "view", |d| d["total"] == 1).await?;
    // ... and leaving it.
    ensure!(rr::token_lock_release(&mut conn, "lock:view1", "holder-1").await?);
    until(&mut events, "removed", |d| d["id"] == id("lock:view1")).await?;
    until(&mut events, "view", |d| d["total"] == 0).await?;

    // The lock page's view: one lock.
    ensure!(rr::token_lock_acquire(&mut conn, "lock:view2", "holder-2", 600_000).await?);
    let mut one = EventReader::connect_to(
        &ls.base,
        &format!("/api/v1/events?lock={}", id("lock:view2")),
    )
    .await?;
    // (In its snapshot if lockscope had it by then, else as it comes.)
    let (name, page) = one.next_json(WAIT).await?;
    ensure!(
        name == "snapshot" && page["total"].as_u64() <= Some(1),
        "{page}"
    );
    if page["locks"][0]["holders"][0]["node"] != "holder-2" {
        until(&mut one, "lock", |d| {
            d["lock"]["holders"][0]["node"] == "holder-2"
        })
        .await?;
    }

    // A bad parameter is the API's 400, before any stream.
    let (status, body) = ls.get_json("/api/v1/events?sort=size").await?;
    ensure!(
        status == 400 && body["parameter"] == "sort",
        "{status} {body}"
    );

    // A slow client: a view of 1,000 locks that keep changing while it reads nothing. What it
    // holds unread passes the bound, lockscope queues nothing more for it (and counts it), and
    // once it reads again it is sent a fresh snapshot.
    let names: Vec<String> = (0..1000).map(|i| format!("lock:slow{i:04}")).collect();
    for key in &names {
        ensure!(rr::token_lock_acquire(&mut conn, key, "start", 600_000).await?);
    }
    let mut slow = EventReader::connect_to(&ls.base, "/api/v1/events?q=slow&limit=1000").await?;
    until(&mut slow, "snapshot|view", |d| d["total"] == 1000).await?;
    let mut round = 0usize;
    eventually(
        WAIT,
        "lockscope stops queueing for a slow client",
        async || {
            // 60 locks get a new holder, ~1 kB each.
            round += 1;
            let mut pipe = redis::pipe();
            for key in names.iter().cycle().skip(round * 60).take(60) {
                pipe.cmd("SET")
                    .arg(key)
                    .arg(format!("{round}-{}", "x".repeat(1000)))
                    .arg("PX")
                    .arg(600_000)
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
            let text = ls
                .http
                .get(format!("{}/metrics", ls.base))
                .send()
                .await?
                .text()
                .await?;
            Ok(metric_value(&text, "lockscope_view_resyncs_total")
                .is_some_and(|n| n >= 1.0)
                .then_some(()))
        },
    )
    .await?;
    until(&mut slow, "snapshot", |d| d["total"] == 1000).await?;
    drop(ls);
    Ok(())
}

/// A compressed event stream read as it comes: each chunk decoded at once, events split off.
struct Compressed {
    chunks: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    decoder: Box<dyn std::io::Write + Send>,
    text: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

/// A `Write` into a shared buffer (what the decoder writes to).
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Compressed {
    async fn open(base: &str, path: &str, encoding: &str) -> Result<Compressed> {
        let answer = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .header("accept-encoding", encoding)
            .send()
            .await?;
        let got = answer
            .headers()
            .get("content-encoding")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        ensure!(
            got == encoding,
            "content-encoding {got:?}, asked {encoding}"
        );
        let text = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = Shared(text.clone());
        let decoder: Box<dyn std::io::Write + Send> = match encoding {
            "gzip" => Box::new(flate2::write::GzDecoder::new(sink)),
            _ => Box::new(zstd::stream::write::Decoder::new(sink)?),
        };
        Ok(Compressed {
            chunks: Box::pin(answer.bytes_stream()),
            decoder,
            text,
        })
    }

    /// The next event (name, data), decoded from what has arrived; waits for more bytes only
    /// when no whole event has been decoded yet.
    async fn next(&mut self) -> Result<(String, Value)> {
        use futures::StreamExt;
        use std::io::Write;
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            {
                let mut text = self.text.lock().expect("text");
                if let Some(end) = text.windows(2).position(|w| w == b"\n\n") {
                    let block: Vec<u8> = text.drain(..end + 2).collect();
                    let block = String::from_utf8(block)?;
                    let mut name = String::new();
                    let mut data = String::new();
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event: ") {
                            name = v.to_string();
                        } else if let Some(v) = line.strip_prefix("data: ") {
                            data.push_str(v);
                        }
                    }
                    if data.is_empty() {
                        continue;
                    }
                    return Ok((name, serde_json::from_str(&data)?));
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.chunks.next())
                .await
                .context("no whole event decoded in time")?
                .context("stream ended")??;
            self.decoder.write_all(&chunk)?;
            self.decoder.flush()?;
        }
    }

    async fn until(&mut self, want: &str, accept: impl Fn(&Value) -> bool) -> Result<()> {
        loop {
            let (name, data) = self.next().await?;
            if name == want && accept(&data) {
                return Ok(());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_live_view_arrives_a_push_at_a_time() -> Result<()> {
    let server = RedisServer::start().await?;
    let mut conn = server.connection().await?;
    let ls = Lockscope::start(config(&server.url())).await?;
    ls.wait_ready(WAIT).await?;
    for encoding in ["gzip", "zstd"] {
        let mut stream =
            Compressed::open(&ls.base, &format!("/api/v1/events?q={encoding}"), encoding).await?;
        stream.until("snapshot", |_| true).await?;
        // Each change is read back, decoded, before the next one is made: the push was flushed.
        for i in 0..3 {
            let key = format!("lock:{encoding}{i}");
            ensure!(rr::token_lock_acquire(&mut conn, &key, "t", 600_000).await?);
            stream
                .until("lock", |d| d["lock"]["path"] == key.as_str())
                .await
                .with_context(|| format!("{encoding}: {key}"))?;
        }
    }
    drop(ls);
    Ok(())
}
