//! The BERT encoder of all-MiniLM-L6-v2, forward pass only, laid out for the
//! CPU.
//!
//! Same maths as candle_transformers' `BertModel` (post-LayerNorm BERT,
//! erf GELU, absolute positions, token type 0), arranged differently:
//! - every Linear weight is regrouped once at load into the column-major
//!   panels gemm's kernels read ([`crate::matmul`]'s `PanelWeights`), so no
//!   call repacks it, which is what `x.matmul(w.t())` on the `[out, in]`
//!   file layout costs (about a third of the time in `pack_lhs`), and a
//!   single short text reads each weight once, front to back. Q, K and V are
//!   one fused `[3H, H]` weight;
//! - a batch is packed without padding: the token rows of all texts are
//!   concatenated, so embeddings, Linears, GELU and LayerNorm only see real
//!   tokens; attention runs per text on its own length (no mask needed);
//! - bias, GELU, residual and LayerNorm are fused, vectorisable passes run in
//!   parallel on the caller's rayon pool, or all on the calling thread
//!   ([`Exec::Inline`]) with the same result bits. They work in the buffer
//!   of the product they follow, attention writes each text's rows
//!   straight into the layer's result, and a forward allocates its buffers
//!   once and reuses them in every layer (each product overwrites its
//!   output, so nothing is cleared between layers): at 8k token rows each
//!   fresh buffer is tens of MB of pages to fault in and zero. `exp` and `erf` are
//!   polynomial approximations (about 1e-7 relative error, see the unit
//!   tests);
//! - a text's vector does not depend on the batch it is in: every sum runs
//!   along one row, so the same text alone or among others gives the same
//!   bits (tested on the real model), and callers may batch freely.
//!
//! The matmuls go straight to gemm ([`crate::matmul`]), the kernels
//! candle's CPU backend uses, without compiling candle itself; the weights
//! are read from `model.safetensors` by [`read_safetensors`].

use crate::int8::{best_kernel, Int8Linear};
use crate::matmul::{attention_matmul, Exec, PanelWeights, ShapeMismatch};
use crate::minilm::Precision;
use rayon::prelude::*;
use std::collections::HashMap;

/// Why the encoder could not be built or run.
pub(crate) type Result<T> = std::result::Result<T, String>;

impl From<ShapeMismatch> for String {
    fn from(e: ShapeMismatch) -> Self {
        e.0
    }
}

/// One tensor of the weight file, as `f32`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Weight {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub data: Vec<f32>,
}

/// Every floating-point tensor of a `model.safetensors` buffer, by name.
/// `F32` tensors are read as they are; `F16` and `BF16` are widened to
/// `f32`. Integer and boolean buffers (BERT files carry
/// `embeddings.position_ids`) are left out: the encoder reads none. Any
/// other floating-point dtype (F64, the 8-bit and smaller formats) is
/// refused with the tensor's name, rather than reported later as missing.
pub(crate) fn read_safetensors(bytes: &[u8]) -> Result<HashMap<String, Weight>> {
    use safetensors::Dtype;
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let raw = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::BF16 => raw
                .chunks_exact(2)
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
                .collect(),
            Dtype::F16 => raw
                .chunks_exact(2)
                .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::U16
            | Dtype::I16
            | Dtype::U32
            | Dtype::I32
            | Dtype::U64
            | Dtype::I64 => continue,
            other => {
                return Err(format!(
                    "tensor `{name}` has dtype {other:?}; expected F32, F16 or BF16"
                ))
            }
        };
        let shape = view.shape().to_vec();
        if shape.iter().product::<usize>() != data.len() {
            return Err(format!(
                "tensor `{name}`: shape {shape:?} does not match its {} values",
                data.len()
            ));
        }
        out.insert(name, Weight { shape, data });
    }
    Ok(out)
}

/// IEEE half to single precision (exact: every half is a single).
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // Subnormal: value = f · 2⁻²⁴.
            let v = f as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 112) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

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

