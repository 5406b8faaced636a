//! Forward co-consumption between items, and the two-step walk over it.
//!
//! Why: on sparse sequence data (a few interactions per user, no item text)
//! most targets share no window with any item of the user, so a ranker that
//! reads only first-order co-consumption falls back to popularity. Two
//! steps along what people consumed *after* an item reach them. seqmem's
//! walk head, MARS's and AtomRec's walk terms all read this one structure,
//! so the three policies measure the same signal (issue 55).
//!
//! **Weights.** When an item `c` arrives in a user's sequence, each of the
//! user's `window` previous items `j` (the newest first, at distance `d =
//! 1, 2, …`) gains `decay^(d−1)` on the forward weight `F(j, c)`. The caller
//! keeps the sequences and hands the previous items to [`Successors::add`].
//!
//! **Walk.** With `P(a → b) = F(a, b) / Σ_x F(a, x)` (0 when `a` has no
//! successor) and start items `j_p` with weights `ω_p`,
//!
//! ```text
//! first(k) = Σ_p ω_p P(j_p → k) / Σ_p ω_p        h_walk(c) = Σ_k first(k) · P(k → c)
//! ```
//!
//! The first step is computed once per decision ([`Successors::first`]),
//! the second per candidate ([`FirstStep::reach`]: one lookup per item of
//! the first step), so the walk is exact at the cost of a few lookups.
//!
//! **Without the held-out item.** A run-time fit holds out each user's
//! latest item; [`Successors::without_latest`] describes what that item's
//! arrival added (`F(j, held)` for its `window` predecessors), and the
//! `*_without` variants read the weights as if it had never arrived, so a
//! fit never sees its own target through the walk.
//!
//! Determinism: per-item maps are summed per key, and the first step is
//! kept in item order, so a value is the same bits in every process.

use std::collections::HashMap;

/// The window of MARS's and AtomRec's walks: seqmem's `window` default.
pub const WINDOW: usize = 20;
/// Their pair decay, `DECAY^(d−1)` for a pair `d` apart: seqmem's
/// `dist_decay` default.
pub const DECAY: f64 = 0.9;
/// The floor inside a walk term's logarithm, `ln(EPS + h)`: seqmem's `eps`
/// default.
pub const EPS: f64 = 1e-4;

/// Forward co-consumption weights, by dense item index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Successors {
    window: usize,
    decay: f64,
    /// `fwd[j][c]`: `F(j, c)`.
    fwd: Vec<HashMap<u32, f64>>,
    /// `Σ_c F(j, c)`, summed in arrival order.
    total: Vec<f64>,
}

/// What one held-out arrival added: the item and, for each predecessor it
/// was paired with, the weight that pair gained.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Removed {
    held: u32,
    pairs: Vec<(u32, f64)>,
}

/// A walk's first step: `(item, share)` in item order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FirstStep(Vec<(u32, f64)>);

impl Successors {
    /// No weights yet; pairs up to `window` apart, a pair `d` apart weighs
    /// `decay^(d−1)`.
    pub fn new(window: usize, decay: f64) -> Self {
        Self {
            window,
            decay,
            ..Self::default()
        }
    }

    /// The window.
    pub fn window(&self) -> usize {
        self.window
    }

    fn grow(&mut self, item: u32) {
        let need = item as usize + 1;
        if self.fwd.len() < need {
            self.fwd.resize_with(need, HashMap::new);
            self.total.resize(need, 0.0);
        }
    }

    /// `item` arrives after `previous` (the user's items before it, the
    /// newest first; only the first `window` are read). Returns the
    /// predecessors it was paired with, the newest first.
    pub fn add(&mut self, previous: &[u32], item: u32) -> Vec<u32> {
        self.grow(item);
        let mut paired = Vec::with_capacity(self.window.min(previous.len()));
        let mut w = 1.0;
        for &j in previous.iter().take(self.window) {
            self.grow(j);
            if let (Some(m), Some(t)) =
                (self.fwd.get_mut(j as usize), self.total.get_mut(j as usize))
            {
                *m.entry(item).or_insert(0.0) += w;
                *t += w;
            }
            paired.push(j);
            w *= self.decay;
        }
        paired
    }

    /// `F(a, b)`.
    pub fn forward(&self, a: u32, b: u32) -> f64 {
        self.fwd
            .get(a as usize)
            .and_then(|m| m.get(&b))
            .copied()
            .unwrap_or(0.0)
    }

    /// `a`'s successors with their weights `F(a, ·)` (unordered).
    pub fn row(&self, a: u32) -> Option<&HashMap<u32, f64>> {
        self.fwd.get(a as usize)
    }

    /// Every item's row, in item order.
    pub fn rows(&self) -> impl Iterator<Item = (u32, &HashMap<u32, f64>)> {
        self.fwd
            .iter()
            .enumerate()
            .filter_map(|(j, m)| Some((u32::try_from(j).ok()?, m)))
    }

    /// Distinct pairs with a weight.
    pub fn pairs(&self) -> usize {
        self.fwd.iter().map(HashMap::len).sum()
    }

    /// `Σ_x F(a, x)`.
    pub fn out_total(&self, a: u32) -> f64 {
        self.total.get(a as usize).copied().unwrap_or(0.0)
    }

    /// `P(a → b)`; 0 when `a` has no successor.
    pub fn step(&self, a: u32, b: u32) -> f64 {
        let t = self.out_total(a);
        if t <= 0.0 {
            return 0.0;
        }
        self.forward(a, b) / t
    }

    /// What the arrival of `held` after `previous` (the items before it,
    /// newest first) added: [`Successors::add`]'s pairs and weights.
    pub fn without_latest(&self, previous: &[u32], held: u32) -> Removed {
        let mut pairs = Vec::new();
        let mut w = 1.0;
        for &j in previous.iter().take(self.window) {
            pairs.push((j, w));
            w *= self.decay;
        }
        Removed { held, pairs }
    }

