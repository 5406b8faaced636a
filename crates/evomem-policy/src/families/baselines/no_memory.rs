//! `no-memory`: the policy that remembers nothing, the reference for Memory
//! Evolution Gain. It observes nothing and recalls nothing, so the decider
//! ranks with the candidates alone. It serves every decision kind.

use evomem_core::{
    DecisionContext, DecisionQuery, Interaction, PlannedOp, Policy, PolicyCtx, PolicyError, Recall,
    UsageTrace,
};

/// The policy that remembers nothing: `no-memory`, the reference for Memory
/// Evolution Gain. Its recall is always empty.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMemory;

impl Policy for NoMemory {
    fn name(&self) -> &str {
        "no-memory"
    }
    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        _event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        Ok(Vec::new())
    }
    fn recall(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        Ok(Recall {
            context: DecisionContext::default(),
            trace: UsageTrace::for_query(query),
        })
    }
}
