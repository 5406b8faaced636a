//! The baselines: `no-memory`, `random`, `pop`, `itemknn`, `bpr` and
//! `recent`.
//!
//! They are the anchors every memory policy is compared with in the same run.
//! `no-memory` keeps nothing (the reference for Memory Evolution Gain) and
//! `recent` scores candidates by similarity to the user's last k items. The
//! others write no memory: each keeps its own model state (counts,
//! co-occurrence lists, factor matrices) built only from the interactions it
//! was shown through [`Policy::observe`], so they are leakage-free by
//! construction. `recall` returns policy-native candidate scores in
//! [`DecisionContext::scores`] (aligned with the query's candidates, higher is
//! better) and an empty usage trace.
//!
//! | name | parameters | model |
//! |---|---|---|
//! | `no-memory` | none | nothing: the decider sees the candidates alone |
//! | `random` | none | seeded uniform scores per decision |
//! | `pop` | none | number of observed interactions of the item |
//! | `itemknn` | `k` (0 = all neighbours) | item-item cosine over co-occurrence |
//! | `bpr` | `dim`, `epochs`, `lr`, `reg`, `retrain_every`, `warm_epochs` | BPR matrix factorization |
//! | `recent` | `k`, `decay` | embedding similarity to the user's last k items |
//!
//! Defaults are in the family rows below (`evomem eval --help` lists them).
//! See each module for the formulas.

mod bpr;
mod itemknn;
mod no_memory;
mod pop;
mod random;
pub mod recent;

pub use bpr::{Bpr, BprConfig};
pub use itemknn::{ItemKnn, MAX_CO_USERS};
pub use no_memory::NoMemory;
pub use pop::Pop;
pub use random::RandomScores;

use crate::registry::{Capabilities, Family, FamilyKind, Key, KeyType, PolicyDeps, PolicySpec};
use evomem_core::{DecisionContext, DecisionQuery, Policy, PolicyError, Recall, UsageTrace};

/// `no-memory`: remembers nothing; the reference for Memory Evolution Gain.
pub const NO_MEMORY: Family = Family {
    name: "no-memory",
    kind: FamilyKind::Baseline,
    summary: "remembers nothing (the decider alone; MEG reference)",
    keys: &[],
    build: |_, _| Ok(Box::new(NoMemory)),
    grids: &[],
    caps: evomem_core::family::NO_MEMORY,
};

/// `random`: seeded uniform scores per decision.
pub const RANDOM: Family = Family {
    name: "random",
    kind: FamilyKind::Baseline,
    summary: "seeded uniform scores per decision",
    keys: &[],
    build: |_, deps| Ok(Box::new(RandomScores::new(deps.seed))),
    grids: &[],
    caps: Capabilities::RANK_BASELINE,
};

/// `pop`: observed interaction count of the item.
pub const POP: Family = Family {
    name: "pop",
    kind: FamilyKind::Baseline,
    summary: "observed interaction count of the item",
    keys: &[],
    build: |_, _| Ok(Box::new(Pop::new())),
    grids: &[],
    caps: Capabilities::RANK_BASELINE,
};

/// `itemknn`: item-item cosine over co-occurrence.
pub const ITEMKNN: Family = Family {
    name: "itemknn",
    kind: FamilyKind::Baseline,
    summary: "item-item cosine over observed co-occurrence",
    keys: &[
        Key {
            name: "k",
            ty: KeyType::Count,
            default: "0",
            doc: "neighbours per item, 0 = all",
        },
        Key {
            name: "shrink",
            ty: KeyType::Number,
            default: "0",
            doc: "similarity shrinkage: co / (sqrt(n_i n_j) + shrink); 0 = the cosine",
        },
        Key {
            name: "fit",
            ty: KeyType::Choice(&["auto", "none"]),
            default: "auto",
            doc: "auto: choose shrink at run time on the visible data's held-out last interactions (validation decisions, never test targets); none: the shrink given",
        },
    ],
    build: build_itemknn,
    grids: &[],
    caps: Capabilities::RANK_BASELINE,
};

fn build_itemknn(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let k = spec.value("k")?;
    let shrink = spec.value("shrink")?;
    let fit = match spec.value::<String>("fit")?.as_str() {
        // A shrink given in the spec is pinned.
        "auto" if !spec.params.contains_key("shrink") => Some(deps.seed),
        "auto" | "none" => None,
        other => {
            return Err(PolicyError::Config(format!(
                "itemknn: `fit` must be auto or none, got {other}"
            )))
        }
    };
    Ok(Box::new(ItemKnn::with_fit(k, shrink, fit)?))
}

/// `bpr`: BPR matrix factorisation trained on observed interactions.
pub const BPR: Family = Family {
    name: "bpr",
    kind: FamilyKind::Trained,
    summary: "BPR matrix factorisation on observed interactions",
    keys: &[
        Key {
            name: "dim",
            ty: KeyType::Count,
            default: "64",
            doc: "factor dimension",
        },
        Key {
            name: "epochs",
            ty: KeyType::Count,
            default: "40",
            doc: "epochs of the full training before decisions",
        },
        Key {
            name: "lr",
            ty: KeyType::Number,
            default: "0.05",
            doc: "SGD learning rate",
        },
        Key {
            name: "reg",
            ty: KeyType::Number,
            default: "0.005",
            doc: "L2 regularisation",
        },
        Key {
            name: "retrain_every",
            ty: KeyType::Count,
            default: "5000",
            doc: "evolving protocol: interactions between warm retrains",
        },
        Key {
            name: "warm_epochs",
            ty: KeyType::Count,
            default: "5",
            doc: "epochs of a warm retrain",
        },
        Key {
            name: "fit",
            ty: KeyType::Choice(&["auto", "none"]),
            default: "none",
            doc: "auto: choose reg before the first training on the visible data's held-out last interactions (validation decisions, never test targets); none: the reg given",
        },
    ],
    build: build_bpr,
    grids: &[],
    caps: Capabilities::RANK_BASELINE,
};

fn build_bpr(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    Ok(Box::new(Bpr::new(BprConfig::from_spec(spec, deps.seed)?)?))
}

/// The recall every baseline returns: scores only, no memory used.
pub(crate) fn scored(query: &DecisionQuery, scores: Vec<f64>) -> Recall {
    Recall {
        context: DecisionContext {
            profile: None,
            entries: Vec::new(),
            scores: Some(scores),
            ..DecisionContext::default()
        },
        trace: UsageTrace::for_query(query),
    }
}
