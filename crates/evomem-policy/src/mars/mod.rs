//! MARS: hierarchical belief-state memory (event, preference, profile tiers)
//! with a six-operation lifecycle and fixed or agentic scheduling
//! (`../shared/papers/mars-hierarchical-belief-state-memory.txt`).
//!
//! - [`config`]: hyperparameters and the `mars[...]` spec keys;
//! - [`categories`]: six preference categories per domain and item facets;
//! - [`tiers`]: the records of the three tiers and a per-user working view;
//! - [`roles`]: `mars_extract`, `mars_synthesize`, `mars_plan`, `mars_categories`;
//! - [`lifecycle`]: extract, boost, demote, merge, forget, synthesize;
//! - [`scheduler`]: fixed every B signals, or agentic through the planner;
//! - [`ranker`]: the offline ranker over the consumed tiers;
//! - [`knowledge`]: the offline stand-in for the frozen LLM's world knowledge
//!   (item familiarity and co-consumption), learned from observed interactions;
//! - [`policy`]: the [`Mars`] policy tying them together.
//!
//! Signal polarity: ml-100k ratings ≥ 4 are positive, ≤ 2 negative, 3
//! neutral (`pos_min`, `neg_max`); interactions without a rating (CDs) are
//! positive.

pub mod categories;
pub mod config;
pub mod knowledge;
pub mod lifecycle;
pub mod policy;
pub mod ranker;
pub mod roles;
pub mod scheduler;
pub mod tiers;

pub use config::{MarsConfig, Scheduler, Tiers};
pub use policy::Mars;

use crate::registry::{PolicyDeps, PolicySpec};
use evomem_core::{Policy, PolicyError};
use std::collections::BTreeMap;

/// Build a `mars` policy from its spec.
pub fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let cfg = MarsConfig::from_spec(spec)?;
    Ok(Box::new(Mars::new(
        spec.to_string(),
        cfg,
        deps.embedder.clone(),
        deps.llm.clone(),
        deps.seed,
    )))
}

fn spec(params: &[(&str, &str)]) -> PolicySpec {
    PolicySpec {
        name: "mars".into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// Named ablation grids (§4.4): `tiers` (the 2³ factorial), `kcat`
/// (2, 4, 8, 16) and `sched` (fixed, agentic).
pub fn grid(name: &str) -> Result<Vec<PolicySpec>, PolicyError> {
    match name {
        "tiers" => Ok(["none", "e", "f", "p", "ef", "ep", "fp", "efp"]
            .iter()
            .map(|t| spec(&[("tiers", t)]))
            .collect()),
        "kcat" => Ok(["2", "4", "8", "16"]
            .iter()
            .map(|k| spec(&[("kcat", k)]))
            .collect()),
        "sched" => Ok(["fixed", "agentic"]
            .iter()
            .map(|s| spec(&[("sched", s)]))
            .collect()),
        other => Err(PolicyError::Config(format!(
            "mars: unknown grid `{other}` (known: tiers, kcat, sched)"
        ))),
    }
}
