//! `seqmem[fit=auto]` (and itemknn's, BPR's and AtomRec's `fit=auto`) under the real protocol: the fit reads validation
//! decisions only (changing every test target leaves the fitted weights as
//! they were; changing validation items, or a driver that shows test
//! targets, changes them), and on a generated set of many light users
//! (`scalegen::Profile::sparse`) the fit finds the planted transitions and
//! beats the fixed weights on validation targets.

use evomem_core::{Dataset, ItemId, SplitRole};
use evomem_eval::data::{load, Format};
use evomem_eval::decider::Decider;
use evomem_eval::protocol::{Plan, ProtocolConfig, TargetSplit, UserSelection};
use evomem_eval::replay::{run_policy, run_policy_with_fault, Fault, PolicyRun};
use evomem_eval::scalegen::{self, Profile};
use evomem_llm::LlmHub;
use evomem_policy::{registry, PolicyDeps, PolicySpec};
use std::sync::Arc;

use crate::common::shared_dataset;

/// A generated sparse set of `n` interactions (seed 42), loaded as
/// `evomem eval` loads it.
pub(crate) fn sparse(n: usize) -> Dataset {
    let dir = tempfile::tempdir().unwrap();
    let s = scalegen::generate(&Profile::sparse(), n, 42).unwrap();
    scalegen::write_recbole(&s, dir.path()).unwrap();
    load(dir.path(), Format::RecBole).unwrap().dataset
}

pub(crate) fn run(
    data: &Dataset,
    cfg: &ProtocolConfig,
    spec: &str,
    fault: Option<Fault>,
) -> PolicyRun {
    let embedder: Arc<dyn evomem_core::Embedder> = Arc::new(evomem_embed::HashingEmbedder::new(32));
    let plan = Plan::build(data, cfg).unwrap();
    let decider = Decider::new(&plan, embedder.clone()).unwrap();
    let hub = Arc::new(LlmHub::offline());
    let deps = PolicyDeps {
        embedder,
        llm: hub.clone(),
        seed: cfg.seed,
    };
    let mut policy = registry::build(&PolicySpec::parse(spec).unwrap(), &deps).unwrap();
    match fault {
        None => run_policy(&plan, policy.as_mut(), spec, &decider, &hub, &|_| {}).unwrap(),
        Some(f) => run_policy_with_fault(&plan, policy.as_mut(), spec, &decider, &hub, f).unwrap(),
    }
}

/// Replace the item of every interaction with role `role` by another item
/// the user never touched.
pub(crate) fn change_items(data: &Dataset, role: SplitRole) -> Dataset {
    let plan = Plan::build(data, &ProtocolConfig::default()).unwrap();
    let n_items = data.catalog.len() as u32;
    let mut out = data.clone();
    for (k, i) in data.interactions.iter().enumerate() {
        if plan.role(i.time) != role {
            continue;
        }
        let touched: Vec<ItemId> = data.user_history(i.user).iter().map(|x| x.item).collect();
        let mut c = (i.item.0 + 7) % n_items;
        while touched.contains(&ItemId(c)) {
            c = (c + 1) % n_items;
        }
        out.interactions[k].item = ItemId(c);
    }
    out
}

#[test]
fn seqmem_fit_never_reads_test_targets() {
    let data = sparse(6000);
    let cfg = ProtocolConfig::default();
    let fit =
        |d: &Dataset, fault: Option<Fault>| run(d, &cfg, "seqmem", fault).stats["fit"].clone();
    let base = fit(&data, None);
    assert_eq!(base["mode"], "auto", "{base}");
    assert!(base["decisions"].as_u64().unwrap() > 100, "{base}");
    // Every test target changed: the same fit, weight for weight.
    let other_tests = change_items(&data, SplitRole::Test);
    assert_ne!(other_tests.interactions, data.interactions);
    assert_eq!(fit(&other_tests, None), base);
    // The test is sensitive: changed validation items (what the fit does
    // read) change the weights, and so does a driver that shows the test
    // targets to the policy.
    let other_valid = change_items(&data, SplitRole::Valid);
    assert_ne!(fit(&other_valid, None)["weights"], base["weights"]);
    assert_ne!(
        fit(&data, Some(Fault::ShowTarget))["weights"],
        base["weights"]
    );
}

