//! The arenas end to end: the bandit's predicted pattern, the DB arena's
//! loop (reproducibility, O(1) vs growing memory, noise injection, the
//! transfer split), a dead model backend failing the run, the LLM agent
//! path against a fixture server, and bad input naming sample and field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use evomem_arena::bandit::{self, BanditConfig};
use evomem_arena::lifelong::agent::run_episode;
use evomem_arena::lifelong::run::{self, ArenaInputs, LifelongConfig, LifelongReport, Setting};
use evomem_arena::lifelong::task::load_tasks;
use evomem_arena::lifelong::MemoryView;
use evomem_kit::testing::{shared_dataset, TestEmbedder};
use evomem_kit::RoleCaller;
use evomem_llm::fixture::{FixtureServer, Reply};
use evomem_llm::{CacheSettings, LlmHub};
use std::path::PathBuf;
use std::sync::Arc;

fn data() -> Option<PathBuf> {
    shared_dataset("lifelong-agent-bench").map(|d| d.join("db_bench_data.json"))
}

fn offline() -> Result<Arc<LlmHub>, String> {
    Ok(Arc::new(LlmHub::offline().with_estimate(true)))
}

fn config(data: PathBuf, policies: &str, tasks: usize, epochs: usize) -> LifelongConfig {
    LifelongConfig {
        data,
        policies: vec![policies.into()],
        setting: Setting::Runtime,
        epochs,
        seed: 42,
        seeds: 1,
        tasks: Some(tasks),
        noise: None,
        llm: "offline".into(),
    }
}

fn arena(cfg: &LifelongConfig) -> LifelongReport {
    let inputs = ArenaInputs {
        embedder: Arc::new(TestEmbedder::new(128)),
        hub_for: &offline,
    };
    run::run_arena(cfg, &inputs, &|_| {}).unwrap()
}

fn runs<'a>(r: &'a LifelongReport, spec: &str) -> Vec<&'a run::PolicyRun> {
    r.runs
        .iter()
        .filter(|p| {
            p.spec == spec
                || p.spec
                    .starts_with(&format!("{}[", spec.trim_end_matches(']')))
        })
        .collect()
}

#[test]
fn bandit_c_plus_a_adapts_and_retains() {
    let cfg = BanditConfig {
        seeds: 300,
        ..BanditConfig::default()
    };
    let r = bandit::run(&cfg).unwrap();
    let v = |n: &str| r.variants.iter().find(|v| v.variant == n).unwrap();
    let (cc, aa, ca) = (v("C+C"), v("A+A"), v("C+A"));
    // Retention: C+A finds a0 again faster than A+A, which lost it.
    assert!(
        ca.recovery.hi < aa.recovery.lo,
        "{:?} vs {:?}",
        ca.recovery,
        aa.recovery
    );
    // Adaptation: C+A tracks the temporary regimes, C+C cannot.
    assert!(
        cc.temporary.hi < ca.temporary.lo,
        "{:?} vs {:?}",
        cc.temporary,
        ca.temporary
    );
    assert!(r.ca_best_joint, "{}", r.verdict);
    // Same seeds, same numbers.
    assert_eq!(r, bandit::run(&cfg).unwrap());
    let dir = tempfile::tempdir().unwrap();
    bandit::write_report(dir.path(), &r).unwrap();
    for f in ["bandit.json", "report.md", "bandit_reward.svg"] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
}

