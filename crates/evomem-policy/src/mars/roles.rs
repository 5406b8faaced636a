//! The four MARS LLM roles (π_ext, π_syn, π_plan of §3.3, and the one-time
//! category derivation of the Appendix), each with a prompt file, a JSON
//! schema, a validating parser and a deterministic offline algorithm.
//!
//! | role | prompt | offline algorithm |
//! |---|---|---|
//! | `mars_extract` | `prompts/mars_extract.md` | facet counting: new chunks for facets with ≥ `min_support` positive pending signals (best by support × IDF, ≤ K_cat per category); boost chunks whose facet recurs; demote chunks hit by negative signals or passed over by ≥ `shift_min` positive signals of their category |
//! | `mars_synthesize` | `prompts/mars_synthesize.md` | template narrative from the strongest chunks per category, fading and disliked ones, and recent events |
//! | `mars_plan` | `prompts/mars_plan.md` | rule list over pending volume, conflicts, novelty, FIFO pressure and the mutation counter |
//! | `mars_categories` | `prompts/mars_categories.md` | metadata axes ranked by coverage × distinctness (see [`super::categories`]) |

use super::categories::CategoryDef;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One facet of a pending item as the extractor sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FacetIn {
    /// Category name.
    pub category: String,
    /// Axis index (metadata key).
    pub axis: usize,
    /// Value.
    pub value: String,
    /// Normalised IDF.
    pub idf: f64,
}

/// One signal of event memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalIn {
    /// Logical time.
    pub time: u64,
    /// Item summary.
    pub item: String,
    /// +1 positive, 0 neutral, −1 negative.
    pub polarity: i8,
    /// Facets in the domain's categories.
    pub facets: Vec<FacetIn>,
}

/// One existing chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkIn {
    /// Record id.
    pub id: String,
    /// Category.
    pub category: String,
    /// Text.
    pub text: String,
    /// Facet axis, when keyed.
    pub axis: Option<usize>,
    /// Facet value, when keyed.
    pub value: Option<String>,
    /// Strength.
    pub strength: f64,
    /// Evidence.
    pub evidence: u32,
}

fn signal_line(s: &SignalIn) -> String {
    let pol = match s.polarity {
        1 => "liked",
        -1 => "disliked",
        _ => "neutral",
    };
    let facets: Vec<String> = s
        .facets
        .iter()
        .map(|f| format!("{}={}", f.category, f.value))
        .collect();
    format!("- t{} {pol}: {} ({})", s.time, s.item, facets.join("; "))
}

fn chunk_line(c: &ChunkIn) -> String {
    format!(
        "- {} [{}] \"{}\" strength={:.2} evidence={}",
        c.id, c.category, c.text, c.strength, c.evidence
    )
}

fn categories_block(cats: &[CategoryDef]) -> String {
    cats.iter()
        .map(|c| format!("- {}: {}", c.name, c.description))
        .collect::<Vec<_>>()
        .join("\n")
}

fn lines<T>(v: &[T], f: impl Fn(&T) -> String) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.iter().map(f).collect::<Vec<_>>().join("\n")
    }
}

fn obj(answer: &serde_json::Value) -> Result<&serde_json::Map<String, serde_json::Value>, String> {
    answer
        .as_object()
        .ok_or_else(|| "answer is not a JSON object".to_string())
}

fn arr<'a>(
    o: &'a serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Result<Vec<&'a serde_json::Value>, String> {
    match o.get(key) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(a)) => Ok(a.iter().collect()),
        Some(_) => Err(format!("field `{key}` is not an array")),
    }
}

fn str_field<'a>(v: &'a serde_json::Value, key: &str, ctx: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{ctx}: missing or empty string field `{key}`"))
}

// ---------------------------------------------------------------- extract

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

