//! Atomic note construction (AtomRec §2.3): m = {c, t, K, G, X, e, L}.
//!
//! - content `c` is the record's `text` (the original evidence, never rewritten);
//! - `t` is the record's `created_at`;
//! - keywords `K` (field `keywords`), tags `G` (field `tags`) and context `X`
//!   (field `context`, the current intent) are JSON fields;
//! - `e` is the embedding over the concatenated fields. To keep every field
//!   embedding cacheable (ml-100k has 100k notes but only ~1.7k items and a few
//!   thousand distinct tag/context strings), `e` is the normalised sum of the
//!   per-field embeddings `E(c)`, `E(K)`, `E(G)`, `E(X)` — a bag-of-fields
//!   encoding of the concatenation. K, G and X are themselves lists (keywords;
//!   tags; the intent and the recent titles, split at `;` and `|`) whose
//!   combinations are nearly unique per note once notes evolve, so each of
//!   `E(K)`, `E(G)`, `E(X)` is the normalised sum of its members' cached
//!   embeddings ([`FieldEncoder::bag`]). Ablations drop K/G (`kt=false`) or X
//!   (`context=false`) from both the note and the sum.
//!
//! Note construction is deterministic string processing over item metadata
//! and the user's recent interactions, so no LLM role is needed for it.
//! [`NoteView`] is a note's fields as prompts show them and as records store
//! them ([`NoteView::to_fields`], [`NoteView::from_record`]).

use evomem_core::{normalize, EmbedError, Embedder, Item, MemoryRecord, PolicyError};
use evomem_kit::EmbeddingCache;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The prompt-facing view of one note: content c, keywords K, tags G,
/// context X.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoteView {
    /// Content c.
    pub content: String,
    /// Keywords K.
    pub keywords: Vec<String>,
    /// Tags G.
    pub tags: Vec<String>,
    /// Context X.
    pub context: String,
}

impl NoteView {
    /// The record fields that hold K, G and X (`keywords`, `tags`, `context`).
    pub fn to_fields(&self) -> BTreeMap<String, serde_json::Value> {
        let mut f = BTreeMap::new();
        f.insert("keywords".into(), serde_json::json!(self.keywords));
        f.insert("tags".into(), serde_json::json!(self.tags));
        f.insert("context".into(), serde_json::json!(self.context));
        f
    }

    /// The view of an atom record: its text and the fields of
    /// [`NoteView::to_fields`] (a missing field is empty).
    pub fn from_record(r: &MemoryRecord) -> Result<Self, PolicyError> {
        let mut v = NoteView {
            content: r.text.clone(),
            keywords: Vec::new(),
            tags: Vec::new(),
            context: String::new(),
        };
        v.set_fields(&r.fields)?;
        Ok(v)
    }

