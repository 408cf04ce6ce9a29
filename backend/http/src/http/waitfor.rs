//! The sessions' wait-for graph a page at a time (`GET /api/v1/waitfor`), and its cycles (also
//! `GET /api/v1/deadlocks`, which answers every cycle and no edges).
//!
//! * Filter: `source`. Pages: `limit` (default 100, at most 1,000) and `cursor`, read as every
//!   paged endpoint reads them ([`super::paging`]): a bad parameter is a 400 naming it.
//! * Edges (`waiter` waits on `lock`, which `holder` holds) come longest wait first: by when the
//!   waiter began waiting on that lock (`waiting_since_ms`, from the lock's view: the waiter's
//!   earliest `since_ms` there), edges whose start is unknown last, ties by source, waiter,
//!   holder and lock. A wait's start does not move while it lasts, so a cursor never repeats
//!   or skips an edge that stayed.
//! * Each page carries the sessions its edges name, the graph's first [`CYCLES_MAX`] cycles
//!   (the same on every page) and how many there are.
//!
//! The graph and its cycles are `lockscope_model::rules::wait_for_graph`'s; this module only
//! orders, cuts and dresses them. It reads sessions and lock views it is handed and asks the
//! aggregator nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lockscope_model::rules::{wait_for_graph, WaitForGraph};
use lockscope_model::wire::{
    CycleView, CycleWaitView, LockView, SessionView, WaitEdgeView, WaitForPage,
};

use super::paging::{fingerprint, BadParameter, Keyset, Order, Params, Window};

/// Cycles an answer lists at most.
pub const CYCLES_MAX: usize = 100;

/// An edge's tie-break: source, waiter, holder, lock.
type Tie = (String, String, String, String);

/// The parameters a wait-for query may carry.
const PARAMETERS: &[&str] = &["source", "limit", "cursor"];

/// A checked `GET /api/v1/waitfor` query.
#[derive(Debug, Clone)]
pub struct WaitForQuery {
    pub source: Option<String>,
    pub limit: usize,
    /// Always ascending by wait start; where the page starts.
    keyset: Keyset<i64, Tie>,
}

impl WaitForQuery {
    /// Checks the query string's pairs as of `now` (epoch ms); the first problem found is the
    /// answer.
    pub fn parse(pairs: &[(String, String)], now: i64) -> Result<WaitForQuery, BadParameter> {
        let params = Params::new(pairs, PARAMETERS)?;
        let mut query = WaitForQuery {
            source: params.text("source")?,
            limit: params.limit()?,
            keyset: Keyset {
                order: Order::Asc,
                after: None,
            },
        };
        query.keyset.after = params.cursor(query.fingerprint(), now)?;
        Ok(query)
    }

    /// What a cursor is bound to: the endpoint and the source.
    fn fingerprint(&self) -> u64 {
        fingerprint(("waitfor", &self.source))
    }
}

/// When each session began waiting on a lock, read from the lock's view once per lock.
struct WaitStarts<F> {
    lock: F,
    by_lock: HashMap<String, HashMap<String, i64>>,
}

impl<F: Fn(&str) -> Option<LockView>> WaitStarts<F> {
    fn of(&mut self, lock: &str, session: &str) -> Option<i64> {
        if !self.by_lock.contains_key(lock) {
            let mut starts: HashMap<String, i64> = HashMap::new();
            for waiter in (self.lock)(lock).map(|l| l.waiters).unwrap_or_default() {
                let start = starts.entry(waiter.session).or_insert(waiter.since_ms);
                *start = (*start).min(waiter.since_ms);
            }
            self.by_lock.insert(lock.to_string(), starts);
        }
        self.by_lock.get(lock)?.get(session).copied()
    }
}

