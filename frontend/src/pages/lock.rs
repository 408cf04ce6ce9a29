//! One lock: its queue drawn as a graph (lock node, holders, waiters in order, the node each
//! waiter watches, the holder's fan-out), its facts (TTL, re-entry, fencing token, permits,
//! Redlock masters), the recent events as a timeline, and a chart of recent waits and holds.
//! Database locks also get their flags explained in words, their waiters listed with the
//! database's own timeout, links to their connections, and a release confirmation that says
//! what terminating a connection or rewriting a lock-table row does.
//!
//! The live state comes from the lock's own live view (`/api/v1/events?lock=<id>`: the server
//! pushes only this lock's changes); the event history from `GET /api/v1/locks/{id}`, read
//! again whenever the view reports that this lock changed. A lock that is gone (opened from a
//! link after it vanished) shows what the server kept: nothing holding it, and its history.

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_params_map;
use lockscope_model::rules::stale_findings;
use lockscope_model::wire::{
    BlockersPage, HolderView, LockDetail, LockEvent, LockView, RedlockView, RootBlockerView,
    SessionPage, StatementView, WaiterView,
};

use crate::api::{get_json, Refusal, ViewStream};
use crate::blockers;
use crate::dbtext;
use crate::flagtext;
use crate::format;
use crate::graph::{queue_layout, Role, BOX_H, BOX_W, BOX_X, QUEUE_W};
use crate::pages::overview::backend_name;
use crate::shared::{arrow_marker, ctx, Ago, Ctx, Left};
use crate::store::{encode, View};
use send_wrapper::SendWrapper;

/// Waiters drawn in the graph; the rest are counted.
const MAX_DRAWN_WAITERS: usize = 40;

#[component]
pub fn LockPage() -> impl IntoView {
    let Ctx { link, now, .. } = ctx();
    let params = use_params_map();
    let id = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    // This lock's live view: the server pushes what changes it, nothing else.
    let view = RwSignal::new(View::default());
    let refused = RwSignal::new(None::<Refusal>);
    let stream = StoredValue::new(None::<SendWrapper<ViewStream>>);
    Effect::new(move |_| {
        let query = encode(&[("lock", id.get()), ("limit", "1".to_string())]);
        view.set(View::default());
        let opened = ViewStream::open(query, view, link, refused);
        stream.set_value(Some(SendWrapper::new(opened)));
    });
    on_cleanup(move || stream.set_value(None));
    let live =
        Memo::new(move |_| view.with(|v| v.locks.iter().find(|l| l.id == id.get()).cloned()));
    let loaded = Memo::new(move |_| view.with(|v| v.loaded));
    // The last state seen, kept for when the lock disappears (nothing holds or waits any more).
    let last = RwSignal::new(None::<LockView>);
    Effect::new(move |_| {
        if let Some(lock) = live.get() {
            last.set(Some(lock));
        }
    });
    let events = RwSignal::new(Vec::<LockEvent>::new());
    let error = RwSignal::new(None::<String>);
    // The server's word on a gone lock: when it was found gone, and whether nobody saw it go.
    let gone_at = RwSignal::new(None::<(Option<i64>, bool)>);
    // Why the history store did not answer, when it did not: the timeline is then only what
    // this lockscope keeps in memory.
    let history_down = RwSignal::new(None::<String>);
    let change = Memo::new(move |_| {
        live.with(|l| {
            l.as_ref()
                .map(|l| (l.changed_ms, l.acquisitions, l.releases))
        })
    });
    Effect::new(move |_| {
        change.track();
        let id = id.get();
        spawn_local(async move {
            let answer = get_json::<LockDetail>(&format!("/api/v1/locks/{id}")).await;
            // The page may have gone meanwhile.
            if last.is_disposed() {
                return;
            }
            match answer {
                Ok(detail) => {
                    gone_at.set(detail.gone.then_some((detail.gone_ms, detail.gone_unseen)));
                    if detail.gone || last.with_untracked(Option::is_none) {
                        last.set(Some(detail.lock));
                    }
                    events.set(detail.events);
                    history_down.set(detail.history_unavailable);
                    error.set(None);
                }
                Err(e) => error.set(Some(e)),
            }
        });
    });
    // The root its waiters are blocked by, when the wait-for graph tells: a root blocker holding
    // this lock, or else one holding a lock that one of its holders waits on (then named with
    // that holder). Read again when the lock changes; nothing while nobody waits.
    let root = RwSignal::new(None::<Root>);
    let waiting = Memo::new(move |_| {
        live.with(|l| {
            l.as_ref()
                .filter(|l| !l.waiters.is_empty())
                .map(|l| (l.changed_ms, l.waiters.len(), l.holders.len()))
        })
    });
    Effect::new(move |_| {
        if waiting.get().is_none() {
            root.set(None);
            return;
        }
        let Some(lock) = live.get_untracked() else {
            return;
        };
        spawn_local(async move {
            let found = find_root(&lock).await;
            if !root.is_disposed() {
                root.set(found);
            }
        });
    });
    // The release dialog lives outside the body, which is redrawn on every change of the lock:
    // a waiter arriving must not close it (or lose the reason being typed, or the answer).
    let dialog = RwSignal::new(None::<HolderView>);
    let page = move || {
        // Not in the live view once it has loaded, or gone in the server's word: before the
        // view's first page, a lock the detail answered for is not gone (it was shown as gone
        // for a moment whenever the detail came first).
        let gone = live.with(|l| l.is_none()) && (loaded.get() || gone_at.with(Option::is_some));
        match last.get() {
            Some(lock) => {
                // Seen live on this page, then gone: show it as the server keeps gone locks.
                let lock = if gone && !(lock.holders.is_empty() && lock.waiters.is_empty()) {
                    lock.gone(now.get_untracked())
                } else {
                    lock
                };
                view! {
                    {gone.then(|| match gone_at.get() {
                        Some((at, true)) => view! {
                            <div class="banner gone">
                                "This lock went while no lockscope watched its source: it was found missing "
                                {at.map(crate::format::instant_utc)}
                                ". It is shown as it was last seen; its history is in the timeline."
                            </div>
                        }.into_any(),
                        Some((Some(at), false)) => view! {
                            <div class="banner gone">
                                "This lock is gone since " {crate::format::instant_utc(at)}
                                ": nothing holds it, waits on it or keeps its node or key any more. What happened to it is in the timeline."
                            </div>
                        }.into_any(),
                        _ => view! {
                            <div class="banner gone">"This lock is gone: nothing holds it, waits on it or keeps its node or key any more. What happened to it is in the timeline."</div>
                        }.into_any(),
                    })}
                    {move || history_down.get().map(|why| view! {
                        <div class="banner history-down" role="status">
                            "History unavailable: " {why}
                            ". The timeline shows only what this lockscope keeps in memory."
                        </div>
                    })}
                    <LockBody lock=lock events=events dialog=dialog view=view root=root/>
                }
                .into_any()
            }
            None if !loaded.get() => view! { <p class="empty">"Loading…"</p> }.into_any(),
            None => unknown_lock(&id.get(), error.get()).into_any(),
        }
    };
    let release = move || {
        dialog.get().map(|holder| {
            let lock = last.get_untracked().unwrap_or_default();
            view! {
                <ReleaseDialog id=id.get_untracked() lock=lock holder=holder dialog=dialog/>
            }
        })
    };
    view! { {page} {release} }
}

