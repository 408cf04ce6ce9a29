//! What a page shows of the server's state, and the overview's query. Pure data: the stream
//! handler (the `api` module) applies events, pages read it.
//!
//! * [`View`]: one live view of the server (`GET /api/v1/events` with a lock query): the page
//!   of locks in the server's order, the matching total, the facet counts, the cursor of the
//!   next page, and the sources. The browser never holds more locks than the page it shows.
//! * [`Query`]: the overview's filters, sort and place, as they travel in the browser's URL
//!   (deep links) and, translated, to the server.

use std::cmp::Ordering;

use lockscope_model::wire::{Backend, LockView, SourceView};

/// A view's facet counts, its events and their names: the wire's own types
/// (`lockscope_model::wire`), which the server writes and the API's description derives.
pub use lockscope_model::wire::{LockFacets as Facets, ViewEvent};
use lockscope_model::wire::{ViewLock, ViewRemoved, ViewSource};

/// One live view: a page of locks and what the server counts around it.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The page, in the server's order.
    pub locks: Vec<LockView>,
    pub total: u64,
    pub facets: Facets,
    pub next: Option<String>,
    pub sources: Vec<SourceView>,
    /// A snapshot has arrived.
    pub loaded: bool,
    /// What is shown is the asked query's: false from asking for another view until its
    /// snapshot arrives (the old page stays shown meanwhile, but its cursor is not this one's).
    pub fresh: bool,
    /// Bumped on every applied batch.
    pub seq: u64,
    /// Changes to the page's locks applied so far (a lock changed, entered or left): what a
    /// paused table counts.
    pub changes: u64,
    /// The page's order, for a lock that enters it.
    pub sort: Sort,
}

impl View {
    pub fn new(sort: Sort) -> View {
        View {
            sort,
            ..View::default()
        }
    }

    pub fn apply(&mut self, event: ViewEvent) {
        match event {
            ViewEvent::Snapshot(s) => {
                self.locks = s.locks;
                self.total = s.total;
                self.facets = s.facets;
                self.next = s.next;
                self.sources = s.sources;
                self.loaded = true;
                self.fresh = true;
            }
            ViewEvent::Lock(ViewLock { lock }) => {
                // Entered the page, or changed inside it (perhaps its place: the server orders
                // every push afresh).
                match self.locks.iter_mut().find(|l| l.id == lock.id) {
                    Some(slot) => *slot = *lock,
                    None => self.locks.push(*lock),
                }
                self.changes += 1;
                let sort = self.sort;
                self.locks.sort_by(|a, b| sort.cmp(a, b));
            }
            ViewEvent::Removed(ViewRemoved { id }) => {
                self.locks.retain(|l| l.id != id);
                self.changes += 1;
            }
            ViewEvent::Totals(t) => {
                self.total = t.total;
                self.facets = t.facets;
                self.next = t.next;
            }
            ViewEvent::Source(ViewSource { source }) => {
                match self.sources.iter_mut().find(|s| s.name == source.name) {
                    Some(slot) => *slot = source,
                    None => self.sources.push(source),
                }
            }
        }
    }
}

/// Which locks the overview shows, by what they are doing (the server's `state=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Only {
    #[default]
    All,
    Held,
    Waiting,
    Herd,
    Stale,
    Free,
    Stuck,
}

impl Only {
    /// Each choice, its name in the menu and its `state=` (none for all).
    pub const ALL: [(Only, &'static str, Option<&'static str>); 7] = [
        (Only::All, "all", None),
        (Only::Held, "held", Some("held")),
        (Only::Waiting, "with waiters", Some("waiting")),
        (Only::Herd, "herd", Some("herd")),
        (Only::Stale, "stale", Some("stale")),
        (Only::Free, "free", Some("free")),
        (Only::Stuck, "stuck", Some("stuck")),
    ];

    pub fn state(self) -> Option<&'static str> {
        Only::ALL
            .iter()
            .find(|(o, ..)| *o == self)
            .and_then(|(.., s)| *s)
    }

    pub fn name(self) -> &'static str {
        Only::ALL
            .iter()
            .find(|(o, ..)| *o == self)
            .map_or("all", |(_, n, _)| n)
    }

    fn from_state(state: &str) -> Only {
        Only::ALL
            .iter()
            .find(|(.., s)| *s == Some(state))
            .map_or(Only::All, |(o, ..)| *o)
    }
}

/// Overview columns that sort, each a server `sort=`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SortKey {
    /// Longest wait or hold first: what needs a look.
    #[default]
    Attention,
    Path,
    Source,
    Recipe,
    Held,
    Waiters,
    Wait,
    Watchers,
}

impl SortKey {
    const ALL: [SortKey; 8] = [
        SortKey::Attention,
        SortKey::Path,
        SortKey::Source,
        SortKey::Recipe,
        SortKey::Held,
        SortKey::Waiters,
        SortKey::Wait,
        SortKey::Watchers,
    ];

