//! One exact store over every namespace plus an HNSW graph tier for each
//! namespace that outgrows a threshold, behind one [`VectorIndex`].
//!
//! Why: the users of this index (AtomRec's atoms, a serve tenant's
//! memories) search one or two namespaces at a time (a user, an item), and
//! most namespaces hold tens to a few thousand vectors, where an exact scan
//! of a contiguous block takes microseconds and inserts cost nothing. A
//! graph pays only for a large namespace, so each namespace gets its own
//! graph tier ([`TieredParams`]: built once the namespace holds more than
//! `graph_min` vectors, new vectors pending until merged), the same tier
//! logic as [`crate::TieredIndex`]'s over its whole index. Small namespaces
//! answer exactly, as a [`FlatIndex`] would (the same hits, the same bits).
//!
//! A large batch need not update graphs under its owner's lock:
//! [`NamespacedIndex::add_deferred`] adds to the exact store only and takes
//! the graphs of the namespaces it touched out ([`GraphWork`]); searches of
//! those namespaces scan exactly meanwhile (the same answers: every vector
//! is in the exact store), [`GraphWork::run`] inserts (or bulk-loads) with
//! no access to the index, and [`NamespacedIndex::put_graphs`] puts the
//! graphs back. Writes made meanwhile are kept: vectors added wait as
//! pending and are merged when the graph is back, removals are applied to
//! the returned graph; a graph is put back only into the tier it was taken
//! from, under the same ticket.

use crate::flat::FlatIndex;
use crate::tiered::{sort_hits, BuiltGraph, GraphBuild, GraphTier};
use crate::{check_vector, Hit, HnswIndex, IndexError, TieredParams, VectorIndex};
use evomem_core::{MemoryId, Namespace};
use std::collections::BTreeMap;

/// An exact store plus per-namespace graph tiers. See the module docs.
pub struct NamespacedIndex {
    params: TieredParams,
    flat: FlatIndex,
    /// Tiers of the namespaces that outgrew `graph_min` (created then, with
    /// the namespace's vectors pending in the flat store's order).
    tiers: BTreeMap<Namespace, GraphTier>,
}

impl std::fmt::Debug for NamespacedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespacedIndex")
            .field("model_id", &self.flat.model_id())
            .field("dim", &self.flat.dim())
            .field("live", &self.flat.len())
            .field("tiers", &self.tiers)
            .field("params", &self.params)
            .finish()
    }
}

impl NamespacedIndex {
    /// An empty index with default [`TieredParams`].
    pub fn new(model_id: impl Into<String>, dim: usize) -> Self {
        Self::with_params(model_id, dim, TieredParams::default())
    }

