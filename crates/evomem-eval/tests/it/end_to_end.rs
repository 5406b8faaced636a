//! End to end: `no-memory` through `run_eval` on a tiny dataset; the run
//! directory layout; byte-identical reruns; metrics recomputed from
//! `decisions.jsonl`; comparing runs; the op log on disk (either format)
//! replays to the live state.

use evomem_core::metrics::{rank_of_target, RankMetrics};
use evomem_core::{Dataset, LoggedOp, MemoryRecord, MemoryState};
use evomem_eval::bootstrap::BootstrapConfig;
use evomem_eval::compare::{compare_runs, comparison_table};
use evomem_eval::decider::Decider;
use evomem_eval::protocol::{Plan, ProtocolConfig, ProtocolKind};
use evomem_eval::replay::run_policy;
use evomem_eval::run::dir::{OpsLogFormat, PolicyDir, RunDir};
use evomem_eval::run::{run_eval, EvalConfig, RunInputs};
use evomem_eval::synthetic::synthetic_dataset;
use evomem_llm::LlmHub;
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn eval(data: &Dataset, protocol: ProtocolKind, out: &Path) -> evomem_eval::run::RunSummary {
    let config = EvalConfig {
        data: "synthetic".into(),
        protocol: ProtocolConfig {
            protocol,
            ..ProtocolConfig::default()
        },
        policies: vec!["no-memory".into()],
        ..EvalConfig::default()
    };
    let hub_for = |_: &PolicySpec| Ok(Arc::new(LlmHub::offline()));
    run_eval(
        &config,
        RunInputs {
            dataset: data,
            data_sha256: BTreeMap::from([("x.inter".to_string(), "00".to_string())]),
            embedder: Arc::new(evomem_embed::HashingEmbedder::new(32)),
            embedder_notice: None,
            hub_for: &hub_for,
            embed_cache: None,
        },
        out,
        &|_| {},
    )
    .unwrap()
}

fn read_bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn no_memory_end_to_end_and_byte_identical() {
    let data = synthetic_dataset(30, 60, 10, 3);
    let tmp = tempfile::tempdir().unwrap();
    for protocol in [ProtocolKind::Retrospective, ProtocolKind::Evolving] {
        let a = tmp.path().join(format!("{protocol:?}-a"));
        let b = tmp.path().join(format!("{protocol:?}-b"));
        let s = eval(&data, protocol, &a);
        eval(&data, protocol, &b);
        assert_eq!(s.policies.len(), 1);
        assert_eq!(s.policies[0].n_users, 30);
        for f in [
            "summary.json",
            "config.json",
            "no-memory/metrics.json",
            "no-memory/per_user.jsonl",
            "no-memory/decisions.jsonl",
            "no-memory/ops.jsonl.zst",
            "no-memory/config.json",
            "plot_metrics.svg",
            "plot_ranks.svg",
        ] {
            assert_eq!(
                read_bytes(&a.join(f)),
                read_bytes(&b.join(f)),
                "{f} differs between reruns"
            );
        }
        let m: serde_json::Value =
            serde_json::from_str(&read(&a.join("no-memory/metrics.json"))).unwrap();
        for key in [
            "metrics",
            "n_users",
            "config",
            "data_sha256",
            "policy_stats",
            "llm",
            "ops",
            "embedding",
            "plan",
        ] {
            assert!(m.get(key).is_some(), "metrics.json lacks {key}");
        }
        assert_eq!(m["n_users"], 30);
        assert_eq!(m["data_sha256"]["x.inter"], "00");

        // Recompute every metric from the raw scores in decisions.jsonl.
        let mut ranks = Vec::new();
        for line in read(&a.join("no-memory/decisions.jsonl")).lines() {
            let d: serde_json::Value = serde_json::from_str(line).unwrap();
            let scores: Vec<f64> = serde_json::from_value(d["scores"].clone()).unwrap();
            let cands: Vec<String> = serde_json::from_value(d["candidates"].clone()).unwrap();
            let t = cands
                .iter()
                .position(|c| *c == d["target"].as_str().unwrap())
                .unwrap();
            let r = rank_of_target(&scores, t);
            assert_eq!(d["rank"], r);
            ranks.push(r);
        }
        let want = serde_json::to_value(RankMetrics::mean_of_ranks(&ranks)).unwrap();
        assert_eq!(m["metrics"], want);
        // No memory: the ranking is a seeded tie-break, so HR@1 is near 1/10.
        let hr1 = m["metrics"]["HR@1"].as_f64().unwrap();
        assert!(hr1 < 0.5, "{hr1}");

        let report = read(&a.join("report.md"));
        assert!(report.contains("| `no-memory` |"));
        assert!(report.contains("plot_metrics.svg"));
        assert!(read(&a.join("plot_metrics.svg")).starts_with("<svg"));

        let c = compare_runs(
            &a.join("no-memory"),
            &b.join("no-memory"),
            &BootstrapConfig::default(),
        )
        .unwrap();
        assert_eq!(c.common_users, 30);
        assert!(c
            .metrics
            .iter()
            .all(|(_, ci)| ci.delta == 0.0 && ci.ci_low == 0.0));
        assert!(comparison_table(&c).contains("NDCG@10"));
    }
}

