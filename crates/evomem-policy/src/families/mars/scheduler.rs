//! When the lifecycle runs (§3.3 "Agentic Scheduling", §4.3).
//!
//! - `fixed`: a full round (every action) whenever at least B signals are pending.
//! - `agentic`: after each signal the `mars_plan` role sees a summary of the
//!   belief state and the pending signals and answers with actions or wait
//!   (offline heuristic: [`super::roles::offline_plan`]). As in the paper's
//!   Appendix F ("demote 'Churchill'"), the planner may name the chunks that
//!   boost, demote, merge and forget act on ([`Actions::targets`]); an
//!   action it names without targets keeps its default rule (see
//!   [`super::lifecycle`]). The fixed scheduler names none.
//!
//! Independently of the scheduler, a round is forced when the FIFO is about to
//! evict a pending signal (so no signal is lost unprocessed; paper silent),
//! and at `maintain(BeforeDecisions | EndOfStream)`.

use super::lifecycle::Lifecycle;
use super::polarity::Polarity;
use super::roles::{ChunkIn, PlanInput, PlanOutput, SignalIn};
use super::tiers::Chunk;
use std::collections::{BTreeMap, BTreeSet};

/// The lifecycle actions one round performs, and the chunks (ids) the
/// planner named for some of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    ops: BTreeSet<Lifecycle>,
    targets: BTreeMap<Lifecycle, Vec<String>>,
}

impl Actions {
    /// Every action, no targets (the fixed scheduler's round).
    pub fn all() -> Self {
        Self::from_list(&Lifecycle::ALL)
    }
    /// These actions, no targets.
    pub fn from_list(v: &[Lifecycle]) -> Self {
        Self {
            ops: v.iter().copied().collect(),
            targets: BTreeMap::new(),
        }
    }
    /// From a planner answer: its actions, and its targets for the actions
    /// it includes.
    pub fn from_plan(p: &PlanOutput) -> Self {
        let mut a = Self::from_list(&p.actions);
        a.targets = p
            .targets
            .iter()
            .filter(|(op, _)| a.ops.contains(op))
            .map(|(op, t)| (*op, t.clone()))
            .collect();
        a
    }
    /// Whether `a` is included.
    pub fn has(&self, a: Lifecycle) -> bool {
        self.ops.contains(&a)
    }
    /// The chunk ids the planner named for `a`, in its order; `None` when it
    /// named none (the action's default rule applies). `Some(&[])` means
    /// "this action, on no chunk".
    pub fn targets(&self, a: Lifecycle) -> Option<&[String]> {
        self.targets.get(&a).map(Vec::as_slice)
    }
    /// Whether the planner named targets for any action.
    pub fn is_targeted(&self) -> bool {
        !self.targets.is_empty()
    }
    /// True when nothing is to be done (wait).
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// What the planner is shown of one user's memory (gathered by the caller).
pub struct PlanView<'a> {
    /// The user.
    pub user: &'a str,
    /// Signals in the event FIFO not yet extracted.
    pub pending: Vec<SignalIn>,
    /// The user's preference chunks.
    pub chunks: &'a [Chunk],
    /// The same chunks as the planner's input shows them.
    pub chunk_ins: Vec<ChunkIn>,
    /// Events in the FIFO.
    pub fifo_len: usize,
    /// Chunk mutations since the profile was last synthesized.
    pub mutations: u32,
    /// Whether a profile exists.
    pub has_profile: bool,
    /// Near-duplicate chunk pairs (weaker, stronger).
    pub duplicate_pairs: Vec<(String, String)>,
}

/// Summary statistics for the planner, with the thresholds of `cfg`.
pub fn plan_input(view: PlanView<'_>, cfg: &super::config::MarsConfig) -> PlanInput {
    let PlanView {
        user,
        pending,
        chunks,
        chunk_ins,
        fifo_len,
        mutations,
        has_profile,
        duplicate_pairs,
    } = view;
    let (lmax, gamma, b) = (cfg.lmax, cfg.gamma, cfg.b);
    let (forget_below, forget_min_evidence, shift_min) =
        (cfg.forget_below, cfg.forget_min_evidence, cfg.shift_min);
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
        duplicates: duplicate_pairs.len(),
        duplicate_pairs,
        forget_below,
        forget_min_evidence,
        shift_min,
        mutations,
        gamma,
        has_profile,
        b,
    }
}
