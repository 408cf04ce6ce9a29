//! etcd lock layouts: what the keys under a watched prefix mean as locks.
//!
//! The collector reads every key under a prefix (a `Range`, then a `Watch` from the range's
//! revision) and hands them to [`decode`]; after a change it re-decodes only the lock the changed
//! key belongs to ([`lock_path_of`], [`decode_one`]). Locks are told by structure alone
//! (`shared/LOCK_LAYOUTS.md`):
//!
//! * the Go client's `concurrency.Mutex` (and so `etcdctl lock <name>`) and
//!   `concurrency.Election` (`etcdctl elect <name>`) write one key per contender,
//!   `<name>/<lease id>` with the lease id in Go's `%x` (lower-case hex, no leading zeros; a
//!   negative id, which an etcd server never grants, as `-` and the hex of its magnitude), bound
//!   to the contender's session lease. Such keys are grouped by `<name>` (the key up to its last
//!   `/`: the name the client was given, so a client given `/jobs/` writes `/jobs//<hex>` and the
//!   lock is `/jobs/`). The key with the lowest `create_revision` holds the mutex (leads the
//!   election); the others wait in `create_revision` order, each watching the one just before
//!   it (no herd). A mutex key's value is empty; an election key holds the candidate's proposal,
//!   so a group with any non-empty value is an [`EtcdRecipe::Election`];
//! * any other key with a lease is a single-key lease lock ([`EtcdRecipe::LeaseKey`]): the key is
//!   the lock, its writer the holder (the value names the owner, maybe as raw bytes). Its
//!   contenders watch the key and retry, so they are not stored and there are no waiters;
//!   ShedLock's etcd provider writes such a key, `shedlock:<env>:<name>` valued
//!   `ADDED:<time>@<host>` on a lease nothing keeps alive: [`EtcdRecipe::ShedLock`], told by
//!   its value;
//! * keys without a lease are not locks (configuration, counters, …).
//!
//! Odd input is decoded, never rejected:
//!
//! * duplicate keys (a range and watch events concatenated): **the last one wins**, as if the
//!   entries were applied in order, so a key whose lease changed belongs only to its new lock;
//! * a group's path and a lease key can be the same bytes (a leased key `/a` beside keys
//!   `/a/<hex>`): **the group wins** the path, and the lease key is not shown, because a lock
//!   is named by its path ([`decode_one`]). etcd clients do not mix the two under one name;
//! * equal `create_revision`s (one txn creating two keys: no etcd client does) are ordered by
//!   key; zero and negative revisions are ordered like any other;
//! * empty keys, keys that are only `/<hex>` (a group named by the empty string) and bytes that
//!   are not UTF-8 are shown with [`display_bytes`], which [`parse_display_bytes`] reverses.
//!
//! Everything is linear or `n log n` in the number of keys (hash maps, one sort per lock).
//!
//! [`parse_display_bytes`]: crate::redis::parse_display_bytes

use std::collections::HashMap;

use crate::clip::Clipped;
use crate::redis::display_bytes;

/// One key as a `Range` or a `Watch` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EtcdKv {
    pub key: Vec<u8>,
    /// The value, kept to its first [`crate::clip::SHOWN_BYTES`] bytes (a client may write
    /// megabytes; the length says how much there was).
    pub value: Clipped,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    /// The lease the key is bound to; 0 for none.
    pub lease: i64,
}

/// The recipe an etcd lock was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EtcdRecipe {
    /// Go `concurrency.Mutex` / `etcdctl lock`: `<name>/<lease hex>` keys with empty values.
    Mutex,
    /// Go `concurrency.Election` / `etcdctl elect`: the same keys, valued with proposals.
    Election,
    /// One key with a lease, held by its writer; contenders retry.
    LeaseKey,
    /// ShedLock's etcd provider: a lease key valued `ADDED:<time>@<host>`
    /// ([`crate::shedlock::parse_value`]); a job finding it taken skips its run.
    ShedLock,
}

