//! A policy's op log on disk: its two formats ([`OpsLogFormat`]: zstd, the
//! default, or plain JSON lines), which file a reader takes
//! ([`PolicyDir::ops_file`]: compressed first), writing a log whole
//! ([`PolicyDir::write_ops`]) and reading it line by line
//! ([`PolicyDir::for_each_op`]), with errors naming the file and line.
//!
//! The op log's writer *thread* (the engine's sink during a run) stays in
//! `evomem-eval`, which owns the engine; this module is what its readers
//! need.

use crate::error::RunDirError;
use crate::files;
use crate::folder::PolicyDir;
use crate::lines::{parse_lines, write_lines, LineReader};
use evomem_core::LoggedOp;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// How a policy's op log is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpsLogFormat {
    /// `ops.jsonl.zst`: JSON lines through a streaming zstd encoder at level
    /// [`OPS_ZSTD_LEVEL`] (the default; about a tenth of the plain size).
    #[default]
    Zst,
    /// `ops.jsonl`: plain JSON lines.
    Jsonl,
}

impl OpsLogFormat {
    /// The file name a log of this format gets in a policy folder.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Zst => files::OPS,
            Self::Jsonl => files::OPS_PLAIN,
        }
    }

    /// The setting's spelling (`zst` or `jsonl`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Zst => "zst",
            Self::Jsonl => "jsonl",
        }
    }
}

impl FromStr for OpsLogFormat {
    type Err = RunDirError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "zst" => Ok(Self::Zst),
            "jsonl" => Ok(Self::Jsonl),
            other => Err(RunDirError::Config {
                field: "ops_log_format".into(),
                message: format!("`{other}` (expected zst or jsonl)"),
            }),
        }
    }
}

/// zstd level of op logs: level 3 (zstd's default) compresses AtomRec's
/// ml-100k log 10.6× (763 MB to 72 MB) and MARS's 13.7× (180 MB to 13 MB);
/// writing takes as long as the plain log (serialising dominates).
pub const OPS_ZSTD_LEVEL: i32 = 3;

impl PolicyDir {
    /// The op log's file: `ops.jsonl.zst`, else a plain `ops.jsonl`, else
    /// the compressed name (which does not exist).
    pub fn ops_file(&self) -> PathBuf {
        let zst = self.file(files::OPS);
        let plain = self.file(files::OPS_PLAIN);
        if !zst.exists() && plain.exists() {
            plain
        } else {
            zst
        }
    }

    /// True when the folder has its op log (compressed or plain).
    pub fn has_ops(&self) -> bool {
        self.ops_file().exists()
    }

    /// Write the op log in `format` (any serialisable op view, one per
    /// line; `ops.jsonl.zst` at zstd level [`OPS_ZSTD_LEVEL`], or plain
    /// `ops.jsonl`) and return its path. A log of the other format left by an
    /// earlier run in this folder is removed, so that readers, which prefer
    /// the compressed file, never read a stale log.
    pub fn write_ops<T: Serialize>(
        &self,
        format: OpsLogFormat,
        ops: impl Iterator<Item = T>,
    ) -> Result<PathBuf, RunDirError> {
        let path = self.file(format.file_name());
        let file = std::fs::File::create(&path).map_err(|e| RunDirError::io(&path, e))?;
        match format {
            OpsLogFormat::Zst => {
                let mut enc = zstd::Encoder::new(file, OPS_ZSTD_LEVEL)
                    .map_err(|e| RunDirError::io(&path, e))?;
                // A checksum (4 bytes) lets the reader tell a corrupt log
                // from a valid one.
                enc.include_checksum(true)
                    .map_err(|e| RunDirError::io(&path, e))?;
                let mut w = std::io::BufWriter::new(enc);
                write_lines(&path, &mut w, ops)?;
                let enc = w
                    .into_inner()
                    .map_err(|e| RunDirError::io(&path, e.into_error()))?;
                enc.finish().map_err(|e| RunDirError::io(&path, e))?;
            }
            OpsLogFormat::Jsonl => {
                write_lines(&path, &mut std::io::BufWriter::new(file), ops)?;
            }
        }
        let other = match format {
            OpsLogFormat::Zst => OpsLogFormat::Jsonl,
            OpsLogFormat::Jsonl => OpsLogFormat::Zst,
        };
        remove_if_present(&self.file(other.file_name()))?;
        Ok(path)
    }

