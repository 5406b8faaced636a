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
//! - `bench llm`: prompt and generated tokens per second of the in-process
//!   GGUF backend on fixed prompts of three lengths, and of an
//!   OpenAI-compatible server (llama.cpp's `llama-server`) on the same
//!   prompts when `--server` is given, in one run. The server is timed from
//!   outside (wall time per request), so its split between prompt and
//!   generation is estimated from the in-process prompt rate.

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
    Llm(LlmArgs),
    /// The HTTP service as a client sees it: ingest/s, search p50/p99 and
    /// RSS at 10k and 50k ml-100k memories, MiniLM and hashing embedders,
    /// against Mem0's figures and the targets.
    Service(ServiceArgs),
    /// An open-loop load generator against a running `evomem serve`:
    /// mixed adds and searches at a fixed rate; p50/p99 and errors.
    Load(LoadArgs),
    /// Write an ml-100k-shaped data set of N interactions (RecBole files).
    Synth(crate::cmd_bench_scale::SynthArgs),
    /// Cost curves: wall time and peak RSS of every policy at each size,
    /// fitted log-log exponents, a report with SVG plots.
    Scale(crate::cmd_bench_scale::ScaleArgs),
    /// (internal) Run one child and record its wall time and peak RSS.
    #[command(hide = true)]
    Measure(crate::cmd_bench_scale::MeasureArgs),
}

