//! A tenant's vector index: one exact [`FlatIndex`] over every namespace
//! (its namespaces are contiguous blocks, so a search reads only the asked
//! namespace), plus an HNSW graph for each namespace that outgrows
//! `hnsw_threshold`.
//!
//! Why this split: searches are always scoped to one user, and a user holds
//! tens to thousands of memories, where an exact scan takes microseconds
//! and inserts cost nothing. Building HNSW for every insert is what capped
//! ingest at ~335 vectors/s (issue 15's measurement), so graphs are built
//! only where a namespace is large enough for them to pay, in one parallel
//! bulk load at the switch and incrementally after it.
//!
//! A large batch need not update graphs under the tenant's lock:
//! [`TenantIndex::add_deferred`] adds to the exact index only and takes the
//! graphs of the namespaces it touched out ([`GraphWork`]); searches of
//! those namespaces scan exactly meanwhile (same answers, all vectors are
//! in the flat index), [`GraphWork::run`] inserts without the lock, and
//! [`TenantIndex::put_graphs`] puts the graphs back.

use evomem_core::{MemoryId, Namespace};
use evomem_index::{FlatIndex, HnswIndex, HnswParams, IndexError, VectorIndex};
use std::collections::HashMap;

/// The index of one tenant.
pub struct TenantIndex {
    flat: FlatIndex,
    graphs: HashMap<Namespace, HnswIndex>,
    threshold: usize,
}

impl std::fmt::Debug for TenantIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantIndex")
            .field("vectors", &self.flat.len())
            .field("graphs", &self.graphs.len())
            .finish()
    }
}

impl TenantIndex {
    /// An empty index of `model`'s `dim`-d vectors.
    pub fn new(model: &str, dim: usize, threshold: usize) -> Self {
        Self {
            flat: FlatIndex::new(model, dim),
            graphs: HashMap::new(),
            threshold: threshold.max(1),
        }
    }

    /// Insert or replace.
    pub fn add(&mut self, id: MemoryId, ns: Namespace, v: &[f32]) -> Result<(), IndexError> {
        if let Some(old) = self.flat.namespace_of(&id).cloned() {
            if old != ns {
                if let Some(g) = self.graphs.get_mut(&old) {
                    g.remove(&id);
                }
            }
        }
        self.flat.add(id.clone(), ns.clone(), v)?;
        if let Some(g) = self.graphs.get_mut(&ns) {
            g.add(id, ns, v)?;
        } else if self.flat.namespace_len(&ns) > self.threshold {
            let entries: Vec<(MemoryId, Namespace, &[f32])> = self
                .flat
                .iter()
                .filter(|(_, n, _)| **n == ns)
                .map(|(i, n, v)| (i.clone(), n.clone(), v))
                .collect();
            let g = HnswIndex::bulk_load(
                self.flat.model_id().to_string(),
                self.flat.dim(),
                HnswParams::default(),
                entries,
            )?;
            self.graphs.insert(ns, g);
        }
        Ok(())
    }

    /// Insert a batch into the exact index only; the graphs of the
    /// namespaces it touches (and those it makes cross the threshold) are
    /// taken out and returned with the vectors they still need, for
    /// [`GraphWork::run`] without the lock and [`TenantIndex::put_graphs`]
    /// after. The caller must keep other writers of this index out until
    /// then (removals from a taken-out graph would be lost).
    pub fn add_deferred(
        &mut self,
        batch: &[(MemoryId, Namespace, &[f32])],
    ) -> Result<GraphWork, IndexError> {
        let mut work = GraphWork {
            model: self.flat.model_id().to_string(),
            dim: self.flat.dim(),
            jobs: Vec::new(),
        };
        let mut touched: Vec<Namespace> = Vec::new();
        for (id, ns, v) in batch {
            if let Some(old) = self.flat.namespace_of(id).cloned() {
                if &old != ns {
                    if let Some(g) = self.graphs.get_mut(&old) {
                        g.remove(id);
                    }
                }
            }
            self.flat.add(id.clone(), ns.clone(), v)?;
            if !touched.contains(ns) {
                touched.push(ns.clone());
            }
        }
        for ns in touched {
            let graph = self.graphs.remove(&ns);
            if graph.is_none() && self.flat.namespace_len(&ns) <= self.threshold {
                continue;
            }
            // A taken graph needs the batch's vectors of `ns`; a new one
            // needs every vector of `ns`.
            let vectors: Vec<(MemoryId, Vec<f32>)> = match &graph {
                Some(_) => batch
                    .iter()
                    .filter(|(_, n, _)| *n == ns)
                    .map(|(i, _, v)| (i.clone(), v.to_vec()))
                    .collect(),
                None => self
                    .flat
                    .iter()
                    .filter(|(_, n, _)| **n == ns)
                    .map(|(i, _, v)| (i.clone(), v.to_vec()))
                    .collect(),
            };
            work.jobs.push((ns, graph, vectors));
        }
        Ok(work)
    }

