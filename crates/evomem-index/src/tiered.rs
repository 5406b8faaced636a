//! A flat exact tier and an HNSW graph tier behind one [`VectorIndex`].
//!
//! Every live vector sits in a [`FlatIndex`] (the exact store). Vectors are
//! moved into an [`HnswIndex`] (the graph tier) in batches, by
//! [`TieredIndex::settle`] or when more than [`TieredParams::pending_max`]
//! wait; until then they are *pending* and a search scans them exactly and
//! merges them with the graph's hits. No graph is built while the index
//! holds at most [`TieredParams::graph_min`] vectors: small indexes answer
//! every search exactly, as a [`FlatIndex`] would (the same hits, the same
//! score bits).
//!
//! Why pending vectors: a graph insert costs about as much as a few
//! thousand exact scores, and a user of the index often changes it many
//! times between searches (AtomRec re-embeds up to three atoms per new note
//! and slides a window of recent atoms while it observes, and searches only
//! at decisions). Batching defers the inserts to the next search that
//! needs the graph, so a vector replaced or removed in the meantime is never
//! inserted at all.
//!
//! Determinism: the graph is built by sequential inserts in the order the
//! vectors were added (`hnsw_rs` seeds its level generator with a
//! constant), and batches are merged at points the caller chooses, so the
//! same sequence of calls gives the same graph and the same hits on every
//! run. Removal from the graph tier tombstones ([`HnswIndex`]).

use crate::flat::FlatIndex;
use crate::kernel::dot;
use crate::{check_vector, Hit, HnswIndex, HnswParams, IndexError, VectorIndex};
use evomem_core::{MemoryId, Namespace};
use std::collections::{BTreeMap, HashMap};

/// Parameters of a [`TieredIndex`].
#[derive(Debug, Clone, PartialEq)]
pub struct TieredParams {
    /// The graph tier is built only once the index holds more than this
    /// many live vectors; below it every search is exact. Default 2048
    /// (`HnswParams::default().exact_threshold`). `usize::MAX` keeps the
    /// index exact forever.
    pub graph_min: usize,
    /// Pending vectors `add` lets wait before it merges them into the graph
    /// itself. Default 2048 (a search's exact scan of the pending vectors
    /// stays that small); `usize::MAX` merges only at
    /// [`TieredIndex::settle`].
    pub pending_max: usize,
    /// Parameters of the graph tier.
    pub hnsw: HnswParams,
}

impl Default for TieredParams {
    fn default() -> Self {
        Self {
            graph_min: 2048,
            pending_max: 2048,
            hnsw: HnswParams::default(),
        }
    }
}

/// Flat exact tier plus a lazily merged HNSW tier. See the module docs.
pub struct TieredIndex {
    params: TieredParams,
    flat: FlatIndex,
    graph: Option<HnswIndex>,
    /// Live vectors not (yet) in the graph, by add sequence.
    pending: BTreeMap<u64, MemoryId>,
    pending_seq: HashMap<MemoryId, u64>,
    next_seq: u64,
    merges: usize,
}

impl std::fmt::Debug for TieredIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredIndex")
            .field("model_id", &self.flat.model_id())
            .field("dim", &self.flat.dim())
            .field("live", &self.flat.len())
            .field("pending", &self.pending.len())
            .field("graph", &self.graph)
            .field("params", &self.params)
            .finish()
    }
}

impl TieredIndex {
    /// An empty index with default [`TieredParams`].
    pub fn new(model_id: impl Into<String>, dim: usize) -> Self {
        Self::with_params(model_id, dim, TieredParams::default())
    }

