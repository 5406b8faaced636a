//! The engine: validates, applies, logs and persists the ops that policies
//! return, and serves namespaced reads.
//!
//! Policies decide; the engine acts. Every applied op is stamped with
//! [`Provenance`], appended to the op log, and handed to a [`MemoryStore`] in
//! one atomic [`Commit`] per batch together with the records it changed. The
//! engine keeps the live [`MemoryState`] and the log in memory; the store is
//! the durable copy (in-memory, SQLite or PostgreSQL).
//!
//! Snapshots: after a batch, a snapshot is written when at least
//! `max(snapshot_every, live records)` ops have passed since the last one.
//! Stretching the interval to the number of live records keeps the total
//! snapshot cost linear in the log length (each snapshot costs O(records)),
//! while [`Engine::state_at`] still replays at most one interval of ops.
//!
//! An [`Engine::ephemeral`] engine has no store at all: the live state and the
//! log are the only copies. Evaluation runs use it (a run is reproducible from
//! its config, so durability buys nothing there, and a store's copy of the
//! log and records doubles the memory of a large run); `state_at`,
//! `forget_user` and `verify` then work from the engine's own log.
//! [`Engine::ephemeral_streaming`] hands each applied batch to an [`OpSink`]
//! instead of keeping it, so that an evaluation writes its op log while it
//! runs (on another core) and never holds the whole log in memory.

use crate::error::StoreError;
use crate::in_memory::InMemoryStore;
use crate::rewrite::ForgetReport;
use crate::store::{replay_into, Commit, MemoryStore};
use evomem_core::{
    LoggedOp, LogicalTime, MemoryId, MemoryOp, MemoryRecord, MemoryState, Namespace, OpError,
    PlannedOp, Provenance, RecordKind,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// Default minimum number of ops between two snapshots.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 1024;

/// What [`Engine::sync`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// Nothing new in the store.
    Current,
    /// The store's log extends this engine's: the ops from log index `from`
    /// on are new, and were applied.
    Extended {
        /// Index (0-based) in [`Engine::log`] of the first new op.
        from: usize,
    },
    /// The stored log was rewritten (a user forgotten elsewhere); state and
    /// log were reloaded from scratch.
    Reloaded,
}

/// Where a catch-up starts ([`Engine::sync_point`]).
#[derive(Debug, Clone)]
pub struct SyncPoint {
    len: u64,
    last: Option<LoggedOp>,
}

/// What the store holds beyond a [`SyncPoint`], read by
/// [`StoreHandle::fetch_since`] without the engine, for
/// [`Engine::catch_up`].
#[derive(Debug)]
pub struct Fetched {
    base: u64,
    found: Found,
}

impl Fetched {
    /// Nothing new (a catch-up has nothing to do).
    pub fn is_current(&self) -> bool {
        matches!(self.found, Found::Current)
    }
}

#[derive(Debug)]
enum Found {
    Current,
    Extended(Vec<LoggedOp>),
    Reloaded {
        log: Vec<LoggedOp>,
        state: MemoryState,
        snapshot_seq: u64,
    },
}

/// Ops of one policy at one logical time, for [`Engine::apply_batches`].
#[derive(Debug, Clone)]
pub struct Batch {
    /// The policy (or `api`) that planned the ops; goes into provenance.
    pub policy: String,
    /// The ops, in application order.
    pub ops: Vec<PlannedOp>,
    /// Their logical time.
    pub at: LogicalTime,
}

/// Applies ops to a [`MemoryState`], keeps the op log and persists both.
pub struct Engine {
    state: MemoryState,
    log: Vec<LoggedOp>,
    deterministic: bool,
    /// In a mutex so that `Engine` stays `Sync` (SQLite connections are
    /// not), and behind an `Arc` so that a [`StoreHandle`] can commit a
    /// staged batch without the engine (see [`Engine::stage_batches`]). The
    /// lock is uncontended unless a handle is committing. `None`: an
    /// ephemeral engine (module docs) that persists nothing.
    store: Option<Arc<Mutex<Box<dyn MemoryStore>>>>,
    snapshot_every: u64,
    last_snapshot_seq: u64,
    /// `false` ([`Engine::ephemeral_unlogged`], [`Engine::ephemeral_streaming`]):
    /// ops are counted in `tally` and not kept; `log` stays empty.
    keep_log: bool,
    /// Where applied batches go when the log is not kept
    /// ([`Engine::ephemeral_streaming`]).
    sink: Option<Box<dyn OpSink>>,
    /// Ops handed to `sink` so far (the next op's seq is this plus one).
    streamed: u64,
    /// Counts of every op applied, kept in both modes.
    tally: OpTally,
    /// See [`Engine::log_epoch`].
    epoch: u64,
}

/// A process-wide fresh number for [`Engine::log_epoch`].
fn next_epoch() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Takes the ops an [`Engine::ephemeral_streaming`] engine applies, one
/// batch per [`Engine::apply`], in order and numbered from 1 as a kept log
/// would be.
pub trait OpSink: Send + Sync {
    /// Take one applied batch. An error fails the `apply` that produced it
    /// (the batch stays applied to the live state).
    fn accept(&mut self, ops: Vec<LoggedOp>) -> Result<(), StoreError>;
}

/// How many ops an engine applied, by provenance label and by op name: what
/// a run reports about its op log when it does not keep one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpTally {
    /// Ops applied.
    pub total: usize,
    /// Per provenance label (`note`, `link`, `evolve`, ...).
    pub by_label: std::collections::BTreeMap<String, usize>,
    /// Per op name (`create`, `link`, ...).
    pub by_op: std::collections::BTreeMap<String, usize>,
}

impl OpTally {
    fn count_name(&mut self, label: &str, op: &str) {
        self.total += 1;
        *self.by_label.entry(label.to_string()).or_insert(0) += 1;
        *self.by_op.entry(op.to_string()).or_insert(0) += 1;
    }
}

