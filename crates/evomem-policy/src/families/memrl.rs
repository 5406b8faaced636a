//! `memrl`: a growing pool of trajectory memories with learned utilities
//! (MemRL, the baseline of `romerl-reduced-order-utility-memory`), and its
//! variants MemRL-4 (`memrl[cap=4]`) and MemRL+UCB (`memrl[ucb=true]`).
//!
//! - **Write.** Every finished task adds one memory: the task text (title and
//!   embedding), the trajectory, the outcome y, the efficiency ℓ, the time,
//!   `Q = Q_init = 0.5` and an update count of 0.
//! - **Retrieve.** Candidates are the memories whose cosine with the task is
//!   at least δ. Each is scored `0.5·z(sim) + 0.5·z(Q)`, z-scored over the
//!   candidates, and the top `k_ret = 10` are returned. With probability
//!   `ε = 0.01` the retrieved set is drawn at random from the candidates
//!   instead (a seeded draw per decision).
//! - **δ.** Adaptive, as in the paper's Table 5 note: the top-20% quantile
//!   of the pairwise cosine between task descriptions. `delta=auto` computes
//!   it over the distinct tasks seen so far (the arena passes the value for
//!   the whole setting); a number fixes it.
//! - **Update.** After reward r every retrieved memory gets
//!   `Q ← (1 − α)Q + αr`, α = 0.3.
//! - **MemRL-4** (`cap=4`): at most `cap` memories per task; once a task has
//!   `cap`, a new memory replaces the one with the fewest utility updates
//!   (ties: the oldest), the paper's feedback-aware replacement.
//! - **MemRL+UCB** (`ucb=true`): each candidate's score gets an exploration
//!   bonus `min(b_max, c_UCB·sqrt(ln(N + 1) / (n_i + 1)))` with N the
//!   decisions served so far and n_i the memory's updates; `c_UCB = 0.2`,
//!   `b_max = 0.3` (the paper's noise-injection settings). The paper gives
//!   the constants, not the bonus's form; this is the standard UCB1 form.
//! - **Nulled memories** (the arena's noise injection). `actionless=keep`
//!   (the default) treats them like any other memory. With
//!   `actionless=replace`, a new trajectory of the task that `replace_rule`
//!   admits (`same_polarity`, the default for every design: only one with
//!   the nulled memory's outcome; `any`: every one) is written over the
//!   oldest such memory (same id, its Q kept) instead of being added
//!   ([`crate::utility::ReplaceRule`], the rule RoMeRL cleans by too).
//!
//! **Predict decisions** (the delayed rating stream, TIDE's Arena B). The
//! memories are the user's matured rated items: when a rating's label
//! matures (its feedback carries `Outcome::value` and `Outcome::item`), a
//! memory is added whose title and embedding are the item's catalog line
//! (`Item::summary`) and which holds the rating (`fields::VALUE`),
//! `Q = Q_init`. Retrieval is the same as for tasks, with the item as the
//! query: memories with cosine ≥ δ (`delta=auto`: over the items queried so
//! far), scored `0.5·z(sim) + 0.5·z(Q)`, top `k_ret`, ε-exploration; when
//! no memory clears δ, all of the user's memories are the candidates (so a
//! user with memories always gets an estimate). The estimate is the
//! utility-weighted mean of the retrieved ratings `Σ Q_i·r_i / Σ Q_i`; with
//! no memory there is none and the arena's decider falls back to the global
//! mean. After the label arrives every retrieved memory gets the Q update
//! with the prediction's reward mapped to [0, 1]: `r = 1 − |error| / 4`
//! (the outcome's reward is `−|error|` on the 1–5 scale). `cap` does not
//! apply (a user rates an item once).

