//! Integration tests of evomem-policy, one module per policy family.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod atomrec;
mod baselines;
mod mars;
mod utility;
