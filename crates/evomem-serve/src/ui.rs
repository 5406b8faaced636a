//! The web inspector over a tenant's live memory, at `/ui`: the pages of
//! `evomem ui` (compiled into `evomem-ui`), and the JSON endpoints they read
//! in service mode, under `/ui/api`. The pages draw both modes with the same
//! code, so these answers have the shapes of run mode's (`evomem_ui::api`):
//!
//! - `users`: the users of the tenant's op log, with their op counts;
//! - `users/{user_id}/ops`: a page of one user's ops (the ops on records
//!   created in `user:<id>`), with kind, label, reason and sources;
//! - `users/{user_id}/state?at=N`: the user's memory after their first N
//!   ops, replayed from those ops ([`evomem_ui::api::user_state_json`]),
//!   and the N-th op with each record it touched before and after: the
//!   time slider's positions are the user's ops;
//! - `ops/{seq}`: one op, with its user and its position among their ops;
//! - `decisions?user=` and `decisions/{id}`: what `recommend` stored in its
//!   `decision` record (candidates, scores, the context the ranker saw, the
//!   usage trace; the target once feedback named one), each memory it used
//!   with the ops that wrote it;
//! - `users/{user_id}/memories?as_of=MS` and `memories/{id}/history`: the
//!   API's memories as of a time (the store's `as_of`) and one memory's ops.
//!
//! Every read copies what it needs from the op log under the tenant's core
//! read lock (`Tenant::read_indexed`, as `Tenant::history` reads), finding
//! a user's or a record's ops through the log's index by user and record
//! (`tenant/log_index.rs`, kept up to the log) rather than a scan of the
//! whole log, and does
//! the rest (replay, JSON) after, on the tenant's blocking workers; none
//! takes the write lock. Unknown users, decisions, ops and memories answer
//! 404, bad query fields 422, in the service's error shape.
//!
//! Each `/ui/api` handler carries its OpenAPI annotation (tag `inspector`)
//! and is routed at the path it names ([`documented`]); the answers' shapes
//! are described in `ui_schema.rs`. The pages are not in the document.
//!
//! The pages and `/ui/api/mode` are public (a browser cannot put a key on a
//! navigation); every other `/ui/api` route goes through the same API-key
//! middleware as `/v1` (`Authorization: Bearer <key>`), which the pages send
//! from a form field.
//!
//! Every `/ui` answer carries a Content-Security-Policy without
//! `unsafe-inline` (the page has no inline script, handler or style
//! attribute; scripts, styles and fetches come from the service itself; no
//! framing, `frame-ancestors 'none'`), `X-Content-Type-Options: nosniff` and
//! `Referrer-Policy: no-referrer` ([`evomem_ui::assets::security_headers`],
//! the headers of run mode too): a key typed into the page is worth
//! protecting from injected script and from clickjacking.

use crate::api::Routes;
use crate::error::ApiError;
use crate::openapi::{UiErrors, UiNotFound};
use crate::tenant::{check_user, LogIndex, Tenant};
use crate::types::{HistoryResponse, UserMemories};
use crate::ui_schema::{UiDecision, UiDecisions, UiMode, UiOp, UiOps, UiState, UiUsers};
use crate::ServiceState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query};
use axum::middleware;
use axum::response::Redirect;
use axum::routing::get;
use axum::{Extension, Json, Router};
use evomem_core::{LoggedOp, MemoryId, Namespace, RecordKind};
use evomem_ui::api::{op_page, op_summary, titles_of, user_state_json, Page};
use evomem_ui::UiError;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Most memories one `/ui/api` listing returns, and the largest page.
const UI_PAGE: usize = 1000;

/// The documented `/ui/api` routes, without their layers (see
/// [`crate::api::Documented`]).
pub(crate) struct Documented {
    /// Behind the tenant's key.
    keyed: Routes,
    /// Public: `/ui/api/mode`.
    public: Routes,
}

/// The documented `/ui/api` routes ([`Documented`]).
pub(crate) fn documented() -> Documented {
    Documented {
        keyed: OpenApiRouter::new()
            .routes(routes!(users))
            .routes(routes!(ops))
            .routes(routes!(user_state))
            .routes(routes!(memories))
            .routes(routes!(history))
            .routes(routes!(op_by_seq))
            .routes(routes!(decisions))
            .routes(routes!(decision)),
        public: OpenApiRouter::new().routes(routes!(mode)),
    }
}

impl Documented {
    /// Their paths and schemas.
    pub(crate) fn into_openapi(self) -> utoipa::openapi::OpenApi {
        let mut doc = self.keyed.into_openapi();
        doc.merge(self.public.into_openapi());
        doc
    }
}

/// The pages: routed, not in the OpenAPI document (they are HTML, scripts
/// and styles for a browser, not API).
pub(crate) fn pages() -> Router<Arc<ServiceState>> {
    evomem_ui::assets::routes::<Arc<ServiceState>>("/ui")
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
}

