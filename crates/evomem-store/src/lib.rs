//! # evomem-store
//!
//! The engine that applies policy ops, and the stores that persist them.
//!
//! - [`Engine`]: validates and applies [`evomem_core::PlannedOp`]s, stamps
//!   provenance, keeps the op log, persists every batch atomically, serves
//!   namespaced reads, time travel ([`Engine::state_at`]) and
//!   [`Engine::forget_user`].
//! - [`MemoryStore`]: the durable op log with snapshots and materialised
//!   records; [`InMemoryStore`], [`SqliteStore`] (feature `sqlite`, the
//!   embedded default) and [`PostgresStore`] (feature `postgres`).
//!
//! ```
//! use evomem_core::*;
//! use evomem_store::Engine;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("memory.sqlite");
//! let rec = MemoryRecord::new(
//!     MemoryId::new("u1:pref:0"),
//!     Namespace::user("1"),
//!     RecordKind::PreferenceChunk,
//!     "likes 90s thrillers",
//!     LogicalTime(3),
//! );
//! {
//!     let mut engine = Engine::sqlite(&path).unwrap();
//!     engine
//!         .apply("mars", vec![PlannedOp::new(MemoryOp::Create { record: rec }, "extract", "rated 5")], LogicalTime(3))
//!         .unwrap(); // durable once this returns
//! }
//! let mut engine = Engine::sqlite(&path).unwrap();
//! let mine = [Namespace::user("1")];
//! assert_eq!(engine.recall_scan(&mine, None).len(), 1);
//! assert!(engine.recall_scan(&[Namespace::user("2")], None).is_empty());
//! assert!(engine.state_at(LogicalTime(2)).unwrap().is_empty());
//! ```

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod codec;
pub mod engine;
pub mod error;
pub mod in_memory;
#[cfg(feature = "postgres")]
mod pg_tls;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod reembed;
pub mod rewrite;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod store;

pub use engine::{
    Batch, Engine, Fetched, OpSink, OpTally, Staged, StoreHandle, SyncPoint, Synced,
    DEFAULT_SNAPSHOT_EVERY,
};
pub use error::StoreError;
pub use in_memory::InMemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use rewrite::ForgetReport;
#[cfg(feature = "sqlite")]
pub use sqlite::{CopyReport, SqliteStore};
pub use store::{Commit, MemoryStore, Snapshot, WriteKey, FORMAT_VERSION, WRITE_KEY_KEEP_S};
