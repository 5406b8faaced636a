//! Trajectory memories with learned utilities: what MemRL and RoMeRL share.
//!
//! Both families (see `romerl-reduced-order-utility-memory`, §3) store what
//! an agent did on a task as a memory `m_i` with a utility `Q_i`, retrieve by
//! semantic similarity plus utility, and after the task's reward `r` update
//! every retrieved memory with the exponential rule
//!
//! ```text
//! Q_i ← (1 − α) · Q_i + α · r        (α = 0.3, Q_init = 0.5)
//! ```
//!
//! They differ in what a new trajectory does: MemRL adds a memory (a pool
//! that grows with the history), RoMeRL replaces the representative of one
//! of four fixed per-task coordinates. This module holds the record layout
//! both write ([`fields`]), the utility update, the retrieval both use
//! ([`Retrieval`]: the similarity gate δ, ε-exploration and z-scored
//! scores, with the same keys and defaults for every trajectory policy, so
//! a comparison measures the designs' write and update rules and not their
//! retrieval), the one rule for memories whose action was nulled
//! ([`Actionless`], and under `replace` which trajectories may clean such
//! a memory: [`ReplaceRule`]), and the reading of a record back into a
//! [`TrajectoryRecord`]. The arena reads the same fields
//! for its metrics (Cold-Q ratio, feedback density, memories per task,
//! point-biserial correlation of Q with provenance), so they are public.

use evomem_core::{
    Embedding, Episode, MemoryId, MemoryRecord, Namespace, PolicyError, RecordKind, TaskRequest,
};
use serde_json::{json, Value};

/// MemRL's published defaults for LifelongAgentBench DB tasks.
pub mod defaults {
    /// Quantile of the pairwise task-description cosine used as δ
    /// (the top 20%).
    pub const DELTA_QUANTILE: f64 = 0.8;
}

/// The keys MemRL and RoMeRL share, for their family rows.
pub mod keys {
    use crate::registry::{Key, KeyType};

    /// `k_ret`.
    pub const K_RET: Key = Key {
        name: "k_ret",
        ty: KeyType::Count,
        default: "10",
        doc: "memories retrieved per decision",
    };
    /// `alpha`.
    pub const ALPHA: Key = Key {
        name: "alpha",
        ty: KeyType::Number,
        default: "0.3",
        doc: "learning rate of Q <- (1-alpha)Q + alpha*r",
    };
    /// `q_init`.
    pub const Q_INIT: Key = Key {
        name: "q_init",
        ty: KeyType::Number,
        default: "0.5",
        doc: "utility of a new memory (RoMeRL: of a coordinate when first filled)",
    };
    /// `epsilon` (shared retrieval, [`super::Retrieval`]).
    pub const EPSILON: Key = Key {
        name: "epsilon",
        ty: KeyType::Number,
        default: "0.01",
        doc: "probability of a random retrieved set (the same for every trajectory policy)",
    };
    /// `delta` (shared retrieval).
    pub const DELTA: Key = Key {
        name: "delta",
        ty: KeyType::Text,
        default: "auto",
        doc: "similarity gate: a number, or auto (top-20% quantile of pairwise task cosines); -1 lets every memory through",
    };
    /// `score` (shared retrieval).
    pub const SCORE: Key = Key {
        name: "score",
        ty: KeyType::Choice(&["z", "raw"]),
        default: "z",
        doc: "z: similarity and Q z-scored over the candidates before weighting; raw: weighted as they are",
    };
    /// `actionless` (shared write rule).
    pub const ACTIONLESS: Key = Key {
        name: "actionless",
        ty: KeyType::Choice(&["keep", "replace"]),
        default: "keep",
        doc: "a memory whose action was nulled: keep it like any other, or let the task's next trajectory replace it (keeping its Q)",
    };
    /// `replace_rule` (shared write rule, [`super::ReplaceRule`]).
    pub const REPLACE_RULE: Key = Key {
        name: "replace_rule",
        ty: KeyType::Choice(&["same_polarity", "any"]),
        default: "same_polarity",
        doc: "with actionless=replace, which trajectory of the task cleans its oldest nulled memory: one of the same outcome (same_polarity, the default for every design, because the replacement inherits the memory's Q and a utility earned by successes must not pass to a failure) or any",
    };
}

