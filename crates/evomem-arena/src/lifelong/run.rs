//! The lifelong DB arena: policies × seeds × epochs over LifelongAgentBench
//! DB tasks, through the one loop (recall → act → judge → feedback).
//!
//! Per task: the policy recalls for a [`DecisionKind::Act`] query; the
//! arena turns the retrieved records into [`MemoryView`]s; the frozen
//! agent runs an episode in a fresh SQLite database; the judge's verdict
//! comes back to the policy as a success bit with the agent's episode
//! (never the ground truth); the policy's ops go through the engine.
//!
//! **Settings** (the RoMeRL paper's, §5): *runtime* runs all tasks for E
//! epochs with memory carried across epochs; *transfer* learns for E
//! epochs on a fixed 7:3 split (seed 42) and then evaluates the 30% with
//! memory frozen. The task order of each epoch is a seeded shuffle; seeds
//! vary that order and the policies' exploration, which is what the CIs
//! are over. `no-memory` always runs as the reference.
//!
//! **δ.** MemRL's similarity threshold is "the top-20% quantile of the
//! pairwise cosine between task descriptions in the setting": the arena
//! computes it over the setting's task texts and passes it as `delta` to
//! every family with that key, unless the spec sets it.
//!
//! **Noise injection** (the paper's protocol): after the first round, 10% of
//! the memory entries (a seeded choice) are replaced by copies whose action
//! and trajectory are null and that are marked `noisy`; their titles (task
//! text and embedding) stay, so they remain retrievable. Then `epochs`
//! more rounds run. An episode whose agent reused a retrieved null action
//! writes noise too (propagation): the records it writes that hold no
//! action are marked `noisy`, and each record counts once however often it
//! is rewritten. Reported: the last round's SR, the mean number of positive
//! updates the noisy entries received while noisy, the final noise ratio
//! (noisy entries / all entries) beside the counts it is made of (noisy
//! entries, all entries, injected, propagated), and the *stuck* tasks: the
//! tasks never solved in a round after the noise, and of them those solved
//! in the first round (the ones the noise took away).
//!
//! **The arena's key `reuse_null`** (a probability, default 1): how often
//! the offline agent reuses a retrieved null action (the best-ranked
//! successful memory of the task has none) rather than passing over it, a
//! seeded draw per episode ([`super::agent::ActInput::reuse_null`]). It is
//! written in a policy spec, `romerl[reuse_null=0.5]`, so that one run can
//! sweep it beside the policies' own keys under the same seeds, and the
//! arena takes it out before the policy is built: the spec as requested
//! (with the key) names the run, the spec as run does not carry it.
//!
//! **Verdicts** ([`super::verdict`]): every comparison of two variants is
//! judged on their per-seed paired differences, never on whether two
//! marginal intervals overlap (every variant runs the same seeds, so the
//! same task orders).
//!
//! **Metrics per epoch**: SR; CSR (solved at least once so far); Cold-Q
//! ratio (memories never updated); feedback density (mean updates per
//! memory); memories per task; LLM calls and tokens of the `act` role
//! (offline estimates when offline); mean steps; and the point-biserial
//! correlation between Q and success-derived provenance.

use crate::error::ArenaError;
use crate::lifelong::agent::{run_episode_with, task_request};
use crate::lifelong::judge::{judge, validate_judge, JudgeValidation};
use crate::lifelong::task::load_tasks;
use crate::lifelong::types::{DbTask, MemoryView};
use crate::stats::{mean_ci, point_biserial, MeanCi};
use evomem_core::{
    Catalog, DecisionKind, DecisionQuery, Embedder, EpisodeStep, Feedback, LogicalTime, MemoryId,
    MemoryOp, MemoryRecord, Outcome, PlannedOp, PolicyCtx, User, UserId,
};
use evomem_kit::RoleCaller;
use evomem_llm::LlmHub;
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use evomem_policy::utility::{fields, pairwise_cosine_quantile, TrajectoryRecord};
use evomem_store::Engine;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

#[cfg(test)]
use super::report::data_name;
pub use super::report::{markdown, write_report};

/// The split seed of the transfer setting (the paper's fixed 7:3 split).
pub const SPLIT_SEED: u64 = 42;
/// Share of tasks learned on in the transfer setting.
pub const TRAIN_SHARE: f64 = 0.7;
/// The reference policy that always runs.
pub const REFERENCE: &str = "no-memory";
/// The arena's own key in a policy spec: the probability that the agent
/// reuses a retrieved null action (module docs).
pub const REUSE_NULL: &str = "reuse_null";
/// `reuse_null` when a spec does not set it: the agent always reuses a
/// retrieved null action (the paper's propagation protocol).
pub const REUSE_NULL_DEFAULT: f64 = 1.0;

/// Runtime learning or transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    /// All tasks, E epochs, memory carried across epochs.
    Runtime,
    /// Learn on 70%, evaluate on the other 30% with memory frozen.
    Transfer,
}

impl std::str::FromStr for Setting {
    type Err = ArenaError;
    fn from_str(s: &str) -> Result<Self, ArenaError> {
        match s {
            "runtime" => Ok(Setting::Runtime),
            "transfer" => Ok(Setting::Transfer),
            o => Err(ArenaError::Config(format!(
                "unknown setting `{o}` (known: runtime, transfer)"
            ))),
        }
    }
}