impl EtcdRecipe {
    pub const ALL: [EtcdRecipe; 4] = [
        EtcdRecipe::Mutex,
        EtcdRecipe::Election,
        EtcdRecipe::LeaseKey,
        EtcdRecipe::ShedLock,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EtcdRecipe::Mutex => "etcd_mutex",
            EtcdRecipe::Election => "etcd_election",
            EtcdRecipe::LeaseKey => "etcd_lease_key",
            EtcdRecipe::ShedLock => "shedlock",
        }
    }
}

/// One key taking part in a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdParticipant {
    /// The key, shown with [`display_bytes`].
    pub key: String,
    pub raw_key: Vec<u8>,
    /// The lease (the client's session) the key is bound to.
    pub lease: i64,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// The value (election proposal, lease-lock owner) shown with [`Clipped::display`] (binary
    /// as `\xNN`, past [`crate::clip::SHOWN_BYTES`] cut with its size); `None` when empty.
    pub value: Option<String>,
    /// The displayed key of the participant this one watches (the one just before it in the
    /// queue); `None` for holders.
    pub waits_on: Option<String>,
}

/// A lock read out of the keys under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdLock {
    /// The lock's name, shown with [`display_bytes`]: a mutex's or election's name (its keys'
    /// common part, without the `/` the client adds), or a lease lock's key.
    pub path: String,
    pub raw_path: Vec<u8>,
    pub recipe: EtcdRecipe,
    /// The mutex holder, the election leader or the lease key: at most one.
    pub holders: Vec<EtcdParticipant>,
    /// In queue order (`create_revision`).
    pub waiters: Vec<EtcdParticipant>,
}

/// Go's `fmt.Sprintf("%x", id)` of an `int64`: a sign, then the magnitude's hex.
fn go_hex(id: i64) -> String {
    if id < 0 {
        format!("-{:x}", id.unsigned_abs())
    } else {
        format!("{id:x}")
    }
}

/// What a leased key is part of.
enum Role<'a> {
    /// A contender of the mutex or election with this name.
    Queue(&'a [u8]),
    /// A lease lock of its own (the key).
    Single(&'a [u8]),
}

fn role(key: &[u8], lease: i64) -> Option<Role<'_>> {
    if lease == 0 {
        return None;
    }
    if let Some(cut) = key.iter().rposition(|b| *b == b'/') {
        if key[cut + 1..] == *go_hex(lease).as_bytes() {
            return Some(Role::Queue(&key[..cut]));
        }
    }
    Some(Role::Single(key))
}

/// The path of the lock a key belongs to (`None`: a key without a lease is no lock): the name
/// of its mutex or election, or the key itself. When a key changes, re-decode its lock with
/// [`decode_one`]; when a put changes a key's lease, the lock of its old lease too.
pub fn lock_path_of(key: &[u8], lease: i64) -> Option<Vec<u8>> {
    role(key, lease).map(|role| match role {
        Role::Queue(name) | Role::Single(name) => name.to_vec(),
    })
}

/// One entry per key, the last one given.
fn latest<'a>(kvs: impl Iterator<Item = &'a EtcdKv>) -> HashMap<&'a [u8], &'a EtcdKv> {
    let mut out = HashMap::new();
    for kv in kvs {
        out.insert(kv.key.as_slice(), kv);
    }
    out
}

fn participant(kv: &EtcdKv, waits_on: Option<String>) -> EtcdParticipant {
    EtcdParticipant {
        key: display_bytes(&kv.key),
        raw_key: kv.key.clone(),
        lease: kv.lease,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        value: (!kv.value.is_empty()).then(|| kv.value.display()),
        waits_on,
    }
}

