//! # evomem-gguf
//!
//! An in-process language model for evomem's LLM roles (`--llm gguf:PATH`):
//! a GGUF file run by candle's quantized llama (llama and qwen2-style
//! decoders such as SmolLM2), with everything else taken from the file
//! itself, so one path is the whole configuration:
//!
//! - the tokenizer is rebuilt from `tokenizer.ggml.*` ([`tokenizer`]);
//! - the chat template from `tokenizer.chat_template` ([`template`]);
//! - the context length from `<arch>.context_length`.
//!
//! Decoding is greedy at temperature 0 (every request the roles send) and
//! seeded sampling above it: the seed mixes the backend's seed with a hash
//! of the prompt, so a rerun of the same prompt gives the same answer.
//!
//! **Structured answers.** A request for JSON (`ResponseFormat::JsonObject`
//! or `JsonSchema`) starts the assistant's turn with `{` and stops as soon as
//! the top-level object closes (string-aware brace counting). A small model
//! then cannot wander off before the object, nor keep generating after it,
//! which is what made every `mars_extract` call of a 135M model run to the
//! token cap through llama-server (issue 18). A `JsonSchema` request is
//! further decoded under its schema ([`constrain`]): each token is the most
//! likely one that keeps the answer a valid prefix of a matching document,
//! and generation ends when the document is complete
//! ([`GgufOptions::schema_constrained`]; `llm.response_format =
//! "json_object"` turns it off for measurement).
//!
//! **Kernels.** candle 0.11 has SIMD dot products for Q4_0, Q8_0 and the
//! k-quants, but only a scalar one for Q4_1, Q5_0 and Q5_1 — SmolLM2's file
//! is Q4_1. With `requantize` (the default) such tensors are dequantized at
//! load and quantized again to Q8_0, which runs on candle's AVX2 kernel: the
//! weights keep the values the file gives them to within Q8_0's rounding
//! (half a step of 1/127 of each 32-block's largest magnitude), at twice the
//! memory of 4-bit blocks (about 150 MB for SmolLM2-135M).
//!
//! The model sits behind a mutex: one generation at a time per loaded file,
//! on its own rayon pool of `threads` threads.

pub mod constrain;
pub mod template;
pub mod tokenizer;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use evomem_core::{ChatRequest, ChatResponse, LanguageModel, LlmError, ResponseFormat, Usage};
use rand::distributions::{Distribution, WeightedIndex};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;
use template::ChatTemplate;
use thiserror::Error;

/// Longest context candle's quantized llama supports (its rotary table).
pub const MAX_CONTEXT: usize = 4096;

/// Errors while loading a GGUF file. Each names the file.
#[derive(Debug, Error)]
pub enum GgufError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a GGUF model candle can run.
    #[error("{path}: not a usable GGUF model: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The tokenizer metadata is missing or unsupported.
    #[error("{path}: tokenizer: {message}")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The chat template is missing or unsupported.
    #[error("{path}: chat template: {message}")]
    Template {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The thread pool could not be built.
    #[error("thread pool: {0}")]
    Threads(String),
}

/// How the backend runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GgufOptions {
    /// Inference threads (0 = every core).
    pub threads: usize,
    /// Seed of sampling at temperature > 0.
    pub seed: u64,
    /// Completion limit when a request sets none.
    pub default_max_tokens: u32,
    /// Convert tensors whose type has no SIMD kernel in candle (Q4_1, Q5_0,
    /// Q5_1) to Q8_0 at load.
    pub requantize: bool,
    /// Decode a `JsonSchema` request under the schema ([`constrain`]):
    /// every token keeps the answer a valid prefix of a matching document.
    /// Off: JSON prefill and brace stop only. Default on.
    pub schema_constrained: bool,
}

impl Default for GgufOptions {
    fn default() -> Self {
        Self {
            threads: 0,
            seed: 42,
            default_max_tokens: 512,
            requantize: true,
            schema_constrained: true,
        }
    }
}

