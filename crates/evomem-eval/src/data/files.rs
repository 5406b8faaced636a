//! File access shared by the loaders: reading a file while recording its
//! SHA-256, listing a directory deterministically, and format detection.

use super::{DataError, Format};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Read a UTF-8 text file and record its SHA-256 (keyed by file name) in `files`.
pub(crate) fn read_text(
    path: &Path,
    files: &mut BTreeMap<String, String>,
) -> Result<String, DataError> {
    let bytes = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            DataError::Missing {
                path: path.to_path_buf(),
                what: "file not found".into(),
            }
        } else {
            DataError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    let digest = hex::encode(Sha256::digest(&bytes));
    files.insert(file_name(path), digest);
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        DataError::Parse {
            path: path.to_path_buf(),
            line,
            column: valid.len() - line_start + 1,
            expected: "UTF-8 text".into(),
            found: "an invalid byte sequence".into(),
        }
    })
}

/// The final component of a path as a string (lossy).
pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Lines of a text with 1-based numbers, `\r` stripped, blank lines skipped.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
        .filter(|(_, l)| !l.trim().is_empty())
}

/// Regular files of a directory, sorted by name.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let rd = std::fs::read_dir(dir).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            DataError::Missing {
                path: dir.to_path_buf(),
                what: "data directory not found".into(),
            }
        } else {
            DataError::Io {
                path: dir.to_path_buf(),
                source,
            }
        }
    })?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|source| DataError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let p = entry.path();
        if p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Files of `dir` whose name ends with `suffix`.
pub(crate) fn with_suffix(files: &[PathBuf], suffix: &str) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|p| file_name(p).ends_with(suffix))
        .cloned()
        .collect()
}

/// Resolve a JSONL input: a file is taken as is; a directory must hold exactly
/// one `*.jsonl` file.
pub(crate) fn single_jsonl(path: &Path) -> Result<PathBuf, DataError> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    let all = list_dir(path)?;
    let found = with_suffix(&all, ".jsonl");
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(DataError::Missing {
            path: path.to_path_buf(),
            what: "a `*.jsonl` file".into(),
        }),
        _ => Err(DataError::UnknownLayout {
            path: path.to_path_buf(),
            reason: format!("{} `*.jsonl` files; pass the one to load", found.len()),
        }),
    }
}

/// See [`super::detect_format`].
pub(crate) fn detect(path: &Path) -> Result<Format, DataError> {
    if path.is_file() {
        let name = file_name(path);
        if name.ends_with(".inter") {
            return Ok(Format::RecBole);
        }
        if name.ends_with(".jsonl") || name.ends_with(".json") {
            return detect_jsonl(path);
        }
        return Err(DataError::UnknownLayout {
            path: path.to_path_buf(),
            reason: "expected a directory, a `.inter` file or a `.jsonl` file".into(),
        });
    }
    let all = list_dir(path)?;
    let inter = with_suffix(&all, ".inter");
    let has = |s: &str| inter.iter().any(|p| file_name(p).ends_with(s));
    if has(".train.inter") && has(".test.inter") {
        return Ok(Format::AgentCf);
    }
    if !inter.is_empty() {
        return Ok(Format::RecBole);
    }
    if !with_suffix(&all, ".jsonl").is_empty() {
        return detect_jsonl(&single_jsonl(path)?);
    }
    Err(DataError::UnknownLayout {
        path: path.to_path_buf(),
        reason: "no `*.inter` or `*.jsonl` files".into(),
    })
}

/// Decide between our JSONL and iAgent JSONL by the first non-blank line.
fn detect_jsonl(path: &Path) -> Result<Format, DataError> {
    let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let Some((line, first)) = lines(&text).next() else {
        return Err(DataError::UnknownLayout {
            path: path.to_path_buf(),
            reason: "the file is empty".into(),
        });
    };
    let v: serde_json::Value = serde_json::from_str(first).map_err(|e| DataError::Parse {
        path: path.to_path_buf(),
        line,
        column: e.column(),
        expected: "a JSON object".into(),
        found: e.to_string(),
    })?;
    if v.get("type").is_some() {
        Ok(Format::Jsonl)
    } else if v.get("reviewerID").is_some() {
        Ok(Format::IAgentJsonl)
    } else {
        Err(DataError::UnknownLayout {
            path: path.to_path_buf(),
            reason: "first line has neither `type` (jsonl) nor `reviewerID` (iagent)".into(),
        })
    }
}
