//! The router: routes, the auth / rate-limit / metrics / timeout
//! middleware, and the handlers. Each route's handler carries its OpenAPI
//! annotation and is routed at the path the annotation names
//! ([`documented`], `openapi.rs`). Handlers do no work themselves: they check
//! their input (bounds of every field: `fields.rs`), then run the tenant's
//! (blocking) method on tokio's blocking pool, within the tenant's share of
//! it ([`Tenant::blocking`] for reads, [`Tenant::blocking_write`] for
//! writes that may wait at the write gate, [`Tenant::blocking_loop`]).
//!
//! The rate limit charges a request by its size, all at the door (in
//! `auth`, before the idempotency layer): one token, plus one per entry
//! beyond the first of a batch (memories, events, candidates), plus one
//! per `serve.rate_limit_bytes_per_token` bytes of body.

use crate::error::{ApiError, ErrorBody};
use crate::fields;
use crate::openapi::{AnswerPurged, Idempotency, LlmFailed, NotFound, QuotaExceeded, V1Errors};
use crate::tenant::{check_user, Tenant};
use crate::types::*;
use crate::ServiceState;
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, MatchedPath, Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Routes that carry their documentation (utoipa-axum's router).
pub(crate) type Routes = OpenApiRouter<Arc<ServiceState>>;

/// A JSON body whose rejections become [`ApiError`]s (the serde message
/// names the field and the position).
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map(|b| b.0)
            .unwrap_or(0);
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(r) => Err(match r {
                JsonRejection::BytesRejection(_) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                    ApiError::BodyTooLarge { limit }
                }
                other => ApiError::BadBody(other.body_text()),
            }),
        }
    }
}

#[derive(Clone, Copy)]
struct BodyLimit(usize);

/// Build the router over `state`: `/v1`, the inspector, the probes, and
/// `/mcp`, whose tool calls go through a copy of this router without it
/// (so that each is one `/v1` request with all of `/v1`'s checks).
pub(crate) fn router(state: Arc<ServiceState>) -> Router {
    let inner = layered(state.clone(), routes(state.clone()));
    let server =
        match evomem_mcp::EvomemMcp::new(Arc::new(evomem_mcp::RouterBackend::new(inner, None))) {
            Ok(server) => server,
            // tools.json is compiled in and parsed by the crate's tests; a
            // broken one leaves `/mcp` unrouted rather than the service down.
            Err(e) => {
                tracing::error!("/mcp is off: {e}");
                return layered(state.clone(), routes(state));
            }
        };
    let mcp = evomem_mcp::http_service(server, state.shared.config.max_body_bytes);
    let mcp = tower::Layer::layer(
        &middleware::from_fn_with_state(state.clone(), mcp_auth),
        mcp,
    );
    layered(state.clone(), routes(state).route_service("/mcp", mcp))
}

/// Every documented route, without its layers, in the groups that take
/// different layers. The router ([`routes`]) and the OpenAPI document
/// ([`crate::openapi::document`]) are both made from this, so that a route
/// is documented exactly when it is routed.
pub(crate) struct Documented {
    /// `/v1`: behind the key check and the idempotency layer.
    v1: Routes,
    /// The probes, `/metrics` and `/openapi.json`: no layer.
    probes: Routes,
    /// The inspector's `/ui/api`.
    ui: crate::ui::Documented,
}

/// The documented routes ([`Documented`]).
pub(crate) fn documented() -> Documented {
    Documented {
        v1: OpenApiRouter::new()
            .routes(routes!(add))
            .routes(routes!(search))
            .routes(routes!(get_memory, update_memory, delete_memory))
            .routes(routes!(history))
            .routes(routes!(user_memories))
            .routes(routes!(delete_user))
            .routes(routes!(events))
            .routes(routes!(recommend))
            .routes(routes!(feedback)),
        probes: OpenApiRouter::new()
            .routes(routes!(healthz))
            .routes(routes!(readyz))
            .routes(routes!(metrics))
            .routes(routes!(openapi)),
        ui: crate::ui::documented(),
    }
}

