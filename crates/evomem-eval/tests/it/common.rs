//! Shared helpers: the shared-data folder and tiny fixtures.

use std::path::PathBuf;

/// `$EVOMEM_SHARED_DATA` or `<workspace>/../shared/data`.
pub fn shared_data() -> PathBuf {
    match std::env::var_os("EVOMEM_SHARED_DATA") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")),
    }
}

/// The folder of one shared dataset, or `None` (with a loud notice) when it is
/// missing and `CI` is unset. Panics when missing under CI.
pub fn shared_dataset(name: &str) -> Option<PathBuf> {
    let p = shared_data().join(name);
    if p.is_dir() {
        return Some(p);
    }
    if std::env::var_os("CI").is_some() {
        panic!("shared data {} is missing (CI is set)", p.display());
    }
    eprintln!(
        "\n!!! NOTICE: shared data {} is missing; skipping this test (set EVOMEM_SHARED_DATA) !!!\n",
        p.display()
    );
    None
}
