//! The LLM roles a Python policy calls by name: `ctx.role(name, input)`.
//!
//! Each name in [`ROLES`] is one of the project's [`Role`] implementations
//! (the MARS, AtomRec and TIDE roles of `evomem-policy`, and `rank` of
//! `evomem-llm`). The input is a dict in the JSON shape of the role's
//! `Input` type (its serde form, as the record/replay cache stores it); it
//! is read with `serde_path_to_error`, so a malformed input raises a
//! `ValueError` naming the role and the field (`pending[0].polarity`). The
//! output is the role's `Output` as a dict, in the same serde form.
//!
//! Every call goes through the policy's own [`evomem_kit::RoleCaller`] over
//! its hub, as every family calls roles: the run's LLM accounting, the
//! record/replay cache and the repair → offline fallback (counted) hold. An
//! error the hub returns is one that must fail the run (a permanent error,
//! a replay-only cache miss, a backend failing every call, an offline
//! algorithm that failed): it is raised in Python as a `RuntimeError` and
//! recorded in [`Shared::role_failure`], which the adapter checks after the
//! policy's method returns, so catching the exception does not save the run.

use crate::convert::to_py;
use crate::policy::Shared;
use evomem_core::{ContextEntry, DecisionContext, ItemMemory, Role};
use evomem_llm::{RankCandidate, RankInput};
use evomem_policy::families::tide;
use evomem_policy::{atomrec, mars};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The roles by the name a Python policy uses, with the role's own name
/// (what accounting, the cache and errors show) and what its input holds.
/// The role's own name is accepted too.
pub const ROLES: &[(&str, &str, &str)] = &[
    (
        "extract",
        "mars_extract",
        "MARS ExtractInput: user, categories, pending, chunks, min_support, shift_min, kcat",
    ),
    (
        "synthesize",
        "mars_synthesize",
        "MARS SynthesizeInput: user, categories, chunks, recent, previous, max_words",
    ),
    (
        "plan",
        "mars_plan",
        "MARS PlanInput: user, pending, counts of the belief state, the forget rule, gamma, b",
    ),
    (
        "categories",
        "mars_categories",
        "MARS CategoriesInput: the domain's sampled items and derived categories",
    ),
    (
        "extract_brief",
        "mars_extract_brief",
        "as extract (the budget=paper prompt)",
    ),
    (
        "synthesize_brief",
        "mars_synthesize_brief",
        "as synthesize (the budget=paper prompt)",
    ),
    (
        "link",
        "atomrec_link",
        "AtomRec LinkInput: note, neighbours, typed, max_links",
    ),
    (
        "evolve",
        "atomrec_evolve",
        "AtomRec EvolveInput: new_note, target, relation, similarity, near, typed, max_links, min_similarity",
    ),
    (
        "atomrec_synthesize",
        "atomrec_synthesize",
        "AtomRec SynthInput: the evidence paths to render",
    ),
    ("generate", "tide_generate", "TIDE GenerateInput"),
    ("rubric", "tide_rubric", "TIDE RubricInput"),
    ("evidence", "tide_evidence", "TIDE EvidenceInput"),
    ("align", "tide_align", "TIDE AlignInput"),
    ("write", "tide_write", "TIDE WriteInput"),
    (
        "rank",
        "rank",
        "user, candidates (item tokens), profile, entries (texts), scores: as ctx.rank",
    ),
];

/// The arguments of the `rank` role from Python: item tokens instead of
/// the role's item ids and texts (the adapter looks them up).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RankArgs {
    pub(crate) user: String,
    pub(crate) candidates: Vec<String>,
    #[serde(default)]
    pub(crate) profile: Option<String>,
    #[serde(default)]
    pub(crate) entries: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) scores: Option<Vec<f64>>,
}

/// The output of the `rank` role from Python: one score per candidate.
#[derive(Debug, Serialize)]
struct RankScores {
    scores: Vec<f64>,
}

