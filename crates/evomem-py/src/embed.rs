//! `evomem.embed(texts)`: the project's embedder from Python.
//!
//! The model is found as `evomem eval` finds it: MiniLM in
//! `<models_dir>/all-MiniLM-L6-v2` (default `~/.cache/evomem/models`, where
//! `scripts/fetch-models.sh` puts it), else the hashing fallback with a
//! notice. The vectors cross as little-endian f32 bytes; the Python side
//! makes the numpy array.

use crate::errors::EvalError;
use evomem_core::Embedder;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// A loaded embedder and its fallback notice.
type Loaded = (Arc<dyn Embedder>, Option<String>);

/// Embedders loaded so far, by models folder and thread count: MiniLM's
/// weights are read once per process, not once per `embed` or `evaluate`.
fn loaded() -> &'static Mutex<HashMap<(PathBuf, usize), Loaded>> {
    static LOADED: OnceLock<Mutex<HashMap<(PathBuf, usize), Loaded>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The default models folder: `~/.cache/evomem/models`.
pub fn default_models_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    evomem_embed::default_models_dir(home.as_deref())
}

/// The embedder of `models_dir` (default: [`default_models_dir`]) with
/// `threads` inference threads (0: every core), and its fallback notice.
pub fn load_embedder(models_dir: Option<PathBuf>, threads: usize) -> PyResult<Loaded> {
    let dir = models_dir.unwrap_or_else(default_models_dir);
    let threads = if threads > 0 {
        threads
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    };
    let key = (dir.clone(), threads);
    if let Some(hit) = loaded().lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(hit);
    }
    let fresh = evomem_embed::load_default(&dir, threads).map_err(|e| {
        EvalError::new_err(format!("loading the embedder from {}: {e}", dir.display()))
    })?;
    if let Ok(mut m) = loaded().lock() {
        m.insert(key, fresh.clone());
    }
    Ok(fresh)
}

/// Embed `texts`: `(model_id, dim, bytes of n*dim little-endian f32, notice)`.
#[pyfunction]
#[pyo3(signature = (texts, models_dir=None, threads=0))]
pub fn embed_raw<'py>(
    py: Python<'py>,
    texts: Vec<String>,
    models_dir: Option<PathBuf>,
    threads: usize,
) -> PyResult<(String, usize, Bound<'py, PyBytes>, Option<String>)> {
    let (embedder, notice) = load_embedder(models_dir, threads)?;
    let vectors = py
        .allow_threads(|| {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            embedder.embed(&refs)
        })
        .map_err(|e| EvalError::new_err(e.to_string()))?;
    let mut bytes = Vec::with_capacity(vectors.len() * embedder.dim() * 4);
    for v in &vectors {
        for x in v {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    Ok((
        embedder.model_id().to_string(),
        embedder.dim(),
        PyBytes::new(py, &bytes),
        notice,
    ))
}
