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

use super::random::splitmix;
use super::scored;
use crate::registry::PolicySpec;
use evomem_core::{
    DecisionQuery, Interaction, MaintainTrigger, PlannedOp, Policy, PolicyCtx, PolicyError, Recall,
};
use evomem_kit::Observed;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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

    /// `b_c + <p_u, q_c>`; an unknown user scores by bias only, an unknown item 0.
    fn score(&self, u: usize, c: usize) -> f64 {
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
        Ok(Vec::new())
    }

    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        if self.rounds == 0 {
            self.train(ctx.catalog.len(), self.cfg.epochs);
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
                    self.train(ctx.catalog.len(), self.cfg.epochs);
                } else if fresh > 0 {
                    self.train(ctx.catalog.len(), self.cfg.warm_epochs);
                }
            }
            MaintainTrigger::Tick => {
                if self.cfg.retrain_every > 0 && fresh >= self.cfg.retrain_every {
                    let epochs = if self.rounds == 0 {
                        self.cfg.epochs
                    } else {
                        self.cfg.warm_epochs
                    };
                    self.train(ctx.catalog.len(), epochs);
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
        })
    }
}
