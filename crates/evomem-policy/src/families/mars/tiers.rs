//! The three MARS tiers as `MemoryState` records, and a per-user working view.
//!
//! All of a user's MARS memory lives in namespace `user:<token>`:
//!
//! | record | kind | id |
//! |---|---|---|
//! | event (FIFO of L_max raw signals, §3.2) | `Event` | `user:<t>:ev:<logical time>` |
//! | preference chunk (category, text, strength, evidence, provenance) | `PreferenceChunk` | `user:<t>:chunk:<time>:<k>` |
//! | profile narrative (§3.2) | `Profile` | `user:<t>:profile` |
//! | bookkeeping (pending watermark, mutations since synthesis) | `Custom("mars_meta")` | `user:<t>:meta` |
//!
//! *Pending* (§3.2, E_pending ⊆ E): an event is pending when its logical time
//! is above the meta record's `processed_through` watermark. A lifecycle round
//! moves the watermark with one `pending`-labelled op instead of rewriting
//! every event record.
//!
//! [`UserView`] is a copy-on-write view of a user's records
//! ([`NamespaceView`]): every op the policy plans is applied there first, and
//! only the records those ops touch are copied out of the shared state (a full
//! copy per observed signal grew with the user's history). Later decisions in
//! the same call therefore see earlier ones, and every returned op is known to be valid
//! in order (the engine applies them between calls).

use super::polarity::Polarity;
use evomem_core::{
    LogicalTime, MemoryId, MemoryOp, MemoryRecord, MemoryState, Namespace, NamespaceView,
    PlannedOp, PolicyError, RecordKind, RecordSource,
};
use serde_json::json;
use std::collections::BTreeMap;

/// Kind name of the bookkeeping record.
pub const META_KIND: &str = "mars_meta";

/// Id of a user's event at logical time `t`.
pub fn event_id(user: &str, t: LogicalTime) -> MemoryId {
    MemoryId::new(format!("user:{user}:ev:{:012}", t.0))
}
/// Id of the `k`-th chunk created at logical time `t`.
pub fn chunk_id(user: &str, t: LogicalTime, k: usize) -> MemoryId {
    MemoryId::new(format!("user:{user}:chunk:{:012}:{k:03}", t.0))
}
/// Id of the user's profile.
pub fn profile_id(user: &str) -> MemoryId {
    MemoryId::new(format!("user:{user}:profile"))
}
/// Id of the user's bookkeeping record.
pub fn meta_id(user: &str) -> MemoryId {
    MemoryId::new(format!("user:{user}:meta"))
}

/// A preference chunk as the lifecycle sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// Record id.
    pub id: MemoryId,
    /// Category name.
    pub category: String,
    /// Text ("Film-Noir", "postmodern christianity", ...).
    pub text: String,
    /// Facet key (`axis index`, value) when the chunk came from metadata.
    pub key: Option<(usize, String)>,
    /// Strength in [−1, 1].
    pub strength: f64,
    /// Evidence count.
    pub evidence: u32,
}

/// An event as the lifecycle sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventView {
    /// Record id.
    pub id: MemoryId,
    /// Logical time of the signal.
    pub time: LogicalTime,
    /// Item index.
    pub item: u32,
    /// Polarity (stored as +1, 0, −1).
    pub polarity: Polarity,
    /// Text (action and item summary).
    pub text: String,
}

/// One user's records as a copy-on-write view of the shared state
/// ([`NamespaceView`]: a record is copied only when a planned op touches
/// it), plus the ops planned so far.
#[derive(Debug)]
pub struct UserView<'a> {
    /// User token.
    pub user: String,
    /// Namespace `user:<token>`.
    pub ns: Namespace,
    state: NamespaceView<'a>,
    ops: Vec<PlannedOp>,
    /// Ops planned, by label.
    pub counts: BTreeMap<String, u64>,
}

