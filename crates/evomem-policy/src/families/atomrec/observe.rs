//! Observing one interaction (AtomRec §2.3–§2.5), step by step:
//!
//! 1. [`AtomRec::ensure_item_atom`]: the item's note, the first time the item
//!    is seen;
//! 2. [`AtomRec::new_note`]: the user's atomic note m_n;
//! 3. [`AtomRec::link_candidates`]: its top-k_link neighbours among the
//!    owner's notes, the item note and (with `collab`) other users' most
//!    recent notes on the same item;
//! 4. [`AtomRec::choose_links`] (`atomrec_link`) and [`AtomRec::emit_links`];
//! 5. [`AtomRec::evolve_neighbours`] (`atomrec_evolve`): field-level
//!    refinement of linked or very similar neighbours, own and item notes
//!    only, which also update their links L_j*: the role sees M_near and may
//!    link the neighbour to up to `evo_links` other members of it (op label
//!    `evolve-link`).
//!
//! Every op goes out through [`AtomRec::emit`], which applies it to the
//! working view ([`super::graph::AtomGraph::apply`]) as it appends it, so the
//! view is never changed by hand.

use super::config::Budget;
use super::graph::AtomIx;
use super::note::{self, Field, NoteView};
use super::relation::Relation;
use super::roles::{EvolveInput, EvolveRole, LinkChoice, LinkInput, LinkRole, NearNote, Neighbour};
use super::{AtomRec, W_CONTENT, W_KEYWORDS, W_TAGS};
use evomem_core::{
    normalize, Embedding, Interaction, Item, ItemId, LogicalTime, MemoryId, MemoryOp, MemoryRecord,
    Namespace, PlannedOp, PolicyCtx, PolicyError, RecordKind,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Who answers a link or evolve input: the hub (the configured backend),
/// or the role's offline algorithm because a budget scheduled it so
/// ([`evomem_kit::RoleCaller::offline`], counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Through the hub.
    Hub,
    /// The offline algorithm, by the budget's schedule.
    Scheduled,
}

/// The new note of an interaction, before it is emitted.
#[derive(Debug, Clone)]
pub struct NewNote {
    /// Its record id.
    pub id: MemoryId,
    /// Its fields.
    pub view: NoteView,
    /// Its embedding e.
    pub emb: Vec<f32>,
    /// Its position in the owner's sequence.
    pub pos: u32,
    /// The `Create` op that writes it.
    pub op: PlannedOp,
}

fn short_title(item: &Item) -> String {
    if item.title.is_empty() {
        item.token.clone()
    } else {
        item.title.clone()
    }
}

/// One evolve step: the target atom `ix`, reached with cosine `s` and link
/// relation `relation` from a note whose item has `audience` users.
#[derive(Debug, Clone, Copy)]
pub(super) struct EvolveStep {
    pub(super) ix: AtomIx,
    pub(super) s: f32,
    pub(super) relation: Option<Relation>,
    pub(super) audience: usize,
}

impl AtomRec {
    /// Observe `ev`: the ops, the number of links chosen and the number of
    /// neighbours evolved.
    pub(super) fn observe_event(
        &mut self,
        ctx: &PolicyCtx<'_>,
        ev: &Interaction,
    ) -> Result<(Vec<PlannedOp>, u32, u32), PolicyError> {
        let item = ctx
            .catalog
            .get(ev.item)
            .ok_or_else(|| PolicyError::Other(format!("atomrec: unknown item {}", ev.item.0)))?
            .clone();
        let user_token = Self::user_token(ctx, ev.user);
        let mut ops = Vec::new();
        let item_ix = self.ensure_item_atom(&item, ev, &mut ops)?;
        if !self.cfg.atomic {
            self.observe_coarse(ev, &user_token, &item, &mut ops)?;
            return Ok((ops, 0, 0));
        }
        let note = self.new_note(ctx, ev, &item, &user_token)?;
        let near = self.link_candidates(ev, &item, item_ix, &note.emb, &user_token)?;
        self.record_near(&near);
        if self.cfg.budget == Budget::Lean {
            // Linking and evolution wait until the note leaves the model's
            // window (then the offline algorithms settle it) or a flush
            // hands the window to the model (see `super::budget`).
            self.emit(&mut ops, note.op.clone(), ev)?;
            let (links, evolved) = self.defer(ctx, ev, note, near, user_token, &mut ops)?;
            return Ok((ops, links, evolved));
        }
        let chosen = self.choose_links(ev, item.id, &note, &near, &user_token, Via::Hub)?;
        // The note enters the view only now, so that it is not its own neighbour.
        self.emit(&mut ops, note.op.clone(), ev)?;
        let linked = self.emit_links(&mut ops, ev, &note, &near, &chosen)?;
        let evolved = if self.cfg.evolve {
            self.evolve_neighbours(
                ctx,
                (ev, &note),
                (&near, &linked),
                &user_token,
                Via::Hub,
                &mut ops,
            )?
        } else {
            0
        };
        Ok((ops, chosen.len() as u32, evolved))
    }

