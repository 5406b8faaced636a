//! The offline ranker r_{u,i} of AtomRec §2.6 (LM_Rec's offline twin).
//!
//! For each candidate i it combines the three memories the paper names:
//! - collaborative evidence M_collab, in two parts: the summed score of the
//!   link-expansion evidence paths that end on atoms about i (`path`), and
//!   the summed score of the co-consumption walks through item notes that end
//!   on i (`co`, see [`super::retrieve::co_walks`]); each is normalised by
//!   its largest value among the candidates;
//! - user memory M_u: cos(q_u^t, E(i)) (`semantic`);
//! - item memory M_i: the item atom's audience size as ln(1 + n) / ln(1 + n_max)
//!   (`popularity`).
//!
//! r = W_PATH · path/max(path) + W_CO · co/max(co) + W_SEM · semantic + W_POP · popularity.

/// Weight of the evidence-path term.
pub const W_PATH: f64 = 1.0;
/// Weight of the co-consumption walk term.
pub const W_CO: f64 = 1.0;
/// Weight of the user-memory similarity term.
pub const W_SEM: f64 = 0.1;
/// Weight of the item-memory popularity term.
pub const W_POP: f64 = 0.15;

/// Per-candidate inputs, aligned with the candidate list.
#[derive(Debug, Clone, Default)]
pub struct RankerInputs {
    /// Evidence-path mass.
    pub path: Vec<f64>,
    /// Co-consumption walk mass (empty = none).
    pub co: Vec<f64>,
    /// Query–item cosine.
    pub semantic: Vec<f64>,
    /// Normalised log audience.
    pub popularity: Vec<f64>,
}

/// Scores aligned with the candidates (higher is better).
pub fn score(inp: &RankerInputs) -> Vec<f64> {
    let max_path = inp.path.iter().copied().fold(0.0f64, f64::max);
    let max_co = inp.co.iter().copied().fold(0.0f64, f64::max);
    let rel = |v: &[f64], i: usize, max: f64| {
        if max > 0.0 {
            v.get(i).copied().unwrap_or(0.0) / max
        } else {
            0.0
        }
    };
    (0..inp.semantic.len())
        .map(|i| {
            W_PATH * rel(&inp.path, i, max_path)
                + W_CO * rel(&inp.co, i, max_co)
                + W_SEM * inp.semantic.get(i).copied().unwrap_or(0.0)
                + W_POP * inp.popularity.get(i).copied().unwrap_or(0.0)
        })
        .collect()
}
