//! Which lock keys exist on one Redis member, as the member's own keyspace notifications tell:
//! the one place the Redis backend decides its acquisitions and releases ([`KeyChange`]).
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

use std::collections::{HashMap, HashSet};

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

/// One lock key that exists.
#[derive(Debug, Clone, Copy)]
struct Life {
    /// When it came, epoch µs (the notification's arrival; for a key found by a scan, then).
    since_us: i64,
    /// The notification that last touched it ([`Lives::stamp`]).
    stamp: u64,
    /// Its going is a release (not a key of permits).
    counted: bool,
}

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
#[derive(Debug, Default)]
pub struct Lives {
    keys: HashMap<Box<[u8]>, Life>,
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
                if let Some(life) = self.keys.get_mut(key) {
                    life.stamp = stamp;
                    return;
                }
                let counted = hint_counts(hint) && !self.permits.contains(key);
                self.keys.insert(
                    key.into(),
                    Life {
                        since_us: now,
                        stamp,
                        counted,
                    },
                );
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
                if let Some(life) = self.keys.remove(key) {
                    self.pending.push(KeyChange {
                        key: key.to_vec(),
                        at_us: now,
                        counted: life.counted,
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
    /// it did not find that no notification touched since it began went (`cause_of` names why:
    /// their TTL ran out or not). On the first scan, what it finds was held already.
    pub fn scan_merged(
        &mut self,
        reports: &[KeyReport],
        now: i64,
        mut cause_of: impl FnMut(&[u8]) -> ReleaseCause,
    ) {
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
            if self.keys.contains_key(report.key.as_slice())
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
            self.keys.insert(
                report.key.as_slice().into(),
                Life {
                    since_us,
                    stamp: self.stamp,
                    counted,
                },
            );
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
            .filter(|(key, life)| life.stamp <= mark.from && !found.contains(&key[..]))
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            let Some(life) = self.keys.remove(&key) else {
                continue;
            };
            self.pending.push(KeyChange {
                at_us: now,
                counted: life.counted,
                kind: ChangeKind::Went {
                    cause: cause_of(&key),
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::redis::RedisLock;

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
            |_| ReleaseCause::Released,
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
        lives.scan_started();
        lives.note(b"new", b"set", none, 30 * MS);
        lives.scan_merged(
            &[report("other", Some(RedisRecipe::TokenLock), 5_000, 31)],
            40 * MS,
            |key| {
                assert_eq!(key, b"old");
                ReleaseCause::TtlExpired
            },
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
