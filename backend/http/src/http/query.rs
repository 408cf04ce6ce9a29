//! Lock queries answered by the server (`GET /api/v1/locks`): what a query may say, how it is
//! checked (a bad parameter is a 400 naming it), and how one page of the answer is cut.
//!
//! * Filters: `source`, `backend` (one of the backends' names, as `LockView::backend` shows),
//!   `recipe`, `q` (in the path or a holder's or waiter's session, ignoring ASCII case), `lock`
//!   (one lock's id), `stale=true|false`, `state=held|waiting|free|stale|herd|stuck`.
//! * Order: `sort=path|held_for|longest_wait|waiters|source|attention|recipe|fan_out`,
//!   `order=asc|desc` (default: path ascending; the durations, counts and `attention` — the
//!   longest hold or wait of the lock — descending, most first).
//! * Pages: `limit` (default 100, at most 1,000) and `cursor`, the opaque
//!   `next` of the page before. `format=ndjson` streams every matching lock instead, one per
//!   line.
//!
//! A cursor is the position after the last lock of its page, as its sort key and id, not an
//! offset: a lock that came or went since moves no other, so paging never repeats a lock of an
//! earlier page and never skips one that stayed. The sort keys do not move with the clock: a
//! hold is ordered by when it began (its `held_for` grows for every held lock alike), a wait by
//! when its oldest waiter began. A cursor is bound to its query (filters, sort and order) and
//! lives 15 minutes; a malformed, foreign or expired one is a 400 (the parameters and cursors
//! are read as every paged endpoint reads them: [`super::paging`]).
//!
//! The answer's `total` counts every matching lock and `facets` counts per source, backend,
//! recipe and state; each facet counts under every filter but its own, so it lists the other
//! values one could switch to. [`page`] is the definition: a pass over rendered, judged views
//! with at most `limit` kept aside (a bounded heap). The server answers from the summary index
//! instead ([`super::index`], equal to [`page`] by test), rendering only the page; `lock=` and
//! `format=ndjson` (which renders every match anyway) take the pass.

use std::collections::BTreeMap;

use lockscope_model::wire::{Backend, LockFacets, LockView};
use serde::Serialize;

use super::paging::{count, fingerprint, BadParameter, Keyset, Order, Params, SortKey, Window};

/// What a lock is doing, as `state=` filters it. A lock may be in several (held and waited on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum LockState {
    /// Someone holds it.
    Held,
    /// Someone waits for it.
    Waiting,
    /// Nobody holds it.
    Free,
    /// A stale rule fires for it.
    Stale,
    /// More than one session wakes when its holder goes (the herd effect).
    Herd,
    /// A wait or a hold is past its stuck limit (warning or critical).
    Stuck,
}

impl LockState {
    pub(super) const ALL: [LockState; 6] = [
        LockState::Held,
        LockState::Waiting,
        LockState::Free,
        LockState::Stale,
        LockState::Herd,
        LockState::Stuck,
    ];

    const CHOICES: [(&'static str, LockState); 6] = [
        ("held", LockState::Held),
        ("waiting", LockState::Waiting),
        ("free", LockState::Free),
        ("stale", LockState::Stale),
        ("herd", LockState::Herd),
        ("stuck", LockState::Stuck),
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            LockState::Held => "held",
            LockState::Waiting => "waiting",
            LockState::Free => "free",
            LockState::Stale => "stale",
            LockState::Herd => "herd",
            LockState::Stuck => "stuck",
        }
    }

    fn of(self, lock: &LockView) -> bool {
        match self {
            LockState::Held => !lock.holders.is_empty(),
            LockState::Waiting => !lock.waiters.is_empty(),
            LockState::Free => lock.holders.is_empty(),
            LockState::Stale => !lock.stale.is_empty(),
            LockState::Herd => lock.herd,
            LockState::Stuck => lock.stuck.is_some(),
        }
    }
}

/// What a page of locks is ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = LockSort, rename_all = "snake_case")]
pub enum Sort {
    Path,
    HeldFor,
    LongestWait,
    Waiters,
    Source,
    /// The longest hold or wait first: what needs a look (the dashboard's default).
    Attention,
    Recipe,
    /// Sessions woken when the holder goes (watchers of the holder and of the lock).
    FanOut,
}

