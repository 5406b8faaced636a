//! # evomem-serve
//!
//! The memory engine as an HTTP service (`evomem serve`): JSON under `/v1`,
//! described by the OpenAPI document at `/openapi.json`.
//!
//! - [`api`]: routes, middleware (API key, rate limit, metrics) and handlers;
//! - [`tenant`]: one engine, store, index, catalog and set of policies per
//!   tenant, and the group-commit writer;
//! - `registry`: the open tenants, opened on their first request and
//!   closed when idle under `serve.max_open_tenants` and
//!   `serve.max_resident_bytes`;
//! - [`index`]: exact per-namespace scan with HNSW for large namespaces;
//! - [`auth`], [`limit`], [`metrics`], [`config`], [`error`]: keys stored
//!   hashed, token buckets, Prometheus text, the `[serve]` settings, and
//!   errors with stable codes;
//! - [`conn`], [`embedq`]: the connection limits and timeouts, and the
//!   bounded, batched query embedder;
//! - `fields`: the bounds on every request field;
//! - [`ui`]: the web inspector's pages at `/ui` and their reads under
//!   `/ui/api` (a user's ops and memory at each op, decisions), behind the
//!   tenant's key.
//!
//! Overload is answered, not queued: every queue is bounded
//! (`serve.queue_depth`), a full one answers 503 `overloaded` with
//! `Retry-After`, each tenant holds at most `serve.tenant_workers` threads
//! of the blocking pool for reads and one each for its writes and its loop
//! requests, requests time out after `serve.request_timeout_s`
//! (503 `timeout`), and at most `serve.max_connections` connections are
//! open.
//!
//! Writes are acknowledged only after their commit. Memory adds from
//! concurrent requests are embedded in one batch by the tenant's embed
//! thread and committed in one transaction by its writer thread, which
//! commits one group while the next one embeds. Shutdown (SIGTERM or Ctrl-C)
//! stops accepting, drains requests in flight, then lets every writer commit
//! what it has queued.
//!
//! ```no_run
//! # async fn demo() -> Result<(), evomem_serve::ServeError> {
//! use std::sync::Arc;
//! let config = evomem_serve::ServeConfig::default();
//! let keys = evomem_serve::auth::KeyRing::from_plain([("evk_demo", "demo")]);
//! let shared = evomem_serve::tenant::Shared {
//!     config,
//!     embedder: Arc::new(HashingLike),
//!     hub: Arc::new(evomem_llm::LlmHub::offline()),
//!     seed: 42,
//!     metrics: Arc::default(),
//!     embedders: Default::default(),
//! };
//! let service = evomem_serve::Service::start(shared, keys)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7700").await?;
//! service.serve(listener, evomem_serve::shutdown_signal()).await?;
//! # Ok(()) }
//! # struct HashingLike;
//! # impl evomem_core::Embedder for HashingLike {
//! #   fn model_id(&self) -> &str { "x" } fn dim(&self) -> usize { 2 }
//! #   fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> { Ok(t.iter().map(|_| vec![1.0, 0.0]).collect()) }
//! # }
//! ```

pub mod api;
pub mod auth;
pub mod backup;
pub mod bench;
pub mod config;
pub(crate) mod conn;
pub mod embedders;
pub(crate) mod embedq;
pub mod error;
pub(crate) mod fields;
pub(crate) mod idem;
pub(crate) mod index;
pub(crate) mod limit;
pub(crate) mod metrics;
pub mod openapi;
pub(crate) mod priority;
pub mod private_file;
pub mod reembed;
pub(crate) mod registry;
pub mod tenant;
pub(crate) mod types;
pub mod ui;
pub(crate) mod ui_schema;

pub use config::ServeConfig;
pub use error::{ApiError, ServeError};

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Lock a mutex, taking the data over from a thread that panicked while
/// holding it (every value behind these locks stays consistent between
/// statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// What every request sees.
pub(crate) struct ServiceState {
    /// Shared dependencies and settings.
    pub shared: Arc<tenant::Shared>,
    /// API keys, read again when their file changes.
    pub keys: auth::LiveKeys,
    /// Rate limits by key.
    pub limiter: limit::RateLimiter,
    /// The open tenants: each opened on its first request, closed when
    /// idle past the budget ([`registry`]).
    pub tenants: registry::Registry,
    /// Set when shutdown begins: new requests get 503.
    pub shutting_down: AtomicBool,
    /// Milliseconds from start to ready (no tenant is opened at start).
    pub ready_ms: u64,
    /// Query embedding, batched across concurrent searches.
    pub queries: embedq::QueryEmbedder,
    /// Answers of writes sent with an `Idempotency-Key`.
    pub idem: idem::Idempotency,
    /// The shared lock on the data folder that tells `serve reembed` a
    /// service runs on it ([`reembed::serving_lock`]); held while the
    /// service lives.
    _folder_lock: std::fs::File,
}

/// A started service, ready to serve; each tenant opens on its first
/// request.
pub struct Service {
    state: Arc<ServiceState>,
}

impl Service {
    /// Start serving the tenants of `keys`; none is opened here (each
    /// opens on its first request, [`registry`]).
    pub fn start(shared: tenant::Shared, keys: auth::KeyRing) -> Result<Self, ServeError> {
        Self::start_live(shared, auth::LiveKeys::fixed(keys))
    }

