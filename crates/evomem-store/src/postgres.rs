//! [`PostgresStore`]: the scale-out store (PostgreSQL through the synchronous
//! `postgres` client).
//!
//! Same tables as the SQLite store, inside one PostgreSQL schema per store
//! (so that several stores, or test runs, share a database without seeing
//! each other). Vectors are `real[]` columns: Debian's PostgreSQL has no
//! pgvector, and search runs in the in-process index anyway. A commit is one
//! transaction, durable before `COMMIT` returns: each session sets
//! `synchronous_commit = on` and reads it back, with the server's `fsync`,
//! and refuses to run when either is off (a server or role default of
//! `off` would make every acknowledged commit a bet).
//!
//! TLS (`pg_tls.rs`): `sslmode=verify-full` with `sslrootcert` (the
//! CA and the host name checked) or `require` (encrypted, unauthenticated)
//! connect through rustls; plain text goes to a loopback host or a local
//! socket, and to another machine only when the URL says
//! `sslmode=disable`.

use crate::codec::{
    kind_text, op_body, parse_op, parse_record, parse_state, record_body, state_body, to_i64,
    to_u64,
};
use crate::error::StoreError;
use crate::pg_tls::{self, Tls};
use crate::store::{check_gap_free, check_version, Commit, MemoryStore, Snapshot, FORMAT_VERSION};
use evomem_core::{Embedding, LoggedOp, LogicalTime, MemoryRecord, MemoryState};
use postgres::{Client, Transaction};

const TABLES: [&str; 5] = ["meta", "ops", "snapshots", "records", "vectors"];

/// The tables a staged swap replaces ([`MemoryStore::swap_in_staged`]).
const DATA_TABLES: [&str; 4] = ["ops", "snapshots", "records", "vectors"];

/// Prefix of the staging area's tables ([`MemoryStore::staging`]).
const STAGE: &str = "stage_";

/// Prefix of the tables a staged swap replaces, inside its transaction.
const OLD: &str = "old_";

/// A store in one schema of a PostgreSQL database.
pub struct PostgresStore {
    client: Client,
    location: String,
    schema: String,
    version: u32,
    /// The connection URL, to open the staging area's own session
    /// ([`MemoryStore::staging`]); never shown.
    url: String,
    /// The tables this session reads and writes: `""` for the live store,
    /// [`STAGE`] for its staging area.
    prefix: &'static str,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .field("version", &self.version)
            .finish()
    }
}

/// The default schema of [`crate::Engine::postgres`].
pub const DEFAULT_SCHEMA: &str = "evomem";

fn check_schema(schema: &str) -> Result<(), StoreError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(StoreError::Config(format!(
            "PostgreSQL schema name `{schema}` must be 1-63 characters of [a-z0-9_], not starting with a digit"
        )))
    }
}

/// Refuse a session whose commits would not be durable when acknowledged.
fn check_durability(
    synchronous_commit: &str,
    fsync: &str,
    location: &str,
) -> Result<(), StoreError> {
    if synchronous_commit.eq_ignore_ascii_case("off") {
        return Err(StoreError::NotAStore {
            location: location.to_string(),
            detail:
                "synchronous_commit is off after setting it on: acknowledged commits could be lost"
                    .to_string(),
        });
    }
    if fsync.eq_ignore_ascii_case("off") {
        return Err(StoreError::NotAStore {
            location: location.to_string(),
            detail:
                "the server runs with fsync=off: acknowledged commits could be lost in a power loss"
                    .to_string(),
        });
    }
    Ok(())
}

/// `host:port/db` of a connection URL, without user or password.
fn describe(url: &str, schema: &str) -> Result<(postgres::Config, Tls, String), StoreError> {
    let (config, tls) = pg_tls::plan(url)?;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(s) => s.clone(),
            postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(|p| p.to_string()).collect();
    let loc = format!(
        "postgres://{}:{}/{} (schema {schema})",
        hosts.join(","),
        ports.join(","),
        config.get_dbname().unwrap_or("")
    );
    Ok((config, tls, loc))
}