impl Documented {
    /// The paths and schemas of these routes (the document less `/mcp`,
    /// `info` and the security scheme, which `openapi.rs` adds).
    pub(crate) fn into_openapi(self) -> utoipa::openapi::OpenApi {
        let mut doc = self.v1.into_openapi();
        doc.merge(self.probes.into_openapi());
        doc.merge(self.ui.into_openapi());
        doc
    }
}

/// The routes, before the service-wide layers.
fn routes(state: Arc<ServiceState>) -> Router<Arc<ServiceState>> {
    let Documented { v1, probes, ui } = documented();
    let v1 = v1
        .route_layer(middleware::from_fn_with_state(state.clone(), idempotent))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .merge(Router::from(v1))
        .merge(crate::ui::router(state, ui))
        .merge(Router::from(probes))
}

/// The service-wide layers (metrics and timeouts, the body limit) over
/// `routes`, and the 404 of an unknown route.
fn layered(state: Arc<ServiceState>, routes: Router<Arc<ServiceState>>) -> Router {
    let limit = state.shared.config.max_body_bytes;
    routes
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::max(limit))
        .layer(Extension(BodyLimit(limit)))
        .with_state(state)
}

/// The door of `/mcp`: a known bearer key, as for `/v1`. The MCP messages
/// themselves are not charged to the rate limit; each tool call is, as the
/// `/v1` request it makes (with the same key).
async fn mcp_auth(
    State(s): State<Arc<ServiceState>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    known_key(&s, &req)?;
    Ok(next.run(req).await)
}

async fn not_found(req: Request) -> ApiError {
    ApiError::NotFound {
        what: "route",
        id: format!("{} {}", req.method(), req.uri().path()),
    }
}

async fn observe(State(s): State<Arc<ServiceState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let start = Instant::now();
    let limit = s.shared.config.request_timeout_s;
    let resp = if limit > 0 && timed(&route) {
        match tokio::time::timeout(std::time::Duration::from_secs(limit), next.run(req)).await {
            Ok(r) => r,
            Err(_) => ApiError::Timeout { seconds: limit }.into_response(),
        }
    } else {
        next.run(req).await
    };
    s.shared.metrics.observe(
        &route,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    resp
}

/// Whether requests to `route` run under `serve.request_timeout_s`: the
/// API's and the inspector's reads (`/ui/api`, which replay a user's ops
/// and may wait for a read permit like `/v1`); not the probes, `/metrics`
/// or the pages.
fn timed(route: &str) -> bool {
    route.starts_with("/v1/") || route.starts_with("/ui/api/")
}

/// The door of `/v1` and `/mcp`: 503 while shutting down, else the
/// request's `Authorization: Bearer` key (401 without one or for an
/// unknown one) and its tenant.
fn known_key<'r>(s: &ServiceState, req: &'r Request) -> Result<(&'r str, String), ApiError> {
    if s.shutting_down.load(Ordering::SeqCst) {
        return Err(ApiError::ShuttingDown);
    }
    let key = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or(ApiError::Unauthenticated)?;
    let tenant = s.keys.tenant_of(key).ok_or(ApiError::UnknownKey)?;
    Ok((key, tenant))
}

pub(crate) async fn auth(
    State(s): State<Arc<ServiceState>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (key, tenant) = known_key(&s, &req)?;
    let hash = crate::auth::hash_key(key);
    s.limiter
        .check(&hash)
        .map_err(|retry_after_ms| ApiError::RateLimited { retry_after_ms })?;
    let mut req = charge_body(&s, &hash, req).await?;
    // The tenant, opened on its first request (a key added while the
    // service runs works at once) and leased until the answer is made:
    // held here across the handler (whose extractors drop the request's
    // extensions early), and in the request for the idempotency layer,
    // whose task may outlive this future. The registry closes no tenant
    // with a lease held.
    let lease = Arc::new(s.tenants.acquire(&tenant).await?);
    req.extensions_mut().insert(lease.tenant().clone());
    req.extensions_mut().insert(lease.clone());
    let resp = next.run(req).await;
    drop(lease);
    Ok(resp)
}

