//! The `[serve]` settings table. The binary layers it like every other
//! table (defaults, then the file, then `EVOMEM_SERVE__<KEY>`, then flags);
//! this crate only defines and checks it.

use crate::error::{ApiError, ServeError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Settings of `evomem serve`. Every field has a default (in its doc); the
/// schema (`JsonSchema`, the docs as descriptions) is what the binary's
/// settings reference is generated from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Address to listen on. Default `127.0.0.1:7700`.
    pub bind: String,
    /// Folder of the SQLite stores (one file per tenant) and the default
    /// keys file. Default `./evomem-data`.
    pub data_dir: PathBuf,
    /// `sqlite` (default), or a `postgres://` URL: each tenant then lives
    /// in schema `evomem_t_<tenant>` of that database.
    pub store: String,
    /// The keys file. Default `<data_dir>/keys.toml`.
    pub keys_file: Option<PathBuf>,
    /// Largest request body in bytes. Default 2 MiB.
    pub max_body_bytes: usize,
    /// Most entries in one batch (memories added, events). Default 1000.
    pub max_batch: usize,
    /// Requests per second allowed per key (0: unlimited). Default 1000.
    pub rate_limit_per_s: f64,
    /// Burst allowed above the rate. Default 2000.
    pub rate_limit_burst: f64,
    /// A request body costs one more token of its key's rate limit per
    /// this many bytes (beside one per request and one per batch entry
    /// past the first); 0: bodies cost nothing. Default 4096.
    pub rate_limit_bytes_per_token: usize,
    /// Most memories embedded and committed together by the group-commit
    /// writer. Default 512.
    pub group_max: usize,
    /// A namespace switches from exact scan to an HNSW graph above this many
    /// vectors. Default 20000.
    pub hnsw_threshold: usize,
    /// The default policy of the loop endpoints; one of `policies`.
    /// Default `mars`.
    pub policy: String,
    /// The policies a request may name in its `policy` field, as specs
    /// (`mars`, `mars[profile_words=80]`). A request picks among these
    /// exactly; parameters come from the settings, never from a client.
    /// Default `["mars", "no-memory"]`.
    pub policies: Vec<String>,
    /// Blocking-pool threads one tenant's reads may hold at once; its
    /// writes that may wait at the write gate and its loop requests run
    /// one at a time each, on turns of their own, never on these.
    /// Default 4.
    pub tenant_workers: usize,
    /// Most requests waiting in any one queue (a tenant's memory writer, a
    /// tenant's workers, query embedding); past it a request is answered
    /// 503 `overloaded` with `Retry-After`. Default 256.
    pub queue_depth: usize,
    /// Most memories waiting for (or in) one tenant's writer, counted over
    /// every queued add; past it an add is answered 503 `overloaded` with
    /// `Retry-After` (an add larger than this is taken only when nothing
    /// waits). Bounds how long an accepted add waits: about this many
    /// memories over the embedder's rate (MiniLM ~300/s on 2 cores).
    /// Default 1024 (two groups).
    pub queue_memories: usize,
    /// Most bytes of query text waiting for (or in) the query-embedding
    /// thread, over every tenant; past it a search is answered 503
    /// `overloaded` with `Retry-After` (a query longer than this is taken
    /// only when nothing waits). The cost bound of that queue, beside
    /// `queue_depth` queries. Default 65536.
    pub queue_query_bytes: usize,
    /// The fraction of the query-embedding queue (of its `queue_depth`
    /// queries and of its `queue_query_bytes`) one tenant may hold; past
    /// it that tenant's searches are answered 503 `overloaded` while the
    /// rest stays open to the others. `1/N` gives each of N tenants room
    /// of its own. In (0, 1]; default 0.5.
    pub queue_query_tenant_share: f64,
    /// Niceness (0-19) of the threads doing a tenant's bulk work: its
    /// writer (add batches: embedding, apply, commit, index updates), log
    /// rewrites (user deletion, hard delete), graph builds after a
    /// restart, and the MiniLM pool (bulk embedding; short queries then
    /// always compute on the query thread). The OS then gives searches and
    /// reads the CPU first when both cores are busy with one tenant's
    /// bulk work. 0: no change. Linux only (elsewhere ignored). Default 10.
    pub bulk_nice: i32,
    /// Run bulk work that holds no lock readers wait on under Linux's
    /// `SCHED_IDLE` class instead of at `bulk_nice`: it then gets a core
    /// only when no normal thread wants one, and a waking search takes the
    /// core at once instead of after the bulk thread's time slice (about
    /// 3 ms on the EEVDF scheduler, even for niceness 19). The short
    /// installs under the core lock stay at normal priority, so a starved
    /// bulk thread never holds up readers. Falls back to `bulk_nice` where
    /// the class is not available. Default true.
    pub bulk_idle: bool,
    /// Seconds a request may take before it is answered 503 `timeout`
    /// (0: no limit). A write that times out may still commit: retry it
    /// with the same `Idempotency-Key`. Default 30.
    pub request_timeout_s: u64,
    /// Bytes of answers remembered for `Idempotency-Key` retries per
    /// tenant (each answer's body, key and about 160 bytes of
    /// bookkeeping); past it the tenant's oldest keys are forgotten, never
    /// another tenant's. Default 4 MiB.
    pub idempotency_tenant_bytes: usize,
    /// Most memories one tenant may hold (0: no quota); an add past it is
    /// answered 403 `quota_exceeded`. Default 1,000,000.
    pub tenant_max_memories: u64,
    /// Most bytes one tenant's memories may hold, text and metadata JSON
    /// (0: no quota); an add or update past it is answered 403
    /// `quota_exceeded`. Default 1 GiB.
    pub tenant_max_bytes: u64,
    /// Most tenants open at once (0: no limit). A tenant opens on its first
    /// request (its store read, its index rebuilt; its graphs after) and,
    /// past this many, the least recently used idle tenant is closed (its
    /// writer commits what it holds first); a tenant with a request in
    /// flight, a write pending or a re-embed running is never closed, so
    /// the bound may be exceeded while all are busy (counted in
    /// `/metrics`). Default 0: every tenant used stays open, as before
    /// tenants opened on demand, because the right bound depends on the
    /// machine's memory and the tenants' sizes, and a default bound would
    /// make existing deployments past it pay a reopen on requests that did
    /// not before.
    pub max_open_tenants: usize,
    /// Most bytes the open tenants may hold in memory together, as
    /// estimated from their records, op logs and index vectors (0: no
    /// limit; else at least 1 MiB); past it idle tenants are closed, least
    /// recently used first, as for `max_open_tenants`. Default 0 (no
    /// limit), for the same reason.
    pub max_resident_bytes: u64,
    /// Most connections open at once; further ones wait to be accepted.
    /// Default 1024.
    pub max_connections: usize,
    /// Most connections open at once from one IP address; one past it is
    /// closed when accepted. Behind a proxy every client has the proxy's
    /// address: raise it there. Default 256.
    pub max_connections_per_address: usize,
    /// Seconds a connection may take to send a request head, from its
    /// first byte; then it is closed. Default 10.
    pub header_timeout_s: u64,
    /// Seconds a connection may stay open with no request running and
    /// nothing sent; then it is closed. Default 60.
    pub idle_timeout_s: u64,
    /// When set, `/metrics` answers only `Authorization: Bearer <this>`
    /// (401 otherwise). Required when `bind` is not a loopback address.
    /// Default: unset (open, like `/healthz`, on loopback only).
    pub metrics_key: Option<String>,
    /// PostgreSQL: before each read, catch up with writes other instances
    /// made (costs two queries). Default true.
    pub sync_reads: bool,
    /// Seconds to wait for requests in flight at shutdown. Default 10.
    pub drain_s: u64,
    /// `auto` (default: the data folder's embedder, from its manifest
    /// `embedder.json` or its stored vectors; `minilm-int8` for a new
    /// folder, or the hashing embedder with a notice when the model
    /// folder is missing; `crate::embedders`), `minilm` (f32), `minilm-int8`
    /// (the same model with int8 dense layers, its own model id) or
    /// `hashing`. A MiniLM named here or by the folder and missing from the
    /// models folder is refused, never replaced by hashing. `evomem serve reembed` moves a folder to another one.
    pub embedder: String,
}

