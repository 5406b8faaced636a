//! The offline ranker's stand-in for a frozen LLM's world knowledge.
//!
//! MARS's ranker (§3.4) is a frozen LLM: before any memory is consulted it
//! already knows which films or albums are widely known and which tend to be
//! enjoyed together. The offline backend has no such model, so it derives the
//! same two kinds of knowledge from the interactions the policy has observed,
//! which is exactly what the protocol shows before a decision (never a test
//! interaction, never the user's own target or later; under the
//! retrospective protocol other users' training interactions of any time, as
//! for BPR), so it is leakage-free:
//!
//! - **familiarity** `P(c) = ln(1 + n_c)`, with `n_c` the number of observed
//!   interactions with `c`;
//! - **relatedness** `R(i, c) = |U_i ∩ U_c| / sqrt(|U_i|·|U_c|)`, the cosine of
//!   the two items' binary user columns (Sarwar et al., WWW 2001, §3.1.1);
//! - **a walk** `h_walk(c)`: two steps along forward co-consumption (what
//!   people consumed within [`WALK_WINDOW`] items *after* an item, a pair `d`
//!   apart weighing [`WALK_DECAY`]`^(d−1)`) from the event tier's items
//!   (newest first, weighed `recency_decay^rank` as `R̄`), as
//!   [`evomem_kit::walk`] defines it (issue 55). On sparse data without item
//!   text (Amazon sets of 9 interactions per user) most targets share no
//!   user with any event item, so `R` is 0 for them and the ranker fell to
//!   familiarity; a model that knows which items lead to which reaches them
//!   in two steps. The window and decay are seqmem's defaults.
//!
//! Neither is memory: with `tiers=none` the ranker uses familiarity alone, so
//! the tier factorial measures what each memory tier adds on top of the
//! "LLM alone" row.

use evomem_core::Interaction;
pub use evomem_kit::walk::{DECAY as WALK_DECAY, EPS as WALK_EPS, WINDOW as WALK_WINDOW};
use evomem_kit::walk::{Removed, Successors};
use evomem_kit::Observed;
use std::collections::{HashMap, VecDeque};

/// Observed item popularity and co-consumption, read off the same
/// [`Observed`] index the baselines keep.
#[derive(Debug, Clone, Default)]
pub struct Knowledge {
    seen: Observed,
    /// Forward co-consumption for the walk.
    succ: Successors,
    /// Each user's latest `WALK_WINDOW + 1` items, oldest first.
    tails: HashMap<u32, VecDeque<u32>>,
}

impl Knowledge {
    /// Nothing observed. Co-occurrence counts are kept as interactions
    /// arrive, so a relatedness is one lookup rather than an intersection of
    /// audiences, whose cost grows with the number of users (issue 16).
    pub fn new() -> Self {
        Self {
            seen: Observed::with_co_counts(),
            succ: Successors::new(WALK_WINDOW, WALK_DECAY),
            tails: HashMap::new(),
        }
    }

    /// Record one observed interaction.
    pub fn record(&mut self, e: &Interaction) {
        self.seen.record(e);
        let tail = self.tails.entry(e.user.0).or_default();
        let previous: Vec<u32> = tail.iter().rev().take(WALK_WINDOW).copied().collect();
        self.succ.add(&previous, e.item.0);
        tail.push_back(e.item.0);
        if tail.len() > WALK_WINDOW + 1 {
            tail.pop_front();
        }
    }

    /// `ln(ε + h_walk(c))` for each candidate (module docs), the walk
    /// starting from `events` (newest first) weighed `decay^rank`;
    /// `removed` reads the weights without a held-out arrival
    /// ([`Knowledge::latest_arrival`]).
    pub fn walk(
        &self,
        events: &[(u32, f64)],
        decay: f64,
        candidates: &[u32],
        removed: Option<&Removed>,
    ) -> Vec<f64> {
        let mut w = 1.0;
        let starts: Vec<(u32, f64)> = events
            .iter()
            .map(|&(item, _)| {
                let s = (item, w);
                w *= decay;
                s
            })
            .collect();
        let first = self.succ.first_without(&starts, removed);
        candidates
            .iter()
            .map(|&c| (WALK_EPS + first.reach_without(&self.succ, c, removed)).ln())
            .collect()
    }

