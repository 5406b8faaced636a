//! Errors of the arenas. Bad input names the file, the task's sample index
//! and the field; an error in the agent's SQL is never an error here (it is
//! an outcome: a failed step with the database's message).

use std::path::PathBuf;

/// Everything that can stop an arena run.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The task file is malformed.
    #[error("{path}: sample {sample}: field `{field}`: {message}")]
    BadTask {
        /// The file.
        path: PathBuf,
        /// Sample index (the JSON key), or `?` when not known.
        sample: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The task file is not JSON at all.
    #[error("{path}: not a task file: {message}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The environment could not be built (not an agent error).
    #[error("task {sample}: environment: {message}")]
    Environment {
        /// Sample index.
        sample: String,
        /// Why.
        message: String,
    },
    /// Bad arena settings.
    #[error("arena settings: {0}")]
    Config(String),
    /// A policy failed (a role backend that fails every call, ...).
    #[error(transparent)]
    Policy(#[from] evomem_core::PolicyError),
    /// The memory engine rejected an op or could not persist it.
    #[error(transparent)]
    Store(#[from] evomem_store::StoreError),
    /// A plot could not be drawn.
    #[error("plot {path}: {message}")]
    Plot {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}
