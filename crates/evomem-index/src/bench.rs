//! The HNSW-versus-flat benchmark behind `evomem bench index`.
//!
//! Lives in the library (not the CLI) so that its data generator is the same
//! seeded code the tests can reach. For each size it builds a [`FlatIndex`]
//! and an [`HnswIndex`] over the same synthetic unit vectors, answers the
//! same held-out queries with both, and reports build time, memory (growth of
//! the process's resident set), queries per second, p50/p99 latency and
//! recall@k of HNSW against the exact answers, for several `ef` values.
//!
//! The data are clustered (`clusters` random centres on the sphere plus
//! uniform noise), which resembles sentence embeddings far more than uniform
//! random vectors do; `clusters = 0` gives uniform vectors, the worst case for
//! any graph index.

use crate::{FlatIndex, HnswIndex, HnswParams, IndexError, VectorIndex};
use evomem_core::{normalize, MemoryId, Namespace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

/// What to benchmark.
#[derive(Debug, Clone)]
pub struct IndexBenchConfig {
    /// Index sizes.
    pub sizes: Vec<usize>,
    /// Vector dimension.
    pub dim: usize,
    /// Held-out queries per size.
    pub queries: usize,
    /// Top-k.
    pub k: usize,
    /// HNSW construction parameters (`ef_search` is overridden by `ef`).
    pub params: HnswParams,
    /// Search `ef` values to report.
    pub ef: Vec<usize>,
    /// Clusters in the synthetic data (0 = uniform).
    pub clusters: usize,
    /// Half-width of the uniform noise added to a centre before normalising.
    pub noise: f32,
    /// Seed of the data.
    pub seed: u64,
    /// Threads for the parallel HNSW build.
    pub build_threads: usize,
}

/// Query-side measurements of one index configuration.
#[derive(Debug, Clone)]
pub struct QueryReport {
    /// Label (`flat`, `hnsw ef=64`).
    pub label: String,
    /// Queries per second (one query at a time, one thread).
    pub qps: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Mean recall@k against exact search.
    pub recall: f64,
}

/// Measurements at one size.
#[derive(Debug, Clone)]
pub struct SizeReport {
    /// Number of indexed vectors.
    pub n: usize,
    /// Flat build time, seconds.
    pub flat_build_s: f64,
    /// HNSW build time, seconds.
    pub hnsw_build_s: f64,
    /// Resident-set growth while building the flat index, bytes.
    pub flat_mem_bytes: usize,
    /// Resident-set growth while building HNSW (graph + its exact store), bytes.
    pub hnsw_mem_bytes: usize,
    /// Exact search.
    pub flat: QueryReport,
    /// HNSW, one row per `ef`.
    pub hnsw: Vec<QueryReport>,
}

/// Unit vectors, row-major: `n` points around `centres` (uniform if empty).
pub fn synth_vectors(
    rng: &mut ChaCha8Rng,
    n: usize,
    dim: usize,
    centres: &[Vec<f32>],
    noise: f32,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * dim);
    let mut v = vec![0.0f32; dim];
    for _ in 0..n {
        if centres.is_empty() {
            v.iter_mut().for_each(|x| *x = rng.gen_range(-1.0f32..1.0));
        } else {
            let c = &centres[rng.gen_range(0..centres.len())];
            for (x, cx) in v.iter_mut().zip(c) {
                *x = cx + rng.gen_range(-noise..=noise);
            }
        }
        normalize(&mut v);
        out.extend_from_slice(&v);
    }
    out
}

/// Random unit centres.
pub fn synth_centres(rng: &mut ChaCha8Rng, clusters: usize, dim: usize) -> Vec<Vec<f32>> {
    (0..clusters)
        .map(|_| {
            let mut c: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
            normalize(&mut c);
            c
        })
        .collect()
}

fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|x| x.parse::<usize>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// QPS, p50 ms, p99 ms and the ids returned per query.
type QueryRun = (f64, f64, f64, Vec<Vec<MemoryId>>);