/// The offline extractor (see the module table).
pub fn offline_extract(input: &ExtractInput) -> ExtractOutput {
    let mut tally: BTreeMap<(usize, String), FacetTally> = BTreeMap::new();
    // Positive signals carrying each axis, and their times.
    let mut axis_pos: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for s in &input.pending {
        let mut axes_here = BTreeSet::new();
        for f in &s.facets {
            let t = tally.entry((f.axis, f.value.to_lowercase())).or_default();
            t.idf = f.idf;
            t.category.clone_from(&f.category);
            t.value.clone_from(&f.value);
            match s.polarity {
                1 => {
                    t.pos += 1;
                    t.pos_sources.push(s.time);
                    axes_here.insert(f.axis);
                }
                -1 => {
                    t.neg += 1;
                    t.neg_sources.push(s.time);
                }
                _ => {}
            }
        }
        for a in axes_here {
            axis_pos.entry(a).or_default().push(s.time);
        }
    }
    let mut out = ExtractOutput::default();
    let mut existing: BTreeSet<(usize, String)> = BTreeSet::new();
    for c in &input.chunks {
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
            if others.len() as u32 >= input.shift_min.max(1) {
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

// ---------------------------------------------------------------- synthesize

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
        let words = p.split_whitespace().count();
        if words > input.max_words + input.max_words / 2 {
            return Err(format!(
                "profile has {words} words (limit {})",
                input.max_words
            ));
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
        .filter(|e| e.polarity > 0)
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
        .filter(|e| e.polarity < 0)
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

// ---------------------------------------------------------------- plan

/// Lifecycle actions the planner may pick (§3.3).
pub const ACTIONS: &[&str] = &[
    "extract",
    "boost",
    "demote",
    "merge",
    "forget",
    "synthesize",
];

/// Input of `mars_plan`: a summary of the belief state and pending signals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanInput {
    /// User token.
    pub user: String,
    /// Pending signals.
    pub pending: Vec<SignalIn>,
    /// Positive pending signals.
    pub pending_positive: usize,
    /// Negative pending signals.
    pub pending_negative: usize,
    /// Events in the FIFO.
    pub fifo_len: usize,
    /// FIFO capacity.
    pub lmax: usize,
    /// Existing chunks.
    pub chunks: Vec<ChunkIn>,
    /// Share of positive pending signals with no facet matching any chunk.
    pub novel_share: f64,
    /// Pending signals that contradict a chunk (negative on its facet).
    pub conflicts: usize,
    /// Chunks eligible for forgetting.
    pub forgettable: usize,
    /// Near-duplicate chunk pairs.
    pub duplicates: usize,
    /// Mutations since the last synthesis.
    pub mutations: u32,
    /// γ.
    pub gamma: u32,
    /// Whether a profile exists.
    pub has_profile: bool,
    /// The fixed scheduler's batch, used as the planner's base volume.
    pub b: usize,
}

/// Output of `mars_plan`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOutput {
    /// Actions to run in order, or empty to wait.
    pub actions: Vec<String>,
    /// Why.
    pub reason: String,
}

/// π_plan: pick lifecycle ops or wait.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanRole;

impl Role for PlanRole {
    type Input = PlanInput;
    type Output = PlanOutput;

    fn name(&self) -> &'static str {
        "mars_plan"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_plan.md")
    }
    fn variables(&self, i: &PlanInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("pending".into(), lines(&i.pending, signal_line)),
            ("chunks".into(), lines(&i.chunks, chunk_line)),
            (
                "state".into(),
                format!(
                    "pending={} (positive {}, negative {}); fifo {}/{}; novel share {:.2}; \
                     conflicts {}; forgettable {}; duplicate pairs {}; mutations since synthesis {}/{}; \
                     profile {}",
                    i.pending.len(),
                    i.pending_positive,
                    i.pending_negative,
                    i.fifo_len,
                    i.lmax,
                    i.novel_share,
                    i.conflicts,
                    i.forgettable,
                    i.duplicates,
                    i.mutations,
                    i.gamma,
                    if i.has_profile { "present" } else { "missing" }
                ),
            ),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["actions", "reason"],
               "properties": {
                   "actions": {"type": "array", "items": {"type": "string",
                       "enum": ["extract", "boost", "demote", "merge", "forget", "synthesize", "wait"]}},
                   "reason": {"type": "string"}}})
    }
    fn parse(&self, _input: &PlanInput, answer: serde_json::Value) -> Result<PlanOutput, String> {
        let o = obj(&answer)?;
        let mut actions = Vec::new();
        for (i, a) in arr(o, "actions")?.into_iter().enumerate() {
            let a = a
                .as_str()
                .ok_or_else(|| format!("actions[{i}] is not a string"))?;
            if a == "wait" {
                continue;
            }
            if !ACTIONS.contains(&a) {
                return Err(format!("actions[{i}]: unknown action `{a}`"));
            }
            if !actions.iter().any(|x: &String| x == a) {
                actions.push(a.to_string());
            }
        }
        Ok(PlanOutput {
            actions,
            reason: o
                .get("reason")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string(),
        })
    }
    fn offline(&self, i: &PlanInput) -> Result<PlanOutput, LlmError> {
        Ok(offline_plan(i))
    }
}

