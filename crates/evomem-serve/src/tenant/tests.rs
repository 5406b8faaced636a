//! The tenant's tests across its rooms: the add pipeline, and above all
//! that reads answer while writes commit, catch up or rewrite the log
//! (the locking of the module docs), on SQLite and on PostgreSQL
//! (`EVOMEM_TEST_PG_URL`); with the hooks the code calls under `cfg(test)`.

use super::commit::BULK_MIN;
use super::*;
use evomem_core::{LoggedOp, MemoryState};
use evomem_store::rewrite::without_namespace;
use std::collections::BTreeSet;
use std::time::Duration;

/// Delay before the graphs of a reopened tenant are built
/// ([`Tenant::build_graphs_after_open`]), so that a test can write
/// while they are.
pub(super) static GRAPH_BUILD_DELAY_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// An add holding a memory of this text sleeps 1.5 s while staged (the
/// core read lock held), after saying so through [`STAGING`].
const STAGE_SLOWLY: &str = "stage me slowly";
static STAGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

const COMMIT_SLOWLY: &str = "commit me slowly";
static COMMITTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// When the slow commit's staging ended.
static COMMITTED_AT: Mutex<Option<std::time::Instant>> = Mutex::new(None);

pub(super) fn stage_slowly_if_asked(jobs: &[AddJob]) {
    let has = |text: &str| {
        jobs.iter()
            .any(|j| j.memories.iter().any(|m| m.text == text))
    };
    if has(STAGE_SLOWLY) {
        STAGING.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(1500));
    }
    if has(COMMIT_SLOWLY) {
        COMMITTING.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(1500));
        *lock(&COMMITTED_AT) = Some(std::time::Instant::now());
    }
}

/// A hashing embedder under another model id (same dimension).
struct Renamed(evomem_embed::HashingEmbedder);
impl evomem_core::Embedder for Renamed {
    fn model_id(&self) -> &str {
        "another-model"
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
        self.0.embed(t)
    }
}

/// A data folder written with one embedder does not open under another
/// (f32 and int8 MiniLM, or MiniLM and hashing, have the same
/// dimension): the tenant refuses with both model ids named instead of
/// mixing two models' vectors in one index, and the data stays.
#[test]
fn a_tenant_refuses_to_open_under_another_embedder_and_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mem = NewMemory {
        text: "likes quiet jazz".into(),
        metadata: Map::new(),
    };
    let added = rt.block_on(t.add("a".into(), vec![mem])).unwrap().remove(0);
    t.close();
    drop(t);
    let shared = |embedder: Arc<dyn evomem_core::Embedder>| {
        Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            embedder,
        )
    };
    let other = Arc::new(Renamed(evomem_embed::HashingEmbedder::new(8)));
    let err = Tenant::open("t", Arc::new(shared(other)))
        .err()
        .expect("opened under another model")
        .to_string();
    assert!(
        err.contains("another-model") && err.contains("hash") && err.contains(added.id.as_str()),
        "{err}"
    );
    let again = Tenant::open(
        "t",
        Arc::new(shared(Arc::new(evomem_embed::HashingEmbedder::new(8)))),
    )
    .unwrap();
    assert_eq!(again.get(&added.id).unwrap().text, "likes quiet jazz");
    again.close();
}

/// When each text was embedded.
struct WhenEmbedded(Mutex<Vec<(String, std::time::Instant)>>);
impl evomem_core::Embedder for WhenEmbedded {
    fn model_id(&self) -> &str {
        "when"
    }
    fn dim(&self) -> usize {
        2
    }
    fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
        let now = std::time::Instant::now();
        lock(&self.0).extend(t.iter().map(|s| (s.to_string(), now)));
        Ok(t.iter().map(|s| vec![1.0, s.len() as f32]).collect())
    }
}

/// Issue 41 (the pipeline): the add pipeline embeds the next group
/// while the last one commits. A serial writer embedded the second
/// add only after the first had committed (1.5 s here).
#[test]
fn the_next_add_group_embeds_while_the_last_one_commits() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(WhenEmbedded(Mutex::new(Vec::new())));
    let shared = Shared::for_test(
        ServeConfig {
            data_dir: dir.path().to_path_buf(),
            ..ServeConfig::default()
        },
        seen.clone(),
    );
    let t = Tenant::open("pipe", Arc::new(shared)).unwrap();
    let mem = |text: &str| NewMemory {
        text: text.to_string(),
        metadata: Map::new(),
    };
    let first = {
        let t = t.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(t.add("a".into(), vec![mem(COMMIT_SLOWLY)]))
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !COMMITTING.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        COMMITTING.load(Ordering::SeqCst),
        "the first add never committed"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let second = rt.block_on(t.add("a".into(), vec![mem("second")])).unwrap();
    let first = first.join().unwrap();
    let first_done = lock(&COMMITTED_AT).unwrap();
    assert_eq!((first.unwrap().len(), second.len()), (1, 1));
    let embedded = lock(&seen.0)
        .iter()
        .find(|(s, _)| s == "second")
        .map(|(_, at)| *at)
        .unwrap();
    assert!(
        embedded < first_done,
        "the second add was embedded only after the first had committed"
    );
    t.close();
}

