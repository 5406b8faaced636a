//! `random`: uniform scores, seeded per decision.
//!
//! The scores of a decision come from a ChaCha8 stream seeded with a mix of the
//! run seed and the decision id, so a decision's scores do not depend on the
//! order in which decisions are made. Under this baseline the target's rank is
//! uniform, so the expected HR@1 with 1 target + 9 negatives is 0.10.

use super::scored;
use evomem_core::{DecisionQuery, Interaction, PlannedOp, Policy, PolicyCtx, PolicyError, Recall};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// SplitMix64 finalizer: a cheap, well-mixed hash of a `u64`.
pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `random` baseline.
#[derive(Debug, Clone)]
pub struct RandomScores {
    seed: u64,
}

impl RandomScores {
    /// A random scorer for run seed `seed`.
    pub fn new(seed: u64) -> Self {
        Self { seed }
    }
}

impl Policy for RandomScores {
    fn name(&self) -> &str {
        "random"
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
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix(self.seed) ^ splitmix(!query.decision_id));
        let scores = query
            .candidates()
            .iter()
            .map(|_| rng.gen::<f64>())
            .collect();
        Ok(scored(query, scores))
    }
}
