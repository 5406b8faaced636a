//! A copy-on-write view of one namespace of a [`MemoryState`]: a policy plans
//! ops against it, seeing its own planned changes, while the shared state
//! stays untouched until the engine applies the ops.
//!
//! The view copies a record out of the shared state only when an op names
//! it ([`MemoryOp::ids`]); reads fall through to the shared state otherwise.
//! MARS plans every observed signal on such a view, and a full copy of the
//! user's records per signal was the cost that grew with the history
//! (issue 16).
//!
//! Links are not part of the view: a record read through it, or copied into
//! it, carries no links, and ops only see the links other ops of the same
//! view made. That is enough for policies whose records do not link (MARS),
//! and it keeps the semantics of the full copy it replaces, which cleared
//! the links too. Validation is the shared state's own
//! ([`MemoryState::apply`] on the copies), so an op fails on the view exactly
//! when it would fail on a full copy of the namespace.

use crate::error::OpError;
use crate::ids::{LogicalTime, MemoryId, Namespace};
use crate::memory::{MemoryRecord, RecordKind};
use crate::op::MemoryOp;
use crate::state::MemoryState;
use std::collections::BTreeSet;

/// One namespace of a shared state, with ops applied on top.
#[derive(Debug)]
pub struct NamespaceView<'a> {
    base: &'a MemoryState,
    ns: Namespace,
    /// Records an op touched (copied from `base` first), as changed.
    touched: MemoryState,
    /// Records of `base` that ops removed.
    gone: BTreeSet<MemoryId>,
}

impl<'a> NamespaceView<'a> {
    /// A view of `ns` in `base`, with nothing applied yet.
    pub fn new(base: &'a MemoryState, ns: Namespace) -> Self {
        Self {
            base,
            ns,
            touched: MemoryState::new(),
            gone: BTreeSet::new(),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// Records the view holds apart from the shared state: those its ops
    /// created or changed (a removed record is not counted).
    pub fn touched(&self) -> usize {
        self.touched.len()
    }

    fn in_base(&self, id: &MemoryId) -> Option<&'a MemoryRecord> {
        self.base.get_in(id, std::slice::from_ref(&self.ns))
    }

    /// A record of the view, with every applied op in it. A record the ops
    /// did not touch is borrowed from the shared state as it is there, links
    /// included, so callers must not read its links (see the module).
    pub fn get(&self, id: &MemoryId) -> Option<&MemoryRecord> {
        if let Some(r) = self.touched.get(id) {
            return Some(r);
        }
        if self.gone.contains(id) {
            return None;
        }
        self.in_base(id)
    }

    /// The view's records in id order. Records of the shared state are
    /// borrowed as they are there, links included, so callers must not read
    /// a scanned record's links (see the module).
    pub fn scan(&self) -> impl Iterator<Item = &MemoryRecord> + '_ {
        let ns = std::slice::from_ref(&self.ns);
        let mut base = self
            .base
            .scan(ns)
            .filter(|r| !self.gone.contains(&r.id) && self.touched.get(&r.id).is_none())
            .peekable();
        let mut mine = self.touched.scan(ns).peekable();
        std::iter::from_fn(move || match (base.peek(), mine.peek()) {
            (Some(b), Some(m)) if b.id < m.id => base.next(),
            (Some(_), Some(_)) | (None, Some(_)) => mine.next(),
            (Some(_), None) => base.next(),
            (None, None) => None,
        })
    }

    /// Validate and apply `op` at `at`, as [`MemoryState::apply`] would on a
    /// full copy of the namespace. On error the view's content is unchanged.
    pub fn apply(&mut self, op: &MemoryOp, at: LogicalTime) -> Result<(), OpError> {
        let ids: Vec<MemoryId> = op.ids().into_iter().cloned().collect();
        for id in &ids {
            if self.touched.get(id).is_none() && !self.gone.contains(id) {
                if let Some(r) = self.in_base(id) {
                    self.touched.apply(
                        &MemoryOp::Create {
                            record: unlinked(r),
                        },
                        r.updated_at,
                    )?;
                }
            }
        }
        self.touched.apply(op, at)?;
        for id in ids {
            if self.touched.get(&id).is_some() {
                self.gone.remove(&id);
            } else if self.in_base(&id).is_some() {
                self.gone.insert(id);
            }
        }
        Ok(())
    }
}

