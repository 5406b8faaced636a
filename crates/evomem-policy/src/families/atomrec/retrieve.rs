//! Context-aware collaborative retrieval (AtomRec §2.6).
//!
//! 1. Query q_u^t: normalised sum of E(instruction) (if any), the
//!    recency-weighted mean embedding of the user's last 10 atoms, and half the
//!    mean embedding of all the user's pre-target atoms.
//! 2. M_0 = top-k_ret by cos(q, e) over the memory the user may see (own
//!    atoms, item atoms, other users' atoms with `collab`), as in the paper;
//!    `seed_scope=own` restricts it to the user's own atoms ([`seeds`]).
//!    Other users' atoms are searched within the `seed_window` most recent
//!    ([`AtomGraph::with_seed_window`]; all of them on ml-100k). With
//!    `seed_index=hnsw` (and `auto` on data of many users) that search goes
//!    through an HNSW tier over the seed pool ([`ensure_seed_index`]), so a
//!    decision costs far fewer than the pool's atoms; every `seed_audit`-th
//!    decision is also searched exactly and the seeds' recall reported.
//! 3. G_sub: breadth-first expansion along links (both directions: outgoing
//!    links and backlinks) up to h hops. A node's hop is its BFS distance; its
//!    score is the best, over shortest paths, of
//!    cos(q, e_seed) · Π link weight · decay^hop. Other users' atoms are
//!    visible only with `collab=true` (see the isolation note in the module
//!    root). Fan-out per node is capped at the 48 heaviest links; a link's
//!    weight in the expansion is its cosine times its relation factor
//!    ([`super::relation::RelationFactors`]). Seed scores are damped by age (0.95 per
//!    later own interaction).
//! 4. Co-consumption walks ([`co_walks_to`], with `collab=true` and
//!    link-aware retrieval on): the dense 2-hop paths that go through item
//!    notes. From each of the user's last [`CO_RECENT`] atoms (about item X,
//!    age k) to another user's atom on X (hop 1: the item note X gathers
//!    every atom about X), then to that user's atom within [`CO_WINDOW`]
//!    positions of it in their sequence (hop 2: the notes' context field X),
//!    about item Y. The walk scores `0.95^k / sqrt(|Δpos|)` for Y; Y's summed
//!    walk mass is divided by `(1 + n_Y)^co_pop` (n_Y = Y's audience,
//!    `co_pop` = 0.5) before the ranker sees it. Only candidates' mass is
//!    needed, and it is read off pair counts the graph keeps
//!    ([`AtomGraph::co_pairs`]) rather than walked (see [`co_walks_to`]).
//! 5. Evidence paths (seed → … → node) ending on atoms about items the user
//!    has not consumed are synthesised by `atomrec_synthesize` and handed to
//!    the decider with the seeds; the offline [`super::ranker`] scores the
//!    candidates. Each candidate's item memory M_i (its item atom's fields,
//!    audience and heaviest links, [`item_memory`]) goes to the decider too. Each evidence-path entry carries its path as data
//!    ([`ContextEntry::path`]): the atom ids along it (other users' atoms as
//!    their `anon:` label), the relation of each hop and the path score.

