//! Which lock keys exist on one Redis member, as the member's own keyspace notifications tell:
//! the one place the Redis backend decides its acquisitions and releases ([`KeyChange`]). Each
//! key is kept once, with when it is to be read again (its TTL's end: [`Lives::set_deadline`],
//! [`Lives::due`]).
//!
//! Reads show holders; they cannot count changes. A notification says only the key and the
//! command (`set`, `hincrby`, `del`, `expired`, …), but it says it for every change: a key set
//! and deleted between two reads (a hold of one round trip, ten in a row coalesced into one
//! dirty key) still sends both. So a key coming to exist is an acquisition and a key going is
//! a release, timed by when the notifications arrived, whatever the reads saw. Decided by
//! structure ([`effect`]):
//! * Creating a key (`set`, `hset`, `hincrby`, …) that does not exist is an acquisition: a
//!   token lock's `SET NX`, python-redis-lock's `SET NX`, Redisson's first `HINCRBY`/`HSET`.
//!   The same commands on a key that exists are not: Redisson re-entry (`hincrby` of a held
//!   field), a second reader of a read-write lock, ShedLock's `SET XX` when it shortens a hold.
//! * `del` (also `UNLINK`, Redisson's final unlock, a compare-and-delete), `expired`, `evicted`,
//!   and a key renamed or moved away are releases; `expire`/`pexpire` (the watchdog, an
//!   extension) and `persist` change nothing.
//! * Keys that are not locks never enter: companions (a fair lock's queue and timeout zset,
//!   a fencing counter, permit timeouts — they change the lock's waiters, read with it),
//!   Redisson's helper strings, lists, zsets, counters created by `INCR`, and keys read as
//!   permits or counts (semaphores, latches: their comings and goings are not holds).
//!
//! Notifications are at-most-once: a reconnect or a server that drops its subscriber loses
//! the changes between. The full scan that follows ([`Lives::scan_merged`]) finds the net
//! difference — a key held that no notification created, one gone that none removed — and
//! reports it as one acquisition or release; holds that came and went in the gap are lost.
//! The first scan of all only finds what was held before lockscope looked (no acquisition).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashSet};
use std::hash::BuildHasher;

use hashbrown::HashTable;

use lockscope_model::redis::{KeyHint, RedisRecipe};
use lockscope_model::wire::ReleaseCause;

use super::{ChangeKind, KeyChange, KeyReport};

/// What a keyspace notification's command does to the key's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Creates the key if it is missing (and changes it otherwise).
    Create,
    /// The key is gone.
    Remove(ReleaseCause),
    /// Neither: a renewal, a field changed, a type lockscope does not count.
    Nothing,
}

/// The effect of the notification `event` (the message of `__keyspace@<db>__:<key>`).
pub fn effect(event: &[u8]) -> Effect {
    match event {
        // SET, SETNX, SETEX, PSETEX, GETSET, MSET (all `set`); HSET, HSETNX, HMSET (`hset`);
        // Redisson's HINCRBY; a key that arrives whole (RESTORE, RENAME, COPY, MOVE).
        b"set" | b"hset" | b"hincrby" | b"hincrbyfloat" | b"restore" | b"rename_to"
        | b"copy_to" | b"move_to" => Effect::Create,
        // DEL, UNLINK, GETDEL, a hash's last HDEL, an EXPIRE into the past (all `del`).
        b"del" | b"rename_from" | b"move_from" => Effect::Remove(ReleaseCause::Released),
        b"expired" => Effect::Remove(ReleaseCause::TtlExpired),
        // The server took it back under `maxmemory`, not its holder: as a lapsed TTL.
        b"evicted" => Effect::Remove(ReleaseCause::TtlExpired),
        _ => Effect::Nothing,
    }
}

