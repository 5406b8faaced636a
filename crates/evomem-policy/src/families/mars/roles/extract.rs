//! `mars_extract` (π_ext, §3.3): new preference chunks from the pending
//! signals, and evidence that confirms (boost) or contradicts (demote)
//! existing chunks. Offline: facet counting (see [`offline_extract`]).

use super::{
    arr, categories_block, chunk_line, lines, obj, signal_line, str_field, ChunkIn, SignalIn,
};
use crate::mars::categories::CategoryDef;
use crate::mars::polarity::Polarity;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// Input of `mars_extract`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractInput {
    /// User token.
    pub user: String,
    /// The domain's categories.
    pub categories: Vec<CategoryDef>,
    /// Pending signals, oldest first.
    pub pending: Vec<SignalIn>,
    /// Existing chunks.
    pub chunks: Vec<ChunkIn>,
    /// Offline: minimum positive support for a new chunk.
    pub min_support: u32,
    /// Offline: positive signals of a category passing over a chunk before it is demoted.
    pub shift_min: u32,
    /// Max chunks per category.
    pub kcat: usize,
}

/// A proposed new chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewChunk {
    /// Category.
    pub category: String,
    /// Text.
    pub text: String,
    /// Facet axis, when keyed.
    pub axis: Option<usize>,
    /// Facet value, when keyed.
    pub value: Option<String>,
    /// Initial strength.
    pub strength: f64,
    /// Supporting signals.
    pub support: u32,
    /// Logical times of the supporting signals.
    pub sources: Vec<u64>,
}

/// Evidence about an existing chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assessment {
    /// Chunk id.
    pub chunk: String,
    /// Number of signals bearing on it.
    pub support: u32,
    /// Why.
    pub reason: String,
    /// Logical times of those signals.
    pub sources: Vec<u64>,
}

/// Output of `mars_extract`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtractOutput {
    /// New chunks.
    pub new_chunks: Vec<NewChunk>,
    /// Chunks confirmed by the pending signals (boost).
    pub boosts: Vec<Assessment>,
    /// Chunks contradicted by the pending signals (demote).
    pub demotes: Vec<Assessment>,
}

/// π_ext: new preference chunks and evidence from pending signals.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractRole;

impl Role for ExtractRole {
    type Input = ExtractInput;
    type Output = ExtractOutput;

