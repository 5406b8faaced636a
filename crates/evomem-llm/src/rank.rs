//! The `rank` role: order a decision's candidates for one user.
//!
//! **Prompt path.** `prompts/rank.md` shows the profile, the weighted memory
//! entries, the instruction and the numbered candidates (each followed by an
//! `item memory:` line when the policy recalled memory about that item,
//! [`DecisionContext::item_memory`]), and asks for
//! `{"ranking": [candidate numbers, best first]}`. The parser rejects numbers
//! out of range and duplicates (which triggers the hub's repair turn);
//! candidates the model left out are appended in offline order and counted
//! as a repair. Position `p` (0-based) of `n` becomes score `n - p`.
//!
//! **Offline path** (the default), a documented deterministic scorer:
//!
//! 1. if the policy supplied `context.scores` (BPR, item-kNN, a policy's own
//!    ranker), they are the answer;
//! 2. else, when the context holds memory (a profile or entries), the user
//!    vector is `q = normalise(Σ_i w_i·e_i + e_profile)`, where `e_i` is an
//!    entry's embedding (embedded from its text when it has none, or one of
//!    another dimension) and `w_i` its signed weight. A candidate `c` (its
//!    embedding, or the embedding of `title. text`) scores
//!    `cos(q, e_c) + 0.5·kw(c)`, where `kw(c) = Σ_{t∈T(c)} k_t / Σ_t |k_t|`
//!    is keyword/category matching: `k_t` sums the weights of the entries
//!    (and +1 for the profile) whose text contains token `t`, and `T(c)` are
//!    the distinct tokens of the candidate's title and text (lower-cased,
//!    alphanumeric, at least 3 characters, minus a few stop words; item texts
//!    carry genres/categories, so this is preference matching on them). This
//!    is the similarity-plus-preference-matching ranker of the MARS and
//!    AtomRec offline ablations (user interest vector against item content);
//! 3. else (no memory), with an instruction, the same formula with
//!    `q = e_instruction` and keywords from the instruction;
//! 4. else a seeded uniform score per `(seed, item)`: a fair random ranking.
//!
//! Cases 2–4 add `1e-9·u(seed, item)` so that exact ties break
//! deterministically, independent of candidate order.

use crate::hub::note_parser_repair;
use evomem_core::{dot, normalize, DecisionContext, Embedder, ItemId, LlmError, Role};
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Weight of keyword matching against cosine similarity.
pub const KEYWORD_WEIGHT: f64 = 0.5;
/// Weight of the profile embedding in the user vector.
pub const PROFILE_WEIGHT: f32 = 1.0;
const TIE_BREAK: f64 = 1e-9;

/// One candidate to rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankCandidate {
    /// The item.
    pub item: ItemId,
    /// Title shown to the model.
    pub title: String,
    /// Metadata text (genres, categories, description).
    pub text: String,
    /// Item embedding; empty when the caller has none (then `title. text`
    /// is embedded).
    pub embedding: Vec<f32>,
}

/// Input of the rank role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankInput {
    /// User token (for accounting and the prompt).
    pub user: String,
    /// Optional natural-language instruction.
    pub instruction: Option<String>,
    /// What memory recalled for this decision.
    pub context: DecisionContext,
    /// Candidates, in the order scores are returned.
    pub candidates: Vec<RankCandidate>,
    /// Seed of the tie-break and of the no-memory ranking.
    pub seed: u64,
}

/// Output of the rank role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankOutput {
    /// One score per candidate, aligned with `RankInput::candidates`;
    /// higher is better.
    pub scores: Vec<f64>,
}

/// The rank role.
#[derive(Clone)]
pub struct RankRole {
    embedder: Arc<dyn Embedder>,
}

impl std::fmt::Debug for RankRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankRole")
            .field("embedder", &self.embedder.model_id())
            .finish()
    }
}

