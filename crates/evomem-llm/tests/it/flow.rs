//! The hub end to end: every failure mode of the fixture server leaves memory
//! either exactly as the offline fallback would, or untouched; repairs,
//! fallbacks and tokens are counted; the cache replays with zero requests.

use crate::common::{best, client, input, role};
use evomem_core::{
    LlmError, LogicalTime, MemoryId, MemoryOp, MemoryRecord, Namespace, PlannedOp, RecordKind, Role,
};
use evomem_llm::fixture::{FixtureServer, Reply};
use evomem_llm::{Backend, CacheSettings, LlmHub, RankInput};
use evomem_store::Engine;
use std::sync::Arc;
use std::time::Duration;

/// A small role-using flow: rank, then remember the top pick.
fn flow(hub: &LlmHub, inp: &RankInput) -> (Engine, Result<Vec<f64>, LlmError>) {
    let mut eng = Engine::in_memory();
    let out = hub.run(&role(), inp, Some(&inp.user));
    if let Ok(o) = &out {
        let top = &inp.candidates[best(&o.scores)];
        let rec = MemoryRecord::new(
            MemoryId::new("u1:pick"),
            Namespace::user("u1"),
            RecordKind::Event,
            format!("top pick: {}", top.title),
            LogicalTime(1),
        );
        eng.apply(
            "test",
            vec![PlannedOp::new(
                MemoryOp::Create { record: rec },
                "pick",
                "best ranked",
            )],
            LogicalTime(1),
        )
        .unwrap();
    }
    (eng, out.map(|o| o.scores))
}

fn model_hub(srv: &FixtureServer, retries: u32, timeout_ms: u64, cache: CacheSettings) -> LlmHub {
    LlmHub::with_model(
        Arc::new(client(&srv.base_url(), retries, timeout_ms)),
        cache,
    )
    .unwrap()
}

/// The offline answer is candidate 2 (Aliens); the scripted model prefers 1.
const MODEL_ANSWER: &str = "{\"ranking\": [1, 3, 4, 2]}";

fn offline_state() -> (Engine, Vec<f64>) {
    let (e, s) = flow(&LlmHub::offline(), &input());
    (e, s.unwrap())
}

fn assert_same(a: &Engine, b: &Engine) {
    assert_eq!(a.state(), b.state());
    assert_eq!(a.log(), b.log());
}

#[test]
fn offline_and_model_answers_differ_here() {
    let (off, scores) = offline_state();
    assert_eq!(best(&scores), 1, "offline ranks Aliens first: {scores:?}");
    assert!(off
        .state()
        .get(&MemoryId::new("u1:pick"))
        .unwrap()
        .text
        .contains("Aliens"));
}

#[test]
fn good_answer_is_used() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off());
    let (eng, scores) = flow(&hub, &input());
    assert_eq!(scores.unwrap(), vec![4.0, 1.0, 3.0, 2.0]);
    assert!(eng
        .state()
        .get(&MemoryId::new("u1:pick"))
        .unwrap()
        .text
        .contains("Notting Hill"));
    let a = hub.accounting_json();
    assert_eq!(a["per_role"]["rank"]["calls"], 1);
    assert_eq!(a["per_role"]["rank"]["fallbacks"], 0);
    assert!(
        a["per_user"]["u1"]["rank"]["prompt_tokens"]
            .as_u64()
            .unwrap()
            > 100
    );
    // The request is the rendered rank prompt with its schema, bounded by
    // this input's candidates.
    let body = &srv.requests()[0].body;
    assert_eq!(body["response_format"]["json_schema"]["name"], "rank");
    assert_eq!(
        body["response_format"]["json_schema"]["schema"],
        role().schema_for(&input())
    );
    let n = input().candidates.len();
    let ranking = &body["response_format"]["json_schema"]["schema"]["properties"]["ranking"];
    assert_eq!(ranking["maxItems"], n);
    assert_eq!(ranking["items"]["maximum"], n);
    assert!(body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .contains("[2] Aliens (1986)"));
}