/// What [`Engine::apply_in_memory`] did.
struct Applied {
    /// Log length before the batches.
    start: usize,
    touched: BTreeSet<MemoryId>,
    saved: Vec<(MemoryId, Option<MemoryRecord>)>,
    counts: Vec<(String, &'static str)>,
    streamed: Vec<LoggedOp>,
    applied: usize,
    last_at: LogicalTime,
}

/// Batches validated by [`Engine::stage_batches`] and not yet visible:
/// their log entries, the new value of every record they change (`None`:
/// removed), and the snapshot due before them.
#[derive(Debug, Clone)]
pub struct Staged {
    /// Log length the batches were staged on.
    base: u64,
    ops: Vec<LoggedOp>,
    records: Vec<(MemoryId, Option<MemoryRecord>)>,
    counts: Vec<(String, &'static str)>,
    applied: usize,
    /// `(seq, logical time)` of the state before the batches, when a
    /// snapshot of it is due.
    snapshot: Option<(u64, LogicalTime)>,
    /// The keys of the writes the batches are ([`Commit::keys`]).
    keys: Vec<crate::WriteKey>,
}

impl Staged {
    /// The log entries the batches will append, in seq order.
    pub fn ops(&self) -> &[LoggedOp] {
        &self.ops
    }

    /// Carry `keys`, the keys of the writes these batches are: the commit
    /// stores them in its transaction and is refused, whole, when one was
    /// stored before ([`StoreError::DuplicateKey`]).
    pub fn set_keys(&mut self, keys: Vec<crate::WriteKey>) {
        self.keys = keys;
    }

    /// Whether a snapshot of the state before the batches is due (then
    /// [`StoreHandle::commit`] wants the engine to take it from).
    pub fn snapshot_due(&self) -> bool {
        self.snapshot.is_some()
    }
}

/// A handle on an engine's store ([`Engine::store_handle`]) that commits
/// staged batches while the engine itself stays free for readers.
#[derive(Clone)]
pub struct StoreHandle(Arc<Mutex<Box<dyn MemoryStore>>>);

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreHandle")
            .field(&lock_store(&self.0).location())
            .finish()
    }
}

impl StoreHandle {
    /// Take the store's writer lock ([`MemoryStore::lock_writers`]).
    pub fn lock_writers(&self) -> Result<(), StoreError> {
        lock_store(&self.0).lock_writers()
    }

    /// Read what the store holds after `point` (see [`Engine::sync`]):
    /// the new ops when the stored log extends the engine's, everything
    /// reloaded when it was rewritten meanwhile (another process forgot a
    /// user, which renumbers the log). Needs no lock on the engine.
    pub fn fetch_since(&self, point: &SyncPoint) -> Result<Fetched, StoreError> {
        let mut guard = lock_store(&self.0);
        let store = guard.as_mut();
        let ours = point.len;
        let last = store.last_seq()?;
        let extends = last >= ours
            && (ours == 0 || store.load_ops(ours - 1, ours)?.last() == point.last.as_ref());
        let found = if !extends {
            let (log, state, snapshot_seq) = load_all(store)?;
            Found::Reloaded {
                log,
                state,
                snapshot_seq,
            }
        } else if last == ours {
            Found::Current
        } else {
            Found::Extended(store.load_ops(ours, last)?)
        };
        Ok(Fetched { base: ours, found })
    }

    /// Release the store's writer lock ([`MemoryStore::unlock_writers`]).
    pub fn unlock_writers(&self) -> Result<(), StoreError> {
        lock_store(&self.0).unlock_writers()
    }

    /// Persist `staged` in one atomic, durable commit, with the snapshot
    /// it carries when `engine` is given: the engine it was staged on, not
    /// yet installed (its state is the state before the batches). Without
    /// `engine` the snapshot is skipped and dropped from `staged`, so that
    /// [`Engine::install`] does not count it. A batch with no ops stores
    /// nothing.
    pub fn commit(&self, staged: &mut Staged, engine: Option<&Engine>) -> Result<(), StoreError> {
        let snapshot = match (staged.snapshot, engine) {
            (Some((seq, at)), Some(e)) if e.log.len() as u64 == seq => Some((seq, at, e.state())),
            _ => None,
        };
        if snapshot.is_none() || staged.ops.is_empty() {
            staged.snapshot = None;
        }
        if staged.ops.is_empty() {
            return Ok(());
        }
        let upserts: Vec<&MemoryRecord> = staged
            .records
            .iter()
            .filter_map(|(_, r)| r.as_ref())
            .collect();
        let deletes: Vec<MemoryId> = staged
            .records
            .iter()
            .filter(|(_, r)| r.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        lock_store(&self.0).commit(&Commit {
            ops: &staged.ops,
            upserts: &upserts,
            deletes: &deletes,
            snapshot,
            keys: &staged.keys,
        })
    }

    /// The request digest stored with write key `key`, if a commit stored
    /// it ([`MemoryStore::committed_key`]).
    pub fn committed_key(&self, key: &str) -> Result<Option<[u8; 32]>, StoreError> {
        lock_store(&self.0).committed_key(key)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.location())
            .field("ops", &self.log.len())
            .field("records", &self.state.len())
            .field("snapshot_every", &self.snapshot_every)
            .finish()
    }
}

// `Engine` is shared across threads by callers (read-only); keep it so.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Engine>();
};

impl Default for Engine {
    fn default() -> Self {
        Self::in_memory()
    }
}

impl Engine {
    /// An in-memory engine. Wall times are recorded as 0 so that runs are
    /// byte-for-byte reproducible.
    pub fn in_memory() -> Self {
        Self {
            state: MemoryState::new(),
            log: Vec::new(),
            deterministic: true,
            store: Some(Arc::new(Mutex::new(Box::new(InMemoryStore::new())))),
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            last_snapshot_seq: 0,
            keep_log: true,
            sink: None,
            streamed: 0,
            tally: OpTally::default(),
            epoch: next_epoch(),
        }
    }

