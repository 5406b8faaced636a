//! `mars[fit=auto]` (the default since issue 55; `fit=none` keeps the
//! given weights): fit the offline ranker's four weights (`content`,
//! `collab`, `prior`, `walk`, [`super::ranker`]) on the data at hand, from
//! validation decisions only.
//!
//! Why: the default weights were chosen on ml-100k's validation targets;
//! on data of another shape (implicit purchases, many light users, no
//! metadata) the terms weigh differently. seqmem, itemknn, BPR and AtomRec
//! fit their settings the same way, by the one rule of
//! [`evomem_kit::holdout`].
//!
//! **Decisions.** For every user with two or more observed interactions (a
//! seeded sample of `fit_users`), the latest one (the newest record of the
//! event tier) is held out: a policy never observes a test target, so in a
//! test run that is the user's validation interaction, and under `--target
//! valid` the one before it. Negatives: `fit_negatives` items the user never
//! touched in any observed interaction, from each pool of
//! [`evomem_kit::holdout::fit_pools`] (`fit_pool`; `auto` is both the
//! catalog and the observed items when fewer than half the catalog's items
//! were observed).
//!
//! **Features.** Each candidate's four standardised terms
//! ([`super::ranker::Ranker::terms`]) from the user's memory as it stood
//! before the held-out interaction, as far as that can be undone cheaply:
//! the event tier (for `E` and `R̄`) without the held-out event, recency
//! ranks counted from the event before it; familiarity without the held-out
//! interaction; relatedness `R(i, target)` with the user taken out of the
//! target's audience (when the held-out interaction was the user's only one
//! with that item); the walk with the held-out arrival's forward pairs taken
//! out ([`super::knowledge::Knowledge::latest_arrival`]). What stays (the residue): the event the held-out one
//! evicted from the FIFO (L_max) is not brought back; the preference chunks
//! and the profile are read as they are now, so a lifecycle round or
//! synthesis that read the held-out event has already folded its facets
//! into them (`F` and `P`); other users' later interactions count in
//! familiarity and relatedness, as at a real decision of the retrospective
//! protocol. Rebuilding chunks and profile without the held-out event would
//! cost a second lifecycle per user; the residue is named here and in the
//! docs instead.
//!
//! **Fit.** A pairwise logistic regression ([`evomem_kit::pairwise`], L2 1)
//! on the four terms, scored by 2-fold held-out MRR; the fitted weights
//! replace the spec's only with at least `fit_min` decisions and when their
//! held-out MRR beats the spec's weights on the same decisions of every
//! pool ([`evomem_kit::pairwise::choose_across`]); weights given in the spec
//! stay pinned. `metrics.json` → `stats.fit` reports both MRRs (overall and
//! per pool), the decisions and the weights.
//!
//! **Cost.** One tier read and one content scoring of `1 + fit_negatives`
//! candidates per fit decision (no role call, no lifecycle); the regression
//! is on four weights.

use super::knowledge::standardise;
use super::policy::Mars;
use super::ranker::{event_weight, Ranker};
use super::tiers::events_in;
use evomem_core::{DecisionContext, PolicyCtx, PolicyError, UsageTrace};
use evomem_kit::holdout::{self, Event, HoldOutSettings};
use evomem_kit::pairwise::{self, Decision, FitOptions, FitReport};
use std::collections::{BTreeMap, HashMap};

/// The ranker's weights in feature order (the keys they are given by).
pub const FEATURES: [&str; 4] = ["content", "collab", "prior", "walk"];

/// Settings of `fit` ([`crate::fit::FitSettings`] over the four weights).
pub type FitSettings = crate::fit::FitSettings<4>;

