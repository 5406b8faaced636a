//! Integration tests of evomem-index: one conformance suite run against every
//! `VectorIndex` implementation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conformance;
