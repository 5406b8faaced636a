//! Metrics, the whole-arena run and the report of the delayed rating
//! stream.
//!
//! **Metrics** (per method × δ, over every prediction of the stream):
//!
//! - MAE and RMSE of the clamped predictions;
//! - **MEG@δ** against `static`: utility is `U = −|error|` (so a method's
//!   utility is −MAE); the evaluation set H is every prediction that is
//!   *strictly future* to at least one of the user's memory updates, i.e.
//!   the user's predictions number j ≥ δ + 1 (some own label has matured;
//!   before that every method knows the user equally little). Per user,
//!   `Ū_H(method) − Ū_H(static)`; MEG is the mean over users with a
//!   non-empty H, with a paired bootstrap 95% CI over users
//!   (`evomem_eval::bootstrap`). Positive: memory updates transfer to
//!   future predictions better than the static user mean;
//! - **Δdelay** = MAE at δ = 20 minus MAE at δ = 0 (same for RMSE):
//!   positive means delay hurts;
//! - **negative transfer**: share of users (non-empty H) whose MAE over H
//!   is strictly worse than under `static`;
//! - **memory tokens**: Σ ceil(chars/4) of the memory record texts at the
//!   end of the run;
//! - **LLM tokens per feedback-equivalent update**: (prediction prompt
//!   tokens + memory-update call tokens) / matured labels, estimated from
//!   the rendered prompts (`delayed/prompt.rs`); "–" for methods no LLM
//!   would serve (global mean, static, MF).
//!
//! MEG, negative transfer, memory and tokens are reported at
//! `DelayedConfig::meg_delay` (δ = 5) and kept for every δ in the JSON.

use crate::delayed::run::{
    resolve, run_method, DelayedConfig, DelayedInputs, MethodRun, REFERENCE, REFERENCE_ITEM,
};
use crate::delayed::stream::{Half, Schedule, Stream};
use crate::error::ArenaError;
use crate::plot::{line_chart, Series};
use evomem_eval::bootstrap::{paired_bootstrap, quantile_sorted, BootstrapConfig, PairedCi};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Figures of one method × δ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Spec.
    pub spec: String,
    /// δ.
    pub delta: usize,
    /// Predictions.
    pub predictions: usize,
    /// Mean absolute error.
    pub mae: f64,
    /// Root mean squared error.
    pub rmse: f64,
    /// MAE over the strictly-future set H.
    pub mae_future: f64,
    /// MEG against `static` over users (paired bootstrap CI).
    pub meg: Option<PairedCi>,
    /// Share of users worse than `static` on H.
    pub negative_transfer: Option<f64>,
    /// MEG against `static-item` (the shared estimator μ + b_u + b_i
    /// alone) over users (paired bootstrap CI).
    #[serde(default)]
    pub meg_item: Option<PairedCi>,
    /// Users with a non-empty H.
    pub users_future: usize,
    /// The run's counts (memory, tokens, stats).
    pub run: MethodRun,
    /// LLM tokens per feedback-equivalent update.
    pub tokens_per_update: Option<f64>,
}

/// Per method, across δ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodSummary {
    /// Spec.
    pub spec: String,
    /// MAE by δ.
    pub mae: BTreeMap<usize, f64>,
    /// RMSE by δ.
    pub rmse: BTreeMap<usize, f64>,
    /// MAE(δ=20) − MAE(δ=0).
    pub delta_delay_mae: Option<f64>,
    /// RMSE(δ=20) − RMSE(δ=0).
    pub delta_delay_rmse: Option<f64>,
}

/// A difference with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The point value.
    pub delta: f64,
    /// Lower end.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
}

