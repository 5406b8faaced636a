//! The `evomem` binary end to end on a small generated RecBole dataset:
//! tuning on validation targets with cost estimates, and a bad flag value.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

/// The item user `u` rates at `step` in [`toy_recbole`].
fn toy_item(u: usize, step: usize) -> usize {
    (u * 3 + step * 5 + step * step) % 20
}

/// 12 users × 8 interactions over 20 items with genres and years, written as
/// RecBole atomic files under `dir/toy/`.
fn toy_recbole(dir: &Path) -> std::path::PathBuf {
    let data = dir.join("toy");
    std::fs::create_dir_all(&data).unwrap();
    let genres = ["Action", "Comedy", "Drama", "Horror"];
    let mut item =
        String::from("item_id:token\tmovie_title:token_seq\tclass:token_seq\trelease_year:token\n");
    for i in 0..20 {
        item.push_str(&format!(
            "i{i}\tFilm {i}\t{} {}\t{}\n",
            genres[i % 4],
            genres[(i / 4) % 4],
            1980 + i
        ));
    }
    std::fs::write(data.join("toy.item"), item).unwrap();
    let mut inter = String::from("user_id:token\titem_id:token\trating:float\ttimestamp:float\n");
    let mut t = 0;
    for step in 0..8 {
        for u in 0..12 {
            let i = toy_item(u, step);
            inter.push_str(&format!("u{u}\ti{i}\t{}\t{t}\n", 3 + (u + step) % 3));
            t += 1;
        }
    }
    std::fs::write(data.join("toy.inter"), inter).unwrap();
    data
}

fn evomem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_evomem"))
}

/// `evomem eval` on `toy_recbole` data in `tmp` with the hashing embedder
/// (no model folder) and no embedding cache, plus `extra` flags; asserts
/// success and returns the run folder and stderr.
fn eval_toy(tmp: &Path, policies: &str, extra: &[&str]) -> (std::path::PathBuf, String) {
    let (ok, stderr, out) = eval_toy_with(tmp, None, policies, extra);
    assert!(ok, "{stderr}");
    (out, stderr)
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Run `evomem` with `args` on the run folder `run`, expect success, return stdout.
fn succeeds(args: &[&str], run: &Path) -> String {
    let res = evomem().args(args).arg("--run").arg(run).output().unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    String::from_utf8_lossy(&res.stdout).into_owned()
}

/// Run `evomem` with `args` on the run folder `run`, expect failure, return stderr.
fn fails(args: &[&str], run: &Path) -> String {
    let res = evomem().args(args).arg("--run").arg(run).output().unwrap();
    assert!(!res.status.success());
    String::from_utf8_lossy(&res.stderr).into_owned()
}

#[test]
fn eval_on_validation_targets_with_cost_estimates() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, stderr) = eval_toy(
        tmp.path(),
        "pop,mars",
        &["--target", "valid", "--llm-estimate"],
    );
    // stderr is a pipe here, so the progress bar is hidden; the per-policy
    // lines must still be printed.
    assert!(stderr.contains("done: pop in"), "{stderr}");
    assert!(stderr.contains("done: mars in"), "{stderr}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("target: validation interactions"),
        "{report}"
    );
    assert!(report.contains("Estimated model cost"), "{report}");
    let config = read_json(&out.join("config.json"));
    assert_eq!(config["target"], "valid");
    assert_eq!(config["llm_estimate"], true);
    let metrics = read_json(&out.join("mars/metrics.json"));
    assert_eq!(metrics["n_users"], 12);
    let extract = &metrics["llm"]["per_user_mean"]["per_role"]["mars_extract"];
    assert!(
        extract["est_prompt_tokens"].as_f64().unwrap() > 0.0,
        "{extract}"
    );
    assert_eq!(extract["calls"], 0.0);
    // Every decision ranks the validation item: the 7th of each user's 8.
    let per_user = std::fs::read_to_string(out.join("mars/per_user.jsonl")).unwrap();
    for line in per_user.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let u: usize = v["user"].as_str().unwrap()[1..].parse().unwrap();
        let expected = format!("i{}", toy_item(u, 6));
        assert_eq!(v["target"], expected.as_str(), "{line}");
    }
}

#[test]
fn bad_target_names_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let res = evomem()
        .args(["eval", "--data", "x", "--out"])
        .arg(tmp.path().join("run"))
        .args(["--target", "train"])
        .output()
        .unwrap();
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(err.contains("--target"), "{err}");
    assert!(!tmp.path().join("run").exists());
}

/// `--embedder` picks the embedder: `hashing` never opens the MiniLM
/// folder, `minilm` and `minilm-int8` do (a folder that cannot be loaded
/// is an error naming the embedder, not a silent fallback), and a bad value
/// is refused by name before anything runs.
#[test]
fn embedder_flag_picks_the_embedder_and_a_bad_value_names_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let res = evomem()
        .args(["eval", "--policy", "pop", "--data", "x", "--out"])
        .arg(tmp.path().join("run"))
        .args(["--embedder", "minilm-fp16"])
        .output()
        .unwrap();
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(err.contains("--embedder"), "{err}");
    assert!(err.contains("minilm-int8"), "lists the values: {err}");
    assert!(!tmp.path().join("run").exists());

    let data = toy_recbole(tmp.path());
    let models = tmp.path().join("models");
    std::fs::create_dir_all(models.join("all-MiniLM-L6-v2")).unwrap();
    let eval = |embedder: Option<&str>, out: &str| {
        let mut cmd = evomem();
        cmd.args(["eval", "--format", "recbole", "--embed-cache", "off"])
            .args(["--policy", "pop"])
            .arg("--data")
            .arg(&data)
            .arg("--models-dir")
            .arg(&models)
            .arg("--out")
            .arg(tmp.path().join(out));
        if let Some(e) = embedder {
            cmd.args(["--embedder", e]);
        }
        cmd.output().unwrap()
    };
    let res = eval(Some("hashing"), "hashing");
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let out = tmp.path().join("hashing");
    assert_eq!(read_json(&out.join("settings.json"))["embedder"], "hashing");
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["embedding"]["model"], "hash-v1-384");
    // Asked for int8 with no model folder at all: an error, never the
    // hashing fallback the default `minilm` takes.
    std::fs::remove_dir_all(models.join("all-MiniLM-L6-v2")).unwrap();
    let res = eval(Some("minilm-int8"), "int8-missing");
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(!res.status.success(), "int8 fell back: {err}");
    assert!(
        err.contains("loading the embedder `minilm-int8`") && err.contains("never falls back"),
        "{err}"
    );
    std::fs::create_dir_all(models.join("all-MiniLM-L6-v2")).unwrap();
    for (flag, name) in [(None, "minilm"), (Some("minilm-int8"), "minilm-int8")] {
        let res = eval(flag, name);
        assert!(!res.status.success(), "{name} loaded an empty folder");
        let err = String::from_utf8_lossy(&res.stderr);
        assert!(
            err.contains(&format!("loading the embedder `{name}`")),
            "{err}"
        );
    }
}