/// itemknn's shrinkage and BPR's regularisation fits read validation
/// decisions only: every test target changed leaves each grid point's
/// figures as they were; changed validation items, or a driver that shows
/// test targets, change them.
#[test]
fn itemknn_and_bpr_fits_never_read_test_targets() {
    let data = sparse(6000);
    let cfg = ProtocolConfig::default();
    let other_tests = change_items(&data, SplitRole::Test);
    let other_valid = change_items(&data, SplitRole::Valid);
    for spec in ["itemknn", "bpr[fit=auto,epochs=4]"] {
        let fit =
            |d: &Dataset, fault: Option<Fault>| run(d, &cfg, spec, fault).stats["fit"].clone();
        let base = fit(&data, None);
        assert_eq!(base["mode"], "auto", "{spec}: {base}");
        assert!(base["decisions"].as_u64().unwrap() > 100, "{spec}: {base}");
        assert_eq!(fit(&other_tests, None), base, "{spec}");
        assert_ne!(fit(&other_valid, None)["grid"], base["grid"], "{spec}");
        assert_ne!(
            fit(&data, Some(Fault::ShowTarget))["grid"],
            base["grid"],
            "{spec}"
        );
    }
}

/// `fit=none` is the model without a fit, a value given in the spec is
/// pinned (no fit runs), and BPR's fit is off by default.
#[test]
fn itemknn_and_bpr_without_fit_keep_their_given_settings() {
    let data = sparse(3000);
    let cfg = ProtocolConfig::default();
    for (spec, key) in [
        ("itemknn[fit=none]", "shrink"),
        ("itemknn[shrink=0]", "shrink"),
        ("bpr[fit=none,epochs=4]", "reg"),
        ("bpr[epochs=4]", "reg"),
        ("bpr[reg=0.005,epochs=4]", "reg"),
    ] {
        let r = run(&data, &cfg, spec, None);
        assert_eq!(r.stats["fit"]["mode"], "none", "{spec}");
        assert!(r.stats[key].as_f64().is_some(), "{spec}");
    }
    let a = run(&data, &cfg, "itemknn[fit=none]", None);
    let b = run(&data, &cfg, "itemknn[shrink=0]", None);
    assert_eq!(a.metrics().hr1, b.metrics().hr1);
}

#[test]
fn seqmem_fit_finds_the_planted_transitions_of_a_sparse_set() {
    let data = sparse(20_000);
    let users = data.users.len();
    assert!(
        (1800..2500).contains(&users),
        "about 9 interactions per user: {users} users"
    );
    let valid = ProtocolConfig {
        target: TargetSplit::Valid,
        ..ProtocolConfig::default()
    };
    let fitted = run(&data, &valid, "seqmem", None);
    let fixed = run(&data, &valid, "seqmem[fit=none]", None);
    let pop = run(&data, &valid, "pop", None);
    let w = &fitted.stats["fit"]["weights"];
    assert!(w["w_next"].as_f64().unwrap() > 0.1, "{w}");
    let (f, x, p) = (fitted.metrics().hr1, fixed.metrics().hr1, pop.metrics().hr1);
    assert!(f > x + 0.02, "fitted {f} vs fixed {x}");
    assert!(f > p + 0.02, "fitted {f} vs pop {p}");
}

/// AtomRec's `fit=auto` reads validation decisions only: every test target
/// changed leaves the fit's decisions, figures and weights as they were;
/// changed validation items, or a driver that shows test targets, change
/// them. A weight given in the spec stays pinned.
#[test]
fn atomrec_fit_never_reads_test_targets() {
    let data = sparse(2500);
    let cfg = ProtocolConfig::default();
    let spec = "atomrec[fit=auto,fit_min=0]";
    let fit = |d: &Dataset, fault: Option<Fault>| run(d, &cfg, spec, fault).stats["fit"].clone();
    let base = fit(&data, None);
    assert!(base["mode"].as_str().unwrap().starts_with("auto"), "{base}");
    assert!(base["decisions"].as_u64().unwrap() > 100, "{base}");
    assert_eq!(fit(&change_items(&data, SplitRole::Test), None), base);
    let other_valid = fit(&change_items(&data, SplitRole::Valid), None);
    assert_ne!(other_valid["spec"], base["spec"]);
    assert_ne!(fit(&data, Some(Fault::ShowTarget))["spec"], base["spec"]);
    let pinned = run(&data, &cfg, "atomrec[fit=auto,fit_min=0,w_sem=0.7]", None);
    assert_eq!(pinned.stats["fit"]["weights"]["w_sem"], 0.7);
    let none = run(&data, &cfg, "atomrec", None);
    assert_eq!(none.stats["fit"]["mode"], "none");
}

