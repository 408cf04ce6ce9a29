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
//! * Sessions are named by process ([`joined_graph`]): a session of one source and a session
//!   of another with the same process name are one participant, so a cycle may span sources
//!   (its hops each name their source); the `[[identity]]` rules ([`IdentityRules`]) rewrite
//!   names first. `GET /api/v1/blockers` ([`blockers`]) ranks the participants at the roots of
//!   the graph by what they hold up.
//!
//! The graph and its cycles are `lockscope_model::rules::wait_for_graph`'s; this module only
//! names, orders, cuts and dresses them. It reads sessions and lock views it is handed and
//! asks the aggregator nothing.

use std::collections::{BTreeSet, HashMap};

use lockscope_model::rules::{process_of, wait_for_graph, WaitForGraph};
use lockscope_model::wire::{
    BlockersPage, CycleMemberView, CycleView, CycleWaitView, JoinView, LockView, ProcessView,
    RootBlockerView, SessionRef, SessionView, WaitEdgeView, WaitForPage,
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

/// Rules that rewrite process names (`[[identity]]`): for a source (or all), a regular
/// expression over the name its source gives and a template (`$1`, `$name`) for the name.
#[derive(Debug, Clone, Default)]
pub struct IdentityRules {
    pub rules: Vec<IdentityRule>,
}

#[derive(Debug, Clone)]
pub struct IdentityRule {
    pub source: Option<String>,
    pub pattern: regex::Regex,
    pub name: String,
}

impl IdentityRules {
    /// The `[[identity]]` rules, compiled (a pattern that does not compile was refused by
    /// validation, so none is dropped here).
    pub fn compile(config: &[crate::config::IdentityRuleConfig]) -> IdentityRules {
        IdentityRules {
            rules: config
                .iter()
                .filter_map(|r| {
                    Some(IdentityRule {
                        source: r.source.clone(),
                        pattern: regex::Regex::new(&r.pattern).ok()?,
                        name: r.name.clone(),
                    })
                })
                .collect(),
        }
    }

    /// `process` as the first rule that applies to `source` and matches renames it.
    pub fn apply(&self, source: &str, mut process: ProcessView) -> ProcessView {
        for rule in &self.rules {
            if rule.source.as_deref().is_some_and(|s| s != source) {
                continue;
            }
            if let Some(captures) = rule.pattern.captures(&process.name) {
                let mut name = String::new();
                captures.expand(&rule.name, &mut name);
                if !name.is_empty() {
                    process.name = name;
                    process.from = "rule".into();
                }
                break;
            }
        }
        process
    }
}

/// The process of session `s`: its connection's, else what the lock views it holds and waits
/// on say of its participants (their identities), through `rules`.
pub fn process_for(
    s: &SessionView,
    lock: &impl Fn(&str) -> Option<LockView>,
    rules: &IdentityRules,
) -> Option<ProcessView> {
    let mut identities: Vec<String> = Vec::new();
    if s.connection.is_none() {
        // A few of its locks tell; a session's participants carry one identity.
        for id in s.holds.iter().chain(&s.waits).take(4) {
            if let Some(view) = lock(id) {
                identities.extend(
                    view.holders
                        .iter()
                        .filter(|h| h.session == s.session)
                        .filter_map(|h| h.identity.clone()),
                );
                identities.extend(
                    view.waiters
                        .iter()
                        .filter(|w| w.session == s.session)
                        .filter_map(|w| w.identity.clone()),
                );
            }
        }
    }
    let process = process_of(s, identities.iter().map(String::as_str))?;
    Some(rules.apply(&s.source, process))
}

/// The wait-for graph of `sessions` with each node's process named and sessions of one process
/// in different sources joined.
pub fn joined_graph(
    sessions: &[SessionView],
    lock: &impl Fn(&str) -> Option<LockView>,
    rules: &IdentityRules,
) -> WaitForGraph {
    let mut graph = wait_for_graph(sessions);
    let by_key: HashMap<(&str, &str), &SessionView> = sessions
        .iter()
        .map(|s| ((s.source.as_str(), s.session.as_str()), s))
        .collect();
    graph.join_processes(|key| {
        let s = by_key.get(&(key.source.as_str(), key.session.as_str()))?;
        process_for(s, lock, rules)
    });
    graph
}

/// Answers `query` over `sessions`, reading when each wait began from the lock views `lock`
/// gives by id; the cursor of the next page is handed out at `now`.
pub fn page(
    query: &WaitForQuery,
    sessions: Vec<SessionView>,
    lock: impl Fn(&str) -> Option<LockView>,
    rules: &IdentityRules,
    now: i64,
) -> WaitForPage {
    // Joins span sources: the graph is the whole one, the filter picks edges and cycles.
    let graph = joined_graph(&sessions, &lock, rules);
    let wanted = |source: &str| query.source.as_ref().is_none_or(|want| want == source);
    let mut starts = WaitStarts {
        lock,
        by_lock: HashMap::new(),
    };
    let mut window = Window::new(query.limit, &query.keyset);
    let mut total = 0u64;
    for edge in &graph.edges {
        let (waiter, holder) = (&graph.nodes[edge.from], &graph.nodes[edge.to]);
        if !wanted(&waiter.source) {
            continue;
        }
        total += 1;
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
    let node_of: HashMap<(&str, &str), usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, k)| ((k.source.as_str(), k.session.as_str()), i))
        .collect();
    for s in &mut page_sessions {
        if let Some(&n) = node_of.get(&(s.source.as_str(), s.session.as_str())) {
            s.process = graph.processes.get(n).cloned().flatten();
        }
    }
    let joins = graph
        .joins
        .iter()
        .filter(|j| {
            j.nodes.iter().any(|&n| {
                let k = &graph.nodes[n];
                named.contains(&(k.source.as_str(), k.session.as_str()))
            })
        })
        .map(|j| JoinView {
            process: j.process.clone(),
            exact: j.exact,
            sessions: j.nodes.iter().map(|&n| session_ref(&graph, n)).collect(),
        })
        .collect();
    let (mut cycles, _) = cycles(&graph, usize::MAX);
    cycles.retain(|c| c.sources.iter().any(|s| wanted(s)));
    let cycles_total = cycles.len() as u64;
    cycles.truncate(CYCLES_MAX);
    WaitForPage {
        total,
        edges,
        sessions: page_sessions,
        next,
        cycles,
        cycles_total,
        joins,
    }
}

