//! The policy's derived mirror of its atoms: embeddings, fields, links and
//! backlinks in dense arrays, so that linking and h-hop expansion do not scan
//! the store. It is rebuilt exactly from the ops the policy returns (every
//! change to it is made alongside the op that makes the same change in the
//! engine), so it is derived state in the sense of the `Policy` contract.

use super::roles::NoteView;
use evomem_core::{ItemId, LogicalTime, MemoryId, UserId};
use std::collections::HashMap;

/// Dense handle of an atom in the mirror.
pub type AtomIx = u32;

/// One atom as the policy sees it.
#[derive(Debug, Clone)]
pub struct AtomNode {
    /// Record id.
    pub id: MemoryId,
    /// Owner (`None` for item atoms).
    pub owner: Option<UserId>,
    /// The item the atom is about.
    pub item: ItemId,
    /// Creation time t.
    pub time: LogicalTime,
    /// Position in the owner's sequence (0 for item atoms).
    pub pos: u32,
    /// e.
    pub emb: Vec<f32>,
    /// c, K, G, X.
    pub view: NoteView,
    /// Outgoing links: (target, expansion weight = link weight × relation
    /// factor, relation index).
    pub out: Vec<(AtomIx, f32, u16)>,
    /// Incoming links: (source, weight, relation index).
    pub inn: Vec<(AtomIx, f32, u16)>,
    /// Times this atom was evolved.
    pub evolved: u32,
}

/// All atoms plus lookup tables.
#[derive(Debug, Default)]
pub struct AtomGraph {
    /// Atoms by handle.
    pub atoms: Vec<AtomNode>,
    /// Per user (by index): their atoms in time order.
    pub by_user: Vec<Vec<AtomIx>>,
    /// Item atom of each item.
    pub item_atom: HashMap<ItemId, AtomIx>,
    /// Per item: user atoms about it, in creation order.
    pub audience: HashMap<ItemId, Vec<AtomIx>>,
    /// Relation strings, interned.
    pub relations: Vec<String>,
    /// Number of links.
    pub n_links: usize,
}

impl AtomGraph {
    /// Add an atom; returns its handle.
    pub fn push(&mut self, node: AtomNode) -> AtomIx {
        let ix = self.atoms.len() as AtomIx;
        match node.owner {
            Some(u) => {
                if self.by_user.len() <= u.index() {
                    self.by_user.resize(u.index() + 1, Vec::new());
                }
                if let Some(v) = self.by_user.get_mut(u.index()) {
                    v.push(ix);
                }
                self.audience.entry(node.item).or_default().push(ix);
            }
            None => {
                self.item_atom.insert(node.item, ix);
            }
        }
        self.atoms.push(node);
        ix
    }

    /// Intern a relation string.
    pub fn relation_ix(&mut self, rel: &str) -> u16 {
        if let Some(i) = self.relations.iter().position(|r| r == rel) {
            return i as u16;
        }
        self.relations.push(rel.to_string());
        (self.relations.len() - 1) as u16
    }

    /// The relation string of an index.
    pub fn relation(&self, ix: u16) -> &str {
        self.relations
            .get(ix as usize)
            .map(String::as_str)
            .unwrap_or("related")
    }

    /// Add a link `from -> to`.
    pub fn link(&mut self, from: AtomIx, to: AtomIx, weight: f32, rel: u16) {
        if let Some(a) = self.atoms.get_mut(from as usize) {
            a.out.push((to, weight, rel));
        }
        if let Some(b) = self.atoms.get_mut(to as usize) {
            b.inn.push((from, weight, rel));
        }
        self.n_links += 1;
    }

    /// An atom by handle.
    pub fn get(&self, ix: AtomIx) -> Option<&AtomNode> {
        self.atoms.get(ix as usize)
    }

    /// A user's atoms.
    pub fn user_atoms(&self, u: UserId) -> &[AtomIx] {
        self.by_user
            .get(u.index())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// Small seam over nearest-neighbour search inside a candidate pool, so the
/// brute-force scan can be swapped for an `evomem_index::VectorIndex` when the
/// pool becomes the whole memory space.
pub trait NeighbourSearch {
    /// The `k` most similar pool members to `query` as `(handle, cosine)`,
    /// most similar first, ties by handle.
    fn top_k(
        &self,
        graph: &AtomGraph,
        query: &[f32],
        pool: &[AtomIx],
        k: usize,
    ) -> Vec<(AtomIx, f32)>;
}

/// Exact brute-force cosine search (vectors are unit length).
#[derive(Debug, Clone, Copy, Default)]
pub struct BruteForce;

impl NeighbourSearch for BruteForce {
    fn top_k(
        &self,
        graph: &AtomGraph,
        query: &[f32],
        pool: &[AtomIx],
        k: usize,
    ) -> Vec<(AtomIx, f32)> {
        let mut scored: Vec<(AtomIx, f32)> = pool
            .iter()
            .filter_map(|&ix| graph.get(ix).map(|a| (ix, evomem_core::dot(query, &a.emb))))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        scored
    }
}
