//! `forget_user` leaves nothing of the user behind: not in the engine, not
//! in the op log, snapshots, records or vectors, and (SQLite) not in the raw
//! bytes of the database file or its WAL; (PostgreSQL) not in any table by a
//! raw SQL scan.

use crate::common::*;
use evomem_core::*;
use evomem_store::Engine;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Build a store with several users, cross links from shared records into
/// the victim's, and merges; returns the victim's token.
fn populate(e: &mut Engine) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut next = 0;
    for t in 1..=60u64 {
        random_batch(e, &mut rng, &mut next, 4, LogicalTime(t), 4);
    }
    // Make sure the victim has live records, one with a vector, and that a
    // shared record links into them.
    let victim = "u2";
    let mut r = MemoryRecord::new(
        MemoryId::new("victim-note"),
        Namespace::user(victim),
        RecordKind::Profile,
        format!("profile {}", marker(2)),
        LogicalTime(61),
    )
    .with_embedding(Embedding {
        model: "test-v1-8".into(),
        vector: vec![0.5; 8],
    });
    r.fields
        .insert("secret".into(), serde_json::json!(marker(2)));
    let shared = MemoryRecord::new(
        MemoryId::new("shared-hub"),
        Namespace::shared(),
        RecordKind::Guideline,
        "hub",
        LogicalTime(61),
    );
    e.apply(
        "t",
        vec![
            PlannedOp::new(MemoryOp::Create { record: r }, "extract", "t"),
            PlannedOp::new(MemoryOp::Create { record: shared }, "extract", "t"),
            PlannedOp::new(
                MemoryOp::Link {
                    from: MemoryId::new("shared-hub"),
                    to: MemoryId::new("victim-note"),
                    relation: "about".into(),
                    weight: 1.0,
                },
                "link",
                "t",
            ),
        ],
        LogicalTime(61),
    )
    .unwrap();
    victim.to_string()
}

fn assert_engine_clean(e: &mut Engine, victim: &str) {
    let ns = Namespace::user(victim);
    assert!(e.state().scan(std::slice::from_ref(&ns)).next().is_none());
    assert!(e.state().get(&MemoryId::new("victim-note")).is_none());
    let hub = e.state().get(&MemoryId::new("shared-hub")).unwrap();
    assert!(hub.links.is_empty(), "link into the victim survived");
    let all = serde_json::to_string(&(e.log(), e.state())).unwrap();
    assert!(!all.contains(&marker(2)), "marker left in engine");
    assert!(
        !all.contains(&format!("user:{victim}")),
        "namespace left in engine"
    );
    e.verify().unwrap();
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn forget_user_sqlite_leaves_no_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.sqlite");
    let mut e = Engine::sqlite(&path).unwrap().with_snapshot_every(16);
    let victim = populate(&mut e);
    let before = std::fs::read(&path).unwrap();
    let wal = dir.path().join("f.sqlite-wal");
    let before_wal = std::fs::read(&wal).unwrap_or_default();
    assert!(
        contains(&before, &marker(2)) || contains(&before_wal, &marker(2)),
        "test setup: marker should be on disk before forgetting"
    );
    let report = e.forget_user(&victim).unwrap();
    assert!(
        report.records_removed > 0 && report.ops_dropped > 0,
        "{report:?}"
    );
    assert_engine_clean(&mut e, &victim);
    // Raw SQL scans.
    let conn = rusqlite::Connection::open(&path).unwrap();
    for (table, cols) in [
        ("ops", "body"),
        ("snapshots", "body"),
        ("records", "namespace || body"),
        ("vectors", "namespace || id"),
    ] {
        let n: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE instr({cols}, ?1) > 0 OR instr({cols}, ?2) > 0"),
                [marker(2), format!("user:{victim}")],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0, "{table} still mentions the victim");
    }
    drop(conn);
    // Raw bytes of the file and its WAL.
    for p in [path.clone(), wal] {
        let bytes = std::fs::read(&p).unwrap_or_default();
        assert!(
            !contains(&bytes, &marker(2)),
            "{} holds the marker",
            p.display()
        );
        assert!(
            !contains(&bytes, "victim-note"),
            "{} holds a victim id",
            p.display()
        );
    }
    drop(e);
    let mut again = Engine::sqlite(&path).unwrap();
    assert_engine_clean(&mut again, &victim);
}

#[test]
fn forget_user_in_memory() {
    let mut e = Engine::in_memory().with_snapshot_every(16);
    let victim = populate(&mut e);
    e.forget_user(&victim).unwrap();
    assert_engine_clean(&mut e, &victim);
    let s = e.store_mut().unwrap();
    let dump = serde_json::to_string(&(s.load_log().unwrap(), s.load_records().unwrap())).unwrap();
    assert!(!dump.contains(&marker(2)));
}

#[test]
fn forget_user_postgres_raw_scan() {
    let Some(url) = pg_url("forget_user_postgres_raw_scan") else {
        return;
    };
    let mut b = PgBackend::new(url.clone(), "forget");
    let store = b.fresh("f");
    let schema = b.schema("f");
    let mut e = Engine::open(store).unwrap().with_snapshot_every(16);
    let victim = populate(&mut e);
    e.forget_user(&victim).unwrap();
    assert_engine_clean(&mut e, &victim);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for (table, cols) in [
        ("ops", "body"),
        ("snapshots", "body"),
        ("records", "namespace || body"),
        ("vectors", "namespace || id"),
    ] {
        let n: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {schema}.{table} WHERE strpos({cols}, $1) > 0 OR strpos({cols}, $2) > 0"),
                &[&marker(2), &format!("user:{victim}")],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{table} still mentions the victim");
    }
    drop(e);
    let mut again = Engine::open(b.reopen("f").unwrap()).unwrap();
    assert_engine_clean(&mut again, &victim);
}