    /// Its `sort=` on the server.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Attention => "attention",
            SortKey::Path => "path",
            SortKey::Source => "source",
            SortKey::Recipe => "recipe",
            SortKey::Held => "held_for",
            SortKey::Waiters => "waiters",
            SortKey::Wait => "longest_wait",
            SortKey::Watchers => "fan_out",
        }
    }

    /// Whether its natural order (most interesting first) is descending on the server.
    fn descending(self) -> bool {
        !matches!(self, SortKey::Path | SortKey::Source | SortKey::Recipe)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sort {
    pub key: SortKey,
    /// Reverse of the key's natural order (natural = most interesting first).
    pub reversed: bool,
}

/// A lock's place under a sort, as the server computes it (`http/query.rs`).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Place<'a> {
    Number(i64),
    Text(&'a str),
}

impl Sort {
    /// The server's `order=`.
    pub fn order(self) -> &'static str {
        if self.key.descending() != self.reversed {
            "desc"
        } else {
            "asc"
        }
    }

    fn place(self, lock: &LockView) -> Place<'_> {
        // Longer = began earlier: the earliest start negated; nobody there lasted the least.
        let lasted = |starts: &mut dyn Iterator<Item = i64>| {
            Place::Number(starts.min().map_or(i64::MIN, i64::saturating_neg))
        };
        let holds = lock.holders.iter().map(|h| h.since_ms);
        let waits = lock.waiters.iter().map(|w| w.since_ms);
        match self.key {
            SortKey::Path => Place::Text(&lock.path),
            SortKey::Source => Place::Text(&lock.source),
            SortKey::Recipe => Place::Text(&lock.recipe),
            SortKey::Held => lasted(&mut holds.clone()),
            SortKey::Wait => lasted(&mut waits.clone()),
            SortKey::Attention => lasted(&mut holds.chain(waits)),
            SortKey::Waiters => Place::Number(lock.waiters.len() as i64),
            SortKey::Watchers => {
                Place::Number(i64::from(lock.watchers) + i64::from(lock.child_watchers))
            }
        }
    }

    /// Whether `a` comes before `b` on the server's page: by the key in the sort's order, then
    /// by id.
    pub fn cmp(self, a: &LockView, b: &LockView) -> Ordering {
        let by_key = self.place(a).cmp(&self.place(b));
        let by_key = if self.order() == "desc" {
            by_key.reverse()
        } else {
            by_key
        };
        by_key.then_with(|| a.id.cmp(&b.id))
    }
}

/// The overview's query: what its URL says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    pub source: Option<String>,
    pub backend: Option<Backend>,
    pub recipe: Option<String>,
    /// In the path, or a holder's or waiter's session, ignoring case.
    pub text: String,
    pub only: Only,
    pub sort: Sort,
    /// Where the page starts (the server's `next` of the page before); none for the first.
    pub cursor: Option<String>,
    /// How many rows come before this page (for "51–100 of N").
    pub from: usize,
}

impl Query {
    /// Reads a URL's query parameters (`get` answers one by name); what it does not know it
    /// leaves at the default.
    pub fn from_params(get: impl Fn(&str) -> Option<String>) -> Query {
        let text = |name: &str| get(name).filter(|v| !v.is_empty());
        let key = text("sort")
            .and_then(|s| SortKey::ALL.into_iter().find(|k| k.name() == s))
            .unwrap_or_default();
        let natural = if key.descending() { "desc" } else { "asc" };
        let reversed = text("order").is_some_and(|o| o != natural);
        Query {
            source: text("source"),
            backend: text("backend").and_then(|b| Backend::parse(&b)),
            recipe: text("recipe"),
            text: text("q").unwrap_or_default(),
            only: text("state").map_or(Only::All, |s| Only::from_state(&s)),
            sort: Sort { key, reversed },
            cursor: text("cursor"),
            from: text("from").and_then(|f| f.parse().ok()).unwrap_or(0),
        }
    }

    /// The filters, as pairs both the URL and the server take.
    fn filters(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(s) = &self.source {
            pairs.push(("source", s.clone()));
        }
        if let Some(b) = self.backend {
            pairs.push(("backend", b.as_str().to_string()));
        }
        if let Some(r) = &self.recipe {
            pairs.push(("recipe", r.clone()));
        }
        if !self.text.trim().is_empty() {
            pairs.push(("q", self.text.trim().to_string()));
        }
        if let Some(state) = self.only.state() {
            pairs.push(("state", state.to_string()));
        }
        pairs
    }

    /// The browser URL's query string (without `?`): only what differs from the defaults.
    pub fn url(&self) -> String {
        let mut pairs = self.filters();
        if self.sort != Sort::default() {
            pairs.push(("sort", self.sort.key.name().to_string()));
            if self.sort.reversed {
                pairs.push(("order", self.sort.order().to_string()));
            }
        }
        if let Some(c) = &self.cursor {
            pairs.push(("cursor", c.clone()));
            pairs.push(("from", self.from.to_string()));
        }
        encode(&pairs)
    }

