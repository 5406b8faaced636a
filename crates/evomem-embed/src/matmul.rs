//! Row-major `f32` matrix products for the encoder, straight through gemm.
//!
//! The encoder needs exactly one kernel: `C = A · B` on contiguous row-major
//! `f32` matrices (plus a batched form for attention). gemm is the library
//! that candle's CPU matmul calls; calling it directly keeps the same kernels
//! (AVX2/FMA, AVX-512 when the CPU has it, chosen at run time) while the
//! binary no longer compiles candle-core, which was the longest single unit on
//! the release build's critical path (issue 16, item 5).
//!
//! gemm's entry point takes raw pointers and strides, so it is `unsafe`. This
//! module is the one place that calls it: every call checks the slice lengths
//! against the shapes first, and the strides describe exactly those
//! contiguous row-major slices, so gemm never reads or writes outside them.

use gemm::Parallelism;

/// The shapes of a product did not match its buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShapeMismatch(pub String);

impl std::fmt::Display for ShapeMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parallelism for the calling thread: the current rayon pool's width
/// (the embedder installs its own pool, so this is the requested thread
/// count, never more).
fn parallelism() -> Parallelism {
    match rayon::current_num_threads() {
        0 | 1 => Parallelism::None,
        n => Parallelism::Rayon(n),
    }
}

/// `A · B` for row-major `A` (`m × k`) and `B` (`k × n`); the result is
/// `m × n`, row-major.
pub(crate) fn matmul(
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<f32>, ShapeMismatch> {
    batched_matmul(a, b, 1, m, k, n)
}

/// `batch` independent products `A_i · B_i`, each `A_i` `m × k` and `B_i`
/// `k × n`, stored one after the other; the result holds the `batch`
/// `m × n` products one after the other.
pub(crate) fn batched_matmul(
    a: &[f32],
    b: &[f32],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<f32>, ShapeMismatch> {
    let (a_len, b_len, c_len) = (
        checked(&[batch, m, k])?,
        checked(&[batch, k, n])?,
        checked(&[batch, m, n])?,
    );
    if a.len() != a_len || b.len() != b_len {
        return Err(ShapeMismatch(format!(
            "matmul of {batch} × [{m}×{k}] by [{k}×{n}] got buffers of {} and {} values (expected {a_len} and {b_len})",
            a.len(),
            b.len()
        )));
    }
    let mut c = vec![0f32; c_len];
    if c_len == 0 || k == 0 {
        return Ok(c);
    }
    let par = parallelism();
    let (k_i, n_i) = (to_isize(k)?, to_isize(n)?);
    for ((a_i, b_i), c_i) in a
        .chunks_exact(m * k)
        .zip(b.chunks_exact(k * n))
        .zip(c.chunks_exact_mut(m * n))
    {
        // SAFETY: `a_i` holds m·k, `b_i` k·n and `c_i` m·n values (checked
        // above; `chunks_exact` yields exactly those lengths). With row
        // strides k, n, n and column stride 1, gemm touches a_i[r·k + t],
        // b_i[t·n + j] and c_i[r·n + j] for r < m, t < k, j < n: all in
        // bounds. `c_i` is borrowed mutably and aliases neither input.
        // `read_dst = false` with beta = 1 computes C = A·B without reading
        // C.
        #[allow(unsafe_code)]
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c_i.as_mut_ptr(),
                1,
                n_i,
                false,
                a_i.as_ptr(),
                1,
                k_i,
                b_i.as_ptr(),
                1,
                n_i,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                par,
            );
        }
    }
    Ok(c)
}

fn checked(dims: &[usize]) -> Result<usize, ShapeMismatch> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| ShapeMismatch(format!("shape {dims:?} overflows")))
}

fn to_isize(x: usize) -> Result<isize, ShapeMismatch> {
    isize::try_from(x).map_err(|_| ShapeMismatch(format!("stride {x} overflows isize")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    /// The textbook triple loop, in f64.
    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for r in 0..m {
            for j in 0..n {
                c[r * n + j] = (0..k)
                    .map(|t| f64::from(a[r * k + t]) * f64::from(b[t * n + j]))
                    .sum();
            }
        }
        c
    }

    fn fill(len: usize, seed: u32) -> Vec<f32> {
        (0..len as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    #[test]
    fn products_match_the_triple_loop() {
        // Odd sizes around the kernels' block edges, and the encoder's own.
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 7),
            (17, 33, 9),
            (64, 384, 1152),
            (5, 1536, 384),
        ] {
            let (a, b) = (fill(m * k, 7), fill(k * n, 11));
            let want = naive(&a, &b, m, k, n);
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let got = pool.install(|| matmul(&a, &b, m, k, n)).unwrap();
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (f64::from(*g) - w).abs())
                    .fold(0f64, f64::max);
                assert!(worst < 1e-3, "{m}x{k}x{n} on {threads} threads: {worst}");
            }
        }
    }

    #[test]
    fn batches_are_independent_products() {
        let (batch, m, k, n) = (3, 4, 6, 5);
        let (a, b) = (fill(batch * m * k, 3), fill(batch * k * n, 5));
        let got = batched_matmul(&a, &b, batch, m, k, n).unwrap();
        for i in 0..batch {
            let want = naive(&a[i * m * k..][..m * k], &b[i * k * n..][..k * n], m, k, n);
            for (g, w) in got[i * m * n..][..m * n].iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn wrong_buffers_are_refused() {
        let a = vec![0f32; 6];
        let b = vec![0f32; 5];
        let err = matmul(&a, &b, 2, 3, 2).err();
        assert!(err.is_some_and(|e| e.0.contains("expected 6 and 6")));
        assert_eq!(matmul(&[], &[0.0; 12], 0, 3, 4).ok(), Some(Vec::new()));
        assert_eq!(matmul(&[], &[], 2, 0, 2).ok(), Some(vec![0.0; 4]));
    }
}
