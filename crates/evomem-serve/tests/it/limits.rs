//! The connection limit (`serve.max_connections`) holds connections past
//! it in the accept queue until one closes; at most
//! `serve.max_open_tenants` tenants are open, each opened on its first
//! request and the idle ones closed; a loop request that fails
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

/// Issue 57: connections had no header-read or idle timeout, so a client
/// sending a request head byte by byte (or not at all) held a connection
/// slot for ever. A head not finished within `serve.header_timeout_s` of
/// its first byte, and a connection idle for `serve.idle_timeout_s`
/// (before its first request, or after one), are closed; a request that
/// runs longer than both is not cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed_and_running_requests_are_not() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.header_timeout_s = 1;
    cfg.idle_timeout_s = 2;
    let gate = Gated::new();
    let _open = OpenOnDrop(gate.clone());
    let s = start_with(cfg, gate.clone()).await;
    let addr = s.base.trim_start_matches("http://").to_string();
    // How long until the server closes `c` (reading and dropping what it
    // sends), at most 8 s.
    async fn closed_after(c: &mut tokio::net::TcpStream) -> Option<Duration> {
        let t0 = std::time::Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(8), c.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(t0.elapsed()),
                Ok(Ok(_)) => continue,
                Err(_) => return None,
            }
        }
    }
    // A request head that never ends: closed after the header timeout.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let took = closed_after(&mut slow)
        .await
        .expect("a slow head was kept open");
    assert!(took < Duration::from_millis(1900), "{took:?}");
    // A connection that sends nothing: closed after the idle timeout.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let took = closed_after(&mut idle)
        .await
        .expect("an idle connection was kept open");
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    // After a request, the idle timeout runs again.
    let mut kept = tokio::net::TcpStream::connect(&addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let took = closed_after(&mut kept)
        .await
        .expect("an idle keep-alive connection was kept open");
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    // A request running longer than both timeouts gets its answer.
    let add = {
        let base = s.base.clone();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/memories"))
                .bearer_auth(KEY_A)
                .json(&json!({"user_id": "u", "memories": [{"text": "BLOCK a while"}]}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    gate.until_held().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    gate.open();
    let st = tokio::time::timeout(Duration::from_secs(10), add)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st.ok(), Some(201), "a running request was cut");
    s.stop().await;
}

/// Issue 57: one client could take every connection slot. Past
/// `serve.max_connections_per_address` from one address, a connection is
/// closed at once; another address (and this one, once a slot frees) is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_per_address_limit_are_closed() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.max_connections_per_address = 2;
    let s = start(cfg).await;
    let addr = s.base.trim_start_matches("http://").to_string();
    let a = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let _b = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a third connection from one address was kept open: {read:?}"
    );
    drop(a);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let st = reqwest::Client::new()
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(st.ok(), Some(200), "a freed slot was not given again");
    s.stop().await;
}

/// The value of the unlabelled series `name` in `/metrics` text.
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .parse()
        .unwrap()
}

/// Issue 60: with `serve.max_open_tenants = 2`, requests to five tenants
/// all succeed (each opened on its first request), `/metrics` never shows
/// more than two open and counts the opens and closes, per-tenant series
/// cover the open tenants only, and shutdown flushes: what each tenant
/// was sent is there after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_max_open_tenants_are_open_and_every_tenant_answers() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.max_open_tenants = 2;
    let (s, keys) = start_tenants(cfg.clone(), 5).await;
    let (_, r) = s.call("GET", "/readyz", None, None).await;
    assert_eq!(
        (r["tenants"].as_u64(), r["open_tenants"].as_u64()),
        (Some(5), Some(0))
    );
    for round in 0..2 {
        for (i, k) in keys.iter().enumerate() {
            let body = json!({"user_id": "u", "memories": [{"text": format!("tenant {i} round {round}")}]});
            let (st, v) = s.call("POST", "/v1/memories", Some(k), Some(body)).await;
            assert_eq!(st, 201, "tenant {i}: {v}");
            let body = json!({"user_id": "u", "query": format!("tenant {i}"), "k": 5});
            let (st, v) = s
                .call("POST", "/v1/memories/search", Some(k), Some(body))
                .await;
            assert_eq!(st, 200, "tenant {i}: {v}");
            assert_eq!(
                v["results"].as_array().unwrap().len(),
                round + 1,
                "tenant {i}: {v}"
            );
            let (_, m) = s.call("GET", "/metrics", None, None).await;
            let m = m.as_str().unwrap();
            assert!(series(m, "evomem_tenants_open") <= 2.0, "{m}");
            let per_tenant = m
                .lines()
                .filter(|l| l.starts_with("evomem_tenant_resident_bytes{"))
                .count();
            assert!(per_tenant <= 2, "{m}");
        }
    }
    let (_, m) = s.call("GET", "/metrics", None, None).await;
    let m = m.as_str().unwrap();
    // Ten rounds of requests over five tenants, two open at a time: every
    // request opened its tenant, all but the last two were closed.
    assert_eq!(series(m, "evomem_tenant_opens_total"), 10.0, "{m}");
    assert_eq!(series(m, "evomem_tenant_closes_total"), 8.0, "{m}");
    assert_eq!(series(m, "evomem_tenant_open_seconds_count"), 10.0, "{m}");
    assert_eq!(series(m, "evomem_tenant_over_budget_total"), 0.0, "{m}");
    assert!(series(m, "evomem_resident_bytes") > 0.0, "{m}");
    assert!(
        m.contains("# TYPE evomem_tenant_closes_total counter"),
        "{m}"
    );
    assert!(
        m.contains("evomem_tenant_resident_bytes{tenant=\"t4\"}"),
        "{m}"
    );
    assert!(
        !m.contains("evomem_tenant_resident_bytes{tenant=\"t0\"}"),
        "{m}"
    );
    // Shutdown closes the open ones after their writers flushed; a
    // restart finds every memory.
    s.stop().await;
    let (s, keys) = start_tenants(cfg, 5).await;
    for (i, k) in keys.iter().enumerate() {
        let (st, v) = s.call("GET", "/v1/users/u/memories", Some(k), None).await;
        assert_eq!(st, 200);
        assert_eq!(
            v["memories"].as_array().unwrap().len(),
            2,
            "tenant {i}: {v}"
        );
    }
    s.stop().await;
}
