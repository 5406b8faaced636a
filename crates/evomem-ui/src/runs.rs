//! The run folders being inspected, and what is built from them on demand.
//!
//! A [`Runs`] holds one or two run folders. Each policy folder's op-log
//! index ([`OpIndex`]) and decision index are built on the first request
//! that needs them and kept; a build in progress blocks only the requests
//! for that policy. The parsed ops of the last few users asked for are kept
//! too, so that moving the time slider replays from memory instead of
//! re-reading the log.

use crate::error::UiError;
use crate::index::OpIndex;
use evomem_core::family::{self, Capabilities};
use evomem_core::{LoggedOp, MemoryOp, MemoryState};
use evomem_rundir::{DecisionLine, ItemTitles, PolicyDir, RunDir};
use serde::Deserialize;
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Users whose parsed ops are kept.
const USER_CACHE: usize = 8;

/// The runs being inspected.
pub struct Runs {
    runs: Vec<Run>,
}

/// One run folder.
pub struct Run {
    /// The folder.
    pub dir: RunDir,
    /// Its policy folders, by slug.
    pub policies: Vec<Policy>,
    /// The titles of the items its decisions name (`item_titles.json`);
    /// empty for a data set without titles or a run made before the file.
    pub titles: ItemTitles,
    /// Why `item_titles.json` could not be read, when it could not (the
    /// run is shown with ids then).
    pub titles_error: Option<String>,
}

/// One policy folder of a run, with what is built from it.
pub struct Policy {
    /// The folder.
    pub dir: PolicyDir,
    /// The folder's name.
    pub slug: String,
    /// The policy spec.
    pub spec: String,
    /// The family's name.
    pub family: String,
    ops: OnceLock<Result<Arc<OpIndex>, String>>,
    decisions: OnceLock<Result<Arc<DecisionIndex>, String>>,
    users: Mutex<VecDeque<(String, Arc<Vec<LoggedOp>>)>>,
}

/// Where each decision's line is in `decisions.jsonl`.
pub struct DecisionIndex {
    /// `(decision id, user, at, target, rank, byte offset, length)`, in file order.
    pub rows: Vec<DecisionRow>,
    by_id: HashMap<u64, usize>,
}

/// One decision, as listed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DecisionRow {
    /// Decision id.
    pub decision_id: u64,
    /// User token.
    pub user: String,
    /// Decision time.
    pub at: u64,
    /// Target item.
    pub target: String,
    /// Rank of the target.
    pub rank: usize,
    #[serde(skip)]
    offset: u64,
    #[serde(skip)]
    len: usize,
}

#[derive(Deserialize)]
struct DecisionPeek {
    user: String,
    decision_id: u64,
    at: u64,
    target: String,
    rank: usize,
}

impl Runs {
    /// Open the run folders (each must hold at least one policy folder).
    pub fn open(paths: &[PathBuf]) -> Result<Self, UiError> {
        let mut runs = Vec::new();
        for p in paths {
            let dir = RunDir::new(p);
            if !p.is_dir() {
                return Err(UiError::Missing(format!(
                    "{} is not a run folder",
                    p.display()
                )));
            }
            let mut policies = Vec::new();
            for d in dir.policies()? {
                let spec = d.spec().unwrap_or_else(|_| d.name());
                let family = d.family().unwrap_or_else(|_| d.name());
                policies.push(Policy {
                    slug: d.name(),
                    spec,
                    family,
                    dir: d,
                    ops: OnceLock::new(),
                    decisions: OnceLock::new(),
                    users: Mutex::new(VecDeque::new()),
                });
            }
            if policies.is_empty() {
                return Err(UiError::Missing(format!(
                    "{}: no policy folder (metrics.json or an op log) in it",
                    p.display()
                )));
            }
            // Titles are for display only: a bad file is reported in the
            // run's answer and the pages fall back to ids.
            let (titles, titles_error) = match dir.read_item_titles() {
                Ok(t) => (t.unwrap_or_default(), None),
                Err(e) => {
                    tracing::warn!("{e}");
                    (ItemTitles::default(), Some(e.to_string()))
                }
            };
            runs.push(Run {
                dir,
                policies,
                titles,
                titles_error,
            });
        }
        Ok(Self { runs })
    }

    /// The runs.
    pub fn all(&self) -> &[Run] {
        &self.runs
    }

    /// Run `k`.
    pub fn run(&self, k: &str) -> Result<&Run, UiError> {
        k.parse::<usize>()
            .ok()
            .and_then(|i| self.runs.get(i))
            .ok_or_else(|| UiError::NotFound {
                what: "run",
                id: k.to_string(),
            })
    }
}

impl Run {
    /// The policy folder `slug`.
    pub fn policy(&self, slug: &str) -> Result<&Policy, UiError> {
        self.policies
            .iter()
            .find(|p| p.slug == slug || p.spec == slug)
            .ok_or_else(|| UiError::NotFound {
                what: "policy",
                id: slug.to_string(),
            })
    }

