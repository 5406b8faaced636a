//! TIDE's `Predict` path: the delayed rating stream (Arena B). The same
//! three credits as in generation, on a rating decision
//! (`tide-recommendation-feedback-evolves-memory`, §3 and the delayed-feedback
//! experiment):
//!
//! - **Memories.** Per user (namespace `user:<token>`), guidelines of the form
//!   "this user rates genre G about +x stars away from their matched-control
//!   baseline": decision `{"genre": G}`, an offset, fitness evidence (error
//!   reduction), residual evidence, version and status.
//! - **Decision.** The frozen estimator: baseline b(u, i) = μ_u + b_i (the
//!   user's matured mean and the item's matured bias, each shrunk toward the
//!   global mean with `shrink` pseudo-ratings) plus the mean offset of the
//!   user's guidelines whose genre the item has (those are *used*; the
//!   others are retrieved but unused), clamped to 1–5.
//! - **Temporal credit.** A label counts only once it has matured (it
//!   arrives as feedback with `Outcome::value`); a guideline whose version
//!   changed between decision and label is not comparable and gets no credit.
//! - **Semantic credit.** Matched controls are the user's other matured
//!   ratings and the item's (the baseline); z_sem = 0 while the user has
//!   fewer than `min_controls` matured ratings at decision time. Fitness of
//!   a guideline is the error reduction it brought relative to the controls:
//!   |y − est₋ₘ| − |y − est|.
//! - **Responsibility.** Used (the trace; `trace=false`: every retrieved
//!   guideline) ∧ Align (its genre is one of the item's) ∧ CF (leave-one-out
//!   replay of the estimate moves it by at least `cf_eps`; `cf=false` skips
//!   the test). κ = 2 when no guideline covers any genre of the item: the
//!   residual y − b goes to per-(user, genre) novelty evidence, which
//!   becomes a parentless provisional guideline once it has `novel_min`
//!   labels, |mean| ≥ `novel_offset` and |mean| ≥ 2 se.
//! - **Governance.** A responsible guideline is revised (new version,
//!   offset = shrunk residual mean) when its residual evidence drifts more
//!   than 0.25 from its offset; promoted after `promote_n` credits with
//!   positive mean fitness; evicted when its mean fitness plus one standard
//!   error is below zero after `evict_n` credits; at most `capacity`
//!   guidelines per user (the weakest |offset|·√n/(√n+1) makes room).
//!
//! Recall reads only the user's namespace and never calls a role, so it
//! stays fast (ml-100k is 100k predictions); the candidate writer is called
//! only when a guideline is created or revised.

use super::guideline::{fields, Guideline, Mode, Stats};
use super::roles::{WriteInput, WriteRole};
use super::{Attribution, Edit, TideConfig};
use evomem_core::{
    ContextEntry, DecisionContext, DecisionQuery, Feedback, ItemId, LogicalTime, MemoryId,
    MemoryOp, Namespace, PlannedOp, PolicyCtx, PolicyError, Recall, RecordKind, RecordStatus,
    UsageTrace, UsedMemory, UserId,
};
use evomem_kit::RoleCaller;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Rating scale.
const LO: f64 = 1.0;
const HI: f64 = 5.0;
/// Prior global mean before any label has matured.
const PRIOR_MEAN: f64 = 3.5;
/// Residual drift that triggers a revision.
const REVISE_GAP: f64 = 0.25;

/// One retrieved guideline as the decision saw it.
#[derive(Debug, Clone)]
struct Seen {
    id: MemoryId,
    genre: String,
    offset: f64,
    version: u64,
    used: bool,
}

/// What a decision looked like, kept until its label matures (the frozen
/// inputs of the leave-one-out replay).
#[derive(Debug, Clone)]
struct Snapshot {
    item: ItemId,
    genres: Vec<String>,
    baseline: f64,
    estimate: f64,
    seen: Vec<Seen>,
    controls: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Sum {
    sum: f64,
    n: u64,
}

/// Derived state of the predict path (rebuilt from what the policy saw).
#[derive(Debug, Default)]
pub(super) struct PredictState {
    global: Sum,
    users: BTreeMap<u32, Sum>,
    items: BTreeMap<u32, Sum>,
    seen: BTreeSet<(u32, u32)>,
    novelty: BTreeMap<(u32, String), Stats>,
    pending: BTreeMap<u64, Snapshot>,
    pub(super) credits: u64,
    pub(super) created: u64,
    pub(super) revised: u64,
    pub(super) evicted: u64,
    pub(super) promoted: u64,
    pub(super) pending_dropped: u64,
}

/// The estimate from a baseline and the offsets of the used guidelines.
fn estimate(baseline: f64, offsets: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = offsets.fold((0.0, 0usize), |(s, n), o| (s + o, n + 1));
    let e = if n == 0 {
        baseline
    } else {
        baseline + s / n as f64
    };
    e.clamp(LO, HI)
}

impl PredictState {
    fn global_mean(&self) -> f64 {
        if self.global.n == 0 {
            PRIOR_MEAN
        } else {
            self.global.sum / self.global.n as f64
        }
    }