/// Issue 37: an add makes and validates its records under the core
/// read lock (the write gate keeps other writers out), so the tenant's
/// reads answer meanwhile and do not see them. Taking the write lock
/// for the staging makes the reads wait the 1.5 s out.
#[test]
fn reads_answer_while_an_add_is_staged() {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mem = |text: &str| NewMemory {
        text: text.to_string(),
        metadata: Map::new(),
    };
    let old = rt
        .block_on(t.add("a".into(), vec![mem("old one")]))
        .unwrap()
        .remove(0);
    let adder = {
        let t = t.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(t.add("a".into(), vec![mem(STAGE_SLOWLY)]))
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !STAGING.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(STAGING.load(Ordering::SeqCst), "the add never staged");
    let (tx, rx) = mpsc::channel();
    {
        let t = t.clone();
        std::thread::spawn(move || {
            let q = t.shared.embedder.embed_one(STAGE_SLOWLY).unwrap();
            let hits: Vec<String> = t
                .search("a", &q, 5, &Map::new())
                .unwrap()
                .into_iter()
                .map(|h| h.memory.text)
                .collect();
            tx.send((hits, t.get(&old.id).is_ok())).unwrap();
        });
    }
    let during = rx.recv_timeout(Duration::from_millis(1000));
    assert_eq!(adder.join().unwrap().unwrap().len(), 1);
    assert_eq!(
        during,
        Ok((vec!["old one".to_string()], true)),
        "a read waited for an add's staging, or saw it before its commit"
    );
}

/// Records the scheduling of the thread that embeds a group.
struct WhereEmbedded(Mutex<Vec<(bool, Option<i32>, usize)>>);
impl evomem_core::Embedder for WhereEmbedded {
    fn model_id(&self) -> &str {
        "where"
    }
    fn dim(&self) -> usize {
        2
    }
    fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
        lock(&self.0).push((
            crate::priority::current_is_idle(),
            crate::priority::current_nice(),
            t.len(),
        ));
        Ok(t.iter().map(|s| vec![1.0, s.len() as f32]).collect())
    }
}

/// Issue 37 (noisy neighbours): a large add group's bulk steps run at
/// bulk priority (`SCHED_IDLE` under `serve.bulk_idle`, else niceness
/// `serve.bulk_nice`), while the writer thread, which installs under
/// the core lock, keeps normal priority; a small group runs inline.
#[cfg(target_os = "linux")]
#[test]
fn a_large_add_group_embeds_at_bulk_priority_and_the_writer_does_not() {
    let own = crate::priority::current_nice().unwrap_or(0);
    let want = own + 3;
    if want > 19 {
        return;
    }
    for idle in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(WhereEmbedded(Mutex::new(Vec::new())));
        let shared = Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                bulk_nice: want,
                bulk_idle: idle,
                ..ServeConfig::default()
            },
            seen.clone(),
        );
        let t = Tenant::open("nicew", Arc::new(shared)).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        for n in [1, BULK_MIN] {
            let mems = (0..n)
                .map(|i| NewMemory {
                    text: format!("x{i}"),
                    metadata: Map::new(),
                })
                .collect();
            rt.block_on(t.add("a".into(), mems)).unwrap();
        }
        let seen: Vec<_> = lock(&seen.0).clone();
        let small = seen.iter().find(|s| s.2 == 1).unwrap();
        let large = seen.iter().find(|s| s.2 == BULK_MIN).unwrap();
        assert_eq!(
            (small.0, small.1),
            (false, Some(own)),
            "a small group left the writer"
        );
        if idle {
            assert!(large.0, "a large group did not embed under SCHED_IDLE");
        } else {
            assert_eq!((large.0, large.1), (false, Some(want)));
        }
        // Thread names are cut to 15 bytes in /proc.
        assert_eq!(
            crate::priority::tests::nice_of_thread("evomem-writer-n"),
            Some(own),
            "the writer thread was lowered"
        );
        t.close();
    }
}

