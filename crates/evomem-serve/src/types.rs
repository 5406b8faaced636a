//! The JSON bodies of the `/v1` API. Each type derives its schema in the
//! OpenAPI document (`openapi.rs`; the doc comments are the descriptions,
//! `#[schema]` adds the bounds the handlers check), under its own name or
//! the one `as` gives.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// One memory to add.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMemory {
    /// The text (embedded and indexed).
    #[schema(min_length = 1, max_length = 16384, pattern = "\\S")]
    pub text: String,
    /// Free-form metadata; searches can filter on top-level keys.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
}

/// `POST /v1/memories`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddRequest {
    /// Whose memories.
    #[schema(pattern = "^[A-Za-z0-9_.@-]{1,128}$")]
    pub user_id: String,
    /// The batch.
    #[schema(min_items = 1, max_items = 1000)]
    pub memories: Vec<NewMemory>,
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Memory)]
pub struct MemoryOut {
    /// Its id.
    pub id: String,
    /// Whose it is.
    pub user_id: String,
    /// The text.
    pub text: String,
    /// The metadata.
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    /// When it was created (service clock, Unix ms).
    pub created_at_ms: u64,
    /// When it last changed (service clock, Unix ms).
    pub updated_at_ms: u64,
}

/// Answer of `POST /v1/memories` (every memory is committed).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AddResponse {
    /// The stored memories, in request order.
    pub memories: Vec<MemoryOut>,
}

/// `PATCH /v1/memories/{id}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// New text (re-embedded).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 16384, pattern = "\\S")]
    pub text: Option<String>,
    /// New metadata (replaces the old).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

/// `POST /v1/memories/search`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Whose memories.
    #[schema(pattern = "^[A-Za-z0-9_.@-]{1,128}$")]
    pub user_id: String,
    /// The query text.
    #[schema(min_length = 1, max_length = 16384, pattern = "\\S")]
    pub query: String,
    /// How many results (1-100). Default 10.
    #[serde(default = "default_k")]
    #[schema(minimum = 1, maximum = 100)]
    pub k: usize,
    /// Metadata equality filters: every key must equal its value.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub filter: Map<String, Value>,
    /// Only hits scoring at least this (cosine, -1..=1). Default: none.
    #[serde(default)]
    #[schema(minimum = -1, maximum = 1)]
    pub min_score: Option<f32>,
}

fn default_k() -> usize {
    10
}

/// One search hit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchHit {
    /// The memory.
    pub memory: MemoryOut,
    /// Cosine similarity (greater is closer).
    pub score: f32,
}

/// Answer of a search.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchResponse {
    /// Hits, best first (ties by id).
    pub results: Vec<SearchHit>,
}

/// Answer of `DELETE /v1/memories/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Deleted {
    /// The id.
    pub id: String,
    /// Always true.
    pub deleted: bool,
    /// Whether the delete was hard (`?hard=true`): the memory's every text
    /// removed from the op log, history, `as_of`, the index and the file.
    pub hard: bool,
    /// What a hard delete verified after it ran (empty for a soft one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verified: Vec<String>,
}

/// One op in a memory's history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryEntry {
    /// Position in the tenant's op log.
    pub seq: u64,
    /// Op name (`create`, `update_fields`, `forget`, ...).
    pub op: String,
    /// Who wrote it (`api`, or a policy name).
    pub policy: String,
    /// Lifecycle label.
    pub label: String,
    /// Why.
    pub reason: String,
    /// Service clock (Unix ms).
    pub logical_time: u64,
    /// Wall clock at commit (Unix ms).
    pub wall_time_ms: i64,
    /// The op itself.
    #[schema(value_type = Object)]
    pub body: Value,
}

/// Answer of `GET /v1/memories/{id}/history`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryResponse {
    /// The memory.
    pub id: String,
    /// Its ops, oldest first.
    pub history: Vec<HistoryEntry>,
}

