//! Lock pages answered from the summary index (`lockscope_core::aggregate::summary`), not by
//! rendering every lock: what `GET /api/v1/locks` and every live view compute.
//!
//! A [`ViewState`] is one query's answer over one version of the table as of one instant: the
//! matching count, the facet counts, and the first matching locks in the query's order (at
//! least a page and one more, at most [`keep`] of them, every matching lock up to the last kept
//! one — so a lock that leaves the page is replaced without looking at the others). Computed
//! once by a pass over the table's summaries (small fixed-size entries; a lock's record is
//! decoded only to read a path its id does not give, or to look for `q` in its sessions when
//! its record holds the text), then [advanced](ViewState::advance) to a newer table and a later
//! instant by what changed: the records that differ between the two versions (a persistent
//! map's diff skips what they share) and the locks whose stale or stuck state turned between
//! the two instants (the table's timeline). The cost of keeping a view current is in what
//! changed, not in the number of locks; a pass is needed again only when more than an eighth
//! of the table changed at once, when fewer than a page and one are left kept, or when a name
//! the query asks for first appears.
//!
//! Only the locks of the page are rendered and judged (with [`super::ticked`], like every
//! other answer). [`super::query::page`] is the definition this must equal: the tests compare
//! the two over random tables, queries, changes and instants.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap, HashSet};
use std::sync::Arc;

use lockscope_core::aggregate::summary::{turning, PathIn};
use lockscope_core::aggregate::{DiffItem, Entry, Names, Snapshot, Summary};
use lockscope_model::id::{path_bytes, PathBytes};
use lockscope_model::rules::Judge;
use lockscope_model::wire::{Backend, LockFacets, LockView};

use super::paging::{bytes_contain_ignoring_ascii_case, cursor_text, Order, SortKey};
use super::query::{Facet, LockQuery, LockState, Page, Sort, OTHER};

/// Matching locks a view keeps in order: a page and one more, twice over, so that locks
/// leaving the page are replaced from what is kept.
fn keep(limit: usize) -> usize {
    2 * (limit + 1)
}

/// A lock's sort key, as cheap to make as the summary allows.
#[derive(Debug, Clone)]
enum Key {
    Number(i64),
    /// The path its id gives (without the first `/` when `true`).
    IdPath(bool),
    Text(Arc<str>),
}

/// A lock's place in a query's order: its key, then its id.
#[derive(Debug, Clone)]
struct Place {
    key: Key,
    id: Arc<str>,
}

/// The bytes of a text key, whichever way it is kept.
enum TextBytes<'a> {
    Id(PathBytes<'a>),
    Plain(std::str::Bytes<'a>),
}

impl Iterator for TextBytes<'_> {
    type Item = u8;
    fn next(&mut self) -> Option<u8> {
        match self {
            TextBytes::Id(b) => b.next(),
            TextBytes::Plain(b) => b.next(),
        }
    }
}

impl Place {
    fn bytes(&self) -> TextBytes<'_> {
        match &self.key {
            Key::IdPath(unslashed) => {
                let mut bytes = path_bytes(&self.id);
                if *unslashed {
                    bytes.next();
                }
                TextBytes::Id(bytes)
            }
            Key::Text(text) => TextBytes::Plain(text.bytes()),
            Key::Number(_) => TextBytes::Plain("".bytes()),
        }
    }

    /// Keys compare as [`SortKey`]s do: numbers before texts, texts by their bytes.
    fn cmp_key(&self, other: &Place) -> Ordering {
        match (&self.key, &other.key) {
            (Key::Number(a), Key::Number(b)) => a.cmp(b),
            (Key::Number(_), _) => Ordering::Less,
            (_, Key::Number(_)) => Ordering::Greater,
            _ => self.bytes().cmp(other.bytes()),
        }
    }

    fn cmp_sort_key(&self, key: &SortKey) -> Ordering {
        match (&self.key, key) {
            (Key::Number(a), SortKey::Number(b)) => a.cmp(b),
            (Key::Number(_), SortKey::Text(_)) => Ordering::Less,
            (_, SortKey::Number(_)) => Ordering::Greater,
            (_, SortKey::Text(text)) => self.bytes().cmp(text.bytes()),
        }
    }

    /// The key as a cursor carries it.
    fn sort_key(&self) -> SortKey {
        match &self.key {
            Key::Number(n) => SortKey::Number(*n),
            _ => SortKey::Text(String::from_utf8_lossy(&self.bytes().collect::<Vec<u8>>()).into()),
        }
    }
}

