//! MARS: hierarchical belief-state memory (event, preference, profile tiers)
//! with a six-operation lifecycle and fixed or agentic scheduling
//! (`../shared/papers/mars-hierarchical-belief-state-memory.txt`).
//!
//! - [`config`]: hyperparameters (the `mars[...]` keys are [`FAMILY`]'s);
//! - [`categories`]: six preference categories per domain and item facets;
//! - [`polarity`]: a signal's [`Polarity`] (liked, neutral, disliked);
//! - [`tiers`]: the records of the three tiers and a per-user working view;
//! - [`roles`]: `mars_extract`, `mars_synthesize`, `mars_plan`, `mars_categories`;
//! - [`lifecycle`]: the six operations ([`Lifecycle`]: extract, boost, demote,
//!   merge, forget, synthesize) and the rounds that plan them;
//! - [`scheduler`]: fixed every B signals, or agentic through the planner
//!   (which may name the chunks its actions apply to);
//! - [`single_pass`]: the paper's retrospective mode (`mode=single-pass`):
//!   one extraction and one synthesis per user over the whole history;
//! - [`recall`]: what a decision reads from the consumed tiers;
//! - [`ranker`]: the offline ranker over the consumed tiers;
//! - [`fit`]: `fit=auto`, the ranker's four weights fitted at run time on
//!   held-out validation decisions;
//! - [`knowledge`]: the offline stand-in for the frozen LLM's world knowledge
//!   (item familiarity and co-consumption), learned from observed interactions;
//! - [`embeddings`]: the per-run item and text embedding caches;
//! - [`policy`]: the [`Mars`] policy tying them together. Roles are called
//!   through [`evomem_kit::RoleCaller`]: a hub error fails the run.
//!
//! Signal polarity: ml-100k ratings ≥ 4 are positive, ≤ 2 negative, 3
//! neutral (`pos_min`, `neg_max`); interactions without a rating (CDs) are
//! positive.

pub mod categories;
pub mod config;
pub mod embeddings;
pub mod fit;
pub mod knowledge;
pub mod lifecycle;
pub mod polarity;
pub mod policy;
pub mod ranker;
pub mod recall;
pub mod roles;
pub mod scheduler;
pub mod single_pass;
pub mod tiers;

pub use config::{Budget, MarsConfig, Mode, Scheduler, Tiers};
pub use lifecycle::Lifecycle;
pub use polarity::Polarity;
pub use policy::Mars;

use crate::fit::{with_fit_keys, FIT_KEYS};
use crate::registry::{Family, Grid, Key, KeyType, PolicyDeps, PolicySpec};
use evomem_core::{Policy, PolicyError};

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

/// The `mars` family row.
pub const FAMILY: Family = Family {
    name: "mars",
    kind: crate::registry::FamilyKind::Memory,
    summary: "MARS: event FIFO, preference chunks, synthesized profile; six lifecycle ops",
    keys: &KEYS,
    build,
    grids: &[
        Grid {
            name: "tiers",
            doc: "tier factorial (§4.4)",
            specs: &[
                "mars[tiers=none]",
                "mars[tiers=e]",
                "mars[tiers=f]",
                "mars[tiers=p]",
                "mars[tiers=ef]",
                "mars[tiers=ep]",
                "mars[tiers=fp]",
                "mars[tiers=efp]",
            ],
        },
        Grid {
            name: "kcat",
            doc: "chunks per category K_cat",
            specs: &["mars[kcat=2]", "mars[kcat=4]", "mars[kcat=8]", "mars[kcat=16]"],
        },
        Grid {
            name: "sched",
            doc: "fixed cadence against the planner",
            specs: &["mars[sched=fixed]", "mars[sched=agentic]"],
        },
        Grid {
            name: "mode",
            doc: "incremental rounds against the retrospective single pass (§4.1)",
            specs: &["mars[mode=incremental]", "mars[mode=single-pass]"],
        },
    ],
    caps: evomem_core::family::MARS,
};

/// The row's keys: its own, then the fit keys ([`crate::fit::FIT_KEYS`]).
const KEYS: [Key; OWN_KEYS.len() + FIT_KEYS.len()] = with_fit_keys(OWN_KEYS, &[], "auto");

