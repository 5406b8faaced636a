//! Memory operations: the only way memory changes.
//!
//! Policies return [`PlannedOp`]s; the engine stamps them with [`Provenance`],
//! validates and applies them (see [`crate::MemoryState::apply`]), and appends
//! them to the op log as [`LoggedOp`]s. Replaying the log from the start gives
//! the live state exactly, which is what time travel and crash recovery use.

use crate::ids::{LogicalTime, MemoryId};
use crate::memory::{Embedding, MemoryRecord, RecordStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One change to memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MemoryOp {
    /// Insert a new record. Fails if the id exists.
    Create {
        /// The record.
        record: MemoryRecord,
    },
    /// Field-level update. `created_at` is always kept (AtomRec).
    UpdateFields {
        /// Target.
        id: MemoryId,
        /// Fields to set (a JSON `null` removes the field).
        fields: BTreeMap<String, serde_json::Value>,
        /// New main text, if it changes (AtomRec evolution never sets this).
        text: Option<String>,
        /// New embedding, if it changes.
        embedding: Option<Embedding>,
    },
    /// Add (or re-describe) a link `from -> to`.
    Link {
        /// Source.
        from: MemoryId,
        /// Target.
        to: MemoryId,
        /// Relation description.
        relation: String,
        /// Weight.
        weight: f32,
    },
    /// Remove the link `from -> to`.
    Unlink {
        /// Source.
        from: MemoryId,
        /// Target.
        to: MemoryId,
    },
    /// Add `delta` to strength (clamped to `[-1, 1]`) and `evidence_delta` to
    /// evidence. MARS boost is a positive delta, demote a negative one.
    AdjustStrength {
        /// Target.
        id: MemoryId,
        /// Strength change.
        delta: f64,
        /// Evidence change.
        evidence_delta: u32,
    },
    /// Set the utility / Q value.
    SetUtility {
        /// Target.
        id: MemoryId,
        /// New value.
        value: f64,
    },
    /// Merge `sources` into `into`: evidence is summed, links are re-pointed,
    /// sources are removed. `text` and `strength` replace the survivor's when given.
    Merge {
        /// Surviving record.
        into: MemoryId,
        /// Records absorbed and removed.
        sources: Vec<MemoryId>,
        /// New text for the survivor.
        text: Option<String>,
        /// New strength for the survivor.
        strength: Option<f64>,
    },
    /// Remove a record and every link pointing at it.
    Forget {
        /// Target.
        id: MemoryId,
    },
    /// Replace the content of a slot, inheriting its utility (RoMeRL). The new
    /// record keeps the old id, namespace, utility and `created_at`.
    Replace {
        /// Slot.
        id: MemoryId,
        /// New content; its id, namespace, utility and `created_at` are ignored.
        record: MemoryRecord,
    },
    /// Set the governance status.
    SetStatus {
        /// Target.
        id: MemoryId,
        /// New status.
        status: RecordStatus,
    },
}

impl MemoryOp {
    /// Short name of the variant, for logs and reports.
    pub fn name(&self) -> &'static str {
        match self {
            MemoryOp::Create { .. } => "create",
            MemoryOp::UpdateFields { .. } => "update_fields",
            MemoryOp::Link { .. } => "link",
            MemoryOp::Unlink { .. } => "unlink",
            MemoryOp::AdjustStrength { .. } => "adjust_strength",
            MemoryOp::SetUtility { .. } => "set_utility",
            MemoryOp::Merge { .. } => "merge",
            MemoryOp::Forget { .. } => "forget",
            MemoryOp::Replace { .. } => "replace",
            MemoryOp::SetStatus { .. } => "set_status",
        }
    }

    /// The record this op primarily targets.
    pub fn target(&self) -> &MemoryId {
        match self {
            MemoryOp::Create { record } => &record.id,
            MemoryOp::UpdateFields { id, .. }
            | MemoryOp::AdjustStrength { id, .. }
            | MemoryOp::SetUtility { id, .. }
            | MemoryOp::Forget { id }
            | MemoryOp::Replace { id, .. }
            | MemoryOp::SetStatus { id, .. } => id,
            MemoryOp::Link { from, .. } | MemoryOp::Unlink { from, .. } => from,
            MemoryOp::Merge { into, .. } => into,
        }
    }

    /// Every record id the op reads or writes: its target, a link's other
    /// end, a merge's sources, and the targets of the links a new record
    /// brings. [`crate::NamespaceView`] copies these (and only these) from
    /// the shared state before it applies the op.
    pub fn ids(&self) -> Vec<&MemoryId> {
        match self {
            MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => {
                let mut v = vec![self.target()];
                v.extend(record.links.iter().map(|l| &l.target));
                v
            }
            MemoryOp::Link { from, to, .. } | MemoryOp::Unlink { from, to } => vec![from, to],
            MemoryOp::Merge { into, sources, .. } => {
                let mut v = vec![into];
                v.extend(sources.iter());
                v
            }
            MemoryOp::UpdateFields { id, .. }
            | MemoryOp::AdjustStrength { id, .. }
            | MemoryOp::SetUtility { id, .. }
            | MemoryOp::Forget { id }
            | MemoryOp::SetStatus { id, .. } => vec![id],
        }
    }
}

/// An op as a policy proposes it: the op, a lifecycle label and the reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedOp {
    /// The change.
    pub op: MemoryOp,
    /// Lifecycle label in the policy's vocabulary (`extract`, `boost`,
    /// `demote`, `merge`, `forget`, `synthesize`, `link`, `evolve`, `q_update`, ...).
    pub label: String,
    /// Why, in words.
    pub reason: String,
    /// Logical times of the interactions / feedback that caused it.
    pub sources: Vec<LogicalTime>,
}

impl PlannedOp {
    /// Convenience constructor.
    pub fn new(op: MemoryOp, label: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            op,
            label: label.into(),
            reason: reason.into(),
            sources: Vec::new(),
        }
    }

    /// Builder: set the source events.
    pub fn with_sources(mut self, sources: Vec<LogicalTime>) -> Self {
        self.sources = sources;
        self
    }
}

/// Who, why, when: stamped by the engine on every op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Policy name.
    pub policy: String,
    /// Lifecycle label.
    pub label: String,
    /// Reason text.
    pub reason: String,
    /// Source interactions.
    pub sources: Vec<LogicalTime>,
    /// Logical time at which the op was applied.
    pub logical_time: LogicalTime,
    /// Wall-clock time in milliseconds since the Unix epoch (0 in deterministic runs).
    pub wall_time_ms: i64,
}

/// One entry of the op log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedOp {
    /// Sequence number in the log, starting at 1, gap-free.
    pub seq: u64,
    /// The change.
    pub op: MemoryOp,
    /// Its provenance.
    pub provenance: Provenance,
}
