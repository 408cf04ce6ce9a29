//! Geometry of the two graphs the UI draws in SVG: a lock's queue (lock node, holders, waiters
//! in order, and an arrow from each waiter to the node it watches) and the wait-for graph of
//! participants (a session, or the sessions of one process in several sources:
//! [`page_graph`]). Pure: the pages turn these shapes into SVG elements.

use lockscope_model::rules::{SessionKey, WaitEdge, WaitForGraph};
use lockscope_model::wire::{LockView, ProcessView, WaitForPage};

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

/// One box of the wait-for graph: a session, or the sessions of one process in several
/// sources (the server's `joins`), which wait and hold as one participant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// Its sessions, in the order the page names them.
    pub sessions: Vec<SessionKey>,
    /// Its process, where its source(s) tell: a joined box's is the join's (`from` = `join`).
    pub process: Option<ProcessView>,
    /// Joined across sources by a guess (a shared host, a pooled name): drawn as such.
    pub guessed: bool,
}

impl Participant {
    /// Its sources, each once, in order.
    pub fn sources(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for k in &self.sessions {
            if !out.contains(&k.source.as_str()) {
                out.push(&k.source);
            }
        }
        out
    }

    /// Whether `source`'s session `session` is one of its sessions.
    pub fn has(&self, source: &str, session: &str) -> bool {
        self.sessions
            .iter()
            .any(|k| k.source == source && k.session == session)
    }
}

/// The page's edges as a graph to draw: one node per participant (sessions the page's `joins`
/// make one process share a node, named by its first session), the cycles among them (a cycle
/// across sources by its `members`) whose participants are all drawn.
pub fn page_graph(page: &WaitForPage) -> (WaitForGraph, Vec<Participant>) {
    let mut graph = WaitForGraph::default();
    let mut people: Vec<Participant> = Vec::new();
    // Which participant each join became, once one of its sessions was met.
    let mut join_node: Vec<Option<usize>> = vec![None; page.joins.len()];
    let mut node = |graph: &mut WaitForGraph,
                    people: &mut Vec<Participant>,
                    source: &str,
                    session: &str|
     -> usize {
        if let Some(i) = people.iter().position(|p| p.has(source, session)) {
            return i;
        }
        let key = SessionKey {
            source: source.to_string(),
            session: session.to_string(),
        };
        let join = page.joins.iter().position(|j| {
            j.sessions
                .iter()
                .any(|s| s.source == source && s.session == session)
        });
        if let Some(j) = join {
            if let Some(i) = join_node[j] {
                people[i].sessions.push(key);
                return i;
            }
            join_node[j] = Some(people.len());
        }
        let process = match join.map(|j| &page.joins[j]) {
            Some(j) => Some(ProcessView {
                name: j.process.clone(),
                from: "join".into(),
                exact: j.exact,
            }),
            None => page
                .sessions
                .iter()
                .find(|s| s.source == source && s.session == session)
                .and_then(|s| s.process.clone()),
        };
        people.push(Participant {
            sessions: vec![key.clone()],
            guessed: join.is_some_and(|j| !page.joins[j].exact),
            process,
        });
        graph.nodes.push(key);
        people.len() - 1
    };
    for e in &page.edges {
        let from = node(&mut graph, &mut people, &e.source, &e.waiter);
        let to = node(&mut graph, &mut people, &e.source, &e.holder);
        graph.edges.push(WaitEdge {
            from,
            to,
            lock: e.lock.clone(),
            in_cycle: e.in_cycle,
        });
    }
    for c in &page.cycles {
        let members: Vec<(&str, &str)> = if c.members.is_empty() {
            c.sessions
                .iter()
                .map(|s| (c.source.as_str(), s.as_str()))
                .collect()
        } else {
            c.members
                .iter()
                .map(|m| (m.source.as_str(), m.session.as_str()))
                .collect()
        };
        let found: Option<Vec<usize>> = members
            .iter()
            .map(|(source, session)| people.iter().position(|p| p.has(source, session)))
            .collect();
        let Some(mut found) = found else { continue };
        // Sessions of one participant are one box of the cycle.
        let mut seen = Vec::new();
        found.retain(|i| {
            let new = !seen.contains(i);
            seen.push(*i);
            new
        });
        if found.len() >= 2 {
            graph.cycles.push(found);
        }
    }
    (graph, people)
}

