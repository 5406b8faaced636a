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
//!
//! Keys are named by their id: the first 12 hex digits of the hash
//! (`evomem serve keys list`), or any prefix of at least 8 that names one
//! key (`keys revoke`, `keys rotate`). The file is written atomically, mode
//! 0600 ([`crate::private_file`]). A running service reads it again when it
//! changes ([`LiveKeys`]), so that a revoked or rotated key stops working
//! without a restart.

use crate::error::ServeError;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

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

fn keys_err(path: &Path) -> impl Fn(String) -> ServeError + '_ {
    move |message| ServeError::Keys {
        path: path.display().to_string(),
        message,
    }
}

fn read_file(path: &Path) -> Result<KeysFile, ServeError> {
    let err = keys_err(path);
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err(e.to_string())),
    };
    toml::from_str(&text).map_err(|e| err(e.to_string()))
}

fn write_file(path: &Path, file: &KeysFile) -> Result<(), ServeError> {
    let err = keys_err(path);
    let out = toml::to_string(file).map_err(|e| err(e.to_string()))?;
    crate::private_file::write_atomically(path, out.as_bytes()).map_err(|e| err(e.to_string()))
}

/// Run one read-modify-write of the keys file under an exclusive lock on
/// `<keys file>.lock` (the keys file itself is replaced by a rename on
/// every write, so its own inode cannot carry the lock): two `serve keys`
/// commands at once would otherwise each read the file, and the second
/// write would drop the first one's key.
fn locked<T>(path: &Path, f: impl FnOnce() -> Result<T, ServeError>) -> Result<T, ServeError> {
    let err = keys_err(path);
    let mut name = path.as_os_str().to_os_string();
    name.push(".lock");
    // The first key of a data folder comes before the folder.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("creating {}: {e}", dir.display())))?;
    }
    let mut open = std::fs::OpenOptions::new();
    open.create(true).truncate(false).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    let lock = open
        .open(&name)
        .map_err(|e| err(format!("lock file {}: {e}", Path::new(&name).display())))?;
    lock.lock()
        .map_err(|e| err(format!("locking {}: {e}", Path::new(&name).display())))?;
    let out = f();
    // Closing the file releases the lock too; unlock first so a failure
    // to unlock is seen.
    lock.unlock().map_err(|e| err(format!("unlocking: {e}")))?;
    out
}

/// A key's id: the first 12 hex digits of its hash.
pub fn key_id(entry: &KeyEntry) -> &str {
    entry.sha256.get(..12).unwrap_or(&entry.sha256)
}

/// Make a key for `tenant`, append its hash to the keys file (creating it),
/// and return the key. The file never holds the key itself.
pub fn add_key(path: &Path, tenant: &str, label: &str) -> Result<String, ServeError> {
    check_tenant(tenant).map_err(keys_err(path))?;
    locked(path, || {
        let mut file = read_file(path)?;
        let key = generate_key();
        file.keys.push(KeyEntry {
            tenant: tenant.to_string(),
            label: label.to_string(),
            sha256: hash_key(&key),
        });
        write_file(path, &file)?;
        Ok(key)
    })
}

/// The entries of the keys file (an absent file has none).
pub fn list_keys(path: &Path) -> Result<Vec<KeyEntry>, ServeError> {
    Ok(read_file(path)?.keys)
}

/// The index of the one entry whose hash starts with `id`.
fn find(path: &Path, file: &KeysFile, id: &str) -> Result<usize, ServeError> {
    let err = keys_err(path);
    let id = id.trim().to_ascii_lowercase();
    if id.len() < 8 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(err(format!(
            "key id `{id}`: expected at least 8 hex digits (see `evomem serve keys list`)"
        )));
    }
    let hits: Vec<usize> = (0..file.keys.len())
        .filter(|&i| file.keys[i].sha256.to_ascii_lowercase().starts_with(&id))
        .collect();
    match hits.as_slice() {
        [i] => Ok(*i),
        [] => Err(err(format!("no key has id `{id}`"))),
        _ => Err(err(format!(
            "key id `{id}` names {} keys; give more digits",
            hits.len()
        ))),
    }
}

