//! One conformance suite for every `MemoryStore`: in-memory, SQLite and
//! PostgreSQL (when `EVOMEM_TEST_PG_URL` is set; required when `CI` is set).

use crate::common::*;
use evomem_core::*;
use evomem_store::{Commit, Engine, MemoryStore, StoreError, FORMAT_VERSION};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

struct Checks {
    backend: String,
    n: usize,
}

impl Checks {
    fn ok(&mut self, cond: bool, what: &str) {
        assert!(cond, "[{}] conformance check failed: {what}", self.backend);
        self.n += 1;
    }
}

fn rec(id: &str, ns: Namespace, text: &str, at: u64) -> MemoryRecord {
    MemoryRecord::new(
        MemoryId::new(id),
        ns,
        RecordKind::Atom,
        text,
        LogicalTime(at),
    )
}

fn create(r: MemoryRecord) -> PlannedOp {
    PlannedOp::new(MemoryOp::Create { record: r }, "extract", "test")
}

/// Run every check against `b`; returns how many ran.
pub fn run_suite(b: &mut dyn Backend) -> usize {
    let mut c = Checks {
        backend: b.name(),
        n: 0,
    };
    check_empty_store(&mut c, b);
    check_every_op_kind(&mut c, b);
    check_gap_refused(&mut c, b);
    for (key, every) in [("tt_snap", 4u64), ("tt_nosnap", 0)] {
        check_random_batches(&mut c, b, key, every);
    }
    check_forget_user(&mut c, b);
    check_staged_swap(&mut c, b);
    check_write_keys(&mut c, b);
    c.n
}

/// 8. Write keys (`Commit::keys`): stored with their commit and read back
///    (after a reopen too); a commit whose key was stored before is refused
///    whole (`DuplicateKey`), its ops and records not stored; two commits
///    of one key in one transaction are refused too.
fn check_write_keys(c: &mut Checks, b: &mut dyn Backend) {
    use evomem_store::WriteKey;
    let mut e = Engine::open(b.fresh("keys")).unwrap();
    let key = |k: &str, d: u8| WriteKey {
        key: k.to_string(),
        request: [d; 32],
    };
    let handle = e.store_handle().unwrap();
    let batch = |id: &str, at: u64| evomem_store::Batch {
        policy: "api".into(),
        ops: vec![create(rec(id, Namespace::user("u"), id, at))],
        at: LogicalTime(at),
    };
    c.ok(
        handle.committed_key("k1").unwrap().is_none(),
        "no key before a commit",
    );
    let mut st = e.stage_batches(vec![batch("m1", 1)]).unwrap();
    st.set_keys(vec![key("k1", 7)]);
    handle.commit(&mut st, None).unwrap();
    e.install(st).unwrap();
    c.ok(
        handle.committed_key("k1").unwrap() == Some([7; 32]),
        "a committed key reads back with its request digest",
    );
    let mut again = e.stage_batches(vec![batch("m2", 2)]).unwrap();
    again.set_keys(vec![key("k2", 1), key("k1", 7)]);
    let err = handle.commit(&mut again, None);
    c.ok(
        matches!(&err, Err(StoreError::DuplicateKey { key, .. }) if key == "k1"),
        "a key committed before refuses the commit",
    );
    if let Some(mut store) = b.reopen("keys") {
        c.ok(
            store.last_seq().unwrap() == 1,
            "a refused commit stores no op",
        );
        c.ok(
            store.load_records().unwrap().len() == 1,
            "a refused commit stores no record",
        );
        c.ok(
            store.committed_key("k1").unwrap() == Some([7; 32]),
            "a key survives a reopen",
        );
        c.ok(
            store.committed_key("k2").unwrap().is_none(),
            "a refused commit's other keys are not stored",
        );
    }
    c.ok(
        handle.committed_key("k2").unwrap().is_none(),
        "a refused commit's other keys are not stored (same connection)",
    );
    let mut twice = e.stage_batches(vec![batch("m3", 3)]).unwrap();
    twice.set_keys(vec![key("k3", 1), key("k3", 1)]);
    c.ok(
        matches!(
            handle.commit(&mut twice, None),
            Err(StoreError::DuplicateKey { .. })
        ),
        "one key twice in a commit is refused",
    );
    c.ok(
        handle.committed_key("k3").unwrap().is_none(),
        "and stores nothing",
    );
}

