//! `itemknn`: item-based collaborative filtering with cosine similarity
//! (Sarwar et al., WWW 2001, §3.1.1, on binary implicit feedback).
//!
//! With `U_i` the set of users observed with item `i`,
//!
//! ```text
//! sim(i, j)   = |U_i ∩ U_j| / sqrt(|U_i| · |U_j|)          (cosine of binary columns)
//! score(u, c) = Σ_{j ∈ I_u, j ≠ c, j ∈ N_k(c)} sim(c, j)
//! ```
//!
//! where `I_u` are the items observed for user `u` and `N_k(c)` the `k` most
//! similar items to `c` (ties by item index; `k = 0` means all items).
//!
//! **How scores are computed.** `|U_i ∩ U_j|` comes from co-occurrence
//! counts that [`Observed`] keeps up to date as interactions arrive
//! ([`Observed::with_co_counts`]): each new distinct `(u, i)` adds one to
//! `(i, j)` for every `j` already seen with `u`. So the model is always
//! exactly up to date under both protocols and needs no `maintain`, a
//! `k = 0` score is `|I_u|` lookups, and nothing is `O(items²)` beyond the
//! pairs actually co-consumed (the catalog can be large: 64k items for CDs).
//!
//! **Cost at scale (issue 16).** An earlier version intersected audiences at
//! `recall` (a pass over the candidate's users and their items). That costs
//! the size of an audience per candidate, which grows with the number of
//! users, so a run's time grew with users²: time exponent 1.54 on the
//! generated 100k–1M interaction curves, and 1.40 with a cap of 600 users
//! per pass (which sampled, and so approximated, above it). The counts make
//! a run's cost `Σ_u |I_u|²/2` updates plus `|I_u|` lookups per candidate:
//! linear in users at a fixed activity distribution, and exact at any size.
//!
//! `k > 0` needs `N_k(c)`, the whole similarity row of `c`, so it still
//! walks `c`'s users (the most recent [`MAX_CO_USERS`], scaled as described
//! there); `k = 0`, the default, does not.
//!
//! **Shrinkage** (`shrink`, λ ≥ 0, issue 42): `sim(i, j) = |U_i ∩ U_j| /
//! (sqrt(|U_i| · |U_j|) + λ)`, which discounts similarities resting on few
//! users (on sparse data most co-occurrences are one or two users). λ = 0
//! is the cosine above, bit for bit.
//!
//! **Fit** (`fit=auto`): λ is chosen at run time from [`SHRINK_GRID`] on
//! validation decisions only ([`evomem_kit::holdout`]: each user's latest
//! observed interaction held out, `FIT_NEGATIVES` unseen negatives, the
//! model rebuilt from every other observed interaction), by mean
//! reciprocal rank (ties: the smaller λ), at the first `recall` and again
//! whenever the observed interactions have doubled. With fewer than
//! `FIT_MIN` decisions the spec's λ stands. `fit=none` (the default) uses
//! the spec's λ; `itemknn[fit=none]` with λ = 0 is the ranking above. Cost:
//! one more model built from the observed interactions, and `decisions ×
//! (1 + negatives) × |I_u|` lookups per grid point. The choice and every
//! grid point's figures are in `metrics.json` (`stats.fit`).

use super::scored;
use evomem_core::{
    DecisionQuery, Interaction, ItemId, LogicalTime, PlannedOp, Policy, PolicyCtx, PolicyError,
    Recall, UserId,
};
use evomem_kit::holdout::{self, Event, HoldOutSettings, NegativePool};
use evomem_kit::observed::grow;
use evomem_kit::Observed;
use serde::Serialize;

/// Shrinkage values `fit=auto` tries.
///
/// The first grid stopped at 100, and the generated sparse set's fit chose
/// that edge (held-out MRR still rising), so 300 and 1000 were added.
pub const SHRINK_GRID: [f64; 8] = [0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0];
/// Negatives per fit decision.
pub const FIT_NEGATIVES: usize = 9;
/// Fewest fit decisions whose choice is used.
pub const FIT_MIN: usize = 200;

/// One grid point's figures on the fit decisions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShrinkPoint {
    /// λ.
    pub shrink: f64,
    /// Mean reciprocal rank of the held-out targets.
    pub mrr: f64,
    /// Hit rate at 1.
    pub hr1: f64,
}

