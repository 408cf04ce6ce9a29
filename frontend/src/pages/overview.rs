//! The overview: every source and its state (and what it cannot show), counts, the root
//! blockers (who holds the most others up, `GET /api/v1/blockers`, read again as the live view
//! changes, at most every [`ROOTS_GAP`]), and one page of the locks that need a look first. Filters, search, sort and paging are the server's
//! (`GET /api/v1/events` with the lock query): the browser holds the page it shows, the totals
//! and the facet counts, never every lock. The query lives in the URL, so a link keeps the
//! filter, sort and page.

use leptos::prelude::*;
use leptos::reactive::wrappers::write::SignalSetter;
use leptos_router::hooks::{use_navigate, use_query_map};
use leptos_router::NavigateOptions;
use lockscope_model::rules::staleness;
use lockscope_model::wire::{Backend, BlockersPage, LockView, SourceView, StoreStatus};
use send_wrapper::SendWrapper;

use crate::api::{Link, Refusal, ViewStream};
use crate::dbtext;
use crate::format;
use crate::shared::{
    clock, ctx, keep_reading, when, Ago, Ctx, Left, LockLink, RootBlockers, Since,
};
use crate::store::{Only, Query, Sort, SortKey, View};

/// Rows per page.
pub const PAGE: usize = 50;

/// How long typing in the search box waits for the next key before it asks the server.
const TYPING_MS: u64 = 250;

/// The root blockers are read again after the live view changes, at most this often.
const ROOTS_GAP: std::time::Duration = std::time::Duration::from_secs(2);

