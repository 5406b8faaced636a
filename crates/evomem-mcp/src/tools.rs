//! The tools: their definitions (names, JSON schemas, descriptions and
//! annotations, read from `tools.json` so that people and the docs read the
//! same text the model reads), and how each call becomes one `/v1` request.
//!
//! A tool's arguments are the `/v1` request's fields: path and query fields
//! (`id`, `user_id` of a user route, `hard`, `limit`, `cursor`, `as_of`) are
//! taken out, `idempotency_key` becomes the `Idempotency-Key` header, and
//! what remains is the JSON body, so `/v1`'s own checks (unknown fields,
//! bounds, quotas) answer for every tool with the field's name.

use crate::V1Call;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rmcp::model::{JsonObject, Tool};
use serde_json::Value;

/// The tool definitions, as served by `tools/list`.
pub const TOOLS_JSON: &str = include_str!("../tools.json");

/// Why a tool call was refused before it reached `/v1`: an argument of the
/// wrong type, missing or unknown. The message names the argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("argument `{field}`: {message}")]
pub struct ArgError {
    /// The argument.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ArgError {
    fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// Parse `tools.json`.
pub fn definitions() -> Result<Vec<Tool>, serde_json::Error> {
    serde_json::from_str(TOOLS_JSON)
}

/// Characters kept as they are in a path segment or query value.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn enc(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// Take a required string argument out of `args`.
fn take_str(args: &mut JsonObject, field: &str) -> Result<String, ArgError> {
    match args.remove(field) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ArgError::new(
            field,
            format!("must be a string, got {}", kind(&other)),
        )),
        None => Err(ArgError::new(field, "is required")),
    }
}

/// Take an optional argument out of `args`, rendered for a query string by
/// `render` (which refuses a value of the wrong type).
fn take_query(
    args: &mut JsonObject,
    field: &str,
    render: fn(&Value) -> Option<String>,
    expected: &str,
) -> Result<Option<String>, ArgError> {
    match args.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => render(&v)
            .map(|s| Some(format!("{field}={}", enc(&s))))
            .ok_or_else(|| ArgError::new(field, format!("must be {expected}, got {}", kind(&v)))),
    }
}

fn as_u64(v: &Value) -> Option<String> {
    v.as_u64().map(|n| n.to_string())
}

fn as_bool(v: &Value) -> Option<String> {
    v.as_bool().map(|b| b.to_string())
}

fn as_string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A route with no body: every argument must have been taken.
fn no_more(args: &JsonObject) -> Result<(), ArgError> {
    match args.keys().next() {
        Some(k) => Err(ArgError::new(k, "is not an argument of this tool")),
        None => Ok(()),
    }
}

fn with_query(path: String, parts: Vec<Option<String>>) -> String {
    let q: Vec<String> = parts.into_iter().flatten().collect();
    if q.is_empty() {
        path
    } else {
        format!("{path}?{}", q.join("&"))
    }
}

/// The `/v1` request of a call to `tool` with `args`; `None` when no tool
/// has that name.
pub fn route(tool: &str, args: JsonObject) -> Option<Result<V1Call, ArgError>> {
    let read_only = match tool {
        "search_memories" | "list_memories" | "get_memory" | "memory_history" => true,
        "add_memories" | "update_memory" | "delete_memory" | "record_events" | "recommend"
        | "feedback" | "delete_user" => false,
        _ => return None,
    };
    Some(build(tool, read_only, args))
}

