//! `f32` matrix products for the encoder, straight through gemm's f32
//! kernels.
//!
//! The encoder needs two products:
//! - [`PanelWeights::apply`]: token rows times a Linear weight, `X · Wᵀ`;
//! - [`batched_matmul`]: small row-major `A_i · B_i` for attention, or
//!   [`attention_matmul`], the same products with gemm's bits computed
//!   in registers without gemm's dispatch and packing (from 3 to 256
//!   tokens, with AVX-512F).
//!
//! gemm-f32 holds the kernels candle's CPU matmul calls (AVX2/FMA, AVX-512
//! when the CPU has it, chosen at run time). Depending on it alone, rather
//! than on the `gemm` facade, skips compiling the f64 and complex kernels
//! (issue 16, item 5).
//!
//! **Weight panels.** A Linear weight is regrouped once, at load, into
//! panels of [`PanelWeights::kernel_rows`] output rows (gemm's microkernel
//! height),
//! each stored column-major: exactly the layout gemm packs its left operand
//! into. Each panel is then one gemm call with nothing to pack, and its
//! `in × rows` floats are read front to back. The row-major `[in, out]`
//! layout this replaces made gemm either repack the whole weight on every
//! call (more than 32 token rows) or walk it in strips that jump a whole
//! row (4.6 KB) per step (fewer rows), which left single short texts bound
//! by scattered weight reads. Few token rows (a short text): the panels are
//! spread over the rayon pool, each gemm call on one thread. Many rows (a
//! batch, a long text): the rows are cut into blocks of 64, one task each,
//! and every panel writes its columns of the block straight into the
//! result, so a block's inputs stay in L2 and nothing is copied or
//! allocated per panel. Measured in one `evomem bench embed` run per layout
//! (issue 16): one short text per call went from about 11 ms to about
//! 6.5 ms on two threads with panels, and row blocks took batches of 32
//! long texts from about 22 to 28 texts/s.
//!
//! gemm's entry point takes raw pointers and strides, so it is `unsafe`.
//! [`gemm_into`] is the one place that calls it: every caller checks the
//! slice lengths against the shapes first, and the strides describe exactly
//! those slices, so gemm never reads or writes outside them. The other
//! `unsafe` is `fma_product`'s AVX-512 intrinsics, behind a run-time
//! feature check and the same length checks.

use gemm_common::Parallelism;
use rayon::prelude::*;

/// The shapes of a product did not match its buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShapeMismatch(pub String);

impl std::fmt::Display for ShapeMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a forward's parallel parts run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exec {
    /// Split across the current rayon pool: the embedder installs its own,
    /// so this is the requested thread count, never more.
    Pool,
    /// Everything on the calling thread, in order; no task reaches any pool.
    /// The same arithmetic as [`Exec::Pool`] (work is split by rows,
    /// panels and texts, never along a sum), so the same bits.
    Inline,
}

impl Exec {
    /// `with_min_len` for the parallel iterators: an inline run never splits,
    /// so rayon runs the whole iterator on the calling thread.
    pub(crate) fn min_len(self) -> usize {
        match self {
            Exec::Pool => 1,
            Exec::Inline => usize::MAX,
        }
    }

    /// gemm's parallelism inside one product.
    fn gemm(self) -> Parallelism {
        match (self, rayon::current_num_threads()) {
            (Exec::Inline, _) | (Exec::Pool, 0 | 1) => Parallelism::None,
            (Exec::Pool, n) => Parallelism::Rayon(n),
        }
    }
}

/// One strided product `D = L · R` (`D`: `m × n`, `L`: `m × k`,
/// `R`: `k × n`), element `(i, j)` of each at `i·rs + j·cs`.
struct Strided<'a> {
    ptr: &'a [f32],
    cs: usize,
    rs: usize,
}

