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

pub use evolve::{EvolveInput, EvolveLink, EvolveOutput, EvolveRole, NearNote};
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
            near: Vec::new(),
            typed: true,
            max_links: 0,
            min_similarity: 0.7,
        };
        let out = EvolveRole.offline(&inp).unwrap();
        assert_eq!(
            out.context,
            "current intent: sci-fi; later: preference transition towards rated neuromancer"
        );
        assert!(out.tags.contains(&"cyberpunk".to_string()));
        assert_eq!(out.keywords[0], "rated");
    }

    /// The evolve input of `l`'s neighbour 2 (Interstellar, the owner's note)
    /// with the rest of M_near: target similarities chosen so that the
    /// Martian notes and Gravity pass τ_evo = 0.7 and Amelie does not; the
    /// item note is already linked.
    fn evolve_input_with_near(l: &LinkInput) -> EvolveInput {
        let sims = [0.82, 0.78, 0.0, 0.2, 0.75];
        let near = l
            .neighbours
            .iter()
            .filter(|n| n.index != 2)
            .enumerate()
            .map(|(k, n)| NearNote {
                index: k,
                note: std::sync::Arc::new(n.note.clone()),
                target_similarity: sims[n.index],
                same_owner: n.same_user,
                same_item: false,
                item_note: n.item_note,
                linked: n.item_note,
            })
            .collect();
        EvolveInput {
            new_note: l.note.clone(),
            target: l.neighbours[2].note.clone(),
            relation: Some(Relation::IntentProgression),
            similarity: 0.71,
            near,
            typed: true,
            max_links: 2,
            min_similarity: 0.7,
        }
    }

    /// Evolution updates links (§2.5, L_j*): the two closest unlinked
    /// members of M_near above τ_evo, typed by how they relate to the target.
    #[test]
    fn offline_evolve_links_the_closest_unlinked_near_notes() {
        let l = link_input();
        let mut inp = evolve_input_with_near(&l);
        let out = EvolveRole.offline(&inp).unwrap();
        // Near 0 is the (linked) item note; 1 = other user's Martian (0.78),
        // 3 = own Gravity (0.75), 2 = Amelie (below τ).
        let got: Vec<(usize, Relation)> = out.links.iter().map(|l| (l.index, l.relation)).collect();
        assert_eq!(
            got,
            vec![(1, Relation::SharedTopic), (3, Relation::IntentProgression)]
        );
        inp.typed = false;
        let out = EvolveRole.offline(&inp).unwrap();
        assert!(out.links.iter().all(|l| l.relation == Relation::Similar));
        inp.max_links = 0;
        assert!(EvolveRole.offline(&inp).unwrap().links.is_empty());
    }

    /// A model's links must name unlinked members of M_near with a typed
    /// relation; untyped runs record `similar` whatever the model wrote.
    #[test]
    fn evolve_parser_checks_links() {
        let l = link_input();
        let inp = evolve_input_with_near(&l);
        let ans = |links: serde_json::Value| serde_json::json!({"keywords": ["a"], "tags": [], "context": "c", "links": links});
        let ok = EvolveRole
            .parse(
                &inp,
                ans(serde_json::json!([{"index": 1, "relation": "shared topic"}])),
            )
            .unwrap();
        assert_eq!(ok.links.len(), 1);
        for (bad, why) in [
            (
                serde_json::json!([{"index": 9, "relation": "shared topic"}]),
                "not in M_near",
            ),
            (
                serde_json::json!([{"index": 0, "relation": "shared topic"}]),
                "already linked",
            ),
            (
                serde_json::json!([{"index": 1, "relation": "similar"}]),
                "not a typed relation",
            ),
        ] {
            let err = EvolveRole.parse(&inp, ans(bad)).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        // Old-shape answers (no links) still parse.
        let old = EvolveRole
            .parse(
                &inp,
                serde_json::json!({"keywords": [], "tags": [], "context": "c"}),
            )
            .unwrap();
        assert!(old.links.is_empty());
        let mut untyped = inp.clone();
        untyped.typed = false;
        let out = EvolveRole
            .parse(
                &untyped,
                ans(serde_json::json!([{"index": 1, "relation": "whatever"}])),
            )
            .unwrap();
        assert_eq!(out.links[0].relation, Relation::Similar);
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
        let e = evolve_input_with_near(&l);
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

    /// The batched link schema never allows more links than a note has
    /// neighbours, and a repeated index is dropped rather than failing the
    /// whole batch.
    #[test]
    fn batched_links_are_bounded_by_neighbours_and_repeats_are_dropped() {
        use evomem_kit::Batchable;
        let mut few = link_input();
        few.neighbours.truncate(2);
        few.max_links = 10;
        let schema = LinkRole.item_schema(std::slice::from_ref(&few));
        assert_eq!(schema["properties"]["links"]["maxItems"], 2);
        let vars = LinkRole.batch_variables(std::slice::from_ref(&few));
        assert_eq!(vars["max_links"], "2");
        let answer = serde_json::json!({"links": [
            {"index": 1, "relation": "shared topic"},
            {"index": 1, "relation": "shared topic"},
            {"index": 0, "relation": "shared topic"}
        ]});
        let out = LinkRole.parse_item(&few, answer).unwrap();
        let idx: Vec<usize> = out.links.iter().map(|l| l.index).collect();
        assert_eq!(idx, vec![1, 0]);
    }
}
