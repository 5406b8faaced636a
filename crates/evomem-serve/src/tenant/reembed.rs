//! Moving one tenant to another embedder while it serves: stage every
//! vector of the new model on the side, then swap the log, the store and
//! the index in one log rewrite.
//!
//! 1. *Stage* (no core lock but a short read lock to list the texts):
//!    every text an embedding of the log was made from
//!    ([`evomem_store::reembed::embedded_texts`]) is embedded by the target
//!    in batches at bulk priority, and each batch is appended to a stage
//!    file (`<data>/reembed/<tenant>.<embedder>.stage`) before the next
//!    starts. Searches, adds and loops go on with the old model meanwhile.
//!    A killed re-embed starts again from what the stage file holds.
//! 2. *Swap* ([`Tenant::rewrite_as`]): under the write gate (writers wait,
//!    readers go on with the old index), texts written since the listing
//!    are embedded too, the log is rewritten with every vector replaced
//!    ([`evomem_store::reembed::reembedded`]), written to the store through
//!    a second handle, read back, and the new index derived; then, under
//!    one short write lock, log, state, index, model and embedder are
//!    swapped together. A search or add that embedded with the old model
//!    and arrives after the swap embeds again (`read.rs`, `add.rs`,
//!    `edit.rs`); a loop request starts over (the generation moved).
//!
//! Locks: as [`Tenant::rewrite`]; the stage file is this tenant's alone
//! (one re-embed at a time per folder, `crate::reembed`).

use super::{is_kind, Tenant, MEMORY_KIND};
use crate::error::ApiError;
use evomem_core::Embedder;
use evomem_index::VectorIndex;
use evomem_store::reembed::{embedded_texts, reembedded};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// What re-embedding one tenant did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantReembed {
    /// The tenant.
    pub tenant: String,
    /// Its model before.
    pub from: String,
    /// Its model after.
    pub to: String,
    /// True when it already was on the target (nothing done).
    pub already: bool,
    /// Distinct texts the log's embeddings were made from.
    pub texts: usize,
    /// Of those, found in the stage file of an earlier, stopped run.
    pub resumed: usize,
    /// Embedded while staging, by this run.
    pub staged: usize,
    /// Written while staging and embedded during the swap.
    pub during_swap: usize,
    /// Ops whose embedding was replaced.
    pub ops_rewritten: usize,
    /// Seconds staging took.
    pub stage_s: f64,
    /// Milliseconds of the swap: writers of the tenant waited this long
    /// at most; readers did not wait but for the last write lock.
    pub swap_ms: u64,
    /// Milliseconds building the new index's HNSW graphs after the swap,
    /// at bulk priority (searches scan exactly meanwhile; nobody waits).
    #[serde(default)]
    pub graphs_ms: u64,
    /// What the swap checked.
    pub verified: Vec<String>,
}

/// Vectors staged for one tenant and target: kept in memory and appended
/// to a file, one record per text: the text's SHA-256 (32 bytes), then
/// `dim` little-endian `f32`s. A record cut short by a kill is dropped
/// when the file is read again.
struct Stage {
    path: PathBuf,
    file: std::fs::File,
    dim: usize,
    vectors: HashMap<[u8; 32], Vec<f32>>,
}

