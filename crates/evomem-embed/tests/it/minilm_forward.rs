//! The hand-laid MiniLM forward (`evomem_embed::MiniLmEmbedder`) against
//! candle_transformers' `BertModel` on the same weights: padded batches with
//! an attention mask, mean pooling and L2 normalisation, as the embedder did
//! before it had its own forward. Short and long (truncated) texts, batch
//! sizes 1, 3 and 32, must agree within 1e-4 per component.
//!
//! Needs the model folder; skipped like `minilm_reference` when it is missing.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use evomem_core::Embedder;
use evomem_embed::{bench_texts::bench_texts, minilm_dir, MiniLmEmbedder, MiniLmOptions};
use std::path::PathBuf;
use tokenizers::Tokenizer;

fn model_dir() -> Option<PathBuf> {
    let models = std::env::var_os("EVOMEM_MODELS_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            evomem_embed::default_models_dir(
                std::env::var_os("HOME")
                    .as_deref()
                    .map(std::path::Path::new),
            )
        });
    let dir = minilm_dir(&models);
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "MiniLM model folder {} is missing under CI",
        dir.display()
    );
    eprintln!(
        "\n!!!!! SKIPPING MiniLM forward test: no model folder at {} !!!!!\n",
        dir.display()
    );
    None
}

/// candle's BertModel, padded batch + mask, mean pooling, L2 norm.
fn candle_reference(dir: &std::path::Path, ids: &[Vec<u32>]) -> Vec<Vec<f32>> {
    let cfg: Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu).unwrap();
    let model = BertModel::load(vb, &cfg).unwrap();
    let b = ids.len();
    let len = ids.iter().map(Vec::len).max().unwrap();
    let mut flat = vec![0u32; b * len];
    let mut mask = vec![0u32; b * len];
    for (r, s) in ids.iter().enumerate() {
        flat[r * len..r * len + s.len()].copy_from_slice(s);
        mask[r * len..r * len + s.len()].fill(1);
    }
    let input = Tensor::from_vec(flat, (b, len), &Device::Cpu).unwrap();
    let mask = Tensor::from_vec(mask, (b, len), &Device::Cpu).unwrap();
    let types = input.zeros_like().unwrap();
    let hidden = model.forward(&input, &types, Some(&mask)).unwrap();
    let maskf = mask.to_dtype(DType::F32).unwrap().unsqueeze(2).unwrap();
    let summed = hidden.broadcast_mul(&maskf).unwrap().sum(1).unwrap();
    let counts = maskf.sum(1).unwrap();
    let mut rows = summed
        .broadcast_div(&counts)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    for r in rows.iter_mut() {
        let n = r.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        r.iter_mut().for_each(|x| *x /= n);
    }
    rows
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

#[test]
fn own_forward_matches_candle_bert() {
    let Some(dir) = model_dir() else { return };
    let (short, long) = bench_texts(11, 24, 6);
    let mut texts: Vec<String> = short.into_iter().chain(long).collect();
    // Over 256 tokens: truncated.
    texts.push("word ".repeat(400));
    texts.push("é".to_string());
    let strs: Vec<&str> = texts.iter().map(String::as_str).collect();

    let mut tok = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tok.with_truncation(Some(tokenizers::TruncationParams {
        max_length: 256,
        ..Default::default()
    }))
    .unwrap();
    tok.with_padding(None);
    let ids: Vec<Vec<u32>> = strs
        .iter()
        .map(|t| tok.encode(*t, true).unwrap().get_ids().to_vec())
        .collect();
    assert!(ids.iter().any(|s| s.len() == 256));
    // The reference, one text at a time (no padding at all) and as one
    // padded batch (mask path).
    let single: Vec<Vec<f32>> = ids
        .iter()
        .flat_map(|s| candle_reference(&dir, std::slice::from_ref(s)))
        .collect();
    let padded = candle_reference(&dir, &ids);
    assert!(max_diff(&single, &padded) < 1e-4);

    for (batch_size, threads) in [(1, 1), (3, 2), (32, 2)] {
        let model = MiniLmEmbedder::load(
            &dir,
            MiniLmOptions {
                threads,
                batch_size,
                ..MiniLmOptions::default()
            },
        )
        .unwrap();
        let got = model.embed(&strs).unwrap();
        let d = max_diff(&got, &single);
        eprintln!(
            "batch {batch_size}, {threads} threads: max abs diff vs candle BertModel {d:.2e}"
        );
        assert!(d < 1e-4, "batch {batch_size}: max abs diff {d}");
    }
}

