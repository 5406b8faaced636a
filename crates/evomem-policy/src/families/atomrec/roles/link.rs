//! `atomrec_link` (§2.4, L_n ← LM_Mem(m_n ‖ M_near ‖ P_link)): which of the
//! top-k_link neighbours a new note links to, and with which [`Relation`].
//!
//! The prompt has two variants, chosen by [`LinkInput::typed`]: typed links
//! name one of the five relations of §2.4; embedding-only links
//! (`typed=false`) are all `similar`, the prompt says so, and [`LinkRole`]'s
//! parse records every answered link as `similar` whatever relation the model
//! wrote. The few phrases that differ are the constants below (the prompt
//! file has no conditionals); both rendered variants have snapshot tests.

use super::to_json;
use crate::atomrec::note::NoteView;
use crate::atomrec::relation::Relation;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// `{{relation_task}}`, `{{relation_rule}}` and `{{preference}}` of the
/// prompt with typed relations.
const TYPED_PHRASES: [&str; 3] = [
    "name the semantic relation of each link",
    "Allowed relations (use the exact words):",
    "Prefer links that explain a preference: the same item seen by another user,\n  a step in the user's current intent, a change of taste, a shared theme.",
];

/// The same phrases for embedding-only links (`typed=false`).
const UNTYPED_PHRASES: [&str; 3] = [
    "give every link the relation `similar` (links are untyped)",
    "Links are untyped (embedding-only); the only allowed relation is:",
    "Prefer the neighbours closest in meaning to the new note; do not classify how they relate.",
];

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
    /// Relation (on the wire, its string: `"shared topic"`, ...).
    pub relation: Relation,
    /// Weight in [0, 1].
    pub weight: f32,
}

/// Output of [`LinkRole`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkOutput {
    /// Links L_n.
    pub links: Vec<LinkChoice>,
}

/// An answer to the untyped prompt: relations are not read.
#[derive(Debug, Deserialize)]
struct UntypedAnswer {
    links: Vec<UntypedChoice>,
}

