//! Reading LifelongAgentBench's `db_bench_data.json` into [`DbTask`]s.
//!
//! The file is a JSON object keyed `"0"`..`"499"`. Besides `sample_index`
//! and `instruction`, three fields of every entry are *Python literals held
//! in JSON strings* (the benchmark wrote them with `str(dict)`):
//! `answer_info`, `table_info` and `skill_list`. They use single quotes,
//! `None`, `True`/`False`, tuples and floats such as `6800.0`, so they are
//! not JSON; this module carries a small parser for exactly the literal
//! subset Python's `ast.literal_eval` accepts for such data (strings with
//! either quote and backslash escapes, ints, floats, `None`, booleans,
//! lists, tuples and dicts).
//!
//! Every float keeps its source text ([`Literal::text`]) because the judge
//! needs the number of decimals written (MySQL prints `AVG` with four).
//!
//! A malformed entry is an [`ArenaError::BadTask`] that names the sample
//! and the precise field path (`table_info.row_list[3]`,
//! `answer_info.direct[0][2]`, ...), so a broken file can be fixed by hand.

use std::path::Path;

use super::types::{Cell, Column, DbTask, Expected, Literal, Table, Truth};
use crate::error::ArenaError;

/// Reads and validates the task file; tasks come back sorted by index.
pub fn load_tasks(path: &Path) -> Result<Vec<DbTask>, ArenaError> {
    let text = std::fs::read_to_string(path).map_err(|source| ArenaError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_tasks(path, &text)
}

/// Parses the task file's text. `path_for_errors` only labels errors.
pub fn parse_tasks(path_for_errors: &Path, json_text: &str) -> Result<Vec<DbTask>, ArenaError> {
    let root: serde_json::Value =
        serde_json::from_str(json_text).map_err(|e| ArenaError::BadFile {
            path: path_for_errors.to_path_buf(),
            message: e.to_string(),
        })?;
    let serde_json::Value::Object(entries) = root else {
        return Err(ArenaError::BadFile {
            path: path_for_errors.to_path_buf(),
            message: "the top level is not a JSON object keyed by sample index".to_string(),
        });
    };
    let mut tasks = Vec::with_capacity(entries.len());
    for (key, entry) in &entries {
        let ctx = Ctx {
            path: path_for_errors,
            sample: key,
        };
        tasks.push(parse_entry(&ctx, entry)?);
    }
    tasks.sort_by_key(|t| t.index);
    Ok(tasks)
}

/// Where an error happened: file and sample.
struct Ctx<'a> {
    path: &'a Path,
    sample: &'a str,
}