use crate::registry::{Family, Grid, Key, KeyType, PolicyDeps, PolicySpec};
use crate::utility::{
    keys, nulled_to_clean, trajectory_record, Actionless, Candidate, Retrieval,
    Retriever, UtilityCore, DELTA_SAMPLE,
};
use crate::utility::fields;
use evomem_core::{
    DecisionKind, DecisionQuery, Feedback, ItemId, MemoryId, MemoryOp, MemoryRecord,
    PlannedOp, PolicyCtx, PolicyError, Recall, RecordKind,
};
use evomem_kit::EmbeddingCache;
use serde_json::json;

/// The `memrl` family row.
pub const FAMILY: Family = Family {
    name: "memrl",
    kind: crate::registry::FamilyKind::Memory,
    summary: "MemRL: a growing pool of trajectory memories with learned utilities (cap=4: MemRL-4, ucb=true: MemRL+UCB)",
    keys: &[
        keys::K_RET,
        keys::ALPHA,
        keys::Q_INIT,
        keys::EPSILON,
        keys::DELTA,
        keys::SCORE,
        keys::ACTIONLESS,
        keys::REPLACE_RULE,
        Key {
            name: "cap",
            ty: KeyType::Count,
            default: "0",
            doc: "memories per task (0: unbounded; 4: MemRL-4, replacing the least-updated)",
        },
        Key {
            name: "ucb",
            ty: KeyType::Bool,
            default: "false",
            doc: "add the UCB exploration bonus to retrieval scores",
        },
        Key {
            name: "c_ucb",
            ty: KeyType::Number,
            default: "0.2",
            doc: "UCB coefficient",
        },
        Key {
            name: "b_max",
            ty: KeyType::Number,
            default: "0.3",
            doc: "largest UCB bonus per memory",
        },
    ],
    build,
    grids: &[
        Grid {
            name: "variants",
            doc: "MemRL, MemRL-4 and MemRL+UCB",
            specs: &["memrl", "memrl[cap=4]", "memrl[ucb=true]"],
        },
        Grid {
            name: "retrieval",
            doc: "the shared retrieval (gate, exploration, z-scores) against raw scores over every memory",
            specs: &["memrl", "memrl[delta=-1,epsilon=0,score=raw]"],
        },
        Grid {
            name: "actionless",
            doc: "nulled memories kept like any other, or replaced by the task's next trajectory",
            specs: &["memrl", "memrl[actionless=replace]"],
        },
        Grid {
            name: "replace_rule",
            doc: "under actionless=replace, nulled memories cleaned by a trajectory of the same outcome or by any",
            specs: &[
                "memrl[actionless=replace,replace_rule=same_polarity]",
                "memrl[actionless=replace,replace_rule=any]",
            ],
        },
    ],
    caps: evomem_core::family::MEMRL,
};

/// Largest prediction error on the 1–5 rating scale: a Predict outcome's
/// reward `−|error|` maps to `1 − |error| / PREDICT_RANGE` in [0, 1].
const PREDICT_RANGE: f64 = 4.0;


/// The catalog line of `item`: the title and embedding of its memories.
fn item_text(ctx: &PolicyCtx<'_>, item: ItemId) -> String {
    ctx.catalog
        .get(item)
        .map(|i| i.summary())
        .unwrap_or_else(|| format!("item {}", item.0))
}

fn build(
    spec: &PolicySpec,
    deps: &PolicyDeps,
) -> Result<Box<dyn evomem_core::Policy>, PolicyError> {
    let retrieval = Retrieval::from_spec("memrl", spec)?;
    let cfg = MemRlConfig {
        cap: spec.value("cap")?,
        ucb: spec.value("ucb")?,
        c_ucb: spec.value("c_ucb")?,
        b_max: spec.value("b_max")?,
    };
    let alpha: f64 = spec.value("alpha")?;
    let k_ret: usize = spec.value("k_ret")?;
    if !(0.0..=1.0).contains(&alpha) || k_ret == 0 {
        return Err(PolicyError::Config(format!(
            "memrl: need alpha in [0, 1] and k_ret >= 1, got alpha={alpha}, k_ret={k_ret}"
        )));
    }
    Ok(Box::new(MemRl {
        core: UtilityCore {
            policy: "memrl",
            embedder: deps.embedder.clone(),
            cache: EmbeddingCache::new(deps.embedder.dim()),
            alpha,
            q_init: spec.value("q_init")?,
            k_ret,
            seed: deps.seed,
            decisions: 0,
            updates: 0,
            written: 0,
        },
        cfg,
        retriever: Retriever::new(retrieval),
        replaced: 0,
        predict_delta: None,
    }))
}

