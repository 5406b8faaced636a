//! The offline default: no model folder means hashing plus a one-line notice.

use evomem_core::Embedder;

#[test]
fn missing_model_folder_falls_back_to_hashing_with_notice() {
    let dir = tempfile::tempdir().unwrap();
    let (emb, notice) = evomem_embed::load_default(dir.path(), 1).unwrap();
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
fn default_models_dir_is_under_home() {
    let d = evomem_embed::default_models_dir(Some(std::path::Path::new("/home/x")));
    assert_eq!(d, std::path::Path::new("/home/x/.cache/evomem/models"));
    let none = evomem_embed::default_models_dir(None);
    assert_eq!(none, std::path::Path::new(".evomem-models"));
}

#[cfg(feature = "minilm")]
#[test]
fn broken_model_folder_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join(evomem_embed::MINILM_DIR_NAME);
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("config.json"), "{ not json").unwrap();
    let err = evomem_embed::load_default(dir.path(), 1).err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("config.json"), "{msg}");
}
