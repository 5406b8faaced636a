//! Time travel: the tenant's state as it stood at a logical time, replayed
//! from the store on a second connection in one consistent read (a read
//! transaction; on PostgreSQL, REPEATABLE READ), so that it needs no core
//! lock and, on PostgreSQL, sees other instances' writes up to that time.
//!
//! Locks: `reader` (the second connection, opened on first use) alone;
//! never the core lock or the write gate.

use super::{lock, Tenant};
use crate::error::ApiError;
use evomem_core::{LogicalTime, MemoryState};

impl Tenant {
    /// The tenant's state as it stood at `t`, replayed on the second
    /// connection in one consistent read, without the core lock. A broken
    /// connection is not kept for the next call.
    pub(super) fn state_as_of(&self, t: LogicalTime) -> Result<MemoryState, ApiError> {
        // Replay on a second connection, in one consistent read
        // (a read transaction; on PostgreSQL, REPEATABLE READ),
        // without the core lock. On PostgreSQL this also sees
        // other instances' writes up to `t`.
        let mut reader = lock(&self.reader);
        if reader.is_none() {
            *reader = Some(self.second_store()?);
        }
        let state = match reader.as_mut() {
            Some(r) => r.state_at_consistent(t),
            None => return Err(ApiError::Internal("no reader connection".into())),
        };
        if state.is_err() {
            // A broken connection is not kept for the next listing.
            *reader = None;
        }
        drop(reader);
        Ok(state?)
    }
}
