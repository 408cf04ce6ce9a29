//! ZooKeeper lock recipes: a mirror of the watched subtrees and the decoders that read locks
//! out of it.
//!
//! The server's collector keeps a [`ZkTree`] up to date from watch events; after each change the
//! aggregator asks [`decode_container`] what the nodes under the changed node's parent (and its
//! grandparent, for semaphores) mean. Every layout in `shared/LOCK_LAYOUTS.md` is recognised:
//!
//! * a plain EPHEMERAL node without a sequence suffix is an exclusive lock held by its owner;
//! * any node whose children carry a 10-digit sequence suffix is a queue, ordered by the suffix
//!   alone (prefixes differ between clients), lowest first;
//! * Curator's protected prefixes (`_c_<uuid>-`) and Kazoo's (`<hex>__`) are stripped before
//!   children are grouped, so all clients of one lock fall into one queue;
//! * `__READ__`/`__WRIT__` (Curator), `-R-`/`-W-` (host-named shared locks), `read-`/`write-`
//!   (DistributedLock.ZooKeeper) and
//!   `__rlock__`/`__lock__` (Kazoo) are read-write locks: every reader before the first writer
//!   holds, a writer holds only when it is first;
//! * a node with a `leases` child is a Curator semaphore: the first `max_leases` lease nodes hold,
//!   and its `locks` child (Curator's short internal mutex) is not a lock of its own;
//! * a node `P` with a sibling `P-__lock__` is a kazoo `Semaphore`: its EPHEMERAL non-sequential
//!   children hold a lease each (up to `max_leases`, which kazoo writes as `P`'s data), and the
//!   contenders queued on the kazoo lock at `P-__lock__` wait for one (that lock is not a lock of
//!   its own);
//! * a kazoo `Lock` (`__lock__` nodes only) is a mutex: its holder has no read/write mode; modes
//!   are shown only where `__rlock__` readers share the queue.
//!
//! Nothing here knows about connections or time: callers pass nodes in, locks come out.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::wire::LockMode;

/// A node's data as read (at most [`DATA_MAX`] bytes), shared: nodes with equal data (every
/// Curator node of one client host holds its address) share one copy in [`ZkTree`].
pub type NodeData = std::sync::Arc<[u8]>;

/// The longest node data lockscope reads and keeps: lock nodes' identities (kazoo's identifier,
/// Curator's client address), kazoo lease records, a semaphore's size. Longer data is never
/// read (its length is known from the stat first).
pub const DATA_MAX: i32 = 512;

/// What lockscope keeps of one znode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMeta {
    /// Creation time on the server clock, epoch ms.
    pub ctime_ms: i64,
    /// Owning session for ephemeral nodes, 0 for persistent ones.
    pub ephemeral_owner: i64,
    /// The zxid of the transaction that created the node: a node deleted and created again
    /// under the same name (by any session) has another one, while its `version` restarts at 0.
    pub czxid: i64,
    pub version: i32,
    pub data_len: i32,
    /// The node's data, when it was read: non-empty and at most [`DATA_MAX`] bytes.
    pub data: Option<NodeData>,
}

impl NodeMeta {
    /// The owner of a node lockscope heard created but could not read (it was gone first):
    /// taken for an ephemeral node (a lock node) of a session nobody knows. No real session has
    /// this id (every bit set).
    pub const UNREAD_OWNER: i64 = -1;

    /// A node heard created at `at_ms` (lockscope's clock) and gone before it was read.
    pub fn unread(at_ms: i64) -> NodeMeta {
        NodeMeta {
            ctime_ms: at_ms,
            ephemeral_owner: Self::UNREAD_OWNER,
            czxid: 0,
            version: 0,
            data_len: 0,
            data: None,
        }
    }

    /// The data read as a decimal number (kazoo's Semaphore keeps its `max_leases` as the data
    /// of its node); `None` when not read or not a number.
    pub fn number(&self) -> Option<i64> {
        number_of(self.data.as_deref()?)
    }

    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral_owner != 0
    }

    /// Whether this is a node lockscope could not read ([`NodeMeta::unread`]).
    pub fn is_unread(&self) -> bool {
        self.ephemeral_owner == Self::UNREAD_OWNER
    }
}

