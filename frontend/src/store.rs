//! The UI's copy of lockscope's state, fed by the event stream, and the overview's selection
//! (filter, sort, page) over it. Pure data: the stream handler applies events, pages read it.

use std::collections::{BTreeSet, HashMap};

use lockscope_model::rules::staleness;
use lockscope_model::wire::{Backend, LockView, SourceView, StreamEvent};

/// Every lock and source the server has told us about.
#[derive(Debug, Clone, Default)]
pub struct Store {
    pub locks: HashMap<String, LockView>,
    pub sources: Vec<SourceView>,
    /// Bumped on every applied batch; pages that re-fetch details watch it.
    pub seq: u64,
    /// A snapshot has arrived since the page loaded.
    pub loaded: bool,
}

impl Store {
    pub fn apply(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Snapshot { sources, locks } => {
                self.sources = sources;
                self.locks = locks.into_iter().map(|l| (l.id.clone(), l)).collect();
                self.loaded = true;
            }
            StreamEvent::Lock { lock } => {
                self.locks.insert(lock.id.clone(), *lock);
            }
            StreamEvent::Removed { id } => {
                self.locks.remove(&id);
            }
            StreamEvent::Source { source } => {
                match self.sources.iter_mut().find(|s| s.name == source.name) {
                    Some(slot) => *slot = source,
                    None => self.sources.push(source),
                }
            }
        }
    }

    /// Distinct recipes, for the filter menu.
    pub fn recipes(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self.locks.values().map(|l| l.recipe.as_str()).collect();
        set.into_iter().map(str::to_string).collect()
    }

    pub fn totals(&self, now_ms: i64, stale_hold_ms: i64) -> Totals {
        let mut t = Totals::default();
        for lock in self.locks.values() {
            t.locks += 1;
            if !lock.holders.is_empty() {
                t.held += 1;
            }
            t.waiters += lock.waiters.len();
            if lock.herd {
                t.herds += 1;
            }
            if staleness(lock, now_ms, stale_hold_ms).is_some() {
                t.stale += 1;
            }
        }
        t
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub locks: usize,
    pub held: usize,
    pub waiters: usize,
    pub herds: usize,
    pub stale: usize,
}

/// Which locks the overview shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub source: Option<String>,
    pub backend: Option<Backend>,
    pub recipe: Option<String>,
    /// Case-insensitive substring of the path, a holder or a waiter.
    pub text: String,
    pub only: Only,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Only {
    #[default]
    All,
    Held,
    Waiting,
    Herd,
    Stale,
}

