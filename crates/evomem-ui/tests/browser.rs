//! The inspector in headless Chromium (through chromedriver and
//! fantoccini): open a run, pick a user, move the time slider, open a
//! decision and follow an evidence node to the op that wrote it, asserting
//! on the DOM and saving a PNG of each view to `target/ui-screenshots/`.
//! The page collects script errors, unhandled rejections, `console.error`
//! calls and Content-Security-Policy violations (the pages are served with
//! the policy of `assets::CSP`, no `unsafe-inline`) in
//! `window.__evomemErrors`; the test fails when any was collected.
//!
//! Without `/usr/bin/chromium` and `/usr/bin/chromedriver` (or the binaries
//! named by `EVOMEM_CHROMIUM` / `EVOMEM_CHROMEDRIVER`) the test fails under
//! CI (`CI` set) and is skipped with a loud notice otherwise.
//!
//! Service mode (`evomem serve` at `/ui`) is tested against a real service
//! in evomem-serve (`tests/it/inspector.rs`).
//!
//! `measure_full_run` (ignored; `EVOMEM_UI_RUNS=DIR[,DIR2]`) opens a real
//! run and prints the figures of `docs/ui.md`: time to first paint and the
//! response time of a page of ops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/chromium.rs"]
mod chromium;
mod common;

