//! Softmax cross-entropy over every item, computed in chunks of rows.
//!
//! SASRec's `CE` loss scores a position's hidden state against every item
//! (Kang and McAuley's model with RecBole's `loss_type: CE`): a logits
//! matrix of positions × items, which on Amazon Beauty is 2,048 × 12,101
//! per batch. Through candle's autodiff that matrix is allocated (and its
//! pages cleared) several times a step, walked by about ten elementwise
//! passes and summed into by the gradient bookkeeping. Here it never
//! exists whole: [`chunked_mean_loss`] makes the logits a cache-sized
//! chunk of rows at a time, turns each chunk into its gradient in place
//! (`∂ℓ_r/∂z_rc = (softmax(z_r)_c − [c = t_r]) / N`, one exponential per
//! logit) and multiplies it straight back into the gradients of the
//! hidden states and the item table.

use candle_core::Tensor;
use rayon::prelude::*;

/// Rows of logits per chunk in [`chunked_mean_loss`]: about 8 MiB of
/// logits, so a chunk stays in the last-level cache, within [64, 1024].
fn chunk_rows(classes: usize) -> usize {
    ((8 << 20) / (4 * classes.max(1))).clamp(64, 1024)
}

/// Mean softmax cross-entropy of the logits `h · tableᵀ` (`h`: `(N, D)`,
/// `table`: `(C, D)`) against `targets`, without the `N × C` logits matrix.
///
/// The logits are made a chunk of rows at a time from detached copies of
/// `h` and `table`; each chunk is turned in place into its gradient
/// `(softmax(z_r) − e_{t_r}) / N` and multiplied straight back into
/// `∂ℓ/∂h` (`G · table`) and `∂ℓ/∂table` (`Gᵀ · h`). Returned with the
/// loss is a surrogate scalar `Σ h ⊙ ∂ℓ/∂h + Σ table ⊙ ∂ℓ/∂table` whose
/// gradient in `h` and `table` is exactly the loss's, so the rest of the
/// model backpropagates through it as usual. On Amazon Beauty a batch's
/// logits are 2,048 × 12,101 floats (~100 MB); chunked, nothing that size
/// is allocated, cleared or walked by the autodiff graph.
pub fn chunked_mean_loss(
    h: &Tensor,
    table: &Tensor,
    targets: &[u32],
) -> candle_core::Result<(Tensor, f64)> {
    let (n, d) = h.dims2()?;
    let (c, d2) = table.dims2()?;
    if d != d2 {
        candle_core::bail!("softmax cross-entropy: hidden size {d} against a table of {d2}")
    }
    if targets.len() != n {
        candle_core::bail!(
            "softmax cross-entropy: {} targets for {n} rows",
            targets.len()
        )
    }
    if let Some(&bad) = targets.iter().find(|&&x| x as usize >= c) {
        candle_core::bail!("softmax cross-entropy: target {bad} out of {c} classes")
    }
    if n == 0 {
        candle_core::bail!("softmax cross-entropy: no rows")
    }
    let dev = h.device();
    let hd = h.detach().contiguous()?;
    let td = table.detach().contiguous()?;
    let tdt = td.t()?;
    let scale = 1.0 / n as f32;
    let rows = chunk_rows(c);
    let mut grad_h = Vec::with_capacity(n.div_ceil(rows));
    let mut grad_t: Option<Tensor> = None;
    let mut loss = 0f64;
    let mut start = 0;
    while start < n {
        let len = rows.min(n - start);
        let hc = hd.narrow(0, start, len)?;
        let mut z = hc.matmul(&tdt)?.flatten_all()?.to_vec1::<f32>()?;
        let t = targets.get(start..start + len).unwrap_or(&[]);
        let part: f64 = z
            .par_chunks_mut(c)
            .zip(t.par_iter())
            .map(|(row, &ti)| {
                let ti = ti as usize;
                let zt = row.get(ti).copied().unwrap_or(0.0);
                let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                for x in row.iter_mut() {
                    *x = (*x - m).exp();
                    sum += *x;
                }
                let k = scale / sum;
                for x in row.iter_mut() {
                    *x *= k;
                }
                if let Some(x) = row.get_mut(ti) {
                    *x -= scale;
                }
                f64::from(m + sum.ln() - zt)
            })
            .sum();
        loss += part;
        let g = Tensor::from_vec(z, (len, c), dev)?;
        grad_h.push(g.matmul(&td)?);
        let gt = g.t()?.matmul(&hc)?;
        grad_t = Some(match grad_t {
            None => gt,
            Some(acc) => (acc + gt)?,
        });
        start += len;
    }
    let grad_h = Tensor::cat(&grad_h, 0)?;
    let Some(grad_t) = grad_t else {
        candle_core::bail!("softmax cross-entropy: no rows")
    };
    let surrogate = ((h * grad_h)?.sum_all()? + (table * grad_t)?.sum_all()?)?;
    Ok((surrogate, loss / n as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// The chunked loss's value and its gradients in `h` and the table
    /// equal candle's composed `cross_entropy(h · tableᵀ)`, over more rows
    /// than one chunk.
    #[test]
    fn the_chunked_loss_matches_candle_composed() {
        let dev = Device::Cpu;
        let (n, c, d) = (1500, 37, 5);
        assert!(n > chunk_rows(c), "the test must span several chunks");
        let mut r = crate::rng::stream(6, 6);
        let hv = crate::rng::normal(&mut r, n * d, 1.0);
        let tv = crate::rng::normal(&mut r, c * d, 1.0);
        let t: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 3) % c as u32).collect();
        let (h1, t1) = (
            Var::from_vec(hv.clone(), (n, d), &dev).unwrap(),
            Var::from_vec(tv.clone(), (c, d), &dev).unwrap(),
        );
        let (h2, t2) = (
            Var::from_vec(hv, (n, d), &dev).unwrap(),
            Var::from_vec(tv, (c, d), &dev).unwrap(),
        );
        let (sur, loss) = chunked_mean_loss(h1.as_tensor(), t1.as_tensor(), &t).unwrap();
        let logits = h2.as_tensor().matmul(&t2.as_tensor().t().unwrap()).unwrap();
        let tt = Tensor::new(t.as_slice(), &dev).unwrap();
        let composed = candle_nn::loss::cross_entropy(&logits, &tt).unwrap();
        let want = f64::from(composed.to_scalar::<f32>().unwrap());
        assert!((loss - want).abs() < 1e-4, "{loss} vs {want}");
        let (g1, g2) = (sur.backward().unwrap(), composed.backward().unwrap());
        for (a, b) in [(&h1, &h2), (&t1, &t2)] {
            let x = g1.get(a.as_tensor()).unwrap().flatten_all().unwrap();
            let y = g2.get(b.as_tensor()).unwrap().flatten_all().unwrap();
            for (x, y) in x
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .zip(y.to_vec1::<f32>().unwrap())
            {
                assert!((x - y).abs() < 1e-6, "{x} vs {y}");
            }
        }
    }

    #[test]
    fn a_target_out_of_range_is_an_error() {
        let dev = Device::Cpu;
        let h = Tensor::zeros((2, 3), candle_core::DType::F32, &dev).unwrap();
        let table = Tensor::zeros((4, 3), candle_core::DType::F32, &dev).unwrap();
        assert!(chunked_mean_loss(&h, &table, &[0, 4]).is_err());
        assert!(chunked_mean_loss(&h, &table, &[0]).is_err());
        assert!(chunked_mean_loss(&h, &table, &[0, 3]).is_ok());
    }
}
