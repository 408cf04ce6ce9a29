//! Stuck locks: how long a wait or a hold may last before lockscope marks it, at two levels
//! (warning, critical), configured globally, per source and per recipe.
//!
//! A stale rule (`rules.rs`) says a lock looks broken; a stuck threshold says a wait or a
//! hold has simply lasted longer than the people running the system accept, which is what an
//! on-call engineer asks first ("what is stuck, since when"). One pure judgement
//! ([`judge`]) serves the server (the API's `stuck`, the overview's `state=stuck` filter and
//! count, `lockscope_lock_stuck`) and the web UI (row and participant marks), so they agree.
//!
//! Each limit is resolved on its own, most specific first: the lock's recipe, then its source,
//! then the global value; a limit set nowhere is not judged.

use crate::wire::{
    LockView, StuckKind, StuckLevel, StuckLimits, StuckRules, StuckThresholds, StuckView,
};

impl StuckLimits {
    /// Each limit from `self`, else from `fallback`.
    fn or(self, fallback: StuckLimits) -> StuckLimits {
        StuckLimits {
            warning_ms: self.warning_ms.or(fallback.warning_ms),
            critical_ms: self.critical_ms.or(fallback.critical_ms),
        }
    }

    /// The level a wait or hold of `for_ms` reaches, with the limit it passed.
    pub fn level(&self, for_ms: i64) -> Option<(StuckLevel, i64)> {
        if let Some(limit) = self.critical_ms.filter(|l| for_ms > *l) {
            return Some((StuckLevel::Critical, limit));
        }
        self.warning_ms
            .filter(|l| for_ms > *l)
            .map(|limit| (StuckLevel::Warning, limit))
    }
}

impl StuckRules {
    fn or(self, fallback: StuckRules) -> StuckRules {
        StuckRules {
            wait: self.wait.or(fallback.wait),
            hold: self.hold.or(fallback.hold),
        }
    }

    /// The limits of one kind.
    pub fn of(&self, kind: StuckKind) -> StuckLimits {
        match kind {
            StuckKind::Wait => self.wait,
            StuckKind::Hold => self.hold,
        }
    }
}

impl StuckThresholds {
    /// The limits that apply to a lock of `recipe` in `source`: each limit from the recipe's
    /// settings, else the source's, else the global one.
    pub fn for_lock(&self, source: &str, recipe: &str) -> StuckRules {
        let mut limits = self.global;
        if let Some(by_source) = self.sources.get(source) {
            limits = by_source.or(limits);
        }
        if let Some(by_recipe) = self.recipes.get(recipe) {
            limits = by_recipe.or(limits);
        }
        limits
    }

    /// Whether any limit is set at all.
    pub fn is_empty(&self) -> bool {
        *self == StuckThresholds::default()
    }
}

/// The worst wait or hold of `lock` past its limits as of `now_ms`: critical before warning,
/// then the one past its limit the longest; `None` when nothing is past a limit.
pub fn judge(lock: &LockView, now_ms: i64, thresholds: &StuckThresholds) -> Option<Box<StuckView>> {
    let limits = thresholds.for_lock(&lock.source, &lock.recipe);
    let holds = lock
        .holders
        .iter()
        .map(|h| (StuckKind::Hold, h.node.as_str(), h.since_ms));
    let waits = lock
        .waiters
        .iter()
        .map(|w| (StuckKind::Wait, w.node.as_str(), w.since_ms));
    holds
        .chain(waits)
        .filter_map(|(kind, node, since)| {
            let for_ms = now_ms.saturating_sub(since).max(0);
            let (level, limit_ms) = limits.of(kind).level(for_ms)?;
            Some(Box::new(StuckView {
                level,
                kind,
                node: node.to_string(),
                since_ms: since,
                for_ms,
                limit_ms,
            }))
        })
        .max_by_key(|s| (s.level, s.for_ms - s.limit_ms, s.kind == StuckKind::Wait))
}

