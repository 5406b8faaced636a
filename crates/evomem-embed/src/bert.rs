//! The BERT encoder of all-MiniLM-L6-v2, forward pass only, laid out for the
//! CPU.
//!
//! Same maths as candle_transformers' `BertModel` (post-LayerNorm BERT,
//! erf GELU, absolute positions, token type 0), arranged differently:
//! - every Linear weight is transposed once at load into a contiguous
//!   `[in, out]` matrix. gemm then reads it as an already column-major
//!   operand and does not re-pack it on every call, which is what
//!   `x.matmul(w.t())` on the `[out, in]` file layout costs (about a third of
//!   the time in `pack_lhs`). Q, K and V are one fused `[H, 3H]` matmul;
//! - a batch is packed without padding: the token rows of all texts are
//!   concatenated, so embeddings, Linears, GELU and LayerNorm only see real
//!   tokens; attention runs per text on its own length (no mask needed);
//! - bias, GELU, residual and LayerNorm are fused, vectorisable passes run in
//!   parallel on the caller's rayon pool. `exp` and `erf` are polynomial
//!   approximations (about 1e-7 relative error, see the unit tests).
//!
//! The matmuls are candle's (`Tensor::matmul`, gemm on the CPU).

use candle_core::{DType, Device, Error, Result, Storage, Tensor};
use rayon::prelude::*;
use std::collections::HashMap;

// Only here to enable its `x86-v4` feature; see Cargo.toml.
use gemm as _;

/// Shape of the encoder, read from the model's `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BertConfig {
    /// Width of the hidden states.
    pub hidden: usize,
    /// Attention heads.
    pub heads: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Width of the feed-forward layer.
    pub intermediate: usize,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Number of position embeddings (longest input).
    pub max_positions: usize,
}

impl BertConfig {
    /// Parse a Hugging Face BERT `config.json`. Only `hidden_act = "gelu"`
    /// (erf GELU) and absolute positions are supported.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let int = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_u64)
                .map(|n| n as usize)
                .ok_or_else(|| format!("`{k}` missing or not an integer"))
        };
        let act = v
            .get("hidden_act")
            .and_then(|a| a.as_str())
            .unwrap_or("gelu");
        if act != "gelu" {
            return Err(format!("hidden_act `{act}` is not supported (only `gelu`)"));
        }
        let pos = v
            .get("position_embedding_type")
            .and_then(|a| a.as_str())
            .unwrap_or("absolute");
        if pos != "absolute" {
            return Err(format!("position_embedding_type `{pos}` is not supported"));
        }
        let cfg = Self {
            hidden: int("hidden_size")?,
            heads: int("num_attention_heads")?,
            layers: int("num_hidden_layers")?,
            intermediate: int("intermediate_size")?,
            eps: v
                .get("layer_norm_eps")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(1e-12) as f32,
            max_positions: int("max_position_embeddings")?,
        };
        if cfg.heads == 0 || !cfg.hidden.is_multiple_of(cfg.heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden, cfg.heads
            ));
        }
        Ok(cfg)
    }
}

/// A Linear layer: `y = x Wᵀ + b`, with `Wᵀ` stored contiguous.
struct Linear {
    /// `[in, out]`, contiguous.
    wt: Tensor,
    bias: Vec<f32>,
}

struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

struct Layer {
    qkv: Linear,
    attn_out: Linear,
    ln_attn: LayerNorm,
    inter: Linear,
    out: Linear,
    ln_out: LayerNorm,
}

/// The encoder, weights in the layout the forward wants.
pub(crate) struct BertEncoder {
    cfg: BertConfig,
    vocab: usize,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type0: Vec<f32>,
    ln_emb: LayerNorm,
    layers: Vec<Layer>,
}

fn msg(s: impl Into<String>) -> Error {
    Error::Msg(s.into())
}

/// Rows of token activations: `rows × width`, row-major.
type Rows = Vec<f32>;

/// Run `f` on the contiguous f32 data of a CPU tensor.
fn with_data<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(msg("expected a CPU tensor"));
    };
    let all = cpu.as_slice::<f32>()?;
    let (a, b) = layout
        .contiguous_offsets()
        .ok_or_else(|| msg("expected a contiguous tensor"))?;
    Ok(f(&all[a..b]))
}

