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
//!   (`popularity`);
//! - a multi-hop extension of the co-consumption walk (`walk`, issue 55):
//!   two steps along what owners consumed *after* an item, from the user's
//!   [`super::retrieve::CO_RECENT`] latest atoms (weighed 0.95^age as the
//!   walks above), as [`evomem_kit::walk`] defines it, scaled to [0, 1] as
//!   `ln(1 + h/ε) / ln(1 + 1/ε)` (ε = [`evomem_kit::walk::EPS`]). On sparse
//!   data without item text most targets share no window with any item of
//!   the user, so `co` is 0 for them and the ranking fell to popularity;
//!   two steps reach them. `w_walk` defaults to 8, chosen on the
//!   validation targets of the four development sets (grid {0, 1, 2, 4, 8},
//!   the best mean HR@1, at the grid's edge; `docs/results-sparse.md`); it
//!   costs ml-100k 0.024 validation HR@1 and gains 0.07–0.09 on the Amazon
//!   sets; `w_walk=0` is the ranker before it. `fit=auto` does not choose
//!   it well: its held-out decisions read the held-out note's links
//!   ([`super::fit`]), which favour the path term over any honest one.
//!
//! r = w_path · path/max(path) + w_co · co/max(co) + w_sem · semantic + w_pop · popularity
//!   + w_walk · walk.
//!
//! The weights are spec keys (`atomrec[w_path=..,w_co=..,w_sem=..,w_pop=..]`).
//! Their defaults ([`RankWeights::default`]), and the walk's popularity
//! discount `co_pop` = 0.5, were chosen on ml-100k's *validation*
//! interactions (`evomem eval --target valid`, all users, seed 42; grid
//! co_pop ∈ {0, .25, .5, .75}, w_path ∈ {.25, .5, 1}, w_sem ∈ {.1, .3, .5},
//! w_pop ∈ {.15, .3, .45, .6, .9}, w_co = 1 as the scale), never on test.

use serde::Serialize;

/// The five weights of the ranker.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RankWeights {
    /// Evidence-path term (`w_path`, default 0.25).
    pub path: f64,
    /// Co-consumption walk term (`w_co`, default 1.0).
    pub co: f64,
    /// User-memory similarity term (`w_sem`, default 0.3).
    pub semantic: f64,
    /// Item-memory popularity term (`w_pop`, default 0.15).
    pub popularity: f64,
    /// Two-step walk term (`w_walk`, default 8).
    pub walk: f64,
}

impl Default for RankWeights {
    fn default() -> Self {
        Self {
            path: 0.25,
            co: 1.0,
            semantic: 0.3,
            popularity: 0.15,
            walk: 8.0,
        }
    }
}

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
    /// The walk term, in [0, 1] ([`walk_term`]; empty = 0).
    pub walk: Vec<f64>,
}

/// The walk term of a walk value `h` in [0, 1]: `ln(1 + h/ε) / ln(1 + 1/ε)`.
pub fn walk_term(h: f64) -> f64 {
    let eps = evomem_kit::walk::EPS;
    (h / eps).ln_1p() / (1.0 / eps).ln_1p()
}

/// Scores aligned with the candidates (higher is better).
pub fn score(w: &RankWeights, inp: &RankerInputs) -> Vec<f64> {
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
            w.path * rel(&inp.path, i, max_path)
                + w.co * rel(&inp.co, i, max_co)
                + w.semantic * inp.semantic.get(i).copied().unwrap_or(0.0)
                + w.popularity * inp.popularity.get(i).copied().unwrap_or(0.0)
                + w.walk * inp.walk.get(i).copied().unwrap_or(0.0)
        })
        .collect()
}

/// The five terms [`score`] weighs, per candidate: `[path/max(path),
/// co/max(co), semantic, popularity, walk]` (what `fit=auto` regresses on;
/// `score` is `w · features` up to the order of the sums).
pub fn features(inp: &RankerInputs) -> Vec<[f64; 5]> {
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
            [
                rel(&inp.path, i, max_path),
                rel(&inp.co, i, max_co),
                inp.semantic.get(i).copied().unwrap_or(0.0),
                inp.popularity.get(i).copied().unwrap_or(0.0),
                inp.walk.get(i).copied().unwrap_or(0.0),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_normalised_and_weighted() {
        let inp = RankerInputs {
            path: vec![2.0, 1.0, 0.0],
            co: vec![0.0, 4.0, 2.0],
            semantic: vec![0.1, 0.2, 0.3],
            popularity: vec![1.0, 0.5, 0.0],
            walk: Vec::new(),
        };
        let w = RankWeights {
            path: 1.0,
            co: 2.0,
            semantic: 10.0,
            popularity: 0.5,
            walk: 3.0,
        };
        let s = score(&w, &inp);
        for (x, got) in features(&inp).iter().zip(&s) {
            let by_features = w.path * x[0]
                + w.co * x[1]
                + w.semantic * x[2]
                + w.popularity * x[3]
                + w.walk * x[4];
            assert_eq!(by_features.to_bits(), got.to_bits());
        }
        let want = [
            1.0 + 0.0 + 1.0 + 0.5,
            0.5 + 2.0 + 2.0 + 0.25,
            0.0 + 1.0 + 3.0,
        ];
        for (a, b) in s.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{s:?}");
        }
        // No path or co evidence at all: those terms vanish instead of dividing by zero.
        let flat = RankerInputs {
            path: vec![0.0; 2],
            co: Vec::new(),
            semantic: vec![0.0, 0.5],
            popularity: vec![0.0, 0.0],
            walk: Vec::new(),
        };
        let s = score(&RankWeights::default(), &flat);
        assert_eq!(s[0], 0.0);
        assert!((s[1] - 0.15).abs() < 1e-12, "{s:?}");
    }

    #[test]
    fn the_walk_term_is_a_scaled_logarithm_in_the_unit_interval() {
        assert_eq!(walk_term(0.0), 0.0);
        assert!((walk_term(1.0) - 1.0).abs() < 1e-12);
        let eps = evomem_kit::walk::EPS;
        let h = 0.01;
        let want = (1.0 + h / eps).ln() / (1.0 + 1.0 / eps).ln();
        assert!((walk_term(h) - want).abs() < 1e-12);
        assert!(walk_term(0.001) < walk_term(0.01));
    }
}
