//! iAgent/MemRec-style JSON lines (`--format iagent`): one user per line.
//!
//! Fields of a line:
//! - `reviewerID` (required): the user id (string or integer);
//! - `asin` (required, non-empty): the user's item sequence, oldest first; the
//!   last one is the target;
//! - `title`, `description` (optional): arrays aligned with `asin`; a
//!   description may be a string or an array of strings (joined by a space).
//!   The first non-empty value seen for an item wins; HTML character
//!   references are decoded;
//! - `instruction` (optional string) -> `Dataset::instructions`;
//! - `ranked_lists` (optional array of ids) -> `Dataset::candidates`;
//! - `rating` or `overall`, `unixReviewTime` or `timestamp` (optional arrays
//!   aligned with `asin`): ratings and timestamps.
//!
//! Other fields (e.g. `reviewText`) are ignored. Without timestamps an
//! interaction's timestamp is its position in the user's sequence, so the
//! global order interleaves users by position, ties by line order (as for
//! AgentCF). The last item is [`evomem_core::SplitRole::Test`], the one before
//! `Valid`, the rest `Train` (`Dataset::fixed_split`).

use super::build::{dedup_keep_order, loo_role, Builder};
use super::files::{file_name, lines, read_text, single_jsonl};
use super::html::decode_entities;
use super::json::{describe, Line};
use super::{DataError, LoadedData};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// An optional array field that must have `len` elements.
fn aligned<'v>(
    l: &'v Line<'_>,
    names: &[&str],
    len: usize,
) -> Result<Option<(String, &'v Vec<Value>)>, DataError> {
    for name in names {
        if let Some(a) = l.opt_array(name)? {
            if a.len() != len {
                return Err(l.err(
                    name,
                    &format!("an array of {len} (as long as `asin`)"),
                    describe(&Value::Array(a.clone())),
                ));
            }
            return Ok(Some((name.to_string(), a)));
        }
    }
    Ok(None)
}

/// A text value: a string, an array of strings (joined), or null (empty).
fn text_value(l: &Line<'_>, field: &str, v: &Value) -> Result<String, DataError> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(decode_entities(s.trim())),
        Value::Array(a) => {
            let mut parts = Vec::with_capacity(a.len());
            for x in a {
                match x {
                    Value::String(s) => parts.push(decode_entities(s.trim())),
                    other => {
                        return Err(l.err(
                            field,
                            "a string or an array of strings",
                            describe(other),
                        ))
                    }
                }
            }
            Ok(parts.join(" "))
        }
        other => Err(l.err(field, "a string or an array of strings", describe(other))),
    }
}