impl RankRole {
    /// A rank role embedding texts with `embedder`.
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self { embedder }
    }

    fn err(message: impl Into<String>) -> LlmError {
        LlmError::Offline {
            role: "rank".to_string(),
            message: message.into(),
        }
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, LlmError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.embedder
            .embed(texts)
            .map_err(|e| Self::err(format!("embedding failed: {e}")))
    }

    fn candidate_vectors(&self, cands: &[RankCandidate]) -> Result<Vec<Vec<f32>>, LlmError> {
        let dim = self.embedder.dim();
        let texts: Vec<String> = cands
            .iter()
            .filter(|c| c.embedding.len() != dim)
            .map(candidate_text)
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut embedded = self.embed(&refs)?.into_iter();
        let mut out = Vec::with_capacity(cands.len());
        for c in cands {
            if c.embedding.len() == dim {
                let mut v = c.embedding.clone();
                normalize(&mut v);
                out.push(v);
            } else {
                out.push(
                    embedded
                        .next()
                        .ok_or_else(|| Self::err("embedder returned too few vectors"))?,
                );
            }
        }
        Ok(out)
    }

    /// The user vector and keyword weights from memory (case 2).
    fn memory_query(
        &self,
        ctx: &DecisionContext,
    ) -> Result<(Vec<f32>, BTreeMap<String, f64>), LlmError> {
        let dim = self.embedder.dim();
        let mut q = vec![0f32; dim];
        let mut kw: BTreeMap<String, f64> = BTreeMap::new();
        let need: Vec<&str> = ctx
            .entries
            .iter()
            .filter(|e| e.embedding.as_ref().is_none_or(|v| v.len() != dim))
            .map(|e| e.text.as_str())
            .collect();
        let mut embedded = self.embed(&need)?.into_iter();
        for e in &ctx.entries {
            if !e.weight.is_finite() {
                return Err(Self::err("a context entry has a non-finite weight"));
            }
            let v = match &e.embedding {
                Some(v) if v.len() == dim => {
                    let mut v = v.clone();
                    normalize(&mut v);
                    v
                }
                _ => embedded
                    .next()
                    .ok_or_else(|| Self::err("embedder returned too few vectors"))?,
            };
            for (a, b) in q.iter_mut().zip(&v) {
                *a += e.weight * b;
            }
            for t in tokens(&e.text) {
                *kw.entry(t).or_default() += f64::from(e.weight);
            }
        }
        if let Some(p) = ctx.profile.as_deref().filter(|p| !p.trim().is_empty()) {
            let v = self
                .embed(&[p])?
                .pop()
                .ok_or_else(|| Self::err("no profile vector"))?;
            for (a, b) in q.iter_mut().zip(&v) {
                *a += PROFILE_WEIGHT * b;
            }
            for t in tokens(p) {
                *kw.entry(t).or_default() += 1.0;
            }
        }
        normalize(&mut q);
        Ok((q, kw))
    }

    fn score_against(
        &self,
        input: &RankInput,
        q: &[f32],
        kw: &BTreeMap<String, f64>,
    ) -> Result<Vec<f64>, LlmError> {
        let vecs = self.candidate_vectors(&input.candidates)?;
        let mass: f64 = kw.values().map(|w| w.abs()).sum();
        Ok(input
            .candidates
            .iter()
            .zip(&vecs)
            .map(|(c, v)| {
                let cos = f64::from(dot(q, v));
                let matched: f64 = tokens(&candidate_text(c))
                    .iter()
                    .filter_map(|t| kw.get(t))
                    .sum();
                let k = if mass > 0.0 { matched / mass } else { 0.0 };
                cos + KEYWORD_WEIGHT * k + TIE_BREAK * unit(input.seed, c.item)
            })
            .collect())
    }
}

/// The text embedded for a candidate without an embedding.
fn candidate_text(c: &RankCandidate) -> String {
    if c.text.is_empty() {
        c.title.clone()
    } else {
        format!("{}. {}", c.title, c.text)
    }
}

/// Distinct content words ([`evomem_core::text::words`]).
pub fn tokens(text: &str) -> BTreeSet<String> {
    evomem_core::text::words(text).collect()
}

