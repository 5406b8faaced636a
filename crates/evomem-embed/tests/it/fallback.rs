//! The offline default: no model folder means hashing plus a one-line notice.

use evomem_core::Embedder;

#[test]
fn missing_model_folder_falls_back_to_hashing_with_notice() {
    let dir = tempfile::tempdir().unwrap();
    let (emb, notice) = evomem_embed::load_default(Some(dir.path())).unwrap();
    assert_eq!(emb.model_id(), "hash-v1-384");
    assert_eq!(emb.dim(), 384);
    let notice = notice.unwrap();
    assert!(!notice.contains('\n'), "one line: {notice}");
    assert!(notice.contains("hashing"), "{notice}");
    assert!(
        notice.contains(&dir.path().display().to_string()),
        "{notice}"
    );
}

#[test]
fn models_dir_honours_env_default_shape() {
    // Only checks the shape; the env var itself is read at call time.
    let d = evomem_embed::models_dir();
    assert!(!d.as_os_str().is_empty());
}

#[cfg(feature = "minilm")]
#[test]
fn broken_model_folder_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join(evomem_embed::MINILM_DIR_NAME);
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("config.json"), "{ not json").unwrap();
    let err = evomem_embed::load_default(Some(dir.path())).err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("config.json"), "{msg}");
}