/// Policies warm their caches in batches (MARS's profiles before decisions,
/// AtomRec's evolved contexts) where they would otherwise embed one text at a
/// time. That must not change a run: a text's vector is the same bits alone,
/// inside a batch, and whatever its neighbours' lengths.
#[test]
fn a_text_gets_the_same_bits_alone_or_in_a_batch() {
    let Some(dir) = model_dir() else { return };
    let (short, long) = bench_texts(7, 12, 4);
    let mut texts: Vec<String> = short.into_iter().chain(long).collect();
    texts.push("word ".repeat(400));
    texts.push("current intent: Drama, Romance; later: shared topic towards friend".into());
    let strs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let model = MiniLmEmbedder::load(
        &dir,
        MiniLmOptions {
            threads: 2,
            ..MiniLmOptions::default()
        },
    )
    .unwrap();
    // The first component whose bits differ, if any.
    let first_diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .position(|(x, y)| x.to_bits() != y.to_bits())
            .or((a.len() != b.len()).then_some(a.len().min(b.len())))
    };
    let batch = model.embed(&strs).unwrap();
    for (i, t) in strs.iter().enumerate() {
        let alone = model.embed(&[t]).unwrap();
        let d = first_diff(&alone[0], &batch[i]);
        assert_eq!(
            d,
            None,
            "text {i} ({} chars): component {d:?} differs",
            t.len()
        );
    }
    let last = strs.len() - 3;
    let pair = model.embed(&[strs[0], strs[last]]).unwrap();
    assert_eq!(first_diff(&pair[0], &batch[0]), None);
    assert_eq!(first_diff(&pair[1], &batch[last]), None);
}

/// `pool_nice` (the service's `serve.bulk_nice`): the pool's threads run at
/// that niceness, so bulk embedding yields the CPU to searches, and the
/// vectors are the same bits as without it.
#[cfg(target_os = "linux")]
#[test]
fn a_lowered_pool_runs_at_its_niceness_with_the_same_bits() {
    let Some(dir) = model_dir() else { return };
    // Above this process's own niceness (a test run under `nice`).
    let own: i32 = std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            rest.split_whitespace().nth(16)?.parse().ok()
        })
        .unwrap_or(0);
    let want = own + 3;
    if want > 19 {
        return;
    }
    let load = |pool_nice| {
        MiniLmEmbedder::load(
            &dir,
            MiniLmOptions {
                threads: 2,
                pool_nice,
                ..MiniLmOptions::default()
            },
        )
        .unwrap()
    };
    let texts = ["a long enough text to go to the pool ".repeat(20)];
    let strs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let lowered = load(want);
    let plain = load(0);
    assert_eq!(lowered.embed(&strs).unwrap(), plain.embed(&strs).unwrap());
    let mut seen = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("evomem-minilm-") {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap();
            let rest = stat.rsplit_once(')').unwrap().1.to_string();
            seen.push(
                rest.split_whitespace()
                    .nth(16)
                    .unwrap()
                    .parse::<i32>()
                    .unwrap(),
            );
        }
    }
    // Other tests' embedders may be alive too; none of them lowers its pool.
    assert_eq!(
        seen.iter().filter(|&&n| n == want).count(),
        2,
        "pool threads' niceness: {seen:?}"
    );
}
