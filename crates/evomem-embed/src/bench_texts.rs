//! Seeded benchmark texts for `evomem bench embed`: short review-like
//! sentences (6–13 words) and long ones (150–199 words, close to MiniLM's
//! 256-token limit), with a few accented and CJK words so tokenisation is
//! exercised. Deterministic for a given seed, so the Rust and Python sides of
//! a benchmark embed exactly the same texts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const WORDS: &[&str] = &[
    "movie",
    "thriller",
    "romantic",
    "comedy",
    "drama",
    "classic",
    "director",
    "soundtrack",
    "album",
    "jazz",
    "guitar",
    "story",
    "character",
    "plot",
    "twist",
    "ending",
    "actor",
    "performance",
    "beautiful",
    "slow",
    "funny",
    "dark",
    "war",
    "space",
    "family",
    "music",
    "love",
    "crime",
    "detective",
    "city",
    "night",
    "summer",
    "old",
    "new",
    "great",
    "boring",
    "recommend",
    "watched",
    "listened",
    "again",
    "friends",
    "weekend",
    "favorite",
    "scene",
    "visual",
    "effects",
    "sequel",
    "original",
    "book",
    "adaptation",
    "lyrics",
    "vocals",
    "band",
    "live",
    "recording",
    "remaster",
    "émigré",
    "naïve",
    "café",
    "東京",
    "über",
];

fn sentence(rng: &mut ChaCha8Rng, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push_str(if rng.gen_bool(0.08) { ", " } else { " " });
        }
        s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
    }
    s.push('.');
    s
}

/// `short` short texts and `long` long texts, generated from `seed`.
pub fn bench_texts(seed: u64, short: usize, long: usize) -> (Vec<String>, Vec<String>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let s = (0..short)
        .map(|_| {
            let n = rng.gen_range(6..14);
            sentence(&mut rng, n)
        })
        .collect();
    let l = (0..long)
        .map(|_| {
            let n = rng.gen_range(150..200);
            sentence(&mut rng, n)
        })
        .collect();
    (s, l)
}

#[cfg(test)]
mod tests {
    #[test]
    fn deterministic() {
        assert_eq!(super::bench_texts(3, 4, 2), super::bench_texts(3, 4, 2));
        let (s, l) = super::bench_texts(3, 4, 2);
        assert_eq!((s.len(), l.len()), (4, 2));
        assert!(l[0].split(' ').count() >= 150);
    }
}
