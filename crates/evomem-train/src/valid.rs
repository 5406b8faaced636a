//! Validation decisions and early stopping.
//!
//! A trainer is handed held-out validation decisions (each user's latest
//! *observed* interaction, never a test target: `evomem_kit::holdout`),
//! scores them after every epoch, and keeps the weights of the epoch with
//! the best NDCG@10 (RecBole's `valid_metric`), stopping after `patience`
//! epochs without a gain. Ties between candidates count as half places,
//! the rule of every run-time fit in evomem.

use crate::{env, nn, TrainError, TrainEvent};
use candle_core::{Tensor, Var};
use serde::Serialize;
use std::time::Instant;

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

/// 1-based rank of `target` among `negatives` (ties: half places), the
/// rule of every run-time fit ([`evomem_kit::holdout::rank_of`]).
pub fn rank_of(target: f32, negatives: &[f32]) -> f64 {
    let negs: Vec<f64> = negatives.iter().map(|&n| f64::from(n)).collect();
    evomem_kit::holdout::rank_of(f64::from(target), &negs)
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

/// One training round's bookkeeping, shared by both trainers: each
/// epoch's loss and validation figures into the report, a snapshot of the
/// best epoch's weights, the observer's event, the early stop; at the end
/// the best weights restored.
pub(crate) struct Round<'a> {
    model: &'static str,
    vars: &'a [Var],
    epochs: usize,
    validated: bool,
    stop: Stopping,
    best: Option<Vec<Tensor>>,
    started: Instant,
    report: TrainReport,
}

impl<'a> Round<'a> {
    /// A round of at most `epochs` epochs over `vars`.
    pub(crate) fn new(
        model: &'static str,
        vars: &'a [Var],
        epochs: usize,
        patience: usize,
        valid_decisions: usize,
        targets_per_epoch: usize,
    ) -> Self {
        Self {
            model,
            vars,
            epochs,
            validated: valid_decisions > 0,
            stop: Stopping::new(patience),
            best: None,
            started: Instant::now(),
            report: TrainReport {
                valid_decisions,
                targets_per_epoch,
                ..TrainReport::default()
            },
        }
    }

    /// Record epoch `epoch`; true when training should stop. Without
    /// validation decisions it never stops early.
    pub(crate) fn epoch(
        &mut self,
        epoch: usize,
        loss: f64,
        steps: usize,
        (ndcg, hr1): (f64, f64),
    ) -> Result<bool, TrainError> {
        let r = &mut self.report;
        r.loss.push(loss);
        r.epochs_run = epoch;
        r.steps_per_epoch = steps;
        r.valid_ndcg10.push(ndcg);
        if self.validated && self.stop.record(epoch, ndcg, hr1) {
            self.best = Some(nn::snapshot(self.vars)?);
        }
        let stop = self.validated && self.stop.should_stop();
        env::report(&TrainEvent {
            model: self.model,
            epoch,
            epochs: self.epochs,
            loss,
            valid_ndcg10: self.validated.then_some(ndcg),
            best_epoch: self.stop.best().map_or(0, |b| b.0),
            seconds: self.started.elapsed().as_secs_f64(),
            done: stop || epoch == self.epochs,
        });
        if !loss.is_finite() {
            return Err(TrainError::Data {
                model: self.model,
                why: format!("the loss diverged at epoch {epoch} ({loss})"),
            });
        }
        Ok(stop)
    }

    /// The best epoch's weights restored, and the report.
    pub(crate) fn finish(self) -> Result<TrainReport, TrainError> {
        let mut r = self.report;
        if !self.validated {
            r.stopped_by = "no validation".into();
            r.best_epoch = r.epochs_run;
            return Ok(r);
        }
        if let Some(snap) = &self.best {
            nn::restore(self.vars, snap)?;
        }
        let (e, n, h) = self.stop.best().unwrap_or((0, 0.0, 0.0));
        r.best_epoch = e;
        r.best_valid_ndcg10 = n;
        r.best_valid_hr1 = h;
        r.stopped_by = if self.stop.should_stop() {
            "patience"
        } else {
            "epochs"
        }
        .into();
        Ok(r)
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