/// Short data as a decimal number (at most 10 bytes, surrounding whitespace allowed).
pub fn number_of(data: &[u8]) -> Option<i64> {
    if data.len() > 10 {
        return None;
    }
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// A mirror of the watched subtrees: every node's metadata and each node's children.
///
/// Built to hold a million nodes compactly (ARCHITECTURE.md has the arithmetic): each node is
/// one fixed-size [`Slot`] in an arena, named by its own name only (full paths are rebuilt
/// from the parents when asked for), the names' bytes packed in one string arena, and one hash
/// table of slot numbers keyed by (parent, name) finds a child. Of a node's stat it keeps what
/// decoding needs: creation time, owner, creation zxid, and the number a short persistent
/// node's data holds (kept aside: few nodes have one). Ancestors of a node that were never
/// mirrored themselves (those above a watched root) are kept as placeholders, which are not
/// nodes: [`ZkTree::contains`] and [`ZkTree::children`] do not show them.
#[derive(Debug, Clone, Default)]
pub struct ZkTree {
    /// Slot 0 is `/`; freed slots are chained through `next` from `free`.
    slots: Vec<Slot>,
    free: u32,
    /// Every name, back to back; `garbage` bytes of it belong to freed slots.
    names: String,
    garbage: usize,
    /// Slot numbers of every slot but `/`, by (parent slot, name).
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// A node's data ([`NodeMeta::data`]), for the nodes whose data was read.
    data: HashMap<u32, NodeData>,
    /// Every distinct data in `data`, with how many nodes hold it.
    interned: HashMap<NodeData, u32>,
    /// Nodes (slots that are not placeholders).
    len: usize,
}

/// One node of [`ZkTree`]: 56 bytes (pinned by a test).
#[derive(Debug, Clone)]
struct Slot {
    /// The node's own name: `names[name_at..name_at + name_len]`.
    name_at: u32,
    name_len: u32,
    parent: u32,
    /// Children form a doubly linked list, so a node leaves a queue of any length in O(1).
    first_child: u32,
    next: u32,
    prev: u32,
    /// Children that are nodes (placeholders not counted).
    children: u32,
    flags: u8,
    ctime_ms: i64,
    czxid: i64,
    owner: i64,
}

/// No slot.
const NONE: u32 = u32::MAX;
/// The slot of `/`.
const ROOT: u32 = 0;
/// The slot is a node (not a placeholder, not free).
const NODE: u8 = 1;
/// The slot is free (chained from `free`).
const FREE: u8 = 2;

impl Slot {
    fn placeholder(parent: u32) -> Slot {
        Slot {
            name_at: 0,
            name_len: 0,
            parent,
            first_child: NONE,
            next: NONE,
            prev: NONE,
            children: 0,
            flags: 0,
            ctime_ms: 0,
            czxid: 0,
            owner: 0,
        }
    }

    fn is_node(&self) -> bool {
        self.flags & NODE != 0
    }
}

impl ZkTree {
    pub fn new() -> Self {
        Self::default()
    }

    fn name(&self, id: u32) -> &str {
        let slot = &self.slots[id as usize];
        let at = slot.name_at as usize;
        &self.names[at..at + slot.name_len as usize]
    }

    fn hash(&self, parent: u32, name: &str) -> u64 {
        self.hasher.hash_one((parent, name))
    }

    /// The slot named `name` under `parent`.
    fn child(&self, parent: u32, name: &str) -> Option<u32> {
        let hash = self.hash(parent, name);
        self.index
            .find(hash, |&id| {
                self.slots[id as usize].parent == parent && self.name(id) == name
            })
            .copied()
    }

    /// The slot of `path` (components split at `/`, empty ones skipped).
    fn lookup(&self, path: &str) -> Option<u32> {
        let mut id = ROOT;
        if self.slots.is_empty() {
            return None;
        }
        for name in path.split('/').filter(|c| !c.is_empty()) {
            id = self.child(id, name)?;
        }
        Some(id)
    }

    /// The slot of `path`'s node, if it is one.
    fn node(&self, path: &str) -> Option<u32> {
        self.lookup(path)
            .filter(|&id| self.slots[id as usize].is_node())
    }

    /// The slot named `name` under `parent`, made a placeholder if there is none.
    fn child_or_placeholder(&mut self, parent: u32, name: &str) -> u32 {
        if let Some(id) = self.child(parent, name) {
            return id;
        }
        let mut slot = Slot::placeholder(parent);
        slot.name_at = self.names.len() as u32;
        slot.name_len = name.len() as u32;
        self.names.push_str(name);
        let id = if self.free != NONE {
            let id = self.free;
            self.free = self.slots[id as usize].next;
            self.slots[id as usize] = slot;
            id
        } else {
            self.slots.push(slot);
            (self.slots.len() - 1) as u32
        };
        // Linked first under its parent.
        let first = self.slots[parent as usize].first_child;
        self.slots[id as usize].next = first;
        if first != NONE {
            self.slots[first as usize].prev = id;
        }
        self.slots[parent as usize].first_child = id;
        let hash = self.hash(parent, name);
        let (slots, names, hasher) = (&self.slots, &self.names, &self.hasher);
        self.index.insert_unique(hash, id, |&other| {
            let slot = &slots[other as usize];
            let at = slot.name_at as usize;
            hasher.hash_one((slot.parent, &names[at..at + slot.name_len as usize]))
        });
        id
    }

    /// Inserts or updates a node; returns true when it is new.
    pub fn upsert(&mut self, path: &str, meta: NodeMeta) -> bool {
        if self.slots.is_empty() {
            self.slots.push(Slot::placeholder(NONE));
            self.free = NONE;
        }
        let mut id = ROOT;
        for name in path.split('/').filter(|c| !c.is_empty()) {
            id = self.child_or_placeholder(id, name);
        }
        let slot = &mut self.slots[id as usize];
        let created = !slot.is_node();
        slot.flags |= NODE;
        slot.ctime_ms = meta.ctime_ms;
        slot.czxid = meta.czxid;
        slot.owner = meta.ephemeral_owner;
        let parent = slot.parent;
        if created {
            self.len += 1;
            if parent != NONE {
                self.slots[parent as usize].children += 1;
            }
        }
        self.set_data(id, meta.data);
        created
    }

    /// Keeps `data` as node `id`'s, sharing one copy between equal data.
    fn set_data(&mut self, id: u32, data: Option<NodeData>) {
        if self.data.get(&id) == data.as_ref() {
            return;
        }
        self.drop_data(id);
        if let Some(data) = data {
            let shared = match self.interned.get_key_value(&data) {
                Some((shared, _)) => shared.clone(),
                None => data,
            };
            *self.interned.entry(shared.clone()).or_insert(0) += 1;
            self.data.insert(id, shared);
        }
    }

    fn drop_data(&mut self, id: u32) {
        if let Some(old) = self.data.remove(&id) {
            if let Some(count) = self.interned.get_mut(&old) {
                *count -= 1;
                if *count == 0 {
                    self.interned.remove(&old);
                }
            }
        }
    }

    /// The data of the node at `path`, when it was read.
    pub fn data(&self, path: &str) -> Option<&[u8]> {
        self.node(path)
            .and_then(|id| self.data.get(&id))
            .map(|d| &d[..])
    }

    /// How many distinct data the tree keeps (equal data shared).
    pub fn distinct_data(&self) -> usize {
        self.interned.len()
    }

    /// Removes a node and everything below it; returns the removed node's metadata.
    pub fn remove(&mut self, path: &str) -> Option<NodeMeta> {
        let id = self.node(path)?;
        let meta = self.meta(id);
        if id == ROOT {
            // ZooKeeper never deletes `/` (found by fuzzing: freeing the root slot unlisted
            // every node created after): what is below it goes, `/` stays.
            let mut child = self.slots[ROOT as usize].first_child;
            while child != NONE {
                let next = self.slots[child as usize].next;
                self.free_subtree(child);
                child = next;
            }
            self.compact_names();
            return Some(meta);
        }
        let parent = self.slots[id as usize].parent;
        self.free_subtree(id);
        // Placeholders left without children go too.
        let mut up = parent;
        while up != NONE && up != ROOT {
            let slot = &self.slots[up as usize];
            if slot.is_node() || slot.first_child != NONE {
                break;
            }
            let next = slot.parent;
            self.free_subtree(up);
            up = next;
        }
        self.compact_names();
        Some(meta)
    }

    /// Frees `id` and every slot below it, unlinking `id` from its parent.
    fn free_subtree(&mut self, id: u32) {
        let (parent, prev, next) = {
            let slot = &self.slots[id as usize];
            (slot.parent, slot.prev, slot.next)
        };
        if prev != NONE {
            self.slots[prev as usize].next = next;
        } else if parent != NONE {
            self.slots[parent as usize].first_child = next;
        }
        if next != NONE {
            self.slots[next as usize].prev = prev;
        }
        if parent != NONE && self.slots[id as usize].is_node() {
            self.slots[parent as usize].children -= 1;
        }
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let mut child = self.slots[id as usize].first_child;
            while child != NONE {
                stack.push(child);
                child = self.slots[child as usize].next;
            }
            let hash = self.hash(self.slots[id as usize].parent, self.name(id));
            if let Ok(entry) = self.index.find_entry(hash, |&other| other == id) {
                entry.remove();
            }
            let slot = &mut self.slots[id as usize];
            if slot.is_node() {
                self.len -= 1;
            }
            self.garbage += slot.name_len as usize;
            *slot = Slot::placeholder(NONE);
            slot.flags = FREE;
            slot.next = self.free;
            self.free = id;
            self.drop_data(id);
        }
    }

    /// Repacks the names once more than half of their bytes are garbage.
    fn compact_names(&mut self) {
        if self.garbage < 4096 || self.garbage * 2 < self.names.len() {
            return;
        }
        let mut names = String::with_capacity(self.names.len() - self.garbage);
        for slot in &mut self.slots {
            if slot.flags & FREE != 0 {
                continue;
            }
            let at = slot.name_at as usize;
            let name = &self.names[at..at + slot.name_len as usize];
            slot.name_at = names.len() as u32;
            names.push_str(name);
        }
        self.names = names;
        self.garbage = 0;
    }

    fn meta(&self, id: u32) -> NodeMeta {
        let slot = &self.slots[id as usize];
        NodeMeta {
            ctime_ms: slot.ctime_ms,
            ephemeral_owner: slot.owner,
            czxid: slot.czxid,
            version: 0,
            data_len: 0,
            data: self.data.get(&id).cloned(),
        }
    }

    /// The node's metadata as the tree keeps it: `version` and `data_len` are not kept (0).
    pub fn get(&self, path: &str) -> Option<NodeMeta> {
        self.node(path).map(|id| self.meta(id))
    }

    pub fn contains(&self, path: &str) -> bool {
        self.node(path).is_some()
    }

    /// The slots of `id`'s children that are nodes, in no particular order.
    fn child_slots(&self, id: Option<u32>) -> impl Iterator<Item = u32> + '_ {
        let mut next = id.map_or(NONE, |id| self.slots[id as usize].first_child);
        std::iter::from_fn(move || {
            while next != NONE {
                let id = next;
                next = self.slots[id as usize].next;
                if self.slots[id as usize].is_node() {
                    return Some(id);
                }
            }
            None
        })
    }

    /// Child names of `path`, in no particular order.
    pub fn children(&self, path: &str) -> impl Iterator<Item = &str> {
        self.child_slots(self.lookup(path)).map(|id| self.name(id))
    }

    /// Child names of `path` with their metadata, in no particular order.
    pub fn children_with_meta(&self, path: &str) -> impl Iterator<Item = (&str, NodeMeta)> {
        self.child_slots(self.lookup(path))
            .map(|id| (self.name(id), self.meta(id)))
    }

    pub fn child_count(&self, path: &str) -> usize {
        self.lookup(path)
            .map_or(0, |id| self.slots[id as usize].children as usize)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The full path of slot `id`.
    fn path_of(&self, mut id: u32) -> String {
        let mut names = Vec::new();
        while id != ROOT && id != NONE {
            names.push(self.name(id));
            id = self.slots[id as usize].parent;
        }
        if names.is_empty() {
            return "/".to_string();
        }
        let mut path = String::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        for name in names.iter().rev() {
            path.push('/');
            path.push_str(name);
        }
        path
    }

    /// Every node with its metadata, in no particular order; paths are built as it goes.
    pub fn iter(&self) -> impl Iterator<Item = (String, NodeMeta)> + '_ {
        (0..self.slots.len() as u32)
            .filter(|&id| self.slots[id as usize].is_node())
            .map(|id| (self.path_of(id), self.meta(id)))
    }
}

