//! Keys (nodes) under a source's watched patterns (roots) that no recipe reads as a lock: a
//! count per member and a bounded sample ([`UnrecognisedKeys`]), which the source's view shows
//! (`SourceView::unrecognised`) and `/metrics` exports (`lockscope_unrecognised_keys`). The
//! keys themselves are kept only as 64-bit hashes (8 bytes each in the set), so a pattern that
//! matches a million foreign keys costs megabytes, not the keys.

use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use lockscope_model::wire::{UnrecognisedKey, UNRECOGNISED_SAMPLE};

/// Unrecognised keys per member, and a sample of at most [`UNRECOGNISED_SAMPLE`].
#[derive(Debug, Default)]
pub struct UnrecognisedKeys {
    members: Vec<HashSet<u64>>,
    /// By key as read: the member it was read on and what it is.
    sample: BTreeMap<Vec<u8>, (usize, UnrecognisedKey)>,
}

fn hash(key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl UnrecognisedKeys {
    /// Starts over with `members` members (the member set changed).
    pub fn reset(&mut self, members: usize) {
        self.members = vec![HashSet::new(); members];
        self.sample.clear();
    }

    /// A full read of `member` begins: what it had is forgotten (the read names all it has).
    pub fn clear_member(&mut self, member: usize) {
        if let Some(set) = self.members.get_mut(member) {
            set.clear();
        }
        self.sample.retain(|_, (m, _)| *m != member);
    }

    /// `key` was read on `member`: unrecognised (`Some`) or not (a lock, or gone). Answers
    /// whether the count or the sample changed.
    pub fn note(&mut self, member: usize, key: &[u8], what: Option<&UnrecognisedKey>) -> bool {
        if member >= self.members.len() {
            self.members.resize_with(member + 1, HashSet::new);
        }
        match what {
            Some(what) => {
                let mut changed = self.members[member].insert(hash(key));
                if self.sample.len() < UNRECOGNISED_SAMPLE || self.sample.contains_key(key) {
                    let entry = (member, what.clone());
                    changed |= self.sample.get(key) != Some(&entry);
                    self.sample.insert(key.to_vec(), entry);
                }
                changed
            }
            None => {
                let removed = self.members[member].remove(&hash(key));
                if removed {
                    self.sample.remove(key);
                }
                removed
            }
        }
    }

    /// How many: summed over members, or (`replicated`: every member holds the same keys, as a
    /// Redlock's masters do) the most any member has.
    pub fn count(&self, replicated: bool) -> u64 {
        let sizes = self.members.iter().map(|s| s.len() as u64);
        if replicated {
            sizes.max().unwrap_or(0)
        } else {
            sizes.sum()
        }
    }

    /// The sample, by key.
    pub fn sample(&self) -> Vec<UnrecognisedKey> {
        self.sample.values().map(|(_, k)| k.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> UnrecognisedKey {
        UnrecognisedKey {
            key: name.into(),
            kind: "set".into(),
            size: None,
            ttl_ms: None,
            head: String::new(),
            why: "test".into(),
        }
    }

    #[test]
    fn counts_and_a_bounded_sample_follow_reads() {
        let mut u = UnrecognisedKeys::default();
        u.reset(2);
        for i in 0..100 {
            let name = format!("k{i}");
            u.note(i % 2, name.as_bytes(), Some(&key(&name)));
        }
        assert_eq!(u.count(false), 100);
        assert_eq!(u.count(true), 50);
        assert_eq!(u.sample().len(), UNRECOGNISED_SAMPLE);
        // A key read again as a lock (or gone) leaves the count and the sample.
        let first = u.sample()[0].key.clone();
        u.note(0, first.as_bytes(), None);
        assert_eq!(u.count(false), 99);
        assert!(u.sample().iter().all(|k| k.key != first));
        // A full read of member 1 that finds nothing.
        u.clear_member(1);
        assert_eq!(u.count(false), 49);
        // Unknown keys going away change nothing.
        u.note(1, b"never-seen", None);
        assert_eq!(u.count(false), 49);
    }
}