impl Ctx<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ArenaError {
        ArenaError::BadTask {
            path: self.path.to_path_buf(),
            sample: self.sample.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

fn parse_entry(ctx: &Ctx<'_>, entry: &serde_json::Value) -> Result<DbTask, ArenaError> {
    let index: usize = ctx.sample.parse().map_err(|_| {
        ctx.err(
            "(key)",
            "the key is not a sample index (a non-negative integer)",
        )
    })?;
    let serde_json::Value::Object(obj) = entry else {
        return Err(ctx.err("(entry)", "the entry is not a JSON object"));
    };
    let field = |name: &str| obj.get(name).ok_or_else(|| ctx.err(name, "missing field"));
    let string_field = |name: &str| -> Result<&str, ArenaError> {
        field(name)?
            .as_str()
            .ok_or_else(|| ctx.err(name, "expected a string"))
    };

    let sample_index = field("sample_index")?
        .as_u64()
        .ok_or_else(|| ctx.err("sample_index", "expected a non-negative integer"))?;
    if usize::try_from(sample_index).ok() != Some(index) {
        return Err(ctx.err(
            "sample_index",
            format!("{sample_index} differs from the entry's key"),
        ));
    }
    let instruction = string_field("instruction")?.to_string();

    let table_src = string_field("table_info")?;
    let table_val = parse_field(ctx, "table_info", table_src)?;
    let table = table_from(ctx, &table_val, table_src)?;

    let skills_src = string_field("skill_list")?;
    let skills_val = parse_field(ctx, "skill_list", skills_src)?;
    let skills = skills_from(ctx, &skills_val)?;

    let answer_src = string_field("answer_info")?;
    let answer_val = parse_field(ctx, "answer_info", answer_src)?;
    let truth = truth_from(ctx, &answer_val, answer_src)?;

    Ok(DbTask {
        index,
        instruction,
        table,
        skills,
        truth,
    })
}

fn parse_field(ctx: &Ctx<'_>, field: &str, src: &str) -> Result<PyValue, ArenaError> {
    parse_py_literal(src).map_err(|e| ctx.err(field, format!("not a Python literal: {e}")))
}

/// Looks a key up in a Python dict; `field` is the dict's path.
fn dict_get<'v>(
    ctx: &Ctx<'_>,
    value: &'v PyValue,
    field: &str,
    key: &str,
) -> Result<&'v PyValue, ArenaError> {
    let PyKind::Dict(items) = &value.kind else {
        return Err(ctx.err(
            field,
            format!("expected a dict, found {}", value.kind.name()),
        ));
    };
    items
        .iter()
        .find(|(k, _)| matches!(&k.kind, PyKind::Str(s) if s == key))
        .map(|(_, v)| v)
        .ok_or_else(|| ctx.err(format!("{field}.{key}"), "missing key"))
}

fn list_items<'v>(
    ctx: &Ctx<'_>,
    value: &'v PyValue,
    field: &str,
) -> Result<&'v [PyValue], ArenaError> {
    match &value.kind {
        PyKind::List(items) => Ok(items),
        other => Err(ctx.err(
            field,
            format!("expected a list or tuple, found {}", other.name()),
        )),
    }
}

fn str_of<'v>(ctx: &Ctx<'_>, value: &'v PyValue, field: &str) -> Result<&'v str, ArenaError> {
    match &value.kind {
        PyKind::Str(s) => Ok(s),
        other => Err(ctx.err(field, format!("expected a string, found {}", other.name()))),
    }
}

/// The declared type goes into `CREATE TABLE` verbatim, so only plain type
/// names are accepted (`INT`, `TEXT`, `VARCHAR(20)`, `DECIMAL(10, 2)`).
fn valid_type(ty: &str) -> bool {
    !ty.trim().is_empty()
        && ty
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ' ' | '(' | ')' | ','))
}

fn table_from(ctx: &Ctx<'_>, value: &PyValue, src: &str) -> Result<Table, ArenaError> {
    let name = str_of(
        ctx,
        dict_get(ctx, value, "table_info", "name")?,
        "table_info.name",
    )?;
    if name.trim().is_empty() {
        return Err(ctx.err("table_info.name", "empty table name"));
    }
    let col_vals = list_items(
        ctx,
        dict_get(ctx, value, "table_info", "column_info_list")?,
        "table_info.column_info_list",
    )?;
    if col_vals.is_empty() {
        return Err(ctx.err("table_info.column_info_list", "no columns"));
    }
    let mut columns: Vec<Column> = Vec::with_capacity(col_vals.len());
    for (i, c) in col_vals.iter().enumerate() {
        let path = format!("table_info.column_info_list[{i}]");
        let cname = str_of(
            ctx,
            dict_get(ctx, c, &path, "name")?,
            &format!("{path}.name"),
        )?;
        let ty = str_of(
            ctx,
            dict_get(ctx, c, &path, "type")?,
            &format!("{path}.type"),
        )?;
        if cname.is_empty() {
            return Err(ctx.err(format!("{path}.name"), "empty column name"));
        }
        if columns.iter().any(|o| o.name.eq_ignore_ascii_case(cname)) {
            return Err(ctx.err(
                format!("{path}.name"),
                format!("duplicate column name `{cname}`"),
            ));
        }
        if !valid_type(ty) {
            return Err(ctx.err(
                format!("{path}.type"),
                format!("`{ty}` is not a plain SQL type name"),
            ));
        }
        columns.push(Column {
            name: cname.to_string(),
            ty: ty.to_string(),
        });
    }
    let row_vals = list_items(
        ctx,
        dict_get(ctx, value, "table_info", "row_list")?,
        "table_info.row_list",
    )?;
    let mut rows = Vec::with_capacity(row_vals.len());
    for (r, row) in row_vals.iter().enumerate() {
        let path = format!("table_info.row_list[{r}]");
        let cells = list_items(ctx, row, &path)?;
        if cells.len() != columns.len() {
            return Err(ctx.err(
                path,
                format!(
                    "the row has {} values but the table has {} columns",
                    cells.len(),
                    columns.len()
                ),
            ));
        }
        let mut out = Vec::with_capacity(cells.len());
        for (c, cell) in cells.iter().enumerate() {
            out.push(literal_of(ctx, cell, src, &format!("{path}[{c}]"))?.cell);
        }
        rows.push(out);
    }
    Ok(Table {
        name: name.to_string(),
        columns,
        rows,
    })
}