/// One method against the focus method (`tide`) at the MEG delay, paired
/// over users. Every figure is the focus's advantage: positive means the
/// focus is better.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedVs {
    /// The other method.
    pub spec: String,
    /// The focus method.
    pub focus: String,
    /// δ.
    pub delta: usize,
    /// MAE(spec) − MAE(focus) over every prediction; CI from a bootstrap
    /// that resamples whole users (each user's predictions stay together).
    pub mae: Interval,
    /// RMSE(spec) − RMSE(focus), the same bootstrap.
    pub rmse: Interval,
    /// MEG(focus) − MEG(spec): per user, Ū_H(focus) − Ū_H(spec) (the
    /// reference cancels), paired bootstrap over users.
    pub meg: Option<PairedCi>,
}

/// The method the paired table is about.
pub const FOCUS: &str = "tide";

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelayedReport {
    /// Settings.
    pub config: DelayedConfig,
    /// Dataset name.
    pub dataset: String,
    /// Model id of the embedder the registry families used.
    pub embedder: String,
    /// Users replayed.
    pub users: usize,
    /// Ratings replayed (predictions per method × δ).
    pub events: usize,
    /// The δ of MEG and the per-δ headline figures.
    pub meg_delay: usize,
    /// Every method × δ.
    pub rows: Vec<Row>,
    /// Per method.
    pub methods: Vec<MethodSummary>,
    /// Specs not run, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Every other method against [`FOCUS`] at the MEG delay (empty when
    /// the focus did not run).
    #[serde(default)]
    pub paired: Vec<PairedVs>,
}

impl DelayedReport {
    /// The row of `spec` at `delta`.
    pub fn row(&self, spec: &str, delta: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.spec == spec && r.delta == delta)
    }
}

/// Per-user MAE over H (predictions j ≥ δ + 1), by user index.
fn future_mae(stream: &Stream, delta: usize, preds: &[f64]) -> BTreeMap<u32, f64> {
    let s = Schedule::new(delta);
    let mut acc: BTreeMap<u32, (f64, u64)> = BTreeMap::new();
    for (e, p) in stream.events.iter().zip(preds) {
        if s.maturing_before(e.k).is_some() {
            let a = acc.entry(e.user().0).or_insert((0.0, 0));
            a.0 += (p - e.rating).abs();
            a.1 += 1;
        }
    }
    acc.into_iter()
        .map(|(u, (s, n))| (u, s / n as f64))
        .collect()
}

fn errors(stream: &Stream, preds: &[f64]) -> (f64, f64) {
    let n = stream.events.len().max(1) as f64;
    let (mut a, mut s) = (0.0, 0.0);
    for (e, p) in stream.events.iter().zip(preds) {
        let d = p - e.rating;
        a += d.abs();
        s += d * d;
    }
    (a / n, (s / n).sqrt())
}

/// Run every method at every δ and compute the figures.
pub fn run_arena(
    cfg: &DelayedConfig,
    inputs: &DelayedInputs<'_>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<DelayedReport, ArenaError> {
    if cfg.delays.is_empty() {
        return Err(ArenaError::Config("need at least one delay".into()));
    }
    if !cfg.delays.contains(&cfg.meg_delay) {
        return Err(ArenaError::Config(format!(
            "the MEG delay (--meg-delay) {} is not among the delays {:?}",
            cfg.meg_delay, cfg.delays
        )));
    }
    let stream = Stream::build_half(inputs.data, cfg.users, cfg.seed, cfg.half, cfg.split_seed)?;
    let (methods, skipped) = resolve(cfg)?;
    for (s, why) in &skipped {
        progress(&format!("skipping {s}: {why}"));
    }
    progress(&format!(
        "{} users, {} ratings, {} methods x {} delays",
        stream.users.len(),
        stream.events.len(),
        methods.len(),
        cfg.delays.len()
    ));
    let jobs: Vec<(usize, usize)> = (0..methods.len())
        .flat_map(|m| cfg.delays.iter().map(move |&d| (m, d)))
        .collect();
    let runs: Vec<MethodRun> = {
        use rayon::prelude::*;
        jobs.par_iter()
            .map(|&(m, d)| {
                let r = run_method(&methods[m], d, &stream, inputs, cfg.seed).inspect_err(|e| {
                    progress(&format!("{} δ={d} failed: {e}", methods[m].spec));
                })?;
                let (mae, _) = errors(&stream, &r.predictions);
                progress(&format!("{} δ={d}: MAE {mae:.4}", r.spec));
                Ok(r)
            })
            .collect::<Result<_, ArenaError>>()?
    };
    let meg_delay = cfg.meg_delay;
    let boot = BootstrapConfig {
        resamples: cfg.resamples.max(1),
        seed: cfg.seed,
        ..BootstrapConfig::default()
    };
    let rows: Vec<Row> = runs.iter().map(|r| row(&stream, &runs, r, &boot)).collect();
    let summaries = summaries(&methods, &rows);
    let paired = paired_against(&stream, &runs, FOCUS, meg_delay, &boot);
    Ok(DelayedReport {
        config: cfg.clone(),
        dataset: inputs.data.name.clone(),
        embedder: inputs.embedder.model_id().to_string(),
        users: stream.users.len(),
        events: stream.events.len(),
        meg_delay,
        rows,
        methods: summaries,
        skipped,
        paired,
    })
}

