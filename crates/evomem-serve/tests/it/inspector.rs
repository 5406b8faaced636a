//! The inspector's pages in service mode, in headless Chromium (through
//! chromedriver and fantoccini), against a real service: a tenant with a
//! memory, a user's events, a recommendation and its feedback. The test
//! enters the key, picks the user, moves the time slider over the user's
//! ops, reads an op with its record before and after, opens the decision
//! and follows a memory it used to the op that wrote it; it fails on any
//! script error, unhandled rejection or `console.error` the page collected
//! (`window.__evomemErrors`), and saves PNGs to `target/ui-screenshots/`
//! (`service-*.png`; the docs show copies in `docs/ui/`).
//!
//! Without `/usr/bin/chromium` and `/usr/bin/chromedriver` (or the binaries
//! named by `EVOMEM_CHROMIUM` / `EVOMEM_CHROMEDRIVER`) the test fails under
//! CI (`CI` set) and is skipped with a loud notice otherwise, as evomem-ui's
//! browser test is.

use crate::common::*;
use chromium::*;
use fantoccini::Locator;
use serde_json::{json, Value};

#[path = "../../../evomem-ui/tests/support/chromium.rs"]
mod chromium;

/// The tenant the pages show: alice's memory, and fan's events, one
/// recommendation and its feedback (which names the item taken).
async fn seed(s: &TestServer) -> u64 {
    let call = |path: &'static str, body: Value| async move {
        let (st, v) = s.call("POST", path, Some(KEY_A), Some(body)).await;
        assert!((200..300).contains(&st), "{path}: {st} {v}");
        v
    };
    call(
        "/v1/memories",
        json!({"user_id": "alice", "memories": [{"text": "likes quiet jazz records"}]}),
    )
    .await;
    let items = [
        ("a1", "Blue Train", "Jazz", 5),
        ("a2", "Giant Steps", "Jazz", 5),
        ("a3", "Mingus Ah Um", "Jazz", 4),
        ("b1", "Master of Puppets", "Metal", 1),
        ("b2", "Paranoid", "Metal", 2),
    ];
    let events: Vec<Value> = items
        .iter()
        .map(
            |(id, t, g, r)| json!({"item": {"id": id, "title": t, "categories": [g]}, "rating": r}),
        )
        .collect();
    call("/v1/events", json!({"user_id": "fan", "events": events})).await;
    let cands = json!([
        {"id": "c1", "title": "Blue Train Live", "categories": ["Jazz"]},
        {"id": "c2", "title": "Reign in Blood", "categories": ["Metal"]},
        {"id": "c3", "title": "Kind of Blue", "categories": ["Jazz"]}
    ]);
    let r = call(
        "/v1/recommend",
        json!({"user_id": "fan", "candidates": cands}),
    )
    .await;
    let decision = r["decision_id"].as_u64().unwrap();
    call(
        "/v1/feedback",
        json!({"decision_id": decision, "reward": 1.0, "success": true, "item_id": "c3"}),
    )
    .await;
    decision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_mode_in_headless_chromium() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("the inspector's service-mode browser test")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let s = start(config(dir.path(), None)).await;
    let decision = seed(&s).await;
    let (st, ops) = s
        .call("GET", "/ui/api/users/fan/ops?limit=1000", Some(KEY_A), None)
        .await;
    assert_eq!(st, 200, "{ops}");
    let total = ops["total"].as_u64().unwrap();
    let (driver, c) = start_browser(&chromium, &chromedriver).await;

    // The key: a wrong one shows the service's refusal, the right one the
    // tenant's users.
    c.goto(&format!("{}/ui/", s.base)).await.unwrap();
    wait_for(&c, "document.getElementById('svc-hint')", "the key prompt").await;
    c.find(Locator::Id("api-key"))
        .await
        .unwrap()
        .send_keys("evk_wrong")
        .await
        .unwrap();
    click(&c, Locator::Id("svc-load")).await;
    wait_for(
        &c,
        "document.getElementById('status').className === 'error' && document.getElementById('main').innerText.includes('API key')",
        "the refusal of a wrong key",
    )
    .await;
    js(&c, "document.getElementById('api-key').value = ''", vec![]).await;
    c.find(Locator::Id("api-key"))
        .await
        .unwrap()
        .send_keys(KEY_A)
        .await
        .unwrap();
    click(&c, Locator::Id("svc-load")).await;
    wait_for(
        &c,
        "document.querySelectorAll('#users a[data-user]').length === 2",
        "the tenant's two users",
    )
    .await;
    shot(&c, "service-users.png").await;

    // Pick the user: the slider spans their ops.
    click(&c, Locator::Css("#users a[data-user='fan']")).await;
    wait_for(
        &c,
        &format!("document.getElementById('time-slider') && document.getElementById('time-slider').max === '{total}' && document.getElementById('op-card')"),
        "fan's timeline",
    )
    .await;

    // Move the slider to the first op (a create: nothing before it) ...
    slide(&c, 1).await;
    wait_for(
        &c,
        &format!("document.getElementById('op-card') && document.getElementById('op-card').dataset.seq === '{}' && document.getElementById('op-card').innerText.includes('(absent)')", ops["ops"][0]["seq"]),
        "the first op, with no record before it",
    )
    .await;
    // ... then to the feedback's op on the decision: its record before and after.
    let fb = ops["ops"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o["label"] == "feedback")
        .unwrap();
    slide(&c, fb as u64 + 1).await;
    let card = wait_for(
        &c,
        &format!("document.getElementById('op-card') && document.getElementById('op-card').dataset.seq === '{}' && document.getElementById('op-card').innerText", ops["ops"][fb]["seq"]),
        "the feedback's op",
    )
    .await;
    let card = card.as_str().unwrap();
    assert!(
        card.contains(&format!("before · decision:{decision}"))
            && card.contains(&format!("after · decision:{decision}"))
            && card.contains("feedback_count=0")
            && card.contains("feedback_count=1")
            && card.contains("target=c3"),
        "the decision record before and after the feedback: {card}"
    );
    let row = js(
        &c,
        "const r = document.querySelector('#ops tr.current'); return r && r.dataset.pos",
        vec![],
    )
    .await;
    assert_eq!(row, json!(fb.to_string()), "the op is marked in the op log");
    shot(&c, "service-user.png").await;

    // The decision: candidates, the target the feedback named, the evidence.
    wait_for(
        &c,
        "document.querySelector('a.decision-link')",
        "fan's decision",
    )
    .await;
    click(&c, Locator::Css("a.decision-link")).await;
    wait_for(
        &c,
        &format!("document.getElementById('decision-id') && document.getElementById('decision-id').textContent === '{decision}' && document.getElementById('evidence-graph')"),
        "the decision view",
    )
    .await;
    let header = js(
        &c,
        "return document.querySelector('main h2').innerText",
        vec![],
    )
    .await;
    assert!(
        header.as_str().unwrap().contains("target c3"),
        "the target from feedback: {header}"
    );
    let rows = js(
        &c,
        "return document.querySelectorAll('#candidates tr').length",
        vec![],
    )
    .await;
    assert_eq!(rows, json!(4), "three candidates and the header");
    let target = js(
        &c,
        "return document.querySelector('#candidates tr.target td:nth-child(2)').textContent",
        vec![],
    )
    .await;
    assert_eq!(target, json!("c3"));
    shot(&c, "service-decision.png").await;

    // Follow a memory node of the evidence graph to the op that wrote it:
    // the user's timeline at that op.
    let node = wait_for(
        &c,
        "(() => { const g = document.querySelector('#evidence-graph g.node.mem.linked'); return g && [g.dataset.id, g.dataset.seq]; })()",
        "a memory node linked to its op",
    )
    .await;
    let (id, seq) = (node[0].as_str().unwrap(), node[1].as_str().unwrap());
    js(
        &c,
        "document.querySelector('#evidence-graph g.node.mem.linked').dispatchEvent(new MouseEvent('click', {bubbles: true}))",
        vec![],
    )
    .await;
    let card = wait_for(
        &c,
        &format!("location.hash.startsWith('#/user/fan?at=') && document.getElementById('op-card') && document.getElementById('op-card').dataset.seq === '{seq}' && document.getElementById('op-card').innerText"),
        "the op that wrote the memory",
    )
    .await;
    let card = card.as_str().unwrap();
    assert!(
        card.contains("create") && card.contains(&format!("after · {id}")),
        "the op creates {id}: {card}"
    );
    shot(&c, "service-op.png").await;

    // An unknown user: the service's 404 message.
    c.goto(&format!("{}/ui/#/user/nobody", s.base))
        .await
        .unwrap();
    wait_for(
        &c,
        "document.getElementById('error') && document.getElementById('error').textContent.includes('nobody')",
        "the unknown user's 404",
    )
    .await;

    let errs = js(
        &c,
        "return window.__evomemErrors || ['no error collector']",
        vec![],
    )
    .await;
    c.close().await.unwrap();
    drop(driver);
    s.stop().await;
    assert_eq!(errs, json!([]), "JavaScript errors on the page");
}
