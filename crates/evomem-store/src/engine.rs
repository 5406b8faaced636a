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
    LoggedOp, LogicalTime, MemoryId, MemoryOp, MemoryRecord, MemoryState, Namespace, PlannedOp,
    Provenance, RecordKind,
};
use std::collections::BTreeSet;
use std::sync::Mutex;

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
    /// In a mutex only so that `Engine` stays `Sync` (SQLite connections are
    /// not); every store call goes through `&mut self` and `get_mut`, so the
    /// lock is never taken on the hot path. `None`: an ephemeral engine
    /// (module docs) that persists nothing.
    store: Option<Mutex<Box<dyn MemoryStore>>>,
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
            store: Some(Mutex::new(Box::new(InMemoryStore::new()))),
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            last_snapshot_seq: 0,
            keep_log: true,
            sink: None,
            streamed: 0,
            tally: OpTally::default(),
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
            store: Some(Mutex::new(store)),
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            last_snapshot_seq: from,
            keep_log: true,
            sink: None,
            streamed: 0,
            tally: OpTally::default(),
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
            Some(m) => m
                .lock()
                .map(|s| s.location())
                .unwrap_or_else(|p| p.into_inner().location()),
        }
    }

    /// On-disk format version of the store ([`crate::FORMAT_VERSION`], the
    /// version this engine writes, without one).
    pub fn format_version(&self) -> u32 {
        match &self.store {
            None => crate::FORMAT_VERSION,
            Some(m) => m
                .lock()
                .map(|s| s.format_version())
                .unwrap_or_else(|p| p.into_inner().format_version()),
        }
    }

    /// The store (for inspection and tests); `None` for an ephemeral engine.
    pub fn store_mut(&mut self) -> Option<&mut dyn MemoryStore> {
        self.store.as_mut().map(store_mut)
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
        let start = self.log.len();
        let mut touched: BTreeSet<MemoryId> = BTreeSet::new();
        // (label, op name) of each applied op, counted once the batch holds.
        let mut counts: Vec<(String, &'static str)> = Vec::new();
        // Each changed record's value before the batch, to undo a rejection.
        let mut saved: Vec<(MemoryId, Option<MemoryRecord>)> = Vec::new();
        let mut streamed: Vec<LoggedOp> = Vec::new();
        let mut rejected: Option<StoreError> = None;
        let mut index = 0usize;
        let mut last_at = LogicalTime(0);
        'batches: for Batch { policy, ops, at } in batches {
            last_at = at;
            for p in ops {
                let ids = touched_ids(&self.state, &p.op);
                for id in &ids {
                    if !touched.contains(id) {
                        saved.push((id.clone(), self.state.get(id).cloned()));
                    }
                }
                if let Err(source) = self.state.apply(&p.op, at) {
                    rejected = Some(StoreError::Rejected {
                        index,
                        label: p.label.clone(),
                        source,
                    });
                    break 'batches;
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
                let wall_time_ms = if self.deterministic { 0 } else { now_ms() };
                let logged = LoggedOp {
                    seq,
                    op: p.op,
                    provenance: Provenance {
                        policy: policy.clone(),
                        label: p.label,
                        reason: p.reason,
                        sources: p.sources,
                        logical_time: at,
                        wall_time_ms,
                    },
                };
                if self.keep_log {
                    self.log.push(logged);
                } else {
                    streamed.push(logged);
                }
            }
        }
        if let Some(e) = rejected {
            // All or nothing: undo the ops before the rejected one.
            self.log.truncate(start);
            self.state.restore(saved);
            return Err(e);
        }
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
        Ok(index)
    }

    fn persist(
        &mut self,
        start: usize,
        touched: &BTreeSet<MemoryId>,
        at: LogicalTime,
    ) -> Result<(), StoreError> {
        let Some(store) = self.store.as_mut() else {
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
        };
        store_mut(store).commit(&commit)?;
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
    pub fn sync(&mut self) -> Result<Synced, StoreError> {
        let Some(m) = self.store.as_mut() else {
            return Ok(Synced::Current);
        };
        let store = store_mut(m);
        let ours = self.log.len() as u64;
        let last = store.last_seq()?;
        let extends = last >= ours
            && (ours == 0 || store.load_ops(ours - 1, ours)?.last() == self.log.last());
        if extends {
            if last == ours {
                return Ok(Synced::Current);
            }
            let new = store.load_ops(ours, last)?;
            replay_into(&mut self.state, &new, &store.location())?;
            self.log.extend(new);
            return Ok(Synced::Extended {
                from: ours as usize,
            });
        }
        (self.log, self.state, self.last_snapshot_seq) = load_all(store)?;
        Ok(Synced::Reloaded)
    }

    /// Memory as it stood at logical time `t` (see [`MemoryStore::state_at`]).
    pub fn state_at(&mut self, t: LogicalTime) -> Result<MemoryState, StoreError> {
        if let Some(m) = self.store.as_mut() {
            return store_mut(m).state_at(t);
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
        let Some(m) = self.store.as_mut() else {
            let plan = crate::rewrite::without_namespace(&self.log, &Namespace::user(token), 0)?;
            self.log = plan.log;
            self.state = plan.state;
            return Ok(plan.report);
        };
        let store = store_mut(m);
        let report = store.forget_user(token, self.snapshot_every)?;
        (self.log, self.state, self.last_snapshot_seq) = load_all(store)?;
        Ok(report)
    }

    /// Remove the records `ids` for good (a hard delete): every op that
    /// created, edited or forgot them leaves the log, in the store and here,
    /// and the store's old content is purged as for
    /// [`Engine::forget_user`]. The log is renumbered.
    pub fn forget_records(&mut self, ids: &BTreeSet<MemoryId>) -> Result<ForgetReport, StoreError> {
        let Some(m) = self.store.as_mut() else {
            let plan = crate::rewrite::without_records(&self.log, ids, 0)?;
            self.log = plan.log;
            self.state = plan.state;
            return Ok(plan.report);
        };
        let store = store_mut(m);
        let report = store.forget_records(ids, self.snapshot_every)?;
        (self.log, self.state, self.last_snapshot_seq) = load_all(store)?;
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
    pub fn adopt_rewrite(
        &mut self,
        log: Vec<LoggedOp>,
        state: MemoryState,
        last_snapshot_seq: u64,
    ) {
        self.log = log;
        self.state = state;
        self.last_snapshot_seq = last_snapshot_seq;
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
        if let Some(m) = self.store.as_mut() {
            let stored = store_mut(m).load_log()?;
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
        let Some(m) = self.store.as_mut() else {
            return Ok(());
        };
        let store = store_mut(m);
        let records = store.load_records()?;
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
fn touched_ids(state: &MemoryState, op: &MemoryOp) -> Vec<MemoryId> {
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

/// The store behind the mutex, without locking (we hold `&mut`).
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

fn store_mut(m: &mut Mutex<Box<dyn MemoryStore>>) -> &mut dyn MemoryStore {
    match m.get_mut() {
        Ok(s) => s.as_mut(),
        Err(p) => p.into_inner().as_mut(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
