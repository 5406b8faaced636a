//! `evomem bench service` and `evomem bench load` (the `serve` feature): the
//! HTTP service as a client sees it, against Mem0's figures and the targets,
//! and an open-loop load generator against a running `evomem serve`.

use crate::settings::Settings;
use anyhow::{bail, Context};
use std::path::PathBuf;

/// Flags of `evomem bench service`.
#[derive(clap::Args)]
pub struct ServiceArgs {
    /// ml-100k in RecBole atomic files (default: ~/.cache/evomem/data/ml-100k).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Memories held when searches are timed, comma-separated (the
    /// service is filled up to each in turn).
    #[arg(long, value_delimiter = ',', default_values_t = vec![10_000usize, 50_000])]
    sizes: Vec<usize>,
    /// Embedders to run: `minilm`, `minilm-int8`, `hashing`.
    #[arg(long, value_delimiter = ',', default_values_t = vec!["minilm".to_string(), "hashing".to_string()])]
    embedders: Vec<String>,
    /// Memories per add request (each user's texts gathered, then cut).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Requests as ml-100k's file orders the ratings: a request takes only
    /// one user's consecutive rows (mostly 1-2 memories; the bench's
    /// requests before December 2026).
    #[arg(long)]
    file_order: bool,
    /// Concurrent writing clients while the service is filled.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Sequential searches timed at each size.
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Threads of the service (embedding and request workers).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seed of the query choice.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Flags of `evomem bench load`.
#[derive(clap::Args)]
pub struct LoadArgs {
    /// Base URL of the service.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    url: String,
    /// API key (or set EVOMEM_KEY).
    #[arg(long, env = "EVOMEM_KEY")]
    key: String,
    /// Requests per second.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Seconds.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Share of adds (the rest are searches).
    #[arg(long, default_value_t = 0.2)]
    add_share: f64,
    /// Memories per add request.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Users the requests are spread over.
    #[arg(long, default_value_t = 100)]
    users: usize,
    /// Seed of the request mix and texts.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

// -------------------------------------------------------------- service --

pub fn bench_service(a: ServiceArgs, settings: &Settings) -> anyhow::Result<()> {
    use evomem_serve::bench::*;
    let data = a.data.clone().unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/evomem/data/ml-100k")
    });
    let texts = ml100k_texts(&data, 385).map_err(anyhow::Error::msg)?;
    let max = a.sizes.iter().copied().max().unwrap_or(0);
    if texts.len() < max {
        bail!(
            "{} holds {} ratings, fewer than --sizes {max}",
            data.display(),
            texts.len()
        );
    }
    if a.embedders.len() == 1 {
        println!(
            "bench service: {} ml-100k memory texts (first 10k from the first 385 users), {}, {} clients, {} sequential searches per size, {} service threads",
            max,
            if a.file_order {
                "requests in file order (one user's consecutive rows each)".to_string()
            } else {
                format!("up to {} memories of one user per request", a.batch)
            },
            a.clients,
            a.queries,
            a.threads
        );
    }
    let cfg = ServiceBenchConfig {
        sizes: a.sizes.clone(),
        batch: a.batch,
        clients: a.clients,
        queries: a.queries,
        seed: a.seed,
        threads: a.threads,
        file_order: a.file_order,
    };
    let mut all: Vec<ServiceBench> = Vec::new();
    if a.embedders.len() > 1 {
        // One process per embedder, so that each RSS figure is its own.
        for e in &a.embedders {
            all.append(&mut bench_in_child(&a, e, &data)?);
        }
    } else {
        for e in &a.embedders {
            let embedder = service_embedder(e, a.threads, settings)?;
            let tmp = tempfile_dir()?;
            let r = run_service_bench(embedder, &texts, &cfg, &tmp).map_err(anyhow::Error::msg)?;
            print_service_bench(&r);
            if let Err(err) = std::fs::remove_dir_all(&tmp) {
                eprintln!("note: could not remove {}: {err}", tmp.display());
            }
            all.push(r);
        }
    }
    if let [m, h, ..] = all.as_slice() {
        for (sm, sh) in m.sizes.iter().zip(&h.sizes) {
            println!(
                "  {} memories: {} ingest is {:.2}x {}'s, search p50 {:.2}x (embedding's share of the time)",
                sm.memories,
                m.embedder,
                sm.ingest_per_s / sh.ingest_per_s.max(1e-9),
                h.embedder,
                sm.search.p50_ms / sh.search.p50_ms.max(1e-9)
            );
        }
    }
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&all)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Run `bench service` for one embedder in a child process (its own RSS).
fn bench_in_child(
    a: &ServiceArgs,
    e: &str,
    data: &std::path::Path,
) -> anyhow::Result<Vec<evomem_serve::bench::ServiceBench>> {
    let exe = std::env::current_exe().context("locating the evomem binary")?;
    let json = tempfile_dir()?.join("one.json");
    let sizes = a
        .sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["bench", "service", "--embedders", e])
        .arg("--data")
        .arg(data)
        .arg("--sizes")
        .arg(sizes)
        .args(["--batch", &a.batch.to_string()])
        .args(["--clients", &a.clients.to_string()])
        .args(["--queries", &a.queries.to_string()])
        .args(["--threads", &a.threads.to_string()])
        .args(["--seed", &a.seed.to_string()])
        .args(a.file_order.then_some("--file-order"))
        .arg("--json")
        .arg(&json);
    let st = cmd
        .status()
        .context("running bench service for one embedder")?;
    if !st.success() {
        bail!("bench service --embedders {e} failed ({st})");
    }
    let text = std::fs::read_to_string(&json)?;
    let one = serde_json::from_str(&text)?;
    if let Some(d) = json.parent() {
        if let Err(err) = std::fs::remove_dir_all(d) {
            eprintln!("note: could not remove {}: {err}", d.display());
        }
    }
    Ok(one)
}

