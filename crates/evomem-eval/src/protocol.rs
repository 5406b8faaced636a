//! Leakage-free ranking protocols: which decisions exist, which candidates
//! they rank, and what a policy may see before each of them.
//!
//! A [`Plan`] is built once from a [`Dataset`] and shared by every policy of a
//! run, so all policies rank exactly the same candidates.
//!
//! # Splits
//! Leave-one-out by time (the protocol of MARS §5.1, AtomRec §4.1, MemRec and
//! InstructRec): per user, interactions in global replay order; the last one is
//! the test target and the one before it is validation. When the source fixes
//! the split (`Dataset::fixed_split`, e.g. AgentCF's train/valid/test files),
//! that split is used and a user's first `Test` interaction is the target.
//! Users with fewer than two interactions (nothing to learn from) get no
//! decision. With `--target valid` ([`TargetSplit::Valid`]) the decision ranks
//! the validation interaction instead, for tuning; test interactions stay
//! hidden as in a test run, and users without a validation interaction get no
//! decision.
//!
//! # Candidates
//! The target plus `negatives` items (default 9) that the user never
//! interacted with anywhere in the data, drawn uniformly (or proportionally to
//! training popularity, i.e. counts over non-test interactions) from a
//! ChaCha8 RNG seeded with `mix(seed, user index)`. When the source gives fixed
//! candidate lists (`Dataset::candidates`, e.g. AgentCF `.random`), they are
//! used instead: the target is added when missing, items the user interacted
//! with (other than the target) are removed, and the list is used as given
//! ([`FixedCandidates::AsGiven`]) or cut to the first `negatives` negatives
//! ([`FixedCandidates::FirstN`]). The list is then shuffled with the same RNG,
//! so the target's position is uniform and ties in scores (broken by position,
//! see `evomem_core::metrics::rank_of_target`) do not favour it.
//!
//! # What a decision may see
//! - **Retrospective.** Memory is built in one pass before any decision. The
//!   policy observes, in global time order, every non-test interaction of
//!   every selected user, except interactions of a user at or after that
//!   user's own target time. It then gets `maintain(BeforeDecisions)` and
//!   makes every decision. So a decision for user `u` at target time `t` sees
//!   `u`'s own history strictly before `t`, and other users' non-test
//!   interactions, including ones later than `t` in wall-clock time (the
//!   papers' standard protocol, where all users' training data builds the
//!   model). It never sees any test interaction, nor anything of `u` at or
//!   after `t`. No feedback is given: an outcome would reveal a test item to
//!   later decisions.
//! - **Evolving.** One global chronological replay of all interactions of the
//!   selected users (ties already broken by file order in `LogicalTime`). When
//!   the replay reaches a user's target, the decision is made first (memory
//!   holds exactly the interactions with time `< t`), then feedback for it is
//!   given (reward = reciprocal rank of the target; `success` = ranked first;
//!   `item` = the target), then the target is observed. `maintain(Tick)` runs
//!   every `tick` observed interactions, `maintain(EndOfStream)` at the end.
//!
//! # Subsamples
//! `--users N` picks N users (with a decision) using the run seed; the named
//! subsamples follow MARS §5.1: `active` = 100 users with 50–200
//! interactions (seed 42), `light` = 100 users with 10–30 interactions (seed 64).
//! A subsample *is* the dataset: interactions of other users are not replayed
//! (as in MARS, whose subsamples are evaluated on their own).

use crate::error::EvalError;
use evomem_core::{Dataset, Interaction, ItemId, LogicalTime, SplitRole, UserId};
use rand::distributions::{Distribution, WeightedIndex};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Which protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolKind {
    /// Memory built from pre-target history in one pass, then all decisions.
    #[default]
    Retrospective,
    /// One global chronological replay; decisions at their own time.
    Evolving,
}

impl FromStr for ProtocolKind {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "retrospective" => Ok(Self::Retrospective),
            "evolving" => Ok(Self::Evolving),
            other => Err(config_err(
                "protocol",
                format!("`{other}` (expected retrospective or evolving)"),
            )),
        }
    }
}

