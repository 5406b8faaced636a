//! The rank role: the rendered prompt (snapshot), the parser, and the
//! offline scorer's documented cases.

use crate::common::{cand, input, role};
use evomem_core::{ItemId, Role};
use evomem_llm::template::render;
use evomem_llm::RankInput;
use serde_json::json;

#[test]
fn rendered_rank_prompt_snapshot() {
    let r = role();
    let msgs = render(r.name(), r.template(), &r.variables(&input())).unwrap();
    assert_eq!(msgs.len(), 2);
    let text = msgs
        .iter()
        .map(|m| format!("### {:?}\n{}\n", m.role, m.content))
        .collect::<String>();
    insta::assert_snapshot!("rank_prompt", text);
}

/// A candidate text that starts with its title (ml-100k's "Title. Genres")
/// is shown once, not after the title again; other texts follow the title.
#[test]
fn a_candidate_text_that_starts_with_its_title_is_not_repeated() {
    let r = role();
    let mut inp = input();
    inp.candidates = vec![
        cand(1, "Fargo (1996)", "Fargo (1996). Crime, Drama, Thriller"),
        cand(2, "Heat (1995)", "A heist thriller"),
    ];
    let msgs = render(r.name(), r.template(), &r.variables(&inp)).unwrap();
    let user = &msgs[1].content;
    assert!(
        user.contains("[1] Fargo (1996). Crime, Drama, Thriller\n"),
        "{user}"
    );
    assert!(
        user.contains("[2] Heat (1995) — A heist thriller"),
        "{user}"
    );
}

/// A memory that repeats an earlier one's text is shown once, at the first
/// one's weight.
#[test]
fn a_repeated_memory_text_is_shown_once() {
    let r = role();
    let mut inp = input();
    let first = inp.context.entries[0].clone();
    let mut copy = first.clone();
    copy.weight = -0.25;
    inp.context.entries.push(copy);
    let msgs = render(r.name(), r.template(), &r.variables(&inp)).unwrap();
    let user = &msgs[1].content;
    assert_eq!(user.matches(first.text.trim()).count(), 1, "{user}");
    assert!(user.contains(&format!("[{:+.2}] {}", first.weight, first.text.trim())));
}

/// Item memory (AtomRec's M_i) follows its candidate's line; candidates
/// without any keep the plain line, so policies that recall no item memory
/// render exactly the prompt above.
#[test]
fn rendered_rank_prompt_with_item_memory_snapshot() {
    let r = role();
    let mut inp = input();
    inp.context.item_memory = vec![
        evomem_core::ItemMemory {
            item: ItemId(11),
            text: "keywords: aliens, marines; audience of 12 users; links: shared topic -> your note on Alien (1979)".into(),
        },
        evomem_core::ItemMemory {
            item: ItemId(99),
            text: "not a candidate: never shown".into(),
        },
    ];
    let msgs = render(r.name(), r.template(), &r.variables(&inp)).unwrap();
    let text = msgs
        .iter()
        .map(|m| format!("### {:?}\n{}\n", m.role, m.content))
        .collect::<String>();
    assert!(!text.contains("never shown"));
    let plain = render(r.name(), r.template(), &r.variables(&input())).unwrap();
    let with: Vec<&str> = msgs[1].content.lines().collect();
    let without: Vec<&str> = plain[1].content.lines().collect();
    assert_eq!(with.len(), without.len() + 1);
    insta::assert_snapshot!("rank_prompt_item_memory", text);
}

#[test]
fn rendered_rank_prompt_without_memory() {
    let r = role();
    let mut inp = input();
    inp.context = Default::default();
    let msgs = render(r.name(), r.template(), &r.variables(&inp)).unwrap();
    assert!(msgs[1].content.contains("User profile:\n(none)"));
    assert!(msgs[1].content.contains("(no memory)"));
    assert!(msgs[1].content.contains("Instruction: (none)"));
}

#[test]
fn parser_validates_and_converts() {
    let r = role();
    let inp = input();
    assert_eq!(
        r.parse(&inp, json!({"ranking": [2, 4, 1, 3]}))
            .unwrap()
            .scores,
        vec![2.0, 4.0, 1.0, 3.0]
    );
    assert!(r
        .parse(&inp, json!({"ranking": [5, 1, 2, 3]}))
        .unwrap_err()
        .contains("outside 1..=4"));
    assert!(r
        .parse(&inp, json!({"ranking": [1, 1, 2, 3]}))
        .unwrap_err()
        .contains("duplicate"));
    assert!(r.parse(&inp, json!({"ranking": ["a"]})).is_err());
    assert!(r.parse(&inp, json!({"order": [1]})).is_err());
}

