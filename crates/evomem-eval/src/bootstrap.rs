//! Paired bootstrap confidence intervals for the difference between two runs.
//!
//! Two runs of the same plan rank the same users; per-user metric values are
//! paired. The statistic is the mean per-user difference `b - a`. Users are
//! resampled with replacement `resamples` times (default 1000) with a seeded
//! ChaCha8 RNG, and the CI is the percentile interval of the resampled means
//! (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, §13.3; the
//! paired design of Koehn, EMNLP 2004). The two-sided p-value is
//! `2 * min(P*(diff <= 0), P*(diff >= 0))` over resamples, capped at 1, a
//! rough guide and not an exact test.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Default number of resamples.
pub const DEFAULT_RESAMPLES: usize = 1000;
/// Default confidence level.
pub const DEFAULT_LEVEL: f64 = 0.95;

/// Bootstrap settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BootstrapConfig {
    /// Resamples (default 1000).
    pub resamples: usize,
    /// Confidence level in (0, 1) (default 0.95).
    pub level: f64,
    /// RNG seed (default 42).
    pub seed: u64,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        Self {
            resamples: DEFAULT_RESAMPLES,
            level: DEFAULT_LEVEL,
            seed: 42,
        }
    }
}

/// Why a bootstrap could not run.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BootstrapError {
    /// The two samples are not paired.
    #[error("paired samples differ in length: {a} vs {b}")]
    LengthMismatch {
        /// Length of `a`.
        a: usize,
        /// Length of `b`.
        b: usize,
    },
    /// Nothing to resample.
    #[error("no paired observations")]
    Empty,
    /// Bad settings.
    #[error("invalid bootstrap settings: {0}")]
    Config(String),
}

/// The paired comparison of one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedCi {
    /// Paired observations.
    pub n: usize,
    /// Mean of `a`.
    pub mean_a: f64,
    /// Mean of `b`.
    pub mean_b: f64,
    /// `mean_b - mean_a`.
    pub delta: f64,
    /// Lower end of the CI of `delta`.
    pub ci_low: f64,
    /// Upper end of the CI of `delta`.
    pub ci_high: f64,
    /// Rough two-sided bootstrap p-value for `delta != 0`.
    pub p_value: f64,
    /// Confidence level.
    pub level: f64,
    /// Resamples.
    pub resamples: usize,
}

/// Paired bootstrap CI of `mean(b) - mean(a)`.
pub fn paired_bootstrap(
    a: &[f64],
    b: &[f64],
    cfg: &BootstrapConfig,
) -> Result<PairedCi, BootstrapError> {
    if a.len() != b.len() {
        return Err(BootstrapError::LengthMismatch {
            a: a.len(),
            b: b.len(),
        });
    }
    if a.is_empty() {
        return Err(BootstrapError::Empty);
    }
    if cfg.resamples == 0 || !(cfg.level > 0.0 && cfg.level < 1.0) {
        return Err(BootstrapError::Config(format!(
            "resamples {} must be > 0 and level {} in (0, 1)",
            cfg.resamples, cfg.level
        )));
    }
    let n = a.len();
    let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut means = Vec::with_capacity(cfg.resamples);
    for _ in 0..cfg.resamples {
        let mut s = 0.0;
        for _ in 0..n {
            s += diffs[rng.gen_range(0..n)];
        }
        means.push(s / n as f64);
    }
    means.sort_by(f64::total_cmp);
    let alpha = 1.0 - cfg.level;
    let le = means.iter().filter(|&&m| m <= 0.0).count() as f64 / means.len() as f64;
    let ge = means.iter().filter(|&&m| m >= 0.0).count() as f64 / means.len() as f64;
    Ok(PairedCi {
        n,
        mean_a: mean(a),
        mean_b: mean(b),
        delta: mean(&diffs),
        ci_low: quantile_sorted(&means, alpha / 2.0),
        ci_high: quantile_sorted(&means, 1.0 - alpha / 2.0),
        p_value: (2.0 * le.min(ge)).min(1.0),
        level: cfg.level,
        resamples: cfg.resamples,
    })
}

/// The `q`-quantile of sorted values, linear interpolation between order
/// statistics (type 7 of Hyndman & Fan, 1996). NaN for an empty slice.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let q = q.clamp(0.0, 1.0);
    let h = q * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let frac = h - lo as f64;
    sorted[lo] + frac * (sorted[hi] - sorted[lo])
}
