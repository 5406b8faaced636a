//! `evomem bench synth` and `evomem bench scale` end to end: byte-identical
//! data for one seed, a small two-size cost curve with its report and
//! plots, and bad flag values that name their flag.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn evomem() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_evomem"));
    c.env("RUST_BACKTRACE", "0");
    c
}

#[test]
fn bench_synth_same_seed_gives_byte_identical_files() {
    let dir = tempfile::tempdir().unwrap();
    for (name, seed) in [("a", "5"), ("b", "5"), ("c", "6")] {
        let st = evomem()
            .args([
                "bench",
                "synth",
                "--interactions",
                "3000",
                "--seed",
                seed,
                "--out",
            ])
            .arg(dir.path().join(name))
            .status()
            .unwrap();
        assert!(st.success());
    }
    let read = |d: &str, f: &str| std::fs::read(dir.path().join(d).join(f)).unwrap();
    for f in ["synth.inter", "synth.item", "synth.user", "scalegen.json"] {
        assert_eq!(read("a", f), read("b", f), "{f}");
    }
    assert_ne!(read("a", "synth.inter"), read("c", "synth.inter"));
}

/// `--like sparse` is the preset of many light users without metadata: no
/// `synth.user`, ids only in `synth.item`.
#[test]
fn bench_synth_like_sparse_writes_no_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    let st = evomem()
        .args([
            "bench",
            "synth",
            "--interactions",
            "5000",
            "--like",
            "sparse",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(!out.join("synth.user").exists());
    let item = std::fs::read_to_string(out.join("synth.item")).unwrap();
    assert_eq!(item.lines().next(), Some("item_id:token"));
    let meta = std::fs::read_to_string(out.join("scalegen.json")).unwrap();
    assert!(meta.contains("sparse (preset)"), "{meta}");
}

#[test]
fn bench_scale_writes_report_fits_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("scale");
    let o = evomem()
        .args([
            "bench",
            "scale",
            "--sizes",
            "2000,4000",
            "--policies",
            "no-memory,pop,memrl",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("time exp"), "{stdout}");
    for f in ["report.md", "scale.json", "time.svg", "rss.svg"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scale.json")).unwrap()).unwrap();
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6);
    for c in cells {
        assert_eq!(c["ok"], true, "{c}");
        assert!(c["measure"]["max_rss_kib"].as_u64().unwrap() > 1000, "{c}");
    }
    for f in json["fits"].as_array().unwrap() {
        assert!(f["time_exponent"].is_number(), "{f}");
        assert!(f["rss_exponent"].is_number(), "{f}");
    }
}

#[test]
fn bench_scale_bad_flag_values_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (args, flag) in [
        (vec!["bench", "scale", "--sizes", "10"], "--sizes"),
        (vec!["bench", "scale", "--embedder", "bert"], "--embedder"),
        (vec!["bench", "scale", "--policy", "romerl"], "--policy"),
        // The older name is an alias of the same flag.
        (
            vec!["bench", "scale", "--policies", "mars[nokey=1]"],
            "--policy",
        ),
        (
            vec!["bench", "synth", "--interactions", "5"],
            "--interactions",
        ),
    ] {
        let o = evomem()
            .args(&args)
            .arg("--out")
            .arg(dir.path().join("x"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
