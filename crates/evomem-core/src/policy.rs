//! The `Policy` trait: the one loop shared by MARS, AtomRec, RoMeRL, MemRL,
//! TIDE and the baselines.
//!
//! ```text
//! event   --observe-->  policy --ops--> engine (apply + log + persist)
//! query   --recall--->  policy --context + usage trace--> decider
//! outcome --feedback->  policy --ops--> engine      (maybe long after)
//! clock   --maintain->  policy --ops--> engine      (schedulers, governance)
//! ```
//!
//! A policy reads memory through [`PolicyCtx::memory`] and never writes it:
//! it returns [`PlannedOp`]s that the engine validates, applies and logs.
//! Policies may keep *derived* state (caches, vector indexes, trained model
//! weights for baselines) as long as it is rebuilt from what they have seen.

use crate::data::{Catalog, Interaction, User};
use crate::error::PolicyError;
use crate::ids::{ItemId, LogicalTime, MemoryId, UserId};
use crate::op::PlannedOp;
use crate::state::MemoryState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a policy may read during a call.
#[derive(Debug, Clone, Copy)]
pub struct PolicyCtx<'a> {
    /// Memory as of now (all ops applied so far).
    pub memory: &'a MemoryState,
    /// The item catalog (metadata is not time-dependent).
    pub catalog: &'a Catalog,
    /// Users (attributes only; no histories).
    pub users: &'a [User],
    /// Current logical time. During `observe(e)` it is `e.time`; during
    /// `recall(q)` it is `q.at`.
    pub now: LogicalTime,
}

impl PolicyCtx<'_> {
    /// The token of `user` (its id in the source data), or its dense index
    /// when the user table does not list it. Namespaces are keyed by it.
    pub fn user_token(&self, user: UserId) -> String {
        self.users
            .get(user.index())
            .map(|u| u.token.clone())
            .unwrap_or_else(|| user.0.to_string())
    }
}

/// A decision to support: `kind` says what the decider must do (rank
/// candidates, act on a task, predict a value, generate for a request) for
/// `user` at time `at`.
///
/// Every arena goes through this one query type and the one [`Policy`] trait:
/// the ranking arena asks [`DecisionKind::Rank`], the lifelong-task arena
/// (RoMeRL, MemRL) [`DecisionKind::Act`], the delayed rating stream (TIDE)
/// [`DecisionKind::Predict`] and the generation simulator (TIDE)
/// [`DecisionKind::Generate`]. A policy that cannot serve a kind answers
/// [`PolicyError::Unsupported`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionQuery {
    /// Unique per run.
    pub decision_id: u64,
    /// For whom.
    pub user: UserId,
    /// Decision time: memory reflects exactly the interactions with time `< at`.
    pub at: LogicalTime,
    /// Optional natural-language instruction.
    pub instruction: Option<String>,
    /// What is to be decided.
    pub kind: DecisionKind,
}

impl DecisionQuery {
    /// A ranking decision over `candidates` (target and negatives, shuffled).
    pub fn rank(decision_id: u64, user: UserId, at: LogicalTime, candidates: Vec<ItemId>) -> Self {
        Self {
            decision_id,
            user,
            at,
            instruction: None,
            kind: DecisionKind::Rank { candidates },
        }
    }

    /// Builder: set the instruction.
    pub fn with_instruction(mut self, instruction: Option<String>) -> Self {
        self.instruction = instruction;
        self
    }

    /// The candidates of a ranking decision; empty for every other kind.
    pub fn candidates(&self) -> &[ItemId] {
        match &self.kind {
            DecisionKind::Rank { candidates } => candidates,
            DecisionKind::Act { .. }
            | DecisionKind::Predict { .. }
            | DecisionKind::Generate { .. } => &[],
        }
    }

    /// The kind's tag.
    pub fn tag(&self) -> DecisionTag {
        self.kind.tag()
    }
}

/// What a decision asks of the decider. Each arena uses one kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DecisionKind {
    /// Rank `candidates` (ranking arena: MARS, AtomRec, baselines).
    Rank {
        /// Candidates to rank (target and negatives, shuffled).
        candidates: Vec<ItemId>,
    },
    /// Act on a task: the decider (an agent) runs actions against an
    /// environment and is judged afterwards (lifelong-task arena: RoMeRL,
    /// MemRL, the bandit and the DB tasks).
    Act {
        /// The task.
        task: TaskRequest,
    },
    /// Predict a scalar for `item` (delayed-feedback rating stream: the
    /// decider predicts the rating before it is revealed).
    Predict {
        /// The item whose value is predicted.
        item: ItemId,
    },
    /// Generate content for a request (TIDE's generation arena: a frozen
    /// generator composes a material from retrieved guidelines).
    Generate {
        /// The request.
        request: TaskRequest,
    },
}

