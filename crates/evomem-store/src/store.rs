//! The [`MemoryStore`] trait: durable op log, snapshots and a materialised
//! copy of the live records.
//!
//! The op log is the source of truth. A store keeps three things:
//! - the log itself, appended one atomic [`Commit`] at a time;
//! - periodic snapshots of the whole [`MemoryState`], so that
//!   [`MemoryStore::state_at`] replays at most one snapshot interval of ops
//!   instead of the whole log;
//! - the live records (text and fields in one table, vectors in another),
//!   updated in the same transaction as the log, so that vectors can be
//!   loaded into an in-process index and so that a raw scan of the database
//!   shows exactly what memory holds.
//!
//! Stores only persist; validation and application of ops happen in
//! [`crate::Engine`] through [`MemoryState::apply`], the one definition of op
//! semantics.

use crate::error::StoreError;
use crate::rewrite::{without_namespace, without_records, ForgetReport};
use evomem_core::{LoggedOp, LogicalTime, MemoryId, MemoryRecord, MemoryState, Namespace};
use std::collections::BTreeSet;

/// Newest on-disk format version this build writes and reads.
///
/// Version 1: tables `meta`, `ops(seq, logical_time, body)`,
/// `snapshots(seq, logical_time, body)`, `records(id, namespace, kind, body)`,
/// `vectors(id, namespace, model, dim, data)`; bodies are JSON of the core
/// types, record bodies carry no embedding (it lives in `vectors`).
pub const FORMAT_VERSION: u32 = 1;

/// A snapshot of the state after op `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Sequence number of the last op included.
    pub seq: u64,
    /// Logical time of that op.
    pub at: LogicalTime,
    /// The state.
    pub state: MemoryState,
}

/// The idempotency key of one write a [`Commit`] carries (a service's
/// `Idempotency-Key`, scoped to this store) and a digest of the request it
/// came with. Stored in the commit's own transaction, so that whoever
/// opens the store next (another instance, or this one after a crash)
/// knows the write was applied: exactly once, not "once per process".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteKey {
    /// The key, as the client sent it.
    pub key: String,
    /// A digest of the request (method, path, body): a key sent again with
    /// another request is the client's error, not a retry.
    pub request: [u8; 32],
}

/// How long a stored [`WriteKey`] is kept, in seconds (a day): longer than
/// any client retries a write. Keys older than this are pruned by later
/// commits that carry keys.
pub const WRITE_KEY_KEEP_S: i64 = 86_400;

/// Whether a commit whose first key is `key` also prunes the keys past
/// [`WRITE_KEY_KEEP_S`]: about one keyed commit in 64, chosen by a hash
/// of the key (keys are the clients' random tokens), so that the prune's
/// statement is not paid on every write and no state is kept for it.
pub(crate) fn prune_keys_now(key: &str) -> bool {
    // FNV-1a: stable across builds and processes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.is_multiple_of(64)
}

/// Seconds since the Unix epoch (0 before it): the time a [`WriteKey`]
/// is stored at, read from this process's clock.
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A stored request digest (32 bytes; a shorter or longer blob, which no
/// commit writes, reads as zeros past its end and is cut).
pub(crate) fn digest_of(b: &[u8]) -> [u8; 32] {
    let mut d = [0u8; 32];
    for (o, i) in d.iter_mut().zip(b) {
        *o = *i;
    }
    d
}

/// One atomic unit of persistence: a batch of ops, the records it changed,
/// and maybe a snapshot taken after it.
#[derive(Debug, Clone, Copy)]
pub struct Commit<'a> {
    /// The new log entries, in seq order, continuing the stored log.
    pub ops: &'a [LoggedOp],
    /// Records that now hold these values (insert or overwrite).
    pub upserts: &'a [&'a MemoryRecord],
    /// Records that no longer exist.
    pub deletes: &'a [MemoryId],
    /// A snapshot of the state after the last op of `ops`, if one is due.
    pub snapshot: Option<(u64, LogicalTime, &'a MemoryState)>,
    /// The keys of the writes whose ops these are, stored in the same
    /// transaction. A key already stored refuses the whole commit
    /// ([`StoreError::DuplicateKey`]): nothing of it is stored.
    pub keys: &'a [WriteKey],
}

/// A durable home for the op log.
///
/// Invariants every implementation keeps (checked by the conformance suite in
/// `tests/it/conformance.rs`):
/// - [`MemoryStore::commit`] is atomic and returns only once the commit is
///   durable: after a crash either all of it or none of it is present;
/// - [`MemoryStore::load_log`] returns the ops in seq order, gap-free from 1;
/// - replaying the log gives the materialised records and every snapshot.
pub trait MemoryStore: Send {
    /// Where the store lives (`memory`, a SQLite path, a PostgreSQL target);
    /// used in error messages.
    fn location(&self) -> String;

