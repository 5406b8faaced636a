//! LightGCN (He et al., SIGIR 2020): user and item embeddings smoothed over
//! the user–item graph, no feature maps, no non-linearity.
//!
//! **Model.** `E⁰` holds one `dim`-vector per user and per item (the only
//! parameters). Each of `layers` propagations is `E^{k+1} = Â E^k` with the
//! symmetric normalisation `Â = D^{−1/2} A D^{−1/2}` of the bipartite
//! adjacency `A` of the distinct training pairs (eq. 7–8 of the paper); the
//! final embedding is the mean `(E⁰ + … + E^K) / (K + 1)` (α_k = 1/(K+1)),
//! and a user scores an item by the dot product of their final embeddings.
//!
//! **Training.** BPR loss `−ln σ(ŷ_ui − ŷ_uj)` over batches of observed
//! pairs with one negative `j` drawn uniformly among the items `u` never
//! touched, plus `λ (‖e⁰_u‖² + ‖e⁰_i‖² + ‖e⁰_j‖²) / (2 · batch)` on the ego
//! (layer-0) embeddings of the batch (eq. 15). Adam. Defaults: `dim=64`,
//! `layers=3` (the paper's), `λ=1e-4` (the paper's), `lr=0.001`,
//! `batch=2048`, 300 epochs at most, patience 50 (the paper's early stop;
//! RecBole's 10 ends a 3-layer model on ml-100k at epoch 12, inside the
//! dip its validation curve takes before it rises), weights Xavier-uniform
//! (RecBole's initialisation).
//!
//! `Â E` is a sparse product ([`Propagate`]: CSR rows over the training
//! pool, with `Â`'s symmetry giving its backward pass as the same product)
//! instead of gathers and scatters of every edge, which cost ten times more.

use crate::nn;
use crate::rng;
use crate::valid::{figures, rank_of, Round, TrainReport, Validation};
use crate::{env, TrainError};
use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::Rng;
use rayon::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;

const MODEL: &str = "lightgcn";

/// Settings of [`LightGcn`]. Their defaults are written once, in
/// `evomem-policy`'s family table (module docs list them).
#[derive(Debug, Clone, PartialEq)]
pub struct LightGcnConfig {
    /// Embedding size.
    pub dim: usize,
    /// Propagation layers K.
    pub layers: usize,
    /// λ on the ego embeddings.
    pub reg: f64,
    /// Adam learning rate.
    pub lr: f64,
    /// Pairs per batch.
    pub batch: usize,
    /// Epoch cap.
    pub epochs: usize,
    /// Epochs without a validation gain before stopping (0 = never).
    pub patience: usize,
    /// Seed.
    pub seed: u64,
    /// Threads (0 = the process's training environment).
    pub threads: usize,
}

#[cfg(test)]
impl LightGcnConfig {
    /// The harness's defaults (the family table holds them for runs).
    pub(crate) fn for_tests() -> Self {
        Self {
            dim: 64,
            layers: 3,
            reg: 1e-4,
            lr: 0.001,
            batch: 2048,
            epochs: 300,
            patience: 10,
            seed: 42,
            threads: 0,
        }
    }
}

/// `Â` in CSR form over `n` nodes (users, then items).
#[derive(Debug, Clone)]
pub struct Graph {
    n: usize,
    row: Vec<usize>,
    col: Vec<u32>,
    val: Vec<f32>,
}

impl Graph {
    /// The normalised adjacency of the distinct `(user, item)` pairs.
    pub fn new(n_users: usize, n_items: usize, pairs: &[(u32, u32)]) -> Self {
        let n = n_users + n_items;
        let mut adj: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(u, i) in pairs {
            let (u, i) = (u as usize, n_users + i as usize);
            if u < n_users && i < n {
                adj[u].push(i as u32);
                adj[i].push(u as u32);
            }
        }
        for a in &mut adj {
            a.sort_unstable();
            a.dedup();
        }
        let deg: Vec<f32> = adj.iter().map(|a| a.len() as f32).collect();
        let mut row = Vec::with_capacity(n + 1);
        let (mut col, mut val) = (Vec::new(), Vec::new());
        row.push(0);
        for (r, a) in adj.iter().enumerate() {
            for &c in a {
                col.push(c);
                val.push(1.0 / (deg[r] * deg[c as usize]).sqrt());
            }
            row.push(col.len());
        }
        Self { n, row, col, val }
    }

