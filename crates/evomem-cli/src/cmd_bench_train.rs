//! `evomem bench train`: what the trained baselines (`sasrec`, `lightgcn`)
//! cost to train, against RecBole 1.2.1 on the same data, measured in the
//! same run.
//!
//! For each data set and model it runs `evomem eval` on that model alone
//! in a child (`bench measure`: wall time and peak RSS), reads the
//! per-epoch lines the trainer prints (epoch, loss, validation NDCG@10,
//! seconds since training started) and the run's `metrics.json`, and
//! reports seconds per epoch, the best validation epoch, the time to it,
//! the whole training and the peak RSS. With a Python that has RecBole
//! (`--python`, default `.venv-recbole/bin/python` as
//! `scripts/sasrec-baseline.sh` makes it), it then trains RecBole's model
//! of the same name on the same data for `--recbole-epochs` epochs in a
//! child of its own (`scripts/sasrec_baseline.py`, scored on the evomem
//! run's candidate lists) and prints RecBole's seconds per epoch and the
//! ratio. RecBole is timed for a few epochs only: at 25-40 minutes a data
//! set, training it to its early stop is a job of its own
//! (`scripts/sasrec-baseline.sh`).

use crate::cmd_bench_scale::{read_measure, run_measured, Measure};
use anyhow::{bail, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Flags of `evomem bench train`.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// Data folders (RecBole atomic files), comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    data: Vec<PathBuf>,
    /// Models, comma-separated (`sasrec`, `lightgcn`; keys allowed, e.g.
    /// `sasrec[epochs=20]`).
    #[arg(long, value_delimiter = ';', default_value = "sasrec;lightgcn")]
    models: Vec<String>,
    /// Training threads, for evomem and for torch.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Run seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// A Python with RecBole 1.2.1 (default: `.venv-recbole/bin/python`
    /// when it exists; none: evomem alone).
    #[arg(long, conflicts_with = "no_recbole")]
    python: Option<PathBuf>,
    /// Time evomem's models alone, even where `.venv-recbole` exists (the
    /// figures RecBole's columns would repeat were recorded elsewhere).
    #[arg(long)]
    no_recbole: bool,
    /// Epochs RecBole is timed for.
    #[arg(long, default_value_t = 2)]
    recbole_epochs: usize,
    /// Train evomem's models for exactly `--recbole-epochs` epochs too (no
    /// early stop), so that both sides after the same epochs are compared
    /// on the same candidate lists, paired user by user (without it evomem
    /// trains to its early stop).
    #[arg(long)]
    same_epochs: bool,
    /// RecBole's driver script.
    #[arg(long, default_value = "scripts/sasrec_baseline.py")]
    recbole_script: PathBuf,
    /// Output folder (one run folder per data set and model, bench-train.json).
    #[arg(long)]
    out: PathBuf,
}

/// One data set × model.
#[derive(Debug, Clone, Serialize, Default)]
struct Row {
    data: String,
    model: String,
    epochs_run: usize,
    best_epoch: usize,
    seconds_per_epoch: f64,
    seconds_to_best: f64,
    train_seconds: f64,
    wall_seconds: f64,
    peak_rss_mib: f64,
    hr1: f64,
    ndcg10: f64,
    recbole_epochs: usize,
    recbole_seconds_per_epoch: Option<f64>,
    recbole_peak_rss_mib: Option<f64>,
    speedup_per_epoch: Option<f64>,
    /// RecBole's HR@1 and NDCG@10 on the same candidate lists.
    recbole_hr1: Option<f64>,
    recbole_ndcg10: Option<f64>,
    /// Paired `evomem − RecBole` (mean, 95% CI low, high) per metric.
    paired_hr1: Option<(f64, f64, f64)>,
    paired_ndcg10: Option<(f64, f64, f64)>,
}

/// `(epoch, best epoch, seconds)` of each per-epoch line of `model`.
fn epoch_lines(log: &str, model: &str) -> Vec<(usize, usize, f64)> {
    let prefix = format!("{model}: epoch ");
    log.lines()
        .filter_map(|l| l.trim_start_matches("trained ").strip_prefix(&prefix))
        .filter_map(|rest| {
            let epoch = rest.split('/').next()?.parse().ok()?;
            let best = rest
                .split("(best epoch ")
                .nth(1)?
                .split(')')
                .next()?
                .parse()
                .ok()?;
            let secs = rest
                .rsplit('[')
                .next()?
                .trim_end_matches(" s]")
                .parse()
                .ok()?;
            Some((epoch, best, secs))
        })
        .collect()
}

