//! 8-bit integer Linear layers for the int8 MiniLM (issue 41).
//!
//! [`Int8Linear`] holds a Linear weight quantized once, at load, per output
//! channel and per group of [`GROUP`] inputs (symmetric: `scale = max|w| /
//! 127`, `q = round(w / scale)`). At run time each input row is quantized
//! the same way, with one scale per **group of [`GROUP`] inputs** instead of
//! one per row: a few outlier
//! channels (BERT's LayerNorm outputs have some; Bondarenko et al., 2021,
//! *Understanding and Overcoming the Challenges of Efficient Transformer
//! Quantization*) then cost only their own group its resolution, not the
//! whole row. This is the fine-grained ("group-wise" or "vector-wise")
//! activation scaling of Dettmers et al. (2022, *LLM.int8()*, §3.1) and
//! Shen et al. (2020, *Q-BERT*, group-wise quantization), along the input
//! dimension so that the integer sums stay exact: the `i8 · i8` products of
//! one group are summed in `i32`, and the group sums are combined in `f32`:
//!
//! ```text
//! y[r, c] = Σ_g (P[r, g, c] · sw[g, c]) · sx[r, g],   P[r, g, c] = Σ_{t ∈ g} qx[r, t] · qw[c, t]
//! ```
//!
//! with the `f32` sum taken in group order, two multiplies and one add per
//! group (never fused), in every kernel. Scaling the weights per group too
//! costs one multiply per group and raised recall@10 against f32 from 0.948
//! to 0.957 in `bench embed` (docs/notes/int8-rounds.md). The bias is added
//! by the caller's fused passes, as for the f32 Linear.
//!
//! **Exact group sums, so the same bits everywhere.** A product is at most
//! `127² = 16 129` in magnitude, so an `i32` holds sums over more than
//! 130 000 inputs: every kernel, split and summation order gives the same
//! `P`, the `f32` steps after it are the same operations in the same order,
//! and a row's quantization depends on that row alone. Hence a text's vector
//! is the same bits alone or in any batch, inline or on the pool, and with
//! any kernel (tested below against the scalar kernel).
//!
//! **Layout.** The weight is stored for the VNNI kernel: channels in blocks
//! of [`LANES`] (one `i32` lane each of a 512-bit register), inputs in
//! quads of 4 bytes, each quad of a block 64 contiguous bytes (lane `l`
//! holds channel `16b + l`'s 4 weights). Inputs are padded to a multiple of
//! 4 and channels to a multiple of 16, with zero weights.
//!
//! **Kernels.** [`sums_scalar`] is the portable reference. On CPUs with
//! AVX-512 VNNI, [`vnni`] broadcasts 4 bytes of a row and multiplies them
//! with a block's 64 bytes by `vpdpbusd` (unsigned × signed bytes, 4
//! products summed into each `i32` lane), over tiles of up to 4 rows × 3
//! blocks, so each lane accumulates one channel and no horizontal sum is
//! needed: at the end of a group the 16 lanes are the 16 exact group sums,
//! converted, scaled and added in `f32` (the register layout of oneDNN's
//! VNNI GEMMs), and at the end of the row the sums are stored straight
//! into the output (masked past the last channel). `vpdpbusd` wants one
//! operand unsigned: the row is shifted to `x + 128` and each group's
//! accumulators start at `−128 · Σ_{t∈g} w` (per channel, computed at
//! load), which is exact in `i32`. On CPUs with
//! AVX2 only, [`avx2`] widens each quad and 16 weights to `i16` and
//! multiplies-and-adds pairs (`vpmaddwd`, exact), then adds the pairs of a
//! group. AVX-VNNI (the 256-bit form) is not used.
//!
//! **Unsafe.** SIMD intrinsics are `unsafe`; this module and `matmul.rs`
//! are the workspace's only exceptions to `unsafe_code = "deny"`. Every
//! `unsafe` block here is preceded by checks that the CPU has the feature
//! and that every slice is long enough for each load (unaligned loads).

use crate::matmul::{Exec, ShapeMismatch};
use rayon::prelude::*;

/// Inputs per activation scale (a multiple of [`QUAD`]).
pub(crate) const GROUP: usize = 64;
/// Channels per block: the `i32` lanes of a 512-bit register.
const LANES: usize = 16;
/// Input bytes per lane per `vpdpbusd`.
const QUAD: usize = 4;
/// Token rows per parallel task.
const ROWS_PER_TASK: usize = 16;

/// Symmetric 8-bit quantization of `x` into `q`: returns the scale `s` with
/// `x ≈ s · q`, `s = max|x| / 127` (0 for an all-zero slice, whose `q` is
/// 0).
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

/// Rows of activations quantized per group: `q` is `rows × kp` (the
/// padding is 0), `sx` is `rows × groups`.
struct QuantRows {
    q: Vec<i8>,
    sx: Vec<f32>,
}

#[allow(unsafe_code)]
mod lines {
    //! Bytes stored from a 64-byte boundary. The VNNI kernel loads the
    //! packed weights 64 bytes at a time from offsets that are multiples of
    //! 64; a `Vec<i8>` has no alignment promised (the allocator may place
    //! it anywhere), and from an unaligned start every such load would span
    //! two cache lines. Stored from a line boundary, each is one line,
    //! whatever the allocator does.

    /// One cache line.
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Line([i8; 64]);

    /// A byte slice that starts on a 64-byte boundary.
    pub(super) struct Aligned {
        lines: Vec<Line>,
        len: usize,
    }

    impl Aligned {
        /// `len` zero bytes from a line boundary.
        pub(super) fn zeroed(len: usize) -> Self {
            Self {
                lines: vec![Line([0; 64]); len.div_ceil(64)],
                len,
            }
        }
    }

    // SAFETY (both impls): `lines` holds `⌈len / 64⌉` lines of 64
    // initialised `i8`s, contiguous (`repr(C)`, size 64, no padding), so
    // its first `len ≤ 64·lines` bytes are valid `i8`s for the borrow,
    // shared or exclusive as the borrow of `self` is.
    impl std::ops::Deref for Aligned {
        type Target = [i8];
        fn deref(&self) -> &[i8] {
            unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<i8>(), self.len) }
        }
    }

    impl std::ops::DerefMut for Aligned {
        fn deref_mut(&mut self) -> &mut [i8] {
            unsafe {
                std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<i8>(), self.len)
            }
        }
    }
}

