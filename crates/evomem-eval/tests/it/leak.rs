//! The leak canary: a spy policy that records everything it observes and, at
//! every recall, checks that nothing it saw is at or after the decision time
//! for that user (evolving: for anyone) and that no test interaction was shown
//! (retrospective). It runs through both protocols on a synthetic dataset and
//! on real ml-100k, and a deliberately leaky driver shows that it bites.

use crate::common::shared_dataset;
use evomem_core::{
    Dataset, DecisionQuery, Interaction, LogicalTime, MaintainTrigger, PlannedOp, Policy,
    PolicyCtx, PolicyError, Recall, SplitRole, UsageTrace,
};
use evomem_eval::decider::Decider;
use evomem_eval::protocol::{Plan, ProtocolConfig, ProtocolKind, UserSelection};
use evomem_eval::replay::run_policy;
use evomem_eval::synthetic::synthetic_dataset;
use evomem_llm::LlmHub;
use std::sync::Arc;

struct Spy {
    evolving: bool,
    roles: Vec<SplitRole>,
    seen: Vec<Interaction>,
    violations: Vec<String>,
    recalls: usize,
    before_decisions: bool,
}

impl Spy {
    fn new(plan: &Plan<'_>) -> Self {
        Self {
            evolving: plan.config.protocol == ProtocolKind::Evolving,
            roles: (0..plan.dataset.interactions.len())
                .map(|k| plan.role(LogicalTime(k as u64)))
                .collect(),
            seen: Vec::new(),
            violations: Vec::new(),
            recalls: 0,
            before_decisions: false,
        }
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
        for s in &self.seen {
            if s.user == q.user && s.time >= q.at {
                self.violations.push(format!(
                    "decision {} (user {}, at {}) saw own interaction at {}",
                    q.decision_id, q.user.0, q.at, s.time
                ));
            }
            if self.evolving && s.time >= q.at {
                self.violations.push(format!(
                    "decision {} at {} saw interaction at {} (user {})",
                    q.decision_id, q.at, s.time, s.user.0
                ));
            }
            if !self.evolving && self.roles[s.time.0 as usize] == SplitRole::Test {
                self.violations.push(format!(
                    "decision {} saw test interaction at {}",
                    q.decision_id, s.time
                ));
            }
        }
        Ok(Recall {
            trace: UsageTrace {
                decision_id: q.decision_id,
                user: Some(q.user),
                at: q.at,
                used: Vec::new(),
            },
            ..Recall::default()
        })
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

fn run_spy(data: &Dataset, protocol: ProtocolKind, users: UserSelection) -> Spy {
    let cfg = ProtocolConfig {
        protocol,
        users,
        tick: 100,
        ..ProtocolConfig::default()
    };
    let plan = Plan::build(data, &cfg).unwrap();
    let decider = Decider::new(&plan, Arc::new(evomem_embed::HashingEmbedder::new(32))).unwrap();
    let hub = LlmHub::offline();
    let mut spy = Spy::new(&plan);
    let run = run_policy(&plan, &mut spy, "spy", &decider, &hub, &|_| {}).unwrap();
    assert_eq!(run.decisions.len(), plan.decisions.len());
    assert_eq!(spy.recalls, plan.decisions.len());
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

#[test]
fn canary_is_quiet_on_synthetic_data() {
    let data = synthetic_dataset(40, 60, 12, 9);
    for p in [ProtocolKind::Retrospective, ProtocolKind::Evolving] {
        for u in [UserSelection::All, UserSelection::Count(10)] {
            let spy = run_spy(&data, p, u);
            assert_clean(&spy);
            assert!(!spy.seen.is_empty());
        }
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
}

/// A deliberately leaky driver: shows the policy every interaction, test
/// targets included, before deciding. The canary must catch it.
#[test]
fn canary_bites_on_a_leaky_driver() {
    let data = synthetic_dataset(10, 40, 8, 2);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let engine = evomem_store::Engine::in_memory();
    let mut spy = Spy::new(&plan);
    for e in &data.interactions {
        let ctx = PolicyCtx {
            memory: engine.state(),
            catalog: &data.catalog,
            users: &data.users,
            now: e.time,
        };
        spy.observe(&ctx, e).unwrap();
    }
    let ctx = PolicyCtx {
        memory: engine.state(),
        catalog: &data.catalog,
        users: &data.users,
        now: LogicalTime(0),
    };
    spy.maintain(&ctx, MaintainTrigger::BeforeDecisions)
        .unwrap();
    for d in &plan.decisions {
        let ctx = PolicyCtx {
            memory: engine.state(),
            catalog: &data.catalog,
            users: &data.users,
            now: d.at(),
        };
        spy.recall(&ctx, &d.query()).unwrap();
    }
    assert!(spy
        .violations
        .iter()
        .any(|v| v.contains("saw own interaction")));
    assert!(spy
        .violations
        .iter()
        .any(|v| v.contains("saw test interaction")));

    // Evolving variant that observes the target before deciding.
    let cfg = ProtocolConfig {
        protocol: ProtocolKind::Evolving,
        ..ProtocolConfig::default()
    };
    let plan = Plan::build(&data, &cfg).unwrap();
    let mut spy = Spy::new(&plan);
    for e in &data.interactions {
        let ctx = PolicyCtx {
            memory: engine.state(),
            catalog: &data.catalog,
            users: &data.users,
            now: e.time,
        };
        spy.observe(&ctx, e).unwrap();
        if let Some(d) = plan.decision_at(e.time) {
            let ctx = PolicyCtx {
                memory: engine.state(),
                catalog: &data.catalog,
                users: &data.users,
                now: d.at(),
            };
            spy.recall(&ctx, &d.query()).unwrap();
        }
    }
    assert!(!spy.violations.is_empty());
}