    /// An engine without a store (module docs): the live state and the op
    /// log in memory, nothing persisted, no snapshots. Wall times are 0.
    pub fn ephemeral() -> Self {
        Self {
            state: MemoryState::new(),
            log: Vec::new(),
            deterministic: true,
            store: None,
            snapshot_every: 0,
            last_snapshot_seq: 0,
            keep_log: true,
            sink: None,
            streamed: 0,
            tally: OpTally::default(),
            epoch: next_epoch(),
        }
    }

    /// An ephemeral engine that keeps no op log: each op is applied to the
    /// live state, counted in [`Engine::tally`] and dropped, so a run that
    /// will not write its log (`--ops-log off`, the delayed-feedback arena)
    /// holds only its state. At 100k interactions the log was about half of
    /// AtomRec's and MemRL's heap (376 bytes per op inline, plus embedding
    /// vectors), which kept both from reaching 1M. [`Engine::log`] is empty.
    pub fn ephemeral_unlogged() -> Self {
        Self {
            keep_log: false,
            ..Self::ephemeral()
        }
    }

    /// An ephemeral engine that hands every applied batch to `sink` instead
    /// of keeping it (module docs): the ops are numbered, stamped and
    /// counted as [`Engine::ephemeral`] would log them, and
    /// [`Engine::log`] stays empty.
    pub fn ephemeral_streaming(sink: Box<dyn OpSink>) -> Self {
        Self {
            keep_log: false,
            sink: Some(sink),
            ..Self::ephemeral()
        }
    }

    /// Counts of the ops this engine applied so far (in both modes; not the
    /// ops a store-backed engine loaded or synced).
    pub fn tally(&self) -> &OpTally {
        &self.tally
    }

    /// A number that stays the same while the op log only grows, and
    /// changes (to one no engine of this process had before) whenever the
    /// log is replaced: a rewrite ([`Engine::forget_user`],
    /// [`Engine::forget_records`], [`Engine::adopt_rewrite`]) or a reload
    /// in [`Engine::catch_up`]; another engine has another. A derived index
    /// of positions in [`Engine::log`] is valid while the epoch it was built
    /// at is current.
    pub fn log_epoch(&self) -> u64 {
        self.epoch
    }

    /// The op log, moved out of a finished engine (no copy).
    pub fn into_log(self) -> Vec<LoggedOp> {
        self.log
    }

    /// The live state and the op log, moved out of a finished engine.
    pub fn into_parts(self) -> (MemoryState, Vec<LoggedOp>) {
        (self.state, self.log)
    }

    /// An engine over an existing store: loads the log, rebuilds the state
    /// from the latest snapshot plus the ops after it. Wall times are real
    /// (see [`Engine::deterministic`]).
    pub fn open(store: Box<dyn MemoryStore>) -> Result<Self, StoreError> {
        let mut store = store;
        let (log, state, from) = load_all(store.as_mut())?;
        Ok(Self {
            state,
            log,
            deterministic: false,
            store: Some(Arc::new(Mutex::new(store))),
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            last_snapshot_seq: from,
            keep_log: true,
            sink: None,
            streamed: 0,
            tally: OpTally::default(),
            epoch: next_epoch(),
        })
    }

