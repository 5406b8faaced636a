//! Exact search: a scan over contiguous per-namespace blocks.
//!
//! Vectors of one namespace live back to back in one `Vec<f32>`, so a
//! filtered search touches only the namespaces it may see and streams their
//! memory linearly (the cache-friendly layout of a brute-force index). Removal
//! is `swap_remove` inside the block, O(dim). Each row's score is an
//! 8-accumulator dot product ([`crate::dot`]); rows are scored four at a time
//! against the same query so its cache lines are reused across rows.

use crate::kernel::{dot, TopK};
use crate::{check_vector, Hit, IndexError, VectorIndex};
use evomem_core::{MemoryId, Namespace};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Vectors of one namespace, row-major.
#[derive(Debug, Clone, Default)]
struct Block {
    ids: Vec<MemoryId>,
    data: Vec<f32>,
}

/// Exact flat index. See the module docs.
#[derive(Debug, Clone)]
pub struct FlatIndex {
    model_id: String,
    dim: usize,
    blocks: BTreeMap<Namespace, Block>,
    loc: HashMap<MemoryId, (Namespace, usize)>,
}

impl FlatIndex {
    /// An empty index for `dim`-dimensional vectors of model `model_id`.
    pub fn new(model_id: impl Into<String>, dim: usize) -> Self {
        Self {
            model_id: model_id.into(),
            dim,
            blocks: BTreeMap::new(),
            loc: HashMap::new(),
        }
    }

    /// The stored vector of `id`.
    pub fn vector(&self, id: &MemoryId) -> Option<&[f32]> {
        let (ns, row) = self.loc.get(id)?;
        let b = self.blocks.get(ns)?;
        b.data.get(row * self.dim..(row + 1) * self.dim)
    }

    /// The namespace of `id`.
    pub fn namespace_of(&self, id: &MemoryId) -> Option<&Namespace> {
        self.loc.get(id).map(|(ns, _)| ns)
    }

    /// Number of live vectors in `namespace`.
    pub fn namespace_len(&self, namespace: &Namespace) -> usize {
        self.blocks.get(namespace).map_or(0, |b| b.ids.len())
    }

    /// Approximate heap bytes held (vectors, ids, maps).
    pub fn memory_bytes(&self) -> usize {
        let ids: usize = self.loc.keys().map(|k| k.0.capacity() * 2 + 64).sum();
        let vecs: usize = self.blocks.values().map(|b| b.data.capacity() * 4).sum();
        ids + vecs
    }

    fn scan_block<'a>(&'a self, block: &'a Block, query: &[f32], top: &mut TopK<'a>) {
        let d = self.dim;
        let mut rows = block.data.chunks_exact(d.max(1)).zip(&block.ids);
        // Four rows per step: independent dot products interleave well.
        while let (Some(r0), Some(r1), Some(r2), Some(r3)) =
            (rows.next(), rows.next(), rows.next(), rows.next())
        {
            let s = [
                dot(query, r0.0),
                dot(query, r1.0),
                dot(query, r2.0),
                dot(query, r3.0),
            ];
            top.push(s[0], r0.1);
            top.push(s[1], r1.1);
            top.push(s[2], r2.1);
            top.push(s[3], r3.1);
        }
        // `chunks_exact` zipped with ids: the leftover (< 4) rows.
        let done = block.ids.len() / 4 * 4;
        for (row, id) in block.data.chunks_exact(d.max(1)).zip(&block.ids).skip(done) {
            top.push(dot(query, row), id);
        }
    }

    /// Exact top-k over the given namespaces (`None` = all).
    pub(crate) fn search_in(
        &self,
        query: &[f32],
        k: usize,
        namespaces: Option<&[Namespace]>,
    ) -> Result<Vec<Hit>, IndexError> {
        check_vector(self.dim, "<query>", query)?;
        let mut top = TopK::new(k);
        match namespaces {
            None => {
                for b in self.blocks.values() {
                    self.scan_block(b, query, &mut top);
                }
            }
            Some(list) => {
                let wanted: BTreeSet<&Namespace> = list.iter().collect();
                for ns in wanted {
                    if let Some(b) = self.blocks.get(ns) {
                        self.scan_block(b, query, &mut top);
                    }
                }
            }
        }
        Ok(top.into_sorted())
    }

    /// Iterate over live entries, namespace by namespace (deterministic order
    /// within a namespace: insertion order as changed by removals).
    pub fn iter(&self) -> impl Iterator<Item = (&MemoryId, &Namespace, &[f32])> {
        let d = self.dim.max(1);
        self.blocks.iter().flat_map(move |(ns, b)| {
            b.ids
                .iter()
                .zip(b.data.chunks_exact(d))
                .map(move |(id, v)| (id, ns, v))
        })
    }
}

impl VectorIndex for FlatIndex {
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn add(
        &mut self,
        id: MemoryId,
        namespace: Namespace,
        vector: &[f32],
    ) -> Result<(), IndexError> {
        check_vector(self.dim, id.as_str(), vector)?;
        self.remove(&id);
        let block = self.blocks.entry(namespace.clone()).or_default();
        let row = block.ids.len();
        block.ids.push(id.clone());
        block.data.extend_from_slice(vector);
        self.loc.insert(id, (namespace, row));
        Ok(())
    }

    fn remove(&mut self, id: &MemoryId) -> bool {
        let Some((ns, row)) = self.loc.remove(id) else {
            return false;
        };
        let d = self.dim;
        let mut emptied = false;
        if let Some(block) = self.blocks.get_mut(&ns) {
            let last = block.ids.len().saturating_sub(1);
            if row != last {
                // Move the last row into the hole.
                block.data.copy_within(last * d..(last + 1) * d, row * d);
                block.ids.swap(row, last);
                if let Some(moved) = block.ids.get(row) {
                    if let Some(entry) = self.loc.get_mut(moved) {
                        entry.1 = row;
                    }
                }
            }
            block.ids.pop();
            block.data.truncate(last * d);
            emptied = block.ids.is_empty();
        }
        if emptied {
            self.blocks.remove(&ns);
        }
        true
    }

    fn search(
        &self,
        query: &[f32],
        k: usize,
        namespaces: &[Namespace],
    ) -> Result<Vec<Hit>, IndexError> {
        self.search_in(query, k, Some(namespaces))
    }

    fn search_all(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError> {
        self.search_in(query, k, None)
    }

    fn len(&self) -> usize {
        self.loc.len()
    }

    fn contains(&self, id: &MemoryId) -> bool {
        self.loc.contains_key(id)
    }
}
