//! Talking to the lockscope server: JSON reads over `fetch`, and live views
//! (`/api/v1/events?<query>`, Server-Sent Events) that keep a page's [`View`] current.
//!
//! Each page opens the one view it shows (the overview its page of locks, a lock page its one
//! lock) and closes it when it goes; the server pushes only what changes that page. Events are
//! applied in batches (at most one re-render per [`BATCH`]) so a busy cluster does not
//! re-render per change. A dropped stream is shown and re-opened with a growing delay; the
//! server starts every stream with a snapshot of the view, so nothing is missed across a
//! reconnect. A query the server refuses (a bad parameter, an expired cursor) is not retried:
//! the page is told why ([`Refusal`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use leptos::prelude::*;
use serde::de::DeserializeOwned;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::store::{View, ViewEvent};

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

/// The path lockscope is served under (`[http] base_path`, e.g. `/lockscope`; empty at the root),
/// from the `<base href>` the server writes into `index.html`.
pub fn base() -> String {
    thread_local! {
        static BASE: String = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.query_selector("base").ok().flatten())
            .and_then(|b| b.get_attribute("href"))
            .map(|href| href.trim_end_matches('/').to_string())
            .unwrap_or_default();
    }
    BASE.with(Clone::clone)
}

/// `path` (absolute: `/api/v1/…`, `/locks/…`) under the base path, for requests and plain links.
pub fn at(path: &str) -> String {
    if path.starts_with('/') {
        format!("{}{path}", base())
    } else {
        path.to_string()
    }
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

/// Starts a GET of `url`, with the read token in a header when this browser has one.
fn read(url: &str) -> Result<js_sys::Promise, String> {
    let url = &at(url);
    let window = web_sys::window().ok_or("no window")?;
    let Some(token) = read_token() else {
        return Ok(window.fetch_with_str(url));
    };
    let init = web_sys::RequestInit::new();
    let headers = web_sys::Headers::new().map_err(|_| "cannot build headers")?;
    headers
        .set("Authorization", &format!("Bearer {token}"))
        .map_err(|_| "the read token contains characters a header cannot carry")?;
    init.set_headers(&headers);
    let request = web_sys::Request::new_with_str_and_init(url, &init).map_err(|_| "bad request")?;
    Ok(window.fetch_with_request(&request))
}

/// GETs `url` and decodes its JSON; the error is a sentence for the page (starting with the
/// status for HTTP errors).
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    let (response, text) = fetch_text(url, read(url)?).await?;
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
    let request =
        web_sys::Request::new_with_str_and_init(&at(url), &init).map_err(|_| "bad request")?;
    let (response, text) = fetch_text(url, window.fetch_with_request(&request)).await?;
    let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    Ok((response.status(), value))
}

/// Why a view cannot be shown: the server's answer to its query (a 4xx), and the parameter it
/// names.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
    pub parameter: Option<String>,
}

/// A live view's stream (`/api/v1/events?<query>`), kept open (re-opened with a growing delay
/// after a drop) until this handle is dropped: the page that opened it went, or asked for
/// another view.
pub struct ViewStream {
    state: Rc<StreamState>,
}

/// A JS callback for an `EventSource` event.
type Listener = Closure<dyn Fn(web_sys::MessageEvent)>;

struct StreamState {
    query: String,
    view: RwSignal<View>,
    link: RwSignal<Link>,
    refused: RwSignal<Option<Refusal>>,
    source: RefCell<Option<web_sys::EventSource>>,
    /// The open source's listeners, dropped with it.
    listeners: RefCell<Vec<Listener>>,
    pending: RefCell<Vec<ViewEvent>>,
    /// Whether the current connection delivered its snapshot (a refusal can only come before).
    opened: Cell<bool>,
    closed: Cell<bool>,
}

impl Drop for ViewStream {
    fn drop(&mut self) {
        self.state.closed.set(true);
        if let Some(source) = self.state.source.borrow_mut().take() {
            source.close();
        }
        self.state.listeners.borrow_mut().clear();
    }
}

impl ViewStream {
    /// Opens the view of `query` (a lock query's string, without `?`) into `view`; `link`
    /// shows the stream's state, `refused` why the server will not serve the query.
    pub fn open(
        query: String,
        view: RwSignal<View>,
        link: RwSignal<Link>,
        refused: RwSignal<Option<Refusal>>,
    ) -> ViewStream {
        let state = Rc::new(StreamState {
            query,
            view,
            link,
            refused,
            source: RefCell::default(),
            listeners: RefCell::default(),
            pending: RefCell::default(),
            opened: Cell::new(false),
            closed: Cell::new(false),
        });
        link.set(Link::Connecting);
        connect(&state, 0);
        ViewStream { state }
    }
}

