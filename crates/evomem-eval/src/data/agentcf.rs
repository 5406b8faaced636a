//! AgentCF split files (as used for the Amazon CDs "100-user-dense" set).
//!
//! A directory holds, for one prefix `P`:
//! - `P.test.inter` (required): `user_id:token`, `item_id_list:token_seq`
//!   (space-separated history), `item_id:token` (the next item, the target);
//! - `P.train.inter`, `P.valid.inter` (optional, cross-checked): same columns,
//!   one row per prefix of the sequence;
//! - `P.random` (optional, no header): a user, then whitespace-separated
//!   candidate items;
//! - one `*.item` file (optional): `item_id`, `title`, `category`
//!   (`;`-separated);
//! - one `*.pretrained_item` file (optional): `item_id`,
//!   `pretrained_item_description` (LLM-written), stored as
//!   `item.text["description"]`; the `[PAD]` row is skipped.
//!
//! Each user's full sequence is the test row's history followed by its target;
//! every train/valid row must be a prefix of it followed by the next item, or
//! loading fails. There are no timestamps: an interaction's timestamp is its
//! 0-based position in the user's sequence, so the global replay order
//! interleaves users by position (all first items, then all second items, ...),
//! ties broken by the user's order in the test file. The last item of each
//! sequence is [`SplitRole::Test`], the one before [`SplitRole::Valid`], the
//! rest [`SplitRole::Train`] (in `Dataset::fixed_split`). `.random` lists go to
//! `Dataset::candidates` as in the file (duplicates removed); they may or may
//! not contain the target (in `cds-100-user-dense` 32 of 100 do), and the
//! protocol adds it. Titles and categories have HTML character references
//! (`&amp;`) decoded.

use super::build::{dedup_keep_order, loo_role, Builder};
use super::files::{file_name, lines, list_dir, read_text, with_suffix};
use super::html::decode_entities;
use super::tsv::{FieldType, Table};
use super::{DataError, LoadedData};
use evomem_core::UserId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const TOKEN: &[FieldType] = &[FieldType::Token];
const SEQ: &[FieldType] = &[FieldType::TokenSeq, FieldType::Token];

/// At most one file of `all` ending with `suffix`.
fn optional_one(dir: &Path, all: &[PathBuf], suffix: &str) -> Result<Option<PathBuf>, DataError> {
    let found = with_suffix(all, suffix);
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => Err(DataError::UnknownLayout {
            path: dir.to_path_buf(),
            reason: format!("{} `*{suffix}` files, expected at most one", found.len()),
        }),
    }
}

/// One row of a split file: `(line, user, history, next item)`.
type SplitRow<'a> = (usize, &'a str, Vec<&'a str>, &'a str);

/// Rows of a split file.
fn split_rows<'a>(t: &'a Table<'a>) -> Result<Vec<SplitRow<'a>>, DataError> {
    let cu = t.require("user_id", TOKEN)?;
    let ch = t.require("item_id_list", SEQ)?;
    let ci = t.require("item_id", TOKEN)?;
    let mut out = Vec::with_capacity(t.rows.len());
    for row in &t.rows {
        let (u, i) = (row.fields[cu].trim(), row.fields[ci].trim());
        if u.is_empty() {
            return Err(t.error(row, cu, "a user id", "an empty field"));
        }
        if i.is_empty() {
            return Err(t.error(row, ci, "an item id", "an empty field"));
        }
        out.push((row.line, u, row.fields[ch].split_whitespace().collect(), i));
    }
    Ok(out)
}

/// Load an AgentCF directory; see the module docs. The format's files are
/// read in order, each by its own step that names its file in errors.
pub(crate) fn load(dir: &Path) -> Result<LoadedData, DataError> {
    let all = list_dir(dir)?;
    let test_path = optional_one(dir, &all, ".test.inter")?.ok_or_else(|| DataError::Missing {
        path: dir.to_path_buf(),
        what: "an AgentCF `*.test.inter` file".into(),
    })?;
    let prefix = file_name(&test_path)
        .strip_suffix(".test.inter")
        .unwrap_or_default()
        .to_string();
    let mut files = BTreeMap::new();
    let mut b = Builder::new(prefix.clone());
    // Catalog first, so that item ids follow the item file's order.
    if let Some(p) = optional_one(dir, &all, ".item")? {
        read_catalog(&p, &mut b, &mut files)?;
    }
    let seqs = read_sequences(&test_path, &mut b, &mut files)?;
    check_splits(dir, &prefix, &test_path, &seqs, &b, &mut files)?;
    // Interactions, in file order: user by user, position by position. The
    // stable sort by position then interleaves users as documented.
    for (uid, seq) in &seqs {
        for (pos, token) in seq.iter().enumerate() {
            let iid = b.item(token);
            b.interact(*uid, iid, None, pos as i64, Some(loo_role(pos, seq.len())));
        }
    }
    if let Some(p) = optional_one(dir, &all, ".random")? {
        read_candidates(&p, &test_path, &mut b, &mut files)?;
    }
    if let Some(p) = optional_one(dir, &all, ".pretrained_item")? {
        read_descriptions(&p, &mut b, &mut files)?;
    }
    Ok(LoadedData {
        dataset: b.finish(),
        files,
    })
}