/// 1. An empty store.
fn check_empty_store(c: &mut Checks, b: &mut dyn Backend) {
    let mut s = b.fresh("empty");
    c.ok(s.format_version() == FORMAT_VERSION, "format version");
    c.ok(s.last_seq().unwrap() == 0, "empty last_seq");
    c.ok(s.load_log().unwrap().is_empty(), "empty log");
    c.ok(s.load_records().unwrap().is_empty(), "no records");
    c.ok(s.snapshot_seqs().unwrap().is_empty(), "no snapshots");
    c.ok(
        s.state_at(LogicalTime(5)).unwrap().is_empty(),
        "empty state_at",
    );
    c.ok(
        s.latest_snapshot(10).unwrap().is_none(),
        "no latest snapshot",
    );
}

/// 2. Every op kind, exact round trip of floats and vectors, rejection
///    keeps the applied prefix, reopen gives the same engine.
fn check_every_op_kind(c: &mut Checks, b: &mut dyn Backend) {
    let store = b.fresh("ops");
    let mut e = Engine::open(store).unwrap().with_snapshot_every(3);
    let v = vec![0.6f32, -0.8, 1.0e-7, 0.333_333_34];
    apply_creates(&mut e, &v);
    apply_evolve_ops(&mut e);
    apply_merge_ops(&mut e);
    c.ok(e.log().len() == 12, "12 ops logged");
    c.ok(e.state().len() == 3, "3 live records");
    e.verify().unwrap();
    c.ok(true, "verify after every op kind");
    check_rejected_batch_undone(c, &mut e);
    let live = e.state().clone();
    let log = e.log().to_vec();
    let a = live.get(&MemoryId::new("a")).unwrap();
    c.ok(
        a.embedding
            .as_ref()
            .unwrap()
            .vector
            .iter()
            .map(|x| x.to_bits())
            .eq(v.iter().map(|x| x.to_bits())),
        "vector bits kept",
    );
    drop(e);
    if let Some(s) = b.reopen("ops") {
        check_reopened_ops(c, s, &log, &live, a);
    }
}

/// Batch at time 1: create `a` (float strength, embedding `v`, nested
/// field), `b` linked to `a`, shared `c` and user 2's `d`.
fn apply_creates(e: &mut Engine, v: &[f32]) {
    let a = rec("a", Namespace::user("1"), "a", 1)
        .with_strength(0.1 + 0.2)
        .with_embedding(Embedding {
            model: "m".into(),
            vector: v.to_vec(),
        })
        .with_field("nested", serde_json::json!({"x": [1, 2.5, "s"], "y": null}));
    let mut bb = rec("b", Namespace::user("1"), "b", 1);
    bb.links.push(Link {
        target: MemoryId::new("a"),
        relation: "near".into(),
        weight: 0.25,
    });
    let cc = rec("c", Namespace::shared(), "c", 1);
    let d = rec("d", Namespace::user("2"), "d", 1);
    e.apply(
        "p",
        vec![create(a), create(bb), create(cc), create(d)],
        LogicalTime(1),
    )
    .unwrap();
}