/// Every node [`decode_container`] may find a lock in: nodes with children, ephemeral leaves
/// without a sequence suffix (exclusive locks), persistent leaves holding a ShedLock instant
/// and kazoo semaphores (a sibling `P-__lock__`).
/// Decoding just these after a full read finds every lock of the tree.
pub fn lock_candidates(tree: &ZkTree) -> Vec<String> {
    let mut out = Vec::new();
    for id in 0..tree.slots.len() as u32 {
        let slot = &tree.slots[id as usize];
        if !slot.is_node() {
            continue;
        }
        let name = tree.name(id);
        let shedlock = || {
            slot.owner == 0
                && slot.children == 0
                && tree
                    .data
                    .get(&id)
                    .is_some_and(|d| crate::shedlock::parse_until(d).is_some())
        };
        if slot.children > 0 || (slot.owner != 0 && parse_sequence(name).is_none()) || shedlock() {
            out.push(tree.path_of(id));
        }
        if let Some(semaphore) = kazoo_semaphore_of(name) {
            if let Some(id) = tree.child(slot.parent, semaphore) {
                if tree.slots[id as usize].is_node() {
                    out.push(tree.path_of(id));
                }
            }
        }
    }
    out
}

/// `("/a/b", "c")` for `"/a/b/c"`; `("/", "a")` for `"/a"`; `None` for `"/"`.
pub fn split_parent(path: &str) -> Option<(&str, &str)> {
    let cut = path.rfind('/')?;
    let name = &path[cut + 1..];
    if name.is_empty() {
        return None;
    }
    let parent = if cut == 0 { "/" } else { &path[..cut] };
    Some((parent, name))
}

pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The nodes whose decoding may change when `path` is created, changed or deleted: the node
/// itself (exclusive locks), its parent (queues) and its grandparent (semaphore `leases/`); for a
/// semaphore's `leases` node also its sibling `locks` (which stops being a lock of its own); for
/// a kazoo semaphore's `P-__lock__` queue (or a node in it), the semaphore `P`.
pub fn containers_for_change(path: &str) -> Vec<String> {
    let mut out = vec![path.to_string()];
    if let Some(semaphore) = kazoo_semaphore_of(path) {
        out.push(semaphore.to_string());
    }
    if let Some((parent, name)) = split_parent(path) {
        out.push(parent.to_string());
        if name == "leases" {
            out.push(join(parent, "locks"));
        }
        if let Some(semaphore) = kazoo_semaphore_of(parent) {
            out.push(semaphore.to_string());
        }
        if let Some((grand, _)) = split_parent(parent) {
            out.push(grand.to_string());
        }
    }
    out
}

/// [`containers_for_change`] plus what a kazoo Semaphore's sibling makes depend on `path`
/// (found by fuzzing): a change of `P` re-decodes `P-__lock__` (internal only while `P`
/// exists), and a change of `P-__lock__` re-decodes `P`'s children (lease holders only while it
/// exists).
pub fn containers_for_change_in(tree: &ZkTree, path: &str) -> Vec<String> {
    let mut out = containers_for_change(path);
    if path != "/" {
        out.push(format!("{path}{KAZOO_SEMAPHORE_LOCK}"));
    }
    if let Some(semaphore) = kazoo_semaphore_of(path) {
        out.extend(tree.children(semaphore).map(|name| join(semaphore, name)));
    }
    out
}

/// The suffix of a kazoo Semaphore's contender lock, a sibling of the semaphore node.
const KAZOO_SEMAPHORE_LOCK: &str = "-__lock__";

/// The kazoo Semaphore whose contender lock `path` would be: `/a/b` for `/a/b-__lock__`. A node
/// named only `-__lock__` is no semaphore's (kazoo appends the suffix to the semaphore's own
/// path, whose last name is never empty; found by fuzzing: `/sem/-__lock__` is not a sibling of
/// `/sem`).
pub fn kazoo_semaphore_of(path: &str) -> Option<&str> {
    path.strip_suffix(KAZOO_SEMAPHORE_LOCK)
        .filter(|semaphore| !semaphore.is_empty() && !semaphore.ends_with('/'))
}

/// Whether `path` is a kazoo Semaphore: its sibling `<path>-__lock__` exists.
pub fn is_kazoo_semaphore(tree: &ZkTree, path: &str) -> bool {
    path != "/" && tree.contains(&format!("{path}{KAZOO_SEMAPHORE_LOCK}"))
}

/// A Curator semaphore's internal `locks`/`leases` child, or a kazoo semaphore's contender lock
/// (or one of its lease nodes): never a lock of its own.
pub fn is_internal(tree: &ZkTree, container: &str) -> bool {
    if kazoo_semaphore_of(container).is_some_and(|semaphore| tree.contains(semaphore)) {
        return true;
    }
    split_parent(container).is_some_and(|(parent, name)| {
        (name == "leases" || name == "locks") && tree.contains(&join(parent, "leases"))
            || is_kazoo_semaphore(tree, parent)
    })
}

