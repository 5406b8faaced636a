//! Child process of the crash-safety test (`tests/it/crash.rs`).
//!
//! Usage: `evomem-store-crash-child <sqlite-path> <seed>`. Opens (and so
//! recovers) the SQLite store, then ingests batches of 1-6 ops forever,
//! printing `ACK <last seq>` and flushing after every acknowledged batch.
//! The parent kills it with SIGKILL at random moments and checks that every
//! acknowledged op survived and that no batch is half applied. Every op is
//! labelled `batch:<first seq>:<index>:<len>` so the parent can check
//! batch atomicity. Randomness is a seeded SplitMix64 (no extra deps).
//! `EVOMEM_CRASH_SYNCHRONOUS=normal` lowers SQLite's `synchronous` to
//! NORMAL (the power-loss test's control).

use evomem_core::{
    Embedding, LogicalTime, MemoryId, MemoryOp, MemoryRecord, Namespace, PlannedOp, RecordKind,
};
use evomem_store::{Engine, StoreError};
use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(seed)) = (args.get(1), args.get(2).and_then(|s| s.parse().ok())) else {
        eprintln!("usage: evomem-store-crash-child <sqlite-path> <seed>");
        return ExitCode::from(2);
    };
    match run(path, seed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash child: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &str, seed: u64) -> Result<(), StoreError> {
    let mut store = evomem_store::SqliteStore::open(path)?;
    // The power-loss test's control lowers durability on purpose, to show
    // that the test notices.
    if std::env::var("EVOMEM_CRASH_SYNCHRONOUS").as_deref() == Ok("normal") {
        store.weaken_durability_for_power_loss_control()?;
    }
    let mut engine = Engine::open(Box::new(store))?.with_snapshot_every(16);
    let mut rng = SplitMix(seed);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for _ in 0..100_000 {
        let first = engine.log().len() as u64 + 1;
        let n = 1 + rng.below(6);
        let ids: Vec<MemoryId> = engine.state().iter_all().map(|r| r.id.clone()).collect();
        let mut gone: BTreeSet<MemoryId> = BTreeSet::new();
        let mut ops = Vec::new();
        for i in 0..n {
            let label = format!("batch:{first}:{i}:{n}");
            let live: Vec<&MemoryId> = ids.iter().filter(|id| !gone.contains(*id)).collect();
            let op = if live.len() < 4 || rng.below(3) == 0 {
                let user = rng.below(5);
                let v: Vec<f32> = (0..8)
                    .map(|k| ((seed + k + first) % 7) as f32 / 7.0)
                    .collect();
                MemoryOp::Create {
                    record: MemoryRecord::new(
                        MemoryId::new(format!("r{first}_{i}")),
                        Namespace::user(&format!("u{user}")),
                        RecordKind::Event,
                        format!("event {first}/{i} of u{user}"),
                        LogicalTime(first),
                    )
                    .with_embedding(Embedding {
                        model: "crash-v1-8".into(),
                        vector: v,
                    }),
                }
            } else {
                let a = live[rng.below(live.len() as u64) as usize].clone();
                let b = live[rng.below(live.len() as u64) as usize].clone();
                match rng.below(4) {
                    0 if a != b => MemoryOp::Link {
                        from: a,
                        to: b,
                        relation: "next".into(),
                        weight: 0.5,
                    },
                    1 if live.len() > 50 => {
                        gone.insert(a.clone());
                        MemoryOp::Forget { id: a }
                    }
                    2 => MemoryOp::SetUtility {
                        id: a,
                        value: rng.below(100) as f64 / 10.0,
                    },
                    _ => MemoryOp::AdjustStrength {
                        id: a,
                        delta: 0.125,
                        evidence_delta: 1,
                    },
                }
            };
            ops.push(PlannedOp::new(op, label, "crash test"));
        }
        engine.apply("crash-child", ops, LogicalTime(first))?;
        let acked = engine.log().len();
        if writeln!(out, "ACK {acked}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(());
        }
    }
    Ok(())
}
