//! The seams between the arena and the crates it drives: LLM
//! accounting, the default embedder and the data loaders.
//!
//! Everything the arena needs from `evomem-llm`, `evomem-embed` and the
//! loaders goes through this one module, so that a change in one of those
//! contracts is a change in one place.

use crate::error::EvalError;
use evomem_llm::LlmHub;
use std::path::Path;

/// The hub's reproducible accounting (calls, tokens, repairs and fallbacks
/// per role and per user), for `metrics.json`.
pub fn llm_accounting(hub: &LlmHub) -> serde_json::Value {
    hub.accounting_json()
}

/// The hub's non-reproducible figures (cache hits, backend calls, latency),
/// for `timing.json`.
pub fn llm_runtime(hub: &LlmHub) -> serde_json::Value {
    hub.runtime_json()
}

pub use crate::data::LoadedData;

/// Load a dataset folder, detecting the format when `format` is `None`.
/// `format` is one of `recbole`, `agentcf`, `iagent`, `jsonl`.
pub fn load_data(dir: &Path, format: Option<&str>) -> Result<LoadedData, EvalError> {
    let format = match format {
        None => crate::data::detect_format(dir)?,
        Some(f) => f.parse::<crate::data::Format>()?,
    };
    Ok(crate::data::load(dir, format)?)
}
