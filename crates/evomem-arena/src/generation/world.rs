//! The seeded world of one generation episode: requests, hidden true
//! effects, environment shocks, lifecycles, the injected noise, and the
//! ground truth the metrics need. Nothing here reaches a policy except
//! through staged feedback (counts and delivery context).
//!
//! **Initial memory** (true guidelines, then the injected one): the best
//! selling point per audience where it clearly helps and a broad one for
//! the best on average; a broad guideline for each other non-prior value
//! that helps in every audience; and, on the injected guideline's
//! dimension, a specific guideline for two of the three audiences that
//! prescribes the value truly best there for the whole episode (the prior;
//! none for the stale type, where the injected value is the better one
//! until the recommender changes). So the injected guideline is not alone
//! on its dimension: where a specific guideline applies the generator takes
//! both up and the specific one decides, and the injected one decides only
//! where none applies or the specific one was not taken up. A wrong
//! guideline that contradicts established specific knowledge in some
//! contexts is the common case; a noise guideline that is the only memory
//! on its dimension makes responsibility trivial (whoever is traced on the
//! dimension decided it), and leaves nothing for counterfactual replay to
//! separate.

use evomem_core::LogicalTime;
use evomem_policy::families::tide::generator::{
    decision_distribution, render_material, Adherence, GenerateInput, UsedGuideline,
};
use evomem_policy::families::tide::guideline::{options, prior, DIMENSIONS};
use evomem_policy::families::tide::temporal::{objective, stage};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The five injected noise types (one per episode, round robin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseType {
    /// A guideline whose decision hurts in every context.
    Wrong,
    /// A guideline that holds in one audience only and hurts elsewhere.
    OverBroad,
    /// A harmful guideline whose materials ride a festival warm-up at the
    /// start of the episode: their raw outcomes look like wins.
    EnvWin,
    /// A guideline that helped under recommender v1 and hurts after the
    /// switch to v2 (40% into the episode).
    Stale,
    /// A harmful guideline worded tentatively ("maybe consider ..."): it is
    /// retrieved but the generator almost never follows it.
    Unused,
}

impl NoiseType {
    /// All five, in episode order.
    pub const ALL: [NoiseType; 5] = [
        NoiseType::Wrong,
        NoiseType::OverBroad,
        NoiseType::EnvWin,
        NoiseType::Stale,
        NoiseType::Unused,
    ];

    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            NoiseType::Wrong => "wrong",
            NoiseType::OverBroad => "over_broad",
            NoiseType::EnvWin => "env_win",
            NoiseType::Stale => "stale",
            NoiseType::Unused => "unused",
        }
    }
}

/// The environment of one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepEnv {
    /// Festival warm-up.
    pub festival: bool,
    /// Hotspot on the product.
    pub hotspot: bool,
    /// Traffic bucket (1, 2, 3: half, normal, double impressions).
    pub bucket: i64,
    /// Recommender version.
    pub rec_version: i64,
}

/// A seed guideline of the initial memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seed {
    /// Id.
    pub id: String,
    /// Decisions.
    pub decisions: BTreeMap<String, String>,
    /// Conditions.
    pub conditions: BTreeMap<String, String>,
    /// Text.
    pub text: String,
}