fn measure(
    exe: &Path,
    dir: &Path,
    program: Option<&Path>,
    args: &[String],
) -> anyhow::Result<Measure> {
    std::fs::create_dir_all(dir)?;
    run_measured(exe, dir, 0, program, args)?;
    let json = dir.join("measure.json");
    let m = read_measure(&json).context("reading the measurement")?;
    if m.code != Some(0) {
        bail!(
            "the child failed (code {:?}, signal {:?}): see {}",
            m.code,
            m.signal,
            dir.join("log.txt").display()
        );
    }
    Ok(m)
}

/// Run `evomem bench train`.
pub fn bench_train(a: TrainArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the evomem binary")?;
    let python = if a.no_recbole {
        None
    } else {
        a.python.clone().or_else(|| {
            let p = PathBuf::from(".venv-recbole/bin/python");
            p.is_file().then_some(p)
        })
    };
    if a.same_epochs && python.is_none() {
        anyhow::bail!(
            "--same-epochs compares against RecBole's run, and there is none (--no-recbole, or no .venv-recbole: make it with scripts/sasrec-baseline.sh, or pass --python)"
        );
    }
    let mut rows = Vec::new();
    for data in &a.data {
        let name = data
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "data".into());
        for spec in &a.models {
            let model = spec.split('[').next().unwrap_or(spec).to_string();
            let recbole_model = match model.as_str() {
                "sasrec" => "SASRec",
                "lightgcn" => "LightGCN",
                other => bail!("--models: `{other}` is not a trained baseline (sasrec, lightgcn)"),
            };
            let dir = a.out.join(&name).join(&model);
            let run = dir.join("run");
            let spec = if a.same_epochs {
                let keys = format!("epochs={},patience=0", a.recbole_epochs);
                match spec.strip_suffix(']') {
                    Some(open) => format!("{open},{keys}]"),
                    None => format!("{spec}[{keys}]"),
                }
            } else {
                spec.clone()
            };
            let spec = &spec;
            let args: Vec<String> = [
                "eval",
                "--data",
                &data.display().to_string(),
                "--policy",
                spec,
                "--seed",
                &a.seed.to_string(),
                "--threads",
                &a.threads.to_string(),
                "--ops-log",
                "off",
                "--out",
                &run.display().to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            eprintln!("{name} / {spec}: training in evomem ...");
            let m = measure(&exe, &dir, None, &args)?;
            let log = std::fs::read_to_string(dir.join("log.txt")).unwrap_or_default();
            let lines = epoch_lines(&log, &model);
            let Some(&(epochs, best, total)) = lines.last() else {
                bail!(
                    "{}: no epoch lines in the log",
                    dir.join("log.txt").display()
                );
            };
            let to_best = lines.iter().find(|l| l.0 == best).map_or(total, |l| l.2);
            let policy_dir = std::fs::read_dir(&run)?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.join("metrics.json").is_file())
                .context("no policy folder in the run")?;
            let metrics: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(policy_dir.join("metrics.json"))?)?;
            let mut row = Row {
                data: name.clone(),
                model: spec.clone(),
                epochs_run: epochs,
                best_epoch: best,
                seconds_per_epoch: total / epochs.max(1) as f64,
                seconds_to_best: to_best,
                train_seconds: total,
                wall_seconds: m.wall_s,
                peak_rss_mib: m.max_rss_kib as f64 / 1024.0,
                hr1: metrics["metrics"]["HR@1"].as_f64().unwrap_or(f64::NAN),
                ndcg10: metrics["metrics"]["NDCG@10"].as_f64().unwrap_or(f64::NAN),
                recbole_epochs: a.recbole_epochs,
                ..Row::default()
            };
            if let Some(py) = &python {
                eprintln!(
                    "{name} / {spec}: timing RecBole's {recbole_model} for {} epochs ...",
                    a.recbole_epochs
                );
                let rb = dir.join("recbole");
                let rb_args: Vec<String> = vec![
                    a.recbole_script.display().to_string(),
                    "--model".into(),
                    recbole_model.into(),
                    "--data".into(),
                    data.display().to_string(),
                    "--run".into(),
                    policy_dir.display().to_string(),
                    "--out".into(),
                    rb.join("out").display().to_string(),
                    "--epochs".into(),
                    a.recbole_epochs.to_string(),
                    "--stopping-step".into(),
                    a.recbole_epochs.to_string(),
                    "--threads".into(),
                    a.threads.to_string(),
                    "--seed".into(),
                    a.seed.to_string(),
                ];
                let rm = measure(&exe, &rb, Some(py), &rb_args)?;
                let out: serde_json::Value = serde_json::from_str(
                    &std::fs::read_to_string(rb.join("out").join("metrics.json"))
                        .context("RecBole wrote no metrics.json")?,
                )?;
                let secs: Vec<f64> = out["epoch_seconds"]
                    .as_array()
                    .map(|v| v.iter().filter_map(serde_json::Value::as_f64).collect())
                    .unwrap_or_default();
                if !secs.is_empty() {
                    let per = secs.iter().sum::<f64>() / secs.len() as f64;
                    row.recbole_seconds_per_epoch = Some(per);
                    row.speedup_per_epoch = Some(per / row.seconds_per_epoch.max(1e-9));
                }
                row.recbole_peak_rss_mib = Some(rm.max_rss_kib as f64 / 1024.0);
                row.recbole_hr1 = out["metrics"]["HR@1"].as_f64();
                row.recbole_ndcg10 = out["metrics"]["NDCG@10"].as_f64();
                let cmp = evomem_eval::compare::compare_runs(
                    &rb.join("out"),
                    &policy_dir,
                    &evomem_eval::bootstrap::BootstrapConfig::default(),
                )?;
                for (metric, ci) in &cmp.metrics {
                    let v = Some((ci.delta, ci.ci_low, ci.ci_high));
                    match metric.as_str() {
                        "HR@1" => row.paired_hr1 = v,
                        "NDCG@10" => row.paired_ndcg10 = v,
                        _ => {}
                    }
                }
            }
            rows.push(row);
        }
    }
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(
        a.out.join("bench-train.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    println!(
        "{:<10} {:<10} {:>8} {:>11} {:>9} {:>9} {:>8} {:>7} {:>7} {:>11} {:>9} {:>8}",
        "data",
        "model",
        "s/epoch",
        "best/run",
        "to best",
        "train",
        "RSS MiB",
        "HR@1",
        "NDCG10",
        "RecBole s/e",
        "RB MiB",
        "speedup"
    );
    for r in &rows {
        let opt = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
        println!(
            "{:<10} {:<10} {:>8.2} {:>11} {:>8.1}s {:>8.1}s {:>8.0} {:>7.4} {:>7.4} {:>11} {:>9} {:>7}x",
            r.data,
            r.model,
            r.seconds_per_epoch,
            format!("{}/{}", r.best_epoch, r.epochs_run),
            r.seconds_to_best,
            r.train_seconds,
            r.peak_rss_mib,
            r.hr1,
            r.ndcg10,
            opt(r.recbole_seconds_per_epoch, 2),
            opt(r.recbole_peak_rss_mib, 0),
            opt(r.speedup_per_epoch, 1),
        );
    }
    for r in rows.iter().filter(|r| r.recbole_hr1.is_some()) {
        let ci = |v: Option<(f64, f64, f64)>| {
            v.map_or("-".to_string(), |(d, l, h)| {
                format!("{d:+.4} [{l:+.4}, {h:+.4}]")
            })
        };
        println!(
            "{} {}: RecBole HR@1 {:.4} NDCG@10 {:.4}; evomem − RecBole, paired: HR@1 {}, NDCG@10 {}",
            r.data,
            r.model,
            r.recbole_hr1.unwrap_or(f64::NAN),
            r.recbole_ndcg10.unwrap_or(f64::NAN),
            ci(r.paired_hr1),
            ci(r.paired_ndcg10),
        );
    }
    println!(
        "threads {}, seed {}; RecBole trained {} epochs{}; speedup = RecBole s/epoch / evomem s/epoch, same machine, same run",
        a.threads,
        a.seed,
        a.recbole_epochs,
        if a.same_epochs { ", evomem the same epochs" } else { ", evomem to its early stop" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_the_trainers_epoch_lines() {
        let log = "loaded\nsasrec: epoch 1/300 loss 7.0644, valid NDCG@10 0.6903 (best epoch 1) [6.5 s]\n\
                   lightgcn: epoch 1/300 loss 0.6, valid NDCG@10 0.6 (best epoch 1) [1.0 s]\n\
                   trained sasrec: epoch 2/300 loss 6.6, valid NDCG@10 0.74 (best epoch 2) [13.0 s]\n";
        assert_eq!(epoch_lines(log, "sasrec"), vec![(1, 1, 6.5), (2, 2, 13.0)]);
        assert_eq!(epoch_lines(log, "lightgcn"), vec![(1, 1, 1.0)]);
    }
}
