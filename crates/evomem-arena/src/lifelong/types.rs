//! Types shared by the task reader, the SQLite environment, the judge, the
//! agent and the arena loop.
//!
//! The ground truth of a task ([`Truth`]) is crate-private: the agent and
//! the memory policies get a [`DbTask`] through its public fields only
//! (instruction, table, skills), and the judge's verdict comes back to them
//! as a success bit. That is the leak boundary the arena's canary test checks.

use serde::{Deserialize, Serialize};

/// A cell value, as the task file gives it and SQLite returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Cell {
    /// SQL NULL (Python `None`).
    Null,
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text.
    Text(String),
}

/// A column: name and declared type (`INT`, `TEXT`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Name.
    pub name: String,
    /// Declared SQL type, as written in the task file.
    pub ty: String,
}

/// The task's one table: name, columns and initial rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// Table name (LifelongAgentBench also names the database after it).
    pub name: String,
    /// Columns in order.
    pub columns: Vec<Column>,
    /// Initial rows.
    pub rows: Vec<Vec<Cell>>,
}

/// A literal from the task file's expected answer, with its source text:
/// the number of decimals written matters when comparing floats (MySQL
/// prints `AVG` with four decimals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Literal {
    /// The value.
    pub cell: Cell,
    /// Its text in the file (`63.3333`, `'North'`, `None`).
    pub text: String,
}

/// What the judge compares against.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expected {
    /// A query: the expected rows (`answer_info.direct`).
    Rows(Vec<Vec<Literal>>),
    /// A statement that changes data: the md5 of the table afterwards
    /// (`answer_info.md5`).
    Md5(String),
}

/// The ground truth. Environment-side only; never reaches an agent or a
/// memory policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Truth {
    /// Expected answer.
    pub(crate) expected: Expected,
    /// The ground-truth SQL (used only to validate the judge).
    pub(crate) sql: String,
}

/// One DB task.
#[derive(Debug, Clone, PartialEq)]
pub struct DbTask {
    /// `sample_index` (also the JSON key).
    pub index: usize,
    /// The natural-language instruction.
    pub instruction: String,
    /// The table the episode starts from.
    pub table: Table,
    /// The task's skills (`select`, `group_by_single_column`, ...).
    pub skills: Vec<String>,
    pub(crate) truth: Truth,
}

impl DbTask {
    /// Stable task id for memory (`db-<index>`).
    pub fn id(&self) -> String {
        format!("db-{}", self.index)
    }
}

/// A retrieved trajectory memory as the agent sees it: built by the arena
/// from the memory record a policy returned. `answer` is `None` for an
/// entry whose action was nulled (the noise-injection protocol).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryView {
    /// The task text the memory was made from.
    pub task: String,
    /// Name of that task's table.
    pub table: String,
    /// Columns of that task's table.
    pub columns: Vec<String>,
    /// The committed SQL, if the memory carries one.
    pub answer: Option<String>,
    /// The steps taken (SQL and the database's answers).
    pub steps: Vec<evomem_core::EpisodeStep>,
    /// Outcome y: whether the judge accepted the committed answer.
    pub success: bool,
    /// Retrieval score the policy gave it.
    pub score: f32,
}
