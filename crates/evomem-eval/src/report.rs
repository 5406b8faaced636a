//! Human-readable output of a run: text and Markdown results tables,
//! `report.md`, and its SVG plots (drawn with plotters).
//!
//! Plots: a grouped bar chart of every metric per policy
//! (`plot_metrics.svg`) and the per-user distribution of the target's rank
//! per policy (`plot_ranks.svg`), which shows *where* policies differ, not
//! only by how much on average.

use crate::error::EvalError;
use crate::protocol::PlanStats;
use crate::run::{EvalConfig, PolicySummary};
use evomem_core::metrics::{RankMetrics, METRIC_NAMES};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

/// Everything `report.md` shows.
pub struct ReportInput<'a> {
    /// Dataset name.
    pub dataset: &'a str,
    /// Resolved config.
    pub config: &'a EvalConfig,
    /// Plan counts.
    pub plan: &'a PlanStats,
    /// Embedding info (model, dim, notice).
    pub embedding: &'a serde_json::Value,
    /// Per policy.
    pub policies: &'a [PolicySummary],
    /// Per-policy wall time, seconds.
    pub wall_s: &'a [f64],
    /// Whole-run wall time, seconds.
    pub total_wall_s: f64,
    /// Per-policy LLM accounting (latency removed).
    pub llm: &'a [serde_json::Value],
    /// Per-policy metrics by preference-drift tercile.
    pub drift: &'a [crate::run::DriftRow],
    /// The embedding cache's line, when the run had one.
    pub embed_cache: Option<&'a str>,
}

/// A fixed-width text table: policy × HR@{1,3,5,10}, NDCG@{1,3,5,10}, MRR.
pub fn results_table(rows: &[(String, RankMetrics)]) -> String {
    let w = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(6).max(6);
    let mut s = format!("{:<w$}", "policy");
    for m in METRIC_NAMES {
        let _ = write!(s, " {m:>7}");
    }
    s.push('\n');
    for (name, m) in rows {
        let _ = write!(s, "{name:<w$}");
        for v in m.values() {
            let _ = write!(s, " {v:>7.4}");
        }
        s.push('\n');
    }
    s
}

/// The same table in Markdown.
pub fn markdown_table(rows: &[(String, RankMetrics)]) -> String {
    let mut s = String::from("| policy |");
    for m in METRIC_NAMES {
        let _ = write!(s, " {m} |");
    }
    s.push_str("\n|---|");
    for _ in METRIC_NAMES {
        s.push_str("---:|");
    }
    s.push('\n');
    for (name, m) in rows {
        let _ = write!(s, "| `{name}` |");
        for v in m.values() {
            let _ = write!(s, " {v:.4} |");
        }
        s.push('\n');
    }
    s
}

/// Write `report.md`, `plot_metrics.svg` and `plot_ranks.svg` into `out`:
/// the plots, then the report's sections in document order.
pub fn write_report(out: &Path, r: &ReportInput<'_>) -> Result<(), EvalError> {
    plot_metrics(out, r)?;
    plot_ranks(out, r)?;
    let names: Vec<String> = r.policies.iter().map(|p| p.spec.clone()).collect();
    let mut s = String::new();
    report_header(&mut s, r);
    report_results(&mut s, r);
    report_ops(&mut s, r);
    report_rest(&mut s, out, r, &names);
    let path = out.join("report.md");
    std::fs::write(&path, s).map_err(|e| EvalError::io(&path, e))
}

/// Every ranking metric per policy, as grouped bars.
fn plot_metrics(out: &Path, r: &ReportInput<'_>) -> Result<(), EvalError> {
    let metric_series: Vec<(String, Vec<f64>)> = r
        .policies
        .iter()
        .map(|p| (p.spec.clone(), p.metrics.values().to_vec()))
        .collect();
    let groups: Vec<String> = METRIC_NAMES.iter().map(|s| s.to_string()).collect();
    grouped_bars(
        &out.join("plot_metrics.svg"),
        "Ranking metrics per policy",
        &groups,
        &metric_series,
        "value",
    )?;

    Ok(())
}

