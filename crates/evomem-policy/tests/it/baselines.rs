//! Integration tests for the ranking baselines (`random`, `pop`, `itemknn`,
//! `bpr`): cluster structure is recovered, scores are deterministic, pop counts
//! what it saw, and nothing unobserved influences a score.

use evomem_core::{
    Catalog, DecisionQuery, Interaction, Item, ItemId, LogicalTime, MaintainTrigger, MemoryState,
    Policy, PolicyCtx, User, UserId,
};
use evomem_policy::baselines::{Bpr, BprConfig, ItemKnn, Pop, RandomScores};
use evomem_policy::PolicySpec;
use std::collections::BTreeMap;

const N_USERS: u32 = 20;
const N_ITEMS: u32 = 10;

fn catalog(n: u32) -> Catalog {
    Catalog {
        items: (0..n)
            .map(|i| Item {
                id: ItemId(i),
                token: format!("i{i}"),
                title: String::new(),
                text: BTreeMap::new(),
                categories: Vec::new(),
                attributes: BTreeMap::new(),
            })
            .collect(),
    }
}

fn users(n: u32) -> Vec<User> {
    (0..n)
        .map(|u| User {
            id: UserId(u),
            token: format!("u{u}"),
            attributes: BTreeMap::new(),
        })
        .collect()
}

/// Two clusters: users 0..10 like items 0..5, users 10..20 like items 5..10.
/// Each user is shown all items of their cluster except a held-out one.
fn held_out(u: u32) -> u32 {
    (u / 10) * 5 + u % 5
}

/// Append `user` with `item`, unrated, at the next time step.
fn push_event(out: &mut Vec<Interaction>, user: u32, item: u32) {
    out.push(Interaction {
        user: UserId(user),
        item: ItemId(item),
        rating: None,
        timestamp: out.len() as i64,
        time: LogicalTime(out.len() as u64),
    });
}

fn cluster_events() -> Vec<Interaction> {
    let mut out = Vec::new();
    for u in 0..N_USERS {
        let c = u / 10;
        for i in c * 5..c * 5 + 5 {
            if i != held_out(u) {
                push_event(&mut out, u, i);
            }
        }
    }
    out
}

struct World {
    memory: MemoryState,
    catalog: Catalog,
    users: Vec<User>,
}

impl World {
    fn new() -> Self {
        Self {
            memory: MemoryState::new(),
            catalog: catalog(N_ITEMS),
            users: users(N_USERS),
        }
    }
    fn ctx(&self, now: u64) -> PolicyCtx<'_> {
        PolicyCtx {
            memory: &self.memory,
            catalog: &self.catalog,
            users: &self.users,
            now: LogicalTime(now),
        }
    }
}

/// Observe `events`, train, and return the scores for each query.
fn run(
    policy: &mut dyn Policy,
    events: &[Interaction],
    queries: &[DecisionQuery],
) -> Vec<Vec<f64>> {
    let w = World::new();
    for e in events {
        let ops = policy.observe(&w.ctx(e.time.0), e).unwrap();
        assert!(ops.is_empty(), "baselines write no memory");
    }
    let end = events.len() as u64;
    policy
        .maintain(&w.ctx(end), MaintainTrigger::BeforeDecisions)
        .unwrap();
    queries
        .iter()
        .map(|q| {
            let r = policy.recall(&w.ctx(end), q).unwrap();
            assert!(r.trace.used.is_empty());
            assert_eq!(r.trace.decision_id, q.decision_id);
            let s = r.context.scores.unwrap();
            assert_eq!(s.len(), q.candidates().len());
            s
        })
        .collect()
}

/// For every user: the held-out item first, then the other cluster's items.
fn cluster_queries() -> Vec<DecisionQuery> {
    (0..N_USERS)
        .map(|u| {
            let other = 1 - u / 10;
            let mut candidates = vec![ItemId(held_out(u))];
            candidates.extend((other * 5..other * 5 + 5).map(ItemId));
            DecisionQuery {
                decision_id: u64::from(u),
                user: UserId(u),
                at: LogicalTime(1000),
                instruction: None,
                kind: evomem_core::DecisionKind::Rank { candidates },
            }
        })
        .collect()
}

