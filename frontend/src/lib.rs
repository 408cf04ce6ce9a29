//! lockscope's web UI: a Leptos app compiled to WebAssembly and served by the `lockscope` binary.
//!
//! It owns presentation only. Its data is the server's wire types (`lockscope_model::wire`): each
//! page opens the live view it shows ([`api::ViewStream`]: a page of locks filtered, sorted and
//! cut by the server, or one lock) into a [`store::View`], so the browser holds what it shows,
//! never every lock; verdicts such as "stale" or "possible deadlock" come from
//! `lockscope_model::rules`, the same functions the server uses. It never changes anything on a
//! cluster by itself.
//!
//! Code map: [`app`] (shell: header, banners, theme), [`shared`] (context and small components
//! every page uses), [`pages`] (overview, lock, sessions),
//! [`graph`] (SVG geometry), [`store`] (a view's state, the overview's query and its URL), [`format`] (times and names),
//! [`dbtext`] (database lock flags and release effects in words), [`flagtext`] (the other
//! backends' flags in words), [`blockers`] (root blockers in words, and whose root a waiter
//! is). `graph`, `store`, `format`, `dbtext` and `blockers` are pure and unit-tested on the
//! host.

pub mod api;
pub mod app;
pub mod blockers;
pub mod dbtext;
pub mod flagtext;
pub mod format;
pub mod graph;
pub mod pages;
pub mod shared;
pub mod store;

use wasm_bindgen::prelude::*;

/// Entry point: the generated JS glue calls this once the wasm is instantiated.
#[wasm_bindgen(start)]
pub fn start() {
    console_panic_hook();
    leptos::mount::mount_to_body(app::App);
}

/// Panics go to the browser console with their message, not as "unreachable executed".
fn console_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        web_sys::console::error_1(&format!("lockscope UI panicked: {info}").into());
    }));
}