    /// Edges (both directions).
    pub fn nnz(&self) -> usize {
        self.col.len()
    }

    fn apply(&self, x: &[f32], d: usize) -> Vec<f32> {
        let mut out = vec![0f32; self.n * d];
        out.par_chunks_mut(d.max(1)).enumerate().for_each(|(r, o)| {
            let (a, b) = (self.row[r], self.row[r + 1]);
            for (&c, &w) in self.col[a..b].iter().zip(&self.val[a..b]) {
                let src = &x[c as usize * d..(c as usize + 1) * d];
                for (oi, si) in o.iter_mut().zip(src) {
                    *oi += w * si;
                }
            }
        });
        out
    }
}

/// `Â E` as a differentiable op; `Â` is symmetric, so the gradient is
/// `Â G`.
#[derive(Debug, Clone)]
pub struct Propagate(pub Arc<Graph>);

impl CustomOp1 for Propagate {
    fn name(&self) -> &'static str {
        "lightgcn-propagate"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, d) = l.shape().dims2()?;
        if n != self.0.n {
            candle_core::bail!("propagate: {n} rows for a graph of {} nodes", self.0.n)
        }
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("propagate: input must be contiguous")
        };
        let x = s
            .as_slice::<f32>()?
            .get(a..b)
            .ok_or_else(|| candle_core::Error::Msg("propagate: input out of range".into()))?;
        Ok((CpuStorage::F32(self.0.apply(x, d)), Shape::from((n, d))))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.contiguous()?.apply_op1(self.clone())?))
    }
}

/// A LightGCN model.
pub struct LightGcn {
    cfg: LightGcnConfig,
    n_users: usize,
    n_items: usize,
    ego: Var,
    graph: Arc<Graph>,
    /// Final embeddings after training (users, then items), row-major.
    last: Vec<f32>,
    rounds: u64,
}

impl std::fmt::Debug for LightGcn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LightGcn")
            .field("cfg", &self.cfg)
            .field("n_users", &self.n_users)
            .field("n_items", &self.n_items)
            .finish()
    }
}

impl LightGcn {
    /// A fresh model over `n_users × n_items` whose graph is `pairs`.
    pub fn new(
        cfg: LightGcnConfig,
        n_users: usize,
        n_items: usize,
        pairs: &[(u32, u32)],
    ) -> Result<Self, TrainError> {
        if cfg.dim == 0 || cfg.batch == 0 || !(cfg.lr.is_finite() && cfg.lr > 0.0) {
            return Err(TrainError::Config {
                model: MODEL,
                why: "`dim`, `batch` and `lr` must be > 0".into(),
            });
        }
        if !(cfg.reg.is_finite() && cfg.reg >= 0.0) {
            return Err(TrainError::Config {
                model: MODEL,
                why: format!("`reg` must be >= 0, got {}", cfg.reg),
            });
        }
        if n_users == 0 || n_items < 2 {
            return Err(TrainError::Data {
                model: MODEL,
                why: format!(
                    "{n_users} users and {n_items} items: a graph needs users and two items"
                ),
            });
        }
        let n = n_users + n_items;
        // Xavier-uniform over the (n, dim) table.
        let a = (6.0 / (n + cfg.dim) as f32).sqrt();
        let mut r = rng::stream(cfg.seed, 0x19c_0001);
        let ego = nn::var(rng::uniform(&mut r, n * cfg.dim, a), (n, cfg.dim))?;
        Ok(Self {
            graph: Arc::new(Graph::new(n_users, n_items, pairs)),
            cfg,
            n_users,
            n_items,
            ego,
            last: Vec::new(),
            rounds: 0,
        })
    }

    /// The same embeddings over the graph of `pairs` (a warm retraining
    /// round after new interactions between known users and items).
    pub fn with_graph(mut self, pairs: &[(u32, u32)]) -> Self {
        self.graph = Arc::new(Graph::new(self.n_users, self.n_items, pairs));
        self
    }

    /// The settings.
    pub fn config(&self) -> &LightGcnConfig {
        &self.cfg
    }

