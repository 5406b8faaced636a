//! Candidate lists: the target plus negatives the user never touched, drawn
//! uniformly or by training popularity, or the source's fixed list cleaned of
//! touched items (see the protocol docs).

use super::options::{FixedCandidates, ProtocolConfig, Sampling};
use super::PlanStats;
use crate::error::EvalError;
use evomem_core::{Dataset, Interaction, ItemId, SplitRole, UserId};
use rand::distributions::{Distribution, WeightedIndex};
use rand_chacha::ChaCha8Rng;

/// Interaction counts per item over non-test interactions.
pub(super) fn training_popularity(dataset: &Dataset, roles: &[SplitRole]) -> Vec<f64> {
    let mut popularity = vec![0.0f64; dataset.catalog.len()];
    for i in &dataset.interactions {
        if roles[i.time.0 as usize] != SplitRole::Test {
            popularity[i.item.index()] += 1.0;
        }
    }
    popularity
}

/// The negatives of one user's decision (the target is added by the caller).
pub(super) fn for_user(
    dataset: &Dataset,
    config: &ProtocolConfig,
    history: &[Interaction],
    target: Interaction,
    popularity: &[f64],
    stats: &mut PlanStats,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<ItemId>, EvalError> {
    let mut touched = vec![false; dataset.catalog.len()];
    for i in history {
        touched[i.item.index()] = true;
    }
    let candidates = match dataset.candidates.get(&target.user) {
        Some(list) => {
            stats.fixed_lists_used += 1;
            fixed_list(dataset, config, list, target, &touched, stats)?
        }
        None => match config.sampling {
            Sampling::Uniform => sample_uniform(&touched, config.negatives, rng),
            Sampling::Popularity => sample_popular(&touched, popularity, config.negatives, rng),
        },
    };
    if candidates.len() < config.negatives {
        stats.short_candidate_sets += 1;
    }
    Ok(candidates)
}

/// A fixed list without duplicates, the target and touched items; cut to the
/// first `negatives` with [`FixedCandidates::FirstN`].
fn fixed_list(
    dataset: &Dataset,
    config: &ProtocolConfig,
    list: &[ItemId],
    target: Interaction,
    touched: &[bool],
    stats: &mut PlanStats,
) -> Result<Vec<ItemId>, EvalError> {
    let mut seen = vec![false; dataset.catalog.len()];
    let mut out = Vec::with_capacity(list.len() + 1);
    for &c in list {
        let Some(slot) = seen.get_mut(c.index()) else {
            return Err(EvalError::Dataset {
                dataset: dataset.name.clone(),
                message: format!(
                    "fixed candidate list of user `{}` names item index {} outside the catalog",
                    user_token(dataset, target.user),
                    c.0
                ),
            });
        };
        if *slot || c == target.item {
            continue;
        }
        *slot = true;
        if touched[c.index()] {
            stats.fixed_touched_removed += 1;
            continue;
        }
        out.push(c);
    }
    if config.fixed_candidates == FixedCandidates::FirstN {
        out.truncate(config.negatives);
    }
    Ok(out)
}

fn user_token(dataset: &Dataset, user: UserId) -> &str {
    dataset
        .users
        .get(user.index())
        .map_or("", |u| u.token.as_str())
}

fn sample_uniform(touched: &[bool], n: usize, rng: &mut ChaCha8Rng) -> Vec<ItemId> {
    let pool: Vec<u32> = (0..touched.len() as u32)
        .filter(|&i| !touched[i as usize])
        .collect();
    let k = n.min(pool.len());
    rand::seq::index::sample(rng, pool.len(), k)
        .into_iter()
        .map(|j| ItemId(pool[j]))
        .collect()
}

fn sample_popular(
    touched: &[bool],
    popularity: &[f64],
    n: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<ItemId> {
    let mut weights: Vec<f64> = popularity
        .iter()
        .zip(touched)
        .map(|(&p, &t)| if t { 0.0 } else { p })
        .collect();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let Ok(dist) = WeightedIndex::new(&weights) else {
            break; // every remaining weight is zero
        };
        let j = dist.sample(rng);
        weights[j] = 0.0;
        out.push(ItemId(j as u32));
    }
    if out.len() < n {
        // Not enough popular items: fill uniformly from the untouched rest.
        let mut mask = touched.to_vec();
        for i in &out {
            mask[i.index()] = true;
        }
        let rest = sample_uniform(&mask, n - out.len(), rng);
        out.extend(rest);
    }
    out
}
