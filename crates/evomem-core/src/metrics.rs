//! Ranking metrics math (HR@K, NDCG@K, MRR). Pure functions, no I/O.
//!
//! Every decision of the ranking arena has exactly one relevant item (the
//! held-out target) among its candidates, so each metric is a function of the
//! target's 1-based rank `r` alone:
//!
//! - `HR@K = 1 if r <= K else 0` (hit ratio);
//! - `NDCG@K = 1 / log2(r + 1) if r <= K else 0`. With one relevant item the
//!   ideal DCG is `1 / log2(2) = 1`, so NDCG equals DCG (Järvelin & Kekäläinen,
//!   2002; the form used by MARS §5.1 and AtomRec §4.1);
//! - `MRR = 1 / r` (reciprocal rank; averaged over users it is the mean
//!   reciprocal rank).
//!
//! [`rank_of_target`] turns candidate scores into the target's rank. Ties are
//! broken by candidate position: among equal scores the candidate listed
//! earlier ranks higher. Protocols shuffle candidates with a seeded RNG, so
//! this rule is deterministic and not in the target's favour on average (the
//! target gets a uniformly random place among the items it ties with).
//!
//! Aggregation across users and the paired bootstrap live in `evomem-eval`.

use serde::{Deserialize, Serialize};

/// Cut-offs reported for HR and NDCG.
pub const CUTOFFS: [usize; 4] = [1, 3, 5, 10];

/// Metric names in report order.
pub const METRIC_NAMES: [&str; 9] = [
    "HR@1", "HR@3", "HR@5", "HR@10", "NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "MRR",
];

/// Hit ratio at `k` for a target at 1-based `rank` (0 is treated as "not ranked").
pub fn hit_at(rank: usize, k: usize) -> f64 {
    if rank >= 1 && rank <= k {
        1.0
    } else {
        0.0
    }
}

/// NDCG at `k` for a single relevant item at 1-based `rank`.
pub fn ndcg_at(rank: usize, k: usize) -> f64 {
    if rank >= 1 && rank <= k {
        1.0 / ((rank as f64) + 1.0).log2()
    } else {
        0.0
    }
}

/// Reciprocal rank (0 for rank 0, i.e. not ranked).
pub fn reciprocal_rank(rank: usize) -> f64 {
    if rank >= 1 {
        1.0 / rank as f64
    } else {
        0.0
    }
}

/// The 1-based rank of candidate `target` under `scores` (higher is better).
///
/// `rank = 1 + #{j : s_j > s_t} + #{j < t : s_j == s_t}`: ties go to the
/// candidate listed first. NaN scores count as negative infinity. Returns 0
/// when `target` is out of range.
pub fn rank_of_target(scores: &[f64], target: usize) -> usize {
    let key = |s: f64| if s.is_nan() { f64::NEG_INFINITY } else { s };
    let Some(&t) = scores.get(target) else {
        return 0;
    };
    let t = key(t);
    let mut rank = 1;
    for (j, &s) in scores.iter().enumerate() {
        let s = key(s);
        if s > t || (s == t && j < target) {
            rank += 1;
        }
    }
    rank
}

/// The standard metric set of one decision, or a mean over decisions.
///
/// Serialised with the report names (`"HR@1"`, ..., `"MRR"`) in report order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RankMetrics {
    /// HR@1.
    #[serde(rename = "HR@1")]
    pub hr1: f64,
    /// HR@3.
    #[serde(rename = "HR@3")]
    pub hr3: f64,
    /// HR@5.
    #[serde(rename = "HR@5")]
    pub hr5: f64,
    /// HR@10.
    #[serde(rename = "HR@10")]
    pub hr10: f64,
    /// NDCG@1.
    #[serde(rename = "NDCG@1")]
    pub ndcg1: f64,
    /// NDCG@3.
    #[serde(rename = "NDCG@3")]
    pub ndcg3: f64,
    /// NDCG@5.
    #[serde(rename = "NDCG@5")]
    pub ndcg5: f64,
    /// NDCG@10.
    #[serde(rename = "NDCG@10")]
    pub ndcg10: f64,
    /// Mean reciprocal rank.
    #[serde(rename = "MRR")]
    pub mrr: f64,
}

impl RankMetrics {
    /// Metrics of one decision whose target sits at 1-based `rank`.
    pub fn from_rank(rank: usize) -> Self {
        Self {
            hr1: hit_at(rank, 1),
            hr3: hit_at(rank, 3),
            hr5: hit_at(rank, 5),
            hr10: hit_at(rank, 10),
            ndcg1: ndcg_at(rank, 1),
            ndcg3: ndcg_at(rank, 3),
            ndcg5: ndcg_at(rank, 5),
            ndcg10: ndcg_at(rank, 10),
            mrr: reciprocal_rank(rank),
        }
    }

    /// The mean over decisions given by their target ranks (all zeros when empty).
    pub fn mean_of_ranks(ranks: &[usize]) -> Self {
        let per: Vec<Self> = ranks.iter().map(|&r| Self::from_rank(r)).collect();
        Self::mean(&per)
    }

