//! The interactions a baseline has been shown, indexed both ways.
//!
//! Every baseline keeps one of these and reads nothing else, which is what
//! makes them leakage-free: a score can only depend on interactions that went
//! through `observe`.

use evomem_core::Interaction;
use std::collections::HashSet;

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
    seen: HashSet<(u32, u32)>,
    /// Number of `observe` calls.
    pub n_events: u64,
}

impl Observed {
    /// Nothing observed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record one interaction.
    pub fn record(&mut self, e: &Interaction) {
        let (u, i) = (e.user.0, e.item.0);
        self.n_events += 1;
        grow(&mut self.item_counts, i as usize + 1);
        self.item_counts[i as usize] += 1;
        if self.seen.insert((u, i)) {
            grow(&mut self.user_items, u as usize + 1);
            grow(&mut self.item_users, i as usize + 1);
            self.user_items[u as usize].push(i);
            self.item_users[i as usize].push(u);
            self.pairs.push((u, i));
        }
    }

    /// True when `user` has been observed with `item`.
    pub fn has(&self, user: u32, item: u32) -> bool {
        self.seen.contains(&(user, item))
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

/// Extend `v` with defaults to at least `len` elements.
pub fn grow<T: Default + Clone>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize(len, T::default());
    }
}
