//! The few layers the two models share, over candle tensors: linear maps,
//! layer norm, seeded dropout, and parameter snapshots and checksums.
//!
//! Layer norm is written from candle's primitives because candle-nn's fused
//! layer norm has no backward pass; dropout draws its masks from a ChaCha8
//! stream because candle's CPU generator cannot be seeded.

use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor, Var, D};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

/// A parameter from values.
pub(crate) fn var(data: Vec<f32>, shape: impl Into<Shape>) -> candle_core::Result<Var> {
    Var::from_vec(data, shape, &Device::Cpu)
}

/// `x W + b` for `x` of shape `(.., din)`, `W (din, dout)`, `b (dout)`.
pub(crate) fn linear(x: &Tensor, w: &Var, b: &Var) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let din = dims.last().copied().unwrap_or(1);
    let rows = x.elem_count() / din.max(1);
    let y = x.reshape((rows, din))?.matmul(w.as_tensor())?;
    let y = y.broadcast_add(b.as_tensor())?;
    let mut out = dims;
    if let Some(last) = out.last_mut() {
        *last = w.dims().get(1).copied().unwrap_or(1);
    }
    y.reshape(out)
}

/// Layer norm over the last dimension with weight `w` and bias `b`.
pub(crate) fn layer_norm(x: &Tensor, w: &Var, b: &Var, eps: f64) -> candle_core::Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let xn = xc.broadcast_div(&(var + eps)?.sqrt()?)?;
    xn.broadcast_mul(w.as_tensor())?
        .broadcast_add(b.as_tensor())
}

/// Inverted dropout with probability `p`, masks from `rng`; the identity
/// when `rng` is `None` (evaluation) or `p` is 0.
pub(crate) fn dropout(
    x: &Tensor,
    rng: Option<&mut ChaCha8Rng>,
    p: f32,
) -> candle_core::Result<Tensor> {
    match rng {
        Some(r) if p > 0.0 => {
            let mask = crate::rng::dropout_mask(r, x.elem_count(), p);
            let mask = Tensor::from_vec(mask, x.shape(), x.device())?;
            x.mul(&mask)
        }
        _ => Ok(x.clone()),
    }
}

/// Softmax over the last dimension as one op: candle-nn's fused softmax
/// has no backward pass, and the composed one (max, subtract, exp, sum,
/// divide) takes five passes over the attention scores. The backward is
/// `∂x = y ⊙ (∂y − Σ ∂y ⊙ y)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SoftmaxLast;

impl CustomOp1 for SoftmaxLast {
    fn name(&self) -> &'static str {
        "softmax-last"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("softmax-last: input must be contiguous")
        };
        let x = s
            .as_slice::<f32>()?
            .get(a..b)
            .ok_or_else(|| candle_core::Error::Msg("softmax-last: out of range".into()))?;
        let n = l.dims().last().copied().unwrap_or(1).max(1);
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(n * 64)
            .zip(x.par_chunks(n * 64))
            .for_each(|(o, x)| {
                for (o, x) in o.chunks_mut(n).zip(x.chunks(n)) {
                    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0.0;
                    for (oi, &xi) in o.iter_mut().zip(x) {
                        *oi = (xi - m).exp();
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
        let dot = (grad * res)?.sum_keepdim(D::Minus1)?;
        Ok(Some((grad.broadcast_sub(&dot)? * res)?))
    }
}

/// Softmax over the last dimension ([`SoftmaxLast`]).
pub(crate) fn softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(SoftmaxLast)
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

    /// The fused softmax and its gradient equal candle's composed ones.
    #[test]
    fn fused_softmax_matches_the_composed_one() {
        let mut r = crate::rng::stream(9, 9);
        let x = crate::rng::normal(&mut r, 6 * 7, 3.0);
        let w = crate::rng::normal(&mut r, 6 * 7, 1.0);
        let a = var(x.clone(), (6, 7)).unwrap();
        let b = var(x, (6, 7)).unwrap();
        let w = Tensor::from_vec(w, (6, 7), &Device::Cpu).unwrap();
        let ya = softmax_last(a.as_tensor()).unwrap();
        let yb = candle_nn::ops::softmax(b.as_tensor(), D::Minus1).unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (p, q) in flat(&ya).iter().zip(flat(&yb)) {
            assert!((p - q).abs() < 1e-6);
        }
        let ga = (ya * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (yb * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let (ga, gb) = (
            ga.get(a.as_tensor()).unwrap(),
            gb.get(b.as_tensor()).unwrap(),
        );
        for (p, q) in flat(ga).iter().zip(flat(gb)) {
            assert!((p - q).abs() < 1e-6, "{p} vs {q}");
        }
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