/// Issue 37: a restart built the HNSW graphs of large namespaces
/// before answering (40-60 s per start with 20,000+ vectors). Now the
/// reopened tenant answers at once, exactly, and builds them behind;
/// a write to a large namespace meanwhile waits in the exact tier and
/// must be in that namespace's graph once the graph built behind is
/// put in (it was built without the write).
#[test]
fn a_restart_answers_before_its_graphs_are_built_and_keeps_writes_made_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let shared = Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                hnsw_threshold: 50,
                ..ServeConfig::default()
            },
            Arc::new(evomem_embed::HashingEmbedder::new(16)),
        );
        Tenant::open("graphs", Arc::new(shared)).unwrap()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mems = |user: &str, n: usize| -> Vec<NewMemory> {
        (0..n)
            .map(|i| NewMemory {
                text: format!("{user} note number {i} about topic {}", i % 17),
                metadata: Map::new(),
            })
            .collect()
    };
    let t = open();
    for user in ["big", "other"] {
        rt.block_on(t.add(user.into(), mems(user, 300))).unwrap();
    }
    rt.block_on(t.add("small".into(), mems("small", 10)))
        .unwrap();
    assert_eq!(t.read().index.graph_count(), 2);
    t.close();
    drop(t);

    GRAPH_BUILD_DELAY_MS.store(400, Ordering::SeqCst);
    let t = open();
    // Answers at once, exactly.
    assert_eq!(
        t.read().index.graph_count(),
        0,
        "graphs were built before answering"
    );
    let q = t
        .shared
        .embedder
        .embed_one("big note number 7 about topic 7")
        .unwrap();
    let hits = t.search("big", &q, 1, &Map::new()).unwrap();
    assert_eq!(hits[0].memory.text, "big note number 7 about topic 7");
    // A write to `big` while the graphs are built behind.
    let text = "a late note written during the build";
    rt.block_on(t.add(
        "big".into(),
        vec![NewMemory {
            text: text.into(),
            metadata: Map::new(),
        }],
    ))
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while t.read().index.graph_count() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(600));
    GRAPH_BUILD_DELAY_MS.store(0, Ordering::SeqCst);
    assert_eq!(t.read().index.graph_count(), 2, "big and other have graphs");
    let q = t.shared.embedder.embed_one(text).unwrap();
    let hits = t.search("big", &q, 1, &Map::new()).unwrap();
    assert_eq!(
        hits.first().map(|h| h.memory.text.as_str()),
        Some(text),
        "the graph built behind replaced one holding a later write"
    );
    t.verify().unwrap();
    t.close();
}

fn tenant(dir: &std::path::Path) -> Arc<Tenant> {
    open_tenant(
        "t",
        ServeConfig {
            data_dir: dir.to_path_buf(),
            ..ServeConfig::default()
        },
    )
}

/// Tenant `name` of an instance with `config` (hashing embedder of 8,
/// offline roles, seed 1).
fn open_tenant(name: &str, config: ServeConfig) -> Arc<Tenant> {
    let shared = Shared::for_test(config, Arc::new(evomem_embed::HashingEmbedder::new(8)));
    Tenant::open(name, Arc::new(shared)).unwrap()
}

/// Tenant `name` of a new instance on the PostgreSQL at `url`.
fn pg_tenant(dir: &std::path::Path, url: &str, name: &str, sync_reads: bool) -> Arc<Tenant> {
    open_tenant(
        name,
        ServeConfig {
            data_dir: dir.to_path_buf(),
            store: url.to_string(),
            sync_reads,
            ..ServeConfig::default()
        },
    )
}

/// `EVOMEM_TEST_PG_URL`, or `None` with a notice (an error under CI).
fn pg_test_url() -> Option<String> {
    match std::env::var("EVOMEM_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "EVOMEM_TEST_PG_URL is not set under CI"
            );
            eprintln!("notice: EVOMEM_TEST_PG_URL not set; PostgreSQL test skipped");
            None
        }
    }
}

/// A new memory without metadata.
fn mem(text: &str) -> NewMemory {
    NewMemory {
        text: text.to_string(),
        metadata: Map::new(),
    }
}

/// `/readyz` and `/metrics` read `index_len` on async worker threads:
/// it must answer while a long write holds the core lock.
#[test]
fn the_index_size_is_read_without_the_core_lock() {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant(dir.path());
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let t = t.clone();
        std::thread::spawn(move || {
            let _w = t.write();
            held_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
        })
    };
    held_rx.recv().unwrap();
    let (tx, rx) = mpsc::channel();
    {
        let t = t.clone();
        std::thread::spawn(move || tx.send(t.index_len()).unwrap());
    }
    let got = rx.recv_timeout(Duration::from_secs(20));
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(got, Ok(0), "index_len waited for the write lock");
    t.close();
}

/// Issue 57: writes took one of the tenant's worker permits and then
/// waited at the write gate, so writes queued behind a long user deletion
/// held every permit and the tenant's reads answered 503. One permit, a
/// queue of one: while the gate is held (as by a rewrite), two deletes
/// are sent, and a get still answers; the deletes land once it opens.
#[test]
fn reads_answer_while_writes_wait_behind_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let t = open_tenant(
        "gated",
        ServeConfig {
            data_dir: dir.path().to_path_buf(),
            tenant_workers: 1,
            queue_depth: 1,
            ..ServeConfig::default()
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let added = rt
        .block_on(t.add("a".into(), vec![mem("one"), mem("two"), mem("three")]))
        .unwrap();
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let t = t.clone();
        std::thread::spawn(move || {
            let _gate = t.gate().unwrap();
            held_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
        })
    };
    held_rx.recv().unwrap();
    // One delete at a time into the queue of one: the first takes the write
    // turn (and waits at the gate), the second waits for the turn. Sent
    // together, the second could count itself in before the first left the
    // queue and be refused: a race of the test, not of the service.
    let wait_until = |what: &str, ok: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !ok() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    let mut deletes = Vec::new();
    for (i, m) in added[..2].iter().enumerate() {
        let (tt, id) = (t.clone(), m.id.clone());
        deletes.push(rt.spawn(async move { tt.blocking_write(move |t| t.delete(&id)).await }));
        if i == 0 {
            wait_until("the first delete takes the write turn", &|| {
                t.write_turn.available_permits() == 0 && t.write_waiting.load(Ordering::SeqCst) == 0
            });
        } else {
            wait_until("the second delete waits for the turn", &|| {
                t.write_waiting.load(Ordering::SeqCst) == 1
            });
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let id = added[2].id.clone();
    let read = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), t.blocking(move |t| t.get(&id))).await
    });
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    let read = read.expect("a read waited behind writes at the gate");
    assert_eq!(
        read.map(|m| m.text).map_err(|e| e.to_string()),
        Ok("three".to_string()),
        "a read was refused while writes waited at the gate"
    );
    for d in deletes {
        assert!(rt.block_on(d).unwrap().unwrap().deleted);
    }
    t.close();
}

