//! Runs: several policy specs over one plan, written to a run directory.
//!
//! Layout of `OUT/` (see the shared contract in `ARCHITECTURE.md`):
//!
//! ```text
//! OUT/config.json         resolved EvalConfig
//! OUT/summary.json        metrics of every policy (deterministic)
//! OUT/timing.json         wall times and LLM latency (not deterministic)
//! OUT/report.md           tables and SVG plots
//! OUT/<slug>/metrics.json metrics, n_users, config, data SHA-256s, plan,
//!                         policy stats, op-label counts, LLM accounting, embedding
//! OUT/drift_groups.json   per-policy metrics by preference-drift tercile
//! OUT/embed-cache.json    embedding-cache hits and misses (when there is a cache)
//! OUT/<slug>/per_user.jsonl, decisions.jsonl, ops.jsonl (unless --ops-log off),
//!            config.json, timing.json
//! ```
//!
//! Everything except `timing.json`, `embed-cache.json` and the wall-time and
//! embedding-cache sections of `report.md` is byte-identical for the same config, data and seed (with the offline
//! backend or a replayed LLM cache): policies run in parallel but each has its
//! own engine, RNGs and hub, and outputs are written in spec order.

use crate::decider::Decider;
use crate::error::EvalError;
use crate::protocol::{Plan, ProtocolConfig};
use crate::replay::{progress_total, run_policy, DecisionRecord, PolicyRun};
use crate::report;
use evomem_core::metrics::RankMetrics;
use evomem_core::{Dataset, Embedder};
use evomem_embed::CachedEmbedder;
use evomem_llm::LlmHub;
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A fully resolved evaluation config, written to `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalConfig {
    /// Data folder.
    pub data: PathBuf,
    /// Data format (`recbole`, `agentcf`, `iagent`, `jsonl`), or detected.
    pub format: Option<String>,
    /// Protocol settings.
    #[serde(flatten)]
    pub protocol: ProtocolConfig,
    /// Policy specs, in run order.
    pub policies: Vec<String>,
    /// LLM backend spec (`offline` or `openai:MODEL@URL`).
    pub llm: String,
    /// Whether offline role runs also record estimated model tokens.
    #[serde(default)]
    pub llm_estimate: bool,
    /// Whether each policy's op log is written to `ops.jsonl` (default true;
    /// counts always go to `metrics.json`).
    #[serde(default = "yes")]
    pub ops_log: bool,
    /// LLM cache mode (`off`, `read-write`, `replay-only`).
    pub llm_cache: String,
    /// LLM cache file.
    pub llm_cache_path: Option<PathBuf>,
    /// Models folder for the embedder.
    pub models_dir: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            data: PathBuf::new(),
            format: None,
            protocol: ProtocolConfig::default(),
            policies: Vec::new(),
            llm: "offline".into(),
            llm_estimate: false,
            ops_log: true,
            llm_cache: "off".into(),
            llm_cache_path: None,
            models_dir: None,
        }
    }
}

/// Builds the LLM hub of one policy (one hub per policy keeps accounting apart).
pub type HubFactory<'a> = dyn Fn(&PolicySpec) -> Result<Arc<LlmHub>, String> + Sync + 'a;

/// What a run needs besides its config.
pub struct RunInputs<'a> {
    /// The loaded dataset.
    pub dataset: &'a Dataset,
    /// SHA-256 of every data file read.
    pub data_sha256: BTreeMap<String, String>,
    /// Embedder for candidates (and policies).
    pub embedder: Arc<dyn Embedder>,
    /// The embedder's fallback notice, if any.
    pub embedder_notice: Option<String>,
    /// Hub per policy.
    pub hub_for: &'a HubFactory<'a>,
    /// The persistent cache behind `embedder`, when there is one: its hit
    /// rate goes to `OUT/embed-cache.json`, the report and
    /// [`RunSummary::embed_cache`].
    pub embed_cache: Option<&'a CachedEmbedder<Arc<dyn Embedder>>>,
}

/// Progress of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressEvent {
    /// The plan is built; `total` steps follow over `policies` policies.
    Started {
        /// Total steps (observations + decisions, over all policies).
        total: u64,
        /// Number of policies.
        policies: usize,
    },
    /// `n` more steps done.
    Advanced(u64),
    /// One policy finished.
    PolicyDone {
        /// Its spec.
        spec: String,
        /// Its wall time in seconds.
        wall_s: f64,
    },
}

/// The result of one policy, as summarised for tables and reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicySummary {
    /// Spec string.
    pub spec: String,
    /// Folder name.
    pub slug: String,
    /// Mean metrics.
    pub metrics: RankMetrics,
    /// Users with a decision.
    pub n_users: usize,
    /// Ops applied.
    pub ops_total: usize,
    /// Ops per lifecycle label.
    pub op_labels: BTreeMap<String, usize>,
    /// Number of users whose target had rank r, at index r-1.
    pub rank_histogram: Vec<usize>,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Per policy, in spec order.
    pub policies: Vec<PolicySummary>,
    /// Wall time of each policy, seconds.
    pub policy_wall_s: Vec<f64>,
    /// Wall time of the whole run (plan, embeddings, policies, writing), seconds.
    pub wall_s: f64,
    /// The plan's counts.
    pub plan: crate::protocol::PlanStats,
    /// One line on the embedding cache (hits, misses, vectors stored), when
    /// the run had one.
    pub embed_cache: Option<String>,
}

/// The folder name of a spec: `[`, `]`, `,`, `=` become `_`.
pub fn slug(spec: &str) -> String {
    spec.chars()
        .map(|c| match c {
            '[' | ']' | ',' | '=' => '_',
            c => c,
        })
        .collect()
}

/// One per-user line of `per_user.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerUser {
    /// User token.
    pub user: String,
    /// Decision id.
    pub decision_id: u64,
    /// Decision time.
    pub at: u64,
    /// Target item token.
    pub target: String,
    /// 1-based rank of the target.
    pub rank: usize,
    /// Number of candidates.
    pub n_candidates: usize,
    /// Metrics of this decision.
    #[serde(flatten)]
    pub metrics: RankMetrics,
}

