//! Small statistics for the arena reports: means with Student-t 95%
//! confidence intervals over seeds, and the point-biserial correlation
//! between final utilities and success-derived provenance (the paper's
//! Figure 6 statistic).
//!
//! Every arena reports over a handful of seeds (3 to 20), where the normal
//! quantile 1.96 understates the interval badly (the t quantile is 4.30 at
//! n = 3 and 2.78 at n = 5), so [`mean_ci`] uses the t distribution with
//! n − 1 degrees of freedom. It is the one interval function of the arenas:
//! every "CIs apart" statement in their reports goes through it.

use serde::{Deserialize, Serialize};

/// A mean with its 95% confidence interval (`mean ± t₀.₉₇₅,ₙ₋₁·sd/√n`,
/// sample standard deviation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanCi {
    /// Mean.
    pub mean: f64,
    /// Lower bound.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// Sample size.
    pub n: usize,
}

impl MeanCi {
    /// `0.123 [0.110, 0.136]`.
    pub fn show(&self, digits: usize) -> String {
        if self.n == 0 || !self.mean.is_finite() {
            return "-".into();
        }
        format!(
            "{:.d$} [{:.d$}, {:.d$}]",
            self.mean,
            self.lo,
            self.hi,
            d = digits
        )
    }
}

/// Mean and 95% CI of `xs`; the interval collapses to the mean for n < 2.
pub fn mean_ci(xs: &[f64]) -> MeanCi {
    let n = xs.len();
    if n == 0 {
        return MeanCi {
            mean: f64::NAN,
            lo: f64::NAN,
            hi: f64::NAN,
            n,
        };
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return MeanCi {
            mean,
            lo: mean,
            hi: mean,
            n,
        };
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t_quantile_975(n - 1) * (var / n as f64).sqrt();
    MeanCi {
        mean,
        lo: mean - half,
        hi: mean + half,
        n,
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom (the
/// half-width factor of a two-sided 95% interval); 1.96 in the limit.
pub fn t_quantile_975(df: usize) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match StudentsT::new(0.0, 1.0, df.max(1) as f64) {
        Ok(t) => t.inverse_cdf(0.975),
        // Unreachable for df ≥ 1; the normal quantile is the safe limit.
        Err(_) => 1.959_964,
    }
}

/// Point-biserial correlation (Pearson's r between `values` and the 0/1
/// `labels`). `None` when either side does not vary.
pub fn point_biserial(values: &[f64], labels: &[bool]) -> Option<f64> {
    let n = values.len().min(labels.len());
    if n < 2 {
        return None;
    }
    let ys: Vec<f64> = labels[..n]
        .iter()
        .map(|&b| f64::from(u8::from(b)))
        .collect();
    let xs = &values[..n];
    let mx = xs.iter().sum::<f64>() / n as f64;
    let my = ys.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(&ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx).powi(2);
        syy += (y - my).powi(2);
    }
    if sxx < 1e-15 || syy < 1e-15 {
        return None;
    }
    Some(sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ci_of_a_known_sample() {
        let c = mean_ci(&[1.0, 2.0, 3.0, 4.0]);
        assert!((c.mean - 2.5).abs() < 1e-12);
        // sd = 1.2910, se = 0.6455, t(0.975, 3) = 3.1824, half = 2.0543
        assert!((c.hi - c.mean - 2.054_26).abs() < 1e-4, "{c:?}");
        assert_eq!(mean_ci(&[3.0]).lo, 3.0);
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        // Published two-sided 95% critical values.
        for (df, q) in [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (19, 2.093)] {
            assert!((t_quantile_975(df) - q).abs() < 1e-3, "df {df}");
        }
        assert!((t_quantile_975(100_000) - 1.960).abs() < 1e-3);
        // Three seeds: the interval is 4.30/1.96 = 2.2 times the normal one.
        let c = mean_ci(&[0.1, 0.2, 0.3]);
        assert!(
            (c.hi - c.mean - 4.303 * 0.1 / 3f64.sqrt()).abs() < 1e-3,
            "{c:?}"
        );
    }

    #[test]
    fn point_biserial_matches_pearson() {
        let r = point_biserial(&[0.9, 0.8, 0.2, 0.1], &[true, true, false, false]).unwrap();
        assert!(r > 0.98, "{r}");
        let r = point_biserial(&[0.1, 0.2, 0.8, 0.9], &[true, true, false, false]).unwrap();
        assert!(r < -0.98, "{r}");
        assert_eq!(point_biserial(&[0.5, 0.5], &[true, false]), None);
    }
}
