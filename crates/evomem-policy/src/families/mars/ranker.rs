//! The offline MARS ranker: scores candidates against the belief state.
//!
//! The paper's ranker (§3.4) is an LLM reading the profile and recent events.
//! Offline, each consumed tier contributes one term, and a candidate's score
//! is their sum (tiers per §4.4; default profile + event):
//!
//! - **profile** `P(c) = B(facets of the profile, c) + w·cos(profile, c)`:
//!   the facets the last synthesis summarised (the strongest chunks) matched
//!   against the candidate, plus embedding similarity of the narrative;
//! - **preference** `F(c) = B(all live chunks, c)`;
//! - **event** `E(c) = Σ_e ω_e·(O(e, c) + w·cos(e, c)) / Σ_e |ω_e|` with
//!   `ω_e = polarity weight × decay^(age rank)` (positive 1, neutral 0.3,
//!   negative −1; newest age rank 0).
//!
//! Facet matching `B(beliefs, c) = Σ_axes Σ_{v ∈ V_a(c)} s(a, v)·idf(a, v) / √|V_a(c)|`
//! (a strength-weighted, IDF-weighted match normalised per axis so that items
//! with many genres are not favoured), plus, for beliefs without a metadata
//! key (LLM-written chunks), `w·s·cos(chunk, c)`. Event overlap
//! `O(e, c) = Σ_{f ∈ e ∩ c} idf(f) / √(|e|·|c|)`, an IDF-weighted cosine of the
//! two items' facet sets. `w` is `emb_weight`.
//!
//! The policy combines this content match with the frozen-LLM stand-in of
//! [`super::knowledge`]. Each term is standardised across the decision's
//! candidates (`z`), then
//! `score(c) = content·z(E + F + P) + collab·z(R̄(c)) + prior·z(ln(1 + n_c))
//! + walk·z(ln(ε + h_walk(c)))`,
//! where `R̄(c) = Σ_e decay^(age rank)·R(i_e, c) / Σ_e decay^(age rank)` runs
//! over the event tier (0 without it), and `h_walk` is the two-step walk
//! from the event tier's items ([`super::knowledge`]; `walk` defaults to 0
//! and is fitted by `fit=auto`, MARS's default since issue 55). With
//! `tiers=none` only the prior is left. The walk is not cited as evidence:
//! `evomem explain` shows the tiers' entries only.
//! Defaults content 0.35, collab 2.0, prior 0.25, chosen on validation targets
//! (see `MarsConfig::content`).

use super::categories::FacetIndex;
use super::config::MarsConfig;
use super::embeddings::ItemEmbeddings;
use super::knowledge::{standardise, Knowledge};
use super::polarity::Polarity;
use evomem_core::{dot, ItemId};
use std::collections::BTreeMap;

/// A belief the ranker matches: a chunk or a profile facet.
#[derive(Debug, Clone)]
pub struct Belief {
    /// Metadata key (axis, value).
    pub key: Option<(usize, String)>,
    /// Strength.
    pub strength: f64,
    /// Embedding of "category: text", used when `key` is `None`.
    pub embedding: Option<Vec<f32>>,
}

/// A remembered signal.
#[derive(Debug, Clone)]
pub struct Signal<'a> {
    /// Facets of its item.
    pub facets: &'a [(usize, String)],
    /// Embedding of its item.
    pub embedding: &'a [f32],
    /// Signed weight ω_e.
    pub weight: f64,
}

/// A candidate to score.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// Facets.
    pub facets: &'a [(usize, String)],
    /// Embedding.
    pub embedding: &'a [f32],
}

/// Facet matching `B` of the module docs.
pub fn belief_score(
    beliefs: &[Belief],
    cand: &Candidate<'_>,
    idf: &dyn Fn(usize, &str) -> f64,
    emb_weight: f64,
) -> f64 {
    if beliefs.is_empty() {
        return 0.0;
    }
    let mut strength: BTreeMap<(usize, &str), f64> = BTreeMap::new();
    for b in beliefs {
        if let Some((a, v)) = &b.key {
            *strength.entry((*a, v.as_str())).or_insert(0.0) += b.strength;
        }
    }
    let mut per_axis: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
    for (a, v) in cand.facets {
        let e = per_axis.entry(*a).or_insert((0.0, 0));
        e.1 += 1;
        if let Some(s) = strength.get(&(*a, v.as_str())) {
            e.0 += s * idf(*a, v);
        }
    }
    let mut score: f64 = per_axis.values().map(|(s, n)| s / (*n as f64).sqrt()).sum();
    for b in beliefs {
        if let (None, Some(e)) = (&b.key, &b.embedding) {
            if e.len() == cand.embedding.len() {
                score += emb_weight * b.strength * f64::from(dot(e, cand.embedding));
            }
        }
    }
    score
}

