//! Noisy-neighbour measurement (ignored by default; run with
//! `cargo test -p evomem-serve --release --test it neighbours -- --ignored --nocapture`).
//!
//! Tenant alpha runs recommend through a slow model (each recommend embeds
//! fresh items, 100 ms a pass), events, adds of 1000 memories, and deletes
//! a user holding `EVOMEM_NEIGHBOUR_MEMORIES` memories (default 50000, as
//! the issue asks),
//! while tenant beta's user and a second user of alpha search at a fixed
//! rate (`EVOMEM_NEIGHBOUR_RATE`, default 50/s, for `EVOMEM_NEIGHBOUR_SECS`,
//! default 10 s). Prints each searcher's p99 with alpha busy against its
//! p99 alone (before and after the busy phase, pooled).
//! `EVOMEM_NEIGHBOUR_DELETE=0` leaves the user deletion out.
//!
//! The control: on these 2-vCPU machines any background CPU, even one
//! lowest-priority spinner, moves a 1 ms search's p99 several-fold, so the
//! same CPU background runs through every phase, alone and busy alike:
//! `EVOMEM_NEIGHBOUR_BACKGROUND` spinning processes (default 1) at
//! niceness 19, started before the first "alone" window and stopped after the last.
//! The goal (issue 57): each searcher's p99 with alpha busy is at most 2x
//! its p99 alone and at most 10 ms; the last lines say whether it was met.
//!
//! The clients run on threads of their own, off the server's runtime (two
//! workers, as `evomem serve` has on two cores): the searchers at niceness
//! 0, alpha's clients at `EVOMEM_NEIGHBOUR_CLIENT_NICE` (default 19). In a
//! deployment alpha's clients are other machines; here the CPU they spend
//! building 1000-memory bodies would otherwise count against the service.
//! Not an assertion (machines are noisy): the figures go in the report.

use crate::common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The hashing embedder; a pass over a text holding `SLOWMODEL` takes 100 ms.
struct SlowModel(evomem_embed::HashingEmbedder);

