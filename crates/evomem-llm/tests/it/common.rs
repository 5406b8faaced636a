//! Shared helpers: a tiny deterministic embedder and rank inputs.

use evomem_core::{ContextEntry, DecisionContext, EmbedError, Embedder, ItemId};
use evomem_llm::openai::{OpenAiCompatible, OpenAiConfig};
use evomem_llm::{RankCandidate, RankInput, RankRole};
use std::sync::Arc;
use std::time::Duration;

/// Bag-of-words hashing into 64 buckets, L2-normalised (test only).
pub struct TestEmbedder;

impl Embedder for TestEmbedder {
    fn model_id(&self) -> &str {
        "test-hash-64"
    }
    fn dim(&self) -> usize {
        64
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 64];
                for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                    if w.len() < 3 {
                        continue;
                    }
                    let h = w.bytes().fold(1469598103934665603u64, |h, b| {
                        (h ^ u64::from(b)).wrapping_mul(1099511628211)
                    });
                    v[(h % 64) as usize] += 1.0;
                }
                evomem_core::normalize(&mut v);
                v
            })
            .collect())
    }
}

pub fn role() -> RankRole {
    RankRole::new(Arc::new(TestEmbedder))
}

pub fn cand(i: u32, title: &str, text: &str) -> RankCandidate {
    RankCandidate {
        item: ItemId(i),
        title: title.to_string(),
        text: text.to_string(),
        embedding: Vec::new(),
    }
}

pub fn entry(text: &str, weight: f32) -> ContextEntry {
    ContextEntry {
        memory: None,
        item: None,
        text: text.to_string(),
        weight,
        embedding: None,
        path: None,
    }
}

/// Four candidates and a memory that likes sci-fi and dislikes romance.
pub fn input() -> RankInput {
    RankInput {
        user: "u1".to_string(),
        instruction: None,
        context: DecisionContext {
            profile: Some("Enjoys science fiction and space adventures.".to_string()),
            entries: vec![
                entry("Watched Alien (1979). Genres: Horror, Sci-Fi", 1.0),
                entry(
                    "Watched Star Wars (1977). Genres: Action, Adventure, Sci-Fi",
                    0.8,
                ),
                entry(
                    "Disliked Sleepless in Seattle (1993). Genres: Comedy, Romance",
                    -0.6,
                ),
            ],
            scores: None,
            ..DecisionContext::default()
        },
        candidates: vec![
            cand(10, "Notting Hill (1999)", "Genres: Comedy, Romance"),
            cand(11, "Aliens (1986)", "Genres: Action, Sci-Fi, Thriller, War"),
            cand(12, "Fargo (1996)", "Genres: Crime, Drama, Thriller"),
            cand(13, "Contact (1997)", "Genres: Drama, Sci-Fi"),
        ],
        seed: 7,
    }
}

/// A fast-failing client for `base_url`.
pub fn client(base_url: &str, retries: u32, timeout_ms: u64) -> OpenAiCompatible {
    let mut cfg = OpenAiConfig::new("test-model", base_url);
    cfg.api_key_env = "EVOMEM_TEST_FIXTURE_KEY".to_string();
    cfg.api_key = Some(evomem_llm::Secret("sk-test-not-secret".to_string()));
    cfg.max_retries = retries;
    cfg.timeout = Duration::from_millis(timeout_ms);
    cfg.backoff_base = Duration::from_millis(10);
    cfg.backoff_max = Duration::from_millis(50);
    OpenAiCompatible::new(cfg).unwrap()
}

/// Index of the best score.
pub fn best(scores: &[f64]) -> usize {
    let mut b = 0;
    for (i, s) in scores.iter().enumerate() {
        if *s > scores[b] {
            b = i;
        }
    }
    b
}
