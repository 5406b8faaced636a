//! A role's JSON schema as a compact GBNF grammar (llama.cpp's grammar
//! format), and a small recogniser for such grammars.
//!
//! Why: llama-server turns a `response_format` JSON schema into a grammar
//! of its own that allows free whitespace between tokens and does not bound
//! numbers. SmolLM2 under that grammar fills answers with runs of tabs and
//! newlines until its token limit, and writes strengths of 1.6 under
//! `maximum: 1`: both end in a repair turn, which doubles the call's
//! tokens. `llm.response_format = "gbnf"` sends the grammar built here
//! instead (as the request's `grammar` field, which llama.cpp servers
//! read): no whitespace anywhere, properties in a fixed order (the
//! `required` list, then the optional ones by name), arrays bounded by
//! `minItems`/`maxItems`, strings by `minLength`/`maxLength`, integers and
//! numbers by `minimum`/`maximum` where the bounds are integers and close
//! together (the roles' indices, candidate numbers and strengths), and
//! decimals to at most four places.
//!
//! Every document the grammar generates satisfies the schema, except for
//! `uniqueItems`, which a context-free grammar cannot say (the parsers drop
//! repeats as counted repairs); the grammar is stricter than the schema
//! (fixed property order, no whitespace, no extra properties).
//!
//! [`recognise`] parses a grammar of the form this module writes and tells
//! whether a text is in its language; the tests and the fixture server use
//! it to check answers.

use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Widest integer range written out as alternatives.
const MAX_ENUMERATED: i64 = 256;
/// Most digits after a decimal point.
const MAX_DECIMALS: u32 = 4;

/// The GBNF grammar of JSON documents that match `schema`, without
/// whitespace. The root rule is `root`.
pub fn from_schema(schema: &Value) -> String {
    let mut g = Writer::default();
    let root = g.node(schema);
    let mut out = format!("root ::= {root}\n");
    for (name, def) in &g.rules {
        let _ = writeln!(out, "{name} ::= {def}");
    }
    for shared in &g.shared {
        let _ = writeln!(out, "{}", shared_rule(shared));
    }
    out
}

#[derive(Default)]
struct Writer {
    rules: Vec<(String, String)>,
    shared: BTreeSet<&'static str>,
}

fn shared_rule(name: &str) -> &'static str {
    match name {
        "chr" => r#"chr ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})"#,
        "int" => r#"int ::= "-"? uint"#,
        "uint" => r#"uint ::= "0" | [1-9] [0-9]{0,15}"#,
        "num" => r#"num ::= "-"? unum"#,
        "unum" => r#"unum ::= uint ("." [0-9]{1,4})? ([eE] [-+]? [0-9]{1,3})?"#,
        "str" => r#"str ::= "\"" chr* "\"""#,
        "value" => r#"value ::= obj | arr | str | num | "true" | "false" | "null""#,
        "obj" => r#"obj ::= "{" (str ":" value ("," str ":" value)*)? "}""#,
        "arr" => r#"arr ::= "[" (value ("," value)*)? "]""#,
        _ => "",
    }
}

