//! `evomem bench synth` and `evomem bench scale`: ml-100k-shaped data at any
//! size (`evomem_eval::scalegen`), and the cost curves of every policy on it.
//!
//! `bench scale` generates one data set per `--sizes` entry and runs every
//! policy on it in its own child process, so that each peak RSS is that
//! policy's alone: ranking families through `evomem eval`, families that
//! serve predict decisions (`memrl`, `tide`) through `evomem arena delayed`
//! (one delay, δ = 5; that arena also runs its `static` and `global-mean`
//! references, a few MB). The child is started by a hidden
//! `evomem bench measure` wrapper, which caps its address space
//! (`--mem-limit-gib`), waits for it and reads `getrusage(RUSAGE_CHILDREN)`:
//! with one child that is the child's own peak RSS. Per policy it fits the
//! log-log exponents of wall time and peak RSS against interactions (least
//! squares), and reports bytes per interaction (peak RSS over interactions)
//! and the marginal bytes per interaction (the slope between the smallest
//! and largest size, which leaves out the fixed cost of the binary).
//!
//! The default embedder is the hashing one: the bench measures the engine's
//! growth, not MiniLM's (`--embedder minilm` runs the model, with the
//! persistent cache of the settings).

use crate::settings::Settings;
use anyhow::{bail, Context as _};
use evomem_core::DecisionTag;
use evomem_eval::plot::{line_chart, Series};
use evomem_eval::scalegen::{self, DataStats, Profile};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The decisions a data set of interactions can pose: ranking through
/// `eval`, rating prediction through `arena delayed`. `--policy all` (the
/// default) is every family that serves one of them, read from the family
/// table (`romerl` serves only lifelong tasks, so it is not among them).
const SCALE_DECISIONS: &[evomem_core::DecisionTag] = &[
    evomem_core::DecisionTag::Rank,
    evomem_core::DecisionTag::Predict,
];

/// Flags of `evomem bench synth`.
#[derive(clap::Args)]
pub struct SynthArgs {
    /// Interactions to generate (exactly), at least 1000.
    #[arg(long)]
    interactions: usize,
    /// Seed; the same seed and profile give byte-identical files.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Fit the statistics from this data set (e.g. ml-100k's RecBole files)
    /// instead of the embedded ml-100k profile; `sparse` (when no folder of
    /// that name exists) is the preset of many light users (about 9 each)
    /// in a large catalog, no metadata.
    #[arg(long)]
    like: Option<PathBuf>,
    /// `catalog`: the activity cap grows with the catalog (histories
    /// lengthen with size); `fixed`: it stays ml-100k's 737, only users
    /// grow.
    #[arg(long, default_value = "catalog")]
    activity_cap: String,
    /// Output folder (created): synth.inter, synth.item, synth.user,
    /// scalegen.json.
    #[arg(long)]
    out: PathBuf,
}

/// Flags of `evomem bench scale`.
#[derive(clap::Args)]
pub struct ScaleArgs {
    /// Interactions per data set, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![100_000usize, 300_000, 1_000_000])]
    sizes: Vec<usize>,
    /// Comma-separated policy specs; `all` is every family that ranks or
    /// predicts ratings. `--policies` is the same flag's older name.
    #[arg(
        long = "policy",
        alias = "policies",
        value_name = "POLICY",
        default_value = "all"
    )]
    policies: String,
    /// Seed of the data and of the runs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Fit the data's statistics from this data set instead of the embedded
    /// ml-100k profile.
    #[arg(long)]
    like: Option<PathBuf>,
    /// `catalog` (histories lengthen with size) or `fixed` (ml-100k's
    /// activity cap at every size: only users grow).
    #[arg(long, default_value = "catalog")]
    activity_cap: String,
    /// `hashing` (default: the engine's growth) or `minilm` (the model's too).
    #[arg(long, default_value = "hashing")]
    embedder: String,
    /// Address-space cap of each child, GiB (0 = none).
    #[arg(long, default_value_t = 20)]
    mem_limit_gib: u64,
    /// Keep results already in OUT (a `measure.json` that succeeded) instead
    /// of running them again.
    #[arg(long)]
    resume: bool,
    /// Only write the report from the results in OUT.
    #[arg(long)]
    report_only: bool,
    /// Output folder: data/, runs/, report.md, scale.json, *.svg.
    #[arg(long)]
    out: PathBuf,
}

