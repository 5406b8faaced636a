//! sentence-transformers all-MiniLM-L6-v2 in pure Rust (gemm + `tokenizers`).
//!
//! The pipeline reproduces `SentenceTransformer("all-MiniLM-L6-v2").encode(...,
//! normalize_embeddings=True)` (Reimers & Gurevych, 2019, *Sentence-BERT*, §3:
//! MEAN pooling of the token embeddings):
//! 1. WordPiece tokenisation with the shipped `tokenizer.json`, truncating at
//!    256 tokens (the model's `max_seq_length`) instead of the file's 128, and
//!    padding only to the longest text of each batch instead of a fixed 128;
//! 2. a 6-layer BERT encoder, f32 ([`crate::bert`]: gemm matmuls on
//!    weights laid out in gemm's panels once at load, fused QKV, no padding);
//! 3. mean pooling over the attention mask:
//!    `e = Σ_t m_t h_t / max(Σ_t m_t, 1e-9)`;
//! 4. L2 normalisation `e / max(‖e‖₂, 1e-12)`.
//!
//! Speed: texts are sorted by token count before batching, so a batch holds
//! texts of similar length (attention cost grows with the square of it); the
//! batch is packed without padding and the result is put back in input
//! order. Work runs on a private rayon pool whose size is
//! [`MiniLmOptions::threads`] (the binary's `threads` setting), so two threads stay two
//! threads even when the caller's global pool is larger. A short call that
//! finds another call on the pool computes on its own thread rather than
//! wait behind it; larger calls queue (see `embed` below).

use crate::bert::{read_safetensors, BertConfig, BertEncoder};
use crate::matmul::Exec;
use evomem_core::{EmbedError, Embedder};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// Calls of at most this many tokens (a few short texts) compute on the
/// caller's thread when another call holds the pool.
const INLINE_TOKENS: usize = 64;

/// Give the calling thread niceness `nice` (0: leave it; Linux only; a
/// failure leaves the priority as it was).
fn lower_current_thread(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// One call counted in [`MiniLmEmbedder::pool_calls`] until dropped.
struct PoolCall<'a>(&'a AtomicUsize);

impl<'a> PoolCall<'a> {
    fn enter(calls: &'a AtomicUsize) -> Self {
        calls.fetch_add(1, Ordering::AcqRel);
        Self(calls)
    }
}

impl Drop for PoolCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub use crate::{MINILM_INT8_MODEL_ID, MINILM_MODEL_ID};

/// Arithmetic of the encoder's dense layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 throughout (matches sentence-transformers within 1e-4).
    #[default]
    F32,
    /// QKV, attention output and FFN Linears in 8-bit integers (weights
    /// per output channel and group of 64 inputs at load, activations per
    /// group of 64 inputs at run time, exact `i32` sums per group;
    /// [`crate::Int8Kernel`]); embeddings, LayerNorm, GELU, softmax and
    /// attention scores stay f32.
    Int8,
}

impl Precision {
    /// The model id an embedder of this precision reports.
    pub fn model_id(self) -> &'static str {
        match self {
            Precision::F32 => MINILM_MODEL_ID,
            Precision::Int8 => MINILM_INT8_MODEL_ID,
        }
    }
}

/// Knobs of [`MiniLmEmbedder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiniLmOptions {
    /// Worker threads of this embedder's own pool. Default 1; the binary
    /// sets it from its `threads` setting (`EVOMEM_THREADS`, `--threads`).
    pub threads: usize,
    /// Texts per forward pass. Default 32 (sentence-transformers' default).
    pub batch_size: usize,
    /// Truncation length in tokens, special tokens included. Default 256.
    pub max_seq_len: usize,
    /// Niceness of the pool's threads (Linux; 0: unchanged, the default).
    /// A service sets it so that bulk embedding (memory adds) yields the
    /// CPU to searches: a short call (a query) that finds the pool busy
    /// computes on the caller's thread, at the caller's priority.
    pub pool_nice: i32,
    /// Arithmetic of the dense layers. Default [`Precision::F32`].
    pub precision: Precision,
}

impl Default for MiniLmOptions {
    fn default() -> Self {
        Self {
            threads: 1,
            batch_size: 32,
            max_seq_len: 256,
            pool_nice: 0,
            precision: Precision::F32,
        }
    }
}

/// The all-MiniLM-L6-v2 sentence embedder (384 dimensions).
pub struct MiniLmEmbedder {
    model: BertEncoder,
    tokenizer: Tokenizer,
    pool: rayon::ThreadPool,
    /// Calls running on `pool` (see [`Embedder::embed`]).
    pool_calls: AtomicUsize,
    options: MiniLmOptions,
    dim: usize,
    dir: PathBuf,
}

fn load_err(path: &Path, reason: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

fn infer_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Inference(e.to_string())
}

