//! `evomem compare A B`: metric deltas (B − A) with paired bootstrap CIs
//! over the users both policy folders ranked. `A` and `B` are two policy
//! folders (`OUT/pop`), or two run folders (`OUT`), whose common policies
//! (or the one `--policy` names) are compared one by one.

use anyhow::Context as _;
use evomem_eval::bootstrap::BootstrapConfig;
use evomem_eval::run::dir::files::PER_USER;
use evomem_eval::run::dir::RunDir;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Flags of `evomem compare`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run A: a policy folder (holds per_user.jsonl, e.g. OUT/pop) or a
    /// run folder (OUT: every policy both runs hold, or --policy).
    pub run_a: PathBuf,
    /// Run B: the same kind of folder as A.
    pub run_b: PathBuf,
    /// With two run folders: compare only this policy (its folder name).
    #[arg(long)]
    pub policy: Option<String>,
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

/// Fewer common users than this get a warning beside the interval.
const FEW_USERS: usize = 30;

/// What a folder given to `compare` is.
enum Folder {
    /// A policy folder itself.
    Policy,
    /// A run folder: its policy folders by name.
    Run(BTreeMap<String, PathBuf>),
}

/// Read `path` as the run folder format says ([`RunDir::policies`]).
fn folder(path: &Path) -> anyhow::Result<Folder> {
    let policies = RunDir::new(path)
        .policies()
        .with_context(|| format!("reading {}", path.display()))?;
    if let [only] = policies.as_slice() {
        if only.path() == path {
            return Ok(Folder::Policy);
        }
    }
    if policies.is_empty() {
        anyhow::bail!(
            "compare: {} is neither a policy folder ({PER_USER}) nor a run folder (OUT/<policy>/{PER_USER})",
            path.display()
        );
    }
    Ok(Folder::Run(
        policies
            .into_iter()
            .map(|p| (p.name(), p.path().to_path_buf()))
            .collect(),
    ))
}

/// Run `evomem compare`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = BootstrapConfig {
        resamples: args.resamples,
        level: args.level,
        seed: args.seed,
    };
    let (a, b) = (&args.run_a, &args.run_b);
    let (pa, pb) = match (folder(a)?, folder(b)?) {
        (Folder::Policy, Folder::Policy) => {
            if args.policy.is_some() {
                anyhow::bail!("compare --policy: {} and {} are policy folders already; --policy picks a policy of two run folders", a.display(), b.display());
            }
            let c = one(a, b, &cfg)?;
            return write_json(&args, &serde_json::to_value(&c)?);
        }
        (Folder::Run(pa), Folder::Run(pb)) => (pa, pb),
        (Folder::Policy, _) | (_, Folder::Policy) => anyhow::bail!(
            "compare: one of {} and {} is a policy folder but the other is not: pass two policy folders (OUT/<policy>) or two run folders (OUT)",
            a.display(),
            b.display()
        ),
    };
    let common: Vec<&String> = match &args.policy {
        Some(name) => {
            for (p, found) in [(a, &pa), (b, &pb)] {
                if !found.contains_key(name) {
                    anyhow::bail!(
                        "compare --policy {name}: {} holds no such policy (it holds {})",
                        p.display(),
                        found.keys().cloned().collect::<Vec<_>>().join(", ")
                    );
                }
            }
            pa.keys().filter(|k| *k == name).collect()
        }
        None => pa.keys().filter(|k| pb.contains_key(*k)).collect(),
    };
    if common.is_empty() {
        anyhow::bail!(
            "compare: {} and {} hold no policy in common ({} against {})",
            a.display(),
            b.display(),
            pa.keys().cloned().collect::<Vec<_>>().join(", "),
            pb.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let mut all = serde_json::Map::new();
    for (i, name) in common.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("== {name}");
        let c = one(&pa[*name], &pb[*name], &cfg)?;
        all.insert((*name).clone(), serde_json::to_value(&c)?);
    }
    write_json(&args, &serde_json::Value::Object(all))
}

/// Compare two policy folders and print the table.
fn one(
    a: &Path,
    b: &Path,
    cfg: &BootstrapConfig,
) -> anyhow::Result<evomem_eval::compare::Comparison> {
    let c = evomem_eval::compare::compare_runs(a, b, cfg)?;
    println!("A = {}", a.display());
    println!("B = {}", b.display());
    println!(
        "{} common users ({} only in A, {} only in B); paired bootstrap, {} resamples, {:.0}% CI, seed {}",
        c.common_users,
        c.only_a,
        c.only_b,
        cfg.resamples,
        cfg.level * 100.0,
        cfg.seed
    );
    if c.common_users < FEW_USERS {
        eprintln!(
            "warning: only {} common users (fewer than {FEW_USERS}): the intervals below are unreliable",
            c.common_users
        );
    }
    if c.target_mismatch > 0 {
        eprintln!(
            "warning: {} users have different targets in the two runs (different data or protocol?)",
            c.target_mismatch
        );
    }
    print!("{}", evomem_eval::compare::comparison_table(&c));
    Ok(c)
}

fn write_json(args: &Args, v: &serde_json::Value) -> anyhow::Result<()> {
    if let Some(p) = &args.json {
        let s = serde_json::to_string_pretty(v)?;
        std::fs::write(p, s + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