/// Arena settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifelongConfig {
    /// `db_bench_data.json`.
    pub data: PathBuf,
    /// Policy specs (the reference `no-memory` is added when missing).
    pub policies: Vec<String>,
    /// Runtime or transfer.
    pub setting: Setting,
    /// Epochs (rounds after the first one under noise injection).
    pub epochs: usize,
    /// Base seed.
    pub seed: u64,
    /// Seeds (runs per policy): `seed`, `seed + 1`, ...
    pub seeds: usize,
    /// Use only the first N tasks (by sample index): CI subsets.
    pub tasks: Option<usize>,
    /// Noise-injection protocol with this share of entries nulled.
    pub noise: Option<f64>,
    /// Label of the agent's backend (offline or the model spec).
    pub llm: String,
}

/// Metrics of one epoch of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochMetrics {
    /// Epoch (round), from 1.
    pub epoch: usize,
    /// Success rate.
    pub sr: f64,
    /// Cumulative success rate: solved at least once so far.
    pub csr: f64,
    /// Share of memories never updated.
    pub cold_q: f64,
    /// Mean updates per memory.
    pub density: f64,
    /// Memory records.
    pub memories: usize,
    /// Records per task that has any.
    pub memories_per_task: f64,
    /// Largest record count of one task.
    pub max_per_task: usize,
    /// Mean steps per episode.
    pub mean_steps: f64,
    /// `act` role runs (LLM calls, or offline runs).
    pub calls: u64,
    /// Prompt + completion tokens (estimated when offline).
    pub tokens: u64,
    /// `act` runs that a configured model failed and the offline algorithm
    /// answered instead (repairs that failed, transient errors): a model
    /// run that quietly became an offline one shows here.
    pub fallbacks: u64,
    /// Point-biserial r between Q and success provenance.
    pub point_biserial: Option<f64>,
    /// Noisy entries / all entries (noise protocol).
    pub noise_ratio: Option<f64>,
}

/// Noise-injection results of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NoiseMetrics {
    /// Entries nulled after round 1.
    pub injected: usize,
    /// Distinct records written later by episodes that reused a null action
    /// and holding no action (noise propagation). A record rewritten again
    /// by such an episode after a `Replace` dropped its mark counts once.
    #[serde(default)]
    pub propagated: usize,
    /// Noisy entries at the end (the final noise ratio's numerator).
    #[serde(default)]
    pub noisy_entries: usize,
    /// All entries at the end (its denominator).
    #[serde(default)]
    pub entries: usize,
    /// Tasks never solved in any round after the noise.
    #[serde(default)]
    pub never_solved_after: usize,
    /// Stuck tasks: solved in the first round (before the noise) and never
    /// in any round after it.
    #[serde(default)]
    pub stuck: usize,
    /// Mean positive utility updates a noisy entry (injected or propagated)
    /// received while noisy.
    pub positive_updates: f64,
    /// Noisy entries / all entries at the end.
    pub final_noise_ratio: f64,
    /// SR of the last round.
    pub last_sr: f64,
}

/// One policy × seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRun {
    /// Spec as run (with the arena-filled `delta`).
    pub spec: String,
    /// Spec as requested: the seeds of one requested spec group under it
    /// (a `delta` the user wrote stays; the one the arena fills does not).
    #[serde(default)]
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// The arena's `reuse_null` for this run.
    #[serde(default = "reuse_null_default")]
    pub reuse_null: f64,
    /// Per epoch.
    pub epochs: Vec<EpochMetrics>,
    /// Transfer: SR on the held-out 30%, memory frozen.
    pub transfer_sr: Option<f64>,
    /// Noise protocol results.
    pub noise: Option<NoiseMetrics>,
    /// Share of the final memories in Q bins [0,.2),[.2,.4),...,[.8,1] that
    /// are success-derived (the paper's Figure 6).
    pub q_bins: Vec<(usize, f64)>,
    /// Policy stats.
    pub stats: Value,
    /// Per-episode log (first seed only): epoch, task, success, steps, SQL.
    #[serde(skip)]
    pub episodes: Vec<Value>,
}

fn reuse_null_default() -> f64 {
    REUSE_NULL_DEFAULT
}

/// Per policy, over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicySummary {
    /// Spec.
    pub spec: String,
    /// Per epoch: SR, CSR, Cold-Q, density, memories per task.
    pub per_epoch: Vec<BTreeMap<String, MeanCi>>,
    /// Last-epoch figures.
    pub last: BTreeMap<String, MeanCi>,
    /// Transfer SR.
    pub transfer_sr: Option<MeanCi>,
    /// Noise protocol.
    pub noise: Option<BTreeMap<String, MeanCi>>,
}

/// Everything the arena reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LifelongReport {
    /// Settings.
    pub config: LifelongConfig,
    /// Tasks in the setting.
    pub tasks: usize,
    /// Transfer: train / test sizes.
    pub split: Option<(usize, usize)>,
    /// δ passed to families with that key.
    pub delta: Option<f64>,
    /// The judge run on every ground-truth SQL.
    pub judge: JudgeValidation,
    /// Every run.
    pub runs: Vec<PolicyRun>,
    /// Per policy.
    pub summary: Vec<PolicySummary>,
    /// The paper's claims the run can judge, on per-seed paired
    /// differences.
    pub claims: Vec<crate::lifelong::verdict::Claim>,
}

