//! # evomem-index
//!
//! Vector indexes over memory records, keyed by [`MemoryId`] and scoped by
//! [`Namespace`]. Policies retrieve memories by meaning through the
//! [`VectorIndex`] trait; its implementations share one conformance suite:
//! - [`FlatIndex`]: exact search, a cache-friendly scan of contiguous
//!   per-namespace blocks with 8-lane dot products;
//! - [`HnswIndex`]: approximate search through `hnsw_rs`, with tombstoned
//!   removal, namespace-filtered search and an exact fallback for selective
//!   filters;
//! - [`TieredIndex`]: both as tiers, an exact store plus a graph built once
//!   the index outgrows a threshold, new vectors merged into it in batches;
//! - [`NamespacedIndex`]: the same tiers per namespace, one exact store over
//!   every namespace plus a graph for each namespace past a threshold, whose
//!   graph work can run off its owner's lock.
//!
//! Scores are dot products of unit vectors (= cosine): **greater is closer**.
//! Results are sorted by score descending, ties broken by id ascending, so the
//! output is deterministic.
//!
//! ```
//! use evomem_core::{MemoryId, Namespace};
//! use evomem_index::{FlatIndex, VectorIndex};
//! let mut idx = FlatIndex::new("toy", 2);
//! idx.add(MemoryId::new("a"), Namespace::user("1"), &[1.0, 0.0]).unwrap();
//! idx.add(MemoryId::new("b"), Namespace::user("2"), &[0.8, 0.6]).unwrap();
//! let hits = idx.search(&[1.0, 0.0], 5, &[Namespace::user("2")]).unwrap();
//! assert_eq!(hits, vec![(MemoryId::new("b"), 0.8)]);
//! ```

pub mod bench;
mod flat;
mod hnsw;
mod kernel;
mod namespaced;
mod tiered;

pub use flat::FlatIndex;
pub use hnsw::{HnswIndex, HnswParams};
pub use kernel::dot;
pub use namespaced::{BuiltGraphs, GraphWork, NamespacedIndex};
pub use tiered::{TieredIndex, TieredParams};

use evomem_core::{EmbedError, Embedding, MemoryId, Namespace, PolicyError};
use thiserror::Error;

/// Errors of a vector index.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum IndexError {
    /// A vector (stored or query) has the wrong dimension.
    #[error("dimension mismatch: index holds {expected}-d vectors, got {got}")]
    DimensionMismatch {
        /// The index's dimension.
        expected: usize,
        /// The offered vector's dimension.
        got: usize,
    },
    /// An embedding of another model was offered.
    #[error("model mismatch: index holds `{expected}` vectors, got `{got}`")]
    ModelMismatch {
        /// The index's model id.
        expected: String,
        /// The offered embedding's model id.
        got: String,
    },
    /// A vector contained NaN or infinity.
    #[error("vector for `{id}` has a non-finite component at position {position}")]
    NonFinite {
        /// The record (or `<query>`).
        id: String,
        /// First bad component.
        position: usize,
    },
}

impl From<IndexError> for EmbedError {
    fn from(e: IndexError) -> Self {
        match e {
            IndexError::DimensionMismatch { expected, got } => {
                EmbedError::DimensionMismatch { expected, got }
            }
            IndexError::ModelMismatch { expected, got } => {
                EmbedError::ModelMismatch { expected, got }
            }
            IndexError::NonFinite { .. } => EmbedError::Inference(e.to_string()),
        }
    }
}

impl From<IndexError> for PolicyError {
    fn from(e: IndexError) -> Self {
        PolicyError::Embed(e.into())
    }
}

/// A scored hit: the record and its score (greater is closer).
pub type Hit = (MemoryId, f32);

/// A top-k vector index over memory records.
///
/// Invariants every implementation keeps (checked by the conformance suite):
/// - an index holds vectors of exactly one model ([`VectorIndex::model_id`])
///   and one dimension; anything else is rejected with
///   [`IndexError::DimensionMismatch`] / [`IndexError::ModelMismatch`];
/// - `add` with an id already present replaces its vector and namespace;
/// - a removed id is never returned again (unless re-added);
/// - `search` returns at most `k` hits, only from the listed namespaces
///   (an **empty list sees nothing**; use [`VectorIndex::search_all`] for an
///   unfiltered search), sorted by score descending then id ascending.
pub trait VectorIndex: Send + Sync {
    /// Model id of the vectors held.
    fn model_id(&self) -> &str;
    /// Dimension of the vectors held.
    fn dim(&self) -> usize;
    /// Insert or replace `id`'s vector (expected L2-normalised).
    fn add(&mut self, id: MemoryId, namespace: Namespace, vector: &[f32])
        -> Result<(), IndexError>;
    /// Remove `id`; returns whether it was present.
    fn remove(&mut self, id: &MemoryId) -> bool;
    /// The `k` closest live vectors among `namespaces`.
    fn search(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
    ) -> Result<Vec<Hit>, IndexError>;
    /// The `k` closest live vectors in any namespace.
    fn search_all(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError>;
    /// Number of live vectors.
    fn len(&self) -> usize;
    /// Whether `id` is live in the index.
    fn contains(&self, id: &MemoryId) -> bool;

    /// True when the index holds no live vector.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Insert a model-tagged embedding, checking its model id first.
    fn add_embedding(
        &mut self,
        id: MemoryId,
        namespace: Namespace,
        embedding: &Embedding,
    ) -> Result<(), IndexError> {
        check_model(self.model_id(), &embedding.model)?;
        self.add(id, namespace, &embedding.vector)
    }
}

/// `Ok` when `got` is the index's model id.
pub fn check_model(expected: &str, got: &str) -> Result<(), IndexError> {
    if expected == got {
        Ok(())
    } else {
        Err(IndexError::ModelMismatch {
            expected: expected.to_string(),
            got: got.to_string(),
        })
    }
}

/// Check a vector's dimension and finiteness.
pub(crate) fn check_vector(dim: usize, id: &str, v: &[f32]) -> Result<(), IndexError> {
    if v.len() != dim {
        return Err(IndexError::DimensionMismatch {
            expected: dim,
            got: v.len(),
        });
    }
    if let Some(position) = v.iter().position(|x| !x.is_finite()) {
        return Err(IndexError::NonFinite {
            id: id.to_string(),
            position,
        });
    }
    Ok(())
}