/// One episode's world.
#[derive(Debug, Clone)]
pub struct World {
    /// Episode index.
    pub episode: usize,
    /// Noise type.
    pub noise: NoiseType,
    /// Product, channel and placement of every request.
    pub product: String,
    /// See `product`.
    pub channel: String,
    /// See `product`.
    pub placement: String,
    /// The audiences (one matched context each).
    pub audiences: Vec<String>,
    base_ctr: BTreeMap<String, f64>,
    base_cvr: f64,
    /// Effect (logit CTR) of each non-prior value per audience.
    effects: BTreeMap<(String, String, String), f64>,
    /// Initial memory.
    pub seeds: Vec<Seed>,
    /// The injected guideline.
    pub target: Seed,
    /// Its dimension and value.
    pub target_dim: String,
    /// See `target_dim`.
    pub target_value: String,
    /// Over-broad: the audience where it holds.
    pub true_audience: Option<String>,
    /// Learning steps: the audience and environment of each.
    pub steps: Vec<(String, StepEnv)>,
    /// Future tasks: the audience of each.
    pub future: Vec<String>,
    /// The sampling generator's take-up probabilities (the world's
    /// behaviour; [`Adherence::default`] unless set with
    /// [`World::with_adherence`]). No method reads them.
    pub adherence: Adherence,
    /// Smallest change of the expected true effect that makes a used
    /// guideline truly responsible (default [`TRUE_EFFECT_MIN`]; set with
    /// [`World::with_effect_min`]). No method reads it.
    pub effect_min: f64,
    /// Base seed of the episode's draws.
    pub draw_seed: u64,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.gen::<f64>().max(1e-12);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Binomial(n, p) by its normal approximation, rounded and clamped.
fn binomial(rng: &mut ChaCha8Rng, n: f64, p: f64) -> f64 {
    let m = n * p;
    let sd = (n * p * (1.0 - p)).sqrt();
    (m + sd * normal(rng)).round().clamp(0.0, n)
}

/// Festival lift (logit CTR) and hotspot lift.
const FESTIVAL_LIFT: f64 = 0.6;
const HOTSPOT_LIFT: f64 = 0.5;
/// Impressions per lifecycle in the normal traffic bucket.
const IMPRESSIONS: f64 = 2000.0;
/// Smallest change of the expected true effect (logit CTR) on a memory's
/// dimension that makes it truly responsible.
pub const TRUE_EFFECT_MIN: f64 = 0.1;

fn cap(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

impl World {
    /// The same world with the sampling generator's take-up probabilities
    /// set.
    pub fn with_adherence(mut self, adherence: Adherence) -> Self {
        self.adherence = adherence;
        self
    }

    /// The same world with the responsibility threshold set (the truth's
    /// sensitivity to it is reported, issue 56).
    pub fn with_effect_min(mut self, effect_min: f64) -> Self {
        self.effect_min = effect_min;
        self
    }

    /// Build episode `episode` of seed `seed` with `learn` learning steps and
    /// `future` future tasks.
    pub fn new(seed: u64, episode: usize, learn: usize, future: usize) -> Self {
        let noise = NoiseType::ALL[episode % 5];
        let variant = episode / 5;
        let draw_seed = seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(episode as u64 * 0x1000_0001);
        let mut rng = ChaCha8Rng::seed_from_u64(draw_seed);
        let products = ["phone", "blender", "sneaker", "lamp"];
        let product = products[rng.gen_range(0..products.len())].to_string();
        let channel = ["feed", "search"][variant % 2].to_string();
        let placement = ["top", "side"][(variant / 2) % 2].to_string();
        let audiences: Vec<String> = ["student", "family", "pro"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let base_ctr: BTreeMap<String, f64> = audiences
            .iter()
            .map(|a| (a.clone(), -3.0 + 0.3 * normal(&mut rng)))
            .collect();
        let effects = draw_effects(&audiences, &mut rng);
        let target_dim = ["density", "style", "cta"][variant % 3].to_string();
        let target_value = options(&target_dim)
            .get(1)
            .copied()
            .unwrap_or("")
            .to_string();
        let true_audience = (noise == NoiseType::OverBroad).then(|| audiences[variant % 3].clone());
        let mut w = World {
            episode,
            noise,
            product,
            channel,
            placement,
            audiences: audiences.clone(),
            base_ctr,
            base_cvr: -2.2,
            effects,
            seeds: Vec::new(),
            target: Seed {
                id: String::new(),
                decisions: BTreeMap::new(),
                conditions: BTreeMap::new(),
                text: String::new(),
            },
            target_dim: target_dim.clone(),
            target_value: target_value.clone(),
            true_audience,
            steps: Vec::new(),
            future: Vec::new(),
            adherence: Adherence::default(),
            effect_min: TRUE_EFFECT_MIN,
            draw_seed,
        };
        // Seed memory: the truly best selling point per audience where it
        // clearly helps, and a broad one for the best on average; the
        // established knowledge on the injected dimension; the injected
        // guideline.
        let mut seeds = w.seed_guidelines(variant);
        let text = match noise {
            NoiseType::Unused => format!(
                "Maybe consider {} {} sometimes.",
                target_dim.replace('_', " "),
                target_value
            ),
            _ => format!(
                "Always use {} {}.",
                target_dim.replace('_', " "),
                target_value
            ),
        };
        w.target = Seed {
            id: format!("noise:{}:{}", noise.name(), target_dim),
            decisions: BTreeMap::from([(target_dim.clone(), target_value.clone())]),
            conditions: BTreeMap::new(),
            text,
        };
        seeds.push(w.target.clone());
        w.seeds = seeds;
        w.steps = w.schedule(learn, &mut rng);
        w.future = (0..future).map(|i| audiences[i % 3].clone()).collect();
        w
    }

    /// The guidelines memory starts with, before the injected one (see
    /// [`World::new`]).
    fn seed_guidelines(&self, variant: usize) -> Vec<Seed> {
        let (w, audiences, noise) = (self, self.audiences.as_slice(), self.noise);
        let target_dim = &self.target_dim;
        let mut seeds = Vec::new();
        let mut mean_best: Option<(f64, &str)> = None;
        for v in options("selling_point").iter().skip(1) {
            let m = audiences
                .iter()
                .map(|a| w.effect(a, "selling_point", v, 1))
                .sum::<f64>()
                / audiences.len() as f64;
            if m > 0.1 && mean_best.is_none_or(|b| m > b.0) {
                mean_best = Some((m, v));
            }
        }
        if let Some((_, v)) = mean_best {
            seeds.push(Seed {
                id: "seed:selling_point:all".into(),
                decisions: BTreeMap::from([("selling_point".into(), v.to_string())]),
                conditions: BTreeMap::new(),
                text: format!("Lead with {v}."),
            });
        }
        for a in audiences {
            let best = options("selling_point")
                .iter()
                .skip(1)
                .map(|v| (w.effect(a, "selling_point", v, 1), *v))
                .max_by(|x, y| x.0.total_cmp(&y.0));
            if let Some((_, v)) = best.filter(|b| b.0 > 0.15) {
                seeds.push(Seed {
                    id: format!("seed:selling_point:{a}"),
                    decisions: BTreeMap::from([("selling_point".into(), v.to_string())]),
                    conditions: BTreeMap::from([("audience".into(), a.clone())]),
                    text: format!("Lead with {v} for {a} shoppers."),
                });
            }
        }
        for d in DIMENSIONS
            .iter()
            .skip(1)
            .filter(|d| **d != target_dim.as_str())
        {
            for v in options(d).iter().skip(1) {
                if audiences.iter().all(|a| w.effect(a, d, v, 1) > 0.15) {
                    seeds.push(Seed {
                        id: format!("seed:{d}:all"),
                        decisions: BTreeMap::from([(d.to_string(), v.to_string())]),
                        conditions: BTreeMap::new(),
                        text: format!("{} {} {}.", cap("use"), d.replace('_', " "), v),
                    });
                }
            }
        }
        // Established knowledge on the injected guideline's dimension: for
        // two of the three audiences (not `audiences[variant % 3]`, which for
        // the over-broad type is the audience where it holds) a specific
        // guideline prescribing the value that is truly best there for the
        // whole episode: the prior. The stale type has none (under the first
        // recommender the injected value is the better one everywhere).
        if noise != NoiseType::Stale {
            let p = prior(target_dim);
            for (i, a) in audiences.iter().enumerate() {
                if i == variant % 3 {
                    continue;
                }
                seeds.push(Seed {
                    id: format!("seed:{target_dim}:{a}"),
                    decisions: BTreeMap::from([(target_dim.clone(), p.to_string())]),
                    conditions: BTreeMap::from([("audience".into(), a.clone())]),
                    text: format!(
                        "Keep the {} {p} for {a} shoppers.",
                        target_dim.replace('_', " ")
                    ),
                });
            }
        }
        seeds
    }

    /// The learning steps: audiences in a shuffled balanced order, festival
    /// windows and the recommender change by noise type, hotspots and
    /// traffic buckets.
    fn schedule(&self, learn: usize, rng: &mut ChaCha8Rng) -> Vec<(String, StepEnv)> {
        let (audiences, noise) = (&self.audiences, self.noise);
        let mut steps = Vec::with_capacity(learn);
        let mut order: Vec<String> = (0..learn).map(|i| audiences[i % 3].clone()).collect();
        order.shuffle(rng);
        let change_at = (noise == NoiseType::Stale).then_some(learn * 2 / 5);
        for (t, a) in order.into_iter().enumerate() {
            let festival = match noise {
                NoiseType::EnvWin => t < learn * 7 / 20,
                _ => t >= learn * 3 / 5 && t < learn * 3 / 4,
            };
            let env = StepEnv {
                festival,
                hotspot: rng.gen::<f64>() < 0.12,
                bucket: rng.gen_range(1..=3),
                rec_version: if change_at.is_some_and(|c| t >= c) {
                    2
                } else {
                    1
                },
            };
            steps.push((a, env));
        }
        steps
    }

    /// True effect (logit CTR) of `dim = value` for `audience` under
    /// recommender `rec`; the prior value has effect 0.
    pub fn effect(&self, audience: &str, dim: &str, value: &str, rec: i64) -> f64 {
        if value == prior(dim) {
            return 0.0;
        }
        if dim == self.target_dim && value == self.target_value {
            return match self.noise {
                NoiseType::Wrong => -0.5,
                NoiseType::OverBroad => {
                    if self.true_audience.as_deref() == Some(audience) {
                        0.5
                    } else {
                        -0.5
                    }
                }
                NoiseType::EnvWin => -0.4,
                NoiseType::Stale => {
                    if rec <= 1 {
                        0.5
                    } else {
                        -0.5
                    }
                }
                NoiseType::Unused => -0.5,
            };
        }
        self.effects
            .get(&(audience.to_string(), dim.to_string(), value.to_string()))
            .copied()
            .unwrap_or(0.0)
    }

    fn content(&self, audience: &str, decisions: &BTreeMap<String, String>, rec: i64) -> f64 {
        decisions
            .iter()
            .map(|(d, v)| self.effect(audience, d, v, rec))
            .sum()
    }

    /// Request attributes of a step.
    pub fn attributes(&self, audience: &str, festival: bool) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("product".into(), self.product.clone()),
            ("audience".into(), audience.to_string()),
            ("channel".into(), self.channel.clone()),
            ("placement".into(), self.placement.clone()),
            (
                "campaign_stage".into(),
                if festival { "warmup" } else { "regular" }.to_string(),
            ),
        ])
    }