use super::budget::{SYNTH_PATHS, SYNTH_SEEDS};
use super::config::Budget;
use super::config::{SeedIndex, SeedScope, SEED_GRAPH_MIN_USERS};
use super::graph::{AtomGraph, AtomIx, AtomNode, Edge};
use super::note::prompt_content;
use super::ranker::{self, RankerInputs};
use super::relation::Relation;
use super::roles::{PathHop, PathView, SynthInput, SynthesizeRole};
use super::{anon_label, AtomRec};
use evomem_core::{
    dot, normalize, ContextEntry, DecisionContext, DecisionQuery, DecisionTag, EvidencePath,
    ItemId, ItemMemory, LogicalTime, MemoryId, Namespace, PolicyCtx, PolicyError, Recall,
    UsageTrace, UsedMemory, UserId,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Default fan-out cap per expanded node.
pub const FANOUT: usize = 48;
/// Own atoms that start co-consumption walks (the most recent ones).
pub const CO_RECENT: usize = 20;
/// Sequence window of a co-consumption walk's second hop.
pub const CO_WINDOW: u32 = 5;
/// Per-age decay of a co-consumption walk's start.
pub const CO_AGE_DECAY: f64 = 0.95;
/// The best co-consumption walk to an item: (score, own atom, other user's
/// atom on the same item, their atom on the item reached).
pub type CoPath = (f64, AtomIx, AtomIx, AtomIx);

/// Co-consumption walks (module docs, step 4) from `own` (time order) over
/// every other user's atom that memory holds, walked one by one. Returns
/// the walk mass per reached item and the best single walk to each.
///
/// This is the definition, kept as the reference that [`co_walks_to`] is
/// tested against. Its cost is the audiences of the start items, which grow
/// with the number of users, so a run's time grew with users² (time
/// exponent 1.37 on the generated 100k–1M curves, issue 16).
///
/// There is no time filter on other users' atoms: memory holds exactly what
/// the protocol lets a decision see. Under the retrospective protocol that
/// includes other users' non-test interactions later than the decision (the
/// information BPR and item-kNN train on); under the evolving protocol memory
/// only holds the past. (An earlier version also dropped other users'
/// atoms later than the decision; on ml-100k, validation targets, that cost
/// the retrospective ranker information the baselines had.)
pub fn co_walks(
    graph: &AtomGraph,
    own: &[AtomIx],
    me: UserId,
) -> (BTreeMap<ItemId, f64>, BTreeMap<ItemId, CoPath>) {
    // Dense per-item slots (item ids are small and dense), turned into maps
    // at the end; every walk adds in the same order as into a map, so the
    // sums are the same bits.
    let mut mass_v: Vec<f64> = Vec::new();
    let mut best_v: Vec<Option<CoPath>> = Vec::new();
    for (age, &start) in own.iter().rev().take(CO_RECENT).enumerate() {
        let Some(a) = graph.get(start) else { continue };
        let w0 = CO_AGE_DECAY.powi(age as i32);
        for &mid in graph.audience(a.item) {
            let Some(m) = graph.get(mid) else { continue };
            let Some(other) = m.owner else { continue };
            if other == me {
                continue;
            }
            let seq = graph.user_atoms(other);
            let lo = m.pos.saturating_sub(CO_WINDOW) as usize;
            let hi = ((m.pos + CO_WINDOW) as usize + 1).min(seq.len());
            for &end in seq.get(lo..hi).unwrap_or(&[]) {
                let Some(e) = graph.get(end) else { continue };
                if end == mid {
                    continue;
                }
                let dist = f64::from(e.pos.abs_diff(m.pos).max(1));
                let s = w0 / dist.sqrt();
                let slot = e.item.0 as usize;
                if slot >= mass_v.len() {
                    mass_v.resize(slot + 1, 0.0);
                    best_v.resize(slot + 1, None);
                }
                if let (Some(m), Some(b)) = (mass_v.get_mut(slot), best_v.get_mut(slot)) {
                    *m += s;
                    match b {
                        Some(b) if s <= b.0 => {}
                        _ => *b = Some((s, start, mid, end)),
                    }
                }
            }
        }
    }
    let mut mass: BTreeMap<ItemId, f64> = BTreeMap::new();
    let mut best: BTreeMap<ItemId, CoPath> = BTreeMap::new();
    for (slot, (m, b)) in mass_v.into_iter().zip(best_v).enumerate() {
        if let Some(b) = b {
            let item = ItemId(slot as u32);
            mass.insert(item, m);
            best.insert(item, b);
        }
    }
    (mass, best)
}

/// [`co_walks`] for the walks that end on `cands`, computed from counts
/// instead of walked: the same mass (up to the order of the sums) and the
/// same best walk per candidate.
///
/// A start on X at age k adds `0.95^k · Σ_d n_d(X, c) / sqrt(d)` to a
/// candidate c, where `n_d(X, c)` is the number of walks at distance d:
/// [`AtomGraph::co_pairs`] over every user, less the user's own pairs
/// (walks go through other users only), counted from the user's own
/// sequence. The best walk to c is [`co_walks`]'s: the first start (most
/// recent first) with the largest `0.95^k / sqrt(d_min)`, and within it the
/// first mid of X's audience (oldest first) with an atom on c at `d_min`,
/// the lower position first. Finding that mid ([`co_witness`]) is the one
/// scan left: of the smaller of the two audiences.
///
/// Cost per decision: the user's own sequence times the window, one lookup
/// per (start, candidate), and a witness scan per candidate, where the walk
/// visited every atom of each start item's audience (issue 16).
pub fn co_walks_to(
    graph: &AtomGraph,
    own: &[AtomIx],
    me: UserId,
    cands: &[ItemId],
) -> (BTreeMap<ItemId, f64>, BTreeMap<ItemId, CoPath>) {
    let window = CO_WINDOW as usize;
    let starts: Vec<(f64, AtomIx, ItemId)> = own
        .iter()
        .rev()
        .take(CO_RECENT)
        .enumerate()
        .filter_map(|(age, &start)| {
            let a = graph.get(start)?;
            Some((CO_AGE_DECAY.powi(age as i32), start, a.item))
        })
        .collect();
    let start_items: BTreeSet<ItemId> = starts.iter().map(|s| s.2).collect();
    let wanted: BTreeSet<ItemId> = cands.iter().copied().collect();
    // The user's own walks (mid and end both theirs), to take out.
    let mut mine: HashMap<(ItemId, ItemId), [u32; CO_WINDOW as usize]> = HashMap::new();
    let seq = graph.user_atoms(me);
    for (p, &m) in seq.iter().enumerate() {
        let Some(x) = graph.get(m).map(|a| a.item) else {
            continue;
        };
        if !start_items.contains(&x) {
            continue;
        }
        for d in 1..=window {
            let around = [p.checked_sub(d), Some(p + d)];
            for q in around.into_iter().flatten() {
                let Some(y) = seq.get(q).and_then(|&e| graph.get(e)).map(|a| a.item) else {
                    continue;
                };
                if wanted.contains(&y) {
                    let slot = mine.entry((x, y)).or_default();
                    if let Some(c) = slot.get_mut(d - 1) {
                        *c += 1;
                    }
                }
            }
        }
    }
    let mut mass: BTreeMap<ItemId, f64> = BTreeMap::new();
    let mut best: BTreeMap<ItemId, CoPath> = BTreeMap::new();
    for &c in &wanted {
        let mut total = 0.0;
        let mut top: Option<(f64, AtomIx, ItemId, usize)> = None;
        for &(w0, start, x) in &starts {
            let all = graph.co_pairs(x, c);
            let own_pairs = mine.get(&(x, c));
            let mut d_min = None;
            for (k, &n_all) in all.iter().enumerate() {
                let n_own = own_pairs.and_then(|v| v.get(k)).copied().unwrap_or(0);
                let n = n_all.saturating_sub(n_own);
                if n == 0 {
                    continue;
                }
                let d = k + 1;
                total += f64::from(n) * (w0 / (d as f64).sqrt());
                d_min.get_or_insert(d);
            }
            if let Some(d) = d_min {
                let s = w0 / (d as f64).sqrt();
                if top.is_none_or(|t| s > t.0) {
                    top = Some((s, start, x, d));
                }
            }
        }
        let Some((s, start, x, d)) = top else {
            continue;
        };
        if let Some((mid, end)) = co_witness(graph, me, x, c, d) {
            mass.insert(c, total);
            best.insert(c, (s, start, mid, end));
        }
    }
    (mass, best)
}

/// The first walk of [`co_walks`]'s order from item `x` to item `c` at
/// distance `d` through a user other than `me`: (mid on `x`, end on `c`).
///
/// That order takes mids in `x`'s audience, oldest (lowest handle) first,
/// and a mid's ends lower position first. So the witness is the matching
/// pair with the lowest mid handle, then the lower end, and it can be found
/// from either side: walking `x`'s audience until the first match, or every
/// atom of `c`'s audience looking back to `x`. The smaller audience is
/// walked (candidates are often rare items).
fn co_witness(
    graph: &AtomGraph,
    me: UserId,
    x: ItemId,
    c: ItemId,
    d: usize,
) -> Option<(AtomIx, AtomIx)> {
    let other_seq = |ix: AtomIx| {
        let a = graph.get(ix)?;
        let owner = a.owner.filter(|&o| o != me)?;
        Some((graph.user_atoms(owner), a.pos as usize))
    };
    let on = |seq: &[AtomIx], q: Option<usize>, item: ItemId| {
        q.and_then(|q| seq.get(q).copied())
            .filter(|&ix| graph.get(ix).is_some_and(|a| a.item == item))
    };
    let (from_x, from_c) = (graph.audience(x), graph.audience(c));
    if from_x.len() <= from_c.len() {
        for &mid in from_x {
            let Some((seq, p)) = other_seq(mid) else {
                continue;
            };
            for q in [p.checked_sub(d), Some(p + d)] {
                if let Some(end) = on(seq, q, c) {
                    return Some((mid, end));
                }
            }
        }
        return None;
    }
    // From the ends: a mid d before the end has the end on its upper side
    // (rank 1), a mid d after it on its lower side (rank 0).
    let mut best: Option<(AtomIx, u8, AtomIx)> = None;
    for &end in from_c {
        let Some((seq, p)) = other_seq(end) else {
            continue;
        };
        for (q, side) in [(p.checked_sub(d), 1u8), (Some(p + d), 0u8)] {
            if let Some(mid) = on(seq, q, x) {
                if best.is_none_or(|b| (mid, side) < (b.0, b.1)) {
                    best = Some((mid, side, end));
                }
            }
        }
    }
    best.map(|(mid, _, end)| (mid, end))
}

/// One node reached by the expansion.
#[derive(Debug, Clone, PartialEq)]
pub struct Reached {
    /// Path score.
    pub score: f32,
    /// BFS distance from the nearest seed.
    pub hop: usize,
    /// The best shortest path, seed first: (atom, relation of the link that
    /// led to it).
    pub path: Vec<(AtomIx, Option<Relation>)>,
}

/// Expand `seeds` along links up to `hops` hops (see module docs). `visible`
/// filters which atoms may be entered. Deterministic: nodes are processed in
/// handle order and ties keep the first path found.
pub fn expand(
    graph: &AtomGraph,
    seeds: &[(AtomIx, f32)],
    hops: usize,
    decay: f32,
    fanout: usize,
    visible: &dyn Fn(&AtomNode) -> bool,
) -> BTreeMap<AtomIx, Reached> {
    expand_with(graph, seeds, hops, decay, fanout, visible, None)
}

/// A node's links in the order [`expand`] walks them: outgoing then
/// incoming, heaviest first (ties by handle), adjacent repeats of a handle
/// dropped.
pub fn walk_order(node: &AtomNode) -> Vec<Edge> {
    let mut nbrs: Vec<Edge> = node.out.iter().chain(node.inn.iter()).copied().collect();
    nbrs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    nbrs.dedup_by_key(|n| n.0);
    nbrs
}

/// [`walk_order`] of every atom, for a memory that will not change while
/// it is used (the retrospective decisions, [`prepare`]).
pub fn walk_orders(graph: &AtomGraph) -> Vec<Vec<Edge>> {
    graph.atoms().iter().map(walk_order).collect()
}

/// [`expand`], reading each node's [`walk_order`] from `orders` (indexed by
/// handle) when given instead of sorting its links again.
pub fn expand_with(
    graph: &AtomGraph,
    seeds: &[(AtomIx, f32)],
    hops: usize,
    decay: f32,
    fanout: usize,
    visible: &dyn Fn(&AtomNode) -> bool,
    orders: Option<&[Vec<Edge>]>,
) -> BTreeMap<AtomIx, Reached> {
    let mut best: BTreeMap<AtomIx, Reached> = BTreeMap::new();
    for &(ix, s) in seeds {
        best.entry(ix).or_insert(Reached {
            score: s.max(1e-3),
            hop: 0,
            path: vec![(ix, None)],
        });
    }
    let mut frontier: BTreeSet<AtomIx> = best.keys().copied().collect();
    for d in 1..=hops {
        let mut layer: BTreeMap<AtomIx, Reached> = BTreeMap::new();
        for &ix in &frontier {
            let (Some(node), Some(from)) = (graph.get(ix), best.get(&ix)) else {
                continue;
            };
            let nbrs: std::borrow::Cow<'_, [Edge]> = match orders.and_then(|o| o.get(ix as usize)) {
                Some(v) => std::borrow::Cow::Borrowed(v),
                None => std::borrow::Cow::Owned(walk_order(node)),
            };
            for &(nb, w, rel) in nbrs
                .iter()
                .filter(|n| graph.get(n.0).is_some_and(visible))
                .take(fanout)
            {
                if best.contains_key(&nb) {
                    continue;
                }
                let score = from.score * w.max(0.0) * decay;
                let better = layer.get(&nb).is_none_or(|r| score > r.score);
                if better {
                    let mut path = from.path.clone();
                    path.push((nb, Some(rel)));
                    layer.insert(
                        nb,
                        Reached {
                            score,
                            hop: d,
                            path,
                        },
                    );
                }
            }
        }
        frontier = layer.keys().copied().collect();
        best.extend(layer);
        if frontier.is_empty() {
            break;
        }
    }
    best
}