fn skills_from(ctx: &Ctx<'_>, value: &PyValue) -> Result<Vec<String>, ArenaError> {
    list_items(ctx, value, "skill_list")?
        .iter()
        .enumerate()
        .map(|(i, v)| str_of(ctx, v, &format!("skill_list[{i}]")).map(str::to_string))
        .collect()
}

fn truth_from(ctx: &Ctx<'_>, value: &PyValue, src: &str) -> Result<Truth, ArenaError> {
    let direct = dict_get(ctx, value, "answer_info", "direct")?;
    let md5 = dict_get(ctx, value, "answer_info", "md5")?;
    let sql = str_of(
        ctx,
        dict_get(ctx, value, "answer_info", "sql")?,
        "answer_info.sql",
    )?;
    let expected = match (&direct.kind, &md5.kind) {
        (PyKind::None, PyKind::None) => {
            return Err(ctx.err(
                "answer_info",
                "both `direct` and `md5` are None; exactly one must be given",
            ))
        }
        (PyKind::None, _) => {
            let hash = str_of(ctx, md5, "answer_info.md5")?;
            if hash.len() != 32 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(ctx.err(
                    "answer_info.md5",
                    format!("`{hash}` is not a 32-digit hex md5"),
                ));
            }
            Expected::Md5(hash.to_ascii_lowercase())
        }
        (_, PyKind::None) => {
            let rows = list_items(ctx, direct, "answer_info.direct")?;
            let mut out = Vec::with_capacity(rows.len());
            for (r, row) in rows.iter().enumerate() {
                let path = format!("answer_info.direct[{r}]");
                let cells = list_items(ctx, row, &path)?;
                let mut lits = Vec::with_capacity(cells.len());
                for (c, cell) in cells.iter().enumerate() {
                    lits.push(literal_of(ctx, cell, src, &format!("{path}[{c}]"))?);
                }
                out.push(lits);
            }
            Expected::Rows(out)
        }
        (_, _) => {
            return Err(ctx.err(
                "answer_info",
                "both `direct` and `md5` are given; exactly one must be None",
            ))
        }
    };
    Ok(Truth {
        expected,
        sql: sql.to_string(),
    })
}

/// A scalar Python value as a cell, with its source text.
fn literal_of(
    ctx: &Ctx<'_>,
    value: &PyValue,
    src: &str,
    field: &str,
) -> Result<Literal, ArenaError> {
    let cell = match &value.kind {
        PyKind::None => Cell::Null,
        PyKind::Bool(b) => Cell::Int(i64::from(*b)),
        PyKind::Int(i) => Cell::Int(*i),
        PyKind::Float(f) => Cell::Real(*f),
        PyKind::Str(s) => Cell::Text(s.clone()),
        other => {
            return Err(ctx.err(
                field,
                format!("expected a scalar value, found {}", other.name()),
            ))
        }
    };
    let text = src
        .get(value.span.0..value.span.1)
        .unwrap_or("")
        .to_string();
    Ok(Literal { cell, text })
}