/// A GBNF string literal matching exactly `text`.
fn lit(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\x{:02X}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// `x{min,max}` in GBNF (`max` None: unbounded).
fn repeat(x: &str, min: u64, max: Option<u64>) -> String {
    match (min, max) {
        (0, None) => format!("{x}*"),
        (1, None) => format!("{x}+"),
        (m, None) => format!("{x}{{{m},}}"),
        (0, Some(1)) => format!("{x}?"),
        (m, Some(n)) if m == n && m == 1 => x.to_string(),
        (m, Some(n)) if m == n => format!("{x}{{{m}}}"),
        (m, Some(n)) => format!("{x}{{{m},{n}}}"),
    }
}

fn integer_bound(s: &serde_json::Map<String, Value>, key: &str, up: bool) -> Option<i64> {
    let x = s.get(key)?.as_f64()?;
    if !x.is_finite() || x.abs() > 1e15 {
        return None;
    }
    Some(if up { x.ceil() } else { x.floor() } as i64)
}

impl Writer {
    fn use_shared(&mut self, name: &'static str) -> String {
        self.shared.insert(name);
        match name {
            "str" => {
                self.shared.insert("chr");
            }
            "int" | "num" => {
                self.shared.insert("uint");
                if name == "num" {
                    self.shared.insert("unum");
                }
            }
            "value" | "obj" | "arr" => {
                for dep in ["value", "obj", "arr", "str", "chr", "num", "unum", "uint"] {
                    self.shared.insert(dep);
                }
            }
            _ => {}
        }
        name.to_string()
    }

    /// A named rule holding `def`; returns its name.
    fn rule(&mut self, def: String) -> String {
        let name = format!("r{}", self.rules.len());
        self.rules.push((name.clone(), def));
        name
    }

    /// An expression for `schema` (a rule name or a literal).
    fn node(&mut self, schema: &Value) -> String {
        let Some(s) = schema.as_object() else {
            return self.use_shared("value");
        };
        if let Some(Value::Array(allowed)) = s.get("enum") {
            if !allowed.is_empty() {
                let alts: Vec<String> = allowed.iter().map(|v| lit(&v.to_string())).collect();
                return self.rule(alts.join(" | "));
            }
        }
        if let Some(c) = s.get("const") {
            return lit(&c.to_string());
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(opts)) = s.get(key) {
                if !opts.is_empty() {
                    let alts: Vec<String> = opts.iter().map(|o| self.node(o)).collect();
                    return self.rule(alts.join(" | "));
                }
            }
        }
        match s.get("type") {
            Some(Value::String(ty)) => self.typed(ty, s),
            Some(Value::Array(tys)) if !tys.is_empty() => {
                let alts: Vec<String> = tys
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|t| self.typed(t, s))
                    .collect();
                self.rule(alts.join(" | "))
            }
            _ => self.use_shared("value"),
        }
    }

    fn typed(&mut self, ty: &str, s: &serde_json::Map<String, Value>) -> String {
        match ty {
            "object" => self.object(s),
            "array" => self.array(s),
            "string" => self.string(s),
            "integer" => self.integer(s),
            "number" => self.number(s),
            "boolean" => self.rule(r#""true" | "false""#.to_string()),
            "null" => lit("null"),
            _ => self.use_shared("value"),
        }
    }

    fn object(&mut self, s: &serde_json::Map<String, Value>) -> String {
        let props = s.get("properties").and_then(Value::as_object);
        let Some(props) = props.filter(|p| !p.is_empty()) else {
            if s.get("additionalProperties") == Some(&Value::Bool(false)) {
                return lit("{}");
            }
            return self.use_shared("obj");
        };
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut order: Vec<(&str, bool)> = Vec::new();
        for r in &required {
            if props.contains_key(*r) && !order.iter().any(|(k, _)| k == r) {
                order.push((r, true));
            }
        }
        for k in props.keys() {
            if !order.iter().any(|(o, _)| o == k) {
                order.push((k, false));
            }
        }
        let pairs: Vec<(String, bool)> = order
            .iter()
            .map(|(k, req)| {
                let v = self.node(&props[*k]);
                (
                    format!("{} {v}", lit(&format!("{}:", Value::from(*k)))),
                    *req,
                )
            })
            .collect();
        let body = if pairs.iter().any(|(_, r)| *r) {
            // Required ones come first, so the first pair needs no comma.
            let mut parts = Vec::new();
            for (i, (p, req)) in pairs.iter().enumerate() {
                match (i, req) {
                    (0, _) => parts.push(p.clone()),
                    (_, true) => parts.push(format!("\",\" {p}")),
                    (_, false) => parts.push(format!("(\",\" {p})?")),
                }
            }
            parts.join(" ")
        } else {
            // All optional: whichever comes first has no comma.
            let alts: Vec<String> = (0..pairs.len())
                .map(|first| {
                    let mut a = vec![pairs[first].0.clone()];
                    a.extend(
                        pairs[first + 1..]
                            .iter()
                            .map(|(p, _)| format!("(\",\" {p})?")),
                    );
                    a.join(" ")
                })
                .collect();
            format!("({})?", alts.join(" | "))
        };
        self.rule(format!("\"{{\" {body} \"}}\""))
    }

    fn array(&mut self, s: &serde_json::Map<String, Value>) -> String {
        let min = s.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = s.get("maxItems").and_then(Value::as_u64);
        if max == Some(0) {
            return lit("[]");
        }
        let item = match s.get("items") {
            Some(it) => self.node(it),
            None => self.use_shared("value"),
        };
        let rest = repeat(
            &format!("(\",\" {item})"),
            min.saturating_sub(1),
            max.map(|m| m.saturating_sub(1)),
        );
        let seq = format!("{item} {rest}");
        let body = if min == 0 { format!("({seq})?") } else { seq };
        self.rule(format!("\"[\" {body} \"]\""))
    }

    fn string(&mut self, s: &serde_json::Map<String, Value>) -> String {
        let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0);
        let max = s.get("maxLength").and_then(Value::as_u64);
        if min == 0 && max.is_none() {
            return self.use_shared("str");
        }
        let chr = self.use_shared("chr");
        self.rule(format!("\"\\\"\" {} \"\\\"\"", repeat(&chr, min, max)))
    }

    fn integer(&mut self, s: &serde_json::Map<String, Value>) -> String {
        let lo = integer_bound(s, "minimum", true);
        let hi = integer_bound(s, "maximum", false);
        match (lo, hi) {
            (Some(lo), Some(hi)) if hi >= lo && hi - lo <= MAX_ENUMERATED => {
                let alts: Vec<String> = (lo..=hi).map(|k| lit(&k.to_string())).collect();
                self.rule(alts.join(" | "))
            }
            (Some(lo), _) if lo >= 0 => self.use_shared("uint"),
            _ => self.use_shared("int"),
        }
    }

    fn number(&mut self, s: &serde_json::Map<String, Value>) -> String {
        let exact = |key: &str| {
            s.get(key)
                .and_then(Value::as_f64)
                .filter(|x| x.fract() == 0.0 && x.abs() <= MAX_ENUMERATED as f64)
                .map(|x| x as i64)
        };
        let (lo, hi) = (exact("minimum"), exact("maximum"));
        match (lo, hi) {
            (Some(lo), Some(hi)) if hi >= lo && hi - lo <= MAX_ENUMERATED => {
                let def = if lo >= 0 {
                    magnitudes(lo, hi)
                } else if hi <= 0 {
                    format!("\"-\" ({})", magnitudes(-hi, -lo))
                } else {
                    format!("{} | \"-\" ({})", magnitudes(0, hi), magnitudes(0, -lo))
                };
                self.rule(def)
            }
            _ if s
                .get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| m >= 0.0) =>
            {
                self.use_shared("num");
                "unum".to_string()
            }
            _ => self.use_shared("num"),
        }
    }
}

