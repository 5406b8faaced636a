//! One tenant: its own engine and store (a SQLite file, or a PostgreSQL
//! schema), its index, its item catalog and users, its policies, and a
//! group-commit add pipeline (an embed thread, then the writer thread).
//!
//! Tenants share nothing but the embedder and the LLM hub, so no query can
//! reach another tenant's records: the tenant is chosen from the API key
//! before any handler runs, and every read goes through that tenant's engine.
//!
//! Records the service writes, all through ops (so the op log, time travel
//! and user deletion cover them):
//! - `memory` records (namespace `user:<id>`): the API's memories, with
//!   their embedding; the only kind the memory endpoints show;
//! - `service_user` records (namespace `user:<id>`): the user's dense index
//!   for the policies;
//! - `decision` records (namespace `user:<id>`): what `recommend` decided and
//!   the usage trace, so that feedback works after a restart;
//! - `catalog_item` records (namespace `catalog`): the items the loop saw.
//!
//! Policies keep only derived state; after a restart they are rebuilt empty
//! and read their memory from the engine again.
//!
//! Logical time is the service clock: Unix milliseconds, made strictly
//! increasing per tenant, so that "memory as of t" is a wall-clock question.
//!
//! Locking. Reads (get, search, list, history) take the tenant's core lock
//! for reading; writes take it for writing only for in-memory steps, and
//! never while the store commits. Every writer first takes the write gate
//! (one writer of the tenant at a time in this process), then commits in
//! three steps ([`Tenant::store_and_install`]): under a short write lock
//! it validates its ops on the engine and stages them (applied, copied,
//! undone: not visible); without the core lock it stores them in one
//! transaction, with the periodic snapshot when one is due (taken from the
//! state under the read lock, which readers share); under a second short
//! write lock it installs them in the engine and the index. So reads never
//! wait for a commit or a snapshot, and never see a write before it is
//! durable. Slow work never runs under the core lock: adds embed before their writer
//! takes it, and the loop endpoints (events, recommend, feedback) work in
//! three steps. (1) Under a short lock they copy what the policy reads: the
//! user's own records (every record of the user's namespace but the API's
//! memories, which no serving policy reads) and the shared directory of
//! items and users. (2) Without the core lock they embed items, run the
//! policy and call the rank role, planning every op of the request. (3)
//! Under a short write lock they commit all those ops in one transaction,
//! after checking that nothing they read was changed meanwhile (a
//! generation number moves with every change of the directory or of
//! policy records from outside the loop, e.g. a user deletion or another
//! instance's write); when it was, they start over (at most three times).
//! The loop endpoints of one tenant run one at a time (`loop_state`), which
//! is what keeps the policies' in-memory state in step with the store.
//!
//! Log rewrites (user deletion, hard delete) hold a write gate that every
//! writer takes before the core write lock, and do their slow work (plan,
//! store rewrite and vacuum through a second connection, read-back,
//! index rebuild) without the core lock; they swap the result in under a
//! short write lock ([`Tenant::rewrite`]). `as_of` listings replay on a
//! second connection, in one consistent read, without the core lock.
//!
//! On PostgreSQL, catching up with other instances' writes queries the
//! store without the core lock ([`Tenant::news`]); the write lock is taken
//! only to take in what was found.
//!
//! Files. This one holds the tenant's types and their invariants, the
//! record kinds, and the lock primitives every other file goes through
//! (`read`, `write`, `gate`, `write_in`); each family of operations has a
//! room of its own, which says in its header what it owns and which locks
//! it takes:
//! - `open.rs`: opening a tenant, deriving the index and directory from
//!   memory, the graphs built after a restart, `verify`;
//! - `workers.rs`: the read permits, the write turn and the loop turn;
//! - `add.rs`: the group-commit add pipeline (embed thread, writer thread);
//! - `commit.rs`: the three-step commit every writer uses (stage, store,
//!   install) and bulk priority;
//! - `edit.rs`: updates and soft deletes of one memory;
//! - `rewrite.rs`: log rewrites (hard delete, user deletion);
//! - `read.rs`: get, search, history, listings and the inspector's reads;
//! - `log_index.rs`: the op log by user and by record, for history and
//!   the inspector's per-user reads;
//! - `as_of.rs`: time travel, replayed on a second connection;
//! - `sync.rs`: catching up with other instances (PostgreSQL);
//! - `reembed.rs`: moving the tenant to another embedder (stage, swap);
//! - `loops.rs`: the loop endpoints' machinery, `events` and `feedback`;
//! - `recommend.rs`: `recommend` and what its decision records keep.
//!
//! Lock order, outermost first; a file takes a suffix of it, never an
//! earlier lock while holding a later one: one of the loop turn, the write
//! turn or a read permit (async, `workers.rs`; never two of them),
//! `loop_state`, `write_gate`, the store's writer lock
//! (PostgreSQL; taken by `gate`, which reads the core briefly for the
//! store handle first), the core lock. `reader` (the `as_of` connection),
//! `writer` and `writer_thread` are taken alone; `log_index` only under the
//! core read lock, with nothing inside it.