/// The smallest `serve.max_resident_bytes` but 0 (1 MiB).
pub const MIN_RESIDENT_BYTES: u64 = 1 << 20;

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:7700".into(),
            data_dir: PathBuf::from("evomem-data"),
            store: "sqlite".into(),
            keys_file: None,
            max_body_bytes: 2 << 20,
            max_batch: 1000,
            rate_limit_per_s: 1000.0,
            rate_limit_burst: 2000.0,
            rate_limit_bytes_per_token: 4096,
            group_max: 512,
            hnsw_threshold: 20_000,
            policy: "mars".into(),
            policies: vec!["mars".into(), "no-memory".into()],
            tenant_workers: 4,
            queue_depth: 256,
            queue_memories: 1024,
            queue_query_bytes: 64 << 10,
            queue_query_tenant_share: 0.5,
            bulk_nice: 10,
            bulk_idle: true,
            request_timeout_s: 30,
            idempotency_tenant_bytes: 4 << 20,
            tenant_max_memories: 1_000_000,
            tenant_max_bytes: 1 << 30,
            max_open_tenants: 0,
            max_resident_bytes: 0,
            max_connections: 1024,
            max_connections_per_address: 256,
            header_timeout_s: 10,
            idle_timeout_s: 60,
            metrics_key: None,
            sync_reads: true,
            drain_s: 10,
            embedder: "auto".into(),
        }
    }
}

