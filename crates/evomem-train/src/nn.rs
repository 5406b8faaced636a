//! The few layers the two models share, over candle tensors: linear maps,
//! layer norm, seeded dropout, and parameter snapshots and checksums.
//!
//! Layer norm, bias addition, the causal attention softmax, GELU and
//! dropout are fused ops of their own with hand-written backward passes:
//! candle-nn's fused layer norm and softmax have no backward pass, and the
//! composed versions walk a batch's activations about ten times and sum
//! bias gradients over rows through candle's strided reduction (a fifth of
//! a SASRec epoch, profiled on ml-100k); candle's GELU backward takes a
//! dozen passes, and its binary maps (mask products, score masking) were
//! another sixth of an epoch. Gradient sums over rows go through fixed blocks of
//! [`ROWS`] rows added in order, so results do not depend on the thread
//! count. Dropout draws its masks from a ChaCha8 stream because candle's
//! CPU generator cannot be seeded.

use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, Device, Layout, Shape, Tensor, Var,
};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

/// A parameter from values.
pub(crate) fn var(data: Vec<f32>, shape: impl Into<Shape>) -> candle_core::Result<Var> {
    Var::from_vec(data, shape, &Device::Cpu)
}

/// Rows per block when a gradient is summed over rows (module docs).
const ROWS: usize = 64;

/// The contiguous values of a CPU storage.
fn values<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("{op}: inputs must be contiguous")
    };
    s.as_slice::<f32>()?
        .get(a..b)
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: layout out of range")))
}

