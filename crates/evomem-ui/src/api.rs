//! The JSON API the pages read in run mode (`evomem ui`), under `/api`.
//!
//! Every answer is a page or a slice: a user's ops come `offset`/`limit` at
//! a time, a user's memory is replayed from that user's ops only, a
//! decision is one line of `decisions.jsonl` found by its byte offset. The
//! handlers do their reading on tokio's blocking pool.
//!
//! Unknown runs, policies, users, decisions, ops and records answer 404 with
//! `{"error": "unknown WHAT ID"}`; bad query parameters answer 400.

use crate::error::UiError;
use crate::index::{kind_name, natural};
use crate::runs::{apply, replay, Policy, Run, Runs};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use evomem_core::{LoggedOp, MemoryOp, MemoryRecord, MemoryState};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Largest page of anything.
pub const MAX_LIMIT: usize = 1000;

type Shared = Arc<Runs>;
type Answer = Result<Json<Value>, UiError>;

/// The `/api` routes over `runs`.
pub fn router(runs: Arc<Runs>) -> Router {
    let p = "/api/runs/{run}/policies/{policy}";
    Router::new()
        .route("/api/mode", get(mode))
        .route("/api/runs/{run}", get(run_info))
        .route("/api/runs/{run}/plot/{name}", get(plot))
        .route(&format!("{p}/growth.svg"), get(growth))
        .route(&format!("{p}/per_user"), get(per_user))
        .route(&format!("{p}/users"), get(users))
        .route(&format!("{p}/users/{{user}}/ops"), get(user_ops))
        .route(&format!("{p}/users/{{user}}/state"), get(user_state))
        .route(&format!("{p}/ops/{{seq}}"), get(op_by_seq))
        .route(&format!("{p}/records/{{id}}"), get(record))
        .route(&format!("{p}/decisions"), get(decisions))
        .route(&format!("{p}/decisions/{{id}}"), get(decision))
        .route("/api/compare", get(compare))
        .route("/api/{*rest}", get(unknown_route))
        .with_state(runs)
}

async fn unknown_route(Path(rest): Path<String>) -> UiError {
    UiError::NotFound {
        what: "route",
        id: format!("/api/{rest}"),
    }
}

/// Run `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, UiError> + Send + 'static,
) -> Result<T, UiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| UiError::Io(format!("worker: {e}")))?
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, UiError> {
    q.map(|Query(v)| v)
        .map_err(|e| UiError::BadRequest(e.body_text()))
}

/// `offset`/`limit` of a page, and its filters: the query of every paged
/// route, in run mode and in the service's `/ui/api`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// First item (0-based).
    pub offset: Option<usize>,
    /// Items at most.
    pub limit: Option<usize>,
    /// A substring the listed names must contain.
    pub q: Option<String>,
    /// Decisions of this user only.
    pub user: Option<String>,
}

impl Page {
    /// The limit asked for, else `default`; an error message when it is
    /// not in `1..=max`.
    pub fn limit_in(&self, default: usize, max: usize) -> Result<usize, String> {
        let l = self.limit.unwrap_or(default);
        if (1..=max).contains(&l) {
            Ok(l)
        } else {
            Err(format!("limit {l} is not in 1..={max}"))
        }
    }

    fn limit(&self, default: usize) -> Result<usize, UiError> {
        self.limit_in(default, MAX_LIMIT)
            .map_err(UiError::BadRequest)
    }

    /// The users (id, op count) whose id contains `q`, in the order given,
    /// as one page of `limit`: `total`, `offset` and `users`, the fields
    /// the pages read in either mode (callers add their own).
    pub fn users_page<U: AsRef<str>>(
        &self,
        users: impl IntoIterator<Item = (U, usize)>,
        limit: usize,
    ) -> serde_json::Map<String, Value> {
        let filter = self.q.as_deref().unwrap_or_default();
        let all: Vec<(U, usize)> = users
            .into_iter()
            .filter(|(u, _)| u.as_ref().contains(filter))
            .collect();
        let offset = self.offset.unwrap_or(0);
        let page: Vec<Value> = all
            .iter()
            .skip(offset)
            .take(limit)
            .map(|(u, n)| json!({"user": u.as_ref(), "ops": n}))
            .collect();
        let mut out = serde_json::Map::new();
        out.insert("total".into(), json!(all.len()));
        out.insert("offset".into(), json!(offset));
        out.insert("users".into(), Value::Array(page));
        out
    }
}