/// `bench embed --texts-out` writes the timed texts (the input of
/// `scripts/bench-torch-embed.py`) without a model folder or a measurement.
#[test]
fn bench_embed_texts_out_writes_the_timed_texts() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("texts.json");
    let res = evomem()
        .args([
            "bench",
            "embed",
            "--short",
            "3",
            "--long",
            "2",
            "--texts-out",
        ])
        .arg(&file)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let texts = read_json(&file);
    assert_eq!(texts["short"].as_array().unwrap().len(), 3);
    assert_eq!(texts["long"].as_array().unwrap().len(), 2);
    let (short, long) = evomem_embed::bench::timed_texts(3, 2);
    assert_eq!(texts["short"][0], short[0].as_str());
    assert_eq!(texts["long"][1], long[1].as_str());
}

#[test]
fn ops_log_off_skips_the_log_and_inspect_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, _) = eval_toy(tmp.path(), "mars,atomrec", &["--ops-log", "off"]);
    assert!(!out.join("mars/ops.jsonl.zst").exists());
    assert!(!out.join("mars/ops.jsonl").exists());
    assert!(out.join("mars/decisions.jsonl").exists());
    // The op counts still reach metrics.json.
    let metrics = read_json(&out.join("mars/metrics.json"));
    assert!(
        metrics["ops"]["total"].as_u64().unwrap() > 0,
        "{}",
        metrics["ops"]
    );
    let err = fails(&["inspect", "--user", "u1"], &out);
    assert!(
        err.contains("ops.jsonl") && err.contains("--ops-log off"),
        "{err}"
    );
    let err = fails(&["explain", "--user", "u1"], &out);
    assert!(err.contains("--ops-log off"), "{err}");
}

#[test]
fn dead_llm_server_fails_the_eval_instead_of_finishing_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let data = toy_recbole(tmp.path());
    let out = tmp.path().join("run");
    let res = evomem()
        .args(["eval", "--format", "recbole", "--embed-cache", "off"])
        .args(["--policy", "pop", "--llm", "openai:x@http://127.0.0.1:1/v1"])
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(&out)
        // No client retries, so the dead server answers at once (also
        // exercises the EVOMEM_<TABLE>__<KEY> layer).
        .env("EVOMEM_LLM__MAX_RETRIES", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(
        !res.status.success(),
        "a dead backend finished the run: {stderr}"
    );
    assert!(stderr.contains("in a row"), "{stderr}");
    assert!(!out.join("pop/metrics.json").exists());
}

/// A dead backend with fewer calls than the hub's consecutive-failure
/// breaker needs to trip (3 users, one rank call each, no retries): every
/// model run fell back, so the run must still exit non-zero.
#[test]
fn a_run_that_never_reached_its_model_fails_below_the_breaker() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, stderr, _) = eval_toy_with(
        tmp.path(),
        None,
        "pop",
        &["--users", "3", "--llm", "openai:x@http://127.0.0.1:1/v1"],
    );
    assert!(!ok, "a run that never reached its model exited 0: {stderr}");
    assert!(
        !stderr.contains("in a row"),
        "the breaker tripped: {stderr}"
    );
    assert!(stderr.contains("every model run of pop"), "{stderr}");
}

/// `evomem [--config FILE] eval` on `toy_recbole` data (hashing embedder, no embedding
/// cache, no HTTP retries) with an optional settings file; returns whether
/// it succeeded, its stderr and the run folder.
fn eval_toy_with(
    tmp: &Path,
    config: Option<&Path>,
    policies: &str,
    extra: &[&str],
) -> (bool, String, std::path::PathBuf) {
    let data = toy_recbole(tmp);
    let out = tmp.join("run");
    let mut cmd = evomem();
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let res = cmd
        .args(["eval", "--format", "recbole", "--embed-cache", "off"])
        .args(["--policy", policies])
        .args(extra)
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.join("no-models"))
        .arg("--out")
        .arg(&out)
        .env("EVOMEM_LLM__MAX_RETRIES", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr).into_owned();
    (res.status.success(), stderr, out)
}

