//! The run folder and its policy folders: where each file is, which
//! sub-folders are policies, and reading and writing a policy's metrics,
//! per-user results and decisions (the op log is in `oplog.rs`).

use crate::error::RunDirError;
use crate::files;
use crate::lines::{for_each_line, for_each_line_filtered, read_json, write_json, write_jsonl};
use crate::rows::{DecisionLine, PerUser, PolicyMetrics};
use evomem_core::text::slug;
use serde::Serialize;
use std::path::{Path, PathBuf};

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
    pub fn create(&self) -> Result<(), RunDirError> {
        std::fs::create_dir_all(&self.root).map_err(|e| RunDirError::io(&self.root, e))
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
    ) -> Result<(), RunDirError> {
        write_json(&self.file(name), value)
    }

    /// Every policy folder (a folder holding `metrics.json` or an op log),
    /// sorted by folder name. The run folder itself counts when it holds a
    /// policy's files directly.
    pub fn policies(&self) -> Result<Vec<PolicyDir>, RunDirError> {
        let own = PolicyDir {
            path: self.root.clone(),
        };
        if own.is_policy() {
            return Ok(vec![own]);
        }
        let mut out: Vec<PolicyDir> = std::fs::read_dir(&self.root)
            .map_err(|e| RunDirError::io(&self.root, e))?
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

    /// Create the folder.
    pub fn create(&self) -> Result<(), RunDirError> {
        std::fs::create_dir_all(&self.path).map_err(|e| RunDirError::io(&self.path, e))
    }

    /// The policy spec: from `metrics.json`, else the folder name.
    pub fn spec(&self) -> Result<String, RunDirError> {
        if self.file(files::METRICS).exists() {
            return Ok(self.read_metrics()?.policy);
        }
        Ok(self.name())
    }

    /// The policy family's name (the spec up to `[`).
    pub fn family(&self) -> Result<String, RunDirError> {
        let spec = self.spec()?;
        Ok(spec
            .split('[')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string())
    }

    /// True when the folder has its decisions.
    pub fn has_decisions(&self) -> bool {
        self.file(files::DECISIONS).exists()
    }

    /// Write `metrics.json`.
    pub fn write_metrics(&self, m: &PolicyMetrics) -> Result<(), RunDirError> {
        write_json(&self.file(files::METRICS), m)
    }

    /// Read `metrics.json`.
    pub fn read_metrics(&self) -> Result<PolicyMetrics, RunDirError> {
        read_json(&self.file(files::METRICS))
    }

    /// Write `per_user.jsonl`.
    pub fn write_per_user(&self, rows: impl Iterator<Item = PerUser>) -> Result<(), RunDirError> {
        write_jsonl(&self.file(files::PER_USER), rows)
    }

    /// Read `per_user.jsonl`.
    pub fn read_per_user(&self) -> Result<Vec<PerUser>, RunDirError> {
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
    ) -> Result<(), RunDirError> {
        write_jsonl(&self.file(files::DECISIONS), rows)
    }

    /// Call `f` on every decision line whose raw text contains `filter`
    /// (a cheap pre-filter; pass `""` for all).
    pub fn for_each_decision(
        &self,
        filter: &str,
        mut f: impl FnMut(DecisionLine) -> Result<(), RunDirError>,
    ) -> Result<(), RunDirError> {
        for_each_line_filtered(
            &self.file(files::DECISIONS),
            |l| filter.is_empty() || l.contains(filter),
            |_, v| f(v),
        )
    }
}