/// The `/ui` routes (the pages and `api`), for [`crate::api::router`] to
/// merge.
pub(crate) fn router(state: Arc<ServiceState>, api: Documented) -> Router<Arc<ServiceState>> {
    let keyed = api
        .keyed
        .route_layer(middleware::from_fn_with_state(state, crate::api::auth));
    pages()
        .merge(Router::from(api.public))
        .merge(Router::from(keyed))
        .layer(middleware::map_response(
            evomem_ui::assets::security_headers,
        ))
}

#[utoipa::path(
    get,
    path = "/ui/api/mode",
    operation_id = "uiMode",
    summary = "Which side the inspector's pages talk to (public)",
    tag = "inspector",
    responses((status = 200, description = "OK", body = UiMode))
)]
async fn mode() -> Json<Value> {
    Json(json!({"mode": "service", "auth": "Authorization: Bearer <key>"}))
}

#[utoipa::path(
    get,
    path = "/ui/api/memories/{id}/history",
    operation_id = "uiMemoryHistory",
    summary = "A memory's ops, with provenance",
    tag = "inspector",
    params(("id" = String, Path, description = "The memory's id")),
    responses(
        (status = 200, description = "OK", body = HistoryResponse),
        UiErrors,
        UiNotFound,
    ),
    security(("bearer" = []))
)]
async fn history(
    t: Extension<Arc<Tenant>>,
    id: Path<String>,
) -> Result<Json<HistoryResponse>, ApiError> {
    crate::api::history(t, id).await
}

/// A query, or 422 naming what is wrong with it (the service's convention).
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v)
        .map_err(|e| ApiError::field("query", e.body_text()))
}

/// The inspector's error in the service's terms.
fn from_ui(e: UiError) -> ApiError {
    match e {
        UiError::NotFound { what, id } => ApiError::NotFound { what, id },
        UiError::BadRequest(m) => ApiError::field("query", m),
        UiError::Missing(m) | UiError::Io(m) => ApiError::Internal(m),
    }
}

/// [`Page::limit_in`] with the service's error for a bad field.
fn page_limit(q: &Page, default: usize) -> Result<usize, ApiError> {
    q.limit_in(default, UI_PAGE)
        .map_err(|m| ApiError::field("limit", m))
}

fn unknown_user(user: &str) -> ApiError {
    ApiError::NotFound {
        what: "user",
        id: user.to_string(),
    }
}

/// The ops of `user`, in log order (copied out under the read lock,
/// found through the log's index).
fn ops_of(t: &Tenant, user: &str) -> Result<Vec<LoggedOp>, ApiError> {
    let ops = t.read_indexed(|log, _, index| {
        index
            .user_ops(user)
            .iter()
            .filter_map(|&at| log.get(at).cloned())
            .collect::<Vec<_>>()
    })?;
    if ops.is_empty() {
        return Err(unknown_user(user));
    }
    Ok(ops)
}

#[utoipa::path(
    get,
    path = "/ui/api/users",
    operation_id = "uiUsers",
    summary = "The users of the tenant's op log, with their op counts",
    tag = "inspector",
    params(
        ("offset" = Option<usize>, Query, description = "Skip this many"),
        ("limit" = Option<usize>, Query, description = "At most this many (default 100)", minimum = 1, maximum = 1000),
        ("q" = Option<String>, Query, description = "Users whose id contains this"),
    ),
    responses((status = 200, description = "OK", body = UiUsers), UiErrors),
    security(("bearer" = []))
)]
async fn users(
    Extension(t): Extension<Arc<Tenant>>,
    q: Result<Query<Page>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    let limit = page_limit(&q, 100)?;
    t.blocking(move |t| {
        let (mut all, log_ops) = t.read_indexed(|log, _, index| {
            let counts: Vec<(String, usize)> = index
                .users()
                .filter(|(_, n)| *n > 0)
                .map(|(u, n)| (u.to_string(), n))
                .collect();
            (counts, log.len())
        })?;
        all.sort_by(|a, b| evomem_ui::index::natural(&a.0, &b.0));
        let mut out = q.users_page(all, limit);
        out.insert("log_ops".into(), json!(log_ops));
        Ok(Json(Value::Object(out)))
    })
    .await
}

#[utoipa::path(
    get,
    path = "/ui/api/users/{user_id}/ops",
    operation_id = "uiUserOps",
    summary = "A page of a user's ops (kind, label, reason, sources)",
    tag = "inspector",
    params(("user_id" = String, Path, description = "The user", pattern = "^[A-Za-z0-9_.@-]{1,128}$"), ("offset" = Option<usize>, Query, description = "Skip this many"), ("limit" = Option<usize>, Query, description = "At most this many (default 100)", minimum = 1, maximum = 1000)),
    responses((status = 200, description = "OK", body = UiOps), UiErrors, UiNotFound),
    security(("bearer" = []))
)]
async fn ops(
    Extension(t): Extension<Arc<Tenant>>,
    Path(user): Path<String>,
    q: Result<Query<Page>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    let limit = page_limit(&q, 100)?;
    check_user("user_id", &user)?;
    t.blocking(move |t| {
        let all = ops_of(t, &user)?;
        let offset = q.offset.unwrap_or(0);
        let rows: Vec<Value> = op_page(&all, offset, limit)
            .into_iter()
            .zip(all.iter().skip(offset))
            .map(|(v, lo)| with_wall_time(v, lo))
            .collect();
        Ok(Json(json!({
            "user": user,
            "total": all.len(),
            "offset": offset,
            "ops": rows,
        })))
    })
    .await
}

