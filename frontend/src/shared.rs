//! What every page shares: the context ([`Ctx`]: the view stream's state, the clock, the
//! server's info, whether a read token is wanted), small components (relative times, a
//! lock's link, an arrowhead) and [`keep_reading`] (a JSON read repeated as a live view
//! changes). Pages and the shell both import it; it imports neither.

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use lockscope_model::wire::InfoView;
use serde::de::DeserializeOwned;

use crate::api::Link;
use crate::format;

/// Shared by every page.
#[derive(Clone, Copy)]
pub struct Ctx {
    /// The state of the current page's live view stream.
    pub link: RwSignal<Link>,
    /// The clock, ticking once a second: relative times and countdowns read it.
    pub now: RwSignal<i64>,
    pub info: RwSignal<Option<InfoView>>,
    /// The server wants a read token this browser does not have (or has wrong).
    pub need_token: RwSignal<bool>,
    /// Absolute times in UTC (`true`, the default) or in the browser's local time.
    pub utc: RwSignal<bool>,
}

impl Ctx {
    /// The stale-hold limit the server judges by (its default until `/api/v1/info` answers).
    pub fn stale_hold_ms(&self) -> i64 {
        self.info
            .with(|i| i.as_ref().map_or(300_000, |i| i.stale_hold_ms))
    }

    /// The stuck limits the server judges by (none until `/api/v1/info` answers).
    pub fn stuck(&self) -> lockscope_model::wire::StuckThresholds {
        self.info
            .with(|i| i.as_ref().map(|i| i.stuck.clone()).unwrap_or_default())
    }
}

/// A stuck mark as words with its icon, so it never rests on colour alone: "⚠ waiting 1 m 48 s
/// (limit 30 s)", "⛔ held 35 m (limit 30 m)".
pub fn stuck_text(s: &lockscope_model::wire::StuckView) -> String {
    use lockscope_model::wire::{StuckKind, StuckLevel};
    let icon = match s.level {
        StuckLevel::Warning => "⚠",
        StuckLevel::Critical => "⛔",
    };
    let what = match s.kind {
        StuckKind::Wait => "waiting",
        StuckKind::Hold => "held",
    };
    format!(
        "{icon} {what} {} (limit {})",
        format::duration(s.for_ms),
        format::duration(s.limit_ms)
    )
}

/// The browser's offset from UTC at `ms`, minutes east (its time zone's rule at that instant).
fn local_offset_min(ms: i64) -> i32 {
    let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64));
    -(date.get_timezone_offset() as i32)
}

/// An instant as the page shows absolute times now: UTC, or local time with its offset.
pub fn when(utc: bool, ms: i64) -> String {
    if utc {
        format::instant_utc(ms)
    } else {
        format::instant_at_offset(ms, local_offset_min(ms))
    }
}

/// The time of day of an instant, as the page shows absolute times now (`HH:MM:SS`).
pub fn clock(utc: bool, ms: i64) -> String {
    format::clock_at_offset(ms, if utc { 0 } else { local_offset_min(ms) })
}

