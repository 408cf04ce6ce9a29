//! An etcd source as the aggregator keeps it: the mirror of the keys under its prefixes at the
//! last revision applied, the leases' TTLs, and its locks in the neutral [`Ledger`]. Only the
//! locks a change touches are re-decoded, one revision at a time: a watch answer that catches up
//! carries many, and a key put and deleted among them is booked as the hold it was. Release causes: a key deleted while its lease lived
//! was `released`; one whose lease is gone at about the time it was due to run out, or whose
//! lease went with it, `lease_expired`; `forced` when an operator's release was announced.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use lockscope_model::etcd::{decode_one, lock_path_of, EtcdKv, EtcdLock, EtcdRecipe};
use lockscope_model::redis::display_bytes;
use lockscope_model::wire::{
    Backend, HolderView, LeaseView, LockView, ReleaseCause, SessionView, SourceView, WaiterView,
};

use super::{EtcdEvent, EtcdSourceConfig, EtcdUpdate, LeaseTtl};
use lockscope_core::aggregate::ledger::{Ledger, Observed, Outcome, Seen};
use lockscope_core::aggregate::{LedgerContext, LockOp};

/// A lease as last read.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LeaseSeen {
    granted_s: i64,
    /// When it runs out unless kept alive, as of the last read (epoch ms).
    expires_at_ms: i64,
}

/// A lease whose expiry was due within this much of its key's deletion (at most a quarter of
/// its TTL: a lease kept alive is renewed a third of the way in) expired.
pub(crate) const EXPIRY_SLACK_MS: i64 = 1_500;

pub struct EtcdSourceState {
    pub config: Arc<EtcdSourceConfig>,
    pub view: SourceView,
    kvs: BTreeMap<Vec<u8>, EtcdKv>,
    /// Raw lock path → its keys (a mutex's queue, or the one lease key).
    members: HashMap<Vec<u8>, BTreeSet<Vec<u8>>>,
    /// The latest decode of each current lock, by displayed path.
    decoded: BTreeMap<String, EtcdLock>,
    leases: HashMap<i64, LeaseSeen>,
    revision: i64,
    resyncs: u64,
    pub ledger: Ledger,
}

