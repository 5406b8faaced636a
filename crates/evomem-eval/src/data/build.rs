//! Assembling a [`Dataset`]: interning tokens into dense ids and putting
//! interactions into the global replay order.
//!
//! Loaders push users, items and interactions in the order they meet them in
//! the files. [`Builder::finish`] sorts interactions by timestamp with a
//! *stable* sort, so equal timestamps keep that order, and gives each its
//! position as [`LogicalTime`].

use evomem_core::{
    Catalog, Dataset, Interaction, Item, ItemId, LogicalTime, SplitRole, User, UserId,
};
use std::collections::{BTreeMap, HashMap};

/// One interaction as met in the files, before sorting.
#[derive(Debug, Clone, Copy)]
struct Raw {
    user: UserId,
    item: ItemId,
    rating: Option<f32>,
    timestamp: i64,
    split: Option<SplitRole>,
}

/// Incrementally builds a [`Dataset`].
#[derive(Debug, Default)]
pub(crate) struct Builder {
    name: String,
    items: Vec<Item>,
    item_index: HashMap<String, ItemId>,
    users: Vec<User>,
    user_index: HashMap<String, UserId>,
    raw: Vec<Raw>,
    /// Per-user instructions.
    pub instructions: BTreeMap<UserId, String>,
    /// Per-user fixed candidate lists.
    pub candidates: BTreeMap<UserId, Vec<ItemId>>,
}

impl Builder {
    /// An empty builder for dataset `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Rename the dataset.
    pub fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    /// The id of item `token`, creating an item with empty metadata if new.
    pub fn item(&mut self, token: &str) -> ItemId {
        if let Some(&id) = self.item_index.get(token) {
            return id;
        }
        let id = ItemId(self.items.len() as u32);
        self.items.push(Item {
            id,
            token: token.to_string(),
            title: String::new(),
            text: BTreeMap::new(),
            categories: Vec::new(),
            attributes: BTreeMap::new(),
        });
        self.item_index.insert(token.to_string(), id);
        id
    }

    /// The id of item `token` if it exists.
    pub fn find_item(&self, token: &str) -> Option<ItemId> {
        self.item_index.get(token).copied()
    }

    /// Mutable access to an item created by [`Builder::item`].
    pub fn item_mut(&mut self, id: ItemId) -> Option<&mut Item> {
        self.items.get_mut(id.index())
    }

    /// The id of user `token`, creating a user without attributes if new.
    pub fn user(&mut self, token: &str) -> UserId {
        if let Some(&id) = self.user_index.get(token) {
            return id;
        }
        let id = UserId(self.users.len() as u32);
        self.users.push(User {
            id,
            token: token.to_string(),
            attributes: BTreeMap::new(),
        });
        self.user_index.insert(token.to_string(), id);
        id
    }

    /// The id of user `token` if it exists.
    pub fn find_user(&self, token: &str) -> Option<UserId> {
        self.user_index.get(token).copied()
    }

    /// Mutable access to a user created by [`Builder::user`].
    pub fn user_mut(&mut self, id: UserId) -> Option<&mut User> {
        self.users.get_mut(id.index())
    }

    /// Record an interaction (in file order).
    pub fn interact(
        &mut self,
        user: UserId,
        item: ItemId,
        rating: Option<f32>,
        timestamp: i64,
        split: Option<SplitRole>,
    ) {
        self.raw.push(Raw {
            user,
            item,
            rating,
            timestamp,
            split,
        });
    }

    /// Sort into the global replay order and build the dataset.
    pub fn finish(self) -> Dataset {
        let mut raw = self.raw;
        // Stable: equal timestamps keep the order in which they were pushed.
        raw.sort_by_key(|r| r.timestamp);
        let mut fixed_split = BTreeMap::new();
        let interactions = raw
            .iter()
            .enumerate()
            .map(|(k, r)| {
                let time = LogicalTime(k as u64);
                if let Some(s) = r.split {
                    fixed_split.insert(time, s);
                }
                Interaction {
                    user: r.user,
                    item: r.item,
                    rating: r.rating,
                    timestamp: r.timestamp,
                    time,
                }
            })
            .collect();
        Dataset {
            name: self.name,
            catalog: Catalog { items: self.items },
            users: self.users,
            interactions,
            instructions: self.instructions,
            candidates: self.candidates,
            fixed_split,
        }
    }
}

/// The split role of position `pos` in a sequence of length `len` under
/// leave-one-out: last = test, the one before = validation, the rest = train.
pub(crate) fn loo_role(pos: usize, len: usize) -> SplitRole {
    if pos + 1 == len {
        SplitRole::Test
    } else if pos + 2 == len {
        SplitRole::Valid
    } else {
        SplitRole::Train
    }
}

/// Keep the first occurrence of each id, in order.
pub(crate) fn dedup_keep_order(ids: Vec<ItemId>) -> Vec<ItemId> {
    let mut seen = std::collections::HashSet::new();
    ids.into_iter().filter(|i| seen.insert(*i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_push_order_and_ids_are_dense_first_seen() {
        let mut b = Builder::new("t");
        let (u1, u0) = (b.user("u1"), b.user("u0"));
        let (a, c) = (b.item("a"), b.item("c"));
        b.interact(u1, a, None, 5, None);
        b.interact(u0, c, Some(3.0), 2, None);
        b.interact(u0, a, None, 5, Some(SplitRole::Test));
        let d = b.finish();
        assert_eq!(d.users[0].token, "u1");
        assert_eq!(d.catalog.items[1].token, "c");
        let order: Vec<(u32, u32)> = d
            .interactions
            .iter()
            .map(|i| (i.user.0, i.item.0))
            .collect();
        assert_eq!(order, vec![(1, 1), (0, 0), (1, 0)]);
        for (k, i) in d.interactions.iter().enumerate() {
            assert_eq!(i.time, LogicalTime(k as u64));
        }
        assert_eq!(d.fixed_split.get(&LogicalTime(2)), Some(&SplitRole::Test));
    }

    #[test]
    fn loo_roles() {
        let r: Vec<SplitRole> = (0..4).map(|p| loo_role(p, 4)).collect();
        assert_eq!(
            r,
            vec![
                SplitRole::Train,
                SplitRole::Train,
                SplitRole::Valid,
                SplitRole::Test
            ]
        );
    }
}
