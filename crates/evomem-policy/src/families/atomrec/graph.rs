//! The policy's working view of its atoms: fields, links and backlinks in
//! dense arrays plus a vector index over the embeddings, so that linking and
//! h-hop expansion do not scan the store.
//!
//! The view is derived state in the sense of the `Policy` contract: it
//! changes only through [`AtomGraph::apply`], which AtomRec calls with each
//! op it emits, right as it emits it (`AtomRec::emit`). What an op does to
//! the view is therefore written once, here, next to nothing else, and
//! [`AtomGraph::from_state`] rebuilds the same view from a [`MemoryState`]
//! by applying the ops that would create it (the mirror test checks the two
//! agree after every interaction).
//!
//! The one thing an op does not say is who and what an atom is about (the
//! owner's [`UserId`] and the [`ItemId`]); both come from the interaction
//! the op was made for (its `sources`): every atom AtomRec creates while
//! observing an interaction is about that interaction's item, and a user
//! atom belongs to that interaction's user.

use super::index::{atom_index, AtomIndex};
use super::note::NoteView;
use super::relation::{Relation, RelationFactors};
use super::retrieve::CO_WINDOW;
use evomem_core::{
    dot, Interaction, ItemId, LogicalTime, MemoryId, MemoryOp, MemoryRecord, MemoryState,
    Namespace, PolicyError, RecordKind, UserId,
};
use evomem_index::{Hit, IndexError, TieredIndex, TieredParams, VectorIndex};
use evomem_kit::walk::{self, Removed, Successors};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

/// Dense handle of an atom in the view.
pub type AtomIx = u32;

/// One link as the view keeps it: (other end, expansion weight = link
/// weight × relation factor, relation).
pub type Edge = (AtomIx, f32, Relation);

/// Candidates fetched beyond `k` by [`AtomGraph::nearest`] before it checks
/// whether more are needed.
const FETCH_MARGIN: usize = 8;

/// When [`AtomGraph::nearest_with`] has fetched enough candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    /// Once the k-th kept candidate beats every unfetched atom by more than
    /// [`score_slack`]: the exact top-k over the pool, ties by handle. With
    /// many equal vectors (the hashing embedder gives every note on one
    /// item by different users the same vector) the fetch doubles until it
    /// covers the whole tie group, each time a new search.
    Exact,
    /// Once `k` candidates are kept: the search's own top-k (its ties
    /// broken by id), re-scored and ordered by handle. What an approximate
    /// search (the seed graph) and the seed audit's single scan use: a tie
    /// group past the k-th place holds seeds exactly as good, so covering
    /// it buys nothing but cost.
    Kept,
}

/// What [`AtomGraph::nearest_with`] fetches from: a pool of `size` vectors
/// that `search(n)` ranks (its top `n` hits), and when it has enough.
struct Fetcher<'a> {
    size: usize,
    search: &'a dyn Fn(usize) -> Result<Vec<Hit>, IndexError>,
    settle: Settle,
}

/// How far apart the index's score (an 8-lane dot product) and
/// [`evomem_core::dot`] (a sequential sum) may be for unit vectors of `dim`
/// components, with a wide safety factor: both are within `dim · ε_f32` of
/// the exact value.
fn score_slack(dim: usize) -> f32 {
    (4.0 * dim as f32 * f32::EPSILON).max(1e-3)
}

/// One atom as the policy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AtomNode {
    /// Record id.
    pub id: MemoryId,
    /// Owner (`None` for item atoms).
    pub owner: Option<UserId>,
    /// The item the atom is about.
    pub item: ItemId,
    /// Creation time t.
    pub time: LogicalTime,
    /// Position in the owner's sequence (0 for item atoms).
    pub pos: u32,
    /// c, K, G, X.
    pub view: NoteView,
    /// Outgoing links.
    pub out: Vec<Edge>,
    /// Incoming links.
    pub inn: Vec<Edge>,
}

/// The items of the walk's window of latest atoms of `seq` (an owner's
/// atoms in order), the newest first: what a new atom pairs with in
/// [`AtomGraph::successors`].
fn latest_items(atoms: &[AtomNode], seq: &[AtomIx]) -> Vec<u32> {
    seq.iter()
        .rev()
        .take(walk::WINDOW)
        .filter_map(|&q| atoms.get(q as usize).map(|a| a.item.0))
        .collect()
}