/// What the arena needs from the caller.
pub struct ArenaInputs<'a> {
    /// Embedder for the policies.
    pub embedder: Arc<dyn Embedder>,
    /// A fresh hub per run (the agent's `act` role and the policies' roles).
    pub hub_for: &'a (dyn Fn() -> Result<Arc<LlmHub>, String> + Sync),
}

/// The agent's view of a retrieved record.
pub fn memory_view(r: &MemoryRecord, score: f32) -> MemoryView {
    let attrs = r.fields.get(fields::ATTRIBUTES);
    let attr = |k: &str| {
        attrs
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let steps = r
        .fields
        .get(fields::STEPS)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| EpisodeStep {
                    action: s.get("action").and_then(Value::as_str).unwrap_or("").into(),
                    observation: s
                        .get("observation")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .into(),
                    ok: s.get("ok").and_then(Value::as_bool).unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    MemoryView {
        task: r.text.clone(),
        table: attr("table"),
        columns: attr("columns")
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect(),
        answer: r.field_str(fields::ANSWER).map(str::to_string),
        steps,
        success: r
            .fields
            .get(fields::SUCCESS)
            .and_then(Value::as_bool)
            .unwrap_or(false),
        score,
    }
}

/// Run the arena.
pub fn run_arena(
    cfg: &LifelongConfig,
    inputs: &ArenaInputs<'_>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<LifelongReport, ArenaError> {
    if cfg.epochs == 0 || cfg.seeds == 0 {
        return Err(ArenaError::Config(
            "need at least one epoch and one seed".into(),
        ));
    }
    if let Some(n) = cfg.noise {
        if !(0.0..=1.0).contains(&n) {
            return Err(ArenaError::Config(format!(
                "noise share must be in [0, 1], got {n}"
            )));
        }
    }
    let mut all = load_tasks(&cfg.data)?;
    progress(&format!(
        "validating the judge on {} ground-truth SQL",
        all.len()
    ));
    let judge_check = validate_judge(&all);
    if let Some(n) = cfg.tasks {
        all.truncate(n);
    }
    if all.is_empty() {
        return Err(ArenaError::Config("no tasks".into()));
    }
    let (train, test) = match cfg.setting {
        Setting::Runtime => (all.clone(), Vec::new()),
        Setting::Transfer => split(&all),
    };
    // δ over the setting's task descriptions.
    let texts: Vec<&str> = all.iter().map(|t| t.instruction.as_str()).collect();
    let vectors = inputs
        .embedder
        .embed(&texts)
        .map_err(|e| ArenaError::Policy(e.into()))?;
    let delta = pairwise_cosine_quantile(&vectors, 0.8, usize::MAX);
    let mut specs = vec![PolicySpec::parse(REFERENCE)?];
    for s in &cfg.policies {
        for p in PolicySpec::parse_list(s)? {
            if !specs.contains(&p) {
                specs.push(p);
            }
        }
    }
    for s in &specs {
        let (policy, _) = arena_keys(s)?;
        let fam = registry::family(&policy.name)?;
        if !fam.caps.decisions.contains(&evomem_core::DecisionTag::Act) {
            return Err(ArenaError::Config(format!(
                "policy `{s}` does not act on tasks (it serves {:?})",
                fam.caps.decisions
            )));
        }
        fam.check(&policy)?;
    }
    let jobs: Vec<(PolicySpec, u64, bool)> = specs
        .iter()
        .flat_map(|s| {
            (0..cfg.seeds).map(move |i| (s.clone(), cfg.seed.wrapping_add(i as u64), i == 0))
        })
        .collect();
    let run_job = |(spec, seed, log): &(PolicySpec, u64, bool)| -> Result<PolicyRun, ArenaError> {
        let requested = spec.to_string();
        let (mut spec, reuse_null) = arena_keys(spec)?;
        let fam = registry::family(&spec.name)?;
        if let Some(d) = delta {
            if fam.keys.iter().any(|k| k.name == "delta") && !spec.params.contains_key("delta") {
                spec.params.insert("delta".into(), format!("{d:.6}"));
            }
        }
        let hub = (inputs.hub_for)().map_err(ArenaError::Config)?;
        let r = run_policy(
            &PolicyJob {
                cfg,
                spec: &spec,
                seed: *seed,
                train: &train,
                test: &test,
                log: *log,
                reuse_null,
            },
            inputs.embedder.clone(),
            hub,
        );
        let r = r.map(|mut run| {
            run.policy = requested;
            run
        });
        if let Ok(run) = &r {
            let last = run.epochs.last().map(|e| e.sr).unwrap_or(0.0);
            progress(&format!(
                "{} seed {}: last-epoch SR {:.3}",
                run.spec, seed, last
            ));
        }
        r
    };
    let runs: Vec<PolicyRun> = {
        use rayon::prelude::*;
        jobs.par_iter().map(run_job).collect::<Result<_, _>>()?
    };
    let summary = summarise(&specs, &runs);
    let claims = crate::lifelong::verdict::claims(&runs, cfg.noise.is_some());
    Ok(LifelongReport {
        config: cfg.clone(),
        tasks: all.len(),
        split: (cfg.setting == Setting::Transfer).then_some((train.len(), test.len())),
        delta,
        judge: judge_check,
        runs,
        summary,
        claims,
    })
}

/// `spec` without the arena's own keys, and the run's `reuse_null` (module
/// docs). A `reuse_null` outside [0, 1] is refused.
pub fn arena_keys(spec: &PolicySpec) -> Result<(PolicySpec, f64), ArenaError> {
    let mut policy = spec.clone();
    let reuse = match policy.params.remove(REUSE_NULL) {
        None => REUSE_NULL_DEFAULT,
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=1.0).contains(p))
            .ok_or_else(|| {
                ArenaError::Config(format!(
                    "`{spec}`: the arena's `{REUSE_NULL}` must be a probability in [0, 1], got `{v}`"
                ))
            })?,
    };
    Ok((policy, reuse))
}