/// One link of an [`UntypedAnswer`].
#[derive(Debug, Deserialize)]
struct UntypedChoice {
    index: usize,
    weight: f32,
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

pub(super) fn facet_set(n: &NoteView) -> BTreeSet<&str> {
    n.keywords
        .iter()
        .chain(n.tags.iter())
        .map(String::as_str)
        .filter(|t| !matches!(*t, "liked" | "disliked" | "neutral"))
        .collect()
}

pub(super) fn jaccard(a: &BTreeSet<&str>, b: &BTreeSet<&str>) -> f32 {
    let inter = a.intersection(b).count();
    let uni = a.union(b).count();
    if uni == 0 {
        0.0
    } else {
        inter as f32 / uni as f32
    }
}

pub(super) fn sentiment_of(n: &NoteView) -> Option<&str> {
    n.tags
        .iter()
        .map(String::as_str)
        .find(|t| matches!(*t, "liked" | "disliked" | "neutral"))
}

pub(super) fn category_overlap(a: &NoteView, b: &NoteView) -> bool {
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
    /// Completion limit: 1.25 × the largest per-user mean of the offline answer's
    /// estimated tokens on 100 ml-100k users (169), rounded up to a multiple of 64.
    fn max_tokens(&self) -> Option<u32> {
        Some(256)
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/atomrec_link.md")
    }
    fn variables(&self, input: &LinkInput) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        let (relations, [task, rule, preference]) = if input.typed {
            (
                Relation::TYPED.map(|r| format!("- {r}")).join("\n"),
                TYPED_PHRASES,
            )
        } else {
            (format!("- {}", Relation::Similar), UNTYPED_PHRASES)
        };
        v.insert("relations".into(), relations);
        v.insert("relation_task".into(), task.into());
        v.insert("relation_rule".into(), rule.into());
        v.insert("preference".into(), preference.into());
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
    /// Typed: every relation must be one of the five typed ones. Untyped:
    /// the relation may be any string (or missing) and is recorded as
    /// `similar`.
    fn parse(&self, input: &LinkInput, answer: serde_json::Value) -> Result<LinkOutput, String> {
        let out: LinkOutput = if input.typed {
            let out: LinkOutput =
                serde_json::from_value(answer).map_err(|e| format!("links: {e}"))?;
            if let Some(l) = out
                .links
                .iter()
                .find(|l| !Relation::TYPED.contains(&l.relation))
            {
                return Err(format!(
                    "links: relation `{}` is not a typed relation",
                    l.relation
                ));
            }
            out
        } else {
            let raw: UntypedAnswer =
                serde_json::from_value(answer).map_err(|e| format!("links: {e}"))?;
            LinkOutput {
                links: raw
                    .links
                    .into_iter()
                    .map(|l| LinkChoice {
                        index: l.index,
                        relation: Relation::Similar,
                        weight: l.weight,
                    })
                    .collect(),
            }
        };
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
                    relation: Relation::Similar,
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
                    relation: Relation::SharedTopic,
                    weight: w(n.similarity),
                });
            } else if n.same_item {
                let rel = if sentiment_of(&n.note) == my_sent {
                    Relation::SharedTopic
                } else {
                    Relation::ComplementaryPreference
                };
                links.push(LinkChoice {
                    index: n.index,
                    relation: rel,
                    weight: w(n.similarity),
                });
            } else if n.same_user && n.steps_back.is_some_and(|s| s <= 5) {
                let rel = if category_overlap(&input.note, &n.note) {
                    Relation::IntentProgression
                } else {
                    Relation::PreferenceTransition
                };
                let steps = n.steps_back.unwrap_or(1).max(1) as f32;
                links.push(LinkChoice {
                    index: n.index,
                    relation: rel,
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
                Relation::SharedTopic
            } else if j > 0.0 {
                Relation::ComplementaryPreference
            } else {
                Relation::CrossDomainTransfer
            };
            links.push(LinkChoice {
                index: n.index,
                relation: rel,
                weight: w(n.similarity),
            });
        }
        links.sort_by_key(|l| l.index);
        Ok(LinkOutput { links })
    }
}

/// Most characters of a note's content in the batched prompts.
pub const BATCH_CONTENT_CHARS: usize = 90;

/// A note's content cut to [`BATCH_CONTENT_CHARS`] characters.
pub(crate) fn short_content(n: &NoteView) -> String {
    crate::atomrec::note::prompt_content(&n.content)
        .chars()
        .take(BATCH_CONTENT_CHARS)
        .collect()
}

/// The most links one batched answer may hold: the largest over the batch
/// of a note's own limit, and never more than its listed neighbours (links
/// name distinct neighbours). SmolLM2 under the schema fills every array to
/// its limit; with the limit at `max_links` (10 by default) against two or
/// three neighbours it repeated the same index until the answer was cut off
/// (49 of 50 batches malformed on the first 50-user llama-server run).
pub(crate) fn batch_max_links(items: &[LinkInput]) -> usize {
    items
        .iter()
        .map(|i| i.max_links.min(i.neighbours.len()))
        .max()
        .unwrap_or(0)
}

