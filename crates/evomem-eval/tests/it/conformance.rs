//! The policy conformance suite: every family in the family table that serves
//! ranking decisions, run through the real driver (`run_policy`) on a small
//! generated dataset (both protocols) and on 50 real ml-100k users, must
//!
//! - be deterministic: the same seed gives identical ops, decisions and
//!   metrics;
//! - pass the leak canary: at every recall, nothing of the user at or after
//!   the decision time was observed or is in memory, no test interaction was
//!   shown (retrospective), and feedback never arrives before its decision;
//! - keep users apart: a recall's context and usage trace hold no other
//!   user's private record, id or text, unless the family declares
//!   collaborative namespaces, and then only anonymised (no record id);
//! - emit only valid ops, and replaying its op log into an empty memory gives
//!   exactly the live memory;
//! - give exactly the offline result when the LLM answers garbage on every
//!   call (the hub repairs, falls back and counts it), and fail the run when
//!   the backend fails at the transport level on every call.
//!
//! A new family is picked up by being a row of the table; nothing here names
//! one.

use crate::common::shared_dataset;
use evomem_core::{
    ChatRequest, ChatResponse, Dataset, DecisionQuery, Feedback, Interaction, LanguageModel,
    LlmError, LogicalTime, MaintainTrigger, MemoryId, MemoryState, Namespace, PlannedOp, Policy,
    PolicyCtx, PolicyError, Recall, SplitRole, Usage,
};
use evomem_eval::decider::Decider;
use evomem_eval::protocol::{Plan, ProtocolConfig, ProtocolKind, UserSelection};
use evomem_eval::replay::{run_policy, PolicyRun};
use evomem_eval::synthetic::synthetic_dataset;
use evomem_eval::EvalError;
use evomem_kit::testing::TestEmbedder;
use evomem_llm::{CacheSettings, LlmHub};
use evomem_policy::registry::{self, Family, PolicyDeps, PolicySpec, FAMILIES};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Wraps a family's policy and checks, at every call, what the driver and
/// the policy may see and say.
struct Guard {
    inner: Box<dyn Policy>,
    collaborative: bool,
    evolving: bool,
    roles: Vec<SplitRole>,
    user_tokens: Vec<String>,
    seen: Vec<Interaction>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Guard {
    fn flag(&self, v: String) {
        if let Ok(mut g) = self.violations.lock() {
            if g.len() < 20 {
                g.push(v);
            }
        }
    }

    fn check_leaks(&self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) {
        for s in &self.seen {
            if s.user == q.user && s.time >= q.at {
                self.flag(format!(
                    "decision {} (user {}, at {}) was shown the user's interaction at {}",
                    q.decision_id, q.user.0, q.at, s.time
                ));
            }
            if !self.evolving && self.roles[s.time.0 as usize] == SplitRole::Test {
                self.flag(format!("a test interaction at {} was shown", s.time));
            }
        }
        if !self.evolving {
            // Retrospective memory is built in one pass before any decision,
            // so records may carry later op times; what they were built from
            // is checked on the op log ([`sources_visible`]).
            return;
        }
        let me = Namespace::user(&self.user_tokens[q.user.index()]);
        for r in ctx.memory.scan(std::slice::from_ref(&me)) {
            if r.created_at >= q.at {
                self.flag(format!(
                    "decision {} at {}: memory holds {} created at {}",
                    q.decision_id, q.at, r.id, r.created_at
                ));
            }
        }
    }

    /// Ids of every record in another user's namespace.
    fn others(&self, memory: &MemoryState, me: &Namespace) -> BTreeSet<String> {
        memory
            .iter_all()
            .filter(|r| r.namespace != *me && r.namespace.as_str().starts_with("user:"))
            .map(|r| r.id.as_str().to_string())
            .collect()
    }

    fn check_isolation(&self, ctx: &PolicyCtx<'_>, q: &DecisionQuery, out: &Recall) {
        let me = Namespace::user(&self.user_tokens[q.user.index()]);
        let others = self.others(ctx.memory, &me);
        let private = |id: &MemoryId| others.contains(id.as_str());
        for e in &out.context.entries {
            if let Some(id) = &e.memory {
                if private(id) {
                    self.flag(format!(
                        "decision {}: context entry names another user's record {id}",
                        q.decision_id
                    ));
                }
            }
            let mut words: Vec<&str> = e
                .text
                .split(|c: char| c.is_whitespace() || "[](){},;\"'".contains(c))
                .collect();
            if let Some(p) = &e.path {
                words.extend(p.nodes.iter().map(MemoryId::as_str));
            }
            if let Some(w) = words.iter().find(|w| others.contains(**w)) {
                self.flag(format!(
                    "decision {}: context shows another user's record id {w}",
                    q.decision_id
                ));
            }
            if !self.collaborative && e.memory.is_none() && e.path.is_some() {
                self.flag(format!(
                    "decision {}: a non-collaborative family returned an anonymised entry",
                    q.decision_id
                ));
            }
        }
        if let Some(p) = &out.context.profile {
            if let Some(w) = p.split_whitespace().find(|w| others.contains(*w)) {
                self.flag(format!(
                    "decision {}: profile names another user's record {w}",
                    q.decision_id
                ));
            }
        }
        for u in &out.trace.used {
            if private(&u.id) {
                self.flag(format!(
                    "decision {}: usage trace holds another user's record {}",
                    q.decision_id, u.id
                ));
            }
        }
    }
}

impl Policy for Guard {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        e: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.seen.push(*e);
        self.inner.observe(ctx, e)
    }
    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        self.check_leaks(ctx, q);
        let out = self.inner.recall(ctx, q)?;
        self.check_isolation(ctx, q, &out);
        Ok(out)
    }
    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        f: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if f.observed_at < f.decided_at || ctx.now < f.decided_at {
            self.flag(format!(
                "feedback of decision {} arrived before it was made",
                f.decision_id
            ));
        }
        self.inner.feedback(ctx, f)
    }
    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        t: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.inner.maintain(ctx, t)
    }
    fn stats(&self) -> serde_json::Value {
        self.inner.stats()
    }
}

