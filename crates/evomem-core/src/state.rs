//! The materialised memory: records by id, indexed by namespace.
//!
//! [`MemoryState::apply`] is the single definition of what each
//! [`MemoryOp`] does. Every store applies ops through it, and replaying an op
//! log into an empty state gives the live state exactly. Iteration order is
//! deterministic (namespaces and their ids in B-tree order; every record in
//! id order), so runs are reproducible byte for byte.
//!
//! Records themselves sit in a hash map keyed by id. Every namespace scan
//! looks each of its ids up there, and in a B-tree over all records that
//! lookup cost `log₂(records)` string comparisons with a cache miss at most
//! levels: about a third of MARS's time at 300k interactions, and a share
//! that grew with the store (issue 16's cost curves). A hash lookup costs
//! one hash of the id and one comparison whatever the size.

use crate::error::OpError;
use crate::ids::{LogicalTime, MemoryId, Namespace};
use crate::memory::{Link, MemoryRecord, RecordKind};
use crate::op::MemoryOp;
use serde::{Deserialize, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// All live records.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemoryState {
    /// Serialised in id order, as the B-tree it replaced was (module docs).
    #[serde(serialize_with = "in_id_order")]
    ///
    /// Boxed: a tenant of the service holds hundreds of thousands of
    /// records, and growing the map moves every value; boxed, it moves a
    /// pointer each (a resize of 100,000 records held a service tenant's
    /// write lock for up to 90 ms inline, docs/notes/service-noisy-neighbours.md).
    records: HashMap<MemoryId, Box<MemoryRecord>>,
    by_namespace: BTreeMap<Namespace, BTreeSet<MemoryId>>,
    /// target -> sources linking to it.
    /// A hash map for the same reason as `records`; serialised in id order.
    #[serde(serialize_with = "in_id_order")]
    backlinks: HashMap<MemoryId, BTreeSet<MemoryId>>,
}

/// Equal when the records are equal: the namespace and backlink indexes
/// derive from them, except that an emptied backlink set may or may not
/// remain, depending on the history (so empty sets are not compared).
impl PartialEq for MemoryState {
    fn eq(&self, other: &Self) -> bool {
        let live = |m: &HashMap<MemoryId, BTreeSet<MemoryId>>| {
            m.iter().filter(|(_, s)| !s.is_empty()).count()
        };
        self.records == other.records
            && self.by_namespace == other.by_namespace
            && live(&self.backlinks) == live(&other.backlinks)
            && self
                .backlinks
                .iter()
                .filter(|(_, s)| !s.is_empty())
                .all(|(k, s)| other.backlinks.get(k) == Some(s))
    }
}