    /// The server's query string for this page of `limit` locks.
    pub fn server(&self, limit: usize) -> String {
        let mut pairs = self.filters();
        pairs.push(("sort", self.sort.key.name().to_string()));
        pairs.push(("order", self.sort.order().to_string()));
        pairs.push(("limit", limit.to_string()));
        if let Some(c) = &self.cursor {
            pairs.push(("cursor", c.clone()));
        }
        encode(&pairs)
    }

    /// The same filters and sort, first page.
    pub fn first_page(&self) -> Query {
        Query {
            cursor: None,
            from: 0,
            ..self.clone()
        }
    }
}

/// `name=value&…`, each value percent-encoded (every byte but ASCII letters and digits).
pub fn encode(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// `text` percent-encoded for a URL's query (the `percent-encoding` crate).
pub fn percent(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::wire::{HolderView, WaiterView};

    fn lock(id: &str, held_since: Option<i64>, waiting_since: &[i64]) -> LockView {
        LockView {
            id: id.into(),
            source: "zk".into(),
            backend: Backend::Zookeeper,
            path: format!("/locks/{id}"),
            recipe: "mutex".into(),
            holders: held_since
                .map(|since| HolderView {
                    node: format!("/locks/{id}/h"),
                    session: format!("0x{id}"),
                    since_ms: since,
                    held_ms: 0,
                    mode: None,
                    watchers: 0,
                    reentrancy: None,
                    lease: None,
                    identity: None,
                    version: None,
                    statement: None,
                })
                .into_iter()
                .collect(),
            waiters: waiting_since
                .iter()
                .enumerate()
                .map(|(i, &since)| WaiterView {
                    node: format!("/locks/{id}/w{i}"),
                    session: "0xfeed".into(),
                    since_ms: since,
                    waited_ms: 0,
                    position: i as u32 + 1,
                    mode: None,
                    watches: None,
                    deadline_ms: None,
                    lease: None,
                    identity: None,
                    statement: None,
                })
                .collect(),
            ..LockView::default()
        }
    }

    fn ids(view: &View) -> Vec<&str> {
        view.locks.iter().map(|l| l.id.as_str()).collect()
    }

    #[test]
    fn a_view_keeps_its_page_in_the_servers_order() {
        let mut view = View::new(Sort::default());
        let snapshot =
            r#"{"sources":[],"locks":[],"total":0,"facets":{"state":{"held":0}},"next":null}"#;
        view.apply(ViewEvent::parse("snapshot", snapshot).expect("snapshot"));
        assert!(view.loaded);
        for l in [
            lock("a", Some(900), &[]),
            lock("b", Some(500), &[950]),
            lock("c", Some(100), &[]),
            lock("d", None, &[]),
        ] {
            view.apply(ViewEvent::Lock(ViewLock { lock: Box::new(l) }));
        }
        // The oldest hold or wait first, nobody-there last.
        assert_eq!(ids(&view), ["c", "b", "a", "d"]);
        view.apply(ViewEvent::Removed(ViewRemoved { id: "b".into() }));
        view.apply(ViewEvent::Lock(ViewLock {
            lock: Box::new(lock("a", Some(50), &[])),
        }));
        assert_eq!(
            ids(&view),
            ["a", "c", "d"],
            "a changed lock moves to its new place"
        );
        let totals = r#"{"total":7,"facets":{"state":{"held":5,"free":2}},"next":"xyz"}"#;
        view.apply(ViewEvent::parse("view", totals).expect("view"));
        assert_eq!((view.total, view.facets.state("held")), (7, 5));
        assert_eq!(view.next.as_deref(), Some("xyz"));
        let waiters = Sort {
            key: SortKey::Waiters,
            reversed: true,
        };
        assert_eq!(waiters.order(), "asc");
        assert!(ViewEvent::parse("nonsense", "{}").is_err());
    }

    #[test]
    fn a_query_travels_in_the_url_and_to_the_server() {
        let q = Query {
            source: Some("zk a".into()),
            backend: Some(Backend::Redis),
            text: " bulk:1 ".into(),
            only: Only::Waiting,
            sort: Sort {
                key: SortKey::Path,
                reversed: true,
            },
            cursor: Some("abc".into()),
            from: 50,
            ..Query::default()
        };
        let url = q.url();
        assert_eq!(
            url,
            "source=zk%20a&backend=redis&q=bulk%3A1&state=waiting&sort=path&order=desc&cursor=abc&from=50"
        );
        let pairs: Vec<(String, String)> = url
            .split('&')
            .map(|p| {
                let (k, v) = p.split_once('=').expect("pair");
                (k.to_string(), v.replace("%20", " ").replace("%3A", ":"))
            })
            .collect();
        let back = Query::from_params(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        });
        assert_eq!(
            back,
            Query {
                text: "bulk:1".into(),
                ..q.clone()
            }
        );
        assert_eq!(
            q.server(50),
            "source=zk%20a&backend=redis&q=bulk%3A1&state=waiting&sort=path&order=desc&limit=50&cursor=abc"
        );
        assert_eq!(Query::default().url(), "");
        assert_eq!(
            Query::default().server(50),
            "sort=attention&order=desc&limit=50"
        );
    }
}
