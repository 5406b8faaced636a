//! `evomem bench service` and `evomem bench load`: the service measured as
//! a client sees it, over HTTP on 127.0.0.1.
//!
//! **Data** (`bench service`): memory texts made from ml-100k ratings, in
//! the file order of `ml-100k.inter`. The first 10,000 are the ratings of
//! the first 385 distinct users of the file (in file order, the first
//! 10,000 of their rows); to reach larger sizes the rest of the file follows
//! in order. Each text is `User U rated TITLE (GENRES) R/5`, e.g.
//! `User 196 rated Kolya (Comedy) 3/5`. Memories are added for their user in
//! batches of up to `batch` (one user per request: each user's texts of the
//! phase gathered, then cut), from `clients` concurrent clients; the writer
//! groups them into commits. (Before December 2026 a request took only one
//! user's consecutive rows of the file, which interleaves users: 1-2
//! memories a request whatever `batch` said; `--file-order` keeps that.)
//!
//! **Pipeline**: before the service starts, the embedder alone embeds the
//! first size's texts (at most 2,000) in batches of 32, as `bench embed`
//! does; the report holds the service's ingest against that rate, from the
//! same run (issue 41: at least 90%).
//!
//! **Search** is measured at each size with `queries` sequential requests
//! (one in flight, so latency is not queueing): `movies like TITLE` for a
//! random rated title, for a random loaded user, top 10.
//!
//! **RSS** is the whole process (client and server share it): its resident
//! set after each phase, and before the service started (the embedder's
//! weights included), so the service's own share is the difference.
//!
//! **`bench load`**: an open-loop generator at a fixed request rate for a
//! fixed time (each request is sent on schedule, whether or not earlier ones
//! have answered), mixing adds and searches, against any running service.
//! It reports p50/p99/max latency per kind and the error count.

use crate::auth::KeyRing;
use crate::tenant::Shared;
use crate::{ServeConfig, Service};
use evomem_core::Embedder;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One memory text of the benchmark.
#[derive(Debug, Clone)]
pub struct BenchText {
    /// The user.
    pub user: String,
    /// `User U rated TITLE (GENRES) R/5`.
    pub text: String,
    /// The title (for queries).
    pub title: String,
}

/// Load the benchmark texts from an ml-100k folder of RecBole atomic files
/// (`ml-100k.inter`, `ml-100k.item`); see the module docs for the order.
pub fn ml100k_texts(dir: &Path, first_users: usize) -> Result<Vec<BenchText>, String> {
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    let items = read("ml-100k.item")?;
    let mut titles: HashMap<String, (String, String)> = HashMap::new();
    for (n, line) in items.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 4 {
            return Err(format!("ml-100k.item line {}: expected 4 fields", n + 1));
        }
        titles.insert(
            f[0].to_string(),
            (f[1].to_string(), f[3].replace(' ', ", ")),
        );
    }
    let inter = read("ml-100k.inter")?;
    let mut rows = Vec::new();
    for (n, line) in inter.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 3 {
            return Err(format!("ml-100k.inter line {}: expected 4 fields", n + 1));
        }
        let (title, genres) = titles
            .get(f[1])
            .cloned()
            .ok_or_else(|| format!("ml-100k.inter line {}: unknown item {}", n + 1, f[1]))?;
        rows.push(BenchText {
            user: f[0].to_string(),
            text: format!("User {} rated {title} ({genres}) {}/5", f[0], f[2]),
            title,
        });
    }
    // First the rows of the first `first_users` distinct users, then the rest.
    let mut seen: Vec<&str> = Vec::new();
    for r in &rows {
        if seen.len() == first_users {
            break;
        }
        if !seen.contains(&r.user.as_str()) {
            seen.push(&r.user);
        }
    }
    let chosen: std::collections::HashSet<String> = seen.iter().map(|s| s.to_string()).collect();
    let (mut head, tail): (Vec<BenchText>, Vec<BenchText>) =
        rows.into_iter().partition(|r| chosen.contains(&r.user));
    head.extend(tail);
    Ok(head)
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Latency {
    /// Requests.
    pub n: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

fn latency(mut v: Vec<f64>) -> Latency {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i.min(v.len() - 1)]
    };
    Latency {
        n: v.len(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: v.last().copied().unwrap_or(0.0),
    }
}

