//! `seqmem[fit=auto]`: fit the ranker's weights, window and distance decay
//! on the data at hand, from validation decisions only.
//!
//! Why: weights chosen on one data set's validation targets (ml-100k's,
//! issue 17) do not carry to another domain; with about nine interactions
//! per user the useful signals are other ones (the last item's successors,
//! popularity). Every other run-time ranker (BPR, itemknn) learns from the
//! data it is given; so does this one, by the same rule the harness applies
//! to tuning: never on a test target.
//!
//! **Decisions.** The policy replays what it has observed. For every user
//! with at least two observed items, the *latest observed* item is held out
//! and becomes that user's fit target; the rest is the user's history. Under
//! the retrospective protocol of a test run the latest observed item is the
//! user's validation interaction (the test target is never observed); under
//! `--target valid` it is the one before validation, so validation figures
//! are never fitted on their own targets either. The candidates are the
//! target and `fit_negatives` items the user never touched in the visible
//! data, drawn uniformly by ChaCha8 seeded with the run seed and the user,
//! from the pools of [`holdout::fit_pools`] (`fit_pool`): `catalog`,
//! `observed`, or `auto`, which is `catalog` when at least half the
//! catalog's items were observed and *both* pools otherwise (the same users
//! and targets twice, with each pool's negatives), since the policy cannot
//! see whether the harness draws the evaluated negatives from the whole
//! catalog (a subsample, issue 55) or from lists of observed items (CDs).
//! The features are computed on a view built from
//! every observed event *except* the held-out ones (so a target's own
//! transitions are not counted for it), exactly as the harness's validation
//! run hides every user's validation interaction.
//!
//! **Fit.** For each point of a small grid (`window` × `dist_decay`,
//! [`GRID_WINDOWS`] × [`GRID_DIST_DECAYS`]; a key given in the spec pins its
//! axis), the weights are a pairwise logistic regression
//! ([`evomem_kit::pairwise`]) on two halves of the decisions (every pool's)
//! in turn, each half scored (mean reciprocal rank) with the weights fitted
//! on the other ([`pairwise::cross_figures`]). The point with the best
//! held-out MRR (over every pool, weighted by size; ties: the earlier
//! point) is the candidate. It replaces the spec's values (window, decay
//! and weights: `fit=none`'s) only when there are at least `fit_min`
//! decisions and its held-out MRR beats the spec's values on the same
//! decisions *in every pool* ([`pairwise::verdict`], the rule MARS's and
//! AtomRec's fits share); then its weights are refitted on all decisions.
//! Otherwise the spec's values stand (issue 55: on 300 Amazon Beauty users
//! a fit on observed negatives alone ranked never-observed items first,
//! HR@1 0.057 against the fixed weights' 0.237). Weights given in the spec
//! stay pinned. A refit (the evolving protocol) is judged against the
//! spec's values again, never against an earlier fit.
//!
//! **Cost.** Per grid point: one replay of the observed events into a
//! view (the same work as observing them) and `decisions × (1 +
//! fit_negatives)` feature rows, each a pass over the user's history, and
//! the neighbour, walk and content heads once per decision; the factor head's
//! model is trained once per fit, on the view without the held-out events;
//! the regression is Newton's method on 13 weights; with two pools, twice
//! the rows. The report in `metrics.json` (`stats.fit`) names the decisions,
//! the mode (fitted or fixed kept), the fixed values' and the best point's
//! held-out figures per pool (`pools`), each grid point's figures and the
//! values in force.

use super::{features, Content, ContentHead, SeqParams, SeqView, FEATURES, N_FEATURES};
use crate::families::baselines::Bpr;
use evomem_core::PolicyError;
use std::sync::Arc;
use evomem_kit::holdout::{self, Held, HoldOutSettings, NegativePool};
use evomem_kit::pairwise::{self, Decision, FitOptions, Figures, PoolFigures, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;

pub use evomem_kit::holdout::Event;

/// Windows the fit tries.
pub const GRID_WINDOWS: [usize; 2] = [3, 20];
/// Distance decays the fit tries.
pub const GRID_DIST_DECAYS: [f64; 2] = [0.6, 0.9];

/// Settings of a fit (`fit=auto`).
#[derive(Debug, Clone, PartialEq)]
pub struct FitSettings {
    /// Negatives per decision.
    pub negatives: usize,
    /// Fewest decisions whose fit is used (`fit_min`).
    pub min_decisions: usize,
    /// Decisions at most (0 = all).
    pub users: usize,
    /// Where negatives are drawn from (`fit_pool`).
    pub pool: NegativePool,
    /// L2 penalty.
    pub l2: f64,
    /// Run seed.
    pub seed: u64,
    /// `(window, dist_decay)` points tried.
    pub grid: Vec<(usize, f64)>,
    /// Weights given in the spec, held fixed ([`FEATURES`] order).
    pub pinned: [Option<f64>; N_FEATURES],
}

/// One grid point's held-out figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GridPoint {
    /// Window.
    pub window: usize,
    /// Distance decay.
    pub dist_decay: f64,
    /// Mean reciprocal rank of the fit targets, each half scored with the
    /// weights fitted on the other half (every pool's decisions, weighted
    /// by size).
    pub mrr: f64,
    /// Hit rate at 1, the same way.
    pub hr1: f64,
}

