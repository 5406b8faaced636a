//! RecBole atomic files: `<name>.inter` (required), `<name>.item` and
//! `<name>.user` (optional), tab-separated with typed headers.
//!
//! Mapping:
//! - `.inter`: `user_id:token` and `item_id:token` are required;
//!   `rating:float` and `timestamp:float` are optional. Without a timestamp
//!   column the 0-based row number is the timestamp (file order).
//! - `.item`: `item_id` plus `movie_title`/`title` -> title,
//!   `class`/`genre`/`genres`/`categories`/`category` -> categories (split on
//!   whitespace when `token_seq`), `description`/`text` -> `text[...]`, every
//!   other column -> attributes.
//! - `.user`: `user_id` plus every other column -> attributes.
//!
//! Ids are dense in first-seen order: `.item` rows first (file order), then
//! items first met in `.inter`; likewise `.user` then `.inter` for users.

use super::build::Builder;
use super::files::{file_name, list_dir, read_text, with_suffix};
use super::tsv::{float, FieldType, Table};
use super::{DataError, LoadedData};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const TITLE: &[&str] = &["movie_title", "title"];
const CATEGORIES: &[&str] = &["class", "genre", "genres", "categories", "category"];
const TEXT: &[&str] = &["description", "text"];
const TOKEN: &[FieldType] = &[FieldType::Token];

/// Find the `.inter` file: `path` itself, `<dir>/<dirname>.inter`, or the only
/// `*.inter` file of the directory.
fn find_inter(path: &Path) -> Result<PathBuf, DataError> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    let all = list_dir(path)?;
    let by_name = path.join(format!("{}.inter", file_name(path)));
    if by_name.is_file() {
        return Ok(by_name);
    }
    let inter: Vec<PathBuf> = with_suffix(&all, ".inter")
        .into_iter()
        .filter(|p| {
            let n = file_name(p);
            !(n.ends_with(".train.inter")
                || n.ends_with(".valid.inter")
                || n.ends_with(".test.inter"))
        })
        .collect();
    match inter.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(DataError::Missing {
            path: path.to_path_buf(),
            what: "a RecBole `<name>.inter` file".into(),
        }),
        _ => Err(DataError::UnknownLayout {
            path: path.to_path_buf(),
            reason: format!("{} `*.inter` files; pass the one to load", inter.len()),
        }),
    }
}

/// Load RecBole atomic files; see the module docs.
pub(crate) fn load(path: &Path) -> Result<LoadedData, DataError> {
    let inter_path = find_inter(path)?;
    let stem = file_name(&inter_path)
        .strip_suffix(".inter")
        .unwrap_or_default()
        .to_string();
    let dir = inter_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut files = BTreeMap::new();
    let mut b = Builder::new(stem.clone());

    let item_path = dir.join(format!("{stem}.item"));
    if item_path.is_file() {
        let text = read_text(&item_path, &mut files)?;
        load_items(&mut b, &Table::parse(&item_path, &text)?)?;
    }
    let user_path = dir.join(format!("{stem}.user"));
    if user_path.is_file() {
        let text = read_text(&user_path, &mut files)?;
        load_users(&mut b, &Table::parse(&user_path, &text)?)?;
    }
    let text = read_text(&inter_path, &mut files)?;
    let t = Table::parse(&inter_path, &text)?;
    let cu = t.require("user_id", TOKEN)?;
    let ci = t.require("item_id", TOKEN)?;
    let cr = t
        .find("rating")
        .map(|_| t.require("rating", &[FieldType::Float]))
        .transpose()?;
    let ct = t
        .find("timestamp")
        .map(|_| t.require("timestamp", &[FieldType::Float]))
        .transpose()?;
    for (k, row) in t.rows.iter().enumerate() {
        let (u, i) = (row.fields[cu].trim(), row.fields[ci].trim());
        if u.is_empty() {
            return Err(t.error(row, cu, "a user id", "an empty field"));
        }
        if i.is_empty() {
            return Err(t.error(row, ci, "an item id", "an empty field"));
        }
        let rating = cr.and_then(|c| float(row.fields[c])).map(|r| r as f32);
        let timestamp = match ct {
            None => k as i64,
            Some(c) => {
                let f = row.fields[c].trim();
                match f.parse::<i64>() {
                    Ok(v) => v,
                    Err(_) => match float(f) {
                        Some(v) if v.is_finite() => v.round() as i64,
                        _ => return Err(t.error(row, c, "a timestamp", &format!("`{f}`"))),
                    },
                }
            }
        };
        let (uid, iid) = (b.user(u), b.item(i));
        b.interact(uid, iid, rating, timestamp, None);
    }
    Ok(LoadedData {
        dataset: b.finish(),
        files,
    })
}

