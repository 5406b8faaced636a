//! # evomem-kit
//!
//! The policy kit: the pieces every memory policy needs, written once, one
//! layer below the policies (MARS, AtomRec, RoMeRL, MemRL, TIDE and the
//! baselines) so that no policy brings its own idiom for a shared job.
//!
//! - [`RoleCaller`]: the one way a policy calls an LLM role. The hub repairs
//!   and falls back on transient errors and malformed answers (and counts
//!   both); permanent errors, replay-cache misses, failed offline algorithms
//!   and a backend that fails every call come back as
//!   [`evomem_core::PolicyError::Role`] and fail the run.
//! - [`Batch`]: any [`Batchable`] role answered several inputs per call.
//! - [`EmbeddingCache`]: the per-run text → vector cache with batched warm-up.
//! - [`Observed`]: co-consumption counts (who consumed what), by user and item.
//! - [`holdout`]: validation decisions held out of what a policy observed
//!   (each user's latest observed event), the one rule run-time fits share.
//! - [`pairwise`]: pairwise logistic regression, the fit of a linear
//!   ranker's weights on validation decisions.
//! - [`walk`]: forward co-consumption between items and the two-step walk
//!   over it (seqmem's walk head, MARS's and AtomRec's walk terms).
//! - [`drift`]: preference-drift scores and terciles, used by every report.
//! - [`rating`]: the one rating estimator (μ + b_u + b_i) every
//!   rating-prediction method builds on.
//! - `testing` (feature `test-utils`): the one deterministic test embedder.
//!
//! The word tokenizer, stop words and folder slug live in
//! [`evomem_core::text`], since the offline rank role (in `evomem-llm`, below
//! this crate) uses them too.

pub mod batch;
pub mod drift;
pub mod embeddings;
pub mod holdout;
pub mod observed;
pub mod pairwise;
pub mod rating;
pub mod role;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
pub mod walk;

pub use batch::{Batch, Batchable};
pub use embeddings::EmbeddingCache;
pub use observed::Observed;
pub use role::RoleCaller;
