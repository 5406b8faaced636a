//! Log rewrites: a hard delete of one memory and the deletion of a user,
//! which take ops out of the op log (and the store, its free pages
//! purged), then check that nothing of what was deleted is left. (A
//! re-embed replaces the log too, but staged, `reembed.rs`: only the ops
//! written after its staging point are rewritten under the gate.)
//!
//! Locks: the write gate with the store's writer lock for the whole
//! rewrite (so writers wait for it, without the core lock); the core read
//! lock to copy the log; no core lock while planning, writing the store
//! through a second connection, reading it back and deriving; the core
//! write lock only to swap the result in. Freeing what was replaced runs
//! after the locks are released, at bulk priority.

use super::open::{derive, Derived};
use super::{is_kind, lock, op_ids, Tenant, MEMORY_KIND};
use crate::error::ApiError;
use crate::types::{Deleted, UserDeleted};
use evomem_core::{LoggedOp, MemoryId, MemoryOp, MemoryRecord, MemoryState, Namespace};
use evomem_index::GraphWork;
use evomem_index::VectorIndex;
use evomem_store::rewrite::{without_namespace, without_records, RewritePlan};
use evomem_store::ForgetReport;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// Why a log rewrite failed: before anything was written (nothing to
/// undo) or after the store was written (the tenant reloads from it).
enum RewriteFailed {
    Unwritten(ApiError),
    Written(ApiError),
}

impl Tenant {
    /// Rewrite the op log (a user deletion or a hard delete) while reads go
    /// on. Under the write gate, which keeps every other writer of this
    /// process out: copy the log under a short read lock; make the plan
    /// from the copy (`make`, no lock); write it to the store through a
    /// second handle in one transaction, then purge free pages (no lock);
    /// read the store back and compare; derive the index and directory
    /// from the plan and run `check` on them (no lock); then swap the new
    /// log, state, index and directory in under a short write lock. A
    /// failure after the store was written reloads from the store, so the
    /// tenant always serves what the store holds. Returns the plan's
    /// report and what was verified.
    pub(super) fn rewrite<M, C>(
        &self,
        make: M,
        check: C,
    ) -> Result<(ForgetReport, Vec<String>), ApiError>
    where
        M: FnOnce(&[LoggedOp], u64) -> Result<RewritePlan, ApiError> + Send,
        C: FnOnce(&RewritePlan, &Derived) -> Result<Vec<String>, ApiError> + Send,
    {
        self.rewrite_in(make, check)
    }

    /// Build `work`'s graphs at bulk priority and put them in
    /// ([`Tenant::build_graphs`]).
    pub(super) fn build_graphs_in_bulk(&self, work: GraphWork) {
        if work.is_empty() {
            return;
        }
        if let Err(e) = crate::priority::run_bulk(self.bulk(), || self.build_graphs(work)) {
            tracing::warn!("tenant {}: bulk thread for graphs: {e}", self.name);
        }
    }

