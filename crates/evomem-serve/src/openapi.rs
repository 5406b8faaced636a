//! The OpenAPI document of the service, made from the code rather than kept
//! by hand, so that it cannot drift from the router.
//!
//! Every documented route is a handler with a `#[utoipa::path]` annotation
//! (method, path, parameters, bodies, answers), routed by utoipa-axum's
//! `routes!` at the path its annotation names: a documented route is a
//! routed one by construction, and the request and answer bodies' schemas
//! are derived from their Rust types (`types.rs`, [`crate::error::ErrorBody`],
//! the inspector's shapes in `ui_schema.rs`). `/mcp`, a tower service rather
//! than a handler, is documented by [`mcp`] here. The pages of `/ui` are
//! the only routes left out of the document.
//!
//! Here: the answers many operations share (the error sets below, each a
//! type the annotations name), the `Idempotency-Key` header, the document's
//! `info` and bearer scheme, and [`json`], the document as served at
//! `/openapi.json` and committed as `crates/evomem-serve/openapi.json` (the
//! test `openapi_json_is_up_to_date` compares the two).

use crate::error::ErrorBody;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, InfoBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Type as SchemaType,
};
use utoipa::{IntoParams, IntoResponses, PartialSchema, ToSchema};

/// The document's `info.description`.
const DESCRIPTION: &str = "The evomem memory engine as an HTTP service. Every /v1 route needs \
`Authorization: Bearer <key>`; the key's tenant scopes everything. Users inside a tenant are not \
a trust boundary: any key of a tenant may read and write every user of that tenant (the \
application behind the key decides which user it acts for). Overload is answered, never queued \
without bound: 429 `rate_limited` (the rate limit charges one token per request, one per batch \
entry beyond the first, and one per `serve.rate_limit_bytes_per_token` bytes of body) and 503 \
`overloaded` / `timeout` / `write_race` / `tenant_unavailable` / `shutting_down`, each with `Retry-After` in seconds. \
A 500 carries a `request_id` to quote; its details go to the service log only. Deletes are soft \
where noted: DELETE /v1/memories/{id} forgets a memory (it leaves search, get and listings) but \
its text stays in the op log, its history and as_of listings; DELETE /v1/users/{user_id} is \
hard: it removes the user's text from the log, the records, the index and the file. The /ui/api \
routes (tag `inspector`) are the reads of the web inspector's pages at /ui, behind the same key \
(but /ui/api/mode); their bad query fields answer 422 like /v1. This document is generated from \
the service's code (crates/evomem-serve/src/openapi.rs).";

/// The name of the bearer scheme the operations' `security` names.
pub(crate) const BEARER: &str = "bearer";

/// An answer with the [`ErrorBody`] shape.
fn error(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(ErrorBody::name())))
            .build(),
    )
}

/// [`error`] with a `Retry-After` header.
fn retry_after(description: &str) -> ResponseBuilder {
    error(description).header(
        "Retry-After",
        HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(SchemaType::Integer))
            .description(Some("Seconds to wait before retrying"))
            .build(),
    )
}

/// Status code and answer pairs, as [`IntoResponses`] returns them.
fn answers(
    list: impl IntoIterator<Item = (u16, ResponseBuilder)>,
) -> BTreeMap<String, RefOr<Response>> {
    list.into_iter()
        .map(|(status, r)| (status.to_string(), RefOr::T(r.build())))
        .collect()
}

/// The errors every `/v1` operation may answer: a bad body or field, no
/// key, a refused op, too large, rate limited, failed, overloaded.
pub(crate) struct V1Errors;

impl IntoResponses for V1Errors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        answers([
            (400, error("Malformed JSON body")),
            (401, error("Missing or unknown API key")),
            (409, error("An op was refused (a concurrent change)")),
            (413, error("Body or batch too large")),
            (422, error("A field is invalid")),
            (429, retry_after("Rate limit exceeded")),
            (
                500,
                error("The service failed; the body carries a request_id (no paths, no SQL)"),
            ),
            (
                503,
                retry_after(
                    "Overloaded (a queue is full), timed out, lost a write race, or shutting \
                     down; see Retry-After",
                ),
            ),
        ])
    }
}

/// 404 of a `/v1` operation on a memory, user or decision.
pub(crate) struct NotFound;

impl IntoResponses for NotFound {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        answers([(
            404,
            error("No such memory, user or decision in this tenant"),
        )])
    }
}