/// One policy's finished run. Its op log is written to `ops.jsonl` and
/// dropped as soon as the policy finishes (only the counts are kept), so a
/// grid of AtomRec variants does not hold every variant's millions of ops
/// until the last one is done.
struct Finished {
    run: PolicyRun,
    hub: Arc<LlmHub>,
    wall_s: f64,
    summary: PolicySummary,
    by_op: BTreeMap<String, usize>,
}

/// Run every policy of `config` on `inputs.dataset` and write `out`.
pub fn run_eval(
    config: &EvalConfig,
    inputs: RunInputs<'_>,
    out: &Path,
    progress: &(dyn Fn(ProgressEvent) + Sync),
) -> Result<RunSummary, EvalError> {
    let started = Instant::now();
    let specs = parse_specs(&config.policies)?;
    let plan = Plan::build(inputs.dataset, &config.protocol)?;
    let decider = Decider::new(&plan, inputs.embedder.clone())?;
    let per_policy = progress_total(&plan);
    progress(ProgressEvent::Started {
        total: per_policy * specs.len() as u64,
        policies: specs.len(),
    });

    let run_one = |spec: &PolicySpec| -> Result<Finished, EvalError> {
        let t0 = Instant::now();
        let label = spec.to_string();
        let hub = (inputs.hub_for)(spec).map_err(|message| EvalError::Config {
            field: "llm".into(),
            message,
        })?;
        let deps = PolicyDeps {
            embedder: inputs.embedder.clone(),
            llm: hub.clone(),
            seed: config.protocol.seed,
        };
        let mut policy = registry::build(spec, &deps).map_err(|source| EvalError::Policy {
            policy: label.clone(),
            phase: "build",
            source,
        })?;
        let mut run = run_policy(&plan, policy.as_mut(), &label, &decider, &hub, &|n| {
            progress(ProgressEvent::Advanced(n))
        })?;
        let wall_s = t0.elapsed().as_secs_f64();
        // The policy's derived state (AtomRec's graph mirror) is not needed
        // for the outputs; free it before the op log is written.
        drop(policy);
        let summary = summarise(&label, &plan, &run);
        let by_op = count_by(run.ops.iter().map(|o| o.op.name().to_string()));
        let dir = out.join(slug(&label));
        std::fs::create_dir_all(&dir).map_err(|e| EvalError::io(&dir, e))?;
        if config.ops_log {
            write_jsonl(&dir.join("ops.jsonl"), run.ops.iter().map(without_vectors))?;
        }
        run.ops = Vec::new();
        progress(ProgressEvent::PolicyDone {
            spec: label,
            wall_s,
        });
        Ok(Finished {
            run,
            hub,
            wall_s,
            summary,
            by_op,
        })
    };
    // Policies run in parallel with the offline backend. With a model
    // backend they run one after another, so that per-policy hubs do not
    // contend for the cache file and the server sees one client.
    let finished: Vec<Result<Finished, EvalError>> = if config.llm == "offline" {
        specs.par_iter().map(run_one).collect()
    } else {
        specs.iter().map(run_one).collect()
    };
    let finished: Vec<Finished> = finished.into_iter().collect::<Result<_, _>>()?;

    std::fs::create_dir_all(out).map_err(|e| EvalError::io(out, e))?;
    write_json(&out.join("config.json"), &config)?;
    let embedding = serde_json::json!({
        "model": decider.model_id(),
        "dim": decider.dim(),
        "items_embedded": decider.embedded_items(),
        "notice": inputs.embedder_notice,
    });
    let mut summaries = Vec::new();
    let mut walls = Vec::new();
    let mut timing_policies = serde_json::Map::new();
    for (spec, f) in specs.iter().zip(&finished) {
        let spec_s = spec.to_string();
        // Created when the policy finished (its ops.jsonl went there).
        let dir = out.join(slug(&spec_s));
        let summary = f.summary.clone();
        let accounting = crate::compat::llm_accounting(&f.hub);
        let metrics = serde_json::json!({
            "policy": spec_s,
            "dataset": plan.dataset.name,
            "metrics": summary.metrics,
            "n_users": summary.n_users,
            "config": comparable_config(config),
            "data_sha256": inputs.data_sha256,
            "plan": plan.stats,
            "policy_stats": f.run.stats,
            "observed": f.run.observed,
            "ops": {
                "total": summary.ops_total,
                "by_label": summary.op_labels,
                "by_op": f.by_op,
            },
            "llm": without_latency(&accounting),
            "embedding": embedding,
        });
        write_json(&dir.join("metrics.json"), &metrics)?;
        growth_plot(&dir, &spec_s, &f.run.stats)?;
        write_json(&dir.join("config.json"), &config)?;
        let timing = serde_json::json!({
            "wall_s": f.wall_s,
            "llm_runtime": crate::compat::llm_runtime(&f.hub),
        });
        write_json(&dir.join("timing.json"), &timing)?;
        timing_policies.insert(spec_s.clone(), timing);
        write_jsonl(
            &dir.join("per_user.jsonl"),
            f.run.decisions.iter().map(|d| per_user(&plan, d)),
        )?;
        write_jsonl(
            &dir.join("decisions.jsonl"),
            f.run.decisions.iter().map(|d| decision_json(&plan, d)),
        )?;
        summaries.push(summary);
        walls.push(f.wall_s);
    }
    let summary_json = serde_json::json!({
        "dataset": plan.dataset.name,
        "n_users": plan.decisions.len(),
        "config": config,
        "data_sha256": inputs.data_sha256,
        "plan": plan.stats,
        "embedding": embedding,
        "policies": summaries,
    });
    write_json(&out.join("summary.json"), &summary_json)?;
    let wall_s = started.elapsed().as_secs_f64();
    write_json(
        &out.join("timing.json"),
        &serde_json::json!({ "wall_s": wall_s, "policies": timing_policies }),
    )?;
    let drift = drift_rows(&plan, inputs.embedder.as_ref(), &specs, &finished)?;
    write_json(&out.join("drift_groups.json"), &drift)?;
    let embed_cache = match inputs.embed_cache {
        Some(c) => Some(embed_cache_summary(c, out)?),
        None => None,
    };
    let accounting: Vec<serde_json::Value> = finished
        .iter()
        .map(|f| without_latency(&crate::compat::llm_accounting(&f.hub)))
        .collect();
    report::write_report(
        out,
        &report::ReportInput {
            dataset: &plan.dataset.name,
            config,
            plan: &plan.stats,
            embedding: &embedding,
            policies: &summaries,
            wall_s: &walls,
            total_wall_s: wall_s,
            llm: &accounting,
            drift: &drift,
            embed_cache: embed_cache.as_deref(),
        },
    )?;
    Ok(RunSummary {
        policies: summaries,
        policy_wall_s: walls,
        wall_s,
        plan: plan.stats.clone(),
        embed_cache,
    })
}

