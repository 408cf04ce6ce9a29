//! The HTTP boundary, driven with `Router::oneshot` over a real aggregator that is fed the updates
//! a collector would send: JSON shapes, 404s, readiness, the SSE stream, and `/metrics` (checked
//! with the real `promtool` when it is installed).

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::StreamExt;
use lockscope::backends::zookeeper::{EnsembleReport, ZkUpdate};
use lockscope::config::ZkSourceConfig;
use lockscope_model::zk::NodeMeta;
use serde_json::{json, Value};
use tower::ServiceExt;

mod common;

use common::Fixture;

fn fixture(max_labels: usize) -> Fixture<ZkUpdate> {
    common::zk_fixture(
        &ZkSourceConfig::new("zk", "127.0.0.1:1", &["/locks"]),
        max_labels,
    )
}

fn node(owner: i64, ctime: i64) -> NodeMeta {
    NodeMeta {
        ctime_ms: ctime,
        ephemeral_owner: owner,
        czxid: ctime,
        version: 0,
        data_len: 0,
        data: None,
    }
}

/// The first `released` event of a lock detail (`null` when there is none).
fn release_event(detail: &Value) -> Value {
    detail["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["kind"] == "released"))
        .cloned()
        .unwrap_or_default()
}

fn now() -> i64 {
    lockscope::now_ms()
}

#[tokio::test]
async fn locks_detail_404_sessions_and_readiness() {
    let f = fixture(500);
    let (status, body) = f.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(f.get("/healthz").await.0, StatusCode::OK);
    let t = now() - 5_000;
    f.send(ZkUpdate::Resync {
        nodes: vec![
            ("/locks".into(), node(0, t)),
            ("/locks/q".into(), node(0, t)),
            ("/locks/q/lock-0000000001".into(), node(0x11, t)),
            ("/locks/q/lock-0000000002".into(), node(0x22, t + 1_000)),
        ],
        unreadable: vec![],
    })
    .await;
    f.send(ZkUpdate::Status {
        up: true,
        error: None,
        last_seen_ms: None,
    })
    .await;
    assert_eq!(f.get("/readyz").await.0, StatusCode::OK);

    let (status, body) = f.json("/api/v1/locks").await;
    assert_eq!(status, StatusCode::OK);
    let lock = &body["locks"][0];
    assert_eq!(lock["id"], "zk~locks~q");
    assert_eq!(lock["backend"], "zookeeper");
    assert_eq!(lock["recipe"], "queue");
    assert_eq!(lock["holders"][0]["session"], "0x11");
    assert_eq!(
        lock["holders"][0]["since_ms"], t,
        "bootstrap hold time starts at ctime"
    );
    assert!(lock["holders"][0]["held_ms"].as_i64().unwrap_or(0) >= 5_000);
    assert_eq!(lock["waiters"][0]["position"], 1);
    assert!(lock["waiters"][0]["waited_ms"].as_i64().unwrap_or(0) >= 4_000);
    assert_eq!(lock["herd"], false);

    // The wait-for graph a page at a time: 0x22 waits on the lock 0x11 holds, since its node
    // was made.
    let (status, graph) = f.json("/api/v1/waitfor?source=zk&limit=10").await;
    assert_eq!(status, StatusCode::OK, "{graph}");
    assert_eq!(graph["total"], 1, "{graph}");
    let edge = &graph["edges"][0];
    assert_eq!(
        (&edge["waiter"], &edge["holder"], &edge["lock"]),
        (&json!("0x22"), &json!("0x11"), &json!("zk~locks~q")),
        "{graph}"
    );
    assert_eq!(edge["waiting_since_ms"], t + 1_000, "{graph}");
    assert_eq!(edge["in_cycle"], false);
    assert_eq!(
        graph["sessions"].as_array().map(Vec::len),
        Some(2),
        "{graph}"
    );
    assert_eq!(graph["next"], Value::Null);
    assert_eq!(graph["cycles"], json!([]));
    assert_eq!(graph["cycles_total"], 0);
    let (status, body) = f.json("/api/v1/waitfor?sort=longest").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["parameter"], "sort", "{body}");

    // The holder goes; the waiter holds from now, and the release waits for its cause.
    f.remove("/locks/q/lock-0000000001").await;
    let (_, detail) = f.json("/api/v1/locks/zk~locks~q").await;
    assert_eq!(detail["holders"][0]["session"], "0x22");
    assert!(detail["holders"][0]["held_ms"].as_i64().unwrap_or(i64::MAX) < 2_000);
    let kinds: Vec<&str> = detail["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"acquired"), "{detail}");
    // The ensemble says 0x11 still lives (its leader's session tracker lists it): a plain
    // release.
    f.send(ZkUpdate::Ensemble(EnsembleReport {
        started_ms: now() + 1_000,
        at_ms: now() + 1_010,
        members: 1,
        members_answering: 1,
        connections: [(0x11, (0, Some(4000))), (0x22, (0, Some(6000)))]
            .into_iter()
            .collect(),
        live_sessions: Some([(0x11, None), (0x22, None)].into_iter().collect()),
        unnamed_child_watches: vec![0],
        data_watchers: [(
            "/locks/q/lock-0000000002".to_string(),
            [0x33, 0x44].into_iter().collect(),
        )]
        .into_iter()
        .collect(),
        ..EnsembleReport::default()
    }))
    .await;
    let (_, detail) = f.json("/api/v1/locks/zk~locks~q").await;
    assert_eq!(release_event(&detail)["cause"], "released", "{detail}");
    // Two sessions watch the holder: a herd.
    assert_eq!(detail["watchers"], 2);
    assert_eq!(detail["herd"], true);

    let (status, body) = f.json("/api/v1/locks/zk~nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"]
        .as_str()
        .unwrap_or_default()
        .contains("zk~nope"));
    let (status, body) = f.json("/api/v1/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].is_string());

    let (_, body) = f.json("/api/v1/sessions").await;
    assert_eq!(body["total"], 2, "{body}");
    assert_eq!(body["next"], Value::Null, "{body}");
    assert_eq!(body["facets"]["source"]["zk"], 2, "{body}");
    assert_eq!(body["facets"]["kind"]["zookeeper_session"], 2, "{body}");
    let sessions = body["sessions"].as_array().expect("sessions");
    let s22 = sessions
        .iter()
        .find(|s| s["session"] == "0x22")
        .expect("0x22");
    assert_eq!(s22["timeout_ms"], 6000);
    assert_eq!(s22["holds"][0], "zk~locks~q");
    assert_eq!(s22["source"], "zk");
    let (_, body) = f.json("/api/v1/sessions?q=X22&state=holding&limit=1").await;
    assert_eq!(body["total"], 1, "{body}");
    assert_eq!(body["sessions"][0]["session"], "0x22", "{body}");
    let (_, body) = f.json("/api/v1/sessions?limit=1").await;
    assert_eq!(body["sessions"][0]["session"], "0x11", "{body}");
    let next = body["next"].as_str().expect("a second page");
    let (_, body) = f
        .json(&format!("/api/v1/sessions?limit=1&cursor={next}"))
        .await;
    assert_eq!(body["sessions"][0]["session"], "0x22", "{body}");
    assert_eq!(body["next"], Value::Null, "{body}");
    let (status, body) = f.json("/api/v1/sessions?state=held").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["parameter"], "state", "{body}");

    let (_, body) = f.json("/api/v1/locks?recipe=curator_mutex").await;
    assert_eq!(body["locks"].as_array().map(Vec::len), Some(0));
    let (_, body) = f.json("/api/v1/locks?source=zk&q=/locks/q").await;
    assert_eq!(body["locks"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn event_stream_sends_snapshot_then_changes() {
    let f = fixture(500);
    let t = now();
    f.send(ZkUpdate::Resync {
        nodes: vec![
            ("/locks".into(), node(0, t)),
            ("/locks/a".into(), node(0x1, t)),
        ],
        unreadable: vec![],
    })
    .await;
    f.send(ZkUpdate::Status {
        up: true,
        error: None,
        last_seen_ms: None,
    })
    .await;
    assert!(f.handle.settled(Duration::from_secs(10)).await);
    let app = lockscope::http::app(f.handle.clone(), Default::default());
    let mut stream = EventStream::open(&app).await;
    let mut next = async || stream.next().await;
    let (name, snapshot) = next().await;
    assert_eq!(name, "snapshot");
    assert_eq!(snapshot["locks"][0]["id"], "zk~locks~a");
    assert_eq!(snapshot["sources"][0]["name"], "zk");

    f.send(ZkUpdate::Upsert {
        path: "/locks/b".into(),
        meta: node(0x2, now()),
    })
    .await;
    let (name, event) = next().await;
    assert_eq!(name, "lock");
    assert_eq!(event["lock"]["id"], "zk~locks~b");
    f.remove("/locks/a").await;
    let (name, event) = next().await;
    assert_eq!(name, "removed");
    assert_eq!(event["id"], "zk~locks~a");
    // A client connecting now gets a snapshot with the change, not the first client's.
    let mut late = EventStream::open(&app).await;
    let (name, snapshot) = late.next().await;
    assert_eq!(name, "snapshot");
    let ids: Vec<&str> = snapshot["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter_map(|l| l["id"].as_str())
        .collect();
    assert_eq!(ids, ["zk~locks~b"]);
}

/// `GET /api/v1/events` read block by block; `source` events are skipped (their counters
/// change with every lock count; these tests follow locks).
struct EventStream {
    body: axum::body::BodyDataStream,
    buffer: String,
}

impl EventStream {
    async fn open(app: &axum::Router) -> EventStream {
        let resp = app
            .clone()
            .oneshot(
                Request::builder()
                    .uri("/api/v1/events")
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("response");
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        EventStream {
            body: resp.into_body().into_data_stream(),
            buffer: String::new(),
        }
    }

    async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let name = block
                    .lines()
                    .find_map(|l| l.strip_prefix("event:"))
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                let data: String = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if !data.is_empty() && name != "source" {
                    return (name, serde_json::from_str(&data).expect("json"));
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(5), self.body.next())
                .await
                .expect("event in time")
                .expect("open")
                .expect("chunk");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

#[tokio::test]
async fn metrics_fold_labels_past_the_cap_and_pass_promtool() {
    let f = fixture(3);
    let t = now();
    let mut nodes = vec![("/locks".to_string(), node(0, t))];
    for i in 0..5 {
        nodes.push((format!("/locks/l{i}"), node(0x10 + i, t)));
    }
    nodes.push(("/locks/we\"ird\\name".to_string(), node(0x99, t)));
    f.send(ZkUpdate::Resync {
        nodes,
        unreadable: vec![],
    })
    .await;
    f.send(ZkUpdate::Status {
        up: true,
        error: None,
        last_seen_ms: None,
    })
    .await;
    let (status, text) = f.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let labelled = text
        .lines()
        .filter(|l| l.starts_with("lockscope_lock_holders{"))
        .count();
    assert_eq!(labelled, 4, "3 own labels + __other__:\n{text}");
    assert!(
        text.contains("lockscope_lock_holders{source=\"zk\",lock=\"__other__\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("lockscope_lock_labels_folded{source=\"zk\"} 3"),
        "{text}"
    );
    assert!(text.contains("lockscope_source_up{source=\"zk\"} 1"));
    assert!(text.contains("lockscope_locks{source=\"zk\",recipe=\"exclusive\"} 6"));

    // Releases and acquisitions give counters and histograms; promtool must accept the lot.
    f.remove("/locks/l0").await;
    f.send(ZkUpdate::Upsert {
        path: "/locks/l0".into(),
        meta: node(0x50, now()),
    })
    .await;
    let (_, text) = f.get("/metrics").await;
    assert!(
        text.contains("lockscope_lock_acquisitions_total{source=\"zk\",lock=\"/locks/l0\"} 1"),
        "{text}"
    );
    if let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("promtool");
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        panic!("promtool is not installed: run scripts/install-deps");
    }
}

/// A session already gone from every member before its node went expired; one whose node went
/// while it was still connected closed.
#[tokio::test]
async fn release_cause_tells_expiry_from_close() {
    let f = fixture(500);
    let t = now() - 5_000;
    f.send(ZkUpdate::Resync {
        nodes: vec![
            ("/locks".into(), node(0, t)),
            ("/locks/a".into(), node(0, t)),
            ("/locks/a/lock-0000000001".into(), node(0x11, t)),
            ("/locks/b".into(), node(0, t)),
            ("/locks/b/lock-0000000001".into(), node(0x22, t)),
        ],
        unreadable: vec![],
    })
    .await;
    let report = |at_ms: i64, connected: &[i64]| {
        ZkUpdate::Ensemble(EnsembleReport {
            started_ms: at_ms - 10,
            at_ms,
            members: 1,
            members_answering: 1,
            connections: connected.iter().map(|s| (*s, (0, Some(4000)))).collect(),
            unnamed_child_watches: vec![0],
            ..EnsembleReport::default()
        })
    };
    // 0x11's client died 2 s ago (half its timeout); 0x22 is still connected.
    f.send(report(now() - 2_000, &[0x22])).await;
    f.remove("/locks/a/lock-0000000001").await;
    f.remove("/locks/b/lock-0000000001").await;
    f.send(report(now() + 1_000, &[])).await;
    for (lock, cause) in [("a", "session_expired"), ("b", "session_closed")] {
        let (_, detail) = f.json(&format!("/api/v1/locks/zk~locks~{lock}")).await;
        assert_eq!(release_event(&detail)["cause"], cause, "{lock}: {detail}");
        assert_eq!(detail["gone"], false);
    }
    // The lock node itself goes: its page still shows the last state and what happened.
    f.remove("/locks/a").await;
    let (status, detail) = f.json("/api/v1/locks/zk~locks~a").await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["gone"], true);
    assert_eq!(detail["path"], "/locks/a");
    assert_eq!(detail["holders"], serde_json::json!([]), "{detail}");
    assert_eq!(detail["releases"], 1, "{detail}");
    assert!(
        detail["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["cause"] == "session_expired")),
        "{detail}"
    );
    let (_, locks) = f.json("/api/v1/locks").await;
    assert!(
        !locks.to_string().contains("zk~locks~a"),
        "a gone lock is not listed: {locks}"
    );
}

/// The OpenAPI document and its page are served, and every operation the document lists is
/// routed (the unit test in `http::openapi` checks the other way round).
#[tokio::test]
async fn openapi_document_and_page_are_served_and_every_operation_is_routed() {
    let f = fixture(500);
    let (status, doc) = f.json("/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    let (status, page) = f.get("/api-docs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("/api/v1/locks/{id}/release"), "{page}");
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("item").keys() {
            // The stream never ends: its answer is read in tests/openapi_contract.rs.
            if path == "/api/v1/events" {
                continue;
            }
            let uri = path.replace("{id}", "zk~nothing");
            let resp = lockscope::http::app(f.handle.clone(), Default::default())
                .oneshot(
                    Request::builder()
                        .method(method.to_uppercase().as_str())
                        .uri(&uri)
                        .body(Body::empty())
                        .expect("request"),
                )
                .await
                .expect("answer");
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .expect("body");
            let body = String::from_utf8_lossy(&body);
            assert!(
                status != StatusCode::METHOD_NOT_ALLOWED && !body.contains("no such endpoint"),
                "{method} {path} is documented but not routed: {status} {body}"
            );
        }
    }
}