/// 410 of a write that takes an `Idempotency-Key` ([`Idempotency`]).
pub(crate) struct AnswerPurged;

impl IntoResponses for AnswerPurged {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        answers([(
            410,
            error(
                "The answer remembered for this Idempotency-Key held data deleted since \
                 (`answer_purged`), or the write was committed before by another instance \
                 or before a restart (`applied_before`); the write is not run again",
            ),
        )])
    }
}

/// 403 of a write that may store more than the tenant's quota.
pub(crate) struct QuotaExceeded;

impl IntoResponses for QuotaExceeded {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        answers([(
            403,
            error(
                "The write would take the tenant past `serve.tenant_max_memories` or \
                 `serve.tenant_max_bytes` (`quota_exceeded`)",
            ),
        )])
    }
}

/// 502 of an operation whose policy may call an LLM.
pub(crate) struct LlmFailed;

impl IntoResponses for LlmFailed {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        answers([(
            502,
            error("An LLM the policy called failed (`llm_error`); the body carries a request_id"),
        )])
    }
}

/// The errors of the inspector's keyed reads (`/ui/api`).
pub(crate) struct UiErrors;

impl IntoResponses for UiErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        answers([
            (401, error("Missing or unknown API key")),
            (
                422,
                error(
                    "A query field is invalid (unknown field, bad number, limit out of \
                     1..=1000, `at` past the user's last op)",
                ),
            ),
            (429, retry_after("Rate limit exceeded")),
            (500, error("Store failure")),
            (503, retry_after("Overloaded or shutting down")),
        ])
    }
}

/// 404 of an inspector read of one thing.
pub(crate) struct UiNotFound;

impl IntoResponses for UiNotFound {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        answers([(
            404,
            error("No such user, decision, op or memory in this tenant"),
        )])
    }
}

/// The `Idempotency-Key` header of the `/v1` writes ([`crate::idem`]).
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub(crate) struct Idempotency {
    /// Optional. A retry with the same key (same method, path and body)
    /// gets the first answer instead of writing again; 409 `in_progress`
    /// while the first still runs; 422 when the key was used for another
    /// request; 410 `answer_purged` when the remembered answer held text
    /// deleted since (a hard delete or a user deletion), and the write is
    /// not run again. Answers are remembered per process, within
    /// `serve.idempotency_tenant_bytes` per tenant; a 5xx answer is not.
    /// The key itself is stored with the write's commit (kept a day): a
    /// retry on another instance, or after a restart, gets 410
    /// `applied_before` and the write is not run again.
    #[param(rename = "Idempotency-Key", min_length = 1, max_length = 128)]
    idempotency_key: Option<String>,
}

