//! SASRec: self-attentive sequential recommendation (Kang and McAuley,
//! ICDM 2018), as RecBole 1.2.1 lays it out.
//!
//! **Model.** Items are embedded (`hidden`, index 0 is padding) and added
//! to a learned embedding of the position in the window (0 = the oldest
//! item shown), then layer-normed and dropped out. `layers` blocks follow,
//! each a causal multi-head self-attention (`heads` heads, scaled dot
//! products, a −10000 mask on later positions, attention dropout, an output
//! map, dropout, a residual and a layer norm) and a point-wise feed-forward
//! net (`hidden → inner → hidden` with GELU, dropout, residual, layer norm).
//! A position's output scores item `c` as its dot product with `c`'s input
//! embedding (shared weights). Defaults are RecBole's: `hidden=64`,
//! `layers=2`, `heads=2`, `inner=256`, dropouts 0.5, layer-norm ε 1e-12,
//! weights drawn from N(0, 0.02²), `max_len=50`, Adam at 0.001, 2,048
//! targets a batch, 300 epochs at most, patience 10 on validation NDCG@10.
//!
//! **Loss.** `loss=ce` (the default): softmax cross-entropy over every
//! item, RecBole's `loss_type: CE` (which gave HR@1 0.645 on ml-100k in
//! this protocol), computed in chunks of rows by [`crate::ce`]. `loss=bce`: the
//! paper's binary cross-entropy with one uniformly drawn negative the user
//! never touched per target. CE is the default because it is the setting
//! the reference figure comes from and it learns from every item at each
//! step instead of one negative.
//!
//! **Targets.** RecBole turns each prefix of a training sequence into one
//! sample (the last `max_len` items before a target). This trainer computes
//! the same samples in one pass per window: a window of up to `max_len`
//! consecutive items predicts its next item at every position, which under
//! the causal mask sees exactly the items before it in the window. A user
//! with more than `max_len + 1` training items gets overlapping windows
//! `stride` apart, and each target is counted once, in the window where it
//! sees the most history (at least `max_len − stride` items). For
//! sequences up to `max_len + 1` items these are RecBole's samples exactly;
//! dropout masks are shared by the positions of a window.

use crate::nn::{self, dropout, layer_norm, linear};
use crate::rng;
use crate::valid::{figures, rank_of, Round, TrainReport, Validation};
use crate::{env, TrainError};
use candle_core::{Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

const MODEL: &str = "sasrec";

/// The loss (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Softmax cross-entropy over every item.
    Ce,
    /// Binary cross-entropy with one sampled negative.
    Bce,
}

/// Settings of [`SasRec`]. Their defaults are written once, in
/// `evomem-policy`'s family table (module docs list them).
#[derive(Debug, Clone, PartialEq)]
pub struct SasRecConfig {
    /// Embedding and hidden size.
    pub hidden: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads (divides `hidden`).
    pub heads: usize,
    /// Feed-forward inner size.
    pub inner: usize,
    /// Hidden dropout.
    pub dropout: f32,
    /// Attention-probability dropout.
    pub attn_dropout: f32,
    /// Longest window.
    pub max_len: usize,
    /// Window stride for long sequences (1..=max_len).
    pub stride: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Targets per batch.
    pub batch: usize,
    /// Epoch cap.
    pub epochs: usize,
    /// Epochs without a validation gain before stopping (0 = never).
    pub patience: usize,
    /// The loss.
    pub loss: Loss,
    /// Seed.
    pub seed: u64,
    /// Threads (0 = the process's training environment).
    pub threads: usize,
}

#[cfg(test)]
impl SasRecConfig {
    /// The harness's defaults (the family table holds them for runs).
    pub(crate) fn for_tests() -> Self {
        Self {
            hidden: 64,
            layers: 2,
            heads: 2,
            inner: 256,
            dropout: 0.5,
            attn_dropout: 0.5,
            max_len: 50,
            stride: 25,
            lr: 0.001,
            batch: 2048,
            epochs: 300,
            patience: 10,
            loss: Loss::Ce,
            seed: 42,
            threads: 0,
        }
    }
}

struct Block {
    wq: Var,
    bq: Var,
    wk: Var,
    bk: Var,
    wv: Var,
    bv: Var,
    wo: Var,
    bo: Var,
    ln1w: Var,
    ln1b: Var,
    w1: Var,
    b1: Var,
    w2: Var,
    b2: Var,
    ln2w: Var,
    ln2b: Var,
}

