//! The backend-neutral ledger: what a backend observes of its locks (holders and waiters by
//! id) turned into events, counters, hold/wait times, history and a graveyard, written once.
//!
//! A backend decodes its own layouts into an [`Observed`] per lock and hands it to
//! [`Ledger::observe`] with how to name the cause of each holder that went; the ledger diffs it
//! against what it last saw and books `acquired` / `queued` / `left_queue` / `released` events,
//! the acquisition and release counters, and the `since` of every participant. The backend then
//! builds the lock's view from the [`LedgerLock`] and its own details. Locks that go keep their
//! history in a [`Graveyard`] with retention, so a lock that comes back (or a link to a gone
//! one) keeps its timeline.
//!
//! The ZooKeeper path keeps its own diff for now: its release causes resolve after the fact
//! from ensemble rounds (see `aggregate/mod.rs`).
//!
//! Who counts: by default the diff books each acquisition and release it sees
//! ([`Counting::Here`]). A backend whose change notifications see more than its reads (Redis:
//! a key set and deleted between two reads) counts from those instead ([`Counting::Told`],
//! [`Ledger::book_acquired`], [`Ledger::book_released`]); the diff then still names the
//! holders it sees in events and history, but counts nothing, so each change is counted once.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use lockscope_model::wire::{LockEvent, LockView, ReleaseCause};

use super::counters::LockCounters;
use super::{push_event, History, HISTORY_LIMIT};

/// One participant as the backend sees it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Identifies the participant within the lock (a key, token, node, connection).
    pub id: String,
    /// Who it belongs to (a lease, client, session, connection), for events and sessions.
    pub session: String,
    /// When it began, when the backend can tell (a key's creation); else first seen.
    pub since_ms: Option<i64>,
}

/// A lock as the backend sees it now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    pub holders: Vec<Seen>,
    /// In queue order.
    pub waiters: Vec<Seen>,
}

/// One lock in the ledger, with what its backend keeps of it beside (`detail`: Redis keeps its
/// recipe, expiry and lease there rather than in a table of its own).
#[derive(Debug)]
pub struct LedgerLock<D = ()> {
    /// Its path (the ledger's key), current holders and waiters with the instant each began,
    /// and their sessions ([`LedgerLock::path`], [`LedgerLock::people`]).
    people: Packed,
    /// Last time holders or waiters changed.
    pub changed_ms: i64,
    /// Its events and totals; none until there is one (a lock found by a first read and not
    /// changed since has no history).
    history: Option<Box<History>>,
    /// The record last published (shared with the snapshot, which stores the same one).
    pub stored: Option<super::StoredLock>,
    pub detail: D,
}

/// A lock's holders and waiters as the ledger keeps them, unpacked ([`LedgerLock::people`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct People<'a> {
    /// Current holders and waiters (in queue order) with the instant each began (epoch ms).
    #[serde(borrow)]
    pub holders: Vec<(&'a str, i64)>,
    #[serde(borrow)]
    pub waiters: Vec<(&'a str, i64)>,
    /// Participant id → its session, as last seen (named in release and queue events), only
    /// for participants whose session is not their id: most (a Redis token, an etcd key, a
    /// database connection) are their own session and cost nothing here.
    #[serde(borrow)]
    pub sessions: Vec<(&'a str, &'a str)>,
}

impl People<'_> {
    /// The session of participant `id` as last seen (its own id when it is its own session).
    pub fn session_of<'a>(&'a self, id: &'a str) -> &'a str {
        self.sessions
            .iter()
            .find(|(p, _)| *p == id)
            .map_or(id, |(_, session)| session)
    }
}

/// A lock's path and [`People`] packed in one allocation (`postcard`): a lock held by one token
/// costs one ~64-byte block here, where its key in a map, a boxed slice of `(String, i64)` and
/// the string cost three blocks, three fat pointers in the entry and a 24-byte slot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Packed(Box<[u8]>);

