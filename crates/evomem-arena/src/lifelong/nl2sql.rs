//! A rule-based instruction-to-SQL parser: the offline `act` role's first
//! source of candidate statements.
//!
//! LifelongAgentBench's DB instructions are written in a regular register
//! ("What are the X and Y of ... where ...? Return the X, Y ..., ordered by X
//! in descending order, limited to 5 entries."), so a transparent pipeline of
//! small rules gets a large share of them right without a model. The pipeline:
//!
//! 1. **Lexing** ([`lex`]): words (lower-cased, light stemming, a few
//!    abbreviations), quoted strings, numbers (`1,000,000`, `10%`, number
//!    words), ISO dates and month-name dates (`January 1, 2023`), ordinals
//!    (`third`, `6th`) and punctuation, each tagged with its sentence.
//! 2. **Column mentions**: column names split on `_` are matched greedily
//!    against runs of instruction words; a complete match beats a partial
//!    one, and a partial one must be unambiguous and name more than a generic
//!    word (`id`, `date`, ...).
//! 3. **Zones**: the `Return ...` clause (the projection), `ordered by ...`,
//!    `grouped by ...`/`for each ...`/`per ...`, limit and offset phrases;
//!    everything else can hold conditions.
//! 4. **Statement kind** from the leading verb (insert/add, update/set/
//!    increase/..., delete/remove, otherwise select).
//! 5. **Conditions**: every literal left over, every unquoted word run equal
//!    to a value of a text column of the table (`dogs` → `pet_type = 'Dog'`),
//!    and every comparison against "the average/maximum/... X" (a scalar
//!    subquery). Each gets a subject column (the value's own column, else the
//!    nearest mention before it), a comparator from the words around it
//!    ("at least", "exceeds", "before", "or higher", "not", "between"), and is
//!    a `HAVING` condition when the subject carries an aggregate word
//!    ("total", "average", "number of") in a grouped query. Consecutive
//!    conditions are joined by `OR` when an `or` separates them, `AND`
//!    otherwise; `OR`s of equalities on one column become `IN`, and mixed
//!    connectives are parenthesised as OR-of-ANDs (with the AND-of-ORs
//!    reading as an alternative hypothesis).
//! 6. **Rendering** of each reading into SQL; [`hypotheses`] returns the
//!    distinct renderings, most likely first.
//!
//! The parser only reads the instruction and the task's public table (names,
//! types and rows: the rows ground unquoted values). It never sees an answer.

use super::types::{Cell, Table};
use std::collections::BTreeSet;

/// At most this many hypotheses are returned.
pub const MAX_HYPOTHESES: usize = 5;

/// Ranked candidate SQL statements for `instruction` over `table`: most
/// likely first, deduplicated, at most [`MAX_HYPOTHESES`]. Empty when the
/// instruction gives nothing to build a statement from.
pub fn hypotheses(instruction: &str, table: &Table) -> Vec<String> {
    let toks = lex(instruction);
    let ctx = Ctx::new(toks, table);
    let mut out: Vec<String> = Vec::new();
    let mut push = |sql: Option<String>| {
        if let Some(s) = sql {
            if !s.is_empty() && !out.iter().any(|o| o == &s) {
                out.push(s);
            }
        }
    };
    match ctx.kind() {
        Kind::Insert => push(ctx.insert()),
        Kind::Update => {
            for v in ctx.variants() {
                push(ctx.update(&v));
            }
        }
        Kind::Delete => {
            for v in ctx.variants() {
                push(ctx.delete(&v));
            }
        }
        Kind::Select => {
            for v in ctx.variants() {
                push(ctx.select(&v));
            }
        }
    }
    out.truncate(MAX_HYPOTHESES);
    out
}

/// The table's columns in the order the instruction first names them (the
/// parser's column mentions, each column once). Case-based adaptation uses
/// it to align the columns of two instructions by role.
pub(crate) fn column_mentions(instruction: &str, table: &Table) -> Vec<String> {
    let ctx = Ctx::new(lex(instruction), table);
    let mut out: Vec<String> = Vec::new();
    for m in &ctx.mentions {
        let name = ctx.col(m.col).to_string();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

// ---------------------------------------------------------------- lexing

/// A literal value in the instruction.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    /// A quoted string.
    Str(String),
    /// A number, normalised (`1,000` → `1000`).
    Num(String),
    /// A date, `YYYY-MM-DD`.
    Date(String),
}

impl Lit {
    /// The literal as SQL.
    pub(crate) fn sql(&self) -> String {
        match self {
            Lit::Str(s) | Lit::Date(s) => quote(s),
            Lit::Num(n) => n.clone(),
        }
    }
}

/// One lexed token.
#[derive(Debug, Clone)]
pub(crate) struct Tok {
    /// Lower-cased, stemmed word; empty for literals and punctuation.
    pub(crate) norm: String,
    /// Lower-cased surface form.
    pub(crate) low: String,
    /// The literal, if the token is one.
    pub(crate) lit: Option<Lit>,
    /// A number followed by `%`.
    pub(crate) pct: bool,
    /// An ordinal (`third`, `6th`).
    pub(crate) ordinal: Option<u64>,
    /// Punctuation character.
    pub(crate) punct: Option<char>,
    /// Sentence number.
    pub(crate) sentence: usize,
}

impl Tok {
    fn word(low: &str, sentence: usize) -> Tok {
        Tok {
            norm: stem(low),
            low: low.to_string(),
            lit: None,
            pct: false,
            ordinal: None,
            punct: None,
            sentence,
        }
    }
    fn is_word(&self) -> bool {
        self.lit.is_none() && self.punct.is_none() && !self.norm.is_empty()
    }
    fn is(&self, w: &str) -> bool {
        self.lit.is_none() && self.punct.is_none() && (self.low == w || self.norm == w)
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

fn month_of(w: &str) -> Option<u32> {
    let full = MONTHS.iter().position(|m| *m == w);
    let abbrev = || match w {
        "mar" => Some(2),
        "sept" => Some(8),
        "may" => None,
        _ if w.len() == 3 => MONTHS.iter().position(|m| m.starts_with(w)),
        _ => None,
    };
    full.or_else(abbrev).map(|i| i as u32 + 1)
}

fn number_word(w: &str) -> Option<u64> {
    let words = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    words.iter().position(|x| *x == w).map(|i| i as u64)
}

fn ordinal_word(w: &str) -> Option<u64> {
    let words = [
        "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
        "tenth", "eleventh", "twelfth",
    ];
    words.iter().position(|x| *x == w).map(|i| i as u64 + 1)
}

/// Light stemming plus a few abbreviations, applied alike to instruction
/// words and to column-name parts.
pub(crate) fn stem(word: &str) -> String {
    let w = word.to_lowercase();
    let w = w
        .strip_suffix("'s")
        .or_else(|| w.strip_suffix('\''))
        .unwrap_or(&w)
        .to_string();
    let w = match w.as_str() {
        "avg" => "average".to_string(),
        "qty" => "quantity".to_string(),
        "num" | "no" => "number".to_string(),
        "amt" => "amount".to_string(),
        "dept" => "department".to_string(),
        "appt" => "appointment".to_string(),
        "temp" => "temperature".to_string(),
        "pct" => "percentage".to_string(),
        "ids" => "id".to_string(),
        _ => w,
    };
    let w = match w.as_str() {
        "daily" => "day".to_string(),
        "weekly" => "week".to_string(),
        "monthly" => "month".to_string(),
        "yearly" | "annually" => "year".to_string(),
        _ if w.len() > 6 && w.ends_with("ly") && (w.ends_with("ently") || w.ends_with("ally")) => {
            w[..w.len() - 2].to_string()
        }
        _ => w,
    };
    if w.len() > 4 && w.ends_with("ies") {
        return format!("{}y", &w[..w.len() - 3]);
    }
    for suf in ["sses", "shes", "ches", "xes", "uses"] {
        if w.len() > suf.len() + 1 && w.ends_with(suf) {
            return w[..w.len() - 2].to_string();
        }
    }
    if w.len() > 3
        && w.ends_with('s')
        && !w.ends_with("ss")
        && !w.ends_with("us")
        && !w.ends_with("is")
    {
        return w[..w.len() - 1].to_string();
    }
    w
}

/// Lex an instruction (see the module docs).
pub(crate) fn lex(text: &str) -> Vec<Tok> {
    let mut lx = Lexer {
        chars: text.chars().collect(),
        toks: Vec::new(),
        sentence: 0,
    };
    let n = lx.chars.len();
    let mut i = 0usize;
    while i < n {
        let c = lx.at(i);
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let prev_alnum = i > 0 && lx.at(i - 1).is_alphanumeric();
        if (c == '\'' || c == '"' || c == '‘' || c == '“') && !prev_alnum {
            i = lx.quoted(i, c);
            continue;
        }
        if c.is_ascii_digit()
            || (c == '$' && lx.at(i + 1).is_ascii_digit())
            || (c == '-' && lx.at(i + 1).is_ascii_digit() && !prev_alnum)
        {
            i = lx.number(i, c);
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            i = lx.word(i);
            continue;
        }
        let mut t = Tok::word("", lx.sentence);
        t.norm.clear();
        t.low = c.to_string();
        t.punct = Some(c);
        lx.toks.push(t);
        if matches!(c, '.' | '?' | '!' | ';') {
            lx.sentence += 1;
        }
        i += 1;
    }
    merge_dates(lx.toks)
}

/// The lexer's input and output; each token kind is one method that
/// returns the index after what it consumed.
struct Lexer {
    chars: Vec<char>,
    toks: Vec<Tok>,
    sentence: usize,
}

impl Lexer {
    fn at(&self, k: usize) -> char {
        self.chars.get(k).copied().unwrap_or(' ')
    }

    /// A quoted string literal opened by `c` at `i` (an ISO date inside
    /// quotes is a date); an unclosed quote is skipped.
    fn quoted(&mut self, i: usize, c: char) -> usize {
        let n = self.chars.len();
        let close: &[char] = match c {
            '‘' => &['’'],
            '“' => &['”'],
            '"' => &['"'],
            _ => &['\''],
        };
        let Some(j) =
            (i + 1..n).find(|&j| close.contains(&self.at(j)) && !self.at(j + 1).is_alphanumeric())
        else {
            return i + 1;
        };
        let s: String = self.chars[i + 1..j].iter().collect();
        let mut t = Tok::word("", self.sentence);
        t.norm.clear();
        t.low = s.to_lowercase();
        t.lit = Some(if is_iso_date(&s) {
            Lit::Date(s)
        } else {
            Lit::Str(s)
        });
        self.toks.push(t);
        j + 1
    }

    /// A number (with `$`, a sign, thousands separators, decimals, dates,
    /// an ordinal suffix or a `%`) starting with `c` at `i`.
    fn number(&mut self, i: usize, c: char) -> usize {
        let n = self.chars.len();
        let neg = c == '-';
        let mut j = if c == '$' || neg { i + 1 } else { i };
        let mut s = String::new();
        if neg {
            s.push('-');
        }
        while j < n {
            let d = self.at(j);
            if d.is_ascii_digit() {
                s.push(d);
            } else if d == ','
                && self.at(j + 1).is_ascii_digit()
                && self.at(j + 2).is_ascii_digit()
                && self.at(j + 3).is_ascii_digit()
                && !self.at(j + 4).is_ascii_digit()
            {
                // thousands separator
            } else if (d == '.' || d == '-') && self.at(j + 1).is_ascii_digit() {
                s.push(d);
            } else {
                break;
            }
            j += 1;
        }
        // Ordinal suffix: 6th, 1st, 2nd, 3rd.
        let rest: String = self.chars[j..n.min(j + 2)].iter().collect::<String>();
        let rest = rest.to_lowercase();
        if ["st", "nd", "rd", "th"].contains(&rest.as_str()) && !self.at(j + 2).is_alphanumeric() {
            let mut t = Tok::word("", self.sentence);
            t.norm.clear();
            t.low = format!("{s}{rest}");
            t.ordinal = s.parse().ok();
            self.toks.push(t);
            return j + 2;
        }
        let mut t = Tok::word("", self.sentence);
        t.norm.clear();
        t.low = s.clone();
        if is_iso_date(&s) {
            t.lit = Some(Lit::Date(s));
        } else {
            let s = s.trim_end_matches('.').to_string();
            t.lit = Some(Lit::Num(s));
        }
        if self.at(j) == '%' {
            t.pct = true;
            j += 1;
        }
        self.toks.push(t);
        j
    }

    /// A word at `i` (apostrophes and hyphens inside it kept or dropped;
    /// snake_case split; number and ordinal words read as values).
    fn word(&mut self, i: usize) -> usize {
        let n = self.chars.len();
        let mut j = i;
        let mut s = String::new();
        while j < n {
            let d = self.at(j);
            if d.is_alphanumeric() || d == '_' {
                s.push(d);
            } else if (d == '\'' || d == '’')
                && self.at(j + 1).is_alphabetic()
                && self.at(j + 2) != '\''
            {
                s.push('\'');
            } else if d == '-' && self.at(j + 1).is_alphabetic() {
                // check-ins → checkins
            } else {
                break;
            }
            j += 1;
        }
        let low = s.to_lowercase();
        let sentence = self.sentence;
        if low.contains('_') {
            for part in low.split('_').filter(|p| !p.is_empty()) {
                self.toks.push(Tok::word(part, sentence));
            }
        } else if let Some(v) = number_word(&low) {
            let mut t = Tok::word(&low, sentence);
            t.norm.clear();
            t.lit = Some(Lit::Num(v.to_string()));
            self.toks.push(t);
        } else if let Some(o) = ordinal_word(&low) {
            let mut t = Tok::word(&low, sentence);
            t.ordinal = Some(o);
            self.toks.push(t);
        } else {
            self.toks.push(Tok::word(&low, sentence));
        }
        j
    }
}

fn is_iso_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(k, c)| {
            if k == 4 || k == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

fn num_of(t: &Tok) -> Option<u64> {
    match &t.lit {
        Some(Lit::Num(n)) => n.parse().ok(),
        _ => None,
    }
}

/// Month-name dates into date literals: `June 1, 2023`, `1 June 2023`,
/// `June 2023`.
fn merge_dates(toks: Vec<Tok>) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::with_capacity(toks.len());
    let mut i = 0;
    let get = |k: usize| toks.get(k);
    while i < toks.len() {
        let t = &toks[i];
        let month = if t.is_word() { month_of(&t.low) } else { None };
        let day_of = |k: usize| {
            get(k)
                .and_then(|x| num_of(x).or(x.ordinal))
                .filter(|d| (1..=31).contains(d))
        };
        let year_of = |k: usize| {
            get(k)
                .and_then(num_of)
                .filter(|y| (1900..=2100).contains(y))
        };
        let mut date = None;
        if let Some(m) = month {
            if let Some(d) = day_of(i + 1) {
                let k = if get(i + 2).and_then(|x| x.punct) == Some(',') {
                    i + 3
                } else {
                    i + 2
                };
                if let Some(y) = year_of(k) {
                    date = Some((format!("{y:04}-{m:02}-{d:02}"), k + 1));
                }
            } else if let Some(y) = year_of(i + 1) {
                date = Some((format!("{y:04}-{m:02}-01"), i + 2));
            }
        } else if let Some(d) = day_of(i) {
            if let Some(m) = get(i + 1)
                .filter(|x| x.is_word())
                .and_then(|x| month_of(&x.low))
            {
                if let Some(y) = year_of(i + 2) {
                    date = Some((format!("{y:04}-{m:02}-{d:02}"), i + 3));
                }
            }
        }
        if let Some((d, next)) = date {
            let mut nt = t.clone();
            nt.norm.clear();
            nt.low = d.clone();
            nt.ordinal = None;
            nt.lit = Some(Lit::Date(d));
            out.push(nt);
            i = next;
        } else {
            out.push(t.clone());
            i += 1;
        }
    }
    out
}

// ------------------------------------------------------------- the context

/// Statement kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Select,
    Insert,
    Update,
    Delete,
}

/// A column mentioned at `start..end`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Mention {
    col: usize,
    start: usize,
    end: usize,
}

/// Aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agg {
    Sum,
    Avg,
    Max,
    Min,
    Count,
}

