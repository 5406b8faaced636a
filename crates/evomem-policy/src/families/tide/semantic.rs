//! Semantic credit C_sem (`tide-recommendation-feedback-evolves-memory`,
//! §3.3): contextual fitness of a material relative to matched controls,
//! with the delivery environment taken out.
//!
//! - **Controls N_i.** The policy keeps its own log of matured records
//!   ([`Matured`]): its materials and the concurrent control traffic the
//!   platform reports (e.g. a randomised exploration bucket). N_i is every
//!   logged record with the same product, audience, campaign stage,
//!   placement and recommender version (the campaign stage carries the
//!   festival calendar, so a warm-up is compared with warm-up traffic).
//! - **Environment record E_i.** Festival, hotspot, traffic bucket and
//!   recommender version of the lifecycle.
//! - **Fitness.** Within N_i ∪ {i}, a weighted ridge regression of each
//!   objective's empirical logit (CTR: clicks of impressions; CVR:
//!   conversions of clicks; weights are inverse binomial variances plus a
//!   material-level variance τ² = 0.01) on one indicator per non-prior
//!   decision value and a hotspot indicator (the environment covariate; a
//!   shock that lifts every material alike lands there, not on content).
//!   A decision contrast is the coefficient of the target's value (for a
//!   prior value: minus the mean coefficient of the alternatives), with its
//!   standard error; the material's fitness is its logit minus the fitted
//!   level of the prior material in the same environment.
//! - **Counterexamples.** Earlier matched records of the *same* material
//!   whose fitness points the other way by more than one standard error.
//!
//! The evidence-chain role (`tide_evidence`) turns this into z_sem and the
//! evidence items e_i = (d, c, s).

use super::guideline::{options, prior, DIMENSIONS};
use super::roles::ContrastIn;
use super::temporal::Env;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Attributes a control must share with the target (plus the recommender
/// version).
pub const MATCHED: [&str; 4] = ["product", "audience", "campaign_stage", "placement"];

/// Material-level variance added to every record's logit variance.
const TAU2: f64 = 0.01;
/// Ridge penalty on the effect coefficients.
const LAMBDA: f64 = 1.0;

/// One matured record in the policy's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matured {
    /// Decision.
    pub decision_id: u64,
    /// Decision time.
    pub at: u64,
    /// Request attributes.
    pub context: BTreeMap<String, String>,
    /// Environment of the lifecycle.
    pub env: Env,
    /// Content decisions (from the rubric).
    pub decisions: BTreeMap<String, String>,
    /// Impressions, clicks, conversions.
    pub impressions: f64,
    /// See `impressions`.
    pub clicks: f64,
    /// See `impressions`.
    pub conversions: f64,
    /// Control traffic (not one of the policy's own materials).
    pub control: bool,
}

impl Matured {
    fn matches(&self, o: &Matured) -> bool {
        self.env.rec_version == o.env.rec_version
            && MATCHED
                .iter()
                .all(|k| self.context.get(*k) == o.context.get(*k))
    }

    /// (empirical logit, weight) of an objective.
    fn obs(&self, obj: Obj) -> (f64, f64) {
        let (k, n) = match obj {
            Obj::Ctr => (self.clicks, self.impressions),
            Obj::Cvr => (self.conversions, self.clicks),
        };
        let y = ((k + 0.5) / (n - k + 0.5)).ln();
        let var = 1.0 / (k + 0.5) + 1.0 / (n - k + 0.5) + TAU2;
        (y, 1.0 / var)
    }
}

/// Objectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Obj {
    Ctr,
    Cvr,
}

impl Obj {
    fn name(self) -> &'static str {
        match self {
            Obj::Ctr => "ctr",
            Obj::Cvr => "cvr",
        }
    }
}

/// Regression columns: intercept, one per non-prior value, hotspot.
fn columns() -> Vec<(&'static str, &'static str)> {
    let mut c = vec![("", "")];
    for d in DIMENSIONS {
        for v in options(d).iter().skip(1) {
            c.push((d, v));
        }
    }
    c.push(("env", "hotspot"));
    c
}

fn row(r: &Matured, cols: &[(&str, &str)]) -> Vec<f64> {
    cols.iter()
        .enumerate()
        .map(|(j, (d, v))| {
            if j == 0 {
                1.0
            } else if *d == "env" {
                f64::from(u8::from(r.env.hotspot))
            } else {
                f64::from(u8::from(
                    r.decisions.get(*d).map(String::as_str) == Some(*v),
                ))
            }
        })
        .collect()
}

