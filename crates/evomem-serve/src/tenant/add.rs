//! The group-commit add pipeline: `add` queues a job (bounded by
//! `serve.queue_memories` memories and `serve.queue_depth` jobs), the
//! embed thread groups waiting jobs and embeds them at bulk priority, and
//! the writer thread commits each group in one transaction and answers
//! its jobs, so the next group embeds while the last one commits.
//!
//! Locks: `add` takes `writer` alone; the embed thread takes none; the
//! writer thread takes the write gate with the store's writer lock and
//! catches up ([`Tenant::write_synced`]), stages under the core read lock,
//! commits without the core lock, installs under the core write lock, and
//! updates HNSW graphs without it (the gate held throughout).

use super::commit::api_batch;
use super::{kind, lock, memory_bytes, memory_out, CoreWrite, IdMinter, Tenant, MEMORY_KIND};
use crate::error::ApiError;
use crate::types::{MemoryOut, NewMemory};
use evomem_core::{Embedding, LogicalTime, MemoryId, MemoryOp, MemoryRecord, Namespace};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

pub(super) struct AddJob {
    pub(super) user: String,
    pub(super) memories: Vec<NewMemory>,
    /// The write's `Idempotency-Key`, stored with its commit (crate::idem).
    pub(super) key: Option<evomem_store::WriteKey>,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<Vec<MemoryOut>, ApiError>>,
}

/// A group of add jobs between the add pipeline's two stages.
pub(super) struct EmbeddedGroup {
    jobs: Vec<AddJob>,
    /// The embedder's model and one vector per memory in job order.
    vectors: Result<(String, Vec<Vec<f32>>), ApiError>,
}

impl Tenant {
    /// Queue memories for the group-commit writer and wait for the commit.
    pub async fn add(
        &self,
        user: String,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryOut>, ApiError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let n = memories.len();
        // Quotas, against what is stored and what waits for the writer.
        let adding: u64 = memories
            .iter()
            .map(|m| (m.text.len() + serde_json::to_vec(&m.metadata).map_or(0, |v| v.len())) as u64)
            .sum();
        let held = (
            (self.index_len() + self.queued_memories.load(Ordering::SeqCst)) as u64,
            self.stored_bytes(),
        );
        self.check_quota(held, n as u64, adding)?;
        // The cost bound: memories already waiting, not jobs (a 1,000-item
        // add and a 1-item add are not the same wait for the next caller).
        let cap = self.shared.config.queue_memories;
        let before = self.queued_memories.fetch_add(n, Ordering::SeqCst);
        if before > 0 && before + n > cap {
            self.queued_memories.fetch_sub(n, Ordering::SeqCst);
            return Err(ApiError::Overloaded {
                queue: "memory writer",
                retry_after_s: 1,
            });
        }
        {
            let w = lock(&self.writer);
            let sent = match w.as_ref() {
                None => Err(ApiError::ShuttingDown),
                Some(tx) => tx
                    .try_send(AddJob {
                        user,
                        memories,
                        key: crate::idem::task_key(),
                        reply,
                    })
                    .map_err(|e| match e {
                        mpsc::TrySendError::Full(_) => ApiError::Overloaded {
                            queue: "memory writer",
                            retry_after_s: 1,
                        },
                        mpsc::TrySendError::Disconnected(_) => ApiError::ShuttingDown,
                    }),
            };
            if let Err(e) = sent {
                self.queued_memories.fetch_sub(n, Ordering::SeqCst);
                return Err(e);
            }
        }
        rx.await.map_err(|_| ApiError::ShuttingDown)?
    }

    /// Stop the writer after it has committed everything queued.
    pub fn close(&self) {
        lock(&self.writer).take();
        if let Some(h) = lock(&self.writer_thread).take() {
            let _ = h.join();
        }
    }

