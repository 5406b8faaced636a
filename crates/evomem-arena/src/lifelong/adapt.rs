//! Case-based adaptation: reuse a retrieved trajectory's committed SQL on a
//! new task by re-aligning its table, columns and literals.
//!
//! LifelongAgentBench tasks come in families that share a statement shape
//! and differ in table, columns and constants. A memory that solved one
//! member of a family therefore carries most of the answer to another; what
//! has to change is what the new task names. [`adapt`] does the change in
//! three alignments over a small SQL lexer (identifiers, string and number
//! literals, everything else kept byte for byte):
//!
//! 1. **Table**: the memory's table name becomes the new table's.
//! 2. **Columns**: each memory column used in the SQL maps to the new
//!    table's column of the same name, else to the unique new column with
//!    the highest token overlap (names split on `_`, lightly stemmed). A
//!    column with no overlapping candidate, or a tie, fails the adaptation.
//!    Identifiers that are not memory columns (aliases, keywords) are kept.
//! 3. **Literals**: the SQL's literals are aligned, in order, with the
//!    literals of the memory's task text (quoted strings, numbers, dates,
//!    as [`super::nl2sql`] lexes them), and each aligned literal is replaced
//!    by the new instruction's literal in the same position, provided the
//!    two instructions have the same number of literals and the kinds agree.
//!    Derived constants follow: a year turned into a date keeps its month and
//!    day, a percentage turned into a factor (`10%` → `1.1`) is recomputed.
//!    A string literal that the memory text names without quotes (a value
//!    grounded in the table) cannot be aligned and fails the adaptation;
//!    any other unaligned literal is a constant of the statement and kept.
//!
//! For the memory's own task (same instruction and table) the SQL comes back
//! unchanged.

use super::nl2sql::{column_mentions, lex, stem, Lit};
use super::types::{Column, MemoryView, Table};

/// The memory's committed SQL adapted to `instruction` over `table`, or
/// `None` when the memory has no answer or an alignment fails.
pub fn adapt(memory: &MemoryView, instruction: &str, table: &Table) -> Option<String> {
    let sql = memory.answer.as_deref()?;
    let new_cols: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
    if memory.task == instruction
        && memory.table == table.name
        && memory
            .columns
            .iter()
            .map(String::as_str)
            .eq(new_cols.iter().copied())
    {
        return Some(sql.to_string());
    }
    let old_lits: Vec<(Lit, bool)> = lex(&memory.task)
        .into_iter()
        .filter_map(|t| t.lit.map(|l| (l, t.pct)))
        .collect();
    let new_lits: Vec<(Lit, bool)> = lex(instruction)
        .into_iter()
        .filter_map(|t| t.lit.map(|l| (l, t.pct)))
        .collect();
    let same_shape = old_lits.len() == new_lits.len()
        && old_lits
            .iter()
            .zip(&new_lits)
            .all(|(a, b)| same_kind(&a.0, &b.0) && a.1 == b.1);
    let memory_words: Vec<String> = lex(&memory.task)
        .into_iter()
        .filter(|t| t.lit.is_none())
        .map(|t| t.norm)
        .collect();
    let new_words: Vec<String> = lex(instruction)
        .into_iter()
        .filter(|t| t.lit.is_none())
        .map(|t| t.norm)
        .collect();
    // Columns by role: the k-th column the memory's task names maps to the
    // k-th column the new instruction names, when both name as many.
    let old_table = Table {
        name: memory.table.clone(),
        columns: memory
            .columns
            .iter()
            .map(|c| Column {
                name: c.clone(),
                ty: String::new(),
            })
            .collect(),
        rows: Vec::new(),
    };
    let old_order = column_mentions(&memory.task, &old_table);
    let new_order = column_mentions(instruction, table);
    let by_role: Vec<(String, String)> = if old_order.len() == new_order.len() {
        old_order.into_iter().zip(new_order).collect()
    } else {
        Vec::new()
    };
    let mut out = String::with_capacity(sql.len());
    let mut used = vec![false; old_lits.len()];
    for tok in sql_tokens(sql) {
        match tok {
            SqlTok::Other(s) => out.push_str(s),
            SqlTok::Ident(s) => {
                if s.eq_ignore_ascii_case(&memory.table) {
                    out.push_str(&table.name);
                } else if let Some(c) = by_role.iter().find(|(o, _)| o.eq_ignore_ascii_case(s)) {
                    out.push_str(&c.1);
                } else if let Some(pos) = memory
                    .columns
                    .iter()
                    .position(|c| c.eq_ignore_ascii_case(s))
                {
                    out.push_str(map_column(s, pos, &new_cols, &new_words)?);
                } else {
                    out.push_str(s);
                }
            }
            SqlTok::Str(raw, value) => {
                let lit = Lit::Str(value.clone());
                match align(&lit, &old_lits, &mut used) {
                    Some(i) if same_shape => {
                        out.push_str(&new_literal(&lit, i, &old_lits, &new_lits)?)
                    }
                    Some(_) => return None,
                    None => {
                        let grounded = value
                            .split(|c: char| !c.is_alphanumeric())
                            .filter(|w| !w.is_empty())
                            .map(stem)
                            .any(|w| memory_words.contains(&w));
                        if grounded {
                            return None;
                        }
                        out.push_str(raw);
                    }
                }
            }
            SqlTok::Num(raw) => {
                let lit = Lit::Num(raw.to_string());
                match align(&lit, &old_lits, &mut used) {
                    Some(i) if same_shape => {
                        out.push_str(&new_literal(&lit, i, &old_lits, &new_lits)?)
                    }
                    Some(_) => return None,
                    None => out.push_str(raw),
                }
            }
        }
    }
    Some(out)
}