/// The offline planner. Rules, first match wins:
/// 1. nothing pending → wait (or synthesize alone when γ is reached);
/// 2. the FIFO would evict a pending signal next → full round;
/// 3. a negative signal contradicts a chunk → demote now (with extract);
/// 4. cold start (no chunks) and ≥ 3 pending → extract;
/// 5. ≥ ⌈B/2⌉ pending and ≥ 60% of positives are novel → extract (shift/discovery);
/// 6. ≥ B pending → full round;
/// 7. otherwise wait.
///
/// Every round adds merge/forget when there is something to merge or forget,
/// and synthesize when γ would be reached or no profile exists yet.
pub fn offline_plan(i: &PlanInput) -> PlanOutput {
    let n = i.pending.len();
    let full = || -> Vec<String> { ACTIONS.iter().map(|a| a.to_string()).collect() };
    let (mut actions, reason): (Vec<String>, String) = if n == 0 {
        if i.mutations >= i.gamma {
            (vec!["synthesize".into()], "γ mutations reached".into())
        } else {
            (Vec::new(), "no pending signals".into())
        }
    } else if i.fifo_len >= i.lmax {
        (
            full(),
            "FIFO full: process pending signals before eviction".into(),
        )
    } else if i.conflicts > 0 {
        (
            vec!["extract".into(), "boost".into(), "demote".into()],
            format!("{} signal(s) contradict existing beliefs", i.conflicts),
        )
    } else if i.chunks.is_empty() && n >= 3 {
        (vec!["extract".into()], "cold start: no beliefs yet".into())
    } else if n >= i.b.div_ceil(2) && i.pending_positive > 0 && i.novel_share >= 0.6 {
        (
            vec!["extract".into(), "boost".into(), "demote".into()],
            format!(
                "{:.0}% of new positives are unexplained: possible shift",
                i.novel_share * 100.0
            ),
        )
    } else if n >= i.b {
        (full(), format!("{n} pending signals"))
    } else {
        (
            Vec::new(),
            format!("only {n} pending, no conflict or novelty"),
        )
    };
    if !actions.is_empty() {
        for (cond, a) in [
            (i.duplicates > 0, "merge"),
            (i.forgettable > 0 || !actions.is_empty(), "forget"),
        ] {
            if cond && !actions.iter().any(|x| x == a) {
                actions.push(a.into());
            }
        }
        if (!i.has_profile || i.mutations + 1 >= i.gamma)
            && !actions.iter().any(|x| x == "synthesize")
        {
            actions.push("synthesize".into());
        }
    }
    PlanOutput { actions, reason }
}

// ---------------------------------------------------------------- categories

/// One sample item for category derivation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleItem {
    /// Title.
    pub title: String,
    /// Categories.
    pub categories: Vec<String>,
    /// Attributes.
    pub attributes: BTreeMap<String, String>,
    /// First text field, shortened.
    pub text: String,
}

/// Input of `mars_categories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoriesInput {
    /// Domain (dataset name).
    pub domain: String,
    /// How many categories.
    pub n: usize,
    /// Sample items (the prompt shows the first 10, as in the paper).
    pub samples: Vec<SampleItem>,
    /// The metadata-derived categories (the offline answer).
    pub derived: Vec<CategoryDef>,
}

/// Output of `mars_categories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoriesOutput {
    /// The categories.
    pub categories: Vec<CategoryDef>,
}

/// One-time derivation of a domain's preference categories.
#[derive(Debug, Clone, Copy, Default)]
pub struct CategoriesRole;

impl Role for CategoriesRole {
    type Input = CategoriesInput;
    type Output = CategoriesOutput;

