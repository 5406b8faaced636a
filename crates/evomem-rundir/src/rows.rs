//! The typed rows of a run folder: a policy's `metrics.json`
//! ([`PolicyMetrics`], with the plan's counts and the op counts), one line
//! of `per_user.jsonl` ([`PerUser`]) and of `decisions.jsonl`
//! ([`DecisionLine`]). Their field names are the files' keys, so the writer
//! and every reader agree on them by construction.

use evomem_core::metrics::RankMetrics;
use evomem_core::{DecisionContext, ItemId, UsageTrace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One policy's `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyMetrics {
    /// The policy spec.
    pub policy: String,
    /// Dataset name.
    pub dataset: String,
    /// Mean metrics over decisions.
    pub metrics: RankMetrics,
    /// Users with a decision.
    pub n_users: usize,
    /// The config without the LLM cache settings (which differ between a
    /// recording run and its replay while the results must not).
    pub config: serde_json::Value,
    /// SHA-256 of every data file read.
    pub data_sha256: BTreeMap<String, String>,
    /// The plan's counts.
    pub plan: PlanStats,
    /// The policy's own statistics (`Policy::stats`; policy-specific).
    pub policy_stats: serde_json::Value,
    /// Interactions the policy observed.
    pub observed: usize,
    /// Op counts.
    pub ops: OpCounts,
    /// LLM accounting (without latencies).
    pub llm: serde_json::Value,
    /// The embedder.
    pub embedding: serde_json::Value,
}

/// Counts describing a plan (written to `metrics.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanStats {
    /// Users in the dataset.
    pub users_total: usize,
    /// Users selected.
    pub users_selected: usize,
    /// Decisions.
    pub decisions: usize,
    /// Interactions the retrospective protocol shows policies.
    pub retrospective_visible: usize,
    /// Interactions of selected users (evolving replay length).
    pub stream_len: usize,
    /// Decisions that used a fixed candidate list.
    pub fixed_lists_used: usize,
    /// Items removed from fixed lists because the user had touched them.
    pub fixed_touched_removed: usize,
    /// Decisions with fewer negatives than requested (too few untouched items).
    pub short_candidate_sets: usize,
    /// Mean number of candidates per decision.
    pub mean_candidates: f64,
}

/// Op counts of one policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpCounts {
    /// Ops applied.
    pub total: usize,
    /// Per lifecycle label.
    pub by_label: BTreeMap<String, usize>,
    /// Per op kind.
    pub by_op: BTreeMap<String, usize>,
}

/// One per-user line of `per_user.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerUser {
    /// User token.
    pub user: String,
    /// Decision id.
    pub decision_id: u64,
    /// Decision time.
    pub at: u64,
    /// Target item token.
    pub target: String,
    /// 1-based rank of the target.
    pub rank: usize,
    /// Number of candidates.
    pub n_candidates: usize,
    /// Metrics of this decision.
    #[serde(flatten)]
    pub metrics: RankMetrics,
}

/// One line of `decisions.jsonl`: what the decider saw and did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionLine {
    /// User token.
    pub user: String,
    /// Decision id.
    pub decision_id: u64,
    /// Decision time.
    pub at: u64,
    /// Target item token.
    pub target: String,
    /// Candidate item tokens, in the order the decider saw them.
    pub candidates: Vec<String>,
    /// The same candidates as the run's item ids (what context entries name).
    #[serde(default)]
    pub candidate_ids: Vec<ItemId>,
    /// One score per candidate.
    pub scores: Vec<f64>,
    /// 1-based rank of the target.
    pub rank: usize,
    /// The recalled context (embeddings dropped).
    pub context: DecisionContext,
    /// The usage trace.
    pub trace: UsageTrace,
}

impl DecisionLine {
    /// Index of the top-scored candidate (ties to the earlier position, as
    /// the metrics break them).
    pub fn top(&self) -> Option<usize> {
        self.scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i)
    }
}
