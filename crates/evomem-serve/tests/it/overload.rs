//! Overload and hostile input: a full queue answers 503 with Retry-After
//! instead of queueing, a 500 shows a request id and none of the failure's
//! words, and user ids cannot name another user's internal records.

use crate::common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_writer_queue_answers_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.queue_depth = 1;
    let gate = Gated::new();
    let _open = OpenOnDrop(gate.clone());
    let s = start_with(cfg, gate.clone()).await;
    let add = |text: &str| {
        let base = s.base.clone();
        let body = json!({"user_id": "u", "memories": [{"text": text}]});
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(format!("{base}/v1/memories"))
                .bearer_auth(KEY_A)
                .json(&body)
                .send()
                .await
                .unwrap();
            let retry = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            let st = r.status().as_u16();
            let v: serde_json::Value = r.json().await.unwrap();
            (st, retry, v)
        })
    };
    // The writer holds the first add in a blocked embedding pass.
    let first = add("BLOCK the writer");
    gate.until_held().await;
    // One slot left in the queue: of two more adds, one is queued and the
    // other is refused at once.
    let (b, c) = (add("second"), add("third"));
    let mut waited = 0;
    let (refused, queued) = loop {
        waited += 1;
        assert!(
            waited < 3000,
            "neither add was refused: the queue is not bounded"
        );
        if b.is_finished() {
            break (b, c);
        }
        if c.is_finished() {
            break (c, b);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let (st, retry, v) = refused.await.unwrap();
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["error"]["code"], "overloaded", "{v}");
    assert_eq!(retry.as_deref(), Some("1"));
    gate.open();
    assert_eq!(first.await.unwrap().0, 201);
    assert_eq!(queued.await.unwrap().0, 201, "the queued add is answered");
    let (st, r) = s
        .call("GET", "/v1/users/u/memories", Some(KEY_A), None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(
        r["memories"].as_array().unwrap().len(),
        2,
        "the first and the queued add were committed: {r}"
    );
    s.stop().await;
}

/// The writer's queue is bounded by memories, not jobs: with one add
/// blocked in the writer, an add that would bring the queued memories past
/// `serve.queue_memories` is refused at once (503 with `Retry-After`) even
/// though the job queue has room, while a small one still queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_queue_is_bounded_by_memories_not_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.queue_depth = 64;
    cfg.queue_memories = 5;
    let gate = Gated::new();
    let _open = OpenOnDrop(gate.clone());
    let s = start_with(cfg, gate.clone()).await;
    let add = |texts: Vec<String>| {
        let base = s.base.clone();
        let memories: Vec<serde_json::Value> = texts.iter().map(|t| json!({"text": t})).collect();
        let body = json!({"user_id": "u", "memories": memories});
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(format!("{base}/v1/memories"))
                .bearer_auth(KEY_A)
                .json(&body)
                .send()
                .await
                .unwrap();
            let retry = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            (r.status().as_u16(), retry)
        })
    };
    // Two memories held in a blocked embedding pass.
    let first = add(vec!["BLOCK the writer".into(), "two".into()]);
    gate.until_held().await;
    // 2 + 4 > 5: refused at once, though 63 job slots are free.
    let big = add((0..4).map(|i| format!("big {i}")).collect());
    let (st, retry) = tokio::time::timeout(std::time::Duration::from_secs(20), big)
        .await
        .expect("the large add was queued: the queue is not bounded by memories")
        .unwrap();
    assert_eq!(st, 503);
    assert_eq!(retry.as_deref(), Some("1"));
    // 2 + 3 <= 5: queued, and committed once the writer moves.
    let small = add((0..3).map(|i| format!("small {i}")).collect());
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !small.is_finished(),
        "the small add should wait in the queue"
    );
    gate.open();
    assert_eq!(first.await.unwrap().0, 201);
    assert_eq!(small.await.unwrap().0, 201);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_carries_a_request_id_and_none_of_the_failure_text() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with(config(dir.path(), None), Gated::new()).await;
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": [{"text": "FAIL please"}]})),
        )
        .await;
    assert_eq!(st, 500, "{v}");
    assert_eq!(v["error"]["code"], "embed_error");
    let id = v["error"]["request_id"].as_str().unwrap();
    assert_eq!(id.len(), 16, "{v}");
    let text = v.to_string();
    assert!(
        !text.contains("holding FAIL") && !text.contains(dir.path().to_str().unwrap()),
        "the failure's own words reached the client: {text}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_id_cannot_take_another_users_internal_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    for bad in ["alice:profile", "alice:meta"] {
        for (method, path, body) in [
            (
                "POST",
                "/v1/memories".to_string(),
                Some(json!({"user_id": bad, "memories": [{"text": "x"}]})),
            ),
            (
                "POST",
                "/v1/events".to_string(),
                Some(json!({"user_id": bad, "events": [{"item": {"id": "i", "title": "t"}}]})),
            ),
            ("GET", format!("/v1/users/{bad}/memories"), None),
        ] {
            let (st, v) = s.call(method, &path, Some(KEY_A), body).await;
            assert_eq!(st, 422, "{method} {path} took user {bad}: {v}");
            assert_eq!(v["error"]["code"], "invalid_field");
        }
    }
    // alice's own loop still works.
    let (st, v) = s
        .call(
            "POST",
            "/v1/events",
            Some(KEY_A),
            Some(json!({"user_id": "alice", "events": [{"item": {"id": "i", "title": "Kind of Blue", "categories": ["Jazz"]}, "rating": 5}]})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    s.stop().await;
}

/// A client that times out and retries with the same Idempotency-Key
/// writes once: the retry during the first run is told to wait (409), the
/// retry after it gets the first answer, and the user holds one memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_with_the_same_idempotency_key_does_not_write_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.request_timeout_s = 1;
    let gate = Gated::new();
    let _open = OpenOnDrop(gate.clone());
    let s = start_with(cfg, gate.clone()).await;
    let send = |key: &str, text: &str| {
        let req = s
            .client
            .post(format!("{}/v1/memories", s.base))
            .bearer_auth(KEY_A)
            .header("Idempotency-Key", key)
            .json(&json!({"user_id": "u", "memories": [{"text": text}]}));
        async move {
            let r = req.send().await.unwrap();
            let st = r.status().as_u16();
            let replay = r.headers().get("idempotent-replay").is_some();
            let v: serde_json::Value = r.json().await.unwrap();
            (st, replay, v)
        }
    };
    let (st, _, v) = send("k1", "BLOCK slow write").await;
    assert_eq!(st, 503, "the first try times out: {v}");
    assert_eq!(v["error"]["code"], "timeout");
    let (st, _, v) = send("k1", "BLOCK slow write").await;
    assert_eq!(st, 409, "still running: {v}");
    assert_eq!(v["error"]["code"], "in_progress");
    let (st, _, v) = send("k1", "another text").await;
    assert_eq!(st, 422, "a key stands for one request: {v}");
    gate.open();
    let mut answer = None;
    for _ in 0..500 {
        let (st, replay, v) = send("k1", "BLOCK slow write").await;
        if st == 201 {
            answer = Some((replay, v));
            break;
        }
        assert_eq!(st, 409, "{v}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (replay, v) = answer.expect("the first write finished");
    assert!(replay, "the answer is the recorded one: {v}");
    let (st, r) = s
        .call("GET", "/v1/users/u/memories", Some(KEY_A), None)
        .await;
    assert_eq!(st, 200);
    let mems = r["memories"].as_array().unwrap();
    assert_eq!(mems.len(), 1, "written once: {r}");
    assert_eq!(mems[0]["id"], v["memories"][0]["id"]);
    // Without a key, the same body writes again (keys are opt-in).
    let (st, _) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": [{"text": "BLOCK slow write"}]})),
        )
        .await;
    assert_eq!(st, 201);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_require_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.metrics_key = Some("evk_metrics_scraper_1".into());
    let s = start(cfg).await;
    let (st, _) = s.call("GET", "/metrics", None, None).await;
    assert_eq!(st, 401);
    let (st, _) = s.call("GET", "/metrics", Some(KEY_A), None).await;
    assert_eq!(st, 401, "a tenant key is not the metrics key");
    let (st, v) = s
        .call("GET", "/metrics", Some("evk_metrics_scraper_1"), None)
        .await;
    assert_eq!(st, 200);
    assert!(v.as_str().unwrap().contains("evomem_up 1"), "{v}");
    s.stop().await;
}

/// Issue 57: a keyed add refused by the per-entry rate limit (429) was
/// remembered as the key's answer, so the client's retry with the same
/// key after `Retry-After` got the 429 replayed and its write never went
/// in. The retry now runs the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_keyed_write_goes_through_on_a_retry_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.rate_limit_per_s = 5.0;
    cfg.rate_limit_burst = 5.0;
    let s = start(cfg).await;
    let mems = |n: usize| -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| json!({"text": format!("note {i}")}))
            .collect()
    };
    // Three of the five tokens go (the door, then two more entries).
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": mems(3)})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let send = || {
        s.client
            .post(format!("{}/v1/memories", s.base))
            .bearer_auth(KEY_A)
            .header("Idempotency-Key", "k-limited")
            .json(&json!({"user_id": "u", "memories": mems(5)}))
            .send()
    };
    let r = send().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1000 * retry + 300)).await;
    let r = send().await.unwrap();
    let (st, replay) = (
        r.status().as_u16(),
        r.headers().get("idempotent-replay").is_some(),
    );
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!((st, replay), (201, false), "the 429 was replayed: {v}");
    assert_eq!(v["memories"].as_array().map(Vec::len), Some(5));
    s.stop().await;
}

