//! The aggregator's Redis sources: per-member reads of lock keys merged into locks (one member
//! for a server or Cluster slot owner, all masters for a Redlock set), holder changes turned into
//! acquisitions and releases with their cause (`released`, `ttl_expired`), and corrections found
//! by reconcile scans counted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use lockscope_model::id::lock_id;
use lockscope_model::redis::{
    combine_redlock, display_bytes, redisson_redlock_holder, RedisLock, RedisRecipe, RedlockMaster,
};
use lockscope_model::wire::{
    Backend, HolderView, LockEvent, LockView, RedlockMasterView, RedlockView, ReleaseCause,
    SourceView, WaiterView,
};

use super::{push_event, Aggregator, History, HISTORY_LIMIT};
use crate::collect::redis::RedisSpec;
use crate::collect::{KeyReport, RedisUpdate};
use crate::config::redact_url;
use crate::metrics::LockCounters;

/// Expiries are recognised when the key vanished within this long of its deadline.
const TTL_SLACK_MS: i64 = 250;

pub(super) struct RedisSourceState {
    pub spec: Arc<RedisSpec>,
    pub view: SourceView,
    pub members: Vec<String>,
    pub member_up: Vec<bool>,
    pub member_error: Vec<Option<String>>,
    pub member_synced: Vec<bool>,
    /// Per member: clients blocked in `BLPOP` (python-redis-lock waiters Redis cannot attribute).
    pub member_blocked: Vec<Option<u32>>,
    /// Per member: dropped its backlog of changes and catches up with a full scan.
    pub member_lagging: Vec<bool>,
    /// Per member: the last read of each lock key it holds.
    pub reads: Vec<HashMap<Vec<u8>, KeyReport>>,
    pub locks: BTreeMap<Vec<u8>, RedisLockState>,
    pub graveyard: HashMap<Vec<u8>, History>,
    pub counters: LockCounters,
    /// Keys a reconcile scan found different from what notifications had told.
    pub corrections: u64,
    pub source_error: Option<String>,
    /// The member set changed (a Cluster failover or resharding): locks are re-decided only
    /// once every new member has sent its first full scan (or failed), so a lock on a member
    /// not yet read is not taken for released, nor one read again for acquired.
    pub resyncing: bool,
}

pub(super) struct RedisLockState {
    pub id: String,
    pub path: String,
    pub recipe: String,
    /// Holder id → since (epoch ms).
    pub holders: Vec<(String, i64)>,
    /// Waiter id → first seen waiting.
    pub waiters: Vec<(String, i64)>,
    pub expires_at_ms: Option<i64>,
    /// Longest TTL seen since the current holder took the lock.
    pub lease_ms: Option<i64>,
    pub changed_ms: i64,
    pub history: History,
    pub view: Arc<LockView>,
}