/// Invert a small symmetric positive-definite matrix (Gauss–Jordan with
/// partial pivoting); `None` when singular.
fn invert(mut a: Vec<Vec<f64>>) -> Option<Vec<Vec<f64>>> {
    let n = a.len();
    let mut inv: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    for c in 0..n {
        let p = (c..n).max_by(|&x, &y| a[x][c].abs().total_cmp(&a[y][c].abs()))?;
        if a[p][c].abs() < 1e-12 {
            return None;
        }
        a.swap(c, p);
        inv.swap(c, p);
        let d = a[c][c];
        for j in 0..n {
            a[c][j] /= d;
            inv[c][j] /= d;
        }
        for r in 0..n {
            if r != c {
                let f = a[r][c];
                if f != 0.0 {
                    for j in 0..n {
                        a[r][j] -= f * a[c][j];
                        inv[r][j] -= f * inv[c][j];
                    }
                }
            }
        }
    }
    Some(inv)
}

/// A fitted regression: coefficients and their covariance.
struct Fit {
    beta: Vec<f64>,
    cov: Vec<Vec<f64>>,
}

fn fit(records: &[&Matured], obj: Obj, cols: &[(&str, &str)]) -> Option<Fit> {
    let k = cols.len();
    let mut xtx = vec![vec![0.0; k]; k];
    let mut xty = vec![0.0; k];
    let rows: Vec<(Vec<f64>, f64, f64)> = records
        .iter()
        .map(|r| {
            let (y, w) = r.obs(obj);
            (row(r, cols), y, w)
        })
        .collect();
    for (x, y, w) in &rows {
        for i in 0..k {
            xty[i] += w * x[i] * y;
            for j in 0..k {
                xtx[i][j] += w * x[i] * x[j];
            }
        }
    }
    for (i, r) in xtx.iter_mut().enumerate() {
        r[i] += if i == 0 { 1e-6 } else { LAMBDA };
    }
    let inv = invert(xtx)?;
    let beta: Vec<f64> = (0..k)
        .map(|i| (0..k).map(|j| inv[i][j] * xty[j]).sum())
        .collect();
    let rss: f64 = rows
        .iter()
        .map(|(x, y, w)| {
            let f: f64 = x.iter().zip(&beta).map(|(a, b)| a * b).sum();
            w * (y - f).powi(2)
        })
        .sum();
    let scale = (rss / (rows.len().saturating_sub(k).max(1)) as f64).max(1.0);
    let cov = inv
        .into_iter()
        .map(|r| r.into_iter().map(|v| v * scale).collect())
        .collect();
    Some(Fit { beta, cov })
}

/// What C_sem found for one record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Semantic {
    /// |N_i|.
    pub controls: usize,
    /// Material fitness per objective: (estimate, se).
    pub fitness: BTreeMap<String, (f64, f64)>,
    /// Decision contrasts of the target's decisions.
    pub contrasts: Vec<ContrastIn>,
    /// Unresolved counterexamples and agreeing records.
    pub counterexamples: usize,
    /// See `counterexamples`.
    pub agreeing: usize,
    /// E_i, in words.
    pub environment: BTreeMap<String, String>,
}

