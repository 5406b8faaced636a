//! Pairwise logistic regression: the weights of a linear ranker fitted from
//! ranking decisions (one target against its negatives), with some weights
//! pinned.
//!
//! Why here: every offline ranker with hand-set weights (seqmem's heads,
//! MARS's mix, AtomRec's `w_*`) can be fitted the same way on the data at
//! hand, from validation decisions only, and the fit must be one tested piece
//! of code rather than one copy per policy.
//!
//! **Model.** A decision has feature rows `x_t` (target) and `x_n` (each
//! negative). The ranker scores `w · x`. The fit minimises
//!
//! ```text
//! Σ_decisions Σ_n ln(1 + exp(−w · (x_t − x_n))) + (l2 / 2) · ‖w_free‖²
//! ```
//!
//! over the free weights (pinned ones keep their value) by Newton's method
//! with a backtracking step, which converges in a few dozen iterations for
//! the handful of features a ranker has. A feature that never separates a
//! target from its negatives gets weight 0 (the `l2` term alone acts on it).
//! The fit is deterministic: rows are summed in the order given.
//!
//! **Choosing between fitted and given weights** ([`choose_across`]). A
//! ranker's `fit=auto` (seqmem's, AtomRec's, MARS's) scores the fit by
//! 2-fold held-out MRR (fit on one half of the decisions, score the other)
//! and uses the weights fitted on all decisions only when there are at
//! least `min_decisions` and that MRR beats the given weights' on the same
//! decisions by more than `1/n` (`n` decisions: one decision's whole
//! reciprocal rank; issue 55 found a fit on ml-100k that won by 0.0007 on
//! its 943 held-out decisions and lost 0.0096 HR@1 on the validation
//! targets: a win that small is noise). The decisions may come in several *pools* (one per way of
//! drawing negatives, [`crate::holdout::fit_pools`]: the same users and
//! targets, other negatives): the weights are fitted on every pool's
//! decisions together and must beat the given weights on each pool's
//! held-out half, since a policy cannot see which way the harness draws the
//! evaluated candidates. [`FitReport`] is what `metrics.json` → `stats.fit`
//! shows of it, each pool's figures included.

use serde::Serialize;
use std::collections::BTreeMap;

/// One ranking decision's feature rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Features of the target.
    pub target: Vec<f64>,
    /// Features of each negative.
    pub negatives: Vec<Vec<f64>>,
}

impl Decision {
    /// Rank of the target under `w` (1-based), counting a tied negative as
    /// half a place above (the expected rank under a random tie-break).
    pub fn rank(&self, w: &[f64]) -> f64 {
        let t = dot(w, &self.target);
        let mut r = 1.0;
        for n in &self.negatives {
            let s = dot(w, n);
            if s > t {
                r += 1.0;
            } else if s == t {
                r += 0.5;
            }
        }
        r
    }
}

/// Settings of [`fit`].
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    /// L2 penalty on the free weights (default 1.0).
    pub l2: f64,
    /// Newton iterations at most (default 50).
    pub iterations: usize,
    /// Weights held fixed at the given value; `None` = fitted. Its length
    /// is the number of features.
    pub pinned: Vec<Option<f64>>,
}