/// Remove the key whose id starts with `id`; returns its entry.
pub fn revoke_key(path: &Path, id: &str) -> Result<KeyEntry, ServeError> {
    locked(path, || {
        let mut file = read_file(path)?;
        let i = find(path, &file, id)?;
        let gone = file.keys.remove(i);
        write_file(path, &file)?;
        Ok(gone)
    })
}

/// Replace the key whose id starts with `id` by a new key of the same
/// tenant and label, in one write of the file: the old key stops working
/// when the new one starts. Returns the new key and the old entry.
pub fn rotate_key(path: &Path, id: &str) -> Result<(String, KeyEntry), ServeError> {
    locked(path, || {
        let mut file = read_file(path)?;
        let i = find(path, &file, id)?;
        let key = generate_key();
        let old = file.keys[i].clone();
        file.keys[i].sha256 = hash_key(&key);
        write_file(path, &file)?;
        Ok((key, old))
    })
}

/// How often (ms) `evomem serve` looks whether its keys file changed: a
/// revoked key stops working at most this long after the file is written.
pub const KEYS_CHECK_MS: u64 = 1000;

/// What identifies one version of the keys file: a rewrite (a rename over
/// it) changes the inode, an edit in place the length or modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let md = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&md);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp {
        inode,
        len: md.len(),
        modified: md.modified().ok(),
    })
}

/// The keys a running service checks requests against: a [`KeyRing`] that
/// is loaded again when its file changes. At most every `check_ms`
/// milliseconds a request looks at the file's inode, length and
/// modification time (one `stat`); when they moved, the file is read again.
/// A file that no longer parses keeps the previous keys (and logs why).
/// `evomem serve` looks every [`KEYS_CHECK_MS`].
#[derive(Debug)]
pub struct LiveKeys {
    path: Option<PathBuf>,
    check_ms: u64,
    state: RwLock<(KeyRing, Option<Stamp>)>,
    checked_at_ms: AtomicU64,
    started: std::time::Instant,
    /// Changes of the file that failed to load (the old keys stayed).
    reload_failures: AtomicU64,
}

impl LiveKeys {
    /// Keys that never change (tests, benchmarks).
    pub fn fixed(ring: KeyRing) -> Self {
        Self {
            path: None,
            check_ms: 0,
            state: RwLock::new((ring, None)),
            checked_at_ms: AtomicU64::new(0),
            started: std::time::Instant::now(),
            reload_failures: AtomicU64::new(0),
        }
    }

    /// Load `path` and watch it, looking at most every `check_ms` ms.
    pub fn watch(path: &Path, check_ms: u64) -> Result<Self, ServeError> {
        let before = stamp(path);
        let ring = KeyRing::load(path)?;
        Ok(Self {
            path: Some(path.to_path_buf()),
            check_ms,
            state: RwLock::new((ring, before)),
            checked_at_ms: AtomicU64::new(0),
            started: std::time::Instant::now(),
            reload_failures: AtomicU64::new(0),
        })
    }

