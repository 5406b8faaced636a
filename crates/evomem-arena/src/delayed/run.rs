//! The driver of the delayed rating stream: every method × δ replays the
//! stream through the one loop (observe → feedback → recall → predict).
//!
//! For each event (user u, their rating number j, item i) in replay order:
//!
//! 1. **Maturity.** If the [`Schedule`] says the label of u's rating
//!    `k = j − δ − 1` matures now, the driver calls `observe` with that
//!    interaction (carrying its rating) and then `feedback` for the
//!    decision that predicted it, with `Outcome { value: Some(rating),
//!    item: Some(item), reward: −|error|, objectives: {abs_error} }` and the
//!    usage trace that decision returned. The policy's ops go through the
//!    engine.
//! 2. **Prediction.** `recall(DecisionQuery { kind: Predict { item } })`;
//!    the prediction is `DecisionContext::estimate` clamped to [1, 5], or,
//!    for a policy that gives no estimate, the offline predict decider
//!    [`decide`] over the context entries.
//!
//! Labels of a user's last δ + 1 ratings never mature and are never shown.
//! The logical time of every call is the current event's replay position
//! (`PolicyCtx::now`); the interaction handed to `observe` keeps its own
//! time (when it was rated, before now).
//!
//! **Token estimates.** For methods an LLM would serve (the local ones
//! marked `llm`, and every registry family), each prediction's prompt is
//! rendered (`prompts/predict.md`) and counted; the memory updates' own
//! calls are what the method reports as `update_tokens` in its stats, plus,
//! for registry families, what the hub estimated for their roles.

use crate::delayed::baseline::{clamp, PRIOR_MEAN};
use crate::delayed::methods::{build_local, fields, local_method};
use crate::delayed::prompt::predict_tokens;
use crate::delayed::stream::{Half, Schedule, Stream};
use crate::error::ArenaError;
use evomem_core::{
    Catalog, Dataset, DecisionContext, DecisionKind, DecisionQuery, DecisionTag, Embedder,
    Feedback, MaintainTrigger, MemoryState, Outcome, Policy, PolicyCtx, UsageTrace, User,
};
use evomem_llm::accounting::approx_tokens;
use evomem_llm::LlmHub;
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use evomem_store::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// Methods run by default, in report order.
pub const DEFAULT_METHODS: &str =
    "global-mean,static,static-item,full-history,retrieval,reflection,mem0,memrl,tide[edit=none],tide,mf";
/// The MEG reference.
pub const REFERENCE: &str = "static";
/// The second MEG reference: the shared estimator μ + b_u + b_i alone
/// (with item bias), so a method's MEG against it is what its memory adds
/// beyond the estimator every method builds on.
pub const REFERENCE_ITEM: &str = "static-item";
/// The global-mean predictor (always run: the sanity floor).
pub const FLOOR: &str = "global-mean";
/// Arena settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelayedConfig {
    /// Label delays δ, in the user's own ratings.
    pub delays: Vec<usize>,
    /// Method specs (local names or registry specs, comma-separated lists
    /// allowed); the references `static` and `static-item` and the floor
    /// `global-mean` are added.
    pub methods: Vec<String>,
    /// Keep a seeded subsample of this many users.
    pub users: Option<usize>,
    /// Which half of the users (`stream` module docs).
    #[serde(default)]
    pub half: Half,
    /// The seed of the user split into halves.
    #[serde(default)]
    pub split_seed: u64,
    /// Seed (subsample, policies, bootstrap).
    pub seed: u64,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// The δ at which MEG, negative transfer, memory and tokens are
    /// reported; must be one of `delays`.
    pub meg_delay: usize,
}

impl Default for DelayedConfig {
    fn default() -> Self {
        Self {
            delays: vec![0, 5, 10, 20],
            methods: vec![DEFAULT_METHODS.to_string()],
            users: None,
            half: Half::All,
            split_seed: 0,
            seed: 42,
            resamples: 1000,
            meg_delay: 5,
        }
    }
}

