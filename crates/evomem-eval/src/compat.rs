//! The seams between the arena and the crates it drives: the rank role, LLM
//! accounting, the default embedder and the data loaders.
//!
//! Everything the arena needs from `evomem-llm`, `evomem-embed` and the
//! loaders goes through this one module, so that a change in one of those
//! contracts is a change in one place.

use crate::error::EvalError;
use evomem_core::{DecisionContext, Embedder, ItemId, LlmError};
use evomem_llm::LlmHub;
use std::path::Path;
use std::sync::Arc;

/// One candidate as the rank role sees it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Item.
    pub item: ItemId,
    /// Title.
    pub title: String,
    /// Full text (title, categories, text fields).
    pub text: String,
    /// Embedding of `text`.
    pub embedding: Vec<f32>,
}

/// Everything the rank role gets for one decision.
#[derive(Debug, Clone)]
pub struct RankRequest {
    /// User token.
    pub user: String,
    /// Instruction, if any.
    pub instruction: Option<String>,
    /// Recalled memory.
    pub context: DecisionContext,
    /// Candidates in presentation order.
    pub candidates: Vec<Candidate>,
    /// Seed for the role's tie-breaks.
    pub seed: u64,
}

/// Score candidates through the `rank` role of `hub` (offline or a model).
/// Returns one score per candidate, higher is better.
pub fn rank_scores(
    hub: &LlmHub,
    embedder: &Arc<dyn Embedder>,
    req: RankRequest,
) -> Result<Vec<f64>, LlmError> {
    use evomem_llm::rank::{RankCandidate, RankInput, RankRole};
    let role = RankRole::new(embedder.clone());
    let user = req.user.clone();
    let input = RankInput {
        user: req.user,
        instruction: req.instruction,
        context: req.context,
        candidates: req
            .candidates
            .into_iter()
            .map(|c| RankCandidate {
                item: c.item,
                title: c.title,
                text: c.text,
                embedding: c.embedding,
            })
            .collect(),
        seed: req.seed,
    };
    hub.run(&role, &input, Some(&user)).map(|o| o.scores)
}

/// The hub's reproducible accounting (calls, tokens, repairs and fallbacks
/// per role and per user), for `metrics.json`.
pub fn llm_accounting(hub: &LlmHub) -> serde_json::Value {
    hub.accounting_json()
}

/// The hub's non-reproducible figures (cache hits, backend calls, latency),
/// for `timing.json`.
pub fn llm_runtime(hub: &LlmHub) -> serde_json::Value {
    hub.runtime_json()
}

pub use crate::data::LoadedData;

/// Load a dataset folder, detecting the format when `format` is `None`.
/// `format` is one of `recbole`, `agentcf`, `iagent`, `jsonl`.
pub fn load_data(dir: &Path, format: Option<&str>) -> Result<LoadedData, EvalError> {
    let format = match format {
        None => crate::data::detect_format(dir)?,
        Some(f) => f.parse::<crate::data::Format>()?,
    };
    Ok(crate::data::load(dir, format)?)
}