/// A record created, edited (its first text replaced), linked from another
/// record, and a neighbour that stays; returns the record's id.
fn populate_one(e: &mut Engine) -> MemoryId {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut next = 0;
    for t in 1..=20u64 {
        random_batch(e, &mut rng, &mut next, 3, LogicalTime(t), 4);
    }
    let id = MemoryId::new("hard-gone");
    let rec = MemoryRecord::new(
        id.clone(),
        Namespace::user("u1"),
        RecordKind::Custom("memory".into()),
        "first text kumquat-lighthouse",
        LogicalTime(21),
    )
    .with_embedding(Embedding {
        model: "test-v1-8".into(),
        vector: vec![0.25; 8],
    });
    let keep = MemoryRecord::new(
        MemoryId::new("hard-kept"),
        Namespace::user("u1"),
        RecordKind::Custom("memory".into()),
        "kept neighbour",
        LogicalTime(21),
    );
    e.apply(
        "api",
        vec![
            PlannedOp::new(MemoryOp::Create { record: rec }, "add", "t"),
            PlannedOp::new(MemoryOp::Create { record: keep }, "add", "t"),
            PlannedOp::new(
                MemoryOp::Link {
                    from: MemoryId::new("hard-kept"),
                    to: id.clone(),
                    relation: "about".into(),
                    weight: 1.0,
                },
                "link",
                "t",
            ),
        ],
        LogicalTime(21),
    )
    .unwrap();
    e.apply(
        "api",
        vec![PlannedOp::new(
            MemoryOp::UpdateFields {
                id: id.clone(),
                fields: Default::default(),
                text: Some("second text quince-observatory".into()),
                embedding: None,
            },
            "update",
            "t",
        )],
        LogicalTime(22),
    )
    .unwrap();
    id
}

const HARD_TEXTS: [&str; 2] = ["kumquat-lighthouse", "quince-observatory"];

fn assert_record_gone(e: &mut Engine, id: &MemoryId) {
    assert!(e.state().get(id).is_none());
    let kept = e.state().get(&MemoryId::new("hard-kept")).unwrap();
    assert!(kept.links.is_empty(), "link into the record survived");
    let all = serde_json::to_string(&(e.log(), e.state())).unwrap();
    for t in HARD_TEXTS {
        assert!(!all.contains(t), "`{t}` left in the engine");
    }
    assert!(!all.contains(id.as_str()), "id left in the engine");
    // Time travel to when the record lived does not bring it back.
    for at in [21, 22] {
        let then = e.state_at(LogicalTime(at)).unwrap();
        assert!(then.get(id).is_none(), "as of {at} the record is back");
    }
    e.verify().unwrap();
}

#[test]
fn forget_records_sqlite_leaves_no_bytes_of_any_text_of_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let wal = dir.path().join("h.sqlite-wal");
    let mut e = Engine::sqlite(&path).unwrap().with_snapshot_every(8);
    let id = populate_one(&mut e);
    let ops_before = e.log().len();
    let report = e.forget_records(&[id.clone()].into()).unwrap();
    assert_eq!(report.records_removed, 1, "{report:?}");
    assert_eq!(report.ops_dropped, 3, "create, link, update: {report:?}");
    assert_eq!(report.ops_edited, 0, "{report:?}");
    assert_eq!(e.log().len(), ops_before - 3);
    assert_record_gone(&mut e, &id);
    for p in [path.clone(), wal] {
        let bytes = std::fs::read(&p).unwrap_or_default();
        for t in HARD_TEXTS {
            assert!(!contains(&bytes, t), "{} holds `{t}`", p.display());
        }
    }
    drop(e);
    let mut again = Engine::sqlite(&path).unwrap();
    assert_record_gone(&mut again, &id);
}

#[test]
fn forget_records_in_memory() {
    let mut e = Engine::in_memory().with_snapshot_every(8);
    let id = populate_one(&mut e);
    e.forget_records(&[id.clone()].into()).unwrap();
    assert_record_gone(&mut e, &id);
    let mut eph = Engine::ephemeral();
    let id = populate_one(&mut eph);
    eph.forget_records(&[id.clone()].into()).unwrap();
    assert!(eph.state().get(&id).is_none());
    let all = serde_json::to_string(eph.log()).unwrap();
    assert!(!all.contains(HARD_TEXTS[0]) && !all.contains(HARD_TEXTS[1]));
}

#[test]
fn forget_records_postgres_raw_scan() {
    let Some(url) = pg_url("forget_records_postgres_raw_scan") else {
        return;
    };
    let mut b = PgBackend::new(url.clone(), "forget");
    let store = b.fresh("h");
    let schema = b.schema("h");
    let mut e = Engine::open(store).unwrap().with_snapshot_every(8);
    let id = populate_one(&mut e);
    e.forget_records(&[id.clone()].into()).unwrap();
    assert_record_gone(&mut e, &id);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for (table, cols) in [
        ("ops", "body"),
        ("snapshots", "body"),
        ("records", "id || body"),
        ("vectors", "id"),
    ] {
        for t in HARD_TEXTS.iter().chain(&[id.as_str()]) {
            let n: i64 = client
                .query_one(
                    &format!("SELECT count(*) FROM {schema}.{table} WHERE strpos({cols}, $1) > 0"),
                    &[t],
                )
                .unwrap()
                .get(0);
            assert_eq!(n, 0, "{table} still holds `{t}`");
        }
    }
    drop(e);
    let mut again = Engine::open(b.reopen("h").unwrap()).unwrap();
    assert_record_gone(&mut again, &id);
}
