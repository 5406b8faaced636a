//! Preference categories per domain and the metadata facets of items.
//!
//! The paper (Appendix, "Preference Categories") derives six categories per
//! domain once, by prompting an LLM with 10 sample item descriptions. The
//! offline path here derives them from item metadata instead:
//!
//! 1. Candidate *axes* are enumerated from what the catalog carries: every
//!    category/genre value (`genre`), the first, most general category
//!    (`primary genre`), the later, finer ones (`subgenre`), the pair of the
//!    first two categories (`genre blend`), each scalar attribute (a year-like
//!    number is bucketed into a decade, `era`), title keywords and keywords of
//!    each free-text field (TF-IDF top terms).
//! 2. On a seeded sample of items each axis is scored by
//!    `coverage × ln(1 + min(distinct, 50))` (how many items it describes ×
//!    how discriminative it is); axes with coverage < 0.2 or fewer than two
//!    distinct values are dropped.
//! 3. The best `n` (default six) are the categories, in score order.
//!
//! A *facet* is one (axis, value) of one item, e.g. (`era`, `1990s`). The
//! offline extractor proposes chunks keyed by facets and the ranker matches
//! candidate facets against chunk keys, weighting by a catalog-wide IDF so
//! that rare facets ("Film-Noir") count more than ubiquitous ones ("Drama").

use evomem_core::{Catalog, Item, ItemId};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How an axis reads values from an item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AxisKind {
    /// Every entry of `Item::categories`.
    AnyCategory,
    /// `categories[0]`.
    PrimaryCategory,
    /// `categories[1..]`.
    SubCategory,
    /// `categories[0] + categories[1]`.
    CategoryPair,
    /// A scalar attribute; year-like numbers become decades.
    Attribute {
        /// Attribute name.
        name: String,
    },
    /// Keywords of the title.
    TitleKeyword,
    /// Top TF-IDF keywords of a free-text field.
    TextKeyword {
        /// Field name.
        field: String,
    },
}

/// One preference category of a domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryDef {
    /// Short name used in chunks (`genre`, `era`, ...).
    pub name: String,
    /// One-line description for prompts and profiles.
    pub description: String,
    /// The metadata axis behind it; `None` for an LLM-invented category.
    pub axis: Option<AxisKind>,
}

/// Keywords kept per item and text field.
const TEXT_KEYWORDS: usize = 5;
/// Content words of `text` ([`evomem_core::text::words`]), with repeats.
pub fn keywords(text: &str) -> Vec<String> {
    evomem_core::text::words(text).collect()
}

fn year_bucket(v: &str) -> Option<String> {
    let y: i64 = v.trim().parse().ok()?;
    if (1800..=2100).contains(&y) {
        Some(format!("{}s", y - y.rem_euclid(10)))
    } else {
        None
    }
}

/// Facets of the whole catalog: per item the (axis index, value) pairs of
/// every candidate axis, and a normalised IDF per facet.
#[derive(Debug, Clone, Default)]
pub struct FacetIndex {
    /// Candidate axes, in enumeration order.
    pub axes: Vec<AxisKind>,
    /// Per item: sorted, deduplicated (axis index, value).
    pub item_facets: Vec<Vec<(usize, String)>>,
    /// IDF per facet, normalised to [0, 1] by `ln(N + 1)`.
    idf: HashMap<(usize, String), f64>,
}