mod add;
mod as_of;
mod commit;
mod edit;
mod log_index;
pub(crate) use log_index::LogIndex;
mod loops;
mod open;
mod read;
mod recommend;
mod reembed;
pub use reembed::TenantReembed;
mod rewrite;
mod sync;
#[cfg(test)]
mod tests;
mod workers;

use crate::config::ServeConfig;
use crate::error::ApiError;
use crate::index::{tenant_index, TenantIndex};
use crate::lock;
use crate::types::*;
use add::AddJob;
use evomem_core::{
    Catalog, Embedder, ItemId, LogicalTime, MemoryId, MemoryOp, MemoryRecord, Namespace, Policy,
    RecordKind, User, UserId,
};
use evomem_index::VectorIndex;
use evomem_llm::LlmHub;
use evomem_store::{Engine, MemoryStore};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};

/// Kind of the API's memories.
pub const MEMORY_KIND: &str = "memory";
const USER_KIND: &str = "service_user";
const ITEM_KIND: &str = "catalog_item";
const DECISION_KIND: &str = "decision";
const CATALOG_NS: &str = "catalog";

/// What every tenant shares.
pub struct Shared {
    /// Settings.
    pub config: ServeConfig,
    /// The embedder of memories, queries and items (the data folder's).
    pub embedder: Arc<dyn Embedder>,
    /// Other embedders a tenant may need: one whose store a re-embed
    /// already moved to its target model while the folder's embedder is
    /// still the old one, and the target of a re-embed
    /// ([`crate::embedders`]). Default: none, and no loader.
    pub embedders: crate::embedders::EmbedderSet,
    /// LLM roles of the policies and the ranker.
    pub hub: Arc<LlmHub>,
    /// Seed of the policies.
    pub seed: u64,
    /// Metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
}

#[cfg(test)]
impl Shared {
    /// For unit tests: `config` and `embedder`, with the offline LLM hub,
    /// seed 1, fresh metrics and no other embedders.
    pub(crate) fn for_test(config: ServeConfig, embedder: Arc<dyn Embedder>) -> Self {
        Self {
            config,
            embedder,
            embedders: Default::default(),
            hub: Arc::new(LlmHub::offline()),
            seed: 1,
            metrics: Arc::default(),
        }
    }
}

fn kind(name: &str) -> RecordKind {
    RecordKind::Custom(name.to_string())
}

fn is_kind(r: &MemoryRecord, name: &str) -> bool {
    matches!(&r.kind, RecordKind::Custom(k) if k == name)
}

/// True for the API's memories (the records the index holds).
pub(crate) fn is_memory(r: &MemoryRecord) -> bool {
    is_kind(r, MEMORY_KIND)
}

/// The model of the first memory vector `state` holds: the model the
/// tenant's store is on (`None` before its first memory).
pub(crate) fn stored_model(state: &evomem_core::MemoryState) -> Option<String> {
    state
        .iter_all()
        .filter(|r| is_memory(r))
        .find_map(|r| r.embedding.as_ref().map(|e| e.model.clone()))
}