    /// Set K, G and X from record fields (as an `UpdateFields` op does; a
    /// JSON `null` empties the field, other keys are not the view's).
    pub fn set_fields(
        &mut self,
        fields: &BTreeMap<String, serde_json::Value>,
    ) -> Result<(), PolicyError> {
        let bad = |k: &str, e: serde_json::Error| {
            PolicyError::Other(format!("atomrec: note field `{k}`: {e}"))
        };
        for (k, v) in fields {
            match k.as_str() {
                "keywords" => {
                    self.keywords = serde_json::from_value(null_as(v, serde_json::json!([])))
                        .map_err(|e| bad(k, e))?;
                }
                "tags" => {
                    self.tags = serde_json::from_value(null_as(v, serde_json::json!([])))
                        .map_err(|e| bad(k, e))?;
                }
                "context" => {
                    self.context = serde_json::from_value(null_as(v, serde_json::json!("")))
                        .map_err(|e| bad(k, e))?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// `v`, or `empty` when `v` is JSON `null`.
fn null_as(v: &serde_json::Value, empty: serde_json::Value) -> serde_json::Value {
    if v.is_null() {
        empty
    } else {
        v.clone()
    }
}

/// Most keywords a note keeps.
pub const MAX_KEYWORDS: usize = 12;
/// Most tags a note keeps.
pub const MAX_TAGS: usize = 10;

/// Lower-case content words of `text` ([`evomem_core::text::words`]), in
/// order, deduplicated.
pub fn keywords_of(text: &str) -> Vec<String> {
    evomem_core::text::distinct_words(text)
}

/// Normalised category tags of an item (lower case, spaces to `-`).
pub fn category_tags(item: &Item) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in &item.categories {
        let t = c.trim().to_lowercase().replace(' ', "-");
        if !t.is_empty() && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// Sentiment tag from an explicit rating (`liked` ≥ 4, `disliked` ≤ 2, else
/// `neutral`); implicit feedback counts as `liked`.
pub fn sentiment(rating: Option<f32>) -> &'static str {
    match rating {
        Some(r) if r >= 4.0 => "liked",
        Some(r) if r <= 2.0 => "disliked",
        Some(_) => "neutral",
        None => "liked",
    }
}

/// The content `c` of a user note: the original evidence in words.
pub fn user_content(item: &Item, rating: Option<f32>) -> String {
    let mut s = match rating {
        Some(r) => format!("Rated {r}/5: {}", item.title),
        None => format!("Interacted with: {}", item.title),
    };
    if !item.categories.is_empty() {
        s.push_str(&format!(" [{}]", item.categories.join(", ")));
    }
    for (k, v) in &item.attributes {
        s.push_str(&format!(" {k}={v}"));
    }
    s
}

/// A note's content as a prompt shows it: the item attributes that
/// [`user_content`] appends as `key=value` words are shown by value alone
/// (` release_year=1993` → ` 1993`). The stored content, and the embedding
/// made from it, keep the keys; a model reads the year just as well, and
/// SmolLM2 spent four tokens on each `release_year=`, about 100 per user
/// over the link, evolve and rank prompts of `budget=lean`. Only trailing
/// words are rewritten, so a title holding `=` is shown as it is.
pub fn prompt_content(content: &str) -> std::borrow::Cow<'_, str> {
    let is_attr = |w: &str| {
        w.split_once('=').is_some_and(|(k, v)| {
            !k.is_empty()
                && !v.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let words: Vec<&str> = content.split(' ').collect();
    let attrs = words.iter().rev().take_while(|w| is_attr(w)).count();
    if attrs == 0 || attrs == words.len() {
        return std::borrow::Cow::Borrowed(content);
    }
    let (head, tail) = words.split_at(words.len() - attrs);
    let mut out = head.join(" ");
    for w in tail {
        out.push(' ');
        out.push_str(w.split_once('=').map_or(*w, |(_, v)| v));
    }
    std::borrow::Cow::Owned(out)
}

/// Keywords K of a user or item note: title words, then category words.
pub fn note_keywords(item: &Item) -> Vec<String> {
    let mut k = keywords_of(&item.title);
    for c in keywords_of(&item.categories.join(" ")) {
        if !k.contains(&c) {
            k.push(c);
        }
    }
    k.truncate(MAX_KEYWORDS);
    k
}

/// Tags G of a user note: category tags plus the sentiment tag.
pub fn note_tags(item: &Item, rating: Option<f32>) -> Vec<String> {
    let mut g = category_tags(item);
    g.truncate(MAX_TAGS - 1);
    g.push(sentiment(rating).to_string());
    g
}

/// Context X of a user note: the current intent, from the categories of the
/// user's recent items (most frequent first, ties by name), and the titles of
/// the last three items (the session the note belongs to).
pub fn note_context(recent: &[&Item], item: &Item) -> String {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for it in recent.iter().copied().chain(std::iter::once(item)) {
        for t in category_tags(it) {
            *counts.entry(t).or_insert(0) += 1;
        }
    }
    let mut top: Vec<(String, usize)> = counts.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let facets: Vec<String> = top.into_iter().take(3).map(|(t, _)| t).collect();
    let mut s = format!("current intent: {}", facets.join(", "));
    let prev: Vec<&str> = recent
        .iter()
        .rev()
        .take(3)
        .map(|i| i.title.as_str())
        .collect();
    if !prev.is_empty() {
        s.push_str(&format!("; recently: {}", prev.join(" | ")));
    }
    s
}

/// One field of a note as [`FieldEncoder::fields`] embeds it.
#[derive(Debug, Clone)]
pub enum Field<'a> {
    /// A text embedded whole (the content c).
    Text(&'a str),
    /// A list embedded as the bag of its members ([`FieldEncoder::bag`]).
    Bag(Vec<&'a str>),
}

/// Embeds field texts through a per-run [`EmbeddingCache`]; `e` of a note is
/// the normalised sum of its enabled field embeddings (see module docs).
pub struct FieldEncoder {
    cache: EmbeddingCache,
}

impl FieldEncoder {
    /// An empty cache for vectors of `dim`.
    pub fn new(dim: usize) -> Self {
        Self {
            cache: EmbeddingCache::new(dim),
        }
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.cache.dim()
    }

    /// The embedding of one text (cached).
    pub fn text(&mut self, embedder: &dyn Embedder, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.cache.embed(embedder, text)
    }

    /// Embed every text of `texts` not cached yet, in one batch, each
    /// trimmed. Single short texts are dominated by per-call model overhead,
    /// so callers warm the members they are about to need.
    pub fn warm(&mut self, embedder: &dyn Embedder, texts: &[String]) -> Result<(), EmbedError> {
        let trimmed: Vec<&str> = texts.iter().map(|t| t.trim()).collect();
        self.cache.warm(embedder, &trimmed)
    }

    /// The embedding of a list-like field: the normalised sum of the
    /// embeddings of its members. Members (a keyword, a tag, an intent, a
    /// recent title) are short and recur across notes, so each is embedded
    /// once and cached; the whole field, which is nearly unique per note once
    /// notes evolve, never is. Zero when the list is empty.
    pub fn bag(
        &mut self,
        embedder: &dyn Embedder,
        members: &[&str],
    ) -> Result<Vec<f32>, EmbedError> {
        let mut acc = vec![0.0f32; self.dim()];
        for m in members.iter().map(|m| m.trim()).filter(|m| !m.is_empty()) {
            let v = self.cache.embed_ref(embedder, m)?;
            for (a, x) in acc.iter_mut().zip(v) {
                *a += x;
            }
        }
        normalize(&mut acc);
        Ok(acc)
    }

    /// `e` over the given fields with weights; empty fields are skipped.
    /// Components are rounded to 1e-4 so op logs stay compact; the rounded
    /// vector is what the record stores and what every comparison uses.
    pub fn fields(
        &mut self,
        embedder: &dyn Embedder,
        parts: &[(Field<'_>, f32)],
    ) -> Result<Vec<f32>, EmbedError> {
        let mut acc = vec![0.0f32; self.dim()];
        for (f, w) in parts {
            if *w == 0.0 {
                continue;
            }
            let v = match f {
                Field::Text("") => continue,
                Field::Bag(m) if m.is_empty() => continue,
                Field::Text(t) => self.text(embedder, t)?,
                Field::Bag(m) => self.bag(embedder, m)?,
            };
            for (a, x) in acc.iter_mut().zip(&v) {
                *a += w * x;
            }
        }
        normalize(&mut acc);
        for a in acc.iter_mut() {
            *a = (*a * 1e4).round() / 1e4;
        }
        Ok(acc)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prompt_content_shows_trailing_attributes_by_value() {
        assert_eq!(
            prompt_content("Rated 4/5: Philadelphia [Drama] release_year=1993"),
            "Rated 4/5: Philadelphia [Drama] 1993"
        );
        assert_eq!(
            prompt_content("Rated 4/5: X [A, B] year=1 label=Blue_Note"),
            "Rated 4/5: X [A, B] 1 Blue_Note"
        );
        // Not trailing attributes: shown as they are.
        for same in [
            "Rated 3/5: E=mc2 Live [Documentary]",
            "Interacted with: Heat",
            "a=1",
            "Rated 2/5: Odd = [Drama]",
        ] {
            assert_eq!(prompt_content(same), same);
        }
    }

    use super::*;

    #[test]
    fn keywords_drop_stopwords_and_numbers() {
        assert_eq!(
            keywords_of("The Lord of the Rings 1978, the Return"),
            vec!["lord", "rings", "return"]
        );
    }

    #[test]
    fn sentiment_buckets() {
        assert_eq!(sentiment(Some(5.0)), "liked");
        assert_eq!(sentiment(Some(3.0)), "neutral");
        assert_eq!(sentiment(Some(1.0)), "disliked");
        assert_eq!(sentiment(None), "liked");
    }
}
