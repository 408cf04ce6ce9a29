//! What every page shares: the context ([`Ctx`]: the view stream's state, the clock, the
//! server's info, whether a read token is wanted) and small components (relative times, a
//! lock's link, an arrowhead). Pages and the shell both import it; it imports neither.

use leptos::prelude::*;
use lockscope_model::wire::InfoView;

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