#[component]
pub fn Overview() -> impl IntoView {
    let Ctx { link, .. } = ctx();
    let params = use_query_map();
    let query = Memo::new(move |_| params.with(|p| Query::from_params(|name| p.get(name))));
    let view = RwSignal::new(View::default());
    let refused = RwSignal::new(None::<Refusal>);
    // Holding the table still. Paused (the button or `p`): the rows shown are a copy taken
    // when the pause began, and the changes that arrive meanwhile are counted. While the
    // pointer is over the table the rows keep the order they had when it came (their contents
    // still update; a lock that enters goes last): nothing jumps under the cursor.
    let paused = RwSignal::new(false);
    let frozen = RwSignal::new(None::<(Vec<LockView>, u64)>);
    let hover_order = RwSignal::new(None::<Vec<String>>);
    Effect::new(
        move |_| match (paused.get(), frozen.with_untracked(Option::is_some)) {
            (true, false) => {
                frozen.set(Some(view.with_untracked(|v| (v.locks.clone(), v.changes))))
            }
            (false, true) => frozen.set(None),
            _ => {}
        },
    );
    // Another query is another table: a pause or a held order ends with it.
    Effect::new(move |_| {
        query.track();
        paused.set(false);
        hover_order.set(None);
    });
    let missed = move || {
        frozen.with(|f| {
            f.as_ref()
                .map(|(_, at)| view.with(|v| v.changes.saturating_sub(*at)))
        })
    };
    // The sources not up that were, each with when it was last seen: their locks are shown as
    // they were then, never as live (the sources' views come with every change of theirs, so
    // the rows follow a source going down and back without their own records changing).
    let down = Memo::new(move |_| {
        view.with(|v| {
            v.sources
                .iter()
                .filter_map(|s| Some((s.name.clone(), s.lock_mark()?)))
                .collect::<Vec<_>>()
        })
    });
    let rows = move || {
        if let Some(locks) = frozen.with(|f| f.as_ref().map(|(locks, _)| locks.clone())) {
            return locks;
        }
        let mut locks = view.with(|v| v.locks.clone());
        hover_order.with(|order| {
            if let Some(order) = order {
                let place = |id: &str| order.iter().position(|o| o == id).unwrap_or(usize::MAX);
                locks.sort_by_key(|l| place(&l.id));
            }
        });
        locks
    };
    let keys = window_event_listener(leptos::ev::keydown, move |ev| {
        if !crate::shared::typed_in_field(&ev) && ev.key() == "p" {
            paused.update(|p| *p = !*p);
        }
    });
    on_cleanup(move || keys.remove());
    // The open stream; replacing it closes the old one.
    let stream = StoredValue::new(None::<SendWrapper<ViewStream>>);
    // Pages visited with "next" in this query, for "previous": (cursor, rows before).
    let back = StoredValue::new(Vec::<(Option<String>, usize)>::new());
    let shown_query = StoredValue::new(None::<Query>);
    Effect::new(move |_| {
        let q = query.get();
        // Another filter or sort (the header's link, the browser's back and forward): the pages
        // behind belong to another query; on a first page nothing is behind.
        if shown_query.with_value(|s| s.as_ref() != Some(&q.first_page())) || q.cursor.is_none() {
            back.set_value(Vec::new());
        } else {
            back.update_value(|b| {
                if let Some(i) = b.iter().position(|(c, _)| *c == q.cursor) {
                    b.truncate(i);
                }
            });
        }
        shown_query.set_value(Some(q.first_page()));
        // The page shown stays until the new view's snapshot replaces it (no blank flash).
        view.update(|v| {
            v.sort = q.sort;
            v.fresh = false;
        });
        refused.set(None);
        let opened = ViewStream::open(q.server(PAGE), view, link, refused);
        stream.set_value(Some(SendWrapper::new(opened)));
    });
    on_cleanup(move || stream.set_value(None));
    let navigate = use_navigate();
    let go = move |q: Query, replace: bool| {
        navigate(
            &format!("/?{}", q.url()),
            NavigateOptions {
                replace,
                scroll: false,
                ..NavigateOptions::default()
            },
        );
    };
    let change = {
        let go = go.clone();
        move |apply: Box<dyn FnOnce(&mut Query)>| {
            let mut q = query.get_untracked().first_page();
            apply(&mut q);
            back.set_value(Vec::new());
            go(q, false);
        }
    };
    let set_only = {
        let change = change.clone();
        move |only: Only| change(Box::new(move |q| q.only = only))
    };
    let set_sort = SignalSetter::map({
        let change = change.clone();
        move |sort: Sort| change(Box::new(move |q| q.sort = sort))
    });
    let sort = Signal::derive(move || query.with(|q| q.sort));
    let facets = move || view.with(|v| v.facets.clone());
    let count =
        move |state: &'static str| Signal::derive(move || view.with(|v| v.facets.state(state)));
    let locks =
        Signal::derive(move || view.with(|v| v.facets.state("held") + v.facets.state("free")));
    // No count is shown that lockscope did not give: before the first page, and while the
    // connection is lost (the last numbers may be wrong by now).
    let missing = Signal::derive(move || {
        if matches!(link.get(), Link::Lost { .. }) {
            Some("no data: lockscope is not reachable")
        } else if !view.with(|v| v.loaded) {
            Some("no data yet: waiting for lockscope's first answer")
        } else {
            None
        }
    });
    let pager = {
        let go = go.clone();
        move || {
            let (loaded, total, shown, next) = view.with(|v| {
                // A page of the query before has the query before's cursor.
                let next = v.next.clone().filter(|_| v.fresh);
                (v.loaded, v.total, v.locks.len(), next)
            });
            if !loaded {
                return ().into_any();
            }
            if total == 0 {
                return view! { <p class="empty">"No lock matches."</p> }.into_any();
            }
            let q = query.get();
            let from = q.from;
            let has_back = !back.with_value(|b| b.is_empty()) || q.cursor.is_some();
            let (prev, first, forward) = (go.clone(), go.clone(), go.clone());
            let here = (q.cursor.clone(), from);
            let q_prev = q.clone();
            let q_next = q.clone();
            view! {
                <nav class="pager">
                    <button
                        disabled=!has_back
                        on:click=move |_| {
                            let mut target = q_prev.first_page();
                            if let Some((cursor, from)) = back.try_update_value(Vec::pop).flatten() {
                                target.cursor = cursor;
                                target.from = from;
                            }
                            prev(target, false);
                        }
                    >
                        "‹ previous"
                    </button>
                    <span class="range">
                        {format!("{}–{} of {total}", (from + 1).min(from + shown), from + shown)}
                    </span>
                    <button
                        disabled=next.is_none()
                        on:click=move |_| {
                            let Some(cursor) = next.clone() else { return };
                            back.update_value(|b| b.push(here.clone()));
                            forward(Query { cursor: Some(cursor), from: from + shown, ..q_next.clone() }, false);
                        }
                    >
                        "next ›"
                    </button>
                    {(from > 0).then(|| {
                        let q = q.clone();
                        view! {
                            <button class="linkish" on:click=move |_| {
                                back.set_value(Vec::new());
                                first(q.first_page(), false);
                            }>"first page"</button>
                        }
                    })}
                </nav>
            }
            .into_any()
        }
    };
    view! {
        <section class="sources">
            {move || view.with(|v| v.sources.iter().cloned().map(source_card).collect_view())}
            <StoreCard sources=Memo::new(move |_| view.with(|v| v.sources.clone()))/>
        </section>
        <section class="totals">
            <Total class="locks" label="locks" value=locks on_click={let f = set_only.clone(); move || f(Only::All)} missing=missing/>
            <Total class="held" label="held" value=count("held") on_click={let f = set_only.clone(); move || f(Only::Held)} missing=missing/>
            <Total class="waiters" label="with waiters" value=count("waiting") on_click={let f = set_only.clone(); move || f(Only::Waiting)} missing=missing/>
            <Total class="herds" label="herds" value=count("herd") on_click={let f = set_only.clone(); move || f(Only::Herd)} missing=missing/>
            <Total class="stale" label="stale" value=count("stale") on_click={let f = set_only.clone(); move || f(Only::Stale)} missing=missing/>
            <Total class="stuck" label="stuck" value=count("stuck") on_click={let f = set_only.clone(); move || f(Only::Stuck)} missing=missing/>
        </section>
        <RootsCard view=view/>
        <Filters query=query facets=Signal::derive(facets) sources=Signal::derive(move || view.with(|v| v.sources.iter().map(|s| s.name.clone()).collect())) change=change.clone()/>
        <p class="pausebar" role="status" aria-live="polite">
            <button class="pause" aria-pressed=move || paused.get().to_string() title="Hold the table still (key: p)"
                on:click=move |_| paused.update(|p| *p = !*p)>
                {move || if paused.get() { "▶ Resume" } else { "❚❚ Pause" }}
            </button>
            {move || missed().map(|n| view! {
                <span class="paused-note" data-changes=n.to_string()>
                    {format!("Paused: {n} change{} since", if n == 1 { "" } else { "s" })}
                    " — " <button class="linkish" on:click=move |_| paused.set(false)>"resume"</button>
                </span>
            })}
            {move || (hover_order.with(Option::is_some) && !paused.get()).then(|| view! {
                <span class="muted">"Rows keep their order while the pointer is over the table."</span>
            })}
        </p>
        <p class="sortnote">
            {move || {
                if sort.get().key == SortKey::Attention && !sort.get().reversed {
                    view! { <span class="muted">"Sorted by the longest wait or hold first. Click a column to sort by it."</span> }
                        .into_any()
                } else {
                    view! {
                        <button class="linkish" on:click=move |_| set_sort.set(Sort::default())>
                            "Sort by the longest wait or hold first"
                        </button>
                    }
                        .into_any()
                }
            }}
        </p>
        {move || refused.get().map(|r| {
            let expired = r.parameter.as_deref() == Some("cursor");
            let go = go.clone();
            view! {
                <p class="banner refused" role="alert">
                    {format!("lockscope cannot show this page: {}", r.message)}
                    {r.parameter.map(|p| format!(" (parameter {p})"))}
                    " "
                    {expired.then(|| view! {
                        <button class="linkish" on:click=move |_| {
                            back.set_value(Vec::new());
                            go(query.get_untracked().first_page(), true);
                        }>"Go to the first page"</button>
                    })}
                </p>
            }
        })}
        <Show
            when=move || view.with(|v| v.loaded)
            fallback=move || (refused.with(Option::is_none)).then(|| view! { <p class="empty">"Waiting for the first page from lockscope…"</p> })
        >
            <table class="locks" class:loading=move || view.with(|v| !v.fresh) aria-busy=move || view.with(|v| (!v.fresh).to_string())
                class:frozen=move || frozen.with(Option::is_some)
                on:pointerenter=move |_| hover_order.set(Some(view.with_untracked(|v| v.locks.iter().map(|l| l.id.clone()).collect())))
                on:pointerleave=move |_| hover_order.set(None)>
                <thead>
                    <tr>
                        <SortHeader label="Lock" key=SortKey::Path sort=sort set=set_sort/>
                        <SortHeader label="Source" key=SortKey::Source sort=sort set=set_sort/>
                        <SortHeader label="Recipe" key=SortKey::Recipe sort=sort set=set_sort/>
                        <th>"Holder"</th>
                        <SortHeader label="Held" key=SortKey::Held sort=sort set=set_sort/>
                        <SortHeader label="Waiters" key=SortKey::Waiters sort=sort set=set_sort/>
                        <SortHeader label="Longest wait" key=SortKey::Wait sort=sort set=set_sort/>
                        <SortHeader label="Fan-out" key=SortKey::Watchers sort=sort set=set_sort/>
                        <th>"TTL"</th>
                        <th>"Flags"</th>
                    </tr>
                </thead>
                <tbody>
                    <For
                        each=rows
                        key=|l: &LockView| (l.id.clone(), l.changed_ms, l.holders.len(), l.waiters.len(), l.acquisitions, l.releases, l.watchers, l.child_watchers, l.herd, l.expires_at_ms, l.stale.len())
                        children=move |l| lock_row(l, ctx().stale_hold_ms(), ctx().stuck(), down)
                    />
                </tbody>
            </table>
            {pager.clone()}
        </Show>
    }
}

