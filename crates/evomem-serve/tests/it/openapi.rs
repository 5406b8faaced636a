//! The OpenAPI document describes exactly the router's routes (`/v1`, the
//! probes, `/mcp` and the inspector's `/ui/api`), and every `$ref` in it resolves.

use crate::common::*;
use serde_json::Value;

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    out.push(x.as_str().unwrap().to_string());
                } else {
                    refs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_matches_the_router() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let (st, doc) = s.call("GET", "/openapi.json", None, None).await;
    assert_eq!(st, 200);
    let mut r = Vec::new();
    refs(&doc, &mut r);
    for x in &r {
        let name = x.strip_prefix("#/components/schemas/").unwrap();
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "dangling {x}"
        );
    }
    let paths = doc["paths"].as_object().unwrap();
    // Every documented operation exists (answers something other than the
    // router's 404 / 405), and an undocumented path is a 404.
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", "m_x")
                .replace("{user_id}", "u")
                .replace("{seq}", "1");
            let (st, e) = s
                .call(
                    &method.to_uppercase(),
                    &concrete,
                    Some(KEY_A),
                    Some(serde_json::json!({})),
                )
                .await;
            assert!(
                st != 405
                    && !(st == 404
                        && e["error"]["id"].is_null()
                        && e["error"]["message"]
                            .as_str()
                            .unwrap_or("")
                            .contains("route")),
                "{method} {path} is documented but not routed: {st} {e}"
            );
        }
    }
    let expected = [
        "/v1/memories",
        "/v1/memories/search",
        "/v1/memories/{id}",
        "/v1/memories/{id}/history",
        "/v1/users/{user_id}/memories",
        "/v1/users/{user_id}",
        "/v1/events",
        "/v1/recommend",
        "/v1/feedback",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/mcp",
    ];
    let mut documented: Vec<&str> = paths.keys().map(String::as_str).collect();
    documented.sort();
    // The inspector's routes, as `ui.rs` routes them.
    let mut want = expected.to_vec();
    want.extend(evomem_serve::ui::API_ROUTES);
    want.sort();
    assert_eq!(documented, want, "routes and document differ");
    // The committed document is what the generator writes.
    let file: Value = serde_json::from_str(evomem_serve::api::OPENAPI).unwrap();
    assert_eq!(file, doc);
    s.stop().await;
}
