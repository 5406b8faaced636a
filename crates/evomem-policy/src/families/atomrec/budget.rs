//! `atomrec[budget=lean]`: AtomRec within a per-user token budget (issue 18).
//!
//! The paper's schedule asks the model to link every new note (one
//! `atomrec_link` call over its k_link = 20 neighbours) and to evolve every
//! linked or very similar neighbour (one `atomrec_evolve` call each): about
//! 450 role runs and 770k estimated tokens per ml-100k user. The lean budget
//! keeps the memory the paper describes and spends the model where the
//! decision reads it:
//!
//! 1. **Window.** A new note is written at once, but its linking and
//!    evolution wait in the user's window of the last `lm_window` notes.
//!    A note pushed out of the window is settled by the link and evolve
//!    roles' offline algorithms ([`Via::Scheduled`], counted per role in
//!    the stats as `scheduled_offline`), exactly as an offline run of the
//!    full schedule would settle it.
//! 2. **Pre-filter.** At a flush (every `maintain`: before the decisions of
//!    the retrospective protocol, at each tick of the evolving one, at the
//!    end of the stream) a window note goes to the model only when the
//!    offline pre-filter finds neighbours above τ_evo; it then sees only
//!    those, at most `lm_neighbours`, most similar first. A note without
//!    any is settled offline like an old one.
//! 3. **Batches.** All the window's model notes of a user go to one
//!    `atomrec_link_batch` call; the neighbours they evolve (linked or
//!    s > τ_evo, own and item notes, as in the full schedule) go, the
//!    `lm_evolve` most similar, to one `atomrec_evolve_batch` call, and the
//!    rest are evolved offline. Links are not evolved in the batch (no
//!    M_near is sent).
//! 4. **Decision.** The synthesis reads the [`SYNTH_SEEDS`] best seeds and
//!    the [`SYNTH_PATHS`] best paths, and is written by its offline
//!    algorithm (facets and rendered paths; scheduled, counted) unless
//!    `lm_synth=true`; the ranker's memory holds those seeds and paths only,
//!    and no item memory M_i. The model is then called three times per
//!    user in the retrospective protocol: one link batch, at most one
//!    evolve batch, one ranking. The offline ranker's scores still come
//!    from every seed and path.
//!
//! With the offline backend, the lean budget differs from the full schedule
//! only in what the window's notes are shown (the pre-filtered neighbours
//! instead of all k_link) and in the order of evolution; its HR@1 is
//! reported beside the full schedule's. In the evolving protocol a window
//! note waits for the next tick (`--tick`), so a decision may see it
//! without links.

use super::config::Budget;
use super::graph::AtomIx;
use super::observe::{NewNote, Via};
use super::relation::Relation;
use super::roles::{EvolveInput, EvolveRole, LinkRole};
use super::AtomRec;
use evomem_core::{Interaction, PlannedOp, PolicyCtx, PolicyError, UserId};
use evomem_kit::Batch;
use std::collections::{HashMap, VecDeque};

/// Seeds handed to the synthesis under `budget=lean`.
pub const SYNTH_SEEDS: usize = 3;
/// Evidence paths handed to the synthesis under `budget=lean`.
pub const SYNTH_PATHS: usize = 3;

/// A note whose linking and evolution wait in its user's window.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The interaction that wrote it.
    pub ev: Interaction,
    /// The note (already emitted).
    pub note: NewNote,
    /// Its top-k_link neighbours at the time it was written.
    pub near: Vec<(AtomIx, f32)>,
    /// Its owner's token.
    pub user_token: String,
}

/// What the lean budget did, for `stats()`.
#[derive(Debug, Clone, Default)]
pub struct BudgetStats {
    /// Window notes the model linked.
    pub model_notes: u64,
    /// Window notes without a neighbour above τ_evo (settled offline).
    pub prefiltered: u64,
    /// Notes settled offline because they left the window.
    pub aged_out: u64,
    /// Neighbours the model evolved.
    pub model_evolved: u64,
    /// Batched calls made (link + evolve).
    pub batches: u64,
}

