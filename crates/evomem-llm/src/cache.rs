//! The record/replay cache: every model call keyed by a hash, stored in SQLite.
//!
//! The key is the SHA-256 of `backend id \n model \n canonical request JSON`
//! (object keys sorted at every depth, so the key does not depend on map
//! order). The row stores the response text and its usage. Modes:
//!
//! - `off`: no cache; every call goes to the backend;
//! - `read-write`: a hit is served from the cache, a miss calls the backend
//!   and records the answer;
//! - `replay-only`: a hit is served, a miss is [`evomem_core::LlmError::CacheMiss`] naming
//!   the role and the key, and the backend is never called. A run replayed
//!   this way makes zero network calls.
//!
//! Answers live in table `llm_cache`. A call that failed for good (retries
//! exhausted, context too long, malformed body) and so made the run fall back
//! to the offline algorithm is noted in table `llm_failures`: `replay-only`
//! replays the failure (so the replay falls back exactly as the recording
//! did), while `read-write` ignores it and asks the backend again, so a flaky
//! server cannot poison later recordings. A later success deletes the note.

use crate::json::canonical;
use evomem_core::{ChatRequest, ChatResponse, Usage};
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;
use thiserror::Error;

/// How the cache is used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// No cache.
    #[default]
    Off,
    /// Serve hits, record misses.
    ReadWrite,
    /// Serve hits; a miss is an error; never call the backend.
    ReplayOnly,
}

impl FromStr for CacheMode {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "read-write" | "rw" => Ok(Self::ReadWrite),
            "replay-only" | "replay" => Ok(Self::ReplayOnly),
            other => Err(CacheError::BadMode {
                given: other.to_string(),
            }),
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::ReadWrite => "read-write",
            Self::ReplayOnly => "replay-only",
        })
    }
}

/// Cache mode plus the SQLite file. Default: off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheSettings {
    /// Mode.
    pub mode: CacheMode,
    /// SQLite file (required unless the mode is `off`).
    pub path: Option<PathBuf>,
}

impl CacheSettings {
    /// No cache.
    pub fn off() -> Self {
        Self::default()
    }
    /// Record into and serve from `path`.
    pub fn read_write(path: impl Into<PathBuf>) -> Self {
        Self {
            mode: CacheMode::ReadWrite,
            path: Some(path.into()),
        }
    }
    /// Serve only from `path`; a miss is an error.
    pub fn replay_only(path: impl Into<PathBuf>) -> Self {
        Self {
            mode: CacheMode::ReplayOnly,
            path: Some(path.into()),
        }
    }
}

/// Errors of the cache file.
#[derive(Debug, Error)]
pub enum CacheError {
    /// Unknown mode string.
    #[error("unknown LLM cache mode `{given}` (expected off, read-write or replay-only)")]
    BadMode {
        /// What was given.
        given: String,
    },
    /// A mode other than `off` without a file.
    #[error("LLM cache mode `{mode}` needs a cache file path")]
    NoPath {
        /// The mode.
        mode: CacheMode,
    },
    /// `replay-only` on a file that does not exist.
    #[error("LLM replay cache {path} does not exist")]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// SQLite failed.
    #[error("LLM cache {path}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: rusqlite::Error,
    },
    /// The cache lock was poisoned by a panic in another thread.
    #[error("LLM cache {path}: lock poisoned")]
    Poisoned {
        /// The file.
        path: PathBuf,
    },
}

/// The cache key of one request to one backend.
pub fn cache_key(backend_id: &str, model: &str, req: &ChatRequest) -> String {
    let req_json = serde_json::to_value(req)
        .map(|v| canonical(&v))
        .unwrap_or_default();
    let mut h = Sha256::new();
    h.update(backend_id.as_bytes());
    h.update(b"\n");
    h.update(model.as_bytes());
    h.update(b"\n");
    h.update(req_json.as_bytes());
    hex::encode(h.finalize())
}

