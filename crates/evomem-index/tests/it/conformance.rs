//! The `VectorIndex` conformance suite. Every test runs against `FlatIndex`,
//! `HnswIndex` with default parameters, and `HnswIndex` forced onto the graph
//! path for every filtered search (no exact fallback) with eager rebuilds, so
//! that tombstones, filters and rebuilds are exercised on the graph itself,
//! and `TieredIndex` with its graph tier built from the first vector, once
//! merging on every add and once letting up to 16 vectors wait in the exact
//! tier (so searches merge graph hits with pending ones), and
//! `NamespacedIndex` with a graph tier per namespace from its first vector,
//! the same two ways.

use evomem_core::{Embedding, MemoryId, Namespace};
use evomem_index::{
    FlatIndex, HnswIndex, HnswParams, IndexError, NamespacedIndex, TieredIndex, TieredParams,
    VectorIndex,
};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Recall@10 that HNSW must reach against exact search in these tests
/// (clustered 16-d data, 800 vectors, M = 16, efConstruction = 64, ef = 64).
const STATED_RECALL: f64 = 0.95;

type Factory = fn(&str, usize) -> Box<dyn VectorIndex>;

fn flat(model: &str, dim: usize) -> Box<dyn VectorIndex> {
    Box::new(FlatIndex::new(model, dim))
}
/// Test-sized construction effort: the suite runs in a debug build.
fn test_params() -> HnswParams {
    HnswParams {
        ef_construction: 64,
        ..HnswParams::default()
    }
}

fn hnsw(model: &str, dim: usize) -> Box<dyn VectorIndex> {
    Box::new(HnswIndex::with_params(model, dim, test_params()))
}
fn hnsw_graph_only(model: &str, dim: usize) -> Box<dyn VectorIndex> {
    Box::new(HnswIndex::with_params(
        model,
        dim,
        HnswParams {
            exact_threshold: 0,
            exact_fraction: 0.0,
            rebuild_tombstone_ratio: 0.1,
            ..test_params()
        },
    ))
}

/// Tiers with the graph built from the first vector, always searched.
fn graph_tiers(pending_max: usize) -> TieredParams {
    TieredParams {
        graph_min: 0,
        pending_max,
        bulk_load: false,
        hnsw: HnswParams {
            exact_threshold: 0,
            exact_fraction: 0.0,
            rebuild_tombstone_ratio: 0.1,
            ..test_params()
        },
    }
}

fn tiered(model: &str, dim: usize, pending_max: usize) -> Box<dyn VectorIndex> {
    Box::new(TieredIndex::with_params(
        model,
        dim,
        graph_tiers(pending_max),
    ))
}
fn tiered_eager(model: &str, dim: usize) -> Box<dyn VectorIndex> {
    tiered(model, dim, 0)
}
fn tiered_pending(model: &str, dim: usize) -> Box<dyn VectorIndex> {
    tiered(model, dim, 16)
}
fn namespaced_eager(model: &str, dim: usize) -> Box<dyn VectorIndex> {
    Box::new(NamespacedIndex::with_params(model, dim, graph_tiers(0)))
}
fn namespaced_pending(model: &str, dim: usize) -> Box<dyn VectorIndex> {
    Box::new(NamespacedIndex::with_params(model, dim, graph_tiers(16)))
}

const IMPLS: [(&str, Factory); 7] = [
    ("flat", flat),
    ("hnsw", hnsw),
    ("hnsw-graph-only", hnsw_graph_only),
    ("tiered-eager", tiered_eager),
    ("tiered-pending", tiered_pending),
    ("namespaced-eager", namespaced_eager),
    ("namespaced-pending", namespaced_pending),
];

fn id(s: impl std::fmt::Display) -> MemoryId {
    MemoryId::new(s.to_string())
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
    v
}

/// Clustered unit vectors: `n` points around `clusters` random centres.
fn clustered(seed: u64, n: usize, dim: usize, clusters: usize) -> Vec<Vec<f32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| unit((0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect()))
        .collect();
    (0..n)
        .map(|i| {
            let c = &centres[i % clusters];
            unit(
                c.iter()
                    .map(|x| x + rng.gen_range(-0.35f32..0.35))
                    .collect(),
            )
        })
        .collect()
}