/// A lock lockscope does not know: neither live nor in its history. Says what the id names,
/// what that means, and offers the search for it (the path, and its last segment).
fn unknown_lock(id: &str, error: Option<String>) -> impl IntoView {
    let parsed = lockscope_model::id::parse_lock_id(id);
    let (source, path) = parsed.clone().unwrap_or_default();
    // A Redis or etcd key is spelled from `/` in its id; it is searched for as written.
    let search = path.trim_start_matches('/').to_string();
    let last = path
        .rsplit('/')
        .find(|p| !p.is_empty())
        .unwrap_or_default()
        .to_string();
    let q = RwSignal::new(search.clone());
    let navigate = leptos_router::hooks::use_navigate();
    let find = move |text: String| {
        let query = crate::store::Query {
            text: text.trim().to_string(),
            ..crate::store::Query::default()
        };
        navigate(&format!("/?{}", query.url()), Default::default());
    };
    let find_form = find.clone();
    view! {
        <section class="unknown-lock">
            <h1>"No such lock here"</h1>
            {match parsed {
                Some(_) => view! {
                    <p>
                        "The link names the lock " <code>{path.clone()}</code> " of source " <code>{source.clone()}</code>
                        ". lockscope shows no lock there now and keeps no history of one: nothing holds it, waits on it or keeps its node or key, and it did not go while a lockscope with a history store watched it (it went before, or its source or path is not the one you meant)."
                    </p>
                }.into_any(),
                None => view! { <p>"This link does not name a lock (the id cannot be read): it may have been cut or mistyped."</p> }.into_any(),
            }}
            {error.filter(|e| !e.contains("404")).map(|e| view! { <p class="error">{format!("lockscope answered: {e}")}</p> })}
            <form class="find" on:submit=move |ev| { ev.prevent_default(); find_form(q.get_untracked()); }>
                <label>"Search the locks for "
                    <input name="find" type="search" prop:value=move || q.get() on:input=move |ev| q.set(event_target_value(&ev))/>
                </label>
                <button type="submit">"Search"</button>
                {(!last.is_empty() && last != search).then(|| {
                    let last = last.clone();
                    let find = find.clone();
                    view! {
                        " " <button type="button" class="linkish" on:click=move |_| find(last.clone())>{format!("or for “{last}”")}</button>
                    }
                })}
            </form>
            <p><a href=crate::api::at("/")>"Back to the overview"</a></p>
        </section>
    }
}

