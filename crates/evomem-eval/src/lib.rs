//! # evomem-eval
//!
//! The ranking arena: data loaders, leakage-free protocols, the decider,
//! metrics aggregation, the paired bootstrap, run directories and reports.
//!
//! The flow of one evaluation:
//!
//! 1. [`data::load`] reads a dataset (RecBole, AgentCF, iAgent JSONL, plain JSONL)
//!    and the SHA-256 of every file it read;
//! 2. [`protocol::Plan::build`] turns it into decisions (target, shuffled
//!    candidates) under the retrospective or evolving protocol, once, so every
//!    policy ranks exactly the same candidates;
//! 3. [`replay::run_policy`] drives one policy through the plan: it shows the
//!    policy only what the protocol allows, applies its ops through an
//!    [`evomem_store::Engine`], and asks the [`decider::Decider`] to rank;
//! 4. [`run::run_eval`] does that for several policy specs and writes the run
//!    directory (`metrics.json`, `per_user.jsonl`, `ops.jsonl.zst`,
//!    `decisions.jsonl`, `config.json`, `summary.json`, `report.md`);
//! 5. [`bootstrap::paired_bootstrap`] compares two runs user by user.
//!
//! ```
//! use evomem_eval::protocol::{Plan, ProtocolConfig};
//! use evomem_eval::synthetic::synthetic_dataset;
//! let data = synthetic_dataset(20, 50, 15, 7);
//! let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
//! assert_eq!(plan.decisions.len(), 20);
//! assert!(plan.decisions.iter().all(|d| d.candidates.len() == 10));
//! ```

pub mod bootstrap;
pub mod compare;
pub mod compat;
pub mod data;
pub mod decider;
pub mod error;
pub mod plot;
pub mod protocol;
pub mod replay;
pub mod report;
pub mod run;
pub mod scalegen;
pub mod synthetic;

pub use error::EvalError;