/// The root blockers card: the first few of `GET /api/v1/blockers` (one small request), read
/// when the page opens and again as its live view changes (at most every [`ROOTS_GAP`]);
/// nothing while no one holds another up.
#[component]
fn RootsCard(view: RwSignal<View>) -> impl IntoView {
    let roots = RwSignal::new(None::<Result<BlockersPage, String>>);
    keep_reading(
        || format!("/api/v1/blockers?limit={}", crate::blockers::CARD),
        move || {
            view.with(|v| v.seq);
        },
        roots,
        ROOTS_GAP,
    );
    move || {
        match roots.get() {
        Some(Ok(page)) if !page.blockers.is_empty() => {
            let more = (page.total as usize).saturating_sub(page.blockers.len());
            Some(view! {
                <section class="card roots-card" data-total=page.total.to_string()>
                    <h2>
                        "Root blockers"
                        <span class="muted small" title="Participants that hold a lock others wait on and wait on nothing themselves, the most held up first (through any number of hops)">
                            {format!(" · {} in all, the most holding up first", page.total)}
                        </span>
                    </h2>
                    <RootBlockers list=page.blockers/>
                    {(more > 0).then(|| view! {
                        <p class="muted small"><a href=crate::api::at("/sessions")>{format!("{more} more on the sessions page")}</a></p>
                    })}
                </section>
            }
            .into_any())
        }
        Some(Err(e)) if !crate::api::is_token_refusal(&e) => Some(
            view! { <p class="muted small roots-error">{format!("Root blockers: lockscope did not answer ({e}).")}</p> }
                .into_any(),
        ),
        _ => None,
    }
    }
}

