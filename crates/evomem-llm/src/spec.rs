//! Backend specs and the `[llm]` configuration table.
//!
//! A backend spec is a string: `offline`; `openai:<model>@<base_url>` for
//! any server speaking the OpenAI chat-completions API (a hosted API, vLLM,
//! llama.cpp's `llama-server`, Ollama); or `gguf:<path>` for a GGUF model
//! run in process (crate `evomem-gguf`, feature `gguf` of this crate). The base URL is used as given when it
//! ends in `/chat/completions`; `/chat/completions` is appended when it ends
//! in `/v1`; otherwise `/v1/chat/completions` is appended.
//!
//! Roles are configured one by one in TOML:
//!
//! ```toml
//! [llm]
//! default = "offline"            # backend of every role not listed below
//! api_key_env = "OPENAI_API_KEY" # env var holding the key (never logged)
//! timeout_s = 60.0
//! [llm.roles]
//! rank = "openai:qwen2.5-7b-instruct@http://127.0.0.1:8080/v1"
//! extract = "offline"
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// A parsed backend spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSpec {
    /// Run the role's offline algorithm.
    Offline,
    /// An OpenAI-compatible chat-completions server.
    OpenAi {
        /// Model name sent in the request body.
        model: String,
        /// Base URL, e.g. `http://127.0.0.1:8080/v1`.
        base_url: String,
    },
    /// A GGUF model file run in process.
    Gguf {
        /// The file.
        path: String,
    },
}

/// Errors in a spec or in the `[llm]` table.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SpecError {
    /// A backend spec that is neither `offline` nor `openai:<model>@<url>`.
    #[error("bad LLM backend spec `{spec}` for {field}: {reason} (expected `offline`, `openai:<model>@<base_url>` or `gguf:<path>`)")]
    BadSpec {
        /// Where it came from (`--llm`, `llm.roles.rank`, ...).
        field: String,
        /// The spec.
        spec: String,
        /// Why.
        reason: String,
    },
    /// The TOML could not be parsed (the message names line and column).
    #[error("{origin}: {message}")]
    Toml {
        /// File path or other origin.
        origin: String,
        /// Parser message with line and column.
        message: String,
    },
    /// A value out of range.
    #[error("{origin}: field `llm.{field}`: {reason}")]
    BadValue {
        /// File path or other origin.
        origin: String,
        /// Field.
        field: String,
        /// Why.
        reason: String,
    },
}

impl BackendSpec {
    /// Parse a spec; `field` names its origin in errors.
    pub fn parse(spec: &str, field: &str) -> Result<Self, SpecError> {
        let bad = |reason: &str| SpecError::BadSpec {
            field: field.to_string(),
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let s = spec.trim();
        if s == "offline" {
            return Ok(Self::Offline);
        }
        if let Some(path) = s.strip_prefix("gguf:") {
            if path.is_empty() {
                return Err(bad("empty GGUF path"));
            }
            return Ok(Self::Gguf {
                path: path.to_string(),
            });
        }
        let Some(rest) = s.strip_prefix("openai:") else {
            return Err(bad("unknown backend kind"));
        };
        let Some((model, url)) = rest.split_once('@') else {
            return Err(bad("missing `@<base_url>`"));
        };
        if model.is_empty() {
            return Err(bad("empty model name"));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad("base URL must start with http:// or https://"));
        }
        Ok(Self::OpenAi {
            model: model.to_string(),
            base_url: url.trim_end_matches('/').to_string(),
        })
    }
}

/// The full chat-completions endpoint for a base URL (see the module docs).
pub fn endpoint(base_url: &str) -> String {
    let b = base_url.trim_end_matches('/');
    if b.ends_with("/chat/completions") {
        b.to_string()
    } else if b.ends_with("/v1") {
        format!("{b}/chat/completions")
    } else {
        format!("{b}/v1/chat/completions")
    }
}

/// A secret (an API key) that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

/// The `[llm]` table. Every field has a default (shown in its doc); the
/// schema (`JsonSchema`, the docs as descriptions) is what the binary's
/// settings reference is generated from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Backend of every role not in `roles`. Default `offline`.
    pub default: String,
    /// Per-role backend specs. Default empty.
    pub roles: BTreeMap<String, String>,
    /// Environment variable holding the API key; when unset or empty no
    /// `Authorization` header is sent. Default `OPENAI_API_KEY`. The binary
    /// reads it into [`Self::api_key`]; this library reads no environment.
    pub api_key_env: String,
    /// The key itself, resolved by the binary; never written out or printed.
    #[serde(skip)]
    pub api_key: Option<Secret>,
    /// Per-request timeout in seconds. Default 60.
    pub timeout_s: f64,
    /// Most requests in flight per backend. Default 4.
    pub max_concurrency: usize,
    /// Retries of a transient failure. Default 4.
    pub max_retries: u32,
    /// First backoff delay in milliseconds (doubles each retry, jittered).
    /// Default 500.
    pub backoff_base_ms: u64,
    /// Backoff ceiling in milliseconds. Default 30000.
    pub backoff_max_ms: u64,
    /// Completion token limit sent with every request; a role with a
    /// smaller limit of its own sends that (`Role::max_tokens`). Default 1024.
    pub max_tokens: Option<u32>,
    /// Tokens (prompt plus completion, all roles) a model may be charged
    /// per user; a call that would pass it is answered offline, counted as
    /// `capped` and reported. Default none (no cap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_token_cap: Option<u64>,
    /// Response format sent: `json_schema` (default); `gbnf`, the role's
    /// schema as a compact llama.cpp grammar (no free whitespace, bounded
    /// numbers; for llama-server); `json_object`; or `none` for servers
    /// that reject structured output.
    pub response_format: String,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            default: "offline".to_string(),
            roles: BTreeMap::new(),
            api_key_env: "OPENAI_API_KEY".to_string(),
            api_key: None,
            timeout_s: 60.0,
            max_concurrency: 4,
            max_retries: 4,
            backoff_base_ms: 500,
            backoff_max_ms: 30_000,
            max_tokens: Some(1024),
            user_token_cap: None,
            response_format: "json_schema".to_string(),
        }
    }
}