impl Sort {
    pub(super) const CHOICES: [(&'static str, Sort); 8] = [
        ("path", Sort::Path),
        ("held_for", Sort::HeldFor),
        ("longest_wait", Sort::LongestWait),
        ("waiters", Sort::Waiters),
        ("source", Sort::Source),
        ("attention", Sort::Attention),
        ("recipe", Sort::Recipe),
        ("fan_out", Sort::FanOut),
    ];

    /// The order a sort takes without `order=`: the longest first for durations.
    fn default_order(self) -> Order {
        match self {
            Sort::HeldFor | Sort::LongestWait | Sort::Waiters | Sort::Attention | Sort::FanOut => {
                Order::Desc
            }
            Sort::Path | Sort::Source | Sort::Recipe => Order::Asc,
        }
    }
}

/// A lock's key under `sort`, ascending in what the sort names. Its place in a page is this
/// key, then its id (ids are unique, so no two locks tie).
fn sort_key(sort: Sort, lock: &LockView) -> SortKey {
    // Longer = began earlier, so the key is the earliest start negated; nobody there (a free
    // lock, a lock without waiters) has lasted nothing, the least.
    let lasted = |starts: &mut dyn Iterator<Item = i64>| {
        SortKey::Number(starts.min().map_or(i64::MIN, i64::saturating_neg))
    };
    match sort {
        Sort::Path => SortKey::Text(lock.path.clone()),
        Sort::Source => SortKey::Text(lock.source.clone()),
        Sort::HeldFor => lasted(&mut lock.holders.iter().map(|h| h.since_ms)),
        Sort::LongestWait => lasted(&mut lock.waiters.iter().map(|w| w.since_ms)),
        Sort::Waiters => SortKey::Number(lock.waiters.len() as i64),
        Sort::Attention => lasted(
            &mut lock
                .holders
                .iter()
                .map(|h| h.since_ms)
                .chain(lock.waiters.iter().map(|w| w.since_ms)),
        ),
        Sort::Recipe => SortKey::Text(lock.recipe.clone()),
        Sort::FanOut => SortKey::Number(i64::from(lock.watchers) + i64::from(lock.child_watchers)),
    }
}

/// How the answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = LockFormat, rename_all = "lowercase")]
pub enum Format {
    /// One page as a JSON object.
    Json,
    /// Every matching lock, one JSON object per line.
    Ndjson,
}

/// The parameters a lock query may carry.
const PARAMETERS: &[&str] = &[
    "source", "backend", "recipe", "q", "lock", "stale", "state", "sort", "order", "limit",
    "cursor", "format",
];

/// A checked `GET /api/v1/locks` query.
#[derive(Debug, Clone)]
pub struct LockQuery {
    pub source: Option<String>,
    pub backend: Option<String>,
    pub recipe: Option<String>,
    pub q: Option<String>,
    /// One lock by its id (`lock=`: the lock page's live view).
    pub id: Option<String>,
    pub stale: Option<bool>,
    pub state: Option<LockState>,
    pub sort: Sort,
    pub limit: usize,
    pub format: Format,
    /// The order and where the page starts; a lock's place is its sort key and id.
    pub(super) keyset: Keyset<SortKey, String>,
}

impl LockQuery {
    /// Checks the query string's pairs as of `now` (epoch ms); the first problem found is the
    /// answer.
    pub fn parse(pairs: &[(String, String)], now: i64) -> Result<LockQuery, BadParameter> {
        let params = Params::new(pairs, PARAMETERS)?;
        let sort = params.choice("sort", &Sort::CHOICES)?.unwrap_or(Sort::Path);
        let mut query = LockQuery {
            source: params.text("source")?,
            backend: params
                .choice("backend", &Backend::ALL.map(|b| (b.as_str(), b)))?
                .map(|b| b.as_str().to_string()),
            recipe: params.text("recipe")?,
            q: params.text("q")?,
            id: params.text("lock")?,
            stale: params.choice("stale", &[("true", true), ("false", false)])?,
            state: params.choice("state", &LockState::CHOICES)?,
            sort,
            limit: params.limit()?,
            format: params
                .choice(
                    "format",
                    &[("json", Format::Json), ("ndjson", Format::Ndjson)],
                )?
                .unwrap_or(Format::Json),
            keyset: Keyset {
                order: params.order(sort.default_order())?,
                after: None,
            },
        };
        query.keyset.after = params.cursor(query.fingerprint(), now)?;
        Ok(query)
    }