/// Whether `a` may be shown to `me` as itself (own and item atoms) rather
/// than as anonymised evidence (other users' atoms).
fn is_own_or_item(a: &AtomNode, me: UserId) -> bool {
    a.owner.is_none() || a.owner == Some(me)
}

/// How `a` is named to `me`: its id, or its `anon:` label for another
/// user's atom.
fn shown_id(a: &AtomNode, me: UserId) -> MemoryId {
    if is_own_or_item(a, me) {
        a.id.clone()
    } else {
        MemoryId::new(anon_label(&a.id))
    }
}

/// How `a` reads in the decider's text: `you: …`, `another user: …` or
/// `item: TITLE`. Ids stay out of the text (the path's data carries them,
/// anonymised): the ranker cites none, and each cost SmolLM2 about ten
/// tokens.
fn label(ctx: &PolicyCtx<'_>, a: &AtomNode, me: UserId) -> String {
    match a.owner {
        Some(o) if o == me => format!("you: {}", prompt_content(&a.view.content)),
        Some(_) => format!("another user: {}", prompt_content(&a.view.content)),
        None => {
            let title = ctx
                .catalog
                .get(a.item)
                .map(|i| i.title.clone())
                .unwrap_or_default();
            format!("item: {title}")
        }
    }
}

/// A decision's seed search scored ahead ([`prepare`]).
#[derive(Debug, Clone)]
pub struct Prefetched {
    /// The query it was made for.
    pub query: Vec<f32>,
    /// `search_all(query, n)` for [`prefetch_hits`]`(k_ret)` hits.
    pub hits: Vec<evomem_index::Hit>,
}

/// Hits prefetched per decision: four times the first fetch of
/// [`AtomGraph::nearest_all`] (k + 8), so that a doubled fetch is served too.
pub fn prefetch_hits(k_ret: usize) -> usize {
    4 * (k_ret + 8)
}