async fn mode(State(runs): State<Shared>) -> Json<Value> {
    let list: Vec<Value> = runs
        .all()
        .iter()
        .enumerate()
        .map(|(k, r)| json!({"id": k, "name": r.name(), "path": r.path().display().to_string()}))
        .collect();
    Json(json!({"mode": "run", "runs": list}))
}

fn read_value(path: &std::path::Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn caps_json(p: &Policy) -> Value {
    match p.caps() {
        Some(c) => json!({
            "known": true,
            "lifecycle_timeline": c.lifecycle_timeline,
            "evidence_paths": c.evidence_paths,
            "reports_growth": c.reports_growth,
            "collaborative": c.collaborative,
            "writes_memory": c.writes_memory,
        }),
        None => json!({"known": false, "lifecycle_timeline": [], "evidence_paths": false,
            "reports_growth": false, "collaborative": false, "writes_memory": false}),
    }
}

async fn run_info(State(runs): State<Shared>, Path(run): Path<String>) -> Answer {
    blocking(move || {
        let r = runs.run(&run)?;
        let mut policies = Vec::new();
        for p in &r.policies {
            let mut metrics = read_value(&p.dir.file("metrics.json")).unwrap_or(Value::Null);
            // Per-user LLM accounting is large; the table needs the totals.
            if let Some(llm) = metrics.get_mut("llm").and_then(Value::as_object_mut) {
                llm.remove("per_user");
            }
            let pick = |k: &str| metrics.get(k).cloned().unwrap_or(Value::Null);
            policies.push(json!({
                "slug": p.slug,
                "spec": p.spec,
                "family": p.family,
                "caps": caps_json(p),
                "has_ops": p.dir.has_ops(),
                "has_decisions": p.dir.has_decisions(),
                "has_per_user": p.dir.file("per_user.jsonl").exists(),
                "has_growth": p.dir.file("growth.svg").exists(),
                "metrics": pick("metrics"),
                "n_users": pick("n_users"),
                "ops": pick("ops"),
                "llm": pick("llm"),
                "indexed": p.index_ready(),
            }));
        }
        let plots: Vec<&str> = PLOTS
            .iter()
            .copied()
            .filter(|n| r.dir.file(n).exists())
            .collect();
        Ok(Json(json!({
            "id": run,
            "name": r.name(),
            "path": r.path().display().to_string(),
            "summary": read_value(&r.dir.file("summary.json")),
            "timing": read_value(&r.dir.file("timing.json")),
            "plots": plots,
            "policies": policies,
            "item_titles": r.titles.titles.len(),
            "item_titles_error": r.titles_error,
        })))
    })
    .await
}

const PLOTS: [&str; 2] = ["plot_metrics.svg", "plot_ranks.svg"];

fn svg(path: std::path::PathBuf, what: &'static str, id: String) -> Result<Response, UiError> {
    let body = std::fs::read(&path).map_err(|_| UiError::NotFound { what, id })?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], body).into_response())
}

