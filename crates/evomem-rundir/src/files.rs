//! File names inside a policy folder: the one list every writer and reader
//! of a run folder names its files by.

/// [`crate::PolicyMetrics`].
pub const METRICS: &str = "metrics.json";
/// One [`crate::PerUser`] per line.
pub const PER_USER: &str = "per_user.jsonl";
/// One [`crate::DecisionLine`] per line.
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
/// The titles of the items the decisions name ([`crate::ItemTitles`]), at
/// the run folder's root (not in a policy folder); absent when the data set
/// has no titles or the run predates the file.
pub const ITEM_TITLES: &str = "item_titles.json";
