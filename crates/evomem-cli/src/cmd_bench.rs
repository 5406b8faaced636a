//! `evomem bench embed|index`: benchmarks that print ratios measured in the
//! same run, so that machine load affects both sides alike.
//!
//! - `bench embed`: MiniLM sentences/s (batch 32, `--threads`, short and long
//!   texts) and cold-load time, against Python sentence-transformers (torch
//!   CPU) on the same texts with the same thread count and batch size, when a
//!   Python with `sentence_transformers` is available (`--python`).
//! - `bench index`: `HnswIndex` against `FlatIndex` at each `--sizes` on
//!   clustered unit vectors: build time, memory (RSS growth), QPS, p50/p99
//!   latency and recall@k, for several `ef` values.

use anyhow::{bail, Context};
use evomem_core::Embedder;
use evomem_index::bench::{run_index_bench, IndexBenchConfig};
use evomem_index::HnswParams;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Flags of `evomem bench`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// MiniLM throughput and cold-load time, against Python sentence-transformers.
    Embed(EmbedArgs),
    /// HNSW against exact flat search: QPS, latency, recall, build time, memory.
    Index(IndexArgs),
}

/// Flags of `evomem bench embed`.
#[derive(clap::Args)]
struct EmbedArgs {
    /// Worker threads for both Rust and torch.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Texts per forward pass for both.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Number of short texts (about 10 words).
    #[arg(long, default_value_t = 512)]
    short: usize,
    /// Number of long texts (about 180 words, near the 256-token limit).
    #[arg(long, default_value_t = 96)]
    long: usize,
    /// Models directory holding `all-MiniLM-L6-v2/`.
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Python interpreter with `sentence_transformers` installed
    /// (default: /tmp/evomem-st-venv/bin/python when it exists).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Skip the Python comparison.
    #[arg(long)]
    no_python: bool,
    /// Repetitions of each timed pass; the best is kept.
    #[arg(long, default_value_t = 2)]
    reps: usize,
}

/// Flags of `evomem bench index`.
#[derive(clap::Args)]
struct IndexArgs {
    /// Index sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![10_000usize, 100_000])]
    sizes: Vec<usize>,
    /// Vector dimension.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Queries per size (held out from the indexed vectors).
    #[arg(long, default_value_t = 500)]
    queries: usize,
    /// Top-k.
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// HNSW `M`.
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// HNSW `efConstruction`.
    #[arg(long, default_value_t = 200)]
    ef_construction: usize,
    /// HNSW search `ef` values to report.
    #[arg(long, value_delimiter = ',', default_values_t = vec![32usize, 64, 128, 256])]
    ef: Vec<usize>,
    /// Number of clusters in the synthetic data (0 = uniform on the sphere).
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Half-width of the uniform noise around a cluster centre (per component,
    /// before normalising).
    #[arg(long, default_value_t = 0.08)]
    noise: f32,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Build threads (rayon) for the HNSW bulk load.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// Run `evomem bench`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Embed(a) => bench_embed(a),
        What::Index(a) => bench_index(a),
    }
}

// ---------------------------------------------------------------- embed --

fn time_best(reps: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

const PY_BENCH: &str = r#"
import json, os, sys, time
threads, batch, reps = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t0 = time.perf_counter()
import torch
torch.set_num_threads(threads)
from sentence_transformers import SentenceTransformer
t1 = time.perf_counter()
m = SentenceTransformer(sys.argv[2], device="cpu")
m.max_seq_length = 256
t2 = time.perf_counter()
d = json.load(open(sys.argv[1]))
m.encode(d["short"][:batch], batch_size=batch)
out = {"import_s": t1 - t0, "load_s": t2 - t1, "torch": torch.__version__,
       "threads": torch.get_num_threads()}
for key in ("short", "long"):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        m.encode(d[key], batch_size=batch, normalize_embeddings=True)
        best = min(best, time.perf_counter() - t)
    out[key + "_s"] = best
print(json.dumps(out))
"#;

fn run_python(
    python: &Path,
    model_dir: &Path,
    short: &[String],
    long: &[String],
    a: &EmbedArgs,
) -> anyhow::Result<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("evomem-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let script = dir.join("st_bench.py");
    let data = dir.join("texts.json");
    std::fs::write(&script, PY_BENCH).with_context(|| format!("writing {}", script.display()))?;
    std::fs::write(&data, serde_json::json!({"short": short, "long": long}).to_string())
        .with_context(|| format!("writing {}", data.display()))?;
    let threads = a.threads.to_string();
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(&data)
        .arg(model_dir)
        .arg(&threads)
        .arg(a.batch.to_string())
        .arg(a.reps.to_string())
        .env("OMP_NUM_THREADS", &threads)
        .env("MKL_NUM_THREADS", &threads)
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).with_context(|| format!("parsing python output `{line}`"))
}

