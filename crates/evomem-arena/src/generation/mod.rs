//! Arena A: generation feedback, as a seeded simulator
//! (`tide-recommendation-feedback-evolves-memory`, the controlled
//! experiment of Figure 4; issue 14).
//!
//! **World** ([`world`]). Each episode fixes a product, channel and
//! placement and three audiences (three matched contexts). A request names
//! product, audience, channel, placement and campaign stage (`warmup`
//! during a festival, else `regular`). A material makes four content
//! decisions (selling point, information density, style, call to action);
//! their hidden true effects on logit CTR depend on the audience (selling
//! point strongly, the others mildly), CVR moves with half the content
//! effect. Environment shocks move every material alike: a festival
//! warm-up (+0.6 logit CTR), hotspots (+0.5, 12% of steps), traffic buckets
//! (half, normal or double impressions) and, in the stale episodes, a
//! recommender version change 40% in.
//!
//! **Lifecycle.** A material decided at step t is delivered in four staged
//! windows: exposure (impressions, t+1), clicks (t+2), early conversions
//! (t+3) and delayed conversions (t+4), 2,000 impressions in the normal bucket, binomial noise throughout, each
//! window stamped with its delivery context and recommender version.
//!
//! **Loop** (the same engine loop for every method). Per learning step: due
//! feedback windows are delivered (`Policy::feedback`, ops applied by the
//! engine); the policy recalls guidelines for the step's request; the frozen
//! generator (`tide_generate`, sampling with a seed per step) composes the
//! material and records its usage trace; the lifecycle is scheduled. The
//! platform's control traffic (a randomised exploration bucket in the same
//! context: every decision drawn uniformly, no memory) is delivered the
//! same way with bucket `control` and an empty trace. Every method sees the
//! same tasks, initial memory and control traffic, and the feedback of a
//! material is drawn from common random numbers per step: the same material
//! gets the same feedback under every method.
//!
//! **Episodes.** 20 controlled episodes, the five noise types of
//! [`world::NoiseType`] in turn (wrong guideline; over-broad guideline true
//! in one audience; environment-caused win; stale after a recommender
//! change; retrieved-but-unused, tentatively worded guideline), each
//! injected once into a seed memory of true guidelines.
//!
//! **Metrics** (means and 95% CIs over seeds).
//!
//! - *Responsibility F1*: per matured material, the method's credited set
//!   (targets of its `credit` ops) against the simulator's true responsible
//!   set, pooled per episode. The truth comes from what no method can read:
//!   a guideline the generator took up is responsible when leaving it out
//!   changes the expected true effect on its dimension (the hidden effects
//!   weighted by the generator's sampling law, [`world::World::responsible`])
//!   by at least 0.1 logit. It is not a replay with the episode's draws,
//!   so it is not the method's own test.
//! - *Bad-Memory Survival*: the share of episodes in which, at the end, a
//!   live guideline (the injected one or any descendant) still prescribes
//!   the injected decision where it is harmful (for the over-broad one:
//!   outside the audience where it holds).
//! - *Correct Edit*: the share of episodes whose injected guideline got the
//!   right edit: the bad decision no longer survives; for the over-broad
//!   one, a live guideline narrowed to the audience where it holds keeps
//!   it; for the unused one, it was never credited for a material the
//!   generator made without it.
//! - *Future MEG*: mean utility on strictly future tasks (memory frozen,
//!   neutral environment, utility = true CTR×CVR of the material over the
//!   best material's) minus the static reference's; *win rate* and
//!   *negative-transfer rate*: the share of episodes above / below it.
//!
//! **Methods**: static (`tide[edit=none]`), append-only
//! (`tide[edit=append]`), retrieved-memory attribution
//! (`tide[attribution=retrieved]`), `tide`, `tide[cf=false]`,
//! `tide[trace=false]`.
//!
//! **Why counterfactual replay matters here.** The generator's usage trace
//! names every guideline it took up on a dimension, the overruled ones too
//! ([`evomem_policy::families::tide::generator`]), and TIDE's Align links a
//! guideline to a decision's dimension whatever value it prescribes; the
//! initial memory holds specific true guidelines on the injected
//! guideline's dimension for two audiences ([`world`]). So the injected
//! guideline is often used and aligned on materials whose decision a
//! specific guideline made. TIDE's leave-one-out replay (from the traced
//! guidelines) finds it was not pivotal there and credits it only where it
//! decided; `tide[cf=false]` holds it responsible for the specific
//! guidelines' wins as well, so its negative evidence is diluted: it looks
//! helpful in the audiences where it was overruled and harmful only in the
//! one where it decided. The edit rule then wants to narrow it to an
//! audience where it looks helpful, but there it would contradict the
//! specific guideline (governance rejects that), so it is kept: removing
//! it does not improve utility by its own evidence. It survives and keeps
//! deciding where no specific guideline applies. The specific guidelines
//! it shares credit with prescribe the generator's default value, so the
//! blame they collect in return costs no utility. An
//! earlier version of this arena traced only the deciding guideline,
//! Align required the exact value, and the injected guideline was the only
//! one on its dimension: Used ∧ Align was then already the leave-one-out
//! answer (only redundant twins differed), and both variants removed the
//! injected guideline equally often (survival 0.05 against 0.03).
//!
//! **What it gives** on the held-out seeds (`evomem arena generation
//! --episodes 20 --seeds 20 --seed 1000`; the figures, the paired table and
//! the verdicts are in `docs/results-tide.md`, not repeated here so that
//! they cannot go stale): the orderings on Correct Edit and Bad-Memory
//! Survival hold on differences paired by seed, the one on Responsibility
//! F1 does not hold for the trace ablation (level), and TIDE's Future MEG
//! gain over the trace ablation is small. Without usage traces the replay
//! runs over everything retrieved (both sides are replays, G(M) against
//! G(M \ {m})), so a guideline the generator skipped binds in it and takes
//! the credit: the over-broad guideline is never narrowed, and the
//! tentative, harmful one collects wins it did not cause and is restated
//! firmly by the revise step (the by-noise table of the report shows it).
//! An earlier version compared the replay without m against the
//! material's own decision; with the trace that is the same answer, but
//! without it the material already told the replay what the generator had
//! skipped, and the trace ablation's Future MEG was not separated from
//! TIDE's (+0.118 against +0.119).