/// The fixed 7:3 split (seed 42).
pub fn split(tasks: &[DbTask]) -> (Vec<DbTask>, Vec<DbTask>) {
    let mut idx: Vec<usize> = (0..tasks.len()).collect();
    idx.shuffle(&mut ChaCha8Rng::seed_from_u64(SPLIT_SEED));
    let n_train = (tasks.len() as f64 * TRAIN_SHARE).round() as usize;
    let mut train: Vec<usize> = idx[..n_train].to_vec();
    let mut test: Vec<usize> = idx[n_train..].to_vec();
    train.sort_unstable();
    test.sort_unstable();
    (
        train.into_iter().map(|i| tasks[i].clone()).collect(),
        test.into_iter().map(|i| tasks[i].clone()).collect(),
    )
}

struct Loop {
    engine: Engine,
    policy: Box<dyn evomem_core::Policy>,
    name: String,
    caller: RoleCaller,
    users: Vec<User>,
    catalog: Catalog,
    t: u64,
    /// Positive updates received by each noisy entry while noisy.
    noisy_positive: BTreeMap<MemoryId, u64>,
    /// Distinct records written by episodes that reused a null action.
    propagated: BTreeSet<MemoryId>,
    /// Run seed (the `reuse_null` draws).
    seed: u64,
    /// Probability that the agent reuses a retrieved null action.
    reuse_null: f64,
}

/// Result of one episode.
struct Step {
    success: bool,
    steps: usize,
    sql: Option<String>,
}

impl Loop {
    /// The seeded draw in `[0, 1)` of this episode's `reuse_null` decision
    /// (one per decision id; `reuse_null = 1` always reuses, 0 never).
    fn reuse_draw(&self) -> f64 {
        use rand::Rng;
        ChaCha8Rng::seed_from_u64(
            self.seed ^ self.t.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x7265_7573_655f_6e75,
        )
        .gen::<f64>()
    }

    /// One task: recall, act, judge and (when `learn`) feedback.
    fn episode(&mut self, task: &DbTask, learn: bool) -> Result<Step, ArenaError> {
        self.t += 1;
        let req = task_request(task);
        let q = DecisionQuery {
            decision_id: self.t,
            user: UserId(0),
            at: LogicalTime(self.t),
            instruction: Some(task.instruction.clone()),
            kind: DecisionKind::Act { task: req },
        };
        let ctx = PolicyCtx {
            memory: self.engine.state(),
            catalog: &self.catalog,
            users: &self.users,
            now: LogicalTime(self.t),
        };
        let recall = self.policy.recall(&ctx, &q)?;
        let views: Vec<MemoryView> = recall
            .context
            .entries
            .iter()
            .filter_map(|e| {
                let id = e.memory.as_ref()?;
                self.engine
                    .state()
                    .get(id)
                    .map(|r| memory_view(r, e.weight))
            })
            .collect();
        let reuse = self.reuse_draw() < self.reuse_null;
        let res = run_episode_with(&mut self.caller, task, &views, reuse)?;
        let verdict = judge(
            task,
            &res.env,
            res.committed.as_ref(),
            res.committed_sql.as_deref(),
        );
        let step = Step {
            success: verdict.success,
            steps: res.episode.len(),
            sql: res.committed_sql.clone(),
        };
        if !learn {
            return Ok(step);
        }
        let reward = if verdict.success { 1.0 } else { 0.0 };
        if reward > 0.0 {
            for u in &recall.trace.used {
                if let Some(n) = self.noisy_positive.get_mut(&u.id) {
                    if is_noisy(self.engine.state().get(&u.id)) {
                        *n += 1;
                    }
                }
            }
        }
        // The agent reused a retrieved null action (it committed no
        // statement): what the policy writes from this episode carries
        // the null operation on, and is noise like the injected entries.
        let reused_null = res.episode.steps.is_empty() && res.episode.answer.is_none();
        let fb = Feedback {
            decision_id: self.t,
            user: Some(UserId(0)),
            decided_at: q.at,
            observed_at: LogicalTime(self.t),
            outcome: Outcome {
                reward,
                success: Some(verdict.success),
                episode: Some(res.episode),
                ..Outcome::default()
            },
            trace: recall.trace,
        };
        let ctx = PolicyCtx {
            memory: self.engine.state(),
            catalog: &self.catalog,
            users: &self.users,
            now: LogicalTime(self.t),
        };
        let ops = self.policy.feedback(&ctx, &fb)?;
        let written: Vec<MemoryId> = ops
            .iter()
            .filter_map(|o| match &o.op {
                MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => {
                    Some(record.id.clone())
                }
                _ => None,
            })
            .collect();
        if !ops.is_empty() {
            self.engine.apply(&self.name, ops, LogicalTime(self.t))?;
        }
        if reused_null {
            self.mark_propagated(&written)?;
        }
        Ok(step)
    }

