//! The run folder, typed: [`RunDir`] writes and reads every file an
//! evaluation leaves behind, so that `eval`, `compare`, `inspect`, `explain`,
//! the inspector (`evomem ui`, and `/ui` of `evomem serve`) and the Python
//! package share one definition of the layout instead of each reading
//! untyped JSON.
//!
//! The format has a crate of its own so that its readers do not carry its
//! writer: `evomem-eval` (loaders, protocols, plots) writes run folders
//! through it and re-exports it as `evomem_eval::run::dir`, while
//! `evomem-ui`, and through it the service, depend on this crate alone.
//!
//! ```text
//! OUT/config.json          resolved EvalConfig
//! OUT/summary.json         metrics of every policy (deterministic)
//! OUT/timing.json          wall times, op-log write times and LLM latency (not deterministic)
//! OUT/report.md            tables and SVG plots
//! OUT/drift_groups.json    per-policy metrics by preference-drift tercile
//! OUT/embed-cache.json     embedding-cache hits and misses (when there is a cache)
//! OUT/item_titles.json     titles of the items the decisions name ([`ItemTitles`]; when the data has titles)
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
//!
//! Where things are: the file names in [`files`]; the folders in `folder.rs`;
//! the typed rows in `rows.rs`; the op log (its format, writer and reader)
//! in `oplog.rs`; JSON and JSON-lines reading and writing in `lines.rs`;
//! errors, each naming its file (and line), in [`RunDirError`].

mod error;
pub mod files;
mod folder;
mod lines;
mod oplog;
mod rows;
mod titles;

pub use error::RunDirError;
pub use folder::{PolicyDir, RunDir};
pub use lines::{read_json, write_json, write_jsonl, LineReader};
pub use oplog::{OpsLogFormat, OPS_ZSTD_LEVEL};
pub use rows::{DecisionLine, OpCounts, PerUser, PlanStats, PolicyMetrics};
pub use titles::ItemTitles;