/// Splits a sequential node name into its prefix and its 10-digit sequence number.
pub fn parse_sequence(name: &str) -> Option<(&str, u64)> {
    if name.len() < 10 || !name.is_char_boundary(name.len() - 10) {
        return None;
    }
    let (prefix, digits) = name.split_at(name.len() - 10);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((prefix, digits.parse().ok()?))
}

/// The recipe a lock was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Recipe {
    /// One ephemeral node; contenders retry.
    Exclusive,
    /// Hand-written sequential queue (`lock-`, `temp`, any prefix).
    Queue,
    CuratorMutex,
    CuratorSemaphore,
    CuratorReadWrite,
    /// `<host>-R-` / `<host>-W-` nodes.
    SharedReadWrite,
    /// Kazoo's `__lock__` / `__rlock__` nodes.
    KazooLock,
    /// Kazoo's `Semaphore`: lease children plus a sibling `-__lock__` queue.
    KazooSemaphore,
    /// Kazoo's `NonBlockingLease` (one slot of a `MultiNonBlockingLease`): a persistent
    /// `lease_holder` child whose data names the holder and when the lease ends.
    KazooLease,
    /// ShedLock's ZooKeeper provider: a persistent leaf node whose data is only the
    /// lock-until instant ([`crate::shedlock::parse_until`]); held while that is in the future.
    ShedLock,
}

impl Recipe {
    pub const ALL: [Recipe; 10] = [
        Recipe::Exclusive,
        Recipe::Queue,
        Recipe::CuratorMutex,
        Recipe::CuratorSemaphore,
        Recipe::CuratorReadWrite,
        Recipe::SharedReadWrite,
        Recipe::KazooLock,
        Recipe::KazooSemaphore,
        Recipe::KazooLease,
        Recipe::ShedLock,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Recipe::Exclusive => "exclusive",
            Recipe::Queue => "queue",
            Recipe::CuratorMutex => "curator_mutex",
            Recipe::CuratorSemaphore => "curator_semaphore",
            Recipe::CuratorReadWrite => "curator_rw",
            Recipe::SharedReadWrite => "shared_rw",
            Recipe::KazooLock => "kazoo_lock",
            Recipe::KazooSemaphore => "kazoo_semaphore",
            Recipe::KazooLease => "kazoo_lease",
            Recipe::ShedLock => "shedlock",
        }
    }
}

/// One node taking part in a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// Full path of the node.
    pub node: String,
    pub session: i64,
    pub ctime_ms: i64,
    /// The node's creation zxid ([`NodeMeta::czxid`]): which incarnation of the node holds.
    pub czxid: i64,
    pub seq: Option<u64>,
    pub mode: Option<LockMode>,
}

/// A lock read out of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedLock {
    /// The lock's path: the container, or container/prefix when several queues share a parent.
    pub path: String,
    /// The node whose children (or which itself) make up the lock.
    pub container: String,
    pub recipe: Recipe,
    pub holders: Vec<Participant>,
    /// In queue order.
    pub waiters: Vec<Participant>,
    pub max_leases: Option<u32>,
}

/// How one sequential child's prefix classifies it.
struct Family {
    /// Children with the same key belong to one lock.
    key: String,
    recipe: Recipe,
    mode: Option<LockMode>,
}

fn strip_curator_protection(prefix: &str) -> (&str, bool) {
    // `_c_` + 36-char UUID + `-`.
    if let Some(rest) = prefix.strip_prefix("_c_") {
        if rest.len() > 37 && rest.is_char_boundary(36) && rest.as_bytes()[36] == b'-' {
            let uuid = &rest[..36];
            if uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                return (&rest[37..], true);
            }
        }
    }
    (prefix, false)
}

fn family(prefix: &str) -> Family {
    let (rest, curator) = strip_curator_protection(prefix);
    if rest.ends_with("__READ__") || rest.ends_with("__WRIT__") {
        let mode = if rest.ends_with("__READ__") {
            LockMode::Read
        } else {
            LockMode::Write
        };
        let base = rest
            .trim_end_matches("__READ__")
            .trim_end_matches("__WRIT__");
        return Family {
            key: format!("{base}__RW__"),
            recipe: Recipe::CuratorReadWrite,
            mode: Some(mode),
        };
    }
    if rest.ends_with("-R-") || rest.ends_with("-W-") {
        let mode = if rest.ends_with("-R-") {
            LockMode::Read
        } else {
            LockMode::Write
        };
        return Family {
            key: "-RW-".into(),
            recipe: Recipe::SharedReadWrite,
            mode: Some(mode),
        };
    }
    // DistributedLock.ZooKeeper's reader-writer lock (madelson/DistributedLock 2.8.1,
    // `ZooKeeperDistributedReaderWriterLock`): `read-<seq>` and `write-<seq>` children of one
    // node share one sequence; a reader holds while no writer is ahead of it, a writer when
    // first — the host-named shared lock's rule.
    if !curator && (rest == "read-" || rest == "write-") {
        return Family {
            key: "read-write-".into(),
            recipe: Recipe::SharedReadWrite,
            mode: Some(if rest == "read-" {
                LockMode::Read
            } else {
                LockMode::Write
            }),
        };
    }
    // Kazoo: `<uuid hex>__lock__` / `<uuid hex>__rlock__`.
    for (suffix, mode) in [("__rlock__", LockMode::Read), ("__lock__", LockMode::Write)] {
        if let Some(head) = rest.strip_suffix(suffix) {
            if head.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                return Family {
                    key: "__kazoo__".into(),
                    recipe: Recipe::KazooLock,
                    mode: Some(mode),
                };
            }
        }
    }
    let recipe = if curator && rest == "lock-" {
        Recipe::CuratorMutex
    } else {
        Recipe::Queue
    };
    Family {
        key: rest.to_string(),
        recipe,
        mode: None,
    }
}

/// Per-path semaphore sizes: `max_leases(path)` for a semaphore at `path`.
pub trait LeaseLimits {
    fn max_leases(&self, lock_path: &str) -> Option<u32>;
}

impl<F: Fn(&str) -> Option<u32>> LeaseLimits for F {
    fn max_leases(&self, lock_path: &str) -> Option<u32> {
        self(lock_path)
    }
}

