//! Schema-constrained decoding: at each step the decoder takes the most
//! likely token whose text keeps the answer a valid *prefix* of a JSON
//! document that matches the role's schema (greedy decoding under the
//! constraint; tokens are tried best first).
//!
//! The check re-parses the whole answer so far with a recursive-descent
//! parser in which running out of input means "so far so good" ([`Fit::Open`]).
//! Answers are at most a few hundred tokens, so the re-parse costs
//! microseconds against tens of milliseconds per forward pass, and there is
//! no incremental parser state to get wrong.
//!
//! Supported schema keywords (the ones the roles use): `type` (`object`,
//! `array`, `string`, `integer`, `number`, `boolean`, `null`, or a list),
//! `properties`, `required`, `additionalProperties: false`, `items`,
//! `minItems`, `maxItems`, `uniqueItems` (by the items' text), `enum`
//! (strings, numbers), `minLength`/`maxLength` (characters, as decoded),
//! `anyOf`/`oneOf`,
//! `minimum`, `maximum` (also checked on an unfinished number: no
//! continuation may be out of range or outside the enum; at most 16 integer
//! and 6 decimal digits, and no exponent on a bounded number). Strings take
//! only the escapes `\"`, `\\`, `\n` and `\t`, and keys and enum values
//! none (a backslash there could only stall the decoder). Anything else is
//! accepted as any JSON value.
//!
//! Whitespace outside strings is refused ([`MAX_WS`] is 0), as in the compact
//! grammar `evomem_llm::gbnf` writes for llama.cpp: SmolLM2 spent its budget
//! on `]\n\n,` when two blanks were allowed, and batched link and evolve
//! answers then ran out of tokens before they closed.

use serde_json::Value;

/// Longest run of whitespace allowed between tokens.
pub const MAX_WS: usize = 0;

/// How a text fits the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// No continuation can match.
    Invalid,
    /// A valid prefix: more input is needed (or may follow).
    Open,
    /// A complete matching document (only trailing whitespace may follow).
    Complete,
}

type R = Result<usize, Stop>;

/// Why parsing stopped before a value was complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Eof,
    Bad,
}

/// Check `text` against `schema`.
pub fn fit(schema: &Value, text: &str) -> Fit {
    let s: Vec<char> = text.chars().collect();
    let mut p = match ws(&s, 0) {
        Ok(p) => p,
        Err(Stop::Eof) => return Fit::Open,
        Err(Stop::Bad) => return Fit::Invalid,
    };
    match value(schema, &s, p) {
        Ok(end) => {
            p = end;
            let mut n = 0;
            while p < s.len() {
                if !s[p].is_whitespace() {
                    return Fit::Invalid;
                }
                n += 1;
                p += 1;
            }
            if n > MAX_WS {
                Fit::Invalid
            } else {
                Fit::Complete
            }
        }
        Err(Stop::Eof) => Fit::Open,
        Err(Stop::Bad) => Fit::Invalid,
    }
}

fn ws(s: &[char], mut p: usize) -> R {
    let start = p;
    while p < s.len() && s[p].is_whitespace() {
        p += 1;
    }
    if p - start > MAX_WS {
        return Err(Stop::Bad);
    }
    if p == s.len() {
        return Err(Stop::Eof);
    }
    Ok(p)
}

fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Parse one value matching `schema` from `p`; `Ok(end)` when complete.
fn value(schema: &Value, s: &[char], p: usize) -> R {
    if let Some(alts) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        // The first alternative that completes wins; else open if any is.
        let mut open = false;
        for a in alts {
            match value(a, s, p) {
                Ok(e) => return Ok(e),
                Err(Stop::Eof) => open = true,
                Err(Stop::Bad) => {}
            }
        }
        return Err(if open { Stop::Eof } else { Stop::Bad });
    }
    if p >= s.len() {
        return Err(Stop::Eof);
    }
    let ts = types(schema);
    let allows =
        |t: &str| ts.is_empty() || ts.contains(&t) || (t == "number" && ts.contains(&"integer"));
    match s[p] {
        '{' if allows("object") => object(schema, s, p),
        '[' if allows("array") => array(schema, s, p),
        '"' if allows("string") => string(schema, s, p),
        't' if allows("boolean") => literal(s, p, "true"),
        'f' if allows("boolean") => literal(s, p, "false"),
        'n' if allows("null") => literal(s, p, "null"),
        c if (c == '-' || c.is_ascii_digit()) && allows("number") => number(schema, &ts, s, p),
        _ => Err(Stop::Bad),
    }
}