#[test]
fn rate_limit_then_good_answer_is_used() {
    let srv = FixtureServer::start().unwrap();
    srv.push([
        Reply::RateLimited("1".into()),
        Reply::Content(MODEL_ANSWER.into()),
    ]);
    let hub = model_hub(&srv, 2, 2000, CacheSettings::off());
    let (eng, scores) = flow(&hub, &input());
    assert_eq!(best(&scores.unwrap()), 0);
    assert!(eng
        .state()
        .get(&MemoryId::new("u1:pick"))
        .unwrap()
        .text
        .contains("Notting Hill"));
    assert_eq!(srv.request_count(), 2);
    assert_eq!(hub.accounting_json()["per_role"]["rank"]["calls"], 1);
}

/// Each transport failure ends in the offline fallback: memory equals the
/// offline run's exactly, and the fallback is counted with its reason.
fn assert_falls_back(replies: Vec<Reply>, retries: u32, timeout_ms: u64, reason: &str) {
    let srv = FixtureServer::start().unwrap();
    srv.push(replies);
    let hub = model_hub(&srv, retries, timeout_ms, CacheSettings::off());
    let (eng, scores) = flow(&hub, &input());
    let (off, off_scores) = offline_state();
    assert_eq!(scores.unwrap(), off_scores);
    assert_same(&eng, &off);
    let a = hub.accounting_json();
    assert_eq!(a["per_role"]["rank"]["fallbacks"], 1, "{a}");
    assert_eq!(a["fallback_reasons"]["rank"][reason], 1, "{a}");
}

#[test]
fn persistent_500_falls_back_memory_as_offline() {
    assert_falls_back(
        (0..2).map(|_| Reply::Status(500, "boom".into())).collect(),
        1,
        2000,
        "transient",
    );
}

#[test]
fn hang_past_timeout_falls_back_memory_as_offline() {
    assert_falls_back(
        vec![Reply::Hang(Duration::from_secs(3))],
        0,
        300,
        "transient",
    );
}

#[test]
fn malformed_body_falls_back_memory_as_offline() {
    assert_falls_back(vec![Reply::MalformedBody], 0, 2000, "malformed_response");
}

#[test]
fn truncated_body_falls_back_memory_as_offline() {
    assert_falls_back(vec![Reply::TruncatedBody], 0, 2000, "malformed_response");
    assert_falls_back(vec![Reply::TruncatedTransfer], 0, 2000, "transient");
}

#[test]
fn context_too_long_falls_back_memory_as_offline() {
    let msg = "{\"error\":{\"message\":\"prompt is too long: context_length_exceeded\"}}";
    assert_falls_back(
        vec![Reply::Status(400, msg.into())],
        0,
        2000,
        "context_too_long",
    );
}

#[test]
fn malformed_answer_twice_falls_back_after_one_repair() {
    let srv = FixtureServer::start().unwrap();
    srv.push([
        Reply::Content("I would pick the second one.".into()),
        Reply::Content("{\"ranking\": [9, 9]}".into()),
    ]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off());
    let (eng, _) = flow(&hub, &input());
    assert_same(&eng, &offline_state().0);
    assert_eq!(srv.request_count(), 2, "exactly one repair turn");
    let a = hub.accounting_json();
    assert_eq!(a["per_role"]["rank"]["repairs"], 1);
    assert_eq!(a["per_role"]["rank"]["fallbacks"], 1);
    assert_eq!(a["per_role"]["rank"]["calls"], 2);
    assert_eq!(a["fallback_reasons"]["rank"]["malformed_answer"], 1);
}

#[test]
fn repair_turn_sends_bad_answer_and_error() {
    let srv = FixtureServer::start().unwrap();
    srv.push([
        Reply::Content("```json\n{\"ranking\": [1, 7, 2]}\n```".into()),
        Reply::Content(format!("Sure! {MODEL_ANSWER} Enjoy.")),
    ]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off());
    let (eng, scores) = flow(&hub, &input());
    assert_eq!(scores.unwrap(), vec![4.0, 1.0, 3.0, 2.0]);
    assert!(eng
        .state()
        .get(&MemoryId::new("u1:pick"))
        .unwrap()
        .text
        .contains("Notting Hill"));
    let second = &srv.requests()[1].body;
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2]["role"], "assistant");
    assert!(msgs[2]["content"].as_str().unwrap().contains("[1, 7, 2]"));
    assert_eq!(msgs[3]["role"], "user");
    assert!(
        msgs[3]["content"].as_str().unwrap().contains("maximum"),
        "{}",
        msgs[3]
    );
    let a = hub.accounting_json();
    assert_eq!(a["per_role"]["rank"]["repairs"], 1);
    assert_eq!(a["per_role"]["rank"]["fallbacks"], 0);
}

