//! The page shell (header, navigation, connection state, theme) and the context and small
//! components every page shares.

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::path;
use lockscope_model::wire::InfoView;

use crate::api::{self, Link};
use crate::format;
use crate::pages::{lock::LockPage, overview::Overview, sessions::Sessions};
use crate::shared::{ctx, Ago, Ctx};

#[component]
pub fn App() -> impl IntoView {
    let ctx = Ctx {
        link: RwSignal::new(Link::Connecting),
        now: RwSignal::new(api::now_ms()),
        info: RwSignal::new(None),
        need_token: RwSignal::new(false),
        utc: RwSignal::new(
            window()
                .local_storage()
                .ok()
                .flatten()
                .and_then(|s| s.get_item("lockscope-time").ok().flatten())
                .as_deref()
                != Some("local"),
        ),
    };
    provide_context(ctx);
    set_interval(move || ctx.now.set(api::now_ms()), Duration::from_secs(1));
    spawn_local(async move {
        match api::get_json::<InfoView>("/api/v1/info").await {
            Ok(info) => ctx.info.set(Some(info)),
            Err(e) if api::is_token_refusal(&e) => ctx.need_token.set(true),
            Err(e) => leptos::logging::warn!("lockscope: {e}"),
        }
    });
    // Keyboard shortcuts: `/` goes to the filter, `?` lists the shortcuts (Esc closes the
    // list). Typing in a field is left alone; `p` (pause) belongs to the overview.
    let help = RwSignal::new(false);
    let keys = window_event_listener(leptos::ev::keydown, move |ev| {
        if ev.key() == "Escape" && help.get_untracked() {
            help.set(false);
            return;
        }
        if crate::shared::typed_in_field(&ev) {
            return;
        }
        match ev.key().as_str() {
            "/" => {
                let field = document()
                    .query_selector("input[name=q]")
                    .ok()
                    .flatten()
                    .and_then(|e| wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(e).ok());
                if let Some(field) = field {
                    ev.prevent_default();
                    let _ = field.focus();
                }
            }
            "?" => help.update(|h| *h = !*h),
            _ => {}
        }
    });
    on_cleanup(move || keys.remove());
    view! {
        <Router base=api::base()>
            <a class="skip" href="#main">"Skip to the locks"</a>
            <header class="top">
                <a class="brand" href=api::at("/")>
                    <img src="assets/favicon.svg" alt="" width="22" height="22"/>
                    "lockscope"
                </a>
                <nav>
                    // `A` takes an absolute href as it is: the base path is added here.
                    <A href=api::at("/") exact=true>"Overview"</A>
                    <A href=api::at("/sessions")>"Sessions"</A>
                    // The API's description, a page lockscope renders itself (not this app's).
                    <a href=api::at("/api-docs") rel="external" title="The API, as OpenAPI 3.1">"API"</a>
                </nav>
                <span class="spacer"></span>
                <LinkState/>
                <TimeToggle/>
                <ThemeToggle/>
            </header>
            <LostBanner/>
            {move || ctx.need_token.get().then(|| view! { <TokenGate/> })}
            {move || help.get().then(|| view! { <Shortcuts close=help/> })}
            <main id="main" tabindex="-1">
                <Routes fallback=|| view! { <p class="empty">"No such page."</p> }>
                    <Route path=path!("/") view=Overview/>
                    <Route path=path!("/sessions") view=Sessions/>
                    <Route path=path!("/locks/:id") view=LockPage/>
                </Routes>
            </main>
        </Router>
    }
}

/// The list of keyboard shortcuts (`?`).
#[component]
fn Shortcuts(close: RwSignal<bool>) -> impl IntoView {
    let dialog = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        if let Some(d) = dialog.get() {
            let _ = d.focus();
        }
    });
    view! {
        <div class="modal-backdrop" on:click=move |_| close.set(false)>
            <div class="modal shortcuts" role="dialog" aria-modal="true" aria-labelledby="shortcuts-title"
                tabindex="-1" node_ref=dialog on:click=|ev| ev.stop_propagation()>
                <h2 id="shortcuts-title">"Keyboard shortcuts"</h2>
                <dl>
                    <dt><kbd>"/"</kbd></dt><dd>"Go to the filter"</dd>
                    <dt><kbd>"p"</kbd></dt><dd>"Pause or resume the locks table (the overview)"</dd>
                    <dt><kbd>"?"</kbd></dt><dd>"Show or hide this list"</dd>
                    <dt><kbd>"Esc"</kbd></dt><dd>"Close a dialog; focus returns where it was"</dd>
                    <dt><kbd>"Tab"</kbd></dt><dd>"Move between controls; every control shows where the focus is"</dd>
                </dl>
                <div class="actions"><button on:click=move |_| close.set(false)>"Close"</button></div>
            </div>
        </div>
    }
}

