//! Protocol properties: determinism, candidate sets, fixed lists, subsamples,
//! and what each protocol shows.

use crate::common::shared_dataset;
use evomem_core::{Dataset, ItemId, SplitRole, UserId};
use evomem_eval::protocol::{
    FixedCandidates, Plan, ProtocolConfig, ProtocolKind, Sampling, TargetSplit, UserSelection,
};
use evomem_eval::synthetic::synthetic_dataset;
use std::collections::BTreeSet;

fn check_candidates(data: &Dataset, plan: &Plan<'_>, expect_len: Option<usize>) {
    for d in &plan.decisions {
        let touched: BTreeSet<ItemId> = data.user_history(d.user).iter().map(|i| i.item).collect();
        let set: BTreeSet<ItemId> = d.candidates.iter().copied().collect();
        assert_eq!(set.len(), d.candidates.len(), "duplicate candidates");
        assert_eq!(d.candidates[d.target_index], d.target.item);
        assert_eq!(
            d.candidates.iter().filter(|&&c| c == d.target.item).count(),
            1
        );
        for c in &d.candidates {
            assert!(
                *c == d.target.item || !touched.contains(c),
                "candidate touched by user"
            );
        }
        if let Some(n) = expect_len {
            assert_eq!(d.candidates.len(), n);
        }
    }
}

#[test]
fn same_seed_same_plan_other_seed_other_candidates() {
    let data = synthetic_dataset(30, 80, 10, 4);
    let cfg = ProtocolConfig::default();
    let a = Plan::build(&data, &cfg).unwrap();
    let b = Plan::build(&data, &cfg).unwrap();
    assert_eq!(a.decisions, b.decisions);
    let c = Plan::build(&data, &ProtocolConfig { seed: 43, ..cfg }).unwrap();
    assert_ne!(a.decisions, c.decisions);
    // Targets do not depend on the seed.
    assert!(a
        .decisions
        .iter()
        .zip(&c.decisions)
        .all(|(x, y)| x.target == y.target));
}

#[test]
fn candidates_never_contain_touched_items() {
    let data = synthetic_dataset(30, 80, 10, 4);
    for sampling in [Sampling::Uniform, Sampling::Popularity] {
        for negatives in [3, 9, 20] {
            let cfg = ProtocolConfig {
                sampling,
                negatives,
                ..ProtocolConfig::default()
            };
            let plan = Plan::build(&data, &cfg).unwrap();
            check_candidates(&data, &plan, Some(negatives + 1));
        }
    }
}

#[test]
fn target_position_is_spread() {
    let data = synthetic_dataset(200, 80, 10, 4);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let first = plan
        .decisions
        .iter()
        .filter(|d| d.target_index == 0)
        .count();
    // Uniform over 10 slots: about 20 of 200.
    assert!((5..=45).contains(&first), "{first}");
}

#[test]
fn retrospective_hides_tests_and_the_future_of_each_user() {
    let data = synthetic_dataset(25, 60, 9, 5);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let mut n = 0;
    for i in plan.retrospective_visible() {
        n += 1;
        assert_ne!(plan.role(i.time), SplitRole::Test);
        assert!(i.time < plan.target_time(i.user).unwrap());
    }
    assert_eq!(n, data.interactions.len() - plan.decisions.len());
    // Decisions are ordered by time with dense ids.
    for (k, w) in plan.decisions.windows(2).enumerate() {
        assert!(w[0].at() < w[1].at());
        assert_eq!(w[0].decision_id, k as u64);
    }
}

#[test]
fn fixed_candidate_lists() {
    let mut data = synthetic_dataset(3, 40, 6, 6);
    let u = UserId(0);
    let hist = data.user_history(u);
    let target = hist.last().unwrap().item;
    let touched_other = hist[0].item;
    let free: Vec<ItemId> = (0..40u32)
        .map(ItemId)
        .filter(|i| !hist.iter().any(|h| h.item == *i))
        .take(15)
        .collect();
    let mut list = vec![touched_other];
    list.extend(free.iter().copied());
    data.candidates.insert(u, list);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let d = plan.decisions.iter().find(|d| d.user == u).unwrap();
    assert_eq!(
        d.candidates.len(),
        16,
        "15 free + target; touched item removed"
    );
    assert!(d.candidates.contains(&target));
    assert!(!d.candidates.contains(&touched_other));
    assert_eq!(plan.stats.fixed_lists_used, 1);
    assert_eq!(plan.stats.fixed_touched_removed, 1);
    let cfg = ProtocolConfig {
        fixed_candidates: FixedCandidates::FirstN,
        ..ProtocolConfig::default()
    };
    let plan = Plan::build(&data, &cfg).unwrap();
    let d = plan.decisions.iter().find(|d| d.user == u).unwrap();
    assert_eq!(d.candidates.len(), 10);
    let firsts: BTreeSet<ItemId> = free[..9].iter().copied().chain([target]).collect();
    assert_eq!(
        d.candidates.iter().copied().collect::<BTreeSet<_>>(),
        firsts
    );
}

