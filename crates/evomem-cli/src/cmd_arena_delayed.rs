//! `evomem arena delayed`: TIDE's Arena B, the delayed-feedback rating
//! stream (`evomem_arena::delayed`).
//!
//! Loads a rated dataset (ml-100k as RecBole atomic files), replays it in
//! time order for every method at every label delay δ, and writes
//! `report.md`, `delayed.json`, `settings.json` and SVG plots of MAE and
//! RMSE against δ into `--out`. Methods are the arena's own (`static`,
//! `full-history`, `retrieval`, `reflection`, `mem0`, `mf`, `global-mean`)
//! and any family of the table that serves predict decisions (`memrl`,
//! `tide`, with keys: `tide[cf=false]`).

use crate::settings::Settings;
use anyhow::Context as _;
use evomem_arena::delayed::run::{DelayedConfig, DelayedInputs, DEFAULT_METHODS};
use evomem_arena::delayed::stream::Half;
use evomem_arena::delayed::{markdown, run_arena, write_report};
use evomem_llm::LlmHub;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `evomem arena delayed`.
#[derive(clap::Args, Debug)]
pub struct DelayedArgs {
    /// Dataset folder with explicit ratings (e.g. ml-100k).
    #[arg(long)]
    data: PathBuf,
    /// Data format; detected from the files when omitted.
    #[arg(long, value_parser = ["recbole", "agentcf", "iagent", "jsonl"])]
    format: Option<String>,
    /// Label delays δ, in the user's own ratings.
    #[arg(long, default_value = "0,5,10,20", value_delimiter = ',')]
    delays: Vec<usize>,
    /// Comma-separated methods (arena methods or family specs); `static`
    /// (the MEG reference) and `global-mean` always run. `--methods` is
    /// the same flag's older name.
    #[arg(long = "policy", alias = "methods", value_name = "POLICY", default_value = DEFAULT_METHODS)]
    methods: String,
    /// Keep a seeded subsample of N users (all their ratings).
    #[arg(long)]
    users: Option<usize>,
    /// Keep one half of the users, split by a seeded hash of their id:
    /// develop on `dev`, report on `report` with a seed not used while
    /// developing.
    #[arg(long, default_value = "all", value_parser = ["all", "dev", "report"])]
    half: String,
    /// Seed of the user split into halves (independent of --seed).
    #[arg(long, default_value_t = 0)]
    split_seed: u64,
    /// Seed (subsample, policies, bootstrap).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Bootstrap resamples for the MEG CIs.
    #[arg(long, default_value_t = 1000)]
    resamples: usize,
    /// The δ at which MEG, negative transfer, memory and tokens are shown.
    #[arg(long, default_value_t = 5)]
    meg_delay: usize,
    /// Backend of the families' roles: offline, openai:MODEL@URL or
    /// gguf:PATH [settings `llm.default`: offline].
    #[arg(long)]
    llm: Option<String>,
    /// Backend of one role, `ROLE=SPEC` (repeatable).
    #[arg(long = "llm-role", value_name = "ROLE=SPEC")]
    llm_role: Vec<String>,
    /// Models folder for the embedder [~/.cache/evomem/models].
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
}

/// Run `evomem arena delayed`.
pub fn run(a: DelayedArgs, mut s: Settings) -> anyhow::Result<()> {
    crate::cmd_eval::apply_llm_flags(&mut s, a.llm.as_ref(), &a.llm_role)?;
    if let Some(m) = &a.models_dir {
        s.models_dir = m.clone();
    }
    s.validate()?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let loaded = evomem_eval::compat::load_data(&a.data, a.format.as_deref())
        .with_context(|| format!("loading {}", a.data.display()))?;
    let llm = s.llm.clone();
    let hub_for = move || -> Result<Arc<LlmHub>, String> {
        LlmHub::from_config(&llm, evomem_llm::CacheSettings::off())
            .map(|h| Arc::new(h.with_estimate(true)))
            .map_err(|e| e.to_string())
    };
    let (embedder, _notice, _cache) = crate::cmd_eval::load_embedder(&s)?;
    let cfg = DelayedConfig {
        delays: a.delays.clone(),
        methods: vec![a.methods.clone()],
        users: a.users,
        half: Half::parse(&a.half)?,
        split_seed: a.split_seed,
        seed: a.seed,
        resamples: a.resamples,
        meg_delay: a.meg_delay,
    };
    evomem_eval::run::dir::write_json(&a.out.join("settings.json"), &s)?;
    let started = std::time::Instant::now();
    let progress = |m: &str| eprintln!("{m}");
    let report = run_arena(
        &cfg,
        &DelayedInputs {
            data: &loaded.dataset,
            embedder,
            hub_for: &hub_for,
        },
        &progress,
    )?;
    write_report(&a.out, &report)?;
    print!("{}", markdown(&report));
    println!(
        "{} users, {} ratings, {} runs, wall time {:.1} s; results in {}",
        report.users,
        report.events,
        report.rows.len(),
        started.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}