    /// Users and items of the model.
    pub fn size(&self) -> (usize, usize) {
        (self.n_users, self.n_items)
    }

    /// SHA-256 of the ego embeddings.
    pub fn checksum(&self) -> Result<String, TrainError> {
        Ok(nn::checksum(std::slice::from_ref(&self.ego))?)
    }

    /// The final embeddings: the mean of `E⁰ … E^K`.
    fn propagate(&self) -> candle_core::Result<Tensor> {
        let op = Propagate(self.graph.clone());
        let mut e = self.ego.as_tensor().clone();
        let mut sum = e.clone();
        for _ in 0..self.cfg.layers {
            e = e.apply_op1(op.clone())?;
            sum = (sum + &e)?;
        }
        sum / (self.cfg.layers + 1) as f64
    }

    /// `user · item` on the final embeddings of the last training (0 for a
    /// user or item the graph does not hold).
    pub fn score(&self, user: u32, item: u32) -> f32 {
        let d = self.cfg.dim;
        let (u, i) = (user as usize, item as usize);
        if u >= self.n_users || i >= self.n_items {
            return 0.0;
        }
        let i = self.n_users + i;
        match (
            self.last.get(u * d..(u + 1) * d),
            self.last.get(i * d..(i + 1) * d),
        ) {
            (Some(a), Some(b)) => a.iter().zip(b).map(|(x, y)| x * y).sum(),
            _ => 0.0,
        }
    }

    fn refresh(&mut self) -> candle_core::Result<()> {
        self.last = self.propagate()?.flatten_all()?.to_vec1::<f32>()?;
        Ok(())
    }

    fn validate(&self, valid: &[Validation]) -> (f64, f64) {
        let ranks: Vec<f64> = valid
            .iter()
            .map(|v| {
                let negs: Vec<f32> = v.negatives.iter().map(|&c| self.score(v.user, c)).collect();
                rank_of(self.score(v.user, v.target), &negs)
            })
            .collect();
        figures(&ranks)
    }

    /// Train on the graph's pairs `pairs` (the same ones it was built on),
    /// stopping early on `valid`, at most `epochs` epochs.
    pub fn train(
        &mut self,
        pairs: &[(u32, u32)],
        valid: &[Validation],
        epochs: usize,
    ) -> Result<TrainReport, TrainError> {
        let pool = env::pool(self.cfg.threads)?;
        pool.install(|| self.train_here(pairs, valid, epochs))
    }

