//! Corrupt, truncated and foreign files give a clear error naming the path,
//! never a panic.

use evomem_core::*;
use evomem_store::{Engine, StoreError};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

fn expect_error(path: &Path, what: &str) -> StoreError {
    let err = match Engine::sqlite(path) {
        Ok(_) => panic!("{what}: opening {} should fail", path.display()),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "{what}: error does not name the path: {msg}"
    );
    err
}

fn valid_store(path: &Path, records: usize) {
    let mut e = Engine::sqlite(path).unwrap().with_snapshot_every(50);
    for i in 0..records {
        let r = MemoryRecord::new(
            MemoryId::new(format!("r{i}")),
            Namespace::user(&format!("u{}", i % 7)),
            RecordKind::Event,
            format!("event number {i} with some padding text to fill pages"),
            LogicalTime(i as u64),
        );
        e.apply(
            "t",
            vec![PlannedOp::new(MemoryOp::Create { record: r }, "x", "y")],
            LogicalTime(i as u64),
        )
        .unwrap();
    }
    drop(e);
    // Fold the WAL into the main file, so that truncating it bites.
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
}

#[test]
fn garbage_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.sqlite");
    let mut bytes = vec![0u8; 16 * 1024];
    ChaCha8Rng::seed_from_u64(1).fill_bytes(&mut bytes);
    std::fs::write(&path, bytes).unwrap();
    let err = expect_error(&path, "garbage");
    assert!(
        matches!(
            err,
            StoreError::Corrupt { .. } | StoreError::NotAStore { .. }
        ),
        "{err}"
    );
}

#[test]
fn truncated_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("valid.sqlite");
    valid_store(&src, 300);
    let full = std::fs::read(&src).unwrap();
    assert!(
        full.len() > 8 * 4096,
        "test setup: store too small ({} bytes)",
        full.len()
    );
    for (k, keep) in [
        10usize,
        100,
        4096 + 17,
        full.len() / 3,
        full.len() / 2,
        full.len() - 4096,
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.path().join(format!("trunc{k}.sqlite"));
        std::fs::write(&path, &full[..keep]).unwrap();
        expect_error(&path, &format!("truncated to {keep} bytes"));
    }
}

#[test]
fn flipped_bytes_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("valid.sqlite");
    valid_store(&src, 300);
    let full = std::fs::read(&src).unwrap();
    // Overwrite whole pages past the header with noise.
    for (k, page) in [1usize, 3, 5].into_iter().enumerate() {
        let mut bytes = full.clone();
        let start = page * 4096;
        ChaCha8Rng::seed_from_u64(k as u64).fill_bytes(&mut bytes[start..start + 4096]);
        let path = dir.path().join(format!("flip{k}.sqlite"));
        std::fs::write(&path, &bytes).unwrap();
        expect_error(&path, &format!("noise in page {page}"));
    }
}

#[test]
fn foreign_database_and_bad_rows_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    // A SQLite database that is not an evomem store.
    let foreign = dir.path().join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
        .unwrap();
    let err = expect_error(&foreign, "foreign");
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err}");
    // A store whose op row holds bad JSON.
    let bad = dir.path().join("badrow.sqlite");
    valid_store(&bad, 5);
    rusqlite::Connection::open(&bad)
        .unwrap()
        .execute(
            "UPDATE ops SET body = '{\"seq\": 3, \"op\": ' WHERE seq = 3",
            [],
        )
        .unwrap();
    let err = expect_error(&bad, "bad op row");
    assert!(matches!(err, StoreError::Decode { .. }), "{err}");
    assert!(err.to_string().contains("seq 3"), "{err}");
    // A directory where a file should be.
    let d = dir.path().join("adir.sqlite");
    std::fs::create_dir(&d).unwrap();
    expect_error(&d, "directory");
}