/// The weight of a Linear layer, in the layout its product wants.
enum LinearWeight {
    /// f32, in gemm's panels.
    F32(PanelWeights),
    /// 8-bit, per output channel ([`crate::int8`]).
    Int8(Int8Linear),
}

/// A Linear layer: `y = x Wᵀ + b`.
struct Linear {
    w: LinearWeight,
    bias: Vec<f32>,
}

impl Linear {
    /// `x Wᵀ` (bias not added) for `rows` input rows, into `y` (`rows ×
    /// out`; every value is overwritten).
    fn apply_into(&self, x: &[f32], rows: usize, exec: Exec, y: &mut [f32]) -> Result<()> {
        match &self.w {
            LinearWeight::F32(w) => w.apply_into(x, rows, exec, y)?,
            LinearWeight::Int8(w) => w.apply_into(x, rows, exec, best_kernel(), y)?,
        }
        Ok(())
    }
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

/// A forward's working buffers, sized for its token rows and reused by
/// every layer.
struct Buffers {
    /// Q|K|V (`rows × 3H`), then the intermediate activations (`rows ×
    /// intermediate`): the first `rows × width` values.
    wide: Vec<f32>,
    /// Attention's context (`rows × H`).
    ctx: Vec<f32>,
    /// The attention block's output after its LayerNorm (`rows × H`).
    x1: Vec<f32>,
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
    /// How attention runs (an experiment's switch; tests only).
    #[cfg(test)]
    pub(crate) attention_mode: AttentionMode,
}

/// Attention variants of the int8 attention experiment
/// (`bench::tests::int8_attention_costs_and_savings`, issue 41: keep
/// attention in f32 unless quantizing it saves more than it costs).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum AttentionMode {
    /// The real f32 attention.
    #[default]
    F32,
    /// f32 products of operands rounded to the int8 grids an int8
    /// attention would use: Q and K per head and token, the softmax
    /// output per row, V per head and channel (over tokens), each
    /// `max|x| / 127`.
    SimInt8,
    /// No attention at all (the context is V): the rest of the forward,
    /// to time attention's share.
    Skip,
}

/// [`sim_int8`] on the `n` values of `buf` at `start + i·stride`.
#[cfg(test)]
fn sim_int8_strided(buf: &mut [f32], start: usize, stride: usize, n: usize) {
    let mut col: Vec<f32> = (0..n).map(|i| buf[start + i * stride]).collect();
    sim_int8(&mut col);
    for (i, x) in col.into_iter().enumerate() {
        buf[start + i * stride] = x;
    }
}

/// Round `xs` to the symmetric int8 grid of its own `max|x| / 127`.
#[cfg(test)]
fn sim_int8(xs: &mut [f32]) {
    let mut q = vec![0i8; xs.len()];
    let s = crate::int8::quantize_row(xs, &mut q);
    for (x, &q) in xs.iter_mut().zip(&q) {
        *x = f32::from(q) * s;
    }
}

/// Rows of token activations: `rows × width`, row-major.
type Rows = Vec<f32>;

impl BertEncoder {
    /// Build from the tensors of a `model.safetensors` (names without a
    /// `bert.` prefix, as sentence-transformers ships them), with f32
    /// Linear layers.
    #[cfg(test)]
    pub fn from_tensors(cfg: BertConfig, t: HashMap<String, Weight>) -> Result<Self> {
        Self::from_tensors_as(cfg, t, Precision::F32)
    }