fn read_durability(client: &mut Client) -> Result<(String, String), postgres::Error> {
    let sync: String = client.query_one("SHOW synchronous_commit", &[])?.get(0);
    let fsync: String = client.query_one("SHOW fsync", &[])?.get(0);
    Ok((sync, fsync))
}

impl PostgresStore {
    /// Connect to `url` and open (or create, at format version
    /// [`FORMAT_VERSION`]) the store in `schema`.
    pub fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        check_schema(schema)?;
        let (config, tls, location) = describe(url, schema)?;
        let pe = |source| StoreError::Postgres {
            location: location.clone(),
            source,
        };
        let mut client = pg_tls::connect(&config, &tls, &location)?;
        // Make commits durable for this session whatever the server's or
        // role's default, and read the settings back.
        client
            .batch_execute("SET synchronous_commit = on")
            .map_err(pe)?;
        let (sync, fsync) = read_durability(&mut client).map_err(pe)?;
        check_durability(&sync, &fsync, &location)?;
        client
            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .map_err(pe)?;
        let names: Vec<String> = client
            .query(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
                &[&schema],
            )
            .map_err(pe)?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect();
        let version = if names.is_empty() {
            let s = schema;
            client
                .batch_execute(&format!(
                    "BEGIN;
                     CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL);
                     CREATE TABLE {s}.ops (seq bigint PRIMARY KEY, logical_time bigint NOT NULL, body text NOT NULL);
                     CREATE INDEX ON {s}.ops (logical_time);
                     CREATE TABLE {s}.snapshots (seq bigint PRIMARY KEY, logical_time bigint NOT NULL, body text NOT NULL);
                     CREATE TABLE {s}.records (id text PRIMARY KEY, namespace text NOT NULL, kind text NOT NULL, body text NOT NULL);
                     CREATE INDEX ON {s}.records (namespace);
                     CREATE TABLE {s}.vectors (id text PRIMARY KEY, namespace text NOT NULL, model text NOT NULL, dim integer NOT NULL, data real[] NOT NULL);
                     CREATE INDEX ON {s}.vectors (namespace);
                     INSERT INTO {s}.meta VALUES ('format_version', '{FORMAT_VERSION}');
                     COMMIT;"
                ))
                .map_err(pe)?;
            FORMAT_VERSION
        } else {
            if !names.iter().any(|n| n == "meta") {
                return Err(StoreError::NotAStore {
                    location,
                    detail: format!("no `meta` table (tables: {})", names.join(", ")),
                });
            }
            let v: Option<String> = client
                .query_opt(
                    &*format!("SELECT value FROM {schema}.meta WHERE key = 'format_version'"),
                    &[],
                )
                .map_err(pe)?
                .map(|r| r.get(0));
            let version = check_version(v.as_deref(), &location)?;
            for t in TABLES {
                if !names.iter().any(|n| n == t) {
                    return Err(StoreError::Corrupt {
                        location,
                        detail: format!("table `{t}` is missing"),
                    });
                }
            }
            version
        };
        // The write keys (crate::Commit::keys): made when missing, as in
        // the SQLite store (a schema of an older build has none). Only
        // then: DDL on every open costs a tenant reopen milliseconds.
        if !names.iter().any(|n| n == "write_keys") {
            client
                .batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS {schema}.write_keys (key text PRIMARY KEY, request bytea NOT NULL, created bigint NOT NULL);
                     CREATE INDEX IF NOT EXISTS write_keys_created ON {schema}.write_keys (created);"
                ))
                .map_err(pe)?;
        }
        Ok(Self {
            client,
            location,
            schema: schema.to_string(),
            version,
            url: url.to_string(),
            prefix: "",
        })
    }

    /// The schemas of the database at `url` whose names start with
    /// `prefix`, in one query on one connection: which stores exist,
    /// without opening (or creating) any.
    pub fn schemas_with_prefix(
        url: &str,
        prefix: &str,
    ) -> Result<std::collections::BTreeSet<String>, StoreError> {
        let (config, tls, location) = describe(url, "public")?;
        let mut client = pg_tls::connect(&config, &tls, &location)?;
        let rows = client
            .query(
                "SELECT nspname::text FROM pg_namespace WHERE left(nspname, length($1)) = $1",
                &[&prefix],
            )
            .map_err(|source| StoreError::Postgres { location, source })?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    /// Drop a store's schema and everything in it (tests, benchmarks).
    pub fn drop_schema(url: &str, schema: &str) -> Result<(), StoreError> {
        check_schema(schema)?;
        let (config, tls, location) = describe(url, schema)?;
        let pe = |source| StoreError::Postgres {
            location: location.clone(),
            source,
        };
        let mut client = pg_tls::connect(&config, &tls, &location)?;
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .map_err(pe)
    }

    /// The durability settings as the server reports them for this
    /// session: `synchronous_commit` (`on`) and `fsync` (`on`).
    pub fn durability(&mut self) -> Result<(String, String), StoreError> {
        let location = self.location.clone();
        read_durability(&mut self.client)
            .map_err(|source| StoreError::Postgres { location, source })
    }

    /// The schema this store lives in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// `schema.prefix`: what this session's table names follow (`{s}ops`).
    fn tables(&self) -> String {
        format!("{}.{}", self.schema, self.prefix)
    }

    /// Refuse `what` on a staging area's session: it is for the live
    /// store's.
    fn live_only(&self, what: &str) -> Result<(), StoreError> {
        match self.prefix {
            "" => Ok(()),
            _ => Err(StoreError::Config(format!(
                "{what} is called on the store, not on its staging area ({})",
                self.location
            ))),
        }
    }

    fn pe(&self) -> impl Fn(postgres::Error) -> StoreError + '_ {
        move |source| StoreError::Postgres {
            location: self.location.clone(),
            source,
        }
    }
}

