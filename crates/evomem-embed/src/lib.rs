//! # evomem-embed
//!
//! Embedders for evomem, implementing [`evomem_core::Embedder`]:
//! - [`MiniLmEmbedder`] (feature `minilm`, on by default): sentence-transformers
//!   all-MiniLM-L6-v2 in pure Rust through candle and `tokenizers`, matching the
//!   Python reference to within 1e-4 per component;
//! - [`HashingEmbedder`]: signed feature hashing of word and character n-grams,
//!   needing no weights; the automatic fallback when no model folder exists;
//! - [`CachedEmbedder`]: a persistent (SQLite) cache keyed by (model id, text
//!   hash) in front of any embedder, with hit-rate counters.
//!
//! [`load_default`] picks MiniLM when its folder is present under
//! [`models_dir`] and otherwise falls back to hashing with a one-line notice.
//!
//! ```
//! use evomem_core::Embedder;
//! let dir = std::path::Path::new("/nonexistent/models");
//! let (emb, notice) = evomem_embed::load_default(Some(dir)).unwrap();
//! assert_eq!(emb.model_id(), "hash-v1-384");
//! assert!(notice.unwrap().contains("hashing"));
//! ```

#[cfg(feature = "minilm")]
pub mod bench;
pub mod bench_texts;
mod cache;
mod hashing;
#[cfg(feature = "minilm")]
mod minilm;

pub use cache::{CacheStats, CachedEmbedder};
pub use evomem_core::{EmbedError, Embedder};
pub use hashing::HashingEmbedder;
#[cfg(feature = "minilm")]
pub use minilm::{MiniLmEmbedder, MiniLmOptions};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the MiniLM model folder inside the models directory.
pub const MINILM_DIR_NAME: &str = "all-MiniLM-L6-v2";

/// Dimension of the fallback hashing embedder (matches MiniLM's width).
pub const FALLBACK_DIM: usize = 384;

/// The models directory: `$EVOMEM_MODELS_DIR` when set and non-empty, else
/// `~/.cache/evomem/models` (`$HOME`), else `./.evomem-models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("EVOMEM_MODELS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache/evomem/models"),
        None => PathBuf::from(".evomem-models"),
    }
}

/// The MiniLM folder for a models directory (default: [`models_dir`]).
pub fn minilm_dir(models_dir_override: Option<&Path>) -> PathBuf {
    match models_dir_override {
        Some(d) => d.join(MINILM_DIR_NAME),
        None => models_dir().join(MINILM_DIR_NAME),
    }
}

/// Load the default embedder.
///
/// Returns MiniLM when `<models_dir>/all-MiniLM-L6-v2/` exists (and the
/// `minilm` feature is on); otherwise a [`HashingEmbedder`] of dimension
/// [`FALLBACK_DIM`] plus a one-line notice saying so. A folder that exists but
/// cannot be loaded is an error, not a silent fallback.
pub fn load_default(
    models_dir_override: Option<&Path>,
) -> Result<(Arc<dyn Embedder>, Option<String>), EmbedError> {
    let dir = minilm_dir(models_dir_override);
    if dir.is_dir() {
        #[cfg(feature = "minilm")]
        {
            let m = MiniLmEmbedder::load(&dir, MiniLmOptions::from_env())?;
            return Ok((Arc::new(m), None));
        }
        #[cfg(not(feature = "minilm"))]
        {
            let notice = format!(
                "notice: evomem-embed was built without the `minilm` feature; ignoring {} and falling back to the hashing embedder (hash-v1-{FALLBACK_DIM})",
                dir.display()
            );
            return Ok((Arc::new(HashingEmbedder::new(FALLBACK_DIM)), Some(notice)));
        }
    }
    let notice = format!(
        "notice: no MiniLM model folder at {} (run scripts/fetch-models.sh); falling back to the hashing embedder (hash-v1-{FALLBACK_DIM})",
        dir.display()
    );
    Ok((Arc::new(HashingEmbedder::new(FALLBACK_DIM)), Some(notice)))
}

/// Thread count for embedding: `$EVOMEM_THREADS`, else `$RAYON_NUM_THREADS`,
/// else the number of available cores.
pub fn threads_from_env() -> usize {
    ["EVOMEM_THREADS", "RAYON_NUM_THREADS"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .filter_map(|v| v.trim().parse::<usize>().ok())
        .find(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
