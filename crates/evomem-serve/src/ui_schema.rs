//! The shapes of the inspector's `/ui/api` answers, for the OpenAPI
//! document only. Those answers are built as JSON (`ui.rs`, and
//! `evomem_ui::api`, whose run mode answers the same shapes), so these
//! types are never serialized: they describe, field by field, what the
//! handlers write. The integration test `ui_api_answers_match_their_schemas`
//! calls every `/ui/api` route on a seeded tenant and fails on a field
//! answered but not described here, or described as required and not
//! answered, so the two cannot drift apart.

#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `/ui/api/mode`: which side the pages talk to.
#[derive(ToSchema)]
pub(crate) struct UiMode {
    /// `service` here (`run` under `evomem ui`).
    mode: String,
    /// How to authenticate the other `/ui/api` routes.
    auth: String,
}

/// A user of the op log.
#[derive(ToSchema)]
pub(crate) struct UiUser {
    /// The user's id.
    user: String,
    /// Their ops in the log.
    ops: u64,
}

/// A page of the op log's users.
#[derive(ToSchema)]
pub(crate) struct UiUsers {
    /// Users matching `q`.
    total: u64,
    /// The page's first.
    offset: u64,
    /// The page.
    users: Vec<UiUser>,
    /// Ops in the tenant's log.
    log_ops: u64,
}

/// An op as the op-log pages list it.
#[derive(serde::Serialize, ToSchema)]
pub(crate) struct UiOp {
    /// Its position among its user's ops (`null` when it has no user).
    pos: Option<u64>,
    /// Its seq in the log.
    seq: u64,
    /// Op name (`create`, `update_fields`, ...).
    kind: String,
    /// Lifecycle label.
    label: String,
    /// Why.
    reason: String,
    /// The interactions and feedback that caused it.
    sources: Vec<u64>,
    /// Logical time.
    at: u64,
    /// The record it acts on.
    target: String,
    /// The record's text as it stood after the op, where it has one (the
    /// op list shows it instead of the id).
    target_text: Option<String>,
    /// A kind-specific detail (`null` for most kinds).
    detail: Value,
    /// Wall clock at commit (Unix ms).
    wall_time_ms: i64,
    /// `/ui/api/ops/{seq}` only: the op's user, if any.
    user: Option<String>,
    /// `/ui/api/ops/{seq}` only: `user:<id>`, if it has a user.
    namespace: Option<String>,
}

/// A page of a user's ops.
#[derive(ToSchema)]
pub(crate) struct UiOps {
    /// The user.
    user: String,
    /// Their ops in all.
    total: u64,
    /// The page's first.
    offset: u64,
    /// The page.
    ops: Vec<UiOp>,
}

/// A record an op touched, before and after it.
#[derive(serde::Serialize, ToSchema)]
pub(crate) struct UiTouched {
    /// The record.
    id: String,
    /// Before the op (`null`: it did not exist).
    #[schema(value_type = Option<Object>)]
    before: Option<Value>,
    /// After the op (`null`: it no longer exists).
    #[schema(value_type = Option<Object>)]
    after: Option<Value>,
}

/// The op at a slider position, with what it touched.
#[derive(serde::Serialize, ToSchema)]
pub(crate) struct UiStateOp {
    /// The op as listed.
    #[serde(flatten)]
    summary: UiOp,
    /// The op itself.
    #[schema(value_type = Object)]
    op: Value,
    /// Who wrote it.
    policy: String,
    /// Each record it touched.
    touched: Vec<UiTouched>,
}

/// A user's memory after their first `at` ops.
#[derive(ToSchema)]
pub(crate) struct UiState {
    /// The user.
    user: String,
    /// Ops applied.
    at: u64,
    /// The user's ops in all.
    total: u64,
    /// The logical time of the `at`-th op (`null` at 0).
    time: Option<u64>,
    /// Records by kind.
    kinds: BTreeMap<String, u64>,
    /// The records then (the embedding reduced to model and dimension).
    #[schema(value_type = Vec<Object>)]
    records: Vec<Value>,
    /// The `at`-th op (`null` at 0).
    op: Option<UiStateOp>,
}

/// A decision as the list shows it.
#[derive(ToSchema)]
pub(crate) struct UiDecisionRow {
    /// The decision's id.
    decision_id: u64,
    /// Whose.
    user: String,
    /// When (logical time).
    at: u64,
    /// The item taken, once feedback named it.
    target: Option<String>,
    /// The target's title, where the catalog has one.
    target_title: Option<String>,
    /// The target's rank among the candidates (1-based).
    rank: Option<u64>,
    /// The policy that ranked.
    policy: String,
    /// Feedback received so far.
    feedback_count: u64,
}

/// A page of a user's decisions.
#[derive(ToSchema)]
pub(crate) struct UiDecisions {
    /// The user's decisions in all.
    total: u64,
    /// The page's first.
    offset: u64,
    /// The page, oldest first.
    decisions: Vec<UiDecisionRow>,
}

/// A stored decision, in the shape of a run's `decisions.jsonl` line.
#[derive(ToSchema)]
pub(crate) struct UiDecisionDetail {
    /// The decision's id.
    decision_id: u64,
    /// Whose.
    user: String,
    /// When (logical time).
    at: u64,
    /// The policy that ranked.
    policy: String,
    /// The candidates, in request order.
    candidates: Vec<String>,
    /// Their catalog ids, where known.
    candidate_ids: Option<Vec<u64>>,
    /// Their scores (empty for decisions stored before scores were kept).
    scores: Vec<f64>,
    /// The item taken, once feedback named it.
    target: Option<String>,
    /// The target's rank (1-based).
    rank: Option<u64>,
    /// The last reward.
    reward: Option<f64>,
    /// The last success.
    success: Option<bool>,
    /// Feedback received so far.
    feedback_count: u64,
    /// The context the ranker saw (profile, entries, omitted).
    #[schema(value_type = Object)]
    context: Value,
    /// The usage trace (`used`).
    #[schema(value_type = Object)]
    trace: Value,
}

/// Where a record's ops are.
#[derive(ToSchema)]
pub(crate) struct UiNode {
    /// The record.
    id: String,
    /// The record (as `id`).
    record: String,
    /// `user:<id>`, if it has a user.
    namespace: Option<String>,
    /// Its user, if any.
    user: Option<String>,
    /// Its first op's seq.
    first_seq: u64,
    /// Its last op's seq.
    last_seq: u64,
    /// Its first op's position among its user's ops.
    first_pos: Option<u64>,
    /// Its last op's position among its user's ops.
    last_pos: Option<u64>,
    /// The text its create wrote (the graph's node label).
    text: Option<String>,
}

/// One decision, and the ops that wrote each memory it used.
#[derive(ToSchema)]
pub(crate) struct UiDecision {
    /// The policy that ranked.
    policy: String,
    /// The decision.
    decision: UiDecisionDetail,
    /// Index of the best-scored candidate.
    top: Option<u64>,
    /// Each memory it used, by id.
    nodes: BTreeMap<String, UiNode>,
    /// The decision's own ops (its record, then each feedback).
    #[schema(value_type = Vec<Object>)]
    ops: Vec<Value>,
    /// Why something is missing, if it is.
    note: Option<String>,
    /// The titles the catalog holds for the decision's candidates and
    /// target, by item (items without one are left out).
    titles: BTreeMap<String, String>,
}