pub const SESSION_W: f64 = 190.0;
pub const SESSION_H: f64 = 40.0;
/// Room between columns for an arrow's label (a lock name of up to 24 characters and a wait).
const COL_W: f64 = 420.0;
const SESSION_ROW: f64 = 62.0;
const MARGIN: f64 = 20.0;
/// An arrow label's line: labels of the arrows leaving one box are stacked this far apart.
pub const LABEL_H: f64 = 14.0;
/// The widest an arrow's label is drawn (24 characters of lock name and a wait, at 11.5 px).
pub const LABEL_W: f64 = 230.0;
/// How far a label's text rises above its baseline (the rest of [`LABEL_H`] is below).
const LABEL_ASCENT: f64 = 10.0;

/// The wait-for graph laid out in columns: sessions that wait on nobody (pure holders) on the
/// right, each waiter one column left of what it waits behind, so chains read left to right. A
/// cycle's sessions share a column, stacked. Within each column the order is the one with the
/// fewest crossing arrows (and no arrow through a box): tried exhaustively for small graphs,
/// improved by swaps for larger ones, by where each session's targets sit beyond that.
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
    /// The cubic Bézier curve the path draws: start, two control points, end.
    pub curve: [(f64, f64); 4],
    /// Where the lock's name goes (next to the waiting session): its start and baseline.
    pub label: (f64, f64),
}

impl WaitArrow {
    /// The rectangle the label may cover, `(x0, y0, x1, y1)`: [`LABEL_W`] wide, [`LABEL_H`]
    /// high. The layout keeps these apart.
    pub fn label_rect(&self) -> (f64, f64, f64, f64) {
        let (x, y) = self.label;
        (x, y - LABEL_ASCENT, x + LABEL_W, y - LABEL_ASCENT + LABEL_H)
    }
}

/// How far apart the first and last labels of a box with `arrows` leaving it are.
fn label_span(arrows: usize) -> f64 {
    arrows.saturating_sub(1) as f64 * LABEL_H
}

/// Each node's [`label_span`].
fn spans_of(graph: &WaitForGraph) -> Vec<f64> {
    let mut out = vec![0usize; graph.nodes.len()];
    for e in &graph.edges {
        out[e.from] += 1;
    }
    out.into_iter().map(label_span).collect()
}

/// Orderings tried one by one up to this many (the product of every column's permutations).
const EXHAUSTIVE_ORDERINGS: usize = 2000;
/// Graphs up to this many sessions are improved by swapping neighbours.
const SWAP_SESSIONS: usize = 40;
/// Straight pieces each arrow is cut into when counting crossings.
const CURVE_STEPS: usize = 8;

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
    // A first order: by where what they wait on sits, keeping a cycle's members together.
    let mut columns: Vec<Vec<usize>> = Vec::with_capacity(max_level + 1);
    let mut row_of = vec![0.0f64; n];
    for l in 0..=max_level {
        let mut members: Vec<usize> = (0..n).filter(|&i| level[i] == l).collect();
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
        for (r, &i) in members.iter().enumerate() {
            row_of[i] = r as f64;
        }
        columns.push(members);
    }
    let spans = spans_of(graph);
    let columns = least_crossing(graph, columns, &spans);
    let boxes = place(&columns, &spans);
    let edges = route(graph, &boxes);
    let bottom = columns
        .iter()
        .filter_map(|c| c.last())
        .map(|&i| boxes[i].1 + SESSION_H + MARGIN.max(spans[i] / 2.0))
        .fold(MARGIN + SESSION_ROW, f64::max);
    WaitLayout {
        boxes,
        edges,
        // Beyond the last column: the bows of a cycle and their labels.
        width: 2.0 * MARGIN + max_level as f64 * COL_W + SESSION_W + 240.0,
        height: bottom,
    }
}

/// Each session's box for the columns' orders (column `l` holds level `l`, drawn right to
/// left). Boxes of a column are [`SESSION_ROW`] apart, further where many arrows leave one:
/// its labels, stacked around its middle ([`route`]), keep clear of its neighbours'.
fn place(columns: &[Vec<usize>], spans: &[f64]) -> Vec<(f64, f64)> {
    let last = columns.len().saturating_sub(1);
    let mut boxes = vec![(0.0, 0.0); spans.len()];
    for (l, members) in columns.iter().enumerate() {
        let x = MARGIN + (last - l) as f64 * COL_W;
        let mut y = 0.0;
        let mut above: Option<usize> = None;
        for &i in members {
            y = match above {
                None => MARGIN.max(spans[i] / 2.0),
                Some(a) => y + SESSION_ROW.max(spans[a] / 2.0 + spans[i] / 2.0 + LABEL_H + 2.0),
            };
            boxes[i] = (x, y);
            above = Some(i);
        }
    }
    boxes
}

