//! Query embedding batched across concurrent requests: searches hand their
//! query text to one thread, which embeds every query waiting (up to
//! `max_batch`) in one forward pass. Alone, a query costs what it cost
//! before; under load, concurrent queries share passes instead of each
//! paying for its own (memory adds are batched the same way by each
//! tenant's writer). The queue is bounded: when `depth` queries wait, a new
//! one is answered 503 `overloaded` at once rather than queued.

use crate::error::ApiError;
use evomem_core::Embedder;
use std::sync::{mpsc, Arc, Mutex};

struct Job {
    text: String,
    reply: tokio::sync::oneshot::Sender<Result<Vec<f32>, ApiError>>,
}

/// The batching query embedder.
pub struct QueryEmbedder {
    tx: Mutex<Option<mpsc::SyncSender<Job>>>,
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
}

use crate::lock;

impl QueryEmbedder {
    /// Start the thread; at most `depth` queries wait for it.
    pub fn start(
        embedder: Arc<dyn Embedder>,
        max_batch: usize,
        depth: usize,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Job>(depth.max(1));
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
                    let texts: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
                    match embedder.embed(&texts) {
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
            })?;
        Ok(Self {
            tx: Mutex::new(Some(tx)),
            handle: Mutex::new(Some(handle)),
        })
    }

    /// Embed one query, batched with whatever else is waiting.
    pub async fn embed(&self, text: String) -> Result<Vec<f32>, ApiError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        {
            let tx = lock(&self.tx);
            let Some(tx) = tx.as_ref() else {
                return Err(ApiError::ShuttingDown);
            };
            tx.try_send(Job { text, reply }).map_err(|e| match e {
                mpsc::TrySendError::Full(_) => ApiError::Overloaded {
                    queue: "query embedding",
                    retry_after_s: 1,
                },
                mpsc::TrySendError::Disconnected(_) => ApiError::ShuttingDown,
            })?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::EmbedError;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
        let q = Arc::new(QueryEmbedder::start(slow.clone(), 32, 64).unwrap());
        let mut tasks = Vec::new();
        for i in 0..24 {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                let text = "x".repeat(i + 1);
                (i, q.embed(text).await.unwrap())
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
        assert!(q.embed("late".into()).await.is_err());
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
        let q = Arc::new(QueryEmbedder::start(gate.clone(), 1, 2).unwrap());
        // One query in the (blocked) pass, two waiting: the queue is full.
        let spawn = |q: Arc<QueryEmbedder>| tokio::spawn(async move { q.embed("x".into()).await });
        let mut held = vec![spawn(q.clone())];
        while gate.2.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // Sent from here, so that they are queued before the checks below.
        for _ in 0..2 {
            let (reply, rx) = tokio::sync::oneshot::channel();
            let tx = lock(&q.tx).clone().unwrap();
            tx.try_send(Job {
                text: "x".into(),
                reply,
            })
            .unwrap();
            held.push(tokio::spawn(async move { rx.await.unwrap() }));
        }
        let mut refused = 0;
        for _ in 0..3 {
            match q.embed("y".into()).await {
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
}
