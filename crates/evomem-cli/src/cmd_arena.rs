//! `evomem arena`: the lifelong-task arenas of the RoMeRL paper.
//!
//! - `evomem arena lifelong`: LifelongAgentBench DB tasks executed in
//!   SQLite, with trajectory-memory policies (`romerl`, `memrl`,
//!   `memrl[cap=4]`, `memrl[ucb=true]`) between a frozen agent and its
//!   feedback; runtime-learning or transfer setting, optional noise
//!   injection.
//! - `evomem arena bandit`: the recurrent non-stationary bandit toy (C+C,
//!   A+A, C+A two-slot memories).
//!
//! Both write a folder with JSON results, `report.md` and SVG plots.

use crate::settings::Settings;
use anyhow::Context as _;
use evomem_arena::bandit::{self, BanditConfig};
use evomem_arena::lifelong::run::{self, ArenaInputs, LifelongConfig, Setting};
use evomem_llm::LlmHub;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `evomem arena`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: ArenaCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ArenaCommand {
    /// LifelongAgentBench DB tasks, executed in SQLite, judged as the
    /// benchmark judges them.
    Lifelong(Box<LifelongArgs>),
    /// The recurrent non-stationary bandit toy.
    Bandit(BanditArgs),
    /// TIDE's Arena B: the delayed-feedback rating stream (ml-100k ratings
    /// predicted before their labels mature δ ratings later).
    Delayed(Box<crate::cmd_arena_delayed::DelayedArgs>),
    /// TIDE's Arena A: the seeded generation-feedback simulator (staged
    /// lifecycles, environment shocks, five injected noise types).
    Generation(crate::cmd_arena_generation::GenerationArgs),
}

/// Flags of `evomem arena lifelong`.
#[derive(clap::Args, Debug)]
pub struct LifelongArgs {
    /// `db_bench_data.json`, or the folder holding it.
    #[arg(long)]
    data: PathBuf,
    /// Comma-separated policy specs; `no-memory` always runs as reference.
    #[arg(long, default_value = "romerl,memrl,memrl[cap=4],memrl[ucb=true]")]
    policy: String,
    /// runtime (all tasks, memory carried across epochs) or transfer (learn
    /// on a fixed 7:3 split, evaluate the 30% with memory frozen).
    #[arg(long, default_value = "runtime", value_parser = ["runtime", "transfer"])]
    setting: String,
    /// Epochs (rounds after the first under --noise).
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    /// Base seed (task order per epoch, policy exploration).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Runs per policy (seeds seed, seed+1, ...); intervals are Student-t
    /// over these, so one seed gives zero-width intervals (warned).
    #[arg(long, default_value_t = 3)]
    seeds: usize,
    /// Only the first N tasks (by sample index).
    #[arg(long)]
    tasks: Option<usize>,
    /// Noise injection: after the first round, null this share of memory
    /// entries (the paper uses 0.1), then run --epochs rounds.
    #[arg(long)]
    noise: Option<f64>,
    /// Backend of the agent's `act` role and every other role: offline or
    /// openai:MODEL@URL [settings `llm.default`: offline].
    #[arg(long)]
    llm: Option<String>,
    /// Backend of one role, `ROLE=SPEC` (repeatable), e.g. `act=openai:m@URL`.
    #[arg(long = "llm-role", value_name = "ROLE=SPEC")]
    llm_role: Vec<String>,
    /// LLM cache mode: off, read-write or replay-only [off].
    #[arg(long, default_value = "off", value_parser = ["off", "read-write", "replay-only"])]
    llm_cache: String,
    /// LLM cache file (default: OUT/llm-cache.sqlite when the cache is on).
    #[arg(long)]
    llm_cache_path: Option<PathBuf>,
    /// Models folder for the embedder [~/.cache/evomem/models].
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
}

/// Flags of `evomem arena bandit`.
#[derive(clap::Args, Debug)]
pub struct BanditArgs {
    /// Seeds.
    #[arg(long, default_value_t = 1000)]
    seeds: usize,
    /// Base seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
}

