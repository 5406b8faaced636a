//! The fixture both test files share: two small eval runs (MARS, AtomRec and
//! a baseline on a synthetic dataset, two protocol seeds) made with the
//! library, and a router over them. The first run's data has item titles
//! (so it has `item_titles.json`); the second's titles are blanked, as in
//! a data set without titles (the Amazon sets), so it has none and looks
//! like a run folder from before the file.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use evomem_eval::protocol::ProtocolConfig;
use evomem_eval::run::{run_eval, EvalConfig, RunInputs};
use evomem_eval::synthetic::synthetic_dataset;
use evomem_llm::LlmHub;
use evomem_policy::registry::PolicySpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The policies of the fixture runs.
pub const POLICIES: [&str; 3] = ["mars", "atomrec", "pop"];

/// Run the fixture policies into `out` with protocol seed `seed`, on data
/// with item titles (`Action title 3` for item `i3`) or without any.
pub fn make_run(out: &Path, seed: u64, titled: bool) {
    let mut data = synthetic_dataset(10, 40, 10, 3);
    if !titled {
        for item in &mut data.catalog.items {
            item.title.clear();
        }
    }
    let config = EvalConfig {
        data: "synthetic".into(),
        policies: POLICIES.iter().map(|p| p.to_string()).collect(),
        protocol: ProtocolConfig {
            seed,
            ..ProtocolConfig::default()
        },
        ..EvalConfig::default()
    };
    let hub_for = |_: &PolicySpec| Ok(Arc::new(LlmHub::offline()));
    run_eval(
        &config,
        RunInputs {
            dataset: &data,
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

/// Two runs in a temporary folder.
pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    pub a: PathBuf,
    pub b: PathBuf,
}

pub fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("run-a");
    let b = tmp.path().join("run-b");
    make_run(&a, 42, true);
    make_run(&b, 7, false);
    Fixture { _tmp: tmp, a, b }
}

/// The inspector's router over the fixture's runs.
pub fn router(f: &Fixture) -> axum::Router {
    let runs = evomem_ui::Runs::open(&[f.a.clone(), f.b.clone()]).unwrap();
    evomem_ui::router(Arc::new(runs))
}