    /// An empty index; `params` apply to each namespace's tiers
    /// ([`TieredParams::graph_min`] counts the namespace's vectors).
    pub fn with_params(model_id: impl Into<String>, dim: usize, params: TieredParams) -> Self {
        Self {
            params,
            flat: FlatIndex::new(model_id, dim),
            tiers: BTreeMap::new(),
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> &TieredParams {
        &self.params
    }

    /// The exact store of every live vector.
    pub fn flat(&self) -> &FlatIndex {
        &self.flat
    }

    /// The stored vector of `id`.
    pub fn vector(&self, id: &MemoryId) -> Option<&[f32]> {
        self.flat.vector(id)
    }

    /// The namespace of `id`.
    pub fn namespace_of(&self, id: &MemoryId) -> Option<&Namespace> {
        self.flat.namespace_of(id)
    }

    /// Number of live vectors in `namespace`.
    pub fn namespace_len(&self, namespace: &Namespace) -> usize {
        self.flat.namespace_len(namespace)
    }

    /// Ids live in `namespace`, in the exact store's order.
    pub fn ids_in(&self, namespace: &Namespace) -> Vec<MemoryId> {
        self.flat
            .iter()
            .filter(|(_, n, _)| *n == namespace)
            .map(|(i, _, _)| i.clone())
            .collect()
    }

    /// The graph of `namespace`, once built (and not taken out).
    pub fn graph(&self, namespace: &Namespace) -> Option<&HnswIndex> {
        self.tiers.get(namespace).and_then(GraphTier::graph)
    }

    /// Whether searches of `namespace` go through its graph.
    pub fn has_graph(&self, namespace: &Namespace) -> bool {
        self.graph(namespace).is_some()
    }

    /// Namespaces whose searches go through their graph, in order.
    pub fn graph_namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.tiers
            .iter()
            .filter(|(_, t)| t.graph().is_some())
            .map(|(ns, _)| ns)
    }

    /// Number of namespaces whose searches go through their graph.
    pub fn graph_count(&self) -> usize {
        self.graph_namespaces().count()
    }

    /// Live vectors of graph tiers waiting to be merged (a tier without a
    /// graph yet: all its vectors).
    pub fn pending_len(&self) -> usize {
        self.tiers.values().map(GraphTier::pending_len).sum()
    }

    /// Merge every namespace's pending vectors into its graph (building it
    /// first for a namespace past [`TieredParams::graph_min`]).
    pub fn settle(&mut self) -> Result<(), IndexError> {
        for (ns, tier) in self.tiers.iter_mut() {
            tier.settle(&self.flat, self.flat.namespace_len(ns), &self.params)?;
        }
        Ok(())
    }

    /// [`VectorIndex::search_all`] for many queries in one blocked pass
    /// ([`FlatIndex::search_all_many`]; unscoped searches are exact).
    pub fn search_all_many(
        &self,
        queries: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Vec<Hit>>, IndexError> {
        self.flat.search_all_many(queries, k)
    }

    /// The exact top-`k` over `namespaces` (every namespace for `None`),
    /// whatever the tiers: the reference an approximate search is audited
    /// against, and a scan of a whole namespace.
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

    /// Insert or replace in the exact store and note it in the tiers
    /// (creating the namespace's tier when it outgrows `graph_min`);
    /// returns whether the namespace has a tier.
    fn insert(
        &mut self,
        id: MemoryId,
        namespace: Namespace,
        vector: &[f32],
    ) -> Result<bool, IndexError> {
        check_vector(self.flat.dim(), id.as_str(), vector)?;
        if let Some(old) = self.flat.namespace_of(&id) {
            if *old != namespace {
                if let Some(tier) = self.tiers.get_mut(old) {
                    tier.note_remove(&id);
                }
            }
        }
        self.flat.add(id.clone(), namespace.clone(), vector)?;
        if let Some(tier) = self.tiers.get_mut(&namespace) {
            tier.note_add(&id);
            return Ok(true);
        }
        if self.flat.namespace_len(&namespace) > self.params.graph_min {
            let tier = GraphTier::with_pending(self.ids_in(&namespace));
            self.tiers.insert(namespace, tier);
            return Ok(true);
        }
        Ok(false)
    }

    /// Insert or replace without merging into any graph, whatever
    /// [`TieredParams::pending_max`] says (for a batch whose graph work
    /// follows: [`NamespacedIndex::take_graph_work`]).
    pub fn add_pending(
        &mut self,
        id: MemoryId,
        namespace: Namespace,
        vector: &[f32],
    ) -> Result<(), IndexError> {
        self.insert(id, namespace, vector).map(|_| ())
    }

    /// Take out the graphs of `namespaces` that have vectors to merge (or
    /// are to be built), with those vectors, for [`GraphWork::run`] without
    /// access to the index and [`NamespacedIndex::put_graphs`] after.
    /// Meanwhile those namespaces answer exactly; writes to them are kept.
    pub fn take_graph_work<'a>(
        &mut self,
        namespaces: impl IntoIterator<Item = &'a Namespace>,
    ) -> GraphWork {
        let mut jobs = Vec::new();
        for ns in namespaces {
            if jobs.iter().any(|(n, _)| n == ns) {
                continue;
            }
            let live = self.flat.namespace_len(ns);
            if let Some(job) = self
                .tiers
                .get_mut(ns)
                .and_then(|t| t.take(&self.flat, live, &self.params))
            {
                jobs.push((ns.clone(), job));
            }
        }
        GraphWork { jobs }
    }

    /// Insert a batch into the exact store only and take out the graph work
    /// of the namespaces it touched ([`NamespacedIndex::add_pending`] for
    /// each, then [`NamespacedIndex::take_graph_work`]).
    pub fn add_deferred(
        &mut self,
        batch: &[(MemoryId, Namespace, &[f32])],
    ) -> Result<GraphWork, IndexError> {
        let mut touched: Vec<&Namespace> = Vec::new();
        for (id, ns, v) in batch {
            self.add_pending(id.clone(), ns.clone(), v)?;
            if !touched.contains(&ns) {
                touched.push(ns);
            }
        }
        Ok(self.take_graph_work(touched))
    }

    /// Put back graphs [`GraphWork::run`] finished, each into the tier it
    /// was taken from (a graph whose tier was taken out again, or that
    /// belongs to another index, is dropped), then merge vectors added
    /// meanwhile as [`TieredParams::pending_max`] says. Returns how many
    /// graphs went back.
    pub fn put_graphs(&mut self, built: BuiltGraphs) -> Result<usize, IndexError> {
        let mut put = 0;
        for (ns, graph) in built.graphs {
            let Some(tier) = self.tiers.get_mut(&ns) else {
                continue;
            };
            if !tier.put(graph) {
                continue;
            }
            put += 1;
            if tier.pending_len() > self.params.pending_max {
                tier.settle(&self.flat, self.flat.namespace_len(&ns), &self.params)?;
            }
        }
        Ok(put)
    }
}

impl VectorIndex for NamespacedIndex {
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
        let ns = namespace.clone();
        if self.insert(id, namespace, vector)? {
            if let Some(tier) = self.tiers.get_mut(&ns) {
                if tier.pending_len() > self.params.pending_max {
                    tier.settle(&self.flat, self.flat.namespace_len(&ns), &self.params)?;
                }
            }
        }
        Ok(())
    }

