//! Live views: `GET /api/v1/events` with a lock query (the parameters of `GET /api/v1/locks`,
//! [`super::query`], or `lock=ID` for one lock) streams that page and what changes it, instead of
//! every lock.
//!
//! * First a `snapshot` event: the page (`locks`), `total`, `facets`, `next` and the sources.
//! * Then, at most [`PUSHES_PER_SECOND`] times a second and only when the locks changed: `lock`
//!   for a lock that entered the page or changed inside it, `removed` for one that left it (gone,
//!   or out of the filter or the page), `view` with `total`, `facets` and `next` when they
//!   changed, `source` for a source that changed. Changes between two pushes are coalesced:
//!   the page is computed again and compared with the one the client has, so the latest state
//!   wins and a lock that came and went between two pushes costs nothing.
//! * A lock "changed" when its record or its stale findings did; durations tick in the browser.
//! * A client that cannot keep up (what it was sent and has not taken passes [`QUEUED_MAX`]
//!   bytes, or [`CLIENT_BUFFER`] events) gets nothing more queued: its push is dropped, and once
//!   it has taken what it holds it is sent a fresh `snapshot`. What a client costs is a page or
//!   two, never the whole lock table.
//! * Clients asking for the same view (same query, page size and cursor) share one computation
//!   per published version of the lock table ([`ViewCache`]), renewed at least every
//!   [`PAGE_FRESH_MS`] so the `next` cursor a page hands out has half its life left; an open
//!   view is pushed the renewed `next` (a `view` event) as often.
//! * Compressed when the client asks (zstd or gzip) by tower-http's compression layer, whose
//!   encoder flushes whenever the stream has nothing more ready: each push arrives whole and at
//!   once (the router's predicate admits event streams, `http::compressed`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event;
use lockscope_model::rules::Judge;
use lockscope_model::wire::{
    self, LockView, SourceView, ViewLock, ViewRemoved, ViewSnapshot, ViewSource, ViewTotals,
};

use super::query::{self, LockQuery, Page};
use lockscope_core::aggregate::{Snapshot, StoredLock};

/// Pushes per client per second, at most.
pub const PUSHES_PER_SECOND: u32 = 5;
/// Pushes a client's stream holds before it counts as slow; a push of more than a quarter of
/// this many events is sent as a fresh snapshot instead.
pub const CLIENT_BUFFER: usize = 256;
/// Distinct views whose latest page is kept for other clients.
const VIEWS_CACHED: usize = 256;

/// One computed page of a view at a version of the lock table.
struct Computed {
    version: u64,
    /// The lock table it was computed from (what its clients' records are compared with).
    snapshot: Arc<Snapshot>,
    /// When it was computed (epoch ms): its `next` cursor was handed out then.
    at: i64,
    page: Arc<Page>,
    /// The query's answer kept current from the index (none for `lock=`, one lock).
    state: Option<super::index::ViewState>,
}

/// How long a computed page (and the cursor in it) is handed out before it is computed again,
/// even if no lock changed: half a cursor's life, so a `next` a client holds always has at
/// least that long to be used. An open view is pushed a fresh `next` as often.
const PAGE_FRESH_MS: i64 = super::paging::CURSOR_TTL_MS / 2;

/// The latest page of each view, computed once per table version for every client asking, and
/// the live views open now: each distinct query costs a computation per push, so at most
/// `max_live` of them are open at once, and a new one past it ends the least recently opened
/// one (its clients reconnect), so many different filters cannot starve everyone else.
#[derive(Default)]
pub struct ViewCache {
    views: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Computed>>>>>,
    live: std::sync::Mutex<Live>,
    /// Open view streams.
    open: std::sync::atomic::AtomicU64,
    /// Clients resynced since the start.
    resyncs: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for ViewCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewCache").finish_non_exhaustive()
    }
}

/// The live views open now, by key.
#[derive(Default)]
struct Live {
    /// 0: no cap.
    max: usize,
    next: u64,
    views: HashMap<String, LiveView>,
    /// Live views ended to make room, since the start.
    evicted: u64,
}

struct LiveView {
    id: u64,
    clients: usize,
    /// When a client last opened it.
    opened: std::time::Instant,
    /// Turns `true` when it is ended to make room.
    evict: tokio::sync::watch::Sender<bool>,
}

/// A client's hold on a live view: the view stays counted while it lives.
pub struct LiveGuard {
    cache: Arc<ViewCache>,
    key: String,
    id: u64,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        let mut live = self.cache.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(view) = live.views.get_mut(&self.key).filter(|v| v.id == self.id) {
            view.clients -= 1;
            if view.clients == 0 {
                live.views.remove(&self.key);
            }
        }
    }
}