impl RedisSourceState {
    pub fn new(spec: RedisSpec, max_labels: usize) -> Self {
        RedisSourceState {
            view: SourceView::connecting(&spec.name, Backend::Redis),
            spec: Arc::new(spec),
            members: Vec::new(),
            member_up: Vec::new(),
            member_error: Vec::new(),
            member_synced: Vec::new(),
            member_blocked: Vec::new(),
            member_lagging: Vec::new(),
            reads: Vec::new(),
            locks: BTreeMap::new(),
            graveyard: HashMap::new(),
            counters: LockCounters::new(max_labels),
            corrections: 0,
            source_error: None,
            resyncing: false,
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
        self.view.synced = !self.members.is_empty() && self.member_synced.iter().all(|s| *s);
        self.view.error = (!errors.is_empty()).then(|| errors.join("; "));
        self.view.locks = self.locks.len();
        self.view.nodes = self.reads.iter().map(HashMap::len).sum();
        self.view.lagging = self.member_lagging.iter().any(|l| *l);
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
                    r.lock.as_ref().is_some_and(|l| {
                        matches!(
                            l.recipe,
                            RedisRecipe::RedissonLock | RedisRecipe::RedissonFencedLock
                        )
                    })
                });
            let holder_on = |i: usize| -> Option<(String, String, &KeyReport)> {
                let r = self.reads[i].get(key)?;
                let field = r.lock.as_ref()?.holders.first()?.id.clone();
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
                    .map(|(_, _, r)| r.at_ms + r.pttl_ms)
                    .min()
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
                recipe: if hashes {
                    "redisson_redlock"
                } else {
                    "redlock"
                }
                .into(),
                holders: combined
                    .majority_holder
                    .iter()
                    .map(|h| HolderInfo {
                        id: h.clone(),
                        reentrancy: None,
                        mode: None,
                    })
                    .collect(),
                waiters: Vec::new(),
                watchers: 0,
                expires_at_ms,
                lock: None,
                flags,
                redlock: Some(view),
                unattributed_waiters: None,
            });
        }
        let (member, report) = self
            .reads
            .iter()
            .enumerate()
            .find_map(|(i, reads)| reads.get(key).map(|r| (i, r)))?;
        let lock = report.lock.clone()?;
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
        Some(Merged {
            recipe: lock.recipe.as_str().to_string(),
            holders: lock
                .holders
                .iter()
                .map(|h| HolderInfo {
                    id: h.id.clone(),
                    reentrancy: h.reentrancy,
                    mode: h.mode,
                })
                .collect(),
            waiters: lock
                .waiters
                .iter()
                .map(|w| (w.id.clone(), w.deadline_ms))
                .collect(),
            watchers: report.watchers,
            expires_at_ms: lock.ttl_ms.map(|t| report.at_ms + t),
            flags: lock.flags.iter().map(|f| f.as_str().to_string()).collect(),
            lock: Some(lock),
            redlock: None,
            unattributed_waiters,
        })
    }
}

struct HolderInfo {
    id: String,
    reentrancy: Option<u64>,
    mode: Option<lockscope_model::wire::LockMode>,
}

/// A key's lock as all members say.
struct Merged {
    recipe: String,
    holders: Vec<HolderInfo>,
    /// Waiter id, deadline.
    waiters: Vec<(String, Option<i64>)>,
    watchers: u32,
    expires_at_ms: Option<i64>,
    lock: Option<RedisLock>,
    flags: Vec<String>,
    redlock: Option<RedlockView>,
    /// python-redis-lock: clients blocked in `BLPOP` on the key's server.
    unattributed_waiters: Option<u32>,
}

impl Aggregator {
    /// Applies one update of Redis source `index`.
    pub(super) fn redis_apply(&mut self, index: usize, update: RedisUpdate) {
        if index >= self.redis.len() {
            tracing::error!(
                source = index,
                "update for a Redis source that is not configured"
            );
            return;
        }
        match update {
            RedisUpdate::Members { members } => self.redis_members(index, members),
            RedisUpdate::Status { member, up, error } => {
                self.redis_status(index, member, up, error)
            }
            RedisUpdate::Keys {
                member,
                full,
                reports,
            } => self.redis_keys(index, member, full, reports),
            RedisUpdate::Blocked { member, clients } => self.redis_blocked(index, member, clients),
            RedisUpdate::Lagging { member, lagging } => self.redis_lagging(index, member, lagging),
        }
    }

    pub(super) fn redis_members(&mut self, index: usize, members: Vec<String>) {
        let now = crate::now_ms();
        let source = &mut self.redis[index];
        let n = members.len();
        let changed = !source.members.is_empty();
        source.members = members;
        source.member_up = vec![false; n];
        source.member_error = vec![None; n];
        source.member_synced = vec![false; n];
        source.member_blocked = vec![None; n];
        source.member_lagging = vec![false; n];
        source.reads = vec![HashMap::new(); n];
        source.source_error = None;
        source.refresh_view();
        self.dirty_redis_sources.insert(index);
        if changed && !source.locks.is_empty() {
            // Every known key is re-decided once the new members' first scans are in.
            source.resyncing = true;
            return;
        }
        let keys: Vec<Vec<u8>> = source.locks.keys().cloned().collect();
        for key in keys {
            self.redis_update_lock(index, &key, now, false);
        }
    }

