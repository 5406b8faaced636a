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
//!
//! The tier logic (graph, pending vectors, merges, taking the graph out to
//! build it off a lock) lives in one type, `GraphTier`, over the vectors of
//! a flat store: [`TieredIndex`] has one tier over its whole index,
//! [`crate::NamespacedIndex`] one per large namespace.

use crate::flat::FlatIndex;
use crate::kernel::dot;
use crate::{check_vector, Hit, HnswIndex, HnswParams, IndexError, VectorIndex};
use evomem_core::{MemoryId, Namespace};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

/// Parameters of a [`TieredIndex`] (and of each namespace's tiers in a
/// [`crate::NamespacedIndex`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TieredParams {
    /// The graph tier is built only once the index (a namespace, in a
    /// [`crate::NamespacedIndex`]) holds more than this many live vectors;
    /// below it every search is exact. Default 2048
    /// (`HnswParams::default().exact_threshold`). `usize::MAX` keeps the
    /// index exact forever.
    pub graph_min: usize,
    /// Pending vectors `add` lets wait before it merges them into the graph
    /// itself. Default 2048 (a search's exact scan of the pending vectors
    /// stays that small); `usize::MAX` merges only at
    /// [`TieredIndex::settle`]; 0 merges every add at once.
    pub pending_max: usize,
    /// Build a new graph with [`HnswIndex::bulk_load`] (parallel, fast, but
    /// the graph may differ between runs) instead of sequential inserts in
    /// add order (reproducible). Default `false`.
    pub bulk_load: bool,
    /// Parameters of the graph tier.
    pub hnsw: HnswParams,
}

impl Default for TieredParams {
    fn default() -> Self {
        Self {
            graph_min: 2048,
            pending_max: 2048,
            bulk_load: false,
            hnsw: HnswParams::default(),
        }
    }
}

/// Where a tier's graph is.
enum GraphSlot {
    /// Not built yet: every live vector of the tier is pending.
    Absent,
    /// Built; pending vectors are those added since the last merge (boxed:
    /// the graph is large, the other states are not).
    Built(Box<HnswIndex>),
    /// Taken out by [`GraphTier::take`] to be built off the owner's lock;
    /// pending vectors were added since. `removed`: ids removed or replaced
    /// meanwhile, removed from the graph when it comes back.
    Out { ticket: u64, removed: Vec<MemoryId> },
}

/// Tickets pairing a taken-out graph with the tier it came from: unique in
/// the process, so a graph never goes back into another index (a rebuilt
/// one) or into a tier taken out again since.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

/// The graph tier over (part of) a [`FlatIndex`]: the graph, the live
/// vectors not yet in it (by add sequence), and the merge logic. Shared by
/// [`TieredIndex`] (one tier over the whole index) and
/// [`crate::NamespacedIndex`] (one tier per large namespace); the vectors
/// themselves are read from the flat store the owner passes in.
pub(crate) struct GraphTier {
    slot: GraphSlot,
    /// Live vectors not (yet) in the graph, by add sequence.
    pending: BTreeMap<u64, MemoryId>,
    pending_seq: HashMap<MemoryId, u64>,
    next_seq: u64,
    merges: usize,
}

impl std::fmt::Debug for GraphTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slot = match &self.slot {
            GraphSlot::Absent => "absent".to_string(),
            GraphSlot::Built(g) => format!("{g:?}"),
            GraphSlot::Out { ticket, .. } => format!("out (ticket {ticket})"),
        };
        f.debug_struct("GraphTier")
            .field("graph", &slot)
            .field("pending", &self.pending.len())
            .field("merges", &self.merges)
            .finish()
    }
}

impl GraphTier {
    /// A tier with no graph, whose pending vectors are `ids` in this order.
    pub(crate) fn with_pending(ids: impl IntoIterator<Item = MemoryId>) -> Self {
        let mut tier = Self {
            slot: GraphSlot::Absent,
            pending: BTreeMap::new(),
            pending_seq: HashMap::new(),
            next_seq: 0,
            merges: 0,
        };
        for id in ids {
            tier.push_pending(id);
        }
        tier
    }

    /// The graph, once built (and not taken out).
    pub(crate) fn graph(&self) -> Option<&HnswIndex> {
        match &self.slot {
            GraphSlot::Built(g) => Some(g.as_ref()),
            GraphSlot::Absent | GraphSlot::Out { .. } => None,
        }
    }

    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn merges(&self) -> usize {
        self.merges
    }

    fn push_pending(&mut self, id: MemoryId) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.insert(seq, id.clone());
        self.pending_seq.insert(id, seq);
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

    /// `id` was added to (or replaced in) the flat store: its old vector
    /// leaves the graph or the pending list, the new one waits as pending.
    pub(crate) fn note_add(&mut self, id: &MemoryId) {
        self.note_remove(id);
        self.push_pending(id.clone());
    }