/// Charge a request's body to the key's rate limit, at the door (after
/// the request's own token, before the idempotency layer, so that a 429 is
/// never a keyed write's answer): one token per entry past the first of a
/// batch (`memories`, `events`, `candidates`) and one per
/// `serve.rate_limit_bytes_per_token` bytes (none when 0). The body is
/// read here whole (at most `serve.max_body_bytes`, else 413) and handed
/// on.
async fn charge_body(s: &ServiceState, key: &str, req: Request) -> Result<Request, ApiError> {
    let bodiless = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    if bodiless {
        return Ok(req);
    }
    let limit = s.shared.config.max_body_bytes;
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::BodyTooLarge { limit })?;
    let per = s.shared.config.rate_limit_bytes_per_token;
    let by_size = bytes.len().checked_div(per).unwrap_or(0);
    let batch = matches!(
        parts.uri.path(),
        "/v1/memories" | "/v1/events" | "/v1/recommend"
    );
    let entries = if batch { entries_of(&bytes) } else { 0 };
    let cost = entries.saturating_sub(1) + by_size;
    if cost > 0 {
        s.limiter
            .check_cost(key, cost as f64)
            .map_err(|retry_after_ms| ApiError::RateLimited { retry_after_ms })?;
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The entries of a batch body (`memories`, `events` or `candidates`),
/// counted without building them; 0 for any other body, or one that does
/// not parse (its handler answers that).
fn entries_of(body: &[u8]) -> usize {
    /// A JSON array's length, its values skipped.
    #[derive(Default)]
    struct Count(usize);
    impl<'de> Deserialize<'de> for Count {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Seq;
            impl<'de> serde::de::Visitor<'de> for Seq {
                type Value = Count;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an array")
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<Count, A::Error> {
                    let mut n = 0;
                    while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                        n += 1;
                    }
                    Ok(Count(n))
                }
            }
            d.deserialize_seq(Seq)
        }
    }
    #[derive(Deserialize)]
    struct Batch {
        #[serde(default)]
        memories: Count,
        #[serde(default)]
        events: Count,
        #[serde(default)]
        candidates: Count,
    }
    serde_json::from_slice::<Batch>(body)
        .map(|b| b.memories.0 + b.events.0 + b.candidates.0)
        .unwrap_or(0)
}

/// Writes with an `Idempotency-Key` ([`crate::idem`]): a retry gets the
/// first answer. The request runs in a task of its own, so that it records
/// its answer even when the client or the request timeout stops waiting.
async fn idempotent(
    State(s): State<Arc<ServiceState>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    use crate::idem::{digest, key_of, Start};
    let write = matches!(
        *req.method(),
        axum::http::Method::POST | axum::http::Method::PATCH | axum::http::Method::DELETE
    );
    let key = match key_of(req.headers())? {
        Some(k) if write => k,
        _ => return Ok(next.run(req).await),
    };
    let t = req
        .extensions()
        .get::<Arc<Tenant>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal("no tenant on an authenticated request".into()))?;
    // Held by the task below, which runs on when nobody waits for it.
    let lease = req
        .extensions()
        .get::<Arc<crate::registry::Lease>>()
        .cloned();
    let tenant = t.name().to_string();
    let limit = s.shared.config.max_body_bytes;
    let (req, request, user) = digest(req, limit).await?;
    // A retry on PostgreSQL: catch up first, so that a log rewrite by
    // another instance (which may have deleted the answer's text) is seen.
    if s.shared.config.is_postgres() && s.idem.knows(&tenant, &key) {
        let t = t.clone();
        tokio::task::spawn_blocking(move || t.refresh())
            .await
            .map_err(|e| ApiError::Internal(format!("catching up: {e}")))??;
    }
    match s.idem.start(&tenant, &key, request, t.peer_rewrites())? {
        Start::Replay(resp) => Ok(resp),
        Start::Run => {
            let st = s.clone();
            let task = tokio::spawn(async move {
                let _lease = lease;
                // A key this process does not know may have been committed
                // by another instance, or before a restart (crate::idem).
                let k = key.clone();
                let committed = t.blocking(move |t| t.committed_key(&k)).await;
                let resp = match committed {
                    Ok(Some(d)) if d == request => ApiError::AppliedBefore.into_response(),
                    Ok(Some(_)) => ApiError::field(
                        "Idempotency-Key",
                        "this key was used for another request (method, path or body differ)",
                    )
                    .into_response(),
                    Ok(None) => {
                        let stamp = evomem_store::WriteKey {
                            key: key.clone(),
                            request,
                        };
                        crate::idem::with_task_key(stamp, next.run(req)).await
                    }
                    Err(e) => e.into_response(),
                };
                let (parts, body) = resp.into_parts();
                let bytes = axum::body::to_bytes(body, usize::MAX)
                    .await
                    .unwrap_or_default();
                st.idem.finish(
                    &tenant,
                    &key,
                    request,
                    parts.status,
                    bytes.clone(),
                    user.as_deref(),
                );
                Response::from_parts(parts, Body::from(bytes))
            });
            task.await
                .map_err(|e| ApiError::Internal(format!("idempotent request: {e}")))
        }
    }
}