    /// Remove the op log (either format) if there is one: a run made with
    /// `--ops-log off` into a reused folder must not leave an earlier run's
    /// log behind for `inspect` to read.
    pub fn remove_ops(&self) -> Result<(), RunDirError> {
        remove_if_present(&self.file(files::OPS))?;
        remove_if_present(&self.file(files::OPS_PLAIN))
    }

    /// The lines of the op log ([`Self::ops_file`]: compressed first, else
    /// plain), decoded as they are read.
    pub fn op_lines(&self) -> Result<LineReader, RunDirError> {
        LineReader::open(&self.ops_file())
    }

    /// Call `f` on every logged op whose raw line passes `keep` (a cheap
    /// pre-filter on the text, so that a large log is not parsed whole), in
    /// log order. The error of a bad line names the file and line.
    pub fn for_each_op(
        &self,
        keep: impl Fn(&str) -> bool,
        mut f: impl FnMut(LoggedOp) -> Result<(), RunDirError>,
    ) -> Result<(), RunDirError> {
        parse_lines(self.op_lines()?, keep, |_, v| f(v))
    }
}

fn remove_if_present(path: &Path) -> Result<(), RunDirError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RunDirError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::lines::write_jsonl;
    use evomem_core::{LogicalTime, MemoryId, MemoryOp, Provenance};

    fn op(seq: u64) -> LoggedOp {
        LoggedOp {
            seq,
            op: MemoryOp::Forget {
                id: MemoryId::new(format!("m{seq}")),
            },
            provenance: Provenance {
                policy: "p".into(),
                label: format!("l{seq}"),
                reason: "r".into(),
                sources: vec![],
                logical_time: LogicalTime(seq),
                wall_time_ms: 0,
            },
        }
    }

    fn read_all(d: &PolicyDir) -> Vec<LoggedOp> {
        let mut out = Vec::new();
        d.for_each_op(
            |_| true,
            |o| {
                out.push(o);
                Ok(())
            },
        )
        .unwrap();
        out
    }

    #[test]
    fn op_logs_are_written_compressed_and_read_back_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PolicyDir::at(tmp.path());
        let ops: Vec<LoggedOp> = (1..=500).map(op).collect();
        let written = d.write_ops(OpsLogFormat::Zst, ops.iter()).unwrap();
        assert_eq!(written, tmp.path().join(files::OPS));
        assert_eq!(d.ops_file(), written);
        let bytes = std::fs::read(d.ops_file()).unwrap();
        assert_eq!(&bytes[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
        assert_eq!(read_all(&d), ops);
        let plain: usize = ops
            .iter()
            .map(|o| serde_json::to_string(o).unwrap().len() + 1)
            .sum();
        assert!(bytes.len() * 4 < plain, "{} vs {plain} bytes", bytes.len());
    }

    #[test]
    fn a_plain_op_log_of_an_older_run_is_still_read() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PolicyDir::at(tmp.path());
        let ops: Vec<LoggedOp> = (1..=3).map(op).collect();
        write_jsonl(&tmp.path().join(files::OPS_PLAIN), ops.iter()).unwrap();
        assert!(d.has_ops());
        assert_eq!(d.ops_file(), tmp.path().join(files::OPS_PLAIN));
        assert_eq!(read_all(&d), ops);
    }

    fn read_err(d: &PolicyDir) -> String {
        let mut n = 0;
        let e = d
            .for_each_op(
                |_| true,
                |_| {
                    n += 1;
                    Ok(())
                },
            )
            .unwrap_err();
        format!("{e} (after {n} ops)")
    }

    #[test]
    fn a_truncated_compressed_op_log_is_an_error_naming_the_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PolicyDir::at(tmp.path());
        let path = d.write_ops(OpsLogFormat::Zst, (1..=2000).map(op)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() * 9 / 10]).unwrap();
        let mut delivered = 0;
        let e = d
            .for_each_op(
                |_| true,
                |_| {
                    delivered += 1;
                    Ok(())
                },
            )
            .unwrap_err();
        let RunDirError::ReadLine { path: p, line, .. } = &e else {
            panic!("not a read error: {e}");
        };
        assert_eq!(p, &path);
        // The ops of the complete zstd blocks come through, then the error
        // names the first line that could not be read.
        assert_eq!(delivered + 1, *line);
        assert!(*line <= 2000, "line {line}");
        let msg = e.to_string();
        assert!(msg.contains("ops.jsonl.zst:"), "{msg}");
        assert!(msg.contains("truncated or corrupt zstd stream"), "{msg}");
    }

    #[test]
    fn a_corrupt_compressed_op_log_is_an_error_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PolicyDir::at(tmp.path());
        let path = d.write_ops(OpsLogFormat::Zst, (1..=2000).map(op)).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        for b in &mut bytes[mid..mid + 16] {
            *b ^= 0x5a;
        }
        std::fs::write(&path, &bytes).unwrap();
        let msg = read_err(&d);
        assert!(msg.contains(&path.display().to_string()), "{msg}");

        // Not zstd at all (a plain log under the compressed name).
        std::fs::write(&path, "{\"seq\":1}\n").unwrap();
        let msg = read_err(&d);
        assert!(
            msg.contains("ops.jsonl.zst:1: cannot read line 1 (truncated or corrupt zstd stream)"),
            "{msg}"
        );
    }

    #[test]
    fn a_bad_json_line_in_a_compressed_op_log_names_the_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PolicyDir::at(tmp.path());
        let mut lines: Vec<serde_json::Value> = (1..=3)
            .map(|k| serde_json::to_value(op(k)).unwrap())
            .collect();
        lines.insert(2, serde_json::json!({"seq": "two"}));
        d.write_ops(OpsLogFormat::Zst, lines.iter()).unwrap();
        let msg = read_err(&d);
        assert!(msg.contains("ops.jsonl.zst:3: column"), "{msg}");
        assert!(msg.ends_with("(after 2 ops)"), "{msg}");
    }

    #[test]
    fn the_plain_format_writes_ops_jsonl_and_removes_a_stale_compressed_log() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PolicyDir::at(tmp.path());
        d.write_ops(OpsLogFormat::Zst, (1..=5).map(op)).unwrap();
        let ops: Vec<LoggedOp> = (1..=3).map(op).collect();
        let path = d.write_ops(OpsLogFormat::Jsonl, ops.iter()).unwrap();
        assert_eq!(path, tmp.path().join(files::OPS_PLAIN));
        assert!(!tmp.path().join(files::OPS).exists());
        assert_eq!(d.ops_file(), path);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert_eq!(read_all(&d), ops);
        // And back: the compressed log replaces the plain one.
        d.write_ops(OpsLogFormat::Zst, ops.iter()).unwrap();
        assert!(!path.exists());
        assert_eq!(read_all(&d), ops);
        d.remove_ops().unwrap();
        assert!(!d.has_ops());
        d.remove_ops().unwrap();
    }

    #[test]
    fn ops_log_format_is_zst_or_jsonl() {
        assert_eq!("zst".parse::<OpsLogFormat>().unwrap(), OpsLogFormat::Zst);
        assert_eq!(
            "jsonl".parse::<OpsLogFormat>().unwrap(),
            OpsLogFormat::Jsonl
        );
        let e = "gz".parse::<OpsLogFormat>().unwrap_err().to_string();
        assert!(e.contains("ops_log_format") && e.contains("`gz`"), "{e}");
        for f in [OpsLogFormat::Zst, OpsLogFormat::Jsonl] {
            assert_eq!(f.as_str().parse::<OpsLogFormat>().unwrap(), f);
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.as_str()));
        }
        assert_eq!(OpsLogFormat::default(), OpsLogFormat::Zst);
    }
}
