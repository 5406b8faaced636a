//! The policy family table: one row per family (see
//! the `family_table!` macro in `registry.rs` for the row syntax). The registry,
//! `--policy` parsing, `evomem ablate`, the `--help` list, `inspect`,
//! `explain` and the conformance suite all read this table and nothing else.
//!
//! Every family lives here, one module (a file, or a folder for a large
//! family) per family; the baselines share one folder, each a row, and so
//! do the trained baselines (`trained/`: `sasrec`, `lightgcn`).

pub mod baselines;
pub mod trained;

crate::family_table! {
    baselines::NO_MEMORY,
    baselines::RANDOM,
    baselines::POP,
    baselines::ITEMKNN,
    baselines::BPR,
    baselines::recent::FAMILY,
    trained::sasrec::FAMILY,
    trained::lightgcn::FAMILY,
    mod mars,
    mod atomrec,
    mod memrl,
    mod romerl,
    mod seqmem,
    mod tide,
}