#[test]
fn lifelong_runtime_is_reproducible_and_romerl_memory_is_bounded() {
    let Some(data) = data() else { return };
    let cfg = config(data, "romerl,memrl,memrl[cap=4]", 30, 3);
    let r = arena(&cfg);
    let again = arena(&cfg);
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::to_value(&again).unwrap(),
        "a run is reproducible from its config"
    );
    assert_eq!(
        r.judge.failed,
        vec![],
        "the judge passes every ground truth"
    );
    let last = |spec: &str| runs(&r, spec)[0].epochs.last().unwrap().clone();
    for run in runs(&r, "romerl") {
        for e in &run.epochs {
            assert!(
                e.max_per_task <= 4,
                "romerl epoch {}: {}",
                e.epoch,
                e.max_per_task
            );
        }
    }
    for run in runs(&r, "memrl[cap=4]") {
        for e in &run.epochs {
            assert!(e.max_per_task <= 4);
        }
    }
    // MemRL's pool grows by one memory per task per epoch.
    let memrl = runs(&r, "memrl")
        .into_iter()
        .find(|p| !p.spec.contains("cap"))
        .unwrap();
    for e in &memrl.epochs {
        assert_eq!(e.max_per_task, e.epoch, "memrl epoch {}", e.epoch);
        assert_eq!(e.memories, 30 * e.epoch);
    }
    assert_eq!(last("no-memory").memories, 0);
    for run in &r.runs {
        let mut prev = 0.0;
        for e in &run.epochs {
            assert!(e.csr >= prev && e.csr >= e.sr, "{}: {:?}", run.spec, e);
            prev = e.csr;
        }
    }
    // The trajectory policies report a Q/provenance correlation.
    assert!(last("romerl").point_biserial.is_some());
    let dir = tempfile::tempdir().unwrap();
    run::write_report(dir.path(), &r).unwrap();
    for f in [
        "lifelong.json",
        "episodes.jsonl",
        "report.md",
        "plot_sr.svg",
        "plot_memories_per_task.svg",
    ] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("| romerl |") && md.contains("Judge validation"));
}

#[test]
fn noise_injection_nulls_a_tenth_of_the_entries_after_round_one() {
    let Some(data) = data() else { return };
    let mut cfg = config(data, "memrl,romerl", 30, 2);
    cfg.noise = Some(0.1);
    let r = arena(&cfg);
    for spec in ["memrl", "romerl"] {
        let run = runs(&r, spec)[0];
        assert_eq!(run.epochs.len(), 3, "one round, then --epochs rounds");
        let n = run.noise.as_ref().unwrap();
        // memrl has 30 entries after round 1 -> 3 nulled.
        if spec == "memrl" {
            assert_eq!(n.injected, 3);
        }
        assert!(n.injected > 0);
        assert!(run.epochs[0].noise_ratio.unwrap() > 0.0, "{spec}");
    }
}

/// The arena's `reuse_null` key sweeps the agent's reuse of a retrieved
/// null action in one run: at 0 no episode reuses one, so nothing
/// propagates; every run reports the counts its noise ratio is made of and
/// its stuck tasks; the noise claims are judged per cell and, with one
/// rule for nulled memories in the run, say "not comparable".
#[test]
fn reuse_null_sweeps_the_agents_reuse_of_a_null_action() {
    let Some(data) = data() else { return };
    let mut cfg = config(
        data,
        "memrl[reuse_null=0],romerl[reuse_null=0],memrl,romerl",
        40,
        2,
    );
    cfg.noise = Some(0.2);
    cfg.seeds = 2;
    let r = arena(&cfg);
    let group =
        |g: &str| -> Vec<&run::PolicyRun> { r.runs.iter().filter(|p| p.policy == g).collect() };
    for g in ["memrl[reuse_null=0]", "romerl[reuse_null=0]"] {
        let rs = group(g);
        assert_eq!(rs.len(), 2, "{g}");
        for run in rs {
            assert_eq!(run.reuse_null, 0.0);
            assert!(!run.spec.contains("reuse_null"), "{}", run.spec);
            assert_eq!(run.noise.as_ref().unwrap().propagated, 0, "{g}");
        }
    }
    for run in &r.runs {
        let n = run.noise.as_ref().unwrap();
        assert!(n.noisy_entries <= n.entries);
        if n.entries > 0 {
            let ratio = n.noisy_entries as f64 / n.entries as f64;
            assert!(
                (ratio - n.final_noise_ratio).abs() < 1e-12,
                "{}",
                run.policy
            );
        }
        assert!(n.stuck <= n.never_solved_after && n.never_solved_after <= 40);
    }
    let claim = r
        .claims
        .iter()
        .find(|c| c.metric == "final noise ratio" && c.claim.contains("RoMeRL"))
        .unwrap();
    assert_eq!(claim.cells.len(), 2, "one cell per reuse_null");
    assert_eq!(
        claim.verdict,
        evomem_arena::lifelong::verdict::Verdict::NotComparable
    );
    let md = run::markdown(&r);
    assert!(md.contains("| stuck |") && md.contains("paired"), "{md}");
}

