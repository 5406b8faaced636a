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
//! The same parse also gives the fewest characters that would complete the
//! answer ([`closing_cost`]): the decoder only takes a token after which the
//! answer can still be closed within the tokens it has left, so a batched
//! answer that fills its strings and arrays to their bounds still ends as a
//! complete document at its completion limit, instead of being cut off and
//! costing a repair turn (8 of 33 evolve batches in the 50-user in-process
//! run before this).
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
    /// The input ended inside the value; the number is the fewest
    /// characters that complete it (and whatever the caller has added for
    /// the structure around it).
    Eof(usize),
    Bad,
}

impl Stop {
    /// The same stop with `n` more characters to close (a `Bad` stays bad).
    fn plus(self, n: usize) -> Stop {
        match self {
            Stop::Eof(c) => Stop::Eof(c.saturating_add(n)),
            Stop::Bad => Stop::Bad,
        }
    }
}

/// Check `text` against `schema`.
pub fn fit(schema: &Value, text: &str) -> Fit {
    match parse(schema, text) {
        Ok(()) => Fit::Complete,
        Err(Stop::Eof(_)) => Fit::Open,
        Err(Stop::Bad) => Fit::Invalid,
    }
}

/// The fewest characters that, appended to `text`, make it a complete
/// document matching `schema` (no whitespace, the shortest key, value and
/// array that the schema still allows at each open level); `Some(0)` for a
/// complete document, `None` when no continuation can match.
///
/// The decoder keeps this within the tokens it has left, so an answer can
/// always be closed before its completion limit (every character is at
/// most one token): a truncated answer would fail to parse and cost a
/// repair turn with the whole prompt.
pub fn closing_cost(schema: &Value, text: &str) -> Option<usize> {
    match parse(schema, text) {
        Ok(()) => Some(0),
        Err(Stop::Eof(c)) => Some(c),
        Err(Stop::Bad) => None,
    }
}

fn parse(schema: &Value, text: &str) -> Result<(), Stop> {
    let s: Vec<char> = text.chars().collect();
    let mut p = ws(&s, 0).map_err(|e| e.plus(min_len(schema)))?;
    p = value(schema, &s, p)?;
    let mut n = 0;
    while p < s.len() {
        if !s[p].is_whitespace() {
            return Err(Stop::Bad);
        }
        n += 1;
        p += 1;
    }
    if n > MAX_WS {
        Err(Stop::Bad)
    } else {
        Ok(())
    }
}

/// Characters in `t` (keys and enum texts are compared by characters).
fn chars(t: &str) -> usize {
    t.chars().count()
}

/// The shortest complete value that `schema` accepts, in characters.
fn min_len(schema: &Value) -> usize {
    if let Some(alts) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        return alts.iter().map(min_len).min().unwrap_or(1);
    }
    if let Some(members) = schema.get("enum").and_then(Value::as_array) {
        return members
            .iter()
            .map(|m| chars(&m.to_string()))
            .min()
            .unwrap_or(1);
    }
    let ts = types(schema);
    if ts.is_empty() {
        return 1; // any value: `0`
    }
    ts.iter()
        .map(|t| match *t {
            "object" => object_min(schema),
            "array" => {
                let min = min_items(schema);
                let any = Value::Object(Default::default());
                let items = schema.get("items").unwrap_or(&any);
                if min == 0 {
                    2
                } else {
                    1 + min * (min_len(items) + 1)
                }
            }
            "string" => 2 + str_bound(schema, "minLength").unwrap_or(0),
            "integer" | "number" => number_min(schema),
            "boolean" | "null" => 4,
            _ => 1,
        })
        .min()
        .unwrap_or(1)
}

fn str_bound(schema: &Value, key: &str) -> Option<usize> {
    schema.get(key).and_then(Value::as_u64).map(|m| m as usize)
}

fn min_items(schema: &Value) -> usize {
    str_bound(schema, "minItems").unwrap_or(0)
}

