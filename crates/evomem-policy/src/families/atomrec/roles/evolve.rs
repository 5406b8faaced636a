//! `atomrec_evolve` (§2.5, m_j* ← LM_Mem(m_n ‖ m_j ‖ M_near ‖ P_evolve)):
//! field-level refinement of a neighbour in the light of a new note, and
//! the update of its links L_j* to other members of M_near.

use super::link::{category_overlap, facet_set, jaccard};
use super::to_json;
use crate::atomrec::note::{NoteView, MAX_KEYWORDS, MAX_TAGS};
use crate::atomrec::relation::Relation;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// M_near: the new note's other neighbours (the target left out), each
    /// with its relation to the target.
    #[serde(default)]
    pub near: Vec<NearNote>,
    /// Typed relations (`false`: new links are `similar`).
    #[serde(default)]
    pub typed: bool,
    /// Most links the target may gain (`evo_links`; 0 = links are not
    /// evolved).
    #[serde(default)]
    pub max_links: usize,
    /// Least cosine with the target for a new link (τ_evo).
    #[serde(default)]
    pub min_similarity: f32,
}

/// One member of M_near as the evolve role sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NearNote {
    /// Position in M_near (the id the model answers with).
    pub index: usize,
    /// The note (other users' notes are shown without owner); shared, as
    /// the same M_near goes to every neighbour a new note evolves.
    pub note: Arc<NoteView>,
    /// Cosine with the target note m_j.
    pub target_similarity: f32,
    /// Same owner as the target (false for item notes).
    pub same_owner: bool,
    /// About the same item as the target.
    pub same_item: bool,
    /// An item note.
    pub item_note: bool,
    /// Already linked with the target, in either direction.
    pub linked: bool,
}

impl NearNote {
    /// How the prompt shows a member of M_near: its content (at most
    /// [`NEAR_CONTENT_CHARS`] characters), not its keywords, tags and
    /// context. Twenty full notes per evolve call would multiply the evolve
    /// prompt about six-fold; the content names the item and the rating,
    /// which is what a link is about.
    pub fn compact(&self) -> serde_json::Value {
        let content: String = self.note.content.chars().take(NEAR_CONTENT_CHARS).collect();
        serde_json::json!({
            "index": self.index,
            "content": content,
            "target_similarity": (f64::from(self.target_similarity) * 1000.0).round() / 1000.0,
            "same_owner": self.same_owner,
            "same_item": self.same_item,
            "item_note": self.item_note,
            "linked": self.linked,
        })
    }
}

/// Most characters of a near note's content in the evolve prompt.
pub const NEAR_CONTENT_CHARS: usize = 120;

/// One link L_j* gains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvolveLink {
    /// [`NearNote::index`] of the other end.
    pub index: usize,
    /// Relation (on the wire, its string).
    pub relation: Relation,
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
    /// New links of m_j (L_j* = L_j ∪ these), at most `max_links`.
    #[serde(default)]
    pub links: Vec<EvolveLink>,
}

/// `atomrec_evolve`: field-level refinement of a neighbour.
///
/// Offline algorithm: keywords the two notes share move to the front
/// (strengthened), then up to two new keywords of m_n are appended, capped at
/// [`MAX_KEYWORDS`]; the first category tag of m_n missing from G_j is added
/// (capped at [`MAX_TAGS`]); the context keeps its base (the text before any
/// `; later:`) and records the latest evidence:
/// `<base>; later: <relation> towards <first keyword(s) of m_n>`.
///
/// Links (L_j*): among the members of M_near not yet linked with m_j whose
/// cosine with m_j exceeds `min_similarity` (τ_evo), the `max_links` closest
/// to m_j gain a link from it. Relation: `shared topic` for the same item;
/// for the same owner `intent progression` when their category tags
/// overlap, else `preference transition`; otherwise by the Jaccard overlap J
/// of keywords ∪ tags as the link role does (J ≥ 0.5 `shared topic`, J > 0
/// `complementary preference`, else `cross-domain transfer`); `similar` when
/// links are untyped. The policy weights each link by that cosine.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvolveRole;