#[test]
fn bad_policy_and_bad_per_user_files_are_clear_errors() {
    let data = synthetic_dataset(5, 30, 6, 3);
    let tmp = tempfile::tempdir().unwrap();
    let config = EvalConfig {
        policies: vec!["no-such-policy".into()],
        ..EvalConfig::default()
    };
    let hub_for = |_: &PolicySpec| Ok(Arc::new(LlmHub::offline()));
    let err = run_eval(
        &config,
        RunInputs {
            dataset: &data,
            data_sha256: BTreeMap::new(),
            embedder: Arc::new(evomem_embed::HashingEmbedder::new(16)),
            embedder_notice: None,
            hub_for: &hub_for,
            embed_cache: None,
        },
        tmp.path(),
        &|_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("no-such-policy"), "{err}");

    let dir = tmp.path().join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("per_user.jsonl"), "{\"user\":\"1\"}\n").unwrap();
    let err = compare_runs(&dir, &dir, &BootstrapConfig::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("per_user.jsonl:1"), "{msg}");
}

#[test]
fn embedding_cache_is_reported_by_the_run() {
    let data = synthetic_dataset(8, 30, 6, 3);
    let tmp = tempfile::tempdir().unwrap();
    let inner: Arc<dyn evomem_core::Embedder> = Arc::new(evomem_embed::HashingEmbedder::new(32));
    let cache = Arc::new(
        evomem_embed::CachedEmbedder::open(inner, &tmp.path().join("cache.sqlite")).unwrap(),
    );
    let config = EvalConfig {
        data: "synthetic".into(),
        policies: vec!["no-memory".into()],
        ..EvalConfig::default()
    };
    let hub_for = |_: &PolicySpec| Ok(Arc::new(LlmHub::offline()));
    let mut lines = Vec::new();
    for run in ["cold", "warm"] {
        let out = tmp.path().join(run);
        let s = run_eval(
            &config,
            RunInputs {
                dataset: &data,
                data_sha256: BTreeMap::new(),
                embedder: cache.clone(),
                embedder_notice: None,
                hub_for: &hub_for,
                embed_cache: Some(&cache),
            },
            &out,
            &|_| {},
        )
        .unwrap();
        let line = s.embed_cache.unwrap();
        assert!(read(&out.join("report.md")).contains(&format!("## Embedding cache\n\n{line}")));
        let j: serde_json::Value =
            serde_json::from_str(&read(&out.join("embed-cache.json"))).unwrap();
        lines.push((j["hits"].as_u64().unwrap(), j["misses"].as_u64().unwrap()));
    }
    // The counters are cumulative: the cold run embeds every text once
    // (repeats within it, e.g. the drift terciles re-reading item texts, are
    // hits); the warm run embeds nothing new.
    assert!(lines[0].1 > 0, "{lines:?}");
    assert_eq!(lines[1].1, lines[0].1, "{lines:?}");
    assert!(lines[1].0 > lines[0].0, "{lines:?}");
}