fn to_vec(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

impl BertEncoder {
    /// Build from the tensors of a `model.safetensors` (names without a
    /// `bert.` prefix, as sentence-transformers ships them).
    pub fn from_tensors(cfg: BertConfig, mut t: HashMap<String, Tensor>) -> Result<Self> {
        let mut take = |name: &str| -> Result<Tensor> {
            t.remove(name)
                .ok_or_else(|| msg(format!("tensor `{name}` missing")))?
                .to_dtype(DType::F32)
        };
        let h = cfg.hidden;
        let check = |x: &Tensor, dims: &[usize], name: &str| -> Result<()> {
            if x.dims() != dims {
                return Err(msg(format!(
                    "tensor `{name}` has shape {:?}, expected {dims:?}",
                    x.dims()
                )));
            }
            Ok(())
        };
        let word = take("embeddings.word_embeddings.weight")?;
        let vocab = word.dim(0)?;
        check(&word, &[vocab, h], "embeddings.word_embeddings.weight")?;
        let position = take("embeddings.position_embeddings.weight")?;
        check(
            &position,
            &[cfg.max_positions, h],
            "embeddings.position_embeddings.weight",
        )?;
        let token_type = take("embeddings.token_type_embeddings.weight")?;
        let token_type0 = to_vec(&token_type.get(0)?)?;
        let mut ln = |prefix: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                gamma: to_vec(&take(&format!("{prefix}.weight"))?)?,
                beta: to_vec(&take(&format!("{prefix}.bias"))?)?,
            })
        };
        let ln_emb = ln("embeddings.LayerNorm")?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let p = format!("encoder.layer.{i}");
            let mut lin = |names: &[&str], out: usize, inp: usize| -> Result<Linear> {
                let mut ws = Vec::new();
                let mut bs = Vec::new();
                for n in names {
                    let w = take(&format!("{p}.{n}.weight"))?;
                    check(&w, &[out, inp], n)?;
                    ws.push(w);
                    bs.extend(to_vec(&take(&format!("{p}.{n}.bias"))?)?);
                }
                // [out_total, in] → [in, out_total], contiguous: transposed once here.
                let wt = Tensor::cat(&ws, 0)?.t()?.contiguous()?;
                Ok(Linear { wt, bias: bs })
            };
            let qkv = lin(
                &[
                    "attention.self.query",
                    "attention.self.key",
                    "attention.self.value",
                ],
                h,
                h,
            )?;
            let attn_out = lin(&["attention.output.dense"], h, h)?;
            let inter = lin(&["intermediate.dense"], cfg.intermediate, h)?;
            let out = lin(&["output.dense"], h, cfg.intermediate)?;
            let mut ln = |prefix: &str| -> Result<LayerNorm> {
                Ok(LayerNorm {
                    gamma: to_vec(&take(&format!("{p}.{prefix}.weight"))?)?,
                    beta: to_vec(&take(&format!("{p}.{prefix}.bias"))?)?,
                })
            };
            layers.push(Layer {
                qkv,
                attn_out,
                ln_attn: ln("attention.output.LayerNorm")?,
                inter,
                out,
                ln_out: ln("output.LayerNorm")?,
            });
        }
        Ok(Self {
            word: to_vec(&word)?,
            position: to_vec(&position)?,
            token_type0,
            ln_emb,
            layers,
            vocab,
            cfg,
        })
    }

    /// Hidden width.
    pub fn hidden(&self) -> usize {
        self.cfg.hidden
    }

    /// Mean-pooled, L2-normalised sentence vectors of a batch of token-id
    /// sequences (special tokens included, already truncated). Runs its
    /// parallel parts on the current rayon pool.
    pub fn embed_pooled(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let h = self.cfg.hidden;
        let hidden = self.forward(seqs)?;
        let mut out = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            let len = s.len();
            let mut e = vec![0f32; h];
            for row in hidden[start * h..(start + len) * h].chunks_exact(h) {
                e.iter_mut().zip(row).for_each(|(a, &x)| *a += x);
            }
            let count = (len as f32).max(1e-9);
            e.iter_mut().for_each(|x| *x /= count);
            let n = sum_lanes_sq(&e).sqrt().max(1e-12);
            e.iter_mut().for_each(|x| *x /= n);
            out.push(e);
            start += len;
        }
        Ok(out)
    }

    /// Last hidden states of all tokens of all sequences, concatenated:
    /// `Σ len × hidden`, row-major.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Rows> {
        let h = self.cfg.hidden;
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let total: usize = lens.iter().sum();
        if let Some(&l) = lens.iter().find(|&&l| l > self.cfg.max_positions) {
            return Err(msg(format!(
                "sequence of {l} tokens is longer than the model's {}",
                self.cfg.max_positions
            )));
        }
        if let Some(&id) = seqs
            .iter()
            .flat_map(|s| s.iter())
            .find(|&&id| id as usize >= self.vocab)
        {
            return Err(msg(format!(
                "token id {id} out of the vocabulary ({})",
                self.vocab
            )));
        }
        // Embeddings + LayerNorm. (row, position) of each token.
        let pos: Vec<(u32, usize)> = seqs
            .iter()
            .flat_map(|s| s.iter().enumerate().map(|(p, &id)| (id, p)))
            .collect();
        let mut x = vec![0f32; total * h];
        x.par_chunks_mut(h * ROWS_PER_TASK)
            .zip(pos.par_chunks(ROWS_PER_TASK))
            .for_each(|(out, toks)| {
                for (row, &(id, p)) in out.chunks_exact_mut(h).zip(toks) {
                    let w = &self.word[id as usize * h..][..h];
                    let pe = &self.position[p * h..][..h];
                    for (((o, &a), &b), &c) in row.iter_mut().zip(w).zip(pe).zip(&self.token_type0)
                    {
                        *o = a + b + c;
                    }
                    layer_norm_in_place(row, &self.ln_emb, self.cfg.eps);
                }
            });
        let dev = Device::Cpu;
        let mut x = Tensor::from_vec(x, (total, h), &dev)?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &lens)?;
        }
        to_vec(&x)
    }

    fn layer(&self, l: &Layer, x: &Tensor, lens: &[usize]) -> Result<Tensor> {
        let h = self.cfg.hidden;
        let eps = self.cfg.eps;
        let dev = Device::Cpu;
        let total = x.dim(0)?;
        let qkv = x.matmul(&l.qkv.wt)?;
        let ctx = with_data(&qkv, |qkv| self.attention(qkv, &l.qkv.bias, lens))??;
        let ctx = Tensor::from_vec(ctx, (total, h), &dev)?;
        let a = ctx.matmul(&l.attn_out.wt)?;
        let x1 = with_data(&a, |a| {
            with_data(x, |x| {
                bias_residual_layer_norm(a, &l.attn_out.bias, x, &l.ln_attn, eps)
            })
        })???;
        let x1 = Tensor::from_vec(x1, (total, h), &dev)?;
        let i = x1.matmul(&l.inter.wt)?;
        let g = with_data(&i, |i| bias_gelu(i, &l.inter.bias))?;
        let g = Tensor::from_vec(g, (total, self.cfg.intermediate), &dev)?;
        let o = g.matmul(&l.out.wt)?;
        let x2 = with_data(&o, |o| {
            with_data(&x1, |x1| {
                bias_residual_layer_norm(o, &l.out.bias, x1, &l.ln_out, eps)
            })
        })???;
        Tensor::from_vec(x2, (total, h), &dev)
    }

    /// Multi-head self-attention of each sequence on its own tokens.
    /// `qkv`: `total × 3H` (Q | K | V, before bias); returns `total × H`.
    fn attention(&self, qkv: &[f32], bias: &[f32], lens: &[usize]) -> Result<Rows> {
        let h = self.cfg.hidden;
        let nh = self.cfg.heads;
        let dh = h / nh;
        let scale = 1.0 / (dh as f32).sqrt();
        let mut starts = Vec::with_capacity(lens.len());
        let mut s = 0;
        for &l in lens {
            starts.push(s);
            s += l;
        }
        let dev = Device::Cpu;
        let per_seq: Vec<Result<Rows>> = lens
            .par_iter()
            .zip(starts.par_iter())
            .map(|(&len, &start)| -> Result<Rows> {
                let rows = &qkv[start * 3 * h..(start + len) * 3 * h];
                // q: [nh, len, dh] (scaled), kt: [nh, dh, len], v: [nh, len, dh].
                let mut q = vec![0f32; nh * len * dh];
                let mut kt = vec![0f32; nh * dh * len];
                let mut v = vec![0f32; nh * len * dh];
                for (j, row) in rows.chunks_exact(3 * h).enumerate() {
                    for hd in 0..nh {
                        for d in 0..dh {
                            let c = hd * dh + d;
                            q[(hd * len + j) * dh + d] = (row[c] + bias[c]) * scale;
                            kt[(hd * dh + d) * len + j] = row[h + c] + bias[h + c];
                            v[(hd * len + j) * dh + d] = row[2 * h + c] + bias[2 * h + c];
                        }
                    }
                }
                let q = Tensor::from_vec(q, (nh, len, dh), &dev)?;
                let kt = Tensor::from_vec(kt, (nh, dh, len), &dev)?;
                let v = Tensor::from_vec(v, (nh, len, dh), &dev)?;
                let scores = q.matmul(&kt)?;
                let p = with_data(&scores, |s| {
                    let mut p = vec![0f32; s.len()];
                    for (src, dst) in s.chunks_exact(len).zip(p.chunks_exact_mut(len)) {
                        softmax_row(src, dst);
                    }
                    p
                })?;
                let p = Tensor::from_vec(p, (nh, len, len), &dev)?;
                let c = p.matmul(&v)?;
                with_data(&c, |c| {
                    // [nh, len, dh] → [len, H]
                    let mut out = vec![0f32; len * h];
                    for hd in 0..nh {
                        for j in 0..len {
                            out[j * h + hd * dh..][..dh]
                                .copy_from_slice(&c[(hd * len + j) * dh..][..dh]);
                        }
                    }
                    out
                })
            })
            .collect();
        let mut ctx = Vec::with_capacity(s * h);
        for r in per_seq {
            ctx.extend(r?);
        }
        Ok(ctx)
    }
}