    /// b(u, i): shrunk user mean plus shrunk item bias.
    fn baseline(&self, user: UserId, item: ItemId, shrink: f64) -> f64 {
        let g = self.global_mean();
        let u = self.users.get(&user.0).copied().unwrap_or_default();
        let i = self.items.get(&item.0).copied().unwrap_or_default();
        let mu = (u.sum + shrink * g) / (u.n as f64 + shrink);
        let bi = (i.sum - i.n as f64 * g) / (i.n as f64 + shrink);
        (mu + bi).clamp(LO, HI)
    }

    /// Add a matured label to the control log (once per user and item).
    pub(super) fn record_label(&mut self, user: UserId, item: ItemId, y: f64) {
        if !self.seen.insert((user.0, item.0)) {
            return;
        }
        for s in [
            &mut self.global,
            self.users.entry(user.0).or_default(),
            self.items.entry(item.0).or_default(),
        ] {
            s.sum += y;
            s.n += 1;
        }
    }

    pub(super) fn recall(
        &mut self,
        cfg: &TideConfig,
        ctx: &PolicyCtx<'_>,
        q: &DecisionQuery,
        item: ItemId,
    ) -> Result<Recall, PolicyError> {
        let ns = [Namespace::user(&ctx.user_token(q.user))];
        let genres: Vec<String> = ctx
            .catalog
            .get(item)
            .map(|i| i.categories.clone())
            .unwrap_or_default();
        let baseline = self.baseline(q.user, item, cfg.shrink);
        let mut seen: Vec<(Seen, String)> = ctx
            .memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter(|r| r.field_str(fields::MODE) == Some("predict"))
            .filter_map(|r| {
                let genre = r
                    .fields
                    .get(fields::DECISIONS)
                    .and_then(|d| d.get("genre"))
                    .and_then(Value::as_str)?
                    .to_string();
                let used = genres.contains(&genre);
                Some((
                    Seen {
                        id: r.id.clone(),
                        offset: r
                            .fields
                            .get(fields::OFFSET)
                            .and_then(Value::as_f64)
                            .unwrap_or(0.0),
                        version: r
                            .fields
                            .get(fields::VERSION)
                            .and_then(Value::as_u64)
                            .unwrap_or(1),
                        genre,
                        used,
                    },
                    r.text.clone(),
                ))
            })
            .collect();
        // Used guidelines first, then the strongest offsets.
        seen.sort_by(|a, b| {
            b.0.used
                .cmp(&a.0.used)
                .then(b.0.offset.abs().total_cmp(&a.0.offset.abs()))
                .then(a.0.id.cmp(&b.0.id))
        });
        seen.truncate(cfg.k_ret.max(1));
        let est = estimate(
            baseline,
            seen.iter().filter(|s| s.0.used).map(|s| s.0.offset),
        );
        let mut trace = UsageTrace::for_query(q);
        let mut entries = Vec::with_capacity(seen.len());
        for (s, text) in &seen {
            if s.used {
                trace.used.push(UsedMemory {
                    id: s.id.clone(),
                    weight: s.offset as f32,
                });
            }
            entries.push(ContextEntry {
                memory: Some(s.id.clone()),
                item: Some(item),
                text: text.clone(),
                weight: if s.used { s.offset as f32 } else { 0.0 },
                embedding: None,
                path: None,
            });
        }
        let controls = self.users.get(&q.user.0).map_or(0, |u| u.n);
        self.pending.insert(
            q.decision_id,
            Snapshot {
                item,
                genres,
                baseline,
                estimate: est,
                seen: seen.into_iter().map(|s| s.0).collect(),
                controls,
            },
        );
        Ok(Recall {
            context: DecisionContext {
                profile: Some(format!(
                    "matched-control baseline {baseline:.2} (user mean and item bias); estimate {est:.2}"
                )),
                entries,
                estimate: Some(est),
                ..DecisionContext::default()
            },
            trace,
        })
    }

