//! `seqmem`'s content heads (issue 55): what an item *is* (its categories
//! and its release year, from the catalog) rather than who consumed it next
//! to what.
//!
//! Why: every other head reads co-consumption, and a trained sequence model
//! (SASRec) reads only item ids. Where the catalog has metadata (ml-100k:
//! genres and release years) a user's taste in genres and in the age of
//! what they watch is memory the policy can keep and explain without
//! training anything. Where it has none (the Amazon sets) both heads are 0
//! for every candidate, so they change no ranking and the fit gives them
//! weight 0.
//!
//! Both heads compare the user's items with the catalog: the evaluated
//! negatives are drawn from the catalog, so what separates a target from
//! them is how much more likely its content is under the user's profile
//! than under the catalog's (a log likelihood ratio).
//!
//! **Profile.** The user's items `j_0` (newest) … `j_{L−1}` weigh `ρ^p`
//! (`ρ = content_decay`, every item read).
//! - *genre*: `u_g = Σ_p ρ^p · [g ∈ G(j_p)] / |G(j_p)|`, normalised to sum
//!   to 1 (each item spreads its weight over its categories `G(j_p)`); the
//!   catalog's share `s_g` is the same over every catalog item with a
//!   category, each weighing 1. `h_genre(c) = (1/|G(c)|) Σ_{g ∈ G(c)}
//!   ln((u_g + a) / (s_g + a))`, `a` = [`LIFT_SMOOTH`]: the mean log lift
//!   of the candidate's categories; 0 when `c` or every item of the user's
//!   has no category.
//! - *year*: `k_u(y) = Σ_p ρ^p · exp(−|y − y(j_p)| / year_scale) / Σ_p ρ^p`
//!   over the user's items with a release year (`release_year`, or `year`,
//!   among the item's attributes) and `k_cat(y)`, the same kernel's mean
//!   over the catalog's items with a year; `x_year(c) = ln(ε + k_u(y(c)))
//!   − ln(ε + k_cat(y(c)))`; 0 when `c` has no year or none of the user's
//!   items has one.

use super::SeqParams;
use evomem_core::Catalog;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Added to both shares of the genre head's lift.
pub const LIFT_SMOOTH: f64 = 0.01;

/// The attributes read as an item's release year, in order.
pub const YEAR_KEYS: [&str; 2] = ["release_year", "year"];

/// Each item's categories (as dense ids) and release year, with the
/// catalog's shares of both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Content {
    /// Category ids of each item, ascending, each once.
    genres: Vec<Vec<u32>>,
    /// Release year of each item.
    years: Vec<Option<f64>>,
    /// `s_g`: the catalog share of each category.
    genre_share: Vec<f64>,
    /// `(year, items)`: the catalog's items with a year, by year.
    year_hist: Vec<(f64, f64)>,
    /// Items with a year.
    n_years: f64,
}