/// Issue 57: only a memory's `text` was bounded; `metadata`, a search's
/// `filter`, an item's title, text and categories, `instruction`,
/// `objectives`, `item_id` and `policy` could be as large (or, for JSON,
/// as deep) as the body allowed. Each is bounded now, and the 422 names
/// the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_field_is_bounded_and_the_answer_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let long = |n: usize| "x".repeat(n);
    let many_keys: serde_json::Map<String, serde_json::Value> =
        (0..129).map(|i| (format!("k{i}"), json!(i))).collect();
    let mut deep = json!(1);
    for _ in 0..9 {
        deep = json!({ "d": deep });
    }
    let item = |extra: serde_json::Value| {
        let mut i = json!({"id": "i1", "title": "Kind of Blue"});
        if let (Some(o), Some(e)) = (i.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        i
    };
    let cases = [
        (
            "POST",
            "/v1/memories",
            json!({"user_id": "u", "memories": [{"text": "ok", "metadata": {"pad": long(17_000)}}]}),
            "memories[0].metadata",
        ),
        (
            "POST",
            "/v1/memories",
            json!({"user_id": "u", "memories": [{"text": "ok"}, {"text": "ok", "metadata": many_keys}]}),
            "memories[1].metadata",
        ),
        (
            "POST",
            "/v1/memories",
            json!({"user_id": "u", "memories": [{"text": "ok", "metadata": {"d": deep.clone()}}]}),
            "memories[0].metadata",
        ),
        (
            "PATCH",
            "/v1/memories/m_none",
            json!({"metadata": {"pad": long(17_000)}}),
            "metadata",
        ),
        (
            "POST",
            "/v1/memories/search",
            json!({"user_id": "u", "query": "jazz", "filter": {"d": deep}}),
            "filter",
        ),
        (
            "POST",
            "/v1/events",
            json!({"user_id": "u", "events": [{"item": item(json!({"title": long(2000)}))}]}),
            "events[0].item.title",
        ),
        (
            "POST",
            "/v1/events",
            json!({"user_id": "u", "events": [{"item": item(json!({"categories": vec!["c"; 33]}))}]}),
            "events[0].item.categories",
        ),
        (
            "POST",
            "/v1/recommend",
            json!({"user_id": "u", "candidates": [item(json!({"text": long(17_000)}))]}),
            "candidates[0].text",
        ),
        (
            "POST",
            "/v1/recommend",
            json!({"user_id": "u", "candidates": ["i1"], "instruction": long(5000)}),
            "instruction",
        ),
        (
            "POST",
            "/v1/recommend",
            json!({"user_id": "u", "candidates": ["i1"], "policy": long(200)}),
            "policy",
        ),
        (
            "POST",
            "/v1/feedback",
            json!({"decision_id": 1, "reward": 1.0, "item_id": long(300)}),
            "item_id",
        ),
        (
            "POST",
            "/v1/feedback",
            json!({"decision_id": 1, "reward": 1.0, "objectives": (0..33).map(|i| (format!("o{i}"), 1.0)).collect::<std::collections::BTreeMap<_, _>>()}),
            "objectives",
        ),
    ];
    for (method, path, body, field) in cases {
        let (st, v) = s.call(method, path, Some(KEY_A), Some(body)).await;
        assert_eq!(st, 422, "{method} {path} ({field}): {v}");
        assert_eq!(v["error"]["code"], "invalid_field", "{v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&format!("`{field}`")), "{field}: {msg}");
    }
    s.stop().await;
}

/// Issue 57: the rate limit charged a request and its entries, not its
/// bytes, so a key could send 16 KiB memories as often as 10-byte ones.
/// A body now costs a token per `serve.rate_limit_bytes_per_token` bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_charges_request_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.rate_limit_per_s = 1.0;
    cfg.rate_limit_burst = 20.0;
    cfg.rate_limit_bytes_per_token = 1024;
    let s = start(cfg).await;
    // About 15 KiB: the door's token and 14 more.
    let body = json!({"user_id": "u", "memories": [{"text": "y".repeat(15_000)}]});
    let (st, _) = s
        .call("POST", "/v1/memories", Some(KEY_A), Some(body.clone()))
        .await;
    assert_eq!(st, 201);
    let r = s
        .client
        .post(format!("{}/v1/memories", s.base))
        .bearer_auth(KEY_A)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429, "bytes cost nothing");
    assert!(r.headers().get("retry-after").is_some());
    // A small request still passes.
    let (st, _) = s
        .call("GET", "/v1/users/u/memories?limit=1", Some(KEY_A), None)
        .await;
    assert_eq!(st, 200);
    s.stop().await;
}