fn literal(s: &[char], p: usize, word: &str) -> R {
    for (i, w) in word.chars().enumerate() {
        match s.get(p + i) {
            None => return Err(Stop::Eof),
            Some(&c) if c == w => {}
            Some(_) => return Err(Stop::Bad),
        }
    }
    Ok(p + word.chars().count())
}

/// The raw string starting at `p` (a `"`): `Ok((end, content))` when closed,
/// or `Err` with the content so far on EOF.
/// `plain`: no escape at all (a key or enum value that needs none; a
/// backslash there could only stall, since no allowed text continues it).
fn raw_string(s: &[char], p: usize, plain: bool) -> Result<(usize, String), (Stop, String)> {
    let mut out = String::new();
    let mut i = p + 1;
    while i < s.len() {
        match s[i] {
            '"' => return Ok((i + 1, out)),
            '\\' if plain => return Err((Stop::Bad, out)),
            '\\' => {
                let Some(&e) = s.get(i + 1) else {
                    return Err((Stop::Eof, out));
                };
                // Only the escapes a role's text needs. `\u` is refused: a
                // half-written `\u00` inside an enum value or a key passed
                // as a valid prefix but led nowhere (SmolLM2 wrote
                // `"titl\u002` for "title theme" and the decoder stalled).
                match e {
                    '"' | '\\' => out.push(e),
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    _ => return Err((Stop::Bad, out)),
                }
                i += 2;
            }
            c if (c as u32) < 0x20 => return Err((Stop::Bad, out)),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err((Stop::Eof, out))
}

fn string(schema: &Value, s: &[char], p: usize) -> R {
    let allowed: Option<Vec<&str>> = schema
        .get("enum")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect());
    let max_len = schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .map_or(usize::MAX, |m| m as usize);
    let min_len = schema
        .get("minLength")
        .and_then(Value::as_u64)
        .map_or(0, |m| m as usize);
    let needs_escape = |t: &str| t.contains(['"', '\\', '\n', '\t']);
    let plain = allowed
        .as_ref()
        .is_some_and(|a| !a.iter().any(|t| needs_escape(t)));
    match raw_string(s, p, plain) {
        Ok((end, content)) => {
            let n = content.chars().count();
            match &allowed {
                Some(a) if !a.contains(&content.as_str()) => Err(Stop::Bad),
                _ if n > max_len || n < min_len => Err(Stop::Bad),
                _ => Ok(end),
            }
        }
        Err((Stop::Eof, so_far)) => match &allowed {
            Some(a) if !a.iter().any(|x| x.starts_with(so_far.as_str())) => Err(Stop::Bad),
            _ if so_far.chars().count() > max_len => Err(Stop::Bad),
            _ => Err(Stop::Eof),
        },
        Err((stop, _)) => Err(stop),
    }
}

/// Most digits before and after a number's decimal point.
const MAX_INT_DIGITS: usize = 16;
const MAX_FRAC_DIGITS: usize = 6;

/// Whether the unfinished number `t` (the whole input from its start) can
/// still end as a value the schema accepts: an enum member's text must
/// start with it, and the values its continuations can reach must meet
/// `[minimum, maximum]`. A bounded or enumerated number takes no exponent.
/// Without this check SmolLM2 wrote `"strength":1.65722572256999…` under
/// `maximum: 1` and `"sources":[1111…` under an enum of times, to the
/// token limit.
fn number_prefix_possible(schema: &Value, t: &str) -> bool {
    if let Some(a) = schema.get("enum").and_then(Value::as_array) {
        return a.iter().any(|x| x.to_string().starts_with(t));
    }
    let min = schema.get("minimum").and_then(Value::as_f64);
    let max = schema.get("maximum").and_then(Value::as_f64);
    if min.is_none() && max.is_none() {
        return true;
    }
    if t.contains(['e', 'E']) {
        return false;
    }
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t),
    };
    if body.is_empty() {
        return min.is_none_or(|m| m < 0.0);
    }
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    let Ok(lo_mag) = format!("{int}.{}0", frac.unwrap_or("")).parse::<f64>() else {
        return false;
    };
    let hi_mag = match frac {
        Some(f) => lo_mag + 10f64.powi(-(f.len() as i32)),
        None if int == "0" => 1.0,
        None => f64::INFINITY,
    };
    // Continuations reach [lo, hi) in magnitude, on the number's side of 0.
    let (lo, hi) = if neg {
        (-hi_mag, -lo_mag)
    } else {
        (lo_mag, hi_mag)
    };
    let above_min = min.is_none_or(|m| if neg { hi >= m } else { hi > m });
    let below_max = max.is_none_or(|m| lo <= m);
    above_min && below_max
}