/// A unique violation on the op log's sequence (two instances appending
/// at once) or a serialization failure is a lost race, not a fault.
fn lost_race(e: StoreError, location: &str) -> StoreError {
    if let StoreError::Postgres { source, .. } = &e {
        let code = source.code().map(|c| c.code());
        if matches!(code, Some("23505" | "40001" | "40P01")) {
            return StoreError::Conflict {
                location: location.to_string(),
                detail: source.to_string(),
            };
        }
    }
    e
}

/// Store `keys` in `tx` (the schema's `write_keys`, whatever session
/// prefix), refusing the commit when one is stored already
/// ([`StoreError::DuplicateKey`]; the caller drops `tx`, so nothing of the
/// commit stays; a concurrent commit of the same key waits for the first
/// and then finds it), and now and then ([`crate::store::prune_keys_now`])
/// prune keys past [`crate::WRITE_KEY_KEEP_S`].
fn write_keys(
    tx: &mut Transaction<'_>,
    schema: &str,
    keys: &[crate::WriteKey],
    location: &str,
) -> Result<(), StoreError> {
    if keys.is_empty() {
        return Ok(());
    }
    let pe = |source| StoreError::Postgres {
        location: location.to_string(),
        source,
    };
    let now = crate::store::unix_now();
    let insert = format!(
        "INSERT INTO {schema}.write_keys (key, request, created) VALUES ($1, $2, $3) \
         ON CONFLICT (key) DO NOTHING"
    );
    for k in keys {
        let request: &[u8] = &k.request;
        let added = tx
            .execute(&*insert, &[&k.key, &request, &now])
            .map_err(pe)?;
        if added == 0 {
            return Err(StoreError::DuplicateKey {
                location: location.to_string(),
                key: k.key.clone(),
            });
        }
    }
    if crate::store::prune_keys_now(&keys[0].key) {
        tx.execute(
            &*format!("DELETE FROM {schema}.write_keys WHERE created < $1"),
            &[&now.saturating_sub(crate::WRITE_KEY_KEEP_S)],
        )
        .map_err(pe)?;
    }
    Ok(())
}

fn write_ops(
    tx: &mut Transaction<'_>,
    s: &str,
    ops: &[LoggedOp],
    location: &str,
) -> Result<(), StoreError> {
    if ops.is_empty() {
        return Ok(());
    }
    let mut seqs = Vec::with_capacity(ops.len());
    let mut times = Vec::with_capacity(ops.len());
    let mut bodies = Vec::with_capacity(ops.len());
    for op in ops {
        seqs.push(to_i64(op.seq, "seq", location)?);
        times.push(to_i64(
            op.provenance.logical_time.0,
            "logical time",
            location,
        )?);
        bodies.push(op_body(op, location)?);
    }
    tx.execute(
        &*format!(
            "INSERT INTO {s}ops (seq, logical_time, body) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[])"
        ),
        &[&seqs, &times, &bodies],
    )
    .map_err(|source| StoreError::Postgres {
        location: location.to_string(),
        source,
    })?;
    Ok(())
}

