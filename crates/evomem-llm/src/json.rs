//! Tolerant JSON extraction and a small JSON-schema checker.
//!
//! Models wrap JSON in code fences, prefix it with "Sure, here is..." or add
//! an explanation after it. [`extract_json`] finds the first complete JSON
//! object or array in an answer and ignores the rest. [`validate`] checks an
//! answer against the subset of JSON Schema that role schemas use (`type`,
//! `properties`, `required`, `additionalProperties: false`, `items`,
//! `minItems`, `maxItems`, `uniqueItems`, `minLength`, `maxLength`, `enum`,
//! `minimum`, `maximum`), naming the JSON
//! path of the first violation so that a repair turn can tell the model what
//! to fix. [`minimal_instance`] builds the smallest value a schema accepts
//! (the fixture server's `auto` mode answers with it). [`drop_repeats`]
//! removes repeated items from `uniqueItems` arrays (a counted repair).

use serde_json::{Map, Value};

/// Extract the first complete JSON object or array from `text`.
///
/// Order of attempts: the whole text; the body of the first fenced code
/// block (```` ```json ````); then every `{` / `[` position from left to
/// right, parsing one value there and ignoring trailing text.
pub fn extract_json(text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        if v.is_object() || v.is_array() {
            return Ok(v);
        }
    }
    if let Some(body) = fenced_block(trimmed) {
        if let Ok(v) = first_value(body) {
            return Ok(v);
        }
    }
    first_value(trimmed)
}

fn fenced_block(text: &str) -> Option<&str> {
    let start = text.find("```")?;
    let after = &text[start + 3..];
    // Skip the info string (e.g. `json`) up to the end of the line.
    let body_start = after.find('\n').map(|i| i + 1).unwrap_or(0);
    let body = &after[body_start..];
    let end = body.find("```").unwrap_or(body.len());
    Some(&body[..end])
}

fn first_value(text: &str) -> Result<Value, String> {
    let mut last_err = String::from("no JSON object or array found in the answer");
    for (i, c) in text.char_indices() {
        if c != '{' && c != '[' {
            continue;
        }
        let mut stream = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => return Ok(v),
            Some(Err(e)) => last_err = format!("invalid JSON: {e}"),
            None => {}
        }
    }
    Err(last_err)
}

/// Check `value` against `schema` (the subset described in the module docs).
/// The error names the JSON path, e.g. `$.ranking[2]: expected integer`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "$")
}