/// The embedding cache's hit rate as one line, also written to
/// `OUT/embed-cache.json`. Counted after everything the run embedded
/// (candidates, policies, drift terciles).
fn embed_cache_summary(
    c: &CachedEmbedder<Arc<dyn Embedder>>,
    out: &Path,
) -> Result<String, EvalError> {
    let st = c.stats();
    let stored = c.stored().map_err(EvalError::Embed)?;
    let json = serde_json::json!({
        "path": c.path(),
        "model": c.model_id(),
        "hits": st.hits,
        "misses": st.misses,
        "hit_rate": st.hit_rate(),
        "stored": stored,
    });
    write_json(&out.join("embed-cache.json"), &json)?;
    Ok(format!(
        "embedding cache {}: {} hits, {} misses (hit rate {:.1}%), {} vectors stored for `{}`",
        c.path().display(),
        st.hits,
        st.misses,
        100.0 * st.hit_rate(),
        stored,
        c.model_id()
    ))
}

/// `OUT/<slug>/growth.svg` for a policy that reports `growth_by_history`
/// (AtomRec): memory size, and time when measured, per user by history length.
fn growth_plot(dir: &Path, spec: &str, stats: &serde_json::Value) -> Result<(), EvalError> {
    let Some(rows) = stats.get("growth_by_history").and_then(|v| v.as_array()) else {
        return Ok(());
    };
    if rows.is_empty() {
        return Ok(());
    }
    let groups: Vec<String> = rows
        .iter()
        .map(|r| r["history"].as_str().unwrap_or("?").to_string())
        .collect();
    let col = |k: &str, scale: f64| -> Vec<f64> {
        rows.iter()
            .map(|r| r[k].as_f64().unwrap_or(0.0) * scale)
            .collect()
    };
    let mut series = vec![
        ("atoms per user".to_string(), col("mean_atoms", 1.0)),
        ("links per user / 10".to_string(), col("mean_links", 0.1)),
        (
            "evolutions per user / 10".to_string(),
            col("mean_evolutions", 0.1),
        ),
    ];
    if rows.iter().all(|r| r.get("mean_ms").is_some()) {
        series.push(("observe ms per user".to_string(), col("mean_ms", 1.0)));
    }
    report::grouped_bars(
        &dir.join("growth.svg"),
        &format!("{spec}: memory and time per user by history length"),
        &groups,
        &series,
        "per user",
    )
}