/// A mutex or election from its keys (at least one, distinct keys).
fn queue_lock(name: &[u8], mut members: Vec<&EtcdKv>) -> EtcdLock {
    members.sort_unstable_by(|a, b| (a.create_revision, &a.key).cmp(&(b.create_revision, &b.key)));
    let recipe = if members.iter().any(|kv| !kv.value.is_empty()) {
        EtcdRecipe::Election
    } else {
        EtcdRecipe::Mutex
    };
    let mut holders = Vec::with_capacity(1);
    let mut waiters = Vec::with_capacity(members.len().saturating_sub(1));
    let mut before: Option<String> = None;
    for kv in members {
        let p = participant(kv, before.take());
        before = Some(p.key.clone());
        if holders.is_empty() {
            holders.push(p);
        } else {
            waiters.push(p);
        }
    }
    EtcdLock {
        path: display_bytes(name),
        raw_path: name.to_vec(),
        recipe,
        holders,
        waiters,
    }
}

fn lease_lock(kv: &EtcdKv) -> EtcdLock {
    let shedlock = !kv.value.is_cut() && crate::shedlock::parse_value(&kv.value.head).is_some();
    EtcdLock {
        path: display_bytes(&kv.key),
        raw_path: kv.key.clone(),
        recipe: if shedlock {
            EtcdRecipe::ShedLock
        } else {
            EtcdRecipe::LeaseKey
        },
        holders: vec![participant(kv, None)],
        waiters: Vec::new(),
    }
}

/// Every lock among the keys under one watched prefix, sorted by path.
pub fn decode(kvs: &[EtcdKv]) -> Vec<EtcdLock> {
    let mut queues: HashMap<&[u8], Vec<&EtcdKv>> = HashMap::new();
    let mut singles: Vec<&EtcdKv> = Vec::new();
    for kv in latest(kvs.iter()).into_values() {
        match role(&kv.key, kv.lease) {
            Some(Role::Queue(name)) => queues.entry(name).or_default().push(kv),
            Some(Role::Single(_)) => singles.push(kv),
            None => {}
        }
    }
    let mut locks: Vec<EtcdLock> = singles
        .into_iter()
        .filter(|kv| !queues.contains_key(kv.key.as_slice()))
        .map(lease_lock)
        .collect();
    locks.extend(
        queues
            .into_iter()
            .map(|(name, members)| queue_lock(name, members)),
    );
    locks.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    locks
}