/// Run `f` on a CPU tensor's contiguous values, read in place.
fn read<R>(
    t: &Tensor,
    op: &str,
    f: impl FnOnce(&[f32]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (s, l) = t.storage_and_layout();
    let candle_core::Storage::Cpu(cpu) = &*s else {
        candle_core::bail!("{op}: CPU tensors only")
    };
    f(values(cpu, l, op)?)
}

/// Sum of the per-block partial vectors, in block order.
fn add_in_order(parts: Vec<Vec<f32>>, k: usize) -> Vec<f32> {
    let mut acc = vec![0f32; k];
    for p in parts {
        for (a, x) in acc.iter_mut().zip(p) {
            *a += x;
        }
    }
    acc
}

/// `x + b` where `b` (`k` values) repeats over `x`'s leading elements:
/// `y_i = x_i + b_{i mod k}`. The backward sums the gradient's rows of
/// `k` into `∂b` in fixed blocks.
#[derive(Debug, Clone, Copy)]
struct AddBias;

impl CustomOp2 for AddBias {
    fn name(&self) -> &'static str {
        "add-bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(s1, l1, "add-bias")?;
        let b = values(s2, l2, "add-bias")?;
        let k = b.len().max(1);
        if x.len() % k != 0 {
            candle_core::bail!("add-bias: {} values do not repeat a bias of {k}", x.len())
        }
        let mut out = x.to_vec();
        out.par_chunks_mut(k * ROWS).for_each(|o| {
            for row in o.chunks_mut(k) {
                for (y, &bi) in row.iter_mut().zip(b) {
                    *y += bi;
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let k = b.elem_count().max(1);
        let gb = read(grad, "add-bias", |g| {
            let parts: Vec<Vec<f32>> = g
                .par_chunks(k * ROWS)
                .map(|blk| {
                    let mut acc = vec![0f32; k];
                    for row in blk.chunks(k) {
                        for (a, &x) in acc.iter_mut().zip(row) {
                            *a += x;
                        }
                    }
                    acc
                })
                .collect();
            Ok(add_in_order(parts, k))
        })?;
        let gb = Tensor::from_vec(gb, b.shape(), b.device())?;
        Ok((Some(grad.clone()), Some(gb)))
    }
}

/// `x + b` with `b` repeated over `x`'s leading dimensions ([`AddBias`]).
pub(crate) fn add_bias(x: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op2(&b.contiguous()?, AddBias)
}

/// `x W + b` for `x` of shape `(.., din)`, `W (din, dout)`, `b (dout)`.
pub(crate) fn linear(x: &Tensor, w: &Var, b: &Var) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let din = dims.last().copied().unwrap_or(1);
    let rows = x.elem_count() / din.max(1);
    let y = x.reshape((rows, din))?.matmul(w.as_tensor())?;
    let y = add_bias(&y, b.as_tensor())?;
    let mut out = dims;
    if let Some(last) = out.last_mut() {
        *last = w.dims().get(1).copied().unwrap_or(1);
    }
    y.reshape(out)
}

/// Layer norm over the last dimension, `y = (x − μ) / √(σ² + ε) ⊙ w + b`
/// (Ba et al. 2016), as one op. With `x̂` the normalised row, `s =
/// 1/√(σ² + ε)` and `ĝ = ∂y ⊙ w`, the backward is `∂x = s (ĝ − mean(ĝ) −
/// x̂ mean(ĝ ⊙ x̂))`, `∂w = Σ_rows ∂y ⊙ x̂`, `∂b = Σ_rows ∂y`.
#[derive(Debug, Clone, Copy)]
struct LayerNorm {
    eps: f32,
}

impl LayerNorm {
    /// `(mean, 1/√(var + ε))` of one row.
    fn stats(&self, row: &[f32]) -> (f32, f32) {
        let n = row.len().max(1) as f32;
        let m = row.iter().sum::<f32>() / n;
        let v = row.iter().map(|&x| (x - m) * (x - m)).sum::<f32>() / n;
        (m, 1.0 / (v + self.eps).sqrt())
    }
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(s1, l1, "layer-norm")?;
        let w = values(s2, l2, "layer-norm")?;
        let b = values(s3, l3, "layer-norm")?;
        let d = w.len().max(1);
        if x.len() % d != 0 || b.len() != w.len() || l1.dims().last() != Some(&w.len()) {
            candle_core::bail!(
                "layer-norm: rows of {:?} against {} weights",
                l1.dims(),
                w.len()
            )
        }
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(d * ROWS)
            .zip(x.par_chunks(d * ROWS))
            .for_each(|(o, x)| {
                for (o, x) in o.chunks_mut(d).zip(x.chunks(d)) {
                    let (m, s) = self.stats(x);
                    for (((y, &xi), &wi), &bi) in o.iter_mut().zip(x).zip(w).zip(b) {
                        *y = (xi - m) * s * wi + bi;
                    }
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = w.elem_count().max(1);
        let wv = w.flatten_all()?.to_vec1::<f32>()?;
        let (dx, dw, db) = read(x, "layer-norm", |xs| {
            read(grad, "layer-norm", |gs| {
                let mut dx = vec![0f32; xs.len()];
                let parts: Vec<(Vec<f32>, Vec<f32>)> = dx
                    .par_chunks_mut(d * ROWS)
                    .zip(xs.par_chunks(d * ROWS))
                    .zip(gs.par_chunks(d * ROWS))
                    .map(|((dx, x), g)| {
                        let (mut dw, mut db) = (vec![0f32; d], vec![0f32; d]);
                        let mut xn = vec![0f32; d];
                        let mut gn = vec![0f32; d];
                        for ((dx, x), g) in dx.chunks_mut(d).zip(x.chunks(d)).zip(g.chunks(d)) {
                            let (m, s) = self.stats(x);
                            let (mut a, mut c) = (0f32, 0f32);
                            for j in 0..d.min(x.len()) {
                                xn[j] = (x[j] - m) * s;
                                gn[j] = g[j] * wv[j];
                                a += gn[j];
                                c += gn[j] * xn[j];
                                dw[j] += g[j] * xn[j];
                                db[j] += g[j];
                            }
                            let (a, c) = (a / d as f32, c / d as f32);
                            for j in 0..d.min(x.len()) {
                                dx[j] = s * (gn[j] - a - xn[j] * c);
                            }
                        }
                        (dw, db)
                    })
                    .collect();
                let (pw, pb): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
                Ok((dx, add_in_order(pw, d), add_in_order(pb, d)))
            })
        })?;
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), x.device())?),
            Some(Tensor::from_vec(dw, w.shape(), w.device())?),
            Some(Tensor::from_vec(db, b.shape(), b.device())?),
        ))
    }
}

