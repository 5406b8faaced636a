//! `evomem ui --run DIR [--run DIR2]`: the web inspector over one run
//! folder, or two side by side, on 127.0.0.1 (`evomem-ui`). The pages are
//! compiled into the binary; the op logs are indexed on first use (or at
//! start with `--index-now`), one streaming pass each.

use anyhow::{bail, Context as _};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `evomem ui`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run folder (`evomem eval --out DIR`); give it twice to compare two runs.
    #[arg(long, required = true)]
    pub run: Vec<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 7878)]
    pub port: u16,
    /// Index every policy's op log before serving (default: on first request).
    #[arg(long)]
    pub index_now: bool,
}

/// Run `evomem ui`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.run.len() > 2 {
        bail!(
            "evomem ui compares at most two runs ({} given)",
            args.run.len()
        );
    }
    let runs = Arc::new(evomem_ui::Runs::open(&args.run)?);
    if args.index_now {
        for r in runs.all() {
            for p in &r.policies {
                if p.dir.has_ops() {
                    let started = std::time::Instant::now();
                    let ix = p.index()?;
                    eprintln!(
                        "indexed {}: {} ({:.1} s)",
                        p.dir.ops_file().display(),
                        ix.describe(),
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
            .await
            .with_context(|| format!("binding 127.0.0.1:{}", args.port))?;
        let addr = listener.local_addr()?;
        println!("evomem ui: http://{addr}/");
        std::io::stdout().flush().ok();
        let shutdown = async {
            tokio::signal::ctrl_c().await.ok();
        };
        evomem_ui::serve(listener, evomem_ui::router(runs), shutdown)
            .await
            .context("serving")
    })
}
