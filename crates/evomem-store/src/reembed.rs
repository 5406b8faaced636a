//! Re-embedding an op log: every embedding the log carries replaced by one
//! of another model, made from the text it was made from, with nothing
//! else changed.
//!
//! Vectors of two models are not comparable, so a store whose memories
//! were embedded by one model cannot simply start embedding with another
//! (the service refuses to mix them in one index). Moving a store to a new
//! embedder rewrites its log: each op that sets an embedding (a `Create`
//! or `Replace` whose record has one, an `UpdateFields` with one) gets the
//! new model's vector of the text the old vector was made from. That text
//! is the op's own (the record's, or the update's new text) or, for an
//! update that re-embeds without changing the text, the record's text at
//! that point of the log, which [`embedded_texts`] and [`reembedded`]
//! follow through `Create`, `Replace`, `UpdateFields` and `Merge` (a merge
//! that changes the survivor's text keeps its old vector, and so its old
//! source text). The rewritten log keeps every op, its sequence number and
//! its provenance, so history and time travel read as before.
//!
//! The caller embeds: [`embedded_texts`] lists the texts to embed (each
//! once), [`reembedded`] writes the new log from what the caller made of
//! them. [`Reembedder`] does the same a part of the log at a time (the
//! service's staged swap writes each part to a staging area as it goes,
//! then rewrites only the ops appended meanwhile, `texts_of` naming what
//! they need embedded). No I/O here.

use crate::error::StoreError;
use crate::rewrite::{ForgetReport, RewritePlan};
use crate::store::Snapshot;
use evomem_core::{Embedding, LoggedOp, MemoryId, MemoryOp, MemoryState};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Follows each record's current text through the log, to name the text an
/// embedding set by an op was made from.
#[derive(Default)]
struct Texts {
    current: HashMap<MemoryId, String>,
}

impl Texts {
    /// The text the embedding `op` sets was made from (`None` when the op
    /// sets no embedding), then take in the op's effect on texts.
    fn step(&mut self, op: &MemoryOp) -> Option<String> {
        match op {
            MemoryOp::Create { record } => {
                self.current.insert(record.id.clone(), record.text.clone());
                record.embedding.as_ref().map(|_| record.text.clone())
            }
            MemoryOp::Replace { id, record } => {
                self.current.insert(id.clone(), record.text.clone());
                record.embedding.as_ref().map(|_| record.text.clone())
            }
            MemoryOp::UpdateFields {
                id,
                text,
                embedding,
                ..
            } => {
                if let Some(t) = text {
                    self.current.insert(id.clone(), t.clone());
                }
                embedding
                    .as_ref()
                    .map(|_| self.current.get(id).cloned().unwrap_or_default())
            }
            MemoryOp::Merge {
                into,
                sources,
                text,
                ..
            } => {
                for s in sources {
                    self.current.remove(s);
                }
                if let Some(t) = text {
                    // The survivor's vector stays the one of its old text:
                    // `current` names the text, not the vector's source, so
                    // an update that later re-embeds without a new text
                    // embeds this one, as the service would.
                    self.current.insert(into.clone(), t.clone());
                }
                None
            }
            MemoryOp::Forget { id } => {
                self.current.remove(id);
                None
            }
            _ => None,
        }
    }
}

/// Every text an embedding in `log` was made from, each once, in the order
/// first met.
pub fn embedded_texts(log: &[LoggedOp]) -> Vec<String> {
    let mut texts = Texts::default();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for o in log {
        if let Some(t) = texts.step(&o.op) {
            if seen.insert(t.clone()) {
                out.push(t);
            }
        }
    }
    out
}

/// A run of rewritten ops ([`Reembedder::push`]) and the snapshot due
/// after its last op, if one is.
#[derive(Debug, Clone)]
pub struct Piece {
    /// The rewritten ops, in log order.
    pub ops: Vec<LoggedOp>,
    /// The state after the last of `ops`, when a snapshot is due there
    /// (the engine's rule, [`crate::engine`]).
    pub snapshot: Option<Snapshot>,
}

