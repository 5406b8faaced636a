//! Metric aggregation against a plain reference computed from raw scores.

use evomem_core::metrics::{rank_of_target, RankMetrics, METRIC_NAMES};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Reference: for each decision sort by (score desc, position asc), find the
/// target, accumulate HR and DCG by definition, divide by the count.
fn reference(decisions: &[(Vec<f64>, usize)]) -> Vec<f64> {
    let mut sums = [0.0; 9];
    for (scores, target) in decisions {
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].partial_cmp(&scores[a]).unwrap().then(a.cmp(&b)));
        let pos = order.iter().position(|&i| i == *target).unwrap();
        for (c, k) in [1usize, 3, 5, 10].iter().enumerate() {
            if pos < *k {
                sums[c] += 1.0;
                sums[4 + c] += 1.0 / ((pos + 2) as f64).log2();
            }
        }
        sums[8] += 1.0 / (pos + 1) as f64;
    }
    sums.iter().map(|s| s / decisions.len() as f64).collect()
}

#[test]
fn mean_metrics_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let decisions: Vec<(Vec<f64>, usize)> = (0..500)
        .map(|_| {
            let n = rng.gen_range(1..25);
            // Coarse scores so that ties happen.
            let s: Vec<f64> = (0..n).map(|_| f64::from(rng.gen_range(0..6))).collect();
            (s, rng.gen_range(0..n))
        })
        .collect();
    let ranks: Vec<usize> = decisions
        .iter()
        .map(|(s, t)| rank_of_target(s, *t))
        .collect();
    let got = RankMetrics::mean_of_ranks(&ranks);
    let want = reference(&decisions);
    for (k, name) in METRIC_NAMES.iter().enumerate() {
        assert!((got.get(name).unwrap() - want[k]).abs() < 1e-12, "{name}");
    }
}
