//! Listing a user's memories page by page, and searching with a score bar.

use crate::common::*;
use serde_json::json;
use std::collections::BTreeSet;

/// Without `limit` a listing answers one default page (100) with a cursor,
/// never every memory at once; following the cursors gives every memory
/// once in id order, and a cursor whose memory was deleted since still
/// seeks to the memories after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_without_limit_is_one_default_page_and_cursors_seek() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let mems: Vec<_> = (0..250)
        .map(|i| json!({"text": format!("memory {i} on a long list")}))
        .collect();
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": mems})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let page = |p: &serde_json::Value| -> Vec<String> {
        p["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (st, first) = s
        .call("GET", "/v1/users/u/memories", Some(KEY_A), None)
        .await;
    assert_eq!(st, 200, "{first}");
    let first_ids = page(&first);
    assert_eq!(first_ids.len(), evomem_serve::api::DEFAULT_PAGE);
    let mut cursor = first["next_cursor"].as_str().unwrap().to_string();
    assert_eq!(Some(&cursor), first_ids.last());
    // Delete the memory the cursor names: the next page still starts
    // right after it.
    let (st, d) = s
        .call(
            "DELETE",
            &format!("/v1/memories/{cursor}"),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(st, 200, "{d}");
    let mut all = first_ids;
    loop {
        let (st, p) = s
            .call(
                "GET",
                &format!("/v1/users/u/memories?cursor={cursor}"),
                Some(KEY_A),
                None,
            )
            .await;
        assert_eq!(st, 200, "{p}");
        let ids = page(&p);
        assert!(
            ids.iter().all(|id| id > &cursor),
            "a page goes back: {ids:?}"
        );
        all.extend(ids);
        match p["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert_eq!(
        all.len(),
        250,
        "every memory once (the deleted one listed before its delete)"
    );
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, all, "in id order, none twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_cover_every_memory_once_and_search_honours_min_score() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let mems: Vec<_> = (0..7)
        .map(|i| json!({"text": format!("note number {i} about jazz")}))
        .collect();
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": "u", "memories": mems})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/users/u/memories?limit=3&cursor={c}"),
            None => "/v1/users/u/memories?limit=3".to_string(),
        };
        let (st, p) = s.call("GET", &path, Some(KEY_A), None).await;
        assert_eq!(st, 200, "{p}");
        pages += 1;
        let ids: Vec<String> = p["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        assert!(ids.len() <= 3);
        seen.extend(ids);
        match p["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
        assert!(pages < 10, "pages never end");
    }
    assert_eq!(pages, 3, "7 memories in pages of 3");
    assert_eq!(seen.len(), 7);
    assert_eq!(
        seen.iter().collect::<BTreeSet<_>>().len(),
        7,
        "no memory twice"
    );
    let (st, e) = s
        .call("GET", "/v1/users/u/memories?limit=0", Some(KEY_A), None)
        .await;
    assert_eq!(st, 422, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("limit"));

    let (_, all) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "u", "query": "note number 3 about jazz", "k": 7})),
        )
        .await;
    let scores: Vec<f64> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores.len(), 7);
    let bar = (scores[0] + scores[6]) / 2.0;
    let (st, cut) = s
        .call(
            "POST",
            "/v1/memories/search",
            Some(KEY_A),
            Some(json!({"user_id": "u", "query": "note number 3 about jazz", "k": 7, "min_score": bar})),
        )
        .await;
    assert_eq!(st, 200, "{cut}");
    let kept = cut["results"].as_array().unwrap();
    assert_eq!(kept.len(), scores.iter().filter(|&&x| x >= bar).count());
    assert!(kept.len() < 7 && !kept.is_empty(), "{cut}");
    s.stop().await;
}
