//! AtomRec: evolving atomic collaborative memory (Hu et al., arXiv 2609.04882).
//!
//! - [`note`]: atomic notes m = {c, t, K, G, X, e, L} (§2.3);
//! - [`roles`]: the `atomrec_link`, `atomrec_evolve` and `atomrec_synthesize`
//!   roles with prompts and offline algorithms (§2.4–§2.6);
//! - [`graph`]: the derived mirror of atoms and links used for fast linking
//!   and expansion;
//! - [`retrieve`]: query, top-k_ret, h-hop link expansion, evidence paths;
//! - [`ranker`]: the documented offline ranker that fills `DecisionContext::scores`;
//! - [`drift`]: the preference-drift analysis of §4.4;
//! - [`config`]: hyperparameters and ablation flags.
//!
//! ## Memory layout and isolation
//! User atoms live in `user:<token>`, item atoms in `item:<token>`; both are
//! changed only through the returned ops (labels `note`, `link`, `evolve`,
//! `summary`). Evolution only rewrites the owner's own atoms and item atoms,
//! never another user's atom. The one collaborative exception: with
//! `collab=true` (default) a new atom may link to other users' atoms on the
//! *same item* (and later atoms of other users may link to it), and a user's
//! recall may follow those links. Atoms reached that way are handed to the
//! decider only as anonymised evidence: their text is the item evidence
//! ("another user: Rated 4/5: Heat …"), their `memory` id is withheld (a
//! one-way `anon:` hash stands in for it) and they are left out of the usage
//! trace. With `collab=false` no cross-user link is created and expansion
//! never enters another user's namespace.

pub mod config;
pub mod drift;
pub mod graph;
pub mod note;
pub mod ranker;
pub mod retrieve;
pub mod roles;

use crate::registry::{PolicyDeps, PolicySpec};
use config::AtomRecConfig;
use evomem_core::{
    DecisionQuery, Embedder, Embedding, Interaction, Item, ItemId, MemoryId, MemoryOp,
    MemoryRecord, Namespace, PlannedOp, Policy, PolicyCtx, PolicyError, Recall, RecordKind, UserId,
};
use evomem_llm::LlmHub;
use graph::{AtomGraph, AtomIx, AtomNode, BruteForce, NeighbourSearch};
use note::{Field, FieldEncoder};
use roles::{EvolveInput, EvolveRole, LinkInput, LinkRole, Neighbour, NoteView};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Weight of E(c) in e.
pub const W_CONTENT: f32 = 1.0;
/// Weight of E(K) in e.
pub const W_KEYWORDS: f32 = 0.5;
/// Weight of E(G) in e.
pub const W_TAGS: f32 = 0.5;
/// Default weight of E(X) in e (`w_context`): the context carries the session,
/// which is what places a note next to its predecessors among its k_link
/// neighbours.
pub const W_CONTEXT: f32 = 1.0;

/// Expansion factor of a relation: how strongly a hop along it carries
/// preference evidence (typed links; `similar` is the embedding-only relation).
pub fn relation_factor(rel: &str) -> f32 {
    match rel {
        "intent progression" => 1.0,
        "shared topic" => 0.9,
        "preference transition" => 0.8,
        "complementary preference" => 0.6,
        "cross-domain transfer" => 0.4,
        _ => 0.7,
    }
}

/// Build an `atomrec` policy from its spec.
pub fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let mut known: Vec<&str> = config::KNOWN_KEYS.to_vec();
    known.push("timing");
    spec.check_known(&known)?;
    let timing = spec.get("timing", false)?;
    let mut plain = spec.clone();
    plain.params.remove("timing");
    let cfg = AtomRecConfig::from_spec(&plain)?;
    let mut p = AtomRec::new(cfg, deps.embedder.clone(), deps.llm.clone());
    p.name = spec.to_string();
    p.timing = timing;
    Ok(Box::new(p))
}