fn check_batch(s: &ServiceState, field: &str, n: usize) -> Result<(), ApiError> {
    let limit = s.shared.config.max_batch;
    if n > limit {
        return Err(ApiError::BatchTooLarge {
            field: field.to_string(),
            got: n,
            limit,
        });
    }
    if n == 0 {
        return Err(ApiError::field(field, "must hold at least one entry"));
    }
    Ok(())
}

/// A `policy` field: a name of at most [`fields::NAME_BYTES`] (it must
/// also be one of `serve.policies`, which the tenant checks).
fn check_policy(policy: Option<&str>) -> Result<(), ApiError> {
    policy.map_or(Ok(()), |p| fields::at_most("policy", p, fields::NAME_BYTES))
}

#[utoipa::path(
    post,
    path = "/v1/memories",
    operation_id = "addMemories",
    summary = "Add a batch of memories for a user (acknowledged after the commit)",
    params(Idempotency),
    request_body = AddRequest,
    responses(
        (status = 201, description = "Committed", body = AddResponse),
        V1Errors,
        QuotaExceeded,
        AnswerPurged,
    ),
    security(("bearer" = []))
)]
async fn add(
    State(s): State<Arc<ServiceState>>,
    Extension(t): Extension<Arc<Tenant>>,
    ApiJson(req): ApiJson<AddRequest>,
) -> Result<(StatusCode, Json<AddResponse>), ApiError> {
    check_user("user_id", &req.user_id)?;
    check_batch(&s, "memories", req.memories.len())?;
    for (i, m) in req.memories.iter().enumerate() {
        fields::text(&format!("memories[{i}].text"), &m.text)?;
        fields::json(&format!("memories[{i}].metadata"), &m.metadata)?;
    }
    let memories = t.add(req.user_id, req.memories).await?;
    Ok((StatusCode::CREATED, Json(AddResponse { memories })))
}

#[utoipa::path(
    get,
    path = "/v1/memories/{id}",
    operation_id = "getMemory",
    summary = "One memory",
    params(("id" = String, Path, description = "The memory's id")),
    responses((status = 200, description = "OK", body = MemoryOut), V1Errors, NotFound),
    security(("bearer" = []))
)]
async fn get_memory(
    Extension(t): Extension<Arc<Tenant>>,
    Path(id): Path<String>,
) -> Result<Json<MemoryOut>, ApiError> {
    t.blocking(move |t| t.get(&id)).await.map(Json)
}

#[utoipa::path(
    patch,
    path = "/v1/memories/{id}",
    operation_id = "updateMemory",
    summary = "Change a memory's text (re-embedded) or metadata",
    params(("id" = String, Path, description = "The memory's id"), Idempotency),
    request_body = UpdateRequest,
    responses(
        (status = 200, description = "OK", body = MemoryOut),
        V1Errors,
        NotFound,
        QuotaExceeded,
        AnswerPurged,
    ),
    security(("bearer" = []))
)]
async fn update_memory(
    Extension(t): Extension<Arc<Tenant>>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateRequest>,
) -> Result<Json<MemoryOut>, ApiError> {
    if let Some(text) = &req.text {
        fields::text("text", text)?;
    }
    if let Some(m) = &req.metadata {
        fields::json("metadata", m)?;
    }
    if req.text.is_none() && req.metadata.is_none() {
        return Err(ApiError::field("text", "send `text`, `metadata` or both"));
    }
    t.blocking_write(move |t| t.update(&id, req))
        .await
        .map(Json)
}

