//! Query embedding batched across concurrent requests: searches hand their
//! query text to one thread, which embeds every query waiting (up to
//! `max_batch`) in one forward pass. Alone, a query costs what it cost
//! before; under load, concurrent queries share passes instead of each
//! paying for its own (memory adds are batched the same way by each
//! tenant's writer). The queue is bounded twice: when `depth` queries wait,
//! or when the bytes of text waiting (or being embedded) would pass
//! `max_bytes`, a new query is answered 503 `overloaded` at once rather than
//! queued. The byte bound is the cost bound: a few hundred long queries cost
//! the embedding thread far more than as many short ones (a query longer
//! than the bound is taken only when nothing waits).
//!
//! The queue is shared by every tenant, so each tenant also gets a share
//! of it (`serve.queue_query_tenant_share`, half by default): a tenant may
//! hold at most that fraction of the queries and of the bytes waiting, and
//! its next query is refused (503 `overloaded`) while the rest of the
//! queue stays open to the others. With the default, one tenant's flood
//! of searches leaves half the queue to everyone else; `1/N` guarantees
//! each of N tenants room of its own.
//!
//! A query names the embedder it needs ([`QueryEmbedder::embed_with`]): a
//! tenant that a re-embed moved to another model than the folder's is
//! queued like any other, and one pass embeds the waiting queries of each
//! model in turn.

use crate::error::ApiError;
use evomem_core::Embedder;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

struct Job {
    text: String,
    tenant: String,
    /// The embedder it needs; `None`: the queue's own.
    embedder: Option<Arc<dyn Embedder>>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<f32>, ApiError>>,
}

/// A tenant's queries, and their bytes, queued or being embedded.
#[derive(Default, Clone, Copy, Debug, PartialEq)]
struct Held {
    queries: usize,
    bytes: usize,
}

/// What each tenant holds of the queue (no entry: nothing).
type Shares = Arc<Mutex<HashMap<String, Held>>>;

/// Give back what `tenant` held for one query of `bytes`.
fn release(shares: &Shares, tenant: &str, bytes: usize) {
    let mut map = lock(shares);
    if let Some(h) = map.get_mut(tenant) {
        h.queries = h.queries.saturating_sub(1);
        h.bytes = h.bytes.saturating_sub(bytes);
        if h.queries == 0 {
            map.remove(tenant);
        }
    }
}

/// The batching query embedder.
pub struct QueryEmbedder {
    tx: Mutex<Option<mpsc::SyncSender<Job>>>,
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Bytes of query text queued or being embedded.
    queued_bytes: Arc<AtomicUsize>,
    max_bytes: usize,
    /// Per tenant, what it holds of the queue.
    shares: Shares,
    /// Most queries, and bytes, one tenant may hold.
    tenant_queries: usize,
    tenant_bytes: usize,
}

use crate::lock;

