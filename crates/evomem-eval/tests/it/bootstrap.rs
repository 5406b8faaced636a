//! Paired bootstrap: properties and a plain reference implementation.

use evomem_eval::bootstrap::{paired_bootstrap, quantile_sorted, BootstrapConfig, BootstrapError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn sample(n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let a: Vec<f64> = (0..n)
        .map(|_| f64::from(u8::from(rng.gen_bool(0.3))))
        .collect();
    let b: Vec<f64> = (0..n)
        .map(|_| f64::from(u8::from(rng.gen_bool(0.45))))
        .collect();
    (a, b)
}

/// Plain reference: same RNG stream, explicit loops, sort, type-7 quantiles.
fn reference(a: &[f64], b: &[f64], cfg: &BootstrapConfig) -> (f64, f64, f64) {
    let n = a.len();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut means = Vec::new();
    for _ in 0..cfg.resamples {
        let mut total = 0.0;
        for _ in 0..n {
            let i = rng.gen_range(0..n);
            total += b[i] - a[i];
        }
        means.push(total / n as f64);
    }
    means.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let q = |p: f64| {
        let h = p * (means.len() - 1) as f64;
        let lo = h.floor() as usize;
        let hi = h.ceil() as usize;
        means[lo] + (h - lo as f64) * (means[hi] - means[lo])
    };
    let delta = b.iter().sum::<f64>() / n as f64 - a.iter().sum::<f64>() / n as f64;
    let alpha = 1.0 - cfg.level;
    (delta, q(alpha / 2.0), q(1.0 - alpha / 2.0))
}

#[test]
fn matches_plain_reference() {
    let (a, b) = sample(200, 1);
    for cfg in [
        BootstrapConfig::default(),
        BootstrapConfig {
            resamples: 333,
            level: 0.9,
            seed: 7,
        },
    ] {
        let ci = paired_bootstrap(&a, &b, &cfg).unwrap();
        let (d, lo, hi) = reference(&a, &b, &cfg);
        assert!((ci.delta - d).abs() < 1e-12);
        assert!((ci.ci_low - lo).abs() < 1e-12, "{} vs {lo}", ci.ci_low);
        assert!((ci.ci_high - hi).abs() < 1e-12);
    }
}

#[test]
fn identical_runs_give_a_zero_interval() {
    let (a, _) = sample(50, 2);
    let ci = paired_bootstrap(&a, &a, &BootstrapConfig::default()).unwrap();
    assert_eq!((ci.delta, ci.ci_low, ci.ci_high), (0.0, 0.0, 0.0));
    assert_eq!(ci.p_value, 1.0);
}

#[test]
fn constant_shift_is_exact() {
    let (a, _) = sample(40, 3);
    let b: Vec<f64> = a.iter().map(|x| x + 0.25).collect();
    let ci = paired_bootstrap(&a, &b, &BootstrapConfig::default()).unwrap();
    assert!((ci.ci_low - 0.25).abs() < 1e-12 && (ci.ci_high - 0.25).abs() < 1e-12);
    assert_eq!(ci.p_value, 0.0);
}

#[test]
fn interval_contains_delta_and_widens_with_level() {
    let (a, b) = sample(300, 4);
    let narrow = paired_bootstrap(
        &a,
        &b,
        &BootstrapConfig {
            level: 0.8,
            ..Default::default()
        },
    )
    .unwrap();
    let wide = paired_bootstrap(
        &a,
        &b,
        &BootstrapConfig {
            level: 0.99,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(wide.ci_low <= narrow.ci_low && wide.ci_high >= narrow.ci_high);
    assert!(narrow.ci_low <= narrow.delta && narrow.delta <= narrow.ci_high);
    // Antisymmetry: swapping the runs negates the statistic.
    let swapped = paired_bootstrap(&b, &a, &BootstrapConfig::default()).unwrap();
    let fwd = paired_bootstrap(&a, &b, &BootstrapConfig::default()).unwrap();
    assert!((swapped.delta + fwd.delta).abs() < 1e-12);
    assert!((swapped.ci_low + fwd.ci_high).abs() < 1e-12);
}

#[test]
fn seeded_and_deterministic() {
    let (a, b) = sample(100, 5);
    let x = paired_bootstrap(&a, &b, &BootstrapConfig::default()).unwrap();
    let y = paired_bootstrap(&a, &b, &BootstrapConfig::default()).unwrap();
    assert_eq!(x, y);
}

#[test]
fn rejects_bad_input() {
    let cfg = BootstrapConfig::default();
    assert_eq!(
        paired_bootstrap(&[1.0], &[1.0, 2.0], &cfg),
        Err(BootstrapError::LengthMismatch { a: 1, b: 2 })
    );
    assert_eq!(paired_bootstrap(&[], &[], &cfg), Err(BootstrapError::Empty));
    let bad = BootstrapConfig { level: 1.5, ..cfg };
    assert!(matches!(
        paired_bootstrap(&[1.0], &[1.0], &bad),
        Err(BootstrapError::Config(_))
    ));
}

#[test]
fn quantiles_interpolate() {
    let v = [0.0, 1.0, 2.0, 3.0];
    assert_eq!(quantile_sorted(&v, 0.0), 0.0);
    assert_eq!(quantile_sorted(&v, 1.0), 3.0);
    assert!((quantile_sorted(&v, 0.5) - 1.5).abs() < 1e-12);
    assert!(quantile_sorted(&[], 0.5).is_nan());
}
