//! `bpr`: Bayesian Personalized Ranking matrix factorization (Rendle et al.,
//! UAI 2009).
//!
//! The model scores `x̂_ui = b_i + <p_u, q_i>` (user factors `p`, item factors
//! `q`, item bias `b`). Training maximises BPR-OPT (§4.1, eq. 5)
//! `Σ ln σ(x̂_ui − x̂_uj) − λ‖Θ‖²` over triples `(u, i, j)` with `i` observed
//! for `u` and `j` not, by LearnBPR (§4.3, Algorithm 1): stochastic gradient
//! ascent on triples drawn by bootstrap sampling, the positive pair uniformly
//! from the observed distinct `(u, i)` pairs and the negative `j` uniformly
//! from the catalog items `u` was never observed with. With
//! `g = σ(−x̂_uij)` the updates are
//!
//! ```text
//! p_u += lr (g (q_i − q_j) − λ p_u)
//! q_i += lr (g p_u − λ q_i)        b_i += lr (g − λ b_i)
//! q_j += lr (−g p_u − λ q_j)       b_j += lr (−g − λ b_j)
//! ```
//!
//! One epoch is as many steps as there are distinct observed pairs. Factors
//! start uniform in `[−0.1, 0.1]`, biases at 0. Everything is drawn from
//! ChaCha8 streams seeded from the run seed and the training round, and the
//! loop is single-threaded, so the same seed gives bit-identical scores.
//!
//! Training happens at `maintain(BeforeDecisions)` (retrospective protocol),
//! and at `maintain(Tick)` once `retrain_every` new interactions have been
//! observed (evolving protocol): the first round trains `epochs` epochs from a
//! fresh start, later rounds `warm_epochs` epochs warm-started from the current
//! factors (new users and items get fresh factors). A `recall` before any
//! training trains once on what has been observed.
//!
//! Defaults (`dim=64, epochs=40, lr=0.05, reg=0.005`) were tuned on ml-100k
//! leave-one-out with 9 sampled negatives; see `docs/data-formats.md` and the
//! baselines' measurement notes for the figures.
//!
//! **Fit** (`fit=auto`, issue 42): before the first (cold) training round,
//! λ is chosen from [`REG_GRID`] on validation decisions only
//! ([`evomem_kit::holdout`]: each user's latest observed interaction held
//! out, [`FIT_NEGATIVES`] unseen negatives): one model per grid point is
//! trained, as the cold round would be, on every other observed
//! interaction, and the λ whose model ranks the held-out targets best (mean
//! reciprocal rank; ties: the earlier point) is used from then on. With
//! fewer than [`FIT_MIN`] decisions the spec's λ stands. A `reg` given in
//! the spec is pinned; `fit=none` (the default) trains with the spec's λ,
//! bit for bit the model above. Cost: `|REG_GRID|` more cold trainings.
//! Off by default because it did not help on validation targets (ml-100k
//! HR@1 0.6013 without, 0.5875 with; the generated sparse 300k set 0.5626
//! and 0.5625).
//! `metrics.json` reports the choice (`stats.fit`).

use super::random::splitmix;
use super::scored;
use crate::registry::PolicySpec;
use evomem_core::{
    DecisionQuery, Interaction, MaintainTrigger, PlannedOp, Policy, PolicyCtx, PolicyError, Recall,
};
use evomem_core::{ItemId, LogicalTime, UserId};
use evomem_kit::holdout::{self, Event, HoldOutSettings, NegativePool};
use evomem_kit::Observed;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Regularisation values `fit=auto` tries.
pub const REG_GRID: [f32; 4] = [0.001, 0.005, 0.02, 0.05];
/// Negatives per fit decision.
pub const FIT_NEGATIVES: usize = 9;
/// Fewest fit decisions whose choice is used.
pub const FIT_MIN: usize = 200;

/// One grid point's figures on the fit decisions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegPoint {
    /// λ.
    pub reg: f32,
    /// Mean reciprocal rank of the held-out targets.
    pub mrr: f64,
    /// Hit rate at 1.
    pub hr1: f64,
}

/// What a fit chose (`stats.fit`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BprFitReport {
    /// `auto`, or `auto (too few decisions: spec reg)`.
    pub mode: &'static str,
    /// Fit decisions.
    pub decisions: usize,
    /// The λ in force.
    pub reg: f32,
    /// Every grid point.
    pub grid: Vec<RegPoint>,
}

