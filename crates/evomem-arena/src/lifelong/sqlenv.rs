//! One episode's database: a fresh in-memory SQLite copy of the task's
//! table, a step budget, and a MySQL compatibility layer.
//!
//! LifelongAgentBench runs its DB tasks on MySQL, and both the ground-truth
//! SQL and the expected answers were produced there. We run SQLite (no
//! server, deterministic, fast), so every statement goes through
//! [`mysql_to_sqlite`], a small documented rewrite layer. It works on a
//! depth-aware token scan (quotes, comments and parentheses respected) and
//! only ever touches the top level of one statement. Its rules, and why:
//!
//! 1. **Spread aggregates.** MySQL has `STDDEV`/`STDDEV_POP`/`STD` and
//!    `VARIANCE`/`VAR_POP` (population) and `STDDEV_SAMP`/`VAR_SAMP`
//!    (sample); SQLite has none. They are registered as aggregate functions
//!    on every connection (not a text rewrite).
//! 2. **Multi-table `UPDATE`.** `UPDATE t [AS] a JOIN ... SET a.c = e, ...
//!    [WHERE w]` is MySQL-only. It becomes a snapshot batch: a temporary
//!    table of `(a.rowid, e, ...)` computed over the joined rows, then a
//!    plain `UPDATE t` that reads the new values from it. Computing every
//!    value first matches MySQL, which evaluates a multi-table update
//!    against the rows as they were before it.
//! 3. **Multi-table `DELETE`.** `DELETE a FROM t [AS] a JOIN ... [WHERE w]`
//!    becomes `DELETE FROM t WHERE rowid IN (SELECT a.rowid FROM t AS a JOIN
//!    ... [WHERE w])`.
//! 4. **Qualified `SET` targets.** MySQL accepts `UPDATE t AS a SET a.c =
//!    ...`; SQLite rejects a qualified target, so the qualifier is dropped.
//! 5. **`UPDATE`/`DELETE ... ORDER BY ... LIMIT`.** MySQL allows them on a
//!    single table; this SQLite build does not, so the statement becomes
//!    `... WHERE rowid IN (SELECT rowid FROM t [WHERE w] ORDER BY .. LIMIT
//!    ..)`.
//! 6. **Group order.** MySQL returns `GROUP BY` groups in order of first
//!    appearance; SQLite returns them sorted by the group key. That only
//!    matters with `LIMIT`/`OFFSET` (the judge compares unordered results
//!    as multisets), but it decides which groups a `LIMIT` keeps. A
//!    top-level `SELECT` with a top-level `GROUP BY` and no top-level
//!    `ORDER BY` gets `ORDER BY MIN(<first table>.rowid)` before its
//!    `LIMIT`; if that does not prepare (the first `FROM` item has no
//!    rowid), the statement runs unchanged.
//! 7. **Division.** MySQL's `/` never truncates (`7 / 2` is `3.5000`);
//!    SQLite divides integers as integers. Every `/` becomes `* 1.0 /`,
//!    which keeps precedence because `*` and `/` bind alike, left to right.
//! 8. **String literals.** MySQL reads backslash escapes in strings
//!    (`'O\'Brien'`) and, by default, `"..."` as a string, not an
//!    identifier. Such literals are re-written as SQLite `'...'` strings.
//! 9. **Floats stored into integer columns.** MySQL rounds a value
//!    assigned to an `INT` column (half away from zero); SQLite keeps the
//!    REAL. After every statement that is not a query, REAL values in the
//!    task table's integer-typed columns are rounded in place, so later
//!    queries, [`SqlEnv::table_rows`] and the judge's md5 all see what MySQL
//!    would hold. Halves are detected with a 1e-9 relative tolerance:
//!    MySQL computes `x * 1.1` exactly in DECIMAL, where a double may land
//!    a hair under `.5`.
//! 10. **Statements that read their own table.** MySQL changes the rows of
//!     a single-table `UPDATE`/`DELETE` one at a time as it scans them in
//!     primary-key order, and materializes a derived table in the `WHERE`
//!     only when it is first needed, so a subquery over the target table
//!     can see rows the statement already changed (task 424 deletes the
//!     rows below the average cost *or* of customers with more than three
//!     rentals; by the time the second test is first needed, two of the
//!     customer's four rows are gone). SQLite evaluates the whole `WHERE`
//!     against the table as it was. When a subquery names the target
//!     table, the statement runs as a stream instead: the rowids (and new
//!     values) the `WHERE` selects are read in rowid order and each row is
//!     changed before the next is read. Derived tables (`FROM (SELECT
//!     ...)`) become `MATERIALIZED` common table expressions, and SQLite,
//!     like MySQL, computes those and any uncorrelated subquery once, when
//!     first needed (task 134 shows a correlated subquery must read such a
//!     snapshot, not the changing table).
//!
//! Anything else runs as written. An SQL error is never a Rust error: it
//! is a failed [`StepOutcome`] carrying SQLite's message, which is what
//! the agent observes. Only one statement per step is accepted (a trailing
//! `;` is fine), and `ATTACH`, `DETACH` and `VACUUM` are refused because
//! they reach outside the episode's in-memory database.

use rusqlite::functions::{Aggregate, Context, FunctionFlags};
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::types::{Cell, DbTask, Table};
use crate::error::ArenaError;

/// Statements one episode may execute; the next one is refused.
pub const MAX_STEPS: usize = 15;

/// Rows shown in a query's [`StepOutcome::observation`] before truncating.
pub const MAX_OBSERVED_ROWS: usize = 40;

/// The temporary table of the multi-table `UPDATE` snapshot (rule 2).
const SNAPSHOT: &str = "temp.__evomem_snapshot";

/// What one executed statement gave back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepOutcome {
    /// Whether the statement ran.
    pub ok: bool,
    /// Result column names (queries only).
    pub columns: Vec<String>,
    /// Result rows (queries only).
    pub rows: Vec<Vec<Cell>>,
    /// Rows inserted, updated or deleted (statements only).
    pub changed: usize,
    /// The database's message, or why the step was refused.
    pub error: Option<String>,
    /// Whether the statement returned a result set.
    pub is_query: bool,
    /// Compact rendering for the agent: Python-like tuples for rows
    /// (`[(1, 'a'), (2, 'b')]`, truncated after [`MAX_OBSERVED_ROWS`]),
    /// `OK, 3 rows affected`, or `ERROR: ...`.
    pub observation: String,
}

impl StepOutcome {
    fn failure(message: String) -> StepOutcome {
        StepOutcome {
            ok: false,
            columns: Vec::new(),
            rows: Vec::new(),
            changed: 0,
            observation: format!("ERROR: {message}"),
            error: Some(message),
            is_query: false,
        }
    }

    fn query(columns: Vec<String>, rows: Vec<Vec<Cell>>) -> StepOutcome {
        let observation = render_rows(&rows);
        StepOutcome {
            ok: true,
            columns,
            rows,
            changed: 0,
            error: None,
            is_query: true,
            observation,
        }
    }

    fn statement(changed: usize) -> StepOutcome {
        let noun = if changed == 1 { "row" } else { "rows" };
        StepOutcome {
            ok: true,
            columns: Vec::new(),
            rows: Vec::new(),
            changed,
            error: None,
            is_query: false,
            observation: format!("OK, {changed} {noun} affected"),
        }
    }
}

/// One episode's database.
pub struct SqlEnv {
    conn: Connection,
    table: Table,
    sample: String,
    steps: usize,
}

impl std::fmt::Debug for SqlEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEnv")
            .field("table", &self.table.name)
            .field("sample", &self.sample)
            .field("steps", &self.steps)
            .finish()
    }
}

