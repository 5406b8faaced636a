//! Integration tests of evomem-eval: one binary, one module per topic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bootstrap;
mod common;
mod conformance;
mod end_to_end;
mod fit;
mod leak;
mod metrics;
mod protocol;
mod trained;
