//! `recent`: rank candidates by similarity to the user's last k items.
//!
//! The simplest sequence-aware baseline. For user u with last observed items
//! i_1 (newest) … i_k, a candidate c scores
//!
//! ```text
//! s(c) = Σ_j decay^(j-1) · cos(e_c, e_{i_j})
//! ```
//!
//! with e the embedding of an item's text (`Item::full_text`). It keeps only
//! its own model state (the last k items per user, from `observe`), writes no
//! memory, and returns its scores in `DecisionContext::scores` with an empty
//! usage trace, like the other ranking baselines.

use crate::registry::{Capabilities, Family, Key, KeyType, PolicyDeps, PolicySpec};
use evomem_core::{
    dot, Catalog, DecisionContext, DecisionQuery, Embedder, Interaction, ItemId, PlannedOp, Policy,
    PolicyCtx, PolicyError, Recall, UsageTrace, UserId,
};
use evomem_kit::EmbeddingCache;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// The `recent` family row.
pub const FAMILY: Family = Family {
    name: "recent",
    kind: crate::registry::FamilyKind::Baseline,
    summary: "similarity to the user's last k items, newest weighted most",
    keys: &[
        Key {
            name: "k",
            ty: KeyType::Count,
            default: "5",
            doc: "how many of the user's latest items are compared",
        },
        Key {
            name: "decay",
            ty: KeyType::Number,
            default: "0.8",
            doc: "weight of each older position relative to the next newer",
        },
    ],
    build,
    grids: &[],
    caps: Capabilities::RANK_BASELINE,
};

fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let k: usize = spec.value("k")?;
    let decay: f64 = spec.value("decay")?;
    if k == 0 || !(decay > 0.0 && decay <= 1.0) {
        return Err(PolicyError::Config(format!(
            "recent: `k` must be at least 1 and `decay` in (0, 1], got k={k}, decay={decay}"
        )));
    }
    Ok(Box::new(Recent {
        k,
        decay,
        embedder: deps.embedder.clone(),
        cache: EmbeddingCache::new(deps.embedder.dim()),
        last: BTreeMap::new(),
    }))
}

/// The policy.
struct Recent {
    k: usize,
    decay: f64,
    embedder: Arc<dyn Embedder>,
    cache: EmbeddingCache,
    last: BTreeMap<UserId, VecDeque<ItemId>>,
}

impl Recent {
    fn text(catalog: &Catalog, item: ItemId) -> String {
        catalog.get(item).map(|i| i.full_text()).unwrap_or_default()
    }
}

impl Policy for Recent {
    fn name(&self) -> &str {
        "recent"
    }

    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        e: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let q = self.last.entry(e.user).or_default();
        q.retain(|i| *i != e.item);
        q.push_front(e.item);
        q.truncate(self.k);
        Ok(Vec::new())
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        let recent: Vec<ItemId> = self
            .last
            .get(&q.user)
            .map(|d| d.iter().copied().collect())
            .unwrap_or_default();
        let texts: Vec<String> = recent
            .iter()
            .chain(q.candidates())
            .map(|&i| Self::text(ctx.catalog, i))
            .collect();
        self.cache.warm(self.embedder.as_ref(), &texts)?;
        let (past, cands) = texts.split_at(recent.len());
        let mut scores = Vec::with_capacity(cands.len());
        for c in cands {
            let ec = self.cache.embed(self.embedder.as_ref(), c)?;
            let mut s = 0.0;
            let mut w = 1.0;
            for p in past {
                let ep = self.cache.embed(self.embedder.as_ref(), p)?;
                s += w * f64::from(dot(&ec, &ep));
                w *= self.decay;
            }
            scores.push(s);
        }
        Ok(Recall {
            context: DecisionContext {
                scores: Some(scores),
                ..DecisionContext::default()
            },
            trace: UsageTrace::for_query(q),
        })
    }
}
