//! The analyses a run adds to the raw decisions: per-policy summaries and
//! rank histograms, preference-drift terciles (AtomRec §4.4, applied to
//! every policy), and memory-growth plots for families that report growth.

use super::dir::{DecisionLine, ItemTitles, PerUser};
use super::PolicySummary;
use crate::error::EvalError;
use crate::protocol::Plan;
use crate::replay::{DecisionRecord, PolicyRun};
use crate::report;
use evomem_core::metrics::RankMetrics;
use evomem_core::Embedder;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// `OUT/<slug>/growth.svg` for a policy that reports `growth_by_history`
/// (AtomRec): memory size, and time when measured, per user by history length.
pub fn growth_plot(dir: &Path, spec: &str, stats: &serde_json::Value) -> Result<(), EvalError> {
    let Some(rows) = stats.get("growth_by_history").and_then(|v| v.as_array()) else {
        return Ok(());
    };
    if rows.is_empty() {
        return Ok(());
    }
    let groups: Vec<String> = rows
        .iter()
        .map(|r| r["history"].as_str().unwrap_or("?").to_string())
        .collect();
    let col = |k: &str, scale: f64| -> Vec<f64> {
        rows.iter()
            .map(|r| r[k].as_f64().unwrap_or(0.0) * scale)
            .collect()
    };
    let mut series = vec![
        ("atoms per user".to_string(), col("mean_atoms", 1.0)),
        ("links per user / 10".to_string(), col("mean_links", 0.1)),
        (
            "evolutions per user / 10".to_string(),
            col("mean_evolutions", 0.1),
        ),
    ];
    if rows.iter().all(|r| r.get("mean_ms").is_some()) {
        series.push(("observe ms per user".to_string(), col("mean_ms", 1.0)));
    }
    report::grouped_bars(
        &dir.join("growth.svg"),
        &format!("{spec}: memory and time per user by history length"),
        &groups,
        &series,
        "per user",
    )
}

/// Metrics of one policy on one preference-drift group (AtomRec §4.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftRow {
    /// Policy spec.
    pub policy: String,
    /// `Low`, `Medium` or `High`.
    pub group: String,
    /// Users in the group with a decision.
    pub n_users: usize,
    /// Mean d_u of those users.
    pub mean_drift: f64,
    /// Mean metrics over those users.
    pub metrics: RankMetrics,
}

/// Drift terciles over the users with a decision (d_u from the user's whole
/// history, an after-the-fact grouping that no policy sees), and each
/// policy's metrics per tercile.
pub fn drift_rows(
    plan: &Plan<'_>,
    embedder: &dyn Embedder,
    runs: &[(String, &PolicyRun)],
) -> Result<Vec<DriftRow>, EvalError> {
    use evomem_kit::drift::{drift_groups, drift_scores, DriftGroup};
    let all = drift_scores(plan.dataset, embedder).map_err(EvalError::Embed)?;
    let decided: std::collections::BTreeSet<_> = plan.decisions.iter().map(|d| d.user).collect();
    let scores: BTreeMap<_, _> = all
        .into_iter()
        .filter(|(u, _)| decided.contains(u))
        .collect();
    let groups = drift_groups(&scores);
    let mut rows = Vec::new();
    for (spec, run) in runs {
        for g in [DriftGroup::Low, DriftGroup::Medium, DriftGroup::High] {
            let mut ms = Vec::new();
            let mut drift = 0.0;
            for d in &run.decisions {
                if groups.get(&d.user) == Some(&g) {
                    ms.push(d.metrics());
                    drift += scores.get(&d.user).copied().unwrap_or(0.0);
                }
            }
            if ms.is_empty() {
                continue;
            }
            rows.push(DriftRow {
                policy: spec.clone(),
                group: format!("{g:?}"),
                n_users: ms.len(),
                mean_drift: drift / ms.len() as f64,
                metrics: RankMetrics::mean(&ms),
            });
        }
    }
    Ok(rows)
}

pub fn summarise(spec: &str, plan: &Plan<'_>, run: &PolicyRun) -> PolicySummary {
    let max_rank = plan
        .decisions
        .iter()
        .map(|d| d.candidates.len())
        .max()
        .unwrap_or(0);
    let mut hist = vec![0usize; max_rank];
    for d in &run.decisions {
        if let Some(h) = d.rank.checked_sub(1).and_then(|i| hist.get_mut(i)) {
            *h += 1;
        }
    }
    PolicySummary {
        spec: spec.to_string(),
        slug: evomem_core::text::slug(spec),
        metrics: run.metrics(),
        n_users: run.decisions.len(),
        ops_total: run.tally.total,
        op_labels: run.tally.by_label.clone(),
        rank_histogram: hist,
    }
}

pub fn per_user(plan: &Plan<'_>, d: &DecisionRecord) -> PerUser {
    PerUser {
        user: plan.user_token(d.user).to_string(),
        decision_id: d.decision_id,
        at: d.at.0,
        target: plan.item_token(d.target).to_string(),
        rank: d.rank,
        n_candidates: d.candidates.len(),
        metrics: d.metrics(),
    }
}

/// The titles of every item the plan's decisions name (their candidates,
/// targets included), for `OUT/item_titles.json`; empty when the data set
/// has no titles (the file is then not written).
pub fn item_titles(plan: &Plan<'_>) -> ItemTitles {
    let mut titles = BTreeMap::new();
    for d in &plan.decisions {
        for &c in &d.candidates {
            if let Some(item) = plan.dataset.catalog.get(c) {
                if !item.title.is_empty() {
                    titles.insert(item.token.clone(), item.title.clone());
                }
            }
        }
    }
    ItemTitles {
        dataset: plan.dataset.name.clone(),
        titles,
    }
}

pub fn decision_line(plan: &Plan<'_>, d: &DecisionRecord) -> DecisionLine {
    DecisionLine {
        user: plan.user_token(d.user).to_string(),
        decision_id: d.decision_id,
        at: d.at.0,
        target: plan.item_token(d.target).to_string(),
        candidates: d
            .candidates
            .iter()
            .map(|&c| plan.item_token(c).to_string())
            .collect(),
        candidate_ids: d.candidates.clone(),
        scores: d.scores.clone(),
        rank: d.rank,
        context: d.context.clone(),
        trace: d.trace.clone(),
    }
}
