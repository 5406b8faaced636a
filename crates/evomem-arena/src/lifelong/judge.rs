//! The judge: LifelongAgentBench's success rule, reproduced on SQLite.
//!
//! - A task that changes data is judged on the table afterwards: its hash
//!   must equal the task's md5. The hash is MySQL's
//!   `md5(group_concat(rowhash ORDER BY rowhash))` over
//!   `rowhash = substring(md5(concat_ws(',', c1, c2, ...)), 1, 5)`; see
//!   [`table_md5`] for how each value is printed.
//! - A query is judged on the rows of the committed statement. Numbers are
//!   equal when close (LifelongAgentBench uses `math.isclose` with
//!   `rel_tol = abs_tol = 1e-6`), or when the expected number is one MySQL
//!   printed with four decimals (`AVG`, division) and the result rounds to
//!   it. Text compares exactly.
//! - Row order. Without a top-level `ORDER BY` the rows compare as a
//!   multiset (neither database promises an order). With one, MySQL and
//!   SQLite may break ties differently, so the rows are split into runs
//!   that are equal on the `ORDER BY` keys that name output columns, and
//!   each run must be multiset-equal to the expected rows at the same
//!   positions. If the first key names no output column, the order is
//!   compared strictly.
//!
//! [`judge`]'s reason never quotes the expected values: it may travel to
//! the agent or into memory, which must not learn the ground truth.
//! [`validate_judge`] runs every task's ground-truth SQL through
//! [`SqlEnv::execute`] and judges it, with the expected values in its
//! reasons; it is how the environment and the judge are shown to agree
//! with MySQL.

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use super::sqlenv::{render_row, top_level_order_by, SqlEnv, StepOutcome};
use super::types::{Cell, DbTask, Expected, Literal};

/// The judge's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the committed answer is accepted.
    pub success: bool,
    /// Why, for logs and reports (never quotes the expected values).
    pub reason: String,
}

impl Verdict {
    fn pass(reason: impl Into<String>) -> Verdict {
        Verdict {
            success: true,
            reason: reason.into(),
        }
    }

    fn fail(reason: impl Into<String>) -> Verdict {
        Verdict {
            success: false,
            reason: reason.into(),
        }
    }
}

/// The outcome of [`validate_judge`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeValidation {
    /// Tasks whose ground-truth SQL the judge accepted.
    pub passed: usize,
    /// `(task index, reason)` for each task it rejected.
    pub failed: Vec<(usize, String)>,
}

/// Whether reasons may quote the expected answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reveal {
    Hidden,
    Shown,
}

/// Judges an episode. `env` is the episode's database after the agent's
/// steps; `committed` is the outcome of the statement the agent committed
/// as its answer and `committed_sql` its text (used for the `ORDER BY`
/// rule; without it an ordered comparison is strict). For a task that
/// changes data only the table matters and `committed` may be `None`.
pub fn judge(
    task: &DbTask,
    env: &SqlEnv,
    committed: Option<&StepOutcome>,
    committed_sql: Option<&str>,
) -> Verdict {
    judge_with(task, env, committed, committed_sql, Reveal::Hidden)
}

/// Executes every task's ground-truth SQL in a fresh environment and
/// judges it. All tasks passing shows that the SQLite environment, its
/// MySQL compatibility layer and the judge agree with the answers
/// LifelongAgentBench recorded on MySQL.
pub fn validate_judge(tasks: &[DbTask]) -> JudgeValidation {
    let mut passed = 0;
    let mut failed = Vec::new();
    for task in tasks {
        let mut env = match SqlEnv::new(task) {
            Ok(env) => env,
            Err(e) => {
                failed.push((task.index, e.to_string()));
                continue;
            }
        };
        let sql = task.truth.sql.as_str();
        let outcome = env.execute(sql);
        let verdict = judge_with(task, &env, Some(&outcome), Some(sql), Reveal::Shown);
        if verdict.success {
            passed += 1;
        } else {
            failed.push((task.index, verdict.reason));
        }
    }
    JudgeValidation { passed, failed }
}

