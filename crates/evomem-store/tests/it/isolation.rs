//! Isolation property test: with many users and random ops (including links
//! and merges across users), no recall made for one user ever returns
//! another user's private (`user:`) record, unless that namespace is named.
//! Shared and collaborative namespaces appear only when they are named.

use crate::common::*;
use evomem_core::*;
use evomem_store::Engine;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicUsize, Ordering};

static CASES: AtomicUsize = AtomicUsize::new(0);
static RECALLS: AtomicUsize = AtomicUsize::new(0);
static LEAKS: AtomicUsize = AtomicUsize::new(0);

fn check_engine(e: &Engine, users: usize, rng: &mut ChaCha8Rng) {
    for u in 0..users {
        let mine = Namespace::user(&format!("u{u}"));
        let mut named = vec![mine.clone()];
        if rng.gen_bool(0.5) {
            named.push(Namespace::shared());
        }
        if rng.gen_bool(0.3) {
            named.push(Namespace::new("collab"));
        }
        if rng.gen_bool(0.3) {
            named.push(Namespace::item(&format!("i{}", rng.gen_range(0..5))));
        }
        let allowed = |r: &MemoryRecord| named.contains(&r.namespace);
        let mut seen: Vec<&MemoryRecord> = Vec::new();
        let kinds = [
            None,
            Some(RecordKind::Atom),
            Some(RecordKind::PreferenceChunk),
        ];
        for k in &kinds {
            seen.extend(e.recall_scan(&named, k.as_ref()));
        }
        let q: Vec<f32> = (0..8).map(|i| if i == u % 8 { 1.0 } else { 0.0 }).collect();
        seen.extend(e.recall_nearest(&named, &q, 10).into_iter().map(|(_, r)| r));
        for r in e.state().iter_all() {
            if let Some(x) = e.recall_get(&r.id, &named) {
                seen.push(x);
            }
            seen.extend(e.recall_linked(&r.id, &named));
        }
        RECALLS.fetch_add(kinds.len() + 1 + 2 * e.state().len(), Ordering::Relaxed);
        for r in seen {
            if !allowed(r) || (r.namespace.is_user_private() && r.namespace != mine) {
                LEAKS.fetch_add(1, Ordering::Relaxed);
                panic!(
                    "user u{u} (named {named:?}) saw {} in {}",
                    r.id, r.namespace
                );
            }
        }
    }
}

#[test]
fn no_recall_leaks_another_users_private_record() {
    let cases = 64;
    crate::timetravel::runner(cases)
        .run(
            &(any::<u64>(), 2usize..24, 5usize..40),
            |(seed, users, batches)| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let mut e = Engine::in_memory().with_snapshot_every(5);
                let mut next = 0;
                for t in 1..=batches as u64 {
                    random_batch(&mut e, &mut rng, &mut next, users, LogicalTime(t), 4);
                }
                check_engine(&e, users, &mut rng);
                // The same holds for a state rebuilt by time travel.
                let mid = e.state_at(LogicalTime(batches as u64 / 2)).unwrap();
                let mut past = Engine::in_memory();
                let ops = mid
                    .iter_all()
                    .map(|r| PlannedOp::new(MemoryOp::Create { record: r.clone() }, "copy", ""))
                    .collect();
                past.apply("t", ops, LogicalTime(0)).unwrap();
                check_engine(&past, users, &mut rng);
                CASES.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )
        .unwrap();
    eprintln!(
        "isolation: {} proptest cases, {} recalls checked, {} leaks",
        CASES.load(Ordering::Relaxed),
        RECALLS.load(Ordering::Relaxed),
        LEAKS.load(Ordering::Relaxed)
    );
    assert_eq!(LEAKS.load(Ordering::Relaxed), 0);
}

/// Same property on SQLite stores reopened from disk (state rebuilt from a
/// snapshot plus the log tail), a fixed number of seeded cases.
#[test]
fn no_leaks_after_sqlite_reopen() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..6u64 {
        let path = dir.path().join(format!("iso{seed}.sqlite"));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let users = 10;
        {
            let mut e = Engine::sqlite(&path).unwrap().with_snapshot_every(7);
            let mut next = 0;
            for t in 1..=20u64 {
                random_batch(&mut e, &mut rng, &mut next, users, LogicalTime(t), 4);
            }
        }
        let e = Engine::sqlite(&path).unwrap();
        check_engine(&e, users, &mut rng);
    }
}
