//! `atomrec[fit=auto]`: fit the offline ranker's four weights (`w_path`,
//! `w_co`, `w_sem`, `w_pop`, [`super::ranker`]) on the data at hand, from
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
//! touched ([`evomem_kit::holdout::NegativePool`], `fit_pool`).
//!
//! **Features.** Each decision is recalled as [`super::retrieve::recall`]
//! would at the held-out atom's time ([`super::retrieve::fit_inputs`]): the
//! user's atoms from that time on are invisible (seeds, expansion, own
//! walks), and the candidate's audience does not count them. What memory
//! cannot forget cheaply stays: the links other atoms gained from the
//! held-out note, and what its evolution wrote into older notes. Rebuilding
//! memory without the held-out interactions would cost a second run of
//! every observation; the residue is named here and in the docs instead.
//!
//! **Fit.** A pairwise logistic regression ([`evomem_kit::pairwise`], L2 1)
//! on the four normalised terms, scored by 2-fold held-out MRR (fit on one
//! half of the decisions, score the other). The fitted weights replace the
//! spec's only when there are at least `fit_min` decisions and their
//! held-out MRR beats the spec's weights on the same decisions; weights
//! given in the spec stay pinned. `metrics.json` → `stats.fit` reports both
//! MRRs, the decisions and the weights.
//!
//! **Cost.** One recall per fit decision without the synthesis (seeds,
//! expansion, walks), the seed searches batched as in
//! [`super::retrieve::prepare`]; the regression is on four weights.

use super::graph::AtomIx;
use super::ranker::{self, RankWeights};
use super::retrieve;
use super::AtomRec;
use evomem_core::{ItemId, PolicyCtx, PolicyError, UserId};
use evomem_kit::holdout::{self, Event, HoldOutSettings, NegativePool};
use evomem_kit::pairwise::{self, Decision, FitOptions};
use serde::Serialize;
use std::collections::BTreeMap;

/// The ranker's weights in feature order.
pub const FEATURES: [&str; 4] = ["w_path", "w_co", "w_sem", "w_pop"];

/// Settings of `fit` (one field per key).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitSettings {
    /// `fit=auto` (true) or `fit=none`.
    pub auto: bool,
    /// Negatives per decision (`fit_negatives`).
    pub negatives: usize,
    /// Fewest decisions whose fit is used (`fit_min`).
    pub min_decisions: usize,
    /// Decisions at most, a seeded sample of users (`fit_users`; 0 = all).
    pub users: usize,
    /// Where negatives come from (`fit_pool`).
    #[serde(serialize_with = "pool_name")]
    pub pool: NegativePool,
    /// Weights given in the spec, held fixed ([`FEATURES`] order; not a
    /// key of its own).
    #[serde(skip)]
    pub pinned: [Option<f64>; 4],
}

fn pool_name<S: serde::Serializer>(p: &NegativePool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.name())
}

/// MRR and HR@1 of a set of weights on the fit decisions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Hit rate at 1.
    pub hr1: f64,
}

/// What a fit found, for `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    /// `auto`; `auto (too few decisions: spec weights)` or `auto (no gain:
    /// spec weights)` when the fitted weights were not used.
    pub mode: &'static str,
    /// Fit decisions.
    pub decisions: usize,
    /// User atoms the decisions were drawn from.
    pub events: usize,
    /// Where the negatives came from (`catalog` or `observed`).
    pub negatives_from: &'static str,
    /// The spec's weights on the decisions.
    pub spec: Figures,
    /// The fitted weights on the decisions, each half scored with the
    /// weights fitted on the other.
    pub fitted: Figures,
    /// The weights in force after the fit, by key.
    pub weights: BTreeMap<&'static str, f64>,
}

fn as_vec(w: &RankWeights) -> [f64; 4] {
    [w.path, w.co, w.semantic, w.popularity]
}

fn from_vec(w: &[f64]) -> RankWeights {
    let at = |k: usize| w.get(k).copied().unwrap_or(0.0);
    RankWeights {
        path: at(0),
        co: at(1),
        semantic: at(2),
        popularity: at(3),
    }
}

fn figures(ds: &[&Decision], w: &[f64]) -> Figures {
    let ranks: Vec<f64> = ds.iter().map(|d| d.rank(w)).collect();
    let (mrr, hr1) = holdout::figures(&ranks);
    Figures { mrr, hr1 }
}

/// The held-out decisions' feature rows (module docs).
fn decisions(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    s: &FitSettings,
    seed: u64,
) -> Result<(Vec<Decision>, usize, &'static str), PolicyError> {
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
    let from = holdout::pool_for(&events, n_items, s.pool).name();
    let (held, chosen) = holdout::hold_out(&events, n_items, &settings);
    // The held-out atom of each user: its time is the decision's.
    let mut at_of: BTreeMap<u32, AtomIx> = BTreeMap::new();
    for ((&h, &ix), e) in held.iter().zip(&atoms).zip(&events) {
        if h {
            at_of.insert(e.0, ix);
        }
    }
    let mut asks = Vec::with_capacity(chosen.len());
    for d in &chosen {
        let Some(at) = at_of.get(&d.user).and_then(|&ix| p.graph.get(ix)).map(|a| a.time) else {
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
    Ok((rows, events.len(), from))
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
    let all: Vec<&Decision> = ds.iter().collect();
    let spec = figures(&all, &as_vec(&base));
    let half = |r: usize| -> Vec<Decision> {
        ds.iter()
            .enumerate()
            .filter(|(k, _)| k % 2 == r)
            .map(|(_, d)| d.clone())
            .collect()
    };
    let (even, odd) = (half(0), half(1));
    let (w_even, w_odd) = (pairwise::fit(&even, &opts), pairwise::fit(&odd, &opts));
    let f_odd = figures(&odd.iter().collect::<Vec<_>>(), &w_even);
    let f_even = figures(&even.iter().collect::<Vec<_>>(), &w_odd);
    let n = ds.len().max(1) as f64;
    let (no, ne) = (odd.len() as f64, even.len() as f64);
    let fitted = Figures {
        mrr: (f_odd.mrr * no + f_even.mrr * ne) / n,
        hr1: (f_odd.hr1 * no + f_even.hr1 * ne) / n,
    };
    let (mode, w) = if ds.len() < s.min_decisions {
        ("auto (too few decisions: spec weights)", base)
    } else if fitted.mrr <= spec.mrr {
        ("auto (no gain: spec weights)", base)
    } else {
        ("auto", from_vec(&pairwise::fit(&ds, &opts)))
    };
    let report = FitReport {
        mode,
        decisions: ds.len(),
        events,
        negatives_from,
        spec,
        fitted,
        weights: FEATURES.iter().copied().zip(as_vec(&w)).collect(),
    };
    Ok((w, report))
}
