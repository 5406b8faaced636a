//! The OpenAI-compatible client against a real server on 127.0.0.1: request
//! body, auth header, retries with Retry-After, timeouts, bounded
//! concurrency, and the classification of every failure mode.

use crate::common::client;

use evomem_core::{ChatMessage, ChatRequest, LanguageModel, LlmError, ResponseFormat};
use evomem_llm::fixture::{FixtureServer, Reply};
use evomem_llm::openai::{OpenAiCompatible, OpenAiConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn req() -> ChatRequest {
    let mut r = ChatRequest::new(vec![ChatMessage::system("sys"), ChatMessage::user("hello")]);
    r.max_tokens = Some(64);
    r.stop = vec!["\n\n".to_string()];
    r.response_format = ResponseFormat::JsonSchema {
        name: "probe".to_string(),
        schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
    };
    r
}

#[test]
fn good_answer_and_request_body() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Content("{\"ok\": true}".to_string())]);
    let c = client(&srv.base_url(), 0, 2000);
    let r = c.complete(&req()).unwrap();
    assert_eq!(r.text, "{\"ok\": true}");
    assert!(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
    let got = srv.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/v1/chat/completions");
    assert_eq!(
        got[0].authorization.as_deref(),
        Some("Bearer sk-test-not-secret")
    );
    assert_eq!(
        got[0].body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "hello"}
            ],
            "temperature": 0.0,
            "max_tokens": 64,
            "stop": ["\n\n"],
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "probe",
                    "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
                }
            }
        })
    );
    // Free text: no response_format, no max_tokens, no stop.
    c.complete(&ChatRequest::new(vec![ChatMessage::user("ping")]))
        .unwrap();
    let body = &srv.requests()[1].body;
    assert!(body.get("response_format").is_none() && body.get("stop").is_none());
    assert!(body.get("max_tokens").is_none());
}

/// `response_format = "gbnf"`: the schema goes as a compact llama.cpp
/// `grammar` and no `response_format` is sent; the grammar accepts the
/// compact answer and refuses one padded with whitespace.
#[test]
fn gbnf_mode_sends_the_schema_as_a_grammar() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Content("{\"ok\":true}".to_string())]);
    let mut cfg = OpenAiConfig::new("test-model", srv.base_url());
    cfg.api_key = Some(evomem_llm::Secret("sk-test-not-secret".to_string()));
    cfg.response_format = "gbnf".to_string();
    let c = OpenAiCompatible::new(cfg).unwrap();
    c.complete(&req()).unwrap();
    let body = &srv.requests()[0].body;
    assert!(body.get("response_format").is_none(), "{body}");
    let grammar = body["grammar"].as_str().expect("a grammar string");
    assert!(evomem_llm::gbnf::recognise(grammar, "{\"ok\":true}").unwrap());
    assert!(!evomem_llm::gbnf::recognise(grammar, "{ \"ok\": true }").unwrap());
}

#[test]
fn rate_limit_honours_retry_after() {
    let srv = FixtureServer::start().unwrap();
    srv.push([
        Reply::RateLimited("1".to_string()),
        Reply::Content("{\"ok\":true}".into()),
    ]);
    let c = client(&srv.base_url(), 2, 2000);
    let t0 = Instant::now();
    let r = c.complete(&req()).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(r.text, "{\"ok\":true}");
    assert_eq!(srv.request_count(), 2);
}

