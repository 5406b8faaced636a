//! [`SqliteStore`]: the embedded default store (rusqlite, bundled SQLite).
//!
//! Durability: WAL journal with `synchronous=FULL`, one transaction per
//! [`Commit`]; [`MemoryStore::commit`] returns only after SQLite's commit,
//! which has fsynced the WAL. A crash therefore loses no acknowledged batch
//! and never exposes part of one.
//!
//! Safety on open: the file must be a SQLite database that passes
//! `PRAGMA quick_check`, has evomem's `meta` table and a format version this
//! build understands; anything else is a [`StoreError`] naming the path.
//! `secure_delete` is on, so that [`MemoryStore::forget_user`] (followed by a
//! vacuum and a WAL truncation) leaves no trace of a user in the file.
//!
//! A new database file is created readable and writable by its owner only
//! (mode 0600 on Unix); SQLite gives its `-wal` and `-shm` files the mode of
//! the database file.

use crate::codec::{
    kind_text, op_body, parse_op, parse_record, parse_state, record_body, state_body, to_i64,
    to_u64, vector_bytes, vector_from_bytes,
};
use crate::error::StoreError;
use crate::store::{check_gap_free, check_version, Commit, MemoryStore, Snapshot, FORMAT_VERSION};
use evomem_core::{Embedding, LoggedOp, LogicalTime, MemoryRecord, MemoryState};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Transaction};
use std::path::{Path, PathBuf};