/// Run `evomem arena`.
pub fn run(args: Args, settings: Settings) -> anyhow::Result<()> {
    match args.command {
        ArenaCommand::Lifelong(a) => lifelong(*a, settings),
        ArenaCommand::Bandit(a) => run_bandit(a),
        ArenaCommand::Delayed(a) => crate::cmd_arena_delayed::run(*a, settings),
        ArenaCommand::Generation(a) => crate::cmd_arena_generation::run(a),
    }
}

fn run_bandit(a: BanditArgs) -> anyhow::Result<()> {
    let cfg = BanditConfig {
        seeds: a.seeds,
        seed: a.seed,
        ..BanditConfig::default()
    };
    let report = bandit::run(&cfg)?;
    bandit::write_report(&a.out, &report)?;
    print!("{}", bandit::markdown(&report));
    println!("results in {}", a.out.display());
    Ok(())
}

/// The file of LifelongAgentBench's DB tasks.
const LIFELONG_FILE: &str = "db_bench_data.json";

fn lifelong(a: LifelongArgs, mut s: Settings) -> anyhow::Result<()> {
    if a.seeds < 2 {
        eprintln!(
            "warning: --seeds {}: with one run per policy every interval has zero width and says nothing about seed variation; use --seeds 3 or more to compare policies",
            a.seeds
        );
    }
    crate::cmd_eval::apply_llm_flags(&mut s, a.llm.as_ref(), &a.llm_role)?;
    if let Some(m) = &a.models_dir {
        s.models_dir = m.clone();
    }
    s.validate()?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let cache = crate::cmd_eval::llm_cache(&a.llm_cache, a.llm_cache_path.as_ref(), &a.out)?;
    let llm = s.llm.clone();
    // Offline roles always estimate their tokens: the arena reports LLM
    // calls and tokens per epoch either way.
    let hub_for = move || -> Result<Arc<LlmHub>, String> {
        LlmHub::from_config(&llm, cache.clone())
            .map(|h| Arc::new(h.with_estimate(true)))
            .map_err(|e| e.to_string())
    };
    let (embedder, _notice, _cache) = crate::cmd_eval::load_embedder(&s)?;
    let setting: Setting = a.setting.parse()?;
    // A folder stands for the file the benchmark ships in it.
    let data = if a.data.is_dir() {
        let f = a.data.join(LIFELONG_FILE);
        if !f.is_file() {
            anyhow::bail!(
                "arena lifelong --data {}: a folder without {LIFELONG_FILE} in it",
                a.data.display()
            );
        }
        f
    } else {
        a.data.clone()
    };
    let cfg = LifelongConfig {
        data,
        policies: vec![a.policy.clone()],
        setting,
        epochs: a.epochs,
        seed: a.seed,
        seeds: a.seeds,
        tasks: a.tasks,
        noise: a.noise,
        llm: crate::cmd_eval::llm_label(&s.llm),
    };
    evomem_eval::run::dir::write_json(&a.out.join("settings.json"), &s)?;
    let started = std::time::Instant::now();
    let progress = |m: &str| eprintln!("{m}");
    let report = run::run_arena(
        &cfg,
        &ArenaInputs {
            embedder,
            hub_for: &hub_for,
        },
        &progress,
    )?;
    run::write_report(&a.out, &report)?;
    println!(
        "{} tasks, {} run(s), wall time {:.1} s; results in {}",
        report.tasks,
        report.runs.len(),
        started.elapsed().as_secs_f64(),
        a.out.display()
    );
    print!("{}", run::markdown(&report));
    // The hub stops a run after a few failures in a row; a short run can
    // end below that with every `act` call answered offline. A run asked
    // for a model never passes as an offline one.
    let act = s.llm.roles.get("act").unwrap_or(&s.llm.default);
    let model = !matches!(
        evomem_llm::BackendSpec::parse(act, "llm.roles.act"),
        Ok(evomem_llm::BackendSpec::Offline) | Err(_)
    );
    let (calls, fallbacks) = report
        .runs
        .iter()
        .flat_map(|p| p.epochs.iter())
        .fold((0u64, 0u64), |(c, f), e| (c + e.calls, f + e.fallbacks));
    if model && calls > 0 && fallbacks >= calls {
        anyhow::bail!(
            "every `act` call of the run fell back to the offline agent ({fallbacks} of {calls}): the backend `{act}` never answered; the report in {} is an offline run's",
            a.out.display()
        );
    }
    Ok(())
}
