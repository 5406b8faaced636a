//! `evaluate`, `compare` and op-log replay from Python.
//!
//! [`evaluate`] resolves the same [`EvalConfig`] as `evomem eval` (same
//! defaults, same embedder and persistent embedding cache, the offline
//! backend) and calls [`evomem_eval::run::run_eval_with`], so it writes the
//! same run folder: for the same arguments `metrics.json` is byte-identical
//! to the CLI's (a test checks it). Python policy objects in `policies` are
//! built by [`crate::policy::PyPolicy`] beside the families. The loop runs
//! with the GIL released.

use crate::convert::to_py;
use crate::data::PyDataset;
use crate::embed::{default_models_dir, load_embedder};
use crate::errors::{eval_err, EvalError};
use crate::policy::{PyPolicy, Shared};
use evomem_core::{Embedder, MemoryState, Policy, PolicyError};
use evomem_embed::CachedEmbedder;
use evomem_eval::bootstrap::BootstrapConfig;
use evomem_eval::protocol::{
    FixedCandidates, MemoryUsers, ProtocolConfig, ProtocolKind, Sampling, TargetSplit,
    UserSelection,
};
use evomem_eval::run::dir::OpsLogFormat;
use evomem_eval::run::dir::{PerUser, PolicyDir};
use evomem_eval::run::{EvalConfig, ExternalPolicies, RunInputs};
use evomem_llm::{CacheMode, CacheSettings, LlmConfig, LlmHub, Secret};
use evomem_policy::registry::{PolicyDeps, PolicySpec};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A value parsed by the protocol's own parser, or a `ValueError` naming
/// the argument.
fn parse<T: std::str::FromStr>(arg: &str, v: &str) -> PyResult<T>
where
    T::Err: std::fmt::Display,
{
    v.parse::<T>()
        .map_err(|e| PyValueError::new_err(format!("{arg}={v:?}: {e}")))
}

/// Run `policies` on `data` and write the run folder `out`; returns the
/// run's summary as JSON text, plus the final memory of each Python policy
/// when `return_memory` is set.
#[pyfunction]
#[pyo3(signature = (
    data, policies, out, protocol="retrospective", negatives=9, seed=42, target="test",
    users="all", memory_users="selected", sampling="uniform", fixed_candidates="as-given",
    tick=1000, ops_log=true, models_dir=None, threads=0, embed_cache="auto", return_memory=false,
    llm="offline", llm_roles=None, llm_cache="off", llm_cache_path=None
))]
// The parameters are the Python keyword arguments of `evomem.evaluate`
// (a struct would hide them from Python's signature and from the stubs).
#[allow(clippy::too_many_arguments)]
pub fn evaluate(
    py: Python<'_>,
    data: &PyDataset,
    policies: Vec<Bound<'_, PyAny>>,
    out: PathBuf,
    protocol: &str,
    negatives: usize,
    seed: u64,
    target: &str,
    users: &str,
    memory_users: &str,
    sampling: &str,
    fixed_candidates: &str,
    tick: usize,
    ops_log: bool,
    models_dir: Option<PathBuf>,
    threads: usize,
    embed_cache: &str,
    return_memory: bool,
    llm: &str,
    llm_roles: Option<BTreeMap<String, String>>,
    llm_cache: &str,
    llm_cache_path: Option<PathBuf>,
) -> PyResult<(String, PyObject)> {
    let protocol = ProtocolConfig {
        protocol: parse::<ProtocolKind>("protocol", protocol)?,
        negatives,
        sampling: parse::<Sampling>("sampling", sampling)?,
        fixed_candidates: parse::<FixedCandidates>("fixed_candidates", fixed_candidates)?,
        seed,
        users: parse::<UserSelection>("users", users)?,
        tick,
        target: parse::<TargetSplit>("target", target)?,
        memory_users: parse::<MemoryUsers>("memory_users", memory_users)?,
    };
    let (specs, objects) = split_policies(&policies)?;
    let (llm_config, cache_settings) = llm_settings(
        llm,
        llm_roles.unwrap_or_default(),
        llm_cache,
        llm_cache_path,
        &out,
    )?;
    let config = EvalConfig {
        data: data
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("<rows:{}>", data.inner.name))),
        format: data.format.clone(),
        protocol,
        policies: specs,
        llm: llm_label(&llm_config),
        llm_estimate: false,
        ops_log,
        ops_log_format: OpsLogFormat::Zst,
        llm_cache: llm_cache.to_string(),
        llm_cache_path: cache_settings.path.clone(),
        models_dir: models_dir.clone(),
    };
    // The trained baselines (`sasrec`, `lightgcn`) train on `threads`
    // threads too (0: every core), as `evomem eval --threads` does.
    evomem_train::configure(evomem_train::TrainEnv {
        threads,
        observer: None,
    });
    let (embedder, notice) = load_embedder(models_dir.clone(), threads)?;
    let cache = embed_cache_for(&embedder, models_dir, embed_cache)?;
    let embedder: Arc<dyn Embedder> = match &cache {
        Some(c) => c.clone(),
        None => embedder,
    };
    let dataset = data.inner.clone();
    let built: Mutex<Vec<(String, Arc<Shared>)>> = Mutex::new(Vec::new());
    let build = |name: &str, deps: &PolicyDeps| -> Result<Box<dyn Policy>, PolicyError> {
        let obj = objects
            .get(name)
            .ok_or_else(|| PolicyError::Config(format!("no Python policy named `{name}`")))?;
        let shared = Arc::new(Shared::new(
            dataset.clone(),
            deps.embedder.clone(),
            deps.llm.clone(),
            deps.seed,
        ));
        if let Ok(mut b) = built.lock() {
            b.push((name.to_string(), shared.clone()));
        }
        Ok(Python::with_gil(|py| {
            Box::new(PyPolicy::new(
                py,
                name.to_string(),
                obj.clone_ref(py),
                shared,
            )) as Box<dyn Policy>
        }))
    };
    let external = ExternalPolicies {
        names: objects.keys().cloned().collect(),
        build: &build,
    };
    let hub_for = |_: &PolicySpec| -> Result<Arc<LlmHub>, String> {
        LlmHub::from_config(&llm_config, cache_settings.clone())
            .map(Arc::new)
            .map_err(|e| e.to_string())
    };
    let summary = py.allow_threads(|| {
        std::fs::create_dir_all(&out).map_err(|e| evomem_eval::EvalError::io(out.clone(), e))?;
        evomem_eval::run::run_eval_with(
            &config,
            RunInputs {
                dataset: &dataset,
                data_sha256: data.files.clone(),
                embedder: embedder.clone(),
                embedder_notice: notice,
                hub_for: &hub_for,
                embed_cache: cache.as_deref(),
            },
            Some(&external),
            &out,
            &|_| {},
        )
    });
    let summary = summary.map_err(eval_err)?;
    let json = serde_json::json!({
        "policies": summary.policies,
        "policy_wall_s": summary.policy_wall_s,
        "wall_s": summary.wall_s,
        "plan": summary.plan,
        "embed_cache": summary.embed_cache,
        "model": embedder.model_id(),
    });
    let memory = final_memory(py, &built, return_memory)?;
    Ok((json.to_string(), memory))
}

