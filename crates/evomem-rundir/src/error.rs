//! Errors of reading and writing a run folder.
//!
//! Every error names its file, and a JSON-lines error names its line too, so
//! a bad run folder says where it is bad (`OUT/mars/ops.jsonl.zst:1203: ...`).

use std::path::PathBuf;
use thiserror::Error;

/// Errors of `evomem-rundir`.
#[derive(Debug, Error)]
pub enum RunDirError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line of a JSON-lines file could not be read: an I/O error, or a
    /// truncated or corrupt zstd stream (`hint` says so for `.zst` files).
    #[error("{path}:{line}: cannot read line {line}{hint}: {source}")]
    ReadLine {
        /// The file.
        path: PathBuf,
        /// 1-based line that could not be read (the lines before it were).
        line: usize,
        /// What the failure usually means for this kind of file, or "".
        hint: &'static str,
        /// The I/O or decoder error.
        source: std::io::Error,
    },
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
    /// A setting of the folder's format has a value it does not know
    /// (`ops_log_format`).
    #[error("invalid config field `{field}`: {message}")]
    Config {
        /// The field or flag.
        field: String,
        /// Why.
        message: String,
    },
}

impl RunDirError {
    /// Wrap an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