/// Timing of one generation, for `evomem bench llm`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timing {
    /// Seconds spent on the prompt (one forward pass over it).
    pub prompt_s: f64,
    /// Seconds spent generating.
    pub generate_s: f64,
}

/// A GGUF model loaded in process.
pub struct GgufModel {
    path: PathBuf,
    id: String,
    weights: Mutex<ModelWeights>,
    tokenizer: tokenizers::Tokenizer,
    /// Each token's text on its own (`None`: empty or a partial UTF-8
    /// sequence), built on the first schema-constrained request.
    pieces: std::sync::OnceLock<Vec<Option<String>>>,
    template: ChatTemplate,
    stop_ids: Vec<u32>,
    context: usize,
    pool: rayon::ThreadPool,
    opts: GgufOptions,
}

impl std::fmt::Debug for GgufModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufModel")
            .field("path", &self.path)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

/// Rewrite the model in memory with every Q4_1/Q5_0/Q5_1 tensor (whose
/// rows fit Q8_0's 32-blocks) as Q8_0; other tensors are copied as they are.
fn requantize<R: std::io::Read + std::io::Seek>(
    ct: gguf_file::Content,
    reader: &mut R,
) -> candle_core::Result<(gguf_file::Content, std::io::Cursor<Vec<u8>>)> {
    use candle_core::quantized::{GgmlDType, QTensor};
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let q = ct.tensor(reader, name, &Device::Cpu)?;
        let slow = matches!(
            q.dtype(),
            GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1
        );
        let fits = q.shape().dims().last().is_some_and(|d| d % 32 == 0);
        let q = if slow && fits {
            QTensor::quantize(&q.dequantize(&Device::Cpu)?, GgmlDType::Q8_0)?
        } else {
            q
        };
        tensors.push((name.clone(), q));
    }
    let mut md: Vec<(&String, &gguf_file::Value)> = ct.metadata.iter().collect();
    md.sort_by(|a, b| a.0.cmp(b.0));
    let md: Vec<(&str, &gguf_file::Value)> = md.into_iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut buf = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut buf, &md, &ts)?;
    buf.set_position(0);
    let ct = gguf_file::Content::read(&mut buf)?;
    Ok((ct, buf))
}

fn md_u32(ct: &gguf_file::Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok())
}