#[component]
fn LockBody(
    lock: LockView,
    events: RwSignal<Vec<LockEvent>>,
    dialog: RwSignal<Option<HolderView>>,
    view: RwSignal<View>,
    root: RwSignal<Option<Root>>,
) -> impl IntoView {
    let ctx @ Ctx { now, .. } = ctx();
    let stale_lock = lock.clone();
    let stale = move || stale_findings(&stale_lock, now.get(), ctx.stale_hold_ms());
    let (stuck_lock, stuck_limits) = (lock.clone(), ctx.stuck());
    let stuck =
        Memo::new(move |_| lockscope_model::stuck::judge(&stuck_lock, now.get(), &stuck_limits));
    let facts = facts(&lock);
    let database = dbtext::is_database(lock.backend);
    // What the lock's source cannot show, on its badge (the overview lists it too).
    let source_name = lock.source.clone();
    let source_limits = move || {
        view.with(|s| {
            s.sources
                .iter()
                .find(|src| src.name == source_name)
                .map(|src| src.limits.join("\n"))
                .unwrap_or_default()
        })
    };
    // While the source is not up: when the lock was last seen (the page's sources are live;
    // before they arrive, the mark the server put on the lock).
    let down_name = lock.source.clone();
    let own_mark = lock.source_last_seen_ms;
    let last_seen = move || {
        view.with(
            |s| match s.sources.iter().find(|src| src.name == down_name) {
                Some(src) => src.lock_mark(),
                None => own_mark,
            },
        )
    };
    let utc = ctx.utc;
    let down_source = {
        let name = lock.source.clone();
        move || name.clone()
    };
    let flag_badges = lock
        .flags
        .iter()
        .map(|f| {
            let (label, title) = if database {
                (
                    dbtext::flag_label(f),
                    dbtext::flag_explanation(lock.backend, f).unwrap_or_default(),
                )
            } else {
                (
                    flagtext::flag_label(f),
                    flagtext::flag_explanation(&lock.recipe, f).unwrap_or_default(),
                )
            };
            view! { <span class="badge flag" data-flag=f.clone() title=title>{label}</span> }
        })
        .collect_view();
    let notes: Vec<String> = if database {
        lock.flags
            .iter()
            .filter_map(|f| dbtext::flag_explanation(lock.backend, f))
            .collect()
    } else {
        lock.flags
            .iter()
            .filter_map(|f| flagtext::flag_explanation(&lock.recipe, f))
            .collect()
    };
    view! {
        <section class="lockhead">
            <h1 title=lock.path.clone()>{lock.path.clone()}</h1>
            <p class="meta">
                <span class="badge">{backend_name(lock.backend)}</span>
                <span class="badge" title=source_limits>{lock.source.clone()}</span>
                <span class="recipe">{lock.recipe.clone()}</span>
                {lock.recipe_guess.clone().map(|why| view! {
                    <span class="badge guess" title=why.clone()>{format!("guessed: {why}")}</span>
                })}
                {lock.herd.then(|| view! {
                    <span class="badge herd" title="More than one session wakes when the holder goes">
                        {format!("herd: {} sessions wake", lock.watchers + lock.child_watchers)}
                    </span>
                })}
                {move || {
                    stale()
                        .into_iter()
                        .map(|s| view! { <span class="badge stale" data-rule=s.name()>{format!("stale: {}", s.describe())}</span> })
                        .collect_view()
                }}
                {flag_badges}
            </p>
            {move || last_seen().map(|at| view! {
                <p class="banner source-down" role="status" data-last-seen=at.to_string()>
                    <strong>{format!("Source down — last seen at {}", crate::shared::clock(utc.get(), at))}</strong>
                    {format!(": lockscope has not heard from {} since {}; this lock is shown as it was then and may have changed since.", down_source(), crate::shared::when(utc.get(), at))}
                </p>
            })}
            {move || stuck.get().map(|s| {
                let who = if s.kind == lockscope_model::wire::StuckKind::Wait { "A waiter has waited" } else { "The holder has held" };
                view! {
                    <p class=format!("banner stuck {}", s.level.as_str()) role="status" data-stuck=s.level.as_str()>
                        <strong>{format!("{} — {}", if s.level == lockscope_model::wire::StuckLevel::Critical { "Stuck (critical)" } else { "Stuck (warning)" }, crate::shared::stuck_text(&s))}</strong>
                        {format!(": {who} {} since {} ({}), past the {} limit of {}. ", format::duration(s.for_ms), format::instant_utc(s.since_ms), s.node, s.level.as_str(), format::duration(s.limit_ms))}
                    </p>
                }
            })}
            <dl class="facts">{facts}</dl>
            {(!notes.is_empty()).then(|| view! {
                <ul class="dbnotes">
                    {notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}
                </ul>
            })}
        </section>
        <div class="lockgrid">
            <section class="card">
                <h2>"Queue"</h2>
                {(!lock.waiters.is_empty()).then_some(move || root.get().map(|r| view! {
                    <p class="rootnote" data-root=blockers::name(&r.root)>
                        "Its waiters are " {root_text(&r)} "."
                    </p>
                }))}
                {queue_svg(&lock)}
            </section>
            <section class="card">
                <h2>"Holders"</h2>
                <HolderList lock=lock.clone() dialog=dialog/>
                {(database && !dbtext::is_table_row(&lock.recipe)).then(|| view! {
                    <h2>"Waiters"</h2>
                    <WaiterList lock=lock.clone() root=root/>
                })}
                {lock.redlock.clone().map(|r| redlock_table(*r))}
                <h2>"Recent waits and holds"</h2>
                {move || durations_chart(&events.get())}
                <h2>"Timeline"</h2>
                {move || timeline(events.get())}
            </section>
        </div>
    }
}

fn facts(lock: &LockView) -> impl IntoView {
    let mut items: Vec<(&'static str, AnyView)> = vec![
        ("holders", lock.holders.len().into_any()),
        ("waiters", lock.waiters.len().into_any()),
    ];
    // A database wakes its waiters itself: nobody watches a holder.
    if !dbtext::is_database(lock.backend) {
        items.push(("watchers on holder", lock.watchers.into_any()));
    }
    if let Some(n) = lock.unattributed_waiters {
        // Redis lists clients blocked in BLPOP but not the key they wait on.
        items.push((
            "blocked clients (unattributed)",
            view! {
                <span class="unattributed" title="Clients blocked in BLPOP on this lock's Redis server: python-redis-lock's waiters. Redis does not say which key a client waits on, so some may wait on another lock of the same server.">
                    {format!("{n} in BLPOP on this server")}
                </span>
            }
            .into_any(),
        ));
    }
    if lock.child_watchers > 0 {
        items.push(("child watchers", lock.child_watchers.into_any()));
    }
    items.push((
        "acquired / released",
        format!("{} / {}", lock.acquisitions, lock.releases).into_any(),
    ));
    match (lock.recipe.as_str(), lock.expires_at_ms) {
        (recipe @ ("lock_table_until" | "spring_jdbc_lock"), Some(at)) => {
            let stored = lock.holders.iter().find_map(|h| h.version.clone());
            let column = if recipe == "spring_jdbc_lock" {
                "EXPIRED_AFTER (UTC, the holder's clock)"
            } else {
                "lock_until"
            };
            items.push((
                "row expires in",
                view! {
                    <span class="expiry" title=stored.map(|v| format!("{column} as stored: {v}")).unwrap_or_default()>
                        <Left at_ms=at/>
                    </span>
                }
                .into_any(),
            ));
        }
        ("lock_table", _) => items.push((
            "expiry",
            view! { <span title="This lock table has no expiry column: the row stays until its owner deletes it">"none"</span> }.into_any(),
        )),
        (_, Some(at)) => items.push(("TTL left", view! { <Left at_ms=at/> }.into_any())),
        (_, None) => {}
    }
    if let Some(at) = lock.deadline_ms {
        items.push(("deadline", view! { <Left at_ms=at/> }.into_any()));
    }
    if let Some(token) = lock.fencing_token {
        items.push(("fencing token", token.into_any()));
    }
    if let Some(max) = lock.max_leases {
        items.push(("max leases", max.into_any()));
    }
    if let (Some(avail), Some(total)) = (lock.permits_available, lock.permits_total) {
        items.push(("permits free", format!("{avail} of {total}").into_any()));
    } else if let Some(avail) = lock.permits_available {
        items.push(("permits free", avail.into_any()));
    }
    if let Some(n) = lock.holders.iter().filter_map(|h| h.reentrancy).max() {
        items.push(("re-entry count", n.into_any()));
    }
    let changed = lock.changed_ms;
    items.push((
        "changed",
        view! { <Ago since_ms=changed/> " ago" }.into_any(),
    ));
    items
        .into_iter()
        .map(|(k, v)| view! { <div><dt>{k}</dt><dd>{v}</dd></div> })
        .collect_view()
}