    /// Mark the records an episode that reused a null action wrote (and
    /// that still hold no action) as noisy: the propagated noise the final
    /// noise ratio counts. Policies never read the mark.
    fn mark_propagated(&mut self, written: &[MemoryId]) -> Result<(), ArenaError> {
        let mut ops = Vec::new();
        for id in written {
            let Some(r) = self.engine.state().get(id) else {
                continue;
            };
            let nulled = TrajectoryRecord::read(r).is_some_and(|t| !t.has_action);
            if !nulled || is_noisy(Some(r)) {
                continue;
            }
            // A `Replace` writes a record without the mark, so the same
            // slot may come back here: it is one propagated record.
            self.noisy_positive.entry(id.clone()).or_insert(0);
            self.propagated.insert(id.clone());
            ops.push(PlannedOp::new(
                MemoryOp::UpdateFields {
                    id: id.clone(),
                    fields: [(fields::NOISY.to_string(), json!(true))]
                        .into_iter()
                        .collect(),
                    text: None,
                    embedding: None,
                },
                "noise",
                "noise propagation: written by an episode that reused a null action",
            ));
        }
        if !ops.is_empty() {
            self.engine.apply("arena:noise", ops, LogicalTime(self.t))?;
        }
        Ok(())
    }

    /// Null `share` of the entries (seeded); returns how many.
    fn inject_noise(&mut self, share: f64, seed: u64) -> Result<usize, ArenaError> {
        let mut ids: Vec<MemoryId> = self
            .engine
            .state()
            .iter_all()
            .filter(|r| TrajectoryRecord::read(r).is_some())
            .map(|r| r.id.clone())
            .collect();
        ids.sort();
        ids.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x006e_6f69_7365));
        let n = (ids.len() as f64 * share).round() as usize;
        let mut ops = Vec::with_capacity(n);
        for id in ids.into_iter().take(n) {
            let fields = [
                (fields::ANSWER.to_string(), Value::Null),
                (fields::STEPS.to_string(), json!([])),
                (fields::SIGNATURE.to_string(), json!("")),
                (fields::NOISY.to_string(), json!(true)),
            ]
            .into_iter()
            .collect();
            self.noisy_positive.insert(id.clone(), 0);
            ops.push(PlannedOp::new(
                MemoryOp::UpdateFields {
                    id,
                    fields,
                    text: None,
                    embedding: None,
                },
                "noise",
                "noise injection: action and trajectory nulled, title kept",
            ));
        }
        if !ops.is_empty() {
            self.engine.apply("arena:noise", ops, LogicalTime(self.t))?;
        }
        Ok(n)
    }
}

fn is_noisy(r: Option<&MemoryRecord>) -> bool {
    r.and_then(|r| r.fields.get(fields::NOISY))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Memory statistics of the current state.
fn memory_metrics(engine: &Engine, m: &mut EpochMetrics) {
    let recs: Vec<(TrajectoryRecord, bool)> = engine
        .state()
        .iter_all()
        .filter_map(|r| TrajectoryRecord::read(r).map(|t| (t, is_noisy(Some(r)))))
        .collect();
    m.memories = recs.len();
    if recs.is_empty() {
        return;
    }
    let n = recs.len() as f64;
    m.cold_q = recs.iter().filter(|(t, _)| t.updates == 0).count() as f64 / n;
    m.density = recs.iter().map(|(t, _)| t.updates as f64).sum::<f64>() / n;
    let mut per_task: BTreeMap<&str, usize> = BTreeMap::new();
    for (t, _) in &recs {
        *per_task.entry(t.task_id.as_str()).or_insert(0) += 1;
    }
    m.memories_per_task = n / per_task.len() as f64;
    m.max_per_task = per_task.values().copied().max().unwrap_or(0);
    let qs: Vec<f64> = recs.iter().map(|(t, _)| t.q).collect();
    let ys: Vec<bool> = recs.iter().map(|(t, _)| t.success).collect();
    m.point_biserial = point_biserial(&qs, &ys);
    let noisy = recs.iter().filter(|(_, noisy)| *noisy).count();
    m.noise_ratio = Some(noisy as f64 / n);
}

/// One policy on one seed: what [`run_policy`] runs.
struct PolicyJob<'a> {
    cfg: &'a LifelongConfig,
    spec: &'a PolicySpec,
    seed: u64,
    train: &'a [DbTask],
    test: &'a [DbTask],
    /// Keep every episode for `episodes.jsonl`.
    log: bool,
    /// The arena's `reuse_null` for this run.
    reuse_null: f64,
}

/// The `act` role's calls, tokens and fallbacks so far.
fn act_accounting(h: &LlmHub) -> (u64, u64, u64) {
    let c = h.accounting().role("act");
    (
        c.runs,
        c.prompt_tokens + c.completion_tokens + c.est_prompt_tokens + c.est_completion_tokens,
        c.fallbacks,
    )
}

