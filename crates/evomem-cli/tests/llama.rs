//! Opt-in (`EVOMEM_TEST_LLAMA=1`): a real model behind a real server.
//! `scripts/llama-server.sh start` builds llama.cpp's `llama-server` (once,
//! about 12 minutes on 2 cores) and serves SmolLM2-135M-Instruct on
//! 127.0.0.1; then `evomem llm ping` and a 5-user MARS evaluation (budget
//! mode: one extraction, one synthesis, one ranking per user) run through it
//! with the hub's accounting. The outputs are printed (`--nocapture`).
//!
//! Without the variable the test returns at once: the build and the model
//! do not belong in every CI run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ml100k() -> PathBuf {
    let shared = std::env::var_os("EVOMEM_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/data"));
    let d = shared.join("ml-100k");
    if d.is_dir() {
        return d;
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/evomem/data/ml-100k")
}

#[test]
fn llama_server_answers_ping_and_a_five_user_mars_run() {
    if std::env::var("EVOMEM_TEST_LLAMA").as_deref() != Ok("1") {
        eprintln!("EVOMEM_TEST_LLAMA is not 1: skipping the llama-server test");
        return;
    }
    let start = Command::new(repo().join("scripts/llama-server.sh"))
        .arg("start")
        .output()
        .unwrap();
    assert!(
        start.status.success(),
        "{}",
        String::from_utf8_lossy(&start.stderr)
    );
    let spec = format!("openai:{}", String::from_utf8_lossy(&start.stdout).trim());
    let ping = Command::new(env!("CARGO_BIN_EXE_evomem"))
        .args(["llm", "ping", "--llm", &spec])
        .output()
        .unwrap();
    let ping_out = String::from_utf8_lossy(&ping.stdout).to_string();
    println!("$ evomem llm ping --llm {spec}\n{ping_out}");
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stderr)
    );
    assert!(ping_out.contains("latency_ms"), "{ping_out}");

    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_evomem"))
        .args([
            "eval",
            "--policy",
            "mars[budget=paper]",
            "--users",
            "5",
            "--llm",
            &spec,
            "--ops-log",
            "off",
            "--data",
        ])
        .arg(ml100k())
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).to_string();
    let stderr = String::from_utf8_lossy(&run.stderr).to_string();
    println!(
        "$ evomem eval --policy mars[budget=paper] --users 5 --llm {spec}\n{stdout}\n{stderr}"
    );
    assert!(run.status.success(), "{stderr}");
    let metrics: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("mars_budget_paper_/metrics.json")).unwrap(),
    )
    .unwrap();
    let totals = &metrics["llm"]["totals"];
    println!("llm totals: {totals}");
    assert!(totals["calls"].as_u64().unwrap() >= 5, "{totals}");
    let stop = Command::new(repo().join("scripts/llama-server.sh"))
        .arg("stop")
        .status()
        .unwrap();
    assert!(stop.success());
}