impl<'a> UserView<'a> {
    /// A view of `user`'s records in `memory`; nothing is copied yet.
    pub fn load(memory: &'a MemoryState, user: &str) -> Result<Self, PolicyError> {
        let ns = Namespace::user(user);
        let state = NamespaceView::new(memory, ns.clone());
        Ok(Self {
            user: user.to_string(),
            ns,
            state,
            ops: Vec::new(),
            counts: BTreeMap::new(),
        })
    }

    /// Plan `op`: apply it to the view (validating it) and queue it.
    pub fn emit(
        &mut self,
        op: MemoryOp,
        label: &str,
        reason: impl Into<String>,
        sources: Vec<LogicalTime>,
        at: LogicalTime,
    ) -> Result<(), PolicyError> {
        self.state.apply(&op, at)?;
        *self.counts.entry(label.to_string()).or_insert(0) += 1;
        self.ops
            .push(PlannedOp::new(op, label, reason).with_sources(sources));
        Ok(())
    }

    /// Take over ops planned earlier on another view of this user (and not
    /// yet applied by the engine): apply them here and queue them in front of
    /// what this view plans next. They were counted when first planned, so
    /// [`UserView::counts`] is left alone.
    pub fn adopt(&mut self, ops: Vec<PlannedOp>, at: LogicalTime) -> Result<(), PolicyError> {
        for op in ops {
            self.state.apply(&op.op, at)?;
            self.ops.push(op);
        }
        Ok(())
    }

    /// The view's records, with every planned op applied.
    pub fn state(&self) -> &NamespaceView<'a> {
        &self.state
    }

    /// The planned ops, in application order.
    pub fn into_ops(self) -> (Vec<PlannedOp>, BTreeMap<String, u64>) {
        (self.ops, self.counts)
    }

    /// Number of ops planned so far.
    pub fn n_ops(&self) -> usize {
        self.ops.len()
    }

    /// A record of the view.
    pub fn get(&self, id: &MemoryId) -> Option<&MemoryRecord> {
        self.state.get(id)
    }

    /// Events, oldest first.
    pub fn events(&self) -> Vec<EventView> {
        events_in(&self.state, &self.ns)
    }

    /// Chunks in id order.
    pub fn chunks(&self) -> Vec<Chunk> {
        chunks_in(&self.state, &self.ns)
    }

    /// Pending watermark: events with time above it are pending.
    pub fn processed_through(&self) -> Option<u64> {
        processed_through(&self.state, &self.user)
    }

    /// Pending events, oldest first.
    pub fn pending(&self) -> Vec<EventView> {
        let w = self.processed_through();
        self.events()
            .into_iter()
            .filter(|e| w.is_none_or(|w| e.time.0 > w))
            .collect()
    }

    /// Mutations since the last synthesis.
    pub fn mutations(&self) -> u32 {
        meta_u64(&self.state, &self.user, "mutations_since_synthesis") as u32
    }

    /// Create the meta record if missing.
    pub fn ensure_meta(&mut self, at: LogicalTime) -> Result<(), PolicyError> {
        let id = meta_id(&self.user);
        if self.state.get(&id).is_some() {
            return Ok(());
        }
        let rec = MemoryRecord::new(
            id,
            self.ns.clone(),
            RecordKind::Custom(META_KIND.into()),
            "MARS bookkeeping: pending watermark and mutation counter",
            at,
        )
        .with_field("mutations_since_synthesis", json!(0))
        .with_field("syntheses", json!(0));
        self.emit(
            MemoryOp::Create { record: rec },
            "pending",
            "first signal of this user",
            Vec::new(),
            at,
        )
    }

    /// Set meta fields.
    pub fn set_meta(
        &mut self,
        fields: BTreeMap<String, serde_json::Value>,
        reason: &str,
        at: LogicalTime,
    ) -> Result<(), PolicyError> {
        self.ensure_meta(at)?;
        self.emit(
            MemoryOp::UpdateFields {
                id: meta_id(&self.user),
                fields,
                text: None,
                embedding: None,
            },
            "pending",
            reason,
            Vec::new(),
            at,
        )
    }

    /// Number of syntheses so far.
    pub fn syntheses(&self) -> u64 {
        meta_u64(&self.state, &self.user, "syntheses")
    }
}

