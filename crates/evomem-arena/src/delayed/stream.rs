//! The delayed-feedback stream: which ratings are predicted, in what order,
//! and when each label matures.
//!
//! **Order.** The dataset's interactions are already in global replay order
//! (timestamp, ties by file order); the stream keeps those that carry a
//! rating, for the selected users, in that order. Each event gets its
//! per-user ordinal `k` (0, 1, 2, … in that user's own ratings).
//!
//! **Maturity.** δ is counted in the user's own ratings: the label of the
//! user's `k`-th rating matures just before that user's prediction number
//! `k + δ + 1` (both 0-based). With δ = 0 a label is visible from the user's
//! next prediction on; a label whose maturity prediction never comes (the
//! user's last δ + 1 ratings) is never revealed. [`Schedule`] is the one
//! place that says this; the driver asks it and the leak canary checks it
//! independently.
//!
//! **Subsample.** `--users N` keeps a seeded choice of N users (all their
//! ratings), so small runs still replay whole user histories.
//!
//! **Halves.** `--half dev|report` keeps one half of the users, split by a
//! seeded hash of the user's token in the source data (MD5 of
//! `"<split seed>:<token>"`, lowest bit of the first byte: 0 = `dev`,
//! 1 = `report`). The split depends on the split seed and the token only,
//! never on the run seed or the file order, so the development half is
//! the same users in every run: develop on `dev`, report on `report` with
//! a run seed not used while developing. `--users N` then subsamples
//! within the half.

use crate::error::ArenaError;
use evomem_core::{Dataset, Interaction, ItemId, LogicalTime, UserId};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Which half of the users a run keeps (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Half {
    /// Every user.
    #[default]
    All,
    /// The development half.
    Dev,
    /// The reported half.
    Report,
}

impl Half {
    /// Parse `all`, `dev` or `report`.
    pub fn parse(s: &str) -> Result<Self, ArenaError> {
        match s {
            "all" => Ok(Self::All),
            "dev" => Ok(Self::Dev),
            "report" => Ok(Self::Report),
            other => Err(ArenaError::Config(format!(
                "--half must be all, dev or report, got `{other}`"
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Dev => "dev",
            Self::Report => "report",
        }
    }

    /// The half a user of token `token` is in under `split_seed`
    /// (`Dev` or `Report`).
    pub fn of(token: &str, split_seed: u64) -> Self {
        use md5::{Digest, Md5};
        let h = Md5::digest(format!("{split_seed}:{token}").as_bytes());
        if h.first().copied().unwrap_or(0) & 1 == 0 {
            Self::Dev
        } else {
            Self::Report
        }
    }

    /// Does this half keep a user of token `token`?
    pub fn keeps(self, token: &str, split_seed: u64) -> bool {
        self == Self::All || Self::of(token, split_seed) == self
    }
}

/// One rating of the stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event {
    /// The interaction (its `time` is the global replay position).
    pub interaction: Interaction,
    /// The rating (the label).
    pub rating: f64,
    /// Position of this rating in its user's own sequence (0-based).
    pub k: usize,
}

impl Event {
    /// Who.
    pub fn user(&self) -> UserId {
        self.interaction.user
    }
    /// What.
    pub fn item(&self) -> ItemId {
        self.interaction.item
    }
    /// The global replay position (the decision time of its prediction).
    pub fn time(&self) -> LogicalTime {
        self.interaction.time
    }
}

/// The replayed ratings and, per user, the positions of their events.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    /// Events in replay order.
    pub events: Vec<Event>,
    /// `by_user[u][k]` is the index in `events` of user `u`'s `k`-th rating.
    pub by_user: Vec<Vec<usize>>,
    /// Users kept (sorted).
    pub users: Vec<UserId>,
}

impl Stream {
    /// Build the stream of `data`, keeping `users` users (a seeded choice)
    /// when given, or all users.
    pub fn build(data: &Dataset, users: Option<usize>, seed: u64) -> Result<Self, ArenaError> {
        Self::build_half(data, users, seed, Half::All, 0)
    }

    /// [`Stream::build`] over the users of `half` under `split_seed`
    /// (module docs); `users` subsamples within the half.
    pub fn build_half(
        data: &Dataset,
        users: Option<usize>,
        seed: u64,
        half: Half,
        split_seed: u64,
    ) -> Result<Self, ArenaError> {
        let mut all: Vec<UserId> = data
            .users
            .iter()
            .filter(|u| half.keeps(&u.token, split_seed))
            .map(|u| u.id)
            .collect();
        let keep: Vec<UserId> = match users {
            Some(n) if n < all.len() => {
                all.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x0075_7365_7273));
                let mut k = all[..n].to_vec();
                k.sort();
                k
            }
            _ => all,
        };
        let mut wanted = vec![false; data.users.len()];
        for u in &keep {
            if let Some(w) = wanted.get_mut(u.index()) {
                *w = true;
            }
        }
        let mut by_user = vec![Vec::new(); data.users.len()];
        let mut events = Vec::new();
        for i in &data.interactions {
            let Some(r) = i.rating else { continue };
            if !wanted.get(i.user.index()).copied().unwrap_or(false) {
                continue;
            }
            let Some(list) = by_user.get_mut(i.user.index()) else {
                continue;
            };
            let k = list.len();
            list.push(events.len());
            events.push(Event {
                interaction: *i,
                rating: f64::from(r),
                k,
            });
        }
        if events.is_empty() {
            return Err(ArenaError::Config(format!(
                "dataset `{}` has no rated interactions for the selected users",
                data.name
            )));
        }
        let users = keep
            .into_iter()
            .filter(|u| by_user.get(u.index()).is_some_and(|l| !l.is_empty()))
            .collect();
        Ok(Self {
            events,
            by_user,
            users,
        })
    }

    /// The `k`-th event of `user`, if any.
    pub fn user_event(&self, user: UserId, k: usize) -> Option<&Event> {
        self.by_user
            .get(user.index())
            .and_then(|l| l.get(k))
            .and_then(|&e| self.events.get(e))
    }
}

