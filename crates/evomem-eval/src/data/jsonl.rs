//! evomem's own plain JSON-lines format (`--format jsonl`).
//!
//! One JSON object per line, each with a `"type"`; blank lines are skipped.
//! The full specification with an example is in `docs/data-formats.md`:
//!
//! | type | required | optional |
//! |---|---|---|
//! | `dataset` | | `name` |
//! | `item` | `id` | `title`, `categories` (strings), `text` (object of strings), `attributes` (object of scalars) |
//! | `user` | `id` | `attributes` |
//! | `interaction` | `user`, `item`, `timestamp` (integer) | `rating` (number), `split` (`train`/`valid`/`test`) |
//! | `instruction` | `user`, `text` | |
//! | `candidates` | `user`, `items` (ids) | |
//!
//! Ids are non-empty strings or integers. Users and items are created on first
//! mention (a later `item`/`user` line may still fill in metadata, once).
//! Unknown types and unknown fields are errors naming the line and field.
//! If any interaction has a `split`, all must.

use super::build::{dedup_keep_order, Builder};
use super::files::{file_name, lines, read_text, single_jsonl};
use super::json::{describe, Line};
use super::{DataError, LoadedData};
use evomem_core::{Dataset, SplitRole};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// Load a JSONL file (or the only `*.jsonl` of a directory): one pass over
/// the lines, one step per record type, each naming its line in errors.
pub(crate) fn load(path: &Path) -> Result<LoadedData, DataError> {
    let path = single_jsonl(path)?;
    let mut files = BTreeMap::new();
    let text = read_text(&path, &mut files)?;
    let stem = file_name(&path);
    let stem = stem.strip_suffix(".jsonl").unwrap_or(&stem).to_string();
    Ok(LoadedData {
        dataset: parse(&path, stem, &text)?,
        files,
    })
}

/// The dataset of JSONL `text`, named `name` unless a `dataset` line names
/// it; errors name `path` and the line.
pub(crate) fn parse(path: &Path, name: String, text: &str) -> Result<Dataset, DataError> {
    let mut b = Builder::new(name);
    let mut seen = Seen::default();
    for (n, raw) in lines(text) {
        let l = Line::parse(path, n, raw)?;
        let ty = match l.req("type", "a string")? {
            Value::String(s) => s.clone(),
            other => return Err(l.err("type", "a string", describe(other))),
        };
        let dup = |what: String| DataError::Inconsistent {
            path: path.to_path_buf(),
            line: n,
            reason: what,
        };
        match ty.as_str() {
            "dataset" => dataset_line(&l, &mut b, &mut seen, dup)?,
            "item" => item_line(&l, &mut b, &mut seen, dup)?,
            "user" => user_line(&l, &mut b, &mut seen, dup)?,
            "interaction" => interaction_line(&l, &mut b, &mut seen)?,
            "instruction" => instruction_line(&l, &mut b, dup)?,
            "candidates" => candidates_line(&l, &mut b, dup)?,
            other => {
                return Err(l.err(
                    "type",
                    "one of dataset, item, user, interaction, instruction, candidates",
                    format!("\"{other}\""),
                ))
            }
        }
    }
    Ok(b.finish())
}

/// What earlier lines declared, for the checks of later ones.
#[derive(Default)]
struct Seen {
    items: HashSet<String>,
    users: HashSet<String>,
    named: bool,
    /// Whether interactions carry a split (set by the first one).
    splits: Option<bool>,
}

/// `{"type":"dataset","name":…}`: at most once.
fn dataset_line(
    l: &Line<'_>,
    b: &mut Builder,
    seen: &mut Seen,
    dup: impl Fn(String) -> DataError,
) -> Result<(), DataError> {
    l.check_known(&["type", "name"])?;
    if seen.named {
        return Err(dup("a second `dataset` line".into()));
    }
    seen.named = true;
    if let Some(name) = l.opt_str("name")? {
        b.set_name(name);
    }
    Ok(())
}