/// The history store and the replica writing it (`GET /api/v1/store`); nothing without a store.
/// Read again when the sources' views change (the UI never polls: while nothing changes, the
/// page makes no request).
#[component]
fn StoreCard(sources: Memo<Vec<SourceView>>) -> impl IntoView {
    let status = RwSignal::new(None::<StoreStatus>);
    Effect::new(move |_| {
        sources.track();
        leptos::task::spawn_local(async move {
            if let Ok(s) = crate::api::get_json::<StoreStatus>("/api/v1/store").await {
                if !status.is_disposed() {
                    status.set(Some(s));
                }
            }
        });
    });
    move || {
        let s = status.get().filter(|s| s.backend != "none")?;
        let (state, class) = match (s.connected, &s.error) {
            (true, None) => ("up", "up"),
            (true, Some(_)) => ("degraded", "syncing"),
            (false, _) => ("down", "down"),
        };
        let writer = s.writer.clone().map(|w| {
            let here = w.replica == s.replica;
            view! {
                <p class="writer">
                    "history writer: replica " <strong>{w.replica}</strong>
                    {here.then_some(" (this one)")}
                    " since " {crate::format::instant_utc(w.since_ms)}
                </p>
            }
        });
        Some(view! {
            <article class=format!("source history {class}") data-source="history-store">
                <header>
                    <span class="dot"></span>
                    <strong>"history"</strong>
                    <span class="muted">{s.backend.clone()}</span>
                    <span class=format!("state {class}")>{state}</span>
                </header>
                {writer}
                <p class="muted">
                    {format!("replica {}", s.replica)}
                    {(s.queue_depth > 0).then(|| format!(" · {} events waiting", s.queue_depth))}
                    {(s.events_dropped > 0).then(|| format!(" · {} dropped", s.events_dropped))}
                </p>
                {s.error.map(|e| view! { <p class="error">{e}</p> })}
            </article>
        })
    }
}

