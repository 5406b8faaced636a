//! The API end to end on SQLite: memories, search against brute force,
//! history, time travel, user deletion down to the file's bytes, the loop
//! (events, recommend, feedback after a restart), errors, limits, metrics.

use crate::common::*;
use serde_json::{json, Value};

fn ids(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_crud_search_history_and_time_travel() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let (added, t_after_first) = add_three_memories(&s).await;
    check_get(&s, &added).await;
    check_search_matches_brute_force(&s, &added).await;
    check_search_filter(&s, &added).await;
    check_update_and_history(&s, &added).await;
    check_delete_and_time_travel(&s, &added, t_after_first).await;
    s.stop().await;
    let s = start(config(dir.path(), None)).await;
    check_after_restart(&s, &added).await;
    s.stop().await;
}

/// Adds three memories for u1; returns their ids and the first one's
/// `created_at_ms`.
async fn add_three_memories(s: &TestServer) -> (Vec<String>, u64) {
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "memories": [
                {"text": "likes slow jazz records", "metadata": {"src": "chat"}},
                {"text": "allergic to peanuts", "metadata": {"src": "form"}},
                {"text": "prefers vinyl over streaming", "metadata": {"src": "chat"}}
            ]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let added = ids(&v, "memories");
    assert_eq!(added.len(), 3);
    let t_after_first = v["memories"][0]["created_at_ms"].as_u64().unwrap();
    (added, t_after_first)
}

/// Get returns the memory's text, user and metadata.
async fn check_get(s: &TestServer, added: &[String]) {
    let (st, m) = s
        .call(
            "GET",
            &format!("/v1/memories/{}", added[1]),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(m["text"], "allergic to peanuts");
    assert_eq!(m["user_id"], "u1");
    assert_eq!(m["metadata"]["src"], "form");
}

/// Search equals a brute-force scoring of the same user's memories.
async fn check_search_matches_brute_force(s: &TestServer, added: &[String]) {
    let (st, r) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "query": "jazz vinyl", "k": 2})),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    let emb = evomem_embed::HashingEmbedder::new(64);
    let q = evomem_core::Embedder::embed_one(&emb, "jazz vinyl").unwrap();
    let texts = [
        "likes slow jazz records",
        "allergic to peanuts",
        "prefers vinyl over streaming",
    ];
    let mut brute: Vec<(f32, String)> = texts
        .iter()
        .zip(added)
        .map(|(t, id)| {
            let v = evomem_core::Embedder::embed_one(&emb, t).unwrap();
            (v.iter().zip(&q).map(|(a, b)| a * b).sum(), id.clone())
        })
        .collect();
    brute.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let got: Vec<String> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["memory"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, vec![brute[0].1.clone(), brute[1].1.clone()]);
    let s0 = r["results"][0]["score"].as_f64().unwrap();
    assert!((s0 - brute[0].0 as f64).abs() < 1e-5);
}

/// A metadata filter keeps only the matching memory.
async fn check_search_filter(s: &TestServer, added: &[String]) {
    let (_, r) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(
                json!({"user_id": "u1", "query": "jazz vinyl", "k": 5, "filter": {"src": "form"}}),
            ),
        )
        .await;
    let got: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["memory"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![added[1].as_str()]);
}