#[test]
fn partial_ranking_is_completed_in_offline_order_and_counted() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Content("{\"ranking\": [3]}".into())]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off());
    let (_, scores) = flow(&hub, &input());
    let scores = scores.unwrap();
    assert_eq!(scores[2], 4.0, "the model's pick stays first");
    // The rest follow the offline order: Aliens (2nd), then the others.
    let off = offline_state().1;
    let mut rest: Vec<usize> = vec![0, 1, 3];
    rest.sort_by(|&a, &b| off[b].total_cmp(&off[a]));
    assert_eq!(scores[rest[0]], 3.0);
    assert_eq!(scores[rest[2]], 1.0);
    assert_eq!(srv.request_count(), 1);
    assert_eq!(hub.accounting_json()["per_role"]["rank"]["repairs"], 1);
}

#[test]
fn auth_error_is_returned_and_memory_untouched() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Status(
        401,
        "{\"error\":{\"message\":\"bad key\"}}".into(),
    )]);
    let hub = model_hub(&srv, 3, 2000, CacheSettings::off());
    let (eng, out) = flow(&hub, &input());
    assert!(matches!(out, Err(LlmError::Permanent(_))));
    assert!(eng.state().is_empty() && eng.log().is_empty());
}

#[test]
fn record_then_replay_makes_zero_requests() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("llm.sqlite");
    let srv = FixtureServer::start().unwrap();
    // Recording run: one good answer, one that fails for good (falls back).
    let mut other = input();
    other.user = "u2".into();
    other.seed = 99;
    other.candidates.swap(0, 3);
    srv.push([
        Reply::Content(MODEL_ANSWER.into()),
        Reply::Status(500, "x".into()),
    ]);
    let rec = model_hub(&srv, 0, 2000, CacheSettings::read_write(&db));
    let (e1, s1) = flow(&rec, &input());
    let (e2, s2) = flow(&rec, &other);
    assert_eq!(srv.request_count(), 2);
    let rec_acct = rec.accounting_json();
    assert_eq!(rec_acct["per_role"]["rank"]["fallbacks"], 1);

    let replay = model_hub(&srv, 0, 2000, CacheSettings::replay_only(&db));
    let (r1, t1) = flow(&replay, &input());
    let (r2, t2) = flow(&replay, &other);
    assert_eq!(srv.request_count(), 2, "replay sent no request");
    assert_eq!(s1.unwrap(), t1.unwrap());
    assert_eq!(s2.unwrap(), t2.unwrap());
    assert_same(&e1, &r1);
    assert_same(&e2, &r2);
    assert_eq!(
        serde_json::to_string(&rec_acct).unwrap(),
        serde_json::to_string(&replay.accounting_json()).unwrap(),
        "accounting is byte-identical"
    );
    assert_eq!(replay.runtime_json()["totals"]["cache_hits"], 2);
    assert_eq!(replay.runtime_json()["totals"]["backend_calls"], 0);
    assert_eq!(rec.runtime_json()["totals"]["backend_calls"], 2);

    // A request never recorded is a miss naming role and key; memory untouched.
    let mut fresh = input();
    fresh.seed = 12345;
    fresh.instruction = Some("something new".into());
    let (e3, out) = flow(&replay, &fresh);
    match out {
        Err(LlmError::CacheMiss { role, key }) => {
            assert_eq!(role, "rank");
            assert_eq!(key.len(), 64);
        }
        other => panic!("expected a cache miss, got {other:?}"),
    }
    assert!(e3.state().is_empty());
    assert_eq!(srv.request_count(), 2);

    // Read-write serves hits too, and retries recorded failures.
    let rw = model_hub(&srv, 0, 2000, CacheSettings::read_write(&db));
    flow(&rw, &input()).1.unwrap();
    assert_eq!(srv.request_count(), 2);
    flow(&rw, &other).1.unwrap();
    assert_eq!(
        srv.request_count(),
        3,
        "a recorded failure is asked again in read-write"
    );
}

