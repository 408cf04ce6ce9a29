//! `rules`: the sessions' wait-for graph and its cycles, and the stale-lock rules.
//!
//! Sessions come from a few sources, session ids and lock ids (so they meet), each holding and
//! waiting on any of them. Checks on `rules::wait_for_graph`: every edge joins a waiter to
//! another session of its source that holds the lock it waits on, once; every such pair is an
//! edge; the cycles are exactly the strongly connected components of two or more sessions
//! (against a plain transitive closure), disjoint; an edge is `in_cycle` exactly when both ends
//! are in the same cycle.
//!
//! `stale_findings` runs on locks with any field set, times within ±2^50 ms of the epoch (far
//! beyond any clock, still clear of `i64` overflow): the findings are distinct, in the order of
//! `rules::BUILTIN`, each a rule that applies to the lock's backend, and `staleness` is the
//! first of them. `stale_findings_with` a backend's extra rules is the built-in findings
//! followed by the extra rules that apply and fire, in their order.

use std::collections::BTreeSet;

use arbitrary::Arbitrary;
use lockscope_model::rules::{
    stale_findings, stale_findings_with, staleness, wait_for_graph, StaleRule, BUILTIN,
};
use lockscope_model::wire::{Backend, HolderView, LockView, SessionView, WaiterView};