    /// What the arrival of `user`'s latest interaction added to the walk's
    /// weights, when that interaction was with `item` (the fit's held-out
    /// one); `None` when it was not.
    pub fn latest_arrival(&self, user: u32, item: u32) -> Option<Removed> {
        let tail = self.tails.get(&user)?;
        if tail.back() != Some(&item) {
            return None;
        }
        let previous: Vec<u32> = tail.iter().rev().skip(1).take(WALK_WINDOW).copied().collect();
        Some(self.succ.without_latest(&previous, item))
    }

    /// Familiarity `ln(1 + n_c)`.
    pub fn familiarity(&self, item: u32) -> f64 {
        (1.0 + self.seen.count(item) as f64).ln()
    }

    /// Relatedness `R(a, b)`; 0 when either item is unseen or `a == b`.
    pub fn relatedness(&self, a: u32, b: u32) -> f64 {
        self.seen.cosine(a, b)
    }

    /// Observed interactions so far (repeats included).
    pub fn events(&self) -> u64 {
        self.seen.n_events
    }

    /// Distinct items of `user`, in first-observed order.
    pub fn items_of(&self, user: u32) -> &[u32] {
        self.seen.items_of(user)
    }

    /// Familiarity of `item` with `removed` of its observed interactions
    /// taken out (the fit's held-out one).
    pub fn familiarity_without(&self, item: u32, removed: u64) -> f64 {
        (1.0 + self.seen.count(item).saturating_sub(removed) as f64).ln()
    }

    /// Relatedness `R(a, b)` as if `user` had never been observed with
    /// `held` (the fit's held-out interaction, when it was the user's only
    /// one with that item): `user` leaves `held`'s audience, and the
    /// co-consumption count with `user`'s other items drops by one.
    pub fn relatedness_without(&self, a: u32, b: u32, user: u32, held: u32) -> f64 {
        if a == b || (a != held && b != held) || !self.seen.has(user, held) {
            return self.relatedness(a, b);
        }
        let other = if a == held { b } else { a };
        let n_held = self.seen.users_of(held).len().saturating_sub(1);
        let n_other = self.seen.users_of(other).len();
        if n_held == 0 || n_other == 0 {
            return 0.0;
        }
        let shared = self.seen.co_count(a, b).saturating_sub(u32::from(self.seen.has(user, other)));
        f64::from(shared) / ((n_held * n_other) as f64).sqrt()
    }
}

