//! The leak canary: a spy policy, driven by the real `run_policy`, that
//! records everything it is shown and checks every call against what the
//! protocol may reveal (see `crate::protocol`'s "What a decision may see").
//!
//! At every recall for user `u` at time `t`, nothing it learnt, by `observe`
//! or by a feedback's outcome, is `u`'s at or after `t` (evolving: anyone's),
//! and no test interaction was revealed (retrospective).
//!
//! At every feedback:
//! - it comes only under the evolving protocol (a retrospective outcome would
//!   reveal a test item to later decisions);
//! - it answers a decision the spy was asked, once, with that decision's
//!   user, time and usage trace, and that decision is never asked again;
//! - it never arrives before its outcome is visible (`now >= observed_at >=
//!   decided_at`; the evolving protocol gives it exactly at the target:
//!   `now == observed_at`);
//! - its outcome's item is the item of the interaction that became visible
//!   at `observed_at`, which is the user's own; nothing else is revealed.
//!
//! It runs through both protocols on a synthetic dataset and on real
//! ml-100k, where it must stay quiet; then through `run_policy_with_fault`
//! (the `test-utils` fault switch of the real driver), where each fault must
//! trip the check it breaks, while the same plan without the fault is quiet.

use crate::common::shared_dataset;
use evomem_core::{
    Dataset, DecisionQuery, Feedback, Interaction, LogicalTime, MaintainTrigger, Outcome,
    PlannedOp, Policy, PolicyCtx, PolicyError, Recall, SplitRole, UsageTrace, UserId,
};
use evomem_eval::decider::Decider;
use evomem_eval::protocol::{MemoryUsers, Plan, ProtocolConfig, ProtocolKind, UserSelection};
use evomem_eval::replay::{run_policy, run_policy_with_fault, Fault};
use evomem_eval::synthetic::synthetic_dataset;
use evomem_llm::LlmHub;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a recall told the spy, kept to match its feedback against.
struct Asked {
    user: UserId,
    at: LogicalTime,
    trace: UsageTrace,
}

struct Spy {
    evolving: bool,
    roles: Vec<SplitRole>,
    /// The dataset's interactions, by logical time: what a feedback may
    /// reveal is checked against them.
    truth: Vec<Interaction>,
    seen: Vec<Interaction>,
    /// Interactions revealed by feedback: (user, outcome item, observed_at).
    revealed: Vec<Interaction>,
    asked: BTreeMap<u64, Asked>,
    answered: BTreeSet<u64>,
    violations: Vec<String>,
    recalls: usize,
    feedbacks: usize,
    before_decisions: bool,
}

impl Spy {
    fn new(plan: &Plan<'_>) -> Self {
        Self {
            evolving: plan.config.protocol == ProtocolKind::Evolving,
            roles: (0..plan.dataset.interactions.len())
                .map(|k| plan.role(LogicalTime(k as u64)))
                .collect(),
            truth: plan.dataset.interactions.clone(),
            seen: Vec::new(),
            revealed: Vec::new(),
            asked: BTreeMap::new(),
            answered: BTreeSet::new(),
            violations: Vec::new(),
            recalls: 0,
            feedbacks: 0,
            before_decisions: false,
        }
    }

    fn has(&self, what: &str) -> bool {
        self.violations.iter().any(|v| v.contains(what))
    }

    /// What a recall at `q` may not know: anything `q.user`'s at or after
    /// `q.at`, (evolving) anyone's at or after `q.at`, (retrospective) any
    /// test interaction.
    fn check_known(&mut self, q: &DecisionQuery) {
        let shown = self.seen.iter().map(|s| (s, "saw"));
        let told = self.revealed.iter().map(|s| (s, "was told by feedback of"));
        let mut bad = Vec::new();
        for (s, how) in shown.chain(told) {
            if s.user == q.user && s.time >= q.at {
                bad.push(format!(
                    "decision {} (user {}, at {}) {how} own interaction at {}",
                    q.decision_id, q.user.0, q.at, s.time
                ));
            }
            if self.evolving && s.time >= q.at {
                bad.push(format!(
                    "decision {} at {} {how} interaction at {} (user {})",
                    q.decision_id, q.at, s.time, s.user.0
                ));
            }
            if !self.evolving && self.roles[s.time.0 as usize] == SplitRole::Test {
                bad.push(format!(
                    "decision {} {how} test interaction at {}",
                    q.decision_id, s.time
                ));
            }
        }
        self.violations.extend(bad);
    }
}