/// What the arena needs from the caller.
pub struct DelayedInputs<'a> {
    /// The dataset (ratings in replay order).
    pub data: &'a Dataset,
    /// Embedder for registry families.
    pub embedder: Arc<dyn Embedder>,
    /// A fresh hub per run (registry families' roles; estimates on).
    pub hub_for: &'a (dyn Fn() -> Result<Arc<LlmHub>, String> + Sync),
}

/// One method × δ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodRun {
    /// Spec as run.
    pub spec: String,
    /// δ.
    pub delta: usize,
    /// Whether an LLM would serve it (tokens are estimated).
    pub llm: bool,
    /// Prediction per stream event.
    #[serde(skip)]
    pub predictions: Vec<f64>,
    /// Predictions answered by [`decide`]'s fallback (global mean).
    pub fallbacks: u64,
    /// Labels that matured (feedback events).
    pub matured: u64,
    /// Memory records at the end.
    pub memory_records: usize,
    /// ceil(chars/4) of the memory texts at the end.
    pub memory_tokens: u64,
    /// Tokens of the rendered prediction prompts.
    pub decision_tokens: u64,
    /// Tokens of the memory-update calls.
    pub update_tokens: u64,
    /// Policy stats.
    pub stats: Value,
}

impl MethodRun {
    /// LLM tokens per feedback-equivalent update: all tokens (predictions
    /// and updates) per matured label; `None` for non-LLM methods.
    pub fn tokens_per_update(&self) -> Option<f64> {
        (self.llm && self.matured > 0)
            .then(|| (self.decision_tokens + self.update_tokens) as f64 / self.matured as f64)
    }
}

/// The offline predict decider for a policy without an estimate: the
/// weighted mean of the `rating` field of the memory records behind the
/// context entries (weights `max(weight, 0)`, equal weights when none is
/// positive); the global mean of matured labels when no entry carries a
/// rating. Returns the prediction and whether it fell back.
pub fn decide(ctx: &DecisionContext, memory: &MemoryState, global_mean: f64) -> (f64, bool) {
    let rated: Vec<(f64, f64)> = ctx
        .entries
        .iter()
        .filter_map(|e| {
            let r = memory.get(e.memory.as_ref()?)?;
            let v = r.fields.get(fields::RATING)?.as_f64()?;
            Some((v, f64::from(e.weight).max(0.0)))
        })
        .collect();
    if rated.is_empty() {
        return (clamp(global_mean), true);
    }
    let w: f64 = rated.iter().map(|x| x.1).sum();
    let v = if w > 0.0 {
        rated.iter().map(|x| x.0 * x.1).sum::<f64>() / w
    } else {
        rated.iter().map(|x| x.0).sum::<f64>() / rated.len() as f64
    };
    (clamp(v), false)
}

/// What one replay returns besides the predictions.
#[derive(Debug)]
pub struct Replay {
    /// Prediction per event.
    pub predictions: Vec<f64>,
    /// Decider fallbacks.
    pub fallbacks: u64,
    /// Matured labels.
    pub matured: u64,
    /// Prompt tokens of the predictions (0 unless counted).
    pub decision_tokens: u64,
    /// The engine at the end (memory and op log).
    pub engine: Engine,
}