/// Query of `DELETE /v1/memories/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    /// true: hard delete (see above): the text leaves the log, history and
    /// file. Default false: soft delete.
    hard: Option<bool>,
}

#[utoipa::path(
    delete,
    path = "/v1/memories/{id}",
    operation_id = "deleteMemory",
    summary = "Forget one memory",
    description = "Soft by default: the memory leaves search, get and listings, but its text \
        stays in the op log, in its history and in as_of listings. With hard=true the delete is \
        hard: every op that created, edited or deleted the memory is removed from the op log (so \
        no text it ever held stays in history or as_of), its record and vector leave the store \
        and the index, and the store's free pages are purged (SQLite: secure_delete, VACUUM, WAL \
        truncation; PostgreSQL: the tables are rewritten). The op log is renumbered, and a hard \
        delete takes time in proportion to the tenant's log. A hard delete also works on a \
        memory already deleted softly. DELETE /v1/users/{user_id} removes all of a user's text \
        the same way.",
    params(("id" = String, Path, description = "The memory's id"), DeleteQuery, Idempotency),
    responses(
        (status = 200, description = "OK", body = Deleted),
        V1Errors,
        NotFound,
        AnswerPurged,
    ),
    security(("bearer" = []))
)]
async fn delete_memory(
    State(s): State<Arc<ServiceState>>,
    Extension(t): Extension<Arc<Tenant>>,
    Path(id): Path<String>,
    q: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Deleted>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::field("hard", e.body_text()))?;
    if q.hard == Some(true) {
        let mid = id.clone();
        let done = t.blocking_write(move |t| t.hard_delete(&mid)).await?;
        // Remembered answers holding its text go too (crate::idem).
        s.idem.purge(t.name(), &crate::idem::Deleted::Memory(&id));
        Ok(Json(done))
    } else {
        t.blocking_write(move |t| t.delete(&id)).await.map(Json)
    }
}

#[utoipa::path(
    post,
    path = "/v1/memories/search",
    operation_id = "searchMemories",
    summary = "Top-k of a user's memories by meaning, with metadata filters",
    request_body = SearchRequest,
    responses((status = 200, description = "OK", body = SearchResponse), V1Errors),
    security(("bearer" = []))
)]
async fn search(
    State(s): State<Arc<ServiceState>>,
    Extension(t): Extension<Arc<Tenant>>,
    ApiJson(req): ApiJson<SearchRequest>,
) -> Result<Json<SearchResponse>, ApiError> {
    check_user("user_id", &req.user_id)?;
    fields::text("query", &req.query)?;
    fields::json("filter", &req.filter)?;
    if !(1..=100).contains(&req.k) {
        return Err(ApiError::field("k", format!("{} is not in 1..=100", req.k)));
    }
    if let Some(m) = req.min_score {
        if !(-1.0..=1.0).contains(&m) {
            return Err(ApiError::field(
                "min_score",
                format!("{m} is not in -1..=1"),
            ));
        }
    }
    // The batched query embedder embeds with the tenant's embedder (the
    // folder's, or the one a re-embed moved it to), in one pass with the
    // other queries of that model (`search_text` embeds again if the
    // model moves in between).
    let e = t.embedder();
    let q = s
        .queries
        .embed_with(t.name(), e.clone(), req.query.clone())
        .await?;
    let model = e.model_id().to_string();
    t.blocking(move |t| {
        let query = (model.as_str(), req.query.as_str(), q.as_slice());
        let mut results = t.search_text(&req.user_id, query, req.k, &req.filter)?;
        if let Some(m) = req.min_score {
            // Hits come best first: cut at the first one below the bar.
            results.retain(|h| h.score >= m);
        }
        Ok(SearchResponse { results })
    })
    .await
    .map(Json)
}

