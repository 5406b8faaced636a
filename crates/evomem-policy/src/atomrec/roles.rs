//! The three LLM roles of AtomRec's memory agent LM_Mem, each with a prompt
//! file and a documented, deterministic offline algorithm:
//!
//! - [`LinkRole`] (`atomrec_link`, §2.4, L_n ← LM_Mem(m_n ‖ M_near ‖ P_link));
//! - [`EvolveRole`] (`atomrec_evolve`, §2.5, m_j* ← LM_Mem(m_n ‖ m_j ‖ M_near ‖ P_evolve));
//! - [`SynthesizeRole`] (`atomrec_synthesize`, §2.6, M_collab ← LM_Mem(G_sub ‖ P_synth)).

use super::note::{MAX_KEYWORDS, MAX_TAGS};
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The five relation types of §2.4.
pub const RELATIONS: [&str; 5] = [
    "shared topic",
    "complementary preference",
    "intent progression",
    "preference transition",
    "cross-domain transfer",
];

/// Relation used by embedding-only links (`typed=false`).
pub const UNTYPED: &str = "similar";

/// The prompt-facing view of one note.
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

/// One linking candidate from M_near.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    /// Position in the candidate list (the id the model answers with).
    pub index: usize,
    /// The note (other users' notes are shown without owner).
    pub note: NoteView,
    /// Cosine s(n, j).
    pub similarity: f32,
    /// Same owner as the new note.
    pub same_user: bool,
    /// Same item as the new note.
    pub same_item: bool,
    /// The neighbour is an item note.
    pub item_note: bool,
    /// For the owner's own notes: how many interactions ago it was written.
    pub steps_back: Option<u32>,
}

/// Input of [`LinkRole`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkInput {
    /// New note m_n.
    pub note: NoteView,
    /// Its top-k_link neighbours, most similar first.
    pub neighbours: Vec<Neighbour>,
    /// Typed relations (`false`: embedding-only links).
    pub typed: bool,
    /// Most links to create.
    pub max_links: usize,
}

/// One created link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkChoice {
    /// Neighbour index.
    pub index: usize,
    /// Relation description.
    pub relation: String,
    /// Weight in [0, 1].
    pub weight: f32,
}

/// Output of [`LinkRole`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkOutput {
    /// Links L_n.
    pub links: Vec<LinkChoice>,
}

/// `atomrec_link`: chooses links and relations among the top-k_link neighbours.
///
/// Offline algorithm (deterministic, metadata + embeddings):
/// 1. with `typed = false`, link the `max_links` most similar neighbours, relation `similar`;
/// 2. otherwise always link (a) the item note of the same item (`shared topic`),
///    (b) other users' notes on the same item (`shared topic` when they share the
///    sentiment tag, else `complementary preference`: the collaborative links), and
///    (c) the owner's notes from the last 5 interactions (`intent progression`
///    when their category tags overlap, else `preference transition`);
/// 3. rank the remaining neighbours by s + 0.5·J, J the Jaccard overlap of
///    keywords ∪ tags, and fill up to `max_links`: J ≥ 0.5 → `shared topic`,
///    J > 0 → `complementary preference`, J = 0 → `cross-domain transfer`.
///
/// Weights are the cosine clamped to [0, 1]; step links (c) are divided by
/// √(steps back), so the closest steps of an intent carry the most weight.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkRole;

fn facet_set(n: &NoteView) -> BTreeSet<&str> {
    n.keywords
        .iter()
        .chain(n.tags.iter())
        .map(String::as_str)
        .filter(|t| !matches!(*t, "liked" | "disliked" | "neutral"))
        .collect()
}

fn jaccard(a: &BTreeSet<&str>, b: &BTreeSet<&str>) -> f32 {
    let inter = a.intersection(b).count();
    let uni = a.union(b).count();
    if uni == 0 {
        0.0
    } else {
        inter as f32 / uni as f32
    }
}

