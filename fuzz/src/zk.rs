//! `zk_tree` and `zk_incremental`: sequences of node changes applied to a `zk::ZkTree`, then the
//! ZooKeeper decoders.
//!
//! A change names its node by a parent (the root, a node named earlier, or any text) and a child
//! name: a word from real layouts (`locks`, `leases`, …), a sequential name built like each
//! client builds it (`lock-`, `_c_<uuid>-lock-`, `_c_<uuid>-__READ__`, `<host>-R-`,
//! `<hex>__lock__`, … and a 10-digit suffix), a kazoo semaphore's `-__lock__` sibling, or any
//! text; or it is any text as a whole path (empty segments, no leading `/`, very long, U+FFFD).
//!
//! `zk_tree` applies every change as the mirror is asked to (upserts and subtree removals of
//! any path), then decodes every node. Checks: `parse_sequence` and `containers_for_change`
//! never panic on any string; every holder and waiter is a node of the tree, under the lock's
//! container (or its `leases` child, or its `-__lock__` sibling); waiters are in sequence order,
//! and for queues the holders come before the waiters in that order; and for well-formed paths
//! (what ZooKeeper accepts) each participant's changes re-decode the lock's container
//! (`containers_for_change(participant)` contains it) and the tree's child lists match its nodes.
//!
//! `zk_incremental` applies only what ZooKeeper allows (create under an existing, non-ephemeral
//! parent; set data of a node; delete a leaf) and after each change re-decodes only
//! `containers_for_change_in` of the changed node, as the aggregator does; the locks so kept must
//! equal a full decode of the tree after every change.

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use lockscope_model::zk::{
    containers_for_change, containers_for_change_in, decode_container, is_internal, join,
    parse_sequence, split_parent, DecodedLock, NodeMeta, Recipe, ZkTree,
};

