//! MARS's per-run embeddings, on the kit's [`EmbeddingCache`].
//!
//! - items: the first 1,000 characters of an item's full text, looked up by
//!   item index through a small index → text map (the text is built once per
//!   item), and warmed in one batch per decision;
//! - free texts ("category: text" of a chunk, a profile narrative): embedded
//!   one at a time, except the profiles written just before decisions, which
//!   are warmed in one batch (long texts, ~0.1 s each alone); cleared
//!   whenever the cache would hold more than 200,000 texts (profiles are
//!   mostly unique per synthesis, so an unbounded map would only grow).
//!
//! Both are derived state: a rerun rebuilds them from the catalog and the
//! memory it reads.

use evomem_core::{Catalog, EmbedError, Embedder, ItemId};
use evomem_kit::EmbeddingCache;
use std::collections::HashMap;

/// Characters of an item's full text that are embedded.
const ITEM_TEXT_CHARS: usize = 1000;
/// Free texts kept before the cache is cleared.
const TEXT_CAP: usize = 200_000;

/// Item embeddings by item index.
#[derive(Debug, Clone)]
pub struct ItemEmbeddings {
    texts: HashMap<u32, String>,
    cache: EmbeddingCache,
}

impl ItemEmbeddings {
    /// Empty, for vectors of `dim`.
    pub fn new(dim: usize) -> Self {
        Self {
            texts: HashMap::new(),
            cache: EmbeddingCache::new(dim),
        }
    }

    /// The embedded text of `item` (empty when it is not in the catalog).
    fn text(&mut self, catalog: &Catalog, item: u32) -> &str {
        self.texts.entry(item).or_insert_with(|| {
            catalog
                .get(ItemId(item))
                .map(|i| i.full_text().chars().take(ITEM_TEXT_CHARS).collect())
                .unwrap_or_default()
        })
    }

    /// Embed every item of `items` not cached yet, in one batch.
    pub fn warm(
        &mut self,
        embedder: &dyn Embedder,
        catalog: &Catalog,
        items: &[u32],
    ) -> Result<(), EmbedError> {
        let texts: Vec<String> = items
            .iter()
            .map(|&i| self.text(catalog, i).to_string())
            .collect();
        self.cache.warm(embedder, &texts)?;
        // `warm` skips empty texts; an item missing from the catalog still
        // gets the embedding of the empty text, as before.
        if texts.iter().any(String::is_empty) {
            self.cache.embed(embedder, "")?;
        }
        Ok(())
    }

    /// The cached embedding of `item` (after [`ItemEmbeddings::warm`]).
    pub fn get(&self, item: u32) -> Option<&[f32]> {
        self.texts.get(&item).and_then(|t| self.cache.get(t))
    }

    /// The embedding of `item`, embedding it now if needed.
    pub fn embed(
        &mut self,
        embedder: &dyn Embedder,
        catalog: &Catalog,
        item: u32,
    ) -> Result<Vec<f32>, EmbedError> {
        let text = self.text(catalog, item).to_string();
        self.cache.embed(embedder, &text)
    }
}

/// Free-text embeddings, capped (see the module docs).
#[derive(Debug, Clone)]
pub struct TextEmbeddings {
    cache: EmbeddingCache,
}

impl TextEmbeddings {
    /// Empty, for vectors of `dim`.
    pub fn new(dim: usize) -> Self {
        Self {
            cache: EmbeddingCache::new(dim).with_cap(TEXT_CAP),
        }
    }

    /// The embedding of `text`.
    pub fn embed(&mut self, embedder: &dyn Embedder, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.cache.embed(embedder, text)
    }

    /// Embed every text of `texts` not cached yet, in one call (the
    /// embedder batches it), so that later [`TextEmbeddings::embed`] calls
    /// find them. The vectors are the ones single calls would give.
    pub fn warm(&mut self, embedder: &dyn Embedder, texts: &[String]) -> Result<(), EmbedError> {
        self.cache.warm(embedder, texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evomem_core::Item;
    use evomem_kit::testing::TestEmbedder;
    use std::collections::BTreeMap;

    fn catalog() -> Catalog {
        let item = |i: u32, title: &str| Item {
            id: ItemId(i),
            token: format!("i{i}"),
            title: title.into(),
            text: BTreeMap::new(),
            categories: vec!["Noir".into()],
            attributes: BTreeMap::new(),
        };
        Catalog {
            items: vec![item(0, "Fargo"), item(1, "Heat"), item(2, "Fargo")],
        }
    }

    #[test]
    fn items_get_the_embedding_of_their_text() {
        let (e, c) = (TestEmbedder::default(), catalog());
        let mut items = ItemEmbeddings::new(e.dim());
        items.warm(&e, &c, &[2, 0, 1, 9]).unwrap();
        for i in [0u32, 1, 2] {
            let want = e.embed_one(&c.get(ItemId(i)).unwrap().full_text()).unwrap();
            assert_eq!(items.get(i).unwrap(), want.as_slice());
            assert_eq!(items.embed(&e, &c, i).unwrap(), want);
        }
        assert_eq!(items.get(9).unwrap(), e.embed_one("").unwrap().as_slice());
        assert!(items.get(5).is_none());
    }
}