/// A SASRec model over `n_items` items.
pub struct SasRec {
    cfg: SasRecConfig,
    n_items: usize,
    item: Var,
    pos: Var,
    ln0w: Var,
    ln0b: Var,
    blocks: Vec<Block>,
    vars: Vec<Var>,
    rounds: u64,
    /// The item table after the last training ([`SasRec::item_table`]).
    table: Vec<f32>,
}

impl std::fmt::Debug for SasRec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SasRec")
            .field("cfg", &self.cfg)
            .field("n_items", &self.n_items)
            .finish()
    }
}

/// One training window: `seq[start..start + len]` of a user, counting the
/// targets at positions `from..len`.
#[derive(Debug, Clone, Copy)]
struct Window {
    user: usize,
    start: usize,
    len: usize,
    from: usize,
}

/// The batch's windows sorted by length (stably) and cut into groups
/// whose longest window is at most twice the shortest's.
fn length_groups(batch: &[Window]) -> Vec<Vec<Window>> {
    let mut sorted = batch.to_vec();
    sorted.sort_by_key(|w| w.len);
    let mut groups: Vec<Vec<Window>> = Vec::new();
    for w in sorted {
        match groups.last_mut() {
            Some(g) if g.first().is_some_and(|f| w.len <= 2 * f.len.max(1)) => g.push(w),
            _ => groups.push(vec![w]),
        }
    }
    groups
}

/// The windows of one training sequence of `n` items (module docs): pairs
/// `(input p, target p + 1)` for `p < n − 1`.
fn windows_of(user: usize, n: usize, max_len: usize, stride: usize, out: &mut Vec<Window>) {
    if n < 2 {
        return;
    }
    let pairs = n - 1;
    let mut starts = Vec::new();
    let mut a = 0;
    while a + max_len < pairs {
        starts.push(a);
        a += stride.max(1);
    }
    starts.push(pairs.saturating_sub(max_len));
    let mut covered = 0;
    for s in starts {
        let len = max_len.min(pairs - s);
        let end = s + len;
        if end <= covered {
            continue;
        }
        let from = covered.saturating_sub(s);
        out.push(Window {
            user,
            start: s,
            len,
            from,
        });
        covered = end;
    }
}

impl SasRec {
    /// A fresh model with seeded weights; fails on settings out of range.
    pub fn new(cfg: SasRecConfig, n_items: usize) -> Result<Self, TrainError> {
        let bad = |why: String| Err(TrainError::Config { model: MODEL, why });
        if cfg.hidden == 0 || cfg.heads == 0 || !cfg.hidden.is_multiple_of(cfg.heads) {
            return bad(format!(
                "`hidden` ({}) must be a positive multiple of `heads` ({})",
                cfg.hidden, cfg.heads
            ));
        }
        if cfg.max_len == 0 || cfg.stride == 0 || cfg.stride > cfg.max_len {
            return bad(format!(
                "`max_len` must be >= 1 and `stride` in 1..=max_len (got {} and {})",
                cfg.max_len, cfg.stride
            ));
        }
        if !(0.0..1.0).contains(&cfg.dropout) || !(0.0..1.0).contains(&cfg.attn_dropout) {
            return bad("dropouts must be in [0, 1)".into());
        }
        if !(cfg.lr.is_finite() && cfg.lr > 0.0) || cfg.batch == 0 || cfg.inner == 0 {
            return bad("`lr`, `batch` and `inner` must be > 0".into());
        }
        if n_items == 0 {
            return Err(TrainError::Data {
                model: MODEL,
                why: "the catalog is empty".into(),
            });
        }
        let mut r = rng::stream(cfg.seed, 0x5a5_0001);
        let (d, inner) = (cfg.hidden, cfg.inner);
        let mut normal = |n: usize| rng::normal(&mut r, n, 0.02);
        let item = nn::var(normal((n_items + 1) * d), (n_items + 1, d))?;
        let pos = nn::var(normal(cfg.max_len * d), (cfg.max_len, d))?;
        let mut blocks = Vec::with_capacity(cfg.layers);
        for _ in 0..cfg.layers {
            blocks.push(Block {
                wq: nn::var(normal(d * d), (d, d))?,
                bq: nn::var(vec![0.0; d], d)?,
                wk: nn::var(normal(d * d), (d, d))?,
                bk: nn::var(vec![0.0; d], d)?,
                wv: nn::var(normal(d * d), (d, d))?,
                bv: nn::var(vec![0.0; d], d)?,
                wo: nn::var(normal(d * d), (d, d))?,
                bo: nn::var(vec![0.0; d], d)?,
                ln1w: nn::var(vec![1.0; d], d)?,
                ln1b: nn::var(vec![0.0; d], d)?,
                w1: nn::var(normal(d * inner), (d, inner))?,
                b1: nn::var(vec![0.0; inner], inner)?,
                w2: nn::var(normal(inner * d), (inner, d))?,
                b2: nn::var(vec![0.0; d], d)?,
                ln2w: nn::var(vec![1.0; d], d)?,
                ln2b: nn::var(vec![0.0; d], d)?,
            });
        }
        let ln0w = nn::var(vec![1.0; d], d)?;
        let ln0b = nn::var(vec![0.0; d], d)?;
        let mut vars = vec![item.clone(), pos.clone(), ln0w.clone(), ln0b.clone()];
        for b in &blocks {
            vars.extend(
                [
                    &b.wq, &b.bq, &b.wk, &b.bk, &b.wv, &b.bv, &b.wo, &b.bo, &b.ln1w, &b.ln1b,
                    &b.w1, &b.b1, &b.w2, &b.b2, &b.ln2w, &b.ln2b,
                ]
                .map(Clone::clone),
            );
        }
        Ok(Self {
            cfg,
            n_items,
            item,
            pos,
            ln0w,
            ln0b,
            blocks,
            vars,
            rounds: 0,
            table: Vec::new(),
        })
        .and_then(|mut m: Self| {
            m.table = m.item_vectors()?;
            Ok(m)
        })
    }