/// Field names of a trajectory record (`RecordKind::UtilitySlot`).
pub mod fields {
    /// Stable task id (`db-17`, `bandit`).
    pub const TASK_ID: &str = "task_id";
    /// The committed answer (SQL); JSON null for a nulled (noisy) entry.
    pub const ANSWER: &str = "answer";
    /// The steps: `[{action, observation, ok}]`; empty for a nulled entry.
    pub const STEPS: &str = "steps";
    /// Outcome y of the trajectory (provenance: success- or failure-derived).
    pub const SUCCESS: &str = "success";
    /// Efficiency ℓ: steps taken.
    pub const LEN: &str = "len";
    /// Utility updates received by this memory (RoMeRL: by the coordinate).
    pub const UPDATES: &str = "updates";
    /// Updates with a positive reward.
    pub const POSITIVE: &str = "positive_updates";
    /// Updates since the current representative arrived (RoMeRL `n_post`).
    pub const N_POST: &str = "n_post";
    /// Task attributes (table name, columns) as a JSON object.
    pub const ATTRIBUTES: &str = "attributes";
    /// RoMeRL coordinate (`PCC`, `PAC`, `NCC`, `NAC`).
    pub const COORDINATE: &str = "coordinate";
    /// Normalised answer, used to tell trajectories apart.
    pub const SIGNATURE: &str = "signature";
    /// RoMeRL: the diagnostic evidence of a failure representative.
    pub const DIAGNOSTIC: &str = "diagnostic";
    /// Set by the arena's noise injection: the entry's action was nulled.
    pub const NOISY: &str = "noisy";
    /// `Predict` memories (the delayed rating stream): the matured value
    /// (a rating) the memory holds.
    pub const VALUE: &str = "rating";
}

/// Longest observation kept per step in a record (characters).
const MAX_OBSERVATION_CHARS: usize = 400;

/// A trajectory record read back from memory.
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryRecord {
    /// Record id.
    pub id: MemoryId,
    /// Task id.
    pub task_id: String,
    /// Utility Q.
    pub q: f64,
    /// Updates received.
    pub updates: u64,
    /// Updates since the representative arrived.
    pub n_post: u64,
    /// Outcome y.
    pub success: bool,
    /// Normalised answer.
    pub signature: String,
    /// Whether the record still carries an action (the arena's noise
    /// injection nulls it).
    pub has_action: bool,
    /// RoMeRL coordinate, if any.
    pub coordinate: Option<String>,
    /// Evidence count (record `evidence`).
    pub evidence: u32,
    /// RoMeRL diagnostic evidence.
    pub diagnostic: u64,
    /// Created at (logical time).
    pub created_at: u64,
}

impl TrajectoryRecord {
    /// Read `r`; `None` when it is not a trajectory record.
    pub fn read(r: &MemoryRecord) -> Option<Self> {
        if r.kind != RecordKind::UtilitySlot {
            return None;
        }
        let u = |k: &str| r.fields.get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Self {
            id: r.id.clone(),
            task_id: r.field_str(fields::TASK_ID)?.to_string(),
            q: r.utility,
            updates: u(fields::UPDATES),
            n_post: u(fields::N_POST),
            success: r
                .fields
                .get(fields::SUCCESS)
                .and_then(Value::as_bool)
                .unwrap_or(false),
            signature: r.field_str(fields::SIGNATURE).unwrap_or("").to_string(),
            has_action: r.field_str(fields::ANSWER).is_some(),
            coordinate: r.field_str(fields::COORDINATE).map(str::to_string),
            evidence: r.evidence,
            diagnostic: u(fields::DIAGNOSTIC),
            created_at: r.created_at.0,
        })
    }
}

/// The exponential utility update `Q ← (1 − α)Q + αr`.
pub fn q_update(q: f64, alpha: f64, reward: f64) -> f64 {
    (1.0 - alpha) * q + alpha * reward
}