fn judge_with(
    task: &DbTask,
    env: &SqlEnv,
    committed: Option<&StepOutcome>,
    committed_sql: Option<&str>,
    reveal: Reveal,
) -> Verdict {
    match &task.truth.expected {
        Expected::Md5(want) => judge_table(env, want, reveal),
        Expected::Rows(want) => match committed {
            None => Verdict::fail("nothing was committed"),
            Some(out) if !out.ok => Verdict::fail(format!(
                "the committed statement failed: {}",
                out.error.as_deref().unwrap_or("unknown error")
            )),
            Some(out) if !out.is_query => {
                Verdict::fail("the task asks for rows but the committed statement is not a query")
            }
            Some(out) => judge_rows(out, want, committed_sql, reveal),
        },
    }
}

fn judge_table(env: &SqlEnv, want: &str, reveal: Reveal) -> Verdict {
    let rows = match env.table_rows() {
        Ok(rows) => rows,
        Err(e) => return Verdict::fail(format!("the table cannot be read: {e}")),
    };
    let got = table_md5(&rows);
    match (got.as_deref(), reveal) {
        (Some(h), _) if h.eq_ignore_ascii_case(want) => Verdict::pass("the table matches"),
        (None, Reveal::Hidden) => Verdict::fail("the table is empty; its hash differs"),
        (Some(h), Reveal::Hidden) => Verdict::fail(format!(
            "the table ({} rows, md5 {h}) differs from the expected table",
            rows.len()
        )),
        (got, Reveal::Shown) => Verdict::fail(format!(
            "table md5 {} ({} rows), expected {want}",
            got.unwrap_or("NULL (empty table)"),
            rows.len()
        )),
    }
}

/// MySQL's group-concat limit (`group_concat_max_len`, default 1024
/// bytes); the concatenated row hashes are cut there, as MySQL does.
const GROUP_CONCAT_MAX_LEN: usize = 1024;

/// The table hash LifelongAgentBench computes on MySQL:
///
/// ```sql
/// SELECT md5(group_concat(rowhash ORDER BY rowhash)) FROM
///   (SELECT substring(md5(concat_ws(',', c1, c2, ...)), 1, 5) AS rowhash FROM t)
/// ```
///
/// Per row, the non-NULL values (`CONCAT_WS` skips NULLs) are joined with
/// `,`: integers in decimal, text as is, other reals in their shortest
/// decimal form (MySQL prints a double that way; a REAL in an integer
/// column was already rounded by [`SqlEnv::table_rows`]). The first five
/// hex digits of each row's md5 are sorted, joined with `,` (cut at
/// 1024 bytes) and hashed. An empty table has no hash (MySQL's `md5(NULL)`
/// is NULL).
pub fn table_md5(rows: &[Vec<Cell>]) -> Option<String> {
    if rows.is_empty() {
        return None;
    }
    let mut hashes: Vec<String> = rows
        .iter()
        .map(|row| {
            let values: Vec<String> = row
                .iter()
                .filter_map(|c| match c {
                    Cell::Null => None,
                    Cell::Int(i) => Some(i.to_string()),
                    Cell::Real(f) => Some(f.to_string()),
                    Cell::Text(s) => Some(s.clone()),
                })
                .collect();
            let mut h = md5_hex(values.join(",").as_bytes());
            h.truncate(5);
            h
        })
        .collect();
    hashes.sort();
    let mut joined = hashes.join(",");
    joined.truncate(GROUP_CONCAT_MAX_LEN);
    Some(md5_hex(joined.as_bytes()))
}

fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

// ---------------------------------------------------------------------------
// Rows.

/// Decimals written after the point of a numeric literal, if any.
fn decimals(text: &str) -> Option<usize> {
    let (_, frac) = text.split_once('.')?;
    let digits = frac.split(['e', 'E']).next().unwrap_or(frac);
    Some(digits.len())
}