/// Decodes the locks whose participants are `container` itself or its children.
///
/// Returns no lock when `container` is absent, a Curator semaphore's internal `locks`/`leases`
/// child, or a node with nothing lock-like in it.
pub fn decode_container(
    tree: &ZkTree,
    container: &str,
    limits: &dyn LeaseLimits,
) -> Vec<DecodedLock> {
    let Some(meta) = tree.get(container) else {
        return Vec::new();
    };
    if is_internal(tree, container) {
        return Vec::new();
    }
    if is_kazoo_semaphore(tree, container) {
        return vec![decode_kazoo_semaphore(tree, container, &meta, limits)];
    }
    if let Some(lease) = decode_kazoo_lease(tree, container) {
        return vec![lease];
    }
    let leases = join(container, "leases");
    if tree.contains(&leases) {
        return decode_semaphore(tree, container, &leases, limits)
            .into_iter()
            .collect();
    }
    if tree.child_count(container) == 0 {
        let is_sequential = split_parent(container)
            .and_then(|(_, name)| parse_sequence(name))
            .is_some();
        let shedlock = !meta.is_ephemeral()
            && tree
                .data(container)
                .is_some_and(|d| crate::shedlock::parse_until(d).is_some());
        if (meta.is_ephemeral() && !is_sequential) || shedlock {
            // ShedLock's node is always listed with its node as the holder: whether it holds
            // depends on the clock (its instant), which the server layer reads.
            return vec![DecodedLock {
                path: container.to_string(),
                container: container.to_string(),
                recipe: if shedlock {
                    Recipe::ShedLock
                } else {
                    Recipe::Exclusive
                },
                holders: vec![Participant {
                    node: container.to_string(),
                    session: meta.ephemeral_owner,
                    ctime_ms: meta.ctime_ms,
                    czxid: meta.czxid,
                    seq: None,
                    mode: None,
                }],
                waiters: Vec::new(),
                max_leases: None,
            }];
        }
        return Vec::new();
    }
    decode_queues(tree, container)
}

fn sequential_children(tree: &ZkTree, container: &str) -> Vec<(String, u64, NodeMeta, String)> {
    let mut out = Vec::new();
    for (name, meta) in tree.children_with_meta(container) {
        let Some((prefix, seq)) = parse_sequence(name) else {
            continue;
        };
        out.push((join(container, name), seq, meta, prefix.to_string()));
    }
    out.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    out
}

fn participant(path: String, seq: u64, meta: &NodeMeta, mode: Option<LockMode>) -> Participant {
    Participant {
        node: path,
        session: meta.ephemeral_owner,
        ctime_ms: meta.ctime_ms,
        czxid: meta.czxid,
        seq: Some(seq),
        mode,
    }
}

fn decode_queues(tree: &ZkTree, container: &str) -> Vec<DecodedLock> {
    let children = sequential_children(tree, container);
    if children.is_empty() {
        return Vec::new();
    }
    // Group by family, keeping first-seen (lowest sequence) order of groups.
    let mut groups: Vec<(String, Recipe, Vec<Participant>)> = Vec::new();
    for (path, seq, meta, prefix) in children {
        let fam = family(&prefix);
        let p = participant(path, seq, &meta, fam.mode);
        match groups.iter_mut().find(|g| g.0 == fam.key) {
            Some(group) => {
                // A protected Curator node makes the whole group a Curator mutex.
                if fam.recipe == Recipe::CuratorMutex {
                    group.1 = Recipe::CuratorMutex;
                }
                group.2.push(p);
            }
            None => groups.push((fam.key, fam.recipe, vec![p])),
        }
    }
    let single = groups.len() == 1;
    groups
        .into_iter()
        .map(|(key, recipe, mut members)| {
            // A kazoo queue without readers is a `Lock` (a mutex) or writers alone: no modes.
            if recipe == Recipe::KazooLock && members.iter().all(|m| m.mode != Some(LockMode::Read))
            {
                for m in &mut members {
                    m.mode = None;
                }
            }
            let path = if single {
                container.to_string()
            } else {
                let label = key.trim_matches(|c| c == '-' || c == '_');
                let label = if label.is_empty() { "queue" } else { label };
                join(container, label)
            };
            let (holders, waiters) = split_holders(recipe, members, 1);
            DecodedLock {
                path,
                container: container.to_string(),
                recipe,
                holders,
                waiters,
                max_leases: None,
            }
        })
        .collect()
}

/// The child of a kazoo lease's path that holds the lease record.
pub const KAZOO_LEASE_NODE: &str = "lease_holder";

/// A kazoo `NonBlockingLease` record, as `kazoo/recipe/lease.py` (kazoo 2.11.0, commit
/// 479e074) writes it into `<path>/lease_holder`: `{"version": 1, "holder": "<identifier or
/// host name>", "end": "YYYY-MM-DDTHH:MM:SS"}`, the end in UTC without a zone, whole seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KazooLease {
    /// The holder as written (any text; shown with [`crate::clip::identity`]).
    pub holder: String,
    /// When the lease ends, epoch ms.
    pub end_ms: i64,
}

/// Reads a kazoo lease record; `None` for anything else (another version included: kazoo
/// leaves those alone too).
pub fn parse_kazoo_lease(data: &[u8]) -> Option<KazooLease> {
    #[derive(serde::Deserialize)]
    struct Record {
        version: i64,
        holder: String,
        end: String,
    }
    let record: Record = serde_json::from_slice(data).ok()?;
    if record.version != 1 {
        return None;
    }
    Some(KazooLease {
        holder: record.holder,
        end_ms: parse_naive_utc(&record.end)?,
    })
}

pub use crate::time::{format_naive_utc, parse_naive_utc};

/// kazoo's `NonBlockingLease` at `container`: a persistent `lease_holder` child holding a lease
/// record. The lease is held by time, not by a session: the node stays after the lease ends
/// (kazoo never deletes it; the next taker replaces it), so the holder is always the last one
/// and the view carries the end as the lock's deadline. The `<hex>__lock__` nodes beside it
/// are kazoo's short internal lock around taking or renewing the lease: they wait.
fn decode_kazoo_lease(tree: &ZkTree, container: &str) -> Option<DecodedLock> {
    let node = join(container, KAZOO_LEASE_NODE);
    let meta = tree.get(&node)?;
    if meta.is_ephemeral() || parse_kazoo_lease(tree.data(&node)?).is_none() {
        return None;
    }
    let holder = Participant {
        node,
        session: meta.ephemeral_owner,
        ctime_ms: meta.ctime_ms,
        czxid: meta.czxid,
        seq: None,
        mode: None,
    };
    let waiters = sequential_children(tree, container)
        .into_iter()
        .map(|(path, seq, meta, _)| participant(path, seq, &meta, None))
        .collect();
    Some(DecodedLock {
        path: container.to_string(),
        container: container.to_string(),
        recipe: Recipe::KazooLease,
        holders: vec![holder],
        waiters,
        max_leases: None,
    })
}

/// kazoo's `Semaphore`: each lease is an EPHEMERAL child named by a random hex id; contenders
/// queue on the kazoo lock at `<container>-__lock__` (its lowest node is the one looking for a
/// free lease, the rest wait to look). `max_leases` is configured, or the container's data.
fn decode_kazoo_semaphore(
    tree: &ZkTree,
    container: &str,
    meta: &NodeMeta,
    limits: &dyn LeaseLimits,
) -> DecodedLock {
    let max = limits
        .max_leases(container)
        .or_else(|| meta.number().and_then(|n| u32::try_from(n).ok()))
        .filter(|n| *n > 0);
    let mut holders: Vec<Participant> = tree
        .children_with_meta(container)
        .filter(|(_, meta)| meta.is_ephemeral())
        .map(|(name, meta)| Participant {
            node: join(container, name),
            session: meta.ephemeral_owner,
            ctime_ms: meta.ctime_ms,
            czxid: meta.czxid,
            seq: None,
            mode: None,
        })
        .collect();
    holders.sort_by(|a, b| {
        a.ctime_ms
            .cmp(&b.ctime_ms)
            .then_with(|| a.node.cmp(&b.node))
    });
    let queue = format!("{container}{KAZOO_SEMAPHORE_LOCK}");
    let waiters = sequential_children(tree, &queue)
        .into_iter()
        .map(|(path, seq, meta, _)| participant(path, seq, &meta, None))
        .collect();
    DecodedLock {
        path: container.to_string(),
        container: container.to_string(),
        recipe: Recipe::KazooSemaphore,
        holders,
        waiters,
        max_leases: max,
    }
}