/// The share of users per rank of the target (ranks above 20 pooled).
fn plot_ranks(out: &Path, r: &ReportInput<'_>) -> Result<(), EvalError> {
    let max_rank = r
        .policies
        .iter()
        .map(|p| p.rank_histogram.len())
        .max()
        .unwrap_or(0);
    let shown = max_rank.min(20);
    let mut rank_groups: Vec<String> = (1..=shown).map(|k| k.to_string()).collect();
    if max_rank > shown {
        rank_groups.push(format!(">{shown}"));
    }
    let rank_series: Vec<(String, Vec<f64>)> = r
        .policies
        .iter()
        .map(|p| {
            let n = p.n_users.max(1) as f64;
            let mut v: Vec<f64> = (0..shown)
                .map(|k| p.rank_histogram.get(k).copied().unwrap_or(0) as f64 / n)
                .collect();
            if max_rank > shown {
                let rest: usize = p.rank_histogram.iter().skip(shown).sum();
                v.push(rest as f64 / n);
            }
            (p.spec.clone(), v)
        })
        .collect();
    grouped_bars(
        &out.join("plot_ranks.svg"),
        "Share of users by rank of the target",
        &rank_groups,
        &rank_series,
        "share of users",
    )?;
    Ok(())
}

/// Data, protocol, decisions, target, embedder and LLM.
fn report_header(s: &mut String, r: &ReportInput<'_>) {
    let c = r.config;
    let _ = writeln!(s, "# evomem evaluation report\n");
    let _ = writeln!(s, "- data: `{}` (`{}`)", c.data.display(), r.dataset);
    let _ = writeln!(
        s,
        "- protocol: {:?}, {} negatives ({:?} sampling, fixed lists {:?}), seed {}, users {}",
        c.protocol.protocol,
        c.protocol.negatives,
        c.protocol.sampling,
        c.protocol.fixed_candidates,
        c.protocol.seed,
        c.protocol.users
    );
    let _ = writeln!(
        s,
        "- decisions: {} of {} users; mean {:.1} candidates; {} interactions visible (retrospective), {} in the replay",
        r.plan.decisions,
        r.plan.users_total,
        r.plan.mean_candidates,
        r.plan.retrospective_visible,
        r.plan.stream_len
    );
    if c.protocol.target == crate::protocol::TargetSplit::Valid {
        let _ = writeln!(
            s,
            "- **target: validation interactions** (`--target valid`, for tuning; these are not test results)"
        );
    }
    let _ = writeln!(
        s,
        "- embedding: `{}` (dim {})",
        r.embedding["model"].as_str().unwrap_or("?"),
        r.embedding["dim"]
    );
    let _ = writeln!(s, "- LLM: `{}`, cache `{}`\n", c.llm, c.llm_cache);
}

/// The metrics table and the plots.
fn report_results(s: &mut String, r: &ReportInput<'_>) {
    let rows: Vec<(String, RankMetrics)> = r
        .policies
        .iter()
        .map(|p| (p.spec.clone(), p.metrics))
        .collect();
    let _ = writeln!(s, "## Results\n");
    s.push_str(&markdown_table(&rows));
    let _ = writeln!(
        s,
        "\nTies between candidate scores are broken by the seeded shuffled position, never in the target's favour.\n"
    );
    let _ = writeln!(s, "![metrics](plot_metrics.svg)\n");
    let _ = writeln!(s, "![ranks](plot_ranks.svg)\n");
}

/// Memory ops per policy and lifecycle label.
fn report_ops(s: &mut String, r: &ReportInput<'_>) {
    let _ = writeln!(s, "## Memory ops by lifecycle label\n");
    let mut labels: Vec<&String> = r.policies.iter().flat_map(|p| p.op_labels.keys()).collect();
    labels.sort();
    labels.dedup();
    if labels.is_empty() {
        let _ = writeln!(s, "No policy wrote memory ops.\n");
    } else {
        let _ = write!(s, "| policy | total |");
        for l in &labels {
            let _ = write!(s, " {l} |");
        }
        let _ = write!(s, "\n|---|---:|");
        for _ in &labels {
            s.push_str("---:|");
        }
        s.push('\n');
        for p in r.policies {
            let _ = write!(s, "| `{}` | {} |", p.spec, p.ops_total);
            for l in &labels {
                let _ = write!(s, " {} |", p.op_labels.get(*l).copied().unwrap_or(0));
            }
            s.push('\n');
        }
        s.push('\n');
    }
}