#[derive(Debug, Clone, Copy)]
struct MemRlConfig {
    cap: usize,
    ucb: bool,
    c_ucb: f64,
    b_max: f64,
}

/// The policy.
struct MemRl {
    core: UtilityCore,
    cfg: MemRlConfig,
    /// The shared retrieval (δ gate, ε, z-scores; its task sample).
    retriever: Retriever,
    replaced: u64,
    /// `Predict` decisions: δ and the number of items it was computed over.
    predict_delta: Option<(usize, f64)>,
}

impl evomem_core::Policy for MemRl {
    fn name(&self) -> &str {
        "memrl"
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        if let DecisionKind::Predict { item } = &q.kind {
            return self.recall_predict(ctx, q, *item);
        }
        let (task, qv) = self.core.query(q)?;
        self.retriever.note(task.id.clone(), &qv);
        let delta = self.retriever.delta();
        let ns = [UtilityCore::namespace(ctx, Some(q.user))];
        let cands = Retriever::gate(UtilityCore::similar(ctx, &ns, &qv), delta);
        let scored = self.rank(q, &cands);
        Ok(UtilityCore::recall(q, &scored))
    }

    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if fb.outcome.episode.is_none() {
            if let (Some(value), Some(item)) = (fb.outcome.value, fb.outcome.item) {
                return self.feedback_predict(ctx, fb, value, item);
            }
        }
        self.feedback_act(ctx, fb)
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "decisions": self.core.decisions,
            "utility_updates": self.core.updates,
            "written": self.core.written,
            "replaced": self.replaced,
            "explored": self.retriever.explored,
            "delta": self.retriever.delta(),
        })
    }
}

impl MemRl {
    /// δ for `Predict` decisions. A stream asks one decision per rating,
    /// so `delta=auto` is recomputed only when the number of distinct items
    /// seen has doubled since the last estimate (or reached the sample
    /// cap), not on every decision.
    fn predict_delta(&mut self) -> f64 {
        let n = self.retriever.noted();
        match self.predict_delta {
            Some((m, d)) if n < 2 * m && !(n == DELTA_SAMPLE && m < n) => d,
            _ => {
                let d = self.retriever.delta();
                self.predict_delta = Some((n, d));
                d
            }
        }
    }

    /// Score `cands` `0.5·z(sim) + 0.5·z(Q)` (plus the UCB bonus), then
    /// the top `k_ret`, or with probability ε a random set
    /// ([`Retriever::rank`]).
    fn rank<'m>(
        &mut self,
        q: &DecisionQuery,
        cands: &[Candidate<'m>],
    ) -> Vec<(&'m MemoryRecord, f64)> {
        let n = self.core.decisions as f64;
        let (ucb, c_ucb, b_max) = (self.cfg.ucb, self.cfg.c_ucb, self.cfg.b_max);
        self.retriever.rank(&self.core, q, cands, 0.5, |t| {
            if ucb {
                (c_ucb * ((n + 1.0).ln() / (t.updates as f64 + 1.0)).sqrt()).min(b_max)
            } else {
                0.0
            }
        })
    }

