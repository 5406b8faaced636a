//! `evomem serve`: the memory engine as an HTTP service (see the
//! evomem-serve crate), plus `serve keys add` and `serve check`.

use crate::settings::Settings;
use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `evomem serve` (each overrides its `[serve]` setting).
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// Address to listen on (`serve.bind`).
    #[arg(long, global = true)]
    bind: Option<String>,
    /// Folder of the SQLite stores and the keys file (`serve.data_dir`).
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// `sqlite` or a postgres:// URL (`serve.store`).
    #[arg(long, global = true)]
    store: Option<String>,
    /// `minilm` or `hashing` (`serve.embedder`).
    #[arg(long, global = true)]
    embedder: Option<String>,
    /// The keys file (`serve.keys_file`).
    #[arg(long, global = true)]
    keys_file: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Make an API key for a tenant; prints it once, stores only its hash.
    Keys {
        #[command(subcommand)]
        cmd: KeysCmd,
    },
    /// Open every tenant's store, check that its log, records and index
    /// agree, and exit (non-zero on any disagreement).
    Check,
}

#[derive(clap::Subcommand)]
enum KeysCmd {
    /// Add a key.
    Add {
        /// Tenant name (1-32 of [a-z0-9_], starting with a letter).
        #[arg(long)]
        tenant: String,
        /// A label for people.
        #[arg(long, default_value = "")]
        label: String,
    },
}

pub fn run(args: Args, mut settings: Settings) -> anyhow::Result<()> {
    let s = &mut settings.serve;
    if let Some(v) = args.bind {
        s.bind = v;
    }
    if let Some(v) = args.data_dir {
        s.data_dir = v;
    }
    if let Some(v) = args.store {
        s.store = v;
    }
    if let Some(v) = args.embedder {
        s.embedder = v;
    }
    if let Some(v) = args.keys_file {
        s.keys_file = Some(v);
    }
    s.validate()?;
    settings.validate()?;
    let keys_path = settings.serve.keys_path();
    if let Some(Action::Keys {
        cmd: KeysCmd::Add { tenant, label },
    }) = &args.action
    {
        let key = evomem_serve::auth::add_key(&keys_path, tenant, label)?;
        eprintln!(
            "added a key for tenant `{tenant}` to {} (only its hash is stored; keep the key):",
            keys_path.display()
        );
        println!("{key}");
        return Ok(());
    }
    let keys = evomem_serve::auth::KeyRing::load(&keys_path)?;
    if keys.is_empty() {
        anyhow::bail!(
            "no API keys in {}: make one with `evomem serve keys add --tenant NAME`",
            keys_path.display()
        );
    }
    let embedder: Arc<dyn evomem_core::Embedder> = if settings.serve.embedder == "hashing" {
        Arc::new(evomem_embed::HashingEmbedder::new(
            evomem_embed::FALLBACK_DIM,
        ))
    } else {
        let (e, notice) = evomem_embed::load_default(&settings.models_dir, settings.threads())
            .context("loading the embedder")?;
        if let Some(n) = notice {
            eprintln!("{n}");
        }
        e
    };
    let hub = evomem_llm::LlmHub::from_config(&settings.llm, evomem_llm::CacheSettings::off())
        .context("building the LLM hub")?;
    let shared = evomem_serve::tenant::Shared {
        config: settings.serve.clone(),
        embedder,
        hub: Arc::new(hub),
        seed: settings.eval.seed,
        metrics: Arc::default(),
    };
    if let Some(Action::Check) = args.action {
        for (tenant, n) in evomem_serve::check(shared, &keys)? {
            println!("tenant {tenant}: ok ({n} memories; log, records and index agree)");
        }
        return Ok(());
    }
    evomem_serve::run(shared, keys, settings.threads())?;
    Ok(())
}
