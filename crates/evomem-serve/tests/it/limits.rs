//! The connection limit (`serve.max_connections`) holds connections past
//! it in the accept queue until one closes; a loop request that fails
//! halfway (a recommend whose new candidates were registered in its plan,
//! then whose second candidate's embedding fails) commits nothing.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_wait_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.max_connections = 2;
    let s = start(cfg).await;
    let addr = s.base.trim_start_matches("http://").to_string();
    // Two idle connections take both slots.
    let a = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let b = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let client = reqwest::Client::new();
    let url = format!("{}/healthz", s.base);
    let third = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(url).send().await.map(|r| r.status().as_u16()) }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !third.is_finished(),
        "a connection past the limit was served"
    );
    drop(a);
    let got = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("the waiting connection was not served after one closed")
        .unwrap()
        .unwrap();
    assert_eq!(got, 200);
    drop(b);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_request_failing_halfway_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gated::new();
    gate.open();
    let s = start_with(config(dir.path(), None), gate.clone()).await;
    let (st, e) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "u", "candidates": [
                {"id": "i1", "title": "Kind of Blue", "categories": ["Jazz"]},
                {"id": "i2", "title": "FAIL to embed", "categories": ["Jazz"]}
            ]})),
        )
        .await;
    assert!(
        st >= 500,
        "the second candidate's failure was not an error: {st} {e}"
    );
    // Nothing of the user was committed: no record, no op names them.
    let (st, d) = s.call("DELETE", "/v1/users/u", Some(KEY_A), None).await;
    assert_eq!(st, 404, "the failed request left the user behind: {d}");
    // Nor the first event's item.
    let (st, r) = s
        .call(
            "POST",
            "/v1/recommend",
            Some(KEY_A),
            Some(json!({"user_id": "v", "candidates": ["i1"]})),
        )
        .await;
    assert_eq!(st, 422, "the failed request registered item i1: {r}");
    // The same request without the failing event goes through.
    let (st, e) = s
        .call(
            "POST",
            "/v1/events",
            Some(KEY_A),
            Some(json!({"user_id": "u", "events": [
                {"item": {"id": "i1", "title": "Kind of Blue", "categories": ["Jazz"]}, "rating": 5}
            ]})),
        )
        .await;
    assert_eq!(st, 200, "{e}");
    let (st, _) = s.call("DELETE", "/v1/users/u", Some(KEY_A), None).await;
    assert_eq!(st, 200);
    s.stop().await;
}
