//! Opening a tenant: its store, what is derived from its memory (the
//! index, the directory of items and users, the clock), its add pipeline's
//! threads, and the HNSW graphs a restart builds in the background. Also
//! the rebuild of what is derived (after a reload or a failed graph
//! update) and `verify`, which checks the store against the engine.
//!
//! Locks: `open` takes none (the tenant is not shared yet but for
//! `writer_thread`, set once); the graphs built after a restart and
//! `verify` take the write gate, then the core write lock ([`Tenant::write`]).
//! `derive` and `derive_exact` take no lock: they read the state and log
//! they are given.

use super::add::{AddJob, EmbeddedGroup};
use super::{
    bytes_of, is_kind, lock, memory_bytes, Directory, LoopState, Shared, Tenant, TenantCore,
    ITEM_KIND, MEMORY_KIND, USER_KIND,
};
use crate::error::{ApiError, ServeError};
use crate::index::{tenant_index, TenantIndex};
use evomem_core::{
    Catalog, Embedder, Item, ItemId, LoggedOp, MemoryId, MemoryState, Namespace, User, UserId,
};
use evomem_index::{GraphWork, VectorIndex};
use evomem_store::Engine;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc, Mutex, RwLock};

impl TenantCore {
    /// Rebuild everything derived from memory: index, catalog, users, clock;
    /// policies start again empty.
    pub(super) fn rebuild(&mut self) -> Result<(), String> {
        let d = derive(
            self.engine.state(),
            self.engine.log(),
            &self.model,
            self.dim,
            self.threshold,
        )?;
        drop(self.install(d));
        Ok(())
    }

    /// Put in what [`derive`] built; returns the index and directory it
    /// replaced (for the caller to drop once it has released the lock).
    pub(super) fn install(&mut self, d: Derived) -> (TenantIndex, Arc<Directory>) {
        self.gen += 1;
        self.clock = self.clock.max(d.last_time);
        self.bytes = d.bytes;
        (
            std::mem::replace(&mut self.index, d.index),
            std::mem::replace(&mut self.dir, d.dir),
        )
    }
}

/// What a tenant derives from its memory: the index, the directory of
/// items and users, and the latest logical time in the log.
pub(super) struct Derived {
    pub(super) index: TenantIndex,
    pub(super) dir: Arc<Directory>,
    pub(super) last_time: u64,
    /// Bytes of the live API memories ([`super::memory_bytes`]).
    pub(super) bytes: u64,
}

/// Build [`Derived`] from a state and its log (no lock needed: a user
/// deletion derives from its rewritten copy before installing it), with
/// the HNSW graphs of large namespaces bulk-loaded (in parallel).
pub(super) fn derive(
    state: &MemoryState,
    log: &[LoggedOp],
    model: &str,
    dim: usize,
    threshold: usize,
) -> Result<Derived, String> {
    let (mut d, work) = derive_exact(state, log, model, dim, threshold)?;
    let graphs = work.run().map_err(|e| format!("graphs: {e}"))?;
    d.index
        .put_graphs(graphs)
        .map_err(|e| format!("graphs: {e}"))?;
    Ok(d)
}