impl GgufModel {
    /// Load `path`.
    pub fn load(path: &Path, opts: GgufOptions) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let format = |message: String| GgufError::Format {
            path: path.to_path_buf(),
            message,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let ct = gguf_file::Content::read(&mut file).map_err(|e| format(e.to_string()))?;
        let arch = ct
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        let context = md_u32(&ct, &format!("{arch}.context_length"))
            .map_or(MAX_CONTEXT, |c| (c as usize).min(MAX_CONTEXT));
        let tokenizer =
            tokenizer::from_metadata(&ct.metadata).map_err(|message| GgufError::Tokenizer {
                path: path.to_path_buf(),
                message,
            })?;
        let template_src = ct
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        let template =
            ChatTemplate::detect(&template_src).map_err(|message| GgufError::Template {
                path: path.to_path_buf(),
                message,
            })?;
        let mut stop_ids: Vec<u32> = md_u32(&ct, "tokenizer.ggml.eos_token_id")
            .into_iter()
            .collect();
        if let Some(end) = tokenizer.token_to_id(template.end_of_turn()) {
            if !stop_ids.contains(&end) {
                stop_ids.push(end);
            }
        }
        let weights = if opts.requantize {
            let (ct, mut cursor) =
                requantize(ct, &mut file).map_err(|e| format(format!("requantize: {e}")))?;
            ModelWeights::from_gguf(ct, &mut cursor, &Device::Cpu)
        } else {
            ModelWeights::from_gguf(ct, &mut file, &Device::Cpu)
        }
        .map_err(|e| format(format!("{arch}: {e}")))?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.threads)
            .build()
            .map_err(|e| GgufError::Threads(e.to_string()))?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(Self {
            path: path.to_path_buf(),
            id: format!("gguf:{name}"),
            weights: Mutex::new(weights),
            tokenizer,
            pieces: std::sync::OnceLock::new(),
            template,
            stop_ids,
            context,
            pool,
            opts,
        })
    }

    /// The model's context length (capped at [`MAX_CONTEXT`]).
    pub fn context(&self) -> usize {
        self.context
    }

    /// Token count of `text` under the model's tokenizer.
    pub fn count_tokens(&self, text: &str) -> Result<usize, LlmError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().len())
            .map_err(|e| LlmError::Permanent(format!("{}: tokenize: {e}", self.id)))
    }

    /// Complete `req`, and say how long the prompt and the generation took.
    pub fn complete_timed(&self, req: &ChatRequest) -> Result<(ChatResponse, Timing), LlmError> {
        // The lock is taken before entering the pool: a pool thread that
        // blocked on it could hold the work the lock's owner waits for in
        // a nested join (a deadlock seen with two concurrent callers).
        let mut weights = self
            .weights
            .lock()
            .map_err(|_| LlmError::Permanent(format!("{}: model lock poisoned", self.id)))?;
        let weights: &mut ModelWeights = &mut weights;
        self.pool.install(|| self.generate(weights, req))
    }

    /// Each token's own text (see the field).
    fn pieces(&self) -> &[Option<String>] {
        self.pieces.get_or_init(|| {
            let n = self.tokenizer.get_vocab_size(true);
            (0..n as u32)
                .map(|id| {
                    self.tokenizer
                        .decode(&[id], true)
                        .ok()
                        .filter(|t| !t.is_empty() && !t.contains('\u{FFFD}'))
                })
                .collect()
        })
    }

    /// The token to emit under `schema` after `answer`: the sampled (or
    /// greedy) token when it fits, else the most likely token that keeps
    /// the answer a valid prefix; a stop token only once the answer is a
    /// complete document. `None` when nothing fits.
    ///
    /// `budget` is how many tokens may follow this one. A token fits only
    /// when the answer can still be closed within them
    /// ([`constrain::closing_cost`], one token per character at worst), so
    /// an answer ends as a complete document instead of being cut off at
    /// its completion limit. When no token can keep that promise (a limit
    /// below the schema's shortest document), validity alone decides.
    fn pick_constrained(
        &self,
        logits: &[f32],
        temperature: f32,
        rng: Option<&mut ChaCha8Rng>,
        schema: &serde_json::Value,
        answer: &str,
        budget: usize,
    ) -> Option<u32> {
        let pieces = self.pieces();
        let done = constrain::fit(schema, answer) == constrain::Fit::Complete;
        let fits = |id: u32, within_budget: bool| -> bool {
            if self.stop_ids.contains(&id) {
                return done;
            }
            match pieces.get(id as usize) {
                Some(Some(p)) => {
                    let mut t = String::with_capacity(answer.len() + p.len());
                    t.push_str(answer);
                    t.push_str(p);
                    constrain::closing_cost(schema, &t)
                        .is_some_and(|c| !within_budget || c <= budget)
                }
                _ => false,
            }
        };
        let first = pick(logits, temperature, rng);
        if fits(first, true) {
            return Some(first);
        }
        // Best first: the top 64 by a linear-time selection, then (rarely)
        // the whole vocabulary in order.
        let by_logit = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let head = 64.min(order.len());
        if head < order.len() {
            order.select_nth_unstable_by(head, by_logit);
        }
        let (top, rest) = order.split_at_mut(head);
        top.sort_by(by_logit);
        if let Some(id) = top.iter().copied().find(|&id| fits(id, true)) {
            return Some(id);
        }
        rest.sort_by(by_logit);
        rest.iter().copied().find(|&id| fits(id, true)).or_else(|| {
            top.iter()
                .chain(rest.iter())
                .copied()
                .find(|&id| fits(id, false))
        })
    }

    fn permanent(&self, what: &str, e: &dyn std::fmt::Display) -> LlmError {
        LlmError::Permanent(format!("{}: {what}: {e}", self.id))
    }

    /// The rendered prompt (with `prefill` opened) and its token ids; a
    /// prompt that fills the context is refused.
    fn encode_prompt(
        &self,
        req: &ChatRequest,
        prefill: &str,
    ) -> Result<(String, Vec<u32>), LlmError> {
        let prompt = self.template.render(&req.messages, prefill);
        let ids = self
            .tokenizer
            .encode(prompt.as_str(), false)
            .map_err(|e| self.permanent("tokenize", &e))?
            .get_ids()
            .to_vec();
        if ids.len() >= self.context {
            return Err(LlmError::ContextTooLong(format!(
                "{}: prompt of {} tokens, context {}",
                self.id,
                ids.len(),
                self.context
            )));
        }
        Ok((prompt, ids))
    }

    /// The next-token logits after feeding `tokens` at position `pos`.
    fn logits(
        &self,
        weights: &mut ModelWeights,
        tokens: &[u32],
        pos: usize,
    ) -> Result<Vec<f32>, LlmError> {
        let input = Tensor::new(tokens, &Device::Cpu)
            .and_then(|t| t.unsqueeze(0))
            .map_err(|e| self.permanent("input", &e))?;
        weights
            .forward(&input, pos)
            .and_then(|l| l.squeeze(0))
            .and_then(|l| l.to_dtype(candle_core::DType::F32))
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(|e| self.permanent("forward", &e))
    }

    /// The answer's text: the prefill and the decoded tokens, cut at the
    /// first stop string and, for JSON, after the first complete object.
    fn final_text(
        &self,
        prefill: &str,
        out: &[u32],
        stop: &[String],
        json: bool,
    ) -> Result<String, LlmError> {
        let mut text = format!(
            "{prefill}{}",
            self.tokenizer
                .decode(out, true)
                .map_err(|e| self.permanent("decode", &e))?
        );
        if let Some(cut) = stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            text.truncate(cut);
        }
        if json {
            if let Some(end) = JsonScan::object_end(&text) {
                text.truncate(end);
            }
        }
        Ok(text)
    }

    fn generate(
        &self,
        weights: &mut ModelWeights,
        req: &ChatRequest,
    ) -> Result<(ChatResponse, Timing), LlmError> {
        let perm = |what: &str, e: &dyn std::fmt::Display| self.permanent(what, e);
        let json = matches!(
            req.response_format,
            ResponseFormat::JsonObject | ResponseFormat::JsonSchema { .. }
        );
        let prefill = if json { "{" } else { "" };
        let (prompt, ids) = self.encode_prompt(req, prefill)?;
        let limit = req
            .max_tokens
            .unwrap_or(self.opts.default_max_tokens)
            .max(1) as usize;
        let limit = limit.min(self.context - ids.len());
        let mut rng = (req.temperature > 0.0).then(|| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            prompt.hash(&mut h);
            ChaCha8Rng::seed_from_u64(self.opts.seed ^ h.finish())
        });
        weights.clear_kv_cache();
        let t0 = Instant::now();
        let mut logits = self.logits(weights, &ids, 0)?;
        let prompt_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut out: Vec<u32> = Vec::new();
        let mut scan = JsonScan::default();
        if json {
            scan.feed("{");
        }
        let schema = match &req.response_format {
            ResponseFormat::JsonSchema { schema, .. } if self.opts.schema_constrained => {
                Some(schema)
            }
            _ => None,
        };
        let mut answer = prefill.to_string();
        while out.len() < limit {
            let next = match schema {
                None => pick(&logits, req.temperature, rng.as_mut()),
                Some(schema) => {
                    match self.pick_constrained(
                        &logits,
                        req.temperature,
                        rng.as_mut(),
                        schema,
                        &answer,
                        limit - out.len() - 1,
                    ) {
                        Some(id) => id,
                        None => break,
                    }
                }
            };
            if self.stop_ids.contains(&next) {
                break;
            }
            if schema.is_some() {
                if let Some(Some(p)) = self.pieces().get(next as usize) {
                    answer.push_str(p);
                }
            }
            out.push(next);
            let piece = self
                .tokenizer
                .decode(&[next], true)
                .map_err(|e| perm("decode", &e))?;
            if json && scan.feed(&piece) {
                break;
            }
            if !req.stop.is_empty() {
                let so_far = self
                    .tokenizer
                    .decode(&out, true)
                    .map_err(|e| perm("decode", &e))?;
                if req.stop.iter().any(|s| so_far.contains(s.as_str())) {
                    break;
                }
            }
            if out.len() == limit {
                break;
            }
            let pos = ids.len() + out.len() - 1;
            logits = self.logits(weights, &[next], pos)?;
        }
        let generate_s = t1.elapsed().as_secs_f64();
        let text = self.final_text(prefill, &out, &req.stop, json)?;
        Ok((
            ChatResponse {
                text,
                usage: Usage {
                    prompt_tokens: ids.len() as u64,
                    completion_tokens: out.len() as u64,
                },
            },
            Timing {
                prompt_s,
                generate_s,
            },
        ))
    }
}

