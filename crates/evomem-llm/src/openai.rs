//! An OpenAI-compatible chat-completions client (reqwest + rustls).
//!
//! Works against any server speaking `POST /v1/chat/completions`. The API is
//! blocking ([`LanguageModel::complete`]): requests run on a small tokio
//! runtime owned by the client, so callers need no async code (and must not
//! call it from inside another tokio runtime). Behaviour:
//!
//! - **timeout** per request (connect, send and body together);
//! - **bounded concurrency**: a semaphore caps requests in flight, shared by
//!   every thread using the client;
//! - **retries** on [`LlmError::Transient`] only, with exponential backoff
//!   `base * 2^attempt` capped at `max`, multiplied by a seeded jitter in
//!   `[0.5, 1.0]`, and never shorter than the server's `Retry-After`;
//! - **error classification** in one place ([`classify_status`]): 408, 429
//!   and 5xx, timeouts, connection failures and interrupted bodies are
//!   transient; a 4xx whose message says the context is too long is
//!   `ContextTooLong`; 401/403 and other 4xx are permanent; a 2xx body that
//!   is not a chat completion is `Malformed`.
//!
//! The API key is read once from the environment variable named in the
//! config; it is sent as a bearer token and never logged or printed (the
//! `Debug` impl hides it).

use crate::spec::endpoint;
use evomem_core::{ChatRequest, ChatResponse, LanguageModel, LlmError, ResponseFormat, Usage};
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use serde_json::{json, Value};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings of one client. Defaults as documented per field.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Base URL, e.g. `http://127.0.0.1:8080/v1` (see `spec::endpoint`).
    pub base_url: String,
    /// Model name sent in the body.
    pub model: String,
    /// Name of the environment variable the key came from (default
    /// `OPENAI_API_KEY`), for error messages only: this library reads no
    /// environment; the binary resolves the key into [`Self::api_key`].
    pub api_key_env: String,
    /// The API key; `None` (or empty) sends no `Authorization` header.
    pub api_key: Option<crate::spec::Secret>,
    /// Per-request timeout. Default 60 s.
    pub timeout: Duration,
    /// Requests in flight at most. Default 4.
    pub max_concurrency: usize,
    /// Retries after a transient failure. Default 4.
    pub max_retries: u32,
    /// First backoff delay. Default 500 ms.
    pub backoff_base: Duration,
    /// Backoff ceiling. Default 30 s.
    pub backoff_max: Duration,
    /// Longest `Retry-After` honoured. Default 120 s.
    pub retry_after_cap: Duration,
    /// What to send as `response_format`: `json_schema` (default),
    /// `gbnf` (the schema as a compact GBNF `grammar` field instead, for
    /// llama.cpp servers: see [`crate::gbnf`]),
    /// `json_object` or `none`.
    pub response_format: String,
    /// Seed of the backoff jitter. Default 0.
    pub jitter_seed: u64,
}

impl OpenAiConfig {
    /// Defaults for `model` at `base_url`.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: "OPENAI_API_KEY".to_string(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_concurrency: 4,
            max_retries: 4,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            retry_after_cap: Duration::from_secs(120),
            response_format: "json_schema".to_string(),
            jitter_seed: 0,
        }
    }
}

/// An API key that never prints.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<hidden>)")
    }
}

/// The client. Cheap to share behind an `Arc`.
pub struct OpenAiCompatible {
    cfg: OpenAiConfig,
    url: String,
    key: Option<ApiKey>,
    client: reqwest::Client,
    rt: tokio::runtime::Runtime,
    sem: Arc<tokio::sync::Semaphore>,
    rng: Mutex<ChaCha8Rng>,
}

impl fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiCompatible")
            .field("url", &self.url)
            .field("model", &self.cfg.model)
            .field("api_key_env", &self.cfg.api_key_env)
            .field("key", &self.key)
            .finish()
    }
}

impl OpenAiCompatible {
    /// Build a client with the key in `cfg.api_key`.
    pub fn new(mut cfg: OpenAiConfig) -> Result<Self, LlmError> {
        let key = cfg
            .api_key
            .take()
            .filter(|k| !k.0.trim().is_empty())
            .map(|k| ApiKey(k.0));
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .build()
            .map_err(|e| LlmError::Permanent(format!("cannot build HTTP client: {e}")))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("evomem-llm-http")
            .enable_all()
            .build()
            .map_err(|e| LlmError::Permanent(format!("cannot start HTTP runtime: {e}")))?;
        Ok(Self {
            url: endpoint(&cfg.base_url),
            key,
            client,
            rt,
            sem: Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrency.max(1))),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(cfg.jitter_seed)),
            cfg,
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The model name.
    pub fn model(&self) -> &str {
        &self.cfg.model
    }

