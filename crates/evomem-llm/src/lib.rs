//! # evomem-llm
//!
//! Runs typed [`evomem_core::Role`]s either offline or through a language
//! model, with repair, fallback, a record/replay cache and token accounting.
//!
//! - [`LlmHub`]: the executor policies call (`hub.run(&role, &input, user)`);
//!   backends are chosen per role (`offline`, `openai:<model>@<base_url>`).
//! - [`openai::OpenAiCompatible`] (feature `http`, default): a client for any
//!   server speaking the OpenAI chat-completions API.
//! - [`cache`]: SQLite record/replay cache (`off`, `read-write`, `replay-only`).
//! - [`accounting`]: calls and tokens per role and per user.
//! - [`rank::RankRole`]: the rank role, with a documented offline scorer.
//! - [`fixture`] (feature `test-utils`): a scriptable chat-completions server
//!   on 127.0.0.1 for tests and for `evomem llm fixture-server`.
//!
//! ```
//! use evomem_llm::{CacheSettings, LlmHub};
//! let hub = LlmHub::from_spec("offline", CacheSettings::off()).unwrap();
//! assert!(hub.is_offline());
//! assert_eq!(hub.accounting_json()["totals"]["calls"], 0);
//! ```

pub mod accounting;
pub mod cache;
#[cfg(feature = "test-utils")]
pub mod fixture;
pub mod gbnf;
pub mod hub;
pub mod json;
#[cfg(feature = "http")]
pub mod openai;
pub mod rank;
pub mod spec;
pub mod template;

pub use accounting::{Accounting, Counters};
pub use cache::{CacheMode, CacheSettings};
pub use hub::{note_parser_repair, Backend, LlmHub, DEFAULT_MAX_CONSECUTIVE_FAILURES};
pub use rank::{RankCandidate, RankInput, RankOutput, RankRole};
pub use spec::{BackendSpec, LlmConfig, Secret};