pub mod world;

use crate::error::ArenaError;
use crate::plot::{line_chart, Series};
use crate::stats::{mean_ci, MeanCi};
use evomem_core::{
    Catalog, DecisionKind, DecisionQuery, Embedder, Episode, Feedback, LogicalTime, MemoryId,
    MemoryOp, Outcome, PlannedOp, Policy, PolicyCtx, TaskRequest, UsageTrace, UsedMemory, User,
    UserId,
};
use evomem_kit::RoleCaller;
use evomem_llm::LlmHub;
use evomem_policy::families::tide::generate::{
    generator_input, guideline_in, seed_record, BUCKET, CONTROL_BUCKET,
};
use evomem_policy::families::tide::generator::Adherence;
use evomem_policy::families::tide::guideline::Guideline;
use evomem_policy::families::tide::roles::GenerateRole;
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use evomem_store::Engine;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use world::{NoiseType, StepEnv, World};

/// The six methods, in report order.
pub const METHODS: [&str; 6] = [
    "tide[edit=none]",
    "tide[edit=append]",
    "tide[attribution=retrieved]",
    "tide",
    "tide[cf=false]",
    "tide[trace=false]",
];

/// The reference of Future MEG.
pub const REFERENCE: &str = "tide[edit=none]";
/// The method the ablations are paired against.
pub const TIDE: &str = "tide";

/// Report label of a method spec.
pub fn label(spec: &str) -> &str {
    match spec {
        "tide[edit=none]" => "static",
        "tide[edit=append]" => "append-only",
        "tide[attribution=retrieved]" => "retrieved-memory attribution",
        "tide" => "TIDE",
        "tide[cf=false]" => "TIDE without counterfactual replay",
        "tide[trace=false]" => "TIDE without usage traces",
        other => other,
    }
}

/// Settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationConfig {
    /// Episodes per seed (the paper: 20).
    pub episodes: usize,
    /// Seeds.
    pub seeds: usize,
    /// Base seed.
    pub seed: u64,
    /// Learning steps per episode.
    pub learn: usize,
    /// Strictly future tasks per episode.
    pub future: usize,
    /// Method specs (the reference is always run).
    pub methods: Vec<String>,
    /// The world's sampling generator: how often it takes up a tentatively
    /// worded guideline and any other one. The same for every method; no
    /// method reads it.
    #[serde(default)]
    pub adherence: Adherence,
    /// The truth's responsibility threshold (logit CTR; the world's
    /// `TRUE_EFFECT_MIN` by default). No method reads it.
    #[serde(default = "default_effect_min")]
    pub effect_min: f64,
}

fn default_effect_min() -> f64 {
    world::TRUE_EFFECT_MIN
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            episodes: 20,
            seeds: 5,
            seed: 42,
            learn: 150,
            future: 30,
            methods: METHODS.iter().map(|s| s.to_string()).collect(),
            adherence: Adherence::default(),
            effect_min: world::TRUE_EFFECT_MIN,
        }
    }
}

/// One method on one episode of one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeResult {
    /// Seed.
    pub seed: u64,
    /// Episode.
    pub episode: usize,
    /// Noise type.
    pub noise: NoiseType,
    /// Method spec.
    pub method: String,
    /// Responsibility counts over matured materials.
    pub tp: usize,
    /// See `tp`.
    pub fp: usize,
    /// See `tp`.
    pub fn_: usize,
    /// Matured materials with a true responsible set.
    pub scored: usize,
    /// The injected guideline got the right edit.
    pub correct_edit: bool,
    /// The injected decision still lives where it is harmful.
    pub bad_survives: bool,
    /// The injected guideline was ever credited.
    pub target_credited: bool,
    /// ... for a material it did not take part in.
    pub target_miscredited: bool,
    /// Mean utility on the future tasks.
    pub future_utility: f64,
    /// Guidelines in memory at the end.
    pub memory: usize,
    /// Memory size after each learning step.
    #[serde(skip)]
    pub memory_curve: Vec<usize>,
    /// Ops applied, by label.
    pub ops: BTreeMap<String, usize>,
}

impl EpisodeResult {
    /// Responsibility F1 (None when nothing was credited or true).
    pub fn f1(&self) -> Option<f64> {
        let d = 2 * self.tp + self.fp + self.fn_;
        (d > 0).then(|| 2.0 * self.tp as f64 / d as f64)
    }
}

/// Per noise type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseSummary {
    /// Correct Edit.
    pub correct_edit: f64,
    /// Bad-Memory Survival.
    pub bad_survival: f64,
    /// Future MEG.
    pub meg: f64,
}

