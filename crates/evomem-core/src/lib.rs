//! # evomem-core
//!
//! Types, traits and errors shared by every evomem layer. This crate does no
//! I/O: loaders, stores, models and servers live in the crates above it.
//!
//! The central pieces are:
//! - the data model ([`Dataset`], [`Item`], [`User`], [`Interaction`]);
//! - memory records ([`MemoryRecord`]) and the ops that change them
//!   ([`MemoryOp`], [`PlannedOp`], [`LoggedOp`]);
//! - [`MemoryState`], the one definition of how an op changes memory;
//! - the [`Policy`] trait (observe, recall, feedback, maintain) with its
//!   [`UsageTrace`];
//! - the [`Embedder`] and [`LanguageModel`]/[`Role`] seams;
//! - what each policy family can do ([`family`]: [`Capabilities`] by family
//!   name), and the anonymous label of another user's record
//!   ([`anon_label`]), so that readers of a family's output need not link
//!   the policies.
//!
//! ```
//! use evomem_core::*;
//! let mut mem = MemoryState::new();
//! let rec = MemoryRecord::new(
//!     MemoryId::new("u1:chunk:0"),
//!     Namespace::user("1"),
//!     RecordKind::PreferenceChunk,
//!     "likes 90s thrillers",
//!     LogicalTime(3),
//! );
//! mem.apply(&MemoryOp::Create { record: rec }, LogicalTime(3)).unwrap();
//! mem.apply(
//!     &MemoryOp::AdjustStrength { id: MemoryId::new("u1:chunk:0"), delta: 0.1, evidence_delta: 1 },
//!     LogicalTime(4),
//! ).unwrap();
//! assert_eq!(mem.get(&MemoryId::new("u1:chunk:0")).unwrap().evidence, 1);
//! ```

pub mod data;
pub mod embed;
pub mod error;
pub mod family;
pub mod ids;
pub mod llm;
pub mod memory;
pub mod metrics;
pub mod op;
pub mod policy;
pub mod state;
pub mod text;
pub mod view;

pub use data::{Catalog, Dataset, Interaction, Item, SplitRole, User};
pub use embed::{dot, normalize, EmbedError, Embedder};
pub use error::{OpError, PolicyError};
pub use family::Capabilities;
pub use ids::{anon_label, ItemId, LogicalTime, MemoryId, Namespace, UserId};
pub use llm::{
    ChatMessage, ChatRequest, ChatResponse, ChatRole, LanguageModel, LlmError, ResponseFormat,
    Role, Usage,
};
pub use memory::{Embedding, Link, MemoryRecord, RecordKind, RecordStatus};
pub use op::{LoggedOp, MemoryOp, PlannedOp, Provenance};
pub use policy::{
    ContextEntry, DecisionContext, DecisionKind, DecisionQuery, DecisionTag, Episode, EpisodeStep,
    EvidencePath, Feedback, ItemMemory, MaintainTrigger, Outcome, Policy, PolicyCtx, Recall,
    TaskRequest, UsageTrace, UsedMemory,
};
pub use state::MemoryState;
pub use view::{NamespaceView, RecordSource};