/// z-scores of `xs` (mean 0, unit population deviation); all zeros when the
/// values do not vary.
pub fn z_scores(xs: &[f64]) -> Vec<f64> {
    if xs.is_empty() {
        return Vec::new();
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let sd = var.sqrt();
    if sd < 1e-12 {
        return vec![0.0; xs.len()];
    }
    xs.iter().map(|x| (x - mean) / sd).collect()
}

/// The `q`-quantile (0..=1, linear interpolation) of the pairwise cosines
/// between `vectors` (L2-normalised). `None` with fewer than two vectors.
/// With many vectors, the pairs are taken over the first `max_vectors`.
pub fn pairwise_cosine_quantile(vectors: &[Vec<f32>], q: f64, max_vectors: usize) -> Option<f64> {
    let vs = &vectors[..vectors.len().min(max_vectors)];
    if vs.len() < 2 {
        return None;
    }
    let mut sims = Vec::with_capacity(vs.len() * (vs.len() - 1) / 2);
    for i in 0..vs.len() {
        for j in i + 1..vs.len() {
            sims.push(f64::from(evomem_core::dot(&vs[i], &vs[j])));
        }
    }
    sims.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (sims.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    Some(sims[lo] * (1.0 - frac) + sims[hi] * frac)
}

/// Normalise an answer for telling trajectories apart: lower case, single
/// spaces, no trailing `;`.
pub fn signature(answer: Option<&str>) -> String {
    answer
        .map(|a| {
            a.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .trim_end_matches(';')
                .trim()
                .to_lowercase()
        })
        .unwrap_or_default()
}

/// Diagnostic evidence of a failed episode: the distinct error messages it
/// met plus the statements that ran but returned nothing. A failure that
/// shows *why* it failed is worth more to a later attempt than a silent one.
pub fn diagnostic_evidence(e: &Episode) -> u64 {
    let mut errors: Vec<&str> = e
        .steps
        .iter()
        .filter(|s| !s.ok)
        .map(|s| s.observation.as_str())
        .collect();
    errors.sort_unstable();
    errors.dedup();
    let empty = e
        .steps
        .iter()
        .filter(|s| s.ok && (s.observation == "[]" || s.observation.contains("0 rows")))
        .count();
    (errors.len() + empty) as u64
}

/// The text a record is titled by and embedded from: the task text.
pub fn title(task: &TaskRequest) -> &str {
    &task.text
}

/// A new trajectory record for `episode` with outcome `success`, utility
/// `q`, in `ns`, embedded with `embedding`.
pub fn trajectory_record(
    id: MemoryId,
    ns: Namespace,
    episode: &Episode,
    success: bool,
    q: f64,
    embedding: Embedding,
    at: evomem_core::LogicalTime,
) -> MemoryRecord {
    let steps: Vec<Value> = episode
        .steps
        .iter()
        .map(|s| {
            let obs: String = s.observation.chars().take(MAX_OBSERVATION_CHARS).collect();
            json!({"action": s.action, "observation": obs, "ok": s.ok})
        })
        .collect();
    let mut r = MemoryRecord::new(id, ns, RecordKind::UtilitySlot, title(&episode.task), at)
        .with_field(fields::TASK_ID, json!(episode.task.id))
        .with_field(fields::ANSWER, json!(episode.answer))
        .with_field(fields::STEPS, Value::Array(steps))
        .with_field(fields::SUCCESS, json!(success))
        .with_field(fields::LEN, json!(episode.len()))
        .with_field(fields::UPDATES, json!(0))
        .with_field(fields::POSITIVE, json!(0))
        .with_field(fields::N_POST, json!(0))
        .with_field(
            fields::SIGNATURE,
            json!(signature(episode.answer.as_deref())),
        )
        .with_field(fields::ATTRIBUTES, json!(episode.task.attributes))
        .with_embedding(embedding);
    r.utility = q;
    r
}

/// The episode carried by a feedback, or a config error naming the policy:
/// trajectory policies can only learn from `Act` decisions.
pub fn episode_of<'a>(
    policy: &str,
    fb: &'a evomem_core::Feedback,
) -> Result<Option<&'a Episode>, PolicyError> {
    if fb.outcome.success.is_none() && fb.outcome.episode.is_some() {
        return Err(PolicyError::Config(format!(
            "{policy}: an episode's outcome must carry a success bit"
        )));
    }
    Ok(fb.outcome.episode.as_ref())
}