fn queue_svg(lock: &LockView) -> impl IntoView {
    let now = ctx().now;
    let layout = queue_layout(lock, MAX_DRAWN_WAITERS);
    let fan_out = lock.watchers + lock.child_watchers;
    let herd = lock.herd;
    let database = dbtext::is_database(lock.backend);
    // Who a participant is, on its box's second line: a session, a connection, or (a lock-table
    // row, which no connection owns) nothing more than its owner on the first line.
    // Who it is in the lock's own words (a node's data, a lease's holder), before the session.
    // (A ZooKeeper session id written in decimal as the node's data is the session, shown
    // once, in hex.)
    let named = |identity: &Option<String>, session: &str| -> String {
        format::identity_label(identity.as_deref(), session)
            .map(|i| format!("{} · ", format::middle_ellipsis(&i, 24)))
            .unwrap_or_default()
    };
    let who = move |session: &str| -> String {
        if !database {
            format!("session {}", format::middle_ellipsis(session, 26))
        } else if session.is_empty() {
            "lock-table row".to_string()
        } else {
            format!("connection {}", format::middle_ellipsis(session, 26))
        }
    };
    let boxes = layout
        .boxes
        .iter()
        .map(|b| {
            let y = b.y;
            let (role, class, line1, line2, since, badge): (&str, String, String, String, Option<i64>, Option<String>) =
                match b.role {
                    Role::Lock => (
                        "lock",
                        "lock".into(),
                        format::middle_ellipsis(&lock.path, 60),
                        match lock.child_watchers {
                            0 => lock.recipe.clone(),
                            n => format!("{} · {n} child watch(es): every waiter wakes on any change", lock.recipe),
                        },
                        None,
                        None,
                    ),
                    Role::Holder(i) => {
                        let h = &lock.holders[i];
                        let mode = h.mode.map(|m| format!("{m:?} ").to_lowercase()).unwrap_or_default();
                        let reentry = h.reentrancy.filter(|n| *n > 1).map(|n| format!(" · re-entered ×{n}")).unwrap_or_default();
                        let badge = if herd {
                            Some(format!("HERD · {fan_out} wake"))
                        } else if database {
                            None
                        } else {
                            Some(format!("fan-out {}", h.watchers))
                        };
                        (
                            "holder",
                            if herd { "holder herd".into() } else { "holder".into() },
                            format!("{mode}holder · {}", format::middle_ellipsis(format::leaf(&h.node), 34)),
                            format!("{}{}{reentry} · held ", named(&h.identity, &h.session), who(&h.session)),
                            Some(h.since_ms),
                            badge,
                        )
                    }
                    Role::Waiter(i) => {
                        let w = &lock.waiters[i];
                        let mode = w.mode.map(|m| format!("{m:?} ").to_lowercase()).unwrap_or_default();
                        (
                            "waiter",
                            "waiter".into(),
                            format!("#{} {mode}waiter · {}", w.position, format::middle_ellipsis(format::leaf(&w.node), 40)),
                            format!("{}{} · waiting ", named(&w.identity, &w.session), who(&w.session)),
                            Some(w.since_ms),
                            None,
                        )
                    }
                };
            let node = match b.role {
                Role::Lock => lock.path.clone(),
                Role::Holder(i) => lock.holders[i].node.clone(),
                Role::Waiter(i) => lock.waiters[i].node.clone(),
            };
            view! {
                <g class=format!("qnode {class}") data-role=role data-node=node>
                    <rect x=BOX_X.to_string() y=y.to_string() width=BOX_W.to_string() height=BOX_H.to_string() rx="6"></rect>
                    <text x=(BOX_X + 12.0).to_string() y=(y + 18.0).to_string() class="t1">{line1}</text>
                    <text x=(BOX_X + 12.0).to_string() y=(y + 36.0).to_string() class="t2">
                        {line2}
                        {since.map(|s| move || format::duration(now.get() - s))}
                    </text>
                    {badge.map(|text| view! {
                        <text x=(BOX_X + BOX_W - 10.0).to_string() y=(y + 18.0).to_string() class="badge-text" text-anchor="end">{text}</text>
                    })}
                </g>
            }
        })
        .collect_view();
    let arrows = layout
        .arrows
        .iter()
        .map(|a| {
            let class = if a.on_lock { "watch on-lock" } else { "watch" };
            view! { <path class=class d=a.d.clone() marker-end="url(#arrowhead)"></path> }
        })
        .collect_view();
    let hidden = layout.hidden_waiters;
    let height = layout.height;
    view! {
        <svg class="queue" viewBox=format!("0 0 {QUEUE_W} {height}") width=QUEUE_W.to_string() height=height.to_string() role="img" aria-label="lock queue">
            {arrow_marker("arrowhead")}
            {arrows}
            {boxes}
            {(hidden > 0).then(|| view! {
                <text x=BOX_X.to_string() y=(height - 8.0).to_string() class="t2">{format!("… and {hidden} more waiters")}</text>
            })}
        </svg>
        {if database && dbtext::is_table_row(&lock.recipe) {
            view! {
                <p class="legend">
                    "A lock-table row: whoever inserted (or last updated) it holds the lock. "
                    "Callers that want it retry by themselves, so the database cannot show who waits."
                </p>
            }
            .into_any()
        } else if database {
            view! {
                <p class="legend">
                    "Waiters in the order the database will grant the lock, as far as it tells (by the start of their wait). "
                    "The database wakes them itself: nobody watches anything."
                </p>
            }
            .into_any()
        } else {
            view! {
                <p class="legend">
                    "Arrows: the node each waiter watches, as the ensemble reports it. "
                    "A dashed arrow to the lock is a child watch: that waiter wakes on every change."
                </p>
            }
            .into_any()
        }}
    }
}