/// The `[llm]` table and cache of a run, as `evomem eval`'s `--llm`,
/// `--llm-role ROLE=SPEC`, `--llm-cache` and `--llm-cache-path` make them:
/// `llm` is every role's backend spec (`offline`, `openai:<model>@<url>`),
/// `roles` overrides it per role name (`mars_extract`, `rank`, ...), the
/// API key is read from `OPENAI_API_KEY`; the cache file defaults to
/// `OUT/llm-cache.sqlite`.
fn llm_settings(
    llm: &str,
    roles: BTreeMap<String, String>,
    cache: &str,
    cache_path: Option<PathBuf>,
    out: &std::path::Path,
) -> PyResult<(LlmConfig, CacheSettings)> {
    let mut config = LlmConfig {
        default: llm.to_string(),
        roles,
        ..LlmConfig::default()
    };
    config
        .validate("evaluate(llm=, llm_roles=)")
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    config.api_key = std::env::var(&config.api_key_env)
        .ok()
        .filter(|k| !k.is_empty())
        .map(Secret);
    let mode: CacheMode = parse("llm_cache", cache)?;
    let path = match (mode, cache_path) {
        (CacheMode::Off, _) => None,
        (_, Some(p)) => Some(p),
        (_, None) => Some(out.join("llm-cache.sqlite")),
    };
    Ok((config, CacheSettings { mode, path }))
}

/// The run's LLM label in `metrics.json`, as `evomem eval` writes it.
fn llm_label(llm: &LlmConfig) -> String {
    if llm.roles.is_empty() {
        llm.default.clone()
    } else {
        format!("{}+{} roles", llm.default, llm.roles.len())
    }
}