/// Load an iAgent JSONL file (or the only `*.jsonl` of a directory).
pub(crate) fn load(path: &Path) -> Result<LoadedData, DataError> {
    let path = single_jsonl(path)?;
    let mut files = BTreeMap::new();
    let text = read_text(&path, &mut files)?;
    let stem = file_name(&path);
    let stem = stem.strip_suffix(".jsonl").unwrap_or(&stem).to_string();
    let mut b = Builder::new(stem);

    for (n, raw) in lines(&text) {
        let l = Line::parse(&path, n, raw)?;
        let user = l.id("reviewerID")?;
        if b.find_user(&user).is_some() {
            return Err(DataError::Inconsistent {
                path: path.clone(),
                line: n,
                reason: format!("user `{user}` has a second line"),
            });
        }
        let asins = l
            .array("asin")?
            .iter()
            .map(|v| l.id_value("asin", v))
            .collect::<Result<Vec<_>, _>>()?;
        if asins.is_empty() {
            return Err(l.err("asin", "a non-empty array", "an empty array".into()));
        }
        let len = asins.len();
        let titles = aligned(&l, &["title"], len)?;
        let descs = aligned(&l, &["description"], len)?;
        let ratings = aligned(&l, &["rating", "overall"], len)?;
        let times = aligned(&l, &["unixReviewTime", "timestamp"], len)?;
        let uid = b.user(&user);
        for (pos, token) in asins.iter().enumerate() {
            let iid = b.item(token);
            let title = match &titles {
                Some((f, a)) => text_value(&l, f, &a[pos])?,
                None => String::new(),
            };
            let desc = match &descs {
                Some((f, a)) => text_value(&l, f, &a[pos])?,
                None => String::new(),
            };
            if let Some(item) = b.item_mut(iid) {
                if item.title.is_empty() && !title.is_empty() {
                    item.title = title;
                }
                if !desc.is_empty() && !item.text.contains_key("description") {
                    item.text.insert("description".into(), desc);
                }
            }
            let rating = match &ratings {
                None => None,
                Some((f, a)) => match &a[pos] {
                    Value::Null => None,
                    Value::Number(x) => x.as_f64().map(|r| r as f32),
                    other => return Err(l.err(f, "an array of numbers", describe(other))),
                },
            };
            let timestamp = match &times {
                None => pos as i64,
                Some((f, a)) => match a[pos].as_i64() {
                    Some(t) => t,
                    None => return Err(l.err(f, "an array of integers", describe(&a[pos]))),
                },
            };
            b.interact(uid, iid, rating, timestamp, Some(loo_role(pos, len)));
        }
        if let Some(instr) = l.opt_str("instruction")? {
            if !instr.trim().is_empty() {
                b.instructions.insert(uid, instr);
            }
        }
        if let Some(list) = l.opt_array("ranked_lists")? {
            let tokens = list
                .iter()
                .map(|v| l.id_value("ranked_lists", v))
                .collect::<Result<Vec<_>, _>>()?;
            let items = tokens.iter().map(|t| b.item(t)).collect();
            b.candidates.insert(uid, dedup_keep_order(items));
        }
    }
    Ok(LoadedData {
        dataset: b.finish(),
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fixture;
    use super::*;
    use evomem_core::{LogicalTime, SplitRole, UserId};

    #[test]
    fn loads_toy_fixture() {
        let d = load(&fixture("iagent/toy.jsonl")).unwrap();
        let ds = &d.dataset;
        assert_eq!(ds.name, "toy");
        assert_eq!(ds.users.len(), 3);
        assert_eq!(ds.interactions.len(), 10);
        let first = &ds.catalog.items[0];
        assert_eq!(first.token, "B001");
        assert_eq!(first.title, "Dune & Sons");
        assert_eq!(first.text["description"], "Sand. Worms.");
        assert_eq!(ds.instructions.len(), 2);
        assert!(ds.instructions[&UserId(0)].contains("science fiction"));
        let c = &ds.candidates[&UserId(0)];
        assert_eq!(c.len(), 4);
        let hist = ds.histories();
        assert!(
            c.contains(&hist[0].last().unwrap().item),
            "target in the ranked list"
        );
        // Interleaved by position, ties by line order.
        assert_eq!(ds.interactions[0].user, UserId(0));
        assert_eq!(ds.interactions[1].user, UserId(1));
        assert_eq!(ds.interactions[2].user, UserId(2));
        let last_u0 = hist[0].last().unwrap().time;
        assert_eq!(ds.fixed_split[&last_u0], SplitRole::Test);
        assert_eq!(ds.fixed_split.len(), 10);
        assert!(ds.fixed_split.contains_key(&LogicalTime(9)));
    }

    #[test]
    fn misaligned_titles_name_line_and_field() {
        let e = load(&fixture("iagent/bad_titles.jsonl")).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("bad_titles.jsonl:2: field `title`"), "{s}");
        assert!(matches!(e, DataError::Field { line: 2, .. }), "{e:?}");
    }

    #[test]
    fn missing_asin_is_an_error() {
        let e = load(&fixture("iagent/no_asin.jsonl")).unwrap_err();
        assert!(
            matches!(&e, DataError::Field { line: 1, field, .. } if field == "asin"),
            "{e:?}"
        );
    }
}