/// A backend for one role, from `--llm-role` or from `[llm.roles]` in the
/// settings file, reaches that role only: pointed at a dead server it fails
/// a run that calls the role (MARS's `mars_extract`) and leaves a run that
/// does not (`pop`, all roles offline) alone; either way `settings.json`
/// records the per-role table.
#[test]
fn per_role_backend_from_flag_or_settings_file_reaches_only_that_role() {
    const DEAD: &str = "openai:m@http://127.0.0.1:9/v1";
    let flag = format!("mars_extract={DEAD}");
    let file_dir = tempfile::tempdir().unwrap();
    let cfg = file_dir.path().join("evomem.toml");
    std::fs::write(&cfg, format!("[llm.roles]\nmars_extract = \"{DEAD}\"\n")).unwrap();
    for (config, extra) in [
        (None, vec!["--llm-role", flag.as_str()]),
        (Some(cfg.as_path()), vec![]),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (ok, stderr, out) = eval_toy_with(tmp.path(), config, "pop", &extra);
        assert!(ok, "{stderr}");
        let settings = read_json(&out.join("settings.json"));
        assert_eq!(settings["llm"]["roles"]["mars_extract"], DEAD, "{settings}");
        assert_eq!(settings["llm"]["default"], "offline");

        let tmp = tempfile::tempdir().unwrap();
        let (ok, stderr, out) = eval_toy_with(tmp.path(), config, "mars", &extra);
        assert!(
            !ok,
            "a dead mars_extract backend finished the run: {stderr}"
        );
        assert!(stderr.contains("mars_extract"), "{stderr}");
        assert!(!out.join("mars/metrics.json").exists());
    }
}

#[test]
fn settings_layer_file_then_env_then_flags_and_are_written_with_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("evomem.toml");
    std::fs::write(
        &cfg,
        "[eval]\nnegatives = 4\nseed = 3\ntarget = \"valid\"\n",
    )
    .unwrap();
    let data = toy_recbole(tmp.path());
    let out = tmp.path().join("run");
    let res = evomem()
        .args(["--config"])
        .arg(&cfg)
        .args(["eval", "--format", "recbole", "--embed-cache", "off"])
        .args(["--policy", "pop", "--negatives", "5"])
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(&out)
        .env("EVOMEM_EVAL__SEED", "7")
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let settings = read_json(&out.join("settings.json"));
    assert_eq!(settings["eval"]["negatives"], 5, "flag over file");
    assert_eq!(settings["eval"]["seed"], 7, "env over file");
    assert_eq!(settings["eval"]["target"], "valid", "file over default");
    let config = read_json(&out.join("config.json"));
    assert_eq!(config["seed"], 7);
    assert_eq!(config["negatives"], 5);
    // A bad key in the file is an error naming the file and the key.
    std::fs::write(&cfg, "[eval]\nnegativez = 4\n").unwrap();
    let res = evomem()
        .args(["--config"])
        .arg(&cfg)
        .args(["eval", "--policy", "pop", "--data", "x", "--out", "y"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(!res.status.success());
    assert!(
        stderr.contains("evomem.toml") && stderr.contains("negativez"),
        "{stderr}"
    );
}

#[test]
fn inspect_and_explain_find_their_policy_by_capability_not_folder_name() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, _) = eval_toy(tmp.path(), "pop,mars,atomrec", &[]);
    // Folder names say nothing: rename both.
    std::fs::rename(out.join("mars"), out.join("first")).unwrap();
    std::fs::rename(out.join("atomrec"), out.join("second")).unwrap();
    let stdout = succeeds(&["inspect", "--user", "u1"], &out);
    assert!(stdout.contains("first"), "{stdout}");
    assert!(stdout.contains("signals observed"), "{stdout}");
    let stdout = succeeds(&["explain", "--user", "u1", "--all"], &out);
    assert!(stdout.contains("second"), "{stdout}");
    assert!(stdout.contains("-hop evidence paths"), "{stdout}");
}

#[test]
fn inspect_and_explain_read_a_plain_op_log_and_name_a_truncated_compressed_one() {
    let tmp_zst = tempfile::tempdir().unwrap();
    let tmp_plain = tempfile::tempdir().unwrap();
    let (zst, _) = eval_toy(tmp_zst.path(), "mars,atomrec", &[]);
    let (plain, _) = eval_toy(
        tmp_plain.path(),
        "mars,atomrec",
        &["--ops-log-format", "jsonl"],
    );
    for p in ["mars", "atomrec"] {
        assert!(zst.join(p).join("ops.jsonl.zst").exists());
        assert!(!zst.join(p).join("ops.jsonl").exists());
        assert!(plain.join(p).join("ops.jsonl").exists());
        assert!(!plain.join(p).join("ops.jsonl.zst").exists());
    }
    let settings = read_json(&plain.join("settings.json"));
    assert_eq!(settings["eval"]["ops_log_format"], "jsonl");
    // Both logs hold the same ops: the commands print the same, up to the
    // path of the file they read.
    for cmd in [
        &["inspect", "--user", "u1", "--all"][..],
        &["explain", "--user", "u1", "--all"][..],
    ] {
        let a = succeeds(cmd, &zst).replace(&zst.display().to_string(), "RUN");
        let b = succeeds(cmd, &plain).replace(&plain.display().to_string(), "RUN");
        assert_eq!(a.replace("ops.jsonl.zst", "ops.jsonl"), b, "{cmd:?}");
        assert!(a.lines().count() > 3, "{a}");
    }
    let log = zst.join("mars/ops.jsonl.zst");
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() / 2]).unwrap();
    let err = fails(&["inspect", "--user", "u1"], &zst);
    assert!(
        err.contains(&log.display().to_string())
            && err.contains("truncated or corrupt zstd stream"),
        "{err}"
    );
}