impl Policy for Spy {
    fn name(&self) -> &str {
        "spy"
    }
    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        e: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if ctx.now != e.time {
            self.violations.push(format!(
                "observe ctx.now {} != event time {}",
                ctx.now, e.time
            ));
        }
        if let Some(last) = self.seen.last() {
            if last.time >= e.time {
                self.violations
                    .push(format!("observations out of order at {}", e.time));
            }
        }
        self.seen.push(*e);
        Ok(Vec::new())
    }
    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        self.recalls += 1;
        if ctx.now != q.at {
            self.violations
                .push(format!("recall ctx.now {} != query time {}", ctx.now, q.at));
        }
        if !self.evolving && !self.before_decisions {
            self.violations
                .push("retrospective decision before maintain(BeforeDecisions)".into());
        }
        if self.answered.contains(&q.decision_id) {
            self.violations.push(format!(
                "decision {} was asked after its feedback arrived",
                q.decision_id
            ));
        }
        self.check_known(q);
        let trace = UsageTrace {
            decision_id: q.decision_id,
            user: Some(q.user),
            at: q.at,
            used: Vec::new(),
        };
        self.asked.insert(
            q.decision_id,
            Asked {
                user: q.user,
                at: q.at,
                trace: trace.clone(),
            },
        );
        Ok(Recall {
            trace,
            ..Recall::default()
        })
    }
    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        f: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.feedbacks += 1;
        let id = f.decision_id;
        let mut bad = Vec::new();
        if !self.evolving {
            bad.push(format!(
                "feedback of decision {id} under the retrospective protocol (reveals item {:?})",
                f.outcome.item.map(|i| i.0)
            ));
        }
        match self.asked.get(&id) {
            None => bad.push(format!("feedback of decision {id}, which was never asked")),
            Some(a) => {
                if Some(a.user) != f.user || a.at != f.decided_at || a.trace != f.trace {
                    bad.push(format!(
                        "feedback of decision {id} does not match its recall \
                         (user {:?}, decided at {}, trace of decision {})",
                        f.user.map(|u| u.0),
                        f.decided_at,
                        f.trace.decision_id
                    ));
                }
            }
        }
        if !self.answered.insert(id) {
            bad.push(format!("second feedback of decision {id}"));
        }
        if f.observed_at < f.decided_at {
            bad.push(format!(
                "feedback of decision {id} observed at {} before it was decided at {}",
                f.observed_at, f.decided_at
            ));
        }
        if ctx.now < f.observed_at {
            bad.push(format!(
                "feedback of decision {id} arrived at {}, before its outcome was visible at {}",
                ctx.now, f.observed_at
            ));
        } else if self.evolving && ctx.now != f.observed_at {
            bad.push(format!(
                "feedback of decision {id} arrived at {}, not when its outcome became visible at {}",
                ctx.now, f.observed_at
            ));
        }
        let visible = self.truth.get(f.observed_at.0 as usize).copied();
        match (f.outcome.item, visible) {
            (Some(item), Some(v)) if Some(v.user) == f.user && v.item == item => {}
            (Some(item), v) => bad.push(format!(
                "feedback of decision {id} names item {} at {}, where the protocol reveals {:?}",
                item.0,
                f.observed_at,
                v.map(|v| (v.user.0, v.item.0))
            )),
            (None, _) => {}
        }
        if let (Some(item), Some(user)) = (f.outcome.item, f.user) {
            self.revealed.push(Interaction {
                user,
                item,
                rating: None,
                timestamp: 0,
                time: f.observed_at,
            });
        }
        self.violations.extend(bad);
        Ok(Vec::new())
    }
    fn maintain(
        &mut self,
        _: &PolicyCtx<'_>,
        t: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if t == MaintainTrigger::BeforeDecisions {
            self.before_decisions = true;
        }
        Ok(Vec::new())
    }
}