/// Preference drift, memory growth, LLM accounting, wall time and the
/// embedding cache.
fn report_rest(s: &mut String, out: &Path, r: &ReportInput<'_>, names: &[String]) {
    if !r.drift.is_empty() {
        let _ = writeln!(
            s,
            "## By preference drift\n\nUsers split into terciles of d_u = 1 − cos(mean item embedding of the early half of their history, of the late half) (AtomRec §4.4); also in `drift_groups.json`.\n"
        );
        s.push_str(&drift_table(r.drift));
        s.push('\n');
    }
    let growth: Vec<&PolicySummary> = r
        .policies
        .iter()
        .filter(|p| out.join(&p.slug).join("growth.svg").exists())
        .collect();
    if !growth.is_empty() {
        let _ = writeln!(s, "## Memory growth\n");
        for p in growth {
            let _ = writeln!(s, "![{} growth]({}/growth.svg)\n", p.spec, p.slug);
        }
    }
    let _ = writeln!(s, "## LLM accounting\n");
    s.push_str(&llm_table(names, r.llm));
    let _ = writeln!(s, "\n## Wall time\n");
    let _ = writeln!(
        s,
        "Not reproducible; also in `timing.json`. Policies run in parallel.\n"
    );
    for (name, w) in names.iter().zip(r.wall_s) {
        let _ = writeln!(s, "- `{name}`: {w:.2} s");
    }
    let _ = writeln!(s, "- whole run: {:.2} s", r.total_wall_s);
    if let Some(line) = r.embed_cache {
        let _ = writeln!(s, "\n## Embedding cache\n\n{line}");
    }
}

/// Per policy and role: runs, backend calls, tokens (totals and per-user
/// means), repairs and fallbacks. Full per-user detail stays in
/// `metrics.json` under `llm.per_user`.
/// The drift table of `report.md`: per policy and tercile, the users, the
/// mean d_u and HR@{1,3,5}, NDCG@{3,5,10} (H@3 and N@3 are the metrics of
/// AtomRec's Figure 4).
fn drift_table(rows: &[crate::run::DriftRow]) -> String {
    let mut s = String::from(
        "| policy | drift | users | mean d_u | HR@1 | HR@3 | HR@5 | NDCG@3 | NDCG@5 | NDCG@10 |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for d in rows {
        let m = &d.metrics;
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {:.3} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} |",
            d.policy,
            d.group,
            d.n_users,
            d.mean_drift,
            m.hr1,
            m.hr3,
            m.hr5,
            m.ndcg3,
            m.ndcg5,
            m.ndcg10
        );
    }
    s
}

fn llm_table(names: &[String], llm: &[serde_json::Value]) -> String {
    let mut s = String::new();
    let mut rows = Vec::new();
    let mut silent = Vec::new();
    for (name, acc) in names.iter().zip(llm) {
        let Some(roles) = acc.get("per_role").and_then(|v| v.as_object()) else {
            silent.push(name.as_str());
            continue;
        };
        let users = acc["per_user_mean"]["n_users"].as_f64().unwrap_or(0.0);
        let per_user = |v: f64| if users > 0.0 { v / users } else { 0.0 };
        for (role, r) in roles {
            let n = |k: &str| r[k].as_f64().unwrap_or(0.0);
            let tokens = n("prompt_tokens") + n("completion_tokens");
            rows.push(format!(
                "| `{name}` | {role} | {} | {} | {:.2} | {} | {} | {:.0} | {} | {} |",
                n("runs"),
                n("calls"),
                per_user(n("calls")),
                n("prompt_tokens"),
                n("completion_tokens"),
                per_user(tokens),
                n("repairs"),
                n("fallbacks"),
            ));
        }
    }
    if rows.is_empty() {
        s.push_str("No policy called a language-model role.\n");
    } else {
        s.push_str(
            "Calls are requests to a model backend (cache hits included); offline runs make none.\n\n\
             | policy | role | runs | calls | calls/user | prompt tok | completion tok | tokens/user | repairs | fallbacks |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for row in rows {
            s.push_str(&row);
            s.push('\n');
        }
    }
    if !silent.is_empty() {
        let _ = writeln!(s, "\nNo LLM accounting from: `{}`", silent.join("`, `"));
    }
    s.push('\n');
    s.push_str(&estimate_table(names, llm));
    s
}

