//! The policy family table: one row per family (see
//! [`crate::registry::family_table`] for the row syntax). The registry,
//! `--policy` parsing, `evomem ablate`, the `--help` list, `inspect`,
//! `explain` and the conformance suite all read this table and nothing else.
//!
//! Every family lives here, one module (a file, or a folder for a large
//! family) per family; the baselines share one folder, each a row.

pub mod baselines;

crate::family_table! {
    baselines::NO_MEMORY,
    baselines::RANDOM,
    baselines::POP,
    baselines::ITEMKNN,
    baselines::BPR,
    baselines::recent::FAMILY,
    mod mars,
    mod atomrec,
    mod memrl,
    mod romerl,
    mod seqmem,
    mod tide,
}