impl Packed {
    fn pack(path: &str, people: &People<'_>) -> Packed {
        // Encoding into a Vec cannot fail: the types are strings and integers.
        let mut bytes = postcard::to_allocvec(path).unwrap_or_default();
        bytes.extend(postcard::to_allocvec(people).unwrap_or_default());
        Packed(bytes.into_boxed_slice())
    }

    /// The path, and the bytes of the people after it.
    fn split(&self) -> (&str, &[u8]) {
        // Packed here from the same types: decoding cannot fail.
        postcard::take_from_bytes::<&str>(&self.0).unwrap_or(("", &[]))
    }

    fn path(&self) -> &str {
        self.split().0
    }

    fn unpack(&self) -> People<'_> {
        postcard::from_bytes(self.split().1).unwrap_or_default()
    }
}

/// One source's ledger entries, found by path: a table of pointers (8 bytes a slot, where a
/// map from a boxed path took 24) whose entries keep their own path ([`LedgerLock::path`]).
#[derive(Default)]
pub struct Locks<D> {
    table: HashTable<Box<LedgerLock<D>>>,
    hasher: std::hash::RandomState,
}

impl<D: std::fmt::Debug> std::fmt::Debug for Locks<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Locks({})", self.table.len())
    }
}

impl<D> Locks<D> {
    fn hash(&self, path: &str) -> u64 {
        self.hasher.hash_one(path)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn contains_key(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    pub fn get(&self, path: &str) -> Option<&LedgerLock<D>> {
        self.table
            .find(self.hash(path), |l| l.path() == path)
            .map(|l| &**l)
    }

    pub fn get_mut(&mut self, path: &str) -> Option<&mut LedgerLock<D>> {
        let hash = self.hash(path);
        self.table
            .find_mut(hash, |l| l.path() == path)
            .map(|l| &mut **l)
    }

    /// Every lock with its path.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &LedgerLock<D>)> {
        self.table.iter().map(|l| (l.path(), &**l))
    }

    /// Every path.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.table.iter().map(|l| l.path())
    }

    fn remove(&mut self, path: &str) -> Option<Box<LedgerLock<D>>> {
        let hash = self.hash(path);
        let entry = self.table.find_entry(hash, |l| l.path() == path).ok()?;
        Some(entry.remove().0)
    }

    /// Keeps `lock` (whose path is not kept yet).
    fn insert(&mut self, lock: Box<LedgerLock<D>>) {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(lock.path());
        self.table
            .insert_unique(hash, lock, |l| hasher.hash_one(l.path()));
    }
}

/// The history of a lock that has none yet.
static NO_HISTORY: History = History {
    events: std::collections::VecDeque::new(),
    acquisitions: 0,
    releases: 0,
    last: None,
};

impl<D> LedgerLock<D> {
    /// Its events and totals.
    pub fn history(&self) -> &History {
        self.history.as_deref().unwrap_or(&NO_HISTORY)
    }

    /// Its events and totals, to book in.
    pub fn history_mut(&mut self) -> &mut History {
        self.history.get_or_insert_with(Box::default)
    }

    /// Its holders, waiters and their sessions (decoded: a few hundred nanoseconds).
    pub fn people(&self) -> People<'_> {
        self.people.unpack()
    }

    /// Its path, the ledger's key for it.
    pub fn path(&self) -> &str {
        self.people.path()
    }
}

/// What [`Ledger::observe`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The lock is new or its holders or waiters changed: rebuild and publish its view.
    Changed,
    /// Nothing the ledger tracks changed (the backend's details may have).
    Same,
    /// The lock with this id went: it is to be removed from the snapshot.
    Gone(String),
    /// Not known and not there: nothing to do.
    Absent,
}

/// Histories of gone locks, oldest evicted first once `limit` is reached.
#[derive(Debug)]
pub struct Graveyard<K: Ord + Clone + std::hash::Hash> {
    by_key: HashMap<K, History>,
    order: VecDeque<K>,
    limit: usize,
}

impl<K: Ord + Clone + std::hash::Hash> Default for Graveyard<K> {
    fn default() -> Self {
        Graveyard {
            by_key: HashMap::new(),
            order: VecDeque::new(),
            limit: HISTORY_LIMIT,
        }
    }
}

