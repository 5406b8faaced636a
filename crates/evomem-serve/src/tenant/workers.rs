//! How a tenant's requests get a blocking thread: one of the tenant's
//! `serve.tenant_workers` permits, with at most `serve.queue_depth`
//! requests waiting for one (then `overloaded`, 503), and the loop
//! endpoints' turn, taken before a permit so that loop requests waiting
//! their turn do not sit on the permits reads need.
//!
//! Locks: the loop turn, then a worker permit (both tokio semaphores,
//! awaited without a thread); the work `f` then runs on the blocking pool
//! and takes what its own file says.

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
        let _turn = turn.map_err(|_| ApiError::ShuttingDown)?;
        self.blocking(f).await
    }

    /// Run `f` on tokio's blocking pool, holding one of this tenant's
    /// `serve.tenant_workers` permits, so that one tenant cannot take every
    /// blocking thread. When more than `serve.queue_depth` requests of the
    /// tenant already wait for a permit, answers `overloaded` (503).
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
        let t = self.clone();
        let r = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&t)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("worker: {e}")))?;
        r
    }
}