/// Decimal numbers in `[a, b]` for integers `0 <= a <= b`: every integer
/// part from `a` to `b - 1` with up to [`MAX_DECIMALS`] places, and `b`
/// itself with only zeros after the point.
fn magnitudes(a: i64, b: i64) -> String {
    let frac = format!("(\".\" [0-9]{{1,{MAX_DECIMALS}}})?");
    let mut alts: Vec<String> = (a..b)
        .map(|k| format!("{} {frac}", lit(&k.to_string())))
        .collect();
    alts.push(format!(
        "{} (\".\" \"0\"{{1,{MAX_DECIMALS}}})?",
        lit(&b.to_string())
    ));
    alts.join(" | ")
}

/// A grammar that [`recognise`] could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("grammar line {line}: {message}")]
pub struct GrammarError {
    /// 1-based line of the grammar text.
    pub line: usize,
    /// What is wrong there.
    pub message: String,
}

#[derive(Debug, Clone)]
enum Expr {
    Lit(Vec<char>),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Ref(String),
    Seq(Vec<Expr>),
    Alt(Vec<Expr>),
    Rep(Box<Expr>, u32, Option<u32>),
}

/// Whether `text` is in the language of `grammar` (GBNF with one rule per
/// line, literals, character classes, groups, `?`, `*`, `+` and `{m,n}`;
/// the root rule is `root`). Exhaustive over every parse, so it is meant for
/// short answers and the grammars [`from_schema`] writes.
pub fn recognise(grammar: &str, text: &str) -> Result<bool, GrammarError> {
    let mut rules = std::collections::BTreeMap::new();
    for (i, line) in grammar.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| GrammarError {
            line: i + 1,
            message,
        };
        let (name, def) = line
            .split_once("::=")
            .ok_or_else(|| err("expected `name ::= definition`".into()))?;
        let mut p = Parser {
            s: def.chars().collect(),
            i: 0,
        };
        let e = p.alt().map_err(err)?;
        p.ws();
        if p.i != p.s.len() {
            return Err(err(format!("unexpected `{}`", p.s[p.i])));
        }
        rules.insert(name.trim().to_string(), e);
    }
    let root = rules.get("root").ok_or(GrammarError {
        line: 0,
        message: "no `root` rule".into(),
    })?;
    let m = Matcher {
        rules: &rules,
        s: text.chars().collect(),
    };
    let ends = m
        .ends(root, 0, 0)
        .map_err(|message| GrammarError { line: 0, message })?;
    Ok(ends.contains(&m.s.len()))
}