    /// The JSON body sent for `req`.
    pub fn request_body(&self, req: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.cfg.model,
            "messages": req.messages,
            "temperature": req.temperature,
        });
        if let Some(m) = req.max_tokens {
            body["max_tokens"] = json!(m);
        }
        if !req.stop.is_empty() {
            body["stop"] = json!(req.stop);
        }
        let rf = match (&req.response_format, self.cfg.response_format.as_str()) {
            (_, "none") | (ResponseFormat::Text, _) => None,
            (ResponseFormat::JsonSchema { schema, .. }, "gbnf") => {
                body["grammar"] = json!(crate::gbnf::from_schema(schema));
                None
            }
            (ResponseFormat::JsonObject, _)
            | (ResponseFormat::JsonSchema { .. }, "json_object") => {
                Some(json!({"type": "json_object"}))
            }
            (ResponseFormat::JsonSchema { name, schema }, _) => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema},
            })),
        };
        if let Some(rf) = rf {
            body["response_format"] = rf;
        }
        body
    }

    fn backoff(&self, attempt: u32, retry_after_ms: Option<u64>) -> Duration {
        let base = self.cfg.backoff_base.as_millis() as f64;
        let exp = base * 2f64.powi(attempt.min(30) as i32);
        let capped = exp.min(self.cfg.backoff_max.as_millis() as f64);
        let jitter = match self.rng.lock() {
            Ok(mut r) => r.gen_range(0.5..=1.0),
            Err(_) => 1.0,
        };
        let mut ms = (capped * jitter) as u64;
        if let Some(ra) = retry_after_ms {
            ms = ms.max(ra.min(self.cfg.retry_after_cap.as_millis() as u64));
        }
        Duration::from_millis(ms)
    }

    async fn send_once(&self, body: &Value) -> Result<ChatResponse, LlmError> {
        let mut rb = self.client.post(&self.url).json(body);
        if let Some(k) = &self.key {
            rb = rb.bearer_auth(&k.0);
        }
        let resp = rb.send().await.map_err(|e| classify_transport(&e))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let bytes = resp.bytes().await.map_err(|e| classify_transport(&e))?;
        if !(200..300).contains(&status) {
            return Err(classify_status(
                status,
                &bytes,
                retry_after,
                &self.cfg.api_key_env,
            ));
        }
        parse_completion(&bytes)
    }
}

impl LanguageModel for OpenAiCompatible {
    fn id(&self) -> String {
        format!("openai:{}@{}", self.cfg.model, self.cfg.base_url)
    }

    fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let body = self.request_body(req);
        self.rt.block_on(async {
            let _permit = self
                .sem
                .acquire()
                .await
                .map_err(|_| LlmError::Permanent("HTTP client is shut down".into()))?;
            let mut attempt = 0u32;
            loop {
                match self.send_once(&body).await {
                    Err(LlmError::Transient {
                        message,
                        retry_after_ms,
                    }) if attempt < self.cfg.max_retries => {
                        let wait = self.backoff(attempt, retry_after_ms);
                        tracing::warn!(
                            url = %self.url,
                            attempt = attempt + 1,
                            wait_ms = wait.as_millis() as u64,
                            "transient LLM error, retrying: {message}"
                        );
                        tokio::time::sleep(wait).await;
                        attempt += 1;
                    }
                    other => return other,
                }
            }
        })
    }
}

/// `Retry-After` in seconds (integer or decimal). HTTP dates are ignored.
pub fn parse_retry_after(v: &str) -> Option<u64> {
    let s: f64 = v.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then_some((s * 1000.0) as u64)
}

fn classify_transport(e: &reqwest::Error) -> LlmError {
    let message = if e.is_timeout() {
        format!("request timed out: {e}")
    } else if e.is_connect() {
        format!("connection failed: {e}")
    } else if e.is_body() || e.is_decode() {
        format!("response body interrupted: {e}")
    } else if e.is_builder() {
        return LlmError::Permanent(format!("bad request: {e}"));
    } else {
        format!("request failed: {e}")
    };
    LlmError::Transient {
        message,
        retry_after_ms: None,
    }
}

