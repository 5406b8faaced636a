//! The one deterministic test embedder (feature `test-utils`).
//!
//! Bag-of-words feature hashing: every alphanumeric word of a text (lower
//! case) adds 1 to bucket `fnv1a(word) mod dim`, and the vector is
//! L2-normalised. Texts that share words are close, texts that share none
//! are orthogonal (up to hash collisions), so tests can reason about
//! similarity without a model. Tests in every crate use this one, so that
//! a test's expectations do not depend on which copy it imported.

use evomem_core::{normalize, EmbedError, Embedder};

/// A feature-hashing embedder for tests.
#[derive(Debug, Clone)]
pub struct TestEmbedder {
    dim: usize,
    id: String,
}

impl TestEmbedder {
    /// Vectors of `dim` buckets.
    pub fn new(dim: usize) -> Self {
        Self {
            dim: dim.max(1),
            id: format!("test-hash-{dim}"),
        }
    }
}

impl Default for TestEmbedder {
    /// 64 buckets.
    fn default() -> Self {
        Self::new(64)
    }
}

/// FNV-1a of a word.
fn fnv1a(w: &str) -> u64 {
    w.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Embedder for TestEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; self.dim];
                for w in t
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                {
                    v[(fnv1a(w) % self.dim as u64) as usize] += 1.0;
                }
                normalize(&mut v);
                v
            })
            .collect())
    }
}