/// Batch at time 2: update fields, link, adjust strength, set utility and
/// set status.
fn apply_evolve_ops(e: &mut Engine) {
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("kw".to_string(), serde_json::json!(["x"]));
    let ops = vec![
        MemoryOp::UpdateFields {
            id: MemoryId::new("a"),
            fields,
            text: None,
            embedding: None,
        },
        MemoryOp::Link {
            from: MemoryId::new("c"),
            to: MemoryId::new("a"),
            relation: "cites".into(),
            weight: 0.5,
        },
        MemoryOp::AdjustStrength {
            id: MemoryId::new("a"),
            delta: 1e-17,
            evidence_delta: 2,
        },
        MemoryOp::SetUtility {
            id: MemoryId::new("b"),
            value: std::f64::consts::PI,
        },
        MemoryOp::SetStatus {
            id: MemoryId::new("b"),
            status: RecordStatus::Provisional,
        },
    ];
    e.apply(
        "p",
        ops.into_iter()
            .map(|o| PlannedOp::new(o, "evolve", "t"))
            .collect(),
        LogicalTime(2),
    )
    .unwrap();
}

/// Batch at time 3: replace, unlink and merge `b` into `a`.
fn apply_merge_ops(e: &mut Engine) {
    let ops = vec![
        MemoryOp::Replace {
            id: MemoryId::new("b"),
            record: rec("ignored", Namespace::shared(), "b2", 3),
        },
        MemoryOp::Unlink {
            from: MemoryId::new("c"),
            to: MemoryId::new("a"),
        },
        MemoryOp::Merge {
            into: MemoryId::new("a"),
            sources: vec![MemoryId::new("b")],
            text: Some("merged".into()),
            strength: Some(0.5),
        },
    ];
    e.apply(
        "p",
        ops.into_iter()
            .map(|o| PlannedOp::new(o, "merge", "t"))
            .collect(),
        LogicalTime(3),
    )
    .unwrap();
}

/// A batch whose third op is rejected is undone whole: the first two
/// are neither kept in memory nor logged nor stored.
fn check_rejected_batch_undone(c: &mut Checks, e: &mut Engine) {
    let before = e.state().clone();
    let log_before = e.log().len();
    let err = e
        .apply(
            "p",
            vec![
                create(rec("e", Namespace::user("1"), "e", 4)),
                PlannedOp::new(
                    MemoryOp::Forget {
                        id: MemoryId::new("d"),
                    },
                    "forget",
                    "t",
                ),
                PlannedOp::new(
                    MemoryOp::Forget {
                        id: MemoryId::new("zz"),
                    },
                    "forget",
                    "t",
                ),
            ],
            LogicalTime(4),
        )
        .unwrap_err();
    c.ok(
        matches!(err, StoreError::Rejected { index: 2, .. }),
        "third op rejected",
    );
    c.ok(
        e.log().len() == log_before && log_before == 12,
        "no op of a rejected batch logged",
    );
    c.ok(
        e.state() == &before,
        "a rejected batch leaves the state as it was",
    );
    e.verify().unwrap();
    c.ok(true, "verify after a rejected batch");
}

/// The reopened "ops" store gives the same log, state, float bits and
/// snapshots, and time travels like the live engine did.
fn check_reopened_ops(
    c: &mut Checks,
    s: Box<dyn MemoryStore>,
    log: &[LoggedOp],
    live: &MemoryState,
    a: &MemoryRecord,
) {
    let mut e2 = Engine::open(s).unwrap();
    c.ok(e2.log() == log, "reopened log equal");
    c.ok(e2.state() == live, "reopened state equal");
    let a2 = e2.state().get(&MemoryId::new("a")).unwrap();
    c.ok(
        a2.strength.to_bits() == a.strength.to_bits(),
        "f64 bits kept",
    );
    e2.verify().unwrap();
    c.ok(true, "verify after reopen");
    c.ok(
        !e2.store_mut().unwrap().snapshot_seqs().unwrap().is_empty(),
        "snapshots stored",
    );
    // Time travel on the reopened store.
    let at1 = e2.state_at(LogicalTime(1)).unwrap();
    c.ok(at1.len() == 4, "state_at(1) has the 4 creates");
    c.ok(
        e2.state_at(LogicalTime(0)).unwrap().is_empty(),
        "state_at(0) empty",
    );
    c.ok(
        e2.state_at(LogicalTime(99)).unwrap() == *live,
        "state_at(99) live",
    );
}