    /// What a cursor is bound to: the filters, the sort and the order (not the page size).
    pub(super) fn fingerprint(&self) -> u64 {
        fingerprint((
            (
                &self.source,
                &self.backend,
                &self.recipe,
                &self.q,
                &self.id,
                self.stale,
                self.state,
            ),
            (self.sort as u8, self.keyset.order as u8),
        ))
    }

    /// The filters `lock` fails: a bit per facet's own filter ([`Facet::bit`]) and [`OTHER`]
    /// for any of the rest. It passes the query when none, and counts in a facet when none
    /// but the facet's own.
    fn failures(&self, lock: &LockView) -> u8 {
        let fails = |failed: bool, bit: u8| if failed { bit } else { 0 };
        fails(
            self.source.as_ref().is_some_and(|s| *s != lock.source),
            Facet::Source.bit(),
        ) | fails(
            self.recipe.as_ref().is_some_and(|r| *r != lock.recipe),
            Facet::Recipe.bit(),
        ) | fails(
            self.backend
                .as_deref()
                .is_some_and(|b| lock.backend.as_str() != b),
            Facet::Backend.bit(),
        ) | fails(self.state.is_some_and(|s| !s.of(lock)), Facet::State.bit())
            | fails(
                self.q.as_ref().is_some_and(|q| !mentions(lock, q))
                    || self.id.as_ref().is_some_and(|id| *id != lock.id)
                    || self.stale.is_some_and(|want| want == lock.stale.is_empty()),
                OTHER,
            )
    }

    /// The locks this query may match among `snapshot`'s, as of `now`, ticked and judged: one
    /// lock for `lock=`, every lock otherwise.
    pub fn candidates<'s>(
        &self,
        snapshot: &'s lockscope_core::aggregate::Snapshot,
        now: i64,
        judge: &'s lockscope_model::rules::Judge,
    ) -> Box<dyn Iterator<Item = LockView> + 's> {
        let ticked = move |lock| super::ticked(lock, now, judge);
        match &self.id {
            Some(id) => Box::new(snapshot.lock(id).into_iter().map(ticked)),
            None => Box::new(snapshot.views().map(ticked)),
        }
    }
}