/// Read access to records by id and by namespace and kind, whether from the
/// shared state or from a view of it; what the read side of a policy needs
/// (MARS reads its tiers through it).
pub trait RecordSource {
    /// One record by id.
    fn record(&self, id: &MemoryId) -> Option<&MemoryRecord>;
    /// The records of one kind in `ns`, in id order.
    fn of_kind(&self, ns: &Namespace, kind: &RecordKind) -> Vec<&MemoryRecord>;
}

impl RecordSource for MemoryState {
    fn record(&self, id: &MemoryId) -> Option<&MemoryRecord> {
        self.get(id)
    }

    fn of_kind(&self, ns: &Namespace, kind: &RecordKind) -> Vec<&MemoryRecord> {
        self.in_namespace(ns).filter(|r| &r.kind == kind).collect()
    }
}

impl RecordSource for NamespaceView<'_> {
    fn record(&self, id: &MemoryId) -> Option<&MemoryRecord> {
        self.get(id)
    }

    /// Empty for any namespace but the view's own.
    fn of_kind(&self, ns: &Namespace, kind: &RecordKind) -> Vec<&MemoryRecord> {
        if ns != &self.ns {
            return Vec::new();
        }
        self.scan().filter(|r| &r.kind == kind).collect()
    }
}

fn unlinked(r: &MemoryRecord) -> MemoryRecord {
    let mut r = r.clone();
    r.links.clear();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Link, RecordStatus};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const POOL: usize = 6;

    fn id(i: usize) -> MemoryId {
        MemoryId::new(format!("r{i}"))
    }

    fn ns(a: bool) -> Namespace {
        Namespace::user(if a { "a" } else { "b" })
    }

    fn record(i: usize, in_a: bool, text: &str, link: Option<usize>) -> MemoryRecord {
        let mut r = MemoryRecord::new(
            id(i),
            ns(in_a),
            RecordKind::PreferenceChunk,
            text,
            LogicalTime(1),
        );
        r.strength = 0.25;
        r.evidence = 1;
        if let Some(t) = link {
            r.links.push(Link {
                target: id(t),
                relation: "near".into(),
                weight: 0.5,
            });
        }
        r
    }

    fn op_strategy() -> impl Strategy<Value = MemoryOp> {
        let i = 0..POOL;
        prop_oneof![
            (i.clone(), any::<bool>(), proptest::option::of(0..POOL)).prop_map(|(i, a, l)| {
                MemoryOp::Create {
                    record: record(i, a, "new", l),
                }
            }),
            (i.clone(), "[a-z]{1,4}").prop_map(|(i, t)| MemoryOp::UpdateFields {
                id: id(i),
                fields: BTreeMap::from([("k".to_string(), serde_json::json!(t))]),
                text: Some(t),
                embedding: None,
            }),
            (i.clone(), -1.5f64..1.5).prop_map(|(i, d)| MemoryOp::AdjustStrength {
                id: id(i),
                delta: d,
                evidence_delta: 1,
            }),
            (i.clone(), i.clone()).prop_map(|(f, t)| MemoryOp::Link {
                from: id(f),
                to: id(t),
                relation: "r".into(),
                weight: 0.3,
            }),
            (i.clone(), i.clone()).prop_map(|(f, t)| MemoryOp::Unlink {
                from: id(f),
                to: id(t)
            }),
            (i.clone(), proptest::collection::vec(0..POOL, 0..3)).prop_map(|(into, s)| {
                MemoryOp::Merge {
                    into: id(into),
                    sources: s.into_iter().map(id).collect(),
                    text: Some("merged".into()),
                    strength: None,
                }
            }),
            i.clone().prop_map(|i| MemoryOp::Forget { id: id(i) }),
            (i.clone(), proptest::option::of(0..POOL)).prop_map(|(i, l)| MemoryOp::Replace {
                id: id(i),
                record: record(i, true, "replaced", l)
            }),
            i.clone().prop_map(|i| MemoryOp::SetStatus {
                id: id(i),
                status: RecordStatus::Promoted
            }),
            (i, 0.0f64..1.0).prop_map(|(i, v)| MemoryOp::SetUtility {
                id: id(i),
                value: v
            }),
        ]
    }

    /// What the view replaced: a full copy of the namespace, links cleared.
    fn full_copy(base: &MemoryState, n: &Namespace) -> MemoryState {
        let mut s = MemoryState::new();
        for r in base.scan(std::slice::from_ref(n)) {
            s.apply(
                &MemoryOp::Create {
                    record: unlinked(r),
                },
                LogicalTime(0),
            )
            .unwrap();
        }
        s
    }

    proptest! {
        /// Any op sequence gives the same outcomes, records and scan order
        /// on the view as on a full copy of the namespace.
        #[test]
        fn the_view_behaves_as_a_full_copy(
            base_recs in proptest::collection::vec((any::<bool>(), proptest::option::of(0..POOL)), POOL),
            ops in proptest::collection::vec(op_strategy(), 1..25),
        ) {
            let mut base = MemoryState::new();
            for (i, (a, l)) in base_recs.iter().enumerate() {
                if i % 3 != 2 {
                    base.apply(&MemoryOp::Create { record: record(i, *a, "base", *l) }, LogicalTime(1)).unwrap();
                }
            }
            let n = ns(true);
            let mut copy = full_copy(&base, &n);
            let mut view = NamespaceView::new(&base, n.clone());
            for (k, op) in ops.iter().enumerate() {
                let at = LogicalTime(10 + k as u64);
                let want = copy.apply(op, at);
                let got = view.apply(op, at);
                prop_assert_eq!(&want, &got, "op {:?}", op);
                for i in 0..POOL {
                    let w = copy.get(&id(i)).map(unlinked);
                    let g = view.get(&id(i)).map(unlinked);
                    prop_assert_eq!(w, g, "record {} after {:?}", i, op);
                }
                let w: Vec<MemoryRecord> = copy.scan(std::slice::from_ref(&n)).cloned().collect();
                let g: Vec<MemoryRecord> = view.scan().map(unlinked).collect();
                let w: Vec<MemoryRecord> = w.iter().map(unlinked).collect();
                prop_assert_eq!(w, g, "scan after {:?}", op);
            }
            prop_assert!(view.touched() <= POOL);
        }
    }

    #[test]
    fn only_named_records_are_copied() {
        let mut base = MemoryState::new();
        for i in 0..POOL {
            base.apply(
                &MemoryOp::Create {
                    record: record(i, true, "base", None),
                },
                LogicalTime(1),
            )
            .unwrap();
        }
        let mut view = NamespaceView::new(&base, ns(true));
        view.apply(
            &MemoryOp::AdjustStrength {
                id: id(2),
                delta: 0.5,
                evidence_delta: 1,
            },
            LogicalTime(5),
        )
        .unwrap();
        assert_eq!(view.touched(), 1);
        assert_eq!(view.scan().count(), POOL);
        assert_eq!(view.get(&id(2)).map(|r| r.strength), Some(0.75));
        assert_eq!(
            base.get(&id(2)).map(|r| r.strength),
            Some(0.25),
            "the shared state is untouched"
        );
        view.apply(&MemoryOp::Forget { id: id(4) }, LogicalTime(6))
            .unwrap();
        assert!(view.get(&id(4)).is_none());
        assert_eq!(view.scan().count(), POOL - 1);
        let other = Namespace::user("b");
        assert!(
            NamespaceView::new(&base, other).get(&id(0)).is_none(),
            "another namespace's record is not seen"
        );
    }
}