use crate::pick;

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Input {
    pub sessions: Vec<Session>,
    pub lock: Lock,
    pub now: i64,
    pub stale_hold: i64,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Session {
    pub source: u8,
    pub session: u8,
    pub holds: Vec<u8>,
    pub waits: Vec<u8>,
}

const SOURCES: &[&str] = &["zk-a", "zk-b", "redis"];
const SESSIONS: &[&str] = &["0x1", "0x2", "0x3", "0x4", "0x5", "0x6", "0x0"];
const LOCKS: &[&str] = &["zk-a~l1", "zk-a~l2", "zk-a~l3", "zk-b~l1", "x", ""];

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Lock {
    pub zookeeper: bool,
    pub recipe: u8,
    pub holders: Vec<(i64, u8)>,
    pub waiters: Vec<i64>,
    pub changed: i64,
    pub deadline: Option<i64>,
    pub lease: Option<i64>,
    pub expires_at: Option<i64>,
    pub no_expiry: bool,
    pub usual_hold: Option<i64>,
}

const RECIPES: &[&str] = &["redisson_lock", "redisson_fair_lock", "token_lock", "queue"];

/// A time (or duration) within ±2^50 ms.
fn t(v: i64) -> i64 {
    v >> 13
}

pub fn run(data: &[u8]) {
    if let Some(input) = crate::input::<Input>(data) {
        crate::show(&input);
        check_graph(&input.sessions);
        check_stale(&input);
    }
}

/// At most this many sessions, each holding and waiting on at most this many locks: there are
/// only 21 distinct sessions and 6 locks, and the checks are quadratic.
const MAX_SESSIONS: usize = 16;
const MAX_LOCKS: usize = 4;

fn sessions(input: &[Session]) -> Vec<SessionView> {
    input
        .iter()
        .take(MAX_SESSIONS)
        .map(|s| SessionView {
            source: pick(SOURCES, s.source).to_string(),
            session: pick(SESSIONS, s.session).to_string(),
            kind: Default::default(),
            timeout_ms: None,
            connected: true,
            server: None,
            expires_at_ms: None,
            connection: None,
            holds: s
                .holds
                .iter()
                .take(MAX_LOCKS)
                .map(|l| pick(LOCKS, *l).to_string())
                .collect(),
            waits: s
                .waits
                .iter()
                .take(MAX_LOCKS)
                .map(|l| pick(LOCKS, *l).to_string())
                .collect(),
            process: None,
        })
        .collect()
}

fn check_graph(input: &[Session]) {
    let views = sessions(input);
    let graph = wait_for_graph(&views);
    let n = graph.nodes.len();
    for (i, k) in graph.nodes.iter().enumerate() {
        assert!(
            graph.nodes[..i].iter().all(|o| o != k),
            "session {k:?} twice in the graph"
        );
    }
    // The edges are exactly the waits on locks that another session of the source holds.
    type Wait = (String, String, String);
    let mut holds: BTreeSet<Wait> = BTreeSet::new();
    let mut waits: BTreeSet<Wait> = BTreeSet::new();
    for s in &views {
        for lock in &s.holds {
            holds.insert((s.source.clone(), s.session.clone(), lock.clone()));
        }
        for lock in &s.waits {
            waits.insert((s.source.clone(), s.session.clone(), lock.clone()));
        }
    }
    let mut expected = BTreeSet::new();
    for (source, waiter, lock) in &waits {
        for (s, holder, l) in &holds {
            if s == source && l == lock && holder != waiter {
                expected.insert((source.clone(), waiter.clone(), holder.clone(), lock.clone()));
            }
        }
    }
    let mut got = BTreeSet::new();
    for e in &graph.edges {
        assert!(e.from < n && e.to < n && e.from != e.to, "bad edge {e:?}");
        let (a, b) = (&graph.nodes[e.from], &graph.nodes[e.to]);
        assert_eq!(a.source, b.source, "an edge across sources");
        assert!(
            got.insert((
                a.source.clone(),
                a.session.clone(),
                b.session.clone(),
                e.lock.clone()
            )),
            "edge {e:?} twice"
        );
    }
    assert_eq!(
        got, expected,
        "the edges are not the waits on other sessions' locks"
    );
    // Cycles against the transitive closure.
    let mut reach = vec![vec![false; n]; n];
    for e in &graph.edges {
        reach[e.from][e.to] = true;
    }
    for k in 0..n {
        let via = reach[k].clone();
        for row in reach.iter_mut() {
            if row[k] {
                for (cell, through) in row.iter_mut().zip(&via) {
                    *cell |= *through;
                }
            }
        }
    }
    let mut cycle_of = vec![None; n];
    for (c, cycle) in graph.cycles.iter().enumerate() {
        assert!(cycle.len() >= 2, "a cycle of one: {cycle:?}");
        for &v in cycle {
            assert!(cycle_of[v].is_none(), "session {v} in two cycles");
            cycle_of[v] = Some(c);
        }
    }
    for i in 0..n {
        for j in 0..n {
            let together = i != j && reach[i][j] && reach[j][i];
            assert_eq!(
                together,
                i != j && cycle_of[i].is_some() && cycle_of[i] == cycle_of[j],
                "sessions {i} and {j}: mutual reachability {together} disagrees with the cycles"
            );
        }
        assert_eq!(graph.in_cycle(i), cycle_of[i].is_some());
    }
    for e in &graph.edges {
        assert_eq!(
            e.in_cycle,
            cycle_of[e.from].is_some() && cycle_of[e.from] == cycle_of[e.to],
            "edge {e:?}: in_cycle is wrong"
        );
    }
}

fn check_stale(input: &Input) {
    let l = &input.lock;
    let lock = LockView {
        backend: if l.zookeeper {
            Backend::Zookeeper
        } else {
            Backend::Redis
        },
        recipe: pick(RECIPES, l.recipe).to_string(),
        holders: l
            .holders
            .iter()
            .take(MAX_LOCKS)
            .map(|(since, s)| HolderView {
                node: String::new(),
                session: pick(SESSIONS, *s).to_string(),
                since_ms: t(*since),
                held_ms: 0,
                mode: None,
                watchers: 0,
                reentrancy: None,
                lease: None,
                version: None,
                identity: None,
                statement: None,
            })
            .collect(),
        waiters: l
            .waiters
            .iter()
            .take(MAX_LOCKS)
            .map(|since| WaiterView {
                node: String::new(),
                session: String::new(),
                since_ms: t(*since),
                waited_ms: 0,
                position: 0,
                mode: None,
                watches: None,
                deadline_ms: None,
                lease: None,
                identity: None,
                statement: None,
            })
            .collect(),
        changed_ms: t(l.changed),
        deadline_ms: l.deadline.map(t),
        lease_ms: l.lease.map(t),
        expires_at_ms: l.expires_at.map(t),
        flags: if l.no_expiry {
            vec!["no_expiry".into()]
        } else {
            Vec::new()
        },
        usual_hold_ms: l.usual_hold.map(t),
        ..LockView::default()
    };
    let now = t(input.now);
    let hold = t(input.stale_hold);
    let found = stale_findings(&lock, now, hold);
    let rank = |s: &&dyn StaleRule| BUILTIN.iter().position(|a| a.name() == s.name());
    assert!(
        found
            .iter()
            .all(|s| rank(s).is_some() && s.applies_to(lock.backend)),
        "findings {found:?} are not built-in rules for {:?}",
        lock.backend
    );
    assert!(
        found.windows(2).all(|w| rank(&w[0]) < rank(&w[1])),
        "findings {found:?} repeat or are out of order"
    );
    assert_eq!(staleness(&lock, now, hold), found.first().copied());
    if lock.holders.is_empty() {
        assert!(!found.iter().any(|s| matches!(
            s.name(),
            "no_ttl" | "held_too_long" | "held_beyond_usual" | "watchdog_stalled"
        )));
    }
    // A backend's own rules come after the built-in ones, when they apply to the lock.
    let extra: [&dyn StaleRule; 2] = [&Always(Backend::Zookeeper), &Always(Backend::Redis)];
    let with = stale_findings_with(&lock, now, hold, &extra);
    assert_eq!(
        with[..found.len()],
        found[..],
        "extra rules changed the built-in findings"
    );
    let names: Vec<&str> = with[found.len()..].iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        [Always(lock.backend).name()],
        "extra rules misapplied"
    );
    check_stuck(&lock, now, hold);
}

