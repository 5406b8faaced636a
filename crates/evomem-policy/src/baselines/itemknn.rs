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
//! Similarities are computed on the fly at `recall` from the observed
//! co-occurrence (a pass over the users of each candidate), so the model is
//! always exactly up to date under both protocols and needs no `maintain`; the
//! catalog can be large (64k items for CDs) because nothing is `O(items²)`.
//!
//! **Bounded cost at scale.** The pass over a candidate's users walks at most
//! [`MAX_CO_USERS`] of them, the most recently observed; when `|U_c|` is
//! larger, the co-occurrence counts of that sample are scaled by
//! `|U_c| / MAX_CO_USERS` (the sample's estimate of the full count) before
//! the cosine. Without the bound a decision's cost grows with the number of
//! users, so a run's time grows with users² (time exponent 1.54 on the
//! generated 100k–1M interaction curves, issue 16). No ml-100k item reaches
//! the bound (the most popular has 583 users), so scores there are exact.

use super::scored;
use evomem_core::{DecisionQuery, Interaction, PlannedOp, Policy, PolicyCtx, PolicyError, Recall};
use evomem_kit::observed::grow;
use evomem_kit::Observed;

/// Most users of a candidate whose items are walked at `recall` (module
/// docs): above ml-100k's largest item audience (583), so exact there.
pub const MAX_CO_USERS: usize = 600;

/// The `itemknn` baseline.
#[derive(Debug, Clone, Default)]
pub struct ItemKnn {
    k: usize,
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
            ..Self::default()
        }
    }

    /// `score(u, c)` for the user whose items are set in `self.mask`.
    fn score(&mut self, c: u32) -> f64 {
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
        let sim = |j: u32, co: u32| {
            scale * f64::from(co) / (n_c * self.seen.users_of(j).len() as f64).sqrt()
        };
        let mut total = 0.0;
        if self.k == 0 {
            for &j in &self.touched {
                if self.mask[j as usize] {
                    total += sim(j, self.cooc[j as usize]);
                }
            }
        } else {
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
        Ok(Vec::new())
    }

    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        let n = ctx.catalog.len().max(self.seen.item_users.len()).max(
            query
                .candidates()
                .iter()
                .map(|c| c.index() + 1)
                .max()
                .unwrap_or(0),
        );
        grow(&mut self.mask, n);
        grow(&mut self.cooc, n);
        let mine: Vec<u32> = self.seen.items_of(query.user.0).to_vec();
        for &j in &mine {
            self.mask[j as usize] = true;
        }
        let scores = query.candidates().iter().map(|c| self.score(c.0)).collect();
        for &j in &mine {
            self.mask[j as usize] = false;
        }
        Ok(scored(query, scores))
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "observed": self.seen.n_events, "k": self.k })
    }
}
