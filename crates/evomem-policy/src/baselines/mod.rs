//! The ranking baselines: `random`, `pop`, `itemknn` and `bpr`.
//!
//! They are the anchors every memory policy is compared with in the same run.
//! None of them writes memory: each keeps its own model state (counts,
//! co-occurrence lists, factor matrices) built only from the interactions it
//! was shown through [`Policy::observe`], so they are leakage-free by
//! construction. `recall` returns policy-native candidate scores in
//! [`DecisionContext::scores`] (aligned with the query's candidates, higher is
//! better) and an empty usage trace.
//!
//! | name | parameters (default) | model |
//! |---|---|---|
//! | `random` | none | seeded uniform scores per decision |
//! | `pop` | none | number of observed interactions of the item |
//! | `itemknn` | `k` (0 = all neighbours) | item-item cosine over co-occurrence |
//! | `bpr` | `dim` (64), `epochs` (40), `lr` (0.05), `reg` (0.005), `retrain_every` (5000), `warm_epochs` (5) | BPR matrix factorization |
//!
//! See each module for the formulas.

mod bpr;
mod itemknn;
mod observed;
mod pop;
mod random;

pub use bpr::{Bpr, BprConfig};
pub use itemknn::ItemKnn;
pub use observed::Observed;
pub use pop::Pop;
pub use random::RandomScores;

use crate::registry::{PolicyDeps, PolicySpec};
use evomem_core::{DecisionContext, DecisionQuery, Policy, PolicyError, Recall, UsageTrace};

/// Build a baseline policy from its spec (`random`, `pop`, `itemknn`, `bpr`).
pub fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    match spec.name.as_str() {
        "random" => {
            spec.check_known(&[])?;
            Ok(Box::new(RandomScores::new(deps.seed)))
        }
        "pop" => {
            spec.check_known(&[])?;
            Ok(Box::new(Pop::new()))
        }
        "itemknn" => {
            spec.check_known(&["k"])?;
            Ok(Box::new(ItemKnn::new(spec.get("k", 0usize)?)))
        }
        "bpr" => {
            spec.check_known(&["dim", "epochs", "lr", "reg", "retrain_every", "warm_epochs"])?;
            let d = BprConfig::default();
            let cfg = BprConfig {
                dim: spec.get("dim", d.dim)?,
                epochs: spec.get("epochs", d.epochs)?,
                lr: spec.get("lr", d.lr)?,
                reg: spec.get("reg", d.reg)?,
                retrain_every: spec.get("retrain_every", d.retrain_every)?,
                warm_epochs: spec.get("warm_epochs", d.warm_epochs)?,
                seed: deps.seed,
            };
            Ok(Box::new(Bpr::new(cfg)?))
        }
        other => Err(PolicyError::Config(format!(
            "`{other}` is not a baseline (random, pop, itemknn, bpr)"
        ))),
    }
}

/// The recall every baseline returns: scores only, no memory used.
pub(crate) fn scored(query: &DecisionQuery, scores: Vec<f64>) -> Recall {
    Recall {
        context: DecisionContext {
            profile: None,
            entries: Vec::new(),
            scores: Some(scores),
        },
        trace: UsageTrace::for_query(query),
    }
}
