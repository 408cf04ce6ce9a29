//! Rules that judge the model: which locks are stale, and which sessions may be deadlocked.
//!
//! Pure functions over wire views, so the server (metrics) and the web UI (badges, the
//! wait-for graph) reach the same verdict from the same data. They read the clock only through
//! the `now_ms` they are given.
//!
//! Each stale-lock rule is a type implementing [`StaleRule`] (after tokio-console's `Warn`
//! lints): its name, its explanation, the backends it judges and its check. [`BUILTIN`] lists
//! lockscope's own, in the order findings are reported; a backend brings rules of its own to
//! [`stale_findings_with`], which reports them after the built-in ones.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::wire::{Backend, LockView, ProcessView, SessionView, StaleView};

/// One way a lock looks stuck.
///
/// A rule's [`name`](StaleRule::name) is its identity: it is the `rule` of the API's `stale`
/// findings and of `lockscope_stale_locks{rule}`, so it must be stable and distinct from every
/// other rule's (two rules with one name compare equal).
pub trait StaleRule: Send + Sync {
    /// The rule's name in the API and in `lockscope_stale_locks{rule}`.
    fn name(&self) -> &'static str;

    /// Why a lock breaking the rule looks stuck, for people (the API's `explanation`, the UI).
    fn describe(&self) -> &'static str;

    /// Whether the rule judges locks of `backend` at all; every backend unless the rule says
    /// otherwise. A rule that only makes sense for one backend says so here rather than
    /// checking `lock.backend` in [`check`](StaleRule::check).
    fn applies_to(&self, backend: Backend) -> bool {
        let _ = backend;
        true
    }

    /// Whether `lock` breaks the rule as of `now_ms`; `stale_hold_ms` is the longest hold
    /// considered normal. Only called for locks of a backend the rule
    /// [applies to](StaleRule::applies_to).
    fn check(&self, lock: &LockView, now_ms: i64, stale_hold_ms: i64) -> bool;
}

impl fmt::Debug for dyn StaleRule + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rules are the same rule when their names are: the name is what the API and metrics report.
impl PartialEq for dyn StaleRule + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for dyn StaleRule + '_ {}

/// A queue may be headless for a moment while the next waiter notices it holds.
const HEADLESS_GRACE_MS: i64 = 5_000;
/// "Far beyond usual" needs at least this long a hold, so short locks do not flap.
const BEYOND_USUAL_MIN_MS: i64 = 30_000;
/// No-TTL locks are only reported once held this long (a SETNX-then-EXPIRE pair is in flight).
const NO_TTL_GRACE_MS: i64 = 10_000;

/// How long the longest-standing holder of `lock` has held it as of `now_ms`; 0 when nothing
/// holds it.
pub fn oldest_hold_ms(lock: &LockView, now_ms: i64) -> i64 {
    lock.holders
        .iter()
        .map(|h| now_ms.saturating_sub(h.since_ms))
        .max()
        .unwrap_or(0)
}

/// A legacy SETNX lock whose written deadline has passed: any client may take it over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadlinePassed;

impl StaleRule for DeadlinePassed {
    fn name(&self) -> &'static str {
        "deadline_passed"
    }
    fn describe(&self) -> &'static str {
        "the deadline written in its value has passed"
    }
    fn check(&self, lock: &LockView, now_ms: i64, _stale_hold_ms: i64) -> bool {
        lock.deadline_ms.is_some_and(|d| d < now_ms)
    }
}

/// Waiters are queued but nothing holds the lock (a leftover fair-lock queue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueWithoutHolder;

impl StaleRule for QueueWithoutHolder {
    fn name(&self) -> &'static str {
        "queue_without_holder"
    }
    fn describe(&self) -> &'static str {
        "waiters are queued but nothing holds it"
    }
    /// A database's waiters are connections blocked in the server, never a queue left behind:
    /// no visible holder there means one the database does not show (a `GET_LOCK` named by a
    /// bound parameter, no `metadata_lock_info` plugin).
    fn applies_to(&self, backend: Backend) -> bool {
        !backend.is_database()
    }
    fn check(&self, lock: &LockView, now_ms: i64, _stale_hold_ms: i64) -> bool {
        lock.holders.is_empty()
            && !lock.waiters.is_empty()
            && now_ms.saturating_sub(lock.changed_ms) > HEADLESS_GRACE_MS
    }
}

/// A Redisson lock whose TTL fell well below its lease: the watchdog stopped renewing.
/// Redisson is a Redis client, so the rule judges Redis locks only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchdogStalled;

impl StaleRule for WatchdogStalled {
    fn name(&self) -> &'static str {
        "watchdog_stalled"
    }
    fn describe(&self) -> &'static str {
        "its TTL fell well below its lease: the holder's watchdog stopped renewing it"
    }
    fn applies_to(&self, backend: Backend) -> bool {
        backend == Backend::Redis
    }
    fn check(&self, lock: &LockView, now_ms: i64, _stale_hold_ms: i64) -> bool {
        if lock.holders.is_empty() || !lock.recipe.starts_with("redisson") {
            return false;
        }
        match (lock.lease_ms, lock.expires_at_ms) {
            (Some(lease), Some(at)) => lease >= 3_000 && at.saturating_sub(now_ms) < lease / 3,
            _ => false,
        }
    }
}

/// A lock held without any TTL (the `no_expiry` flag): if its holder died, nothing will ever
/// free it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoTtl;