fn sentiment_of(n: &NoteView) -> Option<&str> {
    n.tags
        .iter()
        .map(String::as_str)
        .find(|t| matches!(*t, "liked" | "disliked" | "neutral"))
}

fn category_overlap(a: &NoteView, b: &NoteView) -> bool {
    a.tags
        .iter()
        .filter(|t| !matches!(t.as_str(), "liked" | "disliked" | "neutral"))
        .any(|t| b.tags.contains(t))
}

impl Role for LinkRole {
    type Input = LinkInput;
    type Output = LinkOutput;

    fn name(&self) -> &'static str {
        "atomrec_link"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/atomrec_link.md")
    }
    fn variables(&self, input: &LinkInput) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        v.insert(
            "relations".into(),
            RELATIONS.map(|r| format!("- {r}")).join("\n"),
        );
        v.insert("max_links".into(), input.max_links.to_string());
        v.insert("k".into(), input.neighbours.len().to_string());
        v.insert("note".into(), to_json(&input.note));
        v.insert(
            "neighbours".into(),
            input
                .neighbours
                .iter()
                .map(to_json)
                .collect::<Vec<_>>()
                .join("\n"),
        );
        v
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "required": ["links"],
            "properties": {"links": {"type": "array", "items": {
                "type": "object", "required": ["index", "relation"],
                "properties": {"index": {"type": "integer"}, "relation": {"type": "string"},
                               "weight": {"type": "number"}}}}}
        })
    }
    fn parse(&self, input: &LinkInput, answer: serde_json::Value) -> Result<LinkOutput, String> {
        let out: LinkOutput = serde_json::from_value(answer).map_err(|e| format!("links: {e}"))?;
        let mut seen = BTreeSet::new();
        for l in &out.links {
            if l.index >= input.neighbours.len() {
                return Err(format!("links: index {} out of range", l.index));
            }
            if !seen.insert(l.index) {
                return Err(format!("links: index {} repeated", l.index));
            }
            if !(l.weight.is_finite() && (0.0..=1.0).contains(&l.weight)) {
                return Err(format!("links: weight {} not in [0, 1]", l.weight));
            }
        }
        if out.links.len() > input.max_links {
            return Err(format!(
                "links: {} links, at most {}",
                out.links.len(),
                input.max_links
            ));
        }
        Ok(out)
    }
    fn offline(&self, input: &LinkInput) -> Result<LinkOutput, LlmError> {
        let w = |s: f32| s.clamp(0.0, 1.0);
        let mut links: Vec<LinkChoice> = Vec::new();
        if !input.typed {
            let mut order: Vec<&Neighbour> = input.neighbours.iter().collect();
            order.sort_by(|a, b| {
                b.similarity
                    .total_cmp(&a.similarity)
                    .then(a.index.cmp(&b.index))
            });
            for n in order.into_iter().take(input.max_links) {
                links.push(LinkChoice {
                    index: n.index,
                    relation: UNTYPED.into(),
                    weight: w(n.similarity),
                });
            }
            links.sort_by_key(|l| l.index);
            return Ok(LinkOutput { links });
        }
        let me = facet_set(&input.note);
        let my_sent = sentiment_of(&input.note);
        let mut rest: Vec<(f32, f32, &Neighbour)> = Vec::new();
        for n in &input.neighbours {
            if n.same_item && n.item_note {
                links.push(LinkChoice {
                    index: n.index,
                    relation: RELATIONS[0].into(),
                    weight: w(n.similarity),
                });
            } else if n.same_item {
                let rel = if sentiment_of(&n.note) == my_sent {
                    RELATIONS[0]
                } else {
                    RELATIONS[1]
                };
                links.push(LinkChoice {
                    index: n.index,
                    relation: rel.into(),
                    weight: w(n.similarity),
                });
            } else if n.same_user && n.steps_back.is_some_and(|s| s <= 5) {
                let rel = if category_overlap(&input.note, &n.note) {
                    RELATIONS[2]
                } else {
                    RELATIONS[3]
                };
                let steps = n.steps_back.unwrap_or(1).max(1) as f32;
                links.push(LinkChoice {
                    index: n.index,
                    relation: rel.into(),
                    weight: w(n.similarity) / steps.sqrt(),
                });
            } else {
                let j = jaccard(&me, &facet_set(&n.note));
                rest.push((n.similarity + 0.5 * j, j, n));
            }
        }
        links.truncate(input.max_links);
        rest.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.2.index.cmp(&b.2.index)));
        for (_, j, n) in rest {
            if links.len() >= input.max_links {
                break;
            }
            let rel = if j >= 0.5 {
                RELATIONS[0]
            } else if j > 0.0 {
                RELATIONS[1]
            } else {
                RELATIONS[4]
            };
            links.push(LinkChoice {
                index: n.index,
                relation: rel.into(),
                weight: w(n.similarity),
            });
        }
        links.sort_by_key(|l| l.index);
        Ok(LinkOutput { links })
    }
}

