//! `mars_plan` (π_plan, §3.3 "Agentic Scheduling"): after each signal, pick
//! the lifecycle actions to run now, or wait. Offline: a rule list (see
//! [`offline_plan`]).

use super::{arr, chunk_line, lines, obj, signal_line, ChunkIn, SignalIn};
use crate::mars::lifecycle::Lifecycle;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

/// The planner's answer for "do nothing now" (not a lifecycle action).
const WAIT: &str = "wait";

/// Input of `mars_plan`: a summary of the belief state and pending signals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanInput {
    /// User token.
    pub user: String,
    /// Pending signals.
    pub pending: Vec<SignalIn>,
    /// Positive pending signals.
    pub pending_positive: usize,
    /// Negative pending signals.
    pub pending_negative: usize,
    /// Events in the FIFO.
    pub fifo_len: usize,
    /// FIFO capacity.
    pub lmax: usize,
    /// Existing chunks.
    pub chunks: Vec<ChunkIn>,
    /// Share of positive pending signals with no facet matching any chunk.
    pub novel_share: f64,
    /// Pending signals that contradict a chunk (negative on its facet).
    pub conflicts: usize,
    /// Chunks eligible for forgetting.
    pub forgettable: usize,
    /// Near-duplicate chunk pairs.
    pub duplicates: usize,
    /// Mutations since the last synthesis.
    pub mutations: u32,
    /// γ.
    pub gamma: u32,
    /// Whether a profile exists.
    pub has_profile: bool,
    /// The fixed scheduler's batch, used as the planner's base volume.
    pub b: usize,
}

/// Output of `mars_plan`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOutput {
    /// Actions to run in order, or empty to wait.
    pub actions: Vec<Lifecycle>,
    /// Why.
    pub reason: String,
}

/// π_plan: pick lifecycle ops or wait.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanRole;

impl Role for PlanRole {
    type Input = PlanInput;
    type Output = PlanOutput;

    fn name(&self) -> &'static str {
        "mars_plan"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../../prompts/mars_plan.md")
    }
    fn variables(&self, i: &PlanInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("pending".into(), lines(&i.pending, signal_line)),
            ("chunks".into(), lines(&i.chunks, chunk_line)),
            (
                "state".into(),
                format!(
                    "pending={} (positive {}, negative {}); fifo {}/{}; novel share {:.2}; \
                     conflicts {}; forgettable {}; duplicate pairs {}; mutations since synthesis {}/{}; \
                     profile {}",
                    i.pending.len(),
                    i.pending_positive,
                    i.pending_negative,
                    i.fifo_len,
                    i.lmax,
                    i.novel_share,
                    i.conflicts,
                    i.forgettable,
                    i.duplicates,
                    i.mutations,
                    i.gamma,
                    if i.has_profile { "present" } else { "missing" }
                ),
            ),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        let mut names: Vec<&str> = Lifecycle::NAMES.to_vec();
        names.push(WAIT);
        json!({"type": "object", "required": ["actions", "reason"],
               "properties": {
                   "actions": {"type": "array", "items": {"type": "string", "enum": names}},
                   "reason": {"type": "string"}}})
    }
    fn parse(&self, _input: &PlanInput, answer: serde_json::Value) -> Result<PlanOutput, String> {
        let o = obj(&answer)?;
        let mut actions = Vec::new();
        for (i, a) in arr(o, "actions")?.into_iter().enumerate() {
            let a = a
                .as_str()
                .ok_or_else(|| format!("actions[{i}] is not a string"))?;
            if a == WAIT {
                continue;
            }
            let action: Lifecycle = a
                .parse()
                .map_err(|_| format!("actions[{i}]: unknown action `{a}`"))?;
            if !actions.contains(&action) {
                actions.push(action);
            }
        }
        Ok(PlanOutput {
            actions,
            reason: o
                .get("reason")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string(),
        })
    }
    fn offline(&self, i: &PlanInput) -> Result<PlanOutput, LlmError> {
        Ok(offline_plan(i))
    }
}

/// The offline planner. Rules, first match wins:
/// 1. nothing pending → wait (or synthesize alone when γ is reached);
/// 2. the FIFO would evict a pending signal next → full round;
/// 3. a negative signal contradicts a chunk → demote now (with extract);
/// 4. cold start (no chunks) and ≥ 3 pending → extract;
/// 5. ≥ ⌈B/2⌉ pending and ≥ 60% of positives are novel → extract (shift/discovery);
/// 6. ≥ B pending → full round;
/// 7. otherwise wait.
///
/// Every round adds merge/forget when there is something to merge or forget,
/// and synthesize when γ would be reached or no profile exists yet.
pub fn offline_plan(i: &PlanInput) -> PlanOutput {
    use Lifecycle::{Demote, Extract, Forget, Merge, Synthesize};
    let assess = || vec![Extract, Lifecycle::Boost, Demote];
    let n = i.pending.len();
    let (mut actions, reason): (Vec<Lifecycle>, String) = if n == 0 {
        if i.mutations >= i.gamma {
            (vec![Synthesize], "γ mutations reached".into())
        } else {
            (Vec::new(), "no pending signals".into())
        }
    } else if i.fifo_len >= i.lmax {
        (
            Lifecycle::ALL.to_vec(),
            "FIFO full: process pending signals before eviction".into(),
        )
    } else if i.conflicts > 0 {
        (
            assess(),
            format!("{} signal(s) contradict existing beliefs", i.conflicts),
        )
    } else if i.chunks.is_empty() && n >= 3 {
        (vec![Extract], "cold start: no beliefs yet".into())
    } else if n >= i.b.div_ceil(2) && i.pending_positive > 0 && i.novel_share >= 0.6 {
        (
            assess(),
            format!(
                "{:.0}% of new positives are unexplained: possible shift",
                i.novel_share * 100.0
            ),
        )
    } else if n >= i.b {
        (Lifecycle::ALL.to_vec(), format!("{n} pending signals"))
    } else {
        (
            Vec::new(),
            format!("only {n} pending, no conflict or novelty"),
        )
    };
    if !actions.is_empty() {
        for (cond, a) in [
            (i.duplicates > 0, Merge),
            (i.forgettable > 0 || !actions.is_empty(), Forget),
        ] {
            if cond && !actions.contains(&a) {
                actions.push(a);
            }
        }
        if (!i.has_profile || i.mutations + 1 >= i.gamma) && !actions.contains(&Synthesize) {
            actions.push(Synthesize);
        }
    }
    PlanOutput { actions, reason }
}