fn meta_u64(state: &dyn RecordSource, user: &str, key: &str) -> u64 {
    state
        .record(&meta_id(user))
        .and_then(|r| r.fields.get(key))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
}

/// The pending watermark of a user in `state`.
pub fn processed_through(state: &dyn RecordSource, user: &str) -> Option<u64> {
    state
        .record(&meta_id(user))
        .and_then(|r| r.fields.get("processed_through"))
        .and_then(serde_json::Value::as_u64)
}

/// Events of a namespace, oldest first.
pub fn events_in(state: &dyn RecordSource, ns: &Namespace) -> Vec<EventView> {
    let mut v: Vec<EventView> = state
        .of_kind(ns, &RecordKind::Event)
        .into_iter()
        .map(|r| EventView {
            id: r.id.clone(),
            time: r.created_at,
            item: r
                .fields
                .get("item_index")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0) as u32,
            polarity: Polarity::from_sign(
                r.fields
                    .get("polarity")
                    .and_then(serde_json::Value::as_i64)
                    .unwrap_or(1),
            ),
            text: r.text.clone(),
        })
        .collect();
    v.sort_by_key(|e| e.time);
    v
}

/// Chunks of a namespace in id order.
pub fn chunks_in(state: &dyn RecordSource, ns: &Namespace) -> Vec<Chunk> {
    state
        .of_kind(ns, &RecordKind::PreferenceChunk)
        .into_iter()
        .map(chunk_from_record)
        .collect()
}

/// The text a chunk is embedded by: "category: text".
pub fn chunk_text(c: &Chunk) -> String {
    format!("{}: {}", c.category, c.text)
}

/// Read a chunk record.
pub fn chunk_from_record(r: &MemoryRecord) -> Chunk {
    let key = match (
        r.fields.get("axis").and_then(serde_json::Value::as_u64),
        r.field_str("value"),
    ) {
        (Some(a), Some(v)) => Some((a as usize, v.to_string())),
        _ => None,
    };
    Chunk {
        id: r.id.clone(),
        category: r.field_str("category").unwrap_or("").to_string(),
        text: r.text.clone(),
        key,
        strength: r.strength,
        evidence: r.evidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(user: &str, t: u64) -> MemoryRecord {
        MemoryRecord::new(
            event_id(user, LogicalTime(t)),
            Namespace::user(user),
            RecordKind::Event,
            format!("rated 4: item {t}"),
            LogicalTime(t),
        )
        .with_field("item_index", json!(t))
        .with_field("polarity", json!(1))
    }

    /// A signal's view copies only what its ops touch, however long the
    /// user's history (issue 16: the view used to copy every record).
    #[test]
    fn a_view_copies_only_the_records_its_ops_touch() {
        let mut memory = MemoryState::new();
        for t in 1..=200 {
            memory
                .apply(
                    &MemoryOp::Create {
                        record: event("u1", t),
                    },
                    LogicalTime(t),
                )
                .unwrap();
        }
        memory
            .apply(
                &MemoryOp::Create {
                    record: event("u2", 7),
                },
                LogicalTime(7),
            )
            .unwrap();
        let mut view = UserView::load(&memory, "u1").unwrap();
        assert_eq!(view.state().touched(), 0);
        assert_eq!(view.events().len(), 200);
        view.ensure_meta(LogicalTime(201)).unwrap();
        view.emit(
            MemoryOp::Forget {
                id: event_id("u1", LogicalTime(1)),
            },
            "forget",
            "FIFO",
            Vec::new(),
            LogicalTime(201),
        )
        .unwrap();
        assert_eq!(view.state().touched(), 1, "the meta record only");
        assert_eq!(view.events().len(), 199);
        assert_eq!(view.events()[0].time, LogicalTime(2));
        assert!(memory.get(&event_id("u1", LogicalTime(1))).is_some());
        assert_eq!(view.n_ops(), 2);
    }
}