/// The ranker's inputs for decisions `(user, at, candidates)` recalled as
/// of `at` with the user's atoms from `at` on invisible: `fit=auto`'s
/// held-out decisions ([`super::fit`]). Seeds, expansion and walks as in
/// [`recall`] (the seed searches batched as in [`prepare`]); a candidate's
/// audience leaves out the user's invisible atoms.
pub fn fit_inputs(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    asks: &[(UserId, LogicalTime, Vec<ItemId>)],
) -> Result<Vec<RankerInputs>, PolicyError> {
    ensure_seed_index(p, ctx)?;
    let mut queries = Vec::with_capacity(asks.len());
    for (me, at, _) in asks {
        let own = own_atoms(p, *me, *at);
        queries.push(query_vector(p, &own, None)?);
    }
    let prefetched = if seeds_scan_all(p) {
        let owners: Vec<Namespace> = asks
            .iter()
            .map(|a| Namespace::user(&AtomRec::user_token(ctx, a.0)))
            .collect();
        let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
        p.graph
            .prefetch_all(&refs, &owners, prefetch_hits(p.cfg.k_ret))?
    } else {
        Vec::new()
    };
    let mut out = Vec::with_capacity(asks.len());
    for (k, ((me, at, cands), qv)) in asks.iter().zip(&queries).enumerate() {
        let (me, at) = (*me, *at);
        let own = own_atoms(p, me, at);
        let (cand_emb, _) = candidate_features(p, ctx, cands)?;
        let g = &p.graph;
        let seen = |ix: &&AtomIx| g.get(**ix).is_some_and(|a| a.owner != Some(me) || a.time < at);
        let audience = |c: &ItemId| g.audience(*c).iter().filter(seen).count() as f64;
        let log_max = (1.0 + g.max_audience() as f64).ln().max(1e-9);
        let token = AtomRec::user_token(ctx, me);
        let pre = prefetched.get(k).map(Vec::as_slice);
        let seeds = seeds(p, ctx, (me, &token), &own, qv, at, pre)?;
        let collab = p.cfg.collab;
        let visible = |a: &AtomNode| match a.owner {
            None => true,
            Some(o) if o == me => a.time < at,
            Some(_) => collab,
        };
        let hops = if p.cfg.link_retrieval { p.cfg.hops } else { 0 };
        let reached = expand_with(
            g,
            &seeds,
            hops,
            p.cfg.decay,
            FANOUT,
            &visible,
            p.walk_orders.as_deref(),
        );
        let consumed: BTreeSet<ItemId> = own.iter().filter_map(|&ix| g.get(ix).map(|a| a.item)).collect();
        let (mass, _) = path_mass(g, &reached, &consumed);
        let (co_mass, _) = if collab && p.cfg.link_retrieval {
            co_walks_to(g, &own, me, cands)
        } else {
            (BTreeMap::new(), BTreeMap::new())
        };
        // The held-out atom is the user's latest: its arrival is read out
        // of the walk's weights.
        let removed = g
            .user_atoms(me)
            .last()
            .filter(|&&ix| g.get(ix).is_some_and(|a| a.time == at))
            .and_then(|&ix| g.latest_arrival(me, ix));
        let walk = if collab && p.cfg.link_retrieval {
            walk_terms(g, &own, cands, removed.as_ref())
        } else {
            Vec::new()
        };
        out.push(RankerInputs {
            path: cands.iter().map(|c| mass.get(c).copied().unwrap_or(0.0)).collect(),
            co: cands
                .iter()
                .map(|c| match consumed.contains(c) {
                    true => 0.0,
                    false => {
                        co_mass.get(c).copied().unwrap_or(0.0)
                            / (1.0 + audience(c)).powf(p.cfg.co_pop)
                    }
                })
                .collect(),
            semantic: cand_emb.iter().map(|e| f64::from(dot(qv, e))).collect(),
            popularity: cands.iter().map(|c| (1.0 + audience(c)).ln() / log_max).collect(),
            walk,
        });
    }
    Ok(out)
}

/// Whether seeds come from a search over every atom in memory (the paper's
/// default, `seed_scope=memory` with `collab`): the one search worth
/// batching.
fn seeds_scan_all(p: &AtomRec) -> bool {
    p.cfg.scans_memory_for_seeds()
}

/// [`evomem_core::Policy::prepare_recalls`]: compute every ranking
/// decision's query vector q_u^t as [`recall`] will, and score them all
/// against the memory in one pass ([`AtomGraph::prefetch_all`]; on ml-100k,
/// 943 queries against 100k atoms, one scan of the index instead of 943).
/// `recall` takes a decision's hits only if its own query vector is the same,
/// so a wrong hint costs a scan, never a result.
pub fn prepare(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    queries: &[DecisionQuery],
) -> Result<(), PolicyError> {
    p.seed_prefetch.clear();
    // Every decision's expansion sorts the links of the nodes it reaches;
    // with memory frozen, sort each node's once.
    p.walk_orders =
        (p.cfg.atomic && p.cfg.link_retrieval && p.cfg.hops > 0).then(|| walk_orders(&p.graph));
    p.fit_if_due(ctx)?;
    if !seeds_scan_all(p) {
        return Ok(());
    }
    ensure_seed_index(p, ctx)?;
    let mut ids = Vec::new();
    let mut vectors = Vec::new();
    let mut owners = Vec::new();
    for q in queries.iter().filter(|q| q.tag() == DecisionTag::Rank) {
        let own = own_atoms(p, q.user, q.at);
        vectors.push(query_vector(p, &own, q.instruction.as_deref())?);
        ids.push(q.decision_id);
        owners.push(Namespace::user(&AtomRec::user_token(ctx, q.user)));
    }
    let refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
    let hits = p
        .graph
        .prefetch_all(&refs, &owners, prefetch_hits(p.cfg.k_ret))?;
    for ((id, query), hits) in ids.into_iter().zip(vectors).zip(hits) {
        p.seed_prefetch.insert(id, Prefetched { query, hits });
    }
    Ok(())
}

