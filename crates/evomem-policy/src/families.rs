//! The policy family table: one row per family (see
//! [`crate::registry::family_table`] for the row syntax). The registry,
//! `--policy` parsing, `evomem ablate`, the `--help` list, `inspect`,
//! `explain` and the conformance suite all read this table and nothing else.

crate::family_table! {
    crate::baselines::NO_MEMORY,
    crate::baselines::RANDOM,
    crate::baselines::POP,
    crate::baselines::ITEMKNN,
    crate::baselines::BPR,
    crate::baselines::recent::FAMILY,
    crate::mars::FAMILY,
    crate::atomrec::FAMILY,
    mod memrl,
    mod romerl,
    mod seqmem,
    mod tide,
}