/// The request of a known tool (see [`route`]).
fn build(tool: &str, read_only: bool, mut args: JsonObject) -> Result<V1Call, ArgError> {
    let idem = match args.remove("idempotency_key") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !read_only => Some(s),
        Some(Value::String(_)) => {
            return Err(ArgError::new(
                "idempotency_key",
                "is not an argument of this tool (it only reads)",
            ))
        }
        Some(other) => {
            return Err(ArgError::new(
                "idempotency_key",
                format!("must be a string, got {}", kind(&other)),
            ))
        }
    };
    let mut call = match tool {
        "add_memories" => V1Call::post("/v1/memories", Some(Value::Object(args))),
        "search_memories" => {
            // `/v1`'s default k (10) applies when it is absent.
            if args.get("k").is_some_and(Value::is_null) {
                args.remove("k");
            }
            V1Call::post("/v1/memories/search", Some(Value::Object(args)))
        }
        "record_events" => V1Call::post("/v1/events", Some(Value::Object(args))),
        "recommend" => V1Call::post("/v1/recommend", Some(Value::Object(args))),
        "feedback" => V1Call::post("/v1/feedback", Some(Value::Object(args))),
        "list_memories" => {
            let user = take_str(&mut args, "user_id")?;
            let q = vec![
                take_query(&mut args, "limit", as_u64, "a whole number")?,
                take_query(&mut args, "cursor", as_string, "a string")?,
                take_query(&mut args, "as_of", as_u64, "a whole number")?,
            ];
            no_more(&args)?;
            V1Call::get(with_query(format!("/v1/users/{}/memories", enc(&user)), q))
        }
        "get_memory" | "memory_history" => {
            let id = take_str(&mut args, "id")?;
            no_more(&args)?;
            let tail = if tool == "get_memory" { "" } else { "/history" };
            V1Call::get(format!("/v1/memories/{}{tail}", enc(&id)))
        }
        "update_memory" => {
            let id = take_str(&mut args, "id")?;
            V1Call::patch(
                format!("/v1/memories/{}", enc(&id)),
                Some(Value::Object(args)),
            )
        }
        "delete_memory" => {
            let id = take_str(&mut args, "id")?;
            let hard = take_query(&mut args, "hard", as_bool, "true or false")?;
            no_more(&args)?;
            V1Call::delete(with_query(format!("/v1/memories/{}", enc(&id)), vec![hard]))
        }
        "delete_user" => {
            let user = take_str(&mut args, "user_id")?;
            no_more(&args)?;
            V1Call::delete(format!("/v1/users/{}", enc(&user)))
        }
        // `route` admits only the tools above.
        other => return Err(ArgError::new("name", format!("no tool `{other}`"))),
    };
    call.idempotency_key = idem;
    Ok(call)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Method;
    use serde_json::json;

    fn obj(v: Value) -> JsonObject {
        match v {
            Value::Object(m) => m,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn every_defined_tool_has_a_route_and_every_route_a_definition() {
        let tools = definitions().unwrap_or_default();
        assert_eq!(tools.len(), 11, "tools.json must parse into 11 tools");
        for t in &tools {
            assert!(
                route(&t.name, JsonObject::new()).is_some(),
                "{} has no route",
                t.name
            );
            assert!(t.description.is_some(), "{} has no description", t.name);
            assert!(t.annotations.is_some(), "{} has no annotations", t.name);
            assert_eq!(t.input_schema.get("type"), Some(&json!("object")));
        }
        assert!(route("no_such_tool", JsonObject::new()).is_none());
    }

    #[test]
    fn only_delete_and_update_tools_are_marked_destructive_and_reads_read_only() {
        let tools = definitions().unwrap_or_default();
        let mut destructive: Vec<&str> = tools
            .iter()
            .filter(|t| {
                t.annotations
                    .as_ref()
                    .and_then(|a| a.destructive_hint)
                    .unwrap_or(true)
            })
            .map(|t| t.name.as_ref())
            .collect();
        destructive.sort();
        assert_eq!(
            destructive,
            ["delete_memory", "delete_user", "update_memory"]
        );
        for t in &tools {
            let ro = t.annotations.as_ref().and_then(|a| a.read_only_hint);
            let reads = matches!(
                t.name.as_ref(),
                "search_memories" | "list_memories" | "get_memory" | "memory_history"
            );
            assert_eq!(ro, Some(reads), "{}", t.name);
        }
    }

    #[test]
    fn path_and_query_arguments_are_encoded_and_the_rest_is_the_body() {
        let c = route(
            "list_memories",
            obj(json!({"user_id": "a b/c", "limit": 5, "cursor": "x&y"})),
        );
        let c = c.and_then(Result::ok);
        assert_eq!(
            c.map(|c| (c.method, c.path)),
            Some((
                Method::Get,
                "/v1/users/a%20b%2Fc/memories?limit=5&cursor=x%26y".to_string()
            ))
        );
        let c = route(
            "update_memory",
            obj(json!({"id": "m1", "text": "t", "idempotency_key": "k1"})),
        )
        .and_then(Result::ok);
        let c = c.map(|c| (c.method, c.path, c.body, c.idempotency_key));
        assert_eq!(
            c,
            Some((
                Method::Patch,
                "/v1/memories/m1".to_string(),
                Some(json!({"text": "t"})),
                Some("k1".to_string())
            ))
        );
        let c = route("delete_memory", obj(json!({"id": "m1", "hard": true}))).and_then(Result::ok);
        assert_eq!(
            c.map(|c| c.path),
            Some("/v1/memories/m1?hard=true".to_string())
        );
    }

    #[test]
    fn a_bad_argument_is_named() {
        let e = route("get_memory", obj(json!({"id": 7}))).and_then(Result::err);
        assert_eq!(e.map(|e| e.field), Some("id".to_string()));
        let e = route("get_memory", obj(json!({}))).and_then(Result::err);
        assert_eq!(
            e.map(|e| e.to_string()),
            Some("argument `id`: is required".to_string())
        );
        let e =
            route("delete_user", obj(json!({"user_id": "u", "hard": true}))).and_then(Result::err);
        assert_eq!(e.map(|e| e.field), Some("hard".to_string()));
        let e = route(
            "list_memories",
            obj(json!({"user_id": "u", "limit": "ten"})),
        )
        .and_then(Result::err);
        assert_eq!(e.map(|e| e.field), Some("limit".to_string()));
        let e = route(
            "search_memories",
            obj(json!({"user_id": "u", "query": "q", "idempotency_key": "k"})),
        )
        .and_then(Result::err);
        assert_eq!(e.map(|e| e.field), Some("idempotency_key".to_string()));
    }
}