/// Hyper-parameters of [`Bpr`].
#[derive(Debug, Clone, PartialEq)]
pub struct BprConfig {
    /// Factor dimension.
    pub dim: usize,
    /// Epochs of the first (cold) training round.
    pub epochs: usize,
    /// SGD learning rate.
    pub lr: f32,
    /// L2 regularisation λ for factors and biases.
    pub reg: f32,
    /// Retrain on `Tick` after this many newly observed interactions; 0 never.
    pub retrain_every: u64,
    /// Epochs of a warm-started retraining round.
    pub warm_epochs: usize,
    /// Seed (the run seed).
    pub seed: u64,
    /// Fit λ on validation decisions before the first training (module
    /// docs; default `false`).
    pub fit: bool,
}

impl BprConfig {
    /// The configuration a `bpr[...]` spec asks for, every key at its row's
    /// default unless the spec writes it; `seed` is the run seed.
    pub fn from_spec(spec: &PolicySpec, seed: u64) -> Result<Self, PolicyError> {
        Ok(Self {
            dim: spec.value("dim")?,
            epochs: spec.value("epochs")?,
            lr: spec.value("lr")?,
            reg: spec.value("reg")?,
            retrain_every: spec.value("retrain_every")?,
            warm_epochs: spec.value("warm_epochs")?,
            seed,
            // Off by default: on validation targets it did not help
            // (ml-100k HR@1 0.6013 -> 0.5875, the sparse 300k set 0.5626 ->
            // 0.5625; docs/generalisation.md).
            fit: match spec.value::<String>("fit")?.as_str() {
                // A reg given in the spec is pinned.
                "auto" => !spec.params.contains_key("reg"),
                "none" => false,
                other => {
                    return Err(PolicyError::Config(format!(
                        "bpr: `fit` must be auto or none, got {other}"
                    )))
                }
            },
        })
    }
}

/// The `bpr` baseline.
#[derive(Debug, Clone)]
pub struct Bpr {
    cfg: BprConfig,
    seen: Observed,
    /// User factors, row-major `n_users × dim`.
    p: Vec<f32>,
    /// Item factors, row-major `n_items × dim`.
    q: Vec<f32>,
    /// Item biases.
    b: Vec<f32>,
    /// Training rounds run so far.
    rounds: u64,
    /// `seen.n_events` at the last training round.
    trained_at: u64,
    /// Triples processed in total.
    steps: u64,
    /// Observed events, for the fit (kept only with `fit`).
    events: Vec<Event>,
    /// The fit's report.
    fitted: Option<BprFitReport>,
}

impl Bpr {
    /// A BPR model with `cfg`; fails on a non-positive `dim` or `lr`, or a
    /// negative or non-finite `reg`.
    pub fn new(cfg: BprConfig) -> Result<Self, PolicyError> {
        if cfg.dim == 0 {
            return Err(PolicyError::Config("bpr: `dim` must be at least 1".into()));
        }
        if !(cfg.lr.is_finite() && cfg.lr > 0.0) {
            return Err(PolicyError::Config(format!(
                "bpr: `lr` must be > 0, got {}",
                cfg.lr
            )));
        }
        if !(cfg.reg.is_finite() && cfg.reg >= 0.0) {
            return Err(PolicyError::Config(format!(
                "bpr: `reg` must be >= 0, got {}",
                cfg.reg
            )));
        }
        Ok(Self {
            cfg,
            seen: Observed::new(),
            p: Vec::new(),
            q: Vec::new(),
            b: Vec::new(),
            rounds: 0,
            trained_at: 0,
            steps: 0,
            events: Vec::new(),
            fitted: None,
        })
    }

    /// Grow the parameter tables to `n_users`/`n_items`, new rows random.
    fn allocate(&mut self, n_users: usize, n_items: usize, rng: &mut ChaCha8Rng) {
        let d = self.cfg.dim;
        while self.p.len() < n_users * d {
            self.p.push(rng.gen_range(-0.1..0.1));
        }
        while self.q.len() < n_items * d {
            self.q.push(rng.gen_range(-0.1..0.1));
        }
        if self.b.len() < n_items {
            self.b.resize(n_items, 0.0);
        }
    }

