//! Policies written in Python, run inside the Rust loop.
//!
//! [`PyPolicy`] implements [`Policy`] by calling the Python object's
//! `observe`, `recall`, `feedback` and `maintain` (any it lacks keeps the
//! trait's default: no ops; a missing `recall` hands the decider no
//! memory). Each call takes the GIL for its duration only; the driver,
//! the engine and the op log writer run without it.
//!
//! What the Python object is shown is what the protocol shows the Rust
//! families: the event, the decision (its candidates, never its target),
//! the outcome of a decision when the protocol delivers one, and a [`Ctx`]
//! with the catalog, the embedder and the memory as of now. It writes
//! memory only through ops (`evomem.ops` builds them as JSON in the shape of
//! [`MemoryOp`]); they go to the engine like any family's, so the op log,
//! replay and `evomem inspect` work.
//!
//! The memory a Python policy reads ([`Ctx::records`]) is kept by this
//! adapter: it applies the policy's own ops with [`MemoryState::apply`] (the
//! one definition of every op's meaning) at the time of the call, exactly as
//! the engine does, so it equals the engine's memory of the run (a test
//! checks it against the replayed op log). Handing out the engine's state
//! itself would need a reference that outlives the call.
//!
//! The LLM roles: [`Ctx::role`] runs any role of [`crate::roles::ROLES`]
//! (MARS extract, synthesize, plan; AtomRec link, evolve; TIDE's; `rank`)
//! and [`Ctx::rank`] the `rank` role, through the policy's own hub with
//! [`evomem_kit::RoleCaller`], as every family calls roles, so the run's
//! accounting, record/replay cache and fallback rules hold. A role error
//! that must fail the run fails it even when the Python code catches the
//! exception: it is kept in [`Shared::role_failure`] and the adapter checks
//! it after every call into Python.
//!
//! The leak canary: every op a Python policy returns must cite as sources
//! only interactions it was shown (by `observe`, or revealed by a
//! feedback's outcome); one that cites any other fails the run with a
//! message starting [`LEAK_MARK`], which `evaluate` raises as `LeakError`.

use crate::convert::{to_json, to_py};
use crate::data::{token_of_item, token_of_user};
use crate::errors::LEAK_MARK;
use evomem_core::{
    ContextEntry, Dataset, DecisionContext, DecisionQuery, Embedder, Feedback, Interaction, ItemId,
    LogicalTime, MaintainTrigger, MemoryId, MemoryOp, MemoryState, Namespace, PlannedOp, Policy,
    PolicyCtx, PolicyError, Recall, UsageTrace, UsedMemory,
};
use evomem_kit::RoleCaller;
use evomem_llm::{LlmHub, RankRole};
use pyo3::exceptions::{PyKeyError, PyRuntimeError};
use pyo3::prelude::*;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

/// What every call of one Python policy shares with its [`Ctx`].
pub struct Shared {
    /// The dataset (its catalog and user tokens; interactions are never
    /// handed out from here).
    pub dataset: Arc<Dataset>,
    /// Item ids by token.
    pub item_ids: HashMap<String, ItemId>,
    /// The run's embedder.
    pub embedder: Arc<dyn Embedder>,
    /// The memory the policy's own ops built.
    pub memory: RwLock<MemoryState>,
    /// The policy's role caller, over its own hub.
    pub roles: Mutex<RoleCaller>,
    /// The rank role (offline: the documented embedding ranker).
    pub rank: RankRole,
    /// The run's seed (the rank role's tie-breaks).
    pub seed: u64,
    /// A role error that must fail the run, kept even if Python catches it.
    pub role_failure: Mutex<Option<String>>,
}

impl Shared {
    /// Shared state over `dataset` with `embedder`, calling roles through
    /// `hub`.
    pub fn new(
        dataset: Arc<Dataset>,
        embedder: Arc<dyn Embedder>,
        hub: Arc<LlmHub>,
        seed: u64,
    ) -> Self {
        let item_ids = dataset
            .catalog
            .items
            .iter()
            .map(|i| (i.token.clone(), i.id))
            .collect();
        Self {
            dataset,
            item_ids,
            rank: RankRole::new(embedder.clone()),
            embedder,
            memory: RwLock::new(MemoryState::new()),
            roles: Mutex::new(RoleCaller::new(hub)),
            seed,
            role_failure: Mutex::new(None),
        }
    }