/// One method over every seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodSummary {
    /// Spec.
    pub method: String,
    /// Label.
    pub label: String,
    /// Responsibility F1 (None for methods that assign no credit).
    pub f1: Option<MeanCi>,
    /// Responsibility precision and recall.
    pub precision: Option<MeanCi>,
    /// See `precision`.
    pub recall: Option<MeanCi>,
    /// Correct Edit rate.
    pub correct_edit: MeanCi,
    /// Bad-Memory Survival.
    pub bad_survival: MeanCi,
    /// Future MEG against the static reference.
    pub meg: MeanCi,
    /// TIDE's future utility minus this method's, paired by episode (per
    /// seed the mean over its episodes; CI over seeds); `None` for `tide`
    /// itself or when `tide` did not run.
    pub gap_to_tide: Option<MeanCi>,
    /// Win rate.
    pub win_rate: MeanCi,
    /// Negative-transfer rate.
    pub negative_transfer: MeanCi,
    /// Mean future utility.
    pub future_utility: MeanCi,
    /// Final memory size.
    pub memory: MeanCi,
    /// Per noise type.
    pub by_noise: BTreeMap<String, NoiseSummary>,
    /// Mean memory size per learning step.
    pub memory_curve: Vec<f64>,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationReport {
    /// Settings.
    pub config: GenerationConfig,
    /// One per method.
    pub methods: Vec<MethodSummary>,
    /// Every other method against `tide`, paired by seed ([`PairedToTide`]).
    #[serde(default)]
    pub paired: Vec<PairedToTide>,
    /// Every method on every episode.
    pub episodes: Vec<EpisodeResult>,
}

/// `tide` minus one other method, paired by seed: per seed, the metric of
/// each method over that seed's episodes (F1 pooled over them, rates and
/// MEG averaged), then the mean difference over the seeds both ran with a
/// Student-t interval ([`mean_ci`]). Every seed shares its worlds between
/// the methods, so the paired interval is the one that judges an
/// ordering; marginal intervals overlap where seeds differ more than the
/// methods do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedToTide {
    /// The other method.
    pub method: String,
    /// F1(tide) − F1(method); `None` when the method assigns no credit.
    pub f1: Option<MeanCi>,
    /// Correct Edit(tide) − Correct Edit(method).
    pub correct_edit: Option<MeanCi>,
    /// Bad-Memory Survival(tide) − Bad-Memory Survival(method) (negative:
    /// tide keeps fewer bad memories).
    pub bad_survival: Option<MeanCi>,
    /// Future MEG(tide) − Future MEG(method).
    pub meg: MeanCi,
}

/// Per seed, a metric of one method: `f` of the seed's episodes.
fn seed_values(
    eps: &[EpisodeResult],
    method: &str,
    seeds: &[u64],
    f: &dyn Fn(&[&EpisodeResult]) -> Option<f64>,
) -> BTreeMap<u64, f64> {
    seeds
        .iter()
        .filter_map(|s| {
            let mine: Vec<&EpisodeResult> = eps
                .iter()
                .filter(|r| r.method == method && r.seed == *s)
                .collect();
            if mine.is_empty() {
                return None;
            }
            f(&mine).map(|v| (*s, v))
        })
        .collect()
}

/// [`PairedToTide`] for every method but `tide` and the reference; empty
/// when `tide` did not run.
fn paired_to_tide(
    cfg: &GenerationConfig,
    methods: &[String],
    eps: &[EpisodeResult],
) -> Vec<PairedToTide> {
    if !methods.iter().any(|m| m == TIDE) {
        return Vec::new();
    }
    let seeds: Vec<u64> = (0..cfg.seeds as u64)
        .map(|s| cfg.seed.wrapping_add(s))
        .collect();
    let reference: BTreeMap<(u64, usize), f64> = eps
        .iter()
        .filter(|r| r.method == REFERENCE)
        .map(|r| ((r.seed, r.episode), r.future_utility))
        .collect();
    let avg = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let b = |x: bool| f64::from(u8::from(x));
    let f1 = |rs: &[&EpisodeResult]| {
        let (tp, fp, fn_) = rs
            .iter()
            .fold((0, 0, 0), |a, r| (a.0 + r.tp, a.1 + r.fp, a.2 + r.fn_));
        let d = 2 * tp + fp + fn_;
        (d > 0).then(|| 2.0 * tp as f64 / d as f64)
    };
    let edit = |rs: &[&EpisodeResult]| avg(rs.iter().map(|r| b(r.correct_edit)).collect());
    let bad = |rs: &[&EpisodeResult]| avg(rs.iter().map(|r| b(r.bad_survives)).collect());
    let meg = |rs: &[&EpisodeResult]| {
        avg(rs
            .iter()
            .filter_map(|r| {
                reference
                    .get(&(r.seed, r.episode))
                    .map(|b| r.future_utility - b)
            })
            .collect())
    };
    let diff = |m: &str, f: &dyn Fn(&[&EpisodeResult]) -> Option<f64>| {
        let t = seed_values(eps, TIDE, &seeds, f);
        let o = seed_values(eps, m, &seeds, f);
        let d: Vec<f64> = t
            .iter()
            .filter_map(|(s, tv)| o.get(s).map(|ov| tv - ov))
            .collect();
        mean_ci(&d)
    };
    methods
        .iter()
        .filter(|m| *m != TIDE && *m != REFERENCE)
        .map(|m| {
            let credits = credits_assigned(m);
            PairedToTide {
                method: m.clone(),
                f1: credits.then(|| diff(m, &f1)),
                correct_edit: credits.then(|| diff(m, &edit)),
                bad_survival: credits.then(|| diff(m, &bad)),
                meg: diff(m, &meg),
            }
        })
        .collect()
}

fn credits_assigned(spec: &str) -> bool {
    !spec.contains("edit=none") && !spec.contains("edit=append")
}

/// The policy's recall for a generation request at step `t`, read as the
/// guidelines the frozen generator is handed (learning and future steps
/// alike).
fn recall_guidelines(
    policy: &mut dyn Policy,
    engine: &Engine,
    (catalog, users): (&Catalog, &[User]),
    decision_id: u64,
    t: u64,
    request: &TaskRequest,
) -> Result<Vec<evomem_policy::families::tide::generator::GuidelineIn>, ArenaError> {
    let q = DecisionQuery {
        decision_id,
        user: UserId(0),
        at: LogicalTime(t),
        instruction: None,
        kind: DecisionKind::Generate {
            request: request.clone(),
        },
    };
    let ctx = PolicyCtx {
        memory: engine.state(),
        catalog,
        users,
        now: LogicalTime(t),
    };
    let recall = policy.recall(&ctx, &q)?;
    Ok(recall
        .context
        .entries
        .iter()
        .filter_map(|e| e.memory.as_ref().and_then(|id| engine.state().get(id)))
        .filter_map(guideline_in)
        .collect())
}