impl ServeConfig {
    /// The keys file in force.
    pub fn keys_path(&self) -> PathBuf {
        self.keys_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("keys.toml"))
    }

    /// True when the store is PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.store.starts_with("postgres://") || self.store.starts_with("postgresql://")
    }

    /// The policy spec a loop request runs: the default, or the configured
    /// one it names.
    pub fn policy_spec(&self, requested: Option<&str>) -> Result<String, ApiError> {
        match requested {
            None => Ok(self.policy.clone()),
            Some(p) if self.policies.iter().any(|c| c == p) => Ok(p.to_string()),
            Some(p) => Err(ApiError::Policy {
                policy: p.to_string(),
                message: format!(
                    "not one of the configured policies ({}); policies and their parameters come from serve.policies",
                    self.policies.join(", ")
                ),
            }),
        }
    }

    /// Check the values; the error names the key.
    pub fn validate(&self) -> Result<(), ServeError> {
        let bad = |k: &str, m: &str| Err(ServeError::Config(format!("serve.{k}: {m}")));
        if self.store != "sqlite" && !self.is_postgres() {
            return bad(
                "store",
                &format!("`{}`: expected `sqlite` or a postgres:// URL", self.store),
            );
        }
        if self.embedder != "auto" && !crate::embedders::NAMES.contains(&self.embedder.as_str()) {
            return bad(
                "embedder",
                &format!(
                    "`{}`: expected `auto`, `minilm`, `minilm-int8` or `hashing`",
                    self.embedder
                ),
            );
        }
        if self.max_body_bytes < 1024 {
            return bad("max_body_bytes", "must be at least 1024");
        }
        if self.max_batch == 0 {
            return bad("max_batch", "must be at least 1");
        }
        if self.group_max == 0 {
            return bad("group_max", "must be at least 1");
        }
        if !(self.rate_limit_per_s.is_finite() && self.rate_limit_per_s >= 0.0) {
            return bad("rate_limit_per_s", "must be a number >= 0");
        }
        if !(self.rate_limit_burst.is_finite() && self.rate_limit_burst >= 1.0) {
            return bad("rate_limit_burst", "must be a number >= 1");
        }
        if self.tenant_workers == 0 {
            return bad("tenant_workers", "must be at least 1");
        }
        if self.queue_depth == 0 {
            return bad("queue_depth", "must be at least 1");
        }
        if self.queue_memories == 0 {
            return bad("queue_memories", "must be at least 1");
        }
        if self.queue_query_bytes == 0 {
            return bad("queue_query_bytes", "must be at least 1");
        }
        if !(self.queue_query_tenant_share > 0.0 && self.queue_query_tenant_share <= 1.0) {
            return bad("queue_query_tenant_share", "must be in (0, 1]");
        }
        if !(0..=19).contains(&self.bulk_nice) {
            return bad("bulk_nice", "must be between 0 and 19");
        }
        if self
            .metrics_key
            .as_deref()
            .is_some_and(|k| k.trim().len() < 16)
        {
            return bad("metrics_key", "must be at least 16 characters");
        }
        if self.max_resident_bytes > 0 && self.max_resident_bytes < MIN_RESIDENT_BYTES {
            return bad(
                "max_resident_bytes",
                &format!(
                    "{} is below 1 MiB ({MIN_RESIDENT_BYTES}): set 0 for no limit, or a budget \
                     of at least 1 MiB (below it every tenant would close after each request)",
                    self.max_resident_bytes
                ),
            );
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        if self.max_connections_per_address == 0 {
            return bad("max_connections_per_address", "must be at least 1");
        }
        if self.header_timeout_s == 0 {
            return bad("header_timeout_s", "must be at least 1");
        }
        if self.idle_timeout_s == 0 {
            return bad("idle_timeout_s", "must be at least 1");
        }
        if !self.policies.contains(&self.policy) {
            return bad(
                "policy",
                &format!(
                    "`{}` is not one of serve.policies ({})",
                    self.policy,
                    self.policies.join(", ")
                ),
            );
        }
        let Ok(addr) = self.bind.parse::<std::net::SocketAddr>() else {
            return bad(
                "bind",
                &format!("`{}` is not an address such as 127.0.0.1:7700", self.bind),
            );
        };
        if !addr.ip().is_loopback() && self.metrics_key.is_none() {
            return bad(
                "metrics_key",
                &format!(
                    "must be set when serve.bind (`{}`) is not a loopback address: \
                     /metrics names every tenant and its traffic",
                    self.bind
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 57: `/metrics` (every tenant's name, traffic and LLM spend)
    /// was open on any address unless a key was set. Off loopback the key
    /// is now required; on loopback it stays optional.
    /// The open-tenant budget: 0 is no limit, a bytes budget below 1 MiB
    /// is refused with the key named.
    #[test]
    fn the_open_tenant_budget_is_checked() {
        let with = |n: usize, b: u64| ServeConfig {
            max_open_tenants: n,
            max_resident_bytes: b,
            ..ServeConfig::default()
        };
        with(0, 0).validate().unwrap();
        with(1, MIN_RESIDENT_BYTES).validate().unwrap();
        let err = with(2, 1000).validate().unwrap_err().to_string();
        assert!(
            err.contains("serve.max_resident_bytes") && err.contains("1 MiB"),
            "{err}"
        );
    }

    #[test]
    fn metrics_need_their_key_off_loopback() {
        let with = |bind: &str, key: Option<&str>| ServeConfig {
            bind: bind.to_string(),
            metrics_key: key.map(str::to_string),
            ..ServeConfig::default()
        };
        for bind in ["0.0.0.0:7700", "[::]:7700", "10.1.2.3:7700"] {
            let err = with(bind, None).validate().unwrap_err().to_string();
            assert!(err.contains("metrics_key"), "{bind}: {err}");
            with(bind, Some("a-metrics-key-of-16+")).validate().unwrap();
        }
        for bind in ["127.0.0.1:7700", "[::1]:7700"] {
            with(bind, None).validate().unwrap();
        }
    }
}
