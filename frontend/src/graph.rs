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

/// A session placed on the wait-for drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
}

/// Places the wait-for graph's sessions on a circle; returns positions and the drawing size.
pub fn circle_layout(graph: &WaitForGraph) -> (Vec<Point>, f64) {
    let n = graph.nodes.len();
    let radius = (n as f64 * 34.0 / std::f64::consts::PI).max(110.0);
    let size = 2.0 * radius + 200.0;
    let c = size / 2.0;
    let points = (0..n)
        .map(|i| {
            let a = -std::f64::consts::FRAC_PI_2
                + 2.0 * std::f64::consts::PI * i as f64 / n.max(1) as f64;
            Point {
                x: c + radius * a.cos(),
                y: c + radius * a.sin(),
            }
        })
        .collect();
    (points, size)
}

/// A line from `a` to `b` shortened by `r` at both ends (so arrowheads meet circle edges).
pub fn edge_line(a: &Point, b: &Point, r: f64) -> (f64, f64, f64, f64) {
    let (dx, dy) = (b.x - a.x, b.y - a.y);
    let len = (dx * dx + dy * dy).sqrt().max(1.0);
    let (ux, uy) = (dx / len, dy / len);
    (
        a.x + ux * r,
        a.y + uy * r,
        b.x - ux * (r + 4.0),
        b.y - uy * (r + 4.0),
    )
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
    fn circle_layout_spreads_nodes() {
        let graph = lockscope_model::rules::wait_for_graph(&[]);
        assert!(circle_layout(&graph).0.is_empty());
        let (x1, y1, x2, y2) =
            edge_line(&Point { x: 0.0, y: 0.0 }, &Point { x: 100.0, y: 0.0 }, 10.0);
        assert_eq!((x1, y1, x2, y2), (10.0, 0.0, 86.0, 0.0));
    }
}