#[component]
fn HolderList(lock: LockView, dialog: RwSignal<Option<HolderView>>) -> impl IntoView {
    let Ctx { info, .. } = ctx();
    let database = dbtext::is_database(lock.backend);
    if lock.holders.is_empty() {
        let text = if lock.flags.iter().any(|f| f == "expired") {
            "Nothing holds this lock: the row's expiry has passed, the lock is free."
        } else if lock.path == dbtext::UNKNOWN_GET_LOCK {
            "The holder cannot be told: the waiters' statements do not name the lock, so lockscope offers no force release here."
        } else {
            "Nothing holds this lock."
        };
        return view! { <p class="empty">{text}</p> }.into_any();
    }
    let rows = lock
        .holders
        .iter()
        .map(|h| {
            // A database lock this UI cannot release safely says why instead of offering it.
            let unsupported = StoredValue::new(if database {
                dbtext::release_effects(&lock, h).err()
            } else {
                None
            });
            let reason = move || {
                if let Some(why) = unsupported.get_value() {
                    return Some(why);
                }
                info.with(|i| match i {
                    Some(i) if i.admin_enabled => None,
                    Some(i) => Some(
                        i.admin_disabled_reason
                            .clone()
                            .unwrap_or_else(|| "force release is off".into()),
                    ),
                    None => Some("asking lockscope whether force release is on…".into()),
                })
            };
            let chosen = h.clone();
            let who = if database {
                view! {
                    {db_participant(&lock.source, &h.node, &h.session)}
                    {statement(h.statement.as_deref())}
                }
                .into_any()
            } else {
                view! {
                    {format::identity_label(h.identity.as_deref(), &h.session).map(|i| view! {
                        <span class="identity" title="Who holds, in the lock's own words">{i}</span>
                        " · "
                    })}
                    <code>{h.session.clone()}</code>
                    <span class="muted">{format!(" {}", format::leaf(&h.node))}</span>
                }
                .into_any()
            };
            let expiry = (database && dbtext::has_expiry_column(&lock.recipe))
                .then(|| h.version.clone())
                .flatten()
                .map(|v| view! {
                    <br/>
                    <span class="expiry">"row expiry " <code>{v}</code>
                        {lock.expires_at_ms.map(|at| view! { " · in " <Left at_ms=at/> })}
                    </span>
                });
            let watchers = (!database).then(|| format!(" · {} watcher(s)", h.watchers));
            // What a release of a connection-held lock compares: shown so the operator sees it.
            let started = (database && !dbtext::is_table_row(&lock.recipe))
                .then(|| h.version.clone())
                .flatten()
                .map(|v| view! {
                    <br/>
                    <span class="muted small">{version_label(&lock.recipe)} " " <code>{v}</code></span>
                });
            view! {
                <div class="holder-row" data-holder=h.node.clone()>
                    <div>
                        {who}
                        <br/>
                        "held " <Ago since_ms=h.since_ms/>
                        {h.reentrancy.map(|n| format!(" · re-entry count {n}"))}
                        {watchers}
                        {expiry}
                        {started}
                        {h.lease.clone().map(|l| view! {
                            <br/>
                            <span class="lease" title="The lease the holder's key is bound to: the key goes when the lease is no longer kept alive.">
                                "lease " <code>{l.id}</code>
                                {l.granted_s.map(|g| format!(" · granted {g} s"))}
                                {l.expires_at_ms.map(|at| view! { " · runs out in " <Left at_ms=at/> " unless kept alive" })}
                            </span>
                        })}
                    </div>
                    <div class="release">
                        <button
                            class="danger"
                            disabled=move || reason().is_some()
                            title=move || reason().unwrap_or_default()
                            on:click=move |_| dialog.set(Some(chosen.clone()))
                        >
                            "Force release…"
                        </button>
                        {move || reason().map(|r| view! { <p class="muted small">{r}</p> })}
                    </div>
                </div>
            }
        })
        .collect_view();
    rows.into_any()
}

/// A database lock's holder or waiter: its name (`conn 12`, `trx 345`, a lock-table row's
/// owner) and its connection, linked to its row on the sessions page.
fn db_participant(source: &str, node: &str, session: &str) -> AnyView {
    if session.is_empty() {
        return view! { <span class="muted">"owner "</span> <code>{node.to_string()}</code> }
            .into_any();
    }
    let href = crate::api::at(&format!(
        "/sessions?{}#{}",
        encode(&[("source", source.to_string()), ("q", session.to_string())]),
        format::session_anchor(source, session)
    ));
    // `conn <id>` says nothing the link does not.
    let extra = (node != format!("conn {session}")).then(|| {
        view! {
            <span class="muted">" " <code>{node.to_string()}</code></span>
        }
    });
    view! {
        <a class="connlink" href=href title="This connection on the sessions page">{format!("connection {session}")}</a>
        {extra}
    }
    .into_any()
}

/// The root blocker a lock's waiters are blocked by, and the holder of this lock it holds up
/// (`None`: the root holds this lock itself).
#[derive(Debug, Clone, PartialEq)]
pub struct Root {
    root: RootBlockerView,
    through: Option<String>,
}

/// "blocked by svc-b (root, holding up 7)", and through which holder when it is not this
/// lock's.
fn root_text(r: &Root) -> String {
    match &r.through {
        None => blockers::blocked_by(&r.root),
        Some(holder) => format!(
            "{}, through its holder {holder}",
            blockers::blocked_by(&r.root)
        ),
    }
}

/// The root `lock`'s waiters are blocked by, when the server's answers tell: a root blocker
/// holding the lock; else one holding a lock that one of its (first two) holders waits on.
async fn find_root(lock: &LockView) -> Option<Root> {
    let page = get_json::<BlockersPage>(&format!("/api/v1/blockers?limit={}", blockers::LOOKUP))
        .await
        .ok()?;
    if let Some(root) = blockers::holding(&page.blockers, &lock.id) {
        return Some(Root {
            root: root.clone(),
            through: None,
        });
    }
    for h in lock
        .holders
        .iter()
        .filter(|h| !h.session.is_empty())
        .take(2)
    {
        let query = encode(&[
            ("source", lock.source.clone()),
            ("q", h.session.clone()),
            ("state", "waiting".to_string()),
            ("limit", "20".to_string()),
        ]);
        let Ok(sessions) = get_json::<SessionPage>(&format!("/api/v1/sessions?{query}")).await
        else {
            continue;
        };
        let waits: Vec<String> = sessions
            .sessions
            .into_iter()
            .filter(|s| s.session == h.session)
            .flat_map(|s| s.waits)
            .collect();
        if let Some(root) = blockers::holding_any(&page.blockers, &waits) {
            let name = if dbtext::is_database(lock.backend) {
                format!("connection {}", h.session)
            } else {
                format!("session {}", h.session)
            };
            return Some(Root {
                root: root.clone(),
                through: Some(name),
            });
        }
    }
    None
}