/// [`reembedded`] a part of the log at a time, so that a caller can write
/// each part out (a staging area, [`crate::MemoryStore::staging`]) instead
/// of holding the old log, the new one and their snapshots at once. Feed
/// it the log in order, from its first op.
pub struct Reembedder {
    texts: Texts,
    state: MemoryState,
    model: String,
    snapshot_every: u64,
    last_snapshot_seq: u64,
    edited: usize,
    /// Records changed since [`Reembedder::take_touched`] last ran.
    touched: BTreeSet<MemoryId>,
}

impl Reembedder {
    /// A rewrite of a log from its start to `model`'s vectors, with a
    /// snapshot at least every `snapshot_every` ops (0: none).
    pub fn new(model: &str, snapshot_every: u64) -> Self {
        Self {
            texts: Texts::default(),
            state: MemoryState::new(),
            model: model.to_string(),
            snapshot_every,
            last_snapshot_seq: 0,
            edited: 0,
            touched: BTreeSet::new(),
        }
    }

    /// The texts the embeddings of `ops`, the next ops of the log, were
    /// made from, each once, in the order first met; nothing changes.
    pub fn texts_of(&self, ops: &[LoggedOp]) -> Vec<String> {
        // The texts of the records these ops concern, and nothing else:
        // stepping through them gives what `push` will give.
        let mut texts = Texts::default();
        for o in ops {
            let mut ids = vec![o.op.target()];
            if let MemoryOp::Merge { sources, .. } = &o.op {
                ids.extend(sources);
            }
            for id in ids {
                if let Some(t) = self.texts.current.get(id) {
                    texts.current.insert(id.clone(), t.clone());
                }
            }
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for o in ops {
            if let Some(t) = texts.step(&o.op) {
                if seen.insert(t.clone()) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// Rewrite the next ops of the log (module docs): every embedding
    /// replaced by `vector` of its text, replayed (every op must replay,
    /// as it did before); cut into pieces at the snapshots due. `vector`
    /// returning `None` is an error naming the op, with this rewrite then
    /// unusable.
    pub fn push(
        &mut self,
        ops: &[LoggedOp],
        vector: impl Fn(&str) -> Option<Vec<f32>>,
    ) -> Result<Vec<Piece>, StoreError> {
        let mut pieces = Vec::new();
        let mut out = Vec::new();
        for o in ops {
            let mut op = o.op.clone();
            if let Some(text) = self.texts.step(&o.op) {
                let v = vector(&text).ok_or_else(|| StoreError::Corrupt {
                    location: "re-embedding".to_string(),
                    detail: format!("no {} vector for the text of op seq {}", self.model, o.seq),
                })?;
                let new = Embedding {
                    model: self.model.clone(),
                    vector: v,
                };
                match &mut op {
                    MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => {
                        record.embedding = Some(new);
                    }
                    MemoryOp::UpdateFields { embedding, .. } => *embedding = Some(new),
                    _ => {}
                }
                self.edited += 1;
            }
            self.touched
                .extend(crate::engine::touched_ids(&self.state, &op));
            self.state
                .apply(&op, o.provenance.logical_time)
                .map_err(|source| StoreError::Replay {
                    location: "re-embedding".to_string(),
                    seq: o.seq,
                    source,
                })?;
            out.push(LoggedOp {
                seq: o.seq,
                op,
                provenance: o.provenance.clone(),
            });
            if crate::rewrite::snapshot_due(
                self.snapshot_every,
                o.seq,
                self.last_snapshot_seq,
                &self.state,
            ) {
                self.last_snapshot_seq = o.seq;
                pieces.push(Piece {
                    ops: std::mem::take(&mut out),
                    snapshot: Some(Snapshot {
                        seq: o.seq,
                        at: o.provenance.logical_time,
                        state: self.state.clone(),
                    }),
                });
            }
        }
        if !out.is_empty() {
            pieces.push(Piece {
                ops: out,
                snapshot: None,
            });
        }
        Ok(pieces)
    }

    /// The state after the ops pushed so far.
    pub fn state(&self) -> &MemoryState {
        &self.state
    }

    /// The state after the ops pushed so far, taken out.
    pub fn into_state(self) -> MemoryState {
        self.state
    }

    /// Ops whose embedding was replaced so far.
    pub fn edited(&self) -> usize {
        self.edited
    }

    /// The records the ops pushed since the last call changed (created,
    /// edited, removed, or linking to one removed), to write them to a
    /// store from [`Reembedder::state`]: present there, or deleted.
    pub fn take_touched(&mut self) -> BTreeSet<MemoryId> {
        std::mem::take(&mut self.touched)
    }

    /// Seq of the last snapshot made (0: none yet).
    pub fn last_snapshot_seq(&self) -> u64 {
        self.last_snapshot_seq
    }
}

/// `log` with every embedding replaced by `model`'s vector of the text it
/// was made from, as `vector` gives it; replayed from scratch (every op
/// must replay, as it did before) and re-snapshotted by the engine's rule
/// with `snapshot_every`. `vector` returning `None` for a text is an error
/// naming the op: the caller embeds every text [`embedded_texts`] lists.
/// The whole log at once; [`Reembedder`] goes a part at a time.
pub fn reembedded(
    log: &[LoggedOp],
    snapshot_every: u64,
    model: &str,
    vector: impl Fn(&str) -> Option<Vec<f32>>,
) -> Result<RewritePlan, StoreError> {
    let mut r = Reembedder::new(model, snapshot_every);
    let mut out = Vec::with_capacity(log.len());
    let mut snapshots = Vec::new();
    for piece in r.push(log, vector)? {
        out.extend(piece.ops);
        snapshots.extend(piece.snapshot);
    }
    Ok(RewritePlan {
        report: ForgetReport {
            ops_before: log.len(),
            ops_after: out.len(),
            ops_edited: r.edited(),
            ..ForgetReport::default()
        },
        log: out,
        state: r.into_state(),
        snapshots,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use evomem_core::{LogicalTime, MemoryRecord, Namespace, Provenance, RecordKind};
    use std::collections::BTreeMap;

    fn logged(seq: u64, op: MemoryOp) -> LoggedOp {
        LoggedOp {
            seq,
            op,
            provenance: Provenance {
                policy: "test".into(),
                label: "test".into(),
                reason: String::new(),
                sources: Vec::new(),
                logical_time: LogicalTime(seq),
                wall_time_ms: 0,
            },
        }
    }

    fn emb(model: &str, x: f32) -> Option<Embedding> {
        Some(Embedding {
            model: model.into(),
            vector: vec![x, 0.0],
        })
    }

    fn record(id: &str, text: &str, e: Option<Embedding>) -> MemoryRecord {
        let mut r = MemoryRecord::new(
            MemoryId::new(id),
            Namespace::user("u"),
            RecordKind::Custom("memory".into()),
            text,
            LogicalTime(0),
        );
        r.embedding = e;
        r
    }

    /// A vector that names its text, to see which text each op was given.
    fn vec_of(text: &str) -> Vec<f32> {
        vec![text.len() as f32, text.bytes().map(f32::from).sum()]
    }

    fn log() -> Vec<LoggedOp> {
        vec![
            logged(
                1,
                MemoryOp::Create {
                    record: record("a", "alpha", emb("old", 1.0)),
                },
            ),
            logged(
                2,
                MemoryOp::Create {
                    record: record("b", "beta", emb("old", 2.0)),
                },
            ),
            logged(
                3,
                MemoryOp::Create {
                    record: record("n", "no vector", None),
                },
            ),
            // A new text with its vector.
            logged(
                4,
                MemoryOp::UpdateFields {
                    id: MemoryId::new("a"),
                    fields: BTreeMap::new(),
                    text: Some("alpha two".into()),
                    embedding: emb("old", 3.0),
                },
            ),
            // A merge changes b's text but not its vector...
            logged(
                5,
                MemoryOp::Merge {
                    into: MemoryId::new("b"),
                    sources: vec![MemoryId::new("n")],
                    text: Some("beta merged".into()),
                    strength: None,
                },
            ),
            // ... which an update without a text then re-embeds.
            logged(
                6,
                MemoryOp::UpdateFields {
                    id: MemoryId::new("b"),
                    fields: BTreeMap::new(),
                    text: None,
                    embedding: emb("old", 4.0),
                },
            ),
            logged(
                7,
                MemoryOp::Replace {
                    id: MemoryId::new("a"),
                    record: record("a", "alpha three", emb("old", 5.0)),
                },
            ),
        ]
    }

    /// Each embedding gets the vector of the text it was made from; every
    /// other part of every op, and the seqs, stay as they were; snapshots
    /// follow the engine's rule (at least `max(every, live records)` ops
    /// apart).
    #[test]
    fn every_embedding_is_replaced_by_the_vector_of_its_own_text() {
        let log = log();
        assert_eq!(
            embedded_texts(&log),
            ["alpha", "beta", "alpha two", "beta merged", "alpha three"]
        );
        let plan = reembedded(&log, 3, "new", |t| Some(vec_of(t))).unwrap();
        assert_eq!(plan.log.len(), log.len());
        assert_eq!(plan.report.ops_edited, 5);
        let texts = [
            "alpha",
            "beta",
            "",
            "alpha two",
            "",
            "beta merged",
            "alpha three",
        ];
        for ((new, old), text) in plan.log.iter().zip(&log).zip(texts) {
            assert_eq!(new.seq, old.seq);
            assert_eq!(new.provenance, old.provenance);
            let e = match &new.op {
                MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => {
                    record.embedding.clone()
                }
                MemoryOp::UpdateFields { embedding, .. } => embedding.clone(),
                _ => None,
            };
            match e {
                Some(e) => {
                    assert_eq!(e.model, "new");
                    assert_eq!(e.vector, vec_of(text), "op {}", new.seq);
                }
                None => assert!(text.is_empty() || new.seq == 3, "op {}", new.seq),
            }
        }
        // The state is the replay of the new log, every vector the new model's.
        let mut replayed = MemoryState::new();
        crate::store::replay_into(&mut replayed, &plan.log, "test").unwrap();
        assert_eq!(replayed, plan.state);
        assert!(plan
            .state
            .iter_all()
            .filter_map(|r| r.embedding.as_ref())
            .all(|e| e.model == "new"));
        assert_eq!(
            plan.snapshots.iter().map(|s| s.seq).collect::<Vec<_>>(),
            [3, 6]
        );
    }

    /// The log rewritten a part at a time gives what the whole rewrite
    /// gives, ops, snapshots and state; `texts_of` names, before a part is
    /// pushed, exactly the texts its embeddings need (the update of op 6
    /// needs the text the merge of op 5, in an earlier part, gave).
    #[test]
    fn a_log_rewritten_in_parts_equals_the_whole_rewrite() {
        let log = log();
        let whole = reembedded(&log, 3, "new", |t| Some(vec_of(t))).unwrap();
        for cut in 0..=log.len() {
            let mut r = Reembedder::new("new", 3);
            let mut ops = Vec::new();
            let mut snaps = Vec::new();
            for part in [&log[..cut], &log[cut..]] {
                let want = r.texts_of(part);
                let asked = std::cell::RefCell::new(Vec::new());
                for p in r
                    .push(part, |t| {
                        asked.borrow_mut().push(t.to_string());
                        Some(vec_of(t))
                    })
                    .unwrap()
                {
                    ops.extend(p.ops);
                    snaps.extend(p.snapshot);
                }
                let mut asked = asked.into_inner();
                asked.dedup();
                let mut want_sorted = want.clone();
                want_sorted.sort();
                asked.sort();
                asked.dedup();
                assert_eq!(asked, want_sorted, "cut {cut}");
            }
            assert_eq!(ops, whole.log, "cut {cut}");
            assert_eq!(snaps, whole.snapshots, "cut {cut}");
            assert_eq!(r.state(), &whole.state, "cut {cut}");
            assert_eq!(r.edited(), 5);
        }
    }

    /// A text the caller did not embed is an error naming the op, and
    /// nothing is half-rewritten.
    #[test]
    fn a_missing_vector_is_an_error_naming_the_op() {
        let e = reembedded(&log(), 0, "new", |t| {
            (t != "beta merged").then(|| vec_of(t))
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("op seq 6"), "{e}");
    }
}
