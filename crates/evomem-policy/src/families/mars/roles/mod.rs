//! The four MARS LLM roles (π_ext, π_syn, π_plan of §3.3, and the one-time
//! category derivation of the Appendix), one file each, each with a prompt
//! file, a JSON schema, a validating parser and a deterministic offline
//! algorithm. This module holds what they share: the signal and chunk views
//! the prompts show, their prompt lines, and the answer-reading helpers.
//!
//! | role | prompt | offline algorithm |
//! |---|---|---|
//! | `mars_extract` ([`extract`]) | `prompts/mars_extract.md` | facet counting: new chunks for facets with ≥ `min_support` positive pending signals (best by support × IDF, ≤ K_cat per category); boost chunks whose facet recurs; demote chunks hit by negative signals or passed over by ≥ `shift_min` positive signals of their category |
//! | `mars_synthesize` ([`synthesize`]) | `prompts/mars_synthesize.md` | template narrative from the strongest chunks per category, fading and disliked ones, and recent events |
//! | `mars_plan` ([`plan`]) | `prompts/mars_plan.md` | rule list over pending volume, conflicts, novelty, FIFO pressure and the mutation counter; names targets: boost/demote = the offline extractor's assessments, merge = the weaker of each near-duplicate pair, forget = chunks under the forget rule |
//! | `mars_extract_brief`, `mars_synthesize_brief` ([`brief`], `budget=paper`) | `prompts/mars_*_brief.md` | those of `mars_extract` and `mars_synthesize` |
//! | `mars_categories` ([`categories`]) | `prompts/mars_categories.md` | metadata axes ranked by coverage × distinctness (see [`super::categories`]) |

pub mod brief;
pub mod categories;
pub mod extract;
pub mod plan;
pub mod synthesize;

pub use brief::{BriefExtractRole, BriefSynthesizeRole};
pub use categories::{CategoriesInput, CategoriesOutput, CategoriesRole, SampleItem};
pub use extract::{
    offline_assess, offline_extract, Assessment, ExtractInput, ExtractOutput, ExtractRole, NewChunk,
};
pub use plan::{offline_plan, PlanInput, PlanOutput, PlanRole, TARGETED};
pub use synthesize::{offline_profile, SynthesizeInput, SynthesizeOutput, SynthesizeRole};

use super::categories::CategoryDef;
use super::polarity::Polarity;
use serde::{Deserialize, Serialize};

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
    /// Polarity (serialized as +1, 0, −1).
    pub polarity: Polarity,
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

pub(super) fn signal_line(s: &SignalIn) -> String {
    let pol = match s.polarity {
        Polarity::Positive => "liked",
        Polarity::Negative => "disliked",
        Polarity::Neutral => "neutral",
    };
    let facets: Vec<String> = s
        .facets
        .iter()
        .map(|f| format!("{}={}", f.category, f.value))
        .collect();
    format!("- t{} {pol}: {} ({})", s.time, s.item, facets.join("; "))
}

pub(super) fn chunk_line(c: &ChunkIn) -> String {
    format!(
        "- {} [{}] \"{}\" strength={:.2} evidence={}",
        c.id, c.category, c.text, c.strength, c.evidence
    )
}

pub(super) fn categories_block(cats: &[CategoryDef]) -> String {
    cats.iter()
        .map(|c| format!("- {}: {}", c.name, c.description))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(super) fn lines<T>(v: &[T], f: impl Fn(&T) -> String) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.iter().map(f).collect::<Vec<_>>().join("\n")
    }
}

pub(super) fn obj(
    answer: &serde_json::Value,
) -> Result<&serde_json::Map<String, serde_json::Value>, String> {
    answer
        .as_object()
        .ok_or_else(|| "answer is not a JSON object".to_string())
}

pub(super) fn arr<'a>(
    o: &'a serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Result<Vec<&'a serde_json::Value>, String> {
    match o.get(key) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(a)) => Ok(a.iter().collect()),
        Some(_) => Err(format!("field `{key}` is not an array")),
    }
}