/// Replay `stream` through `policy` under `schedule`. `count_tokens`
/// renders every prediction prompt. The catalog and users come from `data`.
/// Before each event, the label maturing then is observed (and fed back
/// to the decision that predicted it); then the event is predicted.
pub fn replay(
    data: &Dataset,
    stream: &Stream,
    schedule: Schedule,
    policy: &mut dyn Policy,
    count_tokens: bool,
) -> Result<Replay, ArenaError> {
    let lines: Vec<String> = if count_tokens {
        data.catalog
            .items
            .iter()
            .map(crate::delayed::methods::item_line)
            .collect()
    } else {
        Vec::new()
    };
    let mut r = Replayer {
        name: policy.name().to_string(),
        policy,
        catalog: &data.catalog,
        users: &data.users,
        // The arena never reads the op log: count the ops and drop them.
        engine: Engine::ephemeral_unlogged(),
        pending: vec![None; stream.events.len()],
        predictions: vec![f64::NAN; stream.events.len()],
        sum: 0.0,
        n: 0,
        fallbacks: 0,
        tokens: 0,
    };
    for (idx, ev) in stream.events.iter().enumerate() {
        let now = ev.time();
        if let Some(k) = schedule.maturing_before(ev.k) {
            let m_idx = stream
                .by_user
                .get(ev.user().index())
                .and_then(|l| l.get(k))
                .copied()
                .ok_or_else(|| {
                    ArenaError::Config(format!("no rating {k} of user {}", ev.user().0))
                })?;
            r.mature(stream, m_idx, now)?;
        }
        let line = (count_tokens).then(|| {
            lines
                .get(ev.item().index())
                .map(String::as_str)
                .unwrap_or("?")
        });
        r.predict(idx, ev, line)?;
    }
    if let Some(last) = stream.events.last() {
        let ctx = PolicyCtx {
            memory: r.engine.state(),
            catalog: r.catalog,
            users: r.users,
            now: last.time(),
        };
        let ops = r.policy.maintain(&ctx, MaintainTrigger::EndOfStream)?;
        if !ops.is_empty() {
            r.engine.apply(&r.name, ops, last.time())?;
        }
    }
    Ok(Replay {
        predictions: r.predictions,
        fallbacks: r.fallbacks,
        matured: r.n,
        decision_tokens: r.tokens,
        engine: r.engine,
    })
}

/// The policy's view at `now`.
fn ctx<'a>(
    engine: &'a Engine,
    catalog: &'a Catalog,
    users: &'a [User],
    now: evomem_core::LogicalTime,
) -> PolicyCtx<'a> {
    PolicyCtx {
        memory: engine.state(),
        catalog,
        users,
        now,
    }
}

/// The state of one replay between events.
struct Replayer<'a> {
    name: String,
    policy: &'a mut dyn Policy,
    catalog: &'a Catalog,
    users: &'a [User],
    engine: Engine,
    /// Per event: its decision's usage trace and prediction, until its
    /// label matures.
    pending: Vec<Option<(UsageTrace, f64)>>,
    predictions: Vec<f64>,
    /// Sum and count of matured labels (the fallback mean).
    sum: f64,
    n: u64,
    fallbacks: u64,
    tokens: u64,
}

impl Replayer<'_> {
    /// The label of event `m_idx` matures at `now`: the policy observes it,
    /// and the decision that predicted it gets its feedback.
    fn mature(
        &mut self,
        stream: &Stream,
        m_idx: usize,
        now: evomem_core::LogicalTime,
    ) -> Result<(), ArenaError> {
        let m = stream.events[m_idx];
        let ops = self.policy.observe(
            &ctx(&self.engine, self.catalog, self.users, now),
            &m.interaction,
        )?;
        if !ops.is_empty() {
            self.engine.apply(&self.name, ops, now)?;
        }
        self.sum += m.rating;
        self.n += 1;
        if let Some((trace, pred)) = self.pending[m_idx].take() {
            let err = pred - m.rating;
            let fb = Feedback {
                decision_id: m_idx as u64,
                user: Some(m.user()),
                decided_at: m.time(),
                observed_at: now,
                outcome: Outcome {
                    reward: -err.abs(),
                    value: Some(m.rating),
                    item: Some(m.item()),
                    objectives: [("abs_error".to_string(), err.abs())].into_iter().collect(),
                    ..Outcome::default()
                },
                trace,
            };
            let ops = self
                .policy
                .feedback(&ctx(&self.engine, self.catalog, self.users, now), &fb)?;
            if !ops.is_empty() {
                self.engine.apply(&self.name, ops, now)?;
            }
        }
        Ok(())
    }

    /// Predict event `idx` from the policy's recall (its estimate, or the
    /// offline decision over what it recalled); `line` is the item's prompt
    /// line when tokens are counted.
    fn predict(
        &mut self,
        idx: usize,
        ev: &crate::delayed::stream::Event,
        line: Option<&str>,
    ) -> Result<(), ArenaError> {
        let now = ev.time();
        let q = DecisionQuery {
            decision_id: idx as u64,
            user: ev.user(),
            at: now,
            instruction: None,
            kind: DecisionKind::Predict { item: ev.item() },
        };
        let recall = self
            .policy
            .recall(&ctx(&self.engine, self.catalog, self.users, now), &q)?;
        let mean = if self.n == 0 {
            PRIOR_MEAN
        } else {
            self.sum / self.n as f64
        };
        let pred = match recall.context.estimate {
            Some(x) => clamp(x),
            None => {
                let (p, fell) = decide(&recall.context, self.engine.state(), mean);
                self.fallbacks += u64::from(fell);
                p
            }
        };
        if let Some(line) = line {
            self.tokens += predict_tokens(&recall.context, line)?;
        }
        self.predictions[idx] = pred;
        self.pending[idx] = Some((recall.trace, pred));
        Ok(())
    }
}

