//! The typed relations of AtomRec's links (§2.4).
//!
//! The link role chooses one of five relation types for a typed link, or
//! `similar` for an embedding-only link (`typed=false`). They are an enum so
//! that every place that reads a relation (the expansion factor, the prompt's
//! list, the evolve role's wording) matches on all of them; on the wire (role
//! answers, `Link` ops, evidence paths) they stay the plain strings the paper
//! uses, so the op log reads exactly as before.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A link relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Relation {
    /// `shared topic`: the same item or strongly overlapping facets.
    #[serde(rename = "shared topic")]
    SharedTopic,
    /// `complementary preference`: partial overlap, or the same item with
    /// another sentiment.
    #[serde(rename = "complementary preference")]
    ComplementaryPreference,
    /// `intent progression`: a recent step of the same intent.
    #[serde(rename = "intent progression")]
    IntentProgression,
    /// `preference transition`: a recent step that changed the intent.
    #[serde(rename = "preference transition")]
    PreferenceTransition,
    /// `cross-domain transfer`: no shared facet.
    #[serde(rename = "cross-domain transfer")]
    CrossDomainTransfer,
    /// `similar`: an embedding-only link (`typed=false`).
    #[serde(rename = "similar")]
    Similar,
}

/// A relation string that is none of [`Relation`]'s.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown relation `{0}`")]
pub struct UnknownRelation(pub String);

impl Relation {
    /// The five typed relations of §2.4, in the order the link prompt lists them.
    pub const TYPED: [Relation; 5] = [
        Relation::SharedTopic,
        Relation::ComplementaryPreference,
        Relation::IntentProgression,
        Relation::PreferenceTransition,
        Relation::CrossDomainTransfer,
    ];

    /// Every relation, typed ones first.
    pub const ALL: [Relation; 6] = [
        Relation::SharedTopic,
        Relation::ComplementaryPreference,
        Relation::IntentProgression,
        Relation::PreferenceTransition,
        Relation::CrossDomainTransfer,
        Relation::Similar,
    ];

    /// The relation as written in prompts, answers and ops.
    pub fn as_str(self) -> &'static str {
        match self {
            Relation::SharedTopic => "shared topic",
            Relation::ComplementaryPreference => "complementary preference",
            Relation::IntentProgression => "intent progression",
            Relation::PreferenceTransition => "preference transition",
            Relation::CrossDomainTransfer => "cross-domain transfer",
            Relation::Similar => "similar",
        }
    }
}

/// Expansion factors: how strongly a hop along each relation carries
/// preference evidence. A link's weight in the expansion is its cosine times
/// its relation's factor. The keys `rel_intent`, `rel_shared`,
/// `rel_transition`, `rel_complementary`, `rel_cross` and `rel_similar` of
/// the `atomrec` family set them; [`RelationFactors::default`] gives the
/// defaults and the module docs of [`super`] give the reasons.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RelationFactors {
    /// `intent progression` (`rel_intent`). Default 1.0.
    pub intent_progression: f32,
    /// `shared topic` (`rel_shared`). Default 0.9.
    pub shared_topic: f32,
    /// `preference transition` (`rel_transition`). Default 0.8.
    pub preference_transition: f32,
    /// `complementary preference` (`rel_complementary`). Default 0.6.
    pub complementary_preference: f32,
    /// `cross-domain transfer` (`rel_cross`). Default 0.4.
    pub cross_domain_transfer: f32,
    /// `similar`, an embedding-only link (`rel_similar`). Default 0.7.
    pub similar: f32,
}

impl Default for RelationFactors {
    fn default() -> Self {
        Self {
            intent_progression: 1.0,
            shared_topic: 0.9,
            preference_transition: 0.8,
            complementary_preference: 0.6,
            cross_domain_transfer: 0.4,
            similar: 0.7,
        }
    }
}

impl RelationFactors {
    /// The factor of `rel`.
    pub fn get(&self, rel: Relation) -> f32 {
        match rel {
            Relation::IntentProgression => self.intent_progression,
            Relation::SharedTopic => self.shared_topic,
            Relation::PreferenceTransition => self.preference_transition,
            Relation::ComplementaryPreference => self.complementary_preference,
            Relation::CrossDomainTransfer => self.cross_domain_transfer,
            Relation::Similar => self.similar,
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Relation {
    type Err = UnknownRelation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Relation::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRelation(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip_through_display_fromstr_and_serde() {
        for r in Relation::ALL {
            assert_eq!(r.to_string().parse::<Relation>(), Ok(r));
            let json = serde_json::to_string(&r).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<Relation>(&json).ok(), Some(r));
        }
        assert!("related".parse::<Relation>().is_err());
    }
}
