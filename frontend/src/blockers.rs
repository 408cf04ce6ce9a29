//! Root blockers in words (`GET /api/v1/blockers`): who a root is and in which sources, how
//! many it holds up, whether it sits idle in its transaction, and which roots a waiting
//! session or a lock's waiters are blocked by. Only what the server's answer and the pages'
//! own data say: a root that cannot be traced is not named. Pure, so it is unit-tested on the
//! host.

use std::collections::BTreeSet;

use lockscope_model::wire::{JoinView, RootBlockerView, WaitEdgeView};

use crate::format;

/// Root blockers the overview's card shows.
pub const CARD: usize = 5;

/// Root blockers the lock and sessions pages ask for to find a waiter's root.
pub const LOOKUP: usize = 100;

/// How a root is named: its process where its sources tell (never a ZooKeeper session id
/// written in decimal), else its first session (`connection 12`, `session 0x1a`).
pub fn name(root: &RootBlockerView) -> String {
    let first = root.sessions.first();
    let session = first.map_or("", |s| s.session.as_str());
    if let Some(process) = root
        .process
        .as_ref()
        .and_then(|p| format::identity_label(Some(&p.name), session))
    {
        return process;
    }
    match first {
        Some(s) if root.connection.is_some() => format!("connection {}", s.session),
        Some(s) => format!("session {}", s.session),
        None => "unknown".into(),
    }
}

/// Its sources, each once, in order.
pub fn sources(root: &RootBlockerView) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in &root.sessions {
        if !out.contains(&s.source.as_str()) {
            out.push(&s.source);
        }
    }
    out
}

/// Its connection says it is idle in its transaction (PostgreSQL's `idle in transaction`,
/// also `… (aborted)`): it holds its locks until its program ends the transaction.
pub fn idle_in_transaction(root: &RootBlockerView) -> bool {
    root.connection
        .as_ref()
        .is_some_and(|c| c.state.to_ascii_lowercase().contains("idle in transaction"))
}

/// "holding up 7 (2 directly)".
pub fn holding_up(root: &RootBlockerView) -> String {
    if root.direct == root.total {
        format!("holding up {}", root.total)
    } else {
        format!("holding up {} ({} directly)", root.total, root.direct)
    }
}

/// "blocked by svc-b (root, holding up 7)".
pub fn blocked_by(root: &RootBlockerView) -> String {
    format!(
        "blocked by {} (root, holding up {})",
        name(root),
        root.total
    )
}

/// The first (most holding up) root that holds lock `lock` (a lock id).
pub fn holding<'a>(blockers: &'a [RootBlockerView], lock: &str) -> Option<&'a RootBlockerView> {
    blockers.iter().find(|b| b.locks.iter().any(|l| l == lock))
}

/// The first root that holds one of `locks` (lock ids).
pub fn holding_any<'a>(
    blockers: &'a [RootBlockerView],
    locks: &[String],
) -> Option<&'a RootBlockerView> {
    blockers
        .iter()
        .find(|b| b.locks.iter().any(|l| locks.contains(l)))
}

