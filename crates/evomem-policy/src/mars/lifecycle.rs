//! The six lifecycle operations of §3.3 as op planning on a [`UserView`].
//!
//! One *round* runs, in order and as far as the scheduler selected them:
//!
//! 1. **extract / boost / demote** — one `mars_extract` call over the pending
//!    signals. Boost: `AdjustStrength(+δ₊, evidence + support)`. Demote:
//!    `AdjustStrength(−δ₋, evidence + 0)` (§3.3: demote decrements strength
//!    only). Extract: `Create` a chunk; when its category already holds K_cat
//!    chunks, the weakest is forgotten first if the new one is stronger,
//!    otherwise the proposal is dropped. The pending watermark then moves past
//!    the processed signals.
//! 2. **merge** — chunks of one category whose texts match case-insensitively
//!    or whose embedding cosine ≥ `merge_threshold` are merged into the
//!    stronger one (strength = the max, evidence summed by the engine).
//! 3. **forget** — chunks with strength < `forget_below` and evidence ≥
//!    `forget_min_evidence`.
//! 4. **synthesize** — forced whenever γ mutations (extract, boost, demote,
//!    merge, forget) have accumulated since the last synthesis; also when the
//!    scheduler asks for it and something changed, and after the first round
//!    so that a profile exists early (paper silent; documented choice).