impl SqlEnv {
    /// A fresh in-memory database holding the task's table and rows.
    pub fn new(task: &DbTask) -> Result<SqlEnv, ArenaError> {
        let sample = task.index.to_string();
        let env_err = |message: String| ArenaError::Environment {
            sample: sample.clone(),
            message,
        };
        let conn = Connection::open_in_memory().map_err(|e| env_err(e.to_string()))?;
        register_aggregates(&conn).map_err(|e| env_err(format!("registering aggregates: {e}")))?;
        let table = &task.table;
        let cols: Vec<String> = table
            .columns
            .iter()
            .map(|c| format!("{} {}", quote_ident(&c.name), c.ty))
            .collect();
        let create = format!(
            "CREATE TABLE {} ({})",
            quote_ident(&table.name),
            cols.join(", ")
        );
        conn.execute(&create, [])
            .map_err(|e| env_err(format!("{create}: {e}")))?;
        let marks: Vec<String> = (1..=table.columns.len()).map(|i| format!("?{i}")).collect();
        let insert = format!(
            "INSERT INTO {} VALUES ({})",
            quote_ident(&table.name),
            marks.join(", ")
        );
        {
            let mut stmt = conn
                .prepare(&insert)
                .map_err(|e| env_err(format!("{insert}: {e}")))?;
            for (i, row) in table.rows.iter().enumerate() {
                let params: Vec<rusqlite::types::Value> = row.iter().map(to_value).collect();
                stmt.execute(rusqlite::params_from_iter(params))
                    .map_err(|e| env_err(format!("inserting row {i}: {e}")))?;
            }
        }
        Ok(SqlEnv {
            conn,
            table: table.clone(),
            sample,
            steps: 0,
        })
    }

    /// Statements executed so far (a refused one does not count).
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The table as the episode started.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Executes one statement through the MySQL compatibility layer. Never
    /// fails as Rust: errors and refusals are `ok: false` outcomes.
    pub fn execute(&mut self, sql: &str) -> StepOutcome {
        if self.steps >= MAX_STEPS {
            return StepOutcome::failure(format!(
                "step budget spent: an episode may execute at most {MAX_STEPS} statements"
            ));
        }
        let stmt = match single_statement(sql) {
            Ok(s) => s,
            Err(message) => return StepOutcome::failure(message),
        };
        self.steps += 1;
        let rewritten = mysql_to_sqlite(stmt);
        let outcome = self.run(&rewritten);
        if outcome.ok && !outcome.is_query {
            self.round_int_columns();
        }
        outcome
    }

    fn run(&mut self, rw: &Rewritten) -> StepOutcome {
        match &rw.plan {
            Plan::Single { sql, fallback } => self.run_one(sql, fallback.as_deref()),
            Plan::Batch { statements, answer } => self.run_batch(statements, *answer),
            Plan::RowByRow {
                select,
                apply,
                fallback,
            } => self.run_row_by_row(select, apply, fallback),
        }
    }

    /// Rule 10, inside a savepoint: all or nothing.
    fn run_row_by_row(&mut self, select: &str, apply: &str, fallback: &str) -> StepOutcome {
        if self.conn.prepare(select).is_err() {
            return self.run_one(fallback, None);
        }
        let sp = match self.conn.savepoint() {
            Ok(sp) => sp,
            Err(e) => return StepOutcome::failure(db_message(&e)),
        };
        let result = (|| -> rusqlite::Result<usize> {
            let mut sel = sp.prepare(select)?;
            let mut app = sp.prepare(apply)?;
            let n = sel.column_count();
            let mut rows = sel.query([])?;
            let mut changed = 0;
            while let Some(row) = rows.next()? {
                let params = (0..n)
                    .map(|i| row.get_ref(i).map(rusqlite::types::Value::from))
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                changed += app.execute(rusqlite::params_from_iter(params))?;
            }
            Ok(changed)
        })();
        match result {
            Ok(changed) => match sp.commit() {
                Ok(()) => StepOutcome::statement(changed),
                Err(e) => StepOutcome::failure(db_message(&e)),
            },
            // Dropping the savepoint rolls it back.
            Err(e) => StepOutcome::failure(db_message(&e)),
        }
    }

    fn run_one(&mut self, sql: &str, fallback: Option<&str>) -> StepOutcome {
        let before = self.conn.total_changes();
        let mut stmt = match self.conn.prepare(sql) {
            Ok(s) => s,
            Err(first) => match fallback {
                Some(f) => match self.conn.prepare(f) {
                    Ok(s) => s,
                    Err(e) => return StepOutcome::failure(db_message(&e)),
                },
                None => return StepOutcome::failure(db_message(&first)),
            },
        };
        if stmt.column_count() > 0 {
            let columns: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
            let mut rows = Vec::new();
            let mut cursor = match stmt.query([]) {
                Ok(c) => c,
                Err(e) => return StepOutcome::failure(db_message(&e)),
            };
            loop {
                match cursor.next() {
                    Ok(Some(row)) => {
                        let mut cells = Vec::with_capacity(columns.len());
                        for i in 0..columns.len() {
                            match row.get_ref(i) {
                                Ok(v) => cells.push(to_cell(v)),
                                Err(e) => return StepOutcome::failure(db_message(&e)),
                            }
                        }
                        rows.push(cells);
                    }
                    Ok(None) => break,
                    Err(e) => return StepOutcome::failure(db_message(&e)),
                }
            }
            StepOutcome::query(columns, rows)
        } else {
            match stmt.raw_execute() {
                Ok(_) => {
                    let changed = self.conn.total_changes().saturating_sub(before);
                    StepOutcome::statement(usize::try_from(changed).unwrap_or(usize::MAX))
                }
                Err(e) => StepOutcome::failure(db_message(&e)),
            }
        }
    }

    /// A rewritten batch (rule 2) runs inside a savepoint: all or nothing.
    fn run_batch(&mut self, statements: &[String], answer: usize) -> StepOutcome {
        let sp = match self.conn.savepoint() {
            Ok(sp) => sp,
            Err(e) => return StepOutcome::failure(db_message(&e)),
        };
        let mut changed = 0;
        for (i, sql) in statements.iter().enumerate() {
            match sp.execute(sql, []) {
                Ok(n) if i == answer => changed = n,
                Ok(_) => {}
                Err(e) => {
                    // Dropping the savepoint rolls it back.
                    drop(sp);
                    return StepOutcome::failure(format!(
                        "{} (in the SQLite form of a MySQL multi-table UPDATE)",
                        db_message(&e)
                    ));
                }
            }
        }
        match sp.commit() {
            Ok(()) => StepOutcome::statement(changed),
            Err(e) => StepOutcome::failure(db_message(&e)),
        }
    }

    /// Rule 9: round REAL values held in the task table's integer-typed
    /// columns, as MySQL would have on assignment. A table the agent
    /// dropped or reshaped without a rowid is left alone.
    fn round_int_columns(&mut self) {
        let Ok(columns) = self.current_columns() else {
            return;
        };
        let t = quote_ident(&self.table.name);
        for (name, ty) in columns {
            if !is_int_type(&ty) {
                continue;
            }
            let c = quote_ident(&name);
            let Ok(reals) = self.reals_in(&t, &c) else {
                continue;
            };
            for (rowid, value) in reals {
                // A rounding the table refuses (a UNIQUE column where the
                // rounded value already exists) leaves that value as the
                // statement stored it: the statement itself succeeded, and
                // the judge compares the table the agent left.
                let _refused = self.conn.execute(
                    &format!("UPDATE {t} SET {c} = ?1 WHERE rowid = ?2"),
                    rusqlite::params![mysql_int(value), rowid],
                );
            }
        }
    }

    /// `(rowid, value)` of the REAL values in column `c` of table `t`
    /// (both quoted).
    fn reals_in(&self, t: &str, c: &str) -> rusqlite::Result<Vec<(i64, f64)>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT rowid, {c} FROM {t} WHERE typeof({c}) = 'real'"
        ))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Names and declared types of the task table's current columns.
    fn current_columns(&self) -> rusqlite::Result<Vec<(String, String)>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT name, type FROM pragma_table_info({})",
            quote_literal(&self.table.name)
        ))?;
        let cols = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if cols.is_empty() {
            return Err(rusqlite::Error::QueryReturnedNoRows);
        }
        Ok(cols)
    }

    /// Current contents of the task table in rowid order, with a REAL in
    /// an integer-typed column shown as MySQL would hold it (rule 9).
    pub fn table_rows(&self) -> Result<Vec<Vec<Cell>>, ArenaError> {
        let env_err = |message: String| ArenaError::Environment {
            sample: self.sample.clone(),
            message,
        };
        let columns = self.current_columns().map_err(|e| {
            env_err(format!(
                "table `{}` is no longer readable: {e}",
                self.table.name
            ))
        })?;
        let t = quote_ident(&self.table.name);
        let list: Vec<String> = columns.iter().map(|(n, _)| quote_ident(n)).collect();
        let sql = format!("SELECT {} FROM {t} ORDER BY rowid", list.join(", "));
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(|e| env_err(format!("{sql}: {e}")))?;
        let ints: Vec<bool> = columns.iter().map(|(_, ty)| is_int_type(ty)).collect();
        let rows = stmt
            .query_map([], |r| {
                let mut cells = Vec::with_capacity(ints.len());
                for (i, int) in ints.iter().enumerate() {
                    let cell = match to_cell(r.get_ref(i)?) {
                        Cell::Real(x) if *int => Cell::Int(mysql_int(x)),
                        other => other,
                    };
                    cells.push(cell);
                }
                Ok(cells)
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| env_err(format!("{sql}: {e}")))?;
        Ok(rows)
    }
}

