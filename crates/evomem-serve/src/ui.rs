//! The web inspector over a tenant's live memory, at `/ui`: the pages of
//! `evomem ui` (compiled into `evomem-ui`), and the few JSON endpoints they
//! read in service mode, under `/ui/api`, backed by the tenant's own read
//! methods ([`Tenant::user_memories`] with `as_of` for the time slider,
//! [`Tenant::history`] for a record's ops).
//!
//! The pages and `/ui/api/mode` are public (a browser cannot put a key on a
//! navigation); every other `/ui/api` route goes through the same API-key
//! middleware as `/v1` (`Authorization: Bearer <key>`), which the pages send
//! from a form field.

use crate::error::ApiError;
use crate::tenant::{check_user, Tenant};
use crate::types::UserMemories;
use crate::ServiceState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query};
use axum::middleware;
use axum::response::Redirect;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use std::sync::Arc;

/// Most memories one `/ui/api` listing returns.
const UI_PAGE: usize = 1000;

/// The `/ui` routes, for [`crate::api::router`] to merge.
pub(crate) fn router(state: Arc<ServiceState>) -> Router<Arc<ServiceState>> {
    let keyed = Router::new()
        .route("/ui/api/users/{user_id}/memories", get(memories))
        .route("/ui/api/memories/{id}/history", get(crate::api::history))
        .route_layer(middleware::from_fn_with_state(state, crate::api::auth));
    evomem_ui::assets::routes::<Arc<ServiceState>>("/ui")
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/api/mode", get(mode))
        .merge(keyed)
}

async fn mode() -> Json<serde_json::Value> {
    Json(serde_json::json!({"mode": "service", "auth": "Authorization: Bearer <key>"}))
}

/// Query of `/ui/api/users/{user_id}/memories`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AsOf {
    /// Unix ms; without it, the memories now.
    as_of: Option<u64>,
}

async fn memories(
    Extension(t): Extension<Arc<Tenant>>,
    Path(user): Path<String>,
    q: Result<Query<AsOf>, QueryRejection>,
) -> Result<Json<UserMemories>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::field("query", e.body_text()))?;
    check_user("user_id", &user)?;
    t.blocking(move |t| t.user_memories(&user, q.as_of, Some(UI_PAGE), None))
        .await
        .map(Json)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use crate::auth::KeyRing;
    use crate::config::ServeConfig;
    use crate::tenant::Shared;
    use crate::Service;
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use evomem_llm::LlmHub;
    use std::sync::Arc;
    use tower::ServiceExt;

    async fn call(app: &axum::Router, path: &str, key: Option<&str>) -> (StatusCode, String) {
        send(app, Request::get(path), key, Body::empty()).await
    }

    async fn send(
        app: &axum::Router,
        mut req: axum::http::request::Builder,
        key: Option<&str>,
        body: Body,
    ) -> (StatusCode, String) {
        if let Some(k) = key {
            req = req.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        let resp = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ui_pages_are_public_and_its_api_needs_the_tenants_key() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared {
            config: ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            embedder: Arc::new(evomem_embed::HashingEmbedder::new(16)),
            hub: Arc::new(LlmHub::offline()),
            seed: 1,
            metrics: Arc::default(),
        };
        let service =
            Service::start(shared, KeyRing::from_plain([("evk_ui_test", "demo")])).unwrap();
        let app = service.router();

        let (status, html) = call(&app, "/ui/", None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(html.contains("__evomemErrors"), "{html}");
        let (status, _) = call(&app, "/ui/app.js", None).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _) = call(&app, "/ui", None).await;
        assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
        let (status, mode) = call(&app, "/ui/api/mode", None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(mode.contains("\"service\""), "{mode}");

        let path = "/ui/api/users/alice/memories";
        let (status, body) = call(&app, path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        let (status, body) = call(&app, "/ui/api/memories/x/history", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        let (status, body) = call(&app, path, Some("evk_wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

        // With the key: the user's memories now and as of a past time.
        let add = serde_json::json!({
            "user_id": "alice",
            "memories": [{"text": "likes quiet jazz records", "metadata": {}}],
        });
        let (status, body) = send(
            &app,
            Request::post("/v1/memories").header(header::CONTENT_TYPE, "application/json"),
            Some("evk_ui_test"),
            Body::from(add.to_string()),
        )
        .await;
        assert!(status.is_success(), "{status}: {body}");
        let added: serde_json::Value = serde_json::from_str(&body).unwrap();
        let id = added["memories"][0]["id"].as_str().unwrap().to_string();
        let (status, body) = call(&app, path, Some("evk_ui_test")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("quiet jazz"), "{body}");
        let (status, body) = call(&app, &format!("{path}?as_of=1"), Some("evk_ui_test")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(!body.contains("quiet jazz"), "{body}");
        let (status, body) = call(&app, &format!("{path}?as_of=x"), Some("evk_ui_test")).await;
        // The service's convention for a bad field (as `/v1` answers it).
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let (status, body) = call(
            &app,
            &format!("/ui/api/memories/{id}/history"),
            Some("evk_ui_test"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("\"create\""), "{body}");
    }
}
