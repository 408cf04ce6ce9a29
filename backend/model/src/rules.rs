//! Rules that judge the model: which locks are stale, and which sessions may be deadlocked.
//!
//! Pure functions over wire views, so the server (metrics) and the web UI (badges, the
//! wait-for graph) reach the same verdict from the same data. They read the clock only through
//! the `now_ms` they are given.

use std::collections::{BTreeMap, BTreeSet};

use crate::wire::{LockView, SessionView};

/// Why a lock looks stuck. The first matching reason wins, most certain first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// A legacy SETNX lock whose written deadline has passed: any client may take it over.
    DeadlinePassed,
    /// Waiters are queued but nothing holds the lock (a leftover fair-lock queue).
    QueueWithoutHolder,
    /// A holder has held longer than the configured limit.
    HeldTooLong,
}

impl Stale {
    pub fn describe(self) -> &'static str {
        match self {
            Stale::DeadlinePassed => "its deadline has passed",
            Stale::QueueWithoutHolder => "waiters are queued but nothing holds it",
            Stale::HeldTooLong => "held longer than the stale limit",
        }
    }
}

/// Judges one lock as of `now_ms`; `stale_hold_ms` is the longest hold considered normal.
pub fn staleness(lock: &LockView, now_ms: i64, stale_hold_ms: i64) -> Option<Stale> {
    if lock.deadline_ms.is_some_and(|d| d < now_ms) && !lock.holders.is_empty() {
        return Some(Stale::DeadlinePassed);
    }
    if lock.holders.is_empty() && !lock.waiters.is_empty() {
        // A waiter that just saw its predecessor go is about to hold: only a queue that stays
        // headless for a while is stuck.
        let headless_since = lock.changed_ms;
        if now_ms - headless_since > 5_000 {
            return Some(Stale::QueueWithoutHolder);
        }
    }
    if lock
        .holders
        .iter()
        .any(|h| now_ms - h.since_ms > stale_hold_ms)
    {
        return Some(Stale::HeldTooLong);
    }
    None
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
    }
}
