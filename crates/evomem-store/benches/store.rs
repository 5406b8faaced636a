//! Store benchmark: `cargo bench -p evomem-store --bench store`.
//!
//! Prints, in one run:
//! - ingest ops/s, single-op batches and 100-op batches, for the in-memory,
//!   SQLite and (when `EVOMEM_TEST_PG_URL` is set) PostgreSQL stores, with
//!   the ratio to the in-memory baseline of the same run;
//! - `state_at(t)` time against log length, with snapshots and without;
//! - on-disk bytes per record.
//!
//! Each op creates a record with a 64-dimension embedding and ~60 bytes of
//! text, or adjusts / links an existing one (3 creates : 1 update). Set
//! `EVOMEM_BENCH_SCALE` (default 1.0) to shrink or grow every size.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use evomem_core::*;
use evomem_store::{Engine, PostgresStore};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::time::Instant;

const DIM: usize = 64;

fn scale(n: usize) -> usize {
    let s: f64 = std::env::var("EVOMEM_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * s) as usize).max(1)
}

struct Gen {
    rng: ChaCha8Rng,
    next: u64,
    /// Probability that an op creates a record (else it links or adjusts).
    create: f64,
}

impl Gen {
    fn new(seed: u64, create: f64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            next: 0,
            create,
        }
    }
    fn op(&mut self) -> PlannedOp {
        let at = LogicalTime(self.next);
        let op = if self.next < 4 || self.rng.gen_bool(self.create) {
            self.next += 1;
            let mut v: Vec<f32> = (0..DIM).map(|_| self.rng.gen_range(-1.0f32..1.0)).collect();
            normalize(&mut v);
            let user = self.rng.gen_range(0..100);
            MemoryOp::Create {
                record: MemoryRecord::new(
                    MemoryId::new(format!("r{}", self.next)),
                    Namespace::user(&format!("u{user}")),
                    RecordKind::PreferenceChunk,
                    format!(
                        "user {user} liked item {} for its pacing and soundtrack",
                        self.next
                    ),
                    at,
                )
                .with_embedding(Embedding {
                    model: "hash-v1-64".into(),
                    vector: v,
                }),
            }
        } else {
            let a = MemoryId::new(format!("r{}", self.rng.gen_range(1..=self.next)));
            let b = MemoryId::new(format!("r{}", self.rng.gen_range(1..=self.next)));
            if a != b && self.rng.gen_bool(0.5) {
                MemoryOp::Link {
                    from: a,
                    to: b,
                    relation: "co-liked".into(),
                    weight: 0.5,
                }
            } else {
                MemoryOp::AdjustStrength {
                    id: a,
                    delta: 0.1,
                    evidence_delta: 1,
                }
            }
        };
        PlannedOp::new(op, "bench", "bench")
    }
}

/// ops/s of ingesting `n` ops in batches of `batch`.
fn ingest(engine: &mut Engine, n: usize, batch: usize, seed: u64) -> f64 {
    ingest_mix(engine, n, batch, seed, 0.75)
}

