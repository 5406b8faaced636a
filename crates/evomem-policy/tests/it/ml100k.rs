//! Real ml-100k for the policy tests: a minimal reader (the real loader lives
//! in evomem-eval, above this crate) and one retrospective leave-one-out
//! harness with the eval harness's tie rule, so that every policy's
//! real-data test measures the same way.

use evomem_core::{
    Catalog, DecisionKind, DecisionQuery, Interaction, Item, ItemId, LogicalTime, MaintainTrigger,
    MemoryState, Policy, PolicyCtx, Recall, User, UserId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// ml-100k in the engine's types, with each user's history in time order.
pub struct Ml100k {
    pub catalog: Catalog,
    pub users: Vec<User>,
    /// Every interaction, sorted by (timestamp, file order); `time` is the
    /// position in this order.
    pub inters: Vec<Interaction>,
    /// User index → that user's interactions in time order.
    pub hist: BTreeMap<u32, Vec<Interaction>>,
}

/// ml-100k from the shared data folder (`evomem_kit::testing::shared_dataset`);
/// `None` when it is absent (that function logs the skip, and fails in CI).
pub fn load() -> Option<Ml100k> {
    let dir = evomem_kit::testing::shared_dataset("ml-100k")?;
    let item_txt = std::fs::read_to_string(dir.join("ml-100k.item")).unwrap();
    let mut tok2id = BTreeMap::new();
    let mut items = Vec::new();
    for line in item_txt.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        let id = items.len() as u32;
        tok2id.insert(f[0].to_string(), id);
        items.push(Item {
            id: ItemId(id),
            token: f[0].into(),
            title: f.get(1).unwrap_or(&"").to_string(),
            text: BTreeMap::new(),
            categories: f
                .get(3)
                .unwrap_or(&"")
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            attributes: BTreeMap::from([(
                "release_year".to_string(),
                f.get(2).unwrap_or(&"").to_string(),
            )]),
        });
    }
    let inter = std::fs::read_to_string(dir.join("ml-100k.inter")).unwrap();
    // User ids in order of first appearance in the file.
    let mut utok: BTreeMap<String, u32> = BTreeMap::new();
    let mut rows = Vec::new();
    for (n, line) in inter.lines().skip(1).enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let nu = utok.len() as u32;
        let u = *utok.entry(f[0].to_string()).or_insert(nu);
        rows.push((
            f[3].parse::<f64>().unwrap() as i64,
            n,
            u,
            tok2id[f[1]],
            f[2].parse::<f32>().unwrap(),
        ));
    }
    rows.sort_by_key(|r| (r.0, r.1));
    let inters: Vec<Interaction> = rows
        .iter()
        .enumerate()
        .map(|(k, (ts, _, u, i, r))| Interaction {
            user: UserId(*u),
            item: ItemId(*i),
            rating: Some(*r),
            timestamp: *ts,
            time: LogicalTime(k as u64),
        })
        .collect();
    let mut users: Vec<(u32, String)> = utok.into_iter().map(|(t, u)| (u, t)).collect();
    users.sort();
    let users = users
        .into_iter()
        .map(|(u, t)| User {
            id: UserId(u),
            token: t,
            attributes: BTreeMap::new(),
        })
        .collect();
    let mut hist: BTreeMap<u32, Vec<Interaction>> = BTreeMap::new();
    for i in &inters {
        hist.entry(i.user.0).or_default().push(*i);
    }
    Some(Ml100k {
        catalog: Catalog { items },
        users,
        inters,
        hist,
    })
}

/// What a leave-one-out run measured.
#[derive(Debug, Clone, Copy)]
pub struct Loo {
    /// Decisions (one per chosen user).
    pub n: usize,
    pub hr1: f64,
    pub hr5: f64,
    /// Wall time of the observe stream and the final `maintain`.
    pub observe: Duration,
    /// Wall time of the decisions.
    pub decide: Duration,
}

/// Retrospective leave-one-out over the `chosen` users: every interaction of
/// theirs but the last is observed in time order, then `maintain
/// (BeforeDecisions)` runs, then each user ranks their last item against 9
/// negatives drawn with a `ChaCha8Rng` seeded with `seed` (items the user
/// never interacted with).
///
/// The harness's tie rule: the ten candidates are shuffled with the same
/// RNG and ranked by [`evomem_core::metrics::rank_of_target`] (ties go to
/// the candidate listed first), so a tie never systematically favours the
/// target and a constant ranker scores chance (HR@1 = 0.1), not HR@1 = 1.
///
/// `inspect` sees every recall.
pub fn leave_one_out(
    policy: &mut dyn Policy,
    data: &Ml100k,
    chosen: &[u32],
    seed: u64,
    mut inspect: impl FnMut(&Recall),
) -> Loo {
    let (catalog, users) = (&data.catalog, &data.users);
    let started = Instant::now();
    let mut mem = MemoryState::new();
    let mut stream: Vec<Interaction> = chosen
        .iter()
        .flat_map(|u| data.hist[u][..data.hist[u].len() - 1].to_vec())
        .collect();
    stream.sort_by_key(|i| i.time);
    for ev in &stream {
        let ctx = PolicyCtx {
            memory: &mem,
            catalog,
            users,
            now: ev.time,
        };
        for op in policy.observe(&ctx, ev).unwrap() {
            mem.apply(&op.op, ev.time).unwrap();
        }
    }
    let end = LogicalTime(data.inters.len() as u64);
    let ctx = PolicyCtx {
        memory: &mem,
        catalog,
        users,
        now: end,
    };
    for op in policy
        .maintain(&ctx, MaintainTrigger::BeforeDecisions)
        .unwrap()
    {
        mem.apply(&op.op, end).unwrap();
    }
    let observe = started.elapsed();
    let started = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut hr1, mut hr5) = (0.0, 0.0);
    for (d, u) in chosen.iter().enumerate() {
        let h = &data.hist[u];
        let target = h[h.len() - 1];
        let seen: BTreeSet<u32> = h.iter().map(|i| i.item.0).collect();
        let mut cands = vec![target.item];
        while cands.len() < 10 {
            let c = rng.gen_range(0..catalog.len() as u32);
            if !seen.contains(&c) && !cands.contains(&ItemId(c)) {
                cands.push(ItemId(c));
            }
        }
        rand::seq::SliceRandom::shuffle(cands.as_mut_slice(), &mut rng);
        let target_index = cands.iter().position(|c| *c == target.item).unwrap();
        let q = DecisionQuery {
            decision_id: d as u64,
            user: UserId(*u),
            at: target.time,
            instruction: None,
            kind: DecisionKind::Rank { candidates: cands },
        };
        let ctx = PolicyCtx {
            memory: &mem,
            catalog,
            users,
            now: target.time,
        };
        let r = policy.recall(&ctx, &q).unwrap();
        let sc = r.context.scores.as_ref().unwrap();
        assert_eq!(sc.len(), 10, "one score per candidate");
        let rank = evomem_core::metrics::rank_of_target(sc, target_index);
        hr1 += f64::from(u8::from(rank == 1));
        hr5 += f64::from(u8::from(rank <= 5));
        inspect(&r);
    }
    let n = chosen.len();
    Loo {
        n,
        hr1: hr1 / n as f64,
        hr5: hr5 / n as f64,
        observe,
        decide: started.elapsed(),
    }
}
