//! The one word tokenizer, stop-word list and folder slug of evomem.
//!
//! Offline role algorithms (MARS categories and extraction, AtomRec keywords,
//! the offline ranker's token overlap) all need "the content words of a
//! text". They share this definition so that a keyword means the same thing
//! in every policy: split on anything that is not alphanumeric, lower-case,
//! keep tokens of at least three characters that are not all digits and not
//! in [`STOP_WORDS`].

/// Words too common to carry a preference: English function words, words
/// that name a catalog's medium rather than its content (album, disc,
/// edition, ...), and a few frequent French, German and Spanish articles
/// (the CDs catalog is multilingual). The union of the lists that MARS,
/// AtomRec and the offline ranker once kept separately. Sorted, so that
/// [`is_stop_word`] can binary-search it.
pub const STOP_WORDS: &[&str] = &[
    "about",
    "after",
    "album",
    "all",
    "also",
    "and",
    "are",
    "been",
    "before",
    "best",
    "but",
    "can",
    "collection",
    "das",
    "deluxe",
    "der",
    "des",
    "die",
    "disc",
    "edition",
    "feat",
    "featuring",
    "for",
    "from",
    "has",
    "have",
    "her",
    "his",
    "into",
    "item",
    "items",
    "its",
    "just",
    "las",
    "les",
    "like",
    "likes",
    "los",
    "love",
    "more",
    "most",
    "music",
    "new",
    "not",
    "one",
    "other",
    "our",
    "out",
    "over",
    "remastered",
    "some",
    "song",
    "songs",
    "such",
    "than",
    "that",
    "the",
    "their",
    "them",
    "there",
    "these",
    "they",
    "this",
    "those",
    "track",
    "tracks",
    "two",
    "una",
    "une",
    "user",
    "version",
    "very",
    "vol",
    "volume",
    "was",
    "were",
    "what",
    "when",
    "which",
    "who",
    "will",
    "with",
    "you",
    "your",
];

/// True when `word` (already lower-case) is a stop word.
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// The content words of `text`, in order, with repeats: alphanumeric runs,
/// lower-cased, at least three characters, not all ASCII digits, not stop
/// words.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_lowercase)
        .filter(|w| !is_stop_word(w))
}

/// [`words`] without repeats, in first-seen order.
pub fn distinct_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in words(text) {
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// A name that is safe as a folder name: the spec characters `[`, `]`, `,`
/// and `=` become `_` (`mars[kcat=2]` → `mars_kcat_2_`).
pub fn slug(spec: &str) -> String {
    spec.chars()
        .map(|c| match c {
            '[' | ']' | ',' | '=' => '_',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_and_unique() {
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, STOP_WORDS, "binary search needs a sorted list");
    }

    #[test]
    fn words_drop_stop_words_short_tokens_and_numbers() {
        let w: Vec<String> = words("The Best of 1995: Jazz & the Blues, vol. 2 (Deluxe)").collect();
        assert_eq!(w, vec!["jazz", "blues"]);
        assert_eq!(distinct_words("jazz Jazz blues"), vec!["jazz", "blues"]);
    }

    #[test]
    fn slug_replaces_spec_punctuation() {
        assert_eq!(slug("mars[kcat=2,tiers=ep]"), "mars_kcat_2_tiers_ep_");
        assert_eq!(slug("bpr"), "bpr");
    }
}
