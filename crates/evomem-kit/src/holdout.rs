//! Validation decisions held out of what a policy has observed, for fitting
//! a ranker's settings at run time (`fit=auto`).
//!
//! Why here: seqmem fits its weights this way, and itemknn and BPR choose
//! their shrinkage and regularisation the same way; the rule that keeps the
//! fit off test targets must be one tested piece of code, not one copy per
//! policy.
//!
//! **The rule.** For every user with at least two observed events, the
//! *latest observed* event is held out and becomes that user's fit target.
//! A policy never observes a test target, so under the retrospective
//! protocol of a test run that is the user's validation interaction, and
//! under `--target valid` the one before it. The candidates are the target
//! and `negatives` items the user never touched in the observed events,
//! drawn uniformly from the catalog by ChaCha8 seeded with the run seed and
//! the user ([`mix`]). A caller scores the decisions on a model built from
//! every observed event *except* the held-out ones.
//!
//! **Where negatives come from** ([`NegativePool`]). Uniform draws from the
//! catalog match the harness when it samples negatives uniformly from the
//! catalog. A data set evaluated on fixed candidate lists (CDs' `.random`)
//! can hold a catalog mostly of items nobody was observed with (64,031
//! items, 473 of them in the training interactions), which recency and
//! popularity separate from any observed target trivially: a fit on such
//! decisions learns that and nothing else (fit MRR 0.85 against a test
//! HR@1 of 0.03). [`NegativePool::Observed`] draws from the items observed
//! in the events instead, and [`NegativePool::Auto`] does so when fewer than
//! half the catalog's items were observed (the sign of such a catalog; on
//! ml-100k and the generated sets most items are observed and the draws
//! are the catalog's, as before).
//!
//! **Fitting on both pools** ([`fit_pools`], [`hold_out_pools`]). A small
//! observed share has a second cause: a subsample evaluated against uniform
//! draws from the whole catalog (Amazon Beauty with 300 users observes about
//! 2,000 of 12,101 items). There the observed pool is the wrong one: a
//! held-out target, often seen by nobody else, is the least observed
//! candidate among observed negatives, a fit learns to prefer items nobody
//! was observed with, and the evaluated decisions' many never-observed
//! negatives then rank first (issue 55: seqmem HR@1 0.057, below random).
//! A policy cannot tell the two cases apart, so under `auto` with fewer than
//! half the catalog observed a fit draws its decisions from both pools and
//! must win on each ([`crate::pairwise::choose_across`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, HashSet};

/// One observed event: `(user, item, source timestamp)`.
pub type Event = (u32, u32, Option<i64>);

/// SplitMix64 of `seed` and `index`: independent per-user streams.
pub fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where a decision's negatives are drawn from (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NegativePool {
    /// Uniformly from the catalog (ids `0..n_items`).
    Catalog,
    /// Uniformly from the distinct items of the events.
    Observed,
    /// [`NegativePool::Observed`] when fewer than half the catalog's items
    /// occur in the events, else [`NegativePool::Catalog`].
    #[default]
    Auto,
}

impl NegativePool {
    /// The pool `Auto` stands for, given `observed` distinct items of a
    /// catalog of `n_items` (the others stand for themselves).
    pub fn resolve(self, observed: usize, n_items: usize) -> Self {
        match self {
            Self::Auto if 2 * observed < n_items => Self::Observed,
            Self::Auto => Self::Catalog,
            other => other,
        }
    }

    /// The pool's name (`catalog`, `observed`, `auto`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Catalog => "catalog",
            Self::Observed => "observed",
            Self::Auto => "auto",
        }
    }
}

impl std::str::FromStr for NegativePool {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "catalog" => Ok(Self::Catalog),
            "observed" => Ok(Self::Observed),
            "auto" => Ok(Self::Auto),
            other => Err(format!(
                "`{other}` is not a negative pool (catalog, observed or auto)"
            )),
        }
    }
}

/// The pool [`hold_out`] draws negatives from for `events` over a catalog
/// of `n_items` (`pool` with `Auto` resolved).
pub fn pool_for(events: &[Event], n_items: usize, pool: NegativePool) -> NegativePool {
    let observed: HashSet<u32> = events.iter().map(|e| e.1).collect();
    pool.resolve(observed.len(), n_items)
}

/// The concrete pools a fit draws its decisions from and must win on
/// ([`crate::pairwise::choose_across`]). `catalog` and `observed` stand for
/// themselves. `auto` is `catalog` when at least half the catalog's items
/// occur in `events` (the two pools then draw alike: ml-100k, the generated
/// sets), and both `catalog` and `observed` otherwise: such a catalog is
/// the mark of fixed candidate lists of observed items (CDs) *or* of a
/// subsample evaluated against uniform draws from the whole catalog (Amazon
/// Beauty with `--users 300`, issue 55), and a policy cannot tell which, so
/// its fitted weights must win on both.
pub fn fit_pools(events: &[Event], n_items: usize, pool: NegativePool) -> Vec<NegativePool> {
    match pool_for(events, n_items, pool) {
        NegativePool::Observed if pool == NegativePool::Auto => {
            vec![NegativePool::Catalog, NegativePool::Observed]
        }
        resolved => vec![resolved],
    }
}

