//! What each policy family can do, as plain data that needs no policy code.
//!
//! A family's [`Capabilities`] tell the tools around it what to expect of
//! it and of what it leaves behind: which decisions it serves, whether its
//! op log reads as a lifecycle timeline, whether its decisions carry
//! evidence paths, whether its recall shows other users' records (under
//! [`crate::anon_label`]), whether it writes memory at all, and whether the
//! service may run it.
//!
//! The values live here, one constant per built-in family, and the family
//! table in `evomem-policy` gives each row its constant. So a reader of a
//! run folder that knows only a family's name (the inspector, `evomem-ui`,
//! and through it `/ui` of the service) asks [`capabilities`] instead of
//! linking every policy and its models. `evomem-policy`'s tests check that
//! every row of its table and [`BUILT_IN`] agree.

use crate::DecisionTag;

/// What a family can do, for the tools that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Decision kinds it serves.
    pub decisions: &'static [DecisionTag],
    /// The op labels that make its lifecycle timeline (`evomem inspect`);
    /// empty when its op log does not read as one.
    pub lifecycle_timeline: &'static [&'static str],
    /// Its decisions carry evidence paths (`evomem explain`).
    pub evidence_paths: bool,
    /// Its stats report memory growth by history length (`growth.svg`).
    pub reports_growth: bool,
    /// Its recall may include other users' memory, in an anonymised form
    /// ([`crate::anon_label`]; collaborative namespaces); the isolation
    /// checks allow exactly that.
    pub collaborative: bool,
    /// It writes memory records through ops (baselines keep model state
    /// only).
    pub writes_memory: bool,
    /// Everything it keeps about a user is that user's own memory records
    /// (namespace `user:<id>`): no cross-user notes, no model state outside
    /// memory. Such a family survives a restart from the store alone, and
    /// deleting a user's records deletes everything derived from them; the
    /// service runs only these (`evomem_policy::registry::user_scoped_rankers`).
    pub user_scoped: bool,
}

impl Capabilities {
    /// A ranking baseline: ranks, writes no memory (`random`, `pop`,
    /// `itemknn`, `bpr`, `recent`, `sasrec`, `lightgcn`).
    pub const RANK_BASELINE: Capabilities = Capabilities {
        decisions: &[DecisionTag::Rank],
        lifecycle_timeline: &[],
        evidence_paths: false,
        reports_growth: false,
        collaborative: false,
        writes_memory: false,
        user_scoped: false,
    };
}

/// `no-memory`: serves every decision kind and keeps nothing at all.
pub const NO_MEMORY: Capabilities = Capabilities {
    decisions: &[
        DecisionTag::Rank,
        DecisionTag::Act,
        DecisionTag::Predict,
        DecisionTag::Generate,
    ],
    // It keeps nothing at all.
    user_scoped: true,
    ..Capabilities::RANK_BASELINE
};

/// `mars`: its op log reads as the six lifecycle operations (the names of
/// `evomem_policy::mars::Lifecycle::ALL`, in that order; a test there checks
/// them), and it keeps each user's memory in that user's namespace.
pub const MARS: Capabilities = Capabilities {
    decisions: &[DecisionTag::Rank],
    lifecycle_timeline: &[
        "extract",
        "boost",
        "demote",
        "merge",
        "forget",
        "synthesize",
    ],
    evidence_paths: false,
    reports_growth: false,
    collaborative: false,
    writes_memory: true,
    user_scoped: true,
};

/// `atomrec`: evidence paths, growth plots, and other users' atoms in
/// recall under their anonymous labels.
pub const ATOMREC: Capabilities = Capabilities {
    decisions: &[DecisionTag::Rank],
    lifecycle_timeline: &[],
    evidence_paths: true,
    reports_growth: true,
    collaborative: true,
    writes_memory: true,
    user_scoped: false,
};

/// `memrl`: a pool of trajectory memories for act and predict decisions.
pub const MEMRL: Capabilities = Capabilities {
    decisions: &[DecisionTag::Act, DecisionTag::Predict],
    lifecycle_timeline: &[],
    evidence_paths: false,
    reports_growth: false,
    collaborative: false,
    writes_memory: true,
    user_scoped: false,
};

/// `romerl`: per-task utility states for act decisions.
pub const ROMERL: Capabilities = Capabilities {
    decisions: &[DecisionTag::Act],
    lifecycle_timeline: &[],
    evidence_paths: false,
    reports_growth: false,
    collaborative: false,
    writes_memory: true,
    user_scoped: false,
};

/// `seqmem`: sequence memory whose recall cites the user's own events.
pub const SEQMEM: Capabilities = Capabilities {
    decisions: &[DecisionTag::Rank],
    lifecycle_timeline: &[],
    evidence_paths: true,
    reports_growth: false,
    // Recall cites only the user's own events; other users reach the
    // decider as aggregate weights (like a baseline's scores), never as
    // records or items of theirs.
    collaborative: false,
    writes_memory: true,
    user_scoped: false,
};

/// `tide`: guidelines for predict and generate decisions, whose op log reads
/// as their lifecycle.
pub const TIDE: Capabilities = Capabilities {
    decisions: &[DecisionTag::Predict, DecisionTag::Generate],
    lifecycle_timeline: &[
        "candidate",
        "credit",
        "revise",
        "narrow",
        "split",
        "crossover",
        "abstract",
        "promote",
        "evict",
        "expire",
    ],
    evidence_paths: false,
    reports_growth: false,
    collaborative: false,
    writes_memory: true,
    user_scoped: false,
};

/// Every built-in family's name and capabilities, in the family table's
/// order.
pub const BUILT_IN: &[(&str, Capabilities)] = &[
    ("no-memory", NO_MEMORY),
    ("random", Capabilities::RANK_BASELINE),
    ("pop", Capabilities::RANK_BASELINE),
    ("itemknn", Capabilities::RANK_BASELINE),
    ("bpr", Capabilities::RANK_BASELINE),
    ("recent", Capabilities::RANK_BASELINE),
    ("sasrec", Capabilities::RANK_BASELINE),
    ("lightgcn", Capabilities::RANK_BASELINE),
    ("mars", MARS),
    ("atomrec", ATOMREC),
    ("memrl", MEMRL),
    ("romerl", ROMERL),
    ("seqmem", SEQMEM),
    ("tide", TIDE),
];

/// The capabilities of the built-in family called `name`; `None` for a name
/// outside [`BUILT_IN`] (a policy from outside the family table, or a
/// folder whose family is unknown).
pub fn capabilities(name: &str) -> Option<Capabilities> {
    BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_names_are_unique_and_found() {
        for (k, (name, caps)) in BUILT_IN.iter().enumerate() {
            assert!(BUILT_IN[..k].iter().all(|(n, _)| n != name), "{name} twice");
            assert_eq!(capabilities(name), Some(*caps));
        }
        assert_eq!(capabilities("nosuch"), None);
    }
}
