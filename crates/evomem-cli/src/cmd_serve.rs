//! `evomem serve`: the memory engine as an HTTP service (see the
//! evomem-serve crate), plus `serve keys add|list|revoke|rotate`,
//! `serve check`, `serve backup` and `serve restore`. A running service reads its keys file again when it
//! changes, so `keys revoke` and `keys rotate` take effect without a restart.

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
    /// `minilm`, `minilm-int8` (int8 dense layers) or `hashing`
    /// (`serve.embedder`).
    #[arg(long, global = true)]
    embedder: Option<String>,
    /// The keys file (`serve.keys_file`).
    #[arg(long, global = true)]
    keys_file: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Manage API keys (the file holds only their hashes).
    Keys {
        #[command(subcommand)]
        cmd: KeysCmd,
    },
    /// Open every tenant's store, check that its log, records and index
    /// agree, and exit (non-zero on any disagreement).
    Check,
    /// Copy every tenant's SQLite store (or one, with --tenant) with
    /// SQLite's online backup API, while the service may keep writing.
    Backup {
        /// A new or empty folder (every tenant, plus the keys file), or a
        /// new file with --tenant.
        #[arg(long)]
        out: PathBuf,
        /// Back up only this tenant, to the file --out.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Restore a backup into a data folder that does not hold its tenants;
    /// then run `serve check --data-dir DIR`.
    Restore {
        /// A backup folder, or one tenant's backup file.
        #[arg(long)]
        from: PathBuf,
        /// The data folder to restore into.
        #[arg(long)]
        data: PathBuf,
        /// The tenant of a one-file backup (default: the file's stem); with
        /// a folder, restore only this tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
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
    /// List the keys: id (first 12 hex digits of the hash), tenant, label.
    List,
    /// Remove a key; a running service refuses it within a second.
    Revoke {
        /// The key's id (at least 8 hex digits, from `keys list`).
        #[arg(long)]
        id: String,
    },
    /// Replace a key by a new one of the same tenant and label; prints the
    /// new key once. The old key stops working when the new one starts.
    Rotate {
        /// The key's id (at least 8 hex digits, from `keys list`).
        #[arg(long)]
        id: String,
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
    if let Some(Action::Keys { cmd }) = &args.action {
        return keys(cmd, &keys_path);
    }
    if let Some(Action::Restore { from, data, tenant }) = &args.action {
        for c in evomem_serve::backup::restore(from, data, tenant.as_deref())? {
            println!(
                "restored tenant {} to {} ({} ops, {} records)",
                c.tenant,
                c.path.display(),
                c.report.ops,
                c.report.records
            );
        }
        eprintln!(
            "check it with: evomem serve check --data-dir {}",
            data.display()
        );
        return Ok(());
    }
    let keys = evomem_serve::auth::KeyRing::load(&keys_path)?;
    if let Some(Action::Backup { out, tenant }) = &args.action {
        let copied = evomem_serve::backup::backup(&settings.serve, &keys, tenant.as_deref(), out)?;
        for c in copied {
            println!(
                "backed up tenant {} to {} ({} ops, {} records)",
                c.tenant,
                c.path.display(),
                c.report.ops,
                c.report.records
            );
        }
        return Ok(());
    }
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
        let (e, notice) = evomem_embed::load_default_as(
            &settings.models_dir,
            settings.threads(),
            settings.serve.bulk_nice,
            settings.serve.embedder == "minilm-int8",
        )
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
    let live = evomem_serve::auth::LiveKeys::watch(&keys_path, evomem_serve::auth::KEYS_CHECK_MS)?;
    evomem_serve::run(shared, live, settings.threads())?;
    Ok(())
}

fn keys(cmd: &KeysCmd, path: &std::path::Path) -> anyhow::Result<()> {
    use evomem_serve::auth;
    match cmd {
        KeysCmd::Add { tenant, label } => {
            let key = auth::add_key(path, tenant, label)?;
            eprintln!(
                "added a key for tenant `{tenant}` to {} (only its hash is stored; keep the key):",
                path.display()
            );
            println!("{key}");
        }
        KeysCmd::List => {
            let keys = auth::list_keys(path)?;
            println!("{:<12}  {:<32}  label", "id", "tenant");
            for k in &keys {
                println!("{:<12}  {:<32}  {}", auth::key_id(k), k.tenant, k.label);
            }
            eprintln!("{} keys in {}", keys.len(), path.display());
        }
        KeysCmd::Revoke { id } => {
            let k = auth::revoke_key(path, id)?;
            eprintln!(
                "revoked key {} of tenant `{}` ({}); a running service refuses it within {} ms",
                auth::key_id(&k),
                k.tenant,
                path.display(),
                auth::KEYS_CHECK_MS
            );
        }
        KeysCmd::Rotate { id } => {
            let (key, old) = auth::rotate_key(path, id)?;
            eprintln!(
                "replaced key {} of tenant `{}` in {} (the old key stops working within {} ms; keep the new one):",
                auth::key_id(&old),
                old.tenant,
                path.display(),
                auth::KEYS_CHECK_MS
            );
            println!("{key}");
        }
    }
    Ok(())
}