    fn remove(&mut self, id: &MemoryId) -> bool {
        if let Some(ns) = self.flat.namespace_of(id) {
            if let Some(tier) = self.tiers.get_mut(ns) {
                tier.note_remove(id);
            }
        }
        self.flat.remove(id)
    }

    /// Exact over the namespaces without a graph (one scan of the exact
    /// store), each graphed namespace through its tiers, merged by score
    /// descending then id ascending.
    fn search(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
    ) -> Result<Vec<Hit>, IndexError> {
        let (graphed, exact): (Vec<&Namespace>, Vec<&Namespace>) =
            namespaces.iter().partition(|ns| self.has_graph(ns));
        if graphed.is_empty() {
            return self.flat.search(query, k, namespaces);
        }
        let exact: Vec<Namespace> = exact.into_iter().cloned().collect();
        let mut hits = if exact.is_empty() {
            check_vector(self.flat.dim(), "<query>", query)?;
            Vec::new()
        } else {
            self.flat.search(query, k, &exact)?
        };
        let mut seen: Vec<&Namespace> = Vec::new();
        for ns in graphed {
            if seen.contains(&ns) {
                continue;
            }
            seen.push(ns);
            let Some(tier) = self.tiers.get(ns) else {
                continue;
            };
            let scope = std::slice::from_ref(ns);
            match tier.search(&self.flat, query, k, Some(scope))? {
                Some(h) => hits.extend(h),
                None => hits.extend(self.flat.search(query, k, scope)?),
            }
        }
        sort_hits(&mut hits, k);
        Ok(hits)
    }

    /// Exact over every vector: graphs serve scoped searches only.
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

/// Graph work taken out of a [`NamespacedIndex`]
/// ([`NamespacedIndex::take_graph_work`], [`NamespacedIndex::add_deferred`]):
/// per namespace, its graph (or none yet: build one) and the vectors to put
/// in.
pub struct GraphWork {
    jobs: Vec<(Namespace, GraphBuild)>,
}

impl std::fmt::Debug for GraphWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let namespaces: Vec<&Namespace> = self.jobs.iter().map(|(ns, _)| ns).collect();
        f.debug_struct("GraphWork")
            .field("namespaces", &namespaces)
            .finish()
    }
}

impl GraphWork {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Namespaces whose graphs this work builds or updates.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Insert (or build) without access to the index; returns the graphs
    /// for [`NamespacedIndex::put_graphs`].
    pub fn run(self) -> Result<BuiltGraphs, IndexError> {
        let graphs = self
            .jobs
            .into_iter()
            .map(|(ns, job)| job.run().map(|g| (ns, g)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BuiltGraphs { graphs })
    }
}

/// Graphs [`GraphWork::run`] finished, for [`NamespacedIndex::put_graphs`].
pub struct BuiltGraphs {
    graphs: Vec<(Namespace, BuiltGraph)>,
}

impl std::fmt::Debug for BuiltGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltGraphs")
            .field("graphs", &self.graphs.len())
            .finish()
    }
}