/// One line per memory for an LLM decider's context.
pub fn context_text(r: &MemoryRecord) -> String {
    let outcome = match r.fields.get(fields::SUCCESS).and_then(Value::as_bool) {
        Some(true) => "success",
        _ => "failure",
    };
    let answer = r.field_str(fields::ANSWER).unwrap_or("(none)");
    format!(
        "Task: {}\nOutcome: {outcome}\nAnswer: {answer}\nQ: {:.3}",
        r.text, r.utility
    )
}

/// The machinery MemRL and RoMeRL share: the task of a query, embeddings,
/// the namespace, the candidate records, the utility updates after a
/// reward, and the `Recall` built from a ranking.
pub struct UtilityCore {
    /// Family name, for errors.
    pub policy: &'static str,
    /// Embedder of task texts.
    pub embedder: std::sync::Arc<dyn evomem_core::Embedder>,
    /// Per-run embedding cache.
    pub cache: evomem_kit::EmbeddingCache,
    /// Learning rate α.
    pub alpha: f64,
    /// Initial utility.
    pub q_init: f64,
    /// Memories retrieved per decision.
    pub k_ret: usize,
    /// Run seed.
    pub seed: u64,
    /// Decisions served so far.
    pub decisions: u64,
    /// Utility updates applied so far.
    pub updates: u64,
    /// Memories written so far.
    pub written: u64,
}

