//! Exact search: a scan over contiguous per-namespace blocks.
//!
//! Vectors of one namespace live back to back in one `Vec<f32>`, so a
//! filtered search touches only the namespaces it may see and streams their
//! memory linearly (the cache-friendly layout of a brute-force index). Removal
//! is `swap_remove` inside the block, O(dim). Blocks sit in a `Vec` and an
//! id's location is (block slot, row), so reading one stored vector costs a
//! single hash lookup (AtomRec reads neighbours' vectors millions of times
//! per run); a name → slot map keeps scans in namespace order. A block that
//! empties keeps its slot. Each row's score is an
//! 8-accumulator dot product ([`crate::dot`]); rows are scored four at a time
//! against the same query so its cache lines are reused across rows.

use crate::kernel::{dot, TopK};
use crate::{check_vector, Hit, IndexError, VectorIndex};
use evomem_core::{MemoryId, Namespace};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Queries scored together by [`FlatIndex::search_all_many`] (64 × 1.5 KB
/// at 384 dims).
const QUERY_TILE: usize = 64;
/// Rows per tile of [`FlatIndex::search_all_many`] (256 × 1.5 KB at 384
/// dims: with a query tile, about half a megabyte, which stays in L2).
const ROW_TILE: usize = 256;

/// Score `rows` (row-major, `d` wide, aligned with `ids`) against `query`
/// into `top`. Four rows per step: independent dot products interleave
/// well. Every scan of the index goes through here, so a row's score for a
/// query is the same bits whichever search computes it.
fn scan_rows<'a>(d: usize, rows: &[f32], ids: &'a [MemoryId], query: &[f32], top: &mut TopK<'a>) {
    let full = ids.len() / 4 * 4;
    let (head, tail) = rows.split_at((full * d).min(rows.len()));
    for (r, id) in head.chunks_exact(4 * d).zip(ids.chunks_exact(4)) {
        let (r0, rest) = r.split_at(d);
        let (r1, rest) = rest.split_at(d);
        let (r2, r3) = rest.split_at(d);
        let s = [
            dot(query, r0),
            dot(query, r1),
            dot(query, r2),
            dot(query, r3),
        ];
        for (score, id) in s.into_iter().zip(id) {
            top.push(score, id);
        }
    }
    for (row, id) in tail.chunks_exact(d).zip(ids.get(full..).unwrap_or(&[])) {
        top.push(dot(query, row), id);
    }
}

/// Vectors of one namespace, row-major.
#[derive(Debug, Clone)]
struct Block {
    ns: Namespace,
    ids: Vec<MemoryId>,
    data: Vec<f32>,
}

/// Exact flat index. See the module docs.
#[derive(Debug, Clone)]
pub struct FlatIndex {
    model_id: String,
    dim: usize,
    blocks: Vec<Block>,
    slot: BTreeMap<Namespace, usize>,
    loc: HashMap<MemoryId, (usize, usize)>,
}

impl FlatIndex {
    /// An empty index for `dim`-dimensional vectors of model `model_id`.
    pub fn new(model_id: impl Into<String>, dim: usize) -> Self {
        Self {
            model_id: model_id.into(),
            dim,
            blocks: Vec::new(),
            slot: BTreeMap::new(),
            loc: HashMap::new(),
        }
    }

    /// The stored vector of `id`.
    pub fn vector(&self, id: &MemoryId) -> Option<&[f32]> {
        let &(s, row) = self.loc.get(id)?;
        let b = self.blocks.get(s)?;
        b.data.get(row * self.dim..(row + 1) * self.dim)
    }

    /// The namespace of `id`.
    pub fn namespace_of(&self, id: &MemoryId) -> Option<&Namespace> {
        self.loc
            .get(id)
            .and_then(|&(s, _)| self.blocks.get(s))
            .map(|b| &b.ns)
    }

    /// Number of live vectors in `namespace`.
    pub fn namespace_len(&self, namespace: &Namespace) -> usize {
        self.block(namespace).map_or(0, |b| b.ids.len())
    }