fn plan_of(data: &Dataset, protocol: ProtocolKind, users: UserSelection) -> Plan<'_> {
    let cfg = ProtocolConfig {
        protocol,
        users,
        tick: 100,
        ..ProtocolConfig::default()
    };
    Plan::build(data, &cfg).unwrap()
}

/// The spy after the real driver ran it through `plan`, with `fault` on
/// (`None`: the real `run_policy`).
fn spy_run(plan: &Plan<'_>, fault: Option<Fault>) -> Spy {
    let decider = Decider::new(plan, Arc::new(evomem_embed::HashingEmbedder::new(32))).unwrap();
    let hub = LlmHub::offline();
    let mut spy = Spy::new(plan);
    let run = match fault {
        None => run_policy(plan, &mut spy, "spy", &decider, &hub, &|_| {}),
        Some(f) => run_policy_with_fault(plan, &mut spy, "spy", &decider, &hub, f),
    }
    .unwrap();
    assert_eq!(run.decisions.len(), plan.decisions.len());
    assert_eq!(spy.recalls, plan.decisions.len());
    spy
}

fn run_spy(data: &Dataset, protocol: ProtocolKind, users: UserSelection) -> Spy {
    let plan = plan_of(data, protocol, users);
    let spy = spy_run(&plan, None);
    // The protocol's feedback: one per decision (evolving), none
    // (retrospective).
    let expected = match protocol {
        ProtocolKind::Evolving => plan.decisions.len(),
        ProtocolKind::Retrospective => 0,
    };
    assert_eq!(spy.feedbacks, expected);
    spy
}

fn assert_clean(spy: &Spy) {
    assert!(
        spy.violations.is_empty(),
        "{} leaks, first: {:?}",
        spy.violations.len(),
        spy.violations.first()
    );
}

/// The spy under `fault`, after checking that the same plan without it is
/// quiet; `fault` must trip every check in `expect`.
fn assert_caught(plan: &Plan<'_>, fault: Fault, expect: &[&str]) -> Spy {
    assert_clean(&spy_run(plan, None));
    let spy = spy_run(plan, Some(fault));
    for what in expect {
        assert!(
            spy.has(what),
            "{fault:?} ({:?}) did not trip `{what}`; it tripped: {:#?}",
            plan.config.protocol,
            &spy.violations[..spy.violations.len().min(5)]
        );
    }
    spy
}

#[test]
fn canary_is_quiet_on_synthetic_data() {
    let data = synthetic_dataset(40, 60, 12, 9);
    for p in [ProtocolKind::Retrospective, ProtocolKind::Evolving] {
        for u in [UserSelection::All, UserSelection::Count(10)] {
            let spy = run_spy(&data, p, u);
            assert_clean(&spy);
            assert!(!spy.seen.is_empty());
        }
        // Decisions subsampled, memory from everyone: still quiet, and the
        // spy sees users who never decide.
        let cfg = ProtocolConfig {
            protocol: p,
            users: UserSelection::Count(10),
            memory_users: MemoryUsers::All,
            tick: 100,
            ..ProtocolConfig::default()
        };
        let plan = Plan::build(&data, &cfg).unwrap();
        let spy = spy_run(&plan, None);
        assert_clean(&spy);
        assert!(spy.seen.iter().any(|i| !plan.is_selected(i.user)));
    }
}

#[test]
fn canary_is_quiet_on_ml_100k() {
    let Some(dir) = shared_dataset("ml-100k") else {
        return;
    };
    let data = evomem_eval::compat::load_data(&dir, Some("recbole"))
        .unwrap()
        .dataset;
    let retro = run_spy(&data, ProtocolKind::Retrospective, UserSelection::All);
    assert_clean(&retro);
    // 100k interactions minus one test target per user.
    assert_eq!(retro.seen.len(), data.interactions.len() - data.users.len());
    let evolving = run_spy(&data, ProtocolKind::Evolving, UserSelection::Active);
    assert_clean(&evolving);
    assert_eq!(evolving.revealed.len(), evolving.recalls);
}