/// A record's ops (`/v1/memories/{id}/history`, and `/ui/api` reads it too).
#[utoipa::path(
    get,
    path = "/v1/memories/{id}/history",
    operation_id = "memoryHistory",
    summary = "A memory's ops, with provenance",
    params(("id" = String, Path, description = "The memory's id")),
    responses((status = 200, description = "OK", body = HistoryResponse), V1Errors, NotFound),
    security(("bearer" = []))
)]
pub(crate) async fn history(
    Extension(t): Extension<Arc<Tenant>>,
    Path(id): Path<String>,
) -> Result<Json<HistoryResponse>, ApiError> {
    t.blocking(move |t| t.history(&id)).await.map(Json)
}

/// Memories a listing page holds when the request names no `limit`: a
/// user with a million memories is never sent in one answer.
pub const DEFAULT_PAGE: usize = 100;

/// Query of `GET /v1/users/{user_id}/memories`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct AsOf {
    /// Unix milliseconds: memory as it stood then.
    as_of: Option<u64>,
    /// Page size (default 100, `DEFAULT_PAGE`); the answer has next_cursor
    /// when more follow.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page: the memories after that id.
    #[param(min_length = 1, max_length = 256)]
    cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/users/{user_id}/memories",
    operation_id = "userMemories",
    summary = "A user's memories, now or as of a time",
    params(
        ("user_id" = String, Path, description = "The user", pattern = "^[A-Za-z0-9_.@-]{1,128}$"),
        AsOf,
    ),
    responses((status = 200, description = "OK", body = UserMemories), V1Errors),
    security(("bearer" = []))
)]
async fn user_memories(
    Extension(t): Extension<Arc<Tenant>>,
    Path(user): Path<String>,
    q: Result<Query<AsOf>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<UserMemories>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::field("query", e.body_text()))?;
    check_user("user_id", &user)?;
    if let Some(l) = q.limit {
        if !(1..=1000).contains(&l) {
            return Err(ApiError::field("limit", format!("{l} is not in 1..=1000")));
        }
    }
    if let Some(c) = &q.cursor {
        if c.is_empty() || c.len() > 256 {
            return Err(ApiError::field("cursor", "must be 1-256 characters"));
        }
    }
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    t.blocking(move |t| t.user_memories(&user, q.as_of, limit, q.cursor.as_deref()))
        .await
        .map(Json)
}

#[utoipa::path(
    delete,
    path = "/v1/users/{user_id}",
    operation_id = "deleteUser",
    summary = "Remove everything of a user from every table, index and log, and verify it",
    params(
        ("user_id" = String, Path, description = "The user", pattern = "^[A-Za-z0-9_.@-]{1,128}$"),
        Idempotency,
    ),
    responses(
        (status = 200, description = "OK", body = UserDeleted),
        V1Errors,
        NotFound,
        AnswerPurged,
    ),
    security(("bearer" = []))
)]
async fn delete_user(
    State(s): State<Arc<ServiceState>>,
    Extension(t): Extension<Arc<Tenant>>,
    Path(user): Path<String>,
) -> Result<Json<UserDeleted>, ApiError> {
    check_user("user_id", &user)?;
    let u = user.clone();
    let done = t.blocking_write(move |t| t.delete_user(&u)).await?;
    // Remembered answers holding the user's text go too (crate::idem).
    s.idem.purge(t.name(), &crate::idem::Deleted::User(&user));
    Ok(Json(done))
}

#[utoipa::path(
    post,
    path = "/v1/events",
    operation_id = "events",
    summary = "Show a user's interactions to a policy (observe)",
    params(Idempotency),
    request_body = EventsRequest,
    responses(
        (status = 200, description = "OK", body = EventsResponse),
        V1Errors,
        QuotaExceeded,
        AnswerPurged,
        LlmFailed,
    ),
    security(("bearer" = []))
)]
async fn events(
    State(s): State<Arc<ServiceState>>,
    Extension(t): Extension<Arc<Tenant>>,
    ApiJson(req): ApiJson<EventsRequest>,
) -> Result<Json<EventsResponse>, ApiError> {
    check_user("user_id", &req.user_id)?;
    check_batch(&s, "events", req.events.len())?;
    check_policy(req.policy.as_deref())?;
    for (i, e) in req.events.iter().enumerate() {
        fields::item(&format!("events[{i}].item"), &e.item)?;
        if let Some(r) = e.rating {
            if !r.is_finite() {
                return Err(ApiError::field(
                    format!("events[{i}].rating"),
                    "must be finite",
                ));
            }
        }
    }
    t.blocking_loop(move |t| t.events(req)).await.map(Json)
}