/// A place with its query's order, so sets and heaps order places as the query does.
#[derive(Debug, Clone)]
struct Ranked {
    place: Place,
    desc: bool,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_key = self.place.cmp_key(&other.place);
        let by_key = if self.desc { by_key.reverse() } else { by_key };
        by_key.then_with(|| self.place.id.cmp(&other.place.id))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

/// A query's filters as numbers of one table's names: `Some(None)` asks for a name the table
/// has never seen (nothing matches it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    source: Option<Option<u16>>,
    recipe: Option<Option<u16>>,
    backend: Option<Backend>,
}

impl Resolved {
    fn of(query: &LockQuery, names: &Names) -> Resolved {
        Resolved {
            source: query.source.as_deref().map(|s| names.source_index(s)),
            recipe: query.recipe.as_deref().map(|r| names.recipe_index(r)),
            backend: query
                .backend
                .as_deref()
                .and_then(|b| Backend::ALL.into_iter().find(|x| x.as_str() == b)),
        }
    }
}

fn state_of(state: LockState, s: &Summary, now: i64) -> bool {
    match state {
        LockState::Held => s.held(),
        LockState::Waiting => s.waiting(),
        LockState::Free => !s.held(),
        LockState::Stale => s.stale(now),
        LockState::Herd => s.herd(),
        LockState::Stuck => s.stuck(now),
    }
}

/// Facet counts kept current (signed while changes are applied).
#[derive(Debug, Clone, Default)]
struct Counts {
    source: Vec<i64>,
    backend: [i64; Backend::ALL.len()],
    recipe: Vec<i64>,
    state: [i64; LockState::ALL.len()],
}

fn bump(counts: &mut Vec<i64>, at: u16, by: i64) {
    let at = usize::from(at);
    if counts.len() <= at {
        counts.resize(at + 1, 0);
    }
    counts[at] += by;
}

impl Counts {
    /// Counts a lock that failed the filters `failed` in every facet whose own filter is the
    /// only one it failed (`by` is 1 or -1).
    fn add(&mut self, failed: u8, s: &Summary, now: i64, by: i64) {
        let counts_in = |facet: Facet| failed & !facet.bit() == 0;
        if counts_in(Facet::Source) {
            bump(&mut self.source, s.source, by);
        }
        if counts_in(Facet::Backend) {
            if let Some(i) = Backend::ALL.iter().position(|b| *b == s.backend) {
                self.backend[i] += by;
            }
        }
        if counts_in(Facet::Recipe) {
            bump(&mut self.recipe, s.recipe, by);
        }
        if counts_in(Facet::State) {
            for (i, state) in LockState::ALL.into_iter().enumerate() {
                if state_of(state, s, now) {
                    self.state[i] += by;
                }
            }
        }
    }

    fn facets(&self, names: &Names) -> LockFacets {
        let named = |counts: &[i64], names: &[Arc<str>]| {
            counts
                .iter()
                .zip(names)
                .filter(|(n, _)| **n > 0)
                .map(|(n, name)| (name.to_string(), n.unsigned_abs()))
                .collect()
        };
        let fixed = |counts: &[i64], names: &mut dyn Iterator<Item = &'static str>| {
            counts
                .iter()
                .zip(names)
                .filter(|(n, _)| **n > 0)
                .map(|(n, name)| (name.to_string(), n.unsigned_abs()))
                .collect()
        };
        LockFacets {
            source: named(&self.source, &names.sources),
            backend: fixed(&self.backend, &mut Backend::ALL.iter().map(|b| b.as_str())),
            recipe: named(&self.recipe, &names.recipes),
            state: fixed(&self.state, &mut LockState::ALL.iter().map(|s| s.name())),
        }
    }
}

