//! `etcd_decode`: lists of etcd keys (as a `Range` or `Watch` returns them) through
//! `etcd::decode`, `etcd::decode_one` and `etcd::lock_path_of`, then a sequence of puts and
//! deletes applied to a mirror of the keys, re-decoding only the touched locks as the
//! aggregator does.
//!
//! A key is built like the Go client builds its `concurrency.Mutex` / `Election` keys
//! (`<name>/<%x of its own lease>`, the name from real layouts or any bytes), as such a key
//! with another lease's hex (so the suffix mismatches), as a real key name, or as any bytes;
//! leases are none, a few real and boundary ids (negative ones included, as Go's `%x` prints
//! them), or any `i64`; revisions a few small numbers (ties) or any `i64`; values empty, real
//! proposals and owners (16 raw bytes, text that reads as an escape), or any bytes. Keys repeat
//! often (the last one given wins).
//!
//! Checks, besides "no panic":
//! * decoding is deterministic and depends only on the last entry of each key (decoding the
//!   deduplicated keys in reverse gives the same locks);
//! * locks are sorted by path, paths are distinct, and every path, key and value is
//!   `display_bytes` of its raw bytes and reads back through `parse_display_bytes`;
//! * every participant is an input key (its last entry) with a lease, with that entry's lease,
//!   revisions and value (`None` exactly when empty); no key is in two locks, or twice in one;
//! * a mutex or election is exactly the keys `<path>/<%x of their lease>`: one holder with the
//!   lowest `create_revision` (ties by key), waiters sorted by (`create_revision`, key), the
//!   holder waiting on nothing and each waiter on the participant just before it; an election
//!   exactly when a value is non-empty;
//! * a lease key is one holder, its own key, no waiters, not of that shape; every leased key is
//!   in a lock, except a lease key whose path a mutex or election has taken;
//! * `lock_path_of` names each participant's lock and is `None` without a lease;
//!   `decode_one(path)` over all keys, and over only the keys `lock_path_of` puts under `path`,
//!   is the lock `decode` gives for `path` (for every path, and `None` for other probes: any
//!   bytes and the first keys given);
//! * incremental: after each put or delete, re-decoding with `decode_one` only the old and new
//!   `lock_path_of` of the changed key keeps exactly the locks a full `decode` gives.

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Arbitrary;
use lockscope_model::clip::Clipped;
use lockscope_model::etcd::{decode, decode_one, lock_path_of, EtcdKv, EtcdLock, EtcdRecipe};
use lockscope_model::redis::{display_bytes, parse_display_bytes};

