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

use crate::config::ServeConfig;
use crate::error::{ApiError, ServeError};
use crate::index::{tenant_index, TenantIndex};
use crate::types::*;
use evomem_core::{
    Catalog, DecisionQuery, Embedder, Embedding, Feedback, Interaction, Item, ItemId, LoggedOp,
    LogicalTime, MemoryId, MemoryOp, MemoryRecord, MemoryState, Namespace, Outcome, Policy,
    PolicyCtx, RecordKind, UsageTrace, User, UserId,
};
use evomem_index::{GraphWork, VectorIndex};
use evomem_llm::rank::{RankCandidate, RankInput, RankRole};
use evomem_llm::LlmHub;
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use evomem_store::rewrite::{without_namespace, without_records, RewritePlan};
use evomem_store::{Engine, ForgetReport, MemoryStore, Synced};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    /// The embedder of memories, queries and items.
    pub embedder: Arc<dyn Embedder>,
    /// LLM roles of the policies and the ranker.
    pub hub: Arc<LlmHub>,
    /// Seed of the policies.
    pub seed: u64,
    /// Metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
}

fn kind(name: &str) -> RecordKind {
    RecordKind::Custom(name.to_string())
}

fn is_kind(r: &MemoryRecord, name: &str) -> bool {
    matches!(&r.kind, RecordKind::Custom(k) if k == name)
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

struct AddJob {
    user: String,
    memories: Vec<NewMemory>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<MemoryOut>, ApiError>>,
}

/// A group of add jobs between the add pipeline's two stages.
struct EmbeddedGroup {
    jobs: Vec<AddJob>,
    vectors: Result<Vec<Vec<f32>>, ApiError>,
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
}

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
    /// Blocking-pool threads this tenant may hold at once.
    permits: Arc<tokio::sync::Semaphore>,
    /// Requests waiting for one of `permits`.
    waiting: AtomicUsize,
    /// The loop endpoints' turn, taken before a worker permit: loop
    /// requests of a tenant run one at a time anyway (`loop_state`), and
    /// those waiting their turn must not sit on the permits that reads need.
    loop_turn: Arc<tokio::sync::Semaphore>,
    /// Loop requests waiting for their turn.
    loop_waiting: AtomicUsize,
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
    }
}

/// A copy of what a loop request reads, taken under a short lock.
struct LoopView {
    /// The user's own records but the API's memories.
    state: MemoryState,
    dir: Arc<Directory>,
    gen: u64,
    /// Provisional logical time; the commit shifts it to the commit's.
    now: LogicalTime,
}

/// Why a loop commit did not happen.
enum CommitError {
    /// Something the request read changed meanwhile: start over.
    Stale,
    /// Refused or failed: answer this.
    Api(ApiError),
}

impl From<ApiError> for CommitError {
    fn from(e: ApiError) -> Self {
        CommitError::Api(e)
    }
}

impl From<evomem_store::StoreError> for CommitError {
    fn from(e: evomem_store::StoreError) -> Self {
        CommitError::Api(ApiError::Store(e))
    }
}

/// Why a log rewrite failed: before anything was written (nothing to
/// undo) or after the store was written (the tenant reloads from it).
enum RewriteFailed {
    Unwritten(ApiError),
    Written(ApiError),
}

/// How often a loop request starts over when what it read went stale.
const LOOP_ATTEMPTS: usize = 3;

