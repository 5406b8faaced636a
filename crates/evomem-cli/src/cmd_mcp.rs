//! `evomem mcp`: evomem's memory as an MCP server on stdio, for a local
//! agent (Claude Desktop, Claude Code, Cursor, an agent framework). Either
//! it opens a data folder in this process (`--data-dir`: the same stores,
//! index and embedder settings as `evomem serve`, one tenant) or it forwards
//! every tool call to a running service (`--url`, key from
//! `EVOMEM_API_KEY`). Stdout carries protocol messages only; notices and
//! logs go to stderr.

use crate::settings::Settings;
use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `evomem mcp`.
#[derive(clap::Args)]
pub struct Args {
    /// Forward every tool call to the service at this URL
    /// (`http://host:port`), with the key in `EVOMEM_API_KEY`.
    #[arg(long, conflicts_with_all = ["data_dir", "store", "embedder", "tenant"])]
    url: Option<String>,
    /// Open this data folder in process (`serve.data_dir`). Do not point a
    /// running `evomem serve` and this at the same folder: use `--url`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// `sqlite` or a postgres:// URL (`serve.store`).
    #[arg(long)]
    store: Option<String>,
    /// The embedder, as for `evomem serve` (`serve.embedder`).
    #[arg(long)]
    embedder: Option<String>,
    /// With a data folder: the tenant whose memories the tools read and
    /// write (1-32 of [a-z0-9_], starting with a letter). A service on the
    /// same folder serves them to keys of this tenant.
    #[arg(long, default_value = "local")]
    tenant: String,
}

pub fn run(args: Args, mut settings: Settings) -> anyhow::Result<()> {
    let threads = settings.threads();
    if let Some(url) = args.url {
        let key = std::env::var("EVOMEM_API_KEY").map_err(|_| {
            anyhow::anyhow!("evomem mcp --url {url}: set EVOMEM_API_KEY to the service's API key")
        })?;
        let backend = evomem_mcp::HttpBackend::new(&url, key)?;
        let server = evomem_mcp::EvomemMcp::new(Arc::new(backend))?;
        let rt = runtime(threads)?;
        eprintln!("evomem mcp: serving on stdio, forwarding to {url}");
        rt.block_on(evomem_mcp::serve_stdio(server))?;
        return Ok(());
    }
    let s = &mut settings.serve;
    if let Some(v) = args.data_dir {
        s.data_dir = v;
    }
    if let Some(v) = args.store {
        s.store = v;
    }
    if let Some(v) = args.embedder {
        s.embedder = v;
    }
    s.validate()?;
    settings.validate()?;
    evomem_serve::auth::check_tenant(&args.tenant)
        .map_err(|e| anyhow::anyhow!("evomem mcp --tenant: {e}"))?;
    std::fs::create_dir_all(&settings.serve.data_dir).with_context(|| {
        format!(
            "creating the data folder {}",
            settings.serve.data_dir.display()
        )
    })?;
    let tenants = vec![args.tenant.clone()];
    let shared = crate::cmd_serve::open_shared(&settings, &tenants)?;
    crate::cmd_serve::write_manifest(&settings, &tenants, shared.embedder.as_ref())?;
    // A key that lives as long as this process, never written anywhere:
    // the in-process calls pass the service's own authentication with it.
    let key = evomem_serve::auth::generate_key();
    let ring = evomem_serve::auth::KeyRing::from_plain([(key.as_str(), args.tenant.as_str())]);
    let service = evomem_serve::Service::start(shared, ring)?;
    let backend = evomem_mcp::RouterBackend::new(service.router(), Some(key));
    let server = evomem_mcp::EvomemMcp::new(Arc::new(backend))?;
    eprintln!(
        "evomem mcp: serving tenant {} of {} on stdio",
        args.tenant,
        settings.serve.data_dir.display()
    );
    let rt = runtime(threads)?;
    let served = rt.block_on(evomem_mcp::serve_stdio(server));
    drop(rt);
    service.close();
    served?;
    Ok(())
}

fn runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.clamp(1, 4))
        .enable_all()
        .build()?)
}
