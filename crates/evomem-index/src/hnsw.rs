//! Approximate search with HNSW (Malkov & Yashunin, 2018, *Efficient and
//! robust approximate nearest neighbor search using Hierarchical Navigable
//! Small World graphs*, Alg. 1–5), through the `hnsw_rs` crate.
//!
//! **Why `hnsw_rs`** (over `usearch`): it is pure Rust (no C++ toolchain or
//! `cxx` bridge, so it builds everywhere `cargo` does and adds no FFI to
//! audit), it is maintained, it supports filtered search through a predicate
//! (which is what namespace isolation needs), and its level generator is
//! seeded with a constant, so a sequential build is reproducible. It lacks
//! deletion, which we add on top:
//! - **removal** marks the graph node as a tombstone; searches filter
//!   tombstones out; when tombstones exceed
//!   [`HnswParams::rebuild_tombstone_ratio`] of the graph, it is rebuilt from
//!   the live vectors (deterministic sequential insertion);
//! - re-adding an id tombstones its old node and inserts a new one;
//! - **filtered search** (tombstones, namespaces) runs in up to three
//!   stages: (1) post-filtering, an unfiltered graph search that over-fetches
//!   in proportion to the share of nodes that may be returned; (2) if that
//!   yields fewer than `k` allowed hits, `hnsw_rs`'s predicate-filtered
//!   search; (3) if that also falls short, an exact scan of the allowed
//!   namespaces. When the allowed namespaces hold few vectors (at most
//!   [`HnswParams::exact_threshold`], or at most
//!   [`HnswParams::exact_fraction`] of the live vectors) the exact scan is
//!   used directly, because graph search under a very selective filter loses
//!   recall and an exact scan of a small set is cheaper anyway (the same
//!   trade-off qdrant makes). A search therefore never returns fewer than
//!   `min(k, allowed live vectors)` hits;
//! - hits are re-scored with the exact dot product and sorted like
//!   [`crate::FlatIndex`], so scores from both indexes agree.
//!
//! Distances handed to `hnsw_rs` are `max(0, 1 − a·b)`: its own `DistDot`
//! asserts non-negativity, which rounding on unit vectors can violate.

use crate::flat::FlatIndex;
use crate::kernel::dot;
use crate::{check_vector, Hit, IndexError, VectorIndex};
use evomem_core::{MemoryId, Namespace};
use hnsw_rs::anndists::dist::Distance;
use hnsw_rs::filter::FilterT;
use hnsw_rs::hnsw::Hnsw;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Unit-vector dot distance `max(0, 1 − a·b)`.
#[derive(Debug, Default, Clone, Copy)]
struct UnitDot;

impl Distance<f32> for UnitDot {
    fn eval(&self, va: &[f32], vb: &[f32]) -> f32 {
        (1.0 - dot(va, vb)).max(0.0)
    }
}

/// HNSW construction and search parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct HnswParams {
    /// Neighbours per node and layer (`M`). Default 16; clamped to 2..=255.
    pub max_nb_connection: usize,
    /// Candidate list size while building (`efConstruction`). Default 200.
    pub ef_construction: usize,
    /// Candidate list size while searching (`ef`); at least `k` is used.
    /// Default 64.
    pub ef_search: usize,
    /// Number of layers. Default 16.
    pub max_layer: usize,
    /// Filtered searches over at most this many vectors are exact. Default 2048.
    pub exact_threshold: usize,
    /// Filtered searches over at most this fraction of live vectors are
    /// exact. Default 0.05.
    pub exact_fraction: f64,
    /// Rebuild when tombstones exceed this fraction of graph nodes. Default 0.25.
    pub rebuild_tombstone_ratio: f64,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            max_nb_connection: 16,
            ef_construction: 200,
            ef_search: 64,
            max_layer: 16,
            exact_threshold: 2048,
            exact_fraction: 0.05,
            rebuild_tombstone_ratio: 0.25,
        }
    }
}

/// One graph node's payload; `None` once tombstoned.
type Slot = Option<(MemoryId, u32)>;

/// HNSW index with tombstoned removal and namespace filters. See the module docs.
pub struct HnswIndex {
    params: HnswParams,
    store: FlatIndex,
    graph: Hnsw<'static, f32, UnitDot>,
    slots: Vec<Slot>,
    slot_of: HashMap<MemoryId, usize>,
    ns_ids: BTreeMap<Namespace, u32>,
    tombstones: usize,
    rebuilds: usize,
}

impl std::fmt::Debug for HnswIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HnswIndex")
            .field("model_id", &self.store.model_id())
            .field("dim", &self.store.dim())
            .field("live", &self.slot_of.len())
            .field("tombstones", &self.tombstones)
            .field("params", &self.params)
            .finish()
    }
}

fn new_graph(p: &HnswParams, capacity: usize) -> Hnsw<'static, f32, UnitDot> {
    Hnsw::new(
        p.max_nb_connection.clamp(2, 255),
        capacity.max(1024),
        p.max_layer.clamp(1, 16),
        p.ef_construction.max(1),
        UnitDot,
    )
}