/// Issue 57: a tenant could store without bound. Past
/// `serve.tenant_max_memories` or `serve.tenant_max_bytes` an add (or an
/// update that grows a memory) is answered 403 `quota_exceeded` naming
/// the quota; deleting makes room again; `/metrics` shows each tenant's
/// memories and bytes beside its quotas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_quota_is_refused_and_metrics_show_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), None);
    cfg.tenant_max_memories = 3;
    cfg.tenant_max_bytes = 400;
    let s = start(cfg).await;
    let add = |texts: Vec<String>| {
        let mems: Vec<_> = texts.into_iter().map(|t| json!({"text": t})).collect();
        json!({"user_id": "u", "memories": mems})
    };
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(add(vec!["one".into(), "two".into()])),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let first = v["memories"][0]["id"].as_str().unwrap().to_string();
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(add(vec!["three".into(), "four".into()])),
        )
        .await;
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["code"], "quota_exceeded");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("tenant_max_memories"), "{msg}");
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(add(vec!["z".repeat(500)])),
        )
        .await;
    assert_eq!(st, 403, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("tenant_max_bytes"));
    let (st, v) = s
        .call(
            "PATCH",
            &format!("/v1/memories/{first}"),
            Some(KEY_A),
            Some(json!({"text": "y".repeat(500)})),
        )
        .await;
    assert_eq!(st, 403, "an update past the byte quota: {v}");
    // Another tenant is not held back by this one's quota use.
    let (st, _) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_B),
            Some(add(vec!["b one".into(), "b two".into()])),
        )
        .await;
    assert_eq!(st, 201);
    let (st, _) = s
        .call(
            "DELETE",
            &format!("/v1/memories/{first}"),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(add(vec!["three".into(), "four".into()])),
        )
        .await;
    assert_eq!(st, 201, "room was made: {v}");
    let (st, m) = s.call("GET", "/metrics", None, None).await;
    assert_eq!(st, 200);
    let m = m.as_str().unwrap_or_default().to_string();
    for line in [
        "evomem_tenant_memories{tenant=\"alpha\"} 3",
        "evomem_tenant_quota_memories{tenant=\"alpha\"} 3",
        "evomem_tenant_quota_bytes{tenant=\"alpha\"} 400",
    ] {
        assert!(m.contains(line), "{line} missing from\n{m}");
    }
    // two + three + four, with their metadata ({}: 2 bytes each).
    assert!(
        m.contains("evomem_tenant_bytes{tenant=\"alpha\"} 18"),
        "{m}"
    );
    s.stop().await;
}