    /// The add pipeline's first stage: group the add jobs waiting (up to
    /// `serve.group_max` memories), embed the group at bulk priority, hand
    /// it to the writer, and go on with the next group while the writer
    /// commits. Ends when the tenant closes (the job sender is dropped).
    pub(super) fn embed_loop(
        &self,
        rx: mpsc::Receiver<AddJob>,
        out: mpsc::SyncSender<EmbeddedGroup>,
    ) {
        let max = self.shared.config.group_max;
        while let Ok(first) = rx.recv() {
            let mut n = first.memories.len();
            let mut jobs = vec![first];
            while n < max {
                match rx.try_recv() {
                    Ok(j) => {
                        n += j.memories.len();
                        jobs.push(j);
                    }
                    Err(_) => break,
                }
            }
            let vectors = self.embed_group(&jobs);
            if out.send(EmbeddedGroup { jobs, vectors }).is_err() {
                return;
            }
        }
    }

    /// The add pipeline's second stage: commit each embedded group in one
    /// transaction and answer its jobs. This thread keeps normal priority:
    /// it takes the core lock to install each group. The group's bulk
    /// steps (staging and committing; graph updates) hold no lock a reader
    /// waits on and run at bulk priority through `in_bulk`.
    pub(super) fn writer_loop(&self, rx: mpsc::Receiver<EmbeddedGroup>) {
        while let Ok(g) = rx.recv() {
            let n: usize = g.jobs.iter().map(|j| j.memories.len()).sum();
            let results = self.commit_group(&g.jobs, g.vectors);
            self.queued_memories.fetch_sub(n, Ordering::SeqCst);
            for (job, res) in g.jobs.into_iter().zip(results) {
                let _ = job.reply.send(res);
            }
        }
    }

    /// A group's vectors, one per memory in job order, with the model of
    /// the tenant's embedder that made them.
    fn embed_group(&self, jobs: &[AddJob]) -> Result<(String, Vec<Vec<f32>>), ApiError> {
        let texts: Vec<&str> = jobs
            .iter()
            .flat_map(|j| j.memories.iter().map(|m| m.text.as_str()))
            .collect();
        let embedder = self.embedder();
        let model = embedder.model_id().to_string();
        match self.in_bulk(texts.len(), || embedder.embed(&texts))? {
            Ok(v) if v.len() == texts.len() => Ok((model, v)),
            Ok(v) => Err(ApiError::Embed(format!(
                "{} vectors for {} texts",
                v.len(),
                texts.len()
            ))),
            Err(e) => Err(ApiError::Embed(e.to_string())),
        }
    }

