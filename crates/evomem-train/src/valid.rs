//! Validation decisions and early stopping.
//!
//! A trainer is handed held-out validation decisions (each user's latest
//! *observed* interaction, never a test target: `evomem_kit::holdout`),
//! scores them after every epoch, and keeps the weights of the epoch with
//! the best NDCG@10 (RecBole's `valid_metric`), stopping after `patience`
//! epochs without a gain. Ties between candidates count as half places,
//! the rule of every run-time fit in evomem.

use serde::Serialize;

/// One validation decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// The user (dense index).
    pub user: u32,
    /// What the model may read as the user's history: the items before the
    /// held-out one, oldest first (sequence models read it; graph models
    /// read the user).
    pub history: Vec<u32>,
    /// The held-out item.
    pub target: u32,
    /// Items the user never touched.
    pub negatives: Vec<u32>,
}

/// 1-based rank of `target` among `negatives` (ties: half places).
pub fn rank_of(target: f32, negatives: &[f32]) -> f64 {
    let mut r = 1.0;
    for &n in negatives {
        if n > target {
            r += 1.0;
        } else if n == target {
            r += 0.5;
        }
    }
    r
}

/// NDCG@10 of one decision whose target ranked `rank`.
pub fn ndcg10(rank: f64) -> f64 {
    if rank <= 10.0 {
        1.0 / (rank + 1.0).log2()
    } else {
        0.0
    }
}

/// Mean NDCG@10 and HR@1 of `ranks`.
pub fn figures(ranks: &[f64]) -> (f64, f64) {
    if ranks.is_empty() {
        return (0.0, 0.0);
    }
    let n = ranks.len() as f64;
    let ndcg = ranks.iter().map(|&r| ndcg10(r)).sum::<f64>() / n;
    let hr1 = ranks.iter().filter(|&&r| r <= 1.0).count() as f64 / n;
    (ndcg, hr1)
}

/// What a training round did (`stats.training` in `metrics.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct TrainReport {
    /// Epochs run.
    pub epochs_run: usize,
    /// The epoch whose weights are kept (1-based; 0 = none ran).
    pub best_epoch: usize,
    /// Validation NDCG@10 of the kept weights.
    pub best_valid_ndcg10: f64,
    /// Validation HR@1 of the kept weights.
    pub best_valid_hr1: f64,
    /// Validation decisions.
    pub valid_decisions: usize,
    /// Mean training loss per epoch.
    pub loss: Vec<f64>,
    /// Validation NDCG@10 per epoch.
    pub valid_ndcg10: Vec<f64>,
    /// Training targets (positions or pairs) per epoch.
    pub targets_per_epoch: usize,
    /// Optimiser steps per epoch.
    pub steps_per_epoch: usize,
    /// Why training stopped: `patience`, `epochs` or `no validation`.
    pub stopped_by: String,
    /// Wall seconds of training (not part of the reproducible bytes:
    /// `metrics.json` leaves it out; `timing.json` has the policy's time).
    #[serde(skip)]
    pub seconds: f64,
}

/// Early stopping on validation NDCG@10.
#[derive(Debug, Clone)]
pub struct Stopping {
    patience: usize,
    best: Option<(usize, f64, f64)>,
    since: usize,
}

impl Stopping {
    /// Stop after `patience` epochs without a gain (0 = never stop early).
    pub fn new(patience: usize) -> Self {
        Self {
            patience,
            best: None,
            since: 0,
        }
    }

    /// Record epoch `epoch`'s figures; true when they are the best so far
    /// (the caller keeps these weights).
    pub fn record(&mut self, epoch: usize, ndcg: f64, hr1: f64) -> bool {
        match self.best {
            Some((_, b, _)) if ndcg <= b => {
                self.since += 1;
                false
            }
            _ => {
                self.best = Some((epoch, ndcg, hr1));
                self.since = 0;
                true
            }
        }
    }

    /// True once `patience` epochs passed without a gain.
    pub fn should_stop(&self) -> bool {
        self.patience > 0 && self.since >= self.patience
    }

    /// `(epoch, ndcg, hr1)` of the best epoch.
    pub fn best(&self) -> Option<(usize, f64, f64)> {
        self.best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_ndcg() {
        assert_eq!(rank_of(1.0, &[0.0, 0.5]), 1.0);
        assert_eq!(rank_of(0.5, &[1.0, 0.5]), 2.5);
        assert!((ndcg10(1.0) - 1.0).abs() < 1e-12);
        assert!((ndcg10(3.0) - 0.5).abs() < 1e-12);
        assert_eq!(ndcg10(11.0), 0.0);
        assert_eq!(figures(&[1.0, 3.0]), (0.75, 0.5));
    }

    #[test]
    fn stopping_keeps_the_best_and_waits_patience() {
        let mut s = Stopping::new(2);
        assert!(s.record(1, 0.5, 0.1));
        assert!(s.record(2, 0.6, 0.2));
        assert!(!s.record(3, 0.6, 0.3));
        assert!(!s.should_stop());
        assert!(!s.record(4, 0.55, 0.3));
        assert!(s.should_stop());
        assert_eq!(s.best(), Some((2, 0.6, 0.2)));
    }
}
