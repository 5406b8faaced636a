//! The run folder, typed: [`RunDir`] writes and reads every file an
//! evaluation leaves behind, so that `eval`, `compare`, `inspect` and
//! `explain` share one definition of the layout instead of each reading
//! untyped JSON.
//!
//! ```text
//! OUT/config.json          resolved EvalConfig
//! OUT/summary.json         metrics of every policy (deterministic)
//! OUT/timing.json          wall times, op-log write times and LLM latency (not deterministic)
//! OUT/report.md            tables and SVG plots
//! OUT/drift_groups.json    per-policy metrics by preference-drift tercile
//! OUT/embed-cache.json     embedding-cache hits and misses (when there is a cache)
//! OUT/<slug>/metrics.json  [`PolicyMetrics`]
//! OUT/<slug>/per_user.jsonl, decisions.jsonl ([`PerUser`], [`DecisionLine`])
//! OUT/<slug>/ops.jsonl.zst the op log, zstd (`LoggedOp`, vectors stripped), unless --ops-log off
//!                          (plain `ops.jsonl` with `--ops-log-format jsonl`)
//! OUT/<slug>/config.json, timing.json
//! ```
//!
//! JSON documents (`*.json`) are written through `serde_json::Value`, whose
//! maps are sorted, so their keys come out in alphabetical order whatever the
//! struct's declaration order; JSON-lines files are serialised directly, in
//! declaration order, since an op log has millions of lines. Both compare
//! byte for byte across runs of one config.
//!
//! Every JSON-lines file is read through one [`LineReader`], which decodes
//! a `.zst` file on the fly; the op log is whichever of `ops.jsonl.zst` and
//! `ops.jsonl` exists ([`PolicyDir::ops_file`], compressed first), so
//! `inspect`, `explain` and older runs' plain logs share one reader.

use crate::error::EvalError;
use evomem_core::metrics::RankMetrics;
use evomem_core::text::slug;
use evomem_core::{DecisionContext, ItemId, LoggedOp, UsageTrace};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// File names inside a policy folder.
pub mod files {
    /// [`super::PolicyMetrics`].
    pub const METRICS: &str = "metrics.json";
    /// One [`super::PerUser`] per line.
    pub const PER_USER: &str = "per_user.jsonl";
    /// One [`super::DecisionLine`] per line.
    pub const DECISIONS: &str = "decisions.jsonl";
    /// One `LoggedOp` per line, zstd-compressed (what runs write by default).
    pub const OPS: &str = "ops.jsonl.zst";
    /// The same, uncompressed (`--ops-log-format jsonl`, runs made before
    /// compression, or a log decompressed with `zstd -d`); read when no
    /// compressed log exists.
    pub const OPS_PLAIN: &str = "ops.jsonl";
    /// The run's resolved config.
    pub const CONFIG: &str = "config.json";
    /// Wall times (not deterministic).
    pub const TIMING: &str = "timing.json";
}

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
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "zst" => Ok(Self::Zst),
            "jsonl" => Ok(Self::Jsonl),
            other => Err(EvalError::Config {
                field: "ops_log_format".into(),
                message: format!("`{other}` (expected zst or jsonl)"),
            }),
        }
    }
}

/// A run folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

/// One policy's folder inside a run folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDir {
    path: PathBuf,
}

/// One policy's `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyMetrics {
    /// The policy spec.
    pub policy: String,
    /// Dataset name.
    pub dataset: String,
    /// Mean metrics over decisions.
    pub metrics: RankMetrics,
    /// Users with a decision.
    pub n_users: usize,
    /// The config without the LLM cache settings (which differ between a
    /// recording run and its replay while the results must not).
    pub config: serde_json::Value,
    /// SHA-256 of every data file read.
    pub data_sha256: BTreeMap<String, String>,
    /// The plan's counts.
    pub plan: crate::protocol::PlanStats,
    /// The policy's own statistics (`Policy::stats`; policy-specific).
    pub policy_stats: serde_json::Value,
    /// Interactions the policy observed.
    pub observed: usize,
    /// Op counts.
    pub ops: OpCounts,
    /// LLM accounting (without latencies).
    pub llm: serde_json::Value,
    /// The embedder.
    pub embedding: serde_json::Value,
}