/// Three DB tasks in LifelongAgentBench's format (Python-literal fields)
/// over one small table: two queries and an insert whose md5 follows the
/// benchmark's table-hash rule.
fn toy_db_tasks(dir: &Path) -> std::path::PathBuf {
    let table = "{'name': 'pets', 'column_info_list': [{'name': 'id', 'type': 'INT'}, {'name': 'name', 'type': 'TEXT'}, {'name': 'age', 'type': 'INT'}], 'row_list': [[1, 'Rex', 5], [2, 'Tom', 2], [3, 'Kit', 4]]}";
    let task = |i: usize, instruction: &str, answer: &str, skills: &str| {
        serde_json::json!({
            "sample_index": i,
            "instruction": instruction,
            "answer_info": answer,
            "table_info": table,
            "skill_list": skills,
        })
    };
    let tasks = serde_json::json!({
        "0": task(0, "List the names of pets whose age is greater than 3.",
            "{'direct': [['Rex'], ['Kit']], 'md5': None, 'sql': 'SELECT name FROM pets WHERE age > 3;'}",
            "['select', 'where_single_condition']"),
        "1": task(1, "How many pets are there in the pets table?",
            "{'direct': [[3]], 'md5': None, 'sql': 'SELECT COUNT(*) FROM pets;'}",
            "['select']"),
        "2": task(2, "Insert a new pet with id 4, name 'Bo' and age 1 into the pets table.",
            "{'direct': None, 'md5': '5773514080e6bfd7b45d27bddf5c2f0e', 'sql': \"INSERT INTO pets (id, name, age) VALUES (4, 'Bo', 1);\"}",
            "['insert']"),
    });
    let p = dir.join("db_tasks.json");
    std::fs::write(&p, tasks.to_string()).unwrap();
    p
}

#[test]
fn arena_lifelong_and_bandit_write_their_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let data = toy_db_tasks(tmp.path());
    let out = tmp.path().join("ll");
    let res = evomem()
        .args([
            "arena",
            "lifelong",
            "--policy",
            "romerl,memrl[cap=4]",
            "--epochs",
            "2",
            "--seeds",
            "1",
        ])
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "{stderr}");
    let report = read_json(&out.join("lifelong.json"));
    assert_eq!(report["judge"]["passed"], 3, "{}", report["judge"]);
    assert_eq!(report["runs"].as_array().unwrap().len(), 3, "no-memory + 2");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| romerl |") && md.contains("| no-memory |"));
    assert!(out.join("plot_memories_per_task.svg").is_file());

    let out = tmp.path().join("bandit");
    let res = evomem()
        .args(["arena", "bandit", "--seeds", "20", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let b = read_json(&out.join("bandit.json"));
    assert_eq!(b["variants"].as_array().unwrap().len(), 3);
    assert!(out.join("bandit_reward.svg").is_file());
}

#[test]
fn arena_lifelong_refuses_a_ranking_policy_and_names_the_bad_task_field() {
    let tmp = tempfile::tempdir().unwrap();
    let data = toy_db_tasks(tmp.path());
    let run = |data: &Path, policy: &str| {
        evomem()
            .args(["arena", "lifelong", "--policy", policy, "--epochs", "1"])
            .arg("--data")
            .arg(data)
            .arg("--models-dir")
            .arg(tmp.path().join("no-models"))
            .arg("--out")
            .arg(tmp.path().join("out"))
            .output()
            .unwrap()
    };
    let res = run(&data, "pop");
    assert!(!res.status.success());
    assert!(String::from_utf8_lossy(&res.stderr).contains("does not act on tasks"));
    let text = std::fs::read_to_string(&data)
        .unwrap()
        .replace("[2, 'Tom', 2]", "[2, 'Tom']");
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, text).unwrap();
    let res = run(&bad, "memrl");
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        err.contains("bad.json") && err.contains("sample 0") && err.contains("row_list[1]"),
        "{err}"
    );
}