/// The instant from which a wait or hold of `lock`, as recorded, is past a limit of
/// `thresholds` ([`judge`] is some exactly from then on): `i64::MAX` when none ever is.
pub fn stuck_from(lock: &LockView, thresholds: &StuckThresholds) -> i64 {
    if thresholds.is_empty() {
        return i64::MAX;
    }
    let rules = thresholds.for_lock(&lock.source, &lock.recipe);
    let limits = |kind| {
        let l = rules.of(kind);
        [l.warning_ms, l.critical_ms].into_iter().flatten()
    };
    let holds = lock.holders.iter().map(|h| (StuckKind::Hold, h.since_ms));
    let waits = lock.waiters.iter().map(|w| (StuckKind::Wait, w.since_ms));
    let candidates: Vec<i64> = holds
        .chain(waits)
        .flat_map(|(kind, since)| {
            limits(kind).map(move |limit| since.saturating_add(limit.max(0)).saturating_add(1))
        })
        .collect();
    if candidates.is_empty() {
        return i64::MAX;
    }
    crate::rules::first_instant(candidates, |now| judge(lock, now, thresholds).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{HolderView, WaiterView};

    fn levels(warning: i64, critical: i64) -> StuckLimits {
        StuckLimits {
            warning_ms: Some(warning),
            critical_ms: Some(critical),
        }
    }

    fn lock(source: &str, recipe: &str, held_since: &[i64], waiting_since: &[i64]) -> LockView {
        LockView {
            source: source.into(),
            recipe: recipe.into(),
            holders: held_since
                .iter()
                .enumerate()
                .map(|(i, s)| HolderView {
                    node: format!("h{i}"),
                    since_ms: *s,
                    ..HolderView::default()
                })
                .collect(),
            waiters: waiting_since
                .iter()
                .enumerate()
                .map(|(i, s)| WaiterView {
                    node: format!("w{i}"),
                    since_ms: *s,
                    ..WaiterView::default()
                })
                .collect(),
            ..LockView::default()
        }
    }

    #[test]
    fn the_most_specific_limit_applies_field_by_field() {
        let mut t = StuckThresholds {
            global: StuckRules {
                wait: levels(30_000, 120_000),
                hold: levels(300_000, 1_800_000),
            },
            ..StuckThresholds::default()
        };
        t.sources.insert(
            "zk".into(),
            StuckRules {
                hold: StuckLimits {
                    warning_ms: Some(60_000),
                    critical_ms: None,
                },
                ..StuckRules::default()
            },
        );
        t.recipes.insert(
            "shedlock".into(),
            StuckRules {
                hold: StuckLimits {
                    warning_ms: None,
                    critical_ms: Some(7_200_000),
                },
                ..StuckRules::default()
            },
        );
        let l = t.for_lock("zk", "shedlock");
        assert_eq!(l.hold, levels(60_000, 7_200_000));
        assert_eq!(l.wait, levels(30_000, 120_000));
        assert_eq!(t.for_lock("redis", "token_lock"), t.global);
    }

    #[test]
    fn a_wait_of_1m48s_is_a_warning_and_the_worst_participant_is_named() {
        let t = StuckThresholds {
            global: StuckRules {
                wait: levels(30_000, 120_000),
                hold: levels(300_000, 1_800_000),
            },
            ..StuckThresholds::default()
        };
        let now = 10_000_000;
        let quiet = lock("zk", "queue", &[now - 1_000], &[now - 5_000]);
        assert_eq!(judge(&quiet, now, &t), None);
        let waiting = lock(
            "zk",
            "queue",
            &[now - 200_000],
            &[now - 108_000, now - 40_000],
        );
        let s = judge(&waiting, now, &t).expect("stuck");
        assert_eq!(
            (s.level, s.kind, s.node.as_str(), s.for_ms, s.limit_ms),
            (StuckLevel::Warning, StuckKind::Wait, "w0", 108_000, 30_000)
        );
        let critical = lock("zk", "queue", &[now - 2_000_000], &[now - 108_000]);
        let s = judge(&critical, now, &t).expect("stuck");
        assert_eq!((s.level, s.kind), (StuckLevel::Critical, StuckKind::Hold));
        // Nothing configured: nothing judged.
        assert_eq!(judge(&critical, now, &StuckThresholds::default()), None);
    }
}
