//! Runs: several policy specs over one plan, written to a run folder.
//!
//! [`run_eval`] builds the plan once, runs every policy through it
//! ([`crate::replay::run_policy`]) and writes the run folder through the
//! typed [`dir::RunDir`] (layout in [`dir`], the `evomem-rundir` crate); the analyses the report adds
//! to the metrics (drift terciles, growth plots, rank histograms) are in
//! [`analysis`].
//!
//! Everything except `timing.json`, `embed-cache.json` and the wall-time
//! and embedding-cache sections of `report.md` is byte-identical for the same
//! config, data and seed (with the offline backend or a replayed LLM cache):
//! policies run in parallel but each has its own engine, RNGs and hub, and
//! outputs are written in spec order. Policies run on plain threads, as many
//! at a time as the thread setting allows ([`run_in_parallel`]).

pub mod analysis;
/// The run folder's format: the `evomem-rundir` crate, under its old path.
pub use evomem_rundir as dir;
pub mod oplog;

use crate::decider::Decider;
use crate::error::EvalError;
use crate::protocol::{Plan, ProtocolConfig};
use crate::replay::{progress_total, run_policy_on, PolicyRun};
use crate::report;
use analysis::{decision_line, drift_rows, growth_plot, item_titles, per_user, summarise};
use dir::{files, write_json, OpCounts, OpsLogFormat, PolicyMetrics, RunDir};
use evomem_core::metrics::RankMetrics;
use evomem_core::{Dataset, DecisionTag, Embedder};
use evomem_embed::CachedEmbedder;
use evomem_llm::LlmHub;
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use evomem_store::Engine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use analysis::DriftRow;
pub use dir::PerUser;

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
    /// Whether each policy's op log is written (default true; counts always
    /// go to `metrics.json`).
    #[serde(default = "yes")]
    pub ops_log: bool,
    /// The op log's format: `zst` (`ops.jsonl.zst`, the default) or `jsonl`
    /// (plain `ops.jsonl`). Left out of `metrics.json`: it changes no result.
    #[serde(default)]
    pub ops_log_format: OpsLogFormat,
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
            ops_log_format: OpsLogFormat::Zst,
            llm_cache: "off".into(),
            llm_cache_path: None,
            models_dir: None,
        }
    }
}

/// Builds the LLM hub of one policy (one hub per policy keeps accounting apart).
pub type HubFactory<'a> = dyn Fn(&PolicySpec) -> Result<Arc<LlmHub>, String> + Sync + 'a;

/// Policies built outside the family table, by name (the Python policies of
/// `evomem-py`). Their specs are their bare names; they run through the same
/// driver, engine, op log and run folder as every family, and get the same
/// [`PolicyDeps`] (embedder, a hub of their own, the seed).
pub struct ExternalPolicies<'a> {
    /// Names, which must not be family names.
    pub names: Vec<String>,
    /// Builds the policy `name` with `deps`.
    #[allow(clippy::type_complexity)]
    pub build: &'a (dyn Fn(&str, &PolicyDeps) -> Result<Box<dyn evomem_core::Policy>, evomem_core::PolicyError>
             + Sync
             + 'a),
}

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

/// One policy's finished run. Its op log (`ops.jsonl.zst`) was written while
/// it ran ([`oplog`]) and never held whole (only the counts are kept), so
/// neither one AtomRec run nor a grid of variants holds millions of ops.
struct Finished {
    run: PolicyRun,
    hub: Arc<LlmHub>,
    wall_s: f64,
    /// Seconds the op log's writer thread was busy (serialising,
    /// compressing, writing; 0 with `--ops-log off`). It overlaps `wall_s`,
    /// which ends when the log is complete.
    ops_log_s: f64,
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
    run_eval_with(config, inputs, None, out, progress)
}

/// [`run_eval`] with policies from outside the family table beside the
/// families: a spec in `config.policies` that names one of `external` is
/// built by it.
pub fn run_eval_with(
    config: &EvalConfig,
    inputs: RunInputs<'_>,
    external: Option<&ExternalPolicies<'_>>,
    out: &Path,
    progress: &(dyn Fn(ProgressEvent) + Sync),
) -> Result<RunSummary, EvalError> {
    let started = Instant::now();
    let run_dir = RunDir::new(out);
    let external_names: &[String] = external.map(|e| e.names.as_slice()).unwrap_or(&[]);
    let specs = parse_specs(&config.policies, external_names)?;
    let plan = Plan::build(inputs.dataset, &config.protocol)?;
    let decider = Decider::new(&plan, inputs.embedder.clone())?;
    let per_policy = progress_total(&plan);
    progress(ProgressEvent::Started {
        total: per_policy * specs.len() as u64,
        policies: specs.len(),
    });
    let ctx = RunCtx {
        config,
        inputs: &inputs,
        external,
        plan: &plan,
        decider: &decider,
        run_dir: &run_dir,
        progress,
    };
    // Policies run in parallel with the offline backend. With a model
    // backend they run one after another, so that per-policy hubs do not
    // contend for the cache file and the server sees one client.
    let finished: Vec<Result<Finished, EvalError>> = if config.llm == "offline" {
        run_in_parallel(&specs, rayon::current_num_threads(), |s| ctx.run_one(s))
    } else {
        specs.iter().map(|s| ctx.run_one(s)).collect()
    };
    let finished: Vec<Finished> = finished.into_iter().collect::<Result<_, _>>()?;
    ctx.write_outputs(out, &specs, &finished, started)
}