fn session_ref(graph: &WaitForGraph, n: usize) -> SessionRef {
    SessionRef {
        source: graph.nodes[n].source.clone(),
        session: graph.nodes[n].session.clone(),
    }
}

/// The parameters a blockers query may carry.
const BLOCKER_PARAMETERS: &[&str] = &["source", "limit"];

/// A checked `GET /api/v1/blockers` query: `source` (root blockers with a session there) and
/// `limit` (default 100, at most 1,000).
#[derive(Debug, Clone)]
pub struct BlockersQuery {
    pub source: Option<String>,
    pub limit: usize,
}

impl BlockersQuery {
    pub fn parse(pairs: &[(String, String)]) -> Result<BlockersQuery, BadParameter> {
        let params = Params::new(pairs, BLOCKER_PARAMETERS)?;
        Ok(BlockersQuery {
            source: params.text("source")?,
            limit: params.limit()?,
        })
    }
}

/// The root blockers of `graph`, biggest impact first, dressed for the API: when each wait
/// began comes from the lock views `lock` gives.
pub fn root_blockers(
    graph: &WaitForGraph,
    sessions: &[SessionView],
    lock: impl Fn(&str) -> Option<LockView>,
    now: i64,
) -> Vec<RootBlockerView> {
    let mut starts = WaitStarts {
        lock,
        by_lock: HashMap::new(),
    };
    let since: Vec<Option<i64>> = graph
        .edges
        .iter()
        .map(|e| starts.of(&e.lock, &graph.nodes[e.from].session))
        .collect();
    let by_key: HashMap<(&str, &str), &SessionView> = sessions
        .iter()
        .map(|s| ((s.source.as_str(), s.session.as_str()), s))
        .collect();
    graph
        .root_blockers(|e| since[e], now)
        .into_iter()
        .map(|root| {
            let first = root.nodes[0];
            RootBlockerView {
                sessions: root.nodes.iter().map(|&n| session_ref(graph, n)).collect(),
                process: graph.processes.get(first).cloned().flatten(),
                direct: root.direct,
                total: root.total,
                waited_ms: root.waited_ms,
                locks: root.locks.into_iter().take(20).collect(),
                // A database connection's details, from whichever of its sessions has them.
                connection: root.nodes.iter().find_map(|&n| {
                    let k = &graph.nodes[n];
                    by_key
                        .get(&(k.source.as_str(), k.session.as_str()))?
                        .connection
                        .clone()
                }),
            }
        })
        .collect()
}

