//! `seqmem`: sequence memory. Every observed interaction is an event in its
//! user's memory, in order; every item gets a note that remembers which items
//! people consumed close to it in their sequences. A candidate is ranked by
//! how strongly the notes tie it to the user's latest items.
//!
//! Why: on ml-100k the next item depends most on the last few (the lesson of
//! SASRec), and what others consumed next after the same items is memory a
//! policy can keep and explain without training anything.
//!
//! **Memory.**
//! - *Events* (`user:<u>`, kind `event`): one per observed interaction,
//!   `seq:<u>:<n>` for the user's n-th item, text = the item's title.
//! - *Item notes* (`item:<i>`, kind `atom`): one per observed item, created
//!   on first sight; at every `maintain` the notes whose neighbourhood changed
//!   get their strongest co-consumed items (`co`, top [`NOTE_TOP`] with
//!   weights) and their pair count (`degree`) written as fields.
//!
//! **Co-consumption weight.** In every user's sequence, an item `c` that
//! comes `d ≤ window` positions after `j` adds `dist_decay^(d−1)` to the
//! forward weight `F(j, c)`. The weight between a recent item `j` and a
//! candidate `c` is `W(j, c) = F(j, c) + backward · F(c, j)`. `deg(x)` counts
//! the window pairs `x` takes part in, in either direction.
//!
//! **Score.** With the user's last `recent` items `j_0` (newest) … `j_{K−1}`:
//!
//! ```text
//! s(c) = [ Σ_p pos_decay^p · W(j_p, c) / deg(j_p)^src_norm ] / (deg(c) + 1)^cand_norm
//!        + 1e-6 · ln(1 + n_c)
//! ```
//!
//! where `n_c` is how often `c` was observed (a tie-break among candidates
//! no note ties to the user). `cand_norm` discounts items that co-occur with
//! everything (popular items), `src_norm` keeps one prolific recent item from
//! dominating. Every default was chosen on validation targets
//! (`--target valid`, ml-100k); see the closing note of issue 17.
//!
//! **Evidence.** Each candidate's two largest contributions become context
//! entries with a one-hop evidence path `event(j_p) → note(c)`
//! (`co-consumed`), so `evomem explain` shows which of the user's items tied
//! the top candidate to them, and how strongly. Other users appear only as
//! aggregate weights on the notes: no record of theirs is cited.
//!
//! **Working view.** The sequences, forward weights and degrees are a view
//! of the event records: the policy updates it by applying the very `create`
//! ops it emits ([`SeqView::apply`]), and a test rebuilds it from the op log.

use crate::registry::{Capabilities, Family, Grid, Key, KeyType, PolicyDeps, PolicySpec};
use evomem_core::{
    Catalog, ContextEntry, DecisionContext, DecisionQuery, DecisionTag, EvidencePath, Interaction,
    ItemId, MaintainTrigger, MemoryId, MemoryOp, MemoryRecord, Namespace, PlannedOp, Policy,
    PolicyCtx, PolicyError, Recall, RecordKind, UsageTrace, UsedMemory,
};
use std::collections::{BTreeSet, HashMap};

/// How many co-consumed items an item note lists.
pub const NOTE_TOP: usize = 10;

/// The `seqmem` family row.
pub const FAMILY: Family = Family {
    name: "seqmem",
    summary: "sequence memory: item notes of what people consumed near each item, scored against the user's latest items",
    keys: &[
        Key {
            name: "window",
            ty: KeyType::Count,
            default: "20",
            doc: "how many positions apart two items of one sequence still count as co-consumed",
        },
        Key {
            name: "recent",
            ty: KeyType::Count,
            default: "20",
            doc: "how many of the user's latest items are compared with each candidate",
        },
        Key {
            name: "pos_decay",
            ty: KeyType::Number,
            default: "0.7",
            doc: "weight of each older recent item relative to the next newer",
        },
        Key {
            name: "dist_decay",
            ty: KeyType::Number,
            default: "0.9",
            doc: "weight of a pair d positions apart: dist_decay^(d-1)",
        },
        Key {
            name: "backward",
            ty: KeyType::Number,
            default: "1",
            doc: "weight of candidates consumed before (not after) a recent item; 0 = forward transitions only",
        },
        Key {
            name: "src_norm",
            ty: KeyType::Number,
            default: "0.7",
            doc: "exponent of the recent item's pair count in the denominator",
        },
        Key {
            name: "cand_norm",
            ty: KeyType::Number,
            default: "0.45",
            doc: "exponent of the candidate's pair count in the denominator (0 = raw co-consumption)",
        },
    ],
    build,
    grids: &[Grid {
        name: "signals",
        doc: "ablation of the sequence-memory signals",
        specs: &[
            "seqmem",
            "seqmem[cand_norm=0]",
            "seqmem[src_norm=0]",
            "seqmem[backward=0]",
            "seqmem[recent=1]",
            "seqmem[window=1]",
            "seqmem[dist_decay=1]",
            "seqmem[pos_decay=1]",
        ],
    }],
    caps: Capabilities {
        decisions: &[DecisionTag::Rank],
        lifecycle_timeline: &[],
        evidence_paths: true,
        reports_growth: false,
        // Recall cites only the user's own events; other users reach the
        // decider as aggregate weights (like a baseline's scores), never as
        // records or items of theirs.
        collaborative: false,
        writes_memory: true,
    },
};