/// What a fit chose (`stats.fit`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KnnFitReport {
    /// `auto`, or `auto (too few decisions: spec shrink)`.
    pub mode: &'static str,
    /// Fit decisions.
    pub decisions: usize,
    /// The λ in force.
    pub shrink: f64,
    /// Every grid point.
    pub grid: Vec<ShrinkPoint>,
}

/// Most users of a candidate whose items are walked for a `k > 0`
/// neighbourhood: the most recent ones. When `|U_c|` is larger, the walked
/// sample's counts are scaled by `|U_c| / MAX_CO_USERS` (the sample's
/// estimate of the full count). Above ml-100k's largest item audience (583),
/// so exact there.
pub const MAX_CO_USERS: usize = 600;

/// The `itemknn` baseline.
#[derive(Debug, Clone, Default)]
pub struct ItemKnn {
    k: usize,
    /// Shrinkage λ (module docs).
    shrink: f64,
    /// `fit=auto`: the run seed the fit's negatives are drawn with.
    fit_seed: Option<u64>,
    /// Observed events, for the fit (kept only with `fit=auto`).
    events: Vec<Event>,
    /// The latest fit's report.
    fitted: Option<KnnFitReport>,
    /// Events observed at the latest fit.
    fitted_at: usize,
    seen: Observed,
    /// Scratch: items of the current user.
    mask: Vec<bool>,
    /// Scratch: co-occurrence counts with the current candidate.
    cooc: Vec<u32>,
    touched: Vec<u32>,
}

impl ItemKnn {
    /// An item-kNN scorer using the `k` nearest neighbours (0 = all).
    pub fn new(k: usize) -> Self {
        Self {
            k,
            // Only `k = 0` reads the counts (module docs).
            seen: if k == 0 {
                Observed::with_co_counts()
            } else {
                Observed::new()
            },
            ..Self::default()
        }
    }

    /// With shrinkage λ (`shrink`, default 0: the cosine) and, when
    /// `fit_seed` is given, λ fitted at run time from [`SHRINK_GRID`] with
    /// that seed (module docs). Fails on a negative or non-finite λ.
    pub fn with_fit(k: usize, shrink: f64, fit_seed: Option<u64>) -> Result<Self, PolicyError> {
        if !(shrink.is_finite() && shrink >= 0.0) {
            return Err(PolicyError::Config(format!(
                "itemknn: `shrink` must be >= 0, got {shrink}"
            )));
        }
        Ok(Self {
            shrink,
            fit_seed,
            ..Self::new(k)
        })
    }

    /// Item similarity (module docs): the cosine, shrunk by λ.
    fn sim(&self, a: u32, b: u32) -> f64 {
        if self.shrink == 0.0 {
            return self.seen.cosine(a, b);
        }
        let (na, nb) = (self.seen.users_of(a).len(), self.seen.users_of(b).len());
        if a == b || na == 0 || nb == 0 {
            return 0.0;
        }
        f64::from(self.seen.co_count(a, b)) / (((na * nb) as f64).sqrt() + self.shrink)
    }

    /// `score(u, c)` over every item of the user (`k = 0`), from the kept
    /// co-occurrence counts, summed in the user's history order.
    fn score_all(&self, c: u32, mine: &[u32]) -> f64 {
        mine.iter().map(|&j| self.sim(c, j)).sum()
    }

    /// Scores of `cands` for `user` (either `k`).
    fn scores(&mut self, n_catalog: usize, user: u32, cands: &[ItemId]) -> Vec<f64> {
        let mine: Vec<u32> = self.seen.items_of(user).to_vec();
        if self.k == 0 {
            return cands.iter().map(|c| self.score_all(c.0, &mine)).collect();
        }
        let n = n_catalog
            .max(self.seen.item_users.len())
            .max(cands.iter().map(|c| c.index() + 1).max().unwrap_or(0));
        grow(&mut self.mask, n);
        grow(&mut self.cooc, n);
        for &j in &mine {
            self.mask[j as usize] = true;
        }
        let scores = cands.iter().map(|c| self.score_k(c.0)).collect();
        for &j in &mine {
            self.mask[j as usize] = false;
        }
        scores
    }