/// MARS writes memory; run it through `run_eval` with one op-log format.
fn eval_mars(data: &Dataset, format: OpsLogFormat, out: &Path) {
    let config = EvalConfig {
        data: "synthetic".into(),
        policies: vec!["mars".into()],
        ops_log_format: format,
        ..EvalConfig::default()
    };
    let hub_for = |_: &PolicySpec| Ok(Arc::new(LlmHub::offline()));
    run_eval(
        &config,
        RunInputs {
            dataset: data,
            data_sha256: BTreeMap::new(),
            embedder: Arc::new(evomem_embed::HashingEmbedder::new(32)),
            embedder_notice: None,
            hub_for: &hub_for,
            embed_cache: None,
        },
        out,
        &|_| {},
    )
    .unwrap();
}

fn replay_from_disk(dir: &PolicyDir) -> (Vec<LoggedOp>, MemoryState) {
    let mut ops = Vec::new();
    dir.for_each_op(
        |_| true,
        |lo| {
            ops.push(lo);
            Ok(())
        },
    )
    .unwrap();
    let mut state = MemoryState::new();
    for lo in &ops {
        state.apply(&lo.op, lo.provenance.logical_time).unwrap();
    }
    (ops, state)
}

#[test]
fn op_log_on_disk_replays_to_the_live_state_in_both_formats() {
    let data = synthetic_dataset(12, 40, 8, 3);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");

    // The live state of the same policy on the same plan.
    let embedder: Arc<dyn evomem_core::Embedder> = Arc::new(evomem_embed::HashingEmbedder::new(32));
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let decider = Decider::new(&plan, embedder.clone()).unwrap();
    let hub = Arc::new(LlmHub::offline());
    let spec = PolicySpec::parse("mars").unwrap();
    let deps = PolicyDeps {
        embedder,
        llm: hub.clone(),
        seed: ProtocolConfig::default().seed,
    };
    let mut policy = registry::build(&spec, &deps).unwrap();
    let live = run_policy(&plan, policy.as_mut(), "mars", &decider, &hub, &|_| {}).unwrap();
    assert!(
        live.state.len() > 10,
        "mars wrote {} records",
        live.state.len()
    );
    // The log on disk drops embedding vectors (model id and dimension stay).
    let expected: Vec<MemoryRecord> = live
        .state
        .iter_all()
        .cloned()
        .map(|mut r| {
            if let Some(e) = r.embedding.as_mut() {
                e.vector.clear();
            }
            r
        })
        .collect();

    eval_mars(&data, OpsLogFormat::Zst, &out);
    let dir = RunDir::new(&out).policy("mars");
    assert_eq!(dir.ops_file(), dir.file("ops.jsonl.zst"));
    let (zst_ops, zst_state) = replay_from_disk(&dir);
    assert_eq!(zst_ops.len(), live.ops.len());
    let replayed: Vec<MemoryRecord> = zst_state.iter_all().cloned().collect();
    assert_eq!(
        replayed, expected,
        "replaying ops.jsonl.zst differs from the live state"
    );
    let zst_metrics = read_bytes(&dir.file("metrics.json"));

    // The same folder again with plain JSON lines: the stale compressed log
    // goes, the plain one holds the same ops, and no result changes.
    eval_mars(&data, OpsLogFormat::Jsonl, &out);
    assert!(
        !dir.file("ops.jsonl.zst").exists(),
        "a stale ops.jsonl.zst was left"
    );
    assert_eq!(dir.ops_file(), dir.file("ops.jsonl"));
    let (plain_ops, plain_state) = replay_from_disk(&dir);
    assert_eq!(plain_ops, zst_ops);
    assert_eq!(
        plain_state.iter_all().cloned().collect::<Vec<_>>(),
        expected
    );
    assert_eq!(read_bytes(&dir.file("metrics.json")), zst_metrics);
    let config: serde_json::Value = serde_json::from_str(&read(&dir.file("config.json"))).unwrap();
    assert_eq!(config["ops_log_format"], "jsonl");
}
