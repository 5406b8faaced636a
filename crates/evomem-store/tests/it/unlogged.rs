//! `Engine::ephemeral_unlogged`: the same live state as a logging engine,
//! no op log, and op counts equal to the counts of the log it did not keep.

use crate::common::random_batch;
use evomem_core::LogicalTime;
use evomem_store::Engine;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

#[test]
fn unlogged_engine_keeps_the_state_and_the_counts_but_no_log() {
    let run = |mut e: Engine| {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut next = 0u64;
        for t in 1..=60u64 {
            random_batch(&mut e, &mut rng, &mut next, 4, LogicalTime(t), 4);
        }
        e
    };
    let logged = run(Engine::ephemeral());
    let unlogged = run(Engine::ephemeral_unlogged());
    assert!(unlogged.log().is_empty());
    assert!(!logged.log().is_empty());
    assert_eq!(logged.state(), unlogged.state());
    assert_eq!(logged.tally(), unlogged.tally());
    let mut by_label: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_op: BTreeMap<String, usize> = BTreeMap::new();
    for o in logged.log() {
        *by_label.entry(o.provenance.label.clone()).or_insert(0) += 1;
        *by_op.entry(o.op.name().to_string()).or_insert(0) += 1;
    }
    let t = unlogged.tally();
    assert_eq!(t.total, logged.log().len());
    assert_eq!(t.by_label, by_label);
    assert_eq!(t.by_op, by_op);
}