#[test]
fn per_role_backends_from_toml() {
    let srv = FixtureServer::start().unwrap();
    let toml = format!(
        "[llm]\ndefault = \"offline\"\ntimeout_s = 2.0\n[llm.roles]\nrank = \"openai:fixture@{}\"\n",
        srv.base_url()
    );
    let cfg = evomem_llm::LlmConfig::from_toml_str(&toml, "test.toml").unwrap();
    let hub = LlmHub::from_config(&cfg, CacheSettings::off()).unwrap();
    assert!(!hub.is_offline());
    assert!(matches!(hub.backend_for("extract"), Backend::Offline));
    assert!(matches!(hub.backend_for("rank"), Backend::Model { .. }));
    let out = hub.run(&role(), &input(), Some("u1")).unwrap();
    assert_eq!(out.scores.len(), 4);
    assert_eq!(srv.request_count(), 1);
    assert_eq!(srv.stats()["by_role"]["rank"], 1);
    let a = hub.accounting_json();
    assert_eq!(a["backends"]["default"], "offline");
    assert!(a["backends"]["rank"]
        .as_str()
        .unwrap()
        .starts_with("openai:fixture@http://127.0.0.1:"));
    // from_spec with a bad spec names the flag.
    let e = LlmHub::from_spec("openai:nomodel", CacheSettings::off()).unwrap_err();
    assert!(e.to_string().contains("@<base_url>"), "{e}");
}

/// A second role whose schema the fixture's auto mode must satisfy.
struct TagRole;

impl Role for TagRole {
    type Input = String;
    type Output = Vec<String>;
    fn name(&self) -> &'static str {
        "tag"
    }
    fn template(&self) -> &'static str {
        "## system\nTag the text.\n## user\n{{text}}\n"
    }
    fn variables(&self, input: &String) -> std::collections::BTreeMap<String, String> {
        [("text".to_string(), input.clone())].into_iter().collect()
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
            "required": ["tags"]
        })
    }
    fn parse(&self, _input: &String, answer: serde_json::Value) -> Result<Vec<String>, String> {
        serde_json::from_value(answer["tags"].clone()).map_err(|e| e.to_string())
    }
    fn offline(&self, input: &String) -> Result<Vec<String>, LlmError> {
        Ok(vec![input.to_lowercase()])
    }
}

#[test]
fn auto_mode_answers_any_role_schema() {
    let srv = FixtureServer::start().unwrap();
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off());
    let out = hub.run(&TagRole, &"Hello".to_string(), None).unwrap();
    assert_eq!(out, vec![String::new()]);
    let a = hub.accounting_json();
    assert_eq!(a["per_role"]["tag"]["fallbacks"], 0);
    assert_eq!(a["per_user_mean"]["n_users"], 0);
    // Offline roles count runs but no calls.
    let off = LlmHub::offline();
    assert_eq!(
        off.run(&TagRole, &"Hi".to_string(), Some("u9")).unwrap(),
        vec!["hi"]
    );
    let a = off.accounting_json();
    assert_eq!(a["per_role"]["tag"]["offline_runs"], 1);
    assert_eq!(a["per_role"]["tag"]["calls"], 0);
}

#[test]
fn offline_estimate_charges_what_the_fixture_would() {
    // Offline with estimation: the rendered prompt and the answer as JSON.
    let off = LlmHub::offline().with_estimate(true);
    let text = "Hello, a slightly longer text to tag".to_string();
    let answer = off.run(&TagRole, &text, Some("u1")).unwrap();
    let est = off.accounting_json();
    assert_eq!(est["per_role"]["tag"]["calls"], 0);
    // The same prompt through the fixture, answered with the same JSON.
    let srv = FixtureServer::start().unwrap();
    let json = serde_json::to_string(&answer).unwrap();
    srv.push([Reply::Content(format!("{{\"tags\": {json}}}"))]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off());
    assert_eq!(hub.run(&TagRole, &text, Some("u1")).unwrap(), answer);
    let real = hub.accounting_json();
    assert_eq!(
        est["per_role"]["tag"]["est_prompt_tokens"],
        real["per_role"]["tag"]["prompt_tokens"]
    );
    // The model's answer wraps the same JSON in an object: only the wrapper
    // differs.
    let est_c = est["per_role"]["tag"]["est_completion_tokens"]
        .as_u64()
        .unwrap();
    let real_c = real["per_role"]["tag"]["completion_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        est_c > 0 && real_c >= est_c && real_c - est_c <= 3,
        "{est_c} vs {real_c}"
    );
    assert_eq!(est["per_user_mean"]["per_role"]["tag"]["runs"], 1.0);
    // Without estimation nothing is recorded.
    let plain = LlmHub::offline();
    plain.run(&TagRole, &text, Some("u1")).unwrap();
    assert!(plain.accounting_json()["per_role"]["tag"]
        .get("est_prompt_tokens")
        .is_none());
}

