//! Rules that judge the model: which locks are stale, and which sessions may be deadlocked.
//!
//! Pure functions over wire views, so the server (metrics) and the web UI (badges, the
//! wait-for graph) reach the same verdict from the same data. They read the clock only through
//! the `now_ms` they are given.

use std::collections::{BTreeMap, BTreeSet};

use crate::wire::{LockView, SessionView};

/// Why a lock looks stuck. Every rule has a stable name (API, metrics) and an explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stale {
    /// A legacy SETNX lock whose written deadline has passed: any client may take it over.
    DeadlinePassed,
    /// Waiters are queued but nothing holds the lock (a leftover fair-lock queue).
    QueueWithoutHolder,
    /// A Redisson lock whose TTL fell well below its lease: the watchdog stopped renewing.
    WatchdogStalled,
    /// A Redis lock held without any TTL: if its holder died, nothing will ever free it.
    NoTtl,
    /// A ZooKeeper lock held by a persistent node: no session end will ever free it.
    PersistentNode,
    /// A holder has held longer than the configured limit.
    HeldTooLong,
    /// A holder has held far longer than this lock is usually held.
    HeldBeyondUsual,
}

impl Stale {
    pub const ALL: [Stale; 7] = [
        Stale::DeadlinePassed,
        Stale::QueueWithoutHolder,
        Stale::WatchdogStalled,
        Stale::NoTtl,
        Stale::PersistentNode,
        Stale::HeldTooLong,
        Stale::HeldBeyondUsual,
    ];

    /// The rule's name in the API and in `lockscope_stale_locks{rule}`.
    pub fn name(self) -> &'static str {
        match self {
            Stale::DeadlinePassed => "deadline_passed",
            Stale::QueueWithoutHolder => "queue_without_holder",
            Stale::WatchdogStalled => "watchdog_stalled",
            Stale::NoTtl => "no_ttl",
            Stale::PersistentNode => "persistent_node",
            Stale::HeldTooLong => "held_too_long",
            Stale::HeldBeyondUsual => "held_beyond_usual",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Stale::DeadlinePassed => "the deadline written in its value has passed",
            Stale::QueueWithoutHolder => "waiters are queued but nothing holds it",
            Stale::WatchdogStalled => {
                "its TTL fell well below its lease: the holder's watchdog stopped renewing it"
            }
            Stale::NoTtl => "held without a TTL: if the holder died, nothing will ever free it",
            Stale::PersistentNode => {
                "held by a persistent node: no session ending will ever free it"
            }
            Stale::HeldTooLong => "held longer than the stale limit",
            Stale::HeldBeyondUsual => "held ten times longer than this lock is usually held",
        }
    }
}

/// A queue may be headless for a moment while the next waiter notices it holds.
const HEADLESS_GRACE_MS: i64 = 5_000;
/// "Far beyond usual" needs at least this long a hold, so short locks do not flap.
const BEYOND_USUAL_MIN_MS: i64 = 30_000;
/// No-TTL locks are only reported once held this long (a SETNX-then-EXPIRE pair is in flight).
const NO_TTL_GRACE_MS: i64 = 10_000;