impl ViewCache {
    /// A cache whose live views are at most `max_live` (`[http] max_live_views`).
    pub fn with_max_live(max_live: usize) -> Self {
        let cache = ViewCache::default();
        cache.live.lock().unwrap_or_else(|e| e.into_inner()).max = max_live;
        cache
    }

    /// A client opens the live view `key`: its guard, and what turns `true` if the view is
    /// ended to make room for another.
    pub fn join(self: &Arc<Self>, key: &str) -> (LiveGuard, tokio::sync::watch::Receiver<bool>) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if !live.views.contains_key(key) && live.max > 0 && live.views.len() >= live.max {
            let oldest = live
                .views
                .iter()
                .min_by_key(|(_, v)| v.opened)
                .map(|(k, _)| k.clone());
            if let Some(view) = oldest.and_then(|k| live.views.remove(&k)) {
                let _ = view.evict.send(true);
                live.evicted += 1;
            }
        }
        live.next += 1;
        let next = live.next;
        let view = live
            .views
            .entry(key.to_string())
            .or_insert_with(|| LiveView {
                id: next,
                clients: 0,
                opened: std::time::Instant::now(),
                evict: tokio::sync::watch::channel(false).0,
            });
        view.clients += 1;
        view.opened = std::time::Instant::now();
        let guard = LiveGuard {
            cache: self.clone(),
            key: key.to_string(),
            id: view.id,
        };
        (guard, view.evict.subscribe())
    }

    /// Distinct live views open now, and those ended to make room since the start.
    pub fn live_counts(&self) -> (usize, u64) {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        (live.views.len(), live.evicted)
    }

    /// Open view streams, and clients resynced since the start.
    pub fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.open.load(Relaxed), self.resyncs.load(Relaxed))
    }

    /// The page of `query` (named `key`) in `snapshot`: computed by the first client to ask
    /// for this version, reused by the others.
    /// The page of `query` (named `key`) at version `seen` of the lock table or later, and the
    /// table it was computed from: computed by the first client to ask, from the newest table
    /// at that moment, and reused by the others. (Computing from the newest table, not the
    /// asker's, keeps clients arriving while the table changes from computing one page each,
    /// one after the other.)
    async fn page(
        &self,
        key: &str,
        query: &LockQuery,
        snapshots: &tokio::sync::watch::Receiver<Arc<Snapshot>>,
        seen: u64,
        judge: Arc<Judge>,
    ) -> Option<(Arc<Page>, Arc<Snapshot>)> {
        let slot = {
            let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
            if views.len() >= VIEWS_CACHED && !views.contains_key(key) {
                // Views nobody computes any more go first; at worst the map starts over.
                views.retain(|_, slot| Arc::strong_count(slot) > 1);
                if views.len() >= VIEWS_CACHED {
                    views.clear();
                }
            }
            views.entry(key.to_string()).or_default().clone()
        };
        let mut computed = slot.lock().await;
        let now = lockscope_core::now_ms();
        if let Some(done) = computed
            .as_ref()
            .filter(|c| c.version >= seen && now - c.at < PAGE_FRESH_MS)
        {
            return Some((done.page.clone(), done.snapshot.clone()));
        }
        let snapshot = snapshots.borrow().clone();
        let version = snapshot.version;
        let query = query.clone();
        let table = snapshot.clone();
        // The answer kept from the last push, advanced by what changed since (a pass the first
        // time); taken out so that a computation that fails leaves none to trust.
        let state = computed.take().and_then(|c| c.state);
        let key_text = key.to_string();
        let (page, state) = tokio::task::spawn_blocking(move || {
            let snapshot = table;
            let now = lockscope_core::now_ms();
            let started = std::time::Instant::now();
            let _slow = SlowView {
                key: &key_text,
                started,
            };
            if query.id.is_some() {
                let views = query.candidates(&snapshot, now, &judge);
                return (query::page(&query, views, now), None);
            }
            let state = match state {
                Some(state) => state.advance(snapshot, now),
                None => super::index::ViewState::compute(&query, snapshot, now),
            };
            (state.page(&judge), Some(state))
        })
        .await
        .ok()?;
        let page = Arc::new(page);
        *computed = Some(Computed {
            version,
            snapshot: snapshot.clone(),
            at: now,
            page: page.clone(),
            state,
        });
        Some((page, snapshot))
    }
}

/// Logs a view's page that took more than [`SLOW_VIEW`] to compute, when it is dropped.
struct SlowView<'a> {
    key: &'a str,
    started: std::time::Instant,
}

/// A page computation longer than this is logged.
const SLOW_VIEW: Duration = Duration::from_millis(500);