/// SQLite's message for an error, without rusqlite's wrapping.
fn db_message(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(_, Some(msg)) => msg.clone(),
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        other => other.to_string(),
    }
}

/// SQLite's affinity rule: a declared type containing `INT` is an integer
/// column.
fn is_int_type(ty: &str) -> bool {
    ty.to_ascii_uppercase().contains("INT")
}

/// MySQL's rounding of a number stored into an integer column: half away
/// from zero, with a 1e-9 relative tolerance for halves that floating
/// point computed a hair short (rule 9).
pub(crate) fn mysql_int(x: f64) -> i64 {
    if !x.is_finite() {
        return 0;
    }
    let t = x.trunc();
    let frac = (x - t).abs();
    let tol = 1e-9 * x.abs().max(1.0);
    let r = if frac + tol >= 0.5 { t + x.signum() } else { t };
    // Saturating float-to-int conversion.
    r as i64
}

/// `"name"` with inner quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'` with inner quotes doubled.
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn to_value(cell: &Cell) -> rusqlite::types::Value {
    use rusqlite::types::Value;
    match cell {
        Cell::Null => Value::Null,
        Cell::Int(i) => Value::Integer(*i),
        Cell::Real(f) => Value::Real(*f),
        Cell::Text(s) => Value::Text(s.clone()),
    }
}

fn to_cell(v: ValueRef<'_>) -> Cell {
    match v {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(i) => Cell::Int(i),
        ValueRef::Real(f) => Cell::Real(f),
        ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Cell::Text(format!("x'{}'", hex::encode(b))),
    }
}

/// Python's `repr` of a string: single quotes unless the text holds a
/// single quote and no double quote.
fn py_repr_str(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

/// A cell as Python would print it inside a tuple.
pub(crate) fn render_cell(cell: &Cell) -> String {
    match cell {
        Cell::Null => "None".to_string(),
        Cell::Int(i) => i.to_string(),
        Cell::Real(f) => format!("{f:?}"),
        Cell::Text(s) => py_repr_str(s),
    }
}

/// A row as a Python tuple: `(1, 'a')`, `(1,)`.
pub(crate) fn render_row(row: &[Cell]) -> String {
    let cells: Vec<String> = row.iter().map(render_cell).collect();
    if cells.len() == 1 {
        format!("({},)", cells.join(""))
    } else {
        format!("({})", cells.join(", "))
    }
}

fn render_rows(rows: &[Vec<Cell>]) -> String {
    let shown: Vec<String> = rows
        .iter()
        .take(MAX_OBSERVED_ROWS)
        .map(|r| render_row(r))
        .collect();
    let mut out = format!("[{}]", shown.join(", "));
    if rows.len() > MAX_OBSERVED_ROWS {
        out.push_str(&format!(
            " ... (first {MAX_OBSERVED_ROWS} of {} rows shown)",
            rows.len()
        ));
    }
    out
}

// ---------------------------------------------------------------------------
// Aggregates (rule 1).

/// Which spread an aggregate computes.
#[derive(Debug, Clone, Copy)]
struct Spread {
    /// Standard deviation (else variance).
    root: bool,
    /// Sample (n - 1) rather than population (n).
    sample: bool,
}

/// Welford's running count, mean and sum of squared deviations.
#[derive(Debug, Clone, Copy, Default)]
struct Moments {
    n: u64,
    mean: f64,
    m2: f64,
}

impl Aggregate<Moments, Option<f64>> for Spread {
    fn init(&self, _: &mut Context<'_>) -> rusqlite::Result<Moments> {
        Ok(Moments::default())
    }

    fn step(&self, ctx: &mut Context<'_>, acc: &mut Moments) -> rusqlite::Result<()> {
        let x = match ctx.get_raw(0) {
            ValueRef::Null => return Ok(()),
            ValueRef::Integer(i) => i as f64,
            ValueRef::Real(f) => f,
            // MySQL reads a string as the number it starts with (else 0).
            ValueRef::Text(t) => leading_number(&String::from_utf8_lossy(t)),
            ValueRef::Blob(_) => 0.0,
        };
        acc.n += 1;
        let delta = x - acc.mean;
        acc.mean += delta / acc.n as f64;
        acc.m2 += delta * (x - acc.mean);
        Ok(())
    }

    fn finalize(&self, _: &mut Context<'_>, acc: Option<Moments>) -> rusqlite::Result<Option<f64>> {
        let Some(m) = acc else {
            return Ok(None);
        };
        let denom = if self.sample {
            m.n.saturating_sub(1)
        } else {
            m.n
        };
        if denom == 0 {
            return Ok(None);
        }
        let var = m.m2 / denom as f64;
        Ok(Some(if self.root { var.sqrt() } else { var }))
    }
}

/// The number a text starts with, as MySQL converts strings (`'12abc'` is
/// 12, `'abc'` is 0).
fn leading_number(s: &str) -> f64 {
    let s = s.trim_start();
    let mut end = 0;
    for i in (1..=s.len()).rev() {
        if s.is_char_boundary(i) && s[..i].parse::<f64>().is_ok() {
            end = i;
            break;
        }
    }
    s[..end].parse().unwrap_or(0.0)
}

fn register_aggregates(conn: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let table: [(&str, bool, bool); 7] = [
        ("STDDEV", true, false),
        ("STDDEV_POP", true, false),
        ("STD", true, false),
        ("STDDEV_SAMP", true, true),
        ("VARIANCE", false, false),
        ("VAR_POP", false, false),
        ("VAR_SAMP", false, true),
    ];
    for (name, root, sample) in table {
        conn.create_aggregate_function(name, 1, flags, Spread { root, sample })?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The scanner.

/// Token kinds the rewrite rules need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokKind {
    /// A bare word: keyword or identifier.
    Word,
    /// A `'...'` or `"..."` string literal (MySQL reading).
    Str,
    /// A `` `...` `` quoted identifier.
    Ident,
    /// A numeric literal.
    Number,
    /// An operator or punctuation (`(`, `)`, `,`, `.`, `=`, `<=`, ...).
    Punct,
    /// `;`.
    Semi,
}

/// A token: its kind, byte range and parenthesis depth (an opening `(` is
/// at the depth outside it, as is its closing `)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tok {
    pub(crate) kind: TokKind,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) depth: usize,
}