    /// The run's name (its folder name).
    pub fn name(&self) -> String {
        self.dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| self.dir.path().display().to_string())
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Policy {
    /// The family's capabilities (none for a family outside the built-in
    /// table, such as a Python policy's).
    pub fn caps(&self) -> Option<Capabilities> {
        family::capabilities(&self.family)
    }

    /// True once the op-log index is built.
    pub fn index_ready(&self) -> bool {
        matches!(self.ops.get(), Some(Ok(_)))
    }

    /// The op-log index, built on first use (`OnceLock::get_or_init` runs
    /// one build; concurrent callers wait for it).
    pub fn index(&self) -> Result<Arc<OpIndex>, UiError> {
        if !self.dir.has_ops() {
            return Err(UiError::Missing(format!(
                "policy `{}` has no op log (ops.jsonl.zst or ops.jsonl): the run was made with `--ops-log off`",
                self.slug
            )));
        }
        let built = self.ops.get_or_init(|| {
            let collaborative = self.caps().is_some_and(|c| c.collaborative);
            let path = self.dir.ops_file();
            tracing::info!("indexing the op log {} ...", path.display());
            let r = OpIndex::build(&path, collaborative).map(Arc::new);
            match &r {
                Ok(ix) => tracing::info!("{}: {}", path.display(), ix.describe()),
                Err(e) => tracing::warn!("{}: {e}", path.display()),
            }
            r.map_err(|e| e.to_string())
        });
        built.clone().map_err(UiError::Io)
    }

    /// The decision index, built on first use.
    pub fn decisions(&self) -> Result<Arc<DecisionIndex>, UiError> {
        if !self.dir.has_decisions() {
            return Err(UiError::Missing(format!(
                "policy `{}` has no decisions.jsonl",
                self.slug
            )));
        }
        let path = self.dir.file(evomem_rundir::files::DECISIONS);
        let built = self.decisions.get_or_init(|| {
            DecisionIndex::build(&path)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        });
        built.clone().map_err(UiError::Io)
    }

    /// One decision, whole.
    pub fn decision(&self, id: &str) -> Result<DecisionLine, UiError> {
        let ix = self.decisions()?;
        let not_found = || UiError::NotFound {
            what: "decision",
            id: id.to_string(),
        };
        let k = id.parse::<u64>().map_err(|_| not_found())?;
        let row = ix
            .by_id
            .get(&k)
            .and_then(|&i| ix.rows.get(i))
            .ok_or_else(not_found)?;
        let path = self.dir.file(evomem_rundir::files::DECISIONS);
        let io = |e: std::io::Error| UiError::Io(format!("{}: {e}", path.display()));
        let mut f = std::fs::File::open(&path).map_err(io)?;
        f.seek(SeekFrom::Start(row.offset)).map_err(io)?;
        let mut bytes = vec![0u8; row.len];
        f.read_exact(&mut bytes).map_err(io)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| UiError::Io(format!("{}: decision {k}: {e}", path.display())))
    }

    /// The parsed ops of namespace `ns` (cached for the last few users).
    pub fn namespace_ops(&self, ns: &str) -> Result<Arc<Vec<LoggedOp>>, UiError> {
        if let Ok(cache) = self.users.lock() {
            if let Some((_, ops)) = cache.iter().find(|(k, _)| k == ns) {
                return Ok(ops.clone());
            }
        }
        let ix = self.index()?;
        let lines = ix.lines_of(ns).ok_or_else(|| UiError::NotFound {
            what: "user",
            id: ns.strip_prefix("user:").unwrap_or(ns).to_string(),
        })?;
        let ops = Arc::new(ix.ops(lines)?);
        if let Ok(mut cache) = self.users.lock() {
            cache.push_front((ns.to_string(), ops.clone()));
            cache.truncate(USER_CACHE);
        }
        Ok(ops)
    }
}

impl DecisionIndex {
    fn build(path: &Path) -> Result<Self, UiError> {
        let io = |e: std::io::Error| UiError::Io(format!("{}: {e}", path.display()));
        let f = std::fs::File::open(path).map_err(io)?;
        let mut r = std::io::BufReader::new(f);
        let mut rows = Vec::new();
        let mut by_id = HashMap::new();
        let mut buf = Vec::new();
        let mut offset = 0u64;
        loop {
            buf.clear();
            let n = r.read_until(b'\n', &mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            if !buf.iter().all(u8::is_ascii_whitespace) {
                let p: DecisionPeek = serde_json::from_slice(&buf).map_err(|e| {
                    UiError::Io(format!("{}: line {}: {e}", path.display(), rows.len() + 1))
                })?;
                by_id.insert(p.decision_id, rows.len());
                rows.push(DecisionRow {
                    decision_id: p.decision_id,
                    user: p.user,
                    at: p.at,
                    target: p.target,
                    rank: p.rank,
                    offset,
                    len: n,
                });
            }
            offset += n as u64;
        }
        Ok(Self { rows, by_id })
    }
}

/// Replay `ops[..upto]` into a fresh state. A link to a record outside
/// the slice (AtomRec's links to other users' and items' notes) is kept
/// out of the replay, as `evomem inspect` does.
pub fn replay(ops: &[LoggedOp], upto: usize) -> Result<MemoryState, UiError> {
    let mut state = MemoryState::new();
    for lo in ops.iter().take(upto) {
        apply(&mut state, lo)?;
    }
    Ok(state)
}

/// Apply one op of a user's slice (see [`replay`]).
pub fn apply(state: &mut MemoryState, lo: &LoggedOp) -> Result<(), UiError> {
    let outside = match &lo.op {
        MemoryOp::Link { to, from, .. } => state.get(to).is_none() || state.get(from).is_none(),
        MemoryOp::Unlink { from, to } => state.get(to).is_none() || state.get(from).is_none(),
        other => other.target().as_str().is_empty(),
    };
    if outside {
        return Ok(());
    }
    // A user's slice can miss an op a record depended on (an op on it filed
    // under another namespace); such an op is skipped, not fatal.
    if state.validate(&lo.op).is_ok() {
        state
            .apply(&lo.op, lo.provenance.logical_time)
            .map_err(|e| UiError::Io(format!("replaying op {}: {e}", lo.seq)))?;
    }
    Ok(())
}