impl UtilityCore {
    /// The task of an `Act` decision, or `Unsupported`.
    pub fn task_of<'q>(
        &self,
        q: &'q evomem_core::DecisionQuery,
    ) -> Result<&'q TaskRequest, PolicyError> {
        match &q.kind {
            evomem_core::DecisionKind::Act { task } => Ok(task),
            other => Err(PolicyError::Unsupported {
                policy: self.policy.to_string(),
                decision: other.tag(),
            }),
        }
    }

    /// Embedding of `text` (cached).
    pub fn embed(&mut self, text: &str) -> Result<Vec<f32>, PolicyError> {
        Ok(self.cache.embed(self.embedder.as_ref(), text)?)
    }

    /// The record embedding for `text`.
    pub fn embedding(&mut self, text: &str) -> Result<Embedding, PolicyError> {
        Ok(Embedding {
            model: self.embedder.model_id().to_string(),
            vector: self.embed(text)?,
        })
    }

    /// The agent's namespace (one per user).
    pub fn namespace(
        ctx: &evomem_core::PolicyCtx<'_>,
        user: Option<evomem_core::UserId>,
    ) -> Namespace {
        match user {
            Some(u) => Namespace::user(&ctx.user_token(u)),
            None => Namespace::user("agent"),
        }
    }

    /// The task of an `Act` decision and its embedding; counts the decision.
    pub fn query(
        &mut self,
        q: &evomem_core::DecisionQuery,
    ) -> Result<(TaskRequest, Vec<f32>), PolicyError> {
        let task = self.task_of(q)?.clone();
        let qv = self.embed(&task.text)?;
        self.decisions += 1;
        Ok((task, qv))
    }

    /// Every trajectory record in `ns` with its cosine to `qv` (`None` for
    /// a record without an embedding), in id order. Reads each record's
    /// vector in place: this runs over the whole pool on every decision.
    pub fn similar<'m>(
        ctx: &evomem_core::PolicyCtx<'m>,
        ns: &'m [Namespace],
        qv: &[f32],
    ) -> Vec<(&'m MemoryRecord, TrajectoryRecord, Option<f64>)> {
        Self::candidates(ctx, ns)
            .into_iter()
            .map(|(r, t)| {
                let sim = r
                    .embedding
                    .as_ref()
                    .map(|e| f64::from(evomem_core::dot(qv, &e.vector)));
                (r, t, sim)
            })
            .collect()
    }

    /// Best first (ties by record id), cut to `k_ret`.
    pub fn top_k(&self, scored: &mut Vec<(&MemoryRecord, f64)>) {
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
        scored.truncate(self.k_ret);
    }

    /// Every trajectory record in `ns`, in id order.
    pub fn candidates<'m>(
        ctx: &evomem_core::PolicyCtx<'m>,
        ns: &'m [Namespace],
    ) -> Vec<(&'m MemoryRecord, TrajectoryRecord)> {
        ctx.memory
            .scan_kind(ns, &RecordKind::UtilitySlot)
            .filter_map(|r| TrajectoryRecord::read(r).map(|t| (r, t)))
            .collect()
    }

    /// The utility updates for a feedback: every retrieved memory that still
    /// exists gets `Q ← (1 − α)Q + αr`, one more update, one more positive
    /// update when `r > 0`, and one more `n_post`.
    pub fn update_ops(
        &mut self,
        ctx: &evomem_core::PolicyCtx<'_>,
        fb: &evomem_core::Feedback,
    ) -> Vec<evomem_core::PlannedOp> {
        use evomem_core::{MemoryOp, PlannedOp};
        let r = fb.outcome.reward;
        let mut ops = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for used in &fb.trace.used {
            if !seen.insert(used.id.clone()) {
                continue;
            }
            let Some(rec) = ctx.memory.get(&used.id) else {
                continue;
            };
            let Some(t) = TrajectoryRecord::read(rec) else {
                continue;
            };
            let positive = rec
                .fields
                .get(fields::POSITIVE)
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let q = q_update(t.q, self.alpha, r);
            ops.push(PlannedOp::new(
                MemoryOp::SetUtility {
                    id: t.id.clone(),
                    value: q,
                },
                "q_update",
                format!("Q {:.3} -> {q:.3} after reward {r}", t.q),
            ));
            let fields = [
                (fields::UPDATES.to_string(), json!(t.updates + 1)),
                (fields::N_POST.to_string(), json!(t.n_post + 1)),
                (
                    fields::POSITIVE.to_string(),
                    json!(positive + u64::from(r > 0.0)),
                ),
            ]
            .into_iter()
            .collect();
            ops.push(PlannedOp::new(
                MemoryOp::UpdateFields {
                    id: t.id,
                    fields,
                    text: None,
                    embedding: None,
                },
                "q_update",
                "update counts",
            ));
            self.updates += 1;
        }
        ops
    }

    /// The `Recall` for `ranked` (record, score), best first.
    pub fn recall(
        q: &evomem_core::DecisionQuery,
        ranked: &[(&MemoryRecord, f64)],
    ) -> evomem_core::Recall {
        use evomem_core::{ContextEntry, DecisionContext, Recall, UsageTrace, UsedMemory};
        let mut trace = UsageTrace::for_query(q);
        let mut entries = Vec::with_capacity(ranked.len());
        for (r, s) in ranked {
            trace.used.push(UsedMemory {
                id: r.id.clone(),
                weight: *s as f32,
            });
            entries.push(ContextEntry {
                memory: Some(r.id.clone()),
                item: None,
                text: context_text(r),
                weight: *s as f32,
                embedding: None,
                path: None,
            });
        }
        Recall {
            context: DecisionContext {
                entries,
                ..DecisionContext::default()
            },
            trace,
        }
    }

    /// A deterministic draw in `[0, 1)` for decision `id` (exploration).
    pub fn draw(&self, id: u64, salt: u64) -> f64 {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
            self.seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt,
        );
        rng.gen::<f64>()
    }
}

/// Most distinct task embeddings kept for the online δ estimate.
pub const DELTA_SAMPLE: usize = 600;

/// The similarity gate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Delta {
    /// Estimated from the tasks seen so far.
    Auto,
    /// Fixed.
    Fixed(f64),
}

impl Delta {
    fn parse(policy: &str, spec: &crate::registry::PolicySpec) -> Result<Self, PolicyError> {
        let v: String = spec.value("delta")?;
        if v == "auto" {
            return Ok(Delta::Auto);
        }
        v.parse::<f64>()
            .ok()
            .filter(|d| d.is_finite())
            .map(Delta::Fixed)
            .ok_or_else(|| {
                PolicyError::Config(format!(
                    "{policy}: `delta` must be `auto` or a number, got `{v}`"
                ))
            })
    }
}