/// Layer norm over the last dimension with weight `w` and bias `b`
/// ([`LayerNorm`]).
pub(crate) fn layer_norm(x: &Tensor, w: &Var, b: &Var, eps: f64) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op3(w.as_tensor(), b.as_tensor(), LayerNorm { eps: eps as f32 })
}

/// Inverted dropout with probability `p`, masks from `rng`; the identity
/// when `rng` is `None` (evaluation) or `p` is 0. One op ([`Dropout`]).
pub(crate) fn dropout(
    x: &Tensor,
    rng: Option<&mut ChaCha8Rng>,
    p: f32,
) -> candle_core::Result<Tensor> {
    match rng {
        Some(r) if p > 0.0 => {
            let mask = crate::rng::dropout_mask(r, x.elem_count(), p);
            x.contiguous()?.apply_op1(Dropout {
                mask: std::sync::Arc::new(mask),
            })
        }
        _ => Ok(x.clone()),
    }
}

/// `x ⊙ mask` with the mask (0 or `1/(1 − p)` per element) held by the op,
/// so the forward and the backward (`∂x = ∂y ⊙ mask`) are one parallel
/// pass each instead of a mask tensor and two of candle's binary maps.
#[derive(Debug, Clone)]
struct Dropout {
    mask: std::sync::Arc<Vec<f32>>,
}

/// `a ⊙ b`, elementwise, in parallel.
fn times(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.par_iter()
        .with_min_len(4096)
        .zip(b.par_iter())
        .map(|(&x, &m)| x * m)
        .collect()
}

impl CustomOp1 for Dropout {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(s, l, "dropout")?;
        if x.len() != self.mask.len() {
            candle_core::bail!("dropout: {} values, a mask of {}", x.len(), self.mask.len())
        }
        Ok((CpuStorage::F32(times(x, &self.mask)), l.shape().clone()))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let g = read(grad, "dropout", |g| Ok(times(g, &self.mask)))?;
        Ok(Some(Tensor::from_vec(g, grad.shape(), grad.device())?))
    }
}

/// GELU with the exact normal CDF, `y = x Φ(x) = x (1 + erf(x/√2)) / 2`,
/// as one op; the backward is `∂x = ∂y (Φ(x) + x φ(x))` in one pass
/// (candle's composed backward takes a dozen passes over the
/// feed-forward activations, the largest tensors of a SASRec block).
/// `erf` is candle's own, so the forward values are `gelu_erf`'s.
#[derive(Debug, Clone, Copy)]
struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "gelu-erf"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        use candle_core::cpu::erf::erf_f32;
        let x = values(s, l, "gelu-erf")?;
        let out: Vec<f32> = x
            .par_iter()
            .with_min_len(4096)
            .map(|&v| (erf_f32(v * std::f32::consts::FRAC_1_SQRT_2) + 1.) * 0.5 * v)
            .collect();
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        use candle_core::cpu::erf::erf_f32;
        // 1/√(2π).
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        let g = read(arg, "gelu-erf", |x| {
            read(grad, "gelu-erf", |g| {
                Ok(g.par_iter()
                    .with_min_len(4096)
                    .zip(x.par_iter())
                    .map(|(&g, &x)| {
                        let cdf = 0.5 * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2));
                        let pdf = INV_SQRT_2PI * (-0.5 * x * x).exp();
                        g * (cdf + x * pdf)
                    })
                    .collect::<Vec<f32>>())
            })
        })?;
        Ok(Some(Tensor::from_vec(g, grad.shape(), grad.device())?))
    }
}

/// GELU (erf form) as one op ([`GeluErf`]).
pub(crate) fn gelu_erf(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(GeluErf)
}