impl EtcdSourceState {
    pub fn new(config: EtcdSourceConfig, max_labels: usize) -> Self {
        EtcdSourceState {
            view: SourceView::connecting(&config.name, Backend::Etcd),
            ledger: Ledger::new(&config.name, max_labels, |source, path| {
                lockscope_model::id::lock_id(source, &format!("/{}", path.trim_start_matches('/')))
            }),
            config: Arc::new(config),
            kvs: BTreeMap::new(),
            members: HashMap::new(),
            decoded: BTreeMap::new(),
            leases: HashMap::new(),
            revision: 0,
            resyncs: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The last revision applied (bootstrap, watch events).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }

    /// Applies one update from the source's collector.
    pub fn apply(&mut self, update: EtcdUpdate, cx: &mut LedgerContext<'_>) {
        match update {
            EtcdUpdate::Status {
                up,
                error,
                last_seen_ms,
            } => {
                if self.view.up != up || self.view.error != error {
                    self.view.set_up(up, last_seen_ms.unwrap_or(cx.now));
                    self.view.error = error;
                    cx.source_changed = true;
                }
            }
            EtcdUpdate::Snapshot {
                revision,
                kvs,
                leases,
                at_ms,
            } => {
                let bootstrap = !self.view.synced;
                let fresh: BTreeMap<Vec<u8>, EtcdKv> =
                    kvs.into_iter().map(|kv| (kv.key.clone(), kv)).collect();
                let mut touched: BTreeSet<Vec<u8>> = BTreeSet::new();
                let mut deleted: HashMap<String, i64> = HashMap::new();
                for (key, kv) in &self.kvs {
                    if fresh.get(key) != Some(kv) {
                        touched.extend(lock_path_of(key, kv.lease));
                        if !fresh.contains_key(key) {
                            deleted.insert(display_bytes(key), kv.lease);
                        }
                    }
                }
                for (key, kv) in &fresh {
                    if self.kvs.get(key) != Some(kv) {
                        touched.extend(lock_path_of(key, kv.lease));
                    }
                }
                self.members.clear();
                for (key, kv) in &fresh {
                    if let Some(path) = lock_path_of(key, kv.lease) {
                        self.members.entry(path).or_default().insert(key.clone());
                    }
                }
                let causes = self.causes(&deleted, &leases, cx.now);
                self.kvs = fresh;
                self.read_leases(&leases, at_ms);
                self.revision = revision;
                self.resyncs += 1;
                self.view.synced = true;
                self.view.last_sync_ms = Some(cx.now);
                cx.source_changed = true;
                self.recompute_with(&touched, &causes, bootstrap, cx);
            }
            EtcdUpdate::Events {
                revision,
                events,
                leases,
                at_ms,
            } => {
                // One revision at a time: a watch answer that catches up (after a reconnect, or
                // when lockscope fell behind) carries many revisions, and a key put and deleted
                // among them held the lock in between. Decoding once after the whole answer
                // would never see that hold, nor count it.
                let mut events = events.into_iter().peekable();
                let mut all_touched: BTreeSet<Vec<u8>> = BTreeSet::new();
                while let Some(first) = events.next() {
                    let at = first.revision();
                    let mut group = vec![first];
                    while let Some(next) = events.next_if(|e| e.revision() == at) {
                        group.push(next);
                    }
                    let (touched, deleted) = self.apply_revision(group);
                    // Before the TTLs read after the deletions replace what was known.
                    let causes = self.causes(&deleted, &leases, cx.now);
                    if events.peek().is_some() {
                        self.recompute_with(&touched, &causes, false, cx);
                        all_touched.extend(touched);
                    } else {
                        // The last revision: the TTLs read after the answer are taken in, and
                        // every lock the answer touched is published with them.
                        self.read_leases(&leases, at_ms);
                        all_touched.extend(touched);
                        self.recompute_with(&all_touched, &causes, false, cx);
                    }
                }
                self.revision = self.revision.max(revision);
            }
            EtcdUpdate::Leases { at_ms, leases } => {
                let before = self.leases.clone();
                self.read_leases(&leases, at_ms);
                if before != self.leases {
                    // Only views whose leases moved change.
                    let changed: BTreeSet<i64> = self
                        .leases
                        .iter()
                        .filter(|(id, seen)| before.get(id) != Some(seen))
                        .map(|(id, _)| *id)
                        .chain(
                            before
                                .keys()
                                .filter(|id| !self.leases.contains_key(id))
                                .copied(),
                        )
                        .collect();
                    let paths: Vec<String> = self
                        .decoded
                        .iter()
                        .filter(|(_, lock)| {
                            lock.holders
                                .iter()
                                .chain(&lock.waiters)
                                .any(|p| changed.contains(&p.lease))
                        })
                        .map(|(path, _)| path.clone())
                        .collect();
                    for path in paths {
                        self.publish_view(&path, cx);
                    }
                }
            }
        }
        self.view.locks = self.ledger.locks.len();
        self.view.nodes = self.kvs.len();
    }

    /// Applies the changes of one revision to the mirror: the lock paths they touched, and the
    /// keys they deleted (displayed) with their leases.
    fn apply_revision(
        &mut self,
        events: Vec<EtcdEvent>,
    ) -> (BTreeSet<Vec<u8>>, HashMap<String, i64>) {
        let mut deleted: HashMap<String, i64> = HashMap::new();
        let mut touched: BTreeSet<Vec<u8>> = BTreeSet::new();
        for event in events {
            match event {
                EtcdEvent::Put(kv) => {
                    if let Some(old) = self.kvs.get(&kv.key) {
                        if let Some(path) = lock_path_of(&old.key, old.lease) {
                            self.unlink(&path, &kv.key);
                            touched.insert(path);
                        }
                    }
                    if let Some(path) = lock_path_of(&kv.key, kv.lease) {
                        self.members
                            .entry(path.clone())
                            .or_default()
                            .insert(kv.key.clone());
                        touched.insert(path);
                    }
                    deleted.remove(&display_bytes(&kv.key));
                    self.kvs.insert(kv.key.clone(), kv);
                }
                EtcdEvent::Delete {
                    key, prev, lease, ..
                } => {
                    let old = self.kvs.remove(&key).or(prev);
                    let lease = old.as_ref().map_or(lease, |o| o.lease);
                    if let Some(path) = lock_path_of(&key, lease) {
                        self.unlink(&path, &key);
                        touched.insert(path);
                    }
                    deleted.insert(display_bytes(&key), lease);
                }
            }
        }
        (touched, deleted)
    }

    fn unlink(&mut self, path: &[u8], key: &[u8]) {
        if let Some(keys) = self.members.get_mut(path) {
            keys.remove(key);
            if keys.is_empty() {
                self.members.remove(path);
            }
        }
    }

    /// Remembers TTLs read at `at_ms`. A lease's expiry moves only when it was kept alive (by
    /// more than the second TTLs are counted in), so views do not change at every read.
    fn read_leases(&mut self, leases: &[(i64, Option<LeaseTtl>)], at_ms: i64) {
        for (id, ttl) in leases {
            match ttl {
                Some(ttl) => {
                    let expires_at_ms = at_ms + ttl.left_s * 1000;
                    let seen = self.leases.entry(*id).or_insert(LeaseSeen {
                        granted_s: ttl.granted_s,
                        expires_at_ms,
                    });
                    seen.granted_s = ttl.granted_s;
                    if (expires_at_ms - seen.expires_at_ms).abs() > 1_000 {
                        seen.expires_at_ms = expires_at_ms;
                    }
                }
                None => {
                    self.leases.remove(id);
                }
            }
        }
        // Forget leases no key is bound to any more.
        let in_use: BTreeSet<i64> = self.kvs.values().map(|kv| kv.lease).collect();
        self.leases.retain(|id, _| in_use.contains(id));
    }

    /// Why each deleted key (displayed → its lease) went.
    fn causes(
        &self,
        deleted: &HashMap<String, i64>,
        ttls: &[(i64, Option<LeaseTtl>)],
        now: i64,
    ) -> HashMap<String, ReleaseCause> {
        let alive: HashMap<i64, bool> = ttls.iter().map(|(id, t)| (*id, t.is_some())).collect();
        deleted
            .iter()
            .map(|(key, lease)| {
                let cause = if *lease == 0 || alive.get(lease).copied().unwrap_or(true) {
                    ReleaseCause::Released
                } else {
                    // The lease is gone: it ran out, or its client revoked it (closing its
                    // session, which releases). Only one due about now ran out.
                    match self.leases.get(lease) {
                        Some(seen)
                            if seen.expires_at_ms
                                <= now + EXPIRY_SLACK_MS.min(seen.granted_s * 250) =>
                        {
                            ReleaseCause::LeaseExpired
                        }
                        Some(_) => ReleaseCause::Released,
                        None => ReleaseCause::LeaseExpired,
                    }
                };
                (key.clone(), cause)
            })
            .collect()
    }

    /// Re-decodes the locks at `touched` and books what changed.
    fn recompute_with(
        &mut self,
        touched: &BTreeSet<Vec<u8>>,
        causes: &HashMap<String, ReleaseCause>,
        bootstrap: bool,
        cx: &mut LedgerContext<'_>,
    ) {
        for raw_path in touched {
            let lock = self
                .members
                .get(raw_path)
                .and_then(|keys| decode_one(raw_path, keys.iter().filter_map(|k| self.kvs.get(k))));
            let path = display_bytes(raw_path);
            let observed = lock.as_ref().map(|lock| Observed {
                holders: lock
                    .holders
                    .iter()
                    .map(|p| seen(p.key.clone(), p.lease))
                    .collect(),
                waiters: lock
                    .waiters
                    .iter()
                    .map(|p| seen(p.key.clone(), p.lease))
                    .collect(),
            });
            let mut cause = |holder: &str| {
                causes
                    .get(holder)
                    .copied()
                    .unwrap_or(ReleaseCause::Released)
            };
            let mut booking = cx.booking();
            let outcome = self.ledger.observe(
                &path,
                observed.as_ref(),
                bootstrap,
                &mut cause,
                &mut booking,
            );
            match (outcome, lock) {
                (Outcome::Gone(id), _) => {
                    self.decoded.remove(&path);
                    cx.lock_ops.push(LockOp::Removed(id));
                    cx.source_changed = true;
                }
                (Outcome::Changed | Outcome::Same, Some(lock)) => {
                    self.decoded.insert(path.clone(), lock);
                    self.publish_view(&path, cx);
                }
                _ => {}
            }
        }
    }

    /// Builds the lock's view and queues it when it differs from the one published.
    fn publish_view(&mut self, path: &str, cx: &mut LedgerContext<'_>) {
        let Some(lock) = self.decoded.get(path) else {
            return;
        };
        let Some(entry) = self.ledger.locks.get(path) else {
            return;
        };
        let lease_view = |lease: i64| -> Option<Box<LeaseView>> {
            (lease != 0).then(|| {
                let seen = self.leases.get(&lease);
                Box::new(LeaseView {
                    id: format!("{lease:x}"),
                    granted_s: seen.map(|s| s.granted_s),
                    expires_at_ms: seen.map(|s| s.expires_at_ms),
                })
            })
        };
        let people = entry.people();
        let holders: Vec<HolderView> = lock
            .holders
            .iter()
            .zip(&people.holders)
            .map(|(p, (_, since))| HolderView {
                node: p.key.clone(),
                session: session_of(p.lease),
                since_ms: *since,
                held_ms: 0,
                mode: None,
                // Exactly one contender (the next in the queue) watches a mutex holder.
                watchers: u32::from(!lock.waiters.is_empty()),
                reentrancy: None,
                lease: lease_view(p.lease),
                // The value a single-key lease lock or an election proposal holds: its owner
                // (ShedLock's: the host in it).
                identity: match lock.recipe {
                    EtcdRecipe::ShedLock => p
                        .value
                        .as_deref()
                        .and_then(|v| lockscope_model::shedlock::parse_value(v.as_bytes()))
                        .and_then(|v| lockscope_model::clip::identity_text(&v.host)),
                    _ => p
                        .value
                        .as_deref()
                        .and_then(lockscope_model::clip::identity_text),
                },
                version: Some(format!("{}/{}", p.create_revision, p.mod_revision)),
                statement: None,
            })
            .collect();
        let waiters: Vec<WaiterView> = lock
            .waiters
            .iter()
            .zip(&people.waiters)
            .enumerate()
            .map(|(i, (p, (_, since)))| WaiterView {
                node: p.key.clone(),
                session: session_of(p.lease),
                since_ms: *since,
                waited_ms: 0,
                position: i as u32 + 1,
                mode: None,
                watches: p.waits_on.clone(),
                deadline_ms: None,
                lease: lease_view(p.lease),
                identity: p
                    .value
                    .as_deref()
                    .and_then(lockscope_model::clip::identity_text),
                statement: None,
            })
            .collect();
        let holder_lease = lock.holders.first().and_then(|h| self.leases.get(&h.lease));
        let mut flags = Vec::new();
        if lock.recipe == EtcdRecipe::LeaseKey {
            // Contenders of a single-key lock watch the key and retry: etcd does not show them.
            flags.push("waiters_not_stored".to_string());
        }
        if lock.recipe == EtcdRecipe::ShedLock {
            // A job that finds it taken skips its run: nothing ever waits.
            flags.push("waiters_not_visible".to_string());
        }
        let view = LockView {
            id: self.ledger.id_of(path),
            source: self.config.name.clone(),
            backend: Backend::Etcd,
            path: path.to_string(),
            recipe: lock.recipe.as_str().to_string(),
            watchers: holders.iter().map(|h| h.watchers).sum(),
            holders,
            waiters,
            herd: false,
            acquisitions: entry.history().acquisitions,
            releases: entry.history().releases,
            changed_ms: entry.changed_ms,
            expires_at_ms: holder_lease.map(|l| l.expires_at_ms),
            lease_ms: holder_lease.map(|l| l.granted_s * 1000),
            usual_hold_ms: lockscope_core::aggregate::usual_hold_of(entry.history()),
            flags,
            ..LockView::default()
        };
        self.ledger.publish(path, view, cx.lock_ops);
    }

    /// Leases as sessions: who holds and waits through each.
    pub fn sessions(&self) -> Vec<SessionView> {
        let by_lease = self.ledger.by_session(&self.decoded, |lock: &EtcdLock| {
            (
                lock.holders.iter().map(|h| h.lease).collect(),
                lock.waiters.iter().map(|w| w.lease).collect(),
            )
        });
        by_lease
            .into_iter()
            .filter(|(lease, _)| *lease != 0)
            .map(|(lease, (holds, waits))| {
                let seen = self.leases.get(&lease);
                SessionView {
                    source: self.config.name.clone(),
                    kind: lockscope_model::wire::SessionKind::EtcdLease,
                    session: session_of(lease),
                    timeout_ms: seen.map(|s| (s.granted_s.max(0) as u64) * 1000),
                    connected: seen.is_some(),
                    server: None,
                    expires_at_ms: seen.map(|s| s.expires_at_ms),
                    holds,
                    waits,
                    connection: None,
                    process: None,
                }
            })
            .collect()
    }
}

/// A lease as a session id: hex, as etcdctl prints it.
fn session_of(lease: i64) -> String {
    if lease == 0 {
        String::new()
    } else {
        format!("{lease:x}")
    }
}

fn seen(key: String, lease: i64) -> Seen {
    Seen {
        id: key,
        session: session_of(lease),
        since_ms: None,
    }
}