    /// The work of [`Tenant::rewrite`].
    fn rewrite_in<M, C>(&self, make: M, check: C) -> Result<(ForgetReport, Vec<String>), ApiError>
    where
        M: FnOnce(&[LoggedOp], u64) -> Result<RewritePlan, ApiError> + Send,
        C: FnOnce(&RewritePlan, &Derived) -> Result<Vec<String>, ApiError> + Send,
    {
        let mut gate = self.gate()?;
        if let Some(f) = self.news()? {
            self.write_in(None).take_in(f)?;
        }
        self.caught_up_under(&mut gate);
        let (log, every, model, dim, threshold) = {
            let core = self.read();
            let log = core.engine.log().to_vec();
            let every = core.engine.snapshot_every();
            (log, every, core.model.clone(), core.dim, core.threshold)
        };
        // The slow part at bulk priority (`serve.bulk_idle`, `bulk_nice`);
        // the swap-in below, under the core lock, at the request's own.
        let work = crate::priority::run_bulk(self.bulk(), || {
            let plan = make(&log, every).map_err(RewriteFailed::Unwritten)?;
            drop(log);
            self.rewrite_store(plan, (&model, dim, threshold), check)
        })
        .map_err(|e| RewriteFailed::Unwritten(ApiError::Internal(format!("bulk thread: {e}"))))
        .and_then(|r| r);
        let (plan, derived, verified) = match work {
            Ok(w) => w,
            Err(RewriteFailed::Unwritten(e)) => return Err(e),
            Err(RewriteFailed::Written(e)) => {
                // The store was written: serve what it holds.
                let mut core = self.write_in(Some(gate));
                if let Err(again) = core.sync() {
                    tracing::error!(
                        "tenant {}: reload after a failed rewrite: {again}",
                        self.name
                    );
                }
                return Err(e);
            }
        };
        let RewritePlan {
            log,
            state,
            snapshots,
            report,
        } = plan;
        let last_snapshot = snapshots.last().map_or(0, |s| s.seq);
        let mut core = self.write_in(Some(gate));
        let old = (
            core.engine.adopt_rewrite(log, state, last_snapshot),
            core.install(derived),
        );
        drop(core);
        // Freeing the replaced log, records and index (hundreds of
        // milliseconds for a tenant of 100,000 memories) once readers are
        // free to go on, and at bulk priority: it held the write lock
        // before (docs/notes/service-noisy-neighbours.md).
        if let Err(e) = crate::priority::run_bulk(self.bulk(), move || drop(old)) {
            tracing::warn!("tenant {}: bulk thread for freeing: {e}", self.name);
        }
        Ok((report, verified?))
    }

    /// The store side of [`Tenant::rewrite`], with no lock: write `plan`
    /// through a second handle (old pages purged), read it back and
    /// compare, replay it, derive the index and directory, and run
    /// `check`. Returns the plan, what was derived, and what was verified
    /// (or `check`'s error, reported after the swap-in).
    #[allow(clippy::type_complexity)]
    fn rewrite_store<C>(
        &self,
        plan: RewritePlan,
        (model, dim, threshold): (&str, usize, usize),
        check: C,
    ) -> Result<(RewritePlan, Derived, Result<Vec<String>, ApiError>), RewriteFailed>
    where
        C: FnOnce(&RewritePlan, &Derived) -> Result<Vec<String>, ApiError>,
    {
        let mut store = self.second_store().map_err(RewriteFailed::Unwritten)?;
        store
            .replace_all(&plan.log, &plan.state, &plan.snapshots)
            .map_err(|e| RewriteFailed::Written(e.into()))?;
        let agree = (|| -> Result<(), ApiError> {
            let stored = store.load_log()?;
            let records = store.load_records()?;
            let live: Vec<&MemoryRecord> = plan.state.iter_all().collect();
            if stored != plan.log
                || records.len() != live.len()
                || records.iter().zip(live).any(|(a, b)| a != b)
            {
                return Err(ApiError::Internal(
                    "the rewritten store differs from the rewritten log".into(),
                ));
            }
            let mut replayed = MemoryState::new();
            evomem_store::store::replay_into(&mut replayed, &plan.log, "rewrite")?;
            if replayed != plan.state {
                return Err(ApiError::Internal(
                    "replaying the rewritten log does not give its state".into(),
                ));
            }
            Ok(())
        })();
        agree.map_err(RewriteFailed::Written)?;
        drop(store);
        let derived = derive(&plan.state, &plan.log, model, dim, threshold)
            .map_err(|m| RewriteFailed::Written(ApiError::Internal(m)))?;
        let checked = check(&plan, &derived).map(|mut v| {
            v.insert(0, "store log and records equal the engine's".to_string());
            v
        });
        Ok((plan, derived, checked))
    }

