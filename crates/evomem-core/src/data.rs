//! The data model of a recommendation dataset: items, users, interactions,
//! optional natural-language instructions and fixed candidate lists.
//!
//! Loaders (in `evomem-eval`) produce a [`Dataset`]; protocols slice it into
//! decisions. Interactions are kept in *global replay order*: sorted by
//! timestamp, ties broken by the order in which they appear in the source file.
//! Their position in that order is their [`LogicalTime`].

use crate::ids::{ItemId, LogicalTime, UserId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One item of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Dense index.
    pub id: ItemId,
    /// The item's id in the source data.
    pub token: String,
    /// Human-readable title (may be empty).
    pub title: String,
    /// Free-text fields such as `description`, keyed by field name.
    pub text: BTreeMap<String, String>,
    /// Categories, genres or tags, most general first where the source orders them.
    pub categories: Vec<String>,
    /// Other scalar attributes (`release_year`, ...).
    pub attributes: BTreeMap<String, String>,
}

impl Item {
    /// A one-line description: title, categories and attributes.
    pub fn summary(&self) -> String {
        let mut s = self.title.clone();
        if !self.categories.is_empty() {
            s.push_str(" [");
            s.push_str(&self.categories.join(", "));
            s.push(']');
        }
        for (k, v) in &self.attributes {
            s.push_str(&format!(" {k}={v}"));
        }
        s
    }

    /// All text of the item (title, categories, text fields) for embedding.
    pub fn full_text(&self) -> String {
        let mut s = self.title.clone();
        if !self.categories.is_empty() {
            s.push_str(". ");
            s.push_str(&self.categories.join(", "));
        }
        for v in self.text.values() {
            s.push_str(". ");
            s.push_str(v);
        }
        s
    }
}

/// One user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// Dense index.
    pub id: UserId,
    /// The user's id in the source data.
    pub token: String,
    /// Attributes such as age or occupation.
    pub attributes: BTreeMap<String, String>,
}

/// One user-item interaction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    /// Who.
    pub user: UserId,
    /// What.
    pub item: ItemId,
    /// Explicit rating when the source has one.
    pub rating: Option<f32>,
    /// Source timestamp (Unix seconds) or, when the source has none, the
    /// position in the user's sequence.
    pub timestamp: i64,
    /// Position in the global replay order; unique.
    pub time: LogicalTime,
}

/// The role an interaction plays in a leave-one-out split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SplitRole {
    /// Training history.
    Train,
    /// The interaction just before the target.
    Valid,
    /// The target.
    Test,
}

/// The item catalog, indexable by [`ItemId`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Catalog {
    /// Items, `items[i].id == ItemId(i)`.
    pub items: Vec<Item>,
}

impl Catalog {
    /// The item with this id, if any.
    pub fn get(&self, id: ItemId) -> Option<&Item> {
        self.items.get(id.index())
    }
    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// True when the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A fully loaded dataset.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Dataset {
    /// Short name (`ml-100k`, `cds-100-user-dense`, ...).
    pub name: String,
    /// The catalog.
    pub catalog: Catalog,
    /// Users, `users[u].id == UserId(u)`.
    pub users: Vec<User>,
    /// All interactions in global replay order; `interactions[k].time == LogicalTime(k)`.
    pub interactions: Vec<Interaction>,
    /// Optional natural-language instruction per user.
    pub instructions: BTreeMap<UserId, String>,
    /// Fixed candidate lists from the source (e.g. AgentCF `.random`), per user.
    /// When present they replace sampled negatives; the target is always added.
    pub candidates: BTreeMap<UserId, Vec<ItemId>>,
    /// Splits fixed by the source (AgentCF train/valid/test files), by logical time.
    /// When empty, protocols derive leave-one-out splits themselves.
    pub fixed_split: BTreeMap<LogicalTime, SplitRole>,
}

impl Dataset {
    /// Interactions of one user in time order.
    pub fn user_history(&self, user: UserId) -> Vec<Interaction> {
        self.interactions
            .iter()
            .filter(|i| i.user == user)
            .copied()
            .collect()
    }

    /// Per-user histories in time order, indexed by user.
    pub fn histories(&self) -> Vec<Vec<Interaction>> {
        let mut out = vec![Vec::new(); self.users.len()];
        for i in &self.interactions {
            if let Some(h) = out.get_mut(i.user.index()) {
                h.push(*i);
            }
        }
        out
    }
}
