//! lockscope against hostile and careless clients (issue 35, items 3 and 4; rows 4–6 of its
//! table), a real lockscope process watching a real Redis each time:
//!
//! * a burst of wrong bearer tokens from one address verifies at most that address's budget of
//!   bcrypt hashes (tries in flight count), while `/healthz` and a reader with the right token,
//!   from another address, are answered at once;
//! * a burst of force releases with wrong admin tokens stores at most the promised audit
//!   records (one per try up to the budget, then one a minute), whatever the concurrency;
//! * thousands of connections that never finish their request head are closed by the
//!   header-read timeout, while `/healthz` answers; past `max_connections` the headless ones
//!   make room first;
//! * every answer carries the security headers; `/metrics` is as closed as the reads; event
//!   streams are capped per address and distinct live views in all.
//!
//! Timings are printed as the figures README's reliability table gives. A second client binds
//! `127.0.0.2` (all of 127/8 reaches the loopback listener) to see what everyone else gets while
//! one address floods.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use lockscope::config::{section, AuthConfig, Config, HashedToken, RedisSourceConfig};
use lockscope_tests::harness::{eventually, metric_value, Lockscope};
use lockscope_tests::support::process::LockscopeProcess;
use lockscope_tests::support::redis::RedisServer;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The budget of failed authentications per address and minute in these tests.
const BUDGET: usize = 10;
/// How long a fact may take to show.
const WAIT: Duration = Duration::from_secs(45);

fn redis_toml(redis: &RedisServer) -> String {
    format!(
        "[[redis]]\nname = \"r\"\nurl = \"{}\"\npatterns = [\"lock:*\"]\n",
        redis.url()
    )
}

/// A client whose connections come from `127.0.0.2`, answering within `timeout`.
fn other_client(timeout: Duration) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, 2]))
        .timeout(timeout)
        .build()?)
}

/// The budget may refill during a burst (`BUDGET` a minute, continuously): what a burst of
/// `took` may let through at most.
fn budget_over(took: Duration) -> usize {
    BUDGET + (took.as_secs_f64() * BUDGET as f64 / 60.0).ceil() as usize
}

/// Probes `/healthz` from `127.0.0.2` until `done`, at least `min` times; the slowest answer.
async fn probe_health(base: String, done: Arc<AtomicBool>, min: usize) -> Result<Duration> {
    let client = other_client(Duration::from_secs(2))?;
    let mut slowest = Duration::ZERO;
    let mut probes = 0;
    while probes < min || !done.load(Ordering::SeqCst) {
        let start = Instant::now();
        let answer = client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .context("/healthz did not answer within 2 s from another address")?;
        ensure!(answer.status() == 200, "/healthz: {}", answer.status());
        slowest = slowest.max(start.elapsed());
        probes += 1;
        if probes >= 1000 {
            break;
        }
    }
    Ok(slowest)
}

