//! A Redis source's state in the aggregator: per-member reads of lock keys decided into locks
//! (one member for a server or Cluster slot owner, all masters for a Redlock set), kept in the
//! neutral [`Ledger`] with each release's cause (`released`, `ttl_expired`) and the lock's Redis
//! details in its entry, and corrections found by reconcile scans counted. A read is kept only
//! while the lock depends on more than it ([`RedisSourceState::keeps`]); any other is decided
//! and dropped, so a lock is kept once (its ledger entry and the record it shares with the
//! snapshot).
//!
//! Counts come from the members' notifications ([`KeyChange`], decided in [`super::lives`]),
//! not from the reads: the ledger shows the holders it is given and counts nothing for these
//! locks ([`Counting::Told`]); [`RedisSourceState::changes`] books each acquisition and
//! release, a Redlock's once its key reaches (or leaves) a majority of masters. Keys of
//! permits or counts (semaphores, latches) are not counted from notifications: their holders,
//! when they name any (permit ids), are counted as read.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use lockscope_model::redis::{
    combine_redlock, display_bytes, parse_display_bytes, redisson_redlock_holder, RedisLock,
    RedisRecipe, RedlockMaster, SemaphoreEntry,
};
use lockscope_model::wire::{
    Backend, HolderView, LeaseView, LockView, RedlockMasterView, RedlockView, ReleaseCause,
    SessionView, SourceView, WaiterView,
};

use super::collect::RedisSpec;
use super::config::redact_url;
use super::lives::holds_permits;
use super::{ChangeKind, KeyChange, KeyReport, RedisUpdate};
use lockscope_core::aggregate::ledger::{Counting, Ledger, LedgerLock, Observed, Outcome, Seen};
use lockscope_core::aggregate::{History, LedgerContext, LockOp};

/// Expiries are recognised when the key vanished within this long of its deadline.
const TTL_SLACK_MS: i64 = 250;

pub struct RedisSourceState {
    pub spec: Arc<RedisSpec>,
    pub view: SourceView,
    pub members: Vec<String>,
    pub member_up: Vec<bool>,
    pub member_error: Vec<Option<String>>,
    /// Per member that was up and is not: when it was last seen (epoch ms).
    pub member_last_seen: Vec<Option<i64>>,
    pub member_synced: Vec<bool>,
    /// Per member: clients blocked in `BLPOP` (python-redis-lock waiters Redis cannot attribute).
    pub member_blocked: Vec<Option<u32>>,
    /// Per member: dropped its backlog of changes and catches up with a full scan.
    pub member_lagging: Vec<bool>,
    /// Per member: watched keys skipped for their names' length, and the start of one.
    pub member_long_keys: Vec<(u64, Option<String>)>,
    /// Per member: the last read of each lock key whose lock depends on more than that read
    /// ([`RedisSourceState::keeps`]: a Redlock's masters, python-redis-lock's blocked clients, a
    /// resync's other members); any other read is decided and dropped, its lock kept once, in
    /// the ledger and its record.
    pub reads: Vec<HashMap<Box<[u8]>, MemberRead>>,
    /// Holders, waiters, events and history of every lock, with its Redis details, by its key
    /// as shown.
    pub ledger: Ledger<RedisLockState>,
    /// Keys a reconcile scan found different from what notifications had told.
    pub corrections: u64,
    pub source_error: Option<String>,
    /// The member set changed (a Cluster failover or resharding): locks are re-decided only
    /// once every new member has sent its first full scan (or failed), so a lock on a member
    /// not yet read is not taken for released, nor one read again for acquired.
    pub resyncing: bool,
    /// Redlock sources: how often each lock key came and went on each master, as their
    /// notifications tell (see [`RedisSourceState::changes`]).
    pub quorums: HashMap<Vec<u8>, Quorum>,
    /// Keys under the patterns that no recipe reads as a lock, per member.
    pub unrecognised: lockscope_core::aggregate::unrecognised::UnrecognisedKeys,
}

/// How often a Redlock key came to exist and went on each member (while it exists anywhere).
#[derive(Debug, Clone)]
pub struct Quorum(Box<[(u32, u32)]>);

impl Quorum {
    fn new(members: usize) -> Self {
        Quorum(vec![(0, 0); members].into())
    }

    /// The key came on `member`: whether a majority of members have now seen it come once
    /// more (an acquisition).
    fn came(&mut self, member: usize, majority: usize) -> bool {
        let before = self.majority_count(majority, false);
        self.0[member].0 += 1;
        self.majority_count(majority, false) > before
    }

    /// The key went on `member`: whether a majority have now seen it go once more.
    fn went(&mut self, member: usize, majority: usize) -> bool {
        let before = self.majority_count(majority, true);
        self.0[member].1 += 1;
        self.majority_count(majority, true) > before
    }

    /// The majority-th largest count (`went`: of goings, else of comings).
    fn majority_count(&self, majority: usize, went: bool) -> u32 {
        let mut counts: Vec<u32> = self
            .0
            .iter()
            .map(|(came, gone)| if went { *gone } else { *came })
            .collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        counts.get(majority - 1).copied().unwrap_or(0)
    }

