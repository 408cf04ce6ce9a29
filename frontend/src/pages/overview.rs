//! The overview: every source and its state (and what it cannot show), totals, and the locks that need a look first,
//! filtered, sorted and paged on the client from the live store (10,000 locks render as pages
//! of [`PAGE`] rows).

use leptos::prelude::*;
use lockscope_model::rules::staleness;
use lockscope_model::wire::{Backend, LockView, SourceView};

use crate::app::{ctx, Ago, Ctx, Left, LockLink};
use crate::dbtext;
use crate::format;
use crate::store::{select, Filter, Only, Sort, SortKey};

pub const PAGE: usize = 50;

#[component]
pub fn Overview() -> impl IntoView {
    let ctx @ Ctx { store, now, .. } = ctx();
    let filter = RwSignal::new(Filter::default());
    let sort = RwSignal::new(Sort::default());
    let page = RwSignal::new(0usize);
    // The selection re-runs on store changes, filter and sort; on the clock only when the
    // "stale" filter depends on it.
    let rows = Memo::new(move |_| {
        let f = filter.get();
        let s = sort.get();
        let t = if f.only == Only::Stale {
            now.get()
        } else {
            now.get_untracked()
        };
        let stale = ctx.stale_hold_ms();
        store.with(|st| {
            let all = select(st, &f, s, t, stale);
            let total = all.len();
            let pages = total.div_ceil(PAGE).max(1);
            let p = page.get().min(pages - 1);
            let shown: Vec<LockView> = all.into_iter().skip(p * PAGE).take(PAGE).cloned().collect();
            (total, p, pages, shown)
        })
    });
    let totals = Memo::new(move |_| store.with(|s| s.totals(now.get(), ctx.stale_hold_ms())));
    let set_only = move |only: Only| {
        filter.update(|f| f.only = only);
        page.set(0);
    };
    view! {
        <section class="sources">
            {move || store.with(|s| s.sources.iter().cloned().map(source_card).collect_view())}
        </section>
        <section class="totals">
            <Total label="locks" value=Signal::derive(move || totals.get().locks) on_click=move || set_only(Only::All)/>
            <Total label="held" value=Signal::derive(move || totals.get().held) on_click=move || set_only(Only::Held)/>
            <Total label="waiters" value=Signal::derive(move || totals.get().waiters) on_click=move || set_only(Only::Waiting)/>
            <Total label="herds" value=Signal::derive(move || totals.get().herds) on_click=move || set_only(Only::Herd)/>
            <Total label="stale" value=Signal::derive(move || totals.get().stale) on_click=move || set_only(Only::Stale)/>
        </section>
        <Filters filter=filter page=page/>
        <p class="sortnote">
            {move || {
                if sort.get().key == SortKey::Attention {
                    view! { <span class="muted">"Sorted by the longest wait or hold first. Click a column to sort by it."</span> }
                        .into_any()
                } else {
                    view! {
                        <button class="linkish" on:click=move |_| sort.set(Sort::default())>
                            "Sort by the longest wait or hold first"
                        </button>
                    }
                        .into_any()
                }
            }}
        </p>
        <Show
            when=move || store.with(|s| s.loaded)
            fallback=|| view! { <p class="empty">"Waiting for the first snapshot from lockscope…"</p> }
        >
            <table class="locks">
                <thead>
                    <tr>
                        <SortHeader label="Lock" key=SortKey::Path sort=sort/>
                        <SortHeader label="Source" key=SortKey::Source sort=sort/>
                        <SortHeader label="Recipe" key=SortKey::Recipe sort=sort/>
                        <th>"Holder"</th>
                        <SortHeader label="Held" key=SortKey::Held sort=sort/>
                        <SortHeader label="Waiters" key=SortKey::Waiters sort=sort/>
                        <SortHeader label="Longest wait" key=SortKey::Wait sort=sort/>
                        <SortHeader label="Fan-out" key=SortKey::Watchers sort=sort/>
                        <th>"TTL"</th>
                        <th>"Flags"</th>
                    </tr>
                </thead>
                <tbody>
                    {move || {
                        let stale_hold = ctx.stale_hold_ms();
                        rows.get().3.into_iter().map(|l| lock_row(l, stale_hold)).collect_view()
                    }}
                </tbody>
            </table>
            {move || {
                let (total, p, pages, shown) = rows.get();
                if total == 0 {
                    return view! { <p class="empty">"No lock matches."</p> }.into_any();
                }
                let first = p * PAGE + 1;
                let last = p * PAGE + shown.len();
                view! {
                    <nav class="pager">
                        <button disabled={p == 0} on:click=move |_| page.set(p.saturating_sub(1))>"‹ previous"</button>
                        <span class="range">{format!("{first}–{last} of {total}")}</span>
                        <button disabled={p + 1 >= pages} on:click=move |_| page.set(p + 1)>"next ›"</button>
                    </nav>
                }
                .into_any()
            }}
        </Show>
    }
}

fn source_card(s: SourceView) -> impl IntoView {
    let (state, class) = match (s.up, s.synced) {
        (true, true) => ("up", "up"),
        (true, false) => ("syncing", "syncing"),
        (false, _) => ("down", "down"),
    };
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
                {s.last_sync_ms.map(|at| view! { " · synced " <Ago since_ms=at/> " ago" })}
            </p>
            {s.lagging.then(|| view! {
                <p class="lagging" title="Changes arrive faster than lockscope reads them: it re-reads the source to catch up">
                    <span class="badge lagging">"catching up"</span>
                </p>
            })}
            {s.error.map(|e| view! { <p class="error">{e}</p> })}
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
        </article>
    }
}