use super::policy::{times, Domain, Mars};
use super::roles::{ExtractInput, ExtractRole, PlanRole, SynthesizeInput, SynthesizeRole};
use super::scheduler::{plan_input, Actions};
use super::tiers::{chunk_id, profile_id, UserView};
use evomem_core::{
    dot, LogicalTime, MemoryId, MemoryOp, MemoryRecord, PolicyCtx, PolicyError, RecordKind,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Strength at or above which the profile names a chunk as a preference.
pub const PROFILE_MIN_STRENGTH: f64 = 0.45;
/// Chunks per category the profile names.
pub const PROFILE_PER_CATEGORY: usize = 3;

impl Mars {
    /// Ask the planner (agentic scheduler).
    pub(super) fn plan(
        &mut self,
        ctx: &PolicyCtx<'_>,
        domain: &Arc<Domain>,
        view: &UserView,
    ) -> Result<Actions, PolicyError> {
        let pending: Vec<_> = view
            .pending()
            .iter()
            .map(|e| Mars::signal_in(domain, ctx.catalog, e))
            .collect();
        let chunks = view.chunks();
        let duplicates = self.duplicate_pairs(&chunks)?.len();
        let input = plan_input(
            &view.user,
            pending,
            &chunks,
            chunks.iter().map(Mars::chunk_in).collect(),
            view.events().len(),
            self.cfg.lmax,
            view.mutations(),
            self.cfg.gamma,
            view.get(&profile_id(&view.user)).is_some(),
            self.cfg.b,
            self.cfg.forget_below,
            self.cfg.forget_min_evidence,
            duplicates,
        );
        let out = self.call(&PlanRole, &input, &view.user.clone())?;
        Ok(Actions::from_list(&out.actions))
    }

    /// Pairs (weaker, stronger) of near-duplicate chunks within a category.
    fn duplicate_pairs(
        &mut self,
        chunks: &[super::tiers::Chunk],
    ) -> Result<Vec<(MemoryId, MemoryId, f64)>, PolicyError> {
        let mut by_cat: BTreeMap<&str, Vec<&super::tiers::Chunk>> = BTreeMap::new();
        for c in chunks {
            by_cat.entry(c.category.as_str()).or_default().push(c);
        }
        let mut out = Vec::new();
        let mut absorbed = std::collections::BTreeSet::new();
        for v in by_cat.values() {
            for i in 0..v.len() {
                for j in (i + 1)..v.len() {
                    let (a, b) = (v[i], v[j]);
                    if absorbed.contains(&a.id) || absorbed.contains(&b.id) {
                        continue;
                    }
                    let same = a.text.trim().eq_ignore_ascii_case(b.text.trim());
                    let near = same || {
                        let ea = self.text_embedding(&format!("{}: {}", a.category, a.text))?;
                        let eb = self.text_embedding(&format!("{}: {}", b.category, b.text))?;
                        dot(&ea, &eb) >= self.cfg.merge_threshold
                    };
                    if near {
                        let (weak, strong) = if (b.strength, &a.id) > (a.strength, &b.id) {
                            (a, b)
                        } else {
                            (b, a)
                        };
                        absorbed.insert(weak.id.clone());
                        out.push((
                            weak.id.clone(),
                            strong.id.clone(),
                            a.strength.max(b.strength),
                        ));
                    }
                }
            }
        }
        Ok(out)
    }

    /// One lifecycle round (see the module docs).
    pub(super) fn run_round(
        &mut self,
        ctx: &PolicyCtx<'_>,
        domain: &Arc<Domain>,
        view: &mut UserView,
        actions: &Actions,
        at: LogicalTime,
        forced: bool,
    ) -> Result<(), PolicyError> {
        self.stats.rounds += 1;
        let cfg = self.cfg.clone();
        let user = view.user.clone();
        let mut mutations = view.mutations();
        let mut fields: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let pending = view.pending();
        let assess = actions.has("extract") || actions.has("boost") || actions.has("demote");
        if assess && !pending.is_empty() {
            let chunks = view.chunks();
            let input = ExtractInput {
                user: user.clone(),
                categories: domain.categories.clone(),
                pending: pending
                    .iter()
                    .map(|e| Mars::signal_in(domain, ctx.catalog, e))
                    .collect(),
                chunks: chunks.iter().map(Mars::chunk_in).collect(),
                min_support: cfg.min_support,
                shift_min: cfg.shift_min,
                kcat: cfg.kcat,
            };
            let out = self.call(&ExtractRole, &input, &user)?;
            if actions.has("boost") {
                for a in &out.boosts {
                    let id = MemoryId::new(a.chunk.clone());
                    if view.get(&id).is_none() {
                        continue;
                    }
                    view.emit(
                        MemoryOp::AdjustStrength {
                            id,
                            delta: cfg.delta_plus,
                            evidence_delta: a.support.max(1),
                        },
                        "boost",
                        a.reason.clone(),
                        times(&a.sources),
                        at,
                    )?;
                    mutations += 1;
                }
            }
            if actions.has("demote") {
                for a in &out.demotes {
                    let id = MemoryId::new(a.chunk.clone());
                    if view.get(&id).is_none() {
                        continue;
                    }
                    view.emit(
                        MemoryOp::AdjustStrength {
                            id,
                            delta: -cfg.delta_minus,
                            evidence_delta: 0,
                        },
                        "demote",
                        a.reason.clone(),
                        times(&a.sources),
                        at,
                    )?;
                    mutations += 1;
                }
            }
            if actions.has("extract") {
                for (k, nc) in out.new_chunks.iter().enumerate() {
                    let in_cat: Vec<_> = view
                        .chunks()
                        .into_iter()
                        .filter(|c| c.category == nc.category)
                        .collect();
                    if in_cat.len() >= cfg.kcat {
                        let weakest = in_cat
                            .iter()
                            .min_by(|a, b| a.strength.total_cmp(&b.strength).then(a.id.cmp(&b.id)));
                        match weakest {
                            Some(w) if w.strength < nc.strength => {
                                view.emit(
                                    MemoryOp::Forget { id: w.id.clone() },
                                    "forget",
                                    format!(
                                        "K_cat = {} reached in {}: make room for {}",
                                        cfg.kcat, nc.category, nc.text
                                    ),
                                    times(&nc.sources),
                                    at,
                                )?;
                                mutations += 1;
                            }
                            _ => {
                                self.stats.capacity_skips += 1;
                                continue;
                            }
                        }
                    }
                    let mut slot = view.n_ops() * 1000 + k;
                    while view.get(&chunk_id(&user, at, slot)).is_some() {
                        slot += 1;
                    }
                    let mut rec = MemoryRecord::new(
                        chunk_id(&user, at, slot),
                        view.ns.clone(),
                        RecordKind::PreferenceChunk,
                        nc.text.clone(),
                        at,
                    )
                    .with_field("category", json!(nc.category))
                    .with_field(
                        "provenance",
                        json!({"role": "mars_extract", "sources": nc.sources}),
                    )
                    .with_strength(nc.strength);
                    if let (Some(a), Some(v)) = (nc.axis, &nc.value) {
                        rec = rec
                            .with_field("axis", json!(a))
                            .with_field("value", json!(v));
                    }
                    rec.evidence = nc.support;
                    view.emit(
                        MemoryOp::Create { record: rec },
                        "extract",
                        format!(
                            "{} positive signal(s) support {} = {}",
                            nc.support, nc.category, nc.text
                        ),
                        times(&nc.sources),
                        at,
                    )?;
                    mutations += 1;
                }
            }
            if let Some(last) = pending.last() {
                fields.insert("processed_through".into(), json!(last.time.0));
            }
        }
        if actions.has("merge") {
            let chunks = view.chunks();
            for (weak, strong, strength) in self.duplicate_pairs(&chunks)? {
                view.emit(
                    MemoryOp::Merge {
                        into: strong,
                        sources: vec![weak.clone()],
                        text: None,
                        strength: Some(strength),
                    },
                    "merge",
                    format!("near-duplicate of {weak}"),
                    Vec::new(),
                    at,
                )?;
                mutations += 1;
            }
        }
        if actions.has("forget") {
            for c in view.chunks() {
                if c.strength < cfg.forget_below && c.evidence >= cfg.forget_min_evidence {
                    view.emit(
                        MemoryOp::Forget { id: c.id.clone() },
                        "forget",
                        format!(
                            "strength {:.2} < {:.2} after {} observations",
                            c.strength, cfg.forget_below, c.evidence
                        ),
                        Vec::new(),
                        at,
                    )?;
                    mutations += 1;
                }
            }
        }
        fields.insert("mutations_since_synthesis".into(), json!(mutations));
        view.set_meta(
            fields,
            if forced {
                "forced lifecycle round"
            } else {
                "lifecycle round"
            },
            at,
        )?;
        let has_profile = view.get(&profile_id(&user)).is_some();
        let changed = mutations > 0;
        let want = mutations >= cfg.gamma
            || (changed && !has_profile && !view.chunks().is_empty())
            || (actions.has("synthesize")
                && changed
                && !matches!(cfg.sched, super::config::Scheduler::Fixed));
        if want {
            let why = if mutations >= cfg.gamma {
                format!("forced: {mutations} mutations ≥ γ = {}", cfg.gamma)
            } else if !has_profile {
                "first profile".to_string()
            } else {
                "planner requested".to_string()
            };
            self.synthesize(ctx, domain, view, at, &why)?;
        }
        Ok(())
    }

    /// Synthesize the profile from the chunks and events; reset the counter.
    pub(super) fn synthesize(
        &mut self,
        ctx: &PolicyCtx<'_>,
        domain: &Arc<Domain>,
        view: &mut UserView,
        at: LogicalTime,
        why: &str,
    ) -> Result<(), PolicyError> {
        let user = view.user.clone();
        let chunks = view.chunks();
        let pid = profile_id(&user);
        let input = SynthesizeInput {
            user: user.clone(),
            categories: domain.categories.clone(),
            chunks: chunks.iter().map(Mars::chunk_in).collect(),
            recent: view
                .events()
                .iter()
                .map(|e| Mars::signal_in(domain, ctx.catalog, e))
                .collect(),
            previous: view.get(&pid).map(|r| r.text.clone()),
            max_words: 300,
        };
        let out = self.call(&SynthesizeRole, &input, &user)?;
        // The facets the narrative names: the strongest chunks per category.
        let mut by_cat: BTreeMap<&str, Vec<&super::tiers::Chunk>> = BTreeMap::new();
        for c in &chunks {
            if c.strength >= PROFILE_MIN_STRENGTH {
                by_cat.entry(c.category.as_str()).or_default().push(c);
            }
        }
        let mut facets = Vec::new();
        for v in by_cat.values_mut() {
            v.sort_by(|a, b| b.strength.total_cmp(&a.strength).then(a.id.cmp(&b.id)));
            for c in v.iter().take(PROFILE_PER_CATEGORY) {
                facets.push(json!({
                    "category": c.category, "text": c.text, "strength": c.strength,
                    "axis": c.key.as_ref().map(|k| k.0), "value": c.key.as_ref().map(|k| k.1.clone()),
                    "chunk": c.id.0,
                }));
            }
        }
        let n = view.syntheses() + 1;
        let words = out.profile.split_whitespace().count();
        if view.get(&pid).is_some() {
            view.emit(
                MemoryOp::UpdateFields {
                    id: pid,
                    fields: BTreeMap::from([
                        ("facets".to_string(), json!(facets)),
                        ("words".to_string(), json!(words)),
                        ("synthesis".to_string(), json!(n)),
                    ]),
                    text: Some(out.profile),
                    embedding: None,
                },
                "synthesize",
                why,
                Vec::new(),
                at,
            )?;
        } else {
            let rec = MemoryRecord::new(pid, view.ns.clone(), RecordKind::Profile, out.profile, at)
                .with_field("facets", json!(facets))
                .with_field("words", json!(words))
                .with_field("synthesis", json!(n));
            view.emit(
                MemoryOp::Create { record: rec },
                "synthesize",
                why,
                Vec::new(),
                at,
            )?;
        }
        view.set_meta(
            BTreeMap::from([
                ("mutations_since_synthesis".to_string(), json!(0)),
                ("syntheses".to_string(), json!(n)),
            ]),
            "synthesis resets the mutation counter",
            at,
        )
    }
}