/// Update, then history shows create then update with provenance.
async fn check_update_and_history(s: &TestServer, added: &[String]) {
    let (st, u) = s
        .call(
            "PATCH",
            &format!("/v1/memories/{}", added[0]),
            Some(KEY_A),
            Some(json!({"text": "likes cool jazz records"})),
        )
        .await;
    assert_eq!(st, 200, "{u}");
    assert_eq!(u["text"], "likes cool jazz records");
    assert_eq!(
        u["metadata"]["src"], "chat",
        "metadata kept when only text changes"
    );
    let (st, h) = s
        .call(
            "GET",
            &format!("/v1/memories/{}/history", added[0]),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let ops: Vec<&str> = h["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, vec!["create", "update_fields"]);
    assert_eq!(h["history"][0]["policy"], "api");
}

/// Delete one; time travel still sees it before.
async fn check_delete_and_time_travel(s: &TestServer, added: &[String], t_after_first: u64) {
    let (st, _) = s
        .call(
            "DELETE",
            &format!("/v1/memories/{}", added[2]),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let (st, _) = s
        .call(
            "GET",
            &format!("/v1/memories/{}", added[2]),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 404);
    let (_, now) = s
        .call("GET", "/v1/users/u1/memories", Some(KEY_A), None)
        .await;
    assert_eq!(now["memories"].as_array().unwrap().len(), 2);
    let (st, then) = s
        .call(
            "GET",
            &format!("/v1/users/u1/memories?as_of={t_after_first}"),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 200, "{then}");
    let texts_then: Vec<&str> = then["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts_then.len(), 3, "{then}");
    assert!(
        texts_then.contains(&"likes slow jazz records"),
        "old text as of then"
    );
    let (_, before) = s
        .call("GET", "/v1/users/u1/memories?as_of=1", Some(KEY_A), None)
        .await;
    assert!(before["memories"].as_array().unwrap().is_empty());
}

/// After a restart everything acknowledged is back, and the index is
/// rebuilt.
async fn check_after_restart(s: &TestServer, added: &[String]) {
    let (_, now) = s
        .call("GET", "/v1/users/u1/memories", Some(KEY_A), None)
        .await;
    assert_eq!(now["memories"].as_array().unwrap().len(), 2);
    let (_, r) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "query": "peanuts", "k": 1})),
        )
        .await;
    assert_eq!(r["results"][0]["memory"]["id"], added[1].as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_cannot_read_or_write_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let (_, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "shared-name", "memories": [{"text": "alpha's secret"}]})),
        )
        .await;
    let id = ids(&v, "memories").remove(0);
    for (m, p, body) in [
        ("GET", format!("/v1/memories/{id}"), None),
        ("GET", format!("/v1/memories/{id}/history"), None),
        ("DELETE", format!("/v1/memories/{id}"), None),
        (
            "PATCH",
            format!("/v1/memories/{id}"),
            Some(json!({"text": "beta wrote this"})),
        ),
    ] {
        let (st, e) = s.call(m, &p, Some(KEY_B), body).await;
        assert_eq!(st, 404, "{m} {p}: {e}");
        assert_eq!(e["error"]["code"], "not_found");
    }
    let (_, r) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_B),
            Some(json!({"user_id": "shared-name", "query": "secret"})),
        )
        .await;
    assert!(r["results"].as_array().unwrap().is_empty(), "{r}");
    let (st, _) = s
        .call("DELETE", "/v1/users/shared-name", Some(KEY_B), None)
        .await;
    assert_eq!(st, 404);
    let (st, m) = s
        .call("GET", &format!("/v1/memories/{id}"), Some(KEY_A), None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(
        m["text"], "alpha's secret",
        "nothing of beta's reached alpha"
    );
    // Another user of the same tenant does not see it either.
    let (_, r) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "someone-else", "query": "secret"})),
        )
        .await;
    assert!(r["results"].as_array().unwrap().is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_user_leaves_nothing_in_tables_index_log_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let secret = "zebra-marmalade-7731 is my passphrase";
    s.call(
        "POST",
        "/v1/memories",
        Some(KEY_A),
        Some(json!({"user_id": "gone", "memories": [{"text": secret}, {"text": "second note of gone"}]})),
    )
    .await;
    s.call(
        "POST",
        "/v1/memories",
        Some(KEY_A),
        Some(json!({"user_id": "kept", "memories": [{"text": "kept user's note"}]})),
    )
    .await;
    // Loop records too: the user's policy memory and decisions go with them.
    let (st, e) = s
        .call(
            "POST",
            "/v1/events",
            Some(KEY_A),
            Some(json!({"user_id": "gone", "events": [
                {"item": {"id": "i1", "title": "Kind of Blue", "categories": ["Jazz"]}, "rating": 5},
                {"item": {"id": "i2", "title": "Nevermind", "categories": ["Rock"]}, "rating": 2}
            ]})),
        )
        .await;
    assert_eq!(st, 200, "{e}");
    let (st, r) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "gone", "candidates": ["i1", "i2"]})),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    let (st, d) = s.call("DELETE", "/v1/users/gone", Some(KEY_A), None).await;
    assert_eq!(st, 200, "{d}");
    assert!(d["records_removed"].as_u64().unwrap() >= 3, "{d}");
    assert_eq!(d["verified"].as_array().unwrap().len(), 5, "{d}");
    let (_, now) = s
        .call("GET", "/v1/users/gone/memories", Some(KEY_A), None)
        .await;
    assert!(now["memories"].as_array().unwrap().is_empty());
    let (_, r) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "gone", "query": "passphrase"})),
        )
        .await;
    assert!(r["results"].as_array().unwrap().is_empty());
    let (_, kept) = s
        .call("GET", "/v1/users/kept/memories", Some(KEY_A), None)
        .await;
    assert_eq!(
        kept["memories"].as_array().unwrap().len(),
        1,
        "others untouched"
    );
    let (st, _) = s.call("DELETE", "/v1/users/gone", Some(KEY_A), None).await;
    assert_eq!(st, 404, "a second delete finds nothing");
    s.stop().await;
    // The bytes of the SQLite file (and its WAL), and of every other file
    // in the folder, no longer hold the text.
    let mut files = Vec::new();
    let mut dirs = vec![dir.path().to_path_buf()];
    while let Some(d) = dirs.pop() {
        for f in std::fs::read_dir(d).unwrap() {
            let p = f.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
    }
    for p in files {
        let bytes = std::fs::read(&p).unwrap();
        let hay = String::from_utf8_lossy(&bytes);
        assert!(
            !hay.contains("zebra-marmalade"),
            "{} still holds the text",
            p.display()
        );
    }
    // And a restart does not bring it back.
    let s = start(config(dir.path(), None)).await;
    let (_, now) = s
        .call("GET", "/v1/users/gone/memories", Some(KEY_A), None)
        .await;
    assert!(now["memories"].as_array().unwrap().is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_events_recommend_and_feedback_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let items = [
        ("a1", "Blue Train", "Jazz"),
        ("a2", "Giant Steps", "Jazz"),
        ("a3", "Mingus Ah Um", "Jazz"),
        ("b1", "Master of Puppets", "Metal"),
        ("b2", "Paranoid", "Metal"),
        ("c1", "Blue Train Live", "Jazz"),
        ("c2", "Reign in Blood", "Metal"),
    ];
    let events: Vec<Value> = items[..5]
        .iter()
        .map(|(id, t, g)| {
            let r = if *g == "Jazz" { 5 } else { 1 };
            json!({"item": {"id": id, "title": t, "categories": [g]}, "rating": r})
        })
        .collect();
    let (st, e) = s
        .call(
            "POST",
            "/v1/events",
            Some(KEY_A),
            Some(json!({"user_id": "fan", "events": events})),
        )
        .await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["policy"], "mars");
    assert!(e["ops"].as_u64().unwrap() > 0, "MARS wrote memory: {e}");
    let cands = json!([
        {"id": "c1", "title": "Blue Train Live", "categories": ["Jazz"]},
        {"id": "c2", "title": "Reign in Blood", "categories": ["Metal"]}
    ]);
    let (st, r) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "fan", "candidates": cands})),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(
        r["ranking"][0]["item_id"], "c1",
        "the jazz fan gets jazz first: {r}"
    );
    assert!(!r["evidence"].as_array().unwrap().is_empty(), "{r}");
    let decision = r["decision_id"].as_u64().unwrap();

    s.stop().await;
    let s = start(config(dir.path(), None)).await;
    let (st, f) = s
        .call(
            "POST",
            "/v1/feedback",
            Some(KEY_A),
            Some(json!({"decision_id": decision, "reward": 1.0, "success": true, "item_id": "c1"})),
        )
        .await;
    assert_eq!(st, 200, "{f}");
    assert_eq!(f["feedback_count"], 1);
    let (st, e) = s
        .call(
            "POST",
            "/v1/feedback",
            Some(KEY_B),
            Some(json!({"decision_id": decision})),
        )
        .await;
    assert_eq!(st, 404, "another tenant cannot give feedback on it: {e}");
    let (st, e) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "fan", "candidates": ["nope"]})),
        )
        .await;
    assert_eq!(st, 422);
    assert_eq!(e["error"]["code"], "invalid_field");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("candidates[0]"),
        "{e}"
    );
    for p in [
        "atomrec",
        "seqmem",
        "bpr",
        "nonesuch",
        "mars[profile_words=5]",
    ] {
        let (st, e) = s
            .call(
                "POST",
                "/v1/recommend",
                Some(KEY_A),
                Some(json!({"user_id": "fan", "policy": p, "candidates": ["c1"]})),
            )
            .await;
        assert_eq!(st, 422, "{p}: {e}");
        assert_eq!(e["error"]["code"], "policy_error", "{p}: {e}");
    }
    let (st, r) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "fan", "policy": "no-memory", "candidates": ["c1", "c2"], "k": 1})),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["ranking"].as_array().unwrap().len(), 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_stable_codes_and_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.max_batch = 3;
    cfg.max_body_bytes = 4096;
    let s = start(cfg).await;
    let cases: Vec<Case> = auth_and_body_error_cases()
        .into_iter()
        .chain(lookup_and_query_error_cases())
        .collect();
    for (m, p, k, b, status, code, needle) in cases {
        let (st, e) = s.call(m, p, k, b).await;
        assert_eq!(st, status, "{m} {p}: {e}");
        assert_eq!(e["error"]["code"], code, "{m} {p}: {e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(needle),
            "{m} {p}: `{msg}` should name `{needle}`"
        );
    }
    // Nothing already stored was lost by the bad requests.
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": [{"text": "ok"}]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (_, all) = s
        .call("GET", "/v1/users/u/memories", Some(KEY_A), None)
        .await;
    assert_eq!(all["memories"].as_array().unwrap().len(), 1);
    s.stop().await;
}