impl HnswIndex {
    /// An empty index with default [`HnswParams`].
    pub fn new(model_id: impl Into<String>, dim: usize) -> Self {
        Self::with_params(model_id, dim, HnswParams::default())
    }

    /// An empty index with explicit parameters.
    pub fn with_params(model_id: impl Into<String>, dim: usize, params: HnswParams) -> Self {
        Self {
            graph: new_graph(&params, 1024),
            params,
            store: FlatIndex::new(model_id, dim),
            slots: Vec::new(),
            slot_of: HashMap::new(),
            ns_ids: BTreeMap::new(),
            tombstones: 0,
            rebuilds: 0,
        }
    }

    /// Bulk-load entries into an empty index, inserting into the graph in
    /// parallel (rayon's current pool). Much faster than repeated
    /// [`VectorIndex::add`] for large sets, but the graph (and so, rarely, an
    /// approximate result) may differ between runs; use `add` when results
    /// must be reproducible bit for bit.
    pub fn bulk_load<'a, I>(
        model_id: impl Into<String>,
        dim: usize,
        params: HnswParams,
        entries: I,
    ) -> Result<Self, IndexError>
    where
        I: IntoIterator<Item = (MemoryId, Namespace, &'a [f32])>,
    {
        let mut idx = Self::with_params(model_id, dim, params);
        for (id, ns, v) in entries {
            check_vector(dim, id.as_str(), v)?;
            idx.remove(&id);
            idx.store.add(id.clone(), ns.clone(), v)?;
            let nsid = idx.intern(&ns);
            let slot = idx.slots.len();
            idx.slots.push(Some((id.clone(), nsid)));
            idx.slot_of.insert(id, slot);
        }
        idx.graph = new_graph(&idx.params, idx.slots.len());
        let mut vectors: Vec<(Vec<f32>, usize)> = Vec::with_capacity(idx.slot_of.len());
        for (slot, s) in idx.slots.iter().enumerate() {
            if let Some((id, _)) = s {
                if let Some(v) = idx.store.vector(id) {
                    vectors.push((v.to_vec(), slot));
                }
            }
        }
        let refs: Vec<(&Vec<f32>, usize)> = vectors.iter().map(|(v, s)| (v, *s)).collect();
        idx.graph.parallel_insert(&refs);
        Ok(idx)
    }

    /// The parameters in force.
    pub fn params(&self) -> &HnswParams {
        &self.params
    }

    /// Change the search-time candidate list size (`ef`).
    pub fn set_ef_search(&mut self, ef: usize) {
        self.params.ef_search = ef.max(1);
    }

    /// The exact store (vectors by namespace) behind the graph.
    pub fn store(&self) -> &FlatIndex {
        &self.store
    }

    fn intern(&mut self, ns: &Namespace) -> u32 {
        let next = u32::try_from(self.ns_ids.len()).unwrap_or(u32::MAX);
        *self.ns_ids.entry(ns.clone()).or_insert(next)
    }

    /// Rebuild the graph from live vectors, sequentially, in slot order.
    fn rebuild(&mut self) {
        let live: Vec<(MemoryId, u32)> = self.slots.iter().flatten().cloned().collect();
        self.graph = new_graph(&self.params, live.len());
        self.slots = Vec::with_capacity(live.len());
        self.slot_of.clear();
        for (id, nsid) in live {
            let slot = self.slots.len();
            if let Some(v) = self.store.vector(&id) {
                self.graph.insert_slice((v, slot));
            }
            self.slots.push(Some((id.clone(), nsid)));
            self.slot_of.insert(id, slot);
        }
        self.tombstones = 0;
        self.rebuilds += 1;
    }

    fn maybe_rebuild(&mut self) {
        let nodes = self.slots.len();
        if self.tombstones > 0
            && self.tombstones as f64 > self.params.rebuild_tombstone_ratio * nodes as f64
        {
            self.rebuild();
        }
    }

    fn search_impl(
        &self,
        query: &[f32],
        k: usize,
        namespaces: Option<&[Namespace]>,
    ) -> Result<Vec<Hit>, IndexError> {
        check_vector(self.store.dim(), "<query>", query)?;
        let live = self.slot_of.len();
        if k == 0 || live == 0 {
            return Ok(Vec::new());
        }
        let allowed: Option<BTreeSet<u32>> = match namespaces {
            None => None,
            Some(list) => {
                let set: BTreeSet<u32> = list
                    .iter()
                    .filter_map(|ns| self.ns_ids.get(ns).copied())
                    .collect();
                let selected: usize = list
                    .iter()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .map(|ns| self.store.namespace_len(ns))
                    .sum();
                if selected == 0 {
                    return Ok(Vec::new());
                }
                let small = selected <= self.params.exact_threshold
                    || (selected as f64) <= self.params.exact_fraction * live as f64;
                if small {
                    return self.store.search_in(query, k, Some(list));
                }
                if selected == live {
                    None
                } else {
                    Some(set)
                }
            }
        };
        if live <= k {
            return self.store.search_in(query, k, namespaces);
        }
        let selected = match (&allowed, namespaces) {
            (Some(_), Some(list)) => list
                .iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(|ns| self.store.namespace_len(ns))
                .sum(),
            _ => live,
        };
        let want = k.min(selected);
        let ef = self.params.ef_search.max(k);
        // 1. Post-filtering: over-fetch from the plain graph search in
        //    proportion to the share of graph nodes that may be returned.
        let share = selected as f64 / self.slots.len().max(1) as f64;
        let fetch = ((k as f64 / share.max(1e-9)).ceil() as usize).clamp(k, ef.saturating_mul(4));
        let plain = self.graph.search(query, fetch, ef.max(fetch));
        let hits = self.collect_hits(query, &plain, allowed.as_ref(), k);
        if hits.len() >= want {
            return Ok(hits);
        }
        // 2. Filtered graph search (tombstones and namespaces as a predicate).
        let slots = &self.slots;
        let f = |d: &usize| {
            slots
                .get(*d)
                .and_then(|s| s.as_ref())
                .is_some_and(|(_, ns)| allowed.as_ref().is_none_or(|set| set.contains(ns)))
        };
        let filter: &dyn FilterT = &f;
        let filtered = self
            .graph
            .search_filter(query, k, ef.saturating_mul(2), Some(filter));
        let hits = self.collect_hits(query, &filtered, allowed.as_ref(), k);
        if hits.len() >= want {
            return Ok(hits);
        }
        // 3. The graph could not reach enough allowed nodes: answer exactly.
        self.store.search_in(query, k, namespaces)
    }

    /// Map graph neighbours to live, allowed hits with exact scores, sorted
    /// like `FlatIndex` and truncated to `k`.
    fn collect_hits(
        &self,
        query: &[f32],
        neighbours: &[hnsw_rs::hnsw::Neighbour],
        allowed: Option<&BTreeSet<u32>>,
        k: usize,
    ) -> Vec<Hit> {
        let mut hits: Vec<Hit> = neighbours
            .iter()
            .filter_map(|n| {
                let (id, nsid) = self.slots.get(n.get_origin_id())?.as_ref()?;
                if allowed.is_some_and(|set| !set.contains(nsid)) {
                    return None;
                }
                let v = self.store.vector(id)?;
                Some((id.clone(), dot(query, v)))
            })
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hits.dedup_by(|a, b| a.0 == b.0);
        hits.truncate(k);
        hits
    }
}

