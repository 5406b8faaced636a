//! `evomem serve`: the memory engine as an HTTP service (see the
//! evomem-serve crate), plus `serve keys add|list|revoke|rotate`,
//! `serve check`, `serve backup`, `serve restore` and `serve reembed`. A running service reads its keys file again when it
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
    /// `auto` (the folder's; `minilm-int8` for a new folder), `minilm`,
    /// `minilm-int8` (int8 dense layers) or `hashing` (`serve.embedder`).
    /// With `serve reembed`: the embedder to move the folder to.
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
    /// Move the data folder to the embedder `--embedder` names: re-embed
    /// every memory in batches at bulk priority, then swap each tenant's
    /// vectors and index at once; verify as `serve check` does, and make
    /// it the folder's embedder. Through the running service when one
    /// runs on the folder (it keeps serving), else in this process.
    /// Resumes after a kill.
    Reembed {
        /// Texts embedded per batch.
        #[arg(long, default_value_t = evomem_serve::reembed::DEFAULT_BATCH)]
        batch: usize,
        /// Seconds to wait for a running service to take the request up.
        #[arg(long, default_value_t = 10)]
        pickup_s: u64,
    },
    /// Restore a backup into the data folder `--data-dir` names (it must
    /// not hold the backup's tenants); then run `serve check --data-dir DIR`.
    Restore {
        /// A backup folder, or one tenant's backup file.
        #[arg(long)]
        from: PathBuf,
        /// Deprecated: `--data-dir DIR` says the same (accepted, with a
        /// notice).
        #[arg(long, hide = true)]
        data: Option<PathBuf>,
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

/// Refuse a `serve` flag that the subcommand does not use (`serve keys
/// --bind`, `serve restore --data-dir`), naming it: a flag is never
/// accepted and then ignored.
fn refuse_unused_flags(args: &Args) -> anyhow::Result<()> {
    let (name, uses): (&str, &[&str]) = match &args.action {
        None => return Ok(()),
        Some(Action::Keys { .. }) => ("serve keys", &["--data-dir", "--keys-file"]),
        Some(Action::Check) => (
            "serve check",
            &["--data-dir", "--store", "--embedder", "--keys-file"],
        ),
        Some(Action::Backup { .. }) => ("serve backup", &["--data-dir", "--store", "--keys-file"]),
        Some(Action::Reembed { .. }) => (
            "serve reembed",
            &["--data-dir", "--store", "--embedder", "--keys-file"],
        ),
        Some(Action::Restore { .. }) => ("serve restore", &["--data-dir"]),
    };
    let given = [
        ("--bind", args.bind.is_some()),
        ("--data-dir", args.data_dir.is_some()),
        ("--store", args.store.is_some()),
        ("--embedder", args.embedder.is_some()),
        ("--keys-file", args.keys_file.is_some()),
    ];
    for (flag, set) in given {
        if set && !uses.contains(&flag) {
            anyhow::bail!("evomem {name} does not use {flag}");
        }
    }
    Ok(())
}

pub fn run(args: Args, mut settings: Settings) -> anyhow::Result<()> {
    refuse_unused_flags(&args)?;
    if let Some(Action::Restore { from, data, tenant }) = &args.action {
        // The folder to restore into is named explicitly: never the
        // settings' data folder by default.
        let into = match (&args.data_dir, data) {
            (Some(d), None) => d.clone(),
            (None, Some(d)) => {
                eprintln!(
                    "notice: serve restore --data is deprecated; use --data-dir {} (the flag every serve command has)",
                    d.display()
                );
                d.clone()
            }
            (Some(_), Some(_)) => {
                anyhow::bail!(
                    "serve restore: --data is the old name of --data-dir; give --data-dir only"
                )
            }
            (None, None) => {
                anyhow::bail!("serve restore: name the folder to restore into with --data-dir")
            }
        };
        for c in evomem_serve::backup::restore(from, &into, tenant.as_deref())? {
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
            into.display()
        );
        return Ok(());
    }
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
    // `serve reembed --embedder X` names the target, not the folder's.
    let reembed_to = match &args.action {
        Some(Action::Reembed { .. }) => match args.embedder.clone() {
            Some(to) if evomem_serve::embedders::NAMES.contains(&to.as_str()) => Some(to),
            Some(to) => anyhow::bail!(
                "serve reembed --embedder: `{to}` is not an embedder (minilm, minilm-int8 or hashing)"
            ),
            None => anyhow::bail!(
                "serve reembed: name the embedder to move the folder to with --embedder (minilm, minilm-int8 or hashing)"
            ),
        },
        _ => {
            if let Some(v) = args.embedder {
                s.embedder = v;
            }
            None
        }
    };
    if let Some(v) = args.keys_file {
        s.keys_file = Some(v);
    }
    s.validate()?;
    settings.validate()?;
    let keys_path = settings.serve.keys_path();
    if let Some(Action::Keys { cmd }) = &args.action {
        return keys(cmd, &keys_path);
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
    let shared = open_shared(&settings, &keys.tenants())?;
    let embedder = shared.embedder.clone();
    if let Some(Action::Check) = args.action {
        for (tenant, n) in evomem_serve::check(shared, &keys)? {
            println!("tenant {tenant}: ok ({n} memories; log, records and index agree)");
        }
        return Ok(());
    }
    write_manifest(&settings, &keys.tenants(), embedder.as_ref())?;
    if let (Some(Action::Reembed { batch, pickup_s }), Some(to)) = (&args.action, reembed_to) {
        return reembed(shared, &keys, &to, *batch, *pickup_s);
    }
    let live = evomem_serve::auth::LiveKeys::watch(&keys_path, evomem_serve::auth::KEYS_CHECK_MS)?;
    evomem_serve::run(shared, live, settings.threads())?;
    Ok(())
}

/// The service's shared parts for the data folder of `settings.serve`
/// holding `tenants`: the folder's embedder (resolved as `serve.embedder`
/// says, never replaced by another one but for a new folder under `auto`
/// without the model), the LLM hub and the other embedders a re-embedded
/// tenant may need. `evomem serve` and `evomem mcp --data-dir` both open
/// a folder through it.
pub(crate) fn open_shared(
    settings: &Settings,
    tenants: &[String],
) -> anyhow::Result<evomem_serve::tenant::Shared> {
    use evomem_serve::embedders::{self, Source};
    let (name, source) = embedders::resolve(&settings.serve, tenants)?;
    let set = embedders::EmbedderSet::with_loader(embedder_loader(settings));
    let embedder =
        if source == Source::New && !evomem_embed::minilm_dir(&settings.models_dir).is_dir() {
            // A new folder under `auto` without the model: what the f32
            // default always did (hashing, with a notice), rather than
            // refuse to start. Nobody asked for a model here.
            let (e, notice) = evomem_embed::load_default_as(
                &settings.models_dir,
                settings.threads(),
                settings.serve.bulk_nice,
                false,
            )
            .context("loading the embedder")?;
            if let Some(n) = notice {
                eprintln!("{n}");
            }
            e
        } else {
            // The embedder named, or the folder's: never another one in its
            // place (`minilm` without a model folder is refused, not hashing).
            set.by_name(&name)
                .map_err(anyhow::Error::msg)
                .with_context(|| {
                    format!("loading the `{name}` embedder (serve.embedder, {source:?})")
                })?
        };
    let hub = evomem_llm::LlmHub::from_config(&settings.llm, evomem_llm::CacheSettings::off())
        .context("building the LLM hub")?;
    let shared = evomem_serve::tenant::Shared {
        config: settings.serve.clone(),
        embedder,
        hub: Arc::new(hub),
        seed: settings.eval.seed,
        metrics: Arc::default(),
        embedders: set,
    };
    Ok(shared)
}

/// Write the folder's `embedder.json` if it has none: its embedder,
/// decided once (evomem_serve::embedders).
pub(crate) fn write_manifest(
    settings: &Settings,
    tenants: &[String],
    embedder: &dyn evomem_core::Embedder,
) -> anyhow::Result<()> {
    use evomem_serve::embedders;
    if embedders::read_manifest(&settings.serve.data_dir)?.is_none() {
        let m = embedders::manifest_for(&settings.serve, tenants, embedder)?;
        embedders::write_manifest(&settings.serve.data_dir, &m)?;
    }
    Ok(())
}

/// Loads an embedder by name with the settings' models folder, threads
/// and bulk niceness.
fn embedder_loader(settings: &Settings) -> evomem_serve::embedders::Loader {
    let models = settings.models_dir.clone();
    let threads = settings.threads();
    let nice = settings.serve.bulk_nice;
    Arc::new(
        move |name: &str| -> Result<Arc<dyn evomem_core::Embedder>, String> {
            match name {
                "hashing" => Ok(Arc::new(evomem_embed::HashingEmbedder::new(
                    evomem_embed::FALLBACK_DIM,
                ))),
                "minilm" | "minilm-int8" => {
                    let (e, notice) = evomem_embed::load_default_as(
                        &models,
                        threads,
                        nice,
                        name == "minilm-int8",
                    )
                    .map_err(|e| e.to_string())?;
                    if let Some(n) = notice {
                        eprintln!("{n}");
                    }
                    Ok(e)
                }
                other => Err(format!(
                    "`{other}` is not an embedder (minilm, minilm-int8, hashing)"
                )),
            }
        },
    )
}

/// `serve reembed`: in this process when no service runs on the folder,
/// else through the service (evomem_serve::reembed).
fn reembed(
    shared: evomem_serve::tenant::Shared,
    keys: &evomem_serve::auth::KeyRing,
    to: &str,
    batch: usize,
    pickup_s: u64,
) -> anyhow::Result<()> {
    use evomem_serve::reembed as job;
    let dir = shared.config.data_dir.clone();
    let mut shown = std::time::Instant::now();
    let mut show = |s: &job::Status| {
        if shown.elapsed() < std::time::Duration::from_secs(2) && s.state == "running" {
            return;
        }
        shown = std::time::Instant::now();
        let (done, total) = s
            .progress
            .iter()
            .fold((0, 0), |(d, t), p| (d + p.1, t + p.2));
        eprintln!(
            "reembed to {}: {} tenant(s) swapped of {}, {done}/{total} texts staged, {:.1} s",
            s.embedder,
            s.tenants.len(),
            s.progress.len(),
            s.elapsed_s
        );
    };
    let status = match job::offline_lock(&dir)? {
        Some(_lock) => {
            eprintln!(
                "no service runs on {}: re-embedding here (a service started meanwhile refuses to start until this ends)",
                dir.display()
            );
            let target = shared.embedders.by_name(to).map_err(anyhow::Error::msg)?;
            job::run_offline(shared, keys, target, to, batch, &mut show)?
        }
        None => {
            let id = format!(
                "{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0)
            );
            job::request(
                &dir,
                &job::Request {
                    embedder: to.to_string(),
                    batch,
                    id: id.clone(),
                },
            )?;
            eprintln!(
                "a service runs on {}: asked it to re-embed (it keeps serving meanwhile)",
                dir.display()
            );
            let asked = std::time::Instant::now();
            loop {
                std::thread::sleep(std::time::Duration::from_millis(500));
                match job::read_status(&dir).filter(|s| s.id == id) {
                    Some(s) if s.state != "running" => break s,
                    Some(s) => show(&s),
                    None if asked.elapsed().as_secs() > pickup_s => anyhow::bail!(
                        "the service on {} did not take the request up within {pickup_s} s ({} is still there)",
                        dir.display(),
                        job::job_dir(&dir).join("request.json").display()
                    ),
                    None => {}
                }
            }
        }
    };
    show(&status);
    for t in &status.tenants {
        if t.already {
            println!("tenant {}: already on {}", t.tenant, t.to);
        } else {
            println!(
                "tenant {}: {} -> {}: {} texts ({} resumed, {} staged, {} during the swap), {} ops rewritten, staging {:.1} s, swap {} ms (writes waited, reads did not), graphs {} ms after it",
                t.tenant, t.from, t.to, t.texts, t.resumed, t.staged, t.during_swap, t.ops_rewritten, t.stage_s, t.swap_ms, t.graphs_ms
            );
        }
    }
    if let Some(e) = &status.error {
        anyhow::bail!("reembed failed: {e} (run it again to resume)");
    }
    for (t, n) in &status.checked {
        println!("tenant {t}: ok ({n} memories; log, records and index agree)");
    }
    println!(
        "the folder's embedder is now {to} ({})",
        evomem_serve::embedders::manifest_path(&dir).display()
    );
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