/// Flags of the hidden `evomem bench measure` (the child wrapper).
#[derive(clap::Args)]
pub struct MeasureArgs {
    /// Where to write the measurement (JSON).
    #[arg(long)]
    json: PathBuf,
    /// The child's combined stdout and stderr.
    #[arg(long)]
    log: PathBuf,
    /// Address-space cap, GiB (0 = none).
    #[arg(long, default_value_t = 0)]
    mem_limit_gib: u64,
    /// The program to run (default: this evomem binary).
    #[arg(long)]
    program: Option<PathBuf>,
    /// The arguments of the child.
    #[arg(last = true, required = true)]
    child: Vec<String>,
}

/// One child run, as the wrapper measured it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measure {
    /// Wall time, s.
    pub wall_s: f64,
    /// Peak resident set, KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
    /// User CPU, s.
    pub user_s: f64,
    /// System CPU, s.
    pub sys_s: f64,
    /// Exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal, when one ended it.
    pub signal: Option<i32>,
    /// The child's arguments.
    pub args: Vec<String>,
}

/// Run `evomem bench synth`.
pub fn synth(a: SynthArgs) -> anyhow::Result<()> {
    let profile = profile(a.like.as_deref(), &a.activity_cap)?;
    let t0 = Instant::now();
    let s = scalegen::generate(&profile, a.interactions, a.seed)?;
    scalegen::write_recbole(&s, &a.out)?;
    println!(
        "wrote {} interactions, {} users, {} items (activity cap {}) from `{}`, seed {}, to {} in {:.1} s",
        s.scale.interactions,
        s.scale.users,
        s.scale.items,
        s.scale.activity_cap,
        profile.source,
        a.seed,
        a.out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn profile(like: Option<&Path>, activity_cap: &str) -> anyhow::Result<Profile> {
    let grows = match activity_cap {
        "catalog" => true,
        "fixed" => false,
        other => bail!("--activity-cap: unknown `{other}` (catalog, fixed)"),
    };
    let p = match like {
        None => Profile::ml100k(),
        Some(dir) if dir.as_os_str() == "sparse" && !dir.is_dir() => Profile::sparse(),
        Some(dir) => {
            let loaded = evomem_eval::compat::load_data(dir, None)
                .with_context(|| format!("--like: loading {}", dir.display()))?;
            Profile::fit(&loaded.dataset)?
        }
    };
    Ok(Profile {
        activity_cap_grows: grows,
        ..p
    })
}

/// Run the hidden `evomem bench measure`: start the child, wait, and write
/// its wall time and peak RSS.
pub fn measure(a: MeasureArgs) -> anyhow::Result<()> {
    use nix::sys::resource::{getrusage, setrlimit, Resource, UsageWho};
    use std::os::unix::process::ExitStatusExt as _;
    if a.mem_limit_gib > 0 {
        let bytes = a.mem_limit_gib.saturating_mul(1 << 30);
        setrlimit(Resource::RLIMIT_AS, bytes, bytes).context("--mem-limit-gib: setrlimit")?;
    }
    let exe = match &a.program {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the evomem binary")?,
    };
    let log =
        std::fs::File::create(&a.log).with_context(|| format!("creating {}", a.log.display()))?;
    let err = log.try_clone()?;
    let t0 = Instant::now();
    let status = std::process::Command::new(exe)
        .args(&a.child)
        .stdout(log)
        .stderr(err)
        .status()
        .context("starting the child")?;
    let wall_s = t0.elapsed().as_secs_f64();
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).context("getrusage")?;
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    let m = Measure {
        wall_s,
        max_rss_kib: u.max_rss().max(0) as u64,
        user_s: tv(u.user_time()),
        sys_s: tv(u.system_time()),
        code: status.code(),
        signal: status.signal(),
        args: a.child.clone(),
    };
    std::fs::write(&a.json, serde_json::to_string_pretty(&m)?)
        .with_context(|| format!("writing {}", a.json.display()))?;
    Ok(())
}

/// How a family runs on interaction data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `evomem eval` (rank decisions).
    Eval,
    /// `evomem arena delayed` (predict decisions).
    Delayed,
}