/// How negatives are drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// Uniformly from items the user never touched.
    #[default]
    Uniform,
    /// Proportionally to training popularity (non-test interaction counts).
    Popularity,
}

impl FromStr for Sampling {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uniform" => Ok(Self::Uniform),
            "popularity" | "pop" => Ok(Self::Popularity),
            other => Err(config_err(
                "sampling",
                format!("`{other}` (expected uniform or popularity)"),
            )),
        }
    }
}

/// How fixed candidate lists from the source are used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FixedCandidates {
    /// The whole list (plus the target).
    #[default]
    AsGiven,
    /// The first `negatives` negatives of the list (plus the target).
    FirstN,
}

impl FromStr for FixedCandidates {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "as-given" | "as_given" => Ok(Self::AsGiven),
            "first-n" | "first_n" => Ok(Self::FirstN),
            other => Err(config_err(
                "fixed_candidates",
                format!("`{other}` (expected as-given or first-n)"),
            )),
        }
    }
}

/// Which users get decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum UserSelection {
    /// Everyone with a decision.
    #[default]
    All,
    /// `N` users chosen with the run seed.
    Count(usize),
    /// MARS *active*: 100 users with 50–200 interactions, seed 42.
    Active,
    /// MARS *light*: 100 users with 10–30 interactions, seed 64.
    Light,
}

impl UserSelection {
    /// `(min interactions, max interactions, seed, count)` of a named subsample.
    pub fn named_rule(self) -> Option<(usize, usize, u64, usize)> {
        match self {
            Self::Active => Some((50, 200, 42, 100)),
            Self::Light => Some((10, 30, 64, 100)),
            Self::All | Self::Count(_) => None,
        }
    }
}

impl fmt::Display for UserSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Count(n) => write!(f, "{n}"),
            Self::Active => f.write_str("active"),
            Self::Light => f.write_str("light"),
        }
    }
}

impl FromStr for UserSelection {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(Self::All),
            "active" => Ok(Self::Active),
            "light" => Ok(Self::Light),
            n => n.parse::<usize>().map(Self::Count).map_err(|_| {
                config_err(
                    "users",
                    format!("`{n}` (expected a number, all, active or light)"),
                )
            }),
        }
    }
}

impl TryFrom<String> for UserSelection {
    type Error = EvalError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<UserSelection> for String {
    fn from(u: UserSelection) -> String {
        u.to_string()
    }
}

/// Which held-out interaction a decision ranks.
///
/// `Valid` is for tuning: the decision ranks the user's validation
/// interaction (the one before the test target, or the source's first `Valid`
/// one) and the test interactions are treated exactly as in a test run: the
/// retrospective protocol never shows them, no user's own test item is drawn
/// as a negative, and the evolving replay is unchanged (a decision sees
/// everything before its time), so settings can be chosen on validation and
/// reported on test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetSplit {
    /// The test interaction (the reported numbers).
    #[default]
    Test,
    /// The validation interaction (for tuning); users without one get no
    /// decision.
    Valid,
}

impl FromStr for TargetSplit {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "test" => Ok(Self::Test),
            "valid" => Ok(Self::Valid),
            other => Err(config_err(
                "target",
                format!("`{other}` (expected test or valid)"),
            )),
        }
    }
}

/// Protocol settings. Defaults: retrospective, 9 uniform negatives, fixed
/// lists as given, seed 42, all users, tick every 1000 interactions, test
/// targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProtocolConfig {
    /// Retrospective or evolving.
    pub protocol: ProtocolKind,
    /// Negatives per decision (default 9).
    pub negatives: usize,
    /// Negative sampling (default uniform).
    pub sampling: Sampling,
    /// Use of fixed candidate lists (default as given).
    pub fixed_candidates: FixedCandidates,
    /// Seed for negatives, shuffles and `--users N` (default 42).
    pub seed: u64,
    /// Which users (default all).
    pub users: UserSelection,
    /// Evolving: `maintain(Tick)` every this many interactions; 0 = never (default 1000).
    pub tick: usize,
    /// Which held-out interaction is ranked (default test).
    #[serde(default)]
    pub target: TargetSplit,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            protocol: ProtocolKind::Retrospective,
            negatives: 9,
            sampling: Sampling::Uniform,
            fixed_candidates: FixedCandidates::AsGiven,
            seed: 42,
            users: UserSelection::All,
            tick: 1000,
            target: TargetSplit::Test,
        }
    }
}