/// When labels mature: the label of a user's `k`-th rating becomes visible
/// just before that user's prediction number `k + lag` (0-based), where
/// `lag = δ + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// δ + 1 (predictions of the same user between a rating and the first
    /// prediction that may see its label, counting the rating's own).
    pub lag: usize,
}

impl Schedule {
    /// The protocol's schedule for delay `delta`.
    pub fn new(delta: usize) -> Self {
        Self { lag: delta + 1 }
    }

    /// The label that matures just before the user's prediction number
    /// `j`: the user's rating number `j - lag`, when there is one.
    pub fn maturing_before(&self, j: usize) -> Option<usize> {
        j.checked_sub(self.lag)
    }

    /// Is the label of rating `k` visible at the same user's prediction `j`?
    pub fn visible(&self, k: usize, j: usize) -> bool {
        k + self.lag <= j
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn delta_zero_reveals_a_label_before_the_next_prediction() {
        let s = Schedule::new(0);
        assert_eq!(s.maturing_before(0), None);
        assert_eq!(s.maturing_before(1), Some(0));
        assert!(!s.visible(3, 3), "never its own label");
        assert!(s.visible(3, 4));
    }

    #[test]
    fn delta_five_waits_five_more_predictions_of_the_same_user() {
        let s = Schedule::new(5);
        for j in 0..6 {
            assert_eq!(s.maturing_before(j), None, "j={j}");
        }
        assert_eq!(s.maturing_before(6), Some(0));
        assert_eq!(s.maturing_before(26), Some(20));
        assert!(!s.visible(0, 5));
        assert!(s.visible(0, 6));
        // Each prediction j sees exactly the labels 0..j-δ-1, and exactly one
        // new label matures per prediction once j > δ.
        for delta in [0usize, 5, 10, 20] {
            let s = Schedule::new(delta);
            for j in 0..60usize {
                let seen = (0..j).filter(|&k| s.visible(k, j)).count();
                assert_eq!(seen, j.saturating_sub(delta), "δ={delta} j={j}");
                let newly = s.maturing_before(j);
                assert_eq!(newly.is_some(), j > delta);
                if let Some(k) = newly {
                    assert!(s.visible(k, j) && !s.visible(k, j - 1));
                }
            }
        }
    }

    #[test]
    fn stream_numbers_each_users_ratings_and_subsamples_whole_users() {
        let data = evomem_core_dataset();
        let s = Stream::build(&data, None, 1).unwrap();
        assert_eq!(s.events.len(), 5, "the unrated interaction is skipped");
        let ks: Vec<(u32, usize)> = s.events.iter().map(|e| (e.user().0, e.k)).collect();
        assert_eq!(ks, vec![(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]);
        assert_eq!(s.user_event(UserId(0), 2).unwrap().rating, 2.0);
        let one = Stream::build(&data, Some(1), 1).unwrap();
        assert_eq!(one.users.len(), 1);
        let u = one.users[0];
        assert!(one.events.iter().all(|e| e.user() == u));
        assert_eq!(one, Stream::build(&data, Some(1), 1).unwrap());
    }

    #[test]
    fn the_halves_split_users_by_token_whatever_the_run_seed() {
        let mut data = evomem_core_dataset();
        // 200 users, one rating each.
        data.users = (0..200u32)
            .map(|u| evomem_core::User {
                id: UserId(u),
                token: format!("u{u}"),
                attributes: Default::default(),
            })
            .collect();
        data.interactions = (0..200u32)
            .map(|u| Interaction {
                user: UserId(u),
                item: ItemId(0),
                rating: Some(3.0),
                timestamp: i64::from(u),
                time: LogicalTime(u64::from(u)),
            })
            .collect();
        let dev = Stream::build_half(&data, None, 1, Half::Dev, 7).unwrap();
        let rep = Stream::build_half(&data, None, 2, Half::Report, 7).unwrap();
        let all = Stream::build_half(&data, None, 1, Half::All, 7).unwrap();
        assert_eq!(all.users.len(), 200);
        assert_eq!(dev.users.len() + rep.users.len(), 200);
        assert!(dev.users.iter().all(|u| !rep.users.contains(u)), "disjoint");
        assert!((70..=130).contains(&dev.users.len()), "{}", dev.users.len());
        // The run seed does not move the split; the split seed does.
        assert_eq!(
            dev.users,
            Stream::build_half(&data, None, 99, Half::Dev, 7)
                .unwrap()
                .users
        );
        assert_ne!(
            dev.users,
            Stream::build_half(&data, None, 1, Half::Dev, 8)
                .unwrap()
                .users
        );
        // A user's half is its token's, wherever it sits in the file.
        for u in &dev.users {
            assert_eq!(Half::of(&format!("u{}", u.0), 7), Half::Dev);
        }
        // A subsample stays inside the half.
        let some = Stream::build_half(&data, Some(10), 3, Half::Report, 7).unwrap();
        assert_eq!(some.users.len(), 10);
        assert!(some.users.iter().all(|u| rep.users.contains(u)));
        assert!(Half::parse("half").is_err());
    }

    fn evomem_core_dataset() -> Dataset {
        use evomem_core::User;
        let inter = |t: u64, u: u32, i: u32, r: Option<f32>| Interaction {
            user: UserId(u),
            item: ItemId(i),
            rating: r,
            timestamp: t as i64,
            time: LogicalTime(t),
        };
        Dataset {
            name: "toy".into(),
            users: (0..2)
                .map(|u| User {
                    id: UserId(u),
                    token: u.to_string(),
                    attributes: Default::default(),
                })
                .collect(),
            interactions: vec![
                inter(0, 0, 0, Some(4.0)),
                inter(1, 1, 0, Some(5.0)),
                inter(2, 0, 1, Some(3.0)),
                inter(3, 1, 2, None),
                inter(4, 0, 2, Some(2.0)),
                inter(5, 1, 1, Some(1.0)),
            ],
            ..Dataset::default()
        }
    }
}
