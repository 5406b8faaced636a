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
//! The pages run under the service's Content-Security-Policy (no
//! `unsafe-inline`): the page's collector also records every policy
//! violation, so a blocked inline script, handler or style attribute fails
//! the test. Then markup put where the tenant's users can put it (a
//! memory's text and metadata, an item's id and title, a user id in a
//! link) must show as text and never run: an `<img src=x onerror=...>`
//! that ran would set `window.__xss` and the page's title.
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
pub(crate) async fn seed(s: &TestServer) -> u64 {
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
    // Items show the titles the catalog registered them with, ids on hover.
    assert!(
        header.as_str().unwrap().contains("target Kind of Blue"),
        "the target from feedback, by its title: {header}"
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
        "const s = document.querySelector('#candidates tr.target td:nth-child(2) span'); return [s.textContent, s.title]",
        vec![],
    )
    .await;
    assert_eq!(target, json!(["Kind of Blue", "item c3"]));
    let cand = js(
        &c,
        "const g = document.querySelector('#evidence-graph g.cand.target'); return [g.querySelector('text').textContent, g.querySelector('title').textContent]",
        vec![],
    )
    .await;
    assert!(
        cand[0].as_str().unwrap().starts_with("Kind of Blue · ")
            && cand[1]
                .as_str()
                .unwrap()
                .starts_with("item c3: Kind of Blue"),
        "the graph's target by its title, its id on hover: {cand}"
    );
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
    // The node shows the memory's text (from the op log), its id on hover.
    let label = js(
        &c,
        "const g = document.querySelector('#evidence-graph g.node.mem.linked'); return [g.querySelector('text').textContent, g.querySelector('title').textContent]",
        vec![],
    )
    .await;
    let (text, hover) = (label[0].as_str().unwrap(), label[1].as_str().unwrap());
    assert!(
        !text.is_empty() && !id.starts_with(text.trim_end_matches('…')),
        "a memory node shows its text, not its id `{id}`: {text}"
    );
    assert!(hover.starts_with(&format!("{id}: ")), "{hover}");
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

    injected_markup_stays_text(&s, &c).await;

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

/// Markup that would run if a page put it through `innerHTML`: the handler
/// marks the window and retitles the page.
const XSS: &str = "<img src=x onerror=\"window.__xss=(window.__xss||0)+1;document.title='pwned'\">";

/// Nothing injected ran, no injected element exists, the page collected no
/// error (a Content-Security-Policy violation included), and `shown` (what
/// the view must display) holds the markup as text.
async fn assert_inert(c: &fantoccini::Client, view: &str, shown: &str) {
    // Give a parsed `<img src=x>` time to fail its load and fire onerror.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let page = js(
        c,
        "return {xss: window.__xss === undefined ? null : window.__xss, title: document.title, \
         images: document.images.length, errors: window.__evomemErrors || ['no error collector'], \
         text: document.getElementById('main').innerText}",
        vec![],
    )
    .await;
    assert_eq!(
        page["xss"],
        Value::Null,
        "{view}: injected script ran: {page}"
    );
    assert_eq!(page["title"], "evomem inspector", "{view}: {page}");
    assert_eq!(page["images"], 0, "{view}: an injected element: {page}");
    assert_eq!(
        page["errors"],
        json!([]),
        "{view}: errors on the page: {page}"
    );
    assert!(
        page["text"].as_str().unwrap().contains(shown),
        "{view}: the markup shows as text ({shown}): {page}"
    );
}

