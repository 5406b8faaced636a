//! The op log of a running policy, written while it runs.
//!
//! An evaluation used to keep every applied op in memory and write
//! `ops.jsonl.zst` after the policy finished: for AtomRec on ml-100k that is
//! 1.95M ops, 2.5 GB of heap held to the end, and 14 s of serialisation and
//! compression spent after the policy's own work, on the run's critical
//! path. [`OpLogWriter`] instead hands the engine an [`OpSink`] (a bounded
//! channel) and writes each batch on its own thread as it comes, so the log
//! is written on another core while the policy runs and the heap holds at
//! most [`CHANNEL_BATCHES`] batches of it.
//!
//! The lines are the ones the kept log gave ([`log_line`]): embedding vectors
//! are dropped (model id and dimension stay). Ops that carry no embedding
//! (links, field updates, strength changes: nine in ten of AtomRec's) are
//! serialised straight from their types; ops with one go through a JSON
//! value so that the vector can be replaced by its dimension. Both are
//! deterministic, so the log of a run stays byte-identical across runs.

use super::dir::{OpsLogFormat, PolicyDir};
use crate::error::EvalError;
use evomem_core::{LoggedOp, MemoryOp};
use evomem_store::{OpSink, StoreError};
use serde::Serialize;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::Instant;

/// Batches the channel holds before the engine waits for the writer.
pub const CHANNEL_BATCHES: usize = 4096;

/// One line of the op log.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum LogLine {
    /// An op without an embedding, as its type serialises.
    Typed(Box<LoggedOp>),
    /// An op whose embedding vectors were replaced by their dimension.
    Stripped(serde_json::Value),
}

/// The op as written to the op log (module docs).
pub fn log_line(op: LoggedOp) -> LogLine {
    if carries_vector(&op.op) {
        LogLine::Stripped(without_vectors(&op))
    } else {
        LogLine::Typed(Box::new(op))
    }
}

fn carries_vector(op: &MemoryOp) -> bool {
    match op {
        MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => {
            record.embedding.is_some()
        }
        MemoryOp::UpdateFields { embedding, .. } => embedding.is_some(),
        MemoryOp::Link { .. }
        | MemoryOp::Unlink { .. }
        | MemoryOp::AdjustStrength { .. }
        | MemoryOp::SetUtility { .. }
        | MemoryOp::Merge { .. }
        | MemoryOp::Forget { .. }
        | MemoryOp::SetStatus { .. } => false,
    }
}

/// An op as a JSON value with its embedding vectors dropped (the model id
/// and dimension stay), so that the audit log of embedding-heavy policies
/// such as AtomRec stays small. Inspection and explanations never need the
/// vectors.
pub fn without_vectors(op: &LoggedOp) -> serde_json::Value {
    let mut v = serde_json::to_value(op).unwrap_or(serde_json::Value::Null);
    strip_vectors(&mut v);
    v
}

fn strip_vectors(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(serde_json::Value::String(_)), Some(serde_json::Value::Array(vec))) =
                (m.get("model"), m.get("vector"))
            {
                let dim = vec.len();
                m.insert("vector".into(), serde_json::Value::Array(Vec::new()));
                m.insert("dim".into(), serde_json::json!(dim));
                return;
            }
            for x in m.values_mut() {
                strip_vectors(x);
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                strip_vectors(x);
            }
        }
        _ => {}
    }
}

/// The engine's end of the channel.
struct ChannelSink {
    tx: SyncSender<Vec<LoggedOp>>,
    location: String,
}

impl OpSink for ChannelSink {
    fn accept(&mut self, ops: Vec<LoggedOp>) -> Result<(), StoreError> {
        self.tx.send(ops).map_err(|_| StoreError::Sink {
            location: self.location.clone(),
            detail: "the op log writer stopped".into(),
        })
    }
}

/// A policy's op log being written on its own thread (module docs).
pub struct OpLogWriter {
    handle: JoinHandle<Result<f64, EvalError>>,
}