impl Drop for SlowView<'_> {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        if took > SLOW_VIEW {
            tracing::warn!(
                view = self.key,
                took_ms = took.as_millis() as u64,
                "a live view's page took long to compute"
            );
        }
    }
}

/// Whether a pair is the query's own (not the read token and such).
fn own((name, _): &&(String, String)) -> bool {
    !super::paging::PASSED_THROUGH.contains(&name.as_str())
}

/// The name a view is cached under: its query string without the read token, parameters in
/// order.
pub fn view_key(pairs: &[(String, String)]) -> String {
    let mut kept: Vec<&(String, String)> = pairs.iter().filter(own).collect();
    kept.sort();
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(kept.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .finish()
}

/// Whether a query string asks for a view (anything but the read token).
pub fn wants_view(pairs: &[(String, String)]) -> bool {
    pairs.iter().any(|pair| own(&pair))
}

/// What a client was last sent of a lock in its page: its record and stale rules.
#[derive(PartialEq)]
struct Shown {
    record: Option<StoredLock>,
    stale: Vec<String>,
}

fn shown(snapshot: &Snapshot, lock: &LockView) -> Shown {
    Shown {
        record: snapshot
            .locks
            .get(lock.id.as_str())
            .map(|e| e.stored.clone()),
        stale: lock.stale.iter().map(|s| s.rule.clone()).collect(),
    }
}

/// What the client has.
struct Sent {
    locks: HashMap<String, Shown>,
    totals: ViewTotals,
    sources: Vec<SourceView>,
}

fn totals(page: &Page) -> ViewTotals {
    ViewTotals {
        total: page.total,
        facets: page.facets.clone(),
        next: page.next.clone(),
    }
}

/// One event of a view: its name and JSON data.
#[derive(Debug, Clone)]
pub struct ViewEvent {
    pub name: &'static str,
    pub data: String,
}

impl ViewEvent {
    /// As an axum SSE event.
    pub fn sse(&self) -> Event {
        Event::default().event(self.name).data(&self.data)
    }
}

/// The events of one push, written out together (a compressed stream is flushed after each).
pub type Batch = Vec<ViewEvent>;

/// The bytes of a batch's data (what it costs while queued).
pub fn batch_bytes(batch: &Batch) -> usize {
    batch.iter().map(|e| e.data.len()).sum()
}

/// `event` as it goes on the wire ([`wire::ViewEvent`], the one definition of a view's events).
fn event(event: wire::ViewEvent) -> ViewEvent {
    ViewEvent {
        name: event.name(),
        data: event.data().unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot serialise a view event");
            "{}".into()
        }),
    }
}

fn snapshot_event(page: &Page, sources: &[SourceView]) -> ViewEvent {
    event(wire::ViewEvent::Snapshot(ViewSnapshot {
        sources: sources.to_vec(),
        locks: page.locks.clone(),
        total: page.total,
        facets: page.facets.clone(),
        next: page.next.clone(),
    }))
}

fn sent_of(snapshot: &Snapshot, page: &Page) -> Sent {
    Sent {
        locks: page
            .locks
            .iter()
            .map(|l| (l.id.clone(), shown(snapshot, l)))
            .collect(),
        totals: totals(page),
        sources: snapshot.sources.clone(),
    }
}

/// The events that take a client from `sent` to `now`, the client's side of `page`.
fn changes(page: &Page, sent: &Sent, now: &Sent) -> Batch {
    let mut events = Vec::new();
    for source in &now.sources {
        if !sent.sources.contains(source) {
            events.push(event(wire::ViewEvent::Source(ViewSource {
                source: source.clone(),
            })));
        }
    }
    for id in sent.locks.keys().filter(|id| !now.locks.contains_key(*id)) {
        events.push(event(wire::ViewEvent::Removed(ViewRemoved {
            id: id.clone(),
        })));
    }
    for lock in &page.locks {
        if sent.locks.get(&lock.id) != now.locks.get(&lock.id) {
            events.push(event(wire::ViewEvent::Lock(ViewLock {
                lock: Box::new(lock.clone()),
            })));
        }
    }
    if now.totals != sent.totals {
        events.push(event(wire::ViewEvent::Totals(now.totals.clone())));
    }
    events
}

/// What a client's stream holds and has not written out yet, in bytes of event data.
#[derive(Debug, Default)]
pub struct Queued {
    bytes: std::sync::atomic::AtomicUsize,
    taken: tokio::sync::Notify,
}

