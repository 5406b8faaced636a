//! # evomem-train
//!
//! The trained baselines the MARS and AtomRec papers compare memory with,
//! inside evomem's harness: [`sasrec`] (Kang and McAuley, ICDM 2018) and
//! [`lightgcn`] (He et al., SIGIR 2020), written on candle's tensors and
//! autodiff (pure Rust: no libtorch, no Python at run time).
//!
//! Why a crate of its own: the models are plain numeric code over item and
//! user indices (no `Policy`, no memory, no I/O). `evomem-policy` wraps each
//! as a family row (`sasrec`, `lightgcn`) that feeds them exactly what the
//! protocol let it observe.
//!
//! **Determinism.** Every draw (initial weights, shuffles, dropout masks,
//! negatives) comes from ChaCha8 streams seeded from the run seed; candle's
//! own CPU random numbers cannot be seeded and are never used. Training
//! runs inside a private rayon pool of [`TrainEnv::threads`] threads, so the
//! same seed and thread count give the same weights bit for bit
//! ([`sasrec::SasRec::checksum`]).
//!
//! **Progress.** Libraries here do no I/O: a trainer reports each epoch
//! (loss, validation NDCG@10) to the process's [`TrainEnv::observer`], which
//! the CLI sets to a progress bar.

pub mod ce;
pub mod env;
pub mod lightgcn;
mod nn;
pub mod rng;
pub mod sasrec;
pub mod valid;

pub use env::{configure, TrainEnv, TrainEvent, TrainObserver};
pub use valid::{Stopping, TrainReport, Validation};

/// Errors of a trainer.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A tensor operation failed (shape mismatch, out-of-range index).
    #[error("tensor operation failed: {0}")]
    Tensor(#[from] candle_core::Error),
    /// The data cannot train the model (too few users, items or targets).
    #[error("cannot train {model}: {why}")]
    Data {
        /// Which model.
        model: &'static str,
        /// What is missing.
        why: String,
    },
    /// A setting is out of range.
    #[error("{model}: {why}")]
    Config {
        /// Which model.
        model: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The thread pool could not be built.
    #[error("cannot build a training thread pool: {0}")]
    Pool(String),
}