impl StaleRule for NoTtl {
    fn name(&self) -> &'static str {
        "no_ttl"
    }
    fn describe(&self) -> &'static str {
        "held without a TTL: if the holder died, nothing will ever free it"
    }
    fn check(&self, lock: &LockView, now_ms: i64, _stale_hold_ms: i64) -> bool {
        !lock.holders.is_empty()
            && lock.flags.iter().any(|f| f == "no_expiry")
            && oldest_hold_ms(lock, now_ms) > NO_TTL_GRACE_MS
    }
}

/// A ZooKeeper lock held by a persistent node (owner session `0x0`): no session end will ever
/// free it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PersistentNode;

impl StaleRule for PersistentNode {
    fn name(&self) -> &'static str {
        "persistent_node"
    }
    fn describe(&self) -> &'static str {
        "held by a persistent node: no session ending will ever free it"
    }
    fn applies_to(&self, backend: Backend) -> bool {
        backend == Backend::Zookeeper
    }
    fn check(&self, lock: &LockView, _now_ms: i64, _stale_hold_ms: i64) -> bool {
        // A kazoo lease and a ShedLock node are persistent by design: they hold by time
        // (a lease's end, `deadline_passed`; ShedLock's instant, after which it shows free).
        !matches!(lock.recipe.as_str(), "kazoo_lease" | "shedlock")
            && lock.holders.iter().any(|h| h.session == "0x0")
    }
}

/// A holder has held longer than the configured limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldTooLong;

impl StaleRule for HeldTooLong {
    fn name(&self) -> &'static str {
        "held_too_long"
    }
    fn describe(&self) -> &'static str {
        "held longer than the stale limit"
    }
    fn check(&self, lock: &LockView, now_ms: i64, stale_hold_ms: i64) -> bool {
        !lock.holders.is_empty() && oldest_hold_ms(lock, now_ms) > stale_hold_ms
    }
}

/// A holder has held far longer than this lock is usually held (see [`usual_hold`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldBeyondUsual;

impl StaleRule for HeldBeyondUsual {
    fn name(&self) -> &'static str {
        "held_beyond_usual"
    }
    fn describe(&self) -> &'static str {
        "held ten times longer than this lock is usually held"
    }
    fn check(&self, lock: &LockView, now_ms: i64, _stale_hold_ms: i64) -> bool {
        let Some(usual) = lock.usual_hold_ms else {
            return false;
        };
        let oldest_hold = oldest_hold_ms(lock, now_ms);
        !lock.holders.is_empty()
            && oldest_hold > BEYOND_USUAL_MIN_MS
            && oldest_hold > 10 * usual.max(1)
    }
}

/// lockscope's own rules, most certain first: the order of [`stale_findings`] and the rules
/// `lockscope_stale_locks` reports for every source.
pub const BUILTIN: &[&dyn StaleRule] = &[
    &DeadlinePassed,
    &QueueWithoutHolder,
    &WatchdogStalled,
    &NoTtl,
    &PersistentNode,
    &HeldTooLong,
    &HeldBeyondUsual,
];

/// Every built-in rule `lock` breaks as of `now_ms`, most certain first; `stale_hold_ms` is the
/// longest hold considered normal.
pub fn stale_findings(
    lock: &LockView,
    now_ms: i64,
    stale_hold_ms: i64,
) -> Vec<&'static dyn StaleRule> {
    stale_findings_with(lock, now_ms, stale_hold_ms, &[])
}

/// Every rule `lock` breaks as of `now_ms`: the built-in ones in [`BUILTIN`]'s order, then a
/// backend's `extra` rules in their order. Only rules that [apply](StaleRule::applies_to) to
/// the lock's backend judge it.
pub fn stale_findings_with<'r>(
    lock: &LockView,
    now_ms: i64,
    stale_hold_ms: i64,
    extra: &[&'r dyn StaleRule],
) -> Vec<&'r dyn StaleRule> {
    BUILTIN
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .filter(|rule| rule.applies_to(lock.backend) && rule.check(lock, now_ms, stale_hold_ms))
        .collect()
}

/// The first built-in rule `lock` breaks, if any (see [`stale_findings`]).
pub fn staleness(
    lock: &LockView,
    now_ms: i64,
    stale_hold_ms: i64,
) -> Option<&'static dyn StaleRule> {
    BUILTIN
        .iter()
        .copied()
        .find(|rule| rule.applies_to(lock.backend) && rule.check(lock, now_ms, stale_hold_ms))
}

/// The median of recent hold times, the "usual hold" of [`HeldBeyondUsual`]; `None` with
/// fewer than five samples.
pub fn usual_hold(holds_ms: &[i64]) -> Option<i64> {
    if holds_ms.len() < 5 {
        return None;
    }
    let mut sorted = holds_ms.to_vec();
    sorted.sort_unstable();
    Some(sorted[sorted.len() / 2])
}

/// The most sessions of one process name a source may have for them to be joined with
/// another source's (as a guess): a small pool; more (every connection from one host) is not
/// one process.
pub const JOIN_POOL_MAX: usize = 3;

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
    /// Each cycle's node indexes (strongly connected components of two or more sessions),
    /// inside one source.
    pub cycles: Vec<Vec<usize>>,
    /// Each node's process, once [`WaitForGraph::join_processes`] named them.
    pub processes: Vec<Option<ProcessView>>,
    /// Nodes of different sources that are one process.
    pub joins: Vec<ProcessJoin>,
    /// Cycles that only joining by process closes: they span sources.
    pub cross_cycles: Vec<CrossCycle>,
}