impl OpLogWriter {
    /// Start writing `dir`'s op log in `format`; the returned sink goes to
    /// [`evomem_store::Engine::ephemeral_streaming`]. The log is complete
    /// once the sink is dropped (with the engine) and [`Self::finish`]
    /// returns.
    pub fn start(
        dir: &PolicyDir,
        format: OpsLogFormat,
    ) -> Result<(Self, Box<dyn OpSink>), EvalError> {
        let (tx, rx) = sync_channel::<Vec<LoggedOp>>(CHANNEL_BATCHES);
        let location = dir.file(format.file_name()).display().to_string();
        let dir = dir.clone();
        let handle = std::thread::Builder::new()
            .name("evomem-oplog".into())
            .spawn(move || write_all(&dir, format, rx))
            .map_err(|e| EvalError::io(std::path::Path::new(&location), e))?;
        Ok((Self { handle }, Box::new(ChannelSink { tx, location })))
    }

    /// Wait for the writer (the sink must be dropped first, or this waits
    /// forever) and return the seconds it was busy (serialising,
    /// compressing, writing; not waiting for ops), or its error.
    pub fn finish(self) -> Result<f64, EvalError> {
        match self.handle.join() {
            Ok(r) => r,
            Err(_) => Err(EvalError::Config {
                field: "ops-log".into(),
                message: "the op log writer thread panicked".into(),
            }),
        }
    }
}

fn write_all(
    dir: &PolicyDir,
    format: OpsLogFormat,
    rx: Receiver<Vec<LoggedOp>>,
) -> Result<f64, EvalError> {
    let busy = std::cell::Cell::new(0.0f64);
    let mut mark = Instant::now();
    // Time spent blocked on the channel is not the writer's work.
    let lines = std::iter::from_fn(|| {
        busy.set(busy.get() + mark.elapsed().as_secs_f64());
        let next = rx.recv().ok();
        mark = Instant::now();
        next
    })
    .flatten()
    .map(log_line);
    dir.write_ops(format, lines)?;
    busy.set(busy.get() + mark.elapsed().as_secs_f64());
    Ok(busy.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::{
        Embedding, LogicalTime, MemoryId, MemoryRecord, Namespace, Provenance, RecordKind,
    };

    fn logged(seq: u64, op: MemoryOp) -> LoggedOp {
        LoggedOp {
            seq,
            op,
            provenance: Provenance {
                policy: "p".into(),
                label: "l".into(),
                reason: "r".into(),
                sources: vec![LogicalTime(1)],
                logical_time: LogicalTime(3),
                wall_time_ms: 0,
            },
        }
    }

    #[test]
    fn lines_drop_vectors_keep_dimensions_and_read_back_as_the_op() {
        let mut record = MemoryRecord::new(
            MemoryId::new("a"),
            Namespace::user("u1"),
            RecordKind::Atom,
            "text",
            LogicalTime(3),
        );
        record.embedding = Some(Embedding {
            model: "m".into(),
            vector: vec![0.6, 0.8],
        });
        let create = logged(1, MemoryOp::Create { record });
        let link = logged(
            2,
            MemoryOp::Link {
                from: MemoryId::new("a"),
                to: MemoryId::new("b"),
                relation: "shared topic".into(),
                weight: 0.929_022_55,
            },
        );
        let c = serde_json::to_string(&log_line(create.clone())).unwrap();
        assert!(
            c.contains(r#""vector":[]"#) && c.contains(r#""dim":2"#),
            "{c}"
        );
        let l = serde_json::to_string(&log_line(link.clone())).unwrap();
        // A typed line reads back as exactly the op.
        let back: LoggedOp = serde_json::from_str(&l).unwrap();
        assert_eq!(back, link);
        // A stripped line reads back as the op without its vector.
        let back: LoggedOp = serde_json::from_str(&c).unwrap();
        let MemoryOp::Create { record } = back.op else {
            panic!("not a create: {c}");
        };
        assert_eq!(record.embedding.map(|e| e.vector.len()), Some(0));
    }
}
