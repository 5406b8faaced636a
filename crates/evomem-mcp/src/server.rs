//! The MCP server: `tools/list` from `tools.json`, `tools/call` through one
//! `/v1` request each, and a user's memories as a resource template
//! (`evomem://users/{user_id}/memories`, the first page of the listing).
//!
//! Errors follow the protocol's split. A call the server cannot route (an
//! unknown tool, an unknown resource URI) is a JSON-RPC error. A call that
//! ran and failed (an argument of the wrong type, a `/v1` refusal such as an
//! unknown id, a bad field or a limit, the service unreachable) is a tool
//! result with `isError` and a message that names the field; its structured
//! content is `/v1`'s error body.

use crate::backend::V1;
use crate::tools;
use crate::{V1Call, V1Reply};
use axum::http::header;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ResourceTemplate, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _};
use serde_json::Value;
use std::sync::Arc;

/// The resource template of a user's memories.
pub const USER_MEMORIES_TEMPLATE: &str = "evomem://users/{user_id}/memories";

const INSTRUCTIONS: &str = "evomem is a long-term memory for the user. Call search_memories \
with the user's id before answering anything that depends on what they told you earlier; \
call add_memories when they state a lasting preference or fact; call update_memory when \
they correct one. For recommendations: record_events with what they did, recommend over \
the candidate items, then feedback with the decision_id once you know how it went.";

/// evomem's MCP server over a `/v1` backend.
#[derive(Clone)]
pub struct EvomemMcp {
    backend: Arc<dyn V1>,
    tools: Arc<Vec<Tool>>,
}

/// A server that failed to start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// `tools.json` does not parse (a build of this crate with a broken file).
    #[error("tools.json: {0}")]
    Tools(#[from] serde_json::Error),
    /// The transport failed.
    #[error("MCP transport: {0}")]
    Transport(String),
}

impl EvomemMcp {
    /// A server whose tool calls go to `backend`.
    pub fn new(backend: Arc<dyn V1>) -> Result<Self, ServerError> {
        Ok(Self {
            backend,
            tools: Arc::new(tools::definitions()?),
        })
    }

    /// The tools served.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Run one tool call: the `/v1` answer as a tool result. `key` is the
    /// caller's bearer key (`None`: the backend's own).
    pub async fn call(
        &self,
        name: &str,
        args: rmcp::model::JsonObject,
        key: Option<&str>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match tools::route(name, args) {
            None => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool `{name}`"),
                    None,
                ))
            }
            Some(Err(e)) => {
                let body = serde_json::json!({"error": {
                    "code": "invalid_field", "message": e.to_string(), "field": e.field,
                }});
                return Ok(error_result(e.to_string(), body));
            }
            Some(Ok(c)) => c,
        };
        Ok(self.send(call, key).await)
    }

    async fn send(&self, call: V1Call, key: Option<&str>) -> CallToolResult {
        match self.backend.call(call, key).await {
            Ok(reply) if (200..300).contains(&reply.status) => {
                CallToolResult::structured(reply.body)
            }
            Ok(reply) => error_result(reply.error_message(), reply.body),
            Err(e) => {
                let body = serde_json::json!({"error": {
                    "code": "unreachable", "message": e.to_string(),
                }});
                error_result(e.to_string(), body)
            }
        }
    }
}

fn error_result(message: String, body: Value) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(message)]);
    r.structured_content = Some(body);
    r
}

/// The caller's bearer key, from the HTTP request the transport received
/// (none over stdio).
fn bearer(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    parts
        .headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(|k| k.trim().to_string())
}

/// The user of `evomem://users/{user_id}/memories` (percent-decoded).
fn user_of_uri(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("evomem://users/")?;
    let user = rest.strip_suffix("/memories")?;
    if user.is_empty() || user.contains('/') {
        return None;
    }
    percent_encoding::percent_decode_str(user)
        .decode_utf8()
        .ok()
        .map(|u| u.into_owned())
}

impl ServerHandler for EvomemMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("evomem", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = bearer(&context);
        let args = request.arguments.unwrap_or_default();
        self.call(&request.name, args, key.as_deref())
            .await
            .map(CallToolResponse::from)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let t: ResourceTemplate = serde_json::from_value(serde_json::json!({
            "uriTemplate": USER_MEMORIES_TEMPLATE,
            "name": "user_memories",
            "title": "A user's memories",
            "description": "The first page (up to 100) of a user's memories, as list_memories returns them.",
            "mimeType": "application/json",
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListResourceTemplatesResult::with_all_items(vec![t]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let Some(user) = user_of_uri(&uri) else {
            return Err(ErrorData::resource_not_found(
                format!("no resource `{uri}`: resources are {USER_MEMORIES_TEMPLATE}"),
                None,
            ));
        };
        let mut args = rmcp::model::JsonObject::new();
        args.insert("user_id".into(), Value::String(user));
        let call = match tools::route("list_memories", args) {
            Some(Ok(c)) => c,
            _ => {
                return Err(ErrorData::internal_error(
                    "list_memories has no route",
                    None,
                ))
            }
        };
        let key = bearer(&context);
        let reply: V1Reply = self
            .backend
            .call(call, key.as_deref())
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        if !(200..300).contains(&reply.status) {
            return Err(ErrorData::invalid_params(reply.error_message(), None));
        }
        let contents = ResourceContents::TextResourceContents {
            uri,
            mime_type: Some("application/json".into()),
            text: reply.body.to_string(),
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// Serve `server` on this process's stdin and stdout until the client
/// closes them. Nothing else may write to stdout meanwhile.
pub async fn serve_stdio(server: EvomemMcp) -> Result<(), ServerError> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServerError::Transport(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| ServerError::Transport(e.to_string()))?;
    Ok(())
}

/// `server` as a streamable HTTP endpoint (a tower service to mount at
/// `/mcp`): stateless (no `Mcp-Session-Id`; every POST stands alone, so any
/// instance can answer it) and answered as JSON. The `Host` check is off:
/// the endpoint sits behind the service's bearer keys, and `serve.bind`
/// decides where it listens. Bodies above `max_body_bytes` get 413.
pub fn http_service(
    server: EvomemMcp,
    max_body_bytes: usize,
) -> StreamableHttpService<EvomemMcp, NeverSessionManager> {
    let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    config.legacy_session_mode = false;
    config.json_response = true;
    config.sse_keep_alive = None;
    config.max_request_body_bytes = max_body_bytes;
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_uri_names_one_user() {
        assert_eq!(
            user_of_uri("evomem://users/u%201/memories"),
            Some("u 1".to_string())
        );
        assert_eq!(user_of_uri("evomem://users//memories"), None);
        assert_eq!(user_of_uri("evomem://users/a/b/memories"), None);
        assert_eq!(user_of_uri("evomem://items/a"), None);
    }
}