/// What every policy of one evaluation shares.
struct RunCtx<'a> {
    config: &'a EvalConfig,
    inputs: &'a RunInputs<'a>,
    external: Option<&'a ExternalPolicies<'a>>,
    plan: &'a Plan<'a>,
    decider: &'a Decider,
    run_dir: &'a RunDir,
    progress: &'a (dyn Fn(ProgressEvent) + Sync),
}

impl RunCtx<'_> {
    /// Build one policy and replay the plan through it, its op log written
    /// on the side.
    fn run_one(&self, spec: &PolicySpec) -> Result<Finished, EvalError> {
        let (config, inputs, plan, decider, run_dir, progress) = (
            self.config,
            self.inputs,
            self.plan,
            self.decider,
            self.run_dir,
            self.progress,
        );
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
        let built = match self.external {
            Some(ext) if spec.params.is_empty() && ext.names.contains(&spec.name) => {
                (ext.build)(&spec.name, &deps)
            }
            _ => registry::build(spec, &deps),
        };
        let mut policy = built.map_err(|source| EvalError::Policy {
            policy: label.clone(),
            phase: "build",
            source,
        })?;
        let dir = run_dir.policy(&label);
        dir.create()?;
        // With a log, it is written on its own thread while the policy runs
        // (`oplog`); without one, an earlier run's log must not stay behind.
        let (engine, writer) = if config.ops_log {
            let (writer, sink) = oplog::OpLogWriter::start(&dir, config.ops_log_format)?;
            (Engine::ephemeral_streaming(sink), Some(writer))
        } else {
            dir.remove_ops()?;
            (Engine::ephemeral_unlogged(), None)
        };
        let tick = |n| progress(ProgressEvent::Advanced(n));
        let run = run_policy_on(engine, plan, policy.as_mut(), &label, decider, &hub, &tick);
        // The sink went with the run's engine, so the writer has seen the
        // end of the log. Its own error says more than the sink's "writer
        // stopped"; a failed run leaves no partial log.
        let (mut run, ops_log_s) = match (run, writer.map(oplog::OpLogWriter::finish)) {
            (Ok(run), None) => (run, 0.0),
            (Ok(run), Some(Ok(busy_s))) => (run, busy_s),
            (_, Some(Err(e))) | (Err(e), _) => {
                dir.remove_ops()?;
                return Err(e);
            }
        };
        // The live memory is not an output; free it with the policy.
        run.state = evomem_core::MemoryState::new();
        let wall_s = t0.elapsed().as_secs_f64();
        drop(policy);
        let summary = summarise(&label, plan, &run);
        let by_op = run.tally.by_op.clone();
        progress(ProgressEvent::PolicyDone {
            spec: label,
            wall_s,
        });
        Ok(Finished {
            run,
            hub,
            wall_s,
            ops_log_s,
            summary,
            by_op,
        })
    }

    /// The run folder: config, each policy's files, summary, the titles of
    /// the items the decisions name, timing, drift groups, the embedding
    /// cache's figures and the report.
    fn write_outputs(
        &self,
        out: &Path,
        specs: &[PolicySpec],
        finished: &[Finished],
        started: Instant,
    ) -> Result<RunSummary, EvalError> {
        let (config, inputs, plan, decider, run_dir) = (
            self.config,
            self.inputs,
            self.plan,
            self.decider,
            self.run_dir,
        );
        run_dir.create()?;
        run_dir.write_json(files::CONFIG, &config)?;
        let embedding = serde_json::json!({
            "model": decider.model_id(),
            "dim": decider.dim(),
            "items_embedded": decider.embedded_items(),
            "notice": inputs.embedder_notice,
        });
        let mut summaries = Vec::new();
        let mut walls = Vec::new();
        let mut timing_policies = serde_json::Map::new();
        for (spec, f) in specs.iter().zip(finished) {
            let ctx = OutputCtx {
                run_dir,
                config,
                plan,
                data_sha256: &inputs.data_sha256,
                embedding: &embedding,
            };
            let timing = write_policy(&ctx, spec, f)?;
            timing_policies.insert(spec.to_string(), timing);
            summaries.push(f.summary.clone());
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
        run_dir.write_json("summary.json", &summary_json)?;
        run_dir.write_item_titles(&item_titles(plan))?;
        let wall_s = started.elapsed().as_secs_f64();
        run_dir.write_json(
            files::TIMING,
            &serde_json::json!({ "wall_s": wall_s, "policies": timing_policies }),
        )?;
        let runs: Vec<(String, &PolicyRun)> = specs
            .iter()
            .zip(finished)
            .map(|(s, f)| (s.to_string(), &f.run))
            .collect();
        let drift = drift_rows(plan, inputs.embedder.as_ref(), &runs)?;
        run_dir.write_json("drift_groups.json", &drift)?;
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
}

/// `run` on every spec, at most `workers` at a time, each on a plain thread
/// of its own; the results in spec order.
///
/// Not a rayon `par_iter`: a policy that waits for the embedder (which
/// computes on its own pool) would then wait as a rayon worker, and rayon
/// lets a waiting worker start other queued jobs on its stack, so a short
/// policy could sit on top of a long one and hold its result back (or the
/// reverse) until the other finished. Plain threads wait without taking
/// work; the workers take the next spec from a shared counter.
fn run_in_parallel<T, F>(specs: &[PolicySpec], workers: usize, run: F) -> Vec<Result<T, EvalError>>
where
    T: Send,
    F: Fn(&PolicySpec) -> Result<T, EvalError> + Sync,
{
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<T, EvalError>>>> =
        specs.iter().map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(spec) = specs.get(i) else { break };
        let result = run(spec);
        if let Ok(mut slot) = slots[i].lock() {
            *slot = Some(result);
        }
    };
    std::thread::scope(|scope| {
        for _ in 0..workers.clamp(1, specs.len().max(1)) {
            scope.spawn(work);
        }
    });
    slots
        .into_iter()
        .zip(specs)
        .map(|(slot, spec)| {
            slot.into_inner().ok().flatten().unwrap_or_else(|| {
                Err(EvalError::Config {
                    field: "policies".into(),
                    message: format!("policy `{spec}` did not finish"),
                })
            })
        })
        .collect()
}