/// A model that answers every call with text that is not JSON.
struct Garbage;

impl LanguageModel for Garbage {
    fn id(&self) -> String {
        "garbage".into()
    }
    fn complete(&self, _: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Ok(ChatResponse {
            text: "I would rather not answer in JSON today.".into(),
            usage: Usage::default(),
        })
    }
}

/// A model whose server is down.
struct Dead;

impl LanguageModel for Dead {
    fn id(&self) -> String {
        "dead".into()
    }
    fn complete(&self, _: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Transient {
            message: "connection refused".into(),
            retry_after_ms: None,
        })
    }
}

struct Outcome {
    run: PolicyRun,
    violations: Vec<String>,
}

fn run_family(
    fam: &Family,
    plan: &Plan<'_>,
    hub: Arc<LlmHub>,
    decider: &Decider,
) -> Result<Outcome, EvalError> {
    let deps = PolicyDeps {
        embedder: Arc::new(TestEmbedder::default()),
        llm: hub.clone(),
        seed: plan.config.seed,
    };
    let spec = PolicySpec::parse(fam.name).map_err(|source| EvalError::Policy {
        policy: fam.name.into(),
        phase: "build",
        source,
    })?;
    let inner = registry::build(&spec, &deps).map_err(|source| EvalError::Policy {
        policy: fam.name.into(),
        phase: "build",
        source,
    })?;
    let violations = Arc::new(Mutex::new(Vec::new()));
    let mut guard = Guard {
        inner,
        collaborative: fam.caps.collaborative,
        evolving: plan.config.protocol == ProtocolKind::Evolving,
        roles: (0..plan.dataset.interactions.len())
            .map(|k| plan.role(LogicalTime(k as u64)))
            .collect(),
        user_tokens: plan.dataset.users.iter().map(|u| u.token.clone()).collect(),
        seen: Vec::new(),
        violations: violations.clone(),
    };
    let run = run_policy(plan, &mut guard, fam.name, decider, &hub, &|_| {})?;
    let violations = violations.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(Outcome { run, violations })
}

/// Retrospective: every op was caused only by interactions the protocol
/// showed (never a test interaction, never a user's own target or later).
fn sources_visible(plan: &Plan<'_>, run: &PolicyRun) -> Vec<String> {
    let mut bad = Vec::new();
    for lo in &run.ops {
        for t in &lo.provenance.sources {
            let shown = plan
                .dataset
                .interactions
                .get(t.0 as usize)
                .is_some_and(|i| plan.retrospective_allows(i));
            if !shown && bad.len() < 10 {
                bad.push(format!(
                    "op seq {} ({}) was caused by the hidden interaction at {t}",
                    lo.seq, lo.provenance.label
                ));
            }
        }
    }
    bad
}

fn replayed(run: &PolicyRun) -> Result<MemoryState, String> {
    let mut m = MemoryState::new();
    for lo in &run.ops {
        m.apply(&lo.op, lo.provenance.logical_time).map_err(|e| {
            format!(
                "op seq {} ({}) invalid on replay: {e}",
                lo.seq,
                lo.op.name()
            )
        })?;
    }
    Ok(m)
}