/// Metrics of one policy on one preference-drift group (AtomRec §4.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftRow {
    /// Policy spec.
    pub policy: String,
    /// `Low`, `Medium` or `High`.
    pub group: String,
    /// Users in the group with a decision.
    pub n_users: usize,
    /// Mean d_u of those users.
    pub mean_drift: f64,
    /// Mean metrics over those users.
    pub metrics: RankMetrics,
}

/// Drift terciles over the users with a decision (d_u from the user's whole
/// history, an after-the-fact grouping that no policy sees), and each
/// policy's metrics per tercile.
fn drift_rows(
    plan: &Plan<'_>,
    embedder: &dyn Embedder,
    specs: &[PolicySpec],
    finished: &[Finished],
) -> Result<Vec<DriftRow>, EvalError> {
    use evomem_policy::atomrec::drift::{drift_groups, drift_scores, DriftGroup};
    let all = drift_scores(plan.dataset, embedder).map_err(EvalError::Embed)?;
    let decided: std::collections::BTreeSet<_> = plan.decisions.iter().map(|d| d.user).collect();
    let scores: BTreeMap<_, _> = all
        .into_iter()
        .filter(|(u, _)| decided.contains(u))
        .collect();
    let groups = drift_groups(&scores);
    let mut rows = Vec::new();
    for (spec, f) in specs.iter().zip(finished) {
        for g in [DriftGroup::Low, DriftGroup::Medium, DriftGroup::High] {
            let mut ms = Vec::new();
            let mut drift = 0.0;
            for d in &f.run.decisions {
                if groups.get(&d.user) == Some(&g) {
                    ms.push(d.metrics());
                    drift += scores.get(&d.user).copied().unwrap_or(0.0);
                }
            }
            if ms.is_empty() {
                continue;
            }
            rows.push(DriftRow {
                policy: spec.to_string(),
                group: format!("{g:?}"),
                n_users: ms.len(),
                mean_drift: drift / ms.len() as f64,
                metrics: RankMetrics::mean(&ms),
            });
        }
    }
    Ok(rows)
}

