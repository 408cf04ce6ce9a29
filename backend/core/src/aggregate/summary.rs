//! The summary index kept beside the lock table: for every lock, the few facts a page, a
//! filter or a facet asks of it ([`Summary`]: its source, backend and recipe, whether it is
//! held, waited on or a herd, its sort keys, and the instants its stale and stuck judgements
//! start), and the [`Timeline`] of those instants. A query is answered from these without
//! rendering a lock's view; only the locks on a page are rendered.
//!
//! Every built-in stale rule and every stuck limit only starts firing as time passes
//! ([`lockscope_model::rules::stale_from`], [`lockscope_model::stuck::stuck_from`]), so a
//! lock's state as of any `now` is its summary compared with `now`, and the locks whose state
//! changes between two instants with no change at the source are the timeline's entries
//! between them.
//!
//! The aggregator computes a summary when it stores a record (from the view it renders for the
//! gauges anyway) and keeps both in the same persistent map entry ([`Entry`]); names repeat, so
//! sources and recipes are small numbers into [`Names`].

use std::collections::HashMap;
use std::sync::Arc;

use lockscope_model::rules::Judge;
use lockscope_model::wire::{Backend, LockView};

use super::StoredLock;

/// A lock in the snapshot: its record, and its summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub stored: StoredLock,
    pub summary: Summary,
}

/// What queries ask of a lock without rendering it (see the module docs). 48 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// When its longest-standing holder began; `i64::MAX` when nobody holds it.
    pub held_since: i64,
    /// When its longest waiter began; `i64::MAX` when nobody waits.
    pub wait_since: i64,
    /// From when a built-in stale rule fires (`i64::MAX`: never, `i64::MIN`: always).
    pub stale_from: i64,
    /// From when a wait or hold is past a stuck limit.
    pub stuck_from: i64,
    /// Its waiters.
    pub waiters: u32,
    /// Watchers of the holder plus watchers of the lock: the sessions woken when it is
    /// released.
    pub fan_out: u32,
    /// Its source, an index into [`Names::sources`].
    pub source: u16,
    /// Its recipe, an index into [`Names::recipes`].
    pub recipe: u16,
    pub backend: Backend,
    /// `HERD`, and where its path is read from (`PATH_*`).
    flags: u8,
}

const HERD: u8 = 1;
/// Somebody holds it.
const HELD: u8 = 8;
/// The path is the id's ([`lockscope_model::id::path_bytes`]).
const PATH_FROM_ID: u8 = 0;
/// The path is the id's without its leading `/` (a Redis key).
const PATH_UNSLASHED: u8 = 2;
/// The path is the record's own (an id that does not give it back).
const PATH_OWN: u8 = 4;
const PATH_MASK: u8 = 6;

/// Where a lock's path is read from, for ordering by path without building it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathIn {
    /// The id's path ([`lockscope_model::id::path_bytes`]).
    Id,
    /// The id's path without its first byte, `/`.
    IdUnslashed,
    /// Only the record has it.
    Record,
}

impl Summary {
    /// The summary of `view` (rendered from its record), judged by `judge`, with its source
    /// and recipe as numbers.
    pub fn of(view: &LockView, source: u16, recipe: u16, judge: &Judge) -> Summary {
        Summary {
            held_since: view
                .holders
                .iter()
                .map(|h| h.since_ms)
                .min()
                .unwrap_or(i64::MAX),
            wait_since: view
                .waiters
                .iter()
                .map(|w| w.since_ms)
                .min()
                .unwrap_or(i64::MAX),
            stale_from: lockscope_model::rules::stale_from(view, judge.stale_hold_ms),
            stuck_from: lockscope_model::stuck::stuck_from(view, &judge.stuck),
            waiters: u32::try_from(view.waiters.len()).unwrap_or(u32::MAX),
            fan_out: view.watchers.saturating_add(view.child_watchers),
            source,
            recipe,
            backend: view.backend,
            flags: if view.herd { HERD } else { 0 }
                | if view.holders.is_empty() { 0 } else { HELD }
                | path_kind(&view.id, &view.path),
        }
    }