/// What every policy folder's outputs share.
struct OutputCtx<'a, 'd> {
    run_dir: &'a RunDir,
    config: &'a EvalConfig,
    plan: &'a Plan<'d>,
    data_sha256: &'a BTreeMap<String, String>,
    embedding: &'a serde_json::Value,
}

/// Write one finished policy's folder (`metrics.json`, growth plot,
/// `config.json`, `timing.json`, `per_user.jsonl`, `decisions.jsonl`; its
/// `ops.jsonl.zst` was written when it finished) and return its timing entry.
fn write_policy(
    ctx: &OutputCtx<'_, '_>,
    spec: &PolicySpec,
    f: &Finished,
) -> Result<serde_json::Value, EvalError> {
    let spec_s = spec.to_string();
    let dir = ctx.run_dir.policy(&spec_s);
    let summary = &f.summary;
    let accounting = crate::compat::llm_accounting(&f.hub);
    dir.write_metrics(&PolicyMetrics {
        policy: spec_s.clone(),
        dataset: ctx.plan.dataset.name.clone(),
        metrics: summary.metrics,
        n_users: summary.n_users,
        config: comparable_config(ctx.config),
        data_sha256: ctx.data_sha256.clone(),
        plan: ctx.plan.stats.clone(),
        policy_stats: f.run.stats.clone(),
        observed: f.run.observed,
        ops: OpCounts {
            total: summary.ops_total,
            by_label: summary.op_labels.clone(),
            by_op: f.by_op.clone(),
        },
        llm: without_latency(&accounting),
        embedding: ctx.embedding.clone(),
    })?;
    if registry::family(&spec.name).is_ok_and(|fam| fam.caps.reports_growth) {
        growth_plot(dir.path(), &spec_s, &f.run.stats)?;
    }
    write_json(&dir.file(files::CONFIG), ctx.config)?;
    let timing = serde_json::json!({
        "wall_s": f.wall_s,
        "ops_log_s": f.ops_log_s,
        "llm_runtime": crate::compat::llm_runtime(&f.hub),
    });
    write_json(&dir.file(files::TIMING), &timing)?;
    let plan = ctx.plan;
    dir.write_per_user(f.run.decisions.iter().map(|d| per_user(plan, d)))?;
    dir.write_decisions(f.run.decisions.iter().map(|d| decision_line(plan, d)))?;
    Ok(timing)
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

/// The config as it goes into `metrics.json`: without the LLM cache mode and
/// path, which differ between a recording run and its replay while the results
/// must not, and without the op log's format, which changes no result (the
/// full config stays in `config.json`).
fn comparable_config(config: &EvalConfig) -> serde_json::Value {
    let mut v = serde_json::to_value(config).unwrap_or(serde_json::Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.remove("llm_cache");
        m.remove("llm_cache_path");
        m.remove("ops_log_format");
    }
    v
}

/// Parse the `--policy` lists: known families that serve ranking decisions,
/// with well-typed keys and distinct folder names; a bare name in
/// `external` is taken as it is.
fn parse_specs(policies: &[String], external: &[String]) -> Result<Vec<PolicySpec>, EvalError> {
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
            if spec.params.is_empty() && external.contains(&spec.name) {
                if registry::family(&spec.name).is_ok() {
                    return Err(EvalError::Config {
                        field: "policy".into(),
                        message: format!(
                            "`{}` is a family name; an outside policy needs another",
                            spec.name
                        ),
                    });
                }
            } else {
                check_family(&spec)?;
            }
            let s = evomem_core::text::slug(&spec.to_string());
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

/// Where a family that does not rank is run instead: the arenas of the
/// decisions it serves.
fn where_it_runs(caps: &registry::Capabilities) -> String {
    let arenas: Vec<&str> = caps
        .decisions
        .iter()
        .filter_map(|d| match d {
            DecisionTag::Act => Some("`evomem arena lifelong`"),
            DecisionTag::Predict => Some("`evomem arena delayed`"),
            DecisionTag::Generate => Some("`evomem arena generation`"),
            _ => None,
        })
        .collect();
    if arenas.is_empty() {
        String::new()
    } else {
        format!("; run it with {}", arenas.join(" or "))
    }
}

/// `spec` names a known family that serves ranking decisions, with
/// well-typed keys.
fn check_family(spec: &PolicySpec) -> Result<(), EvalError> {
    let config_err = |e: evomem_core::PolicyError| EvalError::Config {
        field: "policy".into(),
        message: e.to_string(),
    };
    let fam = registry::family(&spec.name).map_err(config_err)?;
    fam.check(spec).map_err(config_err)?;
    if !fam.serves(DecisionTag::Rank) {
        return Err(EvalError::Config {
            field: "policy".into(),
            message: format!(
                "`{}` does not serve ranking decisions (it serves: {}){}",
                spec.name,
                fam.caps
                    .decisions
                    .iter()
                    .map(|d| d.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                where_it_runs(&fam.caps)
            ),
        });
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_that_does_not_rank_is_sent_to_its_arena() {
        let msg = |name: &str| {
            let spec = registry::PolicySpec::parse(name).unwrap();
            check_family(&spec).unwrap_err().to_string()
        };
        let m = msg("memrl");
        assert!(
            m.contains("does not serve ranking") && m.contains("`evomem arena lifelong`"),
            "{m}"
        );
        assert!(msg("tide").contains("`evomem arena generation`"));
        assert!(check_family(&registry::PolicySpec::parse("pop").unwrap()).is_ok());
    }

    #[test]
    fn parallel_runs_keep_spec_order_and_the_worker_limit() {
        let names = ["no-memory", "random", "pop", "itemknn", "bpr", "seqmem"];
        let specs = parse_specs(&names.map(String::from), &[]).unwrap();
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let got = run_in_parallel(&specs, 2, |spec| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(20));
            running.fetch_sub(1, Ordering::SeqCst);
            if spec.to_string() == "pop" {
                return Err(EvalError::Compare("pop failed".into()));
            }
            Ok(spec.to_string())
        });
        let got: Vec<String> = got
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| e.to_string()))
            .collect();
        assert_eq!(
            got,
            [
                "no-memory",
                "random",
                "cannot compare runs: pop failed",
                "itemknn",
                "bpr",
                "seqmem"
            ]
        );
        assert_eq!(most.load(Ordering::SeqCst), 2, "two at a time, not more");
    }

    #[test]
    fn outside_policies_are_taken_by_name_but_never_as_a_family() {
        let ext = ["mine".to_string()];
        let specs = parse_specs(&["pop,mine".to_string()], &ext).unwrap();
        let names: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["pop", "mine"]);
        let err = parse_specs(&["mine".to_string()], &[]).unwrap_err();
        assert!(err.to_string().contains("unknown policy `mine`"), "{err}");
        let err = parse_specs(&["pop".to_string()], &["pop".to_string()]).unwrap_err();
        assert!(err.to_string().contains("family name"), "{err}");
        let err = parse_specs(&["mine[k=1]".to_string()], &ext).unwrap_err();
        assert!(
            err.to_string().contains("unknown policy"),
            "keys make it a family spec: {err}"
        );
    }
}
