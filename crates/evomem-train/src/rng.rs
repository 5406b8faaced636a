//! Seeded random tensors: every draw a trainer makes comes from here.
//!
//! candle's CPU device cannot seed its generator, so initial weights,
//! dropout masks and shuffles are drawn from ChaCha8 streams and handed to
//! candle as plain vectors.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A ChaCha8 stream per purpose: the seed mixed with the stream number by
/// the SplitMix64 every run-time fit uses ([`evomem_kit::holdout::mix`]).
pub fn stream(seed: u64, stream: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(evomem_kit::holdout::mix(seed, stream))
}

/// `n` draws from N(0, std²) (Box–Muller).
pub fn normal(rng: &mut ChaCha8Rng, n: usize, std: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
        let u2: f32 = rng.gen();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f32::consts::TAU * u2;
        out.push(r * t.cos() * std);
        out.push(r * t.sin() * std);
    }
    out.truncate(n);
    out
}

/// `n` draws from U(−a, a).
pub fn uniform(rng: &mut ChaCha8Rng, n: usize, a: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-a..a)).collect()
}

/// An inverted-dropout mask of `n` values: 0 with probability `p`, else
/// `1 / (1 − p)`.
///
/// Element `i` reads the stream's `i`-th 32-bit word `w` as the uniform
/// `(w >> 8) · 2⁻²⁴`, which is what `rng.gen::<f32>()` draws from the same
/// word: the words are read in one bulk fill and turned into the mask in
/// parallel, and the mask equals the one `n` calls of `gen` give.
pub fn dropout_mask(rng: &mut ChaCha8Rng, n: usize, p: f32) -> Vec<f32> {
    use rayon::prelude::*;
    let keep = 1.0 / (1.0 - p);
    let mut words = vec![0u32; n];
    rng.fill(words.as_mut_slice());
    words
        .par_iter()
        .with_min_len(4096)
        .map(|&w| {
            let u = (w >> 8) as f32 * (1.0 / (1u32 << 24) as f32);
            if u < p {
                0.0
            } else {
                keep
            }
        })
        .collect()
}

/// A Fisher–Yates shuffle of `0..n`.
pub fn permutation(rng: &mut ChaCha8Rng, n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.gen_range(0..=i);
        v.swap(i, j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_draws_have_the_asked_spread() {
        let mut r = stream(1, 2);
        let v = normal(&mut r, 20_000, 0.02);
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / v.len() as f32;
        assert!(mean.abs() < 0.001, "{mean}");
        assert!((var.sqrt() - 0.02).abs() < 0.001, "{}", var.sqrt());
    }

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a = uniform(&mut stream(7, 1), 8, 1.0);
        assert_eq!(a, uniform(&mut stream(7, 1), 8, 1.0));
        assert_ne!(a, uniform(&mut stream(7, 2), 8, 1.0));
    }

    #[test]
    fn the_bulk_mask_is_the_one_gen_draws() {
        let p = 0.3;
        let keep = 1.0 / (1.0 - p);
        let mut a = stream(4, 4);
        let mut b = stream(4, 4);
        for n in [1usize, 7, 10_000] {
            let bulk = dropout_mask(&mut a, n, p);
            let one_by_one: Vec<f32> = (0..n)
                .map(|_| if b.gen::<f32>() < p { 0.0 } else { keep })
                .collect();
            assert_eq!(bulk, one_by_one, "n = {n}");
        }
        // The streams are still in step after the bulk draws.
        assert_eq!(a.gen::<u64>(), b.gen::<u64>());
    }

    #[test]
    fn dropout_keeps_the_expectation() {
        let m = dropout_mask(&mut stream(3, 3), 50_000, 0.5);
        let mean = m.iter().sum::<f32>() / m.len() as f32;
        assert!((mean - 1.0).abs() < 0.02, "{mean}");
        assert!(m.iter().all(|&x| x == 0.0 || x == 2.0));
    }
}
