//! A quick, self-contained leave-one-out check of the ranking baselines on the
//! real data, independent of the eval harness (ignored by default; run with
//! `cargo test --release -p evomem-eval loo_ -- --ignored --nocapture`).
//!
//! Per user: sort by time, the last interaction is the target; every other
//! interaction (validation included) is observed in global order; then
//! `maintain(BeforeDecisions)`; then one decision per user, with 9 negatives
//! drawn uniformly (seed 42) from the items the user never interacted with, or
//! the dataset's fixed candidate list plus the target. Reports HR@1 and
//! NDCG@10. `EVOMEM_LOO_SPECS` overrides the comma-separated policy list.

use super::test_support::shared;
use super::{load, Format};
use evomem_core::metrics::{hit_at, ndcg_at, rank_of_target};
use evomem_core::{
    Dataset, DecisionQuery, ItemId, LogicalTime, MaintainTrigger, MemoryState, Policy, PolicyCtx,
};
use evomem_policy::{PolicyDeps, PolicySpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

fn evaluate(ds: &Dataset, policy: &mut dyn Policy, seed: u64) -> (f64, f64, usize) {
    let memory = MemoryState::new();
    let ctx = |now: LogicalTime| PolicyCtx {
        memory: &memory,
        catalog: &ds.catalog,
        users: &ds.users,
        now,
    };
    let hist = ds.histories();
    let targets: HashSet<LogicalTime> = hist
        .iter()
        .filter_map(|h| h.last().map(|t| t.time))
        .collect();
    for e in ds
        .interactions
        .iter()
        .filter(|e| !targets.contains(&e.time))
    {
        policy.observe(&ctx(e.time), e).unwrap();
    }
    let end = LogicalTime(ds.interactions.len() as u64);
    policy
        .maintain(&ctx(end), MaintainTrigger::BeforeDecisions)
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n_items = ds.catalog.len() as u32;
    let (mut hr1, mut ndcg10, mut n) = (0.0, 0.0, 0usize);
    for (u, h) in hist.iter().enumerate() {
        let Some(target) = h.last() else { continue };
        let mut cands: Vec<ItemId> = match ds.candidates.get(&target.user) {
            Some(list) => {
                let mut c = list.clone();
                if !c.contains(&target.item) {
                    c.push(target.item);
                }
                c
            }
            None => {
                let touched: HashSet<ItemId> = h.iter().map(|i| i.item).collect();
                let mut c = vec![target.item];
                while c.len() < 10 {
                    let j = ItemId(rng.gen_range(0..n_items));
                    if !touched.contains(&j) && !c.contains(&j) {
                        c.push(j);
                    }
                }
                c
            }
        };
        cands.shuffle(&mut rng);
        let pos = cands.iter().position(|c| *c == target.item).unwrap();
        let q = DecisionQuery {
            decision_id: u as u64,
            user: target.user,
            at: target.time,
            instruction: ds.instructions.get(&target.user).cloned(),
            kind: evomem_core::DecisionKind::Rank { candidates: cands },
        };
        let r = policy.recall(&ctx(target.time), &q).unwrap();
        let rank = rank_of_target(&r.context.scores.unwrap(), pos);
        hr1 += hit_at(rank, 1);
        ndcg10 += ndcg_at(rank, 10);
        n += 1;
    }
    (hr1 / n as f64, ndcg10 / n as f64, n)
}

fn check(rel: &str, format: Format) {
    let Some(p) = shared(rel) else { return };
    let t0 = Instant::now();
    let ds = load(&p, format).unwrap().dataset;
    println!("{rel}: loaded in {:.2}s", t0.elapsed().as_secs_f64());
    let specs =
        std::env::var("EVOMEM_LOO_SPECS").unwrap_or_else(|_| "random,pop,itemknn,bpr".into());
    let deps = PolicyDeps {
        embedder: Arc::new(evomem_embed::HashingEmbedder::new(32)),
        llm: Arc::new(evomem_llm::LlmHub::offline()),
        seed: 42,
    };
    for spec in PolicySpec::parse_list(&specs).unwrap() {
        let mut policy = evomem_policy::registry::build(&spec, &deps).unwrap();
        let t0 = Instant::now();
        let (hr1, ndcg10, n) = evaluate(&ds, policy.as_mut(), 42);
        println!(
            "{rel}\t{spec}\tHR@1={hr1:.4}\tNDCG@10={ndcg10:.4}\tusers={n}\t{:.2}s",
            t0.elapsed().as_secs_f64()
        );
    }
}

#[test]
#[ignore = "measurement; run with --release -- --ignored --nocapture"]
fn loo_baselines_ml_100k() {
    check("ml-100k", Format::RecBole);
}

#[test]
#[ignore = "measurement; run with --release -- --ignored --nocapture"]
fn loo_baselines_cds() {
    check("cds-100-user-dense", Format::AgentCf);
}