/// A model backend that always fails, with words a client must not see.
struct FailingModel;
impl evomem_core::LanguageModel for FailingModel {
    fn id(&self) -> String {
        "failing".into()
    }
    fn complete(
        &self,
        _: &evomem_core::ChatRequest,
    ) -> Result<evomem_core::ChatResponse, evomem_core::LlmError> {
        Err(evomem_core::LlmError::Permanent(
            "401 from provider: key sk-live-SECRET for org acme".into(),
        ))
    }
}

/// Issue 57: an LLM role's error text (a provider's answer: account names,
/// key fragments, echoed prompts) was sent to the client in a 422. It now
/// goes to the log under a request id; the client gets 502 `llm_error`
/// and the id.
#[test]
fn an_llm_failure_is_logged_not_sent_to_the_client() {
    use axum::response::IntoResponse;
    let dir = tempfile::tempdir().unwrap();
    let hub = LlmHub::with_model(Arc::new(FailingModel), evomem_llm::CacheSettings::off()).unwrap();
    let shared = Shared {
        hub: Arc::new(hub),
        ..Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            Arc::new(evomem_embed::HashingEmbedder::new(8)),
        )
    };
    let t = Tenant::open("llm", Arc::new(shared)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // `mars` fails in its own roles (recall), `no-memory` in the rank role.
    for policy in ["mars", "no-memory"] {
        let req: RecommendRequest = serde_json::from_value(serde_json::json!({
            "user_id": "u",
            "policy": policy,
            "candidates": [{"id": "i1", "title": "Kind of Blue"}, {"id": "i2", "title": "Blue Train"}],
        }))
        .unwrap();
        let err = t.recommend(req).expect_err("an LLM role failed");
        let resp = err.into_response();
        let status = resp.status().as_u16();
        let body = rt
            .block_on(axum::body::to_bytes(resp.into_body(), usize::MAX))
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 502, "{policy}: {body}");
        assert!(
            !body.contains("SECRET") && !body.contains("acme"),
            "{policy}: {body}"
        );
        assert!(body.contains("request_id"), "{policy}: {body}");
    }
    t.close();
}

/// A log rewrite (user deletion, hard delete) must not hold the core
/// lock while it plans and writes: reads of other users (search, list,
/// `as_of`) answer meanwhile, while writers wait for it (they would
/// otherwise commit to a log about to be replaced) and land after it.
#[test]
fn reads_answer_while_a_rewrite_runs_and_writes_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = rt
        .block_on(t.add("a".into(), vec![mem("a one"), mem("a two")]))
        .unwrap();
    let b = rt
        .block_on(t.add("b".into(), vec![mem("b one"), mem("b two")]))
        .unwrap();
    assert_eq!(a.len(), 2);
    let now = now_ms() + 1;
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let rewriter = {
        let t = t.clone();
        std::thread::spawn(move || {
            t.rewrite(
                move |log, every| {
                    started_tx.send(()).unwrap();
                    let _ = release_rx.recv_timeout(Duration::from_secs(60));
                    Ok(without_namespace(log, &Namespace::user("a"), every)?)
                },
                |_, _| Ok(Vec::new()),
            )
        })
    };
    started_rx.recv().unwrap();
    // Reads of user b answer while the rewrite plans.
    let (tx, rx) = mpsc::channel();
    {
        let t = t.clone();
        std::thread::spawn(move || {
            let q = t.shared.embedder.embed_one("b one").unwrap();
            let hits = t.search("b", &q, 5, &Map::new()).map(|h| h.len());
            let listed = t
                .user_memories("b", Some(now), usize::MAX, None)
                .map(|l| l.memories.len());
            tx.send((hits.ok(), listed.ok())).unwrap();
        });
    }
    let read = rx.recv_timeout(Duration::from_secs(20));
    // A write waits for the rewrite.
    let (wtx, wrx) = mpsc::channel();
    {
        let t = t.clone();
        let id = b[0].id.clone();
        std::thread::spawn(move || wtx.send(t.delete(&id).is_ok()).unwrap());
    }
    let early = wrx.recv_timeout(Duration::from_millis(300));
    release_tx.send(()).unwrap();
    let report = rewriter.join().unwrap().unwrap().0;
    let wrote = wrx.recv_timeout(Duration::from_secs(20));
    assert_eq!(read, Ok((Some(2), Some(2))), "reads waited for the rewrite");
    assert!(early.is_err(), "a write committed during the rewrite");
    assert_eq!(wrote, Ok(true), "the write after the rewrite failed");
    assert_eq!(report.records_removed, 2);
    // The store, the engine and the index agree after both.
    t.verify().unwrap();
    let l = t.user_memories("b", None, usize::MAX, None).unwrap();
    assert_eq!(l.memories.len(), 1);
    assert!(t
        .user_memories("a", None, usize::MAX, None)
        .unwrap()
        .memories
        .is_empty());
    t.close();
}