    /// An item by token, or a `KeyError`.
    pub fn find(&self, token: &str) -> PyResult<&evomem_core::Item> {
        self.item_ids
            .get(token)
            .and_then(|&i| self.dataset.catalog.get(i))
            .ok_or_else(|| PyKeyError::new_err(format!("unknown item `{token}`")))
    }

    /// Record a role error that must fail the run (the first one is kept);
    /// [`PyPolicy`] turns it into the method's error when the method returns.
    pub fn fail(&self, msg: &str) {
        if let Ok(mut f) = self.role_failure.lock() {
            f.get_or_insert_with(|| msg.to_string());
        }
    }
}

/// Which methods the Python object defines.
#[derive(Debug, Clone, Copy)]
struct Has {
    observe: bool,
    recall: bool,
    feedback: bool,
    maintain: bool,
    stats: bool,
}

/// The adapter: a Python object as a [`Policy`].
pub struct PyPolicy {
    name: String,
    obj: Py<PyAny>,
    has: Has,
    shared: Arc<Shared>,
    /// Logical times of the interactions shown so far (the leak canary).
    shown: HashSet<u64>,
}

impl PyPolicy {
    /// Wrap `obj` (a Python object) as the policy `name`.
    pub fn new(py: Python<'_>, name: String, obj: Py<PyAny>, shared: Arc<Shared>) -> Self {
        let b = obj.bind(py);
        let has = |m: &str| b.hasattr(m).unwrap_or(false);
        let has = Has {
            observe: has("observe"),
            recall: has("recall"),
            feedback: has("feedback"),
            maintain: has("maintain"),
            stats: has("stats"),
        };
        Self {
            name,
            obj,
            has,
            shared,
            shown: HashSet::new(),
        }
    }

    /// A Python exception as a policy error naming the policy and method,
    /// with the Python traceback.
    fn py_err(&self, py: Python<'_>, method: &str, e: &PyErr) -> PolicyError {
        let tb = e
            .traceback(py)
            .and_then(|t| t.format().ok())
            .unwrap_or_default();
        PolicyError::Other(format!(
            "Python policy `{}`.{method} raised {e}\n{tb}",
            self.name
        ))
    }

    /// Call `method(ctx, arg)` on the Python object; its return value as
    /// JSON, or as the object itself for `recall`.
    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        now: LogicalTime,
        arg: PyObject,
    ) -> Result<Bound<'py, PyAny>, PolicyError> {
        let ctx = Ctx {
            now: now.0,
            shared: self.shared.clone(),
        };
        let ctx = Py::new(py, ctx).map_err(|e| self.py_err(py, method, &e))?;
        let ret = self.obj.bind(py).call_method1(method, (ctx, arg));
        let failed = self
            .shared
            .role_failure
            .lock()
            .map_err(|_| PolicyError::Other("the role failure lock is poisoned".into()))?
            .take();
        if let Some(f) = failed {
            return Err(PolicyError::Other(format!(
                "Python policy `{}`.{method}: {f}",
                self.name
            )));
        }
        ret.map_err(|e| self.py_err(py, method, &e))
    }

    /// The ops a method returned (None or an iterable of op dicts), checked
    /// by the leak canary and applied to the policy's view of memory.
    fn ops(
        &mut self,
        method: &str,
        now: LogicalTime,
        ret: &Bound<'_, PyAny>,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let py = ret.py();
        if ret.is_none() {
            return Ok(Vec::new());
        }
        let bad = |what: String| {
            PolicyError::Other(format!(
                "Python policy `{}`.{method} returned {what}",
                self.name
            ))
        };
        let items = ret
            .try_iter()
            .map_err(|_| bad("something that is not a list of ops".into()))?;
        let mut ops = Vec::new();
        for (k, item) in items.enumerate() {
            let item = item.map_err(|e| self.py_err(py, method, &e))?;
            let v = to_json(&item).map_err(|e| bad(format!("an op that is not JSON: {e}")))?;
            ops.push(planned(&v).map_err(|e| bad(format!("a malformed op (#{k}): {e}")))?);
        }
        for op in &ops {
            if let Some(t) = op.sources.iter().find(|t| !self.shown.contains(&t.0)) {
                return Err(PolicyError::Other(format!(
                    "{LEAK_MARK} Python policy `{}`.{method} wrote `{}` citing the interaction at logical time {}, which the protocol had not shown it (now {})",
                    self.name, op.label, t.0, now.0
                )));
            }
        }
        let mut memory = self
            .shared
            .memory
            .write()
            .map_err(|_| bad("ops while its memory lock was poisoned".into()))?;
        for op in &ops {
            memory.apply(&op.op, now)?;
        }
        Ok(ops)
    }

    /// Run `method` if defined, returning its ops.
    fn run_ops(
        &mut self,
        method: &str,
        now: LogicalTime,
        arg: impl FnOnce(Python<'_>) -> PyResult<PyObject>,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        Python::with_gil(|py| {
            let arg = arg(py).map_err(|e| self.py_err(py, method, &e))?;
            let ret = self.call(py, method, now, arg)?;
            self.ops(method, now, &ret)
        })
    }
}

