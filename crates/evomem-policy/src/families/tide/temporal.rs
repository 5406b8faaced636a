//! Temporal credit C_temp (`tide-recommendation-feedback-evolves-memory`,
//! §3.2): join a material's feedback windows by identity and version, and
//! decide whether its observable lifecycle is mature, continuous and
//! comparable (z_temp), summarising it stage by stage with uncertainty (û).
//!
//! Feedback arrives in windows ([`Window`]), one [`evomem_core::Outcome`]
//! each, with `stage` = `exposure`, `click` or `conversion` and the counts
//! and delivery context in `objectives` (names in [`objective`]).
//! z_temp = 1 exactly when
//!
//! - every window carries the same material version (identity and version
//!   consistent),
//! - the required stages (exposure, click, conversion) have all been seen,
//! - a conversion window observed at least `maturity` steps after the
//!   decision has arrived (delayed conversions had their window), and
//! - every window was delivered under the same recommender version (no
//!   recommender change breaks comparability).
//!
//! Otherwise the record stays pending and is re-checked when its next
//! window arrives; a record broken by a version change stays pending for
//! good. û keeps each objective per stage with its binomial standard
//! error: exposure (impressions), click (CTR = clicks / impressions) and
//! conversion (CVR = conversions / clicks), never one scalar.

use evomem_core::{LogicalTime, Outcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Stage names.
pub mod stage {
    /// Impressions during the traffic ramp.
    pub const EXPOSURE: &str = "exposure";
    /// Clicks on those impressions.
    pub const CLICK: &str = "click";
    /// (Delayed) conversions among the clicks.
    pub const CONVERSION: &str = "conversion";
    /// All three, in lifecycle order.
    pub const REQUIRED: [&str; 3] = [EXPOSURE, CLICK, CONVERSION];
}

/// Objective names inside a window's `Outcome::objectives`.
pub mod objective {
    /// Impressions in the window.
    pub const IMPRESSIONS: &str = "impressions";
    /// Clicks in the window.
    pub const CLICKS: &str = "clicks";
    /// Conversions in the window.
    pub const CONVERSIONS: &str = "conversions";
    /// 1 during a shopping-festival warm-up.
    pub const FESTIVAL: &str = "env.festival";
    /// 1 while a hotspot lifts the product's traffic.
    pub const HOTSPOT: &str = "env.hotspot";
    /// The traffic bucket the material was delivered in.
    pub const TRAFFIC_BUCKET: &str = "env.traffic_bucket";
    /// The recommender version that delivered the window.
    pub const REC_VERSION: &str = "env.rec_version";
    /// The material's version.
    pub const MATERIAL_VERSION: &str = "material.version";
}

/// The delivery context of one window (part of the environment record E_i).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Env {
    /// Festival warm-up.
    pub festival: bool,
    /// Hotspot.
    pub hotspot: bool,
    /// Traffic bucket.
    pub bucket: i64,
    /// Recommender version.
    pub rec_version: i64,
}

/// One feedback window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Stage.
    pub stage: String,
    /// When it became visible.
    pub observed_at: LogicalTime,
    /// Impressions, clicks, conversions in the window.
    pub impressions: f64,
    /// See `impressions`.
    pub clicks: f64,
    /// See `impressions`.
    pub conversions: f64,
    /// Delivery context.
    pub env: Env,
    /// Material version.
    pub version: i64,
}

impl Window {
    /// Read a window from a staged outcome; `None` for an outcome without a
    /// stage.
    pub fn from_outcome(o: &Outcome, observed_at: LogicalTime) -> Option<Self> {
        let stage = o.stage.clone()?;
        let get = |k: &str| o.objectives.get(k).copied().unwrap_or(0.0);
        Some(Self {
            stage,
            observed_at,
            impressions: get(objective::IMPRESSIONS),
            clicks: get(objective::CLICKS),
            conversions: get(objective::CONVERSIONS),
            env: Env {
                festival: get(objective::FESTIVAL) > 0.5,
                hotspot: get(objective::HOTSPOT) > 0.5,
                bucket: get(objective::TRAFFIC_BUCKET) as i64,
                rec_version: get(objective::REC_VERSION) as i64,
            },
            version: o
                .objectives
                .get(objective::MATERIAL_VERSION)
                .map_or(1, |v| *v as i64),
        })
    }
}

/// û: the lifecycle summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleSummary {
    /// stage → objective → (estimate, standard error).
    pub stages: BTreeMap<String, BTreeMap<String, (f64, f64)>>,
    /// Totals.
    pub impressions: f64,
    /// Totals.
    pub clicks: f64,
    /// Totals.
    pub conversions: f64,
    /// The environment the lifecycle ran in (hotspot: any window had one).
    pub env: Env,
}

/// The verdict of C_temp.
#[derive(Debug, Clone, PartialEq)]
pub enum Temporal {
    /// z_temp = 1.
    Mature(LifecycleSummary),
    /// z_temp = 0, with the reason; `broken` when no later window can fix it.
    Pending {
        /// Why.
        reason: String,
        /// A version change: it will never mature.
        broken: bool,
    },
}