/// What a policy does with a memory whose action was nulled (the arena's
/// noise injection leaves such entries: title and embedding kept, action
/// and trajectory gone). One rule for every trajectory policy (key
/// `actionless`), so the noise comparison measures the update rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actionless {
    /// Treated like any other memory (the default).
    Keep,
    /// The task's next trajectory that [`ReplaceRule`] admits cleans it
    /// (MemRL: writes over it in place of adding a memory, inheriting its
    /// Q; RoMeRL: the coordinate counts as empty, or the entry is dropped
    /// when the trajectory belongs to the other polarity).
    Replace,
}

/// Under `actionless=replace`, which new trajectory of a task cleans the
/// task's oldest nulled memory (key `replace_rule`, the same values and
/// default for every trajectory policy). *Cleaning* is what both designs
/// do to that memory: MemRL writes the trajectory over it (same id, its Q
/// kept); RoMeRL counts its coordinate as empty when the trajectory is of
/// the coordinate's polarity (the trajectory fills it, keeping the
/// coordinate's Q) and otherwise drops it. Either way the nulled entry is
/// gone after one episode that the rule admits, and at most one nulled
/// entry is cleaned per episode ([`nulled_to_clean`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceRule {
    /// Only a trajectory with the nulled memory's outcome y (the default:
    /// the replacement inherits the memory's Q, and a utility earned on
    /// one polarity must not pass to the other). RoMeRL's published rule.
    SamePolarity,
    /// Any trajectory of the task (MemRL's rule before the key existed).
    Any,
}

impl ReplaceRule {
    /// The key's value (`same_polarity`, `any`).
    pub fn name(self) -> &'static str {
        match self {
            ReplaceRule::SamePolarity => "same_polarity",
            ReplaceRule::Any => "any",
        }
    }

    /// Whether a trajectory with outcome `success` may clean `nulled`.
    pub fn admits(self, nulled: &TrajectoryRecord, success: bool) -> bool {
        match self {
            ReplaceRule::SamePolarity => nulled.success == success,
            ReplaceRule::Any => true,
        }
    }
}

/// The memory an episode of `task_id` with outcome `success` cleans under
/// `rule`: the oldest (creation time, then id) of `cands` that belongs to
/// the task, has no action and is admitted by the rule. `None` when there
/// is none. The one definition both designs clean by.
pub fn nulled_to_clean<'a, 'm>(
    cands: &'a [(&'m MemoryRecord, TrajectoryRecord)],
    task_id: &str,
    success: bool,
    rule: ReplaceRule,
) -> Option<&'a (&'m MemoryRecord, TrajectoryRecord)> {
    cands
        .iter()
        .filter(|(_, t)| t.task_id == task_id && !t.has_action && rule.admits(t, success))
        .min_by(|a, b| (a.1.created_at, &a.1.id).cmp(&(b.1.created_at, &b.1.id)))
}

/// The retrieval settings MemRL and RoMeRL share (keys `delta`, `epsilon`,
/// `score`, `actionless`, `replace_rule`; [`keys`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retrieval {
    /// Candidates need cosine ≥ δ.
    pub delta: Delta,
    /// Probability of a random retrieved set.
    pub epsilon: f64,
    /// Whether similarity and Q are z-scored over the candidates.
    pub z_scored: bool,
    /// The rule for nulled memories.
    pub actionless: Actionless,
    /// Under `actionless=replace`: which trajectories clean one.
    pub replace_rule: ReplaceRule,
}

impl Retrieval {
    /// Read the shared keys of `spec` (defaults, in [`keys`]: MemRL's
    /// published δ and ε, z-scored scores, `actionless=keep`,
    /// `replace_rule=same_polarity`).
    pub fn from_spec(
        policy: &str,
        spec: &crate::registry::PolicySpec,
    ) -> Result<Self, PolicyError> {
        let epsilon: f64 = spec.value("epsilon")?;
        if !(0.0..=1.0).contains(&epsilon) {
            return Err(PolicyError::Config(format!(
                "{policy}: need epsilon in [0, 1], got {epsilon}"
            )));
        }
        let z_scored = match spec.value::<String>("score")?.as_str() {
            "z" => true,
            "raw" => false,
            v => {
                return Err(PolicyError::Config(format!(
                    "{policy}: `score` must be `z` or `raw`, got `{v}`"
                )))
            }
        };
        let actionless = match spec.value::<String>("actionless")?.as_str() {
            "keep" => Actionless::Keep,
            "replace" => Actionless::Replace,
            v => {
                return Err(PolicyError::Config(format!(
                    "{policy}: `actionless` must be `keep` or `replace`, got `{v}`"
                )))
            }
        };
        let replace_rule = match spec.value::<String>("replace_rule")?.as_str() {
            "same_polarity" => ReplaceRule::SamePolarity,
            "any" => ReplaceRule::Any,
            v => {
                return Err(PolicyError::Config(format!(
                    "{policy}: `replace_rule` must be `same_polarity` or `any`, got `{v}`"
                )))
            }
        };
        Ok(Self {
            delta: Delta::parse(policy, spec)?,
            epsilon,
            z_scored,
            actionless,
            replace_rule,
        })
    }
}