/// One op dict of `evomem.ops`: `{"op": {MemoryOp}, "label", "reason",
/// "sources"}`.
fn planned(v: &Value) -> Result<PlannedOp, String> {
    let Value::Object(m) = v else {
        return Err(format!("expected a dict, found {v}"));
    };
    let op: MemoryOp = serde_json::from_value(m.get("op").cloned().unwrap_or(Value::Null))
        .map_err(|e| format!("`op`: {e}"))?;
    let text = |k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let sources = match m.get("sources") {
        None | Some(Value::Null) => Vec::new(),
        Some(s) => serde_json::from_value::<Vec<u64>>(s.clone())
            .map_err(|e| format!("`sources`: {e}"))?
            .into_iter()
            .map(LogicalTime)
            .collect(),
    };
    let label = match text("label") {
        l if l.is_empty() => "python".to_string(),
        l => l,
    };
    Ok(PlannedOp::new(op, label, text("reason")).with_sources(sources))
}

impl Policy for PyPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        e: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.shown.insert(e.time.0);
        if !self.has.observe {
            return Ok(Vec::new());
        }
        let d = self.shared.dataset.clone();
        let ev = Event {
            user: token_of_user(&d, e.user),
            item: token_of_item(&d, e.item),
            time: e.time.0,
            timestamp: e.timestamp,
            rating: e.rating,
        };
        self.run_ops("observe", ctx.now, |py| Ok(Py::new(py, ev)?.into_any()))
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        let trace = UsageTrace::for_query(q);
        if !self.has.recall {
            return Ok(Recall {
                context: DecisionContext::default(),
                trace,
            });
        }
        let d = self.shared.dataset.clone();
        let query = Query {
            decision_id: q.decision_id,
            user: token_of_user(&d, q.user),
            at: q.at.0,
            candidates: q
                .candidates()
                .iter()
                .map(|&i| token_of_item(&d, i))
                .collect(),
            instruction: q.instruction.clone(),
        };
        Python::with_gil(|py| {
            let arg = Py::new(py, query).map_err(|e| self.py_err(py, "recall", &e))?;
            let ret = self.call(py, "recall", ctx.now, arg.into_any())?;
            let v = to_json(&ret).map_err(|e| self.py_err(py, "recall", &e))?;
            recall_from(&self.name, &self.shared, v, trace)
        })
    }

    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        f: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.shown.insert(f.observed_at.0);
        if !self.has.feedback {
            return Ok(Vec::new());
        }
        let d = self.shared.dataset.clone();
        let ev = FeedbackEvent {
            decision_id: f.decision_id,
            user: f.user.map(|u| token_of_user(&d, u)),
            decided_at: f.decided_at.0,
            observed_at: f.observed_at.0,
            reward: f.outcome.reward,
            success: f.outcome.success,
            item: f.outcome.item.map(|i| token_of_item(&d, i)),
            value: f.outcome.value,
        };
        self.run_ops("feedback", ctx.now, |py| Ok(Py::new(py, ev)?.into_any()))
    }

    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if !self.has.maintain {
            return Ok(Vec::new());
        }
        let name = match trigger {
            MaintainTrigger::Tick => "tick",
            MaintainTrigger::BeforeDecisions => "before_decisions",
            MaintainTrigger::EndOfStream => "end_of_stream",
        };
        self.run_ops("maintain", ctx.now, |py| {
            Ok(pyo3::types::PyString::new(py, name).into_any().unbind())
        })
    }

    fn stats(&self) -> Value {
        if !self.has.stats {
            return Value::Null;
        }
        Python::with_gil(|py| {
            self.obj
                .bind(py)
                .call_method0("stats")
                .and_then(|r| to_json(&r))
                .unwrap_or(Value::Null)
        })
    }
}