use crate::{pick, Text};

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Input {
    pub ops: Vec<Op>,
    /// Configured `max_leases` for every semaphore (`None`: not configured).
    pub max_leases: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Op {
    /// Create the node, or (when it exists) change its data.
    Upsert {
        at: Place,
        meta: Meta,
    },
    Remove(Target),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Place {
    Child {
        parent: Target,
        name: Name,
    },
    /// `<node>-__lock__`: the contender lock of a kazoo semaphore at `<node>`.
    KazooLockOf(Target),
    Path(Text),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Target {
    Root,
    /// A node named by an earlier change (by index, modulo how many there were).
    Earlier(u16),
    Path(Text),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Name {
    Word(u8),
    Sequential { prefix: Prefix, seq: u32 },
    Raw(Text),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Prefix {
    Word(u8),
    /// Curator's protected prefix `_c_<uuid>-` before a word.
    Curator {
        uuid: u8,
        word: u8,
    },
    /// kazoo's `<uuid hex>__lock__` / `__rlock__`.
    Kazoo {
        uuid: u8,
        read: bool,
    },
    Raw(Text),
}

const WORDS: &[&str] = &[
    "locks",
    "leases",
    "distributed",
    "lock",
    "orders",
    "semaphore",
    "rw",
    "batch-host-3",
    "5",
    "a",
];

const PREFIXES: &[&str] = &[
    "lock-",
    "temp",
    "lease-",
    "__READ__",
    "__WRIT__",
    "-__READ__",
    "batch-host-3-R-",
    "batch-host-3-W-",
    "orders-",
    "",
];

const UUIDS: &[&str] = &[
    "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    "9f0c6a2e-7d61-4c8e-9d3b-5a1f2e3d4c5b",
    "1b4e28ba2fa111d2883f0016d3cca427",
];

#[derive(Debug, Clone, Copy, PartialEq, Arbitrary)]
pub struct Meta {
    pub ctime: i64,
    pub owner: Owner,
    pub version: i32,
    pub data_len: i32,
    pub data: Data,
}

/// What a node's data holds: nothing read, a number (a kazoo Semaphore's size), a kazoo lease
/// record (well formed or not), an identity, or bytes that are none of these.
#[derive(Debug, Clone, Copy, PartialEq, Arbitrary)]
pub enum Data {
    None,
    Number(i64),
    Lease {
        version: u8,
        holder: u8,
        end: i64,
    },
    Identity(u8),
    Bytes([u8; 6]),
    /// A ShedLock node's lock-until instant (`YYYY-MM-DDTHH:MM:SS.mmmZ`).
    Until(i64),
}

impl Data {
    fn bytes(&self) -> Option<Vec<u8>> {
        match *self {
            Data::None => None,
            Data::Number(n) => Some(n.to_string().into_bytes()),
            Data::Lease {
                version,
                holder,
                end,
            } => Some(
                format!(
                    "{{\"version\": {}, \"holder\": \"{}\", \"end\": \"{}\"}}",
                    version % 3,
                    pick(WORDS, holder),
                    lockscope_model::zk::format_naive_utc(end.clamp(-1 << 50, 1 << 50)),
                )
                .into_bytes(),
            ),
            Data::Identity(i) => Some(pick(WORDS, i).as_bytes().to_vec()),
            Data::Bytes(b) => Some(b.to_vec()),
            Data::Until(ms) => Some(
                lockscope_model::shedlock::format_instant(ms.clamp(-1 << 50, 1 << 50)).into_bytes(),
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Arbitrary)]
pub enum Owner {
    Persistent,
    Session(u8),
    Raw(i64),
}

impl Meta {
    pub fn node(&self) -> NodeMeta {
        NodeMeta {
            ctime_ms: self.ctime,
            ephemeral_owner: match self.owner {
                Owner::Persistent => 0,
                Owner::Session(s) => 0x1000_0000_0000 + i64::from(s % 8),
                Owner::Raw(v) => v,
            },
            czxid: self.ctime,
            version: self.version,
            data_len: self.data_len,
            data: self.data.bytes().map(Into::into),
        }
    }
}

impl Name {
    fn text(&self) -> String {
        match self {
            Name::Word(w) => pick(WORDS, *w).to_string(),
            Name::Sequential { prefix, seq } => format!("{}{seq:010}", prefix.text()),
            Name::Raw(Text(t)) => t.clone(),
        }
    }
}

impl Prefix {
    fn text(&self) -> String {
        match self {
            Prefix::Word(w) => pick(PREFIXES, *w).to_string(),
            Prefix::Curator { uuid, word } => {
                format!("_c_{}-{}", pick(UUIDS, *uuid), pick(PREFIXES, *word))
            }
            Prefix::Kazoo { uuid, read } => format!(
                "{}{}",
                pick(UUIDS, *uuid).replace('-', ""),
                if *read { "__rlock__" } else { "__lock__" }
            ),
            Prefix::Raw(Text(t)) => t.clone(),
        }
    }
}

/// Paths named so far, for [`Target::Earlier`].
struct Names(Vec<String>);

impl Names {
    fn target(&self, t: &Target) -> String {
        match t {
            Target::Root => "/".to_string(),
            Target::Earlier(i) if !self.0.is_empty() => {
                self.0[usize::from(*i) % self.0.len()].clone()
            }
            Target::Earlier(_) => "/".to_string(),
            Target::Path(Text(p)) => p.clone(),
        }
    }

    fn place(&self, p: &Place) -> String {
        match p {
            Place::Child { parent, name } => join(&self.target(parent), &name.text()),
            Place::KazooLockOf(t) => format!("{}-__lock__", self.target(t)),
            Place::Path(Text(p)) => p.clone(),
        }
    }
}

/// What ZooKeeper accepts as a path: `/`, or `/`-separated non-empty names, none `.` or `..`,
/// no NUL (the server also refuses a few control and private-use characters; none of them matters
/// to the decoders).
pub fn well_formed(path: &str) -> bool {
    path == "/"
        || (path.starts_with('/')
            && !path.ends_with('/')
            && !path.contains('\0')
            && path[1..]
                .split('/')
                .all(|name| !name.is_empty() && name != "." && name != ".."))
}

fn limits(max: Option<u32>) -> impl Fn(&str) -> Option<u32> {
    move |_: &str| max
}

pub fn run_tree(data: &[u8]) {
    if let Some(input) = crate::input::<Input>(data) {
        crate::show(&input);
        let _ = check_tree(&input);
    }
}

pub fn run_incremental(data: &[u8]) {
    if let Some(input) = crate::input::<Input>(data) {
        crate::show(&input);
        check_incremental(&input);
    }
}

/// Every node's decoded locks, keyed by container (sorted, so runs are reproducible).
fn decode_all(tree: &ZkTree, max: Option<u32>) -> BTreeMap<String, Vec<DecodedLock>> {
    let mut paths: Vec<String> = tree.iter().map(|(p, _)| p).collect();
    paths.sort_unstable();
    paths
        .into_iter()
        .filter_map(|p| {
            let locks = decode_container(tree, &p, &limits(max));
            (!locks.is_empty()).then_some((p, locks))
        })
        .collect()
}

/// Applies the changes, checks, and answers every node's locks.
pub fn check_tree(input: &Input) -> BTreeMap<String, Vec<DecodedLock>> {
    let mut tree = ZkTree::new();
    let mut names = Names(Vec::new());
    // The child lists are only checked when every path ever used is one ZooKeeper accepts: the
    // mirror files `//a` under `/` as `a`, like `/a`, so a malformed path (which no server
    // reports) can unlist a well-formed node.
    let mut all_well_formed = true;
    for op in input.ops.iter().take(512) {
        let path = match op {
            Op::Upsert { at, meta } => {
                let path = names.place(at);
                tree.upsert(&path, meta.node());
                path
            }
            Op::Remove(t) => {
                let path = names.target(t);
                tree.remove(&path);
                path
            }
        };
        let _ = parse_sequence(&path);
        if let Some((_, name)) = split_parent(&path) {
            let _ = parse_sequence(name);
        }
        let _ = containers_for_change_in(&tree, &path);
        let containers = containers_for_change(&path);
        assert_eq!(
            containers.first(),
            Some(&path),
            "the changed node is not re-decoded"
        );
        all_well_formed &= well_formed(&path);
        names.0.push(path);
    }
    if all_well_formed {
        check_child_lists(&tree);
    }
    let all = decode_all(&tree, input.max_leases);
    for (container, locks) in &all {
        assert!(!is_internal(&tree, container));
        for lock in locks {
            check_lock(&tree, container, lock, all_well_formed);
        }
    }
    all
}

/// Each listed child is a node and each node (but `/`) is listed under its parent.
fn check_child_lists(tree: &ZkTree) {
    for (path, _) in tree.iter() {
        let path = path.as_str();
        for name in tree.children(path) {
            let child = join(path, name);
            assert!(
                tree.contains(&child),
                "child {child:?} listed but not a node"
            );
        }
        if let Some((parent, name)) = split_parent(path) {
            assert!(
                tree.children(parent).any(|n| n == name),
                "node {path:?} is not listed under {parent:?}"
            );
        }
    }
}

fn check_lock(tree: &ZkTree, container: &str, lock: &DecodedLock, well_formed: bool) {
    assert_eq!(lock.container, container);
    assert!(
        lock.path == container || split_parent(&lock.path).is_some_and(|(p, _)| p == container),
        "lock path {:?} is neither its container {container:?} nor a child of it",
        lock.path
    );
    let kazoo_queue = format!("{container}-__lock__");
    let leases = join(container, "leases");
    for p in lock.holders.iter().chain(&lock.waiters) {
        let meta = tree
            .get(&p.node)
            .unwrap_or_else(|| panic!("participant {:?} is not a node", p.node));
        assert_eq!(p.session, meta.ephemeral_owner);
        assert_eq!(p.ctime_ms, meta.ctime_ms);
        let parent = split_parent(&p.node).map(|(parent, _)| parent);
        let under = p.node == container
            || parent == Some(container)
            || parent == Some(leases.as_str())
            || parent == Some(kazoo_queue.as_str());
        assert!(under, "participant {:?} is not under {container:?}", p.node);
        if let Some(seq) = p.seq {
            let name = split_parent(&p.node).map_or("", |(_, n)| n);
            assert_eq!(parse_sequence(name).map(|(_, s)| s), Some(seq));
        }
        if well_formed {
            assert!(
                containers_for_change(&p.node)
                    .iter()
                    .any(|c| c == container),
                "a change of {:?} does not re-decode its lock's container {container:?}",
                p.node
            );
        }
    }
    let seqs: Vec<u64> = lock
        .waiters
        .iter()
        .map(|w| w.seq.expect("a waiter without a sequence number"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] <= w[1]),
        "waiters out of order: {seqs:?}"
    );
    match lock.recipe {
        Recipe::Exclusive => {
            assert_eq!(lock.holders.len(), 1);
            assert!(lock.waiters.is_empty());
            assert_eq!(lock.holders[0].node, container);
        }
        Recipe::KazooSemaphore => {}
        // A persistent leaf holding a ShedLock instant: the node itself, alone.
        Recipe::ShedLock => {
            assert_eq!(lock.holders.len(), 1);
            assert!(lock.waiters.is_empty());
            assert_eq!(lock.holders[0].node, container);
            assert_eq!(lock.holders[0].session, 0);
        }
        // One persistent record holds; kazoo's short lock around a take queues by sequence.
        Recipe::KazooLease => {
            assert_eq!(lock.holders.len(), 1);
            assert_eq!(
                lock.holders[0].node,
                lockscope_model::zk::join(container, lockscope_model::zk::KAZOO_LEASE_NODE)
            );
            assert!(lock.waiters.iter().all(|w| w.seq.is_some()));
        }
        recipe => {
            let all: Vec<u64> = lock
                .holders
                .iter()
                .chain(&lock.waiters)
                .map(|p| p.seq.expect("a queue member without a sequence number"))
                .collect();
            assert!(
                all.windows(2).all(|w| w[0] <= w[1]),
                "queue out of order: {all:?}"
            );
            if recipe != Recipe::CuratorSemaphore {
                assert!(
                    !lock.holders.is_empty(),
                    "a queue with members but no holder"
                );
            }
        }
    }
    if lock.recipe == Recipe::CuratorSemaphore {
        let max = lock.max_leases.expect("a semaphore without max_leases") as usize;
        assert!(lock.holders.len() <= max);
        assert!(lock.waiters.is_empty() || lock.holders.len() == max);
    }
}

/// The ZooKeeper-faithful version of an op: `None` when the server would refuse it.
fn apply_faithful(tree: &mut ZkTree, names: &Names, op: &Op) -> Option<String> {
    match op {
        Op::Upsert { at, meta } => {
            let path = names.place(at);
            if !well_formed(&path) || path == "/" {
                return None;
            }
            let (parent, _) = split_parent(&path)?;
            let parent_ok = parent == "/" || tree.get(parent).is_some_and(|m| !m.is_ephemeral());
            if !parent_ok {
                return None;
            }
            let mut node = meta.node();
            if let Some(old) = tree.get(&path) {
                // setData: only the data (version, length, number) changes.
                node.ctime_ms = old.ctime_ms;
                node.ephemeral_owner = old.ephemeral_owner;
            }
            tree.upsert(&path, node);
            Some(path)
        }
        Op::Remove(t) => {
            let path = names.target(t);
            // The server refuses a path that is not absolute and canonical (`orders`, `/a//b`,
            // `/a/`) as it does on a create; the tree's lookup would find `/orders` for it.
            if !well_formed(&path) || !tree.contains(&path) || tree.child_count(&path) > 0 {
                return None;
            }
            tree.remove(&path);
            Some(path)
        }
    }
}

pub fn check_incremental(input: &Input) {
    let mut tree = ZkTree::new();
    let mut names = Names(Vec::new());
    let mut kept: BTreeMap<String, Vec<DecodedLock>> = BTreeMap::new();
    for op in input.ops.iter().take(32) {
        let Some(path) = apply_faithful(&mut tree, &names, op) else {
            continue;
        };
        for container in containers_for_change_in(&tree, &path) {
            let locks = decode_container(&tree, &container, &limits(input.max_leases));
            if locks.is_empty() {
                kept.remove(&container);
            } else {
                kept.insert(container, locks);
            }
        }
        names.0.push(path.clone());
        let full = decode_all(&tree, input.max_leases);
        assert!(
            kept == full,
            "after a change of {path:?}, re-decoding {:?} leaves {:#?}\nbut a full decode gives {:#?}",
            containers_for_change_in(&tree, &path),
            diff(&kept, &full),
            diff(&full, &kept),
        );
    }
}

/// The entries of `a` that `b` lacks or has otherwise.
fn diff<'a>(
    a: &'a BTreeMap<String, Vec<DecodedLock>>,
    b: &BTreeMap<String, Vec<DecodedLock>>,
) -> Vec<(&'a String, &'a Vec<DecodedLock>)> {
    a.iter().filter(|(k, v)| b.get(*k) != Some(*v)).collect()
}
