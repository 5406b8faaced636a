//! The MiniLM throughput benchmark behind `evomem bench embed`.
//!
//! Measures, in one run: cold-load time of [`MiniLmEmbedder`], the first
//! batch, and sentences per second on seeded short and long texts
//! ([`crate::bench_texts`]) at a given batch size and thread count; then,
//! when a Python interpreter with `sentence_transformers` is given, the same
//! texts through `SentenceTransformer.encode` with torch limited to the same
//! thread count and batch size, so the ratio is taken under the same machine
//! load, and then once more after torch's own dynamic int8 quantization of
//! every Linear (`quantize_dynamic`), the peer of the int8 MiniLM. The best of `reps` timed passes is kept on both sides. Single-query
//! latency (one short text per call, batch 1, as a search service embeds a
//! query) is the median over [`QUERY_SAMPLES`] calls on both sides.
//!
//! The int8 MiniLM ([`Precision::Int8`]) is measured beside f32 on the same
//! texts, and its retrieval quality is reported as recall@10 against f32's
//! exact top 10 ([`int8_recall`]): seeded short texts as the corpus, other
//! seeded short texts as the queries, cosine (dot of unit vectors) by brute
//! force on both sides.

use crate::{bench_texts::bench_texts, MiniLmEmbedder, MiniLmOptions, Precision};
use evomem_core::{EmbedError, Embedder};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to benchmark.
#[derive(Debug, Clone)]
pub struct EmbedBenchConfig {
    /// The MiniLM model folder.
    pub model_dir: PathBuf,
    /// Threads for both evomem and torch.
    pub threads: usize,
    /// Batch size for both.
    pub batch: usize,
    /// Number of short texts.
    pub short: usize,
    /// Number of long texts.
    pub long: usize,
    /// Timed passes per measurement (best kept).
    pub reps: usize,
    /// Python interpreter with `sentence_transformers`, if any.
    pub python: Option<PathBuf>,
    /// Corpus texts of the int8 recall@10 measurement (0: skip it).
    pub recall_docs: usize,
    /// Queries of the int8 recall@10 measurement.
    pub recall_queries: usize,
}

/// Recall@10 of the int8 MiniLM against f32's exact top 10.
#[derive(Debug, Clone)]
pub struct RecallReport {
    /// Corpus size.
    pub docs: usize,
    /// Number of queries.
    pub queries: usize,
    /// Mean over queries of |int8 top 10 ∩ f32 top 10| / 10.
    pub recall_at_10: f64,
    /// Mean cosine between a corpus text's int8 and f32 vectors.
    pub mean_cosine: f64,
    /// Smallest such cosine.
    pub min_cosine: f64,
}

/// Throughput of one side.
#[derive(Debug, Clone, Default)]
pub struct SideReport {
    /// Model load time, seconds.
    pub load_s: f64,
    /// Short texts per second.
    pub short_per_s: f64,
    /// Long texts per second.
    pub long_per_s: f64,
    /// Median latency of embedding one short text alone, milliseconds.
    pub query_ms: f64,
    /// Free-form description (library versions, thread count).
    pub info: String,
}

/// Results of one benchmark run.
#[derive(Debug, Clone)]
pub struct EmbedBenchReport {
    /// Number of short and long texts.
    pub n_short: usize,
    /// Number of long texts.
    pub n_long: usize,
    /// evomem side, f32.
    pub rust: SideReport,
    /// evomem side, int8 dense layers.
    pub rust_int8: SideReport,
    /// The int8 kernel that ran.
    pub int8_kernel: crate::Int8Kernel,
    /// Recall of int8 against f32, when asked for.
    pub recall: Option<Result<RecallReport, String>>,
    /// Time of the first (warm-up) batch, seconds.
    pub rust_first_batch_s: f64,
    /// torch side, or why it is missing.
    pub python: Result<TorchReport, String>,
}

/// The torch peers, measured in one Python process right after the evomem
/// sides.
#[derive(Debug, Clone)]
pub struct TorchReport {
    /// sentence-transformers in f32.
    pub f32: SideReport,
    /// The same model after torch's dynamic int8 quantization of every
    /// Linear (`quantize_dynamic`, its defaults), or why it failed.
    pub int8: Result<SideReport, String>,
    /// Recall@10 of torch int8 against torch f32's exact top 10 on
    /// [`int8_recall`]'s corpus and queries, when the run measures recall.
    pub int8_recall: Option<f64>,
}