    /// `fit`: choose λ before the first training (module docs).
    fn fit_reg(&mut self, n_catalog: usize) -> Result<(), PolicyError> {
        let n_items = n_catalog.max(self.seen.item_users.len());
        let settings = HoldOutSettings {
            negatives: FIT_NEGATIVES,
            users: 0,
            seed: self.cfg.seed,
            pool: NegativePool::Auto,
        };
        let (held, decisions) = holdout::hold_out(&self.events, n_items, &settings);
        let mut grid = Vec::with_capacity(REG_GRID.len());
        let mut best: Option<(f32, f64)> = None;
        for &reg in &REG_GRID {
            let cfg = BprConfig {
                reg,
                fit: false,
                ..self.cfg.clone()
            };
            let kept = self
                .events
                .iter()
                .zip(&held)
                .filter(|(_, &h)| !h)
                .map(|(&(u, i, _), _)| (u, i));
            let view = Bpr::trained_with(cfg, kept, n_catalog)?;
            let ranks: Vec<f64> = decisions
                .iter()
                .map(|d| {
                    let u = d.user as usize;
                    let negs: Vec<f64> = d
                        .negatives
                        .iter()
                        .map(|&c| view.score(u, c as usize))
                        .collect();
                    holdout::rank_of(view.score(u, d.target as usize), &negs)
                })
                .collect();
            let (mrr, hr1) = holdout::figures(&ranks);
            grid.push(RegPoint { reg, mrr, hr1 });
            if best.is_none_or(|b| mrr > b.1) {
                best = Some((reg, mrr));
            }
        }
        let used = decisions.len() >= FIT_MIN;
        if let (true, Some((reg, _))) = (used, best) {
            self.cfg.reg = reg;
        }
        self.fitted = Some(BprFitReport {
            mode: if used {
                "auto"
            } else {
                "auto (too few decisions: spec reg)"
            },
            decisions: decisions.len(),
            reg: self.cfg.reg,
            grid,
        });
        Ok(())
    }

    /// The first training round: `fit` first when asked, then `epochs`
    /// epochs from a fresh start.
    fn train_cold(&mut self, n_catalog: usize) -> Result<(), PolicyError> {
        if self.cfg.fit && self.fitted.is_none() {
            self.fit_reg(n_catalog)?;
        }
        self.train(n_catalog, self.cfg.epochs);
        Ok(())
    }