/// What a Python `recall` returned, as a [`Recall`]: `None` (no memory), a
/// sequence of scores aligned with the candidates, or a dict with any of
/// `scores`, `profile`, `entries` (dicts with `text`, `memory`, `item`,
/// `weight`) and `used` (memory ids, or `(id, weight)` pairs).
fn recall_from(
    name: &str,
    shared: &Shared,
    v: Value,
    mut trace: UsageTrace,
) -> Result<Recall, PolicyError> {
    let bad = |what: &str| {
        PolicyError::Other(format!(
            "Python policy `{name}`.recall returned {what}: expected None, a list of scores or a dict with scores/profile/entries/used"
        ))
    };
    let mut context = DecisionContext::default();
    let scores = |v: &Value| -> Result<Vec<f64>, PolicyError> {
        serde_json::from_value::<Vec<f64>>(v.clone())
            .map_err(|_| bad("scores that are not numbers"))
    };
    match v {
        Value::Null => {}
        Value::Array(_) => context.scores = Some(scores(&v)?),
        Value::Object(m) => {
            if let Some(s) = m.get("scores").filter(|s| !s.is_null()) {
                context.scores = Some(scores(s)?);
            }
            context.profile = m.get("profile").and_then(Value::as_str).map(String::from);
            for e in m
                .get("entries")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let item =
                    match e.get("item").and_then(Value::as_str) {
                        None => None,
                        Some(t) => Some(*shared.item_ids.get(t).ok_or_else(|| {
                            bad(&format!("an entry about the unknown item `{t}`"))
                        })?),
                    };
                context.entries.push(ContextEntry {
                    memory: e.get("memory").and_then(Value::as_str).map(MemoryId::new),
                    item,
                    text: e
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                    weight: e.get("weight").and_then(Value::as_f64).unwrap_or(1.0) as f32,
                    embedding: None,
                    path: None,
                });
            }
            for u in m
                .get("used")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (id, weight) = match u {
                    Value::String(s) => (s.clone(), 1.0),
                    Value::Array(p) => (
                        p.first()
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        p.get(1).and_then(Value::as_f64).unwrap_or(1.0),
                    ),
                    _ => return Err(bad("a `used` entry that is neither an id nor (id, weight)")),
                };
                trace.used.push(UsedMemory {
                    id: MemoryId::new(id),
                    weight: weight as f32,
                });
            }
        }
        _ => return Err(bad("a value of another type")),
    }
    Ok(Recall { context, trace })
}

/// What a Python policy may read during a call: the time, the catalog, the
/// embedder and its memory as of now.
#[pyclass(module = "evomem", frozen)]
pub struct Ctx {
    now: u64,
    shared: Arc<Shared>,
}

#[pymethods]
impl Ctx {
    /// The logical time of the call (an observed event's time, a decision's time).
    #[getter]
    fn now(&self) -> u64 {
        self.now
    }

    /// The embedder's model id (`all-MiniLM-L6-v2`, or `hash-v1-…` when the
    /// model is absent).
    #[getter]
    fn model_id(&self) -> String {
        self.shared.embedder.model_id().to_string()
    }

    /// Embed `texts` with the run's embedder (L2-normalised vectors).
    fn embed(&self, py: Python<'_>, texts: Vec<String>) -> PyResult<Vec<Vec<f32>>> {
        let e = self.shared.embedder.clone();
        py.allow_threads(move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            e.embed(&refs)
        })
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// An item's metadata: `token`, `title`, `categories`, `text`, `attributes`.
    fn item(&self, py: Python<'_>, token: &str) -> PyResult<PyObject> {
        let item = self.find(token)?;
        let v = serde_json::to_value(item).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        to_py(py, &v)
    }

    /// An item's full text (title, categories and text fields), as the Rust
    /// families embed it.
    fn item_text(&self, token: &str) -> PyResult<String> {
        Ok(self.find(token)?.full_text())
    }

    /// The records of `namespace` (e.g. `user:42`), as dicts in the op
    /// log's JSON shape.
    fn records(&self, py: Python<'_>, namespace: &str) -> PyResult<Vec<PyObject>> {
        let m = self.memory()?;
        let ns = [Namespace::new(namespace)];
        m.scan(&ns)
            .map(|r| {
                let v =
                    serde_json::to_value(r).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                to_py(py, &v)
            })
            .collect()
    }

    /// One record by id, or None.
    fn record(&self, py: Python<'_>, id: &str) -> PyResult<PyObject> {
        let m = self.memory()?;
        match m.get(&MemoryId::new(id)) {
            None => Ok(py.None()),
            Some(r) => {
                let v =
                    serde_json::to_value(r).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                to_py(py, &v)
            }
        }
    }

    /// The number of records in memory.
    fn memory_len(&self) -> PyResult<usize> {
        Ok(self.memory()?.len())
    }

