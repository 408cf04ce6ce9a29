//! This replica's clock against the store's: the offset (store time − this replica's time)
//! measured from the round trips the store task makes anyway (each beat asks the store for its
//! time), so that whatever replicas compare with each other — who is alive, how far the
//! history is written, whether two replicas' instants are the same event — is compared in one
//! time, the store's. A replica whose clock is a minute off then changes nothing of the
//! election, the takeover's gap or the matching window.
//!
//! It knows nothing of SQL: the store task hands it (sent, store time, received) triples.
//! The estimate is the offset of the sample with the shortest round trip among the last
//! [`SAMPLES`] (its error is at most half that round trip), and it moves only when a better
//! estimate differs from it by more than that error, so it stays steady from beat to beat.

use std::collections::VecDeque;

/// Round trips remembered.
pub const SAMPLES: usize = 16;
/// The estimate moves only by more than this (or half the best round trip, if larger), ms.
const STEADY_MS: i64 = 2;

/// The offset estimate; `None` until the first sample.
#[derive(Debug, Default)]
pub struct Clock {
    samples: VecDeque<(i64, i64)>,
    offset: Option<i64>,
}

impl Clock {
    /// A round trip: asked at `sent_ms` (this replica's time), the store said `store_ms`, the
    /// answer came at `received_ms`. Answers the offset to use now.
    pub fn sample(&mut self, sent_ms: i64, store_ms: i64, received_ms: i64) -> i64 {
        let rtt = (received_ms - sent_ms).max(0);
        let offset = store_ms - (sent_ms + rtt / 2);
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((rtt, offset));
        let (best_rtt, best) = self
            .samples
            .iter()
            .copied()
            .min_by_key(|(rtt, _)| *rtt)
            .unwrap_or((rtt, offset));
        let offset = match self.offset {
            Some(current) if (best - current).abs() <= STEADY_MS.max(best_rtt / 2) => current,
            _ => best,
        };
        self.offset = Some(offset);
        offset
    }

    /// Store time − this replica's time, ms (`None`: not measured yet).
    #[cfg(test)]
    pub fn offset(&self) -> Option<i64> {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_90_s_behind_is_measured_within_half_a_round_trip_and_stays_steady() {
        let mut clock = Clock::default();
        // The store is 90 s ahead; round trips of 2 to 40 ms, answered mid-way.
        let mut at = 1_000_000;
        let mut seen = Vec::new();
        for (i, rtt) in [40, 2, 30, 4, 3, 25, 2, 8].into_iter().enumerate() {
            let store = at + 90_000 + rtt / 2 + (i as i64 % 2);
            seen.push(clock.sample(at, store, at + rtt));
            at += 250;
        }
        assert!(seen.iter().all(|o| (o - 90_000).abs() <= 20), "{seen:?}");
        // From the first short round trip on, the estimate does not move.
        assert!(seen[1..].windows(2).all(|w| w[0] == w[1]), "{seen:?}");
        assert_eq!(clock.offset(), Some(seen[7]));
    }

    #[test]
    fn a_clock_that_was_set_moves_the_estimate() {
        let mut clock = Clock::default();
        for i in 0..SAMPLES as i64 {
            clock.sample(i * 250, i * 250 - 90_000 + 1, i * 250 + 2);
        }
        assert_eq!(clock.offset(), Some(-90_000));
        // The replica's clock jumps 90 s forward (someone set it): after the old samples
        // age out the offset follows.
        for i in 0..SAMPLES as i64 {
            let at = 200_000 + i * 250;
            clock.sample(at, at - 180_000 + 1, at + 2);
        }
        assert_eq!(clock.offset(), Some(-180_000));
    }
}