    /// `id` left the flat store (or this tier's namespace).
    pub(crate) fn note_remove(&mut self, id: &MemoryId) {
        if self.forget_pending(id) {
            return;
        }
        match &mut self.slot {
            GraphSlot::Built(g) => {
                g.remove(id);
            }
            GraphSlot::Out { removed, .. } => removed.push(id.clone()),
            GraphSlot::Absent => {}
        }
    }

    /// Merge every pending vector into the graph, building it first when
    /// `live` (the tier's live vectors) exceeds [`TieredParams::graph_min`],
    /// in add order. A no-op when nothing is pending, the tier is small or
    /// its graph is out.
    pub(crate) fn settle(
        &mut self,
        flat: &FlatIndex,
        live: usize,
        params: &TieredParams,
    ) -> Result<(), IndexError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut graph = match std::mem::replace(&mut self.slot, GraphSlot::Absent) {
            GraphSlot::Built(g) => Some(*g),
            GraphSlot::Absent if live > params.graph_min => None,
            other => {
                self.slot = other;
                return Ok(());
            }
        };
        self.pending_seq.clear();
        let ids = std::mem::take(&mut self.pending);
        let entries = ids.into_values().filter_map(|id| {
            let ns = flat.namespace_of(&id)?.clone();
            let v = flat.vector(&id)?;
            Some((id, ns, v))
        });
        let filled = fill(&mut graph, flat.model_id(), flat.dim(), params, entries);
        if let Some(g) = graph {
            self.slot = GraphSlot::Built(Box::new(g));
        }
        self.merges += 1;
        filled
    }

    /// Graph hits plus an exact scan of the pending vectors, merged; `None`
    /// when there is no graph (the caller answers from the flat store).
    pub(crate) fn search(
        &self,
        flat: &FlatIndex,
        query: &[f32],
        k: usize,
        namespaces: Option<&[Namespace]>,
    ) -> Result<Option<Vec<Hit>>, IndexError> {
        let Some(graph) = self.graph() else {
            return Ok(None);
        };
        check_vector(flat.dim(), "<query>", query)?;
        let mut hits = match namespaces {
            Some(ns) => graph.search(query, k, ns)?,
            None => graph.search_all(query, k)?,
        };
        for id in self.pending.values() {
            let allowed = match (namespaces, flat.namespace_of(id)) {
                (None, _) => true,
                (Some(list), Some(ns)) => list.contains(ns),
                (Some(_), None) => false,
            };
            if let (true, Some(v)) = (allowed, flat.vector(id)) {
                hits.push((id.clone(), dot(query, v)));
            }
        }
        sort_hits(&mut hits, k);
        Ok(Some(hits))
    }

    /// Take the graph out (none yet: one is to be built) with copies of the
    /// pending vectors, for [`GraphBuild::run`] off the owner's lock. Until
    /// [`GraphTier::put`] the tier answers exactly from the flat store,
    /// keeps new vectors pending and remembers removals. `None` when there
    /// is nothing to merge, the tier is small or its graph is already out.
    pub(crate) fn take(
        &mut self,
        flat: &FlatIndex,
        live: usize,
        params: &TieredParams,
    ) -> Option<GraphBuild> {
        if self.pending.is_empty() {
            return None;
        }
        match &self.slot {
            GraphSlot::Out { .. } => return None,
            GraphSlot::Absent if live <= params.graph_min => return None,
            GraphSlot::Absent | GraphSlot::Built(_) => {}
        }
        let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
        let out = GraphSlot::Out {
            ticket,
            removed: Vec::new(),
        };
        let graph = match std::mem::replace(&mut self.slot, out) {
            GraphSlot::Built(g) => Some(*g),
            GraphSlot::Absent | GraphSlot::Out { .. } => None,
        };
        self.pending_seq.clear();
        let vectors = std::mem::take(&mut self.pending)
            .into_values()
            .filter_map(|id| {
                let ns = flat.namespace_of(&id)?.clone();
                let v = flat.vector(&id)?.to_vec();
                Some((id, ns, v))
            })
            .collect();
        Some(GraphBuild {
            ticket,
            graph,
            vectors,
            model: flat.model_id().to_string(),
            dim: flat.dim(),
            params: params.clone(),
        })
    }

    /// Put back a graph [`GraphBuild::run`] finished: removals made
    /// meanwhile are applied to it; vectors added meanwhile stay pending.
    /// Returns `false` (and drops the graph) unless this tier's graph is
    /// out under the same ticket.
    pub(crate) fn put(&mut self, built: BuiltGraph) -> bool {
        match &mut self.slot {
            GraphSlot::Out { ticket, removed } if *ticket == built.ticket => {
                let mut graph = built.graph;
                for id in removed.iter() {
                    graph.remove(id);
                }
                self.slot = GraphSlot::Built(Box::new(graph));
                true
            }
            GraphSlot::Out { .. } | GraphSlot::Absent | GraphSlot::Built(_) => false,
        }
    }
}

