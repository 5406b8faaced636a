//! The interactions a baseline has been shown, indexed both ways.
//!
//! Every baseline keeps one of these and reads nothing else, which is what
//! makes them leakage-free: a score can only depend on interactions that went
//! through `observe`.
//!
//! **Co-occurrence counts.** Item-item cosine (item-kNN, MARS's offline
//! relatedness) needs `|U_a ∩ U_b|` for a candidate against each of a user's
//! items. Intersecting the two audiences at decision time costs the size of
//! an audience, which grows with the number of users, so a run's time grew
//! with users² (issue 16). An [`Observed`] made by
//! [`Observed::with_co_counts`] instead keeps every count up to date as pairs
//! arrive: a new distinct `(u, i)` adds one to `(i, j)` for each item `j`
//! already seen with `u`. That is `O(|I_u|)` per new pair, a run's total is
//! `Σ_u |I_u|²/2` (linear in users at a fixed activity distribution), a
//! count is one hash lookup, and the counts are exact at every moment, so
//! scores are the same values as from the intersection. The table holds one
//! entry per distinct co-consumed pair (at most `items²/2`).

use evomem_core::Interaction;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Observed interactions, by user and by item.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Distinct items per user (dense user index), in first-observed order.
    pub user_items: Vec<Vec<u32>>,
    /// Distinct users per item (dense item index), in first-observed order.
    pub item_users: Vec<Vec<u32>>,
    /// Interaction count per item, repeats included.
    pub item_counts: Vec<u64>,
    /// Distinct `(user, item)` pairs in first-observed order.
    pub pairs: Vec<(u32, u32)>,
    seen: HashSet<u64, IntHash>,
    /// Co-occurrence counts, when kept ([`Observed::with_co_counts`]).
    co: Option<CoCounts>,
    /// Number of `observe` calls.
    pub n_events: u64,
}

impl Observed {
    /// Nothing observed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nothing observed yet, keeping item-pair co-occurrence counts as
    /// interactions arrive (module docs), for [`Observed::co_count`].
    pub fn with_co_counts() -> Self {
        Self {
            co: Some(CoCounts::default()),
            ..Self::default()
        }
    }

    /// Record one interaction.
    pub fn record(&mut self, e: &Interaction) {
        let (u, i) = (e.user.0, e.item.0);
        self.n_events += 1;
        grow(&mut self.item_counts, i as usize + 1);
        self.item_counts[i as usize] += 1;
        if self.seen.insert(pair_key(u, i)) {
            grow(&mut self.user_items, u as usize + 1);
            grow(&mut self.item_users, i as usize + 1);
            if let Some(co) = &mut self.co {
                for &j in &self.user_items[u as usize] {
                    co.add(i, j);
                }
            }
            self.user_items[u as usize].push(i);
            self.item_users[i as usize].push(u);
            self.pairs.push((u, i));
        }
    }

    /// True when `user` has been observed with `item`.
    pub fn has(&self, user: u32, item: u32) -> bool {
        self.seen.contains(&pair_key(user, item))
    }