/// The title the loop endpoints registered item `token` with (its
/// `item:<token>` catalog record), when it has a non-empty one: what the
/// inspector shows for the item instead of its id.
pub(crate) fn item_title(state: &evomem_core::MemoryState, token: &str) -> Option<String> {
    let id = evomem_core::MemoryId::new(format!("item:{token}"));
    state
        .get(&id)
        .filter(|r| is_kind(r, ITEM_KIND) && !r.text.is_empty())
        .map(|r| r.text.clone())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Check a user id: 1-128 characters of `[A-Za-z0-9_.@-]`.
///
/// No `:`: internal records of a user are named `user:<id>:<suffix>`
/// (`user:alice:profile`), so a user called `alice:profile` could otherwise
/// take the name of alice's profile.
pub(crate) fn check_user(field: &str, id: &str) -> Result<(), ApiError> {
    let ok = (1..=128).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.@-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::field(
            field,
            format!("`{id}` must be 1-128 characters of [A-Za-z0-9_.@-]"),
        ))
    }
}

/// A memory as the API shows it.
pub(crate) fn memory_out(r: &MemoryRecord) -> MemoryOut {
    MemoryOut {
        id: r.id.as_str().to_string(),
        user_id: r
            .namespace
            .as_str()
            .strip_prefix("user:")
            .unwrap_or("")
            .to_string(),
        text: r.text.clone(),
        metadata: match r.fields.get("metadata") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        },
        created_at_ms: r.created_at.0,
        updated_at_ms: r.updated_at.0,
    }
}

/// What a memory costs against `serve.tenant_max_bytes`: its text and its
/// metadata as JSON.
pub(crate) fn memory_bytes(r: &MemoryRecord) -> u64 {
    let meta = r
        .fields
        .get("metadata")
        .and_then(|m| serde_json::to_vec(m).ok())
        .map_or(0, |v| v.len());
    (r.text.len() + meta) as u64
}

/// Bytes of every live API memory of `state` ([`memory_bytes`]).
fn bytes_of(state: &evomem_core::MemoryState) -> u64 {
    state
        .namespaces()
        .flat_map(|ns| state.in_namespace(ns))
        .filter(|r| is_kind(r, MEMORY_KIND))
        .map(memory_bytes)
        .sum()
}

/// Memory ids this op concerns (its target, merge sources, link targets).
fn op_ids(op: &MemoryOp) -> Vec<&MemoryId> {
    let mut v = vec![op.target()];
    match op {
        MemoryOp::Merge { sources, .. } => v.extend(sources.iter()),
        MemoryOp::Link { to, .. } | MemoryOp::Unlink { to, .. } => v.push(to),
        _ => {}
    }
    v
}

/// The items and users the loop knows, by token. Shared with the loop's
/// copies through an `Arc`; a request that registers something changes its
/// own copy and installs it with its commit.
#[derive(Clone, Default)]
struct Directory {
    catalog: Catalog,
    item_ids: HashMap<String, ItemId>,
    users: Vec<User>,
    user_ids: HashMap<String, UserId>,
}

/// What the loop endpoints keep between requests; behind `loop_state`,
/// which they hold for their whole run (one at a time per tenant).
#[derive(Default)]
struct LoopState {
    policies: BTreeMap<String, Box<dyn Policy>>,
    item_vecs: HashMap<ItemId, Vec<f32>>,
    /// The core generation the policies and vectors were derived at.
    gen: u64,
}