/// Nodes (of different sources) that belong to one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessJoin {
    pub process: String,
    pub nodes: Vec<usize>,
    /// Every name is exact and no source has two sessions of that name.
    pub exact: bool,
}

/// A cycle across sources: its nodes, and whether every join it needs is exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossCycle {
    pub nodes: Vec<usize>,
    pub exact: bool,
}

/// A participant (a node, or the nodes of one process) that holds others up and waits on
/// nobody ([`WaitForGraph::root_blockers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootBlocker {
    /// Its nodes: one, or one per source when joined by process.
    pub nodes: Vec<usize>,
    /// Participants waiting on a lock it holds.
    pub direct: u64,
    /// Participants held up through any number of hops.
    pub total: u64,
    /// Those participants' waits summed, each one's longest (ms).
    pub waited_ms: i64,
    /// The locks it holds that others wait on, sorted.
    pub locks: Vec<String>,
}

impl WaitForGraph {
    pub fn in_cycle(&self, node: usize) -> bool {
        self.cycles.iter().any(|c| c.contains(&node))
            || self.cross_cycles.iter().any(|c| c.nodes.contains(&node))
    }

    /// Names each node's process (`process_of`) and joins nodes of different sources with
    /// the same process name into one participant: cycles only such a join closes become
    /// [`WaitForGraph::cross_cycles`] (their edges `in_cycle` too). Inside one source, nodes
    /// with one name stay apart (a connection pool shares an `application_name`); a join is
    /// exact only when both names are exact and neither source has two nodes of that name.
    pub fn join_processes(
        &mut self,
        mut process_of: impl FnMut(&SessionKey) -> Option<ProcessView>,
    ) {
        self.processes = self.nodes.iter().map(&mut process_of).collect();
        let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, p) in self.processes.iter().enumerate() {
            if let Some(p) = p {
                by_name.entry(p.name.as_str()).or_default().push(i);
            }
        }
        let mut joins = Vec::new();
        for (name, nodes) in by_name {
            let mut per_source: BTreeMap<&str, usize> = BTreeMap::new();
            for &n in &nodes {
                *per_source.entry(self.nodes[n].source.as_str()).or_default() += 1;
            }
            // One source only: nothing to join. More than a small pool of one name in a
            // source (every connection from one host): joining them would make one participant
            // of unrelated ones.
            if per_source.len() < 2 || per_source.values().any(|&k| k > JOIN_POOL_MAX) {
                continue;
            }
            let exact = per_source.len() == nodes.len()
                && nodes
                    .iter()
                    .all(|&n| self.processes[n].as_ref().is_some_and(|p| p.exact));
            joins.push(ProcessJoin {
                process: name.to_string(),
                nodes,
                exact,
            });
        }
        self.joins = joins;
        let rep = self.representatives(false);
        let contracted: Vec<WaitEdge> = self
            .edges
            .iter()
            .filter(|e| rep[e.from] != rep[e.to])
            .map(|e| WaitEdge {
                from: rep[e.from],
                to: rep[e.to],
                lock: String::new(),
                in_cycle: false,
            })
            .collect();
        let mut cross = Vec::new();
        for component in strongly_connected(self.nodes.len(), &contracted) {
            if component.len() < 2 {
                continue;
            }
            let reps: BTreeSet<usize> = component.iter().copied().collect();
            let mut nodes: Vec<usize> = (0..self.nodes.len())
                .filter(|n| reps.contains(&rep[*n]))
                .collect();
            nodes.sort_unstable();
            let sources: BTreeSet<&str> = nodes
                .iter()
                .map(|&n| self.nodes[n].source.as_str())
                .collect();
            if sources.len() < 2 {
                continue; // inside one source: already one of `cycles`
            }
            let exact = self
                .joins
                .iter()
                .filter(|j| j.nodes.iter().any(|n| nodes.contains(n)))
                .all(|j| j.exact);
            cross.push(CrossCycle { nodes, exact });
        }
        for cycle in &cross {
            for edge in &mut self.edges {
                if cycle.nodes.contains(&edge.from) && cycle.nodes.contains(&edge.to) {
                    edge.in_cycle = true;
                }
            }
        }
        self.cross_cycles = cross;
    }

    /// Each node's representative: the first node of its process join (only exact joins when
    /// `exact_only`), else itself.
    pub fn representatives(&self, exact_only: bool) -> Vec<usize> {
        let mut rep: Vec<usize> = (0..self.nodes.len()).collect();
        for join in self.joins.iter().filter(|j| j.exact || !exact_only) {
            let first = join.nodes[0];
            for &n in &join.nodes {
                rep[n] = first;
            }
        }
        rep
    }

    /// Root blockers, biggest impact first (participants held up in all, then the wait they
    /// sum to, then direct ones): participants — nodes, joined by process — that hold a lock
    /// someone waits on and wait on nobody themselves. `wait_since(edge)` tells when the
    /// waiter of `edges[edge]` began waiting (unknown: counted as no wait). Members of a cycle
    /// wait themselves, so a deadlock has no root here (it is a cycle). Only exact joins make
    /// one participant here: a guess must not make one process wait for another's locks.
    pub fn root_blockers(
        &self,
        wait_since: impl Fn(usize) -> Option<i64>,
        now_ms: i64,
    ) -> Vec<RootBlocker> {
        let rep = self.representatives(true);
        let n = self.nodes.len();
        let mut waits_on: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
        let mut waited_by: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
        let mut longest: Vec<i64> = vec![0; n];
        let mut locks: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); n];
        for (i, e) in self.edges.iter().enumerate() {
            let (from, to) = (rep[e.from], rep[e.to]);
            if from == to {
                continue;
            }
            waits_on[from].insert(to);
            waited_by[to].insert(from);
            locks[to].insert(e.lock.as_str());
            if let Some(since) = wait_since(i) {
                longest[from] = longest[from].max(now_ms.saturating_sub(since).max(0));
            }
        }
        let mut out = Vec::new();
        for root in 0..n {
            if rep[root] != root || waited_by[root].is_empty() || !waits_on[root].is_empty() {
                continue;
            }
            let mut seen = BTreeSet::from([root]);
            let mut stack: Vec<usize> = vec![root];
            while let Some(v) = stack.pop() {
                for &w in &waited_by[v] {
                    if seen.insert(w) {
                        stack.push(w);
                    }
                }
            }
            seen.remove(&root);
            out.push(RootBlocker {
                nodes: (0..n).filter(|&m| rep[m] == root).collect(),
                direct: waited_by[root].len() as u64,
                total: seen.len() as u64,
                waited_ms: seen.iter().map(|&w| longest[w]).sum(),
                locks: locks[root].iter().map(|l| l.to_string()).collect(),
            });
        }
        out.sort_by(|a, b| {
            (b.total, b.waited_ms, b.direct, &a.nodes).cmp(&(
                a.total,
                a.waited_ms,
                a.direct,
                &b.nodes,
            ))
        });
        out
    }
}