impl Content {
    /// The catalog's categories and release years; category ids in order
    /// of the categories' names.
    pub fn from_catalog(catalog: &Catalog) -> Self {
        let names: BTreeMap<&str, u32> = catalog
            .items
            .iter()
            .flat_map(|i| i.categories.iter().map(String::as_str))
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .zip(0u32..)
            .collect();
        let genres = catalog
            .items
            .iter()
            .map(|i| {
                i.categories
                    .iter()
                    .filter_map(|c| names.get(c.as_str()).copied())
                    .collect()
            })
            .collect();
        let years = catalog
            .items
            .iter()
            .map(|i| {
                YEAR_KEYS
                    .iter()
                    .find_map(|k| i.attributes.get(*k))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|y| y.is_finite())
            })
            .collect();
        Self::from_parts(genres, years)
    }

    /// Content from each item's category ids and year (item `i` at index
    /// `i`).
    pub fn from_parts(genres: Vec<Vec<u32>>, years: Vec<Option<f64>>) -> Self {
        let genres: Vec<Vec<u32>> = genres
            .into_iter()
            .map(|mut g| {
                g.sort_unstable();
                g.dedup();
                g
            })
            .collect();
        let n_genres = genres
            .iter()
            .flatten()
            .max()
            .map_or(0, |&g| g as usize + 1);
        let mut genre_share = vec![0.0; n_genres];
        let mut with = 0.0;
        for g in genres.iter().filter(|g| !g.is_empty()) {
            with += 1.0;
            spread(&mut genre_share, g, 1.0);
        }
        if with > 0.0 {
            for x in &mut genre_share {
                *x /= with;
            }
        }
        let mut hist: BTreeMap<i64, f64> = BTreeMap::new();
        for y in years.iter().flatten() {
            // Bins of 1/16 year: exact for whole years, finite in number.
            *hist.entry((y * 16.0).round() as i64).or_insert(0.0) += 1.0;
        }
        let n_years = hist.values().sum();
        let year_hist = hist
            .into_iter()
            .map(|(k, n)| (k as f64 / 16.0, n))
            .collect();
        Self {
            genres,
            years,
            genre_share,
            year_hist,
            n_years,
        }
    }

    /// True when no item has a category or a year: both heads are 0 for
    /// every candidate.
    pub fn is_empty(&self) -> bool {
        self.genre_share.is_empty() && self.n_years <= 0.0
    }

    fn genres_of(&self, item: u32) -> &[u32] {
        self.genres.get(item as usize).map_or(&[], Vec::as_slice)
    }

    fn year_of(&self, item: u32) -> Option<f64> {
        self.years.get(item as usize).copied().flatten()
    }
}

/// Add `w / |g|` to each of the categories `g` in `to`.
fn spread(to: &mut [f64], g: &[u32], w: f64) {
    let share = w / g.len() as f64;
    for &k in g {
        if let Some(x) = to.get_mut(k as usize) {
            *x += share;
        }
    }
}

/// The content heads of one user's decision: the profile of the user's
/// items and the catalog's content.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContentHead {
    content: Option<Arc<Content>>,
    /// `u_g`, summing to 1 (empty when no item of the user's has a
    /// category).
    genre: Vec<f64>,
    /// `(y(j_p), ρ^p)` of the user's items with a year.
    years: Vec<(f64, f64)>,
    /// `Σ ρ^p` over them.
    year_total: f64,
    /// The year kernel's scale.
    year_scale: f64,
}

impl ContentHead {
    /// The profile of the user whose items are `items` (newest first).
    pub fn new(content: &Arc<Content>, items: &[u32], p: &SeqParams) -> Self {
        let mut genre = vec![0.0; content.genre_share.len()];
        let mut years = Vec::new();
        let mut year_total = 0.0;
        let mut w = 1.0;
        for &j in items {
            let g = content.genres_of(j);
            if !g.is_empty() {
                spread(&mut genre, g, w);
            }
            if let Some(y) = content.year_of(j) {
                years.push((y, w));
                year_total += w;
            }
            w *= p.content_decay;
        }
        let total: f64 = genre.iter().sum();
        if total > 0.0 {
            for x in &mut genre {
                *x /= total;
            }
        } else {
            genre.clear();
        }
        Self {
            content: Some(Arc::clone(content)),
            genre,
            years,
            year_total,
            year_scale: p.year_scale,
        }
    }

    /// `h_genre(c)`: the mean log lift of `c`'s categories, user share
    /// over catalog share.
    pub fn genre(&self, c: u32) -> f64 {
        let Some(content) = &self.content else {
            return 0.0;
        };
        let g = content.genres_of(c);
        if g.is_empty() || self.genre.is_empty() {
            return 0.0;
        }
        let s: f64 = g
            .iter()
            .map(|&k| {
                let u = self.genre.get(k as usize).copied().unwrap_or(0.0);
                let s = content.genre_share.get(k as usize).copied().unwrap_or(0.0);
                ((u + LIFT_SMOOTH) / (s + LIFT_SMOOTH)).ln()
            })
            .sum();
        s / g.len() as f64
    }