fn number(schema: &Value, ts: &[&str], s: &[char], p: usize) -> R {
    let integer = ts.contains(&"integer") && !ts.contains(&"number");
    let open = || {
        let t: String = s[p..].iter().collect();
        if number_prefix_possible(schema, &t) {
            Err(Stop::Eof)
        } else {
            Err(Stop::Bad)
        }
    };
    let mut i = p;
    if s[i] == '-' {
        i += 1;
    }
    let digits = |i: &mut usize| -> usize {
        let st = *i;
        while *i < s.len() && s[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - st
    };
    let int_start = i;
    let n = digits(&mut i);
    if n == 0 {
        return if i == s.len() { open() } else { Err(Stop::Bad) };
    }
    if (n > 1 && s[int_start] == '0') || n > MAX_INT_DIGITS {
        return Err(Stop::Bad);
    }
    if !integer && i < s.len() && s[i] == '.' {
        i += 1;
        let f = digits(&mut i);
        if f > MAX_FRAC_DIGITS {
            return Err(Stop::Bad);
        }
        if f == 0 {
            return if i == s.len() { open() } else { Err(Stop::Bad) };
        }
    }
    if !integer && i < s.len() && (s[i] == 'e' || s[i] == 'E') {
        i += 1;
        if i < s.len() && (s[i] == '+' || s[i] == '-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return if i == s.len() { open() } else { Err(Stop::Bad) };
        }
    }
    if i == s.len() {
        // The number may go on; it is complete only once something follows.
        return open();
    }
    let text: String = s[p..i].iter().collect();
    let v: f64 = text.parse().map_err(|_| Stop::Bad)?;
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if v < min {
            return Err(Stop::Bad);
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if v > max {
            return Err(Stop::Bad);
        }
    }
    if let Some(a) = schema.get("enum").and_then(Value::as_array) {
        if !a.iter().filter_map(Value::as_f64).any(|x| x == v) {
            return Err(Stop::Bad);
        }
    }
    Ok(i)
}

fn array(schema: &Value, s: &[char], p: usize) -> R {
    let any = Value::Object(Default::default());
    let items = schema.get("items").unwrap_or(&any);
    let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = schema
        .get("maxItems")
        .and_then(Value::as_u64)
        .map_or(usize::MAX, |m| m as usize);
    let unique = schema.get("uniqueItems") == Some(&Value::Bool(true));
    let mut seen: Vec<String> = Vec::new();
    let mut i = ws(s, p + 1)?;
    let mut n = 0;
    if s[i] == ']' {
        return if min == 0 { Ok(i + 1) } else { Err(Stop::Bad) };
    }
    loop {
        if n == max {
            return Err(Stop::Bad);
        }
        let start = i;
        i = match value(items, s, i) {
            Ok(end) => end,
            // An unfinished item of a unique enum array must still be able
            // to become a member not listed yet: SmolLM2 wrote
            // `"sources":[20456,20456` and the decoder found no way on.
            Err(Stop::Eof) if unique => {
                let partial: String = s[start..].iter().collect();
                let members = items.get("enum").and_then(Value::as_array);
                let stuck = members.is_some_and(|a| {
                    !a.iter()
                        .map(Value::to_string)
                        .any(|m| m.starts_with(partial.as_str()) && !seen.contains(&m))
                });
                return Err(if stuck { Stop::Bad } else { Stop::Eof });
            }
            Err(e) => return Err(e),
        };
        if unique {
            let text: String = s[start..i].iter().collect();
            if seen.contains(&text) {
                return Err(Stop::Bad);
            }
            seen.push(text);
        }
        n += 1;
        i = ws(s, i)?;
        match s[i] {
            ',' if n < max => i = ws(s, i + 1)?,
            ']' if n >= min => return Ok(i + 1),
            _ => return Err(Stop::Bad),
        }
    }
}

fn object(schema: &Value, s: &[char], p: usize) -> R {
    let empty = serde_json::Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let any = Value::Object(Default::default());
    let mut seen: Vec<String> = Vec::new();
    let mut i = ws(s, p + 1)?;
    let done = |seen: &[String]| required.iter().all(|r| seen.iter().any(|k| k == r));
    if s[i] == '}' {
        return if done(&seen) {
            Ok(i + 1)
        } else {
            Err(Stop::Bad)
        };
    }
    loop {
        if s[i] != '"' {
            return Err(Stop::Bad);
        }
        let plain = closed && !props.keys().any(|k| k.contains(['"', '\\', '\n', '\t']));
        let (end, key) = match raw_string(s, i, plain) {
            Ok(x) => x,
            Err((Stop::Eof, so_far)) => {
                let possible = !closed
                    || props
                        .keys()
                        .any(|k| k.starts_with(so_far.as_str()) && !seen.contains(k));
                return Err(if possible { Stop::Eof } else { Stop::Bad });
            }
            Err((stop, _)) => return Err(stop),
        };
        if seen.contains(&key) || (closed && !props.contains_key(&key)) {
            return Err(Stop::Bad);
        }
        i = ws(s, end)?;
        if s[i] != ':' {
            return Err(Stop::Bad);
        }
        i = ws(s, i + 1)?;
        let sub = props.get(&key).unwrap_or(&any);
        i = value(sub, s, i)?;
        seen.push(key);
        i = ws(s, i)?;
        match s[i] {
            ',' => {
                if closed && seen.len() == props.len() {
                    return Err(Stop::Bad);
                }
                i = ws(s, i + 1)?;
            }
            '}' if done(&seen) => return Ok(i + 1),
            _ => return Err(Stop::Bad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rank() -> Value {
        json!({"type": "object", "properties": {"ranking": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "maxItems": 3}}, "required": ["ranking"], "additionalProperties": false})
    }

    #[test]
    fn prefixes_of_a_matching_document_are_open_and_the_whole_is_complete() {
        let doc = r#"{"ranking":[3,1,2]}"#;
        for end in 0..doc.len() {
            assert_eq!(
                fit(&rank(), &doc[..end]),
                Fit::Open,
                "prefix `{}`",
                &doc[..end]
            );
        }
        assert_eq!(fit(&rank(), doc), Fit::Complete);
        for blank in [" ", "\n"] {
            assert_eq!(
                fit(&rank(), &format!("{doc}{blank}")),
                Fit::Invalid,
                "whitespace after the document"
            );
            assert_eq!(
                fit(&rank(), &format!("{{\"ranking\":[3,{blank}")),
                Fit::Invalid,
                "whitespace between items"
            );
        }
    }

    /// An unfinished number is refused as soon as no continuation can meet
    /// the bounds or an enum member; unicode escapes are refused, so a key
    /// or enum value cannot stall half-way through one.
    #[test]
    fn unfinished_numbers_meet_bounds_and_enums_and_escapes_are_plain() {
        let s = json!({"type": "object", "additionalProperties": false,
            "required": ["strength", "sources", "category"],
            "properties": {
                "strength": {"type": "number", "minimum": -1, "maximum": 1},
                "sources": {"type": "array", "uniqueItems": true, "items": {"type": "integer", "enum": [20445, 20446]}},
                "category": {"type": "string", "enum": ["title theme", "genre"]}}});
        let f = |t: &str| fit(&s, t);
        for open in [
            r#"{"strength":1"#,
            r#"{"strength":1."#,
            r#"{"strength":1.0"#,
            r#"{"strength":0.65"#,
            r#"{"strength":-"#,
            r#"{"strength":-0.9"#,
            r#"{"strength":-1"#,
            r#"{"sources":[2044"#,
            r#"{"sources":[20446"#,
            r#"{"sources":[20446,2044"#,
            r#"{"category":"titl"#,
        ] {
            assert_eq!(f(open), Fit::Open, "{open}");
        }
        for bad in [
            r#"{"strength":1.6"#,
            r#"{"strength":2"#,
            r#"{"strength":-1.2"#,
            r#"{"strength":1.6572257"#,
            r#"{"strength":0.1234567"#,
            r#"{"strength":1e"#,
            r#"{"sources":[1111"#,
            r#"{"sources":[204451"#,
            r#"{"sources":[2044."#,
            r#"{"category":"titl\u"#,
            r#"{"sourc\u"#,
            r#"{"sources":[20446,20446"#,
            r#"{"source\"#,
            r#"{"category":"title\"#,
        ] {
            assert_eq!(f(bad), Fit::Invalid, "{bad}");
        }
        assert_eq!(
            f(r#"{"strength":-0.75,"sources":[20446],"category":"genre"}"#),
            Fit::Complete
        );
    }

    #[test]
    fn wrong_keys_types_bounds_and_syntax_are_invalid() {
        for bad in [
            r#"{"rank"#.to_string() + "x",
            r#"{"ranking":["#.to_string() + "\"",
            r#"{"ranking":[0"#.to_string() + "]",
            r#"{"ranking":[]"#.to_string(),
            r#"{"ranking":[1] ,"#.to_string(),
            r#"{}"#.to_string(),
            r#"{"ranking":[1]}}"#.to_string(),
            r#"{ "#.to_string(),
            r#"{"ranking":[1.5"#.to_string(),
            r#"{"ranking":[1,2,3,"#.to_string(),
            "x".to_string(),
        ] {
            assert_eq!(fit(&rank(), &bad), Fit::Invalid, "`{bad}`");
        }
    }

    #[test]
    fn enums_any_of_and_free_values() {
        let s = json!({"type": "object", "properties": {
            "op": {"type": "string", "enum": ["boost", "demote"]},
            "why": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "extra": {}
        }, "required": ["op"]});
        assert_eq!(fit(&s, r#"{"op":"bo"#), Fit::Open);
        assert_eq!(fit(&s, r#"{"op":"bx"#), Fit::Invalid);
        assert_eq!(fit(&s, r#"{"op":"boost","why":nu"#), Fit::Open);
        assert_eq!(fit(&s, r#"{"op":"boost","why":3"#), Fit::Invalid);
        assert_eq!(
            fit(&s, r#"{"op":"demote","extra":{"a":[1,"x",true]}}"#),
            Fit::Complete
        );
        assert_eq!(
            fit(&s, r#"{"op":"boost","other":1}"#),
            Fit::Complete,
            "open object"
        );
    }

    #[test]
    fn string_lengths_bound_the_answer() {
        let s = json!({"type": "object", "properties": {
            "text": {"type": "string", "minLength": 2, "maxLength": 5}
        }, "required": ["text"]});
        assert_eq!(fit(&s, r#"{"text":"abcde"}"#), Fit::Complete);
        assert_eq!(fit(&s, r#"{"text":"abcd"#), Fit::Open);
        assert_eq!(
            fit(&s, r#"{"text":"abcdef"#),
            Fit::Invalid,
            "too long while open"
        );
        assert_eq!(fit(&s, r#"{"text":"abcdef"}"#), Fit::Invalid);
        assert_eq!(fit(&s, r#"{"text":"a"}"#), Fit::Invalid, "too short");
        assert_eq!(
            fit(&s, r#"{"text":"a\"\\cd"}"#),
            Fit::Complete,
            "an escape is one character"
        );
        assert_eq!(
            fit(&s, r#"{"text":"a\u00e9"#),
            Fit::Invalid,
            "no unicode escapes"
        );
    }
}
