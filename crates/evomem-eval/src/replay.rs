//! Drives one policy through a [`Plan`]: shows it exactly what the protocol
//! allows, applies its ops through an in-memory [`Engine`], and records every
//! decision. See [`crate::protocol`] for what each protocol shows and when.
//!
//! With the `test-utils` feature, `run_policy_with_fault` drives the same
//! loop with one deliberate protocol violation (`Fault`), so that the leak
//! canary's tests can show that each check catches a real driver bug. No
//! real run reaches that path: [`run_policy`] never injects a fault.

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
    /// The full op log (empty when the run keeps no op log).
    pub ops: Vec<LoggedOp>,
    /// Counts of the ops applied, by label and op name (kept with or
    /// without the log).
    pub tally: evomem_store::OpTally,
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

/// A deliberate protocol violation of [`run_policy_with_fault`]; each one is
/// a plausible driver bug that leaks what the protocol hides.
#[cfg(feature = "test-utils")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The target is shown before its decision. Retrospective: the build
    /// pass observes every interaction of the selected users, test targets
    /// and what follows them included. Evolving: the replay observes a
    /// target before deciding on it.
    ShowTarget,
    /// Evolving (an off-by-one in the replay): a decision is made, and its
    /// feedback delivered, one replay step early, at the clock of the
    /// interaction just before its target, so the policy learns the target
    /// item before it is visible. The feedback's own stamps stay honest
    /// (`observed_at` is the target time). Retrospective: no effect.
    EarlyFeedback,
    /// Feedback carries an item the protocol hides. Retrospective: feedback
    /// (naming the test target) follows every decision. Evolving: a
    /// decision's feedback names the next decision's target (another user's
    /// future interaction) instead of its own; the last decision's is honest.
    FeedbackRevealsHidden,
}

/// Which faults a [`Driver`] injects; all off for [`run_policy`].
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    show_target: bool,
    early_feedback: bool,
    feedback_reveals_hidden: bool,
}