/// The process a session belongs to, from what its source tells: a database connection's
/// `application_name` (PostgreSQL) or program name (MariaDB/MySQL connection attributes),
/// else the host it connects from (a guess: many processes share a host); otherwise the
/// identity its lock nodes or values carry (`identities`: kazoo's identifier, an etcd owner),
/// when they agree — an address there (Curator writes the client's IP) is only a host.
pub fn process_of<'a>(
    session: &SessionView,
    identities: impl IntoIterator<Item = &'a str>,
) -> Option<ProcessView> {
    if let Some(c) = &session.connection {
        if let Some(app) = c.application.as_deref().filter(|a| !a.trim().is_empty()) {
            return Some(ProcessView {
                name: app.to_string(),
                from: "application".into(),
                exact: true,
            });
        }
        return c.client.as_deref().map(host_of).map(|host| ProcessView {
            name: host.to_string(),
            from: "client_host".into(),
            exact: false,
        });
    }
    // A client that writes its own session id as its node's data names no process.
    let own_id = session
        .session
        .strip_prefix("0x")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .map(|id| [id.to_string(), (id as i64).to_string()]);
    let mut names: BTreeSet<&str> = BTreeSet::new();
    for identity in identities {
        let identity = identity.trim();
        let own = own_id
            .as_ref()
            .is_some_and(|ids| ids.iter().any(|i| i == identity));
        if !identity.is_empty() && !own {
            names.insert(identity);
        }
    }
    if names.len() != 1 {
        return None;
    }
    let name = names.into_iter().next()?;
    let host = looks_like_address(name);
    Some(ProcessView {
        name: if host {
            host_of(name).to_string()
        } else {
            name.to_string()
        },
        from: if host { "client_host" } else { "identifier" }.into(),
        exact: !host,
    })
}

/// `host` of `host:port`, `[v6]:port`, or the text itself.
pub fn host_of(client: &str) -> &str {
    if let Some(rest) = client.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match client.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            host
        }
        _ => client,
    }
}

/// An IP address, with or without a port.
fn looks_like_address(text: &str) -> bool {
    let host = host_of(text);
    host.parse::<std::net::IpAddr>().is_ok()
}