/// Resident set size of this process in MiB (Linux), 0 elsewhere.
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One size of `bench service`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SizeResult {
    /// Memories held.
    pub memories: usize,
    /// Memories added in this phase per second (batched, concurrent).
    pub ingest_per_s: f64,
    /// Search latency at this size.
    pub search: Latency,
    /// Process RSS after the phase, MiB.
    pub rss_mib: f64,
}

/// `bench service` for one embedder.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ServiceBench {
    /// Embedder id.
    pub embedder: String,
    /// RSS before the service started (embedder loaded), MiB.
    pub rss_before_mib: f64,
    /// The embedder alone on the first size's texts (at most
    /// [`EMBED_ALONE_TEXTS`]), in batches of [`EMBED_ALONE_BATCH`] as
    /// `bench embed` runs it, texts/s: the rate the service's ingest is
    /// held against (issue 41: at least 90% of it).
    #[serde(default)]
    pub embed_alone_per_s: f64,
    /// Seconds from start to ready, at the end, on a restart over the
    /// largest size (stores opened, indexes rebuilt).
    pub restart_ready_ms: u64,
    /// By size.
    pub sizes: Vec<SizeResult>,
}

/// Settings of `bench service`.
#[derive(Debug, Clone)]
pub struct ServiceBenchConfig {
    /// Sizes to measure at, ascending.
    pub sizes: Vec<usize>,
    /// Memories per request.
    pub batch: usize,
    /// Concurrent writing clients.
    pub clients: usize,
    /// Sequential searches per size.
    pub queries: usize,
    /// Seed of the query choice.
    pub seed: u64,
    /// Tokio worker threads of the service.
    pub threads: usize,
    /// Requests as the file orders the texts ([`add_requests`]).
    pub file_order: bool,
}

const BENCH_KEY: &str = "evk_bench_service_key";

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Result<Value, String> {
    let r = client
        .post(url)
        .bearer_auth(BENCH_KEY)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let st = r.status();
    let v: Value = r.json().await.map_err(|e| e.to_string())?;
    if st.is_success() {
        Ok(v)
    } else {
        Err(format!("{st}: {v}"))
    }
}

/// The add requests for `texts`: one user per request, up to `batch`
/// memories each. By default each user's texts are gathered (users in the
/// order they first appear, their texts in file order) and cut into
/// requests of `batch`; with `file_order`, a request takes only the run of
/// consecutive texts of one user, as the file lists them (ml-100k's file
/// interleaves users, so that is mostly 1-2 memories a request).
pub fn add_requests(texts: &[BenchText], batch: usize, file_order: bool) -> Vec<Value> {
    let batch = batch.max(1);
    let mut runs: Vec<(&str, Vec<&str>)> = Vec::new();
    if file_order {
        for t in texts {
            match runs.last_mut() {
                Some((u, m)) if *u == t.user && m.len() < batch => m.push(&t.text),
                _ => runs.push((&t.user, vec![&t.text])),
            }
        }
    } else {
        let mut at: HashMap<&str, usize> = HashMap::new();
        let mut by_user: Vec<(&str, Vec<&str>)> = Vec::new();
        for t in texts {
            let i = *at.entry(&t.user).or_insert_with(|| {
                by_user.push((&t.user, Vec::new()));
                by_user.len() - 1
            });
            by_user[i].1.push(&t.text);
        }
        for (u, m) in by_user {
            for c in m.chunks(batch) {
                runs.push((u, c.to_vec()));
            }
        }
    }
    runs.into_iter()
        .map(|(u, m)| {
            let mems: Vec<Value> = m.into_iter().map(|t| json!({"text": t})).collect();
            json!({"user_id": u, "memories": mems})
        })
        .collect()
}