fn write_records(
    tx: &mut Transaction<'_>,
    s: &str,
    records: &[&MemoryRecord],
    location: &str,
) -> Result<(), StoreError> {
    if records.is_empty() {
        return Ok(());
    }
    let pe = |source| StoreError::Postgres {
        location: location.to_string(),
        source,
    };
    let mut ids = Vec::with_capacity(records.len());
    let mut nss = Vec::with_capacity(records.len());
    let mut kinds = Vec::with_capacity(records.len());
    let mut bodies = Vec::with_capacity(records.len());
    let mut bare = Vec::new();
    for r in records {
        ids.push(r.id.as_str().to_string());
        nss.push(r.namespace.as_str().to_string());
        kinds.push(kind_text(r));
        bodies.push(record_body(r, location)?);
        if r.embedding.is_none() {
            bare.push(r.id.as_str().to_string());
        }
    }
    tx.execute(
        &*format!(
            "INSERT INTO {s}records (id, namespace, kind, body)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
             ON CONFLICT (id) DO UPDATE SET namespace = excluded.namespace, kind = excluded.kind, body = excluded.body"
        ),
        &[&ids, &nss, &kinds, &bodies],
    )
    .map_err(pe)?;
    if !bare.is_empty() {
        tx.execute(
            &*format!("DELETE FROM {s}vectors WHERE id = ANY($1)"),
            &[&bare],
        )
        .map_err(pe)?;
    }
    let upsert_vec = tx
        .prepare(&format!(
            "INSERT INTO {s}vectors (id, namespace, model, dim, data) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET namespace = excluded.namespace, model = excluded.model, dim = excluded.dim, data = excluded.data"
        ))
        .map_err(pe)?;
    for r in records {
        if let Some(e) = &r.embedding {
            let dim = i32::try_from(e.vector.len()).unwrap_or(i32::MAX);
            tx.execute(
                &upsert_vec,
                &[
                    &r.id.as_str(),
                    &r.namespace.as_str(),
                    &e.model,
                    &dim,
                    &e.vector,
                ],
            )
            .map_err(pe)?;
        }
    }
    Ok(())
}

fn write_snapshot(
    tx: &mut Transaction<'_>,
    s: &str,
    seq: u64,
    at: LogicalTime,
    state: &MemoryState,
    location: &str,
) -> Result<(), StoreError> {
    let seq = to_i64(seq, "seq", location)?;
    let at = to_i64(at.0, "logical time", location)?;
    let body = state_body(state, location)?;
    tx.execute(
        &*format!(
            "INSERT INTO {s}snapshots (seq, logical_time, body) VALUES ($1, $2, $3)
             ON CONFLICT (seq) DO UPDATE SET logical_time = excluded.logical_time, body = excluded.body"
        ),
        &[&seq, &at, &body],
    )
    .map_err(|source| StoreError::Postgres {
        location: location.to_string(),
        source,
    })?;
    Ok(())
}

impl MemoryStore for PostgresStore {
    fn location(&self) -> String {
        match self.prefix {
            "" => self.location.clone(),
            _ => format!("{} (staging)", self.location),
        }
    }

    fn format_version(&self) -> u32 {
        self.version
    }