/// Answers `query` over `sessions`, reading when each wait began from the lock views `lock`
/// gives by id; the cursor of the next page is handed out at `now`.
pub fn page(
    query: &WaitForQuery,
    sessions: Vec<SessionView>,
    lock: impl Fn(&str) -> Option<LockView>,
    now: i64,
) -> WaitForPage {
    // Edges join sessions of one source only, so the filter can come first.
    let sessions: Vec<SessionView> = sessions
        .into_iter()
        .filter(|s| query.source.as_ref().is_none_or(|want| *want == s.source))
        .collect();
    let graph = wait_for_graph(&sessions);
    let mut starts = WaitStarts {
        lock,
        by_lock: HashMap::new(),
    };
    let mut window = Window::new(query.limit, &query.keyset);
    for edge in &graph.edges {
        let (waiter, holder) = (&graph.nodes[edge.from], &graph.nodes[edge.to]);
        let since = starts.of(&edge.lock, &waiter.session);
        let place = (
            since.unwrap_or(i64::MAX),
            (
                waiter.source.clone(),
                waiter.session.clone(),
                holder.session.clone(),
                edge.lock.clone(),
            ),
        );
        if window.wants(&place) {
            let view = WaitEdgeView {
                source: waiter.source.clone(),
                waiter: waiter.session.clone(),
                holder: holder.session.clone(),
                lock: edge.lock.clone(),
                waiting_since_ms: since,
                in_cycle: edge.in_cycle,
            };
            window.offer(place, view);
        }
    }
    let (edges, next) = window.finish(query.fingerprint(), now);
    let named: BTreeSet<(&str, &str)> = edges
        .iter()
        .flat_map(|e| {
            [
                (e.source.as_str(), e.waiter.as_str()),
                (e.source.as_str(), e.holder.as_str()),
            ]
        })
        .collect();
    let mut page_sessions: Vec<SessionView> = sessions
        .iter()
        .filter(|s| named.contains(&(s.source.as_str(), s.session.as_str())))
        .cloned()
        .collect();
    page_sessions.sort_by(|a, b| (&a.source, &a.session).cmp(&(&b.source, &b.session)));
    let (cycles, cycles_total) = cycles(&graph, CYCLES_MAX);
    WaitForPage {
        total: graph.edges.len() as u64,
        edges,
        sessions: page_sessions,
        next,
        cycles,
        cycles_total,
    }
}