    /// When the key is gone from every member as far as they told, takes what every member
    /// counted alike off each count (which moves every majority count alike: a booking compares
    /// two of them); `true` when nothing is left. A member whose notifications run behind the
    /// others' keeps its difference until they arrive, so nothing is lost to the order.
    fn settle(&mut self) -> bool {
        if self.0.iter().any(|(came, gone)| came > gone) {
            return false;
        }
        let common = self.0.iter().map(|(came, _)| *came).min().unwrap_or(0);
        for (came, gone) in self.0.iter_mut() {
            *came -= common;
            *gone -= common;
        }
        self.0.iter().all(|(came, _)| *came == 0)
    }
}

/// What the state keeps of one member's read of a lock key: the decoded lock and what views
/// take from the read (the key is the map's; the read's order matters only in the collector).
#[derive(Debug, Clone)]
pub struct MemberRead {
    pub lock: RedisLock,
    /// Connections subscribed to the lock's unlock channels.
    pub watchers: u32,
    /// When it was read (epoch ms) and the PTTL it had then.
    pub at_ms: i64,
    pub pttl_ms: i64,
    /// Values too long to copy, by their id as shown, with their version (almost always none).
    pub truncated: Box<[(String, String)]>,
}

/// A lock's Redis details, kept in its ledger entry (whose path is the key as shown). Kept
/// small (a million locks keep a million of these): instants as [`Ms`], the recipe only as
/// whether it holds permits.
#[derive(Debug, Default)]
pub struct RedisLockState {
    /// Its recipe holds permits or a count ([`holds_permits`]).
    pub permits: bool,
    pub expires_at_ms: Ms,
    /// Longest TTL seen since the current holder took the lock.
    pub lease_ms: Ms,
    /// The member whose read the lock was last decided from (a Cluster's master; 0 on a
    /// server; the first with the key for a Redlock).
    pub member: u32,
}

/// An optional instant or duration (ms) in 8 bytes rather than an `Option<i64>`'s 16:
/// `i64::MIN` stands for none (no lock's instant or TTL is that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ms(i64);

impl Default for Ms {
    fn default() -> Self {
        Ms(i64::MIN)
    }
}

impl From<Option<i64>> for Ms {
    fn from(ms: Option<i64>) -> Self {
        Ms(ms.map_or(i64::MIN, |ms| ms.max(i64::MIN + 1)))
    }
}

impl Ms {
    pub fn get(self) -> Option<i64> {
        (self.0 != i64::MIN).then_some(self.0)
    }
}

/// What a lock key is decided from.
enum Decided {
    /// The reads kept, merged over the members ([`RedisSourceState::merged`]).
    FromReads,
    /// One member's read, not kept (`None`: the key is gone from that member).
    Read(usize, Option<Box<Merged>>),
}

impl RedisSourceState {
    pub fn new(spec: RedisSpec, max_labels: usize) -> Self {
        RedisSourceState {
            view: SourceView::connecting(&spec.name, Backend::Redis),
            members: Vec::new(),
            member_up: Vec::new(),
            member_error: Vec::new(),
            member_last_seen: Vec::new(),
            member_synced: Vec::new(),
            member_blocked: Vec::new(),
            member_lagging: Vec::new(),
            member_long_keys: Vec::new(),
            reads: Vec::new(),
            ledger: Ledger::new(&spec.name, max_labels, |source, path| {
                lockscope_model::id::lock_id(source, &format!("/{path}"))
            }),
            corrections: 0,
            source_error: None,
            resyncing: false,
            quorums: HashMap::new(),
            unrecognised: Default::default(),
            spec: Arc::new(spec),
        }
    }

    fn refresh_view(&mut self) {
        let up = !self.members.is_empty() && self.member_up.iter().all(|u| *u);
        let errors: Vec<String> = self
            .member_error
            .iter()
            .flatten()
            .cloned()
            .chain(self.source_error.clone())
            .collect();
        self.view.up = up;
        // The locks are as the member that went first last showed them.
        self.view.last_seen_ms = if up {
            None
        } else {
            self.member_last_seen.iter().flatten().min().copied()
        };
        self.view.synced = !self.members.is_empty() && self.member_synced.iter().all(|s| *s);
        self.view.error = (!errors.is_empty()).then(|| errors.join("; "));
        self.view.locks = self.ledger.locks.len();
        // Lock keys read: one per lock, but a Redlock's is read on each master.
        self.view.nodes = if self.spec.redlock {
            self.reads.iter().map(HashMap::len).sum()
        } else {
            self.ledger.locks.len()
        };
        self.view.lagging = self.member_lagging.iter().any(|l| *l);
        self.view.unrecognised = self.unrecognised.count(self.spec.redlock);
        self.view.unrecognised_sample = self.unrecognised.sample();
        // Keys skipped, not lost: the source says how many and shows the start of one.
        let skipped: u64 = self.member_long_keys.iter().map(|(n, _)| *n).sum();
        self.view.limits = if skipped == 0 {
            Vec::new()
        } else {
            let example = self
                .member_long_keys
                .iter()
                .find_map(|(_, e)| e.clone())
                .unwrap_or_default();
            vec![format!(
                "{skipped} watched key(s) with a key name over {} bytes skipped, not read as \
                 locks (e.g. {example})",
                super::bounded::KEY_NAME_MAX
            )]
        };
    }

