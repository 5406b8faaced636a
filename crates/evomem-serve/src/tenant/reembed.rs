//! Moving one tenant to another embedder while it serves: stage every
//! vector of the new model on the side, then the rewritten log in the
//! store's staging area, then swap in what was appended meanwhile.
//!
//! 1. *Stage* (no core lock but a short read lock to list the texts):
//!    every text an embedding of the log was made from
//!    ([`evomem_store::reembed::embedded_texts`]) is embedded by the target
//!    in batches at bulk priority, and each batch is appended to a stage
//!    file (`<data>/reembed/<tenant>.<embedder>.stage`) before the next
//!    starts. Searches, adds and loops go on with the old model meanwhile.
//!    A killed re-embed starts again from what the stage file holds.
//! 2. *Staged swap* ([`Tenant::staged_swap`]): the log is rewritten with
//!    every vector replaced up to a point (its length when this step
//!    starts), a part of [`STEP_OPS`] ops at a time, each part copied under
//!    a short read lock and written to the store's staging area
//!    ([`evomem_store::MemoryStore::staging`]: tables `stage_*` beside the
//!    live ones, in the SQLite file or the PostgreSQL schema) through a
//!    second connection; then the live records, read back and compared,
//!    and the new index derived. Writers and readers go on with the old
//!    model meanwhile (texts they add are embedded for the staging as it
//!    meets them).
//! 3. *Swap*: under the write gate, only the ops appended after the point
//!    (the tail) are embedded, rewritten and added to the staging area and
//!    the new index; the staging area becomes the live log in one store
//!    transaction ([`evomem_store::MemoryStore::swap_in_staged`], a rename
//!    of tables); then, under one short write lock, log, state, index,
//!    model and embedder are swapped together. Writers wait for the tail
//!    only ([`TenantReembed::swap_ms`], [`TenantReembed::tail_ops`]). A
//!    search or add that embedded with the old model and arrives after the
//!    swap embeds again (`read.rs`, `add.rs`, `edit.rs`); a loop request
//!    starts over (the generation moved). The replaced tables are dropped
//!    afterwards, a few hundred rows per transaction, and the HNSW graphs
//!    built at bulk priority.
//!
//! A kill leaves the store all old (before the swap's transaction: the
//! staging tables are dropped by the next run) or all new (after it: the
//! next run finds the tenant on the target and only clears what is left).
//! A log rewrite meanwhile (a user deletion) starts the staging again.
//!
//! Locks: steps 1 and 2 take the core read lock briefly, nothing else;
//! step 3 the write gate (with the store's writer lock on PostgreSQL),
//! the core read lock to copy the tail, and the core write lock for the
//! in-memory swap. The stage file is this tenant's alone (one re-embed at
//! a time per folder, `crate::reembed`).

use super::open::{derive_exact, Derived};
use super::{bytes_of, is_kind, Tenant, ITEM_KIND, MEMORY_KIND, USER_KIND};
use crate::error::ApiError;
use evomem_core::{Embedder, LoggedOp, MemoryId, MemoryOp, MemoryRecord};
use evomem_index::VectorIndex;
use evomem_store::reembed::{embedded_texts, Reembedder};
use evomem_store::{Commit, MemoryStore};
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
    /// Texts written while the job ran, after the vectors were listed:
    /// embedded as the log's staging or the swap met them.
    pub during_swap: usize,
    /// Ops appended after the staging point, rewritten during the swap
    /// (while writers waited): the tail.
    #[serde(default)]
    pub tail_ops: usize,
    /// Of [`TenantReembed::during_swap`], the texts embedded during the
    /// swap (while writers waited).
    #[serde(default)]
    pub tail_texts: usize,
    /// Ops whose embedding was replaced.
    pub ops_rewritten: usize,
    /// Seconds staging took.
    pub stage_s: f64,
    /// Seconds staging the rewritten log in the store's staging area
    /// (writers went on meanwhile).
    #[serde(default)]
    pub log_stage_s: f64,
    /// Milliseconds of the swap, from taking the write gate to the
    /// in-memory swap: writers of the tenant waited this long at most;
    /// readers did not wait but for the last write lock.
    pub swap_ms: u64,
    /// Milliseconds building the new index's HNSW graphs after the swap,
    /// at bulk priority (searches scan exactly meanwhile; nobody waits).
    #[serde(default)]
    pub graphs_ms: u64,
    /// What the swap checked.
    pub verified: Vec<String>,
}