impl BuiltGraphs {
    /// Number of graphs.
    pub fn len(&self) -> usize {
        self.graphs.len()
    }

    /// Whether there is no graph.
    pub fn is_empty(&self) -> bool {
        self.graphs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HnswParams;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn unit(rng: &mut ChaCha8Rng, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        evomem_core::normalize(&mut v);
        v
    }

    fn params(graph_min: usize, pending_max: usize, bulk_load: bool) -> TieredParams {
        TieredParams {
            graph_min,
            pending_max,
            bulk_load,
            hnsw: HnswParams {
                ef_construction: 64,
                exact_threshold: graph_min,
                exact_fraction: 0.0,
                ..HnswParams::default()
            },
        }
    }

    fn ns_of(i: usize) -> Namespace {
        if i.is_multiple_of(10) {
            Namespace::user("small")
        } else {
            Namespace::user("big")
        }
    }

    /// Recall of scoped searches against brute force, with the big
    /// namespace in its graph (part of it pending, some vectors replaced,
    /// moved or removed) and the small one exact (bit for bit).
    #[test]
    fn namespaced_search_matches_brute_force_with_high_recall() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let dim = 16;
        let mut idx = NamespacedIndex::with_params("m", dim, params(200, 32, false));
        let mut exact = FlatIndex::new("m", dim);
        let mut add = |i: usize, ns: Namespace, rng: &mut ChaCha8Rng| {
            let v = unit(rng, dim);
            let id = MemoryId::new(format!("a{i:04}"));
            idx.add(id.clone(), ns.clone(), &v).unwrap();
            exact.add(id, ns, &v).unwrap();
        };
        for i in 0..1200 {
            add(i, ns_of(i), &mut rng);
        }
        for i in (0..1200).step_by(41) {
            add(i, ns_of(i), &mut rng);
        }
        // Moves between the namespaces.
        for i in (3..1200).step_by(97) {
            add(i, Namespace::user("small"), &mut rng);
        }
        let (idx, exact) = (&mut idx, &mut exact);
        for i in (5..1200).step_by(53) {
            let id = MemoryId::new(format!("a{i:04}"));
            assert_eq!(idx.remove(&id), exact.remove(&id));
        }
        assert!(idx.has_graph(&Namespace::user("big")));
        assert!(!idx.has_graph(&Namespace::user("small")));
        assert!(idx.pending_len() > 0, "part of the big namespace pending");
        assert_eq!(idx.len(), exact.len());
        let (mut found, mut total) = (0usize, 0usize);
        for _ in 0..40 {
            let q = unit(&mut rng, dim);
            let small = [Namespace::user("small")];
            assert_eq!(
                idx.search(&q, 5, &small).unwrap(),
                exact.search(&q, 5, &small).unwrap()
            );
            let both = [Namespace::user("big"), Namespace::user("small")];
            let want = exact.search(&q, 10, &both).unwrap();
            let got = idx.search(&q, 10, &both).unwrap();
            assert_eq!(got.len(), want.len());
            for (id, s) in &got {
                assert_eq!(*s, crate::dot(&q, exact.vector(id).unwrap()));
            }
            assert_eq!(
                idx.search_all(&q, 7).unwrap(),
                exact.search_all(&q, 7).unwrap()
            );
            total += want.len();
            found += want
                .iter()
                .filter(|w| got.iter().any(|g| g.0 == w.0))
                .count();
        }
        let recall = found as f64 / total as f64;
        assert!(recall >= 0.95, "recall {recall}");
        // A vector still pending is found at once.
        let q = unit(&mut rng, dim);
        let near = MemoryId::new("near");
        idx.add(near.clone(), Namespace::user("big"), &q).unwrap();
        assert!(idx.pending_len() > 0);
        let top = idx.search(&q, 1, &[Namespace::user("big")]).unwrap();
        assert_eq!(top.first().map(|h| &h.0), Some(&near));
    }