/// The shortest number text within `[minimum, maximum]`.
fn number_min(schema: &Value) -> usize {
    let digits = |x: f64| format!("{}", x.ceil().max(0.0) as u64).len();
    match (
        schema.get("minimum").and_then(Value::as_f64),
        schema.get("maximum").and_then(Value::as_f64),
    ) {
        (Some(lo), _) if lo > 0.0 => digits(lo),
        (_, Some(hi)) if hi < 0.0 => 1 + digits(-hi),
        _ => 1,
    }
}

/// The shortest complete object: `{}` plus every required member.
fn object_min(schema: &Value) -> usize {
    let req = required(schema);
    if req.is_empty() {
        return 2;
    }
    let members: usize = req.iter().map(|k| member_len(schema, k)).sum();
    2 + members + req.len() - 1
}

fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `"key":` and the shortest value of the key's schema.
fn member_len(schema: &Value, key: &str) -> usize {
    let any = Value::Object(Default::default());
    let sub = schema
        .get("properties")
        .and_then(|p| p.get(key))
        .unwrap_or(&any);
    chars(key) + 3 + min_len(sub)
}

/// Skip whitespace from `p`; `Eof(0)` at the end of input (the caller adds
/// what its structure still needs).
fn ws(s: &[char], mut p: usize) -> R {
    let start = p;
    while p < s.len() && s[p].is_whitespace() {
        p += 1;
    }
    if p - start > MAX_WS {
        return Err(Stop::Bad);
    }
    if p == s.len() {
        return Err(Stop::Eof(0));
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
        // The first alternative that completes wins; else open if any is,
        // at the cost of the cheapest open one.
        let mut open: Option<usize> = None;
        for a in alts {
            match value(a, s, p) {
                Ok(e) => return Ok(e),
                Err(Stop::Eof(c)) => open = Some(open.map_or(c, |o| o.min(c))),
                Err(Stop::Bad) => {}
            }
        }
        return Err(open.map_or(Stop::Bad, Stop::Eof));
    }
    if p >= s.len() {
        return Err(Stop::Eof(min_len(schema)));
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
    let len = chars(word);
    for (i, w) in word.chars().enumerate() {
        match s.get(p + i) {
            None => return Err(Stop::Eof(len - i)),
            Some(&c) if c == w => {}
            Some(_) => return Err(Stop::Bad),
        }
    }
    Ok(p + len)
}

/// The raw string starting at `p` (a `"`): `Ok((end, content))` when closed,
/// or `Err` with the content so far on EOF (`Eof(1)` inside an escape, whose
/// second character is still to come; the closing quote is the caller's).
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
                    return Err((Stop::Eof(1), out));
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
    Err((Stop::Eof(0), out))
}