impl Role for EvolveRole {
    type Input = EvolveInput;
    type Output = EvolveOutput;

    fn name(&self) -> &'static str {
        "atomrec_evolve"
    }
    /// Completion limit: 1.25 × the largest per-user mean of the offline answer's
    /// estimated tokens on 100 ml-100k users (104), rounded up to a multiple of 64.
    fn max_tokens(&self) -> Option<u32> {
        Some(192)
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
                .map_or_else(|| "none (similar)".into(), |r| r.to_string()),
        );
        v.insert("similarity".into(), format!("{:.3}", input.similarity));
        v.insert("new_note".into(), to_json(&input.new_note));
        v.insert("target".into(), to_json(&input.target));
        v.insert("max_links".into(), input.max_links.to_string());
        v.insert(
            "relations".into(),
            if input.typed {
                Relation::TYPED.map(|r| r.to_string()).join(", ")
            } else {
                Relation::Similar.to_string()
            },
        );
        v.insert(
            "near".into(),
            if input.near.is_empty() {
                "(none)".into()
            } else {
                input
                    .near
                    .iter()
                    .map(|n| to_json(&n.compact()))
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        );
        v
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object", "required": ["keywords", "tags", "context"],
            "properties": {"keywords": {"type": "array", "items": {"type": "string"}},
                           "tags": {"type": "array", "items": {"type": "string"}},
                           "context": {"type": "string"},
                           "links": {"type": "array", "items": {
                               "type": "object", "required": ["index", "relation"],
                               "properties": {"index": {"type": "integer"},
                                              "relation": {"type": "string"}}}}}
        })
    }
    /// Links must name a listed, not yet linked member of M_near, once;
    /// with untyped links any relation is recorded as `similar`; links past
    /// `max_links` are dropped.
    fn parse(
        &self,
        input: &EvolveInput,
        mut answer: serde_json::Value,
    ) -> Result<EvolveOutput, String> {
        if !input.typed {
            if let Some(links) = answer.get_mut("links").and_then(|l| l.as_array_mut()) {
                for l in links.iter_mut() {
                    if let Some(o) = l.as_object_mut() {
                        o.insert("relation".into(), Relation::Similar.to_string().into());
                    }
                }
            }
        }
        let mut out: EvolveOutput =
            serde_json::from_value(answer).map_err(|e| format!("evolve: {e}"))?;
        if out.context.trim().is_empty() {
            return Err("evolve: empty `context`".into());
        }
        out.keywords.truncate(MAX_KEYWORDS);
        out.tags.truncate(MAX_TAGS);
        let mut seen = std::collections::BTreeSet::new();
        for l in &out.links {
            let Some(n) = input.near.iter().find(|n| n.index == l.index) else {
                return Err(format!("evolve: link index {} is not in M_near", l.index));
            };
            if n.linked {
                return Err(format!("evolve: note {} is already linked", l.index));
            }
            if input.typed && !Relation::TYPED.contains(&l.relation) {
                return Err(format!(
                    "evolve: relation `{}` is not a typed relation",
                    l.relation
                ));
            }
            if !seen.insert(l.index) {
                return Err(format!("evolve: link index {} repeated", l.index));
            }
        }
        out.links.truncate(input.max_links);
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
            links: offline_links(input),
        })
    }
}

/// The offline choice of L_j*'s new links (see [`EvolveRole`]).
fn offline_links(input: &EvolveInput) -> Vec<EvolveLink> {
    let mut pool: Vec<&NearNote> = input
        .near
        .iter()
        .filter(|n| !n.linked && n.target_similarity > input.min_similarity)
        .collect();
    pool.sort_by(|a, b| {
        b.target_similarity
            .total_cmp(&a.target_similarity)
            .then(a.index.cmp(&b.index))
    });
    let me = facet_set(&input.target);
    pool.into_iter()
        .take(input.max_links)
        .map(|n| {
            let relation = if !input.typed {
                Relation::Similar
            } else if n.same_item {
                Relation::SharedTopic
            } else if n.same_owner {
                if category_overlap(&input.target, &n.note) {
                    Relation::IntentProgression
                } else {
                    Relation::PreferenceTransition
                }
            } else {
                let j = jaccard(&me, &facet_set(&n.note));
                if j >= 0.5 {
                    Relation::SharedTopic
                } else if j > 0.0 {
                    Relation::ComplementaryPreference
                } else {
                    Relation::CrossDomainTransfer
                }
            };
            EvolveLink {
                index: n.index,
                relation,
            }
        })
        .collect()
}

