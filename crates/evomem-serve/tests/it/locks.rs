//! Slow work of one request must not stall the others: while a loop
//! request of tenant alpha waits on a slow model (an embedding pass held at
//! a gate), reads and writes of alpha's other users, tenant beta, and the
//! probes are all answered. Before issue 37 the loop request held alpha's
//! write lock across the model call, and every one of these waited.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

/// Generous: only a request stuck behind the held model call takes this long.
/// (method, path, key, body, expected status)
type Call<'a> = (
    &'a str,
    String,
    Option<&'a str>,
    Option<serde_json::Value>,
    u16,
);

const STUCK: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_writes_and_probes_do_not_wait_behind_a_slow_loop_request() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gated::new();
    let _open = OpenOnDrop(gate.clone());
    let s = start_with(config(dir.path(), None), gate.clone()).await;
    let (st, a) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "reader", "memories": [{"text": "likes quiet jazz"}]})),
        )
        .await;
    assert_eq!(st, 201, "{a}");
    let id = a["memories"][0]["id"].as_str().unwrap().to_string();

    // Recommends whose new candidates need an embedding pass: held. More
    // of them than the tenant has worker permits, so that loop requests
    // waiting their turn would take every permit if they held one.
    let mut slow = Vec::new();
    for i in 0..6 {
        let base = s.base.clone();
        slow.push(tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/recommend"))
                .bearer_auth(KEY_A)
                .json(&json!({"user_id": format!("fan{i}"), "candidates": [
                    {"id": format!("s{i}"), "title": "BLOCK until the test opens the gate"}
                ]}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    gate.until_held().await;
    // Give the other loop requests time to arrive and queue behind it.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let calls: Vec<Call> = vec![
        ("GET", format!("/v1/memories/{id}"), Some(KEY_A), None, 200),
        (
            "POST",
            "/v1/memories/search".into(),
            Some(KEY_A),
            Some(json!({"user_id": "reader", "query": "jazz", "k": 3})),
            200,
        ),
        (
            "GET",
            "/v1/users/reader/memories".into(),
            Some(KEY_A),
            None,
            200,
        ),
        (
            "POST",
            "/v1/memories".into(),
            Some(KEY_A),
            Some(json!({"user_id": "reader", "memories": [{"text": "and piano trios"}]})),
            201,
        ),
        (
            "PATCH",
            format!("/v1/memories/{id}"),
            Some(KEY_A),
            Some(json!({"metadata": {"seen": true}})),
            200,
        ),
        (
            "POST",
            "/v1/memories".into(),
            Some(KEY_B),
            Some(json!({"user_id": "other", "memories": [{"text": "metal"}]})),
            201,
        ),
        ("GET", "/readyz".into(), None, None, 200),
        ("GET", "/metrics".into(), None, None, 200),
    ];
    for (method, path, key, body, want) in calls {
        let r = tokio::time::timeout(STUCK, s.call(method, &path, key, body)).await;
        let Ok((st, v)) = r else {
            panic!("{method} {path} waited behind the slow loop request");
        };
        assert_eq!(st, want, "{method} {path}: {v}");
    }
    assert!(
        slow.iter().all(|h| !h.is_finished()),
        "the loop requests were still held throughout"
    );
    gate.open();
    for h in slow {
        assert_eq!(h.await.unwrap(), 200);
    }
    let (st, r) = s
        .call("GET", "/v1/users/reader/memories", Some(KEY_A), None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(r["memories"].as_array().unwrap().len(), 2, "{r}");
    s.stop().await;
}