impl Only {
    pub const ALL: [(Only, &'static str); 5] = [
        (Only::All, "all"),
        (Only::Held, "held"),
        (Only::Waiting, "with waiters"),
        (Only::Herd, "herd"),
        (Only::Stale, "stale"),
    ];
}

impl Filter {
    pub fn matches(&self, lock: &LockView, now_ms: i64, stale_hold_ms: i64) -> bool {
        if self.source.as_ref().is_some_and(|s| *s != lock.source)
            || self.backend.is_some_and(|b| b != lock.backend)
            || self.recipe.as_ref().is_some_and(|r| *r != lock.recipe)
        {
            return false;
        }
        let only = match self.only {
            Only::All => true,
            Only::Held => !lock.holders.is_empty(),
            Only::Waiting => !lock.waiters.is_empty(),
            Only::Herd => lock.herd,
            Only::Stale => staleness(lock, now_ms, stale_hold_ms).is_some(),
        };
        if !only {
            return false;
        }
        let text = self.text.trim().to_lowercase();
        text.is_empty()
            || lock.path.to_lowercase().contains(&text)
            || lock
                .holders
                .iter()
                .any(|h| h.session.to_lowercase().contains(&text))
            || lock
                .waiters
                .iter()
                .any(|w| w.session.to_lowercase().contains(&text))
    }
}

/// Overview columns that sort.
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sort {
    pub key: SortKey,
    /// Reverse of the key's natural order (natural = most interesting first).
    pub reversed: bool,
}

/// Oldest instant among holders (held since) and waiters (waiting since); `i64::MAX` for none.
fn oldest(lock: &LockView, holders: bool, waiters: bool) -> i64 {
    let h = lock.holders.iter().map(|h| h.since_ms).filter(|_| holders);
    let w = lock.waiters.iter().map(|w| w.since_ms).filter(|_| waiters);
    h.chain(w).min().unwrap_or(i64::MAX)
}

/// The locks `filter` lets through, in `sort` order. Sorting uses instants, not durations, so
/// the order does not churn as the clock ticks.
pub fn select<'a>(
    store: &'a Store,
    filter: &Filter,
    sort: Sort,
    now_ms: i64,
    stale_hold_ms: i64,
) -> Vec<&'a LockView> {
    let mut rows: Vec<&LockView> = store
        .locks
        .values()
        .filter(|l| filter.matches(l, now_ms, stale_hold_ms))
        .collect();
    rows.sort_by(|a, b| {
        let natural = match sort.key {
            SortKey::Attention => oldest(a, true, true).cmp(&oldest(b, true, true)),
            SortKey::Path => a.path.cmp(&b.path),
            SortKey::Source => a.source.cmp(&b.source).then(a.path.cmp(&b.path)),
            SortKey::Recipe => a.recipe.cmp(&b.recipe).then(a.path.cmp(&b.path)),
            SortKey::Held => oldest(a, true, false).cmp(&oldest(b, true, false)),
            SortKey::Waiters => b.waiters.len().cmp(&a.waiters.len()),
            SortKey::Wait => oldest(a, false, true).cmp(&oldest(b, false, true)),
            SortKey::Watchers => {
                (b.watchers + b.child_watchers).cmp(&(a.watchers + a.child_watchers))
            }
        }
        .then_with(|| a.id.cmp(&b.id));
        if sort.reversed {
            natural.reverse()
        } else {
            natural
        }
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::wire::{HolderView, WaiterView};

    fn lock(
        id: &str,
        backend: Backend,
        held_since: Option<i64>,
        waiting_since: &[i64],
    ) -> LockView {
        LockView {
            id: id.into(),
            source: if backend == Backend::Redis { "r" } else { "zk" }.into(),
            backend,
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
                    version: None,
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
                })
                .collect(),
            ..LockView::default()
        }
    }

    fn store() -> Store {
        let mut s = Store::default();
        s.apply(StreamEvent::Snapshot {
            sources: vec![],
            locks: vec![
                lock("a", Backend::Zookeeper, Some(900), &[]),
                lock("b", Backend::Zookeeper, Some(500), &[950]),
                lock("c", Backend::Redis, Some(100), &[]),
                lock("d", Backend::Zookeeper, None, &[]),
            ],
        });
        s
    }

    fn ids(rows: Vec<&LockView>) -> Vec<&str> {
        rows.into_iter().map(|l| l.id.as_str()).collect()
    }

    #[test]
    fn attention_puts_the_oldest_hold_or_wait_first() {
        let s = store();
        let rows = select(&s, &Filter::default(), Sort::default(), 1_000, 60_000);
        assert_eq!(ids(rows), ["c", "b", "a", "d"]);
        let reversed = Sort {
            key: SortKey::Attention,
            reversed: true,
        };
        assert_eq!(
            ids(select(&s, &Filter::default(), reversed, 1_000, 60_000)),
            ["d", "a", "b", "c"]
        );
        let waiters = Sort {
            key: SortKey::Waiters,
            reversed: false,
        };
        assert_eq!(
            ids(select(&s, &Filter::default(), waiters, 1_000, 60_000))[0],
            "b"
        );
    }

    #[test]
    fn filters_combine() {
        let s = store();
        let redis = Filter {
            backend: Some(Backend::Redis),
            ..Filter::default()
        };
        assert_eq!(
            ids(select(&s, &redis, Sort::default(), 1_000, 60_000)),
            ["c"]
        );
        let text = Filter {
            text: "FEED".into(),
            ..Filter::default()
        };
        assert_eq!(
            ids(select(&s, &text, Sort::default(), 1_000, 60_000)),
            ["b"]
        );
        let waiting = Filter {
            only: Only::Waiting,
            ..Filter::default()
        };
        assert_eq!(
            ids(select(&s, &waiting, Sort::default(), 1_000, 60_000)),
            ["b"]
        );
        let stale = Filter {
            only: Only::Stale,
            ..Filter::default()
        };
        assert_eq!(ids(select(&s, &stale, Sort::default(), 1_000, 850)), ["c"]);
    }

    #[test]
    fn deltas_update_remove_and_count() {
        let mut s = store();
        s.apply(StreamEvent::Removed { id: "d".into() });
        s.apply(StreamEvent::Lock {
            lock: Box::new(lock("e", Backend::Zookeeper, Some(10), &[20, 30])),
        });
        s.apply(StreamEvent::Source {
            source: SourceView::connecting("zk", Backend::Zookeeper),
        });
        let t = s.totals(1_000, 60_000);
        assert_eq!((t.locks, t.held, t.waiters, t.herds), (4, 4, 3, 0));
        assert_eq!(s.sources.len(), 1);
        assert_eq!(s.recipes(), ["mutex"]);
    }
}
