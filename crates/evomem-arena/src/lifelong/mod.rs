//! LifelongAgentBench DB tasks, executed for real.
//!
//! - [`types`]: the task, table and memory-view types every part shares;
//! - [`task`]: reading `db_bench_data.json` (its fields are Python literals);
//! - [`sqlenv`]: one episode's fresh in-memory SQLite database, with the
//!   MySQL compatibility the tasks were written for;
//! - [`judge`]: LifelongAgentBench's judge (rows for a query, the table's
//!   md5 for a statement that changes data), and its validation against
//!   every ground-truth SQL;
//! - [`nl2sql`], [`adapt`], [`agent`]: the frozen decider. The `act` role's
//!   offline algorithm is a rule-based instruction-to-SQL parser with
//!   case-based adaptation of retrieved trajectories; with a model
//!   configured, the same role asks an LLM through the hub;
//! - [`run`]: the arena loop (runtime learning and transfer settings, noise
//!   injection, the agent's reuse of a null action) and its metrics;
//! - [`report`]: the run's JSON, Markdown report and plots;
//! - [`verdict`]: the paper's claims, judged on per-seed paired
//!   differences within each rule for nulled memories.

pub mod adapt;
pub mod agent;
pub mod judge;
pub mod nl2sql;
pub mod report;
pub mod run;
pub mod sqlenv;
pub mod task;
pub mod types;
pub mod verdict;

pub use types::{Cell, Column, DbTask, MemoryView, Table};
