//! The one deterministic test embedder (feature `test-utils`).
//!
//! Bag-of-words feature hashing: every alphanumeric word of a text (lower
//! case) adds 1 to bucket `fnv1a(word) mod dim`, and the vector is
//! L2-normalised. Texts that share words are close, texts that share none
//! are orthogonal (up to hash collisions), so tests can reason about
//! similarity without a model. Tests in every crate use this one, so that
//! a test's expectations do not depend on which copy it imported.

use evomem_core::{normalize, EmbedError, Embedder};

/// A feature-hashing embedder for tests.
#[derive(Debug, Clone)]
pub struct TestEmbedder {
    dim: usize,
    id: String,
}

impl TestEmbedder {
    /// Vectors of `dim` buckets.
    pub fn new(dim: usize) -> Self {
        Self {
            dim: dim.max(1),
            id: format!("test-hash-{dim}"),
        }
    }
}

impl Default for TestEmbedder {
    /// 64 buckets.
    fn default() -> Self {
        Self::new(64)
    }
}

/// FNV-1a of a word.
fn fnv1a(w: &str) -> u64 {
    w.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Embedder for TestEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; self.dim];
                for w in t
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                {
                    v[(fnv1a(w) % self.dim as u64) as usize] += 1.0;
                }
                normalize(&mut v);
                v
            })
            .collect())
    }
}

/// Test support: the folder of the real dataset `name` (`ml-100k`,
/// `cds-100-user-dense`, …), looked up in this order:
///
/// 1. `$EVOMEM_SHARED_DATA/<name>`;
/// 2. the workspace's sibling `../shared/data/<name>`;
/// 3. `$EVOMEM_DATA_DIR/<name>`, else `~/.cache/evomem/data/<name>`: where
///    `scripts/fetch-data.sh` (run by `scripts/test.sh`) puts ml-100k on a
///    machine without `../shared`.
///
/// When none exists: under `CI` the test fails; elsewhere it prints a loud
/// notice, appends the test's dataset to the file named by
/// `$EVOMEM_SKIP_LOG` (which `scripts/test.sh` sets and counts at the end,
/// since libtest hides a passing test's output), and returns `None`.
///
/// Test code only (feature `test-utils`): it reads the environment, which no
/// library code of evomem does.
#[allow(clippy::panic)] // a missing dataset under CI must fail the test
pub fn shared_dataset(name: &str) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let fetched =
        var("EVOMEM_DATA_DIR").or_else(|| var("HOME").map(|h| h.join(".cache/evomem/data")));
    let places: Vec<PathBuf> = [
        var("EVOMEM_SHARED_DATA"),
        Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data"
        ))),
        fetched,
    ]
    .into_iter()
    .flatten()
    .map(|root| root.join(name))
    .collect();
    if let Some(p) = places.iter().find(|p| p.is_dir()) {
        return Some(p.clone());
    }
    let tried: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
    if std::env::var_os("CI").is_some() {
        panic!(
            "dataset `{name}` is missing (CI is set); looked in {}",
            tried.join(", ")
        );
    }
    eprintln!(
        "\n!!! NOTICE: dataset `{name}` is missing (looked in {}); skipping this test !!!\n",
        tried.join(", ")
    );
    if let Some(log) = var("EVOMEM_SKIP_LOG") {
        use std::io::Write as _;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{name}");
        }
    }
    None
}