#[test]
fn rate_limit_without_retries_is_transient_with_delay() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::RateLimited("7".to_string())]);
    let e = client(&srv.base_url(), 0, 2000)
        .complete(&req())
        .unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::Transient {
                retry_after_ms: Some(7000),
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn server_error_is_retried_then_succeeds() {
    let srv = FixtureServer::start().unwrap();
    srv.push([
        Reply::Status(500, "boom".into()),
        Reply::Status(503, "busy".into()),
    ]);
    let r = client(&srv.base_url(), 3, 2000).complete(&req()).unwrap();
    assert_eq!(r.text, "{\"ok\":false}"); // auto mode: minimal instance of the schema
    assert_eq!(srv.request_count(), 3);
}

#[test]
fn server_error_exhausts_retries() {
    let srv = FixtureServer::start().unwrap();
    srv.push((0..3).map(|_| Reply::Status(500, "boom".into())));
    let e = client(&srv.base_url(), 2, 2000)
        .complete(&req())
        .unwrap_err();
    assert!(
        matches!(&e, LlmError::Transient { message, .. } if message.contains("500")),
        "{e:?}"
    );
    assert_eq!(srv.request_count(), 3);
}

#[test]
fn hang_past_timeout_is_transient() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Hang(Duration::from_secs(5))]);
    let t0 = Instant::now();
    let e = client(&srv.base_url(), 0, 300)
        .complete(&req())
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(
        matches!(&e, LlmError::Transient { message, .. } if message.contains("timed out")),
        "{e:?}"
    );
}

#[test]
fn malformed_and_truncated_bodies_are_malformed() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::MalformedBody, Reply::TruncatedBody]);
    let c = client(&srv.base_url(), 3, 2000);
    assert!(matches!(c.complete(&req()), Err(LlmError::Malformed(_))));
    assert!(matches!(c.complete(&req()), Err(LlmError::Malformed(_))));
    assert_eq!(srv.request_count(), 2, "malformed bodies are not retried");
}

#[test]
fn truncated_transfer_is_transient_and_retried() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::TruncatedTransfer]);
    let c = client(&srv.base_url(), 0, 2000);
    let e = c.complete(&req()).unwrap_err();
    assert!(matches!(e, LlmError::Transient { .. }), "{e:?}");
    let c = client(&srv.base_url(), 1, 2000);
    srv.push([Reply::TruncatedTransfer]);
    assert!(c.complete(&req()).is_ok());
}

#[test]
fn auth_and_context_errors_are_classified() {
    let srv = FixtureServer::start().unwrap();
    srv.push([
        Reply::Status(401, "{\"error\":{\"message\":\"invalid api key\"}}".into()),
        Reply::Status(
            400,
            "{\"error\":{\"message\":\"This model's maximum context length is 4096 tokens\"}}"
                .into(),
        ),
        Reply::Status(404, "{\"error\":{\"message\":\"model not found\"}}".into()),
    ]);
    let c = client(&srv.base_url(), 3, 2000);
    let e = c.complete(&req()).unwrap_err();
    assert!(
        matches!(&e, LlmError::Permanent(m) if m.contains("401") && m.contains("EVOMEM_TEST_FIXTURE_KEY")),
        "{e:?}"
    );
    assert!(matches!(
        c.complete(&req()),
        Err(LlmError::ContextTooLong(_))
    ));
    assert!(
        matches!(c.complete(&req()), Err(LlmError::Permanent(m)) if m.contains("model not found"))
    );
    assert_eq!(srv.request_count(), 3, "permanent errors are not retried");
}

#[test]
fn connection_refused_is_transient() {
    let srv = FixtureServer::start().unwrap();
    let url = srv.base_url();
    drop(srv);
    let e = client(&url, 0, 500).complete(&req()).unwrap_err();
    assert!(matches!(e, LlmError::Transient { .. }), "{e:?}");
}

#[test]
fn concurrency_is_bounded() {
    let srv = FixtureServer::start().unwrap();
    srv.push((0..6).map(|_| Reply::Hang(Duration::from_millis(150))));
    let mut cfg = evomem_llm::openai::OpenAiConfig::new("test-model", srv.base_url());
    cfg.max_concurrency = 2;
    cfg.max_retries = 0;
    let c = evomem_llm::openai::OpenAiCompatible::new(cfg).unwrap();
    let c = Arc::new(c);
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || c.complete(&req()).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    assert_eq!(srv.request_count(), 6);
    assert_eq!(srv.stats()["max_in_flight"], 2);
}