/// Most texts the embedder-alone pass of `bench service` embeds.
pub const EMBED_ALONE_TEXTS: usize = 2000;
/// Batch of the embedder-alone pass (`bench embed`'s batch).
pub const EMBED_ALONE_BATCH: usize = 32;

/// The embedder alone over `texts` (at most [`EMBED_ALONE_TEXTS`]), in
/// batches of [`EMBED_ALONE_BATCH`], on the embedder's own pool: texts/s.
pub fn embed_alone_rate(embedder: &dyn Embedder, texts: &[BenchText]) -> Result<f64, String> {
    let sample = &texts[..texts.len().min(EMBED_ALONE_TEXTS)];
    let t0 = Instant::now();
    for chunk in sample.chunks(EMBED_ALONE_BATCH) {
        let refs: Vec<&str> = chunk.iter().map(|t| t.text.as_str()).collect();
        embedder.embed(&refs).map_err(|e| e.to_string())?;
    }
    Ok(sample.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9))
}

/// Run `bench service` with `embedder` over `texts`, in a fresh data folder.
pub fn run_service_bench(
    embedder: Arc<dyn Embedder>,
    texts: &[BenchText],
    cfg: &ServiceBenchConfig,
    data_dir: &Path,
) -> Result<ServiceBench, String> {
    let first = cfg.sizes.first().copied().unwrap_or(0).min(texts.len());
    let embed_alone_per_s = embed_alone_rate(embedder.as_ref(), &texts[..first])?;
    let rss_before = rss_mib();
    let make = |dir: &Path| Shared {
        config: ServeConfig {
            data_dir: dir.to_path_buf(),
            rate_limit_per_s: 0.0,
            max_batch: cfg.batch.max(1),
            ..ServeConfig::default()
        },
        embedder: embedder.clone(),
        hub: Arc::new(evomem_llm::LlmHub::offline()),
        seed: cfg.seed,
        metrics: Arc::default(),
        embedders: Default::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let keys = || KeyRing::from_plain([(BENCH_KEY, "bench")]);
    let mut sizes = Vec::new();
    let shared = make(data_dir);
    rt.block_on(async {
        let service = Service::start(shared, keys()).map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let base = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(service.serve(listener, async move {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::new();
        let mut loaded = 0usize;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
        for &size in &cfg.sizes {
            let size = size.min(texts.len());
            let reqs = add_requests(&texts[loaded..size], cfg.batch, cfg.file_order);
            let reqs = Arc::new(reqs);
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let t0 = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..cfg.clients.max(1) {
                let (client, reqs, next, url) = (
                    client.clone(),
                    reqs.clone(),
                    next.clone(),
                    format!("{base}/v1/memories"),
                );
                tasks.push(tokio::spawn(async move {
                    loop {
                        let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(body) = reqs.get(j) else {
                            return Ok::<(), String>(());
                        };
                        post(&client, &url, body).await?;
                    }
                }));
            }
            for t in tasks {
                t.await.map_err(|e| e.to_string())??;
            }
            let secs = t0.elapsed().as_secs_f64();
            let added = size - loaded;
            loaded = size;
            let url = format!("{base}/v1/memories/search");
            let mut lat = Vec::with_capacity(cfg.queries);
            for _ in 0..cfg.queries {
                let pick = &texts[rng.gen_range(0..loaded)];
                let body = json!({"user_id": texts[rng.gen_range(0..loaded)].user, "query": format!("movies like {}", pick.title), "k": 10});
                let t = Instant::now();
                post(&client, &url, &body).await?;
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            sizes.push(SizeResult {
                memories: loaded,
                ingest_per_s: added as f64 / secs.max(1e-9),
                search: latency(lat),
                rss_mib: rss_mib(),
            });
        }
        let _ = stop.send(());
        server
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok::<(), String>(())
    })?;
    // Time to ready on a restart over what was loaded.
    let t0 = Instant::now();
    let svc = Service::start(make(data_dir), keys()).map_err(|e| e.to_string())?;
    let restart_ready_ms = t0.elapsed().as_millis() as u64;
    drop(svc);
    Ok(ServiceBench {
        embedder: embedder.model_id().to_string(),
        rss_before_mib: rss_before,
        embed_alone_per_s,
        restart_ready_ms,
        sizes,
    })
}

/// Mem0 2.2.1, fully local, on a machine of this class (issue 15): ingest
/// memories/s at 10k, search p50/p99 ms at 10k and 50k, RSS MB at 10k.
pub const MEM0: (f64, (f64, f64), (f64, f64), f64) =
    (111.0, (105.0, 146.0), (459.0, 538.0), 1060.0);

/// Print one `bench service` table, with ratios against Mem0's figures and
/// the targets.
pub fn print_service_bench(b: &ServiceBench) {
    println!(
        "\n== bench service: {} (RSS before start {:.0} MiB; restart to ready over {} memories: {} ms)",
        b.embedder,
        b.rss_before_mib,
        b.sizes.last().map_or(0, |s| s.memories),
        b.restart_ready_ms
    );
    println!(
        "{:>9} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "memories", "ingest/s", "p50 ms", "p99 ms", "max ms", "RSS MiB"
    );
    for s in &b.sizes {
        println!(
            "{:>9} {:>12.0} {:>9.2} {:>9.2} {:>9.2} {:>9.0}",
            s.memories,
            s.ingest_per_s,
            s.search.p50_ms,
            s.search.p99_ms,
            s.search.max_ms,
            s.rss_mib
        );
    }
    // The hashing embedder is no model: its ingest is the engine's rate.
    if let Some(s) = b.sizes.first().filter(|_| !b.embedder.starts_with("hash")) {
        let share = s.ingest_per_s / b.embed_alone_per_s.max(1e-9);
        println!(
            "  pipeline: ingest at {} memories {:.0}/s = {:.0}% of the embedder alone on the same texts ({:.0}/s, batches of {EMBED_ALONE_BATCH}, this run; target >= 90%: {})",
            s.memories,
            s.ingest_per_s,
            100.0 * share,
            b.embed_alone_per_s,
            if share >= 0.9 { "met" } else { "NOT met" },
        );
    }
    let (m_ingest, m10, m50, m_rss) = MEM0;
    if let Some(s) = b.sizes.iter().find(|s| s.memories == 10_000) {
        println!(
            "  at 10k: ingest {:.1}x Mem0 ({m_ingest}/s; target >= 1000/s: {}), search p99 {:.2} ms = Mem0/{:.0} ({} ms; target <= 5 ms: {}), RSS {:.0} MiB ({:.2}x Mem0's {m_rss} MB; target <= 265 MB: {})",
            s.ingest_per_s / m_ingest,
            if s.ingest_per_s >= INGEST_GOAL_PER_S { "met" } else { "NOT met" },
            s.search.p99_ms,
            m10.1 / s.search.p99_ms.max(1e-9),
            m10.1,
            if s.search.p99_ms <= 5.0 { "met" } else { "NOT met" },
            s.rss_mib,
            rss_mb(s) / m_rss,
            if rss_mb(s) <= RSS_GOAL_MB { "met" } else { "NOT met" },
        );
    }
    if let Some(s) = b.sizes.iter().find(|s| s.memories == 50_000) {
        println!(
            "  at 50k: search p50/p99 {:.2}/{:.2} ms = Mem0/{:.0} at p99 ({}/{} ms; target p99 <= 10 ms: {})",
            s.search.p50_ms,
            s.search.p99_ms,
            m50.1 / s.search.p99_ms.max(1e-9),
            m50.0,
            m50.1,
            if s.search.p99_ms <= 10.0 { "met" } else { "NOT met" },
        );
    }
    if b.embedder.contains("int8") {
        println!("  {}", int8_goals(b));
    }
}

/// Ingest goal at 10k memories (issues 37 and 41), memories/s.
const INGEST_GOAL_PER_S: f64 = 1000.0;
/// RSS goal at 10k memories (issues 37 and 41), MB (10⁶ bytes).
const RSS_GOAL_MB: f64 = 265.0;

/// A size's RSS in MB (10⁶ bytes), the goals' unit.
fn rss_mb(s: &SizeResult) -> f64 {
    s.rss_mib * 1.048_576
}

/// The int8 MiniLM's own goals (issue 41: ingest ≥ 1,000/s, search p99 ≤
/// 2 ms and RSS ≤ 265 MB at 10k memories, p99 ≤ 5 ms at 50k), each
/// `met`, `NOT met` or `not run` (its size was not in this run).
fn int8_goals(b: &ServiceBench) -> String {
    let verdict = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "not run",
    };
    let at = |n: usize| b.sizes.iter().find(|s| s.memories == n);
    let s10 = at(10_000);
    let s50 = at(50_000);
    format!(
        "int8 goals (issue 41): ingest >= 1000/s at 10k: {}, search p99 <= 2 ms at 10k: {}, <= 5 ms at 50k: {}, RSS <= 265 MB at 10k: {}",
        verdict(s10.map(|s| s.ingest_per_s >= INGEST_GOAL_PER_S)),
        verdict(s10.map(|s| s.search.p99_ms <= 2.0)),
        verdict(s50.map(|s| s.search.p99_ms <= 5.0)),
        verdict(s10.map(|s| rss_mb(s) <= RSS_GOAL_MB)),
    )
}

/// Settings of `bench load`.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Service base URL (`http://127.0.0.1:7700`).
    pub url: String,
    /// API key.
    pub key: String,
    /// Requests per second, total.
    pub rate: f64,
    /// How long.
    pub duration: Duration,
    /// Share of requests that add (the rest search).
    pub add_share: f64,
    /// Memories per add.
    pub batch: usize,
    /// Users spread over.
    pub users: usize,
    /// Seed.
    pub seed: u64,
}

/// What `bench load` measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Requests sent.
    pub sent: usize,
    /// Answers other than 2xx, 429 and 503, and transport failures.
    pub errors: usize,
    /// Requests refused for overload (429 or 503 with Retry-After): the
    /// service shedding load as it should past its capacity.
    pub refused: usize,
    /// First few error messages.
    pub error_samples: Vec<String>,
    /// Latency of the adds accepted (refused ones are not counted).
    pub add: Latency,
    /// Latency of the searches accepted.
    pub search: Latency,
    /// Achieved request rate.
    pub achieved_rate: f64,
}

const REFUSED: &str = "refused (429/503)";

/// Run the open-loop load generator (module docs).
pub async fn run_load(cfg: LoadConfig) -> LoadReport {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .unwrap_or_default();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
    let n = (cfg.rate * cfg.duration.as_secs_f64()).round() as usize;
    let period = Duration::from_secs_f64(1.0 / cfg.rate.max(1e-9));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until(start + period * i as u32).await;
        let add = rng.gen_bool(cfg.add_share.clamp(0.0, 1.0));
        let user = format!("load{}", rng.gen_range(0..cfg.users.max(1)));
        let body = if add {
            let mems: Vec<Value> = (0..cfg.batch.max(1))
                .map(|j| json!({"text": format!("load memory {i}.{j}: rated title {} {}/5", rng.gen_range(0..1682), rng.gen_range(1..6))}))
                .collect();
            json!({"user_id": user, "memories": mems})
        } else {
            json!({"user_id": user, "query": format!("rated title {}", rng.gen_range(0..1682)), "k": 10})
        };
        let url = format!(
            "{}/v1/memories{}",
            cfg.url.trim_end_matches('/'),
            if add { "" } else { "/search" }
        );
        let (client, key) = (client.clone(), cfg.key.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = client.post(&url).bearer_auth(key).json(&body).send().await;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let err = match r {
                Ok(resp) if resp.status().is_success() => {
                    let _ = resp.bytes().await;
                    None
                }
                Ok(resp)
                    if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS
                        || resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE =>
                {
                    let _ = resp.bytes().await;
                    Some(REFUSED.to_string())
                }
                Ok(resp) => Some(format!(
                    "{}: {}",
                    resp.status(),
                    resp.text().await.unwrap_or_default()
                )),
                Err(e) => Some(e.to_string()),
            };
            (add, ms, err)
        }));
    }
    let mut add = Vec::new();
    let mut search = Vec::new();
    let mut errors = 0;
    let mut refused = 0;
    let mut error_samples = Vec::new();
    for t in tasks {
        match t.await {
            Ok((_, _, Some(e))) if e == REFUSED => refused += 1,
            Ok((is_add, ms, err)) => {
                if let Some(e) = err {
                    errors += 1;
                    if error_samples.len() < 5 {
                        error_samples.push(e);
                    }
                    continue;
                }
                if is_add {
                    add.push(ms);
                } else {
                    search.push(ms);
                }
            }
            Err(e) => {
                errors += 1;
                if error_samples.len() < 5 {
                    error_samples.push(e.to_string());
                }
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    LoadReport {
        sent: n,
        errors,
        refused,
        error_samples,
        add: latency(add),
        search: latency(search),
        achieved_rate: n as f64 / elapsed.max(1e-9),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn texts(users: &[&str]) -> Vec<BenchText> {
        users
            .iter()
            .enumerate()
            .map(|(i, u)| BenchText {
                user: u.to_string(),
                text: format!("t{i}"),
                title: String::new(),
            })
            .collect()
    }

    fn shape(reqs: &[Value]) -> Vec<(String, usize)> {
        reqs.iter()
            .map(|r| {
                let u = r["user_id"].as_str().unwrap().to_string();
                (u, r["memories"].as_array().unwrap().len())
            })
            .collect()
    }

    /// A request carries up to `batch` memories of one user, each user's
    /// texts gathered across the interleaved file; `file_order` keeps the
    /// file's runs (the bench's requests before December 2026).
    #[test]
    fn add_requests_gather_each_users_texts_unless_asked_for_file_order() {
        let t = texts(&["a", "b", "a", "b", "a", "c"]);
        let own = |u: &str, n| (u.to_string(), n);
        assert_eq!(
            shape(&add_requests(&t, 2, false)),
            vec![own("a", 2), own("a", 1), own("b", 2), own("c", 1)]
        );
        assert_eq!(
            shape(&add_requests(&t, 100, true)),
            vec![
                own("a", 1),
                own("b", 1),
                own("a", 1),
                own("b", 1),
                own("a", 1),
                own("c", 1)
            ]
        );
        // Every text is sent once, in its user's file order.
        let reqs = add_requests(&t, 2, false);
        let a: Vec<&str> = reqs
            .iter()
            .filter(|r| r["user_id"] == "a")
            .flat_map(|r| r["memories"].as_array().unwrap())
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert_eq!(a, ["t0", "t2", "t4"]);
    }

    #[test]
    fn int8_goals_hold_each_size_to_its_bound() {
        let size = |memories, ingest_per_s, p99_ms, rss_mib| SizeResult {
            memories,
            ingest_per_s,
            search: Latency {
                n: 1000,
                p50_ms: 0.5,
                p99_ms,
                max_ms: p99_ms,
            },
            rss_mib,
        };
        let mut b = ServiceBench {
            embedder: "m-int8-g64".into(),
            rss_before_mib: 0.0,
            embed_alone_per_s: 1.0,
            restart_ready_ms: 0,
            sizes: vec![
                size(10_000, 1200.0, 1.9, 240.0),
                size(50_000, 1200.0, 4.9, 600.0),
            ],
        };
        assert_eq!(
            int8_goals(&b),
            "int8 goals (issue 41): ingest >= 1000/s at 10k: met, search p99 <= 2 ms at 10k: met, <= 5 ms at 50k: met, RSS <= 265 MB at 10k: met"
        );
        // 2.1 ms at 10k, 999/s and 253 MiB (265.3 MB) each miss.
        b.sizes[0] = size(10_000, 999.0, 2.1, 253.0);
        b.sizes.truncate(1);
        assert_eq!(
            int8_goals(&b),
            "int8 goals (issue 41): ingest >= 1000/s at 10k: NOT met, search p99 <= 2 ms at 10k: NOT met, <= 5 ms at 50k: not run, RSS <= 265 MB at 10k: NOT met"
        );
    }
}
