//! Memory records: the unit a store keeps and a policy reads.
//!
//! One struct serves every policy. The `kind` says what the record is (a MARS
//! preference chunk, an AtomRec atom, a RoMeRL utility slot, a TIDE guideline,
//! ...); policy-specific structure lives in `fields`, a JSON object, so that the
//! store and the op log stay policy-agnostic while each field can still be
//! evolved individually (AtomRec's field-level evolution).

use crate::ids::{LogicalTime, MemoryId, Namespace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a record is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// A raw signal (MARS event tier).
    Event,
    /// A preference chunk with strength and evidence (MARS).
    PreferenceChunk,
    /// A synthesized narrative profile (MARS).
    Profile,
    /// An atomic note (AtomRec).
    Atom,
    /// A utility-bearing slot (RoMeRL 2x2 state, MemRL pool entry).
    UtilitySlot,
    /// A guideline used to generate content (TIDE).
    Guideline,
    /// A coarse summary (ablations, baselines).
    Summary,
    /// Anything else, named by the policy.
    Custom(String),
}

/// Lifecycle status of a record (TIDE's provisional/promoted governance).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// Normal, in use.
    #[default]
    Active,
    /// Written but not yet trusted.
    Provisional,
    /// Credited and promoted.
    Promoted,
}

/// An embedding with the id of the model that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// Stable model id (see `Embedder::model_id`).
    pub model: String,
    /// L2-normalised vector.
    pub vector: Vec<f32>,
}

/// A directed, described link between two records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Target record.
    pub target: MemoryId,
    /// Relation type or free-text description ("shared topic", ...).
    pub relation: String,
    /// Link weight (similarity at creation, by default).
    pub weight: f32,
}

/// One memory record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Unique id.
    pub id: MemoryId,
    /// Namespace that scopes reads.
    pub namespace: Namespace,
    /// What the record is.
    pub kind: RecordKind,
    /// Main text content. AtomRec's original content `c`; never rewritten by
    /// evolution (only `fields` are).
    pub text: String,
    /// Policy-specific fields (keywords, tags, context, category, ...).
    pub fields: BTreeMap<String, serde_json::Value>,
    /// Strength in `[-1, 1]` (MARS) or any signed weight.
    pub strength: f64,
    /// Evidence count.
    pub evidence: u32,
    /// Utility / Q value (RoMeRL, MemRL, TIDE).
    pub utility: f64,
    /// Governance status.
    pub status: RecordStatus,
    /// Optional embedding.
    pub embedding: Option<Embedding>,
    /// Outgoing links.
    pub links: Vec<Link>,
    /// Logical time of creation; kept by every update.
    pub created_at: LogicalTime,
    /// Logical time of the last change.
    pub updated_at: LogicalTime,
}

impl MemoryRecord {
    /// A new record with neutral strength, utility and no links.
    pub fn new(
        id: MemoryId,
        namespace: Namespace,
        kind: RecordKind,
        text: impl Into<String>,
        at: LogicalTime,
    ) -> Self {
        Self {
            id,
            namespace,
            kind,
            text: text.into(),
            fields: BTreeMap::new(),
            strength: 0.0,
            evidence: 0,
            utility: 0.0,
            status: RecordStatus::Active,
            embedding: None,
            links: Vec::new(),
            created_at: at,
            updated_at: at,
        }
    }

    /// Builder: set a field.
    pub fn with_field(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.fields.insert(key.into(), value);
        self
    }

    /// Builder: set the embedding.
    pub fn with_embedding(mut self, e: Embedding) -> Self {
        self.embedding = Some(e);
        self
    }

    /// Builder: set strength.
    pub fn with_strength(mut self, s: f64) -> Self {
        self.strength = s;
        self
    }

    /// A string field, if present and a string.
    pub fn field_str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(|v| v.as_str())
    }
}