/// All atoms, lookup tables and the vector index. See the module docs.
#[derive(Debug)]
pub struct AtomGraph {
    atoms: Vec<AtomNode>,
    ids: HashMap<MemoryId, AtomIx>,
    by_user: Vec<Vec<AtomIx>>,
    item_atom: HashMap<ItemId, AtomIx>,
    audience: HashMap<ItemId, Vec<AtomIx>>,
    /// Same-user atom pairs per unordered item pair and sequence distance
    /// (index `d - 1`, `d` in `1..=CO_WINDOW`): what co-consumption walks
    /// count ([`AtomGraph::co_pairs`]).
    windows: HashMap<u64, [u32; WINDOW]>,
    /// Forward co-consumption of the owners' sequences, for the ranker's
    /// walk term ([`evomem_kit::walk`], window [`evomem_kit::walk::WINDOW`]).
    successors: Successors,
    /// The largest audience (audiences only grow).
    max_audience: usize,
    n_links: usize,
    index: AtomIndex,
    factors: RelationFactors,
    /// Most recent user atoms a seed search over memory sees beyond the
    /// searcher's own (0 = all; [`AtomGraph::with_seed_window`]).
    seed_window: usize,
    n_user_atoms: usize,
    /// The seed pool once user atoms outnumber `seed_window`, or from the
    /// moment [`AtomGraph::enable_seed_graph`] asked for one.
    recent: Option<RecentPool>,
    /// Tiers of the seed pool's index: exact only (the default), or the
    /// graph tier asked for by [`AtomGraph::enable_seed_graph`].
    seed_tiers: TieredParams,
    /// The seed pool is kept from the first atom (and, with `seed_window`
    /// = 0, holds every atom), so that seed searches go through its tiers.
    pool_always: bool,
    /// Index searches made for seed searches over memory (the fetches of
    /// [`AtomGraph::nearest_all`] and [`AtomGraph::nearest_all_exact`]
    /// that a prefetch did not serve): what a tie group at the k-th place
    /// used to multiply.
    seed_searches: AtomicU64,
}

/// Tiers of a seed pool searched exactly (the graph tier never built).
fn exact_tiers() -> TieredParams {
    TieredParams {
        graph_min: usize::MAX,
        pending_max: usize::MAX,
        ..TieredParams::default()
    }
}

/// Every item atom and the `seed_window` most recent user atoms (every user
/// atom with `seed_window` = 0), copied into an index of their own
/// ([`AtomGraph::with_seed_window`], [`AtomGraph::enable_seed_graph`]),
/// exact or with an HNSW tier ([`TieredIndex`]). They all
/// sit in one namespace ([`pool_namespace`]): the pool is only ever searched
/// whole, and a flat index keeps an emptied namespace's block allocated, so
/// per-user blocks would hold on to a block for every user the window ever
/// passed over (2 GB more at 1M interactions).
#[derive(Debug)]
struct RecentPool {
    index: TieredIndex,
    /// User atoms in the pool, oldest first.
    order: VecDeque<AtomIx>,
}

/// Sequence distances the pair counts keep: a walk's second-hop window.
const WINDOW: usize = CO_WINDOW as usize;

/// The one namespace of the seed pool's index.
fn pool_namespace() -> Namespace {
    Namespace::new("atomrec-seed-pool")
}

fn item_pair_key(a: ItemId, b: ItemId) -> u64 {
    let (lo, hi) = if a.0 <= b.0 { (a.0, b.0) } else { (b.0, a.0) };
    (u64::from(lo) << 32) | u64::from(hi)
}

impl PartialEq for AtomGraph {
    /// Same atoms, links, tables and embeddings (the index's internal layout
    /// is not compared).
    fn eq(&self, other: &Self) -> bool {
        self.atoms == other.atoms
            && self.ids == other.ids
            && self.by_user == other.by_user
            && self.item_atom == other.item_atom
            && self.audience == other.audience
            && self.n_links == other.n_links
            && self.factors == other.factors
            && self.index.len() == other.index.len()
            && self
                .atoms
                .iter()
                .all(|a| self.index.vector(&a.id) == other.index.vector(&a.id))
    }
}

fn mirror_error(what: String) -> PolicyError {
    PolicyError::Other(format!("atomrec view: {what}"))
}