impl FitOptions {
    /// Every one of `dim` weights free, l2 = 1, 50 iterations.
    pub fn free(dim: usize) -> Self {
        Self {
            l2: 1.0,
            iterations: 50,
            pinned: vec![None; dim],
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `ln(1 + exp(−z))`, stable for large `|z|`.
fn softplus_neg(z: f64) -> f64 {
    if z > 0.0 {
        (-z).exp().ln_1p()
    } else {
        -z + z.exp().ln_1p()
    }
}

/// `1 / (1 + exp(−z))`.
fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// The penalised loss of `w` (see the module docs).
pub fn loss(decisions: &[Decision], w: &[f64], opts: &FitOptions) -> f64 {
    let mut total = 0.0;
    for d in decisions {
        let t = dot(w, &d.target);
        for n in &d.negatives {
            total += softplus_neg(t - dot(w, n));
        }
    }
    let pen: f64 = w
        .iter()
        .zip(&opts.pinned)
        .filter(|(_, p)| p.is_none())
        .map(|(x, _)| x * x)
        .sum();
    total + 0.5 * opts.l2 * pen
}

/// Fit the weights (see the module docs). Returns one weight per feature;
/// pinned weights come back unchanged. With no decisions every free weight
/// is 0.
pub fn fit(decisions: &[Decision], opts: &FitOptions) -> Vec<f64> {
    let dim = opts.pinned.len();
    let free: Vec<usize> = (0..dim).filter(|&k| opts.pinned[k].is_none()).collect();
    let mut w: Vec<f64> = opts.pinned.iter().map(|p| p.unwrap_or(0.0)).collect();
    let m = free.len();
    if m == 0 {
        return w;
    }
    let l2 = opts.l2.max(1e-9);
    let mut current = loss(decisions, &w, opts);
    for _ in 0..opts.iterations {
        // Gradient and Hessian over the free weights.
        let mut g = vec![0.0; m];
        let mut h = vec![vec![0.0; m]; m];
        for (a, &k) in free.iter().enumerate() {
            g[a] = l2 * w[k];
            h[a][a] = l2;
        }
        for d in decisions {
            let t = dot(&w, &d.target);
            for n in &d.negatives {
                let z = t - dot(&w, n);
                let p = sigmoid(-z);
                let curv = p * (1.0 - p);
                let diff: Vec<f64> = free.iter().map(|&k| d.target[k] - n[k]).collect();
                for a in 0..m {
                    g[a] -= p * diff[a];
                    if diff[a] != 0.0 {
                        for b in 0..m {
                            h[a][b] += curv * diff[a] * diff[b];
                        }
                    }
                }
            }
        }
        let Some(step) = solve(h, g) else {
            break;
        };
        // Backtracking: halve the Newton step until the loss falls.
        let mut scale = 1.0;
        let mut improved = false;
        for _ in 0..30 {
            let mut next = w.clone();
            for (a, &k) in free.iter().enumerate() {
                next[k] -= scale * step[a];
            }
            let l = loss(decisions, &next, opts);
            if l < current {
                let gain = current - l;
                w = next;
                current = l;
                improved = gain > 1e-10 * (1.0 + current.abs());
                break;
            }
            scale *= 0.5;
        }
        if !improved {
            break;
        }
    }
    w
}

/// MRR and HR@1 of a set of weights on some decisions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Hit rate at 1.
    pub hr1: f64,
}

/// MRR and HR@1 of `w` on `decisions` (ties as half places).
pub fn figures(decisions: &[&Decision], w: &[f64]) -> Figures {
    let ranks: Vec<f64> = decisions.iter().map(|d| d.rank(w)).collect();
    let (mrr, hr1) = crate::holdout::figures(&ranks);
    Figures { mrr, hr1 }
}

/// One pool's decisions: the pool's name (`catalog`, `observed`) and the
/// feature rows. Every pool of one fit lists the same users in the same
/// order, so an index's parity puts a user in the same half of every pool.
pub type Pool<'a> = (&'static str, &'a [Decision]);

/// The given and the fitted weights' figures on one pool's decisions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolFigures {
    /// The pool (`catalog` or `observed`).
    pub pool: &'static str,
    /// The given weights on the pool's decisions.
    pub spec: Figures,
    /// Weights fitted on one half of the decisions (every pool's), scored
    /// on the other half of this pool's, both ways round.
    pub fitted: Figures,
}

/// The 2-fold held-out figures of fitted weights on each pool: the
/// decisions at even indices of every pool fit the weights that score the
/// odd ones, and the other way round. A user sits in one half of every pool
/// (module docs of [`Pool`]), so no target is both fitted on and scored.
pub fn cross_figures(pools: &[Pool<'_>], opts: &FitOptions) -> Vec<Figures> {
    let half = |r: usize| -> Vec<Vec<&Decision>> {
        pools
            .iter()
            .map(|(_, ds)| {
                ds.iter()
                    .enumerate()
                    .filter(|(k, _)| k % 2 == r)
                    .map(|(_, d)| d)
                    .collect()
            })
            .collect()
    };
    let (even, odd) = (half(0), half(1));
    let fit_on = |h: &[Vec<&Decision>]| -> Vec<f64> {
        let all: Vec<Decision> = h.iter().flatten().map(|&d| d.clone()).collect();
        fit(&all, opts)
    };
    let (w_even, w_odd) = (fit_on(&even), fit_on(&odd));
    even.iter()
        .zip(&odd)
        .map(|(e, o)| {
            let f_odd = figures(o, &w_even);
            let f_even = figures(e, &w_odd);
            let n = (e.len() + o.len()).max(1) as f64;
            let (no, ne) = (o.len() as f64, e.len() as f64);
            Figures {
                mrr: (f_odd.mrr * no + f_even.mrr * ne) / n,
                hr1: (f_odd.hr1 * no + f_even.hr1 * ne) / n,
            }
        })
        .collect()
}

/// Figures of `w` on each pool's decisions.
pub fn pool_figures(pools: &[Pool<'_>], w: &[f64]) -> Vec<Figures> {
    pools
        .iter()
        .map(|(_, ds)| figures(&ds.iter().collect::<Vec<_>>(), w))
        .collect()
}

/// Weights fitted on every pool's decisions together.
pub fn fit_across(pools: &[Pool<'_>], opts: &FitOptions) -> Vec<f64> {
    let all: Vec<Decision> = pools
        .iter()
        .flat_map(|(_, ds)| ds.iter().cloned())
        .collect();
    fit(&all, opts)
}

/// The mean of per-pool figures, each pool weighted by its decisions
/// (`sizes`, in the same order).
pub fn mean_figures(sizes: &[usize], per_pool: &[Figures]) -> Figures {
    let n = sizes.iter().sum::<usize>().max(1) as f64;
    let (mut mrr, mut hr1) = (0.0, 0.0);
    for (&k, f) in sizes.iter().zip(per_pool) {
        mrr += f.mrr * k as f64;
        hr1 += f.hr1 * k as f64;
    }
    Figures {
        mrr: mrr / n,
        hr1: hr1 / n,
    }
}

/// Whether fitted weights replace the given ones ([`verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The fitted weights beat the given ones on every pool: they are used.
    Fitted,
    /// Fewer decisions than the floor: the given weights stand.
    TooFewDecisions,
    /// The fitted weights do not beat the given ones on some pool's
    /// held-out decisions: the given weights stand.
    NoGain,
}

/// The rule of every run-time fit (module docs): fitted weights are used
/// only with at least `min_decisions` decisions (users) and a held-out MRR
/// above the given weights' by more than `1 / decisions` on every pool. No
/// pool at all is no gain.
pub fn verdict(
    decisions: usize,
    min_decisions: usize,
    spec: &[Figures],
    fitted: &[Figures],
) -> Verdict {
    if decisions < min_decisions {
        Verdict::TooFewDecisions
    } else if spec.is_empty()
        || spec.len() != fitted.len()
        || spec
            .iter()
            .zip(fitted)
            .any(|(s, f)| f.mrr <= s.mrr + 1.0 / decisions.max(1) as f64)
    {
        Verdict::NoGain
    } else {
        Verdict::Fitted
    }
}

/// What [`choose_across`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// `auto`; `auto (too few decisions: spec weights)` or `auto (no gain:
    /// spec weights)` when the given weights stand.
    pub mode: &'static str,
    /// The given weights on the decisions (every pool's, weighted by size).
    pub spec: Figures,
    /// The fitted weights on the decisions, each half scored with the
    /// weights fitted on the other (every pool's, weighted by size).
    pub fitted: Figures,
    /// Each pool's figures.
    pub pools: Vec<PoolFigures>,
    /// The weights in force.
    pub weights: Vec<f64>,
}

/// [`choose_across`] on one pool of decisions (named `given`).
pub fn choose(
    decisions: &[Decision],
    given: &[f64],
    opts: &FitOptions,
    min_decisions: usize,
) -> Choice {
    choose_across(&[("given", decisions)], given, opts, min_decisions)
}

/// Fit weights on every pool's decisions and keep them only when they earn
/// it (module docs): with fewer than `min_decisions` decisions (the largest
/// pool's count: every pool holds the same users), or a 2-fold held-out MRR
/// no better than `given`'s on some pool, the given weights stand.
pub fn choose_across(
    pools: &[Pool<'_>],
    given: &[f64],
    opts: &FitOptions,
    min_decisions: usize,
) -> Choice {
    let spec = pool_figures(pools, given);
    let fitted = cross_figures(pools, opts);
    let sizes: Vec<usize> = pools.iter().map(|(_, ds)| ds.len()).collect();
    let users = sizes.iter().copied().max().unwrap_or(0);
    let (mode, weights) = match verdict(users, min_decisions, &spec, &fitted) {
        Verdict::Fitted => ("auto", fit_across(pools, opts)),
        Verdict::TooFewDecisions => ("auto (too few decisions: spec weights)", given.to_vec()),
        Verdict::NoGain => ("auto (no gain: spec weights)", given.to_vec()),
    };
    Choice {
        mode,
        spec: mean_figures(&sizes, &spec),
        fitted: mean_figures(&sizes, &fitted),
        pools: pools
            .iter()
            .zip(spec.iter().zip(&fitted))
            .map(|((name, _), (&s, &f))| PoolFigures {
                pool: name,
                spec: s,
                fitted: f,
            })
            .collect(),
        weights,
    }
}

/// What a ranker's fit found, for `metrics.json` (`stats.fit`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    /// [`Choice::mode`].
    pub mode: &'static str,
    /// Fit decisions.
    pub decisions: usize,
    /// Observed events the decisions were drawn from.
    pub events: usize,
    /// Where the negatives came from (`catalog` or `observed`).
    pub negatives_from: &'static str,
    /// [`Choice::spec`].
    pub spec: Figures,
    /// [`Choice::fitted`].
    pub fitted: Figures,
    /// [`Choice::pools`].
    pub pools: Vec<PoolFigures>,
    /// The weights in force after the fit, by key.
    pub weights: BTreeMap<&'static str, f64>,
}

impl FitReport {
    /// The report of `choice`, its weights named by `keys` (feature order).
    pub fn new(
        choice: &Choice,
        keys: &[&'static str],
        decisions: usize,
        events: usize,
        negatives_from: &'static str,
    ) -> Self {
        Self {
            mode: choice.mode,
            decisions,
            events,
            negatives_from,
            spec: choice.spec,
            fitted: choice.fitted,
            pools: choice.pools.clone(),
            weights: keys
                .iter()
                .copied()
                .zip(choice.weights.iter().copied())
                .collect(),
        }
    }
}

/// Solve `a · x = b` by Gaussian elimination with partial pivoting; `None`
/// when `a` is singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (off, r) in rest.iter_mut().enumerate() {
            let f = r[col] / pivot_row[col];
            if f != 0.0 {
                for (x, p) in r.iter_mut().zip(pivot_row.iter()).skip(col) {
                    *x -= f * p;
                }
                b[col + 1 + off] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Decisions whose targets are drawn from a known logistic model: the
    /// fit recovers the direction of the true weights, gives a useless
    /// feature (pure noise) a weight near 0, and a pinned weight keeps its
    /// value.
    #[test]
    fn recovers_a_planted_model_and_ignores_noise() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let truth = [2.0, -1.0, 0.0];
        let mut ds = Vec::new();
        for _ in 0..600 {
            // Ten items; the target is drawn with softmax(truth · x).
            let rows: Vec<Vec<f64>> = (0..10)
                .map(|_| (0..3).map(|_| rng.gen_range(-1.0..1.0)).collect())
                .collect();
            let e: Vec<f64> = rows.iter().map(|r| dot(&truth, r).exp()).collect();
            let total: f64 = e.iter().sum();
            let mut u = rng.gen::<f64>() * total;
            let mut t = 0;
            for (k, x) in e.iter().enumerate() {
                if u < *x {
                    t = k;
                    break;
                }
                u -= x;
            }
            let target = rows[t].clone();
            let negatives = rows
                .into_iter()
                .enumerate()
                .filter(|(k, _)| *k != t)
                .map(|(_, r)| r)
                .collect();
            ds.push(Decision { target, negatives });
        }
        let w = fit(&ds, &FitOptions::free(3));
        assert!(w[0] > 1.2 && w[0] < 2.8, "{w:?}");
        assert!(w[1] < -0.5 && w[1] > -1.5, "{w:?}");
        assert!(w[2].abs() < 0.3, "{w:?}");
        // The fitted weights beat the zero ranker and the planted one is
        // no better than the fit on its own data (the fit minimises loss).
        let opts = FitOptions::free(3);
        assert!(loss(&ds, &w, &opts) <= loss(&ds, &truth, &opts) + 1e-9);
        assert!(loss(&ds, &w, &opts) < loss(&ds, &[0.0; 3], &opts));
        // Pinned: the second weight held at 0.
        let mut pinned = FitOptions::free(3);
        pinned.pinned[1] = Some(0.0);
        let wp = fit(&ds, &pinned);
        assert_eq!(wp[1], 0.0);
        assert!(wp[0] > 0.5, "{wp:?}");
    }

    #[test]
    fn a_constant_feature_gets_zero_and_no_decisions_give_zeros() {
        let ds: Vec<Decision> = (0..50)
            .map(|k| Decision {
                target: vec![1.0, 3.0],
                negatives: vec![vec![if k % 5 == 0 { 2.0 } else { 0.0 }, 3.0]],
            })
            .collect();
        let w = fit(&ds, &FitOptions::free(2));
        assert!(w[0] > 0.0);
        assert_eq!(w[1], 0.0, "a feature equal on both sides is never used");
        assert_eq!(fit(&[], &FitOptions::free(2)), vec![0.0, 0.0]);
        assert_eq!(ds[1].rank(&w), 1.0);
        assert_eq!(ds[1].rank(&[0.0, 0.0]), 1.5, "a tie counts half");
    }

    /// Only the second of three features says which item is the target:
    /// given weights that lean on the first, [`choose`] finds the second,
    /// beats the given weights on held-out halves and uses the fit; given
    /// weights already on the second, or too few decisions, stand.
    #[test]
    fn choose_moves_to_the_only_informative_feature() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let ds: Vec<Decision> = (0..300)
            .map(|_| {
                let mut row = |signal: f64| -> Vec<f64> {
                    vec![
                        rng.gen_range(-1.0..1.0),
                        signal + rng.gen_range(-1.0..1.0),
                        rng.gen_range(-1.0..1.0),
                    ]
                };
                Decision {
                    target: row(1.0),
                    negatives: (0..9).map(|_| row(0.0)).collect(),
                }
            })
            .collect();
        let opts = FitOptions::free(3);
        let c = choose(&ds, &[1.0, 0.1, 0.5], &opts, 100);
        assert_eq!(c.mode, "auto");
        assert!(c.fitted.mrr > c.spec.mrr + 0.1, "{c:?}");
        assert!(c.weights[1] > 1.0, "{c:?}");
        assert!(
            c.weights[0].abs() < 0.2 && c.weights[2].abs() < 0.2,
            "{c:?}"
        );
        let right = choose(&ds, &[0.0, 1.0, 0.0], &opts, 100);
        assert_eq!(right.mode, "auto (no gain: spec weights)", "{right:?}");
        assert_eq!(right.weights, vec![0.0, 1.0, 0.0]);
        let few = choose(&ds, &[1.0, 0.1, 0.5], &opts, 301);
        assert_eq!(few.mode, "auto (too few decisions: spec weights)");
        assert_eq!(few.weights, vec![1.0, 0.1, 0.5]);
        let report = FitReport::new(&c, &["a", "b", "c"], ds.len(), 600, "catalog");
        assert_eq!(report.weights["b"], c.weights[1]);
    }

    /// Issue 55: one pool's decisions reward the first feature, the other
    /// pool's (the same users with other negatives) punish it. A fit on the
    /// first pool alone wins there and is used; across both pools it is
    /// fitted on both and loses on the second, so the given weights stand,
    /// and the report names each pool's figures.
    #[test]
    fn choose_across_keeps_the_given_weights_unless_every_pool_gains() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut pool = |signal: f64| -> Vec<Decision> {
            (0..300)
                .map(|_| {
                    let mut row =
                        |s: f64| vec![s + rng.gen_range(-1.0..1.0), rng.gen_range(-1.0..1.0)];
                    Decision {
                        target: row(signal),
                        negatives: (0..9).map(|_| row(0.0)).collect(),
                    }
                })
                .collect()
        };
        let (a, b) = (pool(1.5), pool(-0.7));
        let opts = FitOptions::free(2);
        let given = [0.0, 0.0];
        let alone = choose_across(&[("a", &a)], &given, &opts, 100);
        assert_eq!(alone.mode, "auto", "{alone:?}");
        assert!(alone.weights[0] > 0.5, "{alone:?}");
        let both = choose_across(&[("a", &a), ("b", &b)], &given, &opts, 100);
        assert_eq!(both.mode, "auto (no gain: spec weights)", "{both:?}");
        assert_eq!(both.weights, given.to_vec());
        assert_eq!(both.pools.len(), 2);
        assert_eq!((both.pools[0].pool, both.pools[1].pool), ("a", "b"));
        assert!(
            both.pools[0].fitted.mrr > both.pools[0].spec.mrr,
            "{both:?}"
        );
        assert!(
            both.pools[1].fitted.mrr < both.pools[1].spec.mrr,
            "{both:?}"
        );
        assert_eq!(
            verdict(300, 100, &[alone.spec], &[alone.fitted]),
            Verdict::Fitted
        );
        assert_eq!(verdict(99, 100, &[], &[]), Verdict::TooFewDecisions);
        assert_eq!(verdict(300, 100, &[], &[]), Verdict::NoGain);
    }

    /// A win by less than one decision's reciprocal rank (`1/n`) is no
    /// gain: ml-100k's 943 decisions, a fit 0.0007 MRR ahead (issue 55).
    #[test]
    fn a_win_within_one_decision_is_no_gain() {
        let f = |mrr: f64| Figures { mrr, hr1: 0.0 };
        let spec = [f(0.7935)];
        assert_eq!(verdict(943, 200, &spec, &[f(0.7942)]), Verdict::NoGain);
        assert_eq!(verdict(943, 200, &spec, &[f(0.7950)]), Verdict::Fitted);
        // Every pool must clear the bar.
        assert_eq!(
            verdict(943, 200, &[f(0.5), f(0.5)], &[f(0.6), f(0.5005)]),
            Verdict::NoGain
        );
    }
}