/// Run the role named `name` on `input` for `user` (default: the input's
/// `user` field) through the policy's role caller; its output as a Python
/// value.
pub fn call(
    py: Python<'_>,
    shared: &Shared,
    name: &str,
    input: Value,
    user: Option<String>,
) -> PyResult<PyObject> {
    let user = user.or_else(|| input.get("user").and_then(Value::as_str).map(String::from));
    let out = match name {
        "extract" | "mars_extract" => run(py, shared, name, &mars::roles::ExtractRole, input, user),
        "synthesize" | "mars_synthesize" => {
            run(py, shared, name, &mars::roles::SynthesizeRole, input, user)
        }
        "plan" | "mars_plan" => run(py, shared, name, &mars::roles::PlanRole, input, user),
        "categories" | "mars_categories" => {
            run(py, shared, name, &mars::roles::CategoriesRole, input, user)
        }
        "extract_brief" | "mars_extract_brief" => run(
            py,
            shared,
            name,
            &mars::roles::BriefExtractRole,
            input,
            user,
        ),
        "synthesize_brief" | "mars_synthesize_brief" => run(
            py,
            shared,
            name,
            &mars::roles::BriefSynthesizeRole,
            input,
            user,
        ),
        "link" | "atomrec_link" => run(py, shared, name, &atomrec::roles::LinkRole, input, user),
        "evolve" | "atomrec_evolve" => {
            run(py, shared, name, &atomrec::roles::EvolveRole, input, user)
        }
        "atomrec_synthesize" => run(
            py,
            shared,
            name,
            &atomrec::roles::SynthesizeRole,
            input,
            user,
        ),
        "generate" | "tide_generate" => {
            run(py, shared, name, &tide::roles::GenerateRole, input, user)
        }
        "rubric" | "tide_rubric" => run(py, shared, name, &tide::roles::RubricRole, input, user),
        "evidence" | "tide_evidence" => {
            run(py, shared, name, &tide::roles::EvidenceRole, input, user)
        }
        "align" | "tide_align" => run(py, shared, name, &tide::roles::AlignRole, input, user),
        "write" | "tide_write" => run(py, shared, name, &tide::roles::WriteRole, input, user),
        "rank" => {
            let args: RankArgs = read_input("rank", input)?;
            let scores = rank(py, shared, args)?;
            serde_json::to_value(RankScores { scores })
                .map_err(|e| PyRuntimeError::new_err(format!("role `rank`: output: {e}")))
        }
        other => {
            let names: Vec<&str> = ROLES.iter().map(|r| r.0).collect();
            return Err(PyValueError::new_err(format!(
                "unknown role `{other}`: expected one of {}",
                names.join(", ")
            )));
        }
    }?;
    to_py(py, &out)
}

/// The `rank` role on item tokens: one score per candidate.
pub(crate) fn rank(py: Python<'_>, shared: &Shared, args: RankArgs) -> PyResult<Vec<f64>> {
    let candidates = args
        .candidates
        .iter()
        .map(|t| {
            let it = shared.find(t).map_err(|e| {
                PyValueError::new_err(format!("role `rank`: input field `candidates`: {e}"))
            })?;
            Ok(RankCandidate {
                item: it.id,
                title: it.title.clone(),
                text: it.full_text(),
                embedding: Vec::new(),
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let input = RankInput {
        user: args.user.clone(),
        instruction: None,
        context: DecisionContext {
            profile: args.profile,
            entries: args
                .entries
                .unwrap_or_default()
                .into_iter()
                .map(|text| ContextEntry {
                    memory: None,
                    item: None,
                    text,
                    weight: 1.0,
                    embedding: None,
                    path: None,
                })
                .collect(),
            scores: args.scores,
            estimate: None,
            item_memory: Vec::<ItemMemory>::new(),
        },
        candidates,
        seed: shared.seed,
    };
    let out = through_hub(py, shared, &shared.rank, &input, Some(args.user))?;
    Ok(out.scores)
}

/// Read `input` as `T`, or a `ValueError` naming the role and the field.
fn read_input<T: DeserializeOwned>(role: &str, input: Value) -> PyResult<T> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            PyValueError::new_err(format!("role `{role}`: malformed input: {inner}"))
        } else {
            PyValueError::new_err(format!(
                "role `{role}`: malformed input field `{path}`: {inner}"
            ))
        }
    })
}

/// Read the input, call `role` through the hub, return its output as JSON.
fn run<R>(
    py: Python<'_>,
    shared: &Shared,
    name: &str,
    role: &R,
    input: Value,
    user: Option<String>,
) -> PyResult<Value>
where
    R: Role,
    R::Input: DeserializeOwned + Send + Sync,
    R::Output: Send,
{
    let shown = if name == role.name() {
        name.to_string()
    } else {
        format!("{name}` (`{}`", role.name())
    };
    let input: R::Input = read_input(&shown, input)?;
    let out = through_hub(py, shared, role, &input, user)?;
    serde_json::to_value(out)
        .map_err(|e| PyRuntimeError::new_err(format!("role `{}`: output: {e}", role.name())))
}

/// One call through the policy's role caller, with the GIL released. An
/// error is recorded in [`Shared::role_failure`] (the first one is kept)
/// before it is raised, so the run fails even if Python catches it.
fn through_hub<R>(
    py: Python<'_>,
    shared: &Shared,
    role: &R,
    input: &R::Input,
    user: Option<String>,
) -> PyResult<R::Output>
where
    R: Role,
    R::Input: Sync,
    R::Output: Send,
{
    let out = py.allow_threads(|| {
        let mut roles = shared
            .roles
            .lock()
            .map_err(|_| "the role caller lock is poisoned".to_string())?;
        roles
            .call(role, input, user.as_deref())
            .map_err(|e| e.to_string())
    });
    out.map_err(|msg| {
        shared.fail(&msg);
        PyRuntimeError::new_err(msg)
    })
}
