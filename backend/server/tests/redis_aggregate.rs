//! The aggregator's Redis path, fed the updates a Redis collector sends, read over HTTP:
//! holder changes and their causes, the Redlock merge, and corrections from reconcile scans.

use lockscope::backends::redis::state::RedisSourceState;
use lockscope::backends::redis::{ChangeKind, KeyChange, KeyReport, RedisUpdate};
use lockscope::config::{RedisSourceConfig, RedisWatchConfig, RedlockConfig};
use lockscope_model::redis::{decode, Companions, KeyHint, KeyRead, RedisValue};
use lockscope_model::wire::ReleaseCause;

fn now() -> i64 {
    lockscope::now_ms()
}

fn token_report(key: &str, token: Option<&str>, pttl: i64) -> KeyReport {
    let read = match token {
        Some(t) => KeyRead {
            value: RedisValue::String(t.as_bytes().to_vec()),
            pttl_ms: pttl,
        },
        None => KeyRead::missing(),
    };
    let lock = decode(
        key.as_bytes(),
        &read,
        &Companions::default(),
        KeyHint::None,
        now(),
    );
    KeyReport {
        key: key.as_bytes().to_vec(),
        lock,
        watchers: 0,
        at_ms: now(),
        pttl_ms: read.pttl_ms,
        read_seq: 0,
        truncated: Vec::new(),
        unrecognised: None,
    }
}

/// What the collector's keyspace notifications tell (`RedisUpdate::Changes`): the counts come
/// from these, the holders shown from the reads.
fn changes(member: usize, changes: &[(&str, ChangeKind)]) -> RedisUpdate {
    RedisUpdate::Changes {
        member,
        changes: changes
            .iter()
            .map(|(key, kind)| KeyChange {
                key: key.as_bytes().to_vec(),
                at_us: now() * 1000,
                counted: true,
                kind: *kind,
            })
            .collect(),
    }
}

const CAME: ChangeKind = ChangeKind::Came { acquired: true };

fn went(cause: ReleaseCause) -> ChangeKind {
    ChangeKind::Went { cause, held_ms: 1 }
}

mod common;

use common::redis_fixture;