/// `v` (an op's JSON) with the op's wall-clock time: the service's logical
/// time is Unix ms already, but a policy's batch may run ahead of it.
fn with_wall_time(mut v: Value, lo: &LoggedOp) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.insert("wall_time_ms".into(), json!(lo.provenance.wall_time_ms));
    }
    v
}

/// Query of `users/{user_id}/state`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct At {
    /// The user's ops applied (0: before the first); default all.
    at: Option<usize>,
}

#[utoipa::path(
    get,
    path = "/ui/api/users/{user_id}/state",
    operation_id = "uiUserState",
    summary = "A user's memory after their first `at` ops (replayed), and that op with each record before and after",
    tag = "inspector",
    params(("user_id" = String, Path, description = "The user", pattern = "^[A-Za-z0-9_.@-]{1,128}$"), At),
    responses((status = 200, description = "OK", body = UiState), UiErrors, UiNotFound),
    security(("bearer" = []))
)]
async fn user_state(
    Extension(t): Extension<Arc<Tenant>>,
    Path(user): Path<String>,
    q: Result<Query<At>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    check_user("user_id", &user)?;
    t.blocking(move |t| {
        let ops = ops_of(t, &user)?;
        if q.at.is_some_and(|a| a > ops.len()) {
            return Err(ApiError::field(
                "at",
                format!("past the user's last op ({})", ops.len()),
            ));
        }
        user_state_json(&user, &ops, q.at)
            .map(Json)
            .map_err(from_ui)
    })
    .await
}

fn parse_id(what: &'static str, id: &str) -> Result<u64, ApiError> {
    id.parse().map_err(|_| ApiError::NotFound {
        what,
        id: id.to_string(),
    })
}

#[utoipa::path(
    get,
    path = "/ui/api/ops/{seq}",
    operation_id = "uiOp",
    summary = "One op, with its user and its position among the user's ops",
    tag = "inspector",
    params(("seq" = String, Path, description = "An op's seq (a number)")),
    responses((status = 200, description = "OK", body = UiOp), UiErrors, UiNotFound),
    security(("bearer" = []))
)]
async fn op_by_seq(
    Extension(t): Extension<Arc<Tenant>>,
    Path(seq): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let n = parse_id("op", &seq)?;
    t.blocking(move |t| {
        let found = t.read_indexed(|log, _, index| {
            let at = log.partition_point(|lo| lo.seq < n);
            let lo = log.get(at).filter(|lo| lo.seq == n)?;
            // The op's user, and its position among their ops.
            let (user, pos) = match index.user_at(at) {
                Some((u, pos)) => (Some(u.to_string()), pos),
                None => (None, 0),
            };
            Some((lo.clone(), user, pos))
        })?;
        let (lo, user, pos) = found.ok_or(ApiError::NotFound {
            what: "op",
            id: seq,
        })?;
        let mut v = with_wall_time(op_summary(pos, &lo), &lo);
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "namespace".into(),
                json!(user.as_ref().map(|u| format!("user:{u}"))),
            );
            m.insert("pos".into(), json!(user.as_ref().map(|_| pos)));
            m.insert("user".into(), json!(user));
        }
        Ok(Json(v))
    })
    .await
}

fn is_decision(kind: &RecordKind) -> bool {
    matches!(kind, RecordKind::Custom(k) if k == "decision")
}

/// A decision record's id number (`decision:<n>`).
fn decision_number(id: &MemoryId) -> Option<u64> {
    id.as_str().strip_prefix("decision:")?.parse().ok()
}

/// 1-based rank of `target` among `candidates` by `scores` (ties to the
/// earlier position, as the ranking breaks them).
fn rank_of(target: &str, candidates: &[String], scores: &[f64]) -> Option<usize> {
    let i = candidates.iter().position(|c| c == target)?;
    let s = *scores.get(i)?;
    let better = scores
        .iter()
        .enumerate()
        .filter(|&(j, &x)| x > s || (x == s && j < i))
        .count();
    Some(better + 1)
}

/// A stored decision in the shape of a run's `decisions.jsonl` line.
fn decision_json(rec: &evomem_core::MemoryRecord, id: u64) -> Value {
    let field = |k: &str| rec.fields.get(k).cloned().unwrap_or(Value::Null);
    let strings = |k: &str| -> Vec<String> { serde_json::from_value(field(k)).unwrap_or_default() };
    let candidates = strings("candidates");
    let scores: Vec<f64> = serde_json::from_value(field("scores")).unwrap_or_default();
    let target = field("target");
    let rank = target
        .as_str()
        .and_then(|t| rank_of(t, &candidates, &scores));
    let mut context = field("context");
    if context.is_null() {
        context = json!({"profile": null, "entries": [], "omitted": 0});
    }
    let mut trace = field("trace");
    if trace.is_null() {
        trace = json!({"used": []});
    }
    json!({
        "decision_id": id,
        "user": rec.namespace.as_str().strip_prefix("user:"),
        "at": field("decided_at"),
        "policy": field("policy"),
        "candidates": candidates,
        "candidate_ids": field("candidate_ids"),
        "scores": scores,
        "target": target,
        "rank": rank,
        "reward": field("reward"),
        "success": field("success"),
        "feedback_count": field("feedback_count"),
        "context": context,
        "trace": trace,
    })
}