/// Like [`ingest`] with a chosen share of creates.
fn ingest_mix(engine: &mut Engine, n: usize, batch: usize, seed: u64, create: f64) -> f64 {
    let mut g = Gen::new(seed, create);
    let start = Instant::now();
    let mut done = 0;
    let mut t = 0;
    while done < n {
        let k = batch.min(n - done);
        let ops: Vec<PlannedOp> = (0..k).map(|_| g.op()).collect();
        engine.apply("bench", ops, LogicalTime(t)).unwrap();
        done += k;
        t += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let pg = std::env::var("EVOMEM_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let schema = format!("bench_{}", std::process::id());
    if pg.is_none() {
        println!("!! EVOMEM_TEST_PG_URL is not set: PostgreSQL rows are skipped (eval \"$(scripts/ci-postgres.sh)\")");
    }
    println!("# evomem-store benchmark (ops: 3 creates with {DIM}-dim vectors : 1 link/adjust)\n");
    ingest_table(tmp.path(), pg.as_deref(), &schema);
    time_travel_table(tmp.path());
    bytes_table(tmp.path(), pg.as_deref(), &schema);
}

/// Ingest ops/s per store, single-op and 100-op batches.
fn ingest_table(tmp: &Path, pg: Option<&str>, schema: &str) {
    let (single_mem_n, single_db_n, batched_n) = (scale(20_000), scale(300), scale(5_000));
    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    {
        let mut e = Engine::in_memory();
        let s = ingest(&mut e, single_mem_n, 1, 1);
        let mut e = Engine::in_memory();
        let b = ingest(&mut e, batched_n, 100, 1);
        rows.push(("memory".into(), s, b));
    }
    {
        let mut e = Engine::sqlite(tmp.join("single.sqlite")).unwrap();
        let s = ingest(&mut e, single_db_n, 1, 1);
        let mut e = Engine::sqlite(tmp.join("batched.sqlite")).unwrap();
        let b = ingest(&mut e, batched_n, 100, 1);
        rows.push(("sqlite".into(), s, b));
    }
    if let Some(url) = pg {
        let _ = PostgresStore::drop_schema(url, &format!("{schema}_s"));
        let _ = PostgresStore::drop_schema(url, &format!("{schema}_b"));
        let mut e = Engine::postgres_in(url, &format!("{schema}_s")).unwrap();
        let s = ingest(&mut e, single_db_n, 1, 1);
        let mut e = Engine::postgres_in(url, &format!("{schema}_b")).unwrap();
        let b = ingest(&mut e, batched_n, 100, 1);
        rows.push(("postgres".into(), s, b));
    }
    let (base_s, base_b) = (rows[0].1, rows[0].2);
    println!("## Ingest (durable on return; single: {single_mem_n} ops in memory, {single_db_n} in databases; batched: {batched_n} ops in batches of 100)\n");
    println!("| store | single ops/s | vs memory | batched ops/s | vs memory | batched / single |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, s, b) in &rows {
        println!(
            "| {name} | {s:.0} | {:.4} | {b:.0} | {:.4} | {:.1} |",
            s / base_s,
            b / base_b,
            b / s
        );
    }
}

/// `state_at(t)` time against log length, with snapshots and without.
fn time_travel_table(tmp: &Path) {
    println!("\n## state_at(t) against log length (update-heavy log: 10% creates, 90% links/adjusts; t = 3/4 of the log; mean of 5 calls)\n");
    println!("Snapshots every max(256, live records) ops; \"replayed\" = ops replayed after the snapshot used.\n");
    println!("| store | log ops | live records | snapshots | replayed | with snapshots ms | without ms | without / with |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for &len in &[scale(1_000), scale(4_000), scale(16_000), scale(64_000)] {
        for backend in ["memory", "sqlite"] {
            let mut times = Vec::new();
            let mut info = (0usize, 0usize, 0u64);
            for every in [256u64, 0] {
                let (ms, snapshots) = time_travel_run(tmp, backend, len, every);
                times.push(ms);
                if let Some(s) = snapshots {
                    info = s;
                }
            }
            println!(
                "| {backend} | {len} | {} | {} | {} | {:.2} | {:.2} | {:.1} |",
                info.0,
                info.1,
                info.2,
                times[0],
                times[1],
                times[1] / times[0]
            );
        }
    }
}

/// One log of `len` ops on `backend`, snapshots every `every` ops (0:
/// none): mean ms of `state_at` three quarters in, and with snapshots
/// (live records, snapshots, ops replayed after the one used).
fn time_travel_run(
    tmp: &Path,
    backend: &str,
    len: usize,
    every: u64,
) -> (f64, Option<(usize, usize, u64)>) {
    let mut e = match backend {
        "memory" => Engine::in_memory(),
        _ => Engine::sqlite(tmp.join(format!("tt_{len}_{every}.sqlite"))).unwrap(),
    }
    .with_snapshot_every(every);
    ingest_mix(&mut e, len, 100, 2, 0.1);
    let last_t = e
        .log()
        .last()
        .map(|o| o.provenance.logical_time.0)
        .unwrap_or(0);
    let t = LogicalTime(last_t * 3 / 4);
    let mut info = None;
    if every > 0 {
        let live = e.state().len();
        let s = e.store_mut().unwrap();
        let end = s.prefix_end(t).unwrap();
        let snap = s.latest_snapshot(end).unwrap().map(|x| x.seq).unwrap_or(0);
        info = Some((live, s.snapshot_seqs().unwrap().len(), end - snap));
    }
    let reps = 5;
    let start = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(e.state_at(t).unwrap());
    }
    (start.elapsed().as_secs_f64() * 1000.0 / reps as f64, info)
}

/// On-disk bytes per live record.
fn bytes_table(tmp: &Path, pg: Option<&str>, schema: &str) {
    let n = scale(5_000);
    println!("\n## On-disk bytes per live record ({n} ops, default snapshots; op log + snapshots + records + vectors)\n");
    println!("| store | live records | bytes | bytes / record |");
    println!("|---|---:|---:|---:|");
    let (records, bytes) = sqlite_bytes(tmp, n);
    println!(
        "| sqlite | {records} | {bytes} | {:.0} |",
        bytes as f64 / records as f64
    );
    if let Some(url) = pg {
        let (records, bytes) = postgres_bytes(url, schema, n);
        println!(
            "| postgres | {records} | {bytes} | {:.0} |",
            bytes as f64 / records as f64
        );
        for s in ["s", "b", "z"] {
            let _ = PostgresStore::drop_schema(url, &format!("{schema}_{s}"));
        }
    }
}

/// Live records and bytes (file and WAL, checkpointed) of `n` ops in SQLite.
fn sqlite_bytes(tmp: &Path, n: usize) -> (usize, u64) {
    let path = tmp.join("size.sqlite");
    let records = {
        let mut e = Engine::sqlite(&path).unwrap();
        ingest(&mut e, n, 100, 3);
        e.state().len()
    };
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    drop(conn);
    let bytes = std::fs::metadata(&path).unwrap().len()
        + std::fs::metadata(tmp.join("size.sqlite-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    (records, bytes)
}

/// Live records and bytes (tables after VACUUM) of `n` ops in PostgreSQL.
fn postgres_bytes(url: &str, schema: &str, n: usize) -> (usize, i64) {
    let sch = format!("{schema}_z");
    let _ = PostgresStore::drop_schema(url, &sch);
    let records = {
        let mut e = Engine::postgres_in(url, &sch).unwrap();
        ingest(&mut e, n, 100, 3);
        e.state().len()
    };
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "VACUUM ANALYZE {sch}.ops, {sch}.snapshots, {sch}.records, {sch}.vectors"
    ))
    .ok();
    let bytes: i64 = c
        .query_one(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'",
            &[&sch],
        )
        .unwrap()
        .get(0);
    (records, bytes)
}