    /// Open (or create) a SQLite store at `path`.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(path: impl AsRef<std::path::Path>) -> Result<Self, StoreError> {
        Self::open(Box::new(crate::sqlite::SqliteStore::open(path)?))
    }

    /// Connect to PostgreSQL at `url`, store in schema
    /// [`crate::postgres::DEFAULT_SCHEMA`].
    #[cfg(feature = "postgres")]
    pub fn postgres(url: &str) -> Result<Self, StoreError> {
        Self::postgres_in(url, crate::postgres::DEFAULT_SCHEMA)
    }

    /// Connect to PostgreSQL at `url`, store in `schema`.
    #[cfg(feature = "postgres")]
    pub fn postgres_in(url: &str, schema: &str) -> Result<Self, StoreError> {
        Self::open(Box::new(crate::postgres::PostgresStore::connect(
            url, schema,
        )?))
    }

    /// Builder: minimum ops between snapshots (0 disables snapshots).
    /// Default [`DEFAULT_SNAPSHOT_EVERY`].
    pub fn with_snapshot_every(mut self, n: u64) -> Self {
        self.snapshot_every = n;
        self
    }

    /// Builder: record wall times as 0 (reproducible logs). Default: true
    /// for [`Engine::in_memory`], false for opened stores.
    pub fn deterministic(mut self, yes: bool) -> Self {
        self.deterministic = yes;
        self
    }

    /// Current memory.
    pub fn state(&self) -> &MemoryState {
        &self.state
    }

    /// The op log so far.
    pub fn log(&self) -> &[LoggedOp] {
        &self.log
    }

    /// Where the store lives (`memory (ephemeral)` without one).
    pub fn location(&self) -> String {
        match &self.store {
            None => "memory (ephemeral)".to_string(),
            Some(m) => lock_store(m).location(),
        }
    }

    /// On-disk format version of the store ([`crate::FORMAT_VERSION`], the
    /// version this engine writes, without one).
    pub fn format_version(&self) -> u32 {
        match &self.store {
            None => crate::FORMAT_VERSION,
            Some(m) => lock_store(m).format_version(),
        }
    }

    /// The store (for inspection and tests); `None` for an ephemeral engine,
    /// and while a [`StoreHandle`] of this engine is alive.
    pub fn store_mut(&mut self) -> Option<&mut dyn MemoryStore> {
        let m = Arc::get_mut(self.store.as_mut()?)?;
        Some(match m.get_mut() {
            Ok(s) => s.as_mut(),
            Err(p) => p.into_inner().as_mut(),
        })
    }

    /// Validate and apply a batch of ops from `policy` at logical time `at`.
    ///
    /// Ops are applied in order; the first rejected op stops the batch and is
    /// reported. The batch is all or nothing: a rejection undoes the ops
    /// before it, in memory, and nothing is logged or persisted. The
    /// applied ops are persisted in one atomic commit before this returns:
    /// `Ok` means they are durable. If persisting fails, the batch is rolled
    /// back in memory too and the store error is returned.
    ///
    /// Every kind of engine undoes a rejected batch the same way: it keeps,
    /// for each record the batch changed, its value before the batch, and
    /// puts those back.
    pub fn apply(
        &mut self,
        policy: &str,
        ops: Vec<PlannedOp>,
        at: LogicalTime,
    ) -> Result<usize, StoreError> {
        self.apply_batches(vec![Batch {
            policy: policy.to_string(),
            ops,
            at,
        }])
    }

    /// Apply several batches (each with its own policy and logical time, in
    /// order) as one: with a store, either every op of every batch is
    /// applied and persisted in one commit, or none is (a rejected op undoes
    /// the ops before it, and its error names its index counted across the
    /// batches). Returns the number of ops applied.
    pub fn apply_batches(&mut self, batches: Vec<Batch>) -> Result<usize, StoreError> {
        let Applied {
            start,
            touched,
            saved,
            counts,
            streamed,
            applied,
            last_at,
        } = self.apply_in_memory(batches)?;
        for (label, op) in &counts {
            self.tally.count_name(label, op);
        }
        if let (false, Some(sink)) = (streamed.is_empty(), self.sink.as_mut()) {
            self.streamed += streamed.len() as u64;
            sink.accept(streamed)?;
        }
        if self.log.len() > start {
            if let Err(e) = self.persist(start, &touched, last_at) {
                self.log.truncate(start);
                self.state.restore(saved);
                return Err(e);
            }
        }
        Ok(applied)
    }

    /// Validate and apply `batches` to the live state and log (or the
    /// streamed list), all or nothing: a rejected op undoes the ops before
    /// it. Persists and counts nothing.
    fn apply_in_memory(&mut self, batches: Vec<Batch>) -> Result<Applied, StoreError> {
        let start = self.log.len();
        let mut touched: BTreeSet<MemoryId> = BTreeSet::new();
        // (label, op name) of each applied op, counted once the batch holds.
        let mut counts: Vec<(String, &'static str)> = Vec::new();
        // Each changed record's value before the batch, to undo a rejection.
        let mut saved: Vec<(MemoryId, Option<MemoryRecord>)> = Vec::new();
        let mut streamed: Vec<LoggedOp> = Vec::new();
        let mut index = 0usize;
        let mut last_at = LogicalTime(0);
        for Batch { policy, ops, at } in batches {
            last_at = at;
            for p in ops {
                let ids = touched_ids(&self.state, &p.op);
                for id in &ids {
                    if !touched.contains(id) {
                        saved.push((id.clone(), self.state.get(id).cloned()));
                    }
                }
                if let Err(source) = self.state.apply(&p.op, at) {
                    // All or nothing: undo the ops before the rejected one.
                    self.log.truncate(start);
                    self.state.restore(saved);
                    return Err(StoreError::Rejected {
                        index,
                        label: p.label.clone(),
                        source,
                    });
                }
                index += 1;
                touched.extend(ids);
                counts.push((p.label.clone(), p.op.name()));
                let seq = if self.keep_log {
                    self.log.len() as u64 + 1
                } else if self.sink.is_some() {
                    self.streamed + streamed.len() as u64 + 1
                } else {
                    continue;
                };
                let logged = self.log_entry(seq, &policy, p, at);
                if self.keep_log {
                    self.log.push(logged);
                } else {
                    streamed.push(logged);
                }
            }
        }
        Ok(Applied {
            start,
            touched,
            saved,
            counts,
            streamed,
            applied: index,
            last_at,
        })
    }

    /// Validate `batches` as [`Engine::apply_batches`] does, without
    /// changing anything a reader sees: the batches are applied, the new
    /// values of the records they change and their log entries are copied
    /// into the returned [`Staged`], and the live state and log are put
    /// back as they were. Store the result through a [`StoreHandle`]
    /// ([`Engine::store_handle`]), which needs no access to the engine,
    /// then make it visible with [`Engine::install`]. A service does this
    /// so that a slow commit does not hold the lock its readers take; it
    /// must keep every other writer of the engine out from this call to the
    /// install (the install refuses a log that moved).
    ///
    /// The staged commit carries the snapshot that is due on the state
    /// *before* the batches (the rule of the module docs, one batch later
    /// than [`Engine::apply_batches`] takes it), so that the store writes
    /// it from the engine's state while the batches are not yet installed.
    ///
    /// Only for engines that keep their log (not
    /// [`Engine::ephemeral_unlogged`] or [`Engine::ephemeral_streaming`]).
    pub fn stage_batches(&mut self, batches: Vec<Batch>) -> Result<Staged, StoreError> {
        if !self.keep_log {
            return Err(StoreError::Config(
                "staging a batch needs an engine that keeps its op log".to_string(),
            ));
        }
        let base = self.log.len() as u64;
        let snapshot = self.snapshot_before_staging();
        let Applied {
            start,
            touched,
            saved,
            counts,
            applied,
            ..
        } = self.apply_in_memory(batches)?;
        let ops = self.log.split_off(start);
        let records = touched
            .into_iter()
            .map(|id| {
                let now = self.state.get(&id).cloned();
                (id, now)
            })
            .collect();
        self.state.restore(saved);
        Ok(Staged {
            base,
            ops,
            records,
            counts,
            applied,
            snapshot,
            keys: Vec::new(),
        })
    }

    /// The log entry of planned op `p` of `policy`'s batch at `at`, numbered
    /// `seq` (wall time 0 for a deterministic engine).
    fn log_entry(&self, seq: u64, policy: &str, p: PlannedOp, at: LogicalTime) -> LoggedOp {
        LoggedOp {
            seq,
            op: p.op,
            provenance: Provenance {
                policy: policy.to_string(),
                label: p.label,
                reason: p.reason,
                sources: p.sources,
                logical_time: at,
                wall_time_ms: if self.deterministic { 0 } else { now_ms() },
            },
        }
    }

    /// `(seq, logical time)` of the state now, when a snapshot of it is
    /// due before the next staged batch (see [`Engine::stage_batches`]).
    fn snapshot_before_staging(&self) -> Option<(u64, LogicalTime)> {
        let base = self.log.len() as u64;
        let since = base.saturating_sub(self.last_snapshot_seq);
        (self.snapshot_every > 0 && since >= self.snapshot_every.max(self.state.len() as u64)).then(
            || {
                let at = self
                    .log
                    .last()
                    .map_or(LogicalTime(0), |o| o.provenance.logical_time);
                (base, at)
            },
        )
    }

    /// [`Engine::stage_batches`] for batches that only create records
    /// without links (a service's adds), through `&self`: nothing is
    /// applied to the live state, so readers sharing a lock with the caller
    /// go on meanwhile. Gives what `stage_batches` gives for such batches,
    /// errors included (a duplicate id is rejected with its index and
    /// label). Any other op, or a link, is a [`StoreError::Config`] error:
    /// stage those with `stage_batches`. The caller keeps every other
    /// writer out until the install, as for `stage_batches`.
    pub fn stage_creates(&self, batches: Vec<Batch>) -> Result<Staged, StoreError> {
        if !self.keep_log {
            return Err(StoreError::Config(
                "staging a batch needs an engine that keeps its op log".to_string(),
            ));
        }
        let base = self.log.len() as u64;
        let snapshot = self.snapshot_before_staging();
        let mut made: BTreeMap<MemoryId, MemoryRecord> = BTreeMap::new();
        let mut ops: Vec<LoggedOp> = Vec::new();
        let mut counts: Vec<(String, &'static str)> = Vec::new();
        for Batch {
            policy,
            ops: planned,
            at,
        } in batches
        {
            for p in planned {
                let index = ops.len();
                let record = match &p.op {
                    MemoryOp::Create { record } if record.links.is_empty() => record,
                    other => {
                        return Err(StoreError::Config(format!(
                            "stage_creates: op {index} is a {} (or a create with links); use stage_batches",
                            other.name()
                        )))
                    }
                };
                let checked = if made.contains_key(&record.id) {
                    Err(OpError::DuplicateId {
                        id: record.id.clone(),
                    })
                } else {
                    self.state.validate(&p.op)
                };
                if let Err(source) = checked {
                    return Err(StoreError::Rejected {
                        index,
                        label: p.label.clone(),
                        source,
                    });
                }
                let mut r = record.clone();
                r.strength = r.strength.clamp(-1.0, 1.0);
                made.insert(r.id.clone(), r);
                counts.push((p.label.clone(), p.op.name()));
                ops.push(self.log_entry(base + index as u64 + 1, &policy, p, at));
            }
        }
        let applied = ops.len();
        Ok(Staged {
            base,
            ops,
            records: made.into_iter().map(|(id, r)| (id, Some(r))).collect(),
            counts,
            applied,
            snapshot,
            keys: Vec::new(),
        })
    }

    /// A handle on this engine's store that commits [`Staged`] batches
    /// without the engine; `None` for an ephemeral engine.
    pub fn store_handle(&self) -> Option<StoreHandle> {
        self.store.as_ref().map(|m| StoreHandle(m.clone()))
    }

    /// Make a staged batch visible, once [`StoreHandle::commit`] stored it
    /// (or at once, for an ephemeral engine): its records take their new
    /// values and its ops join the log. Refused, with nothing changed, when
    /// the log moved since [`Engine::stage_batches`] (the caller let
    /// another writer in): the engine then no longer matches its store, and
    /// the caller should reload it ([`Engine::sync`]). Returns the number of
    /// ops applied.
    pub fn install(&mut self, staged: Staged) -> Result<usize, StoreError> {
        if self.log.len() as u64 != staged.base {
            return Err(StoreError::Corrupt {
                location: self.location(),
                detail: format!(
                    "a batch staged on a log of {} ops was installed on one of {}",
                    staged.base,
                    self.log.len()
                ),
            });
        }
        for (label, op) in &staged.counts {
            self.tally.count_name(label, op);
        }
        self.state.restore(staged.records);
        self.log.extend(staged.ops);
        if let Some((seq, _)) = staged.snapshot {
            self.last_snapshot_seq = seq;
        }
        Ok(staged.applied)
    }

    fn persist(
        &mut self,
        start: usize,
        touched: &BTreeSet<MemoryId>,
        at: LogicalTime,
    ) -> Result<(), StoreError> {
        let Some(store) = self.store.as_ref() else {
            return Ok(());
        };
        let mut upserts: Vec<&MemoryRecord> = Vec::new();
        let mut deletes: Vec<MemoryId> = Vec::new();
        for id in touched {
            match self.state.get(id) {
                Some(r) => upserts.push(r),
                None => deletes.push(id.clone()),
            }
        }
        let seq = self.log.len() as u64;
        let since = seq.saturating_sub(self.last_snapshot_seq);
        let due =
            self.snapshot_every > 0 && since >= self.snapshot_every.max(self.state.len() as u64);
        let commit = Commit {
            ops: &self.log[start..],
            upserts: &upserts,
            deletes: &deletes,
            snapshot: due.then_some((seq, at, &self.state)),
            keys: &[],
        };
        lock_store(store).commit(&commit)?;
        if due {
            self.last_snapshot_seq = seq;
        }
        Ok(())
    }

    /// Catch up with writes that another process made to the same store
    /// (two service instances on one PostgreSQL): load the ops after this
    /// engine's log and replay them. When the stored log no longer extends
    /// this one (another process forgot a user, which renumbers the log),
    /// the engine reloads everything. An ephemeral engine is always current.
    ///
    /// This holds `&mut self` through the store's queries; a caller that
    /// must not (the service, whose readers wait on the engine's lock)
    /// splits it: [`Engine::sync_point`] and [`StoreHandle::fetch_since`]
    /// with no lock on the engine, then [`Engine::catch_up`] under it.
    pub fn sync(&mut self) -> Result<Synced, StoreError> {
        let Some(handle) = self.store_handle() else {
            return Ok(Synced::Current);
        };
        let fetched = handle.fetch_since(&self.sync_point())?;
        match self.catch_up(fetched)? {
            Some(synced) => Ok(synced),
            None => Err(StoreError::Corrupt {
                location: self.location(),
                detail: "the log moved while it was being caught up".into(),
            }),
        }
    }

    /// Where a catch-up starts: this engine's log length and last op.
    pub fn sync_point(&self) -> SyncPoint {
        SyncPoint {
            len: self.log.len() as u64,
            last: self.log.last().cloned(),
        }
    }

    /// Take in what [`StoreHandle::fetch_since`] found after
    /// [`Engine::sync_point`]: replay the new ops, or swap in the reloaded
    /// log and state. `Ok(None)`, with nothing changed, when this engine's
    /// log moved since the sync point (fetch again from a new one).
    pub fn catch_up(&mut self, fetched: Fetched) -> Result<Option<Synced>, StoreError> {
        if self.log.len() as u64 != fetched.base {
            return Ok(None);
        }
        match fetched.found {
            Found::Current => Ok(Some(Synced::Current)),
            Found::Extended(new) => {
                let location = self.location();
                replay_into(&mut self.state, &new, &location)?;
                let from = self.log.len();
                self.log.extend(new);
                Ok(Some(Synced::Extended { from }))
            }
            Found::Reloaded {
                log,
                state,
                snapshot_seq,
            } => {
                (self.log, self.state, self.last_snapshot_seq) = (log, state, snapshot_seq);
                self.epoch = next_epoch();
                Ok(Some(Synced::Reloaded))
            }
        }
    }

    /// Memory as it stood at logical time `t` (see [`MemoryStore::state_at`]).
    pub fn state_at(&mut self, t: LogicalTime) -> Result<MemoryState, StoreError> {
        if let Some(m) = self.store.as_ref() {
            return lock_store(m).state_at(t);
        }
        // Ephemeral: the same prefix rule over the engine's own log.
        let end = self
            .log
            .iter()
            .position(|o| o.provenance.logical_time > t)
            .unwrap_or(self.log.len());
        let mut state = MemoryState::new();
        replay_into(&mut state, &self.log[..end], &self.location())?;
        Ok(state)
    }

    /// Forget user `token`: its records, links into them, vectors and log
    /// entries, in the store and here. The log is rewritten and renumbered
    /// (see [`crate::rewrite`]), so sequence numbers after this call differ
    /// from those handed out before.
    pub fn forget_user(&mut self, token: &str) -> Result<ForgetReport, StoreError> {
        let Some(m) = self.store.as_ref() else {
            let plan = crate::rewrite::without_namespace(&self.log, &Namespace::user(token), 0)?;
            self.epoch = next_epoch();
            self.log = plan.log;
            self.state = plan.state;
            return Ok(plan.report);
        };
        let mut guard = lock_store(m);
        let store = guard.as_mut();
        let report = store.forget_user(token, self.snapshot_every)?;
        (self.log, self.state, self.last_snapshot_seq) = load_all(store)?;
        self.epoch = next_epoch();
        Ok(report)
    }

    /// Remove the records `ids` for good (a hard delete): every op that
    /// created, edited or forgot them leaves the log, in the store and here,
    /// and the store's old content is purged as for
    /// [`Engine::forget_user`]. The log is renumbered.
    pub fn forget_records(&mut self, ids: &BTreeSet<MemoryId>) -> Result<ForgetReport, StoreError> {
        let Some(m) = self.store.as_ref() else {
            let plan = crate::rewrite::without_records(&self.log, ids, 0)?;
            self.epoch = next_epoch();
            self.log = plan.log;
            self.state = plan.state;
            return Ok(plan.report);
        };
        let mut guard = lock_store(m);
        let store = guard.as_mut();
        let report = store.forget_records(ids, self.snapshot_every)?;
        (self.log, self.state, self.last_snapshot_seq) = load_all(store)?;
        self.epoch = next_epoch();
        Ok(report)
    }

    /// Minimum ops between snapshots (see [`Engine::with_snapshot_every`]).
    pub fn snapshot_every(&self) -> u64 {
        self.snapshot_every
    }

    /// Take over a rewritten log and its state (a [`crate::rewrite`] plan)
    /// that the caller has already written to this engine's store through
    /// another handle ([`MemoryStore::replace_all`] on a second
    /// connection), so that the slow rewrite ran while this engine kept
    /// serving reads. `last_snapshot_seq` is the seq of the plan's last
    /// snapshot (0 without one). The caller must have kept every other
    /// writer of the store out between reading the log and this call.
    ///
    /// Returns the log and state it replaced, so that a caller holding a
    /// lock can release it before dropping them (freeing a large tenant's
    /// records takes a while).
    pub fn adopt_rewrite(
        &mut self,
        log: Vec<LoggedOp>,
        state: MemoryState,
        last_snapshot_seq: u64,
    ) -> (Vec<LoggedOp>, MemoryState) {
        self.last_snapshot_seq = last_snapshot_seq;
        self.epoch = next_epoch();
        (
            std::mem::replace(&mut self.log, log),
            std::mem::replace(&mut self.state, state),
        )
    }

    /// Check that the store agrees with the engine: the stored log equals
    /// the in-memory one, replaying it from scratch gives the live state,
    /// and the materialised records equal the live records. Without a store
    /// only the replay is checked.
    pub fn verify(&mut self) -> Result<(), StoreError> {
        let location = self.location();
        let corrupt = |detail: String| StoreError::Corrupt {
            location: location.clone(),
            detail,
        };
        if let Some(m) = self.store.as_ref() {
            let stored = lock_store(m).load_log()?;
            if stored != self.log {
                return Err(corrupt(format!(
                    "stored log ({} ops) differs from the engine's ({} ops)",
                    stored.len(),
                    self.log.len()
                )));
            }
        }
        let mut replayed = MemoryState::new();
        replay_into(&mut replayed, &self.log, &location)?;
        if replayed != self.state {
            return Err(corrupt(
                "replaying the log does not give the live state".into(),
            ));
        }
        let Some(m) = self.store.as_ref() else {
            return Ok(());
        };
        let records = lock_store(m).load_records()?;
        let live: Vec<&MemoryRecord> = self.state.iter_all().collect();
        if records.len() != live.len() || records.iter().zip(live).any(|(a, b)| a != b) {
            return Err(corrupt(format!(
                "materialised records ({}) differ from the live records ({})",
                records.len(),
                self.state.len()
            )));
        }
        Ok(())
    }

    /// Records of the named namespaces, optionally of one kind, in
    /// namespace then id order. Nothing outside `namespaces` is returned.
    pub fn recall_scan<'a>(
        &'a self,
        namespaces: &'a [Namespace],
        kind: Option<&'a RecordKind>,
    ) -> Vec<&'a MemoryRecord> {
        self.state
            .scan(namespaces)
            .filter(|r| kind.is_none_or(|k| &r.kind == k))
            .collect()
    }

    /// One record, only if it lives in one of `namespaces`.
    pub fn recall_get(&self, id: &MemoryId, namespaces: &[Namespace]) -> Option<&MemoryRecord> {
        self.state.get_in(id, namespaces)
    }

    /// The records linked to or from `id` (one hop), restricted to
    /// `namespaces`; empty when `id` itself is outside them. Sorted by id.
    pub fn recall_linked(&self, id: &MemoryId, namespaces: &[Namespace]) -> Vec<&MemoryRecord> {
        let Some(r) = self.state.get_in(id, namespaces) else {
            return Vec::new();
        };
        let ids: BTreeSet<&MemoryId> = r
            .links
            .iter()
            .map(|l| &l.target)
            .chain(self.state.backlinks(id))
            .collect();
        ids.into_iter()
            .filter_map(|i| self.state.get_in(i, namespaces))
            .collect()
    }

    /// The `k` records of `namespaces` whose embedding has the highest dot
    /// product with `query` (exact scan; vectors of another dimension are
    /// skipped). Ties break by id. Greater score is closer.
    pub fn recall_nearest<'a>(
        &'a self,
        namespaces: &'a [Namespace],
        query: &[f32],
        k: usize,
    ) -> Vec<(f32, &'a MemoryRecord)> {
        let mut hits: Vec<(f32, &MemoryRecord)> = self
            .state
            .scan(namespaces)
            .filter_map(|r| {
                let e = r.embedding.as_ref()?;
                (e.vector.len() == query.len())
                    .then(|| (e.vector.iter().zip(query).map(|(a, b)| a * b).sum(), r))
            })
            .collect();
        hits.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
        hits.truncate(k);
        hits
    }
}