/// The name of a list of pools: `catalog`, `observed`,
/// `catalog+observed`, or `none`.
pub fn pools_name(pools: &[NegativePool]) -> &'static str {
    match pools {
        [] => "none",
        [one] => one.name(),
        [NegativePool::Catalog, NegativePool::Observed] => "catalog+observed",
        _ => "mixed",
    }
}

/// Which decisions to hold out.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldOutSettings {
    /// Negatives per decision.
    pub negatives: usize,
    /// Decisions at most, a seeded sample of users (0 = every user).
    pub users: usize,
    /// Run seed.
    pub seed: u64,
    /// Where negatives are drawn from.
    pub pool: NegativePool,
}

/// One fit decision: the user, the held-out target and the negatives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The user.
    pub user: u32,
    /// The held-out item.
    pub target: u32,
    /// Items the user never touched.
    pub negatives: Vec<u32>,
}

/// The held-out events (a mask over `events`) and the decisions, users
/// ascending. See the module docs.
pub fn hold_out(events: &[Event], n_items: usize, s: &HoldOutSettings) -> (Vec<bool>, Vec<Held>) {
    let mut last: HashMap<u32, usize> = HashMap::new();
    let mut count: HashMap<u32, usize> = HashMap::new();
    let mut touched: HashMap<u32, HashSet<u32>> = HashMap::new();
    for (k, &(u, i, _)) in events.iter().enumerate() {
        last.insert(u, k);
        *count.entry(u).or_insert(0) += 1;
        touched.entry(u).or_default().insert(i);
    }
    let mut users: Vec<u32> = count
        .iter()
        .filter(|(_, &n)| n >= 2)
        .map(|(&u, _)| u)
        .collect();
    users.sort_unstable();
    if s.users > 0 && users.len() > s.users {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(s.seed, u64::MAX));
        let mut pick = rand::seq::index::sample(&mut rng, users.len(), s.users).into_vec();
        pick.sort_unstable();
        users = pick
            .into_iter()
            .filter_map(|k| users.get(k).copied())
            .collect();
    }
    let mut observed: Vec<u32> = touched.values().flatten().copied().collect();
    observed.sort_unstable();
    observed.dedup();
    let from_observed = s.pool.resolve(observed.len(), n_items) == NegativePool::Observed;
    let mut held = vec![false; events.len()];
    let mut out = Vec::with_capacity(users.len());
    for u in users {
        let Some(&k) = last.get(&u) else { continue };
        let Some(&(_, target, _)) = events.get(k) else {
            continue;
        };
        if let Some(h) = held.get_mut(k) {
            *h = true;
        }
        let mine = touched.get(&u);
        let mut rng = ChaCha8Rng::seed_from_u64(mix(s.seed, u64::from(u)));
        let mut negatives: Vec<u32> = Vec::with_capacity(s.negatives);
        let size = if from_observed {
            observed.len()
        } else {
            n_items
        };
        let n = u32::try_from(size).unwrap_or(u32::MAX);
        let mut tries = 0;
        while negatives.len() < s.negatives && tries < 50 * s.negatives.max(1) && n > 0 {
            tries += 1;
            let draw = rng.gen_range(0..n);
            let c = if from_observed {
                observed.get(draw as usize).copied().unwrap_or(draw)
            } else {
                draw
            };
            if mine.is_some_and(|m| m.contains(&c)) || negatives.contains(&c) {
                continue;
            }
            negatives.push(c);
        }
        out.push(Held {
            user: u,
            target,
            negatives,
        });
    }
    (held, out)
}

/// [`hold_out`] once per pool of [`fit_pools`]`(events, n_items, s.pool)`:
/// the held-out mask (the same for every pool) and each pool's decisions,
/// the same users and targets in the same order with the pool's negatives.
pub fn hold_out_pools(
    events: &[Event],
    n_items: usize,
    s: &HoldOutSettings,
) -> (Vec<bool>, Vec<(NegativePool, Vec<Held>)>) {
    let mut held = vec![false; events.len()];
    let mut out = Vec::new();
    for pool in fit_pools(events, n_items, s.pool) {
        let (h, ds) = hold_out(events, n_items, &HoldOutSettings { pool, ..s.clone() });
        held = h;
        out.push((pool, ds));
    }
    (held, out)
}