/// The graph's cycles, by source and sessions, at most `max` of them, and how many there are.
pub fn cycles(graph: &WaitForGraph, max: usize) -> (Vec<CycleView>, u64) {
    let mut waits: BTreeMap<usize, Vec<CycleWaitView>> = BTreeMap::new();
    let mut component = vec![usize::MAX; graph.nodes.len()];
    for (i, cycle) in graph.cycles.iter().enumerate() {
        for &n in cycle {
            component[n] = i;
        }
    }
    for edge in graph.edges.iter().filter(|e| e.in_cycle) {
        waits
            .entry(component[edge.from])
            .or_default()
            .push(CycleWaitView {
                waiter: graph.nodes[edge.from].session.clone(),
                lock: edge.lock.clone(),
                holder: graph.nodes[edge.to].session.clone(),
            });
    }
    let mut cycles: Vec<CycleView> = graph
        .cycles
        .iter()
        .enumerate()
        .map(|(i, cycle)| {
            let mut sessions: Vec<String> = cycle
                .iter()
                .map(|&n| graph.nodes[n].session.clone())
                .collect();
            sessions.sort();
            let mut waits = waits.remove(&i).unwrap_or_default();
            waits.sort_by(|a, b| {
                (&a.waiter, &a.lock, &a.holder).cmp(&(&b.waiter, &b.lock, &b.holder))
            });
            CycleView {
                source: cycle
                    .first()
                    .map(|&n| graph.nodes[n].source.clone())
                    .unwrap_or_default(),
                sessions,
                waits,
            }
        })
        .collect();
    cycles.sort_by(|a, b| (&a.source, &a.sessions).cmp(&(&b.source, &b.sessions)));
    let total = cycles.len() as u64;
    cycles.truncate(max);
    (cycles, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::paging::pairs;
    use lockscope_model::wire::SessionKind;

    fn session(source: &str, id: &str, holds: &[&str], waits: &[&str]) -> SessionView {
        SessionView {
            source: source.into(),
            session: id.into(),
            kind: SessionKind::ZookeeperSession,
            timeout_ms: None,
            connected: true,
            server: None,
            expires_at_ms: None,
            holds: holds.iter().map(|l| l.to_string()).collect(),
            waits: waits.iter().map(|l| l.to_string()).collect(),
            connection: None,
        }
    }

    /// A lock whose waiters are `(session, since)`.
    fn lock(id: &str, waiters: &[(&str, i64)]) -> LockView {
        serde_json::from_value(serde_json::json!({
            "id": id, "source": "s", "backend": "zookeeper", "path": "/p", "recipe": "queue",
            "holders": [], "watchers": 0, "herd": false, "changed_ms": 0,
            "waiters": waiters.iter().enumerate().map(|(i, (session, since))| serde_json::json!({
                "node": format!("n{i}"), "session": session, "since_ms": since,
                "waited_ms": 0, "position": i + 1,
            })).collect::<Vec<_>>(),
        }))
        .expect("lock view")
    }

    #[test]
    fn bad_parameters_are_named() {
        for (q, name) in [
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("cursor=nope", "cursor"),
            ("sort=since", "sort"),
            ("order=desc", "order"),
            ("source=a&source=b", "source"),
        ] {
            let e = WaitForQuery::parse(&pairs(q), 0).expect_err(q);
            assert_eq!(e.parameter, name, "{q}: {}", e.message);
        }
        assert!(WaitForQuery::parse(&pairs("access_token=t&source=zk&limit=5"), 0).is_ok());
    }

    #[test]
    fn edges_come_longest_wait_first_a_page_at_a_time() {
        // a and b wait on each other (a cycle); c waits on a's lock; d waits on b's, start
        // unknown; another source's pair.
        let sessions = vec![
            session("s", "a", &["s~1"], &["s~2"]),
            session("s", "b", &["s~2"], &["s~1"]),
            session("s", "c", &[], &["s~1"]),
            session("s", "d", &[], &["s~3"]),
            session("s", "e", &["s~3"], &[]),
            session("s", "idle", &[], &[]),
            session("t", "x", &["t~1"], &[]),
            session("t", "y", &[], &["t~1"]),
        ];
        let views = [
            lock("s~1", &[("b", 300), ("c", 100), ("c", 500)]),
            lock("s~2", &[("a", 200)]),
            lock("t~1", &[("y", 50)]),
        ];
        let view = |id: &str| views.iter().find(|l| l.id == id).cloned();
        let run = |q: &str, at: i64| {
            let query = WaitForQuery::parse(&pairs(q), at).expect(q);
            page(&query, sessions.clone(), view, at)
        };
        let all = run("", 0);
        let order: Vec<(&str, &str, Option<i64>)> = all
            .edges
            .iter()
            .map(|e| (e.waiter.as_str(), e.holder.as_str(), e.waiting_since_ms))
            .collect();
        assert_eq!(
            order,
            [
                ("y", "x", Some(50)),
                ("c", "a", Some(100)),
                ("a", "b", Some(200)),
                ("b", "a", Some(300)),
                ("d", "e", None),
            ]
        );
        assert_eq!(all.total, 5);
        assert_eq!(all.next, None);
        let in_cycle: Vec<bool> = all.edges.iter().map(|e| e.in_cycle).collect();
        assert_eq!(in_cycle, [false, false, true, true, false]);
        assert_eq!(all.cycles_total, 1);
        assert_eq!(all.cycles[0].source, "s");
        assert_eq!(all.cycles[0].sessions, ["a", "b"]);
        assert_eq!(all.cycles[0].waits.len(), 2);
        let named: Vec<&str> = all.sessions.iter().map(|s| s.session.as_str()).collect();
        assert_eq!(named, ["a", "b", "c", "d", "e", "x", "y"]);

        // Two at a time, by cursor, one source.
        let first = run("source=s&limit=2", 1_000);
        assert_eq!(first.total, 4);
        let waiters: Vec<&str> = first.edges.iter().map(|e| e.waiter.as_str()).collect();
        assert_eq!(waiters, ["c", "a"]);
        let named: Vec<&str> = first.sessions.iter().map(|s| s.session.as_str()).collect();
        assert_eq!(named, ["a", "b", "c"]);
        let next = first.next.expect("next");
        let second = run(&format!("source=s&limit=2&cursor={next}"), 2_000);
        let waiters: Vec<&str> = second.edges.iter().map(|e| e.waiter.as_str()).collect();
        assert_eq!(waiters, ["b", "d"]);
        assert_eq!(second.next, None);
        assert_eq!(second.cycles, first.cycles);
        // The cursor belongs to source=s.
        let other = WaitForQuery::parse(&pairs(&format!("limit=2&cursor={next}")), 2_000);
        assert_eq!(other.expect_err("foreign").parameter, "cursor");
    }

    #[test]
    fn cycles_are_capped_and_counted() {
        let mut sessions = Vec::new();
        for i in 0..(CYCLES_MAX + 5) {
            let (a, b) = (format!("a{i:03}"), format!("b{i:03}"));
            let (l1, l2) = (format!("s~{i}x"), format!("s~{i}y"));
            sessions.push(session("s", &a, &[&l1], &[&l2]));
            sessions.push(session("s", &b, &[&l2], &[&l1]));
        }
        let graph = wait_for_graph(&sessions);
        let (cycles, total) = cycles(&graph, CYCLES_MAX);
        assert_eq!((cycles.len(), total), (CYCLES_MAX, CYCLES_MAX as u64 + 5));
        assert_eq!(cycles[0].sessions, ["a000", "b000"]);
        assert_eq!(cycles[1].sessions, ["a001", "b001"]);
    }
}
