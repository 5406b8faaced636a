//! `evomem eval` and `evomem ablate`: load data, run policies under a ranking
//! protocol, write the run directory and print a results table.

use anyhow::Context as _;
use evomem_core::Embedder;
use evomem_embed::CachedEmbedder;
use evomem_eval::protocol::{
    FixedCandidates, ProtocolConfig, ProtocolKind, Sampling, TargetSplit, UserSelection,
};
use evomem_eval::run::{EvalConfig, ProgressEvent, RunInputs};
use evomem_llm::{CacheMode, CacheSettings, LlmHub};
use evomem_policy::registry::PolicySpec;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Data, protocol, backend and output flags shared by `eval` and `ablate`.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Dataset folder.
    #[arg(long)]
    pub data: PathBuf,
    /// Data format; detected from the files when omitted.
    #[arg(long, value_parser = ["recbole", "agentcf", "iagent", "jsonl"])]
    pub format: Option<String>,
    /// Ranking protocol.
    #[arg(long, default_value = "retrospective", value_parser = ["retrospective", "evolving"])]
    pub protocol: String,
    /// Negatives per decision.
    #[arg(long, default_value_t = 9)]
    pub negatives: usize,
    /// Negative sampling: uniform or popularity.
    #[arg(long, default_value = "uniform", value_parser = ["uniform", "popularity"])]
    pub sampling: String,
    /// Fixed candidate lists from the source: as-given or first-n (first --negatives).
    #[arg(long, default_value = "as-given", value_parser = ["as-given", "first-n"])]
    pub fixed_candidates: String,
    /// Seed for negatives, shuffles, subsamples and policies.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Users: all, a number N (seeded choice), active (MARS: 50-200 interactions,
    /// 100 users, seed 42) or light (10-30, 100 users, seed 64).
    #[arg(long, default_value = "all")]
    pub users: String,
    /// Evolving protocol: maintain(Tick) every N interactions (0 = never).
    #[arg(long, default_value_t = 1000)]
    pub tick: usize,
    /// Which held-out interaction is ranked: test (reported numbers) or valid
    /// (the one before it, for tuning; test interactions stay hidden).
    #[arg(long, default_value = "test", value_parser = ["test", "valid"])]
    pub target: String,
    /// LLM backend: offline or openai:MODEL@URL.
    #[arg(long, default_value = "offline")]
    pub llm: String,
    /// For roles answered offline, also estimate the prompt and completion
    /// tokens a model would have been charged (rendered prompt and offline
    /// answer, ceil(chars/4)); reported in metrics.json and the report.
    #[arg(long)]
    pub llm_estimate: bool,
    /// Write each policy's full op log to `OUT/<policy>/ops.jsonl` (on), or
    /// skip it (off: grids of large policies, e.g. AtomRec writes ~580 MB per
    /// variant on ml-100k). `evomem inspect` and `explain` need it.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub ops_log: String,
    /// LLM cache mode: off, read-write or replay-only.
    #[arg(long, default_value = "off", value_parser = ["off", "read-write", "replay-only"])]
    pub llm_cache: String,
    /// LLM cache file (default: OUT/llm-cache.sqlite when the cache is on).
    #[arg(long)]
    pub llm_cache_path: Option<PathBuf>,
    /// Models folder for the embedder (default: $EVOMEM_MODELS_DIR or ~/.cache/evomem/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Persistent embedding cache (SQLite, keyed by model id and text hash),
    /// or `off`. Default: `embed-cache.sqlite` next to the models folder.
    /// Only model embedders are cached; the hashing fallback is cheaper than
    /// a lookup.
    #[arg(long)]
    pub embed_cache: Option<String>,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
}

/// Flags of `evomem eval`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated policy specs, e.g. `random,pop,mars[kcat=4]`.
    #[arg(long)]
    pub policy: String,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Flags of `evomem ablate`.
#[derive(clap::Args, Debug)]
pub struct AblateArgs {
    /// Policy family whose grid to run, e.g. `mars`.
    #[arg(long)]
    pub policy: String,
    /// Grid name, e.g. `tiers`.
    #[arg(long)]
    pub grid: String,
    /// Extra policy specs to run alongside the grid (e.g. `no-memory,pop`).
    #[arg(long)]
    pub with: Option<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Run `evomem eval`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let specs = PolicySpec::parse_list(&args.policy).context("parsing --policy")?;
    run_specs(specs, &args.common)
}

/// Run `evomem ablate`.
pub fn run_ablate(args: AblateArgs) -> anyhow::Result<()> {
    let mut specs = evomem_policy::registry::grid(&args.policy, &args.grid)
        .with_context(|| format!("expanding grid `{}` of `{}`", args.grid, args.policy))?;
    if let Some(extra) = &args.with {
        let mut more = PolicySpec::parse_list(extra).context("parsing --with")?;
        more.extend(specs);
        specs = more;
    }
    run_specs(specs, &args.common)
}

fn protocol_config(a: &CommonArgs) -> anyhow::Result<ProtocolConfig> {
    Ok(ProtocolConfig {
        protocol: a.protocol.parse::<ProtocolKind>()?,
        negatives: a.negatives,
        sampling: a.sampling.parse::<Sampling>()?,
        fixed_candidates: a.fixed_candidates.parse::<FixedCandidates>()?,
        seed: a.seed,
        users: a.users.parse::<UserSelection>()?,
        tick: a.tick,
        target: a.target.parse::<TargetSplit>()?,
    })
}