    /// The element-wise mean (all zeros when empty).
    pub fn mean(values: &[Self]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let n = values.len() as f64;
        let mut out = [0.0f64; 9];
        for v in values {
            for (o, x) in out.iter_mut().zip(v.values()) {
                *o += x;
            }
        }
        let [hr1, hr3, hr5, hr10, ndcg1, ndcg3, ndcg5, ndcg10, mrr] = out.map(|s| s / n);
        Self {
            hr1,
            hr3,
            hr5,
            hr10,
            ndcg1,
            ndcg3,
            ndcg5,
            ndcg10,
            mrr,
        }
    }

    /// Values in [`METRIC_NAMES`] order.
    pub fn values(&self) -> [f64; 9] {
        [
            self.hr1,
            self.hr3,
            self.hr5,
            self.hr10,
            self.ndcg1,
            self.ndcg3,
            self.ndcg5,
            self.ndcg10,
            self.mrr,
        ]
    }

    /// `(name, value)` pairs in report order.
    pub fn named(&self) -> [(&'static str, f64); 9] {
        let v = self.values();
        let mut out = [("", 0.0); 9];
        for (i, o) in out.iter_mut().enumerate() {
            *o = (METRIC_NAMES[i], v[i]);
        }
        out
    }

    /// One metric by report name.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.named()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain reference: sort candidate indices by (score desc, index asc),
    /// then compute DCG and IDCG by their definitions.
    fn reference(scores: &[f64], target: usize) -> (usize, [f64; 9]) {
        let key = |s: f64| if s.is_nan() { f64::NEG_INFINITY } else { s };
        let mut idx: Vec<usize> = (0..scores.len()).collect();
        idx.sort_by(|&a, &b| {
            key(scores[b])
                .partial_cmp(&key(scores[a]))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(&b))
        });
        let rank = idx.iter().position(|&i| i == target).unwrap() + 1;
        let mut out = [0.0; 9];
        for (c, k) in CUTOFFS.iter().enumerate() {
            out[c] = if idx[..(*k).min(idx.len())].contains(&target) {
                1.0
            } else {
                0.0
            };
            let dcg: f64 = idx
                .iter()
                .take(*k)
                .enumerate()
                .map(|(p, &i)| {
                    let rel = if i == target { 1.0 } else { 0.0 };
                    (2f64.powf(rel) - 1.0) / ((p + 2) as f64).log2()
                })
                .sum();
            let idcg = 1.0 / 2f64.log2();
            out[4 + c] = dcg / idcg;
        }
        out[8] = 1.0 / rank as f64;
        (rank, out)
    }

    #[test]
    fn matches_reference_on_examples() {
        let cases: Vec<(Vec<f64>, usize)> = vec![
            (vec![0.1, 0.9, 0.5], 1),
            (vec![0.1, 0.9, 0.5], 0),
            (vec![1.0, 1.0, 1.0, 1.0], 2),
            (vec![f64::NAN, 0.0, 1.0], 0),
            ((0..12).map(|i| i as f64).collect(), 0),
        ];
        for (s, t) in cases {
            let (r, vals) = reference(&s, t);
            assert_eq!(rank_of_target(&s, t), r, "{s:?} {t}");
            let m = RankMetrics::from_rank(r).values();
            for (a, b) in m.iter().zip(vals) {
                assert!((a - b).abs() < 1e-12, "{s:?} {t}: {m:?} vs {vals:?}");
            }
        }
    }

    #[test]
    fn ties_do_not_favour_target() {
        // Target last among equals ranks last.
        assert_eq!(rank_of_target(&[0.5, 0.5, 0.5], 2), 3);
        assert_eq!(rank_of_target(&[0.5, 0.5, 0.5], 0), 1);
    }

    #[test]
    fn known_values() {
        let m = RankMetrics::from_rank(3);
        assert_eq!(m.hr1, 0.0);
        assert_eq!(m.hr3, 1.0);
        assert!((m.ndcg3 - 0.5).abs() < 1e-12);
        assert!((m.mrr - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(RankMetrics::from_rank(11).hr10, 0.0);
        let mean = RankMetrics::mean_of_ranks(&[1, 2]);
        assert!((mean.mrr - 0.75).abs() < 1e-12);
        assert_eq!(mean.get("HR@1"), Some(0.5));
        let json = serde_json::to_string(&RankMetrics::from_rank(1)).unwrap();
        assert!(json.starts_with("{\"HR@1\":1.0,\"HR@3\""));
    }

    proptest::proptest! {
        #[test]
        fn rank_matches_reference(scores in proptest::collection::vec(-3i32..3, 1..15), t in 0usize..15) {
            let s: Vec<f64> = scores.iter().map(|&x| f64::from(x) / 2.0).collect();
            let t = t % s.len();
            let (r, vals) = reference(&s, t);
            proptest::prop_assert_eq!(rank_of_target(&s, t), r);
            let m = RankMetrics::from_rank(r).values();
            for (a, b) in m.iter().zip(vals) {
                proptest::prop_assert!((a - b).abs() < 1e-12);
            }
        }
    }
}