impl Queued {
    fn add(&self, n: usize) {
        self.bytes.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// A batch of `n` bytes of event data was taken by the response body.
    pub fn took(&self, n: usize) {
        self.bytes.fetch_sub(n, std::sync::atomic::Ordering::SeqCst);
        self.taken.notify_waiters();
    }

    fn get(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Until everything queued was taken.
    async fn drained(&self) {
        loop {
            let taken = self.taken.notified();
            if self.get() == 0 {
                return;
            }
            taken.await;
        }
    }
}

/// Event data a client's stream may hold before it counts as slow (a page of 1,000 locks is
/// ~1 MB).
pub const QUEUED_MAX: usize = 2 << 20;

/// Everything one view's stream needs.
pub struct ViewStream {
    pub key: String,
    pub query: LockQuery,
    pub cache: Arc<ViewCache>,
    pub snapshots: tokio::sync::watch::Receiver<Arc<Snapshot>>,
    pub judge: Arc<Judge>,
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Turns `true` when this view is ended to make room for another ([`ViewCache::join`]).
    pub evicted: tokio::sync::watch::Receiver<bool>,
    pub queued: Arc<Queued>,
}

impl ViewStream {
    /// Runs the view into `tx` until the client goes or lockscope stops.
    pub async fn run(mut self, tx: tokio::sync::mpsc::Sender<Batch>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.cache.open.fetch_add(1, Relaxed);
        self.serve(tx).await;
        self.cache.open.fetch_sub(1, Relaxed);
    }

    async fn serve(&mut self, tx: tokio::sync::mpsc::Sender<Batch>) {
        let (stopping, evicted) = (self.stopping.clone(), self.evicted.clone());
        let stop = async move {
            tokio::select! {
                () = super::stopped(stopping) => {}
                () = super::stopped(evicted) => {}
            }
        };
        tokio::pin!(stop);
        let mut sent: Option<Sent> = None;
        let every = Duration::from_secs(1) / PUSHES_PER_SECOND;
        loop {
            let snapshot: Arc<Snapshot> = self.snapshots.borrow_and_update().clone();
            let seen = snapshot.version;
            let Some((page, snapshot)) = self
                .cache
                .page(
                    &self.key,
                    &self.query,
                    &self.snapshots,
                    seen,
                    self.judge.clone(),
                )
                .await
            else {
                return;
            };
            let now = sent_of(&snapshot, &page);
            let events = match sent.as_ref().map(|sent| changes(&page, sent, &now)) {
                Some(events) if events.len() <= CLIENT_BUFFER / 4 => events,
                // First, after a resync, or most of the page changed: the page in one event.
                _ => vec![snapshot_event(&page, &snapshot.sources)],
            };
            let bytes = batch_bytes(&events);
            let queued = self.queued.get();
            // All of a push or none: a client still holding much of what it was sent is behind.
            let room = queued == 0 || queued + bytes <= QUEUED_MAX;
            match tx.try_reserve() {
                Ok(permit) if room => {
                    if !events.is_empty() {
                        self.queued.add(bytes);
                        permit.send(events);
                    }
                    sent = Some(now);
                }
                Ok(_) | Err(tokio::sync::mpsc::error::TrySendError::Full(())) => {
                    // Nothing more queued for it: once it has taken what it holds, a fresh
                    // snapshot.
                    sent = None;
                    self.cache
                        .resyncs
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::select! {
                        () = self.queued.drained() => {}
                        () = tx.closed() => return,
                        () = &mut stop => return,
                    }
                    continue;
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(())) => return,
            }
            let last_push = tokio::time::Instant::now();
            // The next push: once the table changed (or the page's cursor is due for renewal),
            // and not before its turn.
            tokio::select! {
                changed = self.snapshots.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(Duration::from_millis(PAGE_FRESH_MS.unsigned_abs())) => {}
                () = tx.closed() => return,
                () = &mut stop => return,
            }
            tokio::select! {
                () = tokio::time::sleep_until(last_push + every) => {}
                () = tx.closed() => return,
                () = &mut stop => return,
            }
        }
    }
}

/// The channel a view stream writes into.
pub fn channel() -> (
    tokio::sync::mpsc::Sender<Batch>,
    tokio::sync::mpsc::Receiver<Batch>,
) {
    tokio::sync::mpsc::channel(CLIENT_BUFFER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_are_named_by_their_query_without_the_token() {
        let a = vec![
            ("q".to_string(), "x".to_string()),
            ("access_token".to_string(), "t".to_string()),
            ("limit".to_string(), "5".to_string()),
        ];
        let b = vec![
            ("limit".to_string(), "5".to_string()),
            ("q".to_string(), "x".to_string()),
        ];
        assert_eq!(view_key(&a), view_key(&b));
        assert!(wants_view(&b));
        assert!(!wants_view(&[(
            "access_token".to_string(),
            "t".to_string()
        )]));
    }
}