#[test]
fn fixed_split_is_respected() {
    let mut data = synthetic_dataset(4, 40, 6, 8);
    // Mark the *third* interaction of user 1 as test: it becomes the target,
    // and its later interactions are hidden from the retrospective protocol.
    let h = data.user_history(UserId(1));
    for (k, i) in h.iter().enumerate() {
        let role = match k {
            2 => SplitRole::Test,
            1 => SplitRole::Valid,
            _ => SplitRole::Train,
        };
        data.fixed_split.insert(i.time, role);
    }
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    assert_eq!(
        plan.decisions.len(),
        1,
        "only users with a Test row get a decision"
    );
    assert_eq!(plan.decisions[0].target, h[2]);
    assert!(plan
        .retrospective_visible()
        .all(|i| i.user != UserId(1) || i.time < h[2].time));
}

#[test]
fn named_subsamples_follow_mars() {
    let Some(dir) = shared_dataset("ml-100k") else {
        return;
    };
    let data = evomem_eval::compat::load_data(&dir, Some("recbole"))
        .unwrap()
        .dataset;
    let hist = data.histories();
    for (sel, lo, hi) in [
        (UserSelection::Active, 50, 200),
        (UserSelection::Light, 10, 30),
    ] {
        let cfg = ProtocolConfig {
            users: sel,
            protocol: ProtocolKind::Evolving,
            ..ProtocolConfig::default()
        };
        let plan = Plan::build(&data, &cfg).unwrap();
        let eligible = hist.iter().filter(|h| (lo..=hi).contains(&h.len())).count();
        assert_eq!(plan.decisions.len(), eligible.min(100), "{sel}");
        for d in &plan.decisions {
            assert!((lo..=hi).contains(&hist[d.user.index()].len()));
        }
        // The named subsample ignores --seed.
        let other = Plan::build(&data, &ProtocolConfig { seed: 7, ..cfg }).unwrap();
        let users = |p: &Plan<'_>| p.decisions.iter().map(|d| d.user).collect::<BTreeSet<_>>();
        assert_eq!(users(&plan), users(&other));
    }
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    assert_eq!(plan.decisions.len(), 943);
    check_candidates(&data, &plan, Some(10));
}

#[test]
fn valid_target_ranks_the_validation_item_and_hides_every_test_item() {
    let data = synthetic_dataset(30, 80, 10, 4);
    let test = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let cfg = ProtocolConfig {
        target: TargetSplit::Valid,
        ..ProtocolConfig::default()
    };
    let valid = Plan::build(&data, &cfg).unwrap();
    assert!(!valid.decisions.is_empty());
    check_candidates(&data, &valid, Some(10));
    for d in &valid.decisions {
        let h = data.user_history(d.user);
        // The validation interaction is the one before the test target.
        assert_eq!(d.target, *h.get(h.len() - 2).unwrap());
        assert_eq!(valid.role(d.target.time), SplitRole::Valid);
        let t = test.target_time(d.user).unwrap();
        assert!(d.target.time < t);
    }
    // Nothing of the test split is shown, for any user.
    for i in valid.retrospective_visible() {
        assert_ne!(valid.role(i.time), SplitRole::Test);
        assert!(i.time < valid.target_time(i.user).unwrap());
    }
    // The split roles are those of the test plan.
    for i in &data.interactions {
        assert_eq!(valid.role(i.time), test.role(i.time));
    }
    assert!("train"
        .parse::<TargetSplit>()
        .unwrap_err()
        .to_string()
        .contains("target"));
}
