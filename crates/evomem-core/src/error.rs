//! Errors of the core layer.

use crate::ids::MemoryId;
use thiserror::Error;

/// Why an op could not be applied. Applying a failing op changes nothing.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum OpError {
    /// The op names a record that does not exist.
    #[error("unknown memory record {id}")]
    UnknownRecord {
        /// The missing id.
        id: MemoryId,
    },
    /// A create reused an existing id.
    #[error("memory record {id} already exists")]
    DuplicateId {
        /// The id.
        id: MemoryId,
    },
    /// A numeric field was NaN or infinite.
    #[error("non-finite value in field `{field}`")]
    NonFinite {
        /// Field name.
        field: &'static str,
    },
    /// Anything else that makes the op meaningless.
    #[error("invalid op: {reason}")]
    Invalid {
        /// Why.
        reason: String,
    },
}

/// Errors a policy may return.
#[derive(Debug, Error)]
pub enum PolicyError {
    /// An op the policy built was rejected.
    #[error(transparent)]
    Op(#[from] OpError),
    /// Embedding failed.
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
    /// An LLM role failed and could not fall back.
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    /// The policy was configured with bad values.
    #[error("invalid policy config: {0}")]
    Config(String),
    /// An LLM role failed in a way that must fail the run (a permanent
    /// error such as a wrong key, a replay-only cache miss, an offline
    /// algorithm that failed, or a backend that failed every call).
    #[error("role `{role}` failed: {source}")]
    Role {
        /// Role name.
        role: String,
        /// The hub's error.
        source: crate::llm::LlmError,
    },
    /// The policy cannot serve this kind of decision.
    #[error("policy `{policy}` does not serve `{decision}` decisions")]
    Unsupported {
        /// Policy name.
        policy: String,
        /// The decision kind.
        decision: crate::policy::DecisionTag,
    },
    /// The caller referenced something the policy does not know.
    #[error("{0}")]
    Other(String),
}