/// Op counts of one policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpCounts {
    /// Ops applied.
    pub total: usize,
    /// Per lifecycle label.
    pub by_label: BTreeMap<String, usize>,
    /// Per op kind.
    pub by_op: BTreeMap<String, usize>,
}

/// One per-user line of `per_user.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerUser {
    /// User token.
    pub user: String,
    /// Decision id.
    pub decision_id: u64,
    /// Decision time.
    pub at: u64,
    /// Target item token.
    pub target: String,
    /// 1-based rank of the target.
    pub rank: usize,
    /// Number of candidates.
    pub n_candidates: usize,
    /// Metrics of this decision.
    #[serde(flatten)]
    pub metrics: RankMetrics,
}

/// One line of `decisions.jsonl`: what the decider saw and did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionLine {
    /// User token.
    pub user: String,
    /// Decision id.
    pub decision_id: u64,
    /// Decision time.
    pub at: u64,
    /// Target item token.
    pub target: String,
    /// Candidate item tokens, in the order the decider saw them.
    pub candidates: Vec<String>,
    /// The same candidates as the run's item ids (what context entries name).
    #[serde(default)]
    pub candidate_ids: Vec<ItemId>,
    /// One score per candidate.
    pub scores: Vec<f64>,
    /// 1-based rank of the target.
    pub rank: usize,
    /// The recalled context (embeddings dropped).
    pub context: DecisionContext,
    /// The usage trace.
    pub trace: UsageTrace,
}

impl DecisionLine {
    /// Index of the top-scored candidate (ties to the earlier position, as
    /// the metrics break them).
    pub fn top(&self) -> Option<usize> {
        self.scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i)
    }
}

impl RunDir {
    /// The run folder at `root` (nothing is read or created).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Create the folder.
    pub fn create(&self) -> Result<(), EvalError> {
        std::fs::create_dir_all(&self.root).map_err(|e| EvalError::io(&self.root, e))
    }

    /// The folder of the policy `spec` (`OUT/<slug>`).
    pub fn policy(&self, spec: &str) -> PolicyDir {
        PolicyDir {
            path: self.root.join(slug(spec)),
        }
    }

    /// A file directly in the run folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Write `value` as canonical pretty JSON to `OUT/<name>`.
    pub fn write_json<T: Serialize + ?Sized>(
        &self,
        name: &str,
        value: &T,
    ) -> Result<(), EvalError> {
        write_json(&self.file(name), value)
    }