async fn plot(
    State(runs): State<Shared>,
    Path((run, name)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let r = runs.run(&run)?;
    if !PLOTS.contains(&name.as_str()) {
        return Err(UiError::NotFound {
            what: "plot",
            id: name,
        });
    }
    svg(r.dir.file(&name), "plot", name)
}

async fn growth(
    State(runs): State<Shared>,
    Path((run, policy)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let p = runs.run(&run)?.policy(&policy)?;
    svg(
        p.dir.file("growth.svg"),
        "plot",
        format!("{policy}/growth.svg"),
    )
}

fn policy_of<'a>(
    runs: &'a Runs,
    run: &str,
    policy: &str,
) -> Result<(&'a Run, &'a Policy), UiError> {
    let r = runs.run(run)?;
    Ok((r, r.policy(policy)?))
}

async fn per_user(
    State(runs): State<Shared>,
    Path((run, policy)): Path<(String, String)>,
) -> Answer {
    blocking(move || {
        let (_, p) = policy_of(&runs, &run, &policy)?;
        if !p.dir.file("per_user.jsonl").exists() {
            return Err(UiError::Missing(format!(
                "policy `{policy}` has no per_user.jsonl"
            )));
        }
        let rows = p.dir.read_per_user()?;
        Ok(Json(json!({"policy": p.slug, "rows": rows})))
    })
    .await
}

async fn users(
    State(runs): State<Shared>,
    Path((run, policy)): Path<(String, String)>,
    q: Result<Query<Page>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    let limit = q.limit(100)?;
    blocking(move || {
        let (_, p) = policy_of(&runs, &run, &policy)?;
        let ix = p.index()?;
        let users = ix
            .namespaces()
            .into_iter()
            .filter_map(|(ns, n)| ns.strip_prefix("user:").map(|u| (u, n)));
        let mut out = q.users_page(users, limit);
        out.insert("kinds".into(), json!(ix.kinds));
        out.insert("op_kinds".into(), json!(ix.op_kinds));
        out.insert("log_ops".into(), json!(ix.len()));
        out.insert("index_s".into(), json!(ix.build_s));
        Ok(Json(Value::Object(out)))
    })
    .await
}

fn namespace(user: &str) -> String {
    format!("user:{user}")
}

/// A record as the pages show it: the embedding reduced to its model and
/// dimension.
pub fn record_json(r: &MemoryRecord) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        if let Some(e) = &r.embedding {
            m.insert(
                "embedding".into(),
                json!({"model": e.model, "dim": e.vector.len()}),
            );
        }
        m.insert("kind".into(), json!(kind_name(&r.kind)));
    }
    v
}

/// An op as the op-log pages list it: its position `pos` in its user's
/// slice, seq, kind, label, reason, sources (the interactions and feedback
/// that caused it), logical time, target and a kind-specific detail.
pub fn op_summary(pos: usize, lo: &LoggedOp) -> Value {
    let other = match &lo.op {
        MemoryOp::Link { to, relation, .. } => json!({"to": to, "relation": relation}),
        MemoryOp::Unlink { to, .. } => json!({"to": to}),
        MemoryOp::Merge { sources, .. } => json!({"sources": sources}),
        MemoryOp::AdjustStrength {
            delta,
            evidence_delta,
            ..
        } => json!({"delta": delta, "evidence_delta": evidence_delta}),
        MemoryOp::Create { record } => json!({"kind": kind_name(&record.kind)}),
        _ => Value::Null,
    };
    json!({
        "pos": pos,
        "seq": lo.seq,
        "kind": lo.op.name(),
        "label": lo.provenance.label,
        "reason": lo.provenance.reason,
        "sources": lo.provenance.sources,
        "at": lo.provenance.logical_time,
        "target": lo.op.target(),
        "detail": other,
    })
}

/// The text `op` gives its target record, when it sets one: a create's or
/// replace's record text, an update's or merge's new text.
fn text_set_by(op: &MemoryOp) -> Option<&str> {
    match op {
        MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => Some(&record.text),
        MemoryOp::UpdateFields { text, .. } | MemoryOp::Merge { text, .. } => text.as_deref(),
        _ => None,
    }
}

/// A page of one user's ops, `ops[offset..offset + limit]`, as the op list
/// shows them: each [`op_summary`] with `target_text`, the text of the op's
/// target record as of that op (followed through the user's earlier ops),
/// or null when no op of the slice gave it one (a link to a record outside
/// the slice). The pages show the text and keep the id on hover. Both
/// modes answer `.../users/{user}/ops` with it.
pub fn op_page(ops: &[LoggedOp], offset: usize, limit: usize) -> Vec<Value> {
    let mut texts: HashMap<&str, &str> = HashMap::new();
    let mut rows = Vec::new();
    for (k, lo) in ops.iter().enumerate().take(offset.saturating_add(limit)) {
        let target = lo.op.target().as_str();
        if let Some(t) = text_set_by(&lo.op) {
            texts.insert(target, t);
        }
        if k >= offset {
            let mut v = op_summary(k, lo);
            if let Some(m) = v.as_object_mut() {
                m.insert("target_text".into(), json!(texts.get(target)));
            }
            rows.push(v);
        }
    }
    rows
}

