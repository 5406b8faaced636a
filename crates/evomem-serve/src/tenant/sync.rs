//! Catching up with other instances' writes (PostgreSQL; on SQLite, which
//! one process writes, every step here is a no-op): the store is queried
//! without the core lock ([`Tenant::news`]) and what it found is taken in
//! under a short write lock ([`TenantCore::take_in`]), with the index,
//! directory and clock brought up to the engine. Also the synced read and
//! write locks the request paths take.
//!
//! Locks: `catch_up` takes the write gate (or, when the gate's holder has
//! caught up under the store's writer lock, nothing), then the core lock
//! for writing only when there is something to take in; `write_synced`
//! takes the write gate with the store's writer lock ([`Tenant::gate`]),
//! the core lock for reading while querying, then for writing; `news`
//! takes the core read lock only to copy the sync point. `TenantCore`'s
//! methods run under the core write lock their caller holds.

use super::{
    bytes_of, is_kind, lock, op_ids, CoreWrite, Tenant, TenantCore, WriteGate, ITEM_KIND,
    MEMORY_KIND, USER_KIND,
};
use crate::error::ApiError;
use evomem_core::{MemoryId, MemoryOp};
use evomem_index::VectorIndex;
use evomem_store::Synced;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

impl TenantCore {
    /// Catch up with other instances' writes (PostgreSQL), querying the
    /// store under the core lock: for recovery after a failed write. The
    /// request paths query without it ([`Tenant::news`], then
    /// [`TenantCore::take_in`]).
    pub(super) fn sync(&mut self) -> Result<(), ApiError> {
        let synced = self.engine.sync()?;
        self.after_sync(synced)
    }

    /// Take in what [`Tenant::news`] fetched without the core lock; when
    /// the log moved meanwhile (it cannot while the write gate is held,
    /// but a check costs nothing), catch up the slow way.
    pub(super) fn take_in(&mut self, fetched: evomem_store::Fetched) -> Result<(), ApiError> {
        match self.engine.catch_up(fetched)? {
            Some(synced) => self.after_sync(synced),
            None => self.sync(),
        }
    }

    /// Bring the index, directory and clock up to the engine after a
    /// catch-up.
    fn after_sync(&mut self, synced: Synced) -> Result<(), ApiError> {
        match synced {
            Synced::Current => Ok(()),
            Synced::Reloaded => {
                self.peer_rewrites.fetch_add(1, Ordering::AcqRel);
                self.follow_model();
                self.rebuild().map_err(ApiError::Internal)
            }
            Synced::Extended { from } => {
                let mut touched: BTreeSet<MemoryId> = BTreeSet::new();
                let mut structural = false;
                for o in &self.engine.log()[from..] {
                    self.clock = self.clock.max(o.provenance.logical_time.0);
                    for id in op_ids(&o.op) {
                        touched.insert(id.clone());
                    }
                    if let MemoryOp::Create { record } = &o.op {
                        structural |= is_kind(record, ITEM_KIND) || is_kind(record, USER_KIND);
                    }
                }
                if structural {
                    return self.rebuild().map_err(ApiError::Internal);
                }
                for id in touched {
                    let live = self
                        .engine
                        .state()
                        .get(&id)
                        .filter(|r| is_kind(r, MEMORY_KIND))
                        .and_then(|r| r.embedding.as_ref().map(|e| (r.namespace.clone(), e)));
                    match live {
                        Some((ns, e)) => {
                            let v = e.vector.clone();
                            self.index
                                .add(id, ns, &v)
                                .map_err(|e| ApiError::Internal(e.to_string()))?;
                        }
                        None => {
                            self.index.remove(&id);
                        }
                    }
                }
                self.gen += 1;
                // Another instance's writes moved what the memories hold.
                self.bytes = bytes_of(self.engine.state());
                Ok(())
            }
        }
    }
}

impl TenantCore {
    /// After a reload: when the store's memories now carry another model's
    /// vectors (another instance ran `serve reembed` on this tenant) and
    /// the service can give that model's embedder, move the model, the
    /// dimension and the tenant's embedder to it together, as the
    /// re-embed's own swap does, so that the rebuild takes the vectors in
    /// and queries are embedded by the same model. Without that embedder
    /// nothing moves, and the rebuild refuses the vectors with its message.
    /// The first time a model is met its embedder may be loaded here,
    /// under the core write lock (once per model and process).
    fn follow_model(&mut self) {
        let stored = super::stored_model(self.engine.state());
        let Some(model) = stored.filter(|m| *m != self.model) else {
            return;
        };
        let Some((slot, embedders)) = &self.follow else {
            return;
        };
        let Some(e) = embedders.for_model(&model) else {
            return;
        };
        tracing::warn!(
            "another instance moved this tenant from {} to {model} (serve reembed): following it",
            self.model
        );
        self.dim = e.dim();
        *match slot.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        } = e;
        self.model = model;
    }
}