#[tokio::test]
async fn token_locks_release_expire_and_reconcile() {
    let f = redis_fixture(&RedisSourceConfig::new(
        "cache",
        "redis://127.0.0.1:1",
        &["lock:*"],
    ));
    f.send(RedisUpdate::Members {
        members: vec!["redis://127.0.0.1:1".into()],
    })
    .await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: true,
        reports: vec![token_report("lock:a", Some("t1"), 5_000)],
    })
    .await;
    f.send(RedisUpdate::Status {
        member: Some(0),
        up: true,
        error: None,
        last_seen_ms: None,
    })
    .await;
    let body = f.json("/api/v1/locks").await.1;
    let lock = &body["locks"][0];
    assert_eq!(lock["backend"], "redis");
    assert_eq!(lock["path"], "lock:a");
    assert_eq!(lock["holders"][0]["node"], "t1");
    assert!(lock["ttl_ms"].as_i64().unwrap_or(0) > 4_000);
    let id = lock["id"].as_str().expect("id").to_string();

    // Another token takes over (deleted and set again between two reads): the old one released.
    f.send(changes(
        0,
        &[("lock:a", went(ReleaseCause::Released)), ("lock:a", CAME)],
    ))
    .await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: false,
        reports: vec![token_report("lock:a", Some("t2"), 5_000)],
    })
    .await;
    // The key disappears well before its deadline: released; at its deadline: ttl_expired.
    f.send(changes(0, &[("lock:a", went(ReleaseCause::Released))]))
        .await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: false,
        reports: vec![token_report("lock:a", None, -2)],
    })
    .await;
    f.send(changes(0, &[("lock:b", CAME)])).await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: false,
        reports: vec![token_report("lock:b", Some("t3"), 0)],
    })
    .await;
    f.send(changes(0, &[("lock:b", went(ReleaseCause::TtlExpired))]))
        .await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: false,
        reports: vec![token_report("lock:b", None, -2)],
    })
    .await;
    let text = f.get("/metrics").await.1;
    assert!(
        text.contains(
            "lockscope_lock_releases_total{source=\"cache\",lock=\"lock:a\",cause=\"released\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("lockscope_lock_releases_total{source=\"cache\",lock=\"lock:b\",cause=\"ttl_expired\"} 1"), "{text}");
    // Gone, but its page still answers: nothing holds it, and what happened.
    let gone = f.json(&format!("/api/v1/locks/{id}")).await.1;
    assert_eq!(gone["gone"], true, "{gone}");
    assert_eq!(gone["holders"], serde_json::json!([]), "{gone}");
    assert!(
        gone["events"].as_array().is_some_and(|e| e
            .iter()
            .filter(|e| e["cause"] == "released")
            .count()
            == 2),
        "{gone}"
    );

    // A reconcile scan finds a key no notification told about: one correction.
    f.send(RedisUpdate::Keys {
        member: 0,
        full: true,
        reports: vec![token_report("lock:c", Some("t4"), 9_000)],
    })
    .await;
    let text = f.get("/metrics").await.1;
    assert!(
        text.contains("lockscope_source_corrections_total{source=\"cache\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("lockscope_lock_ttl_seconds{source=\"cache\",lock=\"lock:c\"}"),
        "{text}"
    );
    let sources = f.json("/api/v1/sources").await.1;
    assert_eq!(sources["sources"][0]["up"], true);
    assert_eq!(sources["sources"][0]["backend"], "redis");
}

#[tokio::test]
async fn redlock_merges_masters() {
    let source = RedlockConfig {
        name: "rl".into(),
        urls: vec![
            "redis://127.0.0.1:1".into(),
            "redis://127.0.0.1:2".into(),
            "redis://127.0.0.1:3".into(),
        ],
        patterns: vec!["rl:*".into()],
        watch: RedisWatchConfig::default(),
    };
    let f = common::fixture(RedisSourceState::new((&source).into(), 500), 500);
    f.send(RedisUpdate::Members {
        members: (1..=3).map(|p| format!("redis://127.0.0.1:{p}")).collect(),
    })
    .await;
    for (member, token) in [(0, "t1"), (1, "t1"), (2, "t0")] {
        f.send(RedisUpdate::Keys {
            member,
            full: true,
            reports: vec![token_report("rl:x", Some(token), 8_000)],
        })
        .await;
        f.send(RedisUpdate::Status {
            member: Some(member),
            up: true,
            error: None,
            last_seen_ms: None,
        })
        .await;
    }
    let body = f.json("/api/v1/locks").await.1;
    let lock = &body["locks"][0];
    assert_eq!(lock["recipe"], "redlock");
    assert_eq!(lock["holders"][0]["node"], "t1");
    assert_eq!(lock["redlock"]["majority_holder"], "t1");
    assert_eq!(lock["redlock"]["minority_holders"][0], "t0");
    assert!(lock["flags"]
        .as_array()
        .expect("flags")
        .iter()
        .any(|f| f == "minority_holder"));
    assert_eq!(lock["redlock"]["masters"].as_array().map(Vec::len), Some(3));
    // One master loses it: t1 still has a majority (2 of 3)? No: 1 of 3 → no majority.
    f.send(RedisUpdate::Keys {
        member: 1,
        full: false,
        reports: vec![token_report("rl:x", None, -2)],
    })
    .await;
    let body = f.json("/api/v1/locks").await.1;
    let lock = &body["locks"][0];
    assert_eq!(lock["holders"].as_array().map(Vec::len), Some(0));
    assert!(lock["flags"]
        .as_array()
        .expect("flags")
        .iter()
        .any(|f| f == "no_majority"));
}

/// A key deleted and set again between two publishes (one burst of updates) is present
/// afterwards, with the new holder; one set and then deleted in a burst is gone. (Seen: a
/// ShedLock unlock followed at once by the next run's lock vanished from the snapshot.)
#[tokio::test]
async fn a_key_deleted_and_set_again_in_one_burst_stays_listed() {
    let f = redis_fixture(&RedisSourceConfig::new(
        "cache",
        "redis://127.0.0.1:1",
        &["lock:*"],
    ));
    f.send(RedisUpdate::Members {
        members: vec!["redis://127.0.0.1:1".into()],
    })
    .await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: true,
        reports: vec![token_report("lock:a", Some("t1"), 5_000)],
    })
    .await;
    let body = f.json("/api/v1/locks").await.1;
    assert_eq!(body["locks"][0]["holders"][0]["node"], "t1", "{body}");
    // The test runtime runs one task at a time: both updates are queued before the aggregator
    // takes either, so one publish covers them.
    for report in [
        token_report("lock:a", None, -2),
        token_report("lock:a", Some("t2"), 5_000),
        token_report("lock:b", Some("t3"), 5_000),
        token_report("lock:b", None, -2),
    ] {
        f.send(RedisUpdate::Keys {
            member: 0,
            full: false,
            reports: vec![report],
        })
        .await;
    }
    let body = f.json("/api/v1/locks").await.1;
    let locks = body["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 1, "{body}");
    assert_eq!(locks[0]["path"], "lock:a", "{body}");
    assert_eq!(locks[0]["holders"][0]["node"], "t2", "{body}");
}