/// One query's answer over one table as of one instant, kept current by what changes (see the
/// module docs).
pub struct ViewState {
    query: LockQuery,
    snapshot: Arc<Snapshot>,
    /// The instant it is judged as of (epoch ms).
    at: i64,
    resolved: Resolved,
    total: i64,
    counts: Counts,
    /// Matching locks after the cursor, in order: every one up to `boundary`.
    kept: BTreeSet<Ranked>,
    /// The last place every matching lock up to which is kept; `None`: all are kept.
    boundary: Option<Ranked>,
}

impl ViewState {
    /// The answer to `query` (not a `lock=` query) over `snapshot` as of `now`: one pass.
    pub fn compute(query: &LockQuery, snapshot: Arc<Snapshot>, now: i64) -> ViewState {
        let resolved = Resolved::of(query, &snapshot.names);
        let desc = query.keyset.order == Order::Desc;
        let keep = keep(query.limit);
        let mut state = ViewState {
            query: query.clone(),
            snapshot: snapshot.clone(),
            at: now,
            resolved,
            total: 0,
            counts: Counts::default(),
            kept: BTreeSet::new(),
            boundary: None,
        };
        let mut heap: BinaryHeap<Ranked> = BinaryHeap::with_capacity(keep + 1);
        let mut dropped = false;
        for (id, entry) in snapshot.locks.iter() {
            let failed = state.failures(id, entry, now);
            state.counts.add(failed, &entry.summary, now, 1);
            if failed != 0 {
                continue;
            }
            state.total += 1;
            let ranked = Ranked {
                place: place(query.sort, id, entry, &snapshot.names),
                desc,
            };
            if !state.after_cursor(&ranked.place) {
                continue;
            }
            if heap.len() < keep {
                heap.push(ranked);
            } else {
                dropped = true;
                if heap.peek().is_some_and(|last| ranked < *last) {
                    heap.pop();
                    heap.push(ranked);
                }
            }
        }
        state.kept = heap.into_iter().collect();
        state.boundary = if dropped {
            state.kept.last().cloned()
        } else {
            None
        };
        state
    }

    /// The same query over `snapshot` (a newer version of the table it was computed from) as
    /// of `now`, from what changed in between.
    pub fn advance(mut self, snapshot: Arc<Snapshot>, now: i64) -> ViewState {
        if Arc::ptr_eq(&self.snapshot, &snapshot) && now == self.at {
            return self;
        }
        if Resolved::of(&self.query, &snapshot.names) != self.resolved || now < self.at {
            return ViewState::compute(&self.query, snapshot, now);
        }
        let most = (snapshot.locks.len() / 8).max(4_096);
        let mut changes: Vec<(Arc<str>, Option<Entry>, Option<Entry>)> = Vec::new();
        for item in self.snapshot.locks.diff(&snapshot.locks) {
            if changes.len() >= most {
                return ViewState::compute(&self.query, snapshot, now);
            }
            changes.push(match item {
                DiffItem::Add(id, new) => (id.clone(), None, Some(new.clone())),
                DiffItem::Remove(id, old) => (id.clone(), Some(old.clone()), None),
                DiffItem::Update {
                    old: (id, old),
                    new: (_, new),
                } => (id.clone(), Some(old.clone()), Some(new.clone())),
            });
        }
        let mut changed: HashSet<Arc<str>> = changes.iter().map(|(id, _, _)| id.clone()).collect();
        for id in turning(&snapshot.timeline, self.at, now) {
            // Once, however many of its judgements turned.
            if !changed.insert(id.clone()) {
                continue;
            }
            if let Some(entry) = snapshot.locks.get(id) {
                changes.push((id.clone(), Some(entry.clone()), Some(entry.clone())));
            }
            if changes.len() >= most {
                break;
            }
        }
        if changes.len() >= most {
            return ViewState::compute(&self.query, snapshot, now);
        }
        let desc = self.query.keyset.order == Order::Desc;
        let (was, old_names) = (self.at, self.snapshot.names.clone());
        for (id, old, new) in &changes {
            if let Some(old) = old {
                let failed = self.failures(id, old, was);
                self.counts.add(failed, &old.summary, was, -1);
                if failed == 0 {
                    self.total -= 1;
                    self.kept.remove(&Ranked {
                        place: place(self.query.sort, id, old, &old_names),
                        desc,
                    });
                }
            }
            if let Some(new) = new {
                let failed = self.failures(id, new, now);
                self.counts.add(failed, &new.summary, now, 1);
                if failed == 0 {
                    self.total += 1;
                    let ranked = Ranked {
                        place: place(self.query.sort, id, new, &snapshot.names),
                        desc,
                    };
                    if self.after_cursor(&ranked.place)
                        && self.boundary.as_ref().is_none_or(|b| ranked <= *b)
                    {
                        self.kept.insert(ranked);
                    }
                }
            }
        }
        self.snapshot = snapshot;
        self.at = now;
        let keep = keep(self.query.limit);
        if self.kept.len() > keep {
            while self.kept.len() > keep {
                self.kept.pop_last();
            }
            self.boundary = self.kept.last().cloned();
        }
        if self.boundary.is_some() && self.kept.len() <= self.query.limit {
            // Too few kept to know the page and whether another follows: a pass.
            return ViewState::compute(&self.query, self.snapshot.clone(), now);
        }
        self
    }