#[utoipa::path(
    post,
    path = "/v1/recommend",
    operation_id = "recommend",
    summary = "Rank candidates with a policy; returns the evidence and a decision id",
    params(Idempotency),
    request_body = RecommendRequest,
    responses(
        (status = 200, description = "OK", body = RecommendResponse),
        V1Errors,
        QuotaExceeded,
        AnswerPurged,
        LlmFailed,
    ),
    security(("bearer" = []))
)]
async fn recommend(
    State(s): State<Arc<ServiceState>>,
    Extension(t): Extension<Arc<Tenant>>,
    ApiJson(req): ApiJson<RecommendRequest>,
) -> Result<Json<RecommendResponse>, ApiError> {
    check_user("user_id", &req.user_id)?;
    check_batch(&s, "candidates", req.candidates.len())?;
    check_policy(req.policy.as_deref())?;
    for (i, c) in req.candidates.iter().enumerate() {
        fields::item(&format!("candidates[{i}]"), c)?;
    }
    if let Some(ins) = &req.instruction {
        fields::at_most("instruction", ins, fields::INSTRUCTION_BYTES)?;
    }
    if req.k == Some(0) {
        return Err(ApiError::field("k", "must be at least 1"));
    }
    t.blocking_loop(move |t| t.recommend(req)).await.map(Json)
}

#[utoipa::path(
    post,
    path = "/v1/feedback",
    operation_id = "feedback",
    summary = "An outcome for an earlier decision (also after a restart)",
    params(Idempotency),
    request_body = FeedbackRequest,
    responses(
        (status = 200, description = "OK", body = FeedbackResponse),
        V1Errors,
        NotFound,
        QuotaExceeded,
        AnswerPurged,
        LlmFailed,
    ),
    security(("bearer" = []))
)]
async fn feedback(
    Extension(t): Extension<Arc<Tenant>>,
    ApiJson(req): ApiJson<FeedbackRequest>,
) -> Result<Json<FeedbackResponse>, ApiError> {
    if let Some(id) = &req.item_id {
        fields::item_id("item_id", id)?;
    }
    fields::objectives("objectives", &req.objectives)?;
    if !req.reward.is_finite() || req.objectives.values().any(|v| !v.is_finite()) {
        return Err(ApiError::field(
            "reward",
            "reward and objectives must be finite",
        ));
    }
    t.blocking_loop(move |t| t.feedback(req)).await.map(Json)
}

/// Answer of `/healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: &'static str,
}

/// Answer of `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    /// False while shutting down.
    pub ready: bool,
    /// Tenants with a key (each opened on its first request).
    pub tenants: usize,
    /// Tenants open now (`serve.max_open_tenants` bounds them; 0: none).
    pub open_tenants: usize,
    /// Memories indexed in the open tenants, all together.
    pub memories: usize,
    /// How long the service took to start (ms).
    pub ready_ms: u64,
}