fn spec(params: &[(&str, &str)]) -> PolicySpec {
    PolicySpec {
        name: "atomrec".into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Named grids: `ablations` (Table 2), `k_link`, `tau`, `h`, `k_ret` (Figure 3),
/// and `sweeps` (all four sweeps).
pub fn grid(name: &str) -> Result<Vec<PolicySpec>, PolicyError> {
    let sweep = |key: &str, vals: &[&str]| -> Vec<PolicySpec> {
        vals.iter().map(|v| spec(&[(key, v)])).collect()
    };
    match name {
        "ablations" => Ok(vec![
            spec(&[]),
            spec(&[("atomic", "false")]),
            spec(&[("kt", "false")]),
            spec(&[("context", "false")]),
            spec(&[("collab", "false")]),
            spec(&[("typed", "false")]),
            spec(&[("evolve", "false")]),
            spec(&[("linkret", "false")]),
        ]),
        "k_link" => Ok(sweep("k_link", &["5", "10", "20", "30", "40"])),
        "tau" => Ok(sweep("tau", &["0.5", "0.6", "0.7", "0.8", "0.9"])),
        "h" => Ok(sweep("h", &["0", "1", "2", "3"])),
        "k_ret" => Ok(sweep("k_ret", &["5", "10", "15", "20", "30"])),
        "sweeps" => {
            let mut v = Vec::new();
            for g in ["k_link", "tau", "h", "k_ret"] {
                v.extend(grid(g)?);
            }
            Ok(v)
        }
        other => Err(PolicyError::Config(format!(
            "atomrec: unknown grid `{other}` (known: ablations, k_link, tau, h, k_ret, sweeps)"
        ))),
    }
}

/// Per-user bookkeeping for `stats()`.
#[derive(Debug, Clone, Default)]
struct UserStat {
    interactions: u32,
    links: u32,
    evolutions: u32,
    nanos: u128,
}

/// The AtomRec policy.
pub struct AtomRec {
    name: String,
    cfg: AtomRecConfig,
    embedder: Arc<dyn Embedder>,
    llm: Arc<LlmHub>,
    enc: FieldEncoder,
    graph: AtomGraph,
    search: BruteForce,
    /// Cached E(item full text).
    item_emb: HashMap<ItemId, Vec<f32>>,
    /// Coarse-summary ablation: per user, the running item-embedding sum.
    summaries: HashMap<UserId, (MemoryId, Vec<f32>, u32)>,
    user_stats: BTreeMap<UserId, UserStat>,
    n_evolutions: usize,
    n_decisions: usize,
    timing: bool,
}

fn short_title(item: &Item) -> String {
    if item.title.is_empty() {
        item.token.clone()
    } else {
        item.title.clone()
    }
}

/// Stable anonymous label of another user's atom: FNV-1a of its id.
pub fn anon_label(id: &MemoryId) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("anon:{:08x}", h >> 32)
}

impl AtomRec {
    /// A policy with explicit config and services.
    pub fn new(cfg: AtomRecConfig, embedder: Arc<dyn Embedder>, llm: Arc<LlmHub>) -> Self {
        let dim = embedder.dim();
        Self {
            name: "atomrec".into(),
            cfg,
            embedder,
            llm,
            enc: FieldEncoder::new(dim),
            graph: AtomGraph::default(),
            search: BruteForce,
            item_emb: HashMap::new(),
            summaries: HashMap::new(),
            user_stats: BTreeMap::new(),
            n_evolutions: 0,
            n_decisions: 0,
            timing: false,
        }
    }

    /// The config in use.
    pub fn config(&self) -> &AtomRecConfig {
        &self.cfg
    }

    /// The derived atom graph (read-only; for tests and analysis).
    pub fn graph(&self) -> &AtomGraph {
        &self.graph
    }

    fn item_embedding(&mut self, item: &Item) -> Result<Vec<f32>, PolicyError> {
        if let Some(v) = self.item_emb.get(&item.id) {
            return Ok(v.clone());
        }
        let v = self.enc.text(self.embedder.as_ref(), &item.full_text())?;
        self.item_emb.insert(item.id, v.clone());
        Ok(v)
    }

    /// e of a note from its fields, honouring the `kt` / `context` ablations.
    fn note_embedding(&mut self, v: &NoteView, content_key: &str) -> Result<Vec<f32>, PolicyError> {
        let (k, g): (Vec<&str>, Vec<&str>) = if self.cfg.keywords_tags {
            (
                v.keywords.iter().map(String::as_str).collect(),
                v.tags.iter().map(String::as_str).collect(),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let x: Vec<&str> = if self.cfg.context {
            v.context.split([';', '|']).collect()
        } else {
            Vec::new()
        };
        Ok(self.enc.fields(
            self.embedder.as_ref(),
            &[
                (Field::Text(content_key), W_CONTENT),
                (Field::Bag(k), W_KEYWORDS),
                (Field::Bag(g), W_TAGS),
                (Field::Bag(x), self.cfg.w_context),
            ],
        )?)
    }

    fn view(
        &self,
        keywords: Vec<String>,
        tags: Vec<String>,
        context: String,
        content: String,
    ) -> NoteView {
        NoteView {
            content,
            keywords: if self.cfg.keywords_tags {
                keywords
            } else {
                Vec::new()
            },
            tags: if self.cfg.keywords_tags {
                tags
            } else {
                Vec::new()
            },
            context: if self.cfg.context {
                context
            } else {
                String::new()
            },
        }
    }

    fn record(
        &self,
        id: &MemoryId,
        ns: Namespace,
        v: &NoteView,
        emb: &[f32],
        at: evomem_core::LogicalTime,
    ) -> MemoryRecord {
        let mut r = MemoryRecord::new(id.clone(), ns, RecordKind::Atom, v.content.clone(), at)
            .with_embedding(Embedding {
                model: self.embedder.model_id().to_string(),
                vector: emb.to_vec(),
            });
        r.fields = fields_of(v);
        r
    }

    /// Create the item atom of `item` if it does not exist yet.
    fn ensure_item_atom(
        &mut self,
        item: &Item,
        at: evomem_core::LogicalTime,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<AtomIx, PolicyError> {
        if let Some(&ix) = self.graph.item_atom.get(&item.id) {
            return Ok(ix);
        }
        let v = self.view(
            note::note_keywords(item),
            note::category_tags(item),
            "item memory: first interaction".into(),
            item.full_text(),
        );
        let content = item.full_text();
        // Warm, in one batch, every field member this item will bring into
        // notes: its text, its title as a recent-context entry, keywords, tags.
        let mut warm = vec![
            content.clone(),
            item.title.clone(),
            format!("recently: {}", item.title),
        ];
        warm.extend(v.keywords.iter().cloned());
        warm.extend(v.tags.iter().cloned());
        warm.extend(["liked", "disliked", "neutral"].map(String::from));
        self.enc.warm(self.embedder.as_ref(), &warm)?;
        let emb = self.note_embedding(&v, &content)?;
        let id = MemoryId::new(format!("atom:item:{}", item.token));
        ops.push(
            PlannedOp::new(
                MemoryOp::Create {
                    record: self.record(&id, Namespace::item(&item.token), &v, &emb, at),
                },
                "note",
                format!("item note for {}", short_title(item)),
            )
            .with_sources(vec![at]),
        );
        Ok(self.graph.push(AtomNode {
            id,
            owner: None,
            item: item.id,
            time: at,
            pos: 0,
            emb,
            view: v,
            out: Vec::new(),
            inn: Vec::new(),
            evolved: 0,
        }))
    }

    fn observe_coarse(
        &mut self,
        ctx: &PolicyCtx<'_>,
        ev: &Interaction,
        user_token: &str,
        item: &Item,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let mut ops = Vec::new();
        self.ensure_item_atom(item, ev.time, &mut ops)?;
        let ie = self.item_embedding(item)?;
        let entry = self.summaries.entry(ev.user).or_insert_with(|| {
            (
                MemoryId::new(format!("summary:u{user_token}")),
                vec![0.0; ie.len()],
                0,
            )
        });
        for (a, x) in entry.1.iter_mut().zip(&ie) {
            *a = 0.9 * *a + x;
        }
        entry.2 += 1;
        let mut e = entry.1.clone();
        evomem_core::normalize(&mut e);
        let id = entry.0.clone();
        let n = entry.2;
        let text = format!(
            "Coarse profile after {n} interactions; latest: {}",
            note::user_content(item, ev.rating)
        );
        let emb = Embedding {
            model: self.embedder.model_id().to_string(),
            vector: e,
        };
        let op = if n == 1 {
            let r = MemoryRecord::new(
                id,
                Namespace::user(user_token),
                RecordKind::Summary,
                text,
                ev.time,
            )
            .with_embedding(emb);
            MemoryOp::Create { record: r }
        } else {
            MemoryOp::UpdateFields {
                id,
                fields: BTreeMap::new(),
                text: Some(text),
                embedding: Some(emb),
            }
        };
        let _ = ctx;
        ops.push(
            PlannedOp::new(op, "summary", "coarse summary rewritten (atomic=false)")
                .with_sources(vec![ev.time]),
        );
        Ok(ops)
    }
}

fn fields_of(v: &NoteView) -> BTreeMap<String, serde_json::Value> {
    let mut f = BTreeMap::new();
    f.insert("keywords".into(), serde_json::json!(v.keywords));
    f.insert("tags".into(), serde_json::json!(v.tags));
    f.insert("context".into(), serde_json::json!(v.context));
    f
}

impl Policy for AtomRec {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        ev: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let started = Instant::now();
        let item = ctx
            .catalog
            .get(ev.item)
            .ok_or_else(|| PolicyError::Other(format!("atomrec: unknown item {}", ev.item.0)))?
            .clone();
        let user_token = ctx
            .users
            .get(ev.user.index())
            .map(|u| u.token.clone())
            .unwrap_or_else(|| ev.user.0.to_string());
        if !self.cfg.atomic {
            let ops = self.observe_coarse(ctx, ev, &user_token, &item)?;
            let st = self.user_stats.entry(ev.user).or_default();
            st.interactions += 1;
            st.nanos += started.elapsed().as_nanos();
            return Ok(ops);
        }
        let mut ops = Vec::new();
        let item_ix = self.ensure_item_atom(&item, ev.time, &mut ops)?;

        // 1. The new note (§2.3).
        let own: Vec<AtomIx> = self.graph.user_atoms(ev.user).to_vec();
        let recent: Vec<Item> = own
            .iter()
            .rev()
            .take(5)
            .rev()
            .filter_map(|&ix| {
                self.graph
                    .get(ix)
                    .and_then(|a| ctx.catalog.get(a.item))
                    .cloned()
            })
            .collect();
        let recent_refs: Vec<&Item> = recent.iter().collect();
        let v = self.view(
            note::note_keywords(&item),
            note::note_tags(&item, ev.rating),
            note::note_context(&recent_refs, &item),
            note::user_content(&item, ev.rating),
        );
        let content_key = item.full_text();
        let emb = self.note_embedding(&v, &content_key)?;
        let pos = own.len() as u32;
        let id = MemoryId::new(format!("atom:u{user_token}:t{}", ev.time.0));
        ops.push(
            PlannedOp::new(
                MemoryOp::Create {
                    record: self.record(&id, Namespace::user(&user_token), &v, &emb, ev.time),
                },
                "note",
                format!("atomic note for interaction with {}", short_title(&item)),
            )
            .with_sources(vec![ev.time]),
        );

        // 2. Candidate pool and top-k_link neighbours (§2.4, Eq. s_{n,j}, TopK).
        let mut pool: Vec<AtomIx> = own.clone();
        pool.push(item_ix);
        if self.cfg.collab {
            if let Some(aud) = self.graph.audience.get(&item.id) {
                pool.extend(
                    aud.iter()
                        .rev()
                        .filter(|&&ix| self.graph.get(ix).is_some_and(|a| a.owner != Some(ev.user)))
                        .take(self.cfg.collab_pool),
                );
            }
        }
        let near = self.search.top_k(&self.graph, &emb, &pool, self.cfg.k_link);
        let neighbours: Vec<Neighbour> = near
            .iter()
            .enumerate()
            .filter_map(|(i, &(ix, s))| {
                self.graph.get(ix).map(|a| Neighbour {
                    index: i,
                    note: a.view.clone(),
                    similarity: s,
                    same_user: a.owner == Some(ev.user),
                    same_item: a.item == item.id,
                    item_note: a.owner.is_none(),
                    steps_back: (a.owner == Some(ev.user)).then(|| pos.saturating_sub(a.pos)),
                })
            })
            .collect();
        let input = LinkInput {
            note: v.clone(),
            neighbours,
            typed: self.cfg.typed,
            max_links: (self.cfg.k_link / 2).max(1),
        };
        let chosen = if input.neighbours.is_empty() {
            Vec::new()
        } else {
            self.llm.run(&LinkRole, &input, Some(&user_token))?.links
        };
        let new_ix = self.graph.push(AtomNode {
            id: id.clone(),
            owner: Some(ev.user),
            item: item.id,
            time: ev.time,
            pos,
            emb: emb.clone(),
            view: v.clone(),
            out: Vec::new(),
            inn: Vec::new(),
            evolved: 0,
        });
        let mut linked: HashMap<AtomIx, String> = HashMap::new();
        for l in &chosen {
            let Some(&(tix, _)) = near.get(l.index) else {
                continue;
            };
            let Some(target) = self.graph.get(tix).map(|a| a.id.clone()) else {
                continue;
            };
            let rel = self.graph.relation_ix(&l.relation);
            self.graph
                .link(new_ix, tix, l.weight * relation_factor(&l.relation), rel);
            linked.insert(tix, l.relation.clone());
            ops.push(
                PlannedOp::new(
                    MemoryOp::Link {
                        from: id.clone(),
                        to: target,
                        relation: l.relation.clone(),
                        weight: l.weight,
                    },
                    "link",
                    format!("{} (s = {:.3})", l.relation, l.weight),
                )
                .with_sources(vec![ev.time]),
            );
        }

        // 3. Evolution (§2.5): linked or s > τ_evo; own atoms and item atoms only.
        let mut n_evo = 0u32;
        if self.cfg.evolve {
            let audience = self.graph.audience.get(&item.id).map_or(0, Vec::len);
            let mut todo: Vec<(AtomIx, f32)> = near
                .iter()
                .copied()
                .filter(|(ix, s)| linked.contains_key(ix) || *s > self.cfg.tau)
                .filter(|(ix, _)| {
                    self.graph.get(*ix).is_some_and(|a| match a.owner {
                        Some(o) => o == ev.user,
                        // Item notes evolve on a log schedule (audience 1, 2, 4, 8, ...).
                        None => audience.is_power_of_two(),
                    })
                })
                .collect();
            todo.truncate(self.cfg.evo_max);
            for (ix, s) in todo {
                let Some(target) = self.graph.get(ix).cloned() else {
                    continue;
                };
                let relation = linked.get(&ix).cloned();
                let out = self.llm.run(
                    &EvolveRole,
                    &EvolveInput {
                        new_note: v.clone(),
                        target: target.view.clone(),
                        relation,
                        similarity: s,
                    },
                    Some(&user_token),
                )?;
                let mut nv = self.view(
                    out.keywords,
                    out.tags,
                    out.context,
                    target.view.content.clone(),
                );
                if target.owner.is_none() {
                    nv.context = if self.cfg.context {
                        format!(
                            "item memory: audience of {audience} users; {}",
                            nv.context
                                .split("; later:")
                                .nth(1)
                                .map(|s| format!("later:{s}"))
                                .unwrap_or_default()
                        )
                    } else {
                        String::new()
                    };
                }
                if nv == target.view {
                    continue;
                }
                let content_key = ctx
                    .catalog
                    .get(target.item)
                    .map(Item::full_text)
                    .unwrap_or_default();
                let e2 = self.note_embedding(&nv, &content_key)?;
                ops.push(
                    PlannedOp::new(
                        MemoryOp::UpdateFields {
                            id: target.id.clone(),
                            fields: fields_of(&nv),
                            text: None,
                            embedding: Some(Embedding {
                                model: self.embedder.model_id().to_string(),
                                vector: e2.clone(),
                            }),
                        },
                        "evolve",
                        format!(
                            "evolved by {} ({}, s = {s:.3}): keywords/tags/context refined",
                            id,
                            linked.get(&ix).map_or("s > tau", String::as_str)
                        ),
                    )
                    .with_sources(vec![ev.time]),
                );
                if let Some(a) = self.graph.atoms.get_mut(ix as usize) {
                    a.view = nv;
                    a.emb = e2;
                    a.evolved += 1;
                }
                n_evo += 1;
            }
        }
        self.n_evolutions += n_evo as usize;
        let st = self.user_stats.entry(ev.user).or_default();
        st.interactions += 1;
        st.links += chosen.len() as u32;
        st.evolutions += n_evo;
        st.nanos += started.elapsed().as_nanos();
        Ok(ops)
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        self.n_decisions += 1;
        let started = Instant::now();
        let r = retrieve::recall(self, ctx, q)?;
        if let Some(st) = self.user_stats.get_mut(&q.user) {
            st.nanos += started.elapsed().as_nanos();
        }
        Ok(r)
    }

    fn stats(&self) -> serde_json::Value {
        let user_atoms: usize = self
            .graph
            .atoms
            .iter()
            .filter(|a| a.owner.is_some())
            .count();
        let item_atoms = self.graph.atoms.len() - user_atoms;
        // Growth with history length, bucketed.
        let buckets: [(u32, u32); 6] = [
            (1, 20),
            (21, 50),
            (51, 100),
            (101, 200),
            (201, 400),
            (401, u32::MAX),
        ];
        let mut growth = Vec::new();
        for (lo, hi) in buckets {
            let sel: Vec<&UserStat> = self
                .user_stats
                .values()
                .filter(|s| s.interactions >= lo && s.interactions <= hi)
                .collect();
            if sel.is_empty() {
                continue;
            }
            let n = sel.len() as f64;
            let mut row = serde_json::json!({
                "history": if hi == u32::MAX { format!("{lo}+") } else { format!("{lo}-{hi}") },
                "users": sel.len(),
                "mean_atoms": sel.iter().map(|s| f64::from(s.interactions)).sum::<f64>() / n,
                "mean_links": sel.iter().map(|s| f64::from(s.links)).sum::<f64>() / n,
                "mean_evolutions": sel.iter().map(|s| f64::from(s.evolutions)).sum::<f64>() / n,
            });
            if self.timing {
                row["mean_ms"] =
                    serde_json::json!(sel.iter().map(|s| s.nanos as f64 / 1e6).sum::<f64>() / n);
            }
            growth.push(row);
        }
        let mut v = serde_json::json!({
            "config": self.cfg,
            "atoms": self.graph.atoms.len() + self.summaries.len(),
            "user_atoms": user_atoms,
            "item_atoms": item_atoms,
            "summaries": self.summaries.len(),
            "links": self.graph.n_links,
            "evolutions": self.n_evolutions,
            "decisions": self.n_decisions,
            "users": self.user_stats.len(),
            "growth_by_history": growth,
        });
        if self.timing {
            let total: u128 = self.user_stats.values().map(|s| s.nanos).sum();
            v["time_ms_total"] = serde_json::json!(total as f64 / 1e6);
            v["time_ms_per_user"] =
                serde_json::json!(total as f64 / 1e6 / self.user_stats.len().max(1) as f64);
        }
        v
    }
}
