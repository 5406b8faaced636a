//! The paper's retrospective mode (`mars[mode=single-pass]`, §4.1).
//!
//! **What the paper says.** "The full interaction history H_u is processed
//! at a single point in time to build the memory state M_u. Concretely, the
//! extraction step ingests all interactions to construct preference memory
//! P_u and synthesize profile memory S_u, while event memory E_u retains only
//! the most recent L_max signals as ranking context" (§4.1), at "3 LLM calls
//! per user" (§4.5): one extraction, one synthesis, one ranking.
//!
//! **What this mode does.**
//! - `observe` records each signal in the event FIFO (capacity L_max) and
//!   runs no scheduler. A signal that leaves the FIFO before any extraction
//!   read it is kept in the policy's backlog, so that the extraction still
//!   sees the whole history although E_u holds only the last L_max signals.
//! - When decisions are due (`maintain(BeforeDecisions)`, and
//!   `maintain(EndOfStream)`), each user with unprocessed signals gets one
//!   round ([`Mars::single_pass`]): one `mars_extract` call over the backlog
//!   and the pending FIFO signals, oldest first, then one `mars_synthesize`
//!   call. With the ranking call that is the paper's three calls per user.
//!
//! **Where the paper is silent, and what was chosen.**
//! - *Which lifecycle ops a single pass runs.* The extraction's answer is
//!   applied in full (new chunks, and boosts/demotes of chunks that exist
//!   from an earlier pass), then the deterministic merge and forget (no LLM
//!   call). K_cat still bounds each category.
//! - *Synthesis* runs once per round, also when the round left no chunk (the
//!   profile then describes the recent events), so every user with history
//!   has a profile, as every user in the paper gets one.
//! - *Very long histories.* `sp_window` = N makes the extraction read only
//!   the most recent N pending signals (a bound on a model's prompt); older
//!   ones count as processed. Default 0: all of them, as the paper says.
//! - *The evolving protocol.* A decision for a user with unprocessed signals
//!   runs the round inside `recall` on a private view and ranks on its
//!   result; `recall` cannot return ops, so they are returned first by the
//!   next `feedback`, `observe` or `maintain` (the evolving driver calls
//!   `feedback` right after the decision). Later signals of that user are
//!   compressed by another round at `maintain(EndOfStream)`.
//! - *Scheduling.* None: `sched=agentic` is rejected with this mode, and `b`
//!   is not read.

use super::lifecycle::Lifecycle;
use super::policy::{Domain, Mars};
use super::scheduler::Actions;
use super::tiers::UserView;
use evomem_core::{LogicalTime, PolicyCtx, PolicyError};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Mars {
    /// One single-pass round for `view`'s user if it has unprocessed signals
    /// (backlog or pending FIFO signals): one extraction over all of them (or
    /// the last `sp_window`), merge, forget, one synthesis. Returns whether a
    /// round ran.
    pub(super) fn single_pass(
        &mut self,
        ctx: &PolicyCtx<'_>,
        domain: &Arc<Domain>,
        view: &mut UserView,
        at: LogicalTime,
    ) -> Result<bool, PolicyError> {
        let mut history = self.backlog.remove(&view.user).unwrap_or_default();
        history.extend(view.pending());
        let Some(last) = history.last().map(|e| e.time.0) else {
            return Ok(false);
        };
        let window = match self.cfg.sp_window {
            0 => history.as_slice(),
            n => &history[history.len().saturating_sub(n)..],
        };
        self.stats.rounds += 1;
        self.stats.single_pass_rounds += 1;
        self.stats.single_pass_signals += window.len() as u64;
        let mut mutations = view.mutations();
        mutations += self.assess_pending(ctx, domain, view, &Actions::all(), window, at)?;
        mutations += self.merge_duplicates(view, at)?;
        mutations += self.forget_weak(view, at)?;
        view.set_meta(
            BTreeMap::from([
                ("processed_through".to_string(), json!(last)),
                ("mutations_since_synthesis".to_string(), json!(mutations)),
            ]),
            "single-pass round",
            at,
        )?;
        self.synthesize(
            ctx,
            domain,
            view,
            at,
            &format!(
                "single pass: one {} over {} signal(s)",
                Lifecycle::Synthesize,
                window.len()
            ),
        )?;
        Ok(true)
    }
}
