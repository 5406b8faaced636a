//! Changes to one memory that keep its history: an update of its text
//! (re-embedded) or metadata, and a soft delete (a `Forget` op; the text
//! stays in the log, `history` and `as_of` until a hard delete).
//!
//! Locks: the embedding of a new text runs with no lock; then the write
//! gate with the store's writer lock and the core write lock
//! ([`Tenant::write_synced`]), released and retaken around the store's
//! commit ([`Tenant::store_and_install`]).

use super::commit::api_batch;
use super::{memory_bytes, memory_out, Tenant};
use crate::error::ApiError;
use crate::types::{Deleted, MemoryOut, UpdateRequest};
use evomem_core::{Embedding, MemoryId, MemoryOp};
use evomem_index::VectorIndex;
use serde_json::Value;
use std::collections::BTreeMap;

impl Tenant {
    /// Change a memory's text (re-embedded) or metadata.
    pub fn update(&self, id: &str, req: UpdateRequest) -> Result<MemoryOut, ApiError> {
        let embed = |t: &str| -> Result<Embedding, ApiError> {
            let e = self.embedder();
            Ok(Embedding {
                model: e.model_id().to_string(),
                vector: e.embed_one(t).map_err(|e| ApiError::Embed(e.to_string()))?,
            })
        };
        let mut embedding = req.text.as_deref().map(embed).transpose()?;
        let mut core = self.write_synced()?;
        if let (Some(e), Some(t)) = (&embedding, &req.text) {
            if e.model != core.model {
                // A re-embed swapped the model meanwhile (one text: embed
                // it again under the lock rather than start over).
                embedding = Some(embed(t)?);
            }
        }
        let mid = MemoryId::new(id);
        let old = core.memory(id)?;
        let old_bytes = memory_bytes(old);
        let new_bytes = {
            let text = req.text.as_deref().unwrap_or(&old.text).len();
            let meta = match &req.metadata {
                Some(m) => serde_json::to_vec(m).map_or(0, |v| v.len()),
                None => old
                    .fields
                    .get("metadata")
                    .and_then(|m| serde_json::to_vec(m).ok())
                    .map_or(0, |v| v.len()),
            };
            (text + meta) as u64
        };
        let held = core.bytes.saturating_sub(old_bytes);
        self.check_quota((core.index.len() as u64, held), 0, new_bytes)?;
        let mut fields = BTreeMap::new();
        if let Some(m) = req.metadata {
            fields.insert("metadata".to_string(), Value::Object(m));
        }
        let t = core.tick();
        let op = MemoryOp::UpdateFields {
            id: mid.clone(),
            fields,
            text: req.text,
            embedding: embedding.clone(),
        };
        let ops = vec![evomem_core::PlannedOp::new(
            op,
            "update",
            "PATCH /v1/memories",
        )];
        let (mut core, stored) = self.store_and_install(core, api_batch(ops, t));
        stored?;
        let rec = core
            .engine
            .state()
            .get(&mid)
            .cloned()
            .ok_or_else(|| ApiError::Internal("updated memory vanished".into()))?;
        core.bytes = core.bytes.saturating_sub(old_bytes) + memory_bytes(&rec);
        if let Some(e) = &rec.embedding {
            core.index
                .add(mid, rec.namespace.clone(), &e.vector)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
        }
        Ok(memory_out(&rec))
    }

    /// Forget one memory.
    pub fn delete(&self, id: &str) -> Result<Deleted, ApiError> {
        let mut core = self.write_synced()?;
        let mid = MemoryId::new(id);
        let old_bytes = memory_bytes(core.memory(id)?);
        let t = core.tick();
        let ops = vec![evomem_core::PlannedOp::new(
            MemoryOp::Forget { id: mid.clone() },
            "delete",
            "DELETE /v1/memories",
        )];
        let (mut core, stored) = self.store_and_install(core, api_batch(ops, t));
        stored?;
        core.bytes = core.bytes.saturating_sub(old_bytes);
        core.index.remove(&mid);
        Ok(Deleted {
            id: id.to_string(),
            deleted: true,
            hard: false,
            verified: Vec::new(),
        })
    }
}