impl AtomGraph {
    /// An empty view over embeddings of `model_id` with `dim` components.
    pub fn new(model_id: &str, dim: usize) -> Self {
        Self::with_index(atom_index(model_id, dim))
    }

    /// An empty view over the given (empty) index.
    pub fn with_index(index: AtomIndex) -> Self {
        Self {
            atoms: Vec::new(),
            ids: HashMap::new(),
            by_user: Vec::new(),
            item_atom: HashMap::new(),
            audience: HashMap::new(),
            windows: HashMap::new(),
            successors: Successors::new(walk::WINDOW, walk::DECAY),
            max_audience: 0,
            n_links: 0,
            index,
            factors: RelationFactors::default(),
            seed_window: 0,
            n_user_atoms: 0,
            recent: None,
            seed_tiers: exact_tiers(),
            pool_always: false,
            seed_searches: AtomicU64::new(0),
        }
    }

    /// The same (empty) view, whose seed searches over memory
    /// ([`AtomGraph::nearest_all`], [`AtomGraph::prefetch_all`]) see the
    /// searcher's own atoms, every item atom and only the `window` most
    /// recent atoms of all users (0 = every atom, the default).
    ///
    /// Why: a search over all of memory per decision costs decisions ×
    /// atoms, both proportional to the data, so a run's time grew with its
    /// square (issue 16's cost curves). With a window, a search costs at
    /// most `window` + the items + the searcher's own atoms. Until user
    /// atoms outnumber the window nothing changes: the pool is built (a
    /// copy of the window's vectors) the first time they do, and then
    /// slides with each new atom.
    pub fn with_seed_window(mut self, window: usize) -> Self {
        self.seed_window = window;
        self
    }

    /// User atoms in the view.
    pub fn user_atom_count(&self) -> usize {
        self.n_user_atoms
    }

    /// Whether seed searches run over the sliding pool (memory has outgrown
    /// the seed window) rather than over every atom.
    pub fn seed_pool_active(&self) -> bool {
        self.recent.is_some()
    }

    /// From now on, seed searches over memory ([`AtomGraph::nearest_all`],
    /// [`AtomGraph::prefetch_all`]) go through a seed pool with the tiers
    /// `tiers` ([`TieredIndex`]: an HNSW tier once the pool holds more than
    /// `tiers.graph_min` atoms), kept from now on even while memory is
    /// smaller than the seed window (the pool then holds every atom). The
    /// pool's atoms are the same as before, so exact tiers give the same
    /// hits; the graph makes a search's cost sublinear in the pool.
    /// Idempotent once enabled; the pool is (re)built from the index.
    pub fn enable_seed_graph(&mut self, tiers: TieredParams) -> Result<(), PolicyError> {
        if self.pool_always && self.seed_tiers == tiers {
            return Ok(());
        }
        self.seed_tiers = tiers;
        self.pool_always = true;
        self.recent = Some(self.build_pool()?);
        Ok(())
    }

    /// Merge atoms added to the seed pool since the last call into its graph
    /// tier (built on the first call that finds the pool large enough); a
    /// no-op without a graph. Call before seed searches: searches are right
    /// either way, but pending atoms are scanned exactly.
    pub fn settle_seeds(&mut self) -> Result<(), PolicyError> {
        if let Some(pool) = self.recent.as_mut() {
            pool.index.settle()?;
        }
        Ok(())
    }

    /// Whether seed searches go through an HNSW graph (the pool's graph tier
    /// is built).
    pub fn seed_graph_active(&self) -> bool {
        self.recent.as_ref().is_some_and(|p| p.index.graph_active())
    }

    /// Atoms in the seed pool (0 without one).
    pub fn seed_pool_len(&self) -> usize {
        self.recent.as_ref().map_or(0, |p| p.index.len())
    }

    /// The same (empty) view with relation factors `factors` for the
    /// expansion weights of links applied from now on (default
    /// [`RelationFactors::default`]).
    pub fn with_factors(mut self, factors: RelationFactors) -> Self {
        self.factors = factors;
        self
    }