/// One bad request: (method, path, key, body, status, code, what the
/// message names).
type Case = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<Value>,
    u16,
    &'static str,
    &'static str,
);

/// Bad requests refused before any lookup: missing or unknown keys, bad
/// bodies, invalid fields and size limits (max batch 3, max body 4096).
fn auth_and_body_error_cases() -> Vec<Case> {
    vec![
        (
            "GET",
            "/v1/memories/x",
            None,
            None,
            401,
            "unauthenticated",
            "Bearer",
        ),
        (
            "GET",
            "/v1/memories/x",
            Some("evk_wrong"),
            None,
            401,
            "unknown_key",
            "unknown",
        ),
        (
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u"})),
            400,
            "bad_body",
            "memories",
        ),
        (
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": [{"text": "a", "colour": 1}]})),
            400,
            "bad_body",
            "colour",
        ),
        (
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "bad user!", "memories": [{"text": "a"}]})),
            422,
            "invalid_field",
            "user_id",
        ),
        (
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": [{"text": "a"}, {"text": "  "}]})),
            422,
            "invalid_field",
            "memories[1].text",
        ),
        (
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(
                json!({"user_id": "u", "memories": [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d"}]}),
            ),
            413,
            "batch_too_large",
            "limit of 3",
        ),
        (
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": [{"text": "x".repeat(5000)}]})),
            413,
            "body_too_large",
            "4096",
        ),
    ]
}

/// Bad requests for a search, unknown memories, routes and decisions, and
/// an unparsable `as_of`.
fn lookup_and_query_error_cases() -> Vec<Case> {
    vec![
        (
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "u", "query": "q", "k": 0})),
            422,
            "invalid_field",
            "`k`",
        ),
        (
            "GET",
            "/v1/memories/nope",
            Some(KEY_A),
            None,
            404,
            "not_found",
            "nope",
        ),
        (
            "GET",
            "/v1/nowhere",
            Some(KEY_A),
            None,
            404,
            "not_found",
            "/v1/nowhere",
        ),
        (
            "POST",
            "/v1/feedback",
            Some(KEY_A),
            Some(json!({"decision_id": 99})),
            404,
            "not_found",
            "decision",
        ),
        (
            "GET",
            "/v1/users/u/memories?as_of=yesterday",
            Some(KEY_A),
            None,
            422,
            "invalid_field",
            "as_of",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_metrics_and_probes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.rate_limit_per_s = 1.0;
    cfg.rate_limit_burst = 3.0;
    let s = start(cfg).await;
    let mut codes = Vec::new();
    for _ in 0..5 {
        let (st, _) = s
            .call("GET", "/v1/users/u/memories", Some(KEY_A), None)
            .await;
        codes.push(st);
    }
    assert_eq!(codes, vec![200, 200, 200, 429, 429]);
    let (st, _) = s
        .call("GET", "/v1/users/u/memories", Some(KEY_B), None)
        .await;
    assert_eq!(st, 200, "the limit is per key");
    let (st, h) = s.call("GET", "/healthz", None, None).await;
    assert_eq!((st, h["status"].as_str()), (200, Some("ok")));
    let (st, r) = s.call("GET", "/readyz", None, None).await;
    assert_eq!(st, 200);
    assert_eq!(r["tenants"], 2);
    let (st, m) = s.call("GET", "/metrics", None, None).await;
    assert_eq!(st, 200);
    let m = m.as_str().unwrap();
    assert!(
        m.contains(
            "evomem_http_requests_total{route=\"/v1/users/{user_id}/memories\",status=\"429\"} 2"
        ),
        "{m}"
    );
    assert!(m.contains("evomem_http_request_duration_seconds_bucket{route=\"/v1/users/{user_id}/memories\",le=\"+Inf\"} 6"), "{m}");
    assert!(m.contains("evomem_keys_reload_failures_total 0"), "{m}");
    assert!(
        m.contains("evomem_index_vectors{tenant=\"alpha\"} 0"),
        "{m}"
    );
    assert!(m.contains("evomem_llm_calls_total"), "{m}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_are_grouped_into_fewer_commits_and_all_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(start(config(dir.path(), None)).await);
    let mut tasks = Vec::new();
    for w in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for b in 0..10 {
                let mems: Vec<Value> = (0..5)
                    .map(|i| json!({"text": format!("writer {w} batch {b} item {i}")}))
                    .collect();
                let (st, v) = s
                    .call(
                        "POST",
                        "/v1/memories",
                        Some(KEY_A),
                        Some(json!({"user_id": format!("w{w}"), "memories": mems})),
                    )
                    .await;
                assert_eq!(st, 201, "{v}");
                got.extend(ids(&v, "memories"));
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 400);
    let (_, m) = s.call("GET", "/metrics", None, None).await;
    let m = m.as_str().unwrap();
    let batches: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("evomem_ingest_batches_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(m.contains("evomem_memories_ingested_total 400"), "{m}");
    assert!(
        batches < 80,
        "{batches} commits for 80 concurrent requests: adds were not grouped"
    );
    for w in 0..8 {
        let (_, v) = s
            .call(
                "GET",
                &format!("/v1/users/w{w}/memories"),
                Some(KEY_A),
                None,
            )
            .await;
        assert_eq!(v["memories"].as_array().unwrap().len(), 50);
    }
    let s = std::sync::Arc::try_unwrap(s).ok().unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_loop_request_registers_nothing() {
    // Found by schemathesis: a request whose second item was unknown left
    // its first item registered in memory only, so the next registration
    // got a gap in the catalog and deleting a user failed to rebuild it.
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let (st, _) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "u", "candidates": [{"id": "new1", "title": "A"}, "unknown"]})),
        )
        .await;
    assert_eq!(st, 422);
    let (st, e) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "u", "candidates": ["new1"]})),
        )
        .await;
    assert_eq!(
        st, 422,
        "new1 was not registered by the rejected request: {e}"
    );
    let (st, e) = s
        .call(
            "POST",
            "/v1/events",
            Some(KEY_A),
            Some(json!({"user_id": "u", "events": [{"item": {"id": "i2", "title": "B"}}]})),
        )
        .await;
    assert_eq!(st, 200, "{e}");
    let (st, d) = s.call("DELETE", "/v1/users/u", Some(KEY_A), None).await;
    assert_eq!(st, 200, "{d}");
    s.stop().await;
}