/// A database participant's statement: its kind as a badge ("DDL", "read", "idle in
/// transaction"), the statement shortened beside it, whole on hover.
fn statement(st: Option<&StatementView>) -> Option<impl IntoView> {
    let st = st?;
    let kind = st.kind.clone();
    let text = st.text.clone();
    let short = format::one_line(&text, 60);
    Some(view! {
        " "
        <span class=format!("badge stmt-kind {kind}") data-kind=kind.clone() title=text.clone()>
            {format::statement_kind_label(&kind).to_string()}
        </span>
        {(!short.is_empty()).then(|| view! { " " <code class="stmt" title=text>{short}</code> })}
    })
}

/// What a database holder's version is, by recipe (the server compares it before releasing).
fn version_label(recipe: &str) -> &'static str {
    match recipe {
        "lock_table" | "lock_table_until" | "spring_jdbc_lock" => "expiry seen",
        "row_lock" => "transaction started",
        _ => "connection started",
    }
}

/// A database lock's waiters in order, with when the database's own timeout ends each wait.
#[component]
fn WaiterList(lock: LockView, root: RwSignal<Option<Root>>) -> impl IntoView {
    if lock.waiters.is_empty() {
        return view! { <p class="empty">"Nobody waits for this lock."</p> }.into_any();
    }
    let source = lock.source.clone();
    lock.waiters
        .into_iter()
        .map(|w: WaiterView| {
            let mode = w.mode.map(|m| format!(" · {m:?}").to_lowercase());
            view! {
                <div class="waiter-row" data-waiter=w.node.clone()>
                    <span class="pos">{format!("#{}", w.position)}</span>
                    {db_participant(&source, &w.node, &w.session)}
                    {mode}
                    {statement(w.statement.as_deref())}
                    " · waiting " <Ago since_ms=w.since_ms/>
                    {move || root.get().map(|r| view! { <span class="rootnote">" · " {root_text(&r)}</span> })}
                    {w.deadline_ms.map(|at| view! {
                        <span class="deadline" title="The database's own timeout (lock wait timeout, GET_LOCK timeout) ends the wait then">
                            " · times out in " <Left at_ms=at/>
                        </span>
                    })}
                </div>
            }
        })
        .collect_view()
        .into_any()
}

const TOKEN_KEY: &str = "lockscope-admin-token";