/// The config as it goes into `metrics.json`: without the LLM cache mode and
/// path, which differ between a recording run and its replay while the results
/// must not (the full config stays in `config.json`).
fn comparable_config(config: &EvalConfig) -> serde_json::Value {
    let mut v = serde_json::to_value(config).unwrap_or(serde_json::Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.remove("llm_cache");
        m.remove("llm_cache_path");
    }
    v
}

/// An op as written to `ops.jsonl`: embedding vectors are dropped (the model id
/// and dimension stay) so that the audit log of embedding-heavy policies such
/// as AtomRec stays small. Inspection and explanations never need the vectors.
fn without_vectors(op: &evomem_core::LoggedOp) -> serde_json::Value {
    let mut v = serde_json::to_value(op).unwrap_or(serde_json::Value::Null);
    strip_vectors(&mut v);
    v
}

fn strip_vectors(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(serde_json::Value::String(_)), Some(serde_json::Value::Array(vec))) =
                (m.get("model"), m.get("vector"))
            {
                let dim = vec.len();
                m.insert("vector".into(), serde_json::Value::Array(Vec::new()));
                m.insert("dim".into(), serde_json::json!(dim));
                return;
            }
            for x in m.values_mut() {
                strip_vectors(x);
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                strip_vectors(x);
            }
        }
        _ => {}
    }
}

fn parse_specs(policies: &[String]) -> Result<Vec<PolicySpec>, EvalError> {
    if policies.is_empty() {
        return Err(EvalError::Config {
            field: "policy".into(),
            message: "no policy given".into(),
        });
    }
    let mut specs = Vec::new();
    let mut slugs = BTreeMap::new();
    for p in policies {
        for spec in PolicySpec::parse_list(p).map_err(|e| EvalError::Config {
            field: "policy".into(),
            message: e.to_string(),
        })? {
            let s = slug(&spec.to_string());
            if let Some(prev) = slugs.insert(s.clone(), spec.to_string()) {
                return Err(EvalError::Config {
                    field: "policy".into(),
                    message: format!("`{prev}` and `{spec}` share the folder name `{s}`"),
                });
            }
            specs.push(spec);
        }
    }
    Ok(specs)
}