    /// Approximate heap bytes held (vectors, ids, maps).
    pub fn memory_bytes(&self) -> usize {
        let ids: usize = self.loc.keys().map(|k| k.0.capacity() * 2 + 64).sum();
        let vecs: usize = self.blocks.iter().map(|b| b.data.capacity() * 4).sum();
        ids + vecs
    }

    fn block(&self, namespace: &Namespace) -> Option<&Block> {
        self.slot.get(namespace).and_then(|&s| self.blocks.get(s))
    }

    fn scan_block<'a>(&'a self, block: &'a Block, query: &[f32], top: &mut TopK<'a>) {
        scan_rows(self.dim.max(1), &block.data, &block.ids, query, top);
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
                for b in self.slot.values().filter_map(|&s| self.blocks.get(s)) {
                    self.scan_block(b, query, &mut top);
                }
            }
            Some(list) => {
                let wanted: BTreeSet<&Namespace> = list.iter().collect();
                for ns in wanted {
                    if let Some(b) = self.block(ns) {
                        self.scan_block(b, query, &mut top);
                    }
                }
            }
        }
        Ok(top.into_sorted())
    }

    /// [`VectorIndex::search_all`] for many queries in one pass: exactly the
    /// hits each query's own `search_all(query, k)` returns (the same
    /// kernel scores every (query, row) pair, and the top-k is a total
    /// order), at a fraction of the memory traffic. One query's scan streams
    /// the whole index from memory (154 MB for AtomRec's 100k atoms at 384
    /// dims), so scanning 943 queries one by one is bound by memory
    /// bandwidth; here the rows are read in tiles that stay in cache while
    /// a tile of queries is scored against them.
    pub fn search_all_many(
        &self,
        queries: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Vec<Hit>>, IndexError> {
        for q in queries {
            check_vector(self.dim, "<query>", q)?;
        }
        let d = self.dim.max(1);
        let mut tops: Vec<TopK<'_>> = queries.iter().map(|_| TopK::new(k)).collect();
        let blocks: Vec<&Block> = self
            .slot
            .values()
            .filter_map(|&s| self.blocks.get(s))
            .collect();
        for (qs, tile) in queries.chunks(QUERY_TILE).zip(tops.chunks_mut(QUERY_TILE)) {
            for b in &blocks {
                for (rows, ids) in b.data.chunks(ROW_TILE * d).zip(b.ids.chunks(ROW_TILE)) {
                    for (q, top) in qs.iter().zip(tile.iter_mut()) {
                        scan_rows(d, rows, ids, q, top);
                    }
                }
            }
        }
        Ok(tops.into_iter().map(TopK::into_sorted).collect())
    }

    /// Iterate over live entries, namespace by namespace (deterministic order
    /// within a namespace: insertion order as changed by removals).
    pub fn iter(&self) -> impl Iterator<Item = (&MemoryId, &Namespace, &[f32])> {
        let d = self.dim.max(1);
        self.slot
            .values()
            .filter_map(|&s| self.blocks.get(s))
            .flat_map(move |b| {
                b.ids
                    .iter()
                    .zip(b.data.chunks_exact(d))
                    .map(move |(id, v)| (id, &b.ns, v))
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
        let s = match self.slot.get(&namespace) {
            Some(&s) => s,
            None => {
                let s = self.blocks.len();
                self.blocks.push(Block {
                    ns: namespace.clone(),
                    ids: Vec::new(),
                    data: Vec::new(),
                });
                self.slot.insert(namespace, s);
                s
            }
        };
        let Some(block) = self.blocks.get_mut(s) else {
            return Ok(());
        };
        let row = block.ids.len();
        block.ids.push(id.clone());
        block.data.extend_from_slice(vector);
        self.loc.insert(id, (s, row));
        Ok(())
    }

    fn remove(&mut self, id: &MemoryId) -> bool {
        let Some((s, row)) = self.loc.remove(id) else {
            return false;
        };
        let d = self.dim;
        if let Some(block) = self.blocks.get_mut(s) {
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