#[derive(clap::Args)]
struct ServiceArgs {
    /// ml-100k in RecBole atomic files (default: ~/.cache/evomem/data/ml-100k).
    #[arg(long)]
    data: Option<PathBuf>,
    #[arg(long, value_delimiter = ',', default_values_t = vec![10_000usize, 50_000])]
    sizes: Vec<usize>,
    /// Embedders to run: `minilm`, `hashing`.
    #[arg(long, value_delimiter = ',', default_values_t = vec!["minilm".to_string(), "hashing".to_string()])]
    embedders: Vec<String>,
    #[arg(long, default_value_t = 100)]
    batch: usize,
    #[arg(long, default_value_t = 4)]
    clients: usize,
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct LoadArgs {
    /// Base URL of the service.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    url: String,
    /// API key (or set EVOMEM_KEY).
    #[arg(long, env = "EVOMEM_KEY")]
    key: String,
    /// Requests per second.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Seconds.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Share of adds (the rest are searches).
    #[arg(long, default_value_t = 0.2)]
    add_share: f64,
    #[arg(long, default_value_t = 10)]
    batch: usize,
    #[arg(long, default_value_t = 100)]
    users: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// Flags of `evomem bench llm`.
#[derive(clap::Args)]
struct LlmArgs {
    /// The GGUF file (default: SmolLM2 in the models folder, as fetched by
    /// `scripts/fetch-smollm2.sh`).
    #[arg(long)]
    gguf: Option<PathBuf>,
    /// An OpenAI-compatible server serving the same model, `MODEL@URL`
    /// (e.g. `smollm2@http://127.0.0.1:8080/v1`).
    #[arg(long)]
    server: Option<String>,
    /// Inference threads of the in-process backend.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Tokens generated per prompt (greedy; the same cap for both).
    #[arg(long, default_value_t = 64)]
    max_tokens: u32,
    /// Repetitions of each prompt; the best is kept.
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Keep the file's Q4_1 tensors (candle's scalar kernel) instead of
    /// converting them to Q8_0 at load.
    #[arg(long)]
    no_requantize: bool,
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
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<()> {
    match args.what {
        What::Embed(a) => bench_embed(a, settings),
        What::Index(a) => bench_index(a),
        What::Llm(a) => bench_llm(a, settings),
        What::Service(a) => bench_service(a, settings),
        What::Load(a) => bench_load(a),
        What::Synth(a) => crate::cmd_bench_scale::synth(a),
        What::Scale(a) => crate::cmd_bench_scale::scale(a, settings),
        What::Measure(a) => crate::cmd_bench_scale::measure(a),
    }
}

// -------------------------------------------------------------- service --

fn bench_service(a: ServiceArgs, settings: &Settings) -> anyhow::Result<()> {
    use evomem_serve::bench::*;
    let data = a.data.unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/evomem/data/ml-100k")
    });
    let texts = ml100k_texts(&data, 385).map_err(anyhow::Error::msg)?;
    let max = a.sizes.iter().copied().max().unwrap_or(0);
    if texts.len() < max {
        bail!(
            "{} holds {} ratings, fewer than --sizes {max}",
            data.display(),
            texts.len()
        );
    }
    if a.embedders.len() == 1 {
        println!(
            "bench service: {} ml-100k memory texts (first 10k from the first 385 users), batch {}, {} clients, {} sequential searches per size, {} service threads",
            max, a.batch, a.clients, a.queries, a.threads
        );
    }
    let cfg = ServiceBenchConfig {
        sizes: a.sizes.clone(),
        batch: a.batch,
        clients: a.clients,
        queries: a.queries,
        seed: a.seed,
        threads: a.threads,
    };
    let mut all: Vec<ServiceBench> = Vec::new();
    if a.embedders.len() > 1 {
        // One process per embedder, so that each RSS figure is its own.
        let exe = std::env::current_exe().context("locating the evomem binary")?;
        for e in &a.embedders {
            let json = tempfile_dir()?.join("one.json");
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(["bench", "service", "--embedders", e])
                .arg("--data")
                .arg(&data)
                .arg("--sizes")
                .arg(
                    a.sizes
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                )
                .args([
                    "--batch",
                    &a.batch.to_string(),
                    "--clients",
                    &a.clients.to_string(),
                ])
                .args([
                    "--queries",
                    &a.queries.to_string(),
                    "--threads",
                    &a.threads.to_string(),
                ])
                .args(["--seed", &a.seed.to_string()])
                .arg("--json")
                .arg(&json);
            let st = cmd
                .status()
                .context("running bench service for one embedder")?;
            if !st.success() {
                bail!("bench service --embedders {e} failed ({st})");
            }
            let text = std::fs::read_to_string(&json)?;
            let mut one: Vec<ServiceBench> = serde_json::from_str(&text)?;
            all.append(&mut one);
            if let Some(d) = json.parent() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    let single = all.is_empty();
    for e in a.embedders.iter().filter(|_| single) {
        let embedder: std::sync::Arc<dyn evomem_core::Embedder> = match e.as_str() {
            "hashing" => std::sync::Arc::new(evomem_embed::HashingEmbedder::new(
                evomem_embed::FALLBACK_DIM,
            )),
            "minilm" => {
                let dir = evomem_embed::minilm_dir(&settings.models_dir);
                if !dir.is_dir() {
                    bail!(
                        "no MiniLM at {} (run scripts/fetch-models.sh)",
                        dir.display()
                    );
                }
                let opts = evomem_embed::MiniLmOptions {
                    threads: a.threads.max(1),
                    ..evomem_embed::MiniLmOptions::default()
                };
                std::sync::Arc::new(evomem_embed::MiniLmEmbedder::load(&dir, opts)?)
            }
            other => bail!("--embedders: unknown `{other}` (minilm, hashing)"),
        };
        let tmp = tempfile_dir()?;
        let r = run_service_bench(embedder, &texts, &cfg, &tmp).map_err(anyhow::Error::msg)?;
        print_service_bench(&r);
        let _ = std::fs::remove_dir_all(&tmp);
        all.push(r);
    }
    if let [m, h, ..] = all.as_slice() {
        for (sm, sh) in m.sizes.iter().zip(&h.sizes) {
            println!(
                "  {} memories: {} ingest is {:.2}x {}'s, search p50 {:.2}x (embedding's share of the time)",
                sm.memories,
                m.embedder,
                sm.ingest_per_s / sh.ingest_per_s.max(1e-9),
                h.embedder,
                sm.search.p50_ms / sh.search.p50_ms.max(1e-9)
            );
        }
    }
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&all)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let p = std::env::temp_dir().join(format!(
        "evomem-bench-service-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

fn bench_load(a: LoadArgs) -> anyhow::Result<()> {
    use evomem_serve::bench::*;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cfg = LoadConfig {
        url: a.url.clone(),
        key: a.key,
        rate: a.rate,
        duration: std::time::Duration::from_secs(a.duration),
        add_share: a.add_share,
        batch: a.batch,
        users: a.users,
        seed: a.seed,
    };
    println!(
        "bench load: {} req/s for {} s against {} ({:.0}% adds of {} memories, the rest searches)",
        a.rate,
        a.duration,
        a.url,
        a.add_share * 100.0,
        a.batch
    );
    let r = rt.block_on(run_load(cfg));
    println!(
        "sent {} (achieved {:.1} req/s), errors {}",
        r.sent, r.achieved_rate, r.errors
    );
    for (name, l) in [("add", &r.add), ("search", &r.search)] {
        println!(
            "  {name:<6} n={:<6} p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            l.n, l.p50_ms, l.p99_ms, l.max_ms
        );
    }
    for e in &r.error_samples {
        println!("  error: {e}");
    }
    if r.errors > 0 {
        bail!("{} of {} requests failed", r.errors, r.sent);
    }
    Ok(())
}

// ------------------------------------------------------------------ llm --

/// The fixed prompts: a short question, a medium and a long preference
/// summary request (the shape of `mars_extract`), by target length.
fn llm_prompts() -> Vec<(&'static str, String)> {
    let titles = [
        "Toy Story",
        "GoldenEye",
        "Four Rooms",
        "Get Shorty",
        "Copycat",
        "Twelve Monkeys",
        "Babe",
        "Dead Man Walking",
        "Richard III",
        "Seven",
        "The Usual Suspects",
        "Mighty Aphrodite",
        "Postino, Il",
        "Braveheart",
        "Taxi Driver",
        "Apollo 13",
        "Batman Forever",
        "Belle de jour",
        "Crumb",
        "Desperado",
    ];
    let history = |n: usize| {
        (0..n)
            .map(|i| {
                format!(
                    "- rated \"{}\" {} stars",
                    titles[i % titles.len()],
                    1 + i % 5
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    vec![
        (
            "short",
            "What is the capital of France? Answer in one sentence.".to_string(),
        ),
        (
            "medium",
            format!(
                "Summarise this viewer's taste in three sentences.\n{}",
                history(20)
            ),
        ),
        (
            "long",
            format!(
                "Summarise this viewer's taste in three sentences.\n{}",
                history(90)
            ),
        ),
    ]
}

fn bench_llm(a: LlmArgs, settings: &Settings) -> anyhow::Result<()> {
    use evomem_core::{ChatMessage, ChatRequest, LanguageModel};
    use std::time::Instant;
    let path = a.gguf.clone().unwrap_or_else(|| {
        settings
            .models_dir
            .join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if !path.is_file() {
        bail!(
            "{}: no GGUF model (run scripts/fetch-smollm2.sh or pass --gguf)",
            path.display()
        );
    }
    let lm = evomem_gguf::GgufModel::load(
        &path,
        evomem_gguf::GgufOptions {
            threads: a.threads,
            requantize: !a.no_requantize,
            ..Default::default()
        },
    )?;
    let server = match &a.server {
        None => None,
        Some(spec) => {
            let (model, url) = spec
                .split_once('@')
                .with_context(|| format!("--server `{spec}`: expected MODEL@URL"))?;
            let mut oc = evomem_llm::openai::OpenAiConfig::new(model.to_string(), url.to_string());
            oc.response_format = "none".to_string();
            oc.timeout = std::time::Duration::from_secs(600);
            Some(evomem_llm::openai::OpenAiCompatible::new(oc)?)
        }
    };
    println!(
        "model {} · {} thread(s) · greedy, max {} tokens · best of {}",
        path.display(),
        a.threads,
        a.max_tokens,
        a.reps
    );
    println!(
        "{:<7} {:>7} {:>7} {:>13} {:>13} {:>15} {:>9}",
        "prompt", "p_tok", "g_tok", "prompt tok/s", "gen tok/s", "server tok/s", "ratio"
    );
    for (name, text) in llm_prompts() {
        let mut req = ChatRequest::new(vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user(text),
        ]);
        req.max_tokens = Some(a.max_tokens);
        let mut best: Option<(evomem_core::ChatResponse, evomem_gguf::Timing)> = None;
        for _ in 0..a.reps.max(1) {
            let (r, t) = lm.complete_timed(&req)?;
            let better = best
                .as_ref()
                .is_none_or(|(_, b)| t.prompt_s + t.generate_s < b.prompt_s + b.generate_s);
            if better {
                best = Some((r, t));
            }
        }
        let Some((r, t)) = best else { continue };
        let p_tok = r.usage.prompt_tokens as f64;
        let g_tok = r.usage.completion_tokens as f64;
        let p_rate = p_tok / t.prompt_s.max(1e-9);
        let g_rate = g_tok / t.generate_s.max(1e-9);
        let in_process = (p_tok + g_tok) / (t.prompt_s + t.generate_s).max(1e-9);
        let (srv, ratio) = match &server {
            None => ("-".to_string(), "-".to_string()),
            Some(c) => {
                let mut best_s = f64::INFINITY;
                let mut toks = 0.0;
                for _ in 0..a.reps.max(1) {
                    let t0 = Instant::now();
                    let sr = c.complete(&req)?;
                    let s = t0.elapsed().as_secs_f64();
                    if s < best_s {
                        best_s = s;
                        toks = (sr.usage.prompt_tokens + sr.usage.completion_tokens) as f64;
                    }
                }
                let rate = toks / best_s.max(1e-9);
                (format!("{rate:.1}"), format!("{:.2}x", in_process / rate))
            }
        };
        println!(
            "{name:<7} {:>7} {:>7} {p_rate:>13.1} {g_rate:>13.1} {srv:>15} {ratio:>9}",
            r.usage.prompt_tokens, r.usage.completion_tokens
        );
    }
    println!(
        "ratio: in-process (prompt+generated) tokens/s over the server's, same prompts and cap"
    );
    Ok(())
}

// ---------------------------------------------------------------- embed --

fn bench_embed(a: EmbedArgs, settings: &Settings) -> anyhow::Result<()> {
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