    /// Build from the tensors of a `model.safetensors`, with the dense
    /// layers (QKV, attention output, FFN in and out) in `precision`;
    /// embeddings and LayerNorms stay f32 either way.
    pub fn from_tensors_as(
        cfg: BertConfig,
        mut t: HashMap<String, Weight>,
        precision: Precision,
    ) -> Result<Self> {
        let h = cfg.hidden;
        // Take a tensor by name, checking its shape (`None`: any first dim).
        let mut take = |name: &str, dims: &[Option<usize>]| -> Result<Weight> {
            let w = t
                .remove(name)
                .ok_or_else(|| format!("float tensor `{name}` missing"))?;
            let fits = w.shape.len() == dims.len()
                && w.shape
                    .iter()
                    .zip(dims)
                    .all(|(&got, want)| want.is_none_or(|d| d == got));
            if !fits {
                return Err(format!(
                    "tensor `{name}` has shape {:?}, expected {:?}",
                    w.shape,
                    dims.iter()
                        .map(|d| d.map_or("*".to_string(), |d| d.to_string()))
                        .collect::<Vec<_>>()
                ));
            }
            Ok(w)
        };
        let word = take("embeddings.word_embeddings.weight", &[None, Some(h)])?;
        let vocab = word.shape[0];
        let position = take(
            "embeddings.position_embeddings.weight",
            &[Some(cfg.max_positions), Some(h)],
        )?;
        let token_type = take("embeddings.token_type_embeddings.weight", &[None, Some(h)])?;
        if token_type.shape[0] == 0 {
            return Err("tensor `embeddings.token_type_embeddings.weight` has no rows".into());
        }
        let token_type0 = token_type.data[..h].to_vec();
        let ln_emb = LayerNorm {
            gamma: take("embeddings.LayerNorm.weight", &[Some(h)])?.data,
            beta: take("embeddings.LayerNorm.bias", &[Some(h)])?.data,
        };
        let mut layers = Vec::with_capacity(cfg.layers);
        let panel_rows = PanelWeights::kernel_rows();
        for i in 0..cfg.layers {
            let p = format!("encoder.layer.{i}");
            let mut lin = |names: &[&str], out: usize, inp: usize| -> Result<Linear> {
                // The `[out, in]` weights stacked along `out`, then
                // regrouped once here into gemm's panels.
                let mut rows: Vec<f32> = Vec::with_capacity(names.len() * out * inp);
                let mut bias = Vec::with_capacity(names.len() * out);
                for n in names {
                    rows.extend(take(&format!("{p}.{n}.weight"), &[Some(out), Some(inp)])?.data);
                    bias.extend(take(&format!("{p}.{n}.bias"), &[Some(out)])?.data);
                }
                let w = match precision {
                    Precision::F32 => {
                        LinearWeight::F32(PanelWeights::new(&rows, bias.len(), inp, panel_rows)?)
                    }
                    Precision::Int8 => LinearWeight::Int8(Int8Linear::new(&rows, bias.len(), inp)?),
                };
                Ok(Linear { w, bias })
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
                    gamma: take(&format!("{p}.{prefix}.weight"), &[Some(h)])?.data,
                    beta: take(&format!("{p}.{prefix}.bias"), &[Some(h)])?.data,
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
            word: word.data,
            position: position.data,
            token_type0,
            ln_emb,
            layers,
            vocab,
            cfg,
            #[cfg(test)]
            attention_mode: AttentionMode::F32,
        })
    }

    /// Hidden width.
    pub fn hidden(&self) -> usize {
        self.cfg.hidden
    }