impl FacetIndex {
    /// Build over every item of the catalog. Cost: one pass for token
    /// document frequencies, one for facets.
    pub fn build(catalog: &Catalog) -> Self {
        let n = catalog.items.len().max(1);
        let has_cats = catalog.items.iter().any(|i| !i.categories.is_empty());
        let multi_cats = catalog.items.iter().any(|i| i.categories.len() >= 2);
        let attrs: BTreeSet<&String> = catalog
            .items
            .iter()
            .flat_map(|i| i.attributes.keys())
            .collect();
        let fields: BTreeSet<&String> = catalog.items.iter().flat_map(|i| i.text.keys()).collect();
        let mut axes = Vec::new();
        if has_cats {
            axes.push(AxisKind::AnyCategory);
            if multi_cats {
                axes.push(AxisKind::PrimaryCategory);
                axes.push(AxisKind::SubCategory);
                axes.push(AxisKind::CategoryPair);
            }
        }
        for a in attrs {
            axes.push(AxisKind::Attribute { name: a.clone() });
        }
        axes.push(AxisKind::TitleKeyword);
        for f in fields {
            axes.push(AxisKind::TextKeyword { field: f.clone() });
        }
        // Token document frequencies per text field, for TF-IDF keywords.
        let mut field_df: BTreeMap<&str, HashMap<String, u32>> = BTreeMap::new();
        for item in &catalog.items {
            for (f, t) in &item.text {
                let set: BTreeSet<String> = keywords(t).into_iter().collect();
                let df = field_df.entry(f.as_str()).or_default();
                for w in set {
                    *df.entry(w).or_insert(0) += 1;
                }
            }
        }
        let mut item_facets = Vec::with_capacity(catalog.items.len());
        let mut df: HashMap<(usize, String), u32> = HashMap::new();
        for item in &catalog.items {
            let mut fs: Vec<(usize, String)> = Vec::new();
            for (ai, axis) in axes.iter().enumerate() {
                for v in axis_values(axis, item, &field_df, n) {
                    fs.push((ai, v));
                }
            }
            fs.sort();
            fs.dedup();
            for f in &fs {
                *df.entry(f.clone()).or_insert(0) += 1;
            }
            item_facets.push(fs);
        }
        let norm = ((n + 1) as f64).ln().max(1e-9);
        let idf = df
            .into_iter()
            .map(|(k, d)| {
                (
                    k,
                    ((n as f64 + 1.0) / (f64::from(d) + 1.0)).ln().max(0.0) / norm,
                )
            })
            .collect();
        Self {
            axes,
            item_facets,
            idf,
        }
    }

    /// Facets of one item (empty for an unknown item).
    pub fn facets(&self, item: ItemId) -> &[(usize, String)] {
        self.item_facets
            .get(item.index())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Normalised IDF of a facet (1.0 when unseen).
    pub fn idf(&self, axis: usize, value: &str) -> f64 {
        self.idf
            .get(&(axis, value.to_string()))
            .copied()
            .unwrap_or(1.0)
    }

    /// Index of an axis.
    pub fn axis_index(&self, axis: &AxisKind) -> Option<usize> {
        self.axes.iter().position(|a| a == axis)
    }

    /// Derive `n` categories from a seeded sample of `sample` items (see the
    /// module docs for the scoring rule).
    pub fn derive_categories(&self, n: usize, sample: usize, seed: u64) -> Vec<CategoryDef> {
        let ids = sample_items(self.item_facets.len(), sample, seed);
        let m = ids.len().max(1) as f64;
        let mut scored: Vec<(f64, usize)> = Vec::new();
        for (ai, _) in self.axes.iter().enumerate() {
            let mut covered = 0usize;
            let mut distinct: BTreeSet<&str> = BTreeSet::new();
            for &i in &ids {
                let mut any = false;
                for (a, v) in self.item_facets.get(i).map(Vec::as_slice).unwrap_or(&[]) {
                    if *a == ai {
                        any = true;
                        distinct.insert(v);
                    }
                }
                covered += usize::from(any);
            }
            let coverage = covered as f64 / m;
            if coverage < 0.2 || distinct.len() < 2 {
                continue;
            }
            let score = coverage * (1.0 + distinct.len().min(50) as f64).ln();
            scored.push((score, ai));
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
            .into_iter()
            .take(n)
            .filter_map(|(_, ai)| self.axes.get(ai).map(category_for_axis))
            .collect()
    }
}

/// A seeded sample of item indices (sorted).
pub fn sample_items(n_items: usize, sample: usize, seed: u64) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..n_items).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6d61_7273_6361_7473);
    ids.shuffle(&mut rng);
    ids.truncate(sample);
    ids.sort_unstable();
    ids
}