/// Every rule `lock` breaks as of `now_ms`, most certain first; `stale_hold_ms` is the longest
/// hold considered normal.
pub fn stale_findings(lock: &LockView, now_ms: i64, stale_hold_ms: i64) -> Vec<Stale> {
    let mut found = Vec::new();
    let held = !lock.holders.is_empty();
    let oldest_hold = lock
        .holders
        .iter()
        .map(|h| now_ms - h.since_ms)
        .max()
        .unwrap_or(0);
    if lock.deadline_ms.is_some_and(|d| d < now_ms) {
        found.push(Stale::DeadlinePassed);
    }
    if !held && !lock.waiters.is_empty() && now_ms - lock.changed_ms > HEADLESS_GRACE_MS {
        found.push(Stale::QueueWithoutHolder);
    }
    if held && lock.recipe.starts_with("redisson") {
        if let (Some(lease), Some(at)) = (lock.lease_ms, lock.expires_at_ms) {
            if lease >= 3_000 && (at - now_ms) < lease / 3 {
                found.push(Stale::WatchdogStalled);
            }
        }
    }
    if held && lock.flags.iter().any(|f| f == "no_expiry") && oldest_hold > NO_TTL_GRACE_MS {
        found.push(Stale::NoTtl);
    }
    if lock.backend == crate::wire::Backend::Zookeeper
        && lock.holders.iter().any(|h| h.session == "0x0")
    {
        found.push(Stale::PersistentNode);
    }
    if held && oldest_hold > stale_hold_ms {
        found.push(Stale::HeldTooLong);
    }
    if let Some(usual) = lock.usual_hold_ms {
        if held && oldest_hold > BEYOND_USUAL_MIN_MS && oldest_hold > 10 * usual.max(1) {
            found.push(Stale::HeldBeyondUsual);
        }
    }
    found
}

/// The first rule `lock` breaks, if any (see [`stale_findings`]).
pub fn staleness(lock: &LockView, now_ms: i64, stale_hold_ms: i64) -> Option<Stale> {
    stale_findings(lock, now_ms, stale_hold_ms)
        .into_iter()
        .next()
}

/// The median of recent hold times, the "usual hold" of [`Stale::HeldBeyondUsual`]; `None` with
/// fewer than five samples.
pub fn usual_hold(holds_ms: &[i64]) -> Option<i64> {
    if holds_ms.len() < 5 {
        return None;
    }
    let mut sorted = holds_ms.to_vec();
    sorted.sort_unstable();
    Some(sorted[sorted.len() / 2])
}

/// A session in the wait-for graph, `source` + session id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionKey {
    pub source: String,
    pub session: String,
}

/// `from` waits on `lock`, which `to` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitEdge {
    pub from: usize,
    pub to: usize,
    pub lock: String,
    /// Both ends are in the same cycle.
    pub in_cycle: bool,
}

/// Sessions that wait on locks held by other sessions, with the cycles among them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitForGraph {
    /// Sessions that wait or are waited on (indexes for [`WaitEdge`]).
    pub nodes: Vec<SessionKey>,
    pub edges: Vec<WaitEdge>,
    /// Each cycle's node indexes (strongly connected components of two or more sessions).
    pub cycles: Vec<Vec<usize>>,
}

impl WaitForGraph {
    pub fn in_cycle(&self, node: usize) -> bool {
        self.cycles.iter().any(|c| c.contains(&node))
    }
}