    /// The lock `key` is now, merged over the members.
    fn merged(&self, key: &[u8]) -> Option<Merged> {
        if self.spec.redlock {
            // Redisson's RedLock (a MultiLock of RLock hashes) rather than SET NX tokens: its
            // masters' fields name one holder by thread (see `redisson_redlock_holder`).
            let hashes = self
                .reads
                .iter()
                .filter_map(|reads| reads.get(key))
                .any(|r| {
                    matches!(
                        r.lock.recipe,
                        RedisRecipe::RedissonLock | RedisRecipe::RedissonFencedLock
                    )
                });
            let holder_on = |i: usize| -> Option<(String, String, &MemberRead)> {
                let r = self.reads[i].get(key)?;
                let field = r.lock.holders.first()?.id.clone();
                let group = if hashes {
                    redisson_redlock_holder(&field)
                } else {
                    field.clone()
                };
                Some((group, field, r))
            };
            let masters: Vec<RedlockMaster> = self
                .members
                .iter()
                .enumerate()
                .map(|(i, url)| RedlockMaster {
                    master: redact_url(url),
                    holder: holder_on(i)
                        .map(|(group, _, r)| (group, (r.pttl_ms >= 0).then_some(r.pttl_ms))),
                })
                .collect();
            if masters.iter().all(|m| m.holder.is_none()) {
                return None;
            }
            let fields: Vec<Option<String>> = (0..self.members.len())
                .map(|i| holder_on(i).map(|(_, field, _)| field))
                .collect();
            let combined = combine_redlock(masters);
            let expires_at_ms = combined.majority_holder.as_ref().and_then(|holder| {
                (0..self.members.len())
                    .filter_map(holder_on)
                    .filter(|(group, _, _)| group == holder)
                    .filter(|(_, _, r)| r.pttl_ms >= 0)
                    .map(|(_, _, r)| r.at_ms.saturating_add(r.pttl_ms))
                    .min()
            });
            // The holder's version: for Redisson's RedLock, whose id `*:<tid>` every JVM's thread
            // of that number shares, the digest of the fields it stands for (what a release must
            // name); for a token too long to copy, its length and digest.
            let version = combined.majority_holder.as_ref().and_then(|holder| {
                if hashes {
                    let mine: Vec<Option<&str>> = fields
                        .iter()
                        .map(|f| {
                            f.as_deref()
                                .filter(|f| redisson_redlock_holder(f) == *holder)
                        })
                        .collect();
                    return Some(super::bounded::redlock_version(&mine));
                }
                (0..self.members.len())
                    .filter_map(holder_on)
                    .find_map(|(_, field, r)| truncated_version(r, &field))
            });
            let mut flags = Vec::new();
            if combined.split {
                flags.push("split".to_string());
            }
            if combined.majority_holder.is_some() && !combined.minority_holders.is_empty() {
                flags.push("minority_holder".to_string());
            }
            if combined.majority_holder.is_none() {
                flags.push("no_majority".to_string());
            }
            let view = RedlockView {
                masters: combined
                    .masters
                    .iter()
                    .enumerate()
                    .map(|(i, m)| RedlockMasterView {
                        master: m.master.clone(),
                        // What is on that master (a Redisson field, not its thread group).
                        holder: fields.get(i).cloned().flatten(),
                        ttl_ms: m.holder.as_ref().and_then(|(_, t)| *t),
                        up: self.member_up.get(i).copied().unwrap_or(false),
                    })
                    .collect(),
                majority_holder: combined.majority_holder.clone(),
                split: combined.split,
                minority_holders: combined.minority_holders.clone(),
            };
            return Some(Merged {
                member: 0,
                recipe: if hashes {
                    "redisson_redlock"
                } else {
                    "redlock"
                },
                holders: combined
                    .majority_holder
                    .iter()
                    .map(|h| HolderInfo {
                        id: h.clone(),
                        reentrancy: None,
                        mode: None,
                        version: version.clone(),
                        entry: None,
                    })
                    .collect(),
                waiters: Vec::new(),
                watchers: 0,
                expires_at_ms,
                lock: None,
                flags,
                redlock: Some(Box::new(view)),
                unattributed_waiters: None,
            });
        }
        let (member, report) = self
            .reads
            .iter()
            .enumerate()
            .find_map(|(i, reads)| reads.get(key).map(|r| (i, r)))?;
        Some(self.merged_read(member, report))
    }

    /// The lock of a key that lives on one member, as `member`'s read `report` shows it.
    fn merged_read(&self, member: usize, report: &MemberRead) -> Merged {
        let lock = report.lock.clone();
        // python-redis-lock's waiters block on its signal list: on the key's server, or on a
        // Cluster on whichever master owns the list's slot (counted over every master).
        let unattributed_waiters = (lock.recipe == RedisRecipe::PythonRedisLock)
            .then(|| {
                if self.spec.cluster {
                    self.member_blocked
                        .iter()
                        .flatten()
                        .copied()
                        .reduce(u32::saturating_add)
                } else {
                    self.member_blocked.get(member).copied().flatten()
                }
            })
            .flatten();
        Merged {
            member,
            recipe: lock.recipe.as_str(),
            holders: lock
                .holders
                .iter()
                .map(|h| HolderInfo {
                    id: h.id.clone(),
                    reentrancy: h.reentrancy,
                    mode: h.mode,
                    version: truncated_version(report, &h.id)
                        .or_else(|| h.entry.map(|e| semaphore_version(&e))),
                    entry: h.entry,
                })
                .collect(),
            waiters: lock
                .waiters
                .iter()
                .map(|w| (w.id.clone(), w.deadline_ms))
                .collect(),
            watchers: report.watchers,
            expires_at_ms: lock.ttl_ms.map(|t| report.at_ms.saturating_add(t)),
            flags: lock.flags.iter().map(|f| f.as_str().to_string()).collect(),
            lock: Some(lock),
            redlock: None,
            unattributed_waiters,
        }
    }