/// 3. Commits must continue the log: a gap is refused and writes nothing.
fn check_gap_refused(c: &mut Checks, b: &mut dyn Backend) {
    let mut s = b.fresh("gap");
    let op = LoggedOp {
        seq: 5,
        op: MemoryOp::Forget {
            id: MemoryId::new("x"),
        },
        provenance: Provenance {
            policy: "p".into(),
            label: "l".into(),
            reason: "r".into(),
            sources: vec![],
            logical_time: LogicalTime(0),
            wall_time_ms: 0,
        },
    };
    let commit = Commit {
        ops: std::slice::from_ref(&op),
        upserts: &[],
        deletes: &[],
        snapshot: None,
        keys: &[],
    };
    let err = s.commit(&commit);
    c.ok(
        matches!(err, Err(StoreError::Corrupt { .. })),
        "gap refused",
    );
    c.ok(
        s.last_seq().unwrap() == 0,
        "nothing written after a refused commit",
    );
}

/// 4. Random batches: state_at(t) equals the state captured live at t,
///    with and without snapshots (`every`); reopen equals live.
fn check_random_batches(c: &mut Checks, b: &mut dyn Backend, key: &str, every: u64) {
    let store = b.fresh(key);
    let mut e = Engine::open(store).unwrap().with_snapshot_every(every);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut next = 0;
    let mut live = vec![MemoryState::new()];
    for t in 1..=25u64 {
        random_batch(
            &mut e,
            &mut rng,
            &mut next,
            4,
            LogicalTime(t),
            1 + (t as usize % 4),
        );
        live.push(e.state().clone());
    }
    for (t, want) in live.iter().enumerate() {
        let got = e.state_at(LogicalTime(t as u64)).unwrap();
        c.ok(&got == want, &format!("{key}: state_at({t}) equals live"));
    }
    e.verify().unwrap();
    c.ok(true, "verify after random batches");
    let snaps = e.store_mut().unwrap().snapshot_seqs().unwrap();
    c.ok(
        (every == 0) == snaps.is_empty(),
        "snapshots follow the setting",
    );
    // Isolation over the store's state.
    for u in 0..4 {
        let ns = [Namespace::user(&format!("u{u}"))];
        c.ok(
            e.recall_scan(&ns, None)
                .iter()
                .all(|r| r.namespace == ns[0]),
            "recall_scan stays in its namespace",
        );
    }
    let state = e.state().clone();
    drop(e);
    if let Some(s) = b.reopen(key) {
        let mut e2 = Engine::open(s).unwrap();
        c.ok(
            e2.state() == &state,
            "reopen equals live after random batches",
        );
        e2.verify().unwrap();
    }
}

/// 5. forget_user leaves nothing of the user in log, snapshots, records.
fn check_forget_user(c: &mut Checks, b: &mut dyn Backend) {
    let store = b.fresh("forget");
    let mut e = Engine::open(store).unwrap().with_snapshot_every(4);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut next = 0;
    for t in 1..=30u64 {
        random_batch(&mut e, &mut rng, &mut next, 3, LogicalTime(t), 3);
    }
    let others_before: Vec<MemoryId> = e
        .state()
        .iter_all()
        .filter(|r| r.namespace != Namespace::user("u1"))
        .map(|r| r.id.clone())
        .collect();
    let report = e.forget_user("u1").unwrap();
    c.ok(report.ops_after < report.ops_before, "forget dropped ops");
    check_user_gone_from_store(c, e.store_mut().unwrap(), &marker(1));
    e.verify().unwrap();
    c.ok(true, "verify after forget");
    let kept = others_before
        .iter()
        .filter(|id| e.state().get(id).is_some())
        .count();
    c.ok(kept == others_before.len(), "other users' records kept");
    drop(e);
    if let Some(s) = b.reopen("forget") {
        let mut e2 = Engine::open(s).unwrap();
        e2.verify().unwrap();
        c.ok(
            e2.state().scan(&[Namespace::user("u1")]).next().is_none(),
            "forgotten after reopen",
        );
    }
}

