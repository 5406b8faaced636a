//! Drives one policy through a [`Plan`]: shows it exactly what the protocol
//! allows, applies its ops through an in-memory [`Engine`], and records every
//! decision. See [`crate::protocol`] for what each protocol shows and when.

use crate::decider::Decider;
use crate::error::EvalError;
use crate::protocol::{Decision, Plan, ProtocolKind};
use evomem_core::metrics::RankMetrics;
use evomem_core::{
    DecisionContext, Feedback, Interaction, ItemId, LoggedOp, LogicalTime, MaintainTrigger,
    MemoryState, Outcome, Policy, PolicyCtx, PolicyError, UsageTrace, UserId,
};
use evomem_llm::LlmHub;
use evomem_store::Engine;
use serde::Serialize;

/// Progress is reported every this many steps (observations + decisions).
const PROGRESS_EVERY: u64 = 500;

/// One decision as it happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    /// Decision id.
    pub decision_id: u64,
    /// User.
    pub user: UserId,
    /// Decision time.
    pub at: LogicalTime,
    /// Target item.
    pub target: ItemId,
    /// Candidates in presentation order.
    pub candidates: Vec<ItemId>,
    /// Scores aligned with `candidates`.
    pub scores: Vec<f64>,
    /// 1-based rank of the target.
    pub rank: usize,
    /// Recalled context.
    pub context: DecisionContext,
    /// Usage trace.
    pub trace: UsageTrace,
}

impl DecisionRecord {
    /// Metrics of this decision.
    pub fn metrics(&self) -> RankMetrics {
        RankMetrics::from_rank(self.rank)
    }
}

/// Everything one policy produced in one run.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    /// Decisions, in decision-id order.
    pub decisions: Vec<DecisionRecord>,
    /// The full op log.
    pub ops: Vec<LoggedOp>,
    /// The live memory at the end (replaying `ops` must give exactly this).
    pub state: MemoryState,
    /// `Policy::stats()` at the end.
    pub stats: serde_json::Value,
    /// Interactions observed.
    pub observed: usize,
}

impl PolicyRun {
    /// Mean metrics over decisions.
    pub fn metrics(&self) -> RankMetrics {
        let ranks: Vec<usize> = self.decisions.iter().map(|d| d.rank).collect();
        RankMetrics::mean_of_ranks(&ranks)
    }
}

/// Run `policy` (labelled `label` in errors) through `plan`.
/// `progress` receives step increments (observations and decisions).
pub fn run_policy(
    plan: &Plan<'_>,
    policy: &mut dyn Policy,
    label: &str,
    decider: &Decider,
    hub: &LlmHub,
    progress: &dyn Fn(u64),
) -> Result<PolicyRun, EvalError> {
    let mut d = Driver {
        plan,
        policy,
        label,
        decider,
        hub,
        // No store: a run is reproducible from its config, never asks for
        // `state_at`, and a store's copy of the log and records (plus
        // snapshots) doubles the memory of a large run (AtomRec's 100k atoms
        // and 1M links).
        engine: Engine::ephemeral(),
        decisions: Vec::with_capacity(plan.decisions.len()),
        observed: 0,
        pending_progress: 0,
        progress,
    };
    match plan.config.protocol {
        ProtocolKind::Retrospective => d.retrospective()?,
        ProtocolKind::Evolving => d.evolving()?,
    }
    progress(d.pending_progress);
    let stats = d.policy.stats();
    let observed = d.observed;
    let mut decisions = d.decisions;
    decisions.sort_by_key(|r| r.decision_id);
    let (state, ops) = d.engine.into_parts();
    Ok(PolicyRun {
        decisions,
        ops,
        state,
        stats,
        observed,
    })
}

/// Total progress steps [`run_policy`] reports for `plan`.
pub fn progress_total(plan: &Plan<'_>) -> u64 {
    let obs = match plan.config.protocol {
        ProtocolKind::Retrospective => plan.stats.retrospective_visible,
        ProtocolKind::Evolving => plan.stats.stream_len,
    };
    (obs + plan.decisions.len()) as u64
}

struct Driver<'a, 'd> {
    plan: &'a Plan<'d>,
    policy: &'a mut dyn Policy,
    label: &'a str,
    decider: &'a Decider,
    hub: &'a LlmHub,
    engine: Engine,
    decisions: Vec<DecisionRecord>,
    observed: usize,
    pending_progress: u64,
    progress: &'a dyn Fn(u64),
}

impl Driver<'_, '_> {
    fn step(&mut self) {
        self.pending_progress += 1;
        if self.pending_progress >= PROGRESS_EVERY {
            (self.progress)(self.pending_progress);
            self.pending_progress = 0;
        }
    }

