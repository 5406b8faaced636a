//! `sasrec`: SASRec (Kang and McAuley, ICDM 2018) trained on what the
//! protocol let the policy observe (module docs of [`super`] for the
//! split, `evomem_train::sasrec` for the model and its defaults).

use super::{policy_error, round_due, Seen};
use crate::families::baselines::scored;
use crate::registry::{Capabilities, Family, FamilyKind, Key, KeyType, PolicyDeps, PolicySpec};
use evomem_core::{
    DecisionQuery, Interaction, MaintainTrigger, PlannedOp, Policy, PolicyCtx, PolicyError, Recall,
};
use evomem_train::sasrec::{Loss, SasRec, SasRecConfig};
use evomem_train::TrainReport;
use std::collections::HashMap;

/// `sasrec`.
pub const FAMILY: Family = Family {
    name: "sasrec",
    kind: FamilyKind::Neural,
    summary: "SASRec: causal self-attention over the user's sequence, trained on observed interactions (candle)",
    keys: &[
        Key { name: "hidden", ty: KeyType::Count, default: "64", doc: "embedding and hidden size (RecBole)" },
        Key { name: "layers", ty: KeyType::Count, default: "2", doc: "self-attention blocks (the paper, RecBole)" },
        Key { name: "heads", ty: KeyType::Count, default: "2", doc: "attention heads (RecBole)" },
        Key { name: "inner", ty: KeyType::Count, default: "256", doc: "feed-forward inner size (RecBole)" },
        Key { name: "dropout", ty: KeyType::Number, default: "0.5", doc: "hidden dropout (RecBole)" },
        Key { name: "attn_dropout", ty: KeyType::Number, default: "0.5", doc: "attention dropout (RecBole)" },
        Key { name: "max_len", ty: KeyType::Count, default: "50", doc: "longest sequence window (RecBole's MAX_ITEM_LIST_LENGTH)" },
        Key { name: "stride", ty: KeyType::Count, default: "25", doc: "window stride for longer sequences; each target sees at least max_len - stride items" },
        Key { name: "lr", ty: KeyType::Number, default: "0.001", doc: "Adam learning rate (RecBole)" },
        Key { name: "batch", ty: KeyType::Count, default: "2048", doc: "targets per batch (RecBole's train_batch_size)" },
        Key { name: "epochs", ty: KeyType::Count, default: "300", doc: "epoch cap of the first training (RecBole)" },
        Key { name: "patience", ty: KeyType::Count, default: "10", doc: "epochs without a validation NDCG@10 gain before stopping; 0 never (RecBole's stopping_step)" },
        Key { name: "loss", ty: KeyType::Choice(&["ce", "bce"]), default: "ce", doc: "ce: softmax cross-entropy over every item (RecBole CE); bce: the paper's binary loss with one sampled negative" },
        Key { name: "retrain_every", ty: KeyType::Count, default: "5000", doc: "evolving protocol: interactions between warm retrains; 0 never" },
        Key { name: "warm_epochs", ty: KeyType::Count, default: "5", doc: "epoch cap of a warm retrain" },
        Key { name: "threads", ty: KeyType::Count, default: "0", doc: "training threads; 0 = the run's threads setting" },
    ],
    build,
    grids: &[],
    caps: Capabilities::RANK_BASELINE,
};

fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let loss = match spec.value::<String>("loss")?.as_str() {
        "ce" => Loss::Ce,
        "bce" => Loss::Bce,
        other => {
            return Err(PolicyError::Config(format!(
                "sasrec: `loss` must be ce or bce, got {other}"
            )))
        }
    };
    let cfg = SasRecConfig {
        hidden: spec.value("hidden")?,
        layers: spec.value("layers")?,
        heads: spec.value("heads")?,
        inner: spec.value("inner")?,
        dropout: spec.value("dropout")?,
        attn_dropout: spec.value("attn_dropout")?,
        max_len: spec.value("max_len")?,
        stride: spec.value("stride")?,
        lr: spec.value("lr")?,
        batch: spec.value("batch")?,
        epochs: spec.value("epochs")?,
        patience: spec.value("patience")?,
        loss,
        seed: deps.seed,
        threads: spec.value("threads")?,
    };
    // Settings are checked now, not at the first training.
    SasRec::new(cfg.clone(), 1).map_err(policy_error)?;
    Ok(Box::new(SasRecPolicy {
        cfg,
        retrain_every: spec.value("retrain_every")?,
        warm_epochs: spec.value("warm_epochs")?,
        seen: Seen::default(),
        model: None,
        trained_at: 0,
        rounds: Vec::new(),
        cache: HashMap::new(),
    }))
}