/// A vector of `m`'s model for `text` (two dimensions: the stores keep
/// whatever they are given).
fn vec_of(text: &str) -> Option<Vec<f32>> {
    Some(vec![text.len() as f32, 0.5])
}

/// Write `pieces` of a staged rewrite to `stage`, with their snapshots.
fn commit_pieces(stage: &mut dyn MemoryStore, pieces: &[evomem_store::reembed::Piece]) {
    for p in pieces {
        stage
            .commit(&Commit {
                ops: &p.ops,
                upserts: &[],
                deletes: &[],
                snapshot: p.snapshot.as_ref().map(|s| (s.seq, s.at, &s.state)),
                keys: &[],
            })
            .unwrap();
    }
}

/// Make `stage`'s records `state`'s: every record upserted, and those it
/// holds that `state` does not deleted.
fn commit_records(stage: &mut dyn MemoryStore, state: &MemoryState) {
    let upserts: Vec<&MemoryRecord> = state.iter_all().collect();
    let deletes: Vec<MemoryId> = stage
        .load_records()
        .unwrap()
        .into_iter()
        .filter(|r| state.get(&r.id).is_none())
        .map(|r| r.id)
        .collect();
    stage
        .commit(&Commit {
            ops: &[],
            upserts: &upserts,
            deletes: &deletes,
            snapshot: None,
            keys: &[],
        })
        .unwrap();
}

