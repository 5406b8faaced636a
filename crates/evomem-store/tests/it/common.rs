//! Shared helpers: random op generation against a live state, backends.

use evomem_core::*;
use evomem_store::{InMemoryStore, MemoryStore};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Text marker that identifies everything user `u` wrote.
pub fn marker(user: usize) -> String {
    format!("secret{user:03}x")
}

/// Namespaces a generated record may live in.
pub fn namespace_for(rng: &mut ChaCha8Rng, users: usize) -> (Namespace, Option<usize>) {
    match rng.gen_range(0..10) {
        0 => (Namespace::shared(), None),
        1 => (Namespace::new("collab"), None),
        2 => (Namespace::item(&format!("i{}", rng.gen_range(0..5))), None),
        _ => {
            let u = rng.gen_range(0..users);
            (Namespace::user(&format!("u{u}")), Some(u))
        }
    }
}

fn unit_vector(rng: &mut ChaCha8Rng, dim: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    normalize(&mut v);
    v
}

/// A fresh record in a random namespace; texts and fields carry the owner's
/// marker so that raw scans can find them.
pub fn random_record(
    rng: &mut ChaCha8Rng,
    id: String,
    users: usize,
    at: LogicalTime,
) -> MemoryRecord {
    let (ns, owner) = namespace_for(rng, users);
    random_record_in(rng, id, ns, owner, at)
}

/// A fresh record in namespace `ns` owned by user `owner` (if private).
pub fn random_record_in(
    rng: &mut ChaCha8Rng,
    id: String,
    ns: Namespace,
    owner: Option<usize>,
    at: LogicalTime,
) -> MemoryRecord {
    let who = owner.map(marker).unwrap_or_else(|| "public".to_string());
    let kinds = [
        RecordKind::Event,
        RecordKind::PreferenceChunk,
        RecordKind::Profile,
        RecordKind::Atom,
        RecordKind::UtilitySlot,
        RecordKind::Guideline,
        RecordKind::Custom("note".into()),
    ];
    let kind = kinds[rng.gen_range(0..kinds.len())].clone();
    let mut r = MemoryRecord::new(MemoryId::new(id), ns, kind, format!("text of {who}"), at)
        .with_field("tag", serde_json::json!(format!("tag-{who}")))
        .with_strength(rng.gen_range(-1.0..1.0));
    r.utility = rng.gen_range(-2.0..2.0);
    if rng.gen_bool(0.6) {
        r = r.with_embedding(Embedding {
            model: "test-v1-8".into(),
            vector: unit_vector(rng, 8),
        });
    }
    r
}

/// One random op that is usually valid against `state` (sometimes not, on
/// purpose). `next_id` numbers new records.
pub fn random_op(
    rng: &mut ChaCha8Rng,
    state: &MemoryState,
    next_id: &mut u64,
    users: usize,
    at: LogicalTime,
) -> MemoryOp {
    let ids: Vec<MemoryId> = state.iter_all().map(|r| r.id.clone()).collect();
    let pick = |rng: &mut ChaCha8Rng| -> MemoryId {
        if ids.is_empty() || rng.gen_bool(0.03) {
            MemoryId::new("missing")
        } else {
            ids[rng.gen_range(0..ids.len())].clone()
        }
    };
    let choice = if ids.len() < 3 {
        0
    } else {
        rng.gen_range(0..12)
    };
    match choice {
        0..=2 => {
            *next_id += 1;
            let mut r = random_record(rng, format!("m{next_id}"), users, at);
            if !ids.is_empty() && rng.gen_bool(0.3) {
                r.links.push(Link {
                    target: pick(rng),
                    relation: "seen with".into(),
                    weight: 0.5,
                });
            }
            MemoryOp::Create { record: r }
        }
        3 => {
            let mut fields = BTreeMap::new();
            fields.insert("k".to_string(), serde_json::json!(rng.gen_range(0..100)));
            if rng.gen_bool(0.3) {
                fields.insert("tag".to_string(), serde_json::Value::Null);
            }
            MemoryOp::UpdateFields {
                id: pick(rng),
                fields,
                text: None,
                embedding: rng.gen_bool(0.3).then(|| Embedding {
                    model: "test-v1-8".into(),
                    vector: unit_vector(rng, 8),
                }),
            }
        }
        4 | 5 => MemoryOp::Link {
            from: pick(rng),
            to: pick(rng),
            relation: "related".into(),
            weight: rng.gen_range(0.0..1.0),
        },
        6 => MemoryOp::Unlink {
            from: pick(rng),
            to: pick(rng),
        },
        7 => MemoryOp::AdjustStrength {
            id: pick(rng),
            delta: rng.gen_range(-0.5..0.5),
            evidence_delta: rng.gen_range(0..3),
        },
        8 => MemoryOp::SetUtility {
            id: pick(rng),
            value: rng.gen_range(-3.0..3.0),
        },
        9 => {
            let into = pick(rng);
            let src = pick(rng);
            MemoryOp::Merge {
                into,
                sources: vec![src],
                text: None,
                strength: Some(rng.gen_range(-1.0..1.0)),
            }
        }
        10 => {
            if rng.gen_bool(0.5) {
                MemoryOp::Forget { id: pick(rng) }
            } else {
                MemoryOp::SetStatus {
                    id: pick(rng),
                    status: RecordStatus::Promoted,
                }
            }
        }
        _ => {
            let id = pick(rng);
            *next_id += 1;
            // The new content belongs to the slot's owner.
            let ns = state
                .get(&id)
                .map(|r| r.namespace.clone())
                .unwrap_or_else(Namespace::shared);
            let owner = ns
                .as_str()
                .strip_prefix("user:u")
                .and_then(|u| u.parse::<usize>().ok());
            MemoryOp::Replace {
                id,
                record: random_record_in(rng, format!("m{next_id}"), ns, owner, at),
            }
        }
    }
}

