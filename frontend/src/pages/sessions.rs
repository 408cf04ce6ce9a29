//! Sessions of every backend (ZooKeeper sessions, etcd leases, database connections): timeout,
//! connection or lease, expiry deadline, what each holds and waits on (a database connection
//! also its user, client, database, state, statement and transaction age); and
//! the wait-for graph across locks (session A waits on a lock session B holds) with cycles,
//! possible deadlocks, drawn in red.
//!
//! Both page on the server: the table reads `GET /api/v1/sessions` a page of [`PAGE`] at a time
//! (filter and page in the URL: `/sessions?source=…&q=…&cursor=…`), the graph reads
//! `GET /api/v1/waitfor` (edges longest wait first, a page at a time, every cycle named). Both
//! are read when the page opens and again after the live view of the locks with waiters
//! reports changes (at most one request in flight each; changes during it cause one more).
//!
//! Each row's `id` is [`format::session_anchor`], so `/sessions?source=…&q=…#<anchor>` (linked
//! from a database lock's page) finds that session and scrolls to it once the list has loaded.

use std::time::Duration;

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};
use leptos_router::NavigateOptions;
use lockscope_model::wire::{
    BlockersPage, ConnectionView, CycleView, RootBlockerView, SessionKind, SessionPage,
    SessionView, WaitForPage,
};

use crate::api::{Refusal, ViewStream};
use crate::blockers;
use crate::format;
use crate::graph::{page_graph, wait_layout, Participant, SESSION_H, SESSION_W};
use crate::shared::{arrow_marker, ctx, keep_reading, Ago, Ctx, Left, LockLink, RootBlockers};
use crate::store::{encode, View};
use send_wrapper::SendWrapper;

/// Sessions per page of the table, and wait-for edges per page of the graph.
const PAGE: usize = 100;

/// An arrow's label fits the gap between two columns of the wait-for graph (about 90 px).
const EDGE_LABEL_CHARS: usize = 24;

/// Sessions drawn in the wait-for graph at most (the page's other edges are counted).
const MAX_DRAWN: usize = 80;

/// The sessions table's query, as its URL says (`/sessions?source=…&q=…&cursor=…&from=…`).
#[derive(Debug, Clone, Default, PartialEq)]
struct TableQuery {
    source: Option<String>,
    q: String,
    cursor: Option<String>,
    from: usize,
}

impl TableQuery {
    /// The filter and the cursor, as both the URL and the server take them.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(s) = &self.source {
            pairs.push(("source", s.clone()));
        }
        if !self.q.trim().is_empty() {
            pairs.push(("q", self.q.trim().to_string()));
        }
        if let Some(c) = &self.cursor {
            pairs.push(("cursor", c.clone()));
        }
        pairs
    }

    fn server(&self) -> String {
        let mut pairs = self.pairs();
        pairs.push(("limit", PAGE.to_string()));
        encode(&pairs)
    }

    fn url(&self) -> String {
        let mut pairs = self.pairs();
        if self.cursor.is_some() {
            pairs.push(("from", self.from.to_string()));
        }
        encode(&pairs)
    }
}