    /// `|U_a ∩ U_b|`: the number of distinct users observed with both items
    /// (0 when `a == b` or either is unseen). One lookup when the counts are
    /// kept ([`Observed::with_co_counts`]); otherwise the smaller audience is
    /// intersected with the other item, which costs its size.
    pub fn co_count(&self, a: u32, b: u32) -> u32 {
        if a == b {
            return 0;
        }
        if let Some(co) = &self.co {
            return co.get(a, b);
        }
        let (ua, ub) = (self.users_of(a), self.users_of(b));
        let (small, other) = if ua.len() <= ub.len() {
            (ua, b)
        } else {
            (ub, a)
        };
        let n = small.iter().filter(|&&u| self.has(u, other)).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Item-item cosine of the binary user columns,
    /// `|U_a ∩ U_b| / sqrt(|U_a| · |U_b|)` (Sarwar et al., WWW 2001,
    /// §3.1.1); 0 when `a == b` or either item is unseen.
    pub fn cosine(&self, a: u32, b: u32) -> f64 {
        let (na, nb) = (self.users_of(a).len(), self.users_of(b).len());
        if a == b || na == 0 || nb == 0 {
            return 0.0;
        }
        f64::from(self.co_count(a, b)) / ((na * nb) as f64).sqrt()
    }

    /// Distinct co-consumed item pairs held (0 when counts are not kept).
    pub fn co_pairs(&self) -> usize {
        self.co.as_ref().map_or(0, CoCounts::len)
    }

    /// Distinct items of `user` (empty when unknown).
    pub fn items_of(&self, user: u32) -> &[u32] {
        self.user_items
            .get(user as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// Distinct users of `item` (empty when unknown).
    pub fn users_of(&self, item: u32) -> &[u32] {
        self.item_users
            .get(item as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// Observed interaction count of `item` (0 when unknown).
    pub fn count(&self, item: u32) -> u64 {
        self.item_counts.get(item as usize).copied().unwrap_or(0)
    }
}

/// `|U_a ∩ U_b|` per unordered item pair, one entry per pair seen together.
#[derive(Debug, Clone, Default)]
struct CoCounts {
    counts: HashMap<u64, u32, IntHash>,
}

impl CoCounts {
    fn add(&mut self, a: u32, b: u32) {
        *self.counts.entry(unordered_key(a, b)).or_insert(0) += 1;
    }

    fn get(&self, a: u32, b: u32) -> u32 {
        self.counts.get(&unordered_key(a, b)).copied().unwrap_or(0)
    }

    fn len(&self) -> usize {
        self.counts.len()
    }
}

fn pair_key(a: u32, b: u32) -> u64 {
    (u64::from(a) << 32) | u64::from(b)
}

fn unordered_key(a: u32, b: u32) -> u64 {
    pair_key(a.min(b), a.max(b))
}

/// Hasher of the integer keys above: SplitMix64's finaliser (Steele, Lea &
/// Flood, OOPSLA 2014) over the key. These tables take tens of millions of
/// lookups per run, where SipHash's cost showed in profiles; no key here
/// comes from outside the process, so hash flooding is not a concern, and
/// the hash is the same on every run.
type IntHash = BuildHasherDefault<IntHasher>;

/// See [`IntHash`].
#[derive(Debug, Default, Clone, Copy)]
struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(32) ^ n;
    }
}

/// Extend `v` with defaults to at least `len` elements.
pub fn grow<T: Default + Clone>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize(len, T::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::{ItemId, LogicalTime, UserId};

    fn event(u: u32, i: u32, t: u64) -> Interaction {
        Interaction {
            user: UserId(u),
            item: ItemId(i),
            rating: None,
            timestamp: t as i64,
            time: LogicalTime(t),
        }
    }

    /// Kept counts equal the audience intersection after every event, on a
    /// seeded stream with repeats (a repeat counts for `count`, not for
    /// users).
    #[test]
    fn kept_counts_equal_the_intersection_at_every_step() {
        let mut kept = Observed::with_co_counts();
        let mut plain = Observed::new();
        let mut x: u64 = 42;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % m
        };
        for t in 0..600 {
            let (u, i) = (next(12) as u32, next(9) as u32);
            kept.record(&event(u, i, t));
            plain.record(&event(u, i, t));
            if t % 7 == 0 {
                for a in 0..10 {
                    for b in 0..10 {
                        assert_eq!(
                            kept.co_count(a, b),
                            plain.co_count(a, b),
                            "({a}, {b}) at {t}"
                        );
                        assert_eq!(kept.co_count(a, b), kept.co_count(b, a));
                    }
                }
            }
        }
        assert!(kept.co_pairs() > 0 && kept.co_pairs() <= 9 * 8 / 2);
        assert_eq!(plain.co_pairs(), 0);
    }

    #[test]
    fn co_count_is_the_number_of_shared_users() {
        let mut o = Observed::with_co_counts();
        for (t, (u, i)) in [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (0, 1), (2, 3)]
            .into_iter()
            .enumerate()
        {
            o.record(&event(u, i, t as u64));
        }
        assert_eq!(o.co_count(1, 2), 2);
        assert_eq!(o.co_count(2, 1), 2);
        assert_eq!(o.co_count(1, 3), 1);
        assert_eq!(o.co_count(2, 3), 0);
        assert_eq!(o.co_count(1, 1), 0);
        assert_eq!(o.co_count(1, 99), 0);
        assert!(o.has(0, 1) && !o.has(2, 2));
        // |U_1| = 3, |U_2| = 2, two shared.
        assert!((o.cosine(1, 2) - 2.0 / 6.0f64.sqrt()).abs() < 1e-12);
        assert_eq!(o.cosine(1, 1), 0.0);
        assert_eq!(o.cosine(1, 99), 0.0);
    }
}
