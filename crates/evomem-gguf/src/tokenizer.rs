//! The tokenizer of a GGUF file, rebuilt from its metadata.
//!
//! llama.cpp's GGUF files store the tokenizer as `tokenizer.ggml.model`
//! (`gpt2` for byte-level BPE), the vocabulary `tokenizer.ggml.tokens`, the
//! merge list `tokenizer.ggml.merges` (`"a b"` per rule) and each token's
//! type `tokenizer.ggml.token_type` (3 = control). This module turns those
//! into a `tokenizers::Tokenizer`: byte-level BPE with single-digit splits
//! before the byte-level step (SmolLM2's `smollm` pre-tokenizer), a
//! byte-level decoder, and every control token added as a special token so
//! that `<|im_start|>` and its kin are matched whole.

use candle_core::quantized::gguf_file::Value;
use std::collections::HashMap;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

/// Token type of control tokens in `tokenizer.ggml.token_type`.
const CONTROL: i32 = 3;

fn strings(md: &HashMap<String, Value>, key: &str) -> Result<Vec<String>, String> {
    let v = md
        .get(key)
        .ok_or_else(|| format!("missing `{key}`"))?
        .to_vec()
        .map_err(|e| format!("`{key}`: {e}"))?;
    v.iter()
        .enumerate()
        .map(|(i, s)| {
            s.to_string()
                .cloned()
                .map_err(|e| format!("`{key}`[{i}]: {e}"))
        })
        .collect()
}

/// Build the tokenizer from GGUF metadata.
pub fn from_metadata(md: &HashMap<String, Value>) -> Result<Tokenizer, String> {
    let model = md
        .get("tokenizer.ggml.model")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if model != "gpt2" {
        return Err(format!(
            "`tokenizer.ggml.model` is `{model}`; only byte-level BPE (`gpt2`) is supported"
        ));
    }
    let tokens = strings(md, "tokenizer.ggml.tokens")?;
    let merges: Vec<(String, String)> = strings(md, "tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| format!("`tokenizer.ggml.merges`[{i}] is not `a b`: {m:?}"))
        })
        .collect::<Result<_, _>>()?;
    let types: Vec<i32> = match md.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(|e| format!("`tokenizer.ggml.token_type`: {e}"))?
            .iter()
            .map(|t| t.to_i32().unwrap_or(1))
            .collect(),
        None => Vec::new(),
    };
    let mut vocab = Vocab::default();
    for (i, t) in tokens.iter().enumerate() {
        let id = u32::try_from(i).map_err(|_| "vocabulary too large".to_string())?;
        vocab.insert(t.clone(), id);
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| format!("BPE: {e}"))?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(Sequence::new(vec![
        PreTokenizerWrapper::Digits(Digits::new(true)),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
    ])));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(types.iter())
        .filter(|(_, &ty)| ty == CONTROL)
        .map(|(t, _)| AddedToken::from(t.clone(), true))
        .collect();
    tok.add_special_tokens(special)
        .map_err(|e| format!("special tokens: {e}"))?;
    Ok(tok)
}
