//! `mars_plan` (π_plan, §3.3 "Agentic Scheduling"): after each signal, pick
//! the lifecycle actions to run now, or wait, and name the chunks that
//! boost, demote, merge and forget act on (Appendix F: "demote
//! 'Churchill'"). Offline: a rule list (see [`offline_plan`]).
//!
//! Answer shapes. Each entry of `actions` is either an action name (the
//! action with its default rule, the answer shape before targets existed) or
//! `{"op": name, "targets": [...]}`, each target a chunk id, or a chunk text
//! or facet value (case-insensitive; it names every chunk that carries it).
//! The parser resolves targets to chunk ids and rejects a target that names
//! no chunk, and a chunk both boosted and demoted. Targets of extract and
//! synthesize are ignored: extraction reads the pending signals, synthesis
//! the whole preference tier.

use super::extract::offline_assess;
use super::{arr, chunk_line, lines, obj, signal_line, ChunkIn, SignalIn};
use crate::mars::lifecycle::Lifecycle;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

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
    /// Those pairs as chunk ids, (weaker, stronger), within one category.
    pub duplicate_pairs: Vec<(String, String)>,
    /// The forget rule: strength below this ...
    pub forget_below: f64,
    /// ... with at least this much evidence.
    pub forget_min_evidence: u32,
    /// Positive signals of a category that pass over a chunk's value before
    /// the offline planner names it for demotion (a shift).
    pub shift_min: u32,
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
    /// Chunk ids named per action (boost, demote, merge, forget only). An
    /// action without an entry keeps its default rule; an empty list means
    /// "on no chunk".
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub targets: BTreeMap<Lifecycle, Vec<String>>,
    /// Why.
    pub reason: String,
}

/// The actions whose targets the lifecycle reads.
pub const TARGETED: [Lifecycle; 4] = [
    Lifecycle::Boost,
    Lifecycle::Demote,
    Lifecycle::Merge,
    Lifecycle::Forget,
];