/// `policies=` split into the spec list the run takes (built-in specs as
/// written, Python policies by name) and the Python objects by name.
#[allow(clippy::type_complexity)]
fn split_policies(
    policies: &[Bound<'_, PyAny>],
) -> PyResult<(Vec<String>, BTreeMap<String, Py<PyAny>>)> {
    let mut specs = Vec::new();
    let mut objects: BTreeMap<String, Py<PyAny>> = BTreeMap::new();
    for p in policies {
        if let Ok(s) = p.downcast::<PyString>() {
            let list = PolicySpec::parse_list(&s.to_cow()?)
                .map_err(|e| PyValueError::new_err(format!("policies: {e}")))?;
            specs.extend(list.iter().map(|s| s.to_string()));
            continue;
        }
        let name = policy_name(p)?;
        if objects.insert(name.clone(), p.clone().unbind()).is_some() {
            return Err(PyValueError::new_err(format!(
                "policies: two Python policies are named `{name}`; give one a `name` attribute"
            )));
        }
        specs.push(name);
    }
    Ok((specs, objects))
}

/// Each Python policy's memory at the end of the run, by name (an empty
/// dict unless `wanted`).
fn final_memory(
    py: Python<'_>,
    built: &Mutex<Vec<(String, Arc<Shared>)>>,
    wanted: bool,
) -> PyResult<PyObject> {
    let memory = pyo3::types::PyDict::new(py);
    if wanted {
        let built = built
            .lock()
            .map_err(|_| EvalError::new_err("a policy thread panicked"))?;
        for (name, shared) in built.iter() {
            let m = shared
                .memory
                .read()
                .map_err(|_| EvalError::new_err("a policy thread panicked"))?;
            memory.set_item(name, records_json(py, &m)?)?;
        }
    }
    Ok(memory.into_any().unbind())
}

/// The persistent embedding cache of `evomem eval`: `auto` is
/// `embed-cache.sqlite` beside the models folder; none for the hashing
/// fallback.
#[allow(clippy::type_complexity)]
fn embed_cache_for(
    embedder: &Arc<dyn Embedder>,
    models_dir: Option<PathBuf>,
    mode: &str,
) -> PyResult<Option<Arc<CachedEmbedder<Arc<dyn Embedder>>>>> {
    if embedder.model_id().starts_with("hash") {
        return Ok(None);
    }
    let path = match mode {
        "off" => return Ok(None),
        "auto" => models_dir
            .unwrap_or_else(default_models_dir)
            .parent()
            .map_or_else(|| PathBuf::from("."), PathBuf::from)
            .join("embed-cache.sqlite"),
        other => PathBuf::from(other),
    };
    CachedEmbedder::open(embedder.clone(), &path)
        .map(|c| Some(Arc::new(c)))
        .map_err(|e| {
            EvalError::new_err(format!(
                "opening the embedding cache {}: {e}",
                path.display()
            ))
        })
}

/// A Python policy's name: its `name` attribute when it is a string, else
/// its class name; letters, digits, `-` and `_` only.
fn policy_name(p: &Bound<'_, PyAny>) -> PyResult<String> {
    let name = match p
        .getattr("name")
        .ok()
        .filter(|n| n.is_instance_of::<PyString>())
    {
        Some(n) => n.extract::<String>()?,
        None => p.get_type().name()?.to_string(),
    };
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(PyValueError::new_err(format!(
            "policy name {name:?}: use letters, digits, `-` and `_`"
        )));
    }
    Ok(name)
}

/// Every record of `m`, by id, as Python dicts.
fn records_json(py: Python<'_>, m: &MemoryState) -> PyResult<PyObject> {
    let mut recs: Vec<_> = m.iter_all().collect();
    recs.sort_by(|a, b| a.id.cmp(&b.id));
    let v = serde_json::to_value(recs).map_err(|e| EvalError::new_err(e.to_string()))?;
    to_py(py, &v)
}

/// Paired-bootstrap deltas `B - A` over the users both per-user tables
/// (`per_user.jsonl` texts) ranked; the comparison as JSON text.
#[pyfunction]
#[pyo3(signature = (a, b, resamples=1000, level=0.95, seed=42))]
pub fn compare_per_user(
    a: &str,
    b: &str,
    resamples: usize,
    level: f64,
    seed: u64,
) -> PyResult<String> {
    let rows = |t: &str| -> PyResult<Vec<PerUser>> {
        t.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .map_err(|e| PyValueError::new_err(format!("per-user row: {e}")))
            })
            .collect()
    };
    let cfg = BootstrapConfig {
        resamples,
        level,
        seed,
    };
    let c = evomem_eval::compare::compare_per_user(&rows(a)?, &rows(b)?, &cfg).map_err(eval_err)?;
    serde_json::to_string(&c).map_err(|e| EvalError::new_err(e.to_string()))
}

/// Replay the op log of a policy folder into an empty memory and return
/// its records, by id.
#[pyfunction]
pub fn replay_ops(py: Python<'_>, policy_dir: PathBuf) -> PyResult<PyObject> {
    let mut state = MemoryState::new();
    let mut failed = None;
    PolicyDir::at(&policy_dir)
        .for_each_op(
            |_| true,
            |op| {
                if let Err(e) = state.apply(&op.op, op.provenance.logical_time) {
                    failed.get_or_insert(format!("op {}: {e}", op.seq));
                }
                Ok(())
            },
        )
        .map_err(|e| eval_err(e.into()))?;
    if let Some(f) = failed {
        return Err(EvalError::new_err(format!(
            "replaying {}: {f}",
            policy_dir.display()
        )));
    }
    records_json(py, &state)
}