/// A store whose next commit (or, with `armed_loads`, next log read),
/// once armed, says so and then waits to be released: a slow disk, a
/// slow snapshot or a slow catch-up query, on purpose.
struct SlowCommits {
    inner: Box<dyn MemoryStore>,
    armed: Arc<std::sync::atomic::AtomicBool>,
    armed_loads: Arc<std::sync::atomic::AtomicBool>,
    entered: mpsc::Sender<()>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl SlowCommits {
    /// Wrap `inner`; returns the store, its two triggers, and the
    /// channels that say "entered" and release it.
    #[allow(clippy::type_complexity)]
    fn wrap(
        inner: Box<dyn MemoryStore>,
    ) -> (
        Self,
        Arc<std::sync::atomic::AtomicBool>,
        Arc<std::sync::atomic::AtomicBool>,
        mpsc::Receiver<()>,
        mpsc::Sender<()>,
    ) {
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let armed_loads = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let store = SlowCommits {
            inner,
            armed: armed.clone(),
            armed_loads: armed_loads.clone(),
            entered: entered_tx,
            release: Mutex::new(release_rx),
        };
        (store, armed, armed_loads, entered_rx, release_tx)
    }

    fn hold_if(&self, trigger: &std::sync::atomic::AtomicBool) {
        if trigger.swap(false, Ordering::SeqCst) {
            self.entered.send(()).unwrap();
            let _ = lock(&self.release).recv_timeout(Duration::from_secs(60));
        }
    }
}

impl MemoryStore for SlowCommits {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn commit(&mut self, c: &evomem_store::Commit<'_>) -> Result<(), evomem_store::StoreError> {
        self.hold_if(&self.armed);
        self.inner.commit(c)
    }
    fn committed_key(&mut self, key: &str) -> Result<Option<[u8; 32]>, evomem_store::StoreError> {
        self.inner.committed_key(key)
    }
    fn lock_writers(&mut self) -> Result<(), evomem_store::StoreError> {
        self.inner.lock_writers()
    }
    fn unlock_writers(&mut self) -> Result<(), evomem_store::StoreError> {
        self.inner.unlock_writers()
    }
    fn load_ops(&mut self, a: u64, b: u64) -> Result<Vec<LoggedOp>, evomem_store::StoreError> {
        self.hold_if(&self.armed_loads);
        self.inner.load_ops(a, b)
    }
    fn last_seq(&mut self) -> Result<u64, evomem_store::StoreError> {
        self.inner.last_seq()
    }
    fn prefix_end(&mut self, t: LogicalTime) -> Result<u64, evomem_store::StoreError> {
        self.inner.prefix_end(t)
    }
    fn latest_snapshot(
        &mut self,
        upto: u64,
    ) -> Result<Option<evomem_store::Snapshot>, evomem_store::StoreError> {
        self.inner.latest_snapshot(upto)
    }
    fn snapshot_seqs(&mut self) -> Result<Vec<u64>, evomem_store::StoreError> {
        self.inner.snapshot_seqs()
    }
    fn load_records(&mut self) -> Result<Vec<MemoryRecord>, evomem_store::StoreError> {
        self.inner.load_records()
    }
    fn replace_all(
        &mut self,
        log: &[LoggedOp],
        state: &MemoryState,
        snapshots: &[evomem_store::Snapshot],
    ) -> Result<(), evomem_store::StoreError> {
        self.inner.replace_all(log, state, snapshots)
    }
}

/// Readers must not wait for a write's commit (issue 37: a 1,000-memory
/// add and its snapshot committed under the core write lock, and every
/// search of the tenant waited). While the store holds an add's commit,
/// and then a delete's, a search, a get and a listing of the same user
/// answer, and show neither write (nothing uncommitted is visible);
/// once released, both writes land and the store agrees.
#[test]
fn reads_answer_while_a_write_commits_and_do_not_see_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let old = rt
        .block_on(t.add("a".into(), vec![mem("old one")]))
        .unwrap()
        .remove(0);
    let (store, armed, _, entered_rx, release_tx) = SlowCommits::wrap(Box::new(
        evomem_store::SqliteStore::open(t.sqlite_path()).unwrap(),
    ));
    t.write().engine = Engine::open(Box::new(store)).unwrap();
    // What user a's reads show, from another thread, within 20 s.
    let reads = |t: &Arc<Tenant>| {
        let (tx, rx) = mpsc::channel();
        let t = t.clone();
        let old_id = old.id.clone();
        std::thread::spawn(move || {
            let q = t.shared.embedder.embed_one("new two").unwrap();
            let hits: Vec<String> = t
                .search("a", &q, 5, &Map::new())
                .unwrap()
                .into_iter()
                .map(|h| h.memory.text)
                .collect();
            let got = t.get(&old_id).is_ok();
            let listed = t.user_memories("a", None, usize::MAX, None).unwrap();
            tx.send((hits, got, listed.memories.len())).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(20))
    };
    armed.store(true, Ordering::SeqCst);
    let adder = {
        let t = t.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(t.add("a".into(), vec![mem("new two")]))
        })
    };
    entered_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let during_add = reads(&t);
    release_tx.send(()).unwrap();
    assert_eq!(adder.join().unwrap().unwrap().len(), 1);
    assert_eq!(
        during_add,
        Ok((vec!["old one".to_string()], true, 1)),
        "reads waited for an add's commit, or saw it uncommitted"
    );
    armed.store(true, Ordering::SeqCst);
    let deleter = {
        let t = t.clone();
        let id = old.id.clone();
        std::thread::spawn(move || t.delete(&id).map(|d| d.deleted))
    };
    entered_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let during_delete = reads(&t);
    release_tx.send(()).unwrap();
    assert!(deleter.join().unwrap().unwrap());
    let during_delete = during_delete.expect("reads waited for a delete's commit");
    assert!(during_delete.1, "a read saw the uncommitted delete");
    assert_eq!(during_delete.2, 2);
    let after = reads(&t).unwrap();
    assert_eq!(
        (after.0, after.1, after.2),
        (vec!["new two".to_string()], false, 1)
    );
    t.verify().unwrap();
    t.close();
}