use chromium::*;
use fantoccini::Locator;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Serve `runs` on a free port; returns the base URL.
async fn serve(runs: &[PathBuf]) -> String {
    let runs = evomem_ui::Runs::open(runs).unwrap();
    let app = evomem_ui::router(Arc::new(runs));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { evomem_ui::serve(listener, app, std::future::pending()).await });
    format!("http://{addr}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_in_headless_chromium() {
    let Some((chromium, chromedriver)) = browser_or_skip("the inspector's browser test") else {
        return;
    };
    let started = Instant::now();
    let f = common::fixture();
    let base = serve(&[f.a.clone(), f.b.clone()]).await;
    let (_driver, c) = start_browser(&chromium, &chromedriver).await;
    let setup = started.elapsed();

    // A run: metrics table, per-user histogram, LLM accounting, plots.
    c.goto(&format!("{base}#/run/0")).await.unwrap();
    wait_for(
        &c,
        "document.querySelector('#metrics tr[data-policy=mars]')",
        "the metrics table",
    )
    .await;
    wait_for(
        &c,
        "document.querySelector('#histogram svg')",
        "the histogram",
    )
    .await;
    let rows = wait_for(
        &c,
        "document.querySelectorAll('#metrics tr[data-policy]').length",
        "rows",
    )
    .await;
    assert_eq!(rows, json!(common::POLICIES.len()));
    let hist_n = text(&c, "document.querySelector('#histogram svg').dataset.n").await;
    assert_eq!(hist_n, "10", "the histogram covers every user");
    assert!(
        wait_for(
            &c,
            "document.querySelectorAll('#llm tr').length > 1",
            "LLM table"
        )
        .await
            == json!(true)
    );
    wait_for(
        &c,
        "[...document.querySelectorAll('.plots img')].length > 0 && [...document.querySelectorAll('.plots img')].every(i => i.complete && i.naturalWidth > 0)",
        "the plots",
    )
    .await;
    let paint = c
        .execute(
            "const p = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint' || e.name === 'first-paint'); return p ? p.startTime : null",
            vec![],
        )
        .await
        .unwrap();
    eprintln!("first paint of the run view: {paint} ms");
    shot(&c, "run.png").await;

    // Pick a user of MARS (the family with a lifecycle timeline).
    click(
        &c,
        Locator::Css("#metrics tr[data-policy=mars] a.memory-link"),
    )
    .await;
    wait_for(&c, "document.querySelector('#user-name')", "the user view").await;
    wait_for(
        &c,
        "document.querySelector('#memory .kind-view[data-kind=preference_chunk]')",
        "MARS chunks",
    )
    .await;
    // The evidence bars are sized through the CSSOM (the policy refuses a
    // `style` attribute): a chunk with strength has a bar with a width.
    let bars = js(
        &c,
        "return [...document.querySelectorAll('#memory .bar')].map(b => [b.style.width, b.offsetWidth])",
        vec![],
    )
    .await;
    let bars = bars.as_array().unwrap();
    assert!(
        !bars.is_empty() && bars.iter().any(|b| b[1].as_u64().unwrap_or(0) > 0),
        "the chunks' strength bars have widths: {bars:?}"
    );
    let total: u64 = text(&c, "document.getElementById('time-slider').max")
        .await
        .parse()
        .unwrap();
    assert!(total > 4, "{total} ops");
    // Pick another user from the list.
    let second = text(&c, "document.querySelectorAll('#users a')[1].dataset.user").await;
    click(&c, Locator::Css(&format!("#users a[data-user='{second}']"))).await;
    wait_for(
        &c,
        &format!("document.getElementById('user-name').textContent === '{second}'"),
        "the second user",
    )
    .await;
    wait_for(&c, "document.querySelector('#op-card')", "the last op").await;
    let user_total: u64 = text(&c, "document.getElementById('time-slider').max")
        .await
        .parse()
        .unwrap();

    // Move the slider: back to the first op (a create: nothing before it).
    slide(&c, 1).await;
    wait_for(
        &c,
        "document.getElementById('at-label').textContent.startsWith('1 / ')",
        "position 1",
    )
    .await;
    wait_for(&c, "document.querySelector('#op-card b') && document.querySelector('#op-card b').textContent === 'create'", "the create op").await;
    let before = text(
        &c,
        "document.querySelector('#op-card .cols2 div').innerText",
    )
    .await;
    assert!(before.contains("(absent)"), "{before}");
    let records = text(
        &c,
        "String(document.querySelectorAll('#memory tr[data-id]').length)",
    )
    .await;
    assert_eq!(records, "1", "one record after the first op");
    // Then to the middle, and one step forward with the button.
    let mid = user_total / 2;
    slide(&c, mid).await;
    wait_for(
        &c,
        &format!("document.getElementById('at-label').textContent.startsWith('{mid} / ')"),
        "the middle",
    )
    .await;
    click(&c, Locator::Id("step-fwd")).await;
    wait_for(
        &c,
        &format!(
            "document.getElementById('at-label').textContent.startsWith('{} / ')",
            mid + 1
        ),
        "one step",
    )
    .await;
    wait_for(
        &c,
        "document.querySelector('#ops tr.current')",
        "the current op in the log",
    )
    .await;
    let current = text(&c, "document.querySelector('#ops tr.current').dataset.seq").await;
    let card = text(&c, "document.querySelector('#op-card').dataset.seq").await;
    assert_eq!(current, card, "the op log marks the op shown");
    let reason = text(&c, "document.querySelector('#op-card').innerText").await;
    assert!(
        reason.contains("reason:") && reason.contains("sources"),
        "{reason}"
    );
    shot(&c, "user-mars.png").await;

    // AtomRec's notes and links.
    c.goto(&format!("{base}#/user/0/atomrec")).await.unwrap();
    wait_for(
        &c,
        "document.querySelector('#memory .kind-view[data-kind=atom] svg.atom-graph')",
        "the notes graph",
    )
    .await;
    let edges = text(
        &c,
        "String(document.querySelectorAll('svg.atom-graph path.edge').length)",
    )
    .await;
    assert!(
        edges.parse::<usize>().unwrap() > 0,
        "the notes' links are drawn"
    );
    shot(&c, "user-atomrec.png").await;

    // A decision, from the user's list.
    wait_for(
        &c,
        "document.querySelector('a.decision-link')",
        "the user's decisions",
    )
    .await;
    click(&c, Locator::Css("a.decision-link")).await;
    wait_for(
        &c,
        "document.querySelector('#evidence-graph')",
        "the evidence graph",
    )
    .await;
    let cands = wait_for(
        &c,
        "document.querySelectorAll('#candidates tr').length - 1",
        "candidates",
    )
    .await;
    assert!(cands.as_u64().unwrap() >= 2, "{cands}");
    assert_eq!(
        wait_for(
            &c,
            "document.querySelectorAll('#evidence-graph g.cand.target').length",
            "the target"
        )
        .await,
        json!(1)
    );
    let seq = wait_for(&c, "document.querySelector('#evidence-graph g.node.linked:not(.anon)') && document.querySelector('#evidence-graph g.node.linked:not(.anon)').dataset.seq", "a memory node of the user").await;
    let anon_seq = text(&c, "(document.querySelector('#evidence-graph g.node.anon') || {dataset: {}}).dataset.seq || ''").await;
    let decision_url = c.current_url().await.unwrap();
    let seq = seq.as_str().unwrap().to_string();
    // The data has titles: candidates show them, their ids on hover.
    let cand = js(
        &c,
        "const g = document.querySelector('#evidence-graph g.cand'); return [g.dataset.item, g.querySelector('text').textContent, g.querySelector('title').textContent]",
        vec![],
    )
    .await;
    let (item, label, hover) = (
        cand[0].as_str().unwrap(),
        cand[1].as_str().unwrap(),
        cand[2].as_str().unwrap(),
    );
    assert!(
        label.contains(" title ") && !label.starts_with("item "),
        "a candidate shows its title: {label}"
    );
    assert!(hover.starts_with(&format!("item {item}: ")), "{hover}");
    let row = js(
        &c,
        "const s = document.querySelector('#candidates span.titled.item'); return s ? [s.textContent, s.title] : null",
        vec![],
    )
    .await;
    assert!(
        row[0].as_str().unwrap().contains(" title ")
            && row[1].as_str().unwrap().starts_with("item i"),
        "the candidates table shows titles, ids on hover: {row}"
    );
    // Memory nodes show the memory's text, the id on hover.
    let node = js(
        &c,
        &format!("const g = document.querySelector('#evidence-graph g.node.linked[data-seq=\"{seq}\"]'); return [g.dataset.id, g.querySelector('text').textContent, g.querySelector('title').textContent]"),
        vec![],
    )
    .await;
    let (nid, label, hover) = (
        node[0].as_str().unwrap(),
        node[1].as_str().unwrap(),
        node[2].as_str().unwrap(),
    );
    assert!(
        !label.is_empty() && !nid.starts_with(label.trim_end_matches('…')),
        "a memory node shows its text, not its id `{nid}`: {label}"
    );
    assert!(
        hover.starts_with(&format!("{nid}: ")),
        "the id on hover: {hover}"
    );
    shot(&c, "decision.png").await;

    // Follow the node to the op that wrote it.
    let node = c
        .find(Locator::Css(&format!(
            "#evidence-graph g.node.linked[data-seq='{seq}'] circle"
        )))
        .await
        .unwrap();
    node.click().await.unwrap();
    wait_for(
        &c,
        &format!("document.querySelector('#op-card[data-seq=\"{seq}\"]')"),
        "the node's op",
    )
    .await;
    let op = text(&c, "document.querySelector('#op-card b').textContent").await;
    assert_eq!(op, "create", "a memory node was written by a create");
    wait_for(
        &c,
        &format!("document.querySelector('#ops tr.current[data-seq=\"{seq}\"]')"),
        "the op in the log",
    )
    .await;
    // The op list names the op's target by its text, the id on hover.
    let target = js(
        &c,
        "const s = document.querySelector('#ops tr.current td.target span'); return [s.textContent, s.title || '']",
        vec![],
    )
    .await;
    let (label, hover) = (target[0].as_str().unwrap(), target[1].as_str().unwrap());
    assert!(
        hover.starts_with(&format!("{nid}: ")) && !label.starts_with("atom:"),
        "the op list shows the memory's text ({label}) with its id on hover ({hover})"
    );
    shot(&c, "op.png").await;

    // Another user's note: its op alone, its owner not named.
    assert!(
        !anon_seq.is_empty(),
        "collaborative evidence in the decision"
    );
    {
        c.goto(decision_url.as_str()).await.unwrap();
        wait_for(
            &c,
            "document.querySelector('#evidence-graph g.node.anon')",
            "the graph again",
        )
        .await;
        let node = format!("#evidence-graph g.node.anon[data-seq='{anon_seq}'] circle");
        click(&c, Locator::Css(&node)).await;
        wait_for(
            &c,
            &format!("document.querySelector('#op-card[data-seq=\"{anon_seq}\"]')"),
            "the anonymised op",
        )
        .await;
        let card = text(&c, "document.getElementById('main').innerText").await;
        assert!(
            card.contains("anonymised") && !card.contains("atom:u"),
            "{card}"
        );
    }

    // A run on data without titles keeps the ids.
    c.goto(&format!("{base}#/decision/1/atomrec/first"))
        .await
        .unwrap();
    wait_for(
        &c,
        "document.querySelector('#evidence-graph g.cand')",
        "the untitled run's graph",
    )
    .await;
    let labels = js(
        &c,
        "return [...document.querySelectorAll('#evidence-graph g.cand text')].map(t => t.textContent)",
        vec![],
    )
    .await;
    let labels = labels.as_array().unwrap();
    assert!(
        !labels.is_empty()
            && labels
                .iter()
                .all(|l| l.as_str().unwrap().starts_with("item i")),
        "ids without titles: {labels:?}"
    );
    assert_eq!(
        text(
            &c,
            "String(document.querySelectorAll('#candidates .titled').length)"
        )
        .await,
        "0"
    );
    shot(&c, "decision-untitled.png").await;

    // Two runs compared.
    c.goto(&format!("{base}#/compare/")).await.unwrap();
    wait_for(
        &c,
        "document.querySelectorAll('#compare tr').length > 1",
        "the comparison",
    )
    .await;
    let summary = text(&c, "document.getElementById('compare-summary').textContent").await;
    assert!(summary.starts_with("10 users"), "{summary}");
    click(&c, Locator::Css("#compare tr:nth-child(2) a")).await;
    wait_for(
        &c,
        "document.querySelector('#evidence-graph')",
        "a decision from the comparison",
    )
    .await;
    c.goto(&format!("{base}#/compare/")).await.unwrap();
    wait_for(
        &c,
        "document.querySelectorAll('#compare tr').length > 1",
        "the comparison",
    )
    .await;
    shot(&c, "compare.png").await;

    // An unknown user shows the API's message, not a script error.
    c.goto(&format!("{base}#/user/0/mars/nobody"))
        .await
        .unwrap();
    let msg = wait_for(
        &c,
        "document.getElementById('error') && document.getElementById('error').textContent",
        "the error",
    )
    .await;
    assert!(
        msg.as_str().unwrap().contains("unknown user `nobody`"),
        "{msg}"
    );

    let errs = errors(&c).await;
    c.close().await.unwrap();
    assert!(errs.is_empty(), "JavaScript errors on the page: {errs:?}");
    eprintln!(
        "browser test: {:.1} s ({:.1} s fixture and browser start)",
        started.elapsed().as_secs_f64(),
        setup.as_secs_f64()
    );
}