fn source_card(s: SourceView) -> impl IntoView {
    let (state, class) = match (s.up, s.synced) {
        (true, true) => ("up", "up"),
        (true, false) => ("syncing", "syncing"),
        (false, _) => ("down", "down"),
    };
    let utc = ctx().utc;
    let last_seen = s.lock_mark().map(|at| {
        view! {
            <p class="last-seen" title=move || format!("Its locks are shown as lockscope last saw them, at {}", when(utc.get(), at))>
                {move || format!("locks as last seen at {}", clock(utc.get(), at))}
                " (" <Ago since_ms=at/> " ago)"
            </p>
        }
    });
    let backend = backend_name(s.backend);
    view! {
        <article class=format!("source {class}") data-source=s.name.clone()>
            <header>
                <span class="dot"></span>
                <strong>{s.name.clone()}</strong>
                <span class="muted">{backend}</span>
                <span class=format!("state {class}")>{state}</span>
            </header>
            <p>
                {format!("{} locks", s.locks)}
                {(s.nodes > 0).then(|| format!(" · {} nodes", s.nodes))}
                {if dbtext::is_database(s.backend) {
                    // A database can only be polled: its data is as old as the last round.
                    s.last_sync_ms.map(|at| view! { " · polled " <Ago since_ms=at/> " ago" }).into_any()
                } else if s.up && s.synced {
                    // Watched: every change arrives as it happens; the full read is only the start.
                    let title = s.last_sync_ms.map(|at| format!("last full read {}", format::instant_utc(at))).unwrap_or_default();
                    // How long it has been quiet: the age of the last lock change it reported.
                    let last = match s.last_change_ms {
                        Some(at) => view! {
                            <span class="last-change" title=format!("last lock change {}", format::instant_utc(at))>
                                "last change " <Ago since_ms=at/> " ago"
                            </span>
                        }.into_any(),
                        None => view! { <span class="last-change">"no lock change since start"</span> }.into_any(),
                    };
                    view! { " · " <span class="live-watch" title=title>"live (watching)"</span> " · " {last} }.into_any()
                } else {
                    s.last_sync_ms.map(|at| view! { " · last read " <Ago since_ms=at/> " ago" }).into_any()
                }}
            </p>
            {s.lagging.then(|| view! {
                <p class="lagging" title="Changes arrive faster than lockscope reads them: it re-reads the source to catch up">
                    <span class="badge lagging">"catching up"</span>
                </p>
            })}
            {s.error.map(|e| view! { <p class="error">{e}</p> })}
            {last_seen}
            {(!s.limits.is_empty()).then(|| {
                let all = s.limits.join("\n");
                let n = s.limits.len();
                view! {
                    <details class="limits">
                        <summary title=all>{format!("cannot show ({n})")}</summary>
                        <ul>{s.limits.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}</ul>
                    </details>
                }
            })}
            {(s.unrecognised > 0).then(|| {
                let n = s.unrecognised;
                let shown = s.unrecognised_sample.len();
                view! {
                    <details class="unrecognised" data-unrecognised=n.to_string()>
                        <summary title="Keys (nodes) under the watched patterns (roots) that no recipe reads as a lock: not shown as locks, not hidden">
                            {format!("{n} not understood as locks")}
                        </summary>
                        <p class="hint">{if (shown as u64) < n {
                            format!("{shown} of them:")
                        } else {
                            String::new()
                        }}</p>
                        <ul>{s.unrecognised_sample.into_iter().map(|k| {
                            let size = k.size.map(|n| format!(", {n}")).unwrap_or_default();
                            let ttl = k.ttl_ms.map(|t| format!(", TTL {}", format::duration(t))).unwrap_or_default();
                            let head = (!k.head.is_empty()).then(|| view! { <code class="head">{k.head.clone()}</code> });
                            view! {
                                <li title=k.why.clone()>
                                    <code>{k.key.clone()}</code>
                                    {format!(" ({}{size}{ttl}) ", k.kind)}
                                    {head}
                                </li>
                            }
                        }).collect_view()}</ul>
                    </details>
                }
            })}
        </article>
    }
}