    /// An empty index with explicit parameters.
    pub fn with_params(model_id: impl Into<String>, dim: usize, params: TieredParams) -> Self {
        Self {
            params,
            flat: FlatIndex::new(model_id, dim),
            graph: None,
            pending: BTreeMap::new(),
            pending_seq: HashMap::new(),
            next_seq: 0,
            merges: 0,
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> &TieredParams {
        &self.params
    }

    /// Change [`TieredParams::graph_min`]; takes effect at the next merge.
    pub fn set_graph_min(&mut self, graph_min: usize) {
        self.params.graph_min = graph_min;
    }

    /// The exact store of every live vector.
    pub fn flat(&self) -> &FlatIndex {
        &self.flat
    }

    /// The graph tier, once built.
    pub fn graph(&self) -> Option<&HnswIndex> {
        self.graph.as_ref()
    }

    /// Whether searches go through the graph tier.
    pub fn graph_active(&self) -> bool {
        self.graph.is_some()
    }

    /// Live vectors waiting to be merged into the graph (with no graph:
    /// every live vector).
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// How many batches were merged into the graph.
    pub fn merges(&self) -> usize {
        self.merges
    }

    /// The stored vector of `id`.
    pub fn vector(&self, id: &MemoryId) -> Option<&[f32]> {
        self.flat.vector(id)
    }

    /// Merge every pending vector into the graph (building it first when the
    /// index has outgrown [`TieredParams::graph_min`]), in add order. A no-op
    /// when nothing is pending or the index is small.
    pub fn settle(&mut self) -> Result<(), IndexError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if self.graph.is_none() {
            if self.flat.len() <= self.params.graph_min {
                return Ok(());
            }
            self.graph = Some(HnswIndex::with_params(
                self.flat.model_id(),
                self.flat.dim(),
                self.params.hnsw.clone(),
            ));
        }
        let Some(graph) = self.graph.as_mut() else {
            return Ok(());
        };
        for id in std::mem::take(&mut self.pending).into_values() {
            self.pending_seq.remove(&id);
            let (Some(ns), Some(v)) = (self.flat.namespace_of(&id), self.flat.vector(&id)) else {
                continue;
            };
            graph.add(id.clone(), ns.clone(), v)?;
        }
        self.merges += 1;
        Ok(())
    }

    /// [`VectorIndex::search_all`] for many queries: one blocked pass over
    /// the flat tier while there is no graph ([`FlatIndex::search_all_many`]),
    /// else one search per query.
    pub fn search_all_many(
        &self,
        queries: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Vec<Hit>>, IndexError> {
        if self.graph.is_none() {
            return self.flat.search_all_many(queries, k);
        }
        queries.iter().map(|q| self.search_all(q, k)).collect()
    }

    /// The exact top-`k` over `namespaces` (every namespace for `None`),
    /// whatever the tiers: the reference an approximate search is audited
    /// against.
    pub fn search_exact(
        &self,
        query: &[f32],
        k: usize,
        namespaces: Option<&[Namespace]>,
    ) -> Result<Vec<Hit>, IndexError> {
        match namespaces {
            Some(ns) => self.flat.search(query, k, ns),
            None => self.flat.search_all(query, k),
        }
    }

    /// Graph hits plus an exact scan of the pending vectors, merged.
    fn search_tiers(
        &self,
        graph: &HnswIndex,
        query: &[f32],
        k: usize,
        namespaces: Option<&[Namespace]>,
    ) -> Result<Vec<Hit>, IndexError> {
        check_vector(self.flat.dim(), "<query>", query)?;
        let mut hits = match namespaces {
            Some(ns) => graph.search(query, k, ns)?,
            None => graph.search_all(query, k)?,
        };
        for id in self.pending.values() {
            let allowed = match (namespaces, self.flat.namespace_of(id)) {
                (None, _) => true,
                (Some(list), Some(ns)) => list.contains(ns),
                (Some(_), None) => false,
            };
            if let (true, Some(v)) = (allowed, self.flat.vector(id)) {
                hits.push((id.clone(), dot(query, v)));
            }
        }
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hits.dedup_by(|a, b| a.0 == b.0);
        hits.truncate(k);
        Ok(hits)
    }

    fn forget_pending(&mut self, id: &MemoryId) -> bool {
        match self.pending_seq.remove(id) {
            Some(seq) => {
                self.pending.remove(&seq);
                true
            }
            None => false,
        }
    }
}

impl VectorIndex for TieredIndex {
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
        check_vector(self.flat.dim(), id.as_str(), vector)?;
        // A replaced vector leaves the graph (or the pending list) first.
        if !self.forget_pending(&id) {
            if let Some(g) = self.graph.as_mut() {
                g.remove(&id);
            }
        }
        self.flat.add(id.clone(), namespace, vector)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.insert(seq, id.clone());
        self.pending_seq.insert(id, seq);
        if self.pending.len() > self.params.pending_max {
            self.settle()?;
        }
        Ok(())
    }

    fn remove(&mut self, id: &MemoryId) -> bool {
        if !self.forget_pending(id) {
            if let Some(g) = self.graph.as_mut() {
                g.remove(id);
            }
        }
        self.flat.remove(id)
    }

    fn search(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
    ) -> Result<Vec<Hit>, IndexError> {
        match &self.graph {
            None => self.flat.search(query, k, namespaces),
            Some(g) => self.search_tiers(g, query, k, Some(namespaces)),
        }
    }

    fn search_all(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError> {
        match &self.graph {
            None => self.flat.search_all(query, k),
            Some(g) => self.search_tiers(g, query, k, None),
        }
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

    fn params(graph_min: usize, pending_max: usize) -> TieredParams {
        TieredParams {
            graph_min,
            pending_max,
            hnsw: HnswParams {
                ef_construction: 64,
                ..HnswParams::default()
            },
        }
    }

    /// Recall@k of the tiered index against brute force, with part of the
    /// vectors in the graph and part pending.
    #[test]
    fn tiered_search_matches_brute_force_with_high_recall() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let dim = 24;
        let mut idx = TieredIndex::with_params("m", dim, params(100, usize::MAX));
        let mut exact = FlatIndex::new("m", dim);
        let add = |i: usize, idx: &mut TieredIndex, exact: &mut FlatIndex, v: &[f32]| {
            let (id, ns) = (
                MemoryId::new(format!("a{i:04}")),
                Namespace::user(&(i % 3).to_string()),
            );
            idx.add(id.clone(), ns.clone(), v).unwrap();
            exact.add(id, ns, v).unwrap();
        };
        for i in 0..1500 {
            let v = unit(&mut rng, dim);
            add(i, &mut idx, &mut exact, &v);
        }
        assert!(!idx.graph_active());
        idx.settle().unwrap();
        assert!(idx.graph_active());
        assert_eq!(idx.pending_len(), 0);
        // Some pending vectors, some replaced, some removed.
        for i in 1500..1600 {
            let v = unit(&mut rng, dim);
            add(i, &mut idx, &mut exact, &v);
        }
        for i in (0..1600).step_by(37) {
            let v = unit(&mut rng, dim);
            add(i, &mut idx, &mut exact, &v);
        }
        for i in (5..1600).step_by(53) {
            let id = MemoryId::new(format!("a{i:04}"));
            assert_eq!(idx.remove(&id), exact.remove(&id));
        }
        assert!(idx.pending_len() > 0);
        assert_eq!(idx.len(), exact.len());
        let (mut found, mut total) = (0usize, 0usize);
        for _ in 0..50 {
            let q = unit(&mut rng, dim);
            let want = exact.search_all(&q, 15).unwrap();
            let got = idx.search_all(&q, 15).unwrap();
            assert_eq!(got.len(), want.len());
            // Every hit is live and scored exactly.
            for (id, s) in &got {
                assert_eq!(*s, dot(&q, exact.vector(id).unwrap()));
            }
            total += want.len();
            found += want
                .iter()
                .filter(|w| got.iter().any(|g| g.0 == w.0))
                .count();
            let ns = [Namespace::user("1")];
            let want = exact.search(&q, 10, &ns).unwrap();
            assert_eq!(idx.search_exact(&q, 10, Some(&ns)).unwrap(), want);
            let got = idx.search(&q, 10, &ns).unwrap();
            total += want.len();
            found += want
                .iter()
                .filter(|w| got.iter().any(|g| g.0 == w.0))
                .count();
        }
        let recall = found as f64 / total as f64;
        assert!(recall >= 0.99, "recall {recall}");
    }

    /// Below `graph_min` the index is a flat index: the same hits, the same
    /// bits.
    #[test]
    fn a_small_tiered_index_answers_exactly() {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let mut idx = TieredIndex::with_params("m", 8, params(500, 10));
        let mut exact = FlatIndex::new("m", 8);
        for i in 0..300 {
            let v = unit(&mut rng, 8);
            let id = MemoryId::new(format!("b{i}"));
            idx.add(id.clone(), Namespace::shared(), &v).unwrap();
            exact.add(id, Namespace::shared(), &v).unwrap();
        }
        idx.settle().unwrap();
        assert!(!idx.graph_active());
        for _ in 0..20 {
            let q = unit(&mut rng, 8);
            assert_eq!(
                idx.search_all(&q, 12).unwrap(),
                exact.search_all(&q, 12).unwrap()
            );
        }
    }

    /// The same calls build the same graph: identical hits on every run.
    #[test]
    fn tiered_builds_are_deterministic() {
        let build = || {
            let mut rng = ChaCha8Rng::seed_from_u64(9);
            let mut idx = TieredIndex::with_params("m", 16, params(50, 64));
            for i in 0..800 {
                let v = unit(&mut rng, 16);
                idx.add(MemoryId::new(format!("c{i}")), Namespace::shared(), &v)
                    .unwrap();
            }
            idx.settle().unwrap();
            let qs: Vec<Vec<f32>> = (0..30).map(|_| unit(&mut rng, 16)).collect();
            qs.iter()
                .map(|q| idx.search_all(q, 10).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(build(), build());
    }
}