/// The item file: ids in file order, titles and categories.
fn read_catalog(
    p: &Path,
    b: &mut Builder,
    files: &mut BTreeMap<String, String>,
) -> Result<(), DataError> {
    let text = read_text(p, files)?;
    let t = Table::parse(p, &text)?;
    let ci = t.require("item_id", TOKEN)?;
    let ct = t.find("title");
    let cc = t.find("category").or_else(|| t.find("categories"));
    for row in &t.rows {
        let token = row.fields[ci].trim();
        if token.is_empty() {
            return Err(t.error(row, ci, "an item id", "an empty field"));
        }
        if b.find_item(token).is_some() {
            return Err(DataError::Inconsistent {
                path: p.to_path_buf(),
                line: row.line,
                reason: format!("item `{token}` is listed twice"),
            });
        }
        let id = b.item(token);
        let Some(item) = b.item_mut(id) else { continue };
        if let Some(c) = ct {
            item.title = decode_entities(row.fields[c].trim());
        }
        if let Some(c) = cc {
            item.categories = row.fields[c]
                .split(';')
                .map(|s| decode_entities(s.trim()))
                .filter(|s| !s.is_empty())
                .collect();
        }
    }
    Ok(())
}

/// Each user's whole sequence (history, then the test target) from the
/// test file.
fn read_sequences(
    test_path: &Path,
    b: &mut Builder,
    files: &mut BTreeMap<String, String>,
) -> Result<Vec<(UserId, Vec<String>)>, DataError> {
    let text = read_text(test_path, files)?;
    let test = Table::parse(test_path, &text)?;
    let mut seqs: Vec<(UserId, Vec<String>)> = Vec::new();
    let mut line_of: BTreeMap<UserId, usize> = BTreeMap::new();
    for (line, u, hist, target) in split_rows(&test)? {
        if b.find_user(u).is_some() {
            return Err(DataError::Inconsistent {
                path: test_path.to_path_buf(),
                line,
                reason: format!("user `{u}` has more than one test row"),
            });
        }
        let uid = b.user(u);
        let mut seq: Vec<String> = hist.iter().map(|s| s.to_string()).collect();
        seq.push(target.to_string());
        line_of.insert(uid, line);
        seqs.push((uid, seq));
    }
    Ok(seqs)
}

/// Cross-check train and valid rows against the reconstructed sequences.
fn check_splits(
    dir: &Path,
    prefix: &str,
    test_path: &Path,
    seqs: &[(UserId, Vec<String>)],
    b: &Builder,
    files: &mut BTreeMap<String, String>,
) -> Result<(), DataError> {
    let seq_of: BTreeMap<UserId, &Vec<String>> = seqs.iter().map(|(u, s)| (*u, s)).collect();
    for (suffix, is_valid) in [(".train.inter", false), (".valid.inter", true)] {
        let p = dir.join(format!("{prefix}{suffix}"));
        if !p.is_file() {
            continue;
        }
        let text = read_text(&p, files)?;
        let t = Table::parse(&p, &text)?;
        for (line, u, hist, next) in split_rows(&t)? {
            let bad = |reason: String| DataError::Inconsistent {
                path: p.to_path_buf(),
                line,
                reason,
            };
            let Some(seq) = b.find_user(u).and_then(|id| seq_of.get(&id)) else {
                return Err(bad(format!(
                    "user `{u}` has no row in {}",
                    file_name(test_path)
                )));
            };
            let k = hist.len();
            let prefix_ok = k < seq.len() && hist.iter().zip(seq.iter()).all(|(a, b)| a == b);
            if !prefix_ok || seq[k] != next {
                return Err(bad(format!(
                    "user `{u}`: history+item disagree with the sequence in {}",
                    file_name(test_path)
                )));
            }
            let role_ok = if is_valid {
                k + 2 == seq.len()
            } else {
                k + 2 < seq.len()
            };
            if !role_ok {
                return Err(bad(format!(
                    "user `{u}`: a {} row predicts position {k} of a sequence of {}",
                    if is_valid { "valid" } else { "train" },
                    seq.len()
                )));
            }
        }
    }

    Ok(())
}

/// The candidate lists, one line per user.
fn read_candidates(
    p: &Path,
    test_path: &Path,
    b: &mut Builder,
    files: &mut BTreeMap<String, String>,
) -> Result<(), DataError> {
    let text = read_text(p, files)?;
    for (line, l) in lines(&text) {
        let mut parts = l.split_whitespace();
        let Some(u) = parts.next() else { continue };
        if line == 1 && u.contains(':') {
            continue; // a typed header
        }
        let Some(uid) = b.find_user(u) else {
            return Err(DataError::Inconsistent {
                path: p.to_path_buf(),
                line,
                reason: format!("user `{u}` has no row in {}", file_name(test_path)),
            });
        };
        let items: Vec<_> = parts.map(|t| b.item(t)).collect();
        if items.is_empty() {
            return Err(DataError::Parse {
                path: p.to_path_buf(),
                line,
                column: 2,
                expected: "a whitespace-separated candidate list".into(),
                found: "nothing".into(),
            });
        }
        if b.candidates.insert(uid, dedup_keep_order(items)).is_some() {
            return Err(DataError::Inconsistent {
                path: p.to_path_buf(),
                line,
                reason: format!("user `{u}` has more than one candidate list"),
            });
        }
    }
    Ok(())
}