    fn name(&self) -> &'static str {
        "mars_extract"
    }
    /// Completion limit: 1.25 × the 99th percentile of the offline answer's estimated
    /// tokens (ceil(chars/4) of its JSON) on ml-100k, per user and run, in the
    /// incremental schedule (521), rounded up to a multiple of 64. The offline answer
    /// carries fields a model does not write (axis, value, support), so a model's
    /// answer is shorter; a full-history single pass (p99 2,027) is cut here, which is
    /// what `sp_window` and `budget=paper` bound.
    fn max_tokens(&self) -> Option<u32> {
        Some(704)
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_extract.md")
    }
    fn variables(&self, input: &ExtractInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("categories".into(), categories_block(&input.categories)),
            ("pending".into(), lines(&input.pending, signal_line)),
            ("chunks".into(), lines(&input.chunks, chunk_line)),
            ("kcat".into(), input.kcat.to_string()),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "required": ["new_chunks", "boosts", "demotes"],
            "properties": {
                "new_chunks": {"type": "array", "items": {"type": "object",
                    "required": ["category", "text", "strength"],
                    "properties": {
                        "category": {"type": "string"},
                        "text": {"type": "string"},
                        "strength": {"type": "number", "minimum": -1, "maximum": 1},
                        "sources": {"type": "array", "items": {"type": "integer"}}}}},
                "boosts": {"type": "array", "items": {"type": "object",
                    "required": ["chunk"],
                    "properties": {"chunk": {"type": "string"}, "reason": {"type": "string"}}}},
                "demotes": {"type": "array", "items": {"type": "object",
                    "required": ["chunk"],
                    "properties": {"chunk": {"type": "string"}, "reason": {"type": "string"}}}}
            }
        })
    }
    fn parse(
        &self,
        input: &ExtractInput,
        answer: serde_json::Value,
    ) -> Result<ExtractOutput, String> {
        let o = obj(&answer)?;
        let cats: BTreeSet<&str> = input.categories.iter().map(|c| c.name.as_str()).collect();
        let ids: BTreeSet<&str> = input.chunks.iter().map(|c| c.id.as_str()).collect();
        let times: BTreeSet<u64> = input.pending.iter().map(|s| s.time).collect();
        let mut out = ExtractOutput::default();
        for (i, v) in arr(o, "new_chunks")?.into_iter().enumerate() {
            let ctx = format!("new_chunks[{i}]");
            let category = str_field(v, "category", &ctx)?;
            if !cats.contains(category) {
                return Err(format!("{ctx}: unknown category `{category}`"));
            }
            let text = str_field(v, "text", &ctx)?;
            if text.chars().count() > 160 {
                return Err(format!("{ctx}: text longer than 160 characters"));
            }
            let strength = v
                .get("strength")
                .and_then(serde_json::Value::as_f64)
                .filter(|s| (-1.0..=1.0).contains(s))
                .ok_or_else(|| format!("{ctx}: `strength` missing or outside [-1, 1]"))?;
            let sources: Vec<u64> = v
                .get("sources")
                .and_then(serde_json::Value::as_array)
                .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
                .unwrap_or_default();
            // Key the chunk to a pending facet when its text names one.
            let key = input
                .pending
                .iter()
                .flat_map(|s| s.facets.iter())
                .find(|f| f.category == category && f.value.eq_ignore_ascii_case(text));
            out.new_chunks.push(NewChunk {
                category: category.to_string(),
                text: text.to_string(),
                axis: key.map(|f| f.axis),
                value: key.map(|f| f.value.clone()),
                strength,
                support: sources.len().max(1) as u32,
                sources: sources.into_iter().filter(|t| times.contains(t)).collect(),
            });
        }
        for (field, target) in [("boosts", &mut out.boosts), ("demotes", &mut out.demotes)] {
            let mut seen = BTreeSet::new();
            for (i, v) in arr(o, field)?.into_iter().enumerate() {
                let ctx = format!("{field}[{i}]");
                let chunk = str_field(v, "chunk", &ctx)?;
                if !ids.contains(chunk) {
                    return Err(format!("{ctx}: unknown chunk id `{chunk}`"));
                }
                if !seen.insert(chunk.to_string()) {
                    continue;
                }
                target.push(Assessment {
                    chunk: chunk.to_string(),
                    support: 1,
                    reason: v
                        .get("reason")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("LLM assessment")
                        .to_string(),
                    sources: times.iter().copied().collect(),
                });
            }
        }
        let boosted: BTreeSet<&str> = out.boosts.iter().map(|a| a.chunk.as_str()).collect();
        if out
            .demotes
            .iter()
            .any(|a| boosted.contains(a.chunk.as_str()))
        {
            return Err("a chunk is both boosted and demoted".into());
        }
        Ok(out)
    }
    fn offline(&self, input: &ExtractInput) -> Result<ExtractOutput, LlmError> {
        Ok(offline_extract(input))
    }
}

#[derive(Default)]
struct FacetTally {
    pos: u32,
    neg: u32,
    idf: f64,
    category: String,
    value: String,
    pos_sources: Vec<u64>,
    neg_sources: Vec<u64>,
}

/// Per facet (axis, lower-cased value): its tally over the signals; per
/// axis: the times of the positive signals carrying it.
type Tallies = (
    BTreeMap<(usize, String), FacetTally>,
    BTreeMap<usize, Vec<u64>>,
);

fn tally_signals(pending: &[SignalIn]) -> Tallies {
    let mut tally: BTreeMap<(usize, String), FacetTally> = BTreeMap::new();
    // Positive signals carrying each axis, and their times.
    let mut axis_pos: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for s in pending {
        let mut axes_here = BTreeSet::new();
        for f in &s.facets {
            let t = tally.entry((f.axis, f.value.to_lowercase())).or_default();
            t.idf = f.idf;
            t.category.clone_from(&f.category);
            t.value.clone_from(&f.value);
            match s.polarity {
                Polarity::Positive => {
                    t.pos += 1;
                    t.pos_sources.push(s.time);
                    axes_here.insert(f.axis);
                }
                Polarity::Negative => {
                    t.neg += 1;
                    t.neg_sources.push(s.time);
                }
                Polarity::Neutral => {}
            }
        }
        for a in axes_here {
            axis_pos.entry(a).or_default().push(s.time);
        }
    }
    (tally, axis_pos)
}

