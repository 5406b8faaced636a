//! The op log indexed by user and by record, for the reads that would
//! otherwise scan a tenant's whole log on every request: a memory's history
//! (`/v1/memories/{id}/history`) and the inspector's per-user reads under
//! `/ui/api` (a user's ops, the users and their op counts, one op's user,
//! the ops of the records a decision used).
//!
//! The index is derived, never stored. The first such read builds it; each
//! later read first indexes the ops appended since (its own writes and
//! those caught up from other instances), so a read costs the new ops plus
//! its answer, not the log. A log that was replaced rather than extended (a
//! user deletion or hard delete here or on another instance, a reload) has
//! another [`Engine::log_epoch`](evomem_store::Engine::log_epoch), and the
//! index is then rebuilt from scratch.
//!
//! Ownership follows the inspector's rule: a record belongs to the user
//! whose namespace (`user:<id>`) created it, and an op to the owner of its
//! target; a record created before the log began is looked up in the live
//! state when its first op is indexed.
//!
//! Locks: `Tenant::log_index`, a leaf mutex, taken under the core read
//! lock (which keeps the log still) by [`Tenant::read_indexed`], and
//! nothing taken inside it.

use super::{op_ids, Tenant};
use crate::error::ApiError;
use crate::lock;
use evomem_core::{LoggedOp, MemoryId, MemoryOp, MemoryState};
use std::collections::HashMap;

/// Positions in the op log, by user and by record (module docs).
#[derive(Default)]
pub(crate) struct LogIndex {
    /// The [`Engine::log_epoch`](evomem_store::Engine::log_epoch) the
    /// positions belong to.
    epoch: u64,
    /// Ops indexed: `log[..upto]`.
    upto: usize,
    /// User names, by number.
    users: Vec<String>,
    user_no: HashMap<String, usize>,
    /// The owner of each record created in a user's namespace.
    owner: HashMap<MemoryId, usize>,
    /// The user of the op at each position.
    user_of: Vec<Option<usize>>,
    /// Each user's op positions, ascending.
    by_user: Vec<Vec<usize>>,
    /// The positions of the ops that concern each record (its target, a
    /// merge's sources, a link's other end), ascending.
    by_record: HashMap<MemoryId, Vec<usize>>,
}

impl LogIndex {
    /// Bring the index up to `log` (of epoch `epoch`): index the ops after
    /// the last one indexed, or everything again when the log was replaced.
    pub fn sync(&mut self, epoch: u64, log: &[LoggedOp], state: &MemoryState) {
        if epoch != self.epoch || self.upto > log.len() {
            *self = Self {
                epoch,
                ..Self::default()
            };
        }
        for lo in &log[self.upto..] {
            let at = self.user_of.len();
            let user = self.user_of_op(lo, state);
            self.user_of.push(user);
            if let Some(u) = user {
                self.by_user[u].push(at);
            }
            for id in op_ids(&lo.op) {
                match self.by_record.get_mut(id) {
                    Some(v) => {
                        if v.last() != Some(&at) {
                            v.push(at);
                        }
                    }
                    None => {
                        self.by_record.insert(id.clone(), vec![at]);
                    }
                }
            }
        }
        self.upto = log.len();
    }

    /// The number of user `name`, made when new.
    fn number(&mut self, name: &str) -> usize {
        if let Some(&n) = self.user_no.get(name) {
            return n;
        }
        let n = self.users.len();
        self.users.push(name.to_string());
        self.user_no.insert(name.to_string(), n);
        self.by_user.push(Vec::new());
        n
    }

    /// The user of `lo` (module docs), learning the owner of a record it
    /// creates.
    fn user_of_op(&mut self, lo: &LoggedOp, state: &MemoryState) -> Option<usize> {
        if let MemoryOp::Create { record } = &lo.op {
            let user = record.namespace.as_str().strip_prefix("user:")?;
            let n = self.number(user);
            self.owner.insert(record.id.clone(), n);
            return Some(n);
        }
        let target = lo.op.target();
        if let Some(&n) = self.owner.get(target) {
            return Some(n);
        }
        let user = state
            .get(target)
            .and_then(|r| r.namespace.as_str().strip_prefix("user:"))?;
        let n = self.number(user);
        self.owner.insert(target.clone(), n);
        Some(n)
    }

    /// The positions of `user`'s ops, in log order (empty for a user
    /// without ops).
    pub fn user_ops(&self, user: &str) -> &[usize] {
        self.user_no
            .get(user)
            .map(|&n| self.by_user[n].as_slice())
            .unwrap_or(&[])
    }

    /// Every user with ops, with their op counts (in no particular order).
    pub fn users(&self) -> impl Iterator<Item = (&str, usize)> {
        self.users
            .iter()
            .zip(&self.by_user)
            .map(|(u, ops)| (u.as_str(), ops.len()))
    }

    /// The user of the op at position `at`, and its position among that
    /// user's ops.
    pub fn user_at(&self, at: usize) -> Option<(&str, usize)> {
        let n = (*self.user_of.get(at)?)?;
        let pos = self.by_user[n].binary_search(&at).ok()?;
        Some((self.users[n].as_str(), pos))
    }

    /// The positions of the ops that concern record `id`, in log order.
    pub fn record_ops(&self, id: &MemoryId) -> &[usize] {
        self.by_record.get(id).map(Vec::as_slice).unwrap_or(&[])
    }
}