#[component]
pub fn Sessions() -> impl IntoView {
    let Ctx { link, .. } = ctx();
    // The locks with waiters, as a live view: what changes the wait-for graph changes it, and
    // each push reads the sessions and the graph again.
    let waiting = RwSignal::new(View::default());
    let refused = RwSignal::new(None::<Refusal>);
    let stream = StoredValue::new(None::<SendWrapper<ViewStream>>);
    stream.set_value(Some(SendWrapper::new(ViewStream::open(
        "state=waiting&sort=longest_wait&limit=100".to_string(),
        waiting,
        link,
        refused,
    ))));
    on_cleanup(move || stream.set_value(None));
    let params = use_query_map();
    let table = Memo::new(move |_| {
        params.with(|p| {
            let text = |n: &str| p.get(n).filter(|v| !v.is_empty());
            TableQuery {
                source: text("source"),
                q: text("q").unwrap_or_default(),
                cursor: text("cursor"),
                from: text("from").and_then(|f| f.parse().ok()).unwrap_or(0),
            }
        })
    });
    let sessions = RwSignal::new(None::<Result<SessionPage, String>>);
    keep_reading(
        move || format!("/api/v1/sessions?{}", table.with(TableQuery::server)),
        move || {
            waiting.with(|w| w.seq);
        },
        sessions,
        Duration::ZERO,
    );
    // The graph's page of edges (longest waits first): a cursor kept here, not in the URL.
    let edges_at = RwSignal::new((None::<String>, 0usize));
    let edges_back = StoredValue::new(Vec::<(Option<String>, usize)>::new());
    let graph = RwSignal::new(None::<Result<WaitForPage, String>>);
    keep_reading(
        move || {
            let mut pairs = vec![("limit", PAGE.to_string())];
            if let Some(c) = edges_at.with(|(c, _)| c.clone()) {
                pairs.push(("cursor", c));
            }
            format!("/api/v1/waitfor?{}", encode(&pairs))
        },
        move || {
            waiting.with(|w| w.seq);
        },
        graph,
        Duration::ZERO,
    );
    // The root blockers (who holds the rest up), read with the graph.
    let roots = RwSignal::new(None::<Result<BlockersPage, String>>);
    keep_reading(
        || format!("/api/v1/blockers?limit={}", blockers::LOOKUP),
        move || {
            waiting.with(|w| w.seq);
        },
        roots,
        Duration::ZERO,
    );
    let root_list = Memo::new(move |_| {
        roots.with(|r| match r {
            Some(Ok(page)) => page.blockers.clone(),
            _ => Vec::new(),
        })
    });
    let navigate = use_navigate();
    let go = move |q: TableQuery| {
        navigate(
            &format!("/sessions?{}", q.url()),
            NavigateOptions {
                scroll: false,
                ..NavigateOptions::default()
            },
        )
    };
    let table_back = StoredValue::new(Vec::<(Option<String>, usize)>::new());
    // On a first page nothing is behind (the header's link, another filter, the browser's back).
    Effect::new(move |_| {
        if table.with(|q| q.cursor.is_none()) {
            table_back.set_value(Vec::new());
        }
    });
    // Opened from a link to one session: scroll to its row once the first answer is drawn.
    let scrolled = StoredValue::new(false);
    Effect::new(move |_| {
        if scrolled.get_value() || !sessions.with(|s| matches!(s, Some(Ok(_)))) {
            return;
        }
        scrolled.set_value(true);
        let hash = window().location().hash().unwrap_or_default();
        let Some(anchor) = hash
            .strip_prefix('#')
            .filter(|a| !a.is_empty())
            .map(str::to_string)
        else {
            return;
        };
        request_animation_frame(move || {
            if let Some(row) = document().get_element_by_id(&anchor) {
                row.scroll_into_view();
            }
        });
    });
    let graph_view = move || match graph.get() {
        None => view! { <p class="empty">"Loading the wait-for graph…"</p> }.into_any(),
        Some(Err(e)) => view! { <p class="banner lost">{e}</p> }.into_any(),
        Some(Ok(page)) => {
            let (cursor, from) = edges_at.get();
            let shown = page.edges.len();
            let pager = (page.total as usize > shown || cursor.is_some()).then(|| {
                let next = page.next.clone();
                let here = (cursor.clone(), from);
                view! {
                    <nav class="pager edges">
                        <button disabled=edges_back.with_value(Vec::is_empty) on:click=move |_| {
                            if let Some(back) = edges_back.try_update_value(Vec::pop).flatten() {
                                edges_at.set(back);
                            }
                        }>"‹ longer waits"</button>
                        <span class="range">{format!("waits {}–{} of {}", from + 1, from + shown, page.total)}</span>
                        <button disabled=next.is_none() on:click=move |_| {
                            if let Some(c) = next.clone() {
                                edges_back.update_value(|b| b.push(here.clone()));
                                edges_at.set((Some(c), from + shown));
                            }
                        }>"shorter waits ›"</button>
                    </nav>
                }
            });
            view! { {wait_for_svg(&page)} {pager} }.into_any()
        }
    };
    let in_cycle = Memo::new(move |_| {
        graph.with(|g| match g {
            Some(Ok(page)) => page
                .cycles
                .iter()
                .flat_map(cycle_members)
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        })
    });
    // What the table needs to trace a waiting session to its roots: the graph's edges and
    // joins (this page of them).
    let traced = Memo::new(move |_| {
        graph.with(|g| match g {
            Some(Ok(page)) => (page.edges.clone(), page.joins.clone()),
            _ => (Vec::new(), Vec::new()),
        })
    });
    let table_view = move || match sessions.get() {
        None => view! { <p class="empty">"Loading sessions…"</p> }.into_any(),
        Some(Err(e)) => view! { <p class="banner lost">{e}</p> }.into_any(),
        Some(Ok(page)) => {
            let q = table.get();
            let shown = page.sessions.len();
            let next = page.next.clone();
            let (go_next, go_prev) = (go.clone(), go.clone());
            let here = (q.cursor.clone(), q.from);
            let (q_next, q_prev) = (q.clone(), q.clone());
            let has_back = q.cursor.is_some();
            let pager = (page.total as usize > shown || has_back).then(|| view! {
                <nav class="pager">
                    <button disabled=!has_back on:click=move |_| {
                        let (cursor, from) = table_back.try_update_value(Vec::pop).flatten().unwrap_or((None, 0));
                        go_prev(TableQuery { cursor, from, ..q_prev.clone() });
                    }>"‹ previous"</button>
                    <span class="range">{format!("{}–{} of {}", q.from + 1, q.from + shown, page.total)}</span>
                    <button disabled=next.is_none() on:click=move |_| {
                        if let Some(c) = next.clone() {
                            table_back.update_value(|b| b.push(here.clone()));
                            go_next(TableQuery { cursor: Some(c), from: q_next.from + shown, ..q_next.clone() });
                        }
                    }>"next ›"</button>
                </nav>
            });
            let filtered = q.source.is_some() || !q.q.is_empty();
            let go_all = go.clone();
            view! {
                <h2>{format!("Sessions, leases and connections ({})", page.total)}</h2>
                {filtered.then(|| view! {
                    <p class="muted">
                        {filter_note(&q)}
                        <button class="linkish" on:click=move |_| { table_back.set_value(Vec::new()); go_all(TableQuery::default()); }>"Show all sessions"</button>
                    </p>
                })}
                {session_table(page.sessions, &in_cycle.get(), &root_list.get(), &traced.get())}
                {pager}
            }
            .into_any()
        }
    };
    let roots_view = move || match roots.get() {
        Some(Ok(page)) if !page.blockers.is_empty() => Some(view! {
            <div class="roots-here">
                <h3>{format!("Root blockers ({})", page.total)}</h3>
                <RootBlockers list=page.blockers.into_iter().take(blockers::CARD).collect()/>
            </div>
        }),
        _ => None,
    };
    view! {
        <section class="card">
            <h2>"Wait-for graph"</h2>
            {roots_view}
            {graph_view}
        </section>
        <section class="card">{table_view}</section>
    }
}