/// The LLM-written item descriptions.
fn read_descriptions(
    p: &Path,
    b: &mut Builder,
    files: &mut BTreeMap<String, String>,
) -> Result<(), DataError> {
    let text = read_text(p, files)?;
    let t = Table::parse(p, &text)?;
    let ci = t.require("item_id", TOKEN)?;
    let cd = t.require("pretrained_item_description", SEQ)?;
    for row in &t.rows {
        let token = row.fields[ci].trim();
        if token == "[PAD]" {
            continue;
        }
        let Some(id) = b.find_item(token) else {
            return Err(DataError::Inconsistent {
                path: p.to_path_buf(),
                line: row.line,
                reason: format!("item `{token}` is not in the catalog"),
            });
        };
        let desc = decode_entities(row.fields[cd].trim());
        if let Some(item) = b.item_mut(id) {
            item.text.insert("description".into(), desc);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{fixture, shared};
    use super::*;
    use evomem_core::{ItemId, LogicalTime, SplitRole};

    #[test]
    fn loads_toy_fixture() {
        let d = load(&fixture("agentcf/toy")).unwrap();
        let ds = &d.dataset;
        assert_eq!(ds.name, "Toy");
        assert_eq!(ds.users.len(), 2);
        assert_eq!(ds.interactions.len(), 8);
        assert_eq!(ds.catalog.items[0].title, "Rock & Roll");
        assert_eq!(ds.catalog.items[0].categories, vec!["R&B", "Soul"]);
        assert_eq!(ds.catalog.items[1].text["description"], "A calm album.");
        // Interleaved by position, ties by user order in the test file.
        let first: Vec<(u32, i64)> = ds
            .interactions
            .iter()
            .take(4)
            .map(|i| (i.user.0, i.timestamp))
            .collect();
        assert_eq!(first, vec![(0, 0), (1, 0), (0, 1), (1, 1)]);
        let roles: Vec<SplitRole> = (0..8).map(|k| ds.fixed_split[&LogicalTime(k)]).collect();
        assert_eq!(roles[6..], [SplitRole::Test, SplitRole::Test]);
        assert_eq!(roles[4..6], [SplitRole::Valid, SplitRole::Valid]);
        let c = &ds.candidates[&UserId(0)];
        assert_eq!(c.len(), 3, "duplicates removed");
        assert_eq!(c[0], ItemId(4));
        assert_eq!(d.files.len(), 6);
    }

    #[test]
    fn inconsistent_train_row_names_file_and_line() {
        let e = load(&fixture("agentcf/inconsistent")).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("Bad.train.inter:3"), "{s}");
        assert!(
            matches!(e, DataError::Inconsistent { line: 3, .. }),
            "{e:?}"
        );
    }

    #[test]
    fn malformed_test_file_names_line_and_column() {
        let e = load(&fixture("agentcf/malformed")).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("Bad.test.inter:3:"), "{s}");
        assert!(matches!(e, DataError::Parse { line: 3, .. }), "{e:?}");
    }

    #[test]
    fn loads_real_cds() {
        let Some(p) = shared("cds-100-user-dense") else {
            return;
        };
        let d = load(&p).unwrap();
        let ds = &d.dataset;
        assert_eq!(ds.users.len(), 100);
        assert_eq!(ds.catalog.len(), 64_031);
        assert_eq!(ds.interactions.len(), 800);
        assert_eq!(ds.candidates.len(), 100);
        assert!(ds.candidates.values().all(|c| c.len() == 100));
        assert_eq!(ds.fixed_split.len(), 800);
        let n_test = ds
            .fixed_split
            .values()
            .filter(|r| **r == SplitRole::Test)
            .count();
        assert_eq!(n_test, 100);
        let described = ds
            .catalog
            .items
            .iter()
            .filter(|i| i.text.contains_key("description"))
            .count();
        // 270 description rows, one of which is the `[PAD]` placeholder.
        assert_eq!(described, 269);
        let andy = ds.catalog.items.iter().find(|i| i.token == "5").unwrap();
        assert_eq!(andy.title, "Andy & His Grandmother");
        assert_eq!(d.files.len(), 6);
        // Targets inside the .random lists: documented as 32 of 100.
        let hist = ds.histories();
        let with_target = ds
            .candidates
            .iter()
            .filter(|(u, c)| hist[u.index()].last().is_some_and(|t| c.contains(&t.item)))
            .count();
        assert_eq!(with_target, 32);
    }
}