    fn commit(&mut self, c: &Commit<'_>) -> Result<(), StoreError> {
        let location = self.location.clone();
        let s = self.tables();
        let pe = |source| StoreError::Postgres {
            location: location.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(pe)?;
        let last: i64 = tx
            .query_one(
                &*format!("SELECT COALESCE(MAX(seq), 0)::bigint FROM {s}ops"),
                &[],
            )
            .map_err(pe)?
            .get(0);
        let next = to_u64(last, "seq", &location)? + 1;
        if let Some(first) = c.ops.first() {
            if first.seq < next {
                // Another instance appended since this engine last synced
                // (a seq beyond `next` is a gap: refused below as corrupt).
                return Err(StoreError::Conflict {
                    location,
                    detail: format!("op {} expected, the log is at {}", first.seq, next - 1),
                });
            }
        }
        check_gap_free(c.ops, next, &location)?;
        write_ops(&mut tx, &s, c.ops, &location).map_err(|e| lost_race(e, &location))?;
        if !c.deletes.is_empty() {
            let ids: Vec<&str> = c.deletes.iter().map(|d| d.as_str()).collect();
            tx.execute(
                &*format!("DELETE FROM {s}records WHERE id = ANY($1)"),
                &[&ids],
            )
            .map_err(pe)?;
            tx.execute(
                &*format!("DELETE FROM {s}vectors WHERE id = ANY($1)"),
                &[&ids],
            )
            .map_err(pe)?;
        }
        write_records(&mut tx, &s, c.upserts, &location)?;
        if let Some((seq, at, state)) = c.snapshot {
            write_snapshot(&mut tx, &s, seq, at, state, &location)?;
        }
        write_keys(&mut tx, &self.schema, c.keys, &location)?;
        tx.commit().map_err(pe)
    }

    fn committed_key(&mut self, key: &str) -> Result<Option<[u8; 32]>, StoreError> {
        let since = crate::store::unix_now().saturating_sub(crate::WRITE_KEY_KEEP_S);
        let row = self
            .client
            .query_opt(
                &*format!(
                    "SELECT request FROM {}.write_keys WHERE key = $1 AND created >= $2",
                    self.schema
                ),
                &[&key, &since],
            )
            .map_err(self.pe())?;
        Ok(row.map(|r| crate::store::digest_of(&r.get::<_, Vec<u8>>(0))))
    }

    fn load_ops(&mut self, after: u64, upto: u64) -> Result<Vec<LoggedOp>, StoreError> {
        let location = self.location.clone();
        let s = self.tables();
        let lo = i64::try_from(after).unwrap_or(i64::MAX);
        let hi = i64::try_from(upto).unwrap_or(i64::MAX);
        let rows = self
            .client
            .query(
                &*format!("SELECT seq, body FROM {s}ops WHERE seq > $1 AND seq <= $2 ORDER BY seq"),
                &[&lo, &hi],
            )
            .map_err(self.pe())?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let seq = to_u64(r.get::<_, i64>(0), "seq", &location)?;
            out.push(parse_op(seq, r.get::<_, &str>(1), &location)?);
        }
        check_gap_free(&out, after + 1, &location)?;
        Ok(out)
    }

    /// Read in one `REPEATABLE READ` transaction: every query sees the
    /// same snapshot of the schema, so that a commit or a log rewrite by
    /// another session (or instance) meanwhile cannot mix into it.
    fn state_at_consistent(&mut self, t: LogicalTime) -> Result<MemoryState, StoreError> {
        self.client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .map_err(self.pe())?;
        let r = self.state_at(t);
        let end = self
            .client
            .batch_execute(if r.is_ok() { "COMMIT" } else { "ROLLBACK" });
        let state = r?;
        end.map_err(self.pe())?;
        Ok(state)
    }

    fn last_seq(&mut self) -> Result<u64, StoreError> {
        let s = self.tables();
        let v: i64 = self
            .client
            .query_one(
                &*format!("SELECT COALESCE(MAX(seq), 0)::bigint FROM {s}ops"),
                &[],
            )
            .map_err(self.pe())?
            .get(0);
        to_u64(v, "seq", &self.location)
    }

    fn prefix_end(&mut self, t: LogicalTime) -> Result<u64, StoreError> {
        let s = self.tables();
        let t = i64::try_from(t.0).unwrap_or(i64::MAX);
        let first_later: Option<i64> = self
            .client
            .query_one(
                &*format!("SELECT MIN(seq) FROM {s}ops WHERE logical_time > $1"),
                &[&t],
            )
            .map_err(self.pe())?
            .get(0);
        match first_later {
            Some(v) => Ok(to_u64(v, "seq", &self.location)?.saturating_sub(1)),
            None => self.last_seq(),
        }
    }

