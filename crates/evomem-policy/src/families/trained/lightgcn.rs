//! `lightgcn`: LightGCN (He et al., SIGIR 2020) trained on what the
//! protocol let the policy observe (module docs of [`super`] for the
//! split, `evomem_train::lightgcn` for the model and its defaults).
//!
//! The graph holds the training pairs (each user's observed items but the
//! held-out latest), as RecBole's graph holds its training split; a user
//! or item the graph does not hold scores 0.

use super::{policy_error, round_due, Seen};
use crate::families::baselines::scored;
use crate::registry::{Capabilities, Family, FamilyKind, Key, KeyType, PolicyDeps, PolicySpec};
use evomem_core::{
    DecisionQuery, Interaction, MaintainTrigger, PlannedOp, Policy, PolicyCtx, PolicyError, Recall,
};
use evomem_train::lightgcn::{LightGcn, LightGcnConfig};
use evomem_train::TrainReport;

/// `lightgcn`.
pub const FAMILY: Family = Family {
    name: "lightgcn",
    kind: FamilyKind::Neural,
    summary: "LightGCN: user and item embeddings propagated over the interaction graph, trained with BPR (candle)",
    keys: &[
        Key { name: "dim", ty: KeyType::Count, default: "64", doc: "embedding size (the paper, RecBole)" },
        Key { name: "layers", ty: KeyType::Count, default: "3", doc: "propagation layers (the paper's K)" },
        Key { name: "reg", ty: KeyType::Number, default: "0.0001", doc: "L2 on the ego embeddings of a batch (the paper's lambda)" },
        Key { name: "lr", ty: KeyType::Number, default: "0.001", doc: "Adam learning rate (the paper, RecBole)" },
        Key { name: "batch", ty: KeyType::Count, default: "2048", doc: "pairs per batch (RecBole's train_batch_size)" },
        Key { name: "epochs", ty: KeyType::Count, default: "300", doc: "epoch cap of the first training (RecBole)" },
        Key { name: "patience", ty: KeyType::Count, default: "50", doc: "epochs without a validation NDCG@10 gain before stopping; 0 never (the paper's 50: with 3 layers the validation curve dips for over 10 epochs before it rises)" },
        Key { name: "retrain_every", ty: KeyType::Count, default: "5000", doc: "evolving protocol: interactions between warm retrains; 0 never" },
        Key { name: "warm_epochs", ty: KeyType::Count, default: "5", doc: "epoch cap of a warm retrain" },
        Key { name: "threads", ty: KeyType::Count, default: "0", doc: "training threads; 0 = the run's threads setting" },
    ],
    build,
    grids: &[],
    caps: Capabilities::RANK_BASELINE,
};

fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let cfg = LightGcnConfig {
        dim: spec.value("dim")?,
        layers: spec.value("layers")?,
        reg: spec.value("reg")?,
        lr: spec.value("lr")?,
        batch: spec.value("batch")?,
        epochs: spec.value("epochs")?,
        patience: spec.value("patience")?,
        seed: deps.seed,
        threads: spec.value("threads")?,
    };
    // Settings are checked now, not at the first training.
    LightGcn::new(cfg.clone(), 1, 2, &[]).map_err(policy_error)?;
    Ok(Box::new(LightGcnPolicy {
        cfg,
        retrain_every: spec.value("retrain_every")?,
        warm_epochs: spec.value("warm_epochs")?,
        seen: Seen::default(),
        model: None,
        trained_at: 0,
        rounds: Vec::new(),
    }))
}

/// The `lightgcn` policy.
pub struct LightGcnPolicy {
    cfg: LightGcnConfig,
    retrain_every: u64,
    warm_epochs: usize,
    seen: Seen,
    model: Option<LightGcn>,
    trained_at: usize,
    rounds: Vec<TrainReport>,
}

impl LightGcnPolicy {
    fn train(&mut self, catalog: usize) -> Result<(), PolicyError> {
        let n_items = self.seen.n_items(catalog);
        let n_users = self.seen.seqs.len();
        let split = self.seen.split(n_items, self.cfg.seed);
        let pairs: Vec<(u32, u32)> = split
            .train
            .iter()
            .enumerate()
            .flat_map(|(u, s)| s.iter().map(move |&i| (u as u32, i)))
            .collect();
        // A warm round keeps the embeddings when the graph's nodes are the
        // same; new users or items start a cold round.
        let warm = self
            .model
            .as_ref()
            .is_some_and(|m| m.size() == (n_users, n_items));
        let (mut model, epochs) = match (warm, self.model.take()) {
            (true, Some(m)) => (m.with_graph(&pairs), self.warm_epochs),
            _ => (
                LightGcn::new(self.cfg.clone(), n_users, n_items, &pairs).map_err(policy_error)?,
                self.cfg.epochs,
            ),
        };
        let report = model
            .train(&pairs, &split.valid, epochs)
            .map_err(policy_error)?;
        self.rounds.push(report);
        self.model = Some(model);
        self.trained_at = self.seen.events.len();
        Ok(())
    }
}

impl Policy for LightGcnPolicy {
    fn name(&self) -> &str {
        "lightgcn"
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
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        if self.model.is_none() {
            self.train(ctx.catalog.len())?;
        }
        let scores = query
            .candidates()
            .iter()
            .map(|c| {
                self.model
                    .as_ref()
                    .map_or(0.0, |m| f64::from(m.score(query.user.0, c.0)))
            })
            .collect();
        Ok(scored(query, scores))
    }

    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let fresh = self.seen.events.len() - self.trained_at;
        if round_due(trigger, self.model.is_some(), fresh, self.retrain_every) {
            self.train(ctx.catalog.len())?;
        }
        Ok(Vec::new())
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "observed": self.seen.events.len(),
            "training": self.rounds,
            "weights_sha256": self.model.as_ref().and_then(|m| m.checksum().ok()),
        })
    }
}
