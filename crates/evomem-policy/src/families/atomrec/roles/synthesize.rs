//! `atomrec_synthesize` (§2.6, M_collab ← LM_Mem(G_sub ‖ P_synth)): evidence
//! paths and seed memories summarised into collaborative evidence.

use crate::atomrec::note::NoteView;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One hop of an evidence path as shown to the synthesizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathHop {
    /// Short label of the atom (anonymised for other users).
    pub label: String,
    /// Relation that led here (`None` for the seed).
    pub relation: Option<String>,
}

/// One evidence path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathView {
    /// Hops, seed first.
    pub hops: Vec<PathHop>,
    /// Path score.
    pub score: f32,
}

/// Input of [`SynthesizeRole`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthInput {
    /// The instruction, if any.
    pub instruction: Option<String>,
    /// Seed memories M_0 (content only), best first.
    pub seeds: Vec<NoteView>,
    /// Evidence paths, best first.
    pub paths: Vec<PathView>,
}

/// Output of [`SynthesizeRole`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthOutput {
    /// One-paragraph collaborative evidence M_collab.
    pub summary: String,
    /// Preference facets.
    pub facets: Vec<String>,
    /// One sentence per path, aligned with the input paths.
    pub paths: Vec<String>,
}

/// `atomrec_synthesize`: evidence-path synthesis.
///
/// Offline algorithm: facets are the five most frequent non-sentiment tags of
/// the seeds (ties by name); each path is rendered hop by hop as
/// `A —relation→ B —relation→ C`; the summary names the facets and counts
/// 1-hop and 2-hop paths.
#[derive(Debug, Clone, Copy, Default)]
pub struct SynthesizeRole;

/// Render a path as `A —rel→ B —rel→ C`.
pub fn render_path(p: &PathView) -> String {
    let mut s = String::new();
    for h in &p.hops {
        if let Some(r) = &h.relation {
            s.push_str(&format!(" —{r}→ "));
        }
        s.push_str(&h.label);
    }
    s
}

impl Role for SynthesizeRole {
    type Input = SynthInput;
    type Output = SynthOutput;

    fn name(&self) -> &'static str {
        "atomrec_synthesize"
    }
    /// Completion limit: 1.25 × the largest per-user mean of the offline answer's
    /// estimated tokens on 100 ml-100k users (1,449), rounded up to a multiple of 64;
    /// above the configured default of 1,024, which therefore still applies unless
    /// `llm.max_tokens` is raised.
    fn max_tokens(&self) -> Option<u32> {
        Some(1856)
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/atomrec_synthesize.md")
    }
    fn variables(&self, input: &SynthInput) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        v.insert(
            "instruction".into(),
            input.instruction.clone().unwrap_or_else(|| "(none)".into()),
        );
        v.insert(
            "seeds".into(),
            input
                .seeds
                .iter()
                .map(|s| format!("- {}", s.content))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        v.insert(
            "paths".into(),
            input
                .paths
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{i}. {}", render_path(p)))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        v
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object", "required": ["summary", "facets", "paths"],
            "properties": {"summary": {"type": "string"},
                           "facets": {"type": "array", "items": {"type": "string"}},
                           "paths": {"type": "array", "items": {"type": "string"}}}
        })
    }
    fn parse(&self, input: &SynthInput, answer: serde_json::Value) -> Result<SynthOutput, String> {
        let out: SynthOutput =
            serde_json::from_value(answer).map_err(|e| format!("synthesize: {e}"))?;
        if out.paths.len() != input.paths.len() {
            return Err(format!(
                "synthesize: {} path sentences for {} paths",
                out.paths.len(),
                input.paths.len()
            ));
        }
        Ok(out)
    }
    fn offline(&self, input: &SynthInput) -> Result<SynthOutput, LlmError> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &input.seeds {
            for t in &s.tags {
                if !matches!(t.as_str(), "liked" | "disliked" | "neutral") {
                    *counts.entry(t.as_str()).or_insert(0) += 1;
                }
            }
        }
        let mut top: Vec<(&str, usize)> = counts.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let facets: Vec<String> = top
            .into_iter()
            .take(5)
            .map(|(t, _)| t.to_string())
            .collect();
        let paths: Vec<String> = input.paths.iter().map(render_path).collect();
        let one = input.paths.iter().filter(|p| p.hops.len() == 2).count();
        let two = input.paths.iter().filter(|p| p.hops.len() == 3).count();
        let summary = format!(
            "Preference facets: {}. Evidence: {one} 1-hop and {two} 2-hop paths from {} retrieved memories.",
            if facets.is_empty() { "none".to_string() } else { facets.join(", ") },
            input.seeds.len()
        );
        Ok(SynthOutput {
            summary,
            facets,
            paths,
        })
    }
}