/// The figures of `docs/ui.md` on a real run (`EVOMEM_UI_RUNS=DIR[,DIR2]`,
/// `EVOMEM_UI_POLICY` default `atomrec`, `EVOMEM_UI_USER` default `1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real run: EVOMEM_UI_RUNS=DIR[,DIR2]"]
async fn measure_full_run() {
    let Some((chromium, chromedriver)) = binaries() else {
        panic!("no browser");
    };
    let runs: Vec<PathBuf> = std::env::var("EVOMEM_UI_RUNS")
        .expect("EVOMEM_UI_RUNS")
        .split(',')
        .map(PathBuf::from)
        .collect();
    let policy = std::env::var("EVOMEM_UI_POLICY").unwrap_or_else(|_| "atomrec".into());
    let user = std::env::var("EVOMEM_UI_USER").unwrap_or_else(|_| "1".into());
    let base = serve(&runs).await;
    let http = |path: String| async move {
        let started = Instant::now();
        let resp = reqwest_like_get(&path).await;
        (started.elapsed().as_secs_f64() * 1000.0, resp)
    };
    // The one-time index.
    let (ms, body) = http(format!("{base}api/runs/0/policies/{policy}/users?limit=1")).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    eprintln!(
        "index build (first request): {ms:.0} ms; index_s {}; ops {}",
        v["index_s"], v["log_ops"]
    );
    // A page of 100 ops, 20 times at spread offsets.
    let mut times = Vec::new();
    for k in 0..20 {
        let (ms, body) = http(format!(
            "{base}api/runs/0/policies/{policy}/users/{user}/ops?offset={}&limit=100",
            k * 37
        ))
        .await;
        assert!(body.contains("\"ops\""), "{body}");
        times.push(ms);
    }
    times.sort_by(f64::total_cmp);
    eprintln!(
        "100 ops of user {user}: median {:.1} ms, max {:.1} ms",
        times[10], times[19]
    );
    let mut states = Vec::new();
    for k in 1..=10 {
        let (ms, _) = http(format!(
            "{base}api/runs/0/policies/{policy}/users/{user}/state?at={}",
            k * 100
        ))
        .await;
        states.push(ms);
    }
    states.sort_by(f64::total_cmp);
    eprintln!(
        "user {user}'s memory at a slider position: median {:.1} ms",
        states[5]
    );
    let rss = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS"))
        .unwrap_or_default()
        .to_string();
    eprintln!("this process (server + test): {rss}");

    let (_driver, c) = start_browser(&chromium, &chromedriver).await;
    for (view, ready, name) in [
        (
            "#/run/0",
            "document.querySelector('#histogram svg')",
            "full-run.png",
        ),
        (
            &format!("#/user/0/{policy}/{user}?at=1200") as &str,
            "document.querySelector('#op-card')",
            "full-user.png",
        ),
        (
            &format!("#/decision/0/{policy}/first"),
            "document.querySelector('#evidence-graph')",
            "full-decision.png",
        ),
        (
            "#/compare/",
            "document.querySelectorAll('#compare tr').length > 1",
            "full-compare.png",
        ),
    ] {
        c.goto("about:blank").await.unwrap();
        c.goto(&format!("{base}{view}")).await.unwrap();
        wait_for(&c, ready, view).await;
        let paint = c
            .execute(
                "const p = performance.getEntriesByType('paint').find(e => e.name === 'first-paint'); return p ? p.startTime : null",
                vec![],
            )
            .await
            .unwrap();
        let done = c.execute("return performance.now()", vec![]).await.unwrap();
        eprintln!("{view}: first paint {paint} ms, view ready by {done} ms");
        shot(&c, name).await;
    }
    let errs = errors(&c).await;
    c.close().await.unwrap();
    assert!(errs.is_empty(), "{errs:?}");
}

/// A GET over a plain TCP connection (HTTP/1.0, so the server closes it),
/// on a blocking thread.
async fn reqwest_like_get(url: &str) -> String {
    use std::io::{Read, Write};
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').unwrap();
        let mut s = std::net::TcpStream::connect(host).unwrap();
        s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
            .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf).to_string();
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or(text)
    })
    .await
    .unwrap()
}