/// An op with the records it touched before and after it.
pub fn op_detail(pos: usize, lo: &LoggedOp, before: &MemoryState, after: &MemoryState) -> Value {
    let mut ids = vec![lo.op.target().clone()];
    match &lo.op {
        MemoryOp::Merge { sources, .. } => ids.extend(sources.iter().cloned()),
        MemoryOp::Link { to, .. } | MemoryOp::Unlink { to, .. } => ids.push(to.clone()),
        _ => {}
    }
    let touched: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "before": before.get(id).map(record_json),
                "after": after.get(id).map(record_json),
            })
        })
        .collect();
    let mut op = serde_json::to_value(&lo.op).unwrap_or(Value::Null);
    if let Some(rec) = op.get_mut("record").and_then(Value::as_object_mut) {
        rec.remove("embedding");
    }
    if let Some(m) = op.as_object_mut() {
        m.remove("embedding");
    }
    let mut v = op_summary(pos, lo);
    if let Some(m) = v.as_object_mut() {
        m.insert("op".into(), op);
        m.insert("policy".into(), json!(lo.provenance.policy));
        m.insert("touched".into(), json!(touched));
    }
    v
}

async fn user_ops(
    State(runs): State<Shared>,
    Path((run, policy, user)): Path<(String, String, String)>,
    q: Result<Query<Page>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    let limit = q.limit(100)?;
    blocking(move || {
        let (_, p) = policy_of(&runs, &run, &policy)?;
        // The whole slice (cached, as the state view reads it), so that
        // each row can name its target's text.
        let ops = p.namespace_ops(&namespace(&user))?;
        let offset = q.offset.unwrap_or(0);
        let rows = op_page(&ops, offset, limit);
        Ok(Json(json!({
            "user": user,
            "total": ops.len(),
            "offset": offset,
            "ops": rows,
        })))
    })
    .await
}

/// Query of a user's state.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct At {
    /// Ops applied (0 = before the first); default all.
    at: Option<usize>,
}

async fn user_state(
    State(runs): State<Shared>,
    Path((run, policy, user)): Path<(String, String, String)>,
    q: Result<Query<At>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    blocking(move || {
        let (_, p) = policy_of(&runs, &run, &policy)?;
        let ops = p.namespace_ops(&namespace(&user))?;
        user_state_json(&user, &ops, q.at).map(Json)
    })
    .await
}

/// A user's memory after the first `at` of their ops `ops` (all of them
/// without `at`), replayed: the records then, by kind, and the op at the
/// position with the records it touched before and after. The answer of
/// `.../users/{user}/state`, which `evomem serve`'s `/ui/api` answers too.
pub fn user_state_json(user: &str, ops: &[LoggedOp], at: Option<usize>) -> Result<Value, UiError> {
    let total = ops.len();
    let at = at.unwrap_or(total);
    if at > total {
        return Err(UiError::BadRequest(format!(
            "at {at} is past the user's last op ({total})"
        )));
    }
    let mut state = replay(ops, at.saturating_sub(1))?;
    let mut op = Value::Null;
    let mut time = Value::Null;
    if let Some(lo) = at.checked_sub(1).and_then(|k| ops.get(k)) {
        let before = state.clone();
        apply(&mut state, lo)?;
        op = op_detail(at - 1, lo, &before, &state);
        time = json!(lo.provenance.logical_time);
    }
    let ns = [evomem_core::Namespace::user(user)];
    let mut records: Vec<&MemoryRecord> = state.scan(&ns).collect();
    records.sort_by(|a, b| {
        kind_name(&a.kind)
            .cmp(&kind_name(&b.kind))
            .then(a.created_at.cmp(&b.created_at))
            .then(natural(a.id.as_str(), b.id.as_str()))
    });
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for r in &records {
        *kinds.entry(kind_name(&r.kind)).or_insert(0) += 1;
    }
    let records: Vec<Value> = records.into_iter().map(record_json).collect();
    Ok(json!({
        "user": user,
        "at": at,
        "total": total,
        "time": time,
        "kinds": kinds,
        "records": records,
        "op": op,
    }))
}

fn parse_seq(seq: &str) -> Result<u64, UiError> {
    seq.parse().map_err(|_| UiError::NotFound {
        what: "op",
        id: seq.to_string(),
    })
}

/// Query of an op by seq.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpQuery {
    /// The `anon:` label the op is asked for under (an evidence node of
    /// another user's note): the answer then names no atom id and no owner.
    anon: Option<String>,
}