/// A key event typed into a text field or a menu (or with a modifier): not a shortcut.
pub fn typed_in_field(ev: &web_sys::KeyboardEvent) -> bool {
    ev.ctrl_key()
        || ev.meta_key()
        || ev.alt_key()
        || ev
            .target()
            .and_then(|t| wasm_bindgen::JsCast::dyn_into::<web_sys::Element>(t).ok())
            .is_some_and(|e| matches!(e.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"))
}

pub fn ctx() -> Ctx {
    expect_context::<Ctx>()
}

/// "12 s" since an instant, ticking; the absolute time on hover.
#[component]
pub fn Ago(since_ms: i64) -> impl IntoView {
    let Ctx { now, utc, .. } = ctx();
    view! {
        <time title=move || when(utc.get(), since_ms) datetime=format::instant_utc(since_ms)>
            {move || format::duration(now.get() - since_ms)}
        </time>
    }
}

/// When something began, as a duration and the time of day: "1 m 48 s · 09:12:05" (the full
/// instant on hover), so a row lines up with a log.
#[component]
pub fn Since(since_ms: i64) -> impl IntoView {
    let Ctx { now, utc, .. } = ctx();
    view! {
        <time class="since" title=move || when(utc.get(), since_ms) datetime=format::instant_utc(since_ms)>
            {move || format::duration(now.get() - since_ms)}
            <span class="clock">{move || format!(" · {}", clock(utc.get(), since_ms))}</span>
        </time>
    }
}

/// Time left until an instant ("expired" after it), ticking; the absolute time on hover.
#[component]
pub fn Left(at_ms: i64) -> impl IntoView {
    let now = ctx().now;
    view! {
        <time class="countdown" title=move || when(ctx().utc.get(), at_ms)>
            {move || {
                let left = at_ms - now.get();
                if left > 0 { format::duration(left) } else { "expired".to_string() }
            }}
        </time>
    }
}

/// An arrowhead for SVG paths (`marker-end="url(#<id>)"`), coloured by the page's CSS.
pub fn arrow_marker(id: &'static str) -> impl IntoView {
    view! {
        <defs>
            <marker id=id viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
                <path d="M 0 0 L 10 5 L 0 10 z"></path>
            </marker>
        </defs>
    }
}

/// A lock's path linked to its page.
#[component]
pub fn LockLink(id: String, path: String) -> impl IntoView {
    let href = crate::api::at(&format!("/locks/{id}"));
    view! { <a class="locklink" href=href title=path.clone()>{format::middle_ellipsis(&path, 64)}</a> }
}

/// Reads `url` whenever `trigger` changes, at most one request in flight (changes during one
/// cause one more), into `answer`; a request starts no sooner than `gap` after the one before
/// (a busy cluster changes the live views many times a second: the reads stay few).
pub fn keep_reading<T: DeserializeOwned + Send + Sync + 'static>(
    url: impl Fn() -> String + Send + Sync + 'static,
    trigger: impl Fn() + Send + Sync + 'static,
    answer: RwSignal<Option<Result<T, String>>>,
    gap: Duration,
) {
    let busy = StoredValue::new(false);
    let again = StoredValue::new(false);
    let url = std::sync::Arc::new(url);
    Effect::new(move |_| {
        trigger();
        let target = url();
        if busy.get_value() {
            again.set_value(true);
            return;
        }
        run(target, url.clone(), busy, again, answer, gap);
    });
}

/// One read of [`keep_reading`], and the next one when more changes came meanwhile.
fn run<T: DeserializeOwned + Send + Sync + 'static>(
    target: String,
    url: std::sync::Arc<dyn Fn() -> String + Send + Sync>,
    busy: StoredValue<bool>,
    again: StoredValue<bool>,
    answer: RwSignal<Option<Result<T, String>>>,
    gap: Duration,
) {
    busy.set_value(true);
    let started = crate::api::now_ms();
    spawn_local(async move {
        let got = crate::api::get_json::<T>(&target).await;
        // The page may have gone meanwhile, or asked for another URL (then this answer is
        // not drawn: the one asked for next is).
        if answer.is_disposed() {
            return;
        }
        let current = untrack(|| url());
        if current == target {
            answer.set(Some(got));
        }
        if again.try_get_value() == Some(true) || current != target {
            again.set_value(false);
            let elapsed = crate::api::now_ms() - started;
            let wait = (gap.as_millis() as i64 - elapsed).max(0);
            if wait == 0 || current != target {
                run(current, url, busy, again, answer, gap);
            } else {
                set_timeout(
                    move || {
                        if answer.is_disposed() {
                            return;
                        }
                        let current = untrack(|| url());
                        run(current, url, busy, again, answer, gap);
                    },
                    Duration::from_millis(wait as u64),
                );
            }
        } else {
            busy.try_set_value(false);
        }
    });
}

/// Root blockers, biggest impact first: each one's name (linked to its row on the sessions
/// page, its sessions on hover), sources, whether it is idle in its transaction, how many it
/// holds up, the waits it causes summed (as of the server's answer) and the first lock it
/// holds that others wait on.
#[component]
pub fn RootBlockers(list: Vec<lockscope_model::wire::RootBlockerView>) -> impl IntoView {
    use crate::blockers;
    let items = list
        .into_iter()
        .map(|r| {
            let name = blockers::name(&r);
            let sessions = r
                .sessions
                .iter()
                .map(|s| format!("{}: {}", s.source, s.session))
                .collect::<Vec<_>>()
                .join("\n");
            let href = r.sessions.first().map(|s| {
                crate::api::at(&format!(
                    "/sessions?{}#{}",
                    crate::store::encode(&[
                        ("source", s.source.clone()),
                        ("q", s.session.clone())
                    ]),
                    format::session_anchor(&s.source, &s.session)
                ))
            });
            let idle = blockers::idle_in_transaction(&r).then(|| view! {
                " "
                <span class="badge idle-trx" title="Its connection is idle in its transaction: it holds its locks until its program commits or rolls back, and nothing it runs will end that">
                    "idle in transaction"
                </span>
            });
            let waited = (r.waited_ms > 0).then(|| {
                format!(" · waits summed {}", format::duration(r.waited_ms))
            });
            let more = r.locks.len().saturating_sub(1);
            let lock = r.locks.first().cloned().map(|id| {
                let path = lockscope_model::id::parse_lock_id(&id)
                    .map_or_else(|| id.clone(), |(_, p)| p);
                view! {
                    " · " <LockLink id=id path=path/>
                    {(more > 0).then(|| format!(" +{more} more"))}
                }
            });
            let label = name.clone();
            view! {
                <li class="root" data-root=name>
                    <a class="root-name" href=href title=sessions>{label}</a>
                    <span class="muted">{format!(" · {}", blockers::sources(&r).join(" + "))}</span>
                    {idle}
                    " · " <strong>{blockers::holding_up(&r)}</strong>
                    {waited}
                    {lock}
                </li>
            }
        })
        .collect_view();
    view! { <ol class="roots">{items}</ol> }
}
