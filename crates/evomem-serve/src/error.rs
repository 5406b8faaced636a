//! The service's errors: one enum, stable machine-readable codes, and the
//! HTTP status of each decided in one exhaustive match ([`ApiError::status`]),
//! so that adding a variant without deciding its status does not compile.
//!
//! Every error leaves the service as `{"error": {"code": "...", "message": "..."}}`.
//! Messages name the field, the limit or the id that was wrong.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use evomem_store::StoreError;
use thiserror::Error;

/// An error answered to a client.
#[derive(Debug, Error)]
pub enum ApiError {
    /// No usable `Authorization: Bearer` header.
    #[error("missing or malformed Authorization header: send `Authorization: Bearer <key>`")]
    Unauthenticated,
    /// The key is not one of the configured keys.
    #[error("unknown API key")]
    UnknownKey,
    /// The body is not valid JSON for this endpoint.
    #[error("bad request body: {0}")]
    BadBody(String),
    /// A field has a value outside what the endpoint accepts.
    #[error("field `{field}`: {message}")]
    InvalidField {
        /// The field, as a JSON path (`texts[3]`, `k`).
        field: String,
        /// What was wrong.
        message: String,
    },
    /// The body is larger than `serve.max_body_bytes`.
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// A batch has more entries than `serve.max_batch`.
    #[error("field `{field}`: {got} entries exceed the batch limit of {limit}")]
    BatchTooLarge {
        /// The batch field.
        field: String,
        /// Entries sent.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// The key sent more requests than its rate allows.
    #[error("rate limit exceeded: retry after {retry_after_ms} ms")]
    RateLimited {
        /// When a request would be accepted again.
        retry_after_ms: u64,
    },
    /// No such memory, decision or user in this tenant.
    #[error("{what} `{id}` not found")]
    NotFound {
        /// `memory`, `decision`, `user`, `route`.
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// The tenant would hold more than its quota
    /// (`serve.tenant_max_memories`, `serve.tenant_max_bytes`).
    #[error("tenant `{tenant}` holds {used} {what}; adding {adding} would pass its quota of {quota} (serve.tenant_max_{what})")]
    QuotaExceeded {
        /// The tenant.
        tenant: String,
        /// `memories` or `bytes`.
        what: &'static str,
        /// Held now.
        used: u64,
        /// What the request would add.
        adding: u64,
        /// The quota.
        quota: u64,
    },
    /// An LLM role failed (the rank role, or a role a policy runs). Its
    /// words (a provider's answer, which may echo the prompt or name the
    /// account) go to the service log only; the client gets a request id.
    #[error("policy `{policy}`: LLM role `{role}` failed: {message}")]
    Llm {
        /// The spec asked for.
        policy: String,
        /// The role that failed.
        role: String,
        /// The error, for the log.
        message: String,
    },
    /// The policy cannot serve this endpoint.
    #[error("policy `{policy}`: {message}")]
    Policy {
        /// The spec asked for.
        policy: String,
        /// Why.
        message: String,
    },
    /// A request with the same `Idempotency-Key` is still running.
    #[error("a request with this Idempotency-Key is still running; retry to get its answer")]
    InProgress,
    /// The answer remembered for this `Idempotency-Key` held text that was
    /// deleted since (a hard delete or a user deletion); the write ran
    /// once and is not run again.
    #[error("the answer to this Idempotency-Key held data deleted since; the write ran once and is not run again")]
    AnswerPurged,
    /// This `Idempotency-Key`'s write was committed before, by another
    /// instance or before a restart (crate::idem); it is not run again.
    #[error("the write with this Idempotency-Key was applied before (by another instance, or before a restart) and is not run again; its answer stayed with the process that ran it")]
    AppliedBefore,
    /// The request's tenant could not be opened because its store did not
    /// answer (a database down or out of connections): retry later.
    #[error("the tenant could not be opened now (its store did not answer); retry after {retry_after_s} s")]
    TenantUnavailable {
        /// Seconds after which a retry is sensible.
        retry_after_s: u64,
    },
    /// A queue is full: the request was not taken, retry later.
    #[error("overloaded: the {queue} queue is full; retry after {retry_after_s} s")]
    Overloaded {
        /// Which queue.
        queue: &'static str,
        /// Seconds after which a retry is sensible.
        retry_after_s: u64,
    },
    /// The request ran past `serve.request_timeout_s`. A write may still
    /// commit: retry it with the same `Idempotency-Key`.
    #[error("request timed out after {seconds} s")]
    Timeout {
        /// The limit.
        seconds: u64,
    },
    /// The service is draining for shutdown.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// The store failed (disk, database) or refused an op.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The embedder failed.
    #[error("embedding failed: {0}")]
    Embed(String),
    /// Anything else that is the service's fault.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// A field error.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidField {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The HTTP status and the stable code of this error: the one place that
    /// decides them.
    pub fn status(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ApiError::UnknownKey => (StatusCode::UNAUTHORIZED, "unknown_key"),
            ApiError::BadBody(_) => (StatusCode::BAD_REQUEST, "bad_body"),
            ApiError::InvalidField { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
            ApiError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::BatchTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "batch_too_large"),
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Policy { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "policy_error"),
            ApiError::Llm { .. } => (StatusCode::BAD_GATEWAY, "llm_error"),
            ApiError::QuotaExceeded { .. } => (StatusCode::FORBIDDEN, "quota_exceeded"),
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            ApiError::Overloaded { .. } => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            ApiError::TenantUnavailable { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "tenant_unavailable")
            }
            ApiError::InProgress => (StatusCode::CONFLICT, "in_progress"),
            ApiError::AnswerPurged => (StatusCode::GONE, "answer_purged"),
            ApiError::AppliedBefore => (StatusCode::GONE, "applied_before"),
            ApiError::Timeout { .. } => (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
            ApiError::Store(StoreError::Rejected { .. }) => (StatusCode::CONFLICT, "conflict"),
            ApiError::Store(StoreError::Conflict { .. } | StoreError::DuplicateKey { .. }) => {
                (StatusCode::SERVICE_UNAVAILABLE, "write_race")
            }
            ApiError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store_error"),
            ApiError::Embed(_) => (StatusCode::INTERNAL_SERVER_ERROR, "embed_error"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// The stable code alone.
    pub fn code(&self) -> &'static str {
        self.status().1
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status();
        // The service's own failures: the message (which may hold a file
        // path or a database's words) goes to the log only; the client gets
        // an id to quote.
        let hide = match &self {
            ApiError::Store(
                StoreError::Rejected { .. }
                | StoreError::Conflict { .. }
                | StoreError::DuplicateKey { .. },
            ) => false,
            ApiError::Store(_) | ApiError::Embed(_) | ApiError::Internal(_) => true,
            ApiError::Llm { .. } => true,
            _ => false,
        };
        let error = match hide {
            true => {
                let id = request_id();
                tracing::error!(code, request_id = %id, "{self}");
                ErrorDetail {
                    code,
                    message: format!("the service failed ({code}); quote request id {id}"),
                    request_id: Some(id),
                }
            }
            false => ErrorDetail {
                code,
                message: self.to_string(),
                request_id: None,
            },
        };
        let body = ErrorBody { error };
        let mut resp = (status, axum::Json(body)).into_response();
        let retry = match &self {
            ApiError::RateLimited { retry_after_ms } => Some(retry_after_ms.div_ceil(1000).max(1)),
            ApiError::Overloaded { retry_after_s, .. }
            | ApiError::TenantUnavailable { retry_after_s } => Some((*retry_after_s).max(1)),
            ApiError::Timeout { .. }
            | ApiError::InProgress
            | ApiError::ShuttingDown
            | ApiError::Store(StoreError::Conflict { .. } | StoreError::DuplicateKey { .. }) => {
                Some(1)
            }
            _ => None,
        };
        if let Some(secs) = retry {
            if let Ok(v) = axum::http::HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

/// The body of every error answer (`Error` in the OpenAPI document).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// What went wrong.
    #[schema(inline)]
    pub error: ErrorDetail,
}

/// The `error` of an [`ErrorBody`].
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// Stable: unauthenticated, unknown_key, bad_body, invalid_field,
    /// body_too_large, batch_too_large, rate_limited, not_found,
    /// policy_error, llm_error, quota_exceeded, in_progress, answer_purged,
    /// applied_before, conflict, overloaded, timeout, write_race,
    /// tenant_unavailable, shutting_down, store_error, embed_error,
    /// internal.
    pub code: &'static str,
    /// For people: what was wrong, naming the field or the limit.
    pub message: String,
    /// Only on 500 and 502: quote it; the service log holds the details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// A random id for one failed request, logged with the failure.
fn request_id() -> String {
    let mut b = [0u8; 8];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
    hex::encode(b)
}

/// Errors that stop the service from starting.
#[derive(Debug, Error)]
pub enum ServeError {
    /// A setting is invalid; the message names it.
    #[error("serve settings: {0}")]
    Config(String),
    /// The keys file cannot be read or parsed.
    #[error("keys file {path}: {message}")]
    Keys {
        /// The file.
        path: String,
        /// What was wrong (with the line where the parser gives one).
        message: String,
    },
    /// A tenant's store cannot be opened.
    #[error("tenant `{tenant}`: {source}")]
    Store {
        /// The tenant.
        tenant: String,
        /// Why.
        source: StoreError,
    },
    /// Rebuilding a tenant's index or catalog from its store failed.
    #[error("tenant `{tenant}`: {message}")]
    Load {
        /// The tenant.
        tenant: String,
        /// Why.
        message: String,
    },
    /// Binding or serving failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