/// [`derive`] with the index exact only: the graphs of the namespaces
/// past the threshold are left to the caller ([`GraphWork`]), who may
/// build them while searches of those namespaces scan exactly (the same
/// answers, slower). A restart does this in the background
/// ([`Tenant::build_graphs_after_open`]).
pub(super) fn derive_exact(
    state: &MemoryState,
    log: &[LoggedOp],
    model: &str,
    dim: usize,
    threshold: usize,
) -> Result<(Derived, GraphWork), String> {
    let mut index = tenant_index(model, dim, threshold);
    let mut items: Vec<(usize, Item)> = Vec::new();
    let mut users: Vec<(usize, String)> = Vec::new();
    let mut vectors: Vec<(MemoryId, Namespace, &[f32])> = Vec::new();
    let mut bytes = 0u64;
    for r in state.iter_all() {
        if is_kind(r, MEMORY_KIND) {
            bytes += memory_bytes(r);
            if let Some(e) = &r.embedding {
                // Vectors of two models are not comparable: refuse rather
                // than mix them in one index (`serve reembed` moves a
                // folder from one model to another).
                if e.model != model {
                    return Err(format!(
                        "memory {} was embedded by `{}`, but this service embeds with `{model}`: \
                         start it with the embedder that wrote this data (`serve.embedder`), \
                         or move the data to this embedder with `evomem serve reembed --embedder NAME`",
                        r.id, e.model
                    ));
                }
                vectors.push((r.id.clone(), r.namespace.clone(), &e.vector));
            }
        } else if is_kind(r, ITEM_KIND) {
            let i = r
                .fields
                .get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("catalog item {} has no index", r.id))?;
            let str_list = |k: &str| -> Vec<String> {
                r.fields
                    .get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let mut text = BTreeMap::new();
            if let Some(t) = r.fields.get("text").and_then(Value::as_str) {
                if !t.is_empty() {
                    text.insert("description".to_string(), t.to_string());
                }
            }
            let token =
                r.id.as_str()
                    .strip_prefix("item:")
                    .unwrap_or("")
                    .to_string();
            items.push((
                i as usize,
                Item {
                    id: ItemId(i as u32),
                    token,
                    title: r.text.clone(),
                    text,
                    categories: str_list("categories"),
                    attributes: BTreeMap::new(),
                },
            ));
        } else if is_kind(r, USER_KIND) {
            let i = r
                .fields
                .get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("user record {} has no index", r.id))?;
            let token = r
                .namespace
                .as_str()
                .strip_prefix("user:")
                .unwrap_or("")
                .to_string();
            users.push((i as usize, token));
        }
    }
    items.sort_by_key(|(i, _)| *i);
    let mut catalog = Catalog::default();
    let mut item_ids = HashMap::new();
    for (i, item) in items {
        if i != catalog.items.len() {
            return Err(format!(
                "catalog indexes are not dense: expected {}, found {i}",
                catalog.items.len()
            ));
        }
        item_ids.insert(item.token.clone(), item.id);
        catalog.items.push(item);
    }
    let n_users = users.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let mut user_vec: Vec<User> = (0..n_users)
        .map(|i| User {
            id: UserId(i as u32),
            token: String::new(),
            attributes: BTreeMap::new(),
        })
        .collect();
    let mut user_ids = HashMap::new();
    for (i, token) in users {
        if let Some(u) = user_vec.get_mut(i) {
            u.token = token.clone();
        }
        user_ids.insert(token, UserId(i as u32));
    }
    let last_time = log
        .iter()
        .map(|o| o.provenance.logical_time.0)
        .max()
        .unwrap_or(0);
    let work = index
        .add_deferred(&vectors)
        .map_err(|e| format!("index: {e}"))?;
    let derived = Derived {
        index,
        dir: Arc::new(Directory {
            catalog,
            item_ids,
            users: user_vec,
            user_ids,
        }),
        last_time,
        bytes,
    };
    Ok((derived, work))
}

/// The embedder of a tenant whose store `engine` holds: the shared one,
/// unless the store's vectors are another model's that
/// [`Shared::embedders`] can give (a re-embed moved this tenant to its
/// target and stopped before the folder's embedder changed; or
/// `serve.embedder` names the folder's old embedder). Otherwise the shared
/// one, and [`derive`] refuses the foreign vectors with a message saying
/// what to do.
///
/// A store with no vector yet takes the model a re-embed run by this
/// service is moving the folder to, or moved it to
/// ([`crate::embedders::EmbedderSet::moving_to`]): the service's own
/// embedder stays the old one until a restart, and a tenant opened on
/// demand during or after the job must not write the old model's vectors
/// into the moved folder.
fn tenant_embedder(name: &str, engine: &Engine, shared: &Shared) -> Arc<dyn Embedder> {
    let model = super::stored_model(engine.state()).or_else(|| shared.embedders.moving_to());
    match model {
        Some(m) if m != shared.embedder.model_id() => match shared.embedders.for_model(&m) {
            Some(e) => {
                tracing::warn!(
                    "tenant {name}: its store (or, empty, the folder's manifest) is on {m}, not the service embedder's {} (a re-embed moved it); serving it with {m}",
                    shared.embedder.model_id()
                );
                e
            }
            None => shared.embedder.clone(),
        },
        _ => shared.embedder.clone(),
    }
}