fn rate(k: f64, n: f64) -> (f64, f64) {
    if n <= 0.0 {
        return (0.0, f64::INFINITY);
    }
    let p = (k / n).clamp(0.0, 1.0);
    (p, ((p * (1.0 - p)).max(0.25 / n) / n).sqrt())
}

/// C_temp over the windows of one material decided at `decided_at`.
pub fn temporal_credit(windows: &[Window], decided_at: LogicalTime, maturity: u64) -> Temporal {
    let pending = |reason: String, broken: bool| Temporal::Pending { reason, broken };
    let Some(first) = windows.first() else {
        return pending("no window yet".into(), false);
    };
    if windows.iter().any(|w| w.version != first.version) {
        return pending(
            "the material changed version during its lifecycle".into(),
            true,
        );
    }
    if windows
        .iter()
        .any(|w| w.env.rec_version != first.env.rec_version)
    {
        return pending(
            "the recommender changed version during the lifecycle".into(),
            true,
        );
    }
    for s in stage::REQUIRED {
        if !windows.iter().any(|w| w.stage == s) {
            return pending(format!("stage `{s}` not observed yet"), false);
        }
    }
    let matured = windows.iter().any(|w| {
        w.stage == stage::CONVERSION && w.observed_at.0.saturating_sub(decided_at.0) >= maturity
    });
    if !matured {
        return pending(
            format!("conversions have not had their {maturity}-step maturity window"),
            false,
        );
    }
    let sum = |f: fn(&Window) -> f64| windows.iter().map(f).sum::<f64>();
    let (imp, clk, conv) = (
        sum(|w| w.impressions),
        sum(|w| w.clicks),
        sum(|w| w.conversions),
    );
    let mut stages: BTreeMap<String, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
    stages
        .entry(stage::EXPOSURE.into())
        .or_default()
        .insert(objective::IMPRESSIONS.into(), (imp, imp.sqrt()));
    stages
        .entry(stage::CLICK.into())
        .or_default()
        .insert("ctr".into(), rate(clk, imp));
    let early: f64 = windows
        .iter()
        .filter(|w| {
            w.stage == stage::CONVERSION && w.observed_at.0.saturating_sub(decided_at.0) < maturity
        })
        .map(|w| w.conversions)
        .sum();
    let conv_stage = stages.entry(stage::CONVERSION.into()).or_default();
    conv_stage.insert("cvr".into(), rate(conv, clk));
    conv_stage.insert("cvr_early".into(), rate(early, clk));
    Temporal::Mature(LifecycleSummary {
        stages,
        impressions: imp,
        clicks: clk,
        conversions: conv,
        env: Env {
            hotspot: windows.iter().any(|w| w.env.hotspot),
            festival: windows.iter().any(|w| w.env.festival),
            ..first.env
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn w(stage: &str, at: u64, rec: i64) -> Window {
        Window {
            stage: stage.into(),
            observed_at: LogicalTime(at),
            impressions: if stage == "exposure" { 400.0 } else { 0.0 },
            clicks: if stage == "click" { 40.0 } else { 0.0 },
            conversions: if stage == "conversion" { 4.0 } else { 0.0 },
            env: Env {
                rec_version: rec,
                ..Env::default()
            },
            version: 1,
        }
    }

    #[test]
    fn pending_until_every_stage_and_the_maturity_window() {
        let mut ws = vec![w("exposure", 11, 1), w("click", 12, 1)];
        assert!(matches!(
            temporal_credit(&ws, LogicalTime(10), 4),
            Temporal::Pending { broken: false, .. }
        ));
        ws.push(w("conversion", 13, 1));
        // Conversions seen, but only 3 steps after the decision.
        assert!(matches!(
            temporal_credit(&ws, LogicalTime(10), 4),
            Temporal::Pending { broken: false, .. }
        ));
        ws.push(w("conversion", 14, 1));
        let Temporal::Mature(u) = temporal_credit(&ws, LogicalTime(10), 4) else {
            panic!("should be mature")
        };
        let (ctr, se) = u.stages["click"]["ctr"];
        assert!((ctr - 0.1).abs() < 1e-12 && se > 0.0);
        assert!((u.stages["conversion"]["cvr"].0 - 0.2).abs() < 1e-12);
        assert!((u.stages["conversion"]["cvr_early"].0 - 0.1).abs() < 1e-12);
    }

    #[test]
    fn a_recommender_version_change_keeps_the_record_pending() {
        let ws = vec![
            w("exposure", 11, 1),
            w("click", 12, 1),
            w("conversion", 13, 2),
            w("conversion", 14, 2),
        ];
        assert!(matches!(
            temporal_credit(&ws, LogicalTime(10), 4),
            Temporal::Pending { broken: true, .. }
        ));
    }
}