    /// Mean-pooled, L2-normalised sentence vectors of a batch of token-id
    /// sequences (special tokens included, already truncated). Runs its
    /// parallel parts where `exec` says.
    pub fn embed_pooled(&self, seqs: &[&[u32]], exec: Exec) -> Result<Vec<Vec<f32>>> {
        let h = self.cfg.hidden;
        let hidden = self.forward(seqs, exec)?;
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
    pub fn forward(&self, seqs: &[&[u32]], exec: Exec) -> Result<Rows> {
        let h = self.cfg.hidden;
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let total: usize = lens.iter().sum();
        if let Some(&l) = lens.iter().find(|&&l| l > self.cfg.max_positions) {
            return Err(format!(
                "sequence of {l} tokens is longer than the model's {}",
                self.cfg.max_positions
            ));
        }
        if let Some(&id) = seqs
            .iter()
            .flat_map(|s| s.iter())
            .find(|&&id| id as usize >= self.vocab)
        {
            return Err(format!(
                "token id {id} out of the vocabulary ({})",
                self.vocab
            ));
        }
        // Embeddings + LayerNorm. (row, position) of each token.
        let pos: Vec<(u32, usize)> = seqs
            .iter()
            .flat_map(|s| s.iter().enumerate().map(|(p, &id)| (id, p)))
            .collect();
        let mut x = vec![0f32; total * h];
        x.par_chunks_mut(h * ROWS_PER_TASK)
            .zip(pos.par_chunks(ROWS_PER_TASK))
            .with_min_len(exec.min_len().max(MIN_CHUNKS_PER_TASK))
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
        // The layers' buffers, reused from layer to layer (each product
        // overwrites its output, so they are cleared once, here): `wide`
        // holds Q|K|V (3H) and then the intermediate activations (4H).
        let mut buf = Buffers {
            wide: vec![0f32; total * self.cfg.intermediate.max(3 * h)],
            ctx: vec![0f32; total * h],
            x1: vec![0f32; total * h],
        };
        for layer in &self.layers {
            self.layer(layer, &mut x, &lens, total, exec, &mut buf)?;
        }
        Ok(x)
    }

    /// One encoder layer on `total` token rows, `x` in place.
    fn layer(
        &self,
        l: &Layer,
        x: &mut [f32],
        lens: &[usize],
        total: usize,
        exec: Exec,
        buf: &mut Buffers,
    ) -> Result<()> {
        let eps = self.cfg.eps;
        let h = self.cfg.hidden;
        let qkv = &mut buf.wide[..total * 3 * h];
        l.qkv.apply_into(x, total, exec, qkv)?;
        self.attention(qkv, &l.qkv.bias, lens, exec, &mut buf.ctx)?;
        l.attn_out.apply_into(&buf.ctx, total, exec, &mut buf.x1)?;
        bias_residual_layer_norm(&mut buf.x1, &l.attn_out.bias, x, &l.ln_attn, eps, exec)?;
        let g = &mut buf.wide[..total * l.inter.bias.len()];
        l.inter.apply_into(&buf.x1, total, exec, g)?;
        bias_gelu(g, &l.inter.bias, exec);
        l.out.apply_into(g, total, exec, x)?;
        bias_residual_layer_norm(x, &l.out.bias, &buf.x1, &l.ln_out, eps, exec)
    }

    /// Multi-head self-attention of each sequence on its own tokens.
    /// `qkv`: `total × 3H` (Q | K | V, before bias); every value of `ctx`
    /// (`total × H`) is written.
    ///
    /// A batch runs one task per sequence. Fewer sequences than threads
    /// (a query) run one task per head instead, so the other thread is not
    /// idle (and asleep when the next Linear needs it: attention was a
    /// fifth of a 22-token query's time, all on one thread). A head's
    /// values are computed the same way either way (each head is its own
    /// products and softmax), so the bits do not change.
    fn attention(
        &self,
        qkv: &[f32],
        bias: &[f32],
        lens: &[usize],
        exec: Exec,
        ctx: &mut [f32],
    ) -> Result<()> {
        let h = self.cfg.hidden;
        let nh = self.cfg.heads;
        let dh = h / nh;
        let mut starts = Vec::with_capacity(lens.len());
        let mut s = 0;
        for &l in lens {
            starts.push(s);
            s += l;
        }
        if ctx.len() != s * h || qkv.len() != s * 3 * h {
            return Err("attention shape mismatch".into());
        }
        // Each sequence writes its own rows of the result (all of them).
        let mut outs: Vec<&mut [f32]> = Vec::with_capacity(lens.len());
        let mut rest = ctx;
        for &l in lens {
            let (mine, others) = rest.split_at_mut(l * h);
            outs.push(mine);
            rest = others;
        }
        let by_heads = matches!(exec, Exec::Pool) && lens.len() < rayon::current_num_threads();
        outs.into_par_iter()
            .zip(lens.par_iter())
            .zip(starts.par_iter())
            .with_min_len(exec.min_len())
            .try_for_each(|((out, &len), &start)| -> Result<()> {
                let rows = &qkv[start * 3 * h..(start + len) * 3 * h];
                // [heads, len, dh] → [len, H]
                let mut put = |hd0: usize, c: &[f32]| {
                    for (i, c) in c.chunks_exact(len * dh).enumerate() {
                        let hd = hd0 + i;
                        for (j, c) in c.chunks_exact(dh).enumerate() {
                            out[j * h + hd * dh..][..dh].copy_from_slice(c);
                        }
                    }
                };
                if by_heads {
                    let heads: Vec<Rows> = (0..nh)
                        .into_par_iter()
                        .map(|hd| self.head_context(rows, bias, len, hd..hd + 1, exec))
                        .collect::<Result<_>>()?;
                    for (hd, c) in heads.iter().enumerate() {
                        put(hd, c);
                    }
                } else {
                    put(0, &self.head_context(rows, bias, len, 0..nh, exec)?);
                }
                Ok(())
            })
    }

    /// The context of heads `heads` of one sequence of `len` tokens, whose
    /// `qkv` rows (`len × 3H`, before bias) are `rows`: `[heads, len, dh]`.
    fn head_context(
        &self,
        rows: &[f32],
        bias: &[f32],
        len: usize,
        heads: std::ops::Range<usize>,
        exec: Exec,
    ) -> Result<Rows> {
        let h = self.cfg.hidden;
        let dh = h / self.cfg.heads;
        let scale = 1.0 / (dh as f32).sqrt();
        let nh = heads.len();
        // q: [nh, len, dh] (scaled), kt: [nh, dh, len], v: [nh, len, dh].
        let mut q = vec![0f32; nh * len * dh];
        let mut kt = vec![0f32; nh * dh * len];
        let mut v = vec![0f32; nh * len * dh];
        // A head's `dh` values of a row are contiguous in Q and V: each is
        // one slice pass (vectorised); K is transposed.
        let (bq, bkv) = bias.split_at(h);
        let (bk, bv) = bkv.split_at(h);
        for (j, row) in rows.chunks_exact(3 * h).enumerate() {
            let (rq, rkv) = row.split_at(h);
            let (rk, rv) = rkv.split_at(h);
            for (i, hd) in heads.clone().enumerate() {
                let cs = hd * dh..(hd + 1) * dh;
                let dst = &mut q[(i * len + j) * dh..][..dh];
                for ((o, &a), &b) in dst.iter_mut().zip(&rq[cs.clone()]).zip(&bq[cs.clone()]) {
                    *o = (a + b) * scale;
                }
                let dst = &mut v[(i * len + j) * dh..][..dh];
                for ((o, &a), &b) in dst.iter_mut().zip(&rv[cs.clone()]).zip(&bv[cs.clone()]) {
                    *o = a + b;
                }
                for (d, (&a, &b)) in rk[cs.clone()].iter().zip(&bk[cs]).enumerate() {
                    kt[(i * dh + d) * len + j] = a + b;
                }
            }
        }
        #[cfg(test)]
        let (sim, skip) = (
            self.attention_mode == AttentionMode::SimInt8,
            self.attention_mode == AttentionMode::Skip,
        );
        #[cfg(not(test))]
        let skip = false;
        #[cfg(test)]
        if sim {
            q.chunks_exact_mut(dh).for_each(sim_int8);
            for i in 0..nh {
                // K per head and token (a column of kt), V per head and
                // channel (a column of v).
                for j in 0..len {
                    sim_int8_strided(&mut kt, i * dh * len + j, len, dh);
                }
                for d in 0..dh {
                    sim_int8_strided(&mut v, i * len * dh + d, dh, len);
                }
            }
        }
        // (`skip`, tests only: no attention, the context is V.)
        if skip {
            return Ok(v);
        }
        let mut p = attention_matmul(&q, &kt, nh, len, dh, len, exec)?;
        for row in p.chunks_exact_mut(len) {
            softmax_in_place(row);
            #[cfg(test)]
            if sim {
                sim_int8(row);
            }
        }
        Ok(attention_matmul(&p, &v, nh, len, len, dh, exec)?)
    }
}

/// Token rows per chunk of the elementwise passes.
const ROWS_PER_TASK: usize = 8;
/// Chunks a parallel task of an elementwise pass takes at least: a pass
/// over a few rows (one short query: about 10) runs on the calling thread,
/// where splitting it woke the other thread for microseconds of work, 19
/// times per query (no change in the median query latency of `bench
/// embed` could be measured). Rows are independent, so the bits do not
/// change.
const MIN_CHUNKS_PER_TASK: usize = 4;

/// `LayerNorm(a + bias + res)` row by row, in `a`'s buffer; `a`, `res`:
/// `rows × H`.
fn bias_residual_layer_norm(
    a: &mut [f32],
    bias: &[f32],
    res: &[f32],
    ln: &LayerNorm,
    eps: f32,
    exec: Exec,
) -> Result<()> {
    let h = bias.len();
    if a.len() != res.len() || !a.len().is_multiple_of(h) {
        return Err("residual shape mismatch".into());
    }
    a.par_chunks_mut(h * ROWS_PER_TASK)
        .zip(res.par_chunks(h * ROWS_PER_TASK))
        .with_min_len(exec.min_len().max(MIN_CHUNKS_PER_TASK))
        .for_each(|(a, res)| {
            for (o, r) in a.chunks_exact_mut(h).zip(res.chunks_exact(h)) {
                for ((o, &b), &r) in o.iter_mut().zip(bias).zip(r) {
                    *o = *o + b + r;
                }
                layer_norm_in_place(o, ln, eps);
            }
        });
    Ok(())
}

/// `GELU(a + bias)` (erf form) row by row, in `a`'s buffer.
fn bias_gelu(a: &mut [f32], bias: &[f32], exec: Exec) {
    let w = bias.len();
    a.par_chunks_mut(w * ROWS_PER_TASK)
        .with_min_len(exec.min_len().max(MIN_CHUNKS_PER_TASK))
        .for_each(|a| {
            for row in a.chunks_exact_mut(w) {
                for (o, &b) in row.iter_mut().zip(bias) {
                    *o = gelu_erf(*o + b);
                }
            }
        });
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
fn softmax_in_place(row: &mut [f32]) {
    let m = max_lanes(row);
    for x in row.iter_mut() {
        *x = exp_approx(*x - m);
    }
    let inv = 1.0 / sum_lanes(row);
    row.iter_mut().for_each(|x| *x *= inv);
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
    // 2ⁿ from the integer-valued n ∈ [−126, 127]: adding 1.5·2²³ puts n in
    // the low mantissa bits exactly (the same bits as `n as i32`, whose
    // saturating conversion kept this loop from vectorising: one compare
    // and move per lane).
    let n_bits = (n + 12_582_912.0).to_bits().wrapping_sub(0x4B40_0000);
    y * f32::from_bits(n_bits.wrapping_add(127) << 23)
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
    #![allow(clippy::unwrap_used)]
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

    fn le_bytes<const N: usize, T: Copy>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        xs.iter().flat_map(|&x| f(x)).collect()
    }

    #[test]
    fn weight_files_read_floats_widen_halves_and_skip_integers() {
        use safetensors::tensor::{Dtype, TensorView};
        let f32s = le_bytes(&[1.5f32, -2.0, 0.25, 8.0], f32::to_le_bytes);
        // 1, -2, 0.5, the smallest subnormal (2^-24), +inf, 65504 (largest).
        let f16s = le_bytes(
            &[0x3C00u16, 0xC000, 0x3800, 0x0001, 0x7C00, 0x7BFF],
            u16::to_le_bytes,
        );
        // 1, -3.
        let bf16s = le_bytes(&[0x3F80u16, 0xC040], u16::to_le_bytes);
        let ints = le_bytes(&[0i64, 1, 2], i64::to_le_bytes);
        let views = vec![
            ("a", TensorView::new(Dtype::F32, vec![2, 2], &f32s).unwrap()),
            ("b", TensorView::new(Dtype::F16, vec![6], &f16s).unwrap()),
            ("c", TensorView::new(Dtype::BF16, vec![2], &bf16s).unwrap()),
            ("ids", TensorView::new(Dtype::I64, vec![3], &ints).unwrap()),
        ];
        let bytes = safetensors::serialize(views, None).unwrap();
        let w = read_safetensors(&bytes).unwrap();
        assert_eq!(w.len(), 3, "the integer buffer is left out");
        assert_eq!(w["a"].shape, vec![2, 2]);
        assert_eq!(w["a"].data, vec![1.5, -2.0, 0.25, 8.0]);
        assert_eq!(
            w["b"].data,
            vec![1.0, -2.0, 0.5, 2f32.powi(-24), f32::INFINITY, 65504.0]
        );
        assert_eq!(w["c"].data, vec![1.0, -3.0]);
        let bad = read_safetensors(b"not a weight file");
        assert!(bad.is_err());
        let f64s = le_bytes(&[1.0f64], f64::to_le_bytes);
        let wide = vec![("w", TensorView::new(Dtype::F64, vec![1], &f64s).unwrap())];
        let err = read_safetensors(&safetensors::serialize(wide, None).unwrap())
            .err()
            .unwrap_or_default();
        assert_eq!(err, "tensor `w` has dtype F64; expected F32, F16 or BF16");
    }

    /// A small encoder with seeded weights: every tensor `from_tensors` reads.
    fn tiny_encoder(layers: usize) -> BertEncoder {
        let cfg = BertConfig {
            hidden: 48,
            heads: 4,
            layers,
            intermediate: 96,
            eps: 1e-12,
            max_positions: 64,
        };
        let mut state = 0x9E37_79B9u32;
        let mut w = |shape: Vec<usize>| {
            let data = (0..shape.iter().product::<usize>())
                .map(|_| {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (state >> 9) as f32 / (1u32 << 23) as f32 * 0.2 - 0.1
                })
                .collect();
            Weight { shape, data }
        };
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let mut t = HashMap::new();
        let mut put = |name: String, weight: Weight| {
            t.insert(name, weight);
        };
        put("embeddings.word_embeddings.weight".into(), w(vec![30, h]));
        put(
            "embeddings.position_embeddings.weight".into(),
            w(vec![64, h]),
        );
        put(
            "embeddings.token_type_embeddings.weight".into(),
            w(vec![2, h]),
        );
        put("embeddings.LayerNorm.weight".into(), w(vec![h]));
        put("embeddings.LayerNorm.bias".into(), w(vec![h]));
        for l in 0..layers {
            let p = format!("encoder.layer.{l}");
            for (n, out, inp) in [
                ("attention.self.query", h, h),
                ("attention.self.key", h, h),
                ("attention.self.value", h, h),
                ("attention.output.dense", h, h),
                ("intermediate.dense", i, h),
                ("output.dense", h, i),
            ] {
                put(format!("{p}.{n}.weight"), w(vec![out, inp]));
                put(format!("{p}.{n}.bias"), w(vec![out]));
            }
            for n in ["attention.output.LayerNorm", "output.LayerNorm"] {
                put(format!("{p}.{n}.weight"), w(vec![h]));
                put(format!("{p}.{n}.bias"), w(vec![h]));
            }
        }
        BertEncoder::from_tensors(cfg, t).unwrap()
    }

    #[test]
    fn inline_runs_give_the_pool_s_bits() {
        // A concurrent caller computes on its own thread (`Exec::Inline`);
        // its vectors must be the ones the pool would have given, or a run's
        // result would depend on which policy reached the embedder first.
        let enc = tiny_encoder(2);
        let seqs: Vec<Vec<u32>> = vec![
            vec![1, 5, 9, 2],
            (0..40).map(|i| (i * 7 % 29) + 1).collect(),
            vec![3],
            (0..17).map(|i| (i * 3 % 29) + 1).collect(),
        ];
        let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let pooled = pool
            .install(|| enc.embed_pooled(&refs, Exec::Pool))
            .unwrap();
        let inline = enc.embed_pooled(&refs, Exec::Inline).unwrap();
        let inline_in_pool = pool
            .install(|| enc.embed_pooled(&refs, Exec::Inline))
            .unwrap();
        assert_eq!(inline, pooled);
        assert_eq!(inline_in_pool, pooled);
        // And one text alone gives what it gives inside a batch's pass.
        for (i, r) in refs.iter().enumerate() {
            let alone = enc
                .embed_pooled(std::slice::from_ref(r), Exec::Inline)
                .unwrap();
            assert_eq!(alone[0], pooled[i], "text {i}");
        }
    }

    #[test]
    fn a_missing_or_misshapen_tensor_is_named() {
        let cfg = BertConfig {
            hidden: 4,
            heads: 2,
            layers: 1,
            intermediate: 8,
            eps: 1e-12,
            max_positions: 8,
        };
        let w = |shape: Vec<usize>| Weight {
            data: vec![0.0; shape.iter().product()],
            shape,
        };
        let mut t = HashMap::new();
        t.insert(
            "embeddings.word_embeddings.weight".to_string(),
            w(vec![10, 4]),
        );
        let err = BertEncoder::from_tensors(cfg.clone(), t.clone()).err();
        assert_eq!(
            err.as_deref(),
            Some("float tensor `embeddings.position_embeddings.weight` missing")
        );
        t.insert(
            "embeddings.position_embeddings.weight".to_string(),
            w(vec![9, 4]),
        );
        let err = BertEncoder::from_tensors(cfg, t).err().unwrap();
        assert!(
            err.contains("`embeddings.position_embeddings.weight` has shape [9, 4]"),
            "{err}"
        );
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

    /// The vectorisable 2ⁿ gives `exp_approx` the bits that the
    /// saturating `n as i32` gave it, over the whole clamped range and past
    /// it.
    #[test]
    fn exp_scale_by_magic_number_matches_the_integer_cast() {
        let with_cast = |x: f32| {
            let x = x.clamp(-87.3, 88.3);
            let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
            let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
            let mut p = 1.987_569_1e-4f32;
            for c in [
                1.398_199_9e-3,
                8.333_452e-3,
                4.166_579_6e-2,
                1.666_666_5e-1,
                0.5,
            ] {
                p = p * r + c;
            }
            (p * r * r + r + 1.0) * f32::from_bits(((n as i32 + 127) as u32) << 23)
        };
        let xs = (-100_000..=100_000)
            .map(|i| i as f32 / 1000.0)
            .chain([-87.3f32, 88.3, -1e30, 1e30, -0.0, 0.0]);
        for x in xs {
            assert_eq!(exp_approx(x).to_bits(), with_cast(x).to_bits(), "x = {x}");
        }
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
        let mut dst = src;
        softmax_in_place(&mut dst);
        let z: f64 = src.iter().map(|&s| (s as f64 - 3.0).exp()).sum();
        for (d, s) in dst.iter().zip(src) {
            let want = (s as f64 - 3.0).exp() / z;
            assert!((*d as f64 - want).abs() < 1e-6);
        }
    }
}
