//! Errors of the store layer.
//!
//! Every error that comes from a file or a server names where it came from
//! (`location`: a SQLite path, a PostgreSQL target, or `memory`), so that a
//! corrupt or foreign store is reported as "this file is bad", never as a
//! bare driver message.

use evomem_core::OpError;
use std::path::PathBuf;
use thiserror::Error;

/// Errors of the engine and the stores.
#[derive(Debug, Error)]
pub enum StoreError {
    /// An op was rejected by validation; it was not applied.
    #[error("op #{index} ({label}) rejected: {source}")]
    Rejected {
        /// Position of the op in the batch.
        index: usize,
        /// Its lifecycle label.
        label: String,
        /// Why.
        source: OpError,
    },
    /// A SQLite call failed on the store at `path`.
    #[cfg(feature = "sqlite")]
    #[error("SQLite store {}: {source}", path.display())]
    Sqlite {
        /// Database file.
        path: PathBuf,
        /// Driver error.
        source: rusqlite::Error,
    },
    /// A PostgreSQL call failed.
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL store {location}: {source}")]
    Postgres {
        /// Host, database and schema (never the password).
        location: String,
        /// Driver error.
        source: postgres::Error,
    },
    /// A file-system call failed.
    #[error("store file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store exists but its content is damaged.
    #[error("store {location} is corrupt: {detail}")]
    Corrupt {
        /// Where.
        location: String,
        /// What is wrong.
        detail: String,
    },
    /// The store was written by a newer evomem.
    #[error(
        "store {location} has on-disk format version {found}, but this build reads versions up to {supported}; upgrade evomem"
    )]
    FormatTooNew {
        /// Where.
        location: String,
        /// Version found in the store's meta table.
        found: u32,
        /// Newest version this build understands.
        supported: u32,
    },
    /// The file or schema is a database, but not an evomem store.
    #[error("{location} is not an evomem store: {detail}")]
    NotAStore {
        /// Where.
        location: String,
        /// Why we think so.
        detail: String,
    },
    /// A stored op, record or snapshot could not be decoded.
    #[error("store {location}: cannot decode {what}: {source}")]
    Decode {
        /// Where.
        location: String,
        /// Which row (e.g. `op seq 17`).
        what: String,
        /// JSON error.
        source: serde_json::Error,
    },
    /// A stored op failed to replay: the log is inconsistent.
    #[error("store {location}: op seq {seq} does not replay: {source}")]
    Replay {
        /// Where.
        location: String,
        /// Sequence number of the failing op.
        seq: u64,
        /// Why.
        source: OpError,
    },
    /// Another writer (a second service instance on the same database)
    /// committed first; nothing of this commit was stored. Catch up
    /// ([`crate::Engine::sync`]) and try again: the only error worth a
    /// retry.
    #[error("store {location}: lost a race to another writer: {detail}")]
    Conflict {
        /// Where.
        location: String,
        /// What collided.
        detail: String,
    },
    /// A write key of the commit ([`crate::Commit::keys`]) was stored
    /// before: that write was applied already, by this process or another.
    /// Nothing of this commit was stored.
    #[error("store {location}: the write with key `{key}` was committed before; nothing of this commit was stored")]
    DuplicateKey {
        /// Where.
        location: String,
        /// The key.
        key: String,
    },
    /// Bad configuration (schema name, URL, ...).
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// The op sink of a streaming engine ([`crate::Engine::ephemeral_streaming`])
    /// refused a batch (its writer stopped, for example on a full disk).
    #[error("op log sink {location}: {detail}")]
    Sink {
        /// The sink (an op log's path).
        location: String,
        /// Why.
        detail: String,
    },
}

impl StoreError {
    /// True when the commit lost a race to another writer and may be
    /// retried after catching up; every other error is final (retrying a
    /// rejection, or a failure whose outcome is unknown, could store the
    /// same write twice).
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// True when the store did not answer now but may later: a lost race,
    /// a file-system error, a SQLite file busy or locked, a PostgreSQL
    /// server unreachable, out of connections or shutting down (SQLSTATE
    /// classes 08 and 53, 57P01–57P03). A damaged or foreign store, a
    /// rejected op or bad configuration is not.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Conflict { .. } | StoreError::Io { .. } => true,
            #[cfg(feature = "sqlite")]
            StoreError::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ),
            #[cfg(feature = "postgres")]
            StoreError::Postgres { source, .. } => match source.code() {
                None => true,
                Some(c) => {
                    let c = c.code();
                    c.starts_with("08") || c.starts_with("53") || c.starts_with("57P0")
                }
            },
            _ => false,
        }
    }
}