const OWN_KEYS: &[Key] = &[
    Key {
        name: "tiers",
        ty: KeyType::Text,
        default: "ep",
        doc: "tiers the ranker consumes: any of e (events), f (preference chunks), p (profile), or none (§4.4)",
    },
    Key {
        name: "kcat",
        ty: KeyType::Count,
        default: "4",
        doc: "max chunks per category K_cat (paper: flat over 2..16)",
    },
    Key {
        name: "sched",
        ty: KeyType::Choice(&["fixed", "agentic"]),
        default: "fixed",
        doc: "lifecycle scheduler: fixed cadence or planner",
    },
    Key {
        name: "mode",
        ty: KeyType::Choice(&["incremental", "single-pass"]),
        default: "incremental",
        doc: "incremental rounds as signals arrive, or the retrospective single pass of §4.1 (one extract + one synthesize per user)",
    },
    Key {
        name: "sp_window",
        ty: KeyType::Count,
        default: "0",
        doc: "single pass: most recent pending signals the one extraction reads, 0 = all (§4.1)",
    },
    Key {
        name: "budget",
        ty: KeyType::Choice(&["full", "paper"]),
        default: "full",
        doc: "LLM budget: full, or paper = the single pass (implies mode=single-pass) over the last 10 signals (sp_window) with the brief prompts, an 80-word profile (profile_words) and titles only in the ranker's events; 3 calls per user (§4.5: 3 calls, 3,870 tokens)",
    },
    Key {
        name: "profile_words",
        ty: KeyType::Count,
        default: "300",
        doc: "word limit of the synthesized profile (§3.3: 150–300); budget=paper: 80",
    },
    Key {
        name: "lmax",
        ty: KeyType::Count,
        default: "15",
        doc: "event FIFO capacity L_max (§4.1)",
    },
    Key {
        name: "b",
        ty: KeyType::Count,
        default: "5",
        doc: "fixed scheduler: pending signals per lifecycle round (paper silent)",
    },
    Key {
        name: "delta_plus",
        ty: KeyType::Number,
        default: "0.1",
        doc: "boost step δ+ (Appendix F)",
    },
    Key {
        name: "delta_minus",
        ty: KeyType::Number,
        default: "0.2",
        doc: "demote step δ− (Appendix F; must exceed δ+)",
    },
    Key {
        name: "gamma",
        ty: KeyType::Count,
        default: "5",
        doc: "forced synthesis every γ chunk mutations (Appendix F)",
    },
    Key {
        name: "forget_below",
        ty: KeyType::Number,
        default: "0.35",
        doc: "forget a chunk whose strength falls below this",
    },
    Key {
        name: "forget_min_evidence",
        ty: KeyType::Count,
        default: "2",
        doc: "... once it has at least this much evidence",
    },
    Key {
        name: "merge_threshold",
        ty: KeyType::Number,
        default: "0.92",
        doc: "merge two chunks of a category at this embedding cosine",
    },
    Key {
        name: "min_support",
        ty: KeyType::Count,
        default: "2",
        doc: "offline extractor: positive support for a new chunk",
    },
    Key {
        name: "shift_min",
        ty: KeyType::Count,
        default: "3",
        doc: "offline extractor: positive signals elsewhere that contradict a chunk",
    },
    Key {
        name: "pos_min",
        ty: KeyType::Number,
        default: "4",
        doc: "ratings at or above this are positive signals",
    },
    Key {
        name: "neg_max",
        ty: KeyType::Number,
        default: "2",
        doc: "ratings at or below this are negative signals",
    },
    Key {
        name: "n_categories",
        ty: KeyType::Count,
        default: "6",
        doc: "preference categories per domain (Table 6)",
    },
    Key {
        name: "lm_categories",
        ty: KeyType::Bool,
        default: "true",
        doc: "derive the domain's categories with the model (mars_categories; budget=paper defaults to false); off, the metadata-derived categories are used, counted as scheduled offline",
    },
    Key {
        name: "category_sample",
        ty: KeyType::Count,
        default: "200",
        doc: "items sampled to derive categories",
    },
    Key {
        name: "emb_weight",
        ty: KeyType::Number,
        default: "0.5",
        doc: "ranker: embedding similarity relative to facet match",
    },
    Key {
        name: "recency_decay",
        ty: KeyType::Number,
        default: "0.9",
        doc: "ranker: decay per event position",
    },
    Key {
        name: "prior",
        ty: KeyType::Number,
        default: "0.25",
        doc: "ranker: weight of item familiarity (chosen on validation)",
    },
    Key {
        name: "collab",
        ty: KeyType::Number,
        default: "2",
        doc: "ranker: weight of co-consumption relatedness (chosen on validation)",
    },
    Key {
        name: "content",
        ty: KeyType::Number,
        default: "0.35",
        doc: "ranker: weight of the tiers' content match (chosen on validation)",
    },
    Key {
        name: "walk",
        ty: KeyType::Number,
        default: "0",
        doc: "ranker: weight of the two-step co-consumption walk from the event tier's items (sparse data without item text; 0 = off, fitted under fit=auto)",
    },
];