/// An open cache file.
pub struct Cache {
    path: PathBuf,
    mode: CacheMode,
    conn: Mutex<Connection>,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("path", &self.path)
            .field("mode", &self.mode)
            .finish()
    }
}

impl Cache {
    /// Open the cache described by `settings`; `None` when the mode is `off`.
    pub fn open(settings: &CacheSettings) -> Result<Option<Cache>, CacheError> {
        if settings.mode == CacheMode::Off {
            return Ok(None);
        }
        let path = settings.path.clone().ok_or(CacheError::NoPath {
            mode: settings.mode,
        })?;
        if settings.mode == CacheMode::ReplayOnly && !path.exists() {
            return Err(CacheError::Missing { path });
        }
        let sql = |source| CacheError::Sqlite {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // A missing folder surfaces as a clear SQLite open error below.
            let _ = std::fs::create_dir_all(dir);
        }
        let conn = Connection::open(&path).map_err(sql)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS llm_cache (
                 key TEXT PRIMARY KEY,
                 role TEXT NOT NULL,
                 backend TEXT NOT NULL,
                 request TEXT NOT NULL,
                 response TEXT NOT NULL,
                 prompt_tokens INTEGER NOT NULL,
                 completion_tokens INTEGER NOT NULL
             );
             CREATE TABLE IF NOT EXISTS llm_failures (
                 key TEXT PRIMARY KEY,
                 role TEXT NOT NULL,
                 backend TEXT NOT NULL,
                 kind TEXT NOT NULL,
                 message TEXT NOT NULL
             );",
        )
        .map_err(sql)?;
        Ok(Some(Cache {
            path,
            mode: settings.mode,
            conn: Mutex::new(conn),
        }))
    }

    /// The mode.
    pub fn mode(&self) -> CacheMode {
        self.mode
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Look a key up.
    pub fn get(&self, key: &str) -> Result<Option<ChatResponse>, CacheError> {
        let conn = self.conn.lock().map_err(|_| CacheError::Poisoned {
            path: self.path.clone(),
        })?;
        conn.query_row(
            "SELECT response, prompt_tokens, completion_tokens FROM llm_cache WHERE key = ?1",
            params![key],
            |r| {
                Ok(ChatResponse {
                    text: r.get(0)?,
                    usage: Usage {
                        prompt_tokens: r.get::<_, i64>(1)?.max(0) as u64,
                        completion_tokens: r.get::<_, i64>(2)?.max(0) as u64,
                    },
                })
            },
        )
        .optional()
        .map_err(|source| CacheError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }

    /// Record an answer (replacing any previous one under the same key).
    pub fn put(
        &self,
        key: &str,
        role: &str,
        backend: &str,
        req: &ChatRequest,
        resp: &ChatResponse,
    ) -> Result<(), CacheError> {
        let req_json = serde_json::to_value(req)
            .map(|v| canonical(&v))
            .unwrap_or_default();
        let conn = self.conn.lock().map_err(|_| CacheError::Poisoned {
            path: self.path.clone(),
        })?;
        conn.execute(
            "INSERT OR REPLACE INTO llm_cache
             (key, role, backend, request, response, prompt_tokens, completion_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                key,
                role,
                backend,
                req_json,
                resp.text,
                resp.usage.prompt_tokens as i64,
                resp.usage.completion_tokens as i64
            ],
        )
        .map(|_| ())
        .map_err(|source| CacheError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }

    /// Note a final failure of `key` (`kind` is `transient`,
    /// `context_too_long` or `malformed`).
    pub fn put_failure(
        &self,
        key: &str,
        role: &str,
        backend: &str,
        kind: &str,
        message: &str,
    ) -> Result<(), CacheError> {
        let conn = self.lock()?;
        conn.execute(
            "INSERT OR REPLACE INTO llm_failures (key, role, backend, kind, message)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![key, role, backend, kind, message],
        )
        .map(|_| ())
        .map_err(|source| self.sql(source))
    }

    /// The noted failure of `key`, as `(kind, message)`.
    pub fn get_failure(&self, key: &str) -> Result<Option<(String, String)>, CacheError> {
        let conn = self.lock()?;
        conn.query_row(
            "SELECT kind, message FROM llm_failures WHERE key = ?1",
            params![key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(|source| self.sql(source))
    }

    /// Forget the failure note of `key` (after a success).
    pub fn clear_failure(&self, key: &str) -> Result<(), CacheError> {
        let conn = self.lock()?;
        conn.execute("DELETE FROM llm_failures WHERE key = ?1", params![key])
            .map(|_| ())
            .map_err(|source| self.sql(source))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Connection>, CacheError> {
        self.conn.lock().map_err(|_| CacheError::Poisoned {
            path: self.path.clone(),
        })
    }

    fn sql(&self, source: rusqlite::Error) -> CacheError {
        CacheError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Number of stored answers.
    pub fn len(&self) -> Result<u64, CacheError> {
        let conn = self.conn.lock().map_err(|_| CacheError::Poisoned {
            path: self.path.clone(),
        })?;
        conn.query_row("SELECT COUNT(*) FROM llm_cache", [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(|source| CacheError::Sqlite {
                path: self.path.clone(),
                source,
            })
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> Result<bool, CacheError> {
        Ok(self.len()? == 0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use evomem_core::ChatMessage;

    #[test]
    fn key_is_stable_and_sensitive() {
        let r = ChatRequest::new(vec![ChatMessage::user("hi")]);
        let k1 = cache_key("b", "m", &r);
        assert_eq!(k1, cache_key("b", "m", &r));
        assert_eq!(k1.len(), 64);
        assert_ne!(k1, cache_key("b", "m2", &r));
        let mut r2 = r.clone();
        r2.temperature = 0.5;
        assert_ne!(k1, cache_key("b", "m", &r2));
    }

    #[test]
    fn round_trip_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        assert!(matches!(
            Cache::open(&CacheSettings::replay_only(&path)),
            Err(CacheError::Missing { .. })
        ));
        assert!(matches!(
            Cache::open(&CacheSettings {
                mode: CacheMode::ReadWrite,
                path: None
            }),
            Err(CacheError::NoPath { .. })
        ));
        assert!(Cache::open(&CacheSettings::off()).unwrap().is_none());
        let c = Cache::open(&CacheSettings::read_write(&path))
            .unwrap()
            .unwrap();
        let r = ChatRequest::new(vec![ChatMessage::user("hi")]);
        let resp = ChatResponse {
            text: "{}".into(),
            usage: Usage {
                prompt_tokens: 3,
                completion_tokens: 1,
            },
        };
        assert!(c.get("k").unwrap().is_none());
        c.put("k", "rank", "b", &r, &resp).unwrap();
        assert_eq!(c.get("k").unwrap(), Some(resp.clone()));
        drop(c);
        let c = Cache::open(&CacheSettings::replay_only(&path))
            .unwrap()
            .unwrap();
        assert_eq!(c.get("k").unwrap(), Some(resp));
        assert_eq!(c.len().unwrap(), 1);
        assert!(c.get_failure("f").unwrap().is_none());
        c.put_failure("f", "rank", "b", "transient", "HTTP 500")
            .unwrap();
        assert_eq!(
            c.get_failure("f").unwrap(),
            Some(("transient".into(), "HTTP 500".into()))
        );
        c.clear_failure("f").unwrap();
        assert!(c.get_failure("f").unwrap().is_none());
        assert_eq!(
            "replay-only".parse::<CacheMode>().unwrap(),
            CacheMode::ReplayOnly
        );
        assert!("nope"
            .parse::<CacheMode>()
            .unwrap_err()
            .to_string()
            .contains("nope"));
    }
}
