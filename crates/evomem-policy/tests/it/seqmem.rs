//! `seqmem`: the score is the documented formula on a hand-checked toy, the
//! working view is a function of the op log, evidence paths cite the user's
//! own events and the candidates' notes, and bad keys are errors.

use evomem_core::{
    Catalog, DecisionKind, DecisionQuery, Interaction, Item, ItemId, LogicalTime, MaintainTrigger,
    MemoryId, MemoryState, Namespace, PlannedOp, Policy, PolicyCtx, Recall, User, UserId,
};
use evomem_embed::HashingEmbedder;
use evomem_llm::LlmHub;
use evomem_policy::families::seqmem::{score, SeqParams, SeqView};
use evomem_policy::{PolicyDeps, PolicySpec};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

fn world(n_items: u32, n_users: u32) -> (Catalog, Vec<User>) {
    let items = (0..n_items)
        .map(|i| Item {
            id: ItemId(i),
            token: format!("i{i}"),
            title: format!("Movie {i}"),
            text: BTreeMap::new(),
            categories: Vec::new(),
            attributes: BTreeMap::new(),
        })
        .collect();
    let users = (0..n_users)
        .map(|u| User {
            id: UserId(u),
            token: format!("u{u}"),
            attributes: BTreeMap::new(),
        })
        .collect();
    (Catalog { items }, users)
}

fn policy(spec: &str) -> Box<dyn Policy> {
    let deps = PolicyDeps {
        embedder: Arc::new(HashingEmbedder::new(64)),
        llm: Arc::new(LlmHub::offline()),
        seed: 42,
    };
    evomem_policy::registry::build(&PolicySpec::parse(spec).unwrap(), &deps).unwrap()
}

fn events(seqs: &[(u32, &[u32])]) -> Vec<Interaction> {
    let mut out = Vec::new();
    for &(u, items) in seqs {
        for &i in items {
            let t = out.len() as u64;
            out.push(Interaction {
                user: UserId(u),
                item: ItemId(i),
                rating: None,
                timestamp: t as i64,
                time: LogicalTime(t),
            });
        }
    }
    out
}

/// Observe everything, then maintain once; returns state and every op.
fn feed(
    p: &mut dyn Policy,
    cat: &Catalog,
    users: &[User],
    inter: &[Interaction],
) -> (MemoryState, Vec<PlannedOp>) {
    let mut state = MemoryState::new();
    let mut all = Vec::new();
    for ev in inter {
        let ctx = PolicyCtx {
            memory: &state,
            catalog: cat,
            users,
            now: ev.time,
        };
        let ops = p.observe(&ctx, ev).unwrap();
        for op in &ops {
            state.apply(&op.op, ev.time).unwrap();
        }
        all.extend(ops);
    }
    let now = LogicalTime(inter.len() as u64);
    let ctx = PolicyCtx {
        memory: &state,
        catalog: cat,
        users,
        now,
    };
    let ops = p.maintain(&ctx, MaintainTrigger::BeforeDecisions).unwrap();
    for op in &ops {
        state.apply(&op.op, now).unwrap();
    }
    all.extend(ops);
    (state, all)
}

fn recall(
    p: &mut dyn Policy,
    state: &MemoryState,
    cat: &Catalog,
    users: &[User],
    u: u32,
    cands: &[u32],
) -> Recall {
    let at = LogicalTime(10_000);
    let ctx = PolicyCtx {
        memory: state,
        catalog: cat,
        users,
        now: at,
    };
    let q = DecisionQuery {
        decision_id: 7,
        user: UserId(u),
        at,
        instruction: None,
        kind: DecisionKind::Rank {
            candidates: cands.iter().map(|&i| ItemId(i)).collect(),
        },
    };
    p.recall(&ctx, &q).unwrap()
}

const DEFAULTS: SeqParams = SeqParams {
    window: 20,
    recent: 20,
    pos_decay: 0.7,
    dist_decay: 0.9,
    backward: 1.0,
    src_norm: 0.7,
    cand_norm: 0.45,
};

#[test]
fn score_is_the_documented_formula_on_a_hand_checked_toy() {
    // u0: 0 1 2, u1: 1 3, u2: 3. Forward weights F(0,1)=1, F(0,2)=0.9,
    // F(1,2)=1, F(1,3)=1; pair counts deg(0)=2, deg(1)=3, deg(2)=2,
    // deg(3)=1; counts n_1=2, n_2=1, n_0=1.
    let (cat, users) = world(5, 3);
    let inter = events(&[(0, &[0, 1, 2]), (1, &[1, 3]), (2, &[3])]);
    let mut p = policy("seqmem");
    let (state, _) = feed(p.as_mut(), &cat, &users, &inter);
    let r = recall(p.as_mut(), &state, &cat, &users, 2, &[1, 2, 0, 4]);
    let s = r.context.scores.unwrap();
    // u2's only recent item is 3: W(3,1) = F(3,1) + F(1,3) = 1.
    let want1 = 1.0 / 1f64.powf(0.7) / 4f64.powf(0.45) + 1e-6 * 3f64.ln();
    assert!((s[0] - want1).abs() < 1e-12, "{} vs {want1}", s[0]);
    // Nothing ties 2 or 0 to item 3: only the popularity tie-break remains.
    assert!((s[1] - 1e-6 * 2f64.ln()).abs() < 1e-12);
    assert!((s[2] - 1e-6 * 2f64.ln()).abs() < 1e-12);
    assert_eq!(s[3], 0.0, "an unseen item scores zero");

    // u0's recent items are 2 (newest), 1, 0. Candidate 3:
    // W(2,3)=0; W(1,3)=F(1,3)=1 at position 1; W(0,3)=0.
    let r = recall(p.as_mut(), &state, &cat, &users, 0, &[3]);
    let want3 = 0.7 * 1.0 / 3f64.powf(0.7) / 2f64.powf(0.45) + 1e-6 * 3f64.ln();
    let got = r.context.scores.unwrap()[0];
    assert!((got - want3).abs() < 1e-12, "{got} vs {want3}");

    // Forward only: item 0 came *before* 1 and 2, so for u1 (recent 3, 1)
    // it gets weight only through the backward term.
    let mut fwd = policy("seqmem[backward=0]");
    let (state, _) = feed(fwd.as_mut(), &cat, &users, &inter);
    let r = recall(fwd.as_mut(), &state, &cat, &users, 1, &[0]);
    assert!(r.context.scores.unwrap()[0] < 1e-5);
    let r = recall(p.as_mut(), &state, &cat, &users, 1, &[0]);
    assert!(r.context.scores.unwrap()[0] > 1e-3);
}