/// Per user: (Σ|error|, Σ error², predictions) of `preds`.
fn user_sums(stream: &Stream, preds: &[f64]) -> BTreeMap<u32, (f64, f64, f64)> {
    let mut acc: BTreeMap<u32, (f64, f64, f64)> = BTreeMap::new();
    for (e, p) in stream.events.iter().zip(preds) {
        let d = p - e.rating;
        let a = acc.entry(e.user().0).or_insert((0.0, 0.0, 0.0));
        a.0 += d.abs();
        a.1 += d * d;
        a.2 += 1.0;
    }
    acc
}

/// MAE and RMSE differences `other − focus` over the users `picks` names
/// (repeats allowed), each entry of `x` one user's `(other, focus)` sums.
type UserPair = ((f64, f64, f64), (f64, f64, f64));

fn differences(x: &[UserPair], picks: impl Iterator<Item = usize>) -> (f64, f64) {
    let (mut ao, mut so, mut af, mut sf, mut c) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for ((a1, s1, n1), (a2, s2, _)) in picks.filter_map(|k| x.get(k)) {
        ao += a1;
        so += s1;
        af += a2;
        sf += s2;
        c += n1;
    }
    let c = f64::max(c, 1.0);
    ((ao - af) / c, (so / c).sqrt() - (sf / c).sqrt())
}

/// [`differences`] over every user, with percentile intervals from
/// `boot.resamples` resamples of whole users.
fn cluster_bootstrap(x: &[UserPair], boot: &BootstrapConfig) -> (Interval, Interval) {
    use rand::{Rng, SeedableRng};
    let n = x.len();
    let point = differences(x, 0..n);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(boot.seed ^ 0x00c1_7573);
    let (mut maes, mut rmses) = (Vec::new(), Vec::new());
    for _ in 0..boot.resamples {
        let picks: Vec<usize> = (0..n).map(|_| rng.gen_range(0..n)).collect();
        let d = differences(x, picks.into_iter());
        maes.push(d.0);
        rmses.push(d.1);
    }
    let interval = |point: f64, v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let tail = (1.0 - boot.level) / 2.0;
        Interval {
            delta: point,
            ci_low: quantile_sorted(v, tail),
            ci_high: quantile_sorted(v, 1.0 - tail),
        }
    };
    (interval(point.0, &mut maes), interval(point.1, &mut rmses))
}