/// Three hundred reads with wrong bearer tokens at once from one address (bcrypt cost 10, a
/// budget of ten a minute): at most the budget is verified (each a 401), the rest are refused
/// before their token is looked at (429) — counted from the moment a try begins, not when it
/// ends. Meanwhile `/healthz` from another address answers within 2 s each time, and a reader
/// there with the right token is let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_wrong_bearer_tokens_verifies_at_most_the_budget() -> Result<()> {
    let redis = RedisServer::start().await?;
    let hash = bcrypt::hash("grafana-read-token-0123", 10)?;
    let config = format!(
        "{}[http.read_auth]\nbearer_tokens = [{{ name = \"grafana\", token_hash = \"{hash}\" }}]\n\
         [admin]\nmax_failed_auth_per_minute = {BUDGET}\n",
        redis_toml(&redis)
    );
    // Ready by `/readyz` (open): the sources list needs the read token.
    let ls = LockscopeProcess::spawn_only("auth-flood", &config, &[])?;
    let base = ls.api().base.clone();
    let probe = reqwest::Client::new();
    eventually(WAIT, "ready", async || {
        let ready = probe.get(format!("{base}/readyz")).send().await;
        Ok(ready.is_ok_and(|r| r.status() == 200).then_some(()))
    })
    .await
    .map_err(|e| ls.explain(e))?;
    let flood = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let done = Arc::new(AtomicBool::new(false));
    let health = tokio::spawn(probe_health(base.clone(), done.clone(), 3));
    let start = Instant::now();
    let requests = (0..300).map(|i| {
        let (flood, url) = (flood.clone(), format!("{base}/api/v1/locks"));
        async move {
            let answer = flood
                .get(url)
                .bearer_auth(format!("wrong-token-{i}"))
                .send()
                .await?;
            anyhow::Ok(answer.status().as_u16())
        }
    });
    let burst = tokio::spawn(futures::future::join_all(requests));
    // A reader with the right token, from elsewhere, during the burst.
    let reader = other_client(Duration::from_secs(10))?
        .get(format!("{base}/api/v1/locks"))
        .bearer_auth("grafana-read-token-0123")
        .send()
        .await
        .context("the right token's read")?;
    let statuses: Vec<u16> = burst
        .await?
        .into_iter()
        .collect::<Result<_>>()
        .map_err(|e| ls.explain(e))?;
    let took = start.elapsed();
    done.store(true, Ordering::SeqCst);
    let slowest = health.await??;
    let verified = statuses.iter().filter(|s| **s == 401).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    println!(
        "figure: 300 wrong tokens at once: {verified} verified (401), {refused} refused before \
         verification (429), burst {took:?}; /healthz from another address at most {slowest:?}; \
         the right token's read {}",
        reader.status()
    );
    ensure!(
        statuses.iter().all(|s| [401, 429, 503].contains(s)),
        "{statuses:?}"
    );
    ensure!(
        verified <= budget_over(took),
        "{verified} wrong tokens were verified; the budget is {BUDGET} a minute"
    );
    ensure!(
        reader.status() == 200,
        "the right token: {}",
        reader.status()
    );
    Ok(())
}

/// Two hundred force releases with wrong admin tokens at once from one address: README promises
/// an audit record per request up to the budget, then one a minute — the store holds no more,
/// and every attempt is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_wrong_admin_tokens_stores_only_the_promised_records() -> Result<()> {
    let redis = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let hash = bcrypt::hash("oncall-admin-token-0123", 10)?;
    let config = format!(
        "{}[admin]\nenabled = true\nmax_failed_auth_per_minute = {BUDGET}\n\
         tokens = [{{ name = \"oncall\", token_hash = \"{hash}\" }}]\n[store]\npath = {:?}\n",
        redis_toml(&redis),
        dir.path().join("lockscope.db").display().to_string()
    );
    let ls = LockscopeProcess::start("admin-flood", &config, &[]).await?;
    let base = ls.api().base.clone();
    let flood = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let id = lockscope_model::id::lock_id("r", "/lock:a");
    let start = Instant::now();
    let requests = (0..200).map(|i| {
        let flood = flood.clone();
        let url = format!("{base}/api/v1/locks/{id}/release");
        async move {
            let answer = flood
                .post(url)
                .bearer_auth(format!("guess-{i}"))
                .json(&json!({"holder": "h", "reason": "guess"}))
                .send()
                .await?;
            anyhow::Ok(answer.status().as_u16())
        }
    });
    let statuses: Vec<u16> = futures::future::join_all(requests)
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let took = start.elapsed();
    // Read from another address: this one has no tries left.
    let reader = other_client(Duration::from_secs(10))?;
    let audit: Value = reader
        .get(format!("{base}/api/v1/audit?limit=1000"))
        .send()
        .await?
        .json()
        .await?;
    let records = audit["audit"].as_array().context("audit records")?;
    let from_flood = records
        .iter()
        .filter(|r| r["client"] == "127.0.0.1")
        .count();
    let metrics = reader
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let counted: f64 = ["forbidden", "rate_limited", "unavailable"]
        .iter()
        .filter_map(|o| {
            metric_value(
                &metrics,
                &format!("lockscope_force_releases_total{{outcome=\"{o}\"}}"),
            )
        })
        .sum();
    println!(
        "figure: 200 wrong admin tokens at once: {from_flood} audit records stored, burst {took:?}"
    );
    ensure!(
        statuses.iter().all(|s| [403, 429, 503].contains(s)),
        "{statuses:?}"
    );
    // Up to the budget (and what refilled during the burst) one each, then one a minute.
    ensure!(
        from_flood <= budget_over(took) + 1,
        "{from_flood} records stored from one address within the minute"
    );
    ensure!(
        counted == 200.0,
        "every attempt counted: {counted}\n{metrics}"
    );
    Ok(())
}

