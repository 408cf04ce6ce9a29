//! Release causes at the aggregator's boundary: a real aggregator fed the node removals and
//! ensemble rounds a ZooKeeper collector would send, read through the real router.
//!
//! The rule under test is the release-cause invariant in ARCHITECTURE.md: the word on whether a
//! session outlived its node comes from a round asked once the removals of its nodes settled
//! (the leader's session tracker; without it, a connection seen in two such rounds), or from a
//! node the session created afterwards; a member that still lists a closing session's
//! connection is not evidence of a release, and rounds, not the clock, bound the wait.

use std::time::Duration;

use lockscope::backends::zookeeper::{EnsembleReport, ZkUpdate};
use lockscope::config::ZkSourceConfig;
use lockscope_model::zk::NodeMeta;

mod common;

use common::Fixture;

const MEMBERS: usize = 3;

fn fixture(poll_interval: Duration) -> Fixture<ZkUpdate> {
    let mut source = ZkSourceConfig::new("zk", "127.0.0.1:1", &["/locks"]);
    source.poll_interval = poll_interval;
    common::zk_fixture(&source, 500)
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

fn now() -> i64 {
    lockscope::now_ms()
}

/// One ensemble round as the collector reports it.
struct Round {
    started_ms: i64,
    /// Session → the member that lists its connection.
    connected: Vec<(i64, usize)>,
    /// Sessions the leader's tracker lists; `None` when the leader's word is missing.
    leader: Option<Vec<i64>>,
    members_answering: usize,
    timeout_ms: u64,
}

impl Round {
    fn at(started_ms: i64) -> Round {
        Round {
            started_ms,
            connected: Vec::new(),
            leader: Some(Vec::new()),
            members_answering: MEMBERS,
            timeout_ms: 10_000,
        }
    }

    fn connected(mut self, sessions: &[(i64, usize)]) -> Round {
        self.connected = sessions.to_vec();
        self
    }

    fn leader(mut self, sessions: &[i64]) -> Round {
        self.leader = Some(sessions.to_vec());
        self
    }

    fn no_leader(mut self) -> Round {
        self.leader = None;
        self
    }

    fn silent(mut self) -> Round {
        self.members_answering = 0;
        self.leader = None;
        self
    }

    fn timeout(mut self, ms: u64) -> Round {
        self.timeout_ms = ms;
        self
    }

    async fn send(self, f: &Fixture<ZkUpdate>) {
        let timeout = self.timeout_ms;
        f.send(ZkUpdate::Ensemble(EnsembleReport {
            started_ms: self.started_ms,
            at_ms: self.started_ms + 20,
            members: MEMBERS,
            members_answering: self.members_answering,
            connections: self
                .connected
                .iter()
                .map(|(s, m)| (*s, (*m, Some(timeout))))
                .collect(),
            unnamed_child_watches: vec![0; MEMBERS],
            live_sessions: self
                .leader
                .map(|live| live.into_iter().map(|s| (s, None)).collect()),
            ..EnsembleReport::default()
        }))
        .await;
    }
}

/// The collector heard `path` go at `at_ms`.
async fn removed(f: &Fixture<ZkUpdate>, path: &str, at_ms: i64) {
    f.send(ZkUpdate::Removed {
        path: path.into(),
        at_ms,
    })
    .await;
}

/// Loads `nodes` (path, owner; 0 = persistent) as a bootstrap read, created at `ctime`.
async fn tree(f: &Fixture<ZkUpdate>, ctime: i64, nodes: &[(&str, i64)]) {
    f.send(ZkUpdate::Resync {
        nodes: nodes
            .iter()
            .map(|(path, owner)| (path.to_string(), node(*owner, ctime)))
            .collect(),
        unreadable: vec![],
    })
    .await;
}

/// The causes of the lock's release events, oldest first. A release is recorded once its
/// cause is known, so a pending one is not listed.
async fn causes(f: &Fixture<ZkUpdate>, lock: &str) -> Vec<String> {
    let id = lockscope_model::id::lock_id("zk", lock);
    let (_, detail) = f.json(&format!("/api/v1/locks/{id}")).await;
    detail["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{lock}: {detail}"))
        .iter()
        .filter(|e| e["kind"] == "released")
        .map(|e| e["cause"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn all(cause: &str, n: usize) -> Vec<String> {
    vec![cause.to_string(); n]
}

fn none() -> Vec<String> {
    Vec::new()
}

/// The CI failure: a 10k-node close, heard from lockscope's member while the client's member
/// was still applying it and so still listed the connection. The leader had already dropped the
/// session from its tracker: closed, not released.
#[tokio::test]
async fn a_member_still_listing_a_closing_session_does_not_make_it_a_release() {
    let f = fixture(Duration::from_secs(2));
    let t = now() - 10_000;
    let queue: Vec<String> = (0..5).map(|i| format!("/locks/big/lock-{i:010}")).collect();
    let mut nodes: Vec<(&str, i64)> = vec![("/locks", 0), ("/locks/big", 0)];
    nodes.extend(queue.iter().map(|p| (p.as_str(), 0x11)));
    tree(&f, t - 1_000, &nodes).await;
    Round::at(t)
        .connected(&[(0x11, 1)])
        .leader(&[0x11])
        .send(&f)
        .await;
    // lockscope's member removes the whole queue, holder first.
    for (i, path) in queue.iter().enumerate() {
        removed(&f, path, t + 1_000 + 50 * i as i64).await;
    }
    // Member 1, the client's, has not finished applying the close: it still lists the
    // connection. The leader has dropped the session.
    Round::at(t + 1_600)
        .connected(&[(0x11, 1)])
        .leader(&[])
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/big").await, all("session_closed", 5));
}

/// A round asked while lockscope's member is still removing a session's nodes may come before
/// the leader got to the close; it waits for the removals to stop.
#[tokio::test]
async fn the_cause_waits_until_the_sessions_removals_stop() {
    let f = fixture(Duration::from_secs(2));
    let t = now() - 10_000;
    tree(
        &f,
        t - 1_000,
        &[
            ("/locks", 0),
            ("/locks/a", 0),
            ("/locks/a/lock-0000000000", 0x11),
            ("/locks/b", 0),
            ("/locks/b/lock-0000000000", 0x33),
            ("/locks/b/lock-0000000001", 0x11),
            ("/locks/c", 0),
            ("/locks/c/lock-0000000000", 0x44),
            ("/locks/d", 0),
            ("/locks/d/lock-0000000000", 0x33),
            ("/locks/d/lock-0000000001", 0x44),
        ],
    )
    .await;
    let everyone = [(0x11, 0), (0x33, 1), (0x44, 2)];
    Round::at(t)
        .connected(&everyone)
        .leader(&[0x11, 0x33, 0x44])
        .send(&f)
        .await;
    // 0x11 closes: its holder node goes first, its queued node 250 ms later. 0x44 releases
    // its lock and gives up its place in another queue as quickly.
    removed(&f, "/locks/a/lock-0000000000", t + 1_000).await;
    removed(&f, "/locks/c/lock-0000000000", t + 1_000).await;
    removed(&f, "/locks/b/lock-0000000001", t + 1_250).await;
    removed(&f, "/locks/d/lock-0000000001", t + 1_250).await;
    // Asked 300 ms after the holders went but only 50 ms after the sessions' last removals:
    // the leader still lists both (it has not got to 0x11's close). Not yet a word.
    Round::at(t + 1_300)
        .connected(&everyone)
        .leader(&[0x11, 0x33, 0x44])
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/a").await, none());
    assert_eq!(causes(&f, "/locks/c").await, none());
    // Settled: the leader has dropped 0x11 and still lists 0x44.
    Round::at(t + 1_500)
        .connected(&[(0x11, 0), (0x33, 1), (0x44, 2)])
        .leader(&[0x33, 0x44])
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/a").await, all("session_closed", 1));
    assert_eq!(causes(&f, "/locks/c").await, all("released", 1));
}

/// A session that creates a node after its node went was alive then, whatever comes later.
#[tokio::test]
async fn a_node_created_after_the_removal_proves_a_release() {
    let f = fixture(Duration::from_secs(2));
    let t = now() - 10_000;
    tree(
        &f,
        t - 1_000,
        &[
            ("/locks", 0),
            ("/locks/a", 0),
            ("/locks/a/lock-0000000000", 0x11),
            ("/locks/b", 0),
            ("/locks/b/lock-0000000000", 0x33),
        ],
    )
    .await;
    Round::at(t)
        .connected(&[(0x11, 0), (0x33, 1)])
        .leader(&[0x11, 0x33])
        .send(&f)
        .await;
    removed(&f, "/locks/a/lock-0000000000", t + 1_000).await;
    // It queues for another lock, then closes before the next round.
    f.send(ZkUpdate::Upsert {
        path: "/locks/b/lock-0000000001".into(),
        meta: node(0x11, t + 1_050),
    })
    .await;
    Round::at(t + 1_100)
        .connected(&[(0x33, 1)])
        .leader(&[0x33])
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/a").await, all("released", 1));
}

/// Without the leader's word, a connection is evidence only when two settled rounds show it; a
/// session connected to no member in a full round has ended.
#[tokio::test]
async fn without_the_leader_a_release_needs_the_connection_in_two_rounds() {
    let f = fixture(Duration::from_secs(2));
    let t = now() - 10_000;
    tree(
        &f,
        t - 1_000,
        &[
            ("/locks", 0),
            ("/locks/a", 0),
            ("/locks/a/lock-0000000000", 0x11),
            ("/locks/b", 0),
            ("/locks/b/lock-0000000000", 0x22),
        ],
    )
    .await;
    Round::at(t)
        .connected(&[(0x11, 1), (0x22, 2)])
        .no_leader()
        .send(&f)
        .await;
    removed(&f, "/locks/a/lock-0000000000", t + 1_000).await;
    removed(&f, "/locks/b/lock-0000000000", t + 1_000).await;
    Round::at(t + 1_300)
        .connected(&[(0x11, 1)])
        .no_leader()
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/a").await, none());
    assert_eq!(causes(&f, "/locks/b").await, all("session_closed", 1));
    Round::at(t + 2_300)
        .connected(&[(0x11, 1)])
        .no_leader()
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/a").await, all("released", 1));
}

/// Polls stretch when members answer slowly (20× a poll's duration); a release waits for
/// rounds, not for a multiple of `poll_interval` on the clock.
#[tokio::test]
async fn rounds_not_the_clock_bound_the_wait() {
    let f = fixture(Duration::from_millis(100));
    let t = now() - 3_000;
    tree(
        &f,
        t - 1_000,
        &[
            ("/locks", 0),
            ("/locks/a", 0),
            ("/locks/a/lock-0000000000", 0x11),
        ],
    )
    .await;
    Round::at(t)
        .connected(&[(0x11, 0)])
        .leader(&[0x11])
        .send(&f)
        .await;
    let gone = now();
    removed(&f, "/locks/a/lock-0000000000", gone).await;
    // Several housekeeping ticks, and 15× the poll interval, without a round.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(causes(&f, "/locks/a").await, none());
    Round::at(gone + 1_500)
        .connected(&[])
        .leader(&[])
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/a").await, all("session_closed", 1));
}

/// A release is not pending forever: after 4 rounds the round's word decides as it stands, and
/// rounds with no word at all make it a plain release.
#[tokio::test]
async fn undecided_causes_end_after_four_rounds() {
    let f = fixture(Duration::from_secs(2));
    let t = now() - 20_000;
    let mut nodes: Vec<(String, i64)> = vec![
        ("/locks".into(), 0),
        ("/locks/a".into(), 0),
        ("/locks/a/lock-0000000000".into(), 0x11),
        ("/locks/s".into(), 0),
        ("/locks/s/lock-0000000000".into(), 0x22),
    ];
    // 0x11 also waits in six queues, and leaves one before every round: never settled.
    for i in 0..6 {
        nodes.push((format!("/locks/w{i}"), 0));
        nodes.push((format!("/locks/w{i}/lock-0000000000"), 0x33));
        nodes.push((format!("/locks/w{i}/lock-0000000001"), 0x11));
    }
    let nodes: Vec<(&str, i64)> = nodes.iter().map(|(p, o)| (p.as_str(), *o)).collect();
    tree(&f, t - 1_000, &nodes).await;
    let everyone = [(0x11, 0), (0x22, 1), (0x33, 2)];
    Round::at(t)
        .connected(&everyone)
        .leader(&[0x11, 0x22, 0x33])
        .send(&f)
        .await;
    removed(&f, "/locks/a/lock-0000000000", t + 1_000).await;
    for round in 1..=4 {
        let start = t + 1_000 + 1_000 * round;
        removed(&f, &format!("/locks/w{round}/lock-0000000001"), start - 100).await;
        Round::at(start)
            .connected(&everyone)
            .leader(&[0x11, 0x22, 0x33])
            .send(&f)
            .await;
        let want = if round < 4 {
            none()
        } else {
            all("released", 1)
        };
        assert_eq!(causes(&f, "/locks/a").await, want, "after round {round}");
    }
    // No member answers at all.
    let t = t + 10_000;
    removed(&f, "/locks/s/lock-0000000000", t).await;
    for round in 1..=4 {
        Round::at(t + 1_000 * round).silent().send(&f).await;
        let want = if round < 4 {
            none()
        } else {
            all("released", 1)
        };
        assert_eq!(
            causes(&f, "/locks/s").await,
            want,
            "after silent round {round}"
        );
    }
}

/// Expiry is timed from when the session's nodes started to go, not from when its holder node
/// went: lockscope's member may remove the holder late in a long close, after the client's
/// member had already dropped the connection. (No leader's word here: see the next test.)
#[tokio::test]
async fn expiry_is_timed_from_the_first_removal_of_a_close() {
    let f = fixture(Duration::from_secs(2));
    let t = now() - 10_000;
    let mut nodes: Vec<(String, i64)> = vec![
        ("/locks".into(), 0),
        ("/locks/big".into(), 0),
        ("/locks/big/lock-0000000000".into(), 0x11),
        ("/locks/w".into(), 0),
        ("/locks/w/lock-0000000000".into(), 0x33),
    ];
    for i in 1..=6 {
        nodes.push((format!("/locks/w/lock-{i:010}"), 0x11));
    }
    let nodes: Vec<(&str, i64)> = nodes.iter().map(|(p, o)| (p.as_str(), *o)).collect();
    tree(&f, t - 1_000, &nodes).await;
    // An 800 ms session: a quarter of it is the 200 ms margin.
    Round::at(t)
        .connected(&[(0x11, 0), (0x33, 1)])
        .leader(&[0x11, 0x33])
        .timeout(800)
        .send(&f)
        .await;
    // The close streams in, 100 ms apart; a round in the middle finds the connection gone
    // everywhere (the client's member had finished) while the leader's word is not yet due.
    for i in 1..=3 {
        removed(&f, &format!("/locks/w/lock-{i:010}"), t + 900 + 100 * i).await;
    }
    Round::at(t + 1_130)
        .connected(&[(0x33, 1)])
        .no_leader()
        .timeout(800)
        .send(&f)
        .await;
    for i in 4..=6 {
        removed(&f, &format!("/locks/w/lock-{i:010}"), t + 900 + 100 * i).await;
    }
    removed(&f, "/locks/big/lock-0000000000", t + 1_600).await;
    Round::at(t + 2_000)
        .connected(&[(0x33, 1)])
        .no_leader()
        .timeout(800)
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/big").await, all("session_closed", 1));
}

/// Gone from every member long before its nodes went, yet closed: the leader dropped the
/// session as the connection went (lockscope's member delivered the close's removals seconds
/// late). An expiry shows the other way: the leader keeps the session until its timeout.
#[tokio::test]
async fn the_leader_tells_a_late_delivered_close_from_an_expiry() {
    let f = fixture(Duration::from_secs(2));
    let t = now() - 10_000;
    tree(
        &f,
        t - 1_000,
        &[
            ("/locks", 0),
            ("/locks/a", 0),
            ("/locks/a/lock-0000000000", 0x11),
            ("/locks/b", 0),
            ("/locks/b/lock-0000000000", 0x22),
        ],
    )
    .await;
    // 4 s sessions: the expiry margin is 1 s.
    Round::at(t)
        .connected(&[(0x11, 0), (0x22, 1)])
        .leader(&[0x11, 0x22])
        .timeout(4_000)
        .send(&f)
        .await;
    // 0x11 closes: gone from its member and from the leader in the same round. 0x22's client
    // dies: gone from its member, the leader keeps it until it expires.
    Round::at(t + 500)
        .connected(&[])
        .leader(&[0x22])
        .timeout(4_000)
        .send(&f)
        .await;
    Round::at(t + 1_500)
        .connected(&[])
        .leader(&[0x22])
        .timeout(4_000)
        .send(&f)
        .await;
    Round::at(t + 3_500)
        .connected(&[])
        .leader(&[])
        .timeout(4_000)
        .send(&f)
        .await;
    // lockscope's member delivers both sessions' removals 3 s after they went.
    removed(&f, "/locks/a/lock-0000000000", t + 3_600).await;
    removed(&f, "/locks/b/lock-0000000000", t + 3_600).await;
    Round::at(t + 4_000)
        .connected(&[])
        .leader(&[])
        .timeout(4_000)
        .send(&f)
        .await;
    assert_eq!(causes(&f, "/locks/a").await, all("session_closed", 1));
    assert_eq!(causes(&f, "/locks/b").await, all("session_expired", 1));
}