/// The chunk ids a target names: the chunk with that id, else every chunk
/// whose text or facet value equals it case-insensitively.
fn resolve<'a>(chunks: &'a [ChunkIn], target: &str) -> Vec<&'a str> {
    let t = target.trim();
    if let Some(c) = chunks.iter().find(|c| c.id == t) {
        return vec![c.id.as_str()];
    }
    chunks
        .iter()
        .filter(|c| {
            c.text.trim().eq_ignore_ascii_case(t)
                || c.value
                    .as_deref()
                    .is_some_and(|v| v.eq_ignore_ascii_case(t))
        })
        .map(|c| c.id.as_str())
        .collect()
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
    /// Completion limit: 1.25 × the largest per-user mean of the offline plan's
    /// estimated tokens on 100 ml-100k users (69), rounded up to a multiple of 64.
    fn max_tokens(&self) -> Option<u32> {
        Some(128)
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_plan.md")
    }
    fn variables(&self, i: &PlanInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("pending".into(), lines(&i.pending, signal_line)),
            ("chunks".into(), lines(&i.chunks, chunk_line)),
            (
                "duplicates".into(),
                lines(&i.duplicate_pairs, |(a, b)| format!("- {a} ~ {b}")),
            ),
            (
                "state".into(),
                format!(
                    "pending={} (positive {}, negative {}); fifo {}/{}; novel share {:.2}; \
                     conflicts {}; forgettable {} (strength < {:.2} with evidence >= {}); \
                     duplicate pairs {}; mutations since synthesis {}/{}; profile {}",
                    i.pending.len(),
                    i.pending_positive,
                    i.pending_negative,
                    i.fifo_len,
                    i.lmax,
                    i.novel_share,
                    i.conflicts,
                    i.forgettable,
                    i.forget_below,
                    i.forget_min_evidence,
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
                   "actions": {"type": "array", "items": {"anyOf": [
                       {"type": "string", "enum": names},
                       {"type": "object", "required": ["op"],
                        "properties": {
                            "op": {"type": "string", "enum": names},
                            "targets": {"type": "array", "items": {"type": "string"}}}}]}},
                   "reason": {"type": "string"}}})
    }
    fn parse(&self, input: &PlanInput, answer: serde_json::Value) -> Result<PlanOutput, String> {
        let o = obj(&answer)?;
        let mut actions = Vec::new();
        let mut targets: BTreeMap<Lifecycle, Vec<String>> = BTreeMap::new();
        for (i, a) in arr(o, "actions")?.into_iter().enumerate() {
            let (name, named) = match a {
                serde_json::Value::String(s) => (s.as_str(), None),
                serde_json::Value::Object(m) => {
                    let name = m
                        .get("op")
                        .and_then(serde_json::Value::as_str)
                        .ok_or_else(|| format!("actions[{i}]: missing string field `op`"))?;
                    let named = match m.get("targets") {
                        None | Some(serde_json::Value::Null) => None,
                        Some(serde_json::Value::Array(t)) => Some(t),
                        Some(_) => return Err(format!("actions[{i}].targets is not an array")),
                    };
                    (name, named)
                }
                _ => return Err(format!("actions[{i}] is neither a name nor an object")),
            };
            let name = name.trim();
            if name == WAIT {
                continue;
            }
            let action: Lifecycle = name
                .parse()
                .map_err(|_| format!("actions[{i}]: unknown action `{name}`"))?;
            if !actions.contains(&action) {
                actions.push(action);
            }
            let Some(named) = named.filter(|_| TARGETED.contains(&action)) else {
                continue;
            };
            let ids = targets.entry(action).or_default();
            for (k, t) in named.iter().enumerate() {
                let t = t
                    .as_str()
                    .ok_or_else(|| format!("actions[{i}].targets[{k}] is not a string"))?;
                let found = resolve(&input.chunks, t);
                if found.is_empty() {
                    return Err(format!(
                        "actions[{i}].targets[{k}]: `{t}` names no chunk (use a chunk id)"
                    ));
                }
                for id in found {
                    if !ids.iter().any(|x| x == id) {
                        ids.push(id.to_string());
                    }
                }
            }
        }
        if let (Some(b), Some(d)) = (
            targets.get(&Lifecycle::Boost),
            targets.get(&Lifecycle::Demote),
        ) {
            if let Some(both) = b.iter().find(|id| d.contains(id)) {
                return Err(format!("chunk `{both}` is both boosted and demoted"));
            }
        }
        Ok(PlanOutput {
            actions,
            targets,
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
///
/// Targets (named for each of boost, demote, merge, forget the plan runs,
/// possibly none):
/// - boost: chunks whose facet more pending positive than negative signals
///   carry;
/// - demote: chunks whose facet more pending negative than positive signals
///   carry, or, carried by none, passed over by ≥ `shift_min` positive
///   signals of their axis (a shift; both as [`offline_assess`]);
/// - merge: the weaker chunk of each near-duplicate pair (it is merged into
///   its closest chunk of the category);
/// - forget: chunks already below `forget_below` with ≥ `forget_min_evidence`
///   evidence. A chunk this round demotes below the threshold is forgotten by
///   a later round, as in Appendix F (demoted twice, then forgotten).
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
    let targets = offline_targets(i, &actions);
    PlanOutput {
        actions,
        targets,
        reason,
    }
}

/// The offline planner's targets for the targeted actions of `actions`.
fn offline_targets(i: &PlanInput, actions: &[Lifecycle]) -> BTreeMap<Lifecycle, Vec<String>> {
    let mut out = BTreeMap::new();
    if !TARGETED.iter().any(|a| actions.contains(a)) {
        return out;
    }
    let (boosts, demotes) = offline_assess(&i.pending, &i.chunks, i.shift_min);
    let weak: BTreeSet<&str> = i.duplicate_pairs.iter().map(|(w, _)| w.as_str()).collect();
    for a in TARGETED.into_iter().filter(|a| actions.contains(a)) {
        let ids: Vec<String> = match a {
            Lifecycle::Boost => boosts.iter().map(|x| x.chunk.clone()).collect(),
            Lifecycle::Demote => demotes.iter().map(|x| x.chunk.clone()).collect(),
            Lifecycle::Merge => i
                .chunks
                .iter()
                .filter(|c| weak.contains(c.id.as_str()))
                .map(|c| c.id.clone())
                .collect(),
            Lifecycle::Forget => i
                .chunks
                .iter()
                .filter(|c| c.strength < i.forget_below && c.evidence >= i.forget_min_evidence)
                .map(|c| c.id.clone())
                .collect(),
            Lifecycle::Extract | Lifecycle::Synthesize => continue,
        };
        out.insert(a, ids);
    }
    out
}