/// Issue 37, PostgreSQL: the write gate was per process, so a peer
/// instance's write that landed while a log rewrite (a user deletion)
/// planned was overwritten by the rewritten log. Two instances of one
/// tenant on one schema: while instance a's rewrite is held, instance
/// b's add must wait (the store's writer lock), and land after it.
#[test]
fn a_peer_instance_write_during_a_rewrite_is_not_lost() {
    let Some(url) = pg_test_url() else { return };
    evomem_store::PostgresStore::drop_schema(&url, "evomem_t_pgpeers").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sync_reads = ServeConfig::default().sync_reads;
    let instance = || pg_tenant(dir.path(), &url, "pgpeers", sync_reads);
    let (a, b) = (instance(), instance());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(a.add("x".into(), vec![mem("x one")])).unwrap();
    rt.block_on(a.add("y".into(), vec![mem("y one")])).unwrap();
    // b catches up (its log now ends where a's rewrite will change it).
    assert_eq!(
        b.user_memories("y", None, usize::MAX, None)
            .unwrap()
            .memories
            .len(),
        1
    );
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let rewriter = {
        let a = a.clone();
        std::thread::spawn(move || {
            a.rewrite(
                move |log, every| {
                    started_tx.send(()).unwrap();
                    let _ = release_rx.recv_timeout(Duration::from_secs(60));
                    Ok(without_namespace(log, &Namespace::user("x"), every)?)
                },
                |_, _| Ok(Vec::new()),
            )
            .map(|r| r.0.records_removed)
        })
    };
    started_rx.recv().unwrap();
    let (added_tx, added_rx) = mpsc::channel();
    let adder = {
        let b = b.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let r = rt.block_on(b.add("y".into(), vec![mem("y two")]));
            added_tx.send(r.is_ok()).unwrap();
        })
    };
    let early = added_rx.recv_timeout(Duration::from_millis(700));
    release_tx.send(()).unwrap();
    assert_eq!(rewriter.join().unwrap().unwrap(), 1);
    let added = early.or_else(|_| added_rx.recv_timeout(Duration::from_secs(30)));
    adder.join().unwrap();
    assert_eq!(added, Ok(true), "the peer's add failed");
    for (name, t) in [("a", &a), ("b", &b)] {
        let texts: BTreeSet<String> = t
            .user_memories("y", None, usize::MAX, None)
            .unwrap()
            .memories
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(
            texts,
            BTreeSet::from(["y one".to_string(), "y two".to_string()]),
            "instance {name}: the peer's write was lost"
        );
        assert!(t
            .user_memories("x", None, usize::MAX, None)
            .unwrap()
            .memories
            .is_empty());
    }
    assert!(
        early.is_err(),
        "the peer's add committed during the rewrite"
    );
    // b found the log rewritten by a (its idempotent answers with
    // text then stop replaying); a made the rewrite itself.
    assert_eq!((a.peer_rewrites(), b.peer_rewrites()), (0, 1));
    a.verify().unwrap();
    for t in [a, b] {
        t.close();
        std::thread::spawn(move || drop(t)).join().unwrap();
    }
}