fn load_items(b: &mut Builder, t: &Table<'_>) -> Result<(), DataError> {
    let ci = t.require("item_id", TOKEN)?;
    for row in &t.rows {
        let token = row.fields[ci].trim();
        if token.is_empty() {
            return Err(t.error(row, ci, "an item id", "an empty field"));
        }
        if b.find_item(token).is_some() {
            return Err(DataError::Inconsistent {
                path: t.path.clone(),
                line: row.line,
                reason: format!("item `{token}` is listed twice"),
            });
        }
        let id = b.item(token);
        let Some(item) = b.item_mut(id) else { continue };
        for (c, col) in t.columns.iter().enumerate() {
            if c == ci {
                continue;
            }
            let v = row.fields[c].trim();
            let name = col.name.as_str();
            if TITLE.contains(&name) && item.title.is_empty() {
                item.title = v.to_string();
            } else if CATEGORIES.contains(&name) {
                match col.ty {
                    FieldType::TokenSeq => item
                        .categories
                        .extend(v.split_whitespace().map(str::to_string)),
                    _ if !v.is_empty() => item.categories.push(v.to_string()),
                    _ => {}
                }
            } else if TEXT.contains(&name) {
                if !v.is_empty() {
                    item.text.insert(name.to_string(), v.to_string());
                }
            } else if !v.is_empty() {
                item.attributes.insert(name.to_string(), v.to_string());
            }
        }
    }
    Ok(())
}

fn load_users(b: &mut Builder, t: &Table<'_>) -> Result<(), DataError> {
    let cu = t.require("user_id", TOKEN)?;
    for row in &t.rows {
        let token = row.fields[cu].trim();
        if token.is_empty() {
            return Err(t.error(row, cu, "a user id", "an empty field"));
        }
        if b.find_user(token).is_some() {
            return Err(DataError::Inconsistent {
                path: t.path.clone(),
                line: row.line,
                reason: format!("user `{token}` is listed twice"),
            });
        }
        let id = b.user(token);
        let Some(user) = b.user_mut(id) else { continue };
        for (c, col) in t.columns.iter().enumerate() {
            let v = row.fields[c].trim();
            if c != cu && !v.is_empty() {
                user.attributes.insert(col.name.clone(), v.to_string());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{fixture, shared};
    use super::*;
    use evomem_core::{ItemId, UserId};

    #[test]
    fn loads_toy_fixture() {
        let d = load(&fixture("recbole/toy")).unwrap();
        let ds = &d.dataset;
        assert_eq!(ds.name, "toy");
        assert_eq!(
            (ds.users.len(), ds.catalog.len(), ds.interactions.len()),
            (3, 4, 7)
        );
        let it = &ds.catalog.items[0];
        assert_eq!(it.title, "Toy Story");
        assert_eq!(it.categories, vec!["Animation", "Comedy"]);
        assert_eq!(it.attributes["release_year"], "1995");
        assert_eq!(ds.users[0].attributes["gender"], "M");
        // Timestamp order, ties by file order: two rows share timestamp 100.
        let ts: Vec<i64> = ds.interactions.iter().map(|i| i.timestamp).collect();
        let mut sorted = ts.clone();
        sorted.sort();
        assert_eq!(ts, sorted);
        assert_eq!(ds.interactions[0].user, UserId(1));
        assert_eq!(ds.interactions[1].user, UserId(0));
        assert_eq!(ds.interactions[1].item, ItemId(2));
        assert_eq!(ds.interactions[0].rating, Some(4.0));
        assert!(d.files.contains_key("toy.inter") && d.files.contains_key("toy.item"));
        assert_eq!(d.files["toy.user"].len(), 64);
    }

    #[test]
    fn malformed_inter_names_file_line_and_column() {
        let e = load(&fixture("recbole/bad_rating")).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("bad_rating.inter:4:3"), "{s}");
        assert!(s.contains("rating") && s.contains("`four`"), "{s}");
        match e {
            DataError::Parse { line, column, .. } => assert_eq!((line, column), (4, 3)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_header_is_an_error() {
        let e = load(&fixture("recbole/bad_header")).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("bad_header.item:1:2"), "{s}");
    }

    #[test]
    fn short_line_is_an_error() {
        let e = load(&fixture("recbole/short_line")).unwrap_err();
        assert!(e.to_string().contains("short_line.inter:3:"), "{e}");
    }

    #[test]
    fn loads_real_ml_100k() {
        let Some(p) = shared("ml-100k") else { return };
        let d = load(&p).unwrap();
        let ds = &d.dataset;
        assert_eq!(ds.name, "ml-100k");
        assert_eq!(ds.users.len(), 943);
        assert_eq!(ds.catalog.len(), 1682);
        assert_eq!(ds.interactions.len(), 100_000);
        assert_eq!(d.files.len(), 3);
        let toy = &ds.catalog.items[0];
        assert_eq!((toy.token.as_str(), toy.title.as_str()), ("1", "Toy Story"));
        assert_eq!(toy.attributes["release_year"], "1995");
        assert!(toy.categories.contains(&"Animation".to_string()));
        assert!(ds.users[0].attributes.contains_key("occupation"));
        assert!(ds
            .interactions
            .windows(2)
            .all(|w| w[0].timestamp <= w[1].timestamp));
        assert!(ds.fixed_split.is_empty() && ds.candidates.is_empty());
    }
}