/// One ranking decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Index in [`Plan::decisions`] (ordered by target time).
    pub decision_id: u64,
    /// For whom.
    pub user: UserId,
    /// The held-out interaction; the decision is made at `target.time`.
    pub target: Interaction,
    /// Shuffled candidates, target included.
    pub candidates: Vec<ItemId>,
    /// Position of the target in `candidates`.
    pub target_index: usize,
    /// Natural-language instruction, when the dataset has one.
    pub instruction: Option<String>,
}

impl Decision {
    /// The decision time.
    pub fn at(&self) -> LogicalTime {
        self.target.time
    }

    /// The query handed to `Policy::recall`.
    pub fn query(&self) -> evomem_core::DecisionQuery {
        evomem_core::DecisionQuery {
            decision_id: self.decision_id,
            user: self.user,
            at: self.target.time,
            instruction: self.instruction.clone(),
            candidates: self.candidates.clone(),
        }
    }
}

/// Counts describing a plan (written to `metrics.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanStats {
    /// Users in the dataset.
    pub users_total: usize,
    /// Users selected.
    pub users_selected: usize,
    /// Decisions.
    pub decisions: usize,
    /// Interactions the retrospective protocol shows policies.
    pub retrospective_visible: usize,
    /// Interactions of selected users (evolving replay length).
    pub stream_len: usize,
    /// Decisions that used a fixed candidate list.
    pub fixed_lists_used: usize,
    /// Items removed from fixed lists because the user had touched them.
    pub fixed_touched_removed: usize,
    /// Decisions with fewer negatives than requested (too few untouched items).
    pub short_candidate_sets: usize,
    /// Mean number of candidates per decision.
    pub mean_candidates: f64,
}

/// Decisions and visibility rules, built once per run.
#[derive(Debug, Clone)]
pub struct Plan<'d> {
    /// The data.
    pub dataset: &'d Dataset,
    /// Settings.
    pub config: ProtocolConfig,
    /// Decisions ordered by target time.
    pub decisions: Vec<Decision>,
    /// Counts.
    pub stats: PlanStats,
    roles: Vec<SplitRole>,
    selected: Vec<bool>,
    target_time: Vec<Option<LogicalTime>>,
    decision_at: BTreeMap<LogicalTime, usize>,
}

