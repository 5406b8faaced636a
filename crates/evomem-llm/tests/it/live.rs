//! A live test against a real OpenAI-compatible server, ignored by default.
//! Run with `EVOMEM_TEST_OPENAI_BASE_URL=http://127.0.0.1:8080/v1
//! EVOMEM_TEST_OPENAI_MODEL=<model> cargo test -p evomem-llm -- --ignored live`
//! (key from `OPENAI_API_KEY` when the server needs one).

use crate::common::{input, role};
use evomem_core::{ChatMessage, ChatRequest, LanguageModel};
use evomem_llm::openai::{OpenAiCompatible, OpenAiConfig};
use evomem_llm::{Backend, CacheSettings, LlmHub};
use std::sync::Arc;

#[test]
#[ignore = "needs EVOMEM_TEST_OPENAI_BASE_URL"]
fn live_server_ping_and_rank() {
    let Ok(base) = std::env::var("EVOMEM_TEST_OPENAI_BASE_URL") else {
        panic!("set EVOMEM_TEST_OPENAI_BASE_URL to run the live test");
    };
    let model = std::env::var("EVOMEM_TEST_OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
    let client = Arc::new(OpenAiCompatible::new(OpenAiConfig::new(model.clone(), base)).unwrap());
    let pong = client
        .complete(&ChatRequest::new(vec![ChatMessage::user(
            "Reply with the word pong.",
        )]))
        .unwrap();
    assert!(!pong.text.is_empty());
    assert!(pong.usage.prompt_tokens > 0);
    let hub = LlmHub::offline().with_role("rank", Backend::Model { lm: client, model });
    let out = hub.run(&role(), &input(), Some("u1")).unwrap();
    assert_eq!(out.scores.len(), 4);
    let acct = hub.accounting_json();
    assert!(acct["per_role"]["rank"]["calls"].as_u64().unwrap() >= 1);
    let _ = CacheSettings::off();
}