impl<K: Ord + Clone + std::hash::Hash> Graveyard<K> {
    /// Keeps `history` under `key`, evicting the oldest burials beyond the limit.
    pub fn bury(&mut self, key: K, history: History) {
        if self.by_key.insert(key.clone(), history).is_none() {
            self.order.push_back(key);
        }
        while self.by_key.len() > self.limit {
            match self.order.pop_front() {
                Some(old) => {
                    self.by_key.remove(&old);
                }
                None => break,
            }
        }
    }

    /// Takes the history of a lock that is back.
    pub fn exhume(&mut self, key: &K) -> Option<History> {
        let history = self.by_key.remove(key)?;
        if let Some(at) = self.order.iter().position(|k| k == key) {
            self.order.remove(at);
        }
        Some(history)
    }

    pub fn get(&self, key: &K) -> Option<&History> {
        self.by_key.get(key)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut History> {
        self.by_key.get_mut(key)
    }

    /// The history for `key`, buried now if there is none (a release booked after the fact).
    pub fn entry(&mut self, key: K) -> &mut History {
        if !self.by_key.contains_key(&key) {
            self.bury(key.clone(), History::default());
        }
        self.by_key.entry(key).or_default()
    }

    pub fn values(&self) -> impl Iterator<Item = &History> {
        self.by_key.values()
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// Where the ledger books: the time of the change, the holders being force-released (their
/// release is `forced`), and the lock history store.
pub struct Booking<'a> {
    pub now: i64,
    pub forced: &'a mut super::ForcedMarks,
    pub store: &'a Option<lockscope_store::Store>,
    /// Why a waiter that left the queue without taking the lock left, when the backend can
    /// tell (a database's lock wait timeout); `None`: not told.
    pub left: Option<&'a LeftCause<'a>>,
}

/// Names why a waiter left the queue without the lock (`None`: not told).
pub type LeftCause<'a> = dyn Fn(&str) -> Option<ReleaseCause> + 'a;

/// Who counts a lock's acquisitions and releases (the counters, the wait and hold histograms,
/// the lock's totals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// The diff of what the backend observes books them.
    Here,
    /// The backend books them itself ([`Ledger::book_acquired`], [`Ledger::book_released`]);
    /// the diff writes the holders' events and observes the waits it sees, and counts nothing.
    Told,
}

/// One source's locks as the ledger keeps them, by path.
#[derive(Debug)]
pub struct Ledger<D = ()> {
    source: String,
    /// A lock's id from the source's name and the lock's path.
    id_of: fn(&str, &str) -> String,
    /// By path. Entries are boxed: a table sized for a million locks has twice as many slots,
    /// and an empty slot then costs a pointer, not an entry.
    pub locks: Locks<D>,
    pub graveyard: Graveyard<String>,
    pub counters: LockCounters,
}

impl<D: Default> Ledger<D> {
    /// A ledger whose lock ids are made from paths by `id_of(source, path)`.
    pub fn new(source: &str, max_labels: usize, id_of: fn(&str, &str) -> String) -> Self {
        Ledger {
            source: source.to_string(),
            id_of,
            locks: Locks::default(),
            graveyard: Graveyard::default(),
            counters: LockCounters::new(max_labels),
        }
    }

    /// Applies what the backend sees of `path` now (`None`: the lock is gone). `bootstrap`:
    /// part of a first full read, so what is found was not "acquired" now. `cause` names why a
    /// holder that is no longer there went; `forced` holders (an operator's release) go as
    /// `forced` whatever it says.
    pub fn observe(
        &mut self,
        path: &str,
        observed: Option<&Observed>,
        bootstrap: bool,
        cause: &mut dyn FnMut(&str) -> ReleaseCause,
        cx: &mut Booking<'_>,
    ) -> Outcome {
        self.observe_counting(path, observed, bootstrap, cause, cx, Counting::Here)
    }