/// Opens `n` connections to `addr` that send part of a request head and nothing more.
async fn headless(addr: &str, n: usize) -> Result<Vec<tokio::net::TcpStream>> {
    let mut conns = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let opened = futures::future::join_all(chunk.iter().map(|_| async {
            let mut conn = tokio::net::TcpStream::connect(addr).await?;
            conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: lockscope\r\nX-Slow: ")
                .await?;
            anyhow::Ok(conn)
        }))
        .await;
        for conn in opened {
            conns.push(conn?);
        }
    }
    Ok(conns)
}

/// Waits (at most `within`) until the server closed `conn`; whether it did.
async fn closed_by_server(mut conn: tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// Three thousand connections that never finish their request head: `/healthz` from another
/// address answers within 2 s meanwhile, and lockscope closes every one of them by its header
/// read timeout (10 s by default), all within 45 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_that_never_finish_their_head_are_closed_by_the_timeout() -> Result<()> {
    let redis = RedisServer::start().await?;
    let ls = LockscopeProcess::start("slow-heads", &redis_toml(&redis), &[]).await?;
    let base = ls.api().base.clone();
    let addr = base.trim_start_matches("http://").to_string();
    let start = Instant::now();
    let conns = headless(&addr, 3000).await?;
    let opened = start.elapsed();
    let done = Arc::new(AtomicBool::new(false));
    let health = tokio::spawn(probe_health(base.clone(), done.clone(), 5));
    let waits = conns
        .into_iter()
        .map(|c| closed_by_server(c, WAIT.saturating_sub(start.elapsed())));
    let closed = futures::future::join_all(waits).await;
    let all_closed = start.elapsed();
    done.store(true, Ordering::SeqCst);
    let slowest = health.await??;
    let open = closed.iter().filter(|c| !**c).count();
    let counted = ls
        .api()
        .metric("lockscope_http_connections_closed_total{reason=\"header_timeout\"}")
        .await?
        .unwrap_or(0.0);
    println!(
        "figure: 3000 connections without a whole head (opened in {opened:?}): all closed \
         {all_closed:?} after the first opened; /healthz from another address at most {slowest:?}"
    );
    ensure!(
        open == 0,
        "{open} of 3000 connections still open after {WAIT:?}"
    );
    ensure!(counted >= 3000.0, "closed for header_timeout: {counted}");
    Ok(())
}

