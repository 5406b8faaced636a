//! Where a tool call's `/v1` request goes: the service's router in process
//! ([`RouterBackend`]) or a running service over HTTP ([`HttpBackend`]).
//! Both send the same request, with the same key and headers, and hand
//! back the status and the JSON body unchanged.

use crate::{V1Call, V1Reply};
use axum::body::Body;
use axum::http::{header, Request};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use tower::ServiceExt as _;

/// The largest `/v1` answer read back (a listing page is at most 1,000
/// memories of at most 64 KiB each).
pub const MAX_REPLY_BYTES: usize = 128 << 20;

/// A `/v1` request that got no answer (the service could not be reached,
/// or the answer could not be read). A `/v1` error status is not one: it
/// is an answer.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The request could not be sent or its answer read.
    #[error("the evomem service could not be reached at {url}: {message}")]
    Unreachable {
        /// Where it was sent.
        url: String,
        /// Why it failed.
        message: String,
    },
    /// The request could not be built (a header value the key cannot be).
    #[error("the request could not be built: {0}")]
    Request(String),
}

/// A boxed future, so that backends can be used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that answers `/v1` requests.
pub trait V1: Send + Sync + 'static {
    /// Send `call` with the bearer key `key` (`None`: the backend's own).
    fn call<'a>(
        &'a self,
        call: V1Call,
        key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<V1Reply, BackendError>>;
}

fn parse_body(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// The service's router, called in process: the request passes through the
/// same middleware as one from the network (authentication, rate limits,
/// body limits, idempotency, metrics).
#[derive(Clone)]
pub struct RouterBackend {
    router: axum::Router,
    key: Option<String>,
}

impl RouterBackend {
    /// Requests to `router`, with `key` when the caller names none.
    pub fn new(router: axum::Router, key: Option<String>) -> Self {
        Self { router, key }
    }
}

impl V1 for RouterBackend {
    fn call<'a>(
        &'a self,
        call: V1Call,
        key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<V1Reply, BackendError>> {
        Box::pin(async move {
            let mut req = Request::builder()
                .method(call.method.as_str())
                .uri(&call.path)
                .header(header::CONTENT_TYPE, "application/json");
            if let Some(k) = key.or(self.key.as_deref()) {
                req = req.header(header::AUTHORIZATION, format!("Bearer {k}"));
            }
            if let Some(k) = &call.idempotency_key {
                req = req.header("idempotency-key", k);
            }
            let body = match &call.body {
                Some(v) => Body::from(v.to_string()),
                None => Body::empty(),
            };
            let req = req
                .body(body)
                .map_err(|e| BackendError::Request(e.to_string()))?;
            let resp = self
                .router
                .clone()
                .oneshot(req)
                .await
                .map_err(|e| BackendError::Request(e.to_string()))?;
            let status = resp.status().as_u16();
            let bytes = axum::body::to_bytes(resp.into_body(), MAX_REPLY_BYTES)
                .await
                .map_err(|e| BackendError::Unreachable {
                    url: call.path.clone(),
                    message: e.to_string(),
                })?;
            Ok(V1Reply {
                status,
                body: parse_body(&bytes),
            })
        })
    }
}

/// A running `evomem serve` over HTTP.
#[derive(Clone)]
pub struct HttpBackend {
    client: reqwest::Client,
    base: String,
    key: String,
}

impl HttpBackend {
    /// Requests to the service at `base` (`http://host:port`) with `key`.
    pub fn new(base: &str, key: String) -> Result<Self, BackendError> {
        // A service that does not accept the connection is an error within
        // seconds; an accepted request waits for the service's own
        // `serve.request_timeout_s`.
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| BackendError::Request(e.to_string()))?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_string(),
            key,
        })
    }
}

impl V1 for HttpBackend {
    fn call<'a>(
        &'a self,
        call: V1Call,
        key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<V1Reply, BackendError>> {
        Box::pin(async move {
            let url = format!("{}{}", self.base, call.path);
            let method = reqwest::Method::from_bytes(call.method.as_str().as_bytes())
                .map_err(|e| BackendError::Request(e.to_string()))?;
            let mut req = self
                .client
                .request(method, &url)
                .bearer_auth(key.unwrap_or(&self.key));
            if let Some(k) = &call.idempotency_key {
                req = req.header("idempotency-key", k);
            }
            if let Some(b) = &call.body {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.to_string());
            }
            let unreachable = |e: reqwest::Error| BackendError::Unreachable {
                url: url.clone(),
                message: e.to_string(),
            };
            let resp = req.send().await.map_err(unreachable)?;
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.map_err(unreachable)?;
            Ok(V1Reply {
                status,
                body: parse_body(&bytes),
            })
        })
    }
}
