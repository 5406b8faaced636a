//! The one rating estimator of the delayed-feedback arena, shared by every
//! method that predicts ratings (the arena's local methods and TIDE's
//! `Predict` path), so that no method gains from a better-tuned baseline
//! than the others (`tide-recommendation-feedback-evolves-memory`, Arena B:
//! methods differ in their memory, not in the estimator under it).
//!
//! ```text
//! μ   = mean of every matured label (any user)              prior 3.0
//! b_i = Σ_{matured (u,i)} (r − μ) / (n_i + λ_item)          λ_item = 10
//! b_u = Σ_{j ∈ user's labels} (r_j − μ − b_j) / (n + λ_user) λ_user = 5
//! r̂   = clamp(μ + b_u + b_i, 1, 5)
//! ```
//!
//! The statistics are fed only with matured labels by the caller, so they
//! never see an unmatured one.

use evomem_core::ItemId;

/// Shrinkage of item biases toward 0.
pub const LAMBDA_ITEM: f64 = 10.0;
/// Shrinkage of user offsets toward 0.
pub const LAMBDA_USER: f64 = 5.0;
/// The scale of the ratings.
pub const SCALE: (f64, f64) = (1.0, 5.0);
/// Prior mean before any label has matured (the middle of the scale).
pub const PRIOR_MEAN: f64 = 3.0;

/// Clamp a prediction to the rating scale.
pub fn clamp(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(SCALE.0, SCALE.1)
    } else {
        PRIOR_MEAN
    }
}

/// Running global statistics over matured labels.
#[derive(Debug, Clone, Default)]
pub struct GlobalStats {
    sum: f64,
    n: u64,
    item_sum: Vec<f64>,
    item_n: Vec<u32>,
}

impl GlobalStats {
    /// Statistics for a catalog of `items` items.
    pub fn new(items: usize) -> Self {
        Self {
            sum: 0.0,
            n: 0,
            item_sum: vec![0.0; items],
            item_n: vec![0; items],
        }
    }

    /// A matured label.
    pub fn add(&mut self, item: ItemId, rating: f64) {
        self.sum += rating;
        self.n += 1;
        let i = item.index();
        if i >= self.item_sum.len() {
            self.item_sum.resize(i + 1, 0.0);
            self.item_n.resize(i + 1, 0);
        }
        self.item_sum[i] += rating;
        self.item_n[i] += 1;
    }

    /// Matured labels so far.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// μ ([`PRIOR_MEAN`] before any label).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            PRIOR_MEAN
        } else {
            self.sum / self.n as f64
        }
    }

    /// The sum and count of `item`'s matured labels.
    pub fn item_total(&self, item: ItemId) -> (f64, u32) {
        let i = item.index();
        match (self.item_sum.get(i), self.item_n.get(i)) {
            (Some(&s), Some(&n)) => (s, n),
            _ => (0.0, 0),
        }
    }

    /// b_i.
    pub fn item_bias(&self, item: ItemId) -> f64 {
        let i = item.index();
        let (Some(s), Some(&n)) = (self.item_sum.get(i), self.item_n.get(i)) else {
            return 0.0;
        };
        (s - f64::from(n) * self.mean()) / (f64::from(n) + LAMBDA_ITEM)
    }

    /// The residual of a label against μ + b_i.
    pub fn residual(&self, item: ItemId, rating: f64) -> f64 {
        rating - self.mean() - self.item_bias(item)
    }

    /// b_u from a user's (item, rating) labels.
    pub fn user_offset<I: IntoIterator<Item = (ItemId, f64)>>(&self, labels: I) -> f64 {
        let (mut s, mut n) = (0.0, 0.0);
        for (i, r) in labels {
            s += self.residual(i, r);
            n += 1.0;
        }
        s / (n + LAMBDA_USER)
    }

    /// μ + b_u + b_i, clamped.
    pub fn predict(&self, user_offset: f64, item: ItemId) -> f64 {
        clamp(self.mean() + user_offset + self.item_bias(item))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn biases_are_shrunk_residual_means() {
        let mut g = GlobalStats::new(2);
        assert_eq!(g.mean(), PRIOR_MEAN);
        g.add(ItemId(0), 5.0);
        g.add(ItemId(1), 3.0);
        g.add(ItemId(0), 4.0);
        assert!((g.mean() - 4.0).abs() < 1e-12);
        // item 0: (9 − 2·4) / (2 + 10)
        assert!((g.item_bias(ItemId(0)) - 1.0 / 12.0).abs() < 1e-12);
        assert_eq!(g.item_bias(ItemId(7)), 0.0);
        let off = g.user_offset([(ItemId(1), 2.0)]);
        let want = (2.0 - 4.0 - g.item_bias(ItemId(1))) / 6.0;
        assert!((off - want).abs() < 1e-12);
        assert_eq!(clamp(7.0), 5.0);
        assert_eq!(clamp(f64::NAN), PRIOR_MEAN);
    }
}