/// Whether the expected number is one MySQL printed with four decimals:
/// its text has exactly four, or it is a four-decimal value carried as a
/// double with float noise (`4.6667000000000005`, from Python arithmetic
/// on a value MySQL gave as `4.6667`).
fn four_decimal(want: f64, text: &str) -> bool {
    match decimals(text) {
        Some(4) => true,
        Some(d) if d > 4 => {
            let r = round4(want);
            r != want && (r - want).abs() <= 1e-9 * (1.0 + want.abs())
        }
        _ => false,
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn as_number(c: &Cell) -> Option<f64> {
    match c {
        Cell::Int(i) => Some(*i as f64),
        Cell::Real(f) => Some(*f),
        Cell::Null | Cell::Text(_) => None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + b.abs())
}

/// One returned value against one expected literal.
fn cell_matches(got: &Cell, want: &Literal) -> bool {
    match (got, &want.cell) {
        (Cell::Null, Cell::Null) => true,
        (Cell::Text(a), Cell::Text(b)) => a == b,
        (g, w) => match (as_number(g), as_number(w)) {
            (Some(a), Some(b)) => {
                close(a, b) || (four_decimal(b, &want.text) && close(round4(a), b))
            }
            _ => false,
        },
    }
}

fn row_matches(got: &[Cell], want: &[Literal]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| cell_matches(g, w))
}

/// Whether two values are equal as `ORDER BY` keys.
fn key_equal(a: &Cell, b: &Cell) -> bool {
    match (a, b) {
        (Cell::Null, Cell::Null) => true,
        (Cell::Text(x), Cell::Text(y)) => x == y,
        _ => match (as_number(a), as_number(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// Multiset equality under [`row_matches`] (a perfect bipartite matching,
/// since tolerant equality is not transitive). `Err(i)`: returned row `i`
/// (an index into `got`) has no partner.
fn multiset_match(got: &[Vec<Cell>], want: &[Vec<Literal>]) -> Result<(), usize> {
    let n = got.len();
    let adj: Vec<Vec<usize>> = got
        .iter()
        .map(|g| {
            want.iter()
                .enumerate()
                .filter(|(_, w)| row_matches(g, w))
                .map(|(j, _)| j)
                .collect()
        })
        .collect();
    // partner[j]: the returned row matched to expected row j.
    let mut partner: Vec<Option<usize>> = vec![None; want.len()];
    for i in 0..n {
        let mut seen = vec![false; want.len()];
        if !augment(i, &adj, &mut partner, &mut seen) {
            return Err(i);
        }
    }
    Ok(())
}

/// Kuhn's augmenting path from returned row `i`.
fn augment(i: usize, adj: &[Vec<usize>], partner: &mut [Option<usize>], seen: &mut [bool]) -> bool {
    let Some(edges) = adj.get(i) else {
        return false;
    };
    for &j in edges {
        if seen.get(j).copied().unwrap_or(true) {
            continue;
        }
        if let Some(s) = seen.get_mut(j) {
            *s = true;
        }
        let free = match partner.get(j).copied().flatten() {
            None => true,
            Some(k) => augment(k, adj, partner, seen),
        };
        if free {
            if let Some(p) = partner.get_mut(j) {
                *p = Some(i);
            }
            return true;
        }
    }
    false
}

/// `ORDER BY` item text in a comparable form: no quotes, no spaces, lower
/// case, and no `x.` qualifier on a plain column.
fn normalize(item: &str) -> String {
    let s: String = item
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '`' && *c != '"')
        .flat_map(char::to_lowercase)
        .collect();
    let plain = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_');
    match s.split_once('.') {
        Some((q, c)) if plain(q) && plain(c) => c.to_string(),
        _ => s,
    }
}

/// Output column indices of the longest prefix of `ORDER BY` items that
/// name an output column (by name, alias or position).
fn order_keys(items: &[String], columns: &[String]) -> Vec<usize> {
    let names: Vec<String> = columns.iter().map(|c| normalize(c)).collect();
    let mut keys = Vec::new();
    for item in items {
        let key = match item.trim().parse::<usize>() {
            Ok(n) if n >= 1 && n <= columns.len() => Some(n - 1),
            Ok(_) => None,
            Err(_) => {
                let n = normalize(item);
                names.iter().position(|c| *c == n)
            }
        };
        match key {
            Some(k) => keys.push(k),
            None => break,
        }
    }
    keys
}

fn judge_rows(
    out: &StepOutcome,
    want: &[Vec<Literal>],
    sql: Option<&str>,
    reveal: Reveal,
) -> Verdict {
    let got = &out.rows;
    if got.len() != want.len() {
        return Verdict::fail(format!(
            "returned {} rows, expected {}",
            got.len(),
            want.len()
        ));
    }
    let show_want = |j: usize| match (reveal, want.get(j)) {
        (Reveal::Shown, Some(w)) => {
            let texts: Vec<&str> = w.iter().map(|l| l.text.as_str()).collect();
            format!(", expected ({})", texts.join(", "))
        }
        _ => String::new(),
    };
    let unmatched = |i: usize, what: &str| {
        let row = got.get(i).map(|r| render_row(r)).unwrap_or_default();
        Verdict::fail(format!(
            "returned row {i} {row} matches no expected row{what}"
        ))
    };
    let items = sql.map(top_level_order_by);
    match items {
        Some(items) if items.is_empty() => match multiset_match(got, want) {
            Ok(()) => Verdict::pass("the rows match (unordered: no ORDER BY)"),
            Err(i) => unmatched(i, &show_want(i)),
        },
        Some(items) => {
            let keys = order_keys(&items, &out.columns);
            if keys.is_empty() {
                return strict(got, want, &show_want);
            }
            let mut start = 0;
            while start < got.len() {
                let mut end = start + 1;
                while end < got.len()
                    && keys
                        .iter()
                        .all(|&k| match (got[start].get(k), got[end].get(k)) {
                            (Some(a), Some(b)) => key_equal(a, b),
                            _ => false,
                        })
                {
                    end += 1;
                }
                if let Err(i) = multiset_match(&got[start..end], &want[start..end]) {
                    let what = format!(
                        " among expected rows {start}..{end} (ties on the ORDER BY keys){}",
                        show_want(start + i)
                    );
                    return unmatched(start + i, &what);
                }
                start = end;
            }
            Verdict::pass("the rows match in ORDER BY order (ties in any order)")
        }
        None => strict(got, want, &show_want),
    }
}

fn strict(
    got: &[Vec<Cell>],
    want: &[Vec<Literal>],
    show_want: &dyn Fn(usize) -> String,
) -> Verdict {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if !row_matches(g, w) {
            return Verdict::fail(format!(
                "row {i} {} differs from the expected row at that position{}",
                render_row(g),
                show_want(i)
            ));
        }
    }
    Verdict::pass("the rows match in order")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn lit(cell: Cell, text: &str) -> Literal {
        Literal {
            cell,
            text: text.to_string(),
        }
    }

    #[test]
    fn numbers() {
        assert!(cell_matches(
            &Cell::Int(1200),
            &lit(Cell::Real(1200.0), "1200.0")
        ));
        assert!(cell_matches(
            &Cell::Real(63.333333333333336),
            &lit(Cell::Real(63.3333), "63.3333")
        ));
        assert!(!cell_matches(
            &Cell::Real(63.34),
            &lit(Cell::Real(63.3333), "63.3333")
        ));
        assert!(cell_matches(
            &Cell::Real(4.666666666666667),
            &lit(Cell::Real(4.6667000000000005), "4.6667000000000005")
        ));
        // Only four decimals are special: 63.33 does not round to 63.3.
        assert!(!cell_matches(
            &Cell::Real(63.33),
            &lit(Cell::Real(63.3), "63.3")
        ));
        assert!(!cell_matches(
            &Cell::Text("1".into()),
            &lit(Cell::Int(1), "1")
        ));
        assert!(cell_matches(
            &Cell::Real(0.1 + 0.2),
            &lit(Cell::Real(0.3), "0.3")
        ));
    }

    #[test]
    fn order_key_mapping() {
        let cols = vec![
            "role".to_string(),
            "avg_hours".to_string(),
            "SUM(x)".to_string(),
        ];
        let items = vec!["s.role".to_string(), "AVG_HOURS".to_string()];
        assert_eq!(order_keys(&items, &cols), vec![0, 1]);
        let items = vec![
            "sum( x )".to_string(),
            "nope".to_string(),
            "role".to_string(),
        ];
        assert_eq!(order_keys(&items, &cols), vec![2]);
        assert_eq!(order_keys(&["2".to_string()], &cols), vec![1]);
    }

    #[test]
    fn matching_is_a_true_matching() {
        // Greedy would pair 1.0000015 with 1.0 and strand 0.999999, which
        // only 1.0 accepts.
        let got = vec![vec![Cell::Real(1.0000015)], vec![Cell::Real(0.999999)]];
        let want = vec![
            vec![lit(Cell::Real(1.0), "1.0")],
            vec![lit(Cell::Real(1.000003), "1.000003")],
        ];
        assert!(multiset_match(&got, &want).is_ok());
    }

    #[test]
    fn md5_of_empty_table_is_null() {
        assert_eq!(table_md5(&[]), None);
    }
}