impl MemoryState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when no record is live.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// One record by id, whatever its namespace. Callers that serve a user
    /// must check the namespace; prefer [`MemoryState::get_in`].
    pub fn get(&self, id: &MemoryId) -> Option<&MemoryRecord> {
        self.records.get(id).map(|r| &**r)
    }

    /// One record by id, only if it lives in one of `namespaces`.
    pub fn get_in(&self, id: &MemoryId, namespaces: &[Namespace]) -> Option<&MemoryRecord> {
        self.get(id)
            .filter(|r| namespaces.iter().any(|n| n == &r.namespace))
    }

    /// Records of the named namespaces, in id order.
    pub fn scan<'a>(
        &'a self,
        namespaces: &'a [Namespace],
    ) -> impl Iterator<Item = &'a MemoryRecord> + 'a {
        namespaces.iter().flat_map(move |ns| self.in_namespace(ns))
    }

    /// Records of one namespace, in id order; the iterator borrows the state
    /// only (not `ns`).
    pub fn in_namespace<'a>(
        &'a self,
        ns: &Namespace,
    ) -> impl Iterator<Item = &'a MemoryRecord> + use<'a> {
        self.by_namespace
            .get(ns)
            .into_iter()
            .flat_map(|ids| ids.iter())
            .filter_map(move |id| self.get(id))
    }

    /// Records of one namespace whose ids sort after `after` (every record
    /// when `None`), in id order: a listing's next page seeks to its cursor
    /// in the namespace's B-tree instead of walking every id before it.
    pub fn in_namespace_after<'a>(
        &'a self,
        ns: &Namespace,
        after: Option<&MemoryId>,
    ) -> impl Iterator<Item = &'a MemoryRecord> + use<'a> {
        use std::ops::Bound;
        let lower = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.clone()));
        self.by_namespace
            .get(ns)
            .into_iter()
            .flat_map(move |ids| ids.range((lower.clone(), Bound::Unbounded)))
            .filter_map(move |id| self.get(id))
    }

    /// Records of one kind in the named namespaces.
    pub fn scan_kind<'a>(
        &'a self,
        namespaces: &'a [Namespace],
        kind: &'a RecordKind,
    ) -> impl Iterator<Item = &'a MemoryRecord> + 'a {
        self.scan(namespaces).filter(move |r| &r.kind == kind)
    }

    /// Every record in id order (for persistence, snapshots and tests; not
    /// for serving a user). Sorts the whole state on each call.
    pub fn iter_all(&self) -> impl Iterator<Item = &MemoryRecord> {
        let mut all: Vec<&MemoryRecord> = self.records.values().map(|r| &**r).collect();
        all.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        all.into_iter()
    }

    /// Every namespace that holds at least one record.
    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.by_namespace.keys()
    }

    /// Ids of the records linking to `id`.
    pub fn backlinks(&self, id: &MemoryId) -> impl Iterator<Item = &MemoryId> {
        self.backlinks.get(id).into_iter().flat_map(|s| s.iter())
    }

    /// Check that `op` can be applied, without changing anything.
    pub fn validate(&self, op: &MemoryOp) -> Result<(), OpError> {
        let need = |id: &MemoryId| -> Result<(), OpError> {
            if self.records.contains_key(id) {
                Ok(())
            } else {
                Err(OpError::UnknownRecord { id: id.clone() })
            }
        };
        match op {
            MemoryOp::Create { record } => {
                if self.records.contains_key(&record.id) {
                    return Err(OpError::DuplicateId {
                        id: record.id.clone(),
                    });
                }
                check_finite("strength", record.strength)?;
                check_finite("utility", record.utility)?;
                Ok(())
            }
            MemoryOp::Replace { id, record } => {
                check_finite("strength", record.strength)?;
                need(id)
            }
            MemoryOp::UpdateFields { id, .. }
            | MemoryOp::Forget { id }
            | MemoryOp::SetStatus { id, .. } => need(id),
            MemoryOp::AdjustStrength { id, delta, .. } => {
                check_finite("delta", *delta)?;
                need(id)
            }
            MemoryOp::SetUtility { id, value } => {
                check_finite("utility", *value)?;
                need(id)
            }
            MemoryOp::Link {
                from, to, weight, ..
            } => {
                if from == to {
                    return Err(OpError::Invalid {
                        reason: format!("self-link on {from}"),
                    });
                }
                check_finite("weight", f64::from(*weight))?;
                need(from)?;
                need(to)
            }
            MemoryOp::Unlink { from, .. } => need(from),
            MemoryOp::Merge {
                into,
                sources,
                strength,
                ..
            } => {
                need(into)?;
                if let Some(s) = strength {
                    check_finite("strength", *s)?;
                }
                for s in sources {
                    if s == into {
                        return Err(OpError::Invalid {
                            reason: format!("merge of {into} into itself"),
                        });
                    }
                    need(s)?;
                }
                Ok(())
            }
        }
    }

    /// Validate and apply one op at logical time `at`. On error nothing changes.
    ///
    /// Longer than our usual limit on purpose: one arm per op kind, so that
    /// the meaning of every op stands in one place (the module's contract).
    pub fn apply(&mut self, op: &MemoryOp, at: LogicalTime) -> Result<(), OpError> {
        self.validate(op)?;
        match op {
            MemoryOp::Create { record } => {
                let mut r = record.clone();
                r.strength = r.strength.clamp(-1.0, 1.0);
                let links = std::mem::take(&mut r.links);
                self.insert(r);
                for l in links {
                    if self.records.contains_key(&l.target) {
                        self.add_link(&record.id, l);
                    }
                }
            }
            MemoryOp::UpdateFields {
                id,
                fields,
                text,
                embedding,
            } => {
                if let Some(r) = self.records.get_mut(id) {
                    for (k, v) in fields {
                        if v.is_null() {
                            r.fields.remove(k);
                        } else {
                            r.fields.insert(k.clone(), v.clone());
                        }
                    }
                    if let Some(t) = text {
                        r.text = t.clone();
                    }
                    if let Some(e) = embedding {
                        r.embedding = Some(e.clone());
                    }
                    r.updated_at = at;
                }
            }
            MemoryOp::Link {
                from,
                to,
                relation,
                weight,
            } => {
                self.add_link(
                    from,
                    Link {
                        target: to.clone(),
                        relation: relation.clone(),
                        weight: *weight,
                    },
                );
                if let Some(r) = self.records.get_mut(from) {
                    r.updated_at = at;
                }
            }
            MemoryOp::Unlink { from, to } => {
                if let Some(r) = self.records.get_mut(from) {
                    r.links.retain(|l| &l.target != to);
                    r.updated_at = at;
                }
                if let Some(s) = self.backlinks.get_mut(to) {
                    s.remove(from);
                }
            }
            MemoryOp::AdjustStrength {
                id,
                delta,
                evidence_delta,
            } => {
                if let Some(r) = self.records.get_mut(id) {
                    r.strength = (r.strength + delta).clamp(-1.0, 1.0);
                    r.evidence = r.evidence.saturating_add(*evidence_delta);
                    r.updated_at = at;
                }
            }
            MemoryOp::SetUtility { id, value } => {
                if let Some(r) = self.records.get_mut(id) {
                    r.utility = *value;
                    r.updated_at = at;
                }
            }
            MemoryOp::Merge {
                into,
                sources,
                text,
                strength,
            } => {
                let mut evidence = 0u32;
                let mut moved_links = Vec::new();
                for s in sources {
                    if let Some(r) = self.records.get(s) {
                        evidence = evidence.saturating_add(r.evidence);
                        moved_links.extend(r.links.iter().filter(|l| &l.target != into).cloned());
                    }
                    let incoming: Vec<MemoryId> = self.backlinks(s).cloned().collect();
                    for src in incoming {
                        if &src != into && !sources.contains(&src) {
                            if let Some(l) = self
                                .records
                                .get(&src)
                                .and_then(|r| r.links.iter().find(|l| &l.target == s))
                                .cloned()
                            {
                                self.add_link(
                                    &src,
                                    Link {
                                        target: into.clone(),
                                        ..l
                                    },
                                );
                            }
                        }
                    }
                    self.remove(s);
                }
                for l in moved_links {
                    if self.records.contains_key(&l.target) {
                        self.add_link(into, l);
                    }
                }
                if let Some(r) = self.records.get_mut(into) {
                    r.evidence = r.evidence.saturating_add(evidence);
                    if let Some(t) = text {
                        r.text = t.clone();
                    }
                    if let Some(s) = strength {
                        r.strength = s.clamp(-1.0, 1.0);
                    }
                    r.updated_at = at;
                }
            }
            MemoryOp::Forget { id } => self.remove(id),
            MemoryOp::Replace { id, record } => {
                if let Some(old) = self.records.get(id).cloned() {
                    let mut r = record.clone();
                    r.id = old.id.clone();
                    r.namespace = old.namespace.clone();
                    r.utility = old.utility;
                    r.created_at = old.created_at;
                    r.updated_at = at;
                    r.strength = r.strength.clamp(-1.0, 1.0);
                    // Keep the links that point *into* the slot: only its
                    // content is replaced, not its place in the graph.
                    let incoming: Vec<(MemoryId, Link)> = self
                        .backlinks(id)
                        .filter_map(|src| {
                            self.records.get(src).and_then(|sr| {
                                sr.links
                                    .iter()
                                    .find(|l| &l.target == id)
                                    .map(|l| (src.clone(), l.clone()))
                            })
                        })
                        .collect();
                    let links = std::mem::take(&mut r.links);
                    self.remove(id);
                    self.insert(r);
                    for l in links {
                        if self.records.contains_key(&l.target) && &l.target != id {
                            self.add_link(id, l);
                        }
                    }
                    for (src, l) in incoming {
                        self.add_link(&src, l);
                    }
                }
            }
            MemoryOp::SetStatus { id, status } => {
                if let Some(r) = self.records.get_mut(id) {
                    r.status = *status;
                    r.updated_at = at;
                }
            }
        }
        Ok(())
    }

    /// A copy of the records of `ns` that `keep` accepts, for a reader that
    /// works without holding the owner's lock (the service's loop endpoints
    /// run a policy on such a copy of one user's records). Links into
    /// records left out stay on the copied records; backlinks are those of
    /// the copied records only.
    pub fn copy_of_namespace(
        &self,
        ns: &Namespace,
        keep: impl Fn(&MemoryRecord) -> bool,
    ) -> MemoryState {
        let mut out = MemoryState::new();
        for r in self.in_namespace(ns).filter(|r| keep(r)) {
            out.insert(r.clone());
        }
        out
    }

    /// Put records back as they were: each `(id, old)` replaces whatever is
    /// now stored under `id` with `old` (`None`: no record). Undoes a run of
    /// [`MemoryState::apply`] when `saved` holds, for every record those ops
    /// changed (the op's target, merge sources and the records linking to a
    /// removed one), its value before the first of them.
    pub fn restore(&mut self, saved: Vec<(MemoryId, Option<MemoryRecord>)>) {
        for (id, _) in &saved {
            self.detach(id);
        }
        for (_, old) in saved.into_iter() {
            if let Some(r) = old {
                self.insert(r);
            }
        }
    }

    /// Remove a record and the index entries of its own links, leaving the
    /// links of other records into it alone (unlike `remove`).
    fn detach(&mut self, id: &MemoryId) {
        let Some(r) = self.records.remove(id) else {
            return;
        };
        if let Some(s) = self.by_namespace.get_mut(&r.namespace) {
            s.remove(id);
            if s.is_empty() {
                self.by_namespace.remove(&r.namespace);
            }
        }
        for l in &r.links {
            if let Some(s) = self.backlinks.get_mut(&l.target) {
                s.remove(id);
                if s.is_empty() {
                    self.backlinks.remove(&l.target);
                }
            }
        }
    }

    /// Remove every record of the named namespace and every link into it.
    /// Returns how many records were removed.
    pub fn purge_namespace(&mut self, ns: &Namespace) -> usize {
        let ids: Vec<MemoryId> = self
            .by_namespace
            .get(ns)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for id in &ids {
            self.remove(id);
        }
        ids.len()
    }

    fn insert(&mut self, r: MemoryRecord) {
        self.by_namespace
            .entry(r.namespace.clone())
            .or_default()
            .insert(r.id.clone());
        for l in &r.links {
            self.backlinks
                .entry(l.target.clone())
                .or_default()
                .insert(r.id.clone());
        }
        self.records.insert(r.id.clone(), Box::new(r));
    }

    fn add_link(&mut self, from: &MemoryId, link: Link) {
        let target = link.target.clone();
        if let Some(r) = self.records.get_mut(from) {
            if let Some(existing) = r.links.iter_mut().find(|l| l.target == link.target) {
                *existing = link;
            } else {
                r.links.push(link);
            }
            self.backlinks
                .entry(target)
                .or_default()
                .insert(from.clone());
        }
    }

    fn remove(&mut self, id: &MemoryId) {
        let Some(r) = self.records.remove(id) else {
            return;
        };
        if let Some(s) = self.by_namespace.get_mut(&r.namespace) {
            s.remove(id);
            if s.is_empty() {
                self.by_namespace.remove(&r.namespace);
            }
        }
        for l in &r.links {
            if let Some(s) = self.backlinks.get_mut(&l.target) {
                s.remove(id);
            }
        }
        if let Some(sources) = self.backlinks.remove(id) {
            for src in sources {
                if let Some(sr) = self.records.get_mut(&src) {
                    sr.links.retain(|l| &l.target != id);
                }
            }
        }
    }
}

