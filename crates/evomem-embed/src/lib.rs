//! # evomem-embed
//!
//! Embedders for evomem, implementing [`evomem_core::Embedder`]:
//! - [`MiniLmEmbedder`] (feature `minilm`, on by default): sentence-transformers
//!   all-MiniLM-L6-v2 in pure Rust through gemm and `tokenizers`, matching the
//!   Python reference to within 1e-4 per component;
//! - [`HashingEmbedder`]: signed feature hashing of word and character n-grams,
//!   needing no weights; the automatic fallback when no model folder exists;
//! - [`CachedEmbedder`]: a persistent (SQLite) cache keyed by (model id, text
//!   hash) in front of any embedder, with hit-rate counters.
//!
//! [`load_default`] picks MiniLM when its folder is present in the models
//! directory (the binary's `models_dir` setting; [`default_models_dir`]) and
//! otherwise falls back to hashing with a one-line notice.
//!
//! ```
//! use evomem_core::Embedder;
//! let dir = std::path::Path::new("/nonexistent/models");
//! let (emb, notice) = evomem_embed::load_default(dir, 1).unwrap();
//! assert_eq!(emb.model_id(), "hash-v1-384");
//! assert!(notice.unwrap().contains("hashing"));
//! ```

#[cfg(feature = "minilm")]
pub mod bench;
pub mod bench_texts;
#[cfg(feature = "minilm")]
mod bert;
mod cache;
mod hashing;
#[cfg(feature = "minilm")]
mod int8;
#[cfg(feature = "minilm")]
mod matmul;
#[cfg(feature = "minilm")]
mod minilm;

pub use cache::{CacheStats, CachedEmbedder};
pub use evomem_core::{EmbedError, Embedder};
pub use hashing::HashingEmbedder;
#[cfg(feature = "minilm")]
pub use int8::{best_kernel, Kernel as Int8Kernel};
#[cfg(feature = "minilm")]
pub use minilm::{MiniLmEmbedder, MiniLmOptions, Precision};

/// Model id reported by `MiniLmEmbedder` in `Precision::F32` (defined
/// whether or not the `minilm` feature is on, so that a build without it
/// can still name the vectors a store holds).
pub const MINILM_MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// Model id reported by `MiniLmEmbedder` in `Precision::Int8`: another
/// id, so that a cache keyed by model id never mixes f32 and int8 vectors.
/// It names the scheme (`g64`: weight and activation scales per group of 64
/// inputs), so that vectors of the earlier per-row scheme, cached under
/// `...-int8`, are not read back either.
pub const MINILM_INT8_MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2-int8-g64";

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the MiniLM model folder inside the models directory.
pub const MINILM_DIR_NAME: &str = "all-MiniLM-L6-v2";

/// Dimension of the fallback hashing embedder (matches MiniLM's width).
pub const FALLBACK_DIM: usize = 384;

/// The default models directory under a home folder:
/// `<home>/.cache/evomem/models`, or `./.evomem-models` without one. This
/// library reads no environment: the binary passes `$HOME`, and layers
/// `EVOMEM_MODELS_DIR`, the settings file and `--models-dir` over it.
pub fn default_models_dir(home: Option<&Path>) -> PathBuf {
    match home.filter(|h| !h.as_os_str().is_empty()) {
        Some(home) => home.join(".cache/evomem/models"),
        None => PathBuf::from(".evomem-models"),
    }
}

/// The MiniLM folder inside a models directory.
pub fn minilm_dir(models_dir: &Path) -> PathBuf {
    models_dir.join(MINILM_DIR_NAME)
}

/// Load the default embedder.
///
/// Returns MiniLM when `<models_dir>/all-MiniLM-L6-v2/` exists (and the
/// `minilm` feature is on); otherwise a [`HashingEmbedder`] of dimension
/// [`FALLBACK_DIM`] plus a one-line notice saying so. A folder that exists but
/// cannot be loaded is an error, not a silent fallback.
pub fn load_default(
    models_dir: &Path,
    threads: usize,
) -> Result<(Arc<dyn Embedder>, Option<String>), EmbedError> {
    load_default_niced(models_dir, threads, 0)
}

/// [`load_default`] with MiniLM's pool threads at niceness `pool_nice`
/// (`MiniLmOptions::pool_nice`; the service's `serve.bulk_nice`).
pub fn load_default_niced(
    models_dir: &Path,
    threads: usize,
    pool_nice: i32,
) -> Result<(Arc<dyn Embedder>, Option<String>), EmbedError> {
    load_default_as(models_dir, threads, pool_nice, false)
}

/// [`load_default_niced`], with MiniLM's dense layers in 8-bit integers
/// when `int8` (`Precision::Int8`, the `minilm-int8` embedder; model id
/// `MINILM_INT8_MODEL_ID`). The hashing fallback is the f32 default's
/// only: int8 is never a default, only asked for, so where it cannot load
/// (no model folder, or a build without the `minilm` feature) this is an
/// error rather than a run that quietly embeds with hashing.
pub fn load_default_as(
    models_dir: &Path,
    threads: usize,
    pool_nice: i32,
    int8: bool,
) -> Result<(Arc<dyn Embedder>, Option<String>), EmbedError> {
    let dir = minilm_dir(models_dir);
    if dir.is_dir() {
        #[cfg(feature = "minilm")]
        {
            let options = MiniLmOptions {
                threads: threads.max(1),
                pool_nice,
                precision: if int8 {
                    Precision::Int8
                } else {
                    Precision::F32
                },
                ..MiniLmOptions::default()
            };
            let m = MiniLmEmbedder::load(&dir, options)?;
            return Ok((Arc::new(m), None));
        }
        #[cfg(not(feature = "minilm"))]
        {
            let _ = (threads, pool_nice);
            if int8 {
                return Err(EmbedError::Load {
                    path: dir.display().to_string(),
                    reason: "the int8 MiniLM was asked for, but evomem-embed was built without the `minilm` feature".into(),
                });
            }
            let notice = format!(
                "notice: evomem-embed was built without the `minilm` feature; ignoring {} and falling back to the hashing embedder (hash-v1-{FALLBACK_DIM})",
                dir.display()
            );
            return Ok((Arc::new(HashingEmbedder::new(FALLBACK_DIM)), Some(notice)));
        }
    }
    if int8 {
        return Err(EmbedError::Load {
            path: dir.display().to_string(),
            reason: "the int8 MiniLM was asked for and there is no model folder here (run scripts/fetch-models.sh); it never falls back to the hashing embedder".into(),
        });
    }
    let notice = format!(
        "notice: no MiniLM model folder at {} (run scripts/fetch-models.sh); falling back to the hashing embedder (hash-v1-{FALLBACK_DIM})",
        dir.display()
    );
    Ok((Arc::new(HashingEmbedder::new(FALLBACK_DIM)), Some(notice)))
}