// ---------------------------------------------------------------------------
// The Python-literal parser.

/// A parsed Python literal with its byte span in the source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PyValue {
    pub(crate) kind: PyKind,
    /// `[start, end)` byte offsets in the parsed text.
    pub(crate) span: (usize, usize),
}

/// The literal kinds `ast.literal_eval` yields for this data. Tuples are
/// read as lists: nothing downstream distinguishes them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PyKind {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<PyValue>),
    Dict(Vec<(PyValue, PyValue)>),
}

impl PyKind {
    fn name(&self) -> &'static str {
        match self {
            PyKind::None => "None",
            PyKind::Bool(_) => "a bool",
            PyKind::Int(_) => "an int",
            PyKind::Float(_) => "a float",
            PyKind::Str(_) => "a string",
            PyKind::List(_) => "a list",
            PyKind::Dict(_) => "a dict",
        }
    }
}

/// Parses one Python literal covering the whole text (surrounding
/// whitespace allowed). The error says what was expected and at which byte.
pub(crate) fn parse_py_literal(text: &str) -> Result<PyValue, String> {
    let mut p = PyParser {
        src: text,
        bytes: text.as_bytes(),
        pos: 0,
        depth: 0,
    };
    let v = p.value()?;
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(p.fail("end of the literal"));
    }
    Ok(v)
}

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 64;

struct PyParser<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