/// The seed pool's tiers for `seed_index=hnsw`: the graph from
/// [`super::index::HNSW_MIN_POOL`] atoms, merged at each decision
/// ([`AtomGraph::settle_seeds`]), with the `seed_ef` search list.
pub fn seed_tiers(cfg: &super::config::AtomRecConfig) -> evomem_index::TieredParams {
    evomem_index::TieredParams {
        graph_min: super::index::HNSW_MIN_POOL,
        pending_max: usize::MAX,
        bulk_load: false,
        hnsw: evomem_index::HnswParams {
            ef_construction: SEED_EF_CONSTRUCTION,
            ef_search: cfg.seed_ef.max(1),
            ..evomem_index::HnswParams::default()
        },
    }
}

/// `efConstruction` of the seed graph. The build is the graph's main cost
/// (one sequential insert per pool atom); 64 keeps the seeds' recall on
/// ml-100k at or above 0.99 (`stats.seed_search`, docs/generalisation.md).
pub const SEED_EF_CONSTRUCTION: usize = 64;

/// Whether seed searches over memory go through the HNSW tier
/// (`seed_index`; `auto`: the data hold at least [`SEED_GRAPH_MIN_USERS`]
/// users).
fn seed_graph_wanted(p: &AtomRec, ctx: &PolicyCtx<'_>) -> bool {
    match p.cfg.seed_index {
        SeedIndex::Exact => false,
        SeedIndex::Hnsw => true,
        SeedIndex::Auto => ctx.users.len() >= SEED_GRAPH_MIN_USERS,
    }
}

/// Before seed searches over memory: with the HNSW tier wanted, make sure
/// the seed pool has it and merge the atoms added since the last decision.
pub fn ensure_seed_index(p: &mut AtomRec, ctx: &PolicyCtx<'_>) -> Result<(), PolicyError> {
    if !seeds_scan_all(p) || !seed_graph_wanted(p, ctx) {
        return Ok(());
    }
    let tiers = seed_tiers(&p.cfg);
    p.graph.enable_seed_graph(tiers)?;
    p.graph.settle_seeds()
}

/// Counts of the seed audit (`seed_audit`): decisions audited, and the
/// exact seeds the graph's seeds contained out of all exact seeds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedAudit {
    /// Decisions searched both ways.
    pub decisions: usize,
    /// Exact seeds also among the graph's seeds.
    pub found: usize,
    /// Exact seeds.
    pub total: usize,
    /// The graph's seeds that score at least the exact k-th seed's cosine
    /// (at most the exact count per decision): recall counting ties.
    pub found_by_score: usize,
}

/// `me`'s atoms from before `at`, in time order.
fn own_atoms(p: &AtomRec, me: UserId, at: LogicalTime) -> Vec<AtomIx> {
    p.graph
        .user_atoms(me)
        .iter()
        .copied()
        .filter(|&ix| p.graph.get(ix).is_some_and(|a| a.time < at))
        .collect()
}

/// The query vector q_u^t.
fn query_vector(
    p: &mut AtomRec,
    own: &[AtomIx],
    instruction: Option<&str>,
) -> Result<Vec<f32>, PolicyError> {
    let dim = p.enc.dim();
    let mut q = vec![0.0f32; dim];
    if let Some(t) = instruction.filter(|t| !t.trim().is_empty()) {
        let v = p.enc.text(p.embedder.as_ref(), t)?;
        for (a, x) in q.iter_mut().zip(&v) {
            *a += x;
        }
    }
    let mut recent = vec![0.0f32; dim];
    let mut w = 1.0f32;
    for &ix in own.iter().rev().take(10) {
        if let Some(e) = p.graph.emb(ix) {
            for (r, x) in recent.iter_mut().zip(e) {
                *r += w * x;
            }
        }
        w *= 0.8;
    }
    normalize(&mut recent);
    let mut all = vec![0.0f32; dim];
    for &ix in own {
        if let Some(e) = p.graph.emb(ix) {
            for (r, x) in all.iter_mut().zip(e) {
                *r += x;
            }
        }
    }
    normalize(&mut all);
    for ((a, r), m) in q.iter_mut().zip(&recent).zip(&all) {
        *a += r + 0.5 * m;
    }
    normalize(&mut q);
    Ok(q)
}

/// Candidate item embeddings (zero for unknown items) and item-memory
/// popularity ln(1 + n_i) / ln(1 + n_max).
fn candidate_features(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    cands: &[ItemId],
) -> Result<(Vec<Vec<f32>>, Vec<f64>), PolicyError> {
    let mut cand_emb = Vec::with_capacity(cands.len());
    for c in cands {
        match ctx.catalog.get(*c) {
            Some(item) => cand_emb.push(p.item_embedding(item)?),
            None => cand_emb.push(vec![0.0; p.enc.dim()]),
        }
    }
    let max_aud = p.graph.max_audience();
    let popularity = cands
        .iter()
        .map(|c| p.graph.audience(*c).len())
        .map(|n| (1.0 + n as f64).ln() / (1.0 + max_aud as f64).ln().max(1e-9))
        .collect();
    Ok((cand_emb, popularity))
}

/// The coarse ablation (`atomic=false`): the user's summary as the query, no
/// links.
fn recall_coarse(
    p: &AtomRec,
    ctx: &PolicyCtx<'_>,
    q: &DecisionQuery,
    cand_emb: &[Vec<f32>],
    popularity: Vec<f64>,
) -> Recall {
    let mut trace = UsageTrace::for_query(q);
    let mut context = DecisionContext::default();
    let qv = match p.summaries.get(&q.user) {
        Some((id, e, _)) => {
            trace.used.push(UsedMemory {
                id: id.clone(),
                weight: 1.0,
            });
            if let Some(r) = ctx.memory.get(id) {
                context.profile = Some(r.text.clone());
            }
            let mut v = e.clone();
            normalize(&mut v);
            v
        }
        None => vec![0.0; p.enc.dim()],
    };
    let sem: Vec<f64> = cand_emb.iter().map(|e| f64::from(dot(&qv, e))).collect();
    context.scores = Some(ranker::score(
        &p.cfg.rank,
        &RankerInputs {
            path: vec![0.0; sem.len()],
            co: Vec::new(),
            semantic: sem,
            popularity,
            walk: Vec::new(),
        },
    ));
    Recall { context, trace }
}