    /// Every policy folder (a folder holding `metrics.json` or an op log),
    /// sorted by folder name. The run folder itself counts when it holds a
    /// policy's files directly.
    pub fn policies(&self) -> Result<Vec<PolicyDir>, EvalError> {
        let own = PolicyDir {
            path: self.root.clone(),
        };
        if own.is_policy() {
            return Ok(vec![own]);
        }
        let mut out: Vec<PolicyDir> = std::fs::read_dir(&self.root)
            .map_err(|e| EvalError::io(&self.root, e))?
            .filter_map(Result::ok)
            .map(|e| PolicyDir { path: e.path() })
            .filter(PolicyDir::is_policy)
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

impl PolicyDir {
    /// A policy folder at `path` (nothing is read).
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder name (the spec's slug).
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    }

    /// A file in the folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn is_policy(&self) -> bool {
        self.file(files::METRICS).exists() || self.has_ops()
    }

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

    /// Create the folder.
    pub fn create(&self) -> Result<(), EvalError> {
        std::fs::create_dir_all(&self.path).map_err(|e| EvalError::io(&self.path, e))
    }

    /// The policy spec: from `metrics.json`, else the folder name.
    pub fn spec(&self) -> Result<String, EvalError> {
        if self.file(files::METRICS).exists() {
            return Ok(self.read_metrics()?.policy);
        }
        Ok(self.name())
    }

    /// The policy family's name (the spec up to `[`).
    pub fn family(&self) -> Result<String, EvalError> {
        let spec = self.spec()?;
        Ok(spec
            .split('[')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string())
    }

    /// True when the folder has its op log (compressed or plain).
    pub fn has_ops(&self) -> bool {
        self.ops_file().exists()
    }

    /// True when the folder has its decisions.
    pub fn has_decisions(&self) -> bool {
        self.file(files::DECISIONS).exists()
    }

    /// Write `metrics.json`.
    pub fn write_metrics(&self, m: &PolicyMetrics) -> Result<(), EvalError> {
        write_json(&self.file(files::METRICS), m)
    }

    /// Read `metrics.json`.
    pub fn read_metrics(&self) -> Result<PolicyMetrics, EvalError> {
        read_json(&self.file(files::METRICS))
    }

    /// Write `per_user.jsonl`.
    pub fn write_per_user(&self, rows: impl Iterator<Item = PerUser>) -> Result<(), EvalError> {
        write_jsonl(&self.file(files::PER_USER), rows)
    }

    /// Read `per_user.jsonl`.
    pub fn read_per_user(&self) -> Result<Vec<PerUser>, EvalError> {
        let mut out = Vec::new();
        for_each_line(&self.file(files::PER_USER), |_, v| {
            out.push(v);
            Ok(())
        })?;
        Ok(out)
    }

    /// Write `decisions.jsonl`.
    pub fn write_decisions(
        &self,
        rows: impl Iterator<Item = DecisionLine>,
    ) -> Result<(), EvalError> {
        write_jsonl(&self.file(files::DECISIONS), rows)
    }

    /// Call `f` on every decision line whose raw text contains `filter`
    /// (a cheap pre-filter; pass `""` for all).
    pub fn for_each_decision(
        &self,
        filter: &str,
        mut f: impl FnMut(DecisionLine) -> Result<(), EvalError>,
    ) -> Result<(), EvalError> {
        for_each_line_filtered(
            &self.file(files::DECISIONS),
            |l| filter.is_empty() || l.contains(filter),
            |_, v| f(v),
        )
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
    ) -> Result<PathBuf, EvalError> {
        let path = self.file(format.file_name());
        let file = std::fs::File::create(&path).map_err(|e| EvalError::io(&path, e))?;
        match format {
            OpsLogFormat::Zst => {
                let mut enc = zstd::Encoder::new(file, OPS_ZSTD_LEVEL)
                    .map_err(|e| EvalError::io(&path, e))?;
                // A checksum (4 bytes) lets the reader tell a corrupt log
                // from a valid one.
                enc.include_checksum(true)
                    .map_err(|e| EvalError::io(&path, e))?;
                let mut w = std::io::BufWriter::new(enc);
                write_lines(&path, &mut w, ops)?;
                let enc = w
                    .into_inner()
                    .map_err(|e| EvalError::io(&path, e.into_error()))?;
                enc.finish().map_err(|e| EvalError::io(&path, e))?;
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
    pub fn remove_ops(&self) -> Result<(), EvalError> {
        remove_if_present(&self.file(files::OPS))?;
        remove_if_present(&self.file(files::OPS_PLAIN))
    }

    /// The lines of the op log ([`Self::ops_file`]: compressed first, else
    /// plain), decoded as they are read.
    pub fn op_lines(&self) -> Result<LineReader, EvalError> {
        LineReader::open(&self.ops_file())
    }

    /// Call `f` on every logged op whose raw line passes `keep` (a cheap
    /// pre-filter on the text, so that a large log is not parsed whole), in
    /// log order. The error of a bad line names the file and line.
    pub fn for_each_op(
        &self,
        keep: impl Fn(&str) -> bool,
        mut f: impl FnMut(LoggedOp) -> Result<(), EvalError>,
    ) -> Result<(), EvalError> {
        parse_lines(self.op_lines()?, keep, |_, v| f(v))
    }
}

/// zstd level of op logs: level 3 (zstd's default) compresses AtomRec's
/// ml-100k log 10.6× (763 MB to 72 MB) and MARS's 13.7× (180 MB to 13 MB);
/// writing takes as long as the plain log (serialising dominates).
pub const OPS_ZSTD_LEVEL: i32 = 3;

fn remove_if_present(path: &Path) -> Result<(), EvalError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(EvalError::io(path, e)),
    }
}

/// The lines of a JSON-lines file, numbered from 1, read through the zstd
/// decoder when the name ends in `.zst` and as they are on disk otherwise.
/// A line that cannot be read (a truncated or corrupt zstd stream, an I/O
/// error) is an [`EvalError::ReadLine`] naming the file and the line.
pub struct LineReader {
    path: PathBuf,
    compressed: bool,
    lines: std::io::Lines<Box<dyn BufRead>>,
    line: usize,
    failed: bool,
}

impl LineReader {
    /// Open `path` (nothing is read yet beyond the zstd frame header).
    pub fn open(path: &Path) -> Result<Self, EvalError> {
        let file = std::fs::File::open(path).map_err(|e| EvalError::io(path, e))?;
        let compressed = path.extension().is_some_and(|e| e == "zst");
        let reader: Box<dyn BufRead> = if compressed {
            let dec = zstd::Decoder::new(file).map_err(|e| EvalError::io(path, e))?;
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
    type Item = Result<(usize, String), EvalError>;

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
                Err(EvalError::ReadLine {
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
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), EvalError> {
    let json_err = |e: serde_json::Error| EvalError::Json {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    };
    let v = serde_json::to_value(value).map_err(json_err)?;
    let mut s = serde_json::to_string_pretty(&v).map_err(json_err)?;
    s.push('\n');
    std::fs::write(path, s).map_err(|e| EvalError::io(path, e))
}

/// Read one JSON file.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EvalError::Json {
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
) -> Result<(), EvalError> {
    let file = std::fs::File::create(path).map_err(|e| EvalError::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    write_lines(path, &mut w, values)
}

fn write_lines<T: Serialize>(
    path: &Path,
    w: &mut impl std::io::Write,
    values: impl Iterator<Item = T>,
) -> Result<(), EvalError> {
    for (k, v) in values.enumerate() {
        serde_json::to_writer(&mut *w, &v).map_err(|e| EvalError::Json {
            path: path.to_path_buf(),
            line: k + 1,
            message: e.to_string(),
        })?;
        w.write_all(b"\n").map_err(|e| EvalError::io(path, e))?;
    }
    w.flush().map_err(|e| EvalError::io(path, e))
}

fn for_each_line<T: DeserializeOwned>(
    path: &Path,
    f: impl FnMut(usize, T) -> Result<(), EvalError>,
) -> Result<(), EvalError> {
    for_each_line_filtered(path, |_| true, f)
}

fn for_each_line_filtered<T: DeserializeOwned>(
    path: &Path,
    keep: impl Fn(&str) -> bool,
    f: impl FnMut(usize, T) -> Result<(), EvalError>,
) -> Result<(), EvalError> {
    parse_lines(LineReader::open(path)?, keep, f)
}

/// Parse every line of `lines` that is not blank and passes `keep`; a line
/// that is not valid JSON for `T` is an [`EvalError::Json`] naming the file,
/// line and column.
fn parse_lines<T: DeserializeOwned>(
    lines: LineReader,
    keep: impl Fn(&str) -> bool,
    mut f: impl FnMut(usize, T) -> Result<(), EvalError>,
) -> Result<(), EvalError> {
    let path = lines.path().to_path_buf();
    for next in lines {
        let (k, line) = next?;
        if line.trim().is_empty() || !keep(&line) {
            continue;
        }
        let v: T = serde_json::from_str(&line).map_err(|e| EvalError::Json {
            path: path.clone(),
            line: k,
            message: format!("column {}: {e}", e.column()),
        })?;
        f(k, v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
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
        let EvalError::ReadLine { path: p, line, .. } = &e else {
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
