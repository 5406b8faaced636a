//! Identifiers and clocks shared by every layer.
//!
//! Users and items are interned into dense `u32` indices by the data loaders so
//! that baselines (BPR, item-kNN) can use them as array offsets; the original
//! string token is kept on [`crate::Item`] / [`crate::User`]. Memory records use
//! string ids chosen by the policy that creates them, so that a policy can refer
//! to a record it creates and links within the same batch of ops.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Dense index of a user inside one [`crate::Dataset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UserId(pub u32);

/// Dense index of an item inside one [`crate::Dataset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemId(pub u32);

impl UserId {
    /// The index as a `usize` array offset.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl ItemId {
    /// The index as a `usize` array offset.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Logical time: a position in the global replay order (0, 1, 2, ...).
///
/// Every interaction gets a unique logical time (its rank after sorting by
/// timestamp, ties broken by file order). A decision taken "at" logical time `t`
/// may only see interactions with logical time `< t`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct LogicalTime(pub u64);

impl fmt::Display for LogicalTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// Identifier of one memory record, unique within a store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemoryId(pub String);

impl MemoryId {
    /// Build an id from anything string-like.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Stable anonymous label of another user's record: `anon:` and the top 32
/// bits of the FNV-1a hash of its id, in hex.
///
/// A collaborative family ([`crate::family::Capabilities::collaborative`])
/// shows other users' records in recall and evidence paths under this label
/// only; readers of its decisions (the inspector, `evomem explain`) resolve a
/// label by hashing the ids in the op log.
pub fn anon_label(id: &MemoryId) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("anon:{:08x}", h >> 32)
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A namespace that scopes memory records: `user:<id>`, `item:<id>`,
/// `task:<id>`, `shared`, or a policy-specific one (`collab`, ...).
///
/// Every read names the namespaces it may see; that is how isolation between
/// users is enforced.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Namespace(pub String);

impl Namespace {
    /// The private namespace of one user (by its dataset token).
    pub fn user(token: &str) -> Self {
        Self(format!("user:{token}"))
    }
    /// The namespace of one item (by its dataset token).
    pub fn item(token: &str) -> Self {
        Self(format!("item:{token}"))
    }
    /// The namespace of one task.
    pub fn task(token: &str) -> Self {
        Self(format!("task:{token}"))
    }
    /// The pool shared by everyone.
    pub fn shared() -> Self {
        Self("shared".to_string())
    }
    /// Any other namespace.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The namespace as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// True when this is a `user:` namespace, i.e. private to one user.
    pub fn is_user_private(&self) -> bool {
        self.0.starts_with("user:")
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The label is part of run folders already written (decisions.jsonl of
    /// collaborative families): it must not change.
    #[test]
    fn anon_label_is_stable() {
        assert_eq!(anon_label(&MemoryId::new("atom:u1:0")), "anon:f7551680");
        assert_eq!(anon_label(&MemoryId::new("")), "anon:cbf29ce4");
    }
}