/// Records whose stored form `op` may change: its targets, and, for ops that
/// remove a record, every record linking to it (their links are cut).
pub(crate) fn touched_ids(state: &MemoryState, op: &MemoryOp) -> Vec<MemoryId> {
    let mut v = Vec::new();
    let removed = |id: &MemoryId, v: &mut Vec<MemoryId>| {
        v.push(id.clone());
        v.extend(state.backlinks(id).cloned());
    };
    match op {
        MemoryOp::Create { record } => v.push(record.id.clone()),
        MemoryOp::UpdateFields { id, .. }
        | MemoryOp::AdjustStrength { id, .. }
        | MemoryOp::SetUtility { id, .. }
        | MemoryOp::SetStatus { id, .. } => v.push(id.clone()),
        MemoryOp::Link { from, .. } | MemoryOp::Unlink { from, .. } => v.push(from.clone()),
        MemoryOp::Merge { into, sources, .. } => {
            v.push(into.clone());
            for s in sources {
                removed(s, &mut v);
            }
        }
        MemoryOp::Forget { id } | MemoryOp::Replace { id, .. } => removed(id, &mut v),
    }
    v
}

/// The whole stored log, and the state it gives: the latest snapshot plus
/// the ops after it. Returns `(log, state, seq of that snapshot)`.
fn load_all(store: &mut dyn MemoryStore) -> Result<(Vec<LoggedOp>, MemoryState, u64), StoreError> {
    let log = store.load_log()?;
    let (mut state, from) = match store.latest_snapshot(log.len() as u64)? {
        Some(s) => (s.state, s.seq),
        None => (MemoryState::new(), 0),
    };
    replay_into(
        &mut state,
        log.get(from as usize..).unwrap_or(&[]),
        &store.location(),
    )?;
    Ok((log, state, from))
}