    /// After a member-set change: once every member has scanned (or failed), re-decides every
    /// key known before or read since. Locks first seen now are not booked as acquired (they
    /// may have been taken while lockscope could not see); answers whether it did.
    fn finish_resync(&mut self, index: usize, now: i64) -> bool {
        let source = &mut self.redis[index];
        let ready = (0..source.members.len())
            .all(|m| source.member_synced[m] || source.member_error[m].is_some());
        if !source.resyncing || !ready {
            return false;
        }
        source.resyncing = false;
        let mut keys: BTreeSet<Vec<u8>> = source.locks.keys().cloned().collect();
        for reads in &source.reads {
            keys.extend(reads.keys().cloned());
        }
        for key in keys {
            self.redis_update_lock(index, &key, now, true);
        }
        true
    }

    pub(super) fn redis_status(
        &mut self,
        index: usize,
        member: Option<usize>,
        up: bool,
        error: Option<String>,
    ) {
        let source = &mut self.redis[index];
        match member {
            Some(m) if m < source.members.len() => {
                source.member_up[m] = up;
                source.member_error[m] = error;
                // A member's status comes at the start and end of its session, which begins
                // with a full scan: whatever backlog it dropped before is caught up.
                source.member_lagging[m] = false;
            }
            Some(_) => return,
            None => source.source_error = error,
        }
        source.refresh_view();
        self.dirty_redis_sources.insert(index);
        // A new member that cannot be reached must not hold the others' locks back.
        self.finish_resync(index, crate::now_ms());
    }

    pub(super) fn redis_lagging(&mut self, index: usize, member: usize, lagging: bool) {
        let source = &mut self.redis[index];
        let Some(slot) = source.member_lagging.get_mut(member) else {
            return;
        };
        if *slot != lagging {
            *slot = lagging;
            source.refresh_view();
            self.dirty_redis_sources.insert(index);
        }
    }