#[test]
fn scores_follow_from_the_op_log_alone() {
    let (cat, users) = world(40, 12);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let seqs: Vec<(u32, Vec<u32>)> = (0..12)
        .map(|u| (u, (0..25).map(|_| rng.gen_range(0..40)).collect()))
        .collect();
    let refs: Vec<(u32, &[u32])> = seqs.iter().map(|(u, s)| (*u, s.as_slice())).collect();
    let inter = events(&refs);
    let mut p = policy("seqmem");
    let (state, ops) = feed(p.as_mut(), &cat, &users, &inter);
    // Rebuild the view from the logged ops only.
    let mut view = SeqView::new(DEFAULTS.window, DEFAULTS.dist_decay);
    for op in &ops {
        view.apply(&op.op);
    }
    let cands: Vec<u32> = (0..40).collect();
    for u in 0..12 {
        let recent: Vec<u32> = view.sequence(u).iter().rev().take(20).copied().collect();
        let got = recall(p.as_mut(), &state, &cat, &users, u, &cands)
            .context
            .scores
            .unwrap();
        for (k, &c) in cands.iter().enumerate() {
            let want = score(&view, &DEFAULTS, &recent, c).score;
            assert_eq!(got[k], want, "user {u} candidate {c}");
        }
    }
    // The events are the user's memory: one per interaction, in order.
    for (u, s) in &seqs {
        assert_eq!(view.sequence(*u), s.as_slice());
        for n in 0..s.len() {
            let r = state.get(&MemoryId::new(format!("seq:u{u}:{n}"))).unwrap();
            assert_eq!(r.namespace, Namespace::user(&format!("u{u}")));
        }
    }
}

#[test]
fn evidence_paths_cite_own_events_and_candidate_notes() {
    let (cat, users) = world(6, 4);
    let inter = events(&[(0, &[0, 1, 2]), (1, &[0, 1, 3]), (2, &[4, 5]), (3, &[0])]);
    let mut p = policy("seqmem");
    let (state, _) = feed(p.as_mut(), &cat, &users, &inter);
    let r = recall(p.as_mut(), &state, &cat, &users, 3, &[1, 5]);
    let s = r.context.scores.as_ref().unwrap();
    assert!(s[0] > s[1], "1 follows 0 in two sequences, 5 never meets 0");
    let paths: Vec<_> = r
        .context
        .entries
        .iter()
        .filter(|e| e.item == Some(ItemId(1)))
        .collect();
    assert!(!paths.is_empty());
    for e in &paths {
        let path = e.path.as_ref().unwrap();
        let from = state.get(&path.nodes[0]).unwrap();
        let to = state.get(&path.nodes[1]).unwrap();
        assert_eq!(
            from.namespace,
            Namespace::user("u3"),
            "the user's own event"
        );
        assert_eq!(to.namespace, Namespace::item("i1"), "the candidate's note");
        assert!(
            e.text.contains("Movie 1") && e.text.contains("Movie 0"),
            "{}",
            e.text
        );
    }
    assert!(r.context.entries.iter().all(|e| e.item != Some(ItemId(5))));
    assert_eq!(r.trace.used[0].id, MemoryId::new("seq:u3:0"));
    // The consolidated note lists its co-consumed items.
    let note = state.get(&MemoryId::new("seqnote:i0")).unwrap();
    let co = note.fields["co"].as_array().unwrap();
    assert_eq!(co[0][0], "i1", "{co:?}");
    assert_eq!(note.fields["degree"], 4);
}

#[test]
fn bad_keys_are_config_errors_naming_the_key() {
    let deps = PolicyDeps {
        embedder: Arc::new(HashingEmbedder::new(64)),
        llm: Arc::new(LlmHub::offline()),
        seed: 42,
    };
    for (spec, key) in [
        ("seqmem[window=0]", "window"),
        ("seqmem[pos_decay=1.5]", "pos_decay"),
        ("seqmem[cand_norm=-1]", "cand_norm"),
    ] {
        let err = evomem_policy::registry::build(&PolicySpec::parse(spec).unwrap(), &deps)
            .err()
            .unwrap();
        assert!(err.to_string().contains(key), "{spec}: {err}");
    }
}