fn route(spec: &evomem_policy::registry::PolicySpec) -> anyhow::Result<Route> {
    let f = evomem_policy::registry::family(&spec.name)
        .with_context(|| format!("--policy: `{spec}`"))?;
    f.check(spec)
        .with_context(|| format!("--policy: `{spec}`"))?;
    if f.serves(DecisionTag::Rank) {
        Ok(Route::Eval)
    } else if f.serves(DecisionTag::Predict) {
        if cfg!(feature = "arena") {
            Ok(Route::Delayed)
        } else {
            bail!("--policy: `{spec}` serves predict decisions, which run through `evomem arena delayed`; this evomem was built without the `arena` feature (cargo build --release -p evomem)")
        }
    } else {
        bail!("--policy: `{spec}` serves neither rank nor predict decisions, so it cannot run on interaction data")
    }
}

/// One (size, policy) cell of the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    /// Interactions.
    pub size: usize,
    /// Policy spec.
    pub policy: String,
    /// `eval` or `arena delayed`.
    pub route: String,
    /// The measurement (absent when it never ran).
    pub measure: Option<Measure>,
    /// Finished with status 0.
    pub ok: bool,
    /// Its log says an allocation failed.
    pub out_of_memory: bool,
}

/// A policy's fitted growth.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fit {
    /// Policy spec.
    pub policy: String,
    /// Sizes that finished.
    pub sizes: Vec<usize>,
    /// d ln(wall) / d ln(interactions).
    pub time_exponent: Option<f64>,
    /// d ln(peak RSS) / d ln(interactions).
    pub rss_exponent: Option<f64>,
    /// d ln(user + system CPU) / d ln(interactions): less sensitive than
    /// wall time to other load on the machine.
    pub cpu_exponent: Option<f64>,
    /// Peak RSS over interactions at the largest finished size, bytes.
    pub bytes_per_interaction: Option<f64>,
    /// (RSS at the largest − at the smallest size) / (size difference), bytes.
    pub marginal_bytes_per_interaction: Option<f64>,
    /// Wall time at the largest over the smallest finished size.
    pub time_ratio: Option<f64>,
    /// Peak RSS at the largest over the smallest finished size.
    pub rss_ratio: Option<f64>,
}

/// Run `evomem bench scale`.
pub fn scale(a: ScaleArgs, _settings: &Settings) -> anyhow::Result<()> {
    check_args(&a)?;
    let specs = evomem_policy::registry::parse_list_serving(&a.policies, SCALE_DECISIONS)
        .context("--policy: parsing")?;
    let routes = specs
        .iter()
        .map(route)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let profile = profile(a.like.as_deref(), &a.activity_cap)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let out = a.out.canonicalize()?;
    let no_models = out.join("no-models");
    std::fs::create_dir_all(&no_models)?;
    let exe = std::env::current_exe().context("locating the evomem binary")?;
    let mut sizes = a.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut stats: Vec<(String, DataStats)> = Vec::new();
    if let Some(dir) = &a.like {
        let loaded = evomem_eval::compat::load_data(dir, None)
            .with_context(|| format!("--like: loading {}", dir.display()))?;
        stats.push((
            format!("{} (--like)", loaded.dataset.name),
            DataStats::of(&loaded.dataset),
        ));
    }
    for &n in &sizes {
        let data = out.join("data").join(format!("n{n}"));
        if !a.report_only && (!data.join("synth.inter").is_file() || !a.resume) {
            write_size(&profile, n, a.seed, &data)?;
        }
        if data.join("synth.inter").is_file() {
            let loaded = evomem_eval::compat::load_data(&data, Some("recbole"))
                .with_context(|| format!("loading {}", data.display()))?;
            stats.push((n.to_string(), DataStats::of(&loaded.dataset)));
        }
        if a.report_only {
            continue;
        }
        let cell = CellRun {
            args: &a,
            exe: &exe,
            no_models: &no_models,
            data: &data,
            n,
        };
        for (spec, r) in specs.iter().zip(&routes) {
            cell.measure(spec, *r, &out.join("runs").join(format!("n{n}")))?;
        }
    }
    let cells = collect_cells(&out, &sizes, &specs, &routes);
    let fits: Vec<Fit> = specs.iter().map(|s| fit(&s.to_string(), &cells)).collect();
    write_report(&out, &a, &profile, &stats, &cells, &fits)?;
    print_fits(&fits);
    println!("report: {}", out.join("report.md").display());
    Ok(())
}