/// Causal softmax of scaled attention scores as one op: for scores of
/// shape `(.., t, t)` (query row `i`, key column `j`), `y_ij =
/// softmax_j(scale · x_ij)` over `j ≤ i`, and exactly 0 for `j > i`. This
/// is `softmax(scale · x + mask)` with a −10000 mask on later keys
/// (RecBole's), whose masked terms underflow to 0 in f32, in one pass
/// instead of three (scale, mask, softmax). Backward: `∂x = scale · y ⊙
/// (∂y − Σ_j ∂y ⊙ y)`.
#[derive(Debug, Clone, Copy)]
struct CausalSoftmax {
    scale: f32,
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(s, l, "causal-softmax")?;
        let dims = l.dims();
        let t = dims.last().copied().unwrap_or(1).max(1);
        if dims.len() < 2 || dims[dims.len() - 2] != t {
            candle_core::bail!("causal-softmax: scores must be (.., t, t), got {dims:?}")
        }
        let scale = self.scale;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(t * t)
            .zip(x.par_chunks(t * t))
            .for_each(|(o, x)| {
                for (i, (o, x)) in o.chunks_mut(t).zip(x.chunks(t)).enumerate() {
                    let (o, x) = (&mut o[..=i], &x[..=i]);
                    let m = x
                        .iter()
                        .map(|&v| v * scale)
                        .fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0.0;
                    for (oi, &xi) in o.iter_mut().zip(x) {
                        *oi = (xi * scale - m).exp();
                        sum += *oi;
                    }
                    let inv = 1.0 / sum;
                    for oi in o.iter_mut() {
                        *oi *= inv;
                    }
                }
            });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let t = res.dims().last().copied().unwrap_or(1).max(1);
        let scale = self.scale;
        let g = read(res, "causal-softmax", |y| {
            read(grad, "causal-softmax", |g| {
                let mut out = vec![0f32; g.len()];
                out.par_chunks_mut(t * 64)
                    .zip(g.par_chunks(t * 64).zip(y.par_chunks(t * 64)))
                    .for_each(|(o, (g, y))| {
                        for ((o, g), y) in o.chunks_mut(t).zip(g.chunks(t)).zip(y.chunks(t)) {
                            let dot: f32 = g.iter().zip(y).map(|(a, b)| a * b).sum();
                            for ((o, &gi), &yi) in o.iter_mut().zip(g).zip(y) {
                                *o = yi * (gi - dot) * scale;
                            }
                        }
                    });
                Ok(out)
            })
        })?;
        Ok(Some(Tensor::from_vec(g, grad.shape(), grad.device())?))
    }
}

/// [`CausalSoftmax`] of `x` with `scale`.
pub(crate) fn causal_softmax(x: &Tensor, scale: f32) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(CausalSoftmax { scale })
}

/// `log(1 + e^x)`, stable for large `|x|`.
pub(crate) fn softplus(x: &Tensor) -> candle_core::Result<Tensor> {
    x.relu()?.add(&(x.abs()?.neg()?.exp()? + 1.0)?.log()?)
}

/// Copies of every parameter's current value.
pub(crate) fn snapshot(vars: &[Var]) -> candle_core::Result<Vec<Tensor>> {
    vars.iter().map(|v| v.as_tensor().copy()).collect()
}

/// Set every parameter to a snapshot's value.
pub(crate) fn restore(vars: &[Var], snap: &[Tensor]) -> candle_core::Result<()> {
    for (v, t) in vars.iter().zip(snap) {
        v.set(t)?;
    }
    Ok(())
}

