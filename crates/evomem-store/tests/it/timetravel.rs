//! Property tests of the op log: replaying it gives exactly the live state,
//! and `state_at(t)` equals the state captured live at `t`, for the
//! in-memory and SQLite stores, with snapshots every few ops.

use crate::common::*;
use evomem_core::*;
use evomem_store::Engine;
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn check(engine: &mut Engine, seed: u64, batches: usize, reopen: Option<&std::path::Path>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut next = 0;
    let mut live = vec![MemoryState::new()];
    for t in 1..=batches as u64 {
        let len = 1 + (seed as usize + t as usize) % 5;
        random_batch(engine, &mut rng, &mut next, 5, LogicalTime(t), len);
        live.push(engine.state().clone());
    }
    let mut replayed = MemoryState::new();
    for o in engine.log() {
        replayed.apply(&o.op, o.provenance.logical_time).unwrap();
    }
    assert_eq!(&replayed, engine.state(), "replay != live");
    for (t, want) in live.iter().enumerate() {
        let got = engine.state_at(LogicalTime(t as u64)).unwrap();
        assert_eq!(&got, want, "state_at({t}) != live state at {t}");
    }
    engine.verify().unwrap();
    if let Some(path) = reopen {
        let mut again = Engine::sqlite(path).unwrap();
        assert_eq!(again.state(), engine.state(), "reopened state != live");
        assert_eq!(again.log(), engine.log(), "reopened log != live");
        let mid = batches as u64 / 2;
        assert_eq!(
            &again.state_at(LogicalTime(mid)).unwrap(),
            &live[mid as usize]
        );
    }
}

/// A proptest runner with a fixed seed (reproducible runs).
pub fn runner(cases: u32) -> TestRunner {
    TestRunner::new_with_rng(
        ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    )
}

#[test]
fn replay_and_state_at_equal_live_in_memory() {
    let cases = 48;
    runner(cases)
        .run(
            &(any::<u64>(), 1usize..40, 0u64..6),
            |(seed, batches, every)| {
                let mut e = Engine::in_memory().with_snapshot_every(every);
                check(&mut e, seed, batches, None);
                Ok(())
            },
        )
        .unwrap();
    eprintln!("timetravel (memory): {cases} proptest cases passed");
}

#[test]
fn replay_and_state_at_equal_live_ephemeral() {
    let cases = 48;
    runner(cases)
        .run(&(any::<u64>(), 1usize..40), |(seed, batches)| {
            let mut e = Engine::ephemeral();
            check(&mut e, seed, batches, None);
            Ok(())
        })
        .unwrap();
    eprintln!("timetravel (ephemeral): {cases} proptest cases passed");
}

/// The ephemeral engine (no store) applies, logs, rejects, time-travels and
/// forgets exactly like an engine over the in-memory store, and persists
/// nothing.
#[test]
fn ephemeral_engine_matches_the_stored_one() {
    for seed in 0..16u64 {
        let mut a = Engine::in_memory();
        let mut b = Engine::ephemeral();
        let (mut ra, mut rb) = (
            ChaCha8Rng::seed_from_u64(seed),
            ChaCha8Rng::seed_from_u64(seed),
        );
        let (mut na, mut nb) = (0, 0);
        for t in 1..=30u64 {
            random_batch(&mut a, &mut ra, &mut na, 4, LogicalTime(t), 3);
            random_batch(&mut b, &mut rb, &mut nb, 4, LogicalTime(t), 3);
            assert_eq!(a.state(), b.state(), "seed {seed} t {t}");
            assert_eq!(a.log(), b.log(), "seed {seed} t {t}");
        }
        for t in [0u64, 7, 15, 30] {
            assert_eq!(
                a.state_at(LogicalTime(t)).unwrap(),
                b.state_at(LogicalTime(t)).unwrap()
            );
        }
        let fa = a.forget_user("u1").unwrap();
        let fb = b.forget_user("u1").unwrap();
        assert_eq!(fa, fb, "seed {seed}");
        assert_eq!(a.state(), b.state());
        assert_eq!(a.log(), b.log());
        b.verify().unwrap();
        assert_eq!(b.location(), "memory (ephemeral)");
        assert!(b.store_mut().is_none());
        let log = b.log().to_vec();
        assert_eq!(b.into_log(), log);
    }
}

#[test]
fn replay_and_state_at_equal_live_sqlite() {
    let cases = 12;
    runner(cases)
        .run(
            &(any::<u64>(), 1usize..30, 0u64..6),
            |(seed, batches, every)| {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("tt.sqlite");
                let mut e = Engine::sqlite(&path).unwrap().with_snapshot_every(every);
                check(&mut e, seed, batches, Some(&path));
                Ok(())
            },
        )
        .unwrap();
    eprintln!("timetravel (sqlite): {cases} proptest cases passed");
}

/// Snapshots bound the replay: with an interval of 8, `state_at` never
/// replays more than max(8, live records) ops after the latest snapshot.
#[test]
fn snapshots_bound_replay_length() {
    let mut e = Engine::in_memory().with_snapshot_every(8);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut next = 0;
    for t in 1..=200u64 {
        random_batch(&mut e, &mut rng, &mut next, 3, LogicalTime(t), 2);
    }
    let n = e.log().len() as u64;
    let records = e.state().len() as u64;
    let snaps = e.store_mut().unwrap().snapshot_seqs().unwrap();
    assert!(snaps.len() >= 3, "snapshots: {snaps:?}");
    let last = *snaps.last().unwrap();
    // A batch may overshoot the interval by its own length (2 here).
    assert!(
        n - last <= 8u64.max(records) + 2,
        "n {n}, last snapshot {last}, records {records}"
    );
}
