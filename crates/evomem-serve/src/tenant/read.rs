//! The tenant's reads: one memory, a user's top-k for a query, a memory's
//! history, a user's memories (now, or `as_of` a time through
//! [`Tenant::state_as_of`]), and the inspector's view of the op log and
//! state (`read_log`); and whether a keyed write was committed
//! ([`Tenant::committed_key`], for crate::idem).
//!
//! Locks: the core read lock, shared with other readers, after catching
//! up when `serve.sync_reads` is on ([`Tenant::read_synced`], which may
//! take the write gate briefly); `as_of` listings take `reader` alone.

use super::{is_kind, memory_out, Tenant, MEMORY_KIND};
use crate::error::ApiError;
use crate::types::{HistoryEntry, HistoryResponse, MemoryOut, SearchHit, UserMemories};
use evomem_core::{LoggedOp, LogicalTime, MemoryId, MemoryOp, MemoryState, Namespace};
use evomem_index::VectorIndex;
use serde_json::{Map, Value};

impl Tenant {
    /// The request digest a commit of this tenant stored with write key
    /// `key` (crate::idem), if one did; `None` for a tenant with no store.
    pub fn committed_key(&self, key: &str) -> Result<Option<[u8; 32]>, ApiError> {
        let handle = self.read().engine.store_handle();
        match handle {
            Some(h) => Ok(h.committed_key(key)?),
            None => Ok(None),
        }
    }

    /// One memory.
    pub fn get(&self, id: &str) -> Result<MemoryOut, ApiError> {
        self.read_synced()?.memory(id).map(memory_out)
    }

    /// Top-k of a user's memories for `text`, embedded by `model` as
    /// `query` (the service's batched query embedder). When the tenant's
    /// model is another one (a re-embed swapped it, `reembed.rs`), the
    /// text is embedded again by the tenant's own embedder first.
    pub fn search_text(
        &self,
        user: &str,
        (model, text, query): (&str, &str, &[f32]),
        k: usize,
        filter: &Map<String, Value>,
    ) -> Result<Vec<SearchHit>, ApiError> {
        let mut own: Option<(String, Vec<f32>)> = None;
        for _ in 0..3 {
            let core = self.read_synced()?;
            let (m, q) = match &own {
                Some((m, q)) => (m.as_str(), q.as_slice()),
                None => (model, query),
            };
            if core.model == m {
                return self.search_in(&core, user, q, k, filter);
            }
            drop(core);
            let e = self.embedder();
            let v = e
                .embed_one(text)
                .map_err(|e| ApiError::Embed(e.to_string()))?;
            own = Some((e.model_id().to_string(), v));
        }
        Err(ApiError::Internal(
            "the tenant's embedder changed three times during one search".into(),
        ))
    }

    /// Top-k of a user's memories for a query embedded by the tenant's
    /// embedder.
    #[cfg(test)]
    pub fn search(
        &self,
        user: &str,
        query: &[f32],
        k: usize,
        filter: &Map<String, Value>,
    ) -> Result<Vec<SearchHit>, ApiError> {
        let core = self.read_synced()?;
        self.search_in(&core, user, query, k, filter)
    }

    fn search_in(
        &self,
        core: &super::TenantCore,
        user: &str,
        query: &[f32],
        k: usize,
        filter: &Map<String, Value>,
    ) -> Result<Vec<SearchHit>, ApiError> {
        let ns = Namespace::user(user);
        let err = |e: evomem_index::IndexError| ApiError::Internal(e.to_string());
        let hits = if filter.is_empty() {
            core.index
                .search(query, k, std::slice::from_ref(&ns))
                .map_err(err)?
        } else {
            let every = core.index.namespace_len(&ns);
            core.index
                .search_exact(query, every, Some(std::slice::from_ref(&ns)))
                .map_err(err)?
        };
        let mut out = Vec::with_capacity(k.min(hits.len()));
        for (id, score) in hits {
            let Some(r) = core.user_memory(user, &id) else {
                continue;
            };
            let meta = r.fields.get("metadata").and_then(Value::as_object);
            if filter
                .iter()
                .all(|(k, v)| meta.and_then(|m| m.get(k)) == Some(v))
            {
                out.push(SearchHit {
                    memory: memory_out(r),
                    score,
                });
                if out.len() == k {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Every op that concerned a memory, oldest first.
    /// The log's index (`log_index.rs`) finds them without a scan.
    pub fn history(&self, id: &str) -> Result<HistoryResponse, ApiError> {
        let mid = MemoryId::new(id);
        let (history, is_memory) = self.read_indexed(|log, _, index| {
            let mut is_memory = false;
            let mut history = Vec::new();
            for &at in index.record_ops(&mid) {
                let Some(o) = log.get(at) else { continue };
                if let MemoryOp::Create { record } = &o.op {
                    is_memory |= is_kind(record, MEMORY_KIND);
                }
                history.push(history_entry(o));
            }
            (history, is_memory)
        })?;
        if history.is_empty() || !is_memory {
            return Err(ApiError::NotFound {
                what: "memory",
                id: id.to_string(),
            });
        }
        Ok(HistoryResponse {
            id: id.to_string(),
            history,
        })
    }

    /// A user's memories now, or as they stood at `as_of` (Unix ms), in id
    /// order; at most `limit` of them after the id `cursor` (a seek in the
    /// user's namespace, not a walk from its start), with the cursor of the
    /// next page when there is one.
    pub fn user_memories(
        &self,
        user: &str,
        as_of: Option<u64>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<UserMemories, ApiError> {
        let ns = Namespace::user(user);
        let after = cursor.map(MemoryId::new);
        let mut next_cursor = None;
        let mut list = |state: &MemoryState| -> Vec<MemoryOut> {
            let mut page: Vec<MemoryOut> = state
                .in_namespace_after(&ns, after.as_ref())
                .filter(|r| is_kind(r, MEMORY_KIND))
                .take(limit.saturating_add(1))
                .map(memory_out)
                .collect();
            if page.len() > limit {
                page.truncate(limit);
                next_cursor = page.last().map(|m| m.id.clone());
            }
            page
        };
        let memories = match as_of {
            None => list(self.read_synced()?.engine.state()),
            Some(t) => list(&self.state_as_of(LogicalTime(t))?),
        };
        Ok(UserMemories {
            user_id: user.to_string(),
            as_of_ms: as_of,
            memories,
            next_cursor,
        })
    }

    /// `f` over the op log and the live state, under the core read lock
    /// (shared with other readers; a writer's install waits for `f`), after
    /// catching up like every read. For the inspector's `/ui/api` reads:
    /// `f` should copy out what it needs and leave the rest of the work for
    /// after.
    pub fn read_log<T>(
        &self,
        f: impl FnOnce(&[LoggedOp], &MemoryState) -> T,
    ) -> Result<T, ApiError> {
        let core = self.read_synced()?;
        Ok(f(core.engine.log(), core.engine.state()))
    }
}

fn history_entry(o: &LoggedOp) -> HistoryEntry {
    HistoryEntry {
        seq: o.seq,
        op: o.op.name().to_string(),
        policy: o.provenance.policy.clone(),
        label: o.provenance.label.clone(),
        reason: o.provenance.reason.clone(),
        logical_time: o.provenance.logical_time.0,
        wall_time_ms: o.provenance.wall_time_ms,
        body: serde_json::to_value(&o.op).unwrap_or(Value::Null),
    }
}
