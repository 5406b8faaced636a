//! The `Embedder` seam: text in, L2-normalised vectors out.
//!
//! Implementations live in `evomem-embed` (MiniLM through candle, a feature
//! hashing embedder with no weights, a persistent cache). The trait is here so
//! that policies can depend on it without pulling in model code.

use std::sync::Arc;
use thiserror::Error;

/// Errors from embedding or from mixing embeddings.
#[derive(Debug, Error)]
pub enum EmbedError {
    /// A vector has the wrong dimension for the index or model.
    #[error("dimension mismatch: expected {expected}, got {got}")]
    DimensionMismatch {
        /// Expected dimension.
        expected: usize,
        /// Dimension seen.
        got: usize,
    },
    /// Vectors of two different models were mixed.
    #[error("model mismatch: expected `{expected}`, got `{got}`")]
    ModelMismatch {
        /// Model id the index was built with.
        expected: String,
        /// Model id offered.
        got: String,
    },
    /// Loading a model failed.
    #[error("cannot load model from {path}: {reason}")]
    Load {
        /// Model folder or file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Inference failed.
    #[error("embedding failed: {0}")]
    Inference(String),
    /// The cache could not be read or written.
    #[error("embedding cache {path}: {reason}")]
    Cache {
        /// Cache file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Turns texts into L2-normalised vectors.
///
/// Invariants: `embed(texts).len() == texts.len()`, every vector has length
/// [`Embedder::dim`] and unit L2 norm (or is all zeros for empty input), and
/// the same text always gives the same vector for the same `model_id`.
pub trait Embedder: Send + Sync {
    /// Stable model id; vectors of different ids must never be compared.
    fn model_id(&self) -> &str;
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Embed a batch.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// Embed one text.
    fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(&[text])?
            .pop()
            .ok_or_else(|| EmbedError::Inference("empty batch result".into()))
    }
}

impl<T: Embedder + ?Sized> Embedder for Box<T> {
    fn model_id(&self) -> &str {
        (**self).model_id()
    }
    fn dim(&self) -> usize {
        (**self).dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed(texts)
    }
}

impl<T: Embedder + ?Sized> Embedder for Arc<T> {
    fn model_id(&self) -> &str {
        (**self).model_id()
    }
    fn dim(&self) -> usize {
        (**self).dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed(texts)
    }
}

/// Dot product of two equal-length slices (cosine for unit vectors).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Normalise in place to unit L2 norm; leaves an all-zero vector unchanged.
pub fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        for x in v.iter_mut() {
            *x /= n;
        }
    }
}