use crate::{pick, Blob};

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Input {
    /// What a `Range` (and watch events after it) returned.
    pub kvs: Vec<Kv>,
    /// Any path to decode on its own.
    pub probe: Blob,
    /// Changes applied afterwards, one at a time.
    pub ops: Vec<Op>,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Kv {
    pub key: Key,
    pub value: Value,
    pub create_revision: Rev,
    pub mod_revision: Rev,
    pub version: u8,
    pub lease: Lease,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Key {
    /// `<name>/<%x of this key's lease>`: a Go mutex or election key.
    Queued(u8),
    /// The same under a name of any bytes.
    QueuedRaw(Blob),
    /// `<name>/<%x of another lease>`.
    QueuedOther {
        name: u8,
        lease: Lease,
    },
    /// One of [`KEYS`].
    Word(u8),
    Raw(Blob),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Lease {
    None,
    /// One of [`LEASES`].
    Few(u8),
    Raw(i64),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Rev {
    /// 0…7: revisions tie often.
    Few(u8),
    Raw(i64),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Value {
    Empty,
    /// One of [`VALUES`].
    Known(u8),
    Raw(Blob),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Op {
    Put(Kv),
    /// Delete the key at this index (modulo their number) among the current keys, in key order.
    Delete(u16),
}

/// Mutex and election names from `shared/LOCK_LAYOUTS.md`, and odd ones.
pub const NAMES: &[&[u8]] = &[
    b"/locks/job",
    b"/election/leader",
    b"",
    b"/jobs/",
    b"/locks",
    b"/locks/job/2a",
    b"/bin\xff",
    b"/x\\x41",
];

/// Real keys (the seen etcdctl lock key, a single-key lease lock), keys a group's name or key
/// collides with, and odd ones.
pub const KEYS: &[&[u8]] = &[
    b"/locks/job",
    b"/locks/job/694da2082de77e06",
    b"/service/locks/billing",
    b"/locks/job/2a",
    b"/694da2082de77e06",
    b"/2a",
    b"/locks/job/-2a",
    b"/",
    b"",
    b"/jobs/",
    b"/bin\xff",
];

/// The seen lease (0x694da2082de77e06), small ids, and the boundaries of Go's `%x`.
pub const LEASES: &[i64] = &[
    7_587_899_103_202_737_670,
    0x2a,
    0x1,
    0x10,
    -0x2a,
    i64::MIN,
    i64::MAX,
    -1,
];

/// Election proposals and lease-lock owners (16 random bytes, as seen), and odd ones.
pub const VALUES: &[&[u8]] = &[
    b"node-a:2379",
    b"node-b:2379",
    b"\xa5\x80\xcf\x1e\x6d\xbc\x2b\x4a\x99\xf8\x37\xd6\x65\x04\x93\x72",
    b"\\x41",
    b"\xff",
    b"ADDED:2025-06-01T10:00:00.123Z@app-node-1",
];

impl Lease {
    pub fn id(&self) -> i64 {
        match self {
            Lease::None => 0,
            Lease::Few(i) => pick(LEASES, *i),
            Lease::Raw(v) => *v,
        }
    }
}

impl Rev {
    pub fn value(&self) -> i64 {
        match self {
            Rev::Few(v) => i64::from(v % 8),
            Rev::Raw(v) => *v,
        }
    }
}

impl Value {
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Value::Empty => Vec::new(),
            Value::Known(i) => pick(VALUES, *i).to_vec(),
            Value::Raw(Blob(b)) => b.clone(),
        }
    }
}

/// Go's `fmt.Sprintf("%x", id)` for an `int64` (written here apart from the decoder's, through
/// `i128`, so the two are checked against each other).
pub fn go_hex(id: i64) -> String {
    let v = i128::from(id);
    if v < 0 {
        format!("-{:x}", -v)
    } else {
        format!("{v:x}")
    }
}

fn queue_key(name: &[u8], lease: i64) -> Vec<u8> {
    let mut key = name.to_vec();
    key.push(b'/');
    key.extend_from_slice(go_hex(lease).as_bytes());
    key
}

impl Kv {
    pub fn kv(&self) -> EtcdKv {
        let lease = self.lease.id();
        let key = match &self.key {
            Key::Queued(i) => queue_key(pick(NAMES, *i), lease),
            Key::QueuedRaw(Blob(name)) => queue_key(name, lease),
            Key::QueuedOther { name, lease } => queue_key(pick(NAMES, *name), lease.id()),
            Key::Word(i) => pick(KEYS, *i).to_vec(),
            Key::Raw(Blob(b)) => b.clone(),
        };
        EtcdKv {
            key,
            value: Clipped::of(self.value.bytes()),
            create_revision: self.create_revision.value(),
            mod_revision: self.mod_revision.value(),
            version: i64::from(self.version),
            lease,
        }
    }
}

pub fn run(data: &[u8]) {
    if let Some(input) = crate::input::<Input>(data) {
        crate::show(&input);
        check(&input);
    }
}

/// The keys as etcd holds them after applying `kvs` in order: the last entry of each.
fn mirror(kvs: &[EtcdKv]) -> BTreeMap<Vec<u8>, EtcdKv> {
    kvs.iter().map(|kv| (kv.key.clone(), kv.clone())).collect()
}

/// Checks every invariant on `kvs`; returns the locks by raw path.
pub fn check(input: &Input) -> BTreeMap<Vec<u8>, EtcdLock> {
    let kvs: Vec<EtcdKv> = input.kvs.iter().map(Kv::kv).collect();
    let locks = check_decode(&kvs, &input.probe.0);
    check_incremental(&kvs, &input.ops, locks.clone());
    locks
}

fn check_decode(kvs: &[EtcdKv], probe: &[u8]) -> BTreeMap<Vec<u8>, EtcdLock> {
    let locks = decode(kvs);
    assert_eq!(locks, decode(kvs), "decode is not deterministic");
    let latest = mirror(kvs);
    let deduplicated: Vec<EtcdKv> = latest.values().rev().cloned().collect();
    assert_eq!(
        locks,
        decode(&deduplicated),
        "decode depends on more than the last entry of each key"
    );

    for pair in locks.windows(2) {
        assert!(
            pair[0].path < pair[1].path,
            "locks not sorted by path, or a path twice: {:?}, {:?}",
            pair[0].path,
            pair[1].path
        );
    }
    let by_path: BTreeMap<Vec<u8>, EtcdLock> = locks
        .iter()
        .map(|l| (l.raw_path.clone(), l.clone()))
        .collect();
    assert_eq!(by_path.len(), locks.len(), "two locks with one raw path");

    let mut seen: BTreeSet<&[u8]> = BTreeSet::new();
    for lock in &locks {
        check_lock(lock, &latest);
        for p in lock.holders.iter().chain(&lock.waiters) {
            assert!(
                seen.insert(&p.raw_key),
                "key {:?} is in two locks (or twice in one)",
                p.key
            );
        }
    }

    // Every leased key is somewhere; a lease key only misses when a group took its path.
    for kv in latest.values() {
        let path = lock_path_of(&kv.key, kv.lease);
        if kv.lease == 0 {
            assert_eq!(path, None, "a key without a lease has a lock path");
            continue;
        }
        let path = path.expect("a leased key without a lock path");
        let lock = by_path
            .get(&path)
            .unwrap_or_else(|| panic!("leased key {:?} is in no lock", display_bytes(&kv.key)));
        if !seen.contains(kv.key.as_slice()) {
            assert!(
                !matches!(lock.recipe, EtcdRecipe::LeaseKey | EtcdRecipe::ShedLock)
                    && kv.key == path,
                "leased key {:?} left out of {:?}",
                display_bytes(&kv.key),
                lock.path
            );
        }
    }

    // decode_one over everything, and over only the keys lock_path_of puts under the path.
    for (path, lock) in &by_path {
        assert_eq!(
            decode_one(path, kvs.iter()).as_ref(),
            Some(lock),
            "decode_one({:?}) is not decode's lock",
            lock.path
        );
        let own: Vec<&EtcdKv> = latest
            .values()
            .filter(|kv| lock_path_of(&kv.key, kv.lease).as_ref() == Some(path))
            .collect();
        assert_eq!(
            decode_one(path, own.into_iter()).as_ref(),
            Some(lock),
            "decode_one({:?}) over its own keys is not decode's lock",
            lock.path
        );
    }
    // The probe, and the first keys (all of them would make each run quadratic).
    let mut probes: Vec<&[u8]> = vec![probe];
    probes.extend(kvs.iter().take(32).map(|kv| kv.key.as_slice()));
    for p in probes {
        assert_eq!(
            decode_one(p, kvs.iter()).as_ref(),
            by_path.get(p),
            "decode_one({:?}) disagrees with decode",
            display_bytes(p)
        );
    }
    by_path
}

/// Asserts that `shown` is `raw` displayed, and reads back to it.
fn assert_round_trip(what: &str, raw: &[u8], shown: &str) {
    assert_eq!(
        shown,
        display_bytes(raw),
        "{what}: not display_bytes of its raw bytes"
    );
    assert_eq!(
        parse_display_bytes(shown),
        raw,
        "{what} {shown:?} does not read back to its raw bytes"
    );
}

/// Whether `key` is `<path>/<%x of lease>`.
fn is_queue_key(key: &[u8], path: &[u8], lease: i64) -> bool {
    lease != 0 && key == queue_key(path, lease).as_slice()
}

fn check_lock(lock: &EtcdLock, latest: &BTreeMap<Vec<u8>, EtcdKv>) {
    assert_round_trip("lock path", &lock.raw_path, &lock.path);
    assert_eq!(lock.holders.len(), 1, "{:?}: not one holder", lock.path);
    for p in lock.holders.iter().chain(&lock.waiters) {
        assert_round_trip("participant key", &p.raw_key, &p.key);
        let kv = latest
            .get(&p.raw_key)
            .unwrap_or_else(|| panic!("participant {:?} is no input key", p.key));
        assert_ne!(kv.lease, 0, "participant {:?} has no lease", p.key);
        assert_eq!(
            (p.lease, p.create_revision, p.mod_revision),
            (kv.lease, kv.create_revision, kv.mod_revision),
            "participant {:?} is not its key's last entry",
            p.key
        );
        match &p.value {
            None => assert!(kv.value.is_empty(), "{:?}: a value not shown", p.key),
            Some(v) => {
                assert!(!kv.value.is_empty(), "{:?}: an empty value shown", p.key);
                // A value past the shown bound is its head and a marker, which says its size.
                if kv.value.is_cut() {
                    assert_eq!(v, &kv.value.display(), "{:?}: a cut value", p.key);
                } else {
                    assert_round_trip("value", &kv.value.head, v);
                }
            }
        }
        assert_eq!(
            lock_path_of(&p.raw_key, p.lease).as_ref(),
            Some(&lock.raw_path),
            "lock_path_of({:?}) does not name its lock {:?}",
            p.key,
            lock.path
        );
    }
    let holder = &lock.holders[0];
    assert_eq!(holder.waits_on, None, "{:?}: the holder waits", lock.path);
    match lock.recipe {
        EtcdRecipe::LeaseKey | EtcdRecipe::ShedLock => {
            let value = latest
                .get(holder.raw_key.as_slice())
                .map(|kv| kv.value.clone())
                .unwrap_or_default();
            assert_eq!(
                lock.recipe == EtcdRecipe::ShedLock,
                !value.is_cut() && lockscope_model::shedlock::parse_value(&value.head).is_some(),
                "{:?}: ShedLock exactly when the value is ShedLock's",
                lock.path
            );
            assert!(
                lock.waiters.is_empty(),
                "{:?}: a lease key with waiters",
                lock.path
            );
            assert_eq!(
                holder.raw_key, lock.raw_path,
                "a lease key's path is not its key"
            );
            let queued = holder
                .raw_key
                .iter()
                .rposition(|b| *b == b'/')
                .is_some_and(|cut| {
                    is_queue_key(&holder.raw_key, &holder.raw_key[..cut], holder.lease)
                });
            assert!(
                !queued,
                "{:?}: a Go mutex key read as a lease key",
                holder.key
            );
        }
        EtcdRecipe::Mutex | EtcdRecipe::Election => {
            // Exactly the keys `<path>/<%x of their lease>`.
            let members: BTreeSet<&[u8]> = latest
                .values()
                .filter(|kv| is_queue_key(&kv.key, &lock.raw_path, kv.lease))
                .map(|kv| kv.key.as_slice())
                .collect();
            let got: BTreeSet<&[u8]> = lock
                .holders
                .iter()
                .chain(&lock.waiters)
                .map(|p| p.raw_key.as_slice())
                .collect();
            assert_eq!(got, members, "{:?}: not the keys of its queue", lock.path);
            let order =
                |p: &lockscope_model::etcd::EtcdParticipant| (p.create_revision, p.raw_key.clone());
            let mut before = holder;
            for w in &lock.waiters {
                assert!(
                    order(before) < order(w),
                    "{:?}: {:?} is not after {:?} in create_revision order",
                    lock.path,
                    w.key,
                    before.key
                );
                assert_eq!(
                    w.waits_on.as_deref(),
                    Some(before.key.as_str()),
                    "{:?}: waiter {:?} does not wait on the one before it",
                    lock.path,
                    w.key
                );
                before = w;
            }
            let any_value = lock
                .holders
                .iter()
                .chain(&lock.waiters)
                .any(|p| p.value.is_some());
            assert_eq!(
                lock.recipe == EtcdRecipe::Election,
                any_value,
                "{:?}: an election exactly when a proposal is set",
                lock.path
            );
        }
    }
}

/// The aggregator's way: after each change re-decode only the changed key's old and new lock.
fn check_incremental(kvs: &[EtcdKv], ops: &[Op], mut locks: BTreeMap<Vec<u8>, EtcdLock>) {
    let mut state = mirror(kvs);
    for op in ops {
        let (old, new) = match op {
            Op::Put(kv) => {
                let kv = kv.kv();
                let new = lock_path_of(&kv.key, kv.lease);
                let old = state
                    .insert(kv.key.clone(), kv)
                    .and_then(|was| lock_path_of(&was.key, was.lease));
                (old, new)
            }
            Op::Delete(i) => {
                if state.is_empty() {
                    continue;
                }
                let key = state
                    .keys()
                    .nth(usize::from(*i) % state.len())
                    .cloned()
                    .expect("an index within the keys");
                let was = state.remove(&key).expect("a key just listed");
                (lock_path_of(&was.key, was.lease), None)
            }
        };
        for path in old.into_iter().chain(new) {
            match decode_one(&path, state.values()) {
                Some(lock) => locks.insert(path, lock),
                None => locks.remove(&path),
            };
        }
        let all: Vec<EtcdKv> = state.values().cloned().collect();
        let full: BTreeMap<Vec<u8>, EtcdLock> = decode(&all)
            .into_iter()
            .map(|l| (l.raw_path.clone(), l))
            .collect();
        assert_eq!(
            locks, full,
            "re-decoding the changed key's locks differs from decoding everything after {op:?}"
        );
    }
}