/// Run one method on one world: the learning steps (feedback delivered as
/// it matures, one decision and one control per step), then the strictly
/// future tasks on frozen memory, then the scores.
pub fn run_method(
    world: &World,
    spec: &str,
    seed: u64,
    embedder: Arc<dyn Embedder>,
) -> Result<EpisodeResult, ArenaError> {
    let mut run = EpisodeRun::new(world, spec, seed, embedder)?;
    let horizon = world.steps.len() as u64 + 6;
    for t in 0..horizon {
        run.deliver_due(t)?;
        let Some((aud, env)) = world.steps.get(t as usize) else {
            if run.queue.is_empty() {
                break;
            }
            continue;
        };
        run.decide(t, aud, env)?;
        run.memory_curve.push(run.engine.state().len());
    }
    let future_utility = run.future_utility(horizon)?;
    Ok(run.score(future_utility))
}

/// One method's run on one world, between its steps.
struct EpisodeRun<'w> {
    world: &'w World,
    spec: String,
    seed: u64,
    policy: Box<dyn Policy>,
    /// The frozen generator, sampling with the world's take-up
    /// probabilities (the same for every method).
    generator: RoleCaller,
    engine: Engine,
    catalog: Catalog,
    users: Vec<User>,
    /// Feedback by (due step, arrival order).
    queue: BTreeMap<(u64, u64), Feedback>,
    seq: u64,
    /// Per decision: the guidelines the method credited, and the ground
    /// truth (the world's responsible guidelines).
    credited: BTreeMap<u64, BTreeSet<String>>,
    truth: BTreeMap<u64, Vec<String>>,
    /// Per decision: the guidelines the generator used.
    live_used: BTreeMap<u64, BTreeSet<String>>,
    ops_by_label: BTreeMap<String, usize>,
    target_credited: bool,
    target_miscredited: bool,
    memory_curve: Vec<usize>,
}

impl<'w> EpisodeRun<'w> {
    /// The method built, and memory seeded with the world's guidelines.
    fn new(
        world: &'w World,
        spec: &str,
        seed: u64,
        embedder: Arc<dyn Embedder>,
    ) -> Result<Self, ArenaError> {
        let deps = PolicyDeps {
            embedder,
            llm: Arc::new(LlmHub::offline()),
            seed,
        };
        let policy = registry::build(&PolicySpec::parse(spec)?, &deps)?;
        let mut engine = Engine::ephemeral();
        let seeds: Vec<PlannedOp> = world
            .seeds
            .iter()
            .map(|s| {
                PlannedOp::new(
                    MemoryOp::Create {
                        record: seed_record(
                            &s.id,
                            s.decisions.clone(),
                            s.conditions.clone(),
                            &s.text,
                            LogicalTime(0),
                        ),
                    },
                    "seed",
                    "initial memory",
                )
            })
            .collect();
        engine.apply("arena:seed", seeds, LogicalTime(0))?;
        Ok(Self {
            world,
            spec: spec.to_string(),
            seed,
            policy,
            generator: RoleCaller::new(Arc::new(LlmHub::offline())),
            engine,
            catalog: Catalog::default(),
            users: vec![User {
                id: UserId(0),
                token: "agent".into(),
                attributes: BTreeMap::new(),
            }],
            queue: BTreeMap::new(),
            seq: 0,
            credited: BTreeMap::new(),
            truth: BTreeMap::new(),
            live_used: BTreeMap::new(),
            ops_by_label: BTreeMap::new(),
            target_credited: false,
            target_miscredited: false,
            memory_curve: Vec::with_capacity(world.steps.len()),
        })
    }

    /// Deliver the feedback due by step `t`, noting what the method credits.
    fn deliver_due(&mut self, t: u64) -> Result<(), ArenaError> {
        let due: Vec<(u64, u64)> = self.queue.range(..(t + 1, 0)).map(|(k, _)| *k).collect();
        for k in due {
            let Some(fb) = self.queue.remove(&k) else {
                continue;
            };
            let ctx = PolicyCtx {
                memory: self.engine.state(),
                catalog: &self.catalog,
                users: &self.users,
                now: LogicalTime(t),
            };
            let ops = self.policy.feedback(&ctx, &fb)?;
            for o in &ops {
                *self.ops_by_label.entry(o.label.clone()).or_insert(0) += 1;
                if o.label == "credit" {
                    self.note_credit(fb.decision_id, o.op.target().as_str());
                }
            }
            if !ops.is_empty() {
                self.engine.apply(&self.spec, ops, LogicalTime(t))?;
            }
        }
        Ok(())
    }

    fn note_credit(&mut self, decision_id: u64, id: &str) {
        if id == self.world.target.id {
            self.target_credited = true;
            if !self
                .live_used
                .get(&decision_id)
                .is_some_and(|u| u.contains(id))
            {
                self.target_miscredited = true;
            }
        }
        self.credited
            .entry(decision_id)
            .or_default()
            .insert(id.to_string());
    }