/// The `sasrec` policy.
pub struct SasRecPolicy {
    cfg: SasRecConfig,
    retrain_every: u64,
    warm_epochs: usize,
    seen: Seen,
    model: Option<SasRec>,
    /// Events observed at the last training.
    trained_at: usize,
    rounds: Vec<TrainReport>,
    /// User → (sequence length it was computed at, output vector).
    cache: HashMap<u32, (usize, Vec<f32>)>,
}

impl SasRecPolicy {
    fn train(&mut self, catalog: usize) -> Result<(), PolicyError> {
        let n_items = self.seen.n_items(catalog);
        let split = self.seen.split(n_items, self.cfg.seed);
        let (mut model, epochs) = match self.model.take() {
            Some(m) if m.n_items() == n_items => (m, self.warm_epochs),
            _ => (
                SasRec::new(self.cfg.clone(), n_items).map_err(policy_error)?,
                self.cfg.epochs,
            ),
        };
        let report = model
            .train(&split.train, &split.valid, epochs)
            .map_err(policy_error)?;
        self.rounds.push(report);
        self.model = Some(model);
        self.trained_at = self.seen.events.len();
        self.cache.clear();
        Ok(())
    }

    fn vectors_for(&mut self, users: &[u32]) -> Result<(), PolicyError> {
        let Some(model) = &self.model else {
            return Ok(());
        };
        let empty: Vec<u32> = Vec::new();
        let mut todo: Vec<u32> = users
            .iter()
            .copied()
            .filter(|u| {
                let len = self.seen.seqs.get(*u as usize).map_or(0, Vec::len);
                self.cache.get(u).is_none_or(|c| c.0 != len)
            })
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return Ok(());
        }
        let seqs: Vec<&[u32]> = todo
            .iter()
            .map(|&u| self.seen.seqs.get(u as usize).unwrap_or(&empty).as_slice())
            .collect();
        let v = model.user_vectors(&seqs).map_err(policy_error)?;
        let d = self.cfg.hidden;
        for (k, &u) in todo.iter().enumerate() {
            let len = seqs[k].len();
            self.cache.insert(u, (len, v[k * d..(k + 1) * d].to_vec()));
        }
        Ok(())
    }
}

impl Policy for SasRecPolicy {
    fn name(&self) -> &str {
        "sasrec"
    }

    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.seen.record(event);
        Ok(Vec::new())
    }

    fn prepare_recalls(
        &mut self,
        ctx: &PolicyCtx<'_>,
        queries: &[DecisionQuery],
    ) -> Result<(), PolicyError> {
        if self.model.is_none() {
            self.train(ctx.catalog.len())?;
        }
        let users: Vec<u32> = queries.iter().map(|q| q.user.0).collect();
        self.vectors_for(&users)
    }

    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        if self.model.is_none() {
            self.train(ctx.catalog.len())?;
        }
        self.vectors_for(&[query.user.0])?;
        let d = self.cfg.hidden;
        let items = self.model.as_ref().map(SasRec::item_table).unwrap_or(&[]);
        let h = self
            .cache
            .get(&query.user.0)
            .map(|c| c.1.as_slice())
            .unwrap_or(&[]);
        let scores = query
            .candidates()
            .iter()
            .map(|c| {
                let i = c.index();
                match (items.get(i * d..(i + 1) * d), h.len() == d) {
                    (Some(e), true) => f64::from(e.iter().zip(h).map(|(a, b)| a * b).sum::<f32>()),
                    _ => 0.0,
                }
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
            "loss": match self.cfg.loss { Loss::Ce => "ce", Loss::Bce => "bce" },
            "training": self.rounds,
            "weights_sha256": self.model.as_ref().and_then(|m| m.checksum().ok()),
        })
    }
}
