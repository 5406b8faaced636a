//! The language-model seam: chat requests, classified errors, and typed roles.
//!
//! Every piece of LLM work (extract, link, evolve, synthesize, plan, rank,
//! judge, ...) is a [`Role`]: a typed input, a typed output, a prompt file,
//! a JSON schema with a parser, and an offline algorithm. The executor in
//! `evomem-llm` decides per role whether to call a [`LanguageModel`] or run the
//! offline algorithm, and handles repair, fallback, caching and accounting.
//!
//! Prompt files live in the `prompts/` folder of the crate that defines the
//! role (`evomem-llm/prompts/rank.md`, `evomem-policy/prompts/mars_*.md`,
//! …), as `<role>.md`. Their syntax: a line `## system` starts the system message, a line `## user`
//! starts the user message, and `{{name}}` is replaced by the variable `name`
//! returned by [`Role::variables`]; an unknown placeholder is an error.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use thiserror::Error;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    /// Instructions.
    System,
    /// The request.
    User,
    /// A model answer (used in repair turns).
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Speaker.
    pub role: ChatRole,
    /// Text.
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(s: impl Into<String>) -> Self {
        Self {
            role: ChatRole::System,
            content: s.into(),
        }
    }
    /// A user message.
    pub fn user(s: impl Into<String>) -> Self {
        Self {
            role: ChatRole::User,
            content: s.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(s: impl Into<String>) -> Self {
        Self {
            role: ChatRole::Assistant,
            content: s.into(),
        }
    }
}

/// Requested response format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text.
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        /// Schema name.
        name: String,
        /// The schema.
        schema: serde_json::Value,
    },
}

/// A chat-completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Conversation.
    pub messages: Vec<ChatMessage>,
    /// Sampling temperature; default 0.
    pub temperature: f32,
    /// Completion token limit.
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Response format.
    pub response_format: ResponseFormat,
}

impl ChatRequest {
    /// A request with temperature 0, no limit, no stop, free text.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            temperature: 0.0,
            max_tokens: None,
            stop: Vec::new(),
            response_format: ResponseFormat::Text,
        }
    }
}

/// Token usage of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// A chat-completion answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Answer text.
    pub text: String,
    /// Usage.
    pub usage: Usage,
}

/// Classified LLM errors, so that retry code can match on them.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LlmError {
    /// Worth retrying: 429, 5xx, timeout, connection reset.
    #[error("transient LLM error: {message}")]
    Transient {
        /// What happened.
        message: String,
        /// Server-requested delay, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// The prompt does not fit the model's context.
    #[error("context too long: {0}")]
    ContextTooLong(String),
    /// Not worth retrying: 4xx, auth, bad config.
    #[error("permanent LLM error: {0}")]
    Permanent(String),
    /// The answer could not be parsed or validated.
    #[error("malformed LLM answer: {0}")]
    Malformed(String),
    /// Replay-only cache miss.
    #[error("replay cache miss for role `{role}`, key {key}")]
    CacheMiss {
        /// Role name.
        role: String,
        /// Cache key.
        key: String,
    },
    /// The offline algorithm of a role failed.
    #[error("offline algorithm of role `{role}` failed: {message}")]
    Offline {
        /// Role name.
        role: String,
        /// Why.
        message: String,
    },
}

/// A chat-completion backend. Blocking: async backends wrap a runtime.
pub trait LanguageModel: Send + Sync {
    /// Backend id for cache keys and reports, e.g. `openai:gpt-4o@http://...`.
    fn id(&self) -> String;
    /// Complete one request.
    fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError>;
}

impl<T: LanguageModel + ?Sized> LanguageModel for Arc<T> {
    fn id(&self) -> String {
        (**self).id()
    }
    fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        (**self).complete(req)
    }
}

impl<T: LanguageModel + ?Sized> LanguageModel for Box<T> {
    fn id(&self) -> String {
        (**self).id()
    }
    fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        (**self).complete(req)
    }
}

/// One typed piece of LLM work with an offline twin.
///
/// The executor renders [`Role::template`] with [`Role::variables`], asks the
/// model for JSON matching [`Role::schema`], and turns the JSON into an output
/// with [`Role::parse`] (which validates). If no model is configured for the
/// role, or the answer stays malformed after one repair turn, it calls
/// [`Role::offline`], which must be a real, deterministic algorithm.
pub trait Role: Send + Sync {
    /// Typed input.
    type Input: Serialize;
    /// Typed output.
    type Output: Serialize + DeserializeOwned;

    /// Role name; also the prompt file stem (`<crate>/prompts/<name>.md`).
    fn name(&self) -> &'static str;
    /// The prompt template (usually `include_str!` of the prompt file).
    fn template(&self) -> &'static str;
    /// Template variables for one input.
    fn variables(&self, input: &Self::Input) -> BTreeMap<String, String>;
    /// JSON schema of the answer.
    fn schema(&self) -> serde_json::Value;
    /// The schema for one input, where the input bounds the answer (the
    /// rank role: at most `n` distinct candidate numbers). Sent to the
    /// backend and used to check the answer. Default: [`Role::schema`].
    fn schema_for(&self, _input: &Self::Input) -> serde_json::Value {
        self.schema()
    }
    /// Parse and validate a JSON answer.
    fn parse(&self, input: &Self::Input, answer: serde_json::Value)
        -> Result<Self::Output, String>;
    /// The offline algorithm.
    fn offline(&self, input: &Self::Input) -> Result<Self::Output, LlmError>;
    /// Read an answer that holds no JSON at all (a model that ignored the
    /// requested format, e.g. a bare SQL statement in a code fence).
    /// `None`, the default, means the role accepts JSON only and the answer
    /// goes to the repair turn.
    fn parse_text(&self, _input: &Self::Input, _text: &str) -> Option<Self::Output> {
        None
    }
    /// Completion token limit that fits this role's answer. The executor
    /// sends the smaller of this and its configured limit (`llm.max_tokens`),
    /// so that a model that runs on (degenerate text, a profile of 2,000
    /// words) stops where a valid answer would have ended. `None`, the
    /// default, leaves the configured limit alone.
    fn max_tokens(&self) -> Option<u32> {
        None
    }
}