    /// Put back the graphs [`GraphWork::run`] finished.
    pub fn put_graphs(&mut self, graphs: Vec<(Namespace, HnswIndex)>) {
        self.graphs.extend(graphs);
    }

    /// Remove; returns whether it was present.
    pub fn remove(&mut self, id: &MemoryId) -> bool {
        if let Some(ns) = self.flat.namespace_of(id).cloned() {
            if let Some(g) = self.graphs.get_mut(&ns) {
                g.remove(id);
            }
        }
        self.flat.remove(id)
    }

    /// The `k` closest vectors of `ns`.
    pub fn search(
        &self,
        ns: &Namespace,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>, IndexError> {
        let scope = std::slice::from_ref(ns);
        match self.graphs.get(ns) {
            Some(g) => g.search(query, k, scope),
            None => self.flat.search(query, k, scope),
        }
    }

    /// Every vector of `ns`, best first (for filtered searches).
    pub fn search_all_of(
        &self,
        ns: &Namespace,
        query: &[f32],
    ) -> Result<Vec<(MemoryId, f32)>, IndexError> {
        let n = self.flat.namespace_len(ns);
        self.flat.search(query, n, std::slice::from_ref(ns))
    }

    /// Live vectors.
    pub fn len(&self) -> usize {
        self.flat.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.flat.is_empty()
    }

    /// Whether `id` is indexed.
    pub fn contains(&self, id: &MemoryId) -> bool {
        self.flat.contains(id)
    }

    /// Whether `ns` is served by an HNSW graph.
    pub fn has_graph(&self, ns: &Namespace) -> bool {
        self.graphs.contains_key(ns)
    }

    /// Namespaces served by an HNSW graph.
    pub fn graphs(&self) -> usize {
        self.graphs.len()
    }

    /// Ids indexed in `ns`.
    pub fn ids_in(&self, ns: &Namespace) -> Vec<MemoryId> {
        self.flat
            .iter()
            .filter(|(_, n, _)| *n == ns)
            .map(|(i, _, _)| i.clone())
            .collect()
    }
}

/// Graph updates taken out of a [`TenantIndex`] by
/// [`TenantIndex::add_deferred`]: per namespace, its graph (or none yet:
/// build one) and the vectors to put in.
pub struct GraphWork {
    model: String,
    dim: usize,
    jobs: Vec<GraphJob>,
}

/// One namespace's graph (none: build one) and the vectors to put in.
type GraphJob = (Namespace, Option<HnswIndex>, Vec<(MemoryId, Vec<f32>)>);

impl GraphWork {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Insert (or bulk-load) without any lock; returns the graphs to put
    /// back.
    pub fn run(self) -> Result<Vec<(Namespace, HnswIndex)>, IndexError> {
        let mut out = Vec::with_capacity(self.jobs.len());
        for (ns, graph, vectors) in self.jobs {
            let g = match graph {
                Some(mut g) => {
                    for (id, v) in vectors {
                        g.add(id, ns.clone(), &v)?;
                    }
                    g
                }
                None => HnswIndex::bulk_load(
                    self.model.clone(),
                    self.dim,
                    HnswParams::default(),
                    vectors
                        .iter()
                        .map(|(i, v)| (i.clone(), ns.clone(), v.as_slice())),
                )?,
            };
            out.push((ns, g));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u32, dim: usize) -> Vec<f32> {
        let mut x = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut v: Vec<f32> = (0..dim)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    fn brute(
        all: &[(MemoryId, Namespace, Vec<f32>)],
        ns: &Namespace,
        q: &[f32],
        k: usize,
    ) -> Vec<MemoryId> {
        let mut s: Vec<(f32, &MemoryId)> = all
            .iter()
            .filter(|(_, n, _)| n == ns)
            .map(|(i, _, v)| (v.iter().zip(q).map(|(a, b)| a * b).sum(), i))
            .collect();
        s.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        s.into_iter().take(k).map(|(_, i)| i.clone()).collect()
    }

    /// Batches added with `add_deferred` (graphs updated off the lock)
    /// answer like brute force while their graphs are out and after they
    /// are back, and build the same graphs as plain adds.
    #[test]
    fn deferred_graph_updates_answer_exactly_meanwhile_and_after() {
        let dim = 16;
        let mut idx = TenantIndex::new("m", dim, 60);
        let mut all: Vec<(MemoryId, Namespace, Vec<f32>)> = Vec::new();
        for b in 0..5u32 {
            let batch: Vec<(MemoryId, Namespace, Vec<f32>)> = (0..40u32)
                .map(|i| {
                    let n = b * 40 + i;
                    let ns = Namespace::user(if n % 4 == 0 { "small" } else { "big" });
                    (MemoryId::new(format!("m{n:03}")), ns, unit(n, dim))
                })
                .collect();
            all.extend(batch.iter().cloned());
            let refs: Vec<(MemoryId, Namespace, &[f32])> = batch
                .iter()
                .map(|(i, n, v)| (i.clone(), n.clone(), v.as_slice()))
                .collect();
            let work = idx.add_deferred(&refs).unwrap();
            for ns in [Namespace::user("small"), Namespace::user("big")] {
                let q = unit(900 + b, dim);
                let got: Vec<MemoryId> = idx
                    .search(&ns, &q, 5)
                    .unwrap()
                    .into_iter()
                    .map(|x| x.0)
                    .collect();
                assert_eq!(got, brute(&all, &ns, &q, 5), "while the graphs are out");
            }
            idx.put_graphs(work.run().unwrap());
        }
        assert_eq!(idx.graphs(), 1, "the big namespace got its graph");
        assert_eq!(idx.len(), 200);
        let big = Namespace::user("big");
        let mut hits = 0;
        for q in 0..20 {
            let qv = unit(1000 + q, dim);
            let got: Vec<MemoryId> = idx
                .search(&big, &qv, 5)
                .unwrap()
                .into_iter()
                .map(|x| x.0)
                .collect();
            let want = brute(&all, &big, &qv, 5);
            hits += got.iter().filter(|g| want.contains(g)).count();
        }
        assert!(hits >= 95, "graph recall {hits}/100");
    }

    #[test]
    fn search_matches_brute_force_below_and_above_the_graph_threshold() {
        let dim = 16;
        let mut idx = TenantIndex::new("m", dim, 60);
        let mut all = Vec::new();
        for i in 0..150u32 {
            let ns = Namespace::user(if i % 3 == 0 { "small" } else { "big" });
            let v = unit(i, dim);
            idx.add(MemoryId::new(format!("m{i:03}")), ns.clone(), &v)
                .unwrap();
            all.push((MemoryId::new(format!("m{i:03}")), ns, v));
        }
        assert_eq!(idx.graphs(), 1, "only the big namespace gets a graph");
        for ns in [Namespace::user("small"), Namespace::user("big")] {
            for q in 0..10 {
                let qv = unit(1000 + q, dim);
                let got: Vec<MemoryId> = idx
                    .search(&ns, &qv, 5)
                    .unwrap()
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect();
                assert_eq!(got, brute(&all, &ns, &qv, 5), "{ns:?} q{q}");
            }
        }
        assert!(idx.remove(&MemoryId::new("m001")));
        assert!(!idx.contains(&MemoryId::new("m001")));
        let hits = idx
            .search(&Namespace::user("big"), &unit(1, dim), 3)
            .unwrap();
        assert!(hits.iter().all(|(i, _)| i.as_str() != "m001"));
    }
}