    /// On-disk format version of this store.
    fn format_version(&self) -> u32 {
        FORMAT_VERSION
    }

    /// Persist one batch atomically and durably.
    fn commit(&mut self, commit: &Commit<'_>) -> Result<(), StoreError>;

    /// The request digest a commit stored with write key `key`
    /// ([`Commit::keys`]), if one did (and the key is not yet older than
    /// [`WRITE_KEY_KEEP_S`]).
    fn committed_key(&mut self, key: &str) -> Result<Option<[u8; 32]>, StoreError>;

    /// Ops with `after < seq <= upto`, in seq order.
    fn load_ops(&mut self, after: u64, upto: u64) -> Result<Vec<LoggedOp>, StoreError>;

    /// Highest seq in the log (0 when empty).
    fn last_seq(&mut self) -> Result<u64, StoreError>;

    /// The end of the log prefix whose ops all have logical time `<= t`:
    /// the seq just before the first op later than `t` (or [`Self::last_seq`]).
    fn prefix_end(&mut self, t: LogicalTime) -> Result<u64, StoreError>;

    /// The latest snapshot with `seq <= upto`.
    fn latest_snapshot(&mut self, upto: u64) -> Result<Option<Snapshot>, StoreError>;

    /// Seqs of all stored snapshots, ascending.
    fn snapshot_seqs(&mut self) -> Result<Vec<u64>, StoreError>;

    /// The materialised live records (with embeddings), in id order.
    fn load_records(&mut self) -> Result<Vec<MemoryRecord>, StoreError>;

    /// Replace everything (log, snapshots, records, vectors) in one
    /// transaction, and make sure the old content is gone from the medium as
    /// far as the backend allows (SQLite: secure delete, vacuum, WAL
    /// truncation; PostgreSQL: vacuum). Used by [`MemoryStore::forget_user`].
    fn replace_all(
        &mut self,
        log: &[LoggedOp],
        state: &MemoryState,
        snapshots: &[Snapshot],
    ) -> Result<(), StoreError>;

    /// A new, empty staging area beside this store, for a staged swap of
    /// its whole content (a re-embed): a store of its own, written like any
    /// store ([`MemoryStore::commit`], read back with
    /// [`MemoryStore::load_ops`] and [`MemoryStore::load_records`]) while
    /// this store goes on taking commits, then made this store's content
    /// in one transaction by [`MemoryStore::swap_in_staged`]. What an
    /// earlier staging area left is removed first
    /// ([`MemoryStore::clear_staging`]). Until the swap, nothing of this
    /// store changes: a crash leaves it as it was.
    ///
    /// SQLite: tables `stage_*` in the same file, through a connection of
    /// their own; PostgreSQL: tables `stage_*` in the same schema, through
    /// a session of their own. Default: an [`crate::InMemoryStore`].
    fn staging(&mut self) -> Result<Box<dyn MemoryStore>, StoreError> {
        Ok(Box::new(crate::InMemoryStore::new()))
    }

    /// Make `staged` (from [`MemoryStore::staging`] on this store) this
    /// store's log, snapshots and records, in one transaction, when this
    /// store's log and the staged log both end at `last_seq`; otherwise a
    /// [`StoreError::Conflict`] and nothing changed (a commit landed after
    /// the caller last read the log, or the staging area is incomplete).
    /// The caller keeps every writer out from reading `last_seq` until
    /// this returns, and guarantees that the staged log replaces this
    /// store's op for op (only what the ops carry may differ).
    ///
    /// SQLite and PostgreSQL rename the staging tables over the live ones,
    /// so the swap costs the same at any size; SQLite keeps the replaced
    /// tables, under `old_*`, for [`MemoryStore::clear_staging`] to drop
    /// without holding writers up. Default: the staged content copied
    /// with [`MemoryStore::replace_all`].
    fn swap_in_staged(
        &mut self,
        mut staged: Box<dyn MemoryStore>,
        last_seq: u64,
    ) -> Result<(), StoreError> {
        let location = self.location();
        check_ends_at(self.last_seq()?, staged.last_seq()?, last_seq, &location)?;
        let log = staged.load_log()?;
        let mut state = MemoryState::new();
        replay_into(&mut state, &log, &staged.location())?;
        let mut snapshots = Vec::new();
        for seq in staged.snapshot_seqs()? {
            if let Some(s) = staged.latest_snapshot(seq)? {
                snapshots.push(s);
            }
        }
        self.replace_all(&log, &state, &snapshots)
    }

    /// Drop what staged swaps left behind: the tables a swap replaced,
    /// and the staging area of a swap that never happened (a crash, a
    /// failure). SQLite deletes their rows a few hundred at a time, each
    /// batch its own short transaction, so writers are not held up for
    /// long. Default: nothing to drop.
    fn clear_staging(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Take the store's writer lock, shared by every process writing to
    /// this store, and hold it until [`MemoryStore::unlock_writers`]: a
    /// service holds it from catching up with the log until its commit (or
    /// its log rewrite) is stored, so that no other instance writes in
    /// between. Blocks while another process holds it. Default: nothing to
    /// take (a store only one process writes: in-memory, SQLite, whose file
    /// lock already serialises writers). PostgreSQL: a session advisory
    /// lock per schema.
    fn lock_writers(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Release what [`MemoryStore::lock_writers`] took.
    fn unlock_writers(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The whole log.
    fn load_log(&mut self) -> Result<Vec<LoggedOp>, StoreError> {
        let last = self.last_seq()?;
        self.load_ops(0, last)
    }

    /// The state after op `seq`: the latest snapshot at or before `seq`, then
    /// the remaining ops replayed.
    fn state_at_seq(&mut self, seq: u64) -> Result<MemoryState, StoreError> {
        let (mut state, from) = match self.latest_snapshot(seq)? {
            Some(s) => (s.state, s.seq),
            None => (MemoryState::new(), 0),
        };
        let ops = self.load_ops(from, seq)?;
        replay_into(&mut state, &ops, &self.location())?;
        Ok(state)
    }

    /// Memory as it stood at logical time `t`: the state after the longest
    /// log prefix whose ops all have logical time `<= t`. (The engine's
    /// logical times are non-decreasing in practice, so this is "every op up
    /// to and including `t`".)
    fn state_at(&mut self, t: LogicalTime) -> Result<MemoryState, StoreError> {
        let end = self.prefix_end(t)?;
        self.state_at_seq(end)
    }

    /// [`MemoryStore::state_at`] read as of one point in time, so that a
    /// commit or a log rewrite by another connection meanwhile cannot mix
    /// into it. A second connection answers `as_of` with it while the
    /// engine's own connection goes on writing. Default: `state_at` (a
    /// store nobody else writes meanwhile); SQLite reads in one read
    /// transaction, PostgreSQL in one `REPEATABLE READ` transaction.
    fn state_at_consistent(&mut self, t: LogicalTime) -> Result<MemoryState, StoreError> {
        self.state_at(t)
    }

    /// Remove everything of user `token` (namespace `user:<token>`): its
    /// records, links into them, vectors and log entries. The log is
    /// rewritten without them (renumbered gap-free), replayed, and
    /// re-snapshotted every `snapshot_every` ops (0: no snapshots).
    fn forget_user(
        &mut self,
        token: &str,
        snapshot_every: u64,
    ) -> Result<ForgetReport, StoreError> {
        let log = self.load_log()?;
        let plan = without_namespace(&log, &Namespace::user(token), snapshot_every)?;
        self.replace_all(&plan.log, &plan.state, &plan.snapshots)?;
        Ok(plan.report)
    }

    /// Remove the records `ids` for good (a hard delete): every op that
    /// created, edited or forgot them leaves the log (see
    /// [`crate::rewrite::without_records`]), and the store is replaced as in
    /// [`MemoryStore::forget_user`], free pages included.
    fn forget_records(
        &mut self,
        ids: &BTreeSet<MemoryId>,
        snapshot_every: u64,
    ) -> Result<ForgetReport, StoreError> {
        let log = self.load_log()?;
        let plan = without_records(&log, ids, snapshot_every)?;
        self.replace_all(&plan.log, &plan.state, &plan.snapshots)?;
        Ok(plan.report)
    }
}

impl<S: MemoryStore + ?Sized> MemoryStore for Box<S> {
    fn location(&self) -> String {
        (**self).location()
    }
    fn format_version(&self) -> u32 {
        (**self).format_version()
    }
    fn commit(&mut self, commit: &Commit<'_>) -> Result<(), StoreError> {
        (**self).commit(commit)
    }
    fn committed_key(&mut self, key: &str) -> Result<Option<[u8; 32]>, StoreError> {
        (**self).committed_key(key)
    }
    fn lock_writers(&mut self) -> Result<(), StoreError> {
        (**self).lock_writers()
    }
    fn unlock_writers(&mut self) -> Result<(), StoreError> {
        (**self).unlock_writers()
    }
    fn load_ops(&mut self, after: u64, upto: u64) -> Result<Vec<LoggedOp>, StoreError> {
        (**self).load_ops(after, upto)
    }
    fn last_seq(&mut self) -> Result<u64, StoreError> {
        (**self).last_seq()
    }
    fn prefix_end(&mut self, t: LogicalTime) -> Result<u64, StoreError> {
        (**self).prefix_end(t)
    }
    fn latest_snapshot(&mut self, upto: u64) -> Result<Option<Snapshot>, StoreError> {
        (**self).latest_snapshot(upto)
    }
    fn snapshot_seqs(&mut self) -> Result<Vec<u64>, StoreError> {
        (**self).snapshot_seqs()
    }
    fn load_records(&mut self) -> Result<Vec<MemoryRecord>, StoreError> {
        (**self).load_records()
    }
    fn state_at_consistent(&mut self, t: LogicalTime) -> Result<MemoryState, StoreError> {
        (**self).state_at_consistent(t)
    }
    fn replace_all(
        &mut self,
        log: &[LoggedOp],
        state: &MemoryState,
        snapshots: &[Snapshot],
    ) -> Result<(), StoreError> {
        (**self).replace_all(log, state, snapshots)
    }
    fn forget_user(
        &mut self,
        token: &str,
        snapshot_every: u64,
    ) -> Result<ForgetReport, StoreError> {
        (**self).forget_user(token, snapshot_every)
    }
    fn staging(&mut self) -> Result<Box<dyn MemoryStore>, StoreError> {
        (**self).staging()
    }
    fn swap_in_staged(
        &mut self,
        staged: Box<dyn MemoryStore>,
        last_seq: u64,
    ) -> Result<(), StoreError> {
        (**self).swap_in_staged(staged, last_seq)
    }
    fn clear_staging(&mut self) -> Result<(), StoreError> {
        (**self).clear_staging()
    }
    fn forget_records(
        &mut self,
        ids: &BTreeSet<MemoryId>,
        snapshot_every: u64,
    ) -> Result<ForgetReport, StoreError> {
        (**self).forget_records(ids, snapshot_every)
    }
}

/// Apply logged ops to `state` at their own logical times.
pub fn replay_into(
    state: &mut MemoryState,
    ops: &[LoggedOp],
    location: &str,
) -> Result<(), StoreError> {
    for o in ops {
        state
            .apply(&o.op, o.provenance.logical_time)
            .map_err(|source| StoreError::Replay {
                location: location.to_string(),
                seq: o.seq,
                source,
            })?;
    }
    Ok(())
}

/// Refuse a staged swap unless the live log (`live`) and the staged log
/// (`staged`) both end at `want` ([`MemoryStore::swap_in_staged`]).
pub(crate) fn check_ends_at(
    live: u64,
    staged: u64,
    want: u64,
    location: &str,
) -> Result<(), StoreError> {
    if live != want {
        return Err(StoreError::Conflict {
            location: location.to_string(),
            detail: format!(
                "the log ends at op {live}, not at op {want} as the staged swap expected"
            ),
        });
    }
    if staged != want {
        return Err(StoreError::Conflict {
            location: location.to_string(),
            detail: format!("the staged log ends at op {staged}, the log at op {want}"),
        });
    }
    Ok(())
}

/// Check that stored ops are numbered `first, first + 1, ...`.
pub(crate) fn check_gap_free(
    ops: &[LoggedOp],
    first: u64,
    location: &str,
) -> Result<(), StoreError> {
    for (i, o) in ops.iter().enumerate() {
        let want = first + i as u64;
        if o.seq != want {
            return Err(StoreError::Corrupt {
                location: location.to_string(),
                detail: format!("op log has seq {} where {want} was expected", o.seq),
            });
        }
    }
    Ok(())
}

/// Parse and check the `format_version` meta value.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn check_version(v: Option<&str>, location: &str) -> Result<u32, StoreError> {
    let Some(v) = v else {
        return Err(StoreError::NotAStore {
            location: location.to_string(),
            detail: "meta table has no format_version".to_string(),
        });
    };
    let version: u32 = v.trim().parse().map_err(|_| StoreError::Corrupt {
        location: location.to_string(),
        detail: format!("format_version `{v}` is not a number"),
    })?;
    if version > FORMAT_VERSION {
        return Err(StoreError::FormatTooNew {
            location: location.to_string(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if version == 0 {
        return Err(StoreError::Corrupt {
            location: location.to_string(),
            detail: "format_version 0 does not exist".to_string(),
        });
    }
    Ok(version)
}