impl VectorIndex for HnswIndex {
    fn model_id(&self) -> &str {
        self.store.model_id()
    }
    fn dim(&self) -> usize {
        self.store.dim()
    }
    fn add(
        &mut self,
        id: MemoryId,
        namespace: Namespace,
        vector: &[f32],
    ) -> Result<(), IndexError> {
        check_vector(self.store.dim(), id.as_str(), vector)?;
        self.remove(&id);
        self.store.add(id.clone(), namespace.clone(), vector)?;
        let nsid = self.intern(&namespace);
        let slot = self.slots.len();
        self.graph.insert_slice((vector, slot));
        self.slots.push(Some((id.clone(), nsid)));
        self.slot_of.insert(id, slot);
        Ok(())
    }

    fn remove(&mut self, id: &MemoryId) -> bool {
        let Some(slot) = self.slot_of.remove(id) else {
            return false;
        };
        if let Some(s) = self.slots.get_mut(slot) {
            *s = None;
        }
        self.store.remove(id);
        self.tombstones += 1;
        self.maybe_rebuild();
        true
    }

    fn search(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
    ) -> Result<Vec<Hit>, IndexError> {
        self.search_impl(query, k, Some(namespaces))
    }

    fn search_all(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError> {
        self.search_impl(query, k, None)
    }

    fn len(&self) -> usize {
        self.slot_of.len()
    }

    fn contains(&self, id: &MemoryId) -> bool {
        self.slot_of.contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{synth_centres, synth_vectors};
    use rand::SeedableRng;

    /// Removing a third of the graph's nodes (over `rebuild_tombstone_ratio`
    /// 0.2) rebuilds it: the tombstones are reclaimed and search still
    /// finds the live vectors.
    #[test]
    fn hnsw_rebuilds_after_many_removals() {
        let mut idx = HnswIndex::with_params(
            "m",
            8,
            HnswParams {
                rebuild_tombstone_ratio: 0.2,
                ..HnswParams::default()
            },
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let centres = synth_centres(&mut rng, 3, 8);
        let data = synth_vectors(&mut rng, 300, 8, &centres, 0.35);
        let vs: Vec<&[f32]> = data.chunks(8).collect();
        let id = |i: usize| MemoryId::new(i.to_string());
        for (i, v) in vs.iter().enumerate() {
            idx.add(id(i), Namespace::shared(), v).unwrap();
        }
        for i in 0..100 {
            idx.remove(&id(i));
        }
        assert!(idx.rebuilds >= 1);
        assert!(idx.tombstones < 60);
        assert_eq!(idx.len(), 200);
        let hits = idx.search_all(vs[150], 1).unwrap();
        assert_eq!(hits[0].0, id(150));
    }
}