/// The offline extractor's evidence about existing chunks, without the new
/// chunks: `(boosts, demotes)`. A keyed chunk is boosted when more pending
/// positive than negative signals carry its facet, demoted when more
/// negative ones do, or when none does and at least `shift_min` positive
/// signals carry another value of its axis (a preference shift). The
/// offline planner names these as its boost and demote targets.
pub fn offline_assess(
    pending: &[SignalIn],
    chunks: &[ChunkIn],
    shift_min: u32,
) -> (Vec<Assessment>, Vec<Assessment>) {
    let (tally, axis_pos) = tally_signals(pending);
    let mut out = ExtractOutput::default();
    assess_chunks(chunks, &tally, &axis_pos, shift_min, &mut out);
    (out.boosts, out.demotes)
}

/// Boosts and demotes of `chunks` into `out`; returns the facet keys of the
/// keyed chunks.
fn assess_chunks(
    chunks: &[ChunkIn],
    tally: &BTreeMap<(usize, String), FacetTally>,
    axis_pos: &BTreeMap<usize, Vec<u64>>,
    shift_min: u32,
    out: &mut ExtractOutput,
) -> BTreeSet<(usize, String)> {
    let mut existing: BTreeSet<(usize, String)> = BTreeSet::new();
    for c in chunks {
        let key = match (&c.axis, &c.value) {
            (Some(a), Some(v)) => (*a, v.to_lowercase()),
            _ => continue,
        };
        existing.insert(key.clone());
        let t = tally.get(&key);
        let (pos, neg) = t.map_or((0, 0), |t| (t.pos, t.neg));
        if pos > neg {
            out.boosts.push(Assessment {
                chunk: c.id.clone(),
                support: pos,
                reason: format!(
                    "{pos} new positive signal(s) with {} = {}",
                    c.category, c.text
                ),
                sources: t.map(|t| t.pos_sources.clone()).unwrap_or_default(),
            });
        } else if neg > pos {
            out.demotes.push(Assessment {
                chunk: c.id.clone(),
                support: neg,
                reason: format!("{neg} negative signal(s) with {} = {}", c.category, c.text),
                sources: t.map(|t| t.neg_sources.clone()).unwrap_or_default(),
            });
        } else if pos == 0 && c.strength > 0.0 {
            let others = axis_pos.get(&key.0).map(Vec::as_slice).unwrap_or(&[]);
            if others.len() as u32 >= shift_min.max(1) {
                out.demotes.push(Assessment {
                    chunk: c.id.clone(),
                    support: others.len() as u32,
                    reason: format!(
                        "preference shift: {} positive signals in {} chose other values than {}",
                        others.len(),
                        c.category,
                        c.text
                    ),
                    sources: others.to_vec(),
                });
            }
        }
    }
    existing
}

/// The offline extractor (see the module table).
pub fn offline_extract(input: &ExtractInput) -> ExtractOutput {
    let (tally, axis_pos) = tally_signals(&input.pending);
    let mut out = ExtractOutput::default();
    let existing = assess_chunks(&input.chunks, &tally, &axis_pos, input.shift_min, &mut out);
    // New chunks: best facets per category by support × IDF.
    let mut per_cat: BTreeMap<String, Vec<(f64, NewChunk)>> = BTreeMap::new();
    for ((axis, key), t) in &tally {
        if existing.contains(&(*axis, key.clone()))
            || t.pos < input.min_support.max(1)
            || t.pos <= t.neg
        {
            continue;
        }
        let strength = (0.5 + 0.1 * f64::from(t.pos)).clamp(0.6, 0.9);
        per_cat.entry(t.category.clone()).or_default().push((
            f64::from(t.pos) * (0.1 + t.idf),
            NewChunk {
                category: t.category.clone(),
                text: t.value.clone(),
                axis: Some(*axis),
                value: Some(t.value.clone()),
                strength,
                support: t.pos,
                sources: t.pos_sources.clone(),
            },
        ));
    }
    for cat in &input.categories {
        if let Some(mut v) = per_cat.remove(&cat.name) {
            v.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.text.cmp(&b.1.text)));
            out.new_chunks
                .extend(v.into_iter().take(input.kcat.max(1)).map(|(_, c)| c));
        }
    }
    out
}
