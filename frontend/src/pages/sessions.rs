//! Sessions of every backend (ZooKeeper sessions, etcd leases, database connections): timeout,
//! connection or lease, expiry deadline, what each holds and waits on (a database connection
//! also its user, client, database, state, statement and transaction age); and
//! the wait-for graph across locks (session A waits on a lock session B holds) with cycles,
//! possible deadlocks, drawn in red.
//!
//! Read from `GET /api/v1/sessions` when the page opens and again after the live view of the
//! locks with waiters reports changes (at most one request in flight; changes during it cause
//! one more).
//!
//! Each row's `id` is [`format::session_anchor`], so `/sessions#<anchor>` (linked from a
//! database lock's page) scrolls to and highlights that session once the list has loaded.

use leptos::prelude::*;
use leptos::task::spawn_local;
use lockscope_model::rules::{wait_for_graph, WaitForGraph};
use lockscope_model::wire::{ConnectionView, SessionKind, SessionView};
use serde::Deserialize;

use crate::api::{get_json, Refusal, ViewStream};
use crate::app::{arrow_marker, ctx, Ago, Ctx, Left, LockLink};
use crate::format;
use crate::graph::{wait_layout, SESSION_H, SESSION_W};
use crate::store::View;
use send_wrapper::SendWrapper;

#[derive(Deserialize)]
struct SessionsAnswer {
    sessions: Vec<SessionView>,
}

/// An arrow's label fits the gap between two columns of the wait-for graph (about 90 px).
const EDGE_LABEL_CHARS: usize = 14;

/// Sessions drawn in the wait-for graph at most (the table lists all).
const MAX_DRAWN: usize = 80;

#[component]
pub fn Sessions() -> impl IntoView {
    let Ctx { link, .. } = ctx();
    // The locks with waiters, as a live view: what changes the wait-for graph changes it, and
    // each push reads the sessions again.
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
    let sessions = RwSignal::new(None::<Result<Vec<SessionView>, String>>);
    let busy = StoredValue::new(false);
    let again = StoredValue::new(false);
    let fetch = move || {
        fn run(
            sessions: RwSignal<Option<Result<Vec<SessionView>, String>>>,
            busy: StoredValue<bool>,
            again: StoredValue<bool>,
        ) {
            busy.set_value(true);
            spawn_local(async move {
                let answer = get_json::<SessionsAnswer>("/api/v1/sessions").await;
                sessions.set(Some(answer.map(|a| a.sessions)));
                if again.get_value() {
                    again.set_value(false);
                    run(sessions, busy, again);
                } else {
                    busy.set_value(false);
                }
            });
        }
        if busy.get_value() {
            again.set_value(true);
        } else {
            run(sessions, busy, again);
        }
    };
    Effect::new(move |_| {
        waiting.with(|s| s.seq);
        fetch();
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
    move || match sessions.get() {
        None => view! { <p class="empty">"Loading sessions…"</p> }.into_any(),
        Some(Err(e)) => view! { <p class="banner lost">{e}</p> }.into_any(),
        Some(Ok(list)) => {
            let graph = wait_for_graph(&list);
            view! {
                <section class="card">
                    <h2>"Wait-for graph"</h2>
                    {wait_for_svg(&graph, &list)}
                </section>
                <section class="card">
                    <h2>{format!("Sessions, leases and connections ({})", list.len())}</h2>
                    {session_table(list, &graph)}
                </section>
            }
            .into_any()
        }
    }
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

fn wait_for_svg(graph: &WaitForGraph, list: &[SessionView]) -> AnyView {
    if graph.edges.is_empty() {
        return view! {
            <p class="empty">"No session waits on a lock that another session holds."</p>
        }
        .into_any();
    }
    let cycles = graph
        .cycles
        .iter()
        .map(|c| {
            let names: Vec<String> = c
                .iter()
                .map(|&i| node_label(list, &graph.nodes[i].source, &graph.nodes[i].session))
                .collect();
            view! {
                <p class="banner lost deadlock">
                    "Possible deadlock: " {names.join(", ")}
                    " each wait on a lock another of them holds. (One session or connection may serve several threads, so check the clients.)"
                </p>
            }
        })
        .collect_view();
    let mut drawn = graph.clone();
    drawn.nodes.truncate(MAX_DRAWN);
    drawn
        .edges
        .retain(|e| e.from < MAX_DRAWN && e.to < MAX_DRAWN);
    let layout = wait_layout(&drawn);
    let edges = layout
        .edges
        .iter()
        .map(|a| {
            let e = &drawn.edges[a.edge];
            let path = lock_path(&e.lock);
            view! {
                <g class=if e.in_cycle { "wedge cycle" } else { "wedge" } data-lock=e.lock.clone()>
                    <path d=a.d.clone() marker-end="url(#wf-arrow)"></path>
                    <text x=a.label.0.to_string() y=a.label.1.to_string() class="t2">
                        {format::middle_ellipsis(&format::lock_label(&path), EDGE_LABEL_CHARS)}
                    </text>
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
            let class = if drawn.in_cycle(i) { "wnode cycle" } else { "wnode" };
            view! {
                <g class=class data-session=n.session.clone()>
                    <rect x=x.to_string() y=y.to_string() width=SESSION_W.to_string() height=SESSION_H.to_string() rx="6"></rect>
                    <text x=(x + 10.0).to_string() y=(y + 17.0).to_string() class="t1">
                        {format::middle_ellipsis(node_label(list, &n.source, &n.session).trim_start_matches("session "), 24)}
                    </text>
                    <text x=(x + 10.0).to_string() y=(y + 33.0).to_string() class="t2">{n.source.clone()}</text>
                </g>
            }
        })
        .collect_view();
    let (width, height) = (layout.width, layout.height);
    let more = graph.nodes.len().saturating_sub(MAX_DRAWN);
    view! {
        {cycles}
        <svg class="waitfor" viewBox=format!("0 0 {width} {height}") width=width.to_string() height=height.to_string() role="img" aria-label="wait-for graph">
            {arrow_marker("wf-arrow")}
            {edges}
            {nodes}
        </svg>
        <p class="legend">"An arrow from A to B: session A waits on a lock (named at the arrow's start) that session B holds. Holders that wait on nothing are on the right."</p>
        {(more > 0).then(|| view! { <p class="muted">{format!("{more} more sessions not drawn.")}</p> })}
    }
    .into_any()
}

fn session_table(mut list: Vec<SessionView>, graph: &WaitForGraph) -> AnyView {
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
    let in_cycle: Vec<(String, String)> = graph
        .cycles
        .iter()
        .flatten()
        .map(|&i| {
            (
                graph.nodes[i].source.clone(),
                graph.nodes[i].session.clone(),
            )
        })
        .collect();
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
                    view! {
                        <tr class:cycle=cyc id=format::session_anchor(&s.source, &s.session) data-session=s.session.clone() data-kind=s.kind.display_name()>
                            <td>{s.source.clone()}</td>
                            <td><span class="muted">{s.kind.display_name()}</span>" "<code>{s.session.clone()}</code></td>
                            <td>{state}</td>
                            {details}
                            <td>{s.timeout_ms.map(|t| format::duration(t as i64))}</td>
                            <td>{links(s.holds)}</td>
                            <td>{links(s.waits)}</td>
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
