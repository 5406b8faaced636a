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

/// Collects what a streaming engine hands over, batch by batch.
struct Collect(std::sync::Arc<std::sync::Mutex<Vec<Vec<evomem_core::LoggedOp>>>>);

impl evomem_store::OpSink for Collect {
    fn accept(&mut self, ops: Vec<evomem_core::LoggedOp>) -> Result<(), evomem_store::StoreError> {
        self.0.lock().unwrap().push(ops);
        Ok(())
    }
}

#[test]
fn streaming_engine_hands_over_exactly_the_log_a_logging_engine_keeps() {
    let run = |mut e: Engine| {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut next = 0u64;
        for t in 1..=60u64 {
            random_batch(&mut e, &mut rng, &mut next, 4, LogicalTime(t), 4);
        }
        e
    };
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let logged = run(Engine::ephemeral());
    let streaming = run(Engine::ephemeral_streaming(Box::new(Collect(got.clone()))));
    assert!(streaming.log().is_empty());
    assert_eq!(logged.state(), streaming.state());
    assert_eq!(logged.tally(), streaming.tally());
    let batches = got.lock().unwrap();
    assert!(
        batches.iter().all(|b| !b.is_empty()),
        "no empty batch is handed over"
    );
    let streamed: Vec<evomem_core::LoggedOp> = batches.iter().flatten().cloned().collect();
    // Same ops, same seq numbers (1, 2, ...), same provenance.
    assert_eq!(streamed.as_slice(), logged.log());
}

/// A sink whose writer has stopped.
struct Broken;

impl evomem_store::OpSink for Broken {
    fn accept(&mut self, _: Vec<evomem_core::LoggedOp>) -> Result<(), evomem_store::StoreError> {
        Err(evomem_store::StoreError::Sink {
            location: "ops.jsonl.zst".into(),
            detail: "writer stopped".into(),
        })
    }
}

#[test]
fn a_failing_sink_fails_the_apply_and_names_the_sink() {
    let mut e = Engine::ephemeral_streaming(Box::new(Broken));
    let rec = crate::common::random_record(
        &mut ChaCha8Rng::seed_from_u64(3),
        "r1".into(),
        2,
        LogicalTime(1),
    );
    let op = evomem_core::PlannedOp::new(evomem_core::MemoryOp::Create { record: rec }, "t", "x");
    let err = e.apply("p", vec![op], LogicalTime(1)).unwrap_err();
    assert!(
        err.to_string().contains("ops.jsonl.zst: writer stopped"),
        "{err}"
    );
}
