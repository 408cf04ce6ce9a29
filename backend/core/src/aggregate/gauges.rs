//! Lock gauges kept current as locks change: per source and `lock` label, the holders, waiters,
//! watchers, herd flags, oldest wait, nearest TTL deadline and unattributed waiters of the locks
//! under that label, and per source the locks by recipe. The lock table applies every published
//! change (the lock's view before and after) here, so a scrape reads aggregates — one entry per
//! label, at most `max_lock_labels` + 1 per source — and never walks the locks. Time-dependent
//! values (how long the oldest waiter has waited, how long a TTL has left) are kept as instants
//! and turned into durations at the scrape.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use lockscope_model::wire::LockView;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::counters::{recipe_label, LabelTable, LockLabels, Text};

/// What the locks under one label add up to.
#[derive(Debug, Default)]
struct LabelAgg {
    locks: i64,
    holders: i64,
    waiters: i64,
    watchers: i64,
    herd: i64,
    /// Each lock's oldest waiter's start (epoch ms), as a multiset.
    oldest_waiter: BTreeMap<i64, u32>,
    /// Each TTL lock's deadline (epoch ms), as a multiset.
    expires: BTreeMap<i64, u32>,
    /// Each lock's unattributed waiters, as a multiset.
    unattributed: BTreeMap<u32, u32>,
}

fn add<K: Ord>(set: &mut BTreeMap<K, u32>, key: K, sign: i64) {
    if sign > 0 {
        *set.entry(key).or_default() += 1;
    } else if let std::collections::btree_map::Entry::Occupied(mut e) = set.entry(key) {
        *e.get_mut() -= 1;
        if *e.get() == 0 {
            e.remove();
        }
    }
}

impl LabelAgg {
    fn apply(&mut self, view: &LockView, sign: i64) {
        self.locks += sign;
        self.holders += sign * view.holders.len() as i64;
        self.waiters += sign * view.waiters.len() as i64;
        self.watchers += sign * i64::from(view.watchers);
        self.herd += sign * i64::from(view.herd);
        if let Some(oldest) = view.waiters.iter().map(|w| w.since_ms).min() {
            add(&mut self.oldest_waiter, oldest, sign);
        }
        if let Some(at) = view.expires_at_ms {
            add(&mut self.expires, at, sign);
        }
        if let Some(n) = view.unattributed_waiters {
            add(&mut self.unattributed, n, sign);
        }
    }
}

#[derive(Debug)]
struct SourceGauges {
    source: Text,
    /// Every recipe label the source's locks can carry (its backend's closed set).
    recipe_labels: &'static [&'static str],
    labels: Arc<Mutex<LabelTable>>,
    per_label: BTreeMap<Text, LabelAgg>,
    recipes: BTreeMap<Text, i64>,
}

impl SourceGauges {
    /// The `recipe` label of a lock's recipe: one of its backend's closed set, else `other`.
    fn recipe(&self, recipe: &str) -> &'static str {
        recipe_label(self.recipe_labels, recipe)
    }

    fn apply(&mut self, view: &LockView, sign: i64) {
        let label = self
            .labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .label_for(&view.path);
        let agg = self.per_label.entry(label.clone()).or_default();
        agg.apply(view, sign);
        if agg.locks <= 0 {
            self.per_label.remove(&label);
        }
        // Counted in place: a label is allocated once, when a recipe is first seen.
        let recipe = self.recipe(&view.recipe);
        match self.recipes.get_mut(recipe) {
            Some(count) => *count += sign,
            None => {
                self.recipes.insert(Text::new(recipe), sign);
            }
        }
    }
}

/// Every source's lock gauges (see the module docs).
#[derive(Debug, Default)]
pub struct GaugeState {
    sources: Vec<SourceGauges>,
    by_name: HashMap<Arc<str>, usize>,
}