/// Whether `q` is in the lock's path or a holder's or waiter's session, ignoring ASCII case.
pub(super) fn mentions(lock: &LockView, q: &str) -> bool {
    let has = |text: &str| super::paging::contains_ignoring_ascii_case(text, q);
    has(&lock.path)
        || lock.holders.iter().any(|h| has(&h.session))
        || lock.waiters.iter().any(|w| has(&w.session))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Facet {
    Source,
    Backend,
    Recipe,
    State,
}

impl Facet {
    /// Its own filter's bit in [`LockQuery::failures`].
    pub(super) const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The bit in [`LockQuery::failures`] of the filters no facet counts past (`q`, `lock`,
/// `stale`).
pub(super) const OTHER: u8 = 1 << 7;

/// Counts per value of each facet while a page is cut (backends and states by their static
/// names: no allocation per lock); [`LockFacets`] once counted.
#[derive(Debug, Default)]
struct Counts {
    source: BTreeMap<String, u64>,
    backend: BTreeMap<&'static str, u64>,
    recipe: BTreeMap<String, u64>,
    state: BTreeMap<&'static str, u64>,
}

impl From<Counts> for LockFacets {
    fn from(c: Counts) -> LockFacets {
        let named = |m: BTreeMap<&'static str, u64>| {
            m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
        };
        LockFacets {
            source: c.source,
            backend: named(c.backend),
            recipe: c.recipe,
            state: named(c.state),
        }
    }
}

/// One page of `GET /api/v1/locks`.
#[derive(Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = LockPage)]
pub struct Page {
    pub locks: Vec<LockView>,
    /// Locks matching the query.
    pub total: u64,
    pub facets: LockFacets,
    /// The cursor of the next page; none on the last.
    pub next: Option<String>,
}

/// Answers `query` over `locks` (views as of `now`, judged): one pass, at most `limit + 1`
/// locks kept aside.
pub fn page(query: &LockQuery, locks: impl Iterator<Item = LockView>, now: i64) -> Page {
    let mut facets = Counts::default();
    let mut total = 0u64;
    let mut window = Window::new(query.limit, &query.keyset);
    for lock in locks {
        let failed = query.failures(&lock);
        let counts_in = |facet: Facet| failed & !facet.bit() == 0;
        if counts_in(Facet::Source) {
            count(&mut facets.source, &lock.source);
        }
        if counts_in(Facet::Backend) {
            *facets.backend.entry(lock.backend.as_str()).or_default() += 1;
        }
        if counts_in(Facet::Recipe) {
            count(&mut facets.recipe, &lock.recipe);
        }
        if counts_in(Facet::State) {
            for state in LockState::ALL.into_iter().filter(|s| s.of(&lock)) {
                *facets.state.entry(state.name()).or_default() += 1;
            }
        }
        if failed != 0 {
            continue;
        }
        total += 1;
        let place = (sort_key(query.sort, &lock), lock.id.clone());
        window.offer(place, lock);
    }
    let (locks, next) = window.finish(query.fingerprint(), now);
    Page {
        locks,
        total,
        facets: facets.into(),
        next,
    }
}

/// Every lock matching `query` among `locks`, in its order: the ids (the views are rendered again
/// as they are written out, a chunk at a time).
pub fn matching_ids(query: &LockQuery, locks: impl Iterator<Item = LockView>) -> Vec<String> {
    let mut places: Vec<(SortKey, String)> = locks
        .filter(|lock| query.failures(lock) == 0)
        .map(|lock| (sort_key(query.sort, &lock), lock.id))
        .filter(|place| query.keyset.is_after_cursor(place))
        .collect();
    places.sort_by(|a, b| query.keyset.cmp(a, b));
    places.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::paging::pairs;
    use crate::http::paging::CURSOR_TTL_MS;

    fn lock(path: &str, held_since: Option<i64>, waiters: usize) -> LockView {
        let mut view: LockView = serde_json::from_value(serde_json::json!({
            "id": format!("s:{path}"), "source": "s", "backend": "redis", "path": path,
            "recipe": "token", "holders": [], "waiters": [], "watchers": 0, "herd": false,
            "changed_ms": 0,
        }))
        .expect("view");
        if let Some(since) = held_since {
            view.holders.push(
                serde_json::from_value(serde_json::json!({
                    "node": "n", "session": "n", "since_ms": since, "held_ms": 0,
                    "watchers": 0,
                }))
                .expect("holder"),
            );
        }
        for i in 0..waiters {
            view.waiters.push(
                serde_json::from_value(serde_json::json!({
                    "node": format!("w{i}"), "session": "w", "since_ms": 10 + i as i64,
                    "waited_ms": 0, "position": i,
                }))
                .expect("waiter"),
            );
        }
        view
    }

    #[test]
    fn bad_parameters_are_named() {
        for (q, name) in [
            ("sort=size", "sort"),
            ("state=busy", "state"),
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=ten", "limit"),
            ("order=up", "order"),
            ("cursor=%%%", "cursor"),
            ("cursor=e30", "cursor"),
            ("format=xml", "format"),
            ("stale=yes", "stale"),
            ("colour=red", "colour"),
            ("sort=path&sort=source", "sort"),
        ] {
            let e = LockQuery::parse(&pairs(q), 0).expect_err(q);
            assert_eq!(e.parameter, name, "{q}: {}", e.message);
        }
        assert!(LockQuery::parse(&pairs("access_token=x&limit=1000"), 0).is_ok());
    }

    #[test]
    fn pages_by_cursor_never_repeat_or_skip_what_stayed() {
        let mut locks: Vec<LockView> = (0..25)
            .map(|i| lock(&format!("/l{i:02}"), None, 0))
            .collect();
        let query = LockQuery::parse(&pairs("limit=10"), 1_000).expect("query");
        let first = page(&query, locks.clone().into_iter(), 1_000);
        assert_eq!(first.total, 25);
        assert_eq!(first.locks.len(), 10);
        // Between pages: an earlier lock goes, a new one comes before the cursor and one after.
        locks.retain(|l| l.path != "/l03");
        locks.push(lock("/l05a", None, 0));
        locks.push(lock("/l15a", None, 0));
        let cursor = first.next.clone().expect("next");
        let second = LockQuery::parse(&pairs(&format!("limit=10&cursor={cursor}")), 2_000)
            .expect("second query");
        let second = page(&second, locks.clone().into_iter(), 2_000);
        let paths: Vec<&str> = second.locks.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths[0], "/l10");
        assert!(paths.contains(&"/l15a"));
        assert!(!paths.iter().any(|p| *p <= "/l09"), "{paths:?}");
        // A cursor of another query, and an old one.
        let other = LockQuery::parse(
            &pairs(&format!("limit=10&sort=source&cursor={cursor}")),
            2_000,
        );
        assert_eq!(other.expect_err("foreign").parameter, "cursor");
        let late = LockQuery::parse(
            &pairs(&format!("cursor={cursor}")),
            1_000 + CURSOR_TTL_MS + 1,
        );
        assert_eq!(late.expect_err("expired").parameter, "cursor");
    }

    #[test]
    fn sorts_states_and_facets() {
        let locks = vec![
            lock("/a", Some(500), 0),
            lock("/b", Some(100), 2),
            lock("/c", None, 0),
            lock("/d", Some(300), 1),
        ];
        let q = LockQuery::parse(&pairs("sort=held_for"), 0).expect("query");
        let held: Vec<String> = page(&q, locks.clone().into_iter(), 0)
            .locks
            .into_iter()
            .map(|l| l.path)
            .collect();
        assert_eq!(held, ["/b", "/d", "/a", "/c"]);
        let q = LockQuery::parse(&pairs("sort=waiters&state=held"), 0).expect("query");
        let answer = page(&q, locks.clone().into_iter(), 0);
        let paths: Vec<&str> = answer.locks.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, ["/b", "/d", "/a"]);
        assert_eq!(answer.total, 3);
        // The state facet counts under the other filters only: /c is free.
        assert_eq!(answer.facets.state.get("free"), Some(&1));
        assert_eq!(answer.facets.state.get("held"), Some(&3));
        assert_eq!(answer.facets.state.get("waiting"), Some(&2));
        assert_eq!(answer.facets.source.get("s"), Some(&3));
        let ids = matching_ids(&q, locks.into_iter());
        assert_eq!(ids, ["s:/b", "s:/d", "s:/a"]);
    }

    #[test]
    fn attention_herds_and_sessions_in_q() {
        let mut locks = vec![
            lock("/a", Some(500), 0),
            lock("/b", Some(900), 2),
            lock("/c", None, 0),
        ];
        locks[2].herd = true;
        locks[0].holders[0].session = "0xBeef".into();
        // /b's first waiter began at 10: the longest hold or wait of all.
        let q = LockQuery::parse(&pairs("sort=attention"), 0).expect("query");
        let order: Vec<String> = page(&q, locks.clone().into_iter(), 0)
            .locks
            .into_iter()
            .map(|l| l.path)
            .collect();
        assert_eq!(order, ["/b", "/a", "/c"]);
        let q = LockQuery::parse(&pairs("state=herd"), 0).expect("query");
        let answer = page(&q, locks.clone().into_iter(), 0);
        assert_eq!(answer.total, 1);
        assert_eq!(answer.facets.state.get("herd"), Some(&1));
        let q = LockQuery::parse(&pairs("q=BEEF"), 0).expect("query");
        assert_eq!(page(&q, locks.clone().into_iter(), 0).locks[0].path, "/a");
        let q = LockQuery::parse(&pairs("q=/B"), 0).expect("query");
        assert_eq!(page(&q, locks.into_iter(), 0).locks[0].path, "/b");
    }
}
