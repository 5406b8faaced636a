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
//! from the catalog or (`fit_pool`, [`NegativePool`]; `auto` when fewer
//! than half the catalog's items were observed) from the observed items.
//! The features are computed on a view built from
//! every observed event *except* the held-out ones (so a target's own
//! transitions are not counted for it), exactly as the harness's validation
//! run hides every user's validation interaction.
//!
//! **Fit.** For each point of a small grid (`window` × `dist_decay`,
//! [`GRID_WINDOWS`] × [`GRID_DIST_DECAYS`]; a key given in the spec pins its
//! axis), the weights are a pairwise logistic regression
//! ([`evomem_kit::pairwise`]) on two halves of the decisions in turn, each
//! half scored (mean reciprocal rank) with the weights fitted on the other.
//! The point with the best held-out MRR wins (ties: the earlier point), and
//! its weights are refitted on all decisions. Weights given in the spec stay
//! pinned.
//!
//! **Cost.** Per grid point: one replay of the observed events into a
//! view (the same work as observing them) and `decisions × (1 +
//! fit_negatives)` feature rows, each a pass over the user's history; the
//! regression is Newton's method on 8 weights. The report in `metrics.json`
//! (`stats.fit`) names the decisions, each grid point's held-out figures and
//! the chosen weights.

use super::{features, SeqParams, SeqView, FEATURES, N_FEATURES};
use evomem_kit::holdout::{self, Held, HoldOutSettings, NegativePool};
use evomem_kit::pairwise::{self, Decision, FitOptions};
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
    /// weights fitted on the other half.
    pub mrr: f64,
    /// Hit rate at 1, the same way.
    pub hr1: f64,
}

/// What a fit chose, for `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    /// `auto`, or `auto (too few decisions: fixed weights)` when the fit
    /// had fewer than `fit_min` decisions and was not used.
    pub mode: &'static str,
    /// Fit decisions (users with a held-out item).
    pub decisions: usize,
    /// Events the fit replayed (held-out ones included).
    pub events: usize,
    /// Where the negatives came from (`catalog` or `observed`).
    pub negatives_from: &'static str,
    /// Chosen window.
    pub window: usize,
    /// Chosen distance decay.
    pub dist_decay: f64,
    /// Chosen weights by key.
    pub weights: BTreeMap<&'static str, f64>,
    /// Every grid point tried.
    pub grid: Vec<GridPoint>,
}

impl FitReport {
    /// The same report, marked as not used (too few decisions): the
    /// window, decay and weights are `base`'s, which stand.
    pub fn unused(self, base: &SeqParams) -> Self {
        Self {
            mode: "auto (too few decisions: fixed weights)",
            window: base.window,
            dist_decay: base.dist_decay,
            weights: FEATURES.iter().copied().zip(base.weights()).collect(),
            ..self
        }
    }
}

/// The held-out events and the decisions ([`evomem_kit::holdout`], the
/// rule every run-time fit shares).
fn hold_out(events: &[Event], n_items: usize, s: &FitSettings) -> (Vec<bool>, Vec<Held>) {
    let settings = HoldOutSettings {
        negatives: s.negatives,
        users: s.users,
        seed: s.seed,
        pool: s.pool,
    };
    holdout::hold_out(events, n_items, &settings)
}

/// Feature rows of every decision on a view without the held-out events.
fn rows(events: &[Event], held: &[bool], decisions: &[Held], p: &SeqParams) -> Vec<Decision> {
    let mut view = SeqView::new(p.window, p.dist_decay);
    for (&(u, i, ts), &h) in events.iter().zip(held) {
        if !h {
            view.push(u, i, ts);
        }
    }
    decisions
        .iter()
        .map(|d| {
            let items: Vec<u32> = view.sequence(d.user).iter().rev().copied().collect();
            let latest = view.latest(d.user);
            let f = |c: u32| features(&view, p, &items, latest, c).to_vec();
            Decision {
                target: f(d.target),
                negatives: d.negatives.iter().map(|&c| f(c)).collect(),
            }
        })
        .collect()
}

/// Mean reciprocal rank and hit rate at 1 of `ds` under `w`.
fn figures(ds: &[&Decision], w: &[f64]) -> (f64, f64) {
    if ds.is_empty() {
        return (0.0, 0.0);
    }
    let (mut mrr, mut hr) = (0.0, 0.0);
    for d in ds {
        let r = d.rank(w);
        mrr += 1.0 / r;
        if r == 1.0 {
            hr += 1.0;
        }
    }
    (mrr / ds.len() as f64, hr / ds.len() as f64)
}

/// Fit on `events` (see the module docs): returns `base` with the chosen
/// window, distance decay and weights, and the report.
pub fn run(
    events: &[Event],
    n_items: usize,
    base: &SeqParams,
    s: &FitSettings,
) -> (SeqParams, FitReport) {
    let (held, decisions) = hold_out(events, n_items, s);
    let negatives_from = holdout::pool_for(events, n_items, s.pool).name();
    if decisions.is_empty() {
        // Nothing to fit on: the fixed weights stand.
        let report = FitReport {
            mode: "auto",
            decisions: 0,
            events: events.len(),
            negatives_from,
            window: base.window,
            dist_decay: base.dist_decay,
            weights: FEATURES.iter().copied().zip(base.weights()).collect(),
            grid: Vec::new(),
        };
        return (*base, report);
    }
    let opts = FitOptions {
        l2: s.l2,
        iterations: 50,
        pinned: s.pinned.to_vec(),
    };
    let mut grid = Vec::with_capacity(s.grid.len());
    let mut best: Option<(f64, SeqParams, Vec<Decision>)> = None;
    for &(window, dist_decay) in &s.grid {
        let p = SeqParams {
            window,
            dist_decay,
            ..*base
        };
        let ds = rows(events, &held, &decisions, &p);
        // Two halves by decision index; each scored with the other's fit.
        let half = |r: usize| -> Vec<Decision> {
            ds.iter()
                .enumerate()
                .filter(|(k, _)| k % 2 == r)
                .map(|(_, d)| d.clone())
                .collect()
        };
        let (even, odd) = (half(0), half(1));
        let (w_even, w_odd) = (pairwise::fit(&even, &opts), pairwise::fit(&odd, &opts));
        let (m1, h1) = figures(&odd.iter().collect::<Vec<_>>(), &w_even);
        let (m0, h0) = figures(&even.iter().collect::<Vec<_>>(), &w_odd);
        let n = ds.len().max(1) as f64;
        let (no, ne) = (odd.len() as f64, even.len() as f64);
        let mrr = (m1 * no + m0 * ne) / n;
        let hr1 = (h1 * no + h0 * ne) / n;
        grid.push(GridPoint {
            window,
            dist_decay,
            mrr,
            hr1,
        });
        if best.as_ref().is_none_or(|b| mrr > b.0) {
            best = Some((mrr, p, ds));
        }
    }
    let (mut p, ds) = match best {
        Some((_, p, ds)) => (p, ds),
        None => (*base, Vec::new()),
    };
    let w = pairwise::fit(&ds, &opts);
    p.set_weights(&w);
    let weights = FEATURES.iter().copied().zip(p.weights()).collect();
    let report = FitReport {
        mode: "auto",
        decisions: decisions.len(),
        events: events.len(),
        negatives_from,
        window: p.window,
        dist_decay: p.dist_decay,
        weights,
        grid,
    };
    (p, report)
}