    /// Remove one memory for good: every op that created, edited or forgot
    /// it leaves the op log (so no text of it stays in history or `as_of`),
    /// its record and vector leave the store and the index, and the store
    /// purges its free pages (as for a user deletion); then check that
    /// nothing of it is left. Works on a memory already deleted softly.
    /// The rewrite runs while reads go on ([`Tenant::rewrite`]).
    pub fn hard_delete(&self, id: &str) -> Result<Deleted, ApiError> {
        let mid = MemoryId::new(id);
        let (_, verified) = self.rewrite(
            |log, every| {
                let created = log.iter().any(|o| {
                    matches!(&o.op, MemoryOp::Create { record } if record.id == mid && is_kind(record, MEMORY_KIND))
                });
                if !created {
                    return Err(ApiError::NotFound {
                        what: "memory",
                        id: id.to_string(),
                    });
                }
                Ok(without_records(log, &BTreeSet::from([mid.clone()]), every)?)
            },
            |plan, derived| {
                let mut verified = Vec::new();
                if plan.state.get(&mid).is_some() {
                    return Err(ApiError::Internal(format!("memory {id} is still live")));
                }
                verified.push("no live record with the id".to_string());
                for o in &plan.log {
                    // Its texts lived only in ops on its id (create, update,
                    // replace); another memory may hold the same words.
                    if op_ids(&o.op).contains(&&mid) {
                        return Err(ApiError::Internal(format!(
                            "op {} still concerns the deleted memory",
                            o.seq
                        )));
                    }
                }
                verified.push("no op in the log concerns the memory".into());
                if derived.index.contains(&mid) {
                    return Err(ApiError::Internal(
                        "the index still holds the memory's vector".into(),
                    ));
                }
                verified.push("no vector of the memory in the index".into());
                Ok(verified)
            },
        )?;
        Ok(Deleted {
            id: id.to_string(),
            deleted: true,
            hard: true,
            verified,
        })
    }

    /// Forget a user everywhere: records, log, index, catalog of users,
    /// policy caches; then check that nothing of theirs is left. The
    /// rewrite runs while reads go on ([`Tenant::rewrite`]).
    pub fn delete_user(&self, user: &str) -> Result<UserDeleted, ApiError> {
        let ns = Namespace::user(user);
        // Every id ever created in the namespace (set by the plan, read by
        // the check).
        let ids: Mutex<Vec<MemoryId>> = Mutex::default();
        let (report, verified) = self.rewrite(
            |log, every| {
                let mut ids = lock(&ids);
                *ids = log
                    .iter()
                    .filter_map(|o| match &o.op {
                        MemoryOp::Create { record } if record.namespace == ns => {
                            Some(record.id.clone())
                        }
                        _ => None,
                    })
                    .collect();
                if ids.is_empty() && !log.iter().any(|o| op_in_ns(o, &ns)) {
                    return Err(ApiError::NotFound {
                        what: "user",
                        id: user.to_string(),
                    });
                }
                Ok(without_namespace(log, &ns, every)?)
            },
            |plan, derived| {
                // Neither the live state, the log nor the index holds
                // anything of the user.
                let ids = lock(&ids);
                let mut verified = Vec::new();
                if plan.state.scan(std::slice::from_ref(&ns)).next().is_some() {
                    return Err(ApiError::Internal(format!("records of {ns:?} remain")));
                }
                verified.push("no live record in the user's namespace".to_string());
                let needle = serde_json::to_string(ns.as_str()).unwrap_or_default();
                for o in &plan.log {
                    let body = serde_json::to_string(&o.op).unwrap_or_default();
                    if body.contains(&needle) || op_ids(&o.op).iter().any(|i| ids.contains(i)) {
                        return Err(ApiError::Internal(format!(
                            "op {} still concerns the deleted user",
                            o.seq
                        )));
                    }
                }
                verified.push("no op in the log names the user's namespace or records".into());
                if !derived.index.ids_in(&ns).is_empty()
                    || ids.iter().any(|i| derived.index.contains(i))
                {
                    return Err(ApiError::Internal(
                        "the index still holds the user's vectors".into(),
                    ));
                }
                verified.push("no vector of the user in the index".into());
                if derived.dir.user_ids.contains_key(user) {
                    return Err(ApiError::Internal(
                        "the user directory still lists the user".into(),
                    ));
                }
                verified.push("the policies' user directory no longer lists the user".into());
                Ok(verified)
            },
        )?;
        Ok(UserDeleted {
            user_id: user.to_string(),
            records_removed: report.records_removed,
            ops_dropped: report.ops_dropped,
            ops_edited: report.ops_edited,
            verified,
        })
    }
}

fn op_in_ns(o: &LoggedOp, ns: &Namespace) -> bool {
    match &o.op {
        MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => &record.namespace == ns,
        _ => false,
    }
}