    /// Whether `read` is kept after its lock is decided: when the lock depends on more than
    /// this read (a Redlock's other masters, python-redis-lock's count of clients blocked on
    /// the member, a resync that waits for the other members' first scans).
    fn keeps(&self, read: &MemberRead) -> bool {
        self.resyncing || depends_on_more(self.spec.redlock, read)
    }

    /// Every lock key known, as bytes (the ledger's paths are the keys as shown).
    fn known_keys(&self) -> Vec<Vec<u8>> {
        self.ledger.locks.keys().map(parse_display_bytes).collect()
    }
}

struct HolderInfo {
    id: String,
    reentrancy: Option<u64>,
    mode: Option<lockscope_model::wire::LockMode>,
    /// What a release must name besides the id (`HolderView::version`).
    version: Option<String>,
    /// redis-semaphore: the holder's sorted-set entry.
    entry: Option<SemaphoreEntry>,
}

/// A redis-semaphore holder's version: the score a release compares (`<score>`), and for a
/// MultiSemaphore the permits it removes (`<score>x<permits>`); see `release.rs`.
pub(super) fn semaphore_version(entry: &SemaphoreEntry) -> String {
    match entry.permits {
        Some(p) => format!("{}x{p}", entry.score_ms),
        None => entry.score_ms.to_string(),
    }
}

/// The version of a holder whose id is a truncated value or field of `report` (its length and
/// digest), if it is one.
fn truncated_version(report: &MemberRead, id: &str) -> Option<String> {
    report
        .truncated
        .iter()
        .find(|(shown, _)| shown == id)
        .map(|(_, version)| version.clone())
}

/// A key's lock as all members say.
struct Merged {
    /// The member it was read on (the first, for a Redlock).
    member: usize,
    recipe: &'static str,
    holders: Vec<HolderInfo>,
    /// Waiter id, deadline.
    waiters: Vec<(String, Option<i64>)>,
    watchers: u32,
    expires_at_ms: Option<i64>,
    lock: Option<RedisLock>,
    flags: Vec<String>,
    redlock: Option<Box<RedlockView>>,
    /// python-redis-lock: clients blocked in `BLPOP` on the key's server.
    unattributed_waiters: Option<u32>,
}

impl RedisSourceState {
    /// Applies one update of this source.
    pub fn apply(&mut self, update: RedisUpdate, cx: &mut LedgerContext<'_>) {
        match update {
            RedisUpdate::Members { members } => self.set_members(members, cx),
            RedisUpdate::Status {
                member,
                up,
                error,
                last_seen_ms,
            } => self.status(member, up, error, last_seen_ms, cx),
            RedisUpdate::Keys {
                member,
                full,
                reports,
            } => self.keys(member, full, reports, cx),
            RedisUpdate::Changes { member, changes } => self.changes(member, changes, cx),
            RedisUpdate::Blocked { member, clients } => self.blocked(member, clients, cx),
            RedisUpdate::Lagging { member, lagging } => self.lagging(member, lagging, cx),
            RedisUpdate::LongKeys {
                member,
                skipped,
                example,
            } => {
                if let Some(slot) = self.member_long_keys.get_mut(member) {
                    *slot = (skipped, example);
                    self.refresh_view();
                    cx.source_changed = true;
                }
            }
        }
    }

    fn set_members(&mut self, members: Vec<String>, cx: &mut LedgerContext<'_>) {
        let n = members.len();
        let changed = !self.members.is_empty();
        self.members = members;
        // A source that was up was seen until now: its locks stay marked so until the new
        // members are up.
        let seen = self.view.up.then_some(cx.now);
        self.member_up = vec![false; n];
        self.member_error = vec![None; n];
        self.member_last_seen = vec![seen; n];
        self.member_synced = vec![false; n];
        self.member_blocked = vec![None; n];
        self.member_lagging = vec![false; n];
        self.member_long_keys = vec![(0, None); n];
        self.unrecognised.reset(n);
        self.reads = vec![HashMap::new(); n];
        self.quorums.clear();
        self.source_error = None;
        self.refresh_view();
        cx.source_changed = true;
        if changed && !self.ledger.locks.is_empty() {
            // Every known key is re-decided once the new members' first scans are in.
            self.resyncing = true;
            return;
        }
        for key in self.known_keys() {
            self.update_lock(&key, Decided::FromReads, false, cx);
        }
    }

    /// After a member-set change: once every member has scanned (or failed), re-decides every
    /// key known before or read since. Locks first seen now are not booked as acquired (they
    /// may have been taken while lockscope could not see); answers whether it did.
    fn finish_resync(&mut self, cx: &mut LedgerContext<'_>) -> bool {
        let ready = (0..self.members.len())
            .all(|m| self.member_synced[m] || self.member_error[m].is_some());
        if !self.resyncing || !ready {
            return false;
        }
        let mut keys: BTreeSet<Vec<u8>> = self.known_keys().into_iter().collect();
        for reads in &self.reads {
            keys.extend(reads.keys().map(|k| k.to_vec()));
        }
        for key in keys {
            self.update_lock(&key, Decided::FromReads, true, cx);
        }
        // Decided: only the reads a lock keeps depending on stay.
        self.resyncing = false;
        let redlock = self.spec.redlock;
        for reads in &mut self.reads {
            reads.retain(|_, r| depends_on_more(redlock, r));
        }
        true
    }

