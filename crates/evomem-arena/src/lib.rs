//! Lifelong-task arenas: where RoMeRL, MemRL and its variants are measured.
//!
//! Two arenas from the RoMeRL paper (`romerl-reduced-order-utility-memory`):
//!
//! - [`bandit`]: the recurrent non-stationary K-armed bandit toy that tests
//!   the two-timescale argument (C+C, A+A and C+A two-slot memories);
//! - [`lifelong`]: LifelongAgentBench's 500 DB tasks, each executed for real
//!   in a fresh in-memory SQLite database, judged as LifelongAgentBench
//!   judges them, with a frozen decider (a documented rule-based SQL agent
//!   with case-based adaptation, or an LLM through the OpenAI-compatible
//!   backend) and a memory policy from the family table in between.
//!
//! Both write a run folder with JSON metrics, a Markdown report and SVG plots.

pub mod bandit;
pub mod delayed;
pub mod error;
pub mod generation;
pub mod lifelong;
pub mod plot;
pub mod stats;

pub use error::ArenaError;
