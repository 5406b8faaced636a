//! `/mcp`: MCP over streamable HTTP behind the tenant's key. Each tool call
//! is one `/v1` request made with the caller's key, so tenants stay apart
//! and `/v1`'s limits (rate, quota, body) answer for tool calls too.
//! (The official client SDKs drive it in crates/evomem-py/tests/test_mcp.py.)

use crate::common::*;
use serde_json::{json, Value};

/// One JSON-RPC message to `/mcp`: (HTTP status, JSON answer or text).
async fn rpc(s: &TestServer, key: Option<&str>, method: &str, params: Value) -> (u16, Value) {
    let mut req = s
        .client
        .post(format!("{}/mcp", s.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn tool(s: &TestServer, key: &str, name: &str, args: Value) -> Value {
    let (st, v) = rpc(
        s,
        Some(key),
        "tools/call",
        json!({"name": name, "arguments": args}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    v["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_v1_requests_with_the_callers_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let (st, v) = rpc(
        &s,
        Some(KEY_A),
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["result"]["serverInfo"]["name"], json!("evomem"));
    let (_, v) = rpc(&s, Some(KEY_A), "tools/list", json!({})).await;
    assert_eq!(v["result"]["tools"].as_array().unwrap().len(), 11);

    let added = tool(
        &s,
        KEY_A,
        "add_memories",
        json!({"user_id": "u1", "memories": [{"text": "likes tea"}]}),
    )
    .await;
    assert_eq!(added["isError"], json!(false), "{added}");
    let id = added["structuredContent"]["memories"][0]["id"].clone();
    // The same memory through /v1 with the same key...
    let (st, direct) = s
        .call(
            "GET",
            &format!("/v1/memories/{}", id.as_str().unwrap()),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(direct, added["structuredContent"]["memories"][0]);
    // ...and nothing of it for another tenant's key, over MCP or /v1.
    let other = tool(&s, KEY_B, "list_memories", json!({"user_id": "u1"})).await;
    assert_eq!(other["structuredContent"]["memories"], json!([]));
    let other = tool(&s, KEY_B, "get_memory", json!({"id": id})).await;
    assert_eq!(other["isError"], json!(true), "{other}");
    // A /v1 refusal is the tool's error, naming the field; nothing stored.
    let bad = tool(
        &s,
        KEY_A,
        "add_memories",
        json!({"user_id": "u1", "memories": [{"text": "fine"}, {"text": "x", "colour": "red"}]}),
    )
    .await;
    assert_eq!(bad["isError"], json!(true));
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{bad}"
    );
    let (_, listed) = s
        .call("GET", "/v1/users/u1/memories", Some(KEY_A), None)
        .await;
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1);
    // An unknown tool is a JSON-RPC error.
    let (_, v) = rpc(
        &s,
        Some(KEY_A),
        "tools/call",
        json!({"name": "nope", "arguments": {}}),
    )
    .await;
    assert!(v["error"]["code"].is_i64(), "{v}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_needs_a_known_key_and_bounds_the_body() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.max_body_bytes = 4096;
    let s = start(cfg).await;
    let (st, v) = rpc(&s, None, "tools/list", json!({})).await;
    assert_eq!(st, 401, "{v}");
    let (st, _) = rpc(&s, Some("evk_not_a_key"), "tools/list", json!({})).await;
    assert_eq!(st, 401);
    let big = "x".repeat(8000);
    let (st, _) = rpc(
        &s,
        Some(KEY_A),
        "tools/call",
        json!({"name": "add_memories", "arguments": {"user_id": "u", "memories": [{"text": big}]}}),
    )
    .await;
    assert_eq!(st, 413);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_meet_the_rate_limit_and_the_quota_of_v1() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.tenant_max_memories = 2;
    let s = start(cfg).await;
    let add = |n: usize| json!({"user_id": "u", "memories": (0..n).map(|i| json!({"text": format!("m{i}")})).collect::<Vec<_>>()});
    assert_eq!(
        tool(&s, KEY_A, "add_memories", add(2)).await["isError"],
        json!(false)
    );
    let over = tool(&s, KEY_A, "add_memories", add(1)).await;
    assert_eq!(over["isError"], json!(true));
    let msg = over["content"][0]["text"].as_str().unwrap().to_string();
    let (st, direct) = s
        .call("POST", "/v1/memories", Some(KEY_A), Some(add(1)))
        .await;
    assert_eq!(over["structuredContent"], direct, "{msg}");
    assert!(msg.starts_with(&st.to_string()), "{msg}");
    s.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.rate_limit_per_s = 0.01;
    cfg.rate_limit_burst = 2.0;
    let s = start(cfg).await;
    let mut limited = 0;
    for _ in 0..4 {
        let r = tool(&s, KEY_A, "list_memories", json!({"user_id": "u"})).await;
        if r["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("429")
        {
            limited += 1;
        }
    }
    assert_eq!(limited, 2, "a burst of 2 lets 2 of 4 tool calls through");
    s.stop().await;
}