fn text_key(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

impl Stage {
    fn open(path: &Path, dim: usize) -> Result<Self, ApiError> {
        let io = |e: std::io::Error| {
            ApiError::Internal(format!("re-embed stage file {}: {e}", path.display()))
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut open = std::fs::OpenOptions::new();
        open.create(true).truncate(false).read(true).append(true);
        // Owner-only, as every file of the data folder.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        let mut file = open.open(path).map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let record = 32 + 4 * dim;
        let whole = bytes.len() - bytes.len() % record;
        if whole != bytes.len() {
            // The tail of a batch a kill cut short.
            file.set_len(whole as u64).map_err(io)?;
        }
        let mut vectors = HashMap::with_capacity(whole / record);
        for r in bytes[..whole].chunks_exact(record) {
            let mut key = [0u8; 32];
            key.copy_from_slice(&r[..32]);
            let v = r[32..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            vectors.insert(key, v);
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            dim,
            vectors,
        })
    }

    fn has(&self, text: &str) -> bool {
        self.vectors.contains_key(&text_key(text))
    }

    fn get(&self, text: &str) -> Option<Vec<f32>> {
        self.vectors.get(&text_key(text)).cloned()
    }

    /// Append one batch (one write, then flushed to the file system).
    fn append(&mut self, texts: &[&str], vectors: Vec<Vec<f32>>) -> Result<(), ApiError> {
        let mut buf = Vec::with_capacity(texts.len() * (32 + 4 * self.dim));
        for (t, v) in texts.iter().zip(&vectors) {
            if v.len() != self.dim {
                return Err(ApiError::Embed(format!(
                    "a vector of {} dimensions from an embedder of {}",
                    v.len(),
                    self.dim
                )));
            }
            buf.extend_from_slice(&text_key(t));
            for x in v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        }
        self.file
            .write_all(&buf)
            .and_then(|()| self.file.flush())
            .map_err(|e| {
                ApiError::Internal(format!("re-embed stage file {}: {e}", self.path.display()))
            })?;
        for (t, v) in texts.iter().zip(vectors) {
            self.vectors.insert(text_key(t), v);
        }
        Ok(())
    }
}

impl Tenant {
    /// Move this tenant to `target`'s model (module docs): stage every
    /// vector in batches of `batch` in `stage_path`, calling `progress`
    /// with (texts staged, texts) after each batch, then swap. Resumes
    /// from the stage file; does nothing when the tenant already is on the
    /// target. The stage file is removed after the swap.
    pub fn reembed(
        &self,
        target: Arc<dyn Embedder>,
        stage_path: &Path,
        batch: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<TenantReembed, ApiError> {
        let to = target.model_id().to_string();
        let from = self.read().model.clone();
        let mut out = TenantReembed {
            tenant: self.name.clone(),
            from: from.clone(),
            to: to.clone(),
            already: from == to,
            texts: 0,
            resumed: 0,
            staged: 0,
            during_swap: 0,
            ops_rewritten: 0,
            stage_s: 0.0,
            swap_ms: 0,
            graphs_ms: 0,
            verified: Vec::new(),
        };
        if out.already {
            let _ = std::fs::remove_file(stage_path);
            return Ok(out);
        }
        let started = Instant::now();
        let texts = embedded_texts(self.read().engine.log());
        let mut stage = Stage::open(stage_path, target.dim())?;
        out.texts = texts.len();
        out.resumed = texts.iter().filter(|t| stage.has(t)).count();
        let missing: Vec<&str> = texts
            .iter()
            .filter(|t| !stage.has(t))
            .map(String::as_str)
            .collect();
        let mut done = out.resumed;
        progress(done, texts.len());
        for chunk in missing.chunks(batch.max(1)) {
            let vectors = embed_all(self, target.as_ref(), chunk)?;
            stage.append(chunk, vectors)?;
            done += chunk.len();
            out.staged += chunk.len();
            progress(done, texts.len());
        }
        drop(texts);
        out.stage_s = started.elapsed().as_secs_f64();
        let swap = Instant::now();
        let mut during_swap = 0;
        let (report, verified, graphs) = self.rewrite_as(
            |log, every| {
                let texts = embedded_texts(log);
                let late: Vec<&str> = texts
                    .iter()
                    .filter(|t| !stage.has(t))
                    .map(String::as_str)
                    .collect();
                for chunk in late.chunks(batch.max(1)) {
                    let vectors = target
                        .embed(chunk)
                        .map_err(|e| ApiError::Embed(e.to_string()))?;
                    stage.append(chunk, vectors)?;
                }
                during_swap = late.len();
                Ok(reembedded(log, every, &to, |t| stage.get(t))?)
            },
            |plan, derived| {
                let mut verified = Vec::new();
                let mut memories = 0;
                for r in plan.state.iter_all() {
                    if let Some(e) = &r.embedding {
                        if e.model != to {
                            return Err(ApiError::Internal(format!(
                                "record {} still holds a {} vector",
                                r.id, e.model
                            )));
                        }
                        memories += usize::from(is_kind(r, MEMORY_KIND));
                    }
                }
                verified.push(format!("every vector in the store is {to}'s"));
                if derived.index.len() != memories {
                    return Err(ApiError::Internal(format!(
                        "the new index holds {} vectors for {memories} memories",
                        derived.index.len()
                    )));
                }
                verified.push(format!(
                    "the new index holds the {memories} memories' vectors"
                ));
                Ok(verified)
            },
            Some(target.clone()),
        )?;
        out.swap_ms = swap.elapsed().as_millis() as u64;
        if let Some(work) = graphs {
            let built = Instant::now();
            self.build_graphs_in_bulk(work);
            out.graphs_ms = built.elapsed().as_millis() as u64;
        }
        out.during_swap = during_swap;
        out.ops_rewritten = report.ops_edited;
        out.verified = verified;
        drop(stage);
        if let Err(e) = std::fs::remove_file(stage_path) {
            tracing::warn!("re-embed stage file {}: {e}", stage_path.display());
        }
        Ok(out)
    }
}

/// `texts` embedded by `target` at bulk priority, one vector each.
fn embed_all(t: &Tenant, target: &dyn Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>, ApiError> {
    let v = t
        .in_bulk(texts.len(), || target.embed(texts))?
        .map_err(|e| ApiError::Embed(e.to_string()))?;
    if v.len() != texts.len() {
        return Err(ApiError::Embed(format!(
            "{} vectors for {} texts",
            v.len(),
            texts.len()
        )));
    }
    Ok(v)
}