/// Run one policy on one seed: every round over the training tasks in a
/// seeded order (noise injected after the first when asked), then the test
/// tasks with memory frozen, then the noise and Q-landscape figures.
fn run_policy(
    job: &PolicyJob<'_>,
    embedder: Arc<dyn Embedder>,
    hub: Arc<LlmHub>,
) -> Result<PolicyRun, ArenaError> {
    let (cfg, spec, seed, test) = (job.cfg, job.spec, job.seed, job.test);
    let deps = PolicyDeps {
        embedder,
        llm: hub.clone(),
        seed,
    };
    let policy = registry::build(spec, &deps)?;
    let mut lp = Loop {
        engine: Engine::ephemeral(),
        name: spec.to_string(),
        policy,
        caller: RoleCaller::new(hub.clone()),
        users: vec![User {
            id: UserId(0),
            token: "agent".into(),
            attributes: BTreeMap::new(),
        }],
        catalog: Catalog::default(),
        t: 0,
        noisy_positive: BTreeMap::new(),
        propagated: BTreeSet::new(),
        seed,
        reuse_null: job.reuse_null,
    };
    let rounds = cfg.epochs + usize::from(cfg.noise.is_some());
    let mut solved: BTreeSet<usize> = BTreeSet::new();
    let mut epochs = Vec::with_capacity(rounds);
    let mut episodes = Vec::new();
    let mut injected = 0;
    // Tasks solved in the first round, and in any round after it (the
    // stuck tasks under noise).
    let (mut solved_first, mut solved_later) = (BTreeSet::new(), BTreeSet::new());
    for e in 0..rounds {
        let (mut m, now) = train_round(&mut lp, job, &hub, e, &mut solved, &mut episodes)?;
        if e == 0 {
            solved_first = now;
            if let Some(share) = cfg.noise {
                injected = lp.inject_noise(share, seed)?;
            }
        } else {
            solved_later.extend(now);
        }
        memory_metrics(&lp.engine, &mut m);
        if cfg.noise.is_none() {
            m.noise_ratio = None;
        }
        epochs.push(m);
    }
    let transfer_sr = if test.is_empty() {
        None
    } else {
        let mut ok = 0usize;
        for t in test {
            if lp.episode(t, false)?.success {
                ok += 1;
            }
        }
        Some(ok as f64 / test.len() as f64)
    };
    let (entries, noisy_entries) = noisy_counts(&lp.engine);
    let noise = cfg.noise.map(|_| NoiseMetrics {
        injected,
        propagated: lp.propagated.len(),
        noisy_entries,
        entries,
        never_solved_after: job.train.len().saturating_sub(solved_later.len()),
        stuck: solved_first.difference(&solved_later).count(),
        positive_updates: if lp.noisy_positive.is_empty() {
            0.0
        } else {
            lp.noisy_positive.values().sum::<u64>() as f64 / lp.noisy_positive.len() as f64
        },
        final_noise_ratio: epochs.last().and_then(|m| m.noise_ratio).unwrap_or(0.0),
        last_sr: epochs.last().map(|m| m.sr).unwrap_or(0.0),
    });
    let q_bins = q_bins(&lp.engine);
    Ok(PolicyRun {
        spec: spec.to_string(),
        policy: String::new(),
        seed,
        reuse_null: job.reuse_null,
        epochs,
        transfer_sr,
        noise,
        q_bins,
        stats: lp.policy.stats(),
        episodes,
    })
}

/// Round `e` over the training tasks in a seeded order: success and
/// cumulative success rates, steps and the `act` role's cost; and the
/// tasks solved in this round.
fn train_round(
    lp: &mut Loop,
    job: &PolicyJob<'_>,
    hub: &LlmHub,
    e: usize,
    solved: &mut BTreeSet<usize>,
    episodes: &mut Vec<Value>,
) -> Result<(EpochMetrics, BTreeSet<usize>), ArenaError> {
    let train = job.train;
    let mut order: Vec<usize> = (0..train.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(
        job.seed.wrapping_mul(1_000_003).wrapping_add(e as u64),
    ));
    let (calls0, tok0, fb0) = act_accounting(hub);
    let mut ok = 0usize;
    let mut steps = 0usize;
    let mut now = BTreeSet::new();
    for &i in &order {
        let task = &train[i];
        let s = lp.episode(task, true)?;
        steps += s.steps;
        if s.success {
            ok += 1;
            solved.insert(task.index);
            now.insert(task.index);
        }
        if job.log {
            episodes.push(json!({
                "epoch": e + 1, "task": task.index, "success": s.success,
                "steps": s.steps, "sql": s.sql,
            }));
        }
    }
    let (calls1, tok1, fb1) = act_accounting(hub);
    let m = EpochMetrics {
        epoch: e + 1,
        sr: ok as f64 / train.len() as f64,
        csr: solved.len() as f64 / train.len() as f64,
        mean_steps: steps as f64 / train.len() as f64,
        calls: calls1 - calls0,
        tokens: tok1 - tok0,
        fallbacks: fb1 - fb0,
        ..EpochMetrics::default()
    };
    Ok((m, now))
}

/// All trajectory entries and the noisy ones among them.
fn noisy_counts(engine: &Engine) -> (usize, usize) {
    engine
        .state()
        .iter_all()
        .filter(|r| TrajectoryRecord::read(r).is_some())
        .fold((0, 0), |(all, noisy), r| {
            (all + 1, noisy + usize::from(is_noisy(Some(r))))
        })
}

fn q_bins(engine: &Engine) -> Vec<(usize, f64)> {
    let mut bins = vec![(0usize, 0usize); 5];
    for r in engine.state().iter_all() {
        if let Some(t) = TrajectoryRecord::read(r) {
            let b = ((t.q * 5.0).floor() as usize).min(4);
            bins[b].0 += 1;
            bins[b].1 += usize::from(t.success);
        }
    }
    bins.into_iter()
        .map(|(n, s)| {
            (
                n,
                if n == 0 {
                    f64::NAN
                } else {
                    s as f64 / n as f64
                },
            )
        })
        .collect()
}

