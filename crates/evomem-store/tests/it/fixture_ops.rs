//! The content of the committed version-1 fixture store
//! (`tests/fixtures/store-v1.sqlite`). Shared by the generator
//! (`examples/make_fixture.rs`, through `#[path]`) and the test that opens
//! the fixture, so the test can check the fixture decodes to exactly this.
//! Never change this file once a fixture was generated from it: add a new
//! one for a new format version instead.

use evomem_core::*;
use std::collections::BTreeMap;

/// Snapshot interval the fixture was written with.
pub const FIXTURE_SNAPSHOT_EVERY: u64 = 4;

fn rec(id: &str, ns: Namespace, kind: RecordKind, text: &str, at: u64) -> MemoryRecord {
    MemoryRecord::new(MemoryId::new(id), ns, kind, text, LogicalTime(at))
}

fn op(o: MemoryOp, label: &str) -> PlannedOp {
    PlannedOp::new(o, label, format!("fixture {label}")).with_sources(vec![LogicalTime(0)])
}

/// The fixture's embedding for `x`.
fn emb(x: f32) -> Embedding {
    Embedding {
        model: "hash-v1-4".into(),
        vector: vec![x, 0.0, -x, 0.5],
    }
}

/// Batches `(policy, ops, logical time)`, covering every op kind.
pub fn fixture_batches() -> Vec<(&'static str, Vec<PlannedOp>, LogicalTime)> {
    vec![
        mars_first_batch(),
        atomrec_batch(),
        romerl_batch(),
        tide_batch(),
        mars_second_batch(),
    ]
}

/// Batch at time 1 (`mars`): two user-1 records and user 2's profile.
fn mars_first_batch() -> (&'static str, Vec<PlannedOp>, LogicalTime) {
    (
        "mars",
        vec![
            op(
                MemoryOp::Create {
                    record: rec(
                        "u1:pref:0",
                        Namespace::user("1"),
                        RecordKind::PreferenceChunk,
                        "likes 90s thrillers",
                        1,
                    )
                    .with_strength(0.4)
                    .with_embedding(emb(0.5)),
                },
                "extract",
            ),
            op(
                MemoryOp::Create {
                    record: rec(
                        "u1:event:0",
                        Namespace::user("1"),
                        RecordKind::Event,
                        "rated Heat 5",
                        1,
                    ),
                },
                "buffer",
            ),
            op(
                MemoryOp::Create {
                    record: rec(
                        "u2:profile",
                        Namespace::user("2"),
                        RecordKind::Profile,
                        "prefers comedies",
                        1,
                    ),
                },
                "synthesize",
            ),
        ],
        LogicalTime(1),
    )
}

/// Batch at time 2 (`atomrec`): an item atom, a link to it and a field update.
fn atomrec_batch() -> (&'static str, Vec<PlannedOp>, LogicalTime) {
    let mut fields = BTreeMap::new();
    fields.insert("keywords".to_string(), serde_json::json!(["noir", "90s"]));
    (
        "atomrec",
        vec![
            op(
                MemoryOp::Create {
                    record: rec(
                        "i7:atom",
                        Namespace::item("7"),
                        RecordKind::Atom,
                        "Heat (1995)",
                        2,
                    )
                    .with_field("category", serde_json::json!("crime"))
                    .with_embedding(emb(0.25)),
                },
                "extract",
            ),
            op(
                MemoryOp::Link {
                    from: MemoryId::new("u1:pref:0"),
                    to: MemoryId::new("i7:atom"),
                    relation: "shared topic".into(),
                    weight: 0.75,
                },
                "link",
            ),
            op(
                MemoryOp::UpdateFields {
                    id: MemoryId::new("i7:atom"),
                    fields,
                    text: None,
                    embedding: None,
                },
                "evolve",
            ),
        ],
        LogicalTime(2),
    )
}

/// Batch at time 3 (`romerl`): a shared utility slot, its utility and a replace.
fn romerl_batch() -> (&'static str, Vec<PlannedOp>, LogicalTime) {
    (
        "romerl",
        vec![
            op(
                MemoryOp::Create {
                    record: rec(
                        "shared:slot:0",
                        Namespace::shared(),
                        RecordKind::UtilitySlot,
                        "check the schema first",
                        3,
                    ),
                },
                "write",
            ),
            op(
                MemoryOp::SetUtility {
                    id: MemoryId::new("shared:slot:0"),
                    value: 0.625,
                },
                "q_update",
            ),
            op(
                MemoryOp::Replace {
                    id: MemoryId::new("shared:slot:0"),
                    record: rec(
                        "x",
                        Namespace::shared(),
                        RecordKind::UtilitySlot,
                        "list tables, then query",
                        3,
                    ),
                },
                "replace",
            ),
        ],
        LogicalTime(3),
    )
}

/// Batch at time 4 (`tide`): a task guideline made provisional, then promoted.
fn tide_batch() -> (&'static str, Vec<PlannedOp>, LogicalTime) {
    (
        "tide",
        vec![
            op(
                MemoryOp::Create {
                    record: rec(
                        "task:1:guide",
                        Namespace::task("1"),
                        RecordKind::Guideline,
                        "lead with the discount",
                        4,
                    ),
                },
                "write",
            ),
            op(
                MemoryOp::SetStatus {
                    id: MemoryId::new("task:1:guide"),
                    status: RecordStatus::Provisional,
                },
                "provisional",
            ),
            op(
                MemoryOp::SetStatus {
                    id: MemoryId::new("task:1:guide"),
                    status: RecordStatus::Promoted,
                },
                "promote",
            ),
        ],
        LogicalTime(4),
    )
}

/// Batch at time 5 (`mars`): boost, create, merge, unlink and forget.
fn mars_second_batch() -> (&'static str, Vec<PlannedOp>, LogicalTime) {
    (
        "mars",
        vec![
            op(
                MemoryOp::AdjustStrength {
                    id: MemoryId::new("u1:pref:0"),
                    delta: 0.2,
                    evidence_delta: 1,
                },
                "boost",
            ),
            op(
                MemoryOp::Create {
                    record: rec(
                        "u1:pref:1",
                        Namespace::user("1"),
                        RecordKind::PreferenceChunk,
                        "likes heist films",
                        5,
                    )
                    .with_strength(0.3),
                },
                "extract",
            ),
            op(
                MemoryOp::Merge {
                    into: MemoryId::new("u1:pref:0"),
                    sources: vec![MemoryId::new("u1:pref:1")],
                    text: Some("likes 90s crime and heist films".into()),
                    strength: Some(0.7),
                },
                "merge",
            ),
            op(
                MemoryOp::Unlink {
                    from: MemoryId::new("u1:pref:0"),
                    to: MemoryId::new("i7:atom"),
                },
                "unlink",
            ),
            op(
                MemoryOp::Forget {
                    id: MemoryId::new("u1:event:0"),
                },
                "forget",
            ),
        ],
        LogicalTime(5),
    )
}