    pub(super) fn redis_blocked(&mut self, index: usize, member: usize, clients: u32) {
        let now = crate::now_ms();
        let source = &mut self.redis[index];
        let Some(slot) = source.member_blocked.get_mut(member) else {
            return;
        };
        *slot = Some(clients);
        // On a Cluster a member's count concerns the locks on every master.
        let cluster = source.spec.cluster;
        let keys: Vec<Vec<u8>> = source
            .reads
            .iter()
            .enumerate()
            .filter(|(i, _)| cluster || *i == member)
            .flat_map(|(_, reads)| reads.iter())
            .filter(|(_, r)| {
                r.lock
                    .as_ref()
                    .is_some_and(|l| l.recipe == RedisRecipe::PythonRedisLock)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.redis_update_lock(index, &key, now, false);
        }
    }

    pub(super) fn redis_keys(
        &mut self,
        index: usize,
        member: usize,
        full: bool,
        reports: Vec<KeyReport>,
    ) {
        let now = crate::now_ms();
        let source = &mut self.redis[index];
        if member >= source.members.len() {
            return;
        }
        let bootstrap = full && !source.member_synced[member];
        let mut touched: BTreeSet<Vec<u8>> = BTreeSet::new();
        if full {
            let seen: BTreeSet<&Vec<u8>> = reports.iter().map(|r| &r.key).collect();
            let gone: Vec<Vec<u8>> = source.reads[member]
                .keys()
                .filter(|k| !seen.contains(k))
                .cloned()
                .collect();
            for key in gone {
                // A reconcile found a key gone that no notification reported.
                if !bootstrap {
                    source.corrections += 1;
                }
                source.reads[member].remove(&key);
                touched.insert(key);
            }
        }
        for report in reports {
            let previous = source.reads[member].get(&report.key);
            if full && !bootstrap {
                let before = previous.and_then(|r| r.lock.as_ref()).map(|l| &l.holders);
                let after = report.lock.as_ref().map(|l| &l.holders);
                if before != after {
                    source.corrections += 1;
                }
            }
            touched.insert(report.key.clone());
            if report.lock.is_some() {
                source.reads[member].insert(report.key.clone(), report);
            } else {
                source.reads[member].remove(&report.key);
            }
        }
        if full {
            source.member_synced[member] = true;
            source.view.last_sync_ms = Some(now);
        }
        source.refresh_view();
        self.dirty_redis_sources.insert(index);
        if source.resyncing {
            self.finish_resync(index, now);
            return;
        }
        for key in touched {
            self.redis_update_lock(index, &key, now, bootstrap);
        }
    }

    fn redis_update_lock(&mut self, index: usize, key: &[u8], now: i64, bootstrap: bool) {
        let store = self.store.clone();
        let source = &mut self.redis[index];
        let merged = source.merged(key);
        let Some(merged) = merged else {
            if let Some(mut state) = source.locks.remove(key) {
                let cause = match state.expires_at_ms {
                    Some(at) if at <= now + TTL_SLACK_MS => ReleaseCause::TtlExpired,
                    _ => ReleaseCause::Released,
                };
                for (holder, since) in std::mem::take(&mut state.holders) {
                    let cause = super::forced_or(&mut self.forced, &state.id, &holder, cause);
                    release(
                        &store,
                        &mut source.counters,
                        &mut state,
                        &holder,
                        since,
                        now,
                        cause,
                    );
                }
                if source.graveyard.len() >= HISTORY_LIMIT {
                    source.graveyard.clear();
                }
                source
                    .graveyard
                    .insert(key.to_vec(), state.history.buried(&state.view, now));
                self.lock_ops.push(super::Change::Removed(state.id));
                source.refresh_view();
                self.dirty_redis_sources.insert(index);
            }
            return;
        };
        let is_new = !source.locks.contains_key(key);
        if is_new {
            let path = display_bytes(key);
            source.counters.label_for(&path);
            let id = lock_id(&source.spec.name, &format!("/{path}"));
            let mut history = source.graveyard.remove(key).unwrap_or_default();
            history.last = None;
            source.locks.insert(
                key.to_vec(),
                RedisLockState {
                    view: Arc::new(LockView::default()),
                    id,
                    path,
                    recipe: merged.recipe.clone(),
                    holders: Vec::new(),
                    waiters: Vec::new(),
                    expires_at_ms: None,
                    lease_ms: None,
                    changed_ms: now,
                    history,
                },
            );
            source.refresh_view();
            self.dirty_redis_sources.insert(index);
        }
        let quiet = is_new && bootstrap;
        let Some(state) = source.locks.get_mut(key) else {
            return;
        };
        let old: HashMap<String, i64> = state.holders.iter().cloned().collect();
        let old_waiters: HashMap<String, i64> = state.waiters.iter().cloned().collect();
        let mut holders = Vec::new();
        for h in &merged.holders {
            let since = match old.get(&h.id) {
                Some(since) => *since,
                None => {
                    if !quiet {
                        let waited = old_waiters.get(&h.id).map(|first| now - first);
                        state.history.acquisitions += 1;
                        source.counters.acquired_maybe_waited(&state.path, waited);
                        push_event(
                            &store,
                            &state.id,
                            &mut state.history.events,
                            LockEvent {
                                at_ms: now,
                                kind: lockscope_model::wire::EventKind::Acquired,
                                node: h.id.clone(),
                                session: holder_client(&h.id),
                                cause: None,
                                duration_ms: waited,
                            },
                        );
                    }
                    now
                }
            };
            holders.push((h.id.clone(), since));
        }
        let kept: BTreeSet<&str> = merged.holders.iter().map(|h| h.id.as_str()).collect();
        // A holder replaced while the key stayed: its lease ran out and someone took over, or it
        // released and another acquired in between two reads.
        let replaced_cause = match state.expires_at_ms {
            Some(at) if at <= now + TTL_SLACK_MS => ReleaseCause::TtlExpired,
            _ => ReleaseCause::Released,
        };
        for (holder, since) in state.holders.clone() {
            if !kept.contains(holder.as_str()) {
                let replaced_cause =
                    super::forced_or(&mut self.forced, &state.id, &holder, replaced_cause);
                release(
                    &store,
                    &mut source.counters,
                    state,
                    &holder,
                    since,
                    now,
                    replaced_cause,
                );
            }
        }
        let waiters: Vec<(String, i64)> = merged
            .waiters
            .iter()
            .map(|(id, _)| (id.clone(), old_waiters.get(id).copied().unwrap_or(now)))
            .collect();
        for (id, _) in &waiters {
            if !old_waiters.contains_key(id) && !quiet {
                push_event(
                    &store,
                    &state.id,
                    &mut state.history.events,
                    LockEvent {
                        at_ms: now,
                        kind: lockscope_model::wire::EventKind::Queued,
                        node: id.clone(),
                        session: holder_client(id),
                        cause: None,
                        duration_ms: None,
                    },
                );
            }
        }
        let changed = holders
            .iter()
            .map(|(h, _)| h)
            .ne(state.holders.iter().map(|(h, _)| h))
            || waiters
                .iter()
                .map(|(w, _)| w)
                .ne(state.waiters.iter().map(|(w, _)| w));
        let holders_changed = holders
            .iter()
            .map(|(h, _)| h)
            .ne(state.holders.iter().map(|(h, _)| h));
        let ttl = merged.expires_at_ms.map(|at| at - now);
        // The lease is the longest TTL seen since the current holder took the lock.
        state.lease_ms = if holders_changed {
            ttl
        } else {
            state.lease_ms.max(ttl)
        };
        state.holders = holders;
        state.waiters = waiters;
        state.recipe = merged.recipe.clone();
        state.expires_at_ms = merged.expires_at_ms;
        if changed {
            state.changed_ms = now;
        }
        let view = build_view(&source.spec.name, state, &merged);
        if *state.view != view {
            let view = Arc::new(view);
            state.view = view.clone();
            self.lock_ops.push(super::Change::Lock(view));
        }
    }
}

fn release(
    store: &Option<crate::audit::Store>,
    counters: &mut LockCounters,
    state: &mut RedisLockState,
    holder: &str,
    since: i64,
    now: i64,
    cause: ReleaseCause,
) {
    let held = (now - since).max(0);
    counters.released(&state.path, cause, held);
    state.history.releases += 1;
    push_event(
        store,
        &state.id,
        &mut state.history.events,
        LockEvent {
            at_ms: now,
            kind: lockscope_model::wire::EventKind::Released,
            node: holder.to_string(),
            session: holder_client(holder),
            cause: Some(cause),
            duration_ms: Some(held),
        },
    );
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

fn build_view(source: &str, state: &RedisLockState, merged: &Merged) -> LockView {
    let fencing = merged.lock.as_ref().and_then(|l| l.fencing_token);
    LockView {
        id: state.id.clone(),
        source: source.to_string(),
        backend: Backend::Redis,
        path: state.path.clone(),
        recipe: merged.recipe.clone(),
        holders: merged
            .holders
            .iter()
            .zip(state.holders.iter())
            .map(|(h, (_, since))| HolderView {
                node: h.id.clone(),
                session: holder_client(&h.id),
                since_ms: *since,
                held_ms: 0,
                mode: h.mode,
                watchers: 0,
                reentrancy: h.reentrancy,
                lease: None,
                version: None,
            })
            .collect(),
        waiters: merged
            .waiters
            .iter()
            .zip(state.waiters.iter())
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
            })
            .collect(),
        watchers: merged.watchers,
        herd: merged.watchers > 1,
        acquisitions: state.history.acquisitions,
        releases: state.history.releases,
        changed_ms: state.changed_ms,
        expires_at_ms: merged.expires_at_ms,
        flags: merged.flags.clone(),
        permits_available: merged.lock.as_ref().and_then(|l| l.permits_available),
        permits_total: merged.lock.as_ref().and_then(|l| l.permits_total),
        fencing_token: fencing,
        deadline_ms: merged.lock.as_ref().and_then(|l| l.deadline_ms),
        redlock: merged.redlock.clone(),
        usual_hold_ms: super::usual_hold_of(&state.history),
        lease_ms: state.lease_ms,
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
    use super::holder_client;

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