fn run_specs(specs: Vec<PolicySpec>, a: &CommonArgs) -> anyhow::Result<()> {
    let protocol = protocol_config(a)?;
    let cache_mode: CacheMode = a
        .llm_cache
        .parse()
        .map_err(|e| anyhow::anyhow!("--llm-cache: {e}"))?;
    let cache_path = match (cache_mode, &a.llm_cache_path) {
        (CacheMode::Off, _) => None,
        (_, Some(p)) => Some(p.clone()),
        (_, None) => Some(a.out.join("llm-cache.sqlite")),
    };
    let config = EvalConfig {
        data: a.data.clone(),
        format: a.format.clone(),
        protocol,
        policies: specs.iter().map(|s| s.to_string()).collect(),
        llm: a.llm.clone(),
        llm_estimate: a.llm_estimate,
        ops_log: a.ops_log == "on",
        llm_cache: a.llm_cache.clone(),
        llm_cache_path: cache_path.clone(),
        models_dir: a.models_dir.clone(),
    };

    let loaded = evomem_eval::compat::load_data(&a.data, a.format.as_deref())
        .with_context(|| format!("loading {}", a.data.display()))?;
    eprintln!(
        "loaded `{}`: {} users, {} items, {} interactions",
        loaded.dataset.name,
        loaded.dataset.users.len(),
        loaded.dataset.catalog.len(),
        loaded.dataset.interactions.len()
    );
    let (embedder, notice) = evomem_eval::compat::default_embedder(a.models_dir.as_deref())
        .context("loading the embedder")?;
    if let Some(n) = &notice {
        eprintln!("{n}");
    }
    let embed_cache = match a.embed_cache.as_deref() {
        Some("off") => None,
        _ if embedder.model_id().starts_with("hash") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => Some(
            evomem_embed::models_dir()
                .parent()
                .map_or_else(|| PathBuf::from("."), PathBuf::from)
                .join("embed-cache.sqlite"),
        ),
    };
    let mut cache_handle = None;
    let embedder: Arc<dyn Embedder> = match embed_cache {
        None => embedder,
        Some(path) => {
            let c = Arc::new(
                CachedEmbedder::open(embedder, &path)
                    .with_context(|| format!("opening the embedding cache {}", path.display()))?,
            );
            cache_handle = Some(c.clone());
            c
        }
    };
    if let Some(parent) = cache_path.as_ref().and_then(|p| p.parent()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let settings = CacheSettings {
        mode: cache_mode,
        path: cache_path,
    };
    let llm_spec = a.llm.clone();
    let estimate = a.llm_estimate;
    let hub_for = move |_spec: &PolicySpec| -> Result<Arc<LlmHub>, String> {
        LlmHub::from_spec(&llm_spec, settings.clone())
            .map(|h| Arc::new(h.with_estimate(estimate)))
            .map_err(|e| e.to_string())
    };

    let bar = Mutex::new(None::<ProgressBar>);
    let progress = |ev: ProgressEvent| {
        let Ok(mut guard) = bar.lock() else { return };
        match ev {
            ProgressEvent::Started { total, policies } => {
                let pb = ProgressBar::new(total);
                if let Ok(style) = ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} steps ({eta}) {msg}",
                ) {
                    pb.set_style(style);
                }
                pb.set_message(format!("{policies} policies"));
                *guard = Some(pb);
            }
            ProgressEvent::Advanced(n) => {
                if let Some(pb) = guard.as_ref() {
                    pb.inc(n);
                }
            }
            ProgressEvent::PolicyDone { spec, wall_s } => {
                let line = format!("done: {spec} in {wall_s:.1} s");
                // A hidden bar (stderr is not a terminal: CI logs, `2> file`)
                // drops `println`; the per-policy lines still belong in the log.
                match guard.as_ref() {
                    Some(pb) if !pb.is_hidden() => pb.println(line),
                    _ => eprintln!("{line}"),
                }
            }
        }
    };
    let summary = evomem_eval::run::run_eval(
        &config,
        RunInputs {
            dataset: &loaded.dataset,
            data_sha256: loaded.files,
            embedder,
            embedder_notice: notice,
            hub_for: &hub_for,
            embed_cache: cache_handle.as_deref(),
        },
        &a.out,
        &progress,
    )?;
    if let Ok(mut guard) = bar.lock() {
        if let Some(pb) = guard.take() {
            pb.finish_and_clear();
        }
    }
    let rows: Vec<(String, evomem_core::metrics::RankMetrics)> = summary
        .policies
        .iter()
        .map(|p| (p.spec.clone(), p.metrics))
        .collect();
    println!(
        "{} users, {:?} protocol, seed {}; wall time {:.1} s; results in {}",
        summary.plan.decisions,
        config.protocol.protocol,
        config.protocol.seed,
        summary.wall_s,
        a.out.display()
    );
    print!("{}", evomem_eval::report::results_table(&rows));
    if let Some(line) = &summary.embed_cache {
        eprintln!("{line}");
    }
    Ok(())
}