fn same_kind(a: &Lit, b: &Lit) -> bool {
    matches!(
        (a, b),
        (Lit::Str(_), Lit::Str(_)) | (Lit::Num(_), Lit::Num(_)) | (Lit::Date(_), Lit::Date(_))
    )
}

/// Index of the memory-text literal that `lit` (from the SQL) came from:
/// the first unused equal one, else any equal one.
fn align(lit: &Lit, old: &[(Lit, bool)], used: &mut [bool]) -> Option<usize> {
    let eq = |(o, pct): &(Lit, bool)| derives(lit, o, *pct);
    let i = old
        .iter()
        .enumerate()
        .position(|(i, o)| !used.get(i).copied().unwrap_or(true) && eq(o))
        .or_else(|| old.iter().position(eq))?;
    if let Some(u) = used.get_mut(i) {
        *u = true;
    }
    Some(i)
}

/// Does the SQL literal `sql` come from the text literal `text`?
fn derives(sql: &Lit, text: &Lit, pct: bool) -> bool {
    match (sql, text) {
        (Lit::Str(a), Lit::Str(b) | Lit::Date(b)) => a.eq_ignore_ascii_case(b) || year_date(a, b),
        (Lit::Str(a), Lit::Num(b)) => year_date(a, b),
        (Lit::Num(a), Lit::Num(b)) => {
            let (Ok(x), Ok(y)) = (a.parse::<f64>(), b.parse::<f64>()) else {
                return false;
            };
            x == y
                || (pct
                    && ((x - (1.0 + y / 100.0)).abs() < 1e-9
                        || (x - (1.0 - y / 100.0)).abs() < 1e-9))
        }
        _ => false,
    }
}

/// `'2023-01-01'` from the year `2023`.
fn year_date(date: &str, year: &str) -> bool {
    year.len() == 4
        && date.len() == 10
        && date.starts_with(year)
        && date.as_bytes().get(4) == Some(&b'-')
}

