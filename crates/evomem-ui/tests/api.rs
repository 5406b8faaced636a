//! The JSON API of `evomem ui`, without a browser: every endpoint the pages
//! use, on two small runs made with the library, through
//! `tower::ServiceExt::oneshot`; unknown names answer 404 with a message
//! naming them, bad parameters 400.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use serde_json::Value;
use std::sync::OnceLock;
use tower::ServiceExt;

fn fixture() -> &'static common::Fixture {
    static F: OnceLock<common::Fixture> = OnceLock::new();
    F.get_or_init(common::fixture)
}

async fn get(path: &str) -> (StatusCode, Vec<u8>) {
    let app = common::router(fixture());
    let resp = app
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body.to_vec())
}

async fn json(path: &str) -> Value {
    let (status, body) = get(path).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::OK, "{path}: {text}");
    serde_json::from_slice(&body).unwrap()
}

/// An error answer: its status and its `error` message.
async fn error(path: &str) -> (StatusCode, String) {
    let (status, body) = get(path).await;
    let v: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {}", String::from_utf8_lossy(&body)));
    let msg = v["error"].as_str().unwrap_or_default().to_string();
    assert!(!msg.is_empty(), "{path}: {v}");
    (status, msg)
}

const P: &str = "/api/runs/0/policies";

#[tokio::test]
async fn pages_and_mode() {
    let (status, body) = get("/").await;
    assert_eq!(status, StatusCode::OK);
    let html = String::from_utf8_lossy(&body);
    assert!(html.contains("<script src=\"errors.js\">") && html.contains("app.js"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external URL"
    );
    for f in ["/app.js", "/errors.js", "/app.css"] {
        let (status, body) = get(f).await;
        assert_eq!(status, StatusCode::OK, "{f}");
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("https://"), "{f} fetches nothing external");
    }
    let mode = json("/api/mode").await;
    assert_eq!(mode["mode"], "run");
    assert_eq!(mode["runs"].as_array().unwrap().len(), 2);
    assert_eq!(mode["runs"][0]["name"], "run-a");
}

/// Run mode answers with the service's security headers: a
/// Content-Security-Policy without `unsafe-inline` (the page has no inline
/// script), no framing, `nosniff`, no referrer.
#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    for path in [
        "/",
        "/app.js",
        "/errors.js",
        "/app.css",
        "/api/mode",
        "/api/runs/9",
    ] {
        let resp = common::router(fixture())
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let h = resp.headers();
        let get = |name: header::HeaderName| {
            h.get(&name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            get(header::CONTENT_SECURITY_POLICY),
            evomem_ui::assets::CSP,
            "{path}"
        );
        let csp = evomem_ui::assets::CSP;
        assert!(
            csp.contains("script-src 'self';")
                && csp.contains("frame-ancestors 'none'")
                && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        assert_eq!(get(header::X_CONTENT_TYPE_OPTIONS), "nosniff", "{path}");
        assert_eq!(get(header::REFERRER_POLICY), "no-referrer", "{path}");
    }
    let html = evomem_ui::assets::INDEX_HTML;
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script src=\"").count(),
        "no inline script: {html}"
    );
}

