//! Talking to the lockscope server: JSON reads over `fetch`, and the live event stream
//! (`/api/v1/events`, Server-Sent Events) that keeps the [`Store`] current.
//!
//! The stream is the only source of live data: pages never poll. Events are applied in batches
//! (at most one re-render per [`BATCH`]) so a busy cluster does not re-render per change. A
//! dropped stream is shown and re-opened with a growing delay; the server starts every stream
//! with a full snapshot, so nothing is missed across a reconnect.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use leptos::prelude::*;
use lockscope_model::wire::StreamEvent;
use serde::de::DeserializeOwned;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::store::Store;

const BATCH: Duration = Duration::from_millis(100);

/// State of the event stream, for the header.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    Connecting,
    Live,
    /// Lost at this instant; the next attempt is at `retry_at_ms`.
    Lost {
        since_ms: i64,
        retry_at_ms: i64,
    },
}

pub fn now_ms() -> i64 {
    js_sys::Date::now() as i64
}

/// Runs a fetch and reads the whole body: the response (for its status) and the text.
async fn fetch_text(
    url: &str,
    fetch: js_sys::Promise,
) -> Result<(web_sys::Response, String), String> {
    let response = JsFuture::from(fetch)
        .await
        .map_err(|_| format!("cannot reach lockscope ({url})"))?;
    let response: web_sys::Response = response.dyn_into().map_err(|_| "not a response")?;
    let text = JsFuture::from(response.text().map_err(|_| "unreadable body")?)
        .await
        .map_err(|_| "unreadable body")?
        .as_string()
        .unwrap_or_default();
    Ok((response, text))
}

const READ_TOKEN_KEY: &str = "lockscope-read-token";

/// The read token this browser session was given (servers with `[admin] read_tokens`).
pub fn read_token() -> Option<String> {
    web_sys::window()?
        .session_storage()
        .ok()??
        .get_item(READ_TOKEN_KEY)
        .ok()?
        .filter(|t| !t.is_empty())
}

pub fn set_read_token(token: &str) {
    if let Some(storage) = web_sys::window().and_then(|w| w.session_storage().ok().flatten()) {
        let _ = storage.set_item(READ_TOKEN_KEY, token);
    }
}

/// The answer a server that wants a read token gives without one (or with a wrong one).
pub fn is_token_refusal(error: &str) -> bool {
    error.starts_with("401") || error.starts_with("403")
}

/// GETs `url` and decodes its JSON; the error is a sentence for the page (starting with the
/// status for HTTP errors).
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    let window = web_sys::window().ok_or("no window")?;
    let fetch = match read_token() {
        Some(token) => {
            let init = web_sys::RequestInit::new();
            let headers = web_sys::Headers::new().map_err(|_| "cannot build headers")?;
            headers
                .set("Authorization", &format!("Bearer {token}"))
                .map_err(|_| "the read token contains characters a header cannot carry")?;
            init.set_headers(&headers);
            let request =
                web_sys::Request::new_with_str_and_init(url, &init).map_err(|_| "bad request")?;
            window.fetch_with_request(&request)
        }
        None => window.fetch_with_str(url),
    };
    let (response, text) = fetch_text(url, fetch).await?;
    if !response.ok() {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or(text);
        return Err(format!("{} {}", response.status(), message));
    }
    serde_json::from_str(&text).map_err(|e| format!("unexpected answer from {url}: {e}"))
}

/// POSTs `body` as JSON with a bearer token; the status and the decoded answer.
pub async fn post_json(
    url: &str,
    body: &serde_json::Value,
    token: &str,
) -> Result<(u16, serde_json::Value), String> {
    let window = web_sys::window().ok_or("no window")?;
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(&body.to_string()));
    let headers = web_sys::Headers::new().map_err(|_| "cannot build headers")?;
    headers
        .set("Content-Type", "application/json")
        .map_err(|_| "cannot set a header")?;
    headers
        .set("Authorization", &format!("Bearer {token}"))
        .map_err(|_| "the token contains characters a header cannot carry")?;
    init.set_headers(&headers);
    let request = web_sys::Request::new_with_str_and_init(url, &init).map_err(|_| "bad request")?;
    let (response, text) = fetch_text(url, window.fetch_with_request(&request)).await?;
    let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    Ok((response.status(), value))
}

/// Opens the event stream and keeps it open for the life of the page.
pub fn connect(store: RwSignal<Store>, link: RwSignal<Link>) {
    let pending: Rc<RefCell<Vec<StreamEvent>>> = Rc::default();
    open(store, link, pending, 0);
}

fn open(
    store: RwSignal<Store>,
    link: RwSignal<Link>,
    pending: Rc<RefCell<Vec<StreamEvent>>>,
    attempt: u32,
) {
    // EventSource cannot send headers: the read token, when there is one, goes in the query.
    let url = match read_token() {
        Some(token) => format!(
            "/api/v1/events?access_token={}",
            String::from(js_sys::encode_uri_component(&token))
        ),
        None => "/api/v1/events".to_string(),
    };
    let Ok(source) = web_sys::EventSource::new(&url) else {
        retry(store, link, pending, attempt);
        return;
    };
    let source = Rc::new(source);
    for name in ["snapshot", "lock", "removed", "source"] {
        let pending = pending.clone();
        let on_event =
            Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                let Some(data) = e.data().as_string() else {
                    return;
                };
                match serde_json::from_str::<StreamEvent>(&data) {
                    Ok(event) => enqueue(store, &pending, event),
                    Err(err) => leptos::logging::warn!("lockscope: bad stream event: {err}"),
                }
            });
        let _ = source.add_event_listener_with_callback(name, on_event.as_ref().unchecked_ref());
        on_event.forget();
    }
    let on_open = Closure::<dyn Fn()>::new(move || link.set(Link::Live));
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    on_open.forget();
    let failed = Rc::new(std::cell::Cell::new(false));
    let on_error = {
        let source = source.clone();
        Closure::<dyn Fn()>::new(move || {
            // The browser retries by itself after a network error, but not after an HTTP error
            // or at its own pace; close and re-open on our schedule so the header can say when.
            if failed.replace(true) {
                return;
            }
            source.close();
            let next = if link.get_untracked() == Link::Live {
                0
            } else {
                attempt + 1
            };
            retry(store, link, pending.clone(), next);
        })
    };
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    on_error.forget();
}

fn retry(
    store: RwSignal<Store>,
    link: RwSignal<Link>,
    pending: Rc<RefCell<Vec<StreamEvent>>>,
    attempt: u32,
) {
    let delay = Duration::from_millis((500u64 << attempt.min(4)).min(8_000));
    let since = match link.get_untracked() {
        Link::Lost { since_ms, .. } => since_ms,
        _ => now_ms(),
    };
    link.set(Link::Lost {
        since_ms: since,
        retry_at_ms: now_ms() + delay.as_millis() as i64,
    });
    set_timeout(move || open(store, link, pending, attempt), delay);
}

fn enqueue(store: RwSignal<Store>, pending: &Rc<RefCell<Vec<StreamEvent>>>, event: StreamEvent) {
    let first = {
        let mut queue = pending.borrow_mut();
        queue.push(event);
        queue.len() == 1
    };
    if first {
        let pending = pending.clone();
        set_timeout(
            move || {
                let batch = std::mem::take(&mut *pending.borrow_mut());
                store.update(|s| {
                    for event in batch {
                        s.apply(event);
                    }
                    s.seq += 1;
                });
            },
            BATCH,
        );
    }
}