/// Create the data folder readable by its owner only (0700) when it does
/// not exist; an existing folder keeps its mode.
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    if dir.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    Ok(())
}

impl Tenant {
    /// Open the tenant's store, rebuild what is derived, start its writer.
    pub fn open(name: &str, shared: Arc<Shared>) -> Result<Arc<Tenant>, ServeError> {
        let cfg = &shared.config;
        let store_err = |source| ServeError::Store {
            tenant: name.to_string(),
            source,
        };
        let engine = if cfg.is_postgres() {
            Engine::postgres_in(&cfg.store, &format!("evomem_t_{name}")).map_err(store_err)?
        } else {
            create_private_dir(&cfg.data_dir)?;
            Engine::sqlite(cfg.data_dir.join(format!("{name}.sqlite"))).map_err(store_err)?
        };
        let mut prefix = [0u8; 4];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut prefix);
        let embedder = tenant_embedder(name, &engine, &shared);
        let slot: super::EmbedderSlot = Arc::new(RwLock::new(embedder.clone()));
        let mut core = TenantCore {
            engine,
            index: tenant_index(embedder.model_id(), embedder.dim(), 1),
            clock: 0,
            dir: Arc::default(),
            gen: 0,
            id_prefix: hex::encode(prefix),
            next_id: 0,
            model: embedder.model_id().to_string(),
            dim: embedder.dim(),
            threshold: cfg.hnsw_threshold,
            peer_rewrites: Arc::default(),
            bytes: 0,
            follow: Some((slot.clone(), shared.embedders.clone())),
        };
        let (derived, graphs) = derive_exact(
            core.engine.state(),
            core.engine.log(),
            &core.model,
            core.dim,
            core.threshold,
        )
        .map_err(|message| ServeError::Load {
            tenant: name.to_string(),
            message,
        })?;
        drop(core.install(derived));
        let peer_rewrites = core.peer_rewrites.clone();
        let (tx, rx) = mpsc::sync_channel::<AddJob>(cfg.queue_depth);
        let indexed = AtomicUsize::new(core.index.len());
        let stored_bytes = std::sync::atomic::AtomicU64::new(core.bytes);
        let resident = std::sync::atomic::AtomicU64::new(core.resident_estimate());
        let permits = Arc::new(tokio::sync::Semaphore::new(cfg.tenant_workers));
        let tenant = Arc::new(Tenant {
            name: name.to_string(),
            core: RwLock::new(core),
            shared,
            writer: Mutex::new(Some(tx)),
            writer_thread: Mutex::new(None),
            loop_state: Mutex::new(LoopState::default()),
            indexed,
            permits,
            waiting: AtomicUsize::new(0),
            loop_turn: Arc::new(tokio::sync::Semaphore::new(1)),
            loop_waiting: AtomicUsize::new(0),
            write_turn: Arc::new(tokio::sync::Semaphore::new(1)),
            write_waiting: AtomicUsize::new(0),
            write_gate: Mutex::new(()),
            gate_current: std::sync::atomic::AtomicBool::new(false),
            peer_rewrites,
            reader: Mutex::new(None),
            queued_memories: AtomicUsize::new(0),
            log_index: Mutex::new(super::log_index::LogIndex::default()),
            stored_bytes,
            resident,
            working: AtomicUsize::new(0),
            embedder: slot,
        });
        // The add pipeline: one thread embeds groups, the writer commits
        // them, so the next group embeds while the last one commits. One
        // embedded group waits between them at most.
        let (embedded_tx, embedded_rx) = mpsc::sync_channel::<EmbeddedGroup>(1);
        let t = tenant.clone();
        let embed_stage = std::thread::Builder::new()
            .name(format!("evomem-embed-{name}"))
            .spawn(move || t.embed_loop(rx, embedded_tx))?;
        let t = tenant.clone();
        let handle = std::thread::Builder::new()
            .name(format!("evomem-writer-{name}"))
            .spawn(move || {
                t.writer_loop(embedded_rx);
                // The embed stage ended first (its sender closed the
                // channel the writer read): this join does not wait.
                let _ = embed_stage.join();
            })?;
        *lock(&tenant.writer_thread) = Some(handle);
        if !graphs.is_empty() {
            let t = tenant.clone();
            std::thread::Builder::new()
                .name(format!("evomem-graphs-{name}"))
                .spawn(move || t.build_graphs_after_open(graphs))?;
        }
        Ok(tenant)
    }

    /// Build the HNSW graphs of the namespaces past the threshold after a
    /// restart, in the background: the tenant answers at once, searching
    /// those namespaces exactly (the same answers, slower) until the
    /// graphs are in. Building them before answering took 40-60 s per
    /// start for three namespaces of 20,000+ vectors on a loaded 2-core
    /// machine. Writes made meanwhile are kept: a vector added to such a
    /// namespace waits in the exact tier (searched exactly) and is merged
    /// when the graph is put in, a removal is applied to the graph put in
    /// ([`evomem_index::NamespacedIndex::put_graphs`]). A graph goes back
    /// only into the index and namespace it was taken from: after a log
    /// rewrite or a reload the graphs were rebuilt with the index, so
    /// nothing is put in.
    fn build_graphs_after_open(self: Arc<Self>, work: GraphWork) {
        crate::priority::lower_current_thread_to(self.bulk());
        self.build_graphs(work);
    }

    /// Build the graphs `work` holds (no lock) and put them into the index
    /// they were taken from (under the core write lock, briefly): after a
    /// restart ([`Tenant::build_graphs_after_open`]) and after a re-embed's
    /// swap (`reembed.rs`).
    pub(super) fn build_graphs(&self, work: GraphWork) {
        let started = std::time::Instant::now();
        #[cfg(test)]
        std::thread::sleep(std::time::Duration::from_millis(
            super::tests::GRAPH_BUILD_DELAY_MS.load(std::sync::atomic::Ordering::SeqCst),
        ));
        let graphs = match work.run() {
            Ok(g) => g,
            Err(e) => {
                tracing::error!("tenant {}: graphs after open: {e}", self.name);
                return;
            }
        };
        let built = graphs.len();
        let kept = match self.write().index.put_graphs(graphs) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("tenant {}: graphs after open: {e}", self.name);
                return;
            }
        };
        tracing::info!(
            "tenant {}: {kept} of {built} HNSW graph(s) built after open or a re-embed put in ({} ms)",
            self.name,
            started.elapsed().as_millis()
        );
    }

    /// Check the store against the engine (crash tests, `readyz?verify`).
    pub fn verify(&self) -> Result<(), ApiError> {
        let mut core = self.write();
        if self.shared.config.is_postgres() {
            // Other instances may have written since (`sync_reads` off).
            core.sync()?;
        }
        core.engine.verify()?;
        let indexed = core.index.len();
        let memories = core
            .engine
            .state()
            .iter_all()
            .filter(|r| is_kind(r, MEMORY_KIND) && r.embedding.is_some())
            .count();
        if indexed != memories {
            return Err(ApiError::Internal(format!(
                "index holds {indexed} vectors for {memories} memories"
            )));
        }
        let bytes = bytes_of(core.engine.state());
        if bytes != core.bytes {
            return Err(ApiError::Internal(format!(
                "memories hold {bytes} bytes, counted {}",
                core.bytes
            )));
        }
        Ok(())
    }
}
