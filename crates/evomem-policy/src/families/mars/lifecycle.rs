//! The six lifecycle operations of §3.3 ([`Lifecycle`]) as op planning on a
//! [`UserView`].
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
//!
//! **Planner targets** (agentic scheduler, Appendix F). When the planner
//! named chunks for an action ([`Actions::targets`]), that action acts on
//! those chunks only, instead of its default rule above:
//! - boost / demote: the named chunks, with the extraction's support and
//!   reason where it assessed them too, else support 1; the extraction's
//!   other boosts (demotes) are dropped, and a chunk the planner names for
//!   demotion (boosting) is not boosted (demoted) by an untargeted action. The `mars_extract` call is skipped
//!   when the plan has no extract and names the targets of every boost and
//!   demote it asks for (then those are deterministic updates, as §3.3 says);
//!   the pending signals still count as processed.
//! - merge: each named chunk with its closest other chunk of the category
//!   (embedding cosine, no threshold: the planner judged them duplicates),
//!   into the stronger one;
//! - forget: the named chunks, whatever their strength.
//!
//! Named chunks that no longer exist when the op would run (forgotten for
//! capacity earlier in the round) are skipped. The fixed scheduler names no
//! targets, so its rounds are exactly the rules above.

use super::config::{Budget, Scheduler};
use super::policy::{times, Domain, Mars};
use super::roles::{
    Assessment, BriefExtractRole, BriefSynthesizeRole, ExtractInput, ExtractOutput, ExtractRole,
    NewChunk, PlanRole, SynthesizeInput, SynthesizeRole,
};
use super::scheduler::{plan_input, Actions, PlanView};
use super::tiers::{chunk_id, chunk_text, profile_id, Chunk, EventView, UserView};
use evomem_core::{
    dot, LogicalTime, MemoryId, MemoryOp, MemoryRecord, PolicyCtx, PolicyError, RecordKind,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use thiserror::Error;

/// Strength at or above which the profile names a chunk as a preference.
pub const PROFILE_MIN_STRENGTH: f64 = 0.45;
/// Chunks per category the profile names.
pub const PROFILE_PER_CATEGORY: usize = 3;

/// One of the six lifecycle operations (§3.3). Its string form
/// ([`Lifecycle::as_str`], `Display`, `FromStr`, serde) is the op label in
/// the op log, the planner's action name and the key in `stats()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    /// New chunks from pending signals.
    Extract,
    /// Reinforce confirmed chunks (+δ₊).
    Boost,
    /// Weaken contradicted chunks (−δ₋).
    Demote,
    /// Consolidate near-duplicate chunks.
    Merge,
    /// Drop weak chunks.
    Forget,
    /// Rewrite the profile narrative.
    Synthesize,
}

impl Lifecycle {
    /// Every operation, in the order of §3.3 (and of a round).
    pub const ALL: [Lifecycle; 6] = [
        Lifecycle::Extract,
        Lifecycle::Boost,
        Lifecycle::Demote,
        Lifecycle::Merge,
        Lifecycle::Forget,
        Lifecycle::Synthesize,
    ];

    /// The names of [`Lifecycle::ALL`], in that order.
    pub const NAMES: [&'static str; 6] = {
        let mut out = [""; 6];
        let mut k = 0;
        while k < out.len() {
            out[k] = Lifecycle::ALL[k].as_str();
            k += 1;
        }
        out
    };

    /// The label: `extract`, `boost`, `demote`, `merge`, `forget` or `synthesize`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Extract => "extract",
            Lifecycle::Boost => "boost",
            Lifecycle::Demote => "demote",
            Lifecycle::Merge => "merge",
            Lifecycle::Forget => "forget",
            Lifecycle::Synthesize => "synthesize",
        }
    }
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no lifecycle operation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "unknown lifecycle action `{0}` (known: extract, boost, demote, merge, forget, synthesize)"
)]
pub struct UnknownAction(pub String);