/// Input of [`EvolveRole`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvolveInput {
    /// The new note m_n.
    pub new_note: NoteView,
    /// The neighbour m_j to refine.
    pub target: NoteView,
    /// Relation of the link n → j, if linked.
    pub relation: Option<String>,
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
        include_str!("../../../../prompts/atomrec_evolve.md")
    }
    fn variables(&self, input: &EvolveInput) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        v.insert("max_keywords".into(), MAX_KEYWORDS.to_string());
        v.insert("max_tags".into(), MAX_TAGS.to_string());
        v.insert(
            "relation".into(),
            input
                .relation
                .clone()
                .unwrap_or_else(|| "none (similar)".into()),
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
        let rel = input.relation.as_deref().unwrap_or("similar");
        let context = format!("{base}; later: {rel} towards {}", towards.join(" "));
        Ok(EvolveOutput {
            keywords,
            tags,
            context,
        })
    }
}

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

fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Render a template with the executor's renderer (unknown placeholders fail).
    fn render(template: &str, vars: &BTreeMap<String, String>) -> String {
        evomem_llm::template::render("test", template, vars)
            .unwrap()
            .iter()
            .map(|m| format!("### {:?}\n{}\n", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn note(content: &str, tags: &[&str]) -> NoteView {
        NoteView {
            content: content.into(),
            keywords: super::super::note::keywords_of(content),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            context: "current intent: sci-fi".into(),
        }
    }

    fn link_input() -> LinkInput {
        let n = |i: usize,
                 c: &str,
                 tags: &[&str],
                 user: bool,
                 item: bool,
                 inote: bool,
                 back: Option<u32>,
                 s: f32| Neighbour {
            index: i,
            note: note(c, tags),
            similarity: s,
            same_user: user,
            same_item: item,
            item_note: inote,
            steps_back: back,
        };
        LinkInput {
            note: note(
                "Rated 5/5: The Martian [sci-fi, drama]",
                &["sci-fi", "drama", "liked"],
            ),
            neighbours: vec![
                n(
                    0,
                    "The Martian [sci-fi, drama]",
                    &["sci-fi", "drama"],
                    false,
                    true,
                    true,
                    None,
                    0.93,
                ),
                n(
                    1,
                    "Rated 2/5: The Martian [sci-fi, drama]",
                    &["sci-fi", "drama", "disliked"],
                    false,
                    true,
                    false,
                    None,
                    0.88,
                ),
                n(
                    2,
                    "Rated 4/5: Interstellar [sci-fi]",
                    &["sci-fi", "liked"],
                    true,
                    false,
                    false,
                    Some(1),
                    0.71,
                ),
                n(
                    3,
                    "Rated 4/5: Amelie [comedy, romance]",
                    &["comedy", "romance", "liked"],
                    true,
                    false,
                    false,
                    Some(9),
                    0.31,
                ),
                n(
                    4,
                    "Rated 5/5: Gravity [sci-fi, drama]",
                    &["sci-fi", "drama", "liked"],
                    true,
                    false,
                    false,
                    Some(12),
                    0.64,
                ),
            ],
            typed: true,
            max_links: 4,
        }
    }

    #[test]
    fn offline_link_types_relations() {
        let out = LinkRole.offline(&link_input()).unwrap();
        let rel: Vec<(usize, &str)> = out
            .links
            .iter()
            .map(|l| (l.index, l.relation.as_str()))
            .collect();
        assert_eq!(
            rel,
            vec![
                (0, "shared topic"),
                (1, "complementary preference"),
                (2, "intent progression"),
                (4, "shared topic")
            ]
        );
    }

    #[test]
    fn offline_link_untyped_is_top_by_similarity() {
        let mut i = link_input();
        i.typed = false;
        i.max_links = 2;
        let out = LinkRole.offline(&i).unwrap();
        assert_eq!(
            out.links.iter().map(|l| l.index).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert!(out.links.iter().all(|l| l.relation == UNTYPED));
    }

    #[test]
    fn link_parse_rejects_out_of_range_index() {
        let i = link_input();
        let err = LinkRole
            .parse(&i, serde_json::json!({"links": [{"index": 9, "relation": "shared topic", "weight": 0.5}]}))
            .unwrap_err();
        assert!(err.contains("index 9"), "{err}");
    }

    #[test]
    fn offline_evolve_keeps_base_context() {
        let inp = EvolveInput {
            new_note: note(
                "Rated 5/5: Neuromancer [cyberpunk, sci-fi]",
                &["cyberpunk", "sci-fi", "liked"],
            ),
            target: NoteView {
                context: "current intent: sci-fi; later: shared topic towards martian".into(),
                ..note("Rated 4/5: Interstellar [sci-fi]", &["sci-fi", "liked"])
            },
            relation: Some("preference transition".into()),
            similarity: 0.74,
        };
        let out = EvolveRole.offline(&inp).unwrap();
        assert_eq!(
            out.context,
            "current intent: sci-fi; later: preference transition towards rated neuromancer"
        );
        assert!(out.tags.contains(&"cyberpunk".to_string()));
        assert_eq!(out.keywords[0], "rated");
    }

    fn synth_input() -> SynthInput {
        SynthInput {
            instruction: None,
            seeds: vec![note(
                "Rated 4/5: Interstellar [sci-fi]",
                &["sci-fi", "liked"],
            )],
            paths: vec![PathView {
                hops: vec![
                    PathHop {
                        label: "you: Interstellar".into(),
                        relation: None,
                    },
                    PathHop {
                        label: "another user: Interstellar".into(),
                        relation: Some("shared topic".into()),
                    },
                    PathHop {
                        label: "another user: The Martian".into(),
                        relation: Some("intent progression".into()),
                    },
                ],
                score: 0.4,
            }],
        }
    }

    #[test]
    fn prompt_snapshots() {
        let l = link_input();
        insta::assert_snapshot!(
            "atomrec_link",
            render(LinkRole.template(), &LinkRole.variables(&l))
        );
        let e = EvolveInput {
            new_note: l.note.clone(),
            target: l.neighbours[2].note.clone(),
            relation: Some("intent progression".into()),
            similarity: 0.71,
        };
        insta::assert_snapshot!(
            "atomrec_evolve",
            render(EvolveRole.template(), &EvolveRole.variables(&e))
        );
        let s = synth_input();
        insta::assert_snapshot!(
            "atomrec_synthesize",
            render(SynthesizeRole.template(), &SynthesizeRole.variables(&s))
        );
    }

    #[test]
    fn offline_synthesize_renders_paths() {
        let out = SynthesizeRole.offline(&synth_input()).unwrap();
        assert_eq!(
            out.paths[0],
            "you: Interstellar —shared topic→ another user: Interstellar —intent progression→ another user: The Martian"
        );
        assert!(out.summary.contains("0 1-hop and 1 2-hop"));
    }
}
