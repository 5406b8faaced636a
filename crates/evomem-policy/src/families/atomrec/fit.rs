//! `atomrec[fit=auto]`: fit the offline ranker's five weights (`w_path`,
//! `w_co`, `w_sem`, `w_pop`, `w_walk`, [`super::ranker`]) on the data at hand, from
//! validation decisions only.
//!
//! Why: the default weights were chosen on ml-100k's validation targets;
//! on data of another shape (many light users, no metadata) the terms weigh
//! differently. seqmem, itemknn and BPR fit their settings the same way, by
//! the one rule of [`evomem_kit::holdout`].
//!
//! **Decisions.** Memory holds one user atom per observed interaction. For
//! every user with two or more atoms (a seeded sample of `fit_users`), the
//! latest atom is held out: a policy never observes a test target, so in a
//! test run that is the user's validation interaction, and under `--target
//! valid` the one before it. Negatives: `fit_negatives` items the user never
//! touched, from each pool of [`evomem_kit::holdout::fit_pools`]
//! (`fit_pool`; `auto` is both the catalog and the observed items when
//! fewer than half the catalog's items were observed).
//!
//! **Features.** Each decision is recalled as [`super::retrieve::recall`]
//! would at the held-out atom's time ([`super::retrieve::fit_inputs`]): the
//! user's atoms from that time on are invisible (seeds, expansion, own
//! walks), and the candidate's audience does not count them. What memory
//! cannot forget cheaply stays (the walk term's forward weights are read
//! without the held-out atom's arrival, [`super::graph::AtomGraph::latest_arrival`]): the links other atoms gained from the
//! held-out note, and what its evolution wrote into older notes. Rebuilding
//! memory without the held-out interactions would cost a second run of
//! every observation; the residue is named here and in the docs instead.
//!
//! **Fit.** A pairwise logistic regression ([`evomem_kit::pairwise`], L2 1)
//! on the five normalised terms, scored by 2-fold held-out MRR (fit on one
//! half of the decisions, score the other). The fitted weights replace the
//! spec's only when there are at least `fit_min` decisions and their
//! held-out MRR beats the spec's weights on the same decisions of every
//! pool ([`evomem_kit::pairwise::choose_across`]); weights given in the
//! spec stay pinned. `metrics.json` → `stats.fit` reports both MRRs
//! (overall and per pool), the decisions and the weights.
//!
//! **Cost.** One recall per fit decision without the synthesis (seeds,
//! expansion, walks), the seed searches batched as in
//! [`super::retrieve::prepare`]; the regression is on five weights.

use super::graph::AtomIx;
use super::ranker::{self, RankWeights};
use super::retrieve;
use super::AtomRec;
use evomem_core::{ItemId, PolicyCtx, PolicyError, UserId};
use evomem_kit::holdout::{self, Event, HoldOutSettings};
pub use evomem_kit::pairwise::{Figures, FitReport};
use evomem_kit::pairwise::{self, Decision, FitOptions};
use std::collections::BTreeMap;

/// The ranker's weights in feature order.
pub const FEATURES: [&str; 5] = ["w_path", "w_co", "w_sem", "w_pop", "w_walk"];

/// Settings of `fit` ([`crate::fit::FitSettings`] over the five weights).
pub type FitSettings = crate::fit::FitSettings<5>;

fn as_vec(w: &RankWeights) -> [f64; 5] {
    [w.path, w.co, w.semantic, w.popularity, w.walk]
}

fn from_vec(w: &[f64]) -> RankWeights {
    let at = |k: usize| w.get(k).copied().unwrap_or(0.0);
    RankWeights {
        path: at(0),
        co: at(1),
        semantic: at(2),
        popularity: at(3),
        walk: at(4),
    }
}

/// Each pool's decisions: its name and feature rows.
type PoolRows = Vec<(&'static str, Vec<Decision>)>;

/// The held-out decisions' feature rows, one set per pool of negatives
/// ([`holdout::fit_pools`]; module docs), the events they were drawn from,
/// and the pools' name.
fn decisions(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    s: &FitSettings,
    seed: u64,
) -> Result<(PoolRows, usize, &'static str), PolicyError> {
    let mut events: Vec<Event> = Vec::new();
    let mut atoms: Vec<AtomIx> = Vec::new();
    for (ix, a) in p.graph.atoms().iter().enumerate() {
        if let Some(owner) = a.owner {
            events.push((owner.0, a.item.0, None));
            atoms.push(ix as AtomIx);
        }
    }
    let n_items = ctx.catalog.len();
    let settings = HoldOutSettings {
        negatives: s.negatives,
        users: s.users,
        seed,
        pool: s.pool,
    };
    let (held, pools) = holdout::hold_out_pools(&events, n_items, &settings);
    let kinds: Vec<holdout::NegativePool> = pools.iter().map(|(k, _)| *k).collect();
    let from = holdout::pools_name(&kinds);
    // The held-out atom of each user: its time is the decision's.
    let mut at_of: BTreeMap<u32, AtomIx> = BTreeMap::new();
    for ((&h, &ix), e) in held.iter().zip(&atoms).zip(&events) {
        if h {
            at_of.insert(e.0, ix);
        }
    }
    let mut out = Vec::with_capacity(pools.len());
    for (pool, chosen) in &pools {
        let mut asks = Vec::with_capacity(chosen.len());
        for d in chosen {
            let Some(at) = at_of.get(&d.user).and_then(|&ix| p.graph.get(ix)).map(|a| a.time)
            else {
                continue;
            };
            let mut cands = vec![ItemId(d.target)];
            cands.extend(d.negatives.iter().map(|&c| ItemId(c)));
            asks.push((UserId(d.user), at, cands));
        }
        let inputs = retrieve::fit_inputs(p, ctx, &asks)?;
        let rows = inputs
            .iter()
            .map(|inp| {
                let x = ranker::features(inp);
                Decision {
                    target: x.first().map(|f| f.to_vec()).unwrap_or_default(),
                    negatives: x.iter().skip(1).map(|f| f.to_vec()).collect(),
                }
            })
            .collect();
        out.push((pool.name(), rows));
    }
    Ok((out, events.len(), from))
}

/// Fit the ranker's weights (module docs); returns the weights to use and
/// the report.
pub fn run(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    s: &FitSettings,
    seed: u64,
) -> Result<(RankWeights, FitReport), PolicyError> {
    let base = p.cfg.rank;
    let (ds, events, negatives_from) = decisions(p, ctx, s, seed)?;
    let opts = FitOptions {
        l2: 1.0,
        iterations: 50,
        pinned: s.pinned.to_vec(),
    };
    let pools: Vec<pairwise::Pool<'_>> = ds.iter().map(|(n, d)| (*n, d.as_slice())).collect();
    let choice = pairwise::choose_across(&pools, &as_vec(&base), &opts, s.min_decisions);
    let users = ds.iter().map(|(_, d)| d.len()).max().unwrap_or(0);
    let report = FitReport::new(&choice, &FEATURES, users, events, negatives_from);
    let w = from_vec(&choice.weights);
    Ok((w, report))
}
