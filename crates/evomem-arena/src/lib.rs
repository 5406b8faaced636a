//! The arenas: where the families that learn from tasks and delayed
//! feedback are measured.
//!
//! From the RoMeRL paper (`romerl-reduced-order-utility-memory`):
//! - [`bandit`]: the recurrent non-stationary K-armed bandit toy that tests
//!   the two-timescale argument (C+C, A+A and C+A two-slot memories);
//! - [`lifelong`]: LifelongAgentBench's 500 DB tasks, each executed for real
//!   in a fresh in-memory SQLite database, judged as LifelongAgentBench
//!   judges them, with a frozen decider (a documented rule-based SQL agent
//!   with case-based adaptation, or an LLM through the OpenAI-compatible
//!   backend) and a memory policy from the family table in between, with
//!   noise injection.
//!
//! From the TIDE paper (`tide-…`):
//! - [`generation`]: Arena A, a seeded simulator of content requests with
//!   hidden context-dependent effects, shocks, delayed lifecycles and
//!   injected noise; Responsibility F1, Correct Edit, Bad-Memory Survival and
//!   Future MEG on strictly future tasks;
//! - [`delayed`]: Arena B, every ml-100k rating predicted before it is
//!   revealed and matured δ ratings later, with reference methods as typed
//!   rows of its own table.
//!
//! Shared: Student-t intervals over seeds ([`stats`]) and charts ([`plot`]).
//! Every arena writes a run folder with JSON metrics, a Markdown report and
//! SVG plots.

pub mod bandit;
pub mod delayed;
pub mod error;
pub mod generation;
pub mod lifelong;
pub mod plot;
pub mod stats;

pub use error::ArenaError;