    fn latest_snapshot(&mut self, upto: u64) -> Result<Option<Snapshot>, StoreError> {
        let location = self.location.clone();
        let s = self.tables();
        let hi = i64::try_from(upto).unwrap_or(i64::MAX);
        let row = self
            .client
            .query_opt(
                &*format!(
                    "SELECT seq, logical_time, body FROM {s}snapshots WHERE seq <= $1 ORDER BY seq DESC LIMIT 1"
                ),
                &[&hi],
            )
            .map_err(self.pe())?;
        let Some(row) = row else {
            return Ok(None);
        };
        let seq = to_u64(row.get::<_, i64>(0), "seq", &location)?;
        Ok(Some(Snapshot {
            seq,
            at: LogicalTime(to_u64(row.get::<_, i64>(1), "logical time", &location)?),
            state: parse_state(seq, row.get::<_, &str>(2), &location)?,
        }))
    }

    fn snapshot_seqs(&mut self) -> Result<Vec<u64>, StoreError> {
        let s = self.tables();
        let rows = self
            .client
            .query(&*format!("SELECT seq FROM {s}snapshots ORDER BY seq"), &[])
            .map_err(self.pe())?;
        rows.iter()
            .map(|r| to_u64(r.get::<_, i64>(0), "seq", &self.location))
            .collect()
    }