impl MiniLmEmbedder {
    /// Load a Hugging Face model folder holding `config.json`,
    /// `tokenizer.json` and `model.safetensors`.
    pub fn load(dir: &Path, options: MiniLmOptions) -> Result<Self, EmbedError> {
        let config_path = dir.join("config.json");
        let config_text =
            std::fs::read_to_string(&config_path).map_err(|e| load_err(&config_path, e))?;
        let config = BertConfig::from_json(&config_text).map_err(|e| load_err(&config_path, e))?;

        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| load_err(&tok_path, e))?;
        // The shipped file pads and truncates to a fixed 128 tokens;
        // sentence-transformers truncates at max_seq_length (256) and pads to
        // the longest text of the batch. We pad ourselves, per batch.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: options.max_seq_len.max(2),
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| load_err(&tok_path, e))?;
        tokenizer.with_padding(None);

        let weights_path = dir.join("model.safetensors");
        let bytes = std::fs::read(&weights_path).map_err(|e| load_err(&weights_path, e))?;
        let tensors = read_safetensors(&bytes).map_err(|e| load_err(&weights_path, e))?;
        drop(bytes);
        let model = BertEncoder::from_tensors_as(config, tensors, options.precision)
            .map_err(|e| load_err(&weights_path, e))?;

        let dim = model.hidden();
        let threads = options.threads.max(1);
        let nice = options.pool_nice;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("evomem-minilm-{i}"))
            .start_handler(move |_| lower_current_thread(nice))
            .build()
            .map_err(|e| load_err(dir, e))?;
        Ok(Self {
            model,
            tokenizer,
            pool,
            pool_calls: AtomicUsize::new(0),
            options: MiniLmOptions { threads, ..options },
            dim,
            dir: dir.to_path_buf(),
        })
    }

    /// The options in force.
    pub fn options(&self) -> &MiniLmOptions {
        &self.options
    }

    /// Switch the attention variant (the int8 attention experiment).
    #[cfg(test)]
    pub(crate) fn set_attention_mode(&mut self, mode: crate::bert::AttentionMode) {
        self.model.attention_mode = mode;
    }

    /// The model folder this embedder was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Token ids (special tokens included, truncated) of each text.
    fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, EmbedError> {
        texts
            .iter()
            .map(|t| {
                self.tokenizer
                    .encode(*t, true)
                    .map(|enc| enc.get_ids().to_vec())
                    .map_err(infer_err)
            })
            .collect()
    }

    /// Forward one batch of token-id sequences; returns one normalised vector
    /// per sequence.
    fn forward_batch(&self, batch: &[&Vec<u32>], exec: Exec) -> Result<Vec<Vec<f32>>, EmbedError> {
        let seqs: Vec<&[u32]> = batch.iter().map(|s| s.as_slice()).collect();
        self.model.embed_pooled(&seqs, exec).map_err(infer_err)
    }

    /// Batch token sequences by length and forward them, with the parallel
    /// parts where `exec` says; one vector per sequence, in input order.
    fn run(&self, tokens: &[Vec<u32>], exec: Exec) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Length-sorted batching (longest first, ties by input order so
        // the result is deterministic).
        let mut order: Vec<usize> = (0..tokens.len()).collect();
        order.sort_by(|&a, &b| tokens[b].len().cmp(&tokens[a].len()).then(a.cmp(&b)));
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); tokens.len()];
        for chunk in order.chunks(self.options.batch_size.max(1)) {
            let batch: Vec<&Vec<u32>> = chunk.iter().map(|&i| &tokens[i]).collect();
            let vecs = self.forward_batch(&batch, exec)?;
            for (&i, v) in chunk.iter().zip(vecs) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

impl Embedder for MiniLmEmbedder {
    fn model_id(&self) -> &str {
        self.options.precision.model_id()
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let tokens = self.tokenize(texts)?;
        // A small call (at most `INLINE_TOKENS` tokens) that finds another
        // call on the pool computes on its own thread instead of queueing:
        // rayon's workers finish every task of the running call before they
        // take a new one, so in an evaluation, where policies run in
        // parallel, one short text of AtomRec's waited behind a whole
        // 256-token MARS profile (issue 16, item 5). Larger calls queue on
        // the pool as before. Nothing here blocks: a caller may be a rayon
        // worker of another pool, and a worker that waits runs that pool's
        // other tasks on its stack. The results are the same bits either way.
        let small = tokens.iter().map(Vec::len).sum::<usize>() <= INLINE_TOKENS;
        if small && self.pool_calls.load(Ordering::Acquire) > 0 {
            return self.run(&tokens, Exec::Inline);
        }
        let _on_pool = PoolCall::enter(&self.pool_calls);
        self.pool.install(|| self.run(&tokens, Exec::Pool))
    }
}
