//! Splits: which interaction is each user's target (leave-one-out by time,
//! or the source's fixed split), which is validation, and which users get a
//! decision under `--users`.

use super::options::{ProtocolConfig, TargetSplit, UserSelection};
use evomem_core::{Dataset, Interaction, LogicalTime, SplitRole};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Split roles by interaction time, and each user's target time.
pub(super) struct Split {
    /// Role of each interaction, indexed by logical time.
    pub roles: Vec<SplitRole>,
    /// Target time of each user (dense index), if the user has a decision.
    pub target_time: Vec<Option<LogicalTime>>,
}

/// Assign roles and targets: leave-one-out by time (last = test, the one
/// before = validation) unless the dataset fixes the split; with
/// `TargetSplit::Valid`, the validation interaction becomes the target.
pub(super) fn assign(
    dataset: &Dataset,
    histories: &[Vec<Interaction>],
    target: TargetSplit,
) -> Split {
    let mut roles = vec![SplitRole::Train; dataset.interactions.len()];
    let mut target_time: Vec<Option<LogicalTime>> = vec![None; dataset.users.len()];
    if dataset.fixed_split.is_empty() {
        for (u, h) in histories.iter().enumerate() {
            if h.len() < 2 {
                continue;
            }
            let last = h[h.len() - 1];
            roles[last.time.0 as usize] = SplitRole::Test;
            target_time[u] = Some(last.time);
            if h.len() >= 3 {
                roles[h[h.len() - 2].time.0 as usize] = SplitRole::Valid;
            }
        }
    } else {
        for (t, r) in &dataset.fixed_split {
            if let Some(slot) = roles.get_mut(t.0 as usize) {
                *slot = *r;
            }
        }
        for (u, h) in histories.iter().enumerate() {
            if h.len() < 2 {
                continue;
            }
            target_time[u] = h
                .iter()
                .find(|i| roles[i.time.0 as usize] == SplitRole::Test)
                .map(|i| i.time);
        }
    }
    if target == TargetSplit::Valid {
        for (u, h) in histories.iter().enumerate() {
            target_time[u] = h
                .iter()
                .find(|i| roles[i.time.0 as usize] == SplitRole::Valid)
                .map(|i| i.time);
        }
    }
    Split { roles, target_time }
}

/// Users eligible for a decision (they have a target), then the subsample.
pub(super) fn select(
    histories: &[Vec<Interaction>],
    target_time: &[Option<LogicalTime>],
    config: &ProtocolConfig,
) -> Vec<usize> {
    let eligible: Vec<usize> = (0..target_time.len())
        .filter(|&u| target_time[u].is_some())
        .collect();
    match config.users {
        UserSelection::All => eligible,
        UserSelection::Count(n) => choose(&eligible, n, config.seed),
        UserSelection::Active | UserSelection::Light => {
            let (lo, hi, seed, n) = config.users.named_rule().unwrap_or((0, 0, 0, 0));
            let pool: Vec<usize> = eligible
                .into_iter()
                .filter(|&u| (lo..=hi).contains(&histories[u].len()))
                .collect();
            choose(&pool, n, seed)
        }
    }
}

/// `n` of `pool` chosen with `seed`, returned in pool order (all when `n >= len`).
fn choose(pool: &[usize], n: usize, seed: u64) -> Vec<usize> {
    if n >= pool.len() {
        return pool.to_vec();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut idx = rand::seq::index::sample(&mut rng, pool.len(), n).into_vec();
    idx.sort_unstable();
    idx.into_iter().map(|k| pool[k]).collect()
}