#[test]
fn transfer_split_is_a_fixed_seven_to_three() {
    let Some(data) = data() else { return };
    let tasks = load_tasks(&data).unwrap();
    let (train, test) = run::split(&tasks);
    assert_eq!((train.len(), test.len()), (350, 150));
    let (train2, _) = run::split(&tasks);
    assert_eq!(
        train.iter().map(|t| t.index).collect::<Vec<_>>(),
        train2.iter().map(|t| t.index).collect::<Vec<_>>()
    );
    assert!(train
        .iter()
        .all(|t| test.iter().all(|u| u.index != t.index)));
    let mut cfg = config(data, "romerl", 20, 1);
    cfg.setting = Setting::Transfer;
    let r = arena(&cfg);
    assert_eq!(r.split, Some((14, 6)));
    assert!(r.runs.iter().all(|p| p.transfer_sr.is_some()));
}

#[test]
fn a_dead_model_backend_fails_the_run_instead_of_going_offline() {
    let Some(data) = data() else { return };
    let cfg = config(data, "memrl", 10, 1);
    // Nothing listens on port 9 (discard) of loopback.
    let dead = || -> Result<Arc<LlmHub>, String> {
        LlmHub::from_spec("openai:m@http://127.0.0.1:9/v1", CacheSettings::default())
            .map(Arc::new)
            .map_err(|e| e.to_string())
    };
    let inputs = ArenaInputs {
        embedder: Arc::new(TestEmbedder::new(64)),
        hub_for: &dead,
    };
    let err = run::run_arena(&cfg, &inputs, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("act"), "{err}");
}

#[test]
fn the_llm_agent_runs_the_models_sql_and_sees_its_memories() {
    let Some(data) = data() else { return };
    let tasks = load_tasks(&data).unwrap();
    let task = &tasks[1]; // a SELECT task
    let srv = FixtureServer::start().unwrap();
    let sql = format!("SELECT * FROM {} LIMIT 2", task.table.name);
    srv.push([
        Reply::Content(format!("```sql\n{sql}\n```")),
        Reply::Content(r#"{"action": "commit"}"#.into()),
    ]);
    let hub = LlmHub::from_spec(
        &format!("openai:m@{}", srv.base_url()),
        CacheSettings::default(),
    )
    .unwrap();
    let mut caller = RoleCaller::new(Arc::new(hub));
    let memory = MemoryView {
        task: "MEMORY-TASK-TEXT: list two rows".into(),
        table: task.table.name.clone(),
        columns: vec![],
        answer: Some("SELECT 1".into()),
        steps: vec![],
        success: true,
        score: 0.9,
    };
    let res = run_episode(&mut caller, task, &[memory]).unwrap();
    assert_eq!(res.episode.steps.len(), 1);
    assert_eq!(res.episode.steps[0].action.trim_end_matches(';'), sql);
    assert!(res.episode.steps[0].ok);
    let bodies: Vec<String> = srv.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(
        bodies[0].contains("MEMORY-TASK-TEXT"),
        "memories are in the prompt"
    );
    assert_eq!(srv.request_count(), 2);
}

#[test]
fn a_malformed_task_file_names_the_sample_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.json");
    std::fs::write(
        &p,
        r#"{"0": {"sample_index": 0, "instruction": "x", "answer_info": "{'direct': None, 'md5': None, 'sql': 'SELECT 1'}", "table_info": "{'name': 't', 'column_info_list': [{'name': 'a', 'type': 'INT'}], 'row_list': [[1]]}", "skill_list": "['select']"}}"#,
    )
    .unwrap();
    let cfg = config(p.clone(), "memrl", 1, 1);
    let inputs = ArenaInputs {
        embedder: Arc::new(TestEmbedder::new(64)),
        hub_for: &offline,
    };
    let err = run::run_arena(&cfg, &inputs, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.json") && err.contains("sample 0") && err.contains("answer_info"),
        "{err}"
    );
}

