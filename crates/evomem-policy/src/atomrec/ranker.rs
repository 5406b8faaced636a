//! The offline ranker r_{u,i} of AtomRec §2.6 (LM_Rec's offline twin).
//!
//! For each candidate i it combines the three memories the paper names:
//! - collaborative evidence M_collab: the summed score of evidence paths that
//!   end on atoms about i, normalised by the largest such sum among the
//!   candidates (`path`);
//! - user memory M_u: cos(q_u^t, E(i)) (`semantic`);
//! - item memory M_i: the item atom's audience size as ln(1 + n) / ln(1 + n_max)
//!   (`popularity`).
//!
//! r = W_PATH · path/max(path) + W_SEM · semantic + W_POP · popularity.

/// Weight of the evidence-path term.
pub const W_PATH: f64 = 1.0;
/// Weight of the user-memory similarity term.
pub const W_SEM: f64 = 0.1;
/// Weight of the item-memory popularity term.
pub const W_POP: f64 = 0.15;

/// Per-candidate inputs, aligned with the candidate list.
#[derive(Debug, Clone, Default)]
pub struct RankerInputs {
    /// Evidence-path mass.
    pub path: Vec<f64>,
    /// Query–item cosine.
    pub semantic: Vec<f64>,
    /// Normalised log audience.
    pub popularity: Vec<f64>,
}

/// Scores aligned with the candidates (higher is better).
pub fn score(inp: &RankerInputs) -> Vec<f64> {
    let max_path = inp.path.iter().copied().fold(0.0f64, f64::max);
    (0..inp.semantic.len())
        .map(|i| {
            let p = if max_path > 0.0 {
                inp.path.get(i).copied().unwrap_or(0.0) / max_path
            } else {
                0.0
            };
            W_PATH * p
                + W_SEM * inp.semantic.get(i).copied().unwrap_or(0.0)
                + W_POP * inp.popularity.get(i).copied().unwrap_or(0.0)
        })
        .collect()
}