    /// Commit a group of add jobs, embedded by [`Tenant::embed_group`], in
    /// one transaction.
    fn commit_group(
        &self,
        jobs: &[AddJob],
        vectors: Result<(String, Vec<Vec<f32>>), ApiError>,
    ) -> Vec<Result<Vec<MemoryOut>, ApiError>> {
        let fail = |e: &ApiError| -> Vec<Result<Vec<MemoryOut>, ApiError>> {
            let (_, code) = e.status();
            jobs.iter()
                .map(|_| {
                    Err(match code {
                        "embed_error" => ApiError::Embed(e.to_string()),
                        _ => ApiError::Internal(e.to_string()),
                    })
                })
                .collect()
        };
        let (embedded_by, mut vectors) = match vectors {
            Ok(v) => v,
            Err(e) => return fail(&e),
        };
        let mut core = match self.write_synced() {
            Ok(c) => c,
            Err(e) => return fail(&e),
        };
        let model = core.model.clone();
        if embedded_by != model {
            // A re-embed swapped the tenant's model after this group was
            // embedded (`reembed.rs`): embed it again with the new one
            // (the gate, held, keeps the model from moving again).
            match self.embed_group(jobs) {
                Ok((m, v)) if m == model => vectors = v,
                Ok((m, _)) => {
                    return fail(&ApiError::Internal(format!(
                        "the tenant's model is {model}, its embedder's {m}"
                    )))
                }
                Err(e) => return fail(&e),
            }
        }
        let mut attempt = 0;
        loop {
            let (c, made, stored) = self.stage_and_store_adds(core, jobs, &vectors, &model);
            core = c;
            match stored {
                Ok(_) => {
                    core.bytes += made.iter().flatten().map(memory_bytes).sum::<u64>();
                    let out = self.index_added(core, &made);
                    let m = &self.shared.metrics;
                    m.ingested
                        .fetch_add(vectors.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    m.ingest_batches
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return out;
                }
                Err(e) if attempt < 3 && e.is_conflict() => {
                    // Another instance appended first (nothing of this
                    // commit was stored): catch up and retry. Any other
                    // error is final: a retry could store the adds twice.
                    tracing::warn!("tenant {}: commit raced ({e}); retrying", self.name);
                    attempt += 1;
                    if let Err(e) = core.sync() {
                        return fail(&e);
                    }
                }
                Err(evomem_store::StoreError::DuplicateKey { location, key }) => {
                    // One job's key was committed before (another instance
                    // ran it): nothing of the group was stored. Every job
                    // is told to retry; that one's retry finds its key.
                    let detail = format!(
                        "a write of this commit group (key `{key}`) was committed before; nothing was stored"
                    );
                    return jobs
                        .iter()
                        .map(|_| {
                            Err(ApiError::Store(evomem_store::StoreError::Conflict {
                                location: location.clone(),
                                detail: detail.clone(),
                            }))
                        })
                        .collect();
                }
                Err(e) => return fail(&ApiError::Store(e)),
            }
        }
    }

    /// Make an add group's records and stage them under the core *read*
    /// lock (the write gate, held through `core`, keeps other writers out,
    /// so nothing the staging read changes meanwhile), commit them with no
    /// core lock, then take the write lock only to install them. Readers of
    /// the tenant wait for nothing but the install: building and
    /// validating a thousand records took 4-20 ms under the write lock
    /// before (docs/notes/service-noisy-neighbours.md). Returns the write lock,
    /// the records made per job, and the commit's outcome.
    fn stage_and_store_adds<'a>(
        &'a self,
        core: CoreWrite<'a>,
        jobs: &[AddJob],
        vectors: &[Vec<f32>],
        model: &str,
    ) -> (
        CoreWrite<'a>,
        Vec<Vec<MemoryRecord>>,
        Result<usize, evomem_store::StoreError>,
    ) {
        let Some(handle) = core.engine.store_handle() else {
            // An ephemeral engine: stage and install at once.
            let mut core = core;
            let t = core.tick();
            let mut ids = core.ids();
            let (ops, made) = new_memories(&mut ids, jobs, vectors, model, t);
            core.next_id = ids.next;
            let (core, r) = self.store_and_install(core, api_batch(ops, t));
            return (core, made, r);
        };
        let gate = core.release_core();
        // At bulk priority: a read lock (readers share it, and no writer
        // can queue for the write lock while this thread holds the gate)
        // and the store's commit (no core lock).
        let staged_and_stored = self.in_bulk(vectors.len(), || {
            let (staged, made, t, ids) = {
                let view = self.read();
                let t = view.next_tick();
                let mut ids = view.ids();
                let (ops, made) = new_memories(&mut ids, jobs, vectors, model, t);
                let staged = view.engine.stage_creates(api_batch(ops, t));
                #[cfg(test)]
                super::tests::stage_slowly_if_asked(jobs);
                (staged, made, t, ids)
            };
            let keys = jobs.iter().filter_map(|j| j.key.clone()).collect();
            let stored =
                staged.and_then(|mut st| self.commit_staged(&handle, &mut st, keys).map(|()| st));
            (stored, made, t, ids)
        });
        let mut core = self.write_in(gate);
        let (stored, made, t, ids) = match staged_and_stored {
            Ok(x) => x,
            Err(e) => {
                let err = evomem_store::StoreError::Config(e.to_string());
                return (core, Vec::new(), Err(err));
            }
        };
        let installed = stored.and_then(|st| self.install_committed(&mut core, st));
        // Ids and clock move on whatever happened: skipping is harmless,
        // reuse after a partial failure would not be.
        core.clock = core.clock.max(t.0);
        core.next_id = core.next_id.max(ids.next);
        (core, made, installed)
    }

