//! When the lifecycle runs (§3.3 "Agentic Scheduling", §4.3).
//!
//! - `fixed`: a full round (every action) whenever at least B signals are pending.
//! - `agentic`: after each signal the `mars_plan` role sees a summary of the
//!   belief state and the pending signals and answers with actions or wait
//!   (offline heuristic: [`super::roles::offline_plan`]).
//!
//! Independently of the scheduler, a round is forced when the FIFO is about to
//! evict a pending signal (so no signal is lost unprocessed; paper silent),
//! and at `maintain(BeforeDecisions | EndOfStream)`.

use super::lifecycle::Lifecycle;
use super::polarity::Polarity;
use super::roles::{ChunkIn, PlanInput, SignalIn};
use super::tiers::Chunk;
use std::collections::BTreeSet;

/// The set of lifecycle actions one round performs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions(pub BTreeSet<Lifecycle>);

impl Actions {
    /// Every action.
    pub fn all() -> Self {
        Self(Lifecycle::ALL.into_iter().collect())
    }
    /// From a planner answer.
    pub fn from_list(v: &[Lifecycle]) -> Self {
        Self(v.iter().copied().collect())
    }
    /// Whether `a` is included.
    pub fn has(&self, a: Lifecycle) -> bool {
        self.0.contains(&a)
    }
    /// True when nothing is to be done (wait).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Summary statistics for the planner.
#[allow(clippy::too_many_arguments)]
pub fn plan_input(
    user: &str,
    pending: Vec<SignalIn>,
    chunks: &[Chunk],
    chunk_ins: Vec<ChunkIn>,
    fifo_len: usize,
    lmax: usize,
    mutations: u32,
    gamma: u32,
    has_profile: bool,
    b: usize,
    forget_below: f64,
    forget_min_evidence: u32,
    duplicates: usize,
) -> PlanInput {
    let keys: BTreeSet<(usize, String)> = chunks
        .iter()
        .filter_map(|c| c.key.as_ref().map(|(a, v)| (*a, v.to_lowercase())))
        .collect();
    let mut pos = 0usize;
    let mut neg = 0usize;
    let mut novel = 0usize;
    let mut conflicts = 0usize;
    for s in &pending {
        let hits = s
            .facets
            .iter()
            .filter(|f| keys.contains(&(f.axis, f.value.to_lowercase())))
            .count();
        match s.polarity {
            Polarity::Positive => {
                pos += 1;
                if hits == 0 {
                    novel += 1;
                }
            }
            Polarity::Negative => {
                neg += 1;
                if hits > 0 {
                    conflicts += 1;
                }
            }
            Polarity::Neutral => {}
        }
    }
    let forgettable = chunks
        .iter()
        .filter(|c| c.strength < forget_below && c.evidence >= forget_min_evidence)
        .count();
    PlanInput {
        user: user.to_string(),
        pending,
        pending_positive: pos,
        pending_negative: neg,
        fifo_len,
        lmax,
        chunks: chunk_ins,
        novel_share: if pos == 0 {
            0.0
        } else {
            novel as f64 / pos as f64
        },
        conflicts,
        forgettable,
        duplicates,
        mutations,
        gamma,
        has_profile,
        b,
    }
}