pub(super) fn str_field<'a>(
    v: &'a serde_json::Value,
    key: &str,
    ctx: &str,
) -> Result<&'a str, String> {
    v.get(key)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{ctx}: missing or empty string field `{key}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mars::categories::AxisKind;
    use crate::mars::lifecycle::Lifecycle;
    use evomem_core::Role;
    use serde_json::json;
    use std::collections::BTreeMap;

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

    fn sig(t: u64, title: &str, pol: Polarity, genre: &str, era: &str) -> SignalIn {
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
                sig(10, "Fargo", Polarity::Positive, "Crime", "1990s"),
                sig(11, "Heat", Polarity::Positive, "Crime", "1990s"),
                sig(12, "Clueless", Polarity::Negative, "Comedy", "1990s"),
                sig(13, "Se7en", Polarity::Positive, "Crime", "1990s"),
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
        let input = offline_plan_input();
        let p = offline_plan(&input);
        assert!(p.actions.contains(&Lifecycle::Demote), "{p:?}");
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
    fn plan_schema_and_answers_use_the_lifecycle_strings() {
        let schema = PlanRole.schema();
        let items = &schema["properties"]["actions"]["items"]["anyOf"];
        assert_eq!(items[0]["enum"], items[1]["properties"]["op"]["enum"]);
        assert_eq!(
            items[0]["enum"],
            json!([
                "extract",
                "boost",
                "demote",
                "merge",
                "forget",
                "synthesize",
                "wait"
            ])
        );
        let out = PlanRole
            .parse(
                &offline_plan_input(),
                json!({"actions": ["merge", "wait", "boost", "merge"], "reason": "r"}),
            )
            .unwrap();
        assert_eq!(out.actions, vec![Lifecycle::Merge, Lifecycle::Boost]);
        assert_eq!(
            serde_json::to_string(&out).unwrap(),
            r#"{"actions":["merge","boost"],"reason":"r"}"#
        );
        assert_eq!(
            serde_json::to_value(offline_plan(&offline_plan_input())).unwrap()["actions"],
            json!(["extract", "boost", "demote", "forget"])
        );
    }

    #[test]
    fn plan_answers_with_targets_resolve_to_chunk_ids() {
        let input = offline_plan_input();
        let out = PlanRole
            .parse(
                &input,
                json!({"actions": [
                    {"op": "demote", "targets": ["comedy"]},
                    "extract",
                    {"op": "forget", "targets": ["user:7:chunk:b", "user:7:chunk:b"]},
                    {"op": "merge"},
                    {"op": "synthesize", "targets": ["anything"]}],
                    "reason": "shift"}),
            )
            .unwrap();
        assert_eq!(
            out.actions,
            vec![
                Lifecycle::Demote,
                Lifecycle::Extract,
                Lifecycle::Forget,
                Lifecycle::Merge,
                Lifecycle::Synthesize
            ]
        );
        assert_eq!(
            out.targets,
            BTreeMap::from([
                (Lifecycle::Demote, vec!["user:7:chunk:a".to_string()]),
                (Lifecycle::Forget, vec!["user:7:chunk:b".to_string()]),
            ])
        );
        assert_eq!(
            serde_json::to_value(&out).unwrap()["targets"],
            json!({"demote": ["user:7:chunk:a"], "forget": ["user:7:chunk:b"]})
        );
        // A target that names no chunk, or a chunk both boosted and demoted.
        let err = PlanRole
            .parse(
                &input,
                json!({"actions": [{"op": "demote", "targets": ["Churchill"]}]}),
            )
            .unwrap_err();
        assert!(err.contains("Churchill"), "{err}");
        assert!(PlanRole
            .parse(
                &input,
                json!({"actions": [{"op": "boost", "targets": ["Comedy"]},
                                   {"op": "demote", "targets": ["user:7:chunk:a"]}]})
            )
            .is_err());
        assert!(PlanRole
            .parse(&input, json!({"actions": [{"targets": []}]}))
            .is_err());
    }

    #[test]
    fn offline_plan_names_its_targets() {
        let mut input = offline_plan_input();
        input.chunks.push(ChunkIn {
            id: "user:7:chunk:c".into(),
            category: "genre".into(),
            text: "Crime".into(),
            axis: Some(0),
            value: Some("Crime".into()),
            strength: 0.6,
            evidence: 2,
        });
        input.chunks.push(ChunkIn {
            id: "user:7:chunk:d".into(),
            category: "genre".into(),
            text: "Musical".into(),
            axis: Some(0),
            value: Some("Musical".into()),
            strength: 0.2,
            evidence: 4,
        });
        input.duplicate_pairs = vec![("user:7:chunk:b".into(), "user:7:chunk:c".into())];
        input.duplicates = 1;
        let p = offline_plan(&input);
        let t = |a: Lifecycle| p.targets.get(&a).cloned().unwrap_or_default();
        // Crime is liked three times; Comedy disliked; Western and Musical are
        // passed over by three liked genre signals (a shift).
        assert_eq!(t(Lifecycle::Boost), vec!["user:7:chunk:c"]);
        assert_eq!(
            t(Lifecycle::Demote),
            vec!["user:7:chunk:a", "user:7:chunk:b", "user:7:chunk:d"]
        );
        assert_eq!(t(Lifecycle::Merge), vec!["user:7:chunk:b"]);
        assert_eq!(t(Lifecycle::Forget), vec!["user:7:chunk:d"]);
        // What the planner names, its own parser accepts unchanged.
        let answer = json!({
            "actions": p.actions.iter().map(|a| json!({"op": a, "targets": p.targets.get(a)}))
                .collect::<Vec<_>>(),
            "reason": p.reason,
        });
        assert_eq!(PlanRole.parse(&input, answer).unwrap(), p);
        // Waiting names nothing.
        let waiting = PlanInput {
            pending: vec![],
            ..input
        };
        assert!(offline_plan(&waiting).targets.is_empty());
    }

    #[test]
    fn signals_serialize_polarity_as_a_number() {
        let v = serde_json::to_value(extract_input().pending).unwrap();
        let pols: Vec<i64> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["polarity"].as_i64().unwrap())
            .collect();
        assert_eq!(pols, vec![1, 1, -1, 1]);
    }

    #[test]
    fn prompt_snapshots() {
        insta::assert_snapshot!("mars_extract", render(&ExtractRole, &extract_input()));
        let syn = synth_input(&extract_input(), 300);
        insta::assert_snapshot!("mars_synthesize", render(&SynthesizeRole, &syn));
        insta::assert_snapshot!("mars_synthesize_offline", offline_profile(&syn));
        let plan = offline_plan_input();
        insta::assert_snapshot!("mars_plan", render(&PlanRole, &plan));
        // The variant with near-duplicate pairs to name as merge targets.
        let dup = PlanInput {
            duplicates: 1,
            duplicate_pairs: vec![("user:7:chunk:b".into(), "user:7:chunk:a".into())],
            ..plan.clone()
        };
        insta::assert_snapshot!("mars_plan_duplicates", render(&PlanRole, &dup));
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
        // The bounded schema accepts the offline answer and refuses more
        // categories than asked for.
        let bounded = CategoriesRole.schema_for(&ci);
        let off = serde_json::to_value(CategoriesRole.offline(&ci).unwrap()).unwrap();
        let wire = serde_json::json!({"categories": off["categories"].as_array().unwrap().iter()
            .map(|c| serde_json::json!({"name": c["name"], "description": c["description"]}))
            .collect::<Vec<_>>()});
        evomem_llm::json::validate(&bounded, &wire).unwrap();
        let seven = serde_json::json!({"categories": vec![serde_json::json!({"name": "a", "description": "b"}); 7]});
        assert!(evomem_llm::json::validate(&bounded, &seven).is_err());
    }

    /// A synthesis of `ext`'s chunks and signals for user 7.
    fn synth_input(ext: &ExtractInput, max_words: usize) -> SynthesizeInput {
        SynthesizeInput {
            user: "7".into(),
            categories: cats(),
            chunks: ext.chunks.clone(),
            recent: ext.pending.clone(),
            previous: None,
            max_words,
        }
    }

    /// A profile far over its word limit is cut at the limit (a parser
    /// repair) instead of failing the answer; one within 1.5 × is kept.
    #[test]
    fn an_overlong_profile_is_cut_at_the_word_limit() {
        let syn = synth_input(&extract_input(), 10);
        let long = vec!["(2) 2022"; 20].join(" ");
        let out = SynthesizeRole
            .parse(&syn, serde_json::json!({ "profile": long }))
            .unwrap();
        assert_eq!(out.profile.split_whitespace().count(), 10);
        let ok = vec!["word"; 14].join(" ");
        let out = SynthesizeRole
            .parse(&syn, serde_json::json!({ "profile": ok.clone() }))
            .unwrap();
        assert_eq!(out.profile, ok);
    }

    /// A category with several values is named once in a brief signal line.
    #[test]
    fn brief_signal_line_groups_a_categorys_values() {
        let mut s = sig(12, "Fargo", Polarity::Positive, "Crime", "1990s");
        s.facets.insert(
            1,
            FacetIn {
                category: "genre".into(),
                axis: 0,
                value: "Thriller".into(),
                idf: 0.5,
            },
        );
        assert_eq!(
            brief::brief_signal_line(&s),
            "t12 + Fargo (genre=Crime, Thriller; era=1990s)"
        );
    }

    #[test]
    fn brief_prompt_snapshots_and_shared_answers() {
        let ext = extract_input();
        insta::assert_snapshot!("mars_extract_brief", render(&BriefExtractRole, &ext));
        let syn = synth_input(&ext, 80);
        insta::assert_snapshot!("mars_synthesize_brief", render(&BriefSynthesizeRole, &syn));
        // Same schema, parser and offline answer as the full prompts; a
        // bounded schema that still accepts the offline answer, a smaller
        // limit and a shorter prompt.
        assert_eq!(BriefExtractRole.schema(), ExtractRole.schema());
        let off = BriefExtractRole.offline(&ext).unwrap();
        assert_eq!(off, ExtractRole.offline(&ext).unwrap());
        let bounded = BriefExtractRole.schema_for(&ext);
        let answer = serde_json::to_value(&off).unwrap();
        let mut wire = serde_json::json!({"new_chunks": [], "boosts": [], "demotes": []});
        for (k, v) in [
            ("new_chunks", &answer["new_chunks"]),
            ("boosts", &answer["boosts"]),
            ("demotes", &answer["demotes"]),
        ] {
            let items: Vec<serde_json::Value> = v
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut c| {
                    let o = c.as_object_mut().unwrap();
                    o.retain(|key, val| {
                        !val.is_null()
                            && ["category", "text", "strength", "sources", "chunk"]
                                .contains(&key.as_str())
                    });
                    c
                })
                .collect();
            wire[k] = serde_json::Value::Array(items);
        }
        evomem_llm::json::validate(&bounded, &wire).unwrap_or_else(|e| panic!("{e}: {wire}"));
        let too_long = serde_json::json!({"new_chunks": [{"category": ext.categories[0].name, "text": "x".repeat(super::brief::BRIEF_CHUNK_CHARS + 1), "strength": 0.5}], "boosts": [], "demotes": []});
        assert!(evomem_llm::json::validate(&bounded, &too_long).is_err());
        assert!(BriefExtractRole.max_tokens() < ExtractRole.max_tokens());
        // Without chunks there is nothing to boost or demote, and the schema
        // has no empty `enum` (llama-server answers 400 to one).
        let mut fresh = ext.clone();
        fresh.chunks.clear();
        let text = BriefExtractRole.schema_for(&fresh).to_string();
        assert!(!text.contains(r#""enum":[]"#), "{text}");
        evomem_llm::json::validate(
            &BriefExtractRole.schema_for(&fresh),
            &serde_json::json!({"new_chunks": [], "boosts": [], "demotes": []}),
        )
        .unwrap();
        assert_eq!(
            BriefSynthesizeRole.offline(&syn).unwrap(),
            SynthesizeRole.offline(&syn).unwrap()
        );
        let profile = serde_json::to_value(BriefSynthesizeRole.offline(&syn).unwrap()).unwrap();
        evomem_llm::json::validate(
            &BriefSynthesizeRole.schema_for(&syn),
            &serde_json::json!({"profile": profile["profile"]}),
        )
        .unwrap();
        assert!(BriefSynthesizeRole.max_tokens() < SynthesizeRole.max_tokens());
        assert!(render(&BriefExtractRole, &ext).len() < render(&ExtractRole, &ext).len());
        assert!(render(&BriefSynthesizeRole, &syn).len() < render(&SynthesizeRole, &syn).len());
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
            duplicate_pairs: Vec::new(),
            forget_below: 0.35,
            forget_min_evidence: 2,
            shift_min: 3,
            mutations: 2,
            gamma: 5,
            has_profile: true,
            b: 5,
        }
    }
}