    /// Step `t`: the method's recall goes to the generator, the world
    /// decides who was responsible, and the material's lifecycle (and a
    /// control's in the same context) is queued as delayed feedback.
    fn decide(&mut self, t: u64, aud: &str, env: &StepEnv) -> Result<(), ArenaError> {
        let world = self.world;
        let request = TaskRequest {
            id: format!("e{}:t{t}", world.episode),
            text: format!(
                "Write a {} card ({} placement) for the {}, for {aud} shoppers.",
                world.channel, world.placement, world.product
            ),
            attributes: world.attributes(aud, env.festival),
        };
        let decision_id = 2 * t + 1;
        let guidelines = recall_guidelines(
            self.policy.as_mut(),
            &self.engine,
            (&self.catalog, &self.users),
            decision_id,
            t,
            &request,
        )?;
        let sample = world.draw_seed ^ t.wrapping_mul(0x5851_f42d_4c95_7f2d);
        let input = generator_input(&request, guidelines, Some(sample), world.adherence);
        let out = self.generator.call(&GenerateRole, &input, None)?;
        if !world.broken(t as usize) {
            let r = world.responsible(aud, env.rec_version, &out.used, &input);
            self.truth.insert(decision_id, r);
        }
        let mut used: Vec<String> = out.used.iter().map(|u| u.id.clone()).collect();
        used.sort();
        used.dedup();
        self.live_used
            .insert(decision_id, used.iter().cloned().collect());
        let trace = UsageTrace {
            decision_id,
            user: Some(UserId(0)),
            at: LogicalTime(t),
            used: used
                .into_iter()
                .map(|id| UsedMemory {
                    id: MemoryId::new(id),
                    weight: 1.0,
                })
                .collect(),
        };
        let material = Material {
            decision_id,
            t,
            request: &request,
            text: &out.material,
            trace: &trace,
        };
        self.queue_lifecycle(&material, world.lifecycle(t as usize, 0, &out.decisions));
        // Control traffic in the same context.
        let cdec = world.control_decisions(t as usize);
        let mut creq = request.clone();
        creq.id = format!("e{}:t{t}:control", world.episode);
        creq.attributes.insert(BUCKET.into(), CONTROL_BUCKET.into());
        let cmat = world.control_material(t as usize, &cdec);
        let ctrace = UsageTrace {
            decision_id: decision_id + 1,
            user: Some(UserId(0)),
            at: LogicalTime(t),
            used: Vec::new(),
        };
        let control = Material {
            decision_id: decision_id + 1,
            t,
            request: &creq,
            text: &cmat,
            trace: &ctrace,
        };
        self.queue_lifecycle(&control, world.lifecycle(t as usize, 1, &cdec));
        Ok(())
    }

    fn queue_lifecycle(
        &mut self,
        m: &Material<'_>,
        stages: impl IntoIterator<Item = (LogicalTime, &'static str, BTreeMap<String, f64>)>,
    ) {
        for (at, stage, objectives) in stages {
            self.seq += 1;
            self.queue
                .insert((at.0, self.seq), feedback(m, at, stage, objectives));
        }
    }

    /// Mean utility of the strictly future tasks, memory frozen.
    fn future_utility(&mut self, horizon: u64) -> Result<f64, ArenaError> {
        let world = self.world;
        let mut utility = 0.0;
        for (h, aud) in world.future.iter().enumerate() {
            let request = TaskRequest {
                id: format!("e{}:future{h}", world.episode),
                text: format!(
                    "Write a {} card for the {}, for {aud} shoppers.",
                    world.channel, world.product
                ),
                attributes: world.attributes(aud, false),
            };
            let t = horizon + h as u64;
            let guidelines = recall_guidelines(
                self.policy.as_mut(),
                &self.engine,
                (&self.catalog, &self.users),
                1_000_000 + h as u64,
                t,
                &request,
            )?;
            let sample =
                world.draw_seed ^ (1 << 40) ^ (h as u64).wrapping_mul(0x5851_f42d_4c95_7f2d);
            let out = self.generator.call(
                &GenerateRole,
                &generator_input(&request, guidelines, Some(sample), world.adherence),
                None,
            )?;
            utility += world.utility(aud, &out.decisions);
        }
        Ok(utility / world.future.len().max(1) as f64)
    }

    /// Responsibility counts against the truth, and whether the injected
    /// bad memory was edited correctly or survives.
    fn score(self, future_utility: f64) -> EpisodeResult {
        let world = self.world;
        let assigned = credits_assigned(&self.spec);
        let (mut tp, mut fp, mut fn_, mut scored) = (0, 0, 0, 0);
        if assigned {
            for (d, truth_set) in &self.truth {
                let empty = BTreeSet::new();
                let pred = self.credited.get(d).unwrap_or(&empty);
                let t: BTreeSet<&String> = truth_set.iter().collect();
                scored += usize::from(!t.is_empty());
                tp += pred.iter().filter(|p| t.contains(p)).count();
                fp += pred.iter().filter(|p| !t.contains(p)).count();
                fn_ += t.iter().filter(|x| !pred.contains(**x)).count();
            }
        }
        let state = self.engine.state();
        // The bad decision survives when any live guideline (the injected
        // one or a descendant: narrowed, crossed over, appended) still
        // prescribes it where it is harmful.
        let bad_alive = state.iter_all().filter_map(Guideline::read).any(|g| {
            g.decisions.get(&world.target_dim) == Some(&world.target_value)
                && (world.noise != NoiseType::OverBroad
                    || g.conditions.get("audience") != world.true_audience.as_ref())
        });
        let correct_edit = match world.noise {
            NoiseType::OverBroad => {
                !bad_alive
                    && state.iter_all().filter_map(Guideline::read).any(|g| {
                        g.decisions.get(&world.target_dim) == Some(&world.target_value)
                            && g.conditions.get("audience") == world.true_audience.as_ref()
                    })
            }
            NoiseType::Unused => !bad_alive && !self.target_miscredited,
            NoiseType::Wrong | NoiseType::EnvWin | NoiseType::Stale => !bad_alive,
        } && assigned;
        EpisodeResult {
            seed: self.seed,
            episode: world.episode,
            noise: world.noise,
            method: self.spec.clone(),
            tp,
            fp,
            fn_,
            scored,
            correct_edit,
            bad_survives: bad_alive,
            target_credited: self.target_credited,
            target_miscredited: self.target_miscredited,
            future_utility,
            memory: state.len(),
            memory_curve: self.memory_curve,
            ops: self.ops_by_label,
        }
    }
}

/// A material (or a control) whose lifecycle becomes delayed feedback.
struct Material<'a> {
    decision_id: u64,
    /// The step it was decided at.
    t: u64,
    request: &'a TaskRequest,
    text: &'a str,
    trace: &'a UsageTrace,
}