/// Builds the wait-for graph from the sessions view.
///
/// A session that waits on a lock it holds itself is not an edge: one client session usually
/// serves several threads, and one thread waiting behind another of the same client is normal.
/// For the same reason a cycle is a *possible* deadlock, not a proven one.
pub fn wait_for_graph(sessions: &[SessionView]) -> WaitForGraph {
    // Sessions are known by their first position (one listed twice is one participant), so a
    // wait costs lookups of borrowed names, not clones of them, hashed by hashbrown's default
    // (foldhash). 818,190 edges among 10 sessions (the bench's 1M ZooKeeper nodes): 1.66 s
    // with keys cloned into B-trees per wait, 0.77 s by position, 0.46 s with foldhash.
    use hashbrown::{HashMap, HashSet};
    let mut first: HashMap<(&str, &str), usize> = HashMap::with_capacity(sessions.len());
    let canonical: Vec<usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            *first
                .entry((s.source.as_str(), s.session.as_str()))
                .or_insert(i)
        })
        .collect();
    let mut holders: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (i, s) in sessions.iter().enumerate() {
        for lock in &s.holds {
            holders
                .entry((s.source.as_str(), lock.as_str()))
                .or_default()
                .push(canonical[i]);
        }
    }
    let mut index: Vec<Option<usize>> = vec![None; sessions.len()];
    let mut graph = WaitForGraph::default();
    let mut node = |graph: &mut WaitForGraph, at: usize| -> usize {
        *index[at].get_or_insert_with(|| {
            graph.nodes.push(key(&sessions[at]));
            graph.nodes.len() - 1
        })
    };
    let mut seen: HashSet<(usize, usize, &str)> = HashSet::new();
    for (i, s) in sessions.iter().enumerate() {
        let me = canonical[i];
        for lock in &s.waits {
            let Some(owners) = holders.get(&(s.source.as_str(), lock.as_str())) else {
                continue;
            };
            for &owner in owners {
                if owner == me || !seen.insert((me, owner, lock.as_str())) {
                    continue;
                }
                let from = node(&mut graph, me);
                let to = node(&mut graph, owner);
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

/// What every lock the API serves is judged by: the stale-hold limit and the stuck limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judge {
    /// Holds longer than this are stale ([`HeldTooLong`]).
    pub stale_hold_ms: i64,
    pub stuck: crate::wire::StuckThresholds,
}

impl Judge {
    /// Only the stale-hold limit; no stuck limits.
    pub fn stale_hold(stale_hold_ms: i64) -> Judge {
        Judge {
            stale_hold_ms,
            ..Judge::default()
        }
    }
}

/// The earliest instant a judgement "as of now" is `true` from, for a judgement that, once
/// true, stays true as time passes (every built-in stale rule and the stuck limits: they only
/// start firing as a hold, a wait or a deadline ages): `i64::MIN` when it always holds,
/// `i64::MAX` when it never does.
///
/// `candidates` are where it may turn (each rule's limit plus what it measures from); they only
/// make it fast: the answer is checked against `holds` itself, and when the turn lies between
/// two candidates it is found by bisection, so a candidate missed or off by one costs time,
/// never a wrong answer.
pub fn first_instant(
    candidates: impl IntoIterator<Item = i64>,
    holds: impl Fn(i64) -> bool,
) -> i64 {
    // Far enough from the ends that the rules' own arithmetic (`now - since`) cannot overflow.
    const EARLY: i64 = i64::MIN / 4;
    const LATE: i64 = i64::MAX / 4;
    if holds(EARLY) {
        return i64::MIN;
    }
    if !holds(LATE) {
        return i64::MAX;
    }
    let mut points: Vec<i64> = candidates
        .into_iter()
        .map(|c| c.clamp(EARLY + 1, LATE))
        .collect();
    points.sort_unstable();
    points.dedup();
    // The last instant known not to hold and the first known to hold.
    let (mut low, mut high) = (EARLY, LATE);
    for point in points {
        if holds(point) {
            high = point;
            break;
        }
        low = point;
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if holds(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}

/// The instant from which `lock`, as recorded, breaks a built-in rule ([`staleness`]) with
/// `stale_hold_ms`: `i64::MIN` when it always does, `i64::MAX` when it never will. Every
/// built-in rule only starts firing as time passes, so `staleness(lock, now, …)` is some
/// exactly when `now >= stale_from(lock, …)`: what an index of locks keeps instead of judging
/// every lock again as the clock moves.
pub fn stale_from(lock: &LockView, stale_hold_ms: i64) -> i64 {
    let oldest = lock.holders.iter().map(|h| h.since_ms).min();
    let mut candidates = Vec::with_capacity(8);
    if let Some(deadline) = lock.deadline_ms {
        candidates.push(deadline.saturating_add(1));
    }
    candidates.push(lock.changed_ms.saturating_add(HEADLESS_GRACE_MS + 1));
    if let (Some(lease), Some(at)) = (lock.lease_ms, lock.expires_at_ms) {
        candidates.push(at.saturating_sub(lease / 3).saturating_add(1));
    }
    if let Some(oldest) = oldest {
        candidates.push(oldest.saturating_add(NO_TTL_GRACE_MS + 1));
        candidates.push(oldest.saturating_add(stale_hold_ms).saturating_add(1));
        let usual = lock
            .usual_hold_ms
            .map_or(0, |u| u.max(1).saturating_mul(10));
        candidates.push(
            oldest
                .saturating_add(usual.max(BEYOND_USUAL_MIN_MS))
                .saturating_add(1),
        );
    }
    first_instant(candidates, |now| {
        staleness(lock, now, stale_hold_ms).is_some()
    })
}

/// Recomputes `lock`'s durations, its stale findings and its worst stuck wait or hold as of
/// `now_ms` (what the API does to every lock it serves).
pub fn tick_and_judge(lock: &mut LockView, now_ms: i64, judge: &Judge) {
    lock.tick(now_ms);
    lock.stuck = crate::stuck::judge(lock, now_ms, &judge.stuck);
    lock.stale = stale_findings(lock, now_ms, judge.stale_hold_ms)
        .into_iter()
        .map(|s| StaleView {
            rule: s.name().to_string(),
            explanation: s.describe().to_string(),
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Backend, HolderView};

    fn session(name: &str, holds: &[&str], waits: &[&str]) -> SessionView {
        SessionView {
            source: "zk".into(),
            session: name.into(),
            kind: crate::wire::SessionKind::ZookeeperSession,
            timeout_ms: Some(10_000),
            connected: true,
            server: None,
            expires_at_ms: None,
            holds: holds.iter().map(|s| s.to_string()).collect(),
            waits: waits.iter().map(|s| s.to_string()).collect(),
            connection: None,
            process: None,
        }
    }

    #[test]
    fn stale_from_is_the_instant_staleness_starts() {
        let mut lock = LockView {
            backend: Backend::Redis,
            recipe: "redisson_lock".into(),
            changed_ms: 1_000,
            holders: vec![HolderView {
                node: "h".into(),
                since_ms: 1_000,
                ..HolderView::default()
            }],
            lease_ms: Some(30_000),
            expires_at_ms: Some(31_000),
            usual_hold_ms: Some(10),
            ..LockView::default()
        };
        let check = |lock: &LockView, hold: i64| {
            let from = stale_from(lock, hold);
            for t in [
                from.saturating_sub(1),
                from,
                from.saturating_add(1),
                0,
                5_000,
                60_000,
            ] {
                if (i64::MIN / 4..i64::MAX / 4).contains(&t) {
                    assert_eq!(
                        t >= from,
                        staleness(lock, t, hold).is_some(),
                        "t {t} from {from}"
                    );
                }
            }
            from
        };
        // The watchdog rule turns first: the TTL under a third of the lease.
        assert_eq!(check(&lock, 300_000), 31_000 - 10_000 + 1);
        lock.recipe = "token".into();
        // Then "beyond usual" (30 s at least), then held too long.
        assert_eq!(check(&lock, 300_000), 1_000 + 30_000 + 1);
        lock.usual_hold_ms = None;
        assert_eq!(check(&lock, 300_000), 1_000 + 300_000 + 1);
        lock.holders.clear();
        assert_eq!(check(&lock, 300_000), i64::MAX);
        lock.flags.push("no_expiry".into());
        lock.backend = Backend::Zookeeper;
        lock.holders.push(HolderView {
            session: "0x0".into(),
            since_ms: 50,
            ..HolderView::default()
        });
        assert_eq!(check(&lock, 300_000), i64::MIN);
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
                identity: None,
                version: None,
                statement: None,
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
                identity: None,
                statement: None,
            });
        }
        lock
    }

    /// The name of the first rule `lock` breaks.
    fn first(lock: &LockView, now: i64, hold: i64) -> Option<&'static str> {
        staleness(lock, now, hold).map(|r| r.name())
    }

    #[test]
    fn staleness_rules() {
        let now = 1_000_000;
        assert_eq!(first(&lock(Some(now - 1_000), 3, now), now, 60_000), None);
        assert_eq!(
            first(&lock(Some(now - 61_000), 0, now), now, 60_000),
            Some("held_too_long")
        );
        assert_eq!(first(&lock(None, 2, now - 1_000), now, 60_000), None);
        assert_eq!(
            first(&lock(None, 2, now - 6_000), now, 60_000),
            Some("queue_without_holder")
        );
        let mut legacy = lock(Some(now - 1_000), 0, now);
        legacy.deadline_ms = Some(now - 1);
        assert_eq!(first(&legacy, now, 60_000), Some("deadline_passed"));
        assert_eq!(first(&lock(None, 0, 0), now, 60_000), None);

        let mut redisson = lock(Some(now - 20_000), 0, now);
        redisson.recipe = "redisson_lock".into();
        redisson.backend = Backend::Redis;
        redisson.lease_ms = Some(30_000);
        redisson.expires_at_ms = Some(now + 25_000);
        assert_eq!(first(&redisson, now, 600_000), None);
        redisson.expires_at_ms = Some(now + 4_000);
        assert_eq!(first(&redisson, now, 600_000), Some("watchdog_stalled"));

        let mut immortal = lock(Some(now - 11_000), 0, now);
        immortal.backend = Backend::Redis;
        immortal.flags = vec!["no_expiry".into()];
        assert_eq!(first(&immortal, now, 600_000), Some("no_ttl"));
        immortal.holders[0].since_ms = now - 1_000;
        assert_eq!(first(&immortal, now, 600_000), None);

        let mut persistent = lock(Some(now - 1_000), 0, now);
        persistent.holders[0].session = "0x0".into();
        assert_eq!(first(&persistent, now, 600_000), Some("persistent_node"));

        let mut usual = lock(Some(now - 40_000), 0, now);
        usual.usual_hold_ms = usual_hold(&[1_000, 2_000, 3_000, 1_500, 2_500]);
        assert_eq!(usual.usual_hold_ms, Some(2_000));
        assert_eq!(first(&usual, now, 600_000), Some("held_beyond_usual"));
        assert_eq!(usual_hold(&[1, 2, 3]), None);
        let all = stale_findings(&usual, now, 10_000);
        assert_eq!(all, [&HeldTooLong as &dyn StaleRule, &HeldBeyondUsual]);
        assert_eq!(format!("{all:?}"), "[held_too_long, held_beyond_usual]");
    }

    #[test]
    fn the_built_in_rules_keep_their_names_order_and_explanations() {
        let names: Vec<&str> = BUILTIN.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "deadline_passed",
                "queue_without_holder",
                "watchdog_stalled",
                "no_ttl",
                "persistent_node",
                "held_too_long",
                "held_beyond_usual",
            ]
        );
        assert!(BUILTIN.iter().all(|r| !r.describe().is_empty()));
        let distinct: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(distinct.len(), BUILTIN.len());
        assert_eq!(
            NoTtl.describe(),
            "held without a TTL: if the holder died, nothing will ever free it"
        );
    }

    #[test]
    fn backend_specific_rules_judge_only_their_backend() {
        let now = 1_000_000;
        let mut persistent = lock(Some(now - 1_000), 0, now);
        persistent.holders[0].session = "0x0".into();
        for backend in [Backend::Redis, Backend::Etcd] {
            persistent.backend = backend;
            assert_eq!(first(&persistent, now, 600_000), None, "{backend:?}");
        }
        let mut redisson = lock(Some(now - 20_000), 0, now);
        redisson.recipe = "redisson_lock".into();
        redisson.lease_ms = Some(30_000);
        redisson.expires_at_ms = Some(now + 4_000);
        for backend in Backend::ALL {
            redisson.backend = backend;
            let expected = (backend == Backend::Redis).then_some("watchdog_stalled");
            assert_eq!(first(&redisson, now, 600_000), expected, "{backend:?}");
        }
        // Rules that read only the lock's fields judge every backend.
        let mut immortal = lock(Some(now - 11_000), 0, now);
        immortal.flags = vec!["no_expiry".into()];
        for backend in Backend::ALL {
            immortal.backend = backend;
            assert_eq!(first(&immortal, now, 600_000), Some("no_ttl"));
        }
    }

    /// A backend's own rule: an etcd key held without a lease.
    struct NoLease;

    impl StaleRule for NoLease {
        fn name(&self) -> &'static str {
            "no_lease"
        }
        fn describe(&self) -> &'static str {
            "held by a key without a lease"
        }
        fn applies_to(&self, backend: Backend) -> bool {
            backend == Backend::Etcd
        }
        fn check(&self, lock: &LockView, _now_ms: i64, _stale_hold_ms: i64) -> bool {
            lock.holders.iter().any(|h| h.session.is_empty())
        }
    }

    #[test]
    fn a_backend_adds_its_own_rules_after_the_built_in_ones() {
        let now = 1_000_000;
        let mut etcd = lock(Some(now - 61_000), 0, now);
        etcd.backend = Backend::Etcd;
        etcd.holders[0].session = String::new();
        let extra: [&dyn StaleRule; 1] = [&NoLease];
        let found = stale_findings_with(&etcd, now, 60_000, &extra);
        let names: Vec<&str> = found.iter().map(|r| r.name()).collect();
        assert_eq!(names, ["held_too_long", "no_lease"]);
        assert_eq!(found[1].describe(), "held by a key without a lease");
        // Without them, or on a lock of another backend, only the built-in rules speak.
        assert_eq!(
            stale_findings_with(&etcd, now, 60_000, &[]),
            stale_findings(&etcd, now, 60_000)
        );
        etcd.backend = Backend::Zookeeper;
        let names: Vec<&str> = stale_findings_with(&etcd, now, 60_000, &extra)
            .iter()
            .map(|r| r.name())
            .collect();
        assert_eq!(names, ["held_too_long"]);
    }

    /// An etcd source's sessions: leases as hex ids (as `etcdctl` prints them), lock ids as
    /// the locks they hold and wait on.
    fn lease(source: &str, id: &str, holds: &[&str], waits: &[&str]) -> SessionView {
        SessionView {
            source: source.into(),
            session: id.into(),
            kind: crate::wire::SessionKind::EtcdLease,
            timeout_ms: Some(60_000),
            connected: true,
            server: None,
            expires_at_ms: Some(1_060_000),
            holds: holds.iter().map(|s| s.to_string()).collect(),
            waits: waits.iter().map(|s| s.to_string()).collect(),
            connection: None,
            process: None,
        }
    }

    #[test]
    fn two_etcd_leases_waiting_on_each_others_locks_are_a_cycle() {
        let graph = wait_for_graph(&[
            // A ZooKeeper source whose session ids and lock ids look alike does not mix in.
            session("0xa", &["etcd~/locks/accounts"], &["etcd~/locks/ledger"]),
            lease(
                "etcd",
                "694d7c1b2a3e4f10",
                &["etcd~/locks/accounts"],
                &["etcd~/locks/ledger"],
            ),
            lease(
                "etcd",
                "694d7c1b2a3e4f2b",
                &["etcd~/locks/ledger"],
                &["etcd~/locks/accounts"],
            ),
            // A third lease queued behind one of them waits, but is not in the cycle.
            lease("etcd", "694d7c1b2a3e4f33", &[], &["etcd~/locks/ledger"]),
        ]);
        assert_eq!(graph.nodes.len(), 3);
        assert!(graph.nodes.iter().all(|n| n.source == "etcd"));
        assert_eq!(graph.edges.len(), 3);
        assert_eq!(graph.cycles.len(), 1);
        let mut leases: Vec<&str> = graph.cycles[0]
            .iter()
            .map(|&i| graph.nodes[i].session.as_str())
            .collect();
        leases.sort_unstable();
        assert_eq!(leases, ["694d7c1b2a3e4f10", "694d7c1b2a3e4f2b"]);
        let mut cyclic: Vec<&str> = graph
            .edges
            .iter()
            .filter(|e| e.in_cycle)
            .map(|e| e.lock.as_str())
            .collect();
        cyclic.sort_unstable();
        assert_eq!(cyclic, ["etcd~/locks/accounts", "etcd~/locks/ledger"]);
        let queued = graph
            .nodes
            .iter()
            .position(|n| n.session == "694d7c1b2a3e4f33")
            .expect("the queued lease waits");
        assert!(!graph.in_cycle(queued));
    }

    fn named(mut s: SessionView, source: &str, process: &str) -> SessionView {
        s.source = source.into();
        s.connection = Some(crate::wire::ConnectionView {
            application: Some(process.into()),
            ..Default::default()
        });
        s
    }

    fn joined(sessions: &[SessionView]) -> WaitForGraph {
        let mut graph = wait_for_graph(sessions);
        graph.join_processes(|key| {
            let s = sessions
                .iter()
                .find(|s| s.source == key.source && s.session == key.session)?;
            process_of(s, [])
        });
        graph
    }

    #[test]
    fn a_cycle_across_two_sources_is_joined_by_process_names() {
        // svc-a holds zk lock Z and waits on pg lock P; svc-b holds P and waits on Z.
        let sessions = [
            named(session("0x1", &["zk~Z"], &[]), "zk", "svc-a"),
            named(session("0x2", &[], &["zk~Z"]), "zk", "svc-b"),
            named(session("11", &[], &["pg~P"]), "pg", "svc-a"),
            named(session("12", &["pg~P"], &[]), "pg", "svc-b"),
        ];
        let graph = joined(&sessions);
        assert!(graph.cycles.is_empty(), "no cycle inside one source");
        assert_eq!(graph.joins.len(), 2);
        assert!(graph.joins.iter().all(|j| j.exact));
        assert_eq!(graph.cross_cycles.len(), 1);
        assert!(graph.cross_cycles[0].exact);
        assert_eq!(graph.cross_cycles[0].nodes.len(), 4);
        assert!(graph.edges.iter().all(|e| e.in_cycle));
        // Nobody is a root: everyone waits.
        assert!(graph.root_blockers(|_| None, 0).is_empty());
    }

    #[test]
    fn a_pooled_name_or_a_host_is_a_guess_and_a_name_inside_one_source_joins_nothing() {
        // Two zk sessions named svc-b (a pool): the join is a guess, the cycle not counted.
        let sessions = [
            named(session("0x1", &["zk~Z"], &[]), "zk", "svc-a"),
            named(session("0x2", &[], &["zk~Z"]), "zk", "svc-b"),
            named(session("0x3", &[], &["zk~Z"]), "zk", "svc-b"),
            named(session("11", &[], &["pg~P"]), "pg", "svc-a"),
            named(session("12", &["pg~P"], &[]), "pg", "svc-b"),
        ];
        let graph = joined(&sessions);
        assert_eq!(graph.cross_cycles.len(), 1);
        assert!(!graph.cross_cycles[0].exact);
        // Inside one source, one name: no join, no cycle.
        let one = [
            named(session("0x1", &["zk~Z"], &["zk~Y"]), "zk", "svc"),
            named(session("0x2", &["zk~Y"], &[]), "zk", "svc"),
        ];
        let graph = joined(&one);
        assert!(graph.joins.is_empty() && graph.cross_cycles.is_empty());
        // Four sessions of one name in a source (a whole host) join nothing.
        let mut crowd: Vec<SessionView> = (0..4)
            .map(|i| named(session(&format!("{i}"), &[], &["pg~P"]), "pg", "10.0.0.7"))
            .collect();
        crowd.push(named(session("h", &["pg~P"], &[]), "pg", "holder"));
        crowd.push(named(session("0x1", &[], &["zk~Z"]), "zk", "10.0.0.7"));
        crowd.push(named(session("0x2", &["zk~Z"], &[]), "zk", "other"));
        let graph = joined(&crowd);
        assert_eq!(graph.nodes.len(), 7);
        assert!(graph.joins.is_empty(), "{:?}", graph.joins);
        // A client host is a guess.
        let mut s = session("0x1", &[], &[]);
        s.connection = Some(crate::wire::ConnectionView {
            client: Some("10.0.0.7:51234".into()),
            ..Default::default()
        });
        let p = process_of(&s, []).expect("host");
        assert_eq!(
            (p.name.as_str(), p.from.as_str(), p.exact),
            ("10.0.0.7", "client_host", false)
        );
        let zk = session("0x9", &[], &[]);
        let p = process_of(&zk, ["svc-a", "svc-a"]).expect("identifier");
        assert_eq!((p.name.as_str(), p.exact), ("svc-a", true));
        assert_eq!(
            process_of(&zk, ["svc-a", "svc-b"]),
            None,
            "disagreeing identities"
        );
        let p = process_of(&zk, ["127.0.0.1"]).expect("curator address");
        assert!(!p.exact);
        // Its own session id, in decimal, as a seed client writes it: no process.
        assert_eq!(process_of(&zk, ["9"]), None);
        assert_eq!(host_of("[::1]:5432"), "::1");
        assert_eq!(host_of("db.example:5432"), "db.example");
    }

    #[test]
    fn root_blockers_rank_by_what_they_hold_up_across_hops() {
        // idle holds T; alter waits on T; select1, select2 wait on T too; r holds A that x
        // waits on; x holds B that y waits on (y → x → r: r holds up two through one hop).
        let sessions = [
            session("idle", &["T"], &[]),
            session("alter", &[], &["T"]),
            session("select1", &[], &["T"]),
            session("select2", &[], &["T"]),
            session("r", &["A"], &[]),
            session("x", &["B"], &["A"]),
            session("y", &[], &["B"]),
        ];
        let graph = joined(&sessions);
        let since = |e: usize| Some(1_000 * (e as i64 + 1));
        let roots = graph.root_blockers(since, 10_000);
        let names: Vec<(&str, u64, u64)> = roots
            .iter()
            .map(|r| (graph.nodes[r.nodes[0]].session.as_str(), r.direct, r.total))
            .collect();
        assert_eq!(names, [("idle", 3, 3), ("r", 1, 2)]);
        assert_eq!(roots[0].locks, ["T"]);
        assert!(roots[0].waited_ms > 0);
    }
}