/// Recipes whose key holds permits, a count or a set of holders rather than one holder: a key
/// of theirs coming or going is not an acquisition or a release (their holders, when they name
/// any, are read: a token set's readers come and go with `zadd`/`zrem` on a key that stays).
pub fn holds_permits(recipe: RedisRecipe) -> bool {
    matches!(
        recipe,
        RedisRecipe::RedissonSemaphore
            | RedisRecipe::RedissonPermitExpirableSemaphore
            | RedisRecipe::RedissonCountDownLatch
            | RedisRecipe::NodeSemaphore
            | RedisRecipe::NodeMultiSemaphore
            | RedisRecipe::TokenZset
    )
}

/// Whether a key with `hint` counts (configured semaphores and latches do not).
pub fn hint_counts(hint: KeyHint) -> bool {
    !matches!(hint, KeyHint::Semaphore { .. } | KeyHint::Latch)
}

/// Milliseconds from `since_us` to `until_us`.
fn held_ms(since_us: i64, until_us: i64) -> i64 {
    (until_us - since_us).max(0) / 1000
}

/// One lock key that exists (40 B: a million keys are a million of these, in [`Kept`]).
#[derive(Debug)]
struct Life {
    key: Box<[u8]>,
    /// When it came, epoch µs (the notification's arrival; for a key found by a scan, then).
    since_us: i64,
    /// The notification that last touched it ([`Lives::stamp`]), and in the top bit
    /// [`COUNTED`].
    stamp: u64,
    /// When to read it again (epoch ms; [`NO_DEADLINE`]: none): see [`Lives::set_deadline`].
    deadline_ms: i64,
}

/// [`Life::stamp`]'s top bit: its going is a release (not a key of permits).
const COUNTED: u64 = 1 << 63;

/// [`Life::deadline_ms`] when there is none.
const NO_DEADLINE: i64 = i64::MIN;

impl Life {
    fn new(key: &[u8], since_us: i64, stamp: u64, counted: bool) -> Life {
        Life {
            key: key.into(),
            since_us,
            stamp: stamp | if counted { COUNTED } else { 0 },
            deadline_ms: NO_DEADLINE,
        }
    }

    fn stamp(&self) -> u64 {
        self.stamp & !COUNTED
    }

    fn counted(&self) -> bool {
        self.stamp & COUNTED != 0
    }

    fn touch(&mut self, stamp: u64) {
        self.stamp = (self.stamp & COUNTED) | stamp;
    }
}

/// The keys that exist, each [`Life`] once in a dense `Vec` and found through a table of
/// 4-byte indices (a hash table sits between half full and 7/8 full, so slots of a whole
/// 40-byte `Life` would cost 46–86 B a key; these cost 5–10 B beside the 40). A removal moves
/// the last `Life` into the hole and points its slot there.
#[derive(Debug, Default)]
struct Kept {
    slots: HashTable<u32>,
    lives: Vec<Life>,
}

impl Kept {
    fn len(&self) -> usize {
        self.lives.len()
    }