fn feedback(
    m: &Material<'_>,
    at: LogicalTime,
    stage: &str,
    objectives: BTreeMap<String, f64>,
) -> Feedback {
    Feedback {
        decision_id: m.decision_id,
        user: Some(UserId(0)),
        decided_at: LogicalTime(m.t),
        observed_at: at,
        outcome: Outcome {
            reward: 0.0,
            objectives,
            stage: Some(stage.to_string()),
            episode: Some(Episode {
                task: m.request.clone(),
                steps: Vec::new(),
                answer: Some(m.text.to_string()),
            }),
            ..Outcome::default()
        },
        trace: m.trace.clone(),
    }
}

/// Run every method on every episode of every seed.
pub fn run(
    cfg: &GenerationConfig,
    embedder: Arc<dyn Embedder>,
) -> Result<GenerationReport, ArenaError> {
    if cfg.episodes == 0 || cfg.seeds == 0 || cfg.learn < 10 || cfg.future == 0 {
        return Err(ArenaError::Config(format!(
            "generation: need episodes, seeds and future tasks >= 1 and at least 10 learning steps (got {}, {}, {}, {})",
            cfg.episodes, cfg.seeds, cfg.future, cfg.learn
        )));
    }
    let mut methods: Vec<String> = vec![REFERENCE.to_string()];
    for m in &cfg.methods {
        if !methods.contains(m) {
            methods.push(m.clone());
        }
    }
    for m in &methods {
        let spec = PolicySpec::parse(m)?;
        registry::family(&spec.name)?.check(&spec)?;
    }
    let jobs: Vec<(u64, usize)> = (0..cfg.seeds as u64)
        .flat_map(|s| (0..cfg.episodes).map(move |e| (cfg.seed.wrapping_add(s), e)))
        .collect();
    let results: Vec<Result<Vec<EpisodeResult>, ArenaError>> = jobs
        .par_iter()
        .map(|(seed, e)| {
            let world = World::new(*seed, *e, cfg.learn, cfg.future)
                .with_adherence(cfg.adherence)
                .with_effect_min(cfg.effect_min);
            methods
                .iter()
                .map(|m| run_method(&world, m, *seed, embedder.clone()))
                .collect()
        })
        .collect();
    let mut episodes = Vec::new();
    for r in results {
        episodes.extend(r?);
    }
    let summaries = summarise(cfg, &methods, &episodes);
    let paired = paired_to_tide(cfg, &methods, &episodes);
    Ok(GenerationReport {
        config: cfg.clone(),
        methods: summaries,
        paired,
        episodes,
    })
}

