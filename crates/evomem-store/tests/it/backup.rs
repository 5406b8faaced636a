//! `SqliteStore::copy_online`: a backup taken while another thread keeps
//! committing is a consistent store (its log replays to its records) whose
//! log is a prefix of the live log; restoring it (a copy back) gives the
//! same store.

use crate::common::*;
use evomem_core::*;
use evomem_store::{Engine, SqliteStore};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn a_backup_under_concurrent_writes_is_a_consistent_prefix_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.sqlite");
    let mut e = Engine::sqlite(&live).unwrap().with_snapshot_every(32);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut next = 0;
    for t in 1..=50u64 {
        random_batch(&mut e, &mut rng, &mut next, 4, LogicalTime(t), 6);
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Ops acknowledged (committed) so far.
    let acked = Arc::new(AtomicUsize::new(e.log().len()));
    let writer = {
        let stop = stop.clone();
        let acked = acked.clone();
        std::thread::spawn(move || {
            let mut t = 51u64;
            while !stop.load(Ordering::SeqCst) {
                random_batch(&mut e, &mut rng, &mut next, 4, LogicalTime(t), 6);
                acked.store(e.log().len(), Ordering::SeqCst);
                t += 1;
            }
            e
        })
    };
    let mut copies = Vec::new();
    for i in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(30));
        let out = dir.path().join(format!("backup-{i}.sqlite"));
        let before = acked.load(Ordering::SeqCst);
        let report = SqliteStore::copy_online(&live, &out).unwrap();
        assert!(
            report.ops as usize >= before,
            "backup {i} lost acknowledged commits: {} ops, {before} acknowledged before it began",
            report.ops
        );
        copies.push((out, report));
    }
    stop.store(true, Ordering::SeqCst);
    let mut e = writer.join().unwrap();
    let final_log = e.log().to_vec();
    let mut lens = Vec::new();
    for (out, report) in &copies {
        #[cfg(unix)]
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(out).unwrap().permissions())
                & 0o777,
            0o600
        );
        let mut b = Engine::sqlite(out).unwrap();
        b.verify().unwrap();
        assert_eq!(b.log().len() as u64, report.ops);
        assert_eq!(b.state().len(), report.records);
        assert_eq!(b.log(), &final_log[..b.log().len()], "not a prefix");
        lens.push(b.log().len());
    }
    assert!(lens.windows(2).all(|w| w[0] <= w[1]), "{lens:?}");
    assert!(
        *lens.last().unwrap() < final_log.len(),
        "the writer was not writing during the backups: {lens:?} of {}",
        final_log.len()
    );
    // Restore the last copy into a new file: the same store.
    let restored = dir.path().join("restored.sqlite");
    SqliteStore::copy_online(&copies[3].0, &restored).unwrap();
    let mut r = Engine::sqlite(&restored).unwrap();
    r.verify().unwrap();
    assert_eq!(r.log(), &final_log[..lens[3]]);
    // The destination must be new.
    let e2 = SqliteStore::copy_online(&live, &restored).unwrap_err();
    assert!(e2.to_string().contains("restored.sqlite"), "{e2}");
    e.verify().unwrap();
}
