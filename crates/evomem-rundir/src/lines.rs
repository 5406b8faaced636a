//! Reading and writing JSON documents and JSON-lines files, the two kinds
//! of file a run folder holds: [`LineReader`] numbers lines from 1 and
//! decodes `.zst` files on the fly, and every error names the file and,
//! for JSON lines, the line.

use crate::error::RunDirError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The lines of a JSON-lines file, numbered from 1, read through the zstd
/// decoder when the name ends in `.zst` and as they are on disk otherwise.
/// A line that cannot be read (a truncated or corrupt zstd stream, an I/O
/// error) is an [`RunDirError::ReadLine`] naming the file and the line.
pub struct LineReader {
    path: PathBuf,
    compressed: bool,
    lines: std::io::Lines<Box<dyn BufRead>>,
    line: usize,
    failed: bool,
}

impl LineReader {
    /// Open `path` (nothing is read yet beyond the zstd frame header).
    pub fn open(path: &Path) -> Result<Self, RunDirError> {
        let file = std::fs::File::open(path).map_err(|e| RunDirError::io(path, e))?;
        let compressed = path.extension().is_some_and(|e| e == "zst");
        let reader: Box<dyn BufRead> = if compressed {
            let dec = zstd::Decoder::new(file).map_err(|e| RunDirError::io(path, e))?;
            Box::new(std::io::BufReader::new(dec))
        } else {
            Box::new(std::io::BufReader::new(file))
        };
        Ok(Self {
            path: path.to_path_buf(),
            compressed,
            lines: reader.lines(),
            line: 0,
            failed: false,
        })
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Iterator for LineReader {
    /// `(1-based line number, line without its newline)`.
    type Item = Result<(usize, String), RunDirError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = self.lines.next()?;
        self.line += 1;
        Some(match next {
            Ok(text) => Ok((self.line, text)),
            Err(source) => {
                // A failed decoder does not recover; stop after its error.
                self.failed = true;
                Err(RunDirError::ReadLine {
                    path: self.path.clone(),
                    line: self.line,
                    hint: if self.compressed {
                        " (truncated or corrupt zstd stream)"
                    } else {
                        ""
                    },
                    source,
                })
            }
        })
    }
}

/// Write pretty, canonical JSON plus a trailing newline.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), RunDirError> {
    let json_err = |e: serde_json::Error| RunDirError::Json {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    };
    let v = serde_json::to_value(value).map_err(json_err)?;
    let mut s = serde_json::to_string_pretty(&v).map_err(json_err)?;
    s.push('\n');
    std::fs::write(path, s).map_err(|e| RunDirError::io(path, e))
}

/// Read one JSON file.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, RunDirError> {
    let text = std::fs::read_to_string(path).map_err(|e| RunDirError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| RunDirError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        message: e.to_string(),
    })
}

/// Write one compact JSON value per line, serialised directly (no
/// intermediate `Value`: an op log holds millions of lines).
pub fn write_jsonl<T: Serialize>(
    path: &Path,
    values: impl Iterator<Item = T>,
) -> Result<(), RunDirError> {
    let file = std::fs::File::create(path).map_err(|e| RunDirError::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    write_lines(path, &mut w, values)
}

pub(crate) fn write_lines<T: Serialize>(
    path: &Path,
    w: &mut impl std::io::Write,
    values: impl Iterator<Item = T>,
) -> Result<(), RunDirError> {
    for (k, v) in values.enumerate() {
        serde_json::to_writer(&mut *w, &v).map_err(|e| RunDirError::Json {
            path: path.to_path_buf(),
            line: k + 1,
            message: e.to_string(),
        })?;
        w.write_all(b"\n").map_err(|e| RunDirError::io(path, e))?;
    }
    w.flush().map_err(|e| RunDirError::io(path, e))
}

pub(crate) fn for_each_line<T: DeserializeOwned>(
    path: &Path,
    f: impl FnMut(usize, T) -> Result<(), RunDirError>,
) -> Result<(), RunDirError> {
    for_each_line_filtered(path, |_| true, f)
}

pub(crate) fn for_each_line_filtered<T: DeserializeOwned>(
    path: &Path,
    keep: impl Fn(&str) -> bool,
    f: impl FnMut(usize, T) -> Result<(), RunDirError>,
) -> Result<(), RunDirError> {
    parse_lines(LineReader::open(path)?, keep, f)
}

/// Parse every line of `lines` that is not blank and passes `keep`; a line
/// that is not valid JSON for `T` is an [`RunDirError::Json`] naming the file,
/// line and column.
pub(crate) fn parse_lines<T: DeserializeOwned>(
    lines: LineReader,
    keep: impl Fn(&str) -> bool,
    mut f: impl FnMut(usize, T) -> Result<(), RunDirError>,
) -> Result<(), RunDirError> {
    let path = lines.path().to_path_buf();
    for next in lines {
        let (k, line) = next?;
        if line.trim().is_empty() || !keep(&line) {
            continue;
        }
        let v: T = serde_json::from_str(&line).map_err(|e| RunDirError::Json {
            path: path.clone(),
            line: k,
            message: format!("column {}: {e}", e.column()),
        })?;
        f(k, v)?;
    }
    Ok(())
}