    /// The table it answers over.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The page: its locks rendered and judged as of the state's instant, with the totals.
    pub fn page(&self, judge: &Judge) -> Page {
        let limit = self.query.limit;
        let locks: Vec<LockView> = self
            .kept
            .iter()
            .take(limit)
            .filter_map(|r| {
                let entry = self.snapshot.locks.get(&*r.place.id)?;
                let view = self.snapshot.render_marked(&r.place.id, &entry.stored);
                Some(super::ticked(view, self.at, judge))
            })
            .collect();
        let next = (self.kept.len() > limit)
            .then(|| self.kept.iter().nth(limit - 1))
            .flatten()
            .map(|last| {
                cursor_text(
                    self.query.fingerprint(),
                    self.at,
                    last.place.sort_key(),
                    last.place.id.to_string(),
                )
            });
        Page {
            locks,
            total: self.total.unsigned_abs(),
            facets: self.counts.facets(&self.snapshot.names),
            next,
        }
    }

    fn after_cursor(&self, place: &Place) -> bool {
        let Some((key, id)) = &self.query.keyset.after else {
            return true;
        };
        let by_key = place.cmp_sort_key(key);
        let by_key = match self.query.keyset.order {
            Order::Asc => by_key,
            Order::Desc => by_key.reverse(),
        };
        by_key.then_with(|| (*place.id).cmp(id.as_str())) == Ordering::Greater
    }

    /// The filters lock `id` fails as of `now`, as [`LockQuery`]'s bits.
    fn failures(&self, id: &Arc<str>, entry: &Entry, now: i64) -> u8 {
        let (q, s, r) = (&self.query, &entry.summary, &self.resolved);
        let fails = |failed: bool, bit: u8| if failed { bit } else { 0 };
        fails(
            r.source.is_some_and(|want| want != Some(s.source)),
            Facet::Source.bit(),
        ) | fails(
            r.recipe.is_some_and(|want| want != Some(s.recipe)),
            Facet::Recipe.bit(),
        ) | fails(
            q.backend.is_some() && r.backend != Some(s.backend),
            Facet::Backend.bit(),
        ) | fails(
            q.state.is_some_and(|st| !state_of(st, s, now)),
            Facet::State.bit(),
        ) | fails(
            q.stale.is_some_and(|want| want != s.stale(now))
                || q.id.as_deref().is_some_and(|want| want != &**id)
                || q.q
                    .as_deref()
                    .is_some_and(|text| !mentions(text, id, entry)),
            OTHER,
        )
    }
}

