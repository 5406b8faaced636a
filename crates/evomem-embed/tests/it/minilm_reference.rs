//! MiniLM against Python sentence-transformers: the nine reference texts of
//! `tests/fixtures/minilm-reference.json` (a Unicode text and one over 256
//! tokens among them) must match within 1e-4 per component.
//!
//! Needs the model folder (`scripts/fetch-models.sh`). When it is missing the
//! test FAILS under `CI`, and otherwise prints a loud notice and returns.

use evomem_core::{dot, Embedder};
use evomem_embed::{minilm_dir, MiniLmEmbedder, MiniLmOptions};
use std::path::PathBuf;

/// The reference vectors, shipped with the crate (made with
/// sentence-transformers from the same weights; see the file's `made_with`),
/// so that the test runs on a fresh clone without `../shared`.
fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm-reference.json")
}

fn load_or_skip() -> Option<MiniLmEmbedder> {
    // Tests may read the environment; the library does not.
    let models = std::env::var_os("EVOMEM_MODELS_DIR")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            evomem_embed::default_models_dir(
                std::env::var_os("HOME")
                    .as_deref()
                    .map(std::path::Path::new),
            )
        });
    let dir = minilm_dir(&models);
    if !dir.is_dir() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "MiniLM model folder {} is missing under CI: run scripts/fetch-models.sh",
                dir.display()
            );
        }
        eprintln!(
            "\n!!!!! SKIPPING MiniLM reference test: no model folder at {} (run scripts/fetch-models.sh) !!!!!\n",
            dir.display()
        );
        return None;
    }
    let opts = MiniLmOptions {
        threads: 2,
        // A small batch so the batching/padding path is exercised too.
        batch_size: 4,
        ..MiniLmOptions::default()
    };
    Some(MiniLmEmbedder::load(&dir, opts).unwrap())
}

#[test]
fn matches_sentence_transformers_reference() {
    let Some(model) = load_or_skip() else { return };
    let path = fixture_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let fx: serde_json::Value = serde_json::from_str(&text).unwrap();
    let texts: Vec<String> = fx["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let refs: Vec<Vec<f32>> = fx["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    let strs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let got = model.embed(&strs).unwrap();
    assert_eq!(got.len(), refs.len());
    let mut worst = 0.0f32;
    for (i, (g, r)) in got.iter().zip(&refs).enumerate() {
        assert_eq!(g.len(), 384);
        let diff = g
            .iter()
            .zip(r)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!("text {i}: max abs diff {diff:.2e}");
        assert!(
            diff < 1e-4,
            "text {i} ({:?}...): max abs diff {diff}",
            &texts[i].chars().take(40).collect::<String>()
        );
        worst = worst.max(diff);
    }
    eprintln!(
        "MiniLM vs sentence-transformers: max abs diff {worst:.3e} over {} texts",
        got.len()
    );
    let cos = dot(&got[0], &got[1]);
    assert!((cos - 0.7553).abs() < 1e-4, "cos of first two = {cos}");

    // Batch composition must not change a text's vector.
    let alone = model.embed(&[strs[1]]).unwrap();
    let diff = alone[0]
        .iter()
        .zip(&got[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "batching changed a vector by {diff}");
}