/// Splits SQL into tokens, skipping whitespace and `--`/`/* */`
/// comments. Strings follow MySQL: backslash escapes and doubled quotes.
/// An unterminated quote runs to the end (the database reports it).
pub(crate) fn tokenize(sql: &str) -> Vec<Tok> {
    let b = sql.as_bytes();
    let mut toks = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let word_byte = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = match c {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => {
                i += 1;
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i = (i + 2).min(b.len());
                continue;
            }
            b'\'' | b'"' | b'`' => {
                i += 1;
                while i < b.len() {
                    if b[i] == b'\\' && c != b'`' {
                        i += 2;
                    } else if b[i] == c {
                        if b.get(i + 1) == Some(&c) {
                            i += 2;
                        } else {
                            i += 1;
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                i = i.min(b.len());
                if c == b'`' {
                    TokKind::Ident
                } else {
                    TokKind::Str
                }
            }
            b'0'..=b'9' => {
                i = scan_number(b, i);
                TokKind::Number
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit)
                && !matches!(toks.last(), Some(Tok { kind: TokKind::Word | TokKind::Ident, end, .. }) if *end == i) =>
            {
                i = scan_number(b, i);
                TokKind::Number
            }
            c if word_byte(c) => {
                while i < b.len() && word_byte(b[i]) {
                    i += 1;
                }
                TokKind::Word
            }
            b';' => {
                i += 1;
                TokKind::Semi
            }
            b'(' => {
                i += 1;
                toks.push(Tok {
                    kind: TokKind::Punct,
                    start,
                    end: i,
                    depth,
                });
                depth += 1;
                continue;
            }
            b')' => {
                i += 1;
                depth = depth.saturating_sub(1);
                TokKind::Punct
            }
            _ => {
                let two = b.get(i..i + 2);
                i += match two {
                    Some(b"<=" | b">=" | b"<>" | b"!=" | b"||" | b"==" | b"<<" | b">>") => 2,
                    _ => 1,
                };
                // A multi-byte character outside a word: keep whole.
                while i < b.len() && !sql.is_char_boundary(i) {
                    i += 1;
                }
                TokKind::Punct
            }
        };
        toks.push(Tok {
            kind,
            start,
            end: i,
            depth,
        });
    }
    toks
}

fn scan_number(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            i = j;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    i
}

/// The text of the statement if `sql` holds exactly one (a trailing `;`
/// and comments are fine); else a message for the agent.
fn single_statement(sql: &str) -> Result<&str, String> {
    let toks = tokenize(sql);
    let Some(first) = toks.iter().find(|t| t.kind != TokKind::Semi) else {
        return Err("empty statement".to_string());
    };
    let mut end = sql.len();
    if let Some(semi) = toks
        .iter()
        .position(|t| t.kind == TokKind::Semi && t.start > first.start)
    {
        if toks[semi..].iter().any(|t| t.kind != TokKind::Semi) {
            return Err(format!(
                "only one SQL statement per step: found more after the `;` at byte {}",
                toks[semi].start
            ));
        }
        end = toks[semi].start;
    }
    let stmt = sql[first.start..end].trim_end();
    let word = text(stmt, tokenize(stmt).first());
    for refused in ["ATTACH", "DETACH", "VACUUM"] {
        if word.eq_ignore_ascii_case(refused) {
            return Err(format!(
                "{refused} is not allowed: the episode works on its one in-memory database"
            ));
        }
    }
    Ok(stmt)
}

fn text<'a>(sql: &'a str, tok: Option<&Tok>) -> &'a str {
    tok.and_then(|t| sql.get(t.start..t.end)).unwrap_or("")
}

// ---------------------------------------------------------------------------
// The rewrite layer (rules 2-8).

/// A rewrite rule of [`mysql_to_sqlite`] (numbered as in the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rule {
    /// Rule 2: multi-table `UPDATE` as a snapshot batch.
    MultiTableUpdate,
    /// Rule 3: multi-table `DELETE` as `DELETE ... WHERE rowid IN (...)`.
    MultiTableDelete,
    /// Rule 4: qualifier dropped from a `SET` target.
    QualifiedSetTarget,
    /// Rule 5: single-table `UPDATE`/`DELETE` with `ORDER BY`/`LIMIT`.
    OrderedLimit,
    /// Rule 6: `ORDER BY MIN(rowid)` for MySQL's group order.
    GroupOrder,
    /// Rule 7: `/` as real division.
    RealDivision,
    /// Rule 8: a MySQL string literal re-quoted for SQLite.
    StringLiteral,
    /// Rule 10: a single-table `UPDATE`/`DELETE` that reads its own table
    /// runs row by row.
    RowByRow,
}

/// How to execute a rewritten statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// One statement. `fallback` runs instead when it does not prepare
    /// (rule 6 falls back to the statement without the added `ORDER BY`).
    Single {
        /// The SQLite statement.
        sql: String,
        /// The alternative.
        fallback: Option<String>,
    },
    /// Statements run in order, all or nothing (rule 2).
    Batch {
        /// The SQLite statements.
        statements: Vec<String>,
        /// Which statement's row count is the step's `changed`.
        answer: usize,
    },
    /// Rule 10: stream the rows of `select` in rowid order and run `apply`
    /// for each before reading the next, all or nothing. `apply`'s
    /// parameters are the row's values (`?1` is the rowid). When `select`
    /// does not prepare, `fallback` (the statement as written) runs so the
    /// agent sees the database's own message.
    RowByRow {
        /// Selects the rowid and new values of each row to change.
        select: String,
        /// Changes one row.
        apply: String,
        /// The statement as written.
        fallback: String,
    },
}

/// What [`mysql_to_sqlite`] made of one MySQL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// How to run it.
    pub plan: Plan,
    /// The rules applied.
    pub rules: Vec<Rule>,
}

impl Rewritten {
    fn single(sql: String, rules: Vec<Rule>) -> Rewritten {
        Rewritten {
            plan: Plan::Single {
                sql,
                fallback: None,
            },
            rules,
        }
    }
}

/// Rewrites one MySQL statement (no `;`) for SQLite; see the module doc
/// for the rules. A statement no rule matches comes back as written.
pub fn mysql_to_sqlite(sql: &str) -> Rewritten {
    let mut rules = Vec::new();
    let lexed = lexical(sql, &mut rules);
    let sql = lexed.as_str();
    let toks = tokenize(sql);
    let first = text(sql, toks.first());
    let plan = if first.eq_ignore_ascii_case("UPDATE") {
        rewrite_update(sql, &toks, &mut rules)
    } else if first.eq_ignore_ascii_case("DELETE") {
        rewrite_delete(sql, &toks, &mut rules)
    } else if first.eq_ignore_ascii_case("SELECT") {
        group_order(sql, &toks).map(|s| {
            rules.push(Rule::GroupOrder);
            Plan::Single {
                sql: s,
                fallback: Some(sql.to_string()),
            }
        })
    } else {
        None
    };
    match plan {
        Some(plan) => Rewritten { plan, rules },
        None => Rewritten::single(sql.to_string(), rules),
    }
}

