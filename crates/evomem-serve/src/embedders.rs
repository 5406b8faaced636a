//! Which embedder a data folder uses, and the embedders a service holds
//! besides its own.
//!
//! A folder's vectors are one model's: vectors of two models are not
//! comparable. The folder's embedder is decided once and written to
//! `embedder.json` in the data folder (the folder's manifest), so that a
//! later start, `serve check` or `serve reembed` uses the same one:
//! - `serve.embedder` set to a name (`minilm`, `minilm-int8`, `hashing`)
//!   is used as given;
//! - `auto` (the default) reads the manifest; without one, it looks at the
//!   tenants' stores: the model of the first vector found names the
//!   embedder (a folder made before the manifest existed keeps working
//!   unchanged, which for the old default is `minilm`), and a folder with
//!   no vector at all is new and gets [`NEW_FOLDER_EMBEDDER`].
//!
//! `serve reembed` moves a folder to another embedder (`reembed.rs`) and
//! rewrites the manifest when every tenant has moved. Between the first
//! tenant's swap and the manifest, tenants of one folder hold different
//! models; an [`EmbedderSet`] gives each tenant the embedder of the model
//! its store holds.

use crate::config::ServeConfig;
use crate::error::ServeError;
use evomem_core::Embedder;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The embedder a new data folder gets under `serve.embedder = "auto"`:
/// MiniLM with int8 dense layers, which ingests at about twice the f32
/// rate for 0.957 recall@10 against f32 (docs/service.md).
pub const NEW_FOLDER_EMBEDDER: &str = "minilm-int8";

/// The embedders `serve.embedder` may name, besides `auto`.
pub const NAMES: [&str; 3] = ["minilm", "minilm-int8", "hashing"];

use evomem_embed::{MINILM_INT8_MODEL_ID as MINILM_INT8_MODEL, MINILM_MODEL_ID as MINILM_MODEL};

/// The embedder name whose vectors carry `model` (`hash-v1-*` is the
/// hashing embedder's, also what `minilm` falls back to without a model
/// folder); `None` for a model no embedder of the service makes.
pub fn name_of_model(model: &str) -> Option<&'static str> {
    match model {
        MINILM_MODEL => Some("minilm"),
        MINILM_INT8_MODEL => Some("minilm-int8"),
        m if m.starts_with("hash-v1-") => Some("hashing"),
        _ => None,
    }
}

/// The data folder's manifest: the embedder its vectors are from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// One of [`NAMES`].
    pub embedder: String,
    /// The model id its vectors carry.
    pub model: String,
}

/// The manifest's path in `data_dir`.
pub fn manifest_path(data_dir: &Path) -> PathBuf {
    data_dir.join("embedder.json")
}

/// Read the folder's manifest; `None` when there is none. A manifest that
/// does not parse is an error naming the file.
pub fn read_manifest(data_dir: &Path) -> Result<Option<Manifest>, ServeError> {
    let path = manifest_path(data_dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ServeError::Config(format!("{}: {e}", path.display()))),
    };
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| ServeError::Config(format!("{}: {e}", path.display())))?;
    if !NAMES.contains(&m.embedder.as_str()) {
        return Err(ServeError::Config(format!(
            "{}: field `embedder`: `{}` is not one of {}",
            path.display(),
            m.embedder,
            NAMES.join(", ")
        )));
    }
    Ok(Some(m))
}

/// Write the folder's manifest (atomically, owner-only).
pub fn write_manifest(data_dir: &Path, m: &Manifest) -> Result<(), ServeError> {
    std::fs::create_dir_all(data_dir)?;
    let text = serde_json::to_string_pretty(m)
        .map_err(|e| ServeError::Config(format!("manifest: {e}")))?;
    crate::private_file::write_atomically(&manifest_path(data_dir), text.as_bytes())?;
    Ok(())
}

/// How [`resolve`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `serve.embedder` named it.
    Setting,
    /// The folder's manifest.
    Manifest,
    /// The model of the vectors in a tenant's store (no manifest yet).
    Stored,
    /// No vector anywhere: a new folder.
    New,
}

/// The embedder name the service uses on this folder, and why.
pub fn resolve(cfg: &ServeConfig, tenants: &[String]) -> Result<(String, Source), ServeError> {
    if cfg.embedder != "auto" {
        return Ok((cfg.embedder.clone(), Source::Setting));
    }
    if let Some(m) = read_manifest(&cfg.data_dir)? {
        return Ok((m.embedder, Source::Manifest));
    }
    for t in tenants {
        if let Some(model) = stored_model(cfg, t)? {
            let name = name_of_model(&model).ok_or_else(|| ServeError::Load {
                tenant: t.clone(),
                message: format!(
                    "its vectors are from `{model}`, which no embedder of this service makes"
                ),
            })?;
            return Ok((name.to_string(), Source::Stored));
        }
    }
    Ok((NEW_FOLDER_EMBEDDER.to_string(), Source::New))
}

/// The manifest a folder without one gets: the model its stores' vectors
/// are from, when they hold any; else `embedder`'s, the one the service
/// starts with.
pub fn manifest_for(
    cfg: &ServeConfig,
    tenants: &[String],
    embedder: &dyn Embedder,
) -> Result<Manifest, ServeError> {
    // On PostgreSQL, only the tenants whose schema exists are opened: one
    // query instead of creating a schema per tenant (a first start on an
    // empty database took 22.7 s for 300 tenants before).
    let existing = match cfg.is_postgres() {
        true => Some(
            evomem_store::PostgresStore::schemas_with_prefix(&cfg.store, "evomem_t_").map_err(
                |source| ServeError::Store {
                    tenant: "(every tenant)".to_string(),
                    source,
                },
            )?,
        ),
        false => None,
    };
    let mut model = None;
    for t in tenants {
        if let Some(have) = &existing {
            if !have.contains(&format!("evomem_t_{t}")) {
                continue;
            }
        }
        model = stored_model(cfg, t)?;
        if model.is_some() {
            break;
        }
    }
    let model = model.unwrap_or_else(|| embedder.model_id().to_string());
    let embedder = name_of_model(&model).ok_or_else(|| {
        ServeError::Config(format!(
            "vectors of `{model}`, which no embedder of this service makes"
        ))
    })?;
    Ok(Manifest {
        embedder: embedder.to_string(),
        model,
    })
}