/// Seeds M_0 (§2.6, M_0 = TopK_{m ∈ M} cos(q, e)): the top-k_ret atoms by
/// cosine with the query, over the memory `me` may see (`seed_scope=memory`,
/// the paper's default: own atoms before `at`, item atoms, and with
/// `collab` other users' atoms, which reach the decider anonymised) or over
/// the user's own atoms only (`seed_scope=own`). An own seed's score is its
/// cosine damped by age (0.95 per later own interaction), so recent
/// evidence leads; other seeds keep their cosine.
fn seeds(
    p: &AtomRec,
    ctx: &PolicyCtx<'_>,
    (me, user_token): (UserId, &str),
    own: &[AtomIx],
    qv: &[f32],
    at: LogicalTime,
    prefetched: Option<&[evomem_index::Hit]>,
) -> Result<Vec<(AtomIx, f32)>, PolicyError> {
    let n_own = own.len();
    let age: HashMap<AtomIx, usize> = own
        .iter()
        .enumerate()
        .map(|(k, &ix)| (ix, n_own - 1 - k))
        .collect();
    let mine = Namespace::user(user_token);
    let near = match p.cfg.seed_scope {
        SeedScope::Own => p
            .graph
            .nearest(qv, p.cfg.k_ret, &[mine], &[], &|a| a.time < at)?,
        SeedScope::Memory if p.cfg.collab => {
            p.graph
                .nearest_all(qv, p.cfg.k_ret, &mine, &memory_keep(me, at), prefetched)?
        }
        SeedScope::Memory => {
            // Without collab the visible memory is the user's namespace and
            // the item namespaces: search them by name rather than filter
            // every other user's atoms out of a global scan.
            let mut scopes = vec![mine];
            scopes.extend(
                ctx.catalog
                    .items
                    .iter()
                    .filter(|i| p.graph.item_atom(i.id).is_some())
                    .map(|i| Namespace::item(&i.token)),
            );
            p.graph.nearest(qv, p.cfg.k_ret, &scopes, &[], &|a| {
                a.owner.is_none() || a.time < at
            })?
        }
    };
    Ok(near
        .into_iter()
        .map(|(ix, s)| {
            let damp = age.get(&ix).map_or(1.0, |&k| 0.95f32.powi(k as i32));
            (ix, s.max(0.0) * damp)
        })
        .collect())
}

/// The ranker's walk term per candidate ([`ranker::walk_term`] of the
/// two-step walk from the user's [`CO_RECENT`] latest atoms of `own`, time
/// order, weighed [`CO_AGE_DECAY`]`^age`); `removed` reads the forward
/// weights without the fit's held-out arrival. Like the co-consumption
/// walks it reads other users' sequences, so it is on only with `collab`
/// and link-aware retrieval.
fn walk_terms(
    g: &AtomGraph,
    own: &[AtomIx],
    cands: &[ItemId],
    removed: Option<&evomem_kit::walk::Removed>,
) -> Vec<f64> {
    let starts: Vec<(u32, f64)> = own
        .iter()
        .rev()
        .take(CO_RECENT)
        .enumerate()
        .filter_map(|(age, &ix)| Some((g.get(ix)?.item.0, CO_AGE_DECAY.powi(age as i32))))
        .collect();
    let s = g.successors();
    let first = s.first_without(&starts, removed);
    cands
        .iter()
        .map(|c| ranker::walk_term(first.reach_without(s, c.0, removed)))
        .collect()
}

/// The ranker's co-consumption term per candidate (walk mass over
/// `(1 + audience)^co_pop`, 0 for consumed items) and the best walk to
/// each, with `collab` and link-aware retrieval on (none otherwise).
fn co_terms(
    p: &AtomRec,
    own: &[AtomIx],
    me: UserId,
    cands: &[ItemId],
    consumed: &BTreeSet<ItemId>,
) -> (Vec<f64>, BTreeMap<ItemId, CoPath>) {
    let (co_mass, co_best) = if p.cfg.collab && p.cfg.link_retrieval {
        co_walks_to(&p.graph, own, me, cands)
    } else {
        (BTreeMap::new(), BTreeMap::new())
    };
    let co: Vec<f64> = cands
        .iter()
        .map(|c| {
            if consumed.contains(c) {
                0.0
            } else {
                let n = p.graph.audience(*c).len() as f64;
                co_mass.get(c).copied().unwrap_or(0.0) / (1.0 + n).powf(p.cfg.co_pop)
            }
        })
        .collect();
    (co, co_best)
}

/// Every `seed_audit`-th decision through the seed graph: search the
/// decision's seeds exactly too (one scan, [`AtomGraph::nearest_all_exact`])
/// and count how many of the exact seeds the graph found, by id and by
/// score (`stats.seed_search`).
fn audit_seeds(
    p: &mut AtomRec,
    qv: &[f32],
    seeds: &[(AtomIx, f32)],
    user_token: &str,
    me: UserId,
    at: LogicalTime,
) -> Result<(), PolicyError> {
    let audit = p.cfg.seed_audit;
    if seeds_scan_all(p)
        && p.graph.seed_graph_active()
        && audit > 0
        && p.n_decisions.saturating_sub(1).is_multiple_of(audit)
    {
        let exact = p.graph.nearest_all_exact(
            qv,
            p.cfg.k_ret,
            &Namespace::user(user_token),
            &memory_keep(me, at),
        )?;
        let got: BTreeSet<AtomIx> = seeds.iter().map(|s| s.0).collect();
        p.seed_audit.decisions += 1;
        p.seed_audit.found += exact.iter().filter(|e| got.contains(&e.0)).count();
        p.seed_audit.total += exact.len();
        // Atoms of equal vectors (notes that read the same) tie; a seed
        // scoring at least the exact k-th cosine is as good a seed.
        if let Some(kth) = exact.last().map(|e| e.1) {
            let as_good = got
                .iter()
                .filter(|&&ix| p.graph.emb(ix).is_some_and(|e| dot(qv, e) >= kth))
                .count();
            p.seed_audit.found_by_score += as_good.min(exact.len());
        }
    }
    Ok(())
}

/// Which atoms a seed search over memory keeps for `me` at `at`: own atoms
/// from before `at`, every other atom.
fn memory_keep(me: UserId, at: LogicalTime) -> impl Fn(&AtomNode) -> bool {
    move |a: &AtomNode| match a.owner {
        Some(o) if o == me => a.time < at,
        _ => true,
    }
}

