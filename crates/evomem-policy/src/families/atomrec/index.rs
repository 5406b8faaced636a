//! AtomRec's vector index over its atoms: exact search for small pools, HNSW
//! for large ones, namespaces as filters.
//!
//! Every neighbour search of AtomRec is scoped: linking searches the owner's
//! namespace (`user:<token>`) and the item's (`item:<token>`), retrieval the
//! owner's namespace alone. [`AtomIndex`] keeps every atom in an exact
//! [`FlatIndex`] (contiguous per-namespace blocks, so a scoped search scans
//! only the pool it may see). A namespace that grows past
//! [`HNSW_MIN_POOL`] atoms is also moved into an [`HnswIndex`], and searches
//! that name it go through the graph with a namespace filter; the flat copy
//! stays, as the exact store that vectors are read from.
//!
//! Why a per-pool threshold and not one index for all: a search never spans
//! the whole memory, so an HNSW graph over all atoms would be built and kept
//! up to date (every evolution re-embeds up to three atoms) for searches that
//! are exact scans of a few hundred vectors anyway; `HnswIndex` itself answers
//! filters that select at most 2048 vectors exactly. On ml-100k the largest
//! user holds 737 atoms, so every search there is exact.

use evomem_core::{MemoryId, Namespace};
use evomem_index::{FlatIndex, Hit, HnswIndex, HnswParams, IndexError, VectorIndex};
use std::collections::BTreeSet;

/// Namespaces holding more atoms than this are searched through HNSW; smaller
/// ones exactly. 2048 is `HnswParams::default().exact_threshold`, the size up
/// to which the index's own filtered search prefers an exact scan.
pub const HNSW_MIN_POOL: usize = 2048;

/// Exact flat index plus HNSW for large namespaces. See the module docs.
#[derive(Debug)]
pub struct AtomIndex {
    flat: FlatIndex,
    hnsw: Option<HnswIndex>,
    in_hnsw: BTreeSet<Namespace>,
    min_pool: usize,
}

impl AtomIndex {
    /// An empty index for `dim`-dimensional vectors of model `model_id`, with
    /// the [`HNSW_MIN_POOL`] threshold.
    pub fn new(model_id: impl Into<String>, dim: usize) -> Self {
        Self::with_min_pool(model_id, dim, HNSW_MIN_POOL)
    }

    /// As [`AtomIndex::new`], moving namespaces of more than `min_pool` atoms
    /// into HNSW (tests use a small value).
    pub fn with_min_pool(model_id: impl Into<String>, dim: usize, min_pool: usize) -> Self {
        Self {
            flat: FlatIndex::new(model_id, dim),
            hnsw: None,
            in_hnsw: BTreeSet::new(),
            min_pool,
        }
    }

    /// The stored vector of `id`.
    pub fn vector(&self, id: &MemoryId) -> Option<&[f32]> {
        self.flat.vector(id)
    }

    /// The namespace of `id`.
    pub fn namespace_of(&self, id: &MemoryId) -> Option<&Namespace> {
        self.flat.namespace_of(id)
    }

    /// Number of atoms in `namespace`.
    pub fn namespace_len(&self, namespace: &Namespace) -> usize {
        self.flat.namespace_len(namespace)
    }

    /// [`VectorIndex::search_all`] for many queries in one pass, with the
    /// same hits ([`FlatIndex::search_all_many`]).
    pub fn search_all_many(
        &self,
        queries: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Vec<Hit>>, IndexError> {
        self.flat.search_all_many(queries, k)
    }

    /// Namespaces currently searched through HNSW.
    pub fn hnsw_namespaces(&self) -> &BTreeSet<Namespace> {
        &self.in_hnsw
    }

    /// Move `namespace` into the HNSW index (sequential inserts, so the graph
    /// is the same on every run).
    fn promote(&mut self, namespace: &Namespace) -> Result<(), IndexError> {
        // The pool of a promoted namespace is large by definition: search it
        // through the graph, not with the index's exact fallback.
        let params = HnswParams {
            exact_threshold: self.min_pool,
            exact_fraction: 0.0,
            ..HnswParams::default()
        };
        let (model, dim) = (self.flat.model_id().to_string(), self.flat.dim());
        let hnsw = self
            .hnsw
            .get_or_insert_with(|| HnswIndex::with_params(model, dim, params));
        for (id, ns, v) in self.flat.iter() {
            if ns == namespace {
                hnsw.add(id.clone(), ns.clone(), v)?;
            }
        }
        self.in_hnsw.insert(namespace.clone());
        Ok(())
    }
}

impl VectorIndex for AtomIndex {
    fn model_id(&self) -> &str {
        self.flat.model_id()
    }