use crate::lock;

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
        }
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

    /// Rebuild everything derived from memory: index, catalog, users, clock;
    /// policies start again empty.
    fn rebuild(&mut self) -> Result<(), String> {
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
    fn install(&mut self, d: Derived) -> (TenantIndex, Arc<Directory>) {
        self.gen += 1;
        self.clock = self.clock.max(d.last_time);
        (
            std::mem::replace(&mut self.index, d.index),
            std::mem::replace(&mut self.dir, d.dir),
        )
    }

    /// Catch up with other instances' writes (PostgreSQL), querying the
    /// store under the core lock: for recovery after a failed write. The
    /// request paths query without it ([`Tenant::news`], then
    /// [`TenantCore::take_in`]).
    fn sync(&mut self) -> Result<(), ApiError> {
        let synced = self.engine.sync()?;
        self.after_sync(synced)
    }

    /// Take in what [`Tenant::news`] fetched without the core lock; when
    /// the log moved meanwhile (it cannot while the write gate is held,
    /// but a check costs nothing), catch up the slow way.
    fn take_in(&mut self, fetched: evomem_store::Fetched) -> Result<(), ApiError> {
        match self.engine.catch_up(fetched)? {
            Some(synced) => self.after_sync(synced),
            None => self.sync(),
        }
    }

    /// Bring the index, directory and clock up to the engine after a
    /// catch-up.
    fn after_sync(&mut self, synced: Synced) -> Result<(), ApiError> {
        match synced {
            Synced::Current => Ok(()),
            Synced::Reloaded => {
                self.peer_rewrites.fetch_add(1, Ordering::AcqRel);
                self.rebuild().map_err(ApiError::Internal)
            }
            Synced::Extended { from } => {
                let mut touched: BTreeSet<MemoryId> = BTreeSet::new();
                let mut structural = false;
                for o in &self.engine.log()[from..] {
                    self.clock = self.clock.max(o.provenance.logical_time.0);
                    for id in op_ids(&o.op) {
                        touched.insert(id.clone());
                    }
                    if let MemoryOp::Create { record } = &o.op {
                        structural |= is_kind(record, ITEM_KIND) || is_kind(record, USER_KIND);
                    }
                }
                if structural {
                    return self.rebuild().map_err(ApiError::Internal);
                }
                for id in touched {
                    let live = self
                        .engine
                        .state()
                        .get(&id)
                        .filter(|r| is_kind(r, MEMORY_KIND))
                        .and_then(|r| r.embedding.as_ref().map(|e| (r.namespace.clone(), e)));
                    match live {
                        Some((ns, e)) => {
                            let v = e.vector.clone();
                            self.index
                                .add(id, ns, &v)
                                .map_err(|e| ApiError::Internal(e.to_string()))?;
                        }
                        None => {
                            self.index.remove(&id);
                        }
                    }
                }
                self.gen += 1;
                Ok(())
            }
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

impl Directory {
    fn ensure_user(
        &mut self,
        user: &str,
        at: LogicalTime,
        ops: &mut Vec<evomem_core::PlannedOp>,
    ) -> UserId {
        if let Some(u) = self.user_ids.get(user) {
            return *u;
        }
        let id = UserId(self.users.len() as u32);
        self.users.push(User {
            id,
            token: user.to_string(),
            attributes: BTreeMap::new(),
        });
        self.user_ids.insert(user.to_string(), id);
        let rec = MemoryRecord::new(
            MemoryId::new(format!("user:{user}")),
            Namespace::user(user),
            kind(USER_KIND),
            user,
            at,
        )
        .with_field("index", json!(id.0));
        ops.push(evomem_core::PlannedOp::new(
            MemoryOp::Create { record: rec },
            "register_user",
            "first loop call for this user",
        ));
        id
    }

    /// Check item references before anything is registered, so that a bad
    /// reference rejects the request without touching the catalog.
    fn check_items<'a>(
        &self,
        items: impl Iterator<Item = (String, &'a ItemRef)>,
    ) -> Result<(), ApiError> {
        let mut new: BTreeSet<&str> = BTreeSet::new();
        for (field, item) in items {
            let token = match item {
                ItemRef::Id(t) => t.as_str(),
                ItemRef::Item(i) => i.id.as_str(),
            };
            if token.is_empty() || token.len() > 256 {
                return Err(ApiError::field(field, "item id must be 1-256 characters"));
            }
            match item {
                ItemRef::Item(_) => {
                    new.insert(token);
                }
                ItemRef::Id(_) if self.item_ids.contains_key(token) || new.contains(token) => {}
                ItemRef::Id(_) => {
                    return Err(ApiError::field(
                        field,
                        format!("unknown item `{token}`: send it once as an object with its title"),
                    ))
                }
            }
        }
        Ok(())
    }

    fn ensure_item(
        &mut self,
        field: &str,
        item: &ItemRef,
        at: LogicalTime,
        ops: &mut Vec<evomem_core::PlannedOp>,
    ) -> Result<ItemId, ApiError> {
        let (token, full) = match item {
            ItemRef::Id(t) => (t.as_str(), None),
            ItemRef::Item(i) => (i.id.as_str(), Some(i)),
        };
        if token.is_empty() || token.len() > 256 {
            return Err(ApiError::field(field, "item id must be 1-256 characters"));
        }
        if let Some(id) = self.item_ids.get(token) {
            return Ok(*id);
        }
        let Some(full) = full else {
            return Err(ApiError::field(
                field,
                format!("unknown item `{token}`: send it once as an object with its title"),
            ));
        };
        let id = ItemId(self.catalog.items.len() as u32);
        let mut text = BTreeMap::new();
        if !full.text.is_empty() {
            text.insert("description".to_string(), full.text.clone());
        }
        self.catalog.items.push(Item {
            id,
            token: token.to_string(),
            title: full.title.clone(),
            text,
            categories: full.categories.clone(),
            attributes: BTreeMap::new(),
        });
        self.item_ids.insert(token.to_string(), id);
        let rec = MemoryRecord::new(
            MemoryId::new(format!("item:{token}")),
            Namespace::new(CATALOG_NS),
            kind(ITEM_KIND),
            full.title.clone(),
            at,
        )
        .with_field("index", json!(id.0))
        .with_field("categories", json!(full.categories))
        .with_field("text", json!(full.text));
        ops.push(evomem_core::PlannedOp::new(
            MemoryOp::Create { record: rec },
            "register_item",
            "first time the loop saw this item",
        ));
        Ok(id)
    }
}

/// Families the loop endpoints run: they rank, and everything they know
/// about a user is that user's own memory records (namespace `user:<id>`),
/// the family table's `user_scoped` capability
/// ([`registry::user_scoped_rankers`]: today `no-memory` and `mars`). So
/// their state survives a restart (it is in the store), and deleting a user
/// deletes everything derived from them. AtomRec and seqmem write
/// cross-user notes; the other baselines keep model state outside memory.
/// Build (or reuse) a user-scoped ranking policy.
fn policy_for<'a>(
    policies: &'a mut BTreeMap<String, Box<dyn Policy>>,
    spec_text: &str,
    shared: &Shared,
) -> Result<&'a mut Box<dyn Policy>, ApiError> {
    let spec = PolicySpec::parse(spec_text).map_err(|e| ApiError::Policy {
        policy: spec_text.to_string(),
        message: e.to_string(),
    })?;
    let key = spec.to_string();
    if !policies.contains_key(&key) {
        let fam = registry::family(&spec.name).map_err(|e| ApiError::Policy {
            policy: key.clone(),
            message: e.to_string(),
        })?;
        if !fam.caps.user_scoped || !fam.serves(evomem_core::DecisionTag::Rank) {
            return Err(ApiError::Policy {
                policy: key.clone(),
                message: format!(
                    "the service runs the policies whose whole state is each user's own memory ({}); `{}` keeps cross-user notes or model state outside memory",
                    registry::user_scoped_rankers().join(", "),
                    fam.name
                ),
            });
        }
        let deps = PolicyDeps {
            embedder: shared.embedder.clone(),
            llm: shared.hub.clone(),
            seed: shared.seed,
        };
        let p = registry::build(&spec, &deps).map_err(|e| ApiError::Policy {
            policy: key.clone(),
            message: e.to_string(),
        })?;
        policies.insert(key.clone(), p);
    }
    policies
        .get_mut(&key)
        .ok_or_else(|| ApiError::Internal("policy vanished".into()))
}

/// What a tenant derives from its memory: the index, the directory of
/// items and users, and the latest logical time in the log.
struct Derived {
    index: TenantIndex,
    dir: Arc<Directory>,
    last_time: u64,
}

/// Build [`Derived`] from a state and its log (no lock needed: a user
/// deletion derives from its rewritten copy before installing it), with
/// the HNSW graphs of large namespaces bulk-loaded (in parallel).
fn derive(
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
fn derive_exact(
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
    for r in state.iter_all() {
        if is_kind(r, MEMORY_KIND) {
            if let Some(e) = &r.embedding {
                // Vectors of two models are not comparable: refuse rather
                // than mix them in one index (nothing re-embeds yet).
                if e.model != model {
                    return Err(format!(
                        "memory {} was embedded by `{}`, but this service embeds with `{model}`: \
                         start it with the embedder that wrote this data (`serve.embedder`), \
                         or put the new embedder's data in a new data folder",
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
    };
    Ok((derived, work))
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

fn policy_err(policy: &str) -> impl Fn(evomem_core::PolicyError) -> ApiError + '_ {
    move |e| ApiError::Policy {
        policy: policy.to_string(),
        message: e.to_string(),
    }
}

/// Embed the items of `cands` that `vecs` lacks (their full text) and keep
/// the vectors.
fn embed_missing(
    embedder: &dyn Embedder,
    catalog: &Catalog,
    cands: &[ItemId],
    vecs: &mut HashMap<ItemId, Vec<f32>>,
) -> Result<(), ApiError> {
    let missing: Vec<ItemId> = cands
        .iter()
        .copied()
        .filter(|i| !vecs.contains_key(i))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = missing
        .iter()
        .map(|&i| catalog.get(i).map(Item::full_text).unwrap_or_default())
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embedded = embedder
        .embed(&refs)
        .map_err(|e| ApiError::Embed(e.to_string()))?;
    for (i, v) in missing.into_iter().zip(embedded) {
        vecs.insert(i, v);
    }
    Ok(())
}

/// The rank role's view of each candidate: title, text and vector.
fn rank_candidates(
    catalog: &Catalog,
    cands: &[ItemId],
    vecs: &HashMap<ItemId, Vec<f32>>,
) -> Vec<RankCandidate> {
    cands
        .iter()
        .map(|&i| {
            let it = catalog.get(i);
            RankCandidate {
                item: i,
                title: it.map(|x| x.title.clone()).unwrap_or_default(),
                text: it.map(Item::full_text).unwrap_or_default(),
                embedding: vecs.get(&i).cloned().unwrap_or_default(),
            }
        })
        .collect()
}

/// The top `k` (all when `None`) of `cands` by `scores`, ties by position.
fn ranking_of(
    scores: &[f64],
    cands: &[ItemId],
    k: Option<usize>,
    token: &dyn Fn(ItemId) -> String,
) -> Vec<Ranked> {
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| {
        let sa = scores.get(a).copied().unwrap_or(f64::MIN);
        let sb = scores.get(b).copied().unwrap_or(f64::MIN);
        sb.total_cmp(&sa).then(a.cmp(&b))
    });
    let k = k.unwrap_or(order.len()).min(order.len());
    order[..k]
        .iter()
        .map(|&i| Ranked {
            item_id: token(cands[i]),
            score: scores.get(i).copied().unwrap_or(0.0),
        })
        .collect()
}

/// The evidence a decision's context showed the ranker, with item tokens.
fn evidence_of(
    context: &evomem_core::DecisionContext,
    token: &dyn Fn(ItemId) -> String,
) -> Vec<Evidence> {
    context
        .entries
        .iter()
        .map(|e| Evidence {
            memory_id: e.memory.as_ref().map(|m| m.as_str().to_string()),
            item_id: e.item.map(token),
            text: e.text.clone(),
            weight: e.weight,
            path: e
                .path
                .as_ref()
                .map(|p| p.nodes.iter().map(|n| n.as_str().to_string()).collect()),
        })
        .collect()
}

/// Most context entries a decision record keeps for the inspector.
const STORED_CONTEXT_ENTRIES: usize = 64;

/// A decision's context as its record keeps it: embeddings dropped, at most
/// [`STORED_CONTEXT_ENTRIES`] entries, entry texts cut to 1,000 bytes.
///
/// The service runs user-scoped families only (see `policy_for`), so the
/// context holds the deciding user's own records, never the API's memories
/// (no serving policy reads them): the copy lives in the user's namespace
/// and goes with a user deletion, and a hard delete of a memory has no
/// text to chase here.
fn stored_context(context: &evomem_core::DecisionContext) -> Value {
    let entries: Vec<Value> = context
        .entries
        .iter()
        .take(STORED_CONTEXT_ENTRIES)
        .map(|e| {
            let mut text = e.text.clone();
            if text.len() > 1000 {
                let mut cut = 1000;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
            json!({
                "memory": e.memory,
                "item": e.item,
                "text": text,
                "weight": e.weight,
                "path": e.path,
            })
        })
        .collect();
    json!({
        "profile": context.profile,
        "entries": entries,
        "omitted": context.entries.len().saturating_sub(STORED_CONTEXT_ENTRIES),
    })
}

/// What a stored decision record says about the decision, for feedback.
struct StoredDecision {
    /// The user's namespace token.
    user_token: String,
    /// The policy that decided.
    spec: String,
    /// The user's index in the tenant's directory.
    user: UserId,
    /// When the decision was made.
    decided_at: LogicalTime,
    /// The memories the decision used.
    trace: UsageTrace,
}

impl StoredDecision {
    fn of(rec: &MemoryRecord, decision_id: u64) -> Self {
        let field = |k: &str| rec.fields.get(k);
        Self {
            user_token: rec
                .namespace
                .as_str()
                .strip_prefix("user:")
                .unwrap_or("")
                .to_string(),
            spec: field("policy")
                .and_then(Value::as_str)
                .unwrap_or("mars")
                .to_string(),
            user: UserId(field("user_index").and_then(Value::as_u64).unwrap_or(0) as u32),
            decided_at: LogicalTime(
                field("decided_at")
                    .and_then(Value::as_u64)
                    .unwrap_or(decision_id),
            ),
            trace: field("trace")
                .cloned()
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
        }
    }
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
        let mut core = TenantCore {
            engine,
            index: tenant_index(shared.embedder.model_id(), shared.embedder.dim(), 1),
            clock: 0,
            dir: Arc::default(),
            gen: 0,
            id_prefix: hex::encode(prefix),
            next_id: 0,
            model: shared.embedder.model_id().to_string(),
            dim: shared.embedder.dim(),
            threshold: cfg.hnsw_threshold,
            peer_rewrites: Arc::default(),
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
            write_gate: Mutex::new(()),
            gate_current: std::sync::atomic::AtomicBool::new(false),
            peer_rewrites,
            reader: Mutex::new(None),
            queued_memories: AtomicUsize::new(0),
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
        let started = std::time::Instant::now();
        #[cfg(test)]
        std::thread::sleep(std::time::Duration::from_millis(
            tests::GRAPH_BUILD_DELAY_MS.load(Ordering::SeqCst),
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
            "tenant {}: {kept} of {built} HNSW graph(s) built after open put in ({} ms)",
            self.name,
            started.elapsed().as_millis()
        );
    }

    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.name
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

    /// Rewrite the op log (a user deletion or a hard delete) while reads go
    /// on. Under the write gate, which keeps every other writer of this
    /// process out: copy the log under a short read lock; make the plan
    /// from the copy (`make`, no lock); write it to the store through a
    /// second handle in one transaction, then purge free pages (no lock);
    /// read the store back and compare; derive the index and directory
    /// from the plan and run `check` on them (no lock); then swap the new
    /// log, state, index and directory in under a short write lock. A
    /// failure after the store was written reloads from the store, so the
    /// tenant always serves what the store holds. Returns the plan's
    /// report and what was verified.
    fn rewrite<M, C>(&self, make: M, check: C) -> Result<(ForgetReport, Vec<String>), ApiError>
    where
        M: FnOnce(&[LoggedOp], u64) -> Result<RewritePlan, ApiError> + Send,
        C: FnOnce(&RewritePlan, &Derived) -> Result<Vec<String>, ApiError> + Send,
    {
        let mut gate = self.gate()?;
        if let Some(f) = self.news()? {
            self.write_in(None).take_in(f)?;
        }
        self.caught_up_under(&mut gate);
        let (log, every, model, dim, threshold) = {
            let core = self.read();
            let log = core.engine.log().to_vec();
            let every = core.engine.snapshot_every();
            (log, every, core.model.clone(), core.dim, core.threshold)
        };
        // The slow part at bulk priority (`serve.bulk_idle`, `bulk_nice`);
        // the swap-in below, under the core lock, at the request's own.
        let work = crate::priority::run_bulk(self.bulk(), || {
            let plan = make(&log, every).map_err(RewriteFailed::Unwritten)?;
            drop(log);
            self.rewrite_store(plan, (&model, dim, threshold), check)
        })
        .map_err(|e| RewriteFailed::Unwritten(ApiError::Internal(format!("bulk thread: {e}"))))
        .and_then(|r| r);
        let (plan, derived, verified) = match work {
            Ok(w) => w,
            Err(RewriteFailed::Unwritten(e)) => return Err(e),
            Err(RewriteFailed::Written(e)) => {
                // The store was written: serve what it holds.
                let mut core = self.write_in(Some(gate));
                if let Err(again) = core.sync() {
                    tracing::error!(
                        "tenant {}: reload after a failed rewrite: {again}",
                        self.name
                    );
                }
                return Err(e);
            }
        };
        let RewritePlan {
            log,
            state,
            snapshots,
            report,
        } = plan;
        let last_snapshot = snapshots.last().map_or(0, |s| s.seq);
        let mut core = self.write_in(Some(gate));
        let old = (
            core.engine.adopt_rewrite(log, state, last_snapshot),
            core.install(derived),
        );
        drop(core);
        // Freeing the replaced log, records and index (hundreds of
        // milliseconds for a tenant of 100,000 memories) once readers are
        // free to go on, and at bulk priority: it held the write lock
        // before (docs/service.md, noisy neighbours).
        if let Err(e) = crate::priority::run_bulk(self.bulk(), move || drop(old)) {
            tracing::warn!("tenant {}: bulk thread for freeing: {e}", self.name);
        }
        Ok((report, verified?))
    }

    /// The store side of [`Tenant::rewrite`], with no lock: write `plan`
    /// through a second handle (old pages purged), read it back and
    /// compare, replay it, derive the index and directory, and run
    /// `check`. Returns the plan, what was derived, and what was verified
    /// (or `check`'s error, reported after the swap-in).
    #[allow(clippy::type_complexity)]
    fn rewrite_store<C>(
        &self,
        plan: RewritePlan,
        (model, dim, threshold): (&str, usize, usize),
        check: C,
    ) -> Result<(RewritePlan, Derived, Result<Vec<String>, ApiError>), RewriteFailed>
    where
        C: FnOnce(&RewritePlan, &Derived) -> Result<Vec<String>, ApiError>,
    {
        let mut store = self.second_store().map_err(RewriteFailed::Unwritten)?;
        store
            .replace_all(&plan.log, &plan.state, &plan.snapshots)
            .map_err(|e| RewriteFailed::Written(e.into()))?;
        let agree = (|| -> Result<(), ApiError> {
            let stored = store.load_log()?;
            let records = store.load_records()?;
            let live: Vec<&MemoryRecord> = plan.state.iter_all().collect();
            if stored != plan.log
                || records.len() != live.len()
                || records.iter().zip(live).any(|(a, b)| a != b)
            {
                return Err(ApiError::Internal(
                    "the rewritten store differs from the rewritten log".into(),
                ));
            }
            let mut replayed = MemoryState::new();
            evomem_store::store::replay_into(&mut replayed, &plan.log, "rewrite")?;
            if replayed != plan.state {
                return Err(ApiError::Internal(
                    "replaying the rewritten log does not give its state".into(),
                ));
            }
            Ok(())
        })();
        agree.map_err(RewriteFailed::Written)?;
        drop(store);
        let derived = derive(&plan.state, &plan.log, model, dim, threshold)
            .map_err(|m| RewriteFailed::Written(ApiError::Internal(m)))?;
        let checked = check(&plan, &derived).map(|mut v| {
            v.insert(0, "store log and records equal the engine's".to_string());
            v
        });
        Ok((plan, derived, checked))
    }

    /// Commit `batches` without keeping readers waiting (module docs,
    /// "Locking"): stage them on the engine under the core write lock the
    /// caller holds (validated, not yet visible), release the core lock and
    /// store them in one transaction, keeping the write gate so that no
    /// other writer of this process runs meanwhile, then take the core lock
    /// back and install them. Readers go on during the store's commit (and
    /// the snapshot it may carry) and never see the batches before they
    /// are durable. On an error nothing is installed; the core lock is held
    /// again either way. Returns the number of ops applied.
    fn store_and_install<'a>(
        &'a self,
        mut core: CoreWrite<'a>,
        batches: Vec<evomem_store::Batch>,
    ) -> (CoreWrite<'a>, Result<usize, evomem_store::StoreError>) {
        let staged = match core.engine.stage_batches(batches) {
            Ok(s) => s,
            Err(e) => return (core, Err(e)),
        };
        let Some(handle) = core.engine.store_handle() else {
            let r = core.engine.install(staged);
            return (core, r);
        };
        let gate = core.release_core();
        self.commit_then_install(gate, &handle, staged)
    }

    /// The second half of [`Tenant::store_and_install`]: with the core lock
    /// released and the write gate `gate` held, commit `staged` to the
    /// store, then take the core lock and install it.
    fn commit_then_install<'a>(
        &'a self,
        gate: Option<WriteGate<'a>>,
        handle: &evomem_store::StoreHandle,
        mut staged: evomem_store::Staged,
    ) -> (CoreWrite<'a>, Result<usize, evomem_store::StoreError>) {
        let stored = self.commit_staged(handle, &mut staged);
        let mut core = self.write_in(gate);
        if let Err(e) = stored {
            return (core, Err(e));
        }
        let installed = self.install_committed(&mut core, staged);
        (core, installed)
    }

    /// Commit `staged` to the store, the write gate held and the core lock
    /// not.
    fn commit_staged(
        &self,
        handle: &evomem_store::StoreHandle,
        staged: &mut evomem_store::Staged,
    ) -> Result<(), evomem_store::StoreError> {
        if staged.snapshot_due() {
            // The snapshot is of the state before the batches, read under
            // the read lock: readers share it, and every writer needs the
            // write gate first, which this thread holds, so none queues
            // for the write lock meanwhile.
            let view = self.read();
            handle.commit(staged, Some(&view.engine))
        } else {
            handle.commit(staged, None)
        }
    }

    /// Install a committed batch under the core lock; on a failure (the
    /// engine no longer matches its store) reload from the store.
    fn install_committed(
        &self,
        core: &mut CoreWrite<'_>,
        staged: evomem_store::Staged,
    ) -> Result<usize, evomem_store::StoreError> {
        let installed = core.engine.install(staged);
        if let Err(e) = &installed {
            tracing::error!("tenant {}: install after commit: {e}; reloading", self.name);
            if let Err(again) = core.sync() {
                tracing::error!("tenant {}: reload: {again}", self.name);
            }
        }
        installed
    }

    /// How this tenant's bulk work runs (`serve.bulk_idle`, `bulk_nice`).
    fn bulk(&self) -> crate::priority::Bulk {
        crate::priority::Bulk {
            nice: self.shared.config.bulk_nice,
            idle: self.shared.config.bulk_idle,
        }
    }

    /// Run `f`, work on `n` memories that holds no lock a reader waits on,
    /// at bulk priority ([`crate::priority::run_bulk`]); under
    /// [`BULK_MIN`] memories inline, where a thread would cost more than
    /// the work.
    fn in_bulk<T: Send>(&self, n: usize, f: impl FnOnce() -> T + Send) -> Result<T, ApiError> {
        if n < BULK_MIN {
            return Ok(f());
        }
        crate::priority::run_bulk(self.bulk(), f)
            .map_err(|e| ApiError::Internal(format!("bulk thread: {e}")))
    }

    /// A write lock for a writer of the store ([`Tenant::gate`]), caught
    /// up with other instances.
    fn write_synced(&self) -> Result<CoreWrite<'_>, ApiError> {
        let mut gate = self.gate()?;
        let news = self.news()?;
        let mut core = self.write_in(None);
        if let Some(f) = news {
            core.take_in(f)?;
        }
        self.caught_up_under(&mut gate);
        core._gate = Some(gate);
        Ok(core)
    }

    /// Say that `gate`'s holder has caught up with the store: when the
    /// gate holds the store's writer lock (PostgreSQL), no other instance
    /// can write until it is released, so reads need not wait for the
    /// gate to catch up themselves ([`Tenant::catch_up`]).
    fn caught_up_under<'a>(&'a self, gate: &mut WriteGate<'a>) {
        if gate.db.is_some() {
            self.gate_current.store(true, Ordering::Release);
            gate.current = Some(&self.gate_current);
        }
    }

    /// What other instances wrote to the store since this process's log
    /// (PostgreSQL; `None` when nothing, or on SQLite, which one process
    /// writes), read without the core lock: readers go on while the store
    /// is queried. The caller holds the write gate, so this process's log
    /// cannot move before the result is taken in ([`TenantCore::take_in`]).
    fn news(&self) -> Result<Option<evomem_store::Fetched>, ApiError> {
        if !self.shared.config.is_postgres() {
            return Ok(None);
        }
        let (point, handle) = {
            let core = self.read();
            (core.engine.sync_point(), core.engine.store_handle())
        };
        let Some(handle) = handle else {
            return Ok(None);
        };
        let fetched = handle.fetch_since(&point)?;
        Ok((!fetched.is_current()).then_some(fetched))
    }

    /// Catch up with other instances' writes (PostgreSQL; nothing to do on
    /// SQLite), for a caller outside the tenant: the idempotency layer,
    /// before it replays a remembered answer ([`Tenant::peer_rewrites`]).
    pub fn refresh(&self) -> Result<(), ApiError> {
        self.catch_up()
    }

    /// How many times this process found the tenant's log rewritten by
    /// another instance (a hard delete or a user deletion there) while
    /// catching up. The idempotency layer stops replaying answers with
    /// text recorded before the count moved.
    pub fn peer_rewrites(&self) -> u64 {
        self.peer_rewrites.load(Ordering::Acquire)
    }

    /// Catch up with other instances' writes (PostgreSQL): the store is
    /// queried without the core lock, and the write lock is taken only
    /// when there is something to take in. Under the write gate, so that
    /// this process's log does not move meanwhile; but a read does not
    /// wait for a writer that has already caught up under the store's
    /// writer lock ([`Tenant::caught_up_under`]).
    fn catch_up(&self) -> Result<(), ApiError> {
        if !self.shared.config.is_postgres() {
            return Ok(());
        }
        let local = match self.write_gate.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                // A writer or a log rewrite holds the gate. Once it has
                // caught up under the store's writer lock, no instance can
                // have written since: what is installed is current, and
                // the read goes on without waiting for its commit.
                if self.gate_current.load(Ordering::Acquire) {
                    return Ok(());
                }
                lock(&self.write_gate)
            }
        };
        let gate = WriteGate {
            _local: local,
            db: None,
            current: None,
        };
        if let Some(f) = self.news()? {
            self.write_in(Some(gate)).take_in(f)?;
        }
        Ok(())
    }

    /// A read lock; under PostgreSQL with `sync_reads`, caught up first.
    fn read_synced(&self) -> Result<std::sync::RwLockReadGuard<'_, TenantCore>, ApiError> {
        if self.shared.config.sync_reads {
            self.catch_up()?;
        }
        Ok(self.read())
    }

    /// Vectors indexed, as published after the last write: never waits
    /// for the core lock (probes and metrics call it).
    pub fn index_len(&self) -> usize {
        self.indexed.load(Ordering::Relaxed)
    }

    /// [`Tenant::blocking`] for a loop endpoint: first wait (without a
    /// thread or a permit) for the tenant's loop turn; past
    /// `serve.queue_depth` loop requests waiting, `overloaded` (503).
    pub async fn blocking_loop<T, F>(self: &Arc<Self>, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(&Tenant) -> Result<T, ApiError> + Send + 'static,
        T: Send + 'static,
    {
        let depth = self.shared.config.queue_depth;
        if self.loop_waiting.fetch_add(1, Ordering::SeqCst) >= depth {
            self.loop_waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::Overloaded {
                queue: "loop requests",
                retry_after_s: 1,
            });
        }
        let turn = self.loop_turn.clone().acquire_owned().await;
        self.loop_waiting.fetch_sub(1, Ordering::SeqCst);
        let _turn = turn.map_err(|_| ApiError::ShuttingDown)?;
        self.blocking(f).await
    }

    /// Run `f` on tokio's blocking pool, holding one of this tenant's
    /// `serve.tenant_workers` permits, so that one tenant cannot take every
    /// blocking thread. When more than `serve.queue_depth` requests of the
    /// tenant already wait for a permit, answers `overloaded` (503).
    pub async fn blocking<T, F>(self: &Arc<Self>, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(&Tenant) -> Result<T, ApiError> + Send + 'static,
        T: Send + 'static,
    {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let depth = self.shared.config.queue_depth;
                if self.waiting.fetch_add(1, Ordering::SeqCst) >= depth {
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    return Err(ApiError::Overloaded {
                        queue: "tenant workers",
                        retry_after_s: 1,
                    });
                }
                let p = self.permits.clone().acquire_owned().await;
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                p.map_err(|_| ApiError::ShuttingDown)?
            }
        };
        let t = self.clone();
        let r = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&t)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("worker: {e}")))?;
        r
    }

    /// Queue memories for the group-commit writer and wait for the commit.
    pub async fn add(
        &self,
        user: String,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryOut>, ApiError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let n = memories.len();
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
    fn embed_loop(&self, rx: mpsc::Receiver<AddJob>, out: mpsc::SyncSender<EmbeddedGroup>) {
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
    fn writer_loop(&self, rx: mpsc::Receiver<EmbeddedGroup>) {
        while let Ok(g) = rx.recv() {
            let n: usize = g.jobs.iter().map(|j| j.memories.len()).sum();
            let results = self.commit_group(&g.jobs, g.vectors);
            self.queued_memories.fetch_sub(n, Ordering::SeqCst);
            for (job, res) in g.jobs.into_iter().zip(results) {
                let _ = job.reply.send(res);
            }
        }
    }

    /// A group's vectors, one per memory in job order.
    fn embed_group(&self, jobs: &[AddJob]) -> Result<Vec<Vec<f32>>, ApiError> {
        let texts: Vec<&str> = jobs
            .iter()
            .flat_map(|j| j.memories.iter().map(|m| m.text.as_str()))
            .collect();
        match self.in_bulk(texts.len(), || self.shared.embedder.embed(&texts))? {
            Ok(v) if v.len() == texts.len() => Ok(v),
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
        vectors: Result<Vec<Vec<f32>>, ApiError>,
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
        let vectors = match vectors {
            Ok(v) => v,
            Err(e) => return fail(&e),
        };
        let mut core = match self.write_synced() {
            Ok(c) => c,
            Err(e) => return fail(&e),
        };
        let model = core.model.clone();
        let mut attempt = 0;
        loop {
            let (c, made, stored) = self.stage_and_store_adds(core, jobs, &vectors, &model);
            core = c;
            match stored {
                Ok(_) => {
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
    /// before (docs/service.md, noisy neighbours). Returns the write lock,
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
                tests::stage_slowly_if_asked(jobs);
                (staged, made, t, ids)
            };
            let stored =
                staged.and_then(|mut st| self.commit_staged(&handle, &mut st).map(|()| st));
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

    /// One memory.
    pub fn get(&self, id: &str) -> Result<MemoryOut, ApiError> {
        self.read_synced()?.memory(id).map(memory_out)
    }

    /// Change a memory's text (re-embedded) or metadata.
    pub fn update(&self, id: &str, req: UpdateRequest) -> Result<MemoryOut, ApiError> {
        let embedding = match &req.text {
            Some(t) => Some(Embedding {
                model: self.shared.embedder.model_id().to_string(),
                vector: self
                    .shared
                    .embedder
                    .embed_one(t)
                    .map_err(|e| ApiError::Embed(e.to_string()))?,
            }),
            None => None,
        };
        let mut core = self.write_synced()?;
        let mid = MemoryId::new(id);
        core.memory(id)?;
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
        core.memory(id)?;
        let t = core.tick();
        let ops = vec![evomem_core::PlannedOp::new(
            MemoryOp::Forget { id: mid.clone() },
            "delete",
            "DELETE /v1/memories",
        )];
        let (mut core, stored) = self.store_and_install(core, api_batch(ops, t));
        stored?;
        core.index.remove(&mid);
        Ok(Deleted {
            id: id.to_string(),
            deleted: true,
            hard: false,
            verified: Vec::new(),
        })
    }

    /// Remove one memory for good: every op that created, edited or forgot
    /// it leaves the op log (so no text of it stays in history or `as_of`),
    /// its record and vector leave the store and the index, and the store
    /// purges its free pages (as for a user deletion); then check that
    /// nothing of it is left. Works on a memory already deleted softly.
    /// The rewrite runs while reads go on ([`Tenant::rewrite`]).
    pub fn hard_delete(&self, id: &str) -> Result<Deleted, ApiError> {
        let mid = MemoryId::new(id);
        let (_, verified) = self.rewrite(
            |log, every| {
                let created = log.iter().any(|o| {
                    matches!(&o.op, MemoryOp::Create { record } if record.id == mid && is_kind(record, MEMORY_KIND))
                });
                if !created {
                    return Err(ApiError::NotFound {
                        what: "memory",
                        id: id.to_string(),
                    });
                }
                Ok(without_records(log, &BTreeSet::from([mid.clone()]), every)?)
            },
            |plan, derived| {
                let mut verified = Vec::new();
                if plan.state.get(&mid).is_some() {
                    return Err(ApiError::Internal(format!("memory {id} is still live")));
                }
                verified.push("no live record with the id".to_string());
                for o in &plan.log {
                    // Its texts lived only in ops on its id (create, update,
                    // replace); another memory may hold the same words.
                    if op_ids(&o.op).contains(&&mid) {
                        return Err(ApiError::Internal(format!(
                            "op {} still concerns the deleted memory",
                            o.seq
                        )));
                    }
                }
                verified.push("no op in the log concerns the memory".into());
                if derived.index.contains(&mid) {
                    return Err(ApiError::Internal(
                        "the index still holds the memory's vector".into(),
                    ));
                }
                verified.push("no vector of the memory in the index".into());
                Ok(verified)
            },
        )?;
        Ok(Deleted {
            id: id.to_string(),
            deleted: true,
            hard: true,
            verified,
        })
    }

    /// Top-k of a user's memories for an embedded query.
    pub fn search(
        &self,
        user: &str,
        query: &[f32],
        k: usize,
        filter: &Map<String, Value>,
    ) -> Result<Vec<SearchHit>, ApiError> {
        let core = self.read_synced()?;
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

    /// Every op that concerned a memory, oldest first.
    pub fn history(&self, id: &str) -> Result<HistoryResponse, ApiError> {
        let core = self.read_synced()?;
        let mid = MemoryId::new(id);
        let mut history = Vec::new();
        let mut is_memory = false;
        for o in core.engine.log() {
            if !op_ids(&o.op).contains(&&mid) {
                continue;
            }
            if let MemoryOp::Create { record } = &o.op {
                is_memory |= is_kind(record, MEMORY_KIND);
            }
            history.push(history_entry(o));
        }
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
    /// order; at most `limit` of them after the id `cursor`, with the cursor
    /// of the next page when there is one.
    pub fn user_memories(
        &self,
        user: &str,
        as_of: Option<u64>,
        limit: Option<usize>,
        cursor: Option<&str>,
    ) -> Result<UserMemories, ApiError> {
        let ns = [Namespace::user(user)];
        let mut next_cursor = None;
        let mut list = |state: &MemoryState| -> Vec<MemoryOut> {
            let mut page: Vec<MemoryOut> = state
                .scan(&ns)
                .filter(|r| cursor.is_none_or(|c| r.id.as_str() > c))
                .filter(|r| is_kind(r, MEMORY_KIND))
                .take(limit.map_or(usize::MAX, |l| l + 1))
                .map(memory_out)
                .collect();
            if let Some(l) = limit {
                if page.len() > l {
                    page.truncate(l);
                    next_cursor = page.last().map(|m| m.id.clone());
                }
            }
            page
        };
        let memories = match as_of {
            None => list(self.read_synced()?.engine.state()),
            Some(t) => {
                // Replay on a second connection, in one consistent read
                // (a read transaction; on PostgreSQL, REPEATABLE READ),
                // without the core lock. On PostgreSQL this also sees
                // other instances' writes up to `t`.
                let mut reader = lock(&self.reader);
                if reader.is_none() {
                    *reader = Some(self.second_store()?);
                }
                let state = match reader.as_mut() {
                    Some(r) => r.state_at_consistent(LogicalTime(t)),
                    None => return Err(ApiError::Internal("no reader connection".into())),
                };
                if state.is_err() {
                    // A broken connection is not kept for the next listing.
                    *reader = None;
                }
                drop(reader);
                list(&state?)
            }
        };
        Ok(UserMemories {
            user_id: user.to_string(),
            as_of_ms: as_of,
            memories,
            next_cursor,
        })
    }

    /// Forget a user everywhere: records, log, index, catalog of users,
    /// policy caches; then check that nothing of theirs is left. The
    /// rewrite runs while reads go on ([`Tenant::rewrite`]).
    pub fn delete_user(&self, user: &str) -> Result<UserDeleted, ApiError> {
        let ns = Namespace::user(user);
        // Every id ever created in the namespace (set by the plan, read by
        // the check).
        let ids: Mutex<Vec<MemoryId>> = Mutex::default();
        let (report, verified) = self.rewrite(
            |log, every| {
                let mut ids = lock(&ids);
                *ids = log
                    .iter()
                    .filter_map(|o| match &o.op {
                        MemoryOp::Create { record } if record.namespace == ns => {
                            Some(record.id.clone())
                        }
                        _ => None,
                    })
                    .collect();
                if ids.is_empty() && !log.iter().any(|o| op_in_ns(o, &ns)) {
                    return Err(ApiError::NotFound {
                        what: "user",
                        id: user.to_string(),
                    });
                }
                Ok(without_namespace(log, &ns, every)?)
            },
            |plan, derived| {
                // Neither the live state, the log nor the index holds
                // anything of the user.
                let ids = lock(&ids);
                let mut verified = Vec::new();
                if plan.state.scan(std::slice::from_ref(&ns)).next().is_some() {
                    return Err(ApiError::Internal(format!("records of {ns:?} remain")));
                }
                verified.push("no live record in the user's namespace".to_string());
                let needle = serde_json::to_string(ns.as_str()).unwrap_or_default();
                for o in &plan.log {
                    let body = serde_json::to_string(&o.op).unwrap_or_default();
                    if body.contains(&needle) || op_ids(&o.op).iter().any(|i| ids.contains(i)) {
                        return Err(ApiError::Internal(format!(
                            "op {} still concerns the deleted user",
                            o.seq
                        )));
                    }
                }
                verified.push("no op in the log names the user's namespace or records".into());
                if !derived.index.ids_in(&ns).is_empty()
                    || ids.iter().any(|i| derived.index.contains(i))
                {
                    return Err(ApiError::Internal(
                        "the index still holds the user's vectors".into(),
                    ));
                }
                verified.push("no vector of the user in the index".into());
                if derived.dir.user_ids.contains_key(user) {
                    return Err(ApiError::Internal(
                        "the user directory still lists the user".into(),
                    ));
                }
                verified.push("the policies' user directory no longer lists the user".into());
                Ok(verified)
            },
        )?;
        Ok(UserDeleted {
            user_id: user.to_string(),
            records_removed: report.records_removed,
            ops_dropped: report.ops_dropped,
            ops_edited: report.ops_edited,
            verified,
        })
    }

    /// Copy what a loop request for `user` reads (module docs, step 1).
    fn loop_view(&self, user: &str) -> Result<LoopView, ApiError> {
        self.catch_up()?;
        let core = self.read();
        let state = core
            .engine
            .state()
            .copy_of_namespace(&Namespace::user(user), |r| !is_kind(r, MEMORY_KIND));
        Ok(LoopView {
            state,
            dir: core.dir.clone(),
            gen: core.gen,
            now: LogicalTime((core.clock + 1).max(now_ms())),
        })
    }

    /// Commit a loop request's batches in one transaction (module docs,
    /// step 3), unless what it read went stale. Batch times are provisional
    /// (from `view.now` on); they are shifted together to follow the
    /// tenant's clock. Returns the shift.
    fn loop_commit(
        &self,
        gen: u64,
        first: LogicalTime,
        dir: Option<Arc<Directory>>,
        mut batches: Vec<evomem_store::Batch>,
    ) -> Result<u64, CommitError> {
        let mut core = self.write_synced()?;
        if core.gen != gen {
            return Err(CommitError::Stale);
        }
        let base = core.tick();
        let shift = base.0.saturating_sub(first.0);
        let mut last = base.0;
        for b in &mut batches {
            b.at = LogicalTime(b.at.0 + shift);
            last = last.max(b.at.0);
        }
        let (mut core, stored) = self.store_and_install(core, batches);
        if let Err(e) = stored {
            if e.is_conflict() {
                // Another instance wrote first: catch up, then start over.
                core.sync()?;
                return Err(CommitError::Stale);
            }
            return Err(e.into());
        }
        core.clock = core.clock.max(last);
        if let Some(d) = dir {
            core.dir = d;
        }
        Ok(shift)
    }

    /// Run a loop request: `plan` works on a fresh copy each attempt and
    /// returns what to commit and the answer; the commit is retried when
    /// the copy went stale. The policies are dropped (rebuilt from the
    /// store on next use) after any failure, since a failed request may
    /// have advanced them past what was committed.
    fn run_loop<R>(
        &self,
        user: &str,
        mut plan: impl FnMut(&mut LoopState, &mut LoopView) -> Result<LoopPlan<R>, ApiError>,
    ) -> Result<(R, u64), ApiError> {
        let mut ls = lock(&self.loop_state);
        for _ in 0..LOOP_ATTEMPTS {
            let mut view = self.loop_view(user)?;
            if ls.gen != view.gen {
                ls.policies.clear();
                ls.item_vecs.clear();
                ls.gen = view.gen;
            }
            let planned = match plan(&mut ls, &mut view) {
                Ok(p) => p,
                Err(e) => {
                    ls.policies.clear();
                    return Err(e);
                }
            };
            let dir = planned.dir_changed.then(|| view.dir.clone());
            match self.loop_commit(view.gen, view.now, dir, planned.batches) {
                Ok(shift) => return Ok((planned.answer, shift)),
                Err(CommitError::Stale) => {
                    ls.policies.clear();
                    ls.item_vecs.clear();
                }
                Err(CommitError::Api(e)) => {
                    ls.policies.clear();
                    return Err(e);
                }
            }
        }
        Err(ApiError::Overloaded {
            queue: "loop commits (what the request read kept changing)",
            retry_after_s: 1,
        })
    }

    /// Show interactions to a policy; all of the request's ops (item and
    /// user registrations, the policy's ops per event) commit together.
    pub fn events(&self, req: EventsRequest) -> Result<EventsResponse, ApiError> {
        let spec = self.shared.config.policy_spec(req.policy.as_deref())?;
        let (total, _) = self.run_loop(&req.user_id, |ls, view| {
            view.dir.check_items(
                req.events
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (format!("events[{i}].item"), &e.item)),
            )?;
            let policy = policy_for(&mut ls.policies, &spec, &self.shared)?;
            let name = policy.name().to_string();
            let mut batches = Vec::new();
            let mut total = 0usize;
            let mut dir_changed = false;
            for (i, ev) in req.events.iter().enumerate() {
                let t = LogicalTime(view.now.0 + i as u64);
                let mut ops = Vec::new();
                let dir = Arc::make_mut(&mut view.dir);
                let user = dir.ensure_user(&req.user_id, t, &mut ops);
                let item = dir.ensure_item(&format!("events[{i}].item"), &ev.item, t, &mut ops)?;
                dir_changed |= !ops.is_empty();
                let ts = ev.timestamp.unwrap_or((t.0 / 1000) as i64);
                let inter = Interaction {
                    user,
                    item,
                    rating: ev.rating,
                    timestamp: ts,
                    time: t,
                };
                apply_local(&mut view.state, &ops, t);
                let ctx = PolicyCtx {
                    memory: &view.state,
                    catalog: &view.dir.catalog,
                    users: &view.dir.users,
                    now: t,
                };
                let pops = policy.observe(&ctx, &inter).map_err(policy_err(&spec))?;
                total += pops.len();
                apply_local(&mut view.state, &pops, t);
                if !ops.is_empty() {
                    batches.push(evomem_store::Batch {
                        policy: "api".into(),
                        ops,
                        at: t,
                    });
                }
                if !pops.is_empty() {
                    batches.push(evomem_store::Batch {
                        policy: name.clone(),
                        ops: pops,
                        at: t,
                    });
                }
            }
            Ok(LoopPlan {
                batches,
                dir_changed,
                answer: total,
            })
        })?;
        Ok(EventsResponse {
            policy: policy_key(&spec),
            observed: req.events.len(),
            ops: total,
        })
    }

    /// Rank candidates with a policy's recall and the rank role; the
    /// decision, its usage trace and any registration commit together
    /// before the answer. Item embedding, the policy and the rank role run
    /// without the core lock.
    pub fn recommend(&self, req: RecommendRequest) -> Result<RecommendResponse, ApiError> {
        let spec = self.shared.config.policy_spec(req.policy.as_deref())?;
        let decision_id = new_decision_id();
        let (mut resp, _) = self.run_loop(&req.user_id, |ls, view| {
            view.dir.check_items(
                req.candidates
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (format!("candidates[{i}]"), c)),
            )?;
            let t = view.now;
            let mut ops = Vec::new();
            let dir = Arc::make_mut(&mut view.dir);
            let user = dir.ensure_user(&req.user_id, t, &mut ops);
            let mut cands = Vec::with_capacity(req.candidates.len());
            for (i, c) in req.candidates.iter().enumerate() {
                cands.push(dir.ensure_item(&format!("candidates[{i}]"), c, t, &mut ops)?);
            }
            let dir_changed = !ops.is_empty();
            embed_missing(
                self.shared.embedder.as_ref(),
                &view.dir.catalog,
                &cands,
                &mut ls.item_vecs,
            )?;
            apply_local(&mut view.state, &ops, t);
            let policy = policy_for(&mut ls.policies, &spec, &self.shared)?;
            let name = policy.name().to_string();
            let query = DecisionQuery::rank(decision_id, user, t, cands.clone())
                .with_instruction(req.instruction.clone());
            let ctx = PolicyCtx {
                memory: &view.state,
                catalog: &view.dir.catalog,
                users: &view.dir.users,
                now: t,
            };
            let recall = policy.recall(&ctx, &query).map_err(policy_err(&spec))?;
            let catalog = &view.dir.catalog;
            let candidates = rank_candidates(catalog, &cands, &ls.item_vecs);
            let input = RankInput {
                user: req.user_id.clone(),
                instruction: req.instruction.clone(),
                context: recall.context.clone(),
                candidates,
                seed: self.shared.seed ^ t.0,
            };
            let scores = self
                .shared
                .hub
                .run(
                    &RankRole::new(self.shared.embedder.clone()),
                    &input,
                    Some(&req.user_id),
                )
                .map(|o| o.scores)
                .map_err(|e| ApiError::Policy {
                    policy: spec.clone(),
                    message: format!("rank role: {e}"),
                })?;
            let token = |i: ItemId| catalog.get(i).map(|x| x.token.clone()).unwrap_or_default();
            let ranking = ranking_of(&scores, &cands, req.k, &token);
            let evidence = evidence_of(&recall.context, &token);
            let rec = MemoryRecord::new(
                decision_record_id(decision_id),
                Namespace::user(&req.user_id),
                kind(DECISION_KIND),
                format!("recommend via {}", policy_key(&spec)),
                t,
            )
            .with_field("policy", json!(policy_key(&spec)))
            .with_field("user_index", json!(user.0))
            .with_field("decided_at", json!(t.0))
            .with_field(
                "candidates",
                json!(cands.iter().map(|&i| token(i)).collect::<Vec<_>>()),
            )
            .with_field(
                "trace",
                serde_json::to_value(&recall.trace).unwrap_or(Value::Null),
            )
            .with_field("feedback_count", json!(0))
            // What the inspector's decision view shows (`/ui/api/decisions`):
            // the candidates as catalog ids (what context entries name), a
            // score per candidate, and the context the ranker saw.
            .with_field(
                "candidate_ids",
                json!(cands.iter().map(|i| i.0).collect::<Vec<_>>()),
            )
            .with_field("scores", json!(scores))
            .with_field("context", stored_context(&recall.context));
            let mut batches = Vec::new();
            if !ops.is_empty() {
                batches.push(evomem_store::Batch {
                    policy: "api".into(),
                    ops,
                    at: t,
                });
            }
            batches.push(evomem_store::Batch {
                policy: name,
                ops: vec![evomem_core::PlannedOp::new(
                    MemoryOp::Create { record: rec },
                    "decision",
                    "POST /v1/recommend",
                )],
                at: t,
            });
            Ok(LoopPlan {
                batches,
                dir_changed,
                answer: RecommendResponse {
                    decision_id,
                    policy: policy_key(&spec),
                    ranking,
                    profile: recall.context.profile.clone(),
                    evidence,
                },
            })
        })?;
        resp.decision_id = decision_id;
        Ok(resp)
    }

    /// An outcome for an earlier decision (also after a restart). The
    /// policy's ops and the decision's feedback count commit together.
    pub fn feedback(&self, req: FeedbackRequest) -> Result<FeedbackResponse, ApiError> {
        let did = decision_record_id(req.decision_id);
        let not_found = || ApiError::NotFound {
            what: "decision",
            id: req.decision_id.to_string(),
        };
        let rec = {
            self.catch_up()?;
            self.read()
                .engine
                .state()
                .get(&did)
                .filter(|r| is_kind(r, DECISION_KIND))
                .cloned()
                .ok_or_else(not_found)?
        };
        let StoredDecision {
            user_token,
            spec,
            user,
            decided_at,
            trace,
        } = StoredDecision::of(&rec, req.decision_id);
        let ((n, count), _) = self.run_loop(&user_token, |ls, view| {
            // The decision as it stands now (the copy is fresh each attempt).
            let current = view
                .state
                .get(&did)
                .filter(|r| is_kind(r, DECISION_KIND))
                .ok_or_else(not_found)?;
            let count = current
                .fields
                .get("feedback_count")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                + 1;
            let item =
                match &req.item_id {
                    Some(t) => Some(view.dir.item_ids.get(t).copied().ok_or_else(|| {
                        ApiError::field("item_id", format!("unknown item `{t}`"))
                    })?),
                    None => None,
                };
            let policy = policy_for(&mut ls.policies, &spec, &self.shared)?;
            let name = policy.name().to_string();
            let t = view.now;
            let fb = Feedback {
                decision_id: req.decision_id,
                user: Some(user),
                decided_at,
                observed_at: t,
                outcome: Outcome {
                    reward: req.reward,
                    success: req.success,
                    objectives: req.objectives.clone(),
                    item,
                    ..Outcome::default()
                },
                trace: trace.clone(),
            };
            let ctx = PolicyCtx {
                memory: &view.state,
                catalog: &view.dir.catalog,
                users: &view.dir.users,
                now: t,
            };
            let mut ops = policy.feedback(&ctx, &fb).map_err(policy_err(&spec))?;
            let n = ops.len();
            let mut fields = BTreeMap::new();
            fields.insert("feedback_count".to_string(), json!(count));
            // The latest outcome, for the inspector's decision view.
            fields.insert("reward".to_string(), json!(req.reward));
            if let Some(t) = &req.item_id {
                fields.insert("target".to_string(), json!(t));
            }
            if let Some(ok) = req.success {
                fields.insert("success".to_string(), json!(ok));
            }
            ops.push(evomem_core::PlannedOp::new(
                MemoryOp::UpdateFields {
                    id: did.clone(),
                    fields,
                    text: None,
                    embedding: None,
                },
                "feedback",
                "POST /v1/feedback",
            ));
            Ok(LoopPlan {
                batches: vec![evomem_store::Batch {
                    policy: name,
                    ops,
                    at: t,
                }],
                dir_changed: false,
                answer: (n, count),
            })
        })?;
        Ok(FeedbackResponse {
            decision_id: req.decision_id,
            ops: n,
            feedback_count: count,
        })
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
        Ok(())
    }
}

/// What one attempt of a loop request plans: its batches (committed
/// together), whether it registered items or users, and its answer.
struct LoopPlan<R> {
    batches: Vec<evomem_store::Batch>,
    dir_changed: bool,
    answer: R,
}

/// Apply planned ops to the loop's copy, so that the next event of the
/// request sees them. An op the copy cannot take (one about a record
/// outside the user's copied records) is skipped here; the commit applies
/// every op to the whole store and refuses the request if one does not fit.
fn apply_local(state: &mut MemoryState, ops: &[evomem_core::PlannedOp], at: LogicalTime) {
    for p in ops {
        if let Err(e) = state.apply(&p.op, at) {
            tracing::debug!("loop copy skipped an op ({e}); the commit checks it");
        }
    }
}

/// The records and create ops of an add group at time `t`, one list of
/// records per job, with new ids and the group's vectors in order.
/// Add groups of at least this many memories do their bulk steps on a
/// bulk-priority thread ([`Tenant::in_bulk`]); smaller ones inline.
const BULK_MIN: usize = 32;

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

/// One batch of the API's own ops at `at`.
fn api_batch(ops: Vec<evomem_core::PlannedOp>, at: LogicalTime) -> Vec<evomem_store::Batch> {
    vec![evomem_store::Batch {
        policy: "api".to_string(),
        ops,
        at,
    }]
}

/// A new decision id: random, below 2^53 so that every JSON client reads
/// it exactly; not derived from the time, so it cannot be guessed.
fn new_decision_id() -> u64 {
    let mut b = [0u8; 8];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
    (u64::from_le_bytes(b) >> 11).max(1)
}

fn decision_record_id(id: u64) -> MemoryId {
    MemoryId::new(format!("decision:{id}"))
}

fn policy_key(spec: &str) -> String {
    PolicySpec::parse(spec)
        .map(|s| s.to_string())
        .unwrap_or_else(|_| spec.to_string())
}

fn op_in_ns(o: &LoggedOp, ns: &Namespace) -> bool {
    match &o.op {
        MemoryOp::Create { record } | MemoryOp::Replace { record, .. } => &record.namespace == ns,
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Delay before the graphs of a reopened tenant are built
    /// ([`Tenant::build_graphs_after_open`]), so that a test can write
    /// while they are.
    pub(super) static GRAPH_BUILD_DELAY_MS: std::sync::atomic::AtomicU64 =
        std::sync::atomic::AtomicU64::new(0);

    /// An add holding a memory of this text sleeps 1.5 s while staged (the
    /// core read lock held), after saying so through [`STAGING`].
    const STAGE_SLOWLY: &str = "stage me slowly";
    static STAGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    const COMMIT_SLOWLY: &str = "commit me slowly";
    static COMMITTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    /// When the slow commit's staging ended.
    static COMMITTED_AT: Mutex<Option<std::time::Instant>> = Mutex::new(None);

    pub(super) fn stage_slowly_if_asked(jobs: &[AddJob]) {
        let has = |text: &str| {
            jobs.iter()
                .any(|j| j.memories.iter().any(|m| m.text == text))
        };
        if has(STAGE_SLOWLY) {
            STAGING.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1500));
        }
        if has(COMMIT_SLOWLY) {
            COMMITTING.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1500));
            *lock(&COMMITTED_AT) = Some(std::time::Instant::now());
        }
    }

    /// A hashing embedder under another model id (same dimension).
    struct Renamed(evomem_embed::HashingEmbedder);
    impl evomem_core::Embedder for Renamed {
        fn model_id(&self) -> &str {
            "another-model"
        }
        fn dim(&self) -> usize {
            self.0.dim()
        }
        fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
            self.0.embed(t)
        }
    }

    /// A data folder written with one embedder does not open under another
    /// (f32 and int8 MiniLM, or MiniLM and hashing, have the same
    /// dimension): the tenant refuses with both model ids named instead of
    /// mixing two models' vectors in one index, and the data stays.
    #[test]
    fn a_tenant_refuses_to_open_under_another_embedder_and_keeps_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let t = tenant(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mem = NewMemory {
            text: "likes quiet jazz".into(),
            metadata: Map::new(),
        };
        let added = rt.block_on(t.add("a".into(), vec![mem])).unwrap().remove(0);
        t.close();
        drop(t);
        let shared = |embedder: Arc<dyn evomem_core::Embedder>| Shared {
            config: ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            embedder,
            hub: Arc::new(LlmHub::offline()),
            seed: 1,
            metrics: Arc::default(),
        };
        let other = Arc::new(Renamed(evomem_embed::HashingEmbedder::new(8)));
        let err = Tenant::open("t", Arc::new(shared(other)))
            .err()
            .expect("opened under another model")
            .to_string();
        assert!(
            err.contains("another-model")
                && err.contains("hash")
                && err.contains(added.id.as_str()),
            "{err}"
        );
        let again = Tenant::open(
            "t",
            Arc::new(shared(Arc::new(evomem_embed::HashingEmbedder::new(8)))),
        )
        .unwrap();
        assert_eq!(again.get(&added.id).unwrap().text, "likes quiet jazz");
        again.close();
    }

    /// When each text was embedded.
    struct WhenEmbedded(Mutex<Vec<(String, std::time::Instant)>>);
    impl evomem_core::Embedder for WhenEmbedded {
        fn model_id(&self) -> &str {
            "when"
        }
        fn dim(&self) -> usize {
            2
        }
        fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
            let now = std::time::Instant::now();
            lock(&self.0).extend(t.iter().map(|s| (s.to_string(), now)));
            Ok(t.iter().map(|s| vec![1.0, s.len() as f32]).collect())
        }
    }

    /// Issue 41 (the pipeline): the add pipeline embeds the next group
    /// while the last one commits. A serial writer embedded the second
    /// add only after the first had committed (1.5 s here).
    #[test]
    fn the_next_add_group_embeds_while_the_last_one_commits() {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(WhenEmbedded(Mutex::new(Vec::new())));
        let shared = Shared {
            config: ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            embedder: seen.clone(),
            hub: Arc::new(LlmHub::offline()),
            seed: 1,
            metrics: Arc::default(),
        };
        let t = Tenant::open("pipe", Arc::new(shared)).unwrap();
        let mem = |text: &str| NewMemory {
            text: text.to_string(),
            metadata: Map::new(),
        };
        let first = {
            let t = t.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(t.add("a".into(), vec![mem(COMMIT_SLOWLY)]))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !COMMITTING.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            COMMITTING.load(Ordering::SeqCst),
            "the first add never committed"
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        let second = rt.block_on(t.add("a".into(), vec![mem("second")])).unwrap();
        let first = first.join().unwrap();
        let first_done = lock(&COMMITTED_AT).unwrap();
        assert_eq!((first.unwrap().len(), second.len()), (1, 1));
        let embedded = lock(&seen.0)
            .iter()
            .find(|(s, _)| s == "second")
            .map(|(_, at)| *at)
            .unwrap();
        assert!(
            embedded < first_done,
            "the second add was embedded only after the first had committed"
        );
        t.close();
    }

    /// Issue 37: an add makes and validates its records under the core
    /// read lock (the write gate keeps other writers out), so the tenant's
    /// reads answer meanwhile and do not see them. Taking the write lock
    /// for the staging makes the reads wait the 1.5 s out.
    #[test]
    fn reads_answer_while_an_add_is_staged() {
        let dir = tempfile::tempdir().unwrap();
        let t = tenant(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mem = |text: &str| NewMemory {
            text: text.to_string(),
            metadata: Map::new(),
        };
        let old = rt
            .block_on(t.add("a".into(), vec![mem("old one")]))
            .unwrap()
            .remove(0);
        let adder = {
            let t = t.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(t.add("a".into(), vec![mem(STAGE_SLOWLY)]))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !STAGING.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(STAGING.load(Ordering::SeqCst), "the add never staged");
        let (tx, rx) = mpsc::channel();
        {
            let t = t.clone();
            std::thread::spawn(move || {
                let q = t.shared.embedder.embed_one(STAGE_SLOWLY).unwrap();
                let hits: Vec<String> = t
                    .search("a", &q, 5, &Map::new())
                    .unwrap()
                    .into_iter()
                    .map(|h| h.memory.text)
                    .collect();
                tx.send((hits, t.get(&old.id).is_ok())).unwrap();
            });
        }
        let during = rx.recv_timeout(Duration::from_millis(1000));
        assert_eq!(adder.join().unwrap().unwrap().len(), 1);
        assert_eq!(
            during,
            Ok((vec!["old one".to_string()], true)),
            "a read waited for an add's staging, or saw it before its commit"
        );
    }

    /// Records the scheduling of the thread that embeds a group.
    struct WhereEmbedded(Mutex<Vec<(bool, Option<i32>, usize)>>);
    impl evomem_core::Embedder for WhereEmbedded {
        fn model_id(&self) -> &str {
            "where"
        }
        fn dim(&self) -> usize {
            2
        }
        fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
            lock(&self.0).push((
                crate::priority::current_is_idle(),
                crate::priority::current_nice(),
                t.len(),
            ));
            Ok(t.iter().map(|s| vec![1.0, s.len() as f32]).collect())
        }
    }

    /// Issue 37 (noisy neighbours): a large add group's bulk steps run at
    /// bulk priority (`SCHED_IDLE` under `serve.bulk_idle`, else niceness
    /// `serve.bulk_nice`), while the writer thread, which installs under
    /// the core lock, keeps normal priority; a small group runs inline.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_add_group_embeds_at_bulk_priority_and_the_writer_does_not() {
        let own = crate::priority::current_nice().unwrap_or(0);
        let want = own + 3;
        if want > 19 {
            return;
        }
        for idle in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let seen = Arc::new(WhereEmbedded(Mutex::new(Vec::new())));
            let shared = Shared {
                config: ServeConfig {
                    data_dir: dir.path().to_path_buf(),
                    bulk_nice: want,
                    bulk_idle: idle,
                    ..ServeConfig::default()
                },
                embedder: seen.clone(),
                hub: Arc::new(LlmHub::offline()),
                seed: 1,
                metrics: Arc::default(),
            };
            let t = Tenant::open("nicew", Arc::new(shared)).unwrap();
            let rt = tokio::runtime::Runtime::new().unwrap();
            for n in [1, BULK_MIN] {
                let mems = (0..n)
                    .map(|i| NewMemory {
                        text: format!("x{i}"),
                        metadata: Map::new(),
                    })
                    .collect();
                rt.block_on(t.add("a".into(), mems)).unwrap();
            }
            let seen: Vec<_> = lock(&seen.0).clone();
            let small = seen.iter().find(|s| s.2 == 1).unwrap();
            let large = seen.iter().find(|s| s.2 == BULK_MIN).unwrap();
            assert_eq!(
                (small.0, small.1),
                (false, Some(own)),
                "a small group left the writer"
            );
            if idle {
                assert!(large.0, "a large group did not embed under SCHED_IDLE");
            } else {
                assert_eq!((large.0, large.1), (false, Some(want)));
            }
            // Thread names are cut to 15 bytes in /proc.
            assert_eq!(
                crate::priority::tests::nice_of_thread("evomem-writer-n"),
                Some(own),
                "the writer thread was lowered"
            );
            t.close();
        }
    }

    /// Issue 37: a restart built the HNSW graphs of large namespaces
    /// before answering (40-60 s per start with 20,000+ vectors). Now the
    /// reopened tenant answers at once, exactly, and builds them behind;
    /// a write to a large namespace meanwhile waits in the exact tier and
    /// must be in that namespace's graph once the graph built behind is
    /// put in (it was built without the write).
    #[test]
    fn a_restart_answers_before_its_graphs_are_built_and_keeps_writes_made_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let shared = Shared {
                config: ServeConfig {
                    data_dir: dir.path().to_path_buf(),
                    hnsw_threshold: 50,
                    ..ServeConfig::default()
                },
                embedder: Arc::new(evomem_embed::HashingEmbedder::new(16)),
                hub: Arc::new(LlmHub::offline()),
                seed: 1,
                metrics: Arc::default(),
            };
            Tenant::open("graphs", Arc::new(shared)).unwrap()
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mems = |user: &str, n: usize| -> Vec<NewMemory> {
            (0..n)
                .map(|i| NewMemory {
                    text: format!("{user} note number {i} about topic {}", i % 17),
                    metadata: Map::new(),
                })
                .collect()
        };
        let t = open();
        for user in ["big", "other"] {
            rt.block_on(t.add(user.into(), mems(user, 300))).unwrap();
        }
        rt.block_on(t.add("small".into(), mems("small", 10)))
            .unwrap();
        assert_eq!(t.read().index.graph_count(), 2);
        t.close();
        drop(t);

        GRAPH_BUILD_DELAY_MS.store(400, Ordering::SeqCst);
        let t = open();
        // Answers at once, exactly.
        assert_eq!(
            t.read().index.graph_count(),
            0,
            "graphs were built before answering"
        );
        let q = t
            .shared
            .embedder
            .embed_one("big note number 7 about topic 7")
            .unwrap();
        let hits = t.search("big", &q, 1, &Map::new()).unwrap();
        assert_eq!(hits[0].memory.text, "big note number 7 about topic 7");
        // A write to `big` while the graphs are built behind.
        let text = "a late note written during the build";
        rt.block_on(t.add(
            "big".into(),
            vec![NewMemory {
                text: text.into(),
                metadata: Map::new(),
            }],
        ))
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while t.read().index.graph_count() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(600));
        GRAPH_BUILD_DELAY_MS.store(0, Ordering::SeqCst);
        assert_eq!(t.read().index.graph_count(), 2, "big and other have graphs");
        let q = t.shared.embedder.embed_one(text).unwrap();
        let hits = t.search("big", &q, 1, &Map::new()).unwrap();
        assert_eq!(
            hits.first().map(|h| h.memory.text.as_str()),
            Some(text),
            "the graph built behind replaced one holding a later write"
        );
        t.verify().unwrap();
        t.close();
    }

    fn tenant(dir: &std::path::Path) -> Arc<Tenant> {
        open_tenant(
            "t",
            ServeConfig {
                data_dir: dir.to_path_buf(),
                ..ServeConfig::default()
            },
        )
    }

    /// Tenant `name` of an instance with `config` (hashing embedder of 8,
    /// offline roles, seed 1).
    fn open_tenant(name: &str, config: ServeConfig) -> Arc<Tenant> {
        let shared = Shared {
            config,
            embedder: Arc::new(evomem_embed::HashingEmbedder::new(8)),
            hub: Arc::new(LlmHub::offline()),
            seed: 1,
            metrics: Arc::default(),
        };
        Tenant::open(name, Arc::new(shared)).unwrap()
    }

    /// Tenant `name` of a new instance on the PostgreSQL at `url`.
    fn pg_tenant(dir: &std::path::Path, url: &str, name: &str, sync_reads: bool) -> Arc<Tenant> {
        open_tenant(
            name,
            ServeConfig {
                data_dir: dir.to_path_buf(),
                store: url.to_string(),
                sync_reads,
                ..ServeConfig::default()
            },
        )
    }

    /// `EVOMEM_TEST_PG_URL`, or `None` with a notice (an error under CI).
    fn pg_test_url() -> Option<String> {
        match std::env::var("EVOMEM_TEST_PG_URL") {
            Ok(u) if !u.is_empty() => Some(u),
            _ => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "EVOMEM_TEST_PG_URL is not set under CI"
                );
                eprintln!("notice: EVOMEM_TEST_PG_URL not set; PostgreSQL test skipped");
                None
            }
        }
    }

    /// A new memory without metadata.
    fn mem(text: &str) -> NewMemory {
        NewMemory {
            text: text.to_string(),
            metadata: Map::new(),
        }
    }

    /// `/readyz` and `/metrics` read `index_len` on async worker threads:
    /// it must answer while a long write holds the core lock.
    #[test]
    fn the_index_size_is_read_without_the_core_lock() {
        let dir = tempfile::tempdir().unwrap();
        let t = tenant(dir.path());
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let holder = {
            let t = t.clone();
            std::thread::spawn(move || {
                let _w = t.write();
                held_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(Duration::from_secs(60));
            })
        };
        held_rx.recv().unwrap();
        let (tx, rx) = mpsc::channel();
        {
            let t = t.clone();
            std::thread::spawn(move || tx.send(t.index_len()).unwrap());
        }
        let got = rx.recv_timeout(Duration::from_secs(20));
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(got, Ok(0), "index_len waited for the write lock");
        t.close();
    }

    /// A log rewrite (user deletion, hard delete) must not hold the core
    /// lock while it plans and writes: reads of other users (search, list,
    /// `as_of`) answer meanwhile, while writers wait for it (they would
    /// otherwise commit to a log about to be replaced) and land after it.
    #[test]
    fn reads_answer_while_a_rewrite_runs_and_writes_wait_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = tenant(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        let a = rt
            .block_on(t.add("a".into(), vec![mem("a one"), mem("a two")]))
            .unwrap();
        let b = rt
            .block_on(t.add("b".into(), vec![mem("b one"), mem("b two")]))
            .unwrap();
        assert_eq!(a.len(), 2);
        let now = now_ms() + 1;
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let rewriter = {
            let t = t.clone();
            std::thread::spawn(move || {
                t.rewrite(
                    move |log, every| {
                        started_tx.send(()).unwrap();
                        let _ = release_rx.recv_timeout(Duration::from_secs(60));
                        Ok(without_namespace(log, &Namespace::user("a"), every)?)
                    },
                    |_, _| Ok(Vec::new()),
                )
            })
        };
        started_rx.recv().unwrap();
        // Reads of user b answer while the rewrite plans.
        let (tx, rx) = mpsc::channel();
        {
            let t = t.clone();
            std::thread::spawn(move || {
                let q = t.shared.embedder.embed_one("b one").unwrap();
                let hits = t.search("b", &q, 5, &Map::new()).map(|h| h.len());
                let listed = t
                    .user_memories("b", Some(now), None, None)
                    .map(|l| l.memories.len());
                tx.send((hits.ok(), listed.ok())).unwrap();
            });
        }
        let read = rx.recv_timeout(Duration::from_secs(20));
        // A write waits for the rewrite.
        let (wtx, wrx) = mpsc::channel();
        {
            let t = t.clone();
            let id = b[0].id.clone();
            std::thread::spawn(move || wtx.send(t.delete(&id).is_ok()).unwrap());
        }
        let early = wrx.recv_timeout(Duration::from_millis(300));
        release_tx.send(()).unwrap();
        let report = rewriter.join().unwrap().unwrap().0;
        let wrote = wrx.recv_timeout(Duration::from_secs(20));
        assert_eq!(read, Ok((Some(2), Some(2))), "reads waited for the rewrite");
        assert!(early.is_err(), "a write committed during the rewrite");
        assert_eq!(wrote, Ok(true), "the write after the rewrite failed");
        assert_eq!(report.records_removed, 2);
        // The store, the engine and the index agree after both.
        t.verify().unwrap();
        let l = t.user_memories("b", None, None, None).unwrap();
        assert_eq!(l.memories.len(), 1);
        assert!(t
            .user_memories("a", None, None, None)
            .unwrap()
            .memories
            .is_empty());
        t.close();
    }

    /// A store whose next commit (or, with `armed_loads`, next log read),
    /// once armed, says so and then waits to be released: a slow disk, a
    /// slow snapshot or a slow catch-up query, on purpose.
    struct SlowCommits {
        inner: Box<dyn MemoryStore>,
        armed: Arc<std::sync::atomic::AtomicBool>,
        armed_loads: Arc<std::sync::atomic::AtomicBool>,
        entered: mpsc::Sender<()>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl SlowCommits {
        /// Wrap `inner`; returns the store, its two triggers, and the
        /// channels that say "entered" and release it.
        #[allow(clippy::type_complexity)]
        fn wrap(
            inner: Box<dyn MemoryStore>,
        ) -> (
            Self,
            Arc<std::sync::atomic::AtomicBool>,
            Arc<std::sync::atomic::AtomicBool>,
            mpsc::Receiver<()>,
            mpsc::Sender<()>,
        ) {
            let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let armed_loads = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (entered_tx, entered_rx) = mpsc::channel();
            let (release_tx, release_rx) = mpsc::channel::<()>();
            let store = SlowCommits {
                inner,
                armed: armed.clone(),
                armed_loads: armed_loads.clone(),
                entered: entered_tx,
                release: Mutex::new(release_rx),
            };
            (store, armed, armed_loads, entered_rx, release_tx)
        }

        fn hold_if(&self, trigger: &std::sync::atomic::AtomicBool) {
            if trigger.swap(false, Ordering::SeqCst) {
                self.entered.send(()).unwrap();
                let _ = lock(&self.release).recv_timeout(Duration::from_secs(60));
            }
        }
    }

    impl MemoryStore for SlowCommits {
        fn location(&self) -> String {
            self.inner.location()
        }
        fn commit(&mut self, c: &evomem_store::Commit<'_>) -> Result<(), evomem_store::StoreError> {
            self.hold_if(&self.armed);
            self.inner.commit(c)
        }
        fn lock_writers(&mut self) -> Result<(), evomem_store::StoreError> {
            self.inner.lock_writers()
        }
        fn unlock_writers(&mut self) -> Result<(), evomem_store::StoreError> {
            self.inner.unlock_writers()
        }
        fn load_ops(&mut self, a: u64, b: u64) -> Result<Vec<LoggedOp>, evomem_store::StoreError> {
            self.hold_if(&self.armed_loads);
            self.inner.load_ops(a, b)
        }
        fn last_seq(&mut self) -> Result<u64, evomem_store::StoreError> {
            self.inner.last_seq()
        }
        fn prefix_end(&mut self, t: LogicalTime) -> Result<u64, evomem_store::StoreError> {
            self.inner.prefix_end(t)
        }
        fn latest_snapshot(
            &mut self,
            upto: u64,
        ) -> Result<Option<evomem_store::Snapshot>, evomem_store::StoreError> {
            self.inner.latest_snapshot(upto)
        }
        fn snapshot_seqs(&mut self) -> Result<Vec<u64>, evomem_store::StoreError> {
            self.inner.snapshot_seqs()
        }
        fn load_records(&mut self) -> Result<Vec<MemoryRecord>, evomem_store::StoreError> {
            self.inner.load_records()
        }
        fn replace_all(
            &mut self,
            log: &[LoggedOp],
            state: &MemoryState,
            snapshots: &[evomem_store::Snapshot],
        ) -> Result<(), evomem_store::StoreError> {
            self.inner.replace_all(log, state, snapshots)
        }
    }

    /// Readers must not wait for a write's commit (issue 37: a 1,000-memory
    /// add and its snapshot committed under the core write lock, and every
    /// search of the tenant waited). While the store holds an add's commit,
    /// and then a delete's, a search, a get and a listing of the same user
    /// answer, and show neither write (nothing uncommitted is visible);
    /// once released, both writes land and the store agrees.
    #[test]
    fn reads_answer_while_a_write_commits_and_do_not_see_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = tenant(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        let old = rt
            .block_on(t.add("a".into(), vec![mem("old one")]))
            .unwrap()
            .remove(0);
        let (store, armed, _, entered_rx, release_tx) = SlowCommits::wrap(Box::new(
            evomem_store::SqliteStore::open(t.sqlite_path()).unwrap(),
        ));
        t.write().engine = Engine::open(Box::new(store)).unwrap();
        // What user a's reads show, from another thread, within 20 s.
        let reads = |t: &Arc<Tenant>| {
            let (tx, rx) = mpsc::channel();
            let t = t.clone();
            let old_id = old.id.clone();
            std::thread::spawn(move || {
                let q = t.shared.embedder.embed_one("new two").unwrap();
                let hits: Vec<String> = t
                    .search("a", &q, 5, &Map::new())
                    .unwrap()
                    .into_iter()
                    .map(|h| h.memory.text)
                    .collect();
                let got = t.get(&old_id).is_ok();
                let listed = t.user_memories("a", None, None, None).unwrap();
                tx.send((hits, got, listed.memories.len())).unwrap();
            });
            rx.recv_timeout(Duration::from_secs(20))
        };
        armed.store(true, Ordering::SeqCst);
        let adder = {
            let t = t.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(t.add("a".into(), vec![mem("new two")]))
            })
        };
        entered_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let during_add = reads(&t);
        release_tx.send(()).unwrap();
        assert_eq!(adder.join().unwrap().unwrap().len(), 1);
        assert_eq!(
            during_add,
            Ok((vec!["old one".to_string()], true, 1)),
            "reads waited for an add's commit, or saw it uncommitted"
        );
        armed.store(true, Ordering::SeqCst);
        let deleter = {
            let t = t.clone();
            let id = old.id.clone();
            std::thread::spawn(move || t.delete(&id).map(|d| d.deleted))
        };
        entered_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let during_delete = reads(&t);
        release_tx.send(()).unwrap();
        assert!(deleter.join().unwrap().unwrap());
        let during_delete = during_delete.expect("reads waited for a delete's commit");
        assert!(during_delete.1, "a read saw the uncommitted delete");
        assert_eq!(during_delete.2, 2);
        let after = reads(&t).unwrap();
        assert_eq!(
            (after.0, after.1, after.2),
            (vec!["new two".to_string()], false, 1)
        );
        t.verify().unwrap();
        t.close();
    }

    /// Issue 37, PostgreSQL: the write gate was per process, so a peer
    /// instance's write that landed while a log rewrite (a user deletion)
    /// planned was overwritten by the rewritten log. Two instances of one
    /// tenant on one schema: while instance a's rewrite is held, instance
    /// b's add must wait (the store's writer lock), and land after it.
    #[test]
    fn a_peer_instance_write_during_a_rewrite_is_not_lost() {
        let Some(url) = pg_test_url() else { return };
        evomem_store::PostgresStore::drop_schema(&url, "evomem_t_pgpeers").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sync_reads = ServeConfig::default().sync_reads;
        let instance = || pg_tenant(dir.path(), &url, "pgpeers", sync_reads);
        let (a, b) = (instance(), instance());
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(a.add("x".into(), vec![mem("x one")])).unwrap();
        rt.block_on(a.add("y".into(), vec![mem("y one")])).unwrap();
        // b catches up (its log now ends where a's rewrite will change it).
        assert_eq!(
            b.user_memories("y", None, None, None)
                .unwrap()
                .memories
                .len(),
            1
        );
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let rewriter = {
            let a = a.clone();
            std::thread::spawn(move || {
                a.rewrite(
                    move |log, every| {
                        started_tx.send(()).unwrap();
                        let _ = release_rx.recv_timeout(Duration::from_secs(60));
                        Ok(without_namespace(log, &Namespace::user("x"), every)?)
                    },
                    |_, _| Ok(Vec::new()),
                )
                .map(|r| r.0.records_removed)
            })
        };
        started_rx.recv().unwrap();
        let (added_tx, added_rx) = mpsc::channel();
        let adder = {
            let b = b.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                let r = rt.block_on(b.add("y".into(), vec![mem("y two")]));
                added_tx.send(r.is_ok()).unwrap();
            })
        };
        let early = added_rx.recv_timeout(Duration::from_millis(700));
        release_tx.send(()).unwrap();
        assert_eq!(rewriter.join().unwrap().unwrap(), 1);
        let added = early.or_else(|_| added_rx.recv_timeout(Duration::from_secs(30)));
        adder.join().unwrap();
        assert_eq!(added, Ok(true), "the peer's add failed");
        for (name, t) in [("a", &a), ("b", &b)] {
            let texts: BTreeSet<String> = t
                .user_memories("y", None, None, None)
                .unwrap()
                .memories
                .into_iter()
                .map(|m| m.text)
                .collect();
            assert_eq!(
                texts,
                BTreeSet::from(["y one".to_string(), "y two".to_string()]),
                "instance {name}: the peer's write was lost"
            );
            assert!(t
                .user_memories("x", None, None, None)
                .unwrap()
                .memories
                .is_empty());
        }
        assert!(
            early.is_err(),
            "the peer's add committed during the rewrite"
        );
        // b found the log rewritten by a (its idempotent answers with
        // text then stop replaying); a made the rewrite itself.
        assert_eq!((a.peer_rewrites(), b.peer_rewrites()), (0, 1));
        a.verify().unwrap();
        for t in [a, b] {
            t.close();
            std::thread::spawn(move || drop(t)).join().unwrap();
        }
    }

    /// Restart cost with large namespaces, for the docs (not a guard):
    /// three users of `EVOMEM_RESTART_N` (25,000) memories each, threshold
    /// 20,000; prints the time the old way (the index built one vector at
    /// a time, graphs grown by inserts, before answering), the time to
    /// answer now, and the time until the graphs built behind are in.
    /// `cargo test --release -p evomem-serve --lib restart_cost -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn restart_cost_with_large_namespaces() {
        let n: usize = std::env::var("EVOMEM_RESTART_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(25_000);
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let shared = Shared {
                config: ServeConfig {
                    data_dir: dir.path().to_path_buf(),
                    ..ServeConfig::default()
                },
                embedder: Arc::new(evomem_embed::HashingEmbedder::new(384)),
                hub: Arc::new(LlmHub::offline()),
                seed: 1,
                metrics: Arc::default(),
            };
            Tenant::open("restart", Arc::new(shared)).unwrap()
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        let t = open();
        for user in ["u1", "u2", "u3"] {
            for chunk in 0..n.div_ceil(1000) {
                let mems: Vec<NewMemory> = (chunk * 1000..((chunk + 1) * 1000).min(n))
                    .map(|i| NewMemory {
                        text: format!("{user} memory {i} about {} and {}", i % 97, i % 13),
                        metadata: Map::new(),
                    })
                    .collect();
                rt.block_on(t.add(user.into(), mems)).unwrap();
            }
        }
        let (state, threshold) = {
            let c = t.read();
            (c.engine.state().clone(), c.threshold)
        };
        t.close();
        drop(t);
        let t0 = std::time::Instant::now();
        let mut old = tenant_index("hashing", 384, threshold);
        for r in state.iter_all().filter(|r| is_kind(r, MEMORY_KIND)) {
            if let Some(e) = &r.embedding {
                old.add(r.id.clone(), r.namespace.clone(), &e.vector)
                    .unwrap();
            }
        }
        let old_ms = t0.elapsed().as_millis();
        let t0 = std::time::Instant::now();
        let t = open();
        let answer_ms = t0.elapsed().as_millis();
        while t.read().index.graph_count() < 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let graphs_ms = t0.elapsed().as_millis();
        eprintln!(
            "restart over 3 x {n} memories: old index build {old_ms} ms (graphs: {}); \
             now answering after {answer_ms} ms, graphs in after {graphs_ms} ms",
            old.graph_count()
        );
        t.close();
    }

    /// Issue 37, PostgreSQL: catching up with other instances' writes ran
    /// its store queries under the core write lock, and reads with
    /// `sync_reads` (the default) took the write gate, so they waited for
    /// every local write's commit. Three instances of one tenant on one
    /// schema: `a` writes as a peer; while `c`'s store holds a writer's
    /// catch-up query, `c`'s reads (`sync_reads` off) answer; while `b`'s
    /// store holds a writer's commit, `b`'s reads (`sync_reads` on) answer,
    /// show the peer's write that the writer caught up with, and not the
    /// uncommitted one. Both writes land once released.
    #[test]
    fn postgres_reads_answer_while_a_write_catches_up_or_commits() {
        let Some(url) = pg_test_url() else { return };
        evomem_store::PostgresStore::drop_schema(&url, PG_READS_SCHEMA).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let instance = |sync_reads| pg_tenant(dir.path(), &url, "pgreads", sync_reads);
        let (a, b) = (instance(true), instance(true));
        let first = rt
            .block_on(a.add("u".into(), vec![mem("first")]))
            .unwrap()
            .remove(0);
        let c = instance(false);
        // c (`sync_reads` off): a writer's catch-up query is held; c's reads
        // answer, and once released c has caught up with a's write.
        assert_eq!(texts(&c), BTreeSet::from(["first".to_string()]));
        let during_query = reads_while_a_write_is_held(
            &rt,
            &url,
            (&a, &c),
            Held::CatchUpQuery,
            ("peer two", ("v", "c's own")),
            &first.id,
        );
        assert_eq!(
            during_query.map(|r| r.0),
            Ok(true),
            "a read waited for a writer's catch-up query"
        );
        assert!(texts(&c).contains("peer two"), "c did not catch up");
        // b (`sync_reads` on): a writer's commit is held after it caught up;
        // b's reads answer, show a's write and not the uncommitted one.
        let during_commit = reads_while_a_write_is_held(
            &rt,
            &url,
            (&a, &b),
            Held::Commit,
            ("peer three", ("u", "b's own")),
            &first.id,
        )
        .expect("a synced read waited for a local commit");
        let peers = ["first", "peer two", "peer three"].map(String::from);
        assert_eq!(
            during_commit.1,
            BTreeSet::from(peers.clone()),
            "a synced read missed a peer's write or saw an uncommitted one"
        );
        let all: BTreeSet<String> = peers.into_iter().chain(["b's own".to_string()]).collect();
        assert_eq!(texts(&b), all);
        assert_eq!(texts(&a), all, "a did not catch up with b");
        as_of_answers_while_the_core_lock_is_held(&b, &all);
        for t in [a, b, c] {
            t.verify().unwrap();
            t.close();
            std::thread::spawn(move || drop(t)).join().unwrap();
        }
    }

    /// The schema of tenant `pgreads`.
    const PG_READS_SCHEMA: &str = "evomem_t_pgreads";

    /// The texts of user u's memories on `t`.
    fn texts(t: &Tenant) -> BTreeSet<String> {
        t.user_memories("u", None, None, None)
            .unwrap()
            .memories
            .into_iter()
            .map(|m| m.text)
            .collect()
    }

    /// From another thread, within 10 s: get `id` (found or not), list
    /// user u.
    fn reads_on_another_thread(
        t: &Arc<Tenant>,
        id: &str,
    ) -> Result<(bool, BTreeSet<String>), mpsc::RecvTimeoutError> {
        let (tx, rx) = mpsc::channel();
        let t = t.clone();
        let id = id.to_string();
        std::thread::spawn(move || {
            let got = t.get(&id).is_ok();
            let _ = tx.send((got, texts(&t)));
        });
        rx.recv_timeout(Duration::from_secs(10))
    }

    /// Put `t`'s engine on a [`SlowCommits`] over a new connection to
    /// `pgreads`; returns its commit and load triggers and its channels.
    fn hold_store(
        t: &Arc<Tenant>,
        url: &str,
    ) -> (
        Arc<std::sync::atomic::AtomicBool>,
        Arc<std::sync::atomic::AtomicBool>,
        mpsc::Receiver<()>,
        mpsc::Sender<()>,
    ) {
        let inner = evomem_store::PostgresStore::connect(url, PG_READS_SCHEMA).unwrap();
        let (store, armed, armed_loads, entered, release) = SlowCommits::wrap(Box::new(inner));
        let mut core = t.write();
        core.engine = Engine::open(Box::new(store)).unwrap();
        core.rebuild().unwrap();
        drop(core);
        (armed, armed_loads, entered, release)
    }

    /// Add `text` for `user` on `t` from a thread of its own.
    fn add_on_thread(
        t: &Arc<Tenant>,
        user: &'static str,
        text: &'static str,
    ) -> std::thread::JoinHandle<Result<Vec<MemoryOut>, ApiError>> {
        let t = t.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(t.add(user.into(), vec![mem(text)]))
        })
    }

    /// What [`reads_while_a_write_is_held`] holds a writer at.
    enum Held {
        /// Its catch-up query (the store's load of other instances' ops).
        CatchUpQuery,
        /// Its commit, after it caught up.
        Commit,
    }

    /// `a` writes `peer` for user u; then a writer on `t` adds `own` (user,
    /// text) and is held at `held` while `t` reads from another thread
    /// (get `first`, list user u); once released, its write lands. Returns
    /// the reads.
    fn reads_while_a_write_is_held(
        rt: &tokio::runtime::Runtime,
        url: &str,
        (a, t): (&Arc<Tenant>, &Arc<Tenant>),
        held: Held,
        (peer, own): (&str, (&'static str, &'static str)),
        first: &str,
    ) -> Result<(bool, BTreeSet<String>), mpsc::RecvTimeoutError> {
        let (commits, loads, entered, release) = hold_store(t, url);
        rt.block_on(a.add("u".into(), vec![mem(peer)])).unwrap();
        match held {
            Held::CatchUpQuery => loads.store(true, Ordering::SeqCst),
            Held::Commit => commits.store(true, Ordering::SeqCst),
        }
        let writer = add_on_thread(t, own.0, own.1);
        entered.recv_timeout(Duration::from_secs(20)).unwrap();
        let during = reads_on_another_thread(t, first);
        release.send(()).unwrap();
        assert_eq!(writer.join().unwrap().unwrap().len(), 1);
        during
    }

    /// `as_of` replays on a second connection: it answers while another
    /// request holds b's core write lock (and write gate), and sees every
    /// instance's writes up to its time.
    fn as_of_answers_while_the_core_lock_is_held(b: &Arc<Tenant>, all: &BTreeSet<String>) {
        let held = b.write();
        let (tx, rx) = mpsc::channel();
        {
            let b = b.clone();
            std::thread::spawn(move || {
                let l = b.user_memories("u", Some(now_ms() + 1000), None, None);
                let _ = tx.send(l.map(|l| {
                    l.memories
                        .into_iter()
                        .map(|m| m.text)
                        .collect::<BTreeSet<String>>()
                }));
            });
        }
        let listed = rx.recv_timeout(Duration::from_secs(10));
        drop(held);
        assert_eq!(
            &listed
                .expect("an as_of listing waited for the core lock")
                .unwrap(),
            all
        );
    }

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

    #[test]
    fn decision_ids_are_random_and_exact_in_json() {
        let ids: BTreeSet<u64> = (0..1000).map(|_| new_decision_id()).collect();
        assert_eq!(ids.len(), 1000, "no repeats");
        assert!(ids.iter().all(|&i| i > 0 && i < (1 << 53)));
        // Not a timestamp: spread over the whole range.
        assert!(ids.iter().any(|&i| i > (1 << 52)));
        assert!(ids.iter().any(|&i| i < (1 << 52)));
    }
}
