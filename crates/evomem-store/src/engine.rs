//! The engine: validates, applies and logs the ops that policies return.
//!
//! Policies decide; the engine acts. Every applied op is stamped with
//! [`Provenance`] and appended to the op log.

use evomem_core::{LogicalTime, LoggedOp, MemoryState, OpError, PlannedOp, Provenance};
use thiserror::Error;

/// Errors of the store layer.
#[derive(Debug, Error)]
pub enum StoreError {
    /// An op was rejected by validation; nothing was applied.
    #[error("op #{index} ({label}) rejected: {source}")]
    Rejected {
        /// Position of the op in the batch.
        index: usize,
        /// Its lifecycle label.
        label: String,
        /// Why.
        source: OpError,
    },
}

/// Applies ops to a [`MemoryState`] and keeps the op log.
#[derive(Debug, Default)]
pub struct Engine {
    state: MemoryState,
    log: Vec<LoggedOp>,
    deterministic: bool,
}

impl Engine {
    /// An in-memory engine. Wall times are recorded as 0 so that runs are
    /// byte-for-byte reproducible.
    pub fn in_memory() -> Self {
        Self {
            state: MemoryState::new(),
            log: Vec::new(),
            deterministic: true,
        }
    }

    /// Current memory.
    pub fn state(&self) -> &MemoryState {
        &self.state
    }

    /// The op log so far.
    pub fn log(&self) -> &[LoggedOp] {
        &self.log
    }

    /// Validate and apply a batch of ops from `policy` at logical time `at`.
    /// Ops are applied in order; the first rejected op stops the batch and is
    /// reported (ops before it stay applied and logged).
    pub fn apply(
        &mut self,
        policy: &str,
        ops: Vec<PlannedOp>,
        at: LogicalTime,
    ) -> Result<usize, StoreError> {
        let n = ops.len();
        for (index, p) in ops.into_iter().enumerate() {
            self.state
                .apply(&p.op, at)
                .map_err(|source| StoreError::Rejected {
                    index,
                    label: p.label.clone(),
                    source,
                })?;
            let seq = self.log.len() as u64 + 1;
            let wall_time_ms = if self.deterministic { 0 } else { now_ms() };
            self.log.push(LoggedOp {
                seq,
                op: p.op,
                provenance: Provenance {
                    policy: policy.to_string(),
                    label: p.label,
                    reason: p.reason,
                    sources: p.sources,
                    logical_time: at,
                    wall_time_ms,
                },
            });
        }
        Ok(n)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