impl evomem_core::Embedder for SlowModel {
    fn model_id(&self) -> &str {
        self.0.model_id()
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
        if t.iter().any(|s| s.contains("SLOWMODEL")) {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.0.embed(t)
    }
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Search at `rate`/s as (key, user) for `secs`, and on after that until
/// `done` is set; latencies in ms.
async fn searcher(
    base: String,
    key: &'static str,
    user: &'static str,
    rate: f64,
    secs: f64,
    done: Arc<AtomicBool>,
) -> Vec<f64> {
    let client = reqwest::Client::new();
    let n = (rate * secs) as usize;
    let period = Duration::from_secs_f64(1.0 / rate);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0.. {
        if i >= n && done.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep_until(start + period * i as u32).await;
        let (client, base) = (client.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = client
                .post(format!("{base}/v1/memories/search"))
                .bearer_auth(key)
                .json(&json!({"user_id": user, "query": format!("jazz record {i}"), "k": 10}))
                .send()
                .await
                .unwrap();
            let st = r.status();
            let body = r.text().await.unwrap_or_default();
            if !st.is_success() {
                eprintln!("search refused: {st} {body}");
                return f64::NAN;
            }
            t.elapsed().as_secs_f64() * 1000.0
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        let ms = t.await.unwrap();
        if !ms.is_nan() {
            out.push(ms);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn noisy_neighbour_p99_ratio() {
    let big: usize = env_or("EVOMEM_NEIGHBOUR_MEMORIES", 50_000);
    let dir = tempfile::tempdir().unwrap();
    let s = start_with(
        neighbour_config(dir.path()),
        Arc::new(SlowModel(evomem_embed::HashingEmbedder::new(64))),
    )
    .await;
    load(&s, big).await;
    // The loaded user's graphs build in the background: measure "alone"
    // once the process is quiet, not during that build.
    let quiet = settle(Duration::from_secs(120)).await;
    eprintln!("settled after {:.1} s", quiet.as_secs_f64());
    let spinners: usize = env_or("EVOMEM_NEIGHBOUR_BACKGROUND", 1);
    let background = Background::start(spinners);
    eprintln!("CPU background in every phase: {spinners} spinning process(es) at niceness 19");
    // 50 searches/s for 10 s per searcher and phase: 500 latencies, so
    // that a p99 is not one or two outliers.
    let rate: f64 = env_or("EVOMEM_NEIGHBOUR_RATE", 50.0);
    let secs: f64 = env_or("EVOMEM_NEIGHBOUR_SECS", 10.0);
    let base = s.base.clone();
    // "Alone" is measured twice, before alpha's load and after it (once
    // the process is quiet again), with both searchers at once as in the
    // busy phase, and pooled: one quiet window's p99 swung 0.8-6.6 ms
    // between runs on a shared 2-core VM, and drift over the run would
    // otherwise count for or against the busy phase.
    let quiet_done = Arc::new(AtomicBool::new(true));
    let alone = || on_thread(0, both_search(base.clone(), rate, secs, quiet_done.clone()));
    let (mut alone_b, mut alone_a) = alone().await;
    let busy = Arc::new(AtomicBool::new(true));
    // Alpha's clients run on their own thread at `client_nice` (default
    // 19): in a deployment they are other machines, so the CPU they spend
    // building 1000-memory bodies must not count against the service.
    let client_nice: i32 = env_or("EVOMEM_NEIGHBOUR_CLIENT_NICE", 19);
    let delete = std::env::var("EVOMEM_NEIGHBOUR_DELETE").map_or(true, |v| v != "0");
    // The busy phase lasts `secs` and on until the user deletion answers.
    let deleted = Arc::new(AtomicBool::new(!delete));
    let noise = on_thread(
        client_nice,
        alpha_noise(base.clone(), busy.clone(), delete.then(|| deleted.clone())),
    );
    let (busy_b, busy_a) = on_thread(0, both_search(base.clone(), rate, secs, deleted)).await;
    busy.store(false, Ordering::SeqCst);
    let (del_status, del_s) = noise.await;
    eprintln!("user deletion of {big} memories: {del_status} in {del_s:.2} s");
    let quiet = settle(Duration::from_secs(120)).await;
    eprintln!("settled again after {:.1} s", quiet.as_secs_f64());
    let (after_b, after_a) = alone().await;
    eprintln!(
        "alone p99 before / after: beta {:.2} / {:.2} ms, alpha's second user {:.2} / {:.2} ms",
        p99(alone_b.clone()),
        p99(after_b.clone()),
        p99(alone_a.clone()),
        p99(after_a.clone())
    );
    alone_b.extend(after_b);
    alone_a.extend(after_a);
    drop(background);
    let met = [
        report("tenant beta searcher", &alone_b, &busy_b),
        report("alpha's second user", &alone_a, &busy_a),
    ];
    eprintln!(
        "goal (busy p99 <= 2x alone and <= 10 ms, same background in both): {}",
        if met.iter().all(|m| *m) {
            "met"
        } else {
            "NOT met"
        }
    );
    s.stop().await;
}

/// An environment variable parsed, or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The service's settings for the measurement: batches of 1000;
/// `EVOMEM_NEIGHBOUR_NICE` sets `serve.bulk_nice` and
/// `EVOMEM_NEIGHBOUR_IDLE=0` sets `serve.bulk_idle = false` (for the
/// comparisons in docs/notes/service-noisy-neighbours.md).
fn neighbour_config(dir: &std::path::Path) -> evomem_serve::ServeConfig {
    let mut cfg = config(dir, None);
    cfg.max_batch = 1000;
    cfg.bulk_nice = env_or("EVOMEM_NEIGHBOUR_NICE", cfg.bulk_nice);
    if let Ok(v) = std::env::var("EVOMEM_NEIGHBOUR_IDLE") {
        cfg.bulk_idle = v != "0";
    }
    eprintln!(
        "serve.bulk_nice = {}, serve.bulk_idle = {}",
        cfg.bulk_nice, cfg.bulk_idle
    );
    cfg
}

/// Add `n` memories tagged `tag` for (key, user) in one request.
async fn add_memories(s: &TestServer, key: &str, user: &str, n: usize, tag: &str) {
    let mems: Vec<_> = (0..n)
        .map(|i| json!({"text": format!("{tag} jazz record {i}")}))
        .collect();
    let r = s
        .client
        .post(format!("{}/v1/memories", s.base))
        .bearer_auth(key)
        .json(&json!({"user_id": user, "memories": mems}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
}

/// The two searchers' users get 500 memories each, alpha's user `big`
/// gets `big` (the one deleted while alpha is busy).
async fn load(s: &TestServer, big: usize) {
    for (key, user) in [(KEY_A, "reader"), (KEY_B, "other")] {
        add_memories(s, key, user, 500, "seed").await;
    }
    let t0 = Instant::now();
    for b in 0..big.div_ceil(1000) {
        add_memories(
            s,
            KEY_A,
            "big",
            1000.min(big - b * 1000),
            &format!("big{b}"),
        )
        .await;
    }
    eprintln!(
        "loaded {big} memories for user big in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Both searchers at once (beta's user and alpha's second user), each at
/// `rate`/s for `secs`: (beta's latencies, alpha's).
/// `done`: as [`searcher`]'s.
async fn both_search(
    base: String,
    rate: f64,
    secs: f64,
    done: Arc<AtomicBool>,
) -> (Vec<f64>, Vec<f64>) {
    tokio::join!(
        searcher(base.clone(), KEY_B, "other", rate, secs, done.clone()),
        searcher(base, KEY_A, "reader", rate, secs, done)
    )
}

/// Print one searcher's p99 alone and busy, and their ratio; whether it
/// meets the goal (module docs).
fn report(name: &str, alone: &[f64], busy: &[f64]) -> bool {
    let (a, b) = (p99(alone.to_vec()), p99(busy.to_vec()));
    let met = b <= 2.0 * a && b <= 10.0;
    eprintln!(
        "{name}: p99 alone {a:.2} ms, with alpha busy {b:.2} ms, ratio {:.2} (n={} / {}): {}",
        b / a,
        alone.len(),
        busy.len(),
        if met {
            "within the goal"
        } else {
            "outside the goal"
        }
    );
    met
}

/// Processes spinning at niceness 19 until stopped: the CPU background
/// every phase shares (module docs). Processes, not threads, so that
/// [`settle`], which reads this process's CPU time, still sees it quiet.
struct Background {
    children: Vec<std::process::Child>,
}

impl Background {
    fn start(n: usize) -> Self {
        let children = (0..n)
            .map(|_| {
                std::process::Command::new("nice")
                    .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                    .spawn()
                    .expect("start a background spinner (nice, sh)")
            })
            .collect();
        Self { children }
    }
}

/// Stopped when dropped, also when the measurement panics.
impl Drop for Background {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run `fut` on a new thread of niceness `nice` with its own
/// single-threaded runtime; the answer arrives through a oneshot.
fn on_thread<T: Send + 'static>(
    nice: i32,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> impl std::future::Future<Output = T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        if nice > 0 {
            let tid = rustix::thread::gettid();
            rustix::process::setpriority_process(Some(tid), nice).unwrap();
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(fut));
    });
    async move { rx.await.unwrap() }
}

/// Alpha's load while `busy`: recommend and events through the slow model,
/// 1000-memory adds, and (if `deleted` is given) user `big`'s deletion
/// after 2 s, setting `deleted` once it answered. Returns the deletion's
/// status and seconds.
async fn alpha_noise(
    base: String,
    busy: Arc<AtomicBool>,
    deleted: Option<Arc<AtomicBool>>,
) -> (u16, f64) {
    let client = reqwest::Client::new();
    let looper = {
        let (client, base, busy) = (client.clone(), base.clone(), busy.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while busy.load(Ordering::SeqCst) {
                i += 1;
                let cands: Vec<_> = (0..3).map(|j| json!({"id": format!("n{i}x{j}"), "title": format!("SLOWMODEL record {i} {j}"), "categories": ["Jazz"]})).collect();
                let _ = client
                    .post(format!("{base}/v1/recommend"))
                    .bearer_auth(KEY_A)
                    .json(&json!({"user_id": "looper", "candidates": cands}))
                    .send()
                    .await;
                let _ = client.post(format!("{base}/v1/events")).bearer_auth(KEY_A)
                    .json(&json!({"user_id": "looper", "events": [{"item": format!("n{i}x0"), "rating": 5}]})).send().await;
            }
        })
    };
    let adder = {
        let (client, base, busy) = (client.clone(), base.clone(), busy.clone());
        tokio::spawn(async move {
            let mut b = 0;
            while busy.load(Ordering::SeqCst) {
                b += 1;
                let mems: Vec<_> = (0..1000)
                    .map(|i| json!({"text": format!("bulk {b} jazz record {i}")}))
                    .collect();
                let _ = client
                    .post(format!("{base}/v1/memories"))
                    .bearer_auth(KEY_A)
                    .json(&json!({"user_id": "bulk", "memories": mems}))
                    .send()
                    .await;
            }
        })
    };
    let mut out = (0, 0.0);
    if let Some(deleted) = deleted {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t = Instant::now();
        let r = client
            .delete(format!("{base}/v1/users/big"))
            .bearer_auth(KEY_A)
            .send()
            .await
            .unwrap();
        out = (r.status().as_u16(), t.elapsed().as_secs_f64());
        deleted.store(true, Ordering::SeqCst);
    }
    looper.await.unwrap();
    adder.await.unwrap();
    out
}

/// Wait until this process spends under 5% of a core over half a second
/// (at most `limit`); returns the time waited.
async fn settle(limit: Duration) -> Duration {
    let cpu = || -> f64 {
        // utime + stime of the whole process, in clock ticks (field 14, 15).
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
                Some(rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?)
            })
            .unwrap_or(0.0)
    };
    let start = Instant::now();
    while start.elapsed() < limit {
        let before = cpu();
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Ticks are 10 ms: under 5% of a core over 0.5 s is at most 2 ticks.
        if cpu() - before <= 2.0 {
            break;
        }
    }
    start.elapsed()
}
