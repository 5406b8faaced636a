//! Errors of the evaluation layer (protocols, runs, reports, comparisons).
//!
//! File errors carry their path; policy and store errors carry the policy spec
//! and the phase in which they happened, so a failed run says where it failed.

use std::path::PathBuf;
use thiserror::Error;

/// Errors of `evomem-eval` outside the data loaders.
#[derive(Debug, Error)]
pub enum EvalError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Reading or writing the run folder failed (its file, and line where
    /// there is one, named).
    #[error(transparent)]
    RunDir(#[from] evomem_rundir::RunDirError),
    /// A JSON file or line could not be parsed or written.
    #[error("{path}:{line}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when the whole file is one document).
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// A configuration value is invalid.
    #[error("invalid config field `{field}`: {message}")]
    Config {
        /// The field or flag.
        field: String,
        /// Why.
        message: String,
    },
    /// The dataset cannot support the protocol.
    #[error("dataset `{dataset}`: {message}")]
    Dataset {
        /// Dataset name.
        dataset: String,
        /// Why.
        message: String,
    },
    /// Loading the data failed.
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    /// A policy call failed.
    #[error("policy `{policy}` failed during {phase}: {source}")]
    Policy {
        /// Policy spec.
        policy: String,
        /// `observe`, `recall`, `feedback`, `maintain` or `build`.
        phase: &'static str,
        /// The policy's error.
        source: evomem_core::PolicyError,
    },
    /// The engine rejected an op of a policy.
    #[error("policy `{policy}`: {source}")]
    Store {
        /// Policy spec.
        policy: String,
        /// The engine's error.
        source: evomem_store::StoreError,
    },
    /// The decider (rank role) failed.
    #[error("policy `{policy}`, decision {decision_id}: rank role failed: {source}")]
    Rank {
        /// Policy spec.
        policy: String,
        /// Decision.
        decision_id: u64,
        /// The LLM layer's error.
        source: evomem_core::LlmError,
    },
    /// The decider returned scores that do not match the candidates.
    #[error("policy `{policy}`, decision {decision_id}: {message}")]
    BadScores {
        /// Policy spec.
        policy: String,
        /// Decision.
        decision_id: u64,
        /// What was wrong.
        message: String,
    },
    /// Embedding candidate items failed.
    #[error(transparent)]
    Embed(#[from] evomem_core::EmbedError),
    /// Drawing a plot failed.
    #[error("plot {path}: {message}")]
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Two runs cannot be compared.
    #[error("cannot compare runs: {0}")]
    Compare(String),
}

impl EvalError {
    /// Wrap an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