/// The real driver with the target shown before its decision: the
/// retrospective build pass shows test targets (and what follows them), the
/// evolving replay observes a target before deciding.
#[test]
fn canary_catches_a_driver_that_shows_the_target() {
    let data = synthetic_dataset(10, 40, 8, 2);
    let retro = plan_of(&data, ProtocolKind::Retrospective, UserSelection::All);
    assert_caught(
        &retro,
        Fault::ShowTarget,
        &["saw own interaction", "saw test interaction"],
    );
    let evolving = plan_of(&data, ProtocolKind::Evolving, UserSelection::All);
    let spy = assert_caught(&evolving, Fault::ShowTarget, &["saw own interaction"]);
    // Every decision saw its own target.
    let own = spy
        .violations
        .iter()
        .filter(|v| v.contains("saw own interaction"))
        .count();
    assert_eq!(own, evolving.decisions.len());
}

/// The real driver, off by one step: each decision's feedback arrives at
/// the clock of the interaction before its target.
#[test]
fn canary_catches_feedback_that_arrives_early() {
    let data = synthetic_dataset(10, 40, 8, 2);
    let plan = plan_of(&data, ProtocolKind::Evolving, UserSelection::All);
    let spy = assert_caught(
        &plan,
        Fault::EarlyFeedback,
        &["before its outcome was visible"],
    );
    // Only the feedback is early: nothing else trips.
    assert!(spy
        .violations
        .iter()
        .all(|v| v.contains("before its outcome was visible")));
}

/// The real driver with feedback that names a hidden item: retrospective
/// feedback (the test target), evolving feedback naming the next
/// decision's target.
#[test]
fn canary_catches_feedback_that_reveals_hidden_items() {
    let data = synthetic_dataset(10, 40, 8, 2);
    let retro = plan_of(&data, ProtocolKind::Retrospective, UserSelection::All);
    assert_caught(
        &retro,
        Fault::FeedbackRevealsHidden,
        &[
            "under the retrospective protocol",
            // Later decisions were told a test item.
            "was told by feedback of test interaction",
        ],
    );
    let evolving = plan_of(&data, ProtocolKind::Evolving, UserSelection::All);
    let spy = assert_caught(
        &evolving,
        Fault::FeedbackRevealsHidden,
        &["where the protocol reveals"],
    );
    // Every decision but the last was told the next one's target.
    let wrong = spy
        .violations
        .iter()
        .filter(|v| v.contains("where the protocol reveals"))
        .count();
    assert_eq!(wrong, evolving.decisions.len() - 1);
}

/// The checks that match a feedback to its decision, on feedback no driver
/// fault produces: a decision never asked, a second feedback, a mismatched
/// trace, and a decision asked again after its feedback.
#[test]
fn canary_rejects_feedback_it_cannot_match() {
    let data = synthetic_dataset(4, 20, 6, 1);
    let plan = plan_of(&data, ProtocolKind::Evolving, UserSelection::All);
    let engine = evomem_store::Engine::in_memory();
    let d = &plan.decisions[0];
    let ctx = PolicyCtx {
        memory: engine.state(),
        catalog: &data.catalog,
        users: &data.users,
        now: d.at(),
    };
    let honest = Feedback {
        decision_id: d.decision_id,
        user: Some(d.user),
        decided_at: d.at(),
        observed_at: d.at(),
        outcome: Outcome {
            item: Some(d.target.item),
            ..Outcome::default()
        },
        trace: UsageTrace::for_query(&d.query()),
    };
    let mut spy = Spy::new(&plan);
    spy.feedback(&ctx, &honest).unwrap();
    assert!(spy.has("which was never asked"), "{:?}", spy.violations);

    let mut spy = Spy::new(&plan);
    spy.recall(&ctx, &d.query()).unwrap();
    spy.feedback(&ctx, &honest).unwrap();
    assert_clean(&spy);
    spy.feedback(&ctx, &honest).unwrap();
    assert!(spy.has("second feedback"), "{:?}", spy.violations);
    spy.recall(&ctx, &d.query()).unwrap();
    assert!(spy.has("asked after its feedback"), "{:?}", spy.violations);

    let mut spy = Spy::new(&plan);
    spy.recall(&ctx, &d.query()).unwrap();
    let mut other = honest.clone();
    other.trace.decision_id += 1;
    spy.feedback(&ctx, &other).unwrap();
    assert!(spy.has("does not match its recall"), "{:?}", spy.violations);
}