/// The lock at `path` among `kvs` by the rules of [`decode`] (the same lock `decode` gives for
/// that path), or `None`. `kvs` may hold keys of other locks, and duplicates (the last wins).
pub fn decode_one<'a>(path: &[u8], kvs: impl Iterator<Item = &'a EtcdKv>) -> Option<EtcdLock> {
    let mut members = Vec::new();
    let mut single = None;
    for kv in latest(kvs).into_values() {
        match role(&kv.key, kv.lease) {
            Some(Role::Queue(name)) if name == path => members.push(kv),
            Some(Role::Single(key)) if key == path => single = Some(kv),
            _ => {}
        }
    }
    if members.is_empty() {
        single.map(lease_lock)
    } else {
        Some(queue_lock(path, members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::parse_display_bytes;

    /// The lease of the key seen on etcd 3.4.23 (`shared/LOCK_LAYOUTS.md`).
    const SEEN_LEASE: i64 = 7587899103202737670;

    fn kv(key: &[u8], value: &[u8], create_revision: i64, lease: i64) -> EtcdKv {
        EtcdKv {
            key: key.to_vec(),
            value: Clipped::of_slice(value),
            create_revision,
            mod_revision: create_revision,
            version: 1,
            lease,
        }
    }

    /// A Go mutex/election key: `<name>/<lease hex>`.
    fn queued(name: &str, value: &[u8], create_revision: i64, lease: i64) -> EtcdKv {
        kv(
            format!("{name}/{}", go_hex(lease)).as_bytes(),
            value,
            create_revision,
            lease,
        )
    }

    fn keys(ps: &[EtcdParticipant]) -> Vec<&str> {
        ps.iter().map(|p| p.key.as_str()).collect()
    }

    fn paths(locks: &[EtcdLock]) -> Vec<&str> {
        locks.iter().map(|l| l.path.as_str()).collect()
    }

    /// `decode_one` and `lock_path_of` agree with `decode` for every lock.
    fn assert_consistent(kvs: &[EtcdKv]) -> Vec<EtcdLock> {
        let locks = decode(kvs);
        for lock in &locks {
            assert_eq!(
                decode_one(&lock.raw_path, kvs.iter()).as_ref(),
                Some(lock),
                "{}",
                lock.path
            );
            for p in lock.holders.iter().chain(&lock.waiters) {
                assert_eq!(
                    lock_path_of(&p.raw_key, p.lease).as_deref(),
                    Some(lock.raw_path.as_slice())
                );
                assert_eq!(parse_display_bytes(&p.key), p.raw_key);
            }
            assert_eq!(parse_display_bytes(&lock.path), lock.raw_path);
        }
        locks
    }

    #[test]
    fn the_seen_etcdctl_lock_key() {
        assert_eq!(SEEN_LEASE, 0x694da2082de77e06);
        let kvs = vec![kv(b"/locks/job/694da2082de77e06", b"", 5, SEEN_LEASE)];
        let locks = assert_consistent(&kvs);
        assert_eq!(locks.len(), 1);
        let lock = &locks[0];
        assert_eq!(lock.path, "/locks/job");
        assert_eq!(lock.raw_path, b"/locks/job");
        assert_eq!(lock.recipe, EtcdRecipe::Mutex);
        assert_eq!(lock.recipe.as_str(), "etcd_mutex");
        assert_eq!(
            lock.holders,
            vec![EtcdParticipant {
                key: "/locks/job/694da2082de77e06".into(),
                raw_key: b"/locks/job/694da2082de77e06".to_vec(),
                lease: SEEN_LEASE,
                create_revision: 5,
                mod_revision: 5,
                value: None,
                waits_on: None,
            }]
        );
        assert!(lock.waiters.is_empty());
        assert_eq!(
            lock_path_of(b"/locks/job/694da2082de77e06", SEEN_LEASE),
            Some(b"/locks/job".to_vec())
        );
    }

    #[test]
    fn waiters_queue_by_create_revision_each_watching_the_one_before() {
        // Given out of order, with revision gaps (other keys were written in between) and a
        // waiter whose key was since rewritten (mod_revision moves, create_revision does not).
        let mut rewritten = queued("/locks/job", b"", 40, 0x2a);
        rewritten.mod_revision = 90;
        let kvs = vec![
            queued("/locks/job", b"", 77, 0x7587),
            rewritten,
            queued("/locks/job", b"", 12, SEEN_LEASE),
            queued("/locks/job", b"", 41, 0x1),
            queued("/locks/other", b"", 3, 0x99),
        ];
        let locks = assert_consistent(&kvs);
        assert_eq!(paths(&locks), ["/locks/job", "/locks/other"]);
        let job = &locks[0];
        assert_eq!(job.recipe, EtcdRecipe::Mutex);
        assert_eq!(keys(&job.holders), ["/locks/job/694da2082de77e06"]);
        assert_eq!(
            keys(&job.waiters),
            ["/locks/job/2a", "/locks/job/1", "/locks/job/7587"]
        );
        let waits_on: Vec<Option<&str>> =
            job.waiters.iter().map(|w| w.waits_on.as_deref()).collect();
        assert_eq!(
            waits_on,
            [
                Some("/locks/job/694da2082de77e06"),
                Some("/locks/job/2a"),
                Some("/locks/job/1"),
            ]
        );
        assert_eq!(job.waiters[0].mod_revision, 90);
        assert_eq!(job.holders[0].waits_on, None);
    }

    #[test]
    fn an_election_leads_with_its_lowest_key_and_shows_proposals() {
        let kvs = vec![
            queued("/election/leader", b"node-b:2379", 20, 0x22),
            queued("/election/leader", b"node-a:2379", 10, 0x11),
            queued("/election/leader", b"node-c:2379", 30, 0x33),
        ];
        let locks = assert_consistent(&kvs);
        assert_eq!(locks.len(), 1);
        let e = &locks[0];
        assert_eq!(e.path, "/election/leader");
        assert_eq!(e.recipe, EtcdRecipe::Election);
        assert_eq!(e.recipe.as_str(), "etcd_election");
        assert_eq!(e.holders[0].value.as_deref(), Some("node-a:2379"));
        assert_eq!(
            keys(&e.waiters),
            ["/election/leader/22", "/election/leader/33"]
        );
        assert_eq!(e.waiters[1].value.as_deref(), Some("node-c:2379"));
        assert_eq!(
            e.waiters[1].waits_on.as_deref(),
            Some("/election/leader/22")
        );
        // One proposal is enough: an election whose leader proposed "" is still an election.
        let kvs = vec![queued("/e", b"", 1, 0x1), queued("/e", b"standby", 2, 0x2)];
        let e = &assert_consistent(&kvs)[0];
        assert_eq!(e.recipe, EtcdRecipe::Election);
        assert_eq!(e.holders[0].value, None);
    }

    #[test]
    fn a_lease_key_with_a_binary_owner_round_trips() {
        let owner = b"\xa5\x80\xcf\x1e\x6d\xbc\x2b\x4a\x99\xf8\x37\xd6\x65\x04\x93\x72";
        let kvs = vec![kv(b"/service/locks/billing", owner, 8, 0x3e8)];
        let locks = assert_consistent(&kvs);
        assert_eq!(locks.len(), 1);
        let lock = &locks[0];
        assert_eq!(lock.recipe, EtcdRecipe::LeaseKey);
        assert_eq!(lock.recipe.as_str(), "etcd_lease_key");
        assert_eq!(lock.path, "/service/locks/billing");
        assert!(lock.waiters.is_empty());
        let holder = &lock.holders[0];
        assert_eq!(holder.key, "/service/locks/billing");
        assert_eq!(holder.lease, 0x3e8);
        let shown = holder.value.as_deref().expect("an owner");
        assert_eq!(parse_display_bytes(shown), owner);
        assert!(shown.starts_with("\\xa5\\x80"), "{shown}");
        // An empty owner is no value.
        let lock = &decode(&[kv(b"/l", b"", 1, 7)])[0];
        assert_eq!(lock.holders[0].value, None);
        // A megabyte owner is shown cut, with its size.
        let lock = &decode(&[kv(b"/l", &vec![b'o'; 1 << 20], 1, 7)])[0];
        let shown = lock.holders[0].value.as_deref().expect("an owner");
        assert!(
            shown.len() < crate::clip::SHOWN_BYTES + 32,
            "{}",
            shown.len()
        );
        assert!(shown.ends_with("…[1048576 bytes]"), "{}", &shown[4000..]);
    }

    #[test]
    fn a_hex_suffix_of_another_lease_is_a_lease_key() {
        let kvs = vec![
            // The suffix names another lease.
            kv(b"/locks/job/694da2082de77e06", b"", 5, 0x694d),
            // Go's %x has no leading zeros and no capitals.
            kv(b"/locks/a/0ff", b"", 6, 0xff),
            kv(b"/locks/b/FF", b"", 7, 0xff),
            // No `/` before the hex: not what the Go client writes.
            kv(b"ff", b"", 8, 0xff),
        ];
        let locks = assert_consistent(&kvs);
        assert_eq!(
            paths(&locks),
            [
                "/locks/a/0ff",
                "/locks/b/FF",
                "/locks/job/694da2082de77e06",
                "ff"
            ]
        );
        assert!(locks.iter().all(|l| l.recipe == EtcdRecipe::LeaseKey));
        assert_eq!(
            lock_path_of(b"/locks/job/694da2082de77e06", 0x694d),
            Some(b"/locks/job/694da2082de77e06".to_vec())
        );
    }

    #[test]
    fn keys_without_a_lease_are_not_locks() {
        let kvs = vec![
            kv(b"/config/max", b"5", 1, 0),
            kv(b"/locks/job/694da2082de77e06", b"", 2, 0),
            kv(b"/locks/job/0", b"", 3, 0),
            kv(b"", b"", 4, 0),
        ];
        assert!(assert_consistent(&kvs).is_empty());
        for k in &kvs {
            assert_eq!(lock_path_of(&k.key, 0), None);
            assert_eq!(decode_one(&k.key, kvs.iter()), None);
        }
        assert_eq!(decode_one(b"/locks/job", kvs.iter()), None);
    }

    #[test]
    fn duplicate_keys_the_last_one_wins() {
        let kvs = vec![
            queued("/m", b"", 3, 0x1),
            // A later put of the same key: new revision, same lease.
            EtcdKv {
                mod_revision: 9,
                version: 2,
                ..queued("/m", b"", 3, 0x1)
            },
            queued("/m", b"", 5, 0x2),
            // The key of lease 0x2 again, now without a lease: no longer a contender.
            kv(b"/m/2", b"", 5, 0),
            // A lease key given twice with different owners.
            kv(b"/l", b"first", 7, 0x5),
            kv(b"/l", b"second", 7, 0x5),
        ];
        let locks = assert_consistent(&kvs);
        assert_eq!(paths(&locks), ["/l", "/m"]);
        assert_eq!(locks[0].holders[0].value.as_deref(), Some("second"));
        assert_eq!(locks[1].holders[0].mod_revision, 9);
        assert!(locks[1].waiters.is_empty());
        // A key rebound to a lease that matches its suffix joins the queue.
        let kvs = vec![kv(b"/m/2", b"", 5, 0x3), kv(b"/m/2", b"", 5, 0x2)];
        let locks = assert_consistent(&kvs);
        assert_eq!(paths(&locks), ["/m"]);
        assert_eq!(locks[0].recipe, EtcdRecipe::Mutex);
    }

    #[test]
    fn a_group_wins_its_path_over_a_lease_key_of_that_name() {
        let kvs = vec![
            kv(b"/a", b"owner", 1, 0x9),
            queued("/a", b"", 2, 0x10),
            kv(b"/a/sub", b"x", 3, 0x9),
        ];
        let locks = assert_consistent(&kvs);
        assert_eq!(paths(&locks), ["/a", "/a/sub"]);
        assert_eq!(locks[0].recipe, EtcdRecipe::Mutex);
        assert_eq!(keys(&locks[0].holders), ["/a/10"]);
        // Without the group, the lease key is its own lock again.
        let lock = decode_one(b"/a", kvs[..1].iter()).expect("the lease key");
        assert_eq!(lock.recipe, EtcdRecipe::LeaseKey);
        assert_eq!(lock_path_of(b"/a", 0x9), Some(b"/a".to_vec()));
    }

    #[test]
    fn odd_keys_leases_and_revisions() {
        let kvs = vec![
            // A key that is only `/<hex>`: a group named by the empty string.
            kv(b"/694da2082de77e06", b"", 0, SEEN_LEASE),
            // The empty key with a lease: a lease key at the same (empty) path, shadowed.
            kv(b"", b"v", -3, 0x1),
            // Negative leases, as Go's %x prints them.
            kv(b"/neg/-2a", b"", -5, -0x2a),
            kv(b"/neg/-8000000000000000", b"", -9, i64::MIN),
            // Two's complement is not Go's %x.
            kv(b"/neg2/ffffffffffffffd6", b"", 1, -0x2a),
            // Bytes that are not UTF-8, and text that reads as an escape.
            kv(b"/bin\xff\x00/7", b"\xfe", 4, 0x7),
            kv(b"/x\\x41/8", b"", 4, 0x8),
            // A client given `/jobs/` writes `/jobs//<hex>`.
            kv(b"/jobs//b", b"", i64::MAX, 0xb),
            kv(b"/jobs//c", b"", i64::MIN, 0xc),
        ];
        let locks = assert_consistent(&kvs);
        assert_eq!(
            paths(&locks),
            [
                "",
                "/bin\\xff\u{0}",
                "/jobs/",
                "/neg",
                "/neg2/ffffffffffffffd6",
                "/x\\x5cx41"
            ]
        );
        let by_path = |p: &str| {
            locks
                .iter()
                .find(|l| l.path == p)
                .unwrap_or_else(|| panic!("no lock {p}"))
        };
        assert_eq!(by_path("").recipe, EtcdRecipe::Mutex);
        assert_eq!(keys(&by_path("").holders), ["/694da2082de77e06"]);
        let neg = by_path("/neg");
        assert_eq!(keys(&neg.holders), ["/neg/-8000000000000000"]);
        assert_eq!(keys(&neg.waiters), ["/neg/-2a"]);
        assert_eq!(
            by_path("/neg2/ffffffffffffffd6").recipe,
            EtcdRecipe::LeaseKey
        );
        let bin = by_path("/bin\\xff\u{0}");
        assert_eq!(bin.recipe, EtcdRecipe::Election);
        assert_eq!(bin.raw_path, b"/bin\xff\x00");
        assert_eq!(bin.holders[0].value.as_deref(), Some("\\xfe"));
        assert_eq!(keys(&by_path("/jobs/").holders), ["/jobs//c"]);
        assert_eq!(by_path("/x\\x5cx41").raw_path, b"/x\\x41");
        // Equal revisions are ordered by key.
        let kvs = vec![queued("/t", b"", 4, 0xb), queued("/t", b"", 4, 0xa)];
        let t = &assert_consistent(&kvs)[0];
        assert_eq!(keys(&t.holders), ["/t/a"]);
        assert_eq!(t.waiters[0].waits_on.as_deref(), Some("/t/a"));
    }

    #[test]
    fn decode_one_picks_its_lock_out_of_everything() {
        let kvs = vec![
            queued("/locks/job", b"", 12, 0x1),
            queued("/locks/job", b"", 13, 0x2),
            kv(b"/locks/job/extra", b"", 14, 0x3),
            queued("/locks/jobs", b"", 15, 0x4),
            kv(b"/locks/job2", b"x", 16, 0x5),
        ];
        let job = decode_one(b"/locks/job", kvs.iter()).expect("the mutex");
        assert_eq!(keys(&job.holders), ["/locks/job/1"]);
        assert_eq!(keys(&job.waiters), ["/locks/job/2"]);
        assert_eq!(decode_one(b"/locks", kvs.iter()), None);
        assert_eq!(decode_one(b"/locks/job/", kvs.iter()), None);
        assert_eq!(
            decode_one(b"/locks/job/extra", kvs.iter()).map(|l| l.recipe),
            Some(EtcdRecipe::LeaseKey)
        );
        // Only the keys lock_path_of puts under a path are needed to decode it.
        let mine: Vec<&EtcdKv> = kvs
            .iter()
            .filter(|k| lock_path_of(&k.key, k.lease).as_deref() == Some(b"/locks/job"))
            .collect();
        assert_eq!(decode_one(b"/locks/job", mine.into_iter()), Some(job));
        assert_eq!(assert_consistent(&kvs).len(), 4);
    }

    #[test]
    fn huge_inputs_stay_fast() {
        // One queue of 100,000 contenders and 100,000 lease keys, in reverse order.
        let n = 100_000_i64;
        let mut kvs: Vec<EtcdKv> = (1..=n).rev().map(|i| queued("/big", b"", i, i)).collect();
        kvs.extend((1..=n).map(|i| kv(format!("/l/{i}").as_bytes(), b"o", i, n + i)));
        let locks = decode(&kvs);
        assert_eq!(locks.len(), 1 + n as usize);
        let big = locks.iter().find(|l| l.path == "/big").expect("the queue");
        assert_eq!(keys(&big.holders), ["/big/1"]);
        assert_eq!(big.waiters.len(), n as usize - 1);
        assert_eq!(big.waiters.last().map(|w| w.create_revision), Some(n));
        assert_eq!(decode_one(b"/big", kvs.iter()).as_ref(), Some(big));
    }
}