/// Each pool's decisions: its name and feature rows.
type PoolRows = Vec<(&'static str, Vec<Decision>)>;

/// The held-out decisions' feature rows, one set per pool of negatives
/// ([`holdout::fit_pools`]; module docs), the events they were drawn from,
/// and the pools' name.
fn decisions(
    p: &mut Mars,
    ctx: &PolicyCtx<'_>,
    s: &FitSettings,
    seed: u64,
) -> Result<(PoolRows, usize, &'static str), PolicyError> {
    // Users by id (namespaces are keyed by token; a token the user table
    // does not list is the dense index itself, as `PolicyCtx::user_token`).
    let ids: HashMap<&str, u32> = ctx
        .users
        .iter()
        .enumerate()
        .filter_map(|(k, u)| Some((u.token.as_str(), u32::try_from(k).ok()?)))
        .collect();
    let mut tiers = BTreeMap::new();
    for ns in ctx.memory.namespaces() {
        let Some(token) = ns.as_str().strip_prefix("user:") else {
            continue;
        };
        let Some(id) = ids.get(token).copied().or_else(|| token.parse().ok()) else {
            continue;
        };
        let events = events_in(ctx.memory, ns);
        if !events.is_empty() {
            tiers.insert(id, (token.to_string(), ns.clone(), events));
        }
    }
    // Every observed interaction of each user, the newest event last.
    let mut events: Vec<Event> = Vec::new();
    for (&u, (_, _, tier)) in &tiers {
        let Some(newest) = tier.last() else { continue };
        for &i in p.knowledge.items_of(u) {
            if i != newest.item {
                events.push((u, i, None));
            }
        }
        events.push((u, newest.item, None));
    }
    let n_items = ctx.catalog.len();
    let settings = HoldOutSettings {
        negatives: s.negatives,
        users: s.users,
        seed,
        pool: s.pool,
    };
    let (_, pools) = holdout::hold_out_pools(&events, n_items, &settings);
    let kinds: Vec<holdout::NegativePool> = pools.iter().map(|(k, _)| *k).collect();
    let from = holdout::pools_name(&kinds);
    let mut out = Vec::with_capacity(pools.len());
    for (pool, chosen) in &pools {
        out.push((pool.name(), pool_rows(p, ctx, &tiers, chosen)?));
    }
    Ok((out, events.len(), from))
}

/// A user's namespace token, namespace and event tier, by user index.
type Tiers = BTreeMap<u32, (String, evomem_core::Namespace, Vec<super::tiers::EventView>)>;

/// The feature rows of one pool's decisions (module docs, **Features**).
fn pool_rows(
    p: &mut Mars,
    ctx: &PolicyCtx<'_>,
    tiers: &Tiers,
    chosen: &[holdout::Held],
) -> Result<Vec<Decision>, PolicyError> {
    let domain = p.domain(ctx.catalog)?;
    let decay = p.cfg.recency_decay;
    let mut rows = Vec::with_capacity(chosen.len());
    for d in chosen {
        let Some((token, ns, tier)) = tiers.get(&d.user) else {
            continue;
        };
        let (u, target) = (d.user, d.target);
        let before = tier.get(..tier.len().saturating_sub(1)).unwrap_or(&[]);
        let mut candidates = vec![target];
        candidates.extend(&d.negatives);
        let mut evidence = p.read_tiers(
            ctx,
            ctx.memory,
            (token, ns),
            &candidates,
            (&mut DecisionContext::default(), &mut UsageTrace::default()),
        )?;
        if p.cfg.tiers.event {
            evidence.events = before
                .iter()
                .rev()
                .enumerate()
                .map(|(rank, e)| (e.item, event_weight(e.polarity, rank, decay)))
                .collect();
        }
        // The held-out interaction was the user's first with the target
        // unless the target is remembered earlier or was first seen earlier.
        let first = !before.iter().any(|e| e.item == target)
            && p.knowledge.items_of(u).last() == Some(&target);
        let knowledge = &p.knowledge;
        let mut prior: Vec<f64> = candidates
            .iter()
            .map(|&c| knowledge.familiarity_without(c, u64::from(c == target)))
            .collect();
        standardise(&mut prior);
        let relatedness = |a: u32, c: u32| {
            if first {
                knowledge.relatedness_without(a, c, u, target)
            } else {
                knowledge.relatedness(a, c)
            }
        };
        let walk = if p.cfg.tiers.event {
            let removed = knowledge.latest_arrival(u, target);
            knowledge.walk(&evidence.events, decay, &candidates, removed.as_ref())
        } else {
            Vec::new()
        };
        let ranker = Ranker {
            cfg: &p.cfg,
            facets: &domain.facets,
            items: &p.item_emb,
            knowledge,
        };
        let x = ranker.terms(&candidates, &evidence, &prior, &relatedness, walk);
        rows.push(Decision {
            target: x.first().map(|f| f.to_vec()).unwrap_or_default(),
            negatives: x.iter().skip(1).map(|f| f.to_vec()).collect(),
        });
    }
    Ok(rows)
}

/// Fit the ranker's weights (module docs) against `given` (the spec's, in
/// [`FEATURES`] order); returns the weights to use and the report.
pub fn run(
    p: &mut Mars,
    ctx: &PolicyCtx<'_>,
    s: &FitSettings,
    given: [f64; 4],
    seed: u64,
) -> Result<([f64; 4], FitReport), PolicyError> {
    let (ds, events, negatives_from) = decisions(p, ctx, s, seed)?;
    let opts = FitOptions {
        l2: 1.0,
        iterations: 50,
        pinned: s.pinned.to_vec(),
    };
    let pools: Vec<pairwise::Pool<'_>> = ds.iter().map(|(n, d)| (*n, d.as_slice())).collect();
    let choice = pairwise::choose_across(&pools, &given, &opts, s.min_decisions);
    let users = ds.iter().map(|(_, d)| d.len()).max().unwrap_or(0);
    let report = FitReport::new(&choice, &FEATURES, users, events, negatives_from);
    let w = std::array::from_fn(|k| choice.weights.get(k).copied().unwrap_or(0.0));
    Ok((w, report))
}