/// Everything of a tenant behind its lock.
pub(crate) struct TenantCore {
    engine: Engine,
    index: TenantIndex,
    clock: u64,
    dir: Arc<Directory>,
    /// Moves whenever the directory or policy records change other than by
    /// a loop commit (rebuild, another instance's writes): the loop's
    /// copies made before are then stale.
    gen: u64,
    id_prefix: String,
    next_id: u64,
    model: String,
    dim: usize,
    threshold: usize,
    /// Log rewrites found while catching up ([`Tenant::peer_rewrites`]).
    peer_rewrites: Arc<std::sync::atomic::AtomicU64>,
    /// Bytes the live API memories hold ([`memory_bytes`]), against
    /// `serve.tenant_max_bytes`; derived with the index, moved by every
    /// add, update and delete.
    bytes: u64,
    /// The tenant's embedder slot ([`Tenant::embedder`]'s, shared) and the
    /// embedders the service can give: when catching up finds that another
    /// instance re-embedded the tenant, model, dimension and embedder move
    /// together under the core write lock (`sync.rs`), as the re-embed's
    /// own swap moves them. `None` only in [`TenantCore::empty`].
    follow: Option<(EmbedderSlot, crate::embedders::EmbedderSet)>,
}

/// Bytes a live record costs in memory beside its text, metadata and
/// vector ([`TenantCore::resident_estimate`]): its ids, namespace, kind,
/// fields map, embedding header and the state's maps that hold it.
pub(crate) const RECORD_OVERHEAD: u64 = 512;
/// Bytes an op of the log costs beside the record text and vector it
/// carries: provenance, labels, the op's own headers.
pub(crate) const OP_OVERHEAD: u64 = 384;
/// Bytes the index's exact store costs per vector beside the vector: the
/// id's entry in its location map and its block.
pub(crate) const INDEX_OVERHEAD: u64 = 96;

/// A tenant's embedder, shared by the tenant and its core; a leaf lock,
/// held only to clone or replace it.
pub(crate) type EmbedderSlot = Arc<RwLock<Arc<dyn Embedder>>>;

/// One tenant.
pub(crate) struct Tenant {
    name: String,
    core: RwLock<TenantCore>,
    shared: Arc<Shared>,
    writer: Mutex<Option<mpsc::SyncSender<AddJob>>>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Held by a loop endpoint for its whole run (module docs).
    loop_state: Mutex<LoopState>,
    /// Vectors indexed, published after every write: probes read it
    /// without the core lock.
    indexed: AtomicUsize,
    /// `TenantCore::bytes`, published like `indexed` (quotas, `/metrics`).
    stored_bytes: std::sync::atomic::AtomicU64,
    /// [`TenantCore::resident_estimate`], published like `indexed` (the
    /// registry's memory budget, `/metrics`).
    resident: std::sync::atomic::AtomicU64,
    /// Work of this tenant running on the blocking pool (`workers.rs`),
    /// counted until it ends even when its request was dropped: the
    /// registry never closes a tenant while any runs ([`Tenant::is_busy`]).
    working: AtomicUsize,
    /// Blocking-pool threads this tenant's reads may hold at once.
    permits: Arc<tokio::sync::Semaphore>,
    /// Reads waiting for one of `permits`.
    waiting: AtomicUsize,
    /// The loop endpoints' turn, taken before a worker permit: loop
    /// requests of a tenant run one at a time anyway (`loop_state`), and
    /// those waiting their turn must not sit on the permits that reads need.
    loop_turn: Arc<tokio::sync::Semaphore>,
    /// Loop requests waiting for their turn.
    loop_waiting: AtomicUsize,
    /// The turn of writes that may wait at the write gate (updates,
    /// deletes, hard deletes, user deletions), taken instead of a worker
    /// permit: writes queued behind a log rewrite wait here, without a
    /// thread, and leave the permits to reads (`workers.rs`).
    write_turn: Arc<tokio::sync::Semaphore>,
    /// Writes waiting for their turn.
    write_waiting: AtomicUsize,
    /// Taken by every writer before the core write lock, and held by a log
    /// rewrite (user deletion, hard delete) for its whole run: writers wait
    /// for the rewrite here, without the core lock, so reads go on.
    write_gate: Mutex<()>,
    /// True while the write gate's holder has caught up with the store
    /// under the store's writer lock (PostgreSQL): no other instance can
    /// write until it releases the gate, so a read that finds the gate
    /// held need not wait for it to catch up ([`Tenant::catch_up`]).
    gate_current: std::sync::atomic::AtomicBool,
    /// See [`Tenant::peer_rewrites`]; shared with the core, which counts.
    peer_rewrites: Arc<std::sync::atomic::AtomicU64>,
    /// A second connection to the tenant's store (its SQLite file or its
    /// PostgreSQL schema) for `as_of` listings, which replay from it in
    /// one consistent read without the core lock.
    reader: Mutex<Option<Box<dyn MemoryStore>>>,
    /// Memories in add jobs queued for, or being committed by, the writer
    /// (bounded by `serve.queue_memories`).
    queued_memories: AtomicUsize,
    /// The op log by user and by record (`log_index.rs`), brought up to
    /// the log by each read that uses it; a leaf lock.
    log_index: Mutex<log_index::LogIndex>,
    /// The embedder of this tenant's memories, queries and items: the
    /// shared one, unless the store holds another model's vectors (a
    /// re-embed finished for this tenant but not yet for the folder);
    /// replaced by a re-embed's swap under the core write lock, with
    /// `TenantCore::model`, or by catching up with another instance's
    /// re-embed. A leaf lock, held only to clone it.
    embedder: EmbedderSlot,
}