/// Serialise a map keyed by record id in id order.
fn in_id_order<V: Serialize, S: Serializer>(
    map: &HashMap<MemoryId, V>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let sorted: BTreeMap<&MemoryId, &V> = map.iter().collect();
    sorted.serialize(s)
}

fn check_finite(field: &'static str, v: f64) -> Result<(), OpError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(OpError::NonFinite { field })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RecordKind;

    fn rec(id: &str, ns: &str) -> MemoryRecord {
        MemoryRecord::new(
            MemoryId::new(id),
            Namespace::new(ns),
            RecordKind::Atom,
            id,
            LogicalTime(0),
        )
    }

    /// Records live in a hash map, but every listing and the serialised
    /// snapshot are in id order, so persisted bytes do not depend on it.
    #[test]
    fn listing_and_snapshot_are_in_id_order() {
        let mut s = MemoryState::new();
        for k in (0..64).rev() {
            let id = format!("r{:02}", (k * 37) % 64);
            s.apply(
                &MemoryOp::Create {
                    record: rec(&id, if k % 2 == 0 { "user:1" } else { "user:2" }),
                },
                LogicalTime(k),
            )
            .unwrap();
        }
        for k in 0..63 {
            s.apply(
                &MemoryOp::Link {
                    from: MemoryId::new(format!("r{k:02}")),
                    to: MemoryId::new(format!("r{:02}", (k * 5 + 1) % 64)),
                    relation: "rel".into(),
                    weight: 0.5,
                },
                LogicalTime(100 + k),
            )
            .unwrap();
        }
        let ids: Vec<String> = s.iter_all().map(|r| r.id.as_str().to_string()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids.len(), 64);
        assert_eq!(ids, sorted);
        let json = serde_json::to_string(&s).unwrap();
        let at: Vec<usize> = sorted
            .iter()
            .map(|id| json.find(&format!("\"{id}\":")).unwrap())
            .collect();
        assert!(
            at.windows(2).all(|w| w[0] < w[1]),
            "snapshot keys out of order"
        );
        let tail = &json[json.find("\"backlinks\"").unwrap()..];
        let targets: Vec<usize> = sorted
            .iter()
            .filter(|id| s.backlinks(&MemoryId::new(id.as_str())).next().is_some())
            .map(|id| tail.find(&format!("\"{id}\":")).unwrap())
            .collect();
        assert!(targets.len() > 30);
        assert!(
            targets.windows(2).all(|w| w[0] < w[1]),
            "backlink keys out of order"
        );
        let back: MemoryState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }

    #[test]
    fn forget_removes_incoming_links() {
        let mut s = MemoryState::new();
        s.apply(
            &MemoryOp::Create {
                record: rec("a", "user:1"),
            },
            LogicalTime(0),
        )
        .unwrap();
        s.apply(
            &MemoryOp::Create {
                record: rec("b", "user:1"),
            },
            LogicalTime(0),
        )
        .unwrap();
        s.apply(
            &MemoryOp::Link {
                from: MemoryId::new("a"),
                to: MemoryId::new("b"),
                relation: "shared topic".into(),
                weight: 0.5,
            },
            LogicalTime(1),
        )
        .unwrap();
        s.apply(
            &MemoryOp::Forget {
                id: MemoryId::new("b"),
            },
            LogicalTime(2),
        )
        .unwrap();
        assert!(s.get(&MemoryId::new("a")).unwrap().links.is_empty());
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn replace_keeps_incoming_links_and_utility() {
        let mut s = MemoryState::new();
        s.apply(
            &MemoryOp::Create {
                record: rec("a", "task:1"),
            },
            LogicalTime(0),
        )
        .unwrap();
        s.apply(
            &MemoryOp::Create {
                record: rec("b", "task:1"),
            },
            LogicalTime(0),
        )
        .unwrap();
        let link = MemoryOp::Link {
            from: MemoryId::new("a"),
            to: MemoryId::new("b"),
            relation: "r".into(),
            weight: 1.0,
        };
        s.apply(&link, LogicalTime(1)).unwrap();
        s.apply(
            &MemoryOp::SetUtility {
                id: MemoryId::new("b"),
                value: 0.7,
            },
            LogicalTime(1),
        )
        .unwrap();
        s.apply(
            &MemoryOp::Replace {
                id: MemoryId::new("b"),
                record: rec("new", "elsewhere"),
            },
            LogicalTime(2),
        )
        .unwrap();
        let b = s.get(&MemoryId::new("b")).unwrap();
        assert_eq!(b.text, "new");
        assert_eq!(b.utility, 0.7);
        assert_eq!(b.namespace, Namespace::new("task:1"));
        assert_eq!(s.get(&MemoryId::new("a")).unwrap().links.len(), 1);
        assert_eq!(s.backlinks(&MemoryId::new("b")).count(), 1);
    }

    #[test]
    fn invalid_op_changes_nothing() {
        let mut s = MemoryState::new();
        s.apply(
            &MemoryOp::Create {
                record: rec("a", "user:1"),
            },
            LogicalTime(0),
        )
        .unwrap();
        let before = s.clone();
        let err = s.apply(
            &MemoryOp::Merge {
                into: MemoryId::new("a"),
                sources: vec![MemoryId::new("missing")],
                text: None,
                strength: None,
            },
            LogicalTime(1),
        );
        assert!(err.is_err());
        assert_eq!(s, before);
    }

    #[test]
    fn a_seek_after_an_id_is_the_tail_of_the_listing() {
        let mut s = MemoryState::new();
        let ns = Namespace("user:u".into());
        for id in ["b", "d", "a", "c", "e"] {
            s.apply(
                &MemoryOp::Create {
                    record: rec(id, "user:u"),
                },
                LogicalTime(0),
            )
            .unwrap();
        }
        let ids = |after: Option<&str>| -> Vec<String> {
            s.in_namespace_after(&ns, after.map(MemoryId::new).as_ref())
                .map(|r| r.id.to_string())
                .collect()
        };
        assert_eq!(ids(None), ["a", "b", "c", "d", "e"]);
        assert_eq!(ids(Some("b")), ["c", "d", "e"]);
        // A cursor that is no id (deleted since) seeks to the next one.
        assert_eq!(ids(Some("bb")), ["c", "d", "e"]);
        assert!(ids(Some("e")).is_empty());
        assert!(s
            .in_namespace_after(&Namespace("user:other".into()), None)
            .next()
            .is_none());
    }

    #[test]
    fn namespaces_isolate_scans() {
        let mut s = MemoryState::new();
        s.apply(
            &MemoryOp::Create {
                record: rec("a", "user:1"),
            },
            LogicalTime(0),
        )
        .unwrap();
        s.apply(
            &MemoryOp::Create {
                record: rec("b", "user:2"),
            },
            LogicalTime(0),
        )
        .unwrap();
        let ns = [Namespace::user("1")];
        let ids: Vec<_> = s.scan(&ns).map(|r| r.id.0.clone()).collect();
        assert_eq!(ids, vec!["a".to_string()]);
        assert!(s.get_in(&MemoryId::new("b"), &ns).is_none());
    }
}
