//! The run-time fit of a ranker's weights that MARS and AtomRec share
//! (`fit=auto`): its five keys, written once for both family rows, and the
//! settings they are read into. Each family keeps what differs: the weights
//! it fits (their names are keys of its own), how it recalls a held-out
//! decision, and where the fit keys sit in its row.
//!
//! The fit itself is [`evomem_kit::pairwise`] on decisions drawn by
//! [`evomem_kit::holdout`] (one set per negative pool,
//! [`evomem_kit::holdout::fit_pools`]); `mars::fit`, `atomrec::fit` and
//! `seqmem::fit` build the decisions, and every one keeps the given weights
//! unless the fitted ones beat them on each pool's held-out half
//! ([`evomem_kit::pairwise::verdict`]).

use crate::registry::{Key, KeyType, PolicySpec};
use evomem_core::PolicyError;
use evomem_kit::holdout::NegativePool;
use serde::Serialize;

/// The keys of `fit`, in the order the family rows list them.
pub(crate) const FIT_KEYS: &[Key] = &[
    Key {
        name: "fit",
        ty: KeyType::Choice(&["none", "auto"]),
        default: "none",
        doc: "auto: fit the ranker's weights at run time on held-out validation decisions (never test targets), used when they beat the given weights there; weights given in the spec stay pinned; none: the given weights",
    },
    Key {
        name: "fit_negatives",
        ty: KeyType::Count,
        default: "9",
        doc: "negatives per fit decision, items the user never touched",
    },
    Key {
        name: "fit_users",
        ty: KeyType::Count,
        default: "2000",
        doc: "fit decisions at most (a seeded sample of users); 0 = every user with two or more observed interactions",
    },
    Key {
        name: "fit_min",
        ty: KeyType::Count,
        default: "200",
        doc: "fewest fit decisions whose weights are used; below, the given weights stand",
    },
    Key {
        name: "fit_pool",
        ty: KeyType::Choice(&["auto", "catalog", "observed"]),
        default: "auto",
        doc: "where fit negatives come from: the catalog, observed items, or auto (the catalog; when fewer than half the catalog's items were observed, both, and the fit must win on each)",
    },
];

/// A family's keys: `head`, then [`FIT_KEYS`] with `fit` defaulting to
/// `fit_default` (`"none"` or `"auto"`), then `tail`. `N` is their total
/// count; the family rows call this in a `const`, so the check that it is
/// right runs when the crate compiles, never at run time.
pub(crate) const fn with_fit_keys<const N: usize>(
    head: &[Key],
    tail: &[Key],
    fit_default: &'static str,
) -> [Key; N] {
    assert!(
        head.len() + FIT_KEYS.len() + tail.len() == N,
        "with_fit_keys: N is not the number of keys"
    );
    let mut out = [FIT_KEYS[0]; N];
    let mut i = 0;
    while i < head.len() {
        out[i] = head[i];
        i += 1;
    }
    let mut j = 0;
    while j < FIT_KEYS.len() {
        out[i + j] = FIT_KEYS[j];
        j += 1;
    }
    out[i].default = fit_default;
    let mut k = 0;
    while k < tail.len() {
        out[i + j + k] = tail[k];
        k += 1;
    }
    out
}

/// Settings of `fit` (one field per key) for a ranker of `N` weights.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitSettings<const N: usize> {
    /// `fit=auto` (true) or `fit=none`.
    pub auto: bool,
    /// Negatives per decision (`fit_negatives`).
    pub negatives: usize,
    /// Fewest decisions whose fit is used (`fit_min`).
    pub min_decisions: usize,
    /// Decisions at most, a seeded sample of users (`fit_users`; 0 = all).
    pub users: usize,
    /// Where negatives come from (`fit_pool`).
    #[serde(serialize_with = "pool_name")]
    pub pool: NegativePool,
    /// Weights given in the spec, held fixed (in the family's feature
    /// order; not a key of its own).
    #[serde(skip)]
    pub pinned: [Option<f64>; N],
}

fn pool_name<S: serde::Serializer>(p: &NegativePool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.name())
}

impl<const N: usize> FitSettings<N> {
    /// Read `fit` and its keys from `spec`, every one whatever `fit` says.
    /// `features` names the ranker's weights (keys of the same family) and
    /// `given` holds their values as read; a weight the spec writes stays
    /// pinned at its value.
    pub fn from_spec(
        spec: &PolicySpec,
        features: [&str; N],
        given: [f64; N],
    ) -> Result<Self, PolicyError> {
        let auto = match spec.value::<String>("fit")?.as_str() {
            "none" => false,
            "auto" => true,
            other => {
                return Err(PolicyError::Config(format!(
                    "{}: `fit` must be auto or none, got {other}",
                    spec.name
                )))
            }
        };
        let mut pinned = [None; N];
        for ((pin, key), value) in pinned.iter_mut().zip(features).zip(given) {
            if spec.params.contains_key(key) {
                *pin = Some(value);
            }
        }
        let k = HoldOutKeys::from_spec(spec)?;
        Ok(Self {
            auto,
            negatives: k.negatives,
            min_decisions: k.min_decisions,
            users: k.users,
            pool: k.pool,
            pinned,
        })
    }
}

/// The hold-out keys of every run-time fit, seqmem's included:
/// `fit_negatives`, `fit_min`, `fit_users` and `fit_pool`.
pub(crate) struct HoldOutKeys {
    pub(crate) negatives: usize,
    pub(crate) min_decisions: usize,
    pub(crate) users: usize,
    pub(crate) pool: NegativePool,
}

impl HoldOutKeys {
    /// Read them from `spec` (the defaults of its family's row).
    pub(crate) fn from_spec(spec: &PolicySpec) -> Result<Self, PolicyError> {
        Ok(Self {
            negatives: spec.value("fit_negatives")?,
            min_decisions: spec.value("fit_min")?,
            users: spec.value("fit_users")?,
            pool: spec
                .value::<String>("fit_pool")?
                .parse()
                .map_err(|e| PolicyError::Config(format!("{}: `fit_pool`: {e}", spec.name)))?,
        })
    }
}
