//! Comparing two runs of the same plan: per-metric deltas with paired
//! bootstrap CIs over the users both runs ranked (matched by user token).

use crate::bootstrap::{paired_bootstrap, BootstrapConfig, PairedCi};
use crate::error::EvalError;
use crate::run::dir::{PerUser, PolicyDir};
use evomem_core::metrics::METRIC_NAMES;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The comparison of two policy folders.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Users in both runs.
    pub common_users: usize,
    /// Users only in A.
    pub only_a: usize,
    /// Users only in B.
    pub only_b: usize,
    /// Users whose target differs between the runs (different plans).
    pub target_mismatch: usize,
    /// Per metric, `B - A`.
    pub metrics: Vec<(String, PairedCi)>,
}

/// Compare the policy folders `a` and `b` (each holding `per_user.jsonl`).
pub fn compare_runs(a: &Path, b: &Path, cfg: &BootstrapConfig) -> Result<Comparison, EvalError> {
    let ra = PolicyDir::at(a).read_per_user()?;
    let rb = PolicyDir::at(b).read_per_user()?;
    compare_per_user(&ra, &rb, cfg)
}

/// Compare two sets of per-user results.
pub fn compare_per_user(
    a: &[PerUser],
    b: &[PerUser],
    cfg: &BootstrapConfig,
) -> Result<Comparison, EvalError> {
    let ma: BTreeMap<&str, &PerUser> = a.iter().map(|p| (p.user.as_str(), p)).collect();
    let mb: BTreeMap<&str, &PerUser> = b.iter().map(|p| (p.user.as_str(), p)).collect();
    let common: Vec<&str> = ma.keys().filter(|k| mb.contains_key(*k)).copied().collect();
    if common.is_empty() {
        return Err(EvalError::Compare("the runs have no user in common".into()));
    }
    let target_mismatch = common
        .iter()
        .filter(|u| ma[**u].target != mb[**u].target)
        .count();
    let mut metrics = Vec::new();
    for name in METRIC_NAMES {
        let va: Vec<f64> = common
            .iter()
            .map(|u| ma[*u].metrics.get(name).unwrap_or(0.0))
            .collect();
        let vb: Vec<f64> = common
            .iter()
            .map(|u| mb[*u].metrics.get(name).unwrap_or(0.0))
            .collect();
        let ci = paired_bootstrap(&va, &vb, cfg).map_err(|e| EvalError::Compare(e.to_string()))?;
        metrics.push((name.to_string(), ci));
    }
    Ok(Comparison {
        common_users: common.len(),
        only_a: ma.len() - common.len(),
        only_b: mb.len() - common.len(),
        target_mismatch,
        metrics,
    })
}

/// A text table of a comparison.
pub fn comparison_table(c: &Comparison) -> String {
    let mut s = format!(
        "{:<8} {:>8} {:>8} {:>9} {:>21} {:>7}\n",
        "metric", "A", "B", "B-A", "95% CI", "p"
    );
    for (name, ci) in &c.metrics {
        let _ = writeln!(
            s,
            "{:<8} {:>8.4} {:>8.4} {:>+9.4} {:>21} {:>7.3}",
            name,
            ci.mean_a,
            ci.mean_b,
            ci.delta,
            format!("[{:+.4}, {:+.4}]", ci.ci_low, ci.ci_high),
            ci.p_value
        );
    }
    s
}