/// A candidate memory: the record, its trajectory fields and its cosine.
pub type Candidate<'m> = (&'m MemoryRecord, TrajectoryRecord, f64);

/// The shared retrieval's state: the task sample δ is estimated over and
/// the number of exploratory draws.
#[derive(Debug, Clone)]
pub struct Retriever {
    /// Settings.
    pub cfg: Retrieval,
    /// Distinct task embeddings seen (for `delta=auto`), by task id.
    seen: std::collections::BTreeMap<String, Vec<f32>>,
    /// Decisions whose retrieved set was drawn at random.
    pub explored: u64,
    /// `delta=auto`: δ and the number of noted embeddings it was computed
    /// over. δ depends only on the noted set, which only grows (to
    /// [`DELTA_SAMPLE`]), so it is recomputed only when that changes, not
    /// on every decision (the quantile costs O(noted²) dot products).
    auto_delta: std::cell::Cell<Option<(usize, f64)>>,
}

impl Retriever {
    /// A retriever with nothing seen.
    pub fn new(cfg: Retrieval) -> Self {
        Self {
            cfg,
            seen: std::collections::BTreeMap::new(),
            explored: 0,
            auto_delta: std::cell::Cell::new(None),
        }
    }

    /// Remember a task (or item) embedding for the δ estimate.
    pub fn note(&mut self, key: String, v: &[f32]) {
        if self.seen.len() < DELTA_SAMPLE {
            self.seen.entry(key).or_insert_with(|| v.to_vec());
        }
    }

    /// Distinct embeddings noted so far.
    pub fn noted(&self) -> usize {
        self.seen.len()
    }

    /// The current δ (−∞ while `auto` has fewer than two tasks).
    pub fn delta(&self) -> f64 {
        match self.cfg.delta {
            Delta::Fixed(d) => d,
            Delta::Auto => match self.auto_delta.get() {
                Some((n, d)) if n == self.seen.len() => d,
                _ => {
                    let vs: Vec<Vec<f32>> = self.seen.values().cloned().collect();
                    let d = pairwise_cosine_quantile(&vs, defaults::DELTA_QUANTILE, DELTA_SAMPLE)
                        .unwrap_or(f64::NEG_INFINITY);
                    self.auto_delta.set(Some((self.seen.len(), d)));
                    d
                }
            },
        }
    }