/// Another user's atom ids hidden in a text, as `evomem explain` hides them.
fn scrub(text: &str) -> String {
    text.split(' ')
        .map(|w| if w.starts_with("atom:u") { "<anon>" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn op_by_seq(
    State(runs): State<Shared>,
    Path((run, policy, seq)): Path<(String, String, String)>,
    q: Result<Query<OpQuery>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    blocking(move || {
        let (_, p) = policy_of(&runs, &run, &policy)?;
        let ix = p.index()?;
        let not_found = || UiError::NotFound {
            what: "op",
            id: seq.clone(),
        };
        let line = ix.line_of_seq(parse_seq(&seq)?).ok_or_else(not_found)?;
        let lo = ix.op(line)?;
        if let Some(label) = &q.anon {
            // Only an op on the note behind this label, and anonymised.
            if evomem_core::anon_label(lo.op.target()) != *label {
                return Err(not_found());
            }
            let mut v = op_summary(0, &lo);
            if let Some(m) = v.as_object_mut() {
                m.insert("target".into(), json!(label));
                m.insert("reason".into(), json!(scrub(&lo.provenance.reason)));
                let detail = m.get("detail").map(|d| scrub(&d.to_string()));
                m.insert("detail".into(), json!(detail));
                m.insert("anonymous".into(), json!(true));
                m.insert("namespace".into(), Value::Null);
                m.insert("user".into(), Value::Null);
                m.insert("pos".into(), Value::Null);
            }
            return Ok(Json(v));
        }
        let ns = ix.namespace_of_line(line).map(str::to_string);
        let user = ns
            .as_deref()
            .and_then(|n| n.strip_prefix("user:"))
            .map(str::to_string);
        // The op's position in its user's slice, for the timeline.
        let pos = ns
            .as_deref()
            .and_then(|n| ix.lines_of(n))
            .and_then(|ls| ls.binary_search(&line).ok());
        let mut v = op_summary(pos.unwrap_or(0), &lo);
        if let Some(m) = v.as_object_mut() {
            m.insert("namespace".into(), json!(ns));
            m.insert("user".into(), json!(user));
            m.insert("pos".into(), json!(pos));
        }
        Ok(Json(v))
    })
    .await
}

/// Where a record's ops are. An `anon:` label (another user's note in a
/// collaborative family's evidence) is answered with its ops' seqs only:
/// the inspector, like `evomem explain`, never names its owner.
fn record_info(p: &Policy, id: &str) -> Result<Option<Value>, UiError> {
    let ix = p.index()?;
    let Some((real, r, ns)) = ix.record(id) else {
        return Ok(None);
    };
    // The text the record was written with (its first op's), for the
    // evidence graph's node label.
    let text = ix
        .op(r.first)
        .ok()
        .and_then(|lo| text_set_by(&lo.op).map(str::to_string));
    if id.starts_with("anon:") && real != id {
        return Ok(Some(json!({
            "id": id,
            "anonymous": true,
            "first_seq": ix.seq_of(r.first),
            "last_seq": ix.seq_of(r.last),
            "text": text.as_deref().map(scrub),
        })));
    }
    let lines = ix.lines_of(ns).unwrap_or(&[]);
    Ok(Some(json!({
        "id": id,
        "record": real,
        "namespace": ns,
        "user": ns.strip_prefix("user:"),
        "first_seq": ix.seq_of(r.first),
        "last_seq": ix.seq_of(r.last),
        "first_pos": lines.binary_search(&r.first).ok(),
        "last_pos": lines.binary_search(&r.last).ok(),
        "text": text,
    })))
}

async fn record(
    State(runs): State<Shared>,
    Path((run, policy, id)): Path<(String, String, String)>,
) -> Answer {
    blocking(move || {
        let (_, p) = policy_of(&runs, &run, &policy)?;
        record_info(p, &id)?
            .map(Json)
            .ok_or(UiError::NotFound { what: "record", id })
    })
    .await
}

async fn decisions(
    State(runs): State<Shared>,
    Path((run, policy)): Path<(String, String)>,
    q: Result<Query<Page>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    let limit = q.limit(100)?;
    blocking(move || {
        let (r, p) = policy_of(&runs, &run, &policy)?;
        let ix = p.decisions()?;
        let rows: Vec<_> = ix
            .rows
            .iter()
            .filter(|r| q.user.as_ref().is_none_or(|u| &r.user == u))
            .collect();
        let offset = q.offset.unwrap_or(0);
        let page: Vec<Value> = rows
            .iter()
            .skip(offset)
            .take(limit)
            .map(|d| with_target_title(d, &r.titles))
            .collect();
        Ok(Json(
            json!({"total": rows.len(), "offset": offset, "decisions": page}),
        ))
    })
    .await
}

/// A listed decision with its target's title (null when the run has none).
fn with_target_title(d: &crate::runs::DecisionRow, titles: &evomem_rundir::ItemTitles) -> Value {
    let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.insert("target_title".into(), json!(titles.get(&d.target)));
    }
    v
}

/// The titles of `items` that `titles` knows, by item token: the join of a
/// decision's candidates with the run's `item_titles.json` (empty for a
/// run without one, whose pages then show ids).
pub fn titles_of<'a>(
    items: impl IntoIterator<Item = &'a str>,
    title: impl Fn(&str) -> Option<String>,
) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for item in items {
        if let Some(t) = title(item) {
            out.insert(item.to_string(), json!(t));
        }
    }
    out
}