/// The scoring constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeqParams {
    /// Co-consumption window in positions.
    pub window: usize,
    /// Recent items compared.
    pub recent: usize,
    /// Position decay of recent items.
    pub pos_decay: f64,
    /// Distance decay of pairs.
    pub dist_decay: f64,
    /// Weight of backward pairs.
    pub backward: f64,
    /// Source normalisation exponent.
    pub src_norm: f64,
    /// Candidate normalisation exponent.
    pub cand_norm: f64,
}

fn build(spec: &PolicySpec, _deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let p = SeqParams {
        window: spec.get("window", 20)?,
        recent: spec.get("recent", 20)?,
        pos_decay: spec.get("pos_decay", 0.7)?,
        dist_decay: spec.get("dist_decay", 0.9)?,
        backward: spec.get("backward", 1.0)?,
        src_norm: spec.get("src_norm", 0.7)?,
        cand_norm: spec.get("cand_norm", 0.45)?,
    };
    let unit = |x: f64| x > 0.0 && x <= 1.0;
    if p.window == 0 || p.recent == 0 {
        return Err(PolicyError::Config(format!(
            "seqmem: `window` and `recent` must be at least 1, got window={}, recent={}",
            p.window, p.recent
        )));
    }
    if !unit(p.pos_decay) || !unit(p.dist_decay) {
        return Err(PolicyError::Config(format!(
            "seqmem: `pos_decay` and `dist_decay` must be in (0, 1], got {} and {}",
            p.pos_decay, p.dist_decay
        )));
    }
    for (k, v) in [
        ("backward", p.backward),
        ("src_norm", p.src_norm),
        ("cand_norm", p.cand_norm),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(PolicyError::Config(format!(
                "seqmem: `{k}` must be a finite number >= 0, got {v}"
            )));
        }
    }
    Ok(Box::new(SeqMem {
        name: spec.to_string(),
        view: SeqView::new(p.window, p.dist_decay),
        p,
        noted: BTreeSet::new(),
        dirty: BTreeSet::new(),
    }))
}

/// The working view of the event records: sequences, forward weights,
/// degrees and counts, by dense index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeqView {
    window: usize,
    dist_decay: f64,
    /// Items of each user, in observation order.
    seqs: HashMap<u32, Vec<u32>>,
    /// `fwd[j][c]`: forward co-consumption weight `F(j, c)`.
    fwd: Vec<HashMap<u32, f64>>,
    /// Window pairs per item, either direction.
    deg: Vec<u64>,
    /// Observations per item.
    count: Vec<u64>,
}

impl SeqView {
    /// An empty view.
    pub fn new(window: usize, dist_decay: f64) -> Self {
        Self {
            window,
            dist_decay,
            ..Self::default()
        }
    }