    /// The records of `similar` that pass the gate `delta` (records
    /// without an embedding never do).
    pub fn gate<'m>(
        similar: Vec<(&'m MemoryRecord, TrajectoryRecord, Option<f64>)>,
        delta: f64,
    ) -> Vec<Candidate<'m>> {
        similar
            .into_iter()
            .filter_map(|(r, t, sim)| sim.filter(|s| *s >= delta).map(|s| (r, t, s)))
            .collect()
    }

    /// Score `cands` `(1 − ω_Q)·s + ω_Q·u (+ bonus)`, where s and u are the
    /// similarity and Q (z-scored over the candidates unless `score=raw`),
    /// then the top `k_ret`, or with probability ε a random set (a seeded
    /// draw per decision).
    pub fn rank<'m>(
        &mut self,
        core: &UtilityCore,
        q: &evomem_core::DecisionQuery,
        cands: &[Candidate<'m>],
        omega_q: f64,
        bonus: impl Fn(&TrajectoryRecord) -> f64,
    ) -> Vec<(&'m MemoryRecord, f64)> {
        let sims: Vec<f64> = cands.iter().map(|c| c.2).collect();
        let qs: Vec<f64> = cands.iter().map(|c| c.1.q).collect();
        let (zs, zq) = if self.cfg.z_scored {
            (z_scores(&sims), z_scores(&qs))
        } else {
            (sims, qs)
        };
        let mut scored: Vec<(&MemoryRecord, f64)> = cands
            .iter()
            .enumerate()
            .map(|(i, (r, t, _))| (*r, (1.0 - omega_q) * zs[i] + omega_q * zq[i] + bonus(t)))
            .collect();
        if core.draw(q.decision_id, 0x006d_656d_726c) < self.cfg.epsilon {
            // Exploration: a random set, ordered by a seeded key.
            self.explored += 1;
            let mut keyed: Vec<(f64, usize)> = (0..scored.len())
                .map(|i| (core.draw(q.decision_id, i as u64 + 1), i))
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            scored = keyed.into_iter().map(|(_, i)| scored[i]).collect();
            scored.truncate(core.k_ret);
        } else {
            core.top_k(&mut scored);
        }
        scored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_update_follows_the_exponential_rule() {
        let q = q_update(0.5, 0.3, 1.0);
        assert!((q - 0.65).abs() < 1e-12);
        let q = q_update(q, 0.3, 0.0);
        assert!((q - 0.455).abs() < 1e-12);
    }

    #[test]
    fn z_scores_are_centred_and_scaled() {
        let z = z_scores(&[1.0, 2.0, 3.0]);
        assert!((z.iter().sum::<f64>()).abs() < 1e-12);
        assert!((z[2] - 1.224_744_871).abs() < 1e-6);
        assert_eq!(z_scores(&[4.0, 4.0]), vec![0.0, 0.0]);
    }

    #[test]
    fn quantile_of_pairwise_cosines() {
        let v = |x: f32, y: f32| {
            let n = (x * x + y * y).sqrt();
            vec![x / n, y / n]
        };
        let vs = vec![v(1.0, 0.0), v(0.0, 1.0), v(1.0, 1.0)];
        // pairs: 0, 0.7071, 0.7071 -> max is 0.7071, min 0
        let top = pairwise_cosine_quantile(&vs, 1.0, 100).unwrap_or(f64::NAN);
        assert!((top - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-5);
        let bottom = pairwise_cosine_quantile(&vs, 0.0, 100).unwrap_or(f64::NAN);
        assert!(bottom.abs() < 1e-6);
        assert_eq!(pairwise_cosine_quantile(&vs[..1], 0.8, 100), None);
    }

    /// The cached δ follows the noted set: after each new task it equals a
    /// fresh quantile over everything noted.
    #[test]
    fn auto_delta_is_recomputed_when_a_task_is_noted() {
        let cfg = Retrieval {
            delta: Delta::Auto,
            epsilon: 0.0,
            z_scored: true,
            actionless: Actionless::Keep,
            replace_rule: ReplaceRule::SamePolarity,
        };
        let mut r = Retriever::new(cfg);
        assert_eq!(r.delta(), f64::NEG_INFINITY);
        let v = |x: f32, y: f32| {
            let n = (x * x + y * y).sqrt();
            vec![x / n, y / n]
        };
        let vs = [v(1.0, 0.0), v(1.0, 1.0), v(0.0, 1.0), v(1.0, 3.0)];
        for (i, x) in vs.iter().enumerate() {
            r.note(format!("t{i}"), x);
            r.note(format!("t{i}"), x); // a task seen again changes nothing
            let fresh = pairwise_cosine_quantile(&vs[..=i], defaults::DELTA_QUANTILE, DELTA_SAMPLE)
                .unwrap_or(f64::NEG_INFINITY);
            assert_eq!(r.delta(), fresh, "after {} tasks", i + 1);
            assert_eq!(r.delta(), fresh, "cached");
        }
    }

    #[test]
    fn signature_ignores_case_spacing_and_semicolon() {
        assert_eq!(
            signature(Some("SELECT  a FROM t;")),
            signature(Some("select a from t"))
        );
        assert_eq!(signature(None), "");
    }
}
