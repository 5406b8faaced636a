//! What `recall` reads from the consumed tiers: the decision context shown
//! to the decider (events, chunks, profile), the usage trace, and the
//! [`TierEvidence`] the offline ranker scores with (see [`super::ranker`]).

use super::config::Budget;
use super::policy::Mars;
use super::ranker::{event_weight, Belief, TierEvidence};
use super::tiers::{chunk_text, chunks_in, events_in, profile_id, EventView};
use evomem_core::{
    ContextEntry, DecisionContext, ItemId, Namespace, PolicyCtx, PolicyError, RecordSource,
    UsageTrace, UsedMemory,
};

impl Mars {
    /// Read the consumed tiers of `user` (namespace `ns`) in `memory` (the
    /// shared state, or a view holding ops not yet applied) for a decision
    /// over `candidates`: fill `context` and `trace` (events newest first,
    /// then chunks, then the profile) and return the ranker's evidence.
    pub(super) fn read_tiers(
        &mut self,
        ctx: &PolicyCtx<'_>,
        memory: &dyn RecordSource,
        (user, ns): (&str, &Namespace),
        candidates: &[u32],
        (context, trace): (&mut DecisionContext, &mut UsageTrace),
    ) -> Result<TierEvidence, PolicyError> {
        let tiers = self.cfg.tiers;
        let events = if tiers.event {
            events_in(memory, ns)
        } else {
            Vec::new()
        };
        let mut all_items = candidates.to_vec();
        all_items.extend(events.iter().map(|e| e.item));
        self.warm_items(ctx.catalog, &all_items)?;
        let mut out = TierEvidence {
            events: self.event_tier(ctx, &events, context, trace)?,
            ..TierEvidence::default()
        };
        if tiers.preference {
            out.chunks = self.preference_tier(memory, ns, context, trace)?;
        }
        if tiers.profile {
            self.profile_tier(memory, user, ns, context, trace, &mut out)?;
        }
        Ok(out)
    }

    /// Event tier: newest first with recency-decayed, signed weights.
    fn event_tier(
        &mut self,
        ctx: &PolicyCtx<'_>,
        events: &[EventView],
        context: &mut DecisionContext,
        trace: &mut UsageTrace,
    ) -> Result<Vec<(u32, f64)>, PolicyError> {
        let mut weighted = Vec::with_capacity(events.len());
        for (rank, e) in events.iter().rev().enumerate() {
            let w = event_weight(e.polarity, rank, self.cfg.recency_decay);
            weighted.push((e.item, w));
            let emb = self.item_embedding(ctx.catalog, e.item)?;
            // `budget=paper`: the title alone (the candidates carry genres);
            // the offline ranker reads the item, not this text.
            let text = match (self.cfg.budget, ctx.catalog.get(ItemId(e.item))) {
                (Budget::Paper, Some(item)) => item.title.clone(),
                _ => e.text.clone(),
            };
            context.entries.push(ContextEntry {
                memory: Some(e.id.clone()),
                item: Some(ItemId(e.item)),
                text,
                weight: w as f32,
                embedding: Some(emb),
                path: None,
            });
            trace.used.push(UsedMemory {
                id: e.id.clone(),
                weight: w as f32,
            });
        }
        Ok(weighted)
    }

    /// Preference tier: every live chunk, matched by facet or embedding.
    fn preference_tier(
        &mut self,
        memory: &dyn RecordSource,
        ns: &Namespace,
        context: &mut DecisionContext,
        trace: &mut UsageTrace,
    ) -> Result<Vec<Belief>, PolicyError> {
        let mut beliefs = Vec::new();
        for c in chunks_in(memory, ns) {
            let emb = self.text_embedding(&chunk_text(&c))?;
            context.entries.push(ContextEntry {
                memory: Some(c.id.clone()),
                item: None,
                text: format!("[{}] {} (strength {:.2})", c.category, c.text, c.strength),
                weight: c.strength as f32,
                embedding: Some(emb.clone()),
                path: None,
            });
            trace.used.push(UsedMemory {
                id: c.id.clone(),
                weight: c.strength as f32,
            });
            beliefs.push(Belief {
                key: c.key.clone(),
                strength: c.strength,
                embedding: Some(emb),
            });
        }
        Ok(beliefs)
    }

    /// Profile tier: the narrative (context and embedding) and the facets it
    /// summarised; nothing when the user has no profile yet.
    fn profile_tier(
        &mut self,
        memory: &dyn RecordSource,
        user: &str,
        ns: &Namespace,
        context: &mut DecisionContext,
        trace: &mut UsageTrace,
        out: &mut TierEvidence,
    ) -> Result<(), PolicyError> {
        let Some(p) = memory
            .record(&profile_id(user))
            .filter(|r| &r.namespace == ns)
        else {
            return Ok(());
        };
        context.profile = Some(p.text.clone());
        trace.used.push(UsedMemory {
            id: p.id.clone(),
            weight: 1.0,
        });
        out.profile_emb = Some(self.text_embedding(&p.text)?);
        let facets = p.fields.get("facets").and_then(|v| v.as_array());
        for f in facets.into_iter().flatten() {
            let strength = f.get("strength").and_then(|v| v.as_f64()).unwrap_or(0.0);
            let key = match (
                f.get("axis").and_then(|v| v.as_u64()),
                f.get("value").and_then(|v| v.as_str()),
            ) {
                (Some(a), Some(v)) => Some((a as usize, v.to_string())),
                _ => None,
            };
            // Facets without a metadata key (LLM-written chunks) are matched
            // by the embedding of "category: text".
            let embedding = if key.is_none() {
                let t = format!(
                    "{}: {}",
                    f.get("category").and_then(|v| v.as_str()).unwrap_or(""),
                    f.get("text").and_then(|v| v.as_str()).unwrap_or("")
                );
                Some(self.text_embedding(&t)?)
            } else {
                None
            };
            out.profile.push(Belief {
                key,
                strength,
                embedding,
            });
        }
        Ok(())
    }
}
