//! Lock queries answered by the server (`GET /api/v1/locks`): what a query may say, how it is
//! checked (a bad parameter is a 400 naming it), and how one page of the answer is cut.
//!
//! * Filters: `source`, `backend`, `recipe`, `q` (in the path or a holder's or waiter's session,
//!   ignoring ASCII case), `lock` (one lock's id), `stale=true|false`,
//!   `state=held|waiting|free|stale|herd`.
//! * Order: `sort=path|held_for|longest_wait|waiters|source|attention|recipe|fan_out`,
//!   `order=asc|desc` (default: path ascending; the durations, counts and `attention` — the
//!   longest hold or wait of the lock — descending, most first).
//! * Pages: `limit` (default [`LIMIT_DEFAULT`], at most [`LIMIT_MAX`]) and `cursor`, the opaque
//!   `next` of the page before. `format=ndjson` streams every matching lock instead, one per
//!   line.
//!
//! A cursor is the position after the last lock of its page, as its sort key and id, not an
//! offset: a lock that came or went since moves no other, so paging never repeats a lock of an
//! earlier page and never skips one that stayed. The sort keys do not move with the clock: a
//! hold is ordered by when it began (its `held_for` grows for every held lock alike), a wait by
//! when its oldest waiter began. A cursor is bound to its query (filters, sort and order) and
//! lives [`CURSOR_TTL_MS`]; a malformed, foreign or expired one is a 400.
//!
//! The answer's `total` counts every matching lock and `facets` counts per source, backend,
//! recipe and state; each facet counts under every filter but its own, so it lists the other
//! values one could switch to. A page costs one pass over the locks with at most `limit` kept
//! aside (a bounded heap), never a sorted copy of everything.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

use lockscope_model::wire::LockView;
use serde::{Deserialize, Serialize};

/// Locks per page unless `limit` says otherwise.
pub const LIMIT_DEFAULT: usize = 100;
/// The most locks one page holds.
pub const LIMIT_MAX: usize = 1_000;
/// How long a cursor is taken (ms).
pub const CURSOR_TTL_MS: i64 = 15 * 60 * 1000;

/// A query parameter that is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParameter {
    pub parameter: String,
    pub message: String,
}

fn bad(parameter: &str, message: impl Into<String>) -> BadParameter {
    BadParameter {
        parameter: parameter.to_string(),
        message: message.into(),
    }
}

/// What a lock is doing, as `state=` filters it. A lock may be in several (held and waited on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
}

impl LockState {
    const ALL: [LockState; 5] = [
        LockState::Held,
        LockState::Waiting,
        LockState::Free,
        LockState::Stale,
        LockState::Herd,
    ];

    fn name(self) -> &'static str {
        match self {
            LockState::Held => "held",
            LockState::Waiting => "waiting",
            LockState::Free => "free",
            LockState::Stale => "stale",
            LockState::Herd => "herd",
        }
    }

    fn of(self, lock: &LockView) -> bool {
        match self {
            LockState::Held => !lock.holders.is_empty(),
            LockState::Waiting => !lock.waiters.is_empty(),
            LockState::Free => lock.holders.is_empty(),
            LockState::Stale => !lock.stale.is_empty(),
            LockState::Herd => lock.herd,
        }
    }
}

/// What a page is ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    const NAMES: &'static str =
        "path, held_for, longest_wait, waiters, source, attention, recipe, fan_out";

    fn parse(s: &str) -> Option<Sort> {
        Some(match s {
            "path" => Sort::Path,
            "held_for" => Sort::HeldFor,
            "longest_wait" => Sort::LongestWait,
            "waiters" => Sort::Waiters,
            "source" => Sort::Source,
            "attention" => Sort::Attention,
            "recipe" => Sort::Recipe,
            "fan_out" => Sort::FanOut,
            _ => return None,
        })
    }

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Asc,
    Desc,
}

/// A lock's place in a sort: its key, then its id (ids are unique, so no two locks tie).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SortKey {
    Number(i64),
    Text(String),
}

/// A lock's key under `sort`, ascending in what the sort names.
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

/// Where a page starts: after this key and id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    /// The query's fingerprint ([`LockQuery::fingerprint`]).
    q: u64,
    /// When it was handed out (epoch ms).
    t: i64,
    k: SortKey,
    id: String,
}

impl Cursor {
    fn encode(&self) -> String {
        use base64::Engine;
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(text: &str) -> Option<Cursor> {
        use base64::Engine;
        if text.len() > 4096 {
            return None;
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        serde_json::from_slice(&json).ok()
    }
}

/// How the answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One page as a JSON object.
    Json,
    /// Every matching lock, one JSON object per line.
    Ndjson,
}

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
    pub order: Order,
    pub limit: usize,
    pub format: Format,
    after: Option<(SortKey, String)>,
}

