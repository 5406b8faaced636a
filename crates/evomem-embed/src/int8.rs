//! 8-bit integer Linear layers for the int8 MiniLM (issue 41).
//!
//! [`Int8Linear`] holds a Linear weight quantized once, at load, per output
//! channel (symmetric: `scale = max|w| / 127`, `q = round(w / scale)`), in
//! the file's `[out, in]` row-major layout. At run time each input row is
//! quantized the same way with its own scale, the `i8 · i8` products are
//! summed in `i32`, and each sum is turned back into `f32` as
//! `acc · row_scale · channel_scale`. The bias is added by the caller's
//! fused passes, as for the f32 Linear.
//!
//! **Exact sums, so the same bits everywhere.** A product is at most
//! `127² = 16 129` in magnitude, so an `i32` holds sums over more than
//! 130 000 inputs without overflow (the encoder's widest is 1536): integer
//! addition is then exact and associative, and every kernel, split and
//! summation order gives the same `i32`. A row's quantization depends on
//! that row alone. Hence a text's vector is the same bits alone or in any
//! batch, inline or on the pool, and with the AVX2 kernel or without it
//! (tested below against the scalar kernel).
//!
//! **Kernels.** [`dot_tile_scalar`] is the portable reference. On x86-64
//! CPUs with AVX2 (detected at run time), [`avx2`] widens 16 `i8` at a time
//! to `i16` and multiplies-and-adds pairs into `i32` lanes
//! (`vpmaddwd`): exact, no saturation, 16 products per instruction against
//! 8 for an f32 FMA. On CPUs with AVX-512 VNNI, [`vnni`] multiplies 64
//! bytes at a time with `vpdpbusd` (unsigned × signed bytes, 4 products
//! summed into each `i32` lane), over tiles of up to 4 token rows × 4
//! channels so that each loaded chunk serves several products. `vpdpbusd`
//! wants one operand unsigned: the row is shifted to `x + 128` (1..=255)
//! and `128 · Σ w` (per channel, computed at load) is subtracted again,
//! which is exact in `i32`. AVX-VNNI (the 256-bit form) is not used.
//!
//! **Unsafe.** SIMD intrinsics are `unsafe`; this module and `matmul.rs`
//! are the workspace's only exceptions to `unsafe_code = "deny"`. Every
//! `unsafe` block here is preceded by checks that the CPU has AVX2 and that
//! every slice is long enough for each load, which uses unaligned loads.

use crate::matmul::{Exec, ShapeMismatch};
use rayon::prelude::*;

/// Output channels computed together by one kernel call: each input chunk
/// is widened once and used for all of them.
const TILE_CHANNELS: usize = 4;
/// Token rows per parallel task.
const ROWS_PER_TASK: usize = 16;
/// Bytes per `vpdpbusd` step of the VNNI kernel.
const VNNI_STEP: usize = 64;