fn brute(
    entries: &BTreeMap<MemoryId, (Namespace, Vec<f32>)>,
    q: &[f32],
    k: usize,
    ns: Option<&[Namespace]>,
) -> Vec<(MemoryId, f32)> {
    let mut all: Vec<(MemoryId, f32)> = entries
        .iter()
        .filter(|(_, (n, _))| ns.is_none_or(|list| list.contains(n)))
        .map(|(i, (_, v))| (i.clone(), evomem_index::dot(q, v)))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

#[test]
fn exact_top_k_on_small_sets() {
    for (name, make) in IMPLS {
        let mut idx = make("m", 3);
        let vs = [
            ("a", [1.0, 0.0, 0.0]),
            ("b", [0.0, 1.0, 0.0]),
            ("c", [0.6, 0.8, 0.0]),
            ("d", [0.8, 0.6, 0.0]),
        ];
        for (i, v) in vs {
            idx.add(id(i), Namespace::shared(), &v).unwrap();
        }
        let hits = idx.search_all(&[1.0, 0.0, 0.0], 3).unwrap();
        let ids: Vec<&str> = hits.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["a", "d", "c"], "{name}");
        assert!(
            (hits[1].1 - 0.8).abs() < 1e-6,
            "{name}: scores are dot products"
        );
        assert_eq!(idx.len(), 4, "{name}");
        assert!(
            idx.search_all(&[1.0, 0.0, 0.0], 0).unwrap().is_empty(),
            "{name}"
        );
        assert_eq!(
            idx.search_all(&[1.0, 0.0, 0.0], 10).unwrap().len(),
            4,
            "{name}"
        );
    }
}

#[test]
fn ties_break_by_id() {
    for (name, make) in IMPLS {
        let mut idx = make("m", 2);
        for i in ["z", "b", "m"] {
            idx.add(id(i), Namespace::shared(), &[1.0, 0.0]).unwrap();
        }
        let got: Vec<String> = idx
            .search(&[1.0, 0.0], 2, &[Namespace::shared()])
            .unwrap()
            .into_iter()
            .map(|(i, _)| i.0)
            .collect();
        assert_eq!(got, ["b", "m"], "{name}");
    }
}

#[test]
fn rejects_wrong_dimension_model_and_non_finite() {
    for (name, make) in IMPLS {
        let mut idx = make("model-a", 3);
        let err = idx
            .add(id("x"), Namespace::shared(), &[1.0, 0.0])
            .unwrap_err();
        assert_eq!(
            err,
            IndexError::DimensionMismatch {
                expected: 3,
                got: 2
            },
            "{name}"
        );
        let err = idx.search_all(&[1.0; 4], 1).unwrap_err();
        assert_eq!(
            err,
            IndexError::DimensionMismatch {
                expected: 3,
                got: 4
            },
            "{name}"
        );
        let emb = Embedding {
            model: "model-b".into(),
            vector: vec![1.0, 0.0, 0.0],
        };
        let err = idx
            .add_embedding(id("x"), Namespace::shared(), &emb)
            .unwrap_err();
        assert!(matches!(err, IndexError::ModelMismatch { .. }), "{name}");
        let ee: evomem_core::EmbedError = err.into();
        assert!(
            matches!(ee, evomem_core::EmbedError::ModelMismatch { .. }),
            "{name}"
        );
        let err = idx
            .add(id("x"), Namespace::shared(), &[f32::NAN, 0.0, 0.0])
            .unwrap_err();
        assert!(
            matches!(err, IndexError::NonFinite { position: 0, .. }),
            "{name}"
        );
        assert!(idx.is_empty(), "{name}: failed adds change nothing");
        let ok = Embedding {
            model: "model-a".into(),
            vector: vec![0.0, 1.0, 0.0],
        };
        idx.add_embedding(id("x"), Namespace::shared(), &ok)
            .unwrap();
        assert_eq!(idx.len(), 1, "{name}");
    }
}

#[test]
fn namespace_filter_isolates() {
    for (name, make) in IMPLS {
        let mut idx = make("m", 16);
        let vs = clustered(7, 600, 16, 5);
        for (i, v) in vs.iter().enumerate() {
            idx.add(
                id(format!("r{i:04}")),
                Namespace::user(&format!("{}", i % 3)),
                v,
            )
            .unwrap();
        }
        let u1 = Namespace::user("1");
        for q in vs.iter().take(20) {
            let hits = idx.search(q, 10, std::slice::from_ref(&u1)).unwrap();
            assert_eq!(hits.len(), 10, "{name}");
            for (h, _) in &hits {
                let n: usize = h.as_str()[1..].parse().unwrap();
                assert_eq!(n % 3, 1, "{name}: {h} leaked from another namespace");
            }
            assert!(
                idx.search(q, 10, &[]).unwrap().is_empty(),
                "{name}: empty filter sees nothing"
            );
            assert!(
                idx.search(q, 10, &[Namespace::user("nobody")])
                    .unwrap()
                    .is_empty(),
                "{name}"
            );
        }
    }
}