    fn load_records(&mut self) -> Result<Vec<MemoryRecord>, StoreError> {
        let location = self.location.clone();
        let s = self.tables();
        let rows = self
            .client
            .query(
                &*format!(
                    "SELECT r.id, r.body, v.model, v.data FROM {s}records r LEFT JOIN {s}vectors v ON v.id = r.id"
                ),
                &[],
            )
            .map_err(self.pe())?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: &str = row.get(0);
            let mut rec = parse_record(id, row.get::<_, &str>(1), &location)?;
            let model: Option<String> = row.get(2);
            let data: Option<Vec<f32>> = row.get(3);
            if let (Some(model), Some(vector)) = (model, data) {
                rec.embedding = Some(Embedding { model, vector });
            }
            out.push(rec);
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// A session advisory lock keyed by the schema (see
    /// [`MemoryStore::lock_writers`]); the key is PostgreSQL's `hashtext`
    /// of `evomem:<schema>`, so instances agree on it without a table.
    fn lock_writers(&mut self) -> Result<(), StoreError> {
        let key = format!("evomem:{}", self.schema);
        self.client
            .execute("SELECT pg_advisory_lock(hashtext($1))", &[&key])
            .map_err(self.pe())?;
        Ok(())
    }

    fn unlock_writers(&mut self) -> Result<(), StoreError> {
        let key = format!("evomem:{}", self.schema);
        self.client
            .execute("SELECT pg_advisory_unlock(hashtext($1))", &[&key])
            .map_err(self.pe())?;
        Ok(())
    }

    /// Tables `stage_*` in this store's schema, through a session of
    /// their own. PostgreSQL names their indexes (`stage_ops_pkey`, or
    /// the next free name while the live tables hold that one).
    fn staging(&mut self) -> Result<Box<dyn MemoryStore>, StoreError> {
        self.live_only("staging")?;
        self.clear_staging()?;
        let mut stage = Self::connect(&self.url, &self.schema)?;
        stage.prefix = STAGE;
        let s = stage.tables();
        stage
            .client
            .batch_execute(&format!(
                "BEGIN;
                 CREATE TABLE {s}ops (seq bigint PRIMARY KEY, logical_time bigint NOT NULL, body text NOT NULL);
                 CREATE INDEX ON {s}ops (logical_time);
                 CREATE TABLE {s}snapshots (seq bigint PRIMARY KEY, logical_time bigint NOT NULL, body text NOT NULL);
                 CREATE TABLE {s}records (id text PRIMARY KEY, namespace text NOT NULL, kind text NOT NULL, body text NOT NULL);
                 CREATE INDEX ON {s}records (namespace);
                 CREATE TABLE {s}vectors (id text PRIMARY KEY, namespace text NOT NULL, model text NOT NULL, dim integer NOT NULL, data real[] NOT NULL);
                 CREATE INDEX ON {s}vectors (namespace);
                 COMMIT;"
            ))
            .map_err(self.pe())?;
        Ok(Box::new(stage))
    }

    /// One transaction: the live tables renamed away and dropped, the
    /// staging tables renamed to the live names. Other sessions' queries
    /// on the tables wait for its commit, then read the new tables
    /// (PostgreSQL looks a name up again after waiting for its lock).
    fn swap_in_staged(
        &mut self,
        staged: Box<dyn MemoryStore>,
        last_seq: u64,
    ) -> Result<(), StoreError> {
        self.live_only("swap_in_staged")?;
        let location = self.location.clone();
        if staged.location() != format!("{location} (staging)") {
            return Err(StoreError::Config(format!(
                "{} is not the staging area of {location}",
                staged.location()
            )));
        }
        drop(staged);
        let sc = self.schema.clone();
        let pe = |source| StoreError::Postgres {
            location: location.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(pe)?;
        // Taken first, so that the maxima below stay true until the commit.
        tx.batch_execute(&format!(
            "LOCK TABLE {sc}.ops, {sc}.{STAGE}ops IN ACCESS EXCLUSIVE MODE"
        ))
        .map_err(pe)?;
        let mut last = |t: &str| -> Result<u64, StoreError> {
            let v: i64 = tx
                .query_one(
                    &*format!("SELECT COALESCE(MAX(seq), 0)::bigint FROM {sc}.{t}"),
                    &[],
                )
                .map_err(pe)?
                .get(0);
            to_u64(v, "seq", &location)
        };
        let (live, stage) = (last("ops")?, last("stage_ops")?);
        crate::store::check_ends_at(live, stage, last_seq, &location)?;
        let mut sql = String::new();
        for t in DATA_TABLES {
            sql.push_str(&format!(
                "ALTER TABLE {sc}.{t} RENAME TO {OLD}{t}; ALTER TABLE {sc}.{STAGE}{t} RENAME TO {t}; DROP TABLE {sc}.{OLD}{t};"
            ));
        }
        tx.batch_execute(&sql).map_err(pe)?;
        tx.commit().map_err(pe)
    }

    fn clear_staging(&mut self) -> Result<(), StoreError> {
        self.live_only("clear_staging")?;
        let sc = self.schema.clone();
        let mut sql = String::new();
        for t in DATA_TABLES {
            sql.push_str(&format!(
                "DROP TABLE IF EXISTS {sc}.{STAGE}{t}; DROP TABLE IF EXISTS {sc}.{OLD}{t};"
            ));
        }
        self.client.batch_execute(&sql).map_err(self.pe())
    }

    fn replace_all(
        &mut self,
        log: &[LoggedOp],
        state: &MemoryState,
        snapshots: &[Snapshot],
    ) -> Result<(), StoreError> {
        let location = self.location.clone();
        check_gap_free(log, 1, &location)?;
        let s = self.tables();
        let pe = |source| StoreError::Postgres {
            location: location.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(pe)?;
        // TRUNCATE swaps in fresh relation files, so the old rows do not
        // linger in dead tuples.
        tx.batch_execute(&format!(
            "TRUNCATE {s}ops, {s}snapshots, {s}records, {s}vectors"
        ))
        .map_err(pe)?;
        for chunk in log.chunks(1000) {
            write_ops(&mut tx, &s, chunk, &location)?;
        }
        let recs: Vec<&MemoryRecord> = state.iter_all().collect();
        for chunk in recs.chunks(1000) {
            write_records(&mut tx, &s, chunk, &location)?;
        }
        for snap in snapshots {
            write_snapshot(&mut tx, &s, snap.seq, snap.at, &snap.state, &location)?;
        }
        tx.commit().map_err(pe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_that_would_not_be_durable_are_refused() {
        assert!(check_durability("on", "on", "x").is_ok());
        assert!(check_durability("remote_apply", "on", "x").is_ok());
        let e = check_durability("off", "on", "x").unwrap_err().to_string();
        assert!(e.contains("synchronous_commit"), "{e}");
        let e = check_durability("on", "off", "x").unwrap_err().to_string();
        assert!(e.contains("fsync=off"), "{e}");
    }
}