    /// Append `op` to `ops` and apply it to the working view: the one way
    /// the view changes.
    pub(super) fn emit(
        &mut self,
        ops: &mut Vec<PlannedOp>,
        op: PlannedOp,
        source: &Interaction,
    ) -> Result<(), PolicyError> {
        self.graph.apply(&op.op, source)?;
        ops.push(op);
        Ok(())
    }

    /// E(item full text) (cached by the field encoder).
    pub(super) fn item_embedding(&mut self, item: &Item) -> Result<Vec<f32>, PolicyError> {
        Ok(self.enc.text(self.embedder.as_ref(), &item.full_text())?)
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

    /// A note view with the fields the `kt` / `context` ablations drop emptied.
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

    fn embedding(&self, vector: Vec<f32>) -> Embedding {
        Embedding {
            model: self.embedder.model_id().to_string(),
            vector,
        }
    }

    fn record(
        &self,
        id: &MemoryId,
        ns: Namespace,
        v: &NoteView,
        emb: &[f32],
        at: LogicalTime,
    ) -> MemoryRecord {
        let mut r = MemoryRecord::new(id.clone(), ns, RecordKind::Atom, v.content.clone(), at)
            .with_embedding(self.embedding(emb.to_vec()));
        r.fields = v.to_fields();
        r
    }

    /// Create the item atom of `item` if it does not exist yet; its handle.
    fn ensure_item_atom(
        &mut self,
        item: &Item,
        ev: &Interaction,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<AtomIx, PolicyError> {
        if let Some(ix) = self.graph.item_atom(item.id) {
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
        let op = PlannedOp::new(
            MemoryOp::Create {
                record: self.record(&id, Namespace::item(&item.token), &v, &emb, ev.time),
            },
            "note",
            format!("item note for {}", short_title(item)),
        )
        .with_sources(vec![ev.time]);
        self.emit(ops, op, ev)?;
        self.graph
            .item_atom(item.id)
            .ok_or_else(|| PolicyError::Other(format!("atomrec: item note {id} not in view")))
    }

    /// The coarse ablation (`atomic=false`): one running summary per user.
    fn observe_coarse(
        &mut self,
        ev: &Interaction,
        user_token: &str,
        item: &Item,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(), PolicyError> {
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
        normalize(&mut e);
        let id = entry.0.clone();
        let n = entry.2;
        let text = format!(
            "Coarse profile after {n} interactions; latest: {}",
            note::user_content(item, ev.rating)
        );
        let emb = self.embedding(e);
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
        // Summaries are not atoms: they stay out of the working view.
        ops.push(
            PlannedOp::new(op, "summary", "coarse summary rewritten (atomic=false)")
                .with_sources(vec![ev.time]),
        );
        Ok(())
    }

    /// The new note m_n of `ev` (§2.3) and the op that creates it.
    fn new_note(
        &mut self,
        ctx: &PolicyCtx<'_>,
        ev: &Interaction,
        item: &Item,
        user_token: &str,
    ) -> Result<NewNote, PolicyError> {
        let own = self.graph.user_atoms(ev.user);
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
        let pos = own.len() as u32;
        let recent_refs: Vec<&Item> = recent.iter().collect();
        let view = self.view(
            note::note_keywords(item),
            note::note_tags(item, ev.rating),
            note::note_context(&recent_refs, item),
            note::user_content(item, ev.rating),
        );
        let emb = self.note_embedding(&view, &item.full_text())?;
        let id = MemoryId::new(format!("atom:u{user_token}:t{}", ev.time.0));
        let op = PlannedOp::new(
            MemoryOp::Create {
                record: self.record(&id, Namespace::user(user_token), &view, &emb, ev.time),
            },
            "note",
            format!("atomic note for interaction with {}", short_title(item)),
        )
        .with_sources(vec![ev.time]);
        Ok(NewNote {
            id,
            view,
            emb,
            pos,
            op,
        })
    }

    /// Top-k_link neighbours of a note with embedding `emb` (§2.4, Eq.
    /// s_{n,j}, TopK): the owner's notes and the item note through the index,
    /// plus (with `collab`) the `collab_pool` most recent notes of other
    /// users on the same item.
    fn link_candidates(
        &self,
        ev: &Interaction,
        item: &Item,
        item_ix: AtomIx,
        emb: &[f32],
        user_token: &str,
    ) -> Result<Vec<(AtomIx, f32)>, PolicyError> {
        let mut extra: Vec<AtomIx> = vec![item_ix];
        if self.cfg.collab {
            extra.extend(
                self.graph
                    .audience(item.id)
                    .iter()
                    .rev()
                    .filter(|&&ix| self.graph.get(ix).is_some_and(|a| a.owner != Some(ev.user)))
                    .take(self.cfg.collab_pool),
            );
        }
        let scopes = [Namespace::user(user_token), Namespace::item(&item.token)];
        self.graph
            .nearest(emb, self.cfg.k_link, &scopes, &extra, &|_| true)
    }

    /// Ask `atomrec_link` which neighbours to link (none asked without
    /// neighbours).
    pub(super) fn choose_links(
        &mut self,
        ev: &Interaction,
        item: ItemId,
        note: &NewNote,
        near: &[(AtomIx, f32)],
        user_token: &str,
        via: Via,
    ) -> Result<Vec<LinkChoice>, PolicyError> {
        let Some(input) = self.link_input(ev, item, note, near) else {
            return Ok(Vec::new());
        };
        Ok(match via {
            Via::Hub => self.caller.call(&LinkRole, &input, Some(user_token))?,
            Via::Scheduled => self.caller.offline(&LinkRole, &input)?,
        }
        .links)
    }

    /// The `atomrec_link` input of a new note and its neighbours `near`
    /// (`None` without neighbours: nothing to ask).
    pub(super) fn link_input(
        &self,
        ev: &Interaction,
        item: ItemId,
        note: &NewNote,
        near: &[(AtomIx, f32)],
    ) -> Option<LinkInput> {
        let neighbours: Vec<Neighbour> = near
            .iter()
            .enumerate()
            .filter_map(|(i, &(ix, s))| {
                self.graph.get(ix).map(|a| Neighbour {
                    index: i,
                    note: a.view.clone(),
                    similarity: s,
                    same_user: a.owner == Some(ev.user),
                    same_item: a.item == item,
                    item_note: a.owner.is_none(),
                    steps_back: (a.owner == Some(ev.user)).then(|| note.pos.saturating_sub(a.pos)),
                })
            })
            .collect();
        if neighbours.is_empty() {
            return None;
        }
        Some(LinkInput {
            note: note.view.clone(),
            neighbours,
            typed: self.cfg.typed,
            max_links: self.cfg.max_links(),
        })
    }

    /// Emit one `Link` op per chosen link; the relation of each linked handle.
    pub(super) fn emit_links(
        &mut self,
        ops: &mut Vec<PlannedOp>,
        ev: &Interaction,
        note: &NewNote,
        near: &[(AtomIx, f32)],
        chosen: &[LinkChoice],
    ) -> Result<HashMap<AtomIx, Relation>, PolicyError> {
        let mut linked: HashMap<AtomIx, Relation> = HashMap::new();
        for l in chosen {
            let Some(&(tix, _)) = near.get(l.index) else {
                continue;
            };
            let Some(target) = self.graph.get(tix).map(|a| a.id.clone()) else {
                continue;
            };
            linked.insert(tix, l.relation);
            let op = PlannedOp::new(
                MemoryOp::Link {
                    from: note.id.clone(),
                    to: target,
                    relation: l.relation.to_string(),
                    weight: l.weight,
                },
                "link",
                format!("{} (s = {:.3})", l.relation, l.weight),
            )
            .with_sources(vec![ev.time]);
            self.emit(ops, op, ev)?;
        }
        Ok(linked)
    }

    /// Evolution (§2.5): neighbours that were linked or have s > τ_evo, own
    /// notes and item notes only, at most `evo_max`; item notes evolve on a
    /// log schedule (audience 1, b, b², ..., b = `item_evo_base`, default 2).
    /// Returns how many changed.
    pub(super) fn evolve_neighbours(
        &mut self,
        ctx: &PolicyCtx<'_>,
        (ev, note): (&Interaction, &NewNote),
        (near, linked): (&[(AtomIx, f32)], &HashMap<AtomIx, Relation>),
        user_token: &str,
        via: Via,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<u32, PolicyError> {
        let audience = self.graph.audience(ev.item).len();
        let todo = self.evolve_targets(ev, near, linked);
        // M_near's views, shared by every evolve call of this note and
        // refreshed when a member evolves.
        let mut views: HashMap<AtomIx, Arc<NoteView>> =
            if self.cfg.evo_links > 0 && !todo.is_empty() {
                near.iter()
                    .filter_map(|&(k, _)| self.graph.get(k).map(|a| (k, Arc::new(a.view.clone()))))
                    .collect()
            } else {
                HashMap::new()
            };
        let mut n_evo = 0u32;
        for (ix, s) in todo {
            let Some(target_view) = self.graph.get(ix).map(|a| a.view.clone()) else {
                continue;
            };
            let relation = linked.get(&ix).copied();
            let near_ix: Vec<AtomIx> = near.iter().map(|n| n.0).filter(|&k| k != ix).collect();
            let input = EvolveInput {
                new_note: note.view.clone(),
                target: target_view.clone(),
                relation,
                similarity: s,
                near: self.near_notes(ix, &near_ix, &views),
                typed: self.cfg.typed,
                max_links: self.cfg.evo_links,
                min_similarity: self.cfg.tau,
            };
            let out = match via {
                Via::Hub => self.caller.call(&EvolveRole, &input, Some(user_token))?,
                Via::Scheduled => self.caller.offline(&EvolveRole, &input)?,
            };
            let changed =
                self.apply_evolution(
                    ctx,
                    (ev, note),
                    EvolveStep {
                        ix,
                        s,
                        relation,
                        audience,
                    },
                    out,
                    &near_ix,
                    ops,
                )?;
            if changed {
                if let (Some(v), Some(a)) = (views.get_mut(&ix), self.graph.get(ix)) {
                    *v = Arc::new(a.view.clone());
                }
                n_evo += 1;
            }
        }
        Ok(n_evo)
    }

    /// The neighbours of a new note that evolve (§2.5): linked or s > τ_evo,
    /// own notes and item notes on their schedule, at most `evo_max`, in
    /// `near`'s order.
    pub(super) fn evolve_targets(
        &self,
        ev: &Interaction,
        near: &[(AtomIx, f32)],
        linked: &HashMap<AtomIx, Relation>,
    ) -> Vec<(AtomIx, f32)> {
        let audience = self.graph.audience(ev.item).len();
        let mut todo: Vec<(AtomIx, f32)> = near
            .iter()
            .copied()
            .filter(|(ix, s)| linked.contains_key(ix) || *s > self.cfg.tau)
            .filter(|(ix, _)| {
                self.graph.get(*ix).is_some_and(|a| match a.owner {
                    Some(o) => o == ev.user,
                    None => self.cfg.item_evolves(audience),
                })
            })
            .collect();
        todo.truncate(self.cfg.evo_max);
        todo
    }

    /// Apply one evolve answer `out` for target `ix` (reached by `note`
    /// with cosine `s` and link relation `relation`): the `UpdateFields` op
    /// when the fields changed, then one `Link` op per new link into
    /// `near_ix`. Whether anything changed.
    pub(super) fn apply_evolution(
        &mut self,
        ctx: &PolicyCtx<'_>,
        (ev, note): (&Interaction, &NewNote),
        step: EvolveStep,
        out: super::roles::EvolveOutput,
        near_ix: &[AtomIx],
        ops: &mut Vec<PlannedOp>,
    ) -> Result<bool, PolicyError> {
        let EvolveStep {
            ix,
            s,
            relation,
            audience,
        } = step;
        let Some((target_id, target_view, is_item, target_item)) = self
            .graph
            .get(ix)
            .map(|a| (a.id.clone(), a.view.clone(), a.owner.is_none(), a.item))
        else {
            return Ok(false);
        };
        {
            // A field the answer leaves empty keeps its value: evolution
            // refines a note, and SmolLM2 under the batch schema answered
            // `{"keywords":[],"tags":[],"context":"..."}`, which would
            // have wiped the note's fields. A context without a letter or
            // digit counts as empty.
            let keep = |new: Vec<String>, old: &[String]| {
                if new.is_empty() {
                    old.to_vec()
                } else {
                    new
                }
            };
            let keywords = keep(out.keywords, &target_view.keywords);
            let tags = keep(out.tags, &target_view.tags);
            let context = if out.context.chars().any(char::is_alphanumeric) {
                out.context
            } else {
                target_view.context.clone()
            };
            let mut nv = self.view(keywords, tags, context, target_view.content.clone());
            if is_item {
                nv.context = self.item_context(audience, &nv.context);
            }
            let mut changed = false;
            if nv != target_view {
                let content_key = ctx
                    .catalog
                    .get(target_item)
                    .map(Item::full_text)
                    .unwrap_or_default();
                let e2 = self.note_embedding(&nv, &content_key)?;
                let op = PlannedOp::new(
                    MemoryOp::UpdateFields {
                        id: target_id.clone(),
                        fields: nv.to_fields(),
                        text: None,
                        embedding: Some(self.embedding(e2)),
                    },
                    "evolve",
                    format!(
                        "evolved by {} ({}, s = {s:.3}): keywords/tags/context refined",
                        note.id,
                        relation.map_or("s > tau", Relation::as_str)
                    ),
                )
                .with_sources(vec![ev.time]);
                self.emit(ops, op, ev)?;
                changed = true;
            }
            // The role's parse and offline algorithm already cap the links at
            // `evo_links` and make them `similar` when links are untyped.
            for l in &out.links {
                let Some(&k) = near_ix.get(l.index) else {
                    continue;
                };
                let (Some(to), Some(w)) =
                    (self.graph.get(k).map(|a| a.id.clone()), self.cosine(ix, k))
                else {
                    continue;
                };
                let relation = l.relation;
                let op = PlannedOp::new(
                    MemoryOp::Link {
                        from: target_id.clone(),
                        to,
                        relation: relation.to_string(),
                        weight: w.clamp(0.0, 1.0),
                    },
                    "evolve-link",
                    format!(
                        "links of {target_id} evolved by {}: {relation} (s = {w:.3})",
                        note.id
                    ),
                )
                .with_sources(vec![ev.time]);
                self.emit(ops, op, ev)?;
                changed = true;
            }
            Ok(changed)
        }
    }

    /// cos(e_a, e_b) of two atoms in the view.
    fn cosine(&self, a: AtomIx, b: AtomIx) -> Option<f32> {
        Some(evomem_core::dot(self.graph.emb(a)?, self.graph.emb(b)?))
    }

    /// M_near (`near`, the target `target` already left out) as the evolve
    /// role sees it: each note with its cosine to the target, how it relates
    /// to the target, and whether the two are linked already. With
    /// `evo_links = 0` the role is asked for no links, so the list is left
    /// empty (no prompt tokens spent on it).
    fn near_notes(
        &self,
        target: AtomIx,
        near: &[AtomIx],
        views: &HashMap<AtomIx, Arc<NoteView>>,
    ) -> Vec<NearNote> {
        let Some(t) = self.graph.get(target) else {
            return Vec::new();
        };
        let (true, Some(te)) = (self.cfg.evo_links > 0, self.graph.emb(target)) else {
            return Vec::new();
        };
        near.iter()
            .enumerate()
            .filter_map(|(index, &k)| {
                let a = self.graph.get(k)?;
                Some(NearNote {
                    index,
                    note: views.get(&k)?.clone(),
                    target_similarity: evomem_core::dot(te, self.graph.emb(k)?),
                    same_owner: t.owner.is_some() && a.owner == t.owner,
                    same_item: a.item == t.item,
                    item_note: a.owner.is_none(),
                    linked: t.out.iter().chain(t.inn.iter()).any(|e| e.0 == k),
                })
            })
            .collect()
    }

    /// The context X of an evolved item note: its audience, then the latest
    /// evidence the evolve role recorded (`later: ...`).
    fn item_context(&self, audience: usize, evolved: &str) -> String {
        if !self.cfg.context {
            return String::new();
        }
        format!(
            "item memory: audience of {audience} users; {}",
            evolved
                .split("; later:")
                .nth(1)
                .map(|s| format!("later:{s}"))
                .unwrap_or_default()
        )
    }
}