/// "Only source zk matching “0x1”. " for a filtered table.
fn filter_note(q: &TableQuery) -> String {
    let mut note = "Only sessions".to_string();
    if let Some(s) = &q.source {
        note.push_str(&format!(" of {s}"));
    }
    if !q.q.is_empty() {
        note.push_str(&format!(" matching “{}”", q.q));
    }
    note + ". "
}

fn lock_path(id: &str) -> String {
    lockscope_model::id::parse_lock_id(id).map_or_else(|| id.to_string(), |(_, path)| path)
}

/// How the wait-for graph and the deadlock banner name a session: connections as
/// `connection <id>`, others by their id.
fn node_label(list: &[SessionView], source: &str, session: &str) -> String {
    let kind = list
        .iter()
        .find(|s| s.source == source && s.session == session)
        .map(|s| s.kind);
    match kind {
        Some(SessionKind::DatabaseConnection) => format!("connection {session}"),
        _ => format!("session {session}"),
    }
}

/// A process name as shown for `session`: never a ZooKeeper session id in decimal.
fn process_label(name: Option<&str>, session: &str) -> Option<String> {
    format::identity_label(name, session).filter(|n| !n.trim().is_empty())
}

/// A box's name: its process where known, else its (first) session.
fn participant_label(p: &Participant, list: &[SessionView]) -> String {
    let first = &p.sessions[0];
    process_label(p.process.as_ref().map(|p| p.name.as_str()), &first.session)
        .unwrap_or_else(|| node_label(list, &first.source, &first.session))
}

