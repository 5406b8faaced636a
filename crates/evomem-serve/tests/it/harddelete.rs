//! `DELETE /v1/memories/{id}?hard=true`: every text the memory ever held
//! leaves the op log, its history, `as_of` listings, the index and the
//! bytes of the SQLite file and its WAL; a soft delete keeps them; and the
//! same on PostgreSQL (by a raw SQL scan).

use crate::common::*;
use serde_json::{json, Value};

const FIRST: &str = "first text apricot-semaphore";
const SECOND: &str = "second text tangerine-periscope";

/// Add the victim (then edit its text) and a neighbour of the same user
/// with the same words; returns (victim id, neighbour id, a time at which
/// the victim lived with its first text).
async fn populate(s: &TestServer) -> (String, String, u64) {
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "memories": [{"text": FIRST}, {"text": "first text"}]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let victim = v["memories"][0]["id"].as_str().unwrap().to_string();
    let kept = v["memories"][1]["id"].as_str().unwrap().to_string();
    let lived = v["memories"][0]["created_at_ms"].as_u64().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (st, v) = s
        .call(
            "PATCH",
            &format!("/v1/memories/{victim}"),
            Some(KEY_A),
            Some(json!({"text": SECOND})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let (st, h) = history(s, &victim).await;
    assert_eq!(st, 200, "{h}");
    assert!(h.to_string().contains("apricot-semaphore"), "setup: {h}");
    (victim, kept, lived)
}

fn listed(v: &Value) -> Vec<String> {
    v["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

/// `DELETE /v1/memories/{id}{query}` as the tenant of `key`.
async fn delete_as(s: &TestServer, key: &str, id: &str, query: &str) -> (u16, Value) {
    s.call(
        "DELETE",
        &format!("/v1/memories/{id}{query}"),
        Some(key),
        None,
    )
    .await
}

/// A hard delete of `id` as tenant alpha.
async fn hard_delete(s: &TestServer, id: &str) -> (u16, Value) {
    delete_as(s, KEY_A, id, "?hard=true").await
}

/// `GET /v1/memories/{id}/history` as tenant alpha.
async fn history(s: &TestServer, id: &str) -> (u16, Value) {
    s.call(
        "GET",
        &format!("/v1/memories/{id}/history"),
        Some(KEY_A),
        None,
    )
    .await
}

/// `POST /v1/memories` as tenant alpha with an `Idempotency-Key`: the
/// status and the raw body (a replay answers the remembered bytes).
async fn add_once(s: &TestServer, key: &str, body: Value) -> (u16, String) {
    let r = s
        .client
        .post(format!("{}/v1/memories", s.base))
        .bearer_auth(KEY_A)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.text().await.unwrap())
}

/// After a hard delete: gone from get, history, search, the listing now
/// and as of when it lived; the neighbour stays.
async fn assert_gone(s: &TestServer, victim: &str, kept: &str, lived: u64) {
    let (st, _) = s
        .call("GET", &format!("/v1/memories/{victim}"), Some(KEY_A), None)
        .await;
    assert_eq!(st, 404);
    let (st, h) = history(s, victim).await;
    assert_eq!(st, 404, "history after a hard delete: {h}");
    for q in [String::new(), format!("?as_of={lived}")] {
        let (st, l) = s
            .call(
                "GET",
                &format!("/v1/users/u1/memories{q}"),
                Some(KEY_A),
                None,
            )
            .await;
        assert_eq!(st, 200, "{l}");
        assert_eq!(listed(&l), vec![kept.to_string()], "listing{q}: {l}");
        assert!(!l.to_string().contains("apricot"), "{l}");
    }
    let (_, r) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "u1", "query": SECOND, "k": 10})),
        )
        .await;
    assert!(!r.to_string().contains(victim), "{r}");
}

/// Files anywhere under `dir` that hold `needle`.
fn files_hold(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for f in std::fs::read_dir(dir).unwrap() {
        let p = f.unwrap().path();
        if p.is_dir() {
            out.extend(files_hold(&p, needle));
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            out.push(p.display().to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_delete_removes_every_text_from_the_file_history_and_as_of() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let (victim, kept, lived) = populate(&s).await;
    let (st, e) = delete_as(&s, KEY_A, &victim, "?hard=maybe").await;
    assert_eq!(st, 422, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("hard"),
        "{e}"
    );
    let (st, d) = hard_delete(&s, &victim).await;
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["hard"], true, "{d}");
    assert_eq!(d["verified"].as_array().unwrap().len(), 4, "{d}");
    assert_gone(&s, &victim, &kept, lived).await;
    let (st, _) = hard_delete(&s, &victim).await;
    assert_eq!(st, 404, "a second hard delete finds nothing");
    s.stop().await;
    for t in ["apricot-semaphore", "tangerine-periscope"] {
        assert_eq!(files_hold(dir.path(), t), Vec::<String>::new(), "`{t}`");
    }
    let s = start(config(dir.path(), None)).await;
    assert_gone(&s, &victim, &kept, lived).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_delete_keeps_the_text_and_a_hard_delete_after_it_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let (victim, kept, lived) = populate(&s).await;
    let (st, d) = delete_as(&s, KEY_A, &victim, "").await;
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["hard"], false, "{d}");
    // Soft: the text is still in history and as_of.
    let (st, h) = history(&s, &victim).await;
    assert_eq!(st, 200);
    assert!(h.to_string().contains("tangerine-periscope"), "{h}");
    let (_, l) = s
        .call(
            "GET",
            &format!("/v1/users/u1/memories?as_of={lived}"),
            Some(KEY_A),
            None,
        )
        .await;
    assert!(listed(&l).contains(&victim), "{l}");
    // Another tenant cannot hard-delete it.
    let (st, _) = delete_as(&s, KEY_B, &victim, "?hard=true").await;
    assert_eq!(st, 404);
    let (st, d) = hard_delete(&s, &victim).await;
    assert_eq!(st, 200, "{d}");
    assert_gone(&s, &victim, &kept, lived).await;
    s.stop().await;
    assert!(files_hold(dir.path(), "tangerine-periscope").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_delete_on_postgres_leaves_no_text_in_any_table() {
    let Some(url) = pg_url() else { return };
    let _serial = pg_serial().await;
    reset_pg(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), Some(&url))).await;
    let (victim, kept, lived) = populate(&s).await;
    let (st, d) = hard_delete(&s, &victim).await;
    assert_eq!(st, 200, "{d}");
    assert_gone(&s, &victim, &kept, lived).await;
    s.stop().await;
    let u = url.clone();
    let v = victim.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&u, postgres::NoTls).unwrap();
        for table in ["ops", "snapshots", "records", "vectors"] {
            for needle in ["apricot-semaphore", "tangerine-periscope", v.as_str()] {
                let n: i64 = c
                    .query_one(
                        &format!(
                            "SELECT count(*) FROM evomem_t_alpha.{table} t WHERE strpos(t::text, $1) > 0"
                        ),
                        &[&needle],
                    )
                    .unwrap()
                    .get(0);
                assert_eq!(n, 0, "{table} holds `{needle}`");
            }
        }
        pg_reset(&u);
    })
    .await
    .unwrap();
}

