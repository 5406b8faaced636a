//! The OpenAPI document served at `/openapi.json` describes exactly the
//! router's operations (`/v1`, the probes, `/mcp` and the inspector's
//! `/ui/api`), every `$ref` in it resolves, and it is the committed file.

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
    // The other way round: a documented path answers 405 to every method
    // it does not document (the probes above found the documented ones).
    // `/mcp` is a tower service that takes any method to the MCP
    // transport. That every routed path is documented is the unit test
    // `openapi::tests::every_routed_path_is_documented`.
    for (path, ops) in paths {
        if path == "/mcp" {
            continue;
        }
        let ops = ops.as_object().unwrap();
        let concrete = path
            .replace("{id}", "m_x")
            .replace("{user_id}", "u")
            .replace("{seq}", "1");
        for method in ["get", "post", "put", "patch", "delete"] {
            if ops.contains_key(method) {
                continue;
            }
            let (st, e) = s
                .call(
                    &method.to_uppercase(),
                    &concrete,
                    Some(KEY_A),
                    Some(serde_json::json!({})),
                )
                .await;
            assert_eq!(st, 405, "{method} {path} is routed but not documented: {e}");
        }
    }
    // What is served is what is committed (`openapi_json_is_up_to_date`
    // compares the committed file with the generator's text).
    let committed = include_str!("../../openapi.json");
    let file: Value = serde_json::from_str(committed).unwrap();
    assert_eq!(file, doc, "/openapi.json is not the committed openapi.json");
    s.stop().await;
}