impl FromStr for Lifecycle {
    type Err = UnknownAction;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Lifecycle::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| UnknownAction(s.to_string()))
    }
}

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
        let duplicates = self
            .duplicate_pairs(&chunks)?
            .into_iter()
            .map(|(weak, strong, _)| (weak.0, strong.0))
            .collect();
        let input = plan_input(
            PlanView {
                user: &view.user,
                pending,
                chunks: &chunks,
                chunk_ins: chunks.iter().map(Mars::chunk_in).collect(),
                fifo_len: view.events().len(),
                mutations: view.mutations(),
                has_profile: view.get(&profile_id(&view.user)).is_some(),
                duplicate_pairs: duplicates,
            },
            &self.cfg,
        );
        let out = self.call(&PlanRole, &input, &view.user.clone())?;
        let actions = Actions::from_plan(&out);
        if actions.is_targeted() {
            self.stats.plan_targeted += 1;
        }
        Ok(actions)
    }

    /// Pairs (weaker, stronger) of near-duplicate chunks within a category.
    fn duplicate_pairs(
        &mut self,
        chunks: &[Chunk],
    ) -> Result<Vec<(MemoryId, MemoryId, f64)>, PolicyError> {
        let mut by_cat: BTreeMap<&str, Vec<&Chunk>> = BTreeMap::new();
        for c in chunks {
            by_cat.entry(c.category.as_str()).or_default().push(c);
        }
        let mut out = Vec::new();
        let mut absorbed = BTreeSet::new();
        for v in by_cat.values() {
            for i in 0..v.len() {
                for j in (i + 1)..v.len() {
                    let (a, b) = (v[i], v[j]);
                    if absorbed.contains(&a.id) || absorbed.contains(&b.id) {
                        continue;
                    }
                    let same = a.text.trim().eq_ignore_ascii_case(b.text.trim());
                    let near = same || {
                        let ea = self.text_embedding(&chunk_text(a))?;
                        let eb = self.text_embedding(&chunk_text(b))?;
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
        let user = view.user.clone();
        let mut mutations = view.mutations();
        let mut fields: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let pending = view.pending();
        let assess = actions.has(Lifecycle::Extract)
            || actions.has(Lifecycle::Boost)
            || actions.has(Lifecycle::Demote);
        if assess && !pending.is_empty() {
            mutations += self.assess_pending(ctx, domain, view, actions, &pending, at)?;
            if let Some(last) = pending.last() {
                fields.insert("processed_through".into(), json!(last.time.0));
            }
        }
        if actions.has(Lifecycle::Merge) {
            mutations += match actions.targets(Lifecycle::Merge) {
                None => self.merge_duplicates(view, at)?,
                Some(named) => self.merge_named(view, named, at)?,
            };
        }
        if actions.has(Lifecycle::Forget) {
            mutations += match actions.targets(Lifecycle::Forget) {
                None => self.forget_weak(view, at)?,
                Some(named) => self.forget_named(view, named, at)?,
            };
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
        let gamma = self.cfg.gamma;
        let has_profile = view.get(&profile_id(&user)).is_some();
        let changed = mutations > 0;
        let want = mutations >= gamma
            || (changed && !has_profile && !view.chunks().is_empty())
            || (actions.has(Lifecycle::Synthesize)
                && changed
                && !matches!(self.cfg.sched, Scheduler::Fixed));
        if want {
            let why = if mutations >= gamma {
                format!("forced: {mutations} mutations ≥ γ = {gamma}")
            } else if !has_profile {
                "first profile".to_string()
            } else {
                "planner requested".to_string()
            };
            self.synthesize(ctx, domain, view, at, &why)?;
        }
        Ok(())
    }

    /// Extract, boost and demote: one `mars_extract` call over the pending
    /// signals (unless the planner's targets make it unnecessary, see the
    /// module docs), then the selected ops. Returns the mutations planned.
    pub(super) fn assess_pending(
        &mut self,
        ctx: &PolicyCtx<'_>,
        domain: &Arc<Domain>,
        view: &mut UserView,
        actions: &Actions,
        pending: &[EventView],
        at: LogicalTime,
    ) -> Result<u32, PolicyError> {
        let user = view.user.clone();
        let input = ExtractInput {
            user: user.clone(),
            categories: domain.categories.clone(),
            pending: pending
                .iter()
                .map(|e| Mars::signal_in(domain, ctx.catalog, e))
                .collect(),
            chunks: view.chunks().iter().map(Mars::chunk_in).collect(),
            min_support: self.cfg.min_support,
            shift_min: self.cfg.shift_min,
            kcat: self.cfg.kcat,
        };
        let untargeted = |a: Lifecycle| actions.has(a) && actions.targets(a).is_none();
        let out = if actions.has(Lifecycle::Extract)
            || untargeted(Lifecycle::Boost)
            || untargeted(Lifecycle::Demote)
        {
            match self.cfg.budget {
                Budget::Full => self.call(&ExtractRole, &input, &user)?,
                Budget::Paper => self.call(&BriefExtractRole, &input, &user)?,
            }
        } else {
            ExtractOutput::default()
        };
        let mut mutations = 0;
        if actions.has(Lifecycle::Boost) {
            let boosts = self.planned(actions, Lifecycle::Boost, &out.boosts, pending);
            mutations += adjust(view, &boosts, Lifecycle::Boost, self.cfg.delta_plus, at)?;
        }
        if actions.has(Lifecycle::Demote) {
            let demotes = self.planned(actions, Lifecycle::Demote, &out.demotes, pending);
            mutations += adjust(view, &demotes, Lifecycle::Demote, -self.cfg.delta_minus, at)?;
        }
        if actions.has(Lifecycle::Extract) {
            for (k, nc) in out.new_chunks.iter().enumerate() {
                mutations += self.extract_chunk(view, nc, k, at)?;
            }
        }
        Ok(mutations)
    }

    /// The assessments `op` (boost or demote) acts on: without planner
    /// targets, the extraction's (`assessed`) less the chunks the planner
    /// named for the opposite op; else one per named chunk, the extraction's
    /// where it assessed that chunk too.
    fn planned(
        &mut self,
        actions: &Actions,
        op: Lifecycle,
        assessed: &[Assessment],
        pending: &[EventView],
    ) -> Vec<Assessment> {
        let Some(named) = actions.targets(op) else {
            let opposite = match op {
                Lifecycle::Boost => actions.targets(Lifecycle::Demote),
                _ => actions.targets(Lifecycle::Boost),
            };
            return match opposite {
                None => assessed.to_vec(),
                Some(other) => assessed
                    .iter()
                    .filter(|a| !other.contains(&a.chunk))
                    .cloned()
                    .collect(),
            };
        };
        *self.stats.plan_targets.entry(op.to_string()).or_insert(0) += named.len() as u64;
        named
            .iter()
            .map(|id| {
                assessed
                    .iter()
                    .find(|a| &a.chunk == id)
                    .cloned()
                    .unwrap_or_else(|| Assessment {
                        chunk: id.clone(),
                        support: 1,
                        reason: format!("{op} named by the planner"),
                        sources: pending.iter().map(|e| e.time.0).collect(),
                    })
            })
            .collect()
    }

    /// Create the `k`-th proposed chunk of a round; when its category is
    /// full, forget the weakest first if the new one is stronger, else drop
    /// the proposal. Returns the mutations planned.
    fn extract_chunk(
        &mut self,
        view: &mut UserView,
        nc: &NewChunk,
        k: usize,
        at: LogicalTime,
    ) -> Result<u32, PolicyError> {
        let kcat = self.cfg.kcat;
        let user = view.user.clone();
        let mut mutations = 0;
        let in_cat: Vec<_> = view
            .chunks()
            .into_iter()
            .filter(|c| c.category == nc.category)
            .collect();
        if in_cat.len() >= kcat {
            let weakest = in_cat
                .iter()
                .min_by(|a, b| a.strength.total_cmp(&b.strength).then(a.id.cmp(&b.id)));
            match weakest {
                Some(w) if w.strength < nc.strength => {
                    view.emit(
                        MemoryOp::Forget { id: w.id.clone() },
                        Lifecycle::Forget.as_str(),
                        format!(
                            "K_cat = {kcat} reached in {}: make room for {}",
                            nc.category, nc.text
                        ),
                        times(&nc.sources),
                        at,
                    )?;
                    mutations += 1;
                }
                _ => {
                    self.stats.capacity_skips += 1;
                    return Ok(mutations);
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
            Lifecycle::Extract.as_str(),
            format!(
                "{} positive signal(s) support {} = {}",
                nc.support, nc.category, nc.text
            ),
            times(&nc.sources),
            at,
        )?;
        Ok(mutations + 1)
    }

    /// Merge near-duplicate chunks into the stronger one. Returns the
    /// mutations planned.
    pub(super) fn merge_duplicates(
        &mut self,
        view: &mut UserView,
        at: LogicalTime,
    ) -> Result<u32, PolicyError> {
        let chunks = view.chunks();
        let mut mutations = 0;
        for (weak, strong, strength) in self.duplicate_pairs(&chunks)? {
            view.emit(
                MemoryOp::Merge {
                    into: strong,
                    sources: vec![weak.clone()],
                    text: None,
                    strength: Some(strength),
                },
                Lifecycle::Merge.as_str(),
                format!("near-duplicate of {weak}"),
                Vec::new(),
                at,
            )?;
            mutations += 1;
        }
        Ok(mutations)
    }

    /// Merge each planner-named chunk with its closest other live chunk of
    /// the same category (greatest embedding cosine, ties by id) into the
    /// stronger of the two. Returns the mutations planned.
    fn merge_named(
        &mut self,
        view: &mut UserView,
        named: &[String],
        at: LogicalTime,
    ) -> Result<u32, PolicyError> {
        *self.stats.plan_targets.entry("merge".into()).or_insert(0) += named.len() as u64;
        let mut mutations = 0;
        for id in named {
            let chunks = view.chunks();
            let Some(a) = chunks.iter().find(|c| &c.id.0 == id) else {
                continue;
            };
            let ea = self.text_embedding(&chunk_text(a))?;
            let mut best: Option<(f32, &Chunk)> = None;
            for b in chunks
                .iter()
                .filter(|b| b.category == a.category && b.id != a.id)
            {
                let eb = self.text_embedding(&chunk_text(b))?;
                let cos = dot(&ea, &eb);
                if best.is_none_or(|(c, _)| cos > c) {
                    best = Some((cos, b));
                }
            }
            let Some((cos, b)) = best else {
                continue;
            };
            let (weak, strong) = if (b.strength, &a.id) > (a.strength, &b.id) {
                (a, b)
            } else {
                (b, a)
            };
            view.emit(
                MemoryOp::Merge {
                    into: strong.id.clone(),
                    sources: vec![weak.id.clone()],
                    text: None,
                    strength: Some(a.strength.max(b.strength)),
                },
                Lifecycle::Merge.as_str(),
                format!(
                    "planner: {} duplicates {} (cosine {cos:.2})",
                    weak.id, strong.id
                ),
                Vec::new(),
                at,
            )?;
            mutations += 1;
        }
        Ok(mutations)
    }

    /// Forget the planner-named chunks that still exist. Returns the
    /// mutations planned.
    fn forget_named(
        &mut self,
        view: &mut UserView,
        named: &[String],
        at: LogicalTime,
    ) -> Result<u32, PolicyError> {
        *self.stats.plan_targets.entry("forget".into()).or_insert(0) += named.len() as u64;
        let mut mutations = 0;
        for c in view.chunks() {
            if named.contains(&c.id.0) {
                view.emit(
                    MemoryOp::Forget { id: c.id.clone() },
                    Lifecycle::Forget.as_str(),
                    format!(
                        "planner: forget (strength {:.2}, {} observations)",
                        c.strength, c.evidence
                    ),
                    Vec::new(),
                    at,
                )?;
                mutations += 1;
            }
        }
        Ok(mutations)
    }

    /// Forget chunks below `forget_below` with at least
    /// `forget_min_evidence` evidence. Returns the mutations planned.
    pub(super) fn forget_weak(
        &self,
        view: &mut UserView,
        at: LogicalTime,
    ) -> Result<u32, PolicyError> {
        let (below, min_evidence) = (self.cfg.forget_below, self.cfg.forget_min_evidence);
        let mut mutations = 0;
        for c in view.chunks() {
            if c.strength < below && c.evidence >= min_evidence {
                view.emit(
                    MemoryOp::Forget { id: c.id.clone() },
                    Lifecycle::Forget.as_str(),
                    format!(
                        "strength {:.2} < {:.2} after {} observations",
                        c.strength, below, c.evidence
                    ),
                    Vec::new(),
                    at,
                )?;
                mutations += 1;
            }
        }
        Ok(mutations)
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
            max_words: self.cfg.profile_words,
        };
        let out = match self.cfg.budget {
            Budget::Full => self.call(&SynthesizeRole, &input, &user)?,
            Budget::Paper => self.call(&BriefSynthesizeRole, &input, &user)?,
        };
        // The facets the narrative names: the strongest chunks per category.
        let mut by_cat: BTreeMap<&str, Vec<&Chunk>> = BTreeMap::new();
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
                Lifecycle::Synthesize.as_str(),
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
                Lifecycle::Synthesize.as_str(),
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

/// Boost (`+δ₊`, evidence + support) or demote (`−δ₋`, evidence + 0, §3.3:
/// demote decrements strength only) the assessed chunks that still exist,
/// labelled `op`. Returns the mutations planned.
fn adjust(
    view: &mut UserView,
    assessments: &[Assessment],
    op: Lifecycle,
    delta: f64,
    at: LogicalTime,
) -> Result<u32, PolicyError> {
    let mut mutations = 0;
    for a in assessments {
        let id = MemoryId::new(a.chunk.clone());
        if view.get(&id).is_none() {
            continue;
        }
        let evidence_delta = if op == Lifecycle::Boost {
            a.support.max(1)
        } else {
            0
        };
        view.emit(
            MemoryOp::AdjustStrength {
                id,
                delta,
                evidence_delta,
            },
            op.as_str(),
            a.reason.clone(),
            times(&a.sources),
            at,
        )?;
        mutations += 1;
    }
    Ok(mutations)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MARS's capabilities (in `evomem-core`) name its timeline's labels:
    /// the same as [`Lifecycle::NAMES`], in the same order.
    #[test]
    fn the_family_timeline_is_the_lifecycle() {
        assert_eq!(
            crate::mars::FAMILY.caps.lifecycle_timeline,
            Lifecycle::NAMES.as_slice()
        );
    }

    #[test]
    fn lifecycle_strings_round_trip() {
        assert_eq!(
            Lifecycle::NAMES,
            [
                "extract",
                "boost",
                "demote",
                "merge",
                "forget",
                "synthesize"
            ]
        );
        for l in Lifecycle::ALL {
            assert_eq!(l.as_str().parse::<Lifecycle>(), Ok(l));
            assert_eq!(l.to_string(), l.as_str());
            assert_eq!(serde_json::to_value(l).unwrap(), json!(l.as_str()));
            assert_eq!(
                serde_json::from_value::<Lifecycle>(json!(l.as_str())).unwrap(),
                l
            );
        }
        assert_eq!(
            "wait".parse::<Lifecycle>(),
            Err(UnknownAction("wait".into()))
        );
    }
}