fn assert_in_cluster_first(name: &str, scores: &[Vec<f64>]) {
    for (u, s) in scores.iter().enumerate() {
        for (k, &x) in s.iter().enumerate().skip(1) {
            assert!(
                s[0] > x,
                "{name}: user {u}: in-cluster item scored {} <= out-of-cluster candidate {k} ({x})",
                s[0]
            );
        }
    }
}

fn bpr(seed: u64) -> Bpr {
    Bpr::new(BprConfig {
        epochs: 200,
        seed,
        ..BprConfig::from_spec(&PolicySpec::named("bpr"), 42).unwrap()
    })
    .unwrap()
}

#[test]
fn bpr_ranks_in_cluster_item_first() {
    let s = run(&mut bpr(7), &cluster_events(), &cluster_queries());
    assert_in_cluster_first("bpr", &s);
}

#[test]
fn itemknn_ranks_in_cluster_item_first() {
    let s = run(&mut ItemKnn::new(0), &cluster_events(), &cluster_queries());
    assert_in_cluster_first("itemknn", &s);
    let s = run(&mut ItemKnn::new(3), &cluster_events(), &cluster_queries());
    assert_in_cluster_first("itemknn[k=3]", &s);
}

#[test]
fn itemknn_matches_brute_force_cosine() {
    let events = cluster_events();
    let q = &cluster_queries()[3];
    let s = run(&mut ItemKnn::new(0), &events, std::slice::from_ref(q));
    let users_of = |i: u32| -> Vec<u32> {
        let mut v: Vec<u32> = events
            .iter()
            .filter(|e| e.item.0 == i)
            .map(|e| e.user.0)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let mine: Vec<u32> = events
        .iter()
        .filter(|e| e.user == q.user)
        .map(|e| e.item.0)
        .collect();
    for (k, c) in q.candidates().iter().enumerate() {
        let uc = users_of(c.0);
        let mut want = 0.0;
        for &j in mine.iter().filter(|&&j| j != c.0) {
            let uj = users_of(j);
            let inter = uc.iter().filter(|x| uj.contains(x)).count() as f64;
            if !uc.is_empty() && !uj.is_empty() {
                want += inter / ((uc.len() * uj.len()) as f64).sqrt();
            }
        }
        assert!(
            (s[0][k] - want).abs() < 1e-12,
            "candidate {k}: {} vs {want}",
            s[0][k]
        );
    }
}

/// Above `MAX_CO_USERS` users, a candidate's co-occurrence counts come from
/// its most recent users, scaled by `|U_c| / MAX_CO_USERS`: on a uniform
/// pattern the estimate is the exact cosine.
#[test]
fn itemknn_samples_a_popular_candidates_users_and_scales_the_counts() {
    use evomem_policy::baselines::MAX_CO_USERS;
    let n = 1000u32;
    assert!(n as usize > MAX_CO_USERS);
    let mut events = Vec::new();
    for u in 0..n {
        push_event(&mut events, u, 0);
        if u % 2 == 0 {
            push_event(&mut events, u, 1);
        }
    }
    // The querying user holds item 1 only.
    push_event(&mut events, n, 1);
    let q = DecisionQuery {
        decision_id: 0,
        user: UserId(n),
        at: LogicalTime(10_000),
        instruction: None,
        kind: evomem_core::DecisionKind::Rank {
            candidates: vec![ItemId(0), ItemId(2)],
        },
    };
    let s = run(&mut ItemKnn::new(0), &events, std::slice::from_ref(&q));
    // |U_0| = 1000, |U_1| = 501, |U_0 ∩ U_1| = 500.
    let exact = 500.0 / (1000.0f64 * 501.0).sqrt();
    assert!((s[0][0] - exact).abs() < 1e-12, "{} vs {exact}", s[0][0]);
    assert_eq!(s[0][1], 0.0);
}

#[test]
fn same_seed_same_scores_different_seed_different() {
    let (e, q) = (cluster_events(), cluster_queries());
    assert_eq!(run(&mut bpr(3), &e, &q), run(&mut bpr(3), &e, &q));
    assert_ne!(run(&mut bpr(3), &e, &q), run(&mut bpr(4), &e, &q));
    let r = |seed| run(&mut RandomScores::new(seed), &e, &q);
    assert_eq!(r(1), r(1));
    assert_ne!(r(1), r(2));
    // Random scores depend on the decision id, not on call order.
    let mut rev = q.clone();
    rev.reverse();
    let mut back = r(1).clone();
    back.reverse();
    assert_eq!(run(&mut RandomScores::new(1), &e, &rev), back);
}

#[test]
fn pop_counts_observed_interactions() {
    let mk = |u: u32, i: u32, t: u64| Interaction {
        user: UserId(u),
        item: ItemId(i),
        rating: Some(3.0),
        timestamp: t as i64,
        time: LogicalTime(t),
    };
    let events = vec![
        mk(0, 1, 0),
        mk(1, 1, 1),
        mk(2, 1, 2),
        mk(0, 2, 3),
        mk(0, 2, 4),
    ];
    let q = DecisionQuery {
        decision_id: 0,
        user: UserId(3),
        at: LogicalTime(5),
        instruction: None,
        kind: evomem_core::DecisionKind::Rank {
            candidates: vec![ItemId(0), ItemId(1), ItemId(2), ItemId(9)],
        },
    };
    let s = run(&mut Pop::new(), &events, &[q]);
    assert_eq!(s[0], vec![0.0, 3.0, 2.0, 0.0]);
}

#[test]
fn unobserved_interactions_cannot_change_scores() {
    // Two worlds share a prefix; only the prefix is observed. Whatever the
    // unobserved suffix holds, every baseline scores the same.
    let events = cluster_events();
    let prefix = &events[..events.len() / 2];
    let q = cluster_queries();
    type Make = fn() -> Box<dyn Policy>;
    let policies: Vec<(&str, Make)> = vec![
        ("pop", || Box::new(Pop::new())),
        ("itemknn", || Box::new(ItemKnn::new(0))),
        ("bpr", || Box::new(bpr(5))),
        ("random", || Box::new(RandomScores::new(5))),
    ];
    for (name, mk) in policies {
        let a = run(mk().as_mut(), prefix, &q);
        let b = run(mk().as_mut(), &events, &q);
        let again = run(mk().as_mut(), prefix, &q);
        assert_eq!(a, again, "{name}: prefix-only runs differ");
        if name != "random" {
            assert_ne!(a, b, "{name}: observing more should change scores");
        }
    }
}

#[test]
fn bpr_retrains_on_tick_after_enough_events() {
    let w = World::new();
    let mut p = Bpr::new(BprConfig {
        retrain_every: 10,
        epochs: 5,
        warm_epochs: 2,
        ..BprConfig::from_spec(&PolicySpec::named("bpr"), 42).unwrap()
    })
    .unwrap();
    for (k, e) in cluster_events().iter().enumerate() {
        p.observe(&w.ctx(e.time.0), e).unwrap();
        p.maintain(&w.ctx(e.time.0 + 1), MaintainTrigger::Tick)
            .unwrap();
        let rounds = p.stats()["train_rounds"].as_u64().unwrap();
        assert_eq!(rounds, (k as u64 + 1) / 10, "after {} events", k + 1);
    }
}

#[test]
fn registry_builds_baselines_and_rejects_unknown_params() {
    let deps = evomem_policy::PolicyDeps {
        embedder: std::sync::Arc::new(evomem_embed::HashingEmbedder::new(32)),
        llm: std::sync::Arc::new(evomem_llm::LlmHub::offline()),
        seed: 42,
    };
    for spec in [
        "random",
        "pop",
        "itemknn",
        "itemknn[k=20]",
        "bpr[dim=8,epochs=3,lr=0.1,reg=0.01]",
    ] {
        let spec = PolicySpec::parse(spec).unwrap();
        let p = evomem_policy::registry::build(&spec, &deps).unwrap();
        assert_eq!(p.name(), spec.name);
    }
    let bad = PolicySpec::parse("bpr[dims=8]").unwrap();
    let e = evomem_policy::registry::build(&bad, &deps)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("dims"), "{e}");
    let bad = PolicySpec::parse("bpr[lr=-1]").unwrap();
    assert!(evomem_policy::registry::build(&bad, &deps).is_err());
    let bad = PolicySpec::parse("itemknn[k=lots]").unwrap();
    assert!(evomem_policy::registry::build(&bad, &deps)
        .err()
        .unwrap()
        .to_string()
        .contains("`k`"));
}