/// Token rows per parallel task of the elementwise passes.
const ROWS_PER_TASK: usize = 8;

/// `LayerNorm(a + bias + res)` row by row; `a`, `res`: `rows × H`.
fn bias_residual_layer_norm(
    a: &[f32],
    bias: &[f32],
    res: &[f32],
    ln: &LayerNorm,
    eps: f32,
) -> Result<Rows> {
    let h = bias.len();
    if a.len() != res.len() || !a.len().is_multiple_of(h) {
        return Err(msg("residual shape mismatch"));
    }
    let mut out = vec![0f32; a.len()];
    out.par_chunks_mut(h * ROWS_PER_TASK)
        .zip(a.par_chunks(h * ROWS_PER_TASK))
        .zip(res.par_chunks(h * ROWS_PER_TASK))
        .for_each(|((out, a), res)| {
            for ((o, a), r) in out
                .chunks_exact_mut(h)
                .zip(a.chunks_exact(h))
                .zip(res.chunks_exact(h))
            {
                for (((o, &a), &b), &r) in o.iter_mut().zip(a).zip(bias).zip(r) {
                    *o = a + b + r;
                }
                layer_norm_in_place(o, ln, eps);
            }
        });
    Ok(out)
}

/// `GELU(a + bias)` (erf form) row by row.
fn bias_gelu(a: &[f32], bias: &[f32]) -> Rows {
    let w = bias.len();
    let mut out = vec![0f32; a.len()];
    out.par_chunks_mut(w * ROWS_PER_TASK)
        .zip(a.par_chunks(w * ROWS_PER_TASK))
        .for_each(|(out, a)| {
            for (o, a) in out.chunks_exact_mut(w).zip(a.chunks_exact(w)) {
                for ((o, &a), &b) in o.iter_mut().zip(a).zip(bias) {
                    *o = gelu_erf(a + b);
                }
            }
        });
    out
}