fn summarise(
    cfg: &GenerationConfig,
    methods: &[String],
    eps: &[EpisodeResult],
) -> Vec<MethodSummary> {
    let reference: BTreeMap<(u64, usize), f64> = eps
        .iter()
        .filter(|r| r.method == REFERENCE)
        .map(|r| ((r.seed, r.episode), r.future_utility))
        .collect();
    let tide: BTreeMap<(u64, usize), f64> = eps
        .iter()
        .filter(|r| r.method == TIDE)
        .map(|r| ((r.seed, r.episode), r.future_utility))
        .collect();
    let seeds: Vec<u64> = (0..cfg.seeds as u64)
        .map(|s| cfg.seed.wrapping_add(s))
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    methods
        .iter()
        .map(|m| {
            let mine: Vec<&EpisodeResult> = eps.iter().filter(|r| &r.method == m).collect();
            let per_seed = |f: &dyn Fn(&EpisodeResult) -> Option<f64>| -> MeanCi {
                let xs: Vec<f64> = seeds
                    .iter()
                    .filter_map(|s| {
                        let v: Vec<f64> = mine
                            .iter()
                            .filter(|r| r.seed == *s)
                            .filter_map(|r| f(r))
                            .collect();
                        (!v.is_empty()).then(|| mean(&v))
                    })
                    .collect();
                mean_ci(&xs)
            };
            let meg = |r: &EpisodeResult| {
                reference
                    .get(&(r.seed, r.episode))
                    .map(|b| r.future_utility - b)
            };
            let b = |x: bool| f64::from(u8::from(x));
            let credits = credits_assigned(m);
            let pooled = |f: &dyn Fn(usize, usize, usize) -> Option<f64>| -> MeanCi {
                let xs: Vec<f64> = seeds
                    .iter()
                    .filter_map(|s| {
                        let (tp, fp, fn_) = mine
                            .iter()
                            .filter(|r| r.seed == *s)
                            .fold((0, 0, 0), |a, r| (a.0 + r.tp, a.1 + r.fp, a.2 + r.fn_));
                        f(tp, fp, fn_)
                    })
                    .collect();
                mean_ci(&xs)
            };
            let mut by_noise = BTreeMap::new();
            for n in NoiseType::ALL {
                let v: Vec<&&EpisodeResult> = mine.iter().filter(|r| r.noise == n).collect();
                if v.is_empty() {
                    continue;
                }
                by_noise.insert(
                    n.name().to_string(),
                    NoiseSummary {
                        correct_edit: mean(
                            &v.iter().map(|r| b(r.correct_edit)).collect::<Vec<_>>(),
                        ),
                        bad_survival: mean(
                            &v.iter().map(|r| b(r.bad_survives)).collect::<Vec<_>>(),
                        ),
                        meg: mean(&v.iter().filter_map(|r| meg(r)).collect::<Vec<_>>()),
                    },
                );
            }
            let steps = mine.iter().map(|r| r.memory_curve.len()).max().unwrap_or(0);
            let memory_curve = (0..steps)
                .map(|i| {
                    mean(
                        &mine
                            .iter()
                            .filter_map(|r| r.memory_curve.get(i).map(|x| *x as f64))
                            .collect::<Vec<_>>(),
                    )
                })
                .collect();
            MethodSummary {
                method: m.clone(),
                label: label(m).to_string(),
                f1: credits.then(|| {
                    pooled(&|tp, fp, fn_| {
                        let d = 2 * tp + fp + fn_;
                        (d > 0).then(|| 2.0 * tp as f64 / d as f64)
                    })
                }),
                precision: credits.then(|| {
                    pooled(&|tp, fp, _| (tp + fp > 0).then(|| tp as f64 / (tp + fp) as f64))
                }),
                recall: credits.then(|| {
                    pooled(&|tp, _, fn_| (tp + fn_ > 0).then(|| tp as f64 / (tp + fn_) as f64))
                }),
                correct_edit: per_seed(&|r| Some(b(r.correct_edit))),
                bad_survival: per_seed(&|r| Some(b(r.bad_survives))),
                meg: per_seed(&meg),
                gap_to_tide: (m != TIDE && !tide.is_empty()).then(|| {
                    per_seed(&|r| tide.get(&(r.seed, r.episode)).map(|t| t - r.future_utility))
                }),
                win_rate: per_seed(&|r| meg(r).map(|x| b(x > 1e-12))),
                negative_transfer: per_seed(&|r| meg(r).map(|x| b(x < -1e-12))),
                future_utility: per_seed(&|r| Some(r.future_utility)),
                memory: per_seed(&|r| Some(r.memory as f64)),
                by_noise,
                memory_curve,
            }
        })
        .collect()
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> ArenaError + '_ {
    move |source| ArenaError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `generation.json`, `report.md`, `plot_memory.svg` and
/// `plot_meg_by_noise.svg` into `out`.
pub fn write_report(out: &Path, r: &GenerationReport) -> Result<(), ArenaError> {
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let p = out.join("generation.json");
    let text = serde_json::to_string_pretty(r).map_err(|e| ArenaError::Config(e.to_string()))?;
    std::fs::write(&p, text + "\n").map_err(io_err(&p))?;
    let p = out.join("report.md");
    std::fs::write(&p, markdown(r)).map_err(io_err(&p))?;
    let series: Vec<Series> = r
        .methods
        .iter()
        .map(|m| Series {
            name: m.label.clone(),
            points: m
                .memory_curve
                .iter()
                .enumerate()
                .map(|(i, y)| (i as f64, *y))
                .collect(),
        })
        .collect();
    line_chart(
        &out.join("plot_memory.svg"),
        "Guidelines in memory during learning (mean over seeds and episodes)",
        "learning step",
        "guidelines",
        &series,
        &[],
    )?;
    let series: Vec<Series> = r
        .methods
        .iter()
        .filter(|m| m.method != REFERENCE)
        .map(|m| Series {
            name: m.label.clone(),
            points: NoiseType::ALL
                .iter()
                .enumerate()
                .filter_map(|(i, n)| m.by_noise.get(n.name()).map(|s| ((i + 1) as f64, s.meg)))
                .collect(),
        })
        .collect();
    line_chart(
        &out.join("plot_meg_by_noise.svg"),
        "Future MEG by noise type (1 wrong, 2 over-broad, 3 env win, 4 stale, 5 unused)",
        "noise type",
        "Future MEG vs static",
        &series,
        &[],
    )?;
    Ok(())
}

/// The Markdown report.
pub fn markdown(r: &GenerationReport) -> String {
    let c = &r.config;
    let mut s = String::new();
    let _ = writeln!(s, "# Arena A: generation feedback (TIDE)\n");
    let _ = writeln!(
        s,
        "{} episodes × {} seeds (from {}), {} learning steps and {} strictly future tasks per episode; five noise types in turn. Means with 95% CIs over seeds. Future MEG is against the static reference (`{}`). The world: take-up of a tentative guideline {}, of any other {}; responsibility threshold {} logit.\n",
        c.episodes,
        c.seeds,
        c.seed,
        c.learn,
        c.future,
        REFERENCE,
        c.adherence.hedged,
        c.adherence.firm,
        c.effect_min
    );
    let _ = writeln!(
        s,
        "| method | Responsibility F1 | precision | recall | Correct Edit | Bad-Memory Survival | Future MEG | TIDE's gain over it (paired) | win rate | negative transfer | final memory |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let opt = |m: &Option<MeanCi>| m.as_ref().map_or("–".to_string(), |x| x.show(3));
    for m in &r.methods {
        let _ = writeln!(
            s,
            "| {} (`{}`) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.label,
            m.method,
            opt(&m.f1),
            opt(&m.precision),
            opt(&m.recall),
            if credits_assigned(&m.method) {
                m.correct_edit.show(3)
            } else {
                "–".into()
            },
            if credits_assigned(&m.method) {
                m.bad_survival.show(3)
            } else {
                // Static and append-only never delete and get no matched
                // controls: their survival is 1 by construction.
                format!("{} (no controls, never deletes)", m.bad_survival.show(3))
            },
            if m.method == REFERENCE {
                "0 (reference)".into()
            } else {
                m.meg.show(4)
            },
            m.gap_to_tide.as_ref().map_or_else(
                || "–".to_string(),
                |x| format!("{:+.4} [{:+.4}, {:+.4}]", x.mean, x.lo, x.hi)
            ),
            if m.method == REFERENCE {
                "–".into()
            } else {
                m.win_rate.show(3)
            },
            if m.method == REFERENCE {
                "–".into()
            } else {
                m.negative_transfer.show(3)
            },
            m.memory.show(1),
        );
    }
    if !r.paired.is_empty() {
        let _ = writeln!(
            s,
            "\nAgainst `{TIDE}`, paired by seed: per seed each method's metric over its episodes, then `{TIDE}` minus the method, mean and 95% Student-t interval over the seeds. An ordering holds where the interval excludes 0 (for Bad-Memory Survival, where it lies below 0).\n\n| method | ΔF1 | ΔCorrect Edit | ΔBad-Memory Survival | ΔFuture MEG |\n|---|---|---|---|---|"
        );
        let d = |m: &Option<MeanCi>| {
            m.as_ref().map_or("–".to_string(), |x| {
                format!("{:+.3} [{:+.3}, {:+.3}]", x.mean, x.lo, x.hi)
            })
        };
        for p in &r.paired {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {} |",
                p.method,
                d(&p.f1),
                d(&p.correct_edit),
                d(&p.bad_survival),
                d(&Some(p.meg))
            );
        }
    }
    let _ = writeln!(
        s,
        "\nBy noise type (Correct Edit / Bad-Memory Survival / Future MEG):\n"
    );
    let _ = writeln!(
        s,
        "| method | {} |\n|---|{}",
        NoiseType::ALL.map(|n| n.name()).join(" | "),
        "---|".repeat(NoiseType::ALL.len())
    );
    for m in &r.methods {
        let cells: Vec<String> = NoiseType::ALL
            .iter()
            .map(|n| {
                m.by_noise.get(n.name()).map_or("-".into(), |x| {
                    format!(
                        "{:.2} / {:.2} / {:+.4}",
                        x.correct_edit, x.bad_survival, x.meg
                    )
                })
            })
            .collect();
        let _ = writeln!(s, "| {} | {} |", m.label, cells.join(" | "));
    }
    let _ = writeln!(
        s,
        "\nThe paper (Figure 4): TIDE F1 0.817, Correct Edit 0.650, Bad-Memory Survival 0, Future MEG +0.075; without counterfactual replay 0.591 / 0.400 / 0.417 / −0.003; without usage traces F1 0.708, MEG +0.034. Plots: `plot_memory.svg`, `plot_meg_by_noise.svg`."
    );
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// One episode of `method` on `seed` with `utility`, one true positive
    /// and `fp` false ones, and the two lifecycle outcomes.
    fn ep(method: &str, seed: u64, utility: f64, fp: usize, edit: bool) -> EpisodeResult {
        EpisodeResult {
            seed,
            episode: 0,
            noise: NoiseType::ALL[0],
            method: method.into(),
            tp: 1,
            fp,
            fn_: 0,
            scored: 1,
            correct_edit: edit,
            bad_survives: !edit,
            target_credited: edit,
            target_miscredited: false,
            future_utility: utility,
            memory: 1,
            memory_curve: Vec::new(),
            ops: BTreeMap::new(),
        }
    }

    /// Seeds differ far more than the methods do (utility 0.1 · seed), and
    /// `tide` is 0.01 ahead on every seed: the marginal MEG intervals
    /// overlap, the paired one lies above 0.
    #[test]
    fn the_paired_table_judges_orderings_on_seed_differences() {
        let cfg = GenerationConfig {
            seeds: 6,
            seed: 10,
            episodes: 1,
            ..GenerationConfig::default()
        };
        let other = "tide[trace=false]";
        let mut eps = Vec::new();
        for s in 10..16u64 {
            let base = 0.1 * (s - 10) as f64;
            eps.push(ep(REFERENCE, s, 0.0, 0, false));
            eps.push(ep(TIDE, s, base + 0.5 + 0.01, 0, s % 2 == 0));
            eps.push(ep(other, s, base + 0.5, 1, false));
        }
        let methods = vec![REFERENCE.to_string(), TIDE.to_string(), other.to_string()];
        let p = paired_to_tide(&cfg, &methods, &eps);
        assert_eq!(p.len(), 1);
        assert!(
            (p[0].meg.mean - 0.01).abs() < 1e-9 && p[0].meg.lo > 0.0,
            "{:?}",
            p[0].meg
        );
        // F1 1.0 against 2/3 on every seed.
        let f1 = p[0].f1.unwrap();
        assert!((f1.mean - (1.0 - 2.0 / 3.0)).abs() < 1e-9, "{f1:?}");
        let bad = p[0].bad_survival.unwrap();
        assert!(bad.mean < 0.0, "{bad:?}");
        let s = summarise(&cfg, &methods, &eps);
        let (t, o) = (&s[1].meg, &s[2].meg);
        assert!(o.hi > t.lo, "the marginals overlap: {t:?} {o:?}");
        // Swapped, the sign turns; a method without credit has no F1 row.
        let swapped: Vec<EpisodeResult> = eps
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if r.method == TIDE {
                    r.future_utility -= 0.02;
                }
                r
            })
            .collect();
        assert!(paired_to_tide(&cfg, &methods, &swapped)[0].meg.hi < 0.0);
        let none = vec![REFERENCE.to_string(), "tide[edit=none]".to_string()];
        assert!(paired_to_tide(&cfg, &none, &eps).is_empty());
    }

    #[test]
    fn every_method_gets_the_same_control_traffic_and_world() {
        let a = World::new(1, 3, 30, 6);
        let b = World::new(1, 3, 30, 6);
        assert_eq!(a.steps, b.steps);
        assert_eq!(a.seeds, b.seeds);
        assert_eq!(a.control_decisions(5), b.control_decisions(5));
        let d = a.control_decisions(5);
        assert_eq!(a.lifecycle(5, 0, &d), b.lifecycle(5, 0, &d));
    }
}
