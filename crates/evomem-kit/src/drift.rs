//! Preference-drift analysis (AtomRec §4.4):
//! d_u = 1 − cos(ē_u^early, ē_u^late), the mean item embeddings of the early
//! and late halves of u's history (time order; the middle item of an odd
//! history goes to the late half), and Low / Medium / High terciles.

use evomem_core::{dot, normalize, Dataset, EmbedError, Embedder, ItemId, UserId};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Drift group of a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum DriftGroup {
    /// Lowest third of d_u.
    Low,
    /// Middle third.
    Medium,
    /// Highest third.
    High,
}

/// d_u for every user with at least two interactions.
pub fn drift_scores(
    dataset: &Dataset,
    embedder: &dyn Embedder,
) -> Result<BTreeMap<UserId, f64>, EmbedError> {
    // Embed every item of any history once, in batches.
    let mut items: Vec<ItemId> = dataset
        .histories()
        .iter()
        .flat_map(|h| h.iter().map(|it| it.item))
        .collect();
    items.sort_unstable();
    items.dedup();
    let mut cache: HashMap<ItemId, Vec<f32>> = HashMap::with_capacity(items.len());
    for chunk in items.chunks(256) {
        let texts: Vec<String> = chunk
            .iter()
            .map(|&i| {
                dataset
                    .catalog
                    .get(i)
                    .map(|it| it.full_text())
                    .unwrap_or_default()
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        for (&i, v) in chunk.iter().zip(embedder.embed(&refs)?) {
            cache.insert(i, v);
        }
    }
    let mut out = BTreeMap::new();
    for (u, hist) in dataset.histories().iter().enumerate() {
        if hist.len() < 2 {
            continue;
        }
        let mid = hist.len() / 2;
        let mut halves = [vec![0.0f32; embedder.dim()], vec![0.0f32; embedder.dim()]];
        for (k, it) in hist.iter().enumerate() {
            let Some(v) = cache.get(&it.item) else {
                continue;
            };
            let h = &mut halves[usize::from(k >= mid)];
            for (a, x) in h.iter_mut().zip(v.iter()) {
                *a += x;
            }
        }
        let [mut a, mut b] = halves;
        normalize(&mut a);
        normalize(&mut b);
        out.insert(UserId(u as u32), 1.0 - f64::from(dot(&a, &b)));
    }
    Ok(out)
}

/// Tercile assignment: users sorted by (d_u, id); the first third Low, the
/// next Medium, the rest High.
pub fn drift_groups(scores: &BTreeMap<UserId, f64>) -> BTreeMap<UserId, DriftGroup> {
    let mut v: Vec<(UserId, f64)> = scores.iter().map(|(u, d)| (*u, *d)).collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let n = v.len();
    v.into_iter()
        .enumerate()
        .map(|(i, (u, _))| {
            let g = if i * 3 < n {
                DriftGroup::Low
            } else if i * 3 < 2 * n {
                DriftGroup::Medium
            } else {
                DriftGroup::High
            };
            (u, g)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terciles_split_evenly() {
        let s: BTreeMap<UserId, f64> = (0..9).map(|i| (UserId(i), f64::from(9 - i))).collect();
        let g = drift_groups(&s);
        assert_eq!(g[&UserId(8)], DriftGroup::Low);
        assert_eq!(g[&UserId(4)], DriftGroup::Medium);
        assert_eq!(g[&UserId(0)], DriftGroup::High);
        assert_eq!(g.values().filter(|x| **x == DriftGroup::High).count(), 3);
    }
}
