//! The decider: turns a policy's recalled context into candidate scores
//! through the `rank` role, and the scores into the target's rank.
//!
//! Candidate embeddings (of `Item::full_text`) are computed once per run for
//! every item that appears in any candidate list, and shared by all policies.
//! The role's seed for a decision is `mix(run seed, decision id)`, so the
//! offline ranker's tie-breaks are the same for every policy.
//!
//! Ties between scores are broken by candidate position
//! (`evomem_core::metrics::rank_of_target`); positions come from the
//! protocol's seeded shuffle, so ties never systematically favour the target.

use crate::error::EvalError;
use crate::protocol::{mix, Decision, Plan};
use evomem_core::metrics::rank_of_target;
use evomem_core::{DecisionContext, Embedder, ItemId};
use evomem_llm::rank::{RankCandidate, RankInput, RankRole};
use evomem_llm::LlmHub;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Batch size for embedding candidate items.
const EMBED_BATCH: usize = 256;

/// Ranks candidates for every policy of a run.
pub struct Decider {
    embedder: Arc<dyn Embedder>,
    vectors: BTreeMap<ItemId, Vec<f32>>,
    seed: u64,
}

/// The decider's answer for one decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// One score per candidate (higher is better).
    pub scores: Vec<f64>,
    /// 1-based rank of the target.
    pub rank: usize,
}

impl Decider {
    /// Embed every candidate item of `plan` with `embedder`.
    pub fn new(plan: &Plan<'_>, embedder: Arc<dyn Embedder>) -> Result<Self, EvalError> {
        let items: BTreeSet<ItemId> = plan
            .decisions
            .iter()
            .flat_map(|d| d.candidates.iter().copied())
            .collect();
        let items: Vec<ItemId> = items.into_iter().collect();
        let texts: Vec<String> = items
            .iter()
            .map(|&i| {
                plan.dataset
                    .catalog
                    .get(i)
                    .map(|it| it.full_text())
                    .unwrap_or_default()
            })
            .collect();
        let mut vectors = BTreeMap::new();
        for (ids, chunk) in items.chunks(EMBED_BATCH).zip(texts.chunks(EMBED_BATCH)) {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let vecs = embedder.embed(&refs)?;
            for (&id, v) in ids.iter().zip(vecs) {
                vectors.insert(id, v);
            }
        }
        Ok(Self {
            embedder,
            vectors,
            seed: plan.config.seed,
        })
    }

    /// The embedder's model id.
    pub fn model_id(&self) -> &str {
        self.embedder.model_id()
    }

    /// The embedder's dimension.
    pub fn dim(&self) -> usize {
        self.embedder.dim()
    }

    /// Number of distinct candidate items embedded.
    pub fn embedded_items(&self) -> usize {
        self.vectors.len()
    }

    /// Score the candidates of `decision` given `context`, via `hub`'s rank role.
    pub fn rank(
        &self,
        hub: &LlmHub,
        policy: &str,
        plan: &Plan<'_>,
        decision: &Decision,
        context: &DecisionContext,
    ) -> Result<Ranked, EvalError> {
        let candidates = decision
            .candidates
            .iter()
            .map(|&item| {
                let it = plan.dataset.catalog.get(item);
                RankCandidate {
                    item,
                    title: it.map(|i| i.title.clone()).unwrap_or_default(),
                    text: it.map(|i| i.full_text()).unwrap_or_default(),
                    embedding: self.vectors.get(&item).cloned().unwrap_or_default(),
                }
            })
            .collect();
        let user = plan.user_token(decision.user).to_string();
        let input = RankInput {
            user: user.clone(),
            instruction: decision.instruction.clone(),
            context: context.clone(),
            candidates,
            seed: mix(self.seed, decision.decision_id),
        };
        let scores = hub
            .run(&RankRole::new(self.embedder.clone()), &input, Some(&user))
            .map(|o| o.scores)
            .map_err(|source| EvalError::Rank {
                policy: policy.to_string(),
                decision_id: decision.decision_id,
                source,
            })?;
        if scores.len() != decision.candidates.len() {
            return Err(EvalError::BadScores {
                policy: policy.to_string(),
                decision_id: decision.decision_id,
                message: format!(
                    "{} scores for {} candidates",
                    scores.len(),
                    decision.candidates.len()
                ),
            });
        }
        let rank = rank_of_target(&scores, decision.target_index);
        Ok(Ranked { scores, rank })
    }
}