    /// Below `graph_min` the index is a flat index: the same hits, the same
    /// bits, for scoped, unscoped and batched searches.
    #[test]
    fn a_namespaced_index_of_small_namespaces_answers_like_a_flat_one() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let mut idx = NamespacedIndex::with_params("m", 8, params(500, 0, false));
        let mut exact = FlatIndex::new("m", 8);
        for i in 0..900 {
            let v = unit(&mut rng, 8);
            let (id, ns) = (
                MemoryId::new(format!("b{i}")),
                Namespace::user(&(i % 3).to_string()),
            );
            idx.add(id.clone(), ns.clone(), &v).unwrap();
            exact.add(id, ns, &v).unwrap();
        }
        idx.settle().unwrap();
        assert_eq!(idx.graph_count(), 0);
        let qs: Vec<Vec<f32>> = (0..10).map(|_| unit(&mut rng, 8)).collect();
        let refs: Vec<&[f32]> = qs.iter().map(Vec::as_slice).collect();
        assert_eq!(
            idx.search_all_many(&refs, 9).unwrap(),
            exact.search_all_many(&refs, 9).unwrap()
        );
        for q in &qs {
            let ns = [Namespace::user("1"), Namespace::user("2")];
            assert_eq!(
                idx.search(q, 12, &ns).unwrap(),
                exact.search(q, 12, &ns).unwrap()
            );
        }
    }

    /// A batch added with `add_deferred` answers like brute force while its
    /// graphs are out and after they are back; writes made meanwhile (an
    /// add, a removal) are kept in the graph put back; a graph is not put
    /// into another index.
    #[test]
    fn deferred_graph_work_answers_exactly_meanwhile_and_keeps_writes_made_meanwhile() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let dim = 16;
        let mut idx = NamespacedIndex::with_params("m", dim, params(60, 0, true));
        let mut exact = FlatIndex::new("m", dim);
        for b in 0..5 {
            let batch: Vec<(MemoryId, Namespace, Vec<f32>)> = (0..40)
                .map(|i| {
                    let n = b * 40 + i;
                    (
                        MemoryId::new(format!("m{n:03}")),
                        ns_of(n),
                        unit(&mut rng, dim),
                    )
                })
                .collect();
            for (id, ns, v) in &batch {
                exact.add(id.clone(), ns.clone(), v).unwrap();
            }
            let refs: Vec<(MemoryId, Namespace, &[f32])> = batch
                .iter()
                .map(|(i, n, v)| (i.clone(), n.clone(), v.as_slice()))
                .collect();
            let work = idx.add_deferred(&refs).unwrap();
            assert_eq!(idx.graph_count(), 0, "the graph is out");
            // Writes meanwhile.
            let late = MemoryId::new(format!("late{b}"));
            let v = unit(&mut rng, dim);
            idx.add(late.clone(), Namespace::user("big"), &v).unwrap();
            exact.add(late, Namespace::user("big"), &v).unwrap();
            let gone = MemoryId::new(format!("m{:03}", b * 40 + 3));
            assert_eq!(idx.remove(&gone), exact.remove(&gone));
            let big = [Namespace::user("big")];
            for _ in 0..5 {
                let q = unit(&mut rng, dim);
                assert_eq!(
                    idx.search(&q, 5, &big).unwrap(),
                    exact.search(&q, 5, &big).unwrap()
                );
            }
            let built = work.run().unwrap();
            assert_eq!(built.len(), usize::from(b >= 1));
            assert_eq!(idx.put_graphs(built).unwrap(), usize::from(b >= 1));
            assert_eq!(idx.pending_len(), 0, "writes made meanwhile merged");
        }
        assert_eq!(idx.graph_count(), 1);
        let big = [Namespace::user("big")];
        let (mut found, mut total) = (0, 0);
        for _ in 0..20 {
            let q = unit(&mut rng, dim);
            let want = exact.search(&q, 5, &big).unwrap();
            let got = idx.search(&q, 5, &big).unwrap();
            total += want.len();
            found += want
                .iter()
                .filter(|w| got.iter().any(|g| g.0 == w.0))
                .count();
            assert!(
                got.iter().all(|(id, _)| exact.contains(id)),
                "a removed vector came back"
            );
        }
        assert!(found * 100 >= total * 95, "graph recall {found}/{total}");
        // A stale graph (tier taken out again) is dropped; so is one from another index.
        let v = unit(&mut rng, dim);
        let work = idx
            .add_deferred(&[(MemoryId::new("x"), Namespace::user("big"), v.as_slice())])
            .unwrap();
        let built = work.run().unwrap();
        let mut other = NamespacedIndex::with_params("m", dim, params(60, 0, true));
        assert_eq!(other.put_graphs(built).unwrap(), 0);
        assert!(!idx.has_graph(&Namespace::user("big")));
    }
}