/// Sizes and embedder named on the command line are valid.
fn check_args(a: &ScaleArgs) -> anyhow::Result<()> {
    if a.sizes.is_empty() || a.sizes.iter().any(|&n| n < scalegen::MIN_INTERACTIONS) {
        bail!(
            "--sizes: every size must be at least {} (got {:?})",
            scalegen::MIN_INTERACTIONS,
            a.sizes
        );
    }
    if !matches!(a.embedder.as_str(), "hashing" | "minilm") {
        bail!("--embedder: unknown `{}` (hashing, minilm)", a.embedder);
    }
    Ok(())
}

/// Generate the data set of `n` interactions into `data`.
fn write_size(profile: &Profile, n: usize, seed: u64, data: &Path) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let s = scalegen::generate(profile, n, seed)?;
    scalegen::write_recbole(&s, data)?;
    eprintln!(
        "data n={n}: {} users, {} items, written in {:.1} s",
        s.scale.users,
        s.scale.items,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One size's measurements: each policy run as a child process under
/// `evomem bench measure`.
struct CellRun<'a> {
    args: &'a ScaleArgs,
    exe: &'a Path,
    no_models: &'a Path,
    data: &'a Path,
    n: usize,
}

impl CellRun<'_> {
    /// Measure `spec` at this size into `runs/SLUG/measure.json` (kept
    /// when `--resume` finds a finished one).
    fn measure(
        &self,
        spec: &evomem_policy::registry::PolicySpec,
        r: Route,
        runs: &Path,
    ) -> anyhow::Result<()> {
        let (a, n) = (self.args, self.n);
        let dir = runs.join(evomem_core::text::slug(&spec.to_string()));
        let json = dir.join("measure.json");
        if a.resume && read_measure(&json).is_some_and(|m| m.code == Some(0)) {
            eprintln!("n={n} {spec}: kept");
            return Ok(());
        }
        std::fs::create_dir_all(&dir)?;
        let child = self.child_args(spec, r, &dir);
        run_measured(self.exe, &dir, a.mem_limit_gib, None, &child)
            .with_context(|| format!("n={n} {spec}"))?;
        match read_measure(&json) {
            Some(m) => eprintln!(
                "n={n} {spec}: {:.1} s, {:.0} MiB{}",
                m.wall_s,
                m.max_rss_kib as f64 / 1024.0,
                if m.code == Some(0) {
                    String::new()
                } else {
                    format!(
                        " — FAILED (code {:?}, signal {:?}; see {})",
                        m.code,
                        m.signal,
                        dir.join("log.txt").display()
                    )
                }
            ),
            None => eprintln!("n={n} {spec}: no measurement"),
        }
        Ok(())
    }

    /// The measured child's command line (`eval` or `arena delayed`).
    fn child_args(
        &self,
        spec: &evomem_policy::registry::PolicySpec,
        r: Route,
        dir: &Path,
    ) -> Vec<String> {
        let mut child: Vec<String> = match r {
            Route::Eval => vec!["eval".into(), "--policy".into(), spec.to_string()],
            Route::Delayed => vec![
                "arena".into(),
                "delayed".into(),
                "--policy".into(),
                spec.to_string(),
                "--delays".into(),
                "5".into(),
                "--meg-delay".into(),
                "5".into(),
                "--resamples".into(),
                "100".into(),
            ],
        };
        let s = |p: &Path| p.display().to_string();
        child.extend([
            "--data".into(),
            s(self.data),
            "--seed".into(),
            self.args.seed.to_string(),
        ]);
        child.extend(["--out".into(), s(&dir.join("run"))]);
        if r == Route::Eval {
            child.extend(["--ops-log".into(), "off".into()]);
        }
        if self.args.embedder == "hashing" {
            child.extend(["--models-dir".into(), s(self.no_models)]);
        }
        child
    }
}

