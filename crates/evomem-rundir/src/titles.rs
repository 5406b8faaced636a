//! `item_titles.json`: the titles of the items a run's decisions name, so
//! that the inspector can show `Toy Story` where the files say `1`.
//!
//! A run folder is read later, often on a machine without the data set, so
//! the titles travel with it. Only the items the decisions mention (every
//! candidate of every decision, the targets among them) are written, which
//! keeps the file small (about 1,700 titles, under 60 kB, for all of
//! ml-100k); a data set without titles (the Amazon Beauty, Sports and Toys
//! sets) gets no file. Run folders written before the file existed have none
//! either: readers treat a missing file as "no titles" and keep showing ids.

use crate::error::RunDirError;
use crate::files;
use crate::folder::RunDir;
use crate::lines::{read_json, write_json};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The contents of `OUT/item_titles.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ItemTitles {
    /// Dataset name.
    pub dataset: String,
    /// Item token (as `decisions.jsonl` names items) -> title. Items
    /// without a title are left out.
    pub titles: BTreeMap<String, String>,
}

impl ItemTitles {
    /// The title of item `token`, if known.
    pub fn get(&self, token: &str) -> Option<&str> {
        self.titles.get(token).map(String::as_str)
    }
}

impl RunDir {
    /// Write `OUT/item_titles.json`; with no title in `titles`, remove the
    /// file instead (an earlier run's titles must not outlive it).
    pub fn write_item_titles(&self, titles: &ItemTitles) -> Result<(), RunDirError> {
        let path = self.file(files::ITEM_TITLES);
        if titles.titles.is_empty() {
            return match std::fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(RunDirError::io(&path, e)),
            };
        }
        write_json(&path, titles)
    }

    /// Read `OUT/item_titles.json`: `None` when the folder has none (a data
    /// set without titles, or a run made before the file existed).
    pub fn read_item_titles(&self) -> Result<Option<ItemTitles>, RunDirError> {
        let path = self.file(files::ITEM_TITLES);
        if !path.exists() {
            return Ok(None);
        }
        read_json(&path).map(Some)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn titles_round_trip_and_an_empty_set_removes_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path());
        assert_eq!(run.read_item_titles().unwrap(), None, "an old folder");
        let t = ItemTitles {
            dataset: "ml-100k".into(),
            titles: [("1".to_string(), "Toy Story".to_string())].into(),
        };
        run.write_item_titles(&t).unwrap();
        let back = run.read_item_titles().unwrap().unwrap();
        assert_eq!(back, t);
        assert_eq!(back.get("1"), Some("Toy Story"));
        assert_eq!(back.get("2"), None);
        run.write_item_titles(&ItemTitles::default()).unwrap();
        assert!(!run.file(files::ITEM_TITLES).exists());
        run.write_item_titles(&ItemTitles::default()).unwrap();
    }

    #[test]
    fn a_corrupt_file_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path());
        std::fs::write(run.file(files::ITEM_TITLES), "{not json").unwrap();
        let e = run.read_item_titles().unwrap_err().to_string();
        assert!(e.contains("item_titles.json"), "{e}");
    }
}