impl Agg {
    fn name(self) -> &'static str {
        match self {
            Agg::Sum => "SUM",
            Agg::Avg => "AVG",
            Agg::Max => "MAX",
            Agg::Min => "MIN",
            Agg::Count => "COUNT",
        }
    }
    fn from_word(w: &str) -> Option<Agg> {
        match w {
            "total" | "sum" | "summed" | "combined" | "overall" => Some(Agg::Sum),
            "average" | "mean" | "avg" => Some(Agg::Avg),
            "maximum" | "max" | "highest" | "largest" | "biggest" | "greatest" | "peak"
            | "latest" | "longest" => Some(Agg::Max),
            "minimum" | "min" | "lowest" | "smallest" | "earliest" | "shortest" => Some(Agg::Min),
            "count" | "number" => Some(Agg::Count),
            _ => None,
        }
    }
}

/// A projected or compared expression.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Col(usize),
    Agg(Agg, Option<usize>),
    Range(usize),
}

/// A comparator.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Between(Lit),
    Like,
}

/// The right-hand side of a condition.
#[derive(Debug, Clone, PartialEq)]
enum Rhs {
    Lit(Lit),
    Sub(Agg, usize),
    List(Vec<Lit>),
}

/// One condition.
#[derive(Debug, Clone, PartialEq)]
struct Cond {
    lhs: Expr,
    op: Op,
    rhs: Rhs,
    /// Token span, for connectives.
    start: usize,
    end: usize,
    /// Grounded from a table value rather than a literal.
    grounded: bool,
    /// Whether an `either` precedes it in its sentence.
    either: bool,
}

/// How conditions are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conn {
    And,
    /// `, and`: a clause-level and.
    CommaAnd,
    Or,
}

/// A reading of the instruction (what alternative hypotheses vary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Variant {
    /// Mixed connectives read as AND-of-ORs instead of OR-of-ANDs.
    and_of_ors: bool,
    /// Keep conditions grounded from table values.
    grounded: bool,
    /// Use the question head as the projection even when a Return clause exists.
    head_projection: bool,
}