/// Issue 37: an answer remembered for an `Idempotency-Key` holds the
/// memory's text; a hard delete (and a user deletion) must purge it, and a
/// retry with the key must neither get the text back nor write it again
/// (410 `answer_purged`). Answers of other users stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_and_user_deletes_purge_remembered_idempotent_answers() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let send = |key: &'static str, user: &'static str, text: &'static str| {
        add_once(
            &s,
            key,
            json!({"user_id": user, "memories": [{"text": text}]}),
        )
    };
    let (st, body) = send("k-victim", "u1", FIRST).await;
    assert_eq!(st, 201, "{body}");
    let victim = serde_json::from_str::<Value>(&body).unwrap()["memories"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (key, user, text) in [("k-user", "u2", SECOND), ("k-kept", "u3", "kept text")] {
        let (st, body) = send(key, user, text).await;
        assert_eq!(st, 201, "{body}");
    }
    // Replays hold the text before any deletion.
    let (st, body) = send("k-victim", "u1", FIRST).await;
    assert_eq!(st, 201);
    assert!(body.contains("apricot-semaphore"), "{body}");
    let (st, v) = hard_delete(&s, &victim).await;
    assert_eq!(st, 200, "{v}");
    let (st, body) = send("k-victim", "u1", FIRST).await;
    assert_eq!(st, 410, "the remembered answer still answered: {body}");
    assert!(!body.contains("apricot-semaphore"), "{body}");
    assert!(body.contains("answer_purged"), "{body}");
    let (st, v) = s.call("DELETE", "/v1/users/u2", Some(KEY_A), None).await;
    assert_eq!(st, 200, "{v}");
    let (st, body) = send("k-user", "u2", SECOND).await;
    assert_eq!(st, 410, "the remembered answer still answered: {body}");
    assert!(!body.contains("tangerine-periscope"), "{body}");
    // The retries wrote nothing back.
    for user in ["u1", "u2"] {
        let (st, v) = s
            .call(
                "GET",
                &format!("/v1/users/{user}/memories"),
                Some(KEY_A),
                None,
            )
            .await;
        assert_eq!(st, 200);
        assert!(listed(&v).is_empty(), "{user}: {v}");
    }
    let (st, body) = send("k-kept", "u3", "kept text").await;
    assert_eq!(st, 201, "another user's answer stays: {body}");
    assert!(body.contains("kept text"));
    s.stop().await;
}

/// Issue 37, two instances on one PostgreSQL: the answer an instance
/// remembered for an `Idempotency-Key` holds a memory's text; a hard delete
/// through the *other* instance cannot purge it by tag, so the log rewrite
/// it makes must stop the replay (410 `answer_purged`, nothing written
/// again). An answer without text (a deletion) still replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_delete_through_another_instance_stops_idempotent_replays() {
    let Some(url) = pg_url() else { return };
    let _serial = pg_serial().await;
    reset_pg(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let one = start(config(dir.path(), Some(&url))).await;
    let two = start(config(dir.path(), Some(&url))).await;
    let add = json!({"user_id": "u1", "memories": [{"text": FIRST}]});
    let (st, body) = add_once(&one, "k-victim", add.clone()).await;
    assert_eq!(st, 201, "{body}");
    let victim = serde_json::from_str::<Value>(&body).unwrap()["memories"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, body) = add_once(&one, "k-victim", add.clone()).await;
    assert_eq!(st, 201);
    assert!(
        body.contains("apricot-semaphore"),
        "replays before the delete"
    );
    let (st, v) = hard_delete(&two, &victim).await;
    assert_eq!(st, 200, "{v}");
    let (st, body) = add_once(&one, "k-victim", add).await;
    assert_eq!(st, 410, "the first instance replayed deleted text: {body}");
    assert!(!body.contains("apricot-semaphore"), "{body}");
    for s in [&one, &two] {
        let (st, v) = s
            .call("GET", "/v1/users/u1/memories", Some(KEY_A), None)
            .await;
        assert_eq!(st, 200);
        assert!(listed(&v).is_empty(), "the retry wrote again: {v}");
    }
    one.stop().await;
    two.stop().await;
    reset_pg(&url).await;
}
