//! The commit every writer of the store goes through (module docs of
//! `tenant`, "Locking"): stage under the core write lock, store in one
//! transaction with the core lock released, install under the core write
//! lock again; and the bulk priority that slow steps holding no lock a
//! reader waits on run at.
//!
//! Locks: the caller holds the write gate throughout (moved in with its
//! [`CoreWrite`]); these functions release and retake the core write lock,
//! and take the core read lock for a snapshot due with a commit. They
//! never take the gate themselves.

use super::{CoreWrite, Tenant, WriteGate};
use crate::error::ApiError;
use evomem_core::LogicalTime;

/// Add groups of at least this many memories do their bulk steps on a
/// bulk-priority thread ([`Tenant::in_bulk`]); smaller ones inline.
pub(super) const BULK_MIN: usize = 32;

impl Tenant {
    /// Commit `batches` without keeping readers waiting (module docs,
    /// "Locking"): stage them on the engine under the core write lock the
    /// caller holds (validated, not yet visible), release the core lock and
    /// store them in one transaction, keeping the write gate so that no
    /// other writer of this process runs meanwhile, then take the core lock
    /// back and install them. Readers go on during the store's commit (and
    /// the snapshot it may carry) and never see the batches before they
    /// are durable. On an error nothing is installed; the core lock is held
    /// again either way. Returns the number of ops applied.
    pub(super) fn store_and_install<'a>(
        &'a self,
        mut core: CoreWrite<'a>,
        batches: Vec<evomem_store::Batch>,
    ) -> (CoreWrite<'a>, Result<usize, evomem_store::StoreError>) {
        let staged = match core.engine.stage_batches(batches) {
            Ok(s) => s,
            Err(e) => return (core, Err(e)),
        };
        let Some(handle) = core.engine.store_handle() else {
            let r = core.engine.install(staged);
            return (core, r);
        };
        let gate = core.release_core();
        self.commit_then_install(gate, &handle, staged)
    }

    /// The second half of [`Tenant::store_and_install`]: with the core lock
    /// released and the write gate `gate` held, commit `staged` to the
    /// store, then take the core lock and install it.
    fn commit_then_install<'a>(
        &'a self,
        gate: Option<WriteGate<'a>>,
        handle: &evomem_store::StoreHandle,
        mut staged: evomem_store::Staged,
    ) -> (CoreWrite<'a>, Result<usize, evomem_store::StoreError>) {
        // A keyed write's first commit stores its key (crate::idem).
        let key = crate::idem::pending_key();
        let stored = self.commit_staged(handle, &mut staged, key.iter().cloned().collect());
        if stored.is_ok() && key.is_some() {
            crate::idem::key_stored();
        }
        let mut core = self.write_in(gate);
        if let Err(e) = stored {
            return (core, Err(e));
        }
        let installed = self.install_committed(&mut core, staged);
        (core, installed)
    }

    /// Commit `staged` to the store, the write gate held and the core lock
    /// not, with `keys`, the keys of the writes it is (crate::idem): the
    /// commit is refused whole when one was committed before.
    pub(super) fn commit_staged(
        &self,
        handle: &evomem_store::StoreHandle,
        staged: &mut evomem_store::Staged,
        keys: Vec<evomem_store::WriteKey>,
    ) -> Result<(), evomem_store::StoreError> {
        staged.set_keys(keys);
        if staged.snapshot_due() {
            // The snapshot is of the state before the batches, read under
            // the read lock: readers share it, and every writer needs the
            // write gate first, which this thread holds, so none queues
            // for the write lock meanwhile.
            let view = self.read();
            handle.commit(staged, Some(&view.engine))
        } else {
            handle.commit(staged, None)
        }
    }

    /// Install a committed batch under the core lock; on a failure (the
    /// engine no longer matches its store) reload from the store.
    pub(super) fn install_committed(
        &self,
        core: &mut CoreWrite<'_>,
        staged: evomem_store::Staged,
    ) -> Result<usize, evomem_store::StoreError> {
        let installed = core.engine.install(staged);
        if let Err(e) = &installed {
            tracing::error!("tenant {}: install after commit: {e}; reloading", self.name);
            if let Err(again) = core.sync() {
                tracing::error!("tenant {}: reload: {again}", self.name);
            }
        }
        installed
    }

    /// How this tenant's bulk work runs (`serve.bulk_idle`, `bulk_nice`).
    pub(super) fn bulk(&self) -> crate::priority::Bulk {
        crate::priority::Bulk {
            nice: self.shared.config.bulk_nice,
            idle: self.shared.config.bulk_idle,
        }
    }

    /// Run `f`, work on `n` memories that holds no lock a reader waits on,
    /// at bulk priority ([`crate::priority::run_bulk`]); under
    /// [`BULK_MIN`] memories inline, where a thread would cost more than
    /// the work.
    pub(super) fn in_bulk<T: Send>(
        &self,
        n: usize,
        f: impl FnOnce() -> T + Send,
    ) -> Result<T, ApiError> {
        if n < BULK_MIN {
            return Ok(f());
        }
        crate::priority::run_bulk(self.bulk(), f)
            .map_err(|e| ApiError::Internal(format!("bulk thread: {e}")))
    }
}

/// One batch of the API's own ops at `at`.
pub(super) fn api_batch(
    ops: Vec<evomem_core::PlannedOp>,
    at: LogicalTime,
) -> Vec<evomem_store::Batch> {
    vec![evomem_store::Batch {
        policy: "api".to_string(),
        ops,
        at,
    }]
}
