//! [`RoleCaller`]: the one way a policy calls an LLM role.
//!
//! Every policy holds one and calls `caller.call(&Role, &input, user)`. What
//! happens on failure is decided by the hub ([`evomem_llm::LlmHub::run`]),
//! never by the policy:
//!
//! - a transient transport error, a prompt that is too long or a malformed
//!   answer gets one repair turn, then the role's offline algorithm; both are
//!   counted in the hub's accounting;
//! - a permanent error (wrong key, unknown model), a replay-only cache miss,
//!   an offline algorithm that failed, and a backend that failed
//!   [`evomem_llm::DEFAULT_MAX_CONSECUTIVE_FAILURES`] calls in a row come back
//!   as [`PolicyError::Role`] naming the role, and fail the run.
//!
//! A policy must not catch that error and run the offline algorithm itself:
//! a run that was asked to use a model, or to replay a cache, would quietly
//! become an offline run.

use evomem_core::{PolicyError, Role};
use evomem_llm::LlmHub;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Calls roles through the hub and counts the calls per role.
#[derive(Debug, Clone)]
pub struct RoleCaller {
    hub: Arc<LlmHub>,
    calls: BTreeMap<String, u64>,
    scheduled: BTreeMap<String, u64>,
}

impl RoleCaller {
    /// A caller over `hub`.
    pub fn new(hub: Arc<LlmHub>) -> Self {
        Self {
            hub,
            calls: BTreeMap::new(),
            scheduled: BTreeMap::new(),
        }
    }

    /// The hub (for accounting and backend questions).
    pub fn hub(&self) -> &Arc<LlmHub> {
        &self.hub
    }

    /// Run `role` on `input` for `user` (the user is used for per-user
    /// accounting). See the module docs for what an error means.
    pub fn call<R: Role>(
        &mut self,
        role: &R,
        input: &R::Input,
        user: Option<&str>,
    ) -> Result<R::Output, PolicyError> {
        *self.calls.entry(role.name().to_string()).or_insert(0) += 1;
        self.hub
            .run(role, input, user)
            .map_err(|source| PolicyError::Role {
                role: role.name().to_string(),
                source,
            })
    }

    /// Calls made so far, per role name.
    pub fn calls(&self) -> &BTreeMap<String, u64> {
        &self.calls
    }

    /// Run `role`'s offline algorithm directly, for work that a budget
    /// *schedules* offline (AtomRec's `budget=lean`: notes older than the
    /// model's window). Never use it to recover from a model error: that is
    /// the hub's job (see the module docs). Runs are counted per role in
    /// [`RoleCaller::scheduled_offline`], which the policy reports, so a run
    /// shows how much of its work the model did not see.
    pub fn offline<R: Role>(
        &mut self,
        role: &R,
        input: &R::Input,
    ) -> Result<R::Output, PolicyError> {
        *self.scheduled.entry(role.name().to_string()).or_insert(0) += 1;
        role.offline(input).map_err(|source| PolicyError::Role {
            role: role.name().to_string(),
            source,
        })
    }

    /// Offline runs scheduled by a budget so far, per role name.
    pub fn scheduled_offline(&self) -> &BTreeMap<String, u64> {
        &self.scheduled
    }
}