    fn policy_err(&self, phase: &'static str) -> impl Fn(PolicyError) -> EvalError + use<> {
        let policy = self.label.to_string();
        move |source| EvalError::Policy {
            policy: policy.clone(),
            phase,
            source,
        }
    }

    fn apply(
        &mut self,
        ops: Vec<evomem_core::PlannedOp>,
        at: LogicalTime,
    ) -> Result<(), EvalError> {
        if ops.is_empty() {
            return Ok(());
        }
        let name = self.policy.name().to_string();
        self.engine
            .apply(&name, ops, at)
            .map_err(|source| EvalError::Store {
                policy: self.label.to_string(),
                source,
            })?;
        Ok(())
    }

    fn observe(&mut self, ev: &Interaction) -> Result<(), EvalError> {
        let ops = {
            let ctx = PolicyCtx {
                memory: self.engine.state(),
                catalog: &self.plan.dataset.catalog,
                users: &self.plan.dataset.users,
                now: ev.time,
            };
            self.policy.observe(&ctx, ev)
        }
        .map_err(self.policy_err("observe"))?;
        self.apply(ops, ev.time)?;
        self.observed += 1;
        self.step();
        Ok(())
    }

    fn maintain(&mut self, trigger: MaintainTrigger, at: LogicalTime) -> Result<(), EvalError> {
        let ops = {
            let ctx = PolicyCtx {
                memory: self.engine.state(),
                catalog: &self.plan.dataset.catalog,
                users: &self.plan.dataset.users,
                now: at,
            };
            self.policy.maintain(&ctx, trigger)
        }
        .map_err(self.policy_err("maintain"))?;
        self.apply(ops, at)
    }

    fn decide(&mut self, decision: &Decision) -> Result<DecisionRecord, EvalError> {
        let query = decision.query();
        let recall = {
            let ctx = PolicyCtx {
                memory: self.engine.state(),
                catalog: &self.plan.dataset.catalog,
                users: &self.plan.dataset.users,
                now: decision.at(),
            };
            self.policy.recall(&ctx, &query)
        }
        .map_err(self.policy_err("recall"))?;
        let ranked =
            self.decider
                .rank(self.hub, self.label, self.plan, decision, &recall.context)?;
        let mut context = recall.context;
        for e in &mut context.entries {
            e.embedding = None;
        }
        self.step();
        Ok(DecisionRecord {
            decision_id: decision.decision_id,
            user: decision.user,
            at: decision.at(),
            target: decision.target.item,
            candidates: decision.candidates.clone(),
            scores: ranked.scores,
            rank: ranked.rank,
            context,
            trace: recall.trace,
        })
    }

    fn retrospective(&mut self) -> Result<(), EvalError> {
        let plan = self.plan;
        let mut last = LogicalTime(0);
        for ev in plan.retrospective_visible() {
            self.observe(ev)?;
            last = ev.time;
        }
        self.maintain(MaintainTrigger::BeforeDecisions, last)?;
        for decision in &plan.decisions {
            let rec = self.decide(decision)?;
            self.decisions.push(rec);
        }
        Ok(())
    }

    fn evolving(&mut self) -> Result<(), EvalError> {
        let plan = self.plan;
        let tick = plan.config.tick;
        let mut last = LogicalTime(0);
        for ev in plan.stream() {
            if let Some(decision) = plan.decision_at(ev.time) {
                let rec = self.decide(decision)?;
                let feedback = Feedback {
                    decision_id: rec.decision_id,
                    user: Some(rec.user),
                    decided_at: rec.at,
                    observed_at: ev.time,
                    outcome: Outcome {
                        reward: evomem_core::metrics::reciprocal_rank(rec.rank),
                        success: Some(rec.rank == 1),
                        objectives: [
                            ("rank".to_string(), rec.rank as f64),
                            (
                                "reciprocal_rank".to_string(),
                                evomem_core::metrics::reciprocal_rank(rec.rank),
                            ),
                        ]
                        .into_iter()
                        .collect(),
                        item: Some(rec.target),
                        ..Outcome::default()
                    },
                    trace: rec.trace.clone(),
                };
                let ops = {
                    let ctx = PolicyCtx {
                        memory: self.engine.state(),
                        catalog: &self.plan.dataset.catalog,
                        users: &self.plan.dataset.users,
                        now: ev.time,
                    };
                    self.policy.feedback(&ctx, &feedback)
                }
                .map_err(self.policy_err("feedback"))?;
                self.apply(ops, ev.time)?;
                self.decisions.push(rec);
            }
            self.observe(ev)?;
            last = ev.time;
            if tick > 0 && self.observed.is_multiple_of(tick) {
                self.maintain(MaintainTrigger::Tick, ev.time)?;
            }
        }
        self.maintain(MaintainTrigger::EndOfStream, last)
    }
}