/// Restart cost with large namespaces, for the docs (not a guard):
/// three users of `EVOMEM_RESTART_N` (25,000) memories each, threshold
/// 20,000; prints the time the old way (the index built one vector at
/// a time, graphs grown by inserts, before answering), the time to
/// answer now, and the time until the graphs built behind are in.
/// `cargo test --release -p evomem-serve --lib restart_cost -- --ignored --nocapture`
#[test]
#[ignore]
fn restart_cost_with_large_namespaces() {
    let n: usize = std::env::var("EVOMEM_RESTART_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25_000);
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let shared = Shared::for_test(
            ServeConfig {
                data_dir: dir.path().to_path_buf(),
                ..ServeConfig::default()
            },
            Arc::new(evomem_embed::HashingEmbedder::new(384)),
        );
        Tenant::open("restart", Arc::new(shared)).unwrap()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = open();
    for user in ["u1", "u2", "u3"] {
        for chunk in 0..n.div_ceil(1000) {
            let mems: Vec<NewMemory> = (chunk * 1000..((chunk + 1) * 1000).min(n))
                .map(|i| NewMemory {
                    text: format!("{user} memory {i} about {} and {}", i % 97, i % 13),
                    metadata: Map::new(),
                })
                .collect();
            rt.block_on(t.add(user.into(), mems)).unwrap();
        }
    }
    let (state, threshold) = {
        let c = t.read();
        (c.engine.state().clone(), c.threshold)
    };
    t.close();
    drop(t);
    let t0 = std::time::Instant::now();
    let mut old = tenant_index("hashing", 384, threshold);
    for r in state.iter_all().filter(|r| is_kind(r, MEMORY_KIND)) {
        if let Some(e) = &r.embedding {
            old.add(r.id.clone(), r.namespace.clone(), &e.vector)
                .unwrap();
        }
    }
    let old_ms = t0.elapsed().as_millis();
    let t0 = std::time::Instant::now();
    let t = open();
    let answer_ms = t0.elapsed().as_millis();
    while t.read().index.graph_count() < 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let graphs_ms = t0.elapsed().as_millis();
    eprintln!(
        "restart over 3 x {n} memories: old index build {old_ms} ms (graphs: {}); \
         now answering after {answer_ms} ms, graphs in after {graphs_ms} ms",
        old.graph_count()
    );
    t.close();
}

/// Issue 37, PostgreSQL: catching up with other instances' writes ran
/// its store queries under the core write lock, and reads with
/// `sync_reads` (the default) took the write gate, so they waited for
/// every local write's commit. Three instances of one tenant on one
/// schema: `a` writes as a peer; while `c`'s store holds a writer's
/// catch-up query, `c`'s reads (`sync_reads` off) answer; while `b`'s
/// store holds a writer's commit, `b`'s reads (`sync_reads` on) answer,
/// show the peer's write that the writer caught up with, and not the
/// uncommitted one. Both writes land once released.
#[test]
fn postgres_reads_answer_while_a_write_catches_up_or_commits() {
    let Some(url) = pg_test_url() else { return };
    evomem_store::PostgresStore::drop_schema(&url, PG_READS_SCHEMA).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let instance = |sync_reads| pg_tenant(dir.path(), &url, "pgreads", sync_reads);
    let (a, b) = (instance(true), instance(true));
    let first = rt
        .block_on(a.add("u".into(), vec![mem("first")]))
        .unwrap()
        .remove(0);
    let c = instance(false);
    // c (`sync_reads` off): a writer's catch-up query is held; c's reads
    // answer, and once released c has caught up with a's write.
    assert_eq!(texts(&c), BTreeSet::from(["first".to_string()]));
    let during_query = reads_while_a_write_is_held(
        &rt,
        &url,
        (&a, &c),
        Held::CatchUpQuery,
        ("peer two", ("v", "c's own")),
        &first.id,
    );
    assert_eq!(
        during_query.map(|r| r.0),
        Ok(true),
        "a read waited for a writer's catch-up query"
    );
    assert!(texts(&c).contains("peer two"), "c did not catch up");
    // b (`sync_reads` on): a writer's commit is held after it caught up;
    // b's reads answer, show a's write and not the uncommitted one.
    let during_commit = reads_while_a_write_is_held(
        &rt,
        &url,
        (&a, &b),
        Held::Commit,
        ("peer three", ("u", "b's own")),
        &first.id,
    )
    .expect("a synced read waited for a local commit");
    let peers = ["first", "peer two", "peer three"].map(String::from);
    assert_eq!(
        during_commit.1,
        BTreeSet::from(peers.clone()),
        "a synced read missed a peer's write or saw an uncommitted one"
    );
    let all: BTreeSet<String> = peers.into_iter().chain(["b's own".to_string()]).collect();
    assert_eq!(texts(&b), all);
    assert_eq!(texts(&a), all, "a did not catch up with b");
    as_of_answers_while_the_core_lock_is_held(&b, &all);
    for t in [a, b, c] {
        t.verify().unwrap();
        t.close();
        std::thread::spawn(move || drop(t)).join().unwrap();
    }
}

/// The schema of tenant `pgreads`.
const PG_READS_SCHEMA: &str = "evomem_t_pgreads";

/// The texts of user u's memories on `t`.
fn texts(t: &Tenant) -> BTreeSet<String> {
    t.user_memories("u", None, usize::MAX, None)
        .unwrap()
        .memories
        .into_iter()
        .map(|m| m.text)
        .collect()
}

/// From another thread, within 10 s: get `id` (found or not), list
/// user u.
fn reads_on_another_thread(
    t: &Arc<Tenant>,
    id: &str,
) -> Result<(bool, BTreeSet<String>), mpsc::RecvTimeoutError> {
    let (tx, rx) = mpsc::channel();
    let t = t.clone();
    let id = id.to_string();
    std::thread::spawn(move || {
        let got = t.get(&id).is_ok();
        let _ = tx.send((got, texts(&t)));
    });
    rx.recv_timeout(Duration::from_secs(10))
}

/// Put `t`'s engine on a [`SlowCommits`] over a new connection to
/// `pgreads`; returns its commit and load triggers and its channels.
fn hold_store(
    t: &Arc<Tenant>,
    url: &str,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    Arc<std::sync::atomic::AtomicBool>,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let inner = evomem_store::PostgresStore::connect(url, PG_READS_SCHEMA).unwrap();
    let (store, armed, armed_loads, entered, release) = SlowCommits::wrap(Box::new(inner));
    let mut core = t.write();
    core.engine = Engine::open(Box::new(store)).unwrap();
    core.rebuild().unwrap();
    drop(core);
    (armed, armed_loads, entered, release)
}

/// Add `text` for `user` on `t` from a thread of its own.
fn add_on_thread(
    t: &Arc<Tenant>,
    user: &'static str,
    text: &'static str,
) -> std::thread::JoinHandle<Result<Vec<MemoryOut>, ApiError>> {
    let t = t.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(t.add(user.into(), vec![mem(text)]))
    })
}