    pub(super) fn feedback(
        &mut self,
        cfg: &TideConfig,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let Some(y) = fb.outcome.value else {
            return Ok(Vec::new());
        };
        let Some(user) = fb.user else {
            return Ok(Vec::new());
        };
        let snap = self.pending.remove(&fb.decision_id);
        let item = fb.outcome.item.or(snap.as_ref().map(|s| s.item));
        if let Some(item) = item {
            self.record_label(user, item, y);
        }
        // C_temp: identity must match the decision's.
        let Some(snap) = snap.filter(|s| Some(s.item) == item) else {
            self.pending_dropped += 1;
            return Ok(Vec::new());
        };
        if cfg.edit == Edit::None {
            return Ok(Vec::new());
        }
        let token = ctx.user_token(user);
        let ns = Namespace::user(&token);
        // C_sem: enough matched controls at decision time.
        if snap.controls < cfg.min_controls as u64 {
            return Ok(Vec::new());
        }
        let traced: BTreeSet<&MemoryId> = fb.trace.used.iter().map(|u| &u.id).collect();
        let used_est = |skip: Option<&MemoryId>| {
            estimate(
                snap.baseline,
                snap.seen
                    .iter()
                    .filter(|s| s.used && Some(&s.id) != skip)
                    .map(|s| s.offset),
            )
        };
        let mut ops = Vec::new();
        let mut gone: BTreeSet<MemoryId> = BTreeSet::new();
        // Guidelines created by this feedback, not yet in memory: they count
        // against the capacity of a later creation in the same feedback.
        let mut fresh: Vec<(f64, MemoryId)> = Vec::new();
        let sources = vec![fb.decided_at, fb.observed_at];
        let mut covered = false;
        for s in &snap.seen {
            let Some(rec) = ctx.memory.get(&s.id) else {
                continue;
            };
            let Some(mut g) = Guideline::read(rec) else {
                continue;
            };
            covered |= snap.genres.contains(&s.genre);
            if g.version != s.version {
                continue; // not comparable: revised since the decision
            }
            let used = if cfg.trace {
                traced.contains(&s.id)
            } else {
                true
            };
            let align = snap.genres.contains(&s.genre);
            let without = used_est(Some(&s.id));
            let cf = (without - snap.estimate).abs() >= cfg.cf_eps;
            let responsible = match cfg.attribution {
                Attribution::Retrieved => true,
                Attribution::Tide => used && align && (cf || !cfg.cf),
            };
            if !responsible {
                continue;
            }
            self.credits += 1;
            let fit = (y - without).abs() - (y - snap.estimate).abs();
            g.fitness.entry("error".into()).or_default().push(fit);
            g.residual.push(y - without);
            g.last_used = fb.decided_at.0;
            let mut label = "credit";
            if cfg.edit == Edit::Evolve {
                let f = g.primary();
                if f.n >= cfg.evict_n && f.mean + f.se(0.5) < 0.0 {
                    self.evicted += 1;
                    gone.insert(g.id.clone());
                    ops.push(
                        PlannedOp::new(
                            MemoryOp::Forget { id: g.id.clone() },
                            "evict",
                            format!(
                                "mean error reduction {:+.3} over {} credits: removing it improves predictions",
                                f.mean, f.n
                            ),
                        )
                        .with_sources(sources.clone()),
                    );
                    continue;
                }
                if g.residual.n >= cfg.promote_n && (g.residual.mean - g.offset).abs() > REVISE_GAP
                {
                    let n = g.residual.n as f64;
                    g.offset = g.residual.mean * n / (n + cfg.shrink);
                    g.version += 1;
                    g.residual = Stats::default();
                    self.revised += 1;
                    label = "revise";
                }
                if g.status == RecordStatus::Provisional && f.n >= cfg.promote_n && f.mean > 0.0 {
                    self.promoted += 1;
                    ops.push(
                        PlannedOp::new(
                            MemoryOp::SetStatus {
                                id: g.id.clone(),
                                status: RecordStatus::Promoted,
                            },
                            "promote",
                            format!("mean error reduction {:+.3} over {} credits", f.mean, f.n),
                        )
                        .with_sources(sources.clone()),
                    );
                }
            }
            let text = if label == "revise" {
                Some(
                    caller
                        .call(
                            &WriteRole,
                            &WriteInput {
                                operation: "offset".into(),
                                decisions: g.decisions.clone(),
                                conditions: g.conditions.clone(),
                                offset: Some(g.offset),
                                parents: vec![g.line()],
                                evidence: format!(
                                    "residual evidence drifted from the offset (version {})",
                                    g.version - 1
                                ),
                            },
                            Some(&token),
                        )?
                        .text,
                )
            } else {
                None
            };
            ops.push(
                PlannedOp::new(
                    MemoryOp::UpdateFields {
                        id: g.id.clone(),
                        fields: g.evidence_fields(),
                        text,
                        embedding: None,
                    },
                    label,
                    format!(
                        "responsible for decision {} (used, aligned with genre {}, leave-one-out moves the estimate {:.2} -> {:.2}); error reduction {fit:+.3}",
                        fb.decision_id, s.genre, snap.estimate, without
                    ),
                )
                .with_sources(sources.clone()),
            );
        }
        // κ = 2: no guideline covers the item's genres.
        if !covered && cfg.attribution == Attribution::Tide {
            let r = y - snap.baseline;
            for genre in &snap.genres {
                let st = self.novelty.entry((user.0, genre.clone())).or_default();
                st.push(r);
                let st = *st;
                if st.n >= cfg.novel_min
                    && st.mean.abs() >= cfg.novel_offset
                    && st.mean.abs() >= 2.0 * st.se(0.5)
                {
                    self.novelty.remove(&(user.0, genre.clone()));
                    if let Some(mut more) = self.create(
                        cfg,
                        caller,
                        ctx,
                        &ns,
                        &token,
                        genre,
                        &st,
                        fb.observed_at,
                        &mut gone,
                        &mut fresh,
                    )? {
                        for o in &mut more {
                            o.sources = sources.clone();
                        }
                        ops.extend(more);
                    }
                }
            }
        }
        Ok(ops)
    }