    /// [`Self::observe`], with who counts the lock's acquisitions and releases.
    pub fn observe_counting(
        &mut self,
        path: &str,
        observed: Option<&Observed>,
        bootstrap: bool,
        cause: &mut dyn FnMut(&str) -> ReleaseCause,
        cx: &mut Booking<'_>,
        counting: Counting,
    ) -> Outcome {
        let (now, forced, store, left) = (cx.now, &mut *cx.forced, cx.store, cx.left);
        // Made when needed rather than kept per lock: the id follows from the path.
        let id = self.id_of(path);
        let left_cause = |waiter: &str| left.and_then(|f| f(waiter));
        let Some(observed) = observed else {
            let Some(mut lock) = self.locks.remove(path) else {
                return Outcome::Absent;
            };
            let packed = lock.people.clone();
            let people = packed.unpack();
            let at = (now, store, counting);
            self.release_unless(path, &id, &mut lock, &people, |_| false, cause, forced, at);
            leave_queue_unless(store, &id, &mut lock, &people, |_| false, now, &left_cause);
            let last = lock.stored.as_ref().map(|s| s.render(&id));
            let history = lock.history.take().map(|h| *h).unwrap_or_default();
            let history = history.buried(&last.unwrap_or_default(), now);
            self.graveyard.bury(path.to_string(), history);
            return Outcome::Gone(id);
        };
        // Taken out while the ledger books, and put back; made when new.
        let (mut lock, is_new) = match self.locks.remove(path) {
            Some(lock) => (lock, false),
            None => {
                self.counters.label_for(path);
                let history = self.graveyard.exhume(&path.to_string()).map(|mut h| {
                    h.last = None;
                    Box::new(h)
                });
                let lock = Box::new(LedgerLock {
                    people: Packed::pack(path, &People::default()),
                    changed_ms: now,
                    history,
                    stored: None,
                    detail: D::default(),
                });
                (lock, true)
            }
        };
        let quiet = is_new && bootstrap;
        let packed = lock.people.clone();
        let old = packed.unpack();
        let old_holders: HashMap<&str, i64> = old.holders.iter().copied().collect();
        let old_waiters: HashMap<&str, i64> = old.waiters.iter().copied().collect();
        // Releases first: a holder replaced in one change went before the next one came.
        let kept: std::collections::HashSet<&str> =
            observed.holders.iter().map(|h| h.id.as_str()).collect();
        let at = (now, store, counting);
        let stays = |holder: &str| kept.contains(holder);
        self.release_unless(path, &id, &mut lock, &old, stays, cause, forced, at);
        let mut holders = Vec::with_capacity(observed.holders.len());
        for seen in &observed.holders {
            let since = match old_holders.get(seen.id.as_str()) {
                Some(since) => *since,
                None => {
                    // Taken now, unless the backend knows it began earlier (a key's creation
                    // predates lockscope's first look); a waiter that takes over began now.
                    let since = match (old_waiters.get(seen.id.as_str()), seen.since_ms) {
                        (Some(_), _) => now,
                        (None, Some(at)) if quiet || is_new => at.min(now),
                        _ => now,
                    };
                    if !quiet {
                        let waited = old_waiters.get(seen.id.as_str()).map(|first| now - first);
                        match counting {
                            Counting::Here => {
                                lock.history_mut().acquisitions += 1;
                                self.counters.acquired_maybe_waited(path, waited);
                            }
                            // Counted by the backend; the wait is known only here.
                            Counting::Told => {
                                if let Some(waited) = waited {
                                    self.counters.waited(path, waited);
                                }
                            }
                        }
                        push_event(
                            store,
                            &id,
                            &mut lock.history_mut().events,
                            LockEvent {
                                at_ms: since,
                                kind: lockscope_model::wire::EventKind::Acquired,
                                node: seen.id.clone(),
                                session: seen.session.clone(),
                                cause: None,
                                duration_ms: waited,
                            },
                        );
                    }
                    since
                }
            };
            holders.push((seen.id.as_str(), since));
        }
        let mut waiters = Vec::with_capacity(observed.waiters.len());
        for seen in &observed.waiters {
            let since = match old_waiters.get(seen.id.as_str()) {
                Some(since) => *since,
                None => {
                    let since = seen.since_ms.map_or(now, |at| at.min(now));
                    if !quiet {
                        push_event(
                            store,
                            &id,
                            &mut lock.history_mut().events,
                            LockEvent {
                                at_ms: since,
                                kind: lockscope_model::wire::EventKind::Queued,
                                node: seen.id.clone(),
                                session: seen.session.clone(),
                                cause: None,
                                duration_ms: None,
                            },
                        );
                    }
                    since
                }
            };
            waiters.push((seen.id.as_str(), since));
        }
        let waiting: std::collections::HashSet<&str> =
            observed.waiters.iter().map(|w| w.id.as_str()).collect();
        let stays = |waiter: &str| waiting.contains(waiter) || kept.contains(waiter);
        leave_queue_unless(store, &id, &mut lock, &old, stays, now, &left_cause);
        let changed = is_new
            || holders
                .iter()
                .map(|(h, _)| h)
                .ne(old.holders.iter().map(|(h, _)| h))
            || waiters
                .iter()
                .map(|(w, _)| w)
                .ne(old.waiters.iter().map(|(w, _)| w));
        let sessions = observed
            .holders
            .iter()
            .chain(&observed.waiters)
            .filter(|p| p.session != p.id)
            .map(|p| (p.id.as_str(), p.session.as_str()))
            .collect();
        lock.people = Packed::pack(
            path,
            &People {
                holders,
                waiters,
                sessions,
            },
        );
        if changed {
            lock.changed_ms = now;
        }
        self.locks.insert(lock);
        if changed {
            Outcome::Changed
        } else {
            Outcome::Same
        }
    }

