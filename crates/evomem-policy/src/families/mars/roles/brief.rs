//! The brief prompts of `mars[budget=paper]`: `mars_extract_brief` and
//! `mars_synthesize_brief` ask for the same JSON as `mars_extract` and
//! `mars_synthesize` and share their parsers and offline algorithms; their
//! schemas are the full roles' bounded by the input (`schema_for`) and their
//! completion limits fit the brief answers. The rendered prompt is shorter (a terse
//! system message, category names without descriptions, one short line per
//! signal: time, `+`/`-`/`=`, title and facets; in synthesis no chunk ids
//! and recent signals as `+`/`-`/`=` and title only).
//! They are separate roles, so that their calls and tokens are reported
//! apart from the full prompts' and a per-role backend can tell them apart.

use super::extract::{ExtractInput, ExtractOutput, ExtractRole};
use super::synthesize::{SynthesizeInput, SynthesizeOutput, SynthesizeRole};
use super::{chunk_line, lines, ChunkIn, SignalIn};
use crate::mars::categories::CategoryDef;
use crate::mars::polarity::Polarity;
use evomem_core::{LlmError, Role};
use std::collections::BTreeMap;

/// One signal in a brief prompt:
/// `t12 + Fargo (1996) (genre=Crime, Thriller; era=1990s)`: each category
/// once, with its values in order of first appearance.
pub(super) fn brief_signal_line(s: &SignalIn) -> String {
    let pol = match s.polarity {
        Polarity::Positive => "+",
        Polarity::Negative => "-",
        Polarity::Neutral => "=",
    };
    let title = s.item.split(" [").next().unwrap_or(&s.item);
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for f in &s.facets {
        match groups.iter_mut().find(|(c, _)| *c == f.category.as_str()) {
            Some((_, vs)) => vs.push(f.value.as_str()),
            None => groups.push((f.category.as_str(), vec![f.value.as_str()])),
        }
    }
    let facets: Vec<String> = groups
        .iter()
        .map(|(c, vs)| format!("{c}={}", vs.join(", ")))
        .collect();
    format!("t{} {pol} {title} ({})", s.time, facets.join("; "))
}

/// One recent signal in the brief synthesis prompt: `+ Fargo (1996)` (the
/// chunks carry the facets).
fn brief_recent_line(s: &SignalIn) -> String {
    let pol = match s.polarity {
        Polarity::Positive => "+",
        Polarity::Negative => "-",
        Polarity::Neutral => "=",
    };
    format!("{pol} {}", s.item.split(" [").next().unwrap_or(&s.item))
}

/// One chunk in the brief synthesis prompt: `genre: Crime 0.80 (3)`.
fn brief_chunk_line(c: &ChunkIn) -> String {
    format!(
        "{}: {} {:.2} ({})",
        c.category, c.text, c.strength, c.evidence
    )
}

