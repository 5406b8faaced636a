//! [`InMemoryStore`]: the store that keeps everything in process memory.
//!
//! The simple, always-available implementation of [`MemoryStore`] (like
//! tantivy's `RamDirectory`): used by evaluation runs, tests, and as the
//! baseline the benchmark compares the database stores against. "Durable"
//! here means "in this process".

use crate::error::StoreError;
use crate::store::{Commit, MemoryStore, Snapshot};
use evomem_core::{LoggedOp, LogicalTime, MemoryId, MemoryRecord, MemoryState};
use std::collections::BTreeMap;

/// Op log, snapshots and records held in memory.
#[derive(Debug, Clone, Default)]
pub struct InMemoryStore {
    ops: Vec<LoggedOp>,
    snapshots: BTreeMap<u64, (LogicalTime, MemoryState)>,
    records: BTreeMap<MemoryId, MemoryRecord>,
    /// Write keys ([`Commit::keys`]) and their request digests.
    keys: BTreeMap<String, [u8; 32]>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl MemoryStore for InMemoryStore {
    fn location(&self) -> String {
        "memory".to_string()
    }

    fn commit(&mut self, c: &Commit<'_>) -> Result<(), StoreError> {
        crate::store::check_gap_free(c.ops, self.ops.len() as u64 + 1, &self.location())?;
        let mut seen = std::collections::BTreeSet::new();
        for k in c.keys {
            if self.keys.contains_key(&k.key) || !seen.insert(k.key.as_str()) {
                return Err(StoreError::DuplicateKey {
                    location: self.location(),
                    key: k.key.clone(),
                });
            }
        }
        for k in c.keys {
            self.keys.insert(k.key.clone(), k.request);
        }
        self.ops.extend_from_slice(c.ops);
        for id in c.deletes {
            self.records.remove(id);
        }
        for r in c.upserts {
            self.records.insert(r.id.clone(), (*r).clone());
        }
        if let Some((seq, at, state)) = c.snapshot {
            self.snapshots.insert(seq, (at, state.clone()));
        }
        Ok(())
    }

    fn committed_key(&mut self, key: &str) -> Result<Option<[u8; 32]>, StoreError> {
        Ok(self.keys.get(key).copied())
    }

    fn load_ops(&mut self, after: u64, upto: u64) -> Result<Vec<LoggedOp>, StoreError> {
        let lo = (after as usize).min(self.ops.len());
        let hi = (upto as usize).min(self.ops.len()).max(lo);
        Ok(self.ops[lo..hi].to_vec())
    }

    fn last_seq(&mut self) -> Result<u64, StoreError> {
        Ok(self.ops.len() as u64)
    }

    fn prefix_end(&mut self, t: LogicalTime) -> Result<u64, StoreError> {
        Ok(self
            .ops
            .iter()
            .position(|o| o.provenance.logical_time > t)
            .unwrap_or(self.ops.len()) as u64)
    }

    fn latest_snapshot(&mut self, upto: u64) -> Result<Option<Snapshot>, StoreError> {
        Ok(self
            .snapshots
            .range(..=upto)
            .next_back()
            .map(|(seq, (at, state))| Snapshot {
                seq: *seq,
                at: *at,
                state: state.clone(),
            }))
    }

    fn snapshot_seqs(&mut self) -> Result<Vec<u64>, StoreError> {
        Ok(self.snapshots.keys().copied().collect())
    }

    fn load_records(&mut self) -> Result<Vec<MemoryRecord>, StoreError> {
        Ok(self.records.values().cloned().collect())
    }

    fn replace_all(
        &mut self,
        log: &[LoggedOp],
        state: &MemoryState,
        snapshots: &[Snapshot],
    ) -> Result<(), StoreError> {
        crate::store::check_gap_free(log, 1, &self.location())?;
        self.ops = log.to_vec();
        self.records = state
            .iter_all()
            .map(|r| (r.id.clone(), r.clone()))
            .collect();
        self.snapshots = snapshots
            .iter()
            .map(|s| (s.seq, (s.at, s.state.clone())))
            .collect();
        Ok(())
    }
}
