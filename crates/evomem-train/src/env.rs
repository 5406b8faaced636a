//! The process-wide training environment: the thread count and the
//! progress observer, set once by the binary from its settings.
//!
//! Why process-wide: a policy is built from its spec and the run's shared
//! services, which carry neither; the thread count is a setting of the run
//! (`--threads`, `threads` in the settings file), not of the model, and the
//! progress bar belongs to the CLI. A trainer reads both when it starts.

use std::sync::{Arc, RwLock};

/// One finished epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainEvent {
    /// `sasrec` or `lightgcn`.
    pub model: &'static str,
    /// Epoch just finished (1-based).
    pub epoch: usize,
    /// The epoch cap.
    pub epochs: usize,
    /// Mean training loss of the epoch.
    pub loss: f64,
    /// Validation NDCG@10 after the epoch (`None` without validation).
    pub valid_ndcg10: Option<f64>,
    /// The best validation epoch so far.
    pub best_epoch: usize,
    /// Seconds since the training round started (a measurement: it is
    /// reported to the observer, never written into `metrics.json`).
    pub seconds: f64,
    /// True on the last event of a training round.
    pub done: bool,
}

/// Receives every [`TrainEvent`].
pub type TrainObserver = Arc<dyn Fn(&TrainEvent) + Send + Sync>;

/// Threads and progress for every trainer of the process.
#[derive(Clone, Default)]
pub struct TrainEnv {
    /// Training threads; 0 = every core.
    pub threads: usize,
    /// Progress receiver.
    pub observer: Option<TrainObserver>,
}

impl std::fmt::Debug for TrainEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainEnv")
            .field("threads", &self.threads)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

static ENV: RwLock<Option<TrainEnv>> = RwLock::new(None);

/// Set the environment (the binary does this once, from its settings).
pub fn configure(env: TrainEnv) {
    if let Ok(mut g) = ENV.write() {
        *g = Some(env);
    }
}

/// The environment in force (defaults when never configured).
pub fn current() -> TrainEnv {
    ENV.read().ok().and_then(|g| g.clone()).unwrap_or_default()
}

/// The thread count a trainer asked for `threads` (0 = the environment's,
/// and the environment's 0 = every core) uses.
pub fn threads(threads: usize) -> usize {
    let t = if threads > 0 {
        threads
    } else {
        current().threads
    };
    if t > 0 {
        t
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Report `ev` to the observer, if any.
pub fn report(ev: &TrainEvent) {
    if let Some(o) = current().observer {
        o(ev);
    }
}

/// A rayon pool of `threads` threads (see [`threads`]).
pub fn pool(threads_asked: usize) -> Result<rayon::ThreadPool, crate::TrainError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads(threads_asked))
        .build()
        .map_err(|e| crate::TrainError::Pool(e.to_string()))
}
