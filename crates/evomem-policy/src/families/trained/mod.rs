//! The trained baselines: `sasrec` and `lightgcn`, the trained sequential
//! and graph models the MARS and AtomRec papers compare memory with.
//!
//! The models live in `evomem-train` (candle); this module feeds them
//! exactly what the protocol let the policy observe and nothing else:
//!
//! - **Training data.** Every interaction that went through `observe`, in
//!   observation order per user (the replay's time order, ties by file
//!   order), except each user's latest one, which is held out.
//! - **Validation.** The held-out interactions are the validation decisions
//!   ([`evomem_kit::holdout`], the rule every run-time fit shares): the
//!   target against 9 unseen items drawn by the run seed. Under the
//!   retrospective protocol of a test run they are the users' validation
//!   interactions; test targets are never observed, so never read. Early
//!   stopping reads them and nothing else.
//! - **Decisions.** SASRec reads the user's whole observed sequence (the
//!   held-out item included, as RecBole scores its test set); LightGCN the
//!   user's and the candidates' embeddings from the graph it trained on.
//!
//! Training happens at `maintain(BeforeDecisions)`, and again at
//! `maintain(Tick)` once `retrain_every` new interactions have been
//! observed (the evolving protocol): the first round is cold with `epochs`
//! at most, later rounds warm-start for at most `warm_epochs`. Data that
//! cannot train a model (no sequence of two items, no users) is an error
//! that fails the run with the reason; a `sasrec` run never quietly becomes
//! something else. `metrics.json` → `stats.training` reports every round
//! (epochs, best epoch, validation figures, losses) and the weights'
//! checksum.

pub mod lightgcn;
pub mod sasrec;

use evomem_core::{Interaction, MaintainTrigger, PolicyError};
use evomem_kit::holdout::{self, Event, HoldOutSettings, NegativePool};
use evomem_train::{TrainError, Validation};

/// Negatives per validation decision (RecBole's `uni9`, the harness's 9).
pub const VALID_NEGATIVES: usize = 9;

/// Whether a training round is due at `trigger` (module docs): before the
/// decisions when nothing is trained yet or something new was observed; on
/// a tick once `retrain_every` (> 0) new interactions arrived.
pub(crate) fn round_due(
    trigger: MaintainTrigger,
    trained: bool,
    fresh: usize,
    retrain_every: u64,
) -> bool {
    match trigger {
        MaintainTrigger::BeforeDecisions => !trained || fresh > 0,
        MaintainTrigger::Tick => retrain_every > 0 && fresh as u64 >= retrain_every,
        MaintainTrigger::EndOfStream => false,
    }
}

/// A trainer's error as a policy error (settings stay config errors).
pub(crate) fn policy_error(e: TrainError) -> PolicyError {
    match e {
        TrainError::Config { .. } => PolicyError::Config(e.to_string()),
        other => PolicyError::Other(other.to_string()),
    }
}

/// The interactions a trained baseline observed, and the split it trains
/// and validates on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    /// Every observed event, in order.
    pub events: Vec<Event>,
    /// Items per user (dense index), in observation order.
    pub seqs: Vec<Vec<u32>>,
}

/// What one training round reads.
pub(crate) struct Split {
    /// Per user, the observed items without the held-out one.
    pub train: Vec<Vec<u32>>,
    /// The held-out decisions.
    pub valid: Vec<Validation>,
}

impl Seen {
    pub fn record(&mut self, e: &Interaction) {
        let (u, i) = (e.user.0, e.item.0);
        self.events.push((u, i, Some(e.timestamp)));
        let u = u as usize;
        if self.seqs.len() <= u {
            self.seqs.resize(u + 1, Vec::new());
        }
        self.seqs[u].push(i);
    }

    /// Items of the catalog and of what was observed, whichever is larger.
    pub fn n_items(&self, catalog: usize) -> usize {
        let seen = self
            .events
            .iter()
            .map(|e| e.1 as usize + 1)
            .max()
            .unwrap_or(0);
        catalog.max(seen)
    }

    /// Hold out each user's latest event (module docs).
    pub fn split(&self, n_items: usize, seed: u64) -> Split {
        let settings = HoldOutSettings {
            negatives: VALID_NEGATIVES,
            users: 0,
            seed,
            pool: NegativePool::Auto,
        };
        let (held, decisions) = holdout::hold_out(&self.events, n_items, &settings);
        let mut train: Vec<Vec<u32>> = vec![Vec::new(); self.seqs.len()];
        for (&(u, i, _), &h) in self.events.iter().zip(&held) {
            if !h {
                if let Some(s) = train.get_mut(u as usize) {
                    s.push(i);
                }
            }
        }
        let valid = decisions
            .into_iter()
            .map(|d| Validation {
                history: train.get(d.user as usize).cloned().unwrap_or_default(),
                user: d.user,
                target: d.target,
                negatives: d.negatives,
            })
            .collect();
        Split { train, valid }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::{ItemId, LogicalTime, UserId};

    fn ev(u: u32, i: u32, t: u64) -> Interaction {
        Interaction {
            user: UserId(u),
            item: ItemId(i),
            rating: None,
            timestamp: t as i64,
            time: LogicalTime(t),
        }
    }

    #[test]
    fn the_latest_item_of_each_user_is_held_out_of_training() {
        let mut s = Seen::default();
        for (k, (u, i)) in [(0, 1), (1, 2), (0, 3), (0, 4), (1, 5), (2, 6)]
            .into_iter()
            .enumerate()
        {
            s.record(&ev(u, i, k as u64));
        }
        let split = s.split(20, 42);
        assert_eq!(split.train, vec![vec![1, 3], vec![2], vec![6]]);
        let v: Vec<(u32, u32, Vec<u32>)> = split
            .valid
            .iter()
            .map(|d| (d.user, d.target, d.history.clone()))
            .collect();
        assert_eq!(v, vec![(0, 4, vec![1, 3]), (1, 5, vec![2])]);
        // Negatives are items the user never touched (here the observed
        // pool: most of the catalog of 20 was never observed).
        for d in &split.valid {
            assert!(!d.negatives.is_empty() && d.negatives.len() <= VALID_NEGATIVES);
            let mine = &s.seqs[d.user as usize];
            assert!(d.negatives.iter().all(|n| !mine.contains(n)), "{d:?}");
        }
    }
}