/// A box's tooltip: each of its sessions with its source, and how its name was found.
fn participant_title(p: &Participant, list: &[SessionView]) -> String {
    let mut lines: Vec<String> = p
        .sessions
        .iter()
        .map(|k| format!("{}: {}", k.source, node_label(list, &k.source, &k.session)))
        .collect();
    match &p.process {
        Some(_) if p.guessed => lines.push(
            "Joined across sources by a guess (a shared host or a pooled name): these may be different processes.".into(),
        ),
        Some(proc) if proc.from == "join" => {
            lines.push("One process in several sources (joined by its exact name).".into())
        }
        Some(proc) if !proc.exact => lines.push(format!(
            "Named by {} (a guess: other processes may share it).",
            proc.from.replace('_', " ")
        )),
        _ => {}
    }
    lines.join("\n")
}

/// A cycle's sessions by source (a cycle across sources lists its members).
fn cycle_members(c: &CycleView) -> Vec<(String, String)> {
    if c.members.is_empty() {
        c.sessions
            .iter()
            .map(|s| (c.source.clone(), s.clone()))
            .collect()
    } else {
        c.members
            .iter()
            .map(|m| (m.source.clone(), m.session.clone()))
            .collect()
    }
}

/// A cycle in words. Inside one source: its members. Across sources: each hop with its
/// source and lock ("svc-a (pg) waits on /advisory/… held by svc-b"), and whether it is
/// counted (a join by a guess is shown, not counted).
fn cycle_banner(c: &CycleView, list: &[SessionView]) -> impl IntoView {
    let name = |source: &str, session: &str, process: Option<&str>| {
        process_label(process, session).unwrap_or_else(|| node_label(list, source, session))
    };
    let across = c.sources.len() > 1;
    if !across {
        let names: Vec<String> = c
            .sessions
            .iter()
            .map(|s| {
                let process = c
                    .members
                    .iter()
                    .find(|m| m.session == *s)
                    .and_then(|m| m.process.as_ref())
                    .map(|p| p.name.as_str());
                match process_label(process, s) {
                    Some(p) => format!("{p} ({})", node_label(list, &c.source, s)),
                    None => node_label(list, &c.source, s),
                }
            })
            .collect();
        return view! {
            <p class="banner lost deadlock">
                "Possible deadlock: " {names.join(", ")}
                " each wait on a lock another of them holds. (One session or connection may serve several threads, so check the clients.)"
            </p>
        }
        .into_any();
    }
    let hops: Vec<String> = c
        .waits
        .iter()
        .map(|w| {
            let source = if w.source.is_empty() {
                &c.source
            } else {
                &w.source
            };
            format!(
                "{} ({source}) waits on {} held by {}",
                name(source, &w.waiter, w.waiter_process.as_deref()),
                format::middle_ellipsis(&lock_path(&w.lock), 48),
                name(source, &w.holder, w.holder_process.as_deref()),
            )
        })
        .collect();
    view! {
        <p class="banner lost deadlock across" data-sources=c.sources.join(",")>
            {format!("Possible deadlock across {}: ", c.sources.join(" + "))}
            {hops.join("; ")}
            ". "
            {if c.counted {
                "The sessions of each process are joined by its exact name."
            } else {
                "Not counted: joined by a guess (a shared host or a pooled name), so these may be different processes."
            }}
        </p>
    }
    .into_any()
}

