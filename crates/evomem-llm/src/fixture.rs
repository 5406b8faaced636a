//! A scriptable chat-completions server on 127.0.0.1 (feature `test-utils`).
//!
//! It speaks the OpenAI `POST /v1/chat/completions` format and can be told,
//! one request at a time, to answer well or to fail in each way a real server
//! fails: 429 with `Retry-After`, 500, a hang past the client's timeout, a
//! body that is not JSON, a JSON body cut short, and a transfer cut short
//! (the connection drops before the declared `Content-Length`). Scripted
//! replies are consumed in order; when the script is empty the server answers
//! in **auto** mode:
//!
//! - `rank` requests (response format named `rank`): the numbered candidate
//!   lines `[k] ...` are read from the prompt and ranked by token overlap with
//!   the text before them (profile and memory), ties broken by a SHA-256 of
//!   the line, so the answer is deterministic;
//! - other roles: the smallest object the request's JSON schema accepts
//!   ([`crate::json::minimal_instance`]);
//! - free-text requests: `pong`.
//!
//! Usage is `ceil(chars / 4)` per message (+4) for the prompt and
//! `ceil(chars / 4)` for the answer, so token accounting is deterministic.
//! Every request is counted (`GET /stats`, [`FixtureServer::request_count`])
//! and the last 1,000 bodies are kept for inspection.

use crate::accounting::{approx_prompt_tokens, approx_tokens};
use crate::json::minimal_instance;
use crate::rank::tokens;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Answer in auto mode (see the module docs).
    Auto,
    /// 200 with this assistant message content.
    Content(String),
    /// 429 with this `Retry-After` header value.
    RateLimited(String),
    /// Any status with this body.
    Status(u16, String),
    /// Sleep this long, then answer in auto mode.
    Hang(Duration),
    /// 200 with a body that is not JSON.
    MalformedBody,
    /// 200 with a chat-completion JSON body cut in half.
    TruncatedBody,
    /// 200 declaring a `Content-Length` longer than what is sent.
    TruncatedTransfer,
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Request path.
    pub path: String,
    /// Parsed body (`Value::Null` when it was not JSON).
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

const KEEP: usize = 1000;

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<VecDeque<RecordedRequest>>,
    count: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    by_role: Mutex<BTreeMap<String, u64>>,
}

/// A running fixture server; stops when dropped.
pub struct FixtureServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FixtureServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixtureServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl FixtureServer {
    /// Start on a random free port of 127.0.0.1.
    pub fn start() -> std::io::Result<Self> {
        Self::start_on(0)
    }