/// Answer of `GET /v1/users/{user_id}/memories`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UserMemories {
    /// The user.
    pub user_id: String,
    /// The time asked for, if any.
    pub as_of_ms: Option<u64>,
    /// Memories, by id.
    pub memories: Vec<MemoryOut>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Answer of `DELETE /v1/users/{user_id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UserDeleted {
    /// The user.
    pub user_id: String,
    /// Live records removed (memories, policy memory, decisions).
    pub records_removed: usize,
    /// Log entries dropped.
    pub ops_dropped: usize,
    /// Log entries kept but edited.
    pub ops_edited: usize,
    /// The checks that passed afterwards.
    pub verified: Vec<String>,
}

/// An item as the loop endpoints take it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Item)]
pub struct ItemIn {
    /// The item's id.
    #[schema(min_length = 1, max_length = 256)]
    pub id: String,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// Categories or genres, most general first.
    #[serde(default)]
    pub categories: Vec<String>,
    /// Free text (a description).
    #[serde(default)]
    pub text: String,
}

/// A candidate or event item: an id already known, or a full item.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ItemRef {
    /// An id seen before.
    Id(String),
    /// A full item (registered if new).
    Item(ItemIn),
}

/// One interaction.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Event)]
pub struct EventIn {
    /// What.
    pub item: ItemRef,
    /// Explicit rating, if any.
    #[serde(default)]
    pub rating: Option<f32>,
    /// Source timestamp (Unix seconds). Default: now.
    #[serde(default)]
    pub timestamp: Option<i64>,
}

/// `POST /v1/events`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsRequest {
    /// Who.
    #[schema(pattern = "^[A-Za-z0-9_.@-]{1,128}$")]
    pub user_id: String,
    /// One of the names in the service's `serve.policies` setting (default
    /// `mars`, `no-memory`); omitted: `serve.policy`. Policy parameters
    /// come from the settings only.
    #[serde(default)]
    pub policy: Option<String>,
    /// The interactions, oldest first.
    #[schema(min_items = 1, max_items = 1000)]
    pub events: Vec<EventIn>,
}

/// Answer of `POST /v1/events`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventsResponse {
    /// The policy spec that observed them.
    pub policy: String,
    /// Events observed.
    pub observed: usize,
    /// Memory ops the policy made (all committed).
    pub ops: usize,
}

/// `POST /v1/recommend`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecommendRequest {
    /// For whom.
    #[schema(pattern = "^[A-Za-z0-9_.@-]{1,128}$")]
    pub user_id: String,
    /// One of the names in the service's `serve.policies` setting (default
    /// `mars`, `no-memory`); omitted: `serve.policy`. Policy parameters
    /// come from the settings only.
    #[serde(default)]
    pub policy: Option<String>,
    /// Candidates to rank.
    #[schema(min_items = 1, max_items = 1000)]
    pub candidates: Vec<ItemRef>,
    /// Return the top k (default: all).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub k: Option<usize>,
    /// An instruction for the ranker.
    #[serde(default)]
    pub instruction: Option<String>,
}

/// One ranked candidate.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Ranked {
    /// Item id.
    pub item_id: String,
    /// Score (higher is better).
    pub score: f64,
}

/// One piece of evidence the ranking used.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Evidence {
    /// The memory record, if any.
    pub memory_id: Option<String>,
    /// The item it is about, if any.
    pub item_id: Option<String>,
    /// Its text.
    pub text: String,
    /// Signed weight.
    pub weight: f32,
    /// The hop path, where the policy expands along links.
    pub path: Option<Vec<String>>,
}

/// Answer of `POST /v1/recommend`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RecommendResponse {
    /// Pass this to `POST /v1/feedback`. Random (not derived from the time,
    /// so it cannot be guessed), below 2^53 so that every JSON client reads
    /// it exactly. Old decisions keep their millisecond ids.
    #[schema(minimum = 1, maximum = 9_007_199_254_740_991_i64)]
    pub decision_id: u64,
    /// The policy spec.
    pub policy: String,
    /// Candidates best first.
    pub ranking: Vec<Ranked>,
    /// The synthesized profile, if the policy has one.
    pub profile: Option<String>,
    /// What memory contributed.
    pub evidence: Vec<Evidence>,
}

/// `POST /v1/feedback`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    /// The decision: random (not derived from the time, so it cannot be
    /// guessed), below 2^53 so that every JSON client reads it exactly. Old
    /// decisions keep their millisecond ids.
    #[schema(minimum = 1, maximum = 9_007_199_254_740_991_i64)]
    pub decision_id: u64,
    /// Scalar reward.
    #[serde(default)]
    pub reward: f64,
    /// Binary success, where there is one.
    #[serde(default)]
    pub success: Option<bool>,
    /// The item chosen, if any.
    #[serde(default)]
    pub item_id: Option<String>,
    /// Named objectives (clicks, dwell, ...).
    #[serde(default)]
    pub objectives: BTreeMap<String, f64>,
}

/// Answer of `POST /v1/feedback`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FeedbackResponse {
    /// The decision: random (not derived from the time, so it cannot be
    /// guessed), below 2^53 so that every JSON client reads it exactly. Old
    /// decisions keep their millisecond ids.
    #[schema(minimum = 1, maximum = 9_007_199_254_740_991_i64)]
    pub decision_id: u64,
    /// Memory ops the policy made (all committed).
    pub ops: usize,
    /// How many outcomes this decision has received so far.
    pub feedback_count: u64,
}