/// Whether `q` is in the lock's path or one of its participants' sessions (as
/// [`super::query::mentions`] says of its view), rendering the record only when its bytes hold
/// the text.
fn mentions(q: &str, id: &Arc<str>, entry: &Entry) -> bool {
    let in_path = match entry.summary.path_in() {
        PathIn::Id | PathIn::IdUnslashed => {
            let mut path: Vec<u8> = path_bytes(id).collect();
            if entry.summary.path_in() == PathIn::IdUnslashed && !path.is_empty() {
                path.remove(0);
            }
            bytes_contain_ignoring_ascii_case(&path, q.as_bytes())
        }
        PathIn::Record => false,
    };
    in_path
        || ((entry.summary.path_in() == PathIn::Record || entry.stored.may_mention(q))
            && super::query::mentions(&entry.stored.render(id), q))
}

/// Lock `id`'s place under `sort`, from its summary (its record only for a path its id does
/// not give).
fn place(sort: Sort, id: &Arc<str>, entry: &Entry, names: &Names) -> Place {
    let s = &entry.summary;
    // As the view's key: the earliest start negated; nobody there is the least.
    let lasted = |any: bool, since: i64| {
        if any {
            since.saturating_neg()
        } else {
            i64::MIN
        }
    };
    let name = |list: &[Arc<str>], at: u16, or: fn(LockView) -> String| {
        list.get(usize::from(at))
            .cloned()
            .unwrap_or_else(|| Arc::from(or(entry.stored.render(id))))
    };
    let key = match sort {
        Sort::Path => match s.path_in() {
            PathIn::Id => Key::IdPath(false),
            PathIn::IdUnslashed => Key::IdPath(true),
            PathIn::Record => Key::Text(Arc::from(entry.stored.render(id).path)),
        },
        Sort::Source => Key::Text(name(&names.sources, s.source, |v| v.source)),
        Sort::Recipe => Key::Text(name(&names.recipes, s.recipe, |v| v.recipe)),
        Sort::HeldFor => Key::Number(lasted(s.held(), s.held_since)),
        Sort::LongestWait => Key::Number(lasted(s.waiting(), s.wait_since)),
        Sort::Attention => Key::Number(lasted(
            s.held() || s.waiting(),
            s.held_since.min(s.wait_since),
        )),
        Sort::Waiters => Key::Number(i64::from(s.waiters)),
        Sort::FanOut => Key::Number(i64::from(s.fan_out)),
    };
    Place {
        key,
        id: id.clone(),
    }
}

#[cfg(test)]
mod tests {
    //! The index's pages equal the full pass's ([`super::super::query::page`]) over random
    //! tables, queries, changes and instants.

    use super::*;
    use crate::http::paging::pairs;
    use lockscope_core::aggregate::summary::{retime, Interner};
    use lockscope_core::aggregate::StoredLock;
    use lockscope_model::wire::{HolderView, StuckLimits, StuckRules, StuckThresholds, WaiterView};
    use proptest::prelude::*;

    /// A table built as the aggregator builds it.
    #[derive(Clone)]
    struct Table {
        snapshot: Snapshot,
        interner: Arc<std::sync::Mutex<Interner>>,
    }

    fn judge() -> Judge {
        let limits = |w, c| StuckLimits {
            warning_ms: Some(w),
            critical_ms: Some(c),
        };
        Judge {
            stale_hold_ms: 50_000,
            stuck: StuckThresholds {
                global: StuckRules {
                    wait: limits(20_000, 60_000),
                    hold: limits(40_000, 80_000),
                },
                ..StuckThresholds::default()
            },
        }
    }

    impl Table {
        fn new() -> Table {
            let interner = Interner::new(&["s1".into(), "s2".into()]);
            Table {
                snapshot: Snapshot {
                    names: interner.names(),
                    ..Snapshot::default()
                },
                interner: Arc::new(std::sync::Mutex::new(interner)),
            }
        }