/// Seeds of the recall corpus and queries ([`int8_recall`], and torch
/// int8's recall in the Python peer).
const RECALL_CORPUS_SEED: u64 = 41;
const RECALL_QUERY_SEED: u64 = 4141;

/// Number of single-text calls whose median is the query latency.
pub const QUERY_SAMPLES: usize = 64;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn best_of(reps: usize, mut f: impl FnMut() -> Result<(), EmbedError>) -> Result<f64, EmbedError> {
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

const PY_BENCH: &str = r#"
import json, sys, time
threads, batch, reps = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t0 = time.perf_counter()
import torch
torch.set_num_threads(threads)
from sentence_transformers import SentenceTransformer
t1 = time.perf_counter()
m = SentenceTransformer(sys.argv[2], device="cpu")
m.max_seq_length = 256
t2 = time.perf_counter()
d = json.load(open(sys.argv[1]))
out = {"import_s": t1 - t0, "load_s": t2 - t1, "torch": torch.__version__,
       "threads": torch.get_num_threads()}

def timed(m, prefix):
    m.encode(d["short"][:batch], batch_size=batch)
    for key in ("short", "long"):
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            m.encode(d[key], batch_size=batch, normalize_embeddings=True)
            best = min(best, time.perf_counter() - t)
        out[prefix + key + "_s"] = best
    lat = []
    for t in d["short"][:int(sys.argv[6])]:
        s = time.perf_counter()
        m.encode([t], batch_size=1, normalize_embeddings=True)
        lat.append(time.perf_counter() - s)
    lat.sort()
    out[prefix + "query_s"] = lat[len(lat) // 2]

with torch.inference_mode():
    timed(m, "")
try:
    try:
        from torch.ao.quantization import quantize_dynamic
    except ImportError:
        from torch.quantization import quantize_dynamic
    t = time.perf_counter()
    m8 = SentenceTransformer(sys.argv[2], device="cpu")
    m8.max_seq_length = 256
    m8 = quantize_dynamic(m8, {torch.nn.Linear}, dtype=torch.qint8)
    out["int8_load_s"] = time.perf_counter() - t
    with torch.inference_mode():
        timed(m8, "int8_")
        if "corpus" in d:
            # Recall@10 of torch int8 against torch f32's exact top 10, as
            # `int8_recall` measures evomem's (unit vectors, dot, ties by
            # index).
            import numpy as np
            def top10(qs, docs):
                s = np.asarray(qs) @ np.asarray(docs).T
                return np.argsort(-s, axis=1, kind="stable")[:, :10].tolist()
            enc = lambda mm, xs: mm.encode(xs, batch_size=batch, normalize_embeddings=True)
            want = top10(enc(m, d["queries"]), enc(m, d["corpus"]))
            got = top10(enc(m8, d["queries"]), enc(m8, d["corpus"]))
            hits = sum(len(set(a) & set(b)) for a, b in zip(want, got))
            out["int8_recall"] = hits / (10 * max(len(want), 1))
except Exception as e:
    out["int8_error"] = repr(e)
print(json.dumps(out))
"#;

fn run_python(
    python: &Path,
    cfg: &EmbedBenchConfig,
    short: &[String],
    long: &[String],
) -> Result<TorchReport, String> {
    let dir = std::env::temp_dir().join(format!("evomem-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let script = dir.join("st_bench.py");
    let data = dir.join("texts.json");
    std::fs::write(&script, PY_BENCH).map_err(|e| format!("{}: {e}", script.display()))?;
    let mut texts = serde_json::json!({"short": short, "long": long});
    if cfg.recall_docs > 0 {
        // The corpus and queries of `int8_recall`, for torch int8's recall.
        let (corpus, _) = bench_texts(RECALL_CORPUS_SEED, cfg.recall_docs, 0);
        let (queries, _) = bench_texts(RECALL_QUERY_SEED, cfg.recall_queries, 0);
        texts["corpus"] = serde_json::json!(corpus);
        texts["queries"] = serde_json::json!(queries);
    }
    let texts = texts.to_string();
    std::fs::write(&data, texts).map_err(|e| format!("{}: {e}", data.display()))?;
    let threads = cfg.threads.to_string();
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(&data)
        .arg(&cfg.model_dir)
        .arg(&threads)
        .arg(cfg.batch.to_string())
        .arg(cfg.reps.to_string())
        .arg(QUERY_SAMPLES.to_string())
        .env("OMP_NUM_THREADS", &threads)
        .env("MKL_NUM_THREADS", &threads)
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .map_err(|e| format!("running {}: {e}", python.display()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} failed: {}",
            python.display(),
            err.lines().last().unwrap_or("")
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("parsing `{line}`: {e}"))?;
    let f = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let version = v.get("torch").and_then(|t| t.as_str()).unwrap_or("?");
    let threads = v
        .get("threads")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let side = |prefix: &str, load_s: f64, info: String| SideReport {
        load_s,
        short_per_s: short.len() as f64 / f(&format!("{prefix}short_s")),
        long_per_s: long.len() as f64 / f(&format!("{prefix}long_s")),
        query_ms: f(&format!("{prefix}query_s")) * 1e3,
        info,
    };
    let int8 = match v.get("int8_error").and_then(|e| e.as_str()) {
        Some(e) => Err(format!("torch dynamic int8 failed: {e}")),
        None => Ok(side(
            "int8_",
            f("int8_load_s"),
            format!("torch {version} dynamic int8, {threads} threads"),
        )),
    };
    Ok(TorchReport {
        f32: side(
            "",
            f("load_s"),
            format!(
                "sentence-transformers, torch {version} CPU, {threads} threads, import {:.2}s",
                f("import_s")
            ),
        ),
        int8,
        int8_recall: v.get("int8_recall").and_then(serde_json::Value::as_f64),
    })
}

/// Load MiniLM in `precision` and time it on `short` and `long`: the side
/// report and the first batch's time.
fn measure_rust(
    cfg: &EmbedBenchConfig,
    precision: Precision,
    short: &[String],
    long: &[String],
) -> Result<(SideReport, f64), EmbedError> {
    let opts = MiniLmOptions {
        threads: cfg.threads,
        batch_size: cfg.batch,
        precision,
        ..MiniLmOptions::default()
    };
    let t = Instant::now();
    let model = MiniLmEmbedder::load(&cfg.model_dir, opts)?;
    let load_s = t.elapsed().as_secs_f64();
    let s_refs: Vec<&str> = short.iter().map(String::as_str).collect();
    let l_refs: Vec<&str> = long.iter().map(String::as_str).collect();
    let t = Instant::now();
    model.embed(&s_refs[..cfg.batch.min(s_refs.len())])?;
    let first_batch_s = t.elapsed().as_secs_f64();
    let short_s = best_of(cfg.reps, || model.embed(&s_refs).map(|_| ()))?;
    let long_s = best_of(cfg.reps, || model.embed(&l_refs).map(|_| ()))?;
    let mut lat = Vec::with_capacity(QUERY_SAMPLES);
    for t in s_refs.iter().cycle().take(QUERY_SAMPLES) {
        let start = Instant::now();
        model.embed(&[t])?;
        lat.push(start.elapsed().as_secs_f64());
    }
    let kind = match precision {
        Precision::F32 => "f32".to_string(),
        Precision::Int8 => format!("int8 ({})", crate::best_kernel().name()),
    };
    let report = SideReport {
        load_s,
        query_ms: median(lat) * 1e3,
        short_per_s: short.len() as f64 / short_s,
        long_per_s: long.len() as f64 / long_s,
        info: format!("evomem {kind}, {} threads", model.options().threads),
    };
    Ok((report, first_batch_s))
}

/// The indices of the 10 largest `dot(query, doc)`, best first (ties by
/// index).
fn top10(query: &[f32], docs: &[Vec<f32>]) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (evomem_core::dot(query, d), i))
        .collect();
    let k = 10.min(scored.len());
    let by_score = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    if k < scored.len() {
        scored.select_nth_unstable_by(k, by_score);
        scored.truncate(k);
    }
    scored.sort_by(by_score);
    scored.into_iter().map(|(_, i)| i).collect()
}

/// Recall@10 of int8 MiniLM against f32's exact top 10: `docs` seeded
/// short texts as the corpus, `queries` others as the queries, both
/// embedded by both models on `threads` threads.
pub fn int8_recall(
    model_dir: &Path,
    threads: usize,
    docs: usize,
    queries: usize,
) -> Result<RecallReport, EmbedError> {
    let (corpus, _) = bench_texts(RECALL_CORPUS_SEED, docs, 0);
    let (asks, _) = bench_texts(RECALL_QUERY_SEED, queries, 0);
    let c_refs: Vec<&str> = corpus.iter().map(String::as_str).collect();
    let q_refs: Vec<&str> = asks.iter().map(String::as_str).collect();
    // (corpus vectors, query vectors) of one precision.
    type Vectors = (Vec<Vec<f32>>, Vec<Vec<f32>>);
    let embed = |precision| -> Result<Vectors, EmbedError> {
        let opts = MiniLmOptions {
            threads,
            precision,
            ..MiniLmOptions::default()
        };
        let m = MiniLmEmbedder::load(model_dir, opts)?;
        Ok((m.embed(&c_refs)?, m.embed(&q_refs)?))
    };
    let (f_docs, f_q) = embed(Precision::F32)?;
    let (i_docs, i_q) = embed(Precision::Int8)?;
    let mut hits = 0usize;
    for (fq, iq) in f_q.iter().zip(&i_q) {
        let want = top10(fq, &f_docs);
        let got = top10(iq, &i_docs);
        hits += got.iter().filter(|i| want.contains(i)).count();
    }
    let cos: Vec<f64> = f_docs
        .iter()
        .zip(&i_docs)
        .map(|(a, b)| f64::from(evomem_core::dot(a, b)))
        .collect();
    Ok(RecallReport {
        docs: corpus.len(),
        queries: asks.len(),
        recall_at_10: hits as f64 / (10 * asks.len().max(1)) as f64,
        mean_cosine: cos.iter().sum::<f64>() / cos.len().max(1) as f64,
        min_cosine: cos.iter().copied().fold(f64::INFINITY, f64::min),
    })
}

/// The short and long texts the benchmark times (seeded: the same texts
/// for the same counts), for peers measured outside it
/// (`scripts/bench-torch-embed.py`).
pub fn timed_texts(short: usize, long: usize) -> (Vec<String>, Vec<String>) {
    bench_texts(7, short, long)
}

/// Run the benchmark.
pub fn run_embed_bench(cfg: &EmbedBenchConfig) -> Result<EmbedBenchReport, EmbedError> {
    let (short, long) = timed_texts(cfg.short, cfg.long);
    let (rust, rust_first_batch_s) = measure_rust(cfg, Precision::F32, &short, &long)?;
    let (rust_int8, _) = measure_rust(cfg, Precision::Int8, &short, &long)?;
    let recall = (cfg.recall_docs > 0).then(|| {
        int8_recall(
            &cfg.model_dir,
            cfg.threads,
            cfg.recall_docs,
            cfg.recall_queries,
        )
        .map_err(|e| e.to_string())
    });
    let python = match &cfg.python {
        None => Err("no Python interpreter with sentence_transformers given".to_string()),
        Some(py) => run_python(py, cfg, &short, &long),
    };
    Ok(EmbedBenchReport {
        n_short: short.len(),
        n_long: long.len(),
        rust,
        rust_int8,
        int8_kernel: crate::best_kernel(),
        recall,
        rust_first_batch_s,
        python,
    })
}

/// Print a report as the CLI shows it.
pub fn print_report(r: &EmbedBenchReport, threads: usize, batch: usize) {
    println!("MiniLM all-MiniLM-L6-v2, batch {batch}, {threads} threads, same texts on both sides");
    println!(
        "{:<44} {:>9} {:>12} {:>12} {:>10}",
        "implementation", "load s", "short sent/s", "long sent/s", "query ms"
    );
    for side in [&r.rust, &r.rust_int8] {
        println!(
            "{:<44} {:>9.3} {:>12.1} {:>12.1} {:>10.2}",
            side.info, side.load_s, side.short_per_s, side.long_per_s, side.query_ms
        );
    }
    println!(
        "ratio int8/f32 (>1 = int8 faster): short {:.2}x, long {:.2}x, query latency {:.2}x (int8 kernel: {})",
        r.rust_int8.short_per_s / r.rust.short_per_s,
        r.rust_int8.long_per_s / r.rust.long_per_s,
        r.rust.query_ms / r.rust_int8.query_ms,
        r.int8_kernel.name()
    );
    match &r.recall {
        None => {}
        Some(Ok(q)) => println!(
            "int8 recall@10 against f32's exact top 10: {:.4} ({} queries, {} texts); cosine(int8, f32) of the texts: mean {:.5}, min {:.5}",
            q.recall_at_10, q.queries, q.docs, q.mean_cosine, q.min_cosine
        ),
        Some(Err(e)) => println!("int8 recall failed: {e}"),
    }
    match &r.python {
        Ok(t) => {
            let p = &t.f32;
            println!(
                "{:<44} {:>9.3} {:>12.1} {:>12.1} {:>10.2}",
                p.info, p.load_s, p.short_per_s, p.long_per_s, p.query_ms
            );
            match &t.int8 {
                Ok(q) => println!(
                    "{:<44} {:>9.3} {:>12.1} {:>12.1} {:>10.2}",
                    q.info, q.load_s, q.short_per_s, q.long_per_s, q.query_ms
                ),
                Err(why) => println!("{why}"),
            }
            println!(
                "ratio evomem/torch (>1 = Rust faster): short {:.2}x, long {:.2}x, query latency {:.2}x, cold load {:.2}x faster",
                r.rust.short_per_s / p.short_per_s,
                r.rust.long_per_s / p.long_per_s,
                p.query_ms / r.rust.query_ms,
                p.load_s / r.rust.load_s
            );
            if let Ok(q) = &t.int8 {
                println!(
                    "ratio evomem int8/torch int8 (>1 = Rust faster): short {:.2}x, long {:.2}x, query latency {:.2}x",
                    r.rust_int8.short_per_s / q.short_per_s,
                    r.rust_int8.long_per_s / q.long_per_s,
                    q.query_ms / r.rust_int8.query_ms,
                );
            }
            if let Some(rc) = t.int8_recall {
                println!(
                    "torch dynamic int8 recall@10 against torch f32's exact top 10 (same texts and queries as evomem's): {rc:.4}"
                );
            }
        }
        Err(why) => println!("python comparison skipped: {why}"),
    }
    println!(
        "({} short texts of 6-13 words, {} long texts of 150-199 words; query = median of {} one-text calls; evomem first batch {:.3}s)",
        r.n_short, r.n_long, QUERY_SAMPLES, r.rust_first_batch_s
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::bert::AttentionMode;

    /// Issue 41's "keep attention in f32 if quantizing it costs more
    /// quality than it saves time; measure both", on the int8 MiniLM:
    /// attention's share of the time (the forward without it against the
    /// forward with it, best of 3, short and long texts) bounds what an
    /// int8 attention could save; the quality it would cost is recall@10
    /// against f32's exact top 10 (as `int8_recall`) with attention's
    /// operands rounded to the grids an int8 attention would use. Needs
    /// the model folder; prints, asserts nothing (an experiment):
    /// `cargo test --release -p evomem-embed --lib int8_attention -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn int8_attention_costs_and_savings() {
        let dir = crate::default_models_dir(std::env::var_os("HOME").as_deref().map(Path::new))
            .join("all-MiniLM-L6-v2");
        let threads = 2;
        let load = |precision| {
            let opts = MiniLmOptions {
                threads,
                precision,
                ..MiniLmOptions::default()
            };
            MiniLmEmbedder::load(&dir, opts).unwrap()
        };
        let (short, long) = timed_texts(512, 96);
        let s_refs: Vec<&str> = short.iter().map(String::as_str).collect();
        let l_refs: Vec<&str> = long.iter().map(String::as_str).collect();
        let mut m = load(Precision::Int8);
        for mode in [
            AttentionMode::F32,
            AttentionMode::Skip,
            AttentionMode::SimInt8,
        ] {
            m.set_attention_mode(mode);
            let s = best_of(3, || m.embed(&s_refs).map(|_| ())).unwrap();
            let l = best_of(3, || m.embed(&l_refs).map(|_| ())).unwrap();
            println!(
                "int8 MiniLM, attention {mode:?}: short {:.1}/s, long {:.1}/s",
                s_refs.len() as f64 / s,
                l_refs.len() as f64 / l
            );
        }
        let (corpus, _) = bench_texts(41, 10_000, 0);
        let (asks, _) = bench_texts(4141, 1_000, 0);
        let c_refs: Vec<&str> = corpus.iter().map(String::as_str).collect();
        let q_refs: Vec<&str> = asks.iter().map(String::as_str).collect();
        let f = load(Precision::F32);
        let (f_docs, f_q) = (f.embed(&c_refs).unwrap(), f.embed(&q_refs).unwrap());
        for mode in [AttentionMode::F32, AttentionMode::SimInt8] {
            m.set_attention_mode(mode);
            let (i_docs, i_q) = (m.embed(&c_refs).unwrap(), m.embed(&q_refs).unwrap());
            let hits: usize = f_q
                .iter()
                .zip(&i_q)
                .map(|(fq, iq)| {
                    let want = top10(fq, &f_docs);
                    top10(iq, &i_docs)
                        .iter()
                        .filter(|i| want.contains(i))
                        .count()
                })
                .sum();
            println!(
                "int8 MiniLM, attention {mode:?}: recall@10 against f32 {:.4}",
                hits as f64 / (10 * q_refs.len()) as f64
            );
        }
    }
}