/// Path mass per item (the summed score of evidence paths ending on atoms
/// about it) and the best path's (score, end) per item, for items not
/// consumed.
fn path_mass(
    graph: &AtomGraph,
    reached: &BTreeMap<AtomIx, Reached>,
    consumed: &BTreeSet<ItemId>,
) -> (BTreeMap<ItemId, f64>, BTreeMap<ItemId, (f32, AtomIx)>) {
    let mut mass: BTreeMap<ItemId, f64> = BTreeMap::new();
    let mut best_path: BTreeMap<ItemId, (f32, AtomIx)> = BTreeMap::new();
    for (&ix, r) in reached {
        if r.hop == 0 {
            continue;
        }
        let Some(a) = graph.get(ix) else { continue };
        if consumed.contains(&a.item) {
            continue;
        }
        *mass.entry(a.item).or_insert(0.0) += f64::from(r.score);
        let e = best_path.entry(a.item).or_insert((r.score, ix));
        if r.score > e.0 {
            *e = (r.score, ix);
        }
    }
    (mass, best_path)
}

/// One evidence path handed to the synthesizer and the decider.
struct Evidence {
    /// The atom it ends on.
    end: AtomIx,
    /// As the synthesizer sees it.
    view: PathView,
    /// As data, for the context entry.
    path: EvidencePath,
}

impl Evidence {
    /// A path through `hops` (atom, relation that led to it) with `score`.
    fn new(
        ctx: &PolicyCtx<'_>,
        graph: &AtomGraph,
        me: UserId,
        hops: &[(AtomIx, Option<String>)],
        score: f32,
    ) -> Option<Self> {
        let mut view = PathView {
            hops: Vec::new(),
            score,
        };
        let mut path = EvidencePath {
            nodes: Vec::new(),
            relations: Vec::new(),
            score,
        };
        for (ix, relation) in hops {
            let Some(a) = graph.get(*ix) else { continue };
            view.hops.push(PathHop {
                label: label(ctx, a, me),
                relation: relation.clone(),
            });
            path.nodes.push(shown_id(a, me));
            if let Some(r) = relation {
                path.relations.push(r.clone());
            }
        }
        let end = hops.last()?.0;
        Some(Self { end, view, path })
    }
}

/// Evidence paths: the best link-expansion path to each candidate, then the
/// strongest other paths, at most 10 in all; then the best co-consumption
/// walk to each candidate as a 2-hop path (`same item`, `sequence neighbour`).
fn evidence_paths(
    ctx: &PolicyCtx<'_>,
    graph: &AtomGraph,
    me: UserId,
    cands: &[ItemId],
    reached: &BTreeMap<AtomIx, Reached>,
    best_path: &BTreeMap<ItemId, (f32, AtomIx)>,
    co_best: &BTreeMap<ItemId, CoPath>,
) -> Vec<Evidence> {
    let mut chosen: Vec<AtomIx> = cands
        .iter()
        .filter_map(|c| best_path.get(c).map(|b| b.1))
        .collect();
    let mut others: Vec<(f32, AtomIx)> = best_path
        .values()
        .copied()
        .filter(|(_, ix)| !chosen.contains(ix))
        .collect();
    others.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    chosen.extend(others.into_iter().map(|o| o.1));
    chosen.truncate(10);
    let mut out = Vec::new();
    for end in chosen {
        let Some(r) = reached.get(&end) else { continue };
        let hops: Vec<(AtomIx, Option<String>)> = r
            .path
            .iter()
            .map(|&(ix, rel)| (ix, rel.map(|x| x.to_string())))
            .collect();
        out.extend(Evidence::new(ctx, graph, me, &hops, r.score));
    }
    for c in cands {
        let Some(&(score, start, mid, end)) = co_best.get(c) else {
            continue;
        };
        let hops = [
            (start, None),
            (mid, Some("same item".to_string())),
            (end, Some("sequence neighbour".to_string())),
        ];
        out.extend(Evidence::new(ctx, graph, me, &hops, score as f32));
    }
    out
}

/// Context entries: the seeds, then one entry per evidence path (its text
/// the synthesizer's sentence, its `path` the path as data).
fn entries(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    me: UserId,
    seeds: &[(AtomIx, f32)],
    evidence: Vec<Evidence>,
    sentences: &[String],
) -> Result<Vec<ContextEntry>, PolicyError> {
    let mut out = Vec::new();
    for &(ix, s) in seeds {
        if let Some(a) = p.graph.get(ix) {
            // Another user's atom (a memory-wide seed) goes out anonymised,
            // like the evidence paths through it.
            let (memory, text) = if is_own_or_item(a, me) {
                (
                    Some(a.id.clone()),
                    prompt_content(&a.view.content).into_owned(),
                )
            } else {
                (None, label(ctx, a, me))
            };
            out.push(ContextEntry {
                memory,
                item: Some(a.item),
                text,
                weight: s,
                embedding: p.graph.emb(ix).map(<[f32]>::to_vec),
                path: None,
            });
        }
    }
    for (ev, text) in evidence.into_iter().zip(sentences) {
        let Some((id, item, own_or_item)) = p
            .graph
            .get(ev.end)
            .map(|a| (a.id.clone(), a.item, is_own_or_item(a, me)))
        else {
            continue;
        };
        let emb = match ctx.catalog.get(item) {
            Some(it) => Some(p.item_embedding(it)?),
            None => None,
        };
        out.push(ContextEntry {
            memory: own_or_item.then_some(id),
            item: Some(item),
            // The item by title only: its dataset token cost tokens and
            // told a model nothing (the path's data keeps the ids).
            text: format!(
                "evidence path ({} hops) to \"{}\": {text}",
                ev.view.hops.len().saturating_sub(1),
                ctx.catalog.get(item).map_or("", |i| i.title.as_str()),
            ),
            weight: ev.view.score,
            embedding: emb,
            path: Some(ev.path),
        });
    }
    Ok(out)
}

/// Links shown per item memory.
pub const ITEM_MEMORY_LINKS: usize = 3;