#[utoipa::path(
    get,
    path = "/ui/api/decisions",
    operation_id = "uiDecisions",
    summary = "A user's decisions (recommend), oldest first",
    tag = "inspector",
    params(
        ("user" = String, Query, description = "Whose decisions", pattern = "^[A-Za-z0-9_.@-]{1,128}$"),
        ("offset" = Option<usize>, Query, description = "Skip this many"),
        ("limit" = Option<usize>, Query, description = "At most this many (default 100)", minimum = 1, maximum = 1000),
    ),
    responses((status = 200, description = "OK", body = UiDecisions), UiErrors, UiNotFound),
    security(("bearer" = []))
)]
async fn decisions(
    Extension(t): Extension<Arc<Tenant>>,
    q: Result<Query<Page>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    let limit = page_limit(&q, 100)?;
    let Some(user) = q.user.clone() else {
        return Err(ApiError::field("user", "the user whose decisions to list"));
    };
    check_user("user", &user)?;
    t.blocking(move |t| {
        let (known, mut rows) = t.read_log(|_, state| {
            let ns = [Namespace::user(&user)];
            let mut known = false;
            let mut rows = Vec::new();
            for r in state.scan(&ns) {
                known = true;
                if let (true, Some(id)) = (is_decision(&r.kind), decision_number(&r.id)) {
                    let mut d = decision_json(r, id);
                    let title = d["target"]
                        .as_str()
                        .and_then(|tok| crate::tenant::item_title(state, tok));
                    d["target_title"] = json!(title);
                    rows.push(d);
                }
            }
            (known, rows)
        })?;
        if !known {
            return Err(unknown_user(&user));
        }
        rows.sort_by_key(|d| (d["at"].as_u64(), d["decision_id"].as_u64()));
        let offset = q.offset.unwrap_or(0);
        let page: Vec<Value> = rows
            .iter()
            .skip(offset)
            .take(limit)
            .map(|d| {
                json!({
                    "decision_id": d["decision_id"],
                    "user": d["user"],
                    "at": d["at"],
                    "target": d["target"],
                    "target_title": d["target_title"],
                    "rank": d["rank"],
                    "policy": d["policy"],
                    "feedback_count": d["feedback_count"],
                })
            })
            .collect();
        Ok(Json(
            json!({"total": rows.len(), "offset": offset, "decisions": page}),
        ))
    })
    .await
}

/// Where a record's ops are: its first and last op (seq, and position in
/// its user's ops), for every id of `ids`, from the log's index.
fn nodes_of(log: &[LoggedOp], index: &LogIndex, ids: &BTreeSet<MemoryId>) -> Value {
    let mut nodes = serde_json::Map::new();
    for id in ids {
        let at = index.record_ops(id);
        let (Some(&first), Some(&last)) = (at.first(), at.last()) else {
            continue;
        };
        let (Some(first_op), Some(last_op)) = (log.get(first), log.get(last)) else {
            continue;
        };
        let first_user = index.user_at(first);
        let user = first_user.map(|(u, _)| u);
        let first_pos = first_user.map_or(0, |(_, p)| p);
        let last_pos = index.user_at(last).map_or(0, |(_, p)| p);
        nodes.insert(
            id.as_str().to_string(),
            json!({
                "id": id,
                "record": id,
                "namespace": user.map(|u| format!("user:{u}")),
                "user": user,
                "first_seq": first_op.seq,
                "last_seq": last_op.seq,
                "first_pos": user.map(|_| first_pos),
                "last_pos": user.map(|_| last_pos),
                "text": created_text(first_op),
            }),
        );
    }
    Value::Object(nodes)
}

/// The text a record's first op wrote (its create's), for the evidence
/// graph's node label.
fn created_text(lo: &LoggedOp) -> Option<&str> {
    match &lo.op {
        evomem_core::MemoryOp::Create { record } => Some(record.text.as_str()),
        _ => None,
    }
}