fn wait_for_svg(page: &WaitForPage) -> AnyView {
    let (graph, people) = page_graph(page);
    let list = page.sessions.as_slice();
    if graph.edges.is_empty() {
        return view! {
            <p class="empty">"No session waits on a lock that another session holds."</p>
        }
        .into_any();
    }
    let cycles = page
        .cycles
        .iter()
        .map(|c| cycle_banner(c, list))
        .collect_view();
    let mut drawn = graph.clone();
    drawn.nodes.truncate(MAX_DRAWN);
    // Each drawn edge's place in the page (for when its waiter began waiting).
    let kept: Vec<usize> = (0..graph.edges.len())
        .filter(|&k| graph.edges[k].from < MAX_DRAWN && graph.edges[k].to < MAX_DRAWN)
        .collect();
    drawn
        .edges
        .retain(|e| e.from < MAX_DRAWN && e.to < MAX_DRAWN);
    drawn.cycles.retain(|c| c.iter().all(|&m| m < MAX_DRAWN));
    let layout = wait_layout(&drawn);
    let edges = layout
        .edges
        .iter()
        .map(|a| {
            let e = &drawn.edges[a.edge];
            let path = lock_path(&e.lock);
            // The whole lock name (elided in the middle: "lock1" may be three locks) and how
            // long the waiter has waited on it.
            let since = page.edges[kept[a.edge]].waiting_since_ms;
            let label = format::middle_ellipsis(&path, EDGE_LABEL_CHARS);
            view! {
                <g class=if e.in_cycle { "wedge cycle" } else { "wedge" } data-lock=e.lock.clone()>
                    <title>{path.clone()}</title>
                    <path d=a.d.clone() marker-end="url(#wf-arrow)"></path>
                    {svg_link(crate::api::at(&format!("/locks/{}", e.lock)), view! {
                        <text x=a.label.0.to_string() y=a.label.1.to_string() class="t2">
                            {move || match since {
                                Some(at) => format!("{label} · {}", format::duration(ctx().now.get() - at)),
                                None => label.clone(),
                            }}
                        </text>
                    }.into_any())}
                </g>
            }
        })
        .collect_view();
    let nodes = drawn
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (x, y) = layout.boxes[i];
            let p = &people[i];
            let mut class = "wnode".to_string();
            if drawn.in_cycle(i) {
                class.push_str(" cycle");
            }
            if p.sessions.len() > 1 {
                class.push_str(" joined");
            }
            if p.guessed {
                class.push_str(" guessed");
            }
            let named = p.process.is_some() && participant_label(p, list) != node_label(list, &n.source, &n.session);
            let second = if p.sessions.len() > 1 || !named {
                p.sources().join(" + ")
            } else {
                // One session named by its process: which session, on the second line.
                // "zk · 0x10001…" (the box's width holds about 27 characters of it).
                format!(
                    "{} · {}",
                    n.source,
                    node_label(list, &n.source, &n.session).trim_start_matches("session ")
                )
            };
            let second = if p.guessed { format!("{second} · guessed join") } else { second };
            svg_link(format!("#{}", format::session_anchor(&n.source, &n.session)), view! {
                <g class=class data-session=n.session.clone() data-sources=p.sources().join(",")>
                    <title>{participant_title(p, list)}</title>
                    <rect x=x.to_string() y=y.to_string() width=SESSION_W.to_string() height=SESSION_H.to_string() rx="6"></rect>
                    <text x=(x + 10.0).to_string() y=(y + 17.0).to_string() class="t1">
                        {format::middle_ellipsis(participant_label(p, list).trim_start_matches("session "), 24)}
                    </text>
                    <text x=(x + 10.0).to_string() y=(y + 33.0).to_string() class="t2">{format::middle_ellipsis(&second, 27)}</text>
                </g>
            }.into_any())
        })
        .collect_view();
    let (width, height) = (layout.width, layout.height);
    let more = graph.nodes.len().saturating_sub(MAX_DRAWN);
    let guessed = people.iter().take(MAX_DRAWN).any(|p| p.guessed);
    view! {
        {cycles}
        <svg class="waitfor" viewBox=format!("0 0 {width} {height}") width=width.to_string() height=height.to_string() role="group" aria-label="wait-for graph: who waits on whom">
            {arrow_marker("wf-arrow")}
            {edges}
            {nodes}
        </svg>
        <p class="legend">
            "An arrow from A to B: A waits on a lock (named at the arrow's start, with how long A has waited; it links to the lock) that B holds. Holders that wait on nothing are on the right. "
            "A box is a session, named by its process where its source tells (its sessions on hover); sessions of one process in several sources are one box, with its sources. A box links to its row below."
            {guessed.then_some(" A dashed box joins sessions by a guess (a shared host or a pooled name): they may be different processes.")}
        </p>
        {(more > 0).then(|| view! { <p class="muted">{format!("{more} more sessions not drawn.")}</p> })}
        {blocking_table(page)}
    }
    .into_any()
}