    /// Recall for a `Predict` decision (module docs).
    fn recall_predict(
        &mut self,
        ctx: &PolicyCtx<'_>,
        q: &DecisionQuery,
        item: ItemId,
    ) -> Result<Recall, PolicyError> {
        let qv = self.core.embed(&item_text(ctx, item))?;
        self.core.decisions += 1;
        self.retriever.note(format!("item:{}", item.0), &qv);
        let delta = self.predict_delta();
        let ns = [UtilityCore::namespace(ctx, Some(q.user))];
        let all: Vec<Candidate<'_>> = UtilityCore::similar(ctx, &ns, &qv)
            .into_iter()
            .filter(|(r, _, _)| r.fields.contains_key(fields::VALUE))
            .filter_map(|(r, t, sim)| sim.map(|s| (r, t, s)))
            .collect();
        let passing: Vec<Candidate<'_>> = all.iter().filter(|c| c.2 >= delta).cloned().collect();
        let cands = if passing.is_empty() { all } else { passing };
        let ranked = self.rank(q, &cands);
        let mut recall = UtilityCore::recall(q, &ranked);
        let (mut num, mut den) = (0.0, 0.0);
        for (e, (r, _)) in recall.context.entries.iter_mut().zip(&ranked) {
            let v = r
                .fields
                .get(fields::VALUE)
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0);
            let w = r.utility.max(1e-6);
            num += w * v;
            den += w;
            e.text = format!("{}: rated {v}/5 (Q {:.2})", r.text, r.utility);
        }
        recall.context.estimate = (den > 0.0).then(|| num / den);
        Ok(recall)
    }

    /// Feedback for a `Predict` decision: Q updates from the error, then
    /// the matured rating as a new memory (module docs).
    fn feedback_predict(
        &mut self,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
        value: f64,
        item: ItemId,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let mut scaled = fb.clone();
        scaled.outcome.reward = (1.0 + fb.outcome.reward / PREDICT_RANGE).clamp(0.0, 1.0);
        let mut ops = self.core.update_ops(ctx, &scaled);
        let ns = UtilityCore::namespace(ctx, fb.user);
        let text = item_text(ctx, item);
        let emb = self.core.embedding(&text)?;
        let id = MemoryId::new(format!(
            "rate:{}:{}:{}",
            ns.as_str(),
            item.0,
            fb.decision_id
        ));
        let token = ctx
            .catalog
            .get(item)
            .map(|i| i.token.clone())
            .unwrap_or_else(|| item.0.to_string());
        let mut record = MemoryRecord::new(id, ns, RecordKind::UtilitySlot, text, fb.observed_at)
            .with_field(fields::TASK_ID, json!(format!("item:{token}")))
            .with_field(fields::VALUE, json!(value))
            .with_field(fields::SUCCESS, json!(value >= 4.0))
            .with_field(fields::UPDATES, json!(0))
            .with_field(fields::POSITIVE, json!(0))
            .with_field(fields::N_POST, json!(0))
            .with_embedding(emb);
        record.utility = self.core.q_init;
        self.core.written += 1;
        ops.push(PlannedOp::new(
            MemoryOp::Create { record },
            "write",
            format!("matured rating {value} of item {token}"),
        ));
        Ok(ops)
    }

    /// `actionless=replace`: the oldest memory of the episode's task whose
    /// action was nulled and that `replace_rule` lets this episode clean
    /// ([`nulled_to_clean`]) is replaced by the episode (same id, so it
    /// keeps its Q; its update counts carry over, plus this feedback's
    /// update when it was retrieved), instead of a new memory being added.
    /// `None` when the task has no such memory.
    fn replace_actionless(
        &mut self,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
        episode: &evomem_core::Episode,
        ns: &evomem_core::Namespace,
        success: bool,
    ) -> Result<Option<PlannedOp>, PolicyError> {
        let nsv = [ns.clone()];
        let cands = UtilityCore::candidates(ctx, &nsv);
        let rule = self.retriever.cfg.replace_rule;
        let Some((current, t)) = nulled_to_clean(&cands, &episode.task.id, success, rule).cloned()
        else {
            return Ok(None);
        };
        let emb = self.core.embedding(&episode.task.text)?;
        let mut record = trajectory_record(
            t.id.clone(),
            ns.clone(),
            episode,
            success,
            self.core.q_init,
            emb,
            fb.observed_at,
        );
        let used = fb.trace.used.iter().any(|u| u.id == t.id);
        let count = |k: &str| current.fields.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        let positive = u64::from(used && fb.outcome.reward > 0.0);
        record.fields.insert(fields::UPDATES.to_string(), json!(count(fields::UPDATES) + u64::from(used)));
        record.fields.insert(fields::POSITIVE.to_string(), json!(count(fields::POSITIVE) + positive));
        self.core.written += 1;
        self.replaced += 1;
        Ok(Some(PlannedOp::new(
            MemoryOp::Replace {
                id: t.id,
                record,
            },
            "replace",
            format!(
                "task {}: a memory with no action is replaced by the new trajectory (actionless=replace, replace_rule={})",
                episode.task.id,
                rule.name()
            ),
        )))
    }

    /// Feedback for an `Act` decision: Q updates, then the episode as a
    /// new trajectory (MemRL-4: replacing the least-updated at the cap).
    fn feedback_act(
        &mut self,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let mut ops = self.core.update_ops(ctx, fb);
        let Some(episode) = crate::utility::episode_of("memrl", fb)? else {
            return Ok(ops);
        };
        let ns = UtilityCore::namespace(ctx, fb.user);
        let success = fb.outcome.success.unwrap_or(false);
        if self.retriever.cfg.actionless == Actionless::Replace {
            if let Some(op) = self.replace_actionless(ctx, fb, episode, &ns, success)? {
                ops.push(op);
                return Ok(ops);
            }
        }
        if self.cfg.cap > 0 {
            // Updates as they will be once this feedback's ops are applied.
            let bumped: std::collections::BTreeSet<&MemoryId> =
                fb.trace.used.iter().map(|u| &u.id).collect();
            let nsv = [ns.clone()];
            let mut same: Vec<(u64, u64, MemoryId)> = UtilityCore::candidates(ctx, &nsv)
                .into_iter()
                .filter(|(_, t)| t.task_id == episode.task.id)
                .map(|(_, t)| {
                    let u = t.updates + u64::from(bumped.contains(&t.id));
                    (u, t.created_at, t.id)
                })
                .collect();
            same.sort();
            let excess = (same.len() + 1).saturating_sub(self.cfg.cap);
            for (u, _, id) in same.into_iter().take(excess) {
                self.replaced += 1;
                ops.push(PlannedOp::new(
                    MemoryOp::Forget { id },
                    "replace",
                    format!(
                        "task {} is at its cap of {}; the least-updated memory ({u} updates) makes room",
                        episode.task.id, self.cfg.cap
                    ),
                ));
            }
        }
        let emb = self.core.embedding(&episode.task.text)?;
        let id = MemoryId::new(format!(
            "traj:{}:{}:{}",
            ns.as_str(),
            episode.task.id,
            fb.decision_id
        ));
        let record = trajectory_record(
            id,
            ns,
            episode,
            success,
            self.core.q_init,
            emb,
            fb.observed_at,
        );
        self.core.written += 1;
        ops.push(PlannedOp::new(
            MemoryOp::Create { record },
            "write",
            format!(
                "new {} trajectory for task {}",
                if success { "success" } else { "failure" },
                episode.task.id
            ),
        ));
        Ok(ops)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::build as build_spec;
    use evomem_core::{
        Catalog, Item, LogicalTime, MemoryState, Outcome, Policy, UsageTrace, UserId,
    };
    use evomem_kit::testing::TestEmbedder;
    use evomem_llm::LlmHub;
    use std::sync::Arc;

    fn catalog() -> Catalog {
        let item = |i: u32, title: &str, genre: &str| Item {
            id: ItemId(i),
            token: i.to_string(),
            title: title.into(),
            text: Default::default(),
            categories: vec![genre.into()],
            attributes: Default::default(),
        };
        Catalog {
            items: vec![
                item(0, "Space Battle", "SciFi"),
                item(1, "Space Battle Returns", "SciFi"),
                item(2, "Quiet Village", "Drama"),
            ],
        }
    }

    fn ctx<'a>(m: &'a MemoryState, c: &'a Catalog, t: u64) -> PolicyCtx<'a> {
        PolicyCtx {
            memory: m,
            catalog: c,
            users: &[],
            now: LogicalTime(t),
        }
    }

    fn predict(id: u64, item: u32) -> DecisionQuery {
        DecisionQuery {
            decision_id: id,
            user: UserId(0),
            at: LogicalTime(id),
            instruction: None,
            kind: DecisionKind::Predict { item: ItemId(item) },
        }
    }

    fn matured(id: u64, item: u32, value: f64, predicted: f64, trace: UsageTrace) -> Feedback {
        Feedback {
            decision_id: id,
            user: Some(UserId(0)),
            decided_at: LogicalTime(id),
            observed_at: LogicalTime(id + 1),
            outcome: Outcome {
                reward: -(predicted - value).abs(),
                value: Some(value),
                item: Some(ItemId(item)),
                ..Outcome::default()
            },
            trace,
        }
    }

    fn apply(m: &mut MemoryState, ops: Vec<PlannedOp>, t: u64) {
        for o in ops {
            m.apply(&o.op, LogicalTime(t)).unwrap();
        }
    }

    #[test]
    fn predict_memories_are_matured_ratings_and_q_follows_the_error() {
        let deps = PolicyDeps {
            embedder: Arc::new(TestEmbedder::new(64)),
            llm: Arc::new(LlmHub::offline()),
            seed: 3,
        };
        let mut p = build_spec(&PolicySpec::parse("memrl").unwrap(), &deps).unwrap();
        let (c, mut m) = (catalog(), MemoryState::new());
        // Nothing matured yet: no estimate (the arena's decider falls back).
        let r0 = p.recall(&ctx(&m, &c, 0), &predict(0, 0)).unwrap();
        assert_eq!(r0.context.estimate, None);
        let ops = p
            .feedback(&ctx(&m, &c, 1), &matured(0, 0, 5.0, 3.0, r0.trace))
            .unwrap();
        apply(&mut m, ops, 1);
        assert_eq!(m.len(), 1);
        let rec = m.iter_all().next().unwrap();
        assert_eq!(rec.fields.get(fields::VALUE).unwrap().as_f64(), Some(5.0));
        assert!((rec.utility - crate::utility::keys::Q_INIT.default.parse::<f64>().unwrap()).abs() < 1e-12);
        // The matured rating is recalled for a similar item and estimates it.
        let r1 = p.recall(&ctx(&m, &c, 2), &predict(2, 1)).unwrap();
        assert_eq!(r1.context.estimate, Some(5.0));
        assert_eq!(r1.trace.used.len(), 1);
        // Error 1 on the next label: Q <- (1 - 0.3)·0.5 + 0.3·(1 - 1/4).
        let ops = p
            .feedback(&ctx(&m, &c, 3), &matured(2, 1, 4.0, 5.0, r1.trace))
            .unwrap();
        apply(&mut m, ops, 3);
        let first = m
            .iter_all()
            .find(|r| r.fields.get(fields::TASK_ID).and_then(|v| v.as_str()) == Some("item:0"))
            .unwrap();
        assert!((first.utility - (0.7 * 0.5 + 0.3 * 0.75)).abs() < 1e-12);
        assert_eq!(m.len(), 2);
        // Q-weighted mean of 5 (Q 0.575) and 4 (Q 0.5).
        let r2 = p.recall(&ctx(&m, &c, 4), &predict(4, 2)).unwrap();
        let want = (0.575 * 5.0 + 0.5 * 4.0) / 1.075;
        assert!((r2.context.estimate.unwrap() - want).abs() < 1e-9);
    }
}
