//! Rewriting the op log without one namespace (the right to be forgotten).
//!
//! Forgetting a user must remove more than its live records: the log would
//! otherwise still hold every text the user ever produced, and replay would
//! resurrect them. [`without_namespace`] rewrites the log:
//! - every id ever created in the namespace is "theirs";
//! - an op that targets one of their ids (update, link from or to, merge into
//!   or from ..., forget) is dropped;
//! - an op on someone else's record that merely mentions theirs is edited:
//!   links into their records are stripped from created or replacing records,
//!   and their records are removed from a merge's sources;
//! - the result is replayed from scratch (ops that no longer validate are
//!   dropped too), renumbered gap-free, and re-snapshotted.
//!
//! [`without_records`] does the same for a chosen set of records (the hard
//! delete of one memory): those ids are "theirs", and every op that created,
//! edited or forgot them leaves the log, so that neither the record's
//! current text nor any earlier one survives in history or time travel.

use crate::error::StoreError;
use crate::store::Snapshot;
use evomem_core::{LoggedOp, MemoryId, MemoryOp, MemoryState, Namespace};
use std::collections::BTreeSet;

/// What [`without_namespace`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForgetReport {
    /// The namespace forgotten (empty for [`without_records`]).
    pub namespace: String,
    /// Live records of the namespace before.
    pub records_removed: usize,
    /// Log length before.
    pub ops_before: usize,
    /// Log length after.
    pub ops_after: usize,
    /// Ops dropped because they concerned the namespace.
    pub ops_dropped: usize,
    /// Ops kept but edited (links or merge sources into the namespace removed).
    pub ops_edited: usize,
    /// Ops dropped because they no longer replayed after the rewrite.
    pub ops_invalidated: usize,
}

/// The rewritten log, its final state and snapshots.
#[derive(Debug, Clone)]
pub struct RewritePlan {
    /// New log, seq 1.. gap-free.
    pub log: Vec<LoggedOp>,
    /// State after replaying it.
    pub state: MemoryState,
    /// Snapshots every `snapshot_every` ops.
    pub snapshots: Vec<Snapshot>,
    /// Counts.
    pub report: ForgetReport,
}

/// Rewrite `log` without anything of namespace `ns` (see the module doc).
pub fn without_namespace(
    log: &[LoggedOp],
    ns: &Namespace,
    snapshot_every: u64,
) -> Result<RewritePlan, StoreError> {
    let theirs: BTreeSet<MemoryId> = log
        .iter()
        .filter_map(|o| match &o.op {
            MemoryOp::Create { record } if &record.namespace == ns => Some(record.id.clone()),
            _ => None,
        })
        .collect();
    let mut plan = rewrite(log, &theirs, snapshot_every, |before| {
        before.scan(std::slice::from_ref(ns)).count()
    })?;
    plan.report.namespace = ns.to_string();
    Ok(plan)
}

/// Rewrite `log` without the records `ids`: every op that created, edited,
/// linked or forgot one of them is dropped, and references to them from
/// other records are stripped (see the module doc). Ids that never
/// existed are ignored.
pub fn without_records(
    log: &[LoggedOp],
    ids: &BTreeSet<MemoryId>,
    snapshot_every: u64,
) -> Result<RewritePlan, StoreError> {
    rewrite(log, ids, snapshot_every, |before| {
        ids.iter().filter(|id| before.get(id).is_some()).count()
    })
}

/// The rewrite of [`without_namespace`] and [`without_records`]: `live`
/// counts the removed records that were live in the state before.
fn rewrite(
    log: &[LoggedOp],
    theirs: &BTreeSet<MemoryId>,
    snapshot_every: u64,
    live: impl Fn(&MemoryState) -> usize,
) -> Result<RewritePlan, StoreError> {
    let mut before = MemoryState::new();
    let mut report = ForgetReport {
        ops_before: log.len(),
        ..ForgetReport::default()
    };
    let mut state = MemoryState::new();
    let mut out: Vec<LoggedOp> = Vec::with_capacity(log.len());
    let mut snapshots = Vec::new();
    for o in log {
        // The pre-forget state, to count live records at the end. A stored
        // log that does not replay is inconsistent: refuse to rewrite it
        // (nothing is changed) rather than count from a partial state.
        before
            .apply(&o.op, o.provenance.logical_time)
            .map_err(|source| StoreError::Replay {
                location: "log rewrite".to_string(),
                seq: o.seq,
                source,
            })?;
        let Some((op, edited)) = strip(&o.op, theirs) else {
            report.ops_dropped += 1;
            continue;
        };
        if state.apply(&op, o.provenance.logical_time).is_err() {
            report.ops_invalidated += 1;
            continue;
        }
        if edited {
            report.ops_edited += 1;
        }
        let seq = out.len() as u64 + 1;
        out.push(LoggedOp {
            seq,
            op,
            provenance: o.provenance.clone(),
        });
        if snapshot_due(
            snapshot_every,
            seq,
            snapshots.last().map_or(0, |s: &Snapshot| s.seq),
            &state,
        ) {
            snapshots.push(Snapshot {
                seq,
                at: o.provenance.logical_time,
                state: state.clone(),
            });
        }
    }
    report.records_removed = live(&before);
    report.ops_after = out.len();
    Ok(RewritePlan {
        log: out,
        state,
        snapshots,
        report,
    })
}

