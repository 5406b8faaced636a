//! evomem's memory for agents over the Model Context Protocol.
//!
//! One MCP server ([`EvomemMcp`]) answers `tools/list`, `tools/call` and the
//! user-memories resource template. It does no memory work of its own:
//! every tool call becomes exactly one `/v1` request ([`tools::route`]) sent
//! to a [`V1`] backend, so a tool has `/v1`'s semantics, checks, limits,
//! quotas and error messages by construction, and nothing is stored by a
//! call that `/v1` refuses. Backends:
//! - [`RouterBackend`]: the service's own axum router, called in process.
//!   `/mcp` on `evomem serve` uses it with the caller's bearer key, and
//!   `evomem mcp --data-dir` with the key of the one tenant it opens.
//! - [`HttpBackend`]: a running service over HTTP (`evomem mcp --url`).
//!
//! The transports are the official SDK's (`rmcp`): stdio ([`serve_stdio`])
//! and streamable HTTP ([`http_service`]), stateless so that any instance
//! can answer any request.

pub mod backend;
pub mod server;
pub mod tools;

pub use backend::{BackendError, HttpBackend, RouterBackend, V1};
pub use server::{http_service, serve_stdio, EvomemMcp};

use serde_json::Value;

/// An HTTP method of the `/v1` API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Method {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// One `/v1` request made for a tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct V1Call {
    /// The method.
    pub method: Method,
    /// Path and query, e.g. `/v1/users/u1/memories?limit=5`.
    pub path: String,
    /// The JSON body, if the route takes one.
    pub body: Option<Value>,
    /// Sent as `Idempotency-Key`.
    pub idempotency_key: Option<String>,
}

impl V1Call {
    fn post(path: &str, body: Option<Value>) -> Self {
        Self {
            method: Method::Post,
            path: path.to_string(),
            body,
            idempotency_key: None,
        }
    }
    fn patch(path: String, body: Option<Value>) -> Self {
        Self {
            method: Method::Patch,
            path,
            body,
            idempotency_key: None,
        }
    }
    fn get(path: String) -> Self {
        Self {
            method: Method::Get,
            path,
            body: None,
            idempotency_key: None,
        }
    }
    fn delete(path: String) -> Self {
        Self {
            method: Method::Delete,
            path,
            body: None,
            idempotency_key: None,
        }
    }
}

/// The answer of a `/v1` request.
#[derive(Debug, Clone, PartialEq)]
pub struct V1Reply {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body (`/v1` always answers JSON; anything else is kept as a
    /// string).
    pub body: Value,
}

impl V1Reply {
    /// The message of a `/v1` error body (`{"error": {"code", "message"}}`),
    /// prefixed with its status and code.
    pub fn error_message(&self) -> String {
        let e = self.body.get("error");
        let code = e
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str)
            .unwrap_or("error");
        let msg = e
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| self.body.to_string());
        format!("{} {code}: {msg}", self.status)
    }
}