/// Every check of the module docs, for every ranking family, on one plan.
fn conform(data: &Dataset, cfg: &ProtocolConfig, what: &str) {
    let plan = Plan::build(data, cfg).unwrap();
    let decider = Decider::new(&plan, Arc::new(TestEmbedder::default())).unwrap();
    let mut failures = Vec::new();
    let ranking: Vec<&Family> = FAMILIES
        .iter()
        .filter(|f| f.serves(evomem_core::DecisionTag::Rank))
        .collect();
    assert!(ranking.len() >= 7, "the family table lost rows");
    for fam in ranking {
        let offline = || Arc::new(LlmHub::offline());
        let a = run_family(fam, &plan, offline(), &decider).unwrap();
        let b = run_family(fam, &plan, offline(), &decider).unwrap();
        let name = fam.name;
        if a.run.ops != b.run.ops || a.run.decisions != b.run.decisions {
            failures.push(format!("{what}/{name}: two runs with one seed differ"));
        }
        if a.run.metrics() != b.run.metrics() {
            failures.push(format!("{what}/{name}: metrics differ between two runs"));
        }
        for v in &a.violations {
            failures.push(format!("{what}/{name}: {v}"));
        }
        if plan.config.protocol == ProtocolKind::Retrospective {
            for v in sources_visible(&plan, &a.run) {
                failures.push(format!("{what}/{name}: {v}"));
            }
        }
        match replayed(&a.run) {
            Err(e) => failures.push(format!("{what}/{name}: {e}")),
            Ok(m) if m != a.run.state => {
                failures.push(format!("{what}/{name}: replaying the log != live memory"))
            }
            Ok(_) => {}
        }
        if fam.caps.writes_memory && a.run.ops.is_empty() {
            failures.push(format!("{what}/{name}: declares memory but wrote no op"));
        }
        // An LLM that never answers usable JSON gives exactly the offline result.
        let garbage =
            Arc::new(LlmHub::with_model(Arc::new(Garbage), CacheSettings::default()).unwrap());
        let g = run_family(fam, &plan, garbage.clone(), &decider).unwrap();
        if g.run.ops != a.run.ops || g.run.decisions != a.run.decisions {
            failures.push(format!(
                "{what}/{name}: a failing LLM did not give the offline result"
            ));
        }
        let fallbacks = garbage.accounting().totals().fallbacks;
        if fallbacks < plan.decisions.len() as u64 {
            failures.push(format!(
                "{what}/{name}: only {fallbacks} fallbacks counted for {} decisions",
                plan.decisions.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_family_conforms_on_generated_data_retrospective() {
    let data = synthetic_dataset(12, 40, 14, 5);
    conform(&data, &ProtocolConfig::default(), "synthetic/retrospective");
}

#[test]
fn every_family_conforms_on_generated_data_evolving() {
    let data = synthetic_dataset(12, 40, 14, 6);
    let cfg = ProtocolConfig {
        protocol: ProtocolKind::Evolving,
        tick: 25,
        ..ProtocolConfig::default()
    };
    conform(&data, &cfg, "synthetic/evolving");
}

#[test]
fn every_family_conforms_on_50_ml100k_users() {
    let Some(dir) = shared_dataset("ml-100k") else {
        return;
    };
    let data = evomem_eval::compat::load_data(&dir, Some("recbole"))
        .unwrap()
        .dataset;
    let cfg = ProtocolConfig {
        users: UserSelection::Count(50),
        ..ProtocolConfig::default()
    };
    conform(&data, &cfg, "ml-100k/50");
}

#[test]
fn a_backend_that_fails_every_call_fails_the_run() {
    let data = synthetic_dataset(8, 30, 10, 2);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let decider = Decider::new(&plan, Arc::new(TestEmbedder::default())).unwrap();
    for fam in FAMILIES
        .iter()
        .filter(|f| f.serves(evomem_core::DecisionTag::Rank))
    {
        let dead = Arc::new(LlmHub::with_model(Arc::new(Dead), CacheSettings::default()).unwrap());
        let err = run_family(fam, &plan, dead.clone(), &decider)
            .err()
            .unwrap_or_else(|| panic!("{}: a dead backend finished the run", fam.name));
        let msg = err.to_string();
        assert!(msg.contains("in a row"), "{}: {msg}", fam.name);
        let fallbacks = dead.accounting().totals().fallbacks;
        assert!(
            fallbacks < evomem_llm::DEFAULT_MAX_CONSECUTIVE_FAILURES as u64,
            "{}: {fallbacks} fallbacks before failing",
            fam.name
        );
    }
}
