//! The offline default: no model folder means the hashing embedder plus a
//! one-line notice naming the folder it looked for; a model folder that is
//! there but cannot be loaded is an error, never a silent fallback.

use evomem_core::Embedder;
use evomem_embed::{HashingEmbedder, FALLBACK_DIM};

/// Texts of different lengths and scripts for comparing two embedders.
const TEXTS: [&str; 4] = [
    "Heat (1995) Action Crime Thriller",
    "a quiet film about a lighthouse keeper",
    "x",
    "Amélie — Comédie, Romance",
];

/// `emb` embeds exactly like `HashingEmbedder::new(FALLBACK_DIM)`: same id,
/// width and vectors, unit length.
fn assert_is_the_hashing_fallback(emb: &dyn Embedder) {
    let reference = HashingEmbedder::new(FALLBACK_DIM);
    assert_eq!(emb.model_id(), "hash-v1-384");
    assert_eq!(emb.model_id(), reference.model_id());
    assert_eq!(emb.dim(), FALLBACK_DIM);
    let got = emb.embed(&TEXTS).unwrap();
    assert_eq!(got, reference.embed(&TEXTS).unwrap());
    for (t, v) in TEXTS.iter().zip(&got) {
        assert_eq!(v.len(), FALLBACK_DIM, "{t}");
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{t}: norm {norm}");
    }
    assert_ne!(got[0], got[1], "different texts, different vectors");
}

#[test]
fn missing_model_folder_falls_back_to_hashing_with_notice() {
    let dir = tempfile::tempdir().unwrap();
    let (emb, notice) = evomem_embed::load_default(dir.path(), 1).unwrap();
    assert_is_the_hashing_fallback(emb.as_ref());
    let notice = notice.expect("a fallback always comes with a notice");
    assert!(!notice.contains('\n'), "one line: {notice}");
    // It names the very folder it looked for, and what it uses instead.
    let looked_for = evomem_embed::minilm_dir(dir.path());
    assert_eq!(looked_for, dir.path().join(evomem_embed::MINILM_DIR_NAME));
    assert!(
        notice.contains(&format!(
            "no MiniLM model folder at {} ",
            looked_for.display()
        )),
        "{notice}"
    );
    assert!(
        notice.contains("falling back to the hashing embedder (hash-v1-384)"),
        "{notice}"
    );
    // A models directory that does not exist at all falls back the same way.
    let gone = dir.path().join("never-created");
    let (emb, notice) = evomem_embed::load_default(&gone, 1).unwrap();
    assert_is_the_hashing_fallback(emb.as_ref());
    assert!(
        notice
            .unwrap()
            .contains(&evomem_embed::minilm_dir(&gone).display().to_string()),
        "notice names the folder under the missing directory"
    );
}

#[test]
fn default_models_dir_is_under_home() {
    let d = evomem_embed::default_models_dir(Some(std::path::Path::new("/home/x")));
    assert_eq!(d, std::path::Path::new("/home/x/.cache/evomem/models"));
    // No home, or an empty one: a folder in the working directory.
    for home in [None, Some(std::path::Path::new(""))] {
        let d = evomem_embed::default_models_dir(home);
        assert_eq!(d, std::path::Path::new(".evomem-models"), "{home:?}");
    }
}

#[cfg(feature = "minilm")]
#[test]
fn broken_model_folder_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join(evomem_embed::MINILM_DIR_NAME);
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("config.json"), "{ not json").unwrap();
    let err = evomem_embed::load_default(dir.path(), 1).err().unwrap();
    match &err {
        evomem_core::EmbedError::Load { path, .. } => {
            assert_eq!(path, &m.join("config.json").display().to_string());
        }
        other => panic!("expected a load error, got {other}"),
    }
}

#[cfg(feature = "minilm")]
#[test]
fn empty_model_folder_is_an_error_not_a_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join(evomem_embed::MINILM_DIR_NAME);
    std::fs::create_dir_all(&m).unwrap();
    match evomem_embed::load_default(dir.path(), 1) {
        Ok((emb, notice)) => panic!(
            "an empty model folder fell back to {} ({notice:?})",
            emb.model_id()
        ),
        Err(evomem_core::EmbedError::Load { path, .. }) => {
            assert_eq!(path, m.join("config.json").display().to_string());
        }
        Err(other) => panic!("expected a load error, got {other}"),
    }
}

/// Built without `minilm`, a model folder that is there is ignored, and the
/// notice says why.
#[cfg(not(feature = "minilm"))]
#[test]
fn model_folder_without_the_minilm_feature_falls_back_with_notice() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join(evomem_embed::MINILM_DIR_NAME);
    std::fs::create_dir_all(&m).unwrap();
    let (emb, notice) = evomem_embed::load_default(dir.path(), 1).unwrap();
    assert_is_the_hashing_fallback(emb.as_ref());
    let notice = notice.unwrap();
    assert!(!notice.contains('\n'), "one line: {notice}");
    assert!(notice.contains("without the `minilm` feature"), "{notice}");
    assert!(
        notice.contains(&format!("ignoring {} ", m.display())),
        "{notice}"
    );
}