/// Rule 10's derived tables: every `FROM`/`JOIN (SELECT ...) alias` of a
/// query becomes a reference to a `MATERIALIZED` common table expression,
/// so SQLite computes it once, when first needed, as MySQL materializes a
/// derived table (left alone, SQLite may flatten it into its parent and
/// read the table as the statement changes it).
fn materialize_derived(sql: &str) -> String {
    let toks = tokenize(sql);
    let mut out = String::with_capacity(sql.len() + 32);
    let mut ctes: Vec<String> = Vec::new();
    let mut last = 0;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        let derived = text(sql, Some(&t)) == "("
            && i > 0
            && (is_word(sql, toks.get(i - 1), "FROM") || is_word(sql, toks.get(i - 1), "JOIN"))
            && (is_word(sql, toks.get(i + 1), "SELECT") || is_word(sql, toks.get(i + 1), "WITH"));
        let close = (i + 1..toks.len())
            .find(|&j| toks[j].depth == t.depth && text(sql, toks.get(j)) == ")");
        match (derived, close) {
            (true, Some(j)) if j > i + 1 => {
                let name = format!("__evomem_d{}", ctes.len());
                let body = sql
                    .get(toks[i + 1].start..toks[j].start)
                    .unwrap_or("")
                    .trim_end();
                ctes.push(format!("{name} AS MATERIALIZED ({body})"));
                out.push_str(sql.get(last..t.start).unwrap_or(""));
                out.push_str(&name);
                last = toks[j].end;
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out.push_str(sql.get(last..).unwrap_or(""));
    if ctes.is_empty() {
        out
    } else {
        format!("WITH {} {out}", ctes.join(", "))
    }
}

/// Whether a subquery (depth >= 1) among tokens `from..` names `table`.
fn reads_table(sql: &str, toks: &[Tok], from: usize, table: &str) -> bool {
    toks.iter().skip(from).any(|t| {
        t.depth > 0
            && matches!(t.kind, TokKind::Word | TokKind::Ident)
            && same_ident(text(sql, Some(t)), table)
    })
}

/// Rules 7 and 8: token-level edits.
fn lexical(sql: &str, rules: &mut Vec<Rule>) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut last = 0;
    for t in tokenize(sql) {
        let tok = &sql[t.start..t.end];
        let replacement = match t.kind {
            TokKind::Punct if tok == "/" => {
                push_rule(rules, Rule::RealDivision);
                Some("* 1.0 /".to_string())
            }
            TokKind::Str if tok.starts_with('"') || tok.contains('\\') => {
                push_rule(rules, Rule::StringLiteral);
                Some(quote_literal(&mysql_string_value(tok)))
            }
            _ => None,
        };
        if let Some(r) = replacement {
            out.push_str(&sql[last..t.start]);
            out.push_str(&r);
            last = t.end;
        }
    }
    out.push_str(&sql[last..]);
    out
}

fn push_rule(rules: &mut Vec<Rule>, rule: Rule) {
    if !rules.contains(&rule) {
        rules.push(rule);
    }
}

/// The value of a MySQL string literal token (quotes included).
fn mysql_string_value(tok: &str) -> String {
    let mut chars = tok.chars();
    let quote = chars.next().unwrap_or('\'');
    let body: Vec<char> = chars.collect();
    let body = match body.last() {
        Some(c) if *c == quote => &body[..body.len() - 1],
        _ => &body[..],
    };
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if c == '\\' && i + 1 < body.len() {
            let e = body[i + 1];
            match e {
                '0' => out.push('\0'),
                'b' => out.push('\u{8}'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'Z' => out.push('\u{1a}'),
                // LIKE keeps these escaped.
                '%' | '_' => {
                    out.push('\\');
                    out.push(e);
                }
                other => out.push(other),
            }
            i += 2;
        } else if c == quote && body.get(i + 1) == Some(&quote) {
            out.push(quote);
            i += 2;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_word(sql: &str, t: Option<&Tok>, kw: &str) -> bool {
    t.is_some_and(|t| t.kind == TokKind::Word && text(sql, Some(t)).eq_ignore_ascii_case(kw))
}

/// Index of the first depth-0 keyword `kw` at or after `from`.
fn find_top(sql: &str, toks: &[Tok], from: usize, kw: &str) -> Option<usize> {
    (from..toks.len()).find(|&i| toks[i].depth == 0 && is_word(sql, toks.get(i), kw))
}

/// Index of the first depth-0 `a b` pair (`GROUP BY`) at or after `from`.
fn find_top_pair(sql: &str, toks: &[Tok], from: usize, a: &str, b: &str) -> Option<usize> {
    (from..toks.len()).find(|&i| {
        toks[i].depth == 0 && is_word(sql, toks.get(i), a) && is_word(sql, toks.get(i + 1), b)
    })
}

/// An identifier's name without `"`/`` ` `` quotes.
fn unquote(name: &str) -> &str {
    let n = name.trim();
    for q in ['"', '`'] {
        if let Some(inner) = n.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    n
}

/// Words that end a table reference instead of being its alias.
const NOT_ALIAS: &[&str] = &[
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "CROSS",
    "NATURAL",
    "STRAIGHT_JOIN",
    "FULL",
    "OUTER",
    "SET",
    "WHERE",
    "ON",
    "USING",
    "ORDER",
    "LIMIT",
    "GROUP",
    "HAVING",
    "WINDOW",
    "UNION",
    "EXCEPT",
    "INTERSECT",
];

/// A plain `name [AS] [alias]` table reference starting at token `i`.
struct TableRef {
    /// The name as written.
    name: String,
    /// What qualifies its columns: the alias as written, else the name.
    qualifier: String,
    /// Token index after the reference.
    next: usize,
}

fn table_ref(sql: &str, toks: &[Tok], i: usize) -> Option<TableRef> {
    let t = toks.get(i)?;
    if !matches!(t.kind, TokKind::Word | TokKind::Ident | TokKind::Str) || t.depth != 0 {
        return None;
    }
    let name = text(sql, Some(t)).to_string();
    if NOT_ALIAS.iter().any(|k| name.eq_ignore_ascii_case(k)) {
        return None;
    }
    let mut j = i + 1;
    // `schema.table` is not supported: the episode has one database.
    if toks.get(j).is_some_and(|t| text(sql, Some(t)) == ".") {
        return None;
    }
    let mut qualifier = name.clone();
    if is_word(sql, toks.get(j), "AS") {
        j += 1;
        let a = toks.get(j)?;
        qualifier = text(sql, Some(a)).to_string();
        j += 1;
    } else if let Some(a) = toks.get(j) {
        let w = text(sql, Some(a));
        if matches!(a.kind, TokKind::Word | TokKind::Ident)
            && !NOT_ALIAS.iter().any(|k| w.eq_ignore_ascii_case(k))
        {
            qualifier = w.to_string();
            j += 1;
        }
    }
    Some(TableRef {
        name,
        qualifier,
        next: j,
    })
}

fn same_ident(a: &str, b: &str) -> bool {
    unquote(a).eq_ignore_ascii_case(unquote(b))
}

/// One `target = expr` of a `SET` list.
struct Assignment<'a> {
    /// Qualifier of the target (`a` in `a.c`), if any.
    qualifier: Option<&'a str>,
    /// The target column as written.
    column: &'a str,
    /// Byte range of the target in the statement.
    target: (usize, usize),
    /// The value expression.
    expr: &'a str,
}

/// Splits the `SET` list between token indices `from` and `to`.
fn assignments<'a>(
    sql: &'a str,
    toks: &[Tok],
    from: usize,
    to: usize,
) -> Option<Vec<Assignment<'a>>> {
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let end = (i..to)
            .find(|&k| toks[k].depth == 0 && text(sql, toks.get(k)) == ",")
            .unwrap_or(to);
        let eq = (i..end).find(|&k| toks[k].depth == 0 && text(sql, toks.get(k)) == "=")?;
        let (qualifier, column) = match eq - i {
            1 => (None, toks.get(i)?),
            3 if text(sql, toks.get(i + 1)) == "." => {
                (Some(text(sql, toks.get(i))), toks.get(i + 2)?)
            }
            _ => return None,
        };
        let expr_start = toks.get(eq + 1)?.start;
        let expr_end = toks.get(end - 1)?.end;
        out.push(Assignment {
            qualifier,
            column: text(sql, Some(column)),
            target: (toks[i].start, column.end),
            expr: sql.get(expr_start..expr_end)?,
        });
        i = end + 1;
    }
    Some(out)
}

/// Rules 2, 4, 5 and 10 for `UPDATE`.
fn rewrite_update(sql: &str, toks: &[Tok], rules: &mut Vec<Rule>) -> Option<Plan> {
    let set = find_top(sql, toks, 1, "SET")?;
    let target = table_ref(sql, toks, 1)?;
    let multi = toks[1..set]
        .iter()
        .any(|t| t.depth == 0 && (is_word(sql, Some(t), "JOIN") || text(sql, Some(t)) == ","));
    let where_ = find_top(sql, toks, set + 1, "WHERE");
    let order = find_top_pair(sql, toks, set + 1, "ORDER", "BY");
    let limit = find_top(sql, toks, set + 1, "LIMIT");
    let set_end = [where_, order, limit]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(toks.len());
    let assigns = assignments(sql, toks, set + 1, set_end)?;
    if assigns.iter().any(|a| {
        a.qualifier
            .is_some_and(|q| !same_ident(q, &target.qualifier))
    }) {
        // A target in another table: not something SQLite can do.
        return None;
    }
    if multi {
        let plan = update_multi_table(sql, toks, set, &target, &assigns, where_)?;
        rules.push(Rule::MultiTableUpdate);
        return Some(plan);
    }
    if target.next != set {
        return None;
    }
    // Rule 4: drop qualifiers from SET targets.
    let mut stmt = String::with_capacity(sql.len());
    let mut last = 0;
    for a in &assigns {
        if a.qualifier.is_some() {
            stmt.push_str(sql.get(last..a.target.0)?);
            stmt.push_str(a.column);
            last = a.target.1;
            push_rule(rules, Rule::QualifiedSetTarget);
        }
    }
    stmt.push_str(sql.get(last..)?);
    let toks2;
    let (sql, toks) = if last > 0 {
        toks2 = tokenize(&stmt);
        (stmt.as_str(), toks2.as_slice())
    } else {
        (sql, toks)
    };
    // Rule 5.
    if order.is_some() || limit.is_some() {
        let plan = update_ordered_limit(sql, toks, &target)?;
        rules.push(Rule::OrderedLimit);
        return Some(plan);
    }
    // Rule 10.
    let set = find_top(sql, toks, 1, "SET")?;
    if reads_table(sql, toks, set + 1, unquote(&target.name)) {
        let plan = update_row_by_row(sql, toks, set, &target)?;
        rules.push(Rule::RowByRow);
        return Some(plan);
    }
    if last == 0 {
        return None;
    }
    Some(Plan::Single {
        sql: stmt.clone(),
        fallback: None,
    })
}

/// Rule 2: an `UPDATE` over a join becomes a snapshot of the new values by
/// target rowid, an update from it, and the snapshot's drop.
fn update_multi_table(
    sql: &str,
    toks: &[Tok],
    set: usize,
    target: &TableRef,
    assigns: &[Assignment<'_>],
    where_: Option<usize>,
) -> Option<Plan> {
    let from = sql.get(toks[1].start..toks[set].start)?.trim_end();
    let tail = where_
        .and_then(|w| sql.get(toks[w].start..))
        .map(|w| format!(" {w}"))
        .unwrap_or_default();
    let values: Vec<String> = assigns
        .iter()
        .enumerate()
        .map(|(k, a)| format!("({}) AS __v{k}", a.expr))
        .collect();
    let snapshot = format!(
        "CREATE TEMP TABLE {SNAPSHOT} AS SELECT {}.rowid AS __rid, {} FROM {from}{tail}",
        target.qualifier,
        values.join(", ")
    );
    let sets: Vec<String> = assigns
        .iter()
        .enumerate()
        .map(|(k, a)| {
            format!(
                "{} = (SELECT __v{k} FROM {SNAPSHOT} WHERE __rid = {}.rowid)",
                a.column, target.name
            )
        })
        .collect();
    let update = format!(
        "UPDATE {} SET {} WHERE rowid IN (SELECT __rid FROM {SNAPSHOT})",
        target.name,
        sets.join(", ")
    );
    Some(Plan::Batch {
        statements: vec![snapshot, update, format!("DROP TABLE {SNAPSHOT}")],
        answer: 1,
    })
}

/// Rule 5: `UPDATE … ORDER BY … LIMIT` becomes an update of the rowids the
/// ordered, limited select picks.
fn update_ordered_limit(sql: &str, toks: &[Tok], target: &TableRef) -> Option<Plan> {
    let set = find_top(sql, toks, 1, "SET")?;
    let w = find_top(sql, toks, set + 1, "WHERE");
    let o = find_top_pair(sql, toks, set + 1, "ORDER", "BY");
    let l = find_top(sql, toks, set + 1, "LIMIT");
    let cut = [w, o, l].into_iter().flatten().min()?;
    let head = sql.get(..toks.get(cut)?.start)?.trim_end();
    let table_text = sql.get(toks[1].start..toks[set].start)?.trim_end();
    let tail = sql.get(toks.get(cut)?.start..)?;
    Some(Plan::Single {
        sql: format!(
            "{head} WHERE rowid IN (SELECT {}.rowid FROM {table_text} {tail})",
            target.qualifier
        ),
        fallback: None,
    })
}

/// Rule 10: an update whose values read the target table (`SET` at `set`)
/// is evaluated against the table before the update, row by row.
fn update_row_by_row(sql: &str, toks: &[Tok], set: usize, target: &TableRef) -> Option<Plan> {
    let w = find_top(sql, toks, set + 1, "WHERE");
    let assigns = assignments(sql, toks, set + 1, w.unwrap_or(toks.len()))?;
    let table_text = sql.get(toks[1].start..toks[set].start)?.trim_end();
    let tail = match w {
        Some(w) => format!(" {}", sql.get(toks.get(w)?.start..)?),
        None => String::new(),
    };
    let values: Vec<String> = assigns.iter().map(|a| format!("({})", a.expr)).collect();
    let sets: Vec<String> = assigns
        .iter()
        .enumerate()
        .map(|(k, a)| format!("{} = ?{}", a.column, k + 2))
        .collect();
    Some(Plan::RowByRow {
        select: materialize_derived(&format!(
            "SELECT {}.rowid, {} FROM {table_text}{tail}",
            target.qualifier,
            values.join(", ")
        )),
        apply: format!(
            "UPDATE {} SET {} WHERE rowid = ?1",
            target.name,
            sets.join(", ")
        ),
        fallback: sql.to_string(),
    })
}

/// Rules 3, 5 and 10 for `DELETE`.
fn rewrite_delete(sql: &str, toks: &[Tok], rules: &mut Vec<Rule>) -> Option<Plan> {
    let from = find_top(sql, toks, 1, "FROM")?;
    if from == 1 {
        // Single-table: only ORDER BY / LIMIT need help (rule 5).
        let t = table_ref(sql, toks, 2)?;
        let cut = [
            find_top(sql, toks, t.next, "WHERE"),
            find_top_pair(sql, toks, t.next, "ORDER", "BY"),
            find_top(sql, toks, t.next, "LIMIT"),
        ];
        let [where_, order, limit] = cut;
        if order.is_none() && limit.is_none() {
            if !reads_table(sql, toks, t.next, unquote(&t.name)) {
                return None;
            }
            let table_text = sql.get(toks[2].start..toks.get(t.next - 1)?.end)?;
            let tail = match where_ {
                Some(w) => format!(" {}", sql.get(toks.get(w)?.start..)?),
                None => String::new(),
            };
            rules.push(Rule::RowByRow);
            return Some(Plan::RowByRow {
                select: materialize_derived(&format!(
                    "SELECT {}.rowid FROM {table_text}{tail}",
                    t.qualifier
                )),
                apply: format!("DELETE FROM {} WHERE rowid = ?1", t.name),
                fallback: sql.to_string(),
            });
        }
        let first = cut.into_iter().flatten().min()?;
        let table_text = sql.get(toks[2].start..toks.get(first)?.start)?.trim_end();
        let tail = sql.get(toks.get(first)?.start..)?;
        rules.push(Rule::OrderedLimit);
        return Some(Plan::Single {
            sql: format!(
                "DELETE FROM {table_text} WHERE rowid IN (SELECT {}.rowid FROM {table_text} {tail})",
                t.qualifier
            ),
            fallback: None,
        });
    }
    // Multi-table: `DELETE target FROM t [AS] a JOIN ...`.
    let mut targets: Vec<&str> = Vec::new();
    let mut k = 1;
    while k < from {
        let w = text(sql, toks.get(k));
        match w {
            "," => {}
            _ if ["LOW_PRIORITY", "QUICK", "IGNORE"]
                .iter()
                .any(|m| w.eq_ignore_ascii_case(m)) => {}
            _ => {
                targets.push(w);
                // `a.*`
                if text(sql, toks.get(k + 1)) == "." && text(sql, toks.get(k + 2)) == "*" {
                    k += 2;
                }
            }
        }
        k += 1;
    }
    let [target] = targets.as_slice() else {
        return None;
    };
    let t = table_ref(sql, toks, from + 1)?;
    if !(same_ident(target, &t.qualifier) || same_ident(target, &t.name)) {
        return None;
    }
    let rest = sql.get(toks.get(from + 1)?.start..)?;
    rules.push(Rule::MultiTableDelete);
    Some(Plan::Single {
        sql: format!(
            "DELETE FROM {} WHERE rowid IN (SELECT {}.rowid FROM {rest})",
            t.name, t.qualifier
        ),
        fallback: None,
    })
}

/// Rule 6: `ORDER BY MIN(q.rowid)` for a top-level grouped `SELECT`
/// without `ORDER BY`.
fn group_order(sql: &str, toks: &[Tok]) -> Option<String> {
    find_top_pair(sql, toks, 0, "GROUP", "BY")?;
    if find_top_pair(sql, toks, 0, "ORDER", "BY").is_some()
        || ["UNION", "INTERSECT", "EXCEPT"]
            .iter()
            .any(|k| find_top(sql, toks, 0, k).is_some())
    {
        return None;
    }
    let from = find_top(sql, toks, 0, "FROM")?;
    let rowid = match table_ref(sql, toks, from + 1) {
        Some(t) => format!("{}.rowid", t.qualifier),
        None => "rowid".to_string(),
    };
    let order = format!("ORDER BY MIN({rowid})");
    Some(match find_top(sql, toks, 0, "LIMIT") {
        Some(l) => {
            let at = toks[l].start;
            format!("{} {order} {}", sql.get(..at)?.trim_end(), sql.get(at..)?)
        }
        None => format!("{} {order}", sql.trim_end()),
    })
}

/// The items of the last top-level `ORDER BY` of a statement, each
/// stripped of `ASC`/`DESC`, `NULLS FIRST|LAST` and `COLLATE x`; empty
/// when there is none. Used by the judge to find tie runs.
pub(crate) fn top_level_order_by(sql: &str) -> Vec<String> {
    let toks = tokenize(sql);
    let Some(start) = (0..toks.len()).rev().find(|&i| {
        toks[i].depth == 0
            && is_word(sql, toks.get(i), "ORDER")
            && is_word(sql, toks.get(i + 1), "BY")
    }) else {
        return Vec::new();
    };
    let stop = ["LIMIT", "OFFSET", "FOR", "FETCH"];
    let end = (start + 2..toks.len())
        .find(|&i| {
            let t = &toks[i];
            t.depth == 0
                && (t.kind == TokKind::Semi
                    || (t.kind == TokKind::Word && stop.iter().any(|k| is_word(sql, Some(t), k))))
        })
        .unwrap_or(toks.len());
    let mut items = Vec::new();
    let mut item: Vec<Tok> = Vec::new();
    let flush = |item: &mut Vec<Tok>, items: &mut Vec<String>| {
        // Drop trailing modifiers.
        loop {
            let n = item.len();
            if n >= 1 && (is_word(sql, item.last(), "ASC") || is_word(sql, item.last(), "DESC")) {
                item.truncate(n - 1);
            } else if n >= 2
                && ((is_word(sql, item.get(n - 2), "NULLS")
                    && (is_word(sql, item.last(), "FIRST") || is_word(sql, item.last(), "LAST")))
                    || is_word(sql, item.get(n - 2), "COLLATE"))
            {
                item.truncate(n - 2);
            } else {
                break;
            }
        }
        if let (Some(a), Some(b)) = (item.first(), item.last()) {
            items.push(sql.get(a.start..b.end).unwrap_or("").to_string());
        }
        item.clear();
    };
    for t in &toks[start + 2..end] {
        if t.depth == 0 && text(sql, Some(t)) == "," {
            flush(&mut item, &mut items);
        } else {
            item.push(*t);
        }
    }
    flush(&mut item, &mut items);
    items
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::lifelong::types::{Column, Expected, Truth};

    fn task(rows: Vec<Vec<Cell>>) -> DbTask {
        DbTask {
            index: 7,
            instruction: String::new(),
            table: Table {
                name: "t".into(),
                columns: vec![
                    Column {
                        name: "id".into(),
                        ty: "INT".into(),
                    },
                    Column {
                        name: "grp".into(),
                        ty: "TEXT".into(),
                    },
                    Column {
                        name: "v".into(),
                        ty: "INT".into(),
                    },
                ],
                rows,
            },
            skills: vec![],
            truth: Truth {
                expected: Expected::Md5(String::new()),
                sql: String::new(),
            },
        }
    }

    fn stmts(rw: &Rewritten) -> Vec<String> {
        match &rw.plan {
            Plan::Single { sql, .. } => vec![sql.clone()],
            Plan::Batch { statements, .. } => statements.clone(),
            Plan::RowByRow { select, apply, .. } => vec![select.clone(), apply.clone()],
        }
    }

    fn fallback(rw: &Rewritten) -> Option<&str> {
        match &rw.plan {
            Plan::Single { fallback, .. } => fallback.as_deref(),
            Plan::Batch { .. } => None,
            Plan::RowByRow { fallback, .. } => Some(fallback),
        }
    }

    #[test]
    fn self_reading_statements_run_row_by_row() {
        let rw = mysql_to_sqlite(
            "DELETE FROM t WHERE v < (SELECT AVG(v) FROM (SELECT v FROM t) a) OR grp IN (SELECT grp FROM (SELECT grp FROM t GROUP BY grp HAVING COUNT(*) > 1) b)",
        );
        assert_eq!(rw.rules, vec![Rule::RowByRow]);
        let s = stmts(&rw);
        assert_eq!(
            s[0],
            "WITH __evomem_d0 AS MATERIALIZED (SELECT v FROM t), \
             __evomem_d1 AS MATERIALIZED (SELECT grp FROM t GROUP BY grp HAVING COUNT(*) > 1) \
             SELECT t.rowid FROM t WHERE v < (SELECT AVG(v) FROM __evomem_d0 a) \
             OR grp IN (SELECT grp FROM __evomem_d1 b)"
        );
        assert_eq!(s[1], "DELETE FROM t WHERE rowid = ?1");
        let rw =
            mysql_to_sqlite("UPDATE t AS x SET x.v = x.v + (SELECT MIN(v) FROM t) WHERE x.id > 2");
        assert_eq!(rw.rules, vec![Rule::QualifiedSetTarget, Rule::RowByRow]);
        assert_eq!(
            stmts(&rw),
            vec![
                "SELECT x.rowid, (x.v + (SELECT MIN(v) FROM t)) FROM t AS x WHERE x.id > 2"
                    .to_string(),
                "UPDATE t SET v = ?2 WHERE rowid = ?1".to_string()
            ]
        );

        // Rows (b,10) (a,20) (b,30) (c,15), average 18.75. Row 1 goes
        // (10 < 18.75); the group test is first needed at row 2, when `b`
        // has one row left, so row 3 (30, group b) stays, as on MySQL. A
        // statement evaluated against the old table would delete it too.
        let mut e = env();
        let out = e.execute(
            "DELETE FROM t WHERE v < (SELECT AVG(v) FROM (SELECT v FROM t) a) OR grp IN (SELECT grp FROM (SELECT grp FROM t GROUP BY grp HAVING COUNT(*) > 1) b)",
        );
        assert!(out.ok, "{out:?}");
        assert_eq!(out.changed, 2);
        assert_eq!(ints(&e, 0), vec![2, 3]);

        let mut e = env();
        let out = e.execute("UPDATE t AS x SET x.v = x.v + (SELECT MIN(v) FROM t) WHERE x.id > 2");
        assert!(out.ok, "{out:?}");
        assert_eq!(ints(&e, 2), vec![10, 20, 40, 25]);

        // A correlated subquery reads the derived table's snapshot, taken
        // when first needed (row 1): group b is 10, 30, 20 with average 20,
        // so only row 1 goes. Reading the live table, row 5 would follow
        // (b's average is 25 once row 1 is gone).
        let mut e = env();
        assert!(e.execute("INSERT INTO t VALUES (5, 'b', 20)").ok);
        let out = e.execute(
            "DELETE FROM t WHERE v < (SELECT AVG(v) FROM (SELECT * FROM t) s WHERE s.grp = t.grp)",
        );
        assert!(out.ok, "{out:?}");
        assert_eq!(ints(&e, 0), vec![2, 3, 4, 5]);

        // An error in the statement is the database's own message.
        let out = e.execute("DELETE FROM t WHERE nope IN (SELECT v FROM t)");
        assert_eq!(out.error.as_deref(), Some("no such column: nope"));
    }

    fn env() -> SqlEnv {
        let rows = vec![
            vec![Cell::Int(1), Cell::Text("b".into()), Cell::Int(10)],
            vec![Cell::Int(2), Cell::Text("a".into()), Cell::Int(20)],
            vec![Cell::Int(3), Cell::Text("b".into()), Cell::Int(30)],
            vec![Cell::Int(4), Cell::Text("c".into()), Cell::Int(15)],
        ];
        SqlEnv::new(&task(rows)).unwrap()
    }

    fn ints(env: &SqlEnv, col: usize) -> Vec<i64> {
        env.table_rows()
            .unwrap()
            .iter()
            .map(|r| match r[col] {
                Cell::Int(i) => i,
                ref other => panic!("not an int: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn plain_statements_pass_unchanged() {
        let rw = mysql_to_sqlite("SELECT * FROM t WHERE v > 3");
        assert_eq!(stmts(&rw), vec!["SELECT * FROM t WHERE v > 3"]);
        assert!(rw.rules.is_empty());
        let rw = mysql_to_sqlite("UPDATE t SET v = 1 WHERE id = 2");
        assert_eq!(stmts(&rw), vec!["UPDATE t SET v = 1 WHERE id = 2"]);
    }

    #[test]
    fn multi_table_update_is_a_snapshot_batch() {
        let rw = mysql_to_sqlite(
            "UPDATE t s JOIN (SELECT AVG(v) AS a FROM t) sub SET s.v = s.v * 2 WHERE s.v < sub.a",
        );
        assert_eq!(rw.rules, vec![Rule::MultiTableUpdate]);
        assert_eq!(stmts(&rw).len(), 3);
        assert!(stmts(&rw)[0].contains("SELECT s.rowid AS __rid, (s.v * 2) AS __v0 FROM t s JOIN"));
        assert!(stmts(&rw)[0].ends_with("WHERE s.v < sub.a"));
        assert_eq!(
            stmts(&rw)[1],
            format!("UPDATE t SET v = (SELECT __v0 FROM {SNAPSHOT} WHERE __rid = t.rowid) WHERE rowid IN (SELECT __rid FROM {SNAPSHOT})")
        );
        let mut e = env();
        let out = e.execute(
            "UPDATE t s JOIN (SELECT AVG(v) AS a FROM t) sub SET s.v = s.v * 2 WHERE s.v < sub.a;",
        );
        assert!(out.ok, "{out:?}");
        assert_eq!(out.changed, 2);
        assert_eq!(ints(&e, 2), vec![20, 20, 30, 30]);
    }

    #[test]
    fn multi_table_update_reads_pre_update_rows() {
        // Each row takes the previous row's value as it was before the
        // update; a row-by-row update would cascade 10 down the table.
        let mut e = env();
        let out =
            e.execute("UPDATE t AS a JOIN t AS b ON b.id = a.id - 1 SET a.v = b.v WHERE a.id > 1");
        assert!(out.ok, "{out:?}");
        assert_eq!(out.changed, 3);
        assert_eq!(ints(&e, 2), vec![10, 10, 20, 30]);
    }

    #[test]
    fn multi_table_delete() {
        let rw = mysql_to_sqlite(
            "DELETE x FROM t AS x JOIN (SELECT AVG(v) AS a FROM t) s WHERE x.v < s.a",
        );
        assert_eq!(rw.rules, vec![Rule::MultiTableDelete]);
        assert_eq!(
            stmts(&rw)[0],
            "DELETE FROM t WHERE rowid IN (SELECT x.rowid FROM t AS x JOIN (SELECT AVG(v) AS a FROM t) s WHERE x.v < s.a)"
        );
        let mut e = env();
        let out =
            e.execute("DELETE x FROM t AS x JOIN (SELECT AVG(v) AS a FROM t) s WHERE x.v < s.a");
        assert!(out.ok, "{out:?}");
        assert_eq!(out.changed, 2);
        assert_eq!(ints(&e, 0), vec![2, 3]);
    }

    #[test]
    fn qualified_set_target_is_stripped() {
        let rw = mysql_to_sqlite("UPDATE t AS a SET a.v = a.v + 1, grp = 'z' WHERE a.id = 1");
        assert_eq!(rw.rules, vec![Rule::QualifiedSetTarget]);
        assert_eq!(
            stmts(&rw)[0],
            "UPDATE t AS a SET v = a.v + 1, grp = 'z' WHERE a.id = 1"
        );
        let mut e = env();
        assert!(
            e.execute("UPDATE t AS a SET a.v = a.v + 1 WHERE a.id = 1")
                .ok
        );
        assert_eq!(ints(&e, 2)[0], 11);
    }

    #[test]
    fn ordered_limit_update_and_delete() {
        let mut e = env();
        let out = e.execute("UPDATE t SET v = 0 WHERE grp = 'b' ORDER BY v DESC LIMIT 1");
        assert!(out.ok, "{out:?}");
        assert_eq!(ints(&e, 2), vec![10, 20, 0, 15]);
        let out = e.execute("DELETE FROM t ORDER BY v LIMIT 2");
        assert!(out.ok, "{out:?}");
        assert_eq!(ints(&e, 0), vec![2, 4]);
    }

    #[test]
    fn group_order_follows_first_appearance() {
        let rw = mysql_to_sqlite("SELECT grp, COUNT(*) FROM t GROUP BY grp LIMIT 2");
        assert_eq!(
            stmts(&rw)[0],
            "SELECT grp, COUNT(*) FROM t GROUP BY grp ORDER BY MIN(t.rowid) LIMIT 2"
        );
        assert_eq!(
            fallback(&rw),
            Some("SELECT grp, COUNT(*) FROM t GROUP BY grp LIMIT 2")
        );
        let mut e = env();
        let out = e.execute("SELECT grp, COUNT(*) FROM t GROUP BY grp LIMIT 2;");
        assert_eq!(
            out.rows,
            vec![
                vec![Cell::Text("b".into()), Cell::Int(2)],
                vec![Cell::Text("a".into()), Cell::Int(1)]
            ]
        );
        // An explicit ORDER BY, or a GROUP BY inside a subquery only, is left alone.
        assert!(
            mysql_to_sqlite("SELECT grp FROM t GROUP BY grp ORDER BY grp")
                .rules
                .is_empty()
        );
        assert!(
            mysql_to_sqlite("SELECT * FROM (SELECT grp FROM t GROUP BY grp) s")
                .rules
                .is_empty()
        );
        // A FROM without a rowid falls back to the statement as written.
        let out = e.execute("SELECT g, COUNT(*) FROM (SELECT grp AS g FROM t) GROUP BY g");
        assert!(out.ok, "{out:?}");
    }

    #[test]
    fn division_is_real_and_strings_are_mysql() {
        let rw = mysql_to_sqlite("SELECT 7 / 2, 'a/b', \"it's\", 'O\\'Brien'");
        assert_eq!(
            stmts(&rw)[0],
            "SELECT 7 * 1.0 / 2, 'a/b', 'it''s', 'O''Brien'"
        );
        let mut e = env();
        let out = e.execute("SELECT 7 / 2, \"x\"");
        assert_eq!(
            out.rows,
            vec![vec![Cell::Real(3.5), Cell::Text("x".into())]]
        );
    }

    #[test]
    fn spread_aggregates() {
        let mut e = env();
        let out =
            e.execute("SELECT STDDEV(v), STD(v), STDDEV_SAMP(v), VARIANCE(v), VAR_SAMP(v) FROM t");
        let Cell::Real(pop) = out.rows[0][0] else {
            panic!("{out:?}")
        };
        // values 10, 20, 30, 15: mean 18.75, population variance 54.6875
        assert!((pop - 54.6875f64.sqrt()).abs() < 1e-12);
        let Cell::Real(var) = out.rows[0][3] else {
            panic!()
        };
        assert!((var - 54.6875).abs() < 1e-12);
        let Cell::Real(samp) = out.rows[0][4] else {
            panic!()
        };
        assert!((samp - 54.6875 * 4.0 / 3.0).abs() < 1e-9);
        let out = e.execute("SELECT STDDEV_SAMP(v) FROM t WHERE id = 1");
        assert_eq!(out.rows, vec![vec![Cell::Null]]);
    }

    #[test]
    fn floats_in_int_columns_round_like_mysql() {
        assert_eq!(mysql_int(550.0000000000001), 550);
        assert_eq!(mysql_int(16.5), 17);
        assert_eq!(mysql_int(34.49999999999999), 35);
        assert_eq!(mysql_int(-2.5), -3);
        assert_eq!(mysql_int(2.4), 2);
        let mut e = env();
        assert!(e.execute("UPDATE t SET v = v * 1.15").ok);
        // 11.5, 23, 34.5, 17.25 -> 12, 23, 35, 17
        assert_eq!(ints(&e, 2), vec![12, 23, 35, 17]);
        let out = e.execute("SELECT typeof(v) FROM t LIMIT 1");
        assert_eq!(out.rows[0][0], Cell::Text("integer".into()));
    }

    #[test]
    fn one_statement_per_step() {
        let mut e = env();
        let out = e.execute("SELECT 1; SELECT 2");
        assert!(!out.ok);
        assert!(out.error.unwrap().contains("only one SQL statement"));
        assert_eq!(e.steps(), 0);
        assert!(e.execute("SELECT 1 ; ; -- done").ok);
        assert!(!e.execute("ATTACH 'x.db' AS x").ok);
        assert!(!e.execute("  ").ok);
    }

    #[test]
    fn observation_rendering() {
        let mut e = env();
        let out = e.execute("SELECT id, grp, v / 4 FROM t WHERE id <= 2");
        assert_eq!(out.observation, "[(1, 'b', 2.5), (2, 'a', 5.0)]");
        let out = e.execute("SELECT 'it''s'");
        assert_eq!(out.observation, "[(\"it's\",)]");
        let out = e.execute("DELETE FROM t WHERE id = 1");
        assert_eq!(out.observation, "OK, 1 row affected");
        let out = e.execute("SELECT nope FROM t");
        assert_eq!(out.observation, "ERROR: no such column: nope");
        let out = e.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) SELECT i FROM n");
        assert!(
            out.observation.ends_with("... (first 40 of 50 rows shown)"),
            "{}",
            out.observation
        );
    }

    #[test]
    fn order_by_items() {
        assert_eq!(
            top_level_order_by(
                "SELECT a, b FROM t ORDER BY t.a DESC, SUM(b) ASC NULLS LAST LIMIT 3"
            ),
            vec!["t.a", "SUM(b)"]
        );
        assert!(top_level_order_by("SELECT * FROM (SELECT a FROM t ORDER BY a) s").is_empty());
        assert_eq!(top_level_order_by("SELECT a FROM t ORDER BY 1;"), vec!["1"]);
    }
}
