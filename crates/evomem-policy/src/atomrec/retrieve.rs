//! Context-aware collaborative retrieval (AtomRec §2.6).
//!
//! 1. Query q_u^t: normalised sum of E(instruction) (if any), the
//!    recency-weighted mean embedding of the user's last 10 atoms, and half the
//!    mean embedding of all the user's pre-target atoms.
//! 2. M_0 = top-k_ret of the user's own atoms by cos(q, e).
//! 3. G_sub: breadth-first expansion along links (both directions: outgoing
//!    links and backlinks) up to h hops. A node's hop is its BFS distance; its
//!    score is the best, over shortest paths, of
//!    cos(q, e_seed) · Π link weight · decay^hop. Other users' atoms are
//!    visible only with `collab=true` (see the isolation note in the module
//!    root). Fan-out per node is capped at the 48 heaviest links; a link's
//!    weight in the expansion is its cosine times its relation factor
//!    ([`super::relation_factor`]). Seed scores are damped by age (0.95 per
//!    later own interaction).
//! 4. Co-consumption walks ([`co_walks`], with `collab=true` and link-aware
//!    retrieval on): the dense 2-hop paths that go through item notes. From
//!    each of the user's last [`CO_RECENT`] atoms (about item X, age k) to
//!    another user's atom on X (hop 1: the item note X gathers every atom
//!    about X), then to that user's atom within [`CO_WINDOW`] positions of it
//!    in their sequence (hop 2: the notes' context field X), about item Y.
//!    The walk scores `0.95^k / sqrt(|Δpos|)` for Y; Y's summed walk mass
//!    is divided by `(1 + n_Y)^co_pop` (n_Y = Y's audience, `co_pop` = 0.5)
//!    before the ranker sees it.
//! 5. Evidence paths (seed → … → node) ending on atoms about items the user
//!    has not consumed are synthesised by `atomrec_synthesize` and handed to
//!    the decider with the seeds; the offline [`super::ranker`] scores the
//!    candidates.

use super::graph::{AtomGraph, AtomIx, AtomNode};
use super::ranker::{self, RankerInputs};
use super::roles::{PathHop, PathView, SynthInput, SynthesizeRole};
use super::{anon_label, AtomRec};
use evomem_core::{
    dot, normalize, ContextEntry, DecisionContext, DecisionQuery, ItemId, PolicyCtx, PolicyError,
    Recall, UsageTrace, UsedMemory, UserId,
};
use std::collections::{BTreeMap, BTreeSet};

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
/// every other user's atom that memory holds. Returns the walk mass per
/// reached item and the best single walk to each.
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
    let mut mass: BTreeMap<ItemId, f64> = BTreeMap::new();
    let mut best: BTreeMap<ItemId, CoPath> = BTreeMap::new();
    for (age, &start) in own.iter().rev().take(CO_RECENT).enumerate() {
        let Some(a) = graph.get(start) else { continue };
        let w0 = CO_AGE_DECAY.powi(age as i32);
        let Some(aud) = graph.audience.get(&a.item) else {
            continue;
        };
        for &mid in aud {
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
                *mass.entry(e.item).or_insert(0.0) += s;
                let b = best.entry(e.item).or_insert((s, start, mid, end));
                if s > b.0 {
                    *b = (s, start, mid, end);
                }
            }
        }
    }
    (mass, best)
}