impl GaugeState {
    /// Adds a source whose lock labels come from `labels`, with its recipes shown at 0 while it
    /// has none of them.
    pub fn add_source(
        &mut self,
        name: &str,
        labels: Arc<Mutex<LabelTable>>,
        recipe_labels: &'static [&'static str],
        known_recipes: &[&str],
    ) {
        let mut source = SourceGauges {
            source: Text::new(name),
            recipe_labels,
            labels,
            per_label: BTreeMap::new(),
            recipes: BTreeMap::new(),
        };
        for recipe in known_recipes {
            let recipe = Text::new(source.recipe(recipe));
            source.recipes.insert(recipe, 0);
        }
        self.by_name.insert(Arc::from(name), self.sources.len());
        self.sources.push(source);
    }

    /// One lock changed from `old` to `new` (either may be absent).
    pub fn change(&mut self, old: Option<&LockView>, new: Option<&LockView>) {
        for (view, sign) in [(old, -1), (new, 1)] {
            let Some(view) = view else { continue };
            if let Some(&index) = self.by_name.get(view.source.as_str()) {
                self.sources[index].apply(view, sign);
            }
        }
    }
}

/// Writes the lock gauges of a shared [`GaugeState`] at each scrape.
#[derive(Debug, Clone)]
pub struct GaugeCollector {
    pub state: Arc<Mutex<GaugeState>>,
}

type Pick = fn(&LabelAgg, i64) -> Option<f64>;

const GAUGES: [(&str, &str, Pick); 7] = [
    (
        "lockscope_lock_holders",
        "Participants holding the lock.",
        |a, _| Some(a.holders as f64),
    ),
    (
        "lockscope_lock_waiters",
        "Participants queued for the lock.",
        |a, _| Some(a.waiters as f64),
    ),
    (
        "lockscope_lock_unattributed_waiters",
        "Clients the server shows blocked in a way that may be waiting on this lock but does not attribute to a key (python-redis-lock: BLPOP on the lock's server).",
        // Only locks whose waiters cannot be attributed have the series.
        |a, _| a.unattributed.keys().next_back().map(|n| f64::from(*n)),
    ),
    (
        "lockscope_lock_oldest_wait_seconds",
        "Longest current wait for the lock.",
        |a, now| {
            Some(
                a.oldest_waiter
                    .keys()
                    .next()
                    .map_or(0.0, |since| (now - since).max(0) as f64 / 1000.0),
            )
        },
    ),
    (
        "lockscope_lock_watchers",
        "Sessions watching the holder node(s), merged over the ensemble.",
        |a, _| Some(a.watchers as f64),
    ),
    (
        "lockscope_lock_herd",
        "1 when more than one session wakes on release (herd effect).",
        |a, _| Some(if a.herd > 0 { 1.0 } else { 0.0 }),
    ),
    (
        "lockscope_lock_ttl_seconds",
        "Time left before the lock's TTL runs out (TTL locks only).",
        // Not a TTL lock: no series.
        |a, now| {
            a.expires
                .keys()
                .next()
                .map(|at| (at - now).max(0) as f64 / 1000.0)
        },
    ),
];

/// Integral values are written as integers (`3`, not `3.0`).
fn encode_value(
    encoder: prometheus_client::encoding::MetricEncoder<'_>,
    value: f64,
) -> std::fmt::Result {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        ConstGauge::new(value as i64).encode(encoder)
    } else {
        ConstGauge::new(value).encode(encoder)
    }
}

impl Collector for GaugeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = crate::now_ms();
        let mut locks = encoder.encode_descriptor(
            "lockscope_locks",
            "Locks currently known, by recipe.",
            None,
            MetricType::Gauge,
        )?;
        for source in &state.sources {
            for (recipe, count) in &source.recipes {
                let labels = [
                    ("source", source.source.clone()),
                    ("recipe", recipe.clone()),
                ];
                ConstGauge::new(*count).encode(locks.encode_family(&labels)?)?;
            }
        }
        for (name, help, pick) in GAUGES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for source in &state.sources {
                for (label, agg) in &source.per_label {
                    let Some(value) = pick(agg, now) else {
                        continue;
                    };
                    let labels = LockLabels {
                        source: source.source.clone(),
                        lock: label.clone(),
                    };
                    encode_value(family.encode_family(&labels)?, value)?;
                }
            }
        }
        Ok(())
    }
}
