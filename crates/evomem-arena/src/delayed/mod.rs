//! Arena B of the TIDE paper (`tide-recommendation-feedback-evolves-memory`,
//! §4.5): a delayed-feedback rating stream.
//!
//! ml-100k ratings are replayed in time order; before each rating is
//! revealed the method predicts it on the 1–5 scale, and its label reaches
//! the method only δ of the user's own ratings later (δ ∈ {0, 5, 10, 20}).
//! Memory updates may use matured labels only; a leak canary test (a spy
//! policy that checks the maturity of every label it is shown) holds the
//! driver to it.
//!
//! - [`stream`]: the replay order and the maturity [`stream::Schedule`];
//! - [`baseline`]: μ, item biases, user offsets and genre similarity from
//!   matured labels, which the offline methods build on;
//! - [`methods`]: the arena-local methods (static, full history, retrieval,
//!   reflection, a Mem0-style manager, biased MF), each a `Policy`;
//!   `memrl` and `tide` come from the family table;
//! - [`run`]: the driver (observe → feedback → recall → predict);
//! - [`prompt`]: the prompts rendered for token estimates;
//! - [`report`]: MAE, RMSE, MEG@δ, Δdelay, negative transfer, memory and
//!   token figures, the Markdown report, JSON and SVG plots.
//!
//! Command: `evomem arena delayed --data DIR --delays 0,5,10,20 --out OUT`.

pub mod baseline;
pub mod methods;
pub mod prompt;
pub mod report;
pub mod run;
pub mod stream;

pub use report::{markdown, run_arena, write_report, DelayedReport};
pub use run::{DelayedConfig, DelayedInputs};