        fn put(&mut self, view: &LockView, now: i64) {
            let id: Arc<str> = Arc::from(view.id.as_str());
            let stored = StoredLock::encode(view);
            let view = stored.render(&id);
            let mut interner = self.interner.lock().expect("interner");
            let summary = Summary::of(
                &view,
                interner.source(&view.source),
                interner.recipe(&view.recipe),
                &judge(),
            );
            let old = self.snapshot.locks.get(&*id).map(|e| e.summary);
            retime(
                &mut self.snapshot.timeline,
                &id,
                old.as_ref(),
                Some(&summary),
                now,
            );
            self.snapshot.locks.insert(id, Entry { stored, summary });
            self.snapshot.names = interner.names();
            self.snapshot.version += 1;
        }

        fn remove(&mut self, id: &str, now: i64) {
            if let Some((key, old)) = self.snapshot.locks.remove_with_key(id) {
                retime(
                    &mut self.snapshot.timeline,
                    &key,
                    Some(&old.summary),
                    None,
                    now,
                );
                self.snapshot.version += 1;
            }
        }
    }

    prop_compose! {
        fn holder()(since in 0i64..100_000, session in 0usize..3, node in 0u32..50) -> HolderView {
            HolderView {
                node: format!("n{node}"),
                session: ["0x0", "0xBeef", "tok"][session].to_string(),
                since_ms: since,
                ..HolderView::default()
            }
        }
    }

    prop_compose! {
        fn waiter()(since in 0i64..100_000, session in 0usize..3, node in 0u32..50) -> WaiterView {
            WaiterView {
                node: format!("w{node}"),
                session: ["0xA", "0xbeef", "tok"][session].to_string(),
                since_ms: since,
                ..WaiterView::default()
            }
        }
    }

    prop_compose! {
        fn lock()(
            source in 0usize..2,
            backend in 0usize..3,
            path in "[a-c/~ !ü]{0,6}",
            path_kind in 0usize..3,
            recipe in 0usize..4,
            holders in proptest::collection::vec(holder(), 0..3),
            waiters in proptest::collection::vec(waiter(), 0..3),
            herd in any::<bool>(),
            watchers in 0u32..4,
            child_watchers in 0u32..4,
            no_expiry in any::<bool>(),
            deadline in proptest::option::of(0i64..150_000),
            lease in proptest::option::of((3_000i64..60_000, 0i64..150_000)),
            usual in proptest::option::of(1i64..10_000),
            changed in 0i64..100_000,
        ) -> LockView {
            let source = ["s1", "s2"][source];
            let backend = [Backend::Redis, Backend::Zookeeper, Backend::Postgres][backend];
            // A path the id gives, one without its `/` (a Redis key), or one of its own.
            let (id_path, shown) = match path_kind {
                0 => (format!("/{path}"), format!("/{path}")),
                1 => (format!("/{path}"), path.clone()),
                _ => (format!("/x{path}"), format!("own{path}")),
            };
            LockView {
                id: lockscope_model::id::lock_id(source, &id_path),
                source: source.into(),
                backend,
                path: shown,
                recipe: ["token", "redisson_lock", "queue", "kazoo_lease"][recipe].into(),
                holders,
                waiters,
                herd,
                watchers,
                child_watchers,
                flags: if no_expiry { vec!["no_expiry".into()] } else { vec![] },
                deadline_ms: deadline,
                lease_ms: lease.map(|l| l.0),
                expires_at_ms: lease.map(|l| l.1),
                usual_hold_ms: usual,
                changed_ms: changed,
                ..LockView::default()
            }
        }
    }

    fn query_text() -> impl Strategy<Value = String> {
        (
            proptest::option::of(prop_oneof!["s1", "s2", "s3"]),
            proptest::option::of(prop_oneof!["redis", "zookeeper", "etcd"]),
            proptest::option::of(prop_oneof!["token", "queue", "nope"]),
            proptest::option::of(prop_oneof![
                "held", "waiting", "free", "stale", "herd", "stuck"
            ]),
            proptest::option::of(prop_oneof!["true", "false"]),
            proptest::option::of(prop_oneof!["a", "B", "beef", "/c", "own", "!"]),
            prop_oneof![
                "path",
                "held_for",
                "longest_wait",
                "waiters",
                "source",
                "attention",
                "recipe",
                "fan_out"
            ],
            proptest::option::of(prop_oneof!["asc", "desc"]),
            1usize..6,
        )
            .prop_map(
                |(source, backend, recipe, state, stale, q, sort, order, limit)| {
                    let mut out = format!("sort={sort}&limit={limit}");
                    for (name, value) in [
                        ("source", source),
                        ("backend", backend),
                        ("recipe", recipe),
                        ("state", state),
                        ("stale", stale),
                        ("q", q),
                        ("order", order),
                    ] {
                        if let Some(value) = value {
                            out.push_str(&format!("&{name}={}", urlencode(&value)));
                        }
                    }
                    out
                },
            )
    }