    /// Read the file again if it changed since it was last read.
    pub fn refresh(&self) {
        let Some(path) = &self.path else { return };
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.checked_at_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.check_ms {
            return;
        }
        self.checked_at_ms.store(now, Ordering::Relaxed);
        let current = stamp(path);
        if self.read().1 == current {
            return;
        }
        match KeyRing::load(path) {
            Ok(ring) => {
                tracing::info!(keys = ring.len(), "keys file changed; reloaded");
                *self.write() = (ring, current);
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    "KEYS FILE NOT RELOADED: it changed but does not load, so the keys read before stay in force until it is fixed: {e}"
                );
                self.write().1 = current;
            }
        }
    }

    /// How many changes of the keys file failed to load (`/metrics`:
    /// `evomem_keys_reload_failures_total`).
    pub fn reload_failures(&self) -> u64 {
        self.reload_failures.load(Ordering::Relaxed)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, (KeyRing, Option<Stamp>)> {
        match self.state.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, (KeyRing, Option<Stamp>)> {
        match self.state.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The tenant of `key` under the current keys (refreshed first).
    pub fn tenant_of(&self, key: &str) -> Option<String> {
        self.refresh();
        self.read().0.tenant_of(key).map(str::to_string)
    }

    /// Every tenant with a key now.
    pub fn tenants(&self) -> Vec<String> {
        self.read().0.tenants()
    }
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

    #[test]
    fn list_revoke_and_rotate_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let a = add_key(&path, "acme", "ci").unwrap();
        let b = add_key(&path, "acme", "prod").unwrap();
        let listed = list_keys(&path).unwrap();
        assert_eq!(listed.len(), 2);
        let id_a = key_id(&listed[0]).to_string();
        let id_b = key_id(&listed[1]).to_string();
        assert_eq!(id_a, hash_key(&a)[..12]);
        let e = revoke_key(&path, "abc").unwrap_err().to_string();
        assert!(e.contains("at least 8 hex digits"), "{e}");
        let e = revoke_key(&path, "00000000").unwrap_err().to_string();
        assert!(e.contains("no key has id"), "{e}");
        let (c, old) = rotate_key(&path, &id_b).unwrap();
        assert_eq!((old.tenant.as_str(), old.label.as_str()), ("acme", "prod"));
        let ring = KeyRing::load(&path).unwrap();
        assert_eq!(ring.tenant_of(&b), None, "the rotated key is gone");
        assert_eq!(ring.tenant_of(&c), Some("acme"));
        assert_eq!(list_keys(&path).unwrap()[1].label, "prod");
        revoke_key(&path, &id_a[..8]).unwrap();
        let ring = KeyRing::load(&path).unwrap();
        assert_eq!(ring.tenant_of(&a), None);
        assert_eq!(ring.len(), 1);
        #[cfg(unix)]
        assert_eq!(crate::private_file::mode(&path).unwrap(), Some(0o600));
    }

    #[test]
    fn live_keys_follow_the_file_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let a = add_key(&path, "acme", "").unwrap();
        let live = LiveKeys::watch(&path, 0).unwrap();
        assert_eq!(live.tenant_of(&a).as_deref(), Some("acme"));
        let b = add_key(&path, "acme", "").unwrap();
        assert_eq!(live.tenant_of(&b).as_deref(), Some("acme"), "added");
        let id = key_id(&list_keys(&path).unwrap()[0]).to_string();
        revoke_key(&path, &id).unwrap();
        assert_eq!(live.tenant_of(&a), None, "revoked");
        // A broken file keeps the keys that were loaded, and is counted.
        assert_eq!(live.reload_failures(), 0);
        std::fs::write(&path, "not toml [").unwrap();
        assert_eq!(live.tenant_of(&b).as_deref(), Some("acme"));
        assert_eq!(live.reload_failures(), 1);
        // Looked at again unchanged: not counted twice.
        assert_eq!(live.tenant_of(&b).as_deref(), Some("acme"));
        assert_eq!(live.reload_failures(), 1);
    }

    /// `serve keys add` from many processes at once (threads here, each
    /// with its own open lock file, which `flock` treats alike) loses no
    /// key: each read-modify-write holds the lock.
    #[test]
    fn concurrent_key_edits_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // In a folder that does not exist yet (a new data folder).
        let path = dir.path().join("new").join("keys.toml");
        let keys: Vec<String> = std::thread::scope(|s| {
            let hands: Vec<_> = (0..8)
                .map(|t| {
                    let path = &path;
                    s.spawn(move || {
                        (0..6)
                            .map(|k| add_key(path, "acme", &format!("{t}-{k}")).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hands.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let ring = KeyRing::load(&path).unwrap();
        assert_eq!(ring.len(), 48, "every added key is in the file");
        for k in &keys {
            assert_eq!(ring.tenant_of(k), Some("acme"));
        }
    }
}