/// Every method against `focus` at `delta`, paired over users
/// ([`PairedVs`]); empty when `focus` did not run at `delta`.
fn paired_against(
    stream: &Stream,
    runs: &[MethodRun],
    focus: &str,
    delta: usize,
    boot: &BootstrapConfig,
) -> Vec<PairedVs> {
    let Some(f) = runs.iter().find(|r| r.spec == focus && r.delta == delta) else {
        return Vec::new();
    };
    let f_sums = user_sums(stream, &f.predictions);
    let f_fut = future_mae(stream, delta, &f.predictions);
    runs.iter()
        .filter(|r| r.delta == delta && r.spec != focus)
        .map(|r| {
            let o_sums = user_sums(stream, &r.predictions);
            let x: Vec<_> = o_sums
                .iter()
                .filter_map(|(u, o)| Some((*o, *f_sums.get(u)?)))
                .collect();
            let (mae, rmse) = cluster_bootstrap(&x, boot);
            let o_fut = future_mae(stream, delta, &r.predictions);
            let users: Vec<u32> = f_fut
                .keys()
                .filter(|u| o_fut.contains_key(u))
                .copied()
                .collect();
            let a: Vec<f64> = users.iter().map(|u| -o_fut[u]).collect();
            let b: Vec<f64> = users.iter().map(|u| -f_fut[u]).collect();
            PairedVs {
                spec: r.spec.clone(),
                focus: focus.to_string(),
                delta,
                mae,
                rmse,
                meg: paired_bootstrap(&a, &b, boot).ok(),
            }
        })
        .collect()
}

/// One run's row: errors at its δ, future MAE, and MEG and negative
/// transfer against the references at the same δ.
fn row(stream: &Stream, runs: &[MethodRun], r: &MethodRun, boot: &BootstrapConfig) -> Row {
    let (mae, rmse) = errors(stream, &r.predictions);
    let fut = future_mae(stream, r.delta, &r.predictions);
    // MEG and negative transfer of this run against the reference
    // `spec` at the same δ.
    let against = |spec: &str| {
        let refm = runs
            .iter()
            .find(|x| x.spec == spec && x.delta == r.delta)
            .map(|x| future_mae(stream, r.delta, &x.predictions))?;
        let users: Vec<u32> = fut
            .keys()
            .filter(|u| refm.contains_key(u))
            .copied()
            .collect();
        // utilities: −MAE_H
        let a: Vec<f64> = users.iter().map(|u| -refm[u]).collect();
        let b: Vec<f64> = users.iter().map(|u| -fut[u]).collect();
        let worse = users.iter().filter(|u| fut[u] > refm[u] + 1e-12).count();
        Some((
            paired_bootstrap(&a, &b, boot).ok(),
            (!users.is_empty()).then(|| worse as f64 / users.len() as f64),
        ))
    };
    let (meg, neg) = against(REFERENCE).unwrap_or((None, None));
    let meg_item = against(REFERENCE_ITEM).and_then(|x| x.0);
    let total_h: usize = stream
        .events
        .iter()
        .filter(|e| Schedule::new(r.delta).maturing_before(e.k).is_some())
        .count();
    let mae_future = if total_h == 0 {
        f64::NAN
    } else {
        stream
            .events
            .iter()
            .zip(&r.predictions)
            .filter(|(e, _)| Schedule::new(r.delta).maturing_before(e.k).is_some())
            .map(|(e, p)| (p - e.rating).abs())
            .sum::<f64>()
            / total_h as f64
    };
    Row {
        spec: r.spec.clone(),
        delta: r.delta,
        predictions: r.predictions.len(),
        mae,
        rmse,
        mae_future,
        meg,
        negative_transfer: neg,
        meg_item,
        users_future: fut.len(),
        tokens_per_update: r.tokens_per_update(),
        run: r.clone(),
    }
}

/// Per method: MAE and RMSE by δ and their change from δ = 0 to 20.
fn summaries(methods: &[crate::delayed::run::Method], rows: &[Row]) -> Vec<MethodSummary> {
    let mut summaries = Vec::new();
    for m in methods {
        let spec = m.spec.to_string();
        let mine: Vec<&Row> = rows.iter().filter(|r| r.spec == spec).collect();
        let mae: BTreeMap<usize, f64> = mine.iter().map(|r| (r.delta, r.mae)).collect();
        let rmse: BTreeMap<usize, f64> = mine.iter().map(|r| (r.delta, r.rmse)).collect();
        let dd = |m: &BTreeMap<usize, f64>| Some(m.get(&20)? - m.get(&0)?);
        summaries.push(MethodSummary {
            delta_delay_mae: dd(&mae),
            delta_delay_rmse: dd(&rmse),
            spec,
            mae,
            rmse,
        });
    }
    summaries
}