impl DecisionKind {
    /// The kind's tag.
    pub fn tag(&self) -> DecisionTag {
        match self {
            DecisionKind::Rank { .. } => DecisionTag::Rank,
            DecisionKind::Act { .. } => DecisionTag::Act,
            DecisionKind::Predict { .. } => DecisionTag::Predict,
            DecisionKind::Generate { .. } => DecisionTag::Generate,
        }
    }
}

/// The kinds of decision, without their payload: what a policy family
/// declares it can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionTag {
    /// [`DecisionKind::Rank`].
    Rank,
    /// [`DecisionKind::Act`].
    Act,
    /// [`DecisionKind::Predict`].
    Predict,
    /// [`DecisionKind::Generate`].
    Generate,
}

impl DecisionTag {
    /// Every tag, in declaration order.
    pub const ALL: [DecisionTag; 4] = [
        DecisionTag::Rank,
        DecisionTag::Act,
        DecisionTag::Predict,
        DecisionTag::Generate,
    ];

    /// Lower-case name (`rank`, `act`, `predict`, `generate`).
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionTag::Rank => "rank",
            DecisionTag::Act => "act",
            DecisionTag::Predict => "predict",
            DecisionTag::Generate => "generate",
        }
    }
}

impl std::fmt::Display for DecisionTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task to act on, or a request to generate for: an id that recurs across
/// epochs (the same task seen again), its text, and typed attributes (a DB
/// task's table, a generation request's product, audience, channel and
/// placement).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskRequest {
    /// Stable id of the task (or request template).
    pub id: String,
    /// The instruction or request text.
    pub text: String,
    /// Attributes, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// An evidence path: how a retrieval reached a memory, hop by hop (AtomRec's
/// multi-hop expansion). Kept as data so that reports and `evomem explain`
/// never parse rendered text back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvidencePath {
    /// Records along the path, from the seed to the reached record.
    pub nodes: Vec<MemoryId>,
    /// Relation of each hop (`nodes.len() - 1` entries).
    pub relations: Vec<String>,
    /// The path's score.
    pub score: f32,
}

impl EvidencePath {
    /// Number of hops.
    pub fn hops(&self) -> usize {
        self.nodes.len().saturating_sub(1)
    }
}

/// One piece of context handed to the decider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextEntry {
    /// The memory record it came from, if any.
    pub memory: Option<MemoryId>,
    /// The item it is about, if any.
    pub item: Option<ItemId>,
    /// Text for an LLM decider.
    pub text: String,
    /// Signed weight: positive means "more like this", negative "less".
    pub weight: f32,
    /// Embedding for an offline decider, if the policy has one.
    pub embedding: Option<Vec<f32>>,
    /// How the entry was reached, when a policy expands along links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<EvidencePath>,
}

/// What memory holds about one candidate item (AtomRec's item memory M_i:
/// the item atom's fields and its links), shown to a decider next to the
/// candidate's catalog text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemMemory {
    /// The candidate.
    pub item: ItemId,
    /// Text for an LLM decider.
    pub text: String,
}

/// Everything a decider gets from memory for one decision.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DecisionContext {
    /// Synthesized profile text (MARS) or summary.
    pub profile: Option<String>,
    /// Events, chunks, atoms, evidence paths, ...
    pub entries: Vec<ContextEntry>,
    /// Policy-native candidate scores, aligned with [`DecisionQuery::candidates`]
    /// (higher is better). Baselines such as BPR and policies with their own
    /// documented offline ranker fill this in; the offline rank role uses it.
    pub scores: Option<Vec<f64>>,
    /// A policy-native point estimate for a [`DecisionKind::Predict`]
    /// decision (e.g. a rating on the dataset's scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<f64>,
    /// Memory about candidate items, at most one per candidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_memory: Vec<ItemMemory>,
}

impl DecisionContext {
    /// True when the context carries no memory at all.
    pub fn is_empty(&self) -> bool {
        self.profile.is_none()
            && self.entries.is_empty()
            && self.item_memory.is_empty()
            && self.scores.is_none()
            && self.estimate.is_none()
    }
}

/// One memory that went into a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsedMemory {
    /// Record id.
    pub id: MemoryId,
    /// How much it contributed (retrieval score, attention, ...).
    pub weight: f32,
}

/// Which memories went into a decision; returned with the outcome as feedback
/// so that credit can be assigned (RoMeRL/MemRL Q updates, TIDE responsibility).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTrace {
    /// Decision.
    pub decision_id: u64,
    /// For whom.
    pub user: Option<UserId>,
    /// When.
    pub at: LogicalTime,
    /// Memories used, in retrieval order.
    pub used: Vec<UsedMemory>,
}