fn decode_semaphore(
    tree: &ZkTree,
    container: &str,
    leases: &str,
    limits: &dyn LeaseLimits,
) -> Option<DecodedLock> {
    let max = limits.max_leases(container).unwrap_or(1).max(1);
    let members: Vec<Participant> = sequential_children(tree, leases)
        .into_iter()
        .map(|(path, seq, meta, _)| participant(path, seq, &meta, None))
        .collect();
    let (holders, waiters) = split_holders(Recipe::CuratorSemaphore, members, max);
    Some(DecodedLock {
        path: container.to_string(),
        container: container.to_string(),
        recipe: Recipe::CuratorSemaphore,
        holders,
        waiters,
        max_leases: Some(max),
    })
}

/// Splits queue-ordered participants into holders and waiters by the recipe's rule.
fn split_holders(
    recipe: Recipe,
    members: Vec<Participant>,
    max_leases: u32,
) -> (Vec<Participant>, Vec<Participant>) {
    let holding = match recipe {
        Recipe::CuratorReadWrite | Recipe::SharedReadWrite | Recipe::KazooLock => {
            let readers = members
                .iter()
                .take_while(|p| p.mode == Some(LockMode::Read))
                .count();
            if readers == 0 {
                usize::from(!members.is_empty())
            } else {
                readers
            }
        }
        Recipe::CuratorSemaphore => (max_leases as usize).min(members.len()),
        _ => usize::from(!members.is_empty()),
    };
    let mut holders = members;
    let waiters = holders.split_off(holding);
    (holders, waiters)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID_A: &str = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    const UUID_B: &str = "9f0c6a2e-7d61-4c8e-9d3b-5a1f2e3d4c5b";

    /// Found by fuzzing (`zk_tree`): `/` made a node, then removed, freed the root slot, and
    /// nodes created afterwards were not listed under `/`.
    #[test]
    fn removing_the_root_keeps_it_and_lists_what_comes_after() {
        let mut tree = ZkTree::new();
        let meta = NodeMeta::unread(1);
        tree.upsert("/rw", meta.clone());
        tree.upsert("//", meta.clone());
        assert!(tree.remove("/").is_some());
        assert!(!tree.contains("/rw"));
        tree.upsert("/lock", meta);
        assert_eq!(tree.children("/").collect::<Vec<_>>(), ["lock"]);
        assert!(tree.contains("/lock"));
    }

    fn tree(nodes: &[(&str, i64)]) -> ZkTree {
        let mut tree = ZkTree::new();
        for (i, (path, owner)) in nodes.iter().enumerate() {
            tree.upsert(
                path,
                NodeMeta {
                    ctime_ms: 1_000 + i as i64,
                    ephemeral_owner: *owner,
                    czxid: 100 + i as i64,
                    version: 0,
                    data_len: 0,
                    data: None,
                },
            );
        }
        tree
    }

    fn no_limits(_: &str) -> Option<u32> {
        None
    }

    fn nodes(ps: &[Participant]) -> Vec<&str> {
        ps.iter()
            .map(|p| p.node.rsplit('/').next().unwrap_or_default())
            .collect()
    }

    struct Case {
        name: &'static str,
        nodes: Vec<(String, i64)>,
        container: &'static str,
        recipe: Recipe,
        path: &'static str,
        holders: Vec<String>,
        waiters: Vec<String>,
    }

    fn s(v: &str) -> String {
        v.to_string()
    }

    #[test]
    fn decodes_every_layout() {
        let cur_a = format!("_c_{UUID_A}-");
        let cur_b = format!("_c_{UUID_B}-");
        let cases = vec![
            Case {
                name: "plain ephemeral",
                nodes: vec![(s("/locks"), 0), (s("/locks/db"), 7)],
                container: "/locks/db",
                recipe: Recipe::Exclusive,
                path: "/locks/db",
                holders: vec![s("db")],
                waiters: vec![],
            },
            Case {
                name: "lock- queue sorted by suffix",
                nodes: vec![
                    (s("/locks/q"), 0),
                    (s("/locks/q/lock-0000000009"), 3),
                    (s("/locks/q/lock-0000000002"), 1),
                    (s("/locks/q/lock-0000000005"), 2),
                ],
                container: "/locks/q",
                recipe: Recipe::Queue,
                path: "/locks/q",
                holders: vec![s("lock-0000000002")],
                waiters: vec![s("lock-0000000005"), s("lock-0000000009")],
            },
            Case {
                name: "temp prefix without dash",
                nodes: vec![
                    (s("/t"), 0),
                    (s("/t/temp0000000011"), 1),
                    (s("/t/temp0000000010"), 2),
                ],
                container: "/t",
                recipe: Recipe::Queue,
                path: "/t",
                holders: vec![s("temp0000000010")],
                waiters: vec![s("temp0000000011")],
            },
            Case {
                name: "curator mutex: uuid prefixes differ, order by suffix only",
                nodes: vec![
                    (s("/m"), 0),
                    (format!("/m/{cur_b}lock-0000000001"), 2),
                    (format!("/m/{cur_a}lock-0000000000"), 1),
                ],
                container: "/m",
                recipe: Recipe::CuratorMutex,
                path: "/m",
                holders: vec![format!("{cur_a}lock-0000000000")],
                waiters: vec![format!("{cur_b}lock-0000000001")],
            },
            Case {
                name: "curator read-write: readers before first writer hold",
                nodes: vec![
                    (s("/rw"), 0),
                    (format!("/rw/{cur_a}__READ__0000000001"), 1),
                    (format!("/rw/{cur_b}__READ__0000000002"), 2),
                    (format!("/rw/{cur_a}__WRIT__0000000003"), 3),
                    (format!("/rw/{cur_b}__READ__0000000004"), 4),
                ],
                container: "/rw",
                recipe: Recipe::CuratorReadWrite,
                path: "/rw",
                holders: vec![
                    format!("{cur_a}__READ__0000000001"),
                    format!("{cur_b}__READ__0000000002"),
                ],
                waiters: vec![
                    format!("{cur_a}__WRIT__0000000003"),
                    format!("{cur_b}__READ__0000000004"),
                ],
            },
            Case {
                name: "shared lock with host names: writer first holds alone",
                nodes: vec![
                    (s("/s"), 0),
                    (s("/s/web1-W-0000000001"), 1),
                    (s("/s/web2-R-0000000002"), 2),
                ],
                container: "/s",
                recipe: Recipe::SharedReadWrite,
                path: "/s",
                holders: vec![s("web1-W-0000000001")],
                waiters: vec![s("web2-R-0000000002")],
            },
            Case {
                name: "DistributedLock.ZooKeeper reader-writer: readers ahead of the writer hold",
                nodes: vec![
                    (s("/dl"), 0),
                    (s("/dl/read-0000000000"), 1),
                    (s("/dl/read-0000000001"), 2),
                    (s("/dl/write-0000000002"), 3),
                    (s("/dl/read-0000000003"), 4),
                ],
                container: "/dl",
                recipe: Recipe::SharedReadWrite,
                path: "/dl",
                holders: vec![s("read-0000000000"), s("read-0000000001")],
                waiters: vec![s("write-0000000002"), s("read-0000000003")],
            },
            Case {
                name: "kazoo lock",
                nodes: vec![
                    (s("/k"), 0),
                    (
                        s("/k/0123456789abcdef0123456789abcdef__lock__0000000003"),
                        1,
                    ),
                    (
                        s("/k/fedcba9876543210fedcba9876543210__lock__0000000004"),
                        2,
                    ),
                ],
                container: "/k",
                recipe: Recipe::KazooLock,
                path: "/k",
                holders: vec![s("0123456789abcdef0123456789abcdef__lock__0000000003")],
                waiters: vec![s("fedcba9876543210fedcba9876543210__lock__0000000004")],
            },
            Case {
                name: "siblings of two queues under one shared root",
                nodes: vec![
                    (s("/distributed"), 0),
                    (s("/distributed/orders-0000000001"), 1),
                    (s("/distributed/users-0000000002"), 2),
                    (s("/distributed/orders-0000000003"), 3),
                ],
                container: "/distributed",
                recipe: Recipe::Queue,
                path: "/distributed/orders",
                holders: vec![s("orders-0000000001")],
                waiters: vec![s("orders-0000000003")],
            },
            Case {
                name: "non-numeric suffix is ignored, not a crash",
                nodes: vec![
                    (s("/x"), 0),
                    (s("/x/lock-abcdefghij"), 1),
                    (s("/x/lock-0000000001"), 2),
                ],
                container: "/x",
                recipe: Recipe::Queue,
                path: "/x",
                holders: vec![s("lock-0000000001")],
                waiters: vec![],
            },
        ];
        for case in cases {
            let refs: Vec<(&str, i64)> = case.nodes.iter().map(|(p, o)| (p.as_str(), *o)).collect();
            let t = tree(&refs);
            let locks = decode_container(&t, case.container, &no_limits);
            let lock = locks
                .iter()
                .find(|l| l.path == case.path)
                .unwrap_or_else(|| panic!("{}: no lock at {} in {locks:?}", case.name, case.path));
            assert_eq!(lock.recipe, case.recipe, "{}", case.name);
            assert_eq!(nodes(&lock.holders), case.holders, "{}", case.name);
            assert_eq!(nodes(&lock.waiters), case.waiters, "{}", case.name);
        }
    }

    #[test]
    fn semaphore_uses_configured_leases_and_hides_internal_mutex() {
        let cur = format!("_c_{UUID_A}-");
        let paths = [
            ("/sem".to_string(), 0),
            ("/sem/locks".to_string(), 0),
            (format!("/sem/locks/{cur}lock-0000000004"), 9),
            ("/sem/leases".to_string(), 0),
            (format!("/sem/leases/{cur}lease-0000000001"), 1),
            (format!("/sem/leases/{cur}lease-0000000002"), 2),
            (format!("/sem/leases/{cur}lease-0000000003"), 3),
        ];
        let refs: Vec<(&str, i64)> = paths.iter().map(|(p, o)| (p.as_str(), *o)).collect();
        let t = tree(&refs);
        let two = |p: &str| (p == "/sem").then_some(2);
        let locks = decode_container(&t, "/sem", &two);
        assert_eq!(locks.len(), 1);
        assert_eq!(locks[0].recipe, Recipe::CuratorSemaphore);
        assert_eq!(locks[0].holders.len(), 2);
        assert_eq!(locks[0].waiters.len(), 1);
        assert_eq!(locks[0].max_leases, Some(2));
        assert!(decode_container(&t, "/sem/locks", &two).is_empty());
        assert!(decode_container(&t, "/sem/leases", &two).is_empty());
        // Without configuration a semaphore is a semaphore-mutex: one lease.
        let one = decode_container(&t, "/sem", &no_limits);
        assert_eq!(one[0].holders.len(), 1);
        assert_eq!(one[0].waiters.len(), 2);
    }

    #[test]
    fn persistent_and_sequential_leaves_are_not_exclusive_locks() {
        let t = tree(&[
            ("/locks", 0),
            ("/locks/idle", 0),
            ("/locks/q", 0),
            ("/locks/q/lock-0000000001", 5),
        ]);
        assert!(decode_container(&t, "/locks/idle", &no_limits).is_empty());
        assert!(decode_container(&t, "/locks/q/lock-0000000001", &no_limits).is_empty());
        assert!(decode_container(&t, "/missing", &no_limits).is_empty());
    }

    #[test]
    fn tree_remove_drops_subtree_and_child_index() {
        let mut t = tree(&[("/a", 0), ("/a/b", 0), ("/a/b/c", 1)]);
        assert_eq!(t.children("/a").collect::<Vec<_>>(), vec!["b"]);
        t.remove("/a/b");
        assert!(!t.contains("/a/b/c"));
        assert_eq!(t.child_count("/a"), 0);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_mirrored_node_costs_one_56_byte_slot() {
        // The per-node record (ARCHITECTURE.md has the rest of the arithmetic): name offset and
        // length, parent, first child, next and previous sibling, child count (7 × 4 bytes),
        // flags (1, padded to 4), creation time, creation zxid, owner (3 × 8 bytes).
        assert_eq!(std::mem::size_of::<Slot>(), 56);
    }

    #[test]
    fn tree_keeps_names_once_and_rebuilds_paths() {
        let mut t = tree(&[("/r", 0), ("/r/q", 0)]);
        for i in 0..2_000 {
            let meta = NodeMeta {
                ctime_ms: i,
                ephemeral_owner: 5,
                czxid: i,
                version: 3,
                data_len: 0,
                data: None,
            };
            assert!(t.upsert(&format!("/r/q/lock-{i:010}"), meta));
        }
        assert_eq!(t.child_count("/r/q"), 2_000);
        assert_eq!(t.len(), 2_002);
        // Everything but the version and data length comes back.
        let meta = t.get("/r/q/lock-0000000007").expect("node");
        assert_eq!((meta.ctime_ms, meta.czxid, meta.ephemeral_owner), (7, 7, 5));
        let mut paths: Vec<String> = t.iter().map(|(p, _)| p).collect();
        paths.sort();
        assert_eq!(paths[0], "/r");
        assert_eq!(paths[1], "/r/q");
        assert_eq!(paths[2], "/r/q/lock-0000000000");
        // Removals free slots and, past half of the arena, the names' bytes.
        for i in 0..1_990 {
            assert!(t.remove(&format!("/r/q/lock-{i:010}")).is_some());
        }
        assert!(t.garbage * 2 < t.names.len().max(4096 * 2));
        let mut left: Vec<&str> = t.children("/r/q").collect();
        left.sort();
        assert_eq!(left.len(), 10);
        assert_eq!(left[0], "lock-0000001990");
        // Freed slots are taken again.
        let slots = t.slots.len();
        t.upsert("/r/q/again", NodeMeta::unread(1));
        assert_eq!(t.slots.len(), slots);
        assert!(t.get("/r/q/again").is_some_and(|m| m.is_unread()));
    }

    #[test]
    fn placeholders_above_a_root_are_not_nodes() {
        let mut t = tree(&[("/a/b/c", 1)]);
        assert!(!t.contains("/a") && !t.contains("/a/b") && t.contains("/a/b/c"));
        assert_eq!(t.children("/a").count(), 0);
        assert_eq!(t.child_count("/a/b"), 1);
        assert_eq!(t.len(), 1);
        // A placeholder becomes a node when it is mirrored itself.
        let meta = t.get("/a/b/c").expect("node");
        assert!(t.upsert("/a", meta));
        assert_eq!(t.children("/").collect::<Vec<_>>(), vec!["a"]);
        // Removing the last node below a placeholder frees it too.
        t.remove("/a/b/c");
        assert_eq!(t.len(), 1);
        assert!(t.child(ROOT, "a").is_some());
        assert_eq!(t.lookup("/a/b"), None);
    }

    #[test]
    fn lock_candidates_are_every_container_a_lock_may_be_in() {
        let t = tree(&[
            ("/l", 0),
            ("/l/ex", 7),
            ("/l/idle", 0),
            ("/l/q", 0),
            ("/l/q/lock-0000000001", 5),
            ("/l/pool", 0),
            ("/l/pool-__lock__", 0),
        ]);
        let mut found = lock_candidates(&t);
        found.sort();
        assert_eq!(found, vec!["/l", "/l/ex", "/l/pool", "/l/q"]);
        // Exactly the nodes with a lock decoded in them, and their parents.
        for (path, _) in t.iter() {
            if !decode_container(&t, &path, &no_limits).is_empty() {
                assert!(found.contains(&path), "{path} not a candidate");
            }
        }
    }

    #[test]
    fn sequence_parsing_and_paths() {
        assert_eq!(parse_sequence("lock-0000000042"), Some(("lock-", 42)));
        assert_eq!(parse_sequence("0000000001"), Some(("", 1)));
        assert_eq!(parse_sequence("lock-00000000x2"), None);
        assert_eq!(parse_sequence("é000000001"), None);
        assert_eq!(split_parent("/a"), Some(("/", "a")));
        assert_eq!(split_parent("/"), None);
        assert_eq!(
            containers_for_change("/a/b/c"),
            vec!["/a/b/c", "/a/b", "/a"]
        );
    }

    #[test]
    fn kazoo_semaphore_holds_its_leases_and_queues_on_the_sibling_lock() {
        let lease = |n: u8| format!("/k/pool/{}", format!("{n:x}").repeat(32));
        let mut t = tree(&[
            ("/k", 0),
            ("/k/pool", 0),
            ("/k/pool-__lock__", 0),
            (&lease(1), 11),
            (&lease(2), 12),
            (
                "/k/pool-__lock__/0123456789abcdef0123456789abcdef__lock__0000000007",
                13,
            ),
            (
                "/k/pool-__lock__/fedcba9876543210fedcba9876543210__lock__0000000008",
                14,
            ),
        ]);
        let mut meta = t.get("/k/pool").expect("pool");
        meta.data = Some(b"2"[..].into());
        t.upsert("/k/pool", meta);
        let locks = decode_container(&t, "/k/pool", &no_limits);
        assert_eq!(locks.len(), 1);
        let lock = &locks[0];
        assert_eq!(lock.recipe, Recipe::KazooSemaphore);
        assert_eq!(lock.max_leases, Some(2));
        assert_eq!(
            lock.holders.iter().map(|p| p.session).collect::<Vec<_>>(),
            vec![11, 12]
        );
        assert_eq!(
            lock.waiters.iter().map(|p| p.session).collect::<Vec<_>>(),
            vec![13, 14]
        );
        // Neither the leases nor the contender lock are locks of their own.
        assert!(decode_container(&t, &lease(1), &no_limits).is_empty());
        assert!(decode_container(&t, "/k/pool-__lock__", &no_limits).is_empty());
        // A change in the contender queue re-decodes the semaphore.
        assert!(containers_for_change(
            "/k/pool-__lock__/0123456789abcdef0123456789abcdef__lock__0000000007"
        )
        .contains(&"/k/pool".to_string()));
        assert!(containers_for_change("/k/pool-__lock__").contains(&"/k/pool".to_string()));
        // The sibling decides what the semaphore's children and its queue are.
        assert!(containers_for_change_in(&t, "/k/pool-__lock__").contains(&lease(1)));
        assert!(containers_for_change_in(&t, "/k/pool").contains(&"/k/pool-__lock__".to_string()));
    }

    #[test]
    fn a_node_named_only_the_kazoo_suffix_is_no_semaphores_queue() {
        // Found by fuzzing (finding 10): `/sem/-__lock__` once made `/sem/` (looked up as
        // `/sem`) a kazoo semaphore on an incremental change but not on a full read.
        let t = tree(&[("/sem", 0), ("/sem/-__lock__", 0)]);
        assert_eq!(kazoo_semaphore_of("/sem/-__lock__"), None);
        assert_eq!(kazoo_semaphore_of("/-__lock__"), None);
        assert_eq!(kazoo_semaphore_of("/a/b-__lock__"), Some("/a/b"));
        let changed = containers_for_change_in(&t, "/sem/-__lock__");
        assert!(!changed.iter().any(|c| c.ends_with('/') && c != "/"));
        assert!(!lock_candidates(&t)
            .iter()
            .any(|c| c.ends_with('/') && c != "/"));
        for c in changed {
            assert!(decode_container(&t, &c, &no_limits).is_empty(), "{c}");
        }
    }

    #[test]
    fn a_kazoo_lock_is_a_mutex_until_readers_share_its_queue() {
        let w = "/k/m/0123456789abcdef0123456789abcdef__lock__0000000001";
        let t = tree(&[("/k", 0), ("/k/m", 0), (w, 5)]);
        let lock = &decode_container(&t, "/k/m", &no_limits)[0];
        assert_eq!(lock.holders[0].mode, None);
        let r = "/k/m/fedcba9876543210fedcba9876543210__rlock__0000000002";
        let t = tree(&[("/k", 0), ("/k/m", 0), (w, 5), (r, 6)]);
        let lock = &decode_container(&t, "/k/m", &no_limits)[0];
        assert_eq!(lock.holders[0].mode, Some(LockMode::Write));
        assert_eq!(lock.waiters[0].mode, Some(LockMode::Read));
    }

    #[test]
    fn decoders_never_panic_on_odd_names() {
        let odd = [
            "",
            "-",
            "ü",
            "_c_",
            "__READ__",
            "-R-0000000001",
            "lock-\u{0}0000000001",
            "9999999999999",
        ];
        for (i, name) in odd.iter().enumerate() {
            let mut t = tree(&[("/o", 0)]);
            t.upsert(
                &format!("/o/{name}"),
                NodeMeta {
                    ctime_ms: i as i64,
                    ephemeral_owner: 1,
                    czxid: i as i64,
                    version: 0,
                    data_len: 0,
                    data: None,
                },
            );
            let _ = decode_container(&t, "/o", &no_limits);
            let _ = decode_container(&t, &format!("/o/{name}"), &no_limits);
        }
    }
}