impl<'d> Plan<'d> {
    /// Build the decisions of `dataset` under `config`.
    pub fn build(dataset: &'d Dataset, config: &ProtocolConfig) -> Result<Self, EvalError> {
        for (k, i) in dataset.interactions.iter().enumerate() {
            if i.time != LogicalTime(k as u64)
                || i.user.index() >= dataset.users.len()
                || i.item.index() >= dataset.catalog.len()
            {
                return Err(EvalError::Dataset {
                    dataset: dataset.name.clone(),
                    message: format!(
                        "interaction #{k} is inconsistent (time {}, user {}, item {}): \
                         times must be 0,1,2,... and ids must index users/items",
                        i.time, i.user.0, i.item.0
                    ),
                });
            }
        }
        let histories = dataset.histories();
        let n_users = dataset.users.len();
        let mut roles = vec![SplitRole::Train; dataset.interactions.len()];
        let mut target_time: Vec<Option<LogicalTime>> = vec![None; n_users];
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

        if config.target == TargetSplit::Valid {
            for (u, h) in histories.iter().enumerate() {
                target_time[u] = h
                    .iter()
                    .find(|i| roles[i.time.0 as usize] == SplitRole::Valid)
                    .map(|i| i.time);
            }
        }

        // Users eligible for a decision, then the subsample.
        let eligible: Vec<usize> = (0..n_users).filter(|&u| target_time[u].is_some()).collect();
        let chosen: Vec<usize> = match config.users {
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
        };
        if chosen.is_empty() {
            return Err(EvalError::Dataset {
                dataset: dataset.name.clone(),
                message: format!(
                    "no user qualifies for a decision under --users {}",
                    config.users
                ),
            });
        }
        let mut selected = vec![false; n_users];
        for &u in &chosen {
            selected[u] = true;
        }

        // Training popularity for popularity-weighted negatives.
        let mut popularity = vec![0.0f64; dataset.catalog.len()];
        for i in &dataset.interactions {
            if roles[i.time.0 as usize] != SplitRole::Test {
                popularity[i.item.index()] += 1.0;
            }
        }

        let mut stats = PlanStats {
            users_total: n_users,
            users_selected: chosen.len(),
            ..PlanStats::default()
        };
        let mut decisions = Vec::with_capacity(chosen.len());
        for &u in &chosen {
            let Some(t) = target_time[u] else { continue };
            let target = dataset.interactions[t.0 as usize];
            let mut touched = vec![false; dataset.catalog.len()];
            for i in &histories[u] {
                touched[i.item.index()] = true;
            }
            let mut rng = ChaCha8Rng::seed_from_u64(mix(config.seed, u as u64));
            let mut candidates = match dataset.candidates.get(&UserId(u as u32)) {
                Some(list) => {
                    stats.fixed_lists_used += 1;
                    let mut seen = vec![false; dataset.catalog.len()];
                    let mut out = Vec::with_capacity(list.len() + 1);
                    for &c in list {
                        let Some(slot) = seen.get_mut(c.index()) else {
                            return Err(EvalError::Dataset {
                                dataset: dataset.name.clone(),
                                message: format!(
                                    "fixed candidate list of user `{}` names item index {} \
                                     outside the catalog",
                                    dataset.users[u].token, c.0
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
                    out
                }
                None => match config.sampling {
                    Sampling::Uniform => sample_uniform(&touched, config.negatives, &mut rng),
                    Sampling::Popularity => {
                        sample_popular(&touched, &popularity, config.negatives, &mut rng)
                    }
                },
            };
            if candidates.len() < config.negatives {
                stats.short_candidate_sets += 1;
            }
            candidates.push(target.item);
            candidates.shuffle(&mut rng);
            let target_index = candidates
                .iter()
                .position(|&c| c == target.item)
                .unwrap_or(0);
            decisions.push(Decision {
                decision_id: 0,
                user: UserId(u as u32),
                target,
                candidates,
                target_index,
                instruction: dataset.instructions.get(&UserId(u as u32)).cloned(),
            });
        }
        decisions.sort_by_key(|d| d.target.time);
        let mut decision_at = BTreeMap::new();
        for (k, d) in decisions.iter_mut().enumerate() {
            d.decision_id = k as u64;
            decision_at.insert(d.target.time, k);
        }
        stats.decisions = decisions.len();
        stats.mean_candidates = if decisions.is_empty() {
            0.0
        } else {
            decisions.iter().map(|d| d.candidates.len()).sum::<usize>() as f64
                / decisions.len() as f64
        };
        let mut plan = Self {
            dataset,
            config: config.clone(),
            decisions,
            stats,
            roles,
            selected,
            target_time,
            decision_at,
        };
        plan.stats.retrospective_visible = plan.retrospective_visible().count();
        plan.stats.stream_len = plan.stream().count();
        Ok(plan)
    }

    /// The split role of the interaction at `time`.
    pub fn role(&self, time: LogicalTime) -> SplitRole {
        self.roles
            .get(time.0 as usize)
            .copied()
            .unwrap_or(SplitRole::Train)
    }

    /// True when `user` is in the selected subsample.
    pub fn is_selected(&self, user: UserId) -> bool {
        self.selected.get(user.index()).copied().unwrap_or(false)
    }

    /// The target time of `user`, if the user has a decision.
    pub fn target_time(&self, user: UserId) -> Option<LogicalTime> {
        self.target_time.get(user.index()).copied().flatten()
    }

    /// The decision made when the evolving replay reaches `time`, if any.
    pub fn decision_at(&self, time: LogicalTime) -> Option<&Decision> {
        self.decision_at
            .get(&time)
            .and_then(|&k| self.decisions.get(k))
    }

    /// True when the retrospective protocol shows `i` to policies: a selected
    /// user's non-test interaction strictly before that user's own target.
    pub fn retrospective_allows(&self, i: &Interaction) -> bool {
        self.is_selected(i.user)
            && self.role(i.time) != SplitRole::Test
            && self.target_time(i.user).is_none_or(|t| i.time < t)
    }

    /// What the retrospective protocol shows, in global time order.
    pub fn retrospective_visible(&self) -> impl Iterator<Item = &'d Interaction> + '_ {
        self.dataset
            .interactions
            .iter()
            .filter(move |i| self.retrospective_allows(i))
    }

    /// The evolving replay: every interaction of selected users, in time order.
    pub fn stream(&self) -> impl Iterator<Item = &'d Interaction> + '_ {
        self.dataset
            .interactions
            .iter()
            .filter(move |i| self.is_selected(i.user))
    }

    /// Token of a user.
    pub fn user_token(&self, user: UserId) -> &'d str {
        self.dataset
            .users
            .get(user.index())
            .map(|u| u.token.as_str())
            .unwrap_or("")
    }

    /// Token of an item.
    pub fn item_token(&self, item: ItemId) -> &'d str {
        self.dataset
            .catalog
            .get(item)
            .map(|i| i.token.as_str())
            .unwrap_or("")
    }
}

/// SplitMix64 finaliser, used to derive independent per-user seeds.
pub fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn config_err(field: &str, message: String) -> EvalError {
    EvalError::Config {
        field: field.to_string(),
        message,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::synthetic_dataset;

    #[test]
    fn leave_one_out_roles() {
        let d = synthetic_dataset(5, 40, 6, 1);
        let p = Plan::build(&d, &ProtocolConfig::default()).unwrap();
        for dec in &p.decisions {
            let h = d.user_history(dec.user);
            assert_eq!(dec.target, *h.last().unwrap());
            assert_eq!(p.role(h[h.len() - 2].time), SplitRole::Valid);
            assert_eq!(dec.candidates[dec.target_index], dec.target.item);
        }
    }

    #[test]
    fn user_selection_parses() {
        assert_eq!(
            "active".parse::<UserSelection>().unwrap(),
            UserSelection::Active
        );
        assert_eq!(
            "12".parse::<UserSelection>().unwrap(),
            UserSelection::Count(12)
        );
        assert!("lots".parse::<UserSelection>().is_err());
        let j = serde_json::to_string(&UserSelection::Light).unwrap();
        assert_eq!(j, "\"light\"");
    }

    #[test]
    fn count_subsample_is_seeded() {
        let d = synthetic_dataset(30, 40, 6, 1);
        let cfg = ProtocolConfig {
            users: UserSelection::Count(7),
            ..ProtocolConfig::default()
        };
        let a = Plan::build(&d, &cfg).unwrap();
        let b = Plan::build(&d, &cfg).unwrap();
        assert_eq!(a.decisions, b.decisions);
        assert_eq!(a.decisions.len(), 7);
        assert!(a.stream().all(|i| a.is_selected(i.user)));
    }

    #[test]
    fn popularity_sampling_avoids_touched() {
        let d = synthetic_dataset(10, 30, 8, 3);
        let cfg = ProtocolConfig {
            sampling: Sampling::Popularity,
            ..ProtocolConfig::default()
        };
        let p = Plan::build(&d, &cfg).unwrap();
        for dec in &p.decisions {
            let h = d.user_history(dec.user);
            for c in &dec.candidates {
                assert!(*c == dec.target.item || !h.iter().any(|i| i.item == *c));
            }
        }
    }
}