async fn decision(
    State(runs): State<Shared>,
    Path((run, policy, id)): Path<(String, String, String)>,
) -> Answer {
    blocking(move || {
        let (r, p) = policy_of(&runs, &run, &policy)?;
        let d = p.decision(&id)?;
        let mut v = serde_json::to_value(&d).map_err(|e| UiError::Io(e.to_string()))?;
        // Embeddings are dropped in the file already; never send them.
        if let Some(entries) = v
            .pointer_mut("/context/entries")
            .and_then(Value::as_array_mut)
        {
            for e in entries {
                if let Some(m) = e.as_object_mut() {
                    m.remove("embedding");
                }
            }
        }
        let mut ids: BTreeSet<String> = BTreeSet::new();
        for e in &d.context.entries {
            if let Some(m) = &e.memory {
                ids.insert(m.as_str().to_string());
            }
            if let Some(path) = &e.path {
                ids.extend(path.nodes.iter().map(|n| n.as_str().to_string()));
            }
        }
        ids.extend(d.trace.used.iter().map(|u| u.id.as_str().to_string()));
        let mut nodes = serde_json::Map::new();
        let mut note = Value::Null;
        if p.dir.has_ops() {
            for id in &ids {
                if let Some(info) = record_info(p, id)? {
                    nodes.insert(id.clone(), info);
                }
            }
        } else {
            note = json!("no op log: memory nodes cannot be traced to their ops");
        }
        let titles = titles_of(
            d.candidates
                .iter()
                .chain(std::iter::once(&d.target))
                .map(String::as_str),
            |t| r.titles.get(t).map(str::to_string),
        );
        Ok(Json(json!({
            "policy": p.slug,
            "decision": v,
            "top": d.top(),
            "nodes": nodes,
            "note": note,
            "titles": titles,
        })))
    })
    .await
}

/// Query of `/api/compare`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompareQuery {
    a: Option<String>,
    b: Option<String>,
    policy: String,
    metric: Option<String>,
    limit: Option<usize>,
}

