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
    let keys = KeyRing::from_plain([(KEY_A, "alpha"), (KEY_B, "beta")]);
    let shared = Shared {
        config,
        embedder: Arc::new(evomem_embed::HashingEmbedder::new(64)),
        hub: Arc::new(evomem_llm::LlmHub::offline()),
        seed: 42,
        metrics: Arc::default(),
    };
    let service = tokio::task::spawn_blocking(move || Service::start(shared, keys))
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

/// Drop the schemas of tenants alpha and beta.
pub fn pg_reset(url: &str) {
    for t in ["alpha", "beta"] {
        evomem_store::PostgresStore::drop_schema(url, &format!("evomem_t_{t}")).unwrap();
    }
}
