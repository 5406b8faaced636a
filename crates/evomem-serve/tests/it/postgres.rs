//! The service on PostgreSQL: the API round trip, user deletion, and two
//! instances on one database that see each other's writes.

use crate::common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_round_trip_and_two_instances_share_writes() {
    let Some(url) = pg_url() else { return };
    let _serial = pg_serial().await;
    reset_pg(&url).await;
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let a = start(config(d1.path(), Some(&url))).await;
    let b = start(config(d2.path(), Some(&url))).await;

    let (st, v) = a
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "memories": [{"text": "written through instance a"}]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let id_a = v["memories"][0]["id"].as_str().unwrap().to_string();
    // b sees a's write, by id, in a list and in a search.
    let (st, m) = b
        .call("GET", &format!("/v1/memories/{id_a}"), Some(KEY_A), None)
        .await;
    assert_eq!(st, 200, "{m}");
    let (_, r) = b
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "query": "instance a"})),
        )
        .await;
    assert_eq!(r["results"][0]["memory"]["id"], id_a.as_str(), "{r}");
    // b writes too (its log continues a's); a sees it.
    let (st, v) = b
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "memories": [{"text": "written through instance b"}]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (_, l) = a
        .call("GET", "/v1/users/u1/memories", Some(KEY_A), None)
        .await;
    assert_eq!(l["memories"].as_array().unwrap().len(), 2, "{l}");
    // Interleaved writers on both instances: every acknowledged write lands.
    let mut acked = Vec::new();
    for i in 0..10 {
        let s = if i % 2 == 0 { &a } else { &b };
        let (st, v) = s
            .call(
                "POST",
                "/v1/memories",
                Some(KEY_A),
                Some(json!({"user_id": "u2", "memories": [{"text": format!("note {i}")}]})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        acked.push(v["memories"][0]["id"].as_str().unwrap().to_string());
    }
    let (_, l) = b
        .call("GET", "/v1/users/u2/memories", Some(KEY_A), None)
        .await;
    let mut got: Vec<String> = l["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    acked.sort();
    assert_eq!(got, acked);
    // Tenants stay apart on one database.
    let (st, _) = b
        .call("GET", &format!("/v1/memories/{id_a}"), Some(KEY_B), None)
        .await;
    assert_eq!(st, 404);
    // Deleting a user on a (which rewrites the log) is seen by b.
    let (st, d) = a.call("DELETE", "/v1/users/u1", Some(KEY_A), None).await;
    assert_eq!(st, 200, "{d}");
    let (st, _) = b
        .call("GET", &format!("/v1/memories/{id_a}"), Some(KEY_A), None)
        .await;
    assert_eq!(st, 404);
    let (_, l) = b
        .call("GET", "/v1/users/u2/memories", Some(KEY_A), None)
        .await;
    assert_eq!(
        l["memories"].as_array().unwrap().len(),
        10,
        "u2 kept after u1's deletion"
    );
    // The loop on PostgreSQL.
    let (st, e) = a
        .call("POST", "/v1/events", Some(KEY_A), Some(json!({"user_id": "u3", "events": [{"item": {"id": "i1", "title": "Kind of Blue", "categories": ["Jazz"]}, "rating": 5}]})))
        .await;
    assert_eq!(st, 200, "{e}");
    let (st, r) = b
        .call("POST", "/v1/recommend", Some(KEY_A), Some(json!({"user_id": "u3", "candidates": ["i1", {"id": "i2", "title": "Paranoid", "categories": ["Metal"]}]})))
        .await;
    assert_eq!(st, 200, "{r}");
    let did = r["decision_id"].as_u64().unwrap();
    let (st, f) = a
        .call(
            "POST",
            "/v1/feedback",
            Some(KEY_A),
            Some(json!({"decision_id": did, "reward": 1.0})),
        )
        .await;
    assert_eq!(st, 200, "feedback on the other instance: {f}");
    a.stop().await;
    b.stop().await;
    reset_pg(&url).await;
}

/// Issue 60 on PostgreSQL: with `serve.max_open_tenants = 1`, requests
/// that alternate between two tenants close and reopen each one every
/// time (a PostgreSQL client, which owns a runtime, closed and dropped
/// off the async threads), and every write is there after each reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tenants_close_and_reopen_under_the_open_bound() {
    let Some(url) = pg_url() else { return };
    let _serial = pg_serial().await;
    let names = ["ondemand_a", "ondemand_b"];
    let u = url.clone();
    tokio::task::spawn_blocking(move || {
        for t in names {
            evomem_store::PostgresStore::drop_schema(&u, &format!("evomem_t_{t}")).unwrap();
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), Some(&url));
    cfg.max_open_tenants = 1;
    let keys = ["evk_ondemand_a_key", "evk_ondemand_b_key"];
    let ring = evomem_serve::auth::KeyRing::from_plain(keys.iter().copied().zip(names));
    let s = start_live(
        cfg,
        std::sync::Arc::new(evomem_embed::HashingEmbedder::new(64)),
        evomem_serve::auth::LiveKeys::fixed(ring),
    )
    .await;
    for round in 0..3 {
        for k in keys {
            let body = json!({"user_id": "u", "memories": [{"text": format!("round {round}")}]});
            let (st, v) = s.call("POST", "/v1/memories", Some(k), Some(body)).await;
            assert_eq!(st, 201, "{v}");
            let (st, v) = s.call("GET", "/v1/users/u/memories", Some(k), None).await;
            assert_eq!(st, 200, "{v}");
            assert_eq!(v["memories"].as_array().unwrap().len(), round + 1, "{v}");
        }
    }
    let (_, m) = s.call("GET", "/metrics", None, None).await;
    let m = m.as_str().unwrap();
    assert!(m.contains("evomem_tenant_opens_total 6"), "{m}");
    assert!(m.contains("evomem_tenant_closes_total 5"), "{m}");
    s.stop().await;
}

/// Issue 60: a tenant whose database does not answer (nothing listens on
/// the store's port) is answered 503 `tenant_unavailable` with
/// `Retry-After`, not 500: the client retries, and HAProxy may retry on
/// another instance. `/metrics` counts the failed opens. Needs no server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_database_does_not_answer_is_unavailable_not_a_fault() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("postgres://evomem@127.0.0.1:{port}/nothing?sslmode=disable");
    let s = start(config(dir.path(), Some(&url))).await;
    let r = s
        .client
        .post(format!("{}/v1/memories", s.base))
        .bearer_auth(KEY_A)
        .json(&json!({"user_id": "u1", "memories": [{"text": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
        Some("1")
    );
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "tenant_unavailable", "{v}");
    let m = s
        .client
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        m.contains("evomem_tenant_open_failures_total 1"),
        "{}",
        m.lines()
            .filter(|l| l.contains("open_failures"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    s.stop().await;
}