fn bench_embed(a: EmbedArgs) -> anyhow::Result<()> {
    let dir = evomem_embed::minilm_dir(a.models_dir.as_deref());
    if !dir.is_dir() {
        bail!(
            "no MiniLM model folder at {} (run scripts/fetch-models.sh)",
            dir.display()
        );
    }
    let (short, long) = evomem_embed::bench_texts::bench_texts(7, a.short, a.long);
    let opts = evomem_embed::MiniLmOptions {
        threads: a.threads,
        batch_size: a.batch,
        ..evomem_embed::MiniLmOptions::default()
    };
    let t = Instant::now();
    let model = evomem_embed::MiniLmEmbedder::load(&dir, opts)?;
    let load_s = t.elapsed().as_secs_f64();
    let s_refs: Vec<&str> = short.iter().map(String::as_str).collect();
    let l_refs: Vec<&str> = long.iter().map(String::as_str).collect();
    let t = Instant::now();
    model.embed(&s_refs[..a.batch.min(s_refs.len())])?;
    let first_s = t.elapsed().as_secs_f64();
    let short_s = time_best(a.reps, || Ok(model.embed(&s_refs).map(|_| ())?))?;
    let long_s = time_best(a.reps, || Ok(model.embed(&l_refs).map(|_| ())?))?;
    let rs_short = short.len() as f64 / short_s;
    let rs_long = long.len() as f64 / long_s;
    println!(
        "MiniLM (candle) threads={} batch={}: cold load {:.3}s, first batch {:.3}s",
        a.threads, a.batch, load_s, first_s
    );
    println!("  short ({} texts): {:8.1} sentences/s", short.len(), rs_short);
    println!("  long  ({} texts): {:8.1} sentences/s", long.len(), rs_long);

    let python = a.python.clone().or_else(|| {
        let p = PathBuf::from("/tmp/evomem-st-venv/bin/python");
        p.exists().then_some(p)
    });
    match (a.no_python, python) {
        (true, _) => println!("python comparison skipped (--no-python)"),
        (false, None) => println!(
            "python comparison skipped: no --python given and /tmp/evomem-st-venv missing \
             (python3 -m venv /tmp/evomem-st-venv && /tmp/evomem-st-venv/bin/pip install sentence-transformers)"
        ),
        (false, Some(py)) => match run_python(&py, &dir, &short, &long, &a) {
            Err(e) => println!("python comparison failed: {e:#}"),
            Ok(v) => {
                let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN);
                let py_short = short.len() as f64 / f("short_s");
                let py_long = long.len() as f64 / f("long_s");
                println!(
                    "sentence-transformers (torch {} CPU, threads={}): load {:.3}s (+ import {:.2}s)",
                    v.get("torch").and_then(|t| t.as_str()).unwrap_or("?"),
                    v.get("threads").and_then(serde_json::Value::as_u64).unwrap_or(0),
                    f("load_s"),
                    f("import_s")
                );
                println!("  short: {py_short:8.1} sentences/s");
                println!("  long:  {py_long:8.1} sentences/s");
                println!("ratio candle/torch (same run, same texts, >1 = Rust faster):");
                println!("  short {:.2}x  long {:.2}x  cold load {:.2}x (torch load / candle load)",
                    rs_short / py_short, rs_long / py_long, f("load_s") / load_s);
            }
        },
    }
    Ok(())
}

// ---------------------------------------------------------------- index --

fn bench_index(a: IndexArgs) -> anyhow::Result<()> {
    let cfg = IndexBenchConfig {
        sizes: a.sizes.clone(),
        dim: a.dim,
        queries: a.queries,
        k: a.k,
        params: HnswParams {
            max_nb_connection: a.m,
            ef_construction: a.ef_construction,
            ..HnswParams::default()
        },
        ef: a.ef.clone(),
        clusters: a.clusters,
        noise: a.noise,
        seed: a.seed,
        build_threads: a.threads,
    };
    println!(
        "index bench: dim={} k={} queries={} M={} efConstruction={} clusters={} noise={} build threads={} (queries: 1 thread, one at a time)",
        a.dim, a.k, a.queries, a.m, a.ef_construction, a.clusters, a.noise, a.threads
    );
    run_index_bench(&cfg, |r| {
        let mib = |b: usize| b as f64 / 1048576.0;
        println!("\n== n = {} ==", r.n);
        println!(
            "build: flat {:.2}s, hnsw {:.2}s ({:.1}x flat); memory (RSS growth): flat {:.0} MiB, hnsw {:.0} MiB (graph + its exact store)",
            r.flat_build_s,
            r.hnsw_build_s,
            r.hnsw_build_s / r.flat_build_s.max(1e-9),
            mib(r.flat_mem_bytes),
            mib(r.hnsw_mem_bytes)
        );
        println!(
            "{:<14} {:>10} {:>9} {:>9} {:>10} {:>10}",
            "index", "QPS", "p50 ms", "p99 ms", "recall@k", "QPS ratio"
        );
        for row in std::iter::once(&r.flat).chain(&r.hnsw) {
            println!(
                "{:<14} {:>10.1} {:>9.3} {:>9.3} {:>10.4} {:>9.1}x",
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