fn connect(state: &Rc<StreamState>, attempt: u32) {
    if state.closed.get() {
        return;
    }
    // Until this connection's snapshot: an error may be a refusal (an expired cursor, a token
    // no longer valid), so it is asked about before it is retried.
    state.opened.set(false);
    // EventSource cannot send headers: the read token, when there is one, goes in the query.
    let mut url = at(&format!("/api/v1/events?{}", state.query));
    if let Some(token) = read_token() {
        url.push_str(&format!("&access_token={}", crate::store::percent(&token)));
    }
    let Ok(source) = web_sys::EventSource::new(&url) else {
        retry(state, attempt);
        return;
    };
    let mut listeners = Vec::new();
    for name in ViewEvent::NAMES {
        let weak = Rc::downgrade(state);
        let on_event = Listener::new(move |e: web_sys::MessageEvent| {
            let (Some(state), Some(data)) = (weak.upgrade(), e.data().as_string()) else {
                return;
            };
            match ViewEvent::parse(name, &data) {
                Ok(event) => enqueue(&state, event),
                Err(err) => leptos::logging::warn!("lockscope: {err}"),
            }
        });
        let _ = source.add_event_listener_with_callback(name, on_event.as_ref().unchecked_ref());
        listeners.push(on_event);
    }
    let weak = Rc::downgrade(state);
    let on_open = Listener::new(move |_| {
        if let Some(state) = weak.upgrade() {
            state.link.set(Link::Live);
        }
    });
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    listeners.push(on_open);
    let weak = Rc::downgrade(state);
    let failed = Rc::new(Cell::new(false));
    let on_error = Listener::new(move |_| {
        // The browser retries by itself after a network error, but not after an HTTP error
        // or at its own pace; close and re-open on our schedule so the header can say when.
        let Some(state) = weak.upgrade() else { return };
        if failed.replace(true) || state.closed.get() {
            return;
        }
        if let Some(source) = state.source.borrow_mut().take() {
            source.close();
        }
        let next = if state.link.get_untracked() == Link::Live {
            0
        } else {
            attempt + 1
        };
        if state.opened.get() {
            retry(&state, next);
            return;
        }
        // Never opened: ask the same query of `GET /api/v1/locks` to learn why (a bad
        // parameter or an expired cursor is not worth retrying).
        let state = state.clone();
        leptos::task::spawn_local(async move {
            let answer = refusal(&format!("/api/v1/locks?{}", state.query)).await;
            if state.closed.get() {
                return;
            }
            match answer {
                // A read token is wanted: the shell asks for it; keep trying meanwhile.
                Some(r) if r.status == 401 || r.status == 403 => retry(&state, next),
                Some(r) => {
                    state.link.set(Link::Live);
                    state.refused.set(Some(r));
                }
                None => retry(&state, next),
            }
        });
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    listeners.push(on_error);
    *state.source.borrow_mut() = Some(source);
    *state.listeners.borrow_mut() = listeners;
}

/// The 4xx `url` answers, if it does.
async fn refusal(url: &str) -> Option<Refusal> {
    let (response, text) = fetch_text(url, read(url).ok()?).await.ok()?;
    let status = response.status();
    if !(400..500).contains(&status) {
        return None;
    }
    let body = serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default();
    let field = |name: &str| body.get(name).and_then(|v| v.as_str()).map(str::to_string);
    Some(Refusal {
        status,
        message: field("error").unwrap_or(text),
        parameter: field("parameter"),
    })
}

fn retry(state: &Rc<StreamState>, attempt: u32) {
    if state.closed.get() {
        return;
    }
    let delay = Duration::from_millis((500u64 << attempt.min(4)).min(8_000));
    let since = match state.link.get_untracked() {
        Link::Lost { since_ms, .. } => since_ms,
        _ => now_ms(),
    };
    state.link.set(Link::Lost {
        since_ms: since,
        retry_at_ms: now_ms() + delay.as_millis() as i64,
    });
    let weak = Rc::downgrade(state);
    set_timeout(
        move || {
            if let Some(state) = weak.upgrade() {
                connect(&state, attempt);
            }
        },
        delay,
    );
}

fn enqueue(state: &Rc<StreamState>, event: ViewEvent) {
    if matches!(event, ViewEvent::Snapshot(_)) {
        state.opened.set(true);
        state.refused.set(None);
        state.link.set(Link::Live);
    }
    let first = {
        let mut queue = state.pending.borrow_mut();
        queue.push(event);
        queue.len() == 1
    };
    if first {
        let weak = Rc::downgrade(state);
        set_timeout(
            move || {
                let Some(state) = weak.upgrade() else { return };
                if state.closed.get() {
                    return;
                }
                let batch = std::mem::take(&mut *state.pending.borrow_mut());
                state.view.update(|v| {
                    for event in batch {
                        v.apply(event);
                    }
                    v.seq += 1;
                });
            },
            BATCH,
        );
    }
}