/// `atomrec_link_batch` (`budget=lean`): several new notes per call. Each
/// note is one line (its content; the tags repeat it and are left out) and
/// each neighbour one indented line: its content, its
/// cosine, and what it is to the new note (the same item, an item note, the
/// user's own note and how many steps back). The answer omits link weights:
/// the policy weighs a batched link by its cosine, as the offline algorithm
/// does. The offline algorithm is [`LinkRole`]'s, note by note.
impl evomem_kit::Batchable for LinkRole {
    fn batch_name(&self) -> &'static str {
        "atomrec_link_batch"
    }
    fn batch_template(&self) -> &'static str {
        include_str!("../../../../prompts/atomrec_link_batch.md")
    }
    fn item_text(&self, input: &LinkInput) -> String {
        let mut s = short_content(&input.note);
        for n in &input.neighbours {
            let mut what = Vec::new();
            if n.item_note {
                what.push("item note".to_string());
            }
            if n.same_item && !n.item_note {
                what.push("same item".to_string());
            }
            match (n.same_user, n.steps_back) {
                (true, Some(b)) => what.push(format!("yours, {b} back")),
                (true, None) => what.push("yours".to_string()),
                (false, _) if !n.item_note => what.push("other user".to_string()),
                _ => {}
            }
            s.push_str(&format!(
                "\n  {}) {} ({:.2}, {})",
                n.index,
                short_content(&n.note),
                n.similarity,
                what.join(", ")
            ));
        }
        s
    }
    fn batch_variables(&self, items: &[LinkInput]) -> BTreeMap<String, String> {
        let typed = items.first().is_none_or(|i| i.typed);
        let max_links = batch_max_links(items);
        let relations = if typed {
            Relation::TYPED.map(|r| r.to_string()).join(", ")
        } else {
            Relation::Similar.to_string()
        };
        BTreeMap::from([
            ("relations".to_string(), relations),
            ("max_links".to_string(), max_links.to_string()),
        ])
    }
    fn item_schema(&self, items: &[LinkInput]) -> serde_json::Value {
        let max_index = items
            .iter()
            .map(|i| i.neighbours.len().saturating_sub(1))
            .max()
            .unwrap_or(0);
        let max_links = batch_max_links(items);
        let typed = items.first().is_none_or(|i| i.typed);
        let relations: Vec<String> = if typed {
            Relation::TYPED.iter().map(|r| r.to_string()).collect()
        } else {
            vec![Relation::Similar.to_string()]
        };
        serde_json::json!({
            "type": "object",
            "required": ["links"],
            "additionalProperties": false,
            "properties": {"links": {"type": "array", "maxItems": max_links, "items": {
                "type": "object", "required": ["index", "relation"],
                "additionalProperties": false,
                "properties": {"index": {"type": "integer", "minimum": 0, "maximum": max_index},
                               "relation": {"type": "string", "enum": relations}}}}}
        })
    }
    /// About 15 SmolLM2 tokens per link and 7 for the brackets: three links
    /// per note (the most the pre-filter usually leaves) take 52, and the
    /// rest is room for line breaks. At 40, and then 48, most batches of
    /// four notes were cut off at the limit and needed a repair turn.
    fn item_max_tokens(&self) -> u32 {
        64
    }
    /// A link without a weight gets its neighbour's cosine clamped to [0, 1].
    /// A neighbour named again after its first link is dropped (a repeat
    /// says nothing new; small models repeat an index to fill the array),
    /// and the fix is counted as a parser repair.
    fn parse_item(
        &self,
        input: &LinkInput,
        mut answer: serde_json::Value,
    ) -> Result<LinkOutput, String> {
        if let Some(links) = answer.get_mut("links").and_then(|l| l.as_array_mut()) {
            let mut seen = std::collections::BTreeSet::new();
            let before = links.len();
            links.retain(
                |l| match l.get("index").and_then(serde_json::Value::as_u64) {
                    Some(i) => seen.insert(i),
                    None => true,
                },
            );
            if links.len() < before {
                evomem_llm::note_parser_repair();
            }
            for l in links.iter_mut() {
                let Some(o) = l.as_object_mut() else { continue };
                if o.contains_key("weight") {
                    continue;
                }
                let s = o
                    .get("index")
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|i| input.neighbours.get(i as usize))
                    .map_or(0.0, |n| n.similarity.clamp(0.0, 1.0));
                o.insert("weight".into(), serde_json::json!(s));
            }
        }
        self.parse(input, answer)
    }
}