/// Standardise `v` in place across one decision's candidates (zero mean, unit
/// standard deviation). A constant term becomes all zeros, so it cannot move
/// the ranking.
pub fn standardise(v: &mut [f64]) {
    if v.is_empty() {
        return;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let sd = var.sqrt();
    for x in v.iter_mut() {
        *x = if sd > 1e-12 && x.is_finite() {
            (*x - mean) / sd
        } else {
            0.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(u: u32, i: u32, t: u64) -> Interaction {
        Interaction {
            user: evomem_core::UserId(u),
            item: evomem_core::ItemId(i),
            rating: None,
            timestamp: t as i64,
            time: evomem_core::LogicalTime(t),
        }
    }

    /// Two users: 0 → 1 → 2 and 0 → 3. From item 0 the first step reaches
    /// 1 (weight 1), 2 (0.9, two apart) and 3 (1): shares 1/2.9, 0.9/2.9,
    /// 1/2.9; a second step from 1 reaches 2 with probability 1. So
    /// `h_walk(2) = 1/2.9`, and nothing reaches 0.
    #[test]
    fn the_walk_is_two_steps_from_the_event_items() {
        let mut k = Knowledge::new();
        for (t, (u, i)) in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 3)].into_iter().enumerate() {
            k.record(&ev(u, i, t as u64));
        }
        let h = k.walk(&[(0, 1.0)], 0.5, &[2, 0, 3], None);
        let want = |x: f64| (WALK_EPS + x).ln();
        assert!((h[0] - want(1.0 / 2.9)).abs() < 1e-12, "{h:?}");
        assert_eq!(h[1], want(0.0));
        // 3 has no successor: reached in one step only, not in two.
        assert_eq!(h[2], want(0.0));
        // Starts are weighed decay^rank, newest first (the events' own
        // weights are not read): 1 at rank 0 (weight 1), 0 at rank 1 (0.5),
        // normalised by 1.5. Two steps to 2 only go 0 → 1 → 2 (2 has no
        // successor, so 1 → 2 → 2 is no walk).
        let h2 = k.walk(&[(1, 9.0), (0, -1.0)], 0.5, &[2], None);
        let want2 = (0.5 * (1.0 / 2.9)) / 1.5;
        assert!((h2[0] - want(want2)).abs() < 1e-12, "{h2:?}");
    }

    /// The fit's held-out arrival read out of the walk gives the walk of
    /// the knowledge that never saw it.
    #[test]
    fn the_walk_without_the_latest_arrival_is_the_walk_before_it() {
        let events = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (0, 2)];
        let mut all = Knowledge::new();
        let mut before = Knowledge::new();
        for (t, &(u, i)) in events.iter().enumerate() {
            all.record(&ev(u, i, t as u64));
            if t + 1 < events.len() {
                before.record(&ev(u, i, t as u64));
            }
        }
        let removed = all.latest_arrival(0, 2);
        assert!(removed.is_some());
        assert!(all.latest_arrival(0, 1).is_none());
        let starts = [(1, 1.0), (0, 1.0)];
        let got = all.walk(&starts, 0.9, &[0, 1, 2], removed.as_ref());
        let want = before.walk(&starts, 0.9, &[0, 1, 2], None);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
        assert_ne!(all.walk(&starts, 0.9, &[2], None)[0], want[2]);
    }

    #[test]
    fn relatedness_is_binary_cosine() {
        let ev = |u: u32, i: u32, t: u64| Interaction {
            user: evomem_core::UserId(u),
            item: evomem_core::ItemId(i),
            rating: None,
            timestamp: t as i64,
            time: evomem_core::LogicalTime(t),
        };
        let mut k = Knowledge::new();
        for (t, (u, i)) in [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (5, 3), (0, 1)]
            .into_iter()
            .enumerate()
        {
            // The last one repeats (0, 1): it counts for familiarity, not for users.
            k.record(&ev(u, i, t as u64));
        }
        assert!((k.relatedness(1, 2) - 2.0 / (6.0f64).sqrt()).abs() < 1e-12);
        assert_eq!(k.relatedness(1, 3), 0.0);
        assert_eq!(k.relatedness(1, 1), 0.0);
        assert_eq!(k.relatedness(1, 99), 0.0);
        assert!((k.familiarity(1) - 5.0f64.ln()).abs() < 1e-12);
        // User 1 taken out of item 2's audience: items 1 and 2 share user 0
        // only, among 3 and 1 users.
        assert!((k.relatedness_without(1, 2, 1, 2) - 1.0 / 3.0f64.sqrt()).abs() < 1e-12);
        assert!((k.relatedness_without(2, 1, 1, 2) - 1.0 / 3.0f64.sqrt()).abs() < 1e-12);
        // Pairs without the held item, or a user never seen with it: as is.
        assert_eq!(k.relatedness_without(1, 3, 1, 2), k.relatedness(1, 3));
        assert_eq!(k.relatedness_without(1, 2, 2, 2), k.relatedness(1, 2));
        assert!((k.familiarity_without(1, 1) - 4.0f64.ln()).abs() < 1e-12);
        assert_eq!(k.events(), 7);
        assert_eq!(k.familiarity(99), 0.0);
    }

    #[test]
    fn standardise_centres_and_scales() {
        let mut v = vec![1.0, 2.0, 3.0];
        standardise(&mut v);
        assert!(v[1].abs() < 1e-12 && (v[2] + v[0]).abs() < 1e-12 && v[2] > 1.0);
        let mut c = vec![4.0, 4.0];
        standardise(&mut c);
        assert_eq!(c, vec![0.0, 0.0]);
    }
}
