//! Generate the committed version-1 fixture store.
//!
//! ```text
//! cargo run -p evomem-store --example make_fixture -- crates/evomem-store/tests/fixtures/store-v1.sqlite
//! ```
//!
//! The content comes from `tests/it/fixture_ops.rs`, which the fixture test
//! also uses to check that the file decodes to exactly this log and state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/fixture_ops.rs"]
mod fixture_ops;

use evomem_store::Engine;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: make_fixture <output.sqlite>")?;
    if std::path::Path::new(&path).exists() {
        return Err(format!("{path} exists; remove it first").into());
    }
    {
        let mut e = Engine::sqlite(&path)?
            .deterministic(true)
            .with_snapshot_every(fixture_ops::FIXTURE_SNAPSHOT_EVERY);
        for (policy, ops, at) in fixture_ops::fixture_batches() {
            e.apply(policy, ops, at)?;
        }
        e.verify()?;
        println!("{path}: {} ops, {} records", e.log().len(), e.state().len());
    }
    // Fold the WAL into the file and shrink it, so one file is committed.
    let conn = rusqlite::Connection::open(&path)?;
    conn.execute_batch(
        "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE; PRAGMA page_size=1024; VACUUM;",
    )?;
    Ok(())
}