/// One node reached by the expansion.
#[derive(Debug, Clone, PartialEq)]
pub struct Reached {
    /// Path score.
    pub score: f32,
    /// BFS distance from the nearest seed.
    pub hop: usize,
    /// The best shortest path, seed first: (atom, relation index that led to it).
    pub path: Vec<(AtomIx, Option<u16>)>,
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
            let mut nbrs: Vec<(AtomIx, f32, u16)> =
                node.out.iter().chain(node.inn.iter()).copied().collect();
            nbrs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            nbrs.dedup_by_key(|n| n.0);
            for (nb, w, rel) in nbrs
                .into_iter()
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

fn label(p: &AtomRec, ctx: &PolicyCtx<'_>, a: &AtomNode, me: UserId) -> String {
    let title = ctx
        .catalog
        .get(a.item)
        .map(|i| i.title.clone())
        .unwrap_or_default();
    match a.owner {
        Some(o) if o == me => format!("[{}] you: {}", a.id, a.view.content),
        Some(_) => format!("[{}] another user: {}", anon_label(&a.id), a.view.content),
        None => {
            let _ = p;
            format!("[{}] item: {title}", a.id)
        }
    }
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
        if let Some(a) = p.graph.get(ix) {
            for (r, x) in recent.iter_mut().zip(&a.emb) {
                *r += w * x;
            }
        }
        w *= 0.8;
    }
    normalize(&mut recent);
    let mut all = vec![0.0f32; dim];
    for &ix in own {
        if let Some(a) = p.graph.get(ix) {
            for (r, x) in all.iter_mut().zip(&a.emb) {
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

/// Build the recall for one decision.
pub fn recall(
    p: &mut AtomRec,
    ctx: &PolicyCtx<'_>,
    q: &DecisionQuery,
) -> Result<Recall, PolicyError> {
    let me = q.user;
    let user_token = ctx
        .users
        .get(me.index())
        .map(|u| u.token.clone())
        .unwrap_or_else(|| me.0.to_string());
    let mut trace = UsageTrace::for_query(q);
    let mut context = DecisionContext::default();

    // Candidate item embeddings (cached) and item-memory popularity.
    let mut cand_emb = Vec::with_capacity(q.candidates.len());
    for c in &q.candidates {
        match ctx.catalog.get(*c) {
            Some(item) => cand_emb.push(p.item_embedding(item)?),
            None => cand_emb.push(vec![0.0; p.enc.dim()]),
        }
    }
    let max_aud = p.graph.audience.values().map(Vec::len).max().unwrap_or(0);
    let popularity: Vec<f64> = q
        .candidates
        .iter()
        .map(|c| p.graph.audience.get(c).map_or(0, Vec::len))
        .map(|n| (1.0 + n as f64).ln() / (1.0 + max_aud as f64).ln().max(1e-9))
        .collect();

    if !p.cfg.atomic {
        // Coarse ablation: one summary per user, no links.
        let qv = match p.summaries.get(&me) {
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
            },
        ));
        return Ok(Recall { context, trace });
    }

    let own: Vec<AtomIx> = p
        .graph
        .user_atoms(me)
        .iter()
        .copied()
        .filter(|&ix| p.graph.get(ix).is_some_and(|a| a.time < q.at))
        .collect();
    let qv = query_vector(p, &own, q.instruction.as_deref())?;
    // Seeds: top-k_ret by cosine; their score is the cosine damped by age
    // (0.95 per later own interaction), so recent evidence leads.
    let n_own = own.len();
    let age: std::collections::HashMap<AtomIx, usize> = own
        .iter()
        .enumerate()
        .map(|(k, &ix)| (ix, n_own - 1 - k))
        .collect();
    let seeds: Vec<(AtomIx, f32)> = p
        .search_top(&qv, &own, p.cfg.k_ret)
        .into_iter()
        .map(|(ix, s)| {
            (
                ix,
                s.max(0.0) * 0.95f32.powi(age.get(&ix).copied().unwrap_or(0) as i32),
            )
        })
        .collect();
    let consumed: BTreeSet<ItemId> = own
        .iter()
        .filter_map(|&ix| p.graph.get(ix).map(|a| a.item))
        .collect();
    let collab = p.cfg.collab;
    let visible = |a: &AtomNode| a.owner.is_none() || a.owner == Some(me) || collab;
    let hops = if p.cfg.link_retrieval { p.cfg.hops } else { 0 };
    let reached = expand(&p.graph, &seeds, hops, p.cfg.decay, FANOUT, &visible);

    // Path mass per item: evidence paths ending on atoms about that item.
    let mut mass: BTreeMap<ItemId, f64> = BTreeMap::new();
    let mut best_path: BTreeMap<ItemId, (f32, AtomIx)> = BTreeMap::new();
    for (&ix, r) in &reached {
        if r.hop == 0 {
            continue;
        }
        let Some(a) = p.graph.get(ix) else { continue };
        if consumed.contains(&a.item) {
            continue;
        }
        *mass.entry(a.item).or_insert(0.0) += f64::from(r.score);
        let e = best_path.entry(a.item).or_insert((r.score, ix));
        if r.score > e.0 {
            *e = (r.score, ix);
        }
    }
    let sem: Vec<f64> = cand_emb.iter().map(|e| f64::from(dot(&qv, e))).collect();
    let path: Vec<f64> = q
        .candidates
        .iter()
        .map(|c| mass.get(c).copied().unwrap_or(0.0))
        .collect();
    let (co_mass, co_best) = if collab && p.cfg.link_retrieval {
        co_walks(&p.graph, &own, me)
    } else {
        (BTreeMap::new(), BTreeMap::new())
    };
    let co: Vec<f64> = q
        .candidates
        .iter()
        .map(|c| {
            if consumed.contains(c) {
                0.0
            } else {
                let n = p.graph.audience.get(c).map_or(0, Vec::len) as f64;
                co_mass.get(c).copied().unwrap_or(0.0) / (1.0 + n).powf(p.cfg.co_pop)
            }
        })
        .collect();
    context.scores = Some(ranker::score(
        &p.cfg.rank,
        &RankerInputs {
            path,
            co,
            semantic: sem,
            popularity,
        },
    ));

    // Evidence paths to synthesise: the best path to each candidate, then the
    // strongest other paths, at most 10 in all.
    let mut chosen: Vec<AtomIx> = q
        .candidates
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
    let mut views = Vec::new();
    for &end in &chosen {
        let Some(r) = reached.get(&end) else { continue };
        let hops_v: Vec<PathHop> = r
            .path
            .iter()
            .filter_map(|&(ix, rel)| {
                p.graph.get(ix).map(|a| PathHop {
                    label: label(p, ctx, a, me),
                    relation: rel.map(|x| p.graph.relation(x).to_string()),
                })
            })
            .collect();
        views.push(PathView {
            hops: hops_v,
            score: r.score,
        });
    }
    // The best co-consumption walk to each candidate, as a 2-hop evidence path.
    let same_item = Some("same item".to_string());
    let next_in_seq = Some("sequence neighbour".to_string());
    for c in &q.candidates {
        let Some(&(score, start, mid, end)) = co_best.get(c) else {
            continue;
        };
        let hops_v: Vec<PathHop> = [
            (start, None),
            (mid, same_item.clone()),
            (end, next_in_seq.clone()),
        ]
        .into_iter()
        .filter_map(|(ix, relation)| {
            p.graph.get(ix).map(|a| PathHop {
                label: label(p, ctx, a, me),
                relation,
            })
        })
        .collect();
        chosen.push(end);
        views.push(PathView {
            hops: hops_v,
            score: score as f32,
        });
    }
    let seed_views = seeds
        .iter()
        .filter_map(|&(ix, _)| p.graph.get(ix).map(|a| a.view.clone()))
        .collect();
    let synth = p.llm.run(
        &SynthesizeRole,
        &SynthInput {
            instruction: q.instruction.clone(),
            seeds: seed_views,
            paths: views.clone(),
        },
        Some(&user_token),
    )?;
    context.profile = Some(synth.summary.clone());
    for &(ix, s) in &seeds {
        if let Some(a) = p.graph.get(ix) {
            context.entries.push(ContextEntry {
                memory: Some(a.id.clone()),
                item: Some(a.item),
                text: a.view.content.clone(),
                weight: s,
                embedding: Some(a.emb.clone()),
            });
        }
    }
    for ((&end, v), text) in chosen.iter().zip(&views).zip(&synth.paths) {
        let Some(a) = p.graph.get(end).cloned() else {
            continue;
        };
        let own_or_item = a.owner.is_none() || a.owner == Some(me);
        let emb = match ctx.catalog.get(a.item) {
            Some(item) => Some(p.item_embedding(item)?),
            None => None,
        };
        context.entries.push(ContextEntry {
            memory: own_or_item.then(|| a.id.clone()),
            item: Some(a.item),
            text: format!(
                "evidence path ({} hops) to item {} \"{}\": {text}",
                v.hops.len().saturating_sub(1),
                ctx.catalog.get(a.item).map_or("?", |i| i.token.as_str()),
                ctx.catalog.get(a.item).map_or("", |i| i.title.as_str()),
            ),
            weight: v.score,
            embedding: emb,
        });
    }
    // Usage trace: own and item atoms only, best first.
    let mut used: Vec<(f32, AtomIx)> = reached
        .iter()
        .filter(|(&ix, _)| {
            p.graph
                .get(ix)
                .is_some_and(|a| a.owner.is_none() || a.owner == Some(me))
        })
        .map(|(&ix, r)| (r.score, ix))
        .collect();
    used.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (s, ix) in used.into_iter().take(50) {
        if let Some(a) = p.graph.get(ix) {
            trace.used.push(UsedMemory {
                id: a.id.clone(),
                weight: s,
            });
        }
    }
    Ok(Recall { context, trace })
}

impl AtomRec {
    fn search_top(&self, q: &[f32], pool: &[AtomIx], k: usize) -> Vec<(AtomIx, f32)> {
        use super::graph::NeighbourSearch;
        self.search.top_k(&self.graph, q, pool, k)
    }
}