    /// Apply one op: `create` of a `seq:` event extends its user's sequence;
    /// every other op leaves the view alone. Returns the items whose
    /// neighbourhood changed.
    pub fn apply(&mut self, op: &MemoryOp) -> Vec<u32> {
        let MemoryOp::Create { record } = op else {
            return Vec::new();
        };
        if record.kind != RecordKind::Event || !record.id.as_str().starts_with("seq:") {
            return Vec::new();
        }
        let ix = |k: &str| {
            record
                .fields
                .get(k)
                .and_then(serde_json::Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        };
        let (Some(user), Some(item)) = (ix("user_ix"), ix("item_ix")) else {
            return Vec::new();
        };
        self.push(user, item)
    }

    fn push(&mut self, user: u32, item: u32) -> Vec<u32> {
        let need = item as usize + 1;
        if self.fwd.len() < need {
            self.fwd.resize_with(need, HashMap::new);
            self.deg.resize(need, 0);
            self.count.resize(need, 0);
        }
        self.count[item as usize] += 1;
        let seq = self.seqs.entry(user).or_default();
        let mut touched = vec![item];
        let mut w = 1.0;
        for &j in seq.iter().rev().take(self.window) {
            *self.fwd[j as usize].entry(item).or_insert(0.0) += w;
            self.deg[j as usize] += 1;
            self.deg[item as usize] += 1;
            touched.push(j);
            w *= self.dist_decay;
        }
        seq.push(item);
        touched
    }

    /// The user's items, oldest first.
    pub fn sequence(&self, user: u32) -> &[u32] {
        self.seqs.get(&user).map_or(&[], Vec::as_slice)
    }

    /// `W(j, c) = F(j, c) + backward · F(c, j)`.
    pub fn weight(&self, j: u32, c: u32, backward: f64) -> f64 {
        let f = |a: u32, b: u32| {
            self.fwd
                .get(a as usize)
                .and_then(|m| m.get(&b))
                .copied()
                .unwrap_or(0.0)
        };
        let fw = f(j, c);
        if backward > 0.0 {
            fw + backward * f(c, j)
        } else {
            fw
        }
    }

    /// Window pairs of `item`.
    pub fn degree(&self, item: u32) -> u64 {
        self.deg.get(item as usize).copied().unwrap_or(0)
    }

    /// Observations of `item`.
    pub fn count(&self, item: u32) -> u64 {
        self.count.get(item as usize).copied().unwrap_or(0)
    }

    /// The strongest co-consumed items of `item` (both directions, backward
    /// weight 1), best first, ties by index.
    pub fn top_neighbours(&self, item: u32, n: usize) -> Vec<(u32, f64)> {
        let mut all: HashMap<u32, f64> = self
            .fwd
            .get(item as usize)
            .map(|m| m.iter().map(|(&k, &v)| (k, v)).collect())
            .unwrap_or_default();
        for (j, m) in self.fwd.iter().enumerate() {
            if let (Some(&v), Ok(j)) = (m.get(&item), u32::try_from(j)) {
                *all.entry(j).or_insert(0.0) += v;
            }
        }
        let mut v: Vec<(u32, f64)> = all.into_iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }
}

/// One candidate's score and its largest contributions `(position, item, amount)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The score `s(c)`.
    pub score: f64,
    /// Contributions of recent items, largest first.
    pub parts: Vec<(usize, u32, f64)>,
}

/// Score `cand` against `recent` (newest first) under `p`.
pub fn score(view: &SeqView, p: &SeqParams, recent: &[u32], cand: u32) -> Scored {
    let denom = ((view.degree(cand) + 1) as f64).powf(p.cand_norm);
    let mut parts = Vec::new();
    let mut total = 0.0;
    let mut wp = 1.0;
    for (pos, &j) in recent.iter().enumerate() {
        let w = view.weight(j, cand, p.backward);
        if w > 0.0 {
            let src = (view.degree(j).max(1) as f64).powf(p.src_norm);
            let part = wp * w / src / denom;
            total += part;
            parts.push((pos, j, part));
        }
        wp *= p.pos_decay;
    }
    parts.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    Scored {
        score: total + 1e-6 * (1.0 + view.count(cand) as f64).ln(),
        parts,
    }
}

/// The policy.
struct SeqMem {
    name: String,
    p: SeqParams,
    view: SeqView,
    /// Items that have a note.
    noted: BTreeSet<u32>,
    /// Items whose note is out of date.
    dirty: BTreeSet<u32>,
}

fn event_id(user: &str, n: usize) -> MemoryId {
    MemoryId::new(format!("seq:{user}:{n}"))
}

fn note_id(item: &str) -> MemoryId {
    MemoryId::new(format!("seqnote:{item}"))
}

fn title(catalog: &Catalog, item: ItemId) -> &str {
    catalog.get(item).map_or("", |i| i.title.as_str())
}

fn token(catalog: &Catalog, item: u32) -> String {
    catalog
        .get(ItemId(item))
        .map_or_else(|| item.to_string(), |i| i.token.clone())
}