/// `{"type":"item",…}`: declared once, with title, categories, text fields
/// and attributes.
fn item_line(
    l: &Line<'_>,
    b: &mut Builder,
    seen: &mut Seen,
    dup: impl Fn(String) -> DataError,
) -> Result<(), DataError> {
    l.check_known(&["type", "id", "title", "categories", "text", "attributes"])?;
    let token = l.id("id")?;
    if !seen.items.insert(token.clone()) {
        return Err(dup(format!("item `{token}` is declared twice")));
    }
    let title = l.opt_str("title")?;
    let categories = match l.opt_array("categories")? {
        None => Vec::new(),
        Some(a) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(l.err("categories", "an array of strings", describe(other))),
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let mut text_fields = BTreeMap::new();
    for (k, v) in l.opt_object("text")?.into_iter().flatten() {
        match v {
            Value::String(s) => {
                text_fields.insert(k.clone(), s.clone());
            }
            other => return Err(l.err(&format!("text.{k}"), "a string", describe(other))),
        }
    }
    let attributes = scalars(l, "attributes")?;
    let id = b.item(&token);
    if let Some(item) = b.item_mut(id) {
        item.title = title.unwrap_or_default();
        item.categories = categories;
        item.text = text_fields;
        item.attributes = attributes;
    }
    Ok(())
}

/// `{"type":"user",…}`: declared once, with attributes.
fn user_line(
    l: &Line<'_>,
    b: &mut Builder,
    seen: &mut Seen,
    dup: impl Fn(String) -> DataError,
) -> Result<(), DataError> {
    l.check_known(&["type", "id", "attributes"])?;
    let token = l.id("id")?;
    if !seen.users.insert(token.clone()) {
        return Err(dup(format!("user `{token}` is declared twice")));
    }
    let attributes = scalars(l, "attributes")?;
    let id = b.user(&token);
    if let Some(u) = b.user_mut(id) {
        u.attributes = attributes;
    }
    Ok(())
}

/// `{"type":"interaction",…}`: every interaction has a split or none has.
fn interaction_line(l: &Line<'_>, b: &mut Builder, seen: &mut Seen) -> Result<(), DataError> {
    l.check_known(&["type", "user", "item", "timestamp", "rating", "split"])?;
    let user = l.id("user")?;
    let item = l.id("item")?;
    let timestamp = match l.req("timestamp", "an integer")? {
        Value::Number(x) if x.as_i64().is_some() => x.as_i64().unwrap_or_default(),
        other => return Err(l.err("timestamp", "an integer", describe(other))),
    };
    let rating = l.opt_f64("rating")?.map(|r| r as f32);
    let split = match l.opt_str("split")?.as_deref() {
        None => None,
        Some("train") => Some(SplitRole::Train),
        Some("valid") => Some(SplitRole::Valid),
        Some("test") => Some(SplitRole::Test),
        Some(other) => {
            return Err(l.err(
                "split",
                "\"train\", \"valid\" or \"test\"",
                format!("\"{other}\""),
            ))
        }
    };
    match seen.splits {
        None => seen.splits = Some(split.is_some()),
        Some(had) if had != split.is_some() => {
            return Err(l.err(
                "split",
                if had {
                    "a split (earlier interactions have one)"
                } else {
                    "no split (earlier interactions have none)"
                },
                if split.is_some() {
                    "a split".into()
                } else {
                    "nothing".into()
                },
            ))
        }
        Some(_) => {}
    }
    let (u, i) = (b.user(&user), b.item(&item));
    b.interact(u, i, rating, timestamp, split);
    Ok(())
}

/// `{"type":"instruction",…}`: at most one per user.
fn instruction_line(
    l: &Line<'_>,
    b: &mut Builder,
    dup: impl Fn(String) -> DataError,
) -> Result<(), DataError> {
    l.check_known(&["type", "user", "text"])?;
    let user = l.id("user")?;
    let text = match l.req("text", "a string")? {
        Value::String(s) => s.clone(),
        other => return Err(l.err("text", "a string", describe(other))),
    };
    let u = b.user(&user);
    if b.instructions.insert(u, text).is_some() {
        return Err(dup(format!("user `{user}` has a second instruction")));
    }
    Ok(())
}

/// `{"type":"candidates",…}`: at most one list per user.
fn candidates_line(
    l: &Line<'_>,
    b: &mut Builder,
    dup: impl Fn(String) -> DataError,
) -> Result<(), DataError> {
    l.check_known(&["type", "user", "items"])?;
    let user = l.id("user")?;
    let tokens = l
        .array("items")?
        .iter()
        .map(|v| l.id_value("items", v))
        .collect::<Result<Vec<_>, _>>()?;
    let u = b.user(&user);
    let items = tokens.iter().map(|t| b.item(t)).collect();
    if b.candidates.insert(u, dedup_keep_order(items)).is_some() {
        return Err(dup(format!("user `{user}` has a second candidate list")));
    }
    Ok(())
}

/// An optional object of scalar values, stringified.
fn scalars(l: &Line<'_>, field: &str) -> Result<BTreeMap<String, String>, DataError> {
    let mut out = BTreeMap::new();
    for (k, v) in l.opt_object(field)?.into_iter().flatten() {
        let s = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                return Err(l.err(
                    &format!("{field}.{k}"),
                    "a string, number or boolean",
                    describe(other),
                ))
            }
        };
        out.insert(k.clone(), s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fixture;
    use super::*;
    use evomem_core::{ItemId, LogicalTime, UserId};

    #[test]
    fn loads_toy_fixture() {
        let d = load(&fixture("jsonl/toy.jsonl")).unwrap();
        let ds = &d.dataset;
        assert_eq!(ds.name, "toy-jsonl");
        assert_eq!(
            (ds.users.len(), ds.catalog.len(), ds.interactions.len()),
            (2, 3, 5)
        );
        assert_eq!(ds.catalog.items[0].title, "Heat");
        assert_eq!(ds.catalog.items[0].categories, vec!["Crime", "Thriller"]);
        assert_eq!(ds.catalog.items[0].text["plot"], "A heist.");
        assert_eq!(ds.catalog.items[0].attributes["year"], "1995");
        assert_eq!(ds.users[0].attributes["age"], "31");
        assert_eq!(ds.instructions[&UserId(0)], "Something tense tonight.");
        assert_eq!(ds.candidates[&UserId(0)], vec![ItemId(2), ItemId(1)]);
        // Tie at timestamp 20: file order.
        assert_eq!(ds.interactions[1].user, UserId(1));
        assert_eq!(ds.interactions[2].user, UserId(0));
        assert_eq!(ds.interactions[0].rating, Some(4.5));
        assert!(ds.interactions.iter().all(|i| i.time.0 < 5));
        assert_eq!(ds.interactions[4].time, LogicalTime(4));
        assert!(d.files.contains_key("toy.jsonl"));
    }

    #[test]
    fn unknown_field_names_line_and_field() {
        let e = load(&fixture("jsonl/unknown_field.jsonl")).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("unknown_field.jsonl:3"), "{s}");
        match e {
            DataError::Field { line, field, .. } => {
                assert_eq!((line, field.as_str()), (3, "ratng"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_type_and_bad_json_are_errors() {
        let e = load(&fixture("jsonl/unknown_type.jsonl")).unwrap_err();
        assert!(
            matches!(&e, DataError::Field { line: 2, field, .. } if field == "type"),
            "{e:?}"
        );
        let e = load(&fixture("jsonl/bad_json.jsonl")).unwrap_err();
        assert!(
            matches!(e, DataError::Parse { line: 2, column, .. } if column > 1),
            "{e:?}"
        );
        let e = load(&fixture("jsonl/bad_timestamp.jsonl")).unwrap_err();
        assert!(
            e.to_string()
                .contains("bad_timestamp.jsonl:1: field `timestamp`"),
            "{e}"
        );
    }
}
