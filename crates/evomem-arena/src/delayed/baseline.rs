//! The baseline predictor the offline methods of the delayed arena build
//! on, re-exported from [`evomem_kit::rating`] (μ + b_u + b_i from matured
//! labels only; μ and b_i the same for every method but `memrl`, which
//! predicts from raw ratings; b_u recomputed by some and stored by others,
//! `docs/results-tide.md` says which), and the genre similarity the
//! retrieval-style methods use.
//!
//! Global statistics (μ, b_i) are fed by `observe`, which the driver calls
//! only at maturity, so they never see an unmatured label. Each policy keeps
//! its own copy (derived state rebuilt from what it was shown). Item genres
//! (multi-hot, from the catalog's categories) give the similarity the
//! retrieval-style methods use: cosine of the genre vectors.

use evomem_core::{Catalog, ItemId};
use std::collections::BTreeMap;

pub use evomem_kit::rating::{clamp, GlobalStats, LAMBDA_ITEM, LAMBDA_USER, PRIOR_MEAN, SCALE};

/// Genre vectors of the catalog (multi-hot, L2-normalised) and the cosine
/// between two items' genres.
#[derive(Debug, Clone, Default)]
pub struct Genres {
    /// Per item: sorted genre indices.
    items: Vec<Vec<u16>>,
    /// Genre names by index.
    pub names: Vec<String>,
}

impl Genres {
    /// From the catalog's categories.
    pub fn new(catalog: &Catalog) -> Self {
        let mut index: BTreeMap<&str, u16> = BTreeMap::new();
        for it in &catalog.items {
            for c in &it.categories {
                let next = index.len() as u16;
                index.entry(c.as_str()).or_insert(next);
            }
        }
        let mut names = vec![String::new(); index.len()];
        for (n, &i) in &index {
            names[usize::from(i)] = (*n).to_string();
        }
        let items = catalog
            .items
            .iter()
            .map(|it| {
                let mut g: Vec<u16> = it
                    .categories
                    .iter()
                    .filter_map(|c| index.get(c.as_str()).copied())
                    .collect();
                g.sort_unstable();
                g.dedup();
                g
            })
            .collect();
        Self { items, names }
    }

    /// The genres of `item`.
    pub fn of(&self, item: ItemId) -> &[u16] {
        self.items
            .get(item.index())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The name of genre `g`.
    pub fn name(&self, g: u16) -> &str {
        self.names
            .get(usize::from(g))
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// Cosine of the two items' multi-hot genre vectors (0 when either has
    /// none): |G_a ∩ G_b| / sqrt(|G_a|·|G_b|).
    pub fn cosine(&self, a: ItemId, b: ItemId) -> f64 {
        let (ga, gb) = (self.of(a), self.of(b));
        if ga.is_empty() || gb.is_empty() {
            return 0.0;
        }
        let common = ga.iter().filter(|g| gb.binary_search(g).is_ok()).count();
        common as f64 / ((ga.len() * gb.len()) as f64).sqrt()
    }
}