/// The stuck judgement (`stuck::judge`) with limits drawn from the input: a mark names a
/// participant past the limit it names; no mark means nobody is past a limit.
fn check_stuck(lock: &LockView, now: i64, hold: i64) {
    use lockscope_model::wire::{StuckKind, StuckLevel, StuckLimits, StuckRules, StuckThresholds};
    let limit = hold.unsigned_abs().min(1 << 50) as i64;
    let mut thresholds = StuckThresholds {
        global: StuckRules {
            wait: StuckLimits {
                warning_ms: Some(limit / 2),
                critical_ms: Some(limit),
            },
            hold: StuckLimits {
                warning_ms: Some(limit),
                critical_ms: None,
            },
        },
        ..StuckThresholds::default()
    };
    thresholds.recipes.insert(
        "queue".into(),
        StuckRules {
            hold: StuckLimits {
                warning_ms: None,
                critical_ms: Some(limit.saturating_mul(2)),
            },
            ..StuckRules::default()
        },
    );
    let rules = thresholds.for_lock(&lock.source, &lock.recipe);
    let past = |kind: StuckKind, since: i64| {
        let for_ms = now.saturating_sub(since).max(0);
        rules.of(kind).level(for_ms)
    };
    let worst = lockscope_model::stuck::judge(lock, now, &thresholds);
    let any = lock
        .holders
        .iter()
        .map(|h| past(StuckKind::Hold, h.since_ms))
        .chain(
            lock.waiters
                .iter()
                .map(|w| past(StuckKind::Wait, w.since_ms)),
        )
        .flatten()
        .map(|(level, _)| level)
        .max();
    assert_eq!(
        worst.as_ref().map(|s| s.level),
        any,
        "the mark is not the worst level"
    );
    if let Some(s) = worst {
        assert!(s.for_ms > s.limit_ms, "{s:?} is not past its limit");
        assert_eq!(
            rules.of(s.kind).level(s.for_ms),
            Some((s.level, s.limit_ms))
        );
        if s.level == StuckLevel::Warning {
            assert_ne!(any, Some(StuckLevel::Critical));
        }
    }
}

/// An extra rule every lock of one backend breaks.
struct Always(Backend);

impl StaleRule for Always {
    fn name(&self) -> &'static str {
        match self.0 {
            Backend::Zookeeper => "always_zookeeper",
            Backend::Redis => "always_redis",
            Backend::Etcd => "always_etcd",
            Backend::Mysql => "always_mysql",
            Backend::Postgres => "always_postgres",
        }
    }
    fn describe(&self) -> &'static str {
        "always"
    }
    fn applies_to(&self, backend: Backend) -> bool {
        backend == self.0
    }
    fn check(&self, _lock: &LockView, _now_ms: i64, _stale_hold_ms: i64) -> bool {
        true
    }
}