/// `dst = lhs · rhs` through gemm-f32. gemm's kernels want a column-major
/// destination, so a row-major one is handled as `dstᵀ = rhsᵀ · lhsᵀ`
/// (what the `gemm` facade does before dispatching).
///
/// The caller guarantees that every `(i, j)` with `i < m`, `j < n` (and `t <
/// k`) indexes inside the slices with the given strides.
fn gemm_into(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    (dst_cs, dst_rs): (usize, usize),
    lhs: Strided<'_>,
    rhs: Strided<'_>,
    par: Parallelism,
) -> Result<(), ShapeMismatch> {
    let last = |cs: usize, rs: usize, rows: usize, cols: usize| {
        if rows == 0 || cols == 0 {
            Some(0)
        } else {
            (rows - 1)
                .checked_mul(rs)?
                .checked_add((cols - 1).checked_mul(cs)?)?
                .checked_add(1)
        }
    };
    let fits = |len: usize, cs: usize, rs: usize, rows: usize, cols: usize| {
        last(cs, rs, rows, cols).is_some_and(|need| need <= len)
    };
    if !(fits(dst.len(), dst_cs, dst_rs, m, n)
        && fits(lhs.ptr.len(), lhs.cs, lhs.rs, m, k)
        && fits(rhs.ptr.len(), rhs.cs, rhs.rs, k, n))
    {
        return Err(ShapeMismatch(format!(
            "gemm of [{m}×{k}]·[{k}×{n}] does not fit buffers of {}, {} and {} values",
            lhs.ptr.len(),
            rhs.ptr.len(),
            dst.len()
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        dst.iter_mut().for_each(|x| *x = 0.0);
        return Ok(());
    }
    let (m, n, dst_cs, dst_rs, lhs, rhs) = if dst_cs < dst_rs {
        (
            n,
            m,
            dst_rs,
            dst_cs,
            Strided {
                ptr: rhs.ptr,
                cs: rhs.rs,
                rs: rhs.cs,
            },
            Strided {
                ptr: lhs.ptr,
                cs: lhs.rs,
                rs: lhs.cs,
            },
        )
    } else {
        (m, n, dst_cs, dst_rs, lhs, rhs)
    };
    let s = |x: usize| {
        isize::try_from(x).map_err(|_| ShapeMismatch(format!("stride {x} overflows isize")))
    };
    let strides = (
        s(dst_cs)?,
        s(dst_rs)?,
        s(lhs.cs)?,
        s(lhs.rs)?,
        s(rhs.cs)?,
        s(rhs.rs)?,
    );
    // SAFETY: the checks above put the last element each operand is read or
    // written at, (rows-1)·rs + (cols-1)·cs, inside its slice, and all
    // strides are non-negative, so every element gemm touches is in bounds.
    // `dst` is borrowed mutably and aliases neither input. `read_dst =
    // false` with beta = 1 computes D = L·R without reading D.
    #[allow(unsafe_code)]
    unsafe {
        gemm_f32::gemm::f32::get_gemm_fn()(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            strides.0,
            strides.1,
            false,
            lhs.ptr.as_ptr(),
            strides.2,
            strides.3,
            rhs.ptr.as_ptr(),
            strides.4,
            strides.5,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

/// The length of `batch` products' results (`batch × m × n`), after
/// checking that `a` holds `batch × m × k` values and `b` `batch × k × n`.
fn batch_result_len(
    a: &[f32],
    b: &[f32],
    batch: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<usize, ShapeMismatch> {
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
    Ok(c_len)
}

/// `batch` independent products `A_i · B_i`, each `A_i` `m × k` and `B_i`
/// `k × n`, row-major, stored one after the other; the result holds the
/// `batch` row-major `m × n` products one after the other.
pub(crate) fn batched_matmul(
    a: &[f32],
    b: &[f32],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    exec: Exec,
) -> Result<Vec<f32>, ShapeMismatch> {
    let c_len = batch_result_len(a, b, batch, (m, k, n))?;
    let mut c = vec![0f32; c_len];
    if c_len == 0 || k == 0 {
        return Ok(c);
    }
    let par = exec.gemm();
    for ((a_i, b_i), c_i) in a
        .chunks_exact(m * k)
        .zip(b.chunks_exact(k * n))
        .zip(c.chunks_exact_mut(m * n))
    {
        gemm_into(
            (m, n, k),
            c_i,
            (1, n),
            Strided {
                ptr: a_i,
                cs: 1,
                rs: k,
            },
            Strided {
                ptr: b_i,
                cs: 1,
                rs: n,
            },
            par,
        )?;
    }
    Ok(c)
}

/// Largest dimension [`attention_matmul`] computes itself (the range its
/// bits were checked against gemm's on).
const DIRECT_MAX: usize = 256;

/// [`batched_matmul`] for attention's products (`QKᵀ`: `len × dh · dh ×
/// len`; `PV`: `len × len · len × dh`), computed directly when every
/// dimension is 3 to [`DIRECT_MAX`] and the CPU has AVX-512F, else by
/// [`batched_matmul`]. Same bits either way: gemm's kernels accumulate
/// each value as one chain of fused multiply-adds over `k` in order, from
/// zero, which is what the direct loop does (checked on every attention
/// shape of 3 to 256 tokens by `attention_products_give_gemm_s_bits`; with
/// 1 or 2 rows gemm takes another path, whose sums differ). A short text's
/// attention is 24 tiny products per layer, for which gemm's dispatch and
/// packing cost more than the arithmetic.
pub(crate) fn attention_matmul(
    a: &[f32],
    b: &[f32],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    exec: Exec,
) -> Result<Vec<f32>, ShapeMismatch> {
    #[cfg(target_arch = "x86_64")]
    {
        let direct = |d: usize| (3..=DIRECT_MAX).contains(&d);
        if direct(m) && direct(k) && direct(n) && std::arch::is_x86_feature_detected!("avx512f") {
            let mut c = vec![0f32; batch_result_len(a, b, batch, (m, k, n))?];
            for ((a, b), c) in a
                .chunks_exact(m * k)
                .zip(b.chunks_exact(k * n))
                .zip(c.chunks_exact_mut(m * n))
            {
                // SAFETY: AVX-512F was detected above; the chunks have the
                // lengths `fma_product` wants.
                #[allow(unsafe_code)]
                unsafe {
                    fma_product(a, b, c, m, k, n)
                };
            }
            return Ok(c);
        }
    }
    batched_matmul(a, b, batch, m, k, n, exec)
}

/// `c = a · b` (`a`: `m × k`, `b`: `k × n`, `c`: `m × n`, row-major), each
/// value one chain of fused multiply-adds over `k` in order, from zero, in
/// tiles held in registers: 4 rows × 32 columns, or 8 rows × 16 columns
/// for the last 16 or fewer (a short text's `QKᵀ` is 14 × 14): eight
/// independent chains either way, enough to hide the FMA latency. The
/// last columns are masked.
///
/// # Safety
/// The CPU has AVX-512F; `a.len() == m·k`, `b.len() == k·n`,
/// `c.len() == m·n`.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f")]
unsafe fn fma_product(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    debug_assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n);
    let mut j = 0;
    while j < n {
        let mut i = 0;
        let wide = n - j > 16;
        while i < m {
            // SAFETY: the function's contract; rows i.., columns j.. are
            // inside the shapes (the tile masks columns past n and takes
            // at most m − i rows).
            i += unsafe {
                if wide {
                    fma_tile::<4, 2>(a, b, c, (i, j), (m, k, n))
                } else {
                    fma_tile::<8, 1>(a, b, c, (i, j), (m, k, n))
                }
            };
        }
        j += if wide { 32 } else { 16 };
    }
}

/// One tile of [`fma_product`]: rows `i..` (at most `R`, fewer at the
/// end) × `16·V` columns from `j` (masked past `n`). Returns the rows done.
///
/// # Safety
/// As [`fma_product`], with `i < m`, `j < n`.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn fma_tile<const R: usize, const V: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (i, j): (usize, usize),
    (m, k, n): (usize, usize, usize),
) -> usize {
    use std::arch::x86_64::*;
    let rows = (m - i).min(R);
    let mut mask = [0u16; V];
    let mut col = [0usize; V];
    for (v, (mask, col)) in mask.iter_mut().zip(&mut col).enumerate() {
        let from = (j + 16 * v).min(n);
        let left = n - from;
        *mask = if left >= 16 {
            u16::MAX
        } else {
            (1u16 << left) - 1
        };
        *col = from;
    }
    let (ap, bp, cp) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    for t in 0..k {
        let mut bv = [_mm512_setzero_ps(); V];
        for ((bv, &mask), &col) in bv.iter_mut().zip(&mask).zip(&col) {
            // SAFETY: row t of b holds columns col.. up to n; the mask
            // loads only those (none when col == n, one past the row).
            *bv = unsafe { _mm512_maskz_loadu_ps(mask, bp.add(t * n + col)) };
        }
        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
            // SAFETY: (i + r)·k + t < m·k.
            let av = _mm512_set1_ps(unsafe { *ap.add((i + r) * k + t) });
            for (acc, &bv) in acc.iter_mut().zip(&bv) {
                *acc = _mm512_fmadd_ps(av, bv, *acc);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate().take(rows) {
        for ((&acc, &mask), &col) in acc.iter().zip(&mask).zip(&col) {
            // SAFETY: row i + r of c holds columns col.. up to n; the mask
            // stores only those.
            unsafe { _mm512_mask_storeu_ps(cp.add((i + r) * n + col), mask, acc) };
        }
    }
    rows
}

/// A Linear weight (`[out, in]`, the file layout) regrouped into panels of
/// `rows` output rows, each column-major (see the module docs).
pub(crate) struct PanelWeights {
    /// Panel `p` holds output rows `p·rows ..` as `in` columns of `rows`
    /// values; the last panel is zero-padded.
    data: Vec<f32>,
    rows: usize,
    out: usize,
    inp: usize,
}

impl PanelWeights {
    /// Panels of gemm's f32 microkernel height on this CPU: two vector
    /// registers (16 rows with AVX2, 32 with AVX-512).
    pub(crate) fn kernel_rows() -> usize {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 32;
        }
        16
    }

    /// Regroup `w` (`out × inp`, row-major) into panels of `rows`; refuses
    /// a length that does not match and any zero dimension.
    pub(crate) fn new(
        w: &[f32],
        out: usize,
        inp: usize,
        rows: usize,
    ) -> Result<Self, ShapeMismatch> {
        if w.len() != checked(&[out, inp])? || rows == 0 || inp == 0 || out == 0 {
            return Err(ShapeMismatch(format!(
                "weight of [{out}×{inp}] got {} values (panels of {rows})",
                w.len()
            )));
        }
        let panels = out.div_ceil(rows);
        let mut data = vec![0f32; checked(&[panels, rows, inp])?];
        for (o, row) in w.chunks_exact(inp).enumerate() {
            let panel = &mut data[(o / rows) * rows * inp..][..rows * inp];
            let r = o % rows;
            for (t, &v) in row.iter().enumerate() {
                panel[t * rows + r] = v;
            }
        }
        Ok(Self {
            data,
            rows,
            out,
            inp,
        })
    }

    /// `X · Wᵀ` for row-major `X` (`m × in`): `m × out`, row-major.
    ///
    /// Many rows (at least [`BLOCK_SPLIT_ROWS`]): the rows are split into
    /// blocks of [`BLOCK_ROWS`], one task each, and every panel writes its
    /// columns of the block straight into the result, so the block's inputs
    /// stay in cache across all panels and nothing is copied afterwards.
    /// Few rows (one short text): too few blocks to share, so the panels
    /// are split over the pool instead, each into its own buffer. Either
    /// way each value is the same single gemm sum over `in`, so the two
    /// give the same bits (tested with the real model in
    /// `minilm_forward`).
    #[cfg(test)]
    pub(crate) fn apply(&self, x: &[f32], m: usize, exec: Exec) -> Result<Vec<f32>, ShapeMismatch> {
        let mut c = vec![0f32; checked(&[m, self.out])?];
        self.apply_into(x, m, exec, &mut c)?;
        Ok(c)
    }

    /// [`PanelWeights::apply`] into `c` (`m × out` values). Every value is
    /// overwritten, so a buffer reused from an earlier product need not be
    /// cleared (the forward reuses its buffers from layer to layer).
    pub(crate) fn apply_into(
        &self,
        x: &[f32],
        m: usize,
        exec: Exec,
        c: &mut [f32],
    ) -> Result<(), ShapeMismatch> {
        let (k, rows, out) = (self.inp, self.rows, self.out);
        if x.len() != checked(&[m, k])? {
            return Err(ShapeMismatch(format!(
                "Linear of width {k} got {} values for {m} rows",
                x.len()
            )));
        }
        if c.len() != checked(&[m, out])? {
            return Err(ShapeMismatch(format!(
                "Linear of {out} outputs got a buffer of {} values for {m} rows",
                c.len()
            )));
        }
        if m >= BLOCK_SPLIT_ROWS {
            c.par_chunks_mut(BLOCK_ROWS * out)
                .zip(x.par_chunks(BLOCK_ROWS * k))
                .with_min_len(exec.min_len())
                .try_for_each(|(c_block, x_block)| {
                    let n = x_block.len() / k;
                    for (p, panel) in self.data.chunks_exact(rows * k).enumerate() {
                        let first = p * rows;
                        gemm_into(
                            (rows.min(out - first), n, k),
                            &mut c_block[first..],
                            (out, 1),
                            Strided {
                                ptr: panel,
                                cs: rows,
                                rs: 1,
                            },
                            Strided {
                                ptr: x_block,
                                cs: k,
                                rs: 1,
                            },
                            Parallelism::None,
                        )?;
                    }
                    Ok(())
                })?;
            return Ok(());
        }
        // Each panel's product, `rows × m` column-major (= `m × rows`
        // row-major), on one thread each.
        let parts: Vec<Result<Vec<f32>, ShapeMismatch>> = self
            .data
            .par_chunks_exact(rows * k)
            .with_min_len(exec.min_len())
            .map(|panel| {
                let mut d = vec![0f32; rows * m];
                gemm_into(
                    (rows, m, k),
                    &mut d,
                    (rows, 1),
                    Strided {
                        ptr: panel,
                        cs: rows,
                        rs: 1,
                    },
                    Strided {
                        ptr: x,
                        cs: k,
                        rs: 1,
                    },
                    Parallelism::None,
                )?;
                Ok(d)
            })
            .collect();
        for (p, d) in parts.into_iter().enumerate() {
            let d = d?;
            let first = p * rows;
            let width = rows.min(out - first);
            for (c_row, d_row) in c.chunks_exact_mut(out).zip(d.chunks_exact(rows)) {
                c_row[first..first + width].copy_from_slice(&d_row[..width]);
            }
        }
        Ok(())
    }
}

/// Token rows per task when [`PanelWeights::apply`] splits by rows: the
/// block's inputs (64 × 1536 floats at most, 384 KB) stay in L2 while every
/// panel of the weight streams past them.
const BLOCK_ROWS: usize = 64;
/// From this many rows on, [`PanelWeights::apply`] splits by row blocks (four
/// or more of them); below, by panels.
const BLOCK_SPLIT_ROWS: usize = 4 * BLOCK_ROWS;

fn checked(dims: &[usize]) -> Result<usize, ShapeMismatch> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| ShapeMismatch(format!("shape {dims:?} overflows")))
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

    /// `[rows × cols]` row-major transposed.
    fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let mut t = vec![0f32; w.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = w[r * cols + c];
            }
        }
        t
    }

    fn fill(len: usize, seed: u32) -> Vec<f32> {
        (0..len as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    fn worst(got: &[f32], want: &[f64]) -> f64 {
        assert_eq!(got.len(), want.len());
        got.iter()
            .zip(want)
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .fold(0f64, f64::max)
    }

    fn on_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(f)
    }

    /// Odd sizes around the kernels' block edges, and the encoder's own.
    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (3, 5, 7),
        (17, 33, 9),
        (64, 384, 1152),
        (5, 1536, 384),
        (300, 384, 40),
    ];

    #[test]
    fn products_match_the_triple_loop() {
        for &(m, k, n) in SHAPES {
            let (a, b) = (fill(m * k, 7), fill(k * n, 11));
            let want = naive(&a, &b, m, k, n);
            for threads in [1, 2] {
                let got =
                    on_threads(threads, || batched_matmul(&a, &b, 1, m, k, n, Exec::Pool)).unwrap();
                let w = worst(&got, &want);
                assert!(w < 1e-3, "{m}x{k}x{n} on {threads} threads: {w}");
            }
        }
    }

    #[test]
    fn weight_panels_match_the_triple_loop() {
        // `X · Wᵀ` with W in the file's `[out, in]` layout, for panel
        // heights that divide `out` and ones that leave a padded last panel.
        for &(m, k, n) in SHAPES {
            let (x, w) = (fill(m * k, 13), fill(n * k, 17));
            let want = naive(&x, &transpose(&w, n, k), m, k, n);
            for rows in [1, 8, 16, 32, PanelWeights::kernel_rows()] {
                let panels = PanelWeights::new(&w, n, k, rows).unwrap();
                let pooled = on_threads(2, || panels.apply(&x, m, Exec::Pool)).unwrap();
                let e = worst(&pooled, &want);
                assert!(e < 1e-3, "{m}x{k}x{n}, panels of {rows}: {e}");
                for threads in [1, 2] {
                    let got = on_threads(threads, || panels.apply(&x, m, Exec::Inline)).unwrap();
                    assert_eq!(got, pooled, "inline on a {threads}-thread pool");
                }
                // A row's result does not depend on the rows around it, nor
                // on which split (row blocks or panels) the row count picks.
                let few = 3.min(m);
                let head = panels.apply(&x[..few * k], few, Exec::Pool).unwrap();
                assert_eq!(
                    head,
                    pooled[..few * n],
                    "{m}x{k}x{n}: first {few} rows alone"
                );
            }
        }
    }

    #[test]
    fn batches_are_independent_products() {
        let (batch, m, k, n) = (3, 4, 6, 5);
        let (a, b) = (fill(batch * m * k, 3), fill(batch * k * n, 5));
        let got = batched_matmul(&a, &b, batch, m, k, n, Exec::Pool).unwrap();
        for i in 0..batch {
            let want = naive(&a[i * m * k..][..m * k], &b[i * k * n..][..k * n], m, k, n);
            assert!(worst(&got[i * m * n..][..m * n], &want) < 1e-4);
        }
    }

    #[test]
    fn wrong_buffers_are_refused() {
        let a = vec![0f32; 6];
        let b = vec![0f32; 5];
        let err = batched_matmul(&a, &b, 1, 2, 3, 2, Exec::Pool).err();
        assert!(err.is_some_and(|e| e.0.contains("expected 6 and 6")));
        assert_eq!(
            batched_matmul(&[], &[0.0; 12], 1, 0, 3, 4, Exec::Inline).ok(),
            Some(Vec::new())
        );
        assert_eq!(
            batched_matmul(&[], &[], 2, 2, 0, 2, Exec::Inline).ok(),
            Some(vec![0.0; 8])
        );
        assert!(PanelWeights::new(&[0.0; 5], 2, 3, 16).is_err());
        assert!(PanelWeights::new(&[0.0; 6], 2, 3, 0).is_err());
        assert!(PanelWeights::new(&[], 2, 0, 16).is_err());
        // No output rows: the row blocks of `apply` would be chunks of 0.
        assert!(PanelWeights::new(&[], 0, 3, 16).is_err());
        let p = PanelWeights::new(&[1.0; 6], 2, 3, 16).unwrap();
        let err = p.apply(&[0.0; 5], 2, Exec::Pool).err();
        assert!(err.is_some_and(|e| e.0.contains("width 3 got 5 values for 2 rows")));
        // Strides that would leave the buffer are refused before gemm runs.
        let mut d = [0f32; 4];
        let r = gemm_into(
            (2, 2, 2),
            &mut d,
            (1, 2),
            Strided {
                ptr: &[0.0; 4],
                cs: 1,
                rs: 3,
            },
            Strided {
                ptr: &[0.0; 4],
                cs: 1,
                rs: 2,
            },
            Parallelism::None,
        );
        assert!(r.is_err());
    }

    /// Attention's products computed directly give gemm's bits on every
    /// attention shape (`QKᵀ`: len × 32 · 32 × len; `PV`: len × len · len ×
    /// 32) from 3 to 256 tokens, inline and on the pool, with Q/K-like
    /// values and with softmax-like rows (positive, summing to 1).
    #[test]
    fn attention_products_give_gemm_s_bits() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let dh = 32;
        for len in 3..=DIRECT_MAX {
            let exec = if len % 2 == 0 {
                Exec::Pool
            } else {
                Exec::Inline
            };
            let qk = (len, dh, len);
            let mut p: Vec<f32> = (0..len * len).map(|_| rng.gen_range(0.0f32..1.0)).collect();
            for row in p.chunks_exact_mut(len) {
                let sum: f32 = row.iter().sum();
                row.iter_mut().for_each(|x| *x /= sum);
            }
            for (m, k, n) in [qk, (len, len, dh)] {
                let a: Vec<f32> = if k == len {
                    p.clone()
                } else {
                    (0..m * k).map(|_| rng.gen_range(-3.0f32..3.0)).collect()
                };
                let b: Vec<f32> = (0..k * n).map(|_| rng.gen_range(-3.0f32..3.0)).collect();
                let want = pool
                    .install(|| batched_matmul(&a, &b, 1, m, k, n, exec))
                    .unwrap();
                let got = pool
                    .install(|| attention_matmul(&a, &b, 1, m, k, n, exec))
                    .unwrap();
                let same = want
                    .iter()
                    .zip(&got)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "[{m}×{k}]·[{k}×{n}]: direct and gemm bits differ");
            }
        }
        // Two products in one call, and wrong buffers refused.
        let a: Vec<f32> = (0..2 * 5 * 4).map(|i| i as f32 * 0.1).collect();
        let b: Vec<f32> = (0..2 * 4 * 3).map(|i| 1.0 - i as f32 * 0.05).collect();
        assert_eq!(
            attention_matmul(&a, &b, 2, 5, 4, 3, Exec::Inline).unwrap(),
            batched_matmul(&a, &b, 2, 5, 4, 3, Exec::Inline).unwrap()
        );
        assert!(attention_matmul(&a[1..], &b, 2, 5, 4, 3, Exec::Inline).is_err());
    }
}
