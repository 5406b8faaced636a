//! `mars_synthesize` (π_syn, §3.3): the profile narrative of 150–300 words
//! distilled from the preference chunks and the recent signals. Offline: a
//! template narrative (see [`offline_profile`]).

use super::{categories_block, chunk_line, lines, obj, signal_line, ChunkIn, SignalIn};
use crate::mars::categories::CategoryDef;
use crate::mars::polarity::Polarity;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Input of `mars_synthesize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthesizeInput {
    /// User token.
    pub user: String,
    /// Categories.
    pub categories: Vec<CategoryDef>,
    /// All chunks.
    pub chunks: Vec<ChunkIn>,
    /// Event memory, oldest first.
    pub recent: Vec<SignalIn>,
    /// The previous profile, if any.
    pub previous: Option<String>,
    /// Word limit (300).
    pub max_words: usize,
}

/// Output of `mars_synthesize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthesizeOutput {
    /// The narrative.
    pub profile: String,
}

/// π_syn: a 150–300 word profile narrative from the chunks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SynthesizeRole;

impl Role for SynthesizeRole {
    type Input = SynthesizeInput;
    type Output = SynthesizeOutput;

    fn name(&self) -> &'static str {
        "mars_synthesize"
    }
    /// Completion limit: 1.25 × the 99th percentile of the offline profile's estimated
    /// tokens on ml-100k (397, a 300-word profile), rounded up to a multiple of 64; the
    /// parser cuts a profile of more than 1.5 × `max_words` at the limit.
    fn max_tokens(&self) -> Option<u32> {
        Some(512)
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_synthesize.md")
    }
    fn variables(&self, input: &SynthesizeInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("categories".into(), categories_block(&input.categories)),
            ("chunks".into(), lines(&input.chunks, chunk_line)),
            ("recent".into(), lines(&input.recent, signal_line)),
            (
                "previous".into(),
                input.previous.clone().unwrap_or_else(|| "(none)".into()),
            ),
            ("max_words".into(), input.max_words.to_string()),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["profile"],
               "properties": {"profile": {"type": "string"}}})
    }
    fn parse(
        &self,
        input: &SynthesizeInput,
        answer: serde_json::Value,
    ) -> Result<SynthesizeOutput, String> {
        let o = obj(&answer)?;
        let p = o
            .get("profile")
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or("missing or empty `profile`")?;
        // Up to 1.5 × the limit is taken as written; a longer profile is
        // cut at the limit, counted as a parser repair (a small model
        // repeating "(2) 2022" fills its length bound with short words).
        let words: Vec<&str> = p.split_whitespace().collect();
        if words.len() > input.max_words + input.max_words / 2 {
            evomem_llm::note_parser_repair();
            return Ok(SynthesizeOutput {
                profile: words[..input.max_words].join(" "),
            });
        }
        Ok(SynthesizeOutput {
            profile: p.to_string(),
        })
    }
    fn offline(&self, input: &SynthesizeInput) -> Result<SynthesizeOutput, LlmError> {
        Ok(SynthesizeOutput {
            profile: offline_profile(input),
        })
    }
}

fn intensity(s: f64) -> &'static str {
    if s >= 0.85 {
        "a strong and well-established"
    } else if s >= 0.65 {
        "a clear"
    } else if s >= 0.45 {
        "a moderate"
    } else {
        "a tentative"
    }
}

fn join_and(v: &[String]) -> String {
    match v.len() {
        0 => String::new(),
        1 => v[0].clone(),
        n => format!("{} and {}", v[..n - 1].join(", "), v[n - 1]),
    }
}

/// The offline profile: per category the strongest positive chunks with an
/// intensity phrase, then fading chunks (strength < 0.45), disliked items and
/// recent positive items, then a ranking hint; cut at `max_words`.
pub fn offline_profile(input: &SynthesizeInput) -> String {
    let mut s = String::new();
    let mut by_cat: BTreeMap<&str, Vec<&ChunkIn>> = BTreeMap::new();
    for c in &input.chunks {
        by_cat.entry(c.category.as_str()).or_default().push(c);
    }
    let total: usize = input.chunks.len();
    let _ = write!(
        s,
        "This user's taste is summarised from {total} preference belief(s) and {} recent signal(s). ",
        input.recent.len()
    );
    let mut fading = Vec::new();
    for cat in &input.categories {
        let Some(v) = by_cat.get(cat.name.as_str()) else {
            continue;
        };
        let mut v: Vec<&&ChunkIn> = v.iter().collect();
        v.sort_by(|a, b| b.strength.total_cmp(&a.strength).then(a.text.cmp(&b.text)));
        let strong: Vec<&&ChunkIn> = v.iter().copied().filter(|c| c.strength >= 0.45).collect();
        fading.extend(
            v.iter()
                .filter(|c| c.strength < 0.45)
                .map(|c| format!("{} ({})", c.text, cat.name)),
        );
        if let Some(top) = strong.first() {
            let names: Vec<String> = strong.iter().map(|c| c.text.clone()).collect();
            let _ = write!(
                s,
                "In {} ({}), they show {} preference for {}",
                cat.name,
                cat.description,
                intensity(top.strength),
                join_and(&names)
            );
            let ev: u32 = strong.iter().map(|c| c.evidence).sum();
            let _ = write!(s, ", backed by {ev} observations. ");
        }
    }
    if !fading.is_empty() {
        let _ = write!(
            s,
            "Interest appears to be fading in {}, which recent behaviour no longer supports. ",
            join_and(&fading)
        );
    }
    let liked: Vec<String> = input
        .recent
        .iter()
        .rev()
        .filter(|e| e.polarity == Polarity::Positive)
        .take(5)
        .map(|e| e.item.split(" [").next().unwrap_or(&e.item).to_string())
        .collect();
    if !liked.is_empty() {
        let _ = write!(s, "Most recently they enjoyed {}. ", join_and(&liked));
    }
    let disliked: Vec<String> = input
        .recent
        .iter()
        .rev()
        .filter(|e| e.polarity == Polarity::Negative)
        .take(3)
        .map(|e| e.item.split(" [").next().unwrap_or(&e.item).to_string())
        .collect();
    if !disliked.is_empty() {
        let _ = write!(s, "They reacted poorly to {}. ", join_and(&disliked));
    }
    s.push_str(
        "When ranking, favour items that combine their strongest categories and resemble the \
         recent favourites, give less weight to fading interests, and avoid items similar to \
         what they disliked.",
    );
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.len() > input.max_words {
        words[..input.max_words].join(" ")
    } else {
        s
    }
}
