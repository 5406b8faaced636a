//! A service on 127.0.0.1 for tests: hashing embedder, offline roles, keys
//! given in plain text, a fresh port per server.

use evomem_serve::auth::KeyRing;
use evomem_serve::tenant::Shared;
use evomem_serve::{ServeConfig, Service};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

pub const KEY_A: &str = "evk_tenant_a_key";
pub const KEY_B: &str = "evk_tenant_b_key";

pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<Result<(), evomem_serve::ServeError>>>,
}

pub fn config(dir: &Path, store: Option<&str>) -> ServeConfig {
    ServeConfig {
        data_dir: dir.to_path_buf(),
        store: store.unwrap_or("sqlite").to_string(),
        rate_limit_per_s: 0.0,
        ..ServeConfig::default()
    }
}

pub async fn start(config: ServeConfig) -> TestServer {
    start_with(config, Arc::new(evomem_embed::HashingEmbedder::new(64))).await
}

/// A server with its own embedder (one that blocks, counts or fails).
pub async fn start_with(
    config: ServeConfig,
    embedder: Arc<dyn evomem_core::Embedder>,
) -> TestServer {
    let keys = KeyRing::from_plain([(KEY_A, "alpha"), (KEY_B, "beta")]);
    start_keys(config, embedder, keys).await
}

/// A server with `n` tenants `t0`, `t1`, ...; returns it and their keys.
pub async fn start_tenants(config: ServeConfig, n: usize) -> (TestServer, Vec<String>) {
    let keys: Vec<String> = (0..n).map(|i| format!("evk_tenant_{i}_key")).collect();
    let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    let ring = KeyRing::from_plain(
        keys.iter()
            .zip(&names)
            .map(|(k, t)| (k.as_str(), t.as_str())),
    );
    let s = start_keys(
        config,
        Arc::new(evomem_embed::HashingEmbedder::new(64)),
        ring,
    )
    .await;
    (s, keys)
}

async fn start_keys(
    config: ServeConfig,
    embedder: Arc<dyn evomem_core::Embedder>,
    keys: KeyRing,
) -> TestServer {
    start_live(config, embedder, evomem_serve::auth::LiveKeys::fixed(keys)).await
}

/// A server whose keys follow a keys file.
pub async fn start_live(
    config: ServeConfig,
    embedder: Arc<dyn evomem_core::Embedder>,
    keys: evomem_serve::auth::LiveKeys,
) -> TestServer {
    let shared = Shared {
        config,
        embedder,
        hub: Arc::new(evomem_llm::LlmHub::offline()),
        seed: 42,
        metrics: Arc::default(),
        embedders: Default::default(),
    };
    start_shared(shared, keys).await
}

/// A server of `shared` (its own embedder set, say).
pub async fn start_shared(shared: Shared, keys: evomem_serve::auth::LiveKeys) -> TestServer {
    let service = tokio::task::spawn_blocking(move || Service::start_live(shared, keys))
        .await
        .unwrap()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(service.serve(listener, async move {
        let _ = rx.await;
    }));
    TestServer {
        base,
        client: reqwest::Client::new(),
        stop: Some(tx),
        handle: Some(handle),
    }
}

impl TestServer {
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.client.request(m, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// Graceful stop: drain, flush writers.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
    }
}

/// The PostgreSQL URL of the throwaway test server, or `None` (with a
/// notice; under CI a panic) when there is none.
pub fn pg_url() -> Option<String> {
    match std::env::var("EVOMEM_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "EVOMEM_TEST_PG_URL is not set under CI (scripts/ci-postgres.sh sets it)"
            );
            eprintln!("notice: EVOMEM_TEST_PG_URL not set; PostgreSQL service tests skipped");
            None
        }
    }
}

/// One PostgreSQL test of this binary at a time: they share the schemas of
/// tenants alpha and beta, which each of them resets ([`pg_reset`]), and
/// libtest runs a binary's tests on parallel threads.
static PG_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Hold while a test uses the test database.
pub async fn pg_serial() -> tokio::sync::MutexGuard<'static, ()> {
    PG_TESTS.lock().await
}

/// Drop the schemas of tenants alpha and beta.
pub fn pg_reset(url: &str) {
    for t in ["alpha", "beta"] {
        evomem_store::PostgresStore::drop_schema(url, &format!("evomem_t_{t}")).unwrap();
    }
}

/// [`pg_reset`] off the runtime (its client blocks).
pub async fn reset_pg(url: &str) {
    let u = url.to_string();
    tokio::task::spawn_blocking(move || pg_reset(&u))
        .await
        .unwrap();
}

/// The hashing embedder, except that a pass over any text holding `BLOCK`
/// waits until [`Gated::open`] (a model backend as slow as a test needs),
/// and one over a text holding `FAIL` fails.
pub struct Gated {
    inner: evomem_embed::HashingEmbedder,
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
    /// Passes that reached the gate.
    pub waiting: std::sync::atomic::AtomicUsize,
}

impl Gated {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: evomem_embed::HashingEmbedder::new(64),
            open: std::sync::Mutex::new(false),
            cv: std::sync::Condvar::new(),
            waiting: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Wait (at most 60 s) until a pass is held at the gate.
    pub async fn until_held(&self) {
        for _ in 0..6000 {
            if self.waiting.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("no embedding pass reached the gate");
    }
}

/// Opens the gate when dropped, so that a failing test does not leave a
/// pass (and the runtime's shutdown) waiting forever.
pub struct OpenOnDrop(pub Arc<Gated>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        if let Ok(mut g) = self.0.open.lock() {
            *g = true;
        }
        self.0.cv.notify_all();
    }
}

impl evomem_core::Embedder for Gated {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
        if t.iter().any(|s| s.contains("FAIL")) {
            return Err(evomem_core::EmbedError::Inference(
                "a text holding FAIL (test)".into(),
            ));
        }
        if t.iter().any(|s| s.contains("BLOCK")) {
            self.waiting
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.cv.wait(open).unwrap();
            }
        }
        self.inner.embed(t)
    }
}