    fn name(&self) -> &'static str {
        "mars_categories"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_categories.md")
    }
    fn variables(&self, i: &CategoriesInput) -> BTreeMap<String, String> {
        let samples = lines(&i.samples[..i.samples.len().min(10)], |s| {
            let attrs: Vec<String> = s
                .attributes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "- {} | categories: {} | {} | {}",
                s.title,
                s.categories.join(", "),
                attrs.join(" "),
                s.text
            )
        });
        BTreeMap::from([
            ("domain".into(), i.domain.clone()),
            ("n".into(), i.n.to_string()),
            ("samples".into(), samples),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["categories"],
               "properties": {"categories": {"type": "array", "items": {"type": "object",
                   "required": ["name", "description"],
                   "properties": {"name": {"type": "string"}, "description": {"type": "string"}}}}}})
    }
    fn parse(
        &self,
        i: &CategoriesInput,
        answer: serde_json::Value,
    ) -> Result<CategoriesOutput, String> {
        let o = obj(&answer)?;
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (k, v) in arr(o, "categories")?.into_iter().enumerate() {
            let ctx = format!("categories[{k}]");
            let name = str_field(v, "name", &ctx)?.to_lowercase();
            let description = str_field(v, "description", &ctx)?.to_string();
            if !seen.insert(name.clone()) {
                continue;
            }
            let axis = i
                .derived
                .iter()
                .find(|d| d.name == name)
                .and_then(|d| d.axis.clone());
            out.push(CategoryDef {
                name,
                description,
                axis,
            });
        }
        if out.is_empty() || out.len() > i.n {
            return Err(format!(
                "expected 1..={} categories, got {}",
                i.n,
                out.len()
            ));
        }
        Ok(CategoriesOutput { categories: out })
    }
    fn offline(&self, i: &CategoriesInput) -> Result<CategoriesOutput, LlmError> {
        Ok(CategoriesOutput {
            categories: i.derived.iter().take(i.n).cloned().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mars::categories::AxisKind;

    fn cats() -> Vec<CategoryDef> {
        vec![
            CategoryDef {
                name: "genre".into(),
                description: "genres or categories the user enjoys".into(),
                axis: Some(AxisKind::AnyCategory),
            },
            CategoryDef {
                name: "era".into(),
                description: "release period (release_year, by decade)".into(),
                axis: Some(AxisKind::Attribute {
                    name: "release_year".into(),
                }),
            },
        ]
    }

    fn sig(t: u64, title: &str, pol: i8, genre: &str, era: &str) -> SignalIn {
        SignalIn {
            time: t,
            item: format!("{title} [{genre}] release_year={}", &era[..4]),
            polarity: pol,
            facets: vec![
                FacetIn {
                    category: "genre".into(),
                    axis: 0,
                    value: genre.into(),
                    idf: 0.5,
                },
                FacetIn {
                    category: "era".into(),
                    axis: 1,
                    value: era.into(),
                    idf: 0.2,
                },
            ],
        }
    }

    fn chunk(id: &str, text: &str, s: f64) -> ChunkIn {
        ChunkIn {
            id: id.into(),
            category: "genre".into(),
            text: text.into(),
            axis: Some(0),
            value: Some(text.into()),
            strength: s,
            evidence: 3,
        }
    }

    fn extract_input() -> ExtractInput {
        ExtractInput {
            user: "7".into(),
            categories: cats(),
            pending: vec![
                sig(10, "Fargo", 1, "Crime", "1990s"),
                sig(11, "Heat", 1, "Crime", "1990s"),
                sig(12, "Clueless", -1, "Comedy", "1990s"),
                sig(13, "Se7en", 1, "Crime", "1990s"),
            ],
            chunks: vec![
                chunk("user:7:chunk:a", "Comedy", 0.7),
                chunk("user:7:chunk:b", "Western", 0.5),
            ],
            min_support: 2,
            shift_min: 3,
            kcat: 4,
        }
    }

    fn render<R: Role>(role: &R, input: &R::Input) -> String {
        let msgs =
            evomem_llm::template::render(role.name(), role.template(), &role.variables(input))
                .unwrap_or_default();
        msgs.iter()
            .map(|m| format!("### {:?}\n{}", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    #[test]
    fn offline_extract_proposes_boosts_and_demotes() {
        let out = offline_extract(&extract_input());
        assert!(out
            .new_chunks
            .iter()
            .any(|c| c.text == "Crime" && (c.strength - 0.8).abs() < 1e-9));
        assert!(out.new_chunks.iter().any(|c| c.text == "1990s"));
        assert!(out.demotes.iter().any(|d| d.chunk == "user:7:chunk:a"));
        assert!(out
            .demotes
            .iter()
            .any(|d| d.chunk == "user:7:chunk:b" && d.reason.contains("shift")));
        assert!(out.boosts.is_empty());
    }

    #[test]
    fn extract_parser_rejects_unknown_ids_and_categories() {
        let r = ExtractRole;
        let i = extract_input();
        assert!(r
            .parse(
                &i,
                json!({"new_chunks": [{"category": "mood", "text": "x", "strength": 0.5}]})
            )
            .is_err());
        assert!(r.parse(&i, json!({"boosts": [{"chunk": "nope"}]})).is_err());
        assert!(r
            .parse(
                &i,
                json!({"new_chunks": [{"category": "genre", "text": "Crime", "strength": 3}]})
            )
            .is_err());
        let ok = r
            .parse(&i, json!({"new_chunks": [{"category": "genre", "text": "crime", "strength": 0.8, "sources": [10, 11]}],
                              "boosts": [], "demotes": [{"chunk": "user:7:chunk:a"}]}))
            .unwrap();
        assert_eq!(ok.new_chunks[0].axis, Some(0));
        assert_eq!(ok.demotes.len(), 1);
    }

    #[test]
    fn plan_parser_and_heuristic() {
        let input = PlanInput {
            user: "7".into(),
            pending: extract_input().pending,
            pending_positive: 3,
            pending_negative: 1,
            fifo_len: 4,
            lmax: 15,
            chunks: extract_input().chunks,
            novel_share: 1.0,
            conflicts: 1,
            forgettable: 0,
            duplicates: 0,
            mutations: 2,
            gamma: 5,
            has_profile: true,
            b: 5,
        };
        let p = offline_plan(&input);
        assert!(p.actions.contains(&"demote".to_string()), "{p:?}");
        let waiting = PlanInput {
            pending: vec![],
            pending_positive: 0,
            pending_negative: 0,
            conflicts: 0,
            ..input.clone()
        };
        assert!(offline_plan(&waiting).actions.is_empty());
        assert!(PlanRole
            .parse(&input, json!({"actions": ["explode"], "reason": ""}))
            .is_err());
        assert!(PlanRole
            .parse(&input, json!({"actions": ["wait"], "reason": "ok"}))
            .unwrap()
            .actions
            .is_empty());
    }

    #[test]
    fn prompt_snapshots() {
        insta::assert_snapshot!("mars_extract", render(&ExtractRole, &extract_input()));
        let syn = SynthesizeInput {
            user: "7".into(),
            categories: cats(),
            chunks: extract_input().chunks,
            recent: extract_input().pending,
            previous: None,
            max_words: 300,
        };
        insta::assert_snapshot!("mars_synthesize", render(&SynthesizeRole, &syn));
        insta::assert_snapshot!("mars_synthesize_offline", offline_profile(&syn));
        let plan = offline_plan_input();
        insta::assert_snapshot!("mars_plan", render(&PlanRole, &plan));
        let ci = CategoriesInput {
            domain: "a catalog of 3 items".into(),
            n: 6,
            samples: vec![SampleItem {
                title: "Fargo".into(),
                categories: vec!["Crime".into(), "Drama".into()],
                attributes: [("release_year".to_string(), "1996".to_string())].into(),
                text: String::new(),
            }],
            derived: cats(),
        };
        insta::assert_snapshot!("mars_categories", render(&CategoriesRole, &ci));
    }

    fn offline_plan_input() -> PlanInput {
        PlanInput {
            user: "7".into(),
            pending: extract_input().pending,
            pending_positive: 3,
            pending_negative: 1,
            fifo_len: 4,
            lmax: 15,
            chunks: extract_input().chunks,
            novel_share: 1.0,
            conflicts: 1,
            forgettable: 0,
            duplicates: 0,
            mutations: 2,
            gamma: 5,
            has_profile: true,
            b: 5,
        }
    }
}