/// Answers `GET /api/v1/blockers`.
pub fn blockers(
    query: &BlockersQuery,
    sessions: Vec<SessionView>,
    lock: impl Fn(&str) -> Option<LockView>,
    rules: &IdentityRules,
    now: i64,
) -> BlockersPage {
    let graph = joined_graph(&sessions, &lock, rules);
    let mut all = root_blockers(&graph, &sessions, lock, now);
    all.retain(|b| {
        query
            .source
            .as_ref()
            .is_none_or(|want| b.sessions.iter().any(|s| &s.source == want))
    });
    let total = all.len() as u64;
    all.truncate(query.limit);
    BlockersPage {
        blockers: all,
        total,
    }
}

/// The graph's cycles — inside one source, then across sources (joined by process) — by
/// source and sessions, at most `max` of them, and how many there are.
pub fn cycles(graph: &WaitForGraph, max: usize) -> (Vec<CycleView>, u64) {
    let process = |n: usize| graph.processes.get(n).cloned().flatten();
    let all = graph
        .cycles
        .iter()
        .map(|c| (c, true))
        .chain(graph.cross_cycles.iter().map(|c| (&c.nodes, c.exact)));
    let mut cycles: Vec<CycleView> = all
        .map(|(cycle, counted)| {
            let inside: BTreeSet<usize> = cycle.iter().copied().collect();
            let mut waits: Vec<CycleWaitView> = graph
                .edges
                .iter()
                .filter(|e| inside.contains(&e.from) && inside.contains(&e.to))
                .map(|e| CycleWaitView {
                    waiter: graph.nodes[e.from].session.clone(),
                    lock: e.lock.clone(),
                    holder: graph.nodes[e.to].session.clone(),
                    source: graph.nodes[e.from].source.clone(),
                    waiter_process: process(e.from).map(|p| p.name),
                    holder_process: process(e.to).map(|p| p.name),
                })
                .collect();
            waits.sort_by(|a, b| {
                (&a.source, &a.waiter, &a.lock, &a.holder)
                    .cmp(&(&b.source, &b.waiter, &b.lock, &b.holder))
            });
            let mut members: Vec<CycleMemberView> = cycle
                .iter()
                .map(|&n| CycleMemberView {
                    source: graph.nodes[n].source.clone(),
                    session: graph.nodes[n].session.clone(),
                    process: process(n),
                })
                .collect();
            members.sort_by(|a, b| (&a.source, &a.session).cmp(&(&b.source, &b.session)));
            let mut sessions: Vec<String> = members.iter().map(|m| m.session.clone()).collect();
            sessions.sort();
            let sources: BTreeSet<String> = members.iter().map(|m| m.source.clone()).collect();
            CycleView {
                source: members
                    .first()
                    .map(|m| m.source.clone())
                    .unwrap_or_default(),
                sessions,
                waits,
                sources: sources.into_iter().collect(),
                members,
                counted,
            }
        })
        .collect();
    cycles.sort_by(|a, b| {
        (a.sources.len(), &a.source, &a.sessions).cmp(&(b.sources.len(), &b.source, &b.sessions))
    });
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
            process: None,
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
            page(
                &query,
                sessions.clone(),
                view,
                &IdentityRules::default(),
                at,
            )
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