    /// Run the `rank` role on `candidates` (item tokens) for `user`, through
    /// the policy's hub (offline: the documented embedding ranker; a model
    /// when the run has one), with an optional `profile`, context `entries`
    /// (texts) and prior `scores`. Returns one score per candidate. The same
    /// as `role("rank", {...})["scores"]`.
    #[pyo3(signature = (user, candidates, profile=None, entries=None, scores=None))]
    fn rank(
        &self,
        py: Python<'_>,
        user: String,
        candidates: Vec<String>,
        profile: Option<String>,
        entries: Option<Vec<String>>,
        scores: Option<Vec<f64>>,
    ) -> PyResult<Vec<f64>> {
        let args = crate::roles::RankArgs {
            user,
            candidates,
            profile,
            entries,
            scores,
        };
        crate::roles::rank(py, &self.shared, args)
    }

    /// Run the LLM role `name` (`extract`, `synthesize`, `plan`, `link`,
    /// `evolve`, `rank`, ...; see `evomem.ROLES` and docs/python.md) on
    /// `input`, a dict in the JSON shape of the role's input type, through
    /// the policy's hub: the run's accounting, record/replay cache and
    /// fallback rules hold. Returns the role's output as a dict. An unknown
    /// name or a malformed input raises `ValueError` naming the role and
    /// the field; a role error that must fail the run raises `RuntimeError`
    /// and fails the run even if the exception is caught. `user` (default:
    /// the input's `user` field) is the user the call is accounted to.
    #[pyo3(signature = (name, input, user=None))]
    fn role(
        &self,
        py: Python<'_>,
        name: &str,
        input: &Bound<'_, PyAny>,
        user: Option<String>,
    ) -> PyResult<PyObject> {
        let input = to_json(input).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "role `{name}`: the input is not JSON: {e}"
            ))
        })?;
        crate::roles::call(py, &self.shared, name, input, user)
    }
}

impl Ctx {
    fn find(&self, token: &str) -> PyResult<&evomem_core::Item> {
        self.shared.find(token)
    }

    fn memory(&self) -> PyResult<std::sync::RwLockReadGuard<'_, MemoryState>> {
        self.shared
            .memory
            .read()
            .map_err(|_| PyRuntimeError::new_err("the policy's memory lock is poisoned"))
    }
}

/// An observed interaction, as a Python policy's `observe` sees it.
#[pyclass(module = "evomem", frozen, get_all)]
pub struct Event {
    /// User token.
    pub user: String,
    /// Item token.
    pub item: String,
    /// Logical time (its position in replay order): cite it in an op's `sources`.
    pub time: u64,
    /// The source's timestamp.
    pub timestamp: i64,
    /// The rating, if the data has one.
    pub rating: Option<f32>,
}

#[pymethods]
impl Event {
    fn __repr__(&self) -> String {
        format!(
            "Event(user={:?}, item={:?}, time={}, timestamp={}, rating={:?})",
            self.user, self.item, self.time, self.timestamp, self.rating
        )
    }
}

/// A ranking decision, as a Python policy's `recall` sees it (never its target).
#[pyclass(module = "evomem", frozen, get_all)]
pub struct Query {
    /// Unique per run.
    pub decision_id: u64,
    /// User token.
    pub user: String,
    /// Decision time: memory holds what was observed before it.
    pub at: u64,
    /// Candidate item tokens (target and negatives, shuffled).
    pub candidates: Vec<String>,
    /// The source's instruction, if any.
    pub instruction: Option<String>,
}

#[pymethods]
impl Query {
    fn __repr__(&self) -> String {
        format!(
            "Query(decision_id={}, user={:?}, at={}, candidates={:?})",
            self.decision_id, self.user, self.at, self.candidates
        )
    }
}

/// The outcome of an earlier decision (evolving protocol).
#[pyclass(module = "evomem", frozen, get_all)]
pub struct FeedbackEvent {
    /// The decision.
    pub decision_id: u64,
    /// User token.
    pub user: Option<String>,
    /// When the decision was made.
    pub decided_at: u64,
    /// When the outcome became visible: the logical time of the revealed
    /// interaction (cite it in `sources`).
    pub observed_at: u64,
    /// Reward (the reciprocal rank of the target).
    pub reward: f64,
    /// Hit at 1.
    pub success: Option<bool>,
    /// The item consumed.
    pub item: Option<String>,
    /// An observed value, where the arena has one.
    pub value: Option<f64>,
}