fn layer_norm_in_place(row: &mut [f32], ln: &LayerNorm, eps: f32) {
    let n = row.len() as f32;
    let mean = sum_lanes(row) / n;
    row.iter_mut().for_each(|x| *x -= mean);
    let var = sum_lanes_sq(row) / n;
    let rstd = 1.0 / (var + eps).sqrt();
    for ((x, &g), &b) in row.iter_mut().zip(&ln.gamma).zip(&ln.beta) {
        *x = *x * rstd * g + b;
    }
}

/// Softmax of one row (already scaled).
fn softmax_row(src: &[f32], dst: &mut [f32]) {
    let m = max_lanes(src);
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = exp_approx(s - m);
    }
    let inv = 1.0 / sum_lanes(dst);
    dst.iter_mut().for_each(|d| *d *= inv);
}

const LANES: usize = 16;

/// Sum with 16 independent accumulators, so that it vectorises.
fn sum_lanes(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// Sum of squares, vectorised like [`sum_lanes`].
fn sum_lanes_sq(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v * v;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().map(|v| v * v).sum::<f32>()
}

fn max_lanes(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let m = acc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    chunks.remainder().iter().copied().fold(m, f32::max)
}

/// `eˣ` for `x ≤ 88` (Cephes `expf`: Cody–Waite reduction by ln 2 and a
/// degree-5 polynomial; about 1e-7 relative error), branch-free so that
/// loops over it vectorise. Underflows to ~1e-38 below -87.
#[inline(always)]
pub(crate) fn exp_approx(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.3);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `erf(x)` as a rational function of x (the single-precision
/// approximation of Eigen and XLA, clamped at ±4 where erf rounds to ±1),
/// branch-free so that loops over it vectorise.
#[inline(always)]
pub(crate) fn erf_approx(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 + -2.101_024e-6;
    p = p * x2 + -5.692_506_4e-5;
    p = p * x2 + -7.349_906_3e-4;
    p = p * x2 + -2.954_6e-3;
    p = p * x2 + -1.609_603_3e-2;
    let p = p * x;
    let mut q = -1.456_607_2e-5f32;
    q = q * x2 + -2.133_740_6e-4;
    q = q * x2 + -1.682_827e-3;
    q = q * x2 + -7.373_329e-3;
    q = q * x2 + -1.426_474e-2;
    p / q
}

/// GELU, erf form: `x/2 · (1 + erf(x/√2))`.
#[inline(always)]
fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf_approx(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erf_f64(x: f64) -> f64 {
        // Abramowitz–Stegun 7.1.28-free reference: the series/continued
        // fraction is overkill here; integrate exp(-t²) by Simpson instead.
        let n = 2000;
        let h = x / n as f64;
        let f = |t: f64| (-t * t).exp();
        let mut s = f(0.0) + f(x);
        for i in 1..n {
            let t = i as f64 * h;
            s += if i % 2 == 1 { 4.0 } else { 2.0 } * f(t);
        }
        s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_is_accurate() {
        let mut worst = 0f64;
        for i in -600..=600 {
            let x = i as f64 / 100.0;
            let got = erf_approx(x as f32) as f64;
            worst = worst.max((got - erf_f64(x)).abs());
        }
        assert!(worst < 5e-7, "erf worst abs error {worst}");
    }

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0f64;
        for i in -8700..=880 {
            let x = i as f32 / 100.0;
            let want = (x as f64).exp();
            let got = exp_approx(x) as f64;
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 5e-7, "exp worst rel error {worst}");
    }

    #[test]
    fn lane_reductions_match_plain() {
        let x: Vec<f32> = (0..389)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let plain: f32 = x.iter().sum();
        assert!((sum_lanes(&x) - plain).abs() < 1e-3);
        let sq: f32 = x.iter().map(|v| v * v).sum();
        assert!((sum_lanes_sq(&x) - sq).abs() < 1e-2);
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(max_lanes(&x), m);
        assert_eq!(
            max_lanes(&x[..5]),
            x[..5].iter().copied().fold(f32::MIN, f32::max)
        );
    }

    #[test]
    fn softmax_sums_to_one() {
        let src = [1.0f32, 2.0, 3.0, -100.0, 0.5];
        let mut dst = [0f32; 5];
        softmax_row(&src, &mut dst);
        let z: f64 = src.iter().map(|&s| (s as f64 - 3.0).exp()).sum();
        for (d, s) in dst.iter().zip(src) {
            let want = (s as f64 - 3.0).exp() / z;
            assert!((*d as f64 - want).abs() < 1e-6);
        }
    }
}
