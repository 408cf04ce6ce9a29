//! Geometry of the two graphs the UI draws in SVG: a lock's queue (lock node, holders, waiters
//! in order, and an arrow from each waiter to the node it watches) and the wait-for graph of
//! sessions. Pure: the pages turn these shapes into SVG elements.

use lockscope_model::rules::WaitForGraph;
use lockscope_model::wire::LockView;

pub const BOX_X: f64 = 16.0;
pub const BOX_W: f64 = 470.0;
pub const BOX_H: f64 = 46.0;
pub const ROW_H: f64 = 60.0;
pub const QUEUE_W: f64 = 700.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The lock itself (its parent node in ZooKeeper, its key in Redis).
    Lock,
    Holder(usize),
    Waiter(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueBox {
    pub role: Role,
    pub y: f64,
}

/// An arrow from a waiter to the node it watches.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueArrow {
    pub from: usize,
    pub to: usize,
    /// SVG path data.
    pub d: String,
    /// The watch is on the lock node (a child watch: every waiter wakes on any change).
    pub on_lock: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueLayout {
    pub boxes: Vec<QueueBox>,
    pub arrows: Vec<QueueArrow>,
    /// Waiters beyond `max_waiters`, not drawn.
    pub hidden_waiters: usize,
    pub height: f64,
}

/// Lays a lock's queue out top to bottom: lock, holders, then up to `max_waiters` waiters.
pub fn queue_layout(lock: &LockView, max_waiters: usize) -> QueueLayout {
    let mut boxes = vec![QueueBox {
        role: Role::Lock,
        y: 8.0,
    }];
    for i in 0..lock.holders.len() {
        boxes.push(QueueBox {
            role: Role::Holder(i),
            y: 8.0 + ROW_H * boxes.len() as f64,
        });
    }
    let shown = lock.waiters.len().min(max_waiters);
    for i in 0..shown {
        boxes.push(QueueBox {
            role: Role::Waiter(i),
            y: 8.0 + ROW_H * boxes.len() as f64,
        });
    }
    let target = |node: &str| -> Option<usize> {
        if node == lock.path {
            return Some(0);
        }
        boxes.iter().position(|b| match b.role {
            Role::Holder(i) => lock.holders[i].node == node,
            Role::Waiter(i) => lock.waiters[i].node == node,
            Role::Lock => false,
        })
    };
    let mut arrows = Vec::new();
    for (from, b) in boxes.iter().enumerate() {
        let Role::Waiter(i) = b.role else { continue };
        let Some(watched) = lock.waiters[i].watches.as_deref() else {
            continue;
        };
        let Some(to) = target(watched) else { continue };
        if to == from {
            continue;
        }
        let (y1, y2) = (b.y + BOX_H / 2.0, boxes[to].y + BOX_H / 2.0);
        let x = BOX_X + BOX_W;
        // Longer jumps bulge further out so arrows to the same target stay apart.
        let bulge = 28.0 + 14.0 * (from.abs_diff(to) as f64).min(12.0);
        let d = format!(
            "M {x} {y1} C {cx} {y1}, {cx} {y2}, {end} {y2}",
            cx = x + bulge,
            end = x + 6.0
        );
        arrows.push(QueueArrow {
            from,
            to,
            d,
            on_lock: to == 0,
        });
    }
    let last = boxes.last().map_or(0.0, |b| b.y);
    let hidden = lock.waiters.len() - shown;
    QueueLayout {
        boxes,
        arrows,
        hidden_waiters: hidden,
        height: last + ROW_H + if hidden > 0 { 24.0 } else { 0.0 },
    }
}

pub const SESSION_W: f64 = 190.0;
pub const SESSION_H: f64 = 40.0;
const COL_W: f64 = 290.0;
const SESSION_ROW: f64 = 62.0;
const MARGIN: f64 = 20.0;

/// The wait-for graph laid out in columns: sessions that wait on nobody (pure holders) on the
/// right, each waiter one column left of what it waits
/// behind, so chains read left to right. A cycle's sessions share a column, stacked.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitLayout {
    /// Top-left corner of each session's box, by node index.
    pub boxes: Vec<(f64, f64)>,
    pub edges: Vec<WaitArrow>,
    pub width: f64,
    pub height: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WaitArrow {
    pub edge: usize,
    /// SVG path data.
    pub d: String,
    /// Where the lock's name goes (next to the waiting session).
    pub label: (f64, f64),
}

pub fn wait_layout(graph: &WaitForGraph) -> WaitLayout {
    let n = graph.nodes.len();
    // Each cycle collapses to one unit so levels are well defined.
    let mut unit: Vec<usize> = (0..n).collect();
    for cycle in &graph.cycles {
        for &m in cycle {
            unit[m] = cycle[0];
        }
    }
    let mut level = vec![0usize; n];
    for _ in 0..n {
        let mut changed = false;
        for e in &graph.edges {
            let (u, v) = (unit[e.from], unit[e.to]);
            if u != v && level[u] < level[v] + 1 {
                level[u] = level[v] + 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let level: Vec<usize> = (0..n).map(|i| level[unit[i]]).collect();
    let max_level = level.iter().copied().max().unwrap_or(0);
    let mut boxes = vec![(0.0, 0.0); n];
    let mut row_of = vec![0.0f64; n];
    let mut rows = 0usize;
    for l in 0..=max_level {
        let mut members: Vec<usize> = (0..n).filter(|&i| level[i] == l).collect();
        // Order by where what they wait on sits, keeping a cycle's members together.
        let barycenter = |i: usize| -> f64 {
            let targets: Vec<f64> = graph
                .edges
                .iter()
                .filter(|e| e.from == i && level[e.to] < l)
                .map(|e| row_of[e.to])
                .collect();
            if targets.is_empty() {
                i as f64
            } else {
                targets.iter().sum::<f64>() / targets.len() as f64
            }
        };
        members.sort_by(|&a, &b| {
            (unit[a], barycenter(a))
                .partial_cmp(&(unit[b], barycenter(b)))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let x = MARGIN + (max_level - l) as f64 * COL_W;
        for (r, &i) in members.iter().enumerate() {
            row_of[i] = r as f64;
            boxes[i] = (x, MARGIN + r as f64 * SESSION_ROW);
        }
        rows = rows.max(members.len());
    }
    let edges = graph
        .edges
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let (ax, ay) = boxes[e.from];
            let (bx, by) = boxes[e.to];
            let (y1, y2) = (ay + SESSION_H / 2.0, by + SESSION_H / 2.0);
            if (ax - bx).abs() < 1.0 {
                // Same column (a cycle): bow out to the right of the boxes.
                let x = ax + SESSION_W;
                let bulge = 40.0 + 12.0 * ((y1 - y2).abs() / SESSION_ROW);
                WaitArrow {
                    edge: k,
                    d: format!(
                        "M {x} {y1} C {c} {y1}, {c} {y2}, {e} {y2}",
                        c = x + bulge,
                        e = x + 6.0
                    ),
                    label: (x + 8.0, y1 - 6.0),
                }
            } else {
                let (x1, x2) = (ax + SESSION_W, bx - 6.0);
                let mid = (x1 + x2) / 2.0;
                WaitArrow {
                    edge: k,
                    d: format!("M {x1} {y1} C {mid} {y1}, {mid} {y2}, {x2} {y2}"),
                    label: (x1 + 8.0, y1 - 6.0),
                }
            }
        })
        .collect();
    WaitLayout {
        boxes,
        edges,
        width: 2.0 * MARGIN + max_level as f64 * COL_W + SESSION_W + 120.0,
        height: 2.0 * MARGIN + rows.max(1) as f64 * SESSION_ROW,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::wire::{HolderView, WaiterView};

    fn waiter(node: &str, watches: Option<&str>, position: u32) -> WaiterView {
        WaiterView {
            node: node.into(),
            session: "0x2".into(),
            since_ms: 0,
            waited_ms: 0,
            position,
            mode: None,
            watches: watches.map(str::to_string),
            deadline_ms: None,
            lease: None,
            identity: None,
        }
    }

    #[test]
    fn queue_is_lock_then_holder_then_waiters_with_watch_arrows() {
        let lock = LockView {
            path: "/l".into(),
            holders: vec![HolderView {
                node: "/l/n-1".into(),
                session: "0x1".into(),
                since_ms: 0,
                held_ms: 0,
                mode: None,
                watchers: 1,
                reentrancy: None,
                lease: None,
                identity: None,
                version: None,
            }],
            waiters: vec![
                waiter("/l/n-2", Some("/l/n-1"), 1),
                waiter("/l/n-3", Some("/l/n-2"), 2),
                waiter("/l/n-4", Some("/l"), 3),
                waiter("/l/n-5", None, 4),
            ],
            ..LockView::default()
        };
        let layout = queue_layout(&lock, 3);
        let roles: Vec<Role> = layout.boxes.iter().map(|b| b.role).collect();
        assert_eq!(
            roles,
            [
                Role::Lock,
                Role::Holder(0),
                Role::Waiter(0),
                Role::Waiter(1),
                Role::Waiter(2)
            ]
        );
        assert!(layout.boxes.windows(2).all(|w| w[0].y < w[1].y));
        let pairs: Vec<(usize, usize, bool)> = layout
            .arrows
            .iter()
            .map(|a| (a.from, a.to, a.on_lock))
            .collect();
        assert_eq!(pairs, [(2, 1, false), (3, 2, false), (4, 0, true)]);
        assert_eq!(layout.hidden_waiters, 1);
    }

    #[test]
    fn waiters_sit_left_of_what_they_wait_on_and_cycles_share_a_column() {
        use lockscope_model::wire::SessionView;
        let session = |name: &str, holds: &[&str], waits: &[&str]| SessionView {
            source: "zk".into(),
            session: name.into(),
            kind: Default::default(),
            timeout_ms: None,
            connected: true,
            server: None,
            expires_at_ms: None,
            holds: holds.iter().map(|s| s.to_string()).collect(),
            waits: waits.iter().map(|s| s.to_string()).collect(),
            connection: None,
        };
        let graph = lockscope_model::rules::wait_for_graph(&[
            session("a", &["L1"], &["L2"]),
            session("b", &["L2"], &["L1"]),
            session("c", &["L3"], &[]),
            session("d", &[], &["L3"]),
            session("e", &[], &["L1"]),
        ]);
        let layout = wait_layout(&graph);
        let at = |name: &str| {
            let i = graph
                .nodes
                .iter()
                .position(|n| n.session == name)
                .expect("node");
            layout.boxes[i]
        };
        assert!(at("d").0 < at("c").0, "a waiter is left of the holder");
        assert_eq!(at("a").0, at("b").0, "a cycle shares a column");
        assert_ne!(at("a").1, at("b").1);
        assert!(
            at("e").0 < at("a").0,
            "waiting on a cycle puts you left of it"
        );
        assert_eq!(layout.edges.len(), graph.edges.len());
        assert!(layout.width > 0.0 && layout.height > 0.0);
    }
}