/// The confirmation for a force release: exactly which holder, what happens, a required
/// reason, the admin token; then the server's answer.
#[component]
fn ReleaseDialog(
    id: String,
    lock: LockView,
    holder: HolderView,
    dialog: RwSignal<Option<HolderView>>,
) -> impl IntoView {
    let path = lock.path.clone();
    let database = dbtext::is_database(lock.backend);
    let stored = window()
        .session_storage()
        .ok()
        .flatten()
        .and_then(|s| s.get_item(TOKEN_KEY).ok().flatten())
        .unwrap_or_default();
    let token = RwSignal::new(stored);
    let reason = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let result = RwSignal::new(None::<(bool, String)>);
    let ready = move || !busy.get() && !reason.get().trim().is_empty() && !token.get().is_empty();
    let body_holder = holder.clone();
    let submit = move |_| {
        let url = format!("/api/v1/locks/{id}/release");
        let mut body = serde_json::json!({
            "holder": body_holder.node,
            "session": body_holder.session,
            "reason": reason.get_untracked(),
        });
        if let Some(n) = body_holder.reentrancy {
            body["reentrancy"] = n.into();
        }
        if let Some(version) = &body_holder.version {
            // What the server compares besides the holder (etcd: its key's revisions).
            body["version"] = version.clone().into();
        }
        let token_value = token.get_untracked();
        if let Some(storage) = window().session_storage().ok().flatten() {
            let _ = storage.set_item(TOKEN_KEY, &token_value);
        }
        busy.set(true);
        spawn_local(async move {
            let answer = crate::api::post_json(&url, &body, &token_value).await;
            busy.set(false);
            result.set(Some(match answer {
                // A database release says what it did (`pg_terminate_backend`, `expiry set to now`).
                Ok((200, v)) => match v["released"]["action"].as_str() {
                    Some(action) => (true, format!("Released: {action}. {}", v["released"]["effect"].as_str().unwrap_or_default())),
                    None => (true, format!("Released. {}", v["released"])),
                },
                Ok((409, _)) => (false, "Not released: that holder no longer holds the lock (it changed hands or went since you looked). Nothing was changed.".into()),
                Ok((401 | 403, v)) => (false, format!("Refused: {}", v["error"].as_str().unwrap_or("token not accepted"))),
                Ok((429, _)) => (false, "Refused: too many force releases just now; wait a minute.".into()),
                Ok((status, v)) => (false, format!("Not released ({status}): {}", v["error"].as_str().unwrap_or("unexpected answer"))),
                Err(e) => (false, e),
            }));
        });
    };
    let reentry = holder
        .reentrancy
        .map(|n| format!(", re-entered {n} time(s)"))
        .unwrap_or_default();
    // Keyboard: focus goes into the dialog (the reason field) and back to what opened it when
    // it closes; Esc closes it; Tab and Shift+Tab stay inside it.
    let opener = send_wrapper::SendWrapper::new(
        document()
            .active_element()
            .and_then(|e| wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(e).ok()),
    );
    let reason_field = NodeRef::<leptos::html::Textarea>::new();
    let modal = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        if let Some(field) = reason_field.get() {
            let _ = field.focus();
        }
    });
    let keys = window_event_listener(leptos::ev::keydown, move |ev| {
        if ev.key() == "Escape" {
            ev.prevent_default();
            dialog.set(None);
            return;
        }
        if ev.key() != "Tab" {
            return;
        }
        let Some(modal) = modal.get_untracked() else {
            return;
        };
        let Ok(found) = modal.query_selector_all("button:not([disabled]), textarea, input") else {
            return;
        };
        let items: Vec<web_sys::HtmlElement> = (0..found.length())
            .filter_map(|i| found.item(i))
            .filter_map(|n| wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(n).ok())
            .collect();
        let (Some(first), Some(last)) = (items.first(), items.last()) else {
            return;
        };
        let active = document().active_element();
        let at = |e: &web_sys::HtmlElement| {
            active.as_ref().is_some_and(|a| {
                let a: &web_sys::Element = a;
                let e: &web_sys::Element = e;
                a == e
            })
        };
        let inside = active.as_ref().is_some_and(|a| modal.contains(Some(a)));
        if ev.shift_key() && (at(first) || !inside) {
            ev.prevent_default();
            let _ = last.focus();
        } else if !ev.shift_key() && (at(last) || !inside) {
            ev.prevent_default();
            let _ = first.focus();
        }
    });
    on_cleanup(move || {
        keys.remove();
        if let Some(opener) = opener.take() {
            let _ = opener.focus();
        }
    });
    view! {
        <div class="modal-backdrop">
            <div class="modal" role="dialog" aria-modal="true" aria-labelledby="release-title" node_ref=modal>
                <h2 id="release-title">"Force release"</h2>
                <p>"This releases exactly this holder of " <code>{path}</code> ":"</p>
                <dl class="release-target">
                    {format::identity_label(holder.identity.as_deref(), &holder.session).map(|who| view! {
                        <dt>"who"</dt><dd><strong class="target-identity">{who}</strong></dd>
                    })}
                    <dt>{if database && holder.session.is_empty() { "owner" } else { "holder" }}</dt><dd><code class="target-node">{holder.node.clone()}</code></dd>
                    {(!(database && holder.session.is_empty())).then(|| view! {
                        <dt>{if database { "connection" } else { "session / client" }}</dt><dd><code>{holder.session.clone()}</code></dd>
                    })}
                    {holder.version.clone().filter(|_| database).map(|v| view! {
                        <dt>{version_label(&lock.recipe)}</dt><dd><code>{v}</code></dd>
                    })}
                    <dt>"held for"</dt><dd><Ago since_ms=holder.since_ms/>{reentry}</dd>
                </dl>
                {if database {
                    db_consequences(&lock, &holder).into_any()
                } else {
                    view! {
                        <ul class="consequences">
                            <li>"lockscope deletes it only if this holder still holds the lock; if it changed hands since you looked, nothing happens."</li>
                            <li>"Waiters wake now; the next one takes the lock."</li>
                            <li><strong>"The old holder is not told."</strong>" It still believes it holds the lock and may go on working as if it did. Release only a holder that is dead or stuck, or whose work is fenced."</li>
                            <li>"The attempt is audited with your token's name and the reason."</li>
                        </ul>
                    }
                    .into_any()
                }}
                <label>"Reason (required)"
                    <textarea name="reason" rows="2" node_ref=reason_field prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))></textarea>
                </label>
                <label>"Admin token"
                    <input type="password" name="token" autocomplete="off" prop:value=move || token.get() on:input=move |ev| token.set(event_target_value(&ev))/>
                </label>
                {move || result.get().map(|(ok, text)| view! {
                    <p class=if ok { "result ok" } else { "result bad" } role="status">{text}</p>
                })}
                <div class="actions">
                    <button on:click=move |_| dialog.set(None)>{move || if result.get().is_some_and(|r| r.0) { "Close" } else { "Cancel" }}</button>
                    <button class="danger confirm" disabled=move || !ready() || result.get().is_some_and(|r| r.0) on:click=submit>
                        {move || if busy.get() { "Releasing…" } else { "Release this holder" }}
                    </button>
                </div>
            </div>
        </div>
    }
}

/// What a force release of a database lock does: the guarded change, and for a connection the
/// whole of what terminating it ends (the second item, in bold).
fn db_consequences(lock: &LockView, holder: &HolderView) -> impl IntoView {
    let kills = matches!(
        lock.recipe.as_str(),
        "row_lock" | "get_lock" | "advisory" | "table_lock"
    );
    let items = match dbtext::release_effects(lock, holder) {
        Ok(effects) => effects
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                if kills && i == 1 {
                    view! { <li class="kill-effect"><strong>{e}</strong></li> }.into_any()
                } else {
                    view! { <li>{e}</li> }.into_any()
                }
            })
            .collect::<Vec<_>>(),
        Err(why) => vec![
            view! { <li class="unsupported"><strong>"Not possible: "</strong>{why}</li> }
                .into_any(),
        ],
    };
    let told = if kills {
        None
    } else {
        Some(view! {
            <li><strong>"The old owner is not told."</strong>" It still believes it holds the lock and may go on working as if it did. Release only an owner that is dead or stuck."</li>
        })
    };
    view! {
        <ul class="consequences">
            {items}
            {told}
            <li>"The attempt is audited with your token's name and the reason."</li>
        </ul>
    }
}