    fn urlencode(text: &str) -> String {
        form_urlencoded::byte_serialize(text.as_bytes()).collect()
    }

    /// The full pass's page: every lock rendered and judged.
    fn full(query: &LockQuery, table: &Snapshot, now: i64) -> Page {
        let judge = judge();
        super::super::query::page(query, query.candidates(table, now, &judge), now)
    }

    fn same(index: &Page, full: &Page, what: &str) -> Result<(), TestCaseError> {
        let ids = |p: &Page| p.locks.iter().map(|l| l.id.clone()).collect::<Vec<_>>();
        prop_assert_eq!(ids(index), ids(full), "{}: page", what);
        prop_assert_eq!(&index.locks, &full.locks, "{}: views", what);
        prop_assert_eq!(index.total, full.total, "{}: total", what);
        prop_assert_eq!(&index.facets, &full.facets, "{}: facets", what);
        prop_assert_eq!(&index.next, &full.next, "{}: next", what);
        Ok(())
    }

    /// The counts of `counted` that are not zero.
    fn nonzero<K: Ord + Clone>(counted: &[(K, u64)]) -> std::collections::BTreeMap<K, u64> {
        counted.iter().filter(|(_, n)| *n > 0).cloned().collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// `/metrics`' stale and stuck counts, which render only the locks their summaries
        /// flag, equal a full pass's that renders and judges every lock, as time passes.
        #[test]
        fn detection_counts_equal_a_full_pass(
            locks in proptest::collection::vec(lock(), 0..40),
            start in 0i64..120_000,
            later in 0i64..100_000,
        ) {
            let judge = judge();
            let mut table = Table::new();
            for lock in &locks {
                table.put(lock, start);
            }
            for now in [start, start + later] {
                let judged = crate::metrics::judge(
                    &table.snapshot,
                    &[],
                    &[],
                    now,
                    &judge,
                    &crate::http::waitfor::IdentityRules::default(),
                );
                let mut stale = std::collections::BTreeMap::new();
                let mut stuck = std::collections::BTreeMap::new();
                for lock in table.snapshot.views() {
                    for rule in lockscope_model::rules::stale_findings(&lock, now, judge.stale_hold_ms) {
                        *stale.entry((lock.source.clone(), rule.name())).or_insert(0u64) += 1;
                    }
                    if let Some(s) = lockscope_model::stuck::judge(&lock, now, &judge.stuck) {
                        *stuck.entry((lock.source.clone(), s.level, s.kind)).or_insert(0u64) += 1;
                    }
                }
                prop_assert_eq!(nonzero(&judged.stale), stale, "stale at {}", now);
                prop_assert_eq!(nonzero(&judged.stuck), stuck, "stuck at {}", now);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every page from the index equals the full pass's, page after page by cursor, and
        /// stays equal as locks change, go and come, and as time passes with no change at the
        /// source (locks turning stale or stuck move between pages and facets).
        #[test]
        fn index_pages_equal_full_passes(
            locks in proptest::collection::vec(lock(), 0..40),
            churn in proptest::collection::vec(
                (proptest::collection::vec(lock(), 0..6), proptest::collection::vec(0usize..40, 0..6), 0i64..40_000),
                1..5,
            ),
            query in query_text(),
            start in 0i64..120_000,
        ) {
            let judge = judge();
            let mut table = Table::new();
            for lock in &locks {
                table.put(lock, start);
            }
            let query = LockQuery::parse(&pairs(&query), start).expect("query");
            let snapshot = Arc::new(table.snapshot.clone());
            let mut state = ViewState::compute(&query, snapshot.clone(), start);
            same(&state.page(&judge), &full(&query, &snapshot, start), "first")?;
            // The next pages, by cursor.
            let mut next = state.page(&judge).next;
            let mut pages = 0;
            while let (Some(cursor), true) = (next, pages < 10) {
                pages += 1;
                let q = LockQuery::parse(
                    &pairs(&format!("{}&cursor={cursor}", query_string(&query))),
                    start,
                ).expect("cursor query");
                let page = ViewState::compute(&q, snapshot.clone(), start).page(&judge);
                same(&page, &full(&q, &snapshot, start), "next page")?;
                next = page.next;
            }
            // Churn and time.
            let mut now = start;
            for (puts, removes, later) in churn {
                now += later;
                let ids: Vec<String> = table.snapshot.locks.keys().map(|k| k.to_string()).collect();
                for i in removes {
                    if let Some(id) = ids.get(i % ids.len().max(1)) {
                        table.remove(id, now);
                    }
                }
                for lock in &puts {
                    table.put(lock, now);
                }
                let snapshot = Arc::new(table.snapshot.clone());
                state = state.advance(snapshot.clone(), now);
                same(&state.page(&judge), &full(&query, &snapshot, now), "advanced")?;
            }
        }
    }

    /// The query string `query` was parsed from, without a cursor (rebuilt from its fields).
    fn query_string(query: &LockQuery) -> String {
        let mut out = format!(
            "limit={}&sort={}&order={}",
            query.limit,
            sort_name(query.sort),
            if query.keyset.order == Order::Desc {
                "desc"
            } else {
                "asc"
            }
        );
        for (name, value) in [
            ("source", query.source.clone()),
            ("backend", query.backend.clone()),
            ("recipe", query.recipe.clone()),
            ("q", query.q.clone()),
            ("state", query.state.map(|s| s.name().to_string())),
            ("stale", query.stale.map(|s| s.to_string())),
        ] {
            if let Some(value) = value {
                out.push_str(&format!("&{name}={}", urlencode(&value)));
            }
        }
        out
    }

    fn sort_name(sort: Sort) -> &'static str {
        Sort::CHOICES
            .iter()
            .find(|(_, s)| *s == sort)
            .map_or("path", |(name, _)| name)
    }

    /// A lock crossing its stuck limit moves between pages and facets with no change at the
    /// source: the view advanced in time alone says so.
    #[test]
    fn a_lock_turning_stuck_moves_with_time_alone() {
        let judge = judge();
        let mut table = Table::new();
        let held = |path: &str, since| LockView {
            id: lockscope_model::id::lock_id("s1", path),
            source: "s1".into(),
            backend: Backend::Redis,
            path: path.into(),
            recipe: "token".into(),
            holders: vec![HolderView {
                node: "n".into(),
                session: "n".into(),
                since_ms: since,
                ..HolderView::default()
            }],
            ..LockView::default()
        };
        table.put(&held("/old", 0), 1_000);
        table.put(&held("/new", 30_000), 1_000);
        let query = LockQuery::parse(&pairs("state=stuck"), 1_000).expect("query");
        let snapshot = Arc::new(table.snapshot.clone());
        let state = ViewState::compute(&query, snapshot.clone(), 30_000);
        assert_eq!(state.page(&judge).total, 0);
        // The hold warning is 40 s: /old turns stuck after 40 s, /new after 70 s.
        let state = state.advance(snapshot.clone(), 40_001);
        let page = state.page(&judge);
        assert_eq!(
            page.locks
                .iter()
                .map(|l| l.path.as_str())
                .collect::<Vec<_>>(),
            ["/old"]
        );
        assert_eq!(page.facets.state.get("stuck"), Some(&1));
        let state = state.advance(snapshot.clone(), 70_001);
        assert_eq!(state.page(&judge).total, 2);
        assert_eq!(state.page(&judge), full(&query, &snapshot, 70_001));
    }
}