    fn is_empty(&self) -> bool {
        self.lives.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &Life> {
        self.lives.iter()
    }

    fn index(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let lives = &self.lives;
        self.slots
            .find(hash, |&i| *lives[i as usize].key == *key)
            .map(|&i| i as usize)
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<&Life> {
        self.index(hash, key).map(|i| &self.lives[i])
    }

    fn find_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Life> {
        self.index(hash, key).map(|i| &mut self.lives[i])
    }

    /// Keeps `life`, a key not kept, whose hash is `hash`.
    fn insert(&mut self, hash: u64, life: Life, hasher: &std::hash::RandomState) {
        let Ok(at) = u32::try_from(self.lives.len()) else {
            // Four billion lock keys in one member: more than a Redis server holds.
            unreachable!("more than u32::MAX lock keys");
        };
        self.lives.push(life);
        let lives = &self.lives;
        self.slots
            .insert_unique(hash, at, |&i| hasher.hash_one(&lives[i as usize].key));
    }

    fn remove(&mut self, hash: u64, key: &[u8], hasher: &std::hash::RandomState) -> Option<Life> {
        let lives = &self.lives;
        let entry = self
            .slots
            .find_entry(hash, |&i| *lives[i as usize].key == *key)
            .ok()?;
        let at = entry.remove().0;
        let last = u32::try_from(self.lives.len() - 1).unwrap_or(u32::MAX);
        let life = self.lives.swap_remove(at as usize);
        if at != last {
            let moved = hasher.hash_one(&self.lives[at as usize].key);
            if let Some(slot) = self.slots.find_mut(moved, |&i| i == last) {
                *slot = at;
            }
        }
        // Give back what a mass going leaves unused (a table shrinks by itself only when
        // asked).
        if self.lives.capacity() > 64 && self.lives.len() < self.lives.capacity() / 4 {
            self.lives.shrink_to(self.lives.len() * 2);
            let lives = &self.lives;
            self.slots.shrink_to(self.lives.len() * 2, |&i| {
                hasher.hash_one(&lives[i as usize].key)
            });
        }
        Some(life)
    }

    /// Whether a key of hash `hash` satisfies `f`.
    fn any_at(&self, hash: u64, f: impl Fn(&Life) -> bool) -> bool {
        self.slots
            .iter_hash(hash)
            .any(|&i| f(&self.lives[i as usize]))
    }

    /// Calls `f` on each key of hash `hash` (almost always one).
    fn for_each_at(&mut self, hash: u64, mut f: impl FnMut(&mut Life)) {
        for &i in self.slots.iter_hash(hash) {
            f(&mut self.lives[i as usize]);
        }
    }
}

/// A key with a deadline that notifications have not shown to exist (a read raced ahead of
/// them): rare, kept apart so that [`Lives::keys`] stays what notifications tell.
#[derive(Debug)]
struct Unlisted {
    key: Box<[u8]>,
    deadline_ms: i64,
}

/// A key gone without a notification went by its TTL when that was due this close (ms).
const GONE_TTL_SLACK_MS: i64 = 250;

/// A full scan running: what notifications changed since it began, so its older picture
/// does not undo them.
#[derive(Debug, Default)]
struct ScanMark {
    from: u64,
    /// Keys that went since (at most [`GONE_TRACKED`]).
    gone: HashSet<Box<[u8]>>,
    /// More went than are tracked: the scan adds no key (one found may have gone since).
    overflowed: bool,
}

/// Keys gone during one scan that [`ScanMark`] tells apart.
const GONE_TRACKED: usize = 100_000;

/// The lock keys of one member that exist, as its notifications tell (see the module doc).
///
/// Each key is kept once, with its deadline: lock keys are re-read at their TTL's end
/// ([`Lives::set_deadline`], [`Lives::due`]), since Redis notifies expiries late under load.
/// The deadlines' order is kept by `(instant, hash of the key)`, not by a second copy of it.
#[derive(Debug, Default)]
pub struct Lives {
    keys: Kept,
    hasher: std::hash::RandomState,
    unlisted: HashTable<Unlisted>,
    /// Every deadline set, as (epoch ms, the key's hash), soonest first: a heap in one `Vec`
    /// (16 B a deadline, where a B-tree's nodes took 27). A deadline replaced or a key gone
    /// leaves its entry, dropped when it comes up ([`Lives::due`], [`Lives::next_deadline`])
    /// or when such entries outnumber the keys ([`Lives::sweep_deadlines`]).
    by_time: BinaryHeap<Reverse<(i64, u64)>>,
    /// Numbers the notifications taken.
    stamp: u64,
    scan: Option<ScanMark>,
    /// A first full scan was merged: keys a scan finds that notifications never showed are
    /// missed acquisitions from then on, not locks held before lockscope looked.
    synced: bool,
    /// Keys last read as permits or counts.
    permits: HashSet<Box<[u8]>>,
    /// Changes decided and not sent yet.
    pending: Vec<KeyChange>,
}

impl Lives {
    /// Applies the notification `event` about lock key `key` that arrived at `now` (epoch µs);
    /// `hint` is the key's configured recipe.
    pub fn note(&mut self, key: &[u8], event: &[u8], hint: KeyHint, now: i64) {
        self.stamp += 1;
        let stamp = self.stamp;
        match effect(event) {
            Effect::Create => {
                if let Some(life) = self.life_mut(key) {
                    life.touch(stamp);
                    return;
                }
                let counted = hint_counts(hint) && !self.permits.contains(key);
                self.insert(Life::new(key, now, stamp, counted));
                self.pending.push(KeyChange {
                    key: key.to_vec(),
                    at_us: now,
                    counted,
                    kind: ChangeKind::Came { acquired: true },
                });
            }
            Effect::Remove(cause) => {
                if let Some(scan) = &mut self.scan {
                    if scan.gone.len() < GONE_TRACKED {
                        scan.gone.insert(key.into());
                    } else {
                        scan.overflowed = true;
                    }
                }
                if let Some(life) = self.remove(key) {
                    self.pending.push(KeyChange {
                        key: key.to_vec(),
                        at_us: now,
                        counted: life.counted(),
                        kind: ChangeKind::Went {
                            cause,
                            held_ms: held_ms(life.since_us, now),
                        },
                    });
                }
            }
            Effect::Nothing => {}
        }
    }

    /// Notes what reads found each key to be (a key read as permits does not count from its
    /// next coming on).
    pub fn read(&mut self, reports: &[KeyReport]) {
        for report in reports {
            let permits = report
                .lock
                .as_ref()
                .is_some_and(|l| holds_permits(l.recipe));
            if permits {
                if !self.permits.contains(report.key.as_slice()) {
                    self.permits.insert(report.key.as_slice().into());
                }
            } else if report.lock.is_some() {
                self.permits.remove(report.key.as_slice());
            }
        }
    }

    /// A full scan begins (what notifications change from now on wins over what it finds).
    pub fn scan_started(&mut self) {
        self.scan = Some(ScanMark {
            from: self.stamp,
            ..ScanMark::default()
        });
    }

    /// A session ended: a scan it ran will not be merged.
    pub fn session_ended(&mut self) {
        self.scan = None;
    }

    /// Merges a full scan's reads (every lock key of the member) taken since
    /// [`Self::scan_started`], at `now` (epoch µs): keys it found that no notification created came, keys
    /// it did not find that no notification touched since it began went (by their TTL when
    /// their deadline was due, else released). On the first scan, what it finds was held
    /// already.
    pub fn scan_merged(&mut self, reports: &[KeyReport], now: i64) {
        self.read(reports);
        let Some(mark) = self.scan.take() else {
            return;
        };
        let first = !self.synced;
        self.synced = true;
        let mut found: HashSet<&[u8]> = HashSet::with_capacity(reports.len());
        for report in reports {
            // PTTL -2: missing (a fair lock's leftover queue reads as a lock without its key).
            if report.pttl_ms == -2 || report.lock.is_none() {
                continue;
            }
            found.insert(&report.key);
            if self.life(&report.key).is_some()
                || mark.overflowed
                || mark.gone.contains(report.key.as_slice())
            {
                continue;
            }
            let counted = !report
                .lock
                .as_ref()
                .is_some_and(|l| holds_permits(l.recipe));
            let since_us = if first {
                report.at_ms.saturating_mul(1000).min(now)
            } else {
                now
            };
            self.insert(Life::new(&report.key, since_us, self.stamp, counted));
            self.pending.push(KeyChange {
                key: report.key.clone(),
                at_us: since_us,
                counted,
                kind: ChangeKind::Came { acquired: !first },
            });
        }
        let gone: Vec<Box<[u8]>> = self
            .keys
            .iter()
            .filter(|life| life.stamp() <= mark.from && !found.contains(&life.key[..]))
            .map(|life| life.key.clone())
            .collect();
        let now_ms = now.div_euclid(1000);
        for key in gone {
            let Some(life) = self.remove(&key) else {
                continue;
            };
            // Its TTL ran out if its deadline was due by now.
            let cause = if life.deadline_ms != NO_DEADLINE
                && life.deadline_ms <= now_ms.saturating_add(GONE_TTL_SLACK_MS)
            {
                ReleaseCause::TtlExpired
            } else {
                ReleaseCause::Released
            };
            self.pending.push(KeyChange {
                at_us: now,
                counted: life.counted(),
                kind: ChangeKind::Went {
                    cause,
                    held_ms: held_ms(life.since_us, now),
                },
                key: key.into_vec(),
            });
        }
    }

    /// Whether a first full scan was merged.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// The changes decided since the last call.
    pub fn take(&mut self) -> Vec<KeyChange> {
        std::mem::take(&mut self.pending)
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Lock keys that exist.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn life(&self, key: &[u8]) -> Option<&Life> {
        self.keys.find(self.hash(key), key)
    }

    fn life_mut(&mut self, key: &[u8]) -> Option<&mut Life> {
        let hash = self.hash(key);
        self.keys.find_mut(hash, key)
    }

    /// Keeps `life` (a key not kept yet), with the deadline it had while unlisted.
    fn insert(&mut self, mut life: Life) {
        let hash = self.hash(&life.key);
        if let Ok(entry) = self.unlisted.find_entry(hash, |u| u.key == life.key) {
            life.deadline_ms = entry.remove().0.deadline_ms;
        }
        self.keys.insert(hash, life, &self.hasher);
    }

    /// Takes the key out (its deadline goes with it: a key gone is not read again).
    fn remove(&mut self, key: &[u8]) -> Option<Life> {
        let hash = self.hash(key);
        let life = self.keys.remove(hash, key, &self.hasher);
        self.sweep_deadlines();
        life
    }

    /// The instant to read `key` again, if any (epoch ms).
    #[cfg(test)]
    fn deadline(&self, key: &[u8]) -> Option<i64> {
        self.deadline_hashed(self.hash(key), key)
    }

    /// [`Self::deadline`] of `key`, whose hash is `hash`.
    fn deadline_hashed(&self, hash: u64, key: &[u8]) -> Option<i64> {
        let at = match self.keys.find(hash, key) {
            Some(life) => life.deadline_ms,
            None => self
                .unlisted
                .find(hash, |u| *u.key == *key)
                .map_or(NO_DEADLINE, |u| u.deadline_ms),
        };
        (at != NO_DEADLINE).then_some(at)
    }

    /// Sets when `key` is to be read again (`None`: not).
    pub fn set_deadline(&mut self, key: &[u8], at: Option<i64>) {
        let hash = self.hash(key);
        let old = self.deadline_hashed(hash, key);
        if old == at {
            return;
        }
        let new = at.unwrap_or(NO_DEADLINE);
        if let Some(life) = self.keys.find_mut(hash, key) {
            life.deadline_ms = new;
        } else {
            match self.unlisted.find_entry(hash, |u| *u.key == *key) {
                Ok(entry) if at.is_none() => {
                    entry.remove();
                }
                Ok(mut entry) => entry.get_mut().deadline_ms = new,
                Err(_) => {
                    let hasher = &self.hasher;
                    self.unlisted.insert_unique(
                        hash,
                        Unlisted {
                            key: key.into(),
                            deadline_ms: new,
                        },
                        |u| hasher.hash_one(&u.key),
                    );
                }
            }
        }
        // The old instant's entry stays, and is dropped when it comes up.
        if let Some(at) = at {
            self.by_time.push(Reverse((at, hash)));
        }
        self.sweep_deadlines();
    }

    /// Keeps the deadlines' heap within twice the keys (each has one deadline at most): past
    /// that, it is built again from the keys' own.
    fn sweep_deadlines(&mut self) {
        if self.by_time.len() <= 2 * (self.keys.len() + self.unlisted.len()) + 1024 {
            return;
        }
        let hasher = &self.hasher;
        let kept = self.keys.iter().map(|l| (l.deadline_ms, &l.key));
        let unlisted = self.unlisted.iter().map(|u| (u.deadline_ms, &u.key));
        self.by_time = kept
            .chain(unlisted)
            .filter(|(at, _)| *at != NO_DEADLINE)
            .map(|(at, key)| Reverse((at, hasher.hash_one(key))))
            .collect();
    }

    fn has_deadline(&self, hash: u64, at: i64) -> bool {
        self.keys.any_at(hash, |l| l.deadline_ms == at)
            || self.unlisted.iter_hash(hash).any(|u| u.deadline_ms == at)
    }

    /// The next deadline (epoch ms); entries no key has any more are dropped on the way.
    pub fn next_deadline(&mut self) -> Option<i64> {
        while let Some(&Reverse((at, hash))) = self.by_time.peek() {
            if self.has_deadline(hash, at) {
                return Some(at);
            }
            self.by_time.pop();
        }
        None
    }

    /// The keys whose deadline is due by `now` (epoch ms), each once; their deadlines are
    /// cleared.
    pub fn due(&mut self, now: i64) -> BTreeSet<Vec<u8>> {
        let mut out = BTreeSet::new();
        while let Some(&Reverse((at, hash))) = self.by_time.peek() {
            if at > now {
                break;
            }
            self.by_time.pop();
            self.keys.for_each_at(hash, |life| {
                if life.deadline_ms != NO_DEADLINE && life.deadline_ms <= now {
                    life.deadline_ms = NO_DEADLINE;
                    out.insert(life.key.to_vec());
                }
            });
            while let Ok(entry) = self.unlisted.find_entry(hash, |u| u.deadline_ms <= now) {
                out.insert(entry.remove().0.key.into_vec());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::redis::RedisLock;

    /// Keys kept, moved by removals and shrinks, are found as a map of them finds them.
    #[test]
    fn kept_keys_are_found_after_any_removals() {
        let hasher = std::hash::RandomState::new();
        let mut kept = Kept::default();
        let mut map = std::collections::HashMap::new();
        // A fixed walk (a linear congruential sequence): inserts, removals, a mass removal.
        let mut x: u64 = 7;
        for round in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("k{}", (x >> 33) % 3000).into_bytes();
            let hash = hasher.hash_one(&key);
            let remove = round > 15_000 || (x >> 20).is_multiple_of(3);
            if remove {
                let gone = kept.remove(hash, &key, &hasher).map(|l| l.since_us);
                assert_eq!(gone, map.remove(&key));
            } else if kept.find(hash, &key).is_none() {
                kept.insert(hash, Life::new(&key, round as i64, 0, true), &hasher);
                map.insert(key, round as i64);
            }
            assert_eq!(kept.len(), map.len());
        }
        for (key, since) in &map {
            assert_eq!(
                kept.find(hasher.hash_one(key), key).map(|l| l.since_us),
                Some(*since)
            );
        }
        assert!(kept.lives.capacity() <= 64.max(map.len() * 4));
    }

    fn kinds(lives: &mut Lives) -> Vec<(String, ChangeKind, bool)> {
        lives
            .take()
            .into_iter()
            .map(|c| {
                (
                    String::from_utf8_lossy(&c.key).into_owned(),
                    c.kind,
                    c.counted,
                )
            })
            .collect()
    }

    const ACQUIRED: ChangeKind = ChangeKind::Came { acquired: true };

    #[test]
    fn deadlines_pop_in_order_and_replace() {
        let mut d = Lives::default();
        d.note(b"a", b"set", KeyHint::None, 1);
        d.set_deadline(b"a", Some(30));
        // Not shown by a notification yet: kept apart, and moved in when it is.
        d.set_deadline(b"b", Some(10));
        d.set_deadline(b"a", Some(20));
        assert_eq!(d.next_deadline(), Some(10));
        assert_eq!(
            d.due(25).into_iter().collect::<Vec<_>>(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
        assert_eq!(d.next_deadline(), None);
        d.set_deadline(b"c", Some(5));
        d.note(b"c", b"set", KeyHint::None, 2);
        assert_eq!(d.deadline(b"c"), Some(5));
        d.set_deadline(b"c", None);
        assert_eq!(d.next_deadline(), None);
        // A key gone takes its deadline with it.
        d.set_deadline(b"a", Some(40));
        d.note(b"a", b"del", KeyHint::None, 3);
        assert!(d.due(50).is_empty());
        // One key, one entry: its name, when it came, its stamp and its deadline.
        assert_eq!(std::mem::size_of::<Life>(), 40);
    }

    /// Deadlines renewed over and over (a watchdog's `PEXPIRE`) or left by keys gone do not
    /// pile up, and the ones that stand still come due.
    #[test]
    fn replaced_deadlines_stay_bounded() {
        let mut d = Lives::default();
        for k in 0..10 {
            d.note(format!("k{k}").as_bytes(), b"set", KeyHint::None, 1);
        }
        for round in 0..10_000i64 {
            for k in 0..10 {
                d.set_deadline(format!("k{k}").as_bytes(), Some(1_000_000 + round));
            }
            assert!(d.by_time.len() <= 2 * 10 + 1024 + 1);
        }
        for k in 0..5 {
            d.note(format!("k{k}").as_bytes(), b"del", KeyHint::None, 2);
        }
        assert_eq!(d.next_deadline(), Some(1_000_000 + 9_999));
        let due: Vec<Vec<u8>> = d.due(2_000_000).into_iter().collect();
        assert_eq!(
            due,
            (5..10)
                .map(|k| format!("k{k}").into_bytes())
                .collect::<Vec<_>>()
        );
        assert_eq!(d.next_deadline(), None);
        assert!(d.by_time.is_empty());
    }

    fn went(cause: ReleaseCause, held_ms: i64) -> ChangeKind {
        ChangeKind::Went { cause, held_ms }
    }

    fn report(key: &str, recipe: Option<RedisRecipe>, pttl_ms: i64, at_ms: i64) -> KeyReport {
        KeyReport {
            key: key.as_bytes().to_vec(),
            lock: recipe.map(|recipe| RedisLock::new(recipe, None)),
            watchers: 0,
            at_ms,
            pttl_ms,
            read_seq: 0,
            truncated: Vec::new(),
            unrecognised: None,
        }
    }

    const MS: i64 = 1000;

    #[test]
    fn a_hold_too_brief_to_read_is_one_acquisition_and_one_release_timed_by_arrival() {
        let mut lives = Lives::default();
        let none = KeyHint::None;
        // SET NX PX, then the compare-and-delete: `set`, `expire`, `del`.
        lives.note(b"lock:a", b"set", none, 1_000 * MS);
        lives.note(b"lock:a", b"expire", none, 1_000 * MS);
        lives.note(b"lock:a", b"del", none, 1_003 * MS);
        // Expired instead.
        lives.note(b"lock:a", b"set", none, 1_010 * MS);
        lives.note(b"lock:a", b"expired", none, 1_500 * MS);
        assert_eq!(
            kinds(&mut lives),
            [
                ("lock:a".into(), ACQUIRED, true),
                ("lock:a".into(), went(ReleaseCause::Released, 3), true),
                ("lock:a".into(), ACQUIRED, true),
                ("lock:a".into(), went(ReleaseCause::TtlExpired, 490), true),
            ]
        );
        assert!(lives.is_empty());
    }

    #[test]
    fn redisson_reentry_renewal_and_partial_unlock_are_not_acquisitions() {
        let mut lives = Lives::default();
        let none = KeyHint::None;
        for (event, at) in [
            ("hincrby", 0),  // tryLock
            ("expire", 0),   // (PEXPIRE notifies `expire`)
            ("hincrby", 5),  // re-entry
            ("expire", 5),   //
            ("expire", 10),  // the watchdog
            ("hincrby", 20), // unlock of one re-entry (-1)
            ("expire", 20),  //
            ("hincrby", 30), // last unlock: to 0, then DEL
            ("del", 30),     //
        ] {
            lives.note(b"app:x", event.as_bytes(), none, at * MS);
        }
        assert_eq!(
            kinds(&mut lives),
            [
                ("app:x".into(), ACQUIRED, true),
                ("app:x".into(), went(ReleaseCause::Released, 30), true),
            ]
        );
        // A read-write lock: `hset mode`, `hset` of the reader, a second reader, both leave.
        for (event, at) in [
            ("hset", 0),
            ("hset", 0),
            ("hincrby", 1),
            ("hdel", 2),
            ("hdel", 3),
            ("del", 3),
        ] {
            lives.note(b"app:rw", event.as_bytes(), none, at * MS);
        }
        assert_eq!(
            kinds(&mut lives),
            [
                ("app:rw".into(), ACQUIRED, true),
                ("app:rw".into(), went(ReleaseCause::Released, 3), true),
            ]
        );
    }

    #[test]
    fn keys_that_are_not_holds_change_nothing() {
        let mut lives = Lives::default();
        let none = KeyHint::None;
        // Lists, zsets and counters never enter: their `del` is nobody's release.
        lives.note(b"lock-signal:x", b"lpush", none, 0);
        lives.note(b"lock-signal:x", b"del", none, 1);
        lives.note(b"counter", b"incrby", none, 0);
        lives.note(b"counter", b"del", none, 1);
        // Configured semaphores and latches.
        lives.note(b"rl:pool", b"set", KeyHint::Semaphore { permits: 3 }, 0);
        lives.note(b"rl:pool", b"del", KeyHint::Semaphore { permits: 3 }, MS);
        assert_eq!(
            kinds(&mut lives),
            [
                ("rl:pool".into(), ACQUIRED, false),
                ("rl:pool".into(), went(ReleaseCause::Released, 1), false),
            ]
        );
        // A key read as a semaphore does not count from its next coming on.
        lives.read(&[report("sem", Some(RedisRecipe::RedissonSemaphore), -1, 0)]);
        lives.note(b"sem", b"set", none, 5);
        assert!(kinds(&mut lives).iter().all(|(_, _, counted)| !counted));
    }

    #[test]
    fn the_first_scan_finds_holds_and_later_scans_correct_what_notifications_missed() {
        let mut lives = Lives::default();
        let none = KeyHint::None;
        lives.scan_started();
        // During the scan: one key created (kept), one found by the scan that went after its
        // read (not added back).
        lives.note(b"new", b"set", none, 10 * MS);
        lives.note(b"brief", b"set", none, 11 * MS);
        lives.note(b"brief", b"del", none, 12 * MS);
        lives.note(b"gone-early", b"del", none, 13 * MS);
        lives.scan_merged(
            &[
                report("old", Some(RedisRecipe::TokenLock), 5_000, 5),
                report("gone-early", Some(RedisRecipe::TokenLock), 5_000, 5),
                report("queue-only", Some(RedisRecipe::RedissonFairLock), -2, 5),
                report("list", None, -1, 5),
            ],
            20 * MS,
        );
        assert_eq!(
            kinds(&mut lives),
            [
                ("new".into(), ACQUIRED, true),
                ("brief".into(), ACQUIRED, true),
                ("brief".into(), went(ReleaseCause::Released, 1), true),
                ("old".into(), ChangeKind::Came { acquired: false }, true),
            ]
        );
        assert_eq!(lives.len(), 2);
        // The stream was lost for a while: `old` went, `other` came, `new` was renewed (a
        // notification during the scan) and is kept even though the scan missed it.
        // `old` was due to be read at 39 ms: its TTL ran out.
        lives.set_deadline(b"old", Some(39));
        lives.scan_started();
        lives.note(b"new", b"set", none, 30 * MS);
        lives.scan_merged(
            &[report("other", Some(RedisRecipe::TokenLock), 5_000, 31)],
            40 * MS,
        );
        let mut changes = kinds(&mut lives);
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            changes,
            [
                ("old".into(), went(ReleaseCause::TtlExpired, 35), true),
                ("other".into(), ACQUIRED, true),
            ]
        );
        assert_eq!(lives.len(), 2);
    }
}