/// Specs not run, with the reason.
pub type Skipped = Vec<(String, String)>;

/// A method resolved for the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Method {
    /// The spec.
    pub spec: PolicySpec,
    /// Arena-local (else a registry family).
    pub local: bool,
    /// Whether an LLM would serve it.
    pub llm: bool,
}

/// Resolve the configured specs: local methods, registry families that
/// serve `Predict`; the reference and the floor are added first. Returns
/// the methods and the skipped specs with the reason.
pub fn resolve(cfg: &DelayedConfig) -> Result<(Vec<Method>, Skipped), ArenaError> {
    let mut specs = vec![
        PolicySpec::parse(FLOOR)?,
        PolicySpec::parse(REFERENCE)?,
        PolicySpec::parse(REFERENCE_ITEM)?,
    ];
    for s in &cfg.methods {
        for p in PolicySpec::parse_list(s)? {
            if !specs.contains(&p) {
                specs.push(p);
            }
        }
    }
    let mut methods = Vec::new();
    let mut skipped = Vec::new();
    for spec in specs {
        if let Some(m) = local_method(&spec.name) {
            evomem_policy::registry::check_keys(m.name, m.keys, &spec)?;
            methods.push(Method {
                llm: m.llm,
                spec,
                local: true,
            });
            continue;
        }
        match registry::family(&spec.name) {
            Ok(f) if f.serves(DecisionTag::Predict) => {
                f.check(&spec)?;
                methods.push(Method {
                    spec,
                    local: false,
                    llm: true,
                });
            }
            Ok(f) => skipped.push((
                spec.to_string(),
                format!(
                    "family `{}` does not serve predict decisions (it serves {:?})",
                    f.name, f.caps.decisions
                ),
            )),
            Err(e) => return Err(e.into()),
        }
    }
    Ok((methods, skipped))
}

/// Run one method at one δ.
pub fn run_method(
    method: &Method,
    delta: usize,
    stream: &Stream,
    inputs: &DelayedInputs<'_>,
    seed: u64,
) -> Result<MethodRun, ArenaError> {
    let data = inputs.data;
    let (mut policy, hub): (Box<dyn Policy>, Option<Arc<LlmHub>>) = if method.local {
        let p =
            build_local(&method.spec, &data.catalog, data.users.len(), seed)?.ok_or_else(|| {
                ArenaError::Config(format!("`{}` is not a local method", method.spec))
            })?;
        (p, None)
    } else {
        let hub = (inputs.hub_for)().map_err(ArenaError::Config)?;
        let deps = PolicyDeps {
            embedder: inputs.embedder.clone(),
            llm: hub.clone(),
            seed,
        };
        (registry::build(&method.spec, &deps)?, Some(hub))
    };
    let r = replay(
        data,
        stream,
        Schedule::new(delta),
        policy.as_mut(),
        method.llm,
    )?;
    let stats = policy.stats();
    let mut update_tokens = stats
        .get("update_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if let Some(h) = hub {
        let t = h.accounting().totals();
        update_tokens +=
            t.prompt_tokens + t.completion_tokens + t.est_prompt_tokens + t.est_completion_tokens;
    }
    let state = r.engine.state();
    Ok(MethodRun {
        spec: method.spec.to_string(),
        delta,
        llm: method.llm,
        predictions: r.predictions,
        fallbacks: r.fallbacks,
        matured: r.matured,
        memory_records: state.len(),
        memory_tokens: state.iter_all().map(|x| approx_tokens(&x.text)).sum(),
        decision_tokens: r.decision_tokens,
        update_tokens,
        stats,
    })
}