    fn status(
        &mut self,
        member: Option<usize>,
        up: bool,
        error: Option<String>,
        last_seen_ms: Option<i64>,
        cx: &mut LedgerContext<'_>,
    ) {
        match member {
            Some(m) if m < self.members.len() => {
                if up {
                    self.member_last_seen[m] = None;
                } else if self.member_up[m] {
                    self.member_last_seen[m] = Some(last_seen_ms.unwrap_or(cx.now));
                }
                self.member_up[m] = up;
                self.member_error[m] = error;
                // A member's status comes at the start and end of its session, which begins
                // with a full scan: whatever backlog it dropped before is caught up.
                self.member_lagging[m] = false;
            }
            Some(_) => return,
            None => self.source_error = error,
        }
        self.refresh_view();
        cx.source_changed = true;
        // A new member that cannot be reached must not hold the others' locks back.
        self.finish_resync(cx);
    }

    /// Books what member `member`'s notifications told: each lock key that came as an
    /// acquisition, each that went as a release after the time it was held. A release while
    /// an operator's force release of the lock is under way is `forced`.
    ///
    /// A Redlock is held when its key exists on a majority of masters: one acquisition, one
    /// release, however many masters it is on. The masters' notifications come on separate
    /// connections, and a hold of a few round trips is over before another master's
    /// notification of it arrives, so their order says little. Counts do not depend on it:
    /// per key and master, how often the key came and went; the lock was acquired as often as
    /// a majority of masters saw the key come (the majority-th largest count of comings), and
    /// released as often as a majority saw it go. A round in which the masters' keys were split
    /// between contenders, none with a majority, counts as an acquisition when it leaves a
    /// majority of masters with a new key.
    pub fn changes(&mut self, member: usize, changes: Vec<KeyChange>, cx: &mut LedgerContext<'_>) {
        let n = self.members.len();
        if member >= n {
            return;
        }
        let majority = n / 2 + 1;
        for change in changes.into_iter().filter(|c| c.counted) {
            let path = display_bytes(&change.key);
            let (acquired, released) = match change.kind {
                ChangeKind::Came { acquired } if self.spec.redlock => {
                    let quorum = self
                        .quorums
                        .entry(change.key.clone())
                        .or_insert_with(|| Quorum::new(n));
                    (quorum.came(member, majority) && acquired, None)
                }
                ChangeKind::Went { cause, held_ms } if self.spec.redlock => {
                    let Some(quorum) = self.quorums.get_mut(&change.key) else {
                        continue;
                    };
                    let released = quorum.went(member, majority);
                    if quorum.settle() {
                        self.quorums.remove(&change.key);
                    }
                    (false, released.then_some((cause, held_ms)))
                }
                ChangeKind::Came { acquired } => (acquired, None),
                ChangeKind::Went { cause, held_ms } => (false, Some((cause, held_ms))),
            };
            if acquired {
                self.ledger.book_acquired(&path);
            }
            if let Some((cause, held_ms)) = released {
                let cause = self.forced_cause(&path, cause, cx);
                self.ledger.book_released(&path, cause, held_ms);
            }
        }
    }

    /// `forced` while an operator's force release of the lock at `path` is marked, else
    /// `cause`. The mark is left for the holders' diff, which names the holder it was for.
    fn forced_cause(
        &self,
        path: &str,
        cause: ReleaseCause,
        cx: &LedgerContext<'_>,
    ) -> ReleaseCause {
        if !self.ledger.locks.contains_key(path) {
            return cause;
        }
        let lock_id = self.ledger.id_of(path);
        let marked = cx
            .forced
            .iter()
            .any(|((id, _), mark)| *id == lock_id && mark.until_ms >= cx.now);
        if marked {
            ReleaseCause::Forced
        } else {
            cause
        }
    }

    fn lagging(&mut self, member: usize, lagging: bool, cx: &mut LedgerContext<'_>) {
        let Some(slot) = self.member_lagging.get_mut(member) else {
            return;
        };
        if *slot != lagging {
            *slot = lagging;
            self.refresh_view();
            cx.source_changed = true;
        }
    }

    fn blocked(&mut self, member: usize, clients: u32, cx: &mut LedgerContext<'_>) {
        let Some(slot) = self.member_blocked.get_mut(member) else {
            return;
        };
        *slot = Some(clients);
        // On a Cluster a member's count concerns the locks on every master.
        let cluster = self.spec.cluster;
        let keys: Vec<Vec<u8>> = self
            .reads
            .iter()
            .enumerate()
            .filter(|(i, _)| cluster || *i == member)
            .flat_map(|(_, reads)| reads.iter())
            .filter(|(_, r)| r.lock.recipe == RedisRecipe::PythonRedisLock)
            .map(|(k, _)| k.to_vec())
            .collect();
        for key in keys {
            self.update_lock(&key, Decided::FromReads, false, cx);
        }
    }