/// 6. A staged swap (a re-embed): the log rewritten up to a point into a
///    staging area while the store takes more commits, which changes
///    nothing of the store; the swap is refused while either log ends
///    elsewhere, and once the ops after the point are staged too it makes
///    the store's log, records and snapshots the staged ones in one step,
///    also after a reopen. A second staging area after it (the names a
///    swap leaves must not clash) and one given up (a crash) leave the
///    store whole once cleared.
fn check_staged_swap(c: &mut Checks, b: &mut dyn Backend) {
    use evomem_store::reembed::{reembedded, Reembedder};
    let store = b.fresh("staged");
    let mut e = Engine::open(store).unwrap().with_snapshot_every(4);
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let mut next = 0;
    for t in 1..=20u64 {
        random_batch(&mut e, &mut rng, &mut next, 3, LogicalTime(t), 3);
    }
    let point = e.log().len();
    let mut stage = e.store_mut().unwrap().staging().unwrap();
    let mut r = Reembedder::new("m2", 4);
    let pieces = r.push(&e.log()[..point], vec_of).unwrap();
    commit_pieces(stage.as_mut(), &pieces);
    commit_records(stage.as_mut(), r.state());
    // The store goes on taking commits; nothing staged shows in it.
    for t in 21..=24u64 {
        random_batch(&mut e, &mut rng, &mut next, 3, LogicalTime(t), 3);
    }
    e.verify().unwrap();
    c.ok(true, "a staging area changes nothing of the store");
    let last = e.log().len() as u64;
    c.ok(last > point as u64, "ops committed after the staging point");
    let refused = |r: Result<(), StoreError>| matches!(r, Err(StoreError::Conflict { .. }));
    // The staging area ends at the point, not at the store's last op.
    c.ok(
        refused(e.store_mut().unwrap().swap_in_staged(stage, last)),
        "a swap of an incomplete staging area is refused",
    );
    e.verify().unwrap();
    c.ok(true, "a refused swap changes nothing");
    // Again, this time with the ops after the point.
    let mut stage = e.store_mut().unwrap().staging().unwrap();
    let mut r = Reembedder::new("m2", 4);
    commit_pieces(stage.as_mut(), &r.push(&e.log()[..point], vec_of).unwrap());
    commit_records(stage.as_mut(), r.state());
    let tail = r.push(&e.log()[point..], vec_of).unwrap();
    commit_pieces(stage.as_mut(), &tail);
    commit_records(stage.as_mut(), r.state());
    c.ok(
        refused(e.store_mut().unwrap().swap_in_staged(stage, last - 1)),
        "a swap expecting another end of the log is refused",
    );
    e.verify().unwrap();
    let mut stage = e.store_mut().unwrap().staging().unwrap();
    let mut r = Reembedder::new("m2", 4);
    commit_pieces(stage.as_mut(), &r.push(&e.log()[..point], vec_of).unwrap());
    commit_records(stage.as_mut(), r.state());
    commit_pieces(stage.as_mut(), &r.push(&e.log()[point..], vec_of).unwrap());
    commit_records(stage.as_mut(), r.state());
    let whole = reembedded(e.log(), 4, "m2", vec_of).unwrap();
    let last_snapshot = r.last_snapshot_seq();
    e.store_mut().unwrap().swap_in_staged(stage, last).unwrap();
    {
        let s = e.store_mut().unwrap();
        c.ok(
            s.load_log().unwrap() == whole.log,
            "the swapped log is the staged one",
        );
        let live: Vec<MemoryRecord> = whole.state.iter_all().cloned().collect();
        c.ok(
            s.load_records().unwrap() == live,
            "the swapped records are the staged ones",
        );
        let seqs: Vec<u64> = whole.snapshots.iter().map(|s| s.seq).collect();
        c.ok(
            s.snapshot_seqs().unwrap() == seqs,
            "the swapped snapshots are the staged ones",
        );
        for snap in &whole.snapshots {
            c.ok(
                s.latest_snapshot(snap.seq).unwrap().as_ref() == Some(snap),
                "a swapped snapshot reads back",
            );
        }
        s.clear_staging().unwrap();
    }
    drop(e.adopt_rewrite(whole.log.clone(), whole.state.clone(), last_snapshot));
    e.verify().unwrap();
    c.ok(true, "verify after the swap and clear_staging");
    // The store keeps taking commits after the swap.
    random_batch(&mut e, &mut rng, &mut next, 3, LogicalTime(25), 3);
    e.verify().unwrap();
    // A second staged swap on the same store.
    let mut stage = e.store_mut().unwrap().staging().unwrap();
    let mut r = Reembedder::new("m3", 4);
    commit_pieces(stage.as_mut(), &r.push(e.log(), vec_of).unwrap());
    commit_records(stage.as_mut(), r.state());
    let last = e.log().len() as u64;
    e.store_mut().unwrap().swap_in_staged(stage, last).unwrap();
    let again = reembedded(e.log(), 4, "m3", vec_of).unwrap();
    drop(e.adopt_rewrite(
        again.log.clone(),
        again.state.clone(),
        r.last_snapshot_seq(),
    ));
    e.verify().unwrap();
    c.ok(true, "a second staged swap");
    // A staging area given up (a crash before the swap) is cleared.
    let mut stage = e.store_mut().unwrap().staging().unwrap();
    commit_pieces(
        stage.as_mut(),
        &Reembedder::new("m4", 4).push(e.log(), vec_of).unwrap(),
    );
    drop(stage);
    e.store_mut().unwrap().clear_staging().unwrap();
    e.verify().unwrap();
    c.ok(true, "a staging area given up leaves the store whole");
    drop(e);
    if let Some(s) = b.reopen("staged") {
        let mut e2 = Engine::open(s).unwrap();
        e2.verify().unwrap();
        c.ok(e2.log() == again.log, "the swapped log after a reopen");
        c.ok(
            e2.state()
                .iter_all()
                .filter_map(|r| r.embedding.as_ref())
                .all(|m| m.model == "m3"),
            "every vector the last swap's after a reopen",
        );
    }
}