struct Parser {
    s: Vec<char>,
    i: usize,
}

impl Parser {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_whitespace()) {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    fn alt(&mut self) -> Result<Expr, String> {
        let mut alts = vec![self.seq()?];
        loop {
            self.ws();
            if self.peek() == Some('|') {
                self.i += 1;
                alts.push(self.seq()?);
            } else {
                break;
            }
        }
        Ok(if alts.len() == 1 {
            alts.remove(0)
        } else {
            Expr::Alt(alts)
        })
    }
    fn seq(&mut self) -> Result<Expr, String> {
        let mut items = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                None | Some('|') | Some(')') => break,
                _ => {
                    let atom = self.atom()?;
                    items.push(self.postfix(atom)?);
                }
            }
        }
        Ok(Expr::Seq(items))
    }
    fn postfix(&mut self, atom: Expr) -> Result<Expr, String> {
        let rep = |e: Expr, m, n| Expr::Rep(Box::new(e), m, n);
        Ok(match self.peek() {
            Some('?') => {
                self.i += 1;
                rep(atom, 0, Some(1))
            }
            Some('*') => {
                self.i += 1;
                rep(atom, 0, None)
            }
            Some('+') => {
                self.i += 1;
                rep(atom, 1, None)
            }
            Some('{') => {
                self.i += 1;
                let close = self.s[self.i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or("unclosed `{`")?;
                let body: String = self.s[self.i..self.i + close].iter().collect();
                self.i += close + 1;
                let num = |t: &str| {
                    t.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("bad count `{t}`"))
                };
                match body.split_once(',') {
                    None => {
                        let m = num(&body)?;
                        rep(atom, m, Some(m))
                    }
                    Some((m, n)) if n.trim().is_empty() => rep(atom, num(m)?, None),
                    Some((m, n)) => rep(atom, num(m)?, Some(num(n)?)),
                }
            }
            _ => atom,
        })
    }
    fn escaped(&mut self) -> Result<char, String> {
        let c = self.peek().ok_or("dangling escape")?;
        self.i += 1;
        let hex = |p: &mut Self, n: usize| -> Result<char, String> {
            let t: String =
                p.s.get(p.i..p.i + n)
                    .ok_or("short escape")?
                    .iter()
                    .collect();
            p.i += n;
            u32::from_str_radix(&t, 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| format!("bad escape `{t}`"))
        };
        Ok(match c {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            other => other,
        })
    }
    /// One character of a literal or class, escapes decoded; `eof` is
    /// the error when the grammar ends first.
    fn char_or_escape(&mut self, eof: &str) -> Result<char, String> {
        let c = self.peek().ok_or_else(|| eof.to_string())?;
        self.i += 1;
        if c == '\\' {
            self.escaped()
        } else {
            Ok(c)
        }
    }
    fn atom(&mut self) -> Result<Expr, String> {
        match self.peek() {
            Some('"') => {
                self.i += 1;
                let mut out = Vec::new();
                loop {
                    if self.peek() == Some('"') {
                        self.i += 1;
                        break;
                    }
                    out.push(self.char_or_escape("unclosed literal")?);
                }
                Ok(Expr::Lit(out))
            }
            Some('[') => {
                self.i += 1;
                let negated = self.peek() == Some('^');
                if negated {
                    self.i += 1;
                }
                let mut ranges = Vec::new();
                loop {
                    if self.peek() == Some(']') {
                        self.i += 1;
                        break;
                    }
                    let c = self.char_or_escape("unclosed class")?;
                    if self.peek() == Some('-') && self.s.get(self.i + 1) != Some(&']') {
                        self.i += 1;
                        let hi = self.char_or_escape("unclosed class")?;
                        ranges.push((c, hi));
                    } else {
                        ranges.push((c, c));
                    }
                }
                Ok(Expr::Class { negated, ranges })
            }
            Some('(') => {
                self.i += 1;
                let e = self.alt()?;
                self.ws();
                if self.peek() != Some(')') {
                    return Err("unclosed `(`".into());
                }
                self.i += 1;
                Ok(e)
            }
            Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = self.i;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    self.i += 1;
                }
                Ok(Expr::Ref(self.s[start..self.i].iter().collect()))
            }
            Some(c) => Err(format!("unexpected `{c}`")),
            None => Err("unexpected end".into()),
        }
    }
}