#[test]
fn arena_generation_and_delayed_write_their_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("gen");
    let res = evomem()
        .args([
            "arena",
            "generation",
            "--episodes",
            "2",
            "--seeds",
            "1",
            "--learn",
            "40",
            "--future",
            "6",
            "--methods",
            "tide,tide[cf=false]",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let g = read_json(&out.join("generation.json"));
    let methods: Vec<&str> = g["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert!(methods.contains(&"tide") && methods.contains(&"tide[cf=false]"));
    assert!(
        methods.contains(&"tide[edit=none]"),
        "static reference runs"
    );
    assert!(out.join("report.md").is_file() && out.join("plot_memory.svg").is_file());

    let data = toy_recbole(tmp.path());
    let out = tmp.path().join("delayed");
    let res = evomem()
        .args([
            "arena",
            "delayed",
            "--delays",
            "0,2",
            "--meg-delay",
            "2",
            "--methods",
            "static,retrieval,tide",
            "--resamples",
            "50",
        ])
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "{stderr}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("| tide |") && md.contains("| retrieval |"),
        "{md}"
    );
    assert!(out.join("delayed.json").is_file());
    assert!(out.join("delayed_mae.svg").is_file());

    // A delay list the report cannot use is an error naming the flag.
    let res = evomem()
        .args(["arena", "delayed", "--delays", "0,2", "--meg-delay", "7"])
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(tmp.path().join("bad"))
        .output()
        .unwrap();
    assert!(!res.status.success());
    assert!(
        String::from_utf8_lossy(&res.stderr).contains("meg-delay"),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
}

/// A model that answers every call with text that is not the role's JSON:
/// every run falls back to the offline algorithm, the run says so loudly and
/// exits non-zero (its figures are wholly the offline roles'), keeping the
/// run folder for diagnosis.
#[cfg(feature = "http")]
#[test]
fn a_run_whose_model_answers_fall_back_says_so() {
    let server = evomem_llm::fixture::FixtureServer::start().unwrap();
    server.push((0..200).map(|_| evomem_llm::fixture::Reply::Content("I think so.".into())));
    let spec = format!("openai:m@{}", server.base_url());
    let tmp = tempfile::tempdir().unwrap();
    let (ok, stderr, out) = eval_toy_with(tmp.path(), None, "no-memory", &["--llm", &spec]);
    assert!(!ok, "a run with no usable model answer exited 0: {stderr}");
    assert!(stderr.contains("every model run of no-memory"), "{stderr}");
    assert!(server.request_count() > 0);
    assert!(
        stderr.contains("no-memory: ")
            && stderr.contains("model runs fell back to the offline algorithm"),
        "{stderr}"
    );
    assert!(stderr.contains("malformed_answer"), "{stderr}");
    assert!(stderr.contains("all of its figures"), "{stderr}");
    let m = read_json(&out.join("no-memory/metrics.json"));
    assert!(m["llm"]["per_role"]["rank"]["fallbacks"].as_u64().unwrap() > 0);

    // An offline run prints no such line.
    let tmp = tempfile::tempdir().unwrap();
    let (ok, stderr, _) = eval_toy_with(tmp.path(), None, "no-memory", &[]);
    assert!(ok && !stderr.contains("fell back"), "{stderr}");
}

/// `evomem serve keys list|rotate|revoke`, `serve backup` and `serve
/// restore` end to end: a rotated key replaces the old one under the same
/// id's tenant and label, a revoked key leaves the list, and a backup
/// restored into a fresh folder passes `serve check`; a `serve` flag the
/// subcommand does not use is refused, naming it.
#[test]
fn serve_keys_backup_and_restore_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // The flags each subcommand uses: a flag it does not use is refused.
    let serve = |args: &[&str]| {
        let mut c = evomem();
        c.arg("serve");
        if args[0] != "restore" {
            c.arg("--data-dir").arg(&data);
        }
        if args[0] == "check" {
            c.args(["--embedder", "hashing"]);
        }
        let res = c.args(args).output().unwrap();
        let out = String::from_utf8_lossy(&res.stdout).into_owned();
        let err = String::from_utf8_lossy(&res.stderr).into_owned();
        (res.status.success(), out, err)
    };
    let (ok, k1, e) = serve(&["keys", "add", "--tenant", "acme", "--label", "ci"]);
    assert!(ok, "{e}");
    let (ok, _, e) = serve(&["keys", "add", "--tenant", "acme", "--label", "prod"]);
    assert!(ok, "{e}");
    let (ok, list, e) = serve(&["keys", "list"]);
    assert!(ok, "{e}");
    let ids: Vec<&str> = list
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{list}");
    assert!(!list.contains(k1.trim()), "the list shows a key: {list}");
    let (ok, k3, e) = serve(&["keys", "rotate", "--id", &ids[0][..8]]);
    assert!(ok && k3.trim().starts_with("evk_"), "{e}");
    let (ok, _, e) = serve(&["keys", "revoke", "--id", ids[1]]);
    assert!(ok, "{e}");
    let (ok, list, _) = serve(&["keys", "list"]);
    assert!(ok);
    assert_eq!(list.lines().count(), 2, "one key left: {list}");
    assert!(list.contains("ci") && !list.contains("prod"), "{list}");
    let (ok, _, e) = serve(&["keys", "revoke", "--id", "zz"]);
    assert!(!ok && e.contains("at least 8 hex digits"), "{e}");
    let (ok, out, e) = serve(&["check"]);
    assert!(ok && out.contains("tenant acme: ok"), "{out}{e}");
    let backup = tmp.path().join("backup");
    let (ok, out, e) = serve(&["backup", "--out", backup.to_str().unwrap()]);
    assert!(ok && out.contains("backed up tenant acme"), "{out}{e}");
    let restored = tmp.path().join("restored");
    let (ok, out, e) = serve(&[
        "restore",
        "--from",
        backup.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(ok && out.contains("restored tenant acme"), "{out}{e}");
    // The old `--data` still works, with a notice; the folder must be named.
    let old_name = tmp.path().join("restored-old-name");
    let (ok, out, e) = serve(&[
        "restore",
        "--from",
        backup.to_str().unwrap(),
        "--data",
        old_name.to_str().unwrap(),
    ]);
    assert!(ok && out.contains("restored tenant acme"), "{out}{e}");
    assert!(e.contains("--data is deprecated; use --data-dir"), "{e}");
    let (ok, _, e) = serve(&["restore", "--from", backup.to_str().unwrap()]);
    assert!(
        !ok && e.contains("name the folder to restore into with --data-dir"),
        "{e}"
    );
    let (ok, _, e) = serve(&["keys", "--bind", "0.0.0.0:1", "list"]);
    assert!(!ok && e.contains("serve keys does not use --bind"), "{e}");
    let (ok, _, e) = serve(&["backup", "--embedder", "minilm", "--out", "x"]);
    assert!(
        !ok && e.contains("serve backup does not use --embedder"),
        "{e}"
    );
    let res = evomem()
        .args([
            "serve",
            "restore",
            "--data-dir",
            "d",
            "--from",
            "b",
            "--data",
            "c",
        ])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&res.stderr);
    assert!(
        !res.status.success() && e.contains("--data is the old name of --data-dir"),
        "{e}"
    );
    let res = evomem()
        .args(["serve", "--embedder", "hashing", "--data-dir"])
        .arg(&restored)
        .arg("check")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&res.stdout);
    assert!(
        res.status.success() && out.contains("tenant acme: ok"),
        "{out}"
    );
}

/// `evomem serve reembed` from the command line: the target must be
/// named and be an embedder (the flag named in the refusal); a target the
/// machine cannot load is refused rather than replaced by hashing, as is
/// a service asked for that embedder; a new
/// folder without a model folder is on the hashing embedder, written to
/// its `embedder.json`, and a re-embed to it finds every tenant already
/// there and checks them. (The job itself: evomem-serve's
/// `tests/it/reembed.rs`.)
#[test]
fn serve_reembed_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let serve = |args: &[&str]| {
        let res = evomem()
            .env("EVOMEM_MODELS_DIR", tmp.path().join("no-models"))
            .arg("serve")
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&res.stdout).into_owned();
        let err = String::from_utf8_lossy(&res.stderr).into_owned();
        (res.status.success(), out, err)
    };
    let (ok, _, e) = serve(&["keys", "add", "--tenant", "acme"]);
    assert!(ok, "{e}");
    let (ok, _, e) = serve(&["reembed"]);
    assert!(!ok && e.contains("--embedder"), "{e}");
    let (ok, _, e) = serve(&["reembed", "--embedder", "bert"]);
    assert!(
        !ok && e.contains("--embedder") && e.contains("`bert`"),
        "{e}"
    );
    let (ok, _, e) = serve(&["reembed", "--embedder", "minilm"]);
    assert!(!ok && e.contains("is the model folder missing"), "{e}");
    // The service asked for a MiniLM it cannot load is refused too, not
    // started on hashing.
    let (ok, _, e) = serve(&["--embedder", "minilm", "check"]);
    assert!(!ok && e.contains("is the model folder missing"), "{e}");
    let manifest = std::fs::read_to_string(data.join("embedder.json")).unwrap();
    assert!(manifest.contains("\"hashing\""), "{manifest}");
    let (ok, out, e) = serve(&["reembed", "--embedder", "hashing"]);
    assert!(ok, "{e}");
    assert!(out.contains("tenant acme: already on hash-v1-384"), "{out}");
    assert!(out.contains("tenant acme: ok"), "{out}");
}