const SCHEMA_V1: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ops (seq INTEGER PRIMARY KEY, logical_time INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX ops_logical_time ON ops (logical_time);
CREATE TABLE snapshots (seq INTEGER PRIMARY KEY, logical_time INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE records (id TEXT PRIMARY KEY, namespace TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX records_namespace ON records (namespace);
CREATE TABLE vectors (id TEXT PRIMARY KEY, namespace TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX vectors_namespace ON vectors (namespace);
";

const TABLES: [&str; 5] = ["meta", "ops", "snapshots", "records", "vectors"];

/// The write keys ([`Commit::keys`]): made when missing, by any open (a
/// store written by an older build has none), so the format version
/// stays. A staged swap leaves it alone: the keys are of writes, not of
/// the log's content.
const KEYS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS write_keys (key TEXT PRIMARY KEY, request BLOB NOT NULL, created INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS write_keys_created ON write_keys (created);
";

/// The tables a staged swap replaces ([`MemoryStore::swap_in_staged`]).
const DATA_TABLES: [&str; 4] = ["ops", "snapshots", "records", "vectors"];

/// Prefix of the staging area's tables ([`MemoryStore::staging`]).
const STAGE: &str = "stage_";

/// Prefix of the tables a staged swap replaced, until
/// [`MemoryStore::clear_staging`] drops them.
const OLD: &str = "old_";

/// Rows deleted per transaction when [`MemoryStore::clear_staging`] empties
/// a table: each batch is a short write, so writers wait little.
const CLEAR_ROWS: usize = 256;

/// The staging area's tables, as [`SCHEMA_V1`]'s. Its indexes are named
/// with `tag` (they keep their names when the tables are renamed over the
/// live ones, so each staging area needs names no index has).
fn stage_schema(tag: &str) -> String {
    format!(
        "CREATE TABLE {STAGE}ops (seq INTEGER PRIMARY KEY, logical_time INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX ops_logical_time_{tag} ON {STAGE}ops (logical_time);
CREATE TABLE {STAGE}snapshots (seq INTEGER PRIMARY KEY, logical_time INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE {STAGE}records (id TEXT PRIMARY KEY, namespace TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX records_namespace_{tag} ON {STAGE}records (namespace);
CREATE TABLE {STAGE}vectors (id TEXT PRIMARY KEY, namespace TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX vectors_namespace_{tag} ON {STAGE}vectors (namespace);"
    )
}

/// A store in one SQLite file (plus its `-wal` and `-shm` companions).
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    version: u32,
    /// The tables this connection reads and writes: `""` for the live
    /// store, [`STAGE`] for its staging area ([`MemoryStore::staging`]).
    tables: &'static str,
}

/// `PRAGMA synchronous` value of FULL.
pub(crate) const SYNCHRONOUS_FULL: i64 = 2;

impl SqliteStore {
    /// Open the store at `path`, creating it (format version
    /// [`FORMAT_VERSION`]) when the file does not exist or is empty.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Ok(md) = std::fs::metadata(&path) {
            if !md.is_file() {
                return Err(StoreError::NotAStore {
                    location: path.display().to_string(),
                    detail: "not a regular file".to_string(),
                });
            }
        }
        let e = |source| sql_err(&path, source);
        create_private(&path)?;
        let conn = Connection::open(&path).map_err(e)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(e)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(e)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NotAStore {
                location: path.display().to_string(),
                detail: format!("cannot switch to WAL journal mode (got `{mode}`)"),
            });
        }
        conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA secure_delete=ON;")
            .map_err(e)?;
        // Read the setting back: a build or a file system that silently
        // ignores it would make every acknowledged commit a bet.
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .map_err(e)?;
        if sync != SYNCHRONOUS_FULL {
            return Err(StoreError::NotAStore {
                location: path.display().to_string(),
                detail: format!("cannot set synchronous=FULL (got {sync})"),
            });
        }
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(e)?;
        if check != "ok" {
            return Err(StoreError::Corrupt {
                location: path.display().to_string(),
                detail: format!("quick_check: {check}"),
            });
        }
        let mut names: Vec<String> = Vec::new();
        {
            let mut st = conn
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
                .map_err(e)?;
            let rows = st.query_map([], |r| r.get::<_, String>(0)).map_err(e)?;
            for n in rows {
                names.push(n.map_err(e)?);
            }
        }
        let version = if names.is_empty() {
            conn.execute_batch(&format!(
                "BEGIN; {SCHEMA_V1} INSERT INTO meta VALUES ('format_version', '{FORMAT_VERSION}'); COMMIT;"
            ))
            .map_err(e)?;
            FORMAT_VERSION
        } else {
            if !names.iter().any(|n| n == "meta") {
                return Err(StoreError::NotAStore {
                    location: path.display().to_string(),
                    detail: format!("no `meta` table (tables: {})", names.join(", ")),
                });
            }
            let v: Option<String> = conn
                .query_row(
                    "SELECT value FROM meta WHERE key = 'format_version'",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(e)?;
            let version = check_version(v.as_deref(), &path.display().to_string())?;
            for t in TABLES {
                if !names.iter().any(|n| n == t) {
                    return Err(StoreError::Corrupt {
                        location: path.display().to_string(),
                        detail: format!("table `{t}` is missing"),
                    });
                }
            }
            version
        };
        if !names.iter().any(|n| n == "write_keys") {
            conn.execute_batch(KEYS_SCHEMA).map_err(e)?;
        }
        Ok(Self {
            conn,
            path,
            version,
            tables: "",
        })
    }

    /// Lower `synchronous` to NORMAL on this connection: commits are then
    /// acknowledged before the WAL is fsynced, so a power loss can lose
    /// them. Only for the control of the power-loss test
    /// (`tests/it/crash.rs`), which must see that happen; never called by
    /// the engine or the service.
    #[doc(hidden)]
    pub fn weaken_durability_for_power_loss_control(&mut self) -> Result<(), StoreError> {
        self.conn
            .execute_batch("PRAGMA synchronous=NORMAL;")
            .map_err(self.err())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability settings as SQLite reports them now: the journal mode
    /// (`wal`) and the `synchronous` level (2 = FULL: every commit is
    /// fsynced before it is acknowledged).
    pub fn durability(&self) -> Result<(String, i64), StoreError> {
        let e = |source| sql_err(&self.path, source);
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(e)?;
        let sync: i64 = self
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .map_err(e)?;
        Ok((mode.to_lowercase(), sync))
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| sql_err(&self.path, source)
    }

    /// Refuse `what` on a staging area's connection: it is for the live
    /// store's.
    fn live_only(&self, what: &str) -> Result<(), StoreError> {
        match self.tables {
            "" => Ok(()),
            _ => Err(StoreError::Config(format!(
                "{what} is called on the store, not on its staging area ({})",
                self.location()
            ))),
        }
    }
}

/// Create `path` empty with mode 0600 when it does not exist yet (module
/// docs); an existing file is left as it is.
fn create_private(path: &Path) -> Result<(), StoreError> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    match o.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(StoreError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// What [`SqliteStore::copy_online`] copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyReport {
    /// Ops in the copy's log.
    pub ops: u64,
    /// Live records in the copy.
    pub records: usize,
}

impl SqliteStore {
    /// Copy the store at `src` to the new file `out` with SQLite's online
    /// backup API, while other connections (a running service) keep
    /// writing to `src`. The whole copy is one backup step, which reads
    /// `src` in one read transaction: in WAL mode writers are not blocked,
    /// and the copy is the database as of one commit, never a mix.
    ///
    /// `out` must not exist. The copy is written to `<out>.partial`
    /// (created 0600), fsynced, opened and checked as a store
    /// (`quick_check`, format version, tables), then renamed to `out`.
    /// Used both to back up (`src` is live) and to restore (`src` is a
    /// backup, `out` the tenant's new database file).
    pub fn copy_online(src: &Path, out: &Path) -> Result<CopyReport, StoreError> {
        use rusqlite::backup::{Backup, StepResult};
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io {
                path: path.clone(),
                source,
            }
        };
        if out.exists() {
            return Err(io(out)(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "the copy's destination already exists; choose a new file",
            )));
        }
        if !src.is_file() {
            return Err(StoreError::NotAStore {
                location: src.display().to_string(),
                detail: "no such database file".to_string(),
            });
        }
        // Check the source the way the service opens it.
        drop(Self::open(src)?);
        let mut partial = out.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let _ = std::fs::remove_file(&partial);
        create_private(&partial)?;
        let result = (|| {
            let from = Connection::open(src).map_err(|s| sql_err(src, s))?;
            from.busy_timeout(std::time::Duration::from_secs(10))
                .map_err(|s| sql_err(src, s))?;
            let mut to = Connection::open(&partial).map_err(|s| sql_err(&partial, s))?;
            {
                let backup = Backup::new(&from, &mut to).map_err(|s| sql_err(&partial, s))?;
                let mut waits = 0;
                loop {
                    // -1: every page in one step, in one read transaction.
                    match backup.step(-1).map_err(|s| sql_err(src, s))? {
                        StepResult::Done => break,
                        StepResult::More => {}
                        _busy_or_locked => {
                            waits += 1;
                            if waits > 1000 {
                                return Err(StoreError::Corrupt {
                                    location: src.display().to_string(),
                                    detail: "the backup could not read the database for 10 s"
                                        .to_string(),
                                });
                            }
                            std::thread::sleep(std::time::Duration::from_millis(10));
                        }
                    }
                }
            }
            to.close().map_err(|(_, s)| sql_err(&partial, s))?;
            std::fs::File::open(&partial)
                .and_then(|f| f.sync_all())
                .map_err(io(&partial))?;
            let mut copy = Self::open(&partial)?;
            let report = CopyReport {
                ops: copy.last_seq()?,
                records: copy.load_records()?.len(),
            };
            // Fold the copy's WAL into the file before it is renamed.
            copy.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                })
                .map_err(|s| sql_err(&partial, s))?;
            copy.conn
                .execute_batch("PRAGMA journal_mode=DELETE;")
                .map_err(|s| sql_err(&partial, s))?;
            drop(copy);
            std::fs::rename(&partial, out).map_err(io(out))?;
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
                #[cfg(unix)]
                std::fs::File::open(dir)
                    .and_then(|f| f.sync_all())
                    .map_err(io(dir))?;
                #[cfg(not(unix))]
                let _ = dir;
            }
            Ok(report)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        for side in ["-wal", "-shm"] {
            let mut p = partial.as_os_str().to_owned();
            p.push(side);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        result
    }
}

fn sql_err(path: &Path, source: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(f, _) = &source {
        if matches!(f.code, ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) {
            return StoreError::Corrupt {
                location: path.display().to_string(),
                detail: source.to_string(),
            };
        }
    }
    StoreError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

fn write_record(
    tx: &Transaction<'_>,
    p: &str,
    r: &MemoryRecord,
    path: &Path,
) -> Result<(), StoreError> {
    let location = path.display().to_string();
    let e = |source| sql_err(path, source);
    let body = record_body(r, &location)?;
    tx.prepare_cached(&format!(
        "INSERT OR REPLACE INTO {p}records (id, namespace, kind, body) VALUES (?1, ?2, ?3, ?4)"
    ))
    .and_then(|mut st| {
        st.execute(params![
            r.id.as_str(),
            r.namespace.as_str(),
            kind_text(r),
            body
        ])
    })
    .map_err(e)?;
    match &r.embedding {
        Some(emb) => tx
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO {p}vectors (id, namespace, model, dim, data) VALUES (?1, ?2, ?3, ?4, ?5)"
            ))
            .and_then(|mut st| {
                st.execute(params![
                    r.id.as_str(),
                    r.namespace.as_str(),
                    emb.model,
                    emb.vector.len() as i64,
                    vector_bytes(&emb.vector)
                ])
            })
            .map_err(e)?,
        None => tx
            .prepare_cached(&format!("DELETE FROM {p}vectors WHERE id = ?1"))
            .and_then(|mut st| st.execute(params![r.id.as_str()]))
            .map_err(e)?,
    };
    Ok(())
}

fn write_op(tx: &Transaction<'_>, p: &str, op: &LoggedOp, path: &Path) -> Result<(), StoreError> {
    let location = path.display().to_string();
    let seq = to_i64(op.seq, "seq", &location)?;
    let at = to_i64(op.provenance.logical_time.0, "logical time", &location)?;
    let body = op_body(op, &location)?;
    tx.prepare_cached(&format!(
        "INSERT INTO {p}ops (seq, logical_time, body) VALUES (?1, ?2, ?3)"
    ))
    .and_then(|mut st| st.execute(params![seq, at, body]))
    .map_err(|source| sql_err(path, source))?;
    Ok(())
}

fn write_snapshot(
    tx: &Transaction<'_>,
    p: &str,
    seq: u64,
    at: LogicalTime,
    state: &MemoryState,
    path: &Path,
) -> Result<(), StoreError> {
    let location = path.display().to_string();
    let seq = to_i64(seq, "seq", &location)?;
    let at = to_i64(at.0, "logical time", &location)?;
    let body = state_body(state, &location)?;
    tx.prepare_cached(&format!(
        "INSERT OR REPLACE INTO {p}snapshots (seq, logical_time, body) VALUES (?1, ?2, ?3)"
    ))
    .and_then(|mut st| st.execute(params![seq, at, body]))
    .map_err(|source| sql_err(path, source))?;
    Ok(())
}

/// Store `c`'s write keys in `tx`, refusing the commit when one is stored
/// already ([`StoreError::DuplicateKey`]; the caller drops `tx`, so nothing
/// of the commit stays), and now and then ([`crate::store::prune_keys_now`])
/// prune keys past [`crate::WRITE_KEY_KEEP_S`].
fn write_keys(
    tx: &Transaction<'_>,
    c: &Commit<'_>,
    location: &str,
    path: &Path,
) -> Result<(), StoreError> {
    if c.keys.is_empty() {
        return Ok(());
    }
    let e = |source| sql_err(path, source);
    let now = crate::store::unix_now();
    for k in c.keys {
        let added = tx
            .prepare_cached(
                "INSERT INTO write_keys (key, request, created) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (key) DO NOTHING",
            )
            .and_then(|mut st| st.execute(params![k.key, k.request.as_slice(), now]))
            .map_err(e)?;
        if added == 0 {
            return Err(StoreError::DuplicateKey {
                location: location.to_string(),
                key: k.key.clone(),
            });
        }
    }
    if crate::store::prune_keys_now(&c.keys[0].key) {
        tx.prepare_cached("DELETE FROM write_keys WHERE created < ?1")
            .and_then(|mut st| st.execute(params![now.saturating_sub(crate::WRITE_KEY_KEEP_S)]))
            .map_err(e)?;
    }
    Ok(())
}

impl MemoryStore for SqliteStore {
    fn location(&self) -> String {
        match self.tables {
            "" => self.path.display().to_string(),
            _ => format!("{} (staging)", self.path.display()),
        }
    }

    fn format_version(&self) -> u32 {
        self.version
    }

    fn commit(&mut self, c: &Commit<'_>) -> Result<(), StoreError> {
        let location = self.location();
        let path = self.path.clone();
        let p = self.tables;
        let e = |source| sql_err(&path, source);
        // IMMEDIATE: the write lock is taken at BEGIN, waiting for another
        // writer (a staging area's connection, [`MemoryStore::staging`])
        // as long as the busy timeout allows. A deferred transaction that
        // reads first fails at once with `database is locked` when another
        // connection commits between its read and its first write.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e)?;
        let last: i64 = tx
            .query_row(
                &format!("SELECT COALESCE(MAX(seq), 0) FROM {p}ops"),
                [],
                |r| r.get(0),
            )
            .map_err(e)?;
        check_gap_free(c.ops, to_u64(last, "seq", &location)? + 1, &location)?;
        for op in c.ops {
            write_op(&tx, p, op, &path)?;
        }
        for id in c.deletes {
            tx.prepare_cached(&format!("DELETE FROM {p}records WHERE id = ?1"))
                .and_then(|mut s| s.execute(params![id.as_str()]))
                .map_err(e)?;
            tx.prepare_cached(&format!("DELETE FROM {p}vectors WHERE id = ?1"))
                .and_then(|mut s| s.execute(params![id.as_str()]))
                .map_err(e)?;
        }
        for r in c.upserts {
            write_record(&tx, p, r, &path)?;
        }
        if let Some((seq, at, state)) = c.snapshot {
            write_snapshot(&tx, p, seq, at, state, &path)?;
        }
        write_keys(&tx, c, &location, &path)?;
        tx.commit().map_err(e)
    }

    fn committed_key(&mut self, key: &str) -> Result<Option<[u8; 32]>, StoreError> {
        let e = self.err();
        let since = crate::store::unix_now().saturating_sub(crate::WRITE_KEY_KEEP_S);
        let found: Option<Vec<u8>> = self
            .conn
            .prepare_cached("SELECT request FROM write_keys WHERE key = ?1 AND created >= ?2")
            .and_then(|mut st| st.query_row(params![key, since], |r| r.get(0)).optional())
            .map_err(&e)?;
        Ok(found.map(|b| crate::store::digest_of(&b)))
    }

    fn load_ops(&mut self, after: u64, upto: u64) -> Result<Vec<LoggedOp>, StoreError> {
        let location = self.location();
        let p = self.tables;
        let e = self.err();
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT seq, body FROM {p}ops WHERE seq > ?1 AND seq <= ?2 ORDER BY seq"
            ))
            .map_err(&e)?;
        let lo = i64::try_from(after).unwrap_or(i64::MAX);
        let hi = i64::try_from(upto).unwrap_or(i64::MAX);
        let rows = st
            .query_map(params![lo, hi], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(&e)?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, body) = row.map_err(&e)?;
            out.push(parse_op(to_u64(seq, "seq", &location)?, &body, &location)?);
        }
        check_gap_free(&out, after + 1, &location)?;
        Ok(out)
    }

    /// Read in one read transaction, so that a rewrite committed by
    /// another connection meanwhile (a user deletion) cannot mix into it.
    fn state_at_consistent(&mut self, t: LogicalTime) -> Result<MemoryState, StoreError> {
        self.conn.execute_batch("BEGIN").map_err(self.err())?;
        let r = self.state_at(t);
        let end = self
            .conn
            .execute_batch(if r.is_ok() { "COMMIT" } else { "ROLLBACK" });
        let state = r?;
        end.map_err(self.err())?;
        Ok(state)
    }

    fn last_seq(&mut self) -> Result<u64, StoreError> {
        let p = self.tables;
        let v: i64 = self
            .conn
            .query_row(
                &format!("SELECT COALESCE(MAX(seq), 0) FROM {p}ops"),
                [],
                |r| r.get(0),
            )
            .map_err(self.err())?;
        to_u64(v, "seq", &self.location())
    }

    fn prefix_end(&mut self, t: LogicalTime) -> Result<u64, StoreError> {
        let p = self.tables;
        let t = i64::try_from(t.0).unwrap_or(i64::MAX);
        let first_later: Option<i64> = self
            .conn
            .query_row(
                &format!("SELECT MIN(seq) FROM {p}ops WHERE logical_time > ?1"),
                params![t],
                |r| r.get(0),
            )
            .map_err(self.err())?;
        match first_later {
            Some(s) => Ok(to_u64(s, "seq", &self.location())?.saturating_sub(1)),
            None => self.last_seq(),
        }
    }

    fn latest_snapshot(&mut self, upto: u64) -> Result<Option<Snapshot>, StoreError> {
        let location = self.location();
        let p = self.tables;
        let hi = i64::try_from(upto).unwrap_or(i64::MAX);
        let row: Option<(i64, i64, String)> = self
            .conn
            .query_row(
                &format!("SELECT seq, logical_time, body FROM {p}snapshots WHERE seq <= ?1 ORDER BY seq DESC LIMIT 1"),
                params![hi],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(self.err())?;
        let Some((seq, at, body)) = row else {
            return Ok(None);
        };
        let seq = to_u64(seq, "seq", &location)?;
        Ok(Some(Snapshot {
            seq,
            at: LogicalTime(to_u64(at, "logical time", &location)?),
            state: parse_state(seq, &body, &location)?,
        }))
    }

    fn snapshot_seqs(&mut self) -> Result<Vec<u64>, StoreError> {
        let location = self.location();
        let p = self.tables;
        let e = self.err();
        let mut st = self
            .conn
            .prepare_cached(&format!("SELECT seq FROM {p}snapshots ORDER BY seq"))
            .map_err(&e)?;
        let rows = st.query_map([], |r| r.get::<_, i64>(0)).map_err(&e)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(to_u64(row.map_err(&e)?, "seq", &location)?);
        }
        Ok(out)
    }

    fn load_records(&mut self) -> Result<Vec<MemoryRecord>, StoreError> {
        let location = self.location();
        let p = self.tables;
        let e = self.err();
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT r.id, r.body, v.model, v.data FROM {p}records r LEFT JOIN {p}vectors v ON v.id = r.id ORDER BY r.id"
            ))
            .map_err(&e)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<Vec<u8>>>(3)?,
                ))
            })
            .map_err(&e)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, body, model, data) = row.map_err(&e)?;
            let mut rec = parse_record(&id, &body, &location)?;
            if let (Some(model), Some(data)) = (model, data) {
                rec.embedding = Some(Embedding {
                    model,
                    vector: vector_from_bytes(&data, &id, &location)?,
                });
            }
            out.push(rec);
        }
        Ok(out)
    }

    /// Tables `stage_*` in this file, through a connection of their own.
    fn staging(&mut self) -> Result<Box<dyn MemoryStore>, StoreError> {
        self.live_only("staging")?;
        self.clear_staging()?;
        let mut stage = Self::open(&self.path)?;
        stage.tables = STAGE;
        let tag = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        stage
            .conn
            .execute_batch(&format!(
                "BEGIN; {} COMMIT;",
                stage_schema(&format!("{tag:x}"))
            ))
            .map_err(self.err())?;
        Ok(Box::new(stage))
    }

    /// Renames, in one transaction: the live tables to `old_*`, the
    /// staging tables to the live names. Other connections (the engine's,
    /// the `as_of` reader's) see the new tables from their next
    /// statement, which SQLite prepares again for the new schema.
    fn swap_in_staged(
        &mut self,
        staged: Box<dyn MemoryStore>,
        last_seq: u64,
    ) -> Result<(), StoreError> {
        self.live_only("swap_in_staged")?;
        let location = self.location();
        if staged.location() != format!("{location} (staging)") {
            return Err(StoreError::Config(format!(
                "{} is not the staging area of {location}",
                staged.location()
            )));
        }
        drop(staged);
        let path = self.path.clone();
        let e = |source| sql_err(&path, source);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e)?;
        let last = |t: &str| -> Result<u64, StoreError> {
            let v: i64 = tx
                .query_row(&format!("SELECT COALESCE(MAX(seq), 0) FROM {t}"), [], |r| {
                    r.get(0)
                })
                .map_err(e)?;
            to_u64(v, "seq", &location)
        };
        crate::store::check_ends_at(last("ops")?, last("stage_ops")?, last_seq, &location)?;
        let mut sql = String::new();
        for t in DATA_TABLES {
            // A replaced table clear_staging has not dropped yet (it runs
            // before each staging area is made, so this is rare).
            sql.push_str(&format!(
                "DROP TABLE IF EXISTS {OLD}{t}; ALTER TABLE {t} RENAME TO {OLD}{t}; ALTER TABLE {STAGE}{t} RENAME TO {t};"
            ));
        }
        tx.execute_batch(&sql).map_err(e)?;
        tx.commit().map_err(e)
    }

    fn clear_staging(&mut self) -> Result<(), StoreError> {
        self.live_only("clear_staging")?;
        let e = self.err();
        let names: Vec<String> = {
            let mut st = self
                .conn
                .prepare(
                    "SELECT name FROM sqlite_master WHERE type = 'table' \
                     AND (name LIKE 'stage\\_%' ESCAPE '\\' OR name LIKE 'old\\_%' ESCAPE '\\')",
                )
                .map_err(&e)?;
            let rows = st.query_map([], |r| r.get::<_, String>(0)).map_err(&e)?;
            rows.collect::<Result<_, _>>().map_err(&e)?
        };
        for t in names {
            loop {
                let n = self
                    .conn
                    .execute(
                        &format!(
                            "DELETE FROM \"{t}\" WHERE rowid IN (SELECT rowid FROM \"{t}\" LIMIT {CLEAR_ROWS})"
                        ),
                        [],
                    )
                    .map_err(&e)?;
                if n == 0 {
                    break;
                }
            }
            self.conn
                .execute_batch(&format!("DROP TABLE \"{t}\";"))
                .map_err(&e)?;
        }
        Ok(())
    }

    fn replace_all(
        &mut self,
        log: &[LoggedOp],
        state: &MemoryState,
        snapshots: &[crate::store::Snapshot],
    ) -> Result<(), StoreError> {
        let location = self.location();
        check_gap_free(log, 1, &location)?;
        let path = self.path.clone();
        let p = self.tables;
        let e = |source| sql_err(&path, source);
        // IMMEDIATE: the write lock is taken at BEGIN, waiting for another
        // writer (a staging area's connection, [`MemoryStore::staging`])
        // as long as the busy timeout allows. A deferred transaction that
        // reads first fails at once with `database is locked` when another
        // connection commits between its read and its first write.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e)?;
        tx.execute_batch(&format!(
            "DELETE FROM {p}ops; DELETE FROM {p}snapshots; DELETE FROM {p}records; DELETE FROM {p}vectors;"
        ))
        .map_err(e)?;
        for op in log {
            write_op(&tx, p, op, &path)?;
        }
        for r in state.iter_all() {
            write_record(&tx, p, r, &path)?;
        }
        for s in snapshots {
            write_snapshot(&tx, p, s.seq, s.at, &s.state, &path)?;
        }
        tx.commit().map_err(e)?;
        // Purge the old content from free pages and from the WAL.
        self.conn.execute_batch("VACUUM;").map_err(e)?;
        let busy: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(e)?;
        if busy != 0 {
            return Err(StoreError::Corrupt {
                location,
                detail: "WAL checkpoint after forget was blocked by another connection".to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Engine;
    use evomem_core::{MemoryId, MemoryOp, Namespace, PlannedOp, RecordKind};

    #[cfg(unix)]
    fn mode(p: &Path) -> u32 {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    }

    #[cfg(unix)]
    #[test]
    fn a_new_database_and_its_wal_are_private_to_their_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sqlite");
        let mut e = Engine::sqlite(&path).unwrap();
        let rec = MemoryRecord::new(
            MemoryId::new("m"),
            Namespace::user("u"),
            RecordKind::Profile,
            "x",
            LogicalTime(1),
        );
        e.apply(
            "t",
            vec![PlannedOp::new(MemoryOp::Create { record: rec }, "t", "t")],
            LogicalTime(1),
        )
        .unwrap();
        assert_eq!(mode(&path), 0o600);
        for companion in ["t.sqlite-wal", "t.sqlite-shm"] {
            let p = dir.path().join(companion);
            assert!(p.exists(), "{companion}");
            assert_eq!(mode(&p), 0o600, "{companion}");
        }
    }

    /// Write keys past [`crate::WRITE_KEY_KEEP_S`] are not found, and a
    /// keyed commit that prunes ([`crate::store::prune_keys_now`]) deletes
    /// them; younger keys stay.
    #[test]
    fn write_keys_past_their_day_are_not_found_and_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SqliteStore::open(dir.path().join("k.sqlite")).unwrap();
        let op = |seq: u64| LoggedOp {
            seq,
            op: MemoryOp::Forget {
                id: MemoryId::new("none"),
            },
            provenance: evomem_core::Provenance {
                policy: "t".into(),
                label: "t".into(),
                reason: String::new(),
                sources: vec![],
                logical_time: LogicalTime(seq),
                wall_time_ms: 0,
            },
        };
        let key = |k: &str| crate::WriteKey {
            key: k.to_string(),
            request: [1; 32],
        };
        let keyed = |s: &mut SqliteStore, seq: u64, k: &str| {
            s.commit(&Commit {
                ops: &[op(seq)],
                upserts: &[],
                deletes: &[],
                snapshot: None,
                keys: &[key(k)],
            })
            .unwrap();
        };
        keyed(&mut s, 1, "old");
        keyed(&mut s, 2, "young");
        let day_ago = crate::store::unix_now() - crate::WRITE_KEY_KEEP_S - 10;
        s.conn
            .execute(
                "UPDATE write_keys SET created = ?1 WHERE key = 'old'",
                params![day_ago],
            )
            .unwrap();
        assert_eq!(s.committed_key("old").unwrap(), None, "expired");
        assert_eq!(s.committed_key("young").unwrap(), Some([1; 32]));
        let pruning = (0..10_000)
            .map(|i| format!("p{i}"))
            .find(|k| crate::store::prune_keys_now(k))
            .unwrap();
        let rows = |s: &SqliteStore| -> i64 {
            s.conn
                .query_row("SELECT COUNT(*) FROM write_keys", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(rows(&s), 2);
        keyed(&mut s, 3, &pruning);
        assert_eq!(rows(&s), 2, "the old key pruned, the new one stored");
        assert_eq!(s.committed_key(&pruning).unwrap(), Some([1; 32]));
        assert_eq!(s.committed_key("young").unwrap(), Some([1; 32]));
    }

    /// The store and its staging area commit at once from two threads (the
    /// service's writers while a re-embed stages its log): every commit
    /// goes through. With deferred transactions, which read the log's end
    /// before they write, one failed at once with `database is locked`.
    #[test]
    fn a_staging_area_and_the_store_commit_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let mut live = SqliteStore::open(&path).unwrap();
        let mut stage = live.staging().unwrap();
        let op = |seq: u64| LoggedOp {
            seq,
            op: MemoryOp::Create {
                record: MemoryRecord::new(
                    MemoryId::new(format!("m{seq}")),
                    Namespace::user("u"),
                    RecordKind::Profile,
                    "x".repeat(2000),
                    LogicalTime(seq),
                ),
            },
            provenance: evomem_core::Provenance {
                policy: "t".into(),
                label: "t".into(),
                reason: String::new(),
                sources: vec![],
                logical_time: LogicalTime(seq),
                wall_time_ms: 0,
            },
        };
        let commits = |s: &mut dyn MemoryStore| {
            for seq in 1..=300 {
                s.commit(&Commit {
                    ops: &[op(seq)],
                    upserts: &[],
                    deletes: &[],
                    snapshot: None,
                    keys: &[],
                })
                .unwrap();
            }
        };
        std::thread::scope(|sc| {
            sc.spawn(|| commits(&mut live));
            sc.spawn(|| commits(stage.as_mut()));
        });
        assert_eq!(live.last_seq().unwrap(), 300);
        assert_eq!(stage.last_seq().unwrap(), 300);
    }

    /// The store's durability settings, read back from SQLite after open and
    /// after a reopen: WAL journal and synchronous=FULL (every acknowledged
    /// commit was fsynced). A SIGKILL keeps the page cache, so the crash test
    /// alone cannot tell FULL from OFF; this can.
    #[test]
    fn sqlite_store_runs_wal_with_synchronous_full() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.sqlite");
        for _ in 0..2 {
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(
                store.durability().unwrap(),
                ("wal".to_string(), SYNCHRONOUS_FULL)
            );
        }
    }
}