fn run_queries(
    idx: &dyn VectorIndex,
    queries: &[f32],
    dim: usize,
    k: usize,
) -> Result<QueryRun, IndexError> {
    let mut lat = Vec::new();
    let mut results = Vec::new();
    let t0 = Instant::now();
    for q in queries.chunks_exact(dim.max(1)) {
        let t = Instant::now();
        let hits = idx.search_all(q, k)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        results.push(hits.into_iter().map(|(id, _)| id).collect());
    }
    let total = t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    Ok((
        results.len() as f64 / total.max(1e-12),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        results,
    ))
}

/// Mean recall of `got` against `truth`.
pub fn recall_at_k(truth: &[Vec<MemoryId>], got: &[Vec<MemoryId>]) -> f64 {
    let mut hit = 0usize;
    let mut tot = 0usize;
    for (t, g) in truth.iter().zip(got) {
        tot += t.len();
        hit += t.iter().filter(|x| g.contains(x)).count();
    }
    if tot == 0 {
        1.0
    } else {
        hit as f64 / tot as f64
    }
}

/// Run the benchmark, calling `report` after each size.
pub fn run_index_bench(
    cfg: &IndexBenchConfig,
    mut report: impl FnMut(&SizeReport),
) -> Result<(), IndexError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cfg.build_threads.max(1))
        .build()
        .ok();
    for &n in &cfg.sizes {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let centres = synth_centres(&mut rng, cfg.clusters, cfg.dim);
        let data = synth_vectors(&mut rng, n, cfg.dim, &centres, cfg.noise);
        let queries = synth_vectors(&mut rng, cfg.queries, cfg.dim, &centres, cfg.noise);
        let ids: Vec<MemoryId> = (0..n).map(|i| MemoryId::new(format!("m{i:07}"))).collect();
        let ns = Namespace::shared();

        let rss0 = rss_bytes();
        let t = Instant::now();
        let mut flat = FlatIndex::new("bench", cfg.dim);
        for (id, v) in ids.iter().zip(data.chunks_exact(cfg.dim)) {
            flat.add(id.clone(), ns.clone(), v)?;
        }
        let flat_build_s = t.elapsed().as_secs_f64();
        let flat_mem_bytes = rss_bytes().saturating_sub(rss0);
        let (qps, p50_ms, p99_ms, truth) = run_queries(&flat, &queries, cfg.dim, cfg.k)?;
        let flat_report = QueryReport {
            label: "flat (exact)".into(),
            qps,
            p50_ms,
            p99_ms,
            recall: 1.0,
        };
        drop(flat);

        let rss1 = rss_bytes();
        let t = Instant::now();
        let entries = ids
            .iter()
            .zip(data.chunks_exact(cfg.dim))
            .map(|(id, v)| (id.clone(), ns.clone(), v));
        let build = || HnswIndex::bulk_load("bench", cfg.dim, cfg.params.clone(), entries);
        let mut hnsw = match &pool {
            Some(p) => p.install(build)?,
            None => build()?,
        };
        let hnsw_build_s = t.elapsed().as_secs_f64();
        let hnsw_mem_bytes = rss_bytes().saturating_sub(rss1);
        let mut rows = Vec::new();
        for &ef in &cfg.ef {
            hnsw.set_ef_search(ef);
            let (qps, p50_ms, p99_ms, got) = run_queries(&hnsw, &queries, cfg.dim, cfg.k)?;
            rows.push(QueryReport {
                label: format!("hnsw ef={ef}"),
                qps,
                p50_ms,
                p99_ms,
                recall: recall_at_k(&truth, &got),
            });
        }
        report(&SizeReport {
            n,
            flat_build_s,
            hnsw_build_s,
            flat_mem_bytes,
            hnsw_mem_bytes,
            flat: flat_report,
            hnsw: rows,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_bench_runs_and_recalls() {
        let cfg = IndexBenchConfig {
            sizes: vec![500],
            dim: 16,
            queries: 20,
            k: 5,
            params: HnswParams::default(),
            ef: vec![64],
            clusters: 10,
            noise: 0.3,
            seed: 1,
            build_threads: 1,
        };
        let mut seen = Vec::new();
        run_index_bench(&cfg, |r| seen.push(r.clone())).unwrap();
        assert_eq!(seen.len(), 1);
        assert!(seen[0].hnsw[0].recall > 0.9, "{:?}", seen[0].hnsw[0]);
    }
}
