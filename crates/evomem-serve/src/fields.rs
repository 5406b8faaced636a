//! Bounds on every field a request carries, not only a memory's text: a
//! memory's `metadata` and a search's `filter` (bytes of JSON, keys, depth
//! of nesting), an item's id, title, text and categories, `recommend`'s
//! `instruction`, feedback's `objectives` and `item_id`, a `policy` name.
//! The body limit (`serve.max_body_bytes`) bounds a request as a whole;
//! these bound what one field may make the service store, embed, send to a
//! model or walk, so that a request that fits the body limit cannot make
//! one record or one prompt arbitrarily large or deep. A field past its
//! bound is answered 422 `invalid_field`, the message naming the field
//! (`memories[3].metadata`) and the bound.

use crate::error::ApiError;
use crate::types::ItemRef;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Most bytes of a memory's text, a query or an item's text.
pub const TEXT_BYTES: usize = 16 * 1024;
/// Most bytes of a `metadata` object or a `filter`, as compact JSON.
pub const JSON_BYTES: usize = 16 * 1024;
/// Most keys in a `metadata` object or a `filter`, counted at every depth.
pub const JSON_KEYS: usize = 128;
/// Deepest nesting of objects and arrays in a `metadata` object or a
/// `filter` (the object itself is depth 1).
pub const JSON_DEPTH: usize = 8;
/// Most bytes of an item's id.
pub const ITEM_ID_BYTES: usize = 256;
/// Most bytes of an item's title.
pub const TITLE_BYTES: usize = 1024;
/// Most categories of an item.
pub const CATEGORIES: usize = 32;
/// Most bytes of one category.
pub const CATEGORY_BYTES: usize = 256;
/// Most bytes of `recommend`'s `instruction`.
pub const INSTRUCTION_BYTES: usize = 4096;
/// Most `objectives` of one feedback.
pub const OBJECTIVES: usize = 32;
/// Most bytes of an objective's name, or of a `policy` name.
pub const NAME_BYTES: usize = 128;

/// A text field: not blank, at most [`TEXT_BYTES`].
pub fn text(field: &str, text: &str) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::field(field, "must not be empty"));
    }
    at_most(field, text, TEXT_BYTES)
}

/// At most `limit` bytes.
pub fn at_most(field: &str, s: &str, limit: usize) -> Result<(), ApiError> {
    if s.len() > limit {
        return Err(ApiError::field(
            field,
            format!("must be at most {limit} bytes (got {})", s.len()),
        ));
    }
    Ok(())
}

/// A JSON object (`metadata`, `filter`): at most [`JSON_BYTES`] as compact
/// JSON, [`JSON_KEYS`] keys at every depth and [`JSON_DEPTH`] levels.
pub fn json(field: &str, m: &Map<String, Value>) -> Result<(), ApiError> {
    let (keys, depth) = shape(m);
    if depth > JSON_DEPTH {
        return Err(ApiError::field(
            field,
            format!("must nest at most {JSON_DEPTH} levels deep (got {depth})"),
        ));
    }
    if keys > JSON_KEYS {
        return Err(ApiError::field(
            field,
            format!("must hold at most {JSON_KEYS} keys at every depth together (got {keys})"),
        ));
    }
    let bytes = serde_json::to_vec(m).map(|v| v.len()).unwrap_or(usize::MAX);
    if bytes > JSON_BYTES {
        return Err(ApiError::field(
            field,
            format!("must be at most {JSON_BYTES} bytes of JSON (got {bytes})"),
        ));
    }
    Ok(())
}

/// Keys at every depth and the depth of `m` (itself 1), walked without
/// recursion (a body may nest deeper than a thread's stack would like).
fn shape(m: &Map<String, Value>) -> (usize, usize) {
    let (mut keys, mut deepest) = (0usize, 0usize);
    let mut stack: Vec<(&Value, usize)> = Vec::new();
    keys += m.len();
    deepest = deepest.max(1);
    stack.extend(m.values().map(|v| (v, 2)));
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Object(o) => {
                keys += o.len();
                deepest = deepest.max(d);
                stack.extend(o.values().map(|v| (v, d + 1)));
            }
            Value::Array(a) => {
                deepest = deepest.max(d);
                stack.extend(a.iter().map(|v| (v, d + 1)));
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    (keys, deepest)
}

/// An item reference (`events[i].item`, `candidates[i]`): its id, and for
/// a full item its title, text and categories.
pub fn item(field: &str, item: &ItemRef) -> Result<(), ApiError> {
    let full = match item {
        ItemRef::Id(id) => return item_id(field, id),
        ItemRef::Item(full) => full,
    };
    item_id(&format!("{field}.id"), &full.id)?;
    at_most(&format!("{field}.title"), &full.title, TITLE_BYTES)?;
    at_most(&format!("{field}.text"), &full.text, TEXT_BYTES)?;
    if full.categories.len() > CATEGORIES {
        return Err(ApiError::field(
            format!("{field}.categories"),
            format!(
                "must hold at most {CATEGORIES} categories (got {})",
                full.categories.len()
            ),
        ));
    }
    for (i, c) in full.categories.iter().enumerate() {
        at_most(&format!("{field}.categories[{i}]"), c, CATEGORY_BYTES)?;
    }
    Ok(())
}

/// An item id: 1 to [`ITEM_ID_BYTES`] bytes.
pub fn item_id(field: &str, id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > ITEM_ID_BYTES {
        return Err(ApiError::field(
            field,
            format!("item id must be 1-{ITEM_ID_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// Feedback's `objectives`: at most [`OBJECTIVES`], names of at most
/// [`NAME_BYTES`].
pub fn objectives(field: &str, o: &BTreeMap<String, f64>) -> Result<(), ApiError> {
    if o.len() > OBJECTIVES {
        return Err(ApiError::field(
            field,
            format!(
                "must hold at most {OBJECTIVES} objectives (got {})",
                o.len()
            ),
        ));
    }
    for name in o.keys() {
        at_most(&format!("{field}.{name:.32}"), name, NAME_BYTES)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn json_shape_counts_keys_at_every_depth_and_levels() {
        let m = obj(json!({"a": 1, "b": {"c": [1, {"d": 2}]}}));
        assert_eq!(shape(&m), (4, 4));
        assert_eq!(shape(&Map::new()), (0, 1));
    }
}
