//! A persistent embedding cache in front of any [`Embedder`].
//!
//! Embedding with MiniLM costs milliseconds per text; evaluation reruns embed
//! the same item titles and memory texts again and again. [`CachedEmbedder`]
//! stores every vector in SQLite keyed by `(model id, SHA-256 of the text)`, so
//! a rerun embeds nothing it has embedded before, and vectors of different
//! models can never be confused. Hits and misses are counted
//! ([`CachedEmbedder::stats`]) so runs can report the hit rate.
//!
//! Vectors are stored as little-endian `f32` blobs; a stored blob whose length
//! does not match the model's dimension is treated as a miss and overwritten.

use evomem_core::{EmbedError, Embedder};
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Hit/miss counters of a [`CachedEmbedder`] since it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Texts answered from the cache.
    pub hits: u64,
    /// Texts that had to be embedded.
    pub misses: u64,
}

impl CacheStats {
    /// `hits / (hits + misses)`, or 0 when nothing was asked.
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

/// An [`Embedder`] that answers from a persistent cache and embeds only misses.
///
/// It reports the inner embedder's model id and dimension, so it can replace
/// it anywhere.
pub struct CachedEmbedder<E> {
    inner: E,
    conn: Mutex<Connection>,
    path: PathBuf,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl<E: Embedder> CachedEmbedder<E> {
    /// Open (or create) a cache file at `path` in front of `inner`.
    pub fn open(inner: E, path: &Path) -> Result<Self, EmbedError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| cache_err(path, e))?;
        }
        let conn = Connection::open(path).map_err(|e| cache_err(path, e))?;
        Self::with_connection(inner, conn, path.to_path_buf())
    }

    /// A cache that lives in memory only (for tests and one-off runs).
    pub fn in_memory(inner: E) -> Result<Self, EmbedError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| cache_err(&path, e))?;
        Self::with_connection(inner, conn, path)
    }

    fn with_connection(inner: E, conn: Connection, path: PathBuf) -> Result<Self, EmbedError> {
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS embeddings (
                 model TEXT NOT NULL,
                 text_sha256 BLOB NOT NULL,
                 vector BLOB NOT NULL,
                 PRIMARY KEY (model, text_sha256)
             ) WITHOUT ROWID;",
        )
        .map_err(|e| cache_err(&path, e))?;
        Ok(Self {
            inner,
            conn: Mutex::new(conn),
            path,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// Path of the cache file (`:memory:` for an in-memory cache).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hits and misses since this cache was opened.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// Number of vectors stored for this model.
    pub fn stored(&self) -> Result<u64, EmbedError> {
        let conn = self.lock()?;
        conn.query_row(
            "SELECT COUNT(*) FROM embeddings WHERE model = ?1",
            params![self.inner.model_id()],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| u64::try_from(n).unwrap_or(0))
        .map_err(|e| cache_err(&self.path, e))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Connection>, EmbedError> {
        self.conn.lock().map_err(|_| EmbedError::Cache {
            path: self.path.display().to_string(),
            reason: "cache lock poisoned".into(),
        })
    }
}

fn cache_err(path: &Path, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Cache {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn text_key(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_blob(b: &[u8], dim: usize) -> Option<Vec<f32>> {
    if b.len() != dim * 4 {
        return None;
    }
    Some(
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

impl<E: Embedder> Embedder for CachedEmbedder<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = self.inner.model_id().to_string();
        let dim = self.inner.dim();
        let keys: Vec<[u8; 32]> = texts.iter().map(|t| text_key(t)).collect();
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        {
            let conn = self.lock()?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT vector FROM embeddings WHERE model = ?1 AND text_sha256 = ?2",
                )
                .map_err(|e| cache_err(&self.path, e))?;
            for (slot, key) in out.iter_mut().zip(&keys) {
                let blob: Option<Vec<u8>> = stmt
                    .query_row(params![model, key.as_slice()], |r| r.get(0))
                    .optional()
                    .map_err(|e| cache_err(&self.path, e))?;
                *slot = blob.and_then(|b| from_blob(&b, dim));
            }
        }
        // Embed each distinct missing text once.
        let mut missing: BTreeMap<[u8; 32], Vec<usize>> = BTreeMap::new();
        for (i, slot) in out.iter().enumerate() {
            if slot.is_none() {
                missing.entry(keys[i]).or_default().push(i);
            }
        }
        let hits = out.iter().filter(|s| s.is_some()).count() as u64;
        let misses = texts.len() as u64 - hits;
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(misses, Ordering::Relaxed);
        if !missing.is_empty() {
            let order: Vec<(&[u8; 32], &Vec<usize>)> = missing.iter().collect();
            let miss_texts: Vec<&str> = order.iter().map(|(_, idx)| texts[idx[0]]).collect();
            let vecs = self.inner.embed(&miss_texts)?;
            if vecs.len() != miss_texts.len() {
                return Err(EmbedError::Inference(format!(
                    "inner embedder returned {} vectors for {} texts",
                    vecs.len(),
                    miss_texts.len()
                )));
            }
            let mut conn = self.lock()?;
            let tx = conn.transaction().map_err(|e| cache_err(&self.path, e))?;
            {
                let mut ins = tx
                    .prepare_cached(
                        "INSERT OR REPLACE INTO embeddings (model, text_sha256, vector) VALUES (?1, ?2, ?3)",
                    )
                    .map_err(|e| cache_err(&self.path, e))?;
                for ((key, idx), v) in order.iter().zip(&vecs) {
                    if v.len() != dim {
                        return Err(EmbedError::DimensionMismatch {
                            expected: dim,
                            got: v.len(),
                        });
                    }
                    ins.execute(params![model, key.as_slice(), to_blob(v)])
                        .map_err(|e| cache_err(&self.path, e))?;
                    for &i in idx.iter() {
                        out[i] = Some(v.clone());
                    }
                }
            }
            tx.commit().map_err(|e| cache_err(&self.path, e))?;
        }
        out.into_iter()
            .map(|v| v.ok_or_else(|| EmbedError::Inference("cache left a text unembedded".into())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashingEmbedder;
    use std::sync::atomic::AtomicUsize;

    /// Counts how many texts reach the inner embedder.
    struct Counting {
        inner: HashingEmbedder,
        calls: AtomicUsize,
    }
    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            self.inner.model_id()
        }
        fn dim(&self) -> usize {
            self.inner.dim()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(texts.len(), Ordering::Relaxed);
            self.inner.embed(texts)
        }
    }

    fn counting() -> Counting {
        Counting {
            inner: HashingEmbedder::new(32),
            calls: AtomicUsize::new(0),
        }
    }

    #[test]
    fn rerun_embeds_nothing_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/cache.sqlite");
        let texts = ["a", "b", "a", "c"];
        let first = {
            let c = CachedEmbedder::open(counting(), &path).unwrap();
            let v = c.embed(&texts).unwrap();
            assert_eq!(
                c.inner().calls.load(Ordering::Relaxed),
                3,
                "duplicates embedded once"
            );
            assert_eq!(c.stats(), CacheStats { hits: 0, misses: 4 });
            assert_eq!(c.stored().unwrap(), 3);
            v
        };
        let c = CachedEmbedder::open(counting(), &path).unwrap();
        let again = c.embed(&texts).unwrap();
        assert_eq!(first, again);
        assert_eq!(c.inner().calls.load(Ordering::Relaxed), 0);
        assert_eq!(c.stats().hit_rate(), 1.0);
        assert_eq!(again[0], HashingEmbedder::new(32).embed_one("a").unwrap());
    }

    #[test]
    fn models_do_not_share_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.sqlite");
        let a = CachedEmbedder::open(HashingEmbedder::new(16), &path).unwrap();
        a.embed(&["x"]).unwrap();
        drop(a);
        let b = CachedEmbedder::open(HashingEmbedder::new(8), &path).unwrap();
        let v = b.embed(&["x"]).unwrap();
        assert_eq!(v[0].len(), 8);
        assert_eq!(b.stats().misses, 1);
    }

    #[test]
    fn unopenable_path_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        let bad = file.join("cache.sqlite");
        let err = CachedEmbedder::open(HashingEmbedder::new(8), &bad)
            .err()
            .unwrap();
        assert!(err.to_string().contains("plain"), "{err}");
    }
}