/// MARS's `fit=auto` reads validation decisions only: every test target
/// changed leaves the fit's decisions, figures and weights as they were;
/// changed validation items, or a driver that shows test targets, change
/// them. A weight given in the spec stays pinned, `fit=none` reports no
/// fit at all (its metrics are the unfitted policy's), and `fit=auto` is
/// MARS's default (issue 55) while AtomRec's stays `none`.
#[test]
fn mars_fit_never_reads_test_targets() {
    let data = sparse(2500);
    let cfg = ProtocolConfig::default();
    let spec = "mars[fit=auto,fit_min=0]";
    let fit = |d: &Dataset, fault: Option<Fault>| run(d, &cfg, spec, fault).stats["fit"].clone();
    let base = fit(&data, None);
    assert!(base["mode"].as_str().unwrap().starts_with("auto"), "{base}");
    assert!(base["decisions"].as_u64().unwrap() > 100, "{base}");
    assert_eq!(fit(&change_items(&data, SplitRole::Test), None), base);
    let other_valid = fit(&change_items(&data, SplitRole::Valid), None);
    assert_ne!(other_valid["spec"], base["spec"]);
    assert_ne!(fit(&data, Some(Fault::ShowTarget))["spec"], base["spec"]);
    let pinned = run(&data, &cfg, "mars[fit=auto,fit_min=0,collab=0.7]", None);
    assert_eq!(pinned.stats["fit"]["weights"]["collab"], 0.7);
    let none = run(&data, &cfg, "mars[fit=none]", None);
    assert!(none.stats.get("fit").is_none(), "{}", none.stats);
    let default = run(&data, &cfg, "mars", None);
    assert!(
        default.stats["fit"]["mode"]
            .as_str()
            .unwrap()
            .starts_with("auto"),
        "{}",
        default.stats
    );
}

/// On a generated sparse set there is no metadata: the content term
/// matches hashed item ids (noise), while co-consumption follows the
/// planted successors and popularity the activity law. The fit, free in all
/// three weights, puts its weight on co-consumption and popularity and
/// none on content, and beats the given weights on its held-out decisions.
#[test]
fn mars_fit_moves_away_from_an_uninformative_term() {
    let data = sparse(2500);
    let cfg = ProtocolConfig::default();
    let r = run(&data, &cfg, "mars[fit=auto,fit_min=0]", None);
    let f = &r.stats["fit"];
    let w = |k: &str| f["weights"][k].as_f64().unwrap();
    assert_eq!(f["mode"], "auto", "{f}");
    assert!(w("collab") > 0.3 && w("prior") > 0.3, "{f}");
    // The spec's 0.35 on content would fail here; the fit's is 0 (the
    // content term never separates a target from its negatives here).
    assert!(w("content").abs() < 0.05, "{f}");
    assert!(
        f["fitted"]["mrr"].as_f64().unwrap() > f["spec"]["mrr"].as_f64().unwrap(),
        "{f}"
    );
}