/// IDF-weighted facet cosine `O` of the module docs.
pub fn facet_overlap(
    a: &[(usize, String)],
    b: &[(usize, String)],
    idf: &dyn Fn(usize, &str) -> f64,
) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    // Both are sorted (FacetIndex sorts them): merge.
    let (mut i, mut j, mut s) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                s += idf(a[i].0, &a[i].1);
                i += 1;
                j += 1;
            }
        }
    }
    s / ((a.len() * b.len()) as f64).sqrt()
}

/// Event term `E` of the module docs.
pub fn event_score(
    signals: &[Signal<'_>],
    cand: &Candidate<'_>,
    idf: &dyn Fn(usize, &str) -> f64,
    emb_weight: f64,
) -> f64 {
    let norm: f64 = signals.iter().map(|s| s.weight.abs()).sum();
    if norm <= 0.0 {
        return 0.0;
    }
    signals
        .iter()
        .map(|s| {
            let cos = if s.embedding.len() == cand.embedding.len() {
                f64::from(dot(s.embedding, cand.embedding))
            } else {
                0.0
            };
            s.weight * (facet_overlap(s.facets, cand.facets, idf) + emb_weight * cos)
        })
        .sum::<f64>()
        / norm
}

/// Polarity weight of a remembered event: positive 1, neutral 0.3,
/// negative −1.
pub fn polarity_weight(p: Polarity) -> f64 {
    match p {
        Polarity::Positive => 1.0,
        Polarity::Neutral => 0.3,
        Polarity::Negative => -1.0,
    }
}

/// `ω_e` of an event at age rank `rank` (newest 0).
pub fn event_weight(p: Polarity, rank: usize, decay: f64) -> f64 {
    polarity_weight(p) * decay.powi(rank as i32)
}

/// The "LLM alone" term: each candidate's familiarity, standardised across
/// the candidates.
pub fn prior_terms(knowledge: &Knowledge, candidates: &[u32]) -> Vec<f64> {
    let mut prior: Vec<f64> = candidates
        .iter()
        .map(|&c| knowledge.familiarity(c))
        .collect();
    standardise(&mut prior);
    prior
}

/// What the consumed tiers hold for one decision, as the policy read it.
#[derive(Debug, Clone, Default)]
pub struct TierEvidence {
    /// Event tier, newest first: item index and signed weight `ω_e`.
    pub events: Vec<(u32, f64)>,
    /// Preference tier: every live chunk.
    pub chunks: Vec<Belief>,
    /// Profile tier: the facets the last synthesis summarised.
    pub profile: Vec<Belief>,
    /// Profile tier: the narrative's embedding.
    pub profile_emb: Option<Vec<f32>>,
}

/// Everything the ranker reads besides the tiers.
#[derive(Clone, Copy)]
pub struct Ranker<'a> {
    /// Weights, tiers and decay.
    pub cfg: &'a MarsConfig,
    /// Facets and IDF of the domain.
    pub facets: &'a FacetIndex,
    /// Item embeddings (warmed for the candidates and the event items).
    pub items: &'a ItemEmbeddings,
    /// The frozen-LLM stand-in.
    pub knowledge: &'a Knowledge,
}