pub fn backend_name(b: Backend) -> &'static str {
    b.display_name()
}

/// A count card: its number, or "—" with the reason while lockscope has given none (never a
/// zero that only means "no data").
#[component]
fn Total(
    class: &'static str,
    label: &'static str,
    value: Signal<u64>,
    on_click: impl Fn() + Send + Sync + 'static,
    /// Why there is no number now (`None`: the number is current).
    missing: Signal<Option<&'static str>>,
) -> impl IntoView {
    view! {
        <button class=format!("total {class}") on:click=move |_| on_click()
            title=move || missing.get().map_or_else(|| format!("Show {label}"), |why| why.to_string())>
            <span class="value" class:no-data=move || missing.get().is_some()>
                {move || match missing.get() {
                    Some(_) => "—".to_string(),
                    None => value.get().to_string(),
                }}
            </span>
            <span class="label">{label}</span>
            {move || missing.get().map(|why| view! { <span class="why">{why}</span> })}
        </button>
    }
}

#[component]
fn Filters(
    query: Memo<Query>,
    facets: Signal<crate::store::Facets>,
    sources: Signal<Vec<String>>,
    change: impl Fn(Box<dyn FnOnce(&mut Query)>) + Clone + Send + Sync + 'static,
) -> impl IntoView {
    let none_if_empty = |v: String| (!v.is_empty()).then_some(v);
    // What is typed in the search box; asked of the server once typing pauses.
    let typed = RwSignal::new(query.get_untracked().text);
    let typing = StoredValue::new(0u64);
    Effect::new(move |_| {
        let text = query.with(|q| q.text.clone());
        if typing.get_value() == 0 && typed.get_untracked().trim() != text {
            typed.set(text);
        }
    });
    // A menu's choices: the facet's values (with their counts), and the current choice even
    // when nothing matches it now.
    let options = move |values: Vec<(String, u64)>, current: Option<String>| {
        let mut values = values;
        if let Some(c) = current.filter(|c| !values.iter().any(|(v, _)| v == c)) {
            values.push((c, 0));
        }
        values
            .into_iter()
            .map(|(v, n)| view! { <option value=v.clone()>{format!("{v} ({n})")}</option> })
            .collect_view()
    };
    let (c1, c2, c3, c4, c5) = (
        change.clone(),
        change.clone(),
        change.clone(),
        change.clone(),
        change,
    );
    view! {
        <form class="filters" on:submit=|ev| ev.prevent_default()>
            <label>
                "Source "
                <select
                    name="source"
                    on:change=move |ev| {
                        let v = none_if_empty(event_target_value(&ev));
                        c1(Box::new(move |q| q.source = v));
                    }
                    prop:value=move || query.with(|q| q.source.clone().unwrap_or_default())
                >
                    <option value="">"all"</option>
                    {move || {
                        let counts = facets.with(|f| f.source.clone());
                        let mut names = sources.get();
                        names.extend(counts.keys().filter(|k| !names.contains(k)).cloned().collect::<Vec<_>>());
                        let values = names.into_iter().map(|n| { let c = counts.get(&n).copied().unwrap_or(0); (n, c) }).collect();
                        options(values, query.with(|q| q.source.clone()))
                    }}
                </select>
            </label>
            <label>
                "Backend "
                <select
                    name="backend"
                    on:change=move |ev| {
                        let v = Backend::parse(&event_target_value(&ev));
                        c2(Box::new(move |q| q.backend = v));
                    }
                    prop:value=move || query.with(|q| q.backend.map(|b| b.as_str().to_string()).unwrap_or_default())
                >
                    <option value="">"all"</option>
                    {move || {
                        let counts = facets.with(|f| f.backend.clone());
                        Backend::ALL
                            .into_iter()
                            .map(|b| {
                                let n = counts.get(b.as_str()).copied().unwrap_or(0);
                                view! { <option value=b.as_str()>{format!("{} ({n})", b.display_name())}</option> }
                            })
                            .collect_view()
                    }}
                </select>
            </label>
            <label>
                "Recipe "
                <select
                    name="recipe"
                    on:change=move |ev| {
                        let v = none_if_empty(event_target_value(&ev));
                        c3(Box::new(move |q| q.recipe = v));
                    }
                    prop:value=move || query.with(|q| q.recipe.clone().unwrap_or_default())
                >
                    <option value="">"all"</option>
                    {move || {
                        let values = facets.with(|f| f.recipe.iter().map(|(k, v)| (k.clone(), *v)).collect());
                        options(values, query.with(|q| q.recipe.clone()))
                    }}
                </select>
            </label>
            <label>
                "Show "
                <select
                    name="only"
                    on:change=move |ev| {
                        let v = event_target_value(&ev);
                        let only = Only::ALL
                            .iter()
                            .find(|(_, name, _)| *name == v)
                            .map_or(Only::All, |(o, ..)| *o);
                        c4(Box::new(move |q| q.only = only));
                    }
                    prop:value=move || query.with(|q| q.only.name())
                >
                    {Only::ALL.iter().map(|(_, name, _)| view! { <option value=*name>{*name}</option> }).collect_view()}
                </select>
            </label>
            <input
                type="search"
                name="q"
                placeholder="Filter by path or session…"
                on:input=move |ev| {
                    let v = event_target_value(&ev);
                    typed.set(v.clone());
                    let ticket = typing.get_value() + 1;
                    typing.set_value(ticket);
                    let c5 = c5.clone();
                    set_timeout(
                        move || {
                            // The page may have gone meanwhile.
                            if typing.try_get_value() != Some(ticket) {
                                return;
                            }
                            typing.set_value(0);
                            if query.with_untracked(|q| q.text.trim() != v.trim()) {
                                c5(Box::new(move |q| q.text = v));
                            }
                        },
                        std::time::Duration::from_millis(TYPING_MS),
                    );
                }
                prop:value=move || typed.get()
            />
        </form>
    }
}

