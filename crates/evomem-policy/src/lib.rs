//! # evomem-policy
//!
//! Every memory policy behind the [`evomem_core::Policy`] trait, and the one
//! table that names them.
//!
//! - [`registry`] and [`families`]: the **family table** (one row per
//!   family: name, typed keys with their defaults, builder, ablation grids,
//!   capabilities) and the spec syntax `name[key=value,…]`. Everything that
//!   lists or builds policies (the CLI, `ablate`, `--policy all`, the
//!   service, `bench scale`, the conformance suite) reads this table.
//! - [`baselines`]: `no-memory`, `random`, `pop`, `itemknn`, `bpr`,
//!   `recent`.
//! - [`mars`]: MARS, hierarchical belief-state memory (event FIFO,
//!   preference chunks, synthesized profile; six lifecycle operations on a
//!   fixed cadence or by a planner; a single-pass mode and a paper budget).
//! - [`atomrec`]: AtomRec, atomic notes with semantic links, field-level
//!   evolution and multi-hop evidence paths.
//! - In [`families`]: `seqmem` (sequence memory with per-data-set fitted
//!   weights), `memrl` and `romerl` (trajectory memories with learned
//!   utilities, sharing [`utility`]), and `tide` (guidelines credited from
//!   delayed multi-objective feedback, for generation and prediction).
//! - [`fit`]: the run-time fit of ranker weights that MARS and AtomRec
//!   share (its five keys, written once, and `FitSettings<N>`).
//!
//! Large families are folders under `families/`, not crates: they share
//! the registry, the kit and the core types, and a family's room is its
//! folder (its prompts in `prompts/<role>.md` at this crate's root). Policies decide and return
//! ops; they never write memory themselves.

pub mod families;
pub mod fit;
pub mod registry;
pub mod utility;

// Every family lives under `families/`; the large ones keep their paths at
// the crate root for callers.
pub use families::{atomrec, baselines, mars};

pub use registry::{family, Capabilities, Family, FamilyKind, PolicyDeps, PolicySpec, FAMILIES};