#[utoipa::path(
    get,
    path = "/ui/api/decisions/{id}",
    operation_id = "uiDecision",
    summary = "One decision: candidates, scores, target (once feedback named one), context, usage trace, and the ops that wrote each memory it used",
    tag = "inspector",
    params(("id" = String, Path, description = "A decision id from /v1/recommend")),
    responses((status = 200, description = "OK", body = UiDecision), UiErrors, UiNotFound),
    security(("bearer" = []))
)]
async fn decision(
    Extension(t): Extension<Arc<Tenant>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let n = parse_id("decision", &id)?;
    t.blocking(move |t| {
        let rid = MemoryId::new(format!("decision:{n}"));
        let found = t.read_indexed(|log, state, index| {
            let rec = state.get(&rid).filter(|r| is_decision(&r.kind))?;
            let d = decision_json(rec, n);
            let mut ids: BTreeSet<MemoryId> = BTreeSet::new();
            if let Some(entries) = d.pointer("/context/entries").and_then(Value::as_array) {
                for e in entries {
                    if let Some(m) = e["memory"].as_str() {
                        ids.insert(MemoryId::new(m));
                    }
                    if let Some(ns) = e.pointer("/path/nodes").and_then(Value::as_array) {
                        ids.extend(ns.iter().filter_map(Value::as_str).map(MemoryId::new));
                    }
                }
            }
            if let Some(used) = d.pointer("/trace/used").and_then(Value::as_array) {
                ids.extend(
                    used.iter()
                        .filter_map(|u| u["id"].as_str())
                        .map(MemoryId::new),
                );
            }
            // The decision's own ops: its record, then each feedback.
            let own: Vec<Value> = index
                .record_ops(&rid)
                .iter()
                .filter_map(|&at| log.get(at))
                .filter(|lo| lo.op.target() == &rid)
                .map(|lo| {
                    json!({"seq": lo.seq, "kind": lo.op.name(), "label": lo.provenance.label,
                        "at": lo.provenance.logical_time, "reason": lo.provenance.reason})
                })
                .collect();
            // The titles the catalog registered the candidates with.
            let items: Vec<&str> = d["candidates"]
                .as_array()
                .map(|c| c.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let titles = titles_of(items.into_iter().chain(d["target"].as_str()), |tok| {
                crate::tenant::item_title(state, tok)
            });
            Some((d, nodes_of(log, index, &ids), own, titles))
        })?;
        let (d, nodes, own, titles) = found.ok_or(ApiError::NotFound {
            what: "decision",
            id,
        })?;
        let scores: Vec<f64> = serde_json::from_value(d["scores"].clone()).unwrap_or_default();
        let top = scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i);
        let note = match (scores.is_empty(), d["target"].is_null()) {
            (true, _) => json!("recorded before the service kept scores and context: candidates and the usage trace only"),
            (false, true) => json!("no feedback has named the item taken yet: the target is unknown"),
            (false, false) => Value::Null,
        };
        Ok(Json(json!({
            "policy": d["policy"],
            "decision": d,
            "top": top,
            "nodes": nodes,
            "ops": own,
            "note": note,
            "titles": titles,
        })))
    })
    .await
}

