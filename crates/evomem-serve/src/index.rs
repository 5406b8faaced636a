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
