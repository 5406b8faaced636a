//! Small statistics for the arena reports: means with normal-approximation
//! 95% confidence intervals over seeds, and the point-biserial correlation
//! between final utilities and success-derived provenance (the paper's
//! Figure 6 statistic).

use serde::{Deserialize, Serialize};

/// A mean with its 95% confidence interval (`mean ± 1.96·sd/√n`, sample
/// standard deviation).
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
    let half = 1.96 * (var / n as f64).sqrt();
    MeanCi {
        mean,
        lo: mean - half,
        hi: mean + half,
        n,
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
        // sd = 1.2910, se = 0.6455, half = 1.2652
        assert!((c.hi - c.mean - 1.265_175).abs() < 1e-5, "{c:?}");
        assert_eq!(mean_ci(&[3.0]).lo, 3.0);
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
