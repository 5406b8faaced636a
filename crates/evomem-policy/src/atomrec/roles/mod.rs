//! The three LLM roles of AtomRec's memory agent LM_Mem, one file each, each
//! with a prompt file and a documented, deterministic offline algorithm:
//!
//! - [`LinkRole`] (`atomrec_link`, §2.4, L_n ← LM_Mem(m_n ‖ M_near ‖ P_link));
//! - [`EvolveRole`] (`atomrec_evolve`, §2.5, m_j* ← LM_Mem(m_n ‖ m_j ‖ M_near ‖ P_evolve));
//! - [`SynthesizeRole`] (`atomrec_synthesize`, §2.6, M_collab ← LM_Mem(G_sub ‖ P_synth)).
//!
//! The prompt snapshot tests live here, so their snapshot names
//! (`evomem_policy__atomrec__roles__tests__*`) do not depend on the split.

mod evolve;
mod link;
mod synthesize;

pub use evolve::{EvolveInput, EvolveOutput, EvolveRole};
pub use link::{LinkChoice, LinkInput, LinkOutput, LinkRole, Neighbour};
pub use synthesize::{render_path, PathHop, PathView, SynthInput, SynthOutput, SynthesizeRole};

use serde::Serialize;

fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::atomrec::note::NoteView;
    use crate::atomrec::relation::Relation;
    use evomem_core::Role;
    use std::collections::BTreeMap;

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
            keywords: crate::atomrec::note::keywords_of(content),
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
        assert!(out.links.iter().all(|l| l.relation == Relation::Similar));
    }

    #[test]
    fn link_parse_rejects_out_of_range_index() {
        let i = link_input();
        let err = LinkRole
            .parse(&i, serde_json::json!({"links": [{"index": 9, "relation": "shared topic", "weight": 0.5}]}))
            .unwrap_err();
        assert!(err.contains("index 9"), "{err}");
    }

    /// Regression: with `typed=false` a model's answer still carried typed
    /// relations; the untyped parse records every link as `similar`.
    #[test]
    fn link_parse_untyped_forces_similar() {
        let mut i = link_input();
        i.typed = false;
        let out = LinkRole
            .parse(
                &i,
                serde_json::json!({"links": [
                    {"index": 0, "relation": "shared topic", "weight": 0.9},
                    {"index": 2, "relation": "related", "weight": 0.5},
                    {"index": 3, "weight": 0.2}
                ]}),
            )
            .unwrap();
        assert_eq!(out.links.len(), 3);
        assert!(out.links.iter().all(|l| l.relation == Relation::Similar));
        let vars = LinkRole.variables(&i);
        assert_eq!(vars["relations"], "- similar");
    }

    #[test]
    fn link_parse_typed_rejects_similar() {
        let err = LinkRole
            .parse(
                &link_input(),
                serde_json::json!({"links": [{"index": 0, "relation": "similar", "weight": 0.5}]}),
            )
            .unwrap_err();
        assert!(err.contains("not a typed relation"), "{err}");
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
            relation: Some(Relation::PreferenceTransition),
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
        let untyped = LinkInput {
            typed: false,
            ..l.clone()
        };
        insta::assert_snapshot!(
            "atomrec_link_untyped",
            render(LinkRole.template(), &LinkRole.variables(&untyped))
        );
        let e = EvolveInput {
            new_note: l.note.clone(),
            target: l.neighbours[2].note.clone(),
            relation: Some(Relation::IntentProgression),
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