/// The model of the first API memory's vector in tenant `name`'s store
/// (opened and replayed: this runs once per folder, before its manifest
/// is written); `None` for a store that does not exist or holds none.
fn stored_model(cfg: &ServeConfig, name: &str) -> Result<Option<String>, ServeError> {
    let store_err = |source| ServeError::Store {
        tenant: name.to_string(),
        source,
    };
    let engine = if cfg.is_postgres() {
        evomem_store::Engine::postgres_in(&cfg.store, &format!("evomem_t_{name}"))
            .map_err(store_err)?
    } else {
        let path = cfg.data_dir.join(format!("{name}.sqlite"));
        if !path.exists() {
            return Ok(None);
        }
        evomem_store::Engine::sqlite(path).map_err(store_err)?
    };
    Ok(crate::tenant::stored_model(engine.state()))
}

/// Loads an embedder by name (`minilm`, `minilm-int8`, `hashing`).
pub type Loader = Arc<dyn Fn(&str) -> Result<Arc<dyn Embedder>, String> + Send + Sync>;

/// Embedders a service holds besides the folder's own, by model, and how
/// to load one by name. Cloning shares them.
#[derive(Clone, Default)]
pub struct EmbedderSet {
    held: Arc<Mutex<Vec<Arc<dyn Embedder>>>>,
    loader: Option<Loader>,
    /// The model a re-embed run by this service is moving the folder to
    /// (or moved it to); `None` when no job ran or the last one failed.
    moving_to: Arc<Mutex<Option<String>>>,
}

impl EmbedderSet {
    /// A set that loads embedders with `loader`.
    pub fn with_loader(loader: Loader) -> Self {
        Self {
            held: Arc::default(),
            loader: Some(loader),
            moving_to: Arc::default(),
        }
    }

    /// Say that a re-embed of this service moves the folder to `model`
    /// (`None`: the job failed, the folder stays where it was). A tenant
    /// with no vector yet, opened on demand, then takes this model
    /// (`tenant/open.rs`).
    pub fn set_moving_to(&self, model: Option<String>) {
        *crate::lock(&self.moving_to) = model;
    }

    /// The model [`EmbedderSet::set_moving_to`] named last.
    pub fn moving_to(&self) -> Option<String> {
        crate::lock(&self.moving_to).clone()
    }

    /// Hold `e` (replacing one of the same model).
    pub fn hold(&self, e: Arc<dyn Embedder>) {
        let mut held = crate::lock(&self.held);
        held.retain(|h| h.model_id() != e.model_id());
        held.push(e);
    }

    /// The embedder named `name`: one held whose model is that name's, or
    /// one loaded (and then held). The loaded embedder must make the
    /// name's vectors: `minilm` without a model folder falls back to
    /// hashing, which would re-embed a folder with the wrong model.
    pub fn by_name(&self, name: &str) -> Result<Arc<dyn Embedder>, String> {
        let found = crate::lock(&self.held)
            .iter()
            .find(|e| name_of_model(e.model_id()) == Some(name))
            .cloned();
        if let Some(e) = found {
            return Ok(e);
        }
        let loader = self
            .loader
            .as_ref()
            .ok_or_else(|| format!("this service cannot load the `{name}` embedder"))?;
        let e = loader(name)?;
        if name_of_model(e.model_id()) != Some(name) {
            return Err(format!(
                "asked for the `{name}` embedder, loaded `{}` (is the model folder missing? run scripts/fetch-models.sh)",
                e.model_id()
            ));
        }
        self.hold(e.clone());
        Ok(e)
    }

    /// The embedder whose vectors carry `model`: one held, or one loaded
    /// by its name; `None` when there is none.
    pub fn for_model(&self, model: &str) -> Option<Arc<dyn Embedder>> {
        let found = crate::lock(&self.held)
            .iter()
            .find(|e| e.model_id() == model)
            .cloned();
        if found.is_some() {
            return found;
        }
        let e = self.by_name(name_of_model(model)?).ok()?;
        (e.model_id() == model).then_some(e)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn model_ids_name_their_embedders() {
        assert_eq!(name_of_model(evomem_embed::MINILM_MODEL_ID), Some("minilm"));
        assert_eq!(
            name_of_model(evomem_embed::MINILM_INT8_MODEL_ID),
            Some("minilm-int8")
        );
        assert_eq!(name_of_model("hash-v1-384"), Some("hashing"));
        assert_eq!(name_of_model("someone-else"), None);
    }

    /// A bad manifest is an error naming the file (and the field).
    #[test]
    fn a_bad_manifest_names_the_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            manifest_path(dir.path()),
            r#"{"embedder": "word2vec", "model": "x"}"#,
        )
        .unwrap();
        let e = read_manifest(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("embedder.json") && e.contains("`embedder`"),
            "{e}"
        );
        std::fs::write(manifest_path(dir.path()), "{").unwrap();
        let e = read_manifest(dir.path()).unwrap_err().to_string();
        assert!(e.contains("embedder.json"), "{e}");
    }
}