/// The embedder named by `--embedders`.
fn service_embedder(
    e: &str,
    threads: usize,
    settings: &Settings,
) -> anyhow::Result<std::sync::Arc<dyn evomem_core::Embedder>> {
    Ok(match e {
        "hashing" => std::sync::Arc::new(evomem_embed::HashingEmbedder::new(
            evomem_embed::FALLBACK_DIM,
        )),
        "minilm" | "minilm-int8" => {
            let dir = evomem_embed::minilm_dir(&settings.models_dir);
            if !dir.is_dir() {
                bail!(
                    "no MiniLM at {} (run scripts/fetch-models.sh)",
                    dir.display()
                );
            }
            let opts = evomem_embed::MiniLmOptions {
                threads: threads.max(1),
                precision: if e == "minilm-int8" {
                    evomem_embed::Precision::Int8
                } else {
                    evomem_embed::Precision::F32
                },
                ..evomem_embed::MiniLmOptions::default()
            };
            std::sync::Arc::new(evomem_embed::MiniLmEmbedder::load(&dir, opts)?)
        }
        other => bail!("--embedders: unknown `{other}` (minilm, minilm-int8, hashing)"),
    })
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let p = std::env::temp_dir().join(format!(
        "evomem-bench-service-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

pub fn bench_load(a: LoadArgs) -> anyhow::Result<()> {
    use evomem_serve::bench::*;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cfg = LoadConfig {
        url: a.url.clone(),
        key: a.key,
        rate: a.rate,
        duration: std::time::Duration::from_secs(a.duration),
        add_share: a.add_share,
        batch: a.batch,
        users: a.users,
        seed: a.seed,
    };
    println!(
        "bench load: {} req/s for {} s against {} ({:.0}% adds of {} memories, the rest searches)",
        a.rate,
        a.duration,
        a.url,
        a.add_share * 100.0,
        a.batch
    );
    let r = rt.block_on(run_load(cfg));
    println!(
        "sent {} (achieved {:.1} req/s), refused for overload (429/503) {} ({:.1}%), errors {}",
        r.sent,
        r.achieved_rate,
        r.refused,
        100.0 * r.refused as f64 / r.sent.max(1) as f64,
        r.errors
    );
    println!("latency of accepted requests:");
    for (name, l) in [("add", &r.add), ("search", &r.search)] {
        println!(
            "  {name:<6} n={:<6} p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            l.n, l.p50_ms, l.p99_ms, l.max_ms
        );
    }
    for e in &r.error_samples {
        println!("  error: {e}");
    }
    if r.errors > 0 {
        bail!("{} of {} requests failed", r.errors, r.sent);
    }
    Ok(())
}