/// Sort hits by score descending then id ascending, drop repeated ids and
/// keep the first `k`.
pub(crate) fn sort_hits(hits: &mut Vec<Hit>, k: usize) {
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    hits.dedup_by(|a, b| a.0 == b.0);
    hits.truncate(k);
}

/// Put `entries` into `graph`: sequential inserts into an existing graph;
/// a new one ([`TieredParams::bulk_load`] or sequential inserts) when
/// there is none.
fn fill<'a>(
    graph: &mut Option<HnswIndex>,
    model: &str,
    dim: usize,
    params: &TieredParams,
    entries: impl IntoIterator<Item = (MemoryId, Namespace, &'a [f32])>,
) -> Result<(), IndexError> {
    let g = match graph {
        Some(g) => g,
        None if params.bulk_load => {
            *graph = Some(HnswIndex::bulk_load(
                model,
                dim,
                params.hnsw.clone(),
                entries,
            )?);
            return Ok(());
        }
        None => graph.insert(HnswIndex::with_params(model, dim, params.hnsw.clone())),
    };
    for (id, ns, v) in entries {
        g.add(id, ns, v)?;
    }
    Ok(())
}

/// One tier's graph taken out by [`GraphTier::take`] (none: build one) and
/// the vectors to put in; [`GraphBuild::run`] needs no access to the index.
pub(crate) struct GraphBuild {
    ticket: u64,
    graph: Option<HnswIndex>,
    vectors: Vec<(MemoryId, Namespace, Vec<f32>)>,
    model: String,
    dim: usize,
    params: TieredParams,
}

impl GraphBuild {
    /// Insert (or build) without any lock.
    pub(crate) fn run(self) -> Result<BuiltGraph, IndexError> {
        let mut graph = self.graph;
        let entries = self
            .vectors
            .iter()
            .map(|(id, ns, v)| (id.clone(), ns.clone(), v.as_slice()));
        fill(&mut graph, &self.model, self.dim, &self.params, entries)?;
        let graph = match graph {
            Some(g) => g,
            None => HnswIndex::with_params(self.model, self.dim, self.params.hnsw),
        };
        Ok(BuiltGraph {
            ticket: self.ticket,
            graph,
        })
    }
}

/// A graph [`GraphBuild::run`] finished, for [`GraphTier::put`].
pub(crate) struct BuiltGraph {
    ticket: u64,
    graph: HnswIndex,
}

/// Flat exact tier plus a lazily merged HNSW tier. See the module docs.
pub struct TieredIndex {
    params: TieredParams,
    flat: FlatIndex,
    tier: GraphTier,
}

impl std::fmt::Debug for TieredIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredIndex")
            .field("model_id", &self.flat.model_id())
            .field("dim", &self.flat.dim())
            .field("live", &self.flat.len())
            .field("tier", &self.tier)
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
            tier: GraphTier::with_pending([]),
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
        self.tier.graph()
    }

    /// Whether searches go through the graph tier.
    pub fn graph_active(&self) -> bool {
        self.tier.graph().is_some()
    }

    /// Live vectors waiting to be merged into the graph (with no graph:
    /// every live vector).
    pub fn pending_len(&self) -> usize {
        self.tier.pending_len()
    }

    /// How many batches were merged into the graph.
    pub fn merges(&self) -> usize {
        self.tier.merges()
    }

    /// The stored vector of `id`.
    pub fn vector(&self, id: &MemoryId) -> Option<&[f32]> {
        self.flat.vector(id)
    }

    /// Merge every pending vector into the graph (building it first when the
    /// index has outgrown [`TieredParams::graph_min`]), in add order. A no-op
    /// when nothing is pending or the index is small.
    pub fn settle(&mut self) -> Result<(), IndexError> {
        self.tier.settle(&self.flat, self.flat.len(), &self.params)
    }

    /// [`VectorIndex::search_all`] for many queries: one blocked pass over
    /// the flat tier while there is no graph ([`FlatIndex::search_all_many`]),
    /// else one search per query.
    pub fn search_all_many(
        &self,
        queries: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Vec<Hit>>, IndexError> {
        if !self.graph_active() {
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
        self.flat.add(id.clone(), namespace, vector)?;
        // A replaced vector leaves the graph (or the pending list) first.
        self.tier.note_add(&id);
        if self.tier.pending_len() > self.params.pending_max {
            self.settle()?;
        }
        Ok(())
    }

    fn remove(&mut self, id: &MemoryId) -> bool {
        self.tier.note_remove(id);
        self.flat.remove(id)
    }

    fn search(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
    ) -> Result<Vec<Hit>, IndexError> {
        match self.tier.search(&self.flat, query, k, Some(namespaces))? {
            Some(hits) => Ok(hits),
            None => self.flat.search(query, k, namespaces),
        }
    }

    fn search_all(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError> {
        match self.tier.search(&self.flat, query, k, None)? {
            Some(hits) => Ok(hits),
            None => self.flat.search_all(query, k),
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
            bulk_load: false,
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