#[tokio::test]
async fn run_info_lists_policies_with_capabilities_metrics_and_plots() {
    let run = json("/api/runs/0").await;
    let policies = run["policies"].as_array().unwrap();
    let slugs: Vec<&str> = policies
        .iter()
        .map(|p| p["slug"].as_str().unwrap())
        .collect();
    for p in common::POLICIES {
        assert!(slugs.contains(&p), "{slugs:?}");
    }
    let by = |s: &str| policies.iter().find(|p| p["slug"] == s).unwrap().clone();
    assert_eq!(by("atomrec")["caps"]["evidence_paths"], true);
    assert!(!by("mars")["caps"]["lifecycle_timeline"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(by("pop")["caps"]["writes_memory"], false);
    assert!(by("mars")["metrics"]["MRR"].is_number());
    assert!(by("atomrec")["llm"]["per_role"].is_object());
    assert!(by("atomrec")["llm"].get("per_user").is_none());
    assert!(run["summary"]["policies"].is_array());
    assert!(run["timing"]["policies"].is_object());
    for plot in run["plots"].as_array().unwrap() {
        let (status, body) = get(&format!("/api/runs/0/plot/{}", plot.as_str().unwrap())).await;
        assert_eq!(status, StatusCode::OK);
        assert!(String::from_utf8_lossy(&body).contains("<svg"));
    }
    let (status, msg) = error("/api/runs/0/plot/secret.txt").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(msg.contains("secret.txt"), "{msg}");
    let per_user = json(&format!("{P}/mars/per_user")).await;
    assert_eq!(per_user["rows"].as_array().unwrap().len(), 10);
}

#[tokio::test]
async fn users_ops_and_state_page_through_one_users_log() {
    let users = json(&format!("{P}/mars/users?limit=5")).await;
    assert_eq!(users["total"], 10);
    assert_eq!(users["users"].as_array().unwrap().len(), 5);
    assert!(users["kinds"]["preference_chunk"].as_u64().unwrap() > 0);
    let user = users["users"][0]["user"].as_str().unwrap().to_string();
    let n = users["users"][0]["ops"].as_u64().unwrap();
    assert!(n > 3);

    let page = json(&format!("{P}/mars/users/{user}/ops?offset=1&limit=2")).await;
    assert_eq!(page["total"], n);
    let ops = page["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0]["pos"], 1);
    assert!(ops[0]["seq"].as_u64().unwrap() < ops[1]["seq"].as_u64().unwrap());
    for k in ["kind", "label", "reason", "sources", "at", "target"] {
        assert!(!ops[0][k].is_null(), "{k}: {}", ops[0]);
    }

    // The state before any op, after the first, and at the end.
    let empty = json(&format!("{P}/mars/users/{user}/state?at=0")).await;
    assert_eq!(empty["records"].as_array().unwrap().len(), 0);
    assert!(empty["op"].is_null());
    let one = json(&format!("{P}/mars/users/{user}/state?at=1")).await;
    assert_eq!(one["op"]["kind"], "create");
    assert!(one["op"]["touched"][0]["before"].is_null());
    assert!(one["op"]["touched"][0]["after"]["id"].is_string());
    let end = json(&format!("{P}/mars/users/{user}/state")).await;
    assert_eq!(end["at"], n);
    assert!(
        end["kinds"]["preference_chunk"].as_u64().unwrap() > 0,
        "{}",
        end["kinds"]
    );
    // An op that changed a record shows it before and after.
    let all = json(&format!("{P}/mars/users/{user}/ops?limit=1000")).await;
    let adjust = all["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "adjust_strength" || o["kind"] == "update_fields")
        .expect("an op that changes a record");
    let pos = adjust["pos"].as_u64().unwrap();
    let st = json(&format!("{P}/mars/users/{user}/state?at={}", pos + 1)).await;
    let touched = &st["op"]["touched"][0];
    assert!(
        touched["before"].is_object() && touched["after"].is_object(),
        "{st}"
    );
    assert_eq!(st["op"]["seq"], adjust["seq"]);
}

#[tokio::test]
async fn a_decision_names_its_evidence_and_every_memory_node_leads_to_its_op() {
    let list = json(&format!("{P}/atomrec/decisions?limit=3")).await;
    assert_eq!(list["total"], 10);
    let id = list["decisions"][0]["decision_id"].as_u64().unwrap();
    let user = list["decisions"][0]["user"].as_str().unwrap().to_string();
    let mine = json(&format!("{P}/atomrec/decisions?user={user}")).await;
    assert_eq!(mine["total"], 1);

    let d = json(&format!("{P}/atomrec/decisions/{id}")).await;
    let dec = &d["decision"];
    assert_eq!(
        dec["candidates"].as_array().unwrap().len(),
        dec["scores"].as_array().unwrap().len()
    );
    assert!(d["top"].is_number());
    let nodes = d["nodes"].as_object().unwrap();
    assert!(!nodes.is_empty(), "{d}");
    let mut anonymous = 0;
    for (nid, n) in nodes {
        let seq = n["first_seq"].as_u64().unwrap();
        let rec = json(&format!("{P}/atomrec/records/{nid}")).await;
        assert_eq!(rec["first_seq"], seq);
        if nid.starts_with("anon:") {
            // Another user's note: its op, under its label, names no owner.
            anonymous += 1;
            assert_eq!(n["anonymous"], true, "{n}");
            assert!(n.get("record").is_none() && n.get("user").is_none(), "{n}");
            let op = json(&format!("{P}/atomrec/ops/{seq}?anon={nid}")).await;
            assert_eq!(op["seq"], seq);
            assert_eq!(op["target"], nid.as_str());
            assert_eq!(op["kind"], "create");
            assert!(!op.to_string().contains("atom:u"), "{op}");
            let (status, _) = error(&format!("{P}/atomrec/ops/{seq}?anon=anon:00000000")).await;
            assert_eq!(status, StatusCode::NOT_FOUND);
        } else {
            let op = json(&format!("{P}/atomrec/ops/{seq}")).await;
            assert_eq!(op["seq"], seq);
            assert_eq!(op["target"], n["record"], "{nid}");
            assert_eq!(op["kind"], "create", "{nid}");
        }
    }
    assert!(anonymous > 0, "collaborative evidence in the fixture");
}

#[tokio::test]
async fn growth_plot_and_comparison_of_two_runs() {
    let run = json("/api/runs/0").await;
    for p in run["policies"].as_array().unwrap() {
        if p["has_growth"] == true {
            let (status, _) = get(&format!("{P}/{}/growth.svg", p["slug"].as_str().unwrap())).await;
            assert_eq!(status, StatusCode::OK);
        }
    }
    let c = json("/api/compare?a=0&b=1&policy=mars&metric=NDCG@10").await;
    assert_eq!(c["users"], 10);
    let rows = c["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    let deltas: Vec<f64> = rows
        .iter()
        .map(|r| r["delta"].as_f64().unwrap().abs())
        .collect();
    assert!(
        deltas.windows(2).all(|w| w[0] >= w[1]),
        "sorted by |delta|: {deltas:?}"
    );
    for r in rows {
        assert!(r["decision_a"].is_number() && r["decision_b"].is_number());
    }
}

#[tokio::test]
async fn unknown_names_are_404_naming_what_was_not_found() {
    for (path, what) in [
        ("/api/runs/7", "unknown run `7`"),
        ("/api/runs/x/policies/mars/users", "unknown run `x`"),
        (&format!("{P}/nope/users") as &str, "unknown policy `nope`"),
        (
            &format!("{P}/mars/users/nobody/ops"),
            "unknown user `nobody`",
        ),
        (
            &format!("{P}/mars/users/nobody/state"),
            "unknown user `nobody`",
        ),
        (
            &format!("{P}/atomrec/decisions/999999"),
            "unknown decision `999999`",
        ),
        (
            &format!("{P}/atomrec/decisions/abc"),
            "unknown decision `abc`",
        ),
        (
            &format!("{P}/atomrec/ops/999999999"),
            "unknown op `999999999`",
        ),
        (
            &format!("{P}/atomrec/records/atom:nothing"),
            "unknown record `atom:nothing`",
        ),
        ("/api/compare?policy=nope", "unknown policy `nope`"),
        ("/api/compare?policy=mars&b=5", "unknown run `5`"),
        ("/api/no/such/route", "unknown route"),
        (&format!("{P}/pop/growth.svg"), "pop/growth.svg"),
    ] {
        let (status, msg) = error(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {msg}");
        assert!(msg.contains(what), "{path}: `{msg}` lacks `{what}`");
    }
}

#[tokio::test]
async fn bad_query_parameters_are_400() {
    for path in [
        format!("{P}/mars/users?limit=0"),
        format!("{P}/mars/users?limit=5000"),
        format!("{P}/mars/users?offset=-1"),
        format!("{P}/mars/users?bogus=1"),
        format!("{P}/mars/users/u0/ops?limit=abc"),
        format!("{P}/mars/users/u0/state?at=-3"),
        format!("{P}/mars/users/u0/state?at=99999999"),
        format!("{P}/atomrec/decisions?limit=0"),
        "/api/compare".to_string(),
        "/api/compare?policy=mars&metric=nope".to_string(),
        "/api/compare?policy=mars&limit=0".to_string(),
    ] {
        let (status, msg) = error(&path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {msg}");
    }
}

/// The synthetic data's title of item `i<N>` ends with `title <N>`.
fn is_title_of(title: &str, token: &str) -> bool {
    title.ends_with(&format!(" title {}", token.trim_start_matches('i')))
}

#[tokio::test]
async fn a_titled_runs_decisions_carry_their_items_titles() {
    let run = json("/api/runs/0").await;
    let n = run["item_titles"].as_u64().unwrap();
    assert!(n > 0, "{}", run["item_titles"]);
    assert!(run["item_titles_error"].is_null());
    assert!(fixture().a.join(evomem_rundir::files::ITEM_TITLES).exists());
    let list = json(&format!("{P}/atomrec/decisions?limit=1000")).await;
    for d in list["decisions"].as_array().unwrap() {
        let (target, title) = (d["target"].as_str().unwrap(), d["target_title"].as_str());
        assert!(title.is_some_and(|t| is_title_of(t, target)), "{d}");
    }
    let id = list["decisions"][0]["decision_id"].as_u64().unwrap();
    let d = json(&format!("{P}/atomrec/decisions/{id}")).await;
    let titles = d["titles"].as_object().unwrap();
    let cands = d["decision"]["candidates"].as_array().unwrap();
    for c in cands {
        let c = c.as_str().unwrap();
        let t = titles.get(c).and_then(Value::as_str).unwrap_or_default();
        assert!(is_title_of(t, c), "candidate {c}: `{t}` in {d}");
    }
    assert_eq!(titles.len(), cands.len(), "only the decision's items");
}

#[tokio::test]
async fn an_untitled_run_keeps_ids() {
    let run = json("/api/runs/1").await;
    assert_eq!(run["item_titles"], 0);
    assert!(
        !fixture().b.join(evomem_rundir::files::ITEM_TITLES).exists(),
        "data without titles writes no titles file"
    );
    let list = json("/api/runs/1/policies/atomrec/decisions?limit=1").await;
    assert!(list["decisions"][0]["target_title"].is_null(), "{list}");
    let id = list["decisions"][0]["decision_id"].as_u64().unwrap();
    let d = json(&format!("/api/runs/1/policies/atomrec/decisions/{id}")).await;
    assert_eq!(d["titles"], serde_json::json!({}), "{}", d["titles"]);
}

/// A run folder from before `item_titles.json` (the file removed from a
/// fresh run) loads and answers with ids; a corrupt file is reported in
/// the run's answer and the run still loads.
#[tokio::test]
async fn an_old_run_folder_without_titles_still_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let old = tmp.path().join("old");
    common::make_run(&old, 42, true);
    let file = old.join(evomem_rundir::files::ITEM_TITLES);
    std::fs::remove_file(&file).unwrap();
    let call = |path: String, runs: Vec<std::path::PathBuf>| async move {
        let app = evomem_ui::router(std::sync::Arc::new(evomem_ui::Runs::open(&runs).unwrap()));
        let resp = app
            .oneshot(Request::get(&path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice::<Value>(&body).unwrap()
    };
    let run = call("/api/runs/0".into(), vec![old.clone()]).await;
    assert_eq!(run["item_titles"], 0);
    let d = call(
        "/api/runs/0/policies/atomrec/decisions/0".into(),
        vec![old.clone()],
    )
    .await;
    assert_eq!(d["titles"], serde_json::json!({}));
    assert!(d["decision"]["candidates"].as_array().unwrap().len() > 1);

    std::fs::write(&file, "{not json").unwrap();
    let run = call("/api/runs/0".into(), vec![old.clone()]).await;
    assert_eq!(run["item_titles"], 0);
    let err = run["item_titles_error"].as_str().unwrap_or_default();
    assert!(err.contains("item_titles.json"), "{run}");
}

#[tokio::test]
async fn memory_nodes_and_op_rows_carry_the_memorys_text() {
    let list = json(&format!("{P}/atomrec/decisions?limit=1")).await;
    let id = list["decisions"][0]["decision_id"].as_u64().unwrap();
    let d = json(&format!("{P}/atomrec/decisions/{id}")).await;
    let nodes = d["nodes"].as_object().unwrap();
    for (nid, n) in nodes {
        let text = n["text"].as_str().unwrap_or_default();
        assert!(!text.is_empty(), "{nid}: {n}");
        if nid.starts_with("anon:") {
            assert!(!text.contains("atom:u"), "another user's note: {text}");
        }
    }
    // A user's op list names each op's target by its text.
    let user = list["decisions"][0]["user"].as_str().unwrap();
    let page = json(&format!("{P}/atomrec/users/{user}/ops?limit=1000")).await;
    let ops = page["ops"].as_array().unwrap();
    let creates: Vec<&Value> = ops.iter().filter(|o| o["kind"] == "create").collect();
    assert!(!creates.is_empty());
    for o in &creates {
        let st = json(&format!(
            "{P}/atomrec/users/{user}/state?at={}",
            o["pos"].as_u64().unwrap() + 1
        ))
        .await;
        assert_eq!(o["target_text"], st["op"]["op"]["record"]["text"], "{o}");
    }
    // Every later op on a record the user created names it too, and a
    // second page sees the texts the first page's creates set.
    let created: std::collections::BTreeSet<&str> = creates
        .iter()
        .map(|o| o["target"].as_str().unwrap())
        .collect();
    let later = ops
        .iter()
        .find(|o| o["kind"] != "create" && created.contains(o["target"].as_str().unwrap()))
        .expect("an op on a record the user created");
    assert!(later["target_text"].is_string(), "{later}");
    let pos = later["pos"].as_u64().unwrap();
    let alone = json(&format!(
        "{P}/atomrec/users/{user}/ops?offset={pos}&limit=1"
    ))
    .await;
    assert_eq!(alone["ops"][0]["target_text"], later["target_text"]);
}
