//! [`EmbeddingCache`]: the per-run text → vector cache that every policy
//! uses instead of a map of its own.
//!
//! Policies embed the same short texts over and over (an item's text for
//! every user who consumed it, a keyword in every note that holds it). The
//! cache embeds each distinct text once, checks the dimension, and can warm
//! many texts in one batch, which is what makes a cold run fast: one model
//! call per batch instead of per text. A persistent cache across runs sits
//! below this one, inside the embedder (`evomem-embed`'s `CachedEmbedder`).

use evomem_core::{EmbedError, Embedder};
use std::collections::HashMap;

/// Text → embedding, for one run.
#[derive(Debug, Clone)]
pub struct EmbeddingCache {
    map: HashMap<String, Vec<f32>>,
    dim: usize,
    cap: Option<usize>,
}

impl EmbeddingCache {
    /// An empty cache for vectors of `dim`, without a size limit.
    pub fn new(dim: usize) -> Self {
        Self {
            map: HashMap::new(),
            dim,
            cap: None,
        }
    }

    /// Builder: clear the cache whenever it would grow past `cap` texts
    /// (default: no limit). For texts that are mostly unique per call, where
    /// an unbounded map would only grow.
    pub fn with_cap(mut self, cap: usize) -> Self {
        self.cap = Some(cap);
        self
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of cached texts.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The cached vector of `text`, if any.
    pub fn get(&self, text: &str) -> Option<&[f32]> {
        self.map.get(text).map(Vec::as_slice)
    }

    /// The embedding of `text`, embedding it now if it is not cached.
    pub fn embed(&mut self, embedder: &dyn Embedder, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed_ref(embedder, text).map(<[f32]>::to_vec)
    }

    /// The embedding of `text` as a borrow of the cached vector, embedding
    /// it now if needed: [`EmbeddingCache::embed`] without the copy, for
    /// callers that only read it (sums of many cached members).
    pub fn embed_ref(&mut self, embedder: &dyn Embedder, text: &str) -> Result<&[f32], EmbedError> {
        if !self.map.contains_key(text) {
            let v = embedder.embed_one(text)?;
            self.check(&v)?;
            self.insert(text.to_string(), v);
        }
        self.map
            .get(text)
            .map(Vec::as_slice)
            .ok_or_else(|| EmbedError::Inference(format!("`{text}` left the cache at once")))
    }

    /// Embed every text of `texts` that is not cached yet, in one batch
    /// (distinct texts, sorted, so the batch is the same whatever the order
    /// of the request). Empty texts are skipped; texts are used as given
    /// (callers that want trimming trim first).
    pub fn warm<S: AsRef<str>>(
        &mut self,
        embedder: &dyn Embedder,
        texts: &[S],
    ) -> Result<(), EmbedError> {
        let mut need: Vec<&str> = texts
            .iter()
            .map(AsRef::as_ref)
            .filter(|t| !t.is_empty() && !self.map.contains_key(*t))
            .collect();
        need.sort_unstable();
        need.dedup();
        if need.is_empty() {
            return Ok(());
        }
        let vecs = embedder.embed(&need)?;
        if vecs.len() != need.len() {
            return Err(EmbedError::Inference(format!(
                "embedder returned {} vectors for {} texts",
                vecs.len(),
                need.len()
            )));
        }
        for v in &vecs {
            self.check(v)?;
        }
        for (t, v) in need.into_iter().zip(vecs) {
            self.insert(t.to_string(), v);
        }
        Ok(())
    }

    fn check(&self, v: &[f32]) -> Result<(), EmbedError> {
        if v.len() != self.dim {
            return Err(EmbedError::DimensionMismatch {
                expected: self.dim,
                got: v.len(),
            });
        }
        Ok(())
    }

    fn insert(&mut self, text: String, v: Vec<f32>) {
        if let Some(cap) = self.cap {
            if self.map.len() >= cap {
                self.map.clear();
            }
        }
        self.map.insert(text, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestEmbedder;

    #[test]
    fn warm_embeds_each_distinct_text_once_and_matches_single_calls() {
        let e = TestEmbedder::new(16);
        let mut c = EmbeddingCache::new(16);
        c.warm(&e, &["b b", "a", "b b", ""]).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.embed(&e, "a").unwrap(), e.embed_one("a").unwrap());
        assert_eq!(
            c.get("b b").unwrap(),
            e.embed_one("b b").unwrap().as_slice()
        );
    }

    #[test]
    fn embed_ref_borrows_what_embed_returns() {
        let e = TestEmbedder::new(16);
        let mut c = EmbeddingCache::new(16).with_cap(1);
        let want = e.embed_one("a b").unwrap();
        assert_eq!(c.embed_ref(&e, "a b").unwrap(), want.as_slice());
        assert_eq!(c.embed_ref(&e, "a b").unwrap(), want.as_slice());
        // A full capped cache clears, then holds the new text.
        assert_eq!(
            c.embed_ref(&e, "c").unwrap(),
            e.embed_one("c").unwrap().as_slice()
        );
        assert_eq!(c.len(), 1);
        let bad = EmbeddingCache::new(8).embed_ref(&e, "x").err();
        assert!(matches!(bad, Some(EmbedError::DimensionMismatch { .. })));
    }

    #[test]
    fn wrong_dimension_is_an_error() {
        let e = TestEmbedder::new(8);
        let mut c = EmbeddingCache::new(16);
        assert!(matches!(
            c.embed(&e, "x"),
            Err(EmbedError::DimensionMismatch {
                expected: 16,
                got: 8
            })
        ));
    }

    #[test]
    fn cap_clears_instead_of_growing() {
        let e = TestEmbedder::new(8);
        let mut c = EmbeddingCache::new(8).with_cap(2);
        for t in ["a", "b", "c"] {
            c.embed(&e, t).unwrap();
        }
        assert_eq!(c.len(), 1);
    }
}
