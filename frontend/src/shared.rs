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
}

impl Ctx {
    /// The stale-hold limit the server judges by (its default until `/api/v1/info` answers).
    pub fn stale_hold_ms(&self) -> i64 {
        self.info
            .with(|i| i.as_ref().map_or(300_000, |i| i.stale_hold_ms))
    }
}

pub fn ctx() -> Ctx {
    expect_context::<Ctx>()
}

/// "12 s" since an instant, ticking; the absolute time on hover.
#[component]
pub fn Ago(since_ms: i64) -> impl IntoView {
    let now = ctx().now;
    view! {
        <time title=format::instant_utc(since_ms)>
            {move || format::duration(now.get() - since_ms)}
        </time>
    }
}

/// Time left until an instant ("expired" after it), ticking; the absolute time on hover.
#[component]
pub fn Left(at_ms: i64) -> impl IntoView {
    let now = ctx().now;
    view! {
        <time class="countdown" title=format::instant_utc(at_ms)>
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