/// True when a rewritten log needs a snapshot after op `seq`: the engine's
/// rule ([`crate::engine`]), at least `max(snapshot_every, live records)`
/// ops since the last snapshot, so that snapshots cost O(log length) in
/// all. (A snapshot every `snapshot_every` ops costs O(ops x records): a
/// rewrite of 50,000 memories with their vectors wrote 6.9 GB.)
pub(crate) fn snapshot_due(
    snapshot_every: u64,
    seq: u64,
    last_snapshot_seq: u64,
    state: &MemoryState,
) -> bool {
    let since = seq.saturating_sub(last_snapshot_seq);
    snapshot_every > 0 && since >= snapshot_every.max(state.len() as u64)
}

/// The op without references to `theirs`, and whether it was edited; `None`
/// when the op itself concerns one of their records.
fn strip(op: &MemoryOp, theirs: &BTreeSet<MemoryId>) -> Option<(MemoryOp, bool)> {
    let is = |id: &MemoryId| theirs.contains(id);
    match op {
        MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => {
            if let MemoryOp::Replace { id, .. } = op {
                if is(id) {
                    return None;
                }
            }
            if is(&record.id) && matches!(op, MemoryOp::Create { .. }) {
                return None;
            }
            if !record.links.iter().any(|l| is(&l.target)) {
                return Some((op.clone(), false));
            }
            let mut r = record.clone();
            r.links.retain(|l| !is(&l.target));
            let edited = match op {
                MemoryOp::Replace { id, .. } => MemoryOp::Replace {
                    id: id.clone(),
                    record: r,
                },
                _ => MemoryOp::Create { record: r },
            };
            Some((edited, true))
        }
        MemoryOp::UpdateFields { id, .. }
        | MemoryOp::AdjustStrength { id, .. }
        | MemoryOp::SetUtility { id, .. }
        | MemoryOp::Forget { id }
        | MemoryOp::SetStatus { id, .. } => (!is(id)).then(|| (op.clone(), false)),
        MemoryOp::Link { from, to, .. } | MemoryOp::Unlink { from, to } => {
            (!is(from) && !is(to)).then(|| (op.clone(), false))
        }
        MemoryOp::Merge {
            into,
            sources,
            text,
            strength,
        } => {
            if is(into) {
                return None;
            }
            if !sources.iter().any(is) {
                return Some((op.clone(), false));
            }
            Some((
                MemoryOp::Merge {
                    into: into.clone(),
                    sources: sources.iter().filter(|s| !is(s)).cloned().collect(),
                    text: text.clone(),
                    strength: *strength,
                },
                true,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use evomem_core::{LogicalTime, Provenance};

    /// A stored log that does not replay is refused, with the op named,
    /// instead of being rewritten from a partial state.
    #[test]
    fn a_log_that_does_not_replay_is_refused() {
        let log = vec![LoggedOp {
            seq: 1,
            op: MemoryOp::Forget {
                id: MemoryId::new("never-created"),
            },
            provenance: Provenance {
                policy: "p".into(),
                label: "l".into(),
                reason: "r".into(),
                sources: vec![],
                logical_time: LogicalTime(0),
                wall_time_ms: 0,
            },
        }];
        match without_namespace(&log, &Namespace::user("bob"), 0) {
            Err(StoreError::Replay { seq, .. }) => assert_eq!(seq, 1),
            other => panic!("expected a replay error, got {other:?}"),
        }
    }

    /// A rewritten log's snapshots hold, all together, no more records
    /// than the log has ops (the engine's rule): with a snapshot every
    /// `snapshot_every` ops they held 2,100 records for 200 ops here, and
    /// a re-embed of 50,000 memories wrote 6.9 GB.
    #[test]
    fn snapshots_of_a_rewrite_cost_linear_in_the_log() {
        let log: Vec<LoggedOp> = (1..=200u64)
            .map(|i| LoggedOp {
                seq: i,
                op: MemoryOp::Create {
                    record: evomem_core::MemoryRecord::new(
                        MemoryId::new(format!("m{i}")),
                        Namespace::user(if i % 2 == 0 { "ann" } else { "bob" }),
                        evomem_core::RecordKind::Custom("memory".into()),
                        format!("text {i}"),
                        LogicalTime(i),
                    ),
                },
                provenance: Provenance {
                    policy: "p".into(),
                    label: "l".into(),
                    reason: "r".into(),
                    sources: vec![],
                    logical_time: LogicalTime(i),
                    wall_time_ms: 0,
                },
            })
            .collect();
        let plan = without_records(&log, &BTreeSet::new(), 10).unwrap();
        let held: usize = plan.snapshots.iter().map(|s| s.state.len()).sum();
        assert!(!plan.snapshots.is_empty());
        assert!(
            held <= log.len(),
            "snapshots hold {held} records for {} ops",
            log.len()
        );
        let reembedded = crate::reembed::reembedded(&log, 10, "m", |_| Some(vec![1.0])).unwrap();
        let held: usize = reembedded.snapshots.iter().map(|s| s.state.len()).sum();
        assert!(held <= log.len(), "re-embed snapshots hold {held} records");
    }
}
