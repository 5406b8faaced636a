//! `recommend`: a user-scoped policy's recall, the rank role's scores,
//! and the decision record that keeps what was decided (with the usage
//! trace for feedback, and the context the ranker saw for the inspector).
//! Runs through the loop machinery of `loops.rs`.
//!
//! Locks: those of [`Tenant::run_loop`]; item embedding, the policy and
//! the rank role run with no lock but `loop_state`.

use super::loops::{apply_local, decision_record_id, policy_err, policy_for, policy_key, LoopPlan};
use super::{kind, Tenant, DECISION_KIND};
use crate::error::ApiError;
use crate::types::*;
use evomem_core::{
    Catalog, DecisionQuery, Embedder, Item, ItemId, MemoryOp, MemoryRecord, Namespace, PolicyCtx,
};
use evomem_llm::rank::{RankCandidate, RankInput, RankRole};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

impl Tenant {
    /// Rank candidates with a policy's recall and the rank role; the
    /// decision, its usage trace and any registration commit together
    /// before the answer. Item embedding, the policy and the rank role run
    /// without the core lock.
    pub fn recommend(&self, req: RecommendRequest) -> Result<RecommendResponse, ApiError> {
        let spec = self.shared.config.policy_spec(req.policy.as_deref())?;
        let decision_id = new_decision_id();
        let (mut resp, _) = self.run_loop(&req.user_id, |ls, view| {
            view.dir.check_items(
                req.candidates
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (format!("candidates[{i}]"), c)),
            )?;
            let t = view.now;
            let mut ops = Vec::new();
            let dir = Arc::make_mut(&mut view.dir);
            let user = dir.ensure_user(&req.user_id, t, &mut ops);
            let mut cands = Vec::with_capacity(req.candidates.len());
            for (i, c) in req.candidates.iter().enumerate() {
                cands.push(dir.ensure_item(&format!("candidates[{i}]"), c, t, &mut ops)?);
            }
            let dir_changed = !ops.is_empty();
            embed_missing(
                self.embedder().as_ref(),
                &view.dir.catalog,
                &cands,
                &mut ls.item_vecs,
            )?;
            apply_local(&mut view.state, &ops, t);
            let policy = policy_for(&mut ls.policies, &spec, &self.shared, self.embedder())?;
            let name = policy.name().to_string();
            let query = DecisionQuery::rank(decision_id, user, t, cands.clone())
                .with_instruction(req.instruction.clone());
            let ctx = PolicyCtx {
                memory: &view.state,
                catalog: &view.dir.catalog,
                users: &view.dir.users,
                now: t,
            };
            let recall = policy.recall(&ctx, &query).map_err(policy_err(&spec))?;
            let catalog = &view.dir.catalog;
            let candidates = rank_candidates(catalog, &cands, &ls.item_vecs);
            let input = RankInput {
                user: req.user_id.clone(),
                instruction: req.instruction.clone(),
                context: recall.context.clone(),
                candidates,
                seed: self.shared.seed ^ t.0,
            };
            let scores = self
                .shared
                .hub
                .run(&RankRole::new(self.embedder()), &input, Some(&req.user_id))
                .map(|o| o.scores)
                .map_err(|e| ApiError::Llm {
                    policy: spec.clone(),
                    role: "rank".to_string(),
                    message: e.to_string(),
                })?;
            let token = |i: ItemId| catalog.get(i).map(|x| x.token.clone()).unwrap_or_default();
            let ranking = ranking_of(&scores, &cands, req.k, &token);
            let evidence = evidence_of(&recall.context, &token);
            let rec = MemoryRecord::new(
                decision_record_id(decision_id),
                Namespace::user(&req.user_id),
                kind(DECISION_KIND),
                format!("recommend via {}", policy_key(&spec)),
                t,
            )
            .with_field("policy", json!(policy_key(&spec)))
            .with_field("user_index", json!(user.0))
            .with_field("decided_at", json!(t.0))
            .with_field(
                "candidates",
                json!(cands.iter().map(|&i| token(i)).collect::<Vec<_>>()),
            )
            .with_field(
                "trace",
                serde_json::to_value(&recall.trace).unwrap_or(Value::Null),
            )
            .with_field("feedback_count", json!(0))
            // What the inspector's decision view shows (`/ui/api/decisions`):
            // the candidates as catalog ids (what context entries name), a
            // score per candidate, and the context the ranker saw.
            .with_field(
                "candidate_ids",
                json!(cands.iter().map(|i| i.0).collect::<Vec<_>>()),
            )
            .with_field("scores", json!(scores))
            .with_field("context", stored_context(&recall.context));
            let mut batches = Vec::new();
            if !ops.is_empty() {
                batches.push(evomem_store::Batch {
                    policy: "api".into(),
                    ops,
                    at: t,
                });
            }
            batches.push(evomem_store::Batch {
                policy: name,
                ops: vec![evomem_core::PlannedOp::new(
                    MemoryOp::Create { record: rec },
                    "decision",
                    "POST /v1/recommend",
                )],
                at: t,
            });
            Ok(LoopPlan {
                batches,
                dir_changed,
                answer: RecommendResponse {
                    decision_id,
                    policy: policy_key(&spec),
                    ranking,
                    profile: recall.context.profile.clone(),
                    evidence,
                },
            })
        })?;
        resp.decision_id = decision_id;
        Ok(resp)
    }
}