    /// Index the memories an add group committed (its core lock held):
    /// the exact index now; HNSW graphs of the namespaces touched are
    /// updated without the core lock (searches there scan exactly
    /// meanwhile), while the write gate keeps other writers out, and put
    /// back before the answer. Returns each job's memories as answered.
    fn index_added(
        &self,
        mut core: CoreWrite<'_>,
        made: &[Vec<MemoryRecord>],
    ) -> Vec<Result<Vec<MemoryOut>, ApiError>> {
        let mut out = Vec::with_capacity(made.len());
        let mut batch: Vec<(MemoryId, Namespace, &[f32])> = Vec::new();
        for recs in made {
            let mut mine = Vec::with_capacity(recs.len());
            for r in recs {
                if let Some(e) = &r.embedding {
                    batch.push((r.id.clone(), r.namespace.clone(), &e.vector));
                }
                mine.push(memory_out(r));
            }
            out.push(Ok(mine));
        }
        let work = match core.index.add_deferred(&batch) {
            Ok(w) => Some(w),
            Err(err) => {
                tracing::error!("tenant {}: index add: {err}", self.name);
                None
            }
        };
        if let Some(work) = work.filter(|w| !w.is_empty()) {
            let gate = core.release_core();
            let n = batch.len();
            let graphs = match self.in_bulk(n, || work.run()) {
                Ok(g) => g.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let mut core = self.write_in(gate);
            match graphs {
                Ok(g) => {
                    if let Err(err) = core.index.put_graphs(g) {
                        tracing::error!("tenant {}: graph update: {err}; rebuilding", self.name);
                        if let Err(e) = core.rebuild() {
                            tracing::error!("tenant {}: rebuild: {e}", self.name);
                        }
                    }
                }
                Err(err) => {
                    tracing::error!("tenant {}: graph update: {err}; rebuilding", self.name);
                    if let Err(e) = core.rebuild() {
                        tracing::error!("tenant {}: rebuild: {e}", self.name);
                    }
                }
            }
        }
        out
    }
}

/// The records and create ops of an add group at time `t`, one list of
/// records per job, with new ids and the group's vectors in order.
fn new_memories(
    ids: &mut IdMinter,
    jobs: &[AddJob],
    vectors: &[Vec<f32>],
    model: &str,
    t: LogicalTime,
) -> (Vec<evomem_core::PlannedOp>, Vec<Vec<MemoryRecord>>) {
    let mut ops = Vec::with_capacity(vectors.len());
    let mut made: Vec<Vec<MemoryRecord>> = Vec::with_capacity(jobs.len());
    let mut vi = vectors.iter();
    for j in jobs {
        let mut recs = Vec::with_capacity(j.memories.len());
        for m in &j.memories {
            let v = vi.next().cloned().unwrap_or_default();
            let id = ids.mint();
            let rec = MemoryRecord::new(
                id,
                Namespace::user(&j.user),
                kind(MEMORY_KIND),
                m.text.clone(),
                t,
            )
            .with_field("metadata", Value::Object(m.metadata.clone()))
            .with_embedding(Embedding {
                model: model.to_string(),
                vector: v,
            });
            ops.push(evomem_core::PlannedOp::new(
                MemoryOp::Create {
                    record: rec.clone(),
                },
                "add",
                "POST /v1/memories",
            ));
            recs.push(rec);
        }
        made.push(recs);
    }
    (ops, made)
}