/// Mean reciprocal rank and hit rate at 1 of decisions whose targets ranked
/// `ranks` (1-based, ties as half places: [`crate::pairwise::Decision::rank`]).
pub fn figures(ranks: &[f64]) -> (f64, f64) {
    if ranks.is_empty() {
        return (0.0, 0.0);
    }
    let mrr = ranks.iter().map(|r| 1.0 / r).sum::<f64>() / ranks.len() as f64;
    let hr1 = ranks.iter().filter(|&&r| r == 1.0).count() as f64 / ranks.len() as f64;
    (mrr, hr1)
}

/// Rank of a target scored `target` among negatives scored `negatives`,
/// a tied negative counting half a place above.
pub fn rank_of(target: f64, negatives: &[f64]) -> f64 {
    let mut r = 1.0;
    for &n in negatives {
        if n > target {
            r += 1.0;
        } else if n == target {
            r += 0.5;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_event_of_each_user_with_two_is_held_out() {
        let events: Vec<Event> = vec![(0, 1, None), (1, 2, None), (0, 3, None), (2, 4, None)];
        let s = HoldOutSettings {
            negatives: 3,
            users: 0,
            seed: 42,
            pool: NegativePool::Catalog,
        };
        let (held, ds) = hold_out(&events, 10, &s);
        assert_eq!(held, vec![false, false, true, false]);
        assert_eq!(ds.len(), 1);
        assert_eq!((ds[0].user, ds[0].target), (0, 3));
        assert_eq!(ds[0].negatives.len(), 3);
        assert!(ds[0].negatives.iter().all(|n| ![1, 3].contains(n)));
        assert_eq!(hold_out(&events, 10, &s), (held, ds));
        assert_eq!(rank_of(1.0, &[2.0, 1.0, 0.0]), 2.5);
        assert_eq!(figures(&[1.0, 2.0]), (0.75, 0.5));
    }

    /// A catalog mostly of items nobody was observed with (fixed candidate
    /// lists, CDs): `auto` draws negatives from the observed items only, and
    /// a catalog mostly observed keeps its uniform draws, bit for bit.
    #[test]
    fn negatives_come_from_observed_items_when_most_of_the_catalog_is_unobserved() {
        let events: Vec<Event> = (0..40u32)
            .flat_map(|u| [(u, u % 7, None), (u, 7 + u % 5, None)])
            .collect();
        let observed: HashSet<u32> = events.iter().map(|e| e.1).collect();
        let s = |pool| HoldOutSettings {
            negatives: 4,
            users: 0,
            seed: 7,
            pool,
        };
        let (_, big) = hold_out(&events, 1000, &s(NegativePool::Auto));
        assert_eq!(big.len(), 40);
        for d in &big {
            assert_eq!(d.negatives.len(), 4);
            assert!(d.negatives.iter().all(|n| observed.contains(n)), "{d:?}");
        }
        assert_eq!(big, hold_out(&events, 1000, &s(NegativePool::Observed)).1);
        let (_, uniform) = hold_out(&events, 1000, &s(NegativePool::Catalog));
        assert!(uniform
            .iter()
            .any(|d| d.negatives.iter().any(|n| !observed.contains(n))));
        // 12 of 20 items observed: more than half, so the catalog's draws.
        assert_eq!(
            hold_out(&events, 20, &s(NegativePool::Auto)),
            hold_out(&events, 20, &s(NegativePool::Catalog))
        );
    }

    /// `auto` fits on both pools when fewer than half the catalog's items
    /// were observed (issue 55: a subsample evaluated against the whole
    /// catalog looks like CDs' fixed lists), on the catalog otherwise; a
    /// named pool is itself. Both pools hold the same users and targets.
    #[test]
    fn auto_fits_on_both_pools_when_most_of_the_catalog_is_unobserved() {
        let events: Vec<Event> = (0..40u32)
            .flat_map(|u| [(u, u % 7, None), (u, 7 + u % 5, None)])
            .collect();
        use NegativePool::{Auto, Catalog, Observed};
        assert_eq!(fit_pools(&events, 1000, Auto), vec![Catalog, Observed]);
        assert_eq!(fit_pools(&events, 20, Auto), vec![Catalog]);
        assert_eq!(fit_pools(&events, 1000, Catalog), vec![Catalog]);
        assert_eq!(fit_pools(&events, 20, Observed), vec![Observed]);
        assert_eq!(pools_name(&[Catalog, Observed]), "catalog+observed");
        let s = HoldOutSettings {
            negatives: 4,
            users: 0,
            seed: 7,
            pool: Auto,
        };
        let (held, pools) = hold_out_pools(&events, 1000, &s);
        assert_eq!(held, hold_out(&events, 1000, &s).0);
        assert_eq!(pools.len(), 2);
        let who = |ds: &[Held]| ds.iter().map(|d| (d.user, d.target)).collect::<Vec<_>>();
        assert_eq!(who(&pools[0].1), who(&pools[1].1));
        let catalog = HoldOutSettings { pool: Catalog, ..s };
        assert_eq!(pools[0].1, hold_out(&events, 1000, &catalog).1);
    }
}