fn string(schema: &Value, s: &[char], p: usize) -> R {
    let allowed: Option<Vec<&str>> = schema
        .get("enum")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect());
    let max_len = str_bound(schema, "maxLength").unwrap_or(usize::MAX);
    let min_len = str_bound(schema, "minLength").unwrap_or(0);
    let needs_escape = |t: &str| t.contains(['"', '\\', '\n', '\t']);
    let plain = allowed
        .as_ref()
        .is_some_and(|a| !a.iter().any(|t| needs_escape(t)));
    match raw_string(s, p, plain) {
        Ok((end, content)) => {
            let n = chars(&content);
            match &allowed {
                Some(a) if !a.contains(&content.as_str()) => Err(Stop::Bad),
                _ if n > max_len || n < min_len => Err(Stop::Bad),
                _ => Ok(end),
            }
        }
        Err((Stop::Eof(pending), so_far)) => {
            let n = chars(&so_far);
            match &allowed {
                // Enum texts are plain: the rest of the shortest member
                // that starts with what was written, and the quote.
                Some(a) => a
                    .iter()
                    .filter(|x| x.starts_with(so_far.as_str()))
                    .map(|x| chars(x) - n + 1)
                    .min()
                    .map_or(Err(Stop::Bad), |c| Err(Stop::Eof(c))),
                // An escape begun at the length bound can only overflow it.
                _ if n + pending > max_len => Err(Stop::Bad),
                // An unfinished escape is one more character of content.
                _ => Err(Stop::Eof(pending.max(min_len.saturating_sub(n)) + 1)),
            }
        }
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

/// Whether the finished number text `v` meets the schema's bounds and enum.
fn number_accepted(schema: &Value, v: f64) -> bool {
    let min_ok = schema
        .get("minimum")
        .and_then(Value::as_f64)
        .is_none_or(|m| v >= m);
    let max_ok = schema
        .get("maximum")
        .and_then(Value::as_f64)
        .is_none_or(|m| v <= m);
    let enum_ok = schema
        .get("enum")
        .and_then(Value::as_array)
        .is_none_or(|a| a.iter().filter_map(Value::as_f64).any(|x| x == v));
    min_ok && max_ok && enum_ok
}

fn number(schema: &Value, ts: &[&str], s: &[char], p: usize) -> R {
    let integer = ts.contains(&"integer") && !ts.contains(&"number");
    // The input ended inside the number: the fewest characters that finish
    // it (the rest of the shortest enum member it starts; a digit after a
    // sign, point or exponent; one more digit for a value still below its
    // minimum).
    let open = || {
        let t: String = s[p..].iter().collect();
        if !number_prefix_possible(schema, &t) {
            return Err(Stop::Bad);
        }
        if let Some(a) = schema.get("enum").and_then(Value::as_array) {
            let n = chars(&t);
            return a
                .iter()
                .map(Value::to_string)
                .filter(|m| m.starts_with(t.as_str()))
                .map(|m| chars(&m) - n)
                .min()
                .map_or(Err(Stop::Bad), |c| Err(Stop::Eof(c)));
        }
        let done = t.ends_with(|c: char| c.is_ascii_digit())
            && t.parse::<f64>().is_ok_and(|v| number_accepted(schema, v));
        Err(Stop::Eof(usize::from(!done)))
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
    if number_accepted(schema, v) {
        Ok(i)
    } else {
        Err(Stop::Bad)
    }
}

fn array(schema: &Value, s: &[char], p: usize) -> R {
    let any = Value::Object(Default::default());
    let items = schema.get("items").unwrap_or(&any);
    let min = min_items(schema);
    let max = str_bound(schema, "maxItems").unwrap_or(usize::MAX);
    let unique = schema.get("uniqueItems") == Some(&Value::Bool(true));
    let item_min = min_len(items);
    // Characters that close the array once `k` items are written: the
    // missing items (each after a comma) and the bracket.
    let tail = |k: usize| min.saturating_sub(k) * (item_min + 1) + 1;
    let mut seen: Vec<String> = Vec::new();
    let start_cost = if min == 0 { 1 } else { tail(0) - 1 };
    let mut i = ws(s, p + 1).map_err(|e| e.plus(start_cost))?;
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
            Err(Stop::Eof(c)) if unique => {
                let partial: String = s[start..].iter().collect();
                let members = items.get("enum").and_then(Value::as_array);
                let free = members.map(|a| {
                    a.iter()
                        .map(Value::to_string)
                        .filter(|m| m.starts_with(partial.as_str()) && !seen.contains(m))
                        .map(|m| chars(&m) - chars(&partial))
                        .min()
                });
                return match free {
                    Some(None) => Err(Stop::Bad),
                    Some(Some(rest)) => Err(Stop::Eof(rest + tail(n + 1))),
                    None => Err(Stop::Eof(c + tail(n + 1))),
                };
            }
            Err(e) => return Err(e.plus(tail(n + 1))),
        };
        if unique {
            let text: String = s[start..i].iter().collect();
            if seen.contains(&text) {
                return Err(Stop::Bad);
            }
            seen.push(text);
        }
        n += 1;
        i = ws(s, i).map_err(|e| e.plus(tail(n)))?;
        match s[i] {
            ',' if n < max => i = ws(s, i + 1).map_err(|e| e.plus(item_min + tail(n + 1)))?,
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
    let required = required(schema);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let any = Value::Object(Default::default());
    let mut seen: Vec<String> = Vec::new();
    let done = |seen: &[String]| required.iter().all(|r| seen.iter().any(|k| k == r));
    // Characters that close the object once `seen` are written: each
    // missing required member after a comma, and the brace.
    let tail = |seen: &[String]| -> usize {
        required
            .iter()
            .filter(|r| !seen.iter().any(|k| k == *r))
            .map(|r| 1 + member_len(schema, r))
            .sum::<usize>()
            + 1
    };
    let with = |seen: &[String], key: &str| -> Vec<String> {
        let mut v = seen.to_vec();
        v.push(key.to_string());
        v
    };
    // The cheapest member that may come next (after `{` or a comma), and
    // the object's close after it; `None` when no member may come.
    // `escaping`: the key being typed ends inside an escape, so it can no
    // longer become a listed key (none holds an escaped character).
    let next_member = |seen: &[String], typed: &str, escaping: bool| -> Option<usize> {
        let known = props
            .keys()
            .filter(|k| !escaping && k.starts_with(typed) && !seen.contains(*k))
            .map(|k| member_len(schema, k) - chars(typed) + tail(&with(seen, k)));
        // A key of an open object may be anything not seen: `"":0`, or the
        // key being typed closed at once.
        let free = (!closed).then(|| 4 + tail(seen));
        known.chain(free).min()
    };
    let start_cost = if required.is_empty() {
        1
    } else {
        tail(&seen) - 1
    };
    let mut i = ws(s, p + 1).map_err(|e| e.plus(start_cost))?;
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
            Err((Stop::Eof(pending), so_far)) => {
                // `member_len` counts the opening quote, already written.
                return match next_member(&seen, &so_far, pending > 0) {
                    Some(c) => Err(Stop::Eof(c + pending - 1)),
                    None => Err(Stop::Bad),
                };
            }
            Err((stop, _)) => return Err(stop),
        };
        if seen.contains(&key) || (closed && !props.contains_key(&key)) {
            return Err(Stop::Bad);
        }
        let sub = props.get(&key).unwrap_or(&any);
        let after = tail(&with(&seen, &key));
        i = ws(s, end).map_err(|e| e.plus(1 + min_len(sub) + after))?;
        if s[i] != ':' {
            return Err(Stop::Bad);
        }
        i = ws(s, i + 1).map_err(|e| e.plus(min_len(sub) + after))?;
        i = value(sub, s, i).map_err(|e| e.plus(after))?;
        seen.push(key);
        i = ws(s, i).map_err(|e| e.plus(tail(&seen)))?;
        match s[i] {
            ',' => {
                if closed && seen.len() == props.len() {
                    return Err(Stop::Bad);
                }
                let next = next_member(&seen, "", false).ok_or(Stop::Bad)?;
                i = ws(s, i + 1).map_err(|e| e.plus(next))?;
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

    /// Role-shaped schemas: a batch of evolve answers (strings bounded by
    /// length, arrays by count), a link batch (unique enum indices), a rank
    /// answer, and an open object with optional and `anyOf` members.
    fn role_schemas() -> Vec<Value> {
        let evolve = json!({"type": "object", "required": ["keywords", "tags", "context"],
            "additionalProperties": false,
            "properties": {
                "keywords": {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1, "maxLength": 16}},
                "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "minLength": 1, "maxLength": 16}},
                "context": {"type": "string", "minLength": 1, "maxLength": 80}}});
        let link = json!({"type": "object", "required": ["links"], "additionalProperties": false,
            "properties": {"links": {"type": "array", "maxItems": 3, "uniqueItems": true,
                "items": {"type": "integer", "enum": [1, 2, 3]}},
                "relation": {"type": "string", "enum": ["similar", "complement"]}}});
        vec![
            json!({"type": "object", "required": ["answers"], "additionalProperties": false,
                "properties": {"answers": {"type": "array", "minItems": 3, "maxItems": 3, "items": evolve}}}),
            json!({"type": "object", "required": ["answers"], "additionalProperties": false,
                "properties": {"answers": {"type": "array", "minItems": 2, "maxItems": 2, "items": link}}}),
            rank(),
            json!({"type": "object", "required": ["op", "strength"], "properties": {
                "op": {"type": "string", "enum": ["boost", "demote"]},
                "strength": {"type": "number", "minimum": -1, "maximum": 1},
                "why": {"anyOf": [{"type": "string", "minLength": 3}, {"type": "null"}]},
                "ok": {"type": "boolean"}}}),
        ]
    }

    /// A decoder that always prefers the next character of a seeded
    /// shuffled alphabet, the way a small model fills strings and arrays to
    /// their bounds, under the rule the GGUF backend applies to tokens:
    /// take a character only when the answer can still be closed within
    /// the characters left. Returns the document, or the prefix it was
    /// stuck at.
    fn decode_within(schema: &Value, budget: usize, seed: u64) -> Result<String, String> {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let mut alphabet: Vec<char> = "{}[]\",:-.0123456789abcdefghijklmnopqrstuvwxyz\\ "
            .chars()
            .collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut text = String::new();
        while fit(schema, &text) != Fit::Complete {
            alphabet.shuffle(&mut rng);
            let left = budget.saturating_sub(chars(&text) + 1);
            let next = alphabet.iter().find(|&&c| {
                let t = format!("{text}{c}");
                closing_cost(schema, &t).is_some_and(|cost| cost <= left)
            });
            match next {
                Some(c) => text.push(*c),
                None => return Err(text),
            }
        }
        Ok(text)
    }

    #[test]
    fn the_closing_cost_is_the_shortest_completion_and_can_always_be_met() {
        for (n, schema) in role_schemas().iter().enumerate() {
            let shortest = closing_cost(schema, "").unwrap_or(usize::MAX);
            assert_eq!(shortest, min_len(schema), "schema {n}");
            for extra in [0, 1, 5, 17, 60, 200] {
                for seed in 0..4 {
                    let budget = shortest + extra;
                    let doc = decode_within(schema, budget, seed).unwrap_or_else(|stuck| {
                        panic!(
                            "schema {n}, budget {budget}, seed {seed}: no way on after `{stuck}`"
                        )
                    });
                    let len = chars(&doc);
                    assert!(len <= budget, "schema {n}: `{doc}` is {len} > {budget}");
                    assert_eq!(closing_cost(schema, &doc), Some(0));
                    // Every prefix's cost is at most what this document
                    // still wrote after it: the cost is a minimum.
                    let cs: Vec<char> = doc.chars().collect();
                    for end in 0..cs.len() {
                        let prefix: String = cs[..end].iter().collect();
                        let cost = closing_cost(schema, &prefix);
                        assert!(
                            cost.is_some_and(|c| c <= cs.len() - end),
                            "schema {n}: `{prefix}` costs {cost:?}, `{doc}` needed {}",
                            cs.len() - end
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn closing_costs_of_known_prefixes() {
        let s = &role_schemas()[3];
        // `{"op":"boost","strength":0}` is the shortest document.
        assert_eq!(closing_cost(s, ""), Some(27));
        assert_eq!(closing_cost(s, "{"), Some(26));
        assert_eq!(closing_cost(s, r#"{"op":"de"#), Some(4 + 1 + 1 + 13));
        assert_eq!(closing_cost(s, r#"{"op":"boost","strength":-"#), Some(2));
        assert_eq!(closing_cost(s, r#"{"op":"boost","strength":0.5"#), Some(1));
        assert_eq!(
            closing_cost(s, r#"{"op":"boost","strength":0.5,"why":"a"#),
            Some(4)
        );
        assert_eq!(
            closing_cost(s, r#"{"op":"boost","strength":0.5,"why":n"#),
            Some(4)
        );
        // An open object takes any new key: `"":0}`.
        assert_eq!(closing_cost(s, r#"{"op":"boost","strength":0.5,"#), Some(5));
        assert_eq!(closing_cost(s, r#"{"op":"boost","strength":0.5}"#), Some(0));
        assert_eq!(closing_cost(s, r#"{"op":"bx"#), None);
        let r = rank();
        assert_eq!(closing_cost(&r, r#"{"ranking":["#), Some(3));
        assert_eq!(closing_cost(&r, r#"{"ranking":[3,"#), Some(3));
        assert_eq!(closing_cost(&r, r#"{"ranking":[3,1"#), Some(2));
    }
}
