//! `evomem bench embed|index`: benchmarks that print ratios measured in the
//! same run, so that machine load affects both sides alike.
//!
//! - `bench embed`: MiniLM sentences/s (batch 32, `--threads`, short and long
//!   texts) and cold-load time, against Python sentence-transformers (torch
//!   CPU) on the same texts with the same thread count and batch size, when a
//!   Python with `sentence_transformers` is available (`--python`); the
//!   int8 MiniLM beside f32, and its recall@10 against f32's exact top 10.
//! - `bench index`: `HnswIndex` against `FlatIndex` at each `--sizes` on
//!   clustered unit vectors: build time, memory (RSS growth), QPS, p50/p99
//!   latency and recall@k, for several `ef` values.
//! - `bench llm` (`cmd_bench_llm`), `bench service` and `bench load`
//!   (`cmd_bench_service`), `bench synth|scale` (`cmd_bench_scale`),
//!   `bench train` (`cmd_bench_train`: sasrec and lightgcn against RecBole).

use crate::settings::Settings;
use anyhow::{bail, Context};
use evomem_embed::bench::{print_report, run_embed_bench, EmbedBenchConfig};
use evomem_index::bench::{run_index_bench, IndexBenchConfig};
use evomem_index::HnswParams;
use std::path::PathBuf;

/// Interpreter used for the torch comparison when `--python` is not given.
const DEFAULT_PYTHON: &str = "/tmp/evomem-st-venv/bin/python";

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
    /// In-process GGUF model against an OpenAI-compatible server: tokens/s.
    #[cfg(all(feature = "gguf", feature = "http"))]
    Llm(crate::cmd_bench_llm::LlmArgs),
    /// The HTTP service as a client sees it: ingest/s, search p50/p99 and
    /// RSS at 10k and 50k ml-100k memories, MiniLM and hashing embedders,
    /// against Mem0's figures and the targets.
    #[cfg(feature = "serve")]
    Service(crate::cmd_bench_service::ServiceArgs),
    /// An open-loop load generator against a running `evomem serve`:
    /// mixed adds and searches at a fixed rate; p50/p99 and errors.
    #[cfg(feature = "serve")]
    Load(crate::cmd_bench_service::LoadArgs),
    /// The trained baselines' training cost (s/epoch, time to the best
    /// validation epoch, peak RSS) against RecBole on the same data.
    Train(crate::cmd_bench_train::TrainArgs),
    /// Write an ml-100k-shaped data set of N interactions (RecBole files).
    Synth(crate::cmd_bench_scale::SynthArgs),
    /// Cost curves: wall time and peak RSS of every policy at each size,
    /// fitted log-log exponents, a report with SVG plots.
    Scale(crate::cmd_bench_scale::ScaleArgs),
    /// (internal) Run one child and record its wall time and peak RSS.
    #[command(hide = true)]
    Measure(crate::cmd_bench_scale::MeasureArgs),
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
    /// Corpus texts of the int8 recall@10 against f32 (0: skip it).
    #[arg(long, default_value_t = 10_000)]
    recall_docs: usize,
    /// Queries of the int8 recall@10 against f32.
    #[arg(long, default_value_t = 1_000)]
    recall_queries: usize,
    /// Write the timed texts as JSON (`{"short": [...], "long": [...]}`)
    /// to this file and exit without measuring: the input of
    /// `scripts/bench-torch-embed.py`.
    #[arg(long)]
    texts_out: Option<PathBuf>,
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
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<()> {
    match args.what {
        What::Embed(a) => bench_embed(a, settings),
        What::Index(a) => bench_index(a),
        #[cfg(all(feature = "gguf", feature = "http"))]
        What::Llm(a) => crate::cmd_bench_llm::bench_llm(a, settings),
        #[cfg(feature = "serve")]
        What::Service(a) => crate::cmd_bench_service::bench_service(a, settings),
        #[cfg(feature = "serve")]
        What::Load(a) => crate::cmd_bench_service::bench_load(a),
        What::Train(a) => crate::cmd_bench_train::bench_train(a),
        What::Synth(a) => crate::cmd_bench_scale::synth(a),
        What::Scale(a) => crate::cmd_bench_scale::scale(a, settings),
        What::Measure(a) => crate::cmd_bench_scale::measure(a),
    }
}

// ---------------------------------------------------------------- embed --

fn bench_embed(a: EmbedArgs, settings: &Settings) -> anyhow::Result<()> {
    if let Some(path) = &a.texts_out {
        let (short, long) = evomem_embed::bench::timed_texts(a.short, a.long);
        let json = serde_json::json!({ "short": short, "long": long });
        std::fs::write(path, json.to_string() + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "{} short and {} long texts written to {}",
            short.len(),
            long.len(),
            path.display()
        );
        return Ok(());
    }
    let model_dir =
        evomem_embed::minilm_dir(a.models_dir.as_deref().unwrap_or(&settings.models_dir));
    if !model_dir.is_dir() {
        bail!(
            "no MiniLM model folder at {} (run scripts/fetch-models.sh)",
            model_dir.display()
        );
    }
    let python = if a.no_python {
        None
    } else {
        a.python.clone().or_else(|| {
            let p = PathBuf::from(DEFAULT_PYTHON);
            p.exists().then_some(p)
        })
    };
    let cfg = EmbedBenchConfig {
        model_dir,
        threads: a.threads,
        batch: a.batch,
        short: a.short,
        long: a.long,
        reps: a.reps,
        python,
        recall_docs: a.recall_docs,
        recall_queries: a.recall_queries,
    };
    let report = run_embed_bench(&cfg).context("running the MiniLM benchmark")?;
    print_report(&report, a.threads, a.batch);
    if report.python.is_err() && a.python.is_none() && !a.no_python {
        println!(
            "(to compare: python3 -m venv /tmp/evomem-st-venv && /tmp/evomem-st-venv/bin/pip install sentence-transformers)"
        );
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