    /// Utility of a material on a future task: true CTR × CVR in a neutral
    /// environment under the latest recommender, over the best material's.
    pub fn utility(&self, audience: &str, decisions: &BTreeMap<String, String>) -> f64 {
        let rec = self.steps.last().map_or(1, |s| s.1.rec_version);
        let value = |d: &BTreeMap<String, String>| {
            let c = self.content(audience, d, rec);
            let b = self.base_ctr.get(audience).copied().unwrap_or(-3.0);
            sigmoid(b + c) * sigmoid(self.base_cvr + 0.5 * c)
        };
        let mut best: f64 = 0.0;
        for sp in options("selling_point") {
            for de in options("density") {
                for st in options("style") {
                    for ct in options("cta") {
                        let d = BTreeMap::from([
                            ("selling_point".to_string(), sp.to_string()),
                            ("density".to_string(), de.to_string()),
                            ("style".to_string(), st.to_string()),
                            ("cta".to_string(), ct.to_string()),
                        ]);
                        best = best.max(value(&d));
                    }
                }
            }
        }
        value(decisions) / best.max(1e-12)
    }

    /// The staged feedback windows of a material decided at step `t`:
    /// (observed_at, stage, objectives). `kind` separates the common random
    /// numbers of the policy's material (0) from the control traffic's (1):
    /// two methods that produce the same material get the same feedback.
    pub fn lifecycle(
        &self,
        t: usize,
        kind: u64,
        decisions: &BTreeMap<String, String>,
    ) -> Vec<(LogicalTime, &'static str, BTreeMap<String, f64>)> {
        let Some((aud, env)) = self.steps.get(t) else {
            return Vec::new();
        };
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.draw_seed ^ (t as u64).wrapping_mul(0x2545_f491_4f6c_dd1d) ^ (kind << 60),
        );
        let c = self.content(aud, decisions, env.rec_version);
        let lift = if env.festival { FESTIVAL_LIFT } else { 0.0 }
            + if env.hotspot { HOTSPOT_LIFT } else { 0.0 };
        let b =
            self.base_ctr.get(aud).copied().unwrap_or(-3.0) + 0.1 * (env.rec_version - 1) as f64;
        let p = sigmoid(b + c + lift + 0.1 * normal(&mut rng));
        let q = sigmoid(self.base_cvr + 0.5 * c + if env.festival { 0.2 } else { 0.0 });
        let n = IMPRESSIONS * [0.5, 1.0, 2.0][(env.bucket.clamp(1, 3) - 1) as usize];
        let clicks = binomial(&mut rng, n, p);
        let conv = binomial(&mut rng, clicks, q);
        let early = (conv * 0.6).round();
        let t0 = t as u64;
        let rec_at = |at: u64| {
            self.steps.get(at as usize).map_or_else(
                || self.steps.last().map_or(1, |s| s.1.rec_version),
                |s| s.1.rec_version,
            )
        };
        let obj = |imp: f64, clk: f64, cv: f64, at: u64| {
            BTreeMap::from([
                (objective::IMPRESSIONS.to_string(), imp),
                (objective::CLICKS.to_string(), clk),
                (objective::CONVERSIONS.to_string(), cv),
                (
                    objective::FESTIVAL.to_string(),
                    f64::from(u8::from(env.festival)),
                ),
                (
                    objective::HOTSPOT.to_string(),
                    f64::from(u8::from(env.hotspot)),
                ),
                (objective::TRAFFIC_BUCKET.to_string(), env.bucket as f64),
                (objective::REC_VERSION.to_string(), rec_at(at) as f64),
                (objective::MATERIAL_VERSION.to_string(), 1.0),
            ])
        };
        vec![
            (
                LogicalTime(t0 + 1),
                stage::EXPOSURE,
                obj(n, 0.0, 0.0, t0 + 1),
            ),
            (
                LogicalTime(t0 + 2),
                stage::CLICK,
                obj(0.0, clicks, 0.0, t0 + 2),
            ),
            (
                LogicalTime(t0 + 3),
                stage::CONVERSION,
                obj(0.0, 0.0, early, t0 + 3),
            ),
            (
                LogicalTime(t0 + 4),
                stage::CONVERSION,
                obj(0.0, 0.0, conv - early, t0 + 4),
            ),
        ]
    }

    /// Whether a lifecycle starting at `t` spans a recommender change (it
    /// can never mature).
    pub fn broken(&self, t: usize) -> bool {
        let v = |i: usize| self.steps.get(i).map(|s| s.1.rec_version);
        let last = self.steps.last().map(|s| s.1.rec_version);
        (t..=t + 4).any(|i| v(i).or(last) != v(t))
    }

    /// Control traffic's decisions at step `t`: each dimension uniform.
    pub fn control_decisions(&self, t: usize) -> BTreeMap<String, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.draw_seed ^ 0x0c04_7201 ^ ((t as u64) << 20));
        DIMENSIONS
            .iter()
            .map(|d| {
                let o = options(d);
                (d.to_string(), o[rng.gen_range(0..o.len())].to_string())
            })
            .collect()
    }

    /// Control material text.
    pub fn control_material(&self, t: usize, decisions: &BTreeMap<String, String>) -> String {
        let aud = self.steps.get(t).map(|s| s.0.clone()).unwrap_or_default();
        render_material(&self.attributes(&aud, false), decisions)
    }

    /// The true responsible set of a live generation, from the world's
    /// hidden effect model and the generator's sampling law, never from a
    /// replay with the episode's draws: a guideline the generator took up
    /// (`used`) is responsible when leaving it out of the retrieved set
    /// changes the *expected* true effect on its dimension,
    /// `Σ_v P(v)·effect(audience, dim, v)` under
    /// [`decision_distribution`], by at least `effect_min` (default
    /// [`TRUE_EFFECT_MIN`]). No
    /// policy can compute this: it needs the hidden effects and the
    /// generator's take-up probabilities. TIDE's leave-one-out replay
    /// (temperature 0, its own credit rule) must estimate it.
    pub fn responsible(
        &self,
        audience: &str,
        rec: i64,
        used: &[UsedGuideline],
        input: &GenerateInput,
    ) -> Vec<String> {
        let expected = |input: &GenerateInput, dim: &str| -> f64 {
            decision_distribution(input, dim)
                .iter()
                .map(|(v, p)| p * self.effect(audience, dim, v, rec))
                .sum()
        };
        let mut out: Vec<String> = used
            .iter()
            .filter(|u| {
                let mut without = input.clone();
                without.guidelines.retain(|g| g.id != u.id);
                (expected(input, &u.dimension) - expected(&without, &u.dimension)).abs()
                    >= self.effect_min
            })
            .map(|u| u.id.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// The hidden effects: per audience, dimension and non-prior value, a
/// shared effect plus an audience deviation (wider for the selling point).
fn draw_effects(
    audiences: &[String],
    rng: &mut ChaCha8Rng,
) -> BTreeMap<(String, String, String), f64> {
    let mut effects = BTreeMap::new();
    for d in DIMENSIONS {
        for v in options(d).iter().skip(1) {
            let shared = rng.gen_range(-0.3..0.3);
            for a in audiences {
                let dev = if d == "selling_point" {
                    rng.gen_range(-0.35..0.35)
                } else {
                    rng.gen_range(-0.1..0.1)
                };
                effects.insert((a.clone(), d.to_string(), v.to_string()), shared + dev);
            }
        }
    }
    effects
}