fn redlock_table(r: RedlockView) -> impl IntoView {
    view! {
        <h2>"Redlock masters"</h2>
        {r.split.then(|| view! { <p class="banner lost">"Split: different holders on different masters."</p> })}
        <table class="small-table">
            <thead><tr><th>"master"</th><th>"up"</th><th>"holder"</th><th>"TTL"</th></tr></thead>
            <tbody>
                {r.masters.into_iter().map(|m| view! {
                    <tr>
                        <td><code>{m.master}</code></td>
                        <td>{if m.up { "up" } else { "down" }}</td>
                        <td><code>{m.holder.unwrap_or_else(|| "—".into())}</code></td>
                        <td>{m.ttl_ms.map(format::duration)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <p class="muted">{match r.majority_holder {
            Some(h) => format!("Majority holder: {h}"),
            None => "No holder has a majority.".to_string(),
        }}</p>
    }
}

/// Bars of the last waits (before acquiring) and holds (before releasing), oldest left.
fn durations_chart(events: &[LockEvent]) -> AnyView {
    let samples: Vec<(&str, i64, i64)> = events
        .iter()
        .filter_map(|e| {
            let d = e.duration_ms?;
            match e.kind.as_str() {
                "acquired" => Some(("wait", d, e.at_ms)),
                "released" => Some(("hold", d, e.at_ms)),
                _ => None,
            }
        })
        .collect();
    if samples.is_empty() {
        return view! { <p class="empty">"No completed waits or holds yet."</p> }.into_any();
    }
    let mut samples = samples;
    samples.sort_by_key(|s| s.2);
    let samples: Vec<_> = samples.into_iter().rev().take(40).rev().collect();
    let max = samples.iter().map(|s| s.1).max().unwrap_or(1).max(1) as f64;
    // The plot, and a time axis under it: when the first and the last of these ended.
    let (w, h, axis) = (460.0, 110.0, 16.0);
    let bar = w / samples.len() as f64;
    let utc = ctx().utc;
    let bars = samples
        .iter()
        .enumerate()
        .map(|(i, (kind, d, at))| {
            let bh = (*d as f64 / max * (h - 20.0)).max(1.0);
            let (kind, d, at) = (*kind, *d, *at);
            let what = if kind == "wait" { "waited" } else { "held" };
            view! {
                <rect class=format!("bar {kind}") x=(i as f64 * bar + 1.0).to_string() y=(h - bh).to_string()
                    width=(bar - 2.0).max(1.0).to_string() height=bh.to_string() data-ms=d.to_string()>
                    // The bar's value on hover: how long, and when it ended.
                    <title>{move || format!("{what} {} — ended {}", format::duration(d), crate::shared::when(utc.get(), at))}</title>
                </rect>
            }
        })
        .collect_view();
    let (first, last) = (samples[0].2, samples[samples.len() - 1].2);
    view! {
        <svg class="chart" viewBox=format!("0 0 {w} {}", h + axis) width=w.to_string() height=(h + axis).to_string() role="group" aria-label="recent waits and holds, oldest left">
            <text x="2" y="12" class="t2">{format!("max {}", format::duration(max as i64))}</text>
            {bars}
            <line class="axis" x1="0" y1=h.to_string() x2=w.to_string() y2=h.to_string()></line>
            <text class="t2 axis-start" x="1" y=(h + 13.0).to_string()>{move || crate::shared::clock(utc.get(), first)}</text>
            <text class="t2 axis-end" x=(w - 1.0).to_string() y=(h + 13.0).to_string() text-anchor="end">{move || crate::shared::clock(utc.get(), last)}</text>
        </svg>
        <p class="legend"><span class="key wait"></span>" wait before acquiring  "<span class="key hold"></span>" hold before releasing"</p>
    }
    .into_any()
}

fn timeline(mut events: Vec<LockEvent>) -> AnyView {
    if events.is_empty() {
        return view! { <p class="empty">"No events recorded since lockscope started."</p> }
            .into_any();
    }
    events.sort_by_key(|e| std::cmp::Reverse(e.at_ms));
    let utc = ctx().utc;
    // The timeline as text, one event a line, oldest first, to paste beside a log.
    let as_text = {
        let events = events.clone();
        move || {
            let utc = utc.get();
            events
                .iter()
                .rev()
                .map(|e| {
                    let mut line = format!(
                        "{}  {:<10}  {}  {}",
                        crate::shared::when(utc, e.at_ms),
                        e.kind.as_str(),
                        e.session,
                        e.node
                    );
                    if let Some(d) = e.duration_ms {
                        line.push_str(&format!("  ({})", format::duration(d)));
                    }
                    if let Some(cause) = e.cause {
                        line.push_str(&format!("  cause: {}", format::cause_label(cause).0));
                    }
                    line
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    let copied = RwSignal::new(false);
    let copy_text = as_text.clone();
    let copy = move |_| {
        let text = copy_text();
        let clipboard = window().navigator().clipboard();
        spawn_local(async move {
            let done = wasm_bindgen_futures::JsFuture::from(clipboard.write_text(&text)).await;
            copied.set(done.is_ok());
        });
    };
    view! {
        <p class="timeline-tools">
            <button class="copy" on:click=copy title="Copy the timeline as text, one event a line, oldest first">"Copy as text"</button>
            {move || copied.get().then_some(" copied")}
        </p>
        <details class="as-text"><summary>"As text"</summary><pre class="timeline-text">{as_text}</pre></details>
        <ol class="timeline">
            {events.into_iter().take(100).map(|e| {
                let what = match (e.kind.as_str(), e.duration_ms) {
                    ("acquired", Some(d)) => format!("after waiting {}", format::duration(d)),
                    ("released", Some(d)) => format!("after holding {}", format::duration(d)),
                    _ => String::new(),
                };
                let cause = e.cause.map(format::cause_label);
                // Redis holders are named by their token or `client:thread` field, which
                // starts with the client id shown as the session: show only what differs.
                let node = match e.node.strip_prefix(e.session.as_str()) {
                    Some(rest) => rest.to_string(),
                    // A database connection's `conn <id>` repeats the session shown.
                    None if e.node == format!("conn {}", e.session) => String::new(),
                    None => format::middle_ellipsis(format::leaf(&e.node), 36),
                };
                view! {
                    <li class=format!("ev {}", e.kind)>
                        <span class="abs">{move || crate::shared::clock(utc.get(), e.at_ms)}</span>
                        <span class="when"><Ago since_ms=e.at_ms/>" ago"</span>
                        <span class="kind">{e.kind.as_str().replace('_', " ")}</span>
                        <code>{format::middle_ellipsis(&e.session, 22)}</code>
                        <span class="muted">{format!(" {node} ")}</span>
                        {what}
                        {cause.map(|(label, why)| view! { <span class="badge flag cause" title=why>{label}</span> })}
                    </li>
                }
            }).collect_view()}
        </ol>
    }
    .into_any()
}