/// The write gate held: this process's writers of the tenant one at a
/// time and, for a writer that commits on PostgreSQL, every instance's: the
/// store's writer lock (an advisory lock per schema), taken after the local
/// gate and released with it. A peer instance then cannot write between
/// this writer's catching up and its commit, nor during a log rewrite,
/// which would otherwise overwrite the peer's write.
struct WriteGate<'a> {
    _local: std::sync::MutexGuard<'a, ()>,
    db: Option<evomem_store::StoreHandle>,
    /// Set once the holder caught up while holding the store's writer
    /// lock ([`Tenant::caught_up_under`]); cleared here first on release.
    current: Option<&'a std::sync::atomic::AtomicBool>,
}

impl Drop for WriteGate<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.current.take() {
            c.store(false, Ordering::Release);
        }
        if let Some(h) = self.db.take() {
            if let Err(e) = h.unlock_writers() {
                tracing::error!("store writer lock: {e}");
            }
        }
    }
}

/// The core lock held for writing; publishes the index size when released.
/// Holds the write gate too (released after the core lock).
struct CoreWrite<'a> {
    guard: std::sync::RwLockWriteGuard<'a, TenantCore>,
    indexed: &'a AtomicUsize,
    stored_bytes: &'a std::sync::atomic::AtomicU64,
    resident: &'a std::sync::atomic::AtomicU64,
    _gate: Option<WriteGate<'a>>,
}

impl std::ops::Deref for CoreWrite<'_> {
    type Target = TenantCore;
    fn deref(&self) -> &TenantCore {
        &self.guard
    }
}

impl std::ops::DerefMut for CoreWrite<'_> {
    fn deref_mut(&mut self) -> &mut TenantCore {
        &mut self.guard
    }
}

impl<'a> CoreWrite<'a> {
    /// Release the core lock and hand back the write gate, still held.
    fn release_core(mut self) -> Option<WriteGate<'a>> {
        self._gate.take()
    }
}

impl Drop for CoreWrite<'_> {
    fn drop(&mut self) {
        self.indexed
            .store(self.guard.index.len(), Ordering::Relaxed);
        self.stored_bytes.store(self.guard.bytes, Ordering::Relaxed);
        self.resident
            .store(self.guard.resident_estimate(), Ordering::Relaxed);
    }
}

impl Drop for Tenant {
    /// A PostgreSQL client owns a tokio runtime, which panics when dropped
    /// on an async thread; so the core is dropped on a thread of its own
    /// whenever the last reference goes away inside a runtime.
    fn drop(&mut self) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let core = std::mem::replace(
            match self.core.get_mut() {
                Ok(c) => c,
                Err(p) => p.into_inner(),
            },
            TenantCore::empty(),
        );
        let reader = match self.reader.get_mut() {
            Ok(r) => r.take(),
            Err(p) => p.into_inner().take(),
        };
        let _ = std::thread::spawn(move || drop((core, reader))).join();
    }
}