    /// A parentless provisional guideline for `genre`, making room under the
    /// capacity when it beats the weakest.
    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        cfg: &TideConfig,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        ns: &Namespace,
        token: &str,
        genre: &str,
        st: &Stats,
        at: LogicalTime,
        gone: &mut BTreeSet<MemoryId>,
        fresh: &mut Vec<(f64, MemoryId)>,
    ) -> Result<Option<Vec<PlannedOp>>, PolicyError> {
        let score = |offset: f64, n: u64| {
            let r = (n as f64).sqrt();
            offset.abs() * r / (r + 1.0)
        };
        let n = st.n as f64;
        let offset = st.mean * n / (n + cfg.shrink);
        let mut ops = Vec::new();
        if cfg.edit == Edit::Evolve {
            let nsv = [ns.clone()];
            let mut present: Vec<(f64, MemoryId)> = ctx
                .memory
                .scan_kind(&nsv, &RecordKind::Guideline)
                .filter_map(Guideline::read)
                .filter(|g| g.mode == Mode::Predict && !gone.contains(&g.id))
                .map(|g| (score(g.offset, g.primary().n.max(g.residual.n)), g.id))
                .chain(fresh.iter().filter(|f| !gone.contains(&f.1)).cloned())
                .collect();
            if present.len() >= cfg.capacity {
                present.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let excess = present.len() + 1 - cfg.capacity;
                if present[..excess].iter().any(|p| p.0 >= score(offset, st.n)) {
                    return Ok(None);
                }
                for (s, id) in present.into_iter().take(excess) {
                    self.evicted += 1;
                    gone.insert(id.clone());
                    ops.push(PlannedOp::new(
                        MemoryOp::Forget { id },
                        "evict",
                        format!(
                            "capacity {} reached; weakest guideline (score {s:.3}) makes room",
                            cfg.capacity
                        ),
                    ));
                }
            }
        }
        let decisions = BTreeMap::from([("genre".to_string(), genre.to_string())]);
        let text = caller
            .call(
                &WriteRole,
                &WriteInput {
                    operation: "offset".into(),
                    decisions: decisions.clone(),
                    conditions: BTreeMap::new(),
                    offset: Some(offset),
                    parents: Vec::new(),
                    evidence: format!(
                        "{} matured ratings of {genre} items average {:+.2} from the matched-control baseline",
                        st.n, st.mean
                    ),
                },
                Some(token),
            )?
            .text;
        let mut g = Guideline::new(
            MemoryId::new(format!("tide:{token}:genre:{genre}:{}", at.0)),
            Mode::Predict,
            decisions,
            BTreeMap::new(),
            text,
            if cfg.edit == Edit::Append {
                "append"
            } else {
                "novel"
            },
            at,
        );
        g.offset = offset;
        g.residual = Stats::default();
        self.created += 1;
        fresh.push((score(offset, st.n), g.id.clone()));
        ops.push(PlannedOp::new(
            MemoryOp::Create {
                record: g.record(ns.clone()),
            },
            "candidate",
            format!(
                "confirmed novel evidence (kappa=2): {} ratings of {genre}, mean residual {:+.2}",
                st.n, st.mean
            ),
        ));
        Ok(Some(ops))
    }
}