    /// `x_year(c) = ln(ε + k_u(y(c))) − ln(ε + k_cat(y(c)))`.
    pub fn year(&self, c: u32, eps: f64) -> f64 {
        let Some(content) = &self.content else {
            return 0.0;
        };
        let Some(y) = content.year_of(c) else {
            return 0.0;
        };
        if self.year_total <= 0.0 || content.n_years <= 0.0 {
            return 0.0;
        }
        let kernel = |x: f64| (-(y - x).abs() / self.year_scale).exp();
        let user: f64 = self
            .years
            .iter()
            .map(|&(yj, w)| w * kernel(yj))
            .sum::<f64>()
            / self.year_total;
        let catalog: f64 = content
            .year_hist
            .iter()
            .map(|&(b, n)| n * kernel(b))
            .sum::<f64>()
            / content.n_years;
        (eps + user).ln() - (eps + catalog).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Categories A = 0, B = 1, C = 2; item 3 has none, item 4 only a year.
    fn content() -> Arc<Content> {
        Arc::new(Content::from_parts(
            vec![vec![0], vec![0, 1], vec![2], vec![], vec![]],
            vec![Some(1990.0), Some(1995.0), Some(1995.0), None, Some(1970.0)],
        ))
    }

    fn params() -> SeqParams {
        let mut p = SeqParams::defaults().unwrap();
        p.content_decay = 0.5;
        p.year_scale = 2.0;
        p
    }

    /// Worked out by hand: the catalog's shares are A 1.5/3, B 0.5/3,
    /// C 1/3 (three items with a category). A user whose items are
    /// [1, 0] (newest first, weights 1 and 0.5) has A 1/2 + 0.5, B 1/2,
    /// normalised A 2/3, B 1/3, C 0.
    #[test]
    fn the_genre_head_is_the_mean_log_lift_of_the_candidates_categories() {
        let h = ContentHead::new(&content(), &[1, 0], &params());
        let a = LIFT_SMOOTH;
        let lift = |u: f64, s: f64| ((u + a) / (s + a)).ln();
        let close = |x: f64, y: f64| assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        close(h.genre(0), lift(2.0 / 3.0, 0.5));
        close(h.genre(1), (lift(2.0 / 3.0, 0.5) + lift(1.0 / 3.0, 0.5 / 3.0)) / 2.0);
        close(h.genre(2), lift(0.0, 1.0 / 3.0));
        close(h.genre(3), 0.0); // no category
        // A user with no category at all: 0 for everyone.
        let none = ContentHead::new(&content(), &[3, 4], &params());
        for c in 0..5 {
            close(none.genre(c), 0.0);
        }
    }

    /// The user [1, 0] has years 1995 (weight 1) and 1990 (0.5); the
    /// catalog 1990, 1995, 1995, 1970; scale 2.
    #[test]
    fn the_year_head_is_the_users_kernel_over_the_catalogs() {
        let h = ContentHead::new(&content(), &[1, 0], &params());
        let k = |d: f64| (-d / 2.0f64).exp();
        let eps = 1e-4;
        let close = |x: f64, y: f64| assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        let user = (k(0.0) + 0.5 * k(5.0)) / 1.5;
        let cat = (k(5.0) + 2.0 * k(0.0) + k(25.0)) / 4.0;
        close(h.year(2, eps), (eps + user).ln() - (eps + cat).ln());
        let user70 = (k(25.0) + 0.5 * k(20.0)) / 1.5;
        let cat70 = (k(20.0) + 2.0 * k(25.0) + k(0.0)) / 4.0;
        close(h.year(4, eps), (eps + user70).ln() - (eps + cat70).ln());
        close(h.year(3, eps), 0.0); // no year
    }

    /// Without categories and years (the Amazon sets) both heads are 0
    /// for every candidate, so they change no ranking.
    #[test]
    fn without_metadata_both_heads_are_zero_for_every_candidate() {
        let c = Arc::new(Content::from_parts(vec![vec![]; 4], vec![None; 4]));
        assert!(c.is_empty());
        let h = ContentHead::new(&c, &[2, 1, 0], &params());
        for cand in 0..6 {
            assert_eq!(h.genre(cand), 0.0);
            assert_eq!(h.year(cand, 1e-4), 0.0);
        }
        assert!(!content().is_empty());
    }
}