    /// Start on `port` of 127.0.0.1 (0: any free port).
    pub fn start_on(port: u16) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("evomem-llm-fixture")
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/chat/completions", post(chat))
            .route("/stats", get(stats))
            .with_state(shared.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("evomem-llm-fixture".into())
            .spawn(move || {
                rt.block_on(async move {
                    let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                        let _ = rx.await;
                    });
                    if let Err(e) = serve.await {
                        tracing::error!("fixture server stopped: {e}");
                    }
                });
                // Do not wait for hanging handlers on shutdown.
                rt.shutdown_background();
            })?;
        Ok(Self {
            addr,
            shared,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL for a backend spec: `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Append replies to the script.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        if let Ok(mut s) = self.shared.script.lock() {
            s.extend(replies);
        }
    }

    /// Requests received so far.
    pub fn request_count(&self) -> u64 {
        self.shared.count.load(Ordering::SeqCst)
    }

    /// The last (up to 1,000) requests, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// `GET /stats` as a value: `{"requests": n, "by_role": {...},
    /// "max_in_flight": m}` (the most requests it ever served at once).
    pub fn stats(&self) -> Value {
        stats_value(&self.shared)
    }

    /// Block the calling thread until the server stops (it never does on its
    /// own; used by `evomem llm fixture-server`).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn stats_value(s: &Shared) -> Value {
    let by_role = s.by_role.lock().map(|m| m.clone()).unwrap_or_default();
    json!({
        "requests": s.count.load(Ordering::SeqCst),
        "by_role": by_role,
        "max_in_flight": s.max_in_flight.load(Ordering::SeqCst),
    })
}

/// Decrements the in-flight gauge when a handler ends (or is cancelled).
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(s: &'a Shared) -> Self {
        let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(s)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn stats(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(stats_value(&s))
}

async fn chat(
    State(s): State<Arc<Shared>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _gauge = InFlight::enter(&s);
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let role = role_of(&parsed);
    s.count.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut m) = s.by_role.lock() {
        *m.entry(role.clone()).or_default() += 1;
    }
    if let Ok(mut r) = s.requests.lock() {
        if r.len() >= KEEP {
            r.pop_front();
        }
        r.push_back(RecordedRequest {
            path: uri.path().to_string(),
            body: parsed.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
    }
    let reply = s
        .script
        .lock()
        .ok()
        .and_then(|mut q| q.pop_front())
        .unwrap_or(Reply::Auto);
    match reply {
        Reply::Auto => completion(&parsed, &auto_answer(&parsed, &role)),
        Reply::Content(text) => completion(&parsed, &text),
        Reply::RateLimited(after) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, after)],
            Json(json!({"error": {"message": "rate limited", "type": "rate_limit"}})),
        )
            .into_response(),
        Reply::Status(code, text) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            text,
        )
            .into_response(),
        Reply::Hang(d) => {
            tokio::time::sleep(d).await;
            completion(&parsed, &auto_answer(&parsed, &role))
        }
        Reply::MalformedBody => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            "<html>upstream proxy error</html>",
        )
            .into_response(),
        Reply::TruncatedBody => {
            let full = completion_json(&parsed, &auto_answer(&parsed, &role)).to_string();
            let half = full[..full.len() / 2].to_string();
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                half,
            )
                .into_response()
        }
        Reply::TruncatedTransfer => {
            let full = completion_json(&parsed, &auto_answer(&parsed, &role)).to_string();
            let half = full[..full.len() / 2].to_string();
            let mut resp = Response::new(Body::from(half));
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            h.insert(
                header::CONTENT_LENGTH,
                header::HeaderValue::from(full.len()),
            );
            resp
        }
    }
}

fn role_of(body: &Value) -> String {
    body.pointer("/response_format/json_schema/name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| "text".to_string())
}

fn completion_json(req: &Value, text: &str) -> Value {
    let prompt = req
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            approx_prompt_tokens(
                ms.iter()
                    .map(|m| m.get("content").and_then(Value::as_str).unwrap_or("")),
            )
        })
        .unwrap_or(0);
    let completion = approx_tokens(text);
    json!({
        "id": "fixture",
        "object": "chat.completion",
        "model": req.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion
        }
    })
}

fn completion(req: &Value, text: &str) -> Response {
    (StatusCode::OK, Json(completion_json(req, text))).into_response()
}

/// The auto-mode answer for a request (see the module docs).
pub fn auto_answer(req: &Value, role: &str) -> String {
    let first_user = req
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| {
            ms.iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if role == "rank" {
        return json!({"ranking": auto_rank(first_user)}).to_string();
    }
    match req.pointer("/response_format/json_schema/schema") {
        Some(schema) => minimal_instance(schema).to_string(),
        None if req.pointer("/response_format/type").and_then(Value::as_str)
            == Some("json_object") =>
        {
            "{}".to_string()
        }
        None => "pong".to_string(),
    }
}

/// Rank the `[k] ...` lines of a rank prompt: by token overlap with the text
/// before the first candidate line, ties by SHA-256 of the line.
pub fn auto_rank(prompt: &str) -> Vec<u64> {
    let mut memory = String::new();
    let mut cands: Vec<(u64, String)> = Vec::new();
    for line in prompt.lines() {
        let num = line
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .and_then(|(k, _)| k.parse::<u64>().ok());
        match num {
            Some(k) if !cands.iter().any(|(j, _)| *j == k) => cands.push((k, line.to_string())),
            Some(_) => {}
            None if cands.is_empty() => {
                memory.push_str(line);
                memory.push('\n');
            }
            None => {}
        }
    }
    let mem = tokens(&memory);
    let mut scored: Vec<(usize, String, u64)> = cands
        .into_iter()
        .map(|(k, line)| {
            let overlap = tokens(&line).intersection(&mem).count();
            let h = hex::encode(Sha256::digest(line.as_bytes()));
            (overlap, h, k)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, _, k)| k).collect()
}
