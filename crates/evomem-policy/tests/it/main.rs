//! Integration tests of evomem-policy, one module per policy family, plus
//! `ml100k`: the real-data reader and leave-one-out harness they share.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod atomrec;
mod baselines;
mod mars;
mod ml100k;
mod seqmem;
mod tide;
mod utility;