impl LanguageModel for GgufModel {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.complete_timed(req).map(|(r, _)| r)
    }
}

/// Greedy argmax at temperature 0 (ties: the lowest id), else a draw from
/// `softmax(logits / temperature)`.
fn pick(logits: &[f32], temperature: f32, rng: Option<&mut ChaCha8Rng>) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| {
                if v > best.1 {
                    (i, v)
                } else {
                    best
                }
            })
            .0 as u32
    };
    let Some(rng) = rng.filter(|_| temperature > 0.0) else {
        return argmax();
    };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f64> = logits
        .iter()
        .map(|&v| f64::from((v - max) / temperature).exp())
        .collect();
    match WeightedIndex::new(&w) {
        Ok(d) => d.sample(rng) as u32,
        Err(_) => argmax(),
    }
}

/// String-aware brace counting over generated text: says when the
/// top-level JSON object (or array) has closed.
#[derive(Debug, Default, Clone)]
struct JsonScan {
    depth: usize,
    opened: bool,
    in_string: bool,
    escaped: bool,
}

impl JsonScan {
    /// Feed more text; true once the top-level value has closed.
    fn feed(&mut self, s: &str) -> bool {
        for ch in s.chars() {
            if self.step(ch) {
                return true;
            }
        }
        false
    }