impl QueryEmbedder {
    /// Start the thread; at most `depth` queries, and `max_bytes` bytes of
    /// query text, wait for it, and of those one tenant may hold the
    /// fraction `tenant_share` (at least one query; module docs).
    pub fn start(
        embedder: Arc<dyn Embedder>,
        max_batch: usize,
        depth: usize,
        max_bytes: usize,
        tenant_share: f64,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Job>(depth.max(1));
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let queued = queued_bytes.clone();
        let shares: Shares = Arc::default();
        let held = shares.clone();
        let share = tenant_share.clamp(0.0, 1.0);
        let part = |n: usize| ((n as f64 * share).floor() as usize).clamp(1, n.max(1));
        let handle = std::thread::Builder::new()
            .name("evomem-query-embed".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut jobs = vec![first];
                    while jobs.len() < max_batch.max(1) {
                        match rx.try_recv() {
                            Ok(j) => jobs.push(j),
                            Err(_) => break,
                        }
                    }
                    // One pass per model among the waiting queries, in the
                    // order each model first appears.
                    let mut groups: Vec<(Arc<dyn Embedder>, Vec<Job>)> = Vec::new();
                    for j in jobs {
                        let e = j.embedder.clone().unwrap_or_else(|| embedder.clone());
                        match groups
                            .iter_mut()
                            .find(|(g, _)| g.model_id() == e.model_id())
                        {
                            Some((_, js)) => js.push(j),
                            None => groups.push((e, vec![j])),
                        }
                    }
                    for (e, jobs) in groups {
                        embed_group(e.as_ref(), jobs, &queued, &held);
                    }
                }
            })?;
        Ok(Self {
            tx: Mutex::new(Some(tx)),
            handle: Mutex::new(Some(handle)),
            queued_bytes,
            max_bytes,
            shares,
            tenant_queries: part(depth),
            tenant_bytes: part(max_bytes),
        })
    }

    /// Embed one query of `tenant` with the queue's embedder, batched with
    /// whatever else is waiting (the tests' shorthand; the service names
    /// the tenant's embedder, [`QueryEmbedder::embed_with`]).
    #[cfg(test)]
    pub async fn embed(&self, tenant: &str, text: String) -> Result<Vec<f32>, ApiError> {
        self.queue(tenant, None, text).await
    }

    /// Embed one query of `tenant` with `embedder` (the tenant's, which a
    /// re-embed may have moved off the folder's), batched with the other
    /// queries of its model.
    pub async fn embed_with(
        &self,
        tenant: &str,
        embedder: Arc<dyn Embedder>,
        text: String,
    ) -> Result<Vec<f32>, ApiError> {
        self.queue(tenant, Some(embedder), text).await
    }

    async fn queue(
        &self,
        tenant: &str,
        embedder: Option<Arc<dyn Embedder>>,
        text: String,
    ) -> Result<Vec<f32>, ApiError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let overloaded = || ApiError::Overloaded {
            queue: "query embedding",
            retry_after_s: 1,
        };
        let n = text.len();
        // The tenant's share first: past it, only this tenant is refused.
        {
            let mut map = lock(&self.shares);
            let held = map.entry(tenant.to_string()).or_default();
            let full = held.queries >= self.tenant_queries
                || (held.bytes > 0 && held.bytes + n > self.tenant_bytes);
            if full {
                if held.queries == 0 {
                    map.remove(tenant);
                }
                return Err(overloaded());
            }
            held.queries += 1;
            held.bytes += n;
        }
        let before = self.queued_bytes.fetch_add(n, Ordering::SeqCst);
        if before > 0 && before + n > self.max_bytes {
            self.queued_bytes.fetch_sub(n, Ordering::SeqCst);
            release(&self.shares, tenant, n);
            return Err(overloaded());
        }
        {
            let tx = lock(&self.tx);
            let job = Job {
                text,
                tenant: tenant.to_string(),
                embedder,
                reply,
            };
            let sent = match tx.as_ref() {
                None => Err(ApiError::ShuttingDown),
                Some(tx) => tx.try_send(job).map_err(|e| match e {
                    mpsc::TrySendError::Full(_) => overloaded(),
                    mpsc::TrySendError::Disconnected(_) => ApiError::ShuttingDown,
                }),
            };
            if let Err(e) = sent {
                self.queued_bytes.fetch_sub(n, Ordering::SeqCst);
                release(&self.shares, tenant, n);
                return Err(e);
            }
        }
        rx.await.map_err(|_| ApiError::ShuttingDown)?
    }

    /// Stop after the queries waiting are answered.
    pub fn close(&self) {
        lock(&self.tx).take();
        if let Some(h) = lock(&self.handle).take() {
            let _ = h.join();
        }
    }
}