    /// One training round of `epochs` epochs over everything observed.
    fn train(&mut self, n_catalog: usize, epochs: usize) {
        let n_pairs = self.seen.pairs.len();
        if n_pairs == 0 {
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(
            splitmix(self.cfg.seed ^ 0x6270_7200).wrapping_add(self.rounds),
        );
        self.rounds += 1;
        self.trained_at = self.seen.n_events;
        let n_users = self.seen.user_items.len();
        let n_items = n_catalog.max(self.seen.item_users.len());
        self.allocate(n_users, n_items, &mut rng);
        let (d, lr, reg) = (self.cfg.dim, self.cfg.lr, self.cfg.reg);
        for _ in 0..epochs {
            for _ in 0..n_pairs {
                let (u, i) = self.seen.pairs[rng.gen_range(0..n_pairs)];
                // Uniform negative among items u was never observed with.
                let mut j = rng.gen_range(0..n_items) as u32;
                let mut tries = 0;
                while self.seen.has(u, j) && tries < 100 {
                    j = rng.gen_range(0..n_items) as u32;
                    tries += 1;
                }
                if self.seen.has(u, j) {
                    continue;
                }
                let (u, i, j) = (u as usize, i as usize, j as usize);
                let pu = &self.p[u * d..(u + 1) * d];
                let (qi, qj) = (&self.q[i * d..(i + 1) * d], &self.q[j * d..(j + 1) * d]);
                let mut x = self.b[i] - self.b[j];
                for f in 0..d {
                    x += pu[f] * (qi[f] - qj[f]);
                }
                let g = 1.0 / (1.0 + x.exp());
                self.b[i] += lr * (g - reg * self.b[i]);
                self.b[j] += lr * (-g - reg * self.b[j]);
                for f in 0..d {
                    let (pf, qif, qjf) = (self.p[u * d + f], self.q[i * d + f], self.q[j * d + f]);
                    self.p[u * d + f] += lr * (g * (qif - qjf) - reg * pf);
                    self.q[i * d + f] += lr * (g * pf - reg * qif);
                    self.q[j * d + f] += lr * (-g * pf - reg * qjf);
                }
                self.steps += 1;
            }
        }
    }

    /// A model of the default configuration (`dim=64, epochs=40, lr=0.05,
    /// reg=0.005`) trained, as one cold round, on `pairs` `(user, item)` by
    /// dense index: the factor head of `seqmem` (its `w_mf`), which reads
    /// the same model the `bpr` baseline trains.
    pub(crate) fn trained_on(
        pairs: impl IntoIterator<Item = (u32, u32)>,
        n_catalog: usize,
        seed: u64,
    ) -> Result<Self, PolicyError> {
        let cfg = BprConfig::from_spec(&PolicySpec::named("bpr"), seed)?;
        Self::trained_with(cfg, pairs, n_catalog)
    }

    /// A model of `cfg` trained, as one cold round of `cfg.epochs`, on
    /// `pairs` `(user, item)` by dense index, in order (the fit's models
    /// and the factor head's).
    fn trained_with(
        cfg: BprConfig,
        pairs: impl IntoIterator<Item = (u32, u32)>,
        n_catalog: usize,
    ) -> Result<Self, PolicyError> {
        let mut m = Bpr::new(cfg)?;
        for (k, (u, i)) in pairs.into_iter().enumerate() {
            m.seen.record(&Interaction {
                user: UserId(u),
                item: ItemId(i),
                rating: None,
                timestamp: 0,
                time: LogicalTime(k as u64),
            });
        }
        m.train(n_catalog, m.cfg.epochs);
        Ok(m)
    }

    /// `b_c + <p_u, q_c>`; an unknown user scores by bias only, an unknown item 0.
    pub(crate) fn score(&self, u: usize, c: usize) -> f64 {
        let d = self.cfg.dim;
        let Some(&bias) = self.b.get(c) else {
            return 0.0;
        };
        let mut s = bias;
        if let (Some(pu), Some(qc)) = (
            self.p.get(u * d..(u + 1) * d),
            self.q.get(c * d..(c + 1) * d),
        ) {
            for f in 0..d {
                s += pu[f] * qc[f];
            }
        }
        f64::from(s)
    }
}

impl Policy for Bpr {
    fn name(&self) -> &str {
        "bpr"
    }

    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.seen.record(event);
        if self.cfg.fit {
            self.events
                .push((event.user.0, event.item.0, Some(event.timestamp)));
        }
        Ok(Vec::new())
    }

    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        if self.rounds == 0 {
            self.train_cold(ctx.catalog.len())?;
        }
        let scores = query
            .candidates()
            .iter()
            .map(|c| self.score(query.user.index(), c.index()))
            .collect();
        Ok(scored(query, scores))
    }

    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let fresh = self.seen.n_events - self.trained_at;
        match trigger {
            MaintainTrigger::BeforeDecisions => {
                if self.rounds == 0 {
                    self.train_cold(ctx.catalog.len())?;
                } else if fresh > 0 {
                    self.train(ctx.catalog.len(), self.cfg.warm_epochs);
                }
            }
            MaintainTrigger::Tick => {
                if self.cfg.retrain_every > 0 && fresh >= self.cfg.retrain_every {
                    if self.rounds == 0 {
                        self.train_cold(ctx.catalog.len())?;
                    } else {
                        self.train(ctx.catalog.len(), self.cfg.warm_epochs);
                    }
                }
            }
            MaintainTrigger::EndOfStream => {}
        }
        Ok(Vec::new())
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "observed": self.seen.n_events,
            "train_rounds": self.rounds,
            "sgd_steps": self.steps,
            "dim": self.cfg.dim,
            "epochs": self.cfg.epochs,
            "lr": self.cfg.lr,
            "reg": self.cfg.reg,
            "fit": match &self.fitted {
                Some(r) => serde_json::to_value(r).unwrap_or(serde_json::Value::Null),
                None => serde_json::json!({ "mode": if self.cfg.fit { "auto" } else { "none" } }),
            },
        })
    }
}