/// The new literal replacing `sql_lit`, which came from `old[i]`.
fn new_literal(
    sql_lit: &Lit,
    i: usize,
    old: &[(Lit, bool)],
    new: &[(Lit, bool)],
) -> Option<String> {
    let (o, pct) = old.get(i)?;
    let (n, _) = new.get(i)?;
    let text = |l: &Lit| match l {
        Lit::Str(s) | Lit::Num(s) | Lit::Date(s) => s.clone(),
    };
    match sql_lit {
        Lit::Str(s) => {
            if let (Lit::Num(y_old), Lit::Num(y_new)) = (o, n) {
                if year_date(s, y_old) && y_new.len() == 4 {
                    return Some(super::nl2sql::quote(&format!("{y_new}{}", &s[4..])));
                }
                return None;
            }
            Some(super::nl2sql::quote(&text(n)))
        }
        Lit::Num(x) => {
            let (Ok(xv), Ok(ov), Ok(nv)) = (
                x.parse::<f64>(),
                text(o).parse::<f64>(),
                text(n).parse::<f64>(),
            ) else {
                return None;
            };
            if *pct && xv != ov {
                let up = (xv - (1.0 + ov / 100.0)).abs() < 1e-9;
                let f = if up {
                    1.0 + nv / 100.0
                } else {
                    1.0 - nv / 100.0
                };
                let s = format!("{f:.4}");
                return Some(s.trim_end_matches('0').trim_end_matches('.').to_string());
            }
            Some(text(n))
        }
        Lit::Date(_) => Some(text(n)),
    }
}

