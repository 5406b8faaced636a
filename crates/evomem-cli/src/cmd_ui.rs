//! `evomem ui --run DIR [--run DIR2] [--bind 127.0.0.1:7878]`: the web
//! inspector over one run folder, or two side by side, on a loopback
//! address (`evomem-ui`). `--bind` is `evomem serve`'s flag; the older
//! `--port` is accepted with a deprecation notice. The pages are
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
    /// Address to listen on, as `evomem serve --bind`: a loopback one only
    /// (run mode has no key), default 127.0.0.1:7878; port 0 picks a free
    /// one (the address is printed).
    #[arg(long, conflicts_with = "port")]
    pub bind: Option<String>,
    /// Deprecated: `--bind 127.0.0.1:PORT` says the same (accepted, with a
    /// notice).
    #[arg(long)]
    pub port: Option<u16>,
    /// Index every policy's op log before serving (default: on first request).
    #[arg(long)]
    pub index_now: bool,
}

/// The address `--bind` (or the deprecated `--port`) names; refused
/// unless it is loopback, naming the flag.
fn listen_addr(args: &Args) -> anyhow::Result<std::net::SocketAddr> {
    if let Some(port) = args.port {
        eprintln!("notice: --port is deprecated; use --bind 127.0.0.1:{port} (the flag `evomem serve` has)");
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let Some(bind) = args.bind.as_deref() else {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], 7878)));
    };
    let addr: std::net::SocketAddr = match bind.strip_prefix("localhost:") {
        Some(port) => port
            .parse::<u16>()
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .with_context(|| format!("--bind {bind}: not a port after `localhost:`"))?,
        None => bind
            .parse()
            .with_context(|| format!("--bind {bind}: not an address like 127.0.0.1:7878"))?,
    };
    if !addr.ip().is_loopback() {
        bail!(
            "--bind {bind}: evomem ui serves run folders without a key, so it listens on a loopback address only (127.0.0.1, ::1); to share an inspector, use /ui of `evomem serve`, behind its keys"
        );
    }
    Ok(addr)
}

/// Run `evomem ui`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let addr = listen_addr(&args)?;
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
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
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