/// A Cluster's master set changes (a failover): locks are neither released nor acquired again
/// while the new members' first scans come in one by one; only a real change is booked.
#[tokio::test]
async fn a_member_set_change_books_no_release_for_locks_still_held() {
    let mut source = RedisSourceConfig::new("c", "redis://127.0.0.1:1", &["lock:*"]);
    source.cluster = true;
    let f = redis_fixture(&source);
    f.send(RedisUpdate::Members {
        members: vec!["redis://a".into(), "redis://b".into()],
    })
    .await;
    for (member, reports) in [
        (0, vec![token_report("lock:x", Some("t1"), 60_000)]),
        (1, vec![token_report("lock:y", Some("t2"), 60_000)]),
    ] {
        f.send(RedisUpdate::Keys {
            member,
            full: true,
            reports,
        })
        .await;
    }
    let body = f.json("/api/v1/locks").await.1;
    assert_eq!(body["locks"].as_array().map(Vec::len), Some(2), "{body}");
    // b fails over to c; a scans first, c after.
    f.send(RedisUpdate::Members {
        members: vec!["redis://a".into(), "redis://c".into()],
    })
    .await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: true,
        reports: vec![token_report("lock:x", Some("t1"), 60_000)],
    })
    .await;
    let body = f.json("/api/v1/locks").await.1;
    assert_eq!(body["locks"].as_array().map(Vec::len), Some(2), "{body}");
    // c has lock:y as before; lock:x changed hands meanwhile.
    f.send(RedisUpdate::Keys {
        member: 1,
        full: true,
        reports: vec![token_report("lock:y", Some("t2"), 60_000)],
    })
    .await;
    f.send(changes(
        0,
        &[("lock:x", went(ReleaseCause::Released)), ("lock:x", CAME)],
    ))
    .await;
    f.send(RedisUpdate::Keys {
        member: 0,
        full: false,
        reports: vec![token_report("lock:x", Some("t3"), 60_000)],
    })
    .await;
    let text = f.get("/metrics").await.1;
    assert!(
        !text.contains("lockscope_lock_releases_total{source=\"c\",lock=\"lock:y\""),
        "{text}"
    );
    assert!(
        text.contains(
            "lockscope_lock_releases_total{source=\"c\",lock=\"lock:x\",cause=\"released\"} 1"
        ),
        "{text}"
    );
    let body = f.json("/api/v1/locks").await.1;
    let y = body["locks"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["path"] == "lock:y"))
        .cloned()
        .expect("lock:y listed");
    assert_eq!(y["releases"], 0, "{y}");
    assert_eq!(y["holders"][0]["node"], "t2", "{y}");
}
