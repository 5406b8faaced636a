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
//! By default a subsample *is* the dataset: interactions of other users are
//! not replayed (as in MARS, whose subsamples are evaluated on their own).
//! With `--memory-users all` ([`MemoryUsers::All`]) only the decisions are
//! subsampled: every user's interactions are observed under the same
//! visibility rules (a user without a decision still never shows a test
//! interaction to the retrospective protocol), as in AtomRec's 1,000-user
//! ablations, where collaborative memory is built from everyone.

mod candidates;
mod options;
mod split;

pub use options::{
    FixedCandidates, MemoryUsers, ProtocolConfig, ProtocolKind, Sampling, TargetSplit,
    UserSelection,
};

use crate::error::EvalError;
use evomem_core::{Dataset, Interaction, ItemId, LogicalTime, SplitRole, UserId};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
            kind: evomem_core::DecisionKind::Rank {
                candidates: self.candidates.clone(),
            },
        }
    }
}

/// Counts describing a plan (written to `metrics.json`); defined with the
/// run folder's other rows in `evomem-rundir`.
pub use evomem_rundir::PlanStats;

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
    /// Build the decisions of `dataset` under `config`: check the data,
    /// assign split roles and targets ([`split::assign`]), choose the users
    /// ([`split::select`]), draw each user's candidates
    /// ([`candidates::for_user`]), and order the decisions by target time.
    pub fn build(dataset: &'d Dataset, config: &ProtocolConfig) -> Result<Self, EvalError> {
        if config.negatives == 0 {
            // The target alone among its candidates: every metric is 1.0.
            return Err(EvalError::Config {
                field: "negatives".into(),
                message: "0 leaves the target alone among the candidates, so every metric \
                          would be 1.0; use 1 or more (default 9)"
                    .into(),
            });
        }
        check_consistent(dataset)?;
        let histories = dataset.histories();
        let n_users = dataset.users.len();
        let split::Split { roles, target_time } = split::assign(dataset, &histories, config.target);
        let chosen = split::select(&histories, &target_time, config);
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
        let popularity = candidates::training_popularity(dataset, &roles);
        let mut stats = PlanStats {
            users_total: n_users,
            users_selected: chosen.len(),
            ..PlanStats::default()
        };
        let mut decisions = Vec::with_capacity(chosen.len());
        for &u in &chosen {
            let Some(t) = target_time[u] else { continue };
            let target = dataset.interactions[t.0 as usize];
            let mut rng = ChaCha8Rng::seed_from_u64(mix(config.seed, u as u64));
            let mut candidates = candidates::for_user(
                dataset,
                config,
                &histories[u],
                target,
                &popularity,
                &mut stats,
                &mut rng,
            )?;
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

    /// True when `user`'s interactions build memory: a selected user, or
    /// anyone under [`MemoryUsers::All`].
    pub fn in_memory(&self, user: UserId) -> bool {
        self.config.memory_users == MemoryUsers::All || self.is_selected(user)
    }

    /// True when the retrospective protocol shows `i` to policies: a memory
    /// user's ([`Plan::in_memory`]) non-test interaction strictly before that
    /// user's own target.
    pub fn retrospective_allows(&self, i: &Interaction) -> bool {
        self.in_memory(i.user)
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

    /// The evolving replay: every interaction of memory users
    /// ([`Plan::in_memory`]), in time order.
    pub fn stream(&self) -> impl Iterator<Item = &'d Interaction> + '_ {
        self.dataset
            .interactions
            .iter()
            .filter(move |i| self.in_memory(i.user))
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

/// Interactions must be numbered 0, 1, 2, ... by time and index existing
/// users and items.
fn check_consistent(dataset: &Dataset) -> Result<(), EvalError> {
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
    Ok(())
}

/// SplitMix64 finaliser, used to derive independent per-user seeds.
pub fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
    fn zero_negatives_is_refused_naming_the_field() {
        let d = synthetic_dataset(5, 40, 6, 1);
        let cfg = ProtocolConfig {
            negatives: 0,
            ..ProtocolConfig::default()
        };
        let e = Plan::build(&d, &cfg).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("negatives") && e.contains("1.0")),
            "{e:?}"
        );
        let one = ProtocolConfig {
            negatives: 1,
            ..ProtocolConfig::default()
        };
        assert!(Plan::build(&d, &one).is_ok());
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

    /// `--memory-users all` subsamples the decisions only: the same
    /// decisions as the plain subsample, but every user's visible history is
    /// observed, and still no test interaction and nothing of a decider at or
    /// after their target.
    #[test]
    fn memory_users_all_keeps_decisions_and_widens_memory() {
        let d = synthetic_dataset(30, 40, 6, 1);
        let sub = ProtocolConfig {
            users: UserSelection::Count(7),
            ..ProtocolConfig::default()
        };
        let wide = ProtocolConfig {
            memory_users: MemoryUsers::All,
            ..sub.clone()
        };
        let full = Plan::build(&d, &ProtocolConfig::default()).unwrap();
        let a = Plan::build(&d, &sub).unwrap();
        let b = Plan::build(&d, &wide).unwrap();
        assert_eq!(a.decisions, b.decisions);
        assert!(b.stats.retrospective_visible > a.stats.retrospective_visible);
        assert_eq!(
            b.stats.retrospective_visible,
            full.stats.retrospective_visible
        );
        assert_eq!(b.stats.stream_len, d.interactions.len());
        assert!(b.stream().any(|i| !b.is_selected(i.user)));
        for i in b.retrospective_visible() {
            assert_ne!(b.role(i.time), SplitRole::Test);
            if let Some(t) = b.target_time(i.user) {
                assert!(i.time < t);
            }
        }
        assert_eq!("all".parse::<MemoryUsers>().unwrap(), MemoryUsers::All);
        let err = "everyone".parse::<MemoryUsers>().unwrap_err().to_string();
        assert!(err.contains("memory_users"), "{err}");
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