/// `/mcp`, for the document only: `/mcp` is routed to evomem-mcp's
/// service by `api::router` (the OpenAPI tests check that it answers and
/// that nothing else is routed undocumented).
#[utoipa::path(
    post,
    path = "/mcp",
    operation_id = "mcp",
    summary = "Model Context Protocol (streamable HTTP)",
    description = "The MCP server of docs/mcp.md over MCP's streamable HTTP transport, \
        stateless and answered as JSON: initialize, tools/list, tools/call, \
        resources/templates/list and resources/read as JSON-RPC 2.0 messages. Each tool call is \
        one /v1 request made with the caller's key, under /v1's body limits, rate limits and \
        quotas. A tool that fails answers 200 with a result whose isError is true; a malformed \
        message answers a JSON-RPC error.",
    tag = "mcp",
    request_body(
        content = Object,
        content_type = "application/json",
        description = "A JSON-RPC 2.0 request or notification"
    ),
    responses(
        (status = 200, description = "A JSON-RPC 2.0 response", body = Object),
        (status = 202, description = "A notification, accepted"),
        (status = 401, description = "No key, or an unknown one", body = ErrorBody),
        (status = 413, description = "Body over serve.max_body_bytes"),
        (status = 503, description = "Shutting down", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
#[allow(dead_code)]
pub(crate) fn mcp() {}

/// The paths documented without a handler of their own ([`mcp`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(mcp))]
struct Unrouted;

/// The document: the documented routes' paths and schemas (see
/// [`crate::api::Documented`]), `/mcp`, the error schema, `info` and the
/// bearer scheme.
pub fn document() -> OpenApi {
    let mut doc = crate::api::documented().into_openapi();
    doc.merge(<Unrouted as utoipa::OpenApi>::openapi());
    doc.info = InfoBuilder::new()
        .title("evomem")
        .version("1")
        .description(Some(DESCRIPTION))
        .build();
    let components = doc.components.get_or_insert_with(Default::default);
    components
        .schemas
        .insert(ErrorBody::name().into_owned(), ErrorBody::schema());
    components.security_schemes.insert(
        BEARER.to_string(),
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    doc
}

/// `v` with every object's keys in order, so that the text is stable
/// whatever order the maps were built in.
fn sorted(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            let mut pairs: Vec<(String, serde_json::Value)> = m.into_iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(pairs.into_iter().map(|(k, x)| (k, sorted(x))).collect())
        }
        serde_json::Value::Array(a) => {
            serde_json::Value::Array(a.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

/// The document as text: pretty-printed, keys sorted, a final newline; the
/// text of the committed `openapi.json`.
pub fn render() -> Result<String, serde_json::Error> {
    let value = serde_json::to_value(document())?;
    let mut text = serde_json::to_string_pretty(&sorted(value))?;
    text.push('\n');
    Ok(text)
}

/// [`render`], made once per process (what `/openapi.json` answers).
pub fn json() -> Result<&'static str, String> {
    static TEXT: OnceLock<Result<String, String>> = OnceLock::new();
    TEXT.get_or_init(|| render().map_err(|e| e.to_string()))
        .as_ref()
        .map(String::as_str)
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::collections::BTreeSet;

    /// The paths an axum router routes. Axum lists them only in its
    /// `Debug` text (`RouteId(n): "/path"`); the count check below fails
    /// loudly if that text changes shape.
    fn routed(router: &impl std::fmt::Debug) -> BTreeSet<String> {
        let text = format!("{router:?}");
        text.split("RouteId(")
            .skip(1)
            .filter_map(|rest| {
                let (_, after) = rest.split_once("): \"")?;
                after.split_once('"').map(|(path, _)| path.to_string())
            })
            .collect()
    }

    /// Every path the service routes is documented, but the inspector's
    /// pages (the reverse, every documented operation is routed, is the
    /// integration test `openapi_matches_the_router`, which calls them).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_routed_path_is_documented() {
        use crate::auth::KeyRing;
        use crate::config::ServeConfig;
        use crate::tenant::Shared;
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            Arc::new(evomem_embed::HashingEmbedder::new(16)),
        );
        let service =
            crate::Service::start(shared, KeyRing::from_plain([("evk_doc_test", "demo")])).unwrap();
        let all = routed(&service.router());
        let pages = routed(&crate::ui::pages());
        assert!(all.len() > 20 && pages.len() >= 5, "{all:?} {pages:?}");
        let api: BTreeSet<String> = all.difference(&pages).cloned().collect();
        let documented: BTreeSet<String> = super::document().paths.paths.keys().cloned().collect();
        let undocumented: Vec<&String> = api.difference(&documented).collect();
        assert!(
            undocumented.is_empty(),
            "routed but not in the OpenAPI document: {undocumented:?}"
        );
        let unrouted: Vec<&String> = documented.difference(&api).collect();
        assert!(
            unrouted.is_empty(),
            "documented but not routed: {unrouted:?}"
        );
    }

    /// The committed `openapi.json` is the generated document. After a
    /// change to a route or a type, bless it with
    /// `EVOMEM_BLESS=1 cargo test -p evomem-serve openapi_json_is_up_to_date`.
    #[test]
    fn openapi_json_is_up_to_date() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
        let want = super::render().unwrap();
        if std::env::var_os("EVOMEM_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have == want {
            return;
        }
        let mut have_lines = have.lines();
        let mut want_lines = want.lines();
        let mut line = 1;
        loop {
            match (have_lines.next(), want_lines.next()) {
                (Some(h), Some(w)) if h == w => line += 1,
                (h, w) => panic!(
                    "{} differs from the generated document at line {line}:\n  committed: {}\n  generated: {}\n\
                     Rerun with EVOMEM_BLESS=1 to rewrite it: \
                     EVOMEM_BLESS=1 cargo test -p evomem-serve openapi_json_is_up_to_date",
                    path.display(),
                    h.unwrap_or("(end of file)"),
                    w.unwrap_or("(end of file)"),
                ),
            }
        }
    }
}