/// Apply one random batch to `engine`; returns ops applied. Ignores
/// rejection (the prefix before a rejected op stays applied).
pub fn random_batch(
    engine: &mut evomem_store::Engine,
    rng: &mut ChaCha8Rng,
    next_id: &mut u64,
    users: usize,
    at: LogicalTime,
    len: usize,
) {
    let mut shadow = engine.state().clone();
    let mut ops = Vec::new();
    for _ in 0..len {
        let op = random_op(rng, &shadow, next_id, users, at);
        let _ = shadow.apply(&op, at);
        ops.push(PlannedOp::new(op, "test", "random"));
    }
    match engine.apply("test", ops, at) {
        Ok(_) | Err(evomem_store::StoreError::Rejected { .. }) => {}
        Err(e) => panic!("store error: {e}"),
    }
}

/// How a conformance run gets stores.
pub trait Backend {
    /// Short name.
    fn name(&self) -> String;
    /// A fresh, empty store called `key`.
    fn fresh(&mut self, key: &str) -> Box<dyn MemoryStore>;
    /// The store `key` reopened (None when the backend cannot reopen).
    fn reopen(&mut self, key: &str) -> Option<Box<dyn MemoryStore>>;
}

/// The in-memory backend.
pub struct MemBackend;

impl Backend for MemBackend {
    fn name(&self) -> String {
        "memory".into()
    }
    fn fresh(&mut self, _key: &str) -> Box<dyn MemoryStore> {
        Box::new(InMemoryStore::new())
    }
    fn reopen(&mut self, _key: &str) -> Option<Box<dyn MemoryStore>> {
        None
    }
}

/// SQLite files in a temporary directory.
pub struct SqliteBackend {
    pub dir: tempfile::TempDir,
}

impl Default for SqliteBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl SqliteBackend {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub fn path(&self, key: &str) -> std::path::PathBuf {
        self.dir.path().join(format!("{key}.sqlite"))
    }
}

impl Backend for SqliteBackend {
    fn name(&self) -> String {
        "sqlite".into()
    }
    fn fresh(&mut self, key: &str) -> Box<dyn MemoryStore> {
        Box::new(evomem_store::SqliteStore::open(self.path(key)).unwrap())
    }
    fn reopen(&mut self, key: &str) -> Option<Box<dyn MemoryStore>> {
        Some(Box::new(
            evomem_store::SqliteStore::open(self.path(key)).unwrap(),
        ))
    }
}

/// One schema per store in the database of `EVOMEM_TEST_PG_URL`; schemas
/// are dropped when the backend is dropped.
pub struct PgBackend {
    pub url: String,
    prefix: String,
    schemas: Vec<String>,
}

impl PgBackend {
    pub fn new(url: String, tag: &str) -> Self {
        Self {
            url,
            prefix: format!("t_{tag}_{}", std::process::id()),
            schemas: Vec::new(),
        }
    }
    pub fn schema(&self, key: &str) -> String {
        format!("{}_{key}", self.prefix)
    }
}

impl Backend for PgBackend {
    fn name(&self) -> String {
        "postgres".into()
    }
    fn fresh(&mut self, key: &str) -> Box<dyn MemoryStore> {
        let schema = self.schema(key);
        evomem_store::PostgresStore::drop_schema(&self.url, &schema).unwrap();
        self.schemas.push(schema.clone());
        Box::new(evomem_store::PostgresStore::connect(&self.url, &schema).unwrap())
    }
    fn reopen(&mut self, key: &str) -> Option<Box<dyn MemoryStore>> {
        Some(Box::new(
            evomem_store::PostgresStore::connect(&self.url, &self.schema(key)).unwrap(),
        ))
    }
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        for s in &self.schemas {
            let _ = evomem_store::PostgresStore::drop_schema(&self.url, s);
        }
    }
}

/// `EVOMEM_TEST_PG_URL`, or `None` after a loud notice; panics when it is
/// missing and `CI` is set, so that CI never skips PostgreSQL silently.
pub fn pg_url(test: &str) -> Option<String> {
    match std::env::var("EVOMEM_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "{test}: EVOMEM_TEST_PG_URL is not set but CI is; run `eval \"$(scripts/ci-postgres.sh)\"` first"
                );
            }
            eprintln!(
                "\n!!!!!!!! {test}: EVOMEM_TEST_PG_URL is not set; PostgreSQL checks SKIPPED (run `eval \"$(scripts/ci-postgres.sh)\"`) !!!!!!!!\n"
            );
            None
        }
    }
}