#[test]
fn removal_and_replacement() {
    for (name, make) in IMPLS {
        let mut idx = make("m", 8);
        let vs = clustered(11, 400, 8, 4);
        for (i, v) in vs.iter().enumerate() {
            idx.add(id(i), Namespace::shared(), v).unwrap();
        }
        // Remove every other vector, including each query's own twin.
        for i in (0..400).step_by(2) {
            assert!(idx.remove(&id(i)), "{name}");
        }
        assert!(!idx.remove(&id(0)), "{name}: second remove is a no-op");
        assert_eq!(idx.len(), 200, "{name}");
        for q in vs.iter().take(30) {
            for (h, _) in idx.search_all(q, 20).unwrap() {
                let n: usize = h.as_str().parse().unwrap();
                assert!(n % 2 == 1, "{name}: removed {h} returned");
            }
            for (h, _) in idx.search(q, 20, &[Namespace::shared()]).unwrap() {
                let n: usize = h.as_str().parse().unwrap();
                assert!(
                    n % 2 == 1,
                    "{name}: removed {h} returned by filtered search"
                );
            }
        }
        // Re-add 0 with the exact query vector: it must come back first.
        idx.add(id(0), Namespace::shared(), &vs[0]).unwrap();
        assert!(idx.contains(&id(0)), "{name}");
        assert_eq!(idx.search_all(&vs[0], 1).unwrap()[0].0, id(0), "{name}");
        // Replacing moves a record to another namespace.
        idx.add(id(1), Namespace::user("u"), &vs[1]).unwrap();
        assert_eq!(idx.len(), 201, "{name}");
        let hits = idx.search(&vs[1], 5, &[Namespace::user("u")]).unwrap();
        assert_eq!(
            hits,
            vec![(id(1), evomem_index::dot(&vs[1], &vs[1]))],
            "{name}"
        );
        assert!(
            idx.search(&vs[1], 400, &[Namespace::shared()])
                .unwrap()
                .iter()
                .all(|(h, _)| h != &id(1)),
            "{name}: old namespace still holds the replaced record"
        );
    }
}

/// Mean recall@k of `idx` against brute force over `queries`.
fn recall(
    idx: &dyn VectorIndex,
    truth: &BTreeMap<MemoryId, (Namespace, Vec<f32>)>,
    queries: &[Vec<f32>],
    k: usize,
    ns: Option<&[Namespace]>,
) -> f64 {
    let mut found = 0usize;
    let mut total = 0usize;
    for q in queries {
        let exact = brute(truth, q, k, ns);
        let got = match ns {
            Some(list) => idx.search(q, k, list).unwrap(),
            None => idx.search_all(q, k).unwrap(),
        };
        total += exact.len();
        found += exact
            .iter()
            .filter(|(e, _)| got.iter().any(|(g, _)| g == e))
            .count();
    }
    if total == 0 {
        1.0
    } else {
        found as f64 / total as f64
    }
}

/// Random op sequences: adds (possibly replacing), removals, then searches.
#[derive(Debug, Clone)]
enum Op {
    Add { key: u16, ns: u8, seed: u64 },
    Remove { key: u16 },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u16..300, 0u8..4, any::<u64>()).prop_map(|(key, ns, seed)| Op::Add { key, ns, seed }),
        1 => (0u16..300).prop_map(|key| Op::Remove { key }),
    ]
}

