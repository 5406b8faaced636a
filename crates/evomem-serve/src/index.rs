//! A tenant's vector index: [`NamespacedIndex`] (one exact store over every
//! namespace, a graph tier per namespace) with the tiers serve wants
//! ([`tenant_index`]).
//!
//! Why these tiers: searches are always scoped to one user, and a user
//! holds tens to thousands of memories, where an exact scan takes
//! microseconds and inserts cost nothing. Building HNSW for every insert is
//! what capped ingest at ~335 vectors/s (issue 15's measurement), so graphs
//! are built only where a namespace is large enough for them to pay
//! (`hnsw_threshold`), in one parallel bulk load at the switch and
//! incrementally after it (nothing waits as pending: a write is in the
//! graph when it returns). A large batch updates graphs off the tenant's
//! lock ([`NamespacedIndex::add_deferred`], [`evomem_index::GraphWork`]).

use evomem_index::{HnswParams, NamespacedIndex, TieredParams};

/// The index of one tenant.
pub type TenantIndex = NamespacedIndex;

/// An empty tenant index of `model`'s `dim`-d vectors, with a graph for
/// each namespace of more than `threshold` vectors (at least 1),
/// bulk-loaded at the switch, every later write merged at once.
pub fn tenant_index(model: &str, dim: usize, threshold: usize) -> TenantIndex {
    NamespacedIndex::with_params(
        model,
        dim,
        TieredParams {
            graph_min: threshold.max(1),
            pending_max: 0,
            bulk_load: true,
            hnsw: HnswParams::default(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::{MemoryId, Namespace};
    use evomem_index::VectorIndex;

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

    fn top(idx: &TenantIndex, ns: &Namespace, q: &[f32], k: usize) -> Vec<MemoryId> {
        idx.search(q, k, std::slice::from_ref(ns))
            .unwrap()
            .into_iter()
            .map(|x| x.0)
            .collect()
    }

    /// Batches added with `add_deferred` (graphs updated off the lock)
    /// answer like brute force while their graphs are out and after they
    /// are back.
    #[test]
    fn deferred_graph_updates_answer_exactly_meanwhile_and_after() {
        let dim = 16;
        let mut idx = tenant_index("m", dim, 60);
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
                let want = brute(&all, &ns, &q, 5);
                assert_eq!(top(&idx, &ns, &q, 5), want, "while the graphs are out");
            }
            idx.put_graphs(work.run().unwrap()).unwrap();
        }
        assert_eq!(idx.graph_count(), 1, "the big namespace got its graph");
        assert_eq!(idx.len(), 200);
        let big = Namespace::user("big");
        let mut hits = 0;
        for q in 0..20 {
            let qv = unit(1000 + q, dim);
            let want = brute(&all, &big, &qv, 5);
            hits += top(&idx, &big, &qv, 5)
                .iter()
                .filter(|g| want.contains(g))
                .count();
        }
        assert!(hits >= 95, "graph recall {hits}/100");
    }

    #[test]
    fn search_matches_brute_force_below_and_above_the_graph_threshold() {
        let dim = 16;
        let mut idx = tenant_index("m", dim, 60);
        let mut all = Vec::new();
        for i in 0..150u32 {
            let ns = Namespace::user(if i % 3 == 0 { "small" } else { "big" });
            let v = unit(i, dim);
            idx.add(MemoryId::new(format!("m{i:03}")), ns.clone(), &v)
                .unwrap();
            all.push((MemoryId::new(format!("m{i:03}")), ns, v));
        }
        assert_eq!(idx.graph_count(), 1, "only the big namespace gets a graph");
        for ns in [Namespace::user("small"), Namespace::user("big")] {
            for q in 0..10 {
                let qv = unit(1000 + q, dim);
                assert_eq!(
                    top(&idx, &ns, &qv, 5),
                    brute(&all, &ns, &qv, 5),
                    "{ns:?} q{q}"
                );
            }
        }
        assert!(idx.remove(&MemoryId::new("m001")));
        assert!(!idx.contains(&MemoryId::new("m001")));
        let hits = top(&idx, &Namespace::user("big"), &unit(1, dim), 3);
        assert!(hits.iter().all(|i| i.as_str() != "m001"));
    }
}