/// Parameters a query may carry besides its own (the read token, for clients that cannot set
/// headers).
pub const PASSED_THROUGH: &[&str] = &["access_token"];

impl LockQuery {
    /// Checks the query string's pairs as of `now` (epoch ms); the first problem found is the
    /// answer.
    pub fn parse(pairs: &[(String, String)], now: i64) -> Result<LockQuery, BadParameter> {
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (k, v) in pairs {
            if seen.insert(k.as_str(), v.as_str()).is_some() {
                return Err(bad(k, format!("{k} is given more than once")));
            }
        }
        let text = |name: &str| -> Result<Option<String>, BadParameter> {
            match seen.get(name) {
                None => Ok(None),
                Some(&"") => Ok(None),
                Some(v) if v.len() > 1024 => {
                    Err(bad(name, format!("{name} is longer than 1024 bytes")))
                }
                Some(v) => Ok(Some(v.to_string())),
            }
        };
        let mut query = LockQuery {
            source: text("source")?,
            backend: text("backend")?,
            recipe: text("recipe")?,
            q: text("q")?,
            id: text("lock")?,
            stale: None,
            state: None,
            sort: Sort::Path,
            order: Order::Asc,
            limit: LIMIT_DEFAULT,
            format: Format::Json,
            after: None,
        };
        for (&name, &value) in &seen {
            match name {
                "source" | "backend" | "recipe" | "q" | "lock" | "cursor" | "order" => {}
                "stale" => {
                    query.stale = Some(match value {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(bad(name, format!("stale is true or false, not {value:?}")))
                        }
                    })
                }
                "state" => {
                    query.state = Some(
                        LockState::ALL
                            .into_iter()
                            .find(|s| s.name() == value)
                            .ok_or_else(|| {
                                bad(
                                    name,
                                    format!(
                                    "unknown state {value:?}: one of held, waiting, free, stale, herd"
                                ),
                                )
                            })?,
                    )
                }
                "sort" => {
                    query.sort = Sort::parse(value).ok_or_else(|| {
                        bad(
                            name,
                            format!("unknown sort {value:?}: one of {}", Sort::NAMES),
                        )
                    })?
                }
                "limit" => {
                    query.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=LIMIT_MAX).contains(n))
                        .ok_or_else(|| {
                            bad(
                                name,
                                format!(
                                    "limit is a whole number from 1 to {LIMIT_MAX}, not {value:?}"
                                ),
                            )
                        })?
                }
                "format" => {
                    query.format = match value {
                        "json" => Format::Json,
                        "ndjson" => Format::Ndjson,
                        _ => {
                            return Err(bad(
                                name,
                                format!("format is json or ndjson, not {value:?}"),
                            ))
                        }
                    }
                }
                _ if PASSED_THROUGH.contains(&name) => {}
                _ => return Err(bad(name, format!("unknown parameter {name:?}"))),
            }
        }
        query.order = match seen.get("order") {
            None | Some(&"") => query.sort.default_order(),
            Some(&"asc") => Order::Asc,
            Some(&"desc") => Order::Desc,
            Some(other) => {
                return Err(bad("order", format!("order is asc or desc, not {other:?}")))
            }
        };
        if let Some(text) = seen.get("cursor").filter(|c| !c.is_empty()) {
            let cursor = Cursor::decode(text).ok_or_else(|| {
                bad(
                    "cursor",
                    "malformed cursor: pass the `next` of a page as it came",
                )
            })?;
            if cursor.q != query.fingerprint() {
                return Err(bad(
                    "cursor",
                    "the cursor belongs to another query: keep the filters, sort and order of the page it came with",
                ));
            }
            if now.saturating_sub(cursor.t) > CURSOR_TTL_MS || cursor.t > now + 60_000 {
                return Err(bad(
                    "cursor",
                    "expired cursor: start again from the first page",
                ));
            }
            query.after = Some((cursor.k, cursor.id));
        }
        Ok(query)
    }

    /// What a cursor is bound to: the filters, the sort and the order (not the page size).
    fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same query gives the same value in every process (a
        // replica behind a load balancer takes a cursor another handed out).
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new();
        (
            &self.source,
            &self.backend,
            &self.recipe,
            &self.q,
            &self.id,
            self.stale,
            self.state,
        )
            .hash(&mut h);
        (self.sort as u8, self.order as u8).hash(&mut h);
        h.finish()
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

    /// Whether `place` comes after the cursor (every place does without one).
    fn after_cursor(&self, place: &(SortKey, String)) -> bool {
        self.after
            .as_ref()
            .is_none_or(|after| self.cmp(place, after) == Ordering::Greater)
    }

    /// The locks this query may match among `snapshot`'s, as of `now`, ticked and judged: one
    /// lock for `lock=`, every lock otherwise.
    pub fn candidates<'s>(
        &self,
        snapshot: &'s crate::aggregate::Snapshot,
        now: i64,
        stale_hold_ms: i64,
    ) -> Box<dyn Iterator<Item = LockView> + 's> {
        let ticked = move |lock| super::ticked(lock, now, stale_hold_ms);
        match &self.id {
            Some(id) => Box::new(snapshot.lock(id).into_iter().map(ticked)),
            None => Box::new(snapshot.views().map(ticked)),
        }
    }

    /// Whether `a` comes before `b` in this query's order.
    fn cmp(&self, a: &(SortKey, String), b: &(SortKey, String)) -> Ordering {
        let by_key = match self.order {
            Order::Asc => a.0.cmp(&b.0),
            Order::Desc => b.0.cmp(&a.0),
        };
        by_key.then_with(|| a.1.cmp(&b.1))
    }
}