/// `evomem ui` serves a run folder on 127.0.0.1 (port 0: it prints the
/// address), answers its JSON API, and refuses a folder that is no run.
#[test]
fn ui_serves_a_run_folder_and_refuses_a_folder_without_policies() {
    use std::io::{BufRead, Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let (out, _) = eval_toy(tmp.path(), "mars", &[]);
    let mut child = evomem()
        .args(["ui", "--bind", "127.0.0.1:0", "--run"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("evomem ui: http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("no address printed: {line:?}"))
        .to_string();
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let mode = get("/api/mode");
    let users = get("/api/runs/0/policies/mars/users?limit=2");
    let page = get("/");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        mode.starts_with("HTTP/1.0 200") && mode.contains("\"run\""),
        "{mode}"
    );
    assert!(users.contains("\"total\":12"), "{users}");
    assert!(page.contains("evomem inspector"), "{page}");

    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let res = evomem()
        .args(["ui", "--port", "0", "--run"])
        .arg(&empty)
        .output()
        .unwrap();
    assert!(!res.status.success());
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(stderr.contains("no policy folder"), "{stderr}");

    // `--port` is the deprecated spelling: a notice, then the same checks;
    // an address that is not loopback is refused naming the flag.
    let res = evomem()
        .args(["ui", "--port", "0", "--run"])
        .arg(&empty)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(
        stderr.contains("--port is deprecated") && stderr.contains("no policy folder"),
        "{stderr}"
    );
    let res = evomem()
        .args(["ui", "--bind", "0.0.0.0:0", "--run"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!res.status.success());
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(
        stderr.contains("--bind 0.0.0.0:0") && stderr.contains("loopback"),
        "{stderr}"
    );
}

/// `bench train --same-epochs` compares with RecBole's run: asked for
/// with `--no-recbole` it is refused with a message that says why, and
/// `--no-recbole` with `--python` is a contradiction clap refuses.
#[test]
fn bench_train_refuses_same_epochs_without_recbole() {
    let tmp = tempfile::tempdir().unwrap();
    let out = evomem()
        .args(["bench", "train", "--data"])
        .arg(tmp.path())
        .args(["--out"])
        .arg(tmp.path().join("out"))
        .args(["--no-recbole", "--same-epochs"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--same-epochs") && err.contains("RecBole"),
        "{err}"
    );
    let out = evomem()
        .args(["bench", "train", "--data"])
        .arg(tmp.path())
        .args(["--out"])
        .arg(tmp.path().join("out"))
        .args(["--no-recbole", "--python", "/usr/bin/python3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--no-recbole") || err.contains("--python"),
        "{err}"
    );
}

/// `evomem embed` uses the `embedder` setting like `eval` (issue 59): the
/// environment's `hashing` is used, a value naming no embedder is refused
/// with the key's name, and `--embedder` overrides the setting.
#[test]
fn embed_reads_the_embedder_setting_and_refuses_unknown_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let embed = |env: Option<&str>, flags: &[&str]| {
        let mut c = evomem();
        c.current_dir(tmp.path())
            .env_remove("EVOMEM_CONFIG")
            .args(["embed", "jazz records", "jazz albums"])
            .args(flags)
            .arg("--models-dir")
            .arg(tmp.path().join("no-models"));
        match env {
            Some(v) => c.env("EVOMEM_EMBEDDER", v),
            None => c.env_remove("EVOMEM_EMBEDDER"),
        };
        let out = c.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = embed(Some("hashing"), &[]);
    assert!(ok, "{err}");
    assert!(err.contains("model: hash"), "{err}");
    assert!(
        !err.contains("falling back") && !err.contains("fallback"),
        "no MiniLM was asked for: {err}"
    );
    let (ok, err) = embed(Some("nosuch"), &[]);
    assert!(!ok, "an unknown embedder must fail: {err}");
    assert!(err.contains("embedder") && err.contains("nosuch"), "{err}");
    // The flag wins over the setting.
    let (ok, err) = embed(Some("nosuch"), &["--embedder", "hashing"]);
    assert!(ok, "{err}");
    // int8 without a model folder: an error, as in `eval`, never the
    // hashing fallback the default `minilm` takes (with its notice).
    let (ok, err) = embed(None, &["--embedder", "minilm-int8"]);
    assert!(!ok, "int8 fell back: {err}");
    assert!(err.contains("loading the embedder `minilm-int8`"), "{err}");
    let (ok, err) = embed(None, &[]);
    assert!(ok, "{err}");
    assert!(
        err.contains("model: hash"),
        "the fallback is the hashing embedder: {err}"
    );
}

/// A setting the user set that the running command does not read is named
/// in one notice on stderr, with where it was set (issue 59): `embed`
/// reads no `[serve]` or `[eval]` key, `serve keys` reads `serve.data_dir`
/// but not `serve.bind`, and `serve` itself reads both (and `eval.seed`).
#[test]
fn a_setting_the_command_does_not_read_is_named_in_a_notice() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("shared.toml");
    std::fs::write(&file, "[serve]\nbind = \"127.0.0.1:9\"\n[eval]\nseed = 3\n").unwrap();
    let f = file.display().to_string();
    let run = |args: &[&str]| {
        let out = evomem()
            .current_dir(tmp.path())
            .arg("--config")
            .arg(&file)
            .args(args)
            .env("EVOMEM_SERVE__BIND", "127.0.0.1:5")
            .env("EVOMEM_SERVE__DATA_DIR", tmp.path().join("data"))
            .env("EVOMEM_EMBEDDER", "hashing")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let notice = |key: &str, from: &str, command: &str| {
        format!(
            "notice: setting {key} (from {from}) is not used by this command (evomem {command})"
        )
    };

    let (ok, stdout, stderr) = run(&["embed", "a", "b"]);
    assert!(ok, "{stderr}");
    assert!(!stdout.contains("notice"), "notices go to stderr: {stdout}");
    for line in [
        notice("serve.bind", &format!("{f}, EVOMEM_SERVE__BIND"), "embed"),
        notice("serve.data_dir", "EVOMEM_SERVE__DATA_DIR", "embed"),
        notice("eval.seed", &f, "embed"),
    ] {
        assert!(
            stderr.lines().any(|l| l == line),
            "{line:?} not in {stderr}"
        );
    }
    assert!(
        !stderr.contains("setting embedder"),
        "embed reads it: {stderr}"
    );

    let (ok, _, stderr) = run(&["serve", "keys", "list"]);
    assert!(ok, "{stderr}");
    let line = notice(
        "serve.bind",
        &format!("{f}, EVOMEM_SERVE__BIND"),
        "serve keys list",
    );
    assert!(
        stderr.lines().any(|l| l == line),
        "{line:?} not in {stderr}"
    );
    assert!(!stderr.contains("setting serve.data_dir"), "{stderr}");

    // `serve` reads them all; without a key it refuses to start.
    let (ok, _, stderr) = run(&["serve"]);
    assert!(!ok && stderr.contains("no API keys"), "{stderr}");
    for key in ["serve.bind", "serve.data_dir", "eval.seed"] {
        assert!(!stderr.contains(&format!("setting {key} ")), "{stderr}");
    }
    assert!(
        stderr.contains(&notice("embedder", "EVOMEM_EMBEDDER", "serve")),
        "serve's embedder is serve.embedder: {stderr}"
    );
}

/// A setting a flag overrides is said, as is an `EVOMEM_*` variable that is
/// no setting (a misspelling, with the variable it resembles); neither
/// stops the command.
#[test]
fn an_overridden_setting_and_a_misspelt_variable_are_said() {
    let tmp = tempfile::tempdir().unwrap();
    let out = evomem()
        .current_dir(tmp.path())
        .args(["embed", "--embedder", "hashing", "a", "b"])
        .env("EVOMEM_EMBEDDER", "minilm")
        .env("EVOMEM_THREDS", "2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for line in [
        "notice: setting embedder (from EVOMEM_EMBEDDER) is overridden by --embedder on this run",
        "notice: variable EVOMEM_THREDS is not a setting evomem reads (did you mean EVOMEM_THREADS? docs/settings-reference.md)",
    ] {
        assert!(stderr.lines().any(|l| l == line), "{line:?} not in {stderr}");
    }
}

/// `evomem mcp --data-dir` over stdio: every line it writes to stdout is a
/// JSON-RPC message (notices and logs go to stderr, even with
/// `EVOMEM_LOG=info` and a setting `mcp` does not read), it answers `initialize` and `tools/list`, and a
/// tool call's memory is in the folder after it exits. `--url` without
/// `EVOMEM_API_KEY` is refused, naming the variable.
#[test]
fn mcp_on_stdio_writes_only_protocol_messages_to_stdout() {
    use std::io::Write as _;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut child = evomem()
        .args(["mcp", "--embedder", "hashing", "--data-dir"])
        .arg(&data)
        .env("EVOMEM_LOG", "info")
        // Not read by `mcp`: a notice, on stderr.
        .env("EVOMEM_SERVE__BIND", "127.0.0.1:9")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let msgs = [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "cli-test", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "add_memories",
            "arguments": {"user_id": "u1", "memories": [{"text": "likes green tea"}]}}}),
    ];
    {
        let mut stdin = child.stdin.take().unwrap();
        for m in &msgs {
            writeln!(stdin, "{m}").unwrap();
        }
        // Let the call finish before stdin closes (the server stops on EOF).
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON on stdout: {l:?} ({e})"))
        })
        .collect();
    assert!(lines.iter().all(|v| v["jsonrpc"] == "2.0"), "{stdout}");
    let by_id = |id: u64| lines.iter().find(|v| v["id"] == id).cloned().unwrap();
    assert_eq!(
        by_id(1)["result"]["serverInfo"]["name"],
        "evomem",
        "{stderr}"
    );
    assert_eq!(by_id(2)["result"]["tools"].as_array().unwrap().len(), 11);
    assert_eq!(by_id(3)["result"]["isError"], false, "{stderr}");
    assert!(stderr.contains("serving tenant local"), "{stderr}");
    assert!(
        stderr.contains("notice: setting serve.bind (from EVOMEM_SERVE__BIND) is not used by this command (evomem mcp)"),
        "{stderr}"
    );
    // The memory is stored in the folder: `serve check` finds it.
    let keys = evomem()
        .args(["serve", "keys", "add", "--tenant", "local", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(keys.status.success());
    let check = evomem()
        .args(["serve", "--embedder", "hashing", "check", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(said.contains("tenant local: ok (1 memories"), "{said}");

    let refused = evomem()
        .args(["mcp", "--url", "http://127.0.0.1:9"])
        .env_remove("EVOMEM_API_KEY")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("EVOMEM_API_KEY"));
}

/// `evomem compare` on two run folders compares every policy both hold
/// (or the one `--policy` names), with a warning when few users are
/// common; a policy folder beside a run folder, a folder that is neither,
/// and an unknown `--policy` are refused, naming what to pass.
#[test]
fn compare_takes_two_run_folders_or_two_policy_folders() {
    let t1 = tempfile::tempdir().unwrap();
    let t2 = tempfile::tempdir().unwrap();
    let (a, _) = eval_toy(t1.path(), "pop,itemknn", &["--seed", "1"]);
    let (b, _) = eval_toy(t2.path(), "pop,recent", &["--seed", "1"]);
    let compare = |args: &[&std::ffi::OsStr]| {
        let res = evomem().arg("compare").args(args).output().unwrap();
        (
            res.status.success(),
            String::from_utf8_lossy(&res.stdout).into_owned(),
            String::from_utf8_lossy(&res.stderr).into_owned(),
        )
    };
    let json = t1.path().join("cmp.json");
    let (ok, out, err) = compare(&[
        a.as_os_str(),
        b.as_os_str(),
        "--json".as_ref(),
        json.as_os_str(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("== pop") && !out.contains("== itemknn"),
        "{out}"
    );
    assert!(err.contains("only 12 common users"), "{err}");
    assert!(read_json(&json)["pop"]["common_users"].as_u64() == Some(12));
    let (ok, _, err) = compare(&[
        a.as_os_str(),
        b.as_os_str(),
        "--policy".as_ref(),
        "itemknn".as_ref(),
    ]);
    assert!(
        !ok && err.contains("holds no such policy (it holds pop, recent)"),
        "{err}"
    );
    let (ok, out, _) = compare(&[a.join("pop").as_os_str(), b.join("pop").as_os_str()]);
    assert!(ok && out.contains("12 common users"), "{out}");
    let (ok, _, err) = compare(&[a.join("pop").as_os_str(), b.as_os_str()]);
    assert!(
        !ok && err.contains("is a policy folder but the other is not"),
        "{err}"
    );
    let empty = t1.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (ok, _, err) = compare(&[empty.as_os_str(), b.as_os_str()]);
    assert!(!ok && err.contains("neither a policy folder"), "{err}");
}

/// A second `evomem eval` into the same `--out` with other policies warns
/// that the folder holds the first run's policy folders, naming them.
#[test]
fn a_reused_out_folder_is_named_with_its_stale_policies() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, first) = eval_toy(tmp.path(), "pop,itemknn", &[]);
    assert!(!first.contains("did not write"), "{first}");
    let (out, second) = eval_toy(tmp.path(), "pop", &[]);
    assert!(
        second.contains("also holds policy folders this run did not write (itemknn)"),
        "{second}"
    );
    assert!(out.join("itemknn").is_dir(), "nothing is removed");
}

/// `arena lifelong --data` takes the benchmark's folder as well as its
/// file (a folder without the file is named), and one seed gets a warning
/// that its intervals say nothing.
/// A lifelong arena run too short for the hub's consecutive-failure
/// breaker (two tasks, one epoch, no retries) against a dead model server:
/// every `act` call fell back offline, so the run exits non-zero.
#[test]
fn a_lifelong_arena_that_never_reached_its_model_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let task = |i: usize, question: &str, answer: &str, sql: &str| {
        format!(
            r#""{i}": {{"sample_index": {i}, "instruction": "{question}", "answer_info": "{{'direct': {answer}, 'md5': None, 'sql': '{sql}'}}", "table_info": "{{'name': 'pets', 'column_info_list': [{{'name': 'id', 'type': 'INT'}}, {{'name': 'kind', 'type': 'TEXT'}}], 'row_list': [[1, 'cat'], [2, 'dog']]}}", "skill_list": "['select']", "sql_instruction_row_list_entry_hash": {i}}}"#
        )
    };
    let data = format!(
        "{{{}, {}}}",
        task(
            0,
            "How many pets are there?",
            "[[2]]",
            "SELECT COUNT(*) FROM pets;"
        ),
        task(
            1,
            "What kind is pet 2?",
            "[['dog']]",
            "SELECT kind FROM pets WHERE id = 2;"
        )
    );
    std::fs::write(tmp.path().join("db_bench_data.json"), data).unwrap();
    let res = evomem()
        .args([
            "arena", "lifelong", "--tasks", "2", "--epochs", "1", "--seeds", "1",
        ])
        .args([
            "--policy",
            "memrl",
            "--llm",
            "openai:x@http://127.0.0.1:1/v1",
        ])
        .arg("--data")
        .arg(tmp.path())
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(tmp.path().join("out"))
        .env("EVOMEM_LLM__MAX_RETRIES", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        !res.status.success(),
        "an offline run passed as a model run: {err}"
    );
    assert!(!err.contains("in a row"), "the breaker tripped: {err}");
    assert!(
        err.contains("every `act` call of the run fell back"),
        "{err}"
    );
    // The same run offline passes.
    let ok = evomem()
        .args([
            "arena", "lifelong", "--tasks", "2", "--epochs", "1", "--seeds", "1",
        ])
        .args(["--policy", "memrl"])
        .arg("--data")
        .arg(tmp.path())
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(tmp.path().join("out-offline"))
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn arena_lifelong_takes_the_folder_and_warns_on_one_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |seeds: &[&str]| {
        let res = evomem()
            .args(["arena", "lifelong", "--data"])
            .arg(tmp.path())
            .args(seeds)
            .arg("--out")
            .arg(tmp.path().join("out"))
            .output()
            .unwrap();
        assert!(!res.status.success());
        String::from_utf8_lossy(&res.stderr).into_owned()
    };
    let err = run(&["--seeds", "1"]);
    assert!(
        err.contains("a folder without db_bench_data.json in it"),
        "{err}"
    );
    assert!(err.contains("--seeds 1: with one run per policy"), "{err}");
    // The default runs 3 seeds: no warning.
    let err = run(&[]);
    assert!(!err.contains("with one run per policy"), "{err}");
}