/// Symmetric 8-bit quantization of `x` into `q`: returns the scale `s` with
/// `x ≈ s · q`, `s = max|x| / 127` (0 for an all-zero row, whose `q` is 0).
pub(crate) fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 || !max.is_finite() {
        q.iter_mut().for_each(|v| *v = 0);
        return if max.is_finite() { 0.0 } else { f32::NAN };
    }
    let scale = max / 127.0;
    let inv = 127.0 / max;
    for (o, &v) in q.iter_mut().zip(x) {
        *o = (v * inv).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// A Linear weight quantized per output channel (see the module docs).
pub(crate) struct Int8Linear {
    /// `out × inp`, row-major: channel `o` is `w[o·inp ..][..inp]`.
    w: Vec<i8>,
    /// One scale per output channel.
    scales: Vec<f32>,
    /// Per channel, the sum of its first `inp - inp % VNNI_STEP` weights:
    /// the VNNI kernel's correction for its unsigned rows.
    wsum: Vec<i32>,
    out: usize,
    inp: usize,
}

impl Int8Linear {
    /// Quantize `w` (`out × inp`, row-major, the file layout).
    pub(crate) fn new(w: &[f32], out: usize, inp: usize) -> Result<Self, ShapeMismatch> {
        if out == 0 || inp == 0 || out.checked_mul(inp) != Some(w.len()) {
            return Err(ShapeMismatch(format!(
                "int8 weight of [{out}×{inp}] got {} values",
                w.len()
            )));
        }
        let mut q = vec![0i8; w.len()];
        let scales = w
            .chunks_exact(inp)
            .zip(q.chunks_exact_mut(inp))
            .map(|(row, q)| quantize_row(row, q))
            .collect();
        let full = inp - inp % VNNI_STEP;
        let wsum = q
            .chunks_exact(inp)
            .map(|c| c[..full].iter().map(|&v| i32::from(v)).sum())
            .collect();
        Ok(Self {
            w: q,
            scales,
            wsum,
            out,
            inp,
        })
    }

    /// `X · Wᵀ` (no bias) for row-major `X` (`m × inp`): `m × out`,
    /// row-major, through [`best_kernel`].
    pub(crate) fn apply(&self, x: &[f32], m: usize, exec: Exec) -> Result<Vec<f32>, ShapeMismatch> {
        self.apply_with(x, m, exec, best_kernel())
    }

    /// [`Int8Linear::apply`] with a chosen kernel.
    pub(crate) fn apply_with(
        &self,
        x: &[f32],
        m: usize,
        exec: Exec,
        kernel: Kernel,
    ) -> Result<Vec<f32>, ShapeMismatch> {
        let (k, n) = (self.inp, self.out);
        if m.checked_mul(k) != Some(x.len()) {
            return Err(ShapeMismatch(format!(
                "int8 Linear of width {k} got {} values for {m} rows",
                x.len()
            )));
        }
        let mut y = vec![0f32; m * n];
        if m == 0 {
            return Ok(y);
        }
        y.par_chunks_mut(ROWS_PER_TASK * n)
            .zip(x.par_chunks(ROWS_PER_TASK * k))
            .with_min_len(exec.min_len())
            .try_for_each(|(y_block, x_block)| -> Result<(), ShapeMismatch> {
                let mut q = vec![0i8; x_block.len()];
                let row_scales: Vec<f32> = x_block
                    .chunks_exact(k)
                    .zip(q.chunks_exact_mut(k))
                    .map(|(x, q)| quantize_row(x, q))
                    .collect();
                let mut acc = vec![0i32; row_scales.len() * n];
                self.sums(kernel, &q, &mut acc)?;
                for ((y_row, acc_row), &sx) in y_block
                    .chunks_exact_mut(n)
                    .zip(acc.chunks_exact(n))
                    .zip(&row_scales)
                {
                    for ((y, &a), &sw) in y_row.iter_mut().zip(acc_row).zip(&self.scales) {
                        *y = a as f32 * (sx * sw);
                    }
                }
                Ok(())
            })?;
        Ok(y)
    }
}

impl Int8Linear {
    /// `acc[r·out + c] = Σ_t q[r·inp + t] · w[c·inp + t]` for the rows of
    /// `q` (quantized, `rows × inp`): exact, so every kernel gives the same
    /// values.
    fn sums(&self, kernel: Kernel, q: &[i8], acc: &mut [i32]) -> Result<(), ShapeMismatch> {
        let (k, n) = (self.inp, self.out);
        if kernel == Kernel::Avx512Vnni {
            #[cfg(target_arch = "x86_64")]
            if vnni::block(q, k, &self.w, &self.wsum, acc) {
                return Ok(());
            }
        }
        for (qx, acc_row) in q.chunks_exact(k).zip(acc.chunks_exact_mut(n)) {
            for (w_tile, acc) in self
                .w
                .chunks(TILE_CHANNELS * k)
                .zip(acc_row.chunks_mut(TILE_CHANNELS))
            {
                // `dot_tile` runs AVX2 for a VNNI request (no VNNI here).
                dot_tile(kernel, qx, w_tile, acc)?;
            }
        }
        Ok(())
    }
}

/// Which integer dot-product kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Portable Rust, one product at a time.
    Scalar,
    /// x86-64 AVX2: 16 `i8` widened to `i16`, `vpmaddwd` into `i32`.
    Avx2,
    /// x86-64 AVX-512 VNNI: `vpdpbusd` on 64 bytes, tiles of rows ×
    /// channels (AVX2 where the CPU lacks it).
    Avx512Vnni,
}

impl Kernel {
    /// The kernel's name, as benchmarks print it.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512Vnni => "avx512-vnni",
        }
    }
}

/// The fastest kernel this CPU runs (checked at run time).
pub fn best_kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        if vnni::available() {
            return Kernel::Avx512Vnni;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return Kernel::Avx2;
        }
    }
    Kernel::Scalar
}

