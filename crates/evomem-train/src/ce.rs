//! Softmax cross-entropy over every item, fused into one candle op.
//!
//! SASRec's `CE` loss scores a position's hidden state against every item
//! (Kang and McAuley's model with RecBole's `loss_type: CE`): a logits
//! matrix of positions × items, which on Amazon Beauty is 2,048 × 12,101
//! per batch. Composed of candle's primitives (max, subtract, exp, sum,
//! log, gather) the loss and its gradient take about ten passes over that
//! matrix; fused, the forward takes two (row maximum, then the sum of
//! exponentials) and the backward one: `∂ℓ_r/∂z_rc = g_r (softmax(z_r)_c −
//! [c = t_r])`. Rows are independent and run on the training pool.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Per-row loss `−log softmax(z_r)_{t_r}` of logits `(N, C)` and targets
/// `(N)` (u32); differentiable in the logits.
#[derive(Debug, Clone, Copy)]
pub struct SoftmaxCrossEntropy;

fn contiguous<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("softmax cross-entropy: {what} must be contiguous")
    };
    let v = s.as_slice::<f32>()?;
    v.get(a..b).ok_or_else(|| {
        candle_core::Error::Msg(format!("softmax cross-entropy: {what} out of range"))
    })
}

/// `(max, log Σ exp(z − max))` of one row.
fn log_norm(row: &[f32]) -> (f32, f32) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let s: f32 = row.iter().map(|&z| (z - m).exp()).sum();
    (m, s.ln())
}

impl CustomOp2 for SoftmaxCrossEntropy {
    fn name(&self) -> &'static str {
        "softmax-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c) = l1.shape().dims2()?;
        let z = contiguous(s1, l1, "logits")?;
        let Some((a, b)) = l2.contiguous_offsets() else {
            candle_core::bail!("softmax cross-entropy: targets must be contiguous")
        };
        let t = s2
            .as_slice::<u32>()?
            .get(a..b)
            .ok_or_else(|| candle_core::Error::Msg("targets out of range".into()))?;
        if t.len() != n {
            candle_core::bail!("softmax cross-entropy: {} targets for {n} rows", t.len())
        }
        if let Some(&bad) = t.iter().find(|&&x| x as usize >= c) {
            candle_core::bail!("softmax cross-entropy: target {bad} out of {c} classes")
        }
        let out: Vec<f32> = z
            .par_chunks(c.max(1))
            .zip(t.par_iter())
            .map(|(row, &ti)| {
                let (m, ln) = log_norm(row);
                m + ln - row[ti as usize]
            })
            .collect();
        Ok((CpuStorage::F32(out), Shape::from(n)))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (n, c) = logits.dims2()?;
        // The logits are read in place (a batch's are ~100 MB on Beauty).
        let (storage, layout) = logits.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("softmax cross-entropy: CPU tensors only")
        };
        let z = contiguous(cpu, layout, "logits")?;
        let t = targets.to_vec1::<u32>()?;
        let g = grad_res.to_vec1::<f32>()?;
        let mut out = vec![0f32; n * c];
        out.par_chunks_mut(c.max(1))
            .zip(z.par_chunks(c.max(1)))
            .zip(t.par_iter().zip(g.par_iter()))
            .for_each(|((o, row), (&ti, &gi))| {
                let (m, ln) = log_norm(row);
                for (oc, &zc) in o.iter_mut().zip(row) {
                    *oc = gi * (zc - m - ln).exp();
                }
                if let Some(x) = o.get_mut(ti as usize) {
                    *x -= gi;
                }
            });
        let grad = Tensor::from_vec(out, (n, c), logits.device())?;
        Ok((Some(grad), None))
    }
}

/// Mean softmax cross-entropy of `logits (N, C)` against `targets (N)`.
pub fn mean_loss(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2(targets, SoftmaxCrossEntropy)?
        .mean_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// The fused loss and gradient equal candle's composed ones.
    #[test]
    fn matches_candle_composed_cross_entropy() {
        let dev = Device::Cpu;
        let mut r = crate::rng::stream(5, 5);
        let z = crate::rng::normal(&mut r, 7 * 13, 2.0);
        let t: Vec<u32> = vec![0, 12, 3, 3, 7, 1, 9];
        let v1 = Var::from_vec(z.clone(), (7, 13), &dev).unwrap();
        let v2 = Var::from_vec(z, (7, 13), &dev).unwrap();
        let tt = Tensor::new(t.as_slice(), &dev).unwrap();
        let fused = mean_loss(v1.as_tensor(), &tt).unwrap();
        let composed = candle_nn::loss::cross_entropy(v2.as_tensor(), &tt).unwrap();
        let (a, b) = (
            fused.to_scalar::<f32>().unwrap(),
            composed.to_scalar::<f32>().unwrap(),
        );
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        let g1 = fused.backward().unwrap();
        let g2 = composed.backward().unwrap();
        let (g1, g2) = (
            g1.get(v1.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap(),
            g2.get(v2.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap(),
        );
        for (x, y) in g1.iter().zip(&g2) {
            assert!((x - y).abs() < 1e-6, "{x} vs {y}");
        }
    }

    #[test]
    fn a_target_out_of_range_is_an_error() {
        let dev = Device::Cpu;
        let z = Tensor::zeros((2, 3), candle_core::DType::F32, &dev).unwrap();
        let t = Tensor::new(&[0u32, 3], &dev).unwrap();
        assert!(mean_loss(&z, &t).is_err());
    }
}