/// With `--llm-estimate`: per policy and role, the runs per user of the roles
/// answered offline and what a model would have been charged for them
/// (rendered prompt, offline answer as JSON; `ceil(chars / 4)` tokens).
/// Empty when no run recorded an estimate.
fn estimate_table(names: &[String], llm: &[serde_json::Value]) -> String {
    let mut rows = Vec::new();
    for (name, acc) in names.iter().zip(llm) {
        let Some(roles) = acc["per_user_mean"]["per_role"].as_object() else {
            continue;
        };
        let mut total = (0.0, 0.0, 0.0);
        for (role, m) in roles {
            let n = |k: &str| m[k].as_f64().unwrap_or(0.0);
            if n("est_tokens") <= 0.0 {
                continue;
            }
            total.0 += n("runs");
            total.1 += n("est_prompt_tokens");
            total.2 += n("est_completion_tokens");
            rows.push(format!(
                "| `{name}` | {role} | {:.2} | {:.0} | {:.0} | {:.0} |",
                n("runs"),
                n("est_prompt_tokens"),
                n("est_completion_tokens"),
                n("est_tokens"),
            ));
        }
        if total.1 + total.2 > 0.0 {
            rows.push(format!(
                "| `{name}` | **all roles** | {:.2} | {:.0} | {:.0} | {:.0} |",
                total.0,
                total.1,
                total.2,
                total.1 + total.2,
            ));
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "### Estimated model cost of the offline roles (`--llm-estimate`)\n\n\
         Per user: offline role runs, and the tokens a model would have been charged for \
         them: the rendered prompt (+4 per message) and the offline answer as compact JSON, \
         each at ceil(chars / 4).\n\n\
         | policy | role | runs/user | est. prompt tok/user | est. completion tok/user | est. tokens/user |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for row in rows {
        s.push_str(&row);
        s.push('\n');
    }
    s.push('\n');
    s
}

fn plot_err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> EvalError + '_ {
    move |e| EvalError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A grouped bar chart: one group per entry of `groups`, one bar per series.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
    y_desc: &str,
) -> Result<(), EvalError> {
    let n_groups = groups.len().max(1);
    let width_px = (120 + n_groups * (20 + 12 * series.len().max(1))).clamp(640, 1600) as u32;
    let y_max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-6)
        * 1.1;
    let root = SVGBackend::new(path, (width_px, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n_groups as f64, 0f64..y_max)
        .map_err(plot_err(path))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_desc)
        .draw()
        .map_err(plot_err(path))?;
    let k = series.len().max(1) as f64;
    let bar = 0.8 / k;
    for (si, (name, values)) in series.iter().enumerate() {
        let color = Palette99::pick(si).to_rgba();
        chart
            .draw_series(values.iter().enumerate().map(|(g, &v)| {
                let x0 = g as f64 + 0.1 + si as f64 * bar;
                let v = if v.is_finite() { v } else { 0.0 };
                Rectangle::new([(x0, 0.0), (x0 + bar, v)], color.filled())
            }))
            .map_err(plot_err(path))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err(path))?;
    for (g, label) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
        let style = TextStyle::from(("sans-serif", 13).into_font()).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            ),
        );
        root.draw(&Text::new(label.clone(), (px, py + 6), style))
            .map_err(plot_err(path))?;
    }
    root.present().map_err(plot_err(path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use evomem_llm::{Accounting, Counters};

    #[test]
    fn drift_table_shows_hr3_and_ndcg3_beside_the_other_columns() {
        let metrics = RankMetrics::from_rank(2);
        let rows = vec![crate::run::DriftRow {
            policy: "atomrec".into(),
            group: "High".into(),
            n_users: 7,
            mean_drift: 0.25,
            metrics,
        }];
        let t = drift_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "| policy | drift | users | mean d_u | HR@1 | HR@3 | HR@5 | NDCG@3 | NDCG@5 | NDCG@10 |"
        );
        assert_eq!(
            lines[1],
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        assert_eq!(
            lines[2],
            "| `atomrec` | High | 7 | 0.250 | 0.0000 | 1.0000 | 1.0000 | 0.6309 | 0.6309 | 0.6309 |"
        );
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn estimate_table_only_with_estimates() {
        let mut with = Accounting::default();
        let c = Counters {
            runs: 4,
            offline_runs: 4,
            est_prompt_tokens: 800,
            est_completion_tokens: 40,
            ..Counters::default()
        };
        with.record("mars_extract", Some("u1"), &c);
        with.record("mars_extract", Some("u2"), &c);
        let mut without = Accounting::default();
        without.record(
            "rank",
            Some("u1"),
            &Counters {
                runs: 1,
                offline_runs: 1,
                ..Counters::default()
            },
        );
        let names = vec!["mars".to_string(), "pop".to_string()];
        let t = llm_table(&names, &[with.to_json(), without.to_json()]);
        assert!(t.contains("Estimated model cost"), "{t}");
        assert!(
            t.contains("| `mars` | mars_extract | 4.00 | 800 | 40 | 840 |"),
            "{t}"
        );
        assert!(
            t.contains("| `mars` | **all roles** | 4.00 | 800 | 40 | 840 |"),
            "{t}"
        );
        assert!(!t.contains("| `pop` | rank | 1.00"), "{t}");
        let t = llm_table(&names[1..], &[without.to_json()]);
        assert!(!t.contains("Estimated"), "{t}");
    }
}