/// The new column for memory column `old` (at position `pos` of the
/// memory's table): the same name, else the best by token overlap (Jaccard
/// over stemmed name parts, which must share a part), with ties broken by
/// the new instruction naming the column's other parts, then by position.
fn map_column<'a>(
    old: &str,
    pos: usize,
    new_cols: &[&'a str],
    new_words: &[String],
) -> Option<&'a str> {
    if let Some(c) = new_cols.iter().find(|c| c.eq_ignore_ascii_case(old)) {
        return Some(c);
    }
    let toks =
        |s: &str| -> Vec<String> { s.split('_').filter(|p| !p.is_empty()).map(stem).collect() };
    let ot = toks(old);
    let mut scored: Vec<(f64, usize, usize, &'a str)> = Vec::new();
    for (i, c) in new_cols.iter().enumerate() {
        let nt = toks(c);
        let inter = ot.iter().filter(|t| nt.contains(t)).count();
        if inter == 0 {
            continue;
        }
        let union = ot.len() + nt.len() - inter;
        let named = nt
            .iter()
            .filter(|t| !ot.contains(t) && new_words.contains(t))
            .count();
        let same_pos = usize::from(i == pos);
        scored.push((inter as f64 / union as f64, named, same_pos, c));
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    match scored.as_slice() {
        [] => None,
        [only] => Some(only.3),
        [a, b, ..] => {
            let tie = (a.0 - b.0).abs() < 1e-12 && a.1 == b.1 && a.2 == b.2;
            (!tie).then_some(a.3)
        }
    }
}

/// A SQL token, borrowing the source text.
enum SqlTok<'a> {
    /// An identifier or keyword.
    Ident(&'a str),
    /// A string literal: raw text with quotes, and its value.
    Str(&'a str, String),
    /// A number.
    Num(&'a str),
    /// Anything else (spaces, operators, punctuation), kept verbatim.
    Other(&'a str),
}

fn sql_tokens(sql: &str) -> Vec<SqlTok<'_>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c == b'\'' {
            let mut j = i + 1;
            let mut value = String::new();
            let mut seg = j;
            while j < b.len() {
                if b[j] == b'\'' {
                    if b.get(j + 1) == Some(&b'\'') {
                        value.push_str(sql.get(seg..j + 1).unwrap_or(""));
                        j += 2;
                        seg = j;
                        continue;
                    }
                    break;
                }
                j += 1;
            }
            value.push_str(sql.get(seg..j.min(b.len())).unwrap_or(""));
            let end = (j + 1).min(b.len());
            out.push(SqlTok::Str(sql.get(start..end).unwrap_or(""), value));
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b'`' {
            if c == b'`' {
                // `name`: keep the quotes, adapt the name inside.
                out.push(SqlTok::Other("`"));
                let mut k = i + 1;
                while k < b.len() && b[k] != b'`' {
                    k += 1;
                }
                out.push(SqlTok::Ident(sql.get(i + 1..k).unwrap_or("")));
                if k < b.len() {
                    out.push(SqlTok::Other("`"));
                    k += 1;
                }
                i = k;
                continue;
            }
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            out.push(SqlTok::Ident(sql.get(start..j).unwrap_or("")));
            i = j;
        } else if c.is_ascii_digit() {
            let prev_ident =
                start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                j += 1;
            }
            let s = sql.get(start..j).unwrap_or("");
            out.push(if prev_ident {
                SqlTok::Other(s)
            } else {
                SqlTok::Num(s)
            });
            i = j;
        } else {
            let mut j = i + 1;
            while j < b.len() && !sql.is_char_boundary(j) {
                j += 1;
            }
            out.push(SqlTok::Other(sql.get(start..j).unwrap_or("")));
            i = j;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifelong::types::Column;

    fn table(name: &str, cols: &[&str]) -> Table {
        Table {
            name: name.into(),
            columns: cols
                .iter()
                .map(|c| Column {
                    name: (*c).into(),
                    ty: "TEXT".into(),
                })
                .collect(),
            rows: vec![],
        }
    }

    fn memory(task: &str, t: &Table, sql: &str) -> MemoryView {
        MemoryView {
            task: task.into(),
            table: t.name.clone(),
            columns: t.columns.iter().map(|c| c.name.clone()).collect(),
            answer: Some(sql.into()),
            steps: vec![],
            success: true,
            score: 1.0,
        }
    }

    #[test]
    fn same_task_returns_sql_unchanged() {
        let t = table("t", &["a", "b"]);
        let m = memory(
            "Find a where b is 'x'.",
            &t,
            "SELECT a FROM t WHERE b = 'x'",
        );
        assert_eq!(
            adapt(&m, "Find a where b is 'x'.", &t).as_deref(),
            Some("SELECT a FROM t WHERE b = 'x'")
        );
    }

    #[test]
    fn aligns_table_columns_and_literals() {
        let old = table(
            "membership_payments",
            &["payment_id", "member_id", "payment_date", "amount"],
        );
        let new = table(
            "donation_records",
            &["donation_id", "donor_id", "donation_date", "amount"],
        );
        let m = memory(
            "Insert a payment for member ID 102 with date '2023-10-15' and amount 75.",
            &old,
            "INSERT INTO membership_payments (member_id, payment_date, amount) VALUES (102, '2023-10-15', 75);",
        );
        let got = adapt(
            &m,
            "Insert a donation for donor ID 7 with date '2024-01-02' and amount 30.",
            &new,
        );
        assert_eq!(
            got.as_deref(),
            Some("INSERT INTO donation_records (donor_id, donation_date, amount) VALUES (7, '2024-01-02', 30);")
        );
    }

    #[test]
    fn percentages_and_years_follow() {
        let t = table("fees", &["fee", "issue_date"]);
        let m = memory(
            "Increase the fee by 10% for entries issued before 2023.",
            &t,
            "UPDATE fees SET fee = fee * 1.1 WHERE issue_date < '2023-01-01';",
        );
        let got = adapt(
            &m,
            "Increase the fee by 20% for entries issued before 2021.",
            &t,
        );
        assert_eq!(
            got.as_deref(),
            Some("UPDATE fees SET fee = fee * 1.2 WHERE issue_date < '2021-01-01';")
        );
    }

    #[test]
    fn fails_when_a_column_cannot_be_mapped_or_shapes_differ() {
        let old = table("a_t", &["price", "city"]);
        let new = table("b_t", &["weight", "region"]);
        let m = memory(
            "Prices over 5?",
            &old,
            "SELECT city FROM a_t WHERE price > 5",
        );
        assert_eq!(adapt(&m, "Weights over 5?", &new), None);
        let same = table("a_t", &["price", "city"]);
        assert_eq!(adapt(&m, "Prices over 5 and under 9?", &same), None);
    }

    #[test]
    fn grounded_values_fail_and_missing_answer_is_none() {
        let t = table("pets", &["pet_type", "owner_id"]);
        let m = memory(
            "Which owners have dogs?",
            &t,
            "SELECT owner_id FROM pets WHERE pet_type = 'Dog'",
        );
        assert_eq!(adapt(&m, "Which owners have cats?", &t), None);
        let mut none = m.clone();
        none.answer = None;
        assert_eq!(adapt(&none, "Which owners have dogs?", &t), None);
    }
}