/// Issue 55, "A fit that can hurt": Amazon Beauty with 300 users (memory
/// from them only) observes about 2,000 of the catalog's 12,101 items, and
/// the harness draws negatives uniformly from the whole catalog. The fit's
/// negatives came from the observed items only (`fit_pool=auto` read the
/// small observed share as a mark of fixed candidate lists), where a held-out
/// target, often seen by nobody else, is the *least* observed candidate: the
/// fit learned to prefer never-observed items and ranked the evaluated
/// decisions' never-observed negatives first (HR@1 0.057, random 0.10,
/// fixed weights 0.237). Now `auto` draws the fit's decisions from both
/// pools and keeps the fixed weights unless the fit beats them on each
/// pool's held-out half: seqmem is never below the fixed weights here. The
/// old rule is still there to ask for (`fit_pool=observed`, one pool), and
/// it still hurts, which shows the data reproduces the case.
#[test]
fn a_fit_on_300_beauty_users_does_not_fall_below_the_fixed_weights() {
    let Some(dir) = shared_dataset("beauty") else {
        return;
    };
    let data = load(&dir, Format::RecBole).unwrap().dataset;
    let cfg = ProtocolConfig {
        users: UserSelection::Count(300),
        ..ProtocolConfig::default()
    };
    let fitted = run(&data, &cfg, "seqmem", None);
    let fixed = run(&data, &cfg, "seqmem[fit=none]", None);
    let observed = run(&data, &cfg, "seqmem[fit_pool=observed]", None);
    let f = &fitted.stats["fit"];
    let (a, b) = (fitted.metrics(), fixed.metrics());
    assert!(
        a.hr1 >= b.hr1 - 0.01 && a.mrr >= b.mrr - 0.01,
        "fit {a:?} vs fixed {b:?}: {f}"
    );
    // Fitted values are used exactly when they win on both pools.
    assert_eq!(f["negatives_from"], "catalog+observed", "{f}");
    let pools = f["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2, "{f}");
    let mrr = |p: &serde_json::Value, k: &str| p[k]["mrr"].as_f64().unwrap();
    let n = f["decisions"].as_f64().unwrap();
    let wins = pools
        .iter()
        .all(|p| mrr(p, "fitted") > mrr(p, "spec") + 1.0 / n);
    assert_eq!(f["mode"] == "auto", wins, "{f}");
    // The fit on observed negatives alone: it wins on its own held-out
    // decisions and loses on the evaluated ones.
    let o = &observed.stats["fit"];
    assert_eq!(o["negatives_from"], "observed", "{o}");
    assert_eq!(o["mode"], "auto", "{o}");
    assert!(
        observed.metrics().hr1 < b.hr1 - 0.1,
        "observed-only fit {:?} vs fixed {b:?}: {o}",
        observed.metrics()
    );
}

/// The fits of seqmem, MARS and AtomRec on two pools of negatives (Amazon
/// Beauty, 300 users: most of the catalog never observed) read validation
/// decisions only: every test target changed leaves `stats.fit` as it was,
/// both pools' figures included; a driver that shows the test targets
/// changes it.
#[test]
fn fits_on_both_pools_never_read_test_targets() {
    let Some(dir) = shared_dataset("beauty") else {
        return;
    };
    let data = load(&dir, Format::RecBole).unwrap().dataset;
    let cfg = ProtocolConfig {
        users: UserSelection::Count(300),
        ..ProtocolConfig::default()
    };
    let other_tests = change_items(&data, SplitRole::Test);
    for spec in [
        "seqmem[fit_min=0]",
        "mars[fit=auto,fit_min=0]",
        "atomrec[fit=auto,fit_min=0]",
    ] {
        let fit =
            |d: &Dataset, fault: Option<Fault>| run(d, &cfg, spec, fault).stats["fit"].clone();
        let base = fit(&data, None);
        assert_eq!(base["negatives_from"], "catalog+observed", "{spec}: {base}");
        assert!(base["decisions"].as_u64().unwrap() > 200, "{spec}: {base}");
        assert_eq!(fit(&other_tests, None), base, "{spec}");
        assert_ne!(
            fit(&data, Some(Fault::ShowTarget))["pools"],
            base["pools"],
            "{spec}"
        );
    }
}

/// Issue 55's real-data smoke test: on a 2,000-user slice of Amazon Beauty
/// (seed 42, memory from those users only), the best memory policy's
/// validation HR@1 stays within 0.02 of what it reached when the issue's
/// work stopped: 0.3490, seqmem's with its walk and factor heads (0.3475
/// with the walk head alone; `evomem eval --data beauty --users 2000
/// --target valid --policy seqmem,mars,atomrec`).
/// MARS and AtomRec, without item text here, each stay within 0.01 of what
/// their walk terms reached under this test's hashing embedder (0.3400 and
/// 0.3405; before them 0.3265 with `mars[fit=none]` and 0.3005 with
/// `atomrec[w_walk=0]`, which fail it; item-kNN 0.2370).
#[test]
fn the_best_memory_policy_holds_its_validation_hr1_on_2000_beauty_users() {
    const REACHED: f64 = 0.3490;
    const REACHED_MARS: f64 = 0.3400;
    const REACHED_ATOMREC: f64 = 0.3405;
    let Some(dir) = shared_dataset("beauty") else {
        return;
    };
    let data = load(&dir, Format::RecBole).unwrap().dataset;
    let cfg = ProtocolConfig {
        users: UserSelection::Count(2000),
        target: TargetSplit::Valid,
        ..ProtocolConfig::default()
    };
    let figures: Vec<(&str, f64)> = ["seqmem", "mars", "atomrec"]
        .into_iter()
        .map(|spec| (spec, run(&data, &cfg, spec, None).metrics().hr1))
        .collect();
    eprintln!("validation HR@1 on 2,000 Beauty users: {figures:?}");
    let best = figures
        .iter()
        .map(|f| f.1)
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(
        best >= REACHED - 0.02,
        "best validation HR@1 {best} < {REACHED} - 0.02: {figures:?}"
    );
    for (k, reached) in [(1, REACHED_MARS), (2, REACHED_ATOMREC)] {
        let (spec, hr1) = figures[k];
        assert!(
            hr1 >= reached - 0.01,
            "{spec}: validation HR@1 {hr1} < {reached} - 0.01: {figures:?}"
        );
    }
}
