//! A small synthetic dataset generator for tests, doctests and demos.
//!
//! Users have a favourite genre and mostly pick items of it, so a policy that
//! remembers the user's history can beat one that does not. Timestamps are
//! interleaved across users and deliberately contain ties, so the global
//! replay order (timestamp, then generation order) is exercised.

use evomem_core::{Catalog, Dataset, Interaction, Item, ItemId, LogicalTime, User, UserId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

const GENRES: [&str; 5] = ["Action", "Comedy", "Drama", "Horror", "Jazz"];

/// A dataset of `n_users` users, each with `per_user` distinct interactions
/// over `n_items` items (requires `per_user <= n_items`), generated from `seed`.
pub fn synthetic_dataset(n_users: usize, n_items: usize, per_user: usize, seed: u64) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let items: Vec<Item> = (0..n_items)
        .map(|i| {
            let genre = GENRES[i % GENRES.len()];
            Item {
                id: ItemId(i as u32),
                token: format!("i{i}"),
                title: format!("{genre} title {i}"),
                text: BTreeMap::new(),
                categories: vec![genre.to_string()],
                attributes: BTreeMap::new(),
            }
        })
        .collect();
    let users: Vec<User> = (0..n_users)
        .map(|u| User {
            id: UserId(u as u32),
            token: format!("u{u}"),
            attributes: BTreeMap::new(),
        })
        .collect();
    // (timestamp, generation order, user, item)
    let mut raw: Vec<(i64, usize, u32, u32)> = Vec::new();
    for u in 0..n_users {
        let fav = rng.gen_range(0..GENRES.len());
        let mut taken = vec![false; n_items];
        let mut ts = rng.gen_range(0..20i64);
        for _ in 0..per_user.min(n_items) {
            let item = loop {
                let candidate = if rng.gen_bool(0.8) {
                    let slot = rng.gen_range(0..n_items.div_ceil(GENRES.len()));
                    (slot * GENRES.len() + fav).min(n_items - 1)
                } else {
                    rng.gen_range(0..n_items)
                };
                if !taken[candidate] {
                    break candidate;
                }
                if taken.iter().all(|t| *t) {
                    break candidate;
                }
                // Fall back to the first free item to guarantee progress.
                if rng.gen_bool(0.3) {
                    if let Some(free) = taken.iter().position(|t| !*t) {
                        break free;
                    }
                }
            };
            taken[item] = true;
            raw.push((ts, raw.len(), u as u32, item as u32));
            ts += rng.gen_range(0..3i64); // 0 creates timestamp ties
        }
    }
    raw.sort_by_key(|&(ts, order, _, _)| (ts, order));
    let interactions = raw
        .iter()
        .enumerate()
        .map(|(k, &(ts, _, u, i))| Interaction {
            user: UserId(u),
            item: ItemId(i),
            rating: Some(4.0),
            timestamp: ts,
            time: LogicalTime(k as u64),
        })
        .collect();
    Dataset {
        name: format!("synthetic-{n_users}x{n_items}"),
        catalog: Catalog { items },
        users,
        interactions,
        ..Dataset::default()
    }
}