struct Ctx<'a> {
    toks: Vec<Tok>,
    table: &'a Table,
    col_tokens: Vec<Vec<String>>,
    mentions: Vec<Mention>,
    /// Token index → zone.
    zone: Vec<Zone>,
    limit: Option<(u64, usize)>,
    offset: Option<(u64, usize)>,
    /// Values of text columns: (stemmed words, column, raw value).
    values: Vec<(Vec<String>, usize, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zone {
    Body,
    Return,
    Order,
    Group,
    Limit,
}

const GENERIC: [&str; 10] = [
    "id", "date", "name", "type", "number", "total", "count", "code", "year", "time",
];

const STOP: [&str; 24] = [
    "the", "a", "an", "of", "and", "or", "to", "in", "for", "with", "by", "is", "are", "be", "on",
    "at", "as", "that", "their", "its", "each", "all", "from", "than",
];

impl<'a> Ctx<'a> {
    fn new(toks: Vec<Tok>, table: &'a Table) -> Ctx<'a> {
        let col_tokens: Vec<Vec<String>> = table
            .columns
            .iter()
            .map(|c| {
                c.name
                    .split('_')
                    .filter(|p| !p.is_empty())
                    .map(stem)
                    .collect()
            })
            .collect();
        let mut values = Vec::new();
        for ci in 0..table.columns.len() {
            let mut seen = BTreeSet::new();
            for row in &table.rows {
                if let Some(Cell::Text(v)) = row.get(ci) {
                    if is_iso_date(v) || v.len() < 2 || !seen.insert(v.clone()) {
                        continue;
                    }
                    let words: Vec<String> = v
                        .split(|c: char| !c.is_alphanumeric())
                        .filter(|w| !w.is_empty())
                        .map(stem)
                        .collect();
                    if words.is_empty() || words.len() > 3 {
                        continue;
                    }
                    if words.len() == 1 && STOP.contains(&words[0].as_str()) {
                        continue;
                    }
                    values.push((words, ci, v.clone()));
                }
            }
        }
        let mut ctx = Ctx {
            zone: vec![Zone::Body; toks.len()],
            toks,
            table,
            col_tokens,
            mentions: Vec::new(),
            limit: None,
            offset: None,
            values,
        };
        ctx.unquote_column_names();
        ctx.mentions = ctx.find_mentions();
        ctx.find_zones();
        ctx
    }

    /// A quoted column name (`'from_warehouse'`) is a column, not a value.
    fn unquote_column_names(&mut self) {
        let names: Vec<String> = self
            .table
            .columns
            .iter()
            .map(|c| c.name.to_lowercase())
            .collect();
        let mut out = Vec::with_capacity(self.toks.len());
        for t in std::mem::take(&mut self.toks) {
            let is_col = matches!(&t.lit, Some(Lit::Str(s)) if names.contains(&s.to_lowercase()));
            if is_col {
                for part in t.low.split('_').filter(|p| !p.is_empty()) {
                    out.push(Tok::word(part, t.sentence));
                }
            } else {
                out.push(t);
            }
        }
        self.zone = vec![Zone::Body; out.len()];
        self.toks = out;
    }

    fn t(&self, i: usize) -> Option<&Tok> {
        self.toks.get(i)
    }

    fn is(&self, i: usize, w: &str) -> bool {
        self.t(i).is_some_and(|t| t.is(w))
    }

    fn col(&self, c: usize) -> &str {
        self.table
            .columns
            .get(c)
            .map(|c| c.name.as_str())
            .unwrap_or("")
    }

    fn col_is_date(&self, c: usize) -> bool {
        let name = self.col(c);
        if name.contains("date") || name.ends_with("_at") || name.contains("time") {
            return true;
        }
        self.table
            .rows
            .iter()
            .filter_map(|r| r.get(c))
            .any(|v| matches!(v, Cell::Text(s) if is_iso_date(s)))
    }

    fn col_is_text(&self, c: usize) -> bool {
        self.table
            .columns
            .get(c)
            .is_some_and(|c| c.ty.to_uppercase().contains("TEXT") || c.ty.contains("CHAR"))
    }

    // --------------------------------------------------------- mentions

    fn find_mentions(&self) -> Vec<Mention> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.toks.len() {
            match self.best_mention_at(i) {
                Some(m) => {
                    i = m.end;
                    out.push(m);
                }
                None => i += 1,
            }
        }
        out
    }

    fn best_mention_at(&self, i: usize) -> Option<Mention> {
        let first = self.t(i)?;
        if !first.is_word() || first.norm.is_empty() {
            return None;
        }
        // (complete, matched, -len, col, end)
        let mut cands: Vec<(bool, usize, usize, usize)> = Vec::new();
        for (c, ct) in self.col_tokens.iter().enumerate() {
            let mut used = vec![false; ct.len()];
            let mut j = i;
            let mut matched = 0;
            while let Some(t) = self.t(j) {
                if !t.is_word() {
                    break;
                }
                // Exact word, or an abbreviated column part ("vet" for
                // "veterinarian").
                let pos = ct.iter().enumerate().position(|(k, w)| {
                    !used[k]
                        && (*w == t.norm
                            || (w.len() >= 3
                                && t.norm.len() >= w.len() + 3
                                && t.norm.starts_with(w.as_str())))
                });
                match pos {
                    Some(k) => {
                        used[k] = true;
                        matched += 1;
                        j += 1;
                    }
                    None => break,
                }
            }
            if matched == 0 {
                continue;
            }
            let complete = matched == ct.len();
            if !complete {
                let words: Vec<&str> = ct
                    .iter()
                    .zip(&used)
                    .filter(|(_, u)| **u)
                    .map(|(w, _)| w.as_str())
                    .collect();
                if words.iter().all(|w| STOP.contains(w)) {
                    continue;
                }
                let specific = words.iter().any(|w| !GENERIC.contains(w));
                if !specific {
                    // A generic word alone ("id") names a column only when it
                    // belongs to exactly one column.
                    let owners = self
                        .col_tokens
                        .iter()
                        .filter(|o| words.iter().all(|w| o.iter().any(|x| x == w)))
                        .count();
                    if owners != 1 {
                        continue;
                    }
                }
            }
            cands.push((complete, matched, c, j));
        }
        cands.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.cmp(&a.1))
                .then(self.col_tokens[a.2].len().cmp(&self.col_tokens[b.2].len()))
        });
        let best = *cands.first()?;
        // "the staff member with ID 456": a bare generic column (`id`) loses
        // to a `staff_id` whose other part was just named.
        if best.0
            && self.col_tokens[best.2]
                .iter()
                .all(|w| GENERIC.contains(&w.as_str()))
        {
            let before: Vec<&str> = (i.saturating_sub(4)..i)
                .filter_map(|k| self.t(k))
                .map(|t| t.norm.as_str())
                .collect();
            if let Some(c) = cands.iter().find(|c| {
                !c.0 && c.3 == best.3
                    && self.col_tokens[c.2]
                        .iter()
                        .any(|w| !GENERIC.contains(&w.as_str()) && before.contains(&w.as_str()))
            }) {
                return Some(Mention {
                    col: c.2,
                    start: i,
                    end: c.3,
                });
            }
        }
        if !best.0 {
            // A partial match must be unambiguous.
            let tied = cands
                .iter()
                .filter(|c| !c.0 && c.1 == best.1 && c.3 == best.3)
                .count();
            if tied > 1 {
                return self.disambiguate_id(i, &cands, best);
            }
        }
        Some(Mention {
            col: best.2,
            start: i,
            end: best.3,
        })
    }

    /// `ID` (or another shared word) alone: the column whose other words
    /// appear just before, else the first such column.
    fn disambiguate_id(
        &self,
        i: usize,
        cands: &[(bool, usize, usize, usize)],
        best: (bool, usize, usize, usize),
    ) -> Option<Mention> {
        let tied: Vec<_> = cands
            .iter()
            .filter(|c| !c.0 && c.1 == best.1 && c.3 == best.3)
            .collect();
        let before: Vec<&str> = (i.saturating_sub(4)..i)
            .filter_map(|k| self.t(k))
            .map(|t| t.norm.as_str())
            .collect();
        for c in &tied {
            if self.col_tokens[c.2]
                .iter()
                .any(|w| before.contains(&w.as_str()) && !GENERIC.contains(&w.as_str()))
            {
                return Some(Mention {
                    col: c.2,
                    start: i,
                    end: c.3,
                });
            }
        }
        let word = self.t(i).map(|t| t.norm.clone()).unwrap_or_default();
        if word == "id" {
            // The key column: the first column ending in `id`.
            let first = tied.iter().map(|c| c.2).min()?;
            return Some(Mention {
                col: first,
                start: i,
                end: best.3,
            });
        }
        None
    }

    fn mention_at(&self, i: usize) -> Option<Mention> {
        self.mentions
            .iter()
            .find(|m| m.start <= i && i < m.end)
            .copied()
    }

    // --------------------------------------------------------- zones

    fn find_zones(&mut self) {
        let n = self.toks.len();
        let mut i = 0;
        while i < n {
            let w = self.t(i).map(|t| t.low.clone()).unwrap_or_default();
            let next = self.t(i + 1).map(|t| t.low.clone()).unwrap_or_default();
            let clause_start = i == 0
                || self.t(i - 1).is_some_and(|p| {
                    matches!(p.punct, Some('.' | '?' | '!' | ';' | ',')) || p.is("and")
                });
            let start_zone = if clause_start
                && (w == "return" || w == "returning" || w == "show" || w == "list")
            {
                Some(Zone::Return)
            } else if (["ordered", "sorted", "order", "sort", "ranked", "arranged"]
                .contains(&w.as_str()))
                && ["by", "first", "from", "them", "the", "in", "results"].contains(&next.as_str())
            {
                Some(Zone::Order)
            } else if (w == "grouped" || w == "group") && next == "by" {
                Some(Zone::Group)
            } else {
                None
            };
            if let Some(z) = start_zone {
                let mut j = i;
                while j < n {
                    let t = &self.toks[j];
                    if j > i {
                        if matches!(t.punct, Some('.' | '?' | '!' | ';')) {
                            break;
                        }
                        if self.zone_breaker(j, z) {
                            break;
                        }
                    }
                    self.zone[j] = z;
                    j += 1;
                }
                i = j;
                continue;
            }
            i += 1;
        }
        self.find_limit_offset();
    }

    /// Does token `j` end a zone of kind `z`?
    fn zone_breaker(&self, j: usize, z: Zone) -> bool {
        let Some(t) = self.t(j) else { return true };
        let w = t.low.as_str();
        let next = self.t(j + 1).map(|t| t.low.as_str()).unwrap_or("");
        let order = ["ordered", "sorted", "order", "sort", "ranked", "arranged"].contains(&w)
            && ["by", "first", "from", "them", "the", "in", "results"].contains(&next);
        let group = (w == "grouped" || w == "group") && next == "by";
        let limit = [
            "limit",
            "limited",
            "limiting",
            "skip",
            "skipping",
            "starting",
            "offset",
            "showing",
            "beginning",
            "displaying",
            "returning",
        ]
        .contains(&w);
        match z {
            Zone::Return => order || group || limit || w == "where" || w == "having",
            Zone::Order => group || limit || w == "where" || w == "having",
            Zone::Group => order || limit || w == "where" || w == "having" || w == ",",
            Zone::Body | Zone::Limit => false,
        }
    }

    fn find_limit_offset(&mut self) {
        let n = self.toks.len();
        for i in 0..n {
            let w = self.toks[i].low.clone();
            if self.limit.is_none() && ["limit", "limited", "limiting", "top"].contains(&w.as_str())
            {
                for k in i + 1..(i + 6).min(n) {
                    if self.toks[k].pct {
                        break;
                    }
                    if let Some(v) = num_of(&self.toks[k]) {
                        self.limit = Some((v, k));
                        self.zone[k] = Zone::Limit;
                        break;
                    }
                }
            }
            if self.offset.is_none()
                && [
                    "skip",
                    "skipping",
                    "skipped",
                    "offset",
                    "starting",
                    "beginning",
                    "start",
                    "after",
                ]
                .contains(&w.as_str())
            {
                let skipping = !["starting", "beginning", "start"].contains(&w.as_str());
                if w == "after"
                    && !(self.is(i + 1, "the") && self.is(i + 2, "first"))
                    && !self.is(i + 1, "skipping")
                {
                    continue;
                }
                for k in i + 1..(i + 6).min(n) {
                    let t = &self.toks[k];
                    if let Some(v) = num_of(t) {
                        let prev_first = self.is(k - 1, "first") || self.is(k - 1, "top");
                        let off = if skipping || prev_first {
                            v
                        } else {
                            v.saturating_sub(1)
                        };
                        self.offset = Some((off, k));
                        self.zone[k] = Zone::Limit;
                        break;
                    }
                    if let Some(o) = t.ordinal {
                        if self.t(k + 1).is_some_and(|x| num_of(x).is_some()) {
                            continue;
                        }
                        let off = if skipping { o } else { o.saturating_sub(1) };
                        self.offset = Some((off, k));
                        self.zone[k] = Zone::Limit;
                        break;
                    }
                }
            }
        }
        // "Delete up to 100 packages", "Limit the update to 5 entries".
        if self.limit.is_none() && self.kind() != Kind::Select && self.kind() != Kind::Insert {
            for i in 0..n.saturating_sub(2) {
                if self.toks[i].low == "up" && self.toks[i + 1].low == "to" {
                    if let Some(v) = num_of(&self.toks[i + 2]) {
                        let unit = self.t(i + 3).map(|t| t.low.clone()).unwrap_or_default();
                        if unit.ends_with('s') && self.mention_at(i + 3).is_none() {
                            self.limit = Some((v, i + 2));
                            self.zone[i + 2] = Zone::Limit;
                        }
                    }
                }
            }
        }
        // "the first 5 entries" / "the next five entries" as a limit.
        if self.limit.is_none() {
            for i in 0..n {
                if (self.toks[i].low == "first" || self.toks[i].low == "next")
                    && self.zone[i] != Zone::Limit
                {
                    if let Some(k) =
                        (i + 1..(i + 2).min(n)).find(|k| num_of(&self.toks[*k]).is_some())
                    {
                        if self.zone[k] == Zone::Limit {
                            continue;
                        }
                        let unit = self.t(k + 1).map(|t| t.norm.as_str()).unwrap_or("");
                        if ["entry", "result", "record", "row", "item"].contains(&unit) {
                            if let Some(v) = num_of(&self.toks[k]) {
                                self.limit = Some((v, k));
                                self.zone[k] = Zone::Limit;
                            }
                        }
                    }
                }
            }
        }
        // "limited to the next five entries" after a skip handled above; also
        // "N entries" right after a limit word already matched.
    }

    // --------------------------------------------------------- kind

    fn kind(&self) -> Kind {
        let first = self
            .toks
            .iter()
            .find(|t| t.is_word())
            .map(|t| t.low.as_str())
            .unwrap_or("");
        match first {
            "insert" | "add" | "create" | "record" | "register" => Kind::Insert,
            "update" | "set" | "increase" | "decrease" | "raise" | "reduce" | "change"
            | "modify" | "mark" | "adjust" | "double" | "increment" | "decrement" => Kind::Update,
            "delete" | "remove" | "purge" | "drop" | "erase" => Kind::Delete,
            _ => Kind::Select,
        }
    }

    fn variants(&self) -> Vec<Variant> {
        let base = Variant {
            and_of_ors: false,
            grounded: true,
            head_projection: false,
        };
        vec![
            base,
            Variant {
                and_of_ors: true,
                ..base
            },
            Variant {
                grounded: false,
                ..base
            },
            Variant {
                head_projection: true,
                ..base
            },
        ]
    }

    // --------------------------------------------------------- expressions

    /// The aggregate word governing a mention (within two words before it).
    fn agg_before(&self, start: usize, floor: usize) -> Option<Agg> {
        let lo = start.saturating_sub(3).max(floor);
        for k in (lo..start).rev() {
            let t = self.t(k)?;
            if t.punct.is_some() || t.lit.is_some() {
                return None;
            }
            if t.low == "recent" && k > 0 && self.is(k - 1, "most") {
                return Some(Agg::Max);
            }
            if let Some(a) = Agg::from_word(&t.low) {
                // "number of X" is a count only when X is not a column; a
                // count word right before a column is "total X".
                if a == Agg::Count {
                    return None;
                }
                return Some(a);
            }
        }
        None
    }

    /// Parse one projection/order item spanning `lo..hi`.
    fn item_expr(&self, lo: usize, hi: usize) -> Option<Expr> {
        let words: Vec<&Tok> = (lo..hi).filter_map(|k| self.t(k)).collect();
        let has = |w: &str| words.iter().any(|t| t.is(w));
        let ms: Vec<Mention> = self
            .mentions
            .iter()
            .filter(|m| m.start >= lo && m.end <= hi)
            .copied()
            .collect();
        if has("range") || has("difference") || has("minus") || has("spread") {
            if let Some(m) = ms.first() {
                return Some(Expr::Range(m.col));
            }
            if let Some(c) = self.range_col() {
                return Some(Expr::Range(c));
            }
        }
        let count_word =
            has("count") || has("number") || (has("how") && has("many")) || has("tally");
        if let Some(m) = ms.first() {
            if let Some(a) = self.agg_before(m.start, lo) {
                return Some(self.agg_of(a, m.col));
            }
            // "total deposits sum": an aggregate word after the column.
            if let Some(a) = (m.end..hi)
                .filter_map(|k| self.t(k))
                .take_while(|t| t.punct.is_none())
                .find_map(|t| Agg::from_word(&t.low).filter(|a| *a != Agg::Count))
            {
                return Some(self.agg_of(a, m.col));
            }
            // "the total sales" etc. where the aggregate word follows.
            if count_word && self.is_key(m.col) {
                return Some(Expr::Agg(Agg::Count, None));
            }
            if count_word && !self.col(m.col).contains("count") {
                let before_count = words
                    .iter()
                    .position(|t| t.is("count") || t.is("number"))
                    .map(|p| lo + p)
                    .is_some_and(|p| p < m.start);
                if before_count {
                    return Some(Expr::Agg(Agg::Count, None));
                }
            }
            return Some(Expr::Col(m.col));
        }
        if count_word {
            return Some(Expr::Agg(Agg::Count, None));
        }
        None
    }

    /// `AGG(col)`, where summing or counting an id column counts rows
    /// ("the total checks" over `check_id`).
    fn agg_of(&self, a: Agg, c: usize) -> Expr {
        let id = self.col(c).ends_with("id");
        match a {
            Agg::Sum | Agg::Count if id => Expr::Agg(Agg::Count, None),
            _ => Expr::Agg(a, Some(c)),
        }
    }

    /// The column of the instruction's range expression ("difference
    /// between maximum and minimum X", "X range", "max X minus min X").
    fn range_col(&self) -> Option<usize> {
        for (k, t) in self.toks.iter().enumerate() {
            if t.is("range") || t.is("difference") || t.is("minus") || t.is("spread") {
                if let Some(m) = self
                    .mentions
                    .iter()
                    .find(|m| m.start > k && m.start <= k + 6)
                {
                    return Some(m.col);
                }
                if let Some(m) = self
                    .mentions
                    .iter()
                    .rev()
                    .find(|m| m.end <= k && m.end + 2 >= k)
                {
                    return Some(m.col);
                }
            }
        }
        None
    }

    fn is_key(&self, c: usize) -> bool {
        c == 0 && self.col(c).ends_with("id")
    }

    fn expr_sql(&self, e: &Expr) -> String {
        match e {
            Expr::Col(c) => self.col(*c).to_string(),
            Expr::Agg(a, Some(c)) => format!("{}({})", a.name(), self.col(*c)),
            Expr::Agg(a, None) => format!("{}(*)", a.name()),
            Expr::Range(c) => format!("MAX({0}) - MIN({0})", self.col(*c)),
        }
    }

    /// Split `lo..hi` into list items at commas and `and`/`then`/`followed by`,
    /// not inside parentheses or `between ... and`.
    fn split_items(&self, lo: usize, hi: usize) -> Vec<(usize, usize)> {
        let mut items = Vec::new();
        let mut start = lo;
        let mut depth = 0i32;
        let mut between = false;
        let mut k = lo;
        while k < hi {
            let t = &self.toks[k];
            match t.punct {
                Some('(') => depth += 1,
                Some(')') => depth -= 1,
                _ => {}
            }
            if t.is("between") || t.is("difference") {
                between = true;
            }
            let sep = depth == 0
                && (t.punct == Some(',')
                    || (t.is("and") && !between)
                    || t.is("then")
                    || (t.is("followed") && self.is(k + 1, "by")));
            if t.is("and") && between {
                between = false;
            }
            if sep {
                if k > start {
                    items.push((start, k));
                }
                start = if t.is("followed") { k + 2 } else { k + 1 };
                k = start;
                continue;
            }
            k += 1;
        }
        if hi > start {
            items.push((start, hi));
        }
        items
    }

    fn zone_span(&self, z: Zone) -> Option<(usize, usize)> {
        let lo = self.zone.iter().position(|x| *x == z)?;
        let mut hi = lo;
        while hi < self.zone.len() && self.zone[hi] == z {
            hi += 1;
        }
        Some((lo, hi))
    }

    /// The projection: the Return clause's items, else the question head's.
    fn projection(&self, v: &Variant) -> Vec<Expr> {
        let mut out = Vec::new();
        if !v.head_projection {
            if let Some((lo, hi)) = self.zone_span(Zone::Return) {
                let all = (lo..hi).any(|k| {
                    self.is(k, "all")
                        && (self.is(k + 1, "column")
                            || self.is(k + 1, "detail")
                            || self.is(k + 1, "information")
                            || self.is(k + 1, "field"))
                });
                if all {
                    return Vec::new();
                }
                for (a, b) in self.split_items(lo + 1, hi) {
                    if let Some(e) = self.item_expr(a, b) {
                        if !out.contains(&e) {
                            out.push(e);
                        }
                    }
                }
            }
        }
        if out.is_empty() {
            let (lo, hi) = self.head_span();
            for (a, b) in self.split_items(lo, hi) {
                if let Some(e) = self.item_expr(a, b) {
                    if !out.contains(&e) {
                        out.push(e);
                    }
                }
            }
        }
        out
    }

    /// The question head: from the start to the first condition cue.
    fn head_span(&self) -> (usize, usize) {
        let cues = [
            "where", "whose", "with", "that", "who", "which", "for", "in", "having", "have", "has",
            "had", "if", "when", "from", "on", "during", "whereby", "exceed", "took", "are", "is",
            "were", "was",
        ];
        let mut hi = self.toks.len();
        for (k, t) in self.toks.iter().enumerate() {
            if t.sentence > 0 || matches!(t.punct, Some('.' | '?')) {
                hi = k;
                break;
            }
            if k >= 2 && t.is_word() && cues.contains(&t.low.as_str()) {
                // "for each X" belongs to the grouping, not a condition.
                hi = k;
                break;
            }
            if k >= 2 && t.lit.is_some() {
                hi = k;
                break;
            }
        }
        (0, hi)
    }

    // --------------------------------------------------------- grouping

    fn group_cols(&self, proj: &[Expr]) -> Vec<usize> {
        let mut out = Vec::new();
        if let Some((lo, hi)) = self.zone_span(Zone::Group) {
            for m in self
                .mentions
                .iter()
                .filter(|m| m.start >= lo && m.end <= hi)
            {
                if !out.contains(&m.col) {
                    out.push(m.col);
                }
            }
        }
        if !out.is_empty() {
            return out;
        }
        let has_agg = proj.iter().any(|e| !matches!(e, Expr::Col(_)));
        if !has_agg {
            return out;
        }
        for e in proj {
            if let Expr::Col(c) = e {
                if !out.contains(c) {
                    out.push(*c);
                }
            }
        }
        if out.is_empty() {
            // "for each X", "per X", "by X".
            for (k, t) in self.toks.iter().enumerate() {
                let each = (t.is("each") || t.is("per") || t.is("every"))
                    || (t.is("by") && self.zone[k] == Zone::Body);
                if each {
                    if let Some(m) = self
                        .mentions
                        .iter()
                        .find(|m| m.start > k && m.start <= k + 2)
                    {
                        if !out.contains(&m.col) {
                            out.push(m.col);
                        }
                        // "each member and facility combination"
                        if self.is(m.end, "and") {
                            if let Some(m2) = self.mention_at(m.end + 1) {
                                if !out.contains(&m2.col) {
                                    out.push(m2.col);
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    // --------------------------------------------------------- ordering

    fn order_items(&self, proj: &[Expr]) -> Vec<(Expr, bool)> {
        let Some((lo, hi)) = self.zone_span(Zone::Order) else {
            return Vec::new();
        };
        // Skip the "ordered by" / "sorted first by" words.
        let mut start = lo + 1;
        while start < hi
            && (self.is(start, "by")
                || self.is(start, "first")
                || self.is(start, "them")
                || self.is(start, "the")
                || self.is(start, "result"))
        {
            start += 1;
        }
        let items = self.split_items(start, hi);
        let mut out: Vec<(Expr, Option<bool>)> = Vec::new();
        let mut pending_dir: Option<bool> = None;
        for (a, b) in items {
            let dir = self.direction(a, b);
            let expr = self
                .item_expr(a, b)
                .map(|e| self.align_to_projection(e, proj, a, b));
            match expr {
                Some(e) => {
                    if !out.iter().any(|(x, _)| *x == e) {
                        out.push((e, dir));
                    }
                }
                None => {
                    if dir.is_some() {
                        pending_dir = dir;
                        if let Some(last) = out.last_mut() {
                            if last.1.is_none() {
                                last.1 = dir;
                            }
                        }
                    }
                }
            }
        }
        // An item with no direction takes the next item's ("by A and B in
        // descending order"), else ascending.
        let mut res = Vec::new();
        for idx in 0..out.len() {
            let d = out[idx]
                .1
                .or_else(|| out[idx + 1..].iter().find_map(|x| x.1))
                .or(pending_dir)
                .unwrap_or(true);
            res.push((out[idx].0.clone(), d));
        }
        res
    }

    /// An ORDER BY item naming an aggregate loosely ("total sold") maps to
    /// the projection's aggregate of that kind.
    fn align_to_projection(&self, e: Expr, proj: &[Expr], lo: usize, hi: usize) -> Expr {
        if proj.contains(&e) {
            return e;
        }
        let agg_word = (lo..hi)
            .filter_map(|k| self.t(k))
            .find_map(|t| Agg::from_word(&t.low));
        match (&e, agg_word) {
            (Expr::Col(c), Some(a)) => {
                let exact = Expr::Agg(a, Some(*c));
                if proj.contains(&exact) {
                    return exact;
                }
                let same_kind: Vec<&Expr> = proj
                    .iter()
                    .filter(|p| matches!(p, Expr::Agg(b, _) if *b == a))
                    .collect();
                if same_kind.len() == 1 {
                    return same_kind[0].clone();
                }
                let grouped = proj.iter().any(|p| !matches!(p, Expr::Col(_)));
                if grouped && a != Agg::Count && !proj.contains(&e) {
                    return exact;
                }
                e
            }
            _ => e,
        }
    }

    /// `Some(true)` ascending, `Some(false)` descending, `None` unsaid:
    /// the first directional word of the item (or just after it) decides
    /// ("from most recent to oldest", "highest first", "in ascending order").
    fn direction(&self, lo: usize, hi: usize) -> Option<bool> {
        let hi2 = (hi + 4).min(self.toks.len());
        let mut k = lo;
        while k < hi2 {
            let t = &self.toks[k];
            if k >= hi && (t.punct.is_some() || self.mention_at(k).is_some()) {
                break;
            }
            match t.low.as_str() {
                "descending" | "desc" | "decreasing" | "reverse" | "newest" | "latest"
                | "highest" | "largest" | "biggest" | "greatest" | "longest" | "most" => {
                    return Some(false)
                }
                "recent" => return Some(false),
                "ascending" | "asc" | "increasing" | "alphabetical" | "alphabetically"
                | "oldest" | "earliest" | "chronological" | "lowest" | "smallest" | "least"
                | "fewest" | "shortest" => return Some(true),
                _ => {}
            }
            k += 1;
        }
        None
    }

    // --------------------------------------------------------- conditions

    /// Comparator from the words in `lo..hi` (between subject and value)
    /// and the two words after the value at `after`.
    fn comparator(&self, lo: usize, hi: usize, after: usize) -> Op {
        let ws: Vec<&str> = (lo..hi)
            .filter_map(|k| self.t(k))
            .map(|t| t.low.as_str())
            .collect();
        let has = |w: &str| ws.contains(&w);
        let has2 = |a: &str, b: &str| ws.windows(2).any(|p| p[0] == a && p[1] == b);
        let post: Vec<&str> = (after..after + 3)
            .filter_map(|k| self.t(k))
            .map(|t| t.low.as_str())
            .collect();
        let post_or = post.first() == Some(&"or");
        let post_has = |w: &str| post_or && post.get(1) == Some(&w);
        let neg = has("not")
            || has("isn't")
            || has("except")
            || has("excluding")
            || has2("other", "than");
        if has2("at", "least")
            || has2("or", "more")
            || has2("or", "greater")
            || has2("or", "after")
            || has2("no", "less")
            || has2("no", "fewer")
            || has2("minimum", "of")
            || (has("equal") && (has("greater") || has("more") || has("above")))
            || has("since")
            || has2("on", "after")
            || post_has("more")
            || post_has("higher")
            || post_has("greater")
            || post_has("above")
            || post_has("later")
            || post_has("after")
            || post_has("over")
        {
            return Op::Ge;
        }
        if has2("at", "most")
            || has2("or", "less")
            || has2("or", "before")
            || has2("no", "more")
            || has2("up", "to")
            || has2("maximum", "of")
            || (has("equal") && (has("less") || has("fewer") || has("below")))
            || has2("on", "before")
            || post_has("less")
            || post_has("lower")
            || post_has("fewer")
            || post_has("below")
            || post_has("earlier")
            || post_has("before")
            || post_has("under")
        {
            return Op::Le;
        }
        let gt = [
            "greater",
            "more",
            "higher",
            "larger",
            "over",
            "above",
            "exceed",
            "exceeds",
            "exceeding",
            "exceeded",
            "after",
            "later",
            "longer",
            "older",
            "bigger",
            "beyond",
            "surpass",
            "surpasses",
            "surpassing",
            "past",
            "outside",
        ];
        let lt = [
            "less", "fewer", "lower", "smaller", "under", "below", "before", "earlier", "shorter",
            "younger", "cheaper", "within", "prior",
        ];
        // The comparator nearest the value wins.
        for w in ws.iter().rev() {
            if gt.contains(w) {
                return if neg { Op::Le } else { Op::Gt };
            }
            if lt.contains(w) {
                return if neg { Op::Ge } else { Op::Lt };
            }
        }
        if neg {
            Op::Ne
        } else {
            Op::Eq
        }
    }

    /// The nearest mention ending at or before `p`, in the same sentence,
    /// outside the Return/Order zones, with no literal between, whose column
    /// can hold `lit` (a date column for a date, a numeric or date column for
    /// a number, a text column for a string). A string falls back to the
    /// nearest mention of any type; a date to the table's only date column.
    fn subject_before(&self, p: usize, floor: usize, lit: Option<&Lit>) -> Option<Mention> {
        let sent = self.t(p)?.sentence;
        let reachable = |m: &&Mention| {
            m.end <= p
                && m.start >= floor
                && self.toks[m.start].sentence == sent
                && matches!(self.zone[m.start], Zone::Body)
                && !(m.end..p).any(|k| self.toks[k].lit.is_some() && self.zone[k] == Zone::Body)
        };
        let nearest = self.mentions.iter().rev().find(reachable).copied();
        let Some(lit) = lit else { return nearest };
        let typed = self
            .mentions
            .iter()
            .rev()
            .filter(reachable)
            .find(|m| self.holds(m.col, lit))
            .copied();
        match (typed, lit) {
            (Some(m), _) => Some(m),
            (None, Lit::Str(_)) => nearest,
            (None, Lit::Date(_)) => {
                let dates: Vec<usize> = (0..self.table.columns.len())
                    .filter(|c| self.col_is_date(*c))
                    .collect();
                match dates.as_slice() {
                    [only] => Some(Mention {
                        col: *only,
                        start: p,
                        end: p,
                    }),
                    _ => None,
                }
            }
            (None, Lit::Num(_)) => None,
        }
    }

    /// Can column `c` hold `lit`?
    fn holds(&self, c: usize, lit: &Lit) -> bool {
        match lit {
            Lit::Date(_) => self.col_is_date(c),
            Lit::Num(n) => !self.col_is_text(c) || (self.col_is_date(c) && n.len() == 4),
            Lit::Str(_) => self.col_is_text(c),
        }
    }

    fn lit_matches_value(&self, s: &str) -> Option<(usize, String)> {
        let low = s.to_lowercase();
        let mut hits: Vec<(usize, String)> = Vec::new();
        for (ci, _) in self.table.columns.iter().enumerate() {
            for row in &self.table.rows {
                if let Some(Cell::Text(v)) = row.get(ci) {
                    if v.to_lowercase() == low {
                        if !hits.iter().any(|h| h.0 == ci) {
                            hits.push((ci, v.clone()));
                        }
                        break;
                    }
                }
            }
        }
        if hits.len() == 1 {
            hits.pop()
        } else {
            None
        }
    }

    /// Conditions in `lo..hi` (token indices).
    fn conditions(
        &self,
        lo: usize,
        hi: usize,
        v: &Variant,
        grouped: bool,
        proj: &[Expr],
    ) -> Vec<Cond> {
        let mut conds: Vec<Cond> = Vec::new();
        let mut k = lo;
        let mut either_sent: Option<usize> = None;
        while k < hi {
            let t = &self.toks[k];
            if t.is("either") {
                either_sent = Some(t.sentence);
            }
            let either = either_sent == Some(t.sentence);
            if self.zone[k] != Zone::Body {
                k += 1;
                continue;
            }
            // A scalar subquery: "<cmp> the average X".
            if let Some((cond, next)) = self.subquery_cond(k, lo, grouped) {
                let mut c = cond;
                c.either = either;
                conds.push(c);
                k = next;
                continue;
            }
            if let Some(lit) = t.lit.clone() {
                if t.pct {
                    k += 1;
                    continue;
                }
                // "either 'a' or 'b'": a bare list continues the previous condition.
                if let Some(prev) = conds.last() {
                    let bare = (prev.end..k).all(|q| {
                        let x = &self.toks[q];
                        x.punct == Some(',') || ["or", "and", "nor"].contains(&x.low.as_str())
                    });
                    let by_value = match &lit {
                        Lit::Str(s) => self.lit_matches_value(s).is_some(),
                        _ => false,
                    };
                    if bare
                        && !by_value
                        && prev.end < k
                        && matches!(prev.rhs, Rhs::Lit(_))
                        && !matches!(prev.op, Op::Between(_))
                    {
                        let mut c = prev.clone();
                        c.rhs = Rhs::Lit(lit);
                        c.start = k;
                        c.end = k + 1;
                        c.grounded = false;
                        c.either = either;
                        conds.push(c);
                        k += 1;
                        continue;
                    }
                }
                if let Some((c, next)) = self.literal_cond(k, lit, lo, grouped, proj, conds.last())
                {
                    let mut c = c;
                    c.either = either;
                    conds.push(c);
                    k = next;
                    continue;
                }
                k += 1;
                continue;
            }
            if v.grounded {
                if let Some((c, next)) = self.grounded_cond(k) {
                    let mut c = c;
                    c.either = either;
                    conds.push(c);
                    k = next;
                    continue;
                }
            }
            k += 1;
        }
        conds
    }

    /// The condition a literal at `k` stands in (its subject, comparator and
    /// value), and the token after it; `None` when no subject can be found.
    fn literal_cond(
        &self,
        k: usize,
        lit: Lit,
        lo: usize,
        grouped: bool,
        proj: &[Expr],
        prev: Option<&Cond>,
    ) -> Option<(Cond, usize)> {
        let mut lit = lit;
        let mut end = k + 1;
        // A quoted value that is a value of exactly one text column.
        let by_value = match &lit {
            Lit::Str(s) => self.lit_matches_value(s),
            _ => None,
        };
        let subj = self.literal_subject(k, lo, &lit);
        let (lhs, subj_start) = if let Some((c, raw)) = by_value {
            lit = Lit::Str(raw);
            let start = subj.filter(|m| m.col == c).map_or(k, |m| m.start);
            (Expr::Col(c), start)
        } else {
            self.literal_lhs((k, &lit), lo, subj, grouped, proj, prev)?
        };
        // "more than 5 visits" in a grouped query counts rows.
        let lhs = if grouped
            && matches!(lhs, Expr::Col(_))
            && self.counted_noun(k)
            && subj.is_none_or(|m| k.saturating_sub(m.end) > 4)
        {
            Expr::Agg(Agg::Count, None)
        } else {
            lhs
        };
        let cmp_lo = if subj_start < k {
            subj_start
        } else {
            k.saturating_sub(4)
        };
        let cmp_lo = cmp_lo.max(k.saturating_sub(6));
        let mut op = self.comparator(cmp_lo, k, k + 1);
        // between X and Y
        if (cmp_lo..k).any(|q| self.is(q, "between")) && self.is(k + 1, "and") {
            if let Some(hi_lit) = self.t(k + 2).and_then(|t| t.lit.clone()) {
                op = Op::Between(hi_lit);
                end = k + 3;
            }
        }
        if let Expr::Col(c) = &lhs {
            if self.col_is_date(*c) {
                (op, lit) = year_against_date(op, lit);
            }
        }
        // Text column compared with a number literal: keep as is.
        Some((
            Cond {
                lhs,
                op,
                rhs: Rhs::Lit(lit),
                start: subj_start.min(k),
                end,
                grounded: false,
                either: false,
            },
            end,
        ))
    }

    /// The column a literal at `k` is about: the subject before it, a
    /// column right after a number ("more than 100 hours worked"), or the
    /// age column after "older" or "younger".
    fn literal_subject(&self, k: usize, lo: usize, lit: &Lit) -> Option<Mention> {
        let subj = self.subject_before(k, lo, Some(lit));
        let subj = match lit {
            Lit::Num(_) => self
                .mentions
                .iter()
                .find(|m| m.start == k + 1 && self.holds(m.col, lit))
                .copied()
                .or(subj),
            _ => subj,
        };
        if (k.saturating_sub(3)..k).any(|q| self.is(q, "older") || self.is(q, "younger")) {
            (0..self.table.columns.len())
                .find(|c| self.col(*c) == "age" || self.col(*c).ends_with("_age"))
                .map(|c| Mention {
                    col: c,
                    start: k,
                    end: k,
                })
                .or(subj)
        } else {
            subj
        }
    }

    /// "where the total is greater than 1000": an aggregate word with no
    /// column names the projection's aggregate of that kind.
    fn aggregate_subject(&self, k: usize, proj: &[Expr]) -> Option<(Expr, usize)> {
        (k.saturating_sub(5)..k)
            .rev()
            .filter(|q| self.mention_at(*q).is_none() && self.zone[*q] == Zone::Body)
            .find_map(|q| {
                let a = Agg::from_word(&self.toks[q].low)?;
                if self.mentions.iter().any(|m| m.start > q && m.start < k) {
                    return None;
                }
                let hits: Vec<&Expr> = proj
                    .iter()
                    .filter(|e| matches!(e, Expr::Agg(b, _) if *b == a))
                    .collect();
                match hits.as_slice() {
                    [one] => Some(((*one).clone(), q)),
                    _ => None,
                }
            })
    }

    /// "greater than 1000 and less than 5000": with no new subject between
    /// two literals, the second chains the previous condition's.
    fn chains<'c>(&self, prev: Option<&'c Cond>, k: usize, lit: &Lit) -> Option<&'c Cond> {
        prev.filter(|p| {
            p.end <= k
                && !self.mentions.iter().any(|m| m.start >= p.end && m.end <= k)
                && match (&p.lhs, lit) {
                    (Expr::Col(c), l) => self.holds(*c, l),
                    (_, l) => matches!(l, Lit::Num(_)),
                }
                && (p.end..k).any(|q| self.is(q, "and") || self.is(q, "or") || self.is(q, "but"))
        })
    }

    /// The left-hand side of a literal's condition and where its subject
    /// starts, tried in order: a projected aggregate, a range, a count of a
    /// plural noun, the column right after, the previous condition's, the
    /// subject before (with its aggregate or range), a column just after.
    fn literal_lhs(
        &self,
        (k, lit): (usize, &Lit),
        lo: usize,
        subj: Option<Mention>,
        grouped: bool,
        proj: &[Expr],
        prev: Option<&Cond>,
    ) -> Option<(Expr, usize)> {
        let range_word =
            |q: usize| self.is(q, "range") || self.is(q, "difference") || self.is(q, "minus");
        let range_near = grouped && (k.saturating_sub(6)..k).any(range_word);
        if let Some(found) = grouped.then(|| self.aggregate_subject(k, proj)).flatten() {
            return Some(found);
        }
        if range_near {
            if let Some(c) = self.range_col() {
                return Some((Expr::Range(c), k.saturating_sub(6)));
            }
        }
        if grouped && self.counted_noun(k) && subj.is_none_or(|m| k.saturating_sub(m.end) > 2) {
            return Some((Expr::Agg(Agg::Count, None), k));
        }
        if let Some(m) = subj.filter(|m| m.start == k + 1) {
            // "at least 8 requests" (an id column) counts rows when grouped.
            return Some(if grouped && self.col(m.col).ends_with("id") {
                (Expr::Agg(Agg::Count, None), k)
            } else {
                (Expr::Col(m.col), k)
            });
        }
        if let Some(p) = self.chains(prev, k, lit) {
            return Some((p.lhs.clone(), p.end));
        }
        if let Some(m) = subj {
            let agg = if grouped {
                self.agg_before(m.start, lo)
            } else {
                None
            };
            let range = grouped && (m.start.saturating_sub(3)..m.end + 1).any(range_word);
            let e = if range {
                Expr::Range(m.col)
            } else if let Some(a) = agg {
                self.agg_of(a, m.col)
            } else if grouped
                && self.col(m.col).ends_with("id")
                && m.start > k
                && self.t(k + 1).is_some_and(|t| t.low.ends_with('s'))
            {
                Expr::Agg(Agg::Count, None)
            } else {
                Expr::Col(m.col)
            };
            return Some((e, m.start));
        }
        if grouped && self.counted_noun(k) {
            return Some((Expr::Agg(Agg::Count, None), k));
        }
        // "with a 'delivered' status"
        self.mentions
            .iter()
            .find(|m| m.start > k && m.start <= k + 3 && self.zone[m.start] == Zone::Body)
            .map(|m| (Expr::Col(m.col), k))
    }

    /// Is the literal at `k` followed by a plural noun that is not a column
    /// and not a unit ("more than 5 visits")?
    fn counted_noun(&self, k: usize) -> bool {
        let Some(t) = self.t(k + 1) else {
            return false;
        };
        let units = [
            "minute", "hour", "day", "year", "month", "week", "kg", "point", "dollar", "unit",
            "percent", "second", "mile", "km", "time", "star",
        ];
        t.is_word()
            && t.low.ends_with('s')
            && !units.contains(&t.norm.as_str())
            && self.mention_at(k + 1).is_none()
            && !STOP.contains(&t.low.as_str())
    }

    fn subquery_cond(&self, k: usize, lo: usize, grouped: bool) -> Option<(Cond, usize)> {
        let t = self.t(k)?;
        if !t.is("the") {
            return None;
        }
        let a = Agg::from_word(&self.t(k + 1)?.low)?;
        if a == Agg::Count {
            return None;
        }
        // The column after the aggregate word, within three words.
        let m = self
            .mentions
            .iter()
            .find(|m| m.start > k + 1 && m.start <= k + 4)
            .copied();
        // A comparator must come just before "the".
        let cmp_words = [
            "than",
            "exceed",
            "exceeds",
            "exceeding",
            "above",
            "below",
            "over",
            "under",
            "surpass",
            "surpasses",
        ];
        let prev = (k.saturating_sub(2)..k).any(|q| {
            self.t(q)
                .is_some_and(|x| cmp_words.contains(&x.low.as_str()))
        });
        if !prev {
            return None;
        }
        let subj = self.subject_before(k, lo, None);
        let col = m.map(|m| m.col).or(subj.map(|s| s.col))?;
        let subj_col = subj.map_or(col, |s| s.col);
        let start = subj.map_or(k, |s| s.start);
        let lhs = match subj {
            Some(s) if grouped => match self.agg_before(s.start, lo) {
                Some(ag) => Expr::Agg(ag, Some(s.col)),
                None => Expr::Col(subj_col),
            },
            _ => Expr::Col(subj_col),
        };
        let op = self.comparator(start.max(k.saturating_sub(6)), k, k + 2);
        let end = m.map_or(k + 2, |m| m.end);
        Some((
            Cond {
                lhs,
                op,
                rhs: Rhs::Sub(a, col),
                start: start.min(k),
                end,
                grounded: false,
                either: false,
            },
            end,
        ))
    }

    /// An unquoted run of words equal to a text value of the table.
    fn grounded_cond(&self, k: usize) -> Option<(Cond, usize)> {
        let t = self.t(k)?;
        if !t.is_word() || STOP.contains(&t.low.as_str()) {
            return None;
        }
        // Skip words that are column mentions (unless the value is longer).
        let mut best: Option<(usize, usize, String)> = None;
        for (words, ci, raw) in &self.values {
            let n = words.len();
            let ok = (0..n).all(|q| {
                self.t(k + q).is_some_and(|x| {
                    x.is_word() && self.zone[k + q] == Zone::Body && x.norm == words[q]
                })
            });
            if ok && best.as_ref().is_none_or(|b| n > b.0) {
                best = Some((n, *ci, raw.clone()));
            }
        }
        let (n, ci, raw) = best?;
        if let Some(m) = self.mention_at(k) {
            if m.end - m.start >= n {
                return None;
            }
        }
        // Ambiguous: the same value in several columns.
        let owners: BTreeSet<usize> = self
            .values
            .iter()
            .filter(|(w, _, _)| {
                w.len() == n && (0..n).all(|q| self.t(k + q).is_some_and(|x| x.norm == w[q]))
            })
            .map(|(_, c, _)| *c)
            .collect();
        if owners.len() > 1 {
            return None;
        }
        let neg = (k.saturating_sub(3)..k).any(|q| self.is(q, "not") || self.is(q, "non"));
        Some((
            Cond {
                lhs: Expr::Col(ci),
                op: if neg { Op::Ne } else { Op::Eq },
                rhs: Rhs::Lit(Lit::Str(raw)),
                start: k,
                end: k + n,
                grounded: true,
                either: false,
            },
            k + n,
        ))
    }

    fn connective(&self, a: &Cond, b: &Cond) -> Conn {
        let lo = a.end;
        let hi = b.start.max(a.end);
        let mut comma = false;
        let mut conn = Conn::And;
        for k in lo..hi {
            let t = &self.toks[k];
            if t.punct == Some(',') {
                comma = true;
            }
            if t.is("or") {
                let next = self.t(k + 1).map(|x| x.low.as_str()).unwrap_or("");
                if ![
                    "more", "higher", "greater", "less", "lower", "fewer", "equal", "after",
                    "before", "above", "below", "later", "earlier",
                ]
                .contains(&next)
                {
                    conn = Conn::Or;
                }
            }
            if t.is("and") && comma && conn != Conn::Or {
                conn = Conn::CommaAnd;
            }
        }
        conn
    }

    /// Render conditions joined by their connectives.
    fn where_sql(&self, conds: &[Cond], v: &Variant) -> String {
        if conds.is_empty() {
            return String::new();
        }
        let mut conns = Vec::new();
        for w in conds.windows(2) {
            conns.push(self.connective(&w[0], &w[1]));
        }
        let any_or = conns.contains(&Conn::Or);
        if !any_or {
            return conds
                .iter()
                .map(|c| self.cond_sql(c))
                .collect::<Vec<_>>()
                .join(" AND ");
        }
        // Merge `col = a OR col = b` into IN.
        let mut groups: Vec<Vec<Cond>> = vec![vec![conds[0].clone()]];
        let mut gconns: Vec<Conn> = Vec::new();
        for (i, c) in conds.iter().enumerate().skip(1) {
            let conn = conns[i - 1];
            let last = groups.last_mut().and_then(|g| g.last_mut());
            if let (Conn::Or, Some(prev)) = (conn, last) {
                if prev.lhs == c.lhs
                    && matches!(prev.op, Op::Eq)
                    && matches!(c.op, Op::Eq)
                    && matches!(c.rhs, Rhs::Lit(_))
                {
                    let mut list = match &prev.rhs {
                        Rhs::Lit(l) => vec![l.clone()],
                        Rhs::List(l) => l.clone(),
                        Rhs::Sub(..) => Vec::new(),
                    };
                    if !list.is_empty() {
                        if let Rhs::Lit(l) = &c.rhs {
                            list.push(l.clone());
                        }
                        prev.rhs = Rhs::List(list);
                        prev.end = c.end;
                        continue;
                    }
                }
            }
            groups.push(vec![c.clone()]);
            gconns.push(conn);
        }
        // Flatten back into a sequence.
        let seq: Vec<Cond> = groups.into_iter().flatten().collect();
        if gconns.iter().all(|c| *c != Conn::Or) {
            return seq
                .iter()
                .map(|c| self.cond_sql(c))
                .collect::<Vec<_>>()
                .join(" AND ");
        }
        if v.and_of_ors {
            // AND of OR-groups: split at ANDs.
            let mut parts: Vec<Vec<String>> = vec![vec![self.cond_sql(&seq[0])]];
            for (i, c) in seq.iter().enumerate().skip(1) {
                if gconns[i - 1] == Conn::Or {
                    if let Some(p) = parts.last_mut() {
                        p.push(self.cond_sql(c));
                    }
                } else {
                    parts.push(vec![self.cond_sql(c)]);
                }
            }
            return parts
                .iter()
                .map(|p| paren_join(p, " OR ", parts.len() > 1))
                .collect::<Vec<_>>()
                .join(" AND ");
        }
        // OR of AND-groups, but a ", and" after an OR closes the OR-group.
        let mut top: Vec<Vec<usize>> = vec![vec![0]];
        let mut seen_or = false;
        for i in 1..seq.len() {
            let c = gconns[i - 1];
            if c == Conn::Or {
                seen_or = true;
            }
            if c == Conn::CommaAnd && seen_or {
                top.push(vec![i]);
                seen_or = false;
            } else if let Some(t) = top.last_mut() {
                t.push(i);
            }
        }
        let mut out = Vec::new();
        for idx in &top {
            let mut ors: Vec<Vec<String>> = vec![Vec::new()];
            for (n, &i) in idx.iter().enumerate() {
                if n > 0 && gconns[i - 1] == Conn::Or {
                    ors.push(Vec::new());
                }
                if let Some(o) = ors.last_mut() {
                    o.push(self.cond_sql(&seq[i]));
                }
            }
            let inner: Vec<String> = ors
                .iter()
                .map(|a| paren_join(a, " AND ", ors.len() > 1))
                .collect();
            out.push(paren_join(&inner, " OR ", top.len() > 1));
        }
        out.join(" AND ")
    }

    fn cond_sql(&self, c: &Cond) -> String {
        let lhs = self.expr_sql(&c.lhs);
        let rhs = match &c.rhs {
            Rhs::Lit(l) => l.sql(),
            Rhs::Sub(a, col) => format!(
                "(SELECT {}({}) FROM {})",
                a.name(),
                self.col(*col),
                self.table.name
            ),
            Rhs::List(ls) => format!(
                "({})",
                ls.iter().map(Lit::sql).collect::<Vec<_>>().join(", ")
            ),
        };
        if let Rhs::List(_) = c.rhs {
            let not = if matches!(c.op, Op::Ne) { "NOT " } else { "" };
            return format!("{lhs} {not}IN {rhs}");
        }
        match &c.op {
            Op::Eq => format!("{lhs} = {rhs}"),
            Op::Ne => format!("{lhs} != {rhs}"),
            Op::Gt => format!("{lhs} > {rhs}"),
            Op::Ge => format!("{lhs} >= {rhs}"),
            Op::Lt => format!("{lhs} < {rhs}"),
            Op::Le => format!("{lhs} <= {rhs}"),
            Op::Like => format!("{lhs} LIKE {rhs}"),
            Op::Between(hi) => format!("{lhs} BETWEEN {rhs} AND {}", hi.sql()),
        }
    }

    // --------------------------------------------------------- statements

    fn select(&self, v: &Variant) -> Option<String> {
        let proj = self.projection(v);
        let groups = self.group_cols(&proj);
        let grouped = !groups.is_empty() || proj.iter().any(|e| !matches!(e, Expr::Col(_)));
        let mut proj = proj;
        // Grouping columns named only by "for each X" lead the projection.
        if !groups.is_empty() && !proj.iter().any(|e| matches!(e, Expr::Col(_))) {
            let mut lead: Vec<Expr> = groups.iter().map(|c| Expr::Col(*c)).collect();
            lead.append(&mut proj);
            proj = lead;
        }
        let conds = self.conditions(0, self.toks.len(), v, grouped, &proj);
        let (having, wheres): (Vec<Cond>, Vec<Cond>) = conds
            .into_iter()
            .partition(|c| !matches!(c.lhs, Expr::Col(_)) && !groups.is_empty());
        let cols = if proj.is_empty() {
            "*".to_string()
        } else {
            proj.iter()
                .map(|e| self.expr_sql(e))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut sql = format!("SELECT {cols} FROM {}", self.table.name);
        let w = self.where_sql(&wheres, v);
        if !w.is_empty() {
            sql.push_str(&format!(" WHERE {w}"));
        }
        if !groups.is_empty() {
            let g: Vec<&str> = groups.iter().map(|c| self.col(*c)).collect();
            sql.push_str(&format!(" GROUP BY {}", g.join(", ")));
            let h = self.where_sql(&having, v);
            if !h.is_empty() {
                sql.push_str(&format!(" HAVING {h}"));
            }
        }
        let order = self.order_items(&proj);
        if !order.is_empty() {
            let o: Vec<String> = order
                .iter()
                .map(|(e, asc)| {
                    format!("{} {}", self.expr_sql(e), if *asc { "ASC" } else { "DESC" })
                })
                .collect();
            sql.push_str(&format!(" ORDER BY {}", o.join(", ")));
        }
        if let Some((l, _)) = self.limit {
            sql.push_str(&format!(" LIMIT {l}"));
            if let Some((o, _)) = self.offset {
                sql.push_str(&format!(" OFFSET {o}"));
            }
        } else if let Some((o, _)) = self.offset {
            sql.push_str(&format!(" LIMIT 18446744073709551615 OFFSET {o}"));
        }
        sql.push(';');
        Some(sql)
    }

    /// The end of the SET part of an update: the first condition cue.
    fn set_end(&self) -> usize {
        let cues = [
            "where", "for", "whose", "if", "when", "in", "that", "which", "who", "on",
        ];
        for (k, t) in self.toks.iter().enumerate() {
            if k > 1 && t.is_word() && cues.contains(&t.low.as_str()) {
                // "in the X table" is not a condition.
                if t.low == "in" && (k + 1..k + 5).any(|q| self.is(q, "table")) {
                    continue;
                }
                return k;
            }
        }
        self.toks.len()
    }

    fn update(&self, v: &Variant) -> Option<String> {
        let set_end = self.set_end();
        let mut sets: Vec<String> = Vec::new();
        let mut used_lits = BTreeSet::new();
        const UP: [&str; 9] = [
            "increase",
            "increasing",
            "raise",
            "raising",
            "add",
            "adding",
            "increment",
            "incrementing",
            "double",
        ];
        const DOWN: [&str; 12] = [
            "decrease",
            "decreasing",
            "reduce",
            "reducing",
            "lower",
            "lowering",
            "subtract",
            "subtracting",
            "deduct",
            "deducting",
            "decrement",
            "cut",
        ];
        let verb = (0..set_end.min(self.toks.len())).find(|k| {
            let w = self.toks[*k].low.as_str();
            UP.contains(&w) || DOWN.contains(&w)
        });
        if let Some(vk) = verb {
            let vw = self.toks[vk].low.clone();
            let m = self.mentions.iter().find(|m| m.start < set_end)?;
            let c = self.col(m.col);
            let up = UP.contains(&vw.as_str());
            if vw == "double" {
                sets.push(format!("{c} = {c} * 2"));
            } else {
                // "by 10%", "adding 100 to X", "subtracting 5 from X".
                let k = (vk + 1..self.toks.len()).find(|k| {
                    self.toks[*k].lit.is_some()
                        && (self.is(k - 1, "by") || *k == vk + 1)
                        && self.zone[*k] == Zone::Body
                })?;
                used_lits.insert(k);
                let n = match &self.toks[k].lit {
                    Some(Lit::Num(n)) => n.clone(),
                    _ => return None,
                };
                if self.toks[k].pct {
                    let f: f64 = n.parse().ok()?;
                    let factor = if up { 1.0 + f / 100.0 } else { 1.0 - f / 100.0 };
                    sets.push(format!("{c} = {c} * {}", fmt_num(factor)));
                } else {
                    sets.push(format!("{c} = {c} {} {n}", if up { "+" } else { "-" }));
                }
            }
        } else {
            for (k, t) in self.toks.iter().enumerate().take(set_end) {
                let Some(lit) = &t.lit else { continue };
                if !(self.is(k.wrapping_sub(1), "to")
                    || self.is(k.wrapping_sub(1), "=")
                    || self.toks.get(k.wrapping_sub(1)).and_then(|x| x.punct) == Some('='))
                {
                    continue;
                }
                let m = self.subject_before(k, 0, None)?;
                let lit = match (lit, self.col_is_date(m.col)) {
                    (Lit::Str(s), _) => Lit::Str(s.clone()),
                    (l, _) => l.clone(),
                };
                sets.push(format!("{} = {}", self.col(m.col), lit.sql()));
                used_lits.insert(k);
            }
        }
        if sets.is_empty() {
            return None;
        }
        let lo = used_lits
            .iter()
            .max()
            .map_or(set_end, |k| (k + 1).max(set_end.min(k + 1)));
        let lo = lo.min(set_end.max(lo));
        let conds = self.conditions(lo, self.toks.len(), v, false, &[]);
        let mut sql = format!("UPDATE {} SET {}", self.table.name, sets.join(", "));
        let w = self.where_sql(&conds, v);
        if !w.is_empty() {
            sql.push_str(&format!(" WHERE {w}"));
        }
        if let Some((l, _)) = self.limit {
            sql.push_str(&format!(" LIMIT {l}"));
        }
        sql.push(';');
        Some(sql)
    }

    fn delete(&self, v: &Variant) -> Option<String> {
        let conds = self.conditions(0, self.toks.len(), v, false, &[]);
        let w = self.where_sql(&conds, v);
        if w.is_empty() {
            return None;
        }
        let limit = self
            .limit
            .map_or(String::new(), |(l, _)| format!(" LIMIT {l}"));
        Some(format!("DELETE FROM {} WHERE {w}{limit};", self.table.name))
    }

    fn insert(&self) -> Option<String> {
        let mut cols: Vec<usize> = Vec::new();
        let mut vals: Vec<String> = Vec::new();
        let mut floor = 0;
        for (k, t) in self.toks.iter().enumerate() {
            let Some(lit) = &t.lit else { continue };
            let m = self
                .mentions
                .iter()
                .rev()
                .find(|m| m.end <= k && m.start >= floor && !cols.contains(&m.col))
                .copied();
            let Some(m) = m else { continue };
            // Only filler words between the column and its value.
            let filler = (m.end..k).all(|q| {
                let x = &self.toks[q];
                x.punct == Some(':')
                    || x.punct == Some('=')
                    || [
                        "of", "is", "as", "to", "set", "equal", "equals", "a", "an", "the",
                        "being", "value", "at", "on",
                    ]
                    .contains(&x.low.as_str())
            });
            if !filler {
                continue;
            }
            cols.push(m.col);
            vals.push(lit.sql());
            floor = k + 1;
        }
        if cols.is_empty() {
            return None;
        }
        let names: Vec<&str> = cols.iter().map(|c| self.col(*c)).collect();
        Some(format!(
            "INSERT INTO {} ({}) VALUES ({});",
            self.table.name,
            names.join(", "),
            vals.join(", ")
        ))
    }
}

fn paren_join(parts: &[String], sep: &str, paren: bool) -> String {
    let s = parts.join(sep);
    if paren && parts.len() > 1 {
        format!("({s})")
    } else {
        s
    }
}

fn fmt_num(x: f64) -> String {
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A SQL string literal.
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A four-digit year against a date column: a range bound at the year's
/// first or last day, or a `LIKE 'YYYY%'` for equality.
fn year_against_date(op: Op, lit: Lit) -> (Op, Lit) {
    let Lit::Num(y) = &lit else {
        return (op, lit);
    };
    if y.len() != 4 {
        return (op, lit);
    }
    match op {
        Op::Lt | Op::Ge => (op, Lit::Date(format!("{y}-01-01"))),
        Op::Gt | Op::Le => (op, Lit::Date(format!("{y}-12-31"))),
        Op::Eq | Op::Ne => (Op::Like, Lit::Str(format!("{y}%"))),
        Op::Between(_) | Op::Like => (op, lit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifelong::types::Column;

    fn table(name: &str, cols: &[(&str, &str)], rows: Vec<Vec<Cell>>) -> Table {
        Table {
            name: name.into(),
            columns: cols
                .iter()
                .map(|(n, t)| Column {
                    name: (*n).into(),
                    ty: (*t).into(),
                })
                .collect(),
            rows,
        }
    }

    #[test]
    fn lexes_literals_dates_and_numbers() {
        let t = lex("amount 1,000,000 on June 1, 2023 or '2023-10-15' and 'Credit Card' 10% third");
        let lits: Vec<Lit> = t.iter().filter_map(|t| t.lit.clone()).collect();
        assert_eq!(
            lits,
            vec![
                Lit::Num("1000000".into()),
                Lit::Date("2023-06-01".into()),
                Lit::Date("2023-10-15".into()),
                Lit::Str("Credit Card".into()),
                Lit::Num("10".into()),
            ]
        );
        assert!(t.iter().any(|t| t.ordinal == Some(3)));
        assert!(t.iter().any(|t| t.pct));
    }

    #[test]
    fn stems_plurals_and_abbreviations() {
        assert_eq!(stem("statuses"), "status");
        assert_eq!(stem("categories"), "category");
        assert_eq!(stem("IDs"), "id");
        assert_eq!(stem("prices"), "price");
        assert_eq!(stem("avg"), "average");
    }

    #[test]
    fn insert_maps_columns_to_values() {
        let t = table(
            "membership_payments",
            &[
                ("payment_id", "INT"),
                ("member_id", "INT"),
                ("payment_date", "TEXT"),
                ("amount", "INT"),
                ("payment_method", "TEXT"),
            ],
            vec![],
        );
        let h = hypotheses("Insert a new payment record for member ID 102 with a payment date of '2023-10-15', amount 75, and payment method 'Credit Card' into the membership payments table.", &t);
        assert_eq!(h[0], "INSERT INTO membership_payments (member_id, payment_date, amount, payment_method) VALUES (102, '2023-10-15', 75, 'Credit Card');");
    }

    #[test]
    fn select_with_group_in_and_order() {
        let t = table(
            "tax_records",
            &[
                ("taxpayer_id", "INT"),
                ("name", "TEXT"),
                ("tax_year", "INT"),
                ("amount_owed", "INT"),
                ("status", "TEXT"),
                ("filing_date", "TEXT"),
            ],
            vec![vec![
                Cell::Int(1),
                Cell::Text("A".into()),
                Cell::Int(2023),
                Cell::Int(5),
                Cell::Text("unpaid".into()),
                Cell::Text("2023-01-01".into()),
            ]],
        );
        let h = hypotheses("What are the statuses and their total amounts owed for the tax year 2023 where the status is either 'unpaid' or 'pending'? Return each status and the corresponding total amount owed, grouped by status, ordered by status in descending order and total owed in ascending order.", &t);
        assert_eq!(h[0], "SELECT status, SUM(amount_owed) FROM tax_records WHERE tax_year = 2023 AND status IN ('unpaid', 'pending') GROUP BY status ORDER BY status DESC, SUM(amount_owed) ASC;");
    }

    #[test]
    fn select_subquery_and_limit() {
        let t = table(
            "product_inventory",
            &[
                ("product_id", "INT"),
                ("product_name", "TEXT"),
                ("category", "TEXT"),
                ("stock_quantity", "INT"),
                ("price", "INT"),
            ],
            vec![],
        );
        let h = hypotheses("Which products have a price higher than the average price and a stock quantity below the average stock quantity? Return the product name and price, ordered by stock quantity in ascending order followed by price in ascending order, and limit the results to 5 entries.", &t);
        assert_eq!(h[0], "SELECT product_name, price FROM product_inventory WHERE price > (SELECT AVG(price) FROM product_inventory) AND stock_quantity < (SELECT AVG(stock_quantity) FROM product_inventory) ORDER BY stock_quantity ASC, price ASC LIMIT 5;");
    }

    #[test]
    fn update_and_delete() {
        let t = table(
            "travel_destinations",
            &[
                ("destination_id", "INT"),
                ("name", "TEXT"),
                ("country", "TEXT"),
                ("popularity_rating", "INT"),
                ("average_cost", "INT"),
            ],
            vec![],
        );
        let h = hypotheses(
            "Update the average cost to 1200 where the country is 'France' and the popularity rating is greater than 4.",
            &t,
        );
        assert_eq!(h[0], "UPDATE travel_destinations SET average_cost = 1200 WHERE country = 'France' AND popularity_rating > 4;");
        let h = hypotheses(
            "Delete all destinations where the popularity rating is at least 3 or the country is 'Spain'.",
            &t,
        );
        assert_eq!(
            h[0],
            "DELETE FROM travel_destinations WHERE popularity_rating >= 3 OR country = 'Spain';"
        );
    }

    #[test]
    fn hypotheses_are_distinct_and_bounded() {
        let t = table("t", &[("a", "INT"), ("b", "TEXT")], vec![]);
        let h = hypotheses(
            "What are the a values where b is either 'x' and a is 3 or b is 'y'?",
            &t,
        );
        assert!(h.len() <= MAX_HYPOTHESES);
        let set: BTreeSet<&String> = h.iter().collect();
        assert_eq!(set.len(), h.len());
    }
}