async fn compare(
    State(runs): State<Shared>,
    q: Result<Query<CompareQuery>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    let metric = q.metric.clone().unwrap_or_else(|| "MRR".into());
    let limit = q.limit.unwrap_or(50);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(UiError::BadRequest(format!(
            "limit {limit} is not in 1..={MAX_LIMIT}"
        )));
    }
    blocking(move || {
        let a = q.a.clone().unwrap_or_else(|| "0".into());
        let b = q.b.clone().unwrap_or_else(|| "1".into());
        let (_, pa) = policy_of(&runs, &a, &q.policy)?;
        let (_, pb) = policy_of(&runs, &b, &q.policy)?;
        let rows_a = pa.dir.read_per_user()?;
        let rows_b = pb.dir.read_per_user()?;
        let value = |r: &evomem_rundir::PerUser| -> Result<f64, UiError> {
            if metric == "rank" {
                return Ok(r.rank as f64);
            }
            let v = serde_json::to_value(r.metrics).map_err(|e| UiError::Io(e.to_string()))?;
            v.get(&metric)
                .and_then(Value::as_f64)
                .ok_or_else(|| UiError::BadRequest(format!("unknown metric `{metric}`")))
        };
        let by_user: BTreeMap<&str, &evomem_rundir::PerUser> =
            rows_b.iter().map(|r| (r.user.as_str(), r)).collect();
        let mut out = Vec::new();
        let (mut sum_a, mut sum_b) = (0.0, 0.0);
        for ra in &rows_a {
            let Some(rb) = by_user.get(ra.user.as_str()) else {
                continue;
            };
            let (va, vb) = (value(ra)?, value(rb)?);
            sum_a += va;
            sum_b += vb;
            out.push(json!({
                "user": ra.user,
                "a": va, "b": vb, "delta": vb - va,
                "rank_a": ra.rank, "rank_b": rb.rank,
                "decision_a": ra.decision_id, "decision_b": rb.decision_id,
            }));
        }
        let n = out.len();
        out.sort_by(|x, y| {
            let dx = x["delta"].as_f64().unwrap_or(0.0).abs();
            let dy = y["delta"].as_f64().unwrap_or(0.0).abs();
            dy.total_cmp(&dx).then(natural(
                x["user"].as_str().unwrap_or(""),
                y["user"].as_str().unwrap_or(""),
            ))
        });
        let changed = out
            .iter()
            .filter(|r| r["delta"].as_f64().unwrap_or(0.0) != 0.0)
            .count();
        out.truncate(limit);
        let mean = |s: f64| if n == 0 { 0.0 } else { s / n as f64 };
        Ok(Json(json!({
            "policy": q.policy,
            "metric": metric,
            "a": a, "b": b,
            "users": n,
            "changed": changed,
            "mean_a": mean(sum_a), "mean_b": mean(sum_b),
            "rows": out,
        })))
    })
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// One op of a log, as the log writes it.
    fn op(seq: u64, op: Value) -> LoggedOp {
        serde_json::from_value(json!({"seq": seq, "op": op, "provenance": {
            "policy": "t", "label": "l", "reason": "r", "sources": [], "logical_time": seq, "wall_time_ms": 0}}))
        .unwrap()
    }

    fn create(seq: u64, id: &str, text: &str) -> LoggedOp {
        op(
            seq,
            json!({"op": "create", "record": {"id": id, "namespace": "user:1", "kind": "event",
            "text": text, "fields": {}, "strength": 0.0, "evidence": 0, "utility": 0.0, "status": "active",
            "embedding": null, "links": [], "created_at": seq, "updated_at": seq}}),
        )
    }

    #[test]
    fn op_rows_name_their_targets_text_as_of_the_op() {
        let ops = vec![
            create(1, "a", "rated 5: Toy Story"),
            op(
                2,
                json!({"op": "adjust_strength", "id": "a", "delta": 1.0, "evidence_delta": 1}),
            ),
            op(
                3,
                json!({"op": "update_fields", "id": "a", "fields": {}, "text": "loves Toy Story", "embedding": null}),
            ),
            op(4, json!({"op": "set_utility", "id": "a", "value": 0.5})),
            op(
                5,
                json!({"op": "set_utility", "id": "elsewhere", "value": 0.5}),
            ),
        ];
        let rows = op_page(&ops, 0, 10);
        let texts: Vec<&Value> = rows.iter().map(|r| &r["target_text"]).collect();
        assert_eq!(
            texts,
            [
                &json!("rated 5: Toy Story"),
                &json!("rated 5: Toy Story"),
                &json!("loves Toy Story"),
                &json!("loves Toy Story"),
                &Value::Null,
            ]
        );
        // A later page still knows the texts the earlier ops set.
        let page = op_page(&ops, 1, 2);
        assert_eq!(page.len(), 2);
        assert_eq!(page[0]["pos"], 1);
        assert_eq!(page[0]["target_text"], "rated 5: Toy Story");
        assert_eq!(page[1]["target_text"], "loves Toy Story");
        assert!(op_page(&ops, 9, 10).is_empty());
    }

    #[test]
    fn titles_join_only_the_items_asked_for_that_have_one() {
        let known: BTreeMap<&str, &str> =
            [("1", "Toy Story"), ("2", "GoldenEye"), ("3", "Heat")].into();
        let got = titles_of(["1", "2", "9"], |t| known.get(t).map(|s| s.to_string()));
        assert_eq!(
            Value::Object(got),
            json!({"1": "Toy Story", "2": "GoldenEye"})
        );
        let none = titles_of(["1"], |_| None);
        assert!(none.is_empty(), "a run without titles keeps ids");
    }
}