impl Policy for SeqMem {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        e: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let utok = ctx.user_token(e.user);
        let item_tok = token(ctx.catalog, e.item.0);
        let n = self.view.sequence(e.user.0).len();
        let mut ops = Vec::with_capacity(2);
        if self.noted.insert(e.item.0) {
            ops.push(
                PlannedOp::new(
                    MemoryOp::Create {
                        record: MemoryRecord::new(
                            note_id(&item_tok),
                            Namespace::item(&item_tok),
                            RecordKind::Atom,
                            title(ctx.catalog, e.item),
                            e.time,
                        )
                        .with_field("item", serde_json::json!(item_tok)),
                    },
                    "note",
                    "first observation of the item",
                )
                .with_sources(vec![e.time]),
            );
        }
        let event = MemoryOp::Create {
            record: MemoryRecord::new(
                event_id(&utok, n),
                Namespace::user(&utok),
                RecordKind::Event,
                title(ctx.catalog, e.item),
                e.time,
            )
            .with_field("item", serde_json::json!(item_tok))
            .with_field("item_ix", serde_json::json!(e.item.0))
            .with_field("user_ix", serde_json::json!(e.user.0))
            .with_field("pos", serde_json::json!(n)),
        };
        self.dirty.extend(self.view.apply(&event));
        ops.push(PlannedOp::new(event, "event", "observed interaction").with_sources(vec![e.time]));
        Ok(ops)
    }

    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        _trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut ops = Vec::with_capacity(dirty.len());
        for item in dirty {
            if !self.noted.contains(&item) {
                continue;
            }
            let top: Vec<serde_json::Value> = self
                .view
                .top_neighbours(item, NOTE_TOP)
                .into_iter()
                .map(|(c, w)| {
                    serde_json::json!([token(ctx.catalog, c), (w * 1000.0).round() / 1000.0])
                })
                .collect();
            let mut fields = std::collections::BTreeMap::new();
            fields.insert("co".to_string(), serde_json::Value::Array(top));
            fields.insert(
                "degree".to_string(),
                serde_json::json!(self.view.degree(item)),
            );
            ops.push(PlannedOp::new(
                MemoryOp::UpdateFields {
                    id: note_id(&token(ctx.catalog, item)),
                    fields,
                    text: None,
                    embedding: None,
                },
                "consolidate",
                "co-consumption changed since the last consolidation",
            ));
        }
        Ok(ops)
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        let utok = ctx.user_token(q.user);
        let seq = self.view.sequence(q.user.0);
        let recent: Vec<u32> = seq.iter().rev().take(self.p.recent).copied().collect();
        let mut scores = Vec::with_capacity(q.candidates().len());
        let mut entries = Vec::new();
        let mut trace = UsageTrace::for_query(q);
        let mut used: HashMap<usize, f64> = HashMap::new();
        for &c in q.candidates() {
            let s = score(&self.view, &self.p, &recent, c.0);
            scores.push(s.score);
            for &(pos, j, part) in s.parts.iter().take(2) {
                let n = seq.len() - 1 - pos;
                let from = event_id(&utok, n);
                let to = note_id(&token(ctx.catalog, c.0));
                *used.entry(n).or_insert(0.0) += part;
                entries.push(ContextEntry {
                    memory: Some(from.clone()),
                    item: Some(c),
                    text: format!(
                        "\"{}\" is often consumed within {} items of your recent \"{}\" ({} back; weight {part:.3e})",
                        title(ctx.catalog, c),
                        self.p.window,
                        title(ctx.catalog, ItemId(j)),
                        pos + 1,
                    ),
                    weight: part as f32,
                    embedding: None,
                    path: Some(EvidencePath {
                        nodes: vec![from, to],
                        relations: vec!["co-consumed".to_string()],
                        score: part as f32,
                    }),
                });
            }
        }
        let mut used: Vec<(usize, f64)> = used.into_iter().collect();
        used.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        trace.used = used
            .into_iter()
            .map(|(n, w)| UsedMemory {
                id: event_id(&utok, n),
                weight: w as f32,
            })
            .collect();
        Ok(Recall {
            context: DecisionContext {
                entries,
                scores: Some(scores),
                ..DecisionContext::default()
            },
            trace,
        })
    }

    fn stats(&self) -> serde_json::Value {
        let pairs: usize = self.view.fwd.iter().map(HashMap::len).sum();
        serde_json::json!({
            "users": self.view.seqs.len(),
            "notes": self.noted.len(),
            "forward_pairs": pairs,
        })
    }
}