    /// Reads of lock keys on `member`; `full`: a whole scan's, any other key known there is
    /// gone.
    fn keys(
        &mut self,
        member: usize,
        full: bool,
        reports: Vec<KeyReport>,
        cx: &mut LedgerContext<'_>,
    ) {
        if member >= self.members.len() {
            return;
        }
        let bootstrap = full && !self.member_synced[member];
        let mut touched: BTreeMap<Vec<u8>, Decided> = BTreeMap::new();
        if full {
            self.unrecognised.clear_member(member);
        }
        for report in &reports {
            let _changed =
                self.unrecognised
                    .note(member, &report.key, report.unrecognised.as_deref());
        }
        if full {
            let seen: HashSet<&[u8]> = reports.iter().map(|r| r.key.as_slice()).collect();
            let mut gone: Vec<(Vec<u8>, Decided)> = self.reads[member]
                .keys()
                .filter(|k| !seen.contains(&k[..]))
                .map(|k| (k.to_vec(), Decided::FromReads))
                .collect();
            if !self.spec.redlock {
                // Locks decided from this member's reads, which were not kept.
                gone.extend(
                    self.ledger
                        .locks
                        .iter()
                        .filter(|(_, lock)| lock.detail.member as usize == member)
                        .map(|(path, _)| parse_display_bytes(path))
                        .filter(|key| {
                            !seen.contains(key.as_slice())
                                && !self.reads[member].contains_key(key.as_slice())
                        })
                        .map(|key| (key, Decided::Read(member, None))),
                );
            }
            for (key, decided) in gone {
                // A reconcile found a key gone that no notification reported.
                if !bootstrap {
                    self.corrections += 1;
                }
                self.reads[member].remove(key.as_slice());
                touched.insert(key, decided);
            }
        }
        for report in reports {
            let KeyReport {
                key,
                lock,
                watchers,
                at_ms,
                pttl_ms,
                truncated,
                ..
            } = report;
            if full && !bootstrap {
                let before = self.holders_before(member, &key);
                let after = lock
                    .as_ref()
                    .map(|l| l.holders.iter().map(|h| h.id.clone()).collect::<Vec<_>>());
                if before != after {
                    self.corrections += 1;
                }
            }
            let decided = match lock {
                Some(mut lock) => {
                    // Kept per lock key: no spare capacity from decoding.
                    lock.holders.shrink_to_fit();
                    lock.waiters.shrink_to_fit();
                    lock.flags.shrink_to_fit();
                    let read = MemberRead {
                        lock,
                        watchers,
                        at_ms,
                        pttl_ms,
                        truncated: truncated.into_boxed_slice(),
                    };
                    if self.keeps(&read) {
                        self.reads[member].insert(key.as_slice().into(), read);
                        Decided::FromReads
                    } else {
                        self.reads[member].remove(key.as_slice());
                        Decided::Read(member, Some(Box::new(self.merged_read(member, &read))))
                    }
                }
                None => {
                    let kept = self.reads[member].remove(key.as_slice()).is_some();
                    if kept || self.spec.redlock {
                        Decided::FromReads
                    } else {
                        Decided::Read(member, None)
                    }
                }
            };
            match decided {
                // Decided from this read alone: booked now, so a scan's reads are let go as
                // they are booked instead of all waiting for the last (a first read of a
                // million keys would hold a million decided locks at once).
                Decided::Read(..) if !self.resyncing => {
                    self.update_lock(&key, decided, bootstrap, cx);
                }
                decided => {
                    touched.insert(key, decided);
                }
            }
        }
        if full {
            self.member_synced[member] = true;
            self.view.last_sync_ms = Some(cx.now);
        }
        self.refresh_view();
        cx.source_changed = true;
        if self.resyncing {
            self.finish_resync(cx);
            return;
        }
        for (key, decided) in touched {
            self.update_lock(&key, decided, bootstrap, cx);
        }
    }

    /// The holders of `key` on `member` before a read: its kept read's, or those of the lock
    /// decided from that member's last read.
    fn holders_before(&self, member: usize, key: &[u8]) -> Option<Vec<String>> {
        if let Some(read) = self.reads[member].get(key) {
            return Some(read.lock.holders.iter().map(|h| h.id.clone()).collect());
        }
        if self.spec.redlock {
            return None;
        }
        self.ledger
            .locks
            .get(display_bytes(key).as_str())
            .filter(|lock| lock.detail.member as usize == member)
            .map(|lock| {
                lock.people()
                    .holders
                    .iter()
                    .map(|(id, _)| id.to_string())
                    .collect()
            })
    }

