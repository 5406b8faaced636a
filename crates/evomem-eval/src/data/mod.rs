//! Data loaders: turn files on disk into an [`evomem_core::Dataset`].
//!
//! Four formats are supported (see `docs/data-formats.md` for each in full):
//! - [`Format::RecBole`]: RecBole atomic files (`<name>.inter`, `.item`, `.user`);
//! - [`Format::AgentCf`]: AgentCF split files (`*.train/.valid/.test.inter`,
//!   `*.random`, `*.item`, `*.pretrained_item`);
//! - [`Format::IAgentJsonl`]: iAgent/MemRec-style JSON lines, one user per line;
//! - [`Format::Jsonl`]: evomem's own plain JSON-lines format.
//!
//! Every loader interns users and items into dense ids in first-seen order,
//! sorts interactions into the global replay order (by timestamp, ties broken
//! by the order in which the loader met them in the files, i.e. a *stable*
//! sort), and numbers them `LogicalTime(0..)` in that order. It also records a
//! SHA-256 of every file it read, so that a run can say exactly which bytes it
//! was computed from.
//!
//! Errors name the file and, where it applies, the line and column or field
//! ([`DataError`]).

mod agentcf;
mod build;
mod error;
mod files;
mod html;
mod iagent;
mod json;
mod jsonl;
#[cfg(test)]
mod loo_check;
mod recbole;
mod tsv;

pub use error::DataError;

use evomem_core::Dataset;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// A supported on-disk data format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// RecBole atomic files (`recbole`).
    RecBole,
    /// AgentCF split files (`agentcf`).
    AgentCf,
    /// iAgent/MemRec-style JSON lines (`iagent`).
    IAgentJsonl,
    /// evomem's own plain JSON lines (`jsonl`).
    Jsonl,
}

impl Format {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::RecBole => "recbole",
            Format::AgentCf => "agentcf",
            Format::IAgentJsonl => "iagent",
            Format::Jsonl => "jsonl",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = DataError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "recbole" => Ok(Format::RecBole),
            "agentcf" => Ok(Format::AgentCf),
            "iagent" | "memrec" => Ok(Format::IAgentJsonl),
            "jsonl" => Ok(Format::Jsonl),
            _ => Err(DataError::UnknownFormat {
                name: s.to_string(),
            }),
        }
    }
}

/// A loaded dataset plus the provenance of its bytes.
#[derive(Debug, Clone)]
pub struct LoadedData {
    /// The dataset.
    pub dataset: Dataset,
    /// File name (without directory) to lowercase hex SHA-256, for every file read.
    pub files: BTreeMap<String, String>,
}

/// Guess the format of a directory (or a single file).
///
/// - a directory with `*.train.inter` and `*.test.inter` files: AgentCF;
/// - a directory with any other `*.inter` file, or a `.inter` file: RecBole;
/// - a `.jsonl`/`.json` file, or a directory holding exactly one: the first
///   non-blank line decides: an object with `"type"` is our JSONL, one with
///   `"reviewerID"` is iAgent.
pub fn detect_format(dir: &Path) -> Result<Format, DataError> {
    files::detect(dir)
}

/// Load a dataset in the given format. `dir` is the data directory; for the
/// JSONL formats it may also be the file itself, and for RecBole the `.inter`
/// file.
pub fn load(dir: &Path, format: Format) -> Result<LoadedData, DataError> {
    match format {
        Format::RecBole => recbole::load(dir),
        Format::AgentCf => agentcf::load(dir),
        Format::IAgentJsonl => iagent::load(dir),
        Format::Jsonl => jsonl::load(dir),
    }
}

/// A dataset from JSONL `text` held in memory (evomem's own format, see
/// [`Format::Jsonl`]), with exactly the checks of the file loader; errors
/// name `origin` (a label, no file is read) and the 1-based line. Used to
/// build datasets from rows handed over in memory (`evomem-py`).
pub fn parse_jsonl(origin: &Path, name: &str, text: &str) -> Result<Dataset, DataError> {
    jsonl::parse(origin, name.to_string(), text)
}

/// [`detect_format`] then [`load`].
pub fn load_auto(dir: &Path) -> Result<LoadedData, DataError> {
    load(dir, detect_format(dir)?)
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Paths of fixtures and of the shared real data for the loader tests.
    use std::path::PathBuf;

    /// `tests/fixtures/<rel>` of this crate.
    pub fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel)
    }

    /// The real dataset `rel` ([`evomem_kit::testing::shared_dataset`]).
    pub fn shared(rel: &str) -> Option<PathBuf> {
        evomem_kit::testing::shared_dataset(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::{fixture, shared};

    #[test]
    fn format_names_round_trip() {
        for f in [
            Format::RecBole,
            Format::AgentCf,
            Format::IAgentJsonl,
            Format::Jsonl,
        ] {
            assert_eq!(f.as_str().parse::<Format>().unwrap(), f);
        }
        let e = "csv".parse::<Format>().unwrap_err();
        assert!(e.to_string().contains("csv"), "{e}");
    }

    #[test]
    fn detects_fixture_formats() {
        assert_eq!(
            detect_format(&fixture("recbole/toy")).unwrap(),
            Format::RecBole
        );
        assert_eq!(
            detect_format(&fixture("agentcf/toy")).unwrap(),
            Format::AgentCf
        );
        assert_eq!(
            detect_format(&fixture("iagent/toy.jsonl")).unwrap(),
            Format::IAgentJsonl
        );
        assert_eq!(
            detect_format(&fixture("jsonl/toy.jsonl")).unwrap(),
            Format::Jsonl
        );
        assert!(detect_format(&fixture("does-not-exist")).is_err());
    }

    #[test]
    fn detects_real_formats() {
        if let Some(p) = shared("ml-100k") {
            assert_eq!(detect_format(&p).unwrap(), Format::RecBole);
        }
        if let Some(p) = shared("cds-100-user-dense") {
            assert_eq!(detect_format(&p).unwrap(), Format::AgentCf);
        }
    }
}