/// With `max_connections = 40` and a minute's header timeout, fifty connections that never
/// finish their head do not keep anyone out: each new connection past the cap closes the oldest
/// of them, and an open event stream (a whole request, being answered) is never chosen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_max_connections_headless_connections_make_room_first() -> Result<()> {
    let redis = RedisServer::start().await?;
    let config = format!(
        "{}[http]\nmax_connections = 40\nheader_read_timeout = \"60s\"\n",
        redis_toml(&redis)
    );
    let ls = LockscopeProcess::start("conn-cap", &config, &[]).await?;
    let base = ls.api().base.clone();
    let addr = base.trim_start_matches("http://").to_string();
    let stream = reqwest::Client::new()
        .get(format!("{base}/api/v1/events"))
        .send()
        .await?;
    ensure!(stream.status() == 200);
    let mut stream = stream.bytes_stream();
    let first = stream.next().await.context("the stream's snapshot")??;
    ensure!(String::from_utf8_lossy(&first).contains("snapshot"));
    let conns = headless(&addr, 50).await?;
    // At the cap: an answer needs a headless connection's room.
    let client = other_client(Duration::from_secs(5))?;
    for _ in 0..3 {
        let answer = client
            .get(format!("{base}/healthz"))
            .header("connection", "close")
            .send()
            .await
            .context("/healthz at the connection cap")?;
        ensure!(answer.status() == 200);
    }
    let mut last = String::new();
    let evicted = eventually(WAIT, "evictions counted", async || {
        let text = client
            .get(format!("{base}/metrics"))
            .header("connection", "close")
            .send()
            .await?
            .text()
            .await?;
        let evicted = metric_value(
            &text,
            "lockscope_http_connections_closed_total{reason=\"evicted\"}",
        );
        last = text;
        Ok(evicted.filter(|n| *n >= 11.0))
    })
    .await
    .map_err(|e| {
        e.context(
            last.lines()
                .filter(|l| l.contains("http_conn"))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    let closed = futures::future::join_all(
        conns
            .into_iter()
            .map(|c| closed_by_server(c, Duration::from_millis(200))),
    )
    .await
    .into_iter()
    .filter(|c| *c)
    .count();
    ensure!(
        closed >= 11,
        "only {closed} headless connections were closed"
    );
    // The stream was answering: it is still open (a change reaches it).
    let mut conn = redis.connection().await?;
    redis::cmd("SET")
        .arg("lock:cap")
        .arg("t")
        .query_async::<()>(&mut conn)
        .await?;
    let seen = tokio::time::timeout(WAIT, async {
        while let Some(chunk) = stream.next().await {
            if String::from_utf8_lossy(&chunk?).contains("lock:cap") {
                return anyhow::Ok(true);
            }
        }
        Ok(false)
    })
    .await
    .context("the stream saw no change")??;
    ensure!(seen, "the open event stream was closed");
    println!("figure: at max_connections 40: {evicted} headless connections evicted, {closed} seen closed; the event stream kept");
    Ok(())
}

/// A client that opens the full event stream and stops reading (its receive window a few kB):
/// once the snapshot fills the socket's buffers no byte moves, and `idle_timeout` (3 s here)
/// closes the connection, where before it was held for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_stops_reading_is_cut_by_the_idle_timeout() -> Result<()> {
    let redis = RedisServer::start().await?;
    let mut conn = redis.connection().await?;
    // About 10 MB of snapshot: more than loopback's socket buffers hold.
    for chunk in (0..20_000).collect::<Vec<_>>().chunks(5_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("SET")
                .arg(format!("lock:idle:{i:06}:{}", "x".repeat(200)))
                .arg(format!("token-{i}"))
                .arg("PX")
                .arg(600_000)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await?;
    }
    let config = format!("{}[http]\nidle_timeout = \"3s\"\n", redis_toml(&redis));
    let ls = LockscopeProcess::start("idle-cut", &config, &[]).await?;
    let addr: std::net::SocketAddr = ls.api().base.trim_start_matches("http://").parse()?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut stalled = socket.connect(addr).await?;
    stalled
        .write_all(b"GET /api/v1/events HTTP/1.1\r\nHost: lockscope\r\n\r\n")
        .await?;
    let start = Instant::now();
    let cut = eventually(WAIT, "the stalled stream cut by idle_timeout", async || {
        Ok(ls
            .api()
            .metric("lockscope_http_connections_closed_total{reason=\"idle_timeout\"}")
            .await?
            .filter(|n| *n >= 1.0))
    })
    .await?;
    println!(
        "figure: a stream client that stopped reading was cut {:?} after it asked (idle_timeout 3 s)",
        start.elapsed()
    );
    ensure!(cut >= 1.0);
    // The server's side is gone: what was buffered drains, then the end.
    ensure!(
        closed_by_server(stalled, WAIT).await,
        "the stalled connection is still open"
    );
    Ok(())
}

/// An in-process lockscope on `redis` with `http` settings applied.
async fn with_http(redis: &RedisServer, http: impl FnOnce(&mut Config)) -> Result<Lockscope> {
    let mut config = Config {
        sources: section(
            "redis",
            vec![RedisSourceConfig::new("r", &redis.url(), &["lock:*"])],
        ),
        ..Config::default()
    };
    http(&mut config);
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

/// Every answer — the dashboard's page, the API's page, JSON, a 404 — carries the security
/// headers; the dashboard's page allows its own inline scripts by hash only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_the_security_headers() -> Result<()> {
    let redis = RedisServer::start().await?;
    let ls = with_http(&redis, |_| {}).await?;
    for path in [
        "/",
        "/api-docs",
        "/api/v1/locks",
        "/api/v1/nothing",
        "/healthz",
    ] {
        let answer = ls.http.get(format!("{}{path}", ls.base)).send().await?;
        let header = |name: &str| {
            answer
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let csp = header("content-security-policy");
        ensure!(
            csp.contains("frame-ancestors 'none'")
                && csp.contains("script-src 'self' 'wasm-unsafe-eval'")
                && !csp.contains("'unsafe-eval'")
                && header("x-content-type-options") == "nosniff"
                && header("x-frame-options") == "DENY"
                && header("referrer-policy") == "no-referrer",
            "{path}: {:?}",
            answer.headers()
        );
        if path == "/" && answer.status() == 200 {
            ensure!(csp.contains("'sha256-"), "{path}: {csp}");
            // A revalidation's 304 carries the page's own policy: its headers replace the
            // cached answer's in the browser.
            let etag = header("etag");
            let again = ls
                .http
                .get(format!("{}/", ls.base))
                .header("if-none-match", etag)
                .send()
                .await?;
            let policy = again
                .headers()
                .get("content-security-policy")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            ensure!(again.status() == 304 && policy == csp, "{again:?}");
        }
    }
    Ok(())
}

/// With read credentials, `/metrics` (whose labels name lock paths) needs them too, unless
/// `metrics_open` says otherwise; the probes stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_as_closed_as_the_reads_unless_opened() -> Result<()> {
    let redis = RedisServer::start().await?;
    let read = |config: &mut Config| {
        config.http.read_auth = Some(AuthConfig {
            bearer_tokens: vec![HashedToken {
                name: "grafana".into(),
                token_hash: bcrypt::hash("read-token-0123", 4).unwrap_or_default(),
            }],
            ..AuthConfig::default()
        });
    };
    let ls = with_http(&redis, read).await?;
    let get = async |ls: &Lockscope, path: &str, token: Option<&str>| {
        let mut request = ls.http.get(format!("{}{path}", ls.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        anyhow::Ok(request.send().await?.status().as_u16())
    };
    ensure!(get(&ls, "/metrics", None).await? == 401);
    ensure!(get(&ls, "/metrics", Some("read-token-0123")).await? == 200);
    ensure!(get(&ls, "/healthz", None).await? == 200);
    ensure!(get(&ls, "/readyz", None).await? == 200);
    let opened = with_http(&redis, |config| {
        read(config);
        config.http.metrics_open = true;
    })
    .await?;
    ensure!(get(&opened, "/metrics", None).await? == 200);
    ensure!(get(&opened, "/api/v1/locks", None).await? == 401);
    Ok(())
}

/// Opens an event stream at `path` from `client`: its status, and its body when it is 200.
async fn open_stream(
    client: &reqwest::Client,
    base: &str,
    path: &str,
) -> Result<(u16, Option<reqwest::Response>)> {
    let answer = client.get(format!("{base}{path}")).send().await?;
    let status = answer.status().as_u16();
    Ok((status, (status == 200).then_some(answer)))
}

/// Event streams are capped per address (`max_streams_per_client`), and distinct live views in
/// all (`max_live_views`): a new view past the cap ends the least recently opened one, whose
/// stream closes (its client reconnects), so many different filters cannot starve the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_per_address_and_distinct_live_views_are_capped() -> Result<()> {
    let redis = RedisServer::start().await?;
    let ls = with_http(&redis, |config| {
        config.http.max_streams_per_client = 3;
        config.http.max_live_views = 2;
    })
    .await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3600))
        .build()?;
    let (a, first) = open_stream(&client, &ls.base, "/api/v1/events?q=a").await?;
    let (b, _second) = open_stream(&client, &ls.base, "/api/v1/events?q=b").await?;
    ensure!(a == 200 && b == 200, "{a} {b}");
    // Read the first view's snapshot, then open a third distinct view: the first one ends.
    let mut first = first.context("first stream")?.bytes_stream();
    let snapshot = first.next().await.context("the first view's snapshot")??;
    ensure!(String::from_utf8_lossy(&snapshot).contains("snapshot"));
    let (c, _third) = open_stream(&client, &ls.base, "/api/v1/events?q=c").await?;
    ensure!(c == 200, "{c}");
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(chunk) = first.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;
    ensure!(
        ended.is_ok(),
        "the least recently opened view was not ended"
    );
    // Three streams from this address are open now (b, c and the full stream below is the
    // third); a fourth is refused with a JSON 429 naming the setting.
    // (The ended view's slot is given back once the server has dropped its answer.)
    let _full = eventually(WAIT, "a third stream from this address", async || {
        let (status, body) = open_stream(&client, &ls.base, "/api/v1/events").await?;
        ensure!([200, 429].contains(&status), "{status}");
        Ok(body)
    })
    .await?;
    let refused = client
        .get(format!("{}/api/v1/events", ls.base))
        .send()
        .await?;
    ensure!(refused.status() == 429, "{}", refused.status());
    let body: Value = refused.json().await?;
    ensure!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("max_streams_per_client")),
        "{body}"
    );
    // Another address has its own streams.
    let (other, _other) = open_stream(
        &other_client(Duration::from_secs(3600))?,
        &ls.base,
        "/api/v1/events",
    )
    .await?;
    ensure!(other == 200, "{other}");
    Ok(())
}
