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

    /// Expansion factor: how strongly a hop along this relation carries
    /// preference evidence. A link's weight in the expansion is its cosine
    /// times this factor.
    pub fn factor(self) -> f32 {
        match self {
            Relation::IntentProgression => 1.0,
            Relation::SharedTopic => 0.9,
            Relation::PreferenceTransition => 0.8,
            Relation::ComplementaryPreference => 0.6,
            Relation::CrossDomainTransfer => 0.4,
            Relation::Similar => 0.7,
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