/// The arrows between the boxes: from a waiter's right side to the left side of the session
/// it waits on; within one column (a cycle) bowed out to the right of the boxes.
fn route(graph: &WaitForGraph, boxes: &[(f64, f64)]) -> Vec<WaitArrow> {
    // A session waiting on several locks: its labels stack, [`LABEL_H`] apart, centred on
    // where its arrows leave, in the order of where the arrows go (the top label's arrow goes
    // highest), so no two overlap and each sits near its own arrow.
    let mut leaving: Vec<Vec<usize>> = vec![Vec::new(); boxes.len()];
    for (k, e) in graph.edges.iter().enumerate() {
        leaving[e.from].push(k);
    }
    let mut slot = vec![0usize; graph.edges.len()];
    for ks in &mut leaving {
        ks.sort_by(|&a, &b| {
            let (ya, yb) = (boxes[graph.edges[a].to].1, boxes[graph.edges[b].to].1);
            ya.partial_cmp(&yb)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(&b))
        });
        for (j, &k) in ks.iter().enumerate() {
            slot[k] = j;
        }
    }
    graph
        .edges
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let span = label_span(leaving[e.from].len());
            let stacked = slot[k] as f64 * LABEL_H - span / 2.0;
            let (ax, ay) = boxes[e.from];
            let (bx, by) = boxes[e.to];
            let (y1, y2) = (ay + SESSION_H / 2.0, by + SESSION_H / 2.0);
            let x1 = ax + SESSION_W;
            // Labels go right of where the arrow leaves; a bow's right of the bow.
            let mut label_x = x1 + 8.0;
            let curve = if (ax - bx).abs() < 1.0 {
                // Leaving below the middle, arriving above it, and upward arrows bowed further
                // out: the arrows of a cycle drawn in order (a→b, b→c, c→a) nest, none crosses.
                let up = if y2 < y1 { 30.0 } else { 0.0 };
                let c = x1 + 40.0 + up + 12.0 * ((y1 - y2).abs() / SESSION_ROW);
                let (y1, y2) = (y1 + 8.0, y2 - 8.0);
                // The bow's furthest point is three quarters of the way to its control points
                // (but never so far that the label reaches the next column's labels).
                label_x = (x1 + 0.75 * (c - x1) + 6.0).min(x1 + COL_W + 8.0 - LABEL_W);
                [(x1, y1), (c, y1), (c, y2), (x1 + 6.0, y2)]
            } else {
                let x2 = bx - 6.0;
                let mid = (x1 + x2) / 2.0;
                [(x1, y1), (mid, y1), (mid, y2), (x2, y2)]
            };
            let [p0, p1, p2, p3] = curve;
            WaitArrow {
                edge: k,
                d: format!(
                    "M {} {} C {} {}, {} {}, {} {}",
                    p0.0, p0.1, p1.0, p1.1, p2.0, p2.1, p3.0, p3.1
                ),
                curve,
                label: (label_x, y1 - 6.0 + stacked),
            }
        })
        .collect()
}