impl PyParser<'_> {
    fn fail(&self, expected: &str) -> String {
        let near: String = self
            .src
            .get(self.pos..)
            .unwrap_or("")
            .chars()
            .take(20)
            .collect();
        if near.is_empty() {
            format!(
                "expected {expected} at byte {}, found the end of the text",
                self.pos
            )
        } else {
            format!("expected {expected} at byte {} (near `{near}`)", self.pos)
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self) -> Result<PyValue, String> {
        self.skip_ws();
        let start = self.pos;
        let kind = match self.peek() {
            Some(b'\'' | b'"') => PyKind::Str(self.string()?),
            Some(b'[') => PyKind::List(self.seq(b']')?),
            Some(b'(') => return self.paren(),
            Some(b'{') => PyKind::Dict(self.dict()?),
            Some(c) if c == b'-' || c == b'+' || c == b'.' || c.is_ascii_digit() => {
                self.number()?
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let word = self.word().to_string();
                match word.as_str() {
                    "None" => PyKind::None,
                    "True" => PyKind::Bool(true),
                    "False" => PyKind::Bool(false),
                    _ => {
                        self.pos = start;
                        return Err(self.fail(&format!("a value (`{word}` is not a literal)")));
                    }
                }
            }
            _ => return Err(self.fail("a value")),
        };
        Ok(PyValue {
            kind,
            span: (start, self.pos),
        })
    }

    fn word(&mut self) -> &str {
        let start = self.pos;
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_') {
            self.pos += 1;
        }
        self.src.get(start..self.pos).unwrap_or("")
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "nesting deeper than {MAX_DEPTH} levels at byte {}",
                self.pos
            ));
        }
        Ok(())
    }

    /// Items up to `close`, the opening bracket being at `pos`; a trailing
    /// comma is allowed.
    fn seq(&mut self, close: u8) -> Result<Vec<PyValue>, String> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(close) {
                self.pos += 1;
                break;
            }
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.fail(&format!("`,` or `{}`", close as char))),
            }
        }
        self.depth -= 1;
        Ok(items)
    }

    /// `(x)` is `x`; `()`, `(x,)` and `(x, y)` are tuples.
    fn paren(&mut self) -> Result<PyValue, String> {
        let start = self.pos;
        self.enter()?;
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b')') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(PyValue {
                kind: PyKind::List(Vec::new()),
                span: (start, self.pos),
            });
        }
        let first = self.value()?;
        self.skip_ws();
        match self.peek() {
            Some(b')') => {
                self.pos += 1;
                self.depth -= 1;
                Ok(first)
            }
            Some(b',') => {
                self.pos += 1;
                let mut items = vec![first];
                loop {
                    self.skip_ws();
                    if self.peek() == Some(b')') {
                        self.pos += 1;
                        break;
                    }
                    items.push(self.value()?);
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b')') => {
                            self.pos += 1;
                            break;
                        }
                        _ => return Err(self.fail("`,` or `)`")),
                    }
                }
                self.depth -= 1;
                Ok(PyValue {
                    kind: PyKind::List(items),
                    span: (start, self.pos),
                })
            }
            _ => Err(self.fail("`,` or `)`")),
        }
    }

    fn dict(&mut self) -> Result<Vec<(PyValue, PyValue)>, String> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            let key = self.value()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.fail("`:`"));
            }
            self.pos += 1;
            let val = self.value()?;
            items.push((key, val));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.fail("`,` or `}`")),
            }
        }
        self.depth -= 1;
        Ok(items)
    }

    fn number(&mut self) -> Result<PyKind, String> {
        let start = self.pos;
        if matches!(self.peek(), Some(b'-' | b'+')) {
            self.pos += 1;
            self.skip_ws();
        }
        let digits_start = self.pos;
        let mut is_float = false;
        while let Some(c) = self.peek() {
            match c {
                b'0'..=b'9' | b'_' => self.pos += 1,
                b'.' => {
                    is_float = true;
                    self.pos += 1;
                }
                b'e' | b'E' => {
                    is_float = true;
                    self.pos += 1;
                    if matches!(self.peek(), Some(b'-' | b'+')) {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
        let body: String = self
            .src
            .get(digits_start..self.pos)
            .unwrap_or("")
            .chars()
            .filter(|c| *c != '_')
            .collect();
        let negative = self.bytes.get(start) == Some(&b'-');
        let signed = if negative {
            format!("-{body}")
        } else {
            body.clone()
        };
        if body.is_empty() || !body.bytes().any(|c| c.is_ascii_digit()) {
            self.pos = start;
            return Err(self.fail("a number"));
        }
        if is_float {
            signed.parse::<f64>().map(PyKind::Float).map_err(|_| {
                let at = start;
                format!(
                    "malformed float `{}` at byte {at}",
                    self.src.get(start..self.pos).unwrap_or("")
                )
            })
        } else {
            signed.parse::<i64>().map(PyKind::Int).map_err(|_| {
                format!(
                    "malformed or out-of-range integer `{}` at byte {start}",
                    self.src.get(start..self.pos).unwrap_or("")
                )
            })
        }
    }

    /// A quoted string at `pos`, with Python's backslash escapes.
    fn string(&mut self) -> Result<String, String> {
        let start = self.pos;
        let quote = self.bytes.get(self.pos).copied().unwrap_or(b'\'');
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = self.src.get(self.pos..).unwrap_or("");
            let mut chars = rest.chars();
            let Some(c) = chars.next() else {
                return Err(format!("unterminated string starting at byte {start}"));
            };
            self.pos += c.len_utf8();
            if c as u32 == u32::from(quote) {
                return Ok(out);
            }
            if c == '\n' {
                return Err(format!("unterminated string starting at byte {start}"));
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = chars.next() else {
                return Err(format!("unterminated string starting at byte {start}"));
            };
            self.pos += e.len_utf8();
            match e {
                '\\' => out.push('\\'),
                '\'' => out.push('\''),
                '"' => out.push('"'),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'a' => out.push('\u{7}'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'v' => out.push('\u{b}'),
                '\n' => {}
                'x' => out.push(self.hex_escape(2)?),
                'u' => out.push(self.hex_escape(4)?),
                'U' => out.push(self.hex_escape(8)?),
                // Python keeps an unknown escape as written.
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
        }
    }

    fn hex_escape(&mut self, n: usize) -> Result<char, String> {
        let at = self.pos;
        let digits = self
            .src
            .get(self.pos..self.pos + n)
            .ok_or_else(|| format!("truncated \\x/\\u escape at byte {at}"))?;
        let code = u32::from_str_radix(digits, 16)
            .map_err(|_| format!("bad hex digits `{digits}` in an escape at byte {at}"))?;
        self.pos += n;
        char::from_u32(code).ok_or_else(|| format!("escape at byte {at} is not a character"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn kind(text: &str) -> PyKind {
        parse_py_literal(text).unwrap().kind
    }

    #[test]
    fn scalars() {
        assert_eq!(kind("None"), PyKind::None);
        assert_eq!(kind(" True "), PyKind::Bool(true));
        assert_eq!(kind("False"), PyKind::Bool(false));
        assert_eq!(kind("-42"), PyKind::Int(-42));
        assert_eq!(kind("6800.0"), PyKind::Float(6800.0));
        assert_eq!(kind("-1.5e3"), PyKind::Float(-1500.0));
        assert_eq!(kind("'North'"), PyKind::Str("North".into()));
        assert_eq!(kind("\"it's\""), PyKind::Str("it's".into()));
    }

    #[test]
    fn escapes() {
        assert_eq!(kind(r"'O\'Brien'"), PyKind::Str("O'Brien".into()));
        assert_eq!(
            kind(r#"'a\\b\n\x41\u00e9'"#),
            PyKind::Str("a\\b\nAé".into())
        );
        assert_eq!(kind("'caf\u{e9}'"), PyKind::Str("café".into()));
    }

    #[test]
    fn containers_and_spans() {
        let text = "{'direct': [['x', 63.3333], (1,)], 'md5': None, 't': ()}";
        let v = parse_py_literal(text).unwrap();
        let PyKind::Dict(items) = &v.kind else {
            panic!("not a dict")
        };
        assert_eq!(items.len(), 3);
        let PyKind::List(rows) = &items[0].1.kind else {
            panic!("not a list")
        };
        let PyKind::List(first) = &rows[0].kind else {
            panic!("not a list")
        };
        let (s, e) = first[1].span;
        assert_eq!(&text[s..e], "63.3333");
        assert_eq!(
            rows[1].kind,
            PyKind::List(vec![PyValue {
                kind: PyKind::Int(1),
                span: (29, 30)
            }])
        );
        assert_eq!(items[2].1.kind, PyKind::List(vec![]));
        assert_eq!(kind("(5)"), PyKind::Int(5));
        assert_eq!(kind("[1, 2,]"), kind("[1, 2]"));
    }

    #[test]
    fn errors_say_where() {
        let e = parse_py_literal("[1, 2").unwrap_err();
        assert!(e.contains("`,` or `]`") && e.contains("byte 5"), "{e}");
        let e = parse_py_literal("{'a' 1}").unwrap_err();
        assert!(e.contains("`:`"), "{e}");
        let e = parse_py_literal("'open").unwrap_err();
        assert!(e.contains("unterminated string"), "{e}");
        let e = parse_py_literal("[nan]").unwrap_err();
        assert!(e.contains("`nan` is not a literal"), "{e}");
        let e = parse_py_literal("1 2").unwrap_err();
        assert!(e.contains("end of the literal"), "{e}");
        let e = parse_py_literal("99999999999999999999").unwrap_err();
        assert!(e.contains("out-of-range"), "{e}");
        let deep = "[".repeat(100);
        assert!(parse_py_literal(&deep).unwrap_err().contains("nesting"));
    }
}