    fn train_here(
        &mut self,
        pairs: &[(u32, u32)],
        valid: &[Validation],
        epochs: usize,
    ) -> Result<TrainReport, TrainError> {
        let cfg = self.cfg.clone();
        let mut distinct: Vec<(u32, u32)> = pairs
            .iter()
            .copied()
            .filter(|&(u, i)| (u as usize) < self.n_users && (i as usize) < self.n_items)
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.is_empty() {
            return Err(TrainError::Data {
                model: MODEL,
                why: "no training pair".into(),
            });
        }
        let seen: HashSet<(u32, u32)> = distinct.iter().copied().collect();
        let round = self.rounds;
        self.rounds += 1;
        let mut r = rng::stream(cfg.seed, 0x19c_1000 + round);
        let mut opt = AdamW::new(
            vec![self.ego.clone()],
            ParamsAdamW {
                lr: cfg.lr,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
        )?;
        let ego = [self.ego.clone()];
        let mut round = Round::new(
            MODEL,
            &ego,
            epochs,
            cfg.patience,
            valid.len(),
            distinct.len(),
        );
        let dev = Device::Cpu;
        let nu = self.n_users as u32;
        for epoch in 1..=epochs {
            let order = rng::permutation(&mut r, distinct.len());
            let (mut loss_sum, mut steps) = (0.0, 0usize);
            for chunk in order.chunks(cfg.batch) {
                let (mut us, mut is, mut js) = (Vec::new(), Vec::new(), Vec::new());
                for &k in chunk {
                    let Some(&(u, i)) = distinct.get(k) else {
                        continue;
                    };
                    let mut j = r.gen_range(0..self.n_items as u32);
                    let mut tries = 0;
                    while seen.contains(&(u, j)) && tries < 100 {
                        j = r.gen_range(0..self.n_items as u32);
                        tries += 1;
                    }
                    us.push(u);
                    is.push(nu + i);
                    js.push(nu + j);
                }
                let b = us.len();
                let idx = |v: Vec<u32>| Tensor::from_vec(v, b, &dev);
                let (ut, it, jt) = (idx(us)?, idx(is)?, idx(js)?);
                let fin = self.propagate()?;
                let (eu, ei, ej) = (
                    fin.index_select(&ut, 0)?,
                    fin.index_select(&it, 0)?,
                    fin.index_select(&jt, 0)?,
                );
                let x = ((&eu * &ei)?.sum(1)? - (&eu * &ej)?.sum(1)?)?;
                let bpr = nn::softplus(&x.neg()?)?.mean_all()?;
                let ego = self.ego.as_tensor();
                let reg = (ego.index_select(&ut, 0)?.sqr()?.sum_all()?
                    + ego.index_select(&it, 0)?.sqr()?.sum_all()?
                    + ego.index_select(&jt, 0)?.sqr()?.sum_all()?)?;
                let loss = (bpr + (reg * (cfg.reg / (2.0 * b as f64)))?)?;
                opt.backward_step(&loss)?;
                loss_sum += f64::from(loss.to_scalar::<f32>()?);
                steps += 1;
            }
            let loss = loss_sum / steps.max(1) as f64;
            self.refresh()?;
            if round.epoch(epoch, loss, steps, self.validate(valid))? {
                break;
            }
        }
        let report = round.finish()?;
        self.refresh()?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normalised_adjacency_is_symmetric() {
        let g = Graph::new(2, 3, &[(0, 0), (0, 1), (1, 1), (1, 2), (0, 0)]);
        assert_eq!(g.nnz(), 8);
        // Â x for x = e_{user 0}: items 0 and 1 get 1/sqrt(2·1) and 1/sqrt(2·2).
        let mut x = vec![0f32; 5];
        x[0] = 1.0;
        let y = g.apply(&x, 1);
        assert!(
            (y[2] - 1.0 / 2f32.sqrt()).abs() < 1e-6 && (y[3] - 0.5).abs() < 1e-6,
            "{y:?}"
        );
        // Symmetry: <Â a, b> = <a, Â b>.
        let a = [0.3f32, -1.0, 0.5, 2.0, 0.1];
        let b = [1.0f32, 0.2, -0.7, 0.4, 0.9];
        let (aa, ab) = (g.apply(&a, 1), g.apply(&b, 1));
        let l: f32 = aa.iter().zip(&b).map(|(x, y)| x * y).sum();
        let r: f32 = a.iter().zip(&ab).map(|(x, y)| x * y).sum();
        assert!((l - r).abs() < 1e-5);
    }

    /// Two communities: users 0..20 take items 0..10, users 20..40 items
    /// 10..20; held-out items come from the user's own community.
    #[test]
    fn learns_planted_communities() {
        let mut pairs = Vec::new();
        let mut valid = Vec::new();
        for u in 0..40u32 {
            let base = if u < 20 { 0 } else { 10 };
            for k in 0..5 {
                pairs.push((u, base + (u + 3 * k) % 10));
            }
            valid.push(Validation {
                user: u,
                history: Vec::new(),
                target: base + (u + 1) % 10,
                negatives: (0..9).map(|k| (10 - base) + k).collect(),
            });
        }
        let cfg = LightGcnConfig {
            dim: 8,
            lr: 0.05,
            batch: 64,
            threads: 1,
            ..LightGcnConfig::for_tests()
        };
        let mut m = LightGcn::new(cfg, 40, 20, &pairs).unwrap();
        let rep = m.train(&pairs, &valid, 30).unwrap();
        assert!(rep.loss.last().unwrap() < &rep.loss[0], "{:?}", rep.loss);
        assert!(rep.best_valid_hr1 > 0.9, "{rep:?}");
        let again = {
            let mut m2 = LightGcn::new(m.config().clone(), 40, 20, &pairs).unwrap();
            m2.train(&pairs, &valid, 30).unwrap();
            m2.checksum().unwrap()
        };
        assert_eq!(m.checksum().unwrap(), again);
    }
}