/// Query of `/ui/api/users/{user_id}/memories`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct AsOf {
    /// Unix milliseconds: memory as it stood then; without it, the
    /// memories now.
    as_of: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/ui/api/users/{user_id}/memories",
    operation_id = "uiUserMemories",
    summary = "A user's API memories, now or as of a time (the store's as_of)",
    tag = "inspector",
    params(("user_id" = String, Path, description = "The user", pattern = "^[A-Za-z0-9_.@-]{1,128}$"), AsOf),
    responses((status = 200, description = "OK", body = UserMemories), UiErrors, UiNotFound),
    security(("bearer" = []))
)]
async fn memories(
    Extension(t): Extension<Arc<Tenant>>,
    Path(user): Path<String>,
    q: Result<Query<AsOf>, QueryRejection>,
) -> Result<Json<UserMemories>, ApiError> {
    let q = query(q)?;
    check_user("user_id", &user)?;
    t.blocking(move |t| t.user_memories(&user, q.as_of, UI_PAGE, None))
        .await
        .map(Json)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use crate::auth::KeyRing;
    use crate::config::ServeConfig;
    use crate::tenant::Shared;
    use crate::Service;
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use std::sync::Arc;
    use tower::ServiceExt;

    async fn call(app: &axum::Router, path: &str, key: Option<&str>) -> (StatusCode, String) {
        send(app, Request::get(path), key, Body::empty()).await
    }

    async fn send(
        app: &axum::Router,
        mut req: axum::http::request::Builder,
        key: Option<&str>,
        body: Body,
    ) -> (StatusCode, String) {
        if let Some(k) = key {
            req = req.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        let resp = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Issue 57: the inspector's pages (where a tenant's key is typed) had
    /// no Content-Security-Policy, no `nosniff` and could be framed. Every
    /// `/ui` answer now carries a policy without `unsafe-inline` that takes
    /// scripts from the service alone (the page has no inline script: the
    /// error collector is `errors.js`), forbids framing, and `nosniff` and
    /// a Referrer-Policy. The browser test (`tests/it/inspector.rs`) checks
    /// that the pages work under it and that injected markup does not run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ui_answers_carry_a_strict_content_security_policy() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            Arc::new(evomem_embed::HashingEmbedder::new(16)),
        );
        let service =
            Service::start(shared, KeyRing::from_plain([("evk_ui_test", "demo")])).unwrap();
        let app = service.router();
        for path in [
            "/ui/",
            "/ui/app.js",
            "/ui/errors.js",
            "/ui/app.css",
            "/ui/api/mode",
            "/ui/api/users",
        ] {
            let resp = app
                .clone()
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            let h = resp.headers();
            let get = |name: header::HeaderName| {
                h.get(&name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            let csp = get(header::CONTENT_SECURITY_POLICY);
            assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp:?}");
            assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
            assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
            assert!(csp.contains("script-src 'self';"), "{path}: {csp}");
            assert!(csp.contains("style-src 'self';"), "{path}: {csp}");
            assert_eq!(get(header::X_CONTENT_TYPE_OPTIONS), "nosniff", "{path}");
            assert_eq!(get(header::REFERRER_POLICY), "no-referrer", "{path}");
            if path == "/ui/" {
                let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                    .await
                    .unwrap();
                let html = String::from_utf8_lossy(&body).into_owned();
                // Every script has a `src` (an inline one would be refused),
                // and no element carries a handler or a style attribute.
                let scripts = html.matches("<script").count();
                let with_src = html.matches("<script src=\"").count();
                assert!(scripts >= 2 && scripts == with_src, "{html}");
                for attr in [" onload=", " onclick=", " onerror=", " style="] {
                    assert!(!html.contains(attr), "{attr}: {html}");
                }
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ui_pages_are_public_and_its_api_needs_the_tenants_key() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            Arc::new(evomem_embed::HashingEmbedder::new(16)),
        );
        let service =
            Service::start(shared, KeyRing::from_plain([("evk_ui_test", "demo")])).unwrap();
        let app = service.router();

        let (status, html) = call(&app, "/ui/", None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(html.contains("<script src=\"errors.js\">"), "{html}");
        let (status, _) = call(&app, "/ui/app.js", None).await;
        assert_eq!(status, StatusCode::OK);
        let (status, js) = call(&app, "/ui/errors.js", None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(js.contains("__evomemErrors"), "{js}");
        let (status, _) = call(&app, "/ui", None).await;
        assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
        let (status, mode) = call(&app, "/ui/api/mode", None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(mode.contains("\"service\""), "{mode}");

        let path = "/ui/api/users/alice/memories";
        let (status, body) = call(&app, path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        let (status, body) = call(&app, "/ui/api/memories/x/history", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        let (status, body) = call(&app, path, Some("evk_wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

        // With the key: the user's memories now and as of a past time.
        let add = serde_json::json!({
            "user_id": "alice",
            "memories": [{"text": "likes quiet jazz records", "metadata": {}}],
        });
        let (status, body) = send(
            &app,
            Request::post("/v1/memories").header(header::CONTENT_TYPE, "application/json"),
            Some("evk_ui_test"),
            Body::from(add.to_string()),
        )
        .await;
        assert!(status.is_success(), "{status}: {body}");
        let added: serde_json::Value = serde_json::from_str(&body).unwrap();
        let id = added["memories"][0]["id"].as_str().unwrap().to_string();
        let (status, body) = call(&app, path, Some("evk_ui_test")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("quiet jazz"), "{body}");
        let (status, body) = call(&app, &format!("{path}?as_of=1"), Some("evk_ui_test")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(!body.contains("quiet jazz"), "{body}");
        let (status, body) = call(&app, &format!("{path}?as_of=x"), Some("evk_ui_test")).await;
        // The service's convention for a bad field (as `/v1` answers it).
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let (status, body) = call(
            &app,
            &format!("/ui/api/memories/{id}/history"),
            Some("evk_ui_test"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("\"create\""), "{body}");
    }

    async fn json(
        app: &axum::Router,
        path: &str,
        key: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        let (status, body) = call(app, path, key).await;
        let v = serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
        (status, v)
    }

    async fn post(app: &axum::Router, path: &str, body: serde_json::Value) -> serde_json::Value {
        let (status, text) = send(
            app,
            Request::post(path).header(header::CONTENT_TYPE, "application/json"),
            Some(KEY),
            Body::from(body.to_string()),
        )
        .await;
        assert!(status.is_success(), "{path}: {status}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    const KEY: &str = "evk_ui_reads";

    fn service(dir: &std::path::Path) -> Service {
        let shared = Shared::for_test(
            ServeConfig {
                data_dir: dir.to_path_buf(),
                rate_limit_per_s: 0.0,
                ..ServeConfig::default()
            },
            Arc::new(evomem_embed::HashingEmbedder::new(32)),
        );
        Service::start(shared, KeyRing::from_plain([(KEY, "demo")])).unwrap()
    }

    /// A user's ops, their memory at a position of the slider (the op with
    /// the record before and after), an op by seq, a decision with its
    /// target from feedback and the ops that wrote the memories it used;
    /// unknown things are 404 and bad query fields 422.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ui_api_reads_a_users_ops_state_and_decisions() {
        let dir = tempfile::tempdir().unwrap();
        let app = service(dir.path()).router();
        post(
            &app,
            "/v1/memories",
            serde_json::json!({"user_id": "alice",
            "memories": [{"text": "likes quiet jazz records"}]}),
        )
        .await;
        let events: Vec<serde_json::Value> = [("a1", "Jazz", 5), ("a2", "Jazz", 5), ("b1", "Metal", 1)]
            .iter()
            .map(|(id, g, r)| serde_json::json!({"item": {"id": id, "title": id, "categories": [g]}, "rating": r}))
            .collect();
        post(
            &app,
            "/v1/events",
            serde_json::json!({"user_id": "fan", "events": events}),
        )
        .await;
        let cands = serde_json::json!([
            {"id": "c1", "title": "Blue Train Live", "categories": ["Jazz"]},
            {"id": "c2", "title": "Reign in Blood", "categories": ["Metal"]}]);
        let r = post(
            &app,
            "/v1/recommend",
            serde_json::json!({"user_id": "fan", "candidates": cands}),
        )
        .await;
        let decision = r["decision_id"].as_u64().unwrap();
        post(
            &app,
            "/v1/feedback",
            serde_json::json!({"decision_id": decision, "reward": 1.0,
            "success": true, "item_id": "c1"}),
        )
        .await;

        // The users of the log.
        let (st, users) = json(&app, "/ui/api/users", Some(KEY)).await;
        assert_eq!(st, StatusCode::OK, "{users}");
        let names: Vec<&str> = users["users"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["user"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["alice", "fan"], "{users}");

        // A page of fan's ops, and every one of them.
        let (st, all) = json(&app, "/ui/api/users/fan/ops?limit=1000", Some(KEY)).await;
        assert_eq!(st, StatusCode::OK, "{all}");
        let total = all["total"].as_u64().unwrap() as usize;
        let ops = all["ops"].as_array().unwrap();
        assert_eq!(ops.len(), total);
        assert_eq!(users["users"][1]["ops"].as_u64().unwrap() as usize, total);
        assert_eq!(ops[0]["kind"], "create", "{all}");
        let (_, page) = json(&app, "/ui/api/users/fan/ops?offset=2&limit=2", Some(KEY)).await;
        assert_eq!(page["ops"][0], ops[2], "{page}");
        assert_eq!(page["ops"].as_array().unwrap().len(), 2);

        // The slider before the first op, at the first op (a create: no
        // record before), and at the feedback's op on the decision (the
        // record before and after it).
        let (_, s0) = json(&app, "/ui/api/users/fan/state?at=0", Some(KEY)).await;
        assert!(
            s0["records"].as_array().unwrap().is_empty() && s0["op"].is_null(),
            "{s0}"
        );
        let (_, s1) = json(&app, "/ui/api/users/fan/state?at=1", Some(KEY)).await;
        assert_eq!(s1["records"].as_array().unwrap().len(), 1, "{s1}");
        assert_eq!(s1["op"]["seq"], ops[0]["seq"]);
        assert!(s1["op"]["touched"][0]["before"].is_null(), "{s1}");
        assert!(!s1["op"]["touched"][0]["after"].is_null(), "{s1}");
        let fb = ops
            .iter()
            .position(|o| o["label"] == "feedback")
            .expect("the feedback's op");
        let (_, sf) = json(
            &app,
            &format!("/ui/api/users/fan/state?at={}", fb + 1),
            Some(KEY),
        )
        .await;
        let touched = &sf["op"]["touched"][0];
        assert_eq!(touched["id"], format!("decision:{decision}"), "{sf}");
        assert_eq!(touched["before"]["fields"]["feedback_count"], 0, "{sf}");
        assert_eq!(touched["after"]["fields"]["feedback_count"], 1, "{sf}");
        assert_eq!(touched["after"]["fields"]["target"], "c1", "{sf}");
        assert!(sf["kinds"]["decision"] == 1, "{sf}");

        // An op by seq: its user and position.
        let seq = ops[fb]["seq"].as_u64().unwrap();
        let (st, op) = json(&app, &format!("/ui/api/ops/{seq}"), Some(KEY)).await;
        assert_eq!(st, StatusCode::OK, "{op}");
        assert_eq!(
            (op["user"].as_str(), op["pos"].as_u64()),
            (Some("fan"), Some(fb as u64)),
            "{op}"
        );

        // The decision: candidates, scores, the target from feedback, and
        // the op that wrote each memory it used.
        let (st, list) = json(&app, "/ui/api/decisions?user=fan", Some(KEY)).await;
        assert_eq!(st, StatusCode::OK, "{list}");
        assert_eq!(list["decisions"][0]["decision_id"], decision);
        assert_eq!(list["decisions"][0]["target"], "c1");
        let (st, d) = json(&app, &format!("/ui/api/decisions/{decision}"), Some(KEY)).await;
        assert_eq!(st, StatusCode::OK, "{d}");
        let dd = &d["decision"];
        assert_eq!(dd["candidates"], serde_json::json!(["c1", "c2"]), "{d}");
        assert_eq!(dd["scores"].as_array().unwrap().len(), 2, "{d}");
        assert_eq!(
            (dd["target"].as_str(), dd["rank"].as_u64()),
            (Some("c1"), Some(1)),
            "{d}"
        );
        assert_eq!(dd["user"], "fan");
        assert!(
            !dd["context"]["entries"].as_array().unwrap().is_empty(),
            "{d}"
        );
        let nodes = d["nodes"].as_object().unwrap();
        assert!(!nodes.is_empty(), "{d}");
        for (id, n) in nodes {
            let (_, op) = json(&app, &format!("/ui/api/ops/{}", n["first_seq"]), Some(KEY)).await;
            assert_eq!(op["kind"], "create", "{id}: {op}");
            assert_eq!(op["target"], id.as_str(), "{id}: {op}");
            assert_eq!(op["pos"], n["first_pos"], "{id}: {op}");
        }
        let own: Vec<&str> = d["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(own, ["create", "update_fields"], "{d}");

        // Unknown things: 404 naming them.
        for (path, what) in [
            ("/ui/api/users/nobody/ops", "user `nobody`"),
            ("/ui/api/users/nobody/state", "user `nobody`"),
            ("/ui/api/decisions?user=nobody", "user `nobody`"),
            ("/ui/api/decisions/12345", "decision `12345`"),
            ("/ui/api/decisions/abc", "decision `abc`"),
            ("/ui/api/ops/999999", "op `999999`"),
            ("/ui/api/ops/x", "op `x`"),
            ("/ui/api/memories/nope/history", "memory `nope`"),
        ] {
            let (st, e) = json(&app, path, Some(KEY)).await;
            assert_eq!(st, StatusCode::NOT_FOUND, "{path}: {e}");
            let msg = e["error"]["message"].as_str().unwrap();
            assert!(msg.contains(what), "{path}: {msg}");
        }
        // Bad query fields: 422, the service's convention (run mode: 400).
        for path in [
            "/ui/api/users?limit=0",
            "/ui/api/users?bogus=1",
            "/ui/api/users/fan/ops?limit=1001",
            "/ui/api/users/fan/ops?offset=-1",
            "/ui/api/users/fan/state?at=x",
            "/ui/api/users/fan/state?at=100000",
            "/ui/api/decisions",
            "/ui/api/users/bad:user/ops",
        ] {
            let (st, e) = json(&app, path, Some(KEY)).await;
            assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {e}");
            assert_eq!(e["error"]["code"], "invalid_field", "{path}: {e}");
        }
        // Every keyed route needs the key.
        let doc = crate::openapi::document();
        let keyed = doc
            .paths
            .paths
            .keys()
            .filter(|p| p.starts_with("/ui/api/") && !p.ends_with("/mode"));
        for path in keyed {
            let concrete = path
                .replace("{user_id}", "fan")
                .replace("{id}", "1")
                .replace("{seq}", "1");
            let (st, e) = json(&app, &concrete, None).await;
            assert_eq!(st, StatusCode::UNAUTHORIZED, "{concrete}: {e}");
        }
    }

    /// The reads go through the log's index, which must follow the log:
    /// after more writes the counts and positions include them, and after
    /// a user's deletion (the log rewritten and renumbered) the deleted
    /// user is gone and the others' ops are found at their new seqs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ui_api_reads_follow_the_log_through_writes_and_a_user_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let app = service(dir.path()).router();
        let add = |user: &'static str, text: &'static str| {
            let app = app.clone();
            async move {
                post(
                    &app,
                    "/v1/memories",
                    serde_json::json!({"user_id": user, "memories": [{"text": text}]}),
                )
                .await
            }
        };
        add("alice", "likes jazz").await;
        add("bob", "likes metal").await;
        let ops_of = |user: &'static str| {
            let app = app.clone();
            async move { json(&app, &format!("/ui/api/users/{user}/ops"), Some(KEY)).await }
        };
        let (_, bob) = ops_of("bob").await;
        assert_eq!(bob["total"], 1, "{bob}");
        // Read once (the index is built), then write more: the next read
        // sees the new ops.
        add("bob", "likes doom metal").await;
        let m = add("alice", "likes bebop").await;
        let (_, bob) = ops_of("bob").await;
        assert_eq!(bob["total"], 2, "{bob}");
        let (_, users) = json(&app, "/ui/api/users", Some(KEY)).await;
        let counts: Vec<(String, u64)> = users["users"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| {
                (
                    u["user"].as_str().unwrap().to_string(),
                    u["ops"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            counts,
            [("alice".to_string(), 2), ("bob".to_string(), 2)],
            "{users}"
        );
        let id = m["memories"][0]["id"].as_str().unwrap().to_string();
        let (st, h) = json(&app, &format!("/ui/api/memories/{id}/history"), Some(KEY)).await;
        assert_eq!(st, StatusCode::OK, "{h}");

        let (st, body) = send(
            &app,
            Request::delete("/v1/users/alice"),
            Some(KEY),
            Body::empty(),
        )
        .await;
        assert!(st.is_success(), "{st}: {body}");
        let (st, _) = ops_of("alice").await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        let (_, users) = json(&app, "/ui/api/users", Some(KEY)).await;
        assert_eq!(users["users"].as_array().unwrap().len(), 1, "{users}");
        assert_eq!(users["users"][0]["user"], "bob", "{users}");
        let (_, bob) = ops_of("bob").await;
        assert_eq!(bob["total"], 2, "{bob}");
        for (k, op) in bob["ops"].as_array().unwrap().iter().enumerate() {
            let seq = op["seq"].as_u64().unwrap();
            let (st, one) = json(&app, &format!("/ui/api/ops/{seq}"), Some(KEY)).await;
            assert_eq!(st, StatusCode::OK, "{one}");
            assert_eq!(
                (one["user"].as_str(), one["pos"].as_u64()),
                (Some("bob"), Some(k as u64)),
                "{one}"
            );
        }
        let (st, _) = json(&app, &format!("/ui/api/memories/{id}/history"), Some(KEY)).await;
        assert_eq!(
            st,
            StatusCode::NOT_FOUND,
            "a deleted user's memory has no history"
        );
    }
}