    /// `fit=auto`: choose λ when nothing was fitted yet or the observed
    /// events have doubled since (module docs).
    fn fit_if_due(&mut self, n_catalog: usize) {
        let Some(seed) = self.fit_seed else { return };
        let due = self.fitted.is_none() || self.events.len() >= 2 * self.fitted_at.max(1);
        if !due || self.events.is_empty() {
            return;
        }
        self.fitted_at = self.events.len();
        let n_items = n_catalog.max(self.seen.item_users.len());
        let settings = HoldOutSettings {
            negatives: FIT_NEGATIVES,
            users: 0,
            seed,
            pool: NegativePool::Auto,
        };
        let (held, decisions) = holdout::hold_out(&self.events, n_items, &settings);
        let mut view = ItemKnn::new(self.k);
        for (k, (&(u, i, _), &h)) in self.events.iter().zip(&held).enumerate() {
            if !h {
                view.seen.record(&Interaction {
                    user: UserId(u),
                    item: ItemId(i),
                    rating: None,
                    timestamp: 0,
                    time: LogicalTime(k as u64),
                });
            }
        }
        let mut grid = Vec::with_capacity(SHRINK_GRID.len());
        let mut best: Option<(f64, f64)> = None;
        for &shrink in &SHRINK_GRID {
            view.shrink = shrink;
            let ranks: Vec<f64> = decisions
                .iter()
                .map(|d| {
                    let mut cands = vec![ItemId(d.target)];
                    cands.extend(d.negatives.iter().map(|&c| ItemId(c)));
                    let s = view.scores(n_catalog, d.user, &cands);
                    holdout::rank_of(s.first().copied().unwrap_or(0.0), s.get(1..).unwrap_or(&[]))
                })
                .collect();
            let (mrr, hr1) = holdout::figures(&ranks);
            grid.push(ShrinkPoint { shrink, mrr, hr1 });
            if best.is_none_or(|b| mrr > b.1) {
                best = Some((shrink, mrr));
            }
        }
        let used = decisions.len() >= FIT_MIN;
        if let (true, Some((shrink, _))) = (used, best) {
            self.shrink = shrink;
        }
        self.fitted = Some(KnnFitReport {
            mode: if used {
                "auto"
            } else {
                "auto (too few decisions: spec shrink)"
            },
            decisions: decisions.len(),
            shrink: self.shrink,
            grid,
        });
    }

    /// `score(u, c)` over the `k` nearest neighbours of `c`, for the user
    /// whose items are set in `self.mask`: a walk over `c`'s users.
    fn score_k(&mut self, c: u32) -> f64 {
        let all_c = self.seen.users_of(c);
        if all_c.is_empty() {
            return 0.0;
        }
        let n_c = all_c.len() as f64;
        let walked = &all_c[all_c.len().saturating_sub(MAX_CO_USERS)..];
        // Scale of the sampled counts (1 when every user is walked).
        let scale = n_c / walked.len() as f64;
        for &v in walked {
            for &j in self.seen.items_of(v) {
                if j == c {
                    continue;
                }
                let slot = &mut self.cooc[j as usize];
                if *slot == 0 {
                    self.touched.push(j);
                }
                *slot += 1;
            }
        }
        let shrink = self.shrink;
        let sim = |j: u32, co: u32| {
            let norm = (n_c * self.seen.users_of(j).len() as f64).sqrt();
            if shrink == 0.0 {
                scale * f64::from(co) / norm
            } else {
                scale * f64::from(co) / (norm + shrink)
            }
        };
        let mut total = 0.0;
        let mut nb: Vec<(f64, u32)> = self
            .touched
            .iter()
            .map(|&j| (sim(j, self.cooc[j as usize]), j))
            .collect();
        nb.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(s, j) in nb.iter().take(self.k) {
            if self.mask[j as usize] {
                total += s;
            }
        }
        for &j in &self.touched {
            self.cooc[j as usize] = 0;
        }
        self.touched.clear();
        total
    }
}

impl Policy for ItemKnn {
    fn name(&self) -> &str {
        "itemknn"
    }

    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.seen.record(event);
        if self.fit_seed.is_some() {
            self.events
                .push((event.user.0, event.item.0, Some(event.timestamp)));
        }
        Ok(Vec::new())
    }

    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        self.fit_if_due(ctx.catalog.len());
        let scores = self.scores(ctx.catalog.len(), query.user.0, query.candidates());
        Ok(scored(query, scores))
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "observed": self.seen.n_events,
            "k": self.k,
            "shrink": self.shrink,
            "co_pairs": self.seen.co_pairs(),
            "fit": match &self.fitted {
                Some(r) => serde_json::to_value(r).unwrap_or(serde_json::Value::Null),
                None => serde_json::json!({ "mode": if self.fit_seed.is_some() { "auto" } else { "none" } }),
            },
        })
    }
}