    /// [`Service::start`] with keys that follow their file: a key revoked,
    /// rotated or added (a new tenant's too: it opens on its first
    /// request) takes effect without a restart.
    pub fn start_live(shared: tenant::Shared, keys: auth::LiveKeys) -> Result<Self, ServeError> {
        let t0 = Instant::now();
        shared.config.validate()?;
        let folder_lock = reembed::serving_lock(&shared.config.data_dir)?;
        let shared = Arc::new(shared);
        let tenants = registry::Registry::new(shared.clone());
        tenants.start_closer()?;
        let limiter = limit::RateLimiter::new(
            shared.config.rate_limit_per_s,
            shared.config.rate_limit_burst,
        );
        let queries = embedq::QueryEmbedder::start(
            shared.embedder.clone(),
            32,
            shared.config.queue_depth,
            shared.config.queue_query_bytes,
            shared.config.queue_query_tenant_share,
        )?;
        let ready_ms = t0.elapsed().as_millis() as u64;
        tracing::info!(
            tenants = keys.tenants().len(),
            max_open_tenants = shared.config.max_open_tenants,
            max_resident_bytes = shared.config.max_resident_bytes,
            ready_ms,
            "evomem serve ready (tenants open on their first request)"
        );
        let idem = idem::Idempotency::new(shared.config.idempotency_tenant_bytes);
        let state = Arc::new(ServiceState {
            shared,
            keys,
            limiter,
            tenants,
            shutting_down: AtomicBool::new(false),
            ready_ms,
            queries,
            idem,
            _folder_lock: folder_lock,
        });
        let weak = Arc::downgrade(&state);
        std::thread::Builder::new()
            .name("evomem-reembed".into())
            .spawn(move || reembed::watch(weak))?;
        Ok(Self { state })
    }

    /// The router.
    pub fn router(&self) -> axum::Router {
        api::router(self.state.clone())
    }

    /// Close a service that served through its [`Service::router`] only
    /// (`evomem mcp --data-dir`): new requests get 503, and every tenant's
    /// writer closes after it committed what it holds. Call it outside an
    /// async runtime (a PostgreSQL client owns one of its own).
    pub fn close(self) {
        self.state.shutting_down.store(true, Ordering::SeqCst);
        self.state.queries.close();
        self.state.tenants.close_all();
    }

    /// Serve on `listener` until `shutdown` resolves; then stop accepting,
    /// drain requests in flight (at most `serve.drain_s`), and close every
    /// tenant's writer after it committed what it holds.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let state = self.state.clone();
        let drain = std::time::Duration::from_secs(state.shared.config.drain_s);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let flag = state.clone();
        let cfg = &state.shared.config;
        let limits = conn::Limits {
            max: cfg.max_connections,
            per_address: cfg.max_connections_per_address,
            header_timeout: std::time::Duration::from_secs(cfg.header_timeout_s),
            idle_timeout: std::time::Duration::from_secs(cfg.idle_timeout_s),
        };
        let listener = conn::LimitedListener::new(listener, limits);
        let app = self
            .router()
            .layer(axum::middleware::from_fn(conn::busy))
            .into_make_service_with_connect_info::<conn::Conn>();
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            shutdown.await;
            flag.shutting_down.store(true, Ordering::SeqCst);
            tracing::info!("shutdown: draining requests in flight");
            let _ = tx.send(());
        });
        let server = tokio::spawn(async move { server.await });
        let mut server = server;
        tokio::select! {
            r = &mut server => { r.map_err(|e| std::io::Error::other(e.to_string()))??; }
            _ = async { let _ = rx.await; tokio::time::sleep(drain).await; } => {
                tracing::warn!("shutdown: drain time over, closing connections");
                server.abort();
            }
        }
        // Close and drop the tenants off the async threads: a PostgreSQL
        // client owns a runtime, which must not be dropped inside one.
        tokio::task::spawn_blocking(move || {
            state.queries.close();
            state.tenants.close_all();
            drop(state);
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        tracing::info!("shutdown: writers flushed");
        Ok(())
    }
}

/// Start the service and serve on `serve.bind` until SIGTERM or Ctrl-C, on
/// a runtime of `threads` workers. Prints the address once it listens.
pub fn run(shared: tenant::Shared, keys: auth::LiveKeys, threads: usize) -> Result<(), ServeError> {
    let bind = shared.config.bind.clone();
    let service = Service::start_live(shared, keys)?;
    // Enough blocking threads for the share of every tenant that may be
    // open at once (its read permits, its write turn, its loop turn), and
    // no more: `serve.max_open_tenants`, or without that bound the tenants
    // keyed at start.
    let cfg = &service.state.shared.config;
    let open_bound = match cfg.max_open_tenants {
        0 => service.state.keys.tenants().len(),
        n => n,
    };
    let blocking = (open_bound.max(1) * (cfg.tenant_workers + 2)).clamp(8, 512);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .max_blocking_threads(blocking)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&bind).await?;
        let addr = listener.local_addr()?;
        let st = &service.state;
        println!(
            "evomem serve: listening on http://{addr} ({} tenants keyed, each opened on its first request; ready in {} ms)",
            st.keys.tenants().len(),
            st.ready_ms
        );
        service.serve(listener, shutdown_signal()).await?;
        eprintln!("evomem serve: stopped (requests drained, writers flushed)");
        Ok(())
    })
}

/// Open every tenant's store and check it: the stored log replays to the
/// stored records, and the rebuilt index holds every memory's vector.
/// Returns `(tenant, memories)` per tenant.
pub fn check(
    shared: tenant::Shared,
    keys: &auth::KeyRing,
) -> Result<Vec<(String, usize)>, ServeError> {
    shared.config.validate()?;
    let shared = Arc::new(shared);
    let mut out = Vec::new();
    for name in keys.tenants() {
        let t = tenant::Tenant::open(&name, shared.clone())?;
        t.verify().map_err(|e| ServeError::Load {
            tenant: name.clone(),
            message: e.to_string(),
        })?;
        out.push((name, t.index_len()));
        t.close();
    }
    Ok(out)
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