/// Whether `q` is in the lock's path or a holder's or waiter's session, ignoring ASCII case.
fn mentions(lock: &LockView, q: &str) -> bool {
    let q = q.as_bytes();
    let has = |text: &str| {
        q.is_empty()
            || text
                .as_bytes()
                .windows(q.len())
                .any(|w| w.eq_ignore_ascii_case(q))
    };
    has(&lock.path)
        || lock.holders.iter().any(|h| has(&h.session))
        || lock.waiters.iter().any(|w| has(&w.session))
}

/// Adds one to `key`'s count, copying the key only the first time it is seen (a page's pass
/// counts every lock).
fn count(counts: &mut BTreeMap<String, u64>, key: &str) {
    match counts.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            counts.insert(key.to_string(), 1);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Facet {
    Source,
    Backend,
    Recipe,
    State,
}

impl Facet {
    /// Its own filter's bit in [`LockQuery::failures`].
    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The bit in [`LockQuery::failures`] of the filters no facet counts past (`q`, `lock`,
/// `stale`).
const OTHER: u8 = 1 << 7;

/// Counts per value of each facet.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Facets {
    pub source: BTreeMap<String, u64>,
    pub backend: BTreeMap<&'static str, u64>,
    pub recipe: BTreeMap<String, u64>,
    pub state: BTreeMap<&'static str, u64>,
}

/// One page of an answer.
#[derive(Debug, Serialize)]
pub struct Page {
    pub locks: Vec<LockView>,
    /// Locks matching the query.
    pub total: u64,
    pub facets: Facets,
    /// The cursor of the next page; none on the last.
    pub next: Option<String>,
}

/// A lock kept for the page, ordered so the heap's top is the one to drop first.
struct Kept<'q> {
    place: (SortKey, String),
    lock: LockView,
    query: &'q LockQuery,
}

impl PartialEq for Kept<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.place == other.place
    }
}
impl Eq for Kept<'_> {}
impl PartialOrd for Kept<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Kept<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.query.cmp(&self.place, &other.place)
    }
}

/// Answers `query` over `locks` (views as of `now`, judged): one pass, at most `limit + 1`
/// locks kept aside.
pub fn page(query: &LockQuery, locks: impl Iterator<Item = LockView>, now: i64) -> Page {
    let mut facets = Facets::default();
    let mut total = 0u64;
    let mut kept: BinaryHeap<Kept> = BinaryHeap::with_capacity(query.limit + 1);
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
        if !query.after_cursor(&place) {
            continue;
        }
        // One more than the page: whether there is a next page.
        if kept.len() <= query.limit {
            kept.push(Kept { place, lock, query });
        } else if kept
            .peek()
            .is_some_and(|last| query.cmp(&place, &last.place) == Ordering::Less)
        {
            kept.pop();
            kept.push(Kept { place, lock, query });
        }
    }
    let mut kept: Vec<Kept> = kept.into_sorted_vec();
    let more = kept.len() > query.limit;
    kept.truncate(query.limit);
    let next = more.then(|| {
        let last = &kept[kept.len() - 1].place;
        Cursor {
            q: query.fingerprint(),
            t: now,
            k: last.0.clone(),
            id: last.1.clone(),
        }
        .encode()
    });
    Page {
        locks: kept.into_iter().map(|k| k.lock).collect(),
        total,
        facets,
        next,
    }
}

/// Every lock matching `query` among `locks`, in its order: the ids (the views are rendered again
/// as they are written out, a chunk at a time).
pub fn matching_ids(query: &LockQuery, locks: impl Iterator<Item = LockView>) -> Vec<String> {
    let mut places: Vec<(SortKey, String)> = locks
        .filter(|lock| query.failures(lock) == 0)
        .map(|lock| (sort_key(query.sort, &lock), lock.id))
        .filter(|place| query.after_cursor(place))
        .collect();
    places.sort_by(|a, b| query.cmp(a, b));
    places.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Vec<(String, String)> {
        form_urlencoded::parse(q.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

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