fn opt(x: Option<f64>, d: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.d$}"),
        _ => "–".into(),
    }
}

fn signed(x: Option<f64>, d: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:+.d$}"),
        _ => "–".into(),
    }
}

/// The Markdown report.
pub fn markdown(r: &DelayedReport) -> String {
    let mut s = String::new();
    let d5 = r.meg_delay;
    let _ = writeln!(s, "# Delayed-feedback rating stream\n");
    let _ = writeln!(
        s,
        "{}: {} users, {} ratings replayed in time order; each rating is predicted before it is revealed, and its label matures δ of the user's own ratings later (δ ∈ {:?}). Memory updates see matured labels only. Seed {}; embedder `{}` (families). Users: {}.\n",
        r.dataset,
        r.users,
        r.events,
        r.config.delays,
        r.config.seed,
        r.embedder,
        match r.config.half {
            Half::All => "all (no split)".to_string(),
            h => format!(
                "the `{}` half of the split with split seed {} (a seeded hash of the user id)",
                h.name(),
                r.config.split_seed
            ),
        }
    );
    let has = |d: usize| r.config.delays.contains(&d);
    let _ = writeln!(
        s,
        "| method | MAE@δ=0 | MAE@δ={d5} | RMSE@δ={d5} | MEG@δ={d5} [95% CI] | MEG vs static-item [95% CI] | Δdelay MAE | Δdelay RMSE | neg. transfer@δ={d5} | memory tokens | LLM tokens / update |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for m in &r.methods {
        let row = r.row(&m.spec, d5);
        let meg = row
            .and_then(|x| x.meg.as_ref())
            .map(|c| format!("{:+.4} [{:+.4}, {:+.4}]", c.delta, c.ci_low, c.ci_high))
            .unwrap_or_else(|| "–".into());
        let meg_item = row
            .and_then(|x| x.meg_item.as_ref())
            .map(|c| format!("{:+.4} [{:+.4}, {:+.4}]", c.delta, c.ci_low, c.ci_high))
            .unwrap_or_else(|| "–".into());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.spec,
            if has(0) {
                opt(m.mae.get(&0).copied(), 4)
            } else {
                "–".into()
            },
            opt(row.map(|x| x.mae), 4),
            opt(row.map(|x| x.rmse), 4),
            if m.spec == REFERENCE {
                "(reference)".into()
            } else {
                meg
            },
            if m.spec == REFERENCE_ITEM {
                "(reference)".into()
            } else {
                meg_item
            },
            signed(m.delta_delay_mae, 4),
            signed(m.delta_delay_rmse, 4),
            opt(row.and_then(|x| x.negative_transfer).map(|v| 100.0 * v), 1)
                + if row.and_then(|x| x.negative_transfer).is_some() {
                    "%"
                } else {
                    ""
                },
            row.map(|x| x.run.memory_tokens.to_string())
                .unwrap_or_else(|| "–".into()),
            opt(row.and_then(|x| x.tokens_per_update), 1),
        );
    }
    let _ = writeln!(s, "\n## MAE and RMSE by δ\n");
    let mut head = "| method |".to_string();
    let mut rule = "|---|".to_string();
    for d in &r.config.delays {
        let _ = write!(head, " MAE δ={d} | RMSE δ={d} |");
        rule.push_str("---|---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    for m in &r.methods {
        let mut line = format!("| {} |", m.spec);
        for d in &r.config.delays {
            let _ = write!(
                line,
                " {} | {} |",
                opt(m.mae.get(d).copied(), 4),
                opt(m.rmse.get(d).copied(), 4)
            );
        }
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(
        s,
        "\n**Definitions.** Utility U = −|error| on the 1–5 scale. MEG@δ = mean over users of Ū_H(method) − Ū_H(static), where H is each user's predictions made after at least one of their own labels matured (prediction number j ≥ δ + 1); CI: paired bootstrap over users ({} resamples). Δdelay = metric at δ = 20 minus at δ = 0 (positive: delay hurts). MEG vs static-item: the same against `static-item` (μ + b_u + b_i, the estimator every method builds on), i.e. what a method's memory adds beyond item bias. Negative transfer: share of users whose MAE over H is worse than static's. Memory tokens: Σ ceil(chars/4) of the memory texts at the end of the δ = {d5} run. LLM tokens per feedback-equivalent update: (rendered prediction prompts + memory-update calls) / matured labels, estimated offline; – for methods no LLM serves.\n",
        r.config.resamples
    );
    if !r.paired.is_empty() {
        let _ = writeln!(
            s,
            "## Against `{FOCUS}`, paired over users (δ = {d5})\n\nEach figure is `{FOCUS}`'s advantage (positive: `{FOCUS}` is better): ΔMAE = MAE(method) − MAE({FOCUS}) and ΔRMSE the same, over every prediction, with 95% intervals from resampling whole users; ΔMEG = MEG({FOCUS}) − MEG(method), paired bootstrap over users. A claim that `{FOCUS}` is lowest holds against a method only where the interval lies above 0.\n\n| method | ΔMAE [95% CI] | ΔRMSE [95% CI] | ΔMEG [95% CI] |\n|---|---|---|---|"
        );
        let iv = |x: &Interval| format!("{:+.4} [{:+.4}, {:+.4}]", x.delta, x.ci_low, x.ci_high);
        for p in &r.paired {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                p.spec,
                iv(&p.mae),
                iv(&p.rmse),
                p.meg
                    .as_ref()
                    .map(|c| format!("{:+.4} [{:+.4}, {:+.4}]", c.delta, c.ci_low, c.ci_high))
                    .unwrap_or_else(|| "–".into())
            );
        }
        let _ = writeln!(s);
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(s, "**Not run:**");
        for (spec, why) in &r.skipped {
            let _ = writeln!(s, "- `{spec}`: {why}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(
        s,
        "![MAE against δ](delayed_mae.svg)\n\n![RMSE against δ](delayed_rmse.svg)\n\n![MEG against δ](delayed_meg.svg)"
    );
    s
}

/// Write `delayed.json`, `report.md`, `delayed_mae.svg`, `delayed_rmse.svg`
/// and `delayed_meg.svg` into `out`.
pub fn write_report(out: &Path, r: &DelayedReport) -> Result<(), ArenaError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ArenaError::Io { path, source }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let json_path = out.join("delayed.json");
    let json = serde_json::to_string_pretty(r).map_err(|e| ArenaError::Config(e.to_string()))?;
    std::fs::write(&json_path, json + "\n").map_err(io(&json_path))?;
    for (file, title, pick) in [
        ("delayed_mae.svg", "MAE", true),
        ("delayed_rmse.svg", "RMSE", false),
    ] {
        let series: Vec<Series> = r
            .methods
            .iter()
            .map(|m| Series {
                name: m.spec.clone(),
                points: (if pick { &m.mae } else { &m.rmse })
                    .iter()
                    .map(|(d, v)| (*d as f64, *v))
                    .collect(),
            })
            .collect();
        line_chart(
            &out.join(file),
            &format!(
                "Delayed ratings ({}): {title} against label delay",
                r.dataset
            ),
            "δ (user's own ratings until the label matures)",
            title,
            &series,
            &[],
        )?;
    }
    // MAE curves share a y axis starting at 0; the gain over static shows
    // the differences.
    let series: Vec<Series> = r
        .methods
        .iter()
        .filter(|m| m.spec != REFERENCE)
        .map(|m| Series {
            name: m.spec.clone(),
            points: r
                .rows
                .iter()
                .filter(|x| x.spec == m.spec)
                .filter_map(|x| Some((x.delta as f64, x.meg.as_ref()?.delta)))
                .collect(),
        })
        .collect();
    line_chart(
        &out.join("delayed_meg.svg"),
        &format!("Delayed ratings ({}): MEG against static", r.dataset),
        "δ (user's own ratings until the label matures)",
        "MEG (MAE of static − MAE of method, per user)",
        &series,
        &[],
    )?;
    let md_path = out.join("report.md");
    std::fs::write(&md_path, markdown(r)).map_err(io(&md_path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use evomem_core::{Dataset, Interaction, ItemId, LogicalTime, User, UserId};

    /// 40 users with 6 ratings of 3 each, interleaved in time.
    fn stream() -> Stream {
        let users = 40u32;
        let data = Dataset {
            name: "toy".into(),
            users: (0..users)
                .map(|u| User {
                    id: UserId(u),
                    token: u.to_string(),
                    attributes: Default::default(),
                })
                .collect(),
            interactions: (0..users * 6)
                .map(|t| Interaction {
                    user: UserId(t % users),
                    item: ItemId(t / users),
                    rating: Some(3.0),
                    timestamp: i64::from(t),
                    time: LogicalTime(u64::from(t)),
                })
                .collect(),
            ..Dataset::default()
        };
        Stream::build(&data, None, 1).unwrap()
    }

    fn method(spec: &str, stream: &Stream, error: impl Fn(u32) -> f64) -> MethodRun {
        MethodRun {
            spec: spec.into(),
            delta: 0,
            llm: false,
            predictions: stream
                .events
                .iter()
                .map(|e| 3.0 + error(e.user().0))
                .collect(),
            fallbacks: 0,
            matured: 0,
            memory_records: 0,
            memory_tokens: 0,
            decision_tokens: 0,
            update_tokens: 0,
            stats: serde_json::Value::Null,
        }
    }

    /// Users' errors spread from 0 to 2 so that each method's own
    /// interval is wide, and the other method is worse by 0.02 for every
    /// user: the marginal intervals overlap, the paired one lies above 0.
    #[test]
    fn the_paired_table_separates_what_the_marginals_cannot() {
        let s = stream();
        let boot = BootstrapConfig {
            resamples: 500,
            seed: 3,
            ..BootstrapConfig::default()
        };
        let spread = |u: u32| f64::from(u) * 0.05;
        let runs = vec![
            method(FOCUS, &s, spread),
            method("other", &s, |u| spread(u) + 0.02),
        ];
        let p = paired_against(&s, &runs, FOCUS, 0, &boot);
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert!((p.mae.delta - 0.02).abs() < 1e-9, "{p:?}");
        assert!(p.mae.ci_low > 0.0 && p.rmse.ci_low > 0.0, "{p:?}");
        let meg = p.meg.as_ref().unwrap();
        assert!(meg.delta > 0.0 && meg.ci_low > 0.0, "{meg:?}");
        // Each method's own MAE over resampled users varies far more than
        // 0.02: the marginal intervals overlap.
        let alone = |r: &MethodRun| {
            let x: Vec<UserPair> = user_sums(&s, &r.predictions)
                .into_values()
                .map(|o| (o, (0.0, 0.0, 0.0)))
                .collect();
            cluster_bootstrap(&x, &boot).0
        };
        let (f, o) = (alone(&runs[0]), alone(&runs[1]));
        assert!(o.ci_low < f.ci_high, "marginals {f:?} {o:?}");
        // The sign is the focus's advantage: swap the two and it turns.
        let swapped = vec![
            method(FOCUS, &s, |u| spread(u) + 0.02),
            method("other", &s, spread),
        ];
        let q = &paired_against(&s, &swapped, FOCUS, 0, &boot)[0];
        assert!(
            q.mae.ci_high < 0.0 && q.meg.as_ref().unwrap().ci_high < 0.0,
            "{q:?}"
        );
        // No focus run, no table.
        assert!(paired_against(&s, &runs[1..], FOCUS, 0, &boot).is_empty());
    }
}