/// Embed `jobs` (queries of one model) in one pass with `e` and answer each.
fn embed_group(e: &dyn Embedder, jobs: Vec<Job>, queued: &AtomicUsize, held: &Shares) {
    let texts: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    let embedded = e.embed(&texts);
    queued.fetch_sub(bytes, Ordering::SeqCst);
    for j in &jobs {
        release(held, &j.tenant, j.text.len());
    }
    match embedded {
        Ok(vs) if vs.len() == jobs.len() => {
            for (j, v) in jobs.into_iter().zip(vs) {
                let _ = j.reply.send(Ok(v));
            }
        }
        Ok(vs) => {
            let msg = format!("{} vectors for {} queries", vs.len(), jobs.len());
            for j in jobs {
                let _ = j.reply.send(Err(ApiError::Embed(msg.clone())));
            }
        }
        Err(e) => {
            for j in jobs {
                let _ = j.reply.send(Err(ApiError::Embed(e.to_string())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::EmbedError;

    /// Counts forward passes and sleeps in each, so queries pile up.
    struct Slow(AtomicUsize);
    impl Embedder for Slow {
        fn model_id(&self) -> &str {
            "slow"
        }
        fn dim(&self) -> usize {
            1
        }
        fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(20));
            Ok(t.iter().map(|s| vec![s.len() as f32]).collect())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_queries_share_forward_passes_and_get_their_own_vectors() {
        let slow = Arc::new(Slow(AtomicUsize::new(0)));
        let q = Arc::new(QueryEmbedder::start(slow.clone(), 32, 64, 1 << 20, 1.0).unwrap());
        let mut tasks = Vec::new();
        for i in 0..24 {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                let text = "x".repeat(i + 1);
                (i, q.embed("t", text).await.unwrap())
            }));
        }
        for t in tasks {
            let (i, v) = t.await.unwrap();
            assert_eq!(v, vec![(i + 1) as f32], "query {i} got another's vector");
        }
        let passes = slow.0.load(Ordering::SeqCst);
        assert!(
            passes < 24,
            "{passes} passes for 24 concurrent queries: not batched"
        );
        q.close();
        assert!(q.embed("t", "late".into()).await.is_err());
    }

    /// One embedder per model, each counting its passes.
    struct Model(&'static str, usize, AtomicUsize);
    impl Embedder for Model {
        fn model_id(&self) -> &str {
            self.0
        }
        fn dim(&self) -> usize {
            self.1
        }
        fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.2.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(10));
            Ok(t.iter().map(|s| vec![s.len() as f32; self.1]).collect())
        }
    }

    /// Queries of two models in one queue: each is embedded by its own
    /// model (its vector's dimension says which), and each model's waiting
    /// queries share passes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_query_is_embedded_by_its_own_model() {
        let a = Arc::new(Model("a", 2, AtomicUsize::new(0)));
        let b: Arc<dyn Embedder> = Arc::new(Model("b", 3, AtomicUsize::new(0)));
        let q = Arc::new(QueryEmbedder::start(a.clone(), 32, 64, 1 << 20, 1.0).unwrap());
        let mut tasks = Vec::new();
        for i in 0..16 {
            let (q, b) = (q.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                let text = "x".repeat(i + 1);
                let v = if i % 2 == 0 {
                    q.embed("t", text).await.unwrap()
                } else {
                    q.embed_with("u", b, text).await.unwrap()
                };
                (i, v)
            }));
        }
        for t in tasks {
            let (i, v) = t.await.unwrap();
            let dim = if i % 2 == 0 { 2 } else { 3 };
            assert_eq!(v, vec![(i + 1) as f32; dim], "query {i}");
        }
        assert!(
            a.2.load(Ordering::SeqCst) < 8,
            "model a's queries were not batched"
        );
        q.close();
    }

    /// Blocks every forward pass until told to go on.
    struct Gate(Mutex<bool>, std::sync::Condvar, AtomicUsize);
    impl Embedder for Gate {
        fn model_id(&self) -> &str {
            "gate"
        }
        fn dim(&self) -> usize {
            1
        }
        fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.2.fetch_add(1, Ordering::SeqCst);
            let mut open = lock(&self.0);
            while !*open {
                open = match self.1.wait(open) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
            }
            Ok(t.iter().map(|_| vec![0.0]).collect())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_answers_overloaded_instead_of_waiting() {
        let gate = Arc::new(Gate(
            Mutex::new(false),
            std::sync::Condvar::new(),
            AtomicUsize::new(0),
        ));
        let q = Arc::new(QueryEmbedder::start(gate.clone(), 1, 2, 1 << 20, 1.0).unwrap());
        // One query in the (blocked) pass, two waiting: the queue is full.
        let spawn =
            |q: Arc<QueryEmbedder>| tokio::spawn(async move { q.embed("t", "x".into()).await });
        let mut held = vec![spawn(q.clone())];
        while gate.2.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // Sent from here, so that they are queued before the checks below.
        for _ in 0..2 {
            let (reply, rx) = tokio::sync::oneshot::channel();
            let tx = lock(&q.tx).clone().unwrap();
            q.queued_bytes.fetch_add(1, Ordering::SeqCst);
            tx.try_send(Job {
                text: "x".into(),
                tenant: "other".into(),
                embedder: None,
                reply,
            })
            .unwrap();
            held.push(tokio::spawn(async move { rx.await.unwrap() }));
        }
        let mut refused = 0;
        for _ in 0..3 {
            match q.embed("t", "y".into()).await {
                Err(ApiError::Overloaded { .. }) => refused += 1,
                other => panic!("expected overloaded, got {other:?}"),
            }
        }
        assert_eq!(refused, 3);
        *lock(&gate.0) = true;
        gate.1.notify_all();
        for h in held {
            assert!(h.await.unwrap().is_ok(), "queued queries are answered");
        }
        q.close();
    }

    /// The queue is bounded by bytes of text, not only by queries: with
    /// 90 of 100 bytes waiting or in the (blocked) pass, a 30-byte query is
    /// refused at once although only two queries wait of the 64 allowed;
    /// a query larger than the bound is taken when nothing waits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_query_queue_is_bounded_by_bytes_not_only_by_queries() {
        let gate = Arc::new(Gate(
            Mutex::new(false),
            std::sync::Condvar::new(),
            AtomicUsize::new(0),
        ));
        let q = Arc::new(QueryEmbedder::start(gate.clone(), 1, 64, 100, 1.0).unwrap());
        let spawn = |q: Arc<QueryEmbedder>, n: usize| {
            tokio::spawn(async move { q.embed("t", "x".repeat(n)).await })
        };
        let mut held = vec![spawn(q.clone(), 60)];
        while gate.2.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        held.push(spawn(q.clone(), 30));
        while q.queued_bytes.load(Ordering::SeqCst) < 90 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let third = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            q.embed("t", "y".repeat(30)),
        )
        .await;
        match third {
            Ok(Err(ApiError::Overloaded { .. })) => {}
            Ok(other) => panic!("expected overloaded, got {other:?}"),
            Err(_) => panic!("a 30-byte query was queued behind 90 of 100 bytes"),
        }
        *lock(&gate.0) = true;
        gate.1.notify_all();
        for h in held {
            assert!(h.await.unwrap().is_ok(), "queued queries are answered");
        }
        assert_eq!(q.queued_bytes.load(Ordering::SeqCst), 0, "bytes released");
        assert!(
            q.embed("t", "z".repeat(500)).await.is_ok(),
            "a long query alone"
        );
        q.close();
    }

    /// One tenant holds at most its share of the queue: with a share of
    /// half a 4-query queue, tenant a's third query is refused at once
    /// while a's two wait, and tenant b's query is still taken and
    /// answered. Its share given back, a is served again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenant_holds_at_most_its_share_of_the_query_queue() {
        let gate = Arc::new(Gate(
            Mutex::new(false),
            std::sync::Condvar::new(),
            AtomicUsize::new(0),
        ));
        let q = Arc::new(QueryEmbedder::start(gate.clone(), 1, 4, 1 << 20, 0.5).unwrap());
        let spawn = |q: Arc<QueryEmbedder>, tenant: &'static str| {
            tokio::spawn(async move { q.embed(tenant, "x".into()).await })
        };
        let mut held = vec![spawn(q.clone(), "a")];
        while gate.2.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        held.push(spawn(q.clone(), "a"));
        let holds = |t: &str| lock(&q.shares).get(t).copied().unwrap_or_default();
        while holds("a").queries < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let third =
            tokio::time::timeout(std::time::Duration::from_secs(2), q.embed("a", "y".into())).await;
        match third {
            Ok(Err(ApiError::Overloaded { .. })) => {}
            Ok(other) => panic!("a's third query: expected overloaded, got {other:?}"),
            Err(_) => panic!("a's third query was queued past a's share"),
        }
        assert_eq!(holds("a").queries, 2, "a refused query holds nothing");
        held.push(spawn(q.clone(), "b"));
        while holds("b").queries < 1 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        *lock(&gate.0) = true;
        gate.1.notify_all();
        for h in held {
            assert!(h.await.unwrap().is_ok(), "every query taken is answered");
        }
        assert!(lock(&q.shares).is_empty(), "shares given back");
        assert!(q.embed("a", "z".into()).await.is_ok());
        q.close();
    }
}