fn summarise(spec: &str, plan: &Plan<'_>, run: &PolicyRun) -> PolicySummary {
    let max_rank = plan
        .decisions
        .iter()
        .map(|d| d.candidates.len())
        .max()
        .unwrap_or(0);
    let mut hist = vec![0usize; max_rank];
    for d in &run.decisions {
        if let Some(h) = d.rank.checked_sub(1).and_then(|i| hist.get_mut(i)) {
            *h += 1;
        }
    }
    PolicySummary {
        spec: spec.to_string(),
        slug: slug(spec),
        metrics: run.metrics(),
        n_users: run.decisions.len(),
        ops_total: run.ops.len(),
        op_labels: count_by(run.ops.iter().map(|o| o.provenance.label.clone())),
        rank_histogram: hist,
    }
}

fn count_by(keys: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for k in keys {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

fn per_user(plan: &Plan<'_>, d: &DecisionRecord) -> PerUser {
    PerUser {
        user: plan.user_token(d.user).to_string(),
        decision_id: d.decision_id,
        at: d.at.0,
        target: plan.item_token(d.target).to_string(),
        rank: d.rank,
        n_candidates: d.candidates.len(),
        metrics: d.metrics(),
    }
}

fn decision_json(plan: &Plan<'_>, d: &DecisionRecord) -> serde_json::Value {
    serde_json::json!({
        "user": plan.user_token(d.user),
        "decision_id": d.decision_id,
        "at": d.at.0,
        "target": plan.item_token(d.target),
        "candidates": d.candidates.iter().map(|&c| plan.item_token(c)).collect::<Vec<_>>(),
        "scores": d.scores,
        "rank": d.rank,
        "context": d.context,
        "trace": d.trace,
    })
}

/// A copy of `v` without any object key containing `latency` (wall-clock
/// figures are not reproducible; they go to `timing.json`).
pub fn without_latency(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.iter()
                .filter(|(k, _)| !k.contains("latency"))
                .map(|(k, v)| (k.clone(), without_latency(v)))
                .collect(),
        ),
        serde_json::Value::Array(a) => {
            serde_json::Value::Array(a.iter().map(without_latency).collect())
        }
        other => other.clone(),
    }
}

/// Write pretty JSON plus a trailing newline.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), EvalError> {
    let mut s = serde_json::to_string_pretty(value).map_err(|e| EvalError::Json {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    })?;
    s.push('\n');
    std::fs::write(path, s).map_err(|e| EvalError::io(path, e))
}

/// Write one compact JSON value per line.
pub fn write_jsonl<T: Serialize>(
    path: &Path,
    values: impl Iterator<Item = T>,
) -> Result<(), EvalError> {
    let file = std::fs::File::create(path).map_err(|e| EvalError::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    for (k, v) in values.enumerate() {
        serde_json::to_writer(&mut w, &v).map_err(|e| EvalError::Json {
            path: path.to_path_buf(),
            line: k + 1,
            message: e.to_string(),
        })?;
        w.write_all(b"\n").map_err(|e| EvalError::io(path, e))?;
    }
    w.flush().map_err(|e| EvalError::io(path, e))
}

/// Read `per_user.jsonl` of a policy folder.
pub fn read_per_user(dir: &Path) -> Result<Vec<PerUser>, EvalError> {
    let path = dir.join("per_user.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| EvalError::io(&path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(k, l)| {
            serde_json::from_str(l).map_err(|e| EvalError::Json {
                path: path.clone(),
                line: k + 1,
                message: format!("column {}: {e}", e.column()),
            })
        })
        .collect()
}
