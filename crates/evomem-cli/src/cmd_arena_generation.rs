//! `evomem arena generation`: TIDE's Arena A, the seeded generation-feedback
//! simulator (`evomem_arena::generation`): 20 controlled episodes with five
//! injected noise types, six methods through the same engine loop, a report
//! with Responsibility F1, Correct Edit, Bad-Memory Survival, Future MEG,
//! win and negative-transfer rates (means and 95% CIs over seeds).

use anyhow::Context as _;
use evomem_arena::generation::{self, GenerationConfig, METHODS};
use evomem_policy::families::tide::generator::Adherence;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `evomem arena generation`.
#[derive(clap::Args, Debug)]
pub struct GenerationArgs {
    /// Episodes per seed (five noise types in turn).
    #[arg(long, default_value_t = 20)]
    episodes: usize,
    /// Seeds (seed, seed+1, ...); CIs are over these.
    #[arg(long, default_value_t = 5)]
    seeds: usize,
    /// Base seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Learning steps per episode.
    #[arg(long, default_value_t = 150)]
    learn: usize,
    /// Strictly future tasks per episode.
    #[arg(long, default_value_t = 30)]
    future: usize,
    /// Comma-separated method specs (the static reference always runs).
    /// `--methods` is the same flag's older name.
    #[arg(long = "policy", alias = "methods", value_name = "POLICY")]
    methods: Option<String>,
    /// The world's sampling generator: probability that it takes up a
    /// tentatively worded guideline (the same for every method).
    #[arg(long, default_value_t = 0.05)]
    adhere_hedged: f64,
    /// The world's sampling generator: probability that it takes up any
    /// other guideline.
    #[arg(long, default_value_t = 0.8)]
    adhere_firm: f64,
    /// The ground truth's threshold: a guideline the generator took up is
    /// responsible when leaving it out moves the expected true effect on
    /// its dimension by at least this much (logit CTR).
    #[arg(long, default_value_t = 0.1)]
    effect_min: f64,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
}

/// Run `evomem arena generation`.
pub fn run(a: GenerationArgs) -> anyhow::Result<()> {
    let methods = match &a.methods {
        Some(m) => evomem_policy::PolicySpec::parse_list(m)?
            .into_iter()
            .map(|s| s.to_string())
            .collect(),
        None => METHODS.iter().map(|s| s.to_string()).collect(),
    };
    let cfg = GenerationConfig {
        episodes: a.episodes,
        seeds: a.seeds,
        seed: a.seed,
        learn: a.learn,
        future: a.future,
        methods,
        adherence: Adherence {
            hedged: a.adhere_hedged,
            firm: a.adhere_firm,
        },
        effect_min: a.effect_min,
    };
    if !(a.effect_min.is_finite() && a.effect_min >= 0.0) {
        anyhow::bail!("--effect-min must be a number >= 0, got {}", a.effect_min);
    }
    for (flag, p) in [
        ("--adhere-hedged", a.adhere_hedged),
        ("--adhere-firm", a.adhere_firm),
    ] {
        if !(0.0..=1.0).contains(&p) {
            anyhow::bail!("{flag} must be a probability in [0, 1], got {p}");
        }
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let started = std::time::Instant::now();
    // The generation policies embed nothing; the hashing embedder satisfies
    // the policy kit without loading a model.
    let report = generation::run(&cfg, Arc::new(evomem_embed::HashingEmbedder::new(64)))?;
    generation::write_report(&a.out, &report)?;
    print!("{}", generation::markdown(&report));
    println!(
        "{} episodes x {} seeds x {} methods, wall time {:.1} s; results in {}",
        cfg.episodes,
        cfg.seeds,
        report.methods.len(),
        started.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}