/// SHA-256 of every parameter's bytes, in order (the weights' checksum).
pub(crate) fn checksum(vars: &[Var]) -> candle_core::Result<String> {
    let mut h = Sha256::new();
    for v in vars {
        for x in v.as_tensor().flatten_all()?.to_vec1::<f32>()? {
            h.update(x.to_le_bytes());
        }
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::D;

    #[test]
    fn layer_norm_centres_and_scales() {
        let x = Tensor::new(&[[1f32, 2.0, 3.0, 6.0]], &Device::Cpu).unwrap();
        let w = var(vec![1.0; 4], 4).unwrap();
        let b = var(vec![0.0; 4], 4).unwrap();
        let y = layer_norm(&x, &w, &b, 1e-12)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let mean: f32 = y.iter().sum::<f32>() / 4.0;
        let var: f32 = y.iter().map(|v| v * v).sum::<f32>() / 4.0;
        assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5, "{y:?}");
    }

    /// Gradients of `Σ f(a) ⊙ r` in every parameter, flattened.
    fn grads(out: &Tensor, r: &Tensor, of: &[&Var]) -> Vec<Vec<f32>> {
        let g = (out * r).unwrap().sum_all().unwrap().backward().unwrap();
        of.iter()
            .map(|v| {
                g.get(v.as_tensor())
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            })
            .collect()
    }

    fn close(a: &[Vec<f32>], b: &[Vec<f32>], tol: f32) {
        for (a, b) in a.iter().zip(b) {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{x} vs {y}");
            }
        }
    }

    /// The fused layer norm's values and gradients (input, weight, bias)
    /// equal the composed formula's, over more rows than one block.
    #[test]
    fn fused_layer_norm_matches_the_composed_one() {
        let (rows, d) = (3 * ROWS + 5, 8);
        let mut r = crate::rng::stream(4, 4);
        let xv = crate::rng::normal(&mut r, rows * d, 2.0);
        let wv = crate::rng::normal(&mut r, d, 1.0);
        let bv = crate::rng::normal(&mut r, d, 1.0);
        let rv = crate::rng::normal(&mut r, rows * d, 1.0);
        let rt = Tensor::from_vec(rv, (rows, d), &Device::Cpu).unwrap();
        let mk = || {
            (
                var(xv.clone(), (rows, d)).unwrap(),
                var(wv.clone(), d).unwrap(),
                var(bv.clone(), d).unwrap(),
            )
        };
        let (x1, w1, b1) = mk();
        let (x2, w2, b2) = mk();
        let fused = layer_norm(x1.as_tensor(), &w1, &b1, 1e-12).unwrap();
        let xt = x2.as_tensor();
        let mean = xt.mean_keepdim(D::Minus1).unwrap();
        let xc = xt.broadcast_sub(&mean).unwrap();
        let v = xc.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
        let composed = xc
            .broadcast_div(&(v + 1e-12).unwrap().sqrt().unwrap())
            .unwrap()
            .broadcast_mul(w2.as_tensor())
            .unwrap()
            .broadcast_add(b2.as_tensor())
            .unwrap();
        let flat = |t: &Tensor| vec![t.flatten_all().unwrap().to_vec1::<f32>().unwrap()];
        close(&flat(&fused), &flat(&composed), 1e-5);
        close(
            &grads(&fused, &rt, &[&x1, &w1, &b1]),
            &grads(&composed, &rt, &[&x2, &w2, &b2]),
            1e-4,
        );
    }

    /// The fused bias addition equals candle's broadcast addition, with
    /// its gradients, for a bias over one and over two trailing dimensions.
    #[test]
    fn fused_bias_matches_broadcast_add() {
        let mut r = crate::rng::stream(3, 3);
        for bshape in [vec![6usize], vec![5, 6]] {
            let xs = (2 * ROWS + 3, 5, 6);
            let n = xs.0 * xs.1 * xs.2;
            let k: usize = bshape.iter().product();
            let xv = crate::rng::normal(&mut r, n, 1.0);
            let bv = crate::rng::normal(&mut r, k, 1.0);
            let rt =
                Tensor::from_vec(crate::rng::normal(&mut r, n, 1.0), xs, &Device::Cpu).unwrap();
            let (x1, b1) = (
                var(xv.clone(), xs).unwrap(),
                var(bv.clone(), bshape.clone()).unwrap(),
            );
            let (x2, b2) = (var(xv, xs).unwrap(), var(bv, bshape.clone()).unwrap());
            let fused = add_bias(x1.as_tensor(), b1.as_tensor()).unwrap();
            let composed = x2.as_tensor().broadcast_add(b2.as_tensor()).unwrap();
            close(
                &grads(&fused, &rt, &[&x1, &b1]),
                &grads(&composed, &rt, &[&x2, &b2]),
                1e-4,
            );
            let f = fused.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let c = composed.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(f, c);
        }
    }

    /// Values and gradients of `f` and `g` of the same input, compared.
    fn same_as_composed(
        shape: &[usize],
        spread: f32,
        f: impl Fn(&Tensor) -> Tensor,
        g: impl Fn(&Tensor) -> Tensor,
        tol: f32,
    ) {
        let n: usize = shape.iter().product();
        let mut r = crate::rng::stream(9, 9);
        let x = crate::rng::normal(&mut r, n, spread);
        let w = crate::rng::normal(&mut r, n, 1.0);
        let a = var(x.clone(), shape).unwrap();
        let b = var(x, shape).unwrap();
        let w = Tensor::from_vec(w, shape, &Device::Cpu).unwrap();
        let (ya, yb) = (f(a.as_tensor()), g(b.as_tensor()));
        let flat = |t: &Tensor| vec![t.flatten_all().unwrap().to_vec1::<f32>().unwrap()];
        close(&flat(&ya), &flat(&yb), tol);
        close(&grads(&ya, &w, &[&a]), &grads(&yb, &w, &[&b]), tol);
    }

    /// The fused causal softmax equals scale, a −10000 mask on later keys
    /// and candle's softmax, values and gradients; masked entries are 0.
    #[test]
    fn fused_causal_softmax_matches_the_composed_one() {
        let t = 7;
        let scale = 0.25f32;
        let composed = |x: &Tensor| {
            let mut mask = vec![0f32; t * t];
            for i in 0..t {
                for j in (i + 1)..t {
                    mask[i * t + j] = -10000.0;
                }
            }
            let mask = Tensor::from_vec(mask, (t, t), &Device::Cpu).unwrap();
            let s = (x * f64::from(scale))
                .unwrap()
                .broadcast_add(&mask)
                .unwrap();
            candle_nn::ops::softmax(&s, D::Minus1).unwrap()
        };
        let fused = |x: &Tensor| causal_softmax(x, scale).unwrap();
        same_as_composed(&[3, 2, t, t], 3.0, fused, composed, 1e-6);
        let x = Tensor::ones((1, t, t), candle_core::DType::F32, &Device::Cpu).unwrap();
        let y = causal_softmax(&x, 1.0)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for i in 0..t {
            for j in 0..t {
                let want = if j <= i { 1.0 / (i + 1) as f32 } else { 0.0 };
                assert!((y[i * t + j] - want).abs() < 1e-6, "({i}, {j})");
            }
        }
        assert!(causal_softmax(
            &Tensor::ones((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap(),
            1.0
        )
        .is_err());
    }

    /// The fused GELU equals candle's `gelu_erf`, values exactly and
    /// gradients within rounding.
    #[test]
    fn fused_gelu_matches_candles() {
        same_as_composed(
            &[5, 300],
            2.5,
            |x| gelu_erf(x).unwrap(),
            |x| x.gelu_erf().unwrap(),
            1e-5,
        );
        let x = Tensor::from_vec(vec![-3f32, -0.5, 0.0, 0.7, 4.0], 5, &Device::Cpu).unwrap();
        assert_eq!(
            gelu_erf(&x).unwrap().to_vec1::<f32>().unwrap(),
            x.gelu_erf().unwrap().to_vec1::<f32>().unwrap()
        );
    }

    /// The fused dropout equals multiplying by the same mask, values and
    /// gradients, and draws the masks the earlier composed version drew.
    #[test]
    fn fused_dropout_matches_a_mask_product() {
        let n = 3 * 4096 + 17;
        let fused = |x: &Tensor| {
            let mut r = crate::rng::stream(5, 5);
            dropout(x, Some(&mut r), 0.3).unwrap()
        };
        let composed = |x: &Tensor| {
            let mut r = crate::rng::stream(5, 5);
            let mask = crate::rng::dropout_mask(&mut r, n, 0.3);
            x.mul(&Tensor::from_vec(mask, n, &Device::Cpu).unwrap())
                .unwrap()
        };
        same_as_composed(&[n], 1.0, fused, composed, 0.0);
        let x = Tensor::ones(4, candle_core::DType::F32, &Device::Cpu).unwrap();
        assert_eq!(
            dropout(&x, None, 0.5).unwrap().to_vec1::<f32>().unwrap(),
            vec![1.0; 4]
        );
    }

    #[test]
    fn softplus_is_stable() {
        let x = Tensor::new(&[-100f32, 0.0, 100.0], &Device::Cpu).unwrap();
        let y = softplus(&x).unwrap().to_vec1::<f32>().unwrap();
        assert!(
            y[0].abs() < 1e-6 && (y[1] - 2f32.ln()).abs() < 1e-6 && (y[2] - 100.0).abs() < 1e-4
        );
    }
}