/// A Linear weight quantized per output channel (see the module docs).
pub(crate) struct Int8Linear {
    /// The packed weights: `np / 16` blocks × `kp / 4` quads × 16 lanes ×
    /// 4 bytes, from a 64-byte boundary (each quad of a block one cache
    /// line).
    w: lines::Aligned,
    /// One scale per group and channel: `scales[g·np + c]` (0 past `out`).
    scales: Vec<f32>,
    /// `corr[g·np + c] = −128 · Σ_{t ∈ g} w[c, t]`: the VNNI kernel's start
    /// for its unsigned rows.
    corr: Vec<i32>,
    out: usize,
    inp: usize,
    /// `inp` rounded up to a multiple of 4.
    kp: usize,
    /// `out` rounded up to a multiple of 16.
    np: usize,
    /// Inputs per activation scale.
    group: usize,
    /// Activation scales per row: `⌈inp / group⌉`.
    groups: usize,
}

impl Int8Linear {
    /// Quantize `w` (`out × inp`, row-major, the file layout), with one
    /// activation scale per [`GROUP`] inputs.
    pub(crate) fn new(w: &[f32], out: usize, inp: usize) -> Result<Self, ShapeMismatch> {
        Self::with_group(w, out, inp, GROUP)
    }

    /// [`Int8Linear::new`] with `group` inputs per activation scale (a
    /// positive multiple of 4; `≥ inp`: one scale per row).
    pub(crate) fn with_group(
        w: &[f32],
        out: usize,
        inp: usize,
        group: usize,
    ) -> Result<Self, ShapeMismatch> {
        if out == 0 || inp == 0 || out.checked_mul(inp) != Some(w.len()) {
            return Err(ShapeMismatch(format!(
                "int8 weight of [{out}×{inp}] got {} values",
                w.len()
            )));
        }
        if group == 0 || !group.is_multiple_of(QUAD) {
            return Err(ShapeMismatch(format!(
                "int8 group of {group} inputs is not a positive multiple of {QUAD}"
            )));
        }
        let group = group.min(inp.next_multiple_of(QUAD));
        let groups = inp.div_ceil(group);
        let kp = inp.next_multiple_of(QUAD);
        let np = out.next_multiple_of(LANES);
        let mut q = vec![0i8; w.len()];
        let mut scales = vec![0f32; groups * np];
        for (c, (row, q)) in w.chunks_exact(inp).zip(q.chunks_exact_mut(inp)).enumerate() {
            for (g, (row, q)) in row.chunks(group).zip(q.chunks_mut(group)).enumerate() {
                scales[g * np + c] = quantize_row(row, q);
            }
        }
        let mut packed = lines::Aligned::zeroed(np * kp);
        let mut corr = vec![0i32; groups * np];
        for (c, row) in q.chunks_exact(inp).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                packed[packed_index(kp, c, t)] = v;
                corr[(t / group) * np + c] -= 128 * i32::from(v);
            }
        }
        Ok(Self {
            w: packed,
            scales,
            corr,
            out,
            inp,
            kp,
            np,
            group,
            groups,
        })
    }

    /// `X · Wᵀ` (no bias) for row-major `X` (`m × inp`): `m × out`,
    /// row-major, through [`best_kernel`].
    #[cfg(test)]
    pub(crate) fn apply(&self, x: &[f32], m: usize, exec: Exec) -> Result<Vec<f32>, ShapeMismatch> {
        self.apply_with(x, m, exec, best_kernel())
    }

    /// [`Int8Linear::apply`] with a chosen kernel.
    #[cfg(test)]
    pub(crate) fn apply_with(
        &self,
        x: &[f32],
        m: usize,
        exec: Exec,
        kernel: Kernel,
    ) -> Result<Vec<f32>, ShapeMismatch> {
        let mut y = vec![0f32; m.saturating_mul(self.out)];
        self.apply_into(x, m, exec, kernel, &mut y)?;
        Ok(y)
    }

    /// [`Int8Linear::apply_with`] into `y` (`m × out` values). Every value
    /// is overwritten, so a buffer reused from an earlier product need not
    /// be cleared.
    pub(crate) fn apply_into(
        &self,
        x: &[f32],
        m: usize,
        exec: Exec,
        kernel: Kernel,
        y: &mut [f32],
    ) -> Result<(), ShapeMismatch> {
        let (k, n) = (self.inp, self.out);
        if m.checked_mul(k) != Some(x.len()) {
            return Err(ShapeMismatch(format!(
                "int8 Linear of width {k} got {} values for {m} rows",
                x.len()
            )));
        }
        if m.checked_mul(n) != Some(y.len()) {
            return Err(ShapeMismatch(format!(
                "int8 Linear of {n} outputs got a buffer of {} values for {m} rows",
                y.len()
            )));
        }
        if m == 0 {
            return Ok(());
        }
        if self.split_channels(&x[..m * k], m, exec, kernel, y) {
            return Ok(());
        }
        y.par_chunks_mut(ROWS_PER_TASK * n)
            .zip(x.par_chunks(ROWS_PER_TASK * k))
            .with_min_len(exec.min_len())
            .for_each(|(y_block, x_block)| {
                let rows = self.quantize(x_block);
                self.products(kernel, &rows, y_block);
            });
        Ok(())
    }

    /// A call too small to split well by rows (fewer than two row tasks per
    /// thread: a query, whose 22 rows made tasks of 16 and 6 rows) on the
    /// pool, with the VNNI kernel, is split by 16-channel blocks instead,
    /// evenly over the threads, each reading only its share of the weight.
    /// Each value is computed as the row split computes it (the tile
    /// kernel's lanes are independent channels), so the bits do not change.
    /// `false` (nothing written) when the call does not qualify.
    #[allow(unused_variables)]
    fn split_channels(
        &self,
        x: &[f32],
        m: usize,
        exec: Exec,
        kernel: Kernel,
        y: &mut [f32],
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let threads = rayon::current_num_threads();
            if !matches!(exec, Exec::Pool)
                || !matches!(kernel, Kernel::Avx512Vnni)
                || threads < 2
                || m.div_ceil(ROWS_PER_TASK) >= 2 * threads
                || self.np / LANES < 2 * threads
                || !vnni::available()
            {
                return false;
            }
            let rows = self.quantize(x);
            vnni::products_by_channels(self, &rows, y, threads)
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Quantize the rows of `x` (`rows × inp`) per group: with AVX-512
    /// where the CPU has it ([`vnni::quantize_rows`], the same bits),
    /// else with [`quantize_row`].
    fn quantize(&self, x: &[f32]) -> QuantRows {
        let rows = x.len() / self.inp;
        let mut q = vec![0i8; rows * self.kp];
        let mut sx = Vec::with_capacity(rows * self.groups);
        #[cfg(target_arch = "x86_64")]
        if vnni::quantize_rows(x, self.inp, self.kp, self.group, &mut q, &mut sx) {
            return QuantRows { q, sx };
        }
        for (x, q) in x.chunks_exact(self.inp).zip(q.chunks_exact_mut(self.kp)) {
            for (x, q) in x.chunks(self.group).zip(q.chunks_mut(self.group)) {
                sx.push(quantize_row(x, &mut q[..x.len()]));
            }
        }
        QuantRows { q, sx }
    }

    /// `y` (`rows × out`) from quantized rows, through `kernel` (the CPU's
    /// best where it lacks the one asked for).
    fn products(&self, kernel: Kernel, rows: &QuantRows, y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        match kernel {
            Kernel::Avx512Vnni if vnni::products(self, rows, y) => return,
            Kernel::Avx512Vnni | Kernel::Avx2 if avx2::products(self, rows, y) => return,
            Kernel::Scalar | Kernel::Avx2 | Kernel::Avx512Vnni => {}
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = kernel;
        sums_scalar(self, rows, y);
    }

    /// The weight of channel `c` at input `t` (`c < out`, `t < inp`).
    #[cfg(test)]
    fn weight(&self, c: usize, t: usize) -> i8 {
        self.w[packed_index(self.kp, c, t)]
    }
}

/// Where channel `c`'s weight at input `t` lives in the packed layout of
/// `kp` (padded) inputs.
fn packed_index(kp: usize, c: usize, t: usize) -> usize {
    (((c / LANES) * (kp / QUAD) + t / QUAD) * LANES + c % LANES) * QUAD + t % QUAD
}

/// The reference kernel: exact group sums, then the `f32` steps of the
/// module docs, one channel at a time.
fn sums_scalar(lin: &Int8Linear, rows: &QuantRows, y: &mut [f32]) {
    let (k, kp, n) = (lin.inp, lin.kp, lin.out);
    for (r, y_row) in y.chunks_exact_mut(n).enumerate() {
        let q = &rows.q[r * kp..][..k];
        let sx = &rows.sx[r * lin.groups..][..lin.groups];
        for (c, y) in y_row.iter_mut().enumerate() {
            let mut acc = 0f32;
            for (g, &s) in sx.iter().enumerate() {
                let end = ((g + 1) * lin.group).min(k);
                let p: i32 = (g * lin.group..end)
                    .map(|t| i32::from(q[t]) * i32::from(lin.w[packed_index(kp, c, t)]))
                    .sum();
                acc += p as f32 * lin.scales[g * lin.np + c] * s;
            }
            *y = acc;
        }
    }
}

/// Which integer dot-product kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Portable Rust, one product at a time.
    Scalar,
    /// x86-64 AVX2: quads widened to `i16`, `vpmaddwd` into `i32`.
    Avx2,
    /// x86-64 AVX-512 VNNI: `vpdpbusd`, tiles of rows × 16-channel blocks
    /// (AVX2 where the CPU lacks it).
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

/// Whether the shapes of `rows` and `y` are the ones `lin`'s kernels
/// assume (the SIMD kernels refuse anything else).
fn shapes_agree(lin: &Int8Linear, rows: &QuantRows, y: &[f32]) -> bool {
    let n_rows = y.len() / lin.out;
    y.len() == n_rows * lin.out
        && rows.q.len() == n_rows * lin.kp
        && rows.sx.len() == n_rows * lin.groups
        && lin.w.len() == lin.np * lin.kp
        && lin.corr.len() == lin.groups * lin.np
        && lin.scales.len() == lin.groups * lin.np
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2 {
    //! The AVX2 kernel: one row × one 16-channel block at a time. Sound
    //! because [`products`] (the only entry) checks at run time that the
    //! CPU has AVX2 and that every slice has the length the loads assume.

    use super::{shapes_agree, Int8Linear, QuantRows, LANES, QUAD};
    use std::arch::x86_64::*;

    /// [`super::sums_scalar`]'s values, or `false` (nothing written) when
    /// the CPU lacks AVX2 or the shapes disagree.
    pub(super) fn products(lin: &Int8Linear, rows: &QuantRows, y: &mut [f32]) -> bool {
        if !std::arch::is_x86_feature_detected!("avx2") || !shapes_agree(lin, rows, y) {
            return false;
        }
        let (kp, n) = (lin.kp, lin.out);
        for (r, y_row) in y.chunks_exact_mut(n).enumerate() {
            let q = &rows.q[r * kp..][..kp];
            let sx = &rows.sx[r * lin.groups..][..lin.groups];
            for (b, y_block) in y_row.chunks_mut(LANES).enumerate() {
                let w = &lin.w[b * kp * LANES..][..kp * LANES];
                // SAFETY: AVX2 was detected above; `q` holds kp bytes, `w`
                // kp·16 and `sw` (groups − 1)·np + 16 scales (`shapes_agree`),
                // which is what `block` reads.
                let sw = &lin.scales[b * LANES..];
                let v = unsafe { block(q, w, sx, lin.group, sw, lin.np) };
                y_block.copy_from_slice(&v[..y_block.len()]);
            }
        }
        true
    }

    /// One row (`q`, kp bytes) × one block (`w`, kp·16 bytes, packed);
    /// `sw[g·np ..][..16]` are the block's weight scales of group `g`.
    ///
    /// # Safety
    /// AVX2 present; `w.len() == q.len() · 16`, `q.len() % 4 == 0`,
    /// `sw.len() ≥ (sx.len() − 1)·np + 16`.
    #[target_feature(enable = "avx2")]
    unsafe fn block(
        q: &[i8],
        w: &[i8],
        sx: &[f32],
        group: usize,
        sw: &[f32],
        np: usize,
    ) -> [f32; LANES] {
        let kp = q.len();
        let mut f = [_mm256_setzero_ps(); 2];
        for (g, &s) in sx.iter().enumerate() {
            let (from, to) = (g * group, ((g + 1) * group).min(kp));
            let mut a = [_mm256_setzero_si256(); 4];
            let mut t = from;
            while t < to {
                let quad = i32::from_le_bytes([
                    q[t] as u8,
                    q[t + 1] as u8,
                    q[t + 2] as u8,
                    q[t + 3] as u8,
                ]);
                // [x0 x1 x2 x3] four times, as i16.
                let xv = _mm256_cvtepi8_epi16(_mm_set1_epi32(quad));
                let base = (t / QUAD) * LANES * QUAD;
                for (j, a) in a.iter_mut().enumerate() {
                    // SAFETY: base + 16j + 16 ≤ (kp/4)·64 = w.len().
                    let wv = unsafe {
                        _mm256_cvtepi8_epi16(_mm_loadu_si128(w.as_ptr().add(base + 16 * j).cast()))
                    };
                    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(xv, wv));
                }
                t += QUAD;
            }
            // a[j] = [c0 c0 c1 c1 | c2 c2 c3 c3] (pairs) of channels 4j..4j+4.
            let s = _mm256_set1_ps(s);
            for (h, f) in f.iter_mut().enumerate() {
                let v = _mm256_hadd_epi32(a[2 * h], a[2 * h + 1]);
                let v = _mm256_permute4x64_epi64(v, 0b11_01_10_00);
                // SAFETY: g·np + 8h + 8 ≤ (groups − 1)·np + 16 ≤ sw.len().
                let swv = unsafe { _mm256_loadu_ps(sw.as_ptr().add(g * np + 8 * h)) };
                let p = _mm256_mul_ps(_mm256_cvtepi32_ps(v), swv);
                *f = _mm256_add_ps(*f, _mm256_mul_ps(p, s));
            }
        }
        let mut out = [0f32; LANES];
        for (h, f) in f.iter().enumerate() {
            // SAFETY: out holds 16 values.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * h), *f) };
        }
        out
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod vnni {
    //! The AVX-512 VNNI kernel. Sound because [`products`] (the only
    //! entry) checks at run time that the CPU has AVX-512F and VNNI and
    //! that every slice has the length the loads assume.

    use super::{shapes_agree, Int8Linear, QuantRows, LANES, QUAD};
    use std::arch::x86_64::*;

    /// Row tile height.
    const ROWS: usize = 4;
    /// Blocks (of 16 channels) per tile. Three, not four: long texts were
    /// 3-4% faster, short ones within 1%. By count, a 4 × 3 tile's 12
    /// `i32` accumulators, 12 `f32` sums, 3 weight vectors, 3 weight
    /// scales and the broadcast row fit the 32 vector registers, where a
    /// 4 × 4 tile's cannot (the assembly was not inspected).
    const BLOCKS: usize = 3;

    /// Whether this CPU runs the kernel.
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }

    /// The rows of `x` (`inp` values each) quantized per group of `group`
    /// inputs into `q` (`rows × kp`, padding left as it is) and `sx` (one
    /// scale per group, appended), with exactly [`super::quantize_row`]'s
    /// bits; `false` (nothing written) when the CPU lacks AVX-512F or the
    /// shapes disagree. Groups whose length is not a multiple of 16 (a
    /// ragged last group) go through `quantize_row` itself.
    pub(super) fn quantize_rows(
        x: &[f32],
        inp: usize,
        kp: usize,
        group: usize,
        q: &mut [i8],
        sx: &mut Vec<f32>,
    ) -> bool {
        if !std::arch::is_x86_feature_detected!("avx512f")
            || inp == 0
            || kp < inp
            || group == 0
            || !x.len().is_multiple_of(inp)
            || q.len() != x.len() / inp * kp
        {
            return false;
        }
        for (x, q) in x.chunks_exact(inp).zip(q.chunks_exact_mut(kp)) {
            for (x, q) in x.chunks(group).zip(q.chunks_mut(group)) {
                let q = &mut q[..x.len()];
                sx.push(if x.len().is_multiple_of(LANES) {
                    // SAFETY: AVX-512F was detected above; `x` and `q` have
                    // the same length, a multiple of 16.
                    unsafe { quantize_group(x, q) }
                } else {
                    super::quantize_row(x, q)
                });
            }
        }
        true
    }

    /// [`super::quantize_row`] on 16 lanes at a time. Each step is the
    /// scalar one's: the largest `|x|` (exact in any order; a NaN is
    /// skipped, as `f32::max` skips it), the same `f32` scale and inverse,
    /// `x · inv`, then rounding half away from zero as
    /// `trunc(p + copysign(0.5⁻, p))` with `0.5⁻` the largest float below
    /// one half (the lowering LLVM itself uses for `f32::round`; exact for
    /// `|p| < 2²³`, and here `|p| ≤ 127`), a NaN product to 0 (as `as i8`
    /// makes it) and the clamp to ±127.
    ///
    /// # Safety
    /// AVX-512F present; `x.len() == q.len()`, a multiple of 16.
    #[target_feature(enable = "avx512f")]
    unsafe fn quantize_group(x: &[f32], q: &mut [i8]) -> f32 {
        let n = x.len().min(q.len()) / LANES * LANES;
        let (xp, qp) = (x.as_ptr(), q.as_mut_ptr());
        let mut m = _mm512_setzero_ps();
        for i in (0..n).step_by(LANES) {
            // SAFETY: i + 16 ≤ n ≤ x.len().
            let v = unsafe { _mm512_loadu_ps(xp.add(i)) };
            // `max(a, b)` returns `b` when either is NaN: NaN inputs skipped.
            m = _mm512_max_ps(_mm512_abs_ps(v), m);
        }
        let max = _mm512_reduce_max_ps(m);
        if max == 0.0 || !max.is_finite() {
            return super::quantize_row(x, q);
        }
        let scale = max / 127.0;
        let inv = _mm512_set1_ps(127.0 / max);
        let below_half = _mm512_set1_ps(0.499_999_97);
        let sign = _mm512_set1_ps(-0.0);
        let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
        for i in (0..n).step_by(LANES) {
            // SAFETY: i + 16 ≤ n ≤ x.len().
            let p = _mm512_mul_ps(unsafe { _mm512_loadu_ps(xp.add(i)) }, inv);
            let h = _mm512_or_ps(_mm512_and_ps(p, sign), below_half);
            let r = _mm512_cvttps_epi32(_mm512_add_ps(p, h));
            let r = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(p, p), r);
            let r = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
            // SAFETY: i + 16 ≤ n ≤ q.len(): 16 bytes stored.
            unsafe { _mm_storeu_si128(qp.add(i).cast(), _mm512_cvtsepi32_epi8(r)) };
        }
        scale
    }

    /// [`super::sums_scalar`]'s values, or `false` (nothing written) when
    /// the CPU lacks VNNI or the shapes disagree.
    pub(super) fn products(lin: &Int8Linear, rows: &QuantRows, y: &mut [f32]) -> bool {
        if !available() || !shapes_agree(lin, rows, y) {
            return false;
        }
        let n_rows = y.len() / lin.out;
        let out = Out {
            ptr: y.as_mut_ptr(),
            len: y.len(),
            stride: lin.out,
        };
        // SAFETY: `out` is `y`, borrowed mutably for the whole call;
        // `shapes_agree` checked `n_rows × out` values.
        unsafe { run(lin, &unsigned(rows), rows, n_rows, 0, lin.np / LANES, out) };
        true
    }

    /// `y` (`rows × out`) from quantized rows, with the 16-channel blocks
    /// split into `parts` (at most) contiguous ranges computed in parallel
    /// on the caller's pool; each value is computed as [`products`]
    /// computes it, so the bits are the same. `false` (nothing written)
    /// when the CPU lacks VNNI or the shapes disagree.
    pub(super) fn products_by_channels(
        lin: &Int8Linear,
        rows: &QuantRows,
        y: &mut [f32],
        parts: usize,
    ) -> bool {
        use rayon::prelude::*;
        if !available() || !shapes_agree(lin, rows, y) {
            return false;
        }
        let n_rows = y.len() / lin.out;
        let blocks = lin.np / LANES;
        let per = blocks.div_ceil(parts.max(1));
        let out = Out {
            ptr: y.as_mut_ptr(),
            len: y.len(),
            stride: lin.out,
        };
        let u = unsigned(rows);
        (0..blocks.div_ceil(per)).into_par_iter().for_each(|p| {
            let (b0, b1) = (p * per, ((p + 1) * per).min(blocks));
            // SAFETY: `out` is `y`, borrowed mutably for the whole call
            // (the parallel loop ends before it returns); the parts write
            // disjoint channel ranges (blocks `b0..b1`) of its rows.
            unsafe { run(lin, &u, rows, n_rows, b0, b1, out) };
        });
        true
    }

    /// Where the products go: `len` values from `ptr`, rows of `stride`
    /// (`Int8Linear::out`) channels. Copied into parallel tasks that each
    /// write their own channels, hence a raw pointer, not a `&mut`.
    #[derive(Clone, Copy)]
    struct Out {
        ptr: *mut f32,
        len: usize,
        stride: usize,
    }

    // SAFETY: `Out` is only handed to tasks writing disjoint channel ranges
    // of a buffer borrowed mutably for as long as they run
    // (`products_by_channels`).
    unsafe impl Send for Out {}
    unsafe impl Sync for Out {}

    /// The quantized rows as unsigned bytes, `x + 128` (the sign bit
    /// flipped), as `vpdpbusd` takes them.
    fn unsigned(rows: &QuantRows) -> Vec<u8> {
        rows.q.iter().map(|&v| (v as u8) ^ 0x80).collect()
    }

    /// Blocks `b0..b1` of every row, in tiles, stored into `out`; `u` is
    /// [`unsigned`] of `rows`.
    ///
    /// # Safety
    /// `out` points to `len ≥ n_rows·stride` writable values that no one
    /// else reads or writes during the call, except other `run`s on
    /// disjoint block ranges; `rows` and `lin` agree with `n_rows`
    /// (`shapes_agree`) and `u.len() == rows.q.len()`; `b1 ≤ np/16`; the
    /// CPU has AVX-512F and VNNI.
    unsafe fn run(
        lin: &Int8Linear,
        u: &[u8],
        rows: &QuantRows,
        n_rows: usize,
        b0: usize,
        b1: usize,
        out: Out,
    ) {
        let mut b = b0;
        while b < b1 {
            let bb = (b1 - b).min(BLOCKS);
            let mut r = 0;
            while r < n_rows {
                let rr = (n_rows - r).min(ROWS);
                let tile = Tile {
                    lin,
                    u,
                    sx: &rows.sx,
                    r,
                    b,
                    out,
                };
                // SAFETY: the function's contract, and r + rr ≤ n_rows,
                // b + bb ≤ b1.
                unsafe {
                    match (rr, bb) {
                        (4, 3) => tile.put::<4, 3>(),
                        (4, 2) => tile.put::<4, 2>(),
                        (4, _) => tile.put::<4, 1>(),
                        (3, 3) => tile.put::<3, 3>(),
                        (3, 2) => tile.put::<3, 2>(),
                        (3, _) => tile.put::<3, 1>(),
                        (2, 3) => tile.put::<2, 3>(),
                        (2, 2) => tile.put::<2, 2>(),
                        (2, _) => tile.put::<2, 1>(),
                        (_, 3) => tile.put::<1, 3>(),
                        (_, 2) => tile.put::<1, 2>(),
                        (_, _) => tile.put::<1, 1>(),
                    }
                }
                r += rr;
            }
            b += bb;
        }
    }

    /// Rows `r..` × blocks `b..` of one call.
    struct Tile<'a> {
        lin: &'a Int8Linear,
        u: &'a [u8],
        sx: &'a [f32],
        r: usize,
        b: usize,
        out: Out,
    }

    impl Tile<'_> {
        /// Compute the tile and store its channels below `lin.out`.
        ///
        /// # Safety
        /// As [`run`], with rows `r..r + R` and blocks `b..b + B` inside
        /// its ranges.
        unsafe fn put<const R: usize, const B: usize>(&self) {
            let lin = self.lin;
            let (kp, np, groups) = (lin.kp, lin.np, lin.groups);
            let u = &self.u[self.r * kp..][..R * kp];
            let w = &lin.w[self.b * LANES * kp..][..B * LANES * kp];
            let sx = &self.sx[self.r * groups..][..R * groups];
            let c0 = self.b * LANES;
            let Out { ptr, len, stride } = self.out;
            let store = Store {
                // SAFETY: (r + R)·stride ≤ n_rows·stride ≤ len.
                ptr: unsafe { ptr.add(self.r * stride) },
                stride,
                c0,
                width: lin.out.saturating_sub(c0).min(B * LANES),
            };
            debug_assert!((self.r + R) * stride <= len && lin.out <= stride);
            // SAFETY: VNNI is present (`run`'s contract); the slices above
            // have the lengths `tile` wants (`shapes_agree`: `u` holds R
            // rows of kp bytes, `w` B blocks of kp·16, `sx` R·groups
            // scales, `scales` and `corr` groups·np values with
            // c0 + B·16 ≤ np); `store` covers R rows of the tile's
            // channels inside `out`.
            unsafe {
                tile::<R, B>(
                    u,
                    w,
                    sx,
                    &lin.scales,
                    &lin.corr,
                    c0,
                    kp,
                    np,
                    lin.group,
                    store,
                )
            };
        }
    }

    /// Where [`tile`] stores: row `i` of the tile at `ptr + i·stride + c0`,
    /// its first `width` channels (the rest are padding).
    struct Store {
        ptr: *mut f32,
        stride: usize,
        c0: usize,
        width: usize,
    }

    /// The tile's outputs, `R` rows × `B` blocks × 16 channels from channel
    /// `c0`, stored through `to`, the last block masked at `to.width`.
    ///
    /// # Safety
    /// AVX-512F and VNNI present; `u.len() == R·kp`, `w.len() == B·16·kp`,
    /// `sx.len() == R·groups` with `groups = ⌈kp / group⌉` or the one
    /// `corr` holds, `sw.len() ≥ groups·np`, `corr.len() ≥ groups·np`,
    /// `c0 + B·16 ≤ np`, `kp % 4 == 0`, `group % 4 == 0`; the value at
    /// `to.ptr` plus `i·stride + c0 + j` writable for `i < R`,
    /// `j < to.width ≤ B·16`, and written by no one else.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn tile<const R: usize, const B: usize>(
        u: &[u8],
        w: &[i8],
        sx: &[f32],
        sw: &[f32],
        corr: &[i32],
        c0: usize,
        kp: usize,
        np: usize,
        group: usize,
        to: Store,
    ) {
        let groups = sx.len() / R;
        let quads = kp / QUAD;
        debug_assert!(u.len() == R * kp && w.len() == B * quads * 64);
        let mut f = [[_mm512_setzero_ps(); B]; R];
        for g in 0..groups {
            let (from, to_q) = (g * group / QUAD, ((g + 1) * group / QUAD).min(quads));
            let mut start = [_mm512_setzero_si512(); B];
            for (j, s) in start.iter_mut().enumerate() {
                // SAFETY: g·np + c0 + 16j + 16 ≤ groups·np ≤ corr.len().
                *s = unsafe {
                    _mm512_loadu_si512(corr.as_ptr().add(g * np + c0 + j * LANES).cast())
                };
            }
            let mut a = [start; R];
            // Raw pointers: the bounds (`u`: R·kp bytes, `w`: B·quads·64)
            // are the function's contract, so the inner loop is loads and
            // `vpdpbusd` only, with no per-byte index checks.
            let (up, wp) = (u.as_ptr(), w.as_ptr());
            for t in from..to_q {
                let mut wv = [_mm512_setzero_si512(); B];
                for (j, v) in wv.iter_mut().enumerate() {
                    // SAFETY: (j·quads + t)·64 + 64 ≤ B·quads·64 = w.len().
                    *v = unsafe { _mm512_loadu_si512(wp.add((j * quads + t) * 64).cast()) };
                }
                for (i, a) in a.iter_mut().enumerate() {
                    // SAFETY: i·kp + 4t + 4 ≤ R·kp = u.len() (t < quads);
                    // the 4 bytes are read unaligned, little-endian, as
                    // one i32 (the quad's bytes in lane order).
                    let quad = unsafe { up.add(i * kp + t * QUAD).cast::<i32>().read_unaligned() };
                    let xv = _mm512_set1_epi32(quad);
                    for (a, &wv) in a.iter_mut().zip(&wv) {
                        *a = _mm512_dpbusd_epi32(*a, xv, wv);
                    }
                }
            }
            let mut swv = [_mm512_setzero_ps(); B];
            for (j, v) in swv.iter_mut().enumerate() {
                // SAFETY: g·np + c0 + 16j + 16 ≤ groups·np ≤ sw.len().
                *v = unsafe { _mm512_loadu_ps(sw.as_ptr().add(g * np + c0 + j * LANES)) };
            }
            for (i, (f, a)) in f.iter_mut().zip(&a).enumerate() {
                let s = _mm512_set1_ps(sx[i * groups + g]);
                for ((f, &a), &swv) in f.iter_mut().zip(a).zip(&swv) {
                    let p = _mm512_mul_ps(_mm512_cvtepi32_ps(a), swv);
                    *f = _mm512_add_ps(*f, _mm512_mul_ps(p, s));
                }
            }
        }
        // Straight into the destination (an intermediate array and a copy
        // per 16 values cost about 3% of a batch's time).
        for (i, f) in f.iter().enumerate() {
            for (j, &f) in f.iter().enumerate() {
                let c = j * LANES;
                if c >= to.width {
                    break;
                }
                let len = LANES.min(to.width - c);
                // SAFETY: the function's contract: values `c..c + len`
                // (< to.width) of row i are writable; the mask stores only
                // the first `len` lanes.
                unsafe {
                    let dst = to.ptr.add(i * to.stride + to.c0 + c);
                    if len == LANES {
                        _mm512_storeu_ps(dst, f);
                    } else {
                        _mm512_mask_storeu_ps(dst, (1u16 << len) - 1, f);
                    }
                }
            }
        }
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
        (6, 130, 17),
    ];

    #[test]
    fn int8_products_are_within_the_quantization_bound_of_f32() {
        // Each input is off by at most half a step (s/2) of its group's or
        // channel's scale, so |x·w − x̂·ŵ| ≤ Σ_t (|x_t|·sw/2 + |w_t|·sx_t/2
        // + sx_t·sw/4), sx_t the scale of t's group: the bound checked per
        // element (plus f32 rounding).
        let mut rng = ChaCha8Rng::seed_from_u64(41);
        for &(m, k, n) in SHAPES {
            let (x, w) = (random(m * k, &mut rng), random(n * k, &mut rng));
            let want = reference(&x, &w, m, k, n);
            let lin = Int8Linear::new(&w, n, k).unwrap();
            let got = lin.apply(&x, m, Exec::Inline).unwrap();
            for r in 0..m {
                let xr = &x[r * k..][..k];
                let sx: Vec<f64> = xr
                    .chunks(GROUP)
                    .map(|g| f64::from(g.iter().fold(0f32, |a, v| a.max(v.abs()))) / 127.0)
                    .collect();
                for o in 0..n {
                    let wo = &w[o * k..][..k];
                    let bound: f64 = xr
                        .iter()
                        .zip(wo)
                        .enumerate()
                        .map(|(t, (&a, &b))| {
                            let sx = sx[t / GROUP];
                            let sw = f64::from(lin.scales[(t / GROUP) * lin.np + o]);
                            f64::from(a.abs()) * sw / 2.0
                                + f64::from(b.abs()) * sx / 2.0
                                + sx * sw / 4.0
                        })
                        .sum::<f64>()
                        + 1e-5 * (1.0 + want[r * n + o].abs());
                    let e = (f64::from(got[r * n + o]) - want[r * n + o]).abs();
                    assert!(e <= bound, "{m}x{k}x{n} [{r},{o}]: {e} > {bound}");
                }
            }
        }
    }

    #[test]
    fn an_outlier_costs_only_its_own_group() {
        // One input of 100 among inputs of 0.30-0.36: with a scale per row
        // the others round to 0 (step 100/127 > 2·0.36); per group of 64,
        // only the outlier's group loses resolution.
        let k = 3 * GROUP;
        let x: Vec<f32> = (0..k)
            .map(|t| {
                if t == 5 {
                    100.0
                } else {
                    0.3 + (t % 7) as f32 * 0.01
                }
            })
            .collect();
        // Channel c reads group c alone (weights 1 there, 0 elsewhere).
        let mut w = vec![0f32; 3 * k];
        for c in 0..3 {
            w[c * k + c * GROUP..][..GROUP]
                .iter_mut()
                .for_each(|v| *v = 1.0);
        }
        let want = reference(&x, &w, 1, k, 3);
        let got = Int8Linear::new(&w, 3, k)
            .unwrap()
            .apply(&x, 1, Exec::Inline)
            .unwrap();
        for c in 1..3 {
            let e = (f64::from(got[c]) - want[c]).abs() / want[c];
            assert!(e < 0.01, "group {c}: {} against {}", got[c], want[c]);
        }
        let per_row = Int8Linear::with_group(&w, 3, k, k).unwrap();
        let got = per_row.apply(&x, 1, Exec::Inline).unwrap();
        assert_eq!(got[1], 0.0, "one scale per row loses the small inputs");
    }

    /// Random quantized-shape cases: (rows, inputs, channels).
    const KERNEL_SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (1, 4, 16),
        (3, 63, 5),
        (4, 64, 64),
        (5, 65, 17),
        (4, 100, 70),
        (16, 384, 1152),
        (17, 1536, 33),
        (2, 1539, 3),
    ];

    /// Every kernel gives the scalar kernel's bits, for a scale per group
    /// and per row, on random data and at the extremes (all ±127, where
    /// the unsigned shift of the VNNI kernel reaches 1 and 255).
    #[test]
    fn group_scaled_kernels_give_the_scalar_kernel_s_bits() {
        let best = best_kernel();
        if best != Kernel::Avx512Vnni {
            eprintln!(
                "NOTICE: no AVX-512 VNNI on this CPU ({}): the VNNI request runs AVX2 or scalar here",
                best.name()
            );
        }
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for &(m, k, n) in KERNEL_SHAPES {
            for group in [GROUP, 8, k.next_multiple_of(4)] {
                let w = random(n * k, &mut rng);
                let mut x = random(m * k, &mut rng);
                // Groups of very different sizes, so their scales differ.
                x.iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v *= 1.0 + (i % 97) as f32);
                let lin = Int8Linear::with_group(&w, n, k, group).unwrap();
                let scalar = lin.apply_with(&x, m, Exec::Inline, Kernel::Scalar).unwrap();
                for kernel in [Kernel::Avx2, Kernel::Avx512Vnni] {
                    let got = lin.apply_with(&x, m, Exec::Inline, kernel).unwrap();
                    let same = got
                        .iter()
                        .zip(&scalar)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{}: {m}x{k}x{n}, group {group}", kernel.name());
                }
                // The SIMD kernels ran (rather than falling back to scalar).
                #[cfg(target_arch = "x86_64")]
                {
                    let rows = lin.quantize(&x);
                    let mut y = vec![0f32; m * n];
                    let avx2 = std::arch::is_x86_feature_detected!("avx2");
                    assert_eq!(avx2::products(&lin, &rows, &mut y), avx2);
                    assert_eq!(vnni::products(&lin, &rows, &mut y), vnni::available());
                }
                for t in 0..k.min(lin.group).min(9) {
                    assert_eq!(
                        lin.weight(n - 1, t),
                        quantized(&w[(n - 1) * k..][..k.min(lin.group)])[t],
                        "packed weight [{}, {t}]",
                        n - 1
                    );
                }
            }
            // The extremes: every product is -127·127.
            let lin = Int8Linear::new(&vec![-1.0; n * k], n, k).unwrap();
            let ones = vec![1.0; m * k];
            let scalar = lin
                .apply_with(&ones, m, Exec::Inline, Kernel::Scalar)
                .unwrap();
            let want: f32 = -(k as f32);
            assert!(
                scalar.iter().all(|&v| (v - want).abs() <= 1e-4 * k as f32),
                "{m}x{k}x{n}"
            );
            for kernel in [Kernel::Avx2, Kernel::Avx512Vnni] {
                let got = lin.apply_with(&ones, m, Exec::Inline, kernel).unwrap();
                assert_eq!(
                    got,
                    scalar,
                    "{} at the extremes, {m}x{k}x{n}",
                    kernel.name()
                );
            }
        }
    }

    fn quantized(w: &[f32]) -> Vec<i8> {
        let mut q = vec![0; w.len()];
        quantize_row(w, &mut q);
        q
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
        // Few rows (a query) split by channels on the pool, the last block
        // ragged (200 channels): the same bits.
        let n_big = 200;
        let w_big = random(n_big * k, &mut rng);
        let big = Int8Linear::new(&w_big, n_big, k).unwrap();
        for small in [1, 5, 22, 63] {
            let want = big
                .apply_with(&x[..small * k], small, Exec::Inline, Kernel::Scalar)
                .unwrap();
            let split = pool
                .install(|| big.apply_with(&x[..small * k], small, Exec::Pool, Kernel::Avx512Vnni))
                .unwrap();
            assert_eq!(split, want, "channel split of {small} rows");
        }
        // A row alone gives what it gives among others.
        let r = 37;
        let alone = lin.apply(&x[r * k..][..k], 1, Exec::Inline).unwrap();
        assert_eq!(alone, scalar[r * n..][..n]);
    }

    /// The AVX-512 quantizer gives `quantize_row`'s bits: on random rows,
    /// on exact halves (max 127 makes the inverse 1, so `k + 0.5` is a tie
    /// the rounding must take away from zero) and their neighbours a few
    /// ulps off, on NaN and ±0 inputs, on all-zero and infinite groups, and
    /// on a ragged last group.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_quantization_gives_quantize_row_s_bits() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512F: nothing to compare");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(41);
        let (inp, group) = (200usize, 64); // groups of 64, 64, 64 and a ragged 8
        let kp = inp.next_multiple_of(QUAD);
        let mut rows: Vec<Vec<f32>> = (0..50).map(|_| random(inp, &mut rng)).collect();
        // Ties and near-ties: max 127 → inv 1, p = x exactly.
        let mut ties = vec![127.0f32];
        for k in 0..127 {
            let half = k as f32 + 0.5;
            for d in -3i32..=3 {
                let bits = (half.to_bits() as i32 + d) as u32;
                ties.push(f32::from_bits(bits));
                ties.push(-f32::from_bits(bits));
            }
        }
        for chunk in ties.chunks(inp - 1) {
            let mut r = vec![127.0f32];
            r.extend_from_slice(chunk);
            r.resize(inp, 0.25);
            rows.push(r);
        }
        let mut odd = random(inp, &mut rng);
        odd[3] = f32::NAN;
        odd[70] = -0.0;
        odd[64..128].iter_mut().for_each(|v| *v = 0.0);
        odd[130] = f32::INFINITY;
        rows.push(odd);
        let x: Vec<f32> = rows.concat();
        let n = rows.len();
        let (mut q, mut sx) = (vec![0i8; n * kp], Vec::new());
        assert!(vnni::quantize_rows(&x, inp, kp, group, &mut q, &mut sx));
        let (mut want_q, mut want_sx) = (vec![0i8; n * kp], Vec::new());
        for (x, q) in x.chunks_exact(inp).zip(want_q.chunks_exact_mut(kp)) {
            for (x, q) in x.chunks(group).zip(q.chunks_mut(group)) {
                want_sx.push(quantize_row(x, &mut q[..x.len()]));
            }
        }
        assert_eq!(q, want_q);
        let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&sx), bits(&want_sx));
        // A tie is rounded away from zero, as `f32::round` rounds it.
        assert!(q.contains(&1) && q.contains(&-127));
    }

    /// Packed weights start on a cache line and keep their bytes.
    #[test]
    fn packed_weights_start_on_a_cache_line() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (out, inp) in [(1, 4), (17, 36), (48, 384)] {
            let w = random(out * inp, &mut rng);
            let lin = Int8Linear::new(&w, out, inp).unwrap();
            assert_eq!(lin.w.as_ptr() as usize % 64, 0, "[{out}×{inp}]");
            assert_eq!(lin.w.len(), lin.np * lin.kp);
        }
        let mut a = lines::Aligned::zeroed(130);
        assert_eq!(a.len(), 130);
        assert_eq!(a.as_ptr() as usize % 64, 0);
        a[129] = 7;
        assert!(a[..129].iter().all(|&b| b == 0) && a[129] == 7);
    }

    #[test]
    fn zero_rows_and_wrong_shapes() {
        let mut q = [5i8; 3];
        assert_eq!(quantize_row(&[0.0; 3], &mut q), 0.0);
        assert_eq!(q, [0; 3]);
        assert!(Int8Linear::new(&[0.0; 5], 2, 3).is_err());
        assert!(Int8Linear::new(&[], 0, 3).is_err());
        assert!(
            Int8Linear::with_group(&[0.0; 6], 2, 3, 6).is_err(),
            "not a multiple of 4"
        );
        assert!(Int8Linear::with_group(&[0.0; 6], 2, 3, 0).is_err());
        let lin = Int8Linear::new(&[1.0; 6], 2, 3).unwrap();
        assert!(lin.apply(&[0.0; 5], 2, Exec::Inline).is_err());
        assert_eq!(lin.apply(&[0.0; 6], 2, Exec::Inline).unwrap(), vec![0.0; 4]);
    }
}