pub fn backend_name(b: Backend) -> &'static str {
    b.display_name()
}

#[component]
fn Total(
    label: &'static str,
    value: Signal<usize>,
    on_click: impl Fn() + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <button class=format!("total {label}") on:click=move |_| on_click() title=format!("Show {label}")>
            <span class="value">{move || value.get()}</span>
            <span class="label">{label}</span>
        </button>
    }
}

#[component]
fn Filters(filter: RwSignal<Filter>, page: RwSignal<usize>) -> impl IntoView {
    let Ctx { store, .. } = ctx();
    let change = move |apply: Box<dyn FnOnce(&mut Filter)>| {
        filter.update(|f| apply(f));
        page.set(0);
    };
    let none_if_empty = |v: String| (!v.is_empty()).then_some(v);
    view! {
        <form class="filters" on:submit=|ev| ev.prevent_default()>
            <label>
                "Source "
                <select
                    name="source"
                    on:change=move |ev| {
                        let v = none_if_empty(event_target_value(&ev));
                        change(Box::new(move |f| f.source = v));
                    }
                    prop:value=move || filter.with(|f| f.source.clone().unwrap_or_default())
                >
                    <option value="">"all"</option>
                    {move || store.with(|s| {
                        s.sources
                            .iter()
                            .map(|src| view! { <option value=src.name.clone()>{src.name.clone()}</option> })
                            .collect_view()
                    })}
                </select>
            </label>
            <label>
                "Backend "
                <select
                    name="backend"
                    on:change=move |ev| {
                        let v = Backend::parse(&event_target_value(&ev));
                        change(Box::new(move |f| f.backend = v));
                    }
                >
                    <option value="">"all"</option>
                    {Backend::ALL
                        .into_iter()
                        .map(|b| view! { <option value=b.as_str()>{b.display_name()}</option> })
                        .collect_view()}
                </select>
            </label>
            <label>
                "Recipe "
                <select
                    name="recipe"
                    on:change=move |ev| {
                        let v = none_if_empty(event_target_value(&ev));
                        change(Box::new(move |f| f.recipe = v));
                    }
                    prop:value=move || filter.with(|f| f.recipe.clone().unwrap_or_default())
                >
                    <option value="">"all"</option>
                    {move || store.with(|s| {
                        s.recipes()
                            .into_iter()
                            .map(|r| view! { <option value=r.clone()>{r.clone()}</option> })
                            .collect_view()
                    })}
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
                            .find(|(_, name)| *name == v)
                            .map_or(Only::All, |(o, _)| *o);
                        change(Box::new(move |f| f.only = only));
                    }
                    prop:value=move || {
                        let only = filter.with(|f| f.only);
                        Only::ALL.iter().find(|(o, _)| *o == only).map_or("all", |(_, n)| *n)
                    }
                >
                    {Only::ALL.iter().map(|(_, name)| view! { <option value=*name>{*name}</option> }).collect_view()}
                </select>
            </label>
            <input
                type="search"
                name="q"
                placeholder="Filter by path or session…"
                on:input=move |ev| {
                    let v = event_target_value(&ev);
                    change(Box::new(move |f| f.text = v));
                }
                prop:value=move || filter.with(|f| f.text.clone())
            />
        </form>
    }
}

#[component]
fn SortHeader(label: &'static str, key: SortKey, sort: RwSignal<Sort>) -> impl IntoView {
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
        <th aria-sort=move || if sort.get().key == key { "descending" } else { "none" }>
            <button
                class="sort"
                on:click=move |_| {
                    sort.update(|s| {
                        if s.key == key {
                            s.reversed = !s.reversed;
                        } else {
                            *s = Sort { key, reversed: false };
                        }
                    })
                }
            >
                {label}
                {arrow}
            </button>
        </th>
    }
}

fn lock_row(l: LockView, stale_hold_ms: i64) -> impl IntoView {
    let now = ctx().now;
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
    view! {
        <tr class:herd=herd class:stale=move || stale_row().is_some() data-lock=l.id.clone()>
            <td class="path"><LockLink id=l.id.clone() path=l.path.clone()/></td>
            <td>{l.source.clone()}</td>
            <td><span class="recipe">{l.recipe.clone()}</span></td>
            <td class="holder">
                {holder.map(|h| {
                    let reentry = h.reentrancy.filter(|n| *n > 1).map(|n| format!(" ×{n}"));
                    let mode = h.mode.map(|m| format!(" ({m:?})").to_lowercase());
                    // A database holder is a connection, or a lock-table row's owner (no connection).
                    let who = if !database {
                        h.session.clone()
                    } else if h.session.is_empty() {
                        h.node.clone()
                    } else {
                        format!("conn {}", h.session)
                    };
                    view! {
                        <code title=h.node.clone()>{format::middle_ellipsis(&who, 22)}</code>
                        {mode}
                        {reentry}
                        {(more_holders > 0).then(|| format!(" +{more_holders}"))}
                    }
                })}
            </td>
            <td>{oldest_hold.map(|at| view! { <Ago since_ms=at/> })}</td>
            <td class="num">{l.waiters.len()}</td>
            <td>{oldest_wait.map(|at| view! { <Ago since_ms=at/> })}</td>
            <td class="num">
                {fan_out}
                {herd.then(|| view! { <span class="badge herd" title="More than one session wakes when the holder goes">"herd"</span> })}
            </td>
            <td>{l.expires_at_ms.map(|at| view! { <Left at_ms=at/> })}</td>
            <td class="flags">
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
