//! `evomem serve backup` and `evomem serve restore` for SQLite stores.
//!
//! A backup copies each tenant's database with SQLite's online backup API
//! ([`SqliteStore::copy_online`]): the service may keep running and
//! writing, and each copy is its database as of one commit. A backup of
//! every tenant goes to a folder (`<tenant>.sqlite` each, plus the keys
//! file); a backup of one tenant (`--tenant`) goes to one file. Tenants are
//! copied one after another, so copies of different tenants may be of
//! different moments (tenants share nothing, so this loses no invariant).
//!
//! A restore copies the backup back the same way into a data folder that
//! does not hold that tenant yet, and checks it opens as a store; `evomem
//! serve check --data-dir DIR` then checks log, records and index agree.
//! PostgreSQL tenants are backed up with `pg_dump` per schema (see
//! `docs/service.md`).

use crate::auth::KeyRing;
use crate::config::ServeConfig;
use crate::error::ServeError;
use evomem_store::{CopyReport, SqliteStore};
use std::path::{Path, PathBuf};

/// One tenant copied: its name, the file written, what it holds.
#[derive(Debug, Clone)]
pub struct Copied {
    /// The tenant.
    pub tenant: String,
    /// The file written.
    pub path: PathBuf,
    /// Ops and records in the copy.
    pub report: CopyReport,
}

fn store_err(tenant: &str) -> impl Fn(evomem_store::StoreError) -> ServeError + '_ {
    move |source| ServeError::Store {
        tenant: tenant.to_string(),
        source,
    }
}

/// Back up the tenant `tenant` to the file `out`, or (without `tenant`)
/// every tenant with a key to the new or empty folder `out`, with a copy of
/// the keys file.
pub fn backup(
    config: &ServeConfig,
    keys: &KeyRing,
    tenant: Option<&str>,
    out: &Path,
) -> Result<Vec<Copied>, ServeError> {
    if config.is_postgres() {
        return Err(ServeError::Config(
            "serve.store: backup copies SQLite stores; for PostgreSQL use pg_dump per tenant schema (docs/service.md)".into(),
        ));
    }
    let src = |t: &str| config.data_dir.join(format!("{t}.sqlite"));
    if let Some(t) = tenant {
        crate::auth::check_tenant(t).map_err(ServeError::Config)?;
        let report = SqliteStore::copy_online(&src(t), out).map_err(store_err(t))?;
        return Ok(vec![Copied {
            tenant: t.to_string(),
            path: out.to_path_buf(),
            report,
        }]);
    }
    let names = keys.tenants();
    if names.is_empty() {
        return Err(ServeError::Config(
            "no tenant has a key: nothing to back up".into(),
        ));
    }
    new_folder(out)?;
    let mut done = Vec::new();
    for t in names {
        let path = out.join(format!("{t}.sqlite"));
        let report = SqliteStore::copy_online(&src(&t), &path).map_err(store_err(&t))?;
        done.push(Copied {
            tenant: t,
            path,
            report,
        });
    }
    let keys_path = config.keys_path();
    if let Ok(bytes) = std::fs::read(&keys_path) {
        crate::private_file::write_atomically(&out.join("keys.toml"), &bytes)?;
    }
    // The folder's embedder (`crate::embedders`) with its vectors.
    let manifest = crate::embedders::manifest_path(&config.data_dir);
    if let Ok(bytes) = std::fs::read(&manifest) {
        crate::private_file::write_atomically(&crate::embedders::manifest_path(out), &bytes)?;
    }
    Ok(done)
}

/// Restore into the data folder `data_dir`: from a one-tenant backup file
/// (`tenant` names the tenant; default the file's stem), or from a backup
/// folder (every `<tenant>.sqlite` in it, and its keys file when the data
/// folder has none). Refuses to overwrite a tenant's existing database.
pub fn restore(
    from: &Path,
    data_dir: &Path,
    tenant: Option<&str>,
) -> Result<Vec<Copied>, ServeError> {
    let mut pairs: Vec<(String, PathBuf)> = Vec::new();
    if from.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(from)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "sqlite"))
            .collect();
        entries.sort();
        for p in entries {
            let t = stem(&p)?;
            if tenant.is_none_or(|want| want == t) {
                pairs.push((t, p));
            }
        }
        if pairs.is_empty() {
            return Err(ServeError::Config(format!(
                "--from {}: no <tenant>.sqlite backup in the folder",
                from.display()
            )));
        }
    } else {
        let t = match tenant {
            Some(t) => t.to_string(),
            None => stem(from)?,
        };
        pairs.push((t, from.to_path_buf()));
    }
    for (t, _) in &pairs {
        crate::auth::check_tenant(t).map_err(|m| ServeError::Config(format!("--tenant: {m}")))?;
        let dest = data_dir.join(format!("{t}.sqlite"));
        if dest.exists() {
            return Err(ServeError::Config(format!(
                "--data-dir: {} already exists; restore into a folder without tenant `{t}`",
                dest.display()
            )));
        }
    }
    std::fs::create_dir_all(data_dir)?;
    let mut done = Vec::new();
    for (t, src) in pairs {
        let dest = data_dir.join(format!("{t}.sqlite"));
        let report = SqliteStore::copy_online(&src, &dest).map_err(store_err(&t))?;
        done.push(Copied {
            tenant: t,
            path: dest,
            report,
        });
    }
    let keys_from = from.join("keys.toml");
    let keys_to = data_dir.join("keys.toml");
    if from.is_dir() && keys_from.is_file() && !keys_to.exists() {
        crate::private_file::write_atomically(&keys_to, &std::fs::read(&keys_from)?)?;
    }
    let (m_from, m_to) = (
        crate::embedders::manifest_path(from),
        crate::embedders::manifest_path(data_dir),
    );
    if from.is_dir() && m_from.is_file() && !m_to.exists() {
        crate::private_file::write_atomically(&m_to, &std::fs::read(&m_from)?)?;
    }
    Ok(done)
}

fn stem(p: &Path) -> Result<String, ServeError> {
    let t = p
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::auth::check_tenant(&t).map_err(|m| {
        ServeError::Config(format!(
            "{}: the file name must be <tenant>.sqlite ({m}); or pass --tenant",
            p.display()
        ))
    })?;
    Ok(t)
}

fn new_folder(out: &Path) -> Result<(), ServeError> {
    if out.is_file() {
        return Err(ServeError::Config(format!(
            "--out {}: a file; a backup of every tenant goes to a folder (or pass --tenant)",
            out.display()
        )));
    }
    if out.is_dir() && std::fs::read_dir(out)?.next().is_some() {
        return Err(ServeError::Config(format!(
            "--out {}: the folder is not empty",
            out.display()
        )));
    }
    std::fs::create_dir_all(out)?;
    Ok(())
}