/// The stream's state in the header.
#[component]
fn LinkState() -> impl IntoView {
    let Ctx { link, .. } = ctx();
    move || {
        match link.get() {
        Link::Live => view! {
            <span class="link live" title="Updates are pushed by the server as they happen">"live"</span>
        }
        .into_any(),
        Link::Connecting => view! { <span class="link connecting">"connecting…"</span> }.into_any(),
        Link::Lost { .. } => view! { <span class="link lost">"disconnected"</span> }.into_any(),
    }
    }
}

/// A bar under the header while the stream is down: what is shown may be out of date.
#[component]
fn LostBanner() -> impl IntoView {
    let Ctx { link, now, .. } = ctx();
    move || match link.get() {
        Link::Lost {
            since_ms,
            retry_at_ms,
        } => view! {
            <div class="banner lost" role="alert">
                "Connection to lockscope lost "
                <Ago since_ms=since_ms/>
                " ago; what you see may be out of date. "
                {move || {
                    let left = retry_at_ms - now.get();
                    if left > 0 {
                        format!("Retrying in {}.", format::duration(left))
                    } else {
                        "Retrying…".to_string()
                    }
                }}
            </div>
        }
        .into_any(),
        _ => ().into_any(),
    }
}

/// Asks for the read token a server with `[admin] read_tokens` requires, then starts over.
#[component]
fn TokenGate() -> impl IntoView {
    let token = RwSignal::new(String::new());
    let had_one = api::read_token().is_some();
    view! {
        <form
            class="banner token-gate"
            on:submit=move |ev| {
                ev.prevent_default();
                api::set_read_token(token.get_untracked().trim());
                let _ = window().location().reload();
            }
        >
            <strong>"This lockscope requires a read token."</strong>
            {had_one.then_some(" The token this browser gave was refused.")}
            " Give a read token, not an admin token: the live stream carries it in its URL."
            " "
            <input
                type="password"
                name="read-token"
                placeholder="read token"
                autocomplete="off"
                prop:value=move || token.get()
                on:input=move |ev| token.set(event_target_value(&ev))
            />
            <button type="submit">"Use token"</button>
        </form>
    }
}

/// Light/dark switch; the choice is remembered, the default follows the system.
#[component]
fn TimeToggle() -> impl IntoView {
    let Ctx { utc, .. } = ctx();
    view! {
        <button class="time-zone" aria-pressed=move || utc.get().to_string()
            title="Absolute times in UTC or in this browser's local time"
            on:click=move |_| {
                utc.update(|u| *u = !*u);
                if let Some(storage) = window().local_storage().ok().flatten() {
                    let _ = storage.set_item("lockscope-time", if utc.get_untracked() { "utc" } else { "local" });
                }
            }>
            {move || if utc.get() { "times: UTC" } else { "times: local" }}
        </button>
    }
}

#[component]
fn ThemeToggle() -> impl IntoView {
    let dark = RwSignal::new(initial_dark());
    Effect::new(move |_| apply_theme(dark.get()));
    view! {
        <button
            class="theme"
            title="Switch between light and dark theme"
            on:click=move |_| {
                dark.update(|d| *d = !*d);
                if let Some(storage) = window().local_storage().ok().flatten() {
                    let _ = storage
                        .set_item("lockscope-theme", if dark.get_untracked() { "dark" } else { "light" });
                }
            }
        >
            {move || if dark.get() { "☀ light" } else { "☾ dark" }}
        </button>
    }
}

fn initial_dark() -> bool {
    let stored = window()
        .local_storage()
        .ok()
        .flatten()
        .and_then(|s| s.get_item("lockscope-theme").ok().flatten());
    match stored.as_deref() {
        Some("dark") => true,
        Some("light") => false,
        _ => window()
            .match_media("(prefers-color-scheme: dark)")
            .ok()
            .flatten()
            .is_some_and(|m| m.matches()),
    }
}

fn apply_theme(dark: bool) {
    if let Some(root) = document().document_element() {
        let _ = root.set_attribute("data-theme", if dark { "dark" } else { "light" });
    }
}