/// What [`reads_while_a_write_is_held`] holds a writer at.
enum Held {
    /// Its catch-up query (the store's load of other instances' ops).
    CatchUpQuery,
    /// Its commit, after it caught up.
    Commit,
}

/// `a` writes `peer` for user u; then a writer on `t` adds `own` (user,
/// text) and is held at `held` while `t` reads from another thread
/// (get `first`, list user u); once released, its write lands. Returns
/// the reads.
fn reads_while_a_write_is_held(
    rt: &tokio::runtime::Runtime,
    url: &str,
    (a, t): (&Arc<Tenant>, &Arc<Tenant>),
    held: Held,
    (peer, own): (&str, (&'static str, &'static str)),
    first: &str,
) -> Result<(bool, BTreeSet<String>), mpsc::RecvTimeoutError> {
    let (commits, loads, entered, release) = hold_store(t, url);
    rt.block_on(a.add("u".into(), vec![mem(peer)])).unwrap();
    match held {
        Held::CatchUpQuery => loads.store(true, Ordering::SeqCst),
        Held::Commit => commits.store(true, Ordering::SeqCst),
    }
    let writer = add_on_thread(t, own.0, own.1);
    entered.recv_timeout(Duration::from_secs(20)).unwrap();
    let during = reads_on_another_thread(t, first);
    release.send(()).unwrap();
    assert_eq!(writer.join().unwrap().unwrap().len(), 1);
    during
}

/// `as_of` replays on a second connection: it answers while another
/// request holds b's core write lock (and write gate), and sees every
/// instance's writes up to its time.
fn as_of_answers_while_the_core_lock_is_held(b: &Arc<Tenant>, all: &BTreeSet<String>) {
    let held = b.write();
    let (tx, rx) = mpsc::channel();
    {
        let b = b.clone();
        std::thread::spawn(move || {
            let l = b.user_memories("u", Some(now_ms() + 1000), usize::MAX, None);
            let _ = tx.send(l.map(|l| {
                l.memories
                    .into_iter()
                    .map(|m| m.text)
                    .collect::<BTreeSet<String>>()
            }));
        });
    }
    let listed = rx.recv_timeout(Duration::from_secs(10));
    drop(held);
    assert_eq!(
        &listed
            .expect("an as_of listing waited for the core lock")
            .unwrap(),
        all
    );
}

/// The resident-bytes estimate ([`TenantCore::resident_estimate`]) grows
/// with every memory added and stays within a sane factor of the data it
/// stands for (text, metadata and vectors of MiniLM's width, 384): at
/// least that data, at most ten times it; and it is the same after a
/// reopen.
#[test]
fn resident_bytes_grow_with_memories_within_a_sane_factor() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = |dir: &std::path::Path| {
        let config = ServeConfig {
            data_dir: dir.to_path_buf(),
            ..ServeConfig::default()
        };
        let e = Arc::new(evomem_embed::HashingEmbedder::new(384));
        Tenant::open("t", Arc::new(Shared::for_test(config, e))).unwrap()
    };
    let t = tenant(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let empty = t.resident_bytes();
    let dim = t.embedder().dim();
    let mut data = 0u64;
    let mut last = empty;
    for round in 0..5 {
        let mems: Vec<NewMemory> = (0..40)
            .map(|i| {
                let mut metadata = Map::new();
                metadata.insert("round".into(), Value::from(round));
                NewMemory {
                    text: format!("round {round}: a memory about thing number {i} and its story"),
                    metadata,
                }
            })
            .collect();
        for m in &mems {
            data +=
                (m.text.len() + serde_json::to_vec(&m.metadata).unwrap().len() + 4 * dim) as u64;
        }
        rt.block_on(t.add("u".into(), mems)).unwrap();
        let now = t.resident_bytes();
        assert!(now > last, "round {round}: {now} after {last}");
        last = now;
        let grown = now - empty;
        assert!(
            grown >= data && grown <= 10 * data,
            "round {round}: estimate grew {grown} for {data} bytes of data"
        );
    }
    t.close();
    drop(t);
    let t = tenant(dir.path());
    assert_eq!(
        t.resident_bytes(),
        last,
        "the estimate differs after a reopen"
    );
    t.close();
}