impl TenantCore {
    fn empty() -> Self {
        Self {
            engine: Engine::ephemeral(),
            index: tenant_index("", 0, 1),
            clock: 0,
            dir: Arc::default(),
            gen: 0,
            id_prefix: String::new(),
            next_id: 0,
            model: String::new(),
            dim: 0,
            threshold: 1,
            peer_rewrites: Arc::default(),
            bytes: 0,
            follow: None,
        }
    }

    /// An estimate of the bytes this tenant holds in memory, from counts
    /// kept anyway (no walk over the records, so it is published after
    /// every write): the API memories' text and metadata twice (the record
    /// and the op that wrote it, which the log keeps), each indexed vector
    /// three times at its stored width of 4 bytes per dimension (the
    /// record's embedding, the op's, the index's exact store) plus
    /// [`INDEX_OVERHEAD`], and [`RECORD_OVERHEAD`] per live record and
    /// [`OP_OVERHEAD`] per op of the log. Not counted: the text of other
    /// records (catalog items, users, decisions) beyond their overhead,
    /// the HNSW graphs of namespaces past `serve.hnsw_threshold`, and the
    /// policies' state. Test `resident_bytes_grow_with_memories_within_a_sane_factor`.
    pub(super) fn resident_estimate(&self) -> u64 {
        let vectors = self.index.len() as u64;
        let records = self.engine.state().len() as u64;
        let ops = self.engine.log().len() as u64;
        2 * self.bytes
            + vectors * (3 * 4 * self.dim as u64 + INDEX_OVERHEAD)
            + records * RECORD_OVERHEAD
            + ops * OP_OVERHEAD
    }

    fn tick(&mut self) -> LogicalTime {
        self.clock = (self.clock + 1).max(now_ms());
        LogicalTime(self.clock)
    }

    /// The logical time [`TenantCore::tick`] would give, without moving
    /// the clock.
    fn next_tick(&self) -> LogicalTime {
        LogicalTime((self.clock + 1).max(now_ms()))
    }

    /// A minter of the ids after the last one given; store its `next`
    /// back in `next_id` once they are used.
    fn ids(&self) -> IdMinter {
        IdMinter {
            prefix: self.id_prefix.clone(),
            next: self.next_id,
        }
    }

    /// The live API memory `id` of this tenant, or `not_found`.
    fn memory(&self, id: &str) -> Result<&MemoryRecord, ApiError> {
        self.engine
            .state()
            .get(&MemoryId::new(id))
            .filter(|r| is_kind(r, MEMORY_KIND))
            .ok_or_else(|| ApiError::NotFound {
                what: "memory",
                id: id.to_string(),
            })
    }

    fn user_memory(&self, user: &str, id: &MemoryId) -> Option<&MemoryRecord> {
        self.engine
            .state()
            .get_in(id, &[Namespace::user(user)])
            .filter(|r| is_kind(r, MEMORY_KIND))
    }
}