/// The roots that hold up session `session` of `source`, most holding up first: those holding
/// a lock in `waits` (the locks it waits on), and those its waits lead to through `edges`
/// (a page of the wait-for graph; sessions `joins` make one process are one participant).
pub fn roots_of<'a>(
    blockers: &'a [RootBlockerView],
    source: &str,
    session: &str,
    waits: &[String],
    edges: &[WaitEdgeView],
    joins: &[JoinView],
) -> Vec<&'a RootBlockerView> {
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut stack = vec![(source.to_string(), session.to_string())];
    let mut reached: BTreeSet<(String, String)> = BTreeSet::new();
    while let Some(at) = stack.pop() {
        if !seen.insert(at.clone()) {
            continue;
        }
        // The other sessions of its process wait and hold with it.
        for join in joins {
            if join
                .sessions
                .iter()
                .any(|s| s.source == at.0 && s.session == at.1)
            {
                stack.extend(
                    join.sessions
                        .iter()
                        .map(|s| (s.source.clone(), s.session.clone())),
                );
            }
        }
        for e in edges {
            if e.source == at.0 && e.waiter == at.1 {
                let holder = (e.source.clone(), e.holder.clone());
                reached.insert(holder.clone());
                stack.push(holder);
            }
        }
    }
    blockers
        .iter()
        .filter(|b| {
            b.locks.iter().any(|l| waits.contains(l))
                || b.sessions
                    .iter()
                    .any(|s| reached.contains(&(s.source.clone(), s.session.clone())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::wire::{ConnectionView, ProcessView, SessionRef};

    fn at(source: &str, session: &str) -> SessionRef {
        SessionRef {
            source: source.into(),
            session: session.into(),
        }
    }

    fn root(sessions: &[(&str, &str)], process: Option<&str>, locks: &[&str]) -> RootBlockerView {
        RootBlockerView {
            sessions: sessions.iter().map(|(s, id)| at(s, id)).collect(),
            process: process.map(|name| ProcessView {
                name: name.into(),
                from: "application".into(),
                exact: true,
            }),
            direct: 1,
            total: 3,
            waited_ms: 0,
            locks: locks.iter().map(|l| l.to_string()).collect(),
            connection: None,
        }
    }

    fn edge(source: &str, waiter: &str, holder: &str) -> WaitEdgeView {
        WaitEdgeView {
            source: source.into(),
            waiter: waiter.into(),
            holder: holder.into(),
            lock: format!("{source}~{holder}"),
            waiting_since_ms: None,
            in_cycle: false,
        }
    }

    #[test]
    fn roots_are_named_by_process_else_by_session_in_hex() {
        let named = root(&[("pg", "12"), ("zk", "0x1")], Some("svc-b"), &[]);
        assert_eq!(name(&named), "svc-b");
        assert_eq!(sources(&named), ["pg", "zk"]);
        assert_eq!(blocked_by(&named), "blocked by svc-b (root, holding up 3)");
        assert_eq!(holding_up(&named), "holding up 3 (1 directly)");
        // A process "named" by its session id in decimal is the session, in hex.
        let decimal = root(
            &[("zk", "0x100002359770000")],
            Some("72057745862754304"),
            &[],
        );
        assert_eq!(name(&decimal), "session 0x100002359770000");
        let mut conn = root(&[("pg", "12")], None, &[]);
        conn.connection = Some(ConnectionView {
            state: "idle in transaction".into(),
            ..ConnectionView::default()
        });
        assert_eq!(name(&conn), "connection 12");
        assert!(idle_in_transaction(&conn));
        conn.connection = Some(ConnectionView {
            state: "active".into(),
            ..ConnectionView::default()
        });
        assert!(!idle_in_transaction(&conn));
    }

    #[test]
    fn a_waiters_roots_are_traced_through_the_graph_and_joins() {
        // zk 0x3 waits on 0x2, which (as process p, joined with pg 7) waits on pg 8: the root.
        let blockers = vec![
            root(&[("pg", "8")], Some("root-a"), &["pg~8"]),
            root(&[("zk", "0x9")], Some("root-b"), &["zk~/l/other"]),
        ];
        let edges = vec![edge("zk", "0x3", "0x2"), edge("pg", "7", "8")];
        let joins = vec![JoinView {
            process: "p".into(),
            exact: true,
            sessions: vec![at("zk", "0x2"), at("pg", "7")],
        }];
        let found = roots_of(&blockers, "zk", "0x3", &[], &edges, &joins);
        assert_eq!(found.len(), 1);
        assert_eq!(name(found[0]), "root-a");
        // Without the join the chain ends at 0x2: no root is known, none is named.
        assert!(roots_of(&blockers, "zk", "0x3", &[], &edges, &[]).is_empty());
        // A lock it waits on that a root holds names that root directly.
        let direct = roots_of(&blockers, "zk", "0x4", &["zk~/l/other".into()], &[], &[]);
        assert_eq!(direct.len(), 1);
        assert_eq!(name(direct[0]), "root-b");
        assert_eq!(holding(&blockers, "pg~8").map(name), Some("root-a".into()));
        assert!(holding(&blockers, "pg~9").is_none());
        assert_eq!(
            holding_any(&blockers, &["x".into(), "zk~/l/other".into()]).map(name),
            Some("root-b".into())
        );
    }
}
