//! AtomRec's vector index over its atoms: a [`NamespacedIndex`] (exact for
//! small pools, an HNSW graph for each large one, namespaces as filters)
//! with AtomRec's tiers ([`atom_index`]).
//!
//! Every neighbour search of AtomRec is scoped: linking searches the owner's
//! namespace (`user:<token>`) and the item's (`item:<token>`), retrieval the
//! owner's namespace alone. Every atom sits in the exact store (contiguous
//! per-namespace blocks, so a scoped search scans only the pool it may
//! see); a namespace that grows past [`HNSW_MIN_POOL`] atoms also gets a
//! graph, and searches that name it go through the graph; the exact copy
//! stays, as the store vectors are read from.
//!
//! Why a per-pool threshold and not one graph for all: a search never spans
//! the whole memory, so an HNSW graph over all atoms would be built and kept
//! up to date (every evolution re-embeds up to three atoms) for searches that
//! are exact scans of a few hundred vectors anyway. On ml-100k the largest
//! user holds 737 atoms, so every search there is exact.

use evomem_index::{HnswParams, NamespacedIndex, TieredParams};

/// Namespaces holding more atoms than this are searched through HNSW; smaller
/// ones exactly. 2048 is `HnswParams::default().exact_threshold`, the size up
/// to which the index's own filtered search prefers an exact scan.
pub const HNSW_MIN_POOL: usize = 2048;

/// AtomRec's vector index (see the module docs; built by [`atom_index`]).
pub type AtomIndex = NamespacedIndex;

/// An empty index for `dim`-dimensional vectors of model `model_id`, with
/// the [`HNSW_MIN_POOL`] threshold.
pub fn atom_index(model_id: impl Into<String>, dim: usize) -> AtomIndex {
    NamespacedIndex::with_params(model_id, dim, atom_tiers(HNSW_MIN_POOL))
}

/// AtomRec's tiers: a graph for each namespace of more than `min_pool`
/// atoms, built by sequential inserts (the same graph on every run), every
/// add merged at once, and the graph always searched (the pool of a graphed
/// namespace is large by definition, so no exact fallback).
pub fn atom_tiers(min_pool: usize) -> TieredParams {
    TieredParams {
        graph_min: min_pool,
        pending_max: 0,
        bulk_load: false,
        hnsw: HnswParams {
            exact_threshold: min_pool,
            exact_fraction: 0.0,
            ..HnswParams::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::{MemoryId, Namespace};
    use evomem_index::{FlatIndex, VectorIndex};
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
        let mut idx = NamespacedIndex::with_params("m", dim, atom_tiers(100));
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
        assert!(idx.has_graph(&Namespace::user("big")));
        assert!(!idx.has_graph(&Namespace::user("small")));
        assert_eq!(idx.pending_len(), 0, "every add merged at once");
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
