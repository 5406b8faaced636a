//! The versioned on-disk format: the committed version-1 fixture opens and
//! decodes to exactly the log and state it was generated from; a store of a
//! newer version is refused with a clear error.

use crate::fixture_ops::{fixture_batches, FIXTURE_SNAPSHOT_EVERY};
use evomem_core::*;
use evomem_store::{Engine, StoreError, FORMAT_VERSION};

fn fixture_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1.sqlite");
    let dst = dir.join("store-v1.sqlite");
    std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("fixture {}: {e}", src.display()));
    dst
}

#[test]
fn version_1_fixture_opens_and_decodes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(dir.path());
    let mut e = Engine::sqlite(&path).unwrap();
    assert_eq!(e.format_version(), 1);
    let mut want = Engine::in_memory().with_snapshot_every(FIXTURE_SNAPSHOT_EVERY);
    for (policy, ops, at) in fixture_batches() {
        want.apply(policy, ops, at).unwrap();
    }
    assert_eq!(e.log(), want.log(), "fixture log differs from fixture_ops");
    assert_eq!(
        e.state(),
        want.state(),
        "fixture state differs from fixture_ops"
    );
    e.verify().unwrap();
    assert!(!e.store_mut().unwrap().snapshot_seqs().unwrap().is_empty());
    assert_eq!(
        e.state_at(LogicalTime(3)).unwrap(),
        want.state_at(LogicalTime(3)).unwrap()
    );
    // The old store keeps working: new ops append after the fixture's.
    let n = e.log().len();
    e.apply(
        "t",
        vec![PlannedOp::new(
            MemoryOp::Forget {
                id: MemoryId::new("u2:profile"),
            },
            "forget",
            "t",
        )],
        LogicalTime(6),
    )
    .unwrap();
    drop(e);
    let again = Engine::sqlite(&path).unwrap();
    assert_eq!(again.log().len(), n + 1);
}

#[test]
fn newer_format_is_refused_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(dir.path());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE meta SET value = '99' WHERE key = 'format_version'",
        [],
    )
    .unwrap();
    drop(conn);
    let err = Engine::sqlite(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::FormatTooNew { found: 99, supported, .. } if supported == FORMAT_VERSION),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("99"), "{msg}");
}

#[test]
fn newer_format_is_refused_postgres() {
    let Some(url) = crate::common::pg_url("newer_format_is_refused_postgres") else {
        return;
    };
    use crate::common::Backend;
    let mut b = crate::common::PgBackend::new(url.clone(), "fmt");
    drop(b.fresh("v"));
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .execute(
            &format!(
                "UPDATE {}.meta SET value = '2' WHERE key = 'format_version'",
                b.schema("v")
            ),
            &[],
        )
        .unwrap();
    let err = evomem_store::PostgresStore::connect(&url, &b.schema("v")).unwrap_err();
    assert!(
        matches!(err, StoreError::FormatTooNew { found: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&b.schema("v")), "{err}");
}