    fn step(&mut self, ch: char) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if ch == '\\' {
                self.escaped = true;
            } else if ch == '"' {
                self.in_string = false;
            }
            return false;
        }
        match ch {
            '"' if self.opened => self.in_string = true,
            '{' | '[' => {
                self.depth += 1;
                self.opened = true;
            }
            '}' | ']' if self.depth > 0 => {
                self.depth -= 1;
                return self.opened && self.depth == 0;
            }
            _ => {}
        }
        false
    }

    /// Byte offset just past the top-level value of `text`, if it closes.
    fn object_end(text: &str) -> Option<usize> {
        let mut scan = JsonScan::default();
        for (i, ch) in text.char_indices() {
            if scan.step(ch) {
                return Some(i + ch.len_utf8());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_scan_stops_at_the_closing_brace_outside_strings() {
        let mut s = JsonScan::default();
        assert!(!s.feed("{\"a\": \"}{\\\"\", \"b\": [1, {\"c\": 2}"));
        assert!(s.feed("]} trailing"));
        assert_eq!(
            JsonScan::object_end("{\"x\": \"}\"} and more"),
            Some("{\"x\": \"}\"}".len())
        );
        assert_eq!(JsonScan::object_end("{\"open\": 1"), None);
    }

    #[test]
    fn greedy_pick_is_argmax_and_sampling_is_seeded() {
        let logits = [0.1, 2.0, 1.9, -1.0];
        assert_eq!(pick(&logits, 0.0, None), 1);
        let draw = |seed| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            (0..20)
                .map(|_| pick(&logits, 1.0, Some(&mut r)))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert!(draw(7).iter().any(|&t| t != 1), "temperature 1 samples");
    }
}