#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    summary = "Liveness",
    responses((status = 200, description = "OK", body = Health))
)]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    summary = "Readiness (503 while shutting down)",
    responses(
        (status = 200, description = "OK", body = Ready),
        (status = 503, description = "Shutting down", body = Ready),
    )
)]
async fn readyz(State(s): State<Arc<ServiceState>>) -> Response {
    let ready = !s.shutting_down.load(Ordering::SeqCst);
    let open = s.tenants.open_tenants();
    let memories: usize = open.iter().map(|(_, t)| t.index_len()).sum();
    let body = Ready {
        ready,
        tenants: s.keys.tenants().len(),
        open_tenants: open.len(),
        memories,
        ready_ms: s.ready_ms,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    summary = "Prometheus metrics",
    description = "Prometheus text. Open by default; when `serve.metrics_key` is set, send \
        `Authorization: Bearer <metrics_key>` (401 otherwise).",
    responses(
        (status = 200, description = "Text exposition format", body = String, content_type = "text/plain"),
        (status = 401, description = "serve.metrics_key is set and was not sent", body = ErrorBody),
    )
)]
async fn metrics(State(s): State<Arc<ServiceState>>, headers: axum::http::HeaderMap) -> Response {
    if let Some(want) = &s.shared.config.metrics_key {
        let got = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        // Compare digests, so that the time taken says nothing of the key.
        let same =
            got.is_some_and(|g| crate::auth::hash_key(g) == crate::auth::hash_key(want.trim()));
        if !same {
            return ApiError::UnknownKey.into_response();
        }
    }
    let mut gauges = Vec::new();
    let cfg = &s.shared.config;
    // Per-tenant series of the open tenants only: a closed tenant's
    // counts would need its store read.
    let open = s.tenants.open_tenants();
    let stats = s.tenants.stats();
    gauges.push(("evomem_tenants_open", String::new(), stats.open as f64));
    gauges.push((
        "evomem_tenants_keyed",
        String::new(),
        s.keys.tenants().len() as f64,
    ));
    gauges.push((
        "evomem_resident_bytes",
        String::new(),
        stats.resident_bytes as f64,
    ));
    gauges.push((
        "evomem_budget_open_tenants",
        String::new(),
        cfg.max_open_tenants as f64,
    ));
    gauges.push((
        "evomem_budget_resident_bytes",
        String::new(),
        cfg.max_resident_bytes as f64,
    ));
    for (name, t) in &open {
        let label = format!("tenant=\"{name}\"");
        gauges.push((
            "evomem_tenant_resident_bytes",
            label.clone(),
            t.resident_bytes() as f64,
        ));
        gauges.push(("evomem_index_vectors", label.clone(), t.index_len() as f64));
        // Quotas (0: none) and what each tenant holds against them.
        gauges.push((
            "evomem_tenant_memories",
            label.clone(),
            t.index_len() as f64,
        ));
        gauges.push((
            "evomem_tenant_bytes",
            label.clone(),
            t.stored_bytes() as f64,
        ));
        gauges.push((
            "evomem_tenant_quota_memories",
            label.clone(),
            cfg.tenant_max_memories as f64,
        ));
        gauges.push((
            "evomem_tenant_quota_bytes",
            label,
            cfg.tenant_max_bytes as f64,
        ));
    }
    let acc = s.shared.hub.accounting().totals();
    gauges.push(("evomem_llm_role_runs_total", String::new(), acc.runs as f64));
    gauges.push(("evomem_llm_calls_total", String::new(), acc.calls as f64));
    gauges.push((
        "evomem_llm_fallbacks_total",
        String::new(),
        acc.fallbacks as f64,
    ));
    gauges.push((
        "evomem_keys_reload_failures_total",
        String::new(),
        s.keys.reload_failures() as f64,
    ));
    gauges.push(("evomem_up", String::new(), 1.0));
    let text = s.shared.metrics.render(&gauges);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        Body::from(text),
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    responses(
        (status = 200, description = "OpenAPI 3.1", body = Object),
        (status = 500, description = "The document could not be made", body = ErrorBody),
    )
)]
/// The generated document ([`crate::openapi::json`], made once).
async fn openapi() -> Result<Response, ApiError> {
    let text = crate::openapi::json().map_err(ApiError::Internal)?;
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(text),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::timed;

    /// The inspector's API runs under the request timeout as `/v1` does
    /// (its reads wait for the same permits); the probes and pages do not.
    #[test]
    fn the_request_timeout_covers_the_api_and_the_inspectors_api() {
        for route in [
            "/v1/memories",
            "/v1/users/{user_id}/memories",
            "/ui/api/users/{user_id}/ops",
            "/ui/api/decisions/{id}",
        ] {
            assert!(timed(route), "{route} is not timed");
        }
        for route in ["/healthz", "/readyz", "/metrics", "/ui", "/ui/{*path}"] {
            assert!(!timed(route), "{route} is timed");
        }
    }
}
