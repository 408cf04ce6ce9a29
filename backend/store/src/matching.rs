//! Which of one replica's lock events another replica has stored already.
//!
//! Every replica observes the same sources, so each sees the same events, each at its own
//! instant (a watch fires on both within milliseconds; a polled database within a poll
//! interval). An event's identity across replicas is its lock, kind, node and session; the
//! same identity recurs (a Redisson thread takes the same lock again, a database connection
//! calls `GET_LOCK` twice), so events are matched one to one, in time order, each to the
//! earliest unmatched stored event of the same identity within [`WINDOW_MS`]. Used when a
//! replica takes over writing (the gap its predecessor left) and when a lock's page joins the
//! events in memory with those in the store.

use std::collections::{HashMap, VecDeque};

use lockscope_model::wire::{EventKind, LockEvent};

/// Two replicas' instants for one event differ by at most this much.
pub const WINDOW_MS: i64 = 10_000;

/// A taking-over writer assumes its predecessor wrote what both saw before the predecessor's
/// `through_ms` less this (events can be booked a little after the instant they carry).
pub const MARGIN_MS: i64 = 30_000;

type Key<'a> = (&'a str, EventKind, &'a str, &'a str);
type Owned = (String, EventKind, String, String);

/// The events of `candidates` (lock id, event; in the order observed) that match none of
/// `stored` (lock id, kind, node, session, at_ms).
pub fn unmatched<'a>(
    stored: impl IntoIterator<Item = (Key<'a>, i64)>,
    candidates: Vec<(String, LockEvent)>,
) -> Vec<(String, LockEvent)> {
    let mut by_key: HashMap<Owned, VecDeque<i64>> = HashMap::new();
    for ((lock, kind, node, session), at) in stored {
        by_key
            .entry((lock.into(), kind, node.into(), session.into()))
            .or_default()
            .push_back(at);
    }
    for times in by_key.values_mut() {
        times.make_contiguous().sort_unstable();
    }
    candidates
        .into_iter()
        .filter(|(lock, e)| {
            let key = (lock.clone(), e.kind, e.node.clone(), e.session.clone());
            let Some(times) = by_key.get_mut(&key) else {
                return true;
            };
            // Stored events too old to match this one match no later one either.
            while times.front().is_some_and(|at| *at < e.at_ms - WINDOW_MS) {
                times.pop_front();
            }
            match times.front() {
                Some(at) if *at <= e.at_ms + WINDOW_MS => {
                    times.pop_front();
                    false
                }
                _ => true,
            }
        })
        .collect()
}

/// One lock's events from memory joined with those from the store: the stored ones, and the
/// remembered ones that match none of them (observed here, not written yet, or written by
/// another replica at its own instant), in time order.
pub fn join(stored: Vec<LockEvent>, remembered: Vec<LockEvent>) -> Vec<LockEvent> {
    const LOCK: &str = "";
    let keys: Vec<(Key<'_>, i64)> = stored
        .iter()
        .map(|e| ((LOCK, e.kind, e.node.as_str(), e.session.as_str()), e.at_ms))
        .collect();
    let extra = unmatched(
        keys,
        remembered
            .into_iter()
            .map(|e| (LOCK.to_string(), e))
            .collect(),
    );
    let mut events = stored;
    events.extend(extra.into_iter().map(|(_, e)| e));
    events.sort_by_key(|e| e.at_ms);
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: i64, kind: EventKind, node: &str) -> LockEvent {
        LockEvent {
            at_ms: at,
            kind,
            node: node.into(),
            session: "s".into(),
            cause: None,
            duration_ms: None,
        }
    }

    fn key(e: &LockEvent) -> (Key<'_>, i64) {
        (("l", e.kind, e.node.as_str(), e.session.as_str()), e.at_ms)
    }

    #[test]
    fn an_event_stored_by_another_replica_at_its_own_instant_matches_once() {
        use EventKind::*;
        // The predecessor wrote the first acquisition and release of a thread that took the
        // lock twice, then died; this replica saw all four, a little later each.
        let stored = [event(1_000, Acquired, "t1"), event(2_000, Released, "t1")];
        let seen = vec![
            event(1_004, Acquired, "t1"),
            event(2_003, Released, "t1"),
            event(2_500, Acquired, "t1"),
            event(3_000, Released, "t1"),
        ];
        let left = unmatched(
            stored.iter().map(key),
            seen.into_iter().map(|e| ("l".to_string(), e)).collect(),
        );
        let at: Vec<i64> = left.iter().map(|(_, e)| e.at_ms).collect();
        assert_eq!(at, vec![2_500, 3_000]);
    }

    #[test]
    fn events_of_other_locks_nodes_or_far_apart_do_not_match() {
        use EventKind::*;
        let stored = [event(1_000, Acquired, "a")];
        let seen = vec![
            event(1_000, Acquired, "b"),
            event(1_000, Queued, "a"),
            event(1_000 + WINDOW_MS + 1, Acquired, "a"),
        ];
        let left = unmatched(
            stored.iter().map(key),
            seen.into_iter().map(|e| ("l".to_string(), e)).collect(),
        );
        assert_eq!(left.len(), 3);
    }

    #[test]
    fn joining_keeps_stored_events_and_adds_only_the_unmatched_remembered_ones() {
        use EventKind::*;
        let stored = vec![event(1_000, Acquired, "a"), event(1_500, Released, "a")];
        let remembered = vec![
            event(1_002, Acquired, "a"),
            event(1_499, Released, "a"),
            event(1_600, Acquired, "b"),
        ];
        let joined = join(stored, remembered);
        let at: Vec<i64> = joined.iter().map(|e| e.at_ms).collect();
        assert_eq!(at, vec![1_000, 1_500, 1_600]);
    }
}