/// Drop the later copies of repeated items from every array of `value`
/// whose schema says `uniqueItems` (nested arrays included), keeping each
/// first occurrence in place; returns how many were dropped. A repeat adds
/// nothing to a set-like answer, and small models repeat an item to fill
/// an array (SmolLM2 cited one signal three times as a chunk's sources);
/// the hub counts a drop as a parser repair instead of failing the answer.
pub fn drop_repeats(schema: &Value, value: &mut Value) -> usize {
    let Some(s) = schema.as_object() else {
        return 0;
    };
    let mut dropped = 0;
    match value {
        Value::Array(items) => {
            if s.get("uniqueItems") == Some(&Value::Bool(true)) {
                let before = items.len();
                let mut kept: Vec<Value> = Vec::with_capacity(before);
                for it in items.drain(..) {
                    if !kept.contains(&it) {
                        kept.push(it);
                    }
                }
                dropped += before - kept.len();
                *items = kept;
            }
            if let Some(sub) = s.get("items") {
                for it in items.iter_mut() {
                    dropped += drop_repeats(sub, it);
                }
            }
        }
        Value::Object(obj) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, v) in obj.iter_mut() {
                    if let Some(sub) = props.get(k) {
                        dropped += drop_repeats(sub, v);
                    }
                }
            }
        }
        _ => {}
    }
    dropped
}

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn check(schema: &Value, v: &Value, path: &str) -> Result<(), String> {
    let Some(s) = schema.as_object() else {
        return Ok(());
    };
    match s.get("type") {
        Some(Value::String(ty)) if !type_ok(ty, v) => {
            return Err(format!("{path}: expected {ty}, got {}", kind(v)));
        }
        Some(Value::Array(tys))
            if !tys
                .iter()
                .any(|t| t.as_str().is_some_and(|t| type_ok(t, v))) =>
        {
            return Err(format!(
                "{path}: expected one of {}, got {}",
                Value::Array(tys.clone()),
                kind(v)
            ));
        }
        _ => {}
    }
    if let Some(Value::Array(allowed)) = s.get("enum") {
        if !allowed.contains(v) {
            return Err(format!(
                "{path}: {v} is not one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    if let Some(x) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
            if x < min {
                return Err(format!("{path}: {x} is below the minimum {min}"));
            }
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
            if x > max {
                return Err(format!("{path}: {x} is above the maximum {max}"));
            }
        }
    }
    if let Value::String(t) = v {
        let n = t.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64) {
            if n < min {
                return Err(format!("{path}: {n} characters, at least {min} required"));
            }
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
            if n > max {
                return Err(format!("{path}: {n} characters, at most {max} allowed"));
            }
        }
    }
    if let Value::Object(obj) = v {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(req)) = s.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{path}: missing required field `{r}`"));
                }
            }
        }
        let closed = s.get("additionalProperties") == Some(&Value::Bool(false));
        // Sort keys so that the first reported error does not depend on map order.
        let mut keys: Vec<&String> = obj.keys().collect();
        keys.sort();
        for k in keys {
            let child = &obj[k.as_str()];
            match props.and_then(|p| p.get(k.as_str())) {
                Some(sub) => check(sub, child, &format!("{path}.{k}"))?,
                None if closed => return Err(format!("{path}: unexpected field `{k}`")),
                None => {}
            }
        }
    }
    if let Value::Array(items) = v {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
            if (items.len() as u64) < min {
                return Err(format!(
                    "{path}: {} items, at least {min} required",
                    items.len()
                ));
            }
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64) {
            if (items.len() as u64) > max {
                return Err(format!(
                    "{path}: {} items, at most {max} allowed",
                    items.len()
                ));
            }
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true)) {
            for (i, it) in items.iter().enumerate() {
                if items[..i].contains(it) {
                    return Err(format!("{path}[{i}]: duplicates an earlier item"));
                }
            }
        }
        if let Some(sub) = s.get("items") {
            for (i, it) in items.iter().enumerate() {
                check(sub, it, &format!("{path}[{i}]"))?;
            }
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The smallest value `schema` accepts: required fields only, `minItems`
/// items, the first `enum` value, `minimum` (or 0) for numbers, `""`, `false`.
pub fn minimal_instance(schema: &Value) -> Value {
    let Some(s) = schema.as_object() else {
        return Value::Null;
    };
    if let Some(Value::Array(allowed)) = s.get("enum") {
        if let Some(first) = allowed.first() {
            return first.clone();
        }
    }
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.first().and_then(Value::as_str).unwrap_or("null"),
        _ if s.contains_key("properties") => "object",
        _ => "null",
    };
    match ty {
        "object" => {
            let mut out = Map::new();
            let props = s.get("properties").and_then(Value::as_object);
            if let Some(Value::Array(req)) = s.get("required") {
                for r in req.iter().filter_map(Value::as_str) {
                    let sub = props.and_then(|p| p.get(r)).cloned().unwrap_or(Value::Null);
                    out.insert(r.to_string(), minimal_instance(&sub));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let n = s.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = s.get("items").cloned().unwrap_or(Value::Null);
            Value::Array((0..n).map(|_| minimal_instance(&item)).collect())
        }
        "string" => Value::String(
            "x".repeat(s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize),
        ),
        "integer" => {
            let min = s.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            Value::from(min.ceil() as i64)
        }
        "number" => Value::from(s.get("minimum").and_then(Value::as_f64).unwrap_or(0.0)),
        "boolean" => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Canonical JSON text: object keys sorted at every depth, no whitespace.
/// Used for cache keys, independent of the map type serde_json is built with.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                write_canonical(&m[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn extracts_from_fences_and_chatter() {
        assert_eq!(extract_json("{\"a\":1}").unwrap(), json!({"a":1}));
        assert_eq!(
            extract_json("Sure!\n```json\n{\"a\": [1,2]}\n```\nHope it helps").unwrap(),
            json!({"a":[1,2]})
        );
        assert_eq!(
            extract_json("Here: {\"ranking\": [3, 1, 2]} -- done {x}").unwrap(),
            json!({"ranking":[3,1,2]})
        );
        assert_eq!(
            extract_json("noise {bad} then [1, 2]").unwrap(),
            json!([1, 2])
        );
        assert!(extract_json("no json here").is_err());
        assert!(extract_json("{\"ranking\": [3, 1,").is_err());
    }

    #[test]
    fn validates_with_paths() {
        let schema = json!({
            "type": "object",
            "properties": {"ranking": {"type": "array", "items": {"type": "integer", "minimum": 1}}},
            "required": ["ranking"],
            "additionalProperties": false
        });
        assert!(validate(&schema, &json!({"ranking": [1, 2]})).is_ok());
        assert_eq!(
            validate(&schema, &json!({"ranking": [1, "x"]})).unwrap_err(),
            "$.ranking[1]: expected integer, got string"
        );
        assert_eq!(
            validate(&schema, &json!({})).unwrap_err(),
            "$: missing required field `ranking`"
        );
        assert!(validate(&schema, &json!({"ranking": [0]}))
            .unwrap_err()
            .contains("minimum"));
        assert!(validate(&schema, &json!({"ranking": [], "x": 1}))
            .unwrap_err()
            .contains("unexpected field"));
    }

    #[test]
    fn minimal_instance_is_valid() {
        let schema = json!({
            "type": "object",
            "properties": {
                "keywords": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "kind": {"type": "string", "enum": ["like", "dislike"]},
                "strength": {"type": "number", "minimum": -1.0},
                "n": {"type": "integer", "minimum": 1},
                "ok": {"type": "boolean"},
                "opt": {"type": "string"}
            },
            "required": ["keywords", "kind", "strength", "n", "ok"]
        });
        let v = minimal_instance(&schema);
        assert_eq!(
            v,
            json!({"keywords": [""], "kind": "like", "strength": -1.0, "n": 1, "ok": false})
        );
        validate(&schema, &v).unwrap();
    }

    #[test]
    fn string_lengths_and_unique_items() {
        let schema = json!({"type": "object", "properties": {
            "t": {"type": "string", "minLength": 2, "maxLength": 3},
            "ids": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}
        }, "required": ["t"]});
        validate(&schema, &json!({"t": "abc", "ids": ["a", "b"]})).unwrap();
        let long = validate(&schema, &json!({"t": "abcd"})).unwrap_err();
        assert!(long.contains("$.t: 4 characters, at most 3"), "{long}");
        assert!(validate(&schema, &json!({"t": "a"})).is_err());
        let rep = validate(&schema, &json!({"t": "ab", "ids": ["a", "a"]})).unwrap_err();
        assert!(rep.starts_with("$.ids[1]: duplicates"), "{rep}");
        let min = minimal_instance(&schema);
        validate(&schema, &min).unwrap();
    }

    #[test]
    fn drop_repeats_keeps_first_occurrences_in_unique_arrays_only() {
        let schema = json!({"type": "object", "properties": {
            "chunks": {"type": "array", "items": {"type": "object", "properties": {
                "sources": {"type": "array", "uniqueItems": true, "items": {"type": "integer"}}}}},
            "free": {"type": "array", "items": {"type": "integer"}}}});
        let mut v = json!({"chunks": [{"sources": [3, 3, 1, 3]}, {"sources": [2]}],
                           "free": [5, 5]});
        assert_eq!(drop_repeats(&schema, &mut v), 2);
        assert_eq!(
            v,
            json!({"chunks": [{"sources": [3, 1]}, {"sources": [2]}], "free": [5, 5]})
        );
        assert!(validate(&schema, &v).is_ok());
        assert_eq!(drop_repeats(&schema, &mut v), 0);
    }

    #[test]
    fn canonical_sorts_keys() {
        let v = json!({"b": 1, "a": {"d": [1, {"z": 0, "y": "q"}], "c": null}});
        assert_eq!(
            canonical(&v),
            r#"{"a":{"c":null,"d":[1,{"y":"q","z":0}]},"b":1}"#
        );
    }
}