#[derive(Deserialize)]
struct Doc {
    #[serde(default)]
    llm: Option<toml::Value>,
}

impl LlmConfig {
    /// All roles on one backend spec, other settings at their defaults.
    pub fn from_spec(spec: &str) -> Self {
        Self {
            default: spec.to_string(),
            ..Self::default()
        }
    }

    /// Read the `[llm]` table of a TOML document (other tables are ignored;
    /// a missing table gives the defaults). `origin` (a file path) names the
    /// source in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, SpecError> {
        let doc: Doc = toml::from_str(text).map_err(|e| SpecError::Toml {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        let cfg = match doc.llm {
            None => Self::default(),
            Some(v) => v.try_into().map_err(|e: toml::de::Error| SpecError::Toml {
                origin: origin.to_string(),
                message: format!("in [llm]: {e}"),
            })?,
        };
        cfg.validate(origin)?;
        Ok(cfg)
    }

    /// Check ranges and parse every spec.
    pub fn validate(&self, origin: &str) -> Result<(), SpecError> {
        let bad = |field: &str, reason: &str| SpecError::BadValue {
            origin: origin.to_string(),
            field: field.to_string(),
            reason: reason.to_string(),
        };
        BackendSpec::parse(&self.default, "llm.default")?;
        for (role, spec) in &self.roles {
            BackendSpec::parse(spec, &format!("llm.roles.{role}"))?;
        }
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0) {
            return Err(bad("timeout_s", "must be a positive number of seconds"));
        }
        if self.max_concurrency == 0 {
            return Err(bad("max_concurrency", "must be at least 1"));
        }
        if !matches!(
            self.response_format.as_str(),
            "json_schema" | "gbnf" | "json_object" | "none"
        ) {
            return Err(bad(
                "response_format",
                "must be json_schema, gbnf, json_object or none",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(
            BackendSpec::parse("offline", "--llm").unwrap(),
            BackendSpec::Offline
        );
        assert_eq!(
            BackendSpec::parse("openai:llama3:8b@http://127.0.0.1:11434/", "--llm").unwrap(),
            BackendSpec::OpenAi {
                model: "llama3:8b".into(),
                base_url: "http://127.0.0.1:11434".into()
            }
        );
        let e = BackendSpec::parse("openai:gpt", "--llm").unwrap_err();
        assert!(e.to_string().contains("--llm") && e.to_string().contains("@"));
        assert!(BackendSpec::parse("claude:x@http://a", "f").is_err());
        assert!(BackendSpec::parse("openai:m@ftp://a", "f").is_err());
        assert_eq!(
            BackendSpec::parse("gguf:/models/smol.gguf", "--llm").unwrap(),
            BackendSpec::Gguf {
                path: "/models/smol.gguf".into()
            }
        );
        assert!(BackendSpec::parse("gguf:", "--llm").is_err());
    }

    #[test]
    fn endpoints() {
        assert_eq!(endpoint("http://h:1/v1"), "http://h:1/v1/chat/completions");
        assert_eq!(endpoint("http://h:1"), "http://h:1/v1/chat/completions");
        assert_eq!(
            endpoint("http://h/x/chat/completions"),
            "http://h/x/chat/completions"
        );
    }

    #[test]
    fn toml_roles_and_errors() {
        let c = LlmConfig::from_toml_str(
            "[data]\nx = 1\n[llm]\ntimeout_s = 5.0\n[llm.roles]\nrank = \"openai:m@http://127.0.0.1:9/v1\"\nextract = \"offline\"\n",
            "cfg.toml",
        )
        .unwrap();
        assert_eq!(c.default, "offline");
        assert_eq!(c.roles.len(), 2);
        assert_eq!(c.timeout_s, 5.0);
        let e = LlmConfig::from_toml_str("[llm]\ntimeout = 5\n", "cfg.toml").unwrap_err();
        assert!(
            e.to_string().contains("cfg.toml") && e.to_string().contains("timeout"),
            "{e}"
        );
        let e = LlmConfig::from_toml_str("[llm.roles]\nrank = \"nope\"\n", "cfg.toml").unwrap_err();
        assert!(e.to_string().contains("llm.roles.rank"), "{e}");
        let e = LlmConfig::from_toml_str("[llm]\nmax_concurrency = 0\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("max_concurrency"), "{e}");
        let e = LlmConfig::from_toml_str("[llm\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
    }
}