/// Neither user u1's marker `m` nor its namespace is left in the stored
/// log, records or any snapshot.
fn check_user_gone_from_store(c: &mut Checks, s: &mut dyn MemoryStore, m: &str) {
    let log_json = serde_json::to_string(&s.load_log().unwrap()).unwrap();
    c.ok(
        !log_json.contains(m) && !log_json.contains("user:u1"),
        "log clean",
    );
    let recs = serde_json::to_string(&s.load_records().unwrap()).unwrap();
    c.ok(
        !recs.contains(m) && !recs.contains("user:u1"),
        "records clean",
    );
    for seq in s.snapshot_seqs().unwrap() {
        let snap = s.latest_snapshot(seq).unwrap().unwrap();
        let j = serde_json::to_string(&snap.state).unwrap();
        c.ok(!j.contains(m) && !j.contains("user:u1"), "snapshot clean");
    }
}

#[test]
fn conformance_memory() {
    let n = run_suite(&mut MemBackend);
    eprintln!("memory conformance: ran {n} checks");
}

#[test]
fn conformance_sqlite() {
    let mut b = SqliteBackend::new();
    let n = run_suite(&mut b);
    eprintln!("sqlite conformance: ran {n} checks");
}

#[test]
fn conformance_postgres() {
    let Some(url) = pg_url("conformance_postgres") else {
        return;
    };
    let mut b = PgBackend::new(url, "conf");
    let n = run_suite(&mut b);
    let where_ = evomem_store::PostgresStore::connect(&b.url, &b.schema("ops"))
        .map(|s| s.location())
        .unwrap_or_default();
    let line = format!("postgres conformance: ran {n} checks against {where_}");
    println!("{line}");
    eprintln!("{line}");
    let marker = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("postgres-conformance.txt");
    std::fs::write(&marker, format!("{line}\n")).unwrap();
}

/// Two engines on one PostgreSQL schema (two service instances): a commit
/// that lost the race is a `Conflict`, stores nothing, and goes through
/// after `sync`. Any other error is not a conflict (no blind retries).
#[test]
fn a_commit_that_lost_a_race_is_a_conflict_and_succeeds_after_sync() {
    let Some(url) = pg_url("a_commit_that_lost_a_race") else {
        return;
    };
    let schema = "evomem_race_test";
    evomem_store::PostgresStore::drop_schema(&url, schema).unwrap();
    let mut a = Engine::postgres_in(&url, schema).unwrap();
    let mut b = Engine::postgres_in(&url, schema).unwrap();
    a.apply(
        "p",
        vec![create(rec("a1", Namespace::user("1"), "a", 1))],
        LogicalTime(1),
    )
    .unwrap();
    let err = b
        .apply(
            "p",
            vec![create(rec("b1", Namespace::user("1"), "b", 2))],
            LogicalTime(2),
        )
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(
        b.state().get(&MemoryId::new("b1")).is_none(),
        "rolled back in memory"
    );
    b.sync().unwrap();
    b.apply(
        "p",
        vec![create(rec("b1", Namespace::user("1"), "b", 2))],
        LogicalTime(2),
    )
    .unwrap();
    a.sync().unwrap();
    assert_eq!(a.log(), b.log());
    a.verify().unwrap();
    // A rejection is final, not a conflict.
    let rejected = a
        .apply(
            "p",
            vec![PlannedOp::new(
                MemoryOp::Forget {
                    id: MemoryId::new("zz"),
                },
                "forget",
                "t",
            )],
            LogicalTime(3),
        )
        .unwrap_err();
    assert!(!rejected.is_conflict(), "{rejected}");
    drop((a, b));
    evomem_store::PostgresStore::drop_schema(&url, schema).unwrap();
}
