//! Run the HNSW-versus-flat benchmark without building the whole CLI (same
//! code as `evomem bench index`):
//!
//! ```text
//! cargo run --release -p evomem-index --example bench_index -- 10000,100000
//! ```

use evomem_index::bench::{run_index_bench, IndexBenchConfig};
use evomem_index::HnswParams;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "10000,100000".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let cfg = IndexBenchConfig {
        sizes,
        dim: 384,
        queries: 500,
        k: 10,
        params: HnswParams::default(),
        ef: vec![32, 64, 128, 256],
        clusters: 1000,
        noise: 0.08,
        seed: 42,
        build_threads: 2,
    };
    run_index_bench(&cfg, |r| {
        println!(
            "n={} build flat {:.2}s hnsw {:.2}s; RSS growth flat {:.0} MiB hnsw {:.0} MiB",
            r.n,
            r.flat_build_s,
            r.hnsw_build_s,
            r.flat_mem_bytes as f64 / 1048576.0,
            r.hnsw_mem_bytes as f64 / 1048576.0
        );
        for row in std::iter::once(&r.flat).chain(&r.hnsw) {
            println!(
                "  {:<14} QPS {:>9.1}  p50 {:>7.3} ms  p99 {:>7.3} ms  recall@10 {:.4}  QPS ratio {:>6.1}x",
                row.label,
                row.qps,
                row.p50_ms,
                row.p99_ms,
                row.recall,
                row.qps / r.flat.qps.max(1e-12)
            );
        }
    })?;
    Ok(())
}