    fn dim(&self) -> usize {
        self.flat.dim()
    }

    fn add(
        &mut self,
        id: MemoryId,
        namespace: Namespace,
        vector: &[f32],
    ) -> Result<(), IndexError> {
        // A re-added id may move namespaces: drop it from HNSW first.
        if let Some(h) = self.hnsw.as_mut() {
            h.remove(&id);
        }
        self.flat.add(id.clone(), namespace.clone(), vector)?;
        if self.in_hnsw.contains(&namespace) {
            if let Some(h) = self.hnsw.as_mut() {
                h.add(id, namespace, vector)?;
            }
        } else if self.flat.namespace_len(&namespace) > self.min_pool {
            self.promote(&namespace)?;
        }
        Ok(())
    }

    fn remove(&mut self, id: &MemoryId) -> bool {
        if let Some(h) = self.hnsw.as_mut() {
            h.remove(id);
        }
        self.flat.remove(id)
    }

    /// Exact over the small namespaces, HNSW over the promoted ones, merged
    /// by score descending then id ascending.
    fn search(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
    ) -> Result<Vec<Hit>, IndexError> {
        let (big, small): (Vec<Namespace>, Vec<Namespace>) = namespaces
            .iter()
            .cloned()
            .partition(|ns| self.in_hnsw.contains(ns));
        let mut hits = if small.is_empty() {
            Vec::new()
        } else {
            self.flat.search(query, k, &small)?
        };
        if let (false, Some(h)) = (big.is_empty(), self.hnsw.as_ref()) {
            hits.extend(h.search(query, k, &big)?);
            hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            hits.truncate(k);
        }
        Ok(hits)
    }

    /// Exact over every atom (AtomRec never searches unscoped).
    fn search_all(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError> {
        self.flat.search_all(query, k)
    }

    fn len(&self) -> usize {
        self.flat.len()
    }

    fn contains(&self, id: &MemoryId) -> bool {
        self.flat.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn unit(rng: &mut ChaCha8Rng, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        evomem_core::normalize(&mut v);
        v
    }

    #[test]
    fn large_namespaces_move_to_hnsw_with_high_recall_and_small_ones_stay_exact() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let dim = 16;
        let mut idx = AtomIndex::with_min_pool("m", dim, 100);
        let mut exact = FlatIndex::new("m", dim);
        for i in 0..400 {
            let ns = if i % 10 == 0 {
                Namespace::user("small")
            } else {
                Namespace::user("big")
            };
            let v = unit(&mut rng, dim);
            let id = MemoryId::new(format!("a{i:03}"));
            idx.add(id.clone(), ns.clone(), &v).unwrap();
            exact.add(id, ns, &v).unwrap();
        }
        assert!(idx.hnsw_namespaces().contains(&Namespace::user("big")));
        assert!(!idx.hnsw_namespaces().contains(&Namespace::user("small")));
        let (mut found, mut total) = (0usize, 0usize);
        for _ in 0..20 {
            let q = unit(&mut rng, dim);
            let small = [Namespace::user("small")];
            assert_eq!(
                idx.search(&q, 5, &small).unwrap(),
                exact.search(&q, 5, &small).unwrap()
            );
            let both = [Namespace::user("big"), Namespace::user("small")];
            let want = exact.search(&q, 10, &both).unwrap();
            let got = idx.search(&q, 10, &both).unwrap();
            total += want.len();
            found += want
                .iter()
                .filter(|w| got.iter().any(|g| g.0 == w.0))
                .count();
        }
        assert!(found as f64 / total as f64 > 0.9, "recall {found}/{total}");
        // Removal reaches both tiers.
        let gone = MemoryId::new("a001");
        assert!(idx.remove(&gone));
        assert!(!idx.contains(&gone));
    }
}
