//! Run the MiniLM benchmark without building the whole CLI (same code as
//! `evomem bench embed`):
//!
//! ```text
//! cargo run --release -p evomem-embed --example bench_embed -- [THREADS] [PYTHON]
//! ```
//!
//! THREADS defaults to 2; PYTHON to `/tmp/evomem-st-venv/bin/python` when it
//! exists.

use evomem_embed::bench::{print_report, run_embed_bench, EmbedBenchConfig};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map_or(Ok(2), |s| s.parse())?;
    let python = args.next().map(PathBuf::from).or_else(|| {
        let p = PathBuf::from("/tmp/evomem-st-venv/bin/python");
        p.exists().then_some(p)
    });
    let cfg = EmbedBenchConfig {
        model_dir: evomem_embed::minilm_dir(&evomem_embed::default_models_dir(
            std::env::var_os("HOME")
                .as_deref()
                .map(std::path::Path::new),
        )),
        threads,
        batch: 32,
        short: 512,
        long: 96,
        reps: 2,
        python,
        recall_docs: 10_000,
        recall_queries: 1_000,
    };
    let report = run_embed_bench(&cfg)?;
    print_report(&report, cfg.threads, cfg.batch);
    Ok(())
}