impl Tenant {
    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The embedder of this tenant's memories, queries and items.
    pub fn embedder(&self) -> Arc<dyn Embedder> {
        match self.embedder.read() {
            Ok(e) => e.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, TenantCore> {
        match self.core.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The write gate, then the core write lock: for work that changes
    /// only this process's copy (catching up, verifying), not the store.
    fn write(&self) -> CoreWrite<'_> {
        let gate = WriteGate {
            _local: lock(&self.write_gate),
            db: None,
            current: None,
        };
        self.write_in(Some(gate))
    }

    /// The write gate for a writer of the store: on PostgreSQL with the
    /// store's writer lock too ([`WriteGate`]).
    fn gate(&self) -> Result<WriteGate<'_>, ApiError> {
        let local = lock(&self.write_gate);
        let db = match self.shared.config.is_postgres() {
            true => self.read().engine.store_handle(),
            false => None,
        };
        if let Some(h) = &db {
            h.lock_writers()?;
        }
        Ok(WriteGate {
            _local: local,
            db,
            current: None,
        })
    }

    /// The core write lock for a caller that already holds the write gate
    /// (`gate`, moved in so that both are released together, or `None`
    /// while the caller keeps holding it).
    fn write_in<'a>(&'a self, gate: Option<WriteGate<'a>>) -> CoreWrite<'a> {
        let guard = match self.core.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        CoreWrite {
            guard,
            indexed: &self.indexed,
            stored_bytes: &self.stored_bytes,
            resident: &self.resident,
            _gate: gate,
        }
    }

    /// A second handle on the tenant's store (its SQLite file or its
    /// PostgreSQL schema), for work that must not hold the core lock.
    fn second_store(&self) -> Result<Box<dyn MemoryStore>, ApiError> {
        let cfg = &self.shared.config;
        Ok(if cfg.is_postgres() {
            Box::new(evomem_store::PostgresStore::connect(
                &cfg.store,
                &format!("evomem_t_{}", self.name),
            )?)
        } else {
            Box::new(evomem_store::SqliteStore::open(self.sqlite_path())?)
        })
    }

    fn sqlite_path(&self) -> std::path::PathBuf {
        self.shared
            .config
            .data_dir
            .join(format!("{}.sqlite", self.name))
    }

    /// Vectors indexed, as published after the last write: never waits
    /// for the core lock (probes and metrics call it).
    pub fn index_len(&self) -> usize {
        self.indexed.load(Ordering::Relaxed)
    }

    /// Bytes the tenant's memories hold ([`memory_bytes`]), as published
    /// after the last write: never waits for the core lock.
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes.load(Ordering::Relaxed)
    }

    /// An estimate of the bytes the tenant holds in memory
    /// ([`TenantCore::resident_estimate`]), as published after the last
    /// write: never waits for the core lock (the registry's budget and
    /// `/metrics` call it).
    pub fn resident_bytes(&self) -> u64 {
        self.resident.load(Ordering::Relaxed)
    }

    /// True while closing the tenant would lose or cut work: memories wait
    /// for (or are in) its writer, or work of it runs on the blocking pool
    /// (a read, a write, a loop request, a deletion; `workers.rs`). The
    /// registry's leases cover the rest of a request.
    pub fn is_busy(&self) -> bool {
        self.queued_memories.load(Ordering::SeqCst) > 0 || self.working.load(Ordering::SeqCst) > 0
    }

    /// Refuse to store `memories` more memories and `bytes` more bytes when
    /// that would take the tenant past `serve.tenant_max_memories` or
    /// `serve.tenant_max_bytes` (0: no quota), counting from `held`
    /// (memories, bytes) held now.
    fn check_quota(&self, held: (u64, u64), memories: u64, bytes: u64) -> Result<(), ApiError> {
        let cfg = &self.shared.config;
        for (what, used, adding, quota) in [
            ("memories", held.0, memories, cfg.tenant_max_memories),
            ("bytes", held.1, bytes, cfg.tenant_max_bytes),
        ] {
            if quota > 0 && adding > 0 && used.saturating_add(adding) > quota {
                return Err(ApiError::QuotaExceeded {
                    tenant: self.name.clone(),
                    what,
                    used,
                    adding,
                    quota,
                });
            }
        }
        Ok(())
    }
}

/// Memory ids of one tenant: `m_{prefix}{n:07x}`, `n` counting up.
struct IdMinter {
    prefix: String,
    next: u64,
}

impl IdMinter {
    fn mint(&mut self) -> MemoryId {
        self.next += 1;
        MemoryId::new(format!("m_{}{:07x}", self.prefix, self.next))
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    /// A user id with `:` could take the name of another user's internal
    /// record (`user:alice:profile`); such ids are refused.
    #[test]
    fn user_ids_cannot_name_internal_records() {
        for bad in ["alice:profile", "alice:meta", ":", "a:b"] {
            assert!(check_user("user_id", bad).is_err(), "{bad}");
        }
        for good in ["alice", "a.b@c-d_e", "42"] {
            assert!(check_user("user_id", good).is_ok(), "{good}");
        }
    }
}
