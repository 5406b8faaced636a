//! How a tenant's requests get a blocking thread. Reads take one of the
//! tenant's `serve.tenant_workers` permits, which only reads use. Writers
//! that may wait at the write gate (updates, deletes, hard deletes, user
//! deletions) and the loop endpoints first wait, without a thread, for a
//! turn of their own (one of each per tenant at a time; they are one at a
//! time past the gate and `loop_state` anyway), and run on it without a
//! permit: writes queued behind a long user deletion wait on their turn,
//! not on the permits reads need. At most `serve.queue_depth` requests
//! wait for any one of these; past it, `overloaded` (503).
//!
//! Locks: the loop turn or the write turn, or a read permit (tokio
//! semaphores, awaited without a thread, held until the work ends even
//! when the request is dropped); the work `f` then runs on the blocking
//! pool and takes what its own file says.

use super::Tenant;
use crate::error::ApiError;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Tenant {
    /// [`Tenant::blocking`] for a loop endpoint: first wait (without a
    /// thread or a permit) for the tenant's loop turn; past
    /// `serve.queue_depth` loop requests waiting, `overloaded` (503).
    pub async fn blocking_loop<T, F>(self: &Arc<Self>, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(&Tenant) -> Result<T, ApiError> + Send + 'static,
        T: Send + 'static,
    {
        let depth = self.shared.config.queue_depth;
        if self.loop_waiting.fetch_add(1, Ordering::SeqCst) >= depth {
            self.loop_waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::Overloaded {
                queue: "loop requests",
                retry_after_s: 1,
            });
        }
        let turn = self.loop_turn.clone().acquire_owned().await;
        self.loop_waiting.fetch_sub(1, Ordering::SeqCst);
        let turn = turn.map_err(|_| ApiError::ShuttingDown)?;
        self.on_pool(turn, f).await
    }

    /// Run a write that may wait at the write gate (an update, a delete,
    /// a hard delete, a user deletion) on tokio's blocking pool on the
    /// tenant's write turn, waited for without a thread or a read permit;
    /// past `serve.queue_depth` writes waiting, `overloaded` (503).
    pub async fn blocking_write<T, F>(self: &Arc<Self>, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(&Tenant) -> Result<T, ApiError> + Send + 'static,
        T: Send + 'static,
    {
        let depth = self.shared.config.queue_depth;
        if self.write_waiting.fetch_add(1, Ordering::SeqCst) >= depth {
            self.write_waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::Overloaded {
                queue: "tenant writes",
                retry_after_s: 1,
            });
        }
        let turn = self.write_turn.clone().acquire_owned().await;
        self.write_waiting.fetch_sub(1, Ordering::SeqCst);
        let turn = turn.map_err(|_| ApiError::ShuttingDown)?;
        self.on_pool(turn, f).await
    }

    /// Run the read `f` on tokio's blocking pool, holding one of this
    /// tenant's `serve.tenant_workers` read permits, so that one tenant
    /// cannot take every blocking thread. When more than
    /// `serve.queue_depth` requests of the tenant already wait for a
    /// permit, answers `overloaded` (503). Writes that may wait at the
    /// write gate go through [`Tenant::blocking_write`] instead.
    pub async fn blocking<T, F>(self: &Arc<Self>, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(&Tenant) -> Result<T, ApiError> + Send + 'static,
        T: Send + 'static,
    {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let depth = self.shared.config.queue_depth;
                if self.waiting.fetch_add(1, Ordering::SeqCst) >= depth {
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    return Err(ApiError::Overloaded {
                        queue: "tenant workers",
                        retry_after_s: 1,
                    });
                }
                let p = self.permits.clone().acquire_owned().await;
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                p.map_err(|_| ApiError::ShuttingDown)?
            }
        };
        self.on_pool(permit, f).await
    }

    /// Run `f` on tokio's blocking pool, holding `held` (a permit or a
    /// turn) until it ends.
    async fn on_pool<T, F, H>(self: &Arc<Self>, held: H, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(&Tenant) -> Result<T, ApiError> + Send + 'static,
        T: Send + 'static,
        H: Send + 'static,
    {
        let t = self.clone();
        let working = Working::start(self.clone());
        // A keyed write's key goes with it onto the thread (crate::idem).
        let key = crate::idem::task_key();
        let r = tokio::task::spawn_blocking(move || {
            let _held = held;
            let _working = working;
            crate::idem::on_thread(key, || f(&t))
        })
        .await
        .map_err(|e| ApiError::Internal(format!("worker: {e}")))?;
        r
    }
}

/// One piece of a tenant's work on the blocking pool, counted in
/// `Tenant::working` from before it is queued until it ends (or is
/// dropped unrun): the registry does not close a tenant while any is.
struct Working(Arc<Tenant>);

impl Working {
    fn start(t: Arc<Tenant>) -> Self {
        t.working.fetch_add(1, Ordering::SeqCst);
        Self(t)
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.0.working.fetch_sub(1, Ordering::SeqCst);
    }
}