impl AtomRec {
    /// Put a just-written note in its user's window; settle (offline) the
    /// notes that leave it. The links and evolutions that made.
    pub(super) fn defer(
        &mut self,
        ctx: &PolicyCtx<'_>,
        ev: &Interaction,
        note: NewNote,
        near: Vec<(AtomIx, f32)>,
        user_token: String,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(u32, u32), PolicyError> {
        let window = self.cfg.lm_window;
        let q = self.pending.entry(ev.user).or_default();
        q.push_back(Pending {
            ev: *ev,
            note,
            near,
            user_token,
        });
        let mut old = Vec::new();
        while q.len() > window {
            if let Some(p) = q.pop_front() {
                old.push(p);
            }
        }
        let (mut links, mut evolved) = (0, 0);
        for p in old {
            self.budget_stats.aged_out += 1;
            let (l, e) = self.settle(ctx, &p, Via::Scheduled, ops)?;
            links += l;
            evolved += e;
        }
        Ok((links, evolved))
    }

    /// Link and evolve one note through `via` (the full schedule's steps).
    fn settle(
        &mut self,
        ctx: &PolicyCtx<'_>,
        p: &Pending,
        via: Via,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(u32, u32), PolicyError> {
        let chosen = self.choose_links(&p.ev, p.ev.item, &p.note, &p.near, &p.user_token, via)?;
        let linked = self.emit_links(ops, &p.ev, &p.note, &p.near, &chosen)?;
        let evolved = if self.cfg.evolve {
            self.evolve_neighbours(
                ctx,
                (&p.ev, &p.note),
                (&p.near, &linked),
                &p.user_token,
                via,
                ops,
            )?
        } else {
            0
        };
        Ok((chosen.len() as u32, evolved))
    }

    /// Hand every user's window to the model (see the module docs).
    pub(super) fn flush_windows(
        &mut self,
        ctx: &PolicyCtx<'_>,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let mut ops = Vec::new();
        if self.cfg.budget != Budget::Lean {
            return Ok(ops);
        }
        let users: Vec<UserId> = self.pending.keys().copied().collect();
        for u in users {
            let Some(q) = self.pending.remove(&u) else {
                continue;
            };
            self.flush_user(ctx, q, &mut ops)?;
        }
        Ok(ops)
    }

    fn flush_user(
        &mut self,
        ctx: &PolicyCtx<'_>,
        q: VecDeque<Pending>,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(), PolicyError> {
        let tau = self.cfg.tau;
        // Pre-filter: the neighbours above τ_evo, most similar first.
        let mut model: Vec<Pending> = Vec::new();
        for mut p in q {
            let mut above: Vec<(AtomIx, f32)> =
                p.near.iter().copied().filter(|&(_, s)| s > tau).collect();
            above.sort_by(|a, b| b.1.total_cmp(&a.1));
            above.truncate(self.cfg.lm_neighbours);
            if above.is_empty() {
                self.budget_stats.prefiltered += 1;
                let (l, e) = self.settle(ctx, &p, Via::Scheduled, ops)?;
                self.add_user_stat(p.ev.user, l, e);
            } else {
                p.near = above;
                model.push(p);
            }
        }
        let Some(first) = model.first() else {
            return Ok(());
        };
        let user_token = first.user_token.clone();
        let inputs: Vec<_> = model
            .iter()
            .filter_map(|p| self.link_input(&p.ev, p.ev.item, &p.note, &p.near))
            .collect();
        let batch = Batch {
            role: LinkRole,
            max_items: self.cfg.lm_window.max(1),
        };
        self.budget_stats.batches += 1;
        let answers = self.caller.call(&batch, &inputs, Some(&user_token))?;
        self.budget_stats.model_notes += model.len() as u64;
        // Links first, then the evolution they trigger.
        let mut targets: Vec<(usize, AtomIx, f32, Option<Relation>)> = Vec::new();
        for (k, (p, out)) in model.iter().zip(answers).enumerate() {
            let linked = self.emit_links(ops, &p.ev, &p.note, &p.near, &out.links)?;
            self.add_user_stat(p.ev.user, out.links.len() as u32, 0);
            if self.cfg.evolve {
                for (ix, s) in self.evolve_targets(&p.ev, &p.near, &linked) {
                    targets.push((k, ix, s, linked.get(&ix).copied()));
                }
            }
        }
        // The `lm_evolve` most similar distinct targets go to the model
        // (each from its view before the batch); the rest evolve offline,
        // one after the other, as the full schedule would.
        targets.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        let mut batched = Vec::new();
        let mut rest = Vec::new();
        for t in targets {
            if batched.len() < self.cfg.lm_evolve
                && !batched
                    .iter()
                    .any(|b: &(usize, AtomIx, f32, Option<Relation>)| b.1 == t.1)
            {
                batched.push(t);
            } else {
                rest.push(t);
            }
        }
        let mut inputs = Vec::new();
        let mut used = Vec::new();
        for &(k, ix, s, relation) in &batched {
            if let Some(input) = self.lean_evolve_input(&model[k], ix, s, relation) {
                inputs.push(input);
                used.push((k, ix, s, relation));
            }
        }
        let mut answers = Vec::new();
        if !inputs.is_empty() {
            let batch = Batch {
                role: EvolveRole,
                max_items: self.cfg.lm_evolve.max(1),
            };
            self.budget_stats.batches += 1;
            answers = self.caller.call(&batch, &inputs, Some(&user_token))?;
        }
        let mut done: HashMap<usize, u32> = HashMap::new();
        for ((k, ix, s, relation), out) in used.into_iter().zip(answers) {
            let p = &model[k];
            if self.apply_lean_evolution(ctx, p, (ix, s, relation), out, ops)? {
                self.budget_stats.model_evolved += 1;
                *done.entry(k).or_insert(0) += 1;
            }
        }
        for (k, ix, s, relation) in rest {
            let p = &model[k];
            let Some(input) = self.lean_evolve_input(p, ix, s, relation) else {
                continue;
            };
            let out = self.caller.offline(&EvolveRole, &input)?;
            if self.apply_lean_evolution(ctx, p, (ix, s, relation), out, ops)? {
                *done.entry(k).or_insert(0) += 1;
            }
        }
        for (k, n) in done {
            self.add_user_stat(model[k].ev.user, 0, n);
        }
        Ok(())
    }

    /// The evolve input of target `ix` reached by window note `p` (no
    /// M_near: links are not evolved under the lean budget).
    fn lean_evolve_input(
        &self,
        p: &Pending,
        ix: AtomIx,
        s: f32,
        relation: Option<Relation>,
    ) -> Option<EvolveInput> {
        let view = self.graph.get(ix).map(|a| a.view.clone())?;
        Some(EvolveInput {
            new_note: p.note.view.clone(),
            target: view,
            relation,
            similarity: s,
            near: Vec::new(),
            typed: self.cfg.typed,
            max_links: 0,
            min_similarity: self.cfg.tau,
        })
    }

    /// Apply one evolve answer for target `ix` (cosine `s`, link relation
    /// `relation`) of window note `p`.
    fn apply_lean_evolution(
        &mut self,
        ctx: &PolicyCtx<'_>,
        p: &Pending,
        (ix, s, relation): (AtomIx, f32, Option<Relation>),
        out: super::roles::EvolveOutput,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<bool, PolicyError> {
        let step = super::observe::EvolveStep {
            ix,
            s,
            relation,
            audience: self.graph.audience(p.ev.item).len(),
        };
        self.apply_evolution(ctx, (&p.ev, &p.note), step, out, &[], ops)
    }

    /// The lean budget's figures for `stats()`.
    pub(super) fn budget_json(&self) -> serde_json::Value {
        let b = &self.budget_stats;
        serde_json::json!({
            "mode": self.cfg.budget,
            "lm_window": self.cfg.lm_window,
            "model_notes": b.model_notes,
            "prefiltered": b.prefiltered,
            "aged_out": b.aged_out,
            "model_evolved": b.model_evolved,
            "batches": b.batches,
            "pending": self.pending.values().map(VecDeque::len).sum::<usize>(),
            "scheduled_offline": self.caller.scheduled_offline(),
        })
    }
}
