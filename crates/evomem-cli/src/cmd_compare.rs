//! `evomem compare RUN_A RUN_B`: metric deltas (B − A) with paired bootstrap
//! CIs over the users both policy folders ranked.

use anyhow::Context as _;
use evomem_eval::bootstrap::BootstrapConfig;
use std::path::PathBuf;

/// Flags of `evomem compare`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Policy folder of run A (holds per_user.jsonl), e.g. OUT/pop.
    pub run_a: PathBuf,
    /// Policy folder of run B.
    pub run_b: PathBuf,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 1000)]
    pub resamples: usize,
    /// Confidence level.
    #[arg(long, default_value_t = 0.95)]
    pub level: f64,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Also write the comparison as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Run `evomem compare`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = BootstrapConfig {
        resamples: args.resamples,
        level: args.level,
        seed: args.seed,
    };
    let c = evomem_eval::compare::compare_runs(&args.run_a, &args.run_b, &cfg)?;
    println!("A = {}", args.run_a.display());
    println!("B = {}", args.run_b.display());
    println!(
        "{} common users ({} only in A, {} only in B); paired bootstrap, {} resamples, {:.0}% CI, seed {}",
        c.common_users,
        c.only_a,
        c.only_b,
        cfg.resamples,
        cfg.level * 100.0,
        cfg.seed
    );
    if c.target_mismatch > 0 {
        eprintln!(
            "warning: {} users have different targets in the two runs (different data or protocol?)",
            c.target_mismatch
        );
    }
    print!("{}", evomem_eval::compare::comparison_table(&c));
    if let Some(p) = &args.json {
        let s = serde_json::to_string_pretty(&c)?;
        std::fs::write(p, s + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