/// The columns' orders with the least [`tangles`]: every combination when there are few,
/// neighbour swaps while they help for a graph of up to [`SWAP_SESSIONS`], `first` otherwise.
fn least_crossing(graph: &WaitForGraph, first: Vec<Vec<usize>>, spans: &[f64]) -> Vec<Vec<usize>> {
    let n = graph.nodes.len();
    let score = |columns: &[Vec<usize>]| tangles(graph, &place(columns, spans));
    let mut best = first;
    let mut best_score = score(&best);
    if best_score == 0 {
        return best;
    }
    let mut orderings = 1usize;
    for column in &best {
        orderings = (2..=column.len()).fold(orderings, |acc, k| acc.saturating_mul(k));
    }
    if orderings <= EXHAUSTIVE_ORDERINGS {
        let mut current = best.clone();
        for column in &mut current {
            column.sort_unstable();
        }
        loop {
            let s = score(&current);
            if s < best_score {
                best_score = s;
                best.clone_from(&current);
                if s == 0 {
                    break;
                }
            }
            // The next combination, like an odometer whose wheels are the columns' orders.
            let mut wheel = 0;
            while wheel < current.len() && !next_permutation(&mut current[wheel]) {
                wheel += 1;
            }
            if wheel == current.len() {
                break;
            }
        }
        return best;
    }
    if n > SWAP_SESSIONS {
        return best;
    }
    for _ in 0..8 {
        let mut improved = false;
        for l in 0..best.len() {
            for i in 1..best[l].len() {
                best[l].swap(i - 1, i);
                let s = score(&best);
                if s < best_score {
                    best_score = s;
                    improved = true;
                } else {
                    best[l].swap(i - 1, i);
                }
            }
        }
        if !improved || best_score == 0 {
            break;
        }
    }
    best
}