/// A model that never answers usefully.
struct Mumbler;

impl evomem_core::LanguageModel for Mumbler {
    fn id(&self) -> String {
        "mumbler".into()
    }
    fn complete(
        &self,
        req: &evomem_core::ChatRequest,
    ) -> Result<evomem_core::ChatResponse, evomem_core::LlmError> {
        Ok(evomem_core::ChatResponse {
            text: "I would rather not say.".into(),
            usage: evomem_core::Usage {
                prompt_tokens: req.messages.len() as u64,
                completion_tokens: 5,
            },
        })
    }
}

#[test]
fn fallbacks_of_a_model_run_are_counted_and_reported() {
    let Some(data) = data() else { return };
    let cfg = config(data, "memrl", 4, 1);
    let mumbler = || -> Result<Arc<LlmHub>, String> {
        LlmHub::with_model(Arc::new(Mumbler), CacheSettings::default())
            .map(Arc::new)
            .map_err(|e| e.to_string())
    };
    let inputs = ArenaInputs {
        embedder: Arc::new(TestEmbedder::new(64)),
        hub_for: &mumbler,
    };
    let r = run::run_arena(&cfg, &inputs, &|_| {}).unwrap();
    for run in &r.runs {
        let e = &run.epochs[0];
        assert!(e.calls > 0);
        assert_eq!(
            e.fallbacks, e.calls,
            "{}: every act call fell back",
            run.spec
        );
    }
    let md = run::markdown(&r);
    let calls: u64 = r.runs.iter().map(|p| p.epochs[0].calls).sum();
    assert!(
        md.contains(&format!("(fallbacks): {calls} of {calls}")),
        "{md}"
    );
}

/// A spec whose `delta` the user wrote is summarised under that spec (the
/// arena fills `delta` only where none is given, and groups seeds by the
/// requested spec), next to the same family with the arena's δ.
#[test]
fn a_spec_with_its_own_delta_is_summarised_under_its_name() {
    let Some(data) = data() else { return };
    let mut cfg = config(data, "romerl,romerl[delta=-1,epsilon=0,score=raw]", 12, 1);
    cfg.seeds = 2;
    let r = arena(&cfg);
    for spec in ["romerl", "romerl[delta=-1,epsilon=0,score=raw]"] {
        let s = r.summary.iter().find(|s| s.spec == spec).unwrap();
        let sr = s.last.get("sr").unwrap_or_else(|| panic!("{spec}: no SR"));
        assert_eq!(sr.n, 2, "{spec}: both seeds grouped");
    }
}

/// Noise propagation: with every entry nulled after round 1, the agent
/// meets a null action as the best success of a task it solved, reuses it,
/// and the arena marks what the policy writes from that episode as noise.
#[test]
fn a_reused_null_action_writes_propagated_noise() {
    let Some(data) = data() else { return };
    let mut cfg = config(data, "memrl", 12, 1);
    cfg.noise = Some(1.0);
    let r = arena(&cfg);
    let run = runs(&r, "memrl")[0];
    let n = run.noise.as_ref().unwrap();
    assert_eq!(n.injected, 12);
    assert!(n.propagated > 0, "no episode reused a null action: {n:?}");
    // Round 1 wrote 12 entries, all nulled; round 2 wrote 12 more, the
    // propagated ones noisy too.
    let ratio = run.epochs.last().unwrap().noise_ratio.unwrap();
    assert!(ratio > 0.5, "{ratio}");
}