#[cfg(feature = "test-utils")]
impl From<Fault> for Faults {
    fn from(f: Fault) -> Self {
        Self {
            show_target: f == Fault::ShowTarget,
            early_feedback: f == Fault::EarlyFeedback,
            feedback_reveals_hidden: f == Fault::FeedbackRevealsHidden,
        }
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
    let given = Given {
        plan,
        label,
        decider,
        hub,
    };
    drive(
        given,
        policy,
        progress,
        Faults::default(),
        Engine::ephemeral(),
    )
}

/// [`run_policy`] on a given ephemeral `engine`: the evaluation passes
/// [`Engine::ephemeral_streaming`] (the op log goes to its writer thread as
/// the run goes) or [`Engine::ephemeral_unlogged`] (`--ops-log off`: ops
/// are applied, counted in [`PolicyRun::tally`] and dropped). Either way
/// [`PolicyRun::ops`] is empty.
pub fn run_policy_on(
    engine: Engine,
    plan: &Plan<'_>,
    policy: &mut dyn Policy,
    label: &str,
    decider: &Decider,
    hub: &LlmHub,
    progress: &dyn Fn(u64),
) -> Result<PolicyRun, EvalError> {
    let given = Given {
        plan,
        label,
        decider,
        hub,
    };
    drive(given, policy, progress, Faults::default(), engine)
}

/// [`run_policy`] with one deliberate protocol violation, for the leak
/// canary's tests only (`test-utils` feature): the run leaks what `fault`
/// says, and is otherwise the real driver.
#[cfg(feature = "test-utils")]
pub fn run_policy_with_fault(
    plan: &Plan<'_>,
    policy: &mut dyn Policy,
    label: &str,
    decider: &Decider,
    hub: &LlmHub,
    fault: Fault,
) -> Result<PolicyRun, EvalError> {
    let given = Given {
        plan,
        label,
        decider,
        hub,
    };
    drive(given, policy, &|_| {}, fault.into(), Engine::ephemeral())
}

/// What a policy is driven with besides itself: the plan, its label in
/// errors, the decider and the model hub.
#[derive(Clone, Copy)]
struct Given<'a, 'd> {
    plan: &'a Plan<'d>,
    label: &'a str,
    decider: &'a Decider,
    hub: &'a LlmHub,
}

fn drive(
    given: Given<'_, '_>,
    policy: &mut dyn Policy,
    progress: &dyn Fn(u64),
    faults: Faults,
    engine: Engine,
) -> Result<PolicyRun, EvalError> {
    let Given {
        plan,
        label,
        decider,
        hub,
    } = given;
    let mut d = Driver {
        plan,
        policy,
        label,
        decider,
        hub,
        // No store (the callers pass an ephemeral engine): a run is
        // reproducible from its config, never asks for `state_at`, and a
        // store's copy of the log and records (plus snapshots) doubles the
        // memory of a large run (AtomRec's 100k atoms and 1M links).
        // Without an op log to write, keep none: the ops are counted and
        // dropped (half of AtomRec's and MemRL's heap at 100k was the log);
        // with one, the evaluation streams it to its writer.
        engine,
        decisions: Vec::with_capacity(plan.decisions.len()),
        observed: 0,
        pending_progress: 0,
        progress,
        faults,
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
    let tally = d.engine.tally().clone();
    let (state, ops) = d.engine.into_parts();
    Ok(PolicyRun {
        decisions,
        ops,
        tally,
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
    faults: Faults,
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

    fn prepare(&mut self, decisions: &[Decision]) -> Result<(), EvalError> {
        let queries: Vec<_> = decisions.iter().map(Decision::query).collect();
        let ctx = PolicyCtx {
            memory: self.engine.state(),
            catalog: &self.plan.dataset.catalog,
            users: &self.plan.dataset.users,
            now: decisions.first().map_or(LogicalTime(0), Decision::at),
        };
        self.policy
            .prepare_recalls(&ctx, &queries)
            .map_err(self.policy_err("prepare"))
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
        for ev in plan.stream() {
            if plan.retrospective_allows(ev) || self.faults.show_target {
                self.observe(ev)?;
                last = ev.time;
            }
        }
        self.maintain(MaintainTrigger::BeforeDecisions, last)?;
        // Memory is frozen from here on (the real driver gives no feedback
        // in this protocol): the policy may batch work across decisions.
        self.prepare(&plan.decisions)?;
        for decision in &plan.decisions {
            let rec = self.decide(decision)?;
            if self.faults.feedback_reveals_hidden {
                self.feedback(&rec, rec.at, rec.at, rec.target)?;
            }
            self.decisions.push(rec);
        }
        Ok(())
    }

    /// Deliver the outcome of `rec` at clock `now`: it became visible at
    /// `observed_at` and names `item` (the real driver: `now == observed_at
    /// ==` the target time, `item ==` the target).
    fn feedback(
        &mut self,
        rec: &DecisionRecord,
        now: LogicalTime,
        observed_at: LogicalTime,
        item: ItemId,
    ) -> Result<(), EvalError> {
        let rr = evomem_core::metrics::reciprocal_rank(rec.rank);
        let feedback = Feedback {
            decision_id: rec.decision_id,
            user: Some(rec.user),
            decided_at: rec.at,
            observed_at,
            outcome: Outcome {
                reward: rr,
                success: Some(rec.rank == 1),
                objectives: [
                    ("rank".to_string(), rec.rank as f64),
                    ("reciprocal_rank".to_string(), rr),
                ]
                .into_iter()
                .collect(),
                item: Some(item),
                ..Outcome::default()
            },
            trace: rec.trace.clone(),
        };
        let ops = {
            let ctx = PolicyCtx {
                memory: self.engine.state(),
                catalog: &self.plan.dataset.catalog,
                users: &self.plan.dataset.users,
                now,
            };
            self.policy.feedback(&ctx, &feedback)
        }
        .map_err(self.policy_err("feedback"))?;
        self.apply(ops, now)
    }

    fn evolving(&mut self) -> Result<(), EvalError> {
        let plan = self.plan;
        let tick = plan.config.tick;
        let mut last = LogicalTime(0);
        let mut stream = plan.stream().peekable();
        // Fault `EarlyFeedback`: the decision already made one step early.
        let mut decided_early = None;
        while let Some(ev) = stream.next() {
            let mut observed = false;
            if let Some(decision) = plan.decision_at(ev.time) {
                if self.faults.show_target {
                    self.observe(ev)?;
                    observed = true;
                }
                if decided_early != Some(decision.decision_id) {
                    let rec = self.decide(decision)?;
                    let item = if self.faults.feedback_reveals_hidden {
                        plan.decisions
                            .get(decision.decision_id as usize + 1)
                            .map_or(rec.target, |next| next.target.item)
                    } else {
                        rec.target
                    };
                    self.feedback(&rec, ev.time, ev.time, item)?;
                    self.decisions.push(rec);
                }
            }
            if self.faults.early_feedback {
                if let Some((next, decision)) = stream
                    .peek()
                    .and_then(|n| plan.decision_at(n.time).map(|d| (n.time, d)))
                {
                    let rec = self.decide(decision)?;
                    self.feedback(&rec, ev.time, next, rec.target)?;
                    decided_early = Some(rec.decision_id);
                    self.decisions.push(rec);
                }
            }
            if !observed {
                self.observe(ev)?;
            }
            last = ev.time;
            if tick > 0 && self.observed.is_multiple_of(tick) {
                self.maintain(MaintainTrigger::Tick, ev.time)?;
            }
        }
        self.maintain(MaintainTrigger::EndOfStream, last)
    }
}