/// Rearranges `v` into its next permutation in lexicographic order; at the last one, back to
/// the first and `false`.
fn next_permutation(v: &mut [usize]) -> bool {
    let Some(i) = (1..v.len()).rev().find(|&i| v[i - 1] < v[i]) else {
        v.reverse();
        return false;
    };
    let j = (i..v.len()).rev().find(|&j| v[j] > v[i - 1]).unwrap_or(i);
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

/// How tangled a placement is: arrows crossing each other, plus arrows through a box other
/// than their own ends (a bow within a column passes every box between its ends: only the
/// cycle's own members may sit there).
fn tangles(graph: &WaitForGraph, boxes: &[(f64, f64)]) -> usize {
    let arrows = route(graph, boxes);
    let lines: Vec<Vec<(f64, f64)>> = arrows.iter().map(|a| polyline(a.curve)).collect();
    let mut count = crossings_of(graph, &lines);
    for (k, e) in graph.edges.iter().enumerate() {
        let (ax, ay) = boxes[e.from];
        let (bx, by) = boxes[e.to];
        let bow = (bx - ax).abs() < 1.0;
        for (i, &(x, y)) in boxes.iter().enumerate() {
            if i == e.from || i == e.to {
                continue;
            }
            let hit = if bow && (x - ax).abs() < 1.0 {
                // Passing another member of the same cycle is how a cycle is drawn.
                let same_cycle = graph
                    .cycles
                    .iter()
                    .any(|c| c.contains(&i) && c.contains(&e.from));
                !same_cycle && y > ay.min(by) && y < ay.max(by)
            } else {
                lines[k]
                    .windows(2)
                    .any(|w| segment_hits_box(w[0], w[1], (x, y, x + SESSION_W, y + SESSION_H)))
            };
            count += usize::from(hit);
        }
    }
    count
}

/// Pairs of arrows that cross (arrows leaving or entering the same box meet there, which is
/// not a crossing).
fn crossings_of(graph: &WaitForGraph, lines: &[Vec<(f64, f64)>]) -> usize {
    let bounds: Vec<(f64, f64, f64, f64)> = lines.iter().map(|l| bounds(l)).collect();
    let mut count = 0;
    for a in 0..lines.len() {
        for b in a + 1..lines.len() {
            let (ea, eb) = (&graph.edges[a], &graph.edges[b]);
            if ea.from == eb.from || ea.to == eb.to {
                continue;
            }
            let (p, q) = (bounds[a], bounds[b]);
            if p.2 < q.0 || q.2 < p.0 || p.3 < q.1 || q.3 < p.1 {
                continue;
            }
            let crosses = lines[a].windows(2).any(|s| {
                lines[b]
                    .windows(2)
                    .any(|t| segments_cross(s[0], s[1], t[0], t[1]))
            });
            count += usize::from(crosses);
        }
    }
    count
}

fn polyline([p0, p1, p2, p3]: [(f64, f64); 4]) -> Vec<(f64, f64)> {
    (0..=CURVE_STEPS)
        .map(|k| {
            let t = k as f64 / CURVE_STEPS as f64;
            let u = 1.0 - t;
            let (a, b, c, d) = (u * u * u, 3.0 * u * u * t, 3.0 * u * t * t, t * t * t);
            (
                a * p0.0 + b * p1.0 + c * p2.0 + d * p3.0,
                a * p0.1 + b * p1.1 + c * p2.1 + d * p3.1,
            )
        })
        .collect()
}

fn bounds(line: &[(f64, f64)]) -> (f64, f64, f64, f64) {
    line.iter().fold(
        (f64::MAX, f64::MAX, f64::MIN, f64::MIN),
        |(x0, y0, x1, y1), &(x, y)| (x0.min(x), y0.min(y), x1.max(x), y1.max(y)),
    )
}

/// Whether segments `a–b` and `c–d` meet (a curve through a point of another counts: the
/// points the curves are cut at may fall on each other; collinear pieces do not).
fn segments_cross(a: (f64, f64), b: (f64, f64), c: (f64, f64), d: (f64, f64)) -> bool {
    let side = |p: (f64, f64), q: (f64, f64), r: (f64, f64)| {
        (q.0 - p.0) * (r.1 - p.1) - (q.1 - p.1) * (r.0 - p.0)
    };
    let (d1, d2) = (side(c, d, a), side(c, d, b));
    let (d3, d4) = (side(a, b, c), side(a, b, d));
    d1 * d2 <= 0.0 && d3 * d4 <= 0.0 && !(d1 == 0.0 && d2 == 0.0)
}

/// Whether segment `a–b` passes through the rectangle `(x0, y0, x1, y1)`.
fn segment_hits_box(a: (f64, f64), b: (f64, f64), (x0, y0, x1, y1): (f64, f64, f64, f64)) -> bool {
    let inside = |p: (f64, f64)| p.0 > x0 && p.0 < x1 && p.1 > y0 && p.1 < y1;
    if inside(a) || inside(b) {
        return true;
    }
    let corners = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)];
    (0..4).any(|i| segments_cross(a, b, corners[i], corners[(i + 1) % 4]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::wire::{
        CycleMemberView, CycleView, HolderView, JoinView, SessionRef, SessionView, WaitEdgeView,
        WaiterView,
    };

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
            statement: None,
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
                statement: None,
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
            process: None,
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

    /// Crossing arrows in a layout of `graph`, as drawn.
    fn crossings(graph: &WaitForGraph, layout: &WaitLayout) -> usize {
        let lines: Vec<Vec<(f64, f64)>> = layout.edges.iter().map(|a| polyline(a.curve)).collect();
        crossings_of(graph, &lines)
    }

    fn graph_of(names: &[&str], edges: &[(usize, usize)]) -> WaitForGraph {
        use lockscope_model::rules::{SessionKey, WaitEdge};
        WaitForGraph {
            nodes: names
                .iter()
                .map(|n| SessionKey {
                    source: "zk".into(),
                    session: n.to_string(),
                })
                .collect(),
            edges: edges
                .iter()
                .map(|&(from, to)| WaitEdge {
                    from,
                    to,
                    lock: format!("zk~l{to}"),
                    in_cycle: false,
                })
                .collect(),
            ..WaitForGraph::default()
        }
    }

    #[test]
    fn a_small_graph_is_drawn_without_crossings() {
        // A waits on H1 and H3, B on H2: holders in their own order make A's arrow to H3
        // cross B's arrow to H2.
        let graph = graph_of(&["H1", "H2", "H3", "A", "B"], &[(3, 0), (3, 2), (4, 1)]);
        let naive = [vec![0, 1, 2], vec![3, 4]];
        assert!(
            tangles(&graph, &place(&naive, &spans_of(&graph))) > 0,
            "the test's premise"
        );
        let layout = wait_layout(&graph);
        assert_eq!(crossings(&graph, &layout), 0);
        assert_eq!(tangles(&graph, &layout.boxes), 0);
        // Columns stay: waiters left of holders.
        assert!(layout.boxes[3].0 < layout.boxes[0].0);
    }

    #[test]
    fn a_chain_with_a_cycle_and_fan_in_is_untangled() {
        // H holds; P, Q wait on H; X waits on P and Q; C1 -> C2 -> C3 -> C1 wait on each
        // other (listed so that stacking them in their own order crosses two arrows); Y waits
        // on C3 and Z on C1.
        let graph = WaitForGraph {
            cycles: vec![vec![5, 6, 7]],
            ..graph_of(
                &["H", "P", "Q", "X", "Y", "C1", "C3", "C2", "Z"],
                &[
                    (1, 0),
                    (2, 0),
                    (3, 1),
                    (3, 2),
                    (5, 7),
                    (7, 6),
                    (6, 5),
                    (4, 6),
                    (8, 5),
                ],
            )
        };
        let naive = [vec![0, 5, 6, 7], vec![1, 2, 4, 8], vec![3]];
        assert!(
            tangles(&graph, &place(&naive, &spans_of(&graph))) > 0,
            "the test's premise"
        );
        let layout = wait_layout(&graph);
        assert_eq!(tangles(&graph, &layout.boxes), 0, "{layout:?}");
    }

    fn overlap(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)) -> bool {
        a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
    }

    /// Every pair of labels of `layout` that overlap.
    fn overlapping_labels(layout: &WaitLayout) -> Vec<(usize, usize)> {
        let rects: Vec<_> = layout.edges.iter().map(WaitArrow::label_rect).collect();
        let mut out = Vec::new();
        for a in 0..rects.len() {
            for b in a + 1..rects.len() {
                if overlap(rects[a], rects[b]) {
                    out.push((a, b));
                }
            }
        }
        out
    }

    #[test]
    fn labels_of_arrows_leaving_one_box_never_overlap() {
        // A waits on four holders, B (under A, in the same column) on two of them, C on one;
        // X and Y wait on each other (a cycle: bows with labels of their own) and X also on H1.
        let graph = WaitForGraph {
            cycles: vec![vec![7, 8]],
            ..graph_of(
                &["H1", "H2", "H3", "H4", "A", "B", "C", "X", "Y"],
                &[
                    (4, 0),
                    (4, 1),
                    (4, 2),
                    (4, 3),
                    (5, 1),
                    (5, 2),
                    (6, 3),
                    (7, 8),
                    (8, 7),
                    (7, 0),
                ],
            )
        };
        let layout = wait_layout(&graph);
        assert_eq!(overlapping_labels(&layout), [], "{layout:#?}");
        // Labels sit right of their box, within the gap before the next column's labels.
        for a in &layout.edges {
            let (x, _) = layout.boxes[graph.edges[a.edge].from];
            let (x0, .., x1, _) = a.label_rect();
            assert!(x0 >= x + SESSION_W, "{a:?}");
            assert!(x1 <= x + SESSION_W + COL_W + 8.0, "{a:?}");
        }
        // Every label lies inside the drawing.
        for a in &layout.edges {
            let (_, y0, _, y1) = a.label_rect();
            assert!(
                y0 >= 0.0 && y1 <= layout.height,
                "{a:?} in {}",
                layout.height
            );
        }
    }

    #[test]
    fn many_arrows_from_boxes_stacked_in_a_column_keep_their_labels_apart() {
        // Two waiters, one above the other, with six arrows each to six holders.
        let names = ["H0", "H1", "H2", "H3", "H4", "H5", "A", "B"];
        let mut edges = Vec::new();
        for h in 0..6 {
            edges.push((6, h));
            edges.push((7, h));
        }
        let graph = graph_of(&names, &edges);
        let layout = wait_layout(&graph);
        assert_eq!(overlapping_labels(&layout), []);
        let (a, b) = (layout.boxes[6], layout.boxes[7]);
        assert_eq!(a.0, b.0, "both wait on the same column");
        assert!(
            (a.1 - b.1).abs() > SESSION_ROW,
            "the rows open up for the labels"
        );
    }

    fn page_session(source: &str, session: &str, process: Option<(&str, bool)>) -> SessionView {
        SessionView {
            source: source.into(),
            session: session.into(),
            kind: Default::default(),
            timeout_ms: None,
            connected: true,
            server: None,
            expires_at_ms: None,
            holds: Vec::new(),
            waits: Vec::new(),
            connection: None,
            process: process.map(|(name, exact)| ProcessView {
                name: name.into(),
                from: "identifier".into(),
                exact,
            }),
        }
    }

    fn edge(source: &str, waiter: &str, holder: &str, lock: &str) -> WaitEdgeView {
        WaitEdgeView {
            source: source.into(),
            waiter: waiter.into(),
            holder: holder.into(),
            lock: lock.into(),
            waiting_since_ms: None,
            in_cycle: true,
        }
    }

    fn reference(source: &str, session: &str) -> SessionRef {
        SessionRef {
            source: source.into(),
            session: session.into(),
        }
    }

    #[test]
    fn sessions_of_one_process_in_two_sources_are_one_box_and_close_a_cycle() {
        // svc-a holds a ZooKeeper lock and waits on a PostgreSQL advisory lock svc-b holds;
        // svc-b waits on the ZooKeeper lock: four sessions, two participants, one cycle.
        let page = WaitForPage {
            edges: vec![
                edge("pg", "11", "12", "pg~/advisory/db/1"),
                edge("zk", "0xb", "0xa", "zk~/locks/x"),
            ],
            sessions: vec![
                page_session("pg", "11", Some(("svc-a", true))),
                page_session("pg", "12", Some(("svc-b", true))),
                page_session("zk", "0xa", Some(("svc-a", true))),
                page_session("zk", "0xb", Some(("svc-b", true))),
            ],
            joins: vec![
                JoinView {
                    process: "svc-a".into(),
                    exact: true,
                    sessions: vec![reference("pg", "11"), reference("zk", "0xa")],
                },
                JoinView {
                    process: "svc-b".into(),
                    exact: false,
                    sessions: vec![reference("pg", "12"), reference("zk", "0xb")],
                },
            ],
            cycles: vec![CycleView {
                source: "pg".into(),
                sessions: vec!["11".into(), "12".into(), "0xa".into(), "0xb".into()],
                waits: Vec::new(),
                sources: vec!["pg".into(), "zk".into()],
                members: vec![
                    CycleMemberView {
                        source: "pg".into(),
                        session: "11".into(),
                        process: None,
                    },
                    CycleMemberView {
                        source: "pg".into(),
                        session: "12".into(),
                        process: None,
                    },
                    CycleMemberView {
                        source: "zk".into(),
                        session: "0xa".into(),
                        process: None,
                    },
                    CycleMemberView {
                        source: "zk".into(),
                        session: "0xb".into(),
                        process: None,
                    },
                ],
                counted: false,
            }],
            ..WaitForPage::default()
        };
        let (graph, people) = page_graph(&page);
        assert_eq!(people.len(), 2, "{people:#?}");
        assert_eq!(graph.nodes.len(), 2);
        let a = people
            .iter()
            .position(|p| p.has("zk", "0xa"))
            .expect("svc-a");
        let b = people
            .iter()
            .position(|p| p.has("zk", "0xb"))
            .expect("svc-b");
        assert!(people[a].has("pg", "11") && people[b].has("pg", "12"));
        assert_eq!(
            people[a].process.as_ref().map(|p| p.name.as_str()),
            Some("svc-a")
        );
        assert_eq!(people[a].sources(), ["pg", "zk"]);
        assert!(
            !people[a].guessed && people[b].guessed,
            "svc-b's join is a guess"
        );
        let pairs: Vec<(usize, usize)> = graph.edges.iter().map(|e| (e.from, e.to)).collect();
        assert_eq!(pairs, [(a, b), (b, a)]);
        assert_eq!(graph.cycles.len(), 1);
        assert!(graph.in_cycle(a) && graph.in_cycle(b));
        let layout = wait_layout(&graph);
        assert_eq!(
            layout.boxes[a].0, layout.boxes[b].0,
            "a cycle shares a column"
        );
    }

    #[test]
    fn sessions_without_a_join_stay_apart_and_keep_their_own_process() {
        // Two connections of one pool share an application_name inside one source: no join.
        let page = WaitForPage {
            edges: vec![edge("pg", "1", "2", "pg~/advisory/db/7")],
            sessions: vec![
                page_session("pg", "1", Some(("pool", true))),
                page_session("pg", "2", Some(("pool", true))),
            ],
            ..WaitForPage::default()
        };
        let (graph, people) = page_graph(&page);
        assert_eq!(people.len(), 2);
        assert_eq!(graph.edges.len(), 1);
        assert!(people.iter().all(|p| !p.guessed && p.sessions.len() == 1));
        assert!(graph.cycles.is_empty());
    }

    #[test]
    fn permutations_are_enumerated_once_each() {
        let mut v = vec![0, 1, 2];
        let mut seen = vec![v.clone()];
        while next_permutation(&mut v) {
            seen.push(v.clone());
        }
        assert_eq!(seen.len(), 6);
        assert_eq!(v, [0, 1, 2], "back to the first");
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 6);
    }
}