    /// Re-decides the lock at `key` and books what changed.
    fn update_lock(
        &mut self,
        key: &[u8],
        decided: Decided,
        bootstrap: bool,
        cx: &mut LedgerContext<'_>,
    ) {
        let now = cx.now;
        let path = display_bytes(key);
        let known = self.ledger.locks.get(path.as_str());
        let merged = match decided {
            Decided::FromReads => self.merged(key),
            Decided::Read(member, merged) => {
                // Gone from a member it no longer lives on (a Cluster slot moved): not gone.
                let elsewhere = known.is_some_and(|l| l.detail.member as usize != member);
                if merged.is_none() && elsewhere {
                    return;
                }
                merged.map(|m| *m)
            }
        };
        let is_new = known.is_none();
        // A holder gone (or replaced while the key stayed) went because its lease ran out when
        // that was due now; else it released (and another acquired in between two reads).
        let cause_now = match known.and_then(|l| l.detail.expires_at_ms.get()) {
            Some(at) if at <= now.saturating_add(TTL_SLACK_MS) => ReleaseCause::TtlExpired,
            _ => ReleaseCause::Released,
        };
        let seen = |id: &str| Seen {
            id: id.to_string(),
            session: holder_client(id),
            since_ms: None,
        };
        let observed = merged.as_ref().map(|m| Observed {
            holders: m.holders.iter().map(|h| seen(&h.id)).collect(),
            waiters: m.waiters.iter().map(|(id, _)| seen(id)).collect(),
        });
        // Counted from notifications (`changes`), unless the key holds permits: then its
        // holders, permit ids, are counted as read.
        let permits = match &merged {
            Some(m) => m.lock.as_ref().is_some_and(|l| holds_permits(l.recipe)),
            None => known.is_some_and(|l| l.detail.permits),
        };
        let counting = if permits {
            Counting::Here
        } else {
            Counting::Told
        };
        // Whether the holders differ from the ones the ledger had before this read.
        let holders_changed = merged.as_ref().map(|m| {
            let before = known.map(|l| l.people());
            let before = before.as_ref().map(|p| &p.holders[..]);
            m.holders
                .iter()
                .map(|h| h.id.as_str())
                .ne(before.unwrap_or_default().iter().map(|(id, _)| *id))
        });
        let mut booking = cx.booking();
        let outcome = self.ledger.observe_counting(
            &path,
            observed.as_ref(),
            bootstrap,
            &mut |_| cause_now,
            &mut booking,
            counting,
        );
        let merged = match (outcome, merged) {
            (Outcome::Gone(id), _) => {
                cx.lock_ops.push(LockOp::Removed(id));
                self.refresh_view();
                cx.source_changed = true;
                return;
            }
            (Outcome::Changed | Outcome::Same, Some(merged)) => merged,
            _ => return,
        };
        if is_new {
            self.refresh_view();
            cx.source_changed = true;
        }
        let id = self.ledger.id_of(&path);
        let Some(entry) = self.ledger.locks.get_mut(path.as_str()) else {
            return;
        };
        let holders_changed = holders_changed.unwrap_or(true);
        let ttl = merged.expires_at_ms.map(|at| at.saturating_sub(now));
        let state = &mut entry.detail;
        // The lease is the longest TTL seen since the current holder took the lock.
        state.lease_ms = if holders_changed {
            ttl
        } else {
            state.lease_ms.get().max(ttl)
        }
        .into();
        state.permits = permits_recipe(merged.recipe);
        state.expires_at_ms = merged.expires_at_ms.into();
        state.member = merged.member as u32;
        let view = build_view(&self.spec.name, id, path.clone(), entry, &merged);
        self.ledger.publish(&path, view, cx.lock_ops);
    }

    /// The history of lock `id`, current or gone.
    pub fn history_of(&self, id: &str) -> Option<&History> {
        self.ledger.history_of(id)
    }

    /// Redis has no sessions lockscope can see (clients are not tied to keys).
    pub fn sessions(&self) -> Vec<SessionView> {
        Vec::new()
    }
}

/// Whether the lock `read` shows depends on more than the read, outside a resync: every
/// Redlock's does (its other masters), and python-redis-lock's (the clients blocked on the
/// member).
fn depends_on_more(redlock: bool, read: &MemberRead) -> bool {
    redlock || read.lock.recipe == RedisRecipe::PythonRedisLock
}

/// Whether `recipe` (as named in views) holds permits or a count ([`holds_permits`]).
fn permits_recipe(recipe: &str) -> bool {
    [
        RedisRecipe::RedissonSemaphore,
        RedisRecipe::RedissonPermitExpirableSemaphore,
        RedisRecipe::RedissonCountDownLatch,
        RedisRecipe::NodeSemaphore,
        RedisRecipe::NodeMultiSemaphore,
        RedisRecipe::TokenZset,
    ]
    .iter()
    .any(|r| r.as_str() == recipe)
}

/// The client part of a holder id: Redisson's `<uuid>:<threadId>[:write]` → the uuid; anything
/// else (tokens, hosts) is its own client.
fn holder_client(id: &str) -> String {
    let parts: Vec<&str> = id.split(':').collect();
    if parts.len() >= 2 && parts[0].len() == 36 && parts[0].matches('-').count() == 4 {
        parts[0].to_string()
    } else {
        id.to_string()
    }
}