/// Item memory M_i^t of each candidate (§2.6: the recommendation agent sees
/// "candidate item memories"): the item atom's keywords, tags and context,
/// its audience, and its [`ITEM_MEMORY_LINKS`] heaviest links, each named
/// as `me` may see it (own notes by title, other users' notes only as
/// "another user", and only with `collab`). Candidates without an item atom
/// get none. The offline ranker already reads the audience
/// (`popularity`); this is what an LLM ranker reads.
fn item_memory(
    ctx: &PolicyCtx<'_>,
    graph: &AtomGraph,
    me: UserId,
    collab: bool,
    cands: &[ItemId],
) -> Vec<ItemMemory> {
    let title = |item: ItemId| ctx.catalog.get(item).map_or("?", |i| i.title.as_str());
    cands
        .iter()
        .filter_map(|&c| {
            let ix = graph.item_atom(c)?;
            let a = graph.get(ix)?;
            let mut parts = Vec::new();
            if !a.view.keywords.is_empty() {
                parts.push(format!("keywords: {}", a.view.keywords.join(", ")));
            }
            if !a.view.tags.is_empty() {
                parts.push(format!("tags: {}", a.view.tags.join(", ")));
            }
            if !a.view.context.trim().is_empty() {
                parts.push(format!("context: {}", a.view.context.trim()));
            }
            parts.push(format!("audience: {} users", graph.audience(c).len()));
            let mut edges: Vec<Edge> = a.out.iter().chain(a.inn.iter()).copied().collect();
            edges.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            let links: Vec<String> = edges
                .iter()
                .filter_map(|&(nb, _, rel)| {
                    let n = graph.get(nb)?;
                    let who = match n.owner {
                        None => format!("item {}", title(n.item)),
                        Some(o) if o == me => format!("your note on {}", title(n.item)),
                        Some(_) if collab => format!("another user's note on {}", title(n.item)),
                        Some(_) => return None,
                    };
                    Some(format!("{rel} -> {who}"))
                })
                .take(ITEM_MEMORY_LINKS)
                .collect();
            if !links.is_empty() {
                parts.push(format!("links: {}", links.join("; ")));
            }
            Some(ItemMemory {
                item: c,
                text: parts.join("; "),
            })
        })
        .collect()
}

/// Usage trace: own and item atoms reached, best first, at most 50.
fn usage(graph: &AtomGraph, me: UserId, reached: &BTreeMap<AtomIx, Reached>) -> Vec<UsedMemory> {
    let mut used: Vec<(f32, AtomIx)> = reached
        .iter()
        .filter(|(&ix, _)| graph.get(ix).is_some_and(|a| is_own_or_item(a, me)))
        .map(|(&ix, r)| (r.score, ix))
        .collect();
    used.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    used.into_iter()
        .take(50)
        .filter_map(|(s, ix)| {
            graph.get(ix).map(|a| UsedMemory {
                id: a.id.clone(),
                weight: s,
            })
        })
        .collect()
}

/// Build the recall for one ranking decision (module docs, steps 1–5).
pub fn recall(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    q: &DecisionQuery,
) -> Result<Recall, PolicyError> {
    if q.tag() != DecisionTag::Rank {
        return Err(PolicyError::Unsupported {
            policy: p.name.clone(),
            decision: q.tag(),
        });
    }
    let me = q.user;
    let user_token = AtomRec::user_token(ctx, me);
    let cands = q.candidates();
    p.fit_if_due(ctx)?;
    let (cand_emb, popularity) = candidate_features(p, ctx, cands)?;
    if !p.cfg.atomic {
        return Ok(recall_coarse(p, ctx, q, &cand_emb, popularity));
    }
    ensure_seed_index(p, ctx)?;
    let own = own_atoms(p, me, q.at);
    let qv = query_vector(p, &own, q.instruction.as_deref())?;
    // The prefetched seed search stands in for the scan only when it was
    // made for this very query (the index cannot have changed: every change
    // to it goes through `observe` or `maintain`, which drop the prefetch).
    let pre = p
        .seed_prefetch
        .remove(&q.decision_id)
        .filter(|f| f.query == qv);
    let seeds = seeds(
        p,
        ctx,
        (me, &user_token),
        &own,
        &qv,
        q.at,
        pre.as_ref().map(|f| f.hits.as_slice()),
    )?;
    audit_seeds(p, &qv, &seeds, &user_token, me, q.at)?;
    let consumed: BTreeSet<ItemId> = own
        .iter()
        .filter_map(|&ix| p.graph.get(ix).map(|a| a.item))
        .collect();
    let collab = p.cfg.collab;
    let visible = |a: &AtomNode| a.owner.is_none() || a.owner == Some(me) || collab;
    let hops = if p.cfg.link_retrieval { p.cfg.hops } else { 0 };
    let orders = p.walk_orders.as_deref();
    let reached = expand_with(
        &p.graph,
        &seeds,
        hops,
        p.cfg.decay,
        FANOUT,
        &visible,
        orders,
    );
    let (mass, best_path) = path_mass(&p.graph, &reached, &consumed);
    let (co, co_best) = co_terms(p, &own, me, cands, &consumed);
    let mut context = DecisionContext {
        scores: Some(ranker::score(
            &p.cfg.rank,
            &RankerInputs {
                path: cands
                    .iter()
                    .map(|c| mass.get(c).copied().unwrap_or(0.0))
                    .collect(),
                co,
                semantic: cand_emb.iter().map(|e| f64::from(dot(&qv, e))).collect(),
                popularity,
                walk: if p.cfg.rank.walk != 0.0 && p.cfg.collab && p.cfg.link_retrieval {
                    walk_terms(&p.graph, &own, cands, None)
                } else {
                    Vec::new()
                },
            },
        )),
        ..DecisionContext::default()
    };
    let evidence = evidence_paths(ctx, &p.graph, me, cands, &reached, &best_path, &co_best);
    // `budget=lean` (see `super::budget`): the best few seeds and paths go
    // to the synthesis, and the ranker gets no item memory.
    let lean = p.cfg.budget == Budget::Lean;
    let (n_seeds, n_paths) = if lean {
        (SYNTH_SEEDS, SYNTH_PATHS)
    } else {
        (usize::MAX, usize::MAX)
    };
    let seed_views = seeds
        .iter()
        .take(n_seeds)
        .filter_map(|&(ix, _)| p.graph.get(ix).map(|a| a.view.clone()))
        .collect();
    let input = SynthInput {
        instruction: q.instruction.clone(),
        seeds: seed_views,
        paths: evidence
            .iter()
            .take(n_paths)
            .map(|e| e.view.clone())
            .collect(),
    };
    let synth = if lean && !p.cfg.lm_synth {
        p.caller.offline(&SynthesizeRole, &input)?
    } else {
        p.caller.call(&SynthesizeRole, &input, Some(&user_token))?
    };
    context.profile = Some(synth.summary.clone());
    if p.cfg.item_memory && !lean {
        context.item_memory = item_memory(ctx, &p.graph, me, collab, cands);
    }
    let shown_seeds = &seeds[..seeds.len().min(n_seeds)];
    context.entries = entries(p, ctx, me, shown_seeds, evidence, &synth.paths)?;
    let mut trace = UsageTrace::for_query(q);
    trace.used = usage(&p.graph, me, &reached);
    Ok(Recall { context, trace })
}
