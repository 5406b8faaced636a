//! Errors of the data loaders.
//!
//! Every variant that concerns a file carries its path, and where the problem
//! sits on a line, the 1-based line and column (for tab-separated files the
//! column is the 1-based field number; for JSON lines it is the character
//! column reported by the JSON parser) or the JSON field name.

use std::path::PathBuf;
use thiserror::Error;

/// Why a dataset could not be loaded.
#[derive(Debug, Error)]
pub enum DataError {
    /// Reading a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file the format requires is absent.
    #[error("{}: missing ({what})", path.display())]
    Missing {
        /// The file (or directory) that was looked for.
        path: PathBuf,
        /// What it should contain.
        what: String,
    },
    /// A value on a line does not have the expected shape.
    #[error("{}:{line}:{column}: expected {expected}, found {found}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// 1-based column (tab-separated field number, or JSON character column).
        column: usize,
        /// What was expected there.
        expected: String,
        /// What was there instead.
        found: String,
    },
    /// A JSON field is missing, unknown or of the wrong type.
    #[error("{}:{line}: field `{field}`: expected {expected}, found {found}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The field name.
        field: String,
        /// What was expected.
        expected: String,
        /// What was there instead.
        found: String,
    },
    /// The file is well-formed but contradicts itself or another file.
    #[error("{}:{line}: {reason}", path.display())]
    Inconsistent {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0 when it concerns the whole file).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The directory does not look like any known format.
    #[error("{}: cannot detect the data format ({reason})", path.display())]
    UnknownLayout {
        /// The directory or file.
        path: PathBuf,
        /// Why detection failed.
        reason: String,
    },
    /// A `--format` name that is not known.
    #[error("unknown data format `{name}` (known: recbole, agentcf, iagent, jsonl)")]
    UnknownFormat {
        /// The name given.
        name: String,
    },
}