fn build_view(
    source: &str,
    id: String,
    path: String,
    entry: &LedgerLock<RedisLockState>,
    merged: &Merged,
) -> LockView {
    let state = &entry.detail;
    let people = entry.people();
    let fencing = merged.lock.as_ref().and_then(|l| l.fencing_token);
    LockView {
        id,
        source: source.to_string(),
        backend: Backend::Redis,
        path,
        recipe: merged.recipe.to_string(),
        holders: merged
            .holders
            .iter()
            .zip(people.holders.iter())
            .map(|(h, (_, since))| HolderView {
                node: h.id.clone(),
                session: holder_client(&h.id),
                since_ms: *since,
                held_ms: 0,
                mode: h.mode,
                watchers: 0,
                reentrancy: h.reentrancy,
                // redis-semaphore: the entry's own lapse (score + estimated lockTimeout).
                lease: h.entry.map(|e| {
                    Box::new(LeaseView {
                        id: if merged.recipe == RedisRecipe::TokenZset.as_str() {
                            "its score: the token's expiry".to_string()
                        } else if e.stale {
                            "stale: past score + lockTimeout, not yet purged".to_string()
                        } else {
                            "score + lockTimeout (estimated)".to_string()
                        },
                        granted_s: None,
                        expires_at_ms: e.expires_ms,
                    })
                }),
                // Spring's RedisLockRegistry names its holder only by the registry instance's
                // client id: that is who holds, in the lock's own words; ShedLock's value
                // names the host that took it.
                identity: if merged.recipe == RedisRecipe::SpringRedisLock.as_str() {
                    lockscope_model::clip::identity_text(&h.id)
                } else if merged.recipe == RedisRecipe::ShedLock.as_str() {
                    lockscope_model::shedlock::parse_value(
                        &lockscope_model::redis::parse_display_bytes(&h.id),
                    )
                    .and_then(|v| lockscope_model::clip::identity_text(&v.host))
                } else {
                    None
                },
                version: h.version.clone(),
                statement: None,
            })
            .collect(),
        waiters: merged
            .waiters
            .iter()
            .zip(people.waiters.iter())
            .enumerate()
            .map(|(i, ((id, deadline), (_, since)))| WaiterView {
                node: id.clone(),
                session: holder_client(id),
                since_ms: *since,
                waited_ms: 0,
                position: i as u32 + 1,
                mode: None,
                watches: None,
                deadline_ms: *deadline,
                lease: None,
                identity: None,
                statement: None,
            })
            .collect(),
        watchers: merged.watchers,
        herd: merged.watchers > 1,
        acquisitions: entry.history().acquisitions,
        releases: entry.history().releases,
        changed_ms: entry.changed_ms,
        expires_at_ms: merged.expires_at_ms,
        flags: merged.flags.clone(),
        permits_available: merged.lock.as_ref().and_then(|l| l.permits_available),
        permits_total: merged.lock.as_ref().and_then(|l| l.permits_total),
        fencing_token: fencing,
        deadline_ms: merged.lock.as_ref().and_then(|l| l.deadline_ms),
        redlock: merged.redlock.clone(),
        usual_hold_ms: lockscope_core::aggregate::usual_hold_of(entry.history()),
        lease_ms: state.lease_ms.get(),
        recipe_guess: merged
            .lock
            .as_ref()
            .and_then(|l| l.guess)
            .map(str::to_string),
        unattributed_waiters: merged.unattributed_waiters,
        ..LockView::default()
    }
}

#[cfg(test)]
mod tests {
    use super::{holder_client, Quorum};

    /// A Redis lock's ledger entry with its details, as ARCHITECTURE.md's "What a lock costs"
    /// counts it.
    #[test]
    fn a_redis_ledger_entry_keeps_its_size() {
        use lockscope_core::aggregate::ledger::LedgerLock;
        // 64 B: a 64-byte jemalloc slot (at 136 B it took a 160-byte one).
        assert_eq!(std::mem::size_of::<super::RedisLockState>(), 24);
        assert_eq!(std::mem::size_of::<LedgerLock<super::RedisLockState>>(), 64);
    }

    /// Acquisitions and releases a Redlock key's changes book, member by member in the order
    /// given (`true`: came, `false`: went), on 3 masters.
    fn redlock_counts(changes: &[(usize, bool)]) -> (u32, u32) {
        let mut quorum = Quorum::new(3);
        let mut counts = (0, 0);
        for &(member, came) in changes {
            if came {
                counts.0 += u32::from(quorum.came(member, 2));
            } else {
                counts.1 += u32::from(quorum.went(member, 2));
                if quorum.settle() {
                    quorum = Quorum::new(3);
                }
            }
        }
        counts
    }

    #[test]
    fn a_redlock_counts_once_per_majority_whatever_the_masters_order() {
        // Three holds on all three masters, told in order…
        let mut in_order = Vec::new();
        for _ in 0..3 {
            in_order.extend([
                (0, true),
                (1, true),
                (2, true),
                (0, false),
                (1, false),
                (2, false),
            ]);
        }
        assert_eq!(redlock_counts(&in_order), (3, 3));
        // …or each master's stream far behind the one before: still three.
        let skewed: Vec<(usize, bool)> = (0..3)
            .flat_map(|m| (0..3).flat_map(move |_| [(m, true), (m, false)]))
            .collect();
        assert_eq!(redlock_counts(&skewed), (3, 3));
        // A contender that got one master and let go is no acquisition; the winner's is one.
        assert_eq!(
            redlock_counts(&[
                (0, true),
                (1, true),
                (2, true),
                (2, false),
                (0, false),
                (1, false)
            ]),
            (1, 1)
        );
        // A minority hold alone counts nothing.
        assert_eq!(redlock_counts(&[(1, true), (1, false)]), (0, 0));
    }

    #[test]
    fn redisson_holders_name_their_client() {
        assert_eq!(
            holder_client("1b4e28ba-2fa1-11d2-883f-0016d3cca427:52"),
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
        );
        assert_eq!(
            holder_client("1b4e28ba-2fa1-11d2-883f-0016d3cca427:52:write"),
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
        );
        assert_eq!(holder_client("token-abc"), "token-abc");
    }
}