/// The requested spec a run belongs to (older reports without `policy`:
/// the spec as run less its `delta=`).
pub(crate) fn base_name(run: &PolicyRun) -> String {
    if !run.policy.is_empty() {
        return run.policy.clone();
    }
    match PolicySpec::parse(&run.spec) {
        Ok(mut p) => {
            p.params.remove("delta");
            p.to_string()
        }
        Err(_) => run.spec.clone(),
    }
}

fn summarise(specs: &[PolicySpec], runs: &[PolicyRun]) -> Vec<PolicySummary> {
    let mut out = Vec::new();
    for s in specs {
        let name = s.to_string();
        let mine: Vec<&PolicyRun> = runs.iter().filter(|r| base_name(r) == name).collect();
        let n_epochs = mine.iter().map(|r| r.epochs.len()).min().unwrap_or(0);
        let pick = |e: usize, f: &dyn Fn(&EpochMetrics) -> Option<f64>| {
            let xs: Vec<f64> = mine.iter().filter_map(|r| f(&r.epochs[e])).collect();
            mean_ci(&xs)
        };
        type Getter = (&'static str, fn(&EpochMetrics) -> Option<f64>);
        let getters: [Getter; 8] = [
            ("sr", |m| Some(m.sr)),
            ("csr", |m| Some(m.csr)),
            ("cold_q", |m| Some(m.cold_q)),
            ("density", |m| Some(m.density)),
            ("memories_per_task", |m| Some(m.memories_per_task)),
            ("calls", |m| Some(m.calls as f64)),
            ("tokens", |m| Some(m.tokens as f64)),
            ("point_biserial", |m| m.point_biserial),
        ];
        let per_epoch: Vec<BTreeMap<String, MeanCi>> = (0..n_epochs)
            .map(|e| {
                getters
                    .iter()
                    .map(|(k, g)| (k.to_string(), pick(e, g)))
                    .collect()
            })
            .collect();
        let last = per_epoch.last().cloned().unwrap_or_default();
        let transfer: Vec<f64> = mine.iter().filter_map(|r| r.transfer_sr).collect();
        let noise = mine
            .iter()
            .all(|r| r.noise.is_some())
            .then(|| {
                let g = |f: fn(&NoiseMetrics) -> f64| {
                    mean_ci(
                        &mine
                            .iter()
                            .filter_map(|r| r.noise.as_ref().map(f))
                            .collect::<Vec<_>>(),
                    )
                };
                [
                    ("last_sr".to_string(), g(|n| n.last_sr)),
                    ("positive_updates".to_string(), g(|n| n.positive_updates)),
                    ("final_noise_ratio".to_string(), g(|n| n.final_noise_ratio)),
                    ("propagated".to_string(), g(|n| n.propagated as f64)),
                    ("injected".to_string(), g(|n| n.injected as f64)),
                    ("noisy_entries".to_string(), g(|n| n.noisy_entries as f64)),
                    ("entries".to_string(), g(|n| n.entries as f64)),
                    (
                        "never_solved_after".to_string(),
                        g(|n| n.never_solved_after as f64),
                    ),
                    ("stuck".to_string(), g(|n| n.stuck as f64)),
                ]
                .into_iter()
                .collect()
            })
            .filter(|_| !mine.is_empty());
        out.push(PolicySummary {
            spec: name,
            per_epoch,
            last,
            transfer_sr: (!transfer.is_empty()).then(|| mean_ci(&transfer)),
            noise,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::lifelong::types::{Cell, Expected, Literal};
    use evomem_kit::testing::{shared_dataset, TestEmbedder};

    fn bare_loop() -> Loop {
        loop_of(REFERENCE, 16)
    }

    #[test]
    fn a_report_names_the_data_without_the_machines_path() {
        let p = std::path::Path::new(
            "/home/someone/shared/data/lifelong-agent-bench/db_bench_data.json",
        );
        assert_eq!(data_name(p), "lifelong-agent-bench/db_bench_data.json");
        assert_eq!(data_name(std::path::Path::new("db.json")), "db.json");
        assert_eq!(data_name(std::path::Path::new("../x/db.json")), "x/db.json");
    }

    /// A loop of the policy `spec` over a test embedder of `dim`
    /// dimensions, offline roles, seed 1.
    fn loop_of(spec: &str, dim: usize) -> Loop {
        let hub = Arc::new(LlmHub::offline().with_estimate(true));
        let deps = PolicyDeps {
            embedder: Arc::new(TestEmbedder::new(dim)),
            llm: hub.clone(),
            seed: 1,
        };
        Loop {
            engine: Engine::ephemeral(),
            policy: registry::build(&PolicySpec::parse(spec).unwrap(), &deps).unwrap(),
            name: spec.into(),
            caller: RoleCaller::new(hub),
            users: vec![],
            catalog: Catalog::default(),
            t: 0,
            noisy_positive: BTreeMap::new(),
            propagated: BTreeSet::new(),
            seed: 1,
            reuse_null: REUSE_NULL_DEFAULT,
        }
    }

    /// A null trajectory of task `db-1` under `id` (what an episode that
    /// reused a null action writes): no answer, no steps, no `noisy` mark.
    fn null_record(id: &MemoryId, t: u64) -> MemoryRecord {
        let episode = evomem_core::Episode {
            task: evomem_core::TaskRequest {
                id: "db-1".into(),
                text: "count the rows".into(),
                attributes: BTreeMap::new(),
            },
            steps: vec![],
            answer: None,
        };
        evomem_policy::utility::trajectory_record(
            id.clone(),
            evomem_core::Namespace::user("agent"),
            &episode,
            false,
            0.5,
            evomem_core::Embedding {
                model: "test".into(),
                vector: vec![1.0, 0.0],
            },
            LogicalTime(t),
        )
    }

    /// Regression (issue 56): a slot that an episode reusing a null action
    /// wrote, and that a later such episode rewrote with `Replace` (which
    /// drops the `noisy` mark), was counted as propagated twice. It is one
    /// propagated record, marked noisy again.
    #[test]
    fn a_slot_rewritten_by_a_replace_counts_once_as_propagated() {
        let mut lp = bare_loop();
        let id = MemoryId::new("coord:user:agent:db-1:NAC");
        let create = PlannedOp::new(
            MemoryOp::Create {
                record: null_record(&id, 1),
            },
            "write",
            "test",
        );
        lp.engine
            .apply("test", vec![create], LogicalTime(1))
            .unwrap();
        lp.mark_propagated(std::slice::from_ref(&id)).unwrap();
        assert!(is_noisy(lp.engine.state().get(&id)));
        let replace = PlannedOp::new(
            MemoryOp::Replace {
                id: id.clone(),
                record: null_record(&id, 2),
            },
            "replace",
            "test",
        );
        lp.engine
            .apply("test", vec![replace], LogicalTime(2))
            .unwrap();
        assert!(
            !is_noisy(lp.engine.state().get(&id)),
            "Replace drops the mark"
        );
        lp.mark_propagated(std::slice::from_ref(&id)).unwrap();
        assert!(is_noisy(lp.engine.state().get(&id)), "marked again");
        assert_eq!(lp.propagated.len(), 1, "one record, counted once");
        assert_eq!(noisy_counts(&lp.engine), (1, 1));
    }

    /// `reuse_null` is the arena's key: taken out of the spec before the
    /// policy is built, a probability, 1 when absent.
    #[test]
    fn reuse_null_is_an_arena_key_of_the_spec() {
        let (p, r) =
            arena_keys(&PolicySpec::parse("romerl[reuse_null=0.5,pac=false]").unwrap()).unwrap();
        assert_eq!(p.to_string(), "romerl[pac=false]");
        assert_eq!(r, 0.5);
        let (_, r) = arena_keys(&PolicySpec::parse("memrl").unwrap()).unwrap();
        assert_eq!(r, REUSE_NULL_DEFAULT);
        for bad in ["memrl[reuse_null=2]", "memrl[reuse_null=x]"] {
            assert!(
                arena_keys(&PolicySpec::parse(bad).unwrap()).is_err(),
                "{bad}"
            );
        }
        // The draws are seeded: the same loop draws the same sequence.
        let draws = |seed: u64| {
            let mut lp = bare_loop();
            lp.seed = seed;
            (1..=50)
                .map(|t| {
                    lp.t = t;
                    lp.reuse_draw()
                })
                .collect::<Vec<f64>>()
        };
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(4));
        let half = draws(3).iter().filter(|d| **d < 0.5).count();
        assert!((10..=40).contains(&half), "{half}");
    }

    /// The leak canary: every task's ground truth is replaced by marked
    /// values; after two epochs of every trajectory policy, no memory
    /// record, no op and no policy stat may carry a mark. The judge fails
    /// every task (its truth is the canary), so the only thing that comes
    /// back is a success bit of 0.
    #[test]
    fn the_ground_truth_never_reaches_memory() {
        let Some(dir) = shared_dataset("lifelong-agent-bench") else {
            return;
        };
        let mut tasks = load_tasks(&dir.join("db_bench_data.json")).unwrap();
        tasks.truncate(24);
        for t in &mut tasks {
            t.truth.sql = format!("SELECT 'CANARY-SQL-{}'", t.index);
            t.truth.expected = match &t.truth.expected {
                Expected::Md5(_) => Expected::Md5(format!("canarymd5{:024}", t.index)),
                Expected::Rows(_) => Expected::Rows(vec![vec![Literal {
                    cell: Cell::Text("CANARY-ROW".into()),
                    text: "'CANARY-ROW'".into(),
                }]]),
            };
        }
        for spec in ["memrl", "memrl[cap=4,ucb=true]", "romerl"] {
            let mut lp = loop_of(spec, 64);
            for _ in 0..2 {
                for t in &tasks {
                    let s = lp.episode(t, true).unwrap();
                    assert!(!s.success, "the canary truth is never met");
                }
            }
            let state: Vec<&MemoryRecord> = lp.engine.state().iter_all().collect();
            assert!(!state.is_empty(), "{spec}: memory was written");
            let dump = format!(
                "{}{}{}",
                serde_json::to_string(&state).unwrap(),
                serde_json::to_string(lp.engine.log()).unwrap(),
                lp.policy.stats()
            );
            for mark in ["CANARY", "canarymd5"] {
                assert!(!dump.contains(mark), "{spec}: `{mark}` leaked into memory");
            }
        }
    }
}