/// C_sem of `target` against the log (which may or may not hold it).
pub fn semantic_credit(log: &[Matured], target: &Matured) -> Semantic {
    let controls: Vec<&Matured> = log
        .iter()
        .filter(|r| r.decision_id != target.decision_id && r.matches(target))
        .collect();
    let environment = BTreeMap::from([
        ("festival".to_string(), target.env.festival.to_string()),
        ("hotspot".to_string(), target.env.hotspot.to_string()),
        ("traffic_bucket".to_string(), target.env.bucket.to_string()),
        (
            "rec_version".to_string(),
            target.env.rec_version.to_string(),
        ),
    ]);
    let mut out = Semantic {
        controls: controls.len(),
        environment,
        ..Semantic::default()
    };
    let mut all = controls.clone();
    all.push(target);
    let cols = columns();
    let tx = row(target, &cols);
    let hot = cols.len() - 1;
    let mut per_obj: BTreeMap<&str, Fit> = BTreeMap::new();
    for obj in [Obj::Ctr, Obj::Cvr] {
        let Some(f) = fit(&all, obj, &cols) else {
            continue;
        };
        let (y, w) = target.obs(obj);
        let level = f.beta[0] + f.beta[hot] * tx[hot];
        out.fitness.insert(
            obj.name().into(),
            (y - level, (1.0 / w + f.cov[0][0]).sqrt()),
        );
        per_obj.insert(obj.name(), f);
    }
    for d in DIMENSIONS {
        let Some(v) = target.decisions.get(d) else {
            continue;
        };
        let mut objectives = BTreeMap::new();
        for (name, f) in &per_obj {
            let idx = |val: &str| cols.iter().position(|c| c.0 == d && c.1 == val);
            let (e, se) = if v == prior(d) {
                let alts: Vec<usize> = options(d).iter().skip(1).filter_map(|a| idx(a)).collect();
                let n = alts.len().max(1) as f64;
                let e = -alts.iter().map(|&j| f.beta[j]).sum::<f64>() / n;
                let var = alts.iter().map(|&j| f.cov[j][j]).sum::<f64>() / (n * n);
                (e, var.sqrt())
            } else {
                match idx(v) {
                    Some(j) => (f.beta[j], f.cov[j][j].sqrt()),
                    None => continue,
                }
            };
            objectives.insert((*name).to_string(), (e, se));
        }
        out.contrasts.push(ContrastIn {
            dimension: d.to_string(),
            value: v.clone(),
            objectives,
        });
    }
    if let (Some(f), Some((fit_t, _))) = (per_obj.get("ctr"), out.fitness.get("ctr")) {
        let sign = fit_t.signum();
        for r in controls
            .iter()
            .filter(|r| !r.control && r.decisions == target.decisions)
        {
            let (y, w) = r.obs(Obj::Ctr);
            let level = f.beta[0] + f.beta[hot] * f64::from(u8::from(r.env.hotspot));
            let z = (y - level) * w.sqrt() * sign;
            if z < -1.0 {
                out.counterexamples += 1;
            } else if z > 1.0 {
                out.agreeing += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn rec(id: u64, sp: &str, hot: bool, p: f64, control: bool) -> Matured {
        let n = 2000.0;
        Matured {
            decision_id: id,
            at: id,
            context: BTreeMap::from([
                ("product".into(), "lamp".into()),
                ("audience".into(), "pro".into()),
                ("campaign_stage".into(), "regular".into()),
                ("placement".into(), "top".into()),
            ]),
            env: Env {
                hotspot: hot,
                rec_version: 1,
                ..Env::default()
            },
            decisions: BTreeMap::from([
                ("selling_point".into(), sp.into()),
                ("density".into(), "low".into()),
                ("style".into(), "plain".into()),
                ("cta".into(), "soft".into()),
            ]),
            impressions: n,
            clicks: (n * p).round(),
            conversions: (n * p * 0.1).round(),
            control,
        }
    }

    #[test]
    fn an_environment_caused_win_is_not_content_credit() {
        // Controls: random selling points; a hotspot doubles everyone's CTR.
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut log = Vec::new();
        for i in 0..40 {
            let hot = i % 2 == 0;
            let sp = ["quality", "price"][rng.gen_range(0..2)];
            let p = if hot { 0.10 } else { 0.05 };
            log.push(rec(i, sp, hot, p, true));
        }
        // The target used `price` during a hotspot and did as well as the
        // hotspot controls: its raw CTR is high, its content contrast is not.
        let target = rec(100, "price", true, 0.10, false);
        let s = semantic_credit(&log, &target);
        assert_eq!(s.controls, 40);
        let c = &s.contrasts[0].objectives["ctr"];
        assert!(c.0.abs() < 2.0 * c.1 + 0.05, "{c:?}");
        let f = s.fitness["ctr"];
        assert!(f.0.abs() < 0.15, "{f:?}");
        // A real content effect shows up as a contrast.
        for (i, r) in log.iter_mut().enumerate() {
            if r.decisions["selling_point"] == "price" {
                r.clicks = (r.clicks * 1.5).round();
            }
            r.decision_id = i as u64;
        }
        let target = rec(100, "price", false, 0.075, false);
        let s = semantic_credit(&log, &target);
        let c = &s.contrasts[0].objectives["ctr"];
        assert!(c.0 > 0.3 && c.0 > 2.0 * c.1, "{c:?}");
    }

    #[test]
    fn unmatched_records_are_not_controls() {
        let mut other = rec(1, "price", false, 0.05, true);
        other.context.insert("audience".into(), "family".into());
        let mut newer = rec(2, "price", false, 0.05, true);
        newer.env.rec_version = 2;
        let s = semantic_credit(&[other, newer], &rec(3, "price", false, 0.05, false));
        assert_eq!(s.controls, 0);
    }
}
