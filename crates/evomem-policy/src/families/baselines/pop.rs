//! `pop`: most-popular ranking.
//!
//! The score of a candidate is the number of observed interactions with it
//! (repeats included), over all users: the training counts at decision time.
//! Items never observed score 0; ties are left to the metric's tie rule.

use super::scored;
use evomem_core::{DecisionQuery, Interaction, PlannedOp, Policy, PolicyCtx, PolicyError, Recall};
use evomem_kit::Observed;

/// The `pop` baseline.
#[derive(Debug, Clone, Default)]
pub struct Pop {
    seen: Observed,
}

impl Pop {
    /// A popularity scorer that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for Pop {
    fn name(&self) -> &str {
        "pop"
    }

    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.seen.record(event);
        Ok(Vec::new())
    }

    fn recall(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        let scores = query
            .candidates()
            .iter()
            .map(|c| self.seen.count(c.0) as f64)
            .collect();
        Ok(scored(query, scores))
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "observed": self.seen.n_events })
    }
}