/// Every cell that is in OUT, finished or not.
fn collect_cells(
    out: &Path,
    sizes: &[usize],
    specs: &[evomem_policy::registry::PolicySpec],
    routes: &[Route],
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &n in sizes {
        for (spec, r) in specs.iter().zip(routes) {
            let slug = evomem_core::text::slug(&spec.to_string());
            let json = out
                .join("runs")
                .join(format!("n{n}"))
                .join(slug)
                .join("measure.json");
            let m = read_measure(&json);
            let log = json.with_file_name("log.txt");
            let out_of_memory =
                std::fs::read_to_string(&log).is_ok_and(|t| t.contains("memory allocation of"));
            cells.push(Cell {
                size: n,
                policy: spec.to_string(),
                route: match r {
                    Route::Eval => "eval".into(),
                    Route::Delayed => "arena delayed".into(),
                },
                ok: m.as_ref().is_some_and(|m| m.code == Some(0)),
                out_of_memory,
                measure: m,
            });
        }
    }
    cells
}

/// Run `child` (arguments of `program`, default this evomem binary) under
/// the hidden `bench measure` wrapper, which writes `DIR/measure.json` and
/// the child's output to `DIR/log.txt`. Fails only when the wrapper itself
/// does; the child's exit is in the measurement.
pub(crate) fn run_measured(
    exe: &Path,
    dir: &Path,
    mem_limit_gib: u64,
    program: Option<&Path>,
    child: &[String],
) -> anyhow::Result<()> {
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["bench", "measure", "--json"])
        .arg(dir.join("measure.json"))
        .arg("--log")
        .arg(dir.join("log.txt"))
        .args(["--mem-limit-gib", &mem_limit_gib.to_string()]);
    if let Some(p) = program {
        cmd.arg("--program").arg(p);
    }
    let st = cmd
        .arg("--")
        .args(child)
        .status()
        .context("starting the measuring wrapper")?;
    if !st.success() {
        bail!("the measuring wrapper failed ({st})");
    }
    Ok(())
}

pub(crate) fn read_measure(p: &Path) -> Option<Measure> {
    serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
}