fn error_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
            return m.to_string();
        }
        if let Some(m) = v.get("error").and_then(Value::as_str) {
            return m.to_string();
        }
    }
    text.chars().take(300).collect()
}

/// Classify a non-2xx answer. The one place HTTP statuses are decided.
pub fn classify_status(
    status: u16,
    body: &[u8],
    retry_after_ms: Option<u64>,
    key_env: &str,
) -> LlmError {
    let msg = error_message(body);
    let lower = msg.to_lowercase();
    let context = [
        "context_length_exceeded",
        "context length",
        "maximum context",
        "context window",
        "too many tokens",
        "prompt is too long",
    ]
    .iter()
    .any(|p| lower.contains(p));
    match status {
        408 | 429 | 500..=599 => LlmError::Transient {
            message: format!("HTTP {status}: {msg}"),
            retry_after_ms,
        },
        400..=499 if context => LlmError::ContextTooLong(format!("HTTP {status}: {msg}")),
        401 | 403 => LlmError::Permanent(format!(
            "HTTP {status}: authentication failed (API key from env var `{key_env}`): {msg}"
        )),
        _ => LlmError::Permanent(format!("HTTP {status}: {msg}")),
    }
}

#[derive(Deserialize)]
struct CompletionBody {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<UsageBody>,
}

#[derive(Deserialize)]
struct Choice {
    message: MessageBody,
}

#[derive(Deserialize)]
struct MessageBody {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct UsageBody {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// Parse a 2xx chat-completion body.
pub fn parse_completion(body: &[u8]) -> Result<ChatResponse, LlmError> {
    let head: String = String::from_utf8_lossy(body).chars().take(120).collect();
    let parsed: CompletionBody = serde_json::from_slice(body).map_err(|e| {
        LlmError::Malformed(format!(
            "response is not a chat completion ({e}); body starts `{head}`"
        ))
    })?;
    let Some(choice) = parsed.choices.into_iter().next() else {
        return Err(LlmError::Malformed("chat completion has no choices".into()));
    };
    let Some(text) = choice.message.content else {
        return Err(LlmError::Malformed(
            "chat completion message has no content".into(),
        ));
    };
    let usage = parsed
        .usage
        .map(|u| Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        })
        .unwrap_or_default();
    Ok(ChatResponse { text, usage })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn classifies_statuses() {
        assert!(matches!(
            classify_status(429, b"{}", Some(1000), "K"),
            LlmError::Transient {
                retry_after_ms: Some(1000),
                ..
            }
        ));
        assert!(matches!(
            classify_status(503, b"busy", None, "K"),
            LlmError::Transient { .. }
        ));
        assert!(matches!(
            classify_status(
                400,
                br#"{"error":{"message":"This model's maximum context length is 8192 tokens"}}"#,
                None,
                "K"
            ),
            LlmError::ContextTooLong(_)
        ));
        let e = classify_status(401, br#"{"error":{"message":"bad key"}}"#, None, "MY_KEY");
        assert!(
            matches!(&e, LlmError::Permanent(m) if m.contains("MY_KEY") && m.contains("bad key"))
        );
        assert!(matches!(
            classify_status(404, b"no", None, "K"),
            LlmError::Permanent(_)
        ));
    }

    #[test]
    fn parses_bodies() {
        let ok = br#"{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
        let r = parse_completion(ok).unwrap();
        assert_eq!(r.text, "hi");
        assert_eq!(r.usage.prompt_tokens, 5);
        assert!(matches!(
            parse_completion(b"{\"choices\":[{\"mess"),
            Err(LlmError::Malformed(_))
        ));
        assert!(matches!(
            parse_completion(b"{\"choices\":[]}"),
            Err(LlmError::Malformed(_))
        ));
        assert_eq!(parse_retry_after("2"), Some(2000));
        assert_eq!(parse_retry_after("0.25"), Some(250));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn debug_hides_key() {
        let mut cfg = OpenAiConfig::new("m", "http://127.0.0.1:9/v1");
        cfg.api_key = Some(crate::spec::Secret("sk-secret-123".into()));
        let c = OpenAiCompatible::new(cfg).unwrap();
        let d = format!("{c:?}");
        assert!(!d.contains("sk-secret"), "{d}");
        assert!(d.contains("hidden"));
    }
}
