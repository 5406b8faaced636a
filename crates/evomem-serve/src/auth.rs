//! API keys: one or more per tenant, stored only as SHA-256 hashes in a TOML
//! keys file, so that a leaked file does not leak keys.
//!
//! ```toml
//! # keys.toml (written by `evomem serve keys add`)
//! [[keys]]
//! tenant = "acme"
//! label = "ci"
//! sha256 = "9f86d081884c7d65..."
//! ```
//!
//! A key is `evk_` followed by 32 random hex digits from the operating
//! system's generator; it is shown once, when it is made. A request's key is
//! hashed and looked up; the tenant it maps to scopes everything the request
//! may touch.

use crate::error::ServeError;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;

/// One entry of the keys file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The tenant the key belongs to.
    pub tenant: String,
    /// A name for people (`ci`, `prod-agent`).
    #[serde(default)]
    pub label: String,
    /// Hex SHA-256 of the key.
    pub sha256: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

/// The loaded keys: hash to tenant.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    by_hash: HashMap<String, String>,
}

/// Hex SHA-256 of a key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new random key.
pub fn generate_key() -> String {
    let mut b = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut b);
    format!("evk_{}", hex::encode(b))
}

/// Check a tenant name: 1-32 characters of `[a-z0-9_]`, starting with a
/// letter (it names a SQLite file and a PostgreSQL schema).
pub fn check_tenant(name: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tenant name `{name}` must be 1-32 characters of [a-z0-9_] starting with a letter"
        ))
    }
}

impl KeyRing {
    /// Load a keys file; a missing file is an empty ring.
    pub fn load(path: &Path) -> Result<Self, ServeError> {
        let err = |message: String| ServeError::Keys {
            path: path.display().to_string(),
            message,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(err(e.to_string())),
        };
        let file: KeysFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        let mut ring = KeyRing::default();
        for (i, k) in file.keys.into_iter().enumerate() {
            check_tenant(&k.tenant).map_err(|m| err(format!("keys[{i}].tenant: {m}")))?;
            let ok = k.sha256.len() == 64 && k.sha256.chars().all(|c| c.is_ascii_hexdigit());
            if !ok {
                return Err(err(format!(
                    "keys[{i}].sha256: expected 64 hex digits, got `{}`",
                    k.sha256
                )));
            }
            ring.by_hash.insert(k.sha256.to_ascii_lowercase(), k.tenant);
        }
        Ok(ring)
    }

    /// A ring from plain keys (tests, benchmarks): `(key, tenant)`.
    pub fn from_plain<'a>(keys: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            by_hash: keys
                .into_iter()
                .map(|(k, t)| (hash_key(k), t.to_string()))
                .collect(),
        }
    }

    /// The tenant of `key`, if the key is known.
    pub fn tenant_of(&self, key: &str) -> Option<&str> {
        self.by_hash.get(&hash_key(key)).map(String::as_str)
    }

    /// Every tenant with at least one key, sorted.
    pub fn tenants(&self) -> Vec<String> {
        let mut t: Vec<String> = self.by_hash.values().cloned().collect();
        t.sort();
        t.dedup();
        t
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// True when no key is configured.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// Make a key for `tenant`, append its hash to the keys file (creating it),
/// and return the key. The file never holds the key itself.
pub fn add_key(path: &Path, tenant: &str, label: &str) -> Result<String, ServeError> {
    let err = |message: String| ServeError::Keys {
        path: path.display().to_string(),
        message,
    };
    check_tenant(tenant).map_err(err)?;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err(e.to_string())),
    };
    let mut file: KeysFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    let key = generate_key();
    file.keys.push(KeyEntry {
        tenant: tenant.to_string(),
        label: label.to_string(),
        sha256: hash_key(&key),
    });
    let out = toml::to_string(&file).map_err(|e| err(e.to_string()))?;
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
        }
    }
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, out).map_err(|e| err(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stored_hashed_and_resolve_to_their_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let a = add_key(&path, "acme", "ci").unwrap();
        let b = add_key(&path, "globex", "").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&a) && !text.contains(&b), "{text}");
        let ring = KeyRing::load(&path).unwrap();
        assert_eq!(ring.tenant_of(&a), Some("acme"));
        assert_eq!(ring.tenant_of(&b), Some("globex"));
        assert_eq!(ring.tenant_of("evk_nope"), None);
        assert_eq!(ring.tenants(), vec!["acme", "globex"]);
    }

    #[test]
    fn a_bad_keys_file_names_the_entry_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        std::fs::write(&path, "[[keys]]\ntenant = \"ok\"\nsha256 = \"abc\"\n").unwrap();
        let e = KeyRing::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("keys[0].sha256") && e.contains("keys.toml"),
            "{e}"
        );
        std::fs::write(&path, "[[keys]]\ntenant = \"Bad-Name\"\nsha256 = \"\"\n").unwrap();
        let e = KeyRing::load(&path).unwrap_err().to_string();
        assert!(e.contains("keys[0].tenant"), "{e}");
    }
}