impl Tenant {
    /// `f` over the op log, the live state and the log's index, under the
    /// core read lock, after catching up like every read and bringing the
    /// index up to the log (module docs). `f` should copy out what it needs
    /// and leave the rest of the work for after.
    pub fn read_indexed<T>(
        &self,
        f: impl FnOnce(&[LoggedOp], &MemoryState, &LogIndex) -> T,
    ) -> Result<T, ApiError> {
        let core = self.read_synced()?;
        let (log, state) = (core.engine.log(), core.engine.state());
        let mut index = lock(&self.log_index);
        index.sync(core.engine.log_epoch(), log, state);
        Ok(f(log, state, &index))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use evomem_core::{LogicalTime, MemoryRecord, Namespace, Provenance, RecordKind};

    fn logged(seq: u64, op: MemoryOp) -> LoggedOp {
        LoggedOp {
            seq,
            op,
            provenance: Provenance {
                policy: "test".into(),
                label: "t".into(),
                reason: String::new(),
                sources: Vec::new(),
                logical_time: LogicalTime(seq),
                wall_time_ms: 0,
            },
        }
    }

    fn record(id: &str, ns: Namespace) -> MemoryRecord {
        MemoryRecord::new(
            MemoryId::new(id),
            ns,
            RecordKind::Event,
            "x",
            LogicalTime(0),
        )
    }

    fn create(seq: u64, id: &str, ns: Namespace) -> LoggedOp {
        logged(
            seq,
            MemoryOp::Create {
                record: record(id, ns),
            },
        )
    }

    fn forget(seq: u64, id: &str) -> LoggedOp {
        logged(
            seq,
            MemoryOp::Forget {
                id: MemoryId::new(id),
            },
        )
    }

    /// What a full scan answers, the inspector's rule written out plainly:
    /// (user of each op, each record's op positions).
    fn scan(log: &[LoggedOp]) -> (Vec<Option<String>>, HashMap<MemoryId, Vec<usize>>) {
        let mut owner: HashMap<MemoryId, String> = HashMap::new();
        let mut users = Vec::new();
        let mut records: HashMap<MemoryId, Vec<usize>> = HashMap::new();
        for (at, lo) in log.iter().enumerate() {
            let user = match &lo.op {
                MemoryOp::Create { record } => {
                    let u = record
                        .namespace
                        .as_str()
                        .strip_prefix("user:")
                        .map(str::to_string);
                    if let Some(u) = &u {
                        owner.insert(record.id.clone(), u.clone());
                    }
                    u
                }
                op => owner.get(op.target()).cloned(),
            };
            users.push(user);
            for id in op_ids(&lo.op) {
                let v = records.entry(id.clone()).or_default();
                if v.last() != Some(&at) {
                    v.push(at);
                }
            }
        }
        (users, records)
    }

    fn check(index: &LogIndex, log: &[LoggedOp]) {
        let (users, records) = scan(log);
        for (at, u) in users.iter().enumerate() {
            let pos = users[..at].iter().filter(|v| *v == u).count();
            let want = u.as_deref().map(|u| (u, pos));
            assert_eq!(index.user_at(at), want, "op at {at}");
        }
        for (id, at) in &records {
            assert_eq!(index.record_ops(id), at.as_slice(), "record {id:?}");
        }
        let mut counts: Vec<(String, usize)> =
            index.users().map(|(u, n)| (u.to_string(), n)).collect();
        counts.retain(|(_, n)| *n > 0);
        counts.sort();
        let mut want: HashMap<String, usize> = HashMap::new();
        for u in users.iter().flatten() {
            *want.entry(u.clone()).or_default() += 1;
        }
        let mut want: Vec<(String, usize)> = want.into_iter().collect();
        want.sort();
        assert_eq!(counts, want);
    }

    /// Extended op by op, the index answers what a full scan answers; a
    /// replaced log (another epoch, here shorter and renumbered, the way a
    /// user deletion leaves it) is indexed from scratch, and one of the
    /// same epoch that only grew is not.
    #[test]
    fn the_index_answers_what_a_scan_answers_as_the_log_grows_and_is_rewritten() {
        let a = || Namespace::user("a");
        let b = || Namespace::user("b");
        let log = [
            create(1, "m1", a()),
            create(2, "m2", b()),
            create(3, "c1", Namespace::new("catalog")),
            forget(4, "m1"),
            create(5, "m3", a()),
            forget(6, "m2"),
            forget(7, "c1"),
            create(8, "m4", b()),
        ];
        let state = MemoryState::new();
        let mut index = LogIndex::default();
        for end in 0..=log.len() {
            index.sync(1, &log[..end], &state);
            check(&index, &log[..end]);
        }
        assert_eq!(index.user_ops("a"), &[0, 3, 4]);
        assert_eq!(index.user_ops("nobody"), &[] as &[usize]);

        // User a deleted: the log renumbered and shorter, then extended to
        // the old length again with the same last seq.
        let mut rewritten = vec![
            create(1, "m2", b()),
            create(2, "c1", Namespace::new("catalog")),
            forget(3, "m2"),
            forget(4, "c1"),
            create(5, "m4", b()),
        ];
        rewritten.extend([create(6, "m5", b()), create(7, "m6", b()), forget(8, "m5")]);
        index.sync(2, &rewritten, &state);
        check(&index, &rewritten);
        assert_eq!(index.user_ops("a"), &[] as &[usize]);
    }

    /// A record created before the log began is owned by the namespace the
    /// live state gives it.
    #[test]
    fn a_record_older_than_the_log_is_owned_through_the_state() {
        let mut state = MemoryState::new();
        state
            .apply(
                &MemoryOp::Create {
                    record: record("old", Namespace::user("z")),
                },
                LogicalTime(0),
            )
            .unwrap();
        let log = vec![forget(10, "old")];
        let mut index = LogIndex::default();
        index.sync(1, &log, &state);
        assert_eq!(index.user_at(0), Some(("z", 0)));
    }
}