/// A link inside the SVG: an SVG `<a>` (the `view!` macro makes an `<a>` of its own an HTML
/// element, which an SVG does not draw, children and all).
fn svg_link(href: String, child: AnyView) -> impl IntoView {
    leptos::tachys::svg::a().attr("href", href).child(child)
}

/// Who blocks whom, longest wait first (the page's order, as pg_activity's blocking view):
/// the waiting session, the lock, the holding session and since when.
fn blocking_table(page: &WaitForPage) -> impl IntoView {
    let list = page.sessions.as_slice();
    // A session named by its process too, where its source tells.
    let node_label = |list: &[SessionView], source: &str, session: &str| {
        let id = node_label(list, source, session);
        let process = list
            .iter()
            .find(|s| s.source == source && s.session == session)
            .and_then(|s| s.process.as_ref())
            .and_then(|p| process_label(Some(&p.name), session));
        match process {
            Some(p) => format!("{p} ({id})"),
            None => id,
        }
    };
    let rows = page
        .edges
        .iter()
        .map(|e| {
            let path = lock_path(&e.lock);
            view! {
                <tr class:cycle=e.in_cycle data-waiter=e.waiter.clone()>
                    <td data-label="Blocked"><a href=format!("#{}", format::session_anchor(&e.source, &e.waiter))>{node_label(list, &e.source, &e.waiter)}</a></td>
                    <td data-label="Waits on"><a href=crate::api::at(&format!("/locks/{}", e.lock)) title=path.clone()>{format::middle_ellipsis(&path, 60)}</a></td>
                    <td data-label="Held by"><a href=format!("#{}", format::session_anchor(&e.source, &e.holder))>{node_label(list, &e.source, &e.holder)}</a></td>
                    <td data-label="Waiting">{e.waiting_since_ms.map(|at| view! { <crate::shared::Since since_ms=at/> })}</td>
                    <td data-label="Source">{e.source.clone()}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <h3>"Blocked → blocking"</h3>
        <table class="blocking small-table">
            <thead><tr><th>"Blocked"</th><th>"Waits on"</th><th>"Held by"</th><th>"Waiting"</th><th>"Source"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

fn session_table(
    mut list: Vec<SessionView>,
    in_cycle: &[(String, String)],
    roots: &[RootBlockerView],
    (edges, joins): &(
        Vec<lockscope_model::wire::WaitEdgeView>,
        Vec<lockscope_model::wire::JoinView>,
    ),
) -> AnyView {
    if list.is_empty() {
        return view! { <p class="empty">"No session or lease holds or waits on a watched lock."</p> }.into_any();
    }
    // Connection ids sort as numbers (9 before 10); other ids as text.
    list.sort_by(|a, b| {
        let key = |s: &SessionView| {
            (
                s.source.clone(),
                s.session.parse::<u64>().ok(),
                s.session.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let any_connection = list.iter().any(|s| s.connection.is_some());
    view! {
        <table class="sessions">
            <thead>
                <tr>
                    <th>"Source"</th><th>"Session"</th><th>"State"</th>
                    {any_connection.then(|| view! { <th>"Connection"</th> })}
                    <th>"Timeout"</th><th>"Holds"</th><th>"Waits on"</th>
                </tr>
            </thead>
            <tbody>
                {list.into_iter().map(|s| {
                    let cyc = in_cycle.contains(&(s.source.clone(), s.session.clone()));
                    let lease = s.kind == SessionKind::EtcdLease;
                    let conn_state = s.connection.as_ref().map(|c| c.state.clone()).filter(|st| !st.is_empty());
                    let state = if s.connected && s.connection.is_some() {
                        view! {
                            <span class="state up">"connected"</span>
                            {conn_state.map(|st| view! { " · " <span class="conn-state">{st}</span> })}
                        }.into_any()
                    } else if s.connected && lease {
                        view! {
                            <span class="state up">"alive"</span>
                            {s.expires_at_ms.map(|at| view! { " · runs out in " <Left at_ms=at/> })}
                        }.into_any()
                    } else if s.connected {
                        view! { <span class="state up">"connected"</span> {s.server.map(|srv| format!(" to {srv}"))} }.into_any()
                    } else {
                        view! {
                            <span class="state down">"disconnected"</span>
                            {s.expires_at_ms.map(|at| view! { " · expires in " <Left at_ms=at/> })}
                        }.into_any()
                    };
                    let links = |ids: Vec<String>| ids.into_iter().map(|id| {
                        let path = lock_path(&id);
                        view! { <div><LockLink id=id path=path/></div> }
                    }).collect_view();
                    let details = any_connection.then(|| view! { <td class="conn">{s.connection.clone().map(connection_details)}</td> });
                    // Who holds it up at the root, when the graph can tell.
                    let found = if s.waits.is_empty() {
                        Vec::new()
                    } else {
                        blockers::roots_of(roots, &s.source, &s.session, &s.waits, edges, joins)
                    };
                    let root_note = found.first().map(|r| {
                        let more = found.len() - 1;
                        view! {
                            <div class="rootnote" title=format!("A root blocker waits on nobody and holds a lock that this session's waits lead to. Sources: {}", blockers::sources(r).join(", "))>
                                {blockers::blocked_by(r)}
                                {(more > 0).then(|| format!(" and {more} more root{}", if more == 1 { "" } else { "s" }))}
                            </div>
                        }
                    });
                    let process = s.process.as_ref().and_then(|p| {
                        let name = process_label(Some(&p.name), &s.session)?;
                        let how = if p.exact { format!("process, from its {}", p.from.replace('_', " ")) } else { format!("a guess from its {}: other processes may share it", p.from.replace('_', " ")) };
                        Some(view! { <div class="process" class:guessed=!p.exact title=how>{name}</div> })
                    });
                    view! {
                        <tr class:cycle=cyc id=format::session_anchor(&s.source, &s.session) data-session=s.session.clone() data-kind=s.kind.display_name()>
                            <td>{s.source.clone()}</td>
                            <td>{process}<span class="muted">{s.kind.display_name()}</span>" "<code>{s.session.clone()}</code></td>
                            <td>{state}</td>
                            {details}
                            <td>{s.timeout_ms.map(|t| format::duration(t as i64))}</td>
                            <td>{links(s.holds)}</td>
                            <td>{links(s.waits)}{root_note}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// Longest statement shown in the table; the full text is in its tooltip.
const STATEMENT_CHARS: usize = 90;

/// What the database tells of a connection: who, from where, to which database, since when,
/// its transaction's age and its current statement.
fn connection_details(c: ConnectionView) -> impl IntoView {
    let who = view! {
        <span class="muted">"user "</span><code>{c.user.clone()}</code>
        {c.client.clone().map(|cl| view! { <span class="muted">" from "</span><code>{cl}</code> })}
        {c.database.clone().map(|db| view! { <span class="muted">" · database "</span><code>{db}</code> })}
        {c.application.clone().filter(|a| !a.is_empty()).map(|a| view! { <span class="muted">" · application "</span><code>{a}</code> })}
    };
    let times = (c.connected_since_ms.is_some() || c.transaction_since_ms.is_some()).then(|| view! {
        <div class="muted small">
            {c.connected_since_ms.map(|at| view! { "connected " <Ago since_ms=at/> " ago" })}
            {(c.connected_since_ms.is_some() && c.transaction_since_ms.is_some()).then_some(" · ")}
            {c.transaction_since_ms.map(|at| view! { <span class="trx-age">"transaction open for " <Ago since_ms=at/></span> })}
        </div>
    });
    let statement = c.statement.filter(|st| !st.trim().is_empty()).map(|st| view! {
        <div><code class="stmt" title=st.clone()>{format::one_line(&st, STATEMENT_CHARS)}</code></div>
    });
    view! {
        <div>{who}</div>
        {times}
        {statement}
    }
}