    /// Where its path is read from.
    pub fn path_in(&self) -> PathIn {
        match self.flags & PATH_MASK {
            PATH_FROM_ID => PathIn::Id,
            PATH_UNSLASHED => PathIn::IdUnslashed,
            _ => PathIn::Record,
        }
    }

    pub fn held(&self) -> bool {
        self.flags & HELD != 0
    }

    pub fn waiting(&self) -> bool {
        self.waiters > 0
    }

    pub fn herd(&self) -> bool {
        self.flags & HERD != 0
    }

    /// Whether a built-in stale rule fires for it as of `now`.
    pub fn stale(&self, now: i64) -> bool {
        now >= self.stale_from
    }

    /// Whether a wait or hold of it is past a stuck limit as of `now`.
    pub fn stuck(&self, now: i64) -> bool {
        now >= self.stuck_from
    }

    /// The instants its state changes at with no change at the source: the ones the
    /// timeline keeps for it.
    fn turns(&self) -> impl Iterator<Item = i64> {
        [self.stale_from, self.stuck_from]
            .into_iter()
            .filter(|t| *t != i64::MIN && *t != i64::MAX)
    }
}

fn path_kind(id: &str, path: &str) -> u8 {
    use lockscope_model::id::path_bytes;
    if path_bytes(id).eq(path.bytes()) {
        return PATH_FROM_ID;
    }
    let mut from_id = path_bytes(id);
    if from_id.next() == Some(b'/') && from_id.eq(path.bytes()) {
        PATH_UNSLASHED
    } else {
        PATH_OWN
    }
}

/// Source and recipe names by number, shared by every snapshot until one is added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub sources: Vec<Arc<str>>,
    pub recipes: Vec<Arc<str>>,
}

impl Names {
    pub fn source_index(&self, name: &str) -> Option<u16> {
        position(&self.sources, name)
    }

    pub fn recipe_index(&self, name: &str) -> Option<u16> {
        position(&self.recipes, name)
    }
}

fn position(names: &[Arc<str>], name: &str) -> Option<u16> {
    names
        .iter()
        .position(|n| &**n == name)
        .and_then(|i| u16::try_from(i).ok())
}

/// The aggregator's side of [`Names`]: numbers given out, and the snapshot's copy renewed when
/// one is added (rarely: recipes are a fixed set, sources are configured).
#[derive(Debug, Default)]
pub struct Interner {
    sources: HashMap<Arc<str>, u16>,
    recipes: HashMap<Arc<str>, u16>,
    names: Arc<Names>,
}

impl Interner {
    /// Numbers for `sources`, in order (the snapshot's order).
    pub fn new(sources: &[String]) -> Interner {
        let mut interner = Interner::default();
        for source in sources {
            interner.source(source);
        }
        interner
    }

    pub fn names(&self) -> Arc<Names> {
        self.names.clone()
    }

    /// The number of source `name` (the last one past 65,535 names, which configuration
    /// never reaches).
    pub fn source(&mut self, name: &str) -> u16 {
        intern(&mut self.sources, &mut self.names, name, |n| &mut n.sources)
    }

    /// The number of recipe `name`.
    pub fn recipe(&mut self, name: &str) -> u16 {
        intern(&mut self.recipes, &mut self.names, name, |n| &mut n.recipes)
    }
}

fn intern(
    numbers: &mut HashMap<Arc<str>, u16>,
    names: &mut Arc<Names>,
    name: &str,
    list: fn(&mut Names) -> &mut Vec<Arc<str>>,
) -> u16 {
    if let Some(n) = numbers.get(name) {
        return *n;
    }
    let names = Arc::make_mut(names);
    let list = list(names);
    let Ok(n) = u16::try_from(list.len()) else {
        return u16::MAX;
    };
    let name: Arc<str> = Arc::from(name);
    list.push(name.clone());
    numbers.insert(name, n);
    n
}

/// The instants lock states turn at, with the lock, kept as records change: `(bucket, id)`,
/// one entry per bucket of [`BUCKET_MS`] holding a finite turn of the lock's summary.
/// Persistent like the table: a snapshot's copy shares all but the changed paths.
///
/// Buckets rather than instants: turns are booked in time order (a first read's locks all
/// turn stuck in the order they were read), which leaves a B-tree's nodes half full; within a
/// bucket entries sort by id, in no order of their coming, and fill nodes to ~70 %. A reader
/// gets every lock with a turn in its interval, and some from the buckets at its ends whose
/// turn is just outside it: it judges each again, which costs a lookup, not an error.
pub type Timeline = imbl::OrdSet<(i64, Arc<str>)>;