/// Most keywords and tags of a note shown in, and asked of, the batched
/// evolve prompt (the single prompt allows [`MAX_KEYWORDS`] and
/// [`MAX_TAGS`]; a dozen of each per note would triple the batch). With
/// [`BATCH_FIELD_CHARS`] and [`BATCH_CONTEXT_CHARS`] they bound an answer to
/// what fits [`evomem_kit::Batchable::item_max_tokens`]: SmolLM2 under the
/// schema fills every array to its limit and pretty-prints, and with six
/// keywords, five tags of 24 characters and a 160-character context its
/// answers ran past their 64 tokens, were cut off, and failed to parse
/// (27 of 33 batches on the first 50-user llama-server run).
pub const BATCH_KEYWORDS: usize = 4;
/// See [`BATCH_KEYWORDS`].
pub const BATCH_TAGS: usize = 3;
/// Most characters of one batched keyword or tag.
pub const BATCH_FIELD_CHARS: usize = 16;
/// Most characters of a batched context sentence.
pub const BATCH_CONTEXT_CHARS: usize = 80;

/// `atomrec_evolve_batch` (`budget=lean`): several older notes per call,
/// each one line with its fields and one indented line with the new note
/// that reached it (relation and cosine). Links are not evolved in this mode
/// (the policy sends no M_near), so the answer has fields only. The offline
/// algorithm is [`EvolveRole`]'s, note by note.
impl evomem_kit::Batchable for EvolveRole {
    fn batch_name(&self) -> &'static str {
        "atomrec_evolve_batch"
    }
    fn batch_template(&self) -> &'static str {
        include_str!("../../../../prompts/atomrec_evolve_batch.md")
    }
    fn item_text(&self, input: &EvolveInput) -> String {
        let t = &input.target;
        format!(
            "{} | keywords: {} | tags: {} | context: {}\n  new note ({}, s {:.2}): {}",
            super::link::short_content(t),
            t.keywords
                .iter()
                .take(BATCH_KEYWORDS)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            t.tags
                .iter()
                .take(BATCH_TAGS)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            t.context,
            input
                .relation
                .map_or_else(|| "similar".to_string(), |r| r.to_string()),
            input.similarity,
            super::link::short_content(&input.new_note)
        )
    }
    fn batch_variables(&self, _items: &[EvolveInput]) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("max_keywords".to_string(), BATCH_KEYWORDS.to_string()),
            ("max_tags".to_string(), BATCH_TAGS.to_string()),
        ])
    }
    fn item_schema(&self, _items: &[EvolveInput]) -> serde_json::Value {
        serde_json::json!({
            "type": "object", "required": ["keywords", "tags", "context"],
            "additionalProperties": false,
            "properties": {"keywords": {"type": "array", "maxItems": BATCH_KEYWORDS,
                                        "items": {"type": "string", "minLength": 1, "maxLength": BATCH_FIELD_CHARS}},
                           "tags": {"type": "array", "maxItems": BATCH_TAGS,
                                    "items": {"type": "string", "minLength": 1, "maxLength": BATCH_FIELD_CHARS}},
                           "context": {"type": "string", "minLength": 1, "maxLength": BATCH_CONTEXT_CHARS}}
        })
    }
    /// The longest answer the schema allows is about 77 tokens written
    /// compactly (seven strings of 16 characters, an 80-character context,
    /// keys and brackets); the rest is room for the line breaks and
    /// indentation a small model puts between them.
    fn item_max_tokens(&self) -> u32 {
        96
    }
}