    /// Books the release of every holder in `old` that `stays` does not keep (one an operator
    /// force-released as `forced`, whatever `cause` names).
    #[allow(clippy::too_many_arguments)]
    fn release_unless(
        &mut self,
        path: &str,
        id: &str,
        lock: &mut LedgerLock<D>,
        old: &People<'_>,
        stays: impl Fn(&str) -> bool,
        cause: &mut dyn FnMut(&str) -> ReleaseCause,
        forced: &mut super::ForcedMarks,
        (now, store, counting): (i64, &Option<lockscope_store::Store>, Counting),
    ) {
        for &(holder, since) in &old.holders {
            if stays(holder) {
                continue;
            }
            let cause = super::forced_or(forced, id, holder, cause(holder));
            let session = old.session_of(holder);
            self.release(
                path,
                id,
                lock,
                (holder, session),
                since,
                now,
                cause,
                store,
                counting,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn release(
        &mut self,
        path: &str,
        id: &str,
        lock: &mut LedgerLock<D>,
        (holder, session): (&str, &str),
        since: i64,
        now: i64,
        cause: ReleaseCause,
        store: &Option<lockscope_store::Store>,
        counting: Counting,
    ) {
        let held = (now - since).max(0);
        let session = session.to_string();
        match counting {
            Counting::Here => {
                self.counters.released(path, cause, held);
                lock.history_mut()
                    .released(store, id, holder, session, now, held, cause);
            }
            Counting::Told => push_event(
                store,
                id,
                &mut lock.history_mut().events,
                LockEvent {
                    at_ms: now,
                    kind: lockscope_model::wire::EventKind::Released,
                    node: holder.to_string(),
                    session,
                    cause: Some(cause),
                    duration_ms: Some(held),
                },
            ),
        }
    }

    /// Counts one acquisition of the lock at `path` that the backend saw happen (with
    /// [`Counting::Told`]), whether or not the lock is known (a hold too brief to read).
    pub fn book_acquired(&mut self, path: &str) {
        self.counters.acquired_maybe_waited(path, None);
        self.history_mut(path).acquisitions += 1;
    }

    /// Counts one release of the lock at `path` after `held_ms` that the backend saw happen
    /// (with [`Counting::Told`]).
    pub fn book_released(&mut self, path: &str, cause: ReleaseCause, held_ms: i64) {
        self.counters.released(path, cause, held_ms.max(0));
        self.history_mut(path).releases += 1;
    }

    /// The history that carries the totals of `path`: the lock's, or its graveyard entry (made
    /// now for a lock never observed, so the totals go on when it is).
    fn history_mut(&mut self, path: &str) -> &mut History {
        match self.locks.get_mut(path) {
            Some(lock) => lock.history_mut(),
            None => self.graveyard.entry(path.to_string()),
        }
    }

    /// Keeps `view` as the published view of the lock at `path` and queues it for publishing,
    /// unless it equals the one published.
    pub fn publish(&mut self, path: &str, view: LockView, lock_ops: &mut Vec<super::LockOp>) {
        let Some(entry) = self.locks.get_mut(path) else {
            return;
        };
        let stored = super::StoredLock::encode(&view);
        if entry.stored.as_ref() != Some(&stored) {
            entry.stored = Some(stored.clone());
            lock_ops.push(super::LockOp::Put(Arc::from(view.id.as_str()), stored));
        }
    }

    /// Lock ids by the session of each participant: (held, waited on), without repeats, for the
    /// locks whose participants' sessions `sessions_of` names (holders' and waiters').
    pub fn by_session<'a, K: Ord, T: 'a>(
        &self,
        locks: impl IntoIterator<Item = (&'a String, &'a T)>,
        sessions_of: impl Fn(&T) -> (Vec<K>, Vec<K>),
    ) -> BTreeMap<K, (Vec<String>, Vec<String>)> {
        let mut out: BTreeMap<K, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for (path, lock) in locks {
            if !self.locks.contains_key(path.as_str()) {
                continue;
            }
            let id = self.id_of(path);
            let (holds, waits) = sessions_of(lock);
            for k in holds {
                out.entry(k).or_default().0.push(id.clone());
            }
            for k in waits {
                out.entry(k).or_default().1.push(id.clone());
            }
        }
        for (holds, waits) in out.values_mut() {
            holds.dedup();
            waits.dedup();
        }
        out
    }

    /// The id of the lock at `path`.
    pub fn id_of(&self, path: &str) -> String {
        (self.id_of)(&self.source, path)
    }

    /// The history of the lock with `id`, current or gone: found by the paths the id can stand
    /// for (the path it spells, or that path without its leading `/`, as Redis keys and etcd
    /// keys are named), never by a walk over the locks.
    pub fn history_of(&self, id: &str) -> Option<&History> {
        let (source, spelled) = lockscope_model::id::parse_lock_id(id)?;
        if source != self.source {
            return None;
        }
        let unslashed = spelled.strip_prefix('/').map(str::to_string);
        [Some(spelled), unslashed]
            .into_iter()
            .flatten()
            .filter(|path| self.id_of(path) == id)
            .find_map(|path| match self.locks.get(path.as_str()) {
                Some(lock) => Some(lock.history()),
                None => self.graveyard.by_key.get(&path),
            })
    }
}

/// Books every waiter in `old` that `stays` does not keep as having left the queue.
fn leave_queue_unless<D>(
    store: &Option<lockscope_store::Store>,
    id: &str,
    lock: &mut LedgerLock<D>,
    old: &People<'_>,
    stays: impl Fn(&str) -> bool,
    now: i64,
    left_cause: &dyn Fn(&str) -> Option<ReleaseCause>,
) {
    for &(waiter, since) in &old.waiters {
        if !stays(waiter) {
            let session = old.session_of(waiter);
            let cause = left_cause(waiter);
            left_queue(store, id, lock, (waiter, session), since, now, cause);
        }
    }
}

fn left_queue<D>(
    store: &Option<lockscope_store::Store>,
    id: &str,
    lock: &mut LedgerLock<D>,
    (waiter, session): (&str, &str),
    since: i64,
    now: i64,
    cause: Option<ReleaseCause>,
) {
    let session = session.to_string();
    push_event(
        store,
        id,
        &mut lock.history_mut().events,
        LockEvent {
            at_ms: now,
            kind: lockscope_model::wire::EventKind::LeftQueue,
            node: waiter.to_string(),
            session,
            cause,
            duration_ms: Some((now - since).max(0)),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::id::lock_id;

    const NO_STORE: Option<lockscope_store::Store> = None;

    fn at(now: i64, forced: &mut crate::aggregate::ForcedMarks) -> Booking<'_> {
        Booking {
            now,
            forced,
            store: &NO_STORE,
            left: None,
        }
    }

    fn seen(id: &str) -> Seen {
        Seen {
            id: id.into(),
            session: format!("s-{id}"),
            since_ms: None,
        }
    }

    #[test]
    fn holders_and_waiters_become_events_and_counts() {
        let mut ledger: Ledger = Ledger::new("e", 100, lock_id);
        let mut forced = HashMap::new();
        let mut cause = |_: &str| ReleaseCause::Released;
        let one = Observed {
            holders: vec![seen("a")],
            waiters: vec![seen("b"), seen("c")],
        };
        let outcome = ledger.observe(
            "/l",
            Some(&one),
            false,
            &mut cause,
            &mut at(1_000, &mut forced),
        );
        assert_eq!(outcome, Outcome::Changed);
        // a releases, b takes over, c leaves.
        let two = Observed {
            holders: vec![seen("b")],
            waiters: vec![],
        };
        let outcome = ledger.observe(
            "/l",
            Some(&two),
            false,
            &mut cause,
            &mut at(2_000, &mut forced),
        );
        assert_eq!(outcome, Outcome::Changed);
        let lock = ledger.locks.get("/l").expect("kept");
        assert_eq!(lock.people().holders, [("b", 2_000)]);
        assert_eq!(lock.path(), "/l");
        assert_eq!(lock.history().acquisitions, 2);
        assert_eq!(lock.history().releases, 1);
        let kinds: Vec<&str> = lock
            .history()
            .events
            .iter()
            .map(|e| e.kind.as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "acquired",
                "queued",
                "queued",
                "released",
                "acquired",
                "left_queue"
            ]
        );
        let outcome = ledger.observe(
            "/l",
            Some(&two),
            false,
            &mut cause,
            &mut at(3_000, &mut forced),
        );
        assert_eq!(outcome, Outcome::Same);
        forced.insert(
            (ledger.id_of("/l"), "b".to_string()),
            crate::aggregate::ForcedMark {
                until_ms: i64::MAX,
                pending: 1,
                released: false,
            },
        );
        let outcome = ledger.observe("/l", None, false, &mut cause, &mut at(4_000, &mut forced));
        assert!(matches!(outcome, Outcome::Gone(_)));
        assert!(ledger.locks.is_empty());
        let history = ledger.graveyard.exhume(&"/l".to_string()).expect("buried");
        assert_eq!(
            history.events.back().and_then(|e| e.cause),
            Some(ReleaseCause::Forced)
        );
    }

    #[test]
    fn a_bootstrap_is_quiet_and_keeps_known_starts() {
        let mut ledger: Ledger = Ledger::new("e", 100, lock_id);
        let mut cause = |_: &str| ReleaseCause::Released;
        let observed = Observed {
            holders: vec![Seen {
                since_ms: Some(500),
                ..seen("a")
            }],
            waiters: vec![],
        };
        ledger.observe(
            "/l",
            Some(&observed),
            true,
            &mut cause,
            &mut at(1_000, &mut HashMap::new()),
        );
        let lock = ledger.locks.get("/l").expect("kept");
        assert_eq!(lock.people().holders, [("a", 500)]);
        assert!(lock.history().events.is_empty());
        assert_eq!(lock.history().acquisitions, 0);
    }

    #[test]
    fn the_graveyard_evicts_the_oldest_not_everything() {
        let mut graveyard: Graveyard<String> = Graveyard {
            limit: 3,
            ..Graveyard::default()
        };
        for i in 0..5 {
            graveyard.bury(format!("k{i}"), History::default());
        }
        assert_eq!(graveyard.len(), 3);
        assert!(graveyard.exhume(&"k0".to_string()).is_none());
        assert!(graveyard.exhume(&"k4".to_string()).is_some());
        assert_eq!(graveyard.len(), 2);
    }
}