/// What a fit chose, for `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    /// `auto` (the fitted values are used), `auto (no gain: fixed
    /// weights)` (the best grid point's held-out MRR does not beat the
    /// fixed values' on some pool) or `auto (too few decisions: fixed
    /// weights)` (fewer than `fit_min` decisions).
    pub mode: &'static str,
    /// Fit decisions (users with a held-out item).
    pub decisions: usize,
    /// Events the fit replayed (held-out ones included).
    pub events: usize,
    /// Where the negatives came from (`catalog`, `observed` or
    /// `catalog+observed`, [`holdout::fit_pools`]).
    pub negatives_from: &'static str,
    /// The fixed values (the spec's window, decay and weights) on the
    /// decisions (every pool's, weighted by size).
    pub spec: Figures,
    /// The best grid point's held-out figures, the same way.
    pub fitted: Figures,
    /// Each pool's figures of the fixed values and the best grid point.
    pub pools: Vec<PoolFigures>,
    /// Window in force.
    pub window: usize,
    /// Distance decay in force.
    pub dist_decay: f64,
    /// Weights in force, by key.
    pub weights: BTreeMap<&'static str, f64>,
    /// Every grid point tried.
    pub grid: Vec<GridPoint>,
}

/// Each pool's decisions: its name and feature rows.
type PoolRows = Vec<(&'static str, Vec<Decision>)>;

/// Each pool's feature rows at `p`, on one view without the held-out
/// events.
fn pool_rows(
    events: &[Event],
    held: &[bool],
    pools: &[(NegativePool, Vec<Held>)],
    p: &SeqParams,
    fits: (bool, bool),
    mf: Option<&Arc<Bpr>>,
    content: Option<&Arc<Content>>,
) -> PoolRows {
    let mut view = SeqView::new(p.window, p.dist_decay);
    for (&(u, i, ts), &h) in events.iter().zip(held) {
        if !h {
            view.push(u, i, ts);
        }
    }
    let rows = |decisions: &[Held]| -> Vec<Decision> {
        decisions
            .iter()
            .map(|d| {
                let items: Vec<u32> = view.sequence(d.user).iter().rev().copied().collect();
                let latest = view.latest(d.user);
                let mut heads = view.user_heads_for(
                    d.user,
                    &items,
                    p,
                    p.w_nbr != 0.0 || fits.0,
                    p.w_walk != 0.0 || fits.1,
                    mf,
                );
                if let Some(content) = content {
                    heads.content = ContentHead::new(content, &items, p);
                }
                let f = |c: u32| features(&view, p, &items, latest, &heads, c).to_vec();
                Decision {
                    target: f(d.target),
                    negatives: d.negatives.iter().map(|&c| f(c)).collect(),
                }
            })
            .collect()
    };
    pools
        .iter()
        .map(|(pool, ds)| (pool.name(), rows(ds)))
        .collect()
}

fn as_pools<'a>(rows: &'a [(&'static str, Vec<Decision>)]) -> Vec<pairwise::Pool<'a>> {
    rows.iter().map(|(n, ds)| (*n, ds.as_slice())).collect()
}

/// `opts` with the factor head's weight pinned to 0 when a fit on all of
/// `ds` gives it a negative one. The head is a model trained to rank each
/// user's own items first; a negative weight ranks against it, which only
/// a mismatch between the fit's held-out targets and the evaluated ones
/// rewards (an item seen by one user alone, held out, is unobserved and so
/// looks like a negative to the model; the evaluated target is observed).
/// So the head enters with a weight of at least 0, or not at all.
fn mf_at_least_zero(ds: &PoolRows, opts: &FitOptions) -> FitOptions {
    let Some(k) = FEATURES.iter().position(|&f| f == "w_mf") else {
        return opts.clone();
    };
    if opts.pinned.get(k).is_some_and(Option::is_some) {
        return opts.clone();
    }
    let w = pairwise::fit_across(&as_pools(ds), opts);
    let mut out = opts.clone();
    if w.get(k).is_some_and(|&x| x < 0.0) {
        if let Some(slot) = out.pinned.get_mut(k) {
            *slot = Some(0.0);
        }
    }
    out
}

/// Fit on `events` (see the module docs): returns the values in force
/// (`base`'s unless the fit won) and the report. Fails only when the
/// factor head's model cannot be built.
pub fn run(
    events: &[Event],
    n_items: usize,
    content: &Arc<Content>,
    base: &SeqParams,
    s: &FitSettings,
) -> Result<(SeqParams, FitReport), PolicyError> {
    let settings = HoldOutSettings {
        negatives: s.negatives,
        users: s.users,
        seed: s.seed,
        pool: s.pool,
    };
    let (held, pools) = holdout::hold_out_pools(events, n_items, &settings);
    let kinds: Vec<NegativePool> = pools.iter().map(|(p, _)| *p).collect();
    let decisions = pools.iter().map(|(_, ds)| ds.len()).max().unwrap_or(0);
    let opts = FitOptions {
        l2: s.l2,
        iterations: 50,
        pinned: s.pinned.to_vec(),
    };
    let sizes: Vec<usize> = pools.iter().map(|(_, ds)| ds.len()).collect();
    // The per-decision heads are computed unless their weight is pinned
    // to 0.
    let fitted = |key: &str| {
        FEATURES
            .iter()
            .position(|&f| f == key)
            .and_then(|k| s.pinned.get(k))
            .is_none_or(|w| *w != Some(0.0))
    };
    let fits = (fitted("w_nbr"), fitted("w_walk"));
    // The content heads' profiles, unless the catalog has no content or
    // both weights are pinned to 0 (and not given).
    let content = (!content.is_empty()
        && (fitted("w_genre") || fitted("w_year") || base.w_genre != 0.0 || base.w_year != 0.0))
        .then_some(content);
    // The factor head's model, trained once on the view without the
    // held-out events (it does not depend on the grid's window and decay).
    let mf = if (fitted("w_mf") || base.w_mf != 0.0) && decisions > 0 {
        let pairs = events
            .iter()
            .zip(&held)
            .filter(|(_, &h)| !h)
            .map(|(&(u, i, _), _)| (u, i));
        Some(Arc::new(Bpr::trained_on(pairs, n_items, s.seed)?))
    } else {
        None
    };
    let mut grid = Vec::with_capacity(s.grid.len());
    // The fixed values' figures on every pool's decisions, read off the
    // grid point with the fixed window and decay when the grid has it.
    let mut spec: Option<Vec<Figures>> = None;
    let mut best: Option<(f64, SeqParams, Vec<Figures>, PoolRows, FitOptions)> = None;
    if decisions > 0 {
        for &(window, dist_decay) in &s.grid {
            let p = SeqParams {
                window,
                dist_decay,
                ..*base
            };
            let ds = pool_rows(events, &held, &pools, &p, fits, mf.as_ref(), content);
            if (window, dist_decay) == (base.window, base.dist_decay) {
                spec = Some(pairwise::pool_figures(&as_pools(&ds), &base.weights()));
            }
            let point_opts = mf_at_least_zero(&ds, &opts);
            let per_pool = pairwise::cross_figures(&as_pools(&ds), &point_opts);
            let mean = pairwise::mean_figures(&sizes, &per_pool);
            grid.push(GridPoint {
                window,
                dist_decay,
                mrr: mean.mrr,
                hr1: mean.hr1,
            });
            if best.as_ref().is_none_or(|b| mean.mrr > b.0) {
                best = Some((mean.mrr, p, per_pool, ds, point_opts));
            }
        }
    }
    let spec = spec.unwrap_or_else(|| {
        let ds = pool_rows(events, &held, &pools, base, fits, mf.as_ref(), content);
        pairwise::pool_figures(&as_pools(&ds), &base.weights())
    });
    let fitted = best.as_ref().map(|b| b.2.clone()).unwrap_or_default();
    let verdict = pairwise::verdict(decisions, s.min_decisions, &spec, &fitted);
    let (mode, p) = match (verdict, best) {
        (Verdict::Fitted, Some((_, mut p, _, ds, point_opts))) => {
            p.set_weights(&pairwise::fit_across(&as_pools(&ds), &point_opts));
            ("auto", p)
        }
        (Verdict::TooFewDecisions, _) => ("auto (too few decisions: fixed weights)", *base),
        (Verdict::NoGain | Verdict::Fitted, _) => ("auto (no gain: fixed weights)", *base),
    };
    let report = FitReport {
        mode,
        decisions,
        events: events.len(),
        negatives_from: holdout::pools_name(&kinds),
        spec: pairwise::mean_figures(&sizes, &spec),
        fitted: pairwise::mean_figures(&sizes, &fitted),
        pools: kinds
            .iter()
            .zip(spec.iter().zip(&fitted))
            .map(|(k, (&s, &f))| PoolFigures {
                pool: k.name(),
                spec: s,
                fitted: f,
            })
            .collect(),
        window: p.window,
        dist_decay: p.dist_decay,
        weights: FEATURES.iter().copied().zip(p.weights()).collect(),
        grid,
    };
    Ok((p, report))
}