    /// Rebuild the view of `state`'s atoms by applying, in creation order,
    /// the ops that would create them as they are now, then their links.
    /// `source` names the interaction logged at a time (the one an atom
    /// created then is about). Links get the default relation factors; see
    /// [`AtomGraph::from_state_with_factors`].
    pub fn from_state(
        model_id: &str,
        dim: usize,
        state: &MemoryState,
        source: &dyn Fn(LogicalTime) -> Option<Interaction>,
    ) -> Result<Self, PolicyError> {
        Self::from_state_with_factors(model_id, dim, RelationFactors::default(), state, source)
    }

    /// [`AtomGraph::from_state`] with the relation factors of a non-default
    /// config.
    pub fn from_state_with_factors(
        model_id: &str,
        dim: usize,
        factors: RelationFactors,
        state: &MemoryState,
        source: &dyn Fn(LogicalTime) -> Option<Interaction>,
    ) -> Result<Self, PolicyError> {
        let mut g = Self::new(model_id, dim).with_factors(factors);
        let mut atoms: Vec<&MemoryRecord> = state
            .iter_all()
            .filter(|r| r.kind == RecordKind::Atom)
            .collect();
        // Item atom before the user atom of the same interaction, as observed.
        atoms.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(
                    a.namespace
                        .is_user_private()
                        .cmp(&b.namespace.is_user_private()),
                )
                .then_with(|| a.id.cmp(&b.id))
        });
        let mut sources = Vec::with_capacity(atoms.len());
        for r in &atoms {
            let src = source(r.created_at).ok_or_else(|| {
                mirror_error(format!("no interaction at {} for {}", r.created_at.0, r.id))
            })?;
            let mut bare = (*r).clone();
            bare.links.clear();
            g.apply(&MemoryOp::Create { record: bare }, &src)?;
            sources.push(src);
        }
        for (r, src) in atoms.iter().zip(&sources) {
            for l in &r.links {
                let op = MemoryOp::Link {
                    from: r.id.clone(),
                    to: l.target.clone(),
                    relation: l.relation.clone(),
                    weight: l.weight,
                };
                g.apply(&op, src)?;
            }
        }
        Ok(g)
    }

    /// Apply one op AtomRec emitted while observing `source` (see the module
    /// docs). AtomRec emits only atom creations, field updates and links; any
    /// other op is an error, as is an op naming an atom the view lacks.
    pub fn apply(&mut self, op: &MemoryOp, source: &Interaction) -> Result<(), PolicyError> {
        match op {
            MemoryOp::Create { record } => self.create(record, source),
            MemoryOp::UpdateFields {
                id,
                fields,
                text,
                embedding,
            } => {
                let ix = self.ix(id)?;
                if let Some(e) = embedding {
                    let ns = self.namespace_of(id)?;
                    if let Some(pool) = self.recent.as_mut() {
                        if pool.index.contains(id) {
                            pool.index.add_embedding(id.clone(), pool_namespace(), e)?;
                        }
                    }
                    self.index.add_embedding(id.clone(), ns, e)?;
                }
                if let Some(a) = self.atoms.get_mut(ix as usize) {
                    a.view.set_fields(fields)?;
                    if let Some(t) = text {
                        a.view.content = t.clone();
                    }
                }
                Ok(())
            }
            MemoryOp::Link {
                from,
                to,
                relation,
                weight,
            } => {
                let rel: Relation = relation.parse().map_err(|e| mirror_error(format!("{e}")))?;
                let (f, t) = (self.ix(from)?, self.ix(to)?);
                self.link(f, t, weight * self.factors.get(rel), rel);
                Ok(())
            }
            MemoryOp::Unlink { .. }
            | MemoryOp::AdjustStrength { .. }
            | MemoryOp::SetUtility { .. }
            | MemoryOp::Merge { .. }
            | MemoryOp::Forget { .. }
            | MemoryOp::Replace { .. }
            | MemoryOp::SetStatus { .. } => Err(mirror_error(format!(
                "AtomRec does not emit `{}` ops",
                op.name()
            ))),
        }
    }

    fn create(&mut self, record: &MemoryRecord, source: &Interaction) -> Result<(), PolicyError> {
        if record.kind != RecordKind::Atom {
            return Err(mirror_error(format!("{} is not an atom", record.id)));
        }
        if self.ids.contains_key(&record.id) {
            return Err(mirror_error(format!("atom {} exists", record.id)));
        }
        let emb = record
            .embedding
            .as_ref()
            .ok_or_else(|| mirror_error(format!("atom {} has no embedding", record.id)))?;
        self.index
            .add_embedding(record.id.clone(), record.namespace.clone(), emb)?;
        let ix = self.atoms.len() as AtomIx;
        let owner = record.namespace.is_user_private().then_some(source.user);
        let item = source.item;
        let pos = match owner {
            Some(u) => {
                if self.by_user.len() <= u.index() {
                    self.by_user.resize(u.index() + 1, Vec::new());
                }
                let seq = self.by_user.get_mut(u.index());
                let pos = seq.as_ref().map_or(0, |s| s.len() as u32);
                if let Some(s) = seq {
                    let previous = latest_items(&self.atoms, s);
                    self.successors.add(&previous, item.0);
                    // Pair the new atom with the owner's previous ones in
                    // the window (atoms are never removed, so the counts
                    // only grow).
                    for (d, &q) in s.iter().rev().take(WINDOW).enumerate() {
                        if let Some(other) = self.atoms.get(q as usize) {
                            let slot = self
                                .windows
                                .entry(item_pair_key(other.item, item))
                                .or_default();
                            if let Some(c) = slot.get_mut(d) {
                                *c += 1;
                            }
                        }
                    }
                    s.push(ix);
                }
                let aud = self.audience.entry(item).or_default();
                aud.push(ix);
                self.max_audience = self.max_audience.max(aud.len());
                pos
            }
            None => {
                self.item_atom.insert(item, ix);
                0
            }
        };
        self.ids.insert(record.id.clone(), ix);
        self.atoms.push(AtomNode {
            id: record.id.clone(),
            owner,
            item,
            time: record.created_at,
            pos,
            view: NoteView::from_record(record)?,
            out: Vec::new(),
            inn: Vec::new(),
        });
        if owner.is_some() {
            self.n_user_atoms += 1;
        }
        self.slide_pool(ix, &emb.vector)
    }

    /// Keep the seed pool ([`AtomGraph::with_seed_window`]) current after
    /// atom `ix` was created.
    fn slide_pool(&mut self, ix: AtomIx, v: &[f32]) -> Result<(), PolicyError> {
        if self.seed_window == 0 && !self.pool_always {
            return Ok(());
        }
        let Some(pool) = self.recent.as_mut() else {
            if self.pool_always || self.n_user_atoms > self.seed_window {
                self.recent = Some(self.build_pool()?);
            }
            return Ok(());
        };
        let Some(a) = self.atoms.get(ix as usize) else {
            return Ok(());
        };
        pool.index.add(a.id.clone(), pool_namespace(), v)?;
        if a.owner.is_some() {
            pool.order.push_back(ix);
        }
        while self.seed_window > 0 && pool.order.len() > self.seed_window {
            if let Some(old) = pool
                .order
                .pop_front()
                .and_then(|o| self.atoms.get(o as usize))
            {
                pool.index.remove(&old.id);
            }
        }
        Ok(())
    }

    /// The pool of every item atom and the most recent `seed_window` user
    /// atoms (all of them with `seed_window` = 0), from the index, with the
    /// tiers in force.
    fn build_pool(&self) -> Result<RecentPool, PolicyError> {
        let mut index = TieredIndex::with_params(
            self.index.model_id(),
            self.index.dim(),
            self.seed_tiers.clone(),
        );
        let cap = match self.seed_window {
            0 => usize::MAX,
            w => w,
        };
        let mut users: Vec<AtomIx> = Vec::with_capacity(cap.min(self.atoms.len()));
        for (ix, a) in self.atoms.iter().enumerate().rev() {
            if a.owner.is_some() {
                if users.len() < cap {
                    users.push(ix as AtomIx);
                }
                continue;
            }
            self.copy_into(&mut index, a)?;
        }
        users.reverse();
        for &ix in &users {
            if let Some(a) = self.atoms.get(ix as usize) {
                self.copy_into(&mut index, a)?;
            }
        }
        Ok(RecentPool {
            index,
            order: users.into(),
        })
    }

    fn copy_into(&self, index: &mut TieredIndex, a: &AtomNode) -> Result<(), PolicyError> {
        let Some(v) = self.index.vector(&a.id) else {
            return Err(mirror_error(format!("atom {} has no vector", a.id)));
        };
        index.add(a.id.clone(), pool_namespace(), v)?;
        Ok(())
    }

    /// Add (or re-describe, as [`MemoryState::apply`] does) the link `from -> to`.
    fn link(&mut self, from: AtomIx, to: AtomIx, weight: f32, rel: Relation) {
        // Edge lists are kept sorted by the other end, so the view does not
        // depend on the order links were made in (evolution adds links to
        // old atoms; a view rebuilt from the state applies them by record).
        fn put(edges: &mut Vec<Edge>, edge: Edge) -> bool {
            match edges.binary_search_by_key(&edge.0, |e| e.0) {
                Ok(k) => {
                    if let Some(e) = edges.get_mut(k) {
                        *e = edge;
                    }
                    true
                }
                Err(k) => {
                    edges.insert(k, edge);
                    false
                }
            }
        }
        let existed = self
            .atoms
            .get_mut(from as usize)
            .is_some_and(|a| put(&mut a.out, (to, weight, rel)));
        if let Some(b) = self.atoms.get_mut(to as usize) {
            put(&mut b.inn, (from, weight, rel));
        }
        if !existed {
            self.n_links += 1;
        }
    }

    fn ix(&self, id: &MemoryId) -> Result<AtomIx, PolicyError> {
        self.ids
            .get(id)
            .copied()
            .ok_or_else(|| mirror_error(format!("unknown atom {id}")))
    }

    fn namespace_of(&self, id: &MemoryId) -> Result<Namespace, PolicyError> {
        self.index
            .namespace_of(id)
            .cloned()
            .ok_or_else(|| mirror_error(format!("atom {id} is not indexed")))
    }

    /// An atom by handle.
    pub fn get(&self, ix: AtomIx) -> Option<&AtomNode> {
        self.atoms.get(ix as usize)
    }

    /// The handle of an atom id.
    pub fn handle(&self, id: &MemoryId) -> Option<AtomIx> {
        self.ids.get(id).copied()
    }

    /// The embedding e of an atom.
    pub fn emb(&self, ix: AtomIx) -> Option<&[f32]> {
        self.get(ix).and_then(|a| self.index.vector(&a.id))
    }

    /// Every atom, in creation order.
    pub fn atoms(&self) -> &[AtomNode] {
        &self.atoms
    }

    /// A user's atoms, in time order.
    pub fn user_atoms(&self, u: UserId) -> &[AtomIx] {
        self.by_user
            .get(u.index())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The item atom of `item`.
    pub fn item_atom(&self, item: ItemId) -> Option<AtomIx> {
        self.item_atom.get(&item).copied()
    }

    /// User atoms about `item`, in creation order.
    pub fn audience(&self, item: ItemId) -> &[AtomIx] {
        self.audience.get(&item).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Co-consumption walks from an atom on `x` to an atom on `y` through
    /// one user's sequence, per distance: element `d - 1` counts the ordered
    /// pairs (atom on `x`, atom on `y`) of one owner `d` positions apart
    /// (`d` in `1..=CO_WINDOW`), over every user. Kept up to date as atoms
    /// are created, so reading it costs one lookup whatever the audiences'
    /// sizes.
    pub fn co_pairs(&self, x: ItemId, y: ItemId) -> [u32; WINDOW] {
        let c = self
            .windows
            .get(&item_pair_key(x, y))
            .copied()
            .unwrap_or_default();
        // Two atoms on the same item make a walk each way.
        if x == y {
            c.map(|v| 2 * v)
        } else {
            c
        }
    }

    /// Forward co-consumption of every owner's sequence (the walk term's).
    pub fn successors(&self) -> &Successors {
        &self.successors
    }

    /// What `user`'s latest atom added to [`AtomGraph::successors`] when it
    /// arrived, if that atom is `latest` (the fit's held-out one).
    pub fn latest_arrival(&self, user: UserId, latest: AtomIx) -> Option<Removed> {
        let seq = self.by_user.get(user.index())?;
        let (&last, before) = seq.split_last()?;
        if last != latest {
            return None;
        }
        let item = self.atoms.get(last as usize)?.item.0;
        let previous = latest_items(&self.atoms, before);
        Some(self.successors.without_latest(&previous, item))
    }

    /// The largest audience of any item.
    pub fn max_audience(&self) -> usize {
        // Kept as atoms arrive: every ranking decision reads it, and a scan
        // of the audiences there cost the catalog's size per decision.
        self.max_audience
    }

    /// Number of links.
    pub fn n_links(&self) -> usize {
        self.n_links
    }

    /// The vector index.
    pub fn index(&self) -> &AtomIndex {
        &self.index
    }

    /// The `k` atoms most similar to `query` among those of `namespaces`
    /// that pass `keep`, together with the `extra` atoms, as
    /// `(handle, cos)`, most similar first, ties by handle. Scores are
    /// [`evomem_core::dot`].
    ///
    /// The index ranks with its own dot-product kernel, whose rounding differs
    /// from `dot`'s, so candidates are fetched until the k-th kept one beats
    /// every unfetched atom by more than [`score_slack`], then re-scored with
    /// `dot` and sorted: with the exact index the result is exactly the
    /// brute-force top-k over the pool, ties and all.
    pub fn nearest(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
        extra: &[AtomIx],
        keep: &dyn Fn(&AtomNode) -> bool,
    ) -> Result<Vec<(AtomIx, f32)>, PolicyError> {
        let size: usize = namespaces
            .iter()
            .map(|ns| self.index.namespace_len(ns))
            .sum();
        self.nearest_with(
            query,
            k,
            Fetcher {
                size,
                search: &|n| self.index.search(query, n, namespaces),
                settle: Settle::Exact,
            },
            extra,
            keep,
        )
    }

    /// [`AtomGraph::nearest`] over every atom in memory (the paper's
    /// TopK over M); `keep` says which atoms the caller may see.
    /// `prefetched`, when given, is the top-n of `search_all(query, n)`
    /// for some n (see [`AtomGraph::prefetch_all`]): fetches of at most n
    /// hits are its prefix, larger ones search again.
    ///
    /// Through the seed graph ([`AtomGraph::seed_graph_active`]) the search
    /// stops at the first fetch that keeps `k` atoms ([`Settle::Kept`]):
    /// the answer is approximate anyway, and covering a tie group at the
    /// k-th place (which doubled the fetch until it did, a graph search each
    /// time) adds seeds of the same cosine. Exact tiers keep the exact
    /// answer, ties by handle.
    pub fn nearest_all(
        &self,
        query: &[f32],
        k: usize,
        own: &Namespace,
        keep: &dyn Fn(&AtomNode) -> bool,
        prefetched: Option<&[Hit]>,
    ) -> Result<Vec<(AtomIx, f32)>, PolicyError> {
        let size = match &self.recent {
            Some(pool) => pool.index.len() + self.index.namespace_len(own),
            None => self.index.len(),
        };
        let settle = if self.seed_graph_active() {
            Settle::Kept
        } else {
            Settle::Exact
        };
        let search = |n: usize| match prefetched {
            Some(h) if n <= h.len() => Ok(h.get(..n).unwrap_or(h).to_vec()),
            _ => self.search_seeds(query, n, own),
        };
        self.nearest_with(
            query,
            k,
            Fetcher {
                size,
                search: &search,
                settle,
            },
            &[],
            keep,
        )
    }

    /// [`AtomGraph::nearest_all`] searched exactly whatever the seed pool's
    /// tiers: the reference its graph search is audited against. One exact
    /// scan of `k` + [`FETCH_MARGIN`] hits ([`Settle::Kept`]): the top-k
    /// cosines are exact, but within a tie group at the k-th place the
    /// atoms are the index's choice (by id), not the lowest handles. The
    /// audit's recall counting ties needs only the k-th cosine; an audit
    /// that covered the tie group cost a doubling series of full scans.
    pub fn nearest_all_exact(
        &self,
        query: &[f32],
        k: usize,
        own: &Namespace,
        keep: &dyn Fn(&AtomNode) -> bool,
    ) -> Result<Vec<(AtomIx, f32)>, PolicyError> {
        let size = match &self.recent {
            Some(pool) => pool.index.len() + self.index.namespace_len(own),
            None => self.index.len(),
        };
        self.nearest_with(
            query,
            k,
            Fetcher {
                size,
                search: &|n| self.search_seeds_with(query, n, own, true),
                settle: Settle::Kept,
            },
            &[],
            keep,
        )
    }

    /// The top-`n` hits of a seed search over memory for a searcher whose
    /// namespace is `own`: every atom, or (once the seed pool is active,
    /// [`AtomGraph::with_seed_window`]) the pool and `own`.
    fn search_seeds(
        &self,
        query: &[f32],
        n: usize,
        own: &Namespace,
    ) -> Result<Vec<Hit>, IndexError> {
        self.search_seeds_with(query, n, own, false)
    }

    /// Index searches made for seed searches over memory so far (module
    /// field `seed_searches`).
    pub fn seed_searches(&self) -> u64 {
        self.seed_searches.load(Ordering::Relaxed)
    }

    /// [`AtomGraph::search_seeds`], through the pool's exact tier alone
    /// when `exact`.
    fn search_seeds_with(
        &self,
        query: &[f32],
        n: usize,
        own: &Namespace,
        exact: bool,
    ) -> Result<Vec<Hit>, IndexError> {
        self.seed_searches.fetch_add(1, Ordering::Relaxed);
        match &self.recent {
            None => self.index.search_all(query, n),
            Some(pool) => {
                let shared = if exact {
                    pool.index.search_exact(query, n, None)?
                } else {
                    pool.index.search_all(query, n)?
                };
                Ok(merge_hits(
                    shared,
                    self.index.search(query, n, std::slice::from_ref(own))?,
                    n,
                ))
            }
        }
    }

    /// The top-`n` hits of [`AtomGraph::nearest_all`]'s search for every
    /// query of `queries` (searcher namespaces in `owners`, aligned), in one
    /// pass over the index or the seed pool: what `nearest_all` takes as
    /// `prefetched`.
    pub fn prefetch_all(
        &self,
        queries: &[&[f32]],
        owners: &[Namespace],
        n: usize,
    ) -> Result<Vec<Vec<Hit>>, PolicyError> {
        let Some(pool) = &self.recent else {
            return Ok(self.index.search_all_many(queries, n)?);
        };
        let shared = pool.index.search_all_many(queries, n)?;
        let mut out = Vec::with_capacity(shared.len());
        for ((q, own), hits) in queries.iter().zip(owners).zip(shared) {
            let mine = self.index.search(q, n, std::slice::from_ref(own))?;
            out.push(merge_hits(hits, mine, n));
        }
        Ok(out)
    }

    /// The fetch-until-settled loop of [`AtomGraph::nearest`] over a pool
    /// of `size` vectors that `search(n)` ranks, stopping by `settle`.
    fn nearest_with(
        &self,
        query: &[f32],
        k: usize,
        fetcher: Fetcher<'_>,
        extra: &[AtomIx],
        keep: &dyn Fn(&AtomNode) -> bool,
    ) -> Result<Vec<(AtomIx, f32)>, PolicyError> {
        let Fetcher {
            size,
            search,
            settle,
        } = fetcher;
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut pool: Vec<AtomIx> = Vec::new();
        let slack = score_slack(query.len());
        let mut fetch = (k + FETCH_MARGIN).min(size);
        while fetch > 0 {
            let hits = search(fetch)?;
            let kept: Vec<(AtomIx, f32)> = hits
                .iter()
                .filter_map(|(id, s)| {
                    let ix = self.handle(id)?;
                    keep(self.get(ix)?).then_some((ix, *s))
                })
                .collect();
            let exhausted = hits.len() < fetch || fetch >= size;
            let settled = match (kept.get(k - 1), hits.last(), settle) {
                (Some(_), _, Settle::Kept) => true,
                (Some(kth), Some(last), Settle::Exact) => kth.1 - last.1 > slack,
                _ => false,
            };
            if exhausted || settled {
                pool = kept.into_iter().map(|h| h.0).collect();
                break;
            }
            fetch = fetch.saturating_mul(2).min(size);
        }
        for &ix in extra {
            if !pool.contains(&ix) {
                pool.push(ix);
            }
        }
        let mut scored: Vec<(AtomIx, f32)> = pool
            .into_iter()
            .filter_map(|ix| self.emb(ix).map(|e| (ix, dot(query, e))))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        Ok(scored)
    }
}

/// The best `n` of two hit lists (each sorted as the index sorts: score
/// descending, then id), without duplicates: what one search over the union
/// of their pools returns, since a vector scores the same bits in either.
fn merge_hits(a: Vec<Hit>, b: Vec<Hit>, n: usize) -> Vec<Hit> {
    let mut all = a;
    all.extend(b);
    all.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    all.dedup_by(|x, y| x.0 == y.0);
    all.truncate(n);
    all
}
