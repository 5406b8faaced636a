#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The conformance suite of the `V1` trait, run against every backend: the
//! in-process router and HTTP to a listening copy of the same router must
//! send the same request (method, path and query, key, idempotency key,
//! body) and hand back the same status and body.

use axum::extract::Request;
use axum::Router;
use evomem_mcp::{tools, HttpBackend, RouterBackend, V1Reply, V1};
use serde_json::{json, Value};

/// A router that answers every request with what it received; 404 for
/// `/v1/missing`, and a body that is not JSON for `/v1/text`.
fn echo() -> Router {
    Router::new().fallback(|req: Request| async move {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        let h = |n: &str| {
            parts
                .headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let path = parts.uri.path_and_query().map(|p| p.to_string());
        if parts.uri.path() == "/v1/text" {
            return (axum::http::StatusCode::OK, "plain words").into_response_parts();
        }
        let status = if parts.uri.path() == "/v1/missing" {
            axum::http::StatusCode::NOT_FOUND
        } else {
            axum::http::StatusCode::OK
        };
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (
            status,
            axum::Json(json!({
                "method": parts.method.as_str(),
                "path": path,
                "auth": h("authorization"),
                "idem": h("idempotency-key"),
                "body": body,
            })),
        )
            .into_response_parts()
    })
}

trait IntoParts {
    fn into_response_parts(self) -> axum::response::Response;
}
impl<T: axum::response::IntoResponse> IntoParts for T {
    fn into_response_parts(self) -> axum::response::Response {
        self.into_response()
    }
}

fn args(v: Value) -> rmcp::model::JsonObject {
    match v {
        Value::Object(m) => m,
        _ => Default::default(),
    }
}

async fn conformance(backend: &dyn V1) -> Vec<V1Reply> {
    let calls = [
        (
            "add_memories",
            json!({"user_id": "u 1", "memories": [{"text": "t"}], "idempotency_key": "k1"}),
        ),
        (
            "list_memories",
            json!({"user_id": "u/2", "limit": 5, "cursor": "a&b"}),
        ),
        ("delete_memory", json!({"id": "m_1", "hard": true})),
        ("update_memory", json!({"id": "m_é", "metadata": {"x": 1}})),
        ("feedback", json!({"decision_id": 3, "reward": 0.5})),
    ];
    let mut out = Vec::new();
    for (tool, a) in calls {
        let call = tools::route(tool, args(a)).and_then(Result::ok);
        let Some(call) = call else {
            panic!("{tool} does not route");
        };
        out.push(backend.call(call.clone(), None).await.unwrap());
        // A key named by the caller wins over the backend's own.
        let r = backend.call(call, Some("caller")).await.unwrap();
        assert_eq!(r.body["auth"], json!("Bearer caller"));
    }
    for path in ["/v1/missing", "/v1/text"] {
        let call = evomem_mcp::V1Call {
            method: evomem_mcp::Method::Get,
            path: path.into(),
            body: None,
            idempotency_key: None,
        };
        out.push(backend.call(call, None).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_sends_the_same_request_and_returns_the_same_answer() {
    let local = RouterBackend::new(echo(), Some("own".into()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, echo()).await });
    let remote = HttpBackend::new(&format!("http://{addr}/"), "own".into()).unwrap();
    let a = conformance(&local).await;
    let b = conformance(&remote).await;
    assert_eq!(a, b);
    // What the requests were, once.
    assert_eq!(a[0].body["method"], json!("POST"));
    assert_eq!(a[0].body["auth"], json!("Bearer own"));
    assert_eq!(a[0].body["idem"], json!("k1"));
    assert_eq!(
        a[0].body["body"],
        json!({"user_id": "u 1", "memories": [{"text": "t"}]})
    );
    assert_eq!(
        a[1].body["path"],
        json!("/v1/users/u%2F2/memories?limit=5&cursor=a%26b")
    );
    assert_eq!(a[2].body["method"], json!("DELETE"));
    assert_eq!(a[3].body["path"], json!("/v1/memories/m_%C3%A9"));
    assert_eq!(a[5].status, 404);
    assert_eq!(a[6].body, json!("plain words"));
}

#[tokio::test]
async fn a_service_that_cannot_be_reached_is_an_error_naming_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let b = HttpBackend::new(&format!("http://{addr}"), "k".into()).unwrap();
    let call = tools::route("get_memory", args(json!({"id": "m"})))
        .and_then(Result::ok)
        .unwrap();
    let e = b.call(call, None).await.unwrap_err();
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
}