impl Tenant {
    /// A write lock for a writer of the store ([`Tenant::gate`]), caught
    /// up with other instances.
    pub(super) fn write_synced(&self) -> Result<CoreWrite<'_>, ApiError> {
        let mut gate = self.gate()?;
        let news = self.news()?;
        let mut core = self.write_in(None);
        if let Some(f) = news {
            core.take_in(f)?;
        }
        self.caught_up_under(&mut gate);
        core._gate = Some(gate);
        Ok(core)
    }

    /// Say that `gate`'s holder has caught up with the store: when the
    /// gate holds the store's writer lock (PostgreSQL), no other instance
    /// can write until it is released, so reads need not wait for the
    /// gate to catch up themselves ([`Tenant::catch_up`]).
    pub(super) fn caught_up_under<'a>(&'a self, gate: &mut WriteGate<'a>) {
        if gate.db.is_some() {
            self.gate_current.store(true, Ordering::Release);
            gate.current = Some(&self.gate_current);
        }
    }

    /// What other instances wrote to the store since this process's log
    /// (PostgreSQL; `None` when nothing, or on SQLite, which one process
    /// writes), read without the core lock: readers go on while the store
    /// is queried. The caller holds the write gate, so this process's log
    /// cannot move before the result is taken in ([`TenantCore::take_in`]).
    pub(super) fn news(&self) -> Result<Option<evomem_store::Fetched>, ApiError> {
        if !self.shared.config.is_postgres() {
            return Ok(None);
        }
        let (point, handle) = {
            let core = self.read();
            (core.engine.sync_point(), core.engine.store_handle())
        };
        let Some(handle) = handle else {
            return Ok(None);
        };
        let fetched = handle.fetch_since(&point)?;
        Ok((!fetched.is_current()).then_some(fetched))
    }

    /// Catch up with other instances' writes (PostgreSQL; nothing to do on
    /// SQLite), for a caller outside the tenant: the idempotency layer,
    /// before it replays a remembered answer ([`Tenant::peer_rewrites`]).
    pub fn refresh(&self) -> Result<(), ApiError> {
        self.catch_up()
    }

    /// How many times this process found the tenant's log rewritten by
    /// another instance (a hard delete or a user deletion there) while
    /// catching up. The idempotency layer stops replaying answers with
    /// text recorded before the count moved.
    pub fn peer_rewrites(&self) -> u64 {
        self.peer_rewrites.load(Ordering::Acquire)
    }

    /// Catch up with other instances' writes (PostgreSQL): the store is
    /// queried without the core lock, and the write lock is taken only
    /// when there is something to take in. Under the write gate, so that
    /// this process's log does not move meanwhile; but a read does not
    /// wait for a writer that has already caught up under the store's
    /// writer lock ([`Tenant::caught_up_under`]).
    pub(super) fn catch_up(&self) -> Result<(), ApiError> {
        if !self.shared.config.is_postgres() {
            return Ok(());
        }
        let local = match self.write_gate.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                // A writer or a log rewrite holds the gate. Once it has
                // caught up under the store's writer lock, no instance can
                // have written since: what is installed is current, and
                // the read goes on without waiting for its commit.
                if self.gate_current.load(Ordering::Acquire) {
                    return Ok(());
                }
                lock(&self.write_gate)
            }
        };
        let gate = WriteGate {
            _local: local,
            db: None,
            current: None,
        };
        if let Some(f) = self.news()? {
            self.write_in(Some(gate)).take_in(f)?;
        }
        Ok(())
    }

    /// A read lock; under PostgreSQL with `sync_reads`, caught up first.
    pub(super) fn read_synced(
        &self,
    ) -> Result<std::sync::RwLockReadGuard<'_, TenantCore>, ApiError> {
        if self.shared.config.sync_reads {
            self.catch_up()?;
        }
        Ok(self.read())
    }
}