/// The category name and description of a metadata axis.
pub fn category_for_axis(axis: &AxisKind) -> CategoryDef {
    let (name, description) = match axis {
        AxisKind::AnyCategory => (
            "genre".to_string(),
            "genres or categories the user enjoys".to_string(),
        ),
        AxisKind::PrimaryCategory => (
            "primary genre".to_string(),
            "the broad, top-level category of items".to_string(),
        ),
        AxisKind::SubCategory => (
            "subgenre".to_string(),
            "finer sub-categories and styles".to_string(),
        ),
        AxisKind::CategoryPair => (
            "genre blend".to_string(),
            "combinations of the two leading categories".to_string(),
        ),
        AxisKind::Attribute { name } => {
            if name.contains("year") {
                (
                    "era".to_string(),
                    format!("release period ({name}, by decade)"),
                )
            } else {
                (
                    name.replace('_', " "),
                    format!("the item attribute `{name}`"),
                )
            }
        }
        AxisKind::TitleKeyword => (
            "title theme".to_string(),
            "recurring words and franchises in titles".to_string(),
        ),
        AxisKind::TextKeyword { field } => (
            format!("{} theme", field.replace('_', " ")),
            format!("salient terms of the item {field}"),
        ),
    };
    CategoryDef {
        name,
        description,
        axis: Some(axis.clone()),
    }
}

fn axis_values(
    axis: &AxisKind,
    item: &Item,
    field_df: &BTreeMap<&str, HashMap<String, u32>>,
    n: usize,
) -> Vec<String> {
    let cats: Vec<String> = item
        .categories
        .iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    match axis {
        AxisKind::AnyCategory => cats,
        AxisKind::PrimaryCategory => cats.into_iter().take(1).collect(),
        AxisKind::SubCategory => cats.into_iter().skip(1).collect(),
        AxisKind::CategoryPair => {
            if cats.len() >= 2 {
                vec![format!("{} + {}", cats[0], cats[1])]
            } else {
                Vec::new()
            }
        }
        AxisKind::Attribute { name } => match item.attributes.get(name) {
            Some(v) if !v.trim().is_empty() => {
                vec![year_bucket(v).unwrap_or_else(|| v.trim().to_string())]
            }
            _ => Vec::new(),
        },
        AxisKind::TitleKeyword => {
            let mut k = keywords(&item.title);
            k.sort();
            k.dedup();
            k
        }
        AxisKind::TextKeyword { field } => {
            let Some(t) = item.text.get(field) else {
                return Vec::new();
            };
            let mut tf: BTreeMap<String, u32> = BTreeMap::new();
            for w in keywords(t) {
                *tf.entry(w).or_insert(0) += 1;
            }
            let df = field_df.get(field.as_str());
            let mut scored: Vec<(f64, String)> = tf
                .into_iter()
                .map(|(w, c)| {
                    let d = df.and_then(|m| m.get(&w)).copied().unwrap_or(1);
                    let idf = ((n as f64 + 1.0) / (f64::from(d) + 1.0)).ln();
                    (f64::from(c) * idf, w)
                })
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            scored
                .into_iter()
                .take(TEXT_KEYWORDS)
                .map(|(_, w)| w)
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(i: u32, title: &str, cats: &[&str], year: &str) -> Item {
        Item {
            id: ItemId(i),
            token: i.to_string(),
            title: title.into(),
            text: BTreeMap::new(),
            categories: cats.iter().map(|s| s.to_string()).collect(),
            attributes: [("release_year".to_string(), year.to_string())].into(),
        }
    }

    #[test]
    fn derives_genre_and_era_from_metadata() {
        let cat = Catalog {
            items: vec![
                item(0, "Alien", &["Horror", "Sci-Fi"], "1979"),
                item(1, "Heat", &["Action", "Crime"], "1995"),
                item(2, "Fargo", &["Crime", "Drama"], "1996"),
                item(3, "Amelie", &["Comedy", "Romance"], "2001"),
            ],
        };
        let fi = FacetIndex::build(&cat);
        let cats = fi.derive_categories(6, 10, 1);
        let names: Vec<&str> = cats.iter().map(|c| c.name.as_str()).collect();
        assert!(names.contains(&"genre"), "{names:?}");
        assert!(names.contains(&"era"), "{names:?}");
        assert!(fi.facets(ItemId(1)).iter().any(|(_, v)| v == "1990s"));
        assert!(fi.idf(0, "Crime") < fi.idf(0, "Horror"));
    }
}
