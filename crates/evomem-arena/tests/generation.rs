//! Arena A (generation feedback): a small run through the same engine loop
//! as the full one, checking the paper's orderings that are robust at this
//! size, determinism, and the report files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use evomem_arena::generation::{self, GenerationConfig, GenerationReport};
use evomem_kit::testing::TestEmbedder;
use std::sync::Arc;

/// The small run (10 episodes × 2 seeds from 42), computed once for the
/// tests that read it.
fn small(seed: u64) -> &'static GenerationReport {
    static RUN: std::sync::OnceLock<GenerationReport> = std::sync::OnceLock::new();
    assert_eq!(seed, 42, "one shared small run");
    RUN.get_or_init(|| {
        let cfg = GenerationConfig {
            episodes: 10,
            seeds: 2,
            seed,
            ..GenerationConfig::default()
        };
        generation::run(&cfg, Arc::new(TestEmbedder::new(16))).unwrap()
    })
}

fn method<'a>(r: &'a GenerationReport, spec: &str) -> &'a generation::MethodSummary {
    r.methods.iter().find(|m| m.method == spec).unwrap()
}

#[test]
fn tide_localises_responsibility_and_removes_bad_memory_better_than_retrieved_attribution() {
    let r = small(42);
    eprintln!("{}", generation::markdown(r));
    let tide = method(r, "tide");
    let retrieved = method(r, "tide[attribution=retrieved]");
    let no_cf = method(r, "tide[cf=false]");
    let f1 = |m: &generation::MethodSummary| m.f1.unwrap().mean;
    assert!(
        f1(tide) > f1(retrieved),
        "F1 {} vs {}",
        f1(tide),
        f1(retrieved)
    );
    // Counterfactual replay is what keeps precision up.
    assert!(f1(tide) > f1(no_cf), "F1 {} vs {}", f1(tide), f1(no_cf));
    assert!(
        tide.precision.unwrap().mean > no_cf.precision.unwrap().mean,
        "precision"
    );
    assert!(
        tide.bad_survival.mean < retrieved.bad_survival.mean,
        "BMS {} vs {}",
        tide.bad_survival.mean,
        retrieved.bad_survival.mean
    );
    assert!(tide.meg.mean > 0.0 && tide.meg.mean > retrieved.meg.mean);
}

#[test]
fn without_counterfactual_replay_overruled_memories_share_credit_and_the_bad_one_survives() {
    // The paper's Figure 4(b) ordering for the replay ablation: when the
    // trace names every guideline the generator took up, Used ∧ Align
    // without CF also credits overruled ones, so the injected guideline
    // collects the wins of the specific guidelines that overrule it; its
    // evidence no longer says that removing it improves utility, and it
    // survives more often (see the module docs of `generation`).
    let r = small(42);
    let tide = method(r, "tide");
    let no_cf = method(r, "tide[cf=false]");
    let f1 = |m: &generation::MethodSummary| m.f1.unwrap().mean;
    assert!(f1(tide) > f1(no_cf), "F1 {} vs {}", f1(tide), f1(no_cf));
    assert!(
        tide.bad_survival.mean < no_cf.bad_survival.mean,
        "BMS {} vs {}",
        tide.bad_survival.mean,
        no_cf.bad_survival.mean
    );
    assert!(
        tide.correct_edit.mean > no_cf.correct_edit.mean,
        "Correct Edit {} vs {}",
        tide.correct_edit.mean,
        no_cf.correct_edit.mean
    );
    // The surviving bad guideline still decides where no specific one
    // applies, so future materials are worse.
    assert!(
        tide.meg.mean > no_cf.meg.mean,
        "MEG {} vs {}",
        tide.meg.mean,
        no_cf.meg.mean
    );
}

#[test]
fn without_usage_traces_a_skipped_memory_takes_credit_and_edits_go_wrong() {
    // The paper's trace ablation: the replay then runs over everything
    // retrieved, so a guideline the generator skipped binds in it and is
    // held responsible (the hedged, harmful one is even restated firmly).
    let r = small(42);
    let tide = method(r, "tide");
    let no_trace = method(r, "tide[trace=false]");
    // Responsibility F1 is not asserted here: against the ground truth
    // from the world's hidden effects (not a replay with the episode's
    // draws), TIDE's F1 and precision are level with the trace ablation's
    // (0.69 against 0.71 at this size); the README reports it. What the
    // trace buys is in the edits.
    assert!(
        tide.correct_edit.mean > no_trace.correct_edit.mean,
        "Correct Edit {} vs {}",
        tide.correct_edit.mean,
        no_trace.correct_edit.mean
    );
    assert!(
        tide.bad_survival.mean < no_trace.bad_survival.mean,
        "BMS {} vs {}",
        tide.bad_survival.mean,
        no_trace.bad_survival.mean
    );
    assert!(tide.gap_to_tide.is_none());
    // The future-utility gap is small (the paper's is +0.041; ours about
    // +0.01) and its sign is noise at 2 seeds, so it is checked on the
    // report's own size: 20 episodes × 5 seeds, the two methods alone.
    let cfg = GenerationConfig {
        episodes: 20,
        seeds: 5,
        seed: 42,
        methods: vec!["tide".into(), "tide[trace=false]".into()],
        ..GenerationConfig::default()
    };
    let full = generation::run(&cfg, Arc::new(TestEmbedder::new(16))).unwrap();
    let gap = method(&full, "tide[trace=false]").gap_to_tide.unwrap();
    assert!(gap.mean > 0.0, "TIDE's paired gain {gap:?}");
}

#[test]
fn the_same_seed_gives_an_identical_report() {
    let cfg = GenerationConfig {
        episodes: 2,
        seeds: 1,
        learn: 40,
        future: 6,
        ..GenerationConfig::default()
    };
    let run = || generation::run(&cfg, Arc::new(TestEmbedder::new(16))).unwrap();
    let (a, b) = (run(), run());
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    generation::write_report(dir.path(), &a).unwrap();
    for f in [
        "generation.json",
        "report.md",
        "plot_memory.svg",
        "plot_meg_by_noise.svg",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
}

/// The responsibility threshold grades; it never steers: with a threshold
/// no effect reaches, nothing is truly responsible (no true positive
/// anywhere), while every method's lifecycle (Correct Edit, Bad-Memory
/// Survival, Future MEG) is the default run's, episode by episode.
#[test]
fn the_truths_threshold_changes_the_grading_and_nothing_else() {
    let base = small(42);
    let cfg = GenerationConfig {
        episodes: 10,
        seeds: 2,
        seed: 42,
        effect_min: 1e9,
        ..GenerationConfig::default()
    };
    let r = generation::run(&cfg, Arc::new(TestEmbedder::new(16))).unwrap();
    assert!(
        r.episodes.iter().all(|e| e.tp == 0),
        "a true positive above 1e9 logit"
    );
    assert!(
        base.episodes.iter().any(|e| e.tp > 0),
        "the default run has some"
    );
    assert_eq!(r.episodes.len(), base.episodes.len());
    for (a, b) in r.episodes.iter().zip(&base.episodes) {
        assert_eq!(
            (&a.method, a.seed, a.episode),
            (&b.method, b.seed, b.episode)
        );
        assert_eq!(
            (a.correct_edit, a.bad_survives, a.future_utility, a.memory),
            (b.correct_edit, b.bad_survives, b.future_utility, b.memory),
            "{} seed {} episode {}",
            a.method,
            a.seed,
            a.episode
        );
        assert_eq!(a.tp + a.fn_, 0, "nothing to find");
    }
}