impl Ranker<'_> {
    /// Final scores of `candidates` (module docs):
    /// `content·z(E + F + P) + collab·z(R̄) + prior·prior`, where `prior`
    /// comes from [`prior_terms`].
    pub fn score(&self, candidates: &[u32], tiers: &TierEvidence, prior: &[f64]) -> Vec<f64> {
        let rel = |a: u32, b: u32| self.knowledge.relatedness(a, b);
        // The walk costs a first step per decision: read it only when it weighs.
        let walk = if self.cfg.walk != 0.0 && self.cfg.tiers.event {
            self.knowledge
                .walk(&tiers.events, self.cfg.recency_decay, candidates, None)
        } else {
            Vec::new()
        };
        self.terms(candidates, tiers, prior, &rel, walk)
            .iter()
            .map(|[s, r, p, w]| {
                self.cfg.content * s + self.cfg.collab * r + self.cfg.prior * p + self.cfg.walk * w
            })
            .collect()
    }

    /// The four terms of each candidate's score, `[z(E + F + P), z(R̄),
    /// prior, z(ln(ε + h_walk))]` (the weights' order,
    /// [`super::fit::FEATURES`]), with `R̄` read through `relatedness` (the
    /// fit reads it with a held-out interaction taken out) and `walk` the
    /// walk's logarithms ([`Knowledge::walk`]; empty = 0 for every
    /// candidate).
    pub fn terms(
        &self,
        candidates: &[u32],
        tiers: &TierEvidence,
        prior: &[f64],
        relatedness: &dyn Fn(u32, u32) -> f64,
        mut walk: Vec<f64>,
    ) -> Vec<[f64; 4]> {
        let mut content = self.content(candidates, tiers);
        let mut related = self.related(candidates, &tiers.events, relatedness);
        standardise(&mut content);
        standardise(&mut related);
        walk.resize(candidates.len(), 0.0);
        standardise(&mut walk);
        content
            .iter()
            .zip(&related)
            .zip(prior)
            .zip(&walk)
            .map(|(((s, r), p), w)| [*s, *r, *p, *w])
            .collect()
    }

    /// `E + F + P` per candidate, over the consumed tiers (non-finite → 0).
    fn content(&self, candidates: &[u32], tiers: &TierEvidence) -> Vec<f64> {
        let consumed = self.cfg.tiers;
        let fi = self.facets;
        let idf = |a: usize, v: &str| fi.idf(a, v);
        let w = self.cfg.emb_weight;
        let signals: Vec<Signal<'_>> = tiers
            .events
            .iter()
            .map(|(item, weight)| Signal {
                facets: fi.facets(ItemId(*item)),
                embedding: self.items.get(*item).unwrap_or(&[]),
                weight: *weight,
            })
            .collect();
        let mut scores = Vec::with_capacity(candidates.len());
        for c in candidates {
            let emb = self.items.get(*c).unwrap_or(&[]);
            let cand = Candidate {
                facets: fi.facets(ItemId(*c)),
                embedding: emb,
            };
            let mut s = 0.0;
            if consumed.event {
                s += event_score(&signals, &cand, &idf, w);
            }
            if consumed.preference {
                s += belief_score(&tiers.chunks, &cand, &idf, w);
            }
            if consumed.profile {
                s += belief_score(&tiers.profile, &cand, &idf, w);
                if let Some(pe) = &tiers.profile_emb {
                    if pe.len() == emb.len() {
                        s += w * f64::from(dot(pe, emb));
                    }
                }
            }
            scores.push(if s.is_finite() { s } else { 0.0 });
        }
        scores
    }

    /// `R̄(c)`: relatedness of the event tier's items to each candidate,
    /// weighted by recency only: co-consumption counts every interaction,
    /// whatever its rating, so it is matched against every remembered event.
    fn related(
        &self,
        candidates: &[u32],
        events: &[(u32, f64)],
        relatedness: &dyn Fn(u32, u32) -> f64,
    ) -> Vec<f64> {
        let mut related = vec![0.0; candidates.len()];
        if !self.cfg.tiers.event || events.is_empty() {
            return related;
        }
        let decay = self.cfg.recency_decay;
        let norm: f64 = (0..events.len()).map(|r| decay.powi(r as i32)).sum();
        for (slot, &c) in related.iter_mut().zip(candidates) {
            let mut r = 0.0;
            for (rank, (item, _)) in events.iter().enumerate() {
                r += decay.powi(rank as i32) * relatedness(*item, c);
            }
            *slot = if norm > 0.0 { r / norm } else { 0.0 };
        }
        related
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_belief_scores_higher() {
        let idf = |_: usize, _: &str| 1.0;
        let beliefs = vec![Belief {
            key: Some((0, "Noir".into())),
            strength: 0.8,
            embedding: None,
        }];
        let f1 = vec![(0, "Noir".to_string())];
        let f2 = vec![(0, "Comedy".to_string())];
        let e = vec![0.0f32; 4];
        let a = belief_score(
            &beliefs,
            &Candidate {
                facets: &f1,
                embedding: &e,
            },
            &idf,
            0.5,
        );
        let b = belief_score(
            &beliefs,
            &Candidate {
                facets: &f2,
                embedding: &e,
            },
            &idf,
            0.5,
        );
        assert!(a > b);
        assert!((facet_overlap(&f1, &f1, &idf) - 1.0).abs() < 1e-9);
    }
}
