//! A Redis member that dropped its backlog of changes (they came faster than it read them) says
//! so until the full scan that catches up is in: on the source (`lagging`, what the UI's source
//! card shows) and in `/metrics`.

use lockscope::backends::redis::RedisUpdate;
use lockscope::config::RedisSourceConfig;

mod common;

use common::redis_fixture;

#[tokio::test]
async fn a_lagging_member_shows_on_its_source_until_it_caught_up() {
    let f = redis_fixture(&RedisSourceConfig::new(
        "cache",
        "redis://127.0.0.1:1",
        &["lock:*"],
    ));
    f.send(RedisUpdate::Members {
        members: vec!["redis://a".into(), "redis://b".into()],
    })
    .await;
    for member in 0..2 {
        f.send(RedisUpdate::Keys {
            member,
            full: true,
            reports: Vec::new(),
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
    let lagging = || async {
        let sources = f.json("/api/v1/sources").await.1;
        let source = &sources["sources"][0];
        assert_eq!(source["name"], "cache");
        let metrics = f.get("/metrics").await.1;
        let metric = metrics
            .lines()
            .find_map(|l| l.strip_prefix("lockscope_source_lagging{source=\"cache\"} "))
            .map(str::to_string);
        (source["lagging"].as_bool(), metric)
    };
    assert_eq!(lagging().await, (Some(false), Some("0".into())));

    f.send(RedisUpdate::Lagging {
        member: 1,
        lagging: true,
    })
    .await;
    assert_eq!(lagging().await, (Some(true), Some("1".into())));
    // Still lagging while any member is.
    f.send(RedisUpdate::Lagging {
        member: 0,
        lagging: true,
    })
    .await;
    f.send(RedisUpdate::Lagging {
        member: 1,
        lagging: false,
    })
    .await;
    assert_eq!(lagging().await, (Some(true), Some("1".into())));
    f.send(RedisUpdate::Lagging {
        member: 0,
        lagging: false,
    })
    .await;
    assert_eq!(lagging().await, (Some(false), Some("0".into())));

    // A member's session that ends while lagging: the next one starts with a full scan.
    f.send(RedisUpdate::Lagging {
        member: 0,
        lagging: true,
    })
    .await;
    f.send(RedisUpdate::Status {
        member: Some(0),
        up: false,
        error: Some("pub/sub connection lost".into()),
        last_seen_ms: None,
    })
    .await;
    assert_eq!(lagging().await, (Some(false), Some("0".into())));
}
