//! `atomrec_evolve` (§2.5, m_j* ← LM_Mem(m_n ‖ m_j ‖ M_near ‖ P_evolve)):
//! field-level refinement of a neighbour in the light of a new note.

use super::to_json;
use crate::atomrec::note::{NoteView, MAX_KEYWORDS, MAX_TAGS};
use crate::atomrec::relation::Relation;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Input of [`EvolveRole`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvolveInput {
    /// The new note m_n.
    pub new_note: NoteView,
    /// The neighbour m_j to refine.
    pub target: NoteView,
    /// Relation of the link n → j, if linked.
    pub relation: Option<Relation>,
    /// s(n, j).
    pub similarity: f32,
}

/// Output of [`EvolveRole`]: the new field values (content and time are not fields here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvolveOutput {
    /// K_j*.
    pub keywords: Vec<String>,
    /// G_j*.
    pub tags: Vec<String>,
    /// X_j*.
    pub context: String,
}

/// `atomrec_evolve`: field-level refinement of a neighbour.
///
/// Offline algorithm: keywords the two notes share move to the front
/// (strengthened), then up to two new keywords of m_n are appended, capped at
/// [`MAX_KEYWORDS`]; the first category tag of m_n missing from G_j is added
/// (capped at [`MAX_TAGS`]); the context keeps its base (the text before any
/// `; later:`) and records the latest evidence:
/// `<base>; later: <relation> towards <first keyword(s) of m_n>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvolveRole;

impl Role for EvolveRole {
    type Input = EvolveInput;
    type Output = EvolveOutput;

    fn name(&self) -> &'static str {
        "atomrec_evolve"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../../prompts/atomrec_evolve.md")
    }
    fn variables(&self, input: &EvolveInput) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        v.insert("max_keywords".into(), MAX_KEYWORDS.to_string());
        v.insert("max_tags".into(), MAX_TAGS.to_string());
        v.insert(
            "relation".into(),
            input
                .relation
                .map_or_else(|| "none (similar)".into(), |r| r.to_string()),
        );
        v.insert("similarity".into(), format!("{:.3}", input.similarity));
        v.insert("new_note".into(), to_json(&input.new_note));
        v.insert("target".into(), to_json(&input.target));
        v
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object", "required": ["keywords", "tags", "context"],
            "properties": {"keywords": {"type": "array", "items": {"type": "string"}},
                           "tags": {"type": "array", "items": {"type": "string"}},
                           "context": {"type": "string"}}
        })
    }
    fn parse(
        &self,
        _input: &EvolveInput,
        answer: serde_json::Value,
    ) -> Result<EvolveOutput, String> {
        let mut out: EvolveOutput =
            serde_json::from_value(answer).map_err(|e| format!("evolve: {e}"))?;
        if out.context.trim().is_empty() {
            return Err("evolve: empty `context`".into());
        }
        out.keywords.truncate(MAX_KEYWORDS);
        out.tags.truncate(MAX_TAGS);
        Ok(out)
    }
    fn offline(&self, input: &EvolveInput) -> Result<EvolveOutput, LlmError> {
        let t = &input.target;
        let n = &input.new_note;
        let mut keywords: Vec<String> = t
            .keywords
            .iter()
            .filter(|k| n.keywords.contains(k))
            .cloned()
            .collect();
        keywords.extend(
            t.keywords
                .iter()
                .filter(|k| !n.keywords.contains(k))
                .cloned(),
        );
        let mut added = 0;
        for k in &n.keywords {
            if added >= 2 || keywords.len() >= MAX_KEYWORDS {
                break;
            }
            if !keywords.contains(k) {
                keywords.push(k.clone());
                added += 1;
            }
        }
        keywords.truncate(MAX_KEYWORDS);
        let mut tags = t.tags.clone();
        if tags.len() < MAX_TAGS {
            if let Some(g) = n.tags.iter().find(|g| {
                !matches!(g.as_str(), "liked" | "disliked" | "neutral") && !tags.contains(g)
            }) {
                tags.push(g.clone());
            }
        }
        let base = t
            .context
            .split("; later:")
            .next()
            .unwrap_or_default()
            .trim_end();
        let towards: Vec<&str> = n.keywords.iter().take(2).map(String::as_str).collect();
        let rel = input.relation.unwrap_or(Relation::Similar);
        let context = format!("{base}; later: {rel} towards {}", towards.join(" "));
        Ok(EvolveOutput {
            keywords,
            tags,
            context,
        })
    }
}
