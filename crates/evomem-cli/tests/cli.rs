//! The `evomem` binary end to end on a small generated RecBole dataset:
//! tuning on validation targets with cost estimates, and a bad flag value.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

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
            let i = (u * 3 + step * 5 + step * step) % 20;
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

#[test]
fn eval_on_validation_targets_with_cost_estimates() {
    let tmp = tempfile::tempdir().unwrap();
    let data = toy_recbole(tmp.path());
    let out = tmp.path().join("run");
    let res = evomem()
        .args(["eval", "--format", "recbole", "--policy", "pop,mars"])
        .args([
            "--target",
            "valid",
            "--llm-estimate",
            "--embed-cache",
            "off",
        ])
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    // stderr is a pipe here, so the progress bar is hidden; the per-policy
    // lines must still be printed.
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(stderr.contains("done: pop in"), "{stderr}");
    assert!(stderr.contains("done: mars in"), "{stderr}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("target: validation interactions"),
        "{report}"
    );
    assert!(report.contains("Estimated model cost"), "{report}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["target"], "valid");
    assert_eq!(config["llm_estimate"], true);
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("mars/metrics.json")).unwrap())
            .unwrap();
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
        let expected = format!("i{}", (u * 3 + 6 * 5 + 36) % 20);
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

#[test]
fn ops_log_off_skips_the_log_and_inspect_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let data = toy_recbole(tmp.path());
    let out = tmp.path().join("run");
    let res = evomem()
        .args(["eval", "--format", "recbole", "--policy", "mars,atomrec"])
        .args(["--ops-log", "off", "--embed-cache", "off"])
        .arg("--data")
        .arg(&data)
        .arg("--models-dir")
        .arg(tmp.path().join("no-models"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert!(!out.join("mars/ops.jsonl").exists());
    assert!(out.join("mars/decisions.jsonl").exists());
    // The op counts still reach metrics.json.
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("mars/metrics.json")).unwrap())
            .unwrap();
    assert!(
        metrics["ops"]["total"].as_u64().unwrap() > 0,
        "{}",
        metrics["ops"]
    );
    let res = evomem()
        .args(["inspect", "--user", "u1", "--run"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(err.contains("ops.jsonl"), "{err}");
    assert!(err.contains("--ops-log off"), "{err}");
    let res = evomem()
        .args(["explain", "--user", "u1", "--run"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(err.contains("--ops-log off"), "{err}");
}