fn vec_from_seed(seed: u64, dim: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    unit((0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Every implementation agrees with a brute-force model on which records
    /// are live and where they live; flat agrees exactly on results; HNSW
    /// only returns live, allowed records.
    #[test]
    fn ops_match_a_brute_force_model(ops in proptest::collection::vec(op_strategy(), 1..200), qseed in any::<u64>()) {
        let dim = 8;
        for (name, make) in IMPLS {
            let mut idx = make("m", dim);
            let mut model: BTreeMap<MemoryId, (Namespace, Vec<f32>)> = BTreeMap::new();
            for op in &ops {
                match op {
                    Op::Add { key, ns, seed } => {
                        let v = vec_from_seed(*seed, dim);
                        let n = Namespace::new(format!("ns{ns}"));
                        idx.add(id(key), n.clone(), &v).unwrap();
                        model.insert(id(key), (n, v));
                    }
                    Op::Remove { key } => {
                        prop_assert_eq!(idx.remove(&id(key)), model.remove(&id(key)).is_some(), "{}", name);
                    }
                }
            }
            prop_assert_eq!(idx.len(), model.len(), "{}", name);
            for key in 0u16..300 {
                prop_assert_eq!(idx.contains(&id(key)), model.contains_key(&id(key)), "{}", name);
            }
            let q = vec_from_seed(qseed, dim);
            let allowed = [Namespace::new("ns1"), Namespace::new("ns3")];
            let got = idx.search(&q, 10, &allowed).unwrap();
            let exact = brute(&model, &q, 10, Some(&allowed));
            prop_assert_eq!(got.len(), exact.len(), "{}", name);
            for (g, s) in &got {
                let (n, v) = model.get(g).expect("returned id is live");
                prop_assert!(allowed.contains(n), "{}: {} from {}", name, g, n);
                prop_assert!((evomem_index::dot(&q, v) - s).abs() < 1e-5);
            }
            if name == "flat" {
                prop_assert_eq!(&got, &exact);
                prop_assert_eq!(idx.search_all(&q, 10).unwrap(), brute(&model, &q, 10, None));
            }
        }
    }

}

proptest! {
    // Each case builds two 800-vector graphs. `hnsw_rs` is generic over the
    // distance, so its code is compiled at this crate's (debug) opt-level:
    // keep the sizes small.
    #![proptest_config(ProptestConfig { cases: 2, ..ProptestConfig::default() })]

    /// HNSW top-10 agrees with exact search to at least the stated recall,
    /// unfiltered and under a namespace filter, before and after removals.
    #[test]
    fn hnsw_recall_matches_exact(seed in any::<u64>()) {
        let dim = 16;
        let n = 800;
        let data = clustered(seed, n + 40, dim, 30);
        let (points, queries) = data.split_at(n);
        for (name, make) in [("hnsw", hnsw as Factory), ("hnsw-graph-only", hnsw_graph_only as Factory)] {
            let mut idx = make("m", dim);
            let mut truth = BTreeMap::new();
            for (i, v) in points.iter().enumerate() {
                let ns = Namespace::new(format!("ns{}", i % 2));
                idx.add(id(i), ns.clone(), v).unwrap();
                truth.insert(id(i), (ns, v.clone()));
            }
            let r = recall(idx.as_ref(), &truth, queries, 10, None);
            prop_assert!(r >= STATED_RECALL, "{}: unfiltered recall {} < {}", name, r, STATED_RECALL);
            let only = [Namespace::new("ns1")];
            let r = recall(idx.as_ref(), &truth, queries, 10, Some(&only));
            prop_assert!(r >= STATED_RECALL, "{}: filtered recall {} < {}", name, r, STATED_RECALL);
            for i in (0..n).filter(|i| i % 5 == 0) {
                idx.remove(&id(i));
                truth.remove(&id(i));
            }
            let r = recall(idx.as_ref(), &truth, queries, 10, None);
            prop_assert!(r >= STATED_RECALL, "{}: recall after removals {} < {}", name, r, STATED_RECALL);
        }
    }
}

/// `FlatIndex::search_all_many` returns, for every query, exactly what that
/// query's own `search_all` returns: same ids, same score bits, same order,
/// ties (duplicated vectors) included; across namespaces of every size
/// around the tiles (0..600 rows), after removals, and for query counts
/// around the query tile.
#[test]
fn flat_batched_search_equals_one_search_per_query() {
    let dim = 24;
    let vs = clustered(21, 1400, dim, 9);
    let mut idx = FlatIndex::new("m", dim);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for (i, v) in vs.iter().enumerate() {
        let ns = Namespace::user(&format!("u{}", rng.gen_range(0..5)));
        idx.add(id(i), ns.clone(), v).unwrap();
        if i % 7 == 0 {
            // A duplicated vector: a tie the order must break by id.
            idx.add(id(format!("dup{i}")), ns, v).unwrap();
        }
    }
    for i in (0..1400).step_by(11) {
        idx.remove(&id(i));
    }
    for n_queries in [1usize, 63, 64, 65, 130] {
        let queries: Vec<Vec<f32>> = clustered(900 + n_queries as u64, n_queries, dim, 4);
        let refs: Vec<&[f32]> = queries.iter().map(|q| q.as_slice()).collect();
        for k in [1usize, 10, 37] {
            let many = idx.search_all_many(&refs, k).unwrap();
            assert_eq!(many.len(), n_queries);
            for (q, got) in refs.iter().zip(&many) {
                let want = idx.search_all(q, k).unwrap();
                let bits = |h: &[(MemoryId, f32)]| -> Vec<(MemoryId, u32)> {
                    h.iter().map(|(i, s)| (i.clone(), s.to_bits())).collect()
                };
                assert_eq!(bits(got), bits(&want), "{n_queries} queries, k = {k}");
            }
        }
    }
    let bad = vec![0.0f32; dim + 1];
    assert!(idx.search_all_many(&[bad.as_slice()], 3).is_err());
}