/// The store behind its mutex (a poisoned lock is taken over: a store
/// call that panicked left no partial commit, since commits are atomic).
fn lock_store(m: &Mutex<Box<dyn MemoryStore>>) -> MutexGuard<'_, Box<dyn MemoryStore>> {
    match m.lock() {
        Ok(s) => s,
        Err(p) => p.into_inner(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::RecordKind;

    fn create(id: &str, at: u64) -> PlannedOp {
        PlannedOp::new(
            MemoryOp::Create {
                record: MemoryRecord::new(
                    MemoryId::new(id),
                    Namespace::user("u"),
                    RecordKind::PreferenceChunk,
                    format!("text of {id}"),
                    LogicalTime(at),
                ),
            },
            "add",
            "test",
        )
    }

    fn batch(ops: Vec<PlannedOp>, at: u64) -> Vec<Batch> {
        vec![Batch {
            policy: "api".into(),
            ops,
            at: LogicalTime(at),
        }]
    }

    /// Staging changes nothing a reader sees; storing and installing ends
    /// where `apply_batches` ends (same log, state and stored records), with
    /// the snapshots taken one batch later.
    #[test]
    fn a_staged_batch_is_invisible_until_installed_and_then_equals_an_applied_one() {
        let mut direct = Engine::in_memory().with_snapshot_every(2);
        let mut staged_engine = Engine::in_memory().with_snapshot_every(2);
        for i in 0..6u64 {
            let ops = vec![create(&format!("a{i}"), i), create(&format!("b{i}"), i)];
            direct.apply_batches(batch(ops.clone(), i)).unwrap();
            let (log, state) = (staged_engine.log().to_vec(), staged_engine.state().clone());
            let mut st = staged_engine.stage_batches(batch(ops, i)).unwrap();
            assert_eq!(staged_engine.log(), &log[..], "staging changed the log");
            assert_eq!(staged_engine.state(), &state, "staging changed the state");
            assert_eq!(st.ops().len(), 2);
            let h = staged_engine.store_handle().unwrap();
            h.commit(&mut st, Some(&staged_engine)).unwrap();
            staged_engine.install(st).unwrap();
        }
        assert_eq!(direct.log(), staged_engine.log());
        assert_eq!(direct.state(), staged_engine.state());
        staged_engine.verify().unwrap();
        let snaps = staged_engine.store_mut().unwrap().snapshot_seqs().unwrap();
        assert!(!snaps.is_empty(), "no snapshot was written");
        // Each snapshot replays to the state it names.
        for seq in snaps {
            let s = staged_engine.store_mut().unwrap();
            let snap = s.latest_snapshot(seq).unwrap().unwrap();
            let mut replayed = MemoryState::new();
            replay_into(&mut replayed, &staged_engine.log()[..seq as usize], "t").unwrap();
            assert_eq!(snap.state, replayed, "snapshot at {seq}");
        }
    }

    /// A rejected op stages nothing; an install on a log that moved is
    /// refused.
    #[test]
    fn staging_is_all_or_nothing_and_install_checks_the_log() {
        let mut e = Engine::in_memory();
        e.apply_batches(batch(vec![create("x", 1)], 1)).unwrap();
        let before = e.state().clone();
        let err = e
            .stage_batches(batch(vec![create("y", 2), create("x", 2)], 2))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Rejected { index: 1, .. }),
            "{err}"
        );
        assert_eq!(e.state(), &before);
        assert_eq!(e.log().len(), 1);
        let st = e.stage_batches(batch(vec![create("y", 3)], 3)).unwrap();
        e.apply_batches(batch(vec![create("z", 3)], 3)).unwrap();
        assert!(e.install(st).is_err(), "installed on a moved log");
        assert!(e.state().get(&MemoryId::new("y")).is_none());
    }

    /// `stage_creates` (through `&self`) stages what `stage_batches` stages
    /// for batches of creates: same ops, same records, same install, and
    /// the same rejection of a duplicate id; any other op is refused.
    #[test]
    fn staging_creates_through_a_shared_borrow_equals_staging_them() {
        let mut by_mut = Engine::in_memory().with_snapshot_every(3);
        let mut by_ref = Engine::in_memory().with_snapshot_every(3);
        for i in 0..5u64 {
            let ops = vec![create(&format!("b{i}"), i), create(&format!("a{i}"), i)];
            let mut x = by_mut.stage_batches(batch(ops.clone(), i)).unwrap();
            let mut y = by_ref.stage_creates(batch(ops, i)).unwrap();
            assert_eq!(x.ops(), y.ops(), "batch {i}: ops");
            assert_eq!(x.records, y.records, "batch {i}: records");
            assert_eq!(x.counts, y.counts);
            assert_eq!((x.applied, x.snapshot), (y.applied, y.snapshot));
            let hx = by_mut.store_handle().unwrap();
            hx.commit(&mut x, Some(&by_mut)).unwrap();
            by_mut.install(x).unwrap();
            let hy = by_ref.store_handle().unwrap();
            hy.commit(&mut y, Some(&by_ref)).unwrap();
            by_ref.install(y).unwrap();
        }
        assert_eq!(by_mut.log(), by_ref.log());
        assert_eq!(by_mut.state(), by_ref.state());
        by_ref.verify().unwrap();
        for dup in [
            vec![create("new", 9), create("a1", 9)],
            vec![create("new", 9), create("new", 9)],
        ] {
            let a = by_mut.stage_batches(batch(dup.clone(), 9)).unwrap_err();
            let b = by_ref.stage_creates(batch(dup, 9)).unwrap_err();
            assert_eq!(a.to_string(), b.to_string());
            assert!(matches!(b, StoreError::Rejected { index: 1, .. }), "{b}");
        }
        let forget = PlannedOp::new(
            MemoryOp::Forget {
                id: MemoryId::new("a1"),
            },
            "forget",
            "test",
        );
        let err = by_ref.stage_creates(batch(vec![forget], 9)).unwrap_err();
        assert!(matches!(err, StoreError::Config(_)), "{err}");
    }
}
