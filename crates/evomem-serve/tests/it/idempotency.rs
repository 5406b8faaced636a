//! Issue 60: a keyed write is applied exactly once across instances and
//! restarts. Its key is stored with its commit, so that an instance that
//! never saw it (the one a dead instance's tenants moved to, or this one
//! after a restart) answers the retry 410 `applied_before` instead of
//! writing again; the same key with another body is refused (422).

use crate::common::*;
use serde_json::{json, Value};

/// `method path` as tenant alpha with `Idempotency-Key: key`: status and
/// the JSON body.
async fn keyed(s: &TestServer, key: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let r = s
        .client
        .request(method.parse().unwrap(), format!("{}{path}", s.base))
        .bearer_auth(KEY_A)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

/// The texts of user `u1`'s memories, as `s` lists them.
async fn texts(s: &TestServer) -> Vec<String> {
    let (st, v) = s
        .call("GET", "/v1/users/u1/memories", Some(KEY_A), None)
        .await;
    assert_eq!(st, 200, "{v}");
    let mut t: Vec<String> = v["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect();
    t.sort();
    t
}

/// A keyed add and a keyed edit through instance one, retried through
/// instance two (which never saw the keys): each is applied once.
async fn retried_elsewhere(one: &TestServer, two: &TestServer) {
    let add = json!({"user_id": "u1", "memories": [{"text": "plum orchard"}]});
    let (st, v) = keyed(one, "k-add", "POST", "/v1/memories", add.clone()).await;
    assert_eq!(st, 201, "{v}");
    let id = v["memories"][0]["id"].as_str().unwrap().to_string();
    let (st, v) = keyed(two, "k-add", "POST", "/v1/memories", add.clone()).await;
    assert_eq!(st, 410, "the retry elsewhere ran again: {v}");
    assert_eq!(v["error"]["code"], "applied_before", "{v}");
    // Remembered there now: the same answer again.
    let (st, _) = keyed(two, "k-add", "POST", "/v1/memories", add).await;
    assert_eq!(st, 410);
    let other = json!({"user_id": "u1", "memories": [{"text": "another"}]});
    let (st, v) = keyed(two, "k-add", "POST", "/v1/memories", other).await;
    assert_eq!(st, 422, "a key reused for another body: {v}");
    // The blocking write path (an edit) stores its key too.
    let path = format!("/v1/memories/{id}");
    let edit = json!({"text": "plum orchard in bloom"});
    let (st, v) = keyed(one, "k-edit", "PATCH", &path, edit.clone()).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = keyed(two, "k-edit", "PATCH", &path, edit).await;
    assert_eq!(st, 410, "the edit's retry elsewhere ran again: {v}");
    // A new key still writes.
    let fresh = json!({"user_id": "u1", "memories": [{"text": "quince"}]});
    let (st, v) = keyed(two, "k-fresh", "POST", "/v1/memories", fresh).await;
    assert_eq!(st, 201, "{v}");
    for s in [one, two] {
        assert_eq!(texts(s).await, ["plum orchard in bloom", "quince"]);
    }
    // The edit was applied once: one edit in the memory's history.
    let (st, v) = two
        .call("GET", &format!("{path}/history"), Some(KEY_A), None)
        .await;
    assert_eq!(st, 200, "{v}");
    let edits = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["op"] != "create")
        .count();
    assert_eq!(edits, 1, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_write_retried_on_another_instance_is_applied_once() {
    let Some(url) = pg_url() else { return };
    let _serial = pg_serial().await;
    reset_pg(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let one = start(config(dir.path(), Some(&url))).await;
    let two = start(config(dir.path(), Some(&url))).await;
    retried_elsewhere(&one, &two).await;
    one.stop().await;
    two.stop().await;
    reset_pg(&url).await;
}

/// SQLite: the instance before a restart and the one after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_write_retried_after_a_restart_is_applied_once() {
    let dir = tempfile::tempdir().unwrap();
    let before = start(config(dir.path(), None)).await;
    let add = json!({"user_id": "u1", "memories": [{"text": "plum orchard"}]});
    let (st, v) = keyed(&before, "k-add", "POST", "/v1/memories", add.clone()).await;
    assert_eq!(st, 201, "{v}");
    before.stop().await;
    let after = start(config(dir.path(), None)).await;
    let (st, v) = keyed(&after, "k-add", "POST", "/v1/memories", add).await;
    assert_eq!(st, 410, "the retry after a restart ran again: {v}");
    assert_eq!(texts(&after).await, ["plum orchard"]);
    after.stop().await;
}