fn category_names(cats: &[CategoryDef]) -> String {
    cats.iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `mars_extract` with the brief prompt.
#[derive(Debug, Clone, Copy, Default)]
pub struct BriefExtractRole;

impl Role for BriefExtractRole {
    type Input = ExtractInput;
    type Output = ExtractOutput;

    fn name(&self) -> &'static str {
        "mars_extract_brief"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_extract_brief.md")
    }
    fn variables(&self, input: &ExtractInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("categories".into(), category_names(&input.categories)),
            ("pending".into(), lines(&input.pending, brief_signal_line)),
            ("chunks".into(), lines(&input.chunks, chunk_line)),
            ("kcat".into(), input.kcat.to_string()),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        ExtractRole.schema()
    }
    /// The extraction schema bounded by its input, so that a small model
    /// cannot run on inside valid JSON: at most [`BRIEF_NEW_CHUNKS`] new
    /// chunks, each in one of the listed categories with a text of at most
    /// [`BRIEF_CHUNK_CHARS`] characters; boosts and demotes name listed
    /// chunk ids, each at most once; every `sources` cites at most three of
    /// the listed signal times. No other keys.
    fn schema_for(&self, input: &ExtractInput) -> serde_json::Value {
        let cats: Vec<&str> = input.categories.iter().map(|c| c.name.as_str()).collect();
        let ids: Vec<&str> = input.chunks.iter().map(|c| c.id.as_str()).collect();
        let times: Vec<u64> = input.pending.iter().map(|p| p.time).collect();
        let new_max = (input.kcat * cats.len()).clamp(1, BRIEF_NEW_CHUNKS);
        let sources = serde_json::json!({"type": "array", "maxItems": 3, "uniqueItems": true,
                                         "items": {"type": "integer", "enum": times}});
        // An empty `enum` is not a schema (llama-server rejects it with 400):
        // with no chunks yet, boosts and demotes are empty arrays.
        let refs = if ids.is_empty() {
            serde_json::json!({"type": "array", "maxItems": 0})
        } else {
            serde_json::json!({"type": "array", "maxItems": ids.len(), "uniqueItems": true,
                "items": {"type": "object", "required": ["chunk"], "additionalProperties": false,
                          "properties": {"chunk": {"type": "string", "enum": ids},
                                         "sources": sources}}})
        };
        serde_json::json!({
            "type": "object",
            "required": ["new_chunks", "boosts", "demotes"],
            "additionalProperties": false,
            "properties": {
                "new_chunks": {"type": "array", "maxItems": new_max, "items": {
                    "type": "object",
                    "required": ["category", "text", "strength"],
                    "additionalProperties": false,
                    "properties": {
                        "category": {"type": "string", "enum": cats},
                        "text": {"type": "string", "minLength": 1, "maxLength": BRIEF_CHUNK_CHARS},
                        "strength": {"type": "number", "minimum": -1, "maximum": 1},
                        "sources": sources}}},
                "boosts": refs.clone(),
                "demotes": refs
            }
        })
    }
    fn parse(
        &self,
        input: &ExtractInput,
        answer: serde_json::Value,
    ) -> Result<ExtractOutput, String> {
        ExtractRole.parse(input, answer)
    }
    fn offline(&self, input: &ExtractInput) -> Result<ExtractOutput, LlmError> {
        ExtractRole.offline(input)
    }
    /// Room for the longest answer the bounded schema allows, so that a
    /// model that fills every field is not cut off: 5 chunks of about 54
    /// SmolLM2 tokens each (a 32-character text of repeated digits and
    /// brackets takes about 14, three sources 18) and the wrapper. At 256,
    /// with 48-character texts, 12 of 50 first answers were cut off and
    /// only 3 of them repaired.
    fn max_tokens(&self) -> Option<u32> {
        Some(320)
    }
}

/// Most new chunks one brief extraction may propose.
pub const BRIEF_NEW_CHUNKS: usize = 5;
/// Most characters of a new chunk's text in a brief extraction.
pub const BRIEF_CHUNK_CHARS: usize = 32;

/// `mars_synthesize` with the brief prompt.
#[derive(Debug, Clone, Copy, Default)]
pub struct BriefSynthesizeRole;

impl Role for BriefSynthesizeRole {
    type Input = SynthesizeInput;
    type Output = SynthesizeOutput;

    fn name(&self) -> &'static str {
        "mars_synthesize_brief"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_synthesize_brief.md")
    }
    fn variables(&self, input: &SynthesizeInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("chunks".into(), lines(&input.chunks, brief_chunk_line)),
            ("recent".into(), lines(&input.recent, brief_recent_line)),
            (
                "previous".into(),
                input.previous.clone().unwrap_or_else(|| "(none)".into()),
            ),
            ("max_words".into(), input.max_words.to_string()),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        SynthesizeRole.schema()
    }
    /// The profile bounded to about its word limit: at most 7 characters
    /// per word (English averages under 6 with the space; the offline
    /// profile of the tests takes 6), no other keys. The completion limit
    /// covers the bound: at 8 characters per word (640 for 80 words) under
    /// 192 tokens, SmolLM2's repetitive profiles (about 2.3 characters per
    /// token) were cut off (15 of 50 first answers).
    fn schema_for(&self, input: &SynthesizeInput) -> serde_json::Value {
        serde_json::json!({"type": "object", "required": ["profile"], "additionalProperties": false,
               "properties": {"profile": {"type": "string", "minLength": 1,
                                          "maxLength": input.max_words.max(1) * 7}}})
    }
    fn parse(
        &self,
        input: &SynthesizeInput,
        answer: serde_json::Value,
    ) -> Result<SynthesizeOutput, String> {
        SynthesizeRole.parse(input, answer)
    }
    fn offline(&self, input: &SynthesizeInput) -> Result<SynthesizeOutput, LlmError> {
        SynthesizeRole.offline(input)
    }
    /// Room for the longest profile the bounded schema allows at 2.3
    /// characters per token (560 characters for 80 words) and the wrapper.
    fn max_tokens(&self) -> Option<u32> {
        Some(256)
    }
}
