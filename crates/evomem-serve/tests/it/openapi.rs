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

/// The schema `r` names (`#/components/schemas/X`), or `r` itself.
fn resolve<'a>(doc: &'a Value, r: &'a Value) -> &'a Value {
    match r.get("$ref").and_then(Value::as_str) {
        Some(x) => &doc["components"]["schemas"][x.trim_start_matches("#/components/schemas/")],
        None => r,
    }
}

/// Check `v` against the object schema `schema` the way drift shows: every
/// key `v` has is a property of the schema, and every required property is
/// in `v`; nested objects and arrays of objects are checked the same way.
/// `where_` names the place for the message.
fn conforms(doc: &Value, schema: &Value, v: &Value, where_: &str, out: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    // `oneOf`/`anyOf`/`allOf` wrappers: check against the first alternative
    // with properties (the document's wrappers hold one).
    let schema = ["allOf", "oneOf", "anyOf"]
        .iter()
        .filter_map(|k| schema.get(*k).and_then(Value::as_array))
        .flatten()
        .map(|s| resolve(doc, s))
        .find(|s| s.get("properties").is_some())
        .unwrap_or(schema);
    match v {
        Value::Object(m) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                // A map (`additionalProperties: <schema>`): each value; else
                // a free-form object (`type: object`).
                if let Some(each) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                    for (k, x) in m.iter().take(3) {
                        conforms(doc, each, x, &format!("{where_}[{k}]"), out);
                    }
                }
                return;
            };
            for k in m.keys() {
                if !props.contains_key(k) {
                    out.push(format!(
                        "{where_}: field `{k}` is answered but not documented"
                    ));
                }
            }
            for r in schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap();
                if !m.contains_key(r) {
                    out.push(format!(
                        "{where_}: required field `{r}` is documented but not answered"
                    ));
                }
            }
            for (k, x) in m {
                if let Some(p) = props.get(k) {
                    conforms(doc, p, x, &format!("{where_}.{k}"), out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for (i, x) in a.iter().enumerate().take(3) {
                    conforms(doc, items, x, &format!("{where_}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The inspector's `/ui/api` answers are built as JSON by hand, and their
/// schemas (`ui_schema.rs`) are written beside them: this test calls every
/// documented `/ui/api` GET route on a seeded tenant and checks each answer
/// against its documented schema, both ways (a field answered but not
/// documented, a required field documented but not answered), nested
/// objects included. So the hand-written shapes cannot drift either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_api_answers_match_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let decision = crate::inspector::seed(&s).await.to_string();
    let (_, doc) = s.call("GET", "/openapi.json", None, None).await;
    let (_, mems) = s
        .call("GET", "/v1/users/alice/memories", Some(KEY_A), None)
        .await;
    let memory = mems["memories"][0]["id"].as_str().unwrap().to_string();
    let mut checked = 0;
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/ui/api") {
            continue;
        }
        let Some(op) = ops.get("get") else { continue };
        let concrete = path
            .replace("{user_id}", "fan")
            .replace("{seq}", "1")
            .replace(
                "{id}",
                if path.contains("decisions") {
                    decision.as_str()
                } else {
                    memory.as_str()
                },
            );
        let concrete = match path.as_str() {
            "/ui/api/decisions" => format!("{concrete}?user=fan"),
            "/ui/api/users/{user_id}/state" => format!("{concrete}?at=2"),
            _ => concrete,
        };
        let (st, v) = s.call("GET", &concrete, Some(KEY_A), None).await;
        assert_eq!(st, 200, "GET {concrete}: {v}");
        let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
        conforms(&doc, schema, &v, &format!("GET {concrete}"), &mut out);
        checked += 1;
    }
    assert!(checked >= 9, "{checked} routes checked");
    assert!(
        out.is_empty(),
        "answers and schemas differ:\n{}",
        out.join("\n")
    );
}