    /// What `removed` took from `a`'s row: `F(a, held)`'s share and the total.
    fn taken(removed: Option<&Removed>, a: u32) -> f64 {
        removed.map_or(0.0, |r| {
            r.pairs.iter().filter(|p| p.0 == a).map(|p| p.1).sum()
        })
    }

    /// `P(a → b)` as if `removed`'s arrival had not happened.
    pub fn step_without(&self, a: u32, b: u32, removed: Option<&Removed>) -> f64 {
        let taken = Self::taken(removed, a);
        let t = self.out_total(a) - taken;
        if t <= 1e-12 {
            return 0.0;
        }
        let mut f = self.forward(a, b);
        if removed.is_some_and(|r| r.held == b) {
            f -= taken;
        }
        (f / t).max(0.0)
    }

    /// The first step from `starts` (`(item, ω)`): `Σ_p ω_p P(j_p → k) /
    /// Σ_p ω_p` for every `k` (module docs).
    pub fn first(&self, starts: &[(u32, f64)]) -> FirstStep {
        self.first_without(starts, None)
    }

    /// [`Successors::first`] as if `removed`'s arrival had not happened.
    pub fn first_without(&self, starts: &[(u32, f64)], removed: Option<&Removed>) -> FirstStep {
        let mut acc: HashMap<u32, f64> = HashMap::new();
        let mut norm = 0.0;
        for &(j, w) in starts {
            norm += w;
            let taken = Self::taken(removed, j);
            let t = self.out_total(j) - taken;
            let Some(m) = self.fwd.get(j as usize) else {
                continue;
            };
            if t <= 1e-12 {
                continue;
            }
            for (&k, &f) in m {
                let f = if removed.is_some_and(|r| r.held == k) {
                    f - taken
                } else {
                    f
                };
                if f > 0.0 {
                    *acc.entry(k).or_insert(0.0) += w * f / t;
                }
            }
        }
        if norm <= 0.0 {
            return FirstStep::default();
        }
        let mut v: Vec<(u32, f64)> = acc.into_iter().map(|(k, a)| (k, a / norm)).collect();
        v.sort_by_key(|x| x.0);
        FirstStep(v)
    }
}

impl FirstStep {
    /// `h_walk(c)`: the first step's shares times one more step to `c`.
    pub fn reach(&self, s: &Successors, c: u32) -> f64 {
        self.0.iter().map(|&(k, a)| a * s.step(k, c)).sum()
    }

    /// [`FirstStep::reach`] as if `removed`'s arrival had not happened.
    pub fn reach_without(&self, s: &Successors, c: u32, removed: Option<&Removed>) -> f64 {
        self.0
            .iter()
            .map(|&(k, a)| a * s.step_without(k, c, removed))
            .sum()
    }

    /// The items the first step reaches, with their shares, in item order.
    pub fn shares(&self) -> &[(u32, f64)] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sequences a→b→c and a→c, window 2, decay 0.5.
    fn small() -> Successors {
        let mut s = Successors::new(2, 0.5);
        // user 1: 0, 1, 2
        s.add(&[], 0);
        s.add(&[0], 1);
        s.add(&[1, 0], 2);
        // user 2: 0, 2
        s.add(&[], 0);
        s.add(&[0], 2);
        s
    }

    #[test]
    fn forward_weights_decay_with_distance() {
        let s = small();
        assert_eq!(s.forward(0, 1), 1.0);
        // 0 → 2: 0.5 (two apart in user 1) + 1 (next in user 2).
        assert_eq!(s.forward(0, 2), 1.5);
        assert_eq!(s.forward(1, 2), 1.0);
        assert_eq!(s.forward(2, 0), 0.0);
        assert_eq!(s.out_total(0), 2.5);
        assert!((s.step(0, 1) - 0.4).abs() < 1e-12);
        assert_eq!(s.step(2, 0), 0.0);
    }

    #[test]
    fn the_walk_is_two_steps_of_the_transition_probabilities() {
        let s = small();
        // From item 0 alone: first step {1: 0.4, 2: 0.6}; one more step to 2
        // goes only through 1 (P(1 → 2) = 1) and 2 has no successor.
        let f = s.first(&[(0, 1.0)]);
        assert_eq!(f.shares().len(), 2);
        assert!((f.reach(&s, 2) - 0.4).abs() < 1e-12);
        assert_eq!(f.reach(&s, 0), 0.0);
        // Weighted starts are normalised by their weights.
        let f = s.first(&[(0, 1.0), (1, 3.0)]);
        // first = {1: 0.4/4, 2: (0.6 + 3·1)/4}
        assert!((f.reach(&s, 2) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn without_the_latest_arrival_reads_as_if_it_never_happened() {
        let s = small();
        // User 2's latest item 2 (after 0) held out.
        let r = s.without_latest(&[0], 2);
        let mut before = Successors::new(2, 0.5);
        before.add(&[], 0);
        before.add(&[0], 1);
        before.add(&[1, 0], 2);
        before.add(&[], 0);
        for (a, b) in [(0, 1), (0, 2), (1, 2), (2, 0)] {
            assert!((s.step_without(a, b, Some(&r)) - before.step(a, b)).abs() < 1e-12);
        }
        let starts = [(0, 1.0), (1, 0.5)];
        let (f, g) = (s.first_without(&starts, Some(&r)), before.first(&starts));
        for c in 0..3 {
            let (x, y) = (f.reach_without(&s, c, Some(&r)), g.reach(&before, c));
            assert!((x - y).abs() < 1e-12, "{c}: {x} vs {y}");
        }
    }
}