/// `acc[c] = Σ_t x[t] · w[c·k + t]` for the `acc.len()` channels of a tile,
/// `k = x.len()`; refuses a `w` of another length.
fn dot_tile(kernel: Kernel, x: &[i8], w: &[i8], acc: &mut [i32]) -> Result<(), ShapeMismatch> {
    if acc.len().checked_mul(x.len()) != Some(w.len()) {
        return Err(ShapeMismatch(format!(
            "int8 tile of {} channels × {} got {} weights",
            acc.len(),
            x.len(),
            w.len()
        )));
    }
    match kernel {
        Kernel::Scalar => dot_tile_scalar(x, w, acc),
        Kernel::Avx2 | Kernel::Avx512Vnni => {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                avx2::dot_tile(x, w, acc);
                return Ok(());
            }
            dot_tile_scalar(x, w, acc);
        }
    }
    Ok(())
}

/// The reference kernel: plain sums (exact, see the module docs).
fn dot_tile_scalar(x: &[i8], w: &[i8], acc: &mut [i32]) {
    let k = x.len();
    for (c, a) in acc.iter_mut().enumerate() {
        *a = x
            .iter()
            .zip(&w[c * k..][..k])
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum();
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2 {
    //! The AVX2 tile kernel. Sound because [`dot_tile`] (the only entry)
    //! checks AVX2 is present — its caller detected it at run time and it
    //! checks again — and every load reads 16 bytes at an offset it has
    //! checked against the slice length.

    use std::arch::x86_64::*;

    /// Chunk of `i8` widened per step.
    const STEP: usize = 16;

    /// `acc[c] = Σ_t x[t] · w[c·k + t]`, `k = x.len()`; the caller checked
    /// `w.len() == acc.len() · k`. Gives the scalar kernel's values.
    pub(super) fn dot_tile(x: &[i8], w: &[i8], acc: &mut [i32]) {
        let k = x.len();
        if !std::arch::is_x86_feature_detected!("avx2") || w.len() != acc.len() * k {
            super::dot_tile_scalar(x, w, acc);
            return;
        }
        let full = k - k % STEP;
        let mut c = 0;
        while c + 4 <= acc.len() {
            let w4 = &w[c * k..(c + 4) * k];
            // SAFETY: AVX2 was detected above; `w4` holds 4·k values and
            // `full ≤ k`, so the kernel's loads stay inside `x` and `w4`.
            let sums = unsafe { tile4(x, w4, full) };
            for (j, s) in sums.into_iter().enumerate() {
                acc[c + j] = s + tail(x, &w4[j * k..][..k], full);
            }
            c += 4;
        }
        while c < acc.len() {
            let w1 = &w[c * k..(c + 1) * k];
            // SAFETY: as above, with one channel of k values.
            let s = unsafe { tile1(x, w1, full) };
            acc[c] = s + tail(x, w1, full);
            c += 1;
        }
    }

    /// Products past the last full chunk, in plain Rust.
    fn tail(x: &[i8], w: &[i8], from: usize) -> i32 {
        x[from..]
            .iter()
            .zip(&w[from..])
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum()
    }

    /// 16 `i8` at `p` widened to 16 `i16`.
    ///
    /// # Safety
    /// AVX2 present; 16 readable bytes at `p`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn widen(p: *const i8) -> __m256i {
        _mm256_cvtepi8_epi16(_mm_loadu_si128(p.cast()))
    }

    /// Sum of the 8 `i32` lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn hsum(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }

    /// The first `full` (a multiple of 16, `≤ x.len()`) products of `x`
    /// with each of the 4 channels of `w` (`4 · x.len()` values).
    ///
    /// # Safety
    /// AVX2 present; `full ≤ x.len()`, `full % 16 == 0`, `w.len() ≥ 4·x.len()`.
    #[target_feature(enable = "avx2")]
    unsafe fn tile4(x: &[i8], w: &[i8], full: usize) -> [i32; 4] {
        let k = x.len();
        let (xp, wp) = (x.as_ptr(), w.as_ptr());
        let mut a = [_mm256_setzero_si256(); 4];
        let mut t = 0;
        while t < full {
            // SAFETY: t + 16 ≤ full ≤ k, and j·k + t + 16 ≤ 4·k ≤ w.len().
            unsafe {
                let xv = widen(xp.add(t));
                for (j, a) in a.iter_mut().enumerate() {
                    let wv = widen(wp.add(j * k + t));
                    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(xv, wv));
                }
            }
            t += STEP;
        }
        [hsum(a[0]), hsum(a[1]), hsum(a[2]), hsum(a[3])]
    }

    /// One channel: the first `full` products of `x` and `w`.
    ///
    /// # Safety
    /// AVX2 present; `full ≤ x.len()`, `full % 16 == 0`, `w.len() ≥ x.len()`.
    #[target_feature(enable = "avx2")]
    unsafe fn tile1(x: &[i8], w: &[i8], full: usize) -> i32 {
        let mut a = _mm256_setzero_si256();
        let mut t = 0;
        while t < full {
            // SAFETY: t + 16 ≤ full ≤ x.len() ≤ w.len().
            unsafe {
                let v = _mm256_madd_epi16(widen(x.as_ptr().add(t)), widen(w.as_ptr().add(t)));
                a = _mm256_add_epi32(a, v);
            }
            t += STEP;
        }
        hsum(a)
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod vnni {
    //! The AVX-512 VNNI block kernel. Sound because [`block`] (the only
    //! entry) checks at run time that the CPU has AVX-512F and VNNI and
    //! that every slice has the length the loads assume; every load reads
    //! 64 bytes at an offset below `full ≤ k` in a row of `k` bytes.

    use super::VNNI_STEP as STEP;
    use std::arch::x86_64::*;

    /// Whether this CPU runs the kernel.
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }

    /// `acc[r·n + c] = Σ_t q[r·k + t] · w[c·k + t]` for all rows of `q`
    /// and the `n = wsum.len()` channels of `w`; `wsum` as
    /// [`super::Int8Linear`] keeps it. Returns `false`, touching nothing,
    /// when the CPU lacks VNNI or the shapes disagree (the caller then
    /// runs another kernel).
    pub(super) fn block(q: &[i8], k: usize, w: &[i8], wsum: &[i32], acc: &mut [i32]) -> bool {
        let n = wsum.len();
        if k == 0 || !q.len().is_multiple_of(k) || !available() {
            return false;
        }
        let rows = q.len() / k;
        if w.len() != n * k || acc.len() != rows * n {
            return false;
        }
        let full = k - k % STEP;
        // The rows as unsigned bytes, x + 128 (flipping the sign bit).
        let u: Vec<u8> = q.iter().map(|&v| (v as u8) ^ 0x80).collect();
        let mut r = 0;
        while r < rows {
            let rr = (rows - r).min(4);
            let span = Span {
                q,
                u: &u,
                k,
                full,
                r,
            };
            let mut c = 0;
            while c + 4 <= n {
                match rr {
                    4 => span.put::<4>(w, c, wsum, acc),
                    3 => span.put::<3>(w, c, wsum, acc),
                    2 => span.put::<2>(w, c, wsum, acc),
                    _ => span.put::<1>(w, c, wsum, acc),
                }
                c += 4;
            }
            for c in c..n {
                for i in 0..rr {
                    acc[(r + i) * n + c] = exact(&q[(r + i) * k..][..k], &w[c * k..][..k]);
                }
            }
            r += rr;
        }
        true
    }

    /// Plain exact sum of products.
    fn exact(x: &[i8], w: &[i8]) -> i32 {
        x.iter()
            .zip(w)
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum()
    }

    /// Up to 4 rows from `r` of a block (signed and shifted).
    struct Span<'a> {
        q: &'a [i8],
        u: &'a [u8],
        k: usize,
        full: usize,
        r: usize,
    }

    impl Span<'_> {
        /// [`Span::tile`] corrected for the shift, into `acc` (`rows × n`,
        /// `n = wsum.len()`).
        fn put<const R: usize>(&self, w: &[i8], c: usize, wsum: &[i32], acc: &mut [i32]) {
            let n = wsum.len();
            for (i, row) in self.tile::<R>(w, c).iter().enumerate() {
                for (j, &s) in row.iter().enumerate() {
                    acc[(self.r + i) * n + c + j] = s - 128 * wsum[c + j];
                }
            }
        }

        /// Rows `r..r+R` × channels `c..c+4`: the shifted sums over the
        /// first `full` bytes plus the exact signed sums past them.
        fn tile<const R: usize>(&self, w: &[i8], c: usize) -> [[i32; 4]; R] {
            let (k, full) = (self.k, self.full);
            let x = &self.u[self.r * k..][..R * k];
            let w4 = &w[c * k..][..4 * k];
            // SAFETY: `available()` was checked by `block`, the only
            // caller; `x` holds R·k bytes and `w4` 4·k, and every load
            // reads 64 bytes at `i·k + t` with `t + 64 ≤ full ≤ k`.
            let mut out = unsafe { tile_sums::<R>(x, w4, k, full) };
            if full < k {
                for (i, row) in out.iter_mut().enumerate() {
                    let xq = &self.q[(self.r + i) * k..][..k];
                    for (j, s) in row.iter_mut().enumerate() {
                        *s += exact(&xq[full..], &w4[j * k + full..][..k - full]);
                    }
                }
            }
            out
        }
    }

    /// `Σ_{t < full} x[i·k + t] · w[j·k + t]` for `i < R`, `j < 4`, with
    /// `x` unsigned.
    ///
    /// # Safety
    /// AVX-512F and VNNI present; `x.len() ≥ R·k`, `w.len() ≥ 4·k`,
    /// `full ≤ k`, `full % 64 == 0`.
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn tile_sums<const R: usize>(
        x: &[u8],
        w: &[i8],
        k: usize,
        full: usize,
    ) -> [[i32; 4]; R] {
        let (xp, wp) = (x.as_ptr(), w.as_ptr());
        let mut acc = [[_mm512_setzero_si512(); 4]; R];
        let mut t = 0;
        while t < full {
            let mut wv = [_mm512_setzero_si512(); 4];
            for (j, v) in wv.iter_mut().enumerate() {
                // SAFETY: j·k + t + 64 ≤ 3·k + full ≤ 4·k ≤ w.len().
                *v = unsafe { _mm512_loadu_si512(wp.add(j * k + t).cast()) };
            }
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: i·k + t + 64 ≤ (R−1)·k + full ≤ R·k ≤ x.len().
                let xv = unsafe { _mm512_loadu_si512(xp.add(i * k + t).cast()) };
                for (a, &wv) in a.iter_mut().zip(&wv) {
                    *a = _mm512_dpbusd_epi32(*a, xv, wv);
                }
            }
            t += STEP;
        }
        let mut out = [[0i32; 4]; R];
        for (o, a) in out.iter_mut().zip(&acc) {
            for (o, &a) in o.iter_mut().zip(a) {
                *o = _mm512_reduce_add_epi32(a);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random(len: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
        (0..len).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
    }

    /// `X · Wᵀ` in f64.
    fn reference(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut y = vec![0f64; m * n];
        for r in 0..m {
            for o in 0..n {
                y[r * n + o] = (0..k)
                    .map(|t| f64::from(x[r * k + t]) * f64::from(w[o * k + t]))
                    .sum();
            }
        }
        y
    }

    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (3, 5, 7),
        (17, 33, 9),
        (40, 384, 1152),
        (5, 1536, 384),
        (21, 48, 6),
    ];

    #[test]
    fn int8_products_are_within_the_quantization_bound_of_f32() {
        // Each input is off by at most half a step (s/2) of its row's or
        // channel's scale, so |x·w − x̂·ŵ| ≤ Σ_t (|x_t|·sw/2 + |w_t|·sx/2 +
        // sx·sw/4): the bound checked per element.
        let mut rng = ChaCha8Rng::seed_from_u64(41);
        for &(m, k, n) in SHAPES {
            let (x, w) = (random(m * k, &mut rng), random(n * k, &mut rng));
            let want = reference(&x, &w, m, k, n);
            let lin = Int8Linear::new(&w, n, k).unwrap();
            let got = lin.apply(&x, m, Exec::Inline).unwrap();
            for r in 0..m {
                let xr = &x[r * k..][..k];
                let sx = f64::from(xr.iter().fold(0f32, |a, v| a.max(v.abs()))) / 127.0;
                for o in 0..n {
                    let wo = &w[o * k..][..k];
                    let sw = f64::from(lin.scales[o]);
                    let bound: f64 = xr
                        .iter()
                        .zip(wo)
                        .map(|(&a, &b)| {
                            f64::from(a.abs()) * sw / 2.0
                                + f64::from(b.abs()) * sx / 2.0
                                + sx * sw / 4.0
                        })
                        .sum::<f64>()
                        + 1e-5;
                    let e = (f64::from(got[r * n + o]) - want[r * n + o]).abs();
                    assert!(e <= bound, "{m}x{k}x{n} [{r},{o}]: {e} > {bound}");
                }
            }
        }
    }

    #[test]
    fn avx2_sums_are_the_scalar_sums() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for k in [1, 15, 16, 17, 31, 48, 384, 1536, 1539] {
            for channels in [1, 3, 4, 5, 8] {
                // Extremes included: ±127 everywhere is the largest sum.
                let x: Vec<i8> = (0..k).map(|_| rng.gen_range(-127..=127)).collect();
                let w: Vec<i8> = (0..k * channels)
                    .map(|_| rng.gen_range(-127..=127))
                    .collect();
                let mut want = vec![0; channels];
                dot_tile_scalar(&x, &w, &mut want);
                let mut got = vec![0; channels];
                dot_tile(Kernel::Avx2, &x, &w, &mut got).unwrap();
                assert_eq!(got, want, "k {k}, {channels} channels");
                let big = vec![127i8; k];
                let neg = vec![-127i8; k * channels];
                dot_tile(Kernel::Avx2, &big, &neg, &mut got).unwrap();
                assert!(got.iter().all(|&s| s == -16129 * k as i32));
            }
        }
        eprintln!("best kernel here: {}", best_kernel().name());
    }

    #[test]
    fn vnni_sums_are_the_scalar_sums() {
        let kernel = best_kernel();
        if kernel != Kernel::Avx512Vnni {
            eprintln!(
                "NOTICE: no AVX-512 VNNI on this CPU ({}): the VNNI kernel falls back to AVX2 here",
                kernel.name()
            );
        }
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for k in [1, 63, 64, 65, 100, 384, 1536, 1539] {
            for (rows, n) in [(1, 1), (1, 4), (3, 5), (4, 8), (5, 7), (16, 12), (17, 3)] {
                let q: Vec<i8> = (0..rows * k).map(|_| rng.gen_range(-127..=127)).collect();
                let w: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let lin = Int8Linear::new(&w, n, k).unwrap();
                let mut want = vec![0; rows * n];
                lin.sums(Kernel::Scalar, &q, &mut want).unwrap();
                let mut got = vec![0; rows * n];
                lin.sums(Kernel::Avx512Vnni, &q, &mut got).unwrap();
                assert_eq!(got, want, "k {k}, {rows} rows, {n} channels");
            }
            // The extremes: -127 rows shift to 1, +127 to 255.
            for v in [-127i8, 127] {
                let lin = Int8Linear::new(&vec![-1.0; 5 * k], 5, k).unwrap();
                let mut got = vec![0; 6 * 5];
                lin.sums(Kernel::Avx512Vnni, &vec![v; 6 * k], &mut got)
                    .unwrap();
                assert!(
                    got.iter().all(|&s| s == -i32::from(v) * 127 * k as i32),
                    "k {k}, {v}"
                );
            }
        }
    }

    #[test]
    fn kernels_splits_and_batches_give_the_same_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (m, k, n) = (70, 100, 23);
        let (x, w) = (random(m * k, &mut rng), random(n * k, &mut rng));
        let lin = Int8Linear::new(&w, n, k).unwrap();
        let scalar = lin.apply_with(&x, m, Exec::Inline, Kernel::Scalar).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for kernel in [Kernel::Avx2, Kernel::Avx512Vnni] {
            let pooled = pool
                .install(|| lin.apply_with(&x, m, Exec::Pool, kernel))
                .unwrap();
            assert_eq!(pooled, scalar, "{}", kernel.name());
        }
        // A row alone gives what it gives among others.
        let r = 37;
        let alone = lin.apply(&x[r * k..][..k], 1, Exec::Inline).unwrap();
        assert_eq!(alone, scalar[r * n..][..n]);
    }

    #[test]
    fn zero_rows_and_wrong_shapes() {
        let mut q = [5i8; 3];
        assert_eq!(quantize_row(&[0.0; 3], &mut q), 0.0);
        assert_eq!(q, [0; 3]);
        assert!(Int8Linear::new(&[0.0; 5], 2, 3).is_err());
        assert!(Int8Linear::new(&[], 0, 3).is_err());
        let lin = Int8Linear::new(&[1.0; 6], 2, 3).unwrap();
        assert!(lin.apply(&[0.0; 5], 2, Exec::Inline).is_err());
        assert_eq!(lin.apply(&[0.0; 6], 2, Exec::Inline).unwrap(), vec![0.0; 4]);
        let mut acc = [0; 2];
        assert!(dot_tile(Kernel::Scalar, &[1; 3], &[1; 5], &mut acc).is_err());
    }
}