#[component]
fn SortHeader(
    label: &'static str,
    key: SortKey,
    sort: Signal<Sort>,
    set: SignalSetter<Sort>,
) -> impl IntoView {
    let arrow = move || {
        let s = sort.get();
        if s.key != key {
            ""
        } else if s.reversed {
            " ▴"
        } else {
            " ▾"
        }
    };
    view! {
        <th aria-sort=move || {
            let s = sort.get();
            if s.key != key { "none" } else if s.order() == "desc" { "descending" } else { "ascending" }
        }>
            <button
                class="sort"
                on:click=move |_| {
                    let s = sort.get_untracked();
                    set.set(if s.key == key {
                        Sort { key, reversed: !s.reversed }
                    } else {
                        Sort { key, reversed: false }
                    });
                }
            >
                {label}
                {arrow}
            </button>
        </th>
    }
}

fn lock_row(
    l: LockView,
    stale_hold_ms: i64,
    stuck_limits: lockscope_model::wire::StuckThresholds,
    down: Memo<Vec<(String, i64)>>,
) -> impl IntoView {
    let now = ctx().now;
    let utc = ctx().utc;
    // While its source is not up: when the lock was last seen (the page's sources are live;
    // the lock's own mark is what the server said when it sent the row).
    let source_name = l.source.clone();
    let last_seen =
        move || down.with(|d| d.iter().find(|(s, _)| *s == source_name).map(|(_, at)| *at));
    let seen_row = last_seen.clone();
    let holder = l.holders.first().cloned();
    let more_holders = l.holders.len().saturating_sub(1);
    let oldest_hold = l.holders.iter().map(|h| h.since_ms).min();
    let oldest_wait = l.waiters.iter().map(|w| w.since_ms).min();
    let fan_out = l.watchers + l.child_watchers;
    let herd = l.herd;
    let database = dbtext::is_database(l.backend);
    let backend = l.backend;
    let flags = l.flags.clone();
    let lock_for_stale = l.clone();
    let stale = move || staleness(&lock_for_stale, now.get(), stale_hold_ms);
    let stale_row = stale.clone();
    let lock_for_stuck = l.clone();
    // Judged again as the clock ticks: a wait passes its limit without any change to the lock.
    let stuck = Memo::new(move |_| {
        lockscope_model::stuck::judge(&lock_for_stuck, now.get(), &stuck_limits)
    });
    let stuck_level = move || stuck.with(|s| s.as_ref().map(|s| s.level.as_str()));
    view! {
        <tr class:herd=herd class:stale=move || stale_row().is_some()
            class:source-down=move || seen_row().is_some()
            class:stuck-warning=move || stuck_level() == Some("warning")
            class:stuck-critical=move || stuck_level() == Some("critical")
            data-stuck=move || stuck_level().unwrap_or("")
            data-lock=l.id.clone()>
            <td class="path"><LockLink id=l.id.clone() path=l.path.clone()/></td>
            <td data-label="Source">
                {l.source.clone()}
                {move || last_seen().map(|at| view! {
                    " "
                    <span class="badge source-down" title=format!("The source is not up: this lock is shown as lockscope last saw it, at {}; it may have changed since", when(utc.get(), at))>
                        {format!("source down · last seen at {}", clock(utc.get(), at))}
                    </span>
                })}
            </td>
            <td data-label="Recipe"><span class="recipe">{l.recipe.clone()}</span></td>
            <td class="holder" data-label="Holder">
                {holder.map(|h| {
                    let reentry = h.reentrancy.filter(|n| *n > 1).map(|n| format!(" ×{n}"));
                    let mode = h.mode.map(|m| format!(" ({m:?})").to_lowercase());
                    // A database holder is a connection, or a lock-table row's owner (no connection).
                    let session = if !database {
                        h.session.clone()
                    } else if h.session.is_empty() {
                        h.node.clone()
                    } else {
                        format!("conn {}", h.session)
                    };
                    // Who holds, in the lock's own words or by its client, where the source
                    // tells; the session or connection id otherwise (and on hover).
                    // (A ZooKeeper session id written in decimal as the node's data is the session:
                    // shown once, in hex.)
                    let (who, title) = match format::identity_label(h.identity.as_deref(), &h.session) {
                        Some(identity) => (identity, format!("{session} · {}", h.node)),
                        None => (session, h.node.clone()),
                    };
                    view! {
                        <code title=title>{format::middle_ellipsis(&who, 22)}</code>
                        {mode}
                        {reentry}
                        {(more_holders > 0).then(|| format!(" +{more_holders}"))}
                    }
                })}
            </td>
            <td data-label="Held">{oldest_hold.map(|at| view! { <Since since_ms=at/> })}</td>
            <td class="num" data-label="Waiters">{l.waiters.len()}</td>
            <td data-label="Longest wait">{oldest_wait.map(|at| view! { <Since since_ms=at/> })}</td>
            <td class="num" data-label="Fan-out">
                {fan_out}
                {herd.then(|| view! { <span class="badge herd" title="More than one session wakes when the holder goes">"herd"</span> })}
            </td>
            <td data-label="TTL">{l.expires_at_ms.map(|at| view! { <Left at_ms=at/> })}</td>
            <td class="flags" data-label="Flags">
                {move || stuck.get().map(|s| {
                    let title = format!(
                        "{} {} since {} — past the {} limit",
                        if s.kind == lockscope_model::wire::StuckKind::Wait { "A waiter has waited" } else { "The holder has held" },
                        format::duration(s.for_ms),
                        format::instant_utc(s.since_ms),
                        s.level.as_str()
                    );
                    view! { <span class=format!("badge stuck {}", s.level.as_str()) title=title>{crate::shared::stuck_text(&s)}</span> }
                })}
                {move || stale().map(|s| view! { <span class="badge stale" title=s.describe()>"stale"</span> })}
                {flags.into_iter().map(|f| {
                    if database {
                        let title = dbtext::flag_explanation(backend, &f).unwrap_or_default();
                        view! { <span class="badge flag" data-flag=f.clone() title=title>{dbtext::flag_label(&f)}</span> }.into_any()
                    } else {
                        view! { <span class="badge flag">{f}</span> }.into_any()
                    }
                }).collect_view()}
            </td>
        </tr>
    }
}