struct Matcher<'a> {
    rules: &'a std::collections::BTreeMap<String, Expr>,
    s: Vec<char>,
}

/// Deepest rule nesting the recogniser follows.
const MAX_DEPTH: usize = 200;

impl Matcher<'_> {
    /// Every position where a match of `e` starting at `pos` can end.
    fn ends(&self, e: &Expr, pos: usize, depth: usize) -> Result<BTreeSet<usize>, String> {
        if depth > MAX_DEPTH {
            return Err("grammar nests too deeply".into());
        }
        let mut out = BTreeSet::new();
        match e {
            Expr::Lit(l) => {
                if self.s.get(pos..pos + l.len()) == Some(l.as_slice()) {
                    out.insert(pos + l.len());
                }
            }
            Expr::Class { negated, ranges } => {
                if let Some(&c) = self.s.get(pos) {
                    let inside = ranges.iter().any(|&(a, b)| a <= c && c <= b);
                    if inside != *negated {
                        out.insert(pos + 1);
                    }
                }
            }
            Expr::Ref(name) => {
                let r = self
                    .rules
                    .get(name)
                    .ok_or_else(|| format!("no rule `{name}`"))?;
                return self.ends(r, pos, depth + 1);
            }
            Expr::Alt(alts) => {
                for a in alts {
                    out.extend(self.ends(a, pos, depth + 1)?);
                }
            }
            Expr::Seq(items) => {
                out.insert(pos);
                for it in items {
                    let mut next = BTreeSet::new();
                    for &p in &out {
                        next.extend(self.ends(it, p, depth + 1)?);
                    }
                    out = next;
                    if out.is_empty() {
                        break;
                    }
                }
            }
            Expr::Rep(inner, m, n) => {
                let mut cur = BTreeSet::from([pos]);
                let mut seen = cur.clone();
                if *m == 0 {
                    out.insert(pos);
                }
                let mut k = 0u32;
                while n.is_none_or(|n| k < n) {
                    k += 1;
                    let mut next = BTreeSet::new();
                    for &p in &cur {
                        next.extend(self.ends(inner, p, depth + 1)?);
                    }
                    if k >= *m {
                        out.extend(next.iter().copied());
                    }
                    // Unbounded: stop once no new position appears.
                    if n.is_none() && next.iter().all(|p| seen.contains(p)) && k >= *m {
                        break;
                    }
                    seen.extend(next.iter().copied());
                    if next.is_empty() {
                        break;
                    }
                    cur = next;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::validate;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use serde_json::json;

    fn ok(g: &str, t: &str) -> bool {
        recognise(g, t).unwrap_or_else(|e| panic!("{e}\n{g}"))
    }

    /// The schemas of the roles that answer through it (shapes of the rank,
    /// brief extraction, link batch and evolve batch schemas).
    fn role_schemas() -> Vec<Value> {
        vec![
            json!({"type":"object","required":["ranking"],"additionalProperties":false,
                   "properties":{"ranking":{"type":"array","minItems":1,"maxItems":10,"uniqueItems":true,
                                 "items":{"type":"integer","minimum":1,"maximum":10}}}}),
            json!({"type":"object","required":["new_chunks","boosts","demotes"],"additionalProperties":false,
                   "properties":{
                     "new_chunks":{"type":"array","maxItems":5,"items":{"type":"object",
                        "required":["category","text","strength"],"additionalProperties":false,
                        "properties":{"category":{"type":"string","enum":["genre","era","title theme"]},
                                      "text":{"type":"string","minLength":1,"maxLength":48},
                                      "strength":{"type":"number","minimum":-1,"maximum":1},
                                      "sources":{"type":"array","maxItems":3,"uniqueItems":true,
                                                 "items":{"type":"integer","enum":[20445,20446]}}}}},
                     "boosts":{"type":"array","maxItems":0},
                     "demotes":{"type":"array","maxItems":2,"items":{"type":"object","required":["chunk"],
                        "additionalProperties":false,"properties":{"chunk":{"type":"string","enum":["c1","c2"]}}}}}}),
            json!({"type":"object","required":["answers"],"properties":{"answers":{"type":"array",
                   "minItems":2,"maxItems":2,"items":{"type":"object","required":["links"],"additionalProperties":false,
                   "properties":{"links":{"type":"array","maxItems":3,"items":{"type":"object",
                      "required":["index","relation"],"additionalProperties":false,
                      "properties":{"index":{"type":"integer","minimum":0,"maximum":2},
                                    "relation":{"type":"string","enum":["shared topic","intent progression"]}}}}}}}}}),
            json!({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":["string","null"]},
                   "c":{"anyOf":[{"type":"number","minimum":0},{"type":"integer","minimum":-3,"maximum":-1}]}}}),
            json!({"type":"object","required":["profile"],"additionalProperties":false,
                   "properties":{"profile":{"type":"string","minLength":1,"maxLength":640}}}),
        ]
    }

    /// A random document the grammar should generate: properties in the
    /// grammar's order, compact, numbers inside their bounds.
    fn sample(schema: &Value, rng: &mut ChaCha8Rng) -> String {
        let s = schema.as_object().cloned().unwrap_or_default();
        if let Some(Value::Array(e)) = s.get("enum") {
            return e[rng.gen_range(0..e.len())].to_string();
        }
        if let Some(Value::Array(o)) = s.get("anyOf") {
            return sample(&o[rng.gen_range(0..o.len())], rng);
        }
        let ty = match s.get("type") {
            Some(Value::Array(t)) => t[rng.gen_range(0..t.len())]
                .as_str()
                .unwrap_or("null")
                .to_string(),
            Some(Value::String(t)) => t.clone(),
            _ => "null".to_string(),
        };
        let bound = |k: &str, d: f64| s.get(k).and_then(Value::as_f64).unwrap_or(d);
        match ty.as_str() {
            "object" => {
                let props = s
                    .get("properties")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let req: Vec<String> = s
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| {
                        r.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut keys: Vec<(String, bool)> = req.iter().map(|k| (k.clone(), true)).collect();
                keys.extend(
                    props
                        .keys()
                        .filter(|k| !req.contains(k))
                        .map(|k| (k.clone(), false)),
                );
                let mut parts: Vec<String> = Vec::new();
                for (k, r) in &keys {
                    if *r || rng.gen_bool(0.5) {
                        parts.push(format!(
                            "{}:{}",
                            Value::from(k.as_str()),
                            sample(&props[k], rng)
                        ));
                    }
                }
                format!("{{{}}}", parts.join(","))
            }
            "array" => {
                let min = bound("minItems", 0.0) as usize;
                let max = bound("maxItems", 4.0) as usize;
                let n = rng.gen_range(min..=max);
                let item = s.get("items").cloned().unwrap_or(json!({"type":"null"}));
                let unique = s.get("uniqueItems") == Some(&Value::Bool(true));
                let mut parts: Vec<String> = Vec::new();
                for _ in 0..n * 8 {
                    if parts.len() == n {
                        break;
                    }
                    let p = sample(&item, rng);
                    if !(unique && parts.contains(&p)) {
                        parts.push(p);
                    }
                }
                format!("[{}]", parts.join(","))
            }
            "string" => {
                let min = bound("minLength", 0.0) as usize;
                let max = bound("maxLength", 12.0).min(40.0) as usize;
                let n = rng.gen_range(min..=max.max(min));
                let pool = ['a', 'Z', ' ', 'é', '"', '\\', '/', '1'];
                let t: String = (0..n).map(|_| pool[rng.gen_range(0..pool.len())]).collect();
                Value::from(t).to_string()
            }
            "integer" => {
                let (lo, hi) = (
                    bound("minimum", -50.0) as i64,
                    bound("maximum", 500.0) as i64,
                );
                rng.gen_range(lo..=hi).to_string()
            }
            "number" => {
                let (lo, hi) = (bound("minimum", -50.0), bound("maximum", 500.0));
                let x = (rng.gen_range(lo..=hi) * 100.0).round() / 100.0;
                let t = Value::from(x).to_string();
                t.trim_end_matches(".0").to_string()
            }
            "boolean" => rng.gen_bool(0.5).to_string(),
            _ => "null".to_string(),
        }
    }

    #[test]
    fn sampled_documents_are_in_the_grammar_and_valid() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for schema in role_schemas() {
            let g = from_schema(&schema);
            for _ in 0..60 {
                let doc = sample(&schema, &mut rng);
                let v: Value = serde_json::from_str(&doc).expect("sample is JSON");
                assert!(validate(&schema, &v).is_ok(), "sample invalid: {doc}");
                assert!(ok(&g, &doc), "grammar refused {doc}\n{g}");
            }
        }
    }

    #[test]
    fn the_grammar_refuses_whitespace_bounds_and_lengths() {
        let [rank, extract, links, mixed, profile] =
            <[Value; 5]>::try_from(role_schemas()).expect("five");
        let g = from_schema(&rank);
        assert!(ok(&g, r#"{"ranking":[3,1,10]}"#));
        assert!(!ok(&g, r#"{"ranking": [3,1]}"#), "whitespace");
        assert!(!ok(&g, r#"{"ranking":[11]}"#), "above maximum");
        assert!(!ok(&g, r#"{"ranking":[0]}"#), "below minimum");
        assert!(!ok(&g, r#"{"ranking":[]}"#), "minItems");
        assert!(
            !ok(&g, r#"{"ranking":[1,2,3,4,5,6,7,8,9,10,1]}"#),
            "maxItems"
        );
        let g = from_schema(&extract);
        let chunk = |s: &str| {
            format!(
                r#"{{"new_chunks":[{{"category":"genre","text":"Drama","strength":{s}}}],"boosts":[],"demotes":[]}}"#
            )
        };
        for good in ["0.8", "-0.6", "1", "1.0", "-1", "0", "0.1234"] {
            assert!(ok(&g, &chunk(good)), "strength {good}");
        }
        for bad in ["1.6", "-1.2", "2", "0.12345", "1.5", ".5"] {
            assert!(!ok(&g, &chunk(bad)), "strength {bad}");
        }
        assert!(
            !ok(&g, r#"{"new_chunks":[],"boosts":["c1"],"demotes":[]}"#),
            "boosts maxItems 0"
        );
        assert!(
            !ok(
                &g,
                r#"{"new_chunks":[{"category":"plot","text":"x","strength":0.5}],"boosts":[],"demotes":[]}"#
            ),
            "enum"
        );
        assert!(
            !ok(
                &g,
                r#"{"new_chunks":[{"category":"genre","text":"","strength":0.5}],"boosts":[],"demotes":[]}"#
            ),
            "minLength"
        );
        assert!(
            !ok(&g, r#"{"new_chunks":[],"boosts":[],"demotes":[],"x":1}"#),
            "extra key"
        );
        let g = from_schema(&links);
        assert!(ok(
            &g,
            r#"{"answers":[{"links":[]},{"links":[{"index":2,"relation":"shared topic"}]}]}"#
        ));
        assert!(
            !ok(&g, r#"{"answers":[{"links":[]}]}"#),
            "minItems of answers"
        );
        let g = from_schema(&mixed);
        assert!(ok(&g, "{}"));
        assert!(ok(&g, r#"{"b":null,"c":-2}"#));
        assert!(ok(&g, r#"{"c":3.5}"#));
        assert!(!ok(&g, r#"{"c":-0.5}"#), "neither branch");
        assert!(!ok(&g, r#"{,"b":null}"#));
        assert!(!ok(&g, r#"{"a":true,"b":null,"b":null}"#), "a key twice");
        let pair = from_schema(&json!({"type":"array","maxItems":2,"items":{"type":"boolean"}}));
        assert!(ok(&pair, "[true,false]") && ok(&pair, "[]"));
        assert!(!ok(&pair, "[true,false,true]"), "maxItems 2");
        let g = from_schema(&profile);
        let long = format!(r#"{{"profile":"{}"}}"#, "a".repeat(641));
        assert!(!ok(&g, &long), "maxLength");
        assert!(ok(&g, r#"{"profile":"likes \"noir\" and é"}"#));
    }

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        let g = from_schema(&json!({"enum": ["a\"b", "c\\d", 3]}));
        assert!(ok(&g, r#""a\"b""#));
        assert!(ok(&g, r#""c\\d""#));
        assert!(ok(&g, "3"));
        assert!(!ok(&g, "4"));
    }

    #[test]
    fn the_recogniser_names_the_bad_line() {
        let e = recognise("root ::= \"a\"\nx ::= (\"b\"", "a").expect_err("unclosed group");
        assert_eq!(e.line, 2);
        assert!(recognise("x ::= \"a\"", "a").is_err(), "no root");
    }
}