    /// Items the model scores.
    pub fn n_items(&self) -> usize {
        self.n_items
    }

    /// The settings.
    pub fn config(&self) -> &SasRecConfig {
        &self.cfg
    }

    /// SHA-256 of the weights.
    pub fn checksum(&self) -> Result<String, TrainError> {
        Ok(nn::checksum(&self.vars)?)
    }

    /// The transformer's output `(B, T, hidden)` for padded ids `(B, T)`
    /// (item + 1, 0 = padding); dropout from `rng` when training.
    fn forward(
        &self,
        ids: &Tensor,
        mut rng: Option<&mut ChaCha8Rng>,
    ) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let cfg = &self.cfg;
        let (d, h) = (cfg.hidden, cfg.heads);
        let dh = d / h;
        let x = self
            .item
            .as_tensor()
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, t, d))?;
        let x = nn::add_bias(&x, &self.pos.as_tensor().narrow(0, 0, t)?)?;
        let x = layer_norm(&x, &self.ln0w, &self.ln0b, 1e-12)?;
        let mut x = dropout(&x, rng.as_deref_mut(), cfg.dropout)?;
        let scale = 1.0 / (dh as f32).sqrt();
        for blk in &self.blocks {
            let heads = |w: &Var, bias: &Var| -> candle_core::Result<Tensor> {
                linear(&x, w, bias)?
                    .reshape((b, t, h, dh))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = heads(&blk.wq, &blk.bq)?;
            let k = heads(&blk.wk, &blk.bk)?;
            let v = heads(&blk.wv, &blk.bv)?;
            let scores = q.matmul(&k.transpose(2, 3)?.contiguous()?)?;
            let probs = nn::causal_softmax(&scores, scale)?;
            let probs = dropout(&probs, rng.as_deref_mut(), cfg.attn_dropout)?;
            let ctx = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b, t, d))?;
            let a = linear(&ctx, &blk.wo, &blk.bo)?;
            let a = dropout(&a, rng.as_deref_mut(), cfg.dropout)?;
            let x1 = layer_norm(&(a + &x)?, &blk.ln1w, &blk.ln1b, 1e-12)?;
            let f = nn::gelu_erf(&linear(&x1, &blk.w1, &blk.b1)?)?;
            let f = linear(&f, &blk.w2, &blk.b2)?;
            let f = dropout(&f, rng.as_deref_mut(), cfg.dropout)?;
            x = layer_norm(&(f + &x1)?, &blk.ln2w, &blk.ln2b, 1e-12)?;
        }
        Ok(x)
    }

    /// The output at the last position of each sequence's last `max_len`
    /// items (empty sequences get the zero vector), row-major `n × hidden`.
    pub fn user_vectors(&self, seqs: &[&[u32]]) -> Result<Vec<f32>, TrainError> {
        let pool = env::pool(self.cfg.threads)?;
        pool.install(|| self.user_vectors_here(seqs))
    }

    fn user_vectors_here(&self, seqs: &[&[u32]]) -> Result<Vec<f32>, TrainError> {
        let d = self.cfg.hidden;
        let mut out = vec![0f32; seqs.len() * d];
        for (c, chunk) in seqs.chunks(256).enumerate() {
            let t = chunk
                .iter()
                .map(|s| s.len().min(self.cfg.max_len))
                .max()
                .unwrap_or(0);
            if t == 0 {
                continue;
            }
            let mut ids = vec![0u32; chunk.len() * t];
            let mut last = Vec::with_capacity(chunk.len());
            for (r, s) in chunk.iter().enumerate() {
                let w = &s[s.len().saturating_sub(self.cfg.max_len)..];
                for (p, &i) in w.iter().enumerate() {
                    ids[r * t + p] = i + 1;
                }
                last.push((r * t + w.len().saturating_sub(1)) as u32);
            }
            let ids = Tensor::from_vec(ids, (chunk.len(), t), &Device::Cpu)?;
            let y = self.forward(&ids, None)?.reshape((chunk.len() * t, d))?;
            let sel = y.index_select(&Tensor::new(last.as_slice(), &Device::Cpu)?, 0)?;
            let v = sel.flatten_all()?.to_vec1::<f32>()?;
            for (r, s) in chunk.iter().enumerate() {
                if !s.is_empty() {
                    let at = (c * 256 + r) * d;
                    out[at..at + d].copy_from_slice(&v[r * d..(r + 1) * d]);
                }
            }
        }
        Ok(out)
    }

    /// The item table (row `i` = item `i`), row-major `n_items × hidden`.
    pub fn item_vectors(&self) -> Result<Vec<f32>, TrainError> {
        Ok(self
            .item
            .as_tensor()
            .narrow(0, 1, self.n_items)?
            .flatten_all()?
            .to_vec1::<f32>()?)
    }

    /// The item table as of the last training, row-major
    /// `n_items × hidden` (what decisions score against).
    pub fn item_table(&self) -> &[f32] {
        &self.table
    }

    /// Validation NDCG@10 and HR@1.
    fn validate(&self, valid: &[Validation]) -> Result<(f64, f64), TrainError> {
        if valid.is_empty() {
            return Ok((0.0, 0.0));
        }
        let d = self.cfg.hidden;
        let seqs: Vec<&[u32]> = valid.iter().map(|v| v.history.as_slice()).collect();
        let users = self.user_vectors_here(&seqs)?;
        let items = self.item_vectors()?;
        let dot = |u: usize, i: u32| -> f32 {
            let (a, b) = (
                &users[u * d..(u + 1) * d],
                items.get(i as usize * d..(i as usize + 1) * d),
            );
            b.map_or(0.0, |b| a.iter().zip(b).map(|(x, y)| x * y).sum())
        };
        let ranks: Vec<f64> = valid
            .iter()
            .enumerate()
            .map(|(k, v)| {
                let negs: Vec<f32> = v.negatives.iter().map(|&c| dot(k, c)).collect();
                rank_of(dot(k, v.target), &negs)
            })
            .collect();
        Ok(figures(&ranks))
    }

    /// Train on `seqs` (each user's training items, oldest first), stopping
    /// early on `valid`. Warm-starts from the current weights when called
    /// again (the evolving protocol's retraining rounds), with at most
    /// `epochs` epochs.
    pub fn train(
        &mut self,
        seqs: &[Vec<u32>],
        valid: &[Validation],
        epochs: usize,
    ) -> Result<TrainReport, TrainError> {
        let pool = env::pool(self.cfg.threads)?;
        pool.install(|| self.train_here(seqs, valid, epochs))
    }

    fn train_here(
        &mut self,
        seqs: &[Vec<u32>],
        valid: &[Validation],
        epochs: usize,
    ) -> Result<TrainReport, TrainError> {
        let cfg = self.cfg.clone();
        if let Some(bad) = seqs.iter().flatten().find(|&&i| i as usize >= self.n_items) {
            return Err(TrainError::Data {
                model: MODEL,
                why: format!("item {bad} is outside the catalog of {}", self.n_items),
            });
        }
        let mut windows = Vec::new();
        for (u, s) in seqs.iter().enumerate() {
            windows_of(u, s.len(), cfg.max_len, cfg.stride, &mut windows);
        }
        let targets: usize = windows.iter().map(|w| w.len - w.from).sum();
        if targets == 0 {
            return Err(TrainError::Data {
                model: MODEL,
                why: "no training sequence has two items (every sequence has length 0 or 1)".into(),
            });
        }
        let round = self.rounds;
        self.rounds += 1;
        let mut r = rng::stream(cfg.seed, 0x5a5_1000 + round);
        let mut opt = AdamW::new(
            self.vars.clone(),
            ParamsAdamW {
                lr: cfg.lr,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
        )?;
        let vars = self.vars.clone();
        let mut round = Round::new(MODEL, &vars, epochs, cfg.patience, valid.len(), targets);
        for epoch in 1..=epochs {
            let order = rng::permutation(&mut r, windows.len());
            let mut batch: Vec<Window> = Vec::new();
            let mut in_batch = 0;
            let (mut loss_sum, mut loss_n, mut steps) = (0.0, 0usize, 0usize);
            for (k, &w) in order.iter().enumerate() {
                let Some(&win) = windows.get(w) else { continue };
                batch.push(win);
                in_batch += win.len - win.from;
                if in_batch >= cfg.batch || k + 1 == order.len() {
                    let l = self.step(seqs, &batch, &mut r, &mut opt)?;
                    loss_sum += l * in_batch as f64;
                    loss_n += in_batch;
                    steps += 1;
                    batch.clear();
                    in_batch = 0;
                }
            }
            let loss = loss_sum / loss_n.max(1) as f64;
            if round.epoch(epoch, loss, steps, self.validate(valid)?)? {
                break;
            }
        }
        let report = round.finish()?;
        self.table = self.item_vectors()?;
        Ok(report)
    }

    /// One optimiser step on `batch`; returns the batch's mean loss.
    ///
    /// The batch's windows are forwarded in groups of similar length
    /// ([`length_groups`]), each padded only to its own longest window: a
    /// window's outputs do not depend on padding after it (the causal
    /// mask), so this is the padded batch's computation without the
    /// padding. On Amazon Beauty (most windows 4–8 items, a few 50) it
    /// cuts the positions forwarded about six-fold.
    fn step(
        &self,
        seqs: &[Vec<u32>],
        batch: &[Window],
        r: &mut ChaCha8Rng,
        opt: &mut AdamW,
    ) -> Result<f64, TrainError> {
        let dev = Device::Cpu;
        let mut parts = Vec::new();
        let mut tgt = Vec::new();
        let mut user_of = Vec::new();
        for group in length_groups(batch) {
            let t = group.iter().map(|w| w.len).max().unwrap_or(1);
            let b = group.len();
            let mut ids = vec![0u32; b * t];
            let mut at = Vec::new();
            for (row, w) in group.iter().enumerate() {
                let Some(s) = seqs.get(w.user) else { continue };
                for p in 0..w.len {
                    let (Some(&i), Some(&next)) = (s.get(w.start + p), s.get(w.start + p + 1))
                    else {
                        continue;
                    };
                    ids[row * t + p] = i + 1;
                    if p >= w.from {
                        at.push((row * t + p) as u32);
                        tgt.push(next);
                        user_of.push(w.user);
                    }
                }
            }
            if at.is_empty() {
                continue;
            }
            let ids = Tensor::from_vec(ids, (b, t), &dev)?;
            let y = self
                .forward(&ids, Some(r))?
                .reshape((b * t, self.cfg.hidden))?;
            let k = at.len();
            parts.push(y.index_select(&Tensor::from_vec(at, k, &dev)?, 0)?);
        }
        if parts.is_empty() {
            return Ok(0.0);
        }
        let n = tgt.len();
        let h = Tensor::cat(&parts, 0)?;
        let (loss, value) = match self.cfg.loss {
            Loss::Ce => {
                let table = self.item.as_tensor().narrow(0, 1, self.n_items)?;
                crate::ce::chunked_mean_loss(&h, &table, &tgt)?
            }
            Loss::Bce => {
                let mut neg = Vec::with_capacity(n);
                for (&u, &p) in user_of.iter().zip(&tgt) {
                    let s = seqs.get(u).map(Vec::as_slice).unwrap_or(&[]);
                    let mut j = r.gen_range(0..self.n_items as u32);
                    let mut tries = 0;
                    while (j == p || s.contains(&j)) && tries < 100 {
                        j = r.gen_range(0..self.n_items as u32);
                        tries += 1;
                    }
                    neg.push(j + 1);
                }
                let pos: Vec<u32> = tgt.iter().map(|&i| i + 1).collect();
                let e = |v: Vec<u32>| -> candle_core::Result<Tensor> {
                    self.item
                        .as_tensor()
                        .index_select(&Tensor::from_vec(v, n, &dev)?, 0)
                };
                let sp = (&h * e(pos)?)?.sum(1)?;
                let sn = (&h * e(neg)?)?.sum(1)?;
                let loss = (nn::softplus(&sp.neg()?)? + nn::softplus(&sn)?)?.mean_all()?;
                let value = f64::from(loss.to_scalar::<f32>()?);
                (loss, value)
            }
        };
        opt.backward_step(&loss)?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(n: usize, max_len: usize, stride: usize) -> Vec<(usize, usize, usize)> {
        let mut w = Vec::new();
        windows_of(0, n, max_len, stride, &mut w);
        w.iter().map(|w| (w.start, w.len, w.from)).collect()
    }

    #[test]
    fn every_target_is_counted_once_with_the_most_history() {
        // 9 items, 8 pairs: one window holds them all.
        assert_eq!(windows(9, 50, 25), vec![(0, 8, 0)]);
        assert_eq!(windows(1, 50, 25), vec![]);
        // 12 pairs, windows of 5 every 2: pairs 0..5, then 5..7 in [2, 7),
        // 7..9 in [4, 9), 9..11 in [6, 11), 11 in the last [7, 12).
        let w = windows(13, 5, 2);
        assert_eq!(
            w,
            vec![(0, 5, 0), (2, 5, 3), (4, 5, 3), (6, 5, 3), (7, 5, 4)]
        );
        let counted: usize = w.iter().map(|(_, l, f)| l - f).sum();
        assert_eq!(counted, 12);
        for (s, _, f) in &w[1..] {
            assert!(*f >= 5 - 2, "start {s}: context {f}");
        }
    }

    /// Planted successors: item `k` is always followed by `k + 1 (mod n)`.
    fn planted(users: usize, n_items: u32, len: usize) -> Vec<Vec<u32>> {
        (0..users)
            .map(|u| {
                (0..len)
                    .map(|p| (u as u32 * 7 + p as u32) % n_items)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn learns_planted_successors_and_its_loss_falls() {
        let seqs = planted(60, 40, 8);
        let cfg = SasRecConfig {
            epochs: 12,
            batch: 128,
            dropout: 0.1,
            attn_dropout: 0.1,
            hidden: 16,
            inner: 32,
            lr: 0.01,
            threads: 1,
            ..SasRecConfig::for_tests()
        };
        let mut m = SasRec::new(cfg, 40).unwrap();
        let valid: Vec<Validation> = (0..20u32)
            .map(|u| Validation {
                user: u,
                history: vec![u, u + 1, u + 2],
                target: u + 3,
                negatives: (0..9).map(|k| (u + 10 + 2 * k) % 40).collect(),
            })
            .collect();
        let rep = m.train(&seqs, &valid, 12).unwrap();
        assert!(
            rep.loss.last().unwrap() < &(rep.loss[0] * 0.8),
            "{:?}",
            rep.loss
        );
        assert!(rep.best_valid_hr1 > 0.8, "{rep:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_weights() {
        let seqs = planted(20, 30, 6);
        let cfg = SasRecConfig {
            hidden: 8,
            inner: 16,
            batch: 32,
            threads: 1,
            ..SasRecConfig::for_tests()
        };
        let run = |seed| {
            let mut m = SasRec::new(
                SasRecConfig {
                    seed,
                    ..cfg.clone()
                },
                30,
            )
            .unwrap();
            m.train(&seqs, &[], 2).unwrap();
            m.checksum().unwrap()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn sequences_of_one_item_are_a_clear_error() {
        let mut m = SasRec::new(
            SasRecConfig {
                threads: 1,
                ..SasRecConfig::for_tests()
            },
            5,
        )
        .unwrap();
        let e = m
            .train(&[vec![1], vec![2]], &[], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("length 0 or 1"), "{e}");
        assert!(SasRec::new(
            SasRecConfig {
                heads: 3,
                ..SasRecConfig::for_tests()
            },
            5
        )
        .is_err());
    }
}