/// Issue 57's check: markup in a memory's text and metadata, in an item's
/// id and title (the decision view's candidates) and in a user id (which
/// the API refuses, so it reaches the page only through a link's hash and
/// the refusal's message) shows as text and runs nothing, under the
/// Content-Security-Policy every `/ui` answer carries.
async fn injected_markup_stays_text(s: &TestServer, c: &fantoccini::Client) {
    // The policy, on the page and on the API the page reads.
    for path in ["/ui/", "/ui/app.js", "/ui/api/mode"] {
        let resp = s
            .client
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        let h = resp.headers();
        let csp = h
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert_eq!(csp, evomem_ui::assets::CSP, "{path}");
        assert!(
            csp.contains("script-src 'self';") && !csp.contains("unsafe-inline"),
            "{path}: {csp}"
        );
        assert_eq!(
            h.get("x-content-type-options")
                .and_then(|v| v.to_str().ok()),
            Some("nosniff"),
            "{path}"
        );
    }

    // A user id cannot carry markup: the API refuses it.
    let (st, v) = s
        .call(
            "POST",
            "/v1/memories",
            Some(KEY_A),
            Some(json!({"user_id": XSS, "memories": [{"text": "hi"}]})),
        )
        .await;
    assert_eq!(st, 422, "{v}");

    // Markup in what a user can write: a memory's text and metadata, the
    // titles and ids of items.
    let call = |path: &'static str, body: Value| async move {
        let (st, v) = s.call("POST", path, Some(KEY_A), Some(body)).await;
        assert!((200..300).contains(&st), "{path}: {st} {v}");
        v
    };
    call(
        "/v1/memories",
        json!({"user_id": "mallory", "memories": [{"text": XSS, "metadata": {"note": XSS}}]}),
    )
    .await;
    let events: Vec<Value> = (0..3)
        .map(|i| json!({"item": {"id": format!("m{i}"), "title": XSS, "categories": ["Jazz"]}, "rating": 5}))
        .collect();
    call(
        "/v1/events",
        json!({"user_id": "mallory", "events": events}),
    )
    .await;
    let r = call(
        "/v1/recommend",
        json!({"user_id": "mallory", "candidates": [
            {"id": XSS, "title": XSS, "categories": ["Jazz"]},
            {"id": "m9", "title": "Kind of Blue", "categories": ["Jazz"]}]}),
    )
    .await;
    let decision = r["decision_id"].as_u64().unwrap();

    // The users list, mallory's memory now and at her first op (the create
    // of the memory: its text in the op card).
    c.goto(&format!("{}/ui/#/", s.base)).await.unwrap();
    wait_for(
        c,
        "document.querySelector(\"#users a[data-user='mallory']\")",
        "mallory in the users",
    )
    .await;
    assert_inert(c, "the users", "user mallory").await;
    c.goto(&format!("{}/ui/#/user/mallory", s.base))
        .await
        .unwrap();
    wait_for(
        c,
        "document.getElementById('op-card') && document.getElementById('memory').innerText.includes('onerror')",
        "mallory's memory",
    )
    .await;
    assert_inert(c, "mallory's memory", "<img src=x onerror=").await;
    slide(c, 1).await;
    wait_for(
        c,
        "document.getElementById('at-label').textContent.startsWith('1 / ') && document.getElementById('op-card') && document.getElementById('op-card').innerText.includes('onerror')",
        "mallory's first op",
    )
    .await;
    assert_inert(c, "mallory's first op", "<img src=x onerror=").await;

    // The decision: an item id and title with markup among the candidates.
    c.goto(&format!("{}/ui/#/decision/{decision}", s.base))
        .await
        .unwrap();
    wait_for(
        c,
        &format!("document.getElementById('decision-id') && document.getElementById('decision-id').textContent === '{decision}' && document.getElementById('candidates')"),
        "mallory's decision",
    )
    .await;
    let cand = js(
        c,
        "return [...document.querySelectorAll('#candidates td:nth-child(2)')].map(td => td.textContent)",
        vec![],
    )
    .await;
    assert!(
        cand.as_array().unwrap().iter().any(|t| t == XSS),
        "the item id shows as text: {cand}"
    );
    assert_inert(c, "mallory's decision", "<img src=x onerror=").await;

    // A user id with markup, in a link: the refusal names it, as text.
    c.goto(&format!(
        "{}/ui/#/user/{}",
        s.base,
        XSS.replace('%', "%25")
            .replace('<', "%3C")
            .replace('>', "%3E")
            .replace('"', "%22")
            .replace(' ', "%20")
            .replace('\'', "%27")
    ))
    .await
    .unwrap();
    wait_for(
        c,
        "document.getElementById('error') && document.getElementById('error').textContent.includes('onerror')",
        "the refusal of a user id with markup",
    )
    .await;
    assert_inert(c, "a user id with markup", "<img src=x onerror=").await;
}