impl UsageTrace {
    /// An empty trace for `query`: same decision, user and time, nothing used yet.
    pub fn for_query(query: &DecisionQuery) -> Self {
        Self {
            decision_id: query.decision_id,
            user: Some(query.user),
            at: query.at,
            used: Vec::new(),
        }
    }
}

/// What `recall` returns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recall {
    /// Context for the decider.
    pub context: DecisionContext,
    /// Usage trace.
    pub trace: UsageTrace,
}

/// The outcome of a decision, possibly multi-objective.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Scalar reward / utility.
    pub reward: f64,
    /// Binary success where the task has one.
    pub success: Option<bool>,
    /// Named objectives (clicks, dwell, rating error, ...).
    pub objectives: BTreeMap<String, f64>,
    /// The item actually chosen / consumed, if known.
    pub item: Option<ItemId>,
    /// The observed value of a [`DecisionKind::Predict`] decision (e.g. the
    /// revealed rating).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Lifecycle stage of a partial outcome (exposure, click, conversion)
    /// when feedback arrives in stages; `None` for a final outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// What the agent did on an [`DecisionKind::Act`] decision: its actions
    /// and what the environment answered. Trajectory memories (MemRL,
    /// RoMeRL) are built from it. It never carries the ground truth: the
    /// judge's verdict arrives only as `success` and `reward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<Episode>,
}

/// One step of an episode: an action and the environment's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EpisodeStep {
    /// The action (a SQL statement, a bandit arm, ...).
    pub action: String,
    /// What the environment answered (rows, an error message, a reward).
    pub observation: String,
    /// False when the environment rejected the action (a SQL error).
    pub ok: bool,
}

/// What an agent did on one task: its steps and the answer it committed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// The task.
    pub task: TaskRequest,
    /// Steps in order.
    pub steps: Vec<EpisodeStep>,
    /// The committed answer (the action whose result was submitted), if any.
    pub answer: Option<String>,
}

impl Episode {
    /// Efficiency ℓ: the number of steps taken.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// True when no step was taken.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// An outcome arriving for an earlier decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feedback {
    /// The decision.
    pub decision_id: u64,
    /// For whom.
    pub user: Option<UserId>,
    /// When the decision was made.
    pub decided_at: LogicalTime,
    /// When the outcome became visible (`>= decided_at`).
    pub observed_at: LogicalTime,
    /// What happened.
    pub outcome: Outcome,
    /// What memory was used.
    pub trace: UsageTrace,
}

/// Why `maintain` is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MaintainTrigger {
    /// Periodic clock tick during a replay.
    Tick,
    /// All visible history has been observed and decisions are about to start
    /// (retrospective protocol); baselines train here.
    BeforeDecisions,
    /// The stream ended.
    EndOfStream,
}

/// A memory policy. See the module docs for the loop.
///
/// Invariants: ops are returned in application order; a policy never reads an
/// interaction it has not been shown through `observe`.
pub trait Policy: Send {
    /// Policy name as used on the command line.
    fn name(&self) -> &str;

    /// A new interaction arrived. Policies that learn only from feedback
    /// (trajectory memories) keep the default: nothing to do.
    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        _event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        Ok(Vec::new())
    }

    /// Build the context for a decision, and say which memories it used.
    fn recall(&mut self, ctx: &PolicyCtx<'_>, query: &DecisionQuery)
        -> Result<Recall, PolicyError>;

    /// A hint: these decisions come next, in this order, and memory will
    /// not change before the first of them (the retrospective protocol's
    /// decisions, after its build pass). A policy may batch work across them
    /// (AtomRec scores every decision's seed query against its memory in one
    /// pass); `recall` must return exactly what it returns without the hint,
    /// and anything prepared is void once memory changes (`observe`,
    /// `feedback`, `maintain`). Default: nothing to prepare.
    fn prepare_recalls(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        _queries: &[DecisionQuery],
    ) -> Result<(), PolicyError> {
        Ok(())
    }

    /// An outcome arrived for an earlier decision.
    fn feedback(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        _feedback: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        Ok(Vec::new())
    }

    /// Scheduled work.
    fn maintain(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        _trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        Ok(Vec::new())
    }

    /// Policy-specific statistics for `metrics.json` and the report.
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

impl<T: Policy + ?Sized> Policy for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        (**self).observe(ctx, event)
    }
    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        (**self).recall(ctx, query)
    }
    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        feedback: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        (**self).feedback(ctx, feedback)
    }
    fn prepare_recalls(
        &mut self,
        ctx: &PolicyCtx<'_>,
        queries: &[DecisionQuery],
    ) -> Result<(), PolicyError> {
        (**self).prepare_recalls(ctx, queries)
    }
    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        (**self).maintain(ctx, trigger)
    }
    fn stats(&self) -> serde_json::Value {
        (**self).stats()
    }
}