/// A timeline bucket's width (ms, a power of two).
const BUCKET_MS: i64 = 64;

fn bucket(at: i64) -> i64 {
    at.div_euclid(BUCKET_MS)
}

/// Turns older than this before "now" when a record is stored are left out of the timeline:
/// a view judged after the record was stored sees the lock as changed anyway, and judges it
/// then. (Slack for clocks that step back.)
const TIMELINE_PAST_MS: i64 = 60_000;

/// Books `old` → `new` summaries of lock `id` in the timeline.
pub fn retime(
    timeline: &mut Timeline,
    id: &Arc<str>,
    old: Option<&Summary>,
    new: Option<&Summary>,
    now: i64,
) {
    if old.map(|s| (s.stale_from, s.stuck_from)) == new.map(|s| (s.stale_from, s.stuck_from)) {
        return;
    }
    for at in old.into_iter().flat_map(Summary::turns) {
        timeline.remove(&(bucket(at), id.clone()));
    }
    for at in new.into_iter().flat_map(Summary::turns) {
        if at >= now.saturating_sub(TIMELINE_PAST_MS) {
            timeline.insert((bucket(at), id.clone()));
        }
    }
}

/// Every id whose state turns after `from` and at or before `to`, and some whose turn is in
/// the same bucket as `from` or `to` (see [`Timeline`]); an id may come twice.
pub fn turning(timeline: &Timeline, from: i64, to: i64) -> impl Iterator<Item = &Arc<str>> {
    // Ids are ASCII: the empty id sorts before every id of a bucket, this one after.
    let first: Arc<str> = Arc::from("");
    let last: Arc<str> = Arc::from("\u{10FFFF}");
    let range = (
        std::ops::Bound::Included((bucket(from), first)),
        std::ops::Bound::Included((bucket(to), last)),
    );
    let range = if from < to {
        Some(timeline.range(range))
    } else {
        None
    };
    range.into_iter().flatten().map(|(_, id)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_is_small() {
        assert_eq!(std::mem::size_of::<Summary>(), 48);
    }

    #[test]
    fn the_timeline_finds_turns_between_two_instants() {
        let mut timeline = Timeline::new();
        let summary = |stale_from, stuck_from| Summary {
            held_since: 0,
            wait_since: i64::MAX,
            stale_from,
            stuck_from,
            waiters: 0,
            fan_out: 0,
            source: 0,
            recipe: 0,
            backend: Backend::Redis,
            flags: 0,
        };
        let a: Arc<str> = Arc::from("s~a");
        let b: Arc<str> = Arc::from("s~b");
        // Buckets of 64 ms: a turns in buckets 15 and 31, b in 23.
        retime(&mut timeline, &a, None, Some(&summary(1_000, 2_000)), 0);
        retime(&mut timeline, &b, None, Some(&summary(1_500, i64::MAX)), 0);
        let ids = |timeline: &Timeline, from, to| -> Vec<String> {
            turning(timeline, from, to).map(|s| s.to_string()).collect()
        };
        assert_eq!(ids(&timeline, 0, 900), Vec::<String>::new());
        assert_eq!(ids(&timeline, 900, 1_000), ["s~a"]);
        // The turn at 1,000 is not after `from`, but in its bucket: given again.
        assert_eq!(ids(&timeline, 1_000, 1_500), ["s~a", "s~b"]);
        assert_eq!(ids(&timeline, 1_100, 1_499), ["s~b"]);
        assert_eq!(ids(&timeline, 1_600, 1_900), Vec::<String>::new());
        assert_eq!(ids(&timeline, 0, 10_000), ["s~a", "s~b", "s~a"]);
        retime(&mut timeline, &a, Some(&summary(1_000, 2_000)), None, 0);
        assert_eq!(ids(&timeline, 0, 10_000), ["s~b"]);
        assert_eq!(timeline.len(), 1);
    }
}