/// A uniform number in `[0, 1)` determined by `(seed, item)` only.
fn unit(seed: u64, item: ItemId) -> f64 {
    let mix = seed ^ u64::from(item.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ChaCha8Rng::seed_from_u64(mix).gen::<f64>()
}

impl Role for RankRole {
    type Input = RankInput;
    type Output = RankOutput;

    fn name(&self) -> &'static str {
        "rank"
    }
    /// Completion limit: The offline answer for ml-100k's 10 candidates is 52–53
    /// estimated tokens (about 5 per candidate); 256 fits a ranking of about 50
    /// candidates.
    fn max_tokens(&self) -> Option<u32> {
        Some(256)
    }

    fn template(&self) -> &'static str {
        include_str!("../prompts/rank.md")
    }

    fn variables(&self, input: &RankInput) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        v.insert(
            "profile".to_string(),
            input
                .context
                .profile
                .clone()
                .filter(|p| !p.trim().is_empty())
                .unwrap_or_else(|| "(none)".to_string()),
        );
        // A memory whose text repeats an earlier one's (two notes of the
        // same rating) is shown once, at its first weight: the copy tells
        // a model nothing new. Only the prompt drops it; the offline scorer
        // reads every entry.
        let context = if input.context.entries.is_empty() {
            "(no memory)".to_string()
        } else {
            let mut shown = std::collections::BTreeSet::new();
            input
                .context
                .entries
                .iter()
                .filter(|e| shown.insert(e.text.trim()))
                .map(|e| format!("- [{:+.2}] {}", e.weight, e.text.trim()))
                .collect::<Vec<_>>()
                .join("\n")
        };
        v.insert("context".to_string(), context);
        v.insert(
            "instruction".to_string(),
            input
                .instruction
                .clone()
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| "(none)".to_string()),
        );
        let item_memory: BTreeMap<ItemId, &str> = input
            .context
            .item_memory
            .iter()
            .map(|m| (m.item, m.text.trim()))
            .filter(|(_, t)| !t.is_empty())
            .collect();
        let cands = input
            .candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                // An item text that starts with the title (ml-100k's
                // "Title. Genres") is not preceded by the title again.
                let line = if c.text.is_empty() {
                    format!("[{}] {}", i + 1, c.title)
                } else if c.text.starts_with(c.title.as_str()) {
                    format!("[{}] {}", i + 1, c.text)
                } else {
                    format!("[{}] {} — {}", i + 1, c.title, c.text)
                };
                match item_memory.get(&c.item) {
                    Some(m) => format!("{line}\n    item memory: {m}"),
                    None => line,
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        v.insert("candidates".to_string(), cands);
        v.insert("n".to_string(), input.candidates.len().to_string());
        v
    }

    /// The candidates bound the answer: at most `n` distinct numbers in
    /// `1..=n`. A schema-constrained decoder then cannot list numbers until
    /// its token limit (what SmolLM2 did under the open schema).
    fn schema_for(&self, input: &RankInput) -> Value {
        let n = input.candidates.len().max(1);
        json!({
            "type": "object",
            "properties": {
                "ranking": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1, "maximum": n},
                    "minItems": 1,
                    "maxItems": n,
                    "uniqueItems": true
                }
            },
            "required": ["ranking"],
            "additionalProperties": false
        })
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "ranking": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1},
                    "minItems": 1
                }
            },
            "required": ["ranking"],
            "additionalProperties": false
        })
    }

    fn parse(&self, input: &RankInput, answer: Value) -> Result<RankOutput, String> {
        let n = input.candidates.len();
        let Some(list) = answer.get("ranking").and_then(Value::as_array) else {
            return Err("missing array field `ranking`".to_string());
        };
        let mut seen = vec![false; n];
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for (pos, x) in list.iter().enumerate() {
            let k = x
                .as_u64()
                .ok_or_else(|| format!("ranking[{pos}] = {x} is not a candidate number"))?;
            if k == 0 || k as usize > n {
                return Err(format!("ranking[{pos}] = {k} is outside 1..={n}"));
            }
            let i = k as usize - 1;
            if seen[i] {
                return Err(format!("ranking[{pos}] = {k} is a duplicate"));
            }
            seen[i] = true;
            order.push(i);
        }
        if order.len() < n {
            // Complete the ranking with the missing candidates in offline order.
            let offline = self.offline(input).map_err(|e| e.to_string())?;
            let mut missing: Vec<usize> = (0..n).filter(|&i| !seen[i]).collect();
            missing.sort_by(|&a, &b| {
                offline.scores[b]
                    .total_cmp(&offline.scores[a])
                    .then(a.cmp(&b))
            });
            order.extend(missing);
            note_parser_repair();
        }
        let mut scores = vec![0.0; n];
        for (p, &i) in order.iter().enumerate() {
            scores[i] = (n - p) as f64;
        }
        Ok(RankOutput { scores })
    }

    fn offline(&self, input: &RankInput) -> Result<RankOutput, LlmError> {
        let n = input.candidates.len();
        if n == 0 {
            return Ok(RankOutput { scores: Vec::new() });
        }
        let ctx = &input.context;
        if let Some(s) = &ctx.scores {
            if s.len() != n {
                return Err(Self::err(format!(
                    "context.scores has {} values for {n} candidates",
                    s.len()
                )));
            }
            if s.iter().any(|x| !x.is_finite()) {
                return Err(Self::err("context.scores contains a non-finite value"));
            }
            return Ok(RankOutput { scores: s.clone() });
        }
        let has_memory =
            ctx.profile.as_deref().is_some_and(|p| !p.trim().is_empty()) || !ctx.entries.is_empty();
        if has_memory {
            let (q, kw) = self.memory_query(ctx)?;
            return Ok(RankOutput {
                scores: self.score_against(input, &q, &kw)?,
            });
        }
        if let Some(instr) = input
            .instruction
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            let q = self
                .embed(&[instr])?
                .pop()
                .ok_or_else(|| Self::err("no instruction vector"))?;
            let kw: BTreeMap<String, f64> = tokens(instr).into_iter().map(|t| (t, 1.0)).collect();
            return Ok(RankOutput {
                scores: self.score_against(input, &q, &kw)?,
            });
        }
        Ok(RankOutput {
            scores: input
                .candidates
                .iter()
                .map(|c| unit(input.seed, c.item))
                .collect(),
        })
    }
}