/// One part of the log into a staging area: the texts of `ops` that
/// `stage` does not hold yet embedded by `target` (`batch` at a time) and
/// appended to it, then `ops` rewritten by `rw` with the staged vectors,
/// each rewritten piece committed to `area`, appended to `log`, and
/// followed by `after_commit`. Returns how many texts it embedded. The
/// staging pass and the swap's tail both go through here.
fn stage_part(
    ops: &[LoggedOp],
    (rw, stage, area, log): (
        &mut Reembedder,
        &mut Stage,
        &mut dyn MemoryStore,
        &mut Vec<LoggedOp>,
    ),
    target: &dyn Embedder,
    batch: usize,
    after_commit: &mut dyn FnMut(),
) -> Result<usize, ApiError> {
    let late: Vec<String> = rw
        .texts_of(ops)
        .into_iter()
        .filter(|t| !stage.has(t))
        .collect();
    for chunk in late.chunks(batch.max(1)) {
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let vectors = target
            .embed(&texts)
            .map_err(|e| ApiError::Embed(e.to_string()))?;
        stage.append(&texts, vectors)?;
    }
    for p in rw.push(ops, |t| stage.get(t))? {
        area.commit(&Commit {
            ops: &p.ops,
            upserts: &[],
            deletes: &[],
            snapshot: p.snapshot.as_ref().map(|s| (s.seq, s.at, &s.state)),
            keys: &[],
        })?;
        log.extend(p.ops);
        after_commit();
    }
    Ok(late.len())
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

/// Ops of the log copied and rewritten per step of the staging: each
/// step copies its ops under a short read lock.
const STEP_OPS: usize = 512;

/// Records written to the staging area per commit.
const STEP_RECORDS: usize = 1000;

/// How many times the staging starts again when the log was rewritten
/// (a user deletion, a hard delete) while it ran.
const TRIES: usize = 3;

/// What the staged swap did ([`Tenant::staged_swap`]).
struct Swapped {
    ops_rewritten: usize,
    tail_ops: usize,
    late_texts: usize,
    tail_texts: usize,
    log_stage_s: f64,
    swap_ms: u64,
    verified: Vec<String>,
    graphs: evomem_index::GraphWork,
}

/// The log staged up to a point ([`Tenant::stage_log`]).
struct StagedLog {
    area: Box<dyn MemoryStore>,
    rw: Reembedder,
    log: Vec<LoggedOp>,
    late_texts: usize,
}

impl Tenant {
    /// Move this tenant to `target`'s model (module docs): stage every
    /// vector in batches of `batch` in `stage_path`, calling `progress`
    /// with (texts staged, texts) after each batch, then the staged swap.
    /// Resumes from the stage file; does nothing but clear what an earlier
    /// run left when the tenant already is on the target. The stage file
    /// is removed after the swap.
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
            tail_ops: 0,
            tail_texts: 0,
            ops_rewritten: 0,
            stage_s: 0.0,
            log_stage_s: 0.0,
            swap_ms: 0,
            graphs_ms: 0,
            verified: Vec::new(),
        };
        if out.already {
            // A run killed after its swap left the replaced tables.
            self.clear_staging();
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
            crate::reembed::test_point(&self.name, "vectors-staged");
            done += chunk.len();
            out.staged += chunk.len();
            progress(done, texts.len());
        }
        drop(texts);
        out.stage_s = started.elapsed().as_secs_f64();
        let swapped = self.staged_swap(&target, &mut stage, batch)?;
        out.swap_ms = swapped.swap_ms;
        out.log_stage_s = swapped.log_stage_s;
        out.during_swap = swapped.late_texts + swapped.tail_texts;
        out.tail_texts = swapped.tail_texts;
        out.tail_ops = swapped.tail_ops;
        out.ops_rewritten = swapped.ops_rewritten;
        out.verified = swapped.verified;
        crate::reembed::test_point(&self.name, "swapped");
        self.clear_staging();
        let built = Instant::now();
        self.build_graphs_in_bulk(swapped.graphs);
        out.graphs_ms = built.elapsed().as_millis() as u64;
        drop(stage);
        if let Err(e) = std::fs::remove_file(stage_path) {
            tracing::warn!("re-embed stage file {}: {e}", stage_path.display());
        }
        Ok(out)
    }

    /// Drop what staged swaps left in the store (the replaced tables, a
    /// staging area given up), at bulk priority and without any lock of
    /// this tenant: the store's own transactions are short. A failure is
    /// logged; what is left is dropped by the next re-embed.
    fn clear_staging(&self) {
        let cleared = crate::priority::run_bulk(self.bulk(), || -> Result<(), ApiError> {
            Ok(self.second_store()?.clear_staging()?)
        });
        match cleared {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("tenant {}: clearing the staging area: {e}", self.name),
            Err(e) => tracing::warn!("tenant {}: bulk thread: {e}", self.name),
        }
    }

    /// Stage the rewritten log, then swap (module docs, steps 2 and 3);
    /// started again when the log is rewritten meanwhile, at most
    /// [`TRIES`] times.
    fn staged_swap(
        &self,
        target: &Arc<dyn Embedder>,
        stage: &mut Stage,
        batch: usize,
    ) -> Result<Swapped, ApiError> {
        for attempt in 1..=TRIES {
            if let Some(s) = self.try_staged_swap(target, stage, batch)? {
                return Ok(s);
            }
            tracing::info!(
                "tenant {}: the log was rewritten while the re-embed staged it (attempt {attempt} of {TRIES})",
                self.name
            );
        }
        Err(ApiError::Internal(format!(
            "the log was rewritten (a deletion) while the re-embed staged it, {TRIES} times; run it again"
        )))
    }

    /// One try of [`Tenant::staged_swap`]: `None` when the log was
    /// rewritten meanwhile (nothing changed; the staging area is left for
    /// the next try to drop).
    fn try_staged_swap(
        &self,
        target: &Arc<dyn Embedder>,
        stage: &mut Stage,
        batch: usize,
    ) -> Result<Option<Swapped>, ApiError> {
        let to = target.model_id().to_string();
        let (epoch, point, every, threshold) = {
            let core = self.read();
            (
                core.engine.log_epoch(),
                core.engine.log().len(),
                core.engine.snapshot_every(),
                core.threshold,
            )
        };
        let began = Instant::now();
        let mut live = self.second_store()?;
        let staged = crate::priority::run_bulk(self.bulk(), || {
            let Some(staged) = self.stage_log(
                live.as_mut(),
                target.as_ref(),
                stage,
                batch,
                (epoch, point, every),
            )?
            else {
                return Ok(None);
            };
            let (derived, graphs) =
                derive_exact(staged.rw.state(), &staged.log, &to, target.dim(), threshold)
                    .map_err(ApiError::Internal)?;
            Ok::<_, ApiError>(Some((staged, derived, graphs)))
        })
        .map_err(|e| ApiError::Internal(format!("bulk thread: {e}")))??;
        let Some((staged, mut derived, mut graphs)) = staged else {
            return Ok(None);
        };
        let log_stage_s = began.elapsed().as_secs_f64();
        crate::reembed::test_point(&self.name, "log-staged");
        let StagedLog {
            mut area,
            mut rw,
            mut log,
            late_texts,
        } = staged;
        let mut verified = vec![
            "the staging area's log and records equal the rewritten log and its state".to_string(),
        ];

        // 3. The swap: writers wait from here.
        let mut gate = self.gate()?;
        let swap = Instant::now();
        if let Some(f) = self.news()? {
            self.write_in(None).take_in(f)?;
        }
        self.caught_up_under(&mut gate);
        let tail = {
            let core = self.read();
            if core.engine.log_epoch() != epoch {
                return Ok(None);
            }
            core.engine.log()[point..].to_vec()
        };
        let last = (point + tail.len()) as u64;
        let tail_texts = stage_part(
            &tail,
            (&mut rw, &mut *stage, &mut *area, &mut log),
            target,
            batch,
            &mut || {},
        )?;
        let touched = rw.take_touched();
        let upserts: Vec<&MemoryRecord> =
            touched.iter().filter_map(|id| rw.state().get(id)).collect();
        let deletes: Vec<MemoryId> = touched
            .iter()
            .filter(|id| rw.state().get(id).is_none())
            .cloned()
            .collect();
        area.commit(&Commit {
            ops: &[],
            upserts: &upserts,
            deletes: &deletes,
            snapshot: None,
            keys: &[],
        })?;
        drop((upserts, deletes));
        // The new index follows the tail: its memories' vectors, or, when
        // the tail changed the directory (a new item or user), derived
        // again.
        let structural = tail.iter().any(|o| {
            matches!(&o.op, MemoryOp::Create { record }
                if is_kind(record, ITEM_KIND) || is_kind(record, USER_KIND))
        });
        if structural {
            (derived, graphs) = derive_exact(rw.state(), &log, &to, target.dim(), threshold)
                .map_err(ApiError::Internal)?;
        } else {
            for id in &touched {
                let live_vector = rw
                    .state()
                    .get(id)
                    .filter(|r| is_kind(r, MEMORY_KIND))
                    .and_then(|r| r.embedding.as_ref().map(|e| (r.namespace.clone(), e)));
                match live_vector {
                    Some((ns, e)) => derived
                        .index
                        .add(id.clone(), ns, &e.vector)
                        .map_err(|e| ApiError::Internal(e.to_string()))?,
                    None => {
                        derived.index.remove(id);
                    }
                }
            }
            derived.bytes = bytes_of(rw.state());
            derived.last_time = derived.last_time.max(
                tail.iter()
                    .map(|o| o.provenance.logical_time.0)
                    .max()
                    .unwrap_or(0),
            );
        }
        check_swap(rw.state(), &derived, &to, &mut verified)?;
        crate::reembed::test_point(&self.name, "tail-staged");
        live.swap_in_staged(area, last)?;
        drop(live);
        crate::reembed::test_point(&self.name, "store-swapped");
        verified.push(format!(
            "the store's log was swapped at op {last}, {} op(s) after the staging point",
            tail.len()
        ));
        let ops_rewritten = rw.edited();
        let last_snapshot = rw.last_snapshot_seq();
        let state = rw.into_state();
        let mut core = self.write_in(Some(gate));
        let old = (
            core.engine.adopt_rewrite(log, state, last_snapshot),
            core.install(derived),
        );
        core.model = to.clone();
        core.dim = target.dim();
        *match self.embedder.write() {
            Ok(e) => e,
            Err(p) => p.into_inner(),
        } = target.clone();
        drop(core);
        let swap_ms = swap.elapsed().as_millis() as u64;
        // Freeing the replaced log, records and index once readers and
        // writers are free to go on, at bulk priority (as a log rewrite).
        if let Err(e) = crate::priority::run_bulk(self.bulk(), move || drop(old)) {
            tracing::warn!("tenant {}: bulk thread for freeing: {e}", self.name);
        }
        Ok(Some(Swapped {
            ops_rewritten,
            tail_ops: tail.len(),
            late_texts,
            tail_texts,
            log_stage_s,
            swap_ms,
            verified,
            graphs,
        }))
    }

    /// Step 2 (module docs), no lock but short read locks: the log up to
    /// `point` rewritten into a new staging area of `live`, a part at a
    /// time; texts written since the vectors were staged embedded as met
    /// (at bulk priority: the caller runs this on a bulk thread); the
    /// records written; then all of it read back and compared. `None` when
    /// the log was rewritten (its epoch moved from `epoch`) meanwhile.
    fn stage_log(
        &self,
        live: &mut dyn MemoryStore,
        target: &dyn Embedder,
        stage: &mut Stage,
        batch: usize,
        (epoch, point, every): (u64, usize, u64),
    ) -> Result<Option<StagedLog>, ApiError> {
        let mut area = live.staging()?;
        let mut rw = Reembedder::new(target.model_id(), every);
        let mut log = Vec::with_capacity(point);
        let mut late_texts = 0;
        let mut at = 0;
        while at < point {
            let end = (at + STEP_OPS).min(point);
            let ops = {
                let core = self.read();
                if core.engine.log_epoch() != epoch {
                    return Ok(None);
                }
                core.engine.log()[at..end].to_vec()
            };
            late_texts += stage_part(
                &ops,
                (&mut rw, stage, &mut *area, &mut log),
                target,
                batch,
                &mut || crate::reembed::test_point(&self.name, "log-staging"),
            )?;
            at = end;
        }
        rw.take_touched();
        let records: Vec<&MemoryRecord> = rw.state().iter_all().collect();
        for chunk in records.chunks(STEP_RECORDS) {
            area.commit(&Commit {
                ops: &[],
                upserts: chunk,
                deletes: &[],
                snapshot: None,
                keys: &[],
            })?;
        }
        // Read back, a part at a time, and compare.
        let mut from = 0;
        while from < log.len() {
            let end = (from + STEP_OPS).min(log.len());
            if area.load_ops(from as u64, end as u64)? != log[from..end] {
                return Err(ApiError::Internal(format!(
                    "the staging area's ops {}..{end} differ from the rewritten log",
                    from + 1
                )));
            }
            from = end;
        }
        let stored = area.load_records()?;
        if stored.len() != records.len() || stored.iter().zip(&records).any(|(a, b)| a != *b) {
            return Err(ApiError::Internal(
                "the staging area's records differ from the rewritten log's state".into(),
            ));
        }
        drop((stored, records));
        Ok(Some(StagedLog {
            area,
            rw,
            log,
            late_texts,
        }))
    }
}

/// Check the swap's result before it is put in: every vector of `state`
/// is `to`'s, and the new index holds exactly the memories' vectors.
fn check_swap(
    state: &evomem_core::MemoryState,
    derived: &Derived,
    to: &str,
    verified: &mut Vec<String>,
) -> Result<(), ApiError> {
    let mut memories = 0;
    for r in state.iter_all() {
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
    Ok(())
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