#[test]
fn request_carries_the_roles_completion_limit() {
    // The rank role's own limit (256) is below the configured 1,024: sent.
    assert_eq!(role().max_tokens(), Some(256));
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off()).with_max_tokens(Some(1024));
    flow(&hub, &input()).1.unwrap();
    assert_eq!(srv.requests()[0].body["max_tokens"], 256);
    // A configured limit below the role's wins.
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off()).with_max_tokens(Some(100));
    flow(&hub, &input()).1.unwrap();
    assert_eq!(srv.requests()[1].body["max_tokens"], 100);
    // No configured limit: the role's.
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off()).with_max_tokens(None);
    flow(&hub, &input()).1.unwrap();
    assert_eq!(srv.requests()[2].body["max_tokens"], 256);
    // A role without a limit of its own sends the configured one.
    assert_eq!(TagRole.max_tokens(), None);
    srv.push([Reply::Content("{\"tags\": [\"a\"]}".into())]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off()).with_max_tokens(Some(700));
    hub.run(&TagRole, &"some text".to_string(), Some("u1"))
        .unwrap();
    assert_eq!(srv.requests()[3].body["max_tokens"], 700);
}

#[test]
fn user_token_cap_answers_offline_and_reports_it() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    // One rank call costs its prompt (> 100 tokens) plus its limit (256);
    // a cap of 600 admits the first call and not the second.
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off()).with_user_token_cap(Some(600));
    let (_, first) = flow(&hub, &input());
    assert_eq!(first.unwrap(), vec![4.0, 1.0, 3.0, 2.0]);
    let (eng, second) = flow(&hub, &input());
    let (off, off_scores) = offline_state();
    assert_eq!(second.unwrap(), off_scores);
    assert_same(&eng, &off);
    assert_eq!(srv.request_count(), 1, "the capped run sent nothing");
    let a = hub.accounting_json();
    assert_eq!(a["per_role"]["rank"]["capped"], 1);
    assert_eq!(a["per_role"]["rank"]["fallbacks"], 1);
    assert_eq!(a["per_user"]["u1"]["rank"]["capped"], 1);
    assert_eq!(a["fallback_reasons"]["rank"]["user_token_cap"], 1);
    assert_eq!(a["per_user_mean"]["per_role"]["rank"]["capped"], 1.0);
    // Another user has a budget of their own; a run without a user is not capped.
    let mut other = input();
    other.user = "u2".into();
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    hub.run(&role(), &other, Some("u2")).unwrap();
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    hub.run(&role(), &input(), None).unwrap();
    assert_eq!(srv.request_count(), 3);
    // Without a cap nothing is capped and the key is absent.
    let plain = model_hub(&srv, 0, 2000, CacheSettings::off());
    srv.push([Reply::Content(MODEL_ANSWER.into())]);
    plain.run(&role(), &input(), Some("u1")).unwrap();
    assert!(plain.accounting_json()["per_role"]["rank"]
        .get("capped")
        .is_none());
}

/// A repeated item in a `uniqueItems` array is dropped and counted as a
/// parser repair; the answer is used without a repair turn.
#[test]
fn repeats_in_a_unique_array_are_dropped_without_a_repair_turn() {
    let srv = FixtureServer::start().unwrap();
    srv.push([Reply::Content("{\"ranking\": [4, 4, 1, 3, 2]}".into())]);
    let hub = model_hub(&srv, 0, 2000, CacheSettings::off());
    let (_, scores) = flow(&hub, &input());
    assert_eq!(scores.unwrap(), vec![3.0, 1.0, 2.0, 4.0]);
    assert_eq!(srv.request_count(), 1, "no repair turn");
    let a = hub.accounting_json();
    assert_eq!(a["per_role"]["rank"]["repairs"], 1);
    assert_eq!(a["per_role"]["rank"]["fallbacks"], 0);
}