/// Embed the items of `cands` that `vecs` lacks (their full text) and keep
/// the vectors.
fn embed_missing(
    embedder: &dyn Embedder,
    catalog: &Catalog,
    cands: &[ItemId],
    vecs: &mut HashMap<ItemId, Vec<f32>>,
) -> Result<(), ApiError> {
    let missing: Vec<ItemId> = cands
        .iter()
        .copied()
        .filter(|i| !vecs.contains_key(i))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = missing
        .iter()
        .map(|&i| catalog.get(i).map(Item::full_text).unwrap_or_default())
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embedded = embedder
        .embed(&refs)
        .map_err(|e| ApiError::Embed(e.to_string()))?;
    for (i, v) in missing.into_iter().zip(embedded) {
        vecs.insert(i, v);
    }
    Ok(())
}

/// The rank role's view of each candidate: title, text and vector.
fn rank_candidates(
    catalog: &Catalog,
    cands: &[ItemId],
    vecs: &HashMap<ItemId, Vec<f32>>,
) -> Vec<RankCandidate> {
    cands
        .iter()
        .map(|&i| {
            let it = catalog.get(i);
            RankCandidate {
                item: i,
                title: it.map(|x| x.title.clone()).unwrap_or_default(),
                text: it.map(Item::full_text).unwrap_or_default(),
                embedding: vecs.get(&i).cloned().unwrap_or_default(),
            }
        })
        .collect()
}

/// The top `k` (all when `None`) of `cands` by `scores`, ties by position.
fn ranking_of(
    scores: &[f64],
    cands: &[ItemId],
    k: Option<usize>,
    token: &dyn Fn(ItemId) -> String,
) -> Vec<Ranked> {
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| {
        let sa = scores.get(a).copied().unwrap_or(f64::MIN);
        let sb = scores.get(b).copied().unwrap_or(f64::MIN);
        sb.total_cmp(&sa).then(a.cmp(&b))
    });
    let k = k.unwrap_or(order.len()).min(order.len());
    order[..k]
        .iter()
        .map(|&i| Ranked {
            item_id: token(cands[i]),
            score: scores.get(i).copied().unwrap_or(0.0),
        })
        .collect()
}

/// The evidence a decision's context showed the ranker, with item tokens.
fn evidence_of(
    context: &evomem_core::DecisionContext,
    token: &dyn Fn(ItemId) -> String,
) -> Vec<Evidence> {
    context
        .entries
        .iter()
        .map(|e| Evidence {
            memory_id: e.memory.as_ref().map(|m| m.as_str().to_string()),
            item_id: e.item.map(token),
            text: e.text.clone(),
            weight: e.weight,
            path: e
                .path
                .as_ref()
                .map(|p| p.nodes.iter().map(|n| n.as_str().to_string()).collect()),
        })
        .collect()
}

/// Most context entries a decision record keeps for the inspector.
const STORED_CONTEXT_ENTRIES: usize = 64;

/// A decision's context as its record keeps it: embeddings dropped, at most
/// [`STORED_CONTEXT_ENTRIES`] entries, entry texts cut to 1,000 bytes.
///
/// The service runs user-scoped families only (see `policy_for`), so the
/// context holds the deciding user's own records, never the API's memories
/// (no serving policy reads them): the copy lives in the user's namespace
/// and goes with a user deletion, and a hard delete of a memory has no
/// text to chase here.
fn stored_context(context: &evomem_core::DecisionContext) -> Value {
    let entries: Vec<Value> = context
        .entries
        .iter()
        .take(STORED_CONTEXT_ENTRIES)
        .map(|e| {
            let mut text = e.text.clone();
            if text.len() > 1000 {
                let mut cut = 1000;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
            json!({
                "memory": e.memory,
                "item": e.item,
                "text": text,
                "weight": e.weight,
                "path": e.path,
            })
        })
        .collect();
    json!({
        "profile": context.profile,
        "entries": entries,
        "omitted": context.entries.len().saturating_sub(STORED_CONTEXT_ENTRIES),
    })
}

/// A new decision id: random, below 2^53 so that every JSON client reads
/// it exactly; not derived from the time, so it cannot be guessed.
fn new_decision_id() -> u64 {
    let mut b = [0u8; 8];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
    (u64::from_le_bytes(b) >> 11).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_ids_are_random_and_exact_in_json() {
        let ids: BTreeSet<u64> = (0..1000).map(|_| new_decision_id()).collect();
        assert_eq!(ids.len(), 1000, "no repeats");
        assert!(ids.iter().all(|&i| i > 0 && i < (1 << 53)));
        // Not a timestamp: spread over the whole range.
        assert!(ids.iter().any(|&i| i > (1 << 52)));
        assert!(ids.iter().any(|&i| i < (1 << 52)));
    }
}