#[test]
fn offline_uses_policy_scores_when_present() {
    let r = role();
    let mut inp = input();
    inp.context.scores = Some(vec![0.1, 0.9, 0.5, 0.2]);
    assert_eq!(r.offline(&inp).unwrap().scores, vec![0.1, 0.9, 0.5, 0.2]);
    inp.context.scores = Some(vec![0.1]);
    let e = r.offline(&inp).unwrap_err();
    assert!(e.to_string().contains("1 values for 4 candidates"), "{e}");
}

#[test]
fn offline_memory_prefers_liked_and_demotes_disliked() {
    let s = role().offline(&input()).unwrap().scores;
    // Aliens (sci-fi) > Contact (sci-fi) > Fargo > Notting Hill (romance, disliked).
    assert!(s[1] > s[3] && s[3] > s[2] && s[2] > s[0], "{s:?}");
}

#[test]
fn offline_uses_given_embeddings_over_text() {
    let r = role();
    let mut inp = input();
    // Give every entry and candidate an explicit 64-d embedding: only these count.
    let axis = |k: usize| {
        let mut v = vec![0f32; 64];
        v[k] = 1.0;
        v
    };
    for e in &mut inp.context.entries {
        e.embedding = Some(axis(5));
        e.weight = 1.0;
        e.text = String::new();
    }
    inp.context.profile = None;
    for (i, c) in inp.candidates.iter_mut().enumerate() {
        c.embedding = if i == 2 { axis(5) } else { axis(6) };
    }
    let s = r.offline(&inp).unwrap().scores;
    assert_eq!(crate::common::best(&s), 2, "{s:?}");
}

#[test]
fn offline_without_memory_uses_instruction() {
    let mut inp = input();
    inp.context = Default::default();
    inp.instruction = Some("I want a crime thriller".into());
    let s = role().offline(&inp).unwrap().scores;
    assert_eq!(crate::common::best(&s), 2, "Fargo: {s:?}");
}

#[test]
fn offline_without_anything_is_seeded_and_order_independent() {
    let r = role();
    let mut inp = input();
    inp.context = Default::default();
    let a = r.offline(&inp).unwrap().scores;
    assert_eq!(a, r.offline(&inp).unwrap().scores);
    let mut shuffled: RankInput = inp.clone();
    shuffled.candidates.reverse();
    let b = r.offline(&shuffled).unwrap().scores;
    let rev: Vec<f64> = b.into_iter().rev().collect();
    assert_eq!(a, rev, "a candidate's score depends on (seed, item) only");
    inp.seed = 8;
    assert_ne!(a, r.offline(&inp).unwrap().scores);
    // Over many seeds each candidate wins about equally often (fair ranking).
    let mut wins = [0u32; 4];
    for seed in 0..400 {
        inp.seed = seed;
        wins[crate::common::best(&r.offline(&inp).unwrap().scores)] += 1;
    }
    assert!(wins.iter().all(|&w| (60..=140).contains(&w)), "{wins:?}");
}

#[test]
fn offline_ties_break_deterministically() {
    let r = role();
    let mut inp = input();
    inp.candidates = vec![
        cand(1, "Same", "Genres: Drama"),
        cand(2, "Same", "Genres: Drama"),
    ];
    let s = r.offline(&inp).unwrap().scores;
    assert_ne!(s[0], s[1]);
    assert!((s[0] - s[1]).abs() < 1e-8);
    assert!(r
        .offline(&RankInput {
            candidates: vec![],
            ..inp.clone()
        })
        .unwrap()
        .scores
        .is_empty());
    let _ = ItemId(0);
}

#[test]
fn fixture_auto_rank_reads_numbered_candidates() {
    let r = role();
    let msgs = render(r.name(), r.template(), &r.variables(&input())).unwrap();
    let ranking = evomem_llm::fixture::auto_rank(&msgs[1].content);
    let mut sorted = ranking.clone();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2, 3, 4]);
    assert_eq!(ranking, evomem_llm::fixture::auto_rank(&msgs[1].content));
    let parsed = r.parse(&input(), json!({"ranking": ranking})).unwrap();
    assert_eq!(parsed.scores.len(), 4);
}