/// Builds the wait-for graph from the sessions view.
///
/// A session that waits on a lock it holds itself is not an edge: one client session usually
/// serves several threads, and one thread waiting behind another of the same client is normal.
/// For the same reason a cycle is a *possible* deadlock, not a proven one.
pub fn wait_for_graph(sessions: &[SessionView]) -> WaitForGraph {
    let mut holders: BTreeMap<(&str, &str), Vec<SessionKey>> = BTreeMap::new();
    for s in sessions {
        for lock in &s.holds {
            holders
                .entry((s.source.as_str(), lock.as_str()))
                .or_default()
                .push(key(s));
        }
    }
    let mut index: BTreeMap<SessionKey, usize> = BTreeMap::new();
    let mut graph = WaitForGraph::default();
    let mut node = |graph: &mut WaitForGraph, k: SessionKey| -> usize {
        *index.entry(k.clone()).or_insert_with(|| {
            graph.nodes.push(k);
            graph.nodes.len() - 1
        })
    };
    let mut seen = BTreeSet::new();
    for s in sessions {
        for lock in &s.waits {
            let Some(owners) = holders.get(&(s.source.as_str(), lock.as_str())) else {
                continue;
            };
            for owner in owners {
                if *owner == key(s) || !seen.insert((key(s), owner.clone(), lock.clone())) {
                    continue;
                }
                let from = node(&mut graph, key(s));
                let to = node(&mut graph, owner.clone());
                graph.edges.push(WaitEdge {
                    from,
                    to,
                    lock: lock.clone(),
                    in_cycle: false,
                });
            }
        }
    }
    graph.cycles = strongly_connected(graph.nodes.len(), &graph.edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    let mut component = vec![usize::MAX; graph.nodes.len()];
    for (i, cycle) in graph.cycles.iter().enumerate() {
        for &n in cycle {
            component[n] = i;
        }
    }
    for edge in &mut graph.edges {
        edge.in_cycle =
            component[edge.from] != usize::MAX && component[edge.from] == component[edge.to];
    }
    graph
}

fn key(s: &SessionView) -> SessionKey {
    SessionKey {
        source: s.source.clone(),
        session: s.session.clone(),
    }
}

/// Kosaraju's algorithm, iterative (graphs of thousands of sessions must not overflow a stack).
fn strongly_connected(n: usize, edges: &[WaitEdge]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); n];
    let mut inc = vec![Vec::new(); n];
    for e in edges {
        out[e.from].push(e.to);
        inc[e.to].push(e.from);
    }
    let mut visited = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for start in 0..n {
        if visited[start] {
            continue;
        }
        visited[start] = true;
        let mut stack = vec![(start, 0usize)];
        while let Some((v, i)) = stack.pop() {
            if i < out[v].len() {
                stack.push((v, i + 1));
                let w = out[v][i];
                if !visited[w] {
                    visited[w] = true;
                    stack.push((w, 0));
                }
            } else {
                order.push(v);
            }
        }
    }
    let mut assigned = vec![false; n];
    let mut components = Vec::new();
    for &root in order.iter().rev() {
        if assigned[root] {
            continue;
        }
        assigned[root] = true;
        let mut component = vec![root];
        let mut stack = vec![root];
        while let Some(v) = stack.pop() {
            for &w in &inc[v] {
                if !assigned[w] {
                    assigned[w] = true;
                    component.push(w);
                    stack.push(w);
                }
            }
        }
        component.sort_unstable();
        components.push(component);
    }
    components
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::HolderView;

    fn session(name: &str, holds: &[&str], waits: &[&str]) -> SessionView {
        SessionView {
            source: "zk".into(),
            session: name.into(),
            timeout_ms: Some(10_000),
            connected: true,
            server: None,
            expires_at_ms: None,
            holds: holds.iter().map(|s| s.to_string()).collect(),
            waits: waits.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_two_session_cycle_is_found_and_a_chain_is_not() {
        let graph = wait_for_graph(&[
            session("0xa", &["L1"], &["L2"]),
            session("0xb", &["L2"], &["L1"]),
            session("0xc", &["L3"], &["L1"]),
            session("0xd", &[], &["L3"]),
        ]);
        assert_eq!(graph.nodes.len(), 4);
        assert_eq!(graph.edges.len(), 4);
        assert_eq!(graph.cycles.len(), 1);
        let names: Vec<&str> = graph.cycles[0]
            .iter()
            .map(|&i| graph.nodes[i].session.as_str())
            .collect();
        assert_eq!(names.len(), 2);
        assert!(names.contains(&"0xa") && names.contains(&"0xb"));
        let cyclic: Vec<&str> = graph
            .edges
            .iter()
            .filter(|e| e.in_cycle)
            .map(|e| e.lock.as_str())
            .collect();
        assert_eq!(cyclic.len(), 2);
        assert!(graph.edges.iter().any(|e| e.lock == "L3" && !e.in_cycle));
    }

    #[test]
    fn waiting_behind_your_own_session_is_not_an_edge_and_sources_do_not_mix() {
        let mut other = session("0xb", &["L1"], &[]);
        other.source = "other".into();
        let graph = wait_for_graph(&[session("0xa", &["L1"], &["L1"]), other]);
        assert!(graph.edges.is_empty());
        assert!(graph.cycles.is_empty());
    }

    #[test]
    fn a_three_session_ring_is_one_cycle() {
        let graph = wait_for_graph(&[
            session("0x1", &["A"], &["B"]),
            session("0x2", &["B"], &["C"]),
            session("0x3", &["C"], &["A"]),
        ]);
        assert_eq!(graph.cycles, vec![vec![0, 1, 2]]);
        assert!(graph.edges.iter().all(|e| e.in_cycle));
        assert!(graph.in_cycle(2));
    }

    fn lock(holder_since: Option<i64>, waiters: usize, changed: i64) -> LockView {
        let mut lock = LockView {
            changed_ms: changed,
            ..LockView::default()
        };
        if let Some(since) = holder_since {
            lock.holders.push(HolderView {
                node: "/l/a".into(),
                session: "0x1".into(),
                since_ms: since,
                held_ms: 0,
                mode: None,
                watchers: 0,
                reentrancy: None,
                lease: None,
                version: None,
            });
        }
        for i in 0..waiters {
            lock.waiters.push(crate::wire::WaiterView {
                node: format!("/l/w{i}"),
                session: "0x2".into(),
                since_ms: changed,
                waited_ms: 0,
                position: i as u32 + 1,
                mode: None,
                watches: None,
                deadline_ms: None,
                lease: None,
            });
        }
        lock
    }

    #[test]
    fn staleness_rules() {
        let now = 1_000_000;
        assert_eq!(
            staleness(&lock(Some(now - 1_000), 3, now), now, 60_000),
            None
        );
        assert_eq!(
            staleness(&lock(Some(now - 61_000), 0, now), now, 60_000),
            Some(Stale::HeldTooLong)
        );
        assert_eq!(staleness(&lock(None, 2, now - 1_000), now, 60_000), None);
        assert_eq!(
            staleness(&lock(None, 2, now - 6_000), now, 60_000),
            Some(Stale::QueueWithoutHolder)
        );
        let mut legacy = lock(Some(now - 1_000), 0, now);
        legacy.deadline_ms = Some(now - 1);
        assert_eq!(staleness(&legacy, now, 60_000), Some(Stale::DeadlinePassed));
        assert_eq!(staleness(&lock(None, 0, 0), now, 60_000), None);

        let mut redisson = lock(Some(now - 20_000), 0, now);
        redisson.recipe = "redisson_lock".into();
        redisson.backend = crate::wire::Backend::Redis;
        redisson.lease_ms = Some(30_000);
        redisson.expires_at_ms = Some(now + 25_000);
        assert_eq!(staleness(&redisson, now, 600_000), None);
        redisson.expires_at_ms = Some(now + 4_000);
        assert_eq!(
            staleness(&redisson, now, 600_000),
            Some(Stale::WatchdogStalled)
        );

        let mut immortal = lock(Some(now - 11_000), 0, now);
        immortal.backend = crate::wire::Backend::Redis;
        immortal.flags = vec!["no_expiry".into()];
        assert_eq!(staleness(&immortal, now, 600_000), Some(Stale::NoTtl));
        immortal.holders[0].since_ms = now - 1_000;
        assert_eq!(staleness(&immortal, now, 600_000), None);

        let mut persistent = lock(Some(now - 1_000), 0, now);
        persistent.holders[0].session = "0x0".into();
        assert_eq!(
            staleness(&persistent, now, 600_000),
            Some(Stale::PersistentNode)
        );

        let mut usual = lock(Some(now - 40_000), 0, now);
        usual.usual_hold_ms = usual_hold(&[1_000, 2_000, 3_000, 1_500, 2_500]);
        assert_eq!(usual.usual_hold_ms, Some(2_000));
        assert_eq!(
            staleness(&usual, now, 600_000),
            Some(Stale::HeldBeyondUsual)
        );
        assert_eq!(usual_hold(&[1, 2, 3]), None);
        let all = stale_findings(&usual, now, 10_000);
        assert_eq!(all, vec![Stale::HeldTooLong, Stale::HeldBeyondUsual]);
        assert!(Stale::ALL
            .iter()
            .all(|r| !r.describe().is_empty() && !r.name().is_empty()));
    }
}