fn fit(policy: &str, cells: &[Cell]) -> Fit {
    let ok: Vec<(usize, &Measure)> = cells
        .iter()
        .filter(|c| c.policy == policy && c.ok)
        .filter_map(|c| c.measure.as_ref().map(|m| (c.size, m)))
        .collect();
    let xs: Vec<f64> = ok.iter().map(|(n, _)| (*n as f64).ln()).collect();
    let ln_t: Vec<f64> = ok.iter().map(|(_, m)| m.wall_s.max(1e-3).ln()).collect();
    let ln_r: Vec<f64> = ok
        .iter()
        .map(|(_, m)| (m.max_rss_kib.max(1) as f64).ln())
        .collect();
    let ln_c: Vec<f64> = ok
        .iter()
        .map(|(_, m)| (m.user_s + m.sys_s).max(1e-3).ln())
        .collect();
    let two = ok.len() >= 2;
    let first = ok.first();
    let last = ok.last();
    let bytes = |m: &Measure| m.max_rss_kib as f64 * 1024.0;
    Fit {
        policy: policy.to_string(),
        sizes: ok.iter().map(|(n, _)| *n).collect(),
        time_exponent: two.then(|| scalegen::slope(&xs, &ln_t)),
        rss_exponent: two.then(|| scalegen::slope(&xs, &ln_r)),
        cpu_exponent: two.then(|| scalegen::slope(&xs, &ln_c)),
        bytes_per_interaction: last.map(|(n, m)| bytes(m) / *n as f64),
        marginal_bytes_per_interaction: match (first, last) {
            (Some((n0, m0)), Some((n1, m1))) if two => {
                Some((bytes(m1) - bytes(m0)) / (*n1 as f64 - *n0 as f64))
            }
            _ => None,
        },
        time_ratio: match (first, last) {
            (Some((_, m0)), Some((_, m1))) if two => Some(m1.wall_s / m0.wall_s.max(1e-3)),
            _ => None,
        },
        rss_ratio: match (first, last) {
            (Some((_, m0)), Some((_, m1))) if two => {
                Some(m1.max_rss_kib as f64 / m0.max_rss_kib.max(1) as f64)
            }
            _ => None,
        },
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

fn print_fits(fits: &[Fit]) {
    println!(
        "{:<12} {:>9} {:>8} {:>9} {:>11} {:>11} {:>9} {:>9}",
        "policy", "time exp", "CPU exp", "RSS exp", "B/inter", "marg B/int", "t ratio", "RSS ratio"
    );
    for f in fits {
        println!(
            "{:<12} {:>9} {:>8} {:>9} {:>11} {:>11} {:>9} {:>9}",
            f.policy,
            opt(f.time_exponent, 2),
            opt(f.cpu_exponent, 2),
            opt(f.rss_exponent, 2),
            opt(f.bytes_per_interaction, 0),
            opt(f.marginal_bytes_per_interaction, 0),
            opt(f.time_ratio, 2),
            opt(f.rss_ratio, 2)
        );
    }
}

fn write_report(
    out: &Path,
    a: &ScaleArgs,
    profile: &Profile,
    stats: &[(String, DataStats)],
    cells: &[Cell],
    fits: &[Fit],
) -> anyhow::Result<()> {
    let mut md = String::new();
    report_header(&mut md, a, profile);
    report_data(&mut md, stats);
    report_runs(&mut md, a, cells);
    report_fits(&mut md, fits);
    std::fs::write(out.join("report.md"), md)?;
    let json = serde_json::json!({
        "sizes": a.sizes,
        "policies": a.policies,
        "seed": a.seed,
        "embedder": a.embedder,
        "activity_cap": a.activity_cap,
        "profile": profile,
        "data": stats.iter().map(|(n, s)| serde_json::json!({"data": n, "stats": s})).collect::<Vec<_>>(),
        "cells": cells,
        "fits": fits,
    });
    std::fs::write(out.join("scale.json"), serde_json::to_string_pretty(&json)?)?;
    let series = |f: &dyn Fn(&Measure) -> f64| -> Vec<Series> {
        fits.iter()
            .map(|fit| Series {
                name: fit.policy.clone(),
                points: cells
                    .iter()
                    .filter(|c| c.policy == fit.policy && c.ok)
                    .filter_map(|c| {
                        c.measure
                            .as_ref()
                            .map(|m| ((c.size as f64).log10(), f(m).max(1e-3).log10()))
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    line_chart(
        &out.join("time.svg"),
        "Wall time against interactions (log-log)",
        "log10 interactions",
        "log10 wall s",
        &series(&|m| m.wall_s),
        &[],
    )?;
    line_chart(
        &out.join("rss.svg"),
        "Peak RSS against interactions (log-log)",
        "log10 interactions",
        "log10 peak RSS MiB",
        &series(&|m| m.max_rss_kib as f64 / 1024.0),
        &[],
    )?;
    Ok(())
}

/// The command and what was measured how.
fn report_header(md: &mut String, a: &ScaleArgs, profile: &Profile) {
    let sizes: Vec<String> = a.sizes.iter().map(|n| n.to_string()).collect();
    let _ = writeln!(md, "# Cost curves\n");
    let _ = writeln!(
        md,
        "`evomem bench scale --sizes {} --policy {} --seed {} --activity-cap {} --embedder {} --out {}`\n",
        sizes.join(","),
        a.policies,
        a.seed,
        a.activity_cap,
        a.embedder,
        a.out.display()
    );
    let _ = writeln!(
        md,
        "Data: `evomem_eval::scalegen`, profile `{}`. Embedder: {}. Each policy runs alone in a child process (`evomem eval`, or `evomem arena delayed` at δ = 5 for predict families); wall time and peak RSS (`ru_maxrss`) are the child's.\n",
        profile.source,
        if a.embedder == "hashing" {
            "hashing (the engine's growth, not MiniLM's)"
        } else {
            "MiniLM with the persistent cache"
        }
    );
}

/// The generated data per size, and the growth a scan inherits from it.
fn report_data(md: &mut String, stats: &[(String, DataStats)]) {
    let _ = writeln!(md, "## Data\n");
    let _ = writeln!(
        md,
        "| data | users | items | activity min / median / mean / p90 / max | γ | top item | top 10% share | s | drift TV (shuffled) | own history / interaction | audience / interaction |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (n, s) in stats {
        let _ = writeln!(
            md,
            "| {n} | {} | {} | {} / {} / {:.1} / {} / {} | {:.2} | {} | {:.3} | {:.2} | {:.3} ({:.3}) | {:.1} | {:.1} |",
            s.users,
            s.catalog,
            s.activity_min,
            s.activity_median,
            s.activity_mean,
            s.activity_p90,
            s.activity_max,
            s.activity_exponent,
            s.top_item,
            s.top10_share,
            s.popularity_exponent,
            s.drift_tv,
            s.drift_tv_shuffled,
            s.own_history_mean,
            s.audience_mean
        );
    }
    if stats.len() >= 2 {
        // The growth a policy inherits from the data when it scans a user's
        // history, or an item's audience, at every decision.
        let xs: Vec<f64> = stats
            .iter()
            .map(|(_, s)| (s.interactions as f64).ln())
            .collect();
        let work = |f: &dyn Fn(&DataStats) -> f64| -> f64 {
            let ys: Vec<f64> = stats
                .iter()
                .map(|(_, s)| (s.interactions as f64 * f(s).max(1e-9)).ln())
                .collect();
            scalegen::slope(&xs, &ys)
        };
        let users: Vec<f64> = stats.iter().map(|(_, s)| (s.users as f64).ln()).collect();
        let _ = writeln!(
            md,
            "\nGrowth of the work a scan inherits from the data (log-log slope against interactions): users {:.2}; N × own history {:.2} (a scan of the user's history per interaction); N × audience {:.2} (a scan of the item's audience per interaction).",
            scalegen::slope(&xs, &users),
            work(&|s| s.own_history_mean),
            work(&|s| s.audience_mean)
        );
    }
}

/// Every (policy, size) run: time, memory, status.
fn report_runs(md: &mut String, a: &ScaleArgs, cells: &[Cell]) {
    let _ = writeln!(md, "\n## Runs\n");
    let _ = writeln!(
        md,
        "| policy | interactions | wall s | CPU s | peak RSS MiB | bytes / interaction | status |\n|---|---|---|---|---|---|---|"
    );
    for c in cells {
        let (wall, cpu, rss, bpi, status) = match &c.measure {
            None => (
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "not run".to_string(),
            ),
            Some(m) => (
                format!("{:.1}", m.wall_s),
                format!("{:.1}", m.user_s + m.sys_s),
                format!("{:.0}", m.max_rss_kib as f64 / 1024.0),
                format!("{:.0}", m.max_rss_kib as f64 * 1024.0 / c.size as f64),
                if c.ok {
                    "ok".to_string()
                } else if c.out_of_memory {
                    format!(
                        "out of memory (allocation failed under the {} GiB address-space cap)",
                        a.mem_limit_gib
                    )
                } else {
                    format!("failed (code {:?}, signal {:?})", m.code, m.signal)
                },
            ),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {wall} | {cpu} | {rss} | {bpi} | {status} |",
            c.policy, c.size
        );
    }
}

/// The fitted exponents per policy, and the plots.
fn report_fits(md: &mut String, fits: &[Fit]) {
    let _ = writeln!(md, "\n## Fitted growth\n");
    let _ = writeln!(
        md,
        "Exponents: least-squares slope of ln(wall s) and ln(peak RSS) against ln(interactions) over the sizes that finished (1 = linear). Marginal bytes per interaction: (RSS at the largest − RSS at the smallest size) / (size difference).\n"
    );
    let _ = writeln!(
        md,
        "| policy | sizes | time exponent | CPU exponent | RSS exponent | bytes / interaction (largest) | marginal bytes / interaction | time ratio | RSS ratio |\n|---|---|---|---|---|---|---|---|---|"
    );
    for f in fits {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f.policy,
            f.sizes
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            opt(f.time_exponent, 2),
            opt(f.cpu_exponent, 2),
            opt(f.rss_exponent, 2),
            opt(f.bytes_per_interaction, 0),
            opt(f.marginal_bytes_per_interaction, 0),
            opt(f.time_ratio, 2),
            opt(f.rss_ratio, 2)
        );
    }
    let _ = writeln!(md, "\n![wall time](time.svg)\n\n![peak RSS](rss.svg)\n");
}
